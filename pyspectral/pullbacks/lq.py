"""LQ pullback and pushforward: the QR's (``pullbacks/qr.py``) of
``A^H = Q^H L^H``, transposed; one copy of the math. Mirrors
``julia/PySpectral/src/pullbacks/lq.jl``.
"""

from __future__ import annotations

from torch import Tensor

from .._settings import Options
from .qr import qr_pullback, qr_pushforward

__all__ = ["lq_pullback", "lq_pushforward"]


def _mH(g: Tensor | None) -> Tensor | None:
    return None if g is None else g.mH


def lq_pullback(
    L: Tensor,
    Q: Tensor,
    gL: Tensor | None,
    gQ: Tensor | None,
    opts: Options,
    rank_atol: float | None = None,
    op: str = "lq",
) -> Tensor | None:
    """Gradient w.r.t. ``A = L Q`` (``L``: ``(*, m, k)`` lower triangular,
    ``Q``: ``(*, k, n)``) from the cotangents of ``L`` and ``Q`` (None: zero):
    :func:`~pyspectral.pullbacks.qr.qr_pullback` of ``A^H`` with ``gQ^H``,
    ``gL^H``, transposed (the rank read from ``|L_ii|``; messages name
    ``op``)."""
    gAh = qr_pullback(Q.mH, L.mH, _mH(gQ), _mH(gL), opts, rank_atol, op)
    return _mH(gAh)


def lq_pushforward(
    L: Tensor,
    Q: Tensor,
    dA: Tensor,
    rank_atol: float | None = None,
    opts: Options | None = None,
    op: str = "lq",
) -> tuple[Tensor, Tensor]:
    """Tangents ``(dL, dQ)`` of the LQ along ``dA``: the QR's of ``A^H``
    (the gauge policy of ``opts`` at rank deficiency, messages naming
    ``op``)."""
    dQh, dLh = qr_pushforward(Q.mH, L.mH, dA.mH, rank_atol, opts, op)
    return dLh.mH, dQh.mH
