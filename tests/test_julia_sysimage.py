"""pyspectral's Julia system image (pyspectral/julia/_sysimage.py): which
image Julia starts from, when an image is stale, what a build runs. The
build itself, for real, where Julia and PackageCompiler are installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from _julia import skip_without_julia

from pyspectral.exceptions import BackendError
from pyspectral.julia import _sysimage


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A juliapkg environment (``project``) and a Julia executable, as
    ``_juliapkg`` reports them, without juliapkg."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "Manifest.toml").write_text("# packages\n")
    julia = tmp_path / "bin" / "julia"
    julia.parent.mkdir()
    julia.write_text("#!/bin/sh\n")
    monkeypatch.setattr(_sysimage, "_juliapkg", lambda: (project, julia))
    return project


def built(project: Path) -> Path:
    """A fresh image of ``project``: its file and its fingerprint beside it."""
    image = _sysimage.image_path(project)
    image.parent.mkdir()
    image.write_bytes(b"image")
    stamp = _sysimage.fingerprint(project, _sysimage._juliapkg()[1])
    image.with_suffix(".json").write_text(json.dumps(stamp))
    return image


def test_no_image_built(env: Path) -> None:
    assert _sysimage.select({}) is None


def test_a_fresh_image_is_chosen(env: Path) -> None:
    image = built(env)
    assert _sysimage.select({}) == image
    assert _sysimage.select({_sysimage.ENV: "auto"}) == image
    environ: dict[str, str] = {}
    assert _sysimage.prepare(environ) == image
    assert environ == {"PYTHON_JULIACALL_SYSIMAGE": str(image)}


def test_declined(env: Path) -> None:
    built(env)
    assert _sysimage.select({_sysimage.ENV: "no"}) is None
    # the user's own choice for juliacall stands
    environ = {"PYTHON_JULIACALL_SYSIMAGE": "/theirs.so"}
    assert _sysimage.prepare(environ) is None
    assert environ == {"PYTHON_JULIACALL_SYSIMAGE": "/theirs.so"}


def test_an_image_by_path(env: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.so"
    mine.write_bytes(b"image")
    assert _sysimage.select({_sysimage.ENV: str(mine)}) == mine
    with pytest.raises(BackendError, match="no such file"):
        _sysimage.select({_sysimage.ENV: str(tmp_path / "none.so")})


@pytest.mark.parametrize("change", ["sources", "manifest", "julia"])
def test_a_stale_image_is_passed_over(
    env: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built(env)
    if change == "sources":
        monkeypatch.setattr(_sysimage, "sources_digest", lambda: "edited")
    elif change == "manifest":
        (env / "Manifest.toml").write_text("# other packages\n")
    else:
        _sysimage._juliapkg()[1].write_text("#!/bin/sh\n# another Julia\n")
    with pytest.warns(RuntimeWarning, match="julia-sysimage"):
        assert _sysimage.select({}) is None


def test_sources_digest_covers_the_package_and_the_glue() -> None:
    digest = _sysimage.sources_digest()
    assert len(digest) == 64 and digest == _sysimage.sources_digest()
    root = _sysimage.package_dir()
    assert (root / "src" / "PySpectral.jl").is_file()
    assert _sysimage.GLUE.is_file()


class FakeMain:
    """``juliacall.Main`` after Julia started: what the image defined."""

    def __init__(self, mark: str) -> None:
        self.mark, self.asked = mark, []

    def seval(self, code: str) -> str:
        self.asked.append(code)
        return self.mark


def test_check_started() -> None:
    plain = FakeMain("")
    assert _sysimage.check_started(plain) is False
    assert _sysimage.IMAGE_MARK in plain.asked[0]
    assert _sysimage.check_started(FakeMain(_sysimage.sources_digest())) is True
    with pytest.raises(BackendError, match="other sources"):
        _sysimage.check_started(FakeMain("an older digest"))


def test_build_runs_the_traced_workload_then_packagecompiler(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What build() runs, by stand-ins for its processes: the workload under
    Julia's trace (pyspectral starting Julia, without an image), the
    precompilation PackageCompiler relies on, PackageCompiler with a script
    that includes the glue, marks the image and replays the trace, then a
    first start from the image. The fingerprint lands beside the image
    before that start."""
    import juliapkg

    monkeypatch.setattr(juliapkg, "offline", lambda value=True: True)
    runs: list[tuple[list[str], dict[str, str], dict[str, str]]] = []

    def run(cmd: list[str], environ: dict[str, str], what: str) -> None:
        files = {}
        if "PYTHON_JULIACALL_TRACE_COMPILE" in environ:
            Path(environ["PYTHON_JULIACALL_TRACE_COMPILE"]).write_text(TRACE)
        elif cmd[0] == sys.executable:
            # the image exists when it is first started
            files["stamp"] = out.with_suffix(".json").read_text()
        elif "-e" in cmd:
            pass  # the precompilation
        else:
            build_jl = Path(cmd[-1])
            files["build"] = build_jl.read_text()
            script = build_jl.with_name("script.jl")
            files["script"] = script.read_text()
        runs.append((cmd, environ, files))

    monkeypatch.setattr(_sysimage, "_run", run)
    out = tmp_path / "out" / "img.so"
    assert _sysimage.build(out, log=lambda _: None) == out
    assert len(runs) == 4, runs
    (trace_cmd, trace_env, _), (pre_cmd, _, _), (build_cmd, _, files) = runs[:3]
    warm_cmd, warm_env, warm = runs[3]
    # the caches PackageCompiler loads (--pkgimages=no), made in an ordinary process
    assert pre_cmd[1] == f"--project={env}" and "--pkgimages=no" in pre_cmd
    assert pre_cmd[-2:] == ["-e", "using PySpectral"]
    assert "workload()" in trace_cmd[-1]
    assert trace_env[_sysimage.ENV] == "no"
    assert trace_env["PYSPECTRAL_START_JULIA"] == "yes"
    assert "PYTHON_JULIACALL_SYSIMAGE" not in trace_env
    assert build_cmd[1] == f"--project={env}"
    assert "create_sysimage" in files["build"] and str(out) in files["build"]
    script = files["script"]
    assert str(_sysimage.GLUE) in script
    assert f"const {_sysimage.IMAGE_MARK} = " in script
    assert _sysimage.sources_digest() in script
    stamp = json.loads(out.with_suffix(".json").read_text())
    assert stamp == _sysimage.fingerprint(env, _sysimage._juliapkg()[1])
    # then one start from the new image (PythonCall's cache compiled against it)
    assert warm_cmd[0] == sys.executable and "glue()" in warm_cmd[-1]
    assert warm_env[_sysimage.ENV] == str(out)
    assert warm_env["PYSPECTRAL_START_JULIA"] == "yes"
    assert "PYTHON_JULIACALL_SYSIMAGE" not in warm_env
    assert json.loads(warm["stamp"]) == stamp
    # the trace's PythonCall statements, kept beside the image for the warm-up
    kept = _sysimage.warm_up_path(out).read_text().splitlines()
    assert kept == [
        line
        for line in TRACE.splitlines()
        if line.startswith("precompile(") and "PythonCall.Py" in line
    ]
    assert len(kept) == 2  # not PySpectral's statement, not the comment


