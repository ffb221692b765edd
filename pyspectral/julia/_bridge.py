"""The bridge to Julia: the only module that imports juliacall. It starts
Julia lazily (PySpectral and the glue, ``glue.jl``), holds one lock around
every Julia call, and turns what comes back into what the native backend
would give: Julia's exceptions into pyspectral errors, its gauge records into
the native gauge policy, its log records into the native warnings
(``_events``).

Julia is entered by one Python thread at a time (``_lock``). Calls from a
thread other than the one that started Julia run with Julia's GC paused, the
workaround PythonCall documents for foreign-thread calls (PythonCall.jl #578).

One behaviour whichever backend runs: arguments are validated in Python before
Julia is called; what only Julia finds is reported as the native backend
reports it. A spectral function's domain error carries the spectra it was
found on, and the native check, rerun on them, raises the native error
(0-based index, batch element); gauge violations are recorded by each pullback
call in Julia (its own ``PySpectral.GaugeRecorder``) and returned, and the
native policy applied to them once per call. Other Julia exceptions become the
pyspectral error of their kind with Julia's message, never its stack trace:
that is on the exception as ``julia_error`` (``str()`` of it prints it), and
``PYSPECTRAL_JULIA_TRACEBACK=yes`` chains it as the ``__cause__``, so that
Python prints it.

How tensors cross (dtype, device, layout, memory) is ``_convert``'s; the ops
are in ``_svd`` and ``_eigh``.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any

import torch

from ..common.gauge import WEIGHTS, apply_gauge_records
from ..exceptions import (
    BackendError,
    DomainError,
    GaugeError,
    InputError,
    JuliaError,
    PySpectralError,
)
from . import _probe, _start, _sysimage
from ._blas import start_blas, threads_for
from ._convert import from_julia_vectors
from ._events import warn_julia_logs
from ._probe import INSTALL_HINT

GLUE = _sysimage.GLUE


class JuliaRuntime:
    """The seam to the real Julia: tests replace ``_bridge.runtime`` with a
    stand-in implementing the same three methods."""

    blas: str | None = None  # Julia's BLAS once started (see start_blas)

    def probe(self) -> str | None:
        """``None`` if Julia and the packages are installed, else why not.
        Fast: never downloads, installs or starts Julia (it may run
        ``julia --version``); see :func:`pyspectral.julia._probe.probe`."""
        return _probe.probe()

    def start(self) -> Any:
        """Import juliacall, load PySpectral and the glue; return the glue module."""
        if "juliacall" not in sys.modules:
            import juliapkg

            # What importing juliacall does first; here its errors are juliapkg's
            # own. Offline it needs no network: it finds the Julia it may use and
            # writes juliapkg's state (what probe() relies on being possible).
            juliapkg.resolve()
            added = _start.prepare_start()
        else:
            added = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                from juliacall import Main as jl
            finally:
                _start.forget_options(added)
        for w in caught:
            if "torch" in str(w.message):
                warnings.warn(IMPORT_ORDER_WARNING, RuntimeWarning, stacklevel=4)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        _sysimage.warm_up(jl)  # once: if _start.import_juliacall has not
        self.blas = start_blas(jl)
        jl.seval("using PySpectral")
        from_image = _sysimage.check_started(jl)
        if not from_image:  # else the image has the glue, compiled
            jl.include(str(GLUE))
        _sysimage.explain(from_image)
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
    "threads": 0,  # Julia's BLAS threads as last set by call(); 0: not set yet
}

# The glue functions the bridge calls (pyspectral/julia/glue.jl), resolved once when
# Julia starts: a call then costs no attribute lookup in Julia. ``_state["enter"]`` (the
# glue's ``logged``) runs each of them, and is the one seam a test spies on.
GLUE_FUNCTIONS = (
    "gc_enable",
    "set_blas_threads",
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
    "svd_split_pullback_batched!",
    "svd_split_pushforward_batched",
    "qr_batched",
    "qr_pullback_batched!",
    "qr_pushforward_batched",
    "lq_batched",
    "lq_pullback_batched!",
    "lq_pushforward_batched",
    "polar_batched",
    "polar_pullback_batched!",
    "polar_pushforward_batched",
    "eig_batched",
    "eigvals_batched",
    "eig_pullback_batched!",
    "eig_pushforward_batched",
    "eig_topk_dense",
    "eig_topk_pullback_dense!",
    "linsolve_dense",
    "linsolve_pullback_dense!",
    "eig_function_eigenbasis_batched",
    "eig_function_apply_batched",
    "eig_function_pullback_batched!",
    "eig_function_pushforward_batched",
    "user_eval",
    "user_include",
    "function_forward",
    "function_pullback",
)


def _probed() -> str | None:
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
    reason = _probed()
    return (True, "installed (not started yet)") if reason is None else (False, reason)


def glue() -> Any:
    """The glue module, starting Julia on first use (BackendError if it cannot)."""
    with _lock:
        if _state["glue"] is not None:
            return _state["glue"]
        if _state["error"] is not None:
            raise BackendError("Julia backend unavailable: " + _state["error"])
        reason = _probed()
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


def julia_blas() -> str | None:
    """Julia's BLAS (the libraries libblastrampoline forwards to, with their
    interfaces) once Julia has started here, else None."""
    if _state["glue"] is None:
        return None
    return getattr(runtime, "blas", None)


def reset() -> None:
    """Forget the runtime state (for tests that swap ``runtime``)."""
    with _lock:
        _state.update(
            glue=None, fns=None, enter=None, owner=None, error=None, probe=(), threads=0
        )


def call(op: str, name: str, *args: Any, elements: int | None = None) -> Any:
    """Call glue function ``name`` with positional ``args`` under the lock,
    through the glue's ``logged`` (``_state["enter"]``), and return its value.
    Julia's warnings are re-emitted as Python warnings and Julia's exceptions
    raised as pyspectral errors (:func:`error`). ``elements``: the entries of
    one matrix of the call, which set Julia's BLAS threads for it
    (:func:`pyspectral.julia._blas.threads_for`); None (calls that are no
    linear algebra of ours: a user's function, a test set) leaves them."""
    with _lock:
        fns = _state["fns"]
        if fns is None:
            glue()
            fns = _state["fns"]
        if elements is not None:
            threads = threads_for(elements)
            if threads != _state["threads"]:
                # a bookkeeping call, not through ``enter``: a spy sees data calls
                _state["threads"] = int(fns["set_blas_threads"](threads))
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


def present(*cotangents: Any) -> tuple[torch.Tensor, ...]:
    return tuple(g for g in cotangents if g is not None)


def pullback(
    op: str,
    name: str,
    scale: tuple,
    opts: Any,
    *args: Any,
    elements: int,
    weights: bool = True,
) -> None:
    """Run a pullback glue function, then the gauge policy on the violations
    ``(op, measured, tol)`` it returns, recorded by this call alone (``scale``:
    the cotangents that set the gauge tolerance, as natively). ``weights``:
    whether the first-order check of unequal weights on a cluster applies
    (not in a second-order call, which checks its own)."""
    records = call(op, name, *args, elements=elements)
    recorded = [
        (str(o), float(v), float(t))
        for o, v, t in records
        if weights or not str(o).endswith(WEIGHTS)
    ]
    if recorded:
        apply_gauge_records(recorded, scale, opts)


def with_native_domain_error(batch: tuple, native_check: Any, run: Any) -> Any:
    """``run()``, whose Julia domain error is raised as the native one."""
    try:
        return run()
    except DomainError as err:
        spectrum = getattr(err, "julia_spectrum", None)
        if spectrum is None or native_check is None:
            raise
        native_domain_error(err, from_julia_vectors(spectrum, batch), native_check)
        raise


# The forward settings of Julia's top-k blocks, in the order the glue takes them
# (topk.py's _julia_settings gives them by name).
TOPK_SETTINGS = (
    "method",
    "oversample",
    "n_iter",
    "rtol",
    "maxiter",
    "degeneracy_atol",
)
