"""Which BLAS Julia uses when pyspectral starts it.

Julia calls BLAS and LAPACK through libblastrampoline (LBT), which forwards
them to Julia's OpenBLAS. ``PYSPECTRAL_JULIA_BLAS`` (read when Julia starts)
can forward them elsewhere: see the comment below.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..exceptions import BackendError
from ._sysimage import julia_string

# ------------------------------------------------------------ Julia's BLAS
# Julia calls BLAS and LAPACK through libblastrampoline (LBT), which forwards
# them to Julia's OpenBLAS. PYSPECTRAL_JULIA_BLAS (read when Julia starts) can
# forward them elsewhere, right after Julia starts, with LinearAlgebra's
# BLAS.lbt_forward (Julia >= 1.7):
#
# - "auto" (the default: unset or empty): torch's own LAPACK where torch's
#   library exports it, else Julia's own. torch's Linux x86-64 wheels link MKL
#   into libtorch_cpu and export the ILP64 Fortran symbols Julia calls
#   (dgemm_64_, dgesdd_64_, dsyevd_64_, ...: 99 of them, the BLAS and LAPACK
#   torch itself uses). Those are forwarded over Julia's OpenBLAS (clear=false),
#   which keeps the rest. So the Julia backend's svd, eigh, QR, eig and products
#   run the very code torch.linalg runs, on torch's OpenMP threads with torch's
#   thread count: no second pool of spinning threads, no second LAPACK.
#   Measured (AMD EPYC, 2 cores, torch's MKL beside Julia's OpenBLAS): a 256x256
#   eigh forward+backward took 1.12-1.28x the native backend's with Julia's
#   OpenBLAS (its syevd 6.7 ms on one thread, 5.6 on two, against torch's 4.9;
#   two OpenBLAS threads made the call 3x slower, spinning against torch's),
#   see docs/benchmarks.md for the numbers with torch's.
# - "torch": the same, with a warning where torch exports no such symbols.
# - "mkl": the libmkl_rt of the `mkl` wheel from PyPI (pip install mkl puts it
#   in <prefix>/lib), set up as MKL.jl sets up its own MKL (the LP64 interface
#   layer; MKL >= 2022 exports the ILP64 symbols Julia calls with the suffix 64).
# - "openblas" (or "julia", or "default"): Julia's own.
# - any other value: the path of a BLAS/LAPACK library, whose interface and
#   suffix LBT detects.
#
# Asked for and not usable: a warning, Julia's own.
#
# MKL's threads (the mkl wheel's): where torch runs on GNU OpenMP (libgomp, its
# Linux wheels), MKL is given its GNU threading layer, so that its parallel
# regions run on the same OpenMP runtime and threads as torch's rather than on a
# second pool of spinning threads (Intel OpenMP's); elsewhere MKL's default,
# Intel's. torch's own MKL is on torch's runtime already, and Julia's
# BLAS.set_num_threads does not reach it (LBT finds no thread setter in
# libtorch_cpu: measured, torch's thread count and its eigh time unchanged), so
# there the bridge's per-call policy below sets only OpenBLAS's threads, for the
# symbols torch's library lacks.

BLAS_ENV = "PYSPECTRAL_JULIA_BLAS"

# libmkl_rt.so.2 / .so.3 (Linux), libmkl_rt.2.dylib (macOS), mkl_rt.2.dll (Windows)
_MKL_RT = re.compile(r"^(lib)?mkl_rt(\.\d+)*\.(so|dylib|dll)(\.\d+)*$")

# One Julia expression (juliacall's seval parses one), evaluated into Main.
BLAS_JL = """
module PySpectralBLAS

import LinearAlgebra
const Libdl = Base.Libc.Libdl

