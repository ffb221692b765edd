"""Argument checks of the public calls, done in Python before any backend
runs: matrices (dtype, shape, finiteness of what is read), ``UPLO``,
Hermitian input, ``out=``, and every numeric keyword (the same rules, in the
same words, as ``julia/PySpectral/src/common/defaults.jl``).
"""

from __future__ import annotations

import cmath
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

import torch

from .common.defaults import eps, peek
from .exceptions import (
    BackendError,
    ChoiceError,
    DtypeError,
    InputError,
    InputTypeError,
    NonFiniteError,
    ShapeError,
    UPLOError,
)

# Every numeric keyword of the public API: what it must be (said in the error
# message) and the test its value must pass once normalised (a Python int for
# the integer ones, a float for the others; NaN fails every test). The same
# rules, in the same words, are in julia/PySpectral/src/common/defaults.jl.
_INTEGER_KEYWORDS: dict[str, tuple[str, Callable[[int], bool]]] = {
    "oversample": ("an integer >= 0, or None (automatic)", lambda x: x >= 0),
    "n_iter": ("an integer >= 0, or None (automatic)", lambda x: x >= 0),
    "backward_maxiter": ("an integer >= 1", lambda x: x >= 1),
    # the floor of a truncation (forward/truncation.py)
    "min_rank": ("an integer >= 0 (the fewest values kept), or None", lambda x: x >= 0),
}
# None means "chosen from the data" (the top-k iteration's block and budget) or,
# for min_rank, no floor.
_OPTIONAL_INTEGERS = ("oversample", "n_iter", "min_rank")
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
    # the rank of a QR / LQ (pullbacks/qr.py)
    "rank_atol": _TOLERANCE,
    # the truncation tolerances of svd / eigh (forward/truncation.py)
    "atol": _TOLERANCE,
    "rtol": _TOLERANCE,
    "error_atol": _TOLERANCE,
    "error_rtol": _TOLERANCE,
}


# The keywords for which None is valid (None: automatic or from the data)
_NONE_ALLOWED = frozenset(("k", *_OPTIONAL_INTEGERS, *_REAL_KEYWORDS))


def check_keywords(
    op: str, A: torch.Tensor | None = None, **keywords: Any
) -> dict[str, Any]:
    """Validate the numeric keywords of a public call; the one place where
    they are checked, before any backend is chosen. Returns them normalised.

    ``k`` (``None`` or an integer ``k >= 0``: the maximum rank, as every
    tensor-network code reads its bond dimension; past ``min(m, n)`` it
    keeps everything), ``oversample``, ``n_iter`` (``None``: automatic),
    ``backward_maxiter``: integers given as a Python int, a numpy integer or
    a 0-d integer tensor (never a bool or a float),
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
            checked[name] = _check_k(op, value)
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


def _check_k(op: str, k: Any) -> int | None:
    """``k`` as an int ``>= 0``: the maximum rank (a ``k`` past ``min(m, n)``
    keeps every value, as tensor-network codes clamp their bond dimension)."""
    if k is None:
        return None
    x = _as_integer(k)
    if x is None or x < 0:
        raise InputError(
            f"{op}: k must be an integer >= 0 (the maximum rank; a k past "
            f"min(m, n) keeps every value), got {k!r}"
        )
    return x


def truncation_rule(
    op: str, kw: dict[str, Any], multiplets: Any, return_error: Any
) -> Any:
    """The truncation rule of a ``svd`` / ``eigh`` call from its checked
    keywords (``check_keywords``: ``k``, ``atol``, ``rtol``, ``error_atol``,
    ``error_rtol`` and the floor ``min_rank``, at most ``k``), ``multiplets``
    (``"cut"``, ``"down"`` or ``"up"``) and ``return_error``
    (``check_flag``); None when the call truncates nothing and returns no
    error. ``multiplets`` other than ``"cut"``, or ``min_rank``,
    without ``k`` or a tolerance would be ignored: ``InputError``. Returns a
    ``forward.truncation.TruncationRule``."""
    # (imported here: the forward package imports _settings, which imports this)
    from .forward.truncation import MULTIPLETS, TruncationRule

    return_error = check_flag(op, "return_error", return_error)
    if not (isinstance(multiplets, str) and multiplets in MULTIPLETS):
        raise InputError(
            f"{op}: multiplets must be 'cut', 'down' or 'up', got {multiplets!r}"
        )
    least = kw.get("min_rank")
    if least is not None and kw["k"] is not None and least > kw["k"]:
        raise InputError(
            f"{op}: min_rank = {least} exceeds k = {kw['k']}; the floor must be at "
            "most the maximum rank"
        )
    rule = TruncationRule(
        kw["k"],
        kw["atol"],
        kw["rtol"],
        kw["error_atol"],
        kw["error_rtol"],
        multiplets,
        least,
    )
    if rule.k is None and not (rule.by_value or rule.by_error):
        if multiplets != "cut":
            _nothing_to_truncate(op, f"multiplets={multiplets!r} moves the cut of")
        if least:
            _nothing_to_truncate(op, f"min_rank={least!r} is the floor of")
        if not return_error:
            return None
    return rule


def _nothing_to_truncate(op: str, what: str) -> None:
    name = what.split("=")[0]
    raise InputError(
        f"{op}: {what} a truncation, but none is asked for; pass k, atol, rtol, "
        f"error_atol or error_rtol, or drop {name}"
    )


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
    op: str,
    A: Any,
    *,
    square: bool = False,
    uplo: str | None = None,
    finite: bool = True,
) -> None:
    """Validate a ``(*, m, n)`` floating or complex tensor with finite entries.

    The errors subclass what ``torch.linalg`` raises for the same input (see
    ``exceptions``). ``uplo``: only that triangle is read (``eigh``), so only
    it must be finite, and of its diagonal only the real part (LAPACK ignores
    the imaginary part), as ``torch.linalg.eigh`` requires. ``finite=False``:
    the caller checks finiteness itself (:func:`check_hermitian_matrix`).
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
    if not finite:
        return
    P = peek(A).detach()  # (a sum recorded by autograd costs a node)
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


