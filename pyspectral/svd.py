"""Singular value decomposition with stable gradients: ``svd``, ``svdvals`` and
the composite ``svd_function`` (``U f(S) Vh``) with an exact pullback.
"""

from __future__ import annotations

import warnings
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
from ._route import Functions, compiled, decompose, on_julia, with_out
from ._second_order import check_second_order_cotangent
from ._settings import Options, options
from ._validation import (
    check_absorb,
    check_flag,
    check_keywords,
    check_matrix,
    check_top_k_keywords,
    check_truncation_method,
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
from .split import SVDSplit, TruncatedSVDSplit, split
from .topk import SVDTopK, SVDTopKJulia
from .truncation import TruncatedSVDResult, svd_ranks, truncated_svd, truncation_path

__all__ = ["SVDResult", "svd", "svdvals", "svd_function", "svd_pullback"]


class SVDResult(NamedTuple):
    """The result of :func:`svd` and :func:`svd_topk`: ``A = U diag(S) Vh``.

    ``U: (*, m, r)`` and ``Vh: (*, r, n)`` (``Vh`` is ``V^H``, not ``V``) of
    ``A``'s dtype, ``S: (*, r)`` real and descending; ``r = min(m, n)``, or
    the kept width of a top-k or truncated call. A named tuple, so it
    unpacks as ``U, S, Vh = svd(A)``; constructing one checks nothing.

    Example::

        >>> A = torch.tensor([[3.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
        >>> result = svd(A)
        >>> type(result).__name__, result._fields
        ('SVDResult', ('U', 'S', 'Vh'))
        >>> result.S.round(decimals=10)
        tensor([3., 2.], dtype=torch.float64)
    """

    U: Tensor
    S: Tensor
    Vh: Tensor


# ----------------------------------------------------- autograd functions


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
    if opts.gauge == "ignore" or S.shape[-1] < 2:
        return
    k = S.shape[-1]
    with torch.no_grad():
        S = peek(S)
        pair = S.unsqueeze(-1) + S.unsqueeze(-2)
    dims = (U.shape[-2] + Vh.shape[-1]) / 2
    found = near_pair_cancellation(
        S, lambda: herm_in_basis(U[..., :k], dA, Vh[..., :k, :]), pair, dims, opts
    )
    if found is not None:
        apply_gauge_policy(near_pair_message("svd", *found), opts)


class _SVD(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, full_matrices: bool, opts: Options, T: Any) -> tuple:
        # T: the forward-mode tangent of A where the caller sees one (None
        # otherwise), a constant here: the basis inside a cluster follows it
        factors = tuple(torch.linalg.svd(A, full_matrices=full_matrices))
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
                U, S, Vh = torch.linalg.svd(A, full_matrices=False)
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
                U, S, Vh = torch.linalg.svd(A, full_matrices=False)
            maps = _svd_function_maps(ctx.fn, ctx.opts)
            return LinearInA.apply(A, dA, maps, False, U, S, Vh)
        return jsvd.svd_function_pushforward(ctx.handles, ctx.f, dA, ctx.opts)


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


# ------------------------------------------------- singular value functions


_SVD_NAMES = (
    '"polar"',
    '"normalize"',
    '("truncate", k)',
    '("threshold", tau)',
    '("pow", p)',
    "a callable f",
    "(f, f_prime)",
    "(f, f_prime, f_second)",
)


def _zero(S: Tensor, o: Options) -> Tensor:
    return torch.zeros_like(S)


def _svd_fn(f: Any, k: int) -> SpectralFn:
    """The named singular value function ``f`` (``k = min(m, n)``), its
    argument validated; ``fn.spec`` is ``f`` normalised (what Julia reads)."""
    if isinstance(f, str) and f == "polar":
        return SpectralFn("polar", _polar, _zero, spec="polar")
    named = named_argument("svd_function", f, ("truncate", "threshold", "pow"), k)
    if named is None:
        raise InputTypeError(
            f"svd_function: f must be one of {', '.join(_SVD_NAMES)}, got {f!r}"
        )
    name, x = named
    if name == "truncate":
        return SpectralFn(
            f"truncate {x}", lambda S, o: _truncate(S, x, o), _zero, spec=named
        )
    if name == "threshold":
        return SpectralFn(
            f"threshold {x}",
            lambda S, o: (torch.clamp(S - x, min=0), (S > x).to(S.dtype)),
            _zero,
            spec=named,
        )
    return SpectralFn(
        f"pow {x}",
        lambda S, o: _pow_svd(S, x, o),
        lambda S, o: power_second(x)(S),
        spec=named,
    )


_ops.NAMED["svd_function"] = _svd_fn


def _polar(S: Tensor, opts: Options) -> tuple[Tensor, Tensor]:
    """``f = 1``, the polar factor ``U V^H``: defined only where ``A`` has no
    (numerically) zero singular value, the rule for every ``f`` with ``f(0)
    != 0`` (see :func:`_require_f_at_zero`)."""
    zero_singular_value(S, opts, "'polar' (f = 1, f(0) = 1)")
    return torch.ones_like(S), torch.zeros_like(S)


def zero_singular_value(S: Tensor, opts: Options, what: str) -> None:
    """``DomainError`` where ``S`` has a (numerically) zero singular value
    (at most ``degeneracy_atol``, default ``max(S) eps**0.75``) for an ``f``
    with ``f(0) != 0``: the left and right singular vectors of a zero value
    are independent (each up to its own sign, or rotation in a cluster of
    zeros), so ``f(0) u v^H``, and with it ``U f(S) Vh``, would depend on that
    arbitrary choice (``polar(A)`` and ``polar(A^T)^T`` would differ)."""
    P = peek(S.detach())
    if P.shape[-1] == 0:
        return
    small = P <= degeneracy_tol(P, opts.degeneracy_atol)[..., 0]
    if not bool(small.any()):
        return
    i = int(small.nonzero()[0, -1])
    raise DomainError(
        f"svd_function: {what}, but singular value {i} of A is "
        f"{float(P[..., i].min()):.3g} (numerically zero); U f(S) Vh then depends "
        "on the arbitrary singular vectors of the zero values. Use an f with "
        "f(0) = 0 (e.g. lambda s: f(s) - f(0); for the polar factor of a "
        "rank-deficient A, ('pow', 1) / a scale, or A + eps * I) or a full-rank A."
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
    atol: float | None = None,
    rtol: float | None = None,
    error_atol: float | None = None,
    error_rtol: float | None = None,
    multiplets: str = "cut",
    min_rank: int | None = None,
    absorb: str | None = None,
    return_error: bool = False,
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
) -> SVDResult | TruncatedSVDResult | SVDSplit | TruncatedSVDSplit:
    r"""svd(A, *, full_matrices=False, k=None, atol=None, rtol=None, ...) -> (U, S, Vh)

    Singular value decomposition with a stable backward pass.

    .. math::
        A = U \operatorname{diag}(S) V^{H}, \qquad S_1 \ge S_2 \ge \dots \ge 0

    ``A`` has shape ``(*, m, n)`` where ``*`` is zero or more batch dimensions.
    Same results as ``torch.linalg.svd(A, full_matrices=full_matrices)``; with
    ``k`` only the top-``k`` triplets (``U: (*, m, k)``, ``S: (*, k)``,
    ``Vh: (*, k, n)``), whose gradient includes the exact coupling to the
    discarded singular pairs.

    ``A`` is float32, float64, complex64 or complex128 (other dtypes raise);
    ``U`` and ``Vh`` have its dtype, ``S`` the real dtype of that precision.
    ``Vh`` is ``V^H`` (not ``V``), as in torch. Each singular pair is
    defined up to a phase (a sign for real input), and inside a degenerate
    cluster up to a rotation: the forward returns ``torch.linalg.svd``'s
    choice, and the backward asks the loss not to depend on it (the
    ``gauge`` policy below). ``S`` is descending.

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

    Truncation (the rank ``r`` of each matrix is the smallest the rules give):
    ``k`` keeps at most ``k`` triplets (any ``k >= 0``: past ``min(m, n)``
    every triplet, as tensor-network codes clamp a bond dimension); ``atol``,
    ``rtol`` keep the ``S_i > max(atol, rtol * S_1)``, as
    ``torch.linalg.matrix_rank`` counts; ``error_atol``, ``error_rtol`` keep
    the fewest leading triplets whose discarded singular values have
    ``||S_discarded||_2 <= max(error_atol, error_rtol * ||S||_2)``. Then
    ``multiplets`` moves the cut: ``"cut"`` (default) leaves it, also inside a
    degenerate multiplet (gap ``<= degeneracy_atol``; the kept basis is then
    arbitrary, and a loss that depends on it triggers the ``gauge`` policy in
    the backward), ``"down"`` moves it to the nearest multiplet boundary below
    (drops the split multiplet: at most ``k`` kept, the discarded weight may
    exceed the error target), ``"up"`` above (keeps it whole: may exceed
    ``k``). ``min_rank`` is a floor: at least ``min(min_rank, min(m, n))``
    triplets, zeros included (ITensor's ``mindim``; at most ``k``; moved up
    again under ``"up"``, it wins over ``"down"``). A zero matrix keeps
    nothing under any tolerance (but the floor's zero triplets); a rule may keep
    nothing (``r = 0``: empty factors, zero gradient). The rank is piecewise
    constant in ``A``: the gradient is that of the fixed-rank problem at
    ``r``, with the exact coupling to the discarded triplets. Batched, the
    result has the width ``max r`` over the batch, each matrix's places past
    its own rank zero (values and vectors). ``return_error=True`` returns a
    :class:`TruncatedSVDResult` ``(U, S, Vh, error, rel_error, rank)``:
    ``error = ||S_discarded||_2``, ``rel_error = error / ||A||_F`` (both
    ``(*,)``, differentiable, from the decomposition already computed) and
    the ranks (``(*,)`` int64).

    ``absorb`` splits the (truncated) SVD into the two factors a
    tensor-network code writes, the singular values absorbed (quimb's name):
    ``"left"`` ``(U S, Vh)``, ``"right"`` ``(U, S Vh)``, ``"both"``
    ``(U sqrt(S), sqrt(S) Vh)``, an :class:`SVDSplit` ``(left, right)``
    (:class:`TruncatedSVDSplit` with ``return_error``). Its gradient and
    tangents are exact for every loss invariant under ``L -> L Q``,
    ``R -> Q^H R`` (any contraction over the bond index), also inside a kept
    degenerate multiplet, where ``U * S.sqrt()`` written from the triplets
    is silently wrong; second derivatives are exact away from kept
    multiplets (at one: a ``GaugeWarning``).

    Top-k methods (with ``k``): ``method="full"`` slices the full thin SVD.
    ``"randomized"`` runs block subspace iteration with ``p = k + oversample``
    columns (default ``oversample = max(10, k)``) and a Rayleigh-Ritz step,
    until the kept triplets are certified (``|A v_i - s_i u_i| <= eps**0.75
    s_1``, and the cluster of ``s_k`` closed inside the block), for at most
    ``n_iter`` iterations if given (whatever the convergence rate), else
    within a work budget (the full path's cost, and at least 100
    iterations); its backward treats
    the certified block exactly and the rest by conjugate gradients with
    products by ``A`` and ``A^H`` only, to ``backward_rtol`` (default
    ``eps**0.75``) in at most ``backward_maxiter`` steps. What it cannot
    certify it returns with a :class:`ConvergenceWarning`. ``"krylov"`` runs
    block Lanczos (Golub-Kahan) from the same start, with thick restarts,
    the same certificate, budget and warning: fewer products where the
    spectrum decays slowly past ``k``. ``"auto"`` (the
    default) iterates only where that is predicted to be much cheaper than
    the full SVD and keeps only a certified result, else takes the full path:
    it is exact on every spectrum; it starts with subspace iteration and
    hands over to ``"krylov"`` where its cost model, fed by the measured
    convergence rate, predicts fewer products. The iterative path's
    gradient is first order (second derivatives: ``method="full"``). It
    computes the top ``k``: ``atol``, ``rtol`` and ``multiplets="down"`` cut
    inside them (its error is ``||A - U_r U_r^H A||_F``, see
    :mod:`pyspectral.truncation`);
    ``error_atol``, ``error_rtol`` and ``multiplets="up"`` need the spectrum
    past ``k``: ``"auto"`` then takes the full path, ``"randomized"`` and
    ``"krylov"`` raise.
    Arguments the call would not use raise ``InputError``: ``method=
    "randomized"``, ``oversample``, ``n_iter``, ``backward_rtol``,
    ``backward_maxiter`` without ``k`` (a tolerance without ``k`` runs the
    full path), and the last four with ``method="full"`` or a rule that needs
    the spectrum past ``k``.

    ``backend``: ``"auto"`` (the default) and ``"torch"`` run the native
    backend (any device); ``"julia"`` runs the same rules in Julia (CPU
    tensors; see docs/guide/julia.md), with the same errors and warnings.

    ``out=(U, S, Vh)``: as in ``torch.linalg.svd`` (results written into the
    given tensors, resized if needed, dtypes checked, no autograd: a ``RuntimeError``
    if ``A`` requires grad); native backend only, not with ``k`` or another
    truncation keyword (``InputError`` otherwise).

    Empty inputs (``m``, ``n`` or a batch size 0) give empty results, and
    empty gradients, as torch does.

    Returns:
        ``(U, S, Vh)``, a named tuple (:class:`SVDResult`); ``S`` is real and
        descending. With ``return_error=True``, a
        :class:`TruncatedSVDResult` ``(U, S, Vh, error, rel_error, rank)``;
        with ``absorb``, an :class:`SVDSplit` ``(left, right)`` or
        :class:`TruncatedSVDSplit` ``(left, right, error, rel_error, rank)``.

    Raises:
        InputTypeError: ``A`` is not a tensor, or ``full_matrices`` or
            ``return_error`` is not a bool.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: a keyword out of range (a negative ``k`` or
            tolerance, an unknown ``method``, ``multiplets`` or ``gauge``),
            or one the call would not use (see above); ``k`` or a
            truncation rule with ``full_matrices=True`` or ``out=``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (not installed, a CUDA or empty
            tensor, inside a ``torch.func`` transform).
        GaugeError: in the backward, under ``gauge="raise"``, when the loss
            depends on the basis inside a degenerate cluster (under
            ``"warn"``, the default, a :class:`GaugeWarning` instead).
        DerivativeError: a second derivative through the iterative top-k
            path (``method="full"`` has them).
        JuliaError: an error inside Julia (``backend="julia"``).

    Warns:
        GaugeWarning: under ``gauge="warn"``, as for ``GaugeError``.
        ConvergenceWarning: ``method="randomized"`` could not certify the
            top ``k`` or the backward's solve.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(5, 3, dtype=torch.float64, generator=g)
        >>> U, S, Vh = svd(A)
        >>> U.shape, S.shape, Vh.shape
        (torch.Size([5, 3]), torch.Size([3]), torch.Size([3, 3]))
        >>> bool(torch.dist(U @ torch.diag(S) @ Vh, A) < 1e-12)
        True
        >>> U, S, Vh, err, rel, r = svd(A, k=2, return_error=True)
        >>> R = A - U @ torch.diag(S) @ Vh  # its norm is the truncation error
        >>> bool(torch.dist(torch.linalg.matrix_norm(R), err) < 1e-12), int(r)
        (True, 2)
    """
    others = (atol, rtol, error_atol, error_rtol, min_rank, absorb, out)
    others += (oversample, n_iter, backward_rtol)
    static = multiplets == "cut" and return_error is False and backward_maxiter == 500
    static = static and method in ("auto", "full") and all(x is None for x in others)
    res = compiled(backend, static, _ops.call_svd, A, full_matrices, k,
                   degeneracy_atol, broadening, gauge, gauge_atol)  # fmt: skip
    if res is not None:
        return SVDResult(*res)
    # The common call, every keyword at its default (what the checks below
    # would find): A is all there is to check. (Their cost is a few percent
    # of a 64 x 64 SVD's forward and backward, on either backend.)
    if (
        type(full_matrices) is bool
        and backend in BACKENDS
        and method == "auto"
        and multiplets == "cut"
        and return_error is False
        and type(backward_maxiter) is int
        and backward_maxiter == 500
        and all(x is None for x in (k, atol, rtol, error_atol, error_rtol, min_rank))
        and all(x is None for x in (absorb, out, degeneracy_atol, broadening, gauge))
        and all(x is None for x in (gauge_atol, oversample, n_iter, backward_rtol))
    ):
        check_matrix("svd", A)
        args = (full_matrices, options(op="svd"), forward_tangent(A))
        return SVDResult(*decompose("svd", _FUNCTIONS, A, backend, *args))
    # Every argument is validated before a backend is chosen (and Julia started).
    call = _check_svd(
        A, full_matrices, k, atol, rtol, error_atol, error_rtol, multiplets, min_rank,
        absorb, return_error, degeneracy_atol, broadening, gauge, gauge_atol, method,
        oversample, n_iter, backward_rtol, backward_maxiter, out,
    )  # fmt: skip
    res = with_out("svd", out, backend, A, lambda: torch.linalg.svd(
        A, full_matrices=call.full_matrices, out=out), call.rule)  # fmt: skip
    if res is not None:
        return SVDResult(*res)
    call.opts.state.split = call.absorb is not None
    if call.rule is None:
        args = (call.full_matrices, call.opts, forward_tangent(A))
        res = SVDResult(*decompose("svd", _FUNCTIONS, A, backend, *args))
    else:  # (a split needs each matrix's rank, which the result with its error has)
        errors = return_error or absorb is not None
        res = _truncated(A, call.rule, method, call.kw, call.opts, backend, errors)
    if call.absorb is None:
        return res
    julia = on_julia("svd", backend, A)
    return split(A, res, call.absorb, call.opts, return_error and call.rule is not None,
                 julia)  # fmt: skip


class _SVDCall(NamedTuple):
    """The checked arguments of one :func:`svd` call."""

    full_matrices: bool
    kw: dict
    rule: Any
    opts: Options
    absorb: str | None


def _check_svd(
    A: Any,
    full_matrices: Any,
    k: Any,
    atol: Any,
    rtol: Any,
    error_atol: Any,
    error_rtol: Any,
    multiplets: Any,
    min_rank: Any,
    absorb: Any,
    return_error: Any,
    degeneracy_atol: Any,
    broadening: Any,
    gauge: Any,
    gauge_atol: Any,
    method: Any,
    oversample: Any,
    n_iter: Any,
    backward_rtol: Any,
    backward_maxiter: Any,
    out: Any,
) -> _SVDCall:
    """Every argument of :func:`svd` checked (``_validation``), and the call's
    options, truncation rule and split."""
    check_matrix("svd", A)
    kw = check_keywords(
        "svd",
        A,
        k=k,
        atol=atol,
        rtol=rtol,
        error_atol=error_atol,
        error_rtol=error_rtol,
        min_rank=min_rank,
        degeneracy_atol=degeneracy_atol,
        broadening=broadening,
        gauge_atol=gauge_atol,
        oversample=oversample,
        n_iter=n_iter,
        backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )
    full_matrices = check_flag("svd", "full_matrices", full_matrices)
    iteration = dict(
        oversample=oversample,
        n_iter=n_iter,
        backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )
    check_top_k_keywords("svd", kw["k"], method, **iteration)
    rule = truncation_rule("svd", kw, multiplets, return_error)
    check_truncation_method("svd", rule, method, **iteration)
    opts = options(
        kw["degeneracy_atol"], kw["broadening"], gauge, kw["gauge_atol"], op="svd"
    )
    absorb = check_absorb("svd", absorb, full_matrices, out)
    if rule is not None and full_matrices:
        raise InputError(
            "svd: k (top-k triplets) or a truncation rule cannot be combined with "
            "full_matrices=True; pass one of them"
        )
    return _SVDCall(full_matrices, kw, rule, opts, absorb)


def _truncated(
    A: Tensor,
    rule: Any,
    method: str,
    kw: dict,
    opts: Options,
    backend: str,
    return_error: bool,
) -> SVDResult | TruncatedSVDResult:
    """The truncated SVD: the iterative top-k path or the full thin SVD, cut
    at each matrix's rank (``truncation.py``)."""
    K = min(A.shape[-2:])
    cap = K if rule.k is None else min(rule.k, K)
    path, cfg = truncation_path("svd", A, rule, cap, method, kw)
    julia = on_julia("svd", backend, A)
    if path == "iterative":
        if julia:
            U, S, Vh, block = apply(SVDTopKJulia, A, cap, cfg, opts)
        else:
            U, S, Vh, _, Sd, _, _, Se = apply(SVDTopK, A, cap, cfg, opts)
            block = torch.cat([Sd, Se], -1)
        at_cap = rule._replace(k=cap)
        r, _ = svd_ranks(block, at_cap, opts, julia, complete=block.shape[-1] == K)
        fields = truncated_svd(A, U, S, Vh, r, cap, return_error, full=False)
    else:
        U, S, Vh = decompose("svd", _FUNCTIONS, A, backend, False, opts, None)
        r, tails = svd_ranks(S, rule, opts, julia, complete=True, errors=return_error)
        fields = truncated_svd(A, U, S, Vh, r, cap, return_error, True, tails)
    return fields if return_error else SVDResult(*fields)


def svdvals(A: Tensor, *, backend: str = "auto", out: Tensor | None = None) -> Tensor:
    r"""svdvals(A, *, backend="auto", out=None) -> Tensor

    Singular values of ``A`` (shape ``(*, m, n)``), descending, shape
    ``(*, min(m, n))``, real (float32 for float32 and complex64 input,
    float64 for float64 and complex128; other dtypes raise), as
    ``torch.linalg.svdvals``. The gradient ``U diag(gS) Vh`` is exact for
    symmetric functions of the singular values at any spectrum (nuclear
    norm, ``sum(S**2)``, ...); second derivatives at a degenerate cluster as
    in :func:`svd` (the ``gauge`` policy applies where they are not exact).
    ``backend`` and ``out`` as in :func:`svd` (``"auto"``: native).

    Raises:
        InputTypeError: ``A`` is not a tensor.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: ``out=`` with ``backend="julia"``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        JuliaError: an error inside Julia (``backend="julia"``).

    Example::

        >>> A = torch.tensor([[3.0, 0.0], [0.0, -4.0], [0.0, 0.0]],
        ...                  dtype=torch.float64, requires_grad=True)
        >>> S = svdvals(A)
        >>> S.round(decimals=10)
        tensor([4., 3.], dtype=torch.float64, grad_fn=<...>)
        >>> S.sum().backward()  # the nuclear norm: its gradient is U Vh
        >>> UVh = torch.tensor([[1.0, 0.0], [0.0, -1.0], [0.0, 0.0]],
        ...                    dtype=torch.float64)
        >>> torch.allclose(A.grad, UVh)
        True
    """
    res = compiled(backend, out is None, _ops.call_svd, A, False, None, None, None,
                   None, None)  # fmt: skip
    if res is not None:
        return res[1]
    check_matrix("svdvals", A)
    res = with_out("svdvals", out, backend, A, lambda: torch.linalg.svdvals(A, out=out))
    if res is not None:
        return res
    if not differentiated(A):  # the values alone: no singular vectors
        julia = on_julia("svdvals", backend, A)
        return jsvd.svdvals(A) if julia else torch.linalg.svdvals(A)
    args = (False, options(op="svdvals"), forward_tangent(A))
    return decompose("svdvals", _FUNCTIONS, A, backend, *args)[1]


def svd_function(
    A: Tensor,
    f: Any,
    *,
    backend: str = "auto",
    degeneracy_atol: float | None = None,
    gauge: str | None = None,
    k: int | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    error_atol: float | None = None,
    error_rtol: float | None = None,
    multiplets: str = "cut",
    min_rank: int | None = None,
) -> Tensor:
    r"""svd_function(A, f, *, backend="auto", k=None, atol=None, ...) -> Tensor

    Singular value function with an exact pullback at every spectrum.

    .. math::
        Y = U f(S) V^{H}

    ``A`` has shape ``(*, m, n)``, ``Y`` the same (empty for empty ``A``,
    where ``("truncate", k)`` has no valid ``k``). ``f`` is ``"polar"``
    (``f = 1``), ``("truncate", k)`` (keep the top ``k``),
    ``("threshold", tau)`` (``max(s - tau, 0)``, the nuclear-norm prox),
    ``("pow", p)``, ``"normalize"`` (``s / s_max``, i.e. ``A / ||A||_2``) or
    an elementwise torch function ``f`` with ``f(0) = 0``, which maps the
    singular values to real tensors of their shape (``f`` finite there):
    alone (``f'`` is torch's derivative of it), as a pair ``(f, f_prime)`` or
    as a triple ``(f, f_prime, f_second)``. ``f`` may use other tensors (a
    learned parameter ``theta``): they get the gradient
    ``sum_i df(s_i)/dtheta Re(U^H gY V)_ii``, to second order. It runs on
    either backend: on Julia's, it is evaluated in Python on the singular
    values Julia computed, and Julia gets the values. The numbers of the
    named functions are checked as the keywords are (``k`` an integer,
    ``tau >= 0`` and ``p`` finite reals).

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

    The truncation keywords of :func:`svd` (``k``, ``atol``, ``rtol``,
    ``error_atol``, ``error_rtol``, ``multiplets``, ``min_rank``) apply ``f``
    to the kept singular values only, ``Y = U_r f(S_r) V_r^H`` with each
    matrix's rank ``r`` from the rules, exact at every kept multiplet (the
    rank is piecewise constant in ``A``; the coupling to the discarded
    values is the divided difference of ``f`` and 0), on either backend; a
    cut inside a multiplet triggers the ``gauge`` policy, as
    ``("truncate", k)`` does. Not with ``"normalize"``.

    ``A`` is float32, float64, complex64 or complex128 (other dtypes raise);
    ``Y`` has its dtype. ``Y`` does not depend on the phases or the basis
    chosen inside a degenerate cluster (except ``("truncate", k)`` cutting
    one), so no gauge convention enters. Exactness class: exact gradients at
    every spectrum, the composite to use for ``U f(S) Vh`` (reconstruct,
    truncate, threshold, normalise, powers) rather than :func:`svd`.

    ``backend`` as in :func:`svd` (``"auto"``: native); ``degeneracy_atol``
    and ``gauge`` as there.

    Returns:
        ``Y``, shape ``(*, m, n)``, the dtype of ``A``.

    Raises:
        InputTypeError: ``A`` is not a tensor, or ``f`` is not one of the
            forms above (or a user ``f`` returns a non-tensor or a complex
            tensor).
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: the number of a named ``f`` is invalid (``k`` not an
            integer in ``1 <= k <= min(m, n)``, ``tau < 0``, ``p`` not
            finite, or a tensor that requires grad), a user ``f`` is not
            elementwise, or ``degeneracy_atol`` / ``gauge`` is invalid.
        DomainError: ``("pow", p)`` with ``p < 0`` at a (numerically) zero
            singular value, ``"normalize"`` of a zero matrix, a user
            ``f`` not finite on the spectrum, or a user ``f`` with
            ``f(0) != 0`` where ``A`` has a (numerically) zero singular value
            (its singular vectors are arbitrary there).
        GaugeError: ``("truncate", k)`` cuts a degenerate cluster, under
            ``gauge="raise"`` (a :class:`GaugeWarning` under ``"warn"``).
        DerivativeError: a third derivative, or a user ``f`` whose
            derivative torch cannot take and no ``f_prime`` was given.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        JuliaError: an error inside Julia (``backend="julia"``).

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(6, 4, dtype=torch.float64, generator=g)
        >>> Q = svd_function(A, "polar")
        >>> bool(torch.dist(Q.mT @ Q, torch.eye(4, dtype=A.dtype)) < 1e-12)
        True
        >>> s = torch.tensor([2.0, 2.0, 0.5], dtype=torch.float64)
        >>> B = torch.diag(s).requires_grad_()  # a repeated singular value
        >>> Y = svd_function(B, ("threshold", 1.0))  # max(s - 1, 0)
        >>> one_one_zero = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
        >>> torch.allclose(Y.diagonal(), one_one_zero)
        True
        >>> Y.trace().backward()  # d trace(Y) / dB_ii = f'(s_i), exactly
        >>> torch.allclose(B.grad.diagonal(), one_one_zero)
        True
    """
    rule = (k, atol, rtol, error_atol, error_rtol, min_rank)
    static = multiplets == "cut" and all(x is None for x in rule)
    Y = compiled(backend, static, _ops.call_svd_function, A, f, degeneracy_atol, gauge)
    if Y is not None:
        return Y
    check_matrix("svd_function", A)
    trunc = dict(k=k, atol=atol, rtol=rtol, error_atol=error_atol)
    trunc.update(error_rtol=error_rtol, min_rank=min_rank)
    kw = check_keywords("svd_function", A, degeneracy_atol=degeneracy_atol, **trunc)
    rule = truncation_rule("svd_function", kw, multiplets, False)
    user = user_function("svd_function", f)
    fn = None
    if user is None and not (isinstance(f, str) and f == "normalize"):
        fn = _svd_fn(f, min(A.shape[-2:]))
    elif user is None and rule is not None:
        raise InputError(
            "svd_function: 'normalize' divides by s_1, which a truncation does not "
            "change; use svd_function(A, ('pow', 1), k=...) / ps.svdvals(A)[..., :1]"
        )
    opts = options(kw["degeneracy_atol"], None, gauge, None, op="svd_function")
    julia = on_julia("svd_function", backend, A)
    if rule is not None:
        return _truncated_svd_function(A, user, fn, rule, opts, julia)
    if user is not None:
        return _user_svd_function(A, user, opts, julia)
    if fn is None:
        if 0 in A.shape[-2:]:
            # no singular value to divide by; an empty result, as A / s_max
            # broadcast over the batch would give (it cannot: (3, 0) / (0, 1))
            return A.clone()
        args = (False, opts, forward_tangent(A))
        smax = decompose("svd_function", _FUNCTIONS, A, backend, *args)[1]
        smax = smax[..., :1, None]
        if bool((peek(smax) == 0).any()):
            raise DomainError(
                "svd_function: 'normalize' divides by the largest singular value, "
                "which is 0 (A is a zero matrix)"
            )
        return A / smax
    if julia:
        return apply(_SVDFunctionJulia, A, fn.spec, fn, opts)
    return apply(_SVDFunction, A, fn, opts)[0]


def _user_svd_function(A: Tensor, user: UserFunction, opts: Options, julia: bool):
    """``U f(S) Vh`` for a user's ``f``, differentiable in ``A`` and in every
    tensor ``f`` uses: ``f`` and ``f'`` evaluated on the (detached) spectrum,
    the values inputs of ``SpectralValues`` (see ``_values.py``)."""
    if julia:
        (U, S, Vh), on_julia = jsvd.svd_values(A)
    else:
        U, S, Vh = torch.linalg.svd(A.detach(), full_matrices=False)
    _require_f_at_zero(user, S, opts)
    f, d = user.values(S)
    op = ValuesOp(
        "svd_function",
        lambda fn: _svd_function_maps(fn, opts),
        _svd_form,
        _svd_diagonal,
        user.second,
        spectrum=1,
        odd=True,
    )
    return apply_values(A, f, d, op, (U, S, Vh), on_julia if julia else None)


def _truncated_svd_function(
    A: Tensor,
    user: UserFunction | None,
    fn: SpectralFn | None,
    rule: Any,
    opts: Options,
    julia: bool,
) -> Tensor:
    """``U_r f(S_r) V_r^H``: ``f`` (a user's, or a named one) times the
    indicator of each matrix's kept values, given by its values (as a
    user's ``f``, ``_values.py``): the divided differences of that function
    are ``f``'s inside the kept set and ``f[s_kept, s_discarded] = f(s) /
    (s - s')`` across the cut, the exact coupling to the discarded part."""
    if julia:
        (U, S, Vh), on_julia = jsvd.svd_values(A)
    else:
        U, S, Vh = torch.linalg.svd(A.detach(), full_matrices=False)
    K = S.shape[-1]
    r, _ = svd_ranks(S, rule, opts, julia, complete=True)
    cap = K if rule.k is None else min(rule.k, K)
    rank = torch.full(S.shape[:-1], cap, device=S.device) if r is None else r
    keep = torch.arange(K, device=S.device) < rank.to(S.device).unsqueeze(-1)
    _cut_in_a_cluster(S, rank, rule, opts)
    if user is not None:
        _require_f_at_zero(user, torch.where(keep, S, torch.ones_like(S)), opts)
        f, d = user.values(S)
        second = user.second
    else:
        # (a named f is needed on the kept values only: the polar factor of
        # the kept part exists where those are nonzero, discarded zeros or not)
        kept = torch.where(keep, S, S[..., :1]) if fn.spec == "polar" else S
        f, d = fn(kept, opts)
        second = lambda S: fn.second(S, opts)  # noqa: E731
    zero = torch.zeros_like(S)
    f, d = torch.where(keep, f, zero), torch.where(keep, d, zero)
    op = ValuesOp(
        "svd_function",
        lambda fn: _svd_function_maps(fn, opts),
        _svd_form,
        _svd_diagonal,
        lambda S: torch.where(keep, second(S), torch.zeros_like(S)),
        spectrum=1,
        odd=True,
        constant=user is None,
    )
    return apply_values(A, f, d, op, (U, S, Vh), on_julia if julia else None)


def _cut_in_a_cluster(S: Tensor, rank: Tensor, rule: Any, opts: Options) -> None:
    """The gauge policy where a rank cuts a degenerate cluster (``Y`` then
    depends on the basis chosen inside it), as ``("truncate", k)``."""
    if rule.multiplets != "cut" or opts.gauge == "ignore" or S.shape[-1] < 2:
        return
    P, r = peek(S.detach()), peek(rank)
    inside = (r > 0) & (r < P.shape[-1])
    if not bool(inside.any()):
        return
    tol = degeneracy_tol(P, opts.degeneracy_atol)[..., 0, 0]
    idx = r.clamp(1, P.shape[-1] - 1).unsqueeze(-1)
    gap = P.gather(-1, idx - 1).squeeze(-1) - P.gather(-1, idx).squeeze(-1)
    cut = inside & (gap <= tol)
    if bool(cut.any()):
        apply_gauge_policy(
            f"svd_function: the truncation (rank {int(r[cut].min())}) cuts a "
            f"degenerate cluster (gap {float(gap[cut].min()):.3g}); the result "
            "depends on the basis chosen inside it. Truncate at a gap, or pass "
            "multiplets='down' or 'up'.",
            opts,
        )


def _require_f_at_zero(user: UserFunction, S: Tensor, opts: Options) -> None:
    """The rule of :func:`zero_singular_value` for a user's ``f``: ``f(0)``
    is evaluated on every call, and at the first with an ``f(0) != 0`` a
    warning says that the run stops where ``A`` reaches a zero singular
    value (a training run would otherwise fail there, far into it)."""
    with torch.no_grad():
        f0 = user.f(torch.zeros(1, dtype=S.dtype, device=S.device))
    if not isinstance(f0, Tensor) or f0.numel() != 1:
        return  # the values' own check reports what f returns
    f0 = float(peek(f0).detach().reshape(-1)[0])
    if f0 == 0:
        return
    zero_singular_value(S, opts, f"f(0) = {f0:.3g}")
    _warn_f_at_zero(user, f0)


def _warn_f_at_zero(user: UserFunction, f0: float) -> None:
    key = getattr(user.f, "__code__", user.f)
    if key in _WARNED_F_AT_ZERO:
        return
    _WARNED_F_AT_ZERO.add(key)
    warnings.warn(
        f"svd_function: the user f has f(0) = {f0:.3g} != 0: U f(S) Vh is defined "
        "only while A has no zero singular value, and a DomainError will stop the "
        "call where one reaches 0. Use an f with f(0) = 0 (e.g. lambda s: f(s) - "
        "f(0)) unless A stays full rank.",
        UserWarning,
        stacklevel=4,
    )


# The user functions (their code objects: a lambda made anew in a loop is one)
# already warned about f(0) != 0.
_WARNED_F_AT_ZERO: set = set()


def _svd_form(T: tuple, x: Tensor) -> Tensor:
    U, _, Vh = T
    return (U * x.unsqueeze(-2).to(U.dtype)) @ Vh


def _svd_diagonal(T: tuple, G: Tensor) -> Tensor:
    """``Re diag(U^H G V)``, the transpose of :func:`_svd_form` in ``x``."""
    U, _, Vh = T
    return (U.conj() * (G @ Vh.mH)).sum(-2).real
