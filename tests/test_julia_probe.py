"""pyspectral/julia/_probe.py: whether Julia is usable, and starting it before
torch for the commands that use it (the import order PythonCall recommends);
the command line and the Julia benchmark checked in fresh processes with a
stand-in juliacall that records the order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspectral.julia import _probe

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "argv, orig, wanted",
    [
        (["-m", "test-julia"], ["python", "-m", "pyspectral", "test-julia"], True),
        (["-m", "test-julia", "x.jl"], None, True),  # Python < 3.10: no orig_argv
        (["-m", "install-julia", "--tests"], None, False),  # a child checks
        (["-m", "bench", "julia", "--quick"], None, True),
        (["-m", "bench", "--quick"], None, True),  # bench's default: all
        (["-m", "bench", "--sizes", "8", "all"], None, True),
        (["-m", "bench", "svd"], None, False),
        (["-m", "info"], None, False),
        (["-m", "demo"], None, False),
        (["-m"], None, False),
        (["/usr/bin/pyspectral", "test-julia"], None, True),  # the script
        (["/usr/bin/pyspectral", "info"], None, False),
        (["train.py", "test-julia"], None, False),  # someone else's program
        (["-m", "test-julia"], ["python", "-m", "other", "test-julia"], False),
        ([], None, False),
    ],
)
def test_julia_command(argv, orig, wanted):
    assert _probe.julia_command(argv, orig) is wanted


def first(env=None, argv=("x.py",), usable=True, modules=()):
    return _probe.julia_first(
        environ=env or {},
        argv=list(argv),
        orig_argv=["python", "-m", "pyspectral", *argv[1:]],
        usable=lambda: usable,
        modules=dict.fromkeys(modules),
    )


def test_julia_first():
    assert first({"PYSPECTRAL_START_JULIA": "yes"}, usable=False, modules=["torch"])
    assert first({"PYSPECTRAL_START_JULIA": "auto"})
    assert not first({"PYSPECTRAL_START_JULIA": "auto"}, usable=False)
    assert not first({"PYSPECTRAL_START_JULIA": "auto"}, modules=["torch"])  # late
    assert first(argv=["-m", "test-julia"])
    assert not first(argv=["-m", "test-julia"], usable=False)
    assert not first()  # a user's program: Julia starts at its first Julia call
    assert not first({"PYSPECTRAL_START_JULIA": "no"}, argv=["-m", "info"])


def test_start_julia_raises_only_when_asked():
    def broken():
        raise ImportError("no juliacall here")

    with pytest.raises(ImportError):
        _probe.start_julia({"PYSPECTRAL_START_JULIA": "yes"}, broken)
    assert _probe.start_julia({"PYSPECTRAL_START_JULIA": "auto"}, broken) is False
    assert _probe.start_julia({}, lambda: None) is True


# A juliacall that records whether torch was imported before it, warns as the
# real one does when it was, and starts nothing (its Main has no PySpectral).
STUB_JULIACALL = """
import os, sys, warnings
with open(os.environ["STUB_JULIACALL_RECORD"], "w") as f:
    f.write("torch first" if "torch" in sys.modules else "julia first")
if "torch" in sys.modules:
    warnings.warn("torch was imported before juliacall. This may cause a segfault.")


class JuliaError(Exception):
    pass


class _Main:
    def seval(self, src):
        return None

    def include(self, path):
        return None


Main = _Main()
"""

FAKE_JULIA_EXE = """#!/bin/sh
# What juliapkg asks a Julia: its version, and (resolve) libjulia and bindir.
if [ "$1" = "--version" ]; then echo "julia version 1.10.4"; exit 0; fi
printf '%s\\0%s' "${0%/*}/libjulia.so" "${0%/*}"
"""


@pytest.fixture
def usable_julia(tmp_path) -> dict[str, str]:
    """The environment of a fresh process in which pyspectral finds Julia usable
    (juliapkg offline, an executable, a project) and juliacall is the stub."""
    pytest.importorskip("juliapkg")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "juliacall.py").write_text(STUB_JULIACALL)
    (tmp_path / "bin").mkdir()
    exe = tmp_path / "bin" / "julia"
    exe.write_text(FAKE_JULIA_EXE)
    exe.chmod(0o755)
    (tmp_path / "env").mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON_JULIAPKG_", "PYSPECTRAL_"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]),
        PYTHON_JULIAPKG_OFFLINE="yes",
        PYTHON_JULIAPKG_EXE=str(exe),
        PYTHON_JULIAPKG_PROJECT=str(tmp_path / "env"),
        JULIA_DEPOT_PATH=str(tmp_path / "depot"),
        STUB_JULIACALL_RECORD=str(tmp_path / "order"),
    )
    return env


def order(env: dict[str, str]) -> str:
    return Path(env["STUB_JULIACALL_RECORD"]).read_text()


def test_test_julia_command_starts_julia_before_torch(usable_julia):
    """``python -m pyspectral test-julia`` imports juliacall before torch, so
    pyspectral's import-order warning (2026-11-27 run) no longer appears. (The
    stub has no PySpectral: the command then fails, saying so.)"""
    run = subprocess.run(
        [sys.executable, "-m", "pyspectral", "test-julia"],
        capture_output=True,
        text=True,
        env=usable_julia,
        cwd=ROOT,
        timeout=300,
    )
    assert order(usable_julia) == "julia first", run.stderr
    assert "started Julia after torch" not in run.stderr
    assert "torch was imported before juliacall" not in run.stderr
    assert run.returncode == 1 and "Julia backend unavailable" in run.stderr


def test_bench_julia_starts_julia_before_torch(usable_julia):
    """benchmarks/bench_julia.py starts Julia before it imports torch."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_julia.py"), "--quick"],
        capture_output=True,
        text=True,
        env=usable_julia,
        cwd=ROOT,
        timeout=300,
    )
    assert order(usable_julia) == "julia first", run.stderr
    assert "started Julia after torch" not in run.stderr
    assert run.returncode == 1 and "Julia backend unavailable" in run.stderr


def test_user_programs_start_julia_at_the_first_julia_call(usable_julia):
    """``import pyspectral`` in someone's program starts nothing (the warning
    there is the user's to act on, as docs/guide/julia.md says)."""
    code = "import sys, pyspectral; print('juliacall' in sys.modules)"
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=usable_julia,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"
    assert not Path(usable_julia["STUB_JULIACALL_RECORD"]).exists()


def test_install_checks_the_backend_in_a_process_that_starts_julia_first(
    usable_julia,
):
    """``install-julia`` installs in a process that has imported torch (here:
    nothing to install, juliapkg's resolve is skipped), then starts Julia in a
    fresh one, Julia first (the stub has no PySpectral: the check then fails,
    saying so)."""
    code = (
        "import juliapkg\n"
        "juliapkg.resolve = lambda: None\n"
        "from pyspectral.__main__ import main\n"
        "raise SystemExit(main(['install-julia']))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=usable_julia,
        cwd=ROOT,
        timeout=300,
    )
    assert order(usable_julia) == "julia first", run.stderr
    assert "started Julia after torch" not in run.stderr
    assert run.returncode == 1
    assert "installed, but the backend does not load" in run.stderr
