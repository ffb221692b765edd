"""The Julia backend's polar decomposition: ``polar``, its pullback and its
pushforward. Julia reads ``A^T`` (``_convert``), and ``A = W P`` is
``A^T = P^T W^T``: the left polar decomposition of ``A^T`` (and the right
one of the left), whose ``W^T`` and ``P^T`` read back as our ``W`` and ``P``
without a copy. Every tensor handed to Julia sits in ``keep`` until the
call has returned.
"""

from __future__ import annotations

from typing import Any

import torch

from ._bridge import call, present, pullback, with_native_domain_error
from ._convert import (
    check_tensor,
    elements,
    from_julia,
    gradient_buffer,
    handle,
    to_julia,
)

# Julia decomposes the transposes: our right polar is its left one
_SWAP = {"right": "left", "left": "right"}


def polar(A: torch.Tensor, side: str, opts: Any) -> tuple:
    """``(W, P, handles)``; the handles are Julia's ``(W, P, U, S, Vt)`` of
    ``A^T``, what its pullback reads."""
    check_tensor("polar", A)
    batch, keep = A.shape[:-2], []
    out = with_native_domain_error(
        batch,
        None,
        lambda: call(
            "polar",
            "polar_batched",
            to_julia(A, keep),
            _SWAP[side],
            opts.degeneracy_atol,
            elements=elements(A),
        ),  # fmt: skip
    )
    W, P = from_julia(out[0], batch), from_julia(out[1], batch)
    return W, P, tuple(handle(x) for x in out)


def polar_pullback(
    shape_dtype: tuple, handles: tuple, gW: Any, gP: Any, side: str, opts: Any
) -> torch.Tensor:
    gA, keep = gradient_buffer(shape_dtype), []
    pullback(
        "polar",
        "polar_pullback_batched!",
        present(gW, gP),
        opts,
        to_julia(gA, keep),
        *handles,
        None if gW is None else to_julia(gW, keep),
        None if gP is None else to_julia(gP, keep),
        _SWAP[side],
        opts.degeneracy_atol,
        elements=elements(gA),
    )
    return gA


def polar_pushforward(handles: tuple, dA: torch.Tensor, side: str, opts: Any) -> tuple:
    """Forward mode: ``(dW, dP)`` along ``dA`` (Julia's, of the transposes)."""
    batch, keep = dA.shape[:-2], []
    dW, dP = call(
        "polar",
        "polar_pushforward_batched",
        *handles,
        to_julia(dA, keep),
        _SWAP[side],
        opts.degeneracy_atol,
        elements=elements(dA),
    )
    return from_julia(dW, batch), from_julia(dP, batch)
