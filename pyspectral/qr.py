"""QR and LQ decompositions with exact gradients, the positive gauge
(``diag(R) >= 0``) and the rank-deficient rule: ``qr`` and ``lq``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import _linalg, _ops
from ._autograd import check_not_nested_forward_mode, in_layout_of
from ._route import Functions, compiled, decompose, with_out
from ._settings import Options, options
from ._validation import check_choice, check_flag, check_keywords, check_matrix
from .common.defaults import peek
from .exceptions import ChoiceError, InputError
from .julia import _qr as jqr
from .pullbacks.lq import lq_pullback, lq_pushforward
from .pullbacks.qr import positive_gauge, qr_pullback, qr_pushforward, qr_rank

__all__ = ["LQResult", "QRResult", "lq", "qr"]

MODES = ("reduced", "complete", "r")


class QRResult(NamedTuple):
    """The result of :func:`qr`: ``A = Q R``, ``Q: (*, m, k)`` with
    orthonormal columns and ``R: (*, k, n)`` upper triangular, ``k =
    min(m, n)`` (``mode="complete"``: ``k = m``; ``mode="r"``: ``Q`` empty).

    Example::

        >>> A = torch.tensor([[0.0, 1.0], [2.0, 0.0]], dtype=torch.float64)
        >>> Q, R = qr(A, positive=True)
        >>> R.diagonal()
        tensor([2., 1.], dtype=torch.float64)
    """

    Q: Tensor
    R: Tensor


class LQResult(NamedTuple):
    """The result of :func:`lq`: ``A = L Q``, ``L: (*, m, k)`` lower
    triangular and ``Q: (*, k, n)`` with orthonormal rows, ``k = min(m, n)``
    (``mode="complete"``: ``k = n``; ``mode="r"``: ``Q`` empty).

    Example::

        >>> A = torch.tensor([[0.0, 2.0], [1.0, 0.0]], dtype=torch.float64)
        >>> L, Q = lq(A, positive=True)
        >>> L.diagonal()
        tensor([2., 1.], dtype=torch.float64)
    """

    L: Tensor
    Q: Tensor


# ----------------------------------------------------- autograd functions


class _QR(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(
        A: Tensor, mode: str, positive: bool, rank_atol: Any, opts: Options
    ) -> tuple[Tensor, Tensor]:
        Q, R = _linalg.qr(A, mode=mode)
        return positive_gauge(Q, R) if positive else (Q, R)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.rank_atol, ctx.opts = inputs[3:]
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gQ: Tensor, gR: Tensor) -> tuple:
        return _native_backward(ctx, qr_pullback, gQ, gR)

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        return _native_jvp(ctx, "qr", qr_pushforward, dA)


class _QRJulia(torch.autograd.Function):
    """``_QR`` on the Julia backend (same formulas, ``src/pullbacks/qr.jl``);
    under ``create_graph`` and for a differentiable tangent the native
    formula, which is differentiable, runs on Julia's factors."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, *args: Any) -> tuple[Tensor, Tensor]:
        return _julia_forward(ctx, jqr.qr, A, *args)

    @staticmethod
    def backward(ctx: Any, gQ: Tensor, gR: Tensor) -> tuple:
        return _julia_backward(ctx, qr_pullback, jqr.qr_pullback, gQ, gR)

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        return _julia_jvp(ctx, "qr", qr_pushforward, jqr.qr_pushforward, dA)


