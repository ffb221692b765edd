"""eig_topk against torch.linalg.eig and SciPy's ARPACK.

A dense n x n non-Hermitian matrix (default n = 2048: a Gaussian bulk of
radius 1 plus six outliers at 2..3, so the k = 6 wanted pairs have a gap),
k = 6, which="LM", float64, the same relative tolerance for pyspectral and
ARPACK (``scipy.sparse.linalg.eigs(tol=...)``). Timed: eig_topk's forward,
its forward + backward (a gauge-invariant loss; the backward alone is the
``.backward()`` call inside it, ratio to the forward), ARPACK's forward on the
same matrix, and torch.linalg.eig forward + backward of the same loss on the
six pairs (once: it takes tens of seconds). Medians of ``--repeat`` runs.

    python benchmarks/bench_eig_topk.py [--n 2048] [--repeat 3] [--tol 1e-10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence

import torch

import pyspectral as ps


def matrix(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, dtype=torch.float64, generator=g) / n**0.5
    outliers = torch.linspace(3.0, 2.0, 6, dtype=torch.float64)
    B = torch.randn(n, 6, dtype=torch.float64, generator=g) / n**0.5
    # a rank-6 part with eigenvalues at the outliers (non-normal: B B^T is not I)
    return A + B @ torch.diag(outliers) @ torch.linalg.pinv(B)


def loss(L: torch.Tensor, V: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (L.abs() ** 2).sum() + ((V.conj() * c[:, None]).sum(0).abs() ** 2).sum()


def timed(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--k", type=int, default=6)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tol", type=float, default=1e-10)
    p.add_argument("--skip-torch", action="store_true", help="no torch.linalg.eig")
    a = p.parse_args(argv)
    A = matrix(a.n)
    c = torch.randn(
        a.n, dtype=torch.complex128, generator=torch.Generator().manual_seed(1)
    )
    info = ps.eig_topk(A, a.k, tol=a.tol, return_info=True)[2]

    def fwd():
        ps.eig_topk(A, a.k, tol=a.tol)

    backward_times = []

    def fwd_bwd():
        X = A.clone().requires_grad_()
        L, V = ps.eig_topk(X, a.k, tol=a.tol)
        out = loss(L, V, c)
        t = time.perf_counter()
        out.backward()
        backward_times.append(time.perf_counter() - t)

    t_fwd = timed(fwd, a.repeat)
    t_both = timed(fwd_bwd, a.repeat)
    t_bwd = statistics.median(backward_times)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"n = {a.n}, k = {a.k}, which = LM, tol = {a.tol:g}; eig_topk: "
          f"{info.products} products, {info.restarts} restarts")  # fmt: skip
    print()
    print("| what | seconds | ratio |")
    print("|---|---:|---:|")
    print(f"| eig_topk forward | {t_fwd:.3f} | 1 |")
    print(f"| eig_topk forward + backward | {t_both:.3f} | {t_both / t_fwd:.2f} |")
    print(f"| eig_topk backward alone (the .backward() call) | {t_bwd:.3f} | "
          f"{t_bwd / t_fwd:.2f} |")  # fmt: skip
    try:
        import numpy as np
        from scipy.sparse.linalg import eigs
    except ImportError:
        print("| ARPACK (scipy eigs) | skipped: scipy is not installed | |")
    else:
        An = A.numpy()
        v0 = np.ones(a.n)
        t_arpack = timed(
            lambda: eigs(An, k=a.k, which="LM", tol=a.tol, v0=v0), a.repeat
        )
        print(f"| ARPACK (scipy eigs) forward | {t_arpack:.3f} | "
              f"eig_topk / ARPACK {t_fwd / t_arpack:.2f} |")  # fmt: skip
    if not a.skip_torch:
        sys.stderr.write(f"measuring torch.linalg.eig {a.n}x{a.n} fwd+bwd (once)...\n")

        def torch_both():
            X = A.clone().requires_grad_()
            L, V = torch.linalg.eig(X)
            idx = torch.argsort(L.abs(), descending=True)[: a.k]
            loss(L[idx], V[:, idx], c).backward()

        t_torch = timed(torch_both, 1)
        print(f"| torch.linalg.eig forward + backward | {t_torch:.3f} | "
              f"torch / eig_topk {t_torch / t_both:.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
