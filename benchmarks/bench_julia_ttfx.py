"""Time to the first ``ps.svd(A, backend="julia")`` in a fresh process, with
PySpectral's PrecompileTools workload as shipped (enabled) and disabled.

    python benchmarks/bench_julia_ttfx.py            # 3 timed processes per variant
    python benchmarks/bench_julia_ttfx.py --runs 5

Where Julia is not usable it prints ``skipped: <reason>`` and exits 0.

Each variant first runs one untimed "cold" process (it precompiles PySpectral
if the variant's cache does not exist yet; its wall time is reported), then
``--runs`` fresh processes, each timing: ``import pyspectral``, starting Julia
and loading PySpectral and the glue, the first ``ps.svd`` of a 2 x 6x4
float64 batch, its first backward, and a second svd + backward (compiled by
then: the floor). The table gives medians over the timed processes.

How the workload is disabled without touching your environment. PrecompileTools
runs ``@compile_workload`` only if the preference ``precompile_workload`` of the
package being precompiled is true (its default; PrecompileTools documents
``set_preferences!(MyPackage, "precompile_workload" => false; force=true)``,
which writes that into the active project's LocalPreferences.toml). Julia merges
a package's preferences over every environment in the load path, earlier ones
winning, from environments whose Project.toml lists the package. So each child
gets, first in JULIA_LOAD_PATH, a temporary environment whose Project.toml lists
PySpectral (no manifest: loading falls through to your environment) and, for
"off", sets ``[preferences.PySpectral] precompile_workload = false``; and, first
in JULIA_DEPOT_PATH, a temporary depot, where Julia writes the cache of the
differently configured PySpectral (the preference is part of a cache's
identity). The temporary directory is removed at the end; your projects,
preferences and depot are not written to. The "on" environment sets no
preference, so it loads the cache your normal sessions use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

MARK = "pyspectral-ttfx "

# Prints the Julia configuration a child must reproduce (after Julia started
# the way pyspectral starts it).
PROBE = f"""
import json, juliapkg
from pyspectral import _julia
_julia.glue()
from juliacall import Main as jl
print({MARK!r} + json.dumps({{
    "depots": [str(d) for d in jl.seval("DEPOT_PATH")],
    "load_path": [str(p) for p in jl.seval("LOAD_PATH")],
    "project": juliapkg.project(),
    "julia": str(jl.seval("string(VERSION)")),
    "uuid": str(jl.seval("string(Base.PkgId(PySpectral).uuid)")),
}}))
"""

CHILD = f"""
import time
t0 = time.perf_counter()
import json
import torch
import pyspectral as ps
from pyspectral import _julia
t1 = time.perf_counter()
_julia.glue()  # start Julia, load PySpectral and the glue
t2 = time.perf_counter()
A = torch.randn(2, 6, 4, dtype=torch.float64,
                generator=torch.Generator().manual_seed(0))
