"""The Julia backend's ``eig_function``: the eigenbasis, ``Y`` and its
pullback and pushforward (``src/pullbacks/eigfun.jl``). A matrix function
commutes with the transpose, ``f(A^T) = f(A)^T``, so Julia works on the
``A^T`` it reads (a C-contiguous tensor seen column-major) and its ``Y^T``,
gradient and tangent come back as ``Y``, ``A``'s gradient and ``Y``'s
tangent with no copy. The eigenbasis is ``A^T``'s, ``A^T = V_t L V_t^-1``:
``A = V_t^-T L V_t^T``, so ``A``'s ``V`` and ``V^-1`` are ``V_t^-1`` and
``V_t`` transposed (read without a copy, column-major), for the native
second-order maps. Every tensor handed to Julia sits in ``keep`` until the
call has returned.
"""

from __future__ import annotations

from typing import Any

import torch

from ._bridge import call
from ._convert import (
    check_tensor,
    elements,
    from_julia,
    from_julia_vectors,
    gradient_buffer,
    handle,
    julia_matrices,
    to_julia,
)

OP = "eig_function"


def eigenbasis(A: torch.Tensor) -> tuple:
    """``(L, V, V^-1, handles)``: ``A``'s eigenvalues and a right eigenbasis
    with its inverse (after Julia's eigenvector conditioning check), and the
    handles of Julia's arrays for :func:`apply`, :func:`pullback` and
    :func:`pushforward`."""
    check_tensor(OP, A)
    batch, keep = A.shape[:-2], []
    L, Vt, Vtinv = call(
        OP, "eig_function_eigenbasis_batched", to_julia(A, keep), elements=elements(A)
    )
    V, Vinv = julia_matrices(Vtinv, batch).mT, julia_matrices(Vt, batch).mT
    return from_julia_vectors(L, batch), V, Vinv, (handle(L), handle(Vt), handle(Vtinv))


def apply(handles: tuple, spec: Any, real: bool, batch: tuple) -> torch.Tensor:
    """``Y = V f(L) V^-1`` for the named ``f`` (``spec``); ``real``: its real
    part, for a real ``A``."""
    Yt = call(OP, "eig_function_apply_batched", *handles, spec, real)
    return from_julia(Yt, batch)


def pullback(
    shape_dtype: tuple, handles: tuple, spec: Any, gY: torch.Tensor
) -> torch.Tensor:
    """Gradient w.r.t. ``A`` (real for a real ``A``), written by Julia into a
    zeroed buffer it reads as ``A^T``."""
    gA, keep = gradient_buffer(shape_dtype), []
    call(
        OP,
        "eig_function_pullback_batched!",
        to_julia(gA, keep),
        *handles,
        spec,
        to_julia(gY, keep),
        elements=elements(gA),
    )
    return gA


def pushforward(
    handles: tuple, spec: Any, dA: torch.Tensor, real: bool
) -> torch.Tensor:
    """Forward mode: the tangent of ``Y`` along ``dA`` (Julia reads ``dA^T``)."""
    keep: list = []
    dYt = call(
        OP,
        "eig_function_pushforward_batched",
        *handles,
        spec,
        to_julia(dA, keep),
        real,
        elements=elements(dA),
    )
    return from_julia(dYt, dA.shape[:-2])
