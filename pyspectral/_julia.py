"""The only module that imports juliacall: lazy start of Julia, one lock around
every Julia call, zero-copy conversion between torch and Julia, and the role
swaps that make that possible.

Crossing conventions (stated once, used by every op below):

* dtype: float32/float64/complex64/complex128 map to Float32/Float64/
  ComplexF32/ComplexF64; nothing is converted.
* device: CPU only; a CUDA tensor raises :class:`BackendError` (use the native
  backend, which runs on GPU, rather than a silent device round trip).
* layout: a C-contiguous ``(B, m, n)`` tensor is read by Julia, without a copy,
  as the column-major ``n x m x B`` array of its transposes. Julia decomposes
  the transposes and we swap roles: ``A^T = conj(V) S conj(U)^H``, so Julia's
  ``U`` is our ``Vh^T`` and Julia's ``Vt`` our ``U^T``; for Hermitian ``A``,
  ``A^T = conj(A)``, so Julia's eigenvectors are ``conj(V)`` (the glue
  conjugates them in place) and our lower triangle is Julia's upper one.
* memory: a tensor crosses as ``(address, code, dims...)``, which the glue
  wraps as a plain Julia ``Array`` over the tensor's memory (``unsafe_wrap``:
  BLAS and LAPACK work on it as on any Julia array); the tensor is kept alive
  until the call returns. Julia's results come back with their address, size
  and element type and are wrapped for torch without copies; the Julia arrays
  stay alive as long as the tensors do (numpy holds the juliacall wrapper).
* calls: positional arguments only, through the glue's ``logged``, to glue
  functions resolved once when Julia starts (``GLUE_FUNCTIONS``).

Julia is entered by one Python thread at a time (``_lock``). Calls from a
thread other than the one that started Julia run with Julia's GC paused, the
workaround PythonCall documents for foreign-thread calls (PythonCall.jl #578).

One behaviour whichever backend runs: arguments are validated in Python before
Julia is called; what only Julia finds is reported as the native backend
reports it. A spectral function's domain error carries the spectra it was
found on, and the native check, rerun on them, raises the native error
(0-based index, batch element); gauge violations are recorded by each pullback
call in Julia (its own ``PySpectral.GaugeRecorder``) and returned, and the
native policy applied to them once per call; Julia's log records of level
Warn and above become the native warning for the same event
(``warn_julia_logs``), or a ``RuntimeWarning`` naming the op. Other Julia
exceptions become the pyspectral error of their kind with Julia's message,
never its stack trace: that is on the exception as ``julia_error`` (``str()``
of it prints it), and ``PYSPECTRAL_JULIA_TRACEBACK=yes`` chains it as the
``__cause__``, so that Python prints it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import math
import os
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import _juliaprobe
from ._juliaprobe import INSTALL_HINT, juliapkg_reason  # noqa: F401 - re-exported
from ._warnings import warn
from .common.gauge import apply_gauge_records
from .exceptions import (
    BackendError,
    ConvergenceWarning,
    DomainError,
    GaugeError,
    InputError,
    JuliaError,
    PySpectralError,
)

GLUE = Path(__file__).with_name("_glue.jl")


class JuliaRuntime:
    """The seam to the real Julia: tests replace ``_julia.runtime`` with a
    stand-in implementing the same three methods."""

    blas: str | None = None  # Julia's BLAS once started (see start_blas)

    def probe(self) -> str | None:
        """``None`` if Julia and the packages are installed, else why not.
        Fast: never downloads, installs or starts Julia (it may run
        ``julia --version``); see :func:`pyspectral._juliaprobe.probe`."""
        return _juliaprobe.probe()

    def start(self) -> Any:
        """Import juliacall, load PySpectral and the glue; return the glue module."""
        for key, value in (("PYTHON_JULIACALL_HANDLE_SIGNALS", "yes"),):
            os.environ.setdefault(key, value)
        if "juliacall" not in sys.modules:
            import juliapkg

            # What importing juliacall does first; here its errors are juliapkg's
            # own. Offline it needs no network: it finds the Julia it may use and
            # writes juliapkg's state (what probe() relies on being possible).
            juliapkg.resolve()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from juliacall import Main as jl
        for w in caught:
            if "torch" in str(w.message):
                warnings.warn(IMPORT_ORDER_WARNING, RuntimeWarning, stacklevel=4)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        self.blas = start_blas(jl)
        jl.seval("using PySpectral")
        jl.include(str(GLUE))
        return jl.PySpectralGlue

    def describe(self, err: BaseException) -> tuple[str, str, Any] | None:
        """``(kind, message, spectrum)`` of a Julia exception (see the glue's
        ``error_description``), or None if ``err`` is not one."""
        juliacall = sys.modules.get("juliacall")
        if juliacall is None or not isinstance(err, juliacall.JuliaError):
            return None
        glue = juliacall.Main.PySpectralGlue
        kind, message, spectrum = glue.error_description(err.exception)
        return str(kind), str(message), spectrum


IMPORT_ORDER_WARNING = (
    "pyspectral started Julia after torch was imported. On some platforms this "
    "import order crashes (PythonCall.jl #215/#384, pytorch #78829). If it does, "
    "start Julia first: `import juliacall` before `import torch`, or set "
    "PYSPECTRAL_START_JULIA=yes (or auto) before importing pyspectral."
)

runtime: Any = JuliaRuntime()
_lock = threading.RLock()
_state: dict[str, Any] = {
    "glue": None,  # the glue module
    "fns": None,  # its functions by name, resolved once (GLUE_FUNCTIONS)
    "enter": None,  # what every call goes through: the glue's ``logged``
    "owner": None,
    "error": None,
    "probe": (),
}

# The glue functions the bridge calls (pyspectral/_glue.jl), resolved once when Julia
# starts: a call then costs no attribute lookup in Julia. ``_state["enter"]`` (the
# glue's ``logged``) runs each of them, and is the one seam a test spies on.
GLUE_FUNCTIONS = (
    "gc_enable",
    "missing_packages",
    "testset_names",
    "run_testset",
    "svd_batched",
    "svdvals_batched",
    "svd_pullback_batched!",
    "svd_pushforward_batched",
    "svd_function_batched",
    "svd_function_pullback_batched!",
    "svd_function_pushforward_batched",
    "eigh_batched",
    "eigh_pullback_batched!",
    "eigh_pushforward_batched",
    "matrix_function_batched",
    "matrix_function_pullback_batched!",
    "matrix_function_pushforward_batched",
    "svd_function_values_batched",
    "svd_function_values_pullback_batched!",
    "svd_function_values_pushforward_batched",
    "matrix_function_values_batched",
    "matrix_function_values_pullback_batched!",
    "matrix_function_values_pushforward_batched",
    "svd_topk_batched",
    "svd_trunc_pullback_batched!",
    "svd_trunc_pushforward_batched",
    "eigh_topk_batched",
    "eigh_trunc_pullback_batched!",
    "eigh_trunc_pushforward_batched",
    "truncation_ranks_batched",
    "user_eval",
    "user_include",
    "function_forward",
    "function_pullback",
)


def _probe() -> str | None:
    # Probed once per process (info, and the first backend="julia" call).
    if _state["probe"] == ():
        _state["probe"] = runtime.probe()
    return _state["probe"]


def status() -> tuple[bool, str]:
    """Whether the Julia backend can run here, and why not."""
    if _state["glue"] is not None:
        return True, "Julia backend loaded"
    if _state["error"] is not None:
        return False, _state["error"]
    reason = _probe()
    return (True, "installed (not started yet)") if reason is None else (False, reason)


def glue() -> Any:
    """The glue module, starting Julia on first use (BackendError if it cannot)."""
    with _lock:
        if _state["glue"] is not None:
            return _state["glue"]
        if _state["error"] is not None:
            raise BackendError("Julia backend unavailable: " + _state["error"])
        reason = _probe()
        if reason is not None:
            raise BackendError("Julia backend unavailable: " + reason)
        try:
            g = runtime.start()
            fns = {name: getattr(g, name) for name in GLUE_FUNCTIONS}
            enter = g.logged
        except Exception as err:  # noqa: BLE001 - any failure to start is reported
            _state["error"] = f"Julia failed to start: {err}. " + INSTALL_HINT
            raise BackendError("Julia backend unavailable: " + _state["error"]) from err
        # The Thread object, not its ident: idents are reused after a thread ends.
        _state.update(glue=g, fns=fns, enter=enter, owner=threading.current_thread())
        return g


def reset() -> None:
    """Forget the runtime state (for tests that swap ``runtime``)."""
    with _lock:
        _state.update(glue=None, fns=None, enter=None, owner=None, error=None, probe=())


def call(op: str, name: str, *args: Any) -> Any:
    """Call glue function ``name`` with positional ``args`` under the lock,
    through the glue's ``logged`` (``_state["enter"]``), and return its value.
    Julia's warnings are re-emitted as Python warnings and Julia's exceptions
    raised as pyspectral errors (:func:`error`)."""
    with _lock:
        fns = _state["fns"]
        if fns is None:
            glue()
            fns = _state["fns"]
        foreign = threading.current_thread() is not _state["owner"]
        if foreign:
            was_on = fns["gc_enable"](False)
        try:
            value, logs = _state["enter"](fns[name], *args)
        except Exception as err:
            described = runtime.describe(err)
            if described is None:
                raise
            raise error(op, err, *described) from _cause(err)
        finally:
            if foreign:
                fns["gc_enable"](was_on)
    if len(logs):
        warn_julia_logs(op, logs)
    return value


_ERRORS = {"gauge": GaugeError, "domain": DomainError, "argument": InputError}


def error(
    op: str, err: BaseException, kind: str, message: str, spectrum: Any = None
) -> PySpectralError:
    """The pyspectral error for a Julia exception ``err`` of ``kind``: its
    message is Julia's (a gauge error's is already the native text) prefixed
    by the op, without the Julia stack trace. ``julia_error`` keeps ``err``,
    ``julia_message`` Julia's message and ``julia_spectrum`` the spectra a
    domain error was found on (or None)."""
    text = message if kind == "gauge" else f"{op} (Julia): {message}"
    exc = _ERRORS.get(kind, JuliaError)(text)
    exc.julia_error, exc.julia_message, exc.julia_spectrum = err, message, spectrum
    return exc


def _cause(err: BaseException) -> BaseException | None:
    """The ``__cause__`` of a translated error: the Julia exception (whose text
    has Julia's stack trace) only if PYSPECTRAL_JULIA_TRACEBACK=yes."""
    wanted = os.environ.get("PYSPECTRAL_JULIA_TRACEBACK", "").lower()
    return err if wanted in ("1", "yes", "true") else None


def native_domain_error(err: DomainError, spectrum: torch.Tensor, check: Any) -> None:
    """Raise the native backend's error for a domain error Julia found on
    ``spectrum``: ``check`` is the native domain check of the function, rerun
    on Julia's spectrum. Returns (and the caller re-raises ``err``) only if
    the native check passes there, a tie at the domain's edge."""
    try:
        check(spectrum)
    except DomainError as native:
        native.julia_error = err.julia_error
        native.julia_message = err.julia_message
        native.julia_spectrum = err.julia_spectrum
        raise native from err.__cause__


# Julia's warnings for events the native backend warns about (the top-k ones of
# julia/PySpectral/src/forward/topk.jl and pullbacks/truncated.jl), by the start
# of their message; the numbers come from the record's keyword arguments. Each
# becomes the native backend's ConvergenceWarning with the native text (worded by
# pyspectral/topk.py and forward/topk.py; test_topk.py and test_julia_bridge.py
# check that they agree).
_UNCERTIFIED = re.compile(
    r"(svd|eigh)_topk\(k=(\d+), method=:randomized\): not certified"
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
    ``("uncertified", op, k)``, ``("unconverged", op, maxiter)`` (a pullback)
    or ``("unconverged_jvp", op, maxiter)`` (a pushforward); records of
    one event (one per batch element) are one native warning."""
    message, kw = str(record[1]), {str(k): v for k, v in record[4]}
    m = _UNCERTIFIED.match(message)
    if m:
        return ("uncertified", m[1], int(m[2])), float(kw["residual"])
    m = _UNCONVERGED.match(message)
    if m:
        return ("unconverged", m[1], int(kw["maxiter"])), float(kw["residual"])
    m = _UNCONVERGED_JVP.match(message)
    if m:
        return ("unconverged_jvp", m[1], int(kw["maxiter"])), float(kw["residual"])
    return None


def _uncertified_text(op: str, k: int, kw: dict) -> str:
    """The native ConvergenceWarning of an uncertified ``method='randomized'``
    forward (pyspectral/topk.py, with forward/topk.py's reason), from the
    keyword arguments of Julia's record."""
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
        f"{op}(k={k}, method='randomized'): not certified: {why}. The result is "
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
            message = _uncertified_text(*key[1:], kw)
        else:
            mode = "jvp" if key[0] == "unconverged_jvp" else "backward"
            message = _unconverged_text(key[1], key[2], residual, mode)
        warn(message, ConvergenceWarning)  # at the user's line


# ------------------------------------------------------------ conversions
# Python -> Julia: a tensor crosses as ``(address, code, dims...)`` (``_spec``), which
# the glue's ``wrap`` turns into ``unsafe_wrap(Array, Ptr{T}(address), dims)``: the
# tensor's own memory as a plain Julia ``Array``, so that Julia works on it with BLAS
# and LAPACK (PythonCall's ``PyArray`` view of a numpy array is not a strided array
# to Julia's linear algebra, whose generic fallbacks made the bridge's cost grow like
# n^3). Julia neither copies nor frees that memory, and keeps no reference to it
# after the call: the tensor must live until the call returns, which every op below
# ensures by keeping it (and any contiguous copy made for the call) in a local list
# ``keep`` until then.
#
# Julia -> Python: the glue returns each result as ``(array, address, dims, code)``
# (its ``out``); ``_numpy`` wraps that memory with numpy's ``__array_interface__``
# and holds the juliacall wrapper of the array, which keeps the Julia array alive as
# long as any numpy array or tensor over its memory does.

# torch dtype -> the glue's element type code (its ELTYPES) and back as numpy's
_CODES = {torch.float32: 1, torch.float64: 2, torch.complex64: 3, torch.complex128: 4}
_NUMPY = {1: np.float32, 2: np.float64, 3: np.complex64, 4: np.complex128}
_NUMPY[5] = np.int64  # results only: the truncation ranks (Julia's Vector{Int64})
_TYPESTR = {code: np.dtype(t).str for code, t in _NUMPY.items()}


def check_tensor(op: str, t: torch.Tensor) -> None:
    if t.device.type != "cpu":
        raise BackendError(
            f"{op}: the Julia backend runs on CPU tensors only, got a tensor on "
            f"{t.device}; use backend='torch' (which runs on {t.device.type}) or "
            "move the tensor with .cpu()"
        )


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` C-contiguous, without lazy conj/neg bits: ``t`` itself if it is
    (Julia only reads or writes its memory), else a detached copy."""
    if t.is_contiguous() and not t.is_conj() and not t.is_neg():
        return t
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t.contiguous()


def _spec(t: torch.Tensor, dims: tuple[int, ...], keep: list) -> tuple[int, ...]:
    keep.append(t)  # the memory Julia reads must outlive the call
    return (t.data_ptr(), _CODES[t.dtype], *dims)


def to_julia(t: torch.Tensor, keep: list) -> tuple[int, ...]:
    """``(*, m, n)`` tensor -> the column-major ``n x m x B`` array of its
    transposes, without a copy (unless ``t`` is not C-contiguous or carries a lazy
    conj/neg bit). ``keep`` holds what must live until the call returns."""
    t = _plain(t)
    m, n = t.shape[-2:]
    # the batch from the shape, not numel // (m n): an empty matrix has a batch too
    return _spec(t, (n, m, math.prod(t.shape[:-2])), keep)


def to_julia_vectors(t: torch.Tensor, keep: list) -> tuple[int, ...]:
    """``(*, k)`` tensor -> column-major ``k x B`` (no copy, as :func:`to_julia`)."""
    t = _plain(t)
    k = t.shape[-1]
    return _spec(t, (k, math.prod(t.shape[:-1])), keep)


def to_julia_matrices(t: torch.Tensor, keep: list) -> tuple[int, ...]:
    """``(*, p, q)`` tensor -> column-major ``p x q x B`` with the same indexing
    (for eigenvector cotangents: a copy unless ``t`` already has column-major
    strides, as the eigenvectors Julia returns do)."""
    p, q = t.shape[-2:]
    t = _plain(t.reshape(-1, p, q).mT)  # (B, q, p) C order = column-major p x q x B
    return _spec(t, (p, q, t.shape[0]), keep)


class _JuliaMemory:
    """A Julia array's memory as numpy sees it (``__array_interface__``, from the
    address and element type the glue reported, C-contiguous of ``shape``),
    holding the juliacall wrapper of the array: numpy keeps this object as the
    base of its array, so the Julia array lives as long as any numpy array or
    tensor over its memory."""

    __slots__ = ("__array_interface__", "array")

    def __init__(self, array: Any, address: int, shape: tuple, code: int):
        self.array = array
        self.__array_interface__ = {
            "shape": shape,
            "typestr": _TYPESTR[code],
            "data": (address, False),
            "version": 3,
        }


def _numpy(x: Any, batch: tuple[int, ...] | None = None) -> np.ndarray:
    """A result ``(array, address, dims, code)`` of the glue as a C-order numpy
    array sharing Julia's memory: column-major ``d1 x ... x dn`` is C-order
    ``dn x ... x d1``, whose leading (batch) axis is given the shape ``batch``
    when given (no reshape afterwards)."""
    array, address, dims, code = x
    shape = tuple(map(int, dims))[::-1]
    if batch is not None:
        if math.prod(batch) != shape[0]:  # never read past Julia's array
            raise RuntimeError(f"Julia returned {shape[0]} matrices for {batch}")
        shape = (*batch, *shape[1:])
    return np.asarray(_JuliaMemory(array, int(address), shape, int(code)))


def handle(x: Any) -> Any:
    """The Julia array of a glue result, to pass back to a later call."""
    return x[0]


def from_julia(x: Any, batch: tuple[int, ...]) -> torch.Tensor:
    """Julia ``p x q x B`` result -> tensor ``(*batch, q, p)`` sharing its memory."""
    return torch.from_numpy(_numpy(x, batch))


def from_julia_vectors(x: Any, batch: tuple[int, ...]) -> torch.Tensor:
    """Julia ``k x B`` result -> tensor ``(*batch, k)`` sharing its memory."""
    return torch.from_numpy(_numpy(x, batch))


def julia_matrices(x: Any, batch: tuple[int, ...] | None = None) -> torch.Tensor:
    """Julia ``p x q x B`` result -> tensor ``(*batch, p, q)`` (default batch:
    ``(B,)``) with the same indexing (column-major strides, no copy): for
    eigenvectors, which are not swapped."""
    return torch.from_numpy(_numpy(x, batch)).mT


def in_layout_of(t: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """``t`` (differentiably) copied into the memory layout of ``result``, a
    tensor wrapping a Julia array. Forward AD wants a tangent laid out as its
    primal when the primal is a view, as these results are once the input
    requires grad; a tangent computed natively (``V @ X``: C order) need not
    be (``V`` itself is column-major)."""
    out = torch.empty_strided(result.shape, result.stride(), dtype=t.dtype)
    return out.copy_(t)


def gradient_buffer(shape_dtype: tuple) -> torch.Tensor:
    """A zeroed C-contiguous gradient that Julia's pullbacks write into (CPU
    memory, whatever torch's default device is)."""
    shape, dtype = shape_dtype
    return torch.zeros(shape, dtype=dtype, device="cpu")


def options(opts: Any) -> tuple:
    """A pullback's settings, positionally as the glue takes them: degeneracy_atol,
    broadening, whether to measure the gauge dependence (``gauge != "ignore"``:
    Julia records, Python applies the policy), gauge_atol."""
    return (
        opts.degeneracy_atol,
        opts.broadening,
        opts.gauge != "ignore",
        opts.gauge_atol,
    )


def _present(*cotangents: Any) -> tuple[torch.Tensor, ...]:
    return tuple(g for g in cotangents if g is not None)


def _pullback(op: str, name: str, scale: tuple, opts: Any, *args: Any) -> None:
    """Run a pullback glue function, then the gauge policy on the violations
    ``(op, measured, tol)`` it returns, recorded by this call alone (``scale``:
    the cotangents that set the gauge tolerance, as natively)."""
    records = call(op, name, *args)
    if len(records):
        recorded = [(str(o), float(v), float(t)) for o, v, t in records]
        apply_gauge_records(recorded, scale, opts)


def _with_native_domain_error(batch: tuple, native_check: Any, run: Any) -> Any:
    """``run()``, whose Julia domain error is raised as the native one."""
    try:
        return run()
    except DomainError as err:
        spectrum = getattr(err, "julia_spectrum", None)
        if spectrum is None or native_check is None:
            raise
        native_domain_error(err, from_julia_vectors(spectrum, batch), native_check)
        raise


# --------------------------------------------------------------------- ops
# Each returns tensors in pyspectral's (torch's) layout plus the Julia handles
# the matching pullback needs. Every tensor handed to Julia sits in ``keep``
# until the call has returned.


def svd(A: torch.Tensor, full_matrices: bool) -> tuple:
    check_tensor("svd", A)
    batch, keep = A.shape[:-2], []
    U, S, Vt = call("svd", "svd_batched", to_julia(A, keep), full_matrices)
    # Julia's Vt is U^T, its U is Vh^T
    out = (from_julia(Vt, batch), from_julia_vectors(S, batch), from_julia(U, batch))
    return out, (handle(U), handle(S), handle(Vt))


def svd_pullback(
    shape_dtype: tuple, handles: tuple, gU: Any, gS: Any, gVh: Any, opts: Any
) -> torch.Tensor:
    Uj, Sj, Vtj = handles
    gA, keep = gradient_buffer(shape_dtype), []
    _pullback(
        "svd",
        "svd_pullback_batched!",
        _present(gU, gVh),
        opts,
        to_julia(gA, keep),
        Uj,
        Sj,
        Vtj,
        None if gVh is None else to_julia(gVh, keep),  # cotangent of Julia's U = Vh^T
        None if gS is None else to_julia_vectors(gS, keep),
        None if gU is None else to_julia(gU, keep),  # cotangent of Julia's Vt = U^T
        *options(opts),
    )
    return gA


def svd_pushforward(handles: tuple, dA: torch.Tensor, opts: Any) -> tuple:
    """Forward mode: ``(dU, dS, dVh)`` along ``dA``. Julia pushes the tangent of
    the transposes through its factors (``handles``) and the roles swap back
    as for the factors: Julia's ``dVt`` is our ``dU^T``, its ``dU`` our
    ``dVh^T``. Each comes back wrapping Julia's memory."""
    batch, keep = dA.shape[:-2], []
    dUj, dSj, dVtj = call(
        "svd",
        "svd_pushforward_batched",
        *handles,
        to_julia(dA, keep),
        opts.degeneracy_atol,
        opts.broadening,
    )
    dU, dVh = from_julia(dVtj, batch), from_julia(dUj, batch)
    return dU, from_julia_vectors(dSj, batch), dVh


def svdvals(A: torch.Tensor) -> torch.Tensor:
    check_tensor("svdvals", A)
    keep: list = []
    S = call("svdvals", "svdvals_batched", to_julia(A, keep))
    return from_julia_vectors(S, A.shape[:-2])


def svd_function(A: torch.Tensor, f: Any, opts: Any, native_check: Any = None) -> tuple:
    """``(Y, S, handles)``; ``S`` (sharing Julia's memory) lets the caller run
    the truncation check of the native backend, with the same message.
    ``native_check(S)``: the native domain check of ``f``, which reports a
    domain error Julia finds."""
    check_tensor("svd_function", A)
    batch, keep = A.shape[:-2], []
    Y, U, S, Vt = _with_native_domain_error(
        batch,
        native_check,
        lambda: call(
            "svd_function",
            "svd_function_batched",
            to_julia(A, keep),
            f,
            opts.degeneracy_atol,
        ),
    )
    handles = (handle(U), handle(S), handle(Vt))
    return from_julia(Y, batch), from_julia_vectors(S, batch), handles


def svd_function_pullback(
    shape_dtype: tuple, handles: tuple, f: Any, gY: torch.Tensor, opts: Any
) -> torch.Tensor:
    gA, keep = gradient_buffer(shape_dtype), []
    call(
        "svd_function",
        "svd_function_pullback_batched!",
        to_julia(gA, keep),
        *handles,
        f,
        to_julia(gY, keep),
        opts.degeneracy_atol,
    )
    return gA


def svd_function_pushforward(
    handles: tuple, f: Any, dA: torch.Tensor, opts: Any
) -> torch.Tensor:
    """Forward mode: the tangent of ``Y`` along ``dA`` (Julia's, of the
    transposes, which reads as ours as ``Y`` does)."""
    keep: list = []
    dY = call(
        "svd_function",
        "svd_function_pushforward_batched",
        *handles,
        f,
        to_julia(dA, keep),
        opts.degeneracy_atol,
    )
    return from_julia(dY, dA.shape[:-2])


# The forward settings of Julia's top-k blocks, positionally (topk.py's
# _julia_settings gives them by name).
_TOPK_SETTINGS = (
    "method",
    "oversample",
    "n_iter",
    "rtol",
    "maxiter",
    "degeneracy_atol",
)


def svd_topk(A: torch.Tensor, k: int, settings: dict[str, Any]) -> tuple:
    """``(out, values, handles)``: the top-``k`` triplets by Julia's
    svd_topk_block on the transposes, the block's singular values (all ``p``
    of them, descending: a copy) and the handles of its blocks for
    :func:`svd_trunc_pullback`. ``settings``:
    ``method`` ("auto"/"randomized"), ``oversample``, ``n_iter`` (None:
    automatic), ``rtol``, ``maxiter`` (the backward's) and ``degeneracy_atol``."""
    check_tensor("svd", A)
    batch, keep = A.shape[:-2], []
    Uj, Sj, Vtj, d = call(
        "svd",
        "svd_topk_batched",
        to_julia(A, keep),
        k,
        *(settings[name] for name in _TOPK_SETTINGS),
    )
    # the blocks have p >= k columns: the kept ones, contiguous as natively
    U = from_julia(Vtj, batch)[..., :k]  # Julia's Vt is U^T
    Vh = from_julia(Uj, batch)[..., :k, :]  # Julia's U is Vh^T
    Sp = from_julia_vectors(Sj, batch)
    out = tuple(t.contiguous() for t in (U, Sp[..., :k], Vh))
    # the block's singular values, descending, as a copy (the truncation rules
    # read past the kept ones; Julia's array stays the pullback's)
    return out, Sp.clone(), (handle(Uj), handle(Sj), handle(Vtj), d)


def svd_trunc_pullback(
    A: torch.Tensor,
    handles: tuple,
    gU: Any,
    gS: Any,
    gVh: Any,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> torch.Tensor:
    """Gradient of the top-k triplets from the blocks of :func:`svd_topk`
    (Julia's svd_trunc_pullback!, dense fallback and warning included)."""
    gA, keep = gradient_buffer((A.shape, A.dtype)), []
    _pullback(
        "svd",
        "svd_trunc_pullback_batched!",
        _present(gU, gVh),
        opts,
        to_julia(gA, keep),
        to_julia(A, keep),
        *handles,
        None if gVh is None else to_julia(gVh, keep),  # cotangent of Julia's U = Vh^T
        None if gS is None else to_julia_vectors(gS, keep),
        None if gU is None else to_julia(gU, keep),  # cotangent of Julia's Vt = U^T
        rtol,
        maxiter,
        *options(opts),
    )
    return gA


def svd_trunc_pushforward(
    A: torch.Tensor,
    handles: tuple,
    k: int,
    dA: torch.Tensor,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> tuple:
    """Forward mode of :func:`svd_topk`: ``(dU, dS, dVh)`` of the kept ``k``
    triplets along ``dA``, by Julia's truncated_svd_pushforward through the
    blocks of :func:`svd_topk` (dense fallback and warning included). Julia
    pushes the transposed tangent through its factors of the transposes and
    the roles swap back as for the factors (Julia's ``dVt`` is our ``dU^T``,
    its ``dU`` our ``dVh^T``); each comes back wrapping Julia's memory."""
    batch, keep = dA.shape[:-2], []
    dUj, dSj, dVtj = call(
        "svd",
        "svd_trunc_pushforward_batched",
        to_julia(A, keep),
        *handles,
        k,
        to_julia(dA, keep),
        rtol,
        maxiter,
        opts.degeneracy_atol,
        opts.broadening,
    )
    dU, dVh = from_julia(dVtj, batch), from_julia(dUj, batch)
    return dU, from_julia_vectors(dSj, batch), dVh


def truncation_ranks(
    op: str, x: torch.Tensor, rule: Any, degeneracy_atol: Any
) -> torch.Tensor:
    """The rank of each spectrum ``x`` (``(*, K)``, descending from the wanted
    end: singular values, or eigenvalues read from the wanted end) under the
    truncation ``rule`` (``forward.truncation.TruncationRule``), by
    PySpectral.truncation_rank; shape ``(*,)``, int64. The layout does not
    matter here: a spectrum is the same on both sides of the transpose (it
    crosses as the column-major ``K x B`` array of :func:`to_julia_vectors`).
    The ranks come back as a Julia ``Vector{Int64}`` of length ``B``."""
    check_tensor(op, x)
    keep: list = []
    ranks = call(
        op,
        "truncation_ranks_batched",
        to_julia_vectors(x, keep),
        rule.k,
        rule.atol,
        rule.rtol,
        rule.error_atol,
        rule.error_rtol,
        rule.multiplets,
        degeneracy_atol,
    )
    r = torch.from_numpy(_numpy(ranks).copy())  # Julia's Vector{Int64}: int64
    return r.reshape(x.shape[:-1])


_SWAP = {"L": "U", "U": "L"}


def eigh(A: torch.Tensor, uplo: str) -> tuple:
    check_tensor("eigh", A)
    batch, keep = A.shape[:-2], []
    w, V = call("eigh", "eigh_batched", to_julia(A, keep), _SWAP[uplo])
    # the glue conjugated Julia's conj(V) in place
    out = (from_julia_vectors(w, batch), julia_matrices(V, batch))
    return out, (handle(w), handle(V))


def eigh_pullback(
    shape_dtype: tuple, handles: tuple, gw: Any, gV: Any, uplo: str, opts: Any
) -> torch.Tensor:
    wj, Vj = handles
    gA, keep = gradient_buffer(shape_dtype), []
    _pullback(
        "eigh",
        "eigh_pullback_batched!",
        _present(gV),
        opts,
        to_julia(gA, keep),
        wj,
        Vj,
        None if gw is None else to_julia_vectors(gw, keep),
        None if gV is None else to_julia_matrices(gV, keep),
        _SWAP[uplo],
        *options(opts),
    )
    return gA


def eigh_pushforward(handles: tuple, dA: torch.Tensor, uplo: str, opts: Any) -> tuple:
    """Forward mode: ``(dw, dV)`` along ``dA`` (read from the ``uplo``
    triangle); the glue conjugates Julia's ``conj(dV)`` in place, as it does
    the eigenvectors."""
    batch, keep = dA.shape[:-2], []
    dwj, dVj = call(
        "eigh",
        "eigh_pushforward_batched",
        *handles,
        to_julia(dA, keep),
        _SWAP[uplo],
        opts.degeneracy_atol,
        opts.broadening,
    )
    return from_julia_vectors(dwj, batch), julia_matrices(dVj, batch)


def eigh_topk(
    A: torch.Tensor, k: int, uplo: str, largest: bool, settings: dict[str, Any]
) -> tuple:
    """``(out, values, handles)``: the ``k`` largest (smallest) eigenpairs by
    Julia's eigh_topk_block, kept ascending, the block's eigenvalues (a copy:
    the kept ones first, ascending, then the others from the wanted end) and
    the handles of its blocks; ``settings`` as for :func:`svd_topk`."""
    check_tensor("eigh", A)
    batch, keep = A.shape[:-2], []
    wj, Vj, d = call(
        "eigh",
        "eigh_topk_batched",
        to_julia(A, keep),
        k,
        _SWAP[uplo],
        largest,
        *(settings[name] for name in _TOPK_SETTINGS),
    )
    # the blocks have p >= k columns, the kept ones first (ascending)
    V = julia_matrices(Vj, batch)[..., :k]  # conjugated in place by the glue
    wp = from_julia_vectors(wj, batch)
    out = (wp[..., :k].contiguous(), V.contiguous())
    # the block's eigenvalues (the kept ones first, ascending, then the others
    # from the wanted end), as a copy, for the truncation rules
    return out, wp.clone(), (handle(wj), handle(Vj), d)


def eigh_trunc_pullback(
    A: torch.Tensor,
    handles: tuple,
    gw: Any,
    gV: Any,
    uplo: str,
    largest: bool,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> torch.Tensor:
    """Gradient of the top-k eigenpairs from the blocks of :func:`eigh_topk`."""
    wj, Vj, d = handles
    gA, keep = gradient_buffer((A.shape, A.dtype)), []
    _pullback(
        "eigh",
        "eigh_trunc_pullback_batched!",
        _present(gV),
        opts,
        to_julia(gA, keep),
        to_julia(A, keep),
        wj,
        Vj,
        d,
        None if gw is None else to_julia_vectors(gw, keep),
        None if gV is None else to_julia_matrices(gV, keep),
        _SWAP[uplo],
        largest,
        rtol,
        maxiter,
        *options(opts),
    )
    return gA


def eigh_trunc_pushforward(
    A: torch.Tensor,
    handles: tuple,
    k: int,
    dA: torch.Tensor,
    uplo: str,
    largest: bool,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> tuple:
    """Forward mode of :func:`eigh_topk`: ``(dw, dV)`` of the kept ``k``
    eigenpairs along ``dA`` (read from the ``uplo`` triangle), by Julia's
    truncated_eigh_pushforward through the blocks of :func:`eigh_topk`; the
    glue conjugates Julia's ``conj(dV)`` in place, as for :func:`eigh_pushforward`."""
    wj, Vj, d = handles
    batch, keep = dA.shape[:-2], []
    dwj, dVj = call(
        "eigh",
        "eigh_trunc_pushforward_batched",
        to_julia(A, keep),
        wj,
        Vj,
        d,
        k,
        to_julia(dA, keep),
        _SWAP[uplo],
        largest,
        rtol,
        maxiter,
        opts.degeneracy_atol,
        opts.broadening,
    )
    return from_julia_vectors(dwj, batch), julia_matrices(dVj, batch)


def matrix_function(
    A: torch.Tensor, f: Any, uplo: str, opts: Any, native_check: Any = None
) -> tuple:
    """``(Y, handles)``; ``native_check(w)``: the native domain check of ``f``,
    which reports a domain error Julia finds."""
    check_tensor("matrix_function", A)
    batch, keep = A.shape[:-2], []
    Y, w, V = _with_native_domain_error(
        batch,
        native_check,
        lambda: call(
            "matrix_function",
            "matrix_function_batched",
            to_julia(A, keep),
            f,
            _SWAP[uplo],
            opts.degeneracy_atol,
        ),
    )
    return from_julia(Y, batch), (handle(w), handle(V))


def matrix_function_pullback(
    shape_dtype: tuple, handles: tuple, f: Any, gY: torch.Tensor, uplo: str, opts: Any
) -> torch.Tensor:
    gA, keep = gradient_buffer(shape_dtype), []
    call(
        "matrix_function",
        "matrix_function_pullback_batched!",
        to_julia(gA, keep),
        *handles,
        f,
        to_julia(gY, keep),
        _SWAP[uplo],
        opts.degeneracy_atol,
    )
    return gA


def matrix_function_pushforward(
    handles: tuple, f: Any, dA: torch.Tensor, uplo: str, opts: Any
) -> torch.Tensor:
    """Forward mode: the tangent of ``Y`` along ``dA``."""
    keep: list = []
    dY = call(
        "matrix_function",
        "matrix_function_pushforward_batched",
        *handles,
        f,
        to_julia(dA, keep),
        _SWAP[uplo],
        opts.degeneracy_atol,
    )
    return from_julia(dY, dA.shape[:-2])


# ------------------------------------------- f given by its values (user f)
# A user's f is Python code, which Julia cannot call. Julia decomposes (the
# svd_batched / eigh_batched glue: svd_values / eigh_values below), the caller
# evaluates f and f' on that spectrum in Python (a tensor sharing Julia's
# memory), and the glue forms Y and later the pullback from the values
# (PySpectral.SpectralValues). The values cross like S: (*, k) tensors as
# column-major (k, B) arrays (to_julia_vectors, at each call); the objects
# below keep them (as tensors) for the pullback and pushforward.


def svd_values(A: torch.Tensor) -> tuple:
    """``((U, S, Vh), values)``: Julia's thin SVD of ``A`` (tensors sharing
    its memory) and the :class:`SVDValues` that forms ``U f(S) Vh`` there."""
    check_tensor("svd_function", A)
    batch, keep = A.shape[:-2], []
    U, S, Vt = call("svd_function", "svd_batched", to_julia(A, keep), False)
    # Julia's Vt is U^T, its U is Vh^T
    out = (from_julia(Vt, batch), from_julia_vectors(S, batch), from_julia(U, batch))
    return out, SVDValues((handle(U), handle(S), handle(Vt)), (A.shape, A.dtype))


class SVDValues:
    """``Y = U f(S) Vh`` on Julia's factors (``handles``) from the values
    ``fS``, ``dS`` of ``f`` and ``f'`` on its ``S``: ``form`` (once), then its
    ``pullback`` / ``pushforward`` along ``A`` (Julia's factors of the
    transposes: ``Y`` and the gradient arrive in our layout, as ``A`` left)."""

    def __init__(self, handles: tuple, shape_dtype: tuple) -> None:
        self.handles, self.shape_dtype = handles, shape_dtype
        self.values: tuple = ()  # (fS, dS), detached tensors

    def _values(self, keep: list) -> tuple:
        return tuple(to_julia_vectors(x, keep) for x in self.values)

    def form(self, fS: torch.Tensor, dS: torch.Tensor) -> torch.Tensor:
        self.values, keep = (fS.detach(), dS.detach()), []
        Y = call(
            "svd_function",
            "svd_function_values_batched",
            *self.handles,
            *self._values(keep),
        )
        return from_julia(Y, self.shape_dtype[0][:-2])

    def pullback(self, gY: torch.Tensor) -> torch.Tensor:
        gA, keep = gradient_buffer(self.shape_dtype), []
        call(
            "svd_function",
            "svd_function_values_pullback_batched!",
            to_julia(gA, keep),
            *self.handles,
            *self._values(keep),
            to_julia(gY, keep),
        )
        return gA

    def pushforward(self, dA: torch.Tensor) -> torch.Tensor:
        keep: list = []
        dY = call(
            "svd_function",
            "svd_function_values_pushforward_batched",
            *self.handles,
            *self._values(keep),
            to_julia(dA, keep),
        )
        return from_julia(dY, dA.shape[:-2])


def eigh_values(A: torch.Tensor, uplo: str) -> tuple:
    """``((w, V), values)``: Julia's eigendecomposition of the ``uplo``
    triangle of ``A`` and the :class:`EighValues` that forms ``V f(w) V^H``."""
    check_tensor("matrix_function", A)
    batch, keep = A.shape[:-2], []
    w, V = call("matrix_function", "eigh_batched", to_julia(A, keep), _SWAP[uplo])
    # the glue conjugated Julia's conj(V) in place
    out = (from_julia_vectors(w, batch), julia_matrices(V, batch))
    return out, EighValues((handle(w), handle(V)), A, uplo)


class EighValues:
    """``Y = V f(w) V^H`` on Julia's eigendecomposition (``handles``; ``V``
    conjugated in place by eigh_batched: Python's ``V``) from the values of
    ``f`` and ``f'`` on ``w``; its pullback folded onto the ``uplo``
    triangle, as natively."""

    def __init__(self, handles: tuple, A: torch.Tensor, uplo: str) -> None:
        self.handles, self.shape_dtype = handles, (A.shape, A.dtype)
        self.uplo, self.values = _SWAP[uplo], ()

    def _values(self, keep: list) -> tuple:
        return tuple(to_julia_vectors(x, keep) for x in self.values)

    def form(self, fw: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
        self.values, keep = (fw.detach(), dw.detach()), []
        Y = call(
            "matrix_function",
            "matrix_function_values_batched",
            *self.handles,
            *self._values(keep),
        )
        return from_julia(Y, self.shape_dtype[0][:-2])

    def pullback(self, gY: torch.Tensor) -> torch.Tensor:
        gA, keep = gradient_buffer(self.shape_dtype), []
        call(
            "matrix_function",
            "matrix_function_values_pullback_batched!",
            to_julia(gA, keep),
            *self.handles,
            *self._values(keep),
            to_julia(gY, keep),
            self.uplo,
        )
        return gA

    def pushforward(self, dA: torch.Tensor) -> torch.Tensor:
        keep: list = []
        dY = call(
            "matrix_function",
            "matrix_function_values_pushforward_batched",
            *self.handles,
            *self._values(keep),
            to_julia(dA, keep),
            self.uplo,
        )
        return from_julia(dY, dA.shape[:-2])


# ------------------------------------------------------------ Julia's BLAS
# Julia calls BLAS and LAPACK through libblastrampoline (LBT), which forwards
# them to Julia's OpenBLAS. PYSPECTRAL_JULIA_BLAS (read when Julia starts) can
# forward them elsewhere, right after Julia starts, with LinearAlgebra's
# BLAS.lbt_forward (Julia >= 1.7): "mkl" means the libmkl_rt of the `mkl`
# wheel from PyPI (pip install mkl puts it in <prefix>/lib), set up as MKL.jl
# sets up its own MKL (the LP64 interface layer; MKL >= 2022 exports the ILP64
# symbols Julia calls with the suffix 64); any other value is the path of a
# BLAS/LAPACK library, whose interface and suffix LBT detects. Unset, empty or
# "default": Julia's own. Asked for and not usable: a warning, Julia's own.

BLAS_ENV = "PYSPECTRAL_JULIA_BLAS"

# libmkl_rt.so.2 / .so.3 (Linux), libmkl_rt.2.dylib (macOS), mkl_rt.2.dll (Windows)
_MKL_RT = re.compile(r"^(lib)?mkl_rt(\.\d+)*\.(so|dylib|dll)(\.\d+)*$")

# One Julia expression (juliacall's seval parses one), evaluated into Main.
BLAS_JL = """
module PySpectralBLAS

import LinearAlgebra
const Libdl = Base.Libc.Libdl

# MKL.jl's set-up of MKL >= 2022 (MKL.jl, src/MKL.jl): the LP64 interface layer
# (MKL_Set_Interface_Layer(0)), then the ILP64 symbols, which such an MKL exports
# with the suffix 64, and the LP64 ones. Returns how many symbols were forwarded:
# 0 if libblastrampoline could not use the library (it then changed nothing).
function forward_mkl(path::String)
    set_layer = Libdl.dlsym(Libdl.dlopen(path), :MKL_Set_Interface_Layer)
    ccall(set_layer, Cint, (Cint,), 0) == -1 && error("MKL_Set_Interface_Layer failed")
    n = LinearAlgebra.BLAS.lbt_forward(path; clear=true, suffix_hint="64")
    n == 0 && return 0
    return Int(n) + Int(LinearAlgebra.BLAS.lbt_forward(path; suffix_hint=""))
end

# Any other library: libblastrampoline detects its interface and symbol suffix.
forward(path::String) = Int(LinearAlgebra.BLAS.lbt_forward(path; clear=true))

# The libraries libblastrampoline forwards to, with their interfaces.
describe() = join(("$(basename(lib.libname)) ($(lib.interface))"
                   for lib in LinearAlgebra.BLAS.get_config().loaded_libs), ", ")

end
"""


def requested_blas(value: str | None = None) -> str | None:
    """What ``PYSPECTRAL_JULIA_BLAS`` (or ``value``) asks for: None for Julia's
    own BLAS (unset, empty or "default"), "mkl", or a library path."""
    value = (os.environ.get(BLAS_ENV, "") if value is None else value).strip()
    if value.lower() in ("", "default"):
        return None
    return "mkl" if value.lower() == "mkl" else value


def find_mkl_rt() -> Path | None:
    """libmkl_rt of the installed ``mkl`` wheel (its RECORD lists it, in
    ``<prefix>/lib``), else one in ``sys.prefix``'s lib (``Library/bin`` on
    Windows, where conda puts it); None if there is none."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    found = sorted(Path(f.locate()) for f in files if _MKL_RT.match(f.name))
    for where in (Path(sys.prefix, "lib"), Path(sys.prefix, "Library", "bin")):
        if where.is_dir():
            found += sorted(p for p in where.iterdir() if _MKL_RT.match(p.name))
    return next((p.resolve() for p in found if p.is_file()), None)


def blas_choice() -> tuple[Path | None, str | None]:
    """``(library, problem)``: the library ``PYSPECTRAL_JULIA_BLAS`` asks Julia
    to use (None: Julia's own) and, when it asks for one that is not there,
    why not."""
    wanted = requested_blas()
    if wanted is None:
        return None, None
    if wanted == "mkl":
        path = find_mkl_rt()
        if path is None:
            return None, (
                f"{BLAS_ENV}=mkl, but no libmkl_rt was found (neither among the "
                f"files of an installed `mkl` package nor in {sys.prefix}/lib): "
                f"`pip install mkl`, or set {BLAS_ENV} to the path of libmkl_rt"
            )
        return path, None
    path = Path(wanted).expanduser()
    if not path.is_file():
        return None, (
            f"{BLAS_ENV}={wanted}: no such file; set it to 'mkl' or to the path "
            "of a BLAS/LAPACK library"
        )
    return path.resolve(), None


def _warn_blas(message: str) -> None:
    warnings.warn(
        f"pyspectral: {message}. Julia uses its default BLAS.", RuntimeWarning, 3
    )


def start_blas(jl: Any) -> str:
    """Forward Julia's BLAS as ``PYSPECTRAL_JULIA_BLAS`` asks (called right
    after Julia starts, before any package is loaded); return what Julia's
    BLAS then is. Never raises: this must not keep Julia from starting, so a
    library asked for but not usable warns, and Julia keeps its own BLAS."""
    path, problem = blas_choice()
    if problem is not None:
        _warn_blas(problem)
    try:
        jl.seval(BLAS_JL.strip())
        blas = jl.PySpectralBLAS
    except Exception as err:  # noqa: BLE001 - reported, Julia starts anyway
        if path is not None:
            _warn_blas(f"{BLAS_ENV}: cannot forward Julia's BLAS ({err})")
        return f"unknown ({type(err).__name__} while asking Julia)"
    if path is not None:
        forward = blas.forward_mkl if _MKL_RT.match(path.name) else blas.forward
        try:
            if int(forward(str(path))) == 0:
                _warn_blas(f"{BLAS_ENV}: libblastrampoline could not use {path}")
        except Exception as err:  # noqa: BLE001 - a warning, whatever Julia threw
            _warn_blas(f"{BLAS_ENV}: Julia could not load {path}: {err}")
    return str(blas.describe())


def julia_blas() -> str | None:
    """Julia's BLAS (the libraries libblastrampoline forwards to, with their
    interfaces) once Julia has started here, else None."""
    if _state["glue"] is None:
        return None
    return getattr(runtime, "blas", None)


# ------------------------------------------------------------------ install

# name -> UUID of the Julia packages `install-julia --tests` adds for running
# julia/PySpectral/test from Python (Test and Random are standard libraries).
TEST_PACKAGES = {
    "Test": "8dfed614-e22c-5e08-85e1-65c5234f0b40",
    "Random": "9a3f8284-a2c9-5f02-9a11-845980a1fd5c",
    "ChainRulesTestUtils": "cdddcdb0-9152-4a09-a978-84456f9df70a",
    "FiniteDifferences": "26cc04aa-876d-5657-8c51-4c34ba976000",
}


# Started by install(): Julia first, then torch (the order PythonCall recommends),
# PySpectral and the glue loaded (precompiled on the way), the status printed.
LOAD_CHECK = """
import juliacall
from pyspectral import _julia
_julia.glue()
print(_julia.status()[1])
"""


def install(tests: bool = False) -> str:
    """Install Julia (if needed) and the Julia packages through juliapkg, with
    juliapkg's own progress output; then start Julia once, in a fresh process
    that starts it before torch (this one has imported torch), to precompile
    and check that the backend loads. Returns what that process reports."""
    if importlib.util.find_spec("juliacall") is None:
        raise BackendError(
            "juliacall is not installed: pip install 'juliacall>=0.9.26' first (in a "
            "clone of pyspectral: pip install -e '.[julia]')"
        )
    import juliapkg

    try:
        if tests:
            for name, uuid in TEST_PACKAGES.items():
                juliapkg.add(name, uuid)
        juliapkg.resolve()
    except Exception as err:  # noqa: BLE001 - juliapkg raises many kinds
        raise BackendError(
            f"juliapkg could not install Julia: {err}. " + INSTALL_HINT
        ) from err
    reset()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)  # this pyspectral first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    run = subprocess.run(
        [sys.executable, "-c", LOAD_CHECK], capture_output=True, text=True, env=env
    )
    if run.returncode != 0:
        raise BackendError(
            "Julia and its packages are installed, but the backend does not load: "
            + (run.stderr.strip().splitlines() or ["(no message)"])[-1]
        )
    return run.stdout.strip().splitlines()[-1]