class _LQ(torch.autograd.Function):
    """``A = L Q`` as the QR of ``A^H`` (``L = R^H``, ``Q = Q_qr^H``), whose
    pullback and pushforward ``pullbacks/lq.py`` transposes."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        A: Tensor, mode: str, positive: bool, rank_atol: Any, opts: Options
    ) -> tuple[Tensor, Tensor]:
        Q, R = _QR.forward(A.mH, mode, positive, rank_atol, opts)
        return R.mH, Q.mH

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        _QR.setup_context(ctx, inputs, output)

    @staticmethod
    def backward(ctx: Any, gL: Tensor, gQ: Tensor) -> tuple:
        return _native_backward(ctx, lq_pullback, gL, gQ)

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        return _native_jvp(ctx, "lq", lq_pushforward, dA)


class _LQJulia(torch.autograd.Function):
    """``_LQ`` on the Julia backend (``src/pullbacks/lq.jl``), as ``_QRJulia``."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, *args: Any) -> tuple[Tensor, Tensor]:
        return _julia_forward(ctx, jqr.lq, A, *args)

    @staticmethod
    def backward(ctx: Any, gL: Tensor, gQ: Tensor) -> tuple:
        return _julia_backward(ctx, lq_pullback, jqr.lq_pullback, gL, gQ)

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        return _julia_jvp(ctx, "lq", lq_pushforward, jqr.lq_pushforward, dA)


def _native_backward(ctx: Any, pullback: Any, gX: Any, gY: Any) -> tuple:
    X, Y = ctx.saved_tensors
    gA = pullback(X, Y, gX, gY, ctx.opts, ctx.rank_atol)
    return gA, None, None, None, None


def _native_jvp(ctx: Any, op: str, pushforward: Any, dA: Tensor) -> tuple:
    check_not_nested_forward_mode(op)
    X, Y = ctx.saved_tensors
    dX, dY = pushforward(X, Y, dA, ctx.rank_atol, ctx.opts, op)
    return in_layout_of(dX, X), in_layout_of(dY, Y)


def _julia_forward(
    ctx: Any,
    factor: Any,
    A: Tensor,
    mode: str,
    positive: bool,
    rank_atol: Any,
    opts: Options,
) -> tuple[Tensor, Tensor]:
    X, Y, ctx.handles = factor(A, mode, positive)
    ctx.rank_atol, ctx.opts, ctx.shape_dtype = rank_atol, opts, (A.shape, A.dtype)
    ctx.save_for_backward(X, Y)
    ctx.save_for_forward(X, Y)
    ctx.set_materialize_grads(False)
    return X, Y


def _julia_backward(ctx: Any, native: Any, julia: Any, gX: Any, gY: Any) -> tuple:
    # The native formula is differentiable, Julia's is not: it takes the
    # create_graph case (on Julia's factors).
    if torch.is_grad_enabled():
        return _native_backward(ctx, native, gX, gY)
    if gX is None and gY is None:
        return None, None, None, None, None
    gA = julia(ctx.shape_dtype, ctx.handles, gX, gY, ctx.opts, ctx.rank_atol)
    return gA, None, None, None, None


def _julia_jvp(ctx: Any, op: str, native: Any, julia: Any, dA: Tensor) -> tuple:
    X, Y = ctx.saved_tensors
    if torch.is_grad_enabled() and (dA.requires_grad or X.requires_grad):
        return _native_jvp(ctx, op, native, dA)
    # the gauge policy at rank deficiency, by the native rule on Julia's
    # factors (one host sync at full rank, as the native rule's)
    if ctx.opts.gauge != "ignore" and _rank_deficient(op, X, Y, ctx.rank_atol):
        native(X, Y, dA, ctx.rank_atol, ctx.opts, op)
    return julia(ctx.handles, dA, ctx.rank_atol)


def _rank_deficient(op: str, X: Tensor, Y: Tensor, rank_atol: Any) -> bool:
    """Whether a QR's ``R`` (``op="qr"``: ``Y``) or an LQ's ``L`` (``X``) has a
    small pivot."""
    T = Y if op == "qr" else X.mH
    p = min(T.shape[-2:])
    return bool((peek(qr_rank(T[..., :p, :], rank_atol)) < p).any())


_QR_FUNCTIONS = Functions(_QR, _QRJulia)
_LQ_FUNCTIONS = Functions(_LQ, _LQJulia)


# ------------------------------------------------------------ public API


