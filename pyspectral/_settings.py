"""Settings: the per-call ``Options`` and the package defaults behind them
(``set_defaults``, ``get_defaults``, the ``defaults(...)`` context manager).

An ``Options`` holds a call's numerical settings and the user's line that made
the call; it is immutable and may be shared by calls (the defaults of a call
site are cached). What one call must remember between its backward passes is
not in it: see ``CallState``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ._validation import check_keywords
from ._warnings import user_frame_site
from .exceptions import InputError

GAUGE_POLICIES = ("warn", "raise", "ignore")
# The convention of eigh's, eigvalsh's and matrix_function's derivatives
# w.r.t. A: torch's Hermitian gradient, or the one w.r.t. the triangle read.
GRADIENTS = ("hermitian", "triangle")


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
    gradient: str = "hermitian"
    # Not a setting: where the user's code made the call (see :func:`warn`),
    # for a warning raised by a backward that runs where the user's frames are
    # not on the stack (an autograd device thread). No part of equality.
    site: Any = field(default=None, compare=False, repr=False)
    # Not a setting: what this call must remember between its backward passes
    # (see CallState). Every call has its own; no part of equality.
    state: CallState = field(
        default_factory=lambda: CallState(), compare=False, repr=False
    )

    def for_call(self) -> Options:
        """These settings with a fresh :class:`CallState`, for one call. Cheap
        (no validation, no ``dataclasses.replace``): the settings are shared,
        the state is not."""
        new = object.__new__(Options)
        new.__dict__.update(self.__dict__)
        new.__dict__["state"] = CallState()
        return new


class CallState:
    """What one call must remember from one backward pass to the next: the
    check a second derivative through ``svd`` / ``eigh`` leaves for the
    pullback's second-order call (see ``_second_order``).

    It belongs to one public call, hence to one autograd node (and to that
    node's copies at the levels of a ``torch.func`` transform, which share
    the call's ``Options``): two calls from one line, or from two threads,
    never see each other's state."""

    __slots__ = ("driver", "second_order", "split")

    def __init__(self) -> None:
        self.second_order: Any = None
        # torch.linalg.svd's driver= (cuSOLVER's algorithm, CUDA only), which
        # the call's dense forward runs
        self.driver: str | None = None
        # The call returns the split (absorb=): its own forward rule is exact
        # at a cluster the tangent splits, so svd's pushforward does not warn.
        self.split = False


# The user settings among Options' fields (get_defaults, set_defaults, defaults)
SETTINGS = ("degeneracy_atol", "broadening", "gauge", "gauge_atol", "gradient")


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
    blocks of this thread.

    Returns:
        A new dict (changing it changes nothing) with the keys
        ``degeneracy_atol``, ``broadening``, ``gauge``, ``gauge_atol`` and
        ``gradient`` (meanings in :func:`set_defaults`; ``None``: computed
        from the data of each call). It raises nothing.

    Example::

        >>> sorted(get_defaults())
        ['broadening', 'degeneracy_atol', 'gauge', 'gauge_atol', 'gradient']
        >>> get_defaults()["gauge"] in ("warn", "raise", "ignore")
        True
    """
    return _settings(_effective())


def set_defaults(**settings: Any) -> dict[str, Any]:
    """Set the process-wide package defaults; returns the previous process-wide
    ones (to restore them later). Inside a ``defaults(...)`` block its scoped
    overrides still win for the settings it names.

    Keys: ``degeneracy_atol`` (float or None = ``max(S) * eps**0.75``),
    ``broadening`` (Lorentzian width, float or None = hard cutoff),
    ``gauge`` (``"warn"``, ``"raise"`` or ``"ignore"``), ``gauge_atol``
    (float or None = ``eps**0.75 * max|gU|, |gVh|``) and ``gradient``
    (``"hermitian"``, torch's convention, or ``"triangle"``: the derivatives
    of ``eigh``, ``eigvalsh`` and ``matrix_function`` w.r.t. ``A``, see
    :func:`pyspectral.eigh`). A call's own keyword
    wins over the default; ``hermitian_tol`` and the truncation tolerances
    are per call only. Numbers are validated as the keywords of a call
    (tolerances finite and ``>= 0``, ``broadening`` finite and ``> 0``);
    nothing is changed when one is invalid.

    Returns:
        The previous process-wide settings, a dict with the five keys.

    Raises:
        InputError: an unknown key, an unknown ``gauge`` policy or
            ``gradient`` convention, or an invalid number.

    Example::

        >>> previous = set_defaults(gauge="raise")
        >>> get_defaults()["gauge"]
        'raise'
        >>> _ = set_defaults(**previous)  # restore
        >>> get_defaults() == previous
        True
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
    started inside the block start from the process-wide defaults.

    Takes the keys of :func:`set_defaults`, validated as there before the
    block is entered.

    Raises:
        InputError: an unknown key, an unknown ``gauge`` policy, or an
            invalid number (raised by the ``with`` statement).

    Example::

        >>> before = get_defaults()
        >>> with defaults(gauge="ignore", degeneracy_atol=1e-10):
        ...     print(get_defaults()["gauge"], get_defaults()["degeneracy_atol"])
        ignore 1e-10
        >>> get_defaults() == before
        True
    """
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
    if opts.gradient not in GRADIENTS:
        raise InputError(
            f"{op}: gradient must be 'hermitian' (torch's convention: the Hermitian "
            "gradient) or 'triangle' (w.r.t. the entries read), got "
            f"{opts.gradient!r}"
        )
    numbers = check_keywords(
        op,
        degeneracy_atol=opts.degeneracy_atol,
        broadening=opts.broadening,
        gauge_atol=opts.gauge_atol,
    )
    return replace(opts, **numbers)


def gradient_convention(gradient: Any, op: str) -> str:
    """A call's ``gradient`` keyword, ``None`` falling back to the default in
    force here."""
    if gradient is None:
        return _effective().gradient
    if not (isinstance(gradient, str) and gradient in GRADIENTS):
        raise InputError(
            f"{op}: gradient must be 'hermitian' (torch's convention: the Hermitian "
            f"gradient) or 'triangle' (w.r.t. the entries read), got {gradient!r}"
        )
    return gradient


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
        return _default_options(user_frame_site()).for_call()
    d = _effective()
    return _check_options(
        Options(
            degeneracy_atol=d.degeneracy_atol
            if degeneracy_atol is None
            else degeneracy_atol,
            broadening=d.broadening if broadening is None else broadening,
            gauge=d.gauge if gauge is None else gauge,
            gauge_atol=d.gauge_atol if gauge_atol is None else gauge_atol,
            gradient=d.gradient,
            site=user_frame_site(),
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
    """The process-wide defaults, with ``site`` (shared by the calls of that
    site: :func:`options` gives each call its own copy, ``for_call``)."""
    key = None if site is None else (site[0], site[1], id(site[2]))
    d = _defaults
    hit = _DEFAULT_OPTIONS.get(key)
    if hit is not None and hit[0] is d:
        return hit[1]
    if len(_DEFAULT_OPTIONS) >= 1024:
        _DEFAULT_OPTIONS.clear()
    opts = replace(d, site=site)
    _DEFAULT_OPTIONS[key] = (d, opts)
    return opts
