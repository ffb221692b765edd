"""Forward+backward time of ``pyspectral.svd`` vs ``torch.linalg.svd``.

    python benchmarks/bench_svd.py [--sizes 64,256,4096x8] [--repeat 21]
        [--threads N] [--quick]

Loss ``sum(S) + <U Vh, W>``: gauge invariant, with cotangents on U, S and Vh.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
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

    return run


def main(argv: Sequence[str] | None = None) -> None:
    args = _timing.arguments("pyspectral.svd vs torch.linalg.svd", argv)
    g = torch.Generator().manual_seed(0)
    rows = []
    for size in args.sizes.split(","):
        batch, n = _timing.parse_size(size)
        shape = (batch, n, n) if batch else (n, n)
        A = torch.randn(shape, generator=g, dtype=torch.float64)
        W = torch.randn(shape, generator=g, dtype=torch.float64)
        times = _timing.interleaved(
            {
                "torch": step(lambda A: torch.linalg.svd(A, full_matrices=False), A, W),
                "pyspectral": step(lambda A: ps.svd(A, backend=args.backend), A, W),
            },
            args.repeat,
        )
        rows.append(
            (_timing.label(batch, n), *_timing.summary(times, "torch", "pyspectral"))
        )
    _timing.report("svd", rows)


if __name__ == "__main__":
    main()
