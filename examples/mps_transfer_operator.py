"""
Correlation length of a large MPS, its transfer operator never formed
=====================================================================

An infinite MPS with tensor ``A^s`` (``D x D`` for each of ``d = 3``
physical states) has the transfer operator ``E: X -> sum_s A^s X A^s^H`` on
``D x D`` matrices, a ``D^2 x D^2`` non-Hermitian map: at ``D = 64`` that is
a 4096 x 4096 matrix (134 MB in float64) whose dense ``eig`` takes minutes,
while one product costs ``2 d D^3`` flops. Its two leading eigenvalues give
the correlation length ``xi = -1 / ln|lambda_2 / lambda_1|``.

``ps.eig_topk`` takes ``E`` as a ``ps.LinearOperator`` (``matmul`` and its
adjoint ``rmatmul: Y -> sum_s A^s^H Y A^s``, both two einsums) and returns
the leading pairs, ``k`` extended over a conjugate pair or a modulus tie
(a real ``A`` has a real operator, whose subleading eigenvalue is often one
of a pair), so ``xi`` is computed from the mean modulus of the subleading
ones, a symmetric function of that cluster: its gradient is exact. The
gradient reaches ``A`` through the products (the backward solves one
shifted system per kept pair with ``rmatmul`` only).

``main`` checks, for each bond dimension: the gradient of ``xi`` w.r.t.
the tensor along a random direction against the central finite difference
of the forward; where the dense matrix is affordable (``dense_upto``,
default ``D <= 32``: a 1024 x 1024 ``eig``), ``xi`` and the full gradient
against the same loss through the dense ``ps.eig`` of the formed ``E``; and
the time of both routes. The deformed AKLT family's exact spectrum
(``{b^2 + ac, b^2 - ac, -b^2, -b^2}``, closed-form gradients) is checked in
the guide (Operators and fixed points) and in the tests.

    python examples/mps_transfer_operator.py
"""

from __future__ import annotations

import importlib.util
import math
import time

import torch

import pyspectral as ps

DT = torch.float64


def random_mps(D: int, d: int = 3, seed: int = 0) -> torch.Tensor:
    """A random real MPS tensor ``(d, D, D)``, scaled so that ``lambda_1 ~ 1``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d, D, D, generator=g, dtype=DT) / math.sqrt(d * D)


def transfer(A: torch.Tensor) -> ps.LinearOperator:
    """``E`` on ``vec(X)`` (row-major), blocks ``(D^2, p)``, never formed."""
    D = A.shape[-1]

    def matmul(X: torch.Tensor) -> torch.Tensor:
        Xs = X.mT.reshape(-1, D, D)
        return torch.einsum("sij,pjk,slk->pil", A, Xs, A.conj()).reshape(-1, D * D).mT

    def rmatmul(Y: torch.Tensor) -> torch.Tensor:
        Ys = Y.mT.reshape(-1, D, D)
        return torch.einsum("sji,pjk,skl->pil", A.conj(), Ys, A).reshape(-1, D * D).mT

    return ps.LinearOperator((D * D, D * D), matmul, rmatmul, dtype=A.dtype)


def formed(A: torch.Tensor) -> torch.Tensor:
    """The same ``E`` as a dense ``(D^2, D^2)`` matrix."""
    D = A.shape[-1]
    return torch.einsum("sij,slk->iljk", A, A.conj()).reshape(D * D, D * D)


def xi_of(L: torch.Tensor, m: int) -> torch.Tensor:
    """``-1 / ln(mean|lambda_2..lambda_(m+1)| / |lambda_1|)`` of eigenvalues
    ordered by modulus."""
    return -1 / torch.log(L[1 : 1 + m].abs().mean() / L[0].abs())


def xi_operator(A: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(xi, m)`` by ``eig_topk``: ``m`` is the size of the subleading cluster
    (the columns ``eig_topk`` added to ``k = 2``, plus one)."""
    L, _ = ps.eig_topk(transfer(A), 2)
    return xi_of(L, L.shape[0] - 1), L.shape[0] - 1


def xi_dense(A: torch.Tensor, m: int) -> torch.Tensor:
    """The same loss through the dense ``ps.eig`` of the formed matrix."""
    L, _ = ps.eig(formed(A))
    order = torch.argsort(L.abs().detach(), descending=True)
    return xi_of(L[order], m)


def main(
    Ds: tuple[int, ...] = (8, 16, 32, 64),
    dense_upto: int = 32,
    h: float = 1e-5,
    verbose: bool = True,
) -> dict:
    rows = []
    for D in Ds:
        A = random_mps(D).requires_grad_()
        t0 = time.perf_counter()
        xi, m = xi_operator(A)
        (g,) = torch.autograd.grad(xi, A)
        t_op = time.perf_counter() - t0
        # the directional derivative against the central difference
        gen = torch.Generator().manual_seed(1)
        W = torch.randn(A.shape, generator=gen, dtype=DT)
        W /= W.norm()
        with torch.no_grad():
            fd = (xi_operator(A + h * W)[0] - xi_operator(A - h * W)[0]) / (2 * h)
        row = dict(
            D=D,
            m=m,
            xi=float(xi.detach()),
            dir=float((g * W).sum()),
            fd=float(fd),
            fd_error=abs(float((g * W).sum() - fd)) / abs(float(fd)),
            t_operator=t_op,
        )
        if D <= dense_upto:
            t0 = time.perf_counter()
            xd = xi_dense(A, m)
            (gd,) = torch.autograd.grad(xd, A)
            row["t_dense"] = time.perf_counter() - t0
            row["xi_dense"] = float(xd.detach())
            row["dense_error"] = float((g - gd).norm() / gd.norm())
        rows.append(row)
        if verbose:
            dense = (
                f"   dense ps.eig: xi {row['xi_dense']:.12f}, gradient "
                f"{row['dense_error']:.1e} apart, {row['t_dense']:.2f} s"
                if "t_dense" in row
                else "   (dense skipped)"
            )
            print(
                f"D = {D:3d} (E: {D * D} x {D * D}), {m} subleading: xi = "
                f"{row['xi']:.12f}; grad . W = {row['dir']:+.8e}, FD "
                f"{row['fd']:+.8e} ({row['fd_error']:.1e}); eig_topk fwd+bwd "
                f"{row['t_operator']:.2f} s{dense}"
            )
    return {"rows": rows}


def figure(result: dict):
    """The time of ``xi`` and its gradient against the bond dimension: the
    never-formed operator through ``eig_topk`` and, where it ran, the dense
    ``ps.eig`` of the formed matrix."""
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.loglog(
        [r["D"] for r in rows],
        [r["t_operator"] for r in rows],
        "o-",
        color="C0",
        label="ps.eig_topk, operator never formed",
    )
    dense = [r for r in rows if "t_dense" in r]
    if dense:
        ax.loglog(
            [r["D"] for r in dense],
            [r["t_dense"] for r in dense],
            "s--",
            color="C3",
            label="ps.eig of the formed D² x D² matrix",
        )
    ax.set_xlabel("bond dimension D")
    ax.set_ylabel("xi and its gradient: seconds")
    ax.set_title("MPS correlation length, d = 3")
    ax.legend()
    return fig


if __name__ == "__main__":
    result = main()
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
