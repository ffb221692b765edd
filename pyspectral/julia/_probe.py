"""Whether Julia can start here, and starting it before torch: the part of
the Julia bridge that ``pyspectral/__init__.py`` runs before it imports torch,
so it imports neither torch nor juliacall (it may import juliapkg, which
imports neither).

PythonCall recommends starting Julia before torch is imported (PythonCall.jl
#215/#384, pytorch #78829). ``import pyspectral`` therefore imports juliacall
first (which starts Julia) when :func:`julia_first` says so:
``PYSPECTRAL_START_JULIA=yes`` (always; the import's errors are raised),
``PYSPECTRAL_START_JULIA=auto`` (when :func:`probe` finds Julia usable; the
benchmarks set it), or a command line of pyspectral's that runs Julia
(``python -m pyspectral test-julia``, ``bench julia`` or ``bench all``; also
as the ``pyspectral`` script), when usable. Where Julia is not usable nothing
is started: the first Julia call says why. (``install-julia`` installs first
and then checks the backend in a fresh process that starts Julia first.)
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# The ``julia`` extra of pyproject.toml: the juliacall (and so PythonCall) the
# Julia backend is tested with; Julia 1.10 is what juliapkg.json asks for.
JULIACALL = "juliacall>=0.9.34,<0.9.35"

INSTALL_HINT = (
    "Install it with `python -m pyspectral install-julia` (downloads Julia and "
    "the Julia packages once; needs network). To use an existing Julia instead, "
    "set PYTHON_JULIAPKG_EXE=/path/to/julia (and PYTHON_JULIAPKG_OFFLINE=yes "
    "with PYTHON_JULIAPKG_PROJECT=/path/to/env for an environment that already "
    "has the packages). Or use backend='torch', which needs no Julia."
)


def probe() -> str | None:
    """``None`` if Julia and the packages are installed, else why not. Fast:
    never downloads, installs or starts Julia (it may run ``julia --version``)."""
    if "juliacall" in sys.modules:
        return None
    if importlib.util.find_spec("juliacall") is None:
        return (
            f"juliacall is not installed: pip install '{JULIACALL}' (in a clone "
            "of pyspectral: pip install -e '.[julia]'), then "
            + INSTALL_HINT[0].lower()
            + INSTALL_HINT[1:]
        )
    try:
        import juliapkg
    except Exception as err:  # noqa: BLE001 - it checks its settings on import
        return f"juliapkg cannot start: {err}"
    return juliapkg_reason(juliapkg)


def juliapkg_reason(juliapkg: Any) -> str | None:
    """Why juliapkg cannot provide Julia and the packages here without a
    network install, or None if it can.

    juliapkg's rules (deps.py, find_julia.py, state.py): ``resolve()`` does
    nothing when its state file (``meta.json`` in the project) matches the
    settings (``deps.can_skip_resolve``). Otherwise, online, it may download
    Julia and the packages (``install-julia`` runs it). Offline
    (``PYTHON_JULIAPKG_OFFLINE=yes``) it installs nothing: it takes the Julia
    ``find_julia`` finds without installing (``PYTHON_JULIAPKG_EXE``, else one
    already installed), runs it once to locate libjulia and writes the state
    file; the packages must already be in the environment, so it has to be
    named (``PYTHON_JULIAPKG_PROJECT``).
    """
    try:
        if juliapkg.deps.can_skip_resolve():
            return None
    except Exception:  # noqa: BLE001, S110 - an unreadable state file: resolve again
        pass
    state = juliapkg.state
    if not state.STATE.get("offline"):
        return "Julia or the PySpectral Julia package is not installed yet. " + (
            INSTALL_HINT
        )
    project = state.get_config("project")[0]
    if not project or not os.path.isdir(project):
        return (
            "PYTHON_JULIAPKG_OFFLINE=yes, so juliapkg installs no packages, but "
            + (
                "PYTHON_JULIAPKG_PROJECT is not set"
                if not project
                else f"PYTHON_JULIAPKG_PROJECT={project} does not exist"
            )
            + ": set it to the Julia environment that has PySpectral, "
            "ChainRulesCore and Zygote (or unset PYTHON_JULIAPKG_OFFLINE and run "
            "`python -m pyspectral install-julia`)"
        )
    find_julia = importlib.import_module("juliapkg.find_julia")
    try:
        find_julia.find_julia(prefix=state.STATE.get("install"))
    except Exception as err:  # noqa: BLE001 - juliapkg raises plain Exceptions
        return (
            f"PYTHON_JULIAPKG_OFFLINE=yes, and juliapkg finds no Julia to use "
            f"offline ({err}): set PYTHON_JULIAPKG_EXE=/path/to/julia (1.10)"
        )
    return None


# The subcommands of ``python -m pyspectral`` (pyspectral/__main__.py) that run
# Julia in their own process, and the benchmarks of ``bench`` that do.
JULIA_COMMANDS = ("test-julia",)
_BENCHMARKS = ("svd", "eigh", "topk", "julia", "all")


def julia_command(argv: Sequence[str], orig_argv: Sequence[str] | None) -> bool:
    """Whether this process is pyspectral's command line running a subcommand
    that uses Julia. While ``python -m pyspectral`` imports the package to find
    ``__main__``, ``sys.argv[0]`` is ``"-m"`` (``sys.orig_argv`` names the
    module); as the ``pyspectral`` script it is the script's path."""
    if not argv:
        return False
    if argv[0] == "-m":
        if orig_argv is not None:
            i = next((j for j, a in enumerate(orig_argv) if a == "-m"), None)
            after = orig_argv[i + 1 : i + 2] if i is not None else []
            module = after[0] if after else ""
            if module not in ("pyspectral", "pyspectral.__main__"):
                return False
    elif Path(argv[0]).stem not in ("pyspectral", "pyspectral-script"):
        return False
    args = list(argv[1:])
    if not args:
        return False
    if args[0] in JULIA_COMMANDS:
        return True
    if args[0] == "bench":
        which = next((a for a in args[1:] if a in _BENCHMARKS), "all")
        return which in ("julia", "all")
    return False


