"""Shared benchmark helpers: interleaved timing, progress, streamed tables and
the command line.

All implementations of one measurement run in the same process, alternately
(the order flips every round), so that drifts in clock speed or cache state
hit them alike; a round of fast calls repeats each (the same number of times)
to last about ``ROUND`` seconds. The reported time of each is its median over
the rounds of the time per call, and a ratio is the median over rounds of the
per-round ratio. Each table row is
printed (and flushed) as soon as it is measured; a measurement expected to
take more than a few seconds says so on stderr first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import torch

DEFAULT_SIZES = "64,256,512,1024,4096x8"
QUICK_SIZES = "64,256,4096x8"
# On a GPU (--device cuda): n = 64 ... 4096, and batches of 8x8 and 32x32 (the
# largest size of cuSOLVER's batched Jacobi SVD).
CUDA_SIZES = "64,256,512,1024,2048,4096,4096x8,4096x32"
CUDA_QUICK_SIZES = "64,512,4096x8,4096x32"
SLOW = 3.0  # seconds: a measurement expected to take longer announces itself
ROUND = 0.05  # seconds: a round of faster calls repeats them (interleaved)


def parse_size(text: str) -> tuple[int, int]:
    """``"256"`` -> one 256x256 matrix; ``"4096x8"`` -> a batch of 4096 8x8."""
    batch, _, n = text.strip().rpartition("x")
    return (int(batch) if batch else 0), int(n)


def label(batch: int, n: int) -> str:
    return f"{batch} x {n}x{n}" if batch else f"{n}x{n}"


def device(text: str) -> torch.device:
    """``--device``: ``cpu`` or ``cuda[:N]``; an unusable device is refused
    with the reason (an argparse error)."""
    try:
        dev = torch.device(text)
    except RuntimeError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if dev.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"cpu or cuda, got {text!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
        raise argparse.ArgumentTypeError(
            f"CUDA is not available (torch {torch.__version__}, a {build} build)"
        )
    return dev


def synchronize(dev: torch.device) -> None:
    """Wait for the work queued on ``dev``: a timed call ends with it, so that
    the wall time counts the GPU's work, not only its launch."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def device_name(dev: torch.device) -> str:
    """What the tables name: the GPU and CUDA version, or the CPU threads."""
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)}, CUDA {torch.version.cuda}"
    return f"CPU, {torch.get_num_threads()} threads"


def progress(message: str) -> None:
    """What the benchmark is doing, on stderr (stdout keeps the tables)."""
    print(message, file=sys.stderr, flush=True)


def _run(fn: Callable[[], object], calls: int = 1) -> float:
    """Seconds one call of ``fn`` took, the mean over ``calls`` calls in a
    row: what it returns if that is a number (its own measurement, e.g. taken
    inside Julia), else the wall time."""
    own, start = 0.0, time.perf_counter()
    for _ in range(calls):
        t = fn()
        mine = isinstance(t, (int, float)) and own is not None
        own = own + float(t) if mine else None
    wall = time.perf_counter() - start
    return (wall if own is None else own) / calls


def interleaved(
    fns: dict[str, Callable[[], object]],
    repeat: int,
    warmup: int = 2,
    what: str | None = None,
    round_s: float = ROUND,
) -> dict[str, list[float]]:
    """Times (seconds per call) of each function over ``repeat`` rounds; in
    every round each function runs, in an order that flips every round. A
    round of calls shorter than ``round_s`` repeats each function as often
    (the same number of times for all, from the slowest warm-up call) as
    makes it last about ``round_s``, and counts the mean: one call of a
    64x64 SVD is too short to time alone on a busy machine. A function may
    return its own measurement of the call (seconds), used instead of the
    wall time. If the rounds are expected (from the last warm-up round) to
    take more than ``SLOW`` seconds, ``"measuring <what> ..."`` goes to stderr."""
    names = list(fns)
    last, slowest = 0.0, 0.0
    for _ in range(warmup):
        start = time.perf_counter()
        for name in names:
            slowest = max(slowest, _run(fns[name]))
        last = time.perf_counter() - start
    calls = max(1, int(round_s / slowest)) if slowest > 0 else 1
    expected = last * repeat * calls
    if what is not None and expected > SLOW:
        progress(f"measuring {what} ({repeat} rounds, about {expected:.0f} s)...")
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeat):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(_run(fns[name], calls))
    return times


