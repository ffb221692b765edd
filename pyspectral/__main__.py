"""Command line: ``python -m pyspectral info | demo | bench | install-julia |
julia-sysimage | test-julia`` (also ``pyspectral``)."""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

import pyspectral

from . import _backend


def info() -> int:
    """Print versions, devices and which backends are usable here."""
    cuda = (
        f"yes ({torch.cuda.device_count()} device(s): {torch.cuda.get_device_name(0)})"
        if torch.cuda.is_available()
        else "no"
    )
    print(f"pyspectral {pyspectral.__version__}  ({Path(pyspectral.__file__).parent})")
    print(f"torch      {torch.__version__}")
    print(f"Python     {platform.python_version()}  ({sys.executable})")
    print(f"CUDA       {cuda}")
    print("backends:")
    for name, (usable, why) in _backend.backend_status().items():
        print(f"  {name:<6} {'usable' if usable else 'not usable':<11} {why}")
    print(
        "  auto   = torch for every call (the measured-fast native backend, any "
        "device); Julia runs with backend='julia'"
    )
    blas = julia_blas()
    if blas is not None:
        print(f"Julia BLAS {blas}")
    return 0


def julia_blas() -> str | None:
    """Julia's BLAS: what libblastrampoline forwards to once Julia runs in this
    process, else what PYSPECTRAL_JULIA_BLAS will make it; None when Julia is
    neither running, usable nor configured."""
    from .julia import _blas, _bridge

    running = _bridge.julia_blas()
    if running is not None:
        return running
    wanted = _blas.requested_blas()
    if not _bridge.status()[0] and wanted in (None, "auto"):
        return None
    path, problem = _blas.blas_choice()
    if problem is not None:
        return f"Julia's own, OpenBLAS (Julia not started here): {problem}"
    if path is not None:
        how = "torch's own LAPACK" if path == _blas.torch_lapack() else _blas.BLAS_ENV
        return f"{path} ({how}, over Julia's OpenBLAS; Julia not started here)"
    return (
        f"Julia's own, OpenBLAS (Julia not started here; {_blas.BLAS_ENV}=auto or "
        "torch for torch's own LAPACK where torch's library exports it)"
    )


def demo(seed: int) -> int:
    from . import _demo

    return _demo.run(seed)


BENCHMARKS = (
    "svd",
    "eigh",
    "factorizations",
    "topk",
    "truncation",
    "trg",
    "compile",
    "julia",
)

# bench_topk.py's own quick mode (its smallest sensible problems).
TOPK_QUICK = ["--quick"]


def _benchmarks_dir() -> Path | None:
    for root in (Path(pyspectral.__file__).resolve().parent.parent, Path.cwd()):
        if (root / "benchmarks" / "bench_svd.py").is_file():
            return root / "benchmarks"
    return None


def bench_argv(name: str, args: argparse.Namespace) -> list[str]:
    """The command line ``bench`` passes to ``bench_<name>.py``'s ``main``."""
    device = getattr(args, "device", None)
    on = ["--device", device] if device and name != "julia" else []
    if name == "topk":  # takes none of the sweep options
        return (list(TOPK_QUICK) if args.quick else []) + on
    argv = ["--quick"] if args.quick else []
    options = ("sizes", "repeat", "threads", "blas")
    for option in options if name == "julia" else options[:-1]:
        if getattr(args, option, None) is not None:
            argv += [f"--{option}", str(getattr(args, option))]
    return argv + on


def bench(which: str, args: argparse.Namespace) -> int:
    """Run ``benchmarks/bench_<which>.py``'s ``main`` (each of them for
    ``"all"``) from a source checkout; each prints its rows as it measures."""
    where = _benchmarks_dir()
    if where is None:
        print(
            "pyspectral bench: benchmarks/ not found; the benchmark scripts live "
            "in a clone of the repository, not in the installed wheel. Run this "
            "from the clone (pip install -e .).",
            file=sys.stderr,
        )
        return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    status = 0
    for name in BENCHMARKS if which == "all" else (which,):
        if name == "julia" and getattr(args, "device", None) not in (None, "cpu"):
            print(
                f"pyspectral bench: julia skipped: the Julia backend runs on CPU "
                f"tensors only (--device {args.device})",
                file=sys.stderr,
                flush=True,
            )
            status = max(status, 2 if which == "julia" else 0)
            continue
        argv = bench_argv(name, args)
        command = " ".join([f"benchmarks/bench_{name}.py", *argv])
        print(f"pyspectral bench: running {command}", file=sys.stderr, flush=True)
        if name == "topk" and (args.sizes or args.repeat):
            print(
                "pyspectral bench: bench_topk.py takes no --sizes/--repeat; ignored",
                file=sys.stderr,
            )
        path = where / f"bench_{name}.py"
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        status = max(status, module.main(argv) or 0)
    return status


