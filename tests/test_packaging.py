"""The Julia package and its metadata: every .jl file parses, Project.toml and
the juliapkg.json files agree, and a built wheel carries the Julia package where
juliapkg finds it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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
    assert version("1.9.0") in compat(comp["julia"])
    assert version("1.12.0") in compat(comp["julia"])
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
    assert version("1.9.0") in compat(meta["julia"])
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
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in JULIA_PKG.rglob("*"):
        if rel.is_file():
            inside = "pyspectral/jl/PySpectral/" + rel.relative_to(JULIA_PKG).as_posix()
            assert inside in names, inside
    assert "pyspectral/juliapkg.json" in names
    assert "pyspectral/_glue.jl" in names


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
