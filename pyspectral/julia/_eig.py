"""The Julia backend's non-Hermitian eigendecomposition: ``eig``, ``eigvals``,
the pullback and the pushforward. Unlike svd and qr, an eigendecomposition
does not transpose into one of the same kind (``A^T`` has the left
eigenvectors), so Julia decomposes ``A`` itself: the glue takes the
transpose of the ``A^T`` it reads (LAPACK's ``geev`` overwrites its input,
so Julia copies it either way) and returns the eigenvectors with their own
indexing (column-major, read without a copy as ``eigh``'s are). Every
tensor handed to Julia sits in ``keep`` until the call has returned.
"""

from __future__ import annotations

from typing import Any

import torch

from ..common.gauge import apply_gauge_policy
from ..exceptions import DomainError
from ..pullbacks.eig import split_message
from ._bridge import call, options, present, pullback
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


def eig(A: torch.Tensor) -> tuple:
    """``(L, V, handles)``: complex eigenvalues and unit-norm eigenvectors, in
    LAPACK's order."""
    check_tensor("eig", A)
    batch, keep = A.shape[:-2], []
    L, V = call("eig", "eig_batched", to_julia(A, keep), elements=elements(A))
    return (
        from_julia_vectors(L, batch),
        julia_matrices(V, batch),
        (handle(L), handle(V)),
    )


def eigvals(A: torch.Tensor) -> torch.Tensor:
    check_tensor("eigvals", A)
    keep: list = []
    L = call("eigvals", "eigvals_batched", to_julia(A, keep), elements=elements(A))
    return from_julia_vectors(L, A.shape[:-2])


def eig_pullback(
    shape_dtype: tuple,
    handles: tuple,
    gL: Any,
    gV: Any,
    opts: Any,
    weights: bool = True,
) -> torch.Tensor:
    """Gradient w.r.t. ``A`` (real for a real ``A``), written by Julia into a
    zeroed buffer it reads as ``A^T``. ``weights``: see ``_bridge.pullback``."""
    gA, keep = gradient_buffer(shape_dtype), []
    _defective_as_native(
        lambda: pullback(
            "eig",
            "eig_pullback_batched!",
            present(gV),
            opts,
            to_julia(gA, keep),
            *handles,
            None if gL is None else to_julia_vectors(gL, keep),
            None if gV is None else to_julia_matrices(gV, keep),
            *options(opts),
            elements=elements(gA),
            weights=weights,
        )
    )
    return gA


def eig_pushforward(handles: tuple, dA: torch.Tensor, opts: Any) -> tuple:
    """Forward mode: ``(dL, dV)`` along ``dA`` (Julia reads ``dA^T``); the
    call's gauge policy on a tangent that splits a cluster, as Julia
    recorded it (``eig:split``: measured, allowed), per matrix."""
    batch, keep = dA.shape[:-2], []
    dL, dV, records = _defective_as_native(
        lambda: call(
            "eig",
            "eig_pushforward_batched",
            *handles,
            to_julia(dA, keep),
            opts.degeneracy_atol,
            opts.broadening,
            opts.gauge != "ignore",
            opts.gauge_atol,
            elements=elements(dA),
        )
    )
    worst = max(((float(v), float(t)) for _, v, t in records), default=None)
    if worst is not None:
        apply_gauge_policy(split_message("eig", *worst), opts)
    return from_julia_vectors(dL, batch), julia_matrices(dV, batch)


def _defective_as_native(run):
    """``run()``; Julia's ``DomainError`` at a defective matrix raised with
    the native backend's text (the same words, without Julia's framing)."""
    try:
        return run()
    except DomainError as err:
        text = str(err)
        start = text.find("eig: A is ")
        if start < 0:
            raise
        raise DomainError(text[start:]) from err
