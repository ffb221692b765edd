"""Every public function on the session's device (``pytest --device``: the
CPU by default, so this file runs everywhere; with ``--device cuda`` it is the
GPU check), in float32, float64, complex64 and complex128: forward, backward,
forward-mode ``jvp``, top-k and the composite spectral functions, against the
same computation on the CPU in double precision from the same (rounded)
input, to ``100 * eps**(3/4)`` of the dtype (relative, max-norm), on
gauge-invariant outputs.

While pyspectral runs here, torch's default device is ``meta`` (``with
torch.device("meta")`` around the call, and around the backward and jvp of
every pyspectral autograd Function, which autograd runs outside the caller's
device context): a tensor that pyspectral made without the input's device
would be a meta tensor and could not mix with the input, nor be read. So these
tests show on any device that pyspectral's results follow its input, not the
default device. The Julia backend takes CPU tensors only: anything else is a
``BackendError`` before Julia starts. The benchmarks take ``--device``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import math
import os
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import torch
from _fake_julia import installed
from _spectra import hermitian_with_spectrum, inner, matrix_with_spectrum, rel_err
from _spectra import random_like as _random_like

import pyspectral as ps
import pyspectral.__main__ as cli
from pyspectral import _backend
from pyspectral.forward.topk import cg_iterations

ROOT = Path(__file__).resolve().parent.parent
DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
# the reference's precision for each dtype
HIGH = {
    torch.float32: torch.float64,
    torch.float64: torch.float64,
    torch.complex64: torch.complex128,
    torch.complex128: torch.complex128,
}

dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=str)


def tol(dtype: torch.dtype) -> float:
    """``100 * eps**(3/4)``: 6.4e-4 in single, 1.8e-10 in double precision."""
    return 100 * torch.finfo(dtype).eps ** 0.75


# ----------------------------------------------- the default device: meta


def _pyspectral_functions() -> list[type]:
    """pyspectral's ``torch.autograd.Function`` subclasses."""
    found, todo = [], [torch.autograd.Function]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("pyspectral"):
                found.append(sub)
    return found


def _on_meta(f: Callable) -> staticmethod:
    @functools.wraps(f)
    def run(*args):
        with torch.device("meta"):
            return f(*args)

    return staticmethod(run)


@pytest.fixture
def elsewhere(monkeypatch) -> Callable[[], contextlib.AbstractContextManager]:
    """``with elsewhere(): ...`` runs with torch's default device ``meta``,
    also in the backward and jvp of pyspectral's autograd Functions."""
    functions = _pyspectral_functions()
    assert len(functions) >= 8, functions  # svd, eigh, their composites, top-k
    for cls in functions:
        for name in ("backward", "jvp"):
            if isinstance(cls.__dict__.get(name), staticmethod):
                monkeypatch.setattr(cls, name, _on_meta(cls.__dict__[name].__func__))
    return lambda: torch.device("meta")


def test_the_meta_default_catches_a_tensor_made_without_a_device(elsewhere) -> None:
    """The harness itself: a factory call without ``device`` inside it makes
    a meta tensor, which cannot meet the input; one with ``device`` can."""
    A = torch.ones(2, 2)
    with elsewhere():
        with pytest.raises((RuntimeError, NotImplementedError)):
            float((A + torch.ones(2, 2)).sum())
        assert float((A + torch.ones(2, 2, device=A.device)).sum()) == 8.0


# ----------------------------------------------------------------- inputs


def case(make: Callable[[torch.dtype], torch.Tensor], dtype, device) -> tuple:
    """``(A, A_ref)``: the input on ``device`` in ``dtype``, and the same
    numbers on the CPU in double precision (the reference's input)."""
    A = make(HIGH[dtype]).to(device=device, dtype=dtype)
    return A, A.cpu().to(HIGH[dtype])


