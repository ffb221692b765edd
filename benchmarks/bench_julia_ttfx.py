"""Time to the first Julia call in a fresh process: the first
``ps.svd(A, backend="julia")`` and its first backward, with PySpectral's
PrecompileTools workload as shipped ("workload on") and disabled ("workload
off"), and with Julia started from pyspectral's system image ("sysimage", when
``python -m pyspectral julia-sysimage`` has built a fresh one, or
``--sysimage PATH``).

    python benchmarks/bench_julia_ttfx.py            # 3 timed processes per variant
    python benchmarks/bench_julia_ttfx.py --runs 5

Where Julia is not usable it prints ``skipped: <reason>`` and exits 0.

Two ways to start Julia are timed. "documented" and "documented, no image"
take the path docs/guide/julia.md gives: ``PYSPECTRAL_START_JULIA=auto``, then
``import pyspectral``, which sets juliacall's options (signal handling,
threads, the system image: ``PYSPECTRAL_JULIA_SYSIMAGE=no`` for the second) and
imports juliacall, then torch. "workload on", "workload off" and "sysimage"
start with your own ``import juliacall`` (juliacall's defaults; "sysimage"
with ``PYTHON_JULIACALL_SYSIMAGE``), then import torch and pyspectral.

Each variant first runs one untimed "cold" process (it precompiles PySpectral
if the variant's cache does not exist yet; its wall time is reported), then
``--runs`` fresh processes, each timing (Julia before torch, as
docs/guide/julia.md recommends): ``import juliacall`` (Julia itself),
``import torch`` and ``pyspectral``, loading PySpectral and the glue
(``_bridge.glue()``), the first ``ps.svd`` of a 2 x 6x4 float64 batch, its
first backward (the time to the first Julia call, "to first backward", is
the sum of these but torch's own import), and a second svd + backward
(compiled by then: the floor). The table gives medians over the timed
processes.

"workload on" runs in exactly your setup: the environment this process has
(juliapkg's project, offline or not, PYTHON_JULIAPKG_PROJECT, your depots),
unchanged. "workload off" differs only in the workload. PrecompileTools runs
``@compile_workload`` only if the preference ``precompile_workload`` of the
package being precompiled is true (its default; PrecompileTools documents
``set_preferences!(MyPackage, "precompile_workload" => false; force=true)``,
which writes it into the active project's LocalPreferences.toml). Julia
merges a package's preferences over every environment of the load path whose
Project.toml lists the package, earlier ones winning (``Base.get_preferences``),
but loads the package from the first environment that lists it. So the "off"
children get a temporary environment that lists PySpectral and sets
``[preferences.PySpectral] precompile_workload = false``, appended *last* to
Julia's load path (PySpectral is still found, and loaded, where your
environment has it: a temporary environment listed first, without your
manifest, made Julia 1.9 report PySpectral "required but not installed"), and
a temporary first depot, where Julia writes the cache of the differently
configured PySpectral (the preference is part of a cache's identity). The
temporary directory is removed at the end; your projects, preferences and
depot are not written to. Should your environment itself set the preference,
"off" cannot override it and the benchmark says so.
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

# Prints the Julia configuration the "off" children extend (after Julia started
# the way pyspectral starts it).
PROBE = f"""
import json, juliapkg
import juliacall
from pyspectral.julia import _bridge
_bridge.glue()
from juliacall import Main as jl
print({MARK!r} + json.dumps({{
    "depots": [str(d) for d in jl.seval("DEPOT_PATH")],
    "load_path": [str(p) for p in jl.seval("LOAD_PATH")],
    "project": juliapkg.project(),
    "julia": str(jl.seval("string(VERSION)")),
    "uuid": str(jl.seval("string(Base.PkgId(PySpectral).uuid)")),
}}))
"""

# How a child starts Julia, torch and pyspectral; each sets julia, torch_s and
# pyspectral_s (seconds) and t2 (when pyspectral is imported).
EXPLICIT = """
import time
t0 = time.perf_counter()
import juliacall  # your own import, before torch
t1 = time.perf_counter()
import torch
t1b = time.perf_counter()
import pyspectral as ps
t2 = time.perf_counter()
julia, torch_s, pyspectral_s = t1 - t0, t1b - t1, t2 - t1b
"""

# The path docs/guide/julia.md gives: PYSPECTRAL_START_JULIA=auto, then
# ``import pyspectral``, which imports juliacall (through importlib.import_module)
# and then torch; both imports are timed where they happen.
DOCUMENTED = """
import builtins, importlib, os, sys, time
os.environ["PYSPECTRAL_START_JULIA"] = "auto"
spent = {"juliacall": 0.0, "torch": 0.0}
def timed(load):
    def run(name, *args, **kwargs):
        if name not in spent or name in sys.modules:
            return load(name, *args, **kwargs)
        start = time.perf_counter()
        try:
            return load(name, *args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start
    return run
plain = builtins.__import__, importlib.import_module
builtins.__import__, importlib.import_module = timed(plain[0]), timed(plain[1])
t0 = time.perf_counter()
import pyspectral as ps
t2 = time.perf_counter()
builtins.__import__, importlib.import_module = plain
assert spent["juliacall"] > 0, "import pyspectral did not start Julia"
julia, torch_s = spent["juliacall"], spent["torch"]
pyspectral_s = t2 - t0 - julia - torch_s
"""

CHILD = f"""
import json
import time
import torch
import pyspectral as ps
from pyspectral.julia import _bridge
t2 = time.perf_counter()
_bridge.glue()  # load PySpectral and the glue
t3 = time.perf_counter()
A = torch.randn(2, 6, 4, dtype=torch.float64,
                generator=torch.Generator().manual_seed(0))
X = A.clone().requires_grad_(True)
t4 = time.perf_counter()
U, S, Vh = ps.svd(X, backend="julia", full_matrices=False)
t5 = time.perf_counter()
(S.sum() + (U @ Vh).sum()).backward()
t6 = time.perf_counter()
U2, S2, Vh2 = ps.svd(X, backend="julia", full_matrices=False)
(S2.sum() + (U2 @ Vh2).sum()).backward()
t7 = time.perf_counter()
assert torch.allclose(S, torch.linalg.svdvals(A), atol=1e-12, rtol=0)
assert torch.allclose((U * S.unsqueeze(-2)) @ Vh, A, atol=1e-12, rtol=0)
from juliacall import Main as jl
prefs = "Base.get_preferences(Base.PkgId(PySpectral).uuid)"
workload = bool(jl.seval(f'get({{prefs}}, "precompile_workload", true)'))
image = bool(jl.seval("isdefined(Main, :PYSPECTRAL_SYSIMAGE_SOURCES)"))
print({MARK!r} + json.dumps({{
    "Julia": julia, "torch": torch_s, "pyspectral": pyspectral_s,
    "load PySpectral": t3 - t2, "first svd": t5 - t4, "first backward": t6 - t5,
    "to first backward": julia + pyspectral_s + (t3 - t2) + (t6 - t4),
    "second svd+backward": t7 - t6,
    "workload": workload, "image": image,
}}))
"""

COLUMNS = (
    "Julia",
    "torch",
    "pyspectral",
    "load PySpectral",
    "first svd",
    "first backward",
    "to first backward",
    "second svd+backward",
)


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
    env.pop("PYTHON_JULIACALL_SYSIMAGE", None)  # the "sysimage" variant sets it
    root = Path(pyspectral.__file__).resolve().parent.parent
    if root.name not in ("site-packages", "dist-packages"):  # a checkout
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root), env.get("PYTHONPATH")) if p
        )
    return env


def variant_env(base: dict, probe: dict, where: Path, workload: bool) -> dict:
    """``base`` itself for the workload as shipped (your setup, unchanged); for
    "off", ``base`` plus a temporary environment appended to the load path
    (listing PySpectral, disabling its workload) and a temporary first depot."""
    env = dict(base)
    if workload:
        return env
    # Outside a venv juliapkg derives its project from the first depot, which
    # changes here: pin the project your setup uses.
    env.setdefault("PYTHON_JULIAPKG_PROJECT", probe["project"])
    project = where / "env"
    project.mkdir(parents=True)
    (project / "Project.toml").write_text(
        f'[deps]\nPySpectral = "{probe["uuid"]}"\n\n'
        "[preferences.PySpectral]\nprecompile_workload = false\n"
    )
    env["JULIA_LOAD_PATH"] = os.pathsep.join([*probe["load_path"], str(project)])
    env["JULIA_DEPOT_PATH"] = os.pathsep.join([str(where / "depot"), *probe["depots"]])
    return env


def measure(
    env: dict,
    runs: int,
    timeout: float,
    workload: bool,
    start: str = EXPLICIT,
    image: bool = False,
) -> dict:
    """Medians over ``runs`` fresh processes (after one untimed cold one) that
    start Julia as ``start`` does; they must see the ``workload`` preference
    and (``image``) pyspectral's system image or not."""
    code = start + CHILD
    _, cold = run_child(code, env, timeout)
    timed = [run_child(code, env, timeout)[0] for _ in range(runs)]
    if any(t["image"] != image for t in timed):
        raise ChildFailed(
            f"the children {'did not start' if image else 'started'} Julia from "
            "pyspectral's system image, against what this variant measures"
        )
    if any(t["workload"] != workload for t in timed):
        raise ChildFailed(
            f"the children did not see precompile_workload = {workload}: your "
            "environment sets PySpectral's precompile_workload preference itself "
            "(its Project.toml or LocalPreferences.toml), which wins over the "
            "temporary environment's"
        )
    row = {c: statistics.median(t[c] for t in timed) for c in COLUMNS}
    row["cold process"] = cold
    return row


def table(rows: dict[str, dict]) -> str:
    head = ("variant", "cold process", *COLUMNS)
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
    p.add_argument(
        "--sysimage",
        help="also time Julia started from this system image (default: the one "
        "`python -m pyspectral julia-sysimage` built, if it is fresh)",
    )
    return p.parse_args(argv)


def sysimage(given: str | None) -> Path | None:
    """The image of the "sysimage" variant: ``--sysimage``, else the built one
    while fresh (see pyspectral/julia/_sysimage.py), else None."""
    if given is not None:
        return Path(given)
    from pyspectral.julia import _sysimage

    return _sysimage.select({})


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    from pyspectral.julia import _bridge

    ok, why = _bridge.status()
    if not ok:
        print(f"skipped: Julia is not installed: {why}")
        return 0
    base = base_env()
    try:
        probe, _ = run_child(PROBE, base, args.timeout)
        rows = {}
        with tempfile.TemporaryDirectory(prefix="pyspectral-ttfx-") as tmp:
            for name, workload in (("workload on", True), ("workload off", False)):
                print(f"measuring {name} ...", file=sys.stderr, flush=True)
                env = variant_env(base, probe, Path(tmp) / name[9:], workload)
                rows[name] = measure(env, args.runs, args.timeout, workload)
        image = sysimage(args.sysimage)
        if image is not None:
            print(f"measuring sysimage {image} ...", file=sys.stderr, flush=True)
            env = dict(base, PYTHON_JULIACALL_SYSIMAGE=str(image))
            rows["sysimage"] = measure(env, args.runs, args.timeout, True, image=True)
        print("measuring documented, no image ...", file=sys.stderr, flush=True)
        env = dict(base, PYSPECTRAL_JULIA_SYSIMAGE="no")
        rows["documented, no image"] = measure(
            env, args.runs, args.timeout, True, DOCUMENTED
        )
        if image is not None:
            print("measuring documented ...", file=sys.stderr, flush=True)
            env = dict(base, PYSPECTRAL_JULIA_SYSIMAGE=str(image))
            rows["documented"] = measure(
                env, args.runs, args.timeout, True, DOCUMENTED, image=True
            )
    except (ChildFailed, subprocess.TimeoutExpired) as err:
        print(f"bench_julia_ttfx: {err}", file=sys.stderr)
        return 1
    print(
        f"Time to the first Julia call in a fresh process: ps.svd(A, "
        f"backend='julia') and its backward (Julia {probe['julia']}; A: 2 x 6x4 "
        f"float64; medians of {args.runs} processes, seconds; 'to first "
        "backward': Julia, pyspectral, PySpectral, the first svd and backward, "
        "torch's own import not counted; 'cold "
        "process': wall time of the first, which precompiles PySpectral if "
        "needed; 'workload on/off' and 'sysimage': `import juliacall` first, "
        "then torch and pyspectral, 'sysimage' with PYTHON_JULIACALL_SYSIMAGE; "
        "'documented': PYSPECTRAL_START_JULIA=auto and `import pyspectral`, "
        "which starts Julia (from the system image, or with "
        "PYSPECTRAL_JULIA_SYSIMAGE=no without it) and then imports torch)"
    )
    print(table(rows))
    if "sysimage" not in rows:
        print(
            "(no 'sysimage' row: no fresh image; build one with `python -m "
            "pyspectral julia-sysimage`, or pass --sysimage PATH)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
