"""Forward+backward time of ``pyspectral.qr`` / ``lq`` / ``eig`` vs
``torch.linalg.qr`` / ``eig``.

    python benchmarks/bench_factorizations.py [--sizes 64,256,4096x8]
        [--repeat 21] [--threads N] [--backend torch|julia] [--device cpu|cuda]
        [--quick]

Losses with cotangents on both factors: ``<Q, W1> + <R, W2>`` for the QR
(``lq``: torch's is the QR of ``A^H``, transposed), ``<|V|^2, W> + sum
Re(lambda)^2`` for ``eig`` (invariant under the eigenvectors' phases, as
torch's backward requires). ``eig`` is timed up to 512 (its forward alone is
seconds at 1024 on two cores). Each row is printed as soon as it is measured.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import pyspectral as ps  # noqa: E402
from pyspectral.pullbacks.qr import positive_gauge  # noqa: E402

EIG_LARGEST = 512


def qr_step(qr: Callable, A0: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor):
    def run() -> None:
        A = A0.detach().requires_grad_(True)
        Q, R = qr(A)
        ((Q * W1).sum() + (R * W2).sum()).backward()
        _timing.synchronize(A.device)

    return run


def eig_step(eig: Callable, A0: torch.Tensor, W: torch.Tensor):
    def run() -> None:
        A = A0.detach().requires_grad_(True)
        L, V = eig(A)
        ((V.abs() ** 2 * W).sum() + L.real.pow(2).sum()).backward()
        _timing.synchronize(A.device)

    return run


def torch_lq(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    Q, R = torch.linalg.qr(A.mH)
    return R.mH, Q.mH


def rows(
    sizes: str, repeat: int, backend: str = "torch", device=None
) -> Iterator[tuple]:
    """``(op, size, t_torch, t_pyspectral, ratio)`` per operation and size."""
    g = torch.Generator().manual_seed(0)
    for size in sizes.split(","):
        batch, n = _timing.parse_size(size)
        shape = (batch, n, n) if batch else (n, n)

        A, W1, W2 = (
            torch.randn(shape, generator=g, dtype=torch.float64).to(device)
            for _ in range(3)
        )
        cases = {
            "qr": (torch.linalg.qr, lambda A: ps.qr(A, backend=backend)),
            "qr positive": (
                lambda A: positive_gauge(*torch.linalg.qr(A)),
                lambda A: ps.qr(A, positive=True, backend=backend),
            ),
            "lq": (torch_lq, lambda A: ps.lq(A, backend=backend)),
        }
        for op, (theirs, ours) in cases.items():
            times = _timing.interleaved(
                {
                    "torch": qr_step(theirs, A, W1, W2),
                    "pyspectral": qr_step(ours, A, W1, W2),
                },
                repeat,
                what=f"{op} {_timing.label(batch, n)} fwd+bwd",
            )
            yield (
                op,
                _timing.label(batch, n),
                *_timing.summary(times, "torch", "pyspectral"),
            )
        if n > EIG_LARGEST:
            continue
        times = _timing.interleaved(
            {
                "torch": eig_step(torch.linalg.eig, A, W1),
                "pyspectral": eig_step(lambda A: ps.eig(A, backend=backend), A, W1),
            },
            repeat,
            what=f"eig {_timing.label(batch, n)} fwd+bwd",
        )
        yield (
            "eig",
            _timing.label(batch, n),
            *_timing.summary(times, "torch", "pyspectral"),
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = _timing.arguments("pyspectral.qr / lq / eig vs torch.linalg", argv)
    table = _timing.Table(
        f"qr, lq, eig: float64, forward+backward, median ms; torch "
        f"{torch.__version__}, {_timing.device_name(args.device)}",
        ["op", "size", "torch.linalg", "pyspectral", "ratio"],
        "llrrr",
    )
    for op, *row in rows(args.sizes, args.repeat, args.backend, args.device):
        table.row([op, *_timing.versus_torch_row(*row)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
