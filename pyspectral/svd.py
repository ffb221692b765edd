"""Singular value decomposition with stable gradients: ``svd``, ``svdvals`` and
the composite ``svd_function`` (``U f(S) Vh``) with an exact pullback.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor

from . import _julia
from ._autograd import LinearInA, SpectralMaps, apply, check_not_nested_forward_mode
from ._backend import resolve_backend
from ._fns import (
    SpectralFn,
    named_argument,
    power,
    power_second,
    user_pair,
    user_second,
)
from ._second_order import check_second_order_cotangent
from ._settings import Options, options
from ._validation import check_keywords, check_matrix, check_out
from .common.defaults import degeneracy_tol, peek
from .common.gauge import apply_gauge_policy
from .exceptions import DomainError, InputError, InputTypeError
from .forward.topk import top_k_method
from .pullbacks.svd import (
    svd_function_pullback,
    svd_function_pushforward,
    svd_function_second_order,
    svd_pullback,
    svd_pushforward,
)
from .topk import SVDTopK, SVDTopKJulia

__all__ = ["SVDResult", "svd", "svdvals", "svd_function", "svd_pullback"]


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


# ----------------------------------------------------- autograd functions


class _SVD(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, full_matrices: bool, opts: Options) -> tuple:
        return tuple(torch.linalg.svd(A, full_matrices=full_matrices))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)
        # A (an input: no copy, no reference cycle) for the exact second
        # derivative at the clusters a loss discards (_discarded); among the
        # saved tensors it would break the generated vmap rule of
        # jacrev(jacrev) (as LinearInA's)
        ctx.A, _, ctx.opts = inputs
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        U, S, Vh = ctx.saved_tensors
        gA = svd_pullback(U, S, Vh, gU, gS, gVh, ctx.opts, A=ctx.A)
        return gA, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        check_not_nested_forward_mode("svd")
        U, S, Vh = ctx.saved_tensors
        return svd_pushforward(U, S, Vh, dA, ctx.opts)


class _SVDJulia(torch.autograd.Function):
    """``_SVD`` on the Julia backend (same formulas, see julia/PySpectral)."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, full_matrices: bool, opts: Options) -> tuple:
        (U, S, Vh), ctx.handles = _julia.svd(A, full_matrices)
        ctx.opts, ctx.shape_dtype = opts, (A.shape, A.dtype)
        ctx.save_for_backward(U, S, Vh)
        ctx.save_for_forward(U, S, Vh)
        ctx.A = A  # as _SVD's
        ctx.set_materialize_grads(False)
        return U, S, Vh

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        U, S, Vh = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph: the native pullback is the same formula, and
            # differentiable, so double backward stays exact.
            gA = svd_pullback(U, S, Vh, gU, gS, gVh, ctx.opts, A=ctx.A)
            return gA, None, None
        if gU is None and gS is None and gVh is None:
            return None, None, None
        check_second_order_cotangent(gS, (gU, gVh), ctx.opts)  # as svd_pullback
        gA = _julia.svd_pullback(ctx.shape_dtype, ctx.handles, gU, gS, gVh, ctx.opts)
        return gA, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        U, S, Vh = ctx.saved_tensors
        if torch.is_grad_enabled() and (dA.requires_grad or U.requires_grad):
            # the tangent will be differentiated: the native pushforward is the
            # same formula, and differentiable (as the backward under create_graph)
            tangents = svd_pushforward(U, S, Vh, dA, ctx.opts)
            return tuple(map(_julia.in_layout_of, tangents, (U, S, Vh)))
        return _julia.svd_pushforward(ctx.handles, dA, ctx.opts)


