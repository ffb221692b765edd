"""The Julia backend's ``linsolve`` of dense systems: ``PySpectral.linsolve``
(KrylovKit's GMRES, or CG where ``a0 I + a1 A`` is positive definite, or
PySpectral's MINRES where it is Hermitian) and
its adjoint solve ``linsolve_pullback!``, one system per batch entry. Julia
reads ``A^T`` and solves with its transpose (no copy); ``b``, ``x`` and their
cotangents cross as ``n x B`` arrays, the per-system ``a0``, ``a1`` and
absolute tolerances as ``1 x B``. Every tensor handed to Julia sits in
``keep`` until the call has returned."""

from __future__ import annotations

import torch

from ._bridge import call
from ._convert import (
    check_tensor,
    elements,
    from_julia_vectors,
    gradient_buffer,
    to_julia,
    to_julia_vectors,
)


def _per_system(t: torch.Tensor, batch: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """A scalar or ``(*batch)`` tensor as one entry per system, ``(B, 1)``."""
    return t.detach().to(dtype).expand(batch).reshape(-1, 1)


def _scalars(t: torch.Tensor, batch: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """``a0`` / ``a1`` per system, real where they are: Julia picks MINRES for
    a Hermitian ``A`` by their types, as the native backend by their dtypes."""
    real = {torch.complex64: torch.float32, torch.complex128: torch.float64}
    return _per_system(t, batch, dtype if t.is_complex() else real.get(dtype, dtype))


def _settings(a0, a1, tol, batch: torch.Size, dtype: torch.dtype, keep: list) -> tuple:
    """``a0``, ``a1`` and the absolute tolerances as Julia's ``1 x B`` vectors."""
    return (
        to_julia_vectors(_scalars(a0, batch, dtype), keep),
        to_julia_vectors(_scalars(a1, batch, dtype), keep),
        to_julia_vectors(_per_system(tol, batch, torch.float64), keep),
    )


def linsolve(
    A: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor,
    a0: torch.Tensor,
    a1: torch.Tensor,
    tol: torch.Tensor,
    ishermitian: bool,
    isposdef: bool,
    krylovdim: int,
    maxiter: int,
) -> torch.Tensor:
    """``x`` ``(*, n)`` with ``(a0 I + a1 A) x = b`` for ``A`` ``(*, n, n)``,
    ``b`` and ``x0`` ``(*, n)``, all of one dtype; ``tol`` ``(*,)`` absolute."""
    check_tensor("linsolve", A)
    keep: list = []
    batch, dtype = b.shape[:-1], b.dtype
    x = call(
        "linsolve",
        "linsolve_dense",
        to_julia(A, keep),
        to_julia_vectors(b, keep),
        to_julia_vectors(x0, keep),
        *_settings(a0, a1, tol, batch, dtype, keep),
        bool(ishermitian),
        bool(isposdef),
        int(krylovdim),
        int(maxiter),
        elements=elements(A),
    )
    return from_julia_vectors(x, batch)


def linsolve_pullback(
    A: torch.Tensor,
    grad_dtype: torch.dtype,
    x: torch.Tensor,
    gx: torch.Tensor,
    a0: torch.Tensor,
    a1: torch.Tensor,
    tol: torch.Tensor,
    ishermitian: bool,
    isposdef: bool,
    krylovdim: int,
    maxiter: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(gA, gb, ga0, ga1)``: ``gA`` of ``A``'s shape in ``grad_dtype`` (the
    real part for a real operator), the others per system (``(*, n)``,
    ``(*,)``, ``(*,)``) in ``x``'s dtype; ``tol`` ``(*,)`` for the adjoint
    solve, absolute."""
    batch, dtype = x.shape[:-1], x.dtype
    gA, keep = gradient_buffer((A.shape, grad_dtype)), []
    gb, ga0, ga1 = call(
        "linsolve",
        "linsolve_pullback_dense!",
        to_julia(gA, keep),
        to_julia(A, keep),
        to_julia_vectors(x, keep),
        to_julia_vectors(gx, keep),
        *_settings(a0, a1, tol, batch, dtype, keep),
        bool(ishermitian),
        bool(isposdef),
        int(krylovdim),
        int(maxiter),
        elements=elements(A),
    )
    return (
        gA,
        from_julia_vectors(gb, batch),
        from_julia_vectors(ga0, batch).reshape(batch),
        from_julia_vectors(ga1, batch).reshape(batch),
    )
