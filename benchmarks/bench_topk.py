"""Top-k SVD: forward+backward time and gradient error of
``ps.svd(A, k, method="randomized")`` against the exact top-k gradient
(``method="full"``, via the full SVD) and against ``torch.svd_lowrank`` +
autograd, measured in one run; then how the randomized gradient degrades as
the gap at k closes.

    python benchmarks/bench_topk.py            # n = 4096, k = 32 (slow: full SVD)
    python benchmarks/bench_topk.py --n 1024   # quicker
"""

from __future__ import annotations

import argparse
import time

import torch

import pyspectral as ps


def matrix(n: int, k: int, gap: float, seed: int = 0) -> torch.Tensor:
    """n x n with s_i = 0.9**i for i < k, then gap * s_{k-1} * 0.9**(i-k+1):
    a decaying spectrum whose ratio s_{k+1}/s_k is ``gap``."""
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(n, dtype=torch.float64)
    s = torch.where(i < k, 0.9**i, gap * 0.9 ** (k - 1) * 0.9 ** (i - k))
    Q1 = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=g)).Q
    Q2 = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=g)).Q
    return (Q1 * s) @ Q2.mT


def loss(U, S, Vh, W):
    return ((U @ Vh) * W).sum() + (S**2).sum()


def run(fn, A, W):
    X = A.clone().requires_grad_()
    t = time.perf_counter()
    U, S, Vh = fn(X)
    loss(U, S, Vh, W).backward()
    return time.perf_counter() - t, X.grad


def lowrank(k):
    def f(X):
        U, S, V = torch.svd_lowrank(X, q=k + 10, niter=4)
        return U[:, :k], S[:k], V[:, :k].mT

    return f


def allocations_of_mn(fn, A) -> int:
    """How many allocations of at least m*n elements one forward+backward of
    ``fn`` makes (torch.profiler, per op), with cotangents given directly so
    that no loss of ours allocates one. The gradient itself is one."""
    from torch.profiler import ProfilerActivity, profile

    X = A.clone().requires_grad_()
    U, S, Vh = fn(X)
    cot = [torch.randn_like(t) for t in (U, S, Vh)]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        U, S, Vh = fn(X)
        torch.autograd.grad((U, S, Vh), X, cot)
    size = A.numel() * A.element_size()
    return sum(e.self_cpu_memory_usage >= size for e in prof.events())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--gap-n", type=int, default=512)
    args = p.parse_args(argv)
    n, k = args.n, args.k
    A = matrix(n, k, gap=0.5)
    W = torch.randn(
        n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    methods = {
        "ps randomized": lambda X: ps.svd(X, k=k, method="randomized"),
        "ps full (exact)": lambda X: ps.svd(X, k=k, method="full"),
        "torch.svd_lowrank": lowrank(k),
    }
    res = {name: run(fn, A, W) for name, fn in methods.items()}
    t_full, g_full = res["ps full (exact)"]
    print(
        f"## top-{k} of {n}x{n} float64, s_(k+1)/s_k = 0.5, "
        f"{torch.get_num_threads()} threads\n"
    )
    print("| method | fwd+bwd time | speed-up vs full | gradient error vs exact |")
    print("|---|---:|---:|---:|")
    for name, (t, g) in res.items():
        err = float((g - g_full).abs().max() / g_full.abs().max())
        print(f"| {name} | {t:.2f} s | {t_full / t:.1f}x | {err:.1e} |")
    count = allocations_of_mn(
        lambda X: ps.svd(X, k=k, method="randomized", gauge="ignore"), A
    )
    print(
        f"\nallocations of >= {n}x{n} elements in randomized fwd+bwd: {count} "
        "(the gradient itself)"
    )
    print(
        f"\n## gradient error of the randomized method vs the gap ({args.gap_n}x"
        f"{args.gap_n}, k = {k})\n"
    )
    print("| s_(k+1)/s_k | randomized | torch.svd_lowrank |")
    print("|---:|---:|---:|")
    for gap in (0.5, 0.9, 0.99, 0.999):
        B = matrix(args.gap_n, k, gap)
        Wb = W[: args.gap_n, : args.gap_n]
        _, exact = run(methods["ps full (exact)"], B, Wb)
        errs = []
        for fn in (methods["ps randomized"], lowrank(k)):
            _, g = run(fn, B, Wb)
            errs.append(float((g - exact).abs().max() / exact.abs().max()))
        print(f"| {gap} | {errs[0]:.1e} | {errs[1]:.1e} |")


if __name__ == "__main__":
    main()
