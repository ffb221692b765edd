"""Shared helpers: package defaults, tolerance formulas, gap inverses, divided
differences, the gauge check and input validation.

The tolerance formulas here are the ones documented in the README and mirrored
by ``julia/PySpectral/src/common``; change them in both places or in neither.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch._C._functorch import get_unwrapped, is_functorch_wrapped_tensor

from .exceptions import (
    GaugeError,
    GaugeWarning,
    InputError,
    InputTypeError,
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


_defaults = Options()
_defaults_lock = threading.Lock()


def get_defaults() -> dict[str, Any]:
    """The package defaults used when a call leaves a setting as ``None``."""
    return dict(vars(_defaults))


def set_defaults(**settings: Any) -> dict[str, Any]:
    """Set package defaults; returns the previous ones (to restore them later).

    Keys: ``degeneracy_atol`` (float or None = ``max(S) * eps**0.75``),
    ``broadening`` (Lorentzian width, float or None = hard cutoff),
    ``gauge`` (``"warn"``, ``"raise"`` or ``"ignore"``) and ``gauge_atol``
    (float or None = ``eps**0.75 * max|gU|, |gVh|``).
    """
    global _defaults
    with _defaults_lock:
        old = get_defaults()
        _defaults = _check_options(replace(_defaults, **_known(settings)))
    return old


@contextlib.contextmanager
def defaults(**settings: Any) -> Iterator[None]:
    """Context manager that sets package defaults and restores them on exit."""
    old = set_defaults(**settings)
    try:
        yield
    finally:
        set_defaults(**old)


def _known(settings: dict[str, Any]) -> dict[str, Any]:
    unknown = set(settings) - set(vars(_defaults))
    if unknown:
        raise InputError(
            f"unknown setting(s) {sorted(unknown)}; the settings are "
            f"{sorted(vars(_defaults))}"
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
    """Per-call settings, with ``None`` falling back to the package defaults."""
    d = _defaults
    return _check_options(
        Options(
            degeneracy_atol=d.degeneracy_atol
            if degeneracy_atol is None
            else degeneracy_atol,
            broadening=d.broadening if broadening is None else broadening,
            gauge=d.gauge if gauge is None else gauge,
            gauge_atol=d.gauge_atol if gauge_atol is None else gauge_atol,
        ),
        op,
    )


# ---------------------------------------------------------------- tolerances


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of the real type underlying ``dtype``."""
    return torch.finfo(dtype).eps


def degeneracy_atol(spectrum: torch.Tensor, atol: float | None) -> torch.Tensor:
    """Absolute degeneracy tolerance, shape ``(*, 1, 1)``.

    Default: ``max|spectrum| * eps**(3/4)`` per matrix, so that results do not
    change when the input is rescaled.
    """
    if atol is not None:
        return torch.full_like(spectrum[..., :1, None], atol)
    scale = spectrum.detach().abs().amax(dim=-1, keepdim=True)
    return (scale * eps(spectrum.dtype) ** 0.75).unsqueeze(-1)


def gauge_atol(*cotangent_blocks: torch.Tensor, atol: float | None) -> float:
    """Absolute gauge tolerance: default ``eps**(3/4) * max |gU|, |gVh|`` (the
    largest entry of the incoming cotangents of the singular/eigen vectors)."""
    if atol is not None:
        return atol
    scale = max(float(_peek(b.detach()).abs().max()) for b in cotangent_blocks)
    return eps(cotangent_blocks[0].dtype) ** 0.75 * scale


# ------------------------------------------------------------- gap inverses