def check_out(op: str, out: Any, backend: str, A: torch.Tensor, k: Any = None) -> bool:
    """Whether to run ``op`` with ``out=`` (not None), after checking that it can.

    With ``out=`` there is no autograd (torch raises if ``A`` requires grad), so
    the result is ``torch.linalg``'s forward, which is the native backend's:
    the call is handed to ``torch.linalg`` itself, whose ``out=`` semantics
    (resizing with a warning, dtype and device checks) are then torch's own.
    Not with ``k`` or a truncation rule (any value but None: torch has no
    truncated ``op``) or ``backend="julia"``, which raise ``InputError``; an
    unknown backend name raises ``BackendError``.
    """
    if out is None:
        return False
    if k is not None:
        raise InputError(
            f"{op}: out= is not supported with k (top-k) or a truncation rule "
            "(atol, rtol, error_atol, error_rtol, return_error); drop out= and use "
            "the returned tensors"
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


def require_hermitian(op: str, A: torch.Tensor, tol: float | None) -> None:
    """Raise if a matrix of ``A`` is not Hermitian to ``tol``, per matrix:
    ``max|A_b - A_b^H| > tol`` (default ``eps**0.75 max|A_b|``, each matrix's
    own scale, as ``degeneracy_atol``; ``julia/PySpectral``'s
    ``default_hermitian_tol`` is the same per matrix). The message names the
    batch element.

    This reads both triangles, so both must be finite (``NonFiniteError``): a
    NaN would otherwise compare as "Hermitian"."""
    P = peek(A)
    P = P.detach()
    if P.numel() == 0:
        return
    if not _read_finite(P, None):
        raise NonFiniteError(
            f"{op}: A contains NaN or Inf entries (shape {tuple(A.shape)}); "
            "checking that it is Hermitian reads both triangles"
        )
    err = (P - P.mH).abs().amax(dim=(-2, -1))
    if tol is None:
        tols = eps(A.dtype) ** 0.75 * P.abs().amax(dim=(-2, -1))
    else:
        tols = torch.full_like(err, tol)
    bad = err > tols
    if not bool(bad.any()):
        return
    idx = tuple(bad.nonzero()[0].tolist())
    where = f" (batch element {idx} of {tuple(A.shape[:-2])})" if idx else ""
    raise InputError(
        f"{op}: A is not Hermitian{where}: max|A - A^H| = {float(err[idx]):.3g} > "
        f"hermitian_tol {float(tols[idx]):.3g}. Symmetrise it, e.g. "
        "(A + A.mH) / 2, or pass check_hermitian=False to read only the UPLO "
        "triangle"
    )


def check_hermitian_matrix(
    op: str, A: torch.Tensor, tol: float | None, advice: str
) -> None:
    """:func:`require_hermitian` and the finiteness check of
    :func:`check_matrix` (both triangles) in one read on the host: the
    largest excess of ``max|A_b - A_b^H|`` over its tolerance and the largest
    ``max|A_b|`` (NaN or Inf if any entry is) come back as one pair, so the
    check adds no host synchronisation to the one ``check_matrix`` makes.
    Only on failure does :func:`require_hermitian` look again, for the
    message (to which ``advice`` is added: the route for a non-Hermitian
    ``A``)."""
    P = peek(A).detach()
    if P.numel() == 0:
        return
    if P.device.type == "cpu" and torch.equal(P, P.mH):
        # exactly Hermitian (X + X^H, or a product BLAS made symmetric): only
        # finiteness left, by check_matrix's one reduction (a host read is
        # free on the CPU; elsewhere the one combined read below)
        if _finite_number(P.sum().item()) or _read_finite(P, None):
            return
        raise NonFiniteError(
            f"{op}: A contains NaN or Inf entries (shape {tuple(A.shape)}); "
            "checking that it is Hermitian reads both triangles"
        )
    scale = P.abs().amax(dim=(-2, -1))
    excess = (P - P.mH).abs().amax(dim=(-2, -1))
    excess = excess - (eps(A.dtype) ** 0.75 * scale if tol is None else tol)
    worst, top = torch.stack((excess.amax(), scale.amax())).tolist()
    if math.isfinite(top) and not worst > 0:
        return
    try:
        require_hermitian(op, A, tol)
    except NonFiniteError:
        raise
    except InputError as err:
        raise InputError(f"{err}. {advice}") from None


def check_choice(
    op: str,
    name: str,
    value: Any,
    choices: tuple[str, ...],
    error: type[InputError] = InputError,
) -> str:
    """``value`` if it is one of the strings ``choices``, else ``error``
    naming them (``InputTypeError`` for a non-string; ``ChoiceError`` for an
    argument torch.linalg also checks, whose class is a ``RuntimeError``)."""
    if not isinstance(value, str):
        raise InputTypeError(
            f"{op}: {name} must be a str, one of {choices}, got "
            f"{type(value).__name__} {value!r}"
        )
    if value not in choices:
        raise error(f"{op}: {name} must be one of {choices}, got {value!r}")
    return value


# cuSOLVER's SVD algorithms, torch.linalg.svd's driver= (CUDA tensors only)
DRIVERS = ("gesvd", "gesvdj", "gesvda")


def check_driver(op: str, driver: Any, A: torch.Tensor) -> str | None:
    """``driver`` as torch.linalg.svd takes it: None, or on a CUDA tensor one
    of cuSOLVER's algorithms (``DRIVERS``), which the dense forward then runs;
    elsewhere ``ChoiceError`` (a ``RuntimeError``, as torch raises)."""
    if driver is None:
        return None
    driver = check_choice(op, "driver", driver, DRIVERS, ChoiceError)
    if A.device.type != "cuda":
        raise ChoiceError(
            f"{op}: driver={driver!r} chooses cuSOLVER's algorithm, for CUDA tensors "
            f"only (as in torch.linalg.{op}); drop driver= for a {A.device.type} "
            "tensor"
        )
    return driver


def check_flag(op: str, name: str, value: Any) -> bool:
    """``value`` as a bool: ``True`` or ``False`` (Python or numpy), never a
    string or a number read for its truth value (``largest="no"`` is
    truthy); else ``InputTypeError`` naming the argument."""
    kind = type(value)
    if isinstance(value, bool) or (
        kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    ):
        return bool(value)
    raise InputTypeError(f"{op}: {name} must be True or False, got {value!r}")


# The top-k keywords of svd / eigh / svd_topk / eigh_topk: how the top-k path
# runs. Each configures the iteration; without it they would be ignored.
TOP_K_METHODS = ("auto", "full", "randomized", "krylov")
# the methods that always iterate (subspace iteration, block Krylov)
_ITERATING = ("randomized", "krylov")
_ITERATION_KEYWORDS = ("oversample", "n_iter", "backward_rtol", "backward_maxiter")
_DEFAULT_BACKWARD_MAXITER = 500


def check_top_k_keywords(op: str, k: Any, method: Any, **iteration: Any) -> None:
    """Refuse what the call would not use: ``method`` must be one of
    ``TOP_K_METHODS`` (with or without ``k``); without ``k`` (the full
    decomposition) neither ``method="randomized"`` / ``"krylov"`` nor any of
    ``oversample``,
    ``n_iter``, ``backward_rtol``, ``backward_maxiter`` (left at their
    defaults: None, None, None, 500) means anything, and with
    ``method="full"`` (which never iterates) the last four do not either.
    ``InputError`` naming the argument and what to do. (Their values are
    checked by :func:`check_keywords`.)"""
    if not isinstance(method, str) or method not in TOP_K_METHODS:
        raise InputError(
            f"{op}: method must be 'auto', 'full', 'randomized' or 'krylov', got "
            f"{method!r}"
        )
    given = _given_iteration(iteration)
    if k is None and (method in _ITERATING or given):
        what = f"method={method!r}" if method in _ITERATING else given[0]
        raise InputError(
            f"{op}: {what} configures the iterative top-k path, which runs only "
            f"with k (got k=None: the full decomposition); pass k or drop {what}"
        )
    if k is not None and method == "full" and given:
        raise InputError(
            f"{op}: {given[0]} configures the iteration, and method='full' does "
            "not iterate; use method='auto', 'randomized' or 'krylov', or drop "
            f"{given[0]}"
        )


def _given_iteration(iteration: dict[str, Any]) -> list[str]:
    """The iteration keywords among ``iteration`` not left at their defaults."""
    defaults = {"backward_maxiter": _DEFAULT_BACKWARD_MAXITER}
    return [
        name
        for name in _ITERATION_KEYWORDS
        if name in iteration and not _is(iteration[name], defaults.get(name))
    ]


def check_truncation_method(op: str, rule: Any, method: str, **iteration: Any) -> None:
    """After :func:`check_top_k_keywords` and :func:`truncation_rule`: refuse
    what a truncation rule makes meaningless. The iterative top-k path
    computes the top ``k`` only, so a rule that depends on the spectrum past
    ``k`` (``error_atol`` / ``error_rtol``, the discarded weight, or
    ``multiplets="up"``) always takes the full decomposition: with it,
    ``method="randomized"`` and the iteration keywords (``oversample``,
    ``n_iter``, ``backward_rtol``, ``backward_maxiter``, which would
    configure nothing) raise ``InputError``. (Without ``k`` the rules run the
    full path too, and :func:`check_top_k_keywords` has refused both.)"""
    if rule is None or rule.k is None or not rule.beyond_k:
        return
    what = (
        "error_atol / error_rtol (the discarded weight)"
        if rule.by_error
        else "multiplets='up'"
    )
    if method in _ITERATING:
        raise InputError(
            f"{op}: {what} depends on the spectrum past the top k, which "
            f"method={method!r} does not compute; use method='auto' (which "
            "then takes the full decomposition) or 'full'"
        )
    given = _given_iteration(iteration)
    if given:
        raise InputError(
            f"{op}: {given[0]} configures the iteration, and {what} depends on the "
            "spectrum past the top k, so the call takes the full decomposition "
            f"(it does not iterate); drop {given[0]}"
        )


def _is(value: Any, default: Any) -> bool:
    """Whether ``value`` is the keyword's default (``None``, or an int equal to
    it: ``backward_maxiter=500`` passed explicitly is the default)."""
    if default is None:
        return value is None
    return type(value) is int and value == default


def check_absorb(op: str, absorb: Any, out: Any) -> str | None:
    """``absorb``: None (the triplets) or where the singular values go in a
    split, ``"left"``, ``"right"`` or ``"both"`` (quimb's names); not with
    ``out=`` (a split has two new factors, thin whatever ``full_matrices``)."""
    if absorb is None:
        return None
    if not (isinstance(absorb, str) and absorb in ("left", "right", "both")):
        raise InputError(
            f"{op}: absorb must be None, 'left' (U S, Vh), 'right' (U, S Vh) or "
            f"'both' (U sqrt(S), sqrt(S) Vh), got {absorb!r}"
        )
    if out is not None:
        raise InputError(f"{op}: absorb={absorb!r} returns two new factors; drop out=")
    return absorb


def keyword_defaults(fn: Any, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword-only parameters of ``fn`` and their defaults, but ``skip``:
    what a fast path compares a call with (:func:`at_defaults`), read off the
    signature so that a keyword added later is compared too."""
    params = inspect.signature(fn).parameters.values()
    kinds = (inspect.Parameter.KEYWORD_ONLY,)
    return {p.name: p.default for p in params if p.kind in kinds and p.name not in skip}


def at_defaults(call: dict[str, Any], defaults: dict[str, Any]) -> bool:
    """Whether every argument named in ``defaults`` has its default in
    ``call`` (the function's ``locals()`` on entry): the same object, or an
    equal one of the same type (``500``, not ``500.0``; ``"auto"``)."""
    for name, default in defaults.items():
        value = call[name]
        if value is not default and (
            type(value) is not type(default) or value != default
        ):
            return False
    return True