def install_julia(tests: bool, sysimage: bool = True) -> int:
    """Install Julia and the Julia packages (juliapkg prints its progress), then
    build the system image unless ``sysimage`` is False."""
    from .julia import _install, _sysimage

    loaded = _install.install(tests=tests)
    print("pyspectral: the Julia backend is installed and loads:", loaded)
    if not sysimage:
        print(
            "pyspectral: no system image (--no-sysimage): a process's first Julia "
            "call also loads and compiles PySpectral (about 4 s more); "
            "`python -m pyspectral julia-sysimage` builds it"
        )
        return 0
    print(
        "pyspectral: building the system image, so that a process's first Julia "
        "call does not load and compile PySpectral (about 4 s saved; building "
        "takes 6 to 15 minutes on 2 cores and 7 GB of memory, once; "
        "--no-sysimage skips it)"
    )
    start = time.perf_counter()
    image = _sysimage.build()
    minutes, seconds = divmod(round(time.perf_counter() - start), 60)
    print(f"pyspectral: built {image} in {minutes} min {seconds} s")
    return 0


def julia_sysimage(output: str | None, path_only: bool) -> int:
    """Build pyspectral's Julia system image (or print where it goes)."""
    from .julia import _sysimage

    if path_only:
        print(_sysimage.default_image())
        return 0
    image = _sysimage.build(None if output is None else Path(output))
    if output is None:
        print(f"pyspectral: built {image}; pyspectral starts Julia from it from now on")
    else:
        print(f"pyspectral: built {image}; set {_sysimage.ENV}={image} to use it")
    return 0


def test_julia(path: str | None) -> int:
    """Run the top-level @testsets of a Julia test file (default: PySpectral's)."""
    from . import julia

    return 0 if julia.run_tests(path) else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="pyspectral",
        description="pyspectral: SVD and eigh for PyTorch with correct gradients "
        "at degenerate spectra.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, devices and usable backends")
    d = sub.add_parser(
        "demo",
        help="gradient errors of torch.linalg and pyspectral against finite "
        "differences at degenerate spectra",
    )
    d.add_argument("--seed", type=int, default=0, help="seed of the random matrices")
    b = sub.add_parser(
        "bench",
        help="forward+backward time against torch.linalg, row by row: svd, eigh, "
        "factorizations (qr, lq, eig), topk, truncation (rules against a fixed "
        "k), trg (the TRG example per temperature point; --sizes are bond "
        "dimensions chi), compile (compiled vs eager), julia or all (needs a "
        "source checkout)",
    )
    b.add_argument("which", nargs="?", choices=(*BENCHMARKS, "all"), default="all")
    b.add_argument(
        "--quick", action="store_true", help="small sizes, few rounds (seconds)"
    )
    b.add_argument("--sizes", help="e.g. 64,256,512,1024,4096x8 (BxN: a batch)")
    b.add_argument("--repeat", type=int, help="timed rounds per size")
    b.add_argument("--threads", type=int, help="torch threads (default: all)")
    b.add_argument(
        "--device",
        help="svd, eigh, factorizations, topk: cpu (default) or cuda (a GPU; its "
        "own default sizes, n = 64 ... 4096, batches of 8x8 and 32x32, top-k at "
        "8192^2)",
    )
    b.add_argument(
        "--blas",
        choices=("auto", "openblas", "torch", "mkl", "all"),
        help="julia: Julia's BLAS (auto, torch: torch's own LAPACK; openblas: "
        "Julia's; mkl: the mkl wheel's; all: each in a fresh process)",
    )
    i = sub.add_parser(
        "install-julia",
        help="install Julia and the Julia packages (once; needs network, or "
        "PYTHON_JULIAPKG_EXE / PYTHON_JULIAPKG_OFFLINE for an existing Julia), "
        "then build the system image (julia-sysimage)",
    )
    i.add_argument("--tests", action="store_true", help="also the Julia test packages")
    i.add_argument(
        "--no-sysimage",
        dest="sysimage",
        action="store_false",
        help="do not build the system image (julia-sysimage) after installing",
    )
    s = sub.add_parser(
        "julia-sysimage",
        help="build a Julia system image with PySpectral and the bridge compiled "
        "in (minutes, once): the first backend='julia' call in a process then "
        "takes about a second instead of several",
    )
    s.add_argument("--output", help="where to write it (default: --path's)")
    s.add_argument(
        "--path",
        action="store_true",
        help="print where the image goes (for PYTHON_JULIACALL_SYSIMAGE) and stop",
    )
    t = sub.add_parser(
        "test-julia", help="run the @testsets of a Julia rule test file in Julia"
    )
    t.add_argument("path", nargs="?", help="a .jl file (default: PySpectral's tests)")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except pyspectral.PySpectralError as err:
        print(f"pyspectral: {err}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "install-julia":
        return install_julia(args.tests, args.sysimage)
    if args.command == "julia-sysimage":
        return julia_sysimage(args.output, args.path)
    if args.command == "test-julia":
        return test_julia(args.path)
    if args.command == "info":
        return info()
    if args.command == "demo":
        return demo(args.seed)
    return bench(args.which, args)


if __name__ == "__main__":
    sys.exit(main())
