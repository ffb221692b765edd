"""A call of ``svd`` checked and routed: every argument validated, in one
order, before a backend is chosen (``_check_svd``), then the decomposition,
the truncation (the iterative top-k path or the full thin SVD, cut at each
matrix's rank: ``truncation.py``) or the split (``split.py``) of the checked
call (``_route``). The triplets come back as a plain tuple, which ``svd``
names (its ``SVDResult``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._autograd import apply, forward_tangent
from ._route import decompose, on_julia
from ._settings import Options, options
from ._svd_autograd import _FUNCTIONS
from ._validation import (
    check_absorb,
    check_driver,
    check_flag,
    check_keywords,
    check_matrix,
    check_top_k_keywords,
    check_truncation_method,
    truncation_rule,
)
from .split import SVDSplit, TruncatedSVDSplit, split
from .topk import SVDTopK, SVDTopKJulia
from .truncation import TruncatedSVDResult, svd_ranks, truncated_svd, truncation_path


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
    driver: Any,
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
    options (with the checked ``driver``), truncation rule and split."""
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
    absorb = check_absorb("svd", absorb, out)
    # a truncation or a split is thin (full_matrices=True is torch's default)
    full_matrices = full_matrices and rule is None and absorb is None
    opts.state.driver = check_driver("svd", driver, A)
    return _SVDCall(full_matrices, kw, rule, opts, absorb)


def _route(
    A: Tensor, call: _SVDCall, method: str, backend: str, return_error: bool
) -> tuple | TruncatedSVDResult | SVDSplit | TruncatedSVDSplit:
    """What a checked :func:`svd` call past ``out=`` returns: the triplets (a
    plain tuple), a truncation's ``TruncatedSVDResult`` (``return_error``),
    or the split."""
    call.opts.state.split = call.absorb is not None
    if call.rule is None:
        args = (call.full_matrices, call.opts, forward_tangent(A))
        res = decompose("svd", _FUNCTIONS, A, backend, *args)
    else:  # (a split needs each matrix's rank, which the result with its error has)
        errors = return_error or call.absorb is not None
        res = _truncated(A, call.rule, method, call.kw, call.opts, backend, errors)
    if call.absorb is None:
        return res
    julia = on_julia("svd", backend, A)
    return split(A, res, call.absorb, call.opts, return_error and call.rule is not None,
                 julia)  # fmt: skip


def _truncated(
    A: Tensor,
    rule: Any,
    method: str,
    kw: dict,
    opts: Options,
    backend: str,
    return_error: bool,
) -> tuple | TruncatedSVDResult:
    """The truncated SVD: the iterative top-k path or the full thin SVD, cut
    at each matrix's rank (``truncation.py``); the triplets, a plain tuple,
    or with ``return_error`` a ``TruncatedSVDResult``."""
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
    return fields
