"""The benchmarks and ``python -m pyspectral bench``: the command line reaches
every benchmark, rows are printed as they are measured, the Julia benchmark
skips cleanly where Julia is absent; and the opt-in MKL for Julia
(PYSPECTRAL_JULIA_BLAS in pyspectral/julia/_blas.py): finding libmkl_rt, parsing
the setting, warning when it cannot be honoured. No timing is asserted: the
numbers are whatever the machine gives.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.metadata
import importlib.util
import io
import os
import platform
import queue
import re
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _fake_julia import FakeJulia, installed
from _julia import REASON

import pyspectral.__main__ as cli
from pyspectral.julia import _blas, _bridge

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import _timing  # noqa: E402
import bench_compile  # noqa: E402
import bench_eig_topk  # noqa: E402
import bench_eigh  # noqa: E402
import bench_julia  # noqa: E402
import bench_julia_ttfx  # noqa: E402
import bench_overhead  # noqa: E402
import bench_trg  # noqa: E402
import bench_truncation  # noqa: E402

JULIA_USABLE, JULIA_WHY = _bridge.status()
needs_no_julia = pytest.mark.skipif(
    JULIA_USABLE,
    reason="Julia is usable here, so this command would run the Julia benchmark "
    "for real (minutes); the skip path is tested where Julia is absent",
)
needs_julia = pytest.mark.skipif(not JULIA_USABLE, reason=REASON)


def child_env() -> dict[str, str]:
    """This environment for a child Python: the pyspectral these tests import
    first (a checkout's folder on PYTHONPATH; an installed one needs nothing,
    and a checkout there would put its juliapkg.json beside the installed
    package's, which juliapkg refuses), and stdout block-buffered (as for any
    pipe) unless the code flushes."""
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    root = Path(cli.__file__).resolve().parent.parent
    if root.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root), env.get("PYTHONPATH")) if p
        )
    return env


# The bench command finds benchmarks/ beside the imported package or in the
# working directory, as a user runs it from a clone.  The children import
# pyspectral first and then enter the clone, so that an installed wheel is the
# one tested (starting in the clone would put its pyspectral first on the path).
def from_the_clone(argv: list[str]) -> str:
    """``python -c`` code running ``python -m pyspectral *argv`` from the clone."""
    return (
        "import os, sys\n"
        "from pyspectral.__main__ import main\n"
        f"os.chdir({str(ROOT)!r})\n"
        f"sys.exit(main({argv!r}))\n"
    )


# ------------------------------------------------------------ command line


@pytest.mark.parametrize(
    "which", ["svd", "eigh", "topk", "truncation", "trg", "compile", "julia", "all"]
)
def test_bench_command_parses_every_benchmark(which, monkeypatch):
    seen = {}

    def fake_bench(name: str, args: argparse.Namespace) -> int:
        seen.update(name=name, args=args)
        return 0

    monkeypatch.setattr(cli, "bench", fake_bench)
    assert cli.main(["bench", which, "--quick"]) == 0
    assert seen["name"] == which and seen["args"].quick


def test_bench_command_rejects_an_unknown_benchmark(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "lu"])
    assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def namespace(**kw) -> argparse.Namespace:
    base = dict(quick=False, sizes=None, repeat=None, threads=None, blas=None)
    return argparse.Namespace(**{**base, **kw})


def test_bench_arguments_per_benchmark():
    args = namespace(quick=True, sizes="8,16", repeat=3, blas="mkl")
    assert cli.bench_argv("svd", args) == [
        "--quick",
        "--sizes",
        "8,16",
        "--repeat",
        "3",
    ]
    assert cli.bench_argv("eigh", namespace()) == []
    assert cli.bench_argv("julia", args)[-2:] == ["--blas", "mkl"]
    # bench_topk.py has no --quick, --sizes nor --repeat: its smallest problem.
    assert cli.bench_argv("topk", args) == cli.TOPK_QUICK
    assert cli.bench_argv("topk", namespace()) == []


def test_bench_all_runs_each_benchmark_in_order(tmp_path, monkeypatch, capsys):
    """``bench all`` loads benchmarks/bench_<name>.py for svd, eigh,
    factorizations, topk, truncation, trg, compile and julia (stand-in
    scripts here) and calls main with their arguments."""
    for name in cli.BENCHMARKS:
        (tmp_path / f"bench_{name}.py").write_text(
            f"def main(argv):\n    print('ran {name}', list(argv))\n"
        )
    monkeypatch.setattr(cli, "_benchmarks_dir", lambda: tmp_path)
    assert cli.bench("all", namespace(quick=True)) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "ran svd ['--quick']",
        "ran eigh ['--quick']",
        "ran factorizations ['--quick']",
        f"ran topk {cli.TOPK_QUICK}",
        "ran truncation ['--quick']",
        "ran trg ['--quick']",
        "ran compile ['--quick']",
        "ran julia ['--quick']",
    ]
    assert "running benchmarks/bench_topk.py" in out.err


def test_topk_benchmark_accepts_the_quick_arguments(capsys):
    spec = importlib.util.spec_from_file_location(
        "bench_topk", BENCHMARKS / "bench_topk.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(list(cli.TOPK_QUICK))
    assert "| randomized |" in capsys.readouterr().out


# --------------------------------------------------------------- streaming


def test_rows_stream_through_a_pipe_before_the_next_size_is_measured():
    """`python -m pyspectral bench svd`: the child blocks before measuring
    its second size until the parent has read the first row from the pipe, so
    the test passes only if that row was flushed (stdout is a block-buffered
    pipe here), and the child cannot have ended before."""
    gate = f"""
