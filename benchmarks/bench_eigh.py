"""Forward+backward time of ``pyspectral.eigh`` vs ``torch.linalg.eigh``.

    python benchmarks/bench_eigh.py [--sizes 64,256,4096x8] [--repeat 21]
        [--threads N] [--quick]

Loss ``<V diag(tanh(w)) V^H, W>``: gauge invariant, with cotangents on the
eigenvalues and the eigenvectors.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import pyspectral as ps  # noqa: E402


def step(eigh, A0: torch.Tensor, W: torch.Tensor):
    def run() -> None:
        A = A0.detach().requires_grad_(True)
        w, V = eigh(A)
        ((V * torch.tanh(w).unsqueeze(-2)) @ V.mH * W).sum().backward()

    return run


def main(argv: Sequence[str] | None = None) -> None:
    args = _timing.arguments("pyspectral.eigh vs torch.linalg.eigh", argv)
    g = torch.Generator().manual_seed(0)
    rows = []
    for size in args.sizes.split(","):
        batch, n = _timing.parse_size(size)
        shape = (batch, n, n) if batch else (n, n)
        X = torch.randn(shape, generator=g, dtype=torch.float64)
        A = (X + X.mT) / 2
        W = torch.randn(shape, generator=g, dtype=torch.float64)
        times = _timing.interleaved(
            {
                "torch": step(torch.linalg.eigh, A, W),
                "pyspectral": step(lambda A: ps.eigh(A, backend=args.backend), A, W),
            },
            args.repeat,
        )
        rows.append(
            (_timing.label(batch, n), *_timing.summary(times, "torch", "pyspectral"))
        )
    _timing.report("eigh", rows)


if __name__ == "__main__":
    main()
