"""Julia's log records as the native backend's warnings.

A glue call returns the records of level Warn and above that Julia logged
(the glue's ``logged``); :func:`warn_julia_logs` re-emits them. Those with a
native twin (the top-k ones of julia/PySpectral/src/forward/topk.jl and
pullbacks/truncated.jl) become the native ``ConvergenceWarning`` with the
native text, once per event for a whole batch; any other becomes a
``RuntimeWarning`` naming the op.
"""

from __future__ import annotations

import re
from typing import Any

from .._warnings import warn
from ..exceptions import ConvergenceWarning

# pyspectral/topk.py and forward/topk.py; test_topk.py and test_julia_bridge.py
# check that they agree).
_UNCERTIFIED = re.compile(
    r"(svd|eigh)_topk\(k=(\d+), method=:(randomized|krylov)\): not certified"
)
_UNCONVERGED = re.compile(
    r"(svd|eigh)_topk backward: the Sylvester solve did not converge"
)
_UNCONVERGED_JVP = re.compile(
    r"(svd|eigh)_topk pushforward: the Sylvester solve did not converge"
)


def _native_event(record: tuple) -> tuple[tuple, float] | None:
    """``(event, residual)`` of a Julia log record ``(level, message, module,
    group, kwargs)`` with a native twin, else None: ``event`` is
    ``("uncertified", op, k)`` (``method="krylov"``: ``("uncertified", op, k,
    "krylov")``), ``("unconverged", op, maxiter)`` (a pullback)
    or ``("unconverged_jvp", op, maxiter)`` (a pushforward); records of
    one event (one per batch element) are one native warning."""
    message, kw = str(record[1]), {str(k): v for k, v in record[4]}
    m = _UNCERTIFIED.match(message)
    if m:
        krylov = ("krylov",) if m[3] == "krylov" else ()
        return ("uncertified", m[1], int(m[2]), *krylov), float(kw["residual"])
    m = _UNCONVERGED.match(message)
    if m:
        return ("unconverged", m[1], int(kw["maxiter"])), float(kw["residual"])
    m = _UNCONVERGED_JVP.match(message)
    if m:
        return ("unconverged_jvp", m[1], int(kw["maxiter"])), float(kw["residual"])
    return None


def _uncertified_text(op: str, k: int, kw: dict, method: str = "randomized") -> str:
    """The native ConvergenceWarning of an uncertified ``method='randomized'``
    or ``'krylov'`` forward (pyspectral/topk.py, with forward/topk.py's
    reason), from the keyword arguments of Julia's record."""
    if str(kw["reason"]) == "cluster":
        p = int(kw["p"])
        kind = "singular " if op == "svd" else "eigen"
        why = (
            f"the {kind}values at k = {k} form a cluster (within degeneracy_atol) "
            f"that extends past the block of k + oversample = {p}; raise oversample"
        )
    else:
        n = int(kw["iterations"])
        what = (
            "|A v - s u| / s_1 of the triplets"
            if op == "svd"
            else "|A v - w v| / max|w| of the eigenpairs"
        )
        why = (
            f"after {n} iteration{'s' if n > 1 else ''} the largest relative residual "
            f"{what} needed is {float(kw['residual']):.2g} (tolerance "
            f"{float(kw['tol']):.2g})"
        ) + {
            "stalled": "; it is not converging",
            "budget": "; at the measured rate it would exceed the work budget",
        }.get(str(kw["stop"]), "")
    full = "SVD" if op == "svd" else "eigh"
    return (
        f"{op}(k={k}, method={method!r}): not certified: {why}. The result is "
        f"approximate; use method='auto' (which falls back to the full {full}), "
        "raise n_iter or oversample."
    )


def _unconverged_text(
    op: str, maxiter: int, residual: float, mode: str = "backward"
) -> str:
    """The native ConvergenceWarning of a top-k backward (or, ``mode="jvp"``,
    forward mode) whose CG solve did not converge on a matrix too large for
    the dense fallback (pyspectral/topk.py's ``_backward_message``)."""
    result = "gradient" if mode == "backward" else "tangent"
    return (
        f"{op}(k=..., method='randomized') {mode}: the Sylvester solve did not "
        f"converge in {maxiter} iterations (relative residual {residual:.2g}): "
        "there is no gap between the kept spectrum and the rest beyond the "
        "certified block, and the matrix is too large for the exact dense "
        f"fallback. The {result} is approximate; use method='full', a k at a "
        "gap, or a larger oversample."
    )


def warn_julia_logs(op: str, records: Any) -> None:
    """Re-emit the warnings a glue call logged in Julia. One event, logged once
    per batch element in Julia, is one native warning (the record with the
    largest residual), as the native backend, which works on the whole batch,
    warns; other records become a ``RuntimeWarning`` naming the op."""
    worst: dict[tuple, tuple[float, dict]] = {}
    for record in map(tuple, records):
        event = _native_event(record)
        if event is None:
            level, message = str(record[0]), str(record[1])
            warn(f"{op} (Julia {level}): {message}", RuntimeWarning)
            continue
        key, residual = event
        if key not in worst or residual > worst[key][0]:
            worst[key] = (residual, {str(k): v for k, v in record[4]})
    for key, (residual, kw) in worst.items():
        if key[0] == "uncertified":
            message = _uncertified_text(key[1], key[2], kw, *key[3:])
        else:
            mode = "jvp" if key[0] == "unconverged_jvp" else "backward"
            message = _unconverged_text(key[1], key[2], residual, mode)
        warn(message, ConvergenceWarning)  # at the user's line
