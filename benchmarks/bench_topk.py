"""Top-k SVD: forward+backward time and gradient error of the default
``ps.svd(A, k=k)`` (method="auto": the certified iteration, or the full SVD
when the iteration would not pay off) against the exact top-k gradient
(``method="full"``) and against ``torch.svd_lowrank`` + autograd, all in one
run:

1. a spectrum with a gap at k (s_(k+1)/s_k = 0.5, decaying tail), and the
   same gap before a slow tail (0.05 * logspace(0, -5): the hard case for
   subspace iteration, whose rate is s_(p+1)/s_k);
2. no gap: a Gaussian matrix and a slowly decaying spectrum s_i = i**-0.5;
3. the gap closing, s_(k+1)/s_k = 0.5 ... 0.999, default and explicit
   method="randomized" against the full path and torch.svd_lowrank.

    python benchmarks/bench_topk.py              # 4096 / 2048 / 2048, k = 32
    python benchmarks/bench_topk.py --quick      # 1024 / 512 / 512 (smoke test)
    python benchmarks/bench_topk.py --calibrate  # the cost model's constants
    python benchmarks/bench_topk.py --device cuda  # on a GPU: 8192 / 4096 / 4096

Gradient errors are max|g - g_exact| / max|g_exact| for the loss
<U_k V_k^H, W> + sum(S_k^2) (gauge invariant at a gap).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import pyspectral as ps  # noqa: E402

# The device of every matrix (--device); set once by main.
DEVICE = torch.device("cpu")


def seeded(n: int, m: int, seed: int) -> torch.Tensor:
    """Gaussian ``n x m`` from a seeded CPU generator (the same numbers on
    every device), on ``DEVICE``."""
    g = torch.Generator().manual_seed(seed)
    # device="cpu": the generator's, whatever torch's default device is
    return torch.randn(n, m, dtype=torch.float64, generator=g, device="cpu").to(DEVICE)


def with_spectrum(s: torch.Tensor, seed: int = 0) -> torch.Tensor:
    n = s.shape[0]
    g = torch.Generator().manual_seed(seed)
    X1, X2 = (
        torch.randn(n, n, dtype=torch.float64, generator=g, device="cpu") for _ in "12"
    )
    Q1 = torch.linalg.qr(X1.to(DEVICE)).Q
    Q2 = torch.linalg.qr(X2.to(DEVICE)).Q
    return (Q1 * s.to(DEVICE)) @ Q2.mT


def gap_matrix(n: int, k: int, gap: float, seed: int = 0) -> torch.Tensor:
    """s_i = 0.9**i for i < k, then gap * s_(k-1) * 0.9**(i-k): a decaying
    spectrum whose ratio s_(k+1)/s_k is ``gap``."""
    i = torch.arange(n, dtype=torch.float64)
    s = torch.where(i < k, 0.9**i, gap * 0.9 ** (k - 1) * 0.9 ** (i - k))
    return with_spectrum(s, seed)


def slow_tail_matrix(n: int, k: int, seed: int = 0) -> torch.Tensor:
    """s = logspace(0, -1, k) for the top k (down to s_k = 0.1), then
    0.05 * logspace(0, -5, n - k): s_(k+1)/s_k = 0.5 before a tail that
    decays by 1e-5 over all of it (0.997 per value at n = 4096)."""
    head = torch.logspace(0, -1, k, dtype=torch.float64)
    tail = 0.05 * torch.logspace(0, -5, n - k, dtype=torch.float64)
    return with_spectrum(torch.cat([head, tail]), seed)


def slow_matrix(n: int) -> torch.Tensor:
    """s_i = (i + 1)**-0.5: no gap anywhere, s_(k+1)/s_k = 0.985 at k = 32."""
    return with_spectrum(torch.arange(1, n + 1, dtype=torch.float64) ** -0.5)


def gaussian(n: int) -> torch.Tensor:
    return seeded(n, n, 0)


def loss(U, S, Vh, W):
    return ((U @ Vh) * W).sum() + (S**2).sum()


def lowrank(k):
    def f(X):
        U, S, V = torch.svd_lowrank(X, q=k + 10, niter=4)
        return U[:, :k], S[:k], V[:, :k].mT

    return f


def methods(k: int) -> dict:
    return {
        "default": lambda X: ps.svd(X, k=k),
        "randomized": lambda X: ps.svd(X, k=k, method="randomized"),
        "full": lambda X: ps.svd(X, k=k, method="full"),
        "svd_lowrank": lowrank(k),
    }


def run(fn, A, W):
    """One forward + backward: (seconds, gradient)."""
    X = A.clone().requires_grad_()
    _timing.synchronize(X.device)
    t = time.perf_counter()
    U, S, Vh = fn(X)
    loss(U, S, Vh, W).backward()
    _timing.synchronize(X.device)
    return time.perf_counter() - t, X.grad


def measure(fns: dict, A, W, rounds: int) -> dict:
    """Median time and gradient of each function over ``rounds`` rounds, run
    alternately (the order flips every round) so drifts hit all alike."""
    names, times, grads = list(fns), {n: [] for n in fns}, {}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t, grads[name] = run(fns[name], A, W)
            times[name].append(t)
    return {n: (statistics.median(times[n]), grads[n]) for n in names}


def err(g, exact) -> float:
    return float((g - exact).abs().max() / exact.abs().max())


def weights(n: int) -> torch.Tensor:
    return seeded(n, n, 1)


def table_gap(n: int, k: int, rounds: int, slow_tail: bool = False) -> None:
    A = slow_tail_matrix(n, k) if slow_tail else gap_matrix(n, k, 0.5)
    W = weights(n)
    fns = methods(k)
    full = measure({"full": fns.pop("full")}, A, W, 1)["full"]
    res = measure(fns, A, W, rounds)
    what = "then 0.05 logspace(0, -5)" if slow_tail else "decaying tail"
    print(f"\n### 1{'b' if slow_tail else ''}. top-{k} of {n}x{n}, ", end="")
    print(f"s_(k+1)/s_k = 0.5, {what}\n")
    print("| method | fwd+bwd | speed-up vs full | gradient error |")
    print("|---|---:|---:|---:|")
    print(f"| full | {full[0]:.2f} s | 1.0x | exact |")
    for name, (t, g) in res.items():
        print(f"| {name} | {t:.2f} s | {full[0] / t:.1f}x | {err(g, full[1]):.1e} |")
    t_ps, t_lr = res["default"][0], res["svd_lowrank"][0]
    print(f"\ndefault vs torch.svd_lowrank + autograd: {t_lr / t_ps:.2f}x faster")


def table_no_gap(n: int, k: int, rounds: int) -> None:
    print(f"\n### 2. no gap at k: top-{k} of {n}x{n}\n")
    print("| matrix | default | full | default / full | gradient error |")
    print("|---|---:|---:|---:|---:|")
    W = weights(n)
    fns = methods(k)
    for name, A in (("Gaussian", gaussian(n)), ("s_i = i^-1/2", slow_matrix(n))):
        res = measure({m: fns[m] for m in ("default", "full")}, A, W, rounds)
        (t, g), (t0, g0) = res["default"], res["full"]
        print(f"| {name} | {t:.2f} s | {t0:.2f} s | {t / t0:.2f} | {err(g, g0):.1e} |")


def table_closing(n: int, k: int) -> None:
    print(f"\n### 3. the gap closing: top-{k} of {n}x{n}\n")
    print(
        "| s_(k+1)/s_k | default | randomized | full | svd_lowrank | "
        "error default | error randomized | error svd_lowrank |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    W = weights(n)
    for gap in (0.5, 0.9, 0.99, 0.999):
        A = gap_matrix(n, k, gap)
        res = measure(methods(k), A, W, 1)
        exact = res["full"][1]
        t = {m: f"{v[0]:.2f} s" for m, v in res.items()}
        e = {m: f"{err(v[1], exact):.1e}" for m, v in res.items()}
        print(
            f"| {gap} | {t['default']} | {t['randomized']} | {t['full']} | "
            f"{t['svd_lowrank']} | {e['default']} | {e['randomized']} | "
            f"{e['svd_lowrank']} |"
        )


def calibrate() -> None:
    """The constants of pyspectral/forward/topk.py's cost model: the time of a
    full SVD / eigh with vectors, in units of one product A @ X (p = 32)
    counted as 2 m n p flops."""

    def best(f, r=3):
        f()
        ts = []
        for _ in range(r):
            _timing.synchronize(DEVICE)
            t = time.perf_counter()
            f()
            _timing.synchronize(DEVICE)
            ts.append(time.perf_counter() - t)
        return min(ts)

    print("| n | t(A @ X), p = 32 | svd / (n^3 matmul flops) | eigh / (...) |")
    print("|---:|---:|---:|---:|")
    for n in (256, 512, 1024, 2048):
        A = gaussian(n)
        X = seeded(n, 32, 2)
        t_mm = best(lambda A=A, X=X: (X.mT @ A.mT).mT, 5)
        per_flop = t_mm / (2 * n * n * 32)
        t_svd = best(lambda A=A: torch.linalg.svd(A, full_matrices=False), 1)
        t_eigh = best(lambda A=A: torch.linalg.eigh(A + A.mT), 1)
        print(
            f"| {n} | {1e3 * t_mm:.2f} ms | {t_svd / per_flop / n**3:.1f} | "
            f"{t_eigh / per_flop / n**3:.1f} |"
        )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--k", type=int, default=32)
    # default sizes: 4096 / 2048 / 2048 on a CPU, 8192 / 4096 / 4096 on a GPU
    p.add_argument("--n-gap", type=int, default=None)
    p.add_argument("--n-nogap", type=int, default=None)
    p.add_argument("--n-closing", type=int, default=None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="small sizes, one round")
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--device",
        type=_timing.device,
        default=torch.device("cpu"),
        help="cpu (default) or cuda; on cuda the default sizes are 8192 / 4096 / 4096",
    )
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    gpu = DEVICE.type == "cuda"
    args.n_gap = args.n_gap or (8192 if gpu else 4096)
    args.n_nogap = args.n_nogap or (4096 if gpu else 2048)
    args.n_closing = args.n_closing or (4096 if gpu else 2048)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.calibrate:
        calibrate()
        return
    if args.quick:
        args.n_gap, args.n_nogap, args.n_closing, args.rounds = 1024, 512, 512, 1
    print(
        f"torch {torch.__version__}, {_timing.device_name(DEVICE)}, float64, "
        "forward + backward, median of the rounds"
    )
    table_gap(args.n_gap, args.k, args.rounds)
    table_gap(args.n_gap, args.k, args.rounds, slow_tail=True)
    table_no_gap(args.n_nogap, args.k, args.rounds)
    table_closing(args.n_closing, args.k)


if __name__ == "__main__":
    main()