def rect(dtype: torch.dtype) -> torch.Tensor:
    """A batch of two 6 x 4 matrices with distinct singular values."""
    return torch.stack(
        [
            matrix_with_spectrum((4.0, 3.0, 2.0, 1.0), 6, 4, dtype=dtype, seed=1),
            matrix_with_spectrum((5.0, 2.5, 1.0, 0.5), 6, 4, dtype=dtype, seed=2),
        ]
    )


def spd(dtype: torch.dtype) -> torch.Tensor:
    """A batch of two 5 x 5 positive definite matrices (log, sqrt defined)."""
    return torch.stack(
        [
            hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0, 5.0), dtype=dtype, seed=1),
            hermitian_with_spectrum((0.25, 0.75, 1.5, 2.5, 4.0), dtype=dtype, seed=2),
        ]
    )


def gapped(dtype: torch.dtype) -> torch.Tensor:
    """48 x 40 with a gap after the 4th singular value (5 -> 1), for top-k."""
    s = [10.0, 8.0, 6.0, 5.0] + [0.9**i for i in range(36)]
    return matrix_with_spectrum(s, 48, 40, dtype=dtype, seed=3)


def gapped_hermitian(dtype: torch.dtype) -> torch.Tensor:
    """40 x 40 with three eigenvalues well apart at each end, for top-k."""
    w = [-9.0, -7.0, -6.0] + [-1.0 + 2 * i / 33 for i in range(34)] + [6.0, 8.0, 10.0]
    return hermitian_with_spectrum(w, dtype=dtype, seed=4)


def weights(A: torch.Tensor, A_ref: torch.Tensor, seed: int = 5) -> tuple:
    """Loss weights like ``A`` on its device, and their reference twin."""
    W_ref = _random_like(A_ref, seed=seed).cpu()
    return W_ref.to(device=A.device, dtype=A.dtype), W_ref


def run(fn: Callable, A: torch.Tensor, loss: Callable, W, elsewhere=None) -> tuple:
    """``(fn(A), d loss(fn(A), W) / d A)``; with ``elsewhere``, pyspectral
    runs with the default device meta."""
    X = A.detach().clone().requires_grad_()
    with elsewhere() if elsewhere else contextlib.nullcontext():
        out = fn(X)
    (g,) = torch.autograd.grad(loss(out, W), X)
    return out, g


def check(fn, make, dtype, device, loss, seen, elsewhere, ref_fn=None) -> None:
    """``fn`` on ``make``'s input on ``device`` in ``dtype`` (default device
    meta) against ``ref_fn`` (default ``fn``) on the same numbers on the CPU
    in double precision: the gauge-invariant outputs ``seen(out)`` and the
    gradient of ``loss(out, W)``, each on the device, in the input's
    precision, within :func:`tol`."""
    A, A_ref = case(make, dtype, device)
    W, W_ref = weights(A, A_ref)
    out, g = run(fn, A, loss, W, elsewhere)
    out_ref, g_ref = run(ref_fn or fn, A_ref, loss, W_ref)
    assert g.device == A.device and g.dtype == A.dtype
    assert rel_err(g.cpu().to(g_ref.dtype), g_ref) < tol(dtype)
    for x, x_ref in zip(seen(out), seen(out_ref), strict=True):
        assert x.device == A.device
        assert x.dtype in (A.dtype, A.real.dtype), (x.dtype, A.dtype)
        assert rel_err(x.detach().cpu().to(x_ref.dtype), x_ref.detach()) < tol(dtype)