# MKL.jl's set-up of MKL >= 2022 (MKL.jl, src/MKL.jl): the threading layer
# (MKL_Set_Threading_Layer: 0 Intel, 3 GNU, MKL.jl's enum), the LP64 interface
# layer (MKL_Set_Interface_Layer(0)), then the ILP64 symbols, which such an MKL
# exports with the suffix 64, and the LP64 ones. Returns how many symbols were
# forwarded: 0 if libblastrampoline could not use the library (it then changed
# nothing).
function forward_mkl(path::String, threading::Integer)
    lib = Libdl.dlopen(path)
    set_threading = Libdl.dlsym(lib, :MKL_Set_Threading_Layer)
    ccall(set_threading, Cint, (Cint,), threading) == -1 &&
        error("MKL_Set_Threading_Layer failed")
    set_layer = Libdl.dlsym(lib, :MKL_Set_Interface_Layer)
    ccall(set_layer, Cint, (Cint,), 0) == -1 && error("MKL_Set_Interface_Layer failed")
    n = LinearAlgebra.BLAS.lbt_forward(path; clear=true, suffix_hint="64")
    n == 0 && return 0
    return Int(n) + Int(LinearAlgebra.BLAS.lbt_forward(path; suffix_hint=""))
end

# Any other library: libblastrampoline detects its interface and symbol suffix.
forward(path::String) = Int(LinearAlgebra.BLAS.lbt_forward(path; clear=true))

# torch's library: only the symbols it has, over Julia's own (clear=false keeps the
# rest on OpenBLAS), ILP64 with the suffix 64_.
forward_over(path::String) =
    Int(LinearAlgebra.BLAS.lbt_forward(path; clear=false, suffix_hint="64_"))

# The libraries libblastrampoline forwards to, with their interfaces.
describe() = join(("$(basename(lib.libname)) ($(lib.interface))"
                   for lib in LinearAlgebra.BLAS.get_config().loaded_libs), ", ")

end
"""


# ------------------------------------------------------- Julia's BLAS threads
# torch's intra-op pool (torch.get_num_threads() threads) spins for a while after
# each parallel region, and Julia's OpenBLAS threads spin after each BLAS call; a
# pyspectral call alternates between the two. Where both pools have more than one
# thread, LAPACK's many fork-joins inside Julia then fight torch's spinning threads
# for the cores: on 2 cores, forward+backward of a 256x256 svd took 29 ms with 2
# Julia BLAS threads and 20 ms with 1 (the same core takes 13-14 ms inside Julia
# either way), a 256x256 eigh 24 against 11 ms. Only large matrices gain from more
# threads: 1024x1024 svd 540 ms with 2 threads, 710 with 1; at 768x768 they tie.
# So a call on matrices of at least THREADS_FROM entries gets torch's thread count,
# smaller ones one thread (benchmarks/bench_julia.py measures both policies).
# MKL on torch's OpenMP runtime (see above) has no second pool to fight: there two
# threads paid from 128x128 on (256x256 svd 1.16x native with 2, 1.44x with 1;
# 128x128 a tie), so THREADS_FROM_SHARED applies. Below either, a batch of small
# matrices runs on Julia's threads instead (glue.jl, nworkers).
# PYSPECTRAL_JULIA_BLAS_THREADS=N gives every call N threads instead.

THREADS_ENV = "PYSPECTRAL_JULIA_BLAS_THREADS"
THREADS_FROM = 768 * 768
THREADS_FROM_SHARED = 128 * 128

# What start_blas set up: whether Julia's BLAS threads are torch's OpenMP ones.
_started = {"shared_pool": False}


def requested_threads(value: str | None = None) -> int | None:
    """The BLAS thread count ``PYSPECTRAL_JULIA_BLAS_THREADS`` (or ``value``)
    fixes for every Julia call, or None ("auto", empty or unset: by size)."""
    raw = os.environ.get(THREADS_ENV, "") if value is None else value
    text = raw.strip().lower()
    if text in ("", "auto"):
        return None
    if not text.isdigit() or int(text) < 1:
        raise BackendError(
            f"{THREADS_ENV}={raw!r}: expected a positive number of threads or "
            "'auto' (one thread below 768x768 entries, torch's thread count above)"
        )
    return int(text)


def threads_from() -> int:
    """The entries from which a call gets torch's thread count (by the BLAS
    that start_blas set up)."""
    return THREADS_FROM_SHARED if _started["shared_pool"] else THREADS_FROM


def threads_for(elements: int) -> int:
    """Julia's BLAS threads for a call on matrices of ``elements`` entries."""
    fixed = requested_threads()
    if fixed is not None:
        return fixed
    return torch.get_num_threads() if elements >= threads_from() else 1


