"""The Julia backend, measured: what the bridge costs per call, and forward+
backward end to end against ``torch.linalg`` and the native backend.

    python benchmarks/bench_julia.py [--quick] [--sizes 8,64,512,4096x8]
        [--repeat 21] [--threads N] [--op svd,eigh] [--part overhead,e2e]
        [--blas auto|openblas|torch|mkl|all]

Where Julia is not usable it prints ``skipped: <reason>`` and exits 0.

overhead: the same rule timed two ways, interleaved: inside Julia (a loop
timed with ``time_ns()`` that calls the typed functions the glue's entry points
run, ``svd_core`` + ``svd_pullback_core!`` or ``eigh_core`` +
``eigh_pullback_core!``, on plain Julia arrays, gauge recorder included), and
from Python, ``ps.svd(A, backend="julia")`` + ``torch.autograd.backward`` with
the same cotangents (no loss: only the bridge's own work differs). The
difference per call is the bridge (the autograd.Function, validation, the
crossing of tensors as addresses, juliacall, the lock, the gradient buffer,
Julia's warning collection, the wrapping of Julia's results for torch). Goals,
each row marked met or not: at most 20 us per call at 8x8, at most 2 % at
n >= 256, and backend="julia" within 1.10x of the rule timed inside Julia at
every size.

e2e: ``torch.linalg``, the native backend and the Julia backend, forward +
backward of the losses of bench_svd.py / bench_eigh.py, interleaved in one
process; ratios to ``torch.linalg``. Julia's BLAS threads are what the bridge
gives each call (pyspectral/julia/_blas.py: one thread below 768x768 entries,
torch's thread count from there on, or PYSPECTRAL_JULIA_BLAS_THREADS=N for
every call, which also applies to the loop timed inside Julia). ``--blas X``
runs with PYSPECTRAL_JULIA_BLAS=X: ``auto`` (the default: torch's own LAPACK
where torch's library exports it), ``openblas`` (Julia's own), ``torch``, or
``mkl`` (the ``mkl`` wheel's libmkl_rt; skipped if that is not installed);
``--blas all`` runs openblas, torch and mkl, each in a fresh process, one after
the other.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # Julia before torch, the order PythonCall recommends (the other one makes
    # pyspectral warn): imported first, pyspectral starts Julia when it is usable
    # here (PYSPECTRAL_START_JULIA=auto); where it is not, nothing starts.
    os.environ.setdefault("PYSPECTRAL_START_JULIA", "auto")
    import pyspectral  # noqa: F401

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402
import bench_eigh  # noqa: E402
import bench_svd  # noqa: E402

import pyspectral as ps  # noqa: E402
from pyspectral.julia import _blas, _bridge, _convert  # noqa: E402

SIZES = "8,32,64,128,256,512,1024,4096x8"
QUICK_SIZES = "8,64,256,512x8"
TARGET = 0.02  # seconds of calls per timed round (many calls at small n)

# One Julia expression (juliacall's seval parses one), evaluated into Main once the
# glue (Main.PySpectralGlue) is loaded.
JULIA_TIMERS = """
module PySpectralBench

import LinearAlgebra

const G = Main.PySpectralGlue

# One forward+backward pass of a rule as the glue runs it for the bridge: its typed
# core functions on plain arrays, in Julia's layout, with the options the bridge
# passes by default (no tolerances, the gauge measured into a recorder); returns the
# gradient. SVD: At is the batch of transposes, dU the cotangent of Julia's U
# (Python's gVh transposed), dVt Python's gU transposed.
function svd_pass(At, dU, dS, dVt)
    U, S, Vt = G.svd_core(At, false)
    dAt = zeros(eltype(At), size(At))
    opts, _ = G.pullback_options(nothing, nothing, true, nothing)
    return G.svd_pullback_core!(dAt, U, S, Vt, dU, dS, dVt, opts)
end

