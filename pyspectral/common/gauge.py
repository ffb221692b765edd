"""The gauge policy, decided in one place (mirrors
``julia/PySpectral/src/common/gauge.jl``). Inside a degenerate cluster the
basis of singular/eigen vectors is arbitrary; a loss that depends on it has a
cotangent whose anti-Hermitian part does not vanish there. That part is
dropped by the pullbacks, so its size is measured and reported according to
the policy: warn (``GaugeWarning``), raise (``GaugeError``) or ignore.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import torch

from .._warnings import warn
from ..exceptions import GaugeError, GaugeWarning
from .defaults import degeneracy_tol, eps34, gauge_tol, max_abs, peek

if TYPE_CHECKING:
    from .._settings import Options


def check_gauge(
    op: str,
    violation: torch.Tensor,
    cluster: torch.Tensor | None,
    scale_blocks: tuple[torch.Tensor, ...],
    opts: Options,
    extra: float = 0.0,
    spectrum: torch.Tensor | None = None,
) -> None:
    """Apply the gauge policy to ``max |violation|`` over ``cluster`` pairs
    (``None``: over every entry of ``violation``) and ``extra`` (a violation
    the caller measured elsewhere).

    A gauge-invariant loss has a cotangent whose anti-Hermitian part vanishes
    inside every degenerate cluster; what is left is the part of the gradient
    that depends on an arbitrary basis choice and is dropped. Given the
    ``spectrum`` (``(*, k)``, the values the cluster pairs index) and no
    ``gauge_atol``, a pair's allowance also has the data's floor
    (:func:`data_floor` times ``max|spectrum|``: the violation a stationary
    point's rounding shows in a cotangent of the vectors) and, as
    :func:`check_weights`, ``WEIGHT_SLOPE`` times the pair's relative gap
    times the cotangents' scale (an invariant loss of ``U diag(S) Vh`` has
    ``J_a + K_a`` of about the gap times its cotangent inside the tolerance).
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
    if measured > tol and spectrum is not None and opts.gauge_atol is None:
        if cluster is not None and extra <= tol:
            measured, tol = _pairwise(
                violation, cluster, spectrum, tol, scale_blocks, opts.degeneracy_atol
            )
    if measured > tol:
        apply_gauge_policy(gauge_message(op, measured, tol), opts)


def _pairwise(
    violation: torch.Tensor,
    cluster: torch.Tensor,
    spectrum: torch.Tensor,
    tol: float,
    scale_blocks: tuple[torch.Tensor, ...],
    degeneracy_atol: float | None,
) -> tuple[float, float]:
    """``(measured, allowed)`` of the worst cluster pair over its own
    allowance (``measured <= allowed`` where none is over): ``tol`` at least
    the data's floor, plus the gap slope (:func:`check_gauge`)."""
    with torch.no_grad():
        V = peek(violation.detach()).abs()
        x = peek(spectrum.detach()).abs()
        inside = peek(cluster).expand_as(V)
        scale = tol / eps34(V.dtype) if tol > 0 else 0.0  # max |cotangent|
        floor = (data_floor(x, V.dtype) * x.amax(-1, keepdim=True)).unsqueeze(-1)
        xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)
        gap = (xi - xj).abs()
        # relative to the degeneracy tolerance at least, as check_weights: values
        # at rounding level (a cluster of zeros) have no meaningful relative gap
        dtol = degeneracy_tol(x, degeneracy_atol)
        rel = gap / torch.maximum(xi + xj, dtol).clamp_min(torch.finfo(x.dtype).tiny)
        allowed = torch.clamp(floor, min=tol) + WEIGHT_SLOPE * rel * scale
        over = inside & (V > allowed)
        if not bool(over.any()):
            return 0.0, tol
        measured = float(V.masked_select(over).max())
        return measured, float(allowed.masked_select(over).min())


def gauge_message(op: str, measured: float, tol: float) -> str:
    """The gauge warning/error text (shared by both backends)."""
    return (
        f"{op}: the incoming gradient depends on the basis chosen inside a "
        f"degenerate subspace (measured {measured:.3g} > gauge_atol {tol:.3g}); "
        "that part is dropped, so this gradient is not exact. Use a loss that is "
        "invariant under rotations within degenerate subspaces, or "
        f"{_GAUGE_ROUTES.get(op, _GAUGE_ROUTES[''])}, exact at every spectrum."
    )


# The exact routes gauge_message names, by op ("": the others).
_GAUGE_ROUTES = {
    "eig": "eig_function(A, f) for V f(L) V^-1 (A diagonalizable), which is",
    "": "svd_function / matrix_function, which are",
}


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
    "eig": "eig_function(A, f) for V f(L) V^-1 (A diagonalizable), a symmetric "
    "function of each cluster's eigenvalues (their sum, product or mean) or its "
    "spectral projector",
}


