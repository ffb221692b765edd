"""A call of ``eigh`` checked and routed: every argument validated, in one
order, before a backend is chosen (``_check_eigh``; the common call, every
keyword at its default, checks only what it reads), then the decomposition,
the truncation (the iterative top-k path or the whole decomposition, cut at
each matrix's rank: ``truncation.py``) or the truncation by magnitude of the
checked call (``_route``). The pairs come back as a plain tuple, which
``eigh`` names (its ``EighResult``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._autograd import apply
from ._backend import BACKENDS
from ._eigh_autograd import _decompose, _hermitian_input
from ._route import on_julia
from ._settings import Options, gradient_convention, options
from ._validation import (
    check_flag,
    check_keywords,
    check_matrix,
    check_top_k_keywords,
    check_truncation_method,
    check_uplo,
    require_hermitian,
    truncation_rule,
)
from .exceptions import InputError
from .pullbacks.eigh import hermitian_from_triangle
from .topk import EighTopK, EighTopKJulia
from .truncation import (
    TruncatedEighResult,
    eigh_ranks,
    truncated_eigh,
    truncated_eigh_by_magnitude,
    truncation_path,
)


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


def _check(op: str, A: Any, UPLO: Any) -> str:
    """Validate ``A`` and ``UPLO`` as ``torch.linalg.eigh`` does (either case of
    ``UPLO``; only that triangle must be finite); returns ``"L"`` or ``"U"``."""
    uplo = check_uplo(op, UPLO)
    check_matrix(op, A, square=True, uplo=uplo)
    return uplo


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
    backend: Any,
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
    out: Any,
    common: bool = False,
) -> _EighCall:
    """Every argument of :func:`eigh` checked (``_validation``), ``A``'s
    hermiticity if asked, and the call's options and truncation rule; for
    the common call (``common``: every keyword at its default, as
    :func:`eigh` reads it off its signature), ``A``, ``UPLO`` and the
    convention only."""
    # The common call, every keyword at its default (``common``: what the
    # checks below would find): A, UPLO and the convention are all there is.
    if common and backend in BACKENDS:
        UPLO = _check("eigh", A, UPLO)
        hermitian = gradient_convention(gradient, "eigh") == "hermitian"
        opts = options(op="eigh")
        return _EighCall(UPLO, {}, None, opts, hermitian, True, False)
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


def _route(
    A: Tensor, call: _EighCall, method: str, backend: str, return_error: bool
) -> tuple | TruncatedEighResult:
    """What a checked :func:`eigh` call past ``out=`` returns: the pairs (a
    plain tuple) or a truncation's ``TruncatedEighResult``
    (``return_error``)."""
    if call.magnitude:
        return _eigh_by_magnitude(A, call, backend, return_error)
    if call.rule is None:
        return _decompose(A, call.uplo, call.opts, backend, call.hermitian, True)
    return _truncated(A, call, method, backend, return_error)


def _truncated(
    A: Tensor, call: _EighCall, method: str, backend: str, return_error: bool
) -> tuple | TruncatedEighResult:
    """The truncated eigh: the iterative top-k path or the whole
    decomposition, cut at each matrix's rank (``truncation.py``); the pairs,
    a plain tuple, or with ``return_error`` a ``TruncatedEighResult``."""
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
    return fields


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
) -> tuple | TruncatedEighResult:
    """The truncation by magnitude: the whole decomposition, its eigenpairs
    ranked by ``|lambda|`` (descending), the rules on that ranking; the
    pairs, a plain tuple, or with ``return_error`` a ``TruncatedEighResult``."""
    rule = call.rule
    if rule is None or not rule.truncates:
        raise InputError(
            "eigh: by='magnitude' orders a truncation, but none is asked for; pass "
            "k or a tolerance (atol, rtol, error_atol, error_rtol), or drop by"
        )
    w, V = _decompose(A, call.uplo, call.opts, backend, call.hermitian)
    julia = on_julia("eigh", backend, A)
    fields = truncated_eigh_by_magnitude(w, V, rule, call.opts, julia, return_error)
    return fields
