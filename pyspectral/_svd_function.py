"""The composite ``svd_function`` (``U f(S) Vh``) with an exact pullback: the
public function, its checks, and the named singular value functions (``f``,
``f'``, ``f''``; ``fn.spec`` is what Julia reads). Its autograd Functions are
``_svd_autograd.py``'s; a user's ``f`` and a truncation, ``_svd_values.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _ops
from ._autograd import apply, forward_tangent
from ._fns import (
    SpectralFn,
    UserFunction,
    named_argument,
    power,
    power_second,
    user_function,
)
from ._route import compiled, decompose, on_julia
from ._settings import Options, options
from ._svd_autograd import _FUNCTIONS, _SVDFunction, _SVDFunctionJulia
from ._svd_values import (
    _truncated_svd_function,
    _user_svd_function,
    zero_singular_value,
)
from ._validation import check_keywords, check_matrix, truncation_rule
from .common.defaults import degeneracy_tol, peek
from .common.gauge import apply_gauge_policy
from .exceptions import DomainError, InputError, InputTypeError

__all__ = ["svd_function"]


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
    user, fn, rule, opts = _check_svd_function(
        A, f, degeneracy_atol, gauge, k, atol, rtol, error_atol, error_rtol,
        multiplets, min_rank,
    )  # fmt: skip
    julia = on_julia("svd_function", backend, A)
    if rule is not None:
        return _truncated_svd_function(A, user, fn, rule, opts, julia)
    if user is not None:
        return _user_svd_function(A, user, opts, julia)
    if fn is None:
        return _normalize(A, opts, backend)
    if julia:
        return apply(_SVDFunctionJulia, A, fn.spec, fn, opts)
    return apply(_SVDFunction, A, fn, opts)[0]


def _check_svd_function(
    A: Any,
    f: Any,
    degeneracy_atol: Any,
    gauge: Any,
    k: Any,
    atol: Any,
    rtol: Any,
    error_atol: Any,
    error_rtol: Any,
    multiplets: Any,
    min_rank: Any,
) -> tuple[UserFunction | None, SpectralFn | None, Any, Options]:
    """Every argument of :func:`svd_function` checked (``_validation``):
    ``(user, fn, rule, opts)``, a user's ``f`` or the named one (both None:
    ``"normalize"``), the truncation rule (None: none) and the options."""
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
    return user, fn, rule, opts


def _normalize(A: Tensor, opts: Options, backend: str) -> Tensor:
    """``"normalize"``: ``A / s_1``, ``s_1`` from the SVD's Function (its
    exact gradient at every spectrum)."""
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