TRACE = """\
precompile(Tuple{typeof(PySpectral.svd_pullback), Array{Float64, 2}})
precompile(Tuple{typeof(PythonCall.Convert.pyconvert_get_rules), Type, PythonCall.Py})
# a comment that mentions PythonCall.Py
precompile(Tuple{Type{PythonCall.Py}, Int64})
"""


class ThreadedMain:
    """``juliacall.Main`` for warm_up: Julia's thread count, and what it evaluated."""

    def __init__(self, threads: int) -> None:
        self.threads, self.evaluated = threads, []

    def seval(self, code: str) -> int | None:
        if code == "Threads.nthreads()":
            return self.threads
        self.evaluated.append(code)
        return None


@pytest.fixture
def image_with_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    image = tmp_path / "odd $dir" / "pyspectral.so"
    image.parent.mkdir()
    image.write_bytes(b"")
    trace = tmp_path / "trace.jl"
    trace.write_text(TRACE)
    assert _sysimage.write_warm_up(trace, image) == 2
    monkeypatch.setattr(_sysimage, "_warmed", {"done": False, "spawned": False})
    monkeypatch.setattr(_sysimage, "_prepared", {"ran": True, "image": image})
    return image


def test_warm_up_compiles_the_recorded_statements_on_another_thread(
    image_with_warm_up: Path,
) -> None:
    jl = ThreadedMain(threads=2)
    assert _sysimage.warm_up(jl, {}) is True
    (code,) = jl.evaluated
    assert code.strip().startswith("Threads.@spawn")
    literal = _sysimage.julia_string(_sysimage.warm_up_path(image_with_warm_up))
    assert f"eachline({literal})" in code
    assert _sysimage.warm_up(jl, {}) is False and len(jl.evaluated) == 1  # once


