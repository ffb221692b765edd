"""Forward+backward time of ``pyspectral.svd`` with a truncation rule against
the same call with a fixed ``k`` (issue 17: a rule should cost no more).

    python benchmarks/bench_truncation.py [--sizes 256,512,1024] [--repeat 21]
        [--threads N] [--backend torch|julia] [--device cpu|cuda] [--quick]

On an n x n Gaussian matrix each rule is set to keep the same triplets as
``k = n // 8``: ``rtol`` halfway between ``s_k`` and ``s_(k+1)`` (relative to
``s_1``), ``error_rtol`` halfway between the discarded norms of keeping ``k``
and ``k - 1``. Every call takes the full path (``method="full"``), so that
the difference is the rule's own cost. Loss ``sum(S) + <U Vh, W>`` (plus the
truncation error where it is returned, then compared with the fixed ``k``
returning it too). All calls of a size run interleaved in one process; the
ratio is the median of the per-round ratios to the fixed ``k``. A second
table times the rule's own work alone (the rank from the singular values and
the host read of the common width), which on a shared machine is the robust
measure of its cost: the whole calls differ by the machine's noise.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import pyspectral as ps  # noqa: E402
from pyspectral.forward.truncation import TruncationRule, truncation_rank  # noqa: E402
from pyspectral.truncation import _width  # noqa: E402

SIZES = "256,512,1024"
QUICK_SIZES = "128"


def step(call: Callable, A0: torch.Tensor, W: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        A = A0.detach().requires_grad_(True)
        out = call(A)
        loss = out.S.sum() + (out.U @ out.Vh * W).sum()
        if isinstance(out, ps.TruncatedSVDResult):
            loss = loss + out.error.sum()
        loss.backward()
        _timing.synchronize(A.device)

    return run


def rules(A: torch.Tensor, k: int, backend: str) -> dict[str, Callable]:
    """The calls to compare, each keeping the top ``k`` triplets of ``A``."""
    s = torch.linalg.svdvals(A.cpu()).double()
    rtol = float((s[k - 1] + s[k]) / 2 / s[0])
    tail = torch.linalg.vector_norm
    error_rtol = float((tail(s[k:]) + tail(s[k - 1 :])) / 2 / tail(s))
    # all on the full path: the difference is the rule's own cost (with a k,
    # method="auto" may first try the iteration, which a tolerance alone never does)
    b = dict(backend=backend, method="full")
    return {
        f"k={k}": lambda X: ps.svd(X, k=k, **b),
        "rtol": lambda X: ps.svd(X, rtol=rtol, **b),
        "k, rtol": lambda X: ps.svd(X, k=k + 8, rtol=rtol, **b),
        "error_rtol": lambda X: ps.svd(X, error_rtol=error_rtol, **b),
        "rtol, multiplets='down'": lambda X: ps.svd(
            X, rtol=rtol, multiplets="down", **b
        ),
        f"k={k}, return_error": lambda X: ps.svd(X, k=k, return_error=True, **b),
        "rtol, return_error": lambda X: ps.svd(X, rtol=rtol, return_error=True, **b),
    }


def rows(
    sizes: str, repeat: int, backend: str = "torch", device=None
) -> Iterator[list[str]]:
    """One row per rule and size: size, rule, kept, median ms, ratio to the
    fixed k (of the same kind: with or without the returned error)."""
    g = torch.Generator().manual_seed(0)
    for size in sizes.split(","):
        batch, n = _timing.parse_size(size)
        shape = (batch, n, n) if batch else (n, n)
        A = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
        W = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
        k = max(1, n // 8)
        calls = rules(A[0] if batch else A, k, backend)
        kept = {name: call(A).S.shape[-1] for name, call in calls.items()}
        fns = {name: step(call, A, W) for name, call in calls.items()}
        what = f"truncation {_timing.label(batch, n)} fwd+bwd"
        times = _timing.interleaved(fns, repeat, what=what)
        base, with_error = f"k={k}", f"k={k}, return_error"
        for name in calls:
            ref = with_error if "return_error" in name else base
            t = _timing.summary(times, ref, name)
            yield [
                _timing.label(batch, n),
                name,
                str(kept[name]),
                f"{1e3 * t[1]:.3f}",
                f"{t[2]:.3f}",
            ]


def rule_alone(sizes: str, repeat: int, device=None) -> Iterator[list[str]]:
    """The rank decision alone, per rule: microseconds per call and their
    share of the fixed k's forward+backward (measured here again)."""
    g = torch.Generator().manual_seed(0)
    for size in sizes.split(","):
        batch, n = _timing.parse_size(size)
        shape = (batch, n, n) if batch else (n, n)
        A = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
        W = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
        k = max(1, n // 8)
        S = torch.linalg.svdvals(A)
        s = S if not batch else S[0]
        rtol = float((s[k - 1] + s[k]) / 2 / s[0])
        tail = torch.linalg.vector_norm
        error_rtol = float((tail(s[k:]) + tail(s[k - 1 :])) / 2 / tail(s))
        none = dict(k=None, atol=None, rtol=None, error_atol=None, error_rtol=None)
        picked = {
            "rtol": TruncationRule(**{**none, "rtol": rtol}, multiplets="cut"),
            "error_rtol": TruncationRule(
                **{**none, "error_rtol": error_rtol}, multiplets="cut"
            ),
            "rtol, multiplets='down'": TruncationRule(
                **{**none, "rtol": rtol}, multiplets="down"
            ),
        }

        def decide(rule: TruncationRule, S=S, n=n) -> Callable[[], None]:
            return lambda: _width(truncation_rank(S, rule, None), n)

        def fixed(X: torch.Tensor, k=k) -> ps.SVDResult:
            return ps.svd(X, k=k, method="full")

        fns = {name: decide(rule) for name, rule in picked.items()}
        fns["fixed k, fwd+bwd"] = step(fixed, A, W)
        times = _timing.interleaved(fns, repeat)
        full = statistics.median(times["fixed k, fwd+bwd"])
        for name in picked:
            t = statistics.median(times[name])
            yield [_timing.label(batch, n), name, f"{1e6 * t:.1f}", f"{t / full:.1e}"]


def main(argv: Sequence[str] | None = None) -> int:
    p = _timing.parser(
        "pyspectral.svd: a truncation rule vs a fixed k", SIZES, QUICK_SIZES
    )
    p.add_argument(
        "--backend", default="torch", help='pyspectral backend (default "torch")'
    )
    p.add_argument(
        "--device",
        type=_timing.device,
        default=torch.device("cpu"),
        help="cpu (default) or cuda",
    )
    args = _timing.finish(p.parse_args(argv), SIZES, QUICK_SIZES)
    table = _timing.Table(
        "svd truncation rules: float64, forward+backward, median ms; torch "
        f"{torch.__version__}, {_timing.device_name(args.device)}",
        ("size", "rule", "kept", "ms", "vs fixed k"),
        "llrrr",
    )
    for row in rows(args.sizes, args.repeat, args.backend, args.device):
        table.row(row)
    table = _timing.Table(
        "the rule's own work: the rank from S and the common width, median µs",
        ("size", "rule", "µs", "share of fixed k fwd+bwd"),
        "llrr",
    )
    for row in rule_alone(args.sizes, args.repeat, args.device):
        table.row(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