class _SVDFunctionJulia(torch.autograd.Function):
    """``_SVDFunction`` on the Julia backend. A user ``(f, f_prime)`` pair is
    evaluated here, on the spectrum Julia computed; Julia gets the values."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, f: Any, fn: SpectralFn, opts: Options) -> Tensor:
        ctx.f, ctx.fn, ctx.opts, ctx.shape_dtype = f, fn, opts, (A.shape, A.dtype)
        if fn.name == "user":
            Y, ctx.handles = _julia.svd_function_values(A, lambda S: fn(S, opts))
        else:
            # A spectrum outside f's domain is found by Julia; the native check,
            # run on Julia's singular values, reports it (native_check).
            Y, S, ctx.handles = _julia.svd_function(
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
                U, S, Vh = torch.linalg.svd(A, full_matrices=False)
            gA = LinearInA.apply(
                A, gY, _svd_function_maps(ctx.fn, ctx.opts), True, U, S, Vh
            )
        elif ctx.fn.name == "user":
            gA = _julia.svd_function_values_pullback(ctx.shape_dtype, ctx.handles, gY)
        else:
            gA = _julia.svd_function_pullback(
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
                U, S, Vh = torch.linalg.svd(A, full_matrices=False)
            maps = _svd_function_maps(ctx.fn, ctx.opts)
            return LinearInA.apply(A, dA, maps, False, U, S, Vh)
        if ctx.fn.name == "user":
            return _julia.svd_function_values_pushforward(ctx.handles, dA)
        return _julia.svd_function_pushforward(ctx.handles, ctx.f, dA, ctx.opts)


class _SVDFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, fn: SpectralFn, opts: Options) -> tuple:
        U, S, Vh = torch.linalg.svd(A, full_matrices=False)
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


# ------------------------------------------------- singular value functions


_SVD_NAMES = (
    '"polar"',
    '"normalize"',
    '("truncate", k)',
    '("threshold", tau)',
    '("pow", p)',
    "(f, f_prime)",
    "(f, f_prime, f_second)",
)


def _zero(S: Tensor, o: Options) -> Tensor:
    return torch.zeros_like(S)


def _svd_fn(f: Any, k: int) -> SpectralFn:
    if f == "polar":
        return SpectralFn(
            "polar", lambda S, o: (torch.ones_like(S), torch.zeros_like(S)), _zero
        )
    pair = user_pair("svd_function", f)
    if pair is not None:
        second = user_second("svd_function", f)
        return SpectralFn("user", lambda S, o: pair(S), lambda S, o: second(S))
    named = named_argument(f, ("truncate", "threshold", "pow"))
    if named is None:
        raise InputTypeError(
            f"svd_function: f must be one of {', '.join(_SVD_NAMES)}, got {f!r}"
        )
    name, x = named
    if name == "truncate":
        if x != int(x) or not 1 <= x <= k:
            raise InputError(
                f"svd_function: ('truncate', k) needs an integer 1 <= k <= "
                f"min(m, n) = {k}, got {f[1]!r}"
            )
        return SpectralFn(
            f"truncate {int(x)}", lambda S, o: _truncate(S, int(x), o), _zero
        )
    if name == "threshold":
        if x < 0:
            raise InputError(f"svd_function: threshold tau must be >= 0, got {x}")
        return SpectralFn(
            f"threshold {x}",
            lambda S, o: (torch.clamp(S - x, min=0), (S > x).to(S.dtype)),
            _zero,
        )
    return SpectralFn(
        f"pow {x}", lambda S, o: _pow_svd(S, x, o), lambda S, o: power_second(x)(S)
    )


def _truncate(S: Tensor, r: int, opts: Options) -> tuple[Tensor, Tensor]:
    keep = (torch.arange(S.shape[-1], device=S.device) < r).to(S.dtype)
    if r < S.shape[-1] and opts.gauge != "ignore":
        tol = degeneracy_tol(S, opts.degeneracy_atol)[..., 0, 0]
        gap = peek(S[..., r - 1] - S[..., r])
        if bool((gap <= peek(tol)).any()):
            msg = (
                f"svd_function: ('truncate', {r}) cuts a degenerate cluster "
                f"(s[{r - 1}] - s[{r}] = {float(gap.min()):.3g}); the result "
                "depends on the basis chosen inside it. Truncate at a gap."
            )
            apply_gauge_policy(msg, opts)
    return S * keep, keep


def _pow_svd(S: Tensor, p: float, opts: Options) -> tuple[Tensor, Tensor]:
    if p < 0:
        tol = degeneracy_tol(S, opts.degeneracy_atol)[..., 0]
        small = peek(S <= tol)
        if bool(small.any()):
            i = int(small.nonzero()[0, -1])
            raise DomainError(
                f"svd_function: ('pow', {p}) needs nonzero singular values, but "
                f"singular value {i} is {float(peek(S)[..., i].min()):.3g} "
                "(numerically zero). Use p >= 0 or regularise A."
            )
    return power(p)(S)


# ------------------------------------------------------------ public API


def svd(
    A: Tensor,
    *,
    full_matrices: bool = False,
    k: int | None = None,
    backend: str = "auto",
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    method: str = "auto",
    oversample: int | None = None,
    n_iter: int | None = None,
    backward_rtol: float | None = None,
    backward_maxiter: int = 500,
    out: tuple[Tensor, Tensor, Tensor] | None = None,
) -> SVDResult:
    r"""svd(A, *, full_matrices=False, k=None, backend="auto", ...) -> (U, S, Vh)

    Singular value decomposition with a stable backward pass.

    .. math::
        A = U \operatorname{diag}(S) V^{H}, \qquad S_1 \ge S_2 \ge \dots \ge 0

    ``A`` has shape ``(*, m, n)`` where ``*`` is zero or more batch dimensions.
    Same results as ``torch.linalg.svd(A, full_matrices=full_matrices)``; with
    ``k`` only the top-``k`` triplets (``U: (*, m, k)``, ``S: (*, k)``,
    ``Vh: (*, k, n)``), whose gradient includes the exact coupling to the
    discarded singular pairs.

    .. warning:: Gradients are finite at every spectrum. They are exact when
        the loss sees ``U`` and ``V`` through complete degenerate clusters
        (projectors, the polar factor ``U Vh``) and ``S`` through symmetric
        functions; for ``U f(S) Vh`` at (near-)degenerate or zero singular
        values use :func:`svd_function`. Singular values closer than
        ``degeneracy_atol`` (default ``max(S) * eps**0.75``) count as
        degenerate; a loss that depends on the basis inside such a cluster
        triggers the ``gauge`` policy (``"warn"``, ``"raise"`` or ``"ignore"``).
        ``broadening=eta`` replaces the hard cutoff ``1/x`` by ``x/(x^2+eta^2)``.
        With ``full_matrices=True`` the extra columns count through their span.

    Top-k methods (with ``k``): ``method="full"`` slices the full thin SVD.
    ``"randomized"`` runs block subspace iteration with ``p = k + oversample``
    columns (default ``oversample = max(10, k)``) and a Rayleigh-Ritz step,
    until the kept triplets are certified (``|A v_i - s_i u_i| <= eps**0.75
    s_1``, and the cluster of ``s_k`` closed inside the block), for at most
    ``n_iter`` iterations if given (else a work budget); its backward treats
    the certified block exactly and the rest by conjugate gradients with
    products by ``A`` and ``A^H`` only, to ``backward_rtol`` (default
    ``eps**0.75``) in at most ``backward_maxiter`` steps. What it cannot
    certify it returns with a :class:`ConvergenceWarning`. ``"auto"`` (the
    default) iterates only where that is predicted to be much cheaper than
    the full SVD and keeps only a certified result, else takes the full path:
    it is exact on every spectrum. The iterative path's gradient is first
    order (second derivatives: ``method="full"``).

    ``backend``: ``"auto"`` (the default) and ``"torch"`` run the native
    backend (any device); ``"julia"`` runs the same rules in Julia (CPU
    tensors; see the README), with the same errors and warnings.

    ``out=(U, S, Vh)``: as in ``torch.linalg.svd`` (results written into the
    given tensors, resized if needed, dtypes checked, no autograd: a ``RuntimeError``
    if ``A`` requires grad); native backend only, not with ``k``
    (``InputError`` otherwise).

    Empty inputs (``m``, ``n`` or a batch size 0) give empty results, and
    empty gradients, as torch does.

    Returns:
        ``(U, S, Vh)``, a named tuple; ``S`` is real and descending.

    Example::

        >>> A = torch.randn(5, 3, dtype=torch.float64)
        >>> U, S, Vh = svd(A)
        >>> torch.dist(U @ torch.diag(S) @ Vh, A) < 1e-12
        tensor(True)
    """
    # Every argument is validated before a backend is chosen (and Julia started).
    check_matrix("svd", A)
    kw = check_keywords(
        "svd",
        A,
        k=k,
        degeneracy_atol=degeneracy_atol,
        broadening=broadening,
        gauge_atol=gauge_atol,
        oversample=oversample,
        n_iter=n_iter,
        backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )
    opts = options(
        kw["degeneracy_atol"], kw["broadening"], gauge, kw["gauge_atol"], op="svd"
    )
    k = kw["k"]
    if check_out("svd", out, backend, A, k):
        return SVDResult(*torch.linalg.svd(A, full_matrices=full_matrices, out=out))
    if k is not None:
        if full_matrices:
            raise InputError(
                "svd: k (top-k triplets) cannot be combined with full_matrices=True; "
                "pass one of them"
            )
        method, cfg = top_k_method(
            "svd",
            A,
            k,
            method,
            kw["oversample"],
            kw["n_iter"],
            kw["backward_rtol"],
            kw["backward_maxiter"],
        )
    impl = _SVDJulia if resolve_backend("svd", backend, A) == "julia" else _SVD
    if k is None:
        return SVDResult(*apply(impl, A, full_matrices, opts))
    if method == "iterative":
        if impl is _SVD:
            return SVDResult(*apply(SVDTopK, A, k, cfg, opts)[:3])
        return SVDResult(*apply(SVDTopKJulia, A, k, cfg, opts))
    U, S, Vh = apply(impl, A, False, opts)
    return SVDResult(U[..., :k], S[..., :k], Vh[..., :k, :])


def svdvals(A: Tensor, *, backend: str = "auto", out: Tensor | None = None) -> Tensor:
    r"""svdvals(A, *, backend="auto", out=None) -> Tensor

    Singular values of ``A`` (shape ``(*, m, n)``), descending, shape
    ``(*, min(m, n))``. The gradient ``U diag(gS) Vh`` is exact for symmetric
    functions of the singular values at any spectrum (nuclear norm, ...).
    ``backend`` and ``out`` as in :func:`svd` (``"auto"``: native).
    """
    check_matrix("svdvals", A)
    if check_out("svdvals", out, backend, A):
        return torch.linalg.svdvals(A, out=out)
    julia = resolve_backend("svdvals", backend, A) == "julia"
    # a forward-AD dual tensor does not require grad, but needs the tangent
    dual = torch.autograd.forward_ad.unpack_dual(A).tangent is not None
    if not (A.requires_grad or dual or is_functorch_wrapped_tensor(A)):
        return _julia.svdvals(A) if julia else torch.linalg.svdvals(A)
    impl = _SVDJulia if julia else _SVD
    return apply(impl, A, False, options(op="svdvals"))[1]


def svd_function(
    A: Tensor,
    f: Any,
    *,
    backend: str = "auto",
    degeneracy_atol: float | None = None,
    gauge: str | None = None,
) -> Tensor:
    r"""svd_function(A, f, *, backend="auto") -> Tensor

    Singular value function with an exact pullback at every spectrum.

    .. math::
        Y = U f(S) V^{H}

    ``A`` has shape ``(*, m, n)``, ``Y`` the same (empty for empty ``A``,
    where ``("truncate", k)`` has no valid ``k``). ``f`` is ``"polar"``
    (``f = 1``), ``("truncate", k)`` (keep the top ``k``),
    ``("threshold", tau)`` (``max(s - tau, 0)``, the nuclear-norm prox),
    ``("pow", p)``, ``"normalize"`` (``s / s_max``, i.e. ``A / ||A||_2``) or a
    pair ``(f, f_prime)`` of elementwise torch functions with ``f(0) = 0``,
    which map the singular values to real tensors of their shape (``f`` finite
    there), or a triple ``(f, f_prime, f_second)``. A pair runs on either
    backend: on Julia's, it is evaluated in Python on the singular values
    Julia computed, and Julia gets the values.

    .. warning:: The gradient uses divided differences of ``f`` and is exact at
        degenerate and zero singular values; so are second derivatives (second
        divided differences; ``f''`` from ``f_second`` or torch's derivative
        of ``f_prime``), at a zero singular value where ``f`` extends to an odd
        ``C^2`` function. Where ``f'`` is infinite
        (``("pow", p)`` with ``0 < p < 1`` at an exact zero singular value) it is
        ``+-inf`` exactly in the entries that the infinite divided differences
        reach and finite (never NaN) elsewhere: ``f[0, s] = f(s) / s`` is
        finite for ``s > 0``. The polar factor of a rank-deficient matrix is not
        differentiable (its gradient there is not meaningful). Truncating inside
        a degenerate cluster (gap below ``degeneracy_atol``) makes ``Y``
        itself basis dependent and triggers the ``gauge`` policy.

    ``backend`` as in :func:`svd` (``"auto"``: native).

    Example::

        >>> A = torch.randn(6, 4, dtype=torch.float64)
        >>> Q = svd_function(A, "polar")
        >>> torch.dist(Q.mT @ Q, torch.eye(4, dtype=A.dtype)) < 1e-12
        tensor(True)
    """
    check_matrix("svd_function", A)
    kw = check_keywords("svd_function", degeneracy_atol=degeneracy_atol)
    fn = None if f == "normalize" else _svd_fn(f, min(A.shape[-2:]))
    opts = options(kw["degeneracy_atol"], None, gauge, None, op="svd_function")
    julia = resolve_backend("svd_function", backend, A) == "julia"
    if fn is None:
        if 0 in A.shape[-2:]:
            # no singular value to divide by; an empty result, as A / s_max
            # broadcast over the batch would give (it cannot: (3, 0) / (0, 1))
            return A.clone()
        smax = apply(_SVDJulia if julia else _SVD, A, False, opts)[1][..., :1, None]
        if bool((peek(smax) == 0).any()):
            raise DomainError(
                "svd_function: 'normalize' divides by the largest singular value, "
                "which is 0 (A is a zero matrix)"
            )
        return A / smax
    if julia:
        return apply(_SVDFunctionJulia, A, f, fn, opts)
    return apply(_SVDFunction, A, fn, opts)[0]
