"""Forward+backward time of pyspectral compiled (``torch.compile(fullgraph=True)``,
its calls as the custom operators of ``pyspectral/_ops.py``) against eager
mode and ``torch.linalg``, in one run.

    python benchmarks/bench_compile.py [--sizes 64,256] [--repeat 21]
        [--threads N] [--quick]

The losses of ``bench_svd.py`` / ``bench_eigh.py`` (``sum(S) + <U Vh, W>``;
``sum(w) + <V diag(w) V^H, W>``), each as a function of ``A`` compiled once
(Inductor, the default backend; the compile time is not counted), interleaved
with its eager versions. Ratios against ``torch.linalg`` eager.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import pyspectral as ps  # noqa: E402


def svd_loss(svd):
    def loss(A, W):
        U, S, Vh = svd(A)
        return S.sum() + (U @ Vh * W).sum()

    return loss


def eigh_loss(eigh):
    def loss(A, W):
        w, V = eigh(A)
        return w.sum() + ((V * w.unsqueeze(-2)) @ V.mH * W).sum()

    return loss


OPS = {
    "svd": (
        svd_loss(lambda A: torch.linalg.svd(A, full_matrices=False)),
        svd_loss(ps.svd),
        lambda A: A,
    ),
    "eigh": (
        eigh_loss(torch.linalg.eigh),
        eigh_loss(ps.eigh),
        lambda A: A + A.mT,
    ),
}


def step(loss, A0: torch.Tensor, W: torch.Tensor):
    def run() -> None:
        A = A0.detach().requires_grad_(True)
        loss(A, W).backward()

    return run


def main(argv: Sequence[str] | None = None) -> int:
    p = _timing.parser(
        "pyspectral compiled vs eager vs torch.linalg", sizes="64,256", quick="16"
    )
    args = _timing.finish(p.parse_args(argv), sizes="64,256", quick="16")
    columns = ["op", "n", "torch eager", "ps eager", "ps compiled", "torch compiled"]
    table = _timing.Table(
        f"float64, forward+backward, median ms (ratio to torch.linalg eager); "
        f"torch {torch.__version__}, {_timing.device_name(torch.device('cpu'))}",
        columns,
        "llrrrr",
    )
    g = torch.Generator().manual_seed(0)
    for name, (torch_loss, ps_loss, prepare) in OPS.items():
        for size in args.sizes.split(","):
            _, n = _timing.parse_size(size)
            A = prepare(torch.randn(n, n, dtype=torch.float64, generator=g))
            W = torch.randn(n, n, dtype=torch.float64, generator=g)
            fns = {
                "torch eager": step(torch_loss, A, W),
                "ps eager": step(ps_loss, A, W),
                "ps compiled": step(torch.compile(ps_loss, fullgraph=True), A, W),
                "torch compiled": step(torch.compile(torch_loss, fullgraph=True), A, W),
            }
            times = _timing.interleaved(
                fns, args.repeat, what=f"{name} {n}x{n} compiled and eager"
            )
            cells = [name, f"{n}x{n}"]
            for key in columns[2:]:
                t, r = _timing.summary(times, "torch eager", key)[1:]
                cells.append(f"{1e3 * t:.3f} ({r:.2f})")
            table.row(cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