def requested_blas(value: str | None = None) -> str | None:
    """What ``PYSPECTRAL_JULIA_BLAS`` (or ``value``) asks for: "auto" (unset or
    empty: torch's LAPACK where torch exports it), "torch", "mkl", a library
    path, or None for Julia's own BLAS ("openblas", "julia" or "default")."""
    value = (os.environ.get(BLAS_ENV, "") if value is None else value).strip()
    if value.lower() in ("", "auto"):
        return "auto"
    if value.lower() in ("default", "openblas", "julia"):
        return None
    return value.lower() if value.lower() in ("torch", "mkl") else value


# Symbols torch's library must export for Julia to use it: ILP64 (suffix 64_)
# BLAS and LAPACK, dpotrf_64_ being the one libblastrampoline probes.
TORCH_SYMBOLS = ("dgemm_64_", "dgesdd_64_", "dsyevd_64_", "dpotrf_64_", "zheevd_64_")


def torch_lapack() -> Path | None:
    """torch's own library where it exports the ILP64 BLAS and LAPACK Julia
    calls (libtorch_cpu of torch's Linux x86-64 wheels: the MKL linked into
    it), else None. torch has loaded it already: this only looks it up."""
    lib = Path(torch.__file__).resolve().parent / "lib"
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        path = lib / name
        if not path.is_file():
            continue
        try:
            handle = ctypes.CDLL(str(path))
        except OSError:
            return None
        return path if all(hasattr(handle, s) for s in TORCH_SYMBOLS) else None
    return None


