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
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .exceptions import BackendError, DomainError, GaugeError, InputError, JuliaError

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

    def probe(self) -> str | None:
        """``None`` if Julia and the packages are installed, else why not.
        Fast: never downloads or starts anything."""
        if "juliacall" in sys.modules:
            return None
        if importlib.util.find_spec("juliacall") is None:
            return (
                "juliacall is not installed: pip install 'pyspectral[julia]', then "
                + INSTALL_HINT[0].lower()
                + INSTALL_HINT[1:]
            )
        import juliapkg

        can_skip = getattr(getattr(juliapkg, "deps", None), "can_skip_resolve", None)
        if can_skip is not None and not can_skip():
            return "Julia or the PySpectral Julia package is not installed yet. " + (
                INSTALL_HINT
            )
        return None

    def start(self) -> Any:
        """Import juliacall, load PySpectral and the glue; return the glue module."""
        for key, value in (("PYTHON_JULIACALL_HANDLE_SIGNALS", "yes"),):
            os.environ.setdefault(key, value)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from juliacall import Main as jl
        for w in caught:
            if "torch" in str(w.message):
                warnings.warn(IMPORT_ORDER_WARNING, RuntimeWarning, stacklevel=4)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        jl.seval("using PySpectral")
        jl.include(str(GLUE))
        return jl.PySpectralGlue

    def describe(self, err: BaseException) -> tuple[str, str] | None:
        """``(kind, message)`` of a Julia exception, or None if ``err`` is not one."""
        juliacall = sys.modules.get("juliacall")
        if juliacall is None or not isinstance(err, juliacall.JuliaError):
            return None
        kind = str(juliacall.Main.PySpectralGlue.exception_kind(err.exception))
        return kind, str(err)


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
    # Probed once per process: backend="auto" asks on every call.
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
    """Call glue function ``name`` under the lock, translating Julia errors."""
    with _lock:
        g = glue()
        foreign = threading.current_thread() is not _state["owner"]
        if foreign:
            was_on = g.gc_enable(False)
        try:
            return getattr(g, name)(*args, **kwargs)
        except Exception as err:
            described = runtime.describe(err)
            if described is None:
                raise
            kind, message = described
            error = {"gauge": GaugeError, "domain": DomainError, "argument": InputError}
            raise error.get(kind, JuliaError)(f"{op} (Julia): {message}") from err
        finally:
            if foreign:
                g.gc_enable(was_on)


def gauge_records() -> list[tuple[str, float, float]]:
    """Gauge violations recorded by the last pullbacks under ``gauge="warn"``."""
    return [
        (str(op), float(v), float(t)) for op, v, t in call("gauge", "take_gauge_log")
    ]


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


def gradient_buffer(shape_dtype: tuple) -> torch.Tensor:
    """A zeroed C-contiguous gradient that Julia's pullbacks write into."""
    shape, dtype = shape_dtype
    return torch.zeros(shape, dtype=dtype)


