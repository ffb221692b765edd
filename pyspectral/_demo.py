"""``python -m pyspectral demo``: gradients at degenerate spectra.

Each case is a smooth (gauge-invariant) loss of a random matrix with a chosen,
degenerate spectrum. Its gradient through ``torch.linalg`` and through
pyspectral is compared with central finite differences in float64.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

import pyspectral as ps

from . import _linalg

TOL = 1e-6  # a pyspectral row passes when its relative error is below this
W6 = (-1.0, 0.5, 2.0, 2.0, 2.0, 3.0)  # eigenvalues of the eigh projector cases
DTYPE = torch.float64
CDTYPE = torch.complex128


class Case(NamedTuple):
    name: str
    A: Tensor
    torch_loss: Callable[[Tensor], Tensor]
    ps_loss: Callable[[Tensor], Tensor]
    used: str  # the pyspectral call, for the table


# ------------------------------------------------------------ test matrices


def _orthonormal(g: torch.Generator, m: int, k: int, dtype: torch.dtype) -> Tensor:
    Q, _ = _linalg.qr(torch.randn(m, k, generator=g, dtype=dtype))
    return Q


def with_singular_values(
    g: torch.Generator, m: int, n: int, s: tuple, dtype: torch.dtype = DTYPE
) -> Tensor:
    """A random ``m x n`` matrix whose singular values are exactly ``s``."""
    k = len(s)
    U, V = _orthonormal(g, m, k, dtype), _orthonormal(g, n, k, dtype)
    return (U * torch.tensor(s, dtype=DTYPE).to(dtype)) @ V.mH


def with_eigenvalues(g: torch.Generator, w: tuple) -> Tensor:
    """A random real symmetric matrix whose eigenvalues are exactly ``w``."""
    V = _orthonormal(g, len(w), len(w), DTYPE)
    A = (V * torch.tensor(w, dtype=DTYPE)) @ V.mT
    return (A + A.mT) / 2


def _inner(X: Tensor, W: Tensor) -> Tensor:
    """Real inner product ``Re tr(W^H X)``."""
    return torch.real((W.conj() * X).sum())


def _herm(X: Tensor) -> Tensor:
    # eigh reads one triangle; differentiating through (X + X^H)/2 makes the
    # loss a function of every entry, so all gradients are comparable.
    return (X + X.mH) / 2


def _torch_svd(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return _linalg.svd(A, full_matrices=False)


def _torch_top3(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    U, S, Vh = _torch_svd(A)
    return U[:, :3], S[:3], Vh[:3]


# Losses of (U, S, Vh) and a weight W; all smooth and gauge invariant.
def polar(U: Tensor, S: Tensor, Vh: Tensor, W: Tensor) -> Tensor:
    return _inner(U @ Vh, W)


def top3_projector(U: Tensor, S: Tensor, Vh: Tensor, W: Tensor) -> Tensor:
    return _inner(U[:, :3] @ U[:, :3].mH, W)


def projector(U: Tensor, S: Tensor, Vh: Tensor, W: Tensor) -> Tensor:
    return _inner(U @ U.mH, W)


def reconstruct(U: Tensor, S: Tensor, Vh: Tensor, W: Tensor) -> Tensor:
    return _inner((U * S) @ Vh, W)


def trace_plus_polar(U: Tensor, S: Tensor, Vh: Tensor, W: Tensor) -> Tensor:
    return S.sum() + _inner(U @ Vh, W)


# -------------------------------------------------------------------- cases


def cases(seed: int = 0) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    out: list[Case] = []

    def case(name, A, torch_loss, ps_loss, used, w_shape=None) -> None:
        """Losses are ``loss(X, W)``, with a random weight W drawn here (of
        the shape of A unless ``w_shape`` is given)."""
        W = torch.randn(w_shape or A.shape, generator=g, dtype=A.dtype)
        out.append(
            Case(name, A, lambda X: torch_loss(X, W), lambda X: ps_loss(X, W), used)
        )

    def svd_case(name: str, A: Tensor, f: Callable, w_shape=None) -> None:
        case(
            name,
            A,
            lambda X, W: f(*_torch_svd(X), W),
            lambda X, W: f(*ps.svd(X, full_matrices=False), W),
            "svd",
            w_shape,
        )

    def eigh_projector(eigh: Callable) -> Callable[[Tensor, Tensor], Tensor]:
        def loss(X: Tensor, W: Tensor) -> Tensor:
            V = eigh(_herm(X))[1][:, 2:5]  # the eigenspace of w = 2
            return _inner(V @ V.mH, W)

        return loss

    def sqrt_torch(X: Tensor, W: Tensor) -> Tensor:
        w, V = _linalg.eigh(_herm(X))
        return _inner((V * w.sqrt()) @ V.mH, W)

    A = with_singular_values(g, 6, 5, (5, 2, 2, 1, 0.5))
    case(
        "reconstruct <U S Vh, W>, s=(5,2,2,1,.5)",
        A,
        lambda X, W: reconstruct(*_torch_svd(X), W),
        lambda X, W: _inner(ps.svd_function(X, ("pow", 1)), W),
        'svd_function(A, ("pow", 1))',
    )
    svd_case("polar <U Vh, W>, s=(5,2,2,1,.5)", A, polar)
    svd_case("top-3 projector U3 U3^H, s=(5,2,2,1,.5)", A, top3_projector, (6, 6))
    svd_case(
        "wide 4x7 polar, s=(3,1,1,.5)",
        with_singular_values(g, 4, 7, (3, 1, 1, 0.5)),
        polar,
    )
    svd_case(
        "orthogonal 5x5 polar, s=(1,1,1,1,1)",
        with_singular_values(g, 5, 5, (1,) * 5),
        polar,
    )
    svd_case(
        "6x4 projector U U^H, s=(2,2,2,2)",
        with_singular_values(g, 6, 4, (2,) * 4),
        projector,
        (6, 6),
    )
    svd_case(
        "complex 5x4 polar, s=(3,2,2,1)",
        with_singular_values(g, 5, 4, (3, 2, 2, 1), CDTYPE),
        polar,
    )
    case(
        "top-3 of 8x6 sum(S)+<U Vh, W>, s=(4,3,3,1,1,.5)",
        with_singular_values(g, 8, 6, (4, 3, 3, 1, 1, 0.5)),
        lambda X, W: trace_plus_polar(*_torch_top3(X), W),
        lambda X, W: trace_plus_polar(*ps.svd(X, k=3), W),
        "svd(A, k=3)",
    )
    for name, H in (
        ("eigh projector on w=2, w=(-1,.5,2,2,2,3)", with_eigenvalues(g, W6)),
        # LAPACK returns the repeated eigenvalue of a diagonal matrix bit for
        # bit, so the computed gaps are exactly 0.
        (
            "same, diagonal input diag(-1,.5,2,2,2,3)",
            torch.diag(torch.tensor(W6, dtype=DTYPE)),
        ),
    ):
        case(name, H, eigh_projector(_linalg.eigh), eigh_projector(ps.eigh), "eigh")
    case(
        "eigh sqrt V sqrt(w) V^H, w=(.25,1,1,4,4)",
        with_eigenvalues(g, (0.25, 1, 1, 4, 4)),
        sqrt_torch,
        lambda X, W: _inner(ps.matrix_function(_herm(X), "sqrt"), W),
        'matrix_function(A, "sqrt")',
    )
    return out


# ---------------------------------------------------------------- measuring


def finite_difference(loss: Callable[[Tensor], Tensor], A: Tensor) -> Tensor:
    """Central differences of a real loss; for complex ``A`` the real and
    imaginary parts are perturbed separately (torch's convention for the
    gradient of a real function of a complex input: d/dRe + i d/dIm)."""
    h = 1e-6 * float(A.abs().max())
    G = torch.zeros_like(A)
    flat, gflat = A.reshape(-1), G.view(-1)
    with torch.no_grad():
        for i in range(flat.numel()):
            for step in (1, 1j) if A.is_complex() else (1,):
                E = torch.zeros_like(flat)
                E[i] = h * step
                d = float(loss((flat + E).reshape(A.shape))) - float(
                    loss((flat - E).reshape(A.shape))
                )
                gflat[i] += step * d / (2 * h)
    return G


def relative_error(
    loss: Callable[[Tensor], Tensor], A: Tensor, ref: Tensor
) -> str | float:
    """``|grad - ref| / |ref|``, or the error the gradient computation raised."""
    X = A.clone().requires_grad_(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (grad,) = torch.autograd.grad(loss(X), X)
    except Exception as err:  # noqa: BLE001 - reported in the table
        return f"error: {type(err).__name__}"
    if any(issubclass(w.category, ps.GaugeWarning) for w in caught):
        return "GaugeWarning"
    if not bool(torch.isfinite(grad).all()):
        return float("nan")
    return float((grad - ref).norm() / ref.norm())


def _fmt(r: str | float) -> str:
    return r if isinstance(r, str) else ("NaN" if r != r else f"{r:.1e}")


def run(seed: int = 0, out=sys.stdout) -> int:
    """Print the table; return 0 iff every pyspectral row is within ``TOL``."""
    start = time.perf_counter()
    rows = []
    for case in cases(seed):
        ref = finite_difference(case.torch_loss, case.A)
        rows.append(
            (
                case.name,
                relative_error(case.torch_loss, case.A, ref),
                relative_error(case.ps_loss, case.A, ref),
                case.used,
            )
        )
    head = (
        "case (float64; s: singular values, w: eigenvalues)",
        "torch.linalg",
        "pyspectral",
        "pyspectral call",
    )
    width = [max(len(head[0]), *(len(r[0]) for r in rows)), 14, 12, 0]
    print("Relative gradient error against central finite differences:", file=out)
    print("  ".join(h.ljust(w) for h, w in zip(head, width)).rstrip(), file=out)
    for name, t, p, used in rows:
        cells = (name, _fmt(t), _fmt(p), used)
        print("  ".join(c.ljust(w) for c, w in zip(cells, width)).rstrip(), file=out)
    ok = [isinstance(p, float) and p <= TOL for _, _, p, _ in rows]
    torch_bad = sum(not (isinstance(t, float) and t <= TOL) for _, t, _, _ in rows)
    print(
        f"{'PASS' if all(ok) else 'FAIL'}: pyspectral {sum(ok)}/{len(rows)} within "
        f"{TOL:g}; torch.linalg wrong, NaN or raising on {torch_bad}/{len(rows)} "
        f"({time.perf_counter() - start:.1f} s)",
        file=out,
    )
    return 0 if all(ok) else 1
