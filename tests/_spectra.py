"""Matrices with chosen spectra, and central finite differences."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


def unitary(n: int, dtype: torch.dtype, gen: torch.Generator) -> Tensor:
    X = torch.randn(n, n, dtype=dtype, generator=gen)
    Q, R = torch.linalg.qr(X)
    d = R.diagonal()
    return Q * (d / d.abs()).unsqueeze(-2)


def with_singular_values(
    s: Sequence[float], m: int, n: int, dtype=torch.float64, seed: int = 0
) -> Tensor:
    """``U diag(s) Vh`` (m x n) with random unitary U, V."""
    gen = torch.Generator().manual_seed(seed)
    k = min(m, n)
    assert len(s) == k
    U = unitary(m, dtype, gen)[:, :k]
    V = unitary(n, dtype, gen)[:, :k]
    S = torch.tensor(list(s), dtype=dtype)
    return (U * S) @ V.mH


def hermitian_with_eigenvalues(
    w: Sequence[float], dtype=torch.float64, seed: int = 0
) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    V = unitary(len(w), dtype, gen)
    A = (V * torch.tensor(list(w), dtype=dtype)) @ V.mH
    return (A + A.mH) / 2


def fd_grad(loss: Callable[[Tensor], Tensor], A: Tensor, h: float = 1e-5) -> Tensor:
    """Gradient of a real ``loss`` by the 4-point central stencil, entry by entry
    (real and imaginary parts for complex ``A``); float64 throughout."""
    A = A.detach()
    G = torch.zeros_like(A)
    scale = max(1.0, float(A.abs().max()))
    h = h * scale
    dirs = [1.0] + ([1j] if A.is_complex() else [])
    flat = G.view(-1)
    for idx in range(A.numel()):
        for d in dirs:
            E = torch.zeros_like(A).view(-1)
            E[idx] = d
            E = E.view_as(A)

            def f(t: float, E: Tensor = E) -> float:
                return float(loss(A + t * E))

            g = (8 * (f(h) - f(-h)) - (f(2 * h) - f(-2 * h))) / (12 * h)
            flat[idx] = flat[idx] + (g if d == 1.0 else 1j * g)
    return G


def grad(loss: Callable[[Tensor], Tensor], A: Tensor) -> Tensor:
    X = A.detach().clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    return g


def rel_err(a: Tensor, b: Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def random_like(A: Tensor, seed: int = 1, shape: Sequence[int] | None = None) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*(shape or A.shape), dtype=A.dtype, generator=gen)


def randn(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def hermitian(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0):
    X = randn(*shape, dtype=dtype, seed=seed)
    return X + X.mH


def spd(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0):
    X = randn(*shape, dtype=dtype, seed=seed)
    n = shape[-1]
    return X @ X.mH + n * torch.eye(n, dtype=dtype)
