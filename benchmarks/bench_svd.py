"""Forward+backward time of ``pyspectral.svd`` vs ``torch.linalg.svd``.

    python benchmarks/bench_svd.py [--sizes 64,256,4096x8] [--repeat 21]
        [--threads N] [--backend torch|julia] [--device cpu|cuda] [--quick]

Loss ``sum(S) + <U Vh, W>``: gauge invariant, with cotangents on U, S and Vh.
Each row is printed as soon as it is measured.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import pyspectral as ps  # noqa: E402


def step(svd, A0: torch.Tensor, W: torch.Tensor):
    def run() -> None:
        A = A0.detach().requires_grad_(True)
        U, S, Vh = svd(A)
        (S.sum() + (U @ Vh * W).sum()).backward()
        _timing.synchronize(A.device)

    return run


def problem(batch: int, n: int, g: torch.Generator, device=None) -> tuple:
    """``(A, W)``: the matrix (or batch) and the loss weights, drawn on the CPU
    (the same numbers on every device) and moved to ``device``."""
    shape = (batch, n, n) if batch else (n, n)
    A = torch.randn(shape, generator=g, dtype=torch.float64, device="cpu")
    W = torch.randn(shape, generator=g, dtype=torch.float64, device="cpu")
    return A.to(device), W.to(device)


def rows(
    sizes: str, repeat: int, backend: str = "torch", device=None
) -> Iterator[tuple]:
    """``(size, t_torch, t_pyspectral, ratio)`` for each size, one at a time
    (measured when asked for)."""
    g = torch.Generator().manual_seed(0)
    for size in sizes.split(","):
        batch, n = _timing.parse_size(size)
        A, W = problem(batch, n, g, device)
        times = _timing.interleaved(
            {
                "torch": step(lambda A: torch.linalg.svd(A, full_matrices=False), A, W),
                "pyspectral": step(
                    lambda A: ps.svd(A, backend=backend, full_matrices=False), A, W
                ),
            },
            repeat,
            what=f"svd {_timing.label(batch, n)} fwd+bwd",
        )
        yield (_timing.label(batch, n), *_timing.summary(times, "torch", "pyspectral"))


def main(argv: Sequence[str] | None = None) -> int:
    args = _timing.arguments("pyspectral.svd vs torch.linalg.svd", argv)
    table = _timing.versus_torch("svd", args.device)
    for row in rows(args.sizes, args.repeat, args.backend, args.device):
        table.row(_timing.versus_torch_row(*row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
