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
from .defaults import gauge_tol, peek

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
    measured = float(inside.abs().max()) if inside.numel() else 0.0
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


def apply_gauge_records(
    records: list[tuple[str, float, float]],
    scale_blocks: tuple[torch.Tensor, ...],
    opts: Options,
) -> None:
    """Apply the gauge policy to the violations ``(op, measured, tol)`` that the
    Julia pullbacks recorded, one per batch element and check, as
    :func:`check_gauge` does for the whole call: the largest measured value per
    op against the tolerance of the whole batch of cotangents ``scale_blocks``
    (Julia's per-element tolerances are never larger, so every violation of the
    batch tolerance is among the records)."""
    measured: dict[str, float] = {}
    for op, value, _ in records:
        measured[op] = max(measured.get(op, 0.0), value)
    for op, value in measured.items():
        tol = gauge_tol(*scale_blocks, atol=opts.gauge_atol)
        if value > tol:
            apply_gauge_policy(gauge_message(op, value, tol), opts)


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