def qr(
    A: Tensor,
    mode: str = "reduced",
    *,
    positive: bool = False,
    backend: str = "auto",
    rank_atol: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    out: tuple[Tensor, Tensor] | None = None,
) -> QRResult:
    r"""qr(A, mode="reduced", *, positive=False, backend="auto", ...) -> (Q, R)

    QR decomposition with exact gradients, also for ``mode="complete"`` and
    at rank deficiency.

    .. math::
        A = Q R, \qquad Q^{H} Q = I, \quad R \text{ upper triangular}

    ``A`` has shape ``(*, m, n)`` where ``*`` is zero or more batch dimensions,
    dtype float32, float64, complex64 or complex128; ``Q`` and ``R`` have its
    dtype. Same results as ``torch.linalg.qr(A, mode)``: ``mode="reduced"``
    (default) gives ``Q: (*, m, k)``, ``R: (*, k, n)``, ``k = min(m, n)``;
    ``"complete"`` ``Q: (*, m, m)``, ``R: (*, m, n)``; ``"r"`` an empty ``Q``
    and ``R`` (differentiable here, where torch raises). ``diag(R)`` is real
    (LAPACK's Householder convention, with the signs it chooses);
    ``positive=True`` flips signs (phases) so that ``diag(R) >= 0``, the gauge
    of tensor-network codes and MatrixAlgebraKit.jl, which makes ``Q, R``
    unique at full rank.

    .. warning:: Gradients are exact at full rank. With ``mode="complete"``
        and ``m > n`` the last ``m - n`` columns ``Q2`` of ``Q`` are a basis
        of the complement of ``A``'s range: a loss must see them through
        their projector ``Q2 Q2^H``, else the ``gauge`` policy applies. At
        rank deficiency (``j``: the first pivot ``|R_jj| <= rank_atol``,
        default ``eps**(3/4) max|R|``) ``A`` determines ``Q[..., :j]``,
        ``R[..., :j, :]`` and the product ``Q[..., j:] @ R[..., j:, :]``:
        their losses get exact gradients, ``f(Q @ R)`` too where ``Q`` is
        square, wide or complete (docs/math.md); a loss of the factors past
        ``j`` apart, or a thin ``Q``'s product where its cotangents lack the
        part that raises the rank, triggers the ``gauge`` policy (``"warn"``:
        a :class:`GaugeWarning`, ``"raise"``, ``"ignore"``), whose message
        names the route that is exact.

    Forward mode, ``torch.func`` and second derivatives follow the same
    rules; ``backend="julia"`` runs the same formulas in Julia (CPU tensors,
    see docs/guide/julia.md). ``out=(Q, R)`` as in ``torch.linalg.qr`` (no
    autograd, native backend, ``positive=False``). :func:`lq` is the QR of
    ``A^H``.

    Returns:
        ``(Q, R)``, a named tuple (:class:`QRResult`).

    Raises:
        InputTypeError: ``A`` is not a tensor, ``mode`` not a string or
            ``positive`` not a bool.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        ChoiceError: an unknown ``mode`` (a ``RuntimeError``, as torch's).
        InputError: an unknown ``gauge``, a negative
            ``rank_atol`` / ``gauge_atol``, or ``out=`` with ``positive=True``
            or ``backend="julia"``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call.
        GaugeError: in the backward (forward mode: where the tangent moves
            the factors past ``j``), under ``gauge="raise"``, where the loss
            depends on what ``A`` does not determine (see above).

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(5, 3, dtype=torch.float64, generator=g)
        >>> Q, R = qr(A, positive=True)
        >>> bool(torch.dist(Q @ R, A) < 1e-12), bool((R.diagonal() > 0).all())
        (True, True)
    """
    eligible = out is None and rank_atol is None
    res = compiled(
        backend, eligible, _ops.call_qr, A, mode, positive, gauge, gauge_atol
    )
    if res is not None:
        return QRResult(*res)
    mode, positive, rank_atol, opts = _check("qr", A, mode, positive, rank_atol, gauge,
                                             gauge_atol, out)  # fmt: skip
    res = with_out("qr", out, backend, A, lambda: _linalg.qr(A, mode, out=out))
    if res is not None:
        return QRResult(*res)
    return QRResult(*_decompose("qr", A, mode, positive, rank_atol, opts, backend))