def matrix_loss(Y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return inner(Y, W)


def same(Y: torch.Tensor) -> tuple:
    return (Y,)


# ----------------------------------------------------------- public ops


def svd_loss(out, W):
    U, S, Vh = out
    return (S**2).sum() + inner(U @ Vh, W)


def svd_seen(out):
    return out.S, out.U @ out.Vh


@dtypes
def test_svd(dtype, device, elsewhere) -> None:
    thin = partial(ps.svd, full_matrices=False)
    check(thin, rect, dtype, device, svd_loss, svd_seen, elsewhere)


@dtypes
def test_svdvals(dtype, device, elsewhere) -> None:
    def loss(S, W):
        return (S**2).sum() + S[..., 0].sum()

    check(ps.svdvals, rect, dtype, device, loss, same, elsewhere)


SVD_FUNCTIONS = ["polar", ("pow", 2), ("truncate", 2), ("threshold", 1.5), "normalize"]


@dtypes
@pytest.mark.parametrize("f", SVD_FUNCTIONS, ids=str)
def test_svd_function(f, dtype, device, elsewhere) -> None:
    def fn(X):
        return ps.svd_function(X, f)

    check(fn, rect, dtype, device, matrix_loss, same, elsewhere)


def spectral(out) -> torch.Tensor:
    """``V tanh(w) V^H``: gauge invariant."""
    w, V = out
    return (V * torch.tanh(w).to(V.dtype).unsqueeze(-2)) @ V.mH


@dtypes
def test_eigh(dtype, device, elsewhere) -> None:
    def loss(out, W):
        return out[0].sum() + inner(spectral(out), W)

    def seen(out):
        return out[0], spectral(out)

    check(ps.eigh, spd, dtype, device, loss, seen, elsewhere)


@dtypes
def test_eigvalsh(dtype, device, elsewhere) -> None:
    def loss(w, W):
        return (w**2).sum() + w[..., -1].sum()

    check(ps.eigvalsh, spd, dtype, device, loss, same, elsewhere)


@dtypes
@pytest.mark.parametrize("f", ["exp", "sqrt", "log", "invsqrt", ("pow", 1.5)], ids=str)
def test_matrix_function(f, dtype, device, elsewhere) -> None:
    def fn(X):
        return ps.matrix_function(X, f)

    check(fn, spd, dtype, device, matrix_loss, same, elsewhere)


# --------------------------------------------------- qr, lq, polar, eig


def qr_loss(out, W):
    X, Y = out  # (Q, R) or (L, Q)
    return inner(X, W[..., : X.shape[-2], : X.shape[-1]]) + (Y.abs() ** 2).sum()


@dtypes
@pytest.mark.parametrize("op", ["qr", "lq"])
def test_qr_lq(op, dtype, device, elsewhere) -> None:
    def fn(X):
        return getattr(ps, op)(X, positive=True)

    check(fn, rect, dtype, device, qr_loss, lambda out: tuple(out), elsewhere)


@dtypes
@pytest.mark.parametrize("side", ["right", "left"])
def test_polar(side, dtype, device, elsewhere) -> None:
    def fn(X):
        return ps.polar(X, side)

    def loss(out, W):
        return inner(out.W, W) + (out.P.abs() ** 2).sum()

    check(fn, rect, dtype, device, loss, lambda out: tuple(out), elsewhere)


def nonnormal(dtype: torch.dtype) -> torch.Tensor:
    """A batch of two non-normal 4 x 4 matrices with distinct real eigenvalues."""
    S = matrix_with_spectrum((3.0, 2.0, 1.0, 0.5), 4, 4, dtype=dtype, seed=7)
    w = torch.tensor([1.0, 2.0, -0.5, 3.0], dtype=dtype)
    T = matrix_with_spectrum((2.0, 1.5, 1.0, 0.8), 4, 4, dtype=dtype, seed=8)
    v = torch.tensor([0.5, -1.0, 2.5, 1.5], dtype=dtype)
    return torch.stack(
        [
            S @ torch.diag(w) @ torch.linalg.inv(S),
            T @ torch.diag(v) @ torch.linalg.inv(T),
        ]
    )


def eig_seen(out):
    """Sorted eigenvalues and the projector onto the first one (gauge free),
    as real tensors (eig's results are complex also for a real input)."""
    L, V = out
    P = V[..., :, :1] @ torch.linalg.inv(V)[..., :1, :]
    return torch.sort(L.real, -1).values, P.real, P.imag


@dtypes
def test_eig(dtype, device, elsewhere) -> None:
    def loss(out, W):
        L, V = out
        return (L.real**2).sum() + inner(eig_seen(out)[1], W.real)

    check(ps.eig, nonnormal, dtype, device, loss, eig_seen, elsewhere)


# ----------------------------------------------------------------- top-k


@dtypes
@pytest.mark.parametrize("method", ["randomized", "full"])
def test_svd_top_k(method, dtype, device, elsewhere) -> None:
    """The top-4 triplets on the device against the exact top-4 of the
    reference (``method="full"``)."""

    def top4(method):
        return lambda X: ps.svd(X, k=4, method=method)

    check(
        top4(method),
        gapped,
        dtype,
        device,
        svd_loss,
        svd_seen,
        elsewhere,
        ref_fn=top4("full"),
    )


@dtypes
@pytest.mark.parametrize("largest", [True, False])
def test_eigh_top_k(largest, dtype, device, elsewhere) -> None:
    def top3(method):
        return lambda X: ps.eigh(X, k=3, largest=largest, method=method)

    def projector(out):  # on the k eigenvectors: gauge invariant
        return out[1] @ out[1].mH

    def loss(out, W):
        return (out[0] ** 2).sum() + inner(projector(out), W)

    def seen(out):
        return out[0], projector(out)

    check(
        top3("randomized"),
        gapped_hermitian,
        dtype,
        device,
        loss,
        seen,
        elsewhere,
        ref_fn=top3("full"),
    )


# ----------------------------------------------------------- forward mode


JVP_CASES = {
    "svd": (rect, lambda X: svd_seen(ps.svd(X, full_matrices=False))),
    "svd_function": (rect, lambda X: (ps.svd_function(X, ("pow", 2)),)),
    "eigh": (spd, lambda X: (lambda o: (o[0], spectral(o)))(ps.eigh(X))),
    "matrix_function": (spd, lambda X: (ps.matrix_function(X, "sqrt"),)),
    "qr": (rect, lambda X: tuple(ps.qr(X, positive=True))),
    "polar": (rect, lambda X: tuple(ps.polar(X))),
    "eig": (nonnormal, lambda X: eig_seen(ps.eig(X))),
}


@dtypes
@pytest.mark.parametrize("op", JVP_CASES)
def test_jvp(op, dtype, device, elsewhere) -> None:
    """``torch.func.jvp`` on the device against the reference's."""
    make, f = JVP_CASES[op]
    A, A_ref = case(make, dtype, device)
    dA, dA_ref = weights(A, A_ref, seed=6)
    if make is spd:  # a Hermitian direction
        dA, dA_ref = (dA + dA.mH) / 2, (dA_ref + dA_ref.mH) / 2
    with elsewhere():
        _, tangents = torch.func.jvp(f, (A,), (dA,))
    _, tangents_ref = torch.func.jvp(f, (A_ref,), (dA_ref,))
    for t, t_ref in zip(tangents, tangents_ref, strict=True):
        assert t.device == A.device
        assert rel_err(t.cpu().to(t_ref.dtype), t_ref) < tol(dtype)


# ------------------------------------------------------------------ Julia


JULIA_OPS = [
    "svd",
    "svdvals",
    "svd_function",
    "eigh",
    "eigvalsh",
    "matrix_function",
    "qr",
    "lq",
    "polar",
    "eig",
    "eigvals",
]


@pytest.mark.parametrize("op", JULIA_OPS)
def test_julia_backend_refuses_a_tensor_off_the_cpu(op, device) -> None:
    """Julia runs on CPU memory: a tensor elsewhere is a BackendError that
    names the device and the remedies, before Julia starts. ``meta`` stands in
    for any other device on every machine; with ``--device cuda`` the public
    call is tried on the GPU tensor too."""
    with installed() if device.type == "cpu" else contextlib.nullcontext() as fake:
        with pytest.raises(ps.BackendError, match="CPU tensors only, got a ") as e:
            _backend.resolve_backend(op, "julia", torch.ones(3, 3, device="meta"))
        assert "meta" in str(e.value) and "backend='torch'" in str(e.value)
        assert ".cpu()" in str(e.value)
        assert fake is None or not fake.calls  # refused before Julia ran
    if device.type != "cpu":
        A = spd(torch.float64).to(device)[0]
        f = {"svd_function": ("polar",), "matrix_function": ("exp",)}.get(op, ())
        with pytest.raises(
            ps.BackendError, match=f"CPU tensors only, got a tensor on {device.type}"
        ):
            getattr(ps, op)(A, *f, backend="julia")


def eigh_loss(out, W):
    return out[0].sum() + inner(spectral(out), W)


JULIA_CALLS = {  # name: (input, call with keywords, loss)
    "svd": (rect, lambda X, **kw: ps.svd(X, full_matrices=False, **kw), svd_loss),
    "svdvals": (rect, lambda X, **kw: ps.svdvals(X, **kw), lambda S, W: S.sum()),
    "svd_function": (
        rect,
        lambda X, **kw: ps.svd_function(X, ("pow", 2), **kw),
        matrix_loss,
    ),
    "svd top-k": (
        gapped,
        lambda X, **kw: ps.svd(X, k=4, method="randomized", **kw),
        svd_loss,
    ),
    "eigh": (spd, lambda X, **kw: ps.eigh(X, **kw), eigh_loss),
    "eigvalsh": (spd, lambda X, **kw: ps.eigvalsh(X, **kw), lambda w, W: w.sum()),
    "matrix_function": (
        spd,
        lambda X, **kw: ps.matrix_function(X, "sqrt", **kw),
        matrix_loss,
    ),
    "eigh top-k": (
        gapped_hermitian,
        lambda X, **kw: ps.eigh(X, k=3, method="randomized", **kw),
        eigh_loss,
    ),
    "qr": (rect, lambda X, **kw: ps.qr(X, positive=True, **kw), qr_loss),
    "lq": (rect, lambda X, **kw: ps.lq(X, positive=True, **kw), qr_loss),
    "polar": (rect, lambda X, **kw: ps.polar(X, **kw), qr_loss),
    "eig": (
        nonnormal,
        lambda X, **kw: ps.eig(X, **kw),
        lambda out, W: (out[0].real ** 2).sum() + inner(eig_seen(out)[1], W),
    ),
}


@pytest.mark.parametrize("name", JULIA_CALLS)
def test_julia_backend_does_not_use_the_default_device(name, elsewhere) -> None:
    """The Julia backend's own tensors (the gradient buffers Julia writes
    into) are CPU tensors whatever torch's default device is, and its
    gradients the same as with the CPU default (the stand-in Julia runtime,
    which skips off the CPU)."""
    make, call, loss = JULIA_CALLS[name]
    A = make(torch.float64).cpu()
    W = _random_like(A, seed=7)

    def julia(X):
        return call(X, backend="julia")

    with installed():
        out, g = run(julia, A, loss, W, elsewhere)
        _, g_ref = run(julia, A, loss, W)
    assert g.device.type == "cpu"
    assert rel_err(g, g_ref) < 1e-12


def test_julia_function_scalar_result_is_a_cpu_tensor(elsewhere) -> None:
    """A Julia function's scalar result comes back as a CPU tensor, like its
    array results, whatever torch's default device is (the stand-in)."""
    H = spd(torch.float64)[0].cpu()
    with installed():
        logdet = ps.julia.function("logdet")
        X = H.clone().requires_grad_()
        with elsewhere():
            y = logdet(X)
        (g,) = torch.autograd.grad(y, X)
    assert y.device.type == "cpu" and y.dim() == 0
    assert abs(float(y.detach()) - float(torch.logdet(H))) < 1e-12
    assert rel_err(g, torch.linalg.inv(H).mT) < 1e-12


# ----------------------------------------------------- host arithmetic


def test_cg_iterations_in_float64_with_no_overflow() -> None:
    """The top-k budget's CG count ``log(2 / rtol) / log(1 / q)`` with
    ``q = (sqrt(kappa) - 1) / (sqrt(kappa) + 1)``, in float64 on the CPU (not
    on the default device, not in float32); where ``q`` rounds to 1 it is
    ``maxiter``, not an OverflowError."""
    for kappa in (2.0, 100.0, 1e6, 1e14):
        root = kappa**0.5
        q = (root - 1) / (root + 1)
        expected = int(math.log(2 / 1e-12) / -math.log(q)) + 1
        assert abs(cg_iterations(kappa, 1e-12, 10**12) - expected) <= 1
    for kappa in (1e16, 1e40, 1e299):
        assert cg_iterations(kappa, 1e-12, 500) == 500
    assert cg_iterations(float("inf"), 1e-12, 7) == 7
    assert cg_iterations(1.0, 1e-12, 7) == 1


# ------------------------------------------------------------- benchmarks


def benchmark(name: str):
    """``benchmarks/bench_<name>.py`` as a module (as ``python -m pyspectral
    bench`` loads it)."""
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", ROOT / "benchmarks" / f"bench_{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["svd", "eigh", "factorizations"])
def test_sweep_benchmarks_run_on_the_device(name, device, capsys) -> None:
    """``--device``: the tensors, the synchronised timing and the table's
    title (the GPU's name on cuda)."""
    argv = ["--device", str(device), "--sizes", "6,2x3", "--repeat", "1"]
    assert benchmark(name).main(argv) == 0
    out = capsys.readouterr().out
    assert benchmark("svd")._timing.device_name(device) in out
    assert "| 6x6 |" in out and "| 2 x 3x3 |" in out


def test_topk_benchmark_runs_on_the_device(device, capsys) -> None:
    sizes = ["--n-gap", "96", "--n-nogap", "64", "--n-closing", "64", "--k", "4"]
    benchmark("topk").main(["--device", str(device), *sizes, "--rounds", "1"])
    out = capsys.readouterr().out
    assert "| randomized |" in out and "### 3. the gap closing" in out


def test_bench_command_passes_the_device_on() -> None:
    def args(**kw):
        base = dict(quick=True, sizes=None, repeat=None, threads=None, blas=None)
        return argparse.Namespace(**{**base, **kw})

    for name in ("svd", "eigh", "topk"):
        assert cli.bench_argv(name, args(device="cuda"))[-2:] == ["--device", "cuda"]
        assert "--device" not in cli.bench_argv(name, args())
    assert "--device" not in cli.bench_argv("julia", args(device="cuda"))


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="CUDA is available here; the error where it is not is tested elsewhere",
)
def test_cuda_where_there_is_none_is_one_clear_error(capsys, monkeypatch) -> None:
    """``pytest --device cuda`` stops at once with a usage error that says
    why (not one error per test); the benchmarks refuse ``--device cuda`` in
    their argument parsing; ``bench julia --device cuda`` says it is CPU-only."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH")) if p
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--device", "cuda", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "--device cuda: CUDA is not available" in run.stderr
    assert "passed" not in run.stdout and "collected" not in run.stdout
    for name in ("svd", "eigh", "topk"):
        with pytest.raises(SystemExit) as e:
            benchmark(name).main(["--device", "cuda"])
        assert e.value.code == 2
        assert "--device: CUDA is not available" in capsys.readouterr().err
    # this checkout's benchmarks (an installed wheel has none of its own)
    monkeypatch.setattr(cli, "_benchmarks_dir", lambda: ROOT / "benchmarks")
    assert cli.main(["bench", "julia", "--device", "cuda"]) == 2
    assert "runs on CPU tensors only" in capsys.readouterr().err