import os, sys
sys.path.insert(0, {str(BENCHMARKS)!r})
import _timing
measure, calls = _timing.interleaved, []
def gated(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        sys.stdin.readline()  # until the parent has seen the first row
    return measure(*args, **kwargs)
_timing.interleaved = gated
from pyspectral.__main__ import main
os.chdir({str(ROOT)!r})  # as from_the_clone does
sys.exit(main(["bench", "svd", "--quick", "--sizes", "8,16", "--repeat", "1"]))
"""
    child = subprocess.Popen(
        [sys.executable, "-c", gate],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x) for x in child.stdout] + [lines.put(None)],
        daemon=True,
    ).start()
    seen = []
    try:
        while not (seen and seen[-1] and seen[-1].startswith("| 8x8 |")):
            try:
                seen.append(lines.get(timeout=120))  # a guard against a hang
            except queue.Empty:
                pytest.fail(f"no row reached the pipe (not flushed?); read {seen}")
            assert seen[-1] is not None, f"ended without a row: {seen}"
        assert child.poll() is None  # still waiting at the gate
        child.stdin.write("go\n")
        child.stdin.close()
        assert child.wait(timeout=120) == 0, child.stderr.read()
    finally:
        child.kill()
    rest = []
    while (line := lines.get(timeout=10)) is not None:
        rest.append(line)
    assert any(x.startswith("| 16x16 |") for x in rest), rest


def test_each_row_is_printed_before_the_next_measurement(monkeypatch, capsys):
    measure, printed = _timing.interleaved, []

    def spy(*args, **kwargs):
        printed.append(capsys.readouterr().out)  # what was printed so far
        return measure(*args, **kwargs)

    monkeypatch.setattr(_timing, "interleaved", spy)
    assert bench_eigh.main(["--sizes", "4,6,2x4", "--repeat", "1"]) == 0
    assert "| size | torch.linalg | pyspectral | ratio |" in printed[0]
    assert "| 4x4 |" in printed[1] and "| 6x6 |" in printed[2]
    assert "| 2 x 4x4 |" in capsys.readouterr().out


def test_quick_defaults():
    args = _timing.arguments("x", ["--quick"])
    assert (args.sizes, args.repeat) == (_timing.QUICK_SIZES, 5)
    args = _timing.arguments("x", [])
    assert (args.sizes, args.repeat) == (_timing.DEFAULT_SIZES, 21)


def test_interleaved_takes_a_functions_own_measurement_and_announces_slow_ones(
    monkeypatch, capsys
):
    order = []

    def own() -> float:
        order.append("own")
        return 0.25  # e.g. seconds measured inside Julia

    def wall() -> None:
        order.append("wall")

    monkeypatch.setattr(_timing, "SLOW", -1.0)  # everything counts as slow
    times = _timing.interleaved(
        {"own": own, "wall": wall}, 3, warmup=1, what="x", round_s=0.0
    )
    assert times["own"] == [0.25, 0.25, 0.25]
    assert all(t >= 0 for t in times["wall"]) and len(times["wall"]) == 3
    assert order == ["own", "wall", "own", "wall", "wall", "own", "own", "wall"]
    assert "measuring x (3 rounds" in capsys.readouterr().err


def test_interleaved_repeats_short_calls_within_a_round(monkeypatch):
    """On a clock that each call moves by 1 ms, a 10 ms round runs each
    function 10 times, and the time reported is per call."""
    clock, calls = [0.0], {"a": 0, "b": 0}
    monkeypatch.setattr(_timing.time, "perf_counter", lambda: clock[0])

    def tick(name: str) -> Callable[[], None]:
        def fn() -> None:
            calls[name] += 1
            clock[0] += 0.001

        return fn

    times = _timing.interleaved(
        {"a": tick("a"), "b": tick("b")}, 2, warmup=1, round_s=0.01
    )
    assert calls == {"a": 1 + 2 * 10, "b": 1 + 2 * 10}  # warm-up, 2 rounds
    assert times["a"] == pytest.approx([0.001] * 2)
    assert times["b"] == pytest.approx([0.001] * 2)


def test_bench_overhead_rows(capsys):
    """bench_overhead's table: every row for each size, the times as numbers
    and the op counts as counts (a backward dispatches at least its two
    matrix products)."""
    threads = torch.get_num_threads()  # (main sets one thread)
    try:
        argv = ["--sizes", "4,2x3", "--op", "svd,eigh", "--repeat", "1"]
        assert bench_overhead.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    for op in ("svd", "eigh"):
        table = out.split(f"{op}: thread CPU time")[1].split("\n\n")[1]
        rows = {
            r.split(" | ")[0][2:]: r.split(" | ")[1:] for r in table.splitlines()[2:]
        }
        assert "Function round trip" in rows and "pullback (warm)" in rows
        for what in ("torch.linalg", "pyspectral"):
            counts = rows[f"torch ops in the backward: {what}"]
            assert all(int(c.strip(" |")) >= 2 for c in counts)
        float(rows["overhead"][1].strip(" |"))


def test_bench_eig_topk_rows(capsys):
    """bench_eig_topk's table at a small size: the forward, forward + backward,
    the backward call alone (its ratio to the forward) and ARPACK's row, each
    time a number."""
    argv = ["--n", "120", "--repeat", "1", "--skip-torch"]
    assert bench_eig_topk.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"eig_topk: \d+ products, \d+ restarts", out)
    rows = {r.split(" | ")[0][2:]: r.split(" | ")[1:] for r in out.splitlines()[4:]}
    for what in (
        "eig_topk forward",
        "eig_topk forward + backward",
        "eig_topk backward alone (the .backward() call)",
    ):
        assert float(rows[what][0]) > 0
    if importlib.util.find_spec("scipy") is None:  # the row says why not
        assert "ARPACK (scipy eigs) | skipped: scipy is not installed" in out
        return
    arpack = rows["ARPACK (scipy eigs) forward"]
    assert float(arpack[0]) > 0 and "eig_topk / ARPACK" in arpack[1]


def test_bench_truncation_rows(capsys):
    """bench_truncation's table: a row per rule, each rule keeping the
    triplets of the fixed k = n // 8 it is timed against, the times and
    ratios as numbers."""
    assert bench_truncation.main(["--sizes", "32", "--repeat", "1"]) == 0
    calls, alone = capsys.readouterr().out.split("the rule's own work")

    def rows(table: str) -> list[list[str]]:
        lines = [r for r in table.splitlines() if r.startswith("| 32x32")]
        return [[c.strip() for c in r.strip("| ").split(" | ")] for r in lines]

    assert len(rows(calls)) == 7
    for _, rule, kept, ms, ratio in rows(calls):
        assert kept == "4", rule
        float(ms), float(ratio)
    assert [r[1] for r in rows(alone)] == [
        "rtol",
        "error_rtol",
        "rtol, multiplets='down'",
    ]
    for _, _, us, share in rows(alone):
        float(us), float(share)


def test_bench_trg_rows(capsys):
    """bench_trg's table at a tiny size (chi = 6, 6 steps, one round): the
    two times and their ratio as numbers, torch.linalg's energy NaN (from the
    fifth step its SVDs repeat exact zeros), pyspectral's finite and the one
    of the example's own autograd."""
    assert bench_trg.main(["--sizes", "6", "--repeat", "1", "--steps", "6"]) == 0
    out = capsys.readouterr().out
    assert "one temperature point" in out
    (line,) = [r for r in out.splitlines() if r.startswith("| 6 |")]
    chi, steps, t_torch, t_ps, ratio, u_torch, u_ps = line.strip("| ").split(" | ")
    assert (chi, steps) == ("6", "6")
    assert float(t_torch) > 0 and float(t_ps) > 0 and float(ratio) > 0
    assert u_torch == "NaN"
    u = bench_trg.example().observables(bench_trg.K, 6, 6)[1]
    assert abs(float(u_ps) - u) < 1e-6


