"""The autograd Functions of ``eigh.py``: the decomposition (``_Eigh``,
``_EighJulia``; ``eigh``, ``eigvalsh``) under either derivative convention,
the composite ``V f(L) V^H`` for a named ``f`` (``_MatrixFunction``,
``_MatrixFunctionJulia``; ``matrix_function``) with the maps of its exact
second order, and the convention itself (``_HermitianPart``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _linalg
from ._autograd import (
    LinearInA,
    SpectralMaps,
    apply,
    check_not_nested_forward_mode,
    forward_tangent,
    in_layout_of,
)
from ._fns import SpectralFn
from ._route import on_julia
from ._second_order import check_second_order_cotangent
from ._settings import Options, gradient_convention
from ._values import differentiated
from .common.defaults import peek
from .common.gauge import (
    apply_gauge_policy,
    herm_in_basis,
    near_pair_cancellation,
    near_pair_message,
)
from .julia import _eigh as jeigh
from .pullbacks.eigh import (
    eigh_adapted_rotation,
    eigh_check_split,
    eigh_pullback,
    eigh_pushforward,
    hermitian_from_triangle,
    hermitian_part,
    tangent_scale,
)
from .pullbacks.matfun import (
    matrix_function_pullback,
    matrix_function_pushforward,
    matrix_function_second,
    matrix_function_second_order,
)


def eigh_near_pairs(
    w: Tensor, V: Tensor, dA: Tensor, uplo: str, opts: Options, hermitian: bool
) -> None:
    """Apply the gauge policy where forward mode meets a pair of eigenvalues
    just above the degeneracy tolerance, whose rotation an invariant output
    (a projector onto a subspace holding it) cancels after the pushforward
    (:func:`~pyspectral.common.gauge.near_pair_cancellation`; both backends)."""
    if opts.gauge == "ignore" or w.shape[-1] < 2:
        return

    def tangent() -> Tensor:
        dH = hermitian_part(dA) if hermitian else hermitian_from_triangle(dA, uplo)
        return herm_in_basis(V, dH, V.mH)

    with torch.no_grad():
        w = peek(w)
        top = w.abs().amax(-1, keepdim=True).unsqueeze(-1)
        pair = (2 * top).expand(*w.shape, w.shape[-1])
    found = near_pair_cancellation(w, tangent, pair, float(w.shape[-1]), opts)
    if found is not None:
        apply_gauge_policy(near_pair_message("eigh", *found), opts)


class _Eigh(torch.autograd.Function):
    """``eigh`` with its derivatives under the convention ``hermitian``
    (torch's: the Hermitian gradient; else w.r.t. the ``uplo`` triangle)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, uplo: str, opts: Options, hermitian: bool, T: Any) -> tuple:
        # T: the forward-mode tangent of A where the caller sees one (None
        # otherwise), a constant here: the basis inside a cluster follows it
        w, V = _linalg.eigh(A, UPLO=uplo)
        return _adapted(w, V, T, uplo, opts, hermitian)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)
        _, ctx.uplo, ctx.opts, ctx.hermitian, T = inputs
        ctx.adapted = T is not None
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        w, V = ctx.saved_tensors
        opts, herm = ctx.opts, ctx.hermitian
        gA = eigh_pullback(w, V, gw, gV, ctx.uplo, opts, hermitian=herm)
        return gA, None, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        check_not_nested_forward_mode("eigh")
        w, V = ctx.saved_tensors
        opts, herm = ctx.opts, ctx.hermitian
        eigh_near_pairs(w, V, dA, ctx.uplo, opts, herm)
        tangents = eigh_pushforward(w, V, dA, ctx.uplo, opts, herm, ctx.adapted)
        return tuple(map(in_layout_of, tangents, (w, V)))


