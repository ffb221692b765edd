"""Command line: ``python -m pyspectral info | demo | bench | install-julia |
test-julia`` (also ``pyspectral``)."""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
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
    return 0


def demo(seed: int) -> int:
    from . import _demo

    return _demo.run(seed)


def _benchmarks_dir() -> Path | None:
    for root in (Path(pyspectral.__file__).resolve().parent.parent, Path.cwd()):
        if (root / "benchmarks" / "bench_svd.py").is_file():
            return root / "benchmarks"
    return None


def bench(which: str, argv: list[str]) -> int:
    """Run ``benchmarks/bench_<which>.py``'s ``main(argv)`` (a source checkout)."""
    where = _benchmarks_dir()
    if where is None:
        print(
            "pyspectral bench: benchmarks/ not found; the benchmark scripts live "
            "in a clone of the repository, not in the installed wheel. Run this "
            "from the clone (pip install -e .).",
            file=sys.stderr,
        )
        return 2
    for name in ("svd", "eigh") if which == "all" else (which,):
        path = where / f"bench_{name}.py"
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main(argv)
    return 0


def install_julia(tests: bool) -> int:
    """Install Julia and the Julia packages (juliapkg prints its progress)."""
    from . import _julia

    _julia.install(tests=tests)
    print("pyspectral: the Julia backend is installed and loads:", _julia.status()[1])
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
        help="forward+backward time against torch.linalg (needs a source checkout)",
    )
    b.add_argument("which", nargs="?", choices=("svd", "eigh", "all"), default="all")
    b.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    b.add_argument("--sizes", help="e.g. 64,256,512,1024,4096x8 (BxN: a batch)")
    b.add_argument("--repeat", type=int, help="timed rounds per size")
    b.add_argument("--threads", type=int, help="torch threads (default: all)")
    i = sub.add_parser(
        "install-julia",
        help="install Julia and the Julia packages (once; needs network, or "
        "PYTHON_JULIAPKG_EXE / PYTHON_JULIAPKG_OFFLINE for an existing Julia)",
    )
    i.add_argument("--tests", action="store_true", help="also the Julia test packages")
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
        return install_julia(args.tests)
    if args.command == "test-julia":
        return test_julia(args.path)
    if args.command == "info":
        return info()
    if args.command == "demo":
        return demo(args.seed)
    forward = ["--quick"] if args.quick else []
    for name in ("sizes", "repeat", "threads"):
        if getattr(args, name) is not None:
            forward += [f"--{name}", str(getattr(args, name))]
    return bench(args.which, forward)


if __name__ == "__main__":
    sys.exit(main())
