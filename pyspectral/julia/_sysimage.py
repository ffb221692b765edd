"""A Julia system image with PySpectral and the bridge's glue compiled in:
``python -m pyspectral julia-sysimage`` builds it once (PackageCompiler,
several minutes), and from then on pyspectral starts Julia from it whenever
pyspectral is the one that starts Julia, so that the first call with
``backend="julia"`` does not wait for PySpectral to load and its entry
points to compile.

What goes in: the packages of PySpectral's environment that PySpectral
loads, PySpectral itself, the glue (``glue.jl``, the module
``Main.PySpectralGlue``) and the methods that a representative run of the
bridge compiles (``_workload.workload``, traced by Julia's
``--trace-compile``);
not PythonCall, which juliacall 0.9.34 cannot start from a system image
(juliacall 0.9.35 added that), so PythonCall loads from its package image as
always.

An image is only valid for what it was built from: the Julia executable,
the environment's ``Manifest.toml``, PySpectral's sources and the glue. Their
fingerprint is stored beside the image (``.json``); pyspectral uses the image
only while the fingerprint matches, and otherwise starts Julia without it,
with a ``RuntimeWarning`` that says to rebuild (a stale image would run old
code). ``PYSPECTRAL_JULIA_SYSIMAGE=no`` never uses one; a path uses that
image, a Julia started from an image with other sources raises
:class:`BackendError`. Where the user starts Julia (``import juliacall``
before pyspectral), juliacall's own ``PYTHON_JULIACALL_SYSIMAGE`` chooses the
image; ``python -m pyspectral julia-sysimage --path`` prints its path.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

#: ``no``: never start Julia from a pyspectral image; a path: that image;
#: unset (or ``auto``): the one ``julia-sysimage`` built, while it is fresh.
ENV = "PYSPECTRAL_JULIA_SYSIMAGE"

PACKAGE_COMPILER = ("PackageCompiler", "9b87118b-4619-50d2-8e1e-99f35a4d4d9d")

GLUE = Path(__file__).with_name("glue.jl")

# A name in Main that only an image built here defines: the fingerprint of the
# sources that went in, which the bridge compares with its own after Julia starts.
IMAGE_MARK = "PYSPECTRAL_SYSIMAGE_SOURCES"


def package_dir() -> Path:
    """The bundled Julia package: inside an installed wheel, or the checkout's."""
    package = Path(__file__).resolve().parent.parent  # pyspectral/
    checkout = package.parent / "julia" / "PySpectral"
    for candidate in (package / "jl" / "PySpectral", checkout):
        if (candidate / "Project.toml").is_file():
            return candidate
    return checkout


def sources_digest() -> str:
    """SHA-256 over PySpectral's ``Project.toml`` and ``src/`` and the glue:
    what an image compiles in from this installation."""
    root = package_dir()
    files = [root / "Project.toml", *sorted((root / "src").rglob("*.jl")), GLUE]
    h = hashlib.sha256()
    for f in files:
        name = f.name if f == GLUE else f.relative_to(root).as_posix()
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _file_digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def fingerprint(project: Path, julia: Path) -> dict[str, Any]:
    """What an image of ``project`` (a juliapkg environment) built with the
    Julia at ``julia`` depends on."""
    exe = Path(julia).resolve()
    stat = exe.stat()
    return {
        "format": 1,
        "julia": [str(exe), stat.st_size, stat.st_mtime_ns],
        "manifest": _file_digest(Path(project) / "Manifest.toml"),
        "sources": sources_digest(),
    }


def image_path(project: Path) -> Path:
    """Where ``julia-sysimage`` puts the image of the environment ``project``."""
    ext = {"win32": "dll", "darwin": "dylib"}.get(sys.platform, "so")
    return Path(project) / "pyspectral_sysimage" / f"pyspectral.{ext}"


def default_image() -> Path:
    """Where ``julia-sysimage`` puts the image of juliapkg's environment."""
    return image_path(_juliapkg()[0])