# eigh: Python's lower triangle is Julia's upper one ("U"); dV is Python's gV
# with the same indexing (column-major); the gradient under ps.eigh's default
# convention, torch's Hermitian one.
function eigh_pass(At, dw, dV)
    w, V = G.eigh_core(At, "U")
    dAt = zeros(eltype(At), size(At))
    opts, _ = G.pullback_options(nothing, nothing, true, nothing)
    return G.eigh_pullback_core!(dAt, w, V, dw, dV, "U", opts, "hermitian")
end

# The tensors the bridge would pass, (address, code, dims...), as Julia's own
# copies: plain arrays, as the glue's wrap makes of them.
plain(spec) = copy(G.wrap(spec))

# `number` passes with Julia's BLAS on `threads` threads (what the bridge gives a call
# of this size), then the count found restored; seconds by time_ns().
function seconds(f, args, number, threads)
    found = LinearAlgebra.BLAS.get_num_threads()
    LinearAlgebra.BLAS.set_num_threads(threads)
    start = time_ns()
    for _ in 1:number
        f(args...)
    end
    elapsed = (time_ns() - start) / 1e9
    LinearAlgebra.BLAS.set_num_threads(found)
    return elapsed
end

svd_seconds(At, dU, dS, dVt, number::Integer, threads::Integer) =
    seconds(svd_pass, map(plain, (At, dU, dS, dVt)), number, threads)
eigh_seconds(At, dw, dV, number::Integer, threads::Integer) =
    seconds(eigh_pass, map(plain, (At, dw, dV)), number, threads)

# The gradient of one pass, as the glue returns results: the benchmark checks it
# against the bridge's.
svd_gradient(At, dU, dS, dVt) = G.out(svd_pass(map(plain, (At, dU, dS, dVt))...))
eigh_gradient(At, dw, dV) = G.out(eigh_pass(map(plain, (At, dw, dV))...))

version() = string(VERSION)

end
"""


# ------------------------------------------------------------ what runs here


def torch_blas() -> str:
    """torch's BLAS and LAPACK, as ``torch.__config__.show()`` reports them."""
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    lapack = re.search(r"LAPACK_INFO=(\w+)", config)
    mkl = re.search(r"Math Kernel Library Version ([\w.-]+)", config)
    text = (
        f"BLAS {blas[1] if blas else 'unknown'}, "
        f"LAPACK {lapack[1] if lapack else 'unknown'}"
    )
    if mkl:
        text += f" (oneMKL {mkl[1]})"
    elif "openblas" in config.lower():
        text += " (OpenBLAS)"
    return text


def real_julia() -> bool:
    """Whether the Julia runtime is the real one (tests swap in a stand-in,
    which has no Julia to time a loop in)."""
    return isinstance(_bridge.runtime, _bridge.JuliaRuntime)


def start_julia() -> Any:
    """Start Julia (through pyspectral, so PYSPECTRAL_JULIA_BLAS applies) and
    define the timing loops; return the timing module (None for a stand-in
    runtime)."""
    _timing.progress("starting Julia (through pyspectral)...")
    _bridge.glue()
    if not real_julia():
        return None
    from juliacall import Main as jl

    jl.seval(JULIA_TIMERS.strip())
    return jl.PySpectralBench


def header(bench: Any) -> str:
    if bench is None:
        julia = "Julia: a stand-in runtime, not Julia"
    else:
        fixed = _blas.requested_threads()
        threads = (
            f"{fixed} BLAS threads ({_blas.THREADS_ENV})"
            if fixed is not None
            else f"BLAS threads per call: 1 below {_blas.threads_from()} entries, "
            f"{torch.get_num_threads()} from there"
        )
        julia = f"Julia {bench.version()}, BLAS: {_bridge.julia_blas()}, {threads}"
    return (
        f"{julia}; torch {torch.__version__}: {torch_blas()}, "
        f"{torch.get_num_threads()} threads"
    )


# ---------------------------------------------------------------- overhead


