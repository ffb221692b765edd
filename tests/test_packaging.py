"""The Julia package and its metadata: every .jl file parses, Project.toml and
the juliapkg.json files agree, and a built wheel carries the Julia package where
juliapkg finds it; where Julia is present, the wheel installed in a fresh venv
runs the Julia test sets with the Julia package from inside the wheel."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _julia import needs_julia

import pyspectral.julia as psj

ROOT = Path(__file__).resolve().parent.parent
JULIA_PKG = ROOT / "julia" / "PySpectral"


try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = pytest.importorskip("tomli")


def jl_files() -> list[Path]:
    return sorted(
        [
            *ROOT.joinpath("julia").rglob("*.jl"),
            *ROOT.joinpath("pyspectral").rglob("*.jl"),
            *ROOT.joinpath("examples").rglob("*.jl"),
        ]
    )


@pytest.mark.parametrize("path", jl_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_julia_file_parses(path: Path) -> None:
    ts = pytest.importorskip("tree_sitter")
    tsj = pytest.importorskip("tree_sitter_julia")
    parser = ts.Parser(ts.Language(tsj.language()))
    tree = parser.parse(path.read_bytes())
    bad = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            bad.append(f"line {node.start_point[0] + 1}: {node.type}")
        stack.extend(node.children)
    assert not bad, f"{path} does not parse: {bad[:5]}"


def test_julia_package_layout() -> None:
    for rel in (
        "Project.toml",
        "src/PySpectral.jl",
        "src/rrules.jl",
        "src/common/defaults.jl",
        "src/common/safemethods.jl",
        "src/common/gauge.jl",
        "src/forward/svd.jl",
        "src/forward/eigh.jl",
        "src/pullbacks/svd.jl",
        "src/pullbacks/eigh.jl",
        "src/pullbacks/matfun.jl",
        "test/runtests.jl",
    ):
        assert (JULIA_PKG / rel).is_file(), rel


def test_runtests_closes_its_outer_testset_last() -> None:
    """Run as a script, runtests.jl pushes one outer testset so that every
    top-level testset runs; it must be finished after the last of them, or the
    testsets below the finish run outside it (and abort the file on failure)."""
    text = (JULIA_PKG / "test" / "runtests.jl").read_text()
    finish = text.rindex("Test.finish(ALL_TESTS)")
    assert "Test.push_testset(ALL_TESTS)" in text[:finish]
    assert not re.search(r'^@testset "', text[finish:], re.M), (
        "a top-level @testset follows the outer testset's finish"
    )


def project() -> dict:
    return tomllib.loads((JULIA_PKG / "Project.toml").read_text())


def compat(spec: str):
    from juliapkg.compat import Compat

    return Compat.parse(spec)


def version(v: str):
    from juliapkg.compat import Version

    return Version.parse(v)


def test_project_toml() -> None:
    p = project()
    assert p["name"] == "PySpectral"
    assert len(p["uuid"]) == 36
    deps, comp = p["deps"], p["compat"]
    for name in deps:
        assert name in comp, f"{name} has no [compat] entry"
    assert version("1.10.4") in compat(comp["julia"])
    assert version("1.9.4") not in compat(comp["julia"]), "1.9 is no longer tested"
    assert version("1.25.0") in compat(comp["ChainRulesCore"])
    assert "PythonCall" not in deps, "the Julia package must not depend on Python"
    extras = p.get("extras", {})
    test_deps = set(p.get("targets", {}).get("test", []))
    for name in (
        "Test",
        "ChainRulesTestUtils",
        "FiniteDifferences",
        "Zygote",
        "Random",
    ):
        assert name in test_deps and (name in extras or name in deps), name


@pytest.mark.parametrize("where", ["juliapkg.json", "julia/wheel-juliapkg.json"])
def test_juliapkg_json(where: str) -> None:
    meta = json.loads((ROOT / where).read_text())
    pkgs = meta["packages"]
    # what is tested, and nothing else: Julia 1.10.x (juliacall 0.9.34 needs >= 1.10.3)
    assert version("1.10.4") in compat(meta["julia"])
    for untested in ("1.9.4", "1.11.0"):
        assert version(untested) not in compat(meta["julia"]), untested
    assert pkgs["PySpectral"]["uuid"] == project()["uuid"]
    assert pkgs["PySpectral"]["dev"] is True
    deps = project()["deps"]
    assert pkgs["ChainRulesCore"]["uuid"] == deps["ChainRulesCore"]
    assert version("1.25.0") in compat(pkgs["ChainRulesCore"]["version"])
    assert "Zygote" in pkgs


def test_juliapkg_files_agree() -> None:
    top = json.loads((ROOT / "juliapkg.json").read_text())
    wheel = json.loads((ROOT / "julia" / "wheel-juliapkg.json").read_text())
    top_path = top["packages"]["PySpectral"].pop("path")
    wheel_path = wheel["packages"]["PySpectral"].pop("path")
    assert top == wheel
    assert (ROOT / top_path / "Project.toml").is_file()
    assert wheel_path == "jl/PySpectral"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (whl,) = out.glob("pyspectral-*.whl")
    return whl


def test_wheel_contains_julia_package(wheel: Path) -> None:
    whl = zipfile.ZipFile(wheel)
    names = set(whl.namelist())
    for rel in JULIA_PKG.rglob("*"):
        if rel.is_file():
            inside = "pyspectral/jl/PySpectral/" + rel.relative_to(JULIA_PKG).as_posix()
            assert inside in names, inside
    assert "pyspectral/julia/glue.jl" in names
    shipped = json.loads(whl.read("pyspectral/juliapkg.json"))
    assert shipped == json.loads((ROOT / "julia" / "wheel-juliapkg.json").read_text())
    # Nothing at the top of site-packages: juliapkg reads <sys.path entry>/
    # juliapkg.json too, and the checkout's (path julia/PySpectral) would clash.
    assert not [n for n in names if n.split("/")[0] in ("juliapkg.json", "julia")]


def test_wheel_dependencies(wheel: Path) -> None:
    """torch and numpy are required; juliacall only with the ``julia`` extra."""
    whl = zipfile.ZipFile(wheel)
    (meta,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
    requires = re.findall(r"^Requires-Dist: (.*)$", whl.read(meta).decode(), re.M)
    plain = {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in requires if ";" not in r}
    assert plain == {"torch", "numpy"}, requires
    assert any(r.startswith("juliacall") and "extra == 'julia'" in r for r in requires)


def test_julia_extra_is_the_tested_juliacall() -> None:
    """The ``julia`` extra pins what the messages tell users to install: the
    juliacall whose PythonCall the Julia backend is tested with."""
    from pyspectral.julia._probe import JULIACALL

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["optional-dependencies"]["julia"] == [JULIACALL]
    # juliacall 0.9.34 pins PythonCall 0.9.34, which needs Julia >= 1.10.3
    assert JULIACALL == "juliacall>=0.9.34,<0.9.35"


def test_juliapkg_finds_package_in_installed_wheel(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    juliapkg_deps = pytest.importorskip("juliapkg.deps")
    site = tmp_path / "site-packages"
    zipfile.ZipFile(wheel).extractall(site)
    monkeypatch.setattr(sys, "path", [str(site)])
    found = [Path(f) for f in juliapkg_deps.deps_files()]
    ours = [f for f in found if f.parent.name == "pyspectral"]
    assert ours, f"juliapkg did not find pyspectral/juliapkg.json among {found}"
    meta = json.loads(ours[0].read_text())
    pkg_dir = ours[0].parent / meta["packages"]["PySpectral"]["path"]
    assert (pkg_dir / "Project.toml").is_file()
    assert (pkg_dir / "src" / "PySpectral.jl").is_file()
    # juliapkg's own resolution: the path it would develop PySpectral from
    find = getattr(juliapkg_deps, "find_requirements", None)
    if find is None:
        pytest.skip("this juliapkg has no deps.find_requirements")
    compat, pkgs = find()
    (spec,) = [p for p in pkgs if p.name == "PySpectral"]
    assert same_path(spec.path, site / "pyspectral" / "jl" / "PySpectral")
    assert spec.dev and spec.uuid == project()["uuid"]
    assert version("1.10.4") in compat


def same_path(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


# ------------------------------------------- the installed wheel, with Julia


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def site_dirs() -> list[str]:
    """Where this interpreter finds torch, numpy, juliacall and juliapkg: its
    site directories (a fresh venv made with --system-site-packages would see
    the base interpreter's, not these, when this one is itself a venv)."""
    dirs = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    for name in ("torch", "numpy", "juliacall", "juliapkg"):
        module = importlib.import_module(name)
        dirs.append(str(Path(module.__file__).resolve().parent.parent))
    return [
        d for d in dict.fromkeys(dirs) if Path(d).is_dir() and not same_path(d, ROOT)
    ]


MANIFEST = re.compile(r"(Julia)?Manifest(-v[0-9.]+)?\.toml")


def copy_julia_project(src: Path, dst: Path, pyspectral: str) -> bool:
    """Copy the Julia project at ``src`` to ``dst`` with PySpectral developed
    at ``pyspectral``: the manifest entry ``Pkg.develop(path=...)`` would
    write (offline, juliapkg runs no Pkg). Relative paths become absolute.
    Returns whether the manifest had a PySpectral entry."""
    tomlkit = pytest.importorskip("tomlkit")  # a juliapkg dependency
    dst.mkdir(parents=True)
    found = False
    for f in src.iterdir():
        if f.name in (
            "Project.toml",
            "JuliaProject.toml",
            "LocalPreferences.toml",
            "JuliaLocalPreferences.toml",
        ):
            shutil.copy2(f, dst / f.name)
        elif f.is_file() and MANIFEST.fullmatch(f.name):
            doc = tomlkit.parse(f.read_text())
            deps = doc["deps"] if "manifest_format" in doc else doc  # format 2 or 1
            for name, entries in deps.items():
                for entry in entries:
                    if name == "PySpectral":
                        entry["path"], found = pyspectral, True
                    elif "path" in entry and not os.path.isabs(entry["path"]):
                        entry["path"] = str((src / entry["path"]).resolve())
            (dst / f.name).write_text(tomlkit.dumps(doc))
    return found


def run_in(python: Path, code: str, env: dict, cwd: Path, timeout: float):
    run = subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    assert run.returncode == 0, f"{code}\n--- stdout\n{run.stdout}\n--- {run.stderr}"
    return run


def marked(stdout: str, mark: str) -> dict:
    (line,) = [s for s in stdout.splitlines() if s.startswith(mark)]
    return json.loads(line[len(mark) :])


FIND = """
import json, juliapkg.deps as d
compat, pkgs = d.find_requirements()
(spec,) = [p for p in pkgs if p.name == "PySpectral"]
print("pyspectral-found " + json.dumps({"path": spec.path, "files": d.deps_files()}))
"""

RUN = """
import json, runpy, sys
import juliapkg
import pyspectral
from pyspectral import julia
from pyspectral.julia import _bridge
juliapkg.resolve()  # offline: records the executable; installs nothing
_bridge.glue()
from juliacall import Main as jl
print("pyspectral-where " + json.dumps({
    "python": pyspectral.__file__,
    "julia": str(jl.seval("pathof(PySpectral)")),
    "tests": str(julia.PACKAGE_TESTS),
}), flush=True)
sys.argv = ["pyspectral", "test-julia"]
runpy.run_module("pyspectral", run_name="__main__", alter_sys=True)
"""


@needs_julia
def test_installed_wheel_runs_the_julia_testsets(wheel: Path, tmp_path: Path) -> None:
    """Slow (minutes: a venv, PySpectral precompiled from the wheel, the Julia
    test sets). The wheel, installed with ``pip --no-deps`` in a fresh venv that
    sees this interpreter's torch, numpy and juliacall through a .pth file (no
    network), runs ``python -m pyspectral test-julia`` from outside the source
    tree with the Julia package inside the wheel: juliapkg, in that venv,
    resolves PySpectral's path to ``site-packages/pyspectral/jl/PySpectral``
    (the wheel's juliapkg.json), and Julia loads it from there.

    Offline, juliapkg does not run Pkg, so the test writes the one manifest
    entry that ``Pkg.develop`` would (PySpectral at the resolved path) into a
    copy of this session's Julia project; the same Julia, and a temporary first
    depot so that precompiling the wheel's copy leaves the user's depot alone.
    """
    missing = psj.missing_test_packages()  # starts Julia in this process
    if missing:
        pytest.skip(
            f"Julia test packages missing: {', '.join(missing)}; run "
            "python -m pyspectral install-julia --tests"
        )
    jl = sys.modules["juliacall"].Main
    julia_exe = str(jl.seval("joinpath(Sys.BINDIR, Base.julia_exename())"))
    depots = [str(d) for d in jl.seval("DEPOT_PATH")]
    project = Path(str(jl.seval("Base.active_project()"))).parent

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv_python(venv)
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, str(wheel)], check=True)
    site = Path(
        subprocess.run(
            [
                str(python),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # after pip, so that pip sees only the venv
    (site / "pyspectral_test_parent_site.pth").write_text("\n".join(site_dirs()) + "\n")

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTHON_JULIAPKG_")
        and k not in ("PYTHONPATH", "PYTHONHOME", "PYSPECTRAL_START_JULIA")
    }
    env.update(
        PYTHON_JULIAPKG_EXE=julia_exe,
        PYTHON_JULIAPKG_OFFLINE="yes",
        PYTHON_JULIAPKG_PROJECT=str(tmp_path / "julia_env"),
        JULIA_DEPOT_PATH=os.pathsep.join([str(tmp_path / "depot"), *depots]),
    )
    found = marked(run_in(python, FIND, env, tmp_path, 300).stdout, "pyspectral-found ")
    in_wheel = site / "pyspectral" / "jl" / "PySpectral"
    assert same_path(found["path"], in_wheel), found
    assert copy_julia_project(project, tmp_path / "julia_env", found["path"]), (
        f"no PySpectral entry in the manifest of {project}"
    )

    run = run_in(python, RUN, env, tmp_path, 3000)
    where = marked(run.stdout, "pyspectral-where ")
    assert Path(where["python"]).resolve().is_relative_to(site.resolve()), where
    assert same_path(where["julia"], in_wheel / "src" / "PySpectral.jl"), where
    assert same_path(where["tests"], in_wheel / "test"), where
    for name in psj.testset_names(JULIA_PKG / "test" / "runtests.jl"):
        assert f"\n{name}: " in run.stdout, f"test set {name!r} did not run"
    print(run.stdout)


def test_version_is_the_installed_metadata():
    """docs/api.md says so: ``__version__`` is pyproject's version, as the
    installed metadata reports it."""
    import importlib.metadata

    import pyspectral as ps

    assert isinstance(ps.__version__, str)
    assert ps.__version__ == importlib.metadata.version("pyspectral")