def ratio(times: dict[str, list[float]], base: str, other: str) -> float:
    """Median over rounds of ``other / base`` (paired within a round, so slow
    drifts of the machine cancel)."""
    return statistics.median(b / a for a, b in zip(times[base], times[other]))


def summary(times: dict[str, list[float]], base: str, other: str) -> tuple:
    """Median times of ``base`` and ``other``, and their paired ratio."""
    return (
        statistics.median(times[base]),
        statistics.median(times[other]),
        ratio(times, base, other),
    )


class Table:
    """A markdown table printed as it grows: the title and header at once,
    then each row (flushed) when :meth:`row` is called."""

    def __init__(self, title: str, columns: Sequence[str], align: str = "") -> None:
        self.columns = list(columns)
        align = align or "l" + "r" * (len(self.columns) - 1)
        rule = ("---" if a == "l" else "---:" for a in align)
        print(f"\n{title}\n", flush=True)
        print("| " + " | ".join(self.columns) + " |")
        print("|" + "|".join(rule) + "|", flush=True)

    def row(self, cells: Iterable[object]) -> None:
        cells = list(cells)
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for columns {self.columns}")
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)


def versus_torch(title: str, dev: torch.device | None = None) -> Table:
    """The table of ``bench_svd`` / ``bench_eigh``: median ms and the ratio."""
    return Table(
        f"{title}: float64, forward+backward, median ms; torch "
        f"{torch.__version__}, {device_name(dev or torch.device('cpu'))}",
        ("size", "torch.linalg", "pyspectral", "ratio"),
    )


def versus_torch_row(size: str, t_torch: float, t_ps: float, r: float) -> list[str]:
    return [size, f"{1e3 * t_torch:.3f}", f"{1e3 * t_ps:.3f}", f"{r:.2f}"]


def parser(
    description: str, sizes: str = DEFAULT_SIZES, quick: str = QUICK_SIZES
) -> argparse.ArgumentParser:
    """The options every size-sweeping benchmark takes (default ``sizes``;
    ``quick`` ones with --quick)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--sizes",
        default=None,
        help=f"comma-separated n (square) or BxN (batch of B NxN); default {sizes}",
    )
    p.add_argument(
        "--repeat", type=int, default=None, help="timed rounds per size (default 21)"
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: all)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"sizes {quick} and 5 rounds (a smoke test, not a measurement)",
    )
    return p


def finish(
    args: argparse.Namespace, sizes: str = DEFAULT_SIZES, quick: str = QUICK_SIZES
) -> argparse.Namespace:
    """Fill in the defaults that depend on ``--quick`` and ``--device``;
    apply ``--threads``."""
    on_gpu = getattr(args, "device", torch.device("cpu")).type == "cuda"
    if args.sizes is None and on_gpu:
        args.sizes = CUDA_QUICK_SIZES if args.quick else CUDA_SIZES
    if args.sizes is None:
        args.sizes = quick if args.quick else sizes
    if args.repeat is None:
        args.repeat = 5 if args.quick else 21
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return args


def arguments(description: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """``bench_svd`` / ``bench_eigh``'s command line."""
    p = parser(description)
    p.add_argument(
        "--backend", default="torch", help='pyspectral backend (default "torch")'
    )
    p.add_argument(
        "--device",
        type=device,
        default=torch.device("cpu"),
        help=f"cpu (default) or cuda; on cuda the default sizes are {CUDA_SIZES} "
        f"({CUDA_QUICK_SIZES} with --quick)",
    )
    return finish(p.parse_args(argv))
