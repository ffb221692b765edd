"""Shared benchmark helpers: interleaved timing and the command line.

Both implementations run in the same process, alternately (the order flips
every round), so that drifts in clock speed or cache state hit both alike; the
reported time of each is its median over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch

DEFAULT_SIZES = "64,256,512,1024,4096x8"
QUICK_SIZES = "64,256,4096x8"


def parse_size(text: str) -> tuple[int, int]:
    """``"256"`` -> one 256x256 matrix; ``"4096x8"`` -> a batch of 4096 8x8."""
    batch, _, n = text.strip().rpartition("x")
    return (int(batch) if batch else 0), int(n)


def label(batch: int, n: int) -> str:
    return f"{batch} x {n}x{n}" if batch else f"{n}x{n}"


def interleaved(
    fns: dict[str, Callable[[], object]], repeat: int, warmup: int = 2
) -> dict[str, list[float]]:
    """Wall times (seconds) of each function over ``repeat`` rounds; in every
    round each function runs once, in an order that flips every round."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeat):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


def summary(times: dict[str, list[float]], base: str, other: str) -> tuple:
    """Median times of ``base`` and ``other``, and the median over rounds of
    their ratio (paired within a round, so slow drifts of the machine cancel)."""
    ratios = [b / a for a, b in zip(times[base], times[other])]
    return (
        statistics.median(times[base]),
        statistics.median(times[other]),
        statistics.median(ratios),
    )


def arguments(description: str, argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--sizes",
        default=None,
        help=f"comma-separated n (square) or BxN (batch of B NxN); default "
        f"{DEFAULT_SIZES}",
    )
    p.add_argument(
        "--repeat", type=int, default=None, help="timed rounds per size (default 21)"
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: all)"
    )
    p.add_argument(
        "--backend", default="torch", help='pyspectral backend (default "torch")'
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"sizes {QUICK_SIZES} and 5 rounds (a smoke test, not a measurement)",
    )
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = QUICK_SIZES if args.quick else DEFAULT_SIZES
    if args.repeat is None:
        args.repeat = 5 if args.quick else 21
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return args


def report(title: str, rows: list[tuple[str, float, float, float]]) -> None:
    """Print a markdown table of median times (ms) and the median ratio."""
    print(
        f"\n{title}: float64, forward+backward, median ms; torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads\n"
    )
    print("| size | torch.linalg | pyspectral | ratio |")
    print("|---|---:|---:|---:|")
    for size, t_torch, t_ps, ratio in rows:
        print(f"| {size} | {1e3 * t_torch:.3f} | {1e3 * t_ps:.3f} | {ratio:.2f} |")