def find_mkl_rt() -> Path | None:
    """libmkl_rt of the installed ``mkl`` wheel (its RECORD lists it, in
    ``<prefix>/lib``), else one in ``sys.prefix``'s lib (``Library/bin`` on
    Windows, where conda puts it); None if there is none."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    found = sorted(Path(f.locate()) for f in files if _MKL_RT.match(f.name))
    for where in (Path(sys.prefix, "lib"), Path(sys.prefix, "Library", "bin")):
        if where.is_dir():
            found += sorted(p for p in where.iterdir() if _MKL_RT.match(p.name))
    return next((p.resolve() for p in found if p.is_file()), None)


def blas_choice() -> tuple[Path | None, str | None]:
    """``(library, problem)``: the library ``PYSPECTRAL_JULIA_BLAS`` asks Julia
    to use (None: Julia's own) and, when it asks for one that is not there,
    why not."""
    wanted = requested_blas()
    if wanted is None:
        return None, None
    if wanted == "auto":
        return torch_lapack(), None
    if wanted == "torch":
        path = torch_lapack()
        if path is None:
            return None, (
                f"{BLAS_ENV}=torch, but this torch's library exports no ILP64 "
                f"LAPACK ({', '.join(TORCH_SYMBOLS)}; torch's Linux x86-64 wheels "
                f"do): set {BLAS_ENV}=mkl after `pip install mkl`, or unset it"
            )
        return path, None
    if wanted == "mkl":
        path = find_mkl_rt()
        if path is None:
            return None, (
                f"{BLAS_ENV}=mkl, but no libmkl_rt was found (neither among the "
                f"files of an installed `mkl` package nor in {sys.prefix}/lib): "
                f"`pip install mkl`, or set {BLAS_ENV} to the path of libmkl_rt"
            )
        return path, None
    path = Path(wanted).expanduser()
    if not path.is_file():
        return None, (
            f"{BLAS_ENV}={wanted}: no such file; set it to 'torch', 'mkl', "
            "'openblas' or the path of a BLAS/LAPACK library"
        )
    return path.resolve(), None


def _warn_blas(message: str) -> None:
    warnings.warn(
        f"pyspectral: {message}. Julia uses its default BLAS.", RuntimeWarning, 3
    )


def start_blas(jl: Any) -> str:
    """Forward Julia's BLAS as ``PYSPECTRAL_JULIA_BLAS`` asks (called right
    after Julia starts, before any package is loaded); return what Julia's
    BLAS then is. Never raises: this must not keep Julia from starting, so a
    library asked for but not usable warns, and Julia keeps its own BLAS."""
    path, problem = blas_choice()
    if problem is not None:
        _warn_blas(problem)
    try:
        jl.seval(BLAS_JL.strip())
        blas = jl.PySpectralBLAS
    except Exception as err:  # noqa: BLE001 - reported, Julia starts anyway
        if path is not None:
            _warn_blas(f"{BLAS_ENV}: cannot forward Julia's BLAS ({err})")
        return f"unknown ({type(err).__name__} while asking Julia)"
    _started["shared_pool"] = False
    if path is not None:
        mkl = _MKL_RT.match(path.name) is not None
        gnu = mkl and torch_openmp() == "gnu"
        try:
            # The path goes in as Julia source, not as an argument: the first
            # call from Python with a str converts it through PythonCall's
            # generic rules, compiled on first use (1.1 s of the first call, measured).
            lib = julia_string(str(path))
            if path == torch_lapack():
                with _without_probe_message():
                    count = int(jl.seval(f"PySpectralBLAS.forward_over({lib})"))
            elif mkl:
                layer = _GNU if gnu else _INTEL
                count = int(jl.seval(f"PySpectralBLAS.forward_mkl({lib}, {layer})"))
            else:
                count = int(jl.seval(f"PySpectralBLAS.forward({lib})"))
            if count == 0:
                _warn_blas(f"{BLAS_ENV}: libblastrampoline could not use {path}")
            else:
                _started["shared_pool"] = gnu
        except Exception as err:  # noqa: BLE001 - a warning, whatever Julia threw
            _warn_blas(f"{BLAS_ENV}: Julia could not load {path}: {err}")
    return str(blas.describe())


# What MKL's error handler prints when libblastrampoline, to tell LP64 from ILP64,
# calls the library's dpotrf with an argument only one of them accepts.
PROBE_MESSAGE = re.compile(rb"^.*Parameter \d+ was incorrect on entry to DPOTRF\.?\s*$")


@contextlib.contextmanager
def _without_probe_message() -> Iterator[None]:
    """Run the body with the process's standard output (file descriptor 1, where
    MKL's C code prints) caught, and write back what it printed except
    PROBE_MESSAGE: an error message for a call that was a probe, not an error."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 1)
        try:
            yield
        finally:
            _flush_c_stdout()
            os.dup2(saved, 1)
            os.close(saved)
            caught.seek(0)
            text = caught.read()
    kept = [
        line for line in text.splitlines(keepends=True) if not PROBE_MESSAGE.match(line)
    ]
    if any(line.strip() for line in kept):
        os.write(1, b"".join(kept))


def _flush_c_stdout() -> None:
    """fflush(NULL): what C code printed reaches its file descriptor now."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


# MKL_Set_Threading_Layer's values (MKL.jl's Threading enum)
_INTEL, _GNU = 0, 3


def torch_openmp(maps: str = "/proc/self/maps") -> str | None:
    """The OpenMP runtime this process has loaded (torch's): "gnu" (libgomp),
    "intel" (libiomp5), or None where that cannot be read (not Linux)."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return None
    names = {Path(line.split()[-1]).name for line in text.splitlines() if "/" in line}
    if any(n.startswith("libgomp") for n in names):
        return "gnu"
    if any(n.startswith("libiomp5") for n in names):
        return "intel"
    return None