def _juliapkg() -> tuple[Path, Path]:
    """``(project, julia executable)`` as juliapkg resolves them."""
    import juliapkg

    return Path(juliapkg.project()), Path(juliapkg.executable())


def select(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The image to start Julia from, or None; call before juliacall's import.
    A stale built image is passed over with a ``RuntimeWarning``."""
    choice = environ.get(ENV, "").strip()
    if choice.lower() == "no" or environ.get("PYTHON_JULIACALL_SYSIMAGE"):
        return None
    if choice and choice.lower() != "auto":
        path = Path(choice).expanduser()
        if not path.is_file():
            raise _backend_error(f"{ENV}={choice}: no such file")
        return path
    try:
        project, julia = _juliapkg()
    except Exception:  # noqa: BLE001 - juliacall's import reports it
        return None
    path = image_path(project)
    if not path.is_file():
        return None
    if not _fresh(path, project, julia):
        warnings.warn(
            f"pyspectral's Julia system image {path} was built from other sources "
            "(PySpectral, the glue, the environment's packages or Julia have "
            "changed since), so Julia starts without it; rebuild it with "
            f"`python -m pyspectral julia-sysimage`, or set {ENV}=no",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return path


# Whether prepare() ran in this process (pyspectral started Julia), and what
# it chose: explain() tells a Julia the user started from one pyspectral started.
_prepared: dict[str, Any] = {"ran": False, "image": None}


# ------------------------------------------------------------ the warm-up
# PythonCall cannot be in the image (juliacall 0.9.34 cannot start from one that
# has it), so a process's first call into Julia with arguments compiles
# PythonCall's conversions (pyconvert's rule tables: 1.1-1.4 s here, measured),
# and package caches cannot hold them (precompiling a package that loads
# PythonCall runs PythonCall's __init__, which needs a Python: it failed here).
# The build records the PythonCall methods the traced workload compiled beside the
# image; a process started from it compiles them on another Julia thread while
# Python goes on (importing torch, loading the glue). Only compilation: each line
# is a precompile statement; one that does not resolve is skipped.
WARM_UP_JL = """
Threads.@spawn begin
    for line in eachline({path})
        try
            Core.eval(Main, Meta.parse(line))
        catch
        end
    end
end
"""


_warmed = {"done": False, "spawned": False}  # what warm_up() did in this process


def warm_up_path(image: Path) -> Path:
    """The precompile statements the build recorded for ``image``."""
    return Path(image).with_suffix(".pythoncall.jl")


def write_warm_up(trace: Path, image: Path) -> int:
    """Keep the PythonCall statements of the build's ``trace`` (those the image
    cannot hold) for :func:`warm_up`; return how many."""
    lines = [
        line
        for line in Path(trace).read_text().splitlines()
        if "PythonCall." in line and line.startswith("precompile(")
    ]
    warm_up_path(image).write_text("".join(f"{line}\n" for line in lines))
    return len(lines)


def warm_up(jl: Any, environ: Mapping[str, str] = os.environ) -> bool:
    """Right after Julia started (once): if it started from an image with
    recorded statements and has a second thread, compile them on it in the
    background. Returns whether it did."""
    if _warmed["done"]:
        return False
    _warmed["done"] = True
    image = _prepared["image"] or environ.get("PYTHON_JULIACALL_SYSIMAGE")
    if not image or not warm_up_path(Path(image)).is_file():
        return False
    if int(jl.seval("Threads.nthreads()")) < 2:
        return False  # the one thread is Python's: nothing would run beside it
    jl.seval(WARM_UP_JL.format(path=julia_string(warm_up_path(Path(image)))))
    _warmed["spawned"] = True
    return True


def _fresh(path: Path, project: Path, julia: Path) -> bool:
    """Whether the image at ``path`` was built from what is installed now."""
    try:
        built = json.loads(path.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return False
    return built == fingerprint(project, julia)


def prepare(environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """Before pyspectral imports juliacall: make juliacall start Julia from the
    image :func:`select` chooses (if any), through juliacall's
    ``PYTHON_JULIACALL_SYSIMAGE``. Returns that image."""
    image = select(environ)
    if image is not None:
        environ["PYTHON_JULIACALL_SYSIMAGE"] = str(image)
    _prepared.update(ran=True, image=image)
    return image


def explain(from_image: bool, environ: Mapping[str, str] = os.environ) -> str | None:
    """After Julia started, not ``from_image`` (pyspectral's): why not, as a
    ``RuntimeWarning`` (also returned), unless the user chose so (``ENV=no``,
    or juliacall's ``PYTHON_JULIACALL_SYSIMAGE`` set to an image of their own)
    or :func:`select` has said it (a stale image). A process's first Julia
    call then also loads and compiles PySpectral (about 4 s more): never
    silently."""
    if from_image or environ.get(ENV, "").strip().lower() == "no":
        return None
    if _prepared["image"] is not None:
        return None  # an image by path (ENV), not pyspectral's own build
    if environ.get("PYTHON_JULIACALL_SYSIMAGE") and not _prepared["ran"]:
        return None  # the user's own image for juliacall
    try:
        project, julia = _juliapkg()
    except Exception:  # noqa: BLE001 - nothing to point at
        return None
    path = image_path(project)
    if path.is_file() and _prepared["ran"]:
        return None  # passed over by select(), with its warning
    if path.is_file() and not _fresh(path, project, julia):
        message = (
            f"pyspectral's Julia system image {path} was built from other sources "
            "and Julia was started without it, so this process's first Julia call "
            "also loads and compiles PySpectral (about 4 s more): rebuild it with "
            "`python -m pyspectral julia-sysimage`"
        )
    elif path.is_file():
        message = (
            "Julia was started before pyspectral could give it its system image "
            f"{path} (juliacall was imported first), so this process's first "
            "Julia call also loads and compiles PySpectral (about 4 s more): let "
            "pyspectral start Julia (set PYSPECTRAL_START_JULIA=auto before "
            "importing pyspectral, instead of importing juliacall yourself), or set "
            f"PYTHON_JULIACALL_SYSIMAGE={path} before importing juliacall"
        )
    else:
        message = (
            "pyspectral's Julia system image is not built, so this process's first "
            "Julia call also loads and compiles PySpectral (about 4 s more): build "
            "it once with `python -m pyspectral julia-sysimage` (several minutes; "
            "`install-julia` builds it unless given --no-sysimage)"
        )
    message += f"; {ENV}=no to start without it and not be told"
    from .._warnings import warn  # (imports torch: Julia has started by now)

    warn(message, RuntimeWarning)  # at the user's line that started Julia
    return message


def check_started(jl: Any) -> bool:
    """After Julia started: whether its image has the glue compiled in, for
    these sources (then the bridge must not load the glue again). An image of
    other sources raises :class:`BackendError`: it would run old code."""
    built = str(jl.seval(f'isdefined(Main, :{IMAGE_MARK}) ? Main.{IMAGE_MARK} : ""'))
    if not built:
        return False
    if built != sources_digest():
        raise _backend_error(
            "Julia was started from a pyspectral system image built from other "
            "sources than this pyspectral's (PySpectral or the glue changed); "
            "rebuild it with `python -m pyspectral julia-sysimage`, or start Julia "
            "without it (unset PYTHON_JULIACALL_SYSIMAGE)"
        )
    return True


# ------------------------------------------------------------------ build


_SCRIPT = """
# Run by PackageCompiler's output process: what it defines and compiles is in the image
push!(LOAD_PATH, "@stdlib")  # for the glue's Logging and Test
include({glue})
const {mark} = {digest}
let ok = 0
    for line in eachline({trace})
        # statements of modules that are not in the image (PythonCall) do not resolve
        try
            Core.eval(Main, Meta.parse(line)) === true && (ok += 1)
        catch
        end
    end
    println("pyspectral: ", ok, " traced methods compiled into the image")
end
"""

_BUILD = """
using PackageCompiler
create_sysimage([{packages}]; sysimage_path={output}, script={script})
"""


def build(output: Path | None = None, log: Any = print) -> Path:
    """Build the image (minutes): trace ``_workload.workload`` in a fresh process,
    then PackageCompiler's ``create_sysimage`` of PySpectral with the glue and
    the traced methods, in the juliapkg environment. Returns its path; its
    fingerprint is written beside it."""
    import juliapkg

    project, julia = _juliapkg()
    if not juliapkg.offline(None):  # (None: read the setting, not set it)
        juliapkg.add(*PACKAGE_COMPILER)
        juliapkg.resolve()
    output = image_path(project) if output is None else Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    stamp = fingerprint(project, julia)
    with tempfile.TemporaryDirectory(prefix="pyspectral-sysimage-") as tmp:
        trace, script, build_jl = (
            Path(tmp) / name for name in ("trace.jl", "script.jl", "build.jl")
        )
        env = dict(os.environ, PYTHON_JULIACALL_TRACE_COMPILE=str(trace))
        env.update({ENV: "no", "PYSPECTRAL_START_JULIA": "yes"})
        env.pop("PYTHON_JULIACALL_SYSIMAGE", None)
        log("pyspectral: tracing what the backend compiles (a fresh process)...")
        code = "from pyspectral.julia._workload import workload; workload()"
        _run([sys.executable, "-c", code], env, "the traced workload")
        count = write_warm_up(trace, output)
        log(f"pyspectral: {count} PythonCall methods recorded for the warm-up")
        script.write_text(
            _SCRIPT.format(
                glue=julia_string(GLUE),
                mark=IMAGE_MARK,
                trace=julia_string(trace),
                digest=julia_string(stamp["sources"]),
            )  # fmt: skip
        )
        build_jl.write_text(
            _BUILD.format(
                packages='"PySpectral"',
                output=julia_string(output),
                script=julia_string(script),
            )
        )
        # PackageCompiler loads the packages with --pkgimages=no, in a process that
        # writes the image, where Julia neither precompiles nor has its BLAS set up:
        # a package whose cache of that kind is missing or stale loads from source
        # there, running its precompile workload without LAPACK (a segfault). So the
        # caches are made first, in an ordinary process.
        log("pyspectral: precompiling PySpectral as PackageCompiler loads it...")
        flags = [f"--project={project}", "--startup-file=no"]
        cmd = [str(julia), *flags, "--pkgimages=no", "-e", "using PySpectral"]
        _run(cmd, dict(os.environ), "precompiling PySpectral (--pkgimages=no)")
        log(f"pyspectral: building {output} with PackageCompiler (several minutes)...")
        cmd = [str(julia), *flags, str(build_jl)]
        _run(cmd, dict(os.environ), "PackageCompiler's create_sysimage")
    output.with_suffix(".json").write_text(json.dumps(stamp, indent=1))
    # Package caches are tied to the image they were compiled against: the first
    # process started from a new image recompiles PythonCall's (about a minute).
    # Do that here, not in the user's first call.
    log("pyspectral: compiling PythonCall against the new image (once)...")
    env = dict(os.environ, PYSPECTRAL_START_JULIA="yes")
    env[ENV] = str(output)
    env.pop("PYTHON_JULIACALL_SYSIMAGE", None)
    code = "from pyspectral.julia import _bridge; _bridge.glue()"
    _run([sys.executable, "-c", code], env, "the first start from the image")
    return output


def _backend_error(message: str) -> Exception:
    # imported here: pyspectral.exceptions imports torch, and this module is
    # imported before juliacall, which must come first
    from ..exceptions import BackendError

    return BackendError(message)


def julia_string(value: Any) -> str:
    """``str(value)`` as a Julia string literal (backslash, quote and ``$``
    escaped, so Windows paths keep their backslashes)."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{text}"'


def _run(cmd: list[str], env: dict[str, str], what: str) -> None:
    run = subprocess.run(cmd, env=env)
    if run.returncode != 0:
        raise _backend_error(
            f"julia-sysimage: {what} failed (exit status {run.returncode}; its "
            "output is above). Without PackageCompiler in the Julia environment "
            "(offline, juliapkg cannot add it) add it there first."
        )
