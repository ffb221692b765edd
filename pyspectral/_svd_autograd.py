"""The autograd Functions of ``svd.py``: the decomposition (``_SVD``,
``_SVDJulia``; ``svd``, ``svdvals``, ``svd_blocks``) and the composite
``U f(S) Vh`` for a named ``f`` (``_SVDFunction``, ``_SVDFunctionJulia``;
``svd_function``), with the maps of its exact second order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _linalg
from ._autograd import (
    LinearInA,
    SpectralMaps,
    check_not_nested_forward_mode,
    in_layout_of,
)
from ._fns import SpectralFn
from ._route import Functions
from ._second_order import check_second_order_cotangent
from ._settings import Options
from .common.gauge import apply_gauge_policy, near_pair_message, svd_pair_cancellation
from .julia import _svd as jsvd
from .pullbacks.svd import (
    svd_adapted_rotation,
    svd_check_split,
    svd_function_pullback,
    svd_function_pushforward,
    svd_function_second_order,
    svd_pullback,
    svd_pushforward,
)


def _adapted(factors: tuple, T: Tensor | None, opts: Options) -> tuple:
    """``(U, S, Vh)`` with the thin factors rotated to the basis adapted to the
    forward-mode tangent ``T`` of ``A`` (None: as they are) inside each
    cluster degenerate to rounding that ``T`` splits (``svd_adapted_rotation``):
    the basis is arbitrary there, and this one is the branch the tangent
    follows, so the tangents are exact (docs/guide/forward-mode.md)."""
    if T is None:
        return factors
    U, S, Vh = factors
    R = svd_adapted_rotation(U, S, Vh, T, opts)
    if R is None:
        return factors
    k = S.shape[-1]
    Uk, Vhk = U[..., :k] @ R, R.mH @ Vh[..., :k, :]
    if U.shape[-1] > k:
        Uk = torch.cat((Uk, U[..., k:]), -1)
    if Vh.shape[-2] > k:
        Vhk = torch.cat((Vhk, Vh[..., k:, :]), -2)
    return Uk, S, Vhk


def svd_near_pairs(U: Tensor, S: Tensor, Vh: Tensor, dA: Tensor, opts: Options) -> None:
    """Apply the gauge policy where forward mode meets a pair of singular
    values just above the degeneracy tolerance, whose rotation an invariant
    output (the polar factor) cancels after the pushforward
    (:func:`~pyspectral.common.gauge.near_pair_cancellation`; both backends)."""
    found = svd_pair_cancellation(U, S, Vh, dA, opts)
    if found is not None:
        apply_gauge_policy(near_pair_message("svd", *found), opts)


class _SVD(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, full_matrices: bool, opts: Options, T: Any) -> tuple:
        # T: the forward-mode tangent of A where the caller sees one (None
        # otherwise), a constant here: the basis inside a cluster follows it
        driver = opts.state.driver
        factors = tuple(_linalg.svd(A, full_matrices=full_matrices, driver=driver))
        return _adapted(factors, T, opts)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)
        # A (an input: no copy, no reference cycle) for the exact second
        # derivative at the clusters a loss discards (_discarded); among the
        # saved tensors it would break the generated vmap rule of
        # jacrev(jacrev) (as LinearInA's)
        ctx.A, _, ctx.opts, T = inputs
        ctx.adapted = T is not None
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        U, S, Vh = ctx.saved_tensors
        gA = svd_pullback(U, S, Vh, gU, gS, gVh, ctx.opts, A=ctx.A)
        return gA, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        check_not_nested_forward_mode("svd")
        U, S, Vh = ctx.saved_tensors
        svd_near_pairs(U, S, Vh, dA, ctx.opts)
        tangents = svd_pushforward(U, S, Vh, dA, ctx.opts, ctx.adapted)
        return tuple(map(in_layout_of, tangents, (U, S, Vh)))


class _SVDJulia(torch.autograd.Function):
    """``_SVD`` on the Julia backend (same formulas, see julia/PySpectral)."""

    @staticmethod
    def forward(
        ctx: Any, A: Tensor, full_matrices: bool, opts: Options, T: Any
    ) -> tuple:
        factors, ctx.handles = jsvd.svd(A, full_matrices)
        U, S, Vh = _adapted(factors, T, opts)  # (T as _SVD's)
        # rotated: new tensors, not Julia's (whose handles hold the basis
        # before the rotation): the native rules, the same formulas, use them
        ctx.native = U is not factors[0]
        ctx.opts, ctx.shape_dtype = opts, (A.shape, A.dtype)
        ctx.adapted = T is not None
        ctx.save_for_backward(U, S, Vh)
        ctx.save_for_forward(U, S, Vh)
        ctx.A = A  # as _SVD's
        ctx.set_materialize_grads(False)
        return U, S, Vh

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        U, S, Vh = ctx.saved_tensors
        if torch.is_grad_enabled() or ctx.native:
            # create_graph: the native pullback is the same formula, and
            # differentiable, so double backward stays exact.
            gA = svd_pullback(U, S, Vh, gU, gS, gVh, ctx.opts, A=ctx.A)
            return gA, None, None, None
        if gU is None and gS is None and gVh is None:
            return None, None, None, None
        second = check_second_order_cotangent(gS, (gU, gVh), ctx.opts)  # as native
        gA = jsvd.svd_pullback(
            ctx.shape_dtype, ctx.handles, gU, gS, gVh, ctx.opts, weights=not second
        )
        return gA, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        U, S, Vh = ctx.saved_tensors
        svd_near_pairs(U, S, Vh, dA, ctx.opts)
        grad = torch.is_grad_enabled() and (dA.requires_grad or U.requires_grad)
        if grad or ctx.native:
            # the tangent will be differentiated: the native pushforward is the
            # same formula, and differentiable (as the backward under create_graph)
            tangents = svd_pushforward(U, S, Vh, dA, ctx.opts, ctx.adapted)
            return tuple(map(in_layout_of, tangents, (U, S, Vh)))
        if ctx.adapted:  # what the native pushforward measures (Julia's: pushes)
            svd_check_split(U, S, Vh, dA, ctx.opts)
        return jsvd.svd_pushforward(ctx.handles, dA, ctx.opts)


class _SVDFunctionJulia(torch.autograd.Function):
    """``_SVDFunction`` on the Julia backend, for a named ``f`` (``f``: its
    normalised form, which Julia reads; a user's ``f`` takes
    ``_values.SpectralValuesJulia``)."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, f: Any, fn: SpectralFn, opts: Options) -> Tensor:
        ctx.f, ctx.fn, ctx.opts, ctx.shape_dtype = f, fn, opts, (A.shape, A.dtype)
        # A spectrum outside f's domain is found by Julia; the native check,
        # run on Julia's singular values, reports it (native_check).
        Y, S, ctx.handles = jsvd.svd_function(
            A, f, opts, native_check=lambda S: fn(S, opts)
        )
        fn(S, opts)  # the native checks: truncation inside a cluster
        ctx.save_for_backward(A)
        ctx.save_for_forward(A)
        return Y

    @staticmethod
    def backward(ctx: Any, gY: Tensor) -> tuple:
        if gY._is_zerotensor():
            # autograd's zero (Y not in the loss, e.g. differentiating a
            # forward-mode tangent): nothing to pull back, nothing for Julia
            return None, None, None, None
        if torch.is_grad_enabled():
            # create_graph: the native pullback with its exact second order
            (A,) = ctx.saved_tensors
            with torch.no_grad():
                U, S, Vh = _linalg.svd(A, full_matrices=False)
            gA = LinearInA.apply(
                A, gY, _svd_function_maps(ctx.fn, ctx.opts), True, U, S, Vh
            )
        else:
            gA = jsvd.svd_function_pullback(
                ctx.shape_dtype, ctx.handles, ctx.f, gY, ctx.opts
            )
        return gA, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> Tensor:
        (A,) = ctx.saved_tensors
        if torch.is_grad_enabled() and (dA.requires_grad or A.requires_grad):
            # a differentiable tangent: the native operation whose derivatives
            # are the exact second-order formula (as the native jvp); in C
            # order, as Y (the transpose of Julia's column-major Y^T)
            with torch.no_grad():
                U, S, Vh = _linalg.svd(A, full_matrices=False)
            maps = _svd_function_maps(ctx.fn, ctx.opts)
            return LinearInA.apply(A, dA, maps, False, U, S, Vh)
        return jsvd.svd_function_pushforward(ctx.handles, ctx.f, dA, ctx.opts)


