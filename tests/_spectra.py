"""Test helpers: matrices with chosen spectra, gauge-stripped random cotangents,
central finite differences.

A module, not conftest.py, so that test files import the helpers by name
(pytest advises against importing conftest); fixtures live in conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

EPS34 = torch.finfo(torch.float64).eps ** 0.75  # the documented tolerance factor


def seeded_randn(*shape: int, dtype: torch.dtype, gen: torch.Generator) -> Tensor:
    """``torch.randn`` from the seeded CPU generator ``gen``, moved to the
    default device (``pytest --device``): the same numbers on every device."""
    X = torch.randn(*shape, dtype=dtype, generator=gen, device=gen.device)
    return X.to(torch.get_default_device())


def unitary(n: int, dtype: torch.dtype, gen: torch.Generator) -> Tensor:
    """Haar-random ``n x n`` unitary (orthogonal for real ``dtype``)."""
    X = seeded_randn(n, n, dtype=dtype, gen=gen)
    Q, R = torch.linalg.qr(X)
    d = R.diagonal()
    return Q * (d / d.abs()).unsqueeze(-2)


def matrix_with_spectrum(
    s: Sequence[float], m: int, n: int, dtype=torch.float64, seed: int = 0
) -> Tensor:
    """``U diag(s) V^H`` (``m x n``) with random unitary ``U``, ``V``."""
    gen = torch.Generator().manual_seed(seed)
    k = min(m, n)
    if len(s) != k:
        raise ValueError(f"need min(m, n) = {k} singular values, got {len(s)}")
    U = unitary(m, dtype, gen)[:, :k]
    V = unitary(n, dtype, gen)[:, :k]
    return (U * torch.tensor(list(s), dtype=dtype)) @ V.mH


def hermitian_with_spectrum(
    w: Sequence[float], dtype=torch.float64, seed: int = 0
) -> Tensor:
    """``V diag(w) V^H`` with a random unitary ``V``, exactly Hermitian."""
    gen = torch.Generator().manual_seed(seed)
    V = unitary(len(w), dtype, gen)
    A = (V * torch.tensor(list(w), dtype=dtype)) @ V.mH
    return (A + A.mH) / 2


def clusters(spectrum: Tensor) -> Tensor:
    """Pairs ``(i, j)`` closer than the documented default tolerance
    ``max|spectrum| * eps**(3/4)`` (diagonal included)."""
    tol = spectrum.abs().max() * torch.finfo(spectrum.dtype).eps ** 0.75
    return (spectrum.unsqueeze(-1) - spectrum.unsqueeze(-2)).abs() <= tol


def gauge_free_cotangent(
    U: Tensor, S: Tensor, Vh: Tensor, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """Random ``(gU, gS, gVh)`` for a thin SVD with no zero singular values,
    with the part that depends on the basis inside degenerate clusters removed:
    ``(J - J^H + K - K^H)_ij = 0`` on cluster pairs, ``J = U^H gU``,
    ``K = V^H gV`` (for complex input this includes ``Im(J_ii + K_ii) = 0``),
    and ``gS`` constant on each cluster."""
    gU, gS, gVh = (random_like(t, seed=seed + i) for i, t in enumerate((U, S, Vh)))
    gV, V, P = gVh.mH, Vh.mH, clusters(S)
    J, K = U.mH @ gU, V.mH @ gV
    X = P * (J - J.mH + K - K.mH) / 4  # anti-Hermitian
    return gU - U @ X, _cluster_mean(P, gS), (gV - V @ X).mH


def gauge_free_eigh_cotangent(
    w: Tensor, V: Tensor, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Random ``(gw, gV)`` with ``(K - K^H)_ij = 0`` on cluster pairs,
    ``K = V^H gV``, and ``gw`` constant on each cluster."""
    gw, gV, P = random_like(w, seed=seed), random_like(V, seed=seed + 1), clusters(w)
    K = V.mH @ gV
    return _cluster_mean(P, gw), gV - V @ (P * (K - K.mH) / 2)


