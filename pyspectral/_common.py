"""Shared helpers: package defaults, tolerance formulas, gap inverses, divided
differences, the gauge check and input validation.

The tolerance formulas here are the ones documented in the README and mirrored
by ``julia/PySpectral/src/common``; change them in both places or in neither.
"""

from __future__ import annotations

import cmath
import contextlib
import contextvars
import math
import numbers
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch._C._functorch import get_unwrapped, is_functorch_wrapped_tensor

from .exceptions import (
    BackendError,
    DerivativeError,
    DtypeError,
    GaugeError,
    GaugeWarning,
    InputError,
    InputTypeError,
    NonFiniteError,
    ShapeError,
    UPLOError,
)

GAUGE_POLICIES = ("warn", "raise", "ignore")


@dataclass(frozen=True)
class Options:
    """Numerical settings of one call, fixed at forward time (so a backward run
    later, or from another thread, sees the settings the forward saw).

    ``None`` tolerances are computed from the data: see :func:`degeneracy_atol`
    and :func:`gauge_atol`.
    """

    degeneracy_atol: float | None = None
    broadening: float | None = None
    gauge: str = "warn"
    gauge_atol: float | None = None
    # Not a setting: where the user's code made the call (see :func:`warn`),
    # for a warning raised by a backward that runs where the user's frames are
    # not on the stack (an autograd device thread). No part of equality.
    site: Any = field(default=None, compare=False, repr=False)
    # Not a setting: state shared by the backward passes of one call, across
    # orders of differentiation (see :func:`second_order_guard`).
    state: dict = field(default_factory=dict, compare=False, repr=False)


# The user settings among Options' fields (get_defaults, set_defaults, defaults)
SETTINGS = ("degeneracy_atol", "broadening", "gauge", "gauge_atol")


def _settings(opts: Options) -> dict[str, Any]:
    return {name: getattr(opts, name) for name in SETTINGS}


# Two layers of defaults: the process-wide ones (set_defaults) and the scoped
# overrides of ``with defaults(...)``, kept in a ContextVar so that each thread
# (and asyncio task) sees only its own: two threads inside ``defaults`` blocks
# neither see nor undo each other's settings, and nothing is left behind.
_defaults = Options()
_defaults_lock = threading.Lock()
_scoped: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "pyspectral_scoped_defaults", default=None
)


def _effective() -> Options:
    """The defaults in force here: the process-wide ones under this context's
    scoped overrides."""
    scoped = _scoped.get()
    return replace(_defaults, **scoped) if scoped else _defaults


def get_defaults() -> dict[str, Any]:
    """The package defaults used when a call leaves a setting as ``None``: the
    process-wide ones, with the overrides of the enclosing ``defaults(...)``
    blocks of this thread."""
    return _settings(_effective())


def set_defaults(**settings: Any) -> dict[str, Any]:
    """Set the process-wide package defaults; returns the previous process-wide
    ones (to restore them later). Inside a ``defaults(...)`` block its scoped
    overrides still win for the settings it names.

    Keys: ``degeneracy_atol`` (float or None = ``max(S) * eps**0.75``),
    ``broadening`` (Lorentzian width, float or None = hard cutoff),
    ``gauge`` (``"warn"``, ``"raise"`` or ``"ignore"``) and ``gauge_atol``
    (float or None = ``eps**0.75 * max|gU|, |gVh|``).
    """
    global _defaults
    with _defaults_lock:
        old = _settings(_defaults)
        _defaults = _check_options(replace(_defaults, **_known(settings)))
    return old


@contextlib.contextmanager
def defaults(**settings: Any) -> Iterator[None]:
    """Context manager: package defaults for the code inside the block, in this
    thread (or asyncio task) only. Nests; the process-wide defaults
    (:func:`set_defaults`) are never changed, so concurrent blocks in other
    threads neither see these settings nor can leave them behind. Threads
    started inside the block start from the process-wide defaults."""
    merged = {**(_scoped.get() or {}), **_known(settings)}
    # validated as set_defaults validates (same messages), before entering
    checked = _check_options(replace(Options(), **merged))
    token = _scoped.set({name: getattr(checked, name) for name in merged})
    try:
        yield
    finally:
        _scoped.reset(token)


def _known(settings: dict[str, Any]) -> dict[str, Any]:
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise InputError(
            f"unknown setting(s) {sorted(unknown)}; the settings are {sorted(SETTINGS)}"
        )
    return settings


def _check_options(opts: Options, op: str = "set_defaults") -> Options:
    """``opts`` with its numbers validated and normalised (see
    :func:`check_keywords`) and a known gauge policy."""
    if opts.gauge not in GAUGE_POLICIES:
        raise InputError(
            f"{op}: gauge must be one of {GAUGE_POLICIES}, got {opts.gauge!r}"
        )
    numbers = check_keywords(
        op,
        degeneracy_atol=opts.degeneracy_atol,
        broadening=opts.broadening,
        gauge_atol=opts.gauge_atol,
    )
    return replace(opts, **numbers)


def options(
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    *,
    op: str = "options",
) -> Options:
    """Per-call settings, with ``None`` falling back to the package defaults in
    force in this thread (see :func:`defaults`)."""
    if (
        degeneracy_atol is None
        and broadening is None
        and gauge is None
        and gauge_atol is None
        and _scoped.get() is None
    ):
        return _default_options(_user_frame_site())
    d = _effective()
    return _check_options(
        Options(
            degeneracy_atol=d.degeneracy_atol
            if degeneracy_atol is None
            else degeneracy_atol,
            broadening=d.broadening if broadening is None else broadening,
            gauge=d.gauge if gauge is None else gauge,
            gauge_atol=d.gauge_atol if gauge_atol is None else gauge_atol,
            site=_user_frame_site(),
        ),
        op,
    )


# Options of the calls that set nothing (the process-wide defaults, validated
# when set), one per call site: building and validating an Options costs more
# than a small SVD's Python work. An entry is valid while _defaults is the
# object it was made from; it holds its site's globals, so their id in the key
# is not reused while the entry lives.
_DEFAULT_OPTIONS: dict[Any, tuple[Options, Options]] = {}


