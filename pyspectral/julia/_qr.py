"""The Julia backend's QR and LQ: ``qr``, ``lq``, their pullbacks and
pushforwards. Julia reads the transposes (``_convert``): ``A = Q R`` is
``A^T = R^T Q^T``, an LQ, so Julia's ``lq`` of ``A^T`` gives ``L = R^T`` and
``Q_j = Q^T``, which read back as our ``R`` and ``Q`` without a copy; our LQ
is Julia's QR of ``A^T`` likewise (``A^T = Q^T L^T``). Every tensor handed to
Julia sits in ``keep`` until the call has returned.
"""

from __future__ import annotations

from typing import Any

import torch

from ._bridge import call, options, present, pullback
from ._convert import (
    check_tensor,
    elements,
    from_julia,
    gradient_buffer,
    handle,
    to_julia,
)


def _factor(op: str, glue: str, A: torch.Tensor, mode: str, positive: bool) -> tuple:
    """The two factors Julia computes of ``A^T`` (``glue``: ``"lq_batched"``
    for our QR, ``"qr_batched"`` for our LQ), as our ``(X, Y)`` with the
    handles its pullback needs."""
    check_tensor(op, A)
    batch, keep = A.shape[:-2], []
    Xj, Yj = call(op, glue, to_julia(A, keep), mode == "complete", positive,
                  elements=elements(A))  # fmt: skip
    return from_julia(Xj, batch), from_julia(Yj, batch), (handle(Xj), handle(Yj))


def qr(A: torch.Tensor, mode: str, positive: bool) -> tuple:
    """``(Q, R, handles)``: Julia's ``lq`` of ``A^T`` (``L = R^T``, ``Q^T``)."""
    Rt, Qt, handles = _factor("qr", "lq_batched", A, mode, positive)
    return Qt, Rt, handles


def lq(A: torch.Tensor, mode: str, positive: bool) -> tuple:
    """``(L, Q, handles)``: Julia's ``qr`` of ``A^T`` (``Q^T``, ``R = L^T``)."""
    Qt, Lt, handles = _factor("lq", "qr_batched", A, mode, positive)
    return Lt, Qt, handles


def _pullback(
    op: str, glue: str, shape_dtype: tuple, handles: tuple, gX: Any, gY: Any, opts: Any,
    rank_atol: Any,
) -> torch.Tensor:  # fmt: skip
    gA, keep = gradient_buffer(shape_dtype), []
    pullback(
        op,
        glue,
        present(gX, gY),
        opts,
        to_julia(gA, keep),
        *handles,
        None if gX is None else to_julia(gX, keep),  # of Julia's first factor
        None if gY is None else to_julia(gY, keep),
        rank_atol,
        *options(opts),
        elements=elements(gA),
    )
    return gA


def qr_pullback(
    shape_dtype: tuple, handles: tuple, gQ: Any, gR: Any, opts: Any, rank_atol: Any
) -> torch.Tensor:
    """Gradient of our QR: Julia's LQ pullback of ``A^T`` with the cotangents
    ``gR^T`` (of its ``L``) and ``gQ^T`` (of its ``Q``)."""
    return _pullback("qr", "lq_pullback_batched!", shape_dtype, handles, gR, gQ, opts,
                     rank_atol)  # fmt: skip


def lq_pullback(
    shape_dtype: tuple, handles: tuple, gL: Any, gQ: Any, opts: Any, rank_atol: Any
) -> torch.Tensor:
    """Gradient of our LQ: Julia's QR pullback of ``A^T`` with the cotangents
    ``gQ^T`` (of its ``Q``) and ``gL^T`` (of its ``R``)."""
    return _pullback("lq", "qr_pullback_batched!", shape_dtype, handles, gQ, gL, opts,
                     rank_atol)  # fmt: skip


def _pushforward(op: str, glue: str, handles: tuple, dA: torch.Tensor, rank_atol: Any):
    batch, keep = dA.shape[:-2], []
    dXj, dYj = call(op, glue, *handles, to_julia(dA, keep), rank_atol,
                    elements=elements(dA))  # fmt: skip
    return from_julia(dXj, batch), from_julia(dYj, batch)


def qr_pushforward(handles: tuple, dA: torch.Tensor, rank_atol: Any) -> tuple:
    """Forward mode of our QR: ``(dQ, dR)``, Julia's LQ tangents of ``A^T``."""
    dR, dQ = _pushforward("qr", "lq_pushforward_batched", handles, dA, rank_atol)
    return dQ, dR


def lq_pushforward(handles: tuple, dA: torch.Tensor, rank_atol: Any) -> tuple:
    """Forward mode of our LQ: ``(dL, dQ)``, Julia's QR tangents of ``A^T``."""
    dQ, dL = _pushforward("lq", "qr_pushforward_batched", handles, dA, rank_atol)
    return dL, dQ
