"""Top-k SVD as the gap at k closes: forward + backward time and gradient
error of the default ``ps.svd(A, k=k)``, ``torch.svd_lowrank`` + autograd
and the full path ``ps.svd(A, k=k, method="full")``, on the matrices of
``benchmarks/bench_topk.py`` (a decaying spectrum with ratio
``s_(k+1)/s_k = gap``), k = 32, n = 2048, float64. Gradient error:
``max|g - g_exact| / max|g_exact|`` of ``<U_k V_k^H, W> + sum(S_k^2)``, the
exact gradient being the full path's. Time is the process's CPU time (all
threads), one round per point: on a shared machine wall-clock time measures
the other processes too. The machine is named in the image.

Writes ``topk.png``. ``python docs/figures/fig_topk.py [out_dir]``.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _machine  # noqa: E402

import pyspectral as ps  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
N, K = 2048, 32
GAPS = (0.5, 0.9, 0.99, 0.999)


def bench_topk():
    """benchmarks/bench_topk.py as a module (its matrices and loss)."""
    path = ROOT / "benchmarks" / "bench_topk.py"
    spec = importlib.util.spec_from_file_location("bench_topk", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(fn, A, W):
    """One forward + backward: (CPU seconds of this process, gradient)."""
    X = A.clone().requires_grad_()
    t = time.process_time()
    U, S, Vh = fn(X)
    bench_topk_loss(U, S, Vh, W).backward()
    return time.process_time() - t, X.grad


def bench_topk_loss(U, S, Vh, W):
    return ((U @ Vh) * W).sum() + (S**2).sum()  # as bench_topk.loss


def measure() -> dict:
    """method -> (times, errors; None for the exact full path) over GAPS."""
    bt = bench_topk()
    fns = {
        "ps.svd(A, k=32) (default)": lambda X: ps.svd(X, k=K),
        "torch.svd_lowrank(q=42, niter=4)": bt.lowrank(K),
    }
    W = bt.weights(N)
    out = {name: ([], []) for name in [*fns, "full: ps.svd(A, k=32, method='full')"]}
    for gap in GAPS:
        A = bt.gap_matrix(N, K, gap)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t, exact = run(lambda X: ps.svd(X, k=K, method="full"), A, W)
            out["full: ps.svd(A, k=32, method='full')"][0].append(t)
            for name, fn in fns.items():
                t, g = run(fn, A, W)
                out[name][0].append(t)
                out[name][1].append(bt.err(g, exact))
    return out


def main(out_dir: Path) -> Path:
    t0 = time.perf_counter()
    data = measure()
    x = list(range(len(GAPS)))
    styles = {
        "default": ("tab:blue", "s-"),
        "lowrank": ("tab:orange", "o-"),
        "full": ("tab:red", "^-"),
    }
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, (times, errs) in data.items():
        key = next(k for k in styles if k in name)
        color, style = styles[key]
        ax_t.plot(x, times, style, color=color, label=name)
        if errs:
            ax_e.semilogy(
                x, [max(e, 1e-16) for e in errs], style, color=color, label=name
            )
            for i, e in zip(x, errs):
                if e == 0:  # auto took the full path: the same gradient
                    ax_e.annotate(
                        "0 (full path)",
                        (i, 1e-16),
                        fontsize=7,
                        textcoords="offset points",
                        xytext=(-20, 6),
                    )
    for ax in (ax_t, ax_e):
        ax.set_xticks(x)
        ax.set_xticklabels([str(g) for g in GAPS])
        ax.set_xlabel("$s_{k+1}/s_k$ (the gap at k closes to the right)")
        ax.grid(True, alpha=0.3)
    ax_t.set_ylabel("forward + backward, CPU time (s)")
    ax_t.set_ylim(bottom=0)
    ax_e.set_ylabel("gradient error vs the full path")
    ax_t.legend(fontsize=8, loc="center right")
    ax_e.legend(fontsize=8, loc="center right")
    fig.suptitle(
        f"top-{K} of {N}x{N} float64, one round each; measured on "
        f"{_machine.describe()}",
        fontsize=9,
    )
    fig.tight_layout()
    out = _machine.save(fig, Path(out_dir) / "topk.png")
    plt.close(fig)
    print(f"fig_topk: measured in {time.perf_counter() - t0:.0f} s")
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent))