class _SVDFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, fn: SpectralFn, opts: Options) -> tuple:
        U, S, Vh = _linalg.svd(A, full_matrices=False)
        f, _ = fn(S, opts)
        return (U * f.unsqueeze(-2).to(U.dtype)) @ Vh, U, S, Vh

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        A, ctx.fn, ctx.opts = inputs
        ctx.mark_non_differentiable(*output[1:])
        ctx.save_for_backward(A, *output[1:])
        ctx.save_for_forward(A, *output[1:])

    @staticmethod
    def backward(ctx: Any, gY: Tensor, *_: Tensor) -> tuple:
        A, U, S, Vh = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph (double backward, hessian): the pullback as an
            # operation whose own derivative is the exact second-order formula.
            gA = LinearInA.apply(
                A, gY, _svd_function_maps(ctx.fn, ctx.opts), True, U, S, Vh
            )
            return gA, None, None
        return svd_function_pullback(U, S, Vh, ctx.fn, gY, ctx.opts), None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        # U, S, Vh are non-differentiable outputs: no tangent. The tangent is
        # an operation of (A, dA), so that differentiating it (jacrev(jacfwd),
        # jacfwd(jacfwd)) takes the exact second-order formula.
        A, U, S, Vh = ctx.saved_tensors
        maps = _svd_function_maps(ctx.fn, ctx.opts)
        dY = LinearInA.apply(A, dA, maps, False, U, S, Vh)
        return dY, None, None, None


_FUNCTIONS = Functions(_SVD, _SVDJulia)


def _svd_function_maps(fn: SpectralFn, opts: Options) -> SpectralMaps:
    """``svd_function``'s first- and second-order maps, ``T = (U, S, Vh)``
    (second divided differences of the odd extension of ``f``; see
    ``LinearInA``: on the Hermitian dilation the second-order form
    ``<R, L2_f(A; E, D)>`` is symmetric in ``R, E, D``)."""
    second = lambda T, X, D: svd_function_second_order(*T, fn, X, D, opts)  # noqa: E731
    return SpectralMaps(
        "svd_function",
        lambda T, gY: svd_function_pullback(*T, fn, gY, opts),
        lambda T, dA: svd_function_pushforward(*T, fn, dA, opts),
        second,
        second,  # (the pushforward's derivative is the same form)
    )
