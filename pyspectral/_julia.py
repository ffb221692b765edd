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
  Julia-allocated results are wrapped by ``np.asarray`` and
  ``torch.from_numpy`` without copies; the Julia arrays stay alive as long as
  the tensors do (numpy holds the juliacall wrapper).

Julia is entered by one Python thread at a time (``_lock``). Calls from a
thread other than the one that started Julia run with Julia's GC paused, the
workaround PythonCall documents for foreign-thread calls (PythonCall.jl #578).

One behaviour whichever backend runs: arguments are validated in Python before
Julia is called; what only Julia finds is reported as the native backend
reports it. A spectral function's domain error carries the spectra it was
found on, and the native check, rerun on them, raises the native error
(0-based index, batch element); gauge violations are recorded by the glue and
the native policy applied to them once per call; Julia's log records of level
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
import os
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

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

INSTALL_HINT = (
    "Install it with `python -m pyspectral install-julia` (downloads Julia and "
    "the Julia packages once; needs network). To use an existing Julia instead, "
    "set PYTHON_JULIAPKG_EXE=/path/to/julia (and PYTHON_JULIAPKG_OFFLINE=yes "
    "with PYTHON_JULIAPKG_PROJECT=/path/to/env for an environment that already "
    "has the packages). Or use backend='torch', which needs no Julia."
)


class JuliaRuntime:
    """The seam to the real Julia: tests replace ``_julia.runtime`` with a
    stand-in implementing the same three methods."""

    blas: str | None = None  # Julia's BLAS once started (see start_blas)

    def probe(self) -> str | None:
        """``None`` if Julia and the packages are installed, else why not.
        Fast: never downloads, installs or starts Julia (it may run
        ``julia --version``)."""
        if "juliacall" in sys.modules:
            return None
        if importlib.util.find_spec("juliacall") is None:
            return (
                "juliacall is not installed: pip install 'pyspectral[julia]', then "
                + INSTALL_HINT[0].lower()
                + INSTALL_HINT[1:]
            )
        try:
            import juliapkg
        except Exception as err:  # noqa: BLE001 - it checks its settings on import
            return f"juliapkg cannot start: {err}"
        return juliapkg_reason(juliapkg)

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


def juliapkg_reason(juliapkg: Any) -> str | None:
    """Why juliapkg cannot provide Julia and the packages here without a
    network install, or None if it can.

    juliapkg's rules (deps.py, find_julia.py, state.py): ``resolve()`` does
    nothing when its state file (``meta.json`` in the project) matches the
    settings (``deps.can_skip_resolve``). Otherwise, online, it may download
    Julia and the packages (``install-julia`` runs it). Offline
    (``PYTHON_JULIAPKG_OFFLINE=yes``) it installs nothing: it takes the Julia
    ``find_julia`` finds without installing (``PYTHON_JULIAPKG_EXE``, else one
    already installed), runs it once to locate libjulia and writes the state
    file; the packages must already be in the environment, so it has to be
    named (``PYTHON_JULIAPKG_PROJECT``).
    """
    try:
        if juliapkg.deps.can_skip_resolve():
            return None
    except Exception:  # noqa: BLE001, S110 - an unreadable state file: resolve again
        pass
    state = juliapkg.state
    if not state.STATE.get("offline"):
        return "Julia or the PySpectral Julia package is not installed yet. " + (
            INSTALL_HINT
        )
    project = state.get_config("project")[0]
    if not project or not os.path.isdir(project):
        return (
            "PYTHON_JULIAPKG_OFFLINE=yes, so juliapkg installs no packages, but "
            + (
                "PYTHON_JULIAPKG_PROJECT is not set"
                if not project
                else f"PYTHON_JULIAPKG_PROJECT={project} does not exist"
            )
            + ": set it to the Julia environment that has PySpectral, "
            "ChainRulesCore and Zygote (or unset PYTHON_JULIAPKG_OFFLINE and run "
            "`python -m pyspectral install-julia`)"
        )
    find_julia = importlib.import_module("juliapkg.find_julia")
    try:
        find_julia.find_julia(prefix=state.STATE.get("install"))
    except Exception as err:  # noqa: BLE001 - juliapkg raises plain Exceptions
        return (
            f"PYTHON_JULIAPKG_OFFLINE=yes, and juliapkg finds no Julia to use "
            f"offline ({err}): set PYTHON_JULIAPKG_EXE=/path/to/julia (1.9 to 1.12)"
        )
    return None


IMPORT_ORDER_WARNING = (
    "pyspectral started Julia after torch was imported. On some platforms this "
    "import order crashes (PythonCall.jl #215/#384, pytorch #78829). If it does, "
    "start Julia first: `import juliacall` before `import torch`, or set "
    "PYSPECTRAL_START_JULIA=yes before importing pyspectral."
)

runtime: Any = JuliaRuntime()
_lock = threading.RLock()
_state: dict[str, Any] = {"glue": None, "owner": None, "error": None, "probe": ()}


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
            _state["glue"] = runtime.start()
        except Exception as err:  # noqa: BLE001 - any failure to start is reported
            _state["error"] = f"Julia failed to start: {err}. " + INSTALL_HINT
            raise BackendError("Julia backend unavailable: " + _state["error"]) from err
        # The Thread object, not its ident: idents are reused after a thread ends.
        _state["owner"] = threading.current_thread()
        return _state["glue"]


def reset() -> None:
    """Forget the runtime state (for tests that swap ``runtime``)."""
    with _lock:
        _state.update(glue=None, owner=None, error=None, probe=())


def call(op: str, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call glue function ``name``; see :func:`invoke`."""
    return invoke(op, name, *args, **kwargs)[0]


def invoke(op: str, name: str, *args: Any, **kwargs: Any) -> tuple[Any, list]:
    """Call glue function ``name`` under the lock, through the glue's
    ``logged``; return its value and the gauge violations ``(op, measured,
    tol)`` its pullbacks recorded. Julia's warnings are re-emitted as Python
    warnings and Julia's exceptions raised as pyspectral errors (:func:`error`)."""
    with _lock:
        g = glue()
        foreign = threading.current_thread() is not _state["owner"]
        if foreign:
            was_on = g.gc_enable(False)
        try:
            value, logs, gauge = g.logged(getattr(g, name), *args, **kwargs)
        except Exception as err:
            described = runtime.describe(err)
            if described is None:
                raise
            raise error(op, err, *described) from _cause(err)
        finally:
            if foreign:
                g.gc_enable(was_on)
    warn_julia_logs(op, logs)
    return value, [(str(o), float(v), float(t)) for o, v, t in gauge]


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


def _native_event(record: tuple) -> tuple[tuple, float] | None:
    """``(event, residual)`` of a Julia log record ``(level, message, module,
    group, kwargs)`` with a native twin, else None: ``event`` is
    ``("uncertified", op, k)`` or ``("unconverged", op, maxiter)``; records of
    one event (one per batch element) are one native warning."""
    message, kw = str(record[1]), {str(k): v for k, v in record[4]}
    m = _UNCERTIFIED.match(message)
    if m:
        return ("uncertified", m[1], int(m[2])), float(kw["residual"])
    m = _UNCONVERGED.match(message)
    if m:
        return ("unconverged", m[1], int(kw["maxiter"])), float(kw["residual"])
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


def _unconverged_text(op: str, maxiter: int, residual: float) -> str:
    """The native ConvergenceWarning of a top-k backward whose CG solve did
    not converge on a matrix too large for the dense fallback (pyspectral/topk.py)."""
    return (
        f"{op}(k=..., method='randomized') backward: the Sylvester solve did not "
        f"converge in {maxiter} iterations (relative residual {residual:.2g}): "
        "there is no gap between the kept spectrum and the rest beyond the "
        "certified block, and the matrix is too large for the exact dense "
        "fallback. The gradient is approximate; use method='full', a k at a "
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
            message = _unconverged_text(key[1], key[2], residual)
        warn(message, ConvergenceWarning)  # at the user's line


# ------------------------------------------------------------ conversions


def check_tensor(op: str, t: torch.Tensor) -> None:
    if t.device.type != "cpu":
        raise BackendError(
            f"{op}: the Julia backend runs on CPU tensors only, got a tensor on "
            f"{t.device}; use backend='torch' (which runs on {t.device.type}) or "
            "move the tensor with .cpu()"
        )


def to_julia(t: torch.Tensor) -> np.ndarray:
    """``(*, m, n)`` tensor -> numpy view of shape ``(n, m, B)`` (column-major),
    which juliacall passes to Julia as a PyArray without copying. Copies only
    when ``t`` is not C-contiguous or carries a lazy conj/neg bit."""
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    m, n = t.shape[-2:]
    return t.reshape(-1, m, n).numpy().transpose(2, 1, 0)


def to_julia_vectors(t: torch.Tensor) -> np.ndarray:
    """``(*, k)`` tensor -> numpy view ``(k, B)`` (column-major)."""
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    return t.reshape(-1, t.shape[-1]).numpy().T


def from_julia(x: Any, batch: tuple[int, ...]) -> torch.Tensor:
    """Julia ``p x q x B`` array -> tensor ``(*batch, q, p)`` sharing its memory."""
    a = np.asarray(x)
    t = torch.from_numpy(a.transpose(2, 1, 0))
    return t.reshape(*batch, *t.shape[1:])


def from_julia_vectors(x: Any, batch: tuple[int, ...]) -> torch.Tensor:
    """Julia ``k x B`` array -> tensor ``(*batch, k)`` sharing its memory."""
    t = torch.from_numpy(np.asarray(x).T)
    return t.reshape(*batch, t.shape[-1])


def julia_matrices(x: Any) -> torch.Tensor:
    """Julia ``p x q x B`` array -> tensor ``(B, p, q)`` with the same indexing
    (column-major strides, no copy): for eigenvectors, which are not swapped."""
    return torch.from_numpy(np.asarray(x).transpose(2, 0, 1))


def to_julia_matrices(t: torch.Tensor) -> np.ndarray:
    """``(*, p, q)`` tensor -> column-major numpy ``(p, q, B)`` with the same
    indexing (a copy unless ``t`` already has column-major strides)."""
    p, q = t.shape[-2:]
    t = t.detach().resolve_conj().resolve_neg().reshape(-1, p, q)
    return t.mT.contiguous().numpy().transpose(2, 1, 0)


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


def options(opts: Any) -> dict[str, Any]:
    return {
        "degeneracy_atol": opts.degeneracy_atol,
        "broadening": opts.broadening,
        "gauge": opts.gauge,
        "gauge_atol": opts.gauge_atol,
    }


def _present(*cotangents: Any) -> tuple[torch.Tensor, ...]:
    return tuple(g for g in cotangents if g is not None)


def _pullback(op: str, name: str, scale: tuple, opts: Any, *args: Any, **kw: Any):
    """Run a pullback glue function, then the gauge policy on what it recorded
    (``scale``: the cotangents that set the gauge tolerance, as natively)."""
    _, records = invoke(op, name, *args, **kw)
    if records:
        apply_gauge_records(records, scale, opts)


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
# the matching pullback needs.


def svd(A: torch.Tensor, full_matrices: bool) -> tuple:
    check_tensor("svd", A)
    batch = A.shape[:-2]
    Uj, Sj, Vtj = call("svd", "svd_batched", to_julia(A), full_matrices)
    U = from_julia(Vtj, batch)  # Julia's Vt is U^T
    Vh = from_julia(Uj, batch)  # Julia's U is Vh^T
    return (U, from_julia_vectors(Sj, batch), Vh), (Uj, Sj, Vtj)


def svd_pullback(
    shape_dtype: tuple, handles: tuple, gU: Any, gS: Any, gVh: Any, opts: Any
) -> torch.Tensor:
    Uj, Sj, Vtj = handles
    gA = gradient_buffer(shape_dtype)
    _pullback(
        "svd",
        "svd_pullback_batched!",
        _present(gU, gVh),
        opts,
        to_julia(gA),
        Uj,
        Sj,
        Vtj,
        None if gVh is None else to_julia(gVh),  # cotangent of Julia's U = Vh^T
        None if gS is None else to_julia_vectors(gS),
        None if gU is None else to_julia(gU),  # cotangent of Julia's Vt = U^T
        **options(opts),
    )
    return gA


def svd_pushforward(handles: tuple, dA: torch.Tensor, opts: Any) -> tuple:
    """Forward mode: ``(dU, dS, dVh)`` along ``dA``. Julia pushes the tangent of
    the transposes through its factors (``handles``) and the roles swap back
    as for the factors: Julia's ``dVt`` is our ``dU^T``, its ``dU`` our
    ``dVh^T``. Each comes back wrapping Julia's memory."""
    batch = dA.shape[:-2]
    dUj, dSj, dVtj = call(
        "svd",
        "svd_pushforward_batched",
        *handles,
        to_julia(dA),
        degeneracy_atol=opts.degeneracy_atol,
        broadening=opts.broadening,
    )
    dU, dVh = from_julia(dVtj, batch), from_julia(dUj, batch)
    return dU, from_julia_vectors(dSj, batch), dVh


def svdvals(A: torch.Tensor) -> torch.Tensor:
    check_tensor("svdvals", A)
    return from_julia_vectors(
        call("svdvals", "svdvals_batched", to_julia(A)), A.shape[:-2]
    )


def svd_function(A: torch.Tensor, f: Any, opts: Any, native_check: Any = None) -> tuple:
    """``(Y, S, handles)``; ``S`` (sharing Julia's memory) lets the caller run
    the truncation check of the native backend, with the same message.
    ``native_check(S)``: the native domain check of ``f``, which reports a
    domain error Julia finds."""
    check_tensor("svd_function", A)
    batch = A.shape[:-2]
    Yj, *handles = _with_native_domain_error(
        batch,
        native_check,
        lambda: call(
            "svd_function",
            "svd_function_batched",
            to_julia(A),
            f,
            degeneracy_atol=opts.degeneracy_atol,
        ),
    )
    return from_julia(Yj, batch), from_julia_vectors(handles[1], batch), tuple(handles)


def svd_function_pullback(
    shape_dtype: tuple, handles: tuple, f: Any, gY: torch.Tensor, opts: Any
) -> torch.Tensor:
    gA = gradient_buffer(shape_dtype)
    call(
        "svd_function",
        "svd_function_pullback_batched!",
        to_julia(gA),
        *handles,
        f,
        to_julia(gY),
        degeneracy_atol=opts.degeneracy_atol,
    )
    return gA


def svd_function_pushforward(
    handles: tuple, f: Any, dA: torch.Tensor, opts: Any
) -> torch.Tensor:
    """Forward mode: the tangent of ``Y`` along ``dA`` (Julia's, of the
    transposes, which reads as ours as ``Y`` does)."""
    dYj = call(
        "svd_function",
        "svd_function_pushforward_batched",
        *handles,
        f,
        to_julia(dA),
        degeneracy_atol=opts.degeneracy_atol,
    )
    return from_julia(dYj, dA.shape[:-2])


def svd_topk(A: torch.Tensor, k: int, settings: dict[str, Any]) -> tuple:
    """The top-``k`` triplets by Julia's svd_topk_block on the transposes, and
    the handles of its blocks for :func:`svd_trunc_pullback`. ``settings``:
    ``method`` ("auto"/"randomized"), ``oversample``, ``n_iter`` (None:
    automatic), ``rtol``, ``maxiter`` (the backward's) and ``degeneracy_atol``."""
    check_tensor("svd", A)
    batch = A.shape[:-2]
    Uj, Sj, Vtj, d = call("svd", "svd_topk_batched", to_julia(A), k, **settings)
    # the blocks have p >= k columns: the kept ones, contiguous as natively
    U = from_julia(Vtj, batch)[..., :k]  # Julia's Vt is U^T
    Vh = from_julia(Uj, batch)[..., :k, :]  # Julia's U is Vh^T
    S = from_julia_vectors(Sj, batch)[..., :k]
    return tuple(t.contiguous() for t in (U, S, Vh)), (Uj, Sj, Vtj, d)


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
    gA = gradient_buffer((A.shape, A.dtype))
    _pullback(
        "svd",
        "svd_trunc_pullback_batched!",
        _present(gU, gVh),
        opts,
        to_julia(gA),
        to_julia(A),
        *handles,
        None if gVh is None else to_julia(gVh),  # cotangent of Julia's U = Vh^T
        None if gS is None else to_julia_vectors(gS),
        None if gU is None else to_julia(gU),  # cotangent of Julia's Vt = U^T
        rtol=rtol,
        maxiter=maxiter,
        **options(opts),
    )
    return gA


_SWAP = {"L": "U", "U": "L"}


def eigh(A: torch.Tensor, uplo: str) -> tuple:
    check_tensor("eigh", A)
    batch = A.shape[:-2]
    wj, Vj = call("eigh", "eigh_batched", to_julia(A), _SWAP[uplo])
    V = julia_matrices(Vj)  # the glue conjugated Julia's conj(V) in place
    return (from_julia_vectors(wj, batch), V.reshape(*batch, *V.shape[-2:])), (wj, Vj)


def eigh_pullback(
    shape_dtype: tuple, handles: tuple, gw: Any, gV: Any, uplo: str, opts: Any
) -> torch.Tensor:
    wj, Vj = handles
    gA = gradient_buffer(shape_dtype)
    _pullback(
        "eigh",
        "eigh_pullback_batched!",
        _present(gV),
        opts,
        to_julia(gA),
        wj,
        Vj,
        None if gw is None else to_julia_vectors(gw),
        None if gV is None else to_julia_matrices(gV),
        _SWAP[uplo],
        **options(opts),
    )
    return gA


def eigh_pushforward(handles: tuple, dA: torch.Tensor, uplo: str, opts: Any) -> tuple:
    """Forward mode: ``(dw, dV)`` along ``dA`` (read from the ``uplo``
    triangle); the glue conjugates Julia's ``conj(dV)`` in place, as it does
    the eigenvectors."""
    batch = dA.shape[:-2]
    dwj, dVj = call(
        "eigh",
        "eigh_pushforward_batched",
        *handles,
        to_julia(dA),
        _SWAP[uplo],
        degeneracy_atol=opts.degeneracy_atol,
        broadening=opts.broadening,
    )
    dV = julia_matrices(dVj)
    return from_julia_vectors(dwj, batch), dV.reshape(*batch, *dV.shape[-2:])


def eigh_topk(
    A: torch.Tensor, k: int, uplo: str, largest: bool, settings: dict[str, Any]
) -> tuple:
    """The ``k`` largest (smallest) eigenpairs by Julia's eigh_topk_block, kept
    ascending, and the handles of its blocks; ``settings`` as for
    :func:`svd_topk`."""
    check_tensor("eigh", A)
    batch = A.shape[:-2]
    wj, Vj, d = call(
        "eigh",
        "eigh_topk_batched",
        to_julia(A),
        k,
        _SWAP[uplo],
        largest=largest,
        **settings,
    )
    # the blocks have p >= k columns, the kept ones first (ascending)
    V = julia_matrices(Vj)[..., :k]  # conjugated in place by the glue, as for eigh
    w = from_julia_vectors(wj, batch)[..., :k].contiguous()
    return (w, V.reshape(*batch, *V.shape[-2:]).contiguous()), (wj, Vj, d)


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
    gA = gradient_buffer((A.shape, A.dtype))
    _pullback(
        "eigh",
        "eigh_trunc_pullback_batched!",
        _present(gV),
        opts,
        to_julia(gA),
        to_julia(A),
        wj,
        Vj,
        d,
        None if gw is None else to_julia_vectors(gw),
        None if gV is None else to_julia_matrices(gV),
        _SWAP[uplo],
        largest=largest,
        rtol=rtol,
        maxiter=maxiter,
        **options(opts),
    )
    return gA


def matrix_function(
    A: torch.Tensor, f: Any, uplo: str, opts: Any, native_check: Any = None
) -> tuple:
    """``(Y, handles)``; ``native_check(w)``: the native domain check of ``f``,
    which reports a domain error Julia finds."""
    check_tensor("matrix_function", A)
    batch = A.shape[:-2]
    Yj, *handles = _with_native_domain_error(
        batch,
        native_check,
        lambda: call(
            "matrix_function",
            "matrix_function_batched",
            to_julia(A),
            f,
            _SWAP[uplo],
            degeneracy_atol=opts.degeneracy_atol,
        ),
    )
    return from_julia(Yj, batch), tuple(handles)


def matrix_function_pullback(
    shape_dtype: tuple, handles: tuple, f: Any, gY: torch.Tensor, uplo: str, opts: Any
) -> torch.Tensor:
    gA = gradient_buffer(shape_dtype)
    call(
        "matrix_function",
        "matrix_function_pullback_batched!",
        to_julia(gA),
        *handles,
        f,
        to_julia(gY),
        _SWAP[uplo],
        degeneracy_atol=opts.degeneracy_atol,
    )
    return gA


def matrix_function_pushforward(
    handles: tuple, f: Any, dA: torch.Tensor, uplo: str, opts: Any
) -> torch.Tensor:
    """Forward mode: the tangent of ``Y`` along ``dA``."""
    dYj = call(
        "matrix_function",
        "matrix_function_pushforward_batched",
        *handles,
        f,
        to_julia(dA),
        _SWAP[uplo],
        degeneracy_atol=opts.degeneracy_atol,
    )
    return from_julia(dYj, dA.shape[:-2])


# ------------------------------------------- f given by its values (user f)
# A user's f is Python code, which Julia cannot call. Julia decomposes (the
# svd_batched / eigh_batched glue: svd_values / eigh_values below), the caller
# evaluates f and f' on that spectrum in Python (a tensor sharing Julia's
# memory), and the glue forms Y and later the pullback from the values
# (PySpectral.SpectralValues). The values cross like S: (*, k) tensors as
# column-major (k, B) views.


def svd_values(A: torch.Tensor) -> tuple:
    """``((U, S, Vh), values)``: Julia's thin SVD of ``A`` (tensors sharing
    its memory) and the :class:`SVDValues` that forms ``U f(S) Vh`` there."""
    check_tensor("svd_function", A)
    batch = A.shape[:-2]
    Uj, Sj, Vtj = call("svd_function", "svd_batched", to_julia(A), False)
    U = from_julia(Vtj, batch)  # Julia's Vt is U^T
    Vh = from_julia(Uj, batch)  # Julia's U is Vh^T
    S = from_julia_vectors(Sj, batch)
    return (U, S, Vh), SVDValues((Uj, Sj, Vtj), (A.shape, A.dtype))


class SVDValues:
    """``Y = U f(S) Vh`` on Julia's factors (``handles``) from the values
    ``fS``, ``dS`` of ``f`` and ``f'`` on its ``S``: ``form`` (once), then its
    ``pullback`` / ``pushforward`` along ``A`` (Julia's factors of the
    transposes: ``Y`` and the gradient arrive in our layout, as ``A`` left)."""

    def __init__(self, handles: tuple, shape_dtype: tuple) -> None:
        self.handles, self.shape_dtype = handles, shape_dtype
        self.values: tuple = ()

    def form(self, fS: torch.Tensor, dS: torch.Tensor) -> torch.Tensor:
        self.values = (to_julia_vectors(fS), to_julia_vectors(dS))
        Yj = call(
            "svd_function", "svd_function_values_batched", *self.handles, *self.values
        )
        return from_julia(Yj, self.shape_dtype[0][:-2])

    def pullback(self, gY: torch.Tensor) -> torch.Tensor:
        gA = gradient_buffer(self.shape_dtype)
        call(
            "svd_function",
            "svd_function_values_pullback_batched!",
            to_julia(gA),
            *self.handles,
            *self.values,
            to_julia(gY),
        )
        return gA

    def pushforward(self, dA: torch.Tensor) -> torch.Tensor:
        dYj = call(
            "svd_function",
            "svd_function_values_pushforward_batched",
            *self.handles,
            *self.values,
            to_julia(dA),
        )
        return from_julia(dYj, dA.shape[:-2])


def eigh_values(A: torch.Tensor, uplo: str) -> tuple:
    """``((w, V), values)``: Julia's eigendecomposition of the ``uplo``
    triangle of ``A`` and the :class:`EighValues` that forms ``V f(w) V^H``."""
    check_tensor("matrix_function", A)
    batch = A.shape[:-2]
    wj, Vj = call("matrix_function", "eigh_batched", to_julia(A), _SWAP[uplo])
    V = julia_matrices(Vj)  # the glue conjugated Julia's conj(V) in place
    w = from_julia_vectors(wj, batch)
    return (w, V.reshape(*batch, *V.shape[-2:])), EighValues((wj, Vj), A, uplo)


class EighValues:
    """``Y = V f(w) V^H`` on Julia's eigendecomposition (``handles``; ``V``
    conjugated in place by eigh_batched: Python's ``V``) from the values of
    ``f`` and ``f'`` on ``w``; its pullback folded onto the ``uplo``
    triangle, as natively."""

    def __init__(self, handles: tuple, A: torch.Tensor, uplo: str) -> None:
        self.handles, self.shape_dtype = handles, (A.shape, A.dtype)
        self.uplo, self.values = _SWAP[uplo], ()

    def form(self, fw: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
        self.values = (to_julia_vectors(fw), to_julia_vectors(dw))
        Yj = call(
            "matrix_function",
            "matrix_function_values_batched",
            *self.handles,
            *self.values,
        )
        return from_julia(Yj, self.shape_dtype[0][:-2])

    def pullback(self, gY: torch.Tensor) -> torch.Tensor:
        gA = gradient_buffer(self.shape_dtype)
        call(
            "matrix_function",
            "matrix_function_values_pullback_batched!",
            to_julia(gA),
            *self.handles,
            *self.values,
            to_julia(gY),
            self.uplo,
        )
        return gA

    def pushforward(self, dA: torch.Tensor) -> torch.Tensor:
        dYj = call(
            "matrix_function",
            "matrix_function_values_pushforward_batched",
            *self.handles,
            *self.values,
            to_julia(dA),
            self.uplo,
        )
        return from_julia(dYj, dA.shape[:-2])


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


def install(tests: bool = False) -> None:
    """Install Julia (if needed) and the Julia packages through juliapkg, with
    juliapkg's own progress output; then start Julia once to precompile."""
    if importlib.util.find_spec("juliacall") is None:
        raise BackendError(
            "juliacall is not installed: pip install 'pyspectral[julia]' first"
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
    glue()