def inv_safe(x: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Hard-cutoff inverse: ``1/x`` where ``|x| > tol``, else 0."""
    keep = x.abs() > tol
    if x.requires_grad or is_functorch_wrapped_tensor(x):
        # Differentiable use (double backward): keep the discarded quotient
        # and its derivative finite, or where() would backpropagate 0 * inf.
        x = torch.where(keep, x, 1.0)
    return torch.where(keep, 1 / x, 0.0)


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
    """
    d = a - b
    average = (da + db) / 2
    safe_d = torch.where(d != 0, d, torch.ones_like(d))
    quotient = (fa - fb) / safe_d
    rounding = eps(a.dtype) * (fa.abs() + fb.abs()) / safe_d.abs()
    quotient_ok = (d != 0) & ((quotient - average).abs() > 2 * rounding)
    return torch.where(quotient_ok, quotient, average)


def add_diagonal(M: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``M + diag_embed(d)`` with one full-size temporary instead of two."""
    diagonal = M.diagonal(dim1=-2, dim2=-1) + d
    return torch.diagonal_scatter(M, diagonal, dim1=-2, dim2=-1)


# ------------------------------------------------------------------- gauge


def check_gauge(
    op: str,
    violation: torch.Tensor,
    cluster: torch.Tensor,
    scale_blocks: tuple[torch.Tensor, ...],
    opts: Options,
) -> None:
    """Apply the gauge policy to ``max |violation|`` over ``cluster`` pairs.

    A gauge-invariant loss has a cotangent whose anti-Hermitian part vanishes
    inside every degenerate cluster; what is left is the part of the gradient
    that depends on an arbitrary basis choice and is dropped.
    """
    if opts.gauge == "ignore":
        return
    # masked_select reads only the (few) cluster entries; one host sync.
    inside = _peek(violation.detach()).masked_select(_peek(cluster))
    measured = float(inside.abs().max()) if inside.numel() else 0.0
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


def topk_backward_message(maxiter: int, residual: float | None) -> str:
    """The warning of a top-k backward whose Sylvester (CG) solve has not
    converged (shared by both backends; ``residual`` None: not reported)."""
    measured = "" if residual is None else f" (relative residual {residual:.2g})"
    return (
        f"top-k backward: the Sylvester solve did not converge in {maxiter} "
        f"iterations{measured}: the gap between the kept and discarded spectrum "
        "is too small. The gradient is finite but approximate; use "
        "method='full' or a k at a gap."
    )


def ritz_message(residual: float) -> str:
    """The warning of a randomized top-k eigh whose Ritz pairs have not
    converged (shared by both backends)."""
    return (
        "eigh(k=..., method='randomized'): the Ritz pairs have not converged "
        f"(residual {residual:.2g} relative); the k largest eigenvalues must be the "
        "largest in magnitude and separated from the rest. Raise n_iter or use "
        "method='full'."
    )


def apply_gauge_policy(msg: str, opts: Options) -> None:
    """Raise ``GaugeError`` under ``gauge="raise"``, else warn ``GaugeWarning``."""
    if opts.gauge == "raise":
        raise GaugeError(msg)
    if opts.gauge == "warn":
        warnings.warn(msg, GaugeWarning, stacklevel=5)


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
    "oversample": ("an integer >= 0", lambda x: x >= 0),
    "n_iter": ("an integer >= 0", lambda x: x >= 0),
    "backward_maxiter": ("an integer >= 1", lambda x: x >= 1),
}
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


def check_keywords(
    op: str, A: torch.Tensor | None = None, **keywords: Any
) -> dict[str, Any]:
    """Validate the numeric keywords of a public call; the one place where
    they are checked, before any backend is chosen. Returns them normalised.

    ``k`` (``None`` or an integer with ``1 <= k <= min(m, n)`` of ``A``),
    ``oversample``, ``n_iter``, ``backward_maxiter``: integers given as a Python
    int, a numpy integer or a 0-d integer tensor (never a bool or a float),
    returned as int. ``backward_rtol``, ``broadening``, ``degeneracy_atol``,
    ``gauge_atol``, ``hermitian_tol``: ``None`` or a real number (0-d real
    tensors included), returned as float. Raises ``InputError`` naming the
    keyword, what it must be and what was passed.
    """
    checked: dict[str, Any] = {}
    for name, value in keywords.items():
        if name == "k":
            checked[name] = _check_k(op, A, value)
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
    if isinstance(x, torch.Tensor):
        real = x.dim() == 0 and not (x.dtype.is_complex or x.dtype == torch.bool)
        return float(x) if real else None
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return float(x)
    return None


def check_matrix(op: str, A: Any, *, square: bool = False) -> None:
    """Validate a ``(*, m, n)`` floating or complex tensor with finite entries."""
    if not isinstance(A, torch.Tensor):
        raise InputTypeError(
            f"{op}: A must be a torch.Tensor, got {type(A).__name__}; "
            "convert with torch.as_tensor(A, dtype=torch.float64)"
        )
    if not (A.dtype.is_floating_point or A.dtype.is_complex) or A.dtype in (
        torch.float16,
        torch.bfloat16,
    ):
        raise InputTypeError(
            f"{op}: A must have dtype float32, float64, complex64 or complex128, "
            f"got {A.dtype}; convert with A.to(torch.float64)"
        )
    if A.dim() < 2:
        raise InputError(
            f"{op}: A must have shape (*, m, n) with at least 2 dimensions, got "
            f"shape {tuple(A.shape)}; use A.reshape(1, -1) or A.unsqueeze(-1)"
        )
    if square and A.shape[-1] != A.shape[-2]:
        raise InputError(
            f"{op}: A must be square, shape (*, n, n), got shape {tuple(A.shape)}"
        )
    # Any NaN or Inf entry makes the sum non-finite, so a finite sum (one cheap
    # reduction) proves every entry finite; only otherwise look entry by entry
    # (a sum can also overflow).
    P = _peek(A)
    if P.numel() and not (
        bool(torch.isfinite(P.sum())) or bool(torch.isfinite(P).all())
    ):
        raise InputError(
            f"{op}: A contains NaN or Inf entries (shape {tuple(A.shape)}); "
            "the decomposition of such a matrix is undefined"
        )


def check_hermitian(op: str, A: torch.Tensor, tol: float | None) -> None:
    """Raise if ``A`` is not Hermitian to ``tol`` (default ``eps**0.75 max|A|``)."""
    P = _peek(A)
    P = P.detach()
    err = float((P - P.mH).abs().max()) if P.numel() else 0.0
    if tol is None:
        tol = eps(A.dtype) ** 0.75 * (float(P.abs().max()) if P.numel() else 0.0)
    if err > tol:
        raise InputError(
            f"{op}: A is not Hermitian: max|A - A^H| = {err:.3g} > hermitian_tol "
            f"{tol:.3g}. Symmetrise it, e.g. (A + A.mH) / 2, or pass "
            "check_hermitian=False to read only the UPLO triangle"
        )