def _cluster_mean(P: Tensor, g: Tensor) -> Tensor:
    """``g`` averaged over each cluster (``P``: the cluster pairs)."""
    P = P.to(g.dtype)
    return (P @ g.unsqueeze(-1)).squeeze(-1) / P.sum(-1)


def fd_grad(loss: Callable[[Tensor], Tensor], A: Tensor, h: float = 1e-5) -> Tensor:
    """Gradient of a real ``loss`` by the fourth-order central stencil
    ``(8 (f(h) - f(-h)) - (f(2h) - f(-2h))) / 12h``, entry by entry, with
    ``h`` scaled by ``max(1, max|A|)``; for complex ``A`` the real and
    imaginary parts are perturbed separately (torch's convention: the result
    is ``dL/dRe + i dL/dIm``)."""
    A = A.detach()
    G = torch.zeros_like(A)
    h = h * max(1.0, float(A.abs().max()))
    dirs = [1.0] + ([1j] if A.is_complex() else [])
    flat = G.view(-1)
    for idx in range(A.numel()):
        for d in dirs:
            E = torch.zeros_like(A).view(-1)
            E[idx] = d
            E = E.view_as(A)

            g = central4(lambda t, E=E: float(loss(A + t * E)), h)
            flat[idx] = flat[idx] + (g if d == 1.0 else 1j * g)
    return G


def fd_jacobian(f: Callable[[Tensor], Tensor], A: Tensor, h: float = 1e-5) -> Tensor:
    """Jacobian ``d f(A) / d A`` of a real function of a real ``A``, shape
    ``f(A).shape + A.shape``, by the same fourth-order central stencil."""
    A = A.detach()
    cols = []
    for i in range(A.numel()):
        E = torch.zeros(A.numel(), dtype=A.dtype, device=A.device)
        E[i] = 1.0
        E = E.view_as(A)
        cols.append(central4(lambda t, E=E: f(A + t * E), h).detach().flatten())
    return torch.stack(cols, dim=-1).view(*f(A).shape, *A.shape)


def fd_directional(
    f: Callable[[Tensor], Tensor], A: Tensor, dA: Tensor, h: float = 1e-4
):
    """``d/dt f(A + t dA)`` at 0 by the same stencil, ``f`` evaluated
    without autograd."""
    A, dA = A.detach(), dA.detach()
    with torch.no_grad():
        return central4(lambda t: f(A + t * dA), h)


def central4(g: Callable[[float], Any], h: float) -> Any:
    """``g'(0)`` by the fourth-order central stencil
    ``(8 (g(h) - g(-h)) - (g(2h) - g(-2h))) / 12h``."""
    return (8 * (g(h) - g(-h)) - (g(2 * h) - g(-2 * h))) / (12 * h)


def grad(loss: Callable[[Tensor], Tensor], A: Tensor) -> Tensor:
    """``d loss / d A`` by autograd, on a detached copy of ``A``."""
    X = A.detach().clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    return g


def rel_err(a: Tensor, b: Tensor) -> float:
    """``max|a - b| / max|b|`` (max-norm relative error against ``b``)."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def inner(X: Tensor, W: Tensor) -> Tensor:
    """``Re <X, W>``: a real, linear test loss for real and complex ``X``."""
    return (X * W.conj()).real.sum()


def random_like(A: Tensor, seed: int = 1, shape: Sequence[int] | None = None) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return seeded_randn(*(shape or A.shape), dtype=A.dtype, gen=gen).to(A.device)


def randn(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return seeded_randn(*shape, dtype=dtype, gen=g)


def hermitian(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0):
    X = randn(*shape, dtype=dtype, seed=seed)
    return X + X.mH


def spd(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0):
    X = randn(*shape, dtype=dtype, seed=seed)
    n = shape[-1]
    return X @ X.mH + n * torch.eye(n, dtype=dtype)


def topk_loss(U, S, Vh, W):
    """A top-k loss gauge invariant at a gap: ``U Vh``, a projector,
    ``sum(S^2)`` (tests/test_topk*.py)."""
    P = U @ U.mH
    return (
        ((U @ Vh) * W.conj()).real.sum()
        + (S**2).sum()
        + (P[..., :3, :].abs() ** 2).sum()
    )