def cotangents(op: str, A: torch.Tensor, g: torch.Generator) -> tuple:
    """Random cotangents of the outputs of ``op`` on ``A`` (svd: U, S, Vh;
    eigh: w, V)."""

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=A.dtype)

    if op == "svd":
        return r(*A.shape), r(*A.shape[:-1]), r(*A.shape)
    return r(*A.shape[:-1]), r(*A.shape)


def python_calls(op: str, A: torch.Tensor, cot: tuple) -> Callable:
    """``number -> run``: ``run()`` makes ``number`` calls of ``ps.<op>(A,
    backend="julia")`` + backward with ``cot``."""
    fn = {"svd": ps.svd, "eigh": ps.eigh}[op]

    def calls(number: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(number):
                X = A.detach().requires_grad_(True)
                torch.autograd.backward(fn(X, backend="julia"), cot)

        return run

    return calls


def julia_calls(op: str, bench: Any, A: torch.Tensor, cot: tuple) -> tuple:
    """``(calls, gradient)``: ``calls(number)()`` makes ``number`` calls of the
    rule inside Julia and returns their time (seconds) as measured there;
    ``gradient()`` is the gradient one such call computes (as a tensor). The
    tensors cross as the bridge passes them (``keep`` holds them meanwhile)."""
    _bridge.glue()
    keep: list = []
    At = _convert.to_julia(A, keep)
    if op == "svd":
        gU, gS, gVh = cot
        # Julia's U is Python's Vh^T and its Vt Python's U^T
        # (see pyspectral/julia/_convert.py).
        args = (
            _convert.to_julia(gVh, keep),
            _convert.to_julia_vectors(gS, keep),
            _convert.to_julia(gU, keep),
        )
        timer, one = bench.svd_seconds, bench.svd_gradient
    else:
        gw, gV = cot
        args = (
            _convert.to_julia_vectors(gw, keep),
            _convert.to_julia_matrices(gV, keep),
        )
        timer, one = bench.eigh_seconds, bench.eigh_gradient

    def calls(number: int) -> Callable[[], float]:
        # keep=keep: the tensors Julia reads stay alive as long as the timer
        threads = _blas.threads_for(_convert.elements(A))  # the bridge's choice
        return lambda keep=keep: float(timer(At, *args, number, threads))

    def gradient() -> torch.Tensor:
        return _convert.from_julia(one(At, *args), A.shape[:-2])

    return calls, gradient


def check_same_rule(op: str, A: torch.Tensor, cot: tuple, gradient: Callable) -> None:
    """The loop timed inside Julia computes what ``backend="julia"`` computes
    (same arrays, roles and options): else the comparison would mean nothing."""
    X = A.detach().requires_grad_(True)
    if op == "svd":
        Y = ps.svd(X, backend="julia", full_matrices=False)
    else:
        Y = ps.eigh(X, backend="julia")
    (expected,) = torch.autograd.grad(Y, X, cot)
    got, scale = gradient(), float(expected.abs().max())
    if not torch.allclose(got, expected, rtol=1e-9, atol=1e-12 * scale):
        raise RuntimeError(
            f"bench_julia: the {op} gradient computed inside Julia differs from "
            f"the bridge's by {float((got - expected).abs().max()):.3g}: the Julia "
            "timing loop does not call the rule as the bridge does"
        )


def calls_per_round(calls: Callable) -> int:
    """How many calls make a timed round of about ``TARGET`` seconds."""
    calls(1)()  # compiles what the size needs
    start = time.perf_counter()
    calls(1)()
    once = time.perf_counter() - start
    return max(1, min(10_000, round(TARGET / max(once, 1e-7))))


# The goals for the bridge's cost (issue 16): per forward+backward call at most
# OVERHEAD_US at 8x8 (unbatched n <= 8), at most OVERHEAD_PERCENT from n = LARGE
# on, and backend="julia" within RATIO of the rule timed inside Julia everywhere.
OVERHEAD_US = 20.0
OVERHEAD_PERCENT = 2.0
LARGE = 256
RATIO = 1.10


def goals(batch: int, n: int, overhead_us: float, ratio: float) -> str:
    """The goals that apply at this size and whether each is met."""
    checks = [(f"<= {RATIO:.2f}x", ratio <= RATIO)]
    if not batch and n <= 8:
        checks.append((f"<= {OVERHEAD_US:.0f} us", overhead_us <= OVERHEAD_US))
    if not batch and n >= LARGE:
        percent = 100 * (ratio - 1)
        checks.append((f"<= {OVERHEAD_PERCENT:.0f} %", percent <= OVERHEAD_PERCENT))
    return ", ".join(f"{goal}: {'met' if ok else 'MISSED'}" for goal, ok in checks)


def overhead_rows(op: str, bench: Any, sizes: str, repeat: int) -> Iterator[list]:
    """One row per size: the rule inside Julia, the same through the bridge,
    the difference per call (us and %), their ratio and the goals met."""
    g = torch.Generator().manual_seed(0)
    problem = {"svd": bench_svd.problem, "eigh": bench_eigh.problem}[op]
    for size in sizes.split(","):
        batch, n = _timing.parse_size(size)
        A, _ = problem(batch, n, g)
        cot = cotangents(op, A, g)
        python, (julia, gradient) = (
            python_calls(op, A, cot),
            julia_calls(op, bench, A, cot),
        )
        check_same_rule(op, A, cot, gradient)
        number = calls_per_round(python)
        times = _timing.interleaved(
            {"julia": julia(number), "python": python(number)},
            repeat,
            what=f"{op} {_timing.label(batch, n)} bridge overhead, {number} calls "
            "a round",
        )
        diff = statistics.median(p - j for p, j in zip(times["python"], times["julia"]))
        overhead_us = 1e6 * diff / number
        ratio = _timing.ratio(times, "julia", "python")
        yield [
            _timing.label(batch, n),
            f"{1e6 * statistics.median(times['julia']) / number:.1f}",
            f"{1e6 * statistics.median(times['python']) / number:.1f}",
            f"{overhead_us:.1f}",
            f"{100 * (ratio - 1):.1f} %",
            f"{ratio:.3f}",
            goals(batch, n, overhead_us, ratio),
        ]


# --------------------------------------------------------------- end to end


def e2e_rows(op: str, sizes: str, repeat: int) -> Iterator[list]:
    """One row per size: torch.linalg, native and Julia backends, fwd+bwd of
    bench_<op>.py's loss; ratios to torch.linalg."""
    g = torch.Generator().manual_seed(0)
    module = {"svd": bench_svd, "eigh": bench_eigh}[op]
    stock = {
        "svd": lambda A: torch.linalg.svd(A, full_matrices=False),
        "eigh": torch.linalg.eigh,
    }[op]
    ours = {"svd": ps.svd, "eigh": ps.eigh}[op]
    for size in sizes.split(","):
        batch, n = _timing.parse_size(size)
        A, W = module.problem(batch, n, g)
        times = _timing.interleaved(
            {
                "torch": module.step(stock, A, W),
                "native": module.step(lambda A: ours(A, backend="torch"), A, W),
                "julia": module.step(lambda A: ours(A, backend="julia"), A, W),
            },
            repeat,
            what=f"{op} {_timing.label(batch, n)} fwd+bwd, 3 implementations",
        )
        med = {k: statistics.median(v) for k, v in times.items()}
        yield [
            _timing.label(batch, n),
            *(f"{1e3 * med[k]:.3f}" for k in ("torch", "native", "julia")),
            f"{_timing.ratio(times, 'torch', 'native'):.2f}",
            f"{_timing.ratio(times, 'torch', 'julia'):.2f}",
        ]


# ------------------------------------------------------------ command line


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _timing.parser(__doc__.split("\n\n")[0], SIZES, QUICK_SIZES)
    p.add_argument("--op", default="svd,eigh", help="svd, eigh or svd,eigh")
    p.add_argument(
        "--part", default="overhead,e2e", help="overhead, e2e or overhead,e2e"
    )
    p.add_argument(
        "--blas",
        choices=("auto", "openblas", "torch", "mkl", "all"),
        default=None,
        help="Julia's BLAS (PYSPECTRAL_JULIA_BLAS): torch's own LAPACK where "
        "exported (auto, torch), Julia's OpenBLAS, the mkl wheel's, or all three, "
        "each in a fresh process (default: as PYSPECTRAL_JULIA_BLAS says)",
    )
    args = _timing.finish(p.parse_args(argv), SIZES, QUICK_SIZES)
    for name, allowed in (("op", ("svd", "eigh")), ("part", ("overhead", "e2e"))):
        values = getattr(args, name).split(",")
        if not values or any(v not in allowed for v in values):
            p.error(f"--{name} takes a comma-separated subset of {allowed}")
        setattr(args, name, values)
    return args


def child_argv(args: argparse.Namespace, blas: str) -> list[str]:
    argv = ["--sizes", args.sizes, "--repeat", str(args.repeat)]
    argv += ["--threads", str(torch.get_num_threads()), "--blas", blas]
    return argv + ["--op", ",".join(args.op), "--part", ",".join(args.part)]


def every_blas(args: argparse.Namespace) -> int:
    """``--blas openblas``, ``torch`` and ``mkl``, each in a fresh process
    (Julia's BLAS is chosen once per process), their output streamed through."""
    env = dict(os.environ)
    root = Path(ps.__file__).resolve().parent.parent  # this pyspectral first
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(root), env.get("PYTHONPATH")) if p
    )
    status = 0
    for blas in ("openblas", "torch", "mkl"):
        print(f"\n## Julia's BLAS: {blas} (a fresh process)", flush=True)
        command = [sys.executable, __file__, *child_argv(args, blas)]
        status = max(status, subprocess.run(command, env=env).returncode)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    if args.blas == "all":
        return every_blas(args)
    if args.blas is not None:
        os.environ[_blas.BLAS_ENV] = args.blas  # read when Julia starts
    usable, why = _bridge.status()
    if not usable:
        print(f"skipped: the Julia backend is not usable here: {why}")
        return 0
    if args.blas in ("torch", "mkl") and _blas.blas_choice()[1] is not None:
        print(f"skipped: --blas {args.blas}: {_blas.blas_choice()[1]}")
        return 0
    if args.blas is not None and _bridge.julia_blas() is not None:
        _timing.progress(
            "note: Julia was already running in this process, so --blas does not "
            "apply; the header says which BLAS Julia uses"
        )
    try:
        bench = start_julia()
    except ps.PySpectralError as err:
        print(f"bench_julia: {err}", file=sys.stderr)
        return 1
    print(header(bench), flush=True)
    for op in args.op:
        if "overhead" in args.part and bench is None:
            print(f"\n{op} overhead: skipped: the stand-in runtime has no Julia")
        elif "overhead" in args.part:
            table = _timing.Table(
                f"{op}: bridge overhead per forward+backward call, float64, median "
                f"us; goals: <= {OVERHEAD_US:.0f} us at 8x8, <= "
                f"{OVERHEAD_PERCENT:.0f} % at n >= {LARGE}, julia / in Julia <= "
                f"{RATIO:.2f} everywhere",
                (
                    "size",
                    "in Julia",
                    'ps backend="julia"',
                    "overhead",
                    "overhead %",
                    "julia / in Julia",
                    "goals",
                ),
            )
            for row in overhead_rows(op, bench, args.sizes, args.repeat):
                table.row(row)
        if "e2e" in args.part:
            table = _timing.Table(
                f"{op}: forward+backward, float64, median ms; ratios to torch.linalg",
                (
                    "size",
                    "torch.linalg",
                    "native",
                    "julia",
                    "native/torch",
                    "julia/torch",
                ),
            )
            for row in e2e_rows(op, args.sizes, args.repeat):
                table.row(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