def options(opts: Any) -> dict[str, Any]:
    return {
        "degeneracy_atol": opts.degeneracy_atol,
        "broadening": opts.broadening,
        "gauge": opts.gauge,
        "gauge_atol": opts.gauge_atol,
    }


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
    call(
        "svd",
        "svd_pullback_batched!",
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


def svdvals(A: torch.Tensor) -> torch.Tensor:
    check_tensor("svdvals", A)
    return from_julia_vectors(
        call("svdvals", "svdvals_batched", to_julia(A)), A.shape[:-2]
    )


def svd_function(A: torch.Tensor, f: Any, opts: Any) -> tuple:
    """``(Y, S, handles)``; ``S`` (sharing Julia's memory) lets the caller run
    the truncation check of the native backend, with the same message."""
    check_tensor("svd_function", A)
    Yj, *handles = call(
        "svd_function",
        "svd_function_batched",
        to_julia(A),
        f,
        degeneracy_atol=opts.degeneracy_atol,
    )
    batch = A.shape[:-2]
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


def svd_topk(A: torch.Tensor, k: int, oversample: int, n_iter: int) -> tuple:
    check_tensor("svd", A)
    batch = A.shape[:-2]
    Uj, Sj, Vtj = call(
        "svd", "svd_topk_batched", to_julia(A), k, oversample=oversample, n_iter=n_iter
    )
    U, Vh = from_julia(Vtj, batch), from_julia(Uj, batch)
    return (U, from_julia_vectors(Sj, batch), Vh), (Uj, Sj, Vtj)


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
    gA = gradient_buffer((A.shape, A.dtype))
    call(
        "svd",
        "svd_trunc_pullback_batched!",
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
    call(
        "eigh",
        "eigh_pullback_batched!",
        to_julia(gA),
        wj,
        Vj,
        None if gw is None else to_julia_vectors(gw),
        None if gV is None else to_julia_matrices(gV),
        _SWAP[uplo],
        **options(opts),
    )
    return gA


def eigh_topk(
    A: torch.Tensor, k: int, uplo: str, oversample: int, n_iter: int
) -> tuple:
    check_tensor("eigh", A)
    batch = A.shape[:-2]
    wj, Vj = call(
        "eigh",
        "eigh_topk_batched",
        to_julia(A),
        k,
        _SWAP[uplo],
        oversample=oversample,
        n_iter=n_iter,
    )
    V = julia_matrices(Vj)  # conjugated in place by the glue, as for eigh
    return (from_julia_vectors(wj, batch), V.reshape(*batch, *V.shape[-2:])), (wj, Vj)


def eigh_trunc_pullback(
    A: torch.Tensor,
    handles: tuple,
    gw: Any,
    gV: Any,
    uplo: str,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> torch.Tensor:
    wj, Vj = handles
    gA = gradient_buffer((A.shape, A.dtype))
    call(
        "eigh",
        "eigh_trunc_pullback_batched!",
        to_julia(gA),
        to_julia(A),
        wj,
        Vj,
        None if gw is None else to_julia_vectors(gw),
        None if gV is None else to_julia_matrices(gV),
        _SWAP[uplo],
        rtol=rtol,
        maxiter=maxiter,
        **options(opts),
    )
    return gA


def matrix_function(A: torch.Tensor, f: Any, uplo: str, opts: Any) -> tuple:
    check_tensor("matrix_function", A)
    Yj, *handles = call(
        "matrix_function",
        "matrix_function_batched",
        to_julia(A),
        f,
        _SWAP[uplo],
        degeneracy_atol=opts.degeneracy_atol,
    )
    return from_julia(Yj, A.shape[:-2]), tuple(handles)


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


# ------------------------------------------- f given by its values (user pairs)
# A user's (f, f_prime) pair is Python code, which Julia cannot call. Julia
# decomposes (the svd_batched / eigh_batched glue), ``values`` evaluates f and
# f' on that spectrum in Python (it receives the spectrum as a tensor sharing
# Julia's memory and returns real tensors of its shape and dtype), and the glue
# forms Y and later the pullback from the values (PySpectral.SpectralValues).
# The values cross like S: (*, k) tensors as column-major (k, B) views.

SpectralValuesFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def svd_function_values(A: torch.Tensor, values: SpectralValuesFn) -> tuple:
    """``(Y, handles)`` of ``Y = U f(S) Vh``, ``(fS, dS) = values(S)``."""
    check_tensor("svd_function", A)
    batch = A.shape[:-2]
    Uj, Sj, Vtj = call("svd_function", "svd_batched", to_julia(A), False)
    fS, dS = values(from_julia_vectors(Sj, batch))
    Yj = call(
        "svd_function",
        "svd_function_values_batched",
        Uj,  # Julia's factors of the transposes: Y arrives transposed, as A did
        Sj,
        Vtj,
        to_julia_vectors(fS),
        to_julia_vectors(dS),
    )
    return from_julia(Yj, batch), (Uj, Sj, Vtj, fS, dS)


def svd_function_values_pullback(
    shape_dtype: tuple, handles: tuple, gY: torch.Tensor
) -> torch.Tensor:
    Uj, Sj, Vtj, fS, dS = handles
    gA = gradient_buffer(shape_dtype)
    call(
        "svd_function",
        "svd_function_values_pullback_batched!",
        to_julia(gA),
        Uj,
        Sj,
        Vtj,
        to_julia_vectors(fS),
        to_julia_vectors(dS),
        to_julia(gY),
    )
    return gA


def matrix_function_values(
    A: torch.Tensor, uplo: str, values: SpectralValuesFn
) -> tuple:
    """``(Y, handles)`` of ``Y = V f(w) V^H``, ``(fw, dw) = values(w)``."""
    check_tensor("matrix_function", A)
    batch = A.shape[:-2]
    wj, Vj = call("matrix_function", "eigh_batched", to_julia(A), _SWAP[uplo])
    fw, dw = values(from_julia_vectors(wj, batch))
    Yj = call(
        "matrix_function",
        "matrix_function_values_batched",
        wj,
        Vj,  # conjugated in place by eigh_batched: Python's V
        to_julia_vectors(fw),
        to_julia_vectors(dw),
    )
    return from_julia(Yj, batch), (wj, Vj, fw, dw)


def matrix_function_values_pullback(
    shape_dtype: tuple, handles: tuple, gY: torch.Tensor, uplo: str
) -> torch.Tensor:
    wj, Vj, fw, dw = handles
    gA = gradient_buffer(shape_dtype)
    call(
        "matrix_function",
        "matrix_function_values_pullback_batched!",
        to_julia(gA),
        wj,
        Vj,
        to_julia_vectors(fw),
        to_julia_vectors(dw),
        to_julia(gY),
        _SWAP[uplo],
    )
    return gA


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