def test_bench_trg_times_the_second_derivative_when_asked(capsys):
    argv = ["--sizes", "4", "--repeat", "1", "--steps", "3", "--second"]
    assert bench_trg.main(argv) == 0
    out = capsys.readouterr().out
    assert "| pyspectral u and c ms |" in out
    (line,) = [r for r in out.splitlines() if r.startswith("| 4 |")]
    assert float(line.strip("| ").split(" | ")[-1]) > 0


def test_ops_in_counts_dispatched_operations():
    x = torch.ones(3)
    assert bench_overhead.ops_in(lambda: (x + 1) * 2) == 2


# ------------------------------------------------------------ the Julia one


def run_bench_julia(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = bench_julia.main(list(argv))
    return status, out.getvalue()


def test_bench_julia_skips_where_julia_is_absent():
    with installed(FakeJulia(probe_reason="no Julia in this test")) as fake:
        status, out = run_bench_julia("--quick")
    assert status == 0
    assert (
        out == "skipped: the Julia backend is not usable here: no Julia in this test\n"
    )
    assert fake.starts == 0


@needs_no_julia
def test_bench_julia_command_skips_where_julia_is_absent():
    run = subprocess.run(
        [sys.executable, "-c", from_the_clone(["bench", "julia", "--quick"])],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("skipped: the Julia backend is not usable here: ")


@needs_no_julia
def test_bench_julia_all_blas_runs_three_fresh_processes():
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_julia.py"), "--blas", "all"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    heads = [f"## Julia's BLAS: {blas}" for blas in ("openblas", "torch", "mkl")]
    assert [out.index(head) for head in heads] == sorted(out.index(h) for h in heads)
    assert out.count("skipped: ") == 3


def test_bench_julia_end_to_end_rows_with_the_stand_in_runtime():
    """The end-to-end part runs the three implementations through the real
    bridge (Julia replaced by the numpy stand-in); the overhead part, which
    times a loop inside Julia, says it cannot run there."""
    with installed() as fake:
        status, out = run_bench_julia(
            "--sizes", "4,2x3", "--repeat", "1", "--op", "svd,eigh"
        )
    assert status == 0
    assert "Julia: a stand-in runtime, not Julia" in out
    assert out.count("overhead: skipped: the stand-in runtime has no Julia") == 2
    assert (
        "| size | torch.linalg | native | julia | native/torch | julia/torch |" in out
    )
    assert out.count("| 4x4 |") == 2 and out.count("| 2 x 3x3 |") == 2
    assert fake.calls_to("svd_batched") and fake.calls_to("eigh_pullback_batched!")


class StandInTimers:
    """bench_julia's Julia module PySpectralBench, in Python, over the stand-in
    glue: the passes call the glue's typed functions (here the stand-in's) on
    Julia's own copies of the tensors the bridge would pass, as the Julia code
    does, and return the gradient as the glue returns results. ``swap``: pass
    the two SVD cotangents in the wrong roles (what the gradient check must
    catch)."""

    def __init__(self, fake: FakeJulia, swap: bool = False) -> None:
        self.fake, self.swap = fake, swap

    def _plain(self, *specs):
        return [self.fake._wrap(s).copy(order="F") for s in specs]

    def svd_pass(self, At, dU, dS, dVt):
        if self.swap:
            dU, dVt = dVt, dU
        U, S, Vt = self.fake.svd_batched(At, False)
        dAt = np.zeros(At.shape, dtype=At.dtype, order="F")
        self.fake.svd_pullback_batched_b(
            dAt, U, S, Vt, dU, dS, dVt, None, None, True, None
        )
        return dAt

    def eigh_pass(self, At, dw, dV):
        w, V = self.fake.eigh_batched(At, "U")
        dAt = np.zeros(At.shape, dtype=At.dtype, order="F")
        self.fake.eigh_pullback_batched_b(
            dAt, w, V, dw, dV, "U", "hermitian", None, None, True, None
        )
        return dAt

    def svd_gradient(self, *specs):
        return self.fake._out(self.svd_pass(*self._plain(*specs)))

    def eigh_gradient(self, *specs):
        return self.fake._out(self.eigh_pass(*self._plain(*specs)))

    def svd_seconds(self, *args):
        return self._seconds(self.svd_pass, args)

    def eigh_seconds(self, *args):
        return self._seconds(self.eigh_pass, args)

    def _seconds(self, one, args) -> float:
        *specs, number, threads = args
        assert threads == _blas.threads_for(self.fake._wrap(specs[0]).shape[0] ** 2)
        plain = self._plain(*specs)
        start = time.perf_counter()
        for _ in range(number):
            one(*plain)
        return time.perf_counter() - start

    def version(self) -> str:
        return "(stand-in)"


def test_bench_julia_overhead_rows_with_stand_in_timers(monkeypatch):
    """The overhead part's Python side: the arrays it hands the timing loop
    give the bridge's gradient (checked before timing), and rows come out."""
    monkeypatch.setattr(bench_julia, "TARGET", 1e-4)  # few calls a round
    # the stand-in's BLAS (whatever a real Julia of this process set up): not MKL
    monkeypatch.setattr(_blas, "_started", {"shared_pool": False})
    with installed() as fake:
        monkeypatch.setattr(bench_julia, "start_julia", lambda: StandInTimers(fake))
        status, out = run_bench_julia(
            "--sizes", "5,2x3", "--repeat", "1", "--part", "overhead"
        )
    assert status == 0
    assert out.startswith(
        "Julia (stand-in), BLAS: None, BLAS threads per call: 1 below 589824 "
        f"entries, {torch.get_num_threads()} from there; torch"
    )
    header = '| size | in Julia | ps backend="julia" | overhead | overhead % |'
    assert out.count(header + " julia / in Julia | goals |") == 2
    assert "goals: <= 20 us at 8x8, <= 2 % at n >= 256" in out
    rows = [r for r in out.splitlines() if r.startswith(("| 5x5 |", "| 2 x 3x3 |"))]
    assert len(rows) == 4
    # every row is judged against the ratio goal; 5x5 also against 20 us
    assert all("<= 1.10x: " in r for r in rows)
    assert all(("<= 20 us: " in r) == r.startswith("| 5x5 |") for r in rows)


@pytest.mark.parametrize(
    "batch, n, overhead, ratio, expected",
    [
        (0, 8, 19.0, 1.5, "<= 1.10x: MISSED, <= 20 us: met"),
        (0, 8, 25.0, 1.05, "<= 1.10x: met, <= 20 us: MISSED"),
        (0, 64, 500.0, 1.09, "<= 1.10x: met"),
        (0, 256, 1.0, 1.019, "<= 1.10x: met, <= 2 %: met"),
        (0, 512, 1.0, 1.03, "<= 1.10x: met, <= 2 %: MISSED"),
        (512, 8, 100.0, 1.2, "<= 1.10x: MISSED"),
    ],
)
def test_bench_julia_goals(batch, n, overhead, ratio, expected):
    assert bench_julia.goals(batch, n, overhead, ratio) == expected


def test_bench_julia_gradient_check_catches_a_wrong_timing_loop():
    A = torch.randn(5, 5, dtype=torch.float64)
    cot = bench_julia.cotangents("svd", A, torch.Generator().manual_seed(1))
    with installed() as fake:
        timers = StandInTimers(fake, swap=True)
        _, gradient = bench_julia.julia_calls("svd", timers, A, cot)
        with pytest.raises(RuntimeError, match="differs from the bridge's"):
            bench_julia.check_same_rule("svd", A, cot, gradient)
        _, gradient = bench_julia.julia_calls("svd", StandInTimers(fake), A, cot)
        bench_julia.check_same_rule("svd", A, cot, gradient)


def test_bench_julia_mkl_skips_when_the_mkl_wheel_is_missing(monkeypatch):
    monkeypatch.setenv(_blas.BLAS_ENV, "openblas")  # restored after the test
    monkeypatch.setattr(_blas, "find_mkl_rt", lambda: None)
    with installed() as fake:
        status, out = run_bench_julia("--blas", "mkl", "--quick")
    assert status == 0
    assert out.startswith("skipped: --blas mkl: PYSPECTRAL_JULIA_BLAS=mkl, but no")
    assert fake.starts == 0


def test_bench_julia_rejects_an_unknown_part():
    with pytest.raises(SystemExit):
        bench_julia.arguments(["--part", "overhead,speed"])


def test_torch_blas_names_torchs_blas():
    text = bench_julia.torch_blas()
    assert text.startswith("BLAS ") and "LAPACK" in text
    if "BLAS_INFO=mkl" in torch.__config__.show():
        assert "oneMKL" in text


@pytest.mark.parametrize(
    "source", [_blas.BLAS_JL, bench_julia.JULIA_TIMERS], ids=["blas", "timers"]
)
def test_julia_sources_in_python_parse(source):
    ts = pytest.importorskip("tree_sitter")
    tsj = pytest.importorskip("tree_sitter_julia")
    tree = ts.Parser(ts.Language(tsj.language())).parse(source.encode())
    bad, stack = [], [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            bad.append(f"line {node.start_point[0] + 1}: {node.type}")
        stack.extend(node.children)
    assert not bad, bad
    top = [c for c in tree.root_node.children if c.type != "line_comment"]
    assert len(top) == 1 and top[0].type == "module_definition"  # seval: one expr


# ------------------------------------------- time to the first Julia call


def test_bench_julia_ttfx_skips_where_julia_is_absent(capsys):
    with installed(FakeJulia(probe_reason="no Julia in this test")):
        assert bench_julia_ttfx.main([]) == 0
    assert capsys.readouterr().out == (
        "skipped: Julia is not installed: no Julia in this test\n"
    )


TTFX_PROBE = {
    "depots": ["/home/u/.julia", "/opt/julia/share/julia"],
    "load_path": ["@", "@v#.#", "@stdlib"],
    "project": "/home/u/env",
    "julia": "1.10.4",
    "uuid": "dd8bc477-7c4c-4613-9fd1-89d37d8dead5",
}


def test_bench_julia_ttfx_variants(tmp_path):
    """ "on" is your setup unchanged; "off" appends an environment that lists
    PySpectral and disables its workload *after* your load path (PySpectral
    is still found where your environment has it: listed first, without a
    manifest, it made Julia 1.9 report PySpectral "required but not
    installed", bench-julia-ttfx.log), with a temporary first depot."""
    base = {"PATH": "/bin", "PYTHON_JULIAPKG_OFFLINE": "yes"}
    on = bench_julia_ttfx.variant_env(base, TTFX_PROBE, tmp_path / "on", True)
    assert on == base and not (tmp_path / "on").exists()
    off = bench_julia_ttfx.variant_env(base, TTFX_PROBE, tmp_path / "off", False)
    load_path = off["JULIA_LOAD_PATH"].split(os.pathsep)
    assert load_path == ["@", "@v#.#", "@stdlib", str(tmp_path / "off" / "env")]
    depots = off["JULIA_DEPOT_PATH"].split(os.pathsep)
    assert depots == [str(tmp_path / "off" / "depot"), *TTFX_PROBE["depots"]]
    assert off["PYTHON_JULIAPKG_PROJECT"] == "/home/u/env"
    toml = (tmp_path / "off" / "env" / "Project.toml").read_text()
    assert f'PySpectral = "{TTFX_PROBE["uuid"]}"' in toml
    assert "[preferences.PySpectral]\nprecompile_workload = false" in toml
    user = dict(base, PYTHON_JULIAPKG_PROJECT="/elsewhere")  # the user's own
    off = bench_julia_ttfx.variant_env(user, TTFX_PROBE, tmp_path / "o2", False)
    assert off["PYTHON_JULIAPKG_PROJECT"] == "/elsewhere"


@pytest.mark.parametrize("start", ["EXPLICIT", "DOCUMENTED"])
def test_bench_julia_ttfx_children_compile(start):
    compile(bench_julia_ttfx.PROBE, "PROBE", "exec")
    source = getattr(bench_julia_ttfx, start) + bench_julia_ttfx.CHILD
    compile(source, start, "exec")
    first = source.index("import pyspectral")
    if start == "EXPLICIT":  # Julia first, as docs/guide/julia.md recommends
        assert source.index("import juliacall") < source.index("import torch") < first
    else:  # pyspectral starts Julia, as the guide's own snippet does
        assert source.index('os.environ["PYSPECTRAL_START_JULIA"] = "auto"') < first
        assert "import torch" not in source[:first]


@needs_julia
def test_bench_julia_ttfx_runs_for_real():
    """Slow (minutes: the "off" variant precompiles PySpectral without its
    workload into a temporary depot). In this process's own Julia setup, both
    variants run and the table comes out."""
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_julia_ttfx.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=3600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "started Julia after torch" not in run.stderr
    assert "to first backward" in run.stdout
    assert "workload on" in run.stdout and "workload off" in run.stdout
    assert "documented, no image" in run.stdout  # the guide's path, always timed


@needs_julia
def test_bench_julia_runs_for_real():
    status, out = run_bench_julia("--sizes", "8", "--repeat", "1", "--op", "svd")
    assert status == 0
    # (juliapkg may first say what it resolved, when Julia starts here)
    header = next(line for line in out.splitlines() if line.startswith("Julia "))
    assert "BLAS threads" in header
    assert out.count("| 8x8 |") == 2  # the overhead and the end-to-end rows


# ------------------------------------------------- Julia's BLAS: finding MKL


@pytest.mark.parametrize(
    "name, match",
    [
        ("libmkl_rt.so", True),
        ("libmkl_rt.so.2", True),
        ("libmkl_rt.so.3", True),
        ("libmkl_rt.2.dylib", True),
        ("mkl_rt.2.dll", True),
        ("libmkl_core.so.2", False),
        ("libmkl_rt.so.2.py", False),
        ("libmkl_rt_extra.so", False),
    ],
)
def test_mkl_rt_names(name, match):
    assert bool(_blas._MKL_RT.match(name)) is match


@pytest.mark.parametrize(
    "value, wanted",
    [
        (None, "auto"),
        ("", "auto"),
        ("  ", "auto"),
        (" Auto ", "auto"),
        ("default", None),
        ("DEFAULT", None),
        ("openblas", None),
        ("julia", None),
        ("torch", "torch"),
        (" Torch ", "torch"),
        ("mkl", "mkl"),
        (" MKL ", "mkl"),
        ("/opt/blas/libblis.so", "/opt/blas/libblis.so"),
    ],
)
def test_requested_blas(value, wanted, monkeypatch):
    if value is None:
        monkeypatch.delenv(_blas.BLAS_ENV, raising=False)
    else:
        monkeypatch.setenv(_blas.BLAS_ENV, value)
    assert _blas.requested_blas() == wanted


def mkl_wheel(tmp_path: Path, files: bool = True) -> tuple[Path, Path]:
    """An installed ``mkl`` wheel as pip lays it out: the dist-info in
    site-packages, whose RECORD lists ``../../libmkl_rt.so.3`` (data files in
    ``<prefix>/lib``). Returns (site-packages, the library)."""
    prefix = tmp_path / "wheel-prefix"
    site = prefix / "lib" / "python3.x" / "site-packages"
    info = site / "mkl-2099.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mkl\nVersion: 2099.1.0\n"
    )
    (info / "RECORD").write_text(
        "../../libmkl_core.so.3,,\n../../libmkl_rt.so.3,,\n"
        "mkl-2099.1.0.dist-info/METADATA,,\n"
    )
    library = prefix / "lib" / "libmkl_rt.so.3"
    if files:
        library.write_bytes(b"")
        (prefix / "lib" / "libmkl_core.so.3").write_bytes(b"")
    return site, library


@pytest.fixture
def empty_prefix(tmp_path, monkeypatch):
    prefix = tmp_path / "python-prefix"
    (prefix / "lib").mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(prefix))
    return prefix


def test_find_mkl_rt_in_the_installed_wheels_files(tmp_path, monkeypatch, empty_prefix):
    site, library = mkl_wheel(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    assert _blas.find_mkl_rt() == library.resolve()


def test_find_mkl_rt_in_the_prefix_lib(tmp_path, monkeypatch, empty_prefix):
    site, _ = mkl_wheel(tmp_path, files=False)  # RECORD lists a missing file
    monkeypatch.syspath_prepend(str(site))
    (empty_prefix / "lib" / "libmkl_rt.so.2").write_bytes(b"")
    assert _blas.find_mkl_rt() == (empty_prefix / "lib" / "libmkl_rt.so.2").resolve()


def test_find_mkl_rt_finds_none(monkeypatch, empty_prefix):
    def not_installed(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "files", not_installed)
    assert _blas.find_mkl_rt() is None


def test_blas_choice(tmp_path, monkeypatch):
    library = tmp_path / "libmkl_rt.so.3"
    library.write_bytes(b"")
    monkeypatch.setattr(_blas, "find_mkl_rt", lambda: library)
    monkeypatch.setenv(_blas.BLAS_ENV, "mkl")
    assert _blas.blas_choice() == (library, None)
    monkeypatch.setenv(_blas.BLAS_ENV, str(library))
    assert _blas.blas_choice() == (library.resolve(), None)
    monkeypatch.setenv(_blas.BLAS_ENV, str(tmp_path / "missing.so"))
    path, problem = _blas.blas_choice()
    assert path is None and "missing.so: no such file" in problem
    monkeypatch.setattr(_blas, "find_mkl_rt", lambda: None)
    monkeypatch.setenv(_blas.BLAS_ENV, "mkl")
    path, problem = _blas.blas_choice()
    assert path is None and "`pip install mkl`" in problem
    monkeypatch.setenv(_blas.BLAS_ENV, "default")
    assert _blas.blas_choice() == (None, None)
    # "auto" (and unset): torch's LAPACK where torch exports it, Julia's own
    # where not, never a problem to report; "torch": a problem where it is not
    torch_lib = tmp_path / "libtorch_cpu.so"
    monkeypatch.setattr(_blas, "torch_lapack", lambda: None)
    for auto in ("auto", ""):
        monkeypatch.setenv(_blas.BLAS_ENV, auto)
        assert _blas.blas_choice() == (None, None)
    monkeypatch.setenv(_blas.BLAS_ENV, "torch")
    path, problem = _blas.blas_choice()
    assert path is None and "exports no ILP64 LAPACK" in problem
    monkeypatch.setattr(_blas, "torch_lapack", lambda: torch_lib)
    for wanted in ("auto", "", "torch"):
        monkeypatch.setenv(_blas.BLAS_ENV, wanted)
        assert _blas.blas_choice() == (torch_lib, None)


def test_torch_lapack_is_torchs_library_where_it_exports_lapack(tmp_path, monkeypatch):
    """torch's Linux x86-64 wheels (MKL linked in) export the ILP64 symbols;
    where the library is not there, or not loadable, there is none."""
    found = _blas.torch_lapack()
    if found is not None:
        handle = ctypes.CDLL(str(found))
        assert all(hasattr(handle, name) for name in _blas.TORCH_SYMBOLS)
        assert found.parent == Path(torch.__file__).resolve().parent / "lib"
    if sys.platform == "linux" and platform.machine() == "x86_64":
        if torch.backends.mkl.is_available():
            assert found is not None and found.name == "libtorch_cpu.so"
    fake = tmp_path / "torch"
    (fake / "lib").mkdir(parents=True)
    monkeypatch.setattr(torch, "__file__", str(fake / "__init__.py"))
    assert _blas.torch_lapack() is None  # no library
    (fake / "lib" / "libtorch_cpu.so").write_bytes(b"not a library")
    assert _blas.torch_lapack() is None  # not loadable


def test_the_probe_message_is_dropped_and_the_rest_kept(capfd):
    """libblastrampoline's interface probe makes MKL print an error for a call
    that was not one: dropped; anything else printed meanwhile comes through."""
    with _blas._without_probe_message():
        os.write(1, b"\nIntel oneMKL ERROR: Parameter 4 was incorrect on entry to ")
        os.write(1, b"DPOTRF.\n")
    out = capfd.readouterr().out
    assert "DPOTRF" not in out and out.strip() == ""
    with _blas._without_probe_message():
        os.write(1, b"\nIntel oneMKL ERROR: Parameter 4 was incorrect on entry to ")
        os.write(1, b"DPOTRF.\nsomething else\n")
    out = capfd.readouterr().out
    assert "DPOTRF" not in out and "something else\n" in out


# ------------------------------------- Julia's BLAS: what happens at start


class StandInMain:
    """What start_blas needs of juliacall's Main: ``seval`` of the module
    source, and the module's functions (recorded)."""

    def __init__(
        self,
        count: int = 3000,
        error: Exception | None = None,
        seval_error: Exception | None = None,
    ) -> None:
        self.seval_error = seval_error
        self.evaluated: list[str] = []
        self.forwarded: list[tuple[str, str]] = []
        self.count, self.error = count, error
        self.PySpectralBLAS = types.SimpleNamespace(
            forward_mkl=lambda path, threading: self._forward("mkl", path, threading),
            forward=lambda path: self._forward("generic", path),
            forward_over=lambda path: self._forward("over", path),
            describe=lambda: "libfoo.so (ilp64)",
        )

    def seval(self, source: str) -> Any:
        """The module's source (recorded), or one call of its functions with a
        Julia string literal and integers, as start_blas writes them."""
        call = re.fullmatch(r'PySpectralBLAS\.(\w+)\("((?:[^"\\]|\\.)*)"(.*)\)', source)
        if call is not None:
            name, literal, rest = call.groups()
            path = re.sub(r"\\(.)", r"\1", literal)
            numbers = [int(n) for n in re.findall(r"-?\d+", rest)]
            return getattr(self.PySpectralBLAS, name)(path, *numbers)
        self.evaluated.append(source)
        if self.seval_error is not None:
            raise self.seval_error
        return None

    def _forward(self, how: str, path: str, *threading: int) -> int:
        self.forwarded.append((how, path, *threading))
        if self.error is not None:
            raise self.error
        return self.count


def test_start_blas_without_torchs_lapack_forwards_nothing(monkeypatch):
    monkeypatch.setenv(_blas.BLAS_ENV, "auto")
    monkeypatch.setattr(_blas, "torch_lapack", lambda: None)
    monkeypatch.setattr(_blas, "find_mkl_rt", lambda: pytest.fail("looked for"))
    jl = StandInMain()
    assert _blas.start_blas(jl) == "libfoo.so (ilp64)"
    assert jl.evaluated == [_blas.BLAS_JL.strip()] and jl.forwarded == []
    for own in ("default", "openblas"):  # Julia's own, nothing looked for
        monkeypatch.setenv(_blas.BLAS_ENV, own)
        monkeypatch.setattr(_blas, "torch_lapack", lambda: pytest.fail("looked for"))
        assert _blas.start_blas(jl) == "libfoo.so (ilp64)" and jl.forwarded == []


@pytest.mark.parametrize("setting", [None, "auto", "torch"])
def test_start_blas_forwards_torchs_lapack_over_julias_own(setting, monkeypatch):
    """By default: torch's library, over OpenBLAS (only the symbols it has), the
    one-thread-below-768x768 policy kept for what stays on OpenBLAS."""
    library = Path(torch.__file__).resolve().parent / "lib" / "libtorch_cpu.so"
    monkeypatch.setattr(_blas, "torch_lapack", lambda: library)
    monkeypatch.setattr(_blas, "_started", {"shared_pool": True})
    if setting is None:
        monkeypatch.delenv(_blas.BLAS_ENV, raising=False)
    else:
        monkeypatch.setenv(_blas.BLAS_ENV, setting)
    jl = StandInMain()
    _blas.start_blas(jl)
    assert jl.forwarded == [("over", str(library))]
    assert _blas._started["shared_pool"] is False


@pytest.mark.parametrize("setting", ["mkl"], ids=["asked for"])
@pytest.mark.parametrize(
    "openmp, layer, shared", [("gnu", 3, True), ("intel", 0, False), (None, 0, False)]
)
def test_start_blas_forwards_to_the_mkl_wheel(
    setting, openmp, layer, shared, tmp_path, monkeypatch
):
    """MKL on GNU OpenMP's threading layer where torch runs on libgomp (one pool
    of threads, then the wider BLAS-thread policy), on Intel's elsewhere."""
    library = tmp_path / "libmkl_rt.so.3"
    library.write_bytes(b"")
    monkeypatch.setattr(_blas, "find_mkl_rt", lambda: library)
    monkeypatch.setattr(_blas, "torch_openmp", lambda: openmp)
    monkeypatch.setattr(_blas, "_started", {"shared_pool": not shared})
    monkeypatch.setenv(_blas.BLAS_ENV, setting)
    jl = StandInMain()
    _blas.start_blas(jl)
    assert jl.forwarded == [("mkl", str(library), layer)]
    assert _blas._started["shared_pool"] is shared


def test_torch_openmp_reads_the_loaded_libraries(tmp_path):
    maps = tmp_path / "maps"
    line = "7f00-7f01 r-xp 00000000 08:01 123 {}\n"
    maps.write_text(line.format("/x/torch/lib/libgomp.so.1") + line.format("[heap]"))
    assert _blas.torch_openmp(str(maps)) == "gnu"
    maps.write_text(line.format("/opt/intel/libiomp5.so"))
    assert _blas.torch_openmp(str(maps)) == "intel"
    maps.write_text(line.format("/usr/lib/libc.so.6"))
    assert _blas.torch_openmp(str(maps)) is None
    assert _blas.torch_openmp(str(tmp_path / "none")) is None
    if sys.platform == "linux":  # this process: torch's own runtime, whichever
        assert _blas.torch_openmp() in ("gnu", "intel", None)


@pytest.mark.parametrize("name", ["libblis.so.4", 'odd $dir "q" \\ x/libblis.so.4'])
def test_start_blas_forwards_to_a_library_path(name, tmp_path, monkeypatch):
    library = tmp_path / name
    library.parent.mkdir(exist_ok=True)
    library.write_bytes(b"")
    monkeypatch.setenv(_blas.BLAS_ENV, str(library))
    jl = StandInMain()
    _blas.start_blas(jl)
    assert jl.forwarded == [("generic", str(library.resolve()))]


def test_start_blas_warns_when_mkl_is_missing(monkeypatch):
    monkeypatch.setattr(_blas, "find_mkl_rt", lambda: None)
    monkeypatch.setenv(_blas.BLAS_ENV, "mkl")
    jl = StandInMain()
    with pytest.warns(RuntimeWarning, match=r"pip install mkl.*default BLAS"):
        assert _blas.start_blas(jl) == "libfoo.so (ilp64)"
    assert jl.forwarded == []


@pytest.mark.parametrize(
    "jl, message",
    [
        (StandInMain(count=0), "libblastrampoline could not use"),
        (StandInMain(error=RuntimeError("dlopen failed")), "could not load .*dlopen"),
    ],
    ids=["nothing forwarded", "Julia error"],
)
def test_start_blas_warns_when_julia_cannot_use_the_library(
    jl, message, tmp_path, monkeypatch
):
    library = tmp_path / "libmkl_rt.so.2"
    library.write_bytes(b"")
    monkeypatch.setenv(_blas.BLAS_ENV, str(library))
    with pytest.warns(RuntimeWarning, match=message):
        _blas.start_blas(jl)
    assert jl.forwarded[0][:2] == ("mkl", str(library.resolve()))  # by its name


def test_start_blas_never_keeps_julia_from_starting(tmp_path, monkeypatch):
    monkeypatch.delenv(_blas.BLAS_ENV, raising=False)
    jl = StandInMain(seval_error=RuntimeError("UndefVarError"))
    assert _blas.start_blas(jl) == "unknown (RuntimeError while asking Julia)"
    library = tmp_path / "libmkl_rt.so.2"
    library.write_bytes(b"")
    monkeypatch.setenv(_blas.BLAS_ENV, str(library))
    with pytest.warns(RuntimeWarning, match=r"cannot forward Julia's BLAS"):
        _blas.start_blas(jl)


def test_info_shows_julias_blas_once_julia_has_started(monkeypatch):
    monkeypatch.delenv(_blas.BLAS_ENV, raising=False)
    monkeypatch.setattr(_blas, "torch_lapack", lambda: None)
    fake = FakeJulia()
    fake.blas = "libmkl_rt.so.3 (ilp64), libmkl_rt.so.3 (lp64)"
    with installed(fake):
        assert _bridge.julia_blas() is None
        before = io.StringIO()
        with contextlib.redirect_stdout(before):
            cli.info()
        _bridge.glue()
        after = io.StringIO()
        with contextlib.redirect_stdout(after):
            cli.info()
    assert "Julia BLAS Julia's own, OpenBLAS (Julia not started here" in (
        before.getvalue()
    )
    assert "Julia BLAS libmkl_rt.so.3 (ilp64), libmkl_rt.so.3 (lp64)\n" in (
        after.getvalue()
    )


# ------------------------------------------------ Julia's BLAS, for real


@needs_julia
def test_julia_reports_its_blas_once_started():
    _bridge.glue()
    blas = _bridge.julia_blas()
    assert blas and ("(ilp64)" in blas or "(lp64)" in blas), blas


@needs_julia
def test_julia_uses_the_mkl_wheel_when_asked(tmp_path):
    if _blas.find_mkl_rt() is None:
        pytest.skip("the mkl wheel is not installed here (pip install mkl)")
    # Every warning an error (a BLAS that did not load warns), so Julia starts
    # first, as PYSPECTRAL_START_JULIA=yes makes `import pyspectral` do: else
    # the import-order warning would be the error.
    code = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import pyspectral as ps\n"
        "import torch\n"
        "from pyspectral.julia import _bridge\n"
        "A = torch.randn(40, 30, dtype=torch.float64)\n"
        "U, S, Vh = ps.svd(A, backend='julia', full_matrices=False)\n"
        "assert torch.allclose((U * S) @ Vh, A, atol=1e-10)\n"
        "print(_bridge.julia_blas())\n"
    )
    env = child_env()
    env[_blas.BLAS_ENV] = "mkl"
    env["PYSPECTRAL_START_JULIA"] = "yes"
    env["PYSPECTRAL_JULIA_SYSIMAGE"] = "no"  # (else an unbuilt image warns)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    assert "mkl_rt" in run.stdout and "(ilp64)" in run.stdout


@needs_julia
def test_julia_uses_torchs_lapack_by_default():
    """Unset PYSPECTRAL_JULIA_BLAS: Julia's svd, eigh and QR run on torch's own
    LAPACK where torch's library exports it, agree with torch.linalg, and the
    interface probe's MKL message is not printed."""
    if _blas.torch_lapack() is None:
        pytest.skip("this torch's library exports no ILP64 LAPACK (not MKL-linked)")
    code = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import pyspectral as ps\n"
        "import torch\n"
        "from pyspectral.julia import _bridge\n"
        "A = torch.randn(40, 30, dtype=torch.float64)\n"
        "U, S, Vh = ps.svd(A, backend='julia', full_matrices=False)\n"
        "assert torch.allclose(S, torch.linalg.svdvals(A), atol=1e-12)\n"
        "H = A.T @ A\n"
        "L, V = ps.eigh(H, backend='julia')\n"
        "assert torch.allclose(L, torch.linalg.eigvalsh(H), atol=1e-10)\n"
        "Q, R = ps.qr(A, backend='julia')\n"
        "assert torch.allclose(Q @ R, A, atol=1e-12)\n"
        "print(_bridge.julia_blas())\n"
    )
    env = child_env()
    env.pop(_blas.BLAS_ENV, None)
    env["PYSPECTRAL_START_JULIA"] = "yes"
    env["PYSPECTRAL_JULIA_SYSIMAGE"] = "no"  # (else an unbuilt image warns)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    assert "libtorch_cpu" in run.stdout and "(ilp64)" in run.stdout, run.stdout
    assert "DPOTRF" not in run.stdout + run.stderr


def test_bench_compile_runs_compiled_and_eager(capsys):
    """bench_compile.py compiles each loss with fullgraph=True (a graph break
    would raise) and prints one row per size with the four columns."""
    assert bench_compile.main(["--sizes", "6", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| op | n | torch eager | ps eager | ps compiled | torch compiled |" in out
    assert out.count("| 6x6 |") == 2  # svd and eigh