def test_warm_up_needs_a_second_thread_and_the_recorded_file(
    image_with_warm_up: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = ThreadedMain(threads=1)
    assert _sysimage.warm_up(one, {}) is False and one.evaluated == []
    monkeypatch.setattr(_sysimage, "_warmed", {"done": False, "spawned": False})
    _sysimage.warm_up_path(image_with_warm_up).unlink()
    two = ThreadedMain(threads=2)
    assert _sysimage.warm_up(two, {}) is False and two.evaluated == []
    # an image the user gave juliacall: its file, if it has one
    monkeypatch.setattr(_sysimage, "_warmed", {"done": False, "spawned": False})
    monkeypatch.setattr(_sysimage, "_prepared", {"ran": False, "image": None})
    assert _sysimage.warm_up(two, {}) is False  # no image at all
    _sysimage.warm_up_path(image_with_warm_up).write_text("")
    monkeypatch.setattr(_sysimage, "_warmed", {"done": False, "spawned": False})
    environ = {"PYTHON_JULIACALL_SYSIMAGE": str(image_with_warm_up)}
    assert _sysimage.warm_up(two, environ) is True and len(two.evaluated) == 1


def test_command_line_path(env: Path, capsys: pytest.CaptureFixture) -> None:
    from pyspectral.__main__ import main

    assert main(["julia-sysimage", "--path"]) == 0
    assert capsys.readouterr().out.strip() == str(_sysimage.image_path(env))


ODD_TEXTS = ["/a b/c.so", 'q"uote', "back\\slash\\", "$HOME $(rm -rf x)", 'ü\\$"']


def test_julia_string_escapes_what_julia_would_interpret() -> None:
    assert _sysimage.julia_string("/a b/c.so") == '"/a b/c.so"'
    assert _sysimage.julia_string(Path("/x")) == '"/x"'
    assert _sysimage.julia_string('a\\b"$c') == '"a\\\\b\\"\\$c"'


def test_julia_string_reads_back_in_julia() -> None:
    """Julia parses each literal back to the text (no interpolation, no
    escape lost)."""
    skip_without_julia("parsing Julia string literals")
    code = (
        "import json, sys\n"
        "import pyspectral\n"
        "from pyspectral.julia import _sysimage\n"
        "from juliacall import Main as jl\n"
        "texts = json.loads(sys.argv[1])\n"
        "print(json.dumps([str(jl.seval(_sysimage.julia_string(t))) for t in texts]))"
    )
    environ = dict(os.environ, PYSPECTRAL_START_JULIA="yes")
    environ[_sysimage.ENV] = "no"
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(ODD_TEXTS)],
        capture_output=True,
        text=True,
        env=environ,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == ODD_TEXTS


# ------------------------------------------------------------ for real

CHILD = """
import pyspectral as ps  # starts Julia (PYSPECTRAL_START_JULIA=yes), before torch
import torch
from pyspectral.julia import _sysimage
from juliacall import Main as jl
A = torch.randn(2, 6, 4, dtype=torch.float64).requires_grad_(True)
U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
(S.sum() + (U @ Vh).sum()).backward()
assert torch.allclose(S, torch.linalg.svdvals(A.detach()), atol=1e-12, rtol=0)
print("in image:", _sysimage.check_started(jl))
print("warmed up:", _sysimage._warmed["spawned"], jl.seval("Threads.nthreads()"))
"""