def _default_options(site: tuple[str, int, dict[str, Any]] | None) -> Options:
    """The process-wide defaults, with ``site``."""
    # per thread too: Options.state carries a second derivative's check from
    # one backward call to the next, which must not meet another thread's
    thread = threading.get_ident()
    key = (thread,) if site is None else (site[0], site[1], id(site[2]), thread)
    d = _defaults
    hit = _DEFAULT_OPTIONS.get(key)
    if hit is not None and hit[0] is d:
        return hit[1]
    if len(_DEFAULT_OPTIONS) >= 1024:
        _DEFAULT_OPTIONS.clear()
    opts = replace(d, site=site, state={})
    _DEFAULT_OPTIONS[key] = (d, opts)
    return opts


# ------------------------------------------------------------ autograd calls


# torch.compiler.is_compiling is in torch >= 2.3; before it, assume not compiling
_is_compiling: Callable[[], bool] = getattr(
    getattr(torch, "compiler", None), "is_compiling", lambda: False
)


def apply(function: type[torch.autograd.Function], *args: Any) -> Any:
    """``function.apply(*args)`` without its per-call cost in Python.

    For a Function with ``setup_context``, ``Function.apply`` binds the
    arguments to ``forward``'s signature with ``inspect`` on every call (about
    25 us, a few percent of a 64x64 SVD's forward and backward), for the sake
    of default arguments, which pyspectral's Functions do not have (``args``:
    all of them, positional).
    Outside torch.func transforms and torch.compile, and with no tensor left
    over from a finished transform, ``Function.apply`` then only calls the
    C++ ``apply``, which this calls directly; elsewhere it is
    ``function.apply`` itself.
    """
    if torch._C._are_functorch_transforms_active() or _is_compiling():
        return function.apply(*args)
    for a in args:
        if isinstance(a, torch.Tensor) and is_functorch_wrapped_tensor(a):
            return function.apply(*args)
    return super(torch.autograd.Function, function).apply(*args)  # type: ignore[misc]


def plain(*tensors: torch.Tensor | None) -> bool:
    """Whether a pullback runs plainly: no torch.func transform is active and
    autograd records nothing of it (grad mode off, as in a first-order
    backward, or no input requiring grad). Its results may then be computed in
    place and by the shortcuts that are exact but not differentiable."""
    if torch._C._are_functorch_transforms_active():
        return False
    return not torch.is_grad_enabled() or not any(
        t is not None and t.requires_grad for t in tensors
    )


# ---------------------------------------------------------------- tolerances


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of the real type underlying ``dtype``."""
    return torch.finfo(dtype).eps


_EPS34: dict[torch.dtype, float] = {}


def eps34(dtype: torch.dtype) -> float:
    """``eps(dtype) ** 0.75``, the package's relative resolution (cached)."""
    value = _EPS34.get(dtype)
    if value is None:
        value = _EPS34[dtype] = eps(dtype) ** 0.75
    return value


def degeneracy_atol(spectrum: torch.Tensor, atol: float | None) -> torch.Tensor:
    """Absolute degeneracy tolerance, shape ``(*, 1, 1)``.

    Default: ``max|spectrum| * eps**(3/4)`` per matrix, so that results do not
    change when the input is rescaled.
    """
    if atol is not None:
        return torch.full(
            (*spectrum.shape[:-1], 1, 1),
            atol,
            dtype=spectrum.dtype,
            device=spectrum.device,
        )
    if spectrum.shape[-1] == 0:
        # An empty spectrum (0 x n matrices) has no pair to compare; amax has
        # no identity element and would raise.
        return spectrum.detach().new_zeros((*spectrum.shape[:-1], 1, 1))
    scale = spectrum.detach().abs().amax(dim=-1, keepdim=True)
    return (scale * eps34(spectrum.dtype)).unsqueeze(-1)


# A spectrum of at most this many values is tested on the host: one copy
# there instead of five device operations (1-2 us each from Python); at 64
# values the two cost the same, above it the copy costs more.
_HOST_SPECTRUM = 64


def separated(x: torch.Tensor, atol: float | None, descending: bool) -> bool:
    """Whether the sorted spectrum ``x`` (``(*, k)``: singular values
    descending, eigenvalues ascending) has no degenerate pair: whether each
    adjacent gap in sort order (``x_i - x_{i+1}`` descending, ``x_{i+1} -
    x_i`` ascending) exceeds the tolerance, ``atol`` or, if None,
    :func:`degeneracy_atol`'s ``max|x| * eps**(3/4)`` per matrix. Then
    ``|x_i - x_j| > tol`` for every ``i != j``, so the only degenerate pairs
    are the diagonal ones. O(k) work and one host sync, where the degeneracy
    mask of the pairs is O(k**2). False for an unsorted spectrum and for NaN.

    A small spectrum is tested on the host in double precision, a larger one
    on its device in its dtype: they can differ only for a gap within rounding
    of the tolerance, which either answer treats correctly."""
    k = x.shape[-1]
    if k < 2:
        return True
    eps = eps34(x.dtype)
    if x.numel() <= _HOST_SPECTRUM:
        for r in x.detach().reshape(-1, k).tolist():
            if descending:
                r.reverse()  # ascending
            tol = eps * max(abs(r[0]), abs(r[-1])) if atol is None else atol
            # (a NaN gap fails the test, as it should)
            if not all(b - a > tol for a, b in zip(r, r[1:])):
                return False
        return True
    x = x.detach()
    if atol is None:
        # max|x| = max(|x_1|, |x_k|) if sorted (else a gap fails): from the
        # ends, since a reduction over a short last dimension is slow (a batch
        # of 4096 8x8: 27 us, where abs().amax() takes 64 and vector_norm 700)
        tol = torch.maximum(x[..., :1].abs(), x[..., -1:].abs()) * eps
    else:
        tol = atol
    gaps = x[..., :-1] - x[..., 1:] if descending else x[..., 1:] - x[..., :-1]
    return bool((gaps > tol).all())


def gauge_atol(*cotangent_blocks: torch.Tensor, atol: float | None) -> float:
    """Absolute gauge tolerance: default ``eps**(3/4) * max |gU|, |gVh|`` (the
    largest entry of the incoming cotangents of the singular/eigen vectors)."""
    if atol is not None:
        return atol
    scale = max(
        (float(_peek(b.detach()).abs().max()) for b in cotangent_blocks if b.numel()),
        default=0.0,
    )
    return eps34(cotangent_blocks[0].dtype) * scale


# ------------------------------------------------------------- gap inverses


