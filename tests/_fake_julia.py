"""A numpy stand-in for pyspectral's Julia glue (``pyspectral/julia/glue.jl``).

It sits behind the one seam of the bridge, ``pyspectral.julia._bridge.runtime``, and
behaves like the real glue on Julia's side of the layout and of the memory
crossing. A tensor arrives as the glue receives it, ``(address, code, dims...)``,
and the stand-in's ``_wrap`` makes of it what the glue's ``wrap`` makes
(``unsafe_wrap``): an array over that very memory, column-major (a C-contiguous
``(B, m, n)`` batch is the ``n x m x B`` array ``At`` of its transposes). It
decomposes the transposes with ``numpy.linalg`` and returns each result as the
glue's ``out`` does, ``(array, address, dims, code)`` of a Fortran-ordered array
it owns, which the bridge wraps for torch. An array passed back must be such a
result (a handle); any other numpy array reaching a built-in op fails the test:
Julia would get PythonCall's ``PyArray``, whose products are not BLAS. Arguments
are positional, as the glue takes them. The pullbacks run pyspectral's native
torch pullbacks on the glue's own (transposed-role) data and write the result
in place into the ``dAt`` array they receive, so a test that compares against
the native backend checks every role swap the bridge makes, and a test of
pointers checks that the gradient buffer is shared. The pushforwards (forward
mode) likewise run the native pushforwards on that data.

Errors and warnings come back in the real glue's shapes, so that the bridge's
translation into the native backend's errors and warnings is what is tested:
a domain error is a Julia ``DomainError`` text (1-based index, no batch
element) with the spectra attached (the glue's ``SpectrumError``); a pullback
measures the gauge dependence only when the bridge asks (its ``gauge`` flag,
false for "ignore"), records the violations in a recorder of its own
(PySpectral's ``GaugeRecorder``), and returns them as its value, as the glue's
pullbacks do; the top-k warnings are Julia log records with Julia's text
(julia/PySpectral/src); every call goes through ``logged``, which returns
``(value, logs)``.

Everything it receives is recorded (:class:`Call`): array pointers, dtypes,
shapes, strides, the calling thread and whether "Julia's" GC was enabled.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from pyspectral import topk as TK
from pyspectral._fns import SpectralFn
from pyspectral._settings import Options
from pyspectral.eig_topk import eig_topk as native_eig_topk
from pyspectral.eigfun import _named_fn as eigfun_named
from pyspectral.eigh import _matfun
from pyspectral.exceptions import (
    DomainError,
    GaugeError,
    GaugeWarning,
    InputError,
    InputTypeError,
    PySpectralError,
)
from pyspectral.forward import topk as T
from pyspectral.forward.truncation import (
    TruncationRule,
    _multiplet_cut,
    truncation_rank,
)
from pyspectral.julia import _bridge, _convert
from pyspectral.linsolve import linsolve as native_linsolve
from pyspectral.polar import _native as native_polar
from pyspectral.pullbacks.eig import check_diagonalizable, eig_pullback, eig_pushforward
from pyspectral.pullbacks.eig_topk import eig_topk_pullback
from pyspectral.pullbacks.eigfun import eig_function_pullback, eig_function_pushforward
from pyspectral.pullbacks.eigh import (
    eigh_pullback,
    eigh_pushforward,
    fold_triangle,
    hermitian_from_triangle,
)
from pyspectral.pullbacks.linsolve import linsolve_pullback
from pyspectral.pullbacks.matfun import (
    matrix_function_pullback,
    matrix_function_pushforward,
)
from pyspectral.pullbacks.qr import positive_gauge, qr_pullback, qr_pushforward
from pyspectral.pullbacks.split import svd_split_pullback, svd_split_pushforward
from pyspectral.pullbacks.svd import (
    svd_function_pullback,
    svd_function_pushforward,
    svd_pullback,
    svd_pushforward,
)
from pyspectral.pullbacks.truncated import (
    dense_truncated_eigh_pullback,
    dense_truncated_eigh_pushforward,
    dense_truncated_svd_pullback,
    dense_truncated_svd_pushforward,
    pad_block,
    truncated_eigh_pullback,
    truncated_eigh_pushforward,
    truncated_svd_pullback,
    truncated_svd_pushforward,
)
from pyspectral.svd import _svd_fn

# --------------------------------------------- PySpectral.jl's top-k, per matrix
# julia/PySpectral/src/forward/topk.jl and pullbacks/truncated.jl port the native
# algorithm (certified subspace iteration, deflated CG backward); the stand-in runs
# the native implementation on one matrix of Julia's side of the layout, as Julia's
# svd_topk_block / eigh_topk_block, svd_trunc_pullback! / eigh_trunc_pullback! and
# truncated_svd_pushforward / truncated_eigh_pushforward do, with their decisions (full
# path, dense fallback) and their log records.


def _uncertified_kwargs(why: str, cfg: T.TopKConfig) -> tuple:
    """The keyword arguments of Julia's not-certified record, from the native
    reason (forward/topk.py's words)."""
    m = _WHY_RESIDUAL.match(why)
    if m is None:  # the cluster extends past the block
        return (("reason", "cluster"), ("residual", 0.0), ("p", cfg.p))
    stop = {"; it is not converging": "stalled"}.get(m[4], "budget" if m[4] else "")
    return (
        ("reason", "residual"),
        ("residual", float(m[2])),
        ("iterations", int(m[1])),
        ("tol", cfg.tol),
        ("stop", stop),
        ("p", cfg.p),
    )


_WHY_RESIDUAL = re.compile(
    r"after (\d+) iterations? the largest relative residual .* needed is (\S+) "
    r"\(tolerance (\S+)\)(.*)$"
)


def _topk_blocks(block: Callable, batch: int, method: str) -> list[tuple]:
    """The glue's ``topk_blocks``: each element's block; when some took the
    full path (a wider block), the others take it too."""
    blocks = [block(b, method) for b in range(batch)]
    width = max(map(_width, blocks))
    return [x if _width(x) == width else block(b, "full") for b, x in enumerate(blocks)]


def _width(block: tuple) -> int:
    """Number of pairs in a block: the length of its spectrum."""
    return next(a.shape[0] for a in block if isinstance(a, np.ndarray) and a.ndim == 1)


def _kept_count(*cotangents: torch.Tensor | None) -> int:
    dS = cotangents[1]
    if dS is not None:
        return dS.shape[-1]
    return (
        cotangents[0].shape[-1]
        if cotangents[0] is not None
        else cotangents[2].shape[-2]
    )


def pointer(a: np.ndarray) -> int:
    """Address of the first element, as Julia's ``pointer(x)`` would report."""
    return a.__array_interface__["data"][0]


class FakeJuliaError(Exception):
    """What ``juliacall.JuliaError`` is to the real runtime; ``describe`` gives
    what the glue's ``error_description`` would: ``(kind, message, spectrum)``."""

    def __init__(self, kind: str, message: str, spectrum: Any = None):
        super().__init__(message)
        self.kind, self.message, self.spectrum = kind, message, spectrum


# ----------------------------------------------- PySpectral.jl's own texts
# As julia/PySpectral/src words them (test_fake_julia_texts_match_the_package
# checks that the fixed parts are there).

JULIA_UNCERTIFIED = (
    "{op}_topk(k={k}, method=:randomized): not certified: {why}. The result is "
    "approximate; use method=:auto (which falls back to the full {full}), or raise "
    "n_iter or oversample."
)
JULIA_UNCONVERGED = (
    "{op}_topk backward: the Sylvester solve did not converge in {maxiter} "
    "iterations (relative residual {residual}): there is no gap between the kept "
    "spectrum and the rest beyond the certified block, and the matrix is too large "
    "for the exact dense fallback. The gradient is approximate; use method=:full, a "
    "k at a gap, or a larger oversample."
)
# the same record from truncated_svd_pushforward / truncated_eigh_pushforward
JULIA_UNCONVERGED_PUSHFORWARD = (
    "{op}_topk pushforward: the Sylvester solve did not converge in {maxiter} "
    "iterations (relative residual {residual}): there is no gap between the kept "
    "spectrum and the rest beyond the certified block, and the matrix is too large "
    "for the exact dense fallback. The tangent is approximate; use method=:full, a "
    "k at a gap, or a larger oversample."
)


def _eps34(dtype: np.dtype) -> float:
    return float(np.finfo(dtype).eps) ** 0.75


def julia_matrix_domain_error(f: Any, w: np.ndarray, atol: Any) -> str | None:
    """The DomainError text PySpectral.jl's matrix_function_values throws for
    the ascending eigenvalues ``w`` (matfun.jl ``_positive_spectrum``), or None."""
    if f in ("log", "invsqrt"):
        name, strict = f":{f}", True
    elif f == "sqrt":
        name, strict = ":sqrt", False
    elif isinstance(f, tuple) and f[0] == "pow" and not (f[1] == int(f[1]) >= 0):
        name, strict = f"(:pow, {f[1]})", f[1] < 0
    else:
        return None
    tol = np.abs(w).max() * _eps34(w.dtype) if atol is None else atol
    bad = np.flatnonzero(w <= 0 if strict else w < -tol)
    if bad.size == 0:
        return None
    i, value = int(bad[0]) + 1, float(w[bad[0]])
    need = "positive definite" if strict else "positive semidefinite"
    return (
        f"DomainError with {value!r}:\nmatrix_function: {name} needs a {need} "
        f"input, but eigenvalue {i} (1-based, ascending) is λ[{i}] = {value!r}. "
        "Shift the spectrum (A + c*I) or use a function defined there."
    )


def julia_svd_domain_error(f: Any, S: np.ndarray, atol: Any) -> str | None:
    """The DomainError text of PySpectral.jl's svd_function_values for the
    descending singular values ``S`` (``(:pow, p)``, ``p < 0``), or None."""
    if not (isinstance(f, tuple) and f[0] == "pow" and f[1] < 0):
        return None
    tol = np.abs(S).max() * _eps34(S.dtype) if atol is None else atol
    bad = np.flatnonzero(tol >= S)
    if bad.size == 0:
        return None
    i, value = int(bad[0]) + 1, float(S[bad[0]])
    return (
        f"DomainError with {value!r}:\nsvd_function: (:pow, {f[1]}) needs nonzero "
        f"singular values, but S[{i}] = {value!r} is numerically zero (<= "
        f"degeneracy_atol {tol!r}). Use p >= 0 or regularise A."
    )


def _kind(err: PySpectralError) -> str:
    # The real glue's exception_kind, applied to the native errors that the
    # Julia package throws as GaugeError / DomainError / ArgumentError.
    if isinstance(err, GaugeError):
        return "gauge"
    if isinstance(err, DomainError):
        return "domain"
    if isinstance(err, (InputError, InputTypeError)):
        return "argument"
    return "other"


@dataclass
class Seen:
    """One array argument as the glue received it."""

    pointer: int
    dtype: np.dtype
    shape: tuple
    strides: tuple
    f_contiguous: bool
    c_contiguous: bool
    writeable: bool

    @classmethod
    def of(cls, a: np.ndarray) -> Seen:
        return cls(
            pointer(a),
            a.dtype,
            a.shape,
            a.strides,
            a.flags.f_contiguous,
            a.flags.c_contiguous,
            a.flags.writeable,
        )


@dataclass
class Call:
    """One call of a glue function."""

    name: str
    args: list  # Seen for arrays, the value itself otherwise
    named: dict  # every argument by the glue function's parameter names
    thread: int
    gc_enabled: bool
    returned: list = field(default_factory=list)  # Seen of each array returned


def _flatten(x: Any) -> Iterator[Any]:
    if isinstance(x, (tuple, list)):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


def _stack(xs: list[np.ndarray]) -> np.ndarray:
    """Julia's ``stack``: a trailing batch axis, column-major."""
    return np.asfortranarray(np.stack(xs, axis=-1))


def _hermitian(At_b: np.ndarray, uplo: str) -> torch.Tensor:
    """``Hermitian(At_b, uplo)`` as Julia reads it: one triangle mirrored."""
    H = torch.from_numpy(np.ascontiguousarray(At_b))
    if uplo == "L":
        return torch.tril(H) + torch.tril(H, -1).mH
    return torch.triu(H) + torch.triu(H, 1).mH


def _t(x: np.ndarray | None, b: int) -> torch.Tensor | None:
    """Batch element ``b`` of a glue argument as a tensor sharing its memory."""
    return None if x is None else torch.from_numpy(x[..., b])


_GAUGE_TEXT = re.compile(r"^(\w+): .*measured (\S+) > gauge_atol (\S+)\)", re.DOTALL)
# A rank-deficient QR / LQ: Julia records it as "op:rank"
_RANK_TEXT = re.compile(
    r"^(\w+): A is rank deficient.*measured (\S+) > gauge_atol (\S+)\)", re.DOTALL
)
# A thin QR / LQ at rank deficiency, what no cotangent carries: "op:lost"
_LOST_TEXT = re.compile(
    r"^(\w+): A is rank deficient .* and Q is thin.*measured (\S+) > gauge_atol "
    r"(\S+)\)",
    re.DOTALL,
)
# A complete QR / LQ's complement basis: "op:complement"
_COMPLEMENT_TEXT = re.compile(
    r"^(\w+): the incoming gradient depends on the basis of Q's last.*measured "
    r"(\S+) > gauge_atol (\S+)\)",
    re.DOTALL,
)
# Unequal weights on a cluster: Julia records them as "op:weights"
_WEIGHTS_TEXT = re.compile(r"^(\w+): .*\(spread (\S+) > allowed (\S+)\)", re.DOTALL)
# A tangent that splits a cluster (eig's forward mode): Julia records "op:split"
_SPLIT_TEXT = re.compile(
    r"^(\w+): forward mode at a degenerate cluster.*measured (\S+) > allowed (\S+)\)",
    re.DOTALL,
)


class _GaugeRecorder:
    """PySpectral's ``GaugeRecorder``, one per pullback call: the native
    pullbacks, run under gauge="warn" inside it, report each violation as a
    ``GaugeWarning``, which it records as ``(op, measured, tol)``; any other
    warning passes on. ``records`` is what the glue's pullback returns."""

    def __init__(self) -> None:
        self.records: list[tuple[str, float, float]] = []
        self._catch = warnings.catch_warnings(record=True)

    def __enter__(self) -> _GaugeRecorder:
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._catch.__exit__(*exc)
        for w in self._caught:
            gauge = _GAUGE_TEXT.match(str(w.message))
            weights = _WEIGHTS_TEXT.match(str(w.message))
            rank = _RANK_TEXT.match(str(w.message))
            split = _SPLIT_TEXT.match(str(w.message))
            lost = _LOST_TEXT.match(str(w.message))
            complement = _COMPLEMENT_TEXT.match(str(w.message))
            if issubclass(w.category, GaugeWarning) and lost:
                op, measured, tol = lost.groups()
                self.records.append((f"{op}:lost", float(measured), float(tol)))
            elif issubclass(w.category, GaugeWarning) and complement:
                op, measured, tol = complement.groups()
                self.records.append((f"{op}:complement", float(measured), float(tol)))
            elif issubclass(w.category, GaugeWarning) and split:
                op, measured, tol = split.groups()
                self.records.append((f"{op}:split", float(measured), float(tol)))
            elif issubclass(w.category, GaugeWarning) and rank:
                op, measured, tol = rank.groups()
                self.records.append((f"{op}:rank", float(measured), float(tol)))
            elif issubclass(w.category, GaugeWarning) and gauge:
                op, measured, tol = gauge.groups()
                self.records.append((op, float(measured), float(tol)))
            elif issubclass(w.category, GaugeWarning) and weights:
                op, measured, tol = weights.groups()
                self.records.append((f"{op}:weights", float(measured), float(tol)))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _pullback_options(
    degeneracy_atol: Any, broadening: Any, gauge: bool, gauge_atol: Any
) -> tuple[Options, _GaugeRecorder]:
    """The glue's ``pullback_options``: ``gauge`` is the bridge's flag (false:
    "ignore", nothing measured); the native pullbacks report under "warn" what
    the recorder keeps."""
    if not isinstance(gauge, bool):
        raise AssertionError(f"gauge must arrive as a Bool, got {gauge!r}")
    policy = "warn" if gauge else "ignore"
    return Options(degeneracy_atol, broadening, policy, gauge_atol), _GaugeRecorder()


def _check_argument(name: str, x: Any) -> None:
    """Only what juliacall converts to the types the glue's methods expect:
    None/bool/int/float/complex/str and tuples of them (Julia values and
    Tuples: the tensors' ``(address, code, dims...)`` among them), handles the
    glue returned, or callables. A Python list would arrive as
    ``PyList{Py}``, a dict as ``PyDict{Py,Py}``: wrong there."""
    if isinstance(x, tuple):
        for y in x:
            _check_argument(name, y)
        return
    ok = (np.ndarray, type(None), bool, int, float, complex, str, FakeFunction)
    if not (isinstance(x, ok) or callable(x)):
        raise AssertionError(
            f"{name}: a {type(x).__name__} argument would not arrive in Julia as "
            "the glue expects"
        )
    if isinstance(x, np.ndarray) and x.dtype.kind not in "fc":
        raise AssertionError(f"{name}: array of dtype {x.dtype} sent to Julia")


# The glue's element type codes (its ELTYPES; pyspectral/julia/_convert.py's _CODES).
_CODES = {np.dtype(t): code for code, t in _convert._NUMPY.items()}


def _memory(address: int, code: int, dims: tuple[int, ...]) -> np.ndarray:
    """``unsafe_wrap(Array, Ptr{T}(address), dims)``: the column-major array
    over that memory (no copy; the caller keeps it alive)."""
    return _convert._numpy((None, address, dims, code)).transpose()


def _is_op(name: str) -> bool:
    """The built-in ops (not the test runner, user functions or GC)."""
    return name.endswith(("_batched", "_batched!", "_dense", "_dense!"))


def _stored_values(fX: np.ndarray, dX: np.ndarray, b: int) -> SpectralFn:
    """``PySpectral.SpectralValues(view(fX, :, b), view(dX, :, b))``: ``f``
    given by its values, which svd_function_values / matrix_function_values
    return after checking their length against the spectrum
    (``DimensionMismatch``, an "argument" error)."""
    f, d = _t(fX, b), _t(dX, b)

    def values(x: torch.Tensor, opts: Options) -> tuple:
        if f.shape != x.shape:
            raise InputError(
                f"DimensionMismatch: SpectralValues holds {f.shape[0]} values, but "
                f"the spectrum has {x.shape[0]} points"
            )
        return f, d

    return SpectralFn("values", values)


# --------------------------------------------------------- user functions


@dataclass
class FakeFunction:
    """A Julia function as ``user_eval`` returns it: forward, the cotangents
    of its arguments given the output cotangent, and which rule Julia uses."""

    source: str
    forward: Callable[..., Any]
    back: Callable[..., tuple]
    rule: str


def _inv_back(yb: np.ndarray, x: np.ndarray) -> tuple:
    Y = np.linalg.inv(x)
    return (-Y.conj().T @ yb @ Y.conj().T,)


USER_FUNCTIONS = {
    f.source: f
    for f in (
        FakeFunction(
            "logdet",
            lambda x: float(np.linalg.slogdet(x)[1]),
            lambda yb, x: (yb * np.linalg.inv(x).T,),
            "rrule",
        ),
        FakeFunction("inv", np.linalg.inv, _inv_back, "rrule"),
        FakeFunction(
            "x -> sum(abs2, x)",
            lambda x: float(np.sum(np.abs(x) ** 2)),
            lambda yb, x: (2 * yb * x,),
            "zygote",
        ),
        FakeFunction(
            "(x, y) -> x * y",
            lambda x, y: x @ y,
            lambda yb, x, y: (yb @ y.conj().T, x.conj().T @ yb),
            "zygote",
        ),
        FakeFunction(
            "x -> (sum(x), 2x)",
            lambda x: (float(np.sum(x)), 2 * x),
            lambda yb, x: (yb[0] * np.ones_like(x) + 2 * yb[1],),
            "zygote",
        ),
        FakeFunction(
            "(x, n) -> n * sum(x)",
            lambda x, n: float(n * np.sum(x)),
            lambda yb, x, n: (n * yb * np.ones_like(x), float(yb * np.sum(x))),
            "zygote",
        ),
    )
}


def _julia_value(x: Any) -> Any:
    # The glue's julia_value: arrays become plain (column-major) Arrays.
    if isinstance(x, np.ndarray):
        return np.array(x, order="F")
    if isinstance(x, tuple):
        return tuple(map(_julia_value, x))
    return x


def _python_value(y: Any) -> Any:
    if isinstance(y, np.ndarray):
        return np.asfortranarray(y)
    if isinstance(y, tuple):
        return tuple(map(_python_value, y))
    return y


# -------------------------------------------------------------- the glue


class FakeJulia:
    """The runtime seam (``probe``, ``start``, ``describe``) and, behind it,
    the glue functions of ``glue.jl`` with their exact argument conventions.

    ``probe_reason``/``start_error`` simulate Julia missing / failing to start.
    """

    def __init__(
        self, probe_reason: str | None = None, start_error: BaseException | None = None
    ) -> None:
        self.probe_reason, self.start_error = probe_reason, start_error
        self.probes = self.starts = 0
        self.calls: list[Call] = []
        self.gc_on = True
        self.gc_log: list[tuple[int, bool]] = []  # (thread, on) per gc_enable
        self.blas_threads = 1  # Julia's BLAS threads (set_blas_threads)
        self.threads_log: list[int] = []  # every set_blas_threads
        # every result alive, by id: what may come back as a handle
        self._handles: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._current: Call | None = None
        self.log_records: list[tuple] = []  # (level, message, module, group, kwargs)
        self.delay = 0.0  # seconds each call takes (to provoke races)
        self.reentered = False
        self.failures: dict[str, BaseException] = {}
        self.missing: list[str] = []
        self.testsets: dict[str, tuple[int, list[str]]] = {}
        self._active = False
        self._guard = threading.Lock()

    # ------------------------------------------------------------ the seam

    def probe(self) -> str | None:
        self.probes += 1
        return self.probe_reason

    def start(self) -> types.SimpleNamespace:
        self.starts += 1
        if self.start_error is not None:
            raise self.start_error
        glue = types.SimpleNamespace(logged=self.logged)
        for name in _bridge.GLUE_FUNCTIONS:
            impl = getattr(self, name.replace("!", "_b"))
            if name == "set_blas_threads":
                # bookkeeping, as in Julia: in threads_log, not among the calls
                setattr(glue, name, impl)
                continue
            setattr(glue, name, functools.partial(self._run, name, impl))
        return glue

    def describe(self, err: BaseException) -> tuple[str, str, Any] | None:
        if isinstance(err, FakeJuliaError):
            spectrum = None if err.spectrum is None else self._out(err.spectrum)
            return err.kind, err.message, spectrum
        return None

    def logged(self, f: Callable, *args: Any) -> tuple:
        """The glue's ``logged``: ``f(args...)`` with its warnings collected.
        Positional arguments only, as the bridge passes them."""
        self.log_records = []
        value = f(*args)
        logs = tuple(self.log_records)
        self.log_records = []
        return value, logs

    # ---------------------------------------------------------- recording

    def calls_to(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def fail(self, name: str, err: BaseException) -> None:
        """Make the next call of glue function ``name`` raise ``err``."""
        self.failures[name] = err

    def _run(self, name: str, fn: Callable, *args: Any) -> Any:
        with self._guard:
            if self._active:
                self.reentered = True
                raise AssertionError(f"fake Julia re-entered by {name}")
            self._active = True
        try:
            for a in args:
                _check_argument(name, a)
                if _is_op(name) and isinstance(a, np.ndarray):
                    self._check_handle(name, a)
            seen = [Seen.of(a) if isinstance(a, np.ndarray) else a for a in args]
            named = inspect.signature(fn).bind(*args).arguments
            call = Call(name, seen, dict(named), threading.get_ident(), self.gc_on)
            self.calls.append(call)
            self._current = call
            if self.delay:
                time.sleep(self.delay)
            if name in self.failures:
                raise self.failures.pop(name)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = fn(*args)
            except PySpectralError as err:
                raise FakeJuliaError(
                    _kind(err), f"{type(err).__name__}: {err}"
                ) from err
            for w in caught:
                if issubclass(w.category, GaugeWarning):
                    # Julia's glue never passes :warn: a pullback records
                    raise AssertionError(f"{name} warned outside a recorder: {w}")
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            if _is_op(name):
                out = self._outs(out)
            call.returned = [
                Seen.of(a) for a in _flatten(out) if isinstance(a, np.ndarray)
            ]
            return out
        finally:
            self._current = None
            self._active = False

    # ------------------------------------------------- the memory crossing

    def _wrap(self, x: Any) -> Any:
        """The glue's ``wrap``: a tensor's ``(address, code, dims...)`` as the
        column-major array over its memory, a handle (a result passed back) or
        None as itself. Records what it made in place of the argument."""
        if x is None or isinstance(x, np.ndarray):
            return x
        if not (isinstance(x, tuple) and len(x) in (4, 5)):
            raise AssertionError(f"not a tensor as the glue takes one: {x!r}")
        address, code, *dims = x
        a = _memory(address, code, tuple(dims))
        if self._current is not None:
            args = self._current.args
            for i, arg in enumerate(args):
                if arg is x:
                    args[i] = Seen.of(a)
        return a

    def _check_handle(self, name: str, a: np.ndarray) -> None:
        if self._handles.get(id(a)) is not a:
            raise AssertionError(
                f"{name}: a numpy array that is not a result of an earlier call "
                "reached a built-in op; Julia would get PythonCall's PyArray (no "
                "BLAS): pass tensors as (address, code, dims...)"
            )

    def _out(self, a: np.ndarray) -> tuple:
        """The glue's ``out``: ``(array, address, dims, code)`` of a result."""
        a = np.asfortranarray(a)
        self._handles[id(a)] = a
        return a, pointer(a), a.shape, _CODES[a.dtype]

    def _outs(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return self._out(value)
        if isinstance(value, tuple):
            return tuple(self._outs(v) for v in value)
        return value

    def _log(self, message: str, group: str, kwargs: tuple) -> None:
        """``@warn message kwargs...`` in PySpectral's file ``group``."""
        self.log_records.append(("Warn", message, "PySpectral", group, kwargs))

    # ------------------------------------------------------------ runtime

    def gc_enable(self, on: bool) -> bool:
        was, self.gc_on = self.gc_on, bool(on)
        self.gc_log.append((threading.get_ident(), bool(on)))
        return was

    def set_blas_threads(self, n: int) -> int:
        self.blas_threads = int(n)
        self.threads_log.append(int(n))
        return self.blas_threads

    def missing_packages(self, names: list[str]) -> list[str]:
        return [n for n in names if n in self.missing]

    def testset_names(self, path: str) -> list[str]:
        return list(self.testsets)

    def run_testset(self, path: str, name: str) -> tuple[int, list[str]]:
        if name not in self.testsets:
            raise FakeJuliaError(
                "argument", f'ArgumentError: no top-level @testset "{name}" in {path}'
            )
        return self.testsets[name]

    # ---------------------------------------------------------------- SVD

    def svd_batched(self, At: Any, full: bool) -> tuple:
        At = self._wrap(At)
        Us, Ss, Vts = [], [], []
        for b in range(At.shape[2]):
            U, S, Vt = np.linalg.svd(At[:, :, b], full_matrices=full)
            Us.append(U)
            Ss.append(S)
            Vts.append(Vt)
        return _stack(Us), _stack(Ss), _stack(Vts)

    def svdvals_batched(self, At: Any) -> np.ndarray:
        At = self._wrap(At)
        return _stack(
            [np.linalg.svd(At[:, :, b], compute_uv=False) for b in range(At.shape[2])]
        )

    def svd_pullback_batched_b(
        self, dAt, U, S, Vt, dU, dS, dVt, degeneracy_atol, broadening, gauge, gauge_atol
    ) -> tuple:
        dAt, dU, dS, dVt = map(self._wrap, (dAt, dU, dS, dVt))
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            for b in range(dAt.shape[2]):
                g = svd_pullback(
                    _t(U, b),
                    _t(S, b),
                    _t(Vt, b),
                    _t(dU, b),
                    _t(dS, b),
                    _t(dVt, b),
                    opts,
                )
                dAt[:, :, b] = 0 if g is None else g.numpy()
        return tuple(recorder.records)

    def svd_pushforward_batched(self, U, S, Vt, dAt, degeneracy_atol, broadening):
        # Julia's factors of the transposes pushed along the transposed tangent
        dAt = self._wrap(dAt)
        opts = Options(degeneracy_atol, broadening)
        out = [
            svd_pushforward(_t(U, b), _t(S, b), _t(Vt, b), _t(dAt, b), opts)
            for b in range(dAt.shape[2])
        ]
        return tuple(
            _stack([o[i].resolve_conj().numpy() for o in out]) for i in range(3)
        )

    def svd_split_pullback_batched_b(
        self, dAt, U, S, Vt, kept, absorb, dL, dR, degeneracy_atol
    ) -> tuple:
        dAt, U, S, Vt, kept, dL, dR = map(self._wrap, (dAt, U, S, Vt, kept, dL, dR))
        opts = Options(degeneracy_atol)
        outs = []
        for b in range(dAt.shape[2]):
            keep = torch.arange(S.shape[0]) < int(kept[0, b])
            gA, gU, gS, gVt = svd_split_pullback(
                _t(U, b), _t(S, b), _t(Vt, b), keep, absorb, _t(dL, b), _t(dR, b), opts
            )
            dAt[:, :, b] += gA.numpy()
            outs.append(
                (
                    np.zeros_like(U[..., b]) if gU is None else gU.numpy(),
                    gS.numpy(),
                    np.zeros_like(Vt[..., b]) if gVt is None else gVt.numpy(),
                )
            )
        return tuple(_stack([o[i] for o in outs]) for i in range(3))

    def svd_split_pushforward_batched(
        self, U, S, Vt, kept, absorb, dAt, dU, dS, dVt, degeneracy_atol
    ) -> tuple:
        U, S, Vt, kept, dAt, dU, dS, dVt = map(
            self._wrap, (U, S, Vt, kept, dAt, dU, dS, dVt)
        )
        opts = Options(degeneracy_atol)
        outs = []
        for b in range(dAt.shape[2]):
            keep = torch.arange(S.shape[0]) < int(kept[0, b])
            dL, dR = svd_split_pushforward(
                _t(U, b), _t(S, b), _t(Vt, b), keep, absorb, _t(dAt, b),
                _t(dU, b), _t(dS, b), _t(dVt, b), opts,
            )  # fmt: skip
            outs.append((dL.resolve_conj().numpy(), dR.resolve_conj().numpy()))
        return tuple(_stack([o[i] for o in outs]) for i in range(2))

    def svd_function_batched(self, At: Any, f: Any, degeneracy_atol: Any) -> tuple:
        At = self._wrap(At)
        fn = _svd_fn(f, min(At.shape[:2]))
        opts = Options(degeneracy_atol=degeneracy_atol, gauge="ignore")
        Us, Ss, Vts = zip(
            *(
                np.linalg.svd(At[:, :, b], full_matrices=False)
                for b in range(At.shape[2])
            )
        )
        Ys = []
        for U, S, Vt in zip(Us, Ss, Vts):  # as the glue: decompose all, then apply
            message = julia_svd_domain_error(f, S, degeneracy_atol)
            if message is not None:  # the glue's SpectrumError
                raise FakeJuliaError("domain", message, spectrum=_stack(list(Ss)))
            fS = fn(torch.from_numpy(S), opts)[0].numpy()
            Ys.append((U * fS) @ Vt)
        return _stack(Ys), _stack(list(Us)), _stack(list(Ss)), _stack(list(Vts))

    def svd_function_pullback_batched_b(
        self, dAt, U, S, Vt, f, dYt, degeneracy_atol
    ) -> None:
        dAt, dYt = self._wrap(dAt), self._wrap(dYt)
        fn = _svd_fn(f, min(dAt.shape[:2]))
        opts = Options(degeneracy_atol=degeneracy_atol)
        for b in range(dAt.shape[2]):
            g = svd_function_pullback(
                _t(U, b), _t(S, b), _t(Vt, b), fn, _t(dYt, b), opts
            )
            dAt[:, :, b] = g.numpy()

    def svd_function_pushforward_batched(
        self, U, S, Vt, f, dAt, degeneracy_atol
    ) -> np.ndarray:
        dAt = self._wrap(dAt)
        fn = _svd_fn(f, min(dAt.shape[:2]))
        opts = Options(degeneracy_atol=degeneracy_atol)
        return _stack(
            [
                svd_function_pushforward(
                    _t(U, b), _t(S, b), _t(Vt, b), fn, _t(dAt, b), opts
                ).numpy()
                for b in range(dAt.shape[2])
            ]
        )

    # -------------------------------------------------------------- top-k
    # Julia's svd_topk_block / eigh_topk_block per batch element (the whole batch
    # takes the full path when one element does), and the truncated pullbacks with
    # their full-path, dense-fallback and warning branches, by pyspectral's own
    # native implementation on Julia's side of the layout.

    def svd_topk_batched(
        self, At, k, method, oversample, n_iter, rtol, maxiter, degeneracy_atol
    ) -> tuple:
        At = self._wrap(At)
        kw = dict(
            oversample=oversample,
            n_iter=n_iter,
            rtol=rtol,
            maxiter=maxiter,
            degeneracy_atol=degeneracy_atol,
        )

        def block(b: int, method: str) -> tuple:
            A = torch.from_numpy(np.ascontiguousarray(At[:, :, b]))
            return self._svd_topk_block(A, k, method, **kw)

        blocks = _topk_blocks(block, At.shape[2], method)
        U, S, Vt, d = zip(*blocks)
        return _stack(list(U)), _stack(list(S)), _stack(list(Vt)), tuple(d)

    def _svd_topk_block(
        self, A, k, method, oversample, n_iter, rtol, maxiter, degeneracy_atol=None
    ) -> tuple:
        args = (k, method, oversample, n_iter, rtol, maxiter)
        path, cfg = T.top_k_method("svd", A, *args)
        if path == "iterative":
            opts = Options(degeneracy_atol=degeneracy_atol)
            ops = TK.dense_ops(A)
            res = T.svd_topk(*ops, tuple(A.shape), A.dtype, A.device, k, cfg, opts)
            if res is not None:
                self._uncertified("svd", k, res.message, cfg)
                return (
                    res.U.numpy(),
                    res.S.numpy(),
                    res.V.mH.resolve_conj().numpy(),
                    res.d,
                )
        U, S, Vt = torch.linalg.svd(A, full_matrices=False)
        return U.numpy(), S.numpy(), Vt.numpy(), S.shape[-1]

    # --------------------------------------------------------- truncation
    # PySpectral.jl's truncation_rank (src/forward/truncation.jl) ports the
    # native rules; the stand-in runs the native ones on each column.

    def truncation_ranks_batched(
        self,
        X: Any,
        k: Any,
        atol: Any,
        rtol: Any,
        error_atol: Any,
        error_rtol: Any,
        multiplets: str,
        min_rank: Any,
        degeneracy_atol: Any,
    ) -> tuple:
        X = self._wrap(X)  # k x B: one spectrum per column
        if X.dtype.kind != "f":
            raise AssertionError(f"truncation_ranks_batched: spectra of {X.dtype}")
        # Julia's tail_norms: summed from the smallest value in units of a power
        # of two, with a correctly rounded sqrt (numpy's, as Julia's), which
        # its discarded-weight rule compares; the other rules are the native ones
        K = X.shape[0]
        tails = np.zeros((K + 1, X.shape[1]), dtype=X.dtype, order="F")
        for b in range(X.shape[1]):
            m = np.abs(X[:, b]).max(initial=0.0)
            c = np.ldexp(1.0, np.frexp(m)[1]) if m > 0 else 1.0
            acc = 0.0
            for j in range(K - 1, -1, -1):
                acc += (X[j, b] / c) ** 2
                tails[j, b] = c * np.sqrt(acc) if acc > 0 else 0.0
        rest = TruncationRule(k, atol, rtol, None, None, "cut")
        ranks = []
        for b in range(X.shape[1]):
            x = torch.from_numpy(X[:, b].copy())
            r = int(truncation_rank(x, rest, degeneracy_atol))
            if error_atol is not None or error_rtol is not None:
                target = max(tails[0, b] * (error_rtol or 0.0), error_atol or 0.0)
                r = min(r, int((tails[:K, b] > target).sum()))
            if multiplets != "cut" and K:
                r = int(_multiplet_cut(x, torch.tensor(r), multiplets, degeneracy_atol))
            least = min(min_rank or 0, K if k is None else min(k, K))
            if r < least:
                r = least
                if multiplets == "up":
                    r = int(_multiplet_cut(x, torch.tensor(r), "up", degeneracy_atol))
            ranks.append(r)
        # Vector{Int64} and the (k+1) x B tails, through out()
        return np.array(ranks, dtype=np.int64), tails

    def _uncertified(self, op: str, k: int, why: str, cfg: T.TopKConfig) -> None:
        if why:
            full = "SVD" if op == "svd" else "eigh"
            message = JULIA_UNCERTIFIED.format(op=op, k=k, why=why, full=full)
            self._log(message, "topk", _uncertified_kwargs(why, cfg))

    def svd_trunc_pullback_batched_b(
        self,
        dAt,
        At,
        U,
        S,
        Vt,
        d,
        dU,
        dS,
        dVt,
        rtol,
        maxiter,
        degeneracy_atol,
        broadening,
        gauge,
        gauge_atol,
    ) -> tuple:
        dAt, At, dU, dS, dVt = map(self._wrap, (dAt, At, dU, dS, dVt))
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            for b in range(dAt.shape[2]):
                A = torch.from_numpy(np.ascontiguousarray(At[:, :, b]))
                cotangents = (_t(dU, b), _t(dS, b), _t(dVt, b))
                block = (_t(U, b), _t(S, b), _t(Vt, b).mH)
                g = self._svd_trunc_pullback(
                    A, block, d[b], cotangents, opts, rtol, maxiter
                )
                dAt[:, :, b] = 0 if g is None else g.numpy()
        return tuple(recorder.records)

    def _svd_trunc_pullback(self, A, block, d, cotangents, opts, rtol, maxiter):
        U, S, V = block
        k = _kept_count(*cotangents)
        Ud, Sd, Vd = U[:, :d], S[:d], V[:, :d]
        if d >= min(A.shape):
            padded = [pad_block(g, d, dim) for g, dim in zip(cotangents, (-1, -1, -2))]
            return svd_pullback(Ud, Sd, Vd.mH, *padded, opts)
        out = truncated_svd_pullback(
            *TK.dense_ops(A),
            Ud,
            Sd,
            Vd,
            k,
            *cotangents,
            opts,
            rtol,
            maxiter,
            (U[:, d:], S[d:]),
        )
        if out is None:
            return None
        P, Q, residual = out
        if residual > TK.RTOL_SLACK * rtol:
            if TK._small(A):
                return dense_truncated_svd_pullback(A, Ud, Sd, Vd, k, *cotangents, opts)
            self._unconverged("svd", maxiter, residual)
        return P @ Q

    def _unconverged(
        self, op: str, maxiter: int, residual: float, mode: str = "backward"
    ) -> None:
        text = (
            JULIA_UNCONVERGED if mode == "backward" else JULIA_UNCONVERGED_PUSHFORWARD
        )
        message = text.format(op=op, maxiter=maxiter, residual=f"{residual:.2g}")
        kwargs = (("maxiter", maxiter), ("residual", residual))
        self._log(message, "truncated", kwargs)

    def svd_trunc_pushforward_batched(
        self,
        At,
        U,
        S,
        Vt,
        d,
        k,
        dAt,
        rtol,
        maxiter,
        degeneracy_atol,
        broadening,
    ) -> tuple:
        # Julia's blocks of the transposes pushed along the transposed tangent; the
        # input and the tangent arrive as tensors, the blocks as the handles that
        # svd_topk_batched returned
        At, dAt = self._wrap(At), self._wrap(dAt)
        opts = Options(degeneracy_atol, broadening)
        out = []
        for b in range(dAt.shape[2]):
            A = torch.from_numpy(np.ascontiguousarray(At[:, :, b]))
            block = (_t(U, b), _t(S, b), _t(Vt, b).mH)
            out.append(
                self._svd_trunc_pushforward(
                    A, block, d[b], k, _t(dAt, b), opts, rtol, maxiter
                )
            )
        return tuple(
            _stack([o[i].resolve_conj().numpy() for o in out]) for i in range(3)
        )

    def _svd_trunc_pushforward(self, A, block, d, k, dA, opts, rtol, maxiter):
        U, S, V = block
        Ud, Sd, Vd = U[:, :d], S[:d], V[:, :d]
        if d >= min(A.shape):
            dU, dS, dVh = svd_pushforward(Ud, Sd, Vd.mH, dA, opts)
            return dU[:, :k], dS[:k], dVh[:k, :]
        *tangents, residual = truncated_svd_pushforward(
            *TK.dense_ops(A),
            Ud,
            Sd,
            Vd,
            k,
            dA,
            opts,
            rtol,
            maxiter,
            (U[:, d:], S[d:]),
        )
        if residual > TK.RTOL_SLACK * rtol:
            if TK._small(A):
                return dense_truncated_svd_pushforward(A, Ud, Sd, Vd, k, dA, opts)
            self._unconverged("svd", maxiter, residual, "pushforward")
        return tuple(tangents)

    def eigh_topk_batched(
        self,
        At,
        k,
        uplo,
        largest,
        method,
        oversample,
        n_iter,
        rtol,
        maxiter,
        degeneracy_atol,
    ) -> tuple:
        At = self._wrap(At)
        kw = dict(
            oversample=oversample,
            n_iter=n_iter,
            rtol=rtol,
            maxiter=maxiter,
            degeneracy_atol=degeneracy_atol,
        )

        def block(b: int, method: str) -> tuple:
            H = _hermitian(At[:, :, b], uplo)
            return self._eigh_topk_block(H, k, largest, method, **kw)

        blocks = _topk_blocks(block, At.shape[2], method)
        w, V, d = zip(*blocks)
        # the glue's conj! (Julia's problem is conj(A), whose vectors are conj(V))
        return _stack(list(w)), _stack([v.conj() for v in V]), tuple(d)

    def _eigh_topk_block(
        self,
        H,
        k,
        largest,
        method,
        oversample,
        n_iter,
        rtol,
        maxiter,
        degeneracy_atol=None,
    ) -> tuple:
        args = (k, method, oversample, n_iter, rtol, maxiter)
        path, cfg = T.top_k_method("eigh", H, *args)
        if path == "iterative":
            opts = Options(degeneracy_atol=degeneracy_atol)
            matmul = TK.dense_ops(H)[0]
            res = T.eigh_topk(
                matmul, tuple(H.shape), H.dtype, H.device, k, largest, cfg, opts
            )
            if res is not None:
                self._uncertified("eigh", k, res.message, cfg)
                return res.S.numpy(), res.U.numpy(), res.d
        w, V = torch.linalg.eigh(H)
        n = w.shape[-1]
        # kept ascending first, then the rest from the wanted end
        order = [*range(n - k, n), *range(n - k - 1, -1, -1)] if largest else range(n)
        order = list(order)
        return w[order].numpy(), V[:, order].numpy(), n

    def eigh_trunc_pullback_batched_b(
        self,
        dAt,
        At,
        w,
        V,
        d,
        dw,
        dV,
        uplo,
        largest,
        rtol,
        maxiter,
        degeneracy_atol,
        broadening,
        gauge,
        gauge_atol,
    ) -> tuple:
        dAt, At, dw, dV = map(self._wrap, (dAt, At, dw, dV))
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            for b in range(dAt.shape[2]):
                H = _hermitian(At[:, :, b], uplo)
                Vc = _t(V, b).conj()
                dVc = None if dV is None else _t(dV, b).conj()
                g = self._eigh_trunc_pullback(
                    H,
                    (_t(w, b), Vc),
                    d[b],
                    (_t(dw, b), dVc),
                    uplo,
                    largest,
                    opts,
                    rtol,
                    maxiter,
                )
                dAt[:, :, b] = 0 if g is None else g.numpy()
        return tuple(recorder.records)

    def _eigh_trunc_pullback(
        self, H, block, d, cotangents, uplo, largest, opts, rtol, maxiter
    ):
        w, V = block
        dw, dV = cotangents
        wd, Vd = w[:d], V[:, :d]
        if d >= H.shape[-1] or dV is None:
            padded = [pad_block(g, d) for g in cotangents]
            return eigh_pullback(wd, Vd, *padded, uplo, opts)
        k = dV.shape[-1]
        out = truncated_eigh_pullback(
            TK.dense_ops(H)[0],
            wd,
            Vd,
            k,
            dw,
            dV,
            largest,
            opts,
            rtol,
            maxiter,
            (V[:, d:], w[d:]),
        )
        P, Q, residual = out
        if residual > TK.RTOL_SLACK * rtol:
            if TK._small(H):
                return dense_truncated_eigh_pullback(H, wd, Vd, k, dw, dV, uplo, opts)
            self._unconverged("eigh", maxiter, residual)
        return fold_triangle(P @ Q, uplo)

    def eigh_trunc_pushforward_batched(
        self,
        At,
        w,
        V,
        d,
        k,
        dAt,
        uplo,
        largest,
        rtol,
        maxiter,
        degeneracy_atol,
        broadening,
    ) -> tuple:
        # Julia's problem conj(A) with eigenvectors conj(V), read from the swapped
        # triangle; its conj(dV) conjugated back in place, as the glue does. The
        # input and the tangent arrive as tensors, the blocks as eigh_topk_batched's
        # handles
        At, dAt = self._wrap(At), self._wrap(dAt)
        opts = Options(degeneracy_atol, broadening)
        dws, dVs = [], []
        for b in range(dAt.shape[2]):
            H = _hermitian(At[:, :, b], uplo)
            dH = hermitian_from_triangle(_t(dAt, b), uplo)
            dw, dVc = self._eigh_trunc_pushforward(
                H,
                (_t(w, b), _t(V, b).conj()),
                d[b],
                k,
                dH,
                largest,
                opts,
                rtol,
                maxiter,
            )
            dws.append(dw.numpy())
            dVs.append(dVc.conj().resolve_conj().numpy())
        return _stack(dws), _stack(dVs)

    def _eigh_trunc_pushforward(
        self, H, block, d, k, dH, largest, opts, rtol, maxiter
    ) -> tuple:
        w, V = block
        wd, Vd = w[:d], V[:, :d]
        if d >= H.shape[-1]:
            dw, dV = eigh_pushforward(wd, Vd, dH, "L", opts)
            return dw[:k], dV[:, :k]
        *tangents, residual = truncated_eigh_pushforward(
            TK.dense_ops(H)[0],
            wd,
            Vd,
            k,
            dH,
            largest,
            opts,
            rtol,
            maxiter,
            (V[:, d:], w[d:]),
        )
        if residual > TK.RTOL_SLACK * rtol:
            if TK._small(H):
                return dense_truncated_eigh_pushforward(H, wd, Vd, k, dH, opts)
            self._unconverged("eigh", maxiter, residual, "pushforward")
        return tuple(tangents)

    # --------------------------------------------------------------- eigh

    # ------------------------------------------------------- QR, LQ

    def lq_batched(self, At: Any, full: bool, positive: bool) -> tuple:
        """Julia's ``lq`` of each matrix (our QR of its transpose)."""
        At = self._wrap(At)
        Ls, Qs = [], []
        for b in range(At.shape[2]):
            Q, R = torch.linalg.qr(_t(At, b).mH, mode="complete" if full else "reduced")
            if positive:
                Q, R = positive_gauge(Q, R)
            Ls.append(R.mH.resolve_conj().numpy())
            Qs.append(Q.mH.resolve_conj().numpy())
        return _stack(Ls), _stack(Qs)

    def qr_batched(self, At: Any, full: bool, positive: bool) -> tuple:
        """Julia's ``qr`` of each matrix (our LQ of its transpose)."""
        At = self._wrap(At)
        Qs, Rs = [], []
        for b in range(At.shape[2]):
            Q, R = torch.linalg.qr(_t(At, b), mode="complete" if full else "reduced")
            if positive:
                Q, R = positive_gauge(Q, R)
            Qs.append(Q.numpy())
            Rs.append(R.numpy())
        return _stack(Qs), _stack(Rs)

    def lq_pullback_batched_b(
        self, dAt, L, Q, dL, dQ, rank_atol, degeneracy_atol, broadening, gauge,
        gauge_atol,
    ) -> tuple:  # fmt: skip
        """Julia's LQ pullback (of our QR: its messages name "qr")."""
        dAt, dL, dQ = map(self._wrap, (dAt, dL, dQ))
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            for b in range(dAt.shape[2]):
                gL, gQ = _t(dL, b), _t(dQ, b)
                g = qr_pullback(
                    _t(Q, b).mH, _t(L, b).mH, None if gQ is None else gQ.mH,
                    None if gL is None else gL.mH, opts, rank_atol, "qr",
                )  # fmt: skip
                dAt[:, :, b] = 0 if g is None else g.mH.resolve_conj().numpy()
        return tuple(recorder.records)

    def qr_pullback_batched_b(
        self, dAt, Q, R, dQ, dR, rank_atol, degeneracy_atol, broadening, gauge,
        gauge_atol,
    ) -> tuple:  # fmt: skip
        """Julia's QR pullback (of our LQ: its messages name "lq")."""
        dAt, dQ, dR = map(self._wrap, (dAt, dQ, dR))
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            for b in range(dAt.shape[2]):
                g = qr_pullback(
                    _t(Q, b), _t(R, b), _t(dQ, b), _t(dR, b), opts, rank_atol, "lq"
                )
                dAt[:, :, b] = 0 if g is None else g.numpy()
        return tuple(recorder.records)

    def lq_pushforward_batched(self, L, Q, dAt, rank_atol) -> tuple:
        dAt = self._wrap(dAt)
        dLs, dQs = [], []
        for b in range(dAt.shape[2]):
            dQq, dR = qr_pushforward(_t(Q, b).mH, _t(L, b).mH, _t(dAt, b).mH, rank_atol)
            dLs.append(dR.mH.resolve_conj().numpy())
            dQs.append(dQq.mH.resolve_conj().numpy())
        return _stack(dLs), _stack(dQs)

    def qr_pushforward_batched(self, Q, R, dAt, rank_atol) -> tuple:
        dAt = self._wrap(dAt)
        out = [qr_pushforward(_t(Q, b), _t(R, b), _t(dAt, b), rank_atol)
               for b in range(dAt.shape[2])]  # fmt: skip
        return tuple(
            _stack([o[i].resolve_conj().numpy() for o in out]) for i in range(2)
        )

    # ---------------------------------------------------------- eig

    def eig_batched(self, At: Any) -> tuple:
        """Julia's ``eigen`` of each matrix itself (the transpose of what it
        reads), complex, in LAPACK's order."""
        At = self._wrap(At)
        Ls, Vs = [], []
        for b in range(At.shape[2]):
            L, V = torch.linalg.eig(_t(At, b).mT)
            Ls.append(L.numpy())
            Vs.append(V.numpy())
        return _stack(Ls), _stack(Vs)

    def eigvals_batched(self, At: Any) -> np.ndarray:
        At = self._wrap(At)
        return _stack([torch.linalg.eigvals(_t(At, b).mT).numpy()
                       for b in range(At.shape[2])])  # fmt: skip

    def eig_pullback_batched_b(
        self, dAt, w, V, dw, dV, degeneracy_atol, broadening, gauge, gauge_atol
    ) -> tuple:
        dAt, dw, dV = map(self._wrap, (dAt, dw, dV))
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            for b in range(dAt.shape[2]):
                g = eig_pullback(_t(w, b), _t(V, b), _t(dw, b), _t(dV, b), opts)
                g = 0 if g is None else g.mT
                if not np.iscomplexobj(dAt) and isinstance(g, torch.Tensor):
                    g = g.real
                dAt[:, :, b] = g if isinstance(g, int) else g.numpy()
        return tuple(recorder.records)

    def eig_pushforward_batched(
        self, w, V, dAt, degeneracy_atol, broadening, gauge, gauge_atol
    ) -> tuple:
        dAt = self._wrap(dAt)
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            out = [
                eig_pushforward(_t(w, b), _t(V, b), _t(dAt, b).mT, opts)
                for b in range(dAt.shape[2])
            ]
        tangents = tuple(
            _stack([o[i].resolve_conj().numpy() for o in out]) for i in range(2)
        )
        return (*tangents, tuple(recorder.records))

    # ---------------------------------------------------------- eig_topk

    def eig_topk_dense(
        self, At, k, which, tol, krylovdim, maxiter, degeneracy_atol
    ) -> tuple:
        """Julia's ``eig_topk`` of the one matrix (the transpose of what it
        reads), by the native forward: ``(k' x 1, n x k' x 1)``."""
        A = _t(self._wrap(At), 0).mT
        L, V = native_eig_topk(A, k, which=which, tol=tol, krylovdim=krylovdim,
                               maxiter=maxiter, degeneracy_atol=degeneracy_atol,
                               gauge="ignore")  # fmt: skip
        return _stack([L.numpy()]), _stack([V.resolve_conj().numpy()])

    def eig_topk_pullback_dense_b(
        self, dAt, At, w, V, dw, dV, cluster_tol, tol, krylovdim, maxiter
    ) -> np.ndarray:
        """``ΔA = U Vᴴ`` written transposed into ``dAt`` (real part for a real
        ``A``); returns the cotangent's part inside the clusters."""
        dAt, At, dw, dV = map(self._wrap, (dAt, At, dw, dV))
        A, L, Vb = _t(At, 0).mT, _t(w, 0), _t(V, 0)
        AH = A.mH.to(Vb.dtype)
        cluster = (L[:, None] - L[None, :]).abs() <= cluster_tol
        U, N_in, _, _ = eig_topk_pullback(L, Vb, _t(dw, 0), _t(dV, 0),
                                          lambda Y: AH @ Y, cluster, tol,
                                          krylovdim, maxiter)  # fmt: skip
        g = (U @ Vb.mH).mT
        dAt[:, :, 0] = (g if np.iscomplexobj(dAt) else g.real).numpy()
        return _stack([N_in.resolve_conj().numpy()])

    # ---------------------------------------------------------- linsolve

    def _systems(self, At, *vectors) -> Iterator[tuple]:
        """Each system ``j``: ``A`` (Julia's transpose of what it reads) and
        column ``j`` of each ``n x B`` / ``1 x B`` argument."""
        At, vectors = self._wrap(At), [self._wrap(v) for v in vectors]
        for j in range(At.shape[2]):
            yield _t(At, j).mT, *(_t(v, j) for v in vectors)

    def linsolve_dense(
        self, At, b, x0, a0, a1, tol, ishermitian, isposdef, krylovdim, maxiter
    ) -> np.ndarray:
        """Julia's ``linsolve`` of each system by the native solver, its
        warning not logged (the glue's NullLogger)."""
        xs = []
        for A, bj, x0j, a0j, a1j, tolj in self._systems(At, b, x0, a0, a1, tol):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                x = native_linsolve(A, bj, a0=a0j[0], a1=a1j[0], x0=x0j,
                                    ishermitian=ishermitian, isposdef=isposdef,
                                    atol=float(tolj[0]), rtol=0.0,
                                    krylovdim=krylovdim, maxiter=maxiter)  # fmt: skip
            xs.append(x.resolve_conj().numpy())
        return _stack(xs)

    def linsolve_pullback_dense_b(
        self, dAt, At, x, dx, a0, a1, tol, ishermitian, isposdef, krylovdim, maxiter
    ) -> tuple:
        """The adjoint solve by the native solver on ``A^H``, then the
        pullback's formula; ``ΔA`` written transposed into ``dAt``."""
        dAt = self._wrap(dAt)
        out: list[list[np.ndarray]] = [[], [], []]
        for j, (A, xj, dxj, a0j, a1j, tolj) in enumerate(
            self._systems(At, x, dx, a0, a1, tol)
        ):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                y = native_linsolve(A.mH, dxj, a0=a0j[0].conj(), a1=a1j[0].conj(),
                                    ishermitian=ishermitian, isposdef=isposdef,
                                    atol=float(tolj[0]), rtol=0.0,
                                    krylovdim=krylovdim, maxiter=maxiter)  # fmt: skip
            gb, ga0, ga1, gZ = linsolve_pullback(xj, A.to(xj.dtype) @ xj, y, a1j[0])
            g = (gZ[:, None] * xj.conj()[None, :]).mT
            dAt[:, :, j] = (g if np.iscomplexobj(dAt) else g.real).numpy()
            for o, v in zip(out, (gb, ga0.reshape(1), ga1.reshape(1)), strict=True):
                o.append(v.resolve_conj().numpy())
        return tuple(_stack(o) for o in out)

    # -------------------------------------------------- eig_function

    def eig_function_eigenbasis_batched(self, At: Any) -> tuple:
        """Julia's eigenbasis of each ``A^T`` it reads, with ``V^-1`` after
        ``eigenvector_inverse``'s check (condition 1 of check_diagonalizable)."""
        At = self._wrap(At)
        out = []
        for b in range(At.shape[2]):
            L, V = torch.linalg.eig(_t(At, b))
            _, _, inverse = check_diagonalizable(
                L, V, Options(), "eig_function", pairs=False
            )
            if inverse is None:
                inverse = torch.linalg.inv(V)
            out.append((L.numpy(), V.numpy(), inverse.numpy()))
        return tuple(_stack([o[i] for o in out]) for i in range(3))

    def eig_function_apply_batched(self, w, V, Vinv, f, real) -> np.ndarray:
        fn, Ys = eigfun_named(f), []
        for b in range(V.shape[2]):
            fw, _ = fn(_t(w, b), Options())
            Y = (_t(V, b) * fw.unsqueeze(-2)) @ _t(Vinv, b)
            Ys.append((Y.real if real else Y).numpy())
        return _stack(Ys)

    def eig_function_pullback_batched_b(self, dAt, w, V, Vinv, f, dYt) -> None:
        dAt, dYt = self._wrap(dAt), self._wrap(dYt)
        fn, real = eigfun_named(f), not np.iscomplexobj(dAt)
        for b in range(dAt.shape[2]):
            T = (_t(w, b), _t(V, b), _t(Vinv, b))
            g = eig_function_pullback(T, fn(T[0], Options()), _t(dYt, b), real)
            dAt[:, :, b] = g.numpy()

    def eig_function_pushforward_batched(self, w, V, Vinv, f, dAt, real) -> np.ndarray:
        dAt, fn = self._wrap(dAt), eigfun_named(f)
        out = []
        for b in range(dAt.shape[2]):
            T = (_t(w, b), _t(V, b), _t(Vinv, b))
            dY = eig_function_pushforward(T, fn(T[0], Options()), _t(dAt, b), real)
            out.append(dY.numpy())
        return _stack(out)

    # --------------------------------------------------------- polar

    def polar_batched(self, At: Any, side: str, degeneracy_atol: Any) -> tuple:
        """Julia's ``polar`` of each matrix: ``(W, P, U, S, Vt)``."""
        At = self._wrap(At)
        opts = Options(degeneracy_atol)
        outs = []
        for b in range(At.shape[2]):
            X = _t(At, b)
            W, P = native_polar(X, side, opts)
            U, S, Vh = torch.linalg.svd(X, full_matrices=False)
            outs.append(tuple(t.resolve_conj().numpy() for t in (W, P, U, S, Vh)))
        return tuple(_stack([o[i] for o in outs]) for i in range(5))

    def polar_pullback_batched_b(
        self, dAt, W, P, U, S, Vt, dW, dP, side, degeneracy_atol
    ) -> tuple:
        dAt, dW, dP = map(self._wrap, (dAt, dW, dP))
        opts = Options(degeneracy_atol)
        for b in range(dAt.shape[2]):
            A = ((_t(U, b) * _t(S, b).to(_t(U, b).dtype)) @ _t(Vt, b)).requires_grad_()
            with torch.enable_grad():
                Wb, Pb = native_polar(A, side, opts)
                pairs = [(t, g) for t, g in ((Wb, _t(dW, b)), (Pb, _t(dP, b)))
                         if g is not None]  # fmt: skip
                (g,) = torch.autograd.grad(
                    [t for t, _ in pairs], A, [g for _, g in pairs]
                )
            dAt[:, :, b] = g.numpy()
        return ()

    def polar_pushforward_batched(
        self, W, P, U, S, Vt, dAt, side, degeneracy_atol
    ) -> tuple:
        dAt = self._wrap(dAt)
        opts = Options(degeneracy_atol)
        outs = []
        for b in range(dAt.shape[2]):
            A = (_t(U, b) * _t(S, b).to(_t(U, b).dtype)) @ _t(Vt, b)
            _, (dWb, dPb) = torch.func.jvp(
                lambda X: native_polar(X, side, opts), (A,), (_t(dAt, b),)
            )
            outs.append((dWb.resolve_conj().numpy(), dPb.resolve_conj().numpy()))
        return tuple(_stack([o[i] for o in outs]) for i in range(2))

    def eigh_batched(self, At: Any, uplo: str) -> tuple:
        At = self._wrap(At)
        ws, Vs = [], []
        for b in range(At.shape[2]):
            w, V = np.linalg.eigh(At[:, :, b], UPLO=uplo)
            ws.append(w)
            Vs.append(V.conj())  # like the glue: conj!(vectors of conj(A)) = V
        return _stack(ws), _stack(Vs)

    def eigh_pullback_batched_b(
        self,
        dAt,
        w,
        V,
        dw,
        dV,
        uplo,
        gradient,
        degeneracy_atol,
        broadening,
        gauge,
        gauge_atol,
    ) -> tuple:
        dAt, dw, dV = map(self._wrap, (dAt, dw, dV))
        opts, recorder = _pullback_options(
            degeneracy_atol, broadening, gauge, gauge_atol
        )
        with recorder:
            for b in range(dAt.shape[2]):
                Vc = None if V is None else _t(V, b).conj()
                dVc = None if dV is None else _t(dV, b).conj()
                herm = {"triangle": False, "hermitian": True}[gradient]
                g = eigh_pullback(_t(w, b), Vc, _t(dw, b), dVc, uplo, opts, False, herm)
                dAt[:, :, b] = 0 if g is None else g.numpy()
        return tuple(recorder.records)

    def eigh_pushforward_batched(
        self, w, V, dAt, uplo, degeneracy_atol, broadening
    ) -> tuple:
        # Julia's problem conj(A), eigenvectors conj(V); its conj(dV) conjugated
        # back in place, as the glue does
        dAt = self._wrap(dAt)
        opts = Options(degeneracy_atol, broadening)
        dws, dVs = [], []
        for b in range(dAt.shape[2]):
            dw, dVc = eigh_pushforward(
                _t(w, b), _t(V, b).conj(), _t(dAt, b), uplo, opts
            )
            dws.append(dw.numpy())
            dVs.append(dVc.conj().resolve_conj().numpy())
        return _stack(dws), _stack(dVs)

    def matrix_function_batched(
        self, At: Any, f: Any, uplo: str, degeneracy_atol: Any
    ) -> tuple:
        At = self._wrap(At)
        fn = _matfun(f)
        opts = Options(degeneracy_atol=degeneracy_atol)
        ws, Vs = zip(
            *(np.linalg.eigh(At[:, :, b], UPLO=uplo) for b in range(At.shape[2]))
        )
        Ys = []
        for w, V in zip(ws, Vs):  # as the glue: decompose all, then apply
            message = julia_matrix_domain_error(f, w, degeneracy_atol)
            if message is not None:  # the glue's SpectrumError
                raise FakeJuliaError("domain", message, spectrum=_stack(list(ws)))
            fw = fn(torch.from_numpy(w), opts)[0].numpy()
            Ys.append((V * fw) @ V.conj().T)
        return _stack(Ys), _stack(list(ws)), _stack(list(Vs))

    def matrix_function_pullback_batched_b(
        self, dAt, w, V, f, dYt, uplo, degeneracy_atol
    ) -> None:
        dAt, dYt = self._wrap(dAt), self._wrap(dYt)
        fn = _matfun(f)
        opts = Options(degeneracy_atol=degeneracy_atol)
        for b in range(dAt.shape[2]):
            g = matrix_function_pullback(_t(w, b), _t(V, b), fn, _t(dYt, b), uplo, opts)
            dAt[:, :, b] = g.numpy()

    def matrix_function_pushforward_batched(
        self, w, V, f, dAt, uplo, degeneracy_atol
    ) -> np.ndarray:
        dAt = self._wrap(dAt)
        fn = _matfun(f)
        opts = Options(degeneracy_atol=degeneracy_atol)
        return _stack(
            [
                matrix_function_pushforward(
                    _t(w, b), _t(V, b), fn, _t(dAt, b), uplo, opts
                ).numpy()
                for b in range(dAt.shape[2])
            ]
        )

    # ------------------------------------- f given by its values (user pairs)
    # The glue's *_values_* functions: the factors are what svd_batched /
    # eigh_batched returned (eigenvectors already conjugated to Python's V),
    # fX/dX the (k, B) values; PySpectral.SpectralValues is _stored_values.

    def svd_function_values_batched(self, U, S, Vt, fS, dS) -> np.ndarray:
        fS, dS = self._wrap(fS), self._wrap(dS)
        Ys = []
        for b in range(U.shape[2]):
            f, _ = _stored_values(fS, dS, b)(_t(S, b), Options())
            Ys.append((U[:, :, b] * f.numpy()) @ Vt[:, :, b])
        return _stack(Ys)

    def svd_function_values_pullback_batched_b(
        self, dAt, U, S, Vt, fS, dS, dYt
    ) -> None:
        dAt, fS, dS, dYt = map(self._wrap, (dAt, fS, dS, dYt))
        for b in range(dAt.shape[2]):
            fn = _stored_values(fS, dS, b)
            g = svd_function_pullback(
                _t(U, b), _t(S, b), _t(Vt, b), fn, _t(dYt, b), Options()
            )
            dAt[:, :, b] = g.numpy()

    def svd_function_values_pushforward_batched(
        self, U, S, Vt, fS, dS, dAt
    ) -> np.ndarray:
        fS, dS, dAt = map(self._wrap, (fS, dS, dAt))
        return _stack(
            [
                svd_function_pushforward(
                    _t(U, b),
                    _t(S, b),
                    _t(Vt, b),
                    _stored_values(fS, dS, b),
                    _t(dAt, b),
                    Options(),
                ).numpy()
                for b in range(dAt.shape[2])
            ]
        )

    def matrix_function_values_batched(self, w, V, fw, dw) -> np.ndarray:
        fw, dw = self._wrap(fw), self._wrap(dw)
        Ys = []
        for b in range(V.shape[2]):
            f, _ = _stored_values(fw, dw, b)(_t(w, b), Options())
            Vc = V[:, :, b].conj()  # Julia's problem is conj(A)
            Ys.append((Vc * f.numpy()) @ Vc.conj().T)
        return _stack(Ys)

    def matrix_function_values_pullback_batched_b(
        self, dAt, w, V, fw, dw, dYt, uplo
    ) -> None:
        dAt, fw, dw, dYt = map(self._wrap, (dAt, fw, dw, dYt))
        for b in range(dAt.shape[2]):
            fn = _stored_values(fw, dw, b)
            g = matrix_function_pullback(
                _t(w, b), _t(V, b).conj(), fn, _t(dYt, b), uplo, Options()
            )
            dAt[:, :, b] = g.numpy()

    def matrix_function_values_pushforward_batched(
        self, w, V, fw, dw, dAt, uplo
    ) -> np.ndarray:
        fw, dw, dAt = map(self._wrap, (fw, dw, dAt))
        return _stack(
            [
                matrix_function_pushforward(
                    _t(w, b),
                    _t(V, b).conj(),
                    _stored_values(fw, dw, b),
                    _t(dAt, b),
                    uplo,
                    Options(),
                )
                .resolve_conj()
                .numpy()
                for b in range(dAt.shape[2])
            ]
        )

    # ----------------------------------------------------- user functions

    def user_eval(self, src: str) -> FakeFunction:
        if src not in USER_FUNCTIONS:
            raise FakeJuliaError("other", f"UndefVarError: `{src}` not defined")
        return USER_FUNCTIONS[src]

    def user_include(self, path: str) -> None:
        return None

    def function_forward(self, f: FakeFunction, *args: Any) -> tuple:
        xs = tuple(map(_julia_value, args))
        y = f.forward(*xs)

        def pullback(yb: Any) -> tuple:
            return tuple(_python_value(g) for g in f.back(yb, *xs))

        return _python_value(y), pullback, f.rule

    def function_pullback(self, pullback: Callable, yb: Any) -> tuple:
        return pullback(_julia_value(yb))


@contextlib.contextmanager
def installed(fake: FakeJulia | None = None) -> Iterator[FakeJulia]:
    """Replace the Julia runtime by ``fake`` (fresh bridge state), restoring
    the real runtime and its state afterwards. Skips the test when the
    session's tensors are not on the CPU (``pytest --device cuda``): Julia,
    and so its stand-in, takes CPU tensors only."""
    device = torch.get_default_device()
    if device.type != "cpu":
        pytest.skip(f"the Julia backend runs on CPU tensors only (--device {device})")
    fake = FakeJulia() if fake is None else fake
    with _bridge._lock:
        saved = _bridge.runtime, dict(_bridge._state)
        _bridge.runtime = fake
        _bridge.reset()
    try:
        yield fake
    finally:
        with _bridge._lock:
            _bridge.runtime = saved[0]
            _bridge._state.clear()
            _bridge._state.update(saved[1])
