"""The gauge policy, decided in one place (mirrors
``julia/PySpectral/src/common/gauge.jl``). Inside a degenerate cluster the
basis of singular/eigen vectors is arbitrary; a loss that depends on it has a
cotangent whose anti-Hermitian part does not vanish there. That part is
dropped by the pullbacks, so its size is measured and reported according to
the policy: warn (``GaugeWarning``), raise (``GaugeError``) or ignore.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from .._warnings import warn
from ..exceptions import GaugeError, GaugeWarning
from .defaults import eps34, gauge_tol, max_abs, peek

if TYPE_CHECKING:
    from .._settings import Options


def check_gauge(
    op: str,
    violation: torch.Tensor,
    cluster: torch.Tensor | None,
    scale_blocks: tuple[torch.Tensor, ...],
    opts: Options,
    extra: float = 0.0,
) -> None:
    """Apply the gauge policy to ``max |violation|`` over ``cluster`` pairs
    (``None``: over every entry of ``violation``) and ``extra`` (a violation
    the caller measured elsewhere).

    A gauge-invariant loss has a cotangent whose anti-Hermitian part vanishes
    inside every degenerate cluster; what is left is the part of the gradient
    that depends on an arbitrary basis choice and is dropped.
    """
    if opts.gauge == "ignore":
        return
    # masked_select reads only the (few) cluster entries; one host sync.
    inside = peek(violation.detach())
    if cluster is not None:
        inside = inside.masked_select(peek(cluster))
    measured = max_abs(inside) if inside.numel() else 0.0
    measured = max(measured, extra)
    if measured == 0:
        # Nothing to report whatever the tolerance (>= 0): skip the passes over
        # the cotangents that gauge_atol needs (real input, distinct spectrum).
        return
    tol = gauge_tol(*scale_blocks, atol=opts.gauge_atol)
    if measured > tol:
        apply_gauge_policy(gauge_message(op, measured, tol), opts)


def gauge_message(op: str, measured: float, tol: float) -> str:
    """The gauge warning/error text (shared by both backends)."""
    return (
        f"{op}: the incoming gradient depends on the basis chosen inside a "
        f"degenerate subspace (measured {measured:.3g} > gauge_atol {tol:.3g}); "
        "that part is dropped, so this gradient is not exact. Use a loss that is "
        "invariant under rotations within degenerate subspaces, or "
        "svd_function / matrix_function, which are exact at every spectrum."
    )


# A symmetric function of a cluster's values has equal partial derivatives
# where the values are equal; at values within the degeneracy tolerance but
# apart, its weights differ by about f'' times the gap. The allowance for that
# is this multiple of the relative gap times the weights' size (a power s**p
# has the factor p - 1, a logarithm 1, an exponential s); a loss that weights
# a cluster unequally differs by the size of its weights instead, a factor
# of at least 1 / (eps**(3/4) WEIGHT_SLOPE) more at a cluster near s_max.
WEIGHT_SLOPE = 16.0

# What each op's message offers instead of its plain pullback.
_EXACT_ROUTES = {
    "svd": "svd_function(A, f) for U f(S) Vh (('pow', 1) for U diag(S) Vh, "
    "'polar', truncations) or svd(A, absorb=...) for the two factors",
    "eigh": "matrix_function(A, f) for V f(w) V^H",
    "eig": "a symmetric function of each cluster's eigenvalues (their sum, "
    "product or mean) or its spectral projector",
}


def check_weights(
    op: str,
    g: torch.Tensor,
    spectrum: torch.Tensor,
    tol: torch.Tensor,
    opts: Options,
) -> None:
    """Apply the gauge policy where the cotangent ``g`` of ``spectrum`` (``S``,
    ``w`` or ``lambda``, ``(*, k)``) weights the members of a degenerate
    cluster unequally (``tol``: the degeneracy tolerance, ``(*, 1, 1)``).

    The pullback of ``U, S, V`` (``V, w``) at a cluster is exact only for a
    loss that is a symmetric function of the cluster's values, whose ``g``
    is constant there; otherwise the loss reads the values through the basis
    inside the cluster (``U diag(S) Vh``), and the part of the gradient that
    needs is a 0/0 absent from the cotangents, so the result depends on the
    basis LAPACK returned. A cotangent that happens to be constant in that
    basis cannot be told apart from a symmetric function's; the check
    catches every other, as the gauge check catches a rotation-dependent
    loss. Tolerance: ``gauge_atol`` (default ``eps**(3/4) max|g|`` of each
    matrix) plus ``WEIGHT_SLOPE`` times the pair's relative gap times
    ``|g_i| + |g_j|``."""
    if opts.gauge == "ignore" or g is None or g.shape[-1] < 2:
        return
    with torch.no_grad():
        G, x, t = (peek(a.detach()) for a in (g, spectrum, tol))
        if G.shape != x.shape:
            return  # a transform's extra dimensions: nothing to align with
        close = (x.unsqueeze(-1) - x.unsqueeze(-2)).abs() <= t
        close &= ~torch.eye(x.shape[-1], dtype=torch.bool, device=x.device)
        if not bool(close.any()):
            return
        size = G.abs()
        base = opts.gauge_atol
        if base is None:  # per matrix, as Julia's (one matrix at a time)
            base = eps34(G.dtype) * size.amax(-1, keepdim=True).unsqueeze(-1)
        ax = x.abs()
        gap = (x.unsqueeze(-1) - x.unsqueeze(-2)).abs()
        scale = torch.maximum(ax.unsqueeze(-1) + ax.unsqueeze(-2), t)
        allowed = (size.unsqueeze(-1) + size.unsqueeze(-2)) * (gap / scale)
        allowed = allowed * WEIGHT_SLOPE + base
        spread = (G.unsqueeze(-1) - G.unsqueeze(-2)).abs()
        over = close & (spread > allowed)
        if not bool(over.any()):
            return
        measured = float(spread.masked_select(over).max())
        limit = float(allowed.masked_select(over).min())
    apply_gauge_policy(weights_message(op, measured, limit), opts)


def weights_message(op: str, measured: float, limit: float) -> str:
    """The text of :func:`check_weights` (shared by both backends)."""
    values = "singular values" if op == "svd" else "eigenvalues"
    return (
        f"{op}: the incoming gradient of the {values} weights the members of a "
        f"degenerate cluster unequally (spread {measured:.3g} > allowed "
        f"{limit:.3g}): the loss is not a symmetric function of the cluster (it "
        "reads the values through the basis inside it, as U diag(S) Vh does), "
        "and the part of the gradient that needs is not in the cotangents, so "
        "this gradient depends on the basis LAPACK returned and is not exact. "
        f"Use {_EXACT_ROUTES.get(op, _EXACT_ROUTES['eig'])}: exact at every spectrum."
    )


def undetermined_message(op: str, measured: float, tol: float) -> str:
    """The gauge text of a rank-deficient QR / LQ (shared by both backends)."""
    q, r = ("columns", "rows") if op == "qr" else ("rows", "columns")
    t = "R" if op == "qr" else "L"
    return (
        f"{op}: A is rank deficient (a pivot |{t}_ii| at or below rank_atol); Q's "
        f"{q} and {t}'s {r} past the rank are not determined by A, and the "
        f"incoming gradient depends on them (measured {measured:.3g} > gauge_atol "
        f"{tol:.3g}); that part is dropped, so this gradient is not exact. Use a "
        f"loss of Q's {q} and {t}'s {r} up to the rank, or a full-rank A."
    )


# The kinds of violation a Julia pullback records, by the suffix of its op
# name ("svd", "svd:weights", "qr:rank"): each kind has its message.
WEIGHTS, RANK = ":weights", ":rank"


def apply_gauge_records(
    records: list[tuple[str, float, float]],
    scale_blocks: tuple[torch.Tensor, ...],
    opts: Options,
) -> None:
    """Apply the gauge policy to the violations ``(op, measured, tol)`` that the
    Julia pullbacks recorded, one per batch element and check, as the native
    checks do for the whole call: for a basis dependence (a plain op name)
    and an undetermined part (``op:rank``), the largest measured value per op
    against the tolerance of the whole batch of cotangents ``scale_blocks``
    (Julia's per-element tolerances are never larger, so every violation of
    the batch tolerance is among the records); for unequal weights
    (``op:weights``), whose allowance is per pair, Julia's verdict, with the
    largest measured spread."""
    measured: dict[str, tuple[float, float]] = {}
    for op, value, tol in records:
        if value > measured.get(op, (-1.0, 0.0))[0]:
            measured[op] = (value, tol)
    for op, (value, tol) in measured.items():
        if op.endswith(WEIGHTS):
            apply_gauge_policy(weights_message(op[: -len(WEIGHTS)], value, tol), opts)
            continue
        tol = gauge_tol(*scale_blocks, atol=opts.gauge_atol)
        if value <= tol:
            continue
        if op.endswith(RANK):
            msg = undetermined_message(op[: -len(RANK)], value, tol)
        else:
            msg = gauge_message(op, value, tol)
        apply_gauge_policy(msg, opts)


def policy_applied(opts: Options) -> Options:
    """``opts`` with ``gauge="ignore"``, for re-evaluating in a backward what the
    forward has already checked and reported (one warning per event)."""
    return replace(opts, gauge="ignore")


def apply_gauge_policy(msg: str, opts: Options) -> None:
    """Raise ``GaugeError`` under ``gauge="raise"``, else warn ``GaugeWarning``
    (attributed to the user's line, see :func:`warn`)."""
    if opts.gauge == "raise":
        raise GaugeError(msg)
    if opts.gauge == "warn":
        warn(msg, GaugeWarning, opts.site)


# Library code a warning must not be attributed to: torch, pyspectral, and the
# thread machinery (a thread that runs ``loss.backward`` directly has no frame
