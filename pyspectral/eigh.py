"""Hermitian eigendecomposition with stable gradients: ``eigh``, ``eigvalsh``
and the spectral matrix functions ``matrix_function`` (``V f(L) Vh``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import _ops
from ._autograd import (
    LinearInA,
    SpectralMaps,
    apply,
    check_not_nested_forward_mode,
    forward_tangent,
    in_layout_of,
)
from ._backend import BACKENDS
from ._fns import (
    SpectralFn,
    UserFunction,
    named_argument,
    power,
    power_second,
    user_function,
)
from ._route import compiled, on_julia, with_out
from ._second_order import check_second_order_cotangent
from ._settings import Options, gradient_convention, options
from ._validation import (
    check_flag,
    check_hermitian_matrix,
    check_keywords,
    check_matrix,
    check_top_k_keywords,
    check_truncation_method,
    check_uplo,
    require_hermitian,
    truncation_rule,
)
from ._values import ValuesOp, apply_values, differentiated
from .common.defaults import degeneracy_tol, peek
from .common.gauge import (
    apply_gauge_policy,
    herm_in_basis,
    near_pair_cancellation,
    near_pair_message,
)
from .exceptions import DomainError, InputError, InputTypeError
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
from .topk import EighTopK, EighTopKJulia
from .truncation import (
    TruncatedEighResult,
    eigh_ranks,
    truncated_eigh,
    truncated_eigh_by_magnitude,
    truncation_path,
)

__all__ = ["EighResult", "eigh", "eigvalsh", "matrix_function", "eigh_pullback"]


class EighResult(NamedTuple):
    """The result of :func:`eigh` and :func:`eigh_topk`:
    ``A = V diag(eigenvalues) V^H`` with ``V = eigenvectors``.

    ``eigenvalues: (*, r)`` real (float32 or float64, the precision of
    ``A``) and ascending; ``eigenvectors: (*, n, r)`` of ``A``'s dtype, one
    eigenvector per column; ``r = n``, or the kept width of a top-k or
    truncated call. A named tuple, so it unpacks as ``w, V = eigh(A)``;
    constructing one checks nothing.

    Example::

        >>> A = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
        >>> result = eigh(A)
        >>> type(result).__name__, result._fields
        ('EighResult', ('eigenvalues', 'eigenvectors'))
        >>> result.eigenvalues.round(decimals=10)
        tensor([1., 2.], dtype=torch.float64)
    """

    eigenvalues: Tensor
    eigenvectors: Tensor


# ----------------------------------------------------- autograd functions


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
        w, V = torch.linalg.eigh(A, UPLO=uplo)
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
                w, V = torch.linalg.eigh(A, UPLO=ctx.uplo)
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
                w, V = torch.linalg.eigh(A, UPLO=uplo)
            maps = _matrix_function_maps(ctx.fn, uplo, opts)
            return LinearInA.apply(A, dA, maps, False, w, V)
        return jeigh.matrix_function_pushforward(ctx.handles, ctx.f, dA, uplo, opts)


class _MatrixFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, fn: SpectralFn, uplo: str, opts: Options) -> tuple:
        w, V = torch.linalg.eigh(A, UPLO=uplo)
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


# ------------------------------------------------------ matrix functions


def _positive(name: str, strict: bool) -> Any:
    """Domain check for functions of a positive (semi)definite spectrum.

    Eigenvalues within ``degeneracy_atol`` below zero are rounding noise of a
    semidefinite matrix and are clamped to 0 where ``f(0)`` exists.
    """

    def check(w: Tensor, opts: Options) -> Tensor:
        tol = degeneracy_tol(w, opts.degeneracy_atol)[..., 0]
        bad = peek(w <= 0 if strict else w < -tol)
        if bool(bad.any()):
            idx = bad.nonzero()[0].tolist()
            value = float(peek(w)[tuple(idx)])
            where = f"eigenvalue {idx[-1]}" + (
                f" of batch element {tuple(idx[:-1])}" if len(idx) > 1 else ""
            )
            need = "positive definite" if strict else "positive semidefinite"
            raise DomainError(
                f"matrix_function: {name} needs a {need} input, but {where} is "
                f"{value:.6g}. Shift the spectrum (A + c*I) or use a function "
                "defined there."
            )
        return w if strict else torch.clamp(w, min=0)

    return check


def _named(name: str, p: float = 1.0) -> SpectralFn:
    spec = name if name != "pow" else (name, p)
    if name == "exp":
        return SpectralFn(
            "exp",
            lambda w, o: (torch.exp(w), torch.exp(w)),
            lambda w, o: torch.exp(w),
            spec=spec,
        )
    if name == "log":
        dom = _positive("'log'", strict=True)
        return SpectralFn(
            "log",
            lambda w, o: (torch.log(dom(w, o)), 1 / w),
            lambda w, o: -1 / w**2,
            spec=spec,
        )
    if name in ("sqrt", "invsqrt"):
        fn = _named("pow", 0.5 if name == "sqrt" else -0.5)
        fn.spec = name
        return fn
    second = power_second(p)
    if p == int(p) and p >= 0:
        return SpectralFn(
            f"pow {p}", lambda w, o: power(p)(w), lambda w, o: second(w), spec=spec
        )
    dom = _positive(f"('pow', {p})", strict=p < 0)
    return SpectralFn(
        f"pow {p}",
        lambda w, o: power(p)(dom(w, o)),
        lambda w, o: second(torch.clamp(w, min=0) if p > 0 else w),
        spec=spec,
    )


_MATFUN_NAMES = (
    '"sqrt"',
    '"invsqrt"',
    '"log"',
    '"exp"',
    '("pow", p)',
    "a callable f",
    "(f, f_prime)",
    "(f, f_prime, f_second)",
)


def _matfun(f: Any) -> SpectralFn:
    """The named matrix function ``f``, its argument validated; ``fn.spec``
    is ``f`` normalised (what Julia reads)."""
    if isinstance(f, str) and f in ("exp", "log", "sqrt", "invsqrt"):
        return _named(f)
    named = named_argument("matrix_function", f, ("pow",))
    if named is None:
        raise InputTypeError(
            f"matrix_function: f must be one of {', '.join(_MATFUN_NAMES)}, got {f!r}"
        )
    return _named("pow", named[1])


_ops.NAMED["matrix_function"] = _matfun


def _user_matrix_function(
    A: Tensor, user: UserFunction, uplo: str, opts: Options, julia: bool
) -> Tensor:
    """``V f(w) V^H`` for a user's ``f``, differentiable in ``A`` and in every
    tensor ``f`` uses (see ``_values.py`` and ``svd._user_svd_function``)."""
    if julia:
        (w, V), on_julia = jeigh.eigh_values(A, uplo)
    else:
        w, V = torch.linalg.eigh(A.detach(), UPLO=uplo)
    f, d = user.values(w)
    op = ValuesOp(
        "matrix_function",
        lambda fn: _matrix_function_maps(fn, uplo, opts),
        _eigh_form,
        _eigh_diagonal,
        user.second,
        spectrum=0,
        odd=False,
    )
    return apply_values(A, f, d, op, (w, V), on_julia if julia else None)


def _eigh_form(T: tuple, x: Tensor) -> Tensor:
    _, V = T
    return (V * x.unsqueeze(-2).to(V.dtype)) @ V.mH


def _eigh_diagonal(T: tuple, G: Tensor) -> Tensor:
    """``Re diag(V^H G V)``, the transpose of :func:`_eigh_form` in ``x``."""
    _, V = T
    return (V.conj() * (G @ V)).sum(-2).real


# ------------------------------------------------------------ public API


def _check_hermitian_flags(op: str, check: Any, tol: float | None) -> bool:
    """``check_hermitian`` as a bool; ``hermitian_tol`` is its tolerance and
    means nothing without it."""
    check = check_flag(op, "check_hermitian", check)
    if tol is not None and not check:
        raise InputError(
            f"{op}: hermitian_tol is the tolerance of check_hermitian=True, which "
            "was not asked for; pass check_hermitian=True or drop hermitian_tol"
        )
    return check


def _check_matfun_input(A: Any, UPLO: Any, check: bool, tol: float | None) -> str:
    """``matrix_function``'s ``A`` and ``UPLO`` (:func:`_check`), and, unless
    ``check_hermitian=False``, that ``A`` is Hermitian: ``V f(Lambda) V^H``
    of one triangle is ``f(A)`` only then. One host read for both checks
    (``check_hermitian_matrix``)."""
    uplo = check_uplo("matrix_function", UPLO)
    check_matrix("matrix_function", A, square=True, uplo=uplo, finite=not check)
    if check:
        check_hermitian_matrix("matrix_function", A, tol, _ops.NON_HERMITIAN)
    return uplo


def _check(op: str, A: Any, UPLO: Any) -> str:
    """Validate ``A`` and ``UPLO`` as ``torch.linalg.eigh`` does (either case of
    ``UPLO``; only that triangle must be finite); returns ``"L"`` or ``"U"``."""
    uplo = check_uplo(op, UPLO)
    check_matrix(op, A, square=True, uplo=uplo)
    return uplo


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


def eigh(
    A: Tensor,
    UPLO: str = "L",
    *,
    backend: str = "auto",
    gradient: str | None = None,
    check_hermitian: bool = False,
    hermitian_tol: float | None = None,
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    k: int | None = None,
    largest: bool = True,
    by: str = "value",
    atol: float | None = None,
    rtol: float | None = None,
    error_atol: float | None = None,
    error_rtol: float | None = None,
    multiplets: str = "cut",
    min_rank: int | None = None,
    return_error: bool = False,
    method: str = "auto",
    oversample: int | None = None,
    n_iter: int | None = None,
    backward_rtol: float | None = None,
    backward_maxiter: int = 500,
    out: tuple[Tensor, Tensor] | None = None,
) -> EighResult | TruncatedEighResult:
    r"""eigh(A, UPLO="L", *, backend="auto", ...) -> (eigenvalues, eigenvectors)

    Eigendecomposition of a Hermitian (real symmetric) matrix with a stable
    backward pass.

    .. math::
        A = V \operatorname{diag}(\Lambda) V^{H}, \qquad
        \Lambda_1 \le \Lambda_2 \le \dots

    ``A`` has shape ``(*, n, n)`` where ``*`` is zero or more batch dimensions
    (``n = 0`` and empty batches give empty results). As in
    ``torch.linalg.eigh``, ``UPLO`` is ``"L"`` or ``"U"`` in either case and
    only that triangle is read (and must be finite; the imaginary part of the
    diagonal is ignored), unless ``check_hermitian=True``, which first raises
    if ``max|A - A^H| > hermitian_tol`` for a matrix of the batch (default
    ``eps**0.75 max|A|``, per matrix; ``hermitian_tol`` without
    ``check_hermitian=True`` raises). ``A`` is float32, float64, complex64 or
    complex128 (other dtypes raise); the eigenvalues are real (float32 or
    float64), the eigenvectors (the columns of ``V``) of ``A``'s dtype. Each
    eigenvector is defined up to a phase (a sign for real input), and inside
    a degenerate cluster up to a rotation: the forward returns
    ``torch.linalg.eigh``'s choice, and the backward asks the loss not to
    depend on it (``gauge``, as in :func:`svd`).

    ``gradient``: the convention of the derivatives w.r.t. ``A``.
    ``"hermitian"`` (the default setting, torch's and JAX's; see
    :func:`set_defaults`) gives the Hermitian
    gradient ``G`` (a symmetric leaf stays symmetric under ``A -= lr *
    A.grad``) and reads a tangent ``dA`` through its Hermitian part: the
    derivatives of ``(A + A^H) / 2``. ``"triangle"`` gives the true
    gradient w.r.t. the entries read: the other triangle gets zero and the
    read triangle twice the off-diagonal entries of ``G``. The two agree on
    every Hermitian direction (any parametrisation such as
    ``eigh(X + X.mH)`` gets the same gradient under both).

    .. warning:: Gradients are finite at every spectrum and exact for
        losses that see eigenvectors through complete degenerate clusters
        (``degeneracy_atol``, default ``max|Lambda| * eps**0.75``); for
        ``V f(Lambda) V^H`` use :func:`matrix_function`. Basis-dependent
        losses trigger ``gauge``.

    With ``k``: the ``k`` largest (``largest=True``) or smallest eigenpairs,
    ascending, with the exact coupling to the rest of the spectrum in the
    gradient; ``method`` (``"full"``, ``"randomized"``, ``"krylov"``,
    ``"auto"``) and its parameters as in :func:`svd`. The iteration reads
    the ``UPLO`` triangle like the full path; it converges where the wanted
    end of the spectrum is separated from the rest (``auto`` takes the full
    path, and the iterative methods warn, where it is not).

    Truncation as in :func:`svd`, by order: the kept eigenpairs are always
    the ``r`` at the wanted end, and the rules read the eigenvalues from it,
    ``x = lambda`` descending (``largest=True``) or ``x = -lambda`` from the
    smallest (``largest=False``): ``k`` at most; ``atol``, ``rtol`` keep the
    ``x_i > max(atol, rtol |x_1|)`` (``|x_1|``: the extreme eigenvalue at the
    wanted end, the ``S_1`` of ``svd``; a positive semidefinite ``A`` keeps
    the ``lambda_i > max(atol, rtol lambda_max)``); ``error_atol``,
    ``error_rtol`` keep the fewest with ``||lambda_discarded||_2 <=
    max(error_atol, error_rtol ||lambda||_2)`` (every discarded eigenvalue
    counts, at either end); ``multiplets`` (``"cut"``, ``"down"``, ``"up"``:
    towards fewer or more kept pairs) and the floor ``min_rank`` as in
    :func:`svd`. ``by="magnitude"`` ranks the eigenvalues by ``|lambda|``
    instead (as MatrixAlgebraKit's and ITensor's truncations do; the rules
    then read ``x = |lambda|``; with ``largest=True``, on the full
    decomposition) and returns the kept pairs largest magnitude first,
    padding after them. Batched, the width is
    the largest rank, padded with zero eigenpairs on the side away from the
    wanted end (before the kept ones for ``largest=True``, after them
    otherwise). ``return_error=True`` returns a :class:`TruncatedEighResult`
    ``(eigenvalues, eigenvectors, error, rel_error, rank)``,
    ``error = ||lambda_discarded||_2`` and ``rel_error = error / ||A||_F``.
    The iterative path supports the rules as :func:`svd` (its error is
    ``||A - V_r diag(lambda_r) V_r^H||_F``), and unused arguments raise as
    there; ``largest=False`` needs ``k`` or a tolerance.
    ``backend`` and ``out=(eigenvalues, eigenvectors)`` as in
    :func:`pyspectral.svd` (``"auto"``: native; ``out=`` as
    ``torch.linalg.eigh``'s, without autograd, not with a truncation).

    Returns:
        ``(eigenvalues, eigenvectors)``, a named tuple (:class:`EighResult`);
        eigenvalues are real and ascending. With ``return_error=True``, a
        :class:`TruncatedEighResult`
        ``(eigenvalues, eigenvectors, error, rel_error, rank)``.

    Raises:
        InputTypeError: ``A`` is not a tensor, ``UPLO`` is not a string, or
            ``check_hermitian``, ``largest`` or ``return_error`` is not a
            bool.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        UPLOError: ``UPLO`` is a string other than ``"L"`` or ``"U"`` (either
            case).
        NonFiniteError: NaN or Inf in the ``UPLO`` triangle (in either
            triangle with ``check_hermitian=True``).
        InputError: ``check_hermitian=True`` and ``A`` is not Hermitian to
            ``hermitian_tol``; ``hermitian_tol`` without
            ``check_hermitian=True``; ``largest=False`` without ``k`` or a
            tolerance; a keyword out of range or one the call would not use,
            as in :func:`svd`.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        GaugeError: in the backward, under ``gauge="raise"``, when the loss
            depends on the basis inside a degenerate cluster (under
            ``"warn"``, the default, a :class:`GaugeWarning` instead).
        DerivativeError: a second derivative through the iterative top-k
            path (``method="full"`` has them).
        JuliaError: an error inside Julia (``backend="julia"``).

    Warns:
        GaugeWarning: under ``gauge="warn"``, as for ``GaugeError``.
        ConvergenceWarning: ``method="randomized"`` could not certify the
            ``k`` eigenpairs or the backward's solve.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(4, 4, dtype=torch.float64, generator=g)
        >>> w, V = eigh(X + X.mT)
        >>> w.shape, V.shape, bool((w[1:] >= w[:-1]).all())  # ascending
        (torch.Size([4]), torch.Size([4, 4]), True)
        >>> bool(torch.dist(V @ torch.diag(w) @ V.mT, X + X.mT) < 1e-12)
        True
        >>> A = torch.tensor([[2.0, 99.0], [1.0, 2.0]], dtype=torch.float64)
        >>> w = eigh(A).eigenvalues  # reads the lower triangle: [[2, 1], [1, 2]]
        >>> w.round(decimals=10)
        tensor([1., 3.], dtype=torch.float64)
    """
    others = (atol, rtol, error_atol, error_rtol, min_rank, out, hermitian_tol)
    others += (oversample, n_iter, backward_rtol)
    static = multiplets == "cut" and return_error is False and backward_maxiter == 500
    static = static and check_hermitian is False and by == "value"
    static = static and method in ("auto", "full") and all(x is None for x in others)
    settings = (degeneracy_atol, broadening, gauge, gauge_atol, gradient)
    res = compiled(backend, static, _ops.call_eigh, A, UPLO, k, largest, *settings)
    if res is not None:
        return EighResult(*res)
    # The common call, every keyword at its default (what the checks below
    # would find): A, UPLO and the convention are all there is to check.
    if (
        backend in BACKENDS
        and check_hermitian is False
        and largest is True
        and by == "value"
        and multiplets == "cut"
        and return_error is False
        and method == "auto"
        and type(backward_maxiter) is int
        and backward_maxiter == 500
        and all(x is None for x in (k, atol, rtol, error_atol, error_rtol, min_rank))
        and all(x is None for x in (hermitian_tol, degeneracy_atol, broadening, gauge))
        and all(x is None for x in (gauge_atol, oversample, n_iter, backward_rtol, out))
    ):
        UPLO = _check("eigh", A, UPLO)
        hermitian = gradient_convention(gradient, "eigh") == "hermitian"
        opts = options(op="eigh")
        return EighResult(*_decompose(A, UPLO, opts, backend, hermitian, True))
    # Every argument is validated before a backend is chosen (and Julia started).
    call = _check_eigh(
        A, UPLO, gradient, check_hermitian, hermitian_tol, degeneracy_atol, broadening,
        gauge, gauge_atol, k, largest, by, atol, rtol, error_atol, error_rtol,
        multiplets, min_rank, return_error, method, oversample, n_iter, backward_rtol,
        backward_maxiter,
    )  # fmt: skip
    res = with_out("eigh", out, backend, A, lambda: torch.linalg.eigh(
        A, UPLO=call.uplo, out=out), call.rule)  # fmt: skip
    if res is not None:
        return EighResult(*res)
    if call.magnitude:
        return _eigh_by_magnitude(A, call, backend, return_error)
    if call.rule is None:
        args = (call.uplo, call.opts, backend, call.hermitian, True)
        return EighResult(*_decompose(A, *args))
    return _truncated(A, call, method, backend, return_error)


class _EighCall(NamedTuple):
    """The checked arguments of one :func:`eigh` call."""

    uplo: str
    kw: dict
    rule: Any
    opts: Options
    hermitian: bool
    largest: bool
    magnitude: bool


def _check_eigh(
    A: Any,
    UPLO: Any,
    gradient: Any,
    check_hermitian: Any,
    hermitian_tol: Any,
    degeneracy_atol: Any,
    broadening: Any,
    gauge: Any,
    gauge_atol: Any,
    k: Any,
    largest: Any,
    by: Any,
    atol: Any,
    rtol: Any,
    error_atol: Any,
    error_rtol: Any,
    multiplets: Any,
    min_rank: Any,
    return_error: Any,
    method: Any,
    oversample: Any,
    n_iter: Any,
    backward_rtol: Any,
    backward_maxiter: Any,
) -> _EighCall:
    """Every argument of :func:`eigh` checked (``_validation``), ``A``'s
    hermiticity if asked, and the call's options and truncation rule."""
    UPLO = _check("eigh", A, UPLO)
    kw = check_keywords(
        "eigh",
        A,
        k=k,
        atol=atol,
        rtol=rtol,
        error_atol=error_atol,
        error_rtol=error_rtol,
        min_rank=min_rank,
        hermitian_tol=hermitian_tol,
        degeneracy_atol=degeneracy_atol,
        broadening=broadening,
        gauge_atol=gauge_atol,
        oversample=oversample,
        n_iter=n_iter,
        backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )
    check_hermitian = _check_hermitian_flags(
        "eigh", check_hermitian, kw["hermitian_tol"]
    )
    largest = check_flag("eigh", "largest", largest)
    magnitude = _check_by(by, largest, method)
    iteration = dict(
        oversample=oversample,
        n_iter=n_iter,
        backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )
    check_top_k_keywords("eigh", kw["k"], method, **iteration)
    rule = truncation_rule("eigh", kw, multiplets, return_error)
    check_truncation_method("eigh", rule, method, **iteration)
    if not largest and (rule is None or not rule.truncates):
        # (a rule reads the spectrum from the wanted end: then largest counts)
        raise InputError(
            "eigh: largest=False chooses the k smallest eigenpairs, which needs k "
            "or a truncation tolerance (atol, rtol, error_atol, error_rtol) read "
            "from the smallest end (got neither: all of them); pass k or drop "
            "largest"
        )
    if check_hermitian:
        require_hermitian("eigh", A, kw["hermitian_tol"])
    opts = options(
        kw["degeneracy_atol"], kw["broadening"], gauge, kw["gauge_atol"], op="eigh"
    )
    hermitian = gradient_convention(gradient, "eigh") == "hermitian"
    return _EighCall(UPLO, kw, rule, opts, hermitian, largest, magnitude)


def _truncated(
    A: Tensor, call: _EighCall, method: str, backend: str, return_error: bool
) -> EighResult | TruncatedEighResult:
    """The truncated eigh: the iterative top-k path or the whole
    decomposition, cut at each matrix's rank (``truncation.py``)."""
    rule, opts, largest, UPLO = call.rule, call.opts, call.largest, call.uplo
    n = A.shape[-1]
    cap = n if rule.k is None else min(rule.k, n)
    path, cfg = truncation_path("eigh", A, rule, cap, method, call.kw)
    julia = on_julia("eigh", backend, A)
    if path == "iterative":
        A = _hermitian_input(A, call.hermitian)
        at_cap = rule._replace(k=cap)
        if julia:
            w, V, block = apply(EighTopKJulia, A, cap, largest, UPLO, cfg, opts)
            r, _ = eigh_ranks(block, at_cap, largest, opts, True, kept_first=cap)
        else:
            out = apply(EighTopK, A, cap, largest, UPLO, cfg, opts)
            w, V, wd, we = out[0], out[1], out[2], out[5]
            if wd.shape[-1] == n:  # the whole decomposition, ascending
                r, _ = eigh_ranks(wd, at_cap, largest, opts, False)
            else:  # the kept ones first, then from the wanted end
                block = torch.cat([wd, we], -1)
                r, _ = eigh_ranks(block, at_cap, largest, opts, False, kept_first=cap)
        H = hermitian_from_triangle(A, UPLO) if return_error else None
        fields = truncated_eigh(H, w, V, r, cap, largest, return_error)
    else:
        w, V = _decompose(A, UPLO, opts, backend, call.hermitian)
        r, tails = eigh_ranks(w, rule, largest, opts, julia, errors=return_error)
        fields = truncated_eigh(None, w, V, r, cap, largest, return_error, tails)
    return fields if return_error else EighResult(*fields)


def _check_by(by: Any, largest: bool, method: str) -> bool:
    """Whether ``by`` asks for a truncation by magnitude (``"magnitude"``)
    rather than by value (``"value"``, the default)."""
    if by not in ("value", "magnitude"):
        raise InputError(f"eigh: by must be 'value' or 'magnitude', got {by!r}")
    if by == "value":
        return False
    if not largest:
        raise InputError(
            "eigh: by='magnitude' keeps the eigenpairs largest in magnitude; "
            "largest=False has no meaning there: drop it, or truncate by value"
        )
    if method in ("randomized", "krylov"):
        raise InputError(
            "eigh: by='magnitude' takes the full decomposition (the iterative "
            f"path reads the signed ends); drop method={method!r}"
        )
    return True


def _eigh_by_magnitude(
    A: Tensor, call: _EighCall, backend: str, return_error: bool
) -> EighResult | TruncatedEighResult:
    """The truncation by magnitude: the whole decomposition, its eigenpairs
    ranked by ``|lambda|`` (descending), the rules on that ranking."""
    rule = call.rule
    if rule is None or not rule.truncates:
        raise InputError(
            "eigh: by='magnitude' orders a truncation, but none is asked for; pass "
            "k or a tolerance (atol, rtol, error_atol, error_rtol), or drop by"
        )
    w, V = _decompose(A, call.uplo, call.opts, backend, call.hermitian)
    julia = on_julia("eigh", backend, A)
    fields = truncated_eigh_by_magnitude(w, V, rule, call.opts, julia, return_error)
    return fields if return_error else EighResult(*fields)


def eigvalsh(
    A: Tensor,
    UPLO: str = "L",
    *,
    backend: str = "auto",
    gradient: str | None = None,
    out: Tensor | None = None,
) -> Tensor:
    r"""eigvalsh(A, UPLO="L", *, backend="auto", gradient=..., out=None) -> Tensor

    Eigenvalues of a Hermitian ``A`` (shape ``(*, n, n)``), real and ascending,
    shape ``(*, n)``: float32 for float32 and complex64 input, float64 for
    float64 and complex128 (other dtypes raise). Only the ``UPLO`` triangle
    is read, as in ``torch.linalg.eigvalsh``. The gradient ``V diag(gw) V^H``
    (``gradient="triangle"``: folded onto the ``UPLO`` triangle) is exact for
    symmetric functions of the eigenvalues at any spectrum (``trace``,
    ``sum(w**2)``, ...); second derivatives at a degenerate cluster as in
    :func:`eigh`. ``UPLO``, ``backend``, ``gradient`` and ``out`` as in
    :func:`eigh` (``"auto"``: native).

    Raises:
        InputTypeError: ``A`` is not a tensor, or ``UPLO`` is not a string.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        UPLOError: ``UPLO`` is a string other than ``"L"`` or ``"U"``.
        NonFiniteError: NaN or Inf in ``A`` (with ``check_hermitian=False``:
            in the ``UPLO`` triangle).
        InputError: ``out=`` with ``backend="julia"``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        JuliaError: an error inside Julia (``backend="julia"``).

    Example::

        >>> A = torch.tensor([[2.0, 0.0], [1.0, 2.0]], dtype=torch.float64,
        ...                  requires_grad=True)
        >>> w = eigvalsh(A)  # of [[2, 1], [1, 2]]: the lower triangle
        >>> w.round(decimals=10)
        tensor([1., 3.], dtype=torch.float64, grad_fn=<...>)
        >>> w.sum().backward()  # the trace: its gradient is the identity
        >>> torch.allclose(A.grad, torch.eye(2, dtype=torch.float64))
        True
    """
    res = compiled(backend, out is None, _ops.call_eigh, A, UPLO, None, True, None,
                   None, None, None, gradient)  # fmt: skip
    if res is not None:
        return res[0]
    UPLO = _check("eigvalsh", A, UPLO)
    hermitian = gradient_convention(gradient, "eigvalsh") == "hermitian"
    res = with_out("eigvalsh", out, backend, A, lambda: torch.linalg.eigvalsh(
        A, UPLO=UPLO, out=out))  # fmt: skip
    if res is not None:
        return res
    # torch's own eigvalsh only without autograd: its derivatives read both
    # triangles (a forward-AD dual tensor does not require grad)
    if not differentiated(A) and not on_julia("eigvalsh", backend, A):
        return torch.linalg.eigvalsh(A, UPLO=UPLO)
    return _decompose(A, UPLO, options(op="eigvalsh"), backend, hermitian, True)[0]


def matrix_function(
    A: Tensor,
    f: Any,
    UPLO: str = "L",
    *,
    backend: str = "auto",
    gradient: str | None = None,
    check_hermitian: bool = True,
    hermitian_tol: float | None = None,
    degeneracy_atol: float | None = None,
) -> Tensor:
    r"""matrix_function(A, f, UPLO="L", *, backend="auto", ...) -> Tensor

    Spectral function of a Hermitian matrix with the exact (Daleckii-Krein)
    pullback.

    .. math::
        Y = V f(\Lambda) V^{H}, \qquad A = V \Lambda V^{H}

    ``A`` has shape ``(*, n, n)``; ``Y`` the same. ``f`` is ``"sqrt"``,
    ``"invsqrt"``, ``"log"``, ``"exp"``, ``("pow", p)`` (``p`` a finite real)
    or an elementwise torch function ``f`` that maps the eigenvalues to real
    tensors of their shape (``f`` finite there): alone (``f'`` is torch's
    derivative of it), as a pair ``(f, f_prime)`` or as a triple
    ``(f, f_prime, f_second)``. ``f`` may use other tensors (the coefficients
    of a spectral filter, a temperature ``beta`` in ``exp(-beta w)``): they
    get the gradient ``sum_i df(w_i)/dtheta Re(V^H gY V)_ii``, to second
    order. It runs on either backend: on Julia's, it is evaluated in Python
    on the eigenvalues Julia computed, and Julia gets the values.

    .. warning:: The gradient is exact at every spectrum, degenerate ones
        included, and so are second derivatives (second divided differences;
        ``f''`` from ``f_second`` or torch's derivative of ``f_prime``).
        ``"log"``, ``"invsqrt"`` and negative powers need a positive
        definite ``A``; ``"sqrt"`` and fractional powers a semidefinite one
        (eigenvalues down to ``-degeneracy_atol`` are clamped to 0). Outside
        the domain a :class:`DomainError` names the eigenvalue. Where ``f'`` is
        infinite (``sqrt`` at an exact zero eigenvalue) the gradient is ``+-inf``
        exactly in the entries that the infinite divided difference
        ``f[0, 0]`` reaches (``diag(0, .5, 2, 3)``: entry ``(0, 0)`` alone) and
        finite, never NaN, elsewhere: ``f[0, x] = f(x) / x`` is finite.
        ``gradient`` (torch's Hermitian convention, or ``"triangle"``) and
        ``UPLO`` as in :func:`eigh`; ``n = 0`` gives an empty result.

    ``A`` is float32, float64, complex64 or complex128 (other dtypes raise);
    ``Y`` has its dtype and is Hermitian. ``Y`` does not depend on the
    phases or the basis chosen inside a degenerate cluster, so no gauge
    convention enters and no gauge policy applies. Exactness class: exact
    gradients at every spectrum, the composite to use for ``V f(Lambda)
    V^H`` rather than :func:`eigh`.

    ``A`` must be Hermitian: ``max|A - A^H| <= hermitian_tol`` per matrix
    (default ``eps**(3/4) max|A|``), else :class:`InputError` naming
    :func:`eig_function`, the route for ``f(A)`` of a non-Hermitian ``A``
    (``V f(Lambda) V^H`` of one triangle is not ``f(A)`` there).
    ``check_hermitian=False`` skips the check and reads only the ``UPLO``
    triangle, as ``torch.linalg.eigh`` does (for a matrix stored in one
    triangle, or a finite-difference check that perturbs single entries).
    ``backend`` as in :func:`pyspectral.svd` (``"auto"``: native);
    ``degeneracy_atol`` as in :func:`eigh`.

    Returns:
        ``Y``, shape ``(*, n, n)``, the dtype of ``A``.

    Raises:
        InputTypeError: ``A`` is not a tensor, ``UPLO`` is not a string,
            ``check_hermitian`` is not a bool, or ``f`` is not one of the
            forms above (or a user ``f`` returns a non-tensor or a complex
            tensor).
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        UPLOError: ``UPLO`` is a string other than ``"L"`` or ``"U"``.
        NonFiniteError: NaN or Inf in ``A`` (with ``check_hermitian=False``:
            in the ``UPLO`` triangle).
        InputError: ``p`` of ``("pow", p)`` not finite (or a tensor that
            requires grad), a user ``f`` not elementwise, an invalid
            ``degeneracy_atol`` / ``hermitian_tol``, ``hermitian_tol``
            with ``check_hermitian=False``, or ``A`` not Hermitian (unless
            ``check_hermitian=False``).
        DomainError: the spectrum is outside ``f``'s domain (see above), or
            a user ``f`` is not finite on it.
        DerivativeError: a third derivative, or a user ``f`` whose
            derivative torch cannot take and no ``f_prime`` was given.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        JuliaError: an error inside Julia (``backend="julia"``).

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(4, 4, dtype=torch.float64, generator=g)
        >>> A = X @ X.mT + torch.eye(4, dtype=X.dtype)
        >>> R = matrix_function(A, "sqrt")
        >>> bool(torch.dist(R @ R, A) < 1e-10)
        True
        >>> I3 = torch.eye(3, dtype=torch.float64, requires_grad=True)
        >>> L = matrix_function(I3, "log")  # a triple eigenvalue: still exact
        >>> L.trace().backward()  # d trace(log A) / dA = A^-1 = I here
        >>> torch.allclose(I3.grad, torch.eye(3, dtype=torch.float64))
        True
    """
    static = hermitian_tol is None and type(check_hermitian) is bool
    Y = compiled(backend, static, _ops.call_matrix_function, A, f, UPLO,
                 degeneracy_atol, gradient, check_hermitian)  # fmt: skip
    if Y is not None:
        return Y
    kw = check_keywords(
        "matrix_function", hermitian_tol=hermitian_tol, degeneracy_atol=degeneracy_atol
    )
    check = _check_hermitian_flags("matrix_function", check_hermitian,
                                   kw["hermitian_tol"])  # fmt: skip
    UPLO = _check_matfun_input(A, UPLO, check, kw["hermitian_tol"])
    user = user_function("matrix_function", f)
    fn = _matfun(f) if user is None else None
    opts = options(kw["degeneracy_atol"], None, None, None, op="matrix_function")
    A = _with_gradient("matrix_function", A, gradient)
    julia = on_julia("matrix_function", backend, A)
    if fn is None:
        return _user_matrix_function(A, user, UPLO, opts, julia)
    if julia:
        return apply(_MatrixFunctionJulia, A, fn.spec, fn, UPLO, opts)
    return apply(_MatrixFunction, A, fn, UPLO, opts)[0]