def _asked(environ: Mapping[str, str]) -> bool:
    """``PYSPECTRAL_START_JULIA=yes``: start Julia at import, whatever happens."""
    value = environ.get("PYSPECTRAL_START_JULIA", "").strip().lower()
    return value in ("1", "yes", "true")


def julia_first(
    environ: Mapping[str, str] = os.environ,
    argv: Sequence[str] | None = None,
    orig_argv: Sequence[str] | None = None,
    usable: Callable[[], bool] | None = None,
    modules: Mapping[str, Any] = sys.modules,
) -> bool:
    """Whether ``import pyspectral`` should start Julia now, before torch (see
    the module's docstring). The arguments default to this process's
    (``sys.argv``, ``sys.orig_argv``, :func:`probe`, ``sys.modules``); tests
    pass their own."""
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", None) if orig_argv is None else orig_argv
    usable = (lambda: probe() is None) if usable is None else usable
    if _asked(environ):
        return True
    auto = environ.get("PYSPECTRAL_START_JULIA", "").strip().lower() == "auto"
    if not auto and not julia_command(argv, orig_argv):
        return False
    # too late to help once torch is in; nothing to start where Julia is not usable
    return "torch" not in modules and usable()


def start_julia(
    environ: Mapping[str, str] = os.environ,
    start: Callable[[], Any] | None = None,
) -> bool:
    """Import juliacall, which starts Julia; return whether it did. Under
    ``PYSPECTRAL_START_JULIA=yes`` its errors are raised (asked for); otherwise
    the first Julia call reports them, with the bridge's advice."""
    start = (lambda: importlib.import_module("juliacall")) if start is None else start
    if environ.get("PYSPECTRAL_START_JULIA", "").strip().lower() in (
        "1",
        "yes",
        "true",
    ):
        start()
        return True
    try:
        start()
    except Exception:  # noqa: BLE001 - reported by the first Julia call
        return False
    return True
