"""``svd_function`` through the values of a function of the singular values
(``_values.py``): a user's ``f`` and any truncation, with the rule for an
``f(0) != 0`` (:func:`zero_singular_value`) and the gauge policy of a cut
inside a degenerate cluster.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from . import _linalg
from ._fns import SpectralFn, UserFunction
from ._settings import Options
from ._svd_autograd import _svd_function_maps
from ._values import ValuesOp, apply_values
from .common.defaults import degeneracy_tol, peek
from .common.gauge import apply_gauge_policy
from .exceptions import DomainError
from .julia import _svd as jsvd
from .truncation import svd_ranks


def _user_svd_function(A: Tensor, user: UserFunction, opts: Options, julia: bool):
    """``U f(S) Vh`` for a user's ``f``, differentiable in ``A`` and in every
    tensor ``f`` uses: ``f`` and ``f'`` evaluated on the (detached) spectrum,
    the values inputs of ``SpectralValues`` (see ``_values.py``)."""
    if julia:
        (U, S, Vh), on_julia = jsvd.svd_values(A)
    else:
        U, S, Vh = _linalg.svd(A.detach(), full_matrices=False)
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
        U, S, Vh = _linalg.svd(A.detach(), full_matrices=False)
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