X = A.clone().requires_grad_(True)
t3 = time.perf_counter()
U, S, Vh = ps.svd(X, backend="julia")
t4 = time.perf_counter()
(S.sum() + (U @ Vh).sum()).backward()
t5 = time.perf_counter()
U2, S2, Vh2 = ps.svd(X, backend="julia")
(S2.sum() + (U2 @ Vh2).sum()).backward()
t6 = time.perf_counter()
assert torch.allclose(S, torch.linalg.svdvals(A), atol=1e-12, rtol=0)
assert torch.allclose((U * S.unsqueeze(-2)) @ Vh, A, atol=1e-12, rtol=0)
from juliacall import Main as jl
prefs = "Base.get_preferences(Base.PkgId(PySpectral).uuid)"
workload = bool(jl.seval(f'get({{prefs}}, "precompile_workload", true)'))
print({MARK!r} + json.dumps({{
    "import": t1 - t0, "start": t2 - t1, "first svd": t4 - t3,
    "first backward": t5 - t4, "second svd+backward": t6 - t5,
    "workload": workload,
}}))
"""

COLUMNS = ("import", "start", "first svd", "first backward", "second svd+backward")


class ChildFailed(RuntimeError):
    pass


def run_child(code: str, env: dict[str, str], timeout: float) -> tuple[dict, float]:
    """Run ``code`` in a fresh interpreter; its marked JSON line and wall time."""
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    wall = time.perf_counter() - start
    lines = [s for s in run.stdout.splitlines() if s.startswith(MARK)]
    if run.returncode != 0 or len(lines) != 1:
        raise ChildFailed(
            f"child exited with {run.returncode}\n--- stdout\n{run.stdout}\n"
            f"--- stderr\n{run.stderr}"
        )
    return json.loads(lines[0][len(MARK) :]), wall


def base_env() -> dict[str, str]:
    """This environment, with this pyspectral importable and Julia not started
    at import."""
    import pyspectral

    env = dict(os.environ)
    env.pop("PYSPECTRAL_START_JULIA", None)
    root = Path(pyspectral.__file__).resolve().parent.parent
    if root.name not in ("site-packages", "dist-packages"):  # a checkout
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root), env.get("PYTHONPATH")) if p
        )
    return env


def variant_env(base: dict, probe: dict, where: Path, workload: bool) -> dict:
    """``base`` plus a temporary environment first in the load path (listing
    PySpectral; disabling its workload unless ``workload``) and a temporary
    first depot."""
    project = where / "env"
    project.mkdir(parents=True)
    toml = f'[deps]\nPySpectral = "{probe["uuid"]}"\n'
    if not workload:
        toml += "\n[preferences.PySpectral]\nprecompile_workload = false\n"
    (project / "Project.toml").write_text(toml)
    env = dict(base)
    env["JULIA_LOAD_PATH"] = os.pathsep.join([str(project), *probe["load_path"]])
    env["JULIA_DEPOT_PATH"] = os.pathsep.join([str(where / "depot"), *probe["depots"]])
    # Outside a venv juliapkg derives its project from the first depot: pin it.
    env.setdefault("PYTHON_JULIAPKG_PROJECT", probe["project"])
    return env


def measure(env: dict, runs: int, timeout: float, workload: bool) -> dict:
    _, cold = run_child(CHILD, env, timeout)
    timed = [run_child(CHILD, env, timeout)[0] for _ in range(runs)]
    if any(t["workload"] != workload for t in timed):
        raise ChildFailed(
            f"the children did not see precompile_workload = {workload}: "
            "the temporary environment did not reach Julia's load path"
        )
    row = {c: statistics.median(t[c] for t in timed) for c in COLUMNS}
    row["cold process"] = cold
    return row


def table(rows: dict[str, dict]) -> str:
    head = ("workload", "cold process", *COLUMNS)
    width = [max(len(h), 12) for h in head]
    lines = [" | ".join(f"{h:>{w}}" for h, w in zip(head, width))]
    for name, row in rows.items():
        cells = [f"{row[c]:{w - 1}.3f}s" for c, w in zip(head[1:], width[1:])]
        lines.append(" | ".join([f"{name:>{width[0]}}", *cells]))
    return "\n".join(lines)


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--runs", type=int, default=3, help="timed fresh processes per variant"
    )
    p.add_argument(
        "--timeout", type=float, default=1800, help="seconds allowed per process"
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    from pyspectral import _julia

    ok, why = _julia.status()
    if not ok:
        print(f"skipped: Julia is not installed: {why}")
        return 0
    base = base_env()
    try:
        probe, _ = run_child(PROBE, base, args.timeout)
        rows = {}
        with tempfile.TemporaryDirectory(prefix="pyspectral-ttfx-") as tmp:
            for name, workload in (("on (shipped)", True), ("off", False)):
                print(f"measuring workload {name} ...", file=sys.stderr, flush=True)
                env = variant_env(base, probe, Path(tmp) / name[:3].strip(), workload)
                rows[name] = measure(env, args.runs, args.timeout, workload)
    except (ChildFailed, subprocess.TimeoutExpired) as err:
        print(f"bench_julia_ttfx: {err}", file=sys.stderr)
        return 1
    print(
        f"Time to first ps.svd(A, backend='julia') in a fresh process "
        f"(Julia {probe['julia']}; A: 2 x 6x4 float64; medians of {args.runs} "
        "processes; 'cold process': wall time of the first, which precompiles "
        "PySpectral if needed)"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