class _EighJulia(torch.autograd.Function):
    """``_Eigh`` on the Julia backend (same formulas, see julia/PySpectral)."""

    @staticmethod
    def forward(
        ctx: Any, A: Tensor, uplo: str, opts: Options, hermitian: bool, T: Any
    ) -> tuple:
        (w, V0), ctx.handles = jeigh.eigh(A, uplo)
        w, V = _adapted(w, V0, T, uplo, opts, hermitian)  # (T as _Eigh's)
        # rotated: a new V, not Julia's (whose handles hold the basis before
        # the rotation): the native rules, the same formulas, use it
        ctx.native, ctx.adapted = V is not V0, T is not None
        ctx.uplo, ctx.opts, ctx.shape_dtype = uplo, opts, (A.shape, A.dtype)
        ctx.hermitian = hermitian
        ctx.save_for_backward(w, V)
        ctx.save_for_forward(w, V)
        ctx.set_materialize_grads(False)
        return w, V

    @staticmethod
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        w, V = ctx.saved_tensors
        herm = ctx.hermitian
        if torch.is_grad_enabled() or ctx.native:
            # create_graph: the native pullback is the same formula, and
            # differentiable, so double backward stays exact.
            gA = eigh_pullback(w, V, gw, gV, ctx.uplo, ctx.opts, hermitian=herm)
            return gA, None, None, None, None
        if gw is None and gV is None:
            return None, None, None, None, None
        second = check_second_order_cotangent(gw, (gV,), ctx.opts)  # as native
        gA = jeigh.eigh_pullback(
            ctx.shape_dtype, ctx.handles, gw, gV, ctx.uplo, ctx.opts, not second, herm
        )
        return gA, None, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        w, V = ctx.saved_tensors
        herm = ctx.hermitian
        eigh_near_pairs(w, V, dA, ctx.uplo, ctx.opts, herm)
        grad = torch.is_grad_enabled() and (dA.requires_grad or V.requires_grad)
        if grad or ctx.native:
            # the tangent will be differentiated: the native pushforward is the
            # same formula, and differentiable (as the backward under create_graph)
            opts, adapted = ctx.opts, ctx.adapted
            tangents = eigh_pushforward(w, V, dA, ctx.uplo, opts, herm, adapted)
            return tuple(map(in_layout_of, tangents, (w, V)))
        if ctx.adapted:  # what the native pushforward measures (Julia's: pushes)
            eigh_check_split(w, V, dA, ctx.uplo, ctx.opts, herm)
        # torch's convention moves the matrix by the tangent's Hermitian part,
        # whose uplo triangle is what Julia's pushforward reads
        dA = hermitian_part(dA) if herm else dA
        return jeigh.eigh_pushforward(ctx.handles, dA, ctx.uplo, ctx.opts)


class _MatrixFunctionJulia(torch.autograd.Function):
    """``_MatrixFunction`` on the Julia backend, for a named ``f`` (``f``: its
    normalised form, which Julia reads; a user's ``f`` takes
    ``_values.SpectralValuesJulia``)."""

    @staticmethod
    def forward(
        ctx: Any, A: Tensor, f: Any, fn: SpectralFn, uplo: str, opts: Options
    ) -> Tensor:
        # A spectrum outside f's domain is found by Julia; the native check,
        # run on Julia's eigenvalues, reports it (native_check).
        Y, ctx.handles = jeigh.matrix_function(
            A, f, uplo, opts, native_check=lambda w: fn(w, opts)
        )
        ctx.f, ctx.fn, ctx.uplo, ctx.opts = f, fn, uplo, opts
        ctx.shape_dtype = (A.shape, A.dtype)
        ctx.save_for_backward(A)
        ctx.save_for_forward(A)
        return Y

    @staticmethod
    def backward(ctx: Any, gY: Tensor) -> tuple:
        if gY._is_zerotensor():
            # autograd's zero (Y not in the loss, e.g. differentiating a
            # forward-mode tangent): nothing to pull back, nothing for Julia
            return None, None, None, None, None
        if torch.is_grad_enabled():
            # create_graph: the native pullback with its exact second order
            (A,) = ctx.saved_tensors
            with torch.no_grad():
                w, V = _linalg.eigh(A, UPLO=ctx.uplo)
            maps = _matrix_function_maps(ctx.fn, ctx.uplo, ctx.opts)
            gA = LinearInA.apply(A, gY, maps, True, w, V)
        else:
            gA = jeigh.matrix_function_pullback(
                ctx.shape_dtype, ctx.handles, ctx.f, gY, ctx.uplo, ctx.opts
            )
        return gA, None, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> Tensor:
        (A,) = ctx.saved_tensors
        uplo, opts = ctx.uplo, ctx.opts
        if torch.is_grad_enabled() and (dA.requires_grad or A.requires_grad):
            # a differentiable tangent: the native operation whose derivatives
            # are the exact second-order formula (as the native jvp); in C
            # order, as Y (the transpose of Julia's column-major Y^T)
            with torch.no_grad():
                w, V = _linalg.eigh(A, UPLO=uplo)
            maps = _matrix_function_maps(ctx.fn, uplo, opts)
            return LinearInA.apply(A, dA, maps, False, w, V)
        return jeigh.matrix_function_pushforward(ctx.handles, ctx.f, dA, uplo, opts)


class _MatrixFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, fn: SpectralFn, uplo: str, opts: Options) -> tuple:
        w, V = _linalg.eigh(A, UPLO=uplo)
        f, _ = fn(w, opts)
        return (V * f.unsqueeze(-2).to(V.dtype)) @ V.mH, w, V

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        A, ctx.fn, ctx.uplo, ctx.opts = inputs
        ctx.mark_non_differentiable(*output[1:])
        ctx.save_for_backward(A, *output[1:])
        ctx.save_for_forward(A, *output[1:])

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        # w, V are non-differentiable outputs: no tangent. The tangent is an
        # operation of (A, dA), so that differentiating it (jacrev(jacfwd),
        # jacfwd(jacfwd)) takes the exact second-order formula.
        A, w, V = ctx.saved_tensors
        maps = _matrix_function_maps(ctx.fn, ctx.uplo, ctx.opts)
        return LinearInA.apply(A, dA, maps, False, w, V), None, None

    @staticmethod
    def backward(ctx: Any, gY: Tensor, *_: Tensor) -> tuple:
        A, w, V = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph (double backward, hessian): the pullback as an
            # operation whose own derivative is the exact second-order formula.
            maps = _matrix_function_maps(ctx.fn, ctx.uplo, ctx.opts)
            return LinearInA.apply(A, gY, maps, True, w, V), None, None, None
        gA = matrix_function_pullback(w, V, ctx.fn, gY, ctx.uplo, ctx.opts)
        return gA, None, None, None


