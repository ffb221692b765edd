"""A numpy stand-in for pyspectral's Julia glue (``pyspectral/_glue.jl``).

It sits behind the one seam of the bridge, ``pyspectral._julia.runtime``, and
behaves like the real glue on Julia's side of the layout: it receives numpy
arrays in Julia's column-major convention (a C-contiguous ``(B, m, n)`` batch
arrives as the ``n x m x B`` array ``At`` of its transposes), decomposes the
transposes with ``numpy.linalg`` and returns Fortran-ordered stacked arrays,
as Julia would. The pullbacks run pyspectral's native torch pullbacks on the
glue's own (transposed-role) data and write the result in place into the
``dAt`` array they receive, so a test that compares against the native
backend checks every role swap the bridge makes, and a test of pointers checks
that the gradient buffer is shared. The pushforwards (forward mode) likewise
run the native pushforwards on that data and return new stacked arrays.

Errors and warnings come back in the real glue's shapes, so that the bridge's
translation into the native backend's errors and warnings is what is tested:
a domain error is a Julia ``DomainError`` text (1-based index, no batch
element) with the spectra attached (the glue's ``SpectrumError``); gauge
violations under "warn" and "raise" are recorded, not acted on; the top-k
warnings are Julia log records with Julia's text (julia/PySpectral/src); every
call goes through ``logged``, which returns ``(value, logs, gauge_records)``.

Everything it receives is recorded (:class:`Call`): array pointers, dtypes,
shapes, strides, the calling thread and whether "Julia's" GC was enabled.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from pyspectral import _common as C
from pyspectral import _julia
from pyspectral._fns import SpectralFn
from pyspectral.eigh import _matfun
from pyspectral.exceptions import (
    DomainError,
    GaugeError,
    GaugeWarning,
    InputError,
    InputTypeError,
    PySpectralError,
)
from pyspectral.pullbacks.eigh import eigh_pullback, eigh_pushforward, fold_triangle
from pyspectral.pullbacks.matfun import (
    matrix_function_pullback,
    matrix_function_pushforward,
)
from pyspectral.pullbacks.svd import (
    svd_function_pullback,
    svd_function_pushforward,
    svd_pullback,
    svd_pushforward,
)
from pyspectral.svd import _svd_fn

# ------------------------------- PySpectral.jl's current top-k algorithm
# julia/PySpectral/src/forward/topk.jl and pullbacks/truncated.jl as they are
# (a randomized range finder with n_iter power iterations; the truncated
# pullback by block CG on A_perp = A - U S V^H). The native backend has moved on
# to the certified forward and deflated backward of issue 8; until the Julia
# half follows, the stand-in imitates what Julia does, here.


def randomized_svd(A: torch.Tensor, k: int, oversample: int, n_iter: int) -> tuple:
    m, n = A.shape[-2:]
    p = min(k + oversample, m, n)
    gen = torch.Generator(device=A.device).manual_seed(0)
    Omega = torch.randn(
        *A.shape[:-2], n, p, dtype=A.dtype, device=A.device, generator=gen
    )
    Q = torch.linalg.qr(A @ Omega).Q
    for _ in range(n_iter):
        Q = torch.linalg.qr(A.mH @ Q).Q
        Q = torch.linalg.qr(A @ Q).Q
    Ub, S, Vh = torch.linalg.svd(Q.mH @ A, full_matrices=False)
    return (Q @ Ub[..., :k]), S[..., :k], Vh[..., :k, :]


def randomized_eigh(A: torch.Tensor, k: int, oversample: int, n_iter: int) -> tuple:
    n = A.shape[-1]
    p = min(k + oversample, n)
    gen = torch.Generator(device=A.device).manual_seed(0)
    X = torch.randn(*A.shape[:-1], p, dtype=A.dtype, device=A.device, generator=gen)
    Q = torch.linalg.qr(A @ X).Q
    for _ in range(2 * n_iter):
        Q = torch.linalg.qr(A @ Q).Q
    T = Q.mH @ (A @ Q)
    w, Z = torch.linalg.eigh((T + T.mH) / 2)
    w, V = w[..., p - k :], Q @ Z[..., p - k :]
    residual = (A @ V - V * w.to(A.dtype).unsqueeze(-2)).abs().amax((-2, -1))
    scale = w.abs().amax(-1).clamp_min(torch.finfo(w.dtype).tiny)
    if bool((residual > C.eps(A.dtype) ** 0.5 * scale).any()):
        warnings.warn(
            C.ritz_message(float((residual / scale).max())), GaugeWarning, stacklevel=4
        )
    return w, V


def _block_cg(op: Any, b: torch.Tensor, rtol: float, maxiter: int) -> torch.Tensor:
    def dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x.conj() * y).sum(-2, keepdim=True).real

    x, r = torch.zeros_like(b), b.clone()
    p, rr = r.clone(), dot(r, r)
    target = (rtol**2) * rr.clamp_min(torch.finfo(rr.dtype).tiny)
    for _ in range(maxiter):
        if bool((rr <= target).all()):
            return x
        Ap = op(p)
        pAp = dot(p, Ap)
        alpha = torch.where(pAp > 0, rr / torch.where(pAp > 0, pAp, 1.0), 0.0)
        x, r = x + alpha * p, r - alpha * Ap
        rr_new = dot(r, r)
        p = r + (rr_new / rr.clamp_min(torch.finfo(rr.dtype).tiny)) * p
        rr = rr_new
    if not bool((rr <= target).all()):
        warnings.warn(
            C.topk_backward_message(maxiter, None), GaugeWarning, stacklevel=2
        )
    return x


def truncated_svd_pullback(A, U, S, Vh, gU, gS, gVh, opts, rtol, maxiter):
    if gU is None and gVh is None:
        return svd_pullback(U, S, Vh, gU, gS, gVh, opts)
    M = svd_pullback(U, S, Vh, gU, gS, gVh, opts, middle_only=True)
    V, Sc = Vh.mH, S.to(A.dtype).unsqueeze(-2)

    def perp(Y):
        return A @ Y - U @ (Sc.mT * (Vh @ Y))

    def perp_h(X):
        return A.mH @ X - V @ (Sc.mT * (U.mH @ X))

    PU = torch.zeros_like(U) if gU is None else gU - U @ (U.mH @ gU)
    PV = torch.zeros_like(V) if gVh is None else gVh.mH - V @ (Vh @ gVh.mH)
    X = _block_cg(
        lambda X: X * Sc * Sc - perp(perp_h(X)), PU * Sc + perp(PV), rtol, maxiter
    )
    Y = (PV + perp_h(X)) / Sc
    return torch.cat([U, X], -1) @ torch.cat([M.to(A.dtype) @ Vh + Y.mH, Vh], -2)


def truncated_eigh_pullback(A, w, V, gw, gV, uplo, largest, opts, rtol, maxiter):
    if gV is None:
        return eigh_pullback(w, V, gw, gV, uplo, opts)
    W = w.to(A.dtype).unsqueeze(-2)
    sign = 1.0 if largest else -1.0

    def op(X):
        return sign * (X * W - (A @ X - V @ (W.mT * (V.mH @ X))))

    X = _block_cg(op, sign * (gV - V @ (V.mH @ gV)), rtol, maxiter)
    M = eigh_pullback(w, V, gw, gV, uplo, opts, middle_only=True)
    G = torch.cat([V, X], -1) @ torch.cat([M @ V.mH + X.mH / 2, V.mH / 2], -2)
    return fold_triangle(G, uplo)


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

JULIA_CG_WARNING = (
    "top-k pullback: the Sylvester solve did not converge in {maxiter} iterations: "
    "the gap between the kept and discarded spectrum is too small. The gradient "
    "is finite but approximate."
)
JULIA_RITZ_WARNING = (
    "eigh_topk: the Ritz pairs have not converged (residual {residual} relative); "
    "the k largest eigenvalues must be the largest in magnitude and separated from "
    "the rest. Raise n_iter."
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
    kwargs: dict
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


def _options(
    degeneracy_atol: Any = None,
    broadening: Any = None,
    gauge: str = "warn",
    gauge_atol: Any = None,
) -> C.Options:
    # The glue's gauge_policy: "warn" and "raise" record (the native pullbacks
    # run under "warn", whose warnings _run turns into records).
    policy = "ignore" if gauge == "ignore" else "warn"
    return C.Options(degeneracy_atol, broadening, policy, gauge_atol)


_GAUGE_TEXT = re.compile(r"^(\w+): .*measured (\S+) > gauge_atol (\S+)\)", re.DOTALL)
_CG_TEXT = re.compile(
    r"^top-k backward: the Sylvester solve did not converge in (\d+) "
)
_RITZ_TEXT = re.compile(r"^eigh\(k=\.\.\., .*not converged \(residual (\S+) relative")


def _check_argument(name: str, x: Any) -> None:
    """Only what juliacall converts to the types the glue's methods expect:
    arrays (PyArray), None/bool/int/float/complex/str and tuples of them
    (Julia values and Tuples), or handles the glue returned. A Python list
    would arrive as ``PyList{Py}``, a dict as ``PyDict{Py,Py}``: wrong there."""
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


def _stored_values(fX: np.ndarray, dX: np.ndarray, b: int) -> SpectralFn:
    """``PySpectral.SpectralValues(view(fX, :, b), view(dX, :, b))``: ``f``
    given by its values, which svd_function_values / matrix_function_values
    return after checking their length against the spectrum
    (``DimensionMismatch``, an "argument" error)."""
    f, d = _t(fX, b), _t(dX, b)

    def values(x: torch.Tensor, opts: C.Options) -> tuple:
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
    the glue functions of ``_glue.jl`` with their exact argument conventions.

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
        self.gauge_log: list[tuple[str, float, float]] = []
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
        for name in GLUE_FUNCTIONS:
            impl = getattr(self, name.replace("!", "_b"))
            setattr(glue, name, functools.partial(self._run, name, impl))
        return glue

    def describe(self, err: BaseException) -> tuple[str, str, Any] | None:
        if isinstance(err, FakeJuliaError):
            return err.kind, err.message, err.spectrum
        return None

    def logged(self, f: Callable, *args: Any, **kwargs: Any) -> tuple:
        """The glue's ``logged``: ``f(args...; kwargs...)`` with its warnings
        and gauge records collected (records left by a call that threw go)."""
        self.gauge_log, self.log_records = [], []
        value = f(*args, **kwargs)
        logs, gauge = tuple(self.log_records), tuple(self.gauge_log)
        self.gauge_log, self.log_records = [], []
        return value, logs, gauge

    # ---------------------------------------------------------- recording

    def calls_to(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def fail(self, name: str, err: BaseException) -> None:
        """Make the next call of glue function ``name`` raise ``err``."""
        self.failures[name] = err

    def _run(self, name: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        with self._guard:
            if self._active:
                self.reentered = True
                raise AssertionError(f"fake Julia re-entered by {name}")
            self._active = True
        try:
            for a in (*args, *kwargs.values()):
                _check_argument(name, a)
            seen = [Seen.of(a) if isinstance(a, np.ndarray) else a for a in args]
            call = Call(name, seen, kwargs, threading.get_ident(), self.gc_on)
            self.calls.append(call)
            if self.delay:
                time.sleep(self.delay)
            if name in self.failures:
                raise self.failures.pop(name)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = fn(*args, **kwargs)
            except PySpectralError as err:
                raise FakeJuliaError(
                    _kind(err), f"{type(err).__name__}: {err}"
                ) from err
            for w in caught:
                self._as_julia(w)
            call.returned = [
                Seen.of(a) for a in _flatten(out) if isinstance(a, np.ndarray)
            ]
            return out
        finally:
            self._active = False

    def _as_julia(self, w: warnings.WarningMessage) -> None:
        """A native warning raised inside a fake glue function, as Julia has it:
        a gauge record (the glue's record_gauge), a log record with Julia's
        text (top-k), or, for anything else, the warning itself."""
        text = str(w.message)
        gauge, cg, ritz = (r.match(text) for r in (_GAUGE_TEXT, _CG_TEXT, _RITZ_TEXT))
        if issubclass(w.category, GaugeWarning) and gauge:
            op, measured, tol = gauge.groups()
            self.gauge_log.append((op, float(measured), float(tol)))
        elif issubclass(w.category, GaugeWarning) and cg:
            message = JULIA_CG_WARNING.format(maxiter=cg[1])
            self.log_records.append(("Warn", message, "PySpectral", "truncated", ()))
        elif issubclass(w.category, GaugeWarning) and ritz:
            message = JULIA_RITZ_WARNING.format(residual=repr(float(ritz[1])))
            self.log_records.append(("Warn", message, "PySpectral", "topk", ()))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    # ------------------------------------------------------------ runtime

    def gc_enable(self, on: bool) -> bool:
        was, self.gc_on = self.gc_on, bool(on)
        self.gc_log.append((threading.get_ident(), bool(on)))
        return was

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

    def svd_batched(self, At: np.ndarray, full: bool) -> tuple:
        Us, Ss, Vts = [], [], []
        for b in range(At.shape[2]):
            U, S, Vt = np.linalg.svd(At[:, :, b], full_matrices=full)
            Us.append(U)
            Ss.append(S)
            Vts.append(Vt)
        return _stack(Us), _stack(Ss), _stack(Vts)

    def svdvals_batched(self, At: np.ndarray) -> np.ndarray:
        return _stack(
            [np.linalg.svd(At[:, :, b], compute_uv=False) for b in range(At.shape[2])]
        )

    def svd_pullback_batched_b(self, dAt, U, S, Vt, dU, dS, dVt, **kw) -> np.ndarray:
        opts = _options(**kw)
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
        return dAt

    def svd_pushforward_batched(
        self, U, S, Vt, dAt, degeneracy_atol: Any = None, broadening: Any = None
    ) -> tuple:
        # Julia's factors of the transposes pushed along the transposed tangent
        opts = C.Options(degeneracy_atol, broadening)
        out = [
            svd_pushforward(_t(U, b), _t(S, b), _t(Vt, b), _t(dAt, b), opts)
            for b in range(dAt.shape[2])
        ]
        return tuple(
            _stack([o[i].resolve_conj().numpy() for o in out]) for i in range(3)
        )

    def svd_function_batched(
        self, At: np.ndarray, f: Any, degeneracy_atol: Any = None
    ) -> tuple:
        fn = _svd_fn(f, min(At.shape[:2]))
        opts = C.Options(degeneracy_atol=degeneracy_atol, gauge="ignore")
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
        self, dAt, U, S, Vt, f, dYt, degeneracy_atol: Any = None
    ) -> np.ndarray:
        fn = _svd_fn(f, min(dAt.shape[:2]))
        opts = C.Options(degeneracy_atol=degeneracy_atol)
        for b in range(dAt.shape[2]):
            g = svd_function_pullback(
                _t(U, b), _t(S, b), _t(Vt, b), fn, _t(dYt, b), opts
            )
            dAt[:, :, b] = g.numpy()
        return dAt

    def svd_function_pushforward_batched(
        self, U, S, Vt, f, dAt, degeneracy_atol: Any = None
    ) -> np.ndarray:
        fn = _svd_fn(f, min(dAt.shape[:2]))
        opts = C.Options(degeneracy_atol=degeneracy_atol)
        return _stack(
            [
                svd_function_pushforward(
                    _t(U, b), _t(S, b), _t(Vt, b), fn, _t(dAt, b), opts
                ).numpy()
                for b in range(dAt.shape[2])
            ]
        )

    # -------------------------------------------------------------- top-k
    # Julia's svd_topk / eigh_topk and truncated pullbacks, on Julia's side of
    # the layout, by pyspectral's own native implementation.

    def svd_topk_batched(self, At, k, oversample=10, n_iter=4) -> tuple:
        A = torch.from_numpy(np.ascontiguousarray(At.transpose(2, 0, 1)))
        U, S, Vh = randomized_svd(A, k, oversample, n_iter)
        return (
            _stack([u.numpy() for u in U]),
            _stack([s.numpy() for s in S]),
            _stack([v.numpy() for v in Vh]),
        )

    def svd_trunc_pullback_batched_b(
        self, dAt, At, U, S, Vt, dU, dS, dVt, rtol, maxiter, **kw
    ) -> np.ndarray:
        opts = _options(**kw)
        for b in range(dAt.shape[2]):
            g = truncated_svd_pullback(
                torch.from_numpy(At[:, :, b]),
                _t(U, b),
                _t(S, b),
                _t(Vt, b),
                _t(dU, b),
                _t(dS, b),
                _t(dVt, b),
                opts,
                rtol,
                maxiter,
            )
            dAt[:, :, b] = g.numpy()
        return dAt

    def eigh_topk_batched(self, At, k, uplo, oversample=10, n_iter=4) -> tuple:
        ws, Vs = [], []
        for b in range(At.shape[2]):
            H = _hermitian(At[:, :, b], uplo)
            w, V = randomized_eigh(H, k, oversample, n_iter)
            ws.append(w.numpy())
            Vs.append(V.conj().resolve_conj().numpy())  # the glue's conj!
        return _stack(ws), _stack(Vs)

    def eigh_trunc_pullback_batched_b(
        self, dAt, At, w, V, dw, dV, uplo, rtol, maxiter, **kw
    ) -> np.ndarray:
        opts = _options(**kw)
        for b in range(dAt.shape[2]):
            H = _hermitian(At[:, :, b], uplo)
            Vc = _t(V, b).conj()
            dVc = None if dV is None else _t(dV, b).conj()
            g = truncated_eigh_pullback(
                H, _t(w, b), Vc, _t(dw, b), dVc, uplo, True, opts, rtol, maxiter
            )
            dAt[:, :, b] = g.numpy()
        return dAt

    # --------------------------------------------------------------- eigh

    def eigh_batched(self, At: np.ndarray, uplo: str) -> tuple:
        ws, Vs = [], []
        for b in range(At.shape[2]):
            w, V = np.linalg.eigh(At[:, :, b], UPLO=uplo)
            ws.append(w)
            Vs.append(V.conj())  # like the glue: conj!(vectors of conj(A)) = V
        return _stack(ws), _stack(Vs)

    def eigh_pullback_batched_b(self, dAt, w, V, dw, dV, uplo, **kw) -> np.ndarray:
        opts = _options(**kw)
        for b in range(dAt.shape[2]):
            Vc = None if V is None else _t(V, b).conj()
            dVc = None if dV is None else _t(dV, b).conj()
            g = eigh_pullback(_t(w, b), Vc, _t(dw, b), dVc, uplo, opts)
            dAt[:, :, b] = 0 if g is None else g.numpy()
        return dAt

    def eigh_pushforward_batched(
        self, w, V, dAt, uplo, degeneracy_atol: Any = None, broadening: Any = None
    ) -> tuple:
        # Julia's problem conj(A), eigenvectors conj(V); its conj(dV) conjugated
        # back in place, as the glue does
        opts = C.Options(degeneracy_atol, broadening)
        dws, dVs = [], []
        for b in range(dAt.shape[2]):
            dw, dVc = eigh_pushforward(
                _t(w, b), _t(V, b).conj(), _t(dAt, b), uplo, opts
            )
            dws.append(dw.numpy())
            dVs.append(dVc.conj().resolve_conj().numpy())
        return _stack(dws), _stack(dVs)

    def matrix_function_batched(
        self, At: np.ndarray, f: Any, uplo: str, degeneracy_atol: Any = None
    ) -> tuple:
        fn = _matfun(f)
        opts = C.Options(degeneracy_atol=degeneracy_atol)
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
        self, dAt, w, V, f, dYt, uplo, degeneracy_atol: Any = None
    ) -> np.ndarray:
        fn = _matfun(f)
        opts = C.Options(degeneracy_atol=degeneracy_atol)
        for b in range(dAt.shape[2]):
            g = matrix_function_pullback(_t(w, b), _t(V, b), fn, _t(dYt, b), uplo, opts)
            dAt[:, :, b] = g.numpy()
        return dAt

    def matrix_function_pushforward_batched(
        self, w, V, f, dAt, uplo, degeneracy_atol: Any = None
    ) -> np.ndarray:
        fn = _matfun(f)
        opts = C.Options(degeneracy_atol=degeneracy_atol)
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
        Ys = []
        for b in range(U.shape[2]):
            f, _ = _stored_values(fS, dS, b)(_t(S, b), C.Options())
            Ys.append((U[:, :, b] * f.numpy()) @ Vt[:, :, b])
        return _stack(Ys)

    def svd_function_values_pullback_batched_b(
        self, dAt, U, S, Vt, fS, dS, dYt
    ) -> np.ndarray:
        for b in range(dAt.shape[2]):
            fn = _stored_values(fS, dS, b)
            g = svd_function_pullback(
                _t(U, b), _t(S, b), _t(Vt, b), fn, _t(dYt, b), C.Options()
            )
            dAt[:, :, b] = g.numpy()
        return dAt

    def svd_function_values_pushforward_batched(
        self, U, S, Vt, fS, dS, dAt
    ) -> np.ndarray:
        return _stack(
            [
                svd_function_pushforward(
                    _t(U, b),
                    _t(S, b),
                    _t(Vt, b),
                    _stored_values(fS, dS, b),
                    _t(dAt, b),
                    C.Options(),
                ).numpy()
                for b in range(dAt.shape[2])
            ]
        )

    def matrix_function_values_batched(self, w, V, fw, dw) -> np.ndarray:
        Ys = []
        for b in range(V.shape[2]):
            f, _ = _stored_values(fw, dw, b)(_t(w, b), C.Options())
            Vc = V[:, :, b].conj()  # Julia's problem is conj(A)
            Ys.append((Vc * f.numpy()) @ Vc.conj().T)
        return _stack(Ys)

    def matrix_function_values_pullback_batched_b(
        self, dAt, w, V, fw, dw, dYt, uplo
    ) -> np.ndarray:
        for b in range(dAt.shape[2]):
            fn = _stored_values(fw, dw, b)
            g = matrix_function_pullback(
                _t(w, b), _t(V, b).conj(), fn, _t(dYt, b), uplo, C.Options()
            )
            dAt[:, :, b] = g.numpy()
        return dAt

    def matrix_function_values_pushforward_batched(
        self, w, V, fw, dw, dAt, uplo
    ) -> np.ndarray:
        return _stack(
            [
                matrix_function_pushforward(
                    _t(w, b),
                    _t(V, b).conj(),
                    _stored_values(fw, dw, b),
                    _t(dAt, b),
                    uplo,
                    C.Options(),
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
    "eigh_topk_batched",
    "eigh_trunc_pullback_batched!",
    "user_eval",
    "user_include",
    "function_forward",
    "function_pullback",
)


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
    with _julia._lock:
        saved = _julia.runtime, dict(_julia._state)
        _julia.runtime = fake
        _julia.reset()
    try:
        yield fake
    finally:
        with _julia._lock:
            _julia.runtime = saved[0]
            _julia._state.clear()
            _julia._state.update(saved[1])