def test_build_and_start_from_it_for_real(tmp_path: Path) -> None:
    """``julia-sysimage --output``, then a fresh process that starts Julia
    from the image: it computes, and its glue is the image's (not loaded
    again). Minutes: PackageCompiler compiles a system image."""
    skip_without_julia("building a Julia system image")
    probe = subprocess.run(
        [sys.executable, "-c", "import juliapkg; print(juliapkg.project())"],
        capture_output=True,
        text=True,
    )
    project = Path(probe.stdout.strip().splitlines()[-1])
    manifest = (project / "Manifest.toml").read_text()
    if "[[deps.PackageCompiler]]" not in manifest:
        pytest.skip(f"PackageCompiler is not in Julia's environment {project}")
    image = tmp_path / "pyspectral.so"
    run = subprocess.run(
        [sys.executable, "-m", "pyspectral", "julia-sysimage", "--output", str(image)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert image.is_file() and image.with_suffix(".json").is_file()
    recorded = _sysimage.warm_up_path(image).read_text().splitlines()
    assert recorded and all("PythonCall." in line for line in recorded)
    environ = dict(os.environ, PYSPECTRAL_START_JULIA="yes")
    environ[_sysimage.ENV] = str(image)
    environ.pop("PYTHON_JULIACALL_SYSIMAGE", None)
    child = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=environ
    )
    assert child.returncode == 0, child.stdout + child.stderr
    assert "in image: True" in child.stdout
    spawned, threads = child.stdout.split("warmed up: ")[1].split()[:2]
    assert spawned == str(int(threads) >= 2)  # compiled beside Python where it can


@pytest.fixture
def started_by(monkeypatch: pytest.MonkeyPatch):
    """Who started Julia: ``started_by("pyspectral", image)`` as prepare()
    records it, ``started_by("user")`` as a process that imported juliacall."""

    def set_(who: str, image: Path | None = None) -> None:
        state = {"ran": who == "pyspectral", "image": image}
        monkeypatch.setattr(_sysimage, "_prepared", state)

    return set_


def test_a_start_without_the_image_is_explained(env: Path, started_by) -> None:
    """Never a silent slow first call: no image built, an image the user's own
    start passed over, a stale one; quiet where the image was used, where the
    user declined it or chose their own, and where select() already warned."""
    started_by("pyspectral")
    with pytest.warns(RuntimeWarning, match="not built.*julia-sysimage") as got:
        _sysimage.explain(False, {})
    assert len(got) == 1 and _sysimage.ENV + "=no" in str(got[0].message)
    image = built(env)
    started_by("user")
    with pytest.warns(RuntimeWarning, match="before pyspectral could") as got:
        _sysimage.explain(False, {})
    assert f"PYTHON_JULIACALL_SYSIMAGE={image}" in str(got[0].message)
    (env / "Manifest.toml").write_text("# other packages\n")
    with pytest.warns(RuntimeWarning, match="other sources.*rebuild"):
        _sysimage.explain(False, {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _sysimage.explain(True, {}) is None  # from the image
        assert _sysimage.explain(False, {_sysimage.ENV: "no"}) is None
        theirs = {"PYTHON_JULIACALL_SYSIMAGE": "/theirs.so"}
        assert _sysimage.explain(False, theirs) is None
        started_by("pyspectral")  # a stale image: select() said so
        assert _sysimage.explain(False, {}) is None
        started_by("pyspectral", image)  # an image by path
        assert _sysimage.explain(False, {}) is None


def test_install_julia_builds_the_image_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from pyspectral.__main__ import main
    from pyspectral.julia import _install

    builds: list[Path] = []
    monkeypatch.setattr(_install, "install", lambda tests: "Julia backend loaded")

    def build() -> Path:
        builds.append(Path("/built/pyspectral.so"))
        return builds[-1]

    monkeypatch.setattr(_sysimage, "build", build)
    assert main(["install-julia"]) == 0
    assert len(builds) == 1
    out = capsys.readouterr().out
    assert "building the system image" in out and "built /built/pyspectral.so in" in out
    assert main(["install-julia", "--no-sysimage"]) == 0
    assert len(builds) == 1
    assert "no system image (--no-sysimage)" in capsys.readouterr().out