def inv_safe(x: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Hard-cutoff inverse: ``1/x`` where ``|x| > tol``, else 0."""
    keep = x.abs() > tol
    if x.requires_grad or is_functorch_wrapped_tensor(x):
        # Differentiable use (double backward): keep the discarded quotient
        # and its derivative finite, or where() would backpropagate 0 * inf.
        x = torch.where(keep, x, 1.0)
    return torch.where(keep, x.reciprocal(), 0.0)


def inv_lorentz(x: torch.Tensor, width: float) -> torch.Tensor:
    """Lorentzian-broadened inverse ``x / (x**2 + width**2)`` (smooth, signed).

    Evaluated in units of ``m = max(|x|, width)``, the same value for every
    ``m > 0``: squaring ``x`` and ``width`` directly underflows to ``0 / 0``
    for widths below ``sqrt(tiny)`` (1e-154 in float64)."""
    m = torch.clamp(x.abs(), min=width)
    xm = x / m
    return xm / ((xm * xm + (width / m) ** 2) * m)


def gap_inverse(x: torch.Tensor, tol: torch.Tensor, opts: Options) -> torch.Tensor:
    """The inverse of a spectral gap chosen by ``opts.broadening``."""
    if opts.broadening is None:
        return inv_safe(x, tol)
    return inv_lorentz(x, opts.broadening)


def divided_difference(
    a: torch.Tensor,
    b: torch.Tensor,
    fa: torch.Tensor,
    fb: torch.Tensor,
    da: torch.Tensor,
    db: torch.Tensor,
) -> torch.Tensor:
    """Stable ``(fa - fb) / (a - b)``, tending to ``(da + db) / 2`` as ``a -> b``.

    The quotient carries the rounding error of ``fa - fb``, about
    ``eps (|fa| + |fb|) / |a - b|``, the derivative average a Taylor error
    ``O(f'''(a - b)**2)``; their difference shows which one is larger. The
    quotient is used where it differs from the average by more than twice its
    rounding error, the average elsewhere (the two then agree to that error).
    This assumes nothing about the scale on which ``f`` varies (``exp`` near 0
    varies on scale 1, not ``|a|``) and squares nothing (no underflow).

    An infinite derivative at an end (``sqrt`` at 0) never replaces a finite
    quotient: ``sqrt[0, x] = sqrt(x) / x`` is finite for ``x != 0``; only the
    limit ``a = b`` itself is infinite (see :func:`with_infinite_weights`).
    """
    return _divided_difference(a, b, fa, fb, da, db)[0]


def _divided_difference(
    a: torch.Tensor,
    b: torch.Tensor,
    fa: torch.Tensor,
    fb: torch.Tensor,
    da: torch.Tensor,
    db: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`divided_difference`, with where the quotient was taken and the
    quotient's rounding error estimate."""
    d = a - b
    average = (da + db) / 2
    safe_d = torch.where(d != 0, d, torch.ones_like(d))
    quotient = (fa - fb) / safe_d
    rounding = eps(a.dtype) * (fa.abs() + fb.abs()) / safe_d.abs()
    quotient_ok = (d != 0) & (
        ~torch.isfinite(average) | ((quotient - average).abs() > 2 * rounding)
    )
    return torch.where(quotient_ok, quotient, average), quotient_ok, rounding


# Values of f and f' computed by a formula come with a few ulps of error, not
# one (1 - tanh(x)**2 loses bits to cancellation): the rounding estimates of the
# second divided differences count that many, so that nodes a few ulps apart
# (an exact tie, rounded) are never divided by.
ULPS = 8


def divided_difference_with_error(
    a: torch.Tensor,
    b: torch.Tensor,
    fa: torch.Tensor,
    fb: torch.Tensor,
    da: torch.Tensor,
    db: torch.Tensor,
    ha: torch.Tensor,
    hb: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`divided_difference` ``f[a, b]`` and an estimate of its error, for
    the second divided differences built from it (``ha``, ``hb``: ``f''``).

    Where the quotient is taken its error is its rounding error (``ULPS``
    ulps of ``f``); where the derivative average is, its Taylor remainder
    ``f'''(xi) (a - b)**2 / 12``, estimated (doubled) by
    ``|f''(a) - f''(b)| |a - b| / 6``, plus the rounding of the average.
    Non-finite estimates (an infinite ``f''``) count as 0: the infinite
    weights are handled by :func:`with_infinite_weights`.
    """
    value, quotient_ok, rounding = _divided_difference(a, b, fa, fb, da, db)
    d = (a - b).abs()
    taylor = torch.where(d != 0, (ha - hb).abs() * d / 6, 0.0)
    taylor = taylor + ULPS * eps(a.dtype) * (da.abs() + db.abs()) / 2
    error = torch.where(quotient_ok, ULPS * rounding, taylor)
    return value, torch.where(torch.isfinite(error), error, 0.0)


def confluent_divided_difference(
    x: torch.Tensor,
    z: torch.Tensor,
    dx: torch.Tensor,
    hx: torch.Tensor,
    hz: torch.Tensor,
    fxz: torch.Tensor,
    fxz_error: torch.Tensor,
) -> torch.Tensor:
    """Stable second divided difference ``f[x, x, z] = (f'(x) - f[x, z]) / (x - z)``
    with two equal nodes, tending to ``f''(x) / 2`` as ``z -> x``.

    ``fxz`` is ``f[x, z]`` with its error estimate ``fxz_error``
    (:func:`divided_difference_with_error`). The criterion of
    :func:`divided_difference`: the quotient, whose rounding error is about
    ``(ulps (|f'(x)| + |f[x, z]|) + fxz_error) / |x - z|``, where it differs
    from the confluent value by more than twice that; elsewhere the mean of
    ``f''/2`` over the nodes ``(x, x, z)``, ``(2 f''(x) + f''(z)) / 6``, which
    is the limit up to ``O(f''''(x - z)**2)``. An infinite ``f''`` (``sqrt`` at
    0) makes the limit infinite but never a finite quotient.
    """
    d = x - z
    safe_d = torch.where(d != 0, d, torch.ones_like(d))
    quotient = (dx - fxz) / safe_d
    ulps = ULPS * eps(x.dtype)
    rounding = (ulps * (dx.abs() + fxz.abs()) + fxz_error) / safe_d.abs()
    confluent = (2 * hx + hz) / 6
    quotient_ok = (d != 0) & (
        ~torch.isfinite(confluent) | ((quotient - confluent).abs() > 2 * rounding)
    )
    return torch.where(quotient_ok, quotient, confluent)


def with_infinite_weights(
    linear: Callable[..., torch.Tensor],
    weights: tuple[torch.Tensor, ...],
    scale: torch.Tensor,
) -> torch.Tensor:
    """``linear(*weights)`` for a map linear in each weight tensor, without the
    NaN of ``0 * inf`` where some weights are infinite.

    A divided difference is infinite where ``f'`` is (``sqrt`` at an exact zero
    eigenvalue or singular value): the true gradient is then infinite in the
    entries that the infinite weights reach and finite elsewhere, but the
    matrix products of the pullback would mix ``inf`` with zeros into NaN
    everywhere. So the map is evaluated twice: with the infinite weights set to
    0 (the finite part) and with only their signs (the direction ``D`` of the
    infinite part). An entry is ``sign(D) * inf`` where ``|D|`` exceeds the
    rounding level ``eps**(3/4) * scale`` (``scale``: the largest entry of the
    incoming cotangent), else the finite part. Complex entries are treated by
    real and imaginary part. Without infinite weights: one evaluation.
    """
    if not any(bool(torch.isinf(_peek(w.detach())).any()) for w in weights):
        return linear(*weights)
    infinite = [torch.isinf(w.detach()) for w in weights]
    finite = linear(*(torch.where(i, 0.0, w) for i, w in zip(infinite, weights)))
    direction = linear(
        *(torch.where(i, w.detach().sign(), 0.0) for i, w in zip(infinite, weights))
    ).detach()
    tol = eps34(finite.dtype) * scale
    if finite.is_complex():
        return torch.complex(
            _infinite_where(direction.real, finite.real, tol),
            _infinite_where(direction.imag, finite.imag, tol),
        )
    return _infinite_where(direction, finite, tol)


def max_abs(G: torch.Tensor) -> torch.Tensor:
    """``max |G|`` per matrix, detached, shape ``(*, 1, 1)`` (0 if empty)."""
    if G.shape[-1] * G.shape[-2] == 0:
        return G.detach().abs().new_zeros((*G.shape[:-2], 1, 1))
    return G.detach().abs().amax(dim=(-2, -1), keepdim=True)


def _infinite_where(
    direction: torch.Tensor, finite: torch.Tensor, tol: torch.Tensor
) -> torch.Tensor:
    inf = torch.full_like(finite.detach(), math.inf).copysign(direction)
    return torch.where(direction.abs() > tol, inf, finite)


def add_diagonal(M: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``M + diag_embed(d)`` with one full-size temporary instead of two."""
    diagonal = M.diagonal(dim1=-2, dim2=-1) + d
    return torch.diagonal_scatter(M, diagonal, dim1=-2, dim2=-1)


# ------------------------------------------------------------------- gauge


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
    inside = _peek(violation.detach())
    if cluster is not None:
        inside = inside.masked_select(_peek(cluster))
    measured = float(inside.abs().max()) if inside.numel() else 0.0
    measured = max(measured, extra)
    if measured == 0:
        # Nothing to report whatever the tolerance (>= 0): skip the passes over
        # the cotangents that gauge_atol needs (real input, distinct spectrum).
        return
    tol = gauge_atol(*scale_blocks, atol=opts.gauge_atol)
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
        tol = gauge_atol(*scale_blocks, atol=opts.gauge_atol)
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
# of the user's).
_LIBRARY = (
    *(os.path.dirname(os.path.abspath(p)) + os.sep for p in (torch.__file__, __file__)),
    os.path.abspath(threading.__file__),
)
_INTERNAL: dict[str, bool] = {}  # co_filename -> library code


def _internal(filename: str) -> bool:
    """Whether code in ``filename`` is library code (see ``_LIBRARY``)."""
    known = _INTERNAL.get(filename)
    if known is None:
        known = _INTERNAL[filename] = os.path.abspath(filename).startswith(_LIBRARY)
    return known


def _user_frame(frame: Any) -> Any:
    """The innermost frame at or above ``frame`` outside library code (None if
    there is none: a thread that only runs library code)."""
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _user_frame_site() -> tuple[str, int, dict[str, Any]] | None:
    """``(filename, lineno, globals)`` of the user's line calling pyspectral."""
    frame = _user_frame(sys._getframe(1))
    return None if frame is None else _site(frame)


def _site(frame: Any) -> tuple[str, int, dict[str, Any]]:
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


def warn(message: str, category: type[Warning], site: Any = None) -> None:
    """``warnings.warn`` attributed to the user's line: the innermost frame
    outside torch and pyspectral.

    A fixed ``stacklevel`` cannot do it: a warning from a pullback is raised
    inside torch's autograd engine (``loss.backward()``, ``torch.autograd.grad``,
    ``torch.func``), at a depth that depends on the entry point and the torch
    version; the user's frame is still on the stack, below them. Where none is
    (a backward run by an autograd device thread, as for CUDA tensors), the
    warning names ``site``, the user's line of the forward call
    (``Options.site``), else the pyspectral line that raised it. Filters and
    the once-per-location registry work as for ``warnings.warn``.
    """
    caller = sys._getframe(1)
    frame = _user_frame(caller)
    filename, lineno, globals_ = (
        _site(frame) if frame is not None else site or _site(caller)
    )
    warnings.warn_explicit(
        message,
        category,
        filename,
        lineno,
        module=globals_.get("__name__", "<string>"),
        registry=globals_.setdefault("__warningregistry__", {}),
        module_globals=globals_,
    )


# -------------------------------------------------------------- validation


def _peek(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor under torch.func wrappers, to read values from (vmap
    forbids reading a batched tensor; the checks here look at every entry)."""
    while is_functorch_wrapped_tensor(t):
        t = get_unwrapped(t)
    return t


# Every numeric keyword of the public API: what it must be (said in the error
# message) and the test its value must pass once normalised (a Python int for
# the integer ones, a float for the others; NaN fails every test). The same
# rules, in the same words, are in julia/PySpectral/src/common/defaults.jl.
_INTEGER_KEYWORDS: dict[str, tuple[str, Callable[[int], bool]]] = {
    "oversample": ("an integer >= 0, or None (automatic)", lambda x: x >= 0),
    "n_iter": ("an integer >= 0, or None (automatic)", lambda x: x >= 0),
    "backward_maxiter": ("an integer >= 1", lambda x: x >= 1),
}
# None means "chosen from the data" (the top-k iteration's block and budget).
_OPTIONAL_INTEGERS = ("oversample", "n_iter")
_TOLERANCE = ("a finite number >= 0, or None", lambda x: 0 <= x < math.inf)
_REAL_KEYWORDS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "backward_rtol": (
        "a number with 0 < backward_rtol < 1, or None",
        lambda x: 0 < x < 1,
    ),
    "broadening": ("a finite number > 0, or None", lambda x: 0 < x < math.inf),
    "degeneracy_atol": _TOLERANCE,
    "gauge_atol": _TOLERANCE,
    "hermitian_tol": _TOLERANCE,
}


# The keywords for which None is valid (None: automatic or from the data)
_NONE_ALLOWED = frozenset(("k", *_OPTIONAL_INTEGERS, *_REAL_KEYWORDS))


def check_keywords(
    op: str, A: torch.Tensor | None = None, **keywords: Any
) -> dict[str, Any]:
    """Validate the numeric keywords of a public call; the one place where
    they are checked, before any backend is chosen. Returns them normalised.

    ``k`` (``None`` or an integer with ``1 <= k <= min(m, n)`` of ``A``),
    ``oversample``, ``n_iter`` (``None``: automatic), ``backward_maxiter``:
    integers given as a Python
    int, a numpy integer or a 0-d integer tensor (never a bool or a float),
    returned as int. ``backward_rtol``, ``broadening``, ``degeneracy_atol``,
    ``gauge_atol``, ``hermitian_tol``: ``None`` or a real number (0-d real
    tensors included), returned as float. Raises ``InputError`` naming the
    keyword, what it must be and what was passed.
    """
    checked: dict[str, Any] = {}
    for name, value in keywords.items():
        if value is None and name in _NONE_ALLOWED:
            checked[name] = None
        elif name == "k":
            checked[name] = _check_k(op, A, value)
        elif name in _OPTIONAL_INTEGERS and value is None:
            checked[name] = None
        elif name in _INTEGER_KEYWORDS:
            need, ok = _INTEGER_KEYWORDS[name]
            x = _as_integer(value)
            if x is None or not ok(x):
                raise InputError(f"{op}: {name} must be {need}, got {value!r}")
            checked[name] = x
        elif name in _REAL_KEYWORDS:
            need, ok = _REAL_KEYWORDS[name]
            y = None if value is None else _as_real(value)
            if value is not None and (y is None or not ok(y)):
                raise InputError(f"{op}: {name} must be {need}, got {value!r}")
            checked[name] = y
        else:
            raise TypeError(f"check_keywords: no rule for the keyword {name!r}")
    return checked


def _check_k(op: str, A: torch.Tensor | None, k: Any) -> int | None:
    if k is None:
        return None
    if A is None:
        raise TypeError("check_keywords: k is checked against the shape of A")
    kmax = min(A.shape[-2:])
    x = _as_integer(k)
    if x is None or not 1 <= x <= kmax:
        raise InputError(
            f"{op}: k must be an integer with 1 <= k <= min(m, n) = {kmax} for "
            f"A of shape {tuple(A.shape)}, got {k!r}"
        )
    return x


def _as_integer(x: Any) -> int | None:
    """``x`` as an int if it is an integer (Python, numpy or a 0-d integer
    tensor), else None: bools and floats (even ``2.0``) are not integers."""
    if type(x) is int:  # the common case, before the slower abstract checks
        return x
    if isinstance(x, torch.Tensor):
        integer = x.dim() == 0 and not (
            x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool
        )
        return int(x) if integer else None
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    return None


def _as_real(x: Any) -> float | None:
    """``x`` as a float if it is a real number (Python, numpy or a 0-d real
    tensor), else None (bools, complex numbers, strings)."""
    if type(x) is float or type(x) is int:  # the common cases (not bool)
        return float(x)
    if isinstance(x, torch.Tensor):
        real = x.dim() == 0 and not (x.dtype.is_complex or x.dtype == torch.bool)
        return float(x) if real else None
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return float(x)
    return None


def check_matrix(
    op: str, A: Any, *, square: bool = False, uplo: str | None = None
) -> None:
    """Validate a ``(*, m, n)`` floating or complex tensor with finite entries.

    The errors subclass what ``torch.linalg`` raises for the same input (see
    ``exceptions``). ``uplo``: only that triangle is read (``eigh``), so only
    it must be finite, and of its diagonal only the real part (LAPACK ignores
    the imaginary part), as ``torch.linalg.eigh`` requires.
    """
    if not isinstance(A, torch.Tensor):
        raise InputTypeError(
            f"{op}: A must be a torch.Tensor, got {type(A).__name__}; "
            "convert with torch.as_tensor(A, dtype=torch.float64)"
        )
    if not (A.dtype.is_floating_point or A.dtype.is_complex) or A.dtype in (
        torch.float16,
        torch.bfloat16,
    ):
        raise DtypeError(
            f"{op}: A must have dtype float32, float64, complex64 or complex128, "
            f"got {A.dtype}; convert with A.to(torch.float64)"
        )
    if A.dim() < 2:
        raise ShapeError(
            f"{op}: A must have shape (*, m, n) with at least 2 dimensions, got "
            f"shape {tuple(A.shape)}; use A.reshape(1, -1) or A.unsqueeze(-1)"
        )
    if square and A.shape[-1] != A.shape[-2]:
        raise ShapeError(
            f"{op}: A must be square, shape (*, n, n), got shape {tuple(A.shape)}"
        )
    # Any NaN or Inf entry makes the sum non-finite, so a finite sum (one cheap
    # reduction) proves every entry finite; only otherwise look entry by entry
    # at what is read (a sum can also overflow). The test is on the host, as a
    # Python number: each torch call here costs a few us next to a small SVD.
    P = _peek(A).detach()  # (a sum recorded by autograd costs a node)
    if P.numel() and not (_finite_number(P.sum().item()) or _read_finite(P, uplo)):
        where = "" if uplo is None else f" in the UPLO='{uplo}' triangle it reads"
        raise NonFiniteError(
            f"{op}: A contains NaN or Inf entries{where} (shape {tuple(A.shape)}); "
            "the decomposition of such a matrix is undefined"
        )


def _finite_number(x: complex) -> bool:
    """Whether a Python float or complex is finite."""
    return cmath.isfinite(x) if isinstance(x, complex) else math.isfinite(x)


def _read_finite(P: torch.Tensor, uplo: str | None) -> bool:
    """Whether the entries of ``P`` that are read are finite: all of them, or
    (``uplo``) the strict ``uplo`` triangle and the real part of the diagonal."""
    if uplo is None:
        return bool(torch.isfinite(P).all())
    strict = torch.tril(P, -1) if uplo == "L" else torch.triu(P, 1)
    diagonal = P.diagonal(dim1=-2, dim2=-1).real
    return bool(torch.isfinite(strict).all()) and bool(torch.isfinite(diagonal).all())


def check_out(
    op: str, out: Any, backend: str, A: torch.Tensor, k: int | None = None
) -> bool:
    """Whether to run ``op`` with ``out=`` (not None), after checking that it can.

    With ``out=`` there is no autograd (torch raises if ``A`` requires grad), so
    the result is ``torch.linalg``'s forward, which is the native backend's:
    the call is handed to ``torch.linalg`` itself, whose ``out=`` semantics
    (resizing with a warning, dtype and device checks) are then torch's own.
    Not with ``k`` (torch has no top-k ``op``) or ``backend="julia"``, which
    raise ``InputError``; an unknown backend name raises ``BackendError``.
    """
    if out is None:
        return False
    if k is not None:
        raise InputError(
            f"{op}: out= is not supported with k (top-k); drop out= and use the "
            "returned tensors"
        )
    if backend == "julia":
        raise InputError(
            f"{op}: out= runs torch.linalg's forward (no autograd with out=), i.e. "
            "the native backend; drop out= or pass backend='auto'"
        )
    if backend not in ("auto", "torch"):
        backends = ("auto", "torch", "julia")  # as _backend.BACKENDS
        raise BackendError(f"{op}: backend must be one of {backends}, got {backend!r}")
    return True


def check_uplo(op: str, UPLO: Any) -> str:
    """``UPLO`` normalised to ``"L"`` or ``"U"``; like ``torch.linalg.eigh``,
    either case is accepted, another string raises ``UPLOError`` (a
    ``RuntimeError``, as torch's) and a non-string ``InputTypeError``."""
    if not isinstance(UPLO, str):
        raise InputTypeError(
            f"{op}: UPLO must be a str, 'L' or 'U' (either case), got "
            f"{type(UPLO).__name__} {UPLO!r}"
        )
    if UPLO.upper() not in ("L", "U"):
        raise UPLOError(f"{op}: UPLO must be 'L' or 'U' (either case), got {UPLO!r}")
    return UPLO.upper()


def check_hermitian(op: str, A: torch.Tensor, tol: float | None) -> None:
    """Raise if ``A`` is not Hermitian to ``tol`` (default ``eps**0.75 max|A|``).

    This reads both triangles, so both must be finite (``NonFiniteError``): a
    NaN would otherwise compare as "Hermitian"."""
    P = _peek(A)
    P = P.detach()
    if P.numel() and not _read_finite(P, None):
        raise NonFiniteError(
            f"{op}: A contains NaN or Inf entries (shape {tuple(A.shape)}); "
            "checking that it is Hermitian reads both triangles"
        )
    err = float((P - P.mH).abs().max()) if P.numel() else 0.0
    if tol is None:
        tol = eps(A.dtype) ** 0.75 * (float(P.abs().max()) if P.numel() else 0.0)
    if err > tol:
        raise InputError(
            f"{op}: A is not Hermitian: max|A - A^H| = {err:.3g} > hermitian_tol "
            f"{tol:.3g}. Symmetrise it, e.g. (A + A.mH) / 2, or pass "
            "check_hermitian=False to read only the UPLO triangle"
        )


# ------------------------------------------------------- derivative order


class _NoThirdDerivative(torch.autograd.Function):
    """Identity on a second-order gradient ``g`` (made to depend on ``A``);
    differentiating it raises."""

    generate_vmap_rule = True

    @staticmethod
    def forward(g: torch.Tensor, A: torch.Tensor, op: str) -> torch.Tensor:
        return g.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.op = inputs[2]

    @staticmethod
    def backward(ctx: Any, *_: torch.Tensor) -> tuple:
        raise DerivativeError(_third(ctx.op))

    @staticmethod
    def jvp(ctx: Any, *_: Any) -> torch.Tensor:
        raise DerivativeError(_third(ctx.op))


def _third(op: str) -> str:
    return (
        f"{op}: third and higher derivatives are not implemented (first and "
        "second derivatives are exact); differentiate at most twice"
    )


def check_not_nested_forward_mode(op: str) -> None:
    """Raise ``DerivativeError`` inside a forward-mode transform nested in
    another (``jacfwd(jacfwd(...))``, ``jvp`` of ``jvp``): torch hands a
    custom Function's forward rule its saved outputs without the outer
    level's tangent, so the tangent of the tangent would be silently wrong."""
    try:
        from torch._C._functorch import TransformType
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
    except ImportError:  # a torch without functorch's interpreter stack
        return
    stack = retrieve_all_functorch_interpreters()
    if sum(i.key() == TransformType.Jvp for i in stack) >= 2:
        raise DerivativeError(
            f"{op}: forward mode over forward mode (jacfwd of jacfwd, jvp of "
            "jvp) is not supported through the factors; use torch.func.hessian "
            "(forward over reverse), jacrev(jacfwd(...)) or double backward, or "
            "svd_function / matrix_function, which support every composition"
        )


def no_third_derivative(
    op: str, A: torch.Tensor, *grads: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    """``grads`` as they are, except that under ``create_graph`` (grad mode on
    in a backward) differentiating them (w.r.t. ``A``, or anything) raises
    ``DerivativeError``: they are second derivatives computed by a formula
    whose own derivative would miss terms."""
    if not torch.is_grad_enabled():
        return grads
    return tuple(
        None if g is None else _NoThirdDerivative.apply(g, A, op) for g in grads
    )


@dataclass(frozen=True)
class SpectralMaps:
    """The first-order maps of a spectral function ``Y(A)`` at ``A``, given
    the tensors ``T`` of its decomposition: ``pullback(T, gY)`` (``gA``) and
    ``pushforward(T, dA)`` (``dY``), the transpose of each other, and their
    derivatives w.r.t. ``A`` along ``D`` (second-order formulas, exact at
    every spectrum): ``second(T, gY, D)`` of the pullback, and
    ``pushforward_second(T, dA, D)`` of the pushforward. ``name``: the
    operation, for the third-derivative error."""

    name: str
    pullback: Callable[..., torch.Tensor]
    pushforward: Callable[..., torch.Tensor]
    second: Callable[..., torch.Tensor]
    pushforward_second: Callable[..., torch.Tensor]


class LinearInA(torch.autograd.Function):
    """``maps.pullback(T, X)`` (``is_pullback``) or ``maps.pushforward(T, X)``
    as an operation of ``(A, X)``, ``T`` the decomposition of ``A`` (constants:
    everything ``A`` does enters through the second-order maps). Linear in
    ``X``, so its derivative w.r.t. ``X`` is the other first-order map. W.r.t.
    ``A``, along ``D``, it is ``maps.second(T, X, D)`` or
    ``maps.pushforward_second(T, X, D)``; the gradient is ``second(T, X, R)``
    for the pullback and, for the pushforward, whose ``<R, dY>`` is
    ``<pullback(T, R), X>``, ``second(T, R, X)``. The pullback of a spectral
    function under ``create_graph``, and its pushforward under forward mode,
    are these operations, so that every composition of derivatives is exact
    to second order; third derivatives raise ``DerivativeError``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        A: torch.Tensor,
        X: torch.Tensor,
        maps: SpectralMaps,
        is_pullback: bool,
        *T: torch.Tensor,
    ) -> torch.Tensor:
        return (maps.pullback if is_pullback else maps.pushforward)(T, X)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        # A (an input: no reference cycle) only for no_third_derivative; among
        # the saved tensors it breaks the generated vmap rule of jacrev(jacrev).
        ctx.A, X, ctx.maps, ctx.is_pullback, *T = inputs
        ctx.save_for_backward(X, *T)
        ctx.save_for_forward(X, *T)

    @staticmethod
    def backward(ctx: Any, R: torch.Tensor) -> tuple:
        X, *T = ctx.saved_tensors
        maps, is_pullback = ctx.maps, ctx.is_pullback
        gA = gX = None
        if ctx.needs_input_grad[0]:
            gA = maps.second(T, X, R) if is_pullback else maps.second(T, R, X)
        if ctx.needs_input_grad[1]:
            gX = (maps.pushforward if is_pullback else maps.pullback)(T, R)
        gA, gX = no_third_derivative(maps.name, ctx.A, gA, gX)
        return (gA, gX, None, None, *(None for _ in T))

    @staticmethod
    def jvp(
        ctx: Any, tA: torch.Tensor | None, tX: torch.Tensor | None, *_: Any
    ) -> torch.Tensor:
        X, *T = ctx.saved_tensors
        maps, is_pullback = ctx.maps, ctx.is_pullback
        linear = maps.pullback if is_pullback else maps.pushforward
        out = linear(T, torch.zeros_like(X) if tX is None else tX)
        if tA is not None:
            second = maps.second if is_pullback else maps.pushforward_second
            out = out + second(T, X, tA)
        return out


# ------------------------------------------------ second order of svd / eigh
#
# At a degenerate cluster the svd / eigh pullbacks drop the 0/0 terms of the
# cluster (first order: exact for the losses that the gauge policy accepts).
# Their derivative, a second derivative of the loss, drops the next 0/0 terms:
# the rotation inside the cluster, which along A + t D is the finite rotation
# that diagonalises D in the cluster (degenerate perturbation theory), and the
# divided difference of the S-cotangent over the cluster. Neither is in the
# cotangents. The second derivative is still exact where both vanish: where the
# first-order middle matrix M (gA = U M Vh) commutes with every rotation inside
# every cluster (M scalar on the cluster and decoupled from the rest), and the
# change of the S-cotangent is constant on every cluster (sum(S), (sum S)**2).
# A zero singular value with a complement (rectangular or complex input, or
# two zeros) is a cluster with -0 and the complement, on which the odd
# extension makes that constant 0. The guard measures both, when a second
# derivative is taken: forward over reverse (its jvp sees the tangent of the
# S-cotangent) and reverse over reverse (its backward runs first, and leaves
# the S-cotangent check to the pullback's next call, the second-order one).


class SecondOrderCheck:
    """What a second derivative through a pullback at a degenerate spectrum
    must measure: ``coupling`` (``max |M|`` off the rotation-invariant
    pattern, with its tolerance ``coupling_tol``) and the clusters (``pairs``,
    ``zeros``) on which the change of the S-cotangent must be constant (0)."""

    def __init__(self, op: str, pairs, zeros, coupling, coupling_tol, opts):
        self.op, self.pairs, self.zeros, self.opts = op, pairs, zeros, opts
        self.coupling, self.coupling_tol = coupling, coupling_tol

    def reverse(self) -> None:
        """Reverse over reverse: the coupling here; the S-cotangent at the
        pullback's second-order call (:func:`check_second_order_cotangent`)."""
        if not self._coupling():
            self.opts.state["second_order"] = self

    def forward(self, dgS: torch.Tensor | None) -> None:
        """Forward over reverse: the coupling and the tangent of the
        S-cotangent."""
        if not self._coupling() and dgS is not None:
            self.spectral(dgS, (dgS,))

    def _coupling(self) -> bool:
        if self.coupling > self.coupling_tol:
            vectors = "singular vectors" if self.op == "svd" else "eigenvectors"
            apply_gauge_policy(
                f"{self.op}: second derivative (double backward, hessian) at a "
                f"degenerate spectrum: the gradient depends on the {vectors} "
                f"inside a degenerate cluster (coupling measured "
                f"{self.coupling:.3g} > {self.coupling_tol:.3g}), and the exact "
                "second derivative needs their rotation inside it, which is not "
                f"in the cotangents: it is not exact. {_remedy(self.op)}",
                self.opts,
            )
            return True
        return False

    def spectral(self, g: torch.Tensor, scale: tuple[torch.Tensor, ...]) -> None:
        """Apply the gauge policy if ``g`` (the change of the S-cotangent, or
        the second-order S-cotangent) is not constant on each cluster (0 on
        the zero clusters)."""
        with torch.no_grad():
            g = _peek(g)
            pairs, zeros = _aligned(self.pairs, self.zeros, g.shape[:-1])
            spread = (g.unsqueeze(-1) - g.unsqueeze(-2)).abs().masked_select(pairs)
            at_zeros = g.abs().masked_select(zeros)
            measured = max(
                (float(t.max()) for t in (spread, at_zeros) if t.numel()), default=0.0
            )
        if measured == 0:
            return
        tol = gauge_atol(
            *(b for b in scale if b is not None), atol=self.opts.gauge_atol
        )
        if measured > tol:
            values = "singular values" if self.op == "svd" else "eigenvalues"
            apply_gauge_policy(
                f"{self.op}: second derivative (double backward, hessian) at a "
                f"degenerate spectrum: the derivative of the gradient w.r.t. the "
                f"{values} differs inside a degenerate cluster (measured "
                f"{measured:.3g} > {tol:.3g}); the exact second derivative needs "
                "its divided difference over the cluster, which is not in the "
                f"cotangents: it is not exact. {_remedy(self.op)}",
                self.opts,
            )


def _aligned(
    pairs: torch.Tensor, zeros: torch.Tensor, batch: torch.Size
) -> tuple[torch.Tensor, torch.Tensor]:
    """The cluster masks broadcastable against a tensor of batch shape
    ``batch``: as they are where their batch shape ends it (extra leading
    dimensions: a transform's, such as jacrev's basis), else the pairs of any
    batch element."""
    b = pairs.shape[:-2]
    if len(b) <= len(batch) and batch[len(batch) - len(b) :] == b:
        return pairs, zeros
    k = pairs.shape[-1]
    return pairs.reshape(-1, k, k).any(0), zeros.reshape(-1, k).any(0)


def _remedy(op: str) -> str:
    if op == "svd":
        return (
            "svd_function has exact second derivatives at every spectrum: e.g. "
            "sum(S**3) = <A, svd_function(A, ('pow', 2))>."
        )
    return (
        "matrix_function has exact second derivatives at every spectrum: e.g. "
        "sum(w**3) = trace(matrix_function(A, ('pow', 3)))."
    )


class _SecondOrderGuard(torch.autograd.Function):
    """Identity on a first-order gradient built differentiably; its backward
    and jvp run when a second derivative is taken, and measure it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(gA: torch.Tensor, gS: Any, check: SecondOrderCheck) -> torch.Tensor:
        return gA.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.check = inputs[2]

    @staticmethod
    def backward(ctx: Any, R: torch.Tensor) -> tuple:
        ctx.check.reverse()
        return R, None, None

    @staticmethod
    def jvp(ctx: Any, dgA: torch.Tensor, dgS: Any, _: Any) -> torch.Tensor:
        ctx.check.forward(dgS)
        return dgA


def spectral_clusters(
    spectrum: torch.Tensor, opts: Options, svd_zeros: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The degenerate pairs ``i != j`` of ``spectrum`` (within
    ``degeneracy_atol``) and, for singular values (``svd_zeros`` not None),
    the zero clusters: values within ``degeneracy_atol`` of 0 that have a
    complement or a phase of their own (``svd_zeros``) or another zero (two
    zero singular values rotate independently). None if there are none, or
    under Lorentzian broadening (which drops nothing). Plain tensors."""
    if opts.broadening is not None:
        return None
    s = _peek(spectrum.detach())
    k = s.shape[-1]
    if k == 0 or s.numel() == 0:
        return None
    tol = _peek(degeneracy_atol(s, opts.degeneracy_atol))
    pairs = (s.unsqueeze(-1) - s.unsqueeze(-2)).abs() <= tol
    pairs &= ~torch.eye(k, dtype=torch.bool, device=s.device)
    zeros = torch.zeros_like(s, dtype=torch.bool)
    if svd_zeros is not None:
        small = s <= tol[..., 0]
        zeros = small & (svd_zeros | (small.sum(-1, keepdim=True) > 1))
    if not (bool(pairs.any()) or bool(zeros.any())):
        return None
    # Plain tensors, for a second derivative taken at another level of torch.func
    return _peek(pairs), _peek(zeros)


def second_order_guard(
    op: str,
    gA: torch.Tensor,
    gS: torch.Tensor | None,
    M: torch.Tensor,
    clusters: tuple[torch.Tensor, torch.Tensor],
    opts: Options,
) -> torch.Tensor:
    """``gA`` through :class:`_SecondOrderGuard` (see the comment above), where
    a gradient is built differentiably at a degenerate spectrum; ``M`` is the
    first-order middle matrix (``gA = U M Vh``)."""
    P = _peek(M.detach())
    pairs, zeros = (_peek(t) for t in _aligned(*clusters, P.shape[:-2]))
    # Off the rotation-invariant pattern: the entries that couple a cluster
    # (or a zero) to the rest or lie off the diagonal inside it, the spread of
    # the diagonal on it, and the rows and columns of the zeros.
    member = pairs.any(-1) | zeros
    couple = (member.unsqueeze(-1) | member.unsqueeze(-2)) & ~torch.eye(
        P.shape[-1], dtype=torch.bool, device=P.device
    )
    d = P.diagonal(dim1=-2, dim2=-1)
    parts = [
        P.abs().masked_select(couple),
        (d.unsqueeze(-1) - d.unsqueeze(-2)).abs().masked_select(pairs),
        d.abs().masked_select(zeros),
    ]
    coupling = max((float(p.max()) for p in parts if p.numel()), default=0.0)
    tol = opts.gauge_atol
    if tol is None:
        tol = eps(P.dtype) ** 0.75 * (float(P.abs().max()) if P.numel() else 0.0)
    check = SecondOrderCheck(op, pairs, zeros, coupling, tol, opts)
    return _SecondOrderGuard.apply(gA, gS, check)


def check_second_order_cotangent(
    gS: torch.Tensor | None, scale: tuple[torch.Tensor | None, ...], opts: Options
) -> None:
    """In the pullback's call after :class:`_SecondOrderGuard`'s backward (the
    second-order one): the S-cotangent must be constant on the clusters."""
    check = opts.state.pop("second_order", None)
    if check is not None and gS is not None:
        check.spectral(gS, (gS, *scale))