def _matrix_function_maps(fn: SpectralFn, uplo: str, opts: Options) -> SpectralMaps:
    """``matrix_function``'s first- and second-order maps, ``T = (w, V)``
    (see ``LinearInA``: ``L_f(A)`` is self-adjoint and the second-order form
    ``<R, L2_f(A; E, D)>`` symmetric in ``R, E, D``). The pushforward's
    derivative is ``L2_f(A; herm dA, herm D)`` itself: a tangent of ``Y``, not
    folded onto a triangle as the gradients are."""

    def pushforward_second(T: Any, dA: Tensor, D: Tensor) -> Tensor:
        E, F = hermitian_from_triangle(dA, uplo), hermitian_from_triangle(D, uplo)
        scale = tangent_scale(dA) * tangent_scale(D)
        return matrix_function_second(*T, fn, E, F, opts, _same, scale)

    return SpectralMaps(
        "matrix_function",
        lambda T, gY: matrix_function_pullback(*T, fn, gY, uplo, opts),
        lambda T, dA: matrix_function_pushforward(*T, fn, dA, uplo, opts),
        lambda T, gY, D: matrix_function_second_order(*T, fn, gY, D, uplo, opts),
        pushforward_second,
    )


def _same(G: Tensor) -> Tensor:
    return G


def _with_gradient(op: str, A: Tensor, gradient: Any) -> Tensor:
    """``A`` under the derivative convention ``gradient`` (None: the
    default). ``"triangle"``: ``A`` itself (the derivatives w.r.t. the
    entries read). ``"hermitian"`` (torch's and JAX's): ``A`` through
    :class:`_HermitianPart`, whose derivatives are those of ``(A + A^H) /
    2``: a tangent acts through its Hermitian part and the gradient is the
    Hermitian ``G`` (whose fold onto the triangle is the triangle-true
    gradient; the two agree on every Hermitian direction). (The native
    ``eigh`` applies the convention in its own pullback: :func:`_decompose`.)"""
    return _hermitian_input(A, gradient_convention(gradient, op) == "hermitian")


def _hermitian_input(A: Tensor, hermitian: bool) -> Tensor:
    """``A`` through :class:`_HermitianPart` if ``hermitian`` and it is
    differentiated, else itself."""
    return apply(_HermitianPart, A) if hermitian and differentiated(A) else A


def _decompose(
    A: Tensor,
    uplo: str,
    opts: Options,
    backend: str,
    hermitian: bool,
    adapt: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(w, V)`` of the whole ``eigh`` with derivatives under the convention
    (``hermitian``), on the backend that runs the call; either applies it in
    its own pullback (no extra operation). ``adapt``: the basis inside a
    degenerate cluster follows ``A``'s forward-mode tangent, where there is
    one (``forward_tangent``; not for a truncation, whose cut it would move)."""
    T = forward_tangent(A) if adapt else None
    if not on_julia("eigh", backend, A):
        return apply(_Eigh, A, uplo, opts, hermitian, T)
    return apply(_EighJulia, A, uplo, opts, hermitian, T)


def _adapted(w: Tensor, V: Tensor, T: Tensor | None, uplo: str, opts: Options,
             hermitian: bool) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``(w, V)`` with ``V`` rotated to the basis adapted to the forward-mode
    tangent ``T`` (None: as it is) inside each cluster degenerate to rounding
    that ``T`` splits (``eigh_adapted_rotation``): the basis is arbitrary
    there, and this one is the branch the tangent follows, so the tangents
    are exact (docs/guide/forward-mode.md)."""
    if T is None:
        return w, V
    R = eigh_adapted_rotation(w, V, T, uplo, opts, hermitian)
    return (w, V) if R is None else (w, V @ R)


class _HermitianPart(torch.autograd.Function):
    """The identity on ``A`` (the values read are ``A``'s, whatever the other
    triangle holds), differentiated as ``(A + A^H) / 2``: the pullback and the
    pushforward are both the Hermitian part (self-adjoint), written in
    differentiable operations (second derivatives pass through). A copy, not
    a view: forward-mode AD requires a view's tangent to be a view."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor) -> Tensor:
        return A.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return hermitian_part(g)

    @staticmethod
    def jvp(ctx: Any, dA: Tensor) -> Tensor:
        return hermitian_part(dA)