# The floor of the weights allowance (docs/settings.md, "The allowance floor").
# The spread a cotangent shows is measured at the computed spectrum, the exact
# one of A + dA with |dA| <= (k + 1) eps ||A|| (k values; LAPACK's backward
# error, and as much again for the products that formed the cotangent), so a
# cotangent that is a symmetric function of the exact spectrum differs there by
# up to f'' (k + 1) eps ||A|| per value: twice that between two. The
# allowance scales with max|g|, which vanishes at a stationary point where f''
# does not (a fit ||U diag(S) Vh - B||^2 at A = B: f'' = 2, g = rounding). No
# cotangent carries f''; the floor takes the curvature of that fit, 2, in the
# units of A (a loss of size ||A||^2), as the least a loss needs to be worth a
# warning: FLOOR_CURVATURE 2 (k + 1) eps ||A||. A loss much smaller than that
# (a linear loss sum(w S) with |w| below 4 (k + 1) eps ||A||) gets the floor
# as an absolute bound on its error; gauge_atol sets the allowance outright.
FLOOR_CURVATURE = 2.0


def data_floor(spectrum_abs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The least weights allowance of each matrix (``(*, 1)``), from the
    spectrum's moduli (``(*, k)``): ``2 FLOOR_CURVATURE (k + 1) eps max|x|``,
    the spread a stationary fit's cotangent shows from the rounding of ``A``
    alone (``FLOOR_CURVATURE``)."""
    k = spectrum_abs.shape[-1]
    scale = spectrum_abs.amax(-1, keepdim=True).to(dtype.to_real())
    return 2 * FLOOR_CURVATURE * (k + 1) * torch.finfo(dtype.to_real()).eps * scale


def near_pair_cancellation(
    x: torch.Tensor,
    hermitian_tangent: Callable[[], torch.Tensor],
    pair_scale: torch.Tensor,
    dims: float,
    opts: Options,
    kept: torch.Tensor | None = None,
) -> tuple[float, float, float] | None:
    """Where a pushforward's rotation of a near-degenerate pair is so large
    that an output invariant under it loses accuracy cancelling it.

    ``x`` ``(*, k)`` the values, ``hermitian_tangent()`` ``(*, k, k)`` the
    Hermitian part of the tangent in their basis (``U^H dA V``, ``V^H dA V``;
    formed only where a pair is in the window, so a tangent the window never
    needs, as gradcheck's batched ones, is never read), ``pair_scale``
    ``(*, k, k)`` the size of each pair's values (``s_i + s_j``; ``2 max|w|``).
    A pair with ``degeneracy_atol < gap < eps**(1/4) pair_scale`` gets a
    rotation ``H_ij / gap``, each tangent exact to rounding; an output
    invariant under it (a polar factor, a projector onto a subspace holding
    the pair, ``L @ R``) cancels it in the caller's graph, after the rule,
    with a relative error about ``dims eps |H_ij| pair_scale / (gap max|H|)``
    (``dims``: the length of the products that cancel it). Returns ``(gap,
    measured, eps**(1/2))`` of the worst pair above ``eps**(1/2)``, else
    ``None`` (and under ``gauge="ignore"``). ``kept`` ``(*, k)`` restricts
    it to those values (the split's kept block)."""
    if opts.gauge == "ignore" or x.shape[-1] < 2:
        return None
    with torch.no_grad():
        x, pair_scale = peek(x), peek(pair_scale)
        tol = degeneracy_tol(x, opts.degeneracy_atol)
        gap = (x.unsqueeze(-1) - x.unsqueeze(-2)).abs()
        eps = torch.finfo(x.dtype).eps
        # warned above eps**(1/2), a central difference's accuracy: the output is
        # the caller's, whose tolerance the rule cannot know, and a tighter bar
        # warns at gaps of 1e-4 for a loss of 1e-10 (a warning users learn to
        # silence); at the gaps that matter (1e-9: 4e-6) it is far above it
        res = eps**0.5
        window = (gap > tol) & (gap < eps**0.25 * pair_scale)
        if kept is not None:
            kept = peek(kept)
            window &= kept.unsqueeze(-1) & kept.unsqueeze(-2)
        if not bool(window.any()):
            return None
        H = peek(hermitian_tangent()).abs()
        tiny = torch.finfo(x.dtype).tiny
        scale = H.amax((-2, -1), keepdim=True).clamp_min(tiny)
        ratio = H * pair_scale / (gap.clamp_min(tiny) * scale)
        loss = dims * eps * ratio
        over = window & (loss > res)
        if not bool(over.any()):
            return None
        measured = float(loss.masked_select(over).max())
        return float(gap.masked_select(over).min()), measured, float(res)


def svd_pair_cancellation(
    U: torch.Tensor,
    S: torch.Tensor,
    Vh: torch.Tensor,
    dA: torch.Tensor,
    opts: Options,
    kept: torch.Tensor | None = None,
) -> tuple[float, float, float] | None:
    """:func:`near_pair_cancellation` of an SVD's tangent ``dA`` (``svd``'s
    forward mode and the split's): the pair scale ``s_i + s_j``, the tangent
    ``herm(U^H dA V)`` on the thin factors, ``dims = (m + n) / 2`` (the
    products of the caller's graph that cancel it)."""
    k = S.shape[-1]
    with torch.no_grad():
        x = peek(S)
        pair = x.unsqueeze(-1) + x.unsqueeze(-2)
    dims = (U.shape[-2] + Vh.shape[-1]) / 2
    return near_pair_cancellation(
        x, lambda: herm_in_basis(U[..., :k], dA, Vh[..., :k, :]), pair, dims, opts,
        kept,
    )  # fmt: skip


def herm_in_basis(U: torch.Tensor, dA: torch.Tensor, Vh: torch.Tensor) -> torch.Tensor:
    """``herm(U^H dA Vh^H)`` of the plain tensors (no graph): a tangent's
    Hermitian part in the basis of a decomposition."""
    with torch.no_grad():
        P = peek(U).mH @ peek(dA) @ peek(Vh).mH
        return (P + P.mH) * 0.5


def near_pair_message(op: str, gap: float, measured: float, res: float) -> str:
    """The text for :func:`near_pair_cancellation` in ``svd`` / ``eigh``'s
    forward mode (the split has its own, naming the bond)."""
    if op == "svd":
        what, outs = "singular values", "U and V"
        inv = "the polar factor U Vh, a projector onto a subspace holding the pair"
        route = "svd_function(A, f) (svd_function(A, 'polar') for U Vh)"
    else:
        what, outs = "eigenvalues", "V"
        inv = "a projector onto a subspace holding the pair, V f(w) V^H, f equal on it"
        route = "matrix_function(A, f)"
    return (
        f"{op}: forward mode at a near-degenerate pair of {what} (gap {gap:.3g}, "
        f"above degeneracy_atol): the tangents of {outs} carry a rotation of the "
        f"pair of size |tangent| / gap, which an output invariant under it ({inv}) "
        f"cancels in your graph, losing about {measured:.3g} of relative accuracy "
        f"(> {res:.3g}), so such an output's tangent is not exact (each factor's "
        "is). Use reverse mode (torch.autograd.grad, torch.func.vjp), whose rule "
        f"cancels it before it divides (exact at every gap), or {route}, exact in "
        "every mode."
    )


def weights_floor(spectrum_abs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The least allowance of :func:`check_weights` per matrix (``(*, 1)``):
    the package's resolution ``eps**(3/4)`` relative to the cotangent of a
    loss of size ``||A||^2`` (``FLOOR_CURVATURE max|x|``), and
    :func:`data_floor` at least. Near a stationary point the weights are the
    loss's residual noise, not its scale: a converged DMRG state's multiplets
    show spreads of ``1e-12`` in weights of ``1e-3`` while the gradient is
    exact to that level (docs/math.md, the allowance floor)."""
    scale = spectrum_abs.amax(-1, keepdim=True).to(dtype.to_real())
    resolution = eps34(dtype.to_real()) * FLOOR_CURVATURE * scale
    return torch.maximum(resolution, data_floor(spectrum_abs, dtype))


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
    matrix, at least :func:`weights_floor`) plus ``WEIGHT_SLOPE`` times the
    pair's relative gap times ``|g_i| + |g_j|``, and (default only) plus
    ``FLOOR_CURVATURE`` times the gap: a symmetric loss's weights differ by
    ``f''`` times the gap, which the relative term misses where the weights
    are small and ``f''`` is not (near a stationary point)."""
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
        ax = x.abs()
        if base is None:  # per matrix, as Julia's (one matrix at a time)
            base = eps34(G.dtype) * size.amax(-1, keepdim=True).unsqueeze(-1)
            base = torch.maximum(base, weights_floor(ax, G.dtype).unsqueeze(-1))
        gap = (x.unsqueeze(-1) - x.unsqueeze(-2)).abs()
        scale = torch.maximum(ax.unsqueeze(-1) + ax.unsqueeze(-2), t)
        allowed = (size.unsqueeze(-1) + size.unsqueeze(-2)) * (gap / scale)
        allowed = allowed * WEIGHT_SLOPE + base
        if opts.gauge_atol is None:
            # the floor's curvature across the pair's gap: what a symmetric
            # loss's weights differ by there where they are small (near a
            # stationary point) and f'' is not
            allowed = allowed + FLOOR_CURVATURE * gap
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


def _qr_names(op: str) -> tuple[str, str, str, str]:
    """``(Q's, R's, Q past j, R past j)`` in the words of ``op`` (``"lq"``
    reads the QR of ``A^H`` transposed: rows of ``Q``, columns of ``L``)."""
    if op == "qr":
        return "columns", "rows", "Q[..., :, j:]", "R[..., j:, :]"
    return "rows", "columns", "Q[..., j:, :]", "L[..., :, j:]"


def undetermined_message(op: str, measured: float, tol: float) -> str:
    """The gauge text of a rank-deficient QR / LQ whose cotangent depends on
    the factors past the first small pivot (shared by both backends)."""
    q, r, q2, r2 = _qr_names(op)
    t = "R" if op == "qr" else "L"
    prod = f"{q2} @ {r2}" if op == "qr" else f"{r2} @ {q2}"
    return (
        f"{op}: A is rank deficient (a pivot |{t}_jj| at or below rank_atol); Q's "
        f"{q} and {t}'s {r} from the first such pivot j on are one choice of many "
        f"(A determines only their product {prod} and the factors before j), "
        f"and the incoming gradient depends on that choice (measured {measured:.3g} "
        f"> gauge_atol {tol:.3g}); that part is dropped, so this gradient is not "
        f"exact. Use a loss of Q @ R (L @ Q) and of Q's {q} and {t}'s {r} before j "
        "(any function of the product is exact), or a full-rank A."
    )


def lost_message(op: str, measured: float, tol: float) -> str:
    """The text of a rank-deficient QR / LQ with a thin ``Q`` whose cotangent
    reaches the product past the first small pivot: the derivative along
    the directions that raise the rank outside ``Q``'s range is in no
    cotangent of the reduced factors (shared by both backends)."""
    t, shape = ("R", "m > n") if op == "qr" else ("L", "m < n")
    return (
        f"{op}: A is rank deficient (a pivot |{t}_jj| at or below rank_atol) and "
        f"Q is thin ({shape}): the derivative along the directions that raise the "
        "rank outside the span of Q is in no cotangent of the reduced factors, and "
        f"the incoming gradient reaches them (measured {measured:.3g} > gauge_atol "
        f"{tol:.3g}); that part is missing, so this gradient is not exact. Use "
        f'{op}(A, mode="complete"), whose factors carry it (exact for every loss of '
        "the product and of the factors before j), or a full-rank A."
    )


def complement_message(op: str, measured: float, tol: float) -> str:
    """The text of a complete QR / LQ whose cotangent depends on the basis of
    the complement of A's range (shared by both backends)."""
    if op == "qr":
        part, proj = "columns Q2 = Q[..., :, n:]", "Q2 Q2^H"
    else:
        part, proj = "rows Q2 = Q[..., m:, :]", "Q2^H Q2"
    return (
        f"{op}: the incoming gradient depends on the basis of Q's last {part} "
        '(mode="complete"), a basis of the complement of the span of A that A '
        f"determines only up to rotations (measured {measured:.3g} > gauge_atol "
        f"{tol:.3g}); that part is dropped, so this gradient is not exact. Use a "
        f"loss of the complement through its projector {proj} (or of the other "
        "factors), which is exact."
    )


def qr_forward_message(op: str, measured: float, tol: float) -> str:
    """The text of a QR / LQ forward mode whose tangent moves the product past
    the first small pivot (shared by both backends)."""
    _, _, q2, r2 = _qr_names(op)
    t = "R" if op == "qr" else "L"
    return (
        f"{op}: forward mode at a rank-deficient A (a pivot |{t}_jj| at or below "
        f"rank_atol): the tangent moves the factors from the first such pivot j on "
        f"(measured {measured:.3g} > gauge_atol {tol:.3g}), which are one choice of "
        f"many, so the tangents of {q2} and {r2} depend on that choice; those of "
        f"the factors before j and of Q @ R are exact. Use reverse mode "
        "(torch.autograd.grad, torch.func.vjp), whose rule sees how the loss uses "
        "the factors: exact for losses of the product and of the factors before j."
    )


# The kinds of violation a Julia pullback records, by the suffix of its op
# name ("svd", "svd:weights", "qr:rank", "qr:lost", "qr:complement"): each
# kind has its message.
WEIGHTS, RANK = ":weights", ":rank"
LOST, COMPLEMENT = ":lost", ":complement"


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
        # the batch's tolerance, or Julia's own pairwise allowance where larger
        # (the data floor and gap slope of check_gauge's spectrum=)
        tol = max(gauge_tol(*scale_blocks, atol=opts.gauge_atol), tol)
        if value <= tol:
            continue
        if op.endswith(RANK):
            msg = undetermined_message(op[: -len(RANK)], value, tol)
        elif op.endswith(LOST):
            msg = lost_message(op[: -len(LOST)], value, tol)
        elif op.endswith(COMPLEMENT):
            msg = complement_message(op[: -len(COMPLEMENT)], value, tol)
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
