"""The Julia backend's ``eig_topk`` of one dense matrix: ``PySpectral.eig_topk``
(dense ``eigen`` up to 64 rows, KrylovKit's Arnoldi above) and its subspace
adjoint ``eig_topk_pullback!``, with products by ``A^H`` in Julia. As for
``eig``, Julia solves ``A`` itself from the ``A^T`` it reads and returns the
eigenvectors with their own (column-major) indexing. Every tensor handed to
Julia sits in ``keep`` until the call has returned."""

from __future__ import annotations

import torch

from ._bridge import call
from ._convert import (
    check_tensor,
    elements,
    from_julia_vectors,
    gradient_buffer,
    handle,
    julia_matrices,
    to_julia,
    to_julia_matrices,
    to_julia_vectors,
)


def eig_topk(
    A: torch.Tensor,
    k: int,
    which: str,
    tol: float,
    krylovdim: int,
    maxiter: int,
    degeneracy_atol: float | None,
) -> tuple:
    """``(L, V, handles)`` of one ``(n, n)`` matrix: ``k' >= k`` eigenvalues
    ordered by ``which`` and unit-norm eigenvectors ``(n, k')``, complex."""
    check_tensor("eig_topk", A)
    keep: list = []
    L, V = call(
        "eig_topk",
        "eig_topk_dense",
        to_julia(A, keep),
        int(k),
        which,
        float(tol),
        int(krylovdim),
        int(maxiter),
        None if degeneracy_atol is None else float(degeneracy_atol),
        elements=elements(A),
    )
    return from_julia_vectors(L, ()), julia_matrices(V, ()), (handle(L), handle(V))


def eig_topk_pullback(
    A: torch.Tensor,
    handles: tuple,
    gL: torch.Tensor | None,
    gV: torch.Tensor | None,
    cluster_tol: float,
    tol: float,
    krylovdim: int,
    maxiter: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gA, N_in)``: the gradient of ``A`` (real for a real ``A``) and the
    cotangent's part inside the clusters (``k' x k'``, for the gauge check)."""
    gA, keep = gradient_buffer((A.shape, A.dtype)), []
    L, V = handles
    Nin = call(
        "eig_topk",
        "eig_topk_pullback_dense!",
        to_julia(gA, keep),
        to_julia(A, keep),
        L,
        V,
        None if gL is None else to_julia_vectors(gL, keep),
        None if gV is None else to_julia_matrices(gV, keep),
        float(cluster_tol),
        float(tol),
        int(krylovdim),
        int(maxiter),
        elements=elements(A),
    )
    return gA, julia_matrices(Nin, ())