def lq(
    A: Tensor,
    mode: str = "reduced",
    *,
    positive: bool = False,
    backend: str = "auto",
    rank_atol: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
) -> LQResult:
    r"""lq(A, mode="reduced", *, positive=False, backend="auto", ...) -> (L, Q)

    LQ decomposition with exact gradients: the QR of ``A^H``, transposed.

    .. math::
        A = L Q, \qquad Q Q^{H} = I, \quad L \text{ lower triangular}

    ``A`` has shape ``(*, m, n)``; ``mode="reduced"`` gives ``L: (*, m, k)``,
    ``Q: (*, k, n)``, ``k = min(m, n)``; ``"complete"`` ``L: (*, m, n)``,
    ``Q: (*, n, n)``; ``"r"`` ``L`` and an empty ``Q``. ``positive=True``:
    ``diag(L) >= 0``. Gradients, the rank rule (rows of ``Q`` and columns
    of ``L`` past the rank ``r``, from ``|L_ii|``), the complement of a
    complete ``Q``, forward mode and second derivatives, backends and
    errors: as :func:`qr`, read transposed (tensor-network codes use it for
    right-canonical forms).

    Returns:
        ``(L, Q)``, a named tuple (:class:`LQResult`).

    Raises:
        InputTypeError: ``A`` is not a tensor, ``mode`` not a string or
            ``positive`` not a bool.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        ChoiceError: an unknown ``mode`` (a ``RuntimeError``, as torch's).
        InputError: an unknown ``gauge``, a negative
            ``rank_atol`` / ``gauge_atol``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call.
        GaugeError: in the backward, under ``gauge="raise"``, where the loss
            depends on what ``A`` does not determine (as in :func:`qr`).

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(3, 5, dtype=torch.complex128, generator=g)
        >>> L, Q = lq(A, positive=True)
        >>> eye = torch.eye(3, dtype=A.dtype)
        >>> bool(torch.dist(L @ Q, A) < 1e-12), bool(torch.dist(Q @ Q.mH, eye) < 1e-12)
        (True, True)
    """
    res = compiled(backend, rank_atol is None, _ops.call_lq, A, mode, positive, gauge,
                   gauge_atol)  # fmt: skip
    if res is not None:
        return LQResult(*res)
    mode, positive, rank_atol, opts = _check("lq", A, mode, positive, rank_atol, gauge,
                                             gauge_atol, None)  # fmt: skip
    return LQResult(*_decompose("lq", A, mode, positive, rank_atol, opts, backend))


def _check(
    op: str,
    A: Any,
    mode: Any,
    positive: Any,
    rank_atol: Any,
    gauge: Any,
    gauge_atol: Any,
    out: Any,
) -> tuple[str, bool, float | None, Options]:
    """The arguments of :func:`qr` / :func:`lq` checked, and the call's options."""
    check_matrix(op, A)
    mode = check_choice(op, "mode", mode, MODES, ChoiceError)
    positive = check_flag(op, "positive", positive)
    if positive and out is not None:
        raise InputError(
            f"{op}: out= runs torch.linalg.qr's forward, which has no positive "
            "gauge; drop out= or positive=True"
        )
    kw = check_keywords(op, A, rank_atol=rank_atol, gauge_atol=gauge_atol)
    return (
        mode,
        positive,
        kw["rank_atol"],
        options(None, None, gauge, kw["gauge_atol"], op=op),
    )


def _decompose(
    op: str,
    A: Tensor,
    mode: str,
    positive: bool,
    rank_atol: float | None,
    opts: Options,
    backend: str,
) -> tuple[Tensor, Tensor]:
    """``(Q, R)`` (``op="qr"``) or ``(L, Q)`` (``"lq"``) of ``A``; for
    ``mode="r"`` an empty ``Q`` (the reduced decomposition runs, so that the
    triangular factor is differentiable)."""
    functions = _QR_FUNCTIONS if op == "qr" else _LQ_FUNCTIONS
    run = "reduced" if mode == "r" else mode
    X, Y = decompose(op, functions, A, backend, run, positive, rank_atol, opts)
    if mode != "r":
        return X, Y
    return (A.new_empty(0), Y) if op == "qr" else (X, A.new_empty(0))
