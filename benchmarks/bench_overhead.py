"""Where the per-call time of ``ps.svd`` / ``ps.eigh`` over ``torch.linalg``
goes (native backend, float64, forward+backward of bench_svd's and
bench_eigh's losses).

    python benchmarks/bench_overhead.py [--sizes 4,64,16x8] [--op svd,eigh]
        [--repeat 15]

Thread CPU time per call in us, one torch thread: each row is the minimum over
``--repeat`` rounds of the mean over many calls, which other processes on a
busy machine barely move (wall-clock ratios are bench_svd's and bench_eigh's
business). At ``n = 4`` LAPACK costs next to nothing, so the difference
between the first two rows is the per-call overhead itself. Rows:

- ``torch.linalg``, ``pyspectral``: forward+backward; ``overhead``: the
  difference;
- the forward alone (input requiring grad) and the backward alone
  (``torch.autograd.grad`` on a kept graph);
- ``Function round trip``: fwd+bwd of ``A.clone()`` in a Python
  ``autograd.Function`` (called as pyspectral calls its Functions; backward:
  the cotangent) minus torch's own ``A.clone()`` (a C++ node): what the
  Python layer of a Function costs per call, the floor under pyspectral's
  overhead;
- ``torch ops in the backward``: the aten operations one backward dispatches
  (counted by a ``TorchDispatchMode``), torch's C++ formula and pyspectral's
  (each costs about 1-2 us of Python and dispatch at small sizes);
- the pieces, each alone (warm caches: inside a backward the same code runs
  slower): the input check, the keyword check, the options, the
  ``inspect`` binding that ``Function.apply`` does per call and
  ``pyspectral._autograd.apply`` skips (on a 2x2 input), and the pullback.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402
import bench_eigh  # noqa: E402
import bench_svd  # noqa: E402

import pyspectral as ps  # noqa: E402
from pyspectral._autograd import apply  # noqa: E402
from pyspectral._settings import Options, options  # noqa: E402
from pyspectral._validation import check_keywords, check_matrix  # noqa: E402
from pyspectral.pullbacks.eigh import eigh_pullback  # noqa: E402
from pyspectral.pullbacks.svd import svd_pullback  # noqa: E402


def cpu_us(fn: Callable[[], object], repeat: int, budget: float = 0.02) -> float:
    """Thread CPU time of one call of ``fn`` in us: the minimum over
    ``repeat`` rounds of the mean over a round of about ``budget`` seconds."""
    for _ in range(3):
        fn()
    start = time.thread_time()
    fn()
    calls = max(1, int(budget / max(time.thread_time() - start, 1e-7)))
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - start) / calls)
    return 1e6 * best


class _Floor(torch.autograd.Function):
    """torch's forward in pyspectral's Function layout, a backward that only
    passes the cotangent of ``Vh`` or ``V`` on (``A`` square: its shape)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A: torch.Tensor, op: str, opts: Options) -> tuple:
        if op == "svd":
            return tuple(torch.linalg.svd(A, full_matrices=False))
        return tuple(torch.linalg.eigh(A))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # noqa: ANN001
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)
        ctx.opts = inputs[2]
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001, ANN002
        ctx.saved_tensors  # noqa: B018 (unpacked as pyspectral's backward does)
        return grads[-1], None, None  # the cotangent of Vh or V: A's shape


class _Clone(torch.autograd.Function):
    """``A.clone()`` as a Python autograd.Function."""

    @staticmethod
    def forward(A: torch.Tensor) -> torch.Tensor:
        return A.clone()

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # noqa: ANN001
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001
        return g


class _Count(TorchDispatchMode):
    """Counts the aten operations dispatched while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops += 1
        return func(*args, **(kwargs or {}))


def ops_in(fn: Callable[[], object]) -> int:
    """How many aten operations one call of ``fn`` dispatches."""
    with _Count() as count:
        fn()
    return count.ops


def round_trip(A: torch.Tensor, repeat: int) -> float:
    """us per fwd+bwd of a Python Function's clone over torch's clone."""
    Ar = A.clone().requires_grad_()

    def through(clone: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        return lambda: torch.autograd.grad(clone(Ar).sum(), Ar)

    python = through(lambda X: apply(_Clone, X))
    return cpu_us(python, repeat) - cpu_us(through(torch.clone), repeat)


def rows(op: str, batch: int, n: int, repeat: int) -> list[tuple[str, float]]:
    """``(what, us per call)`` for one size."""
    g = torch.Generator().manual_seed(0)
    bench = bench_svd if op == "svd" else bench_eigh
    A, W = bench.problem(batch, n, g)
    linalg = (
        (lambda X: torch.linalg.svd(X, full_matrices=False))
        if op == "svd"
        else torch.linalg.eigh
    )
    pyspectral = ps.svd if op == "svd" else ps.eigh
    opts = options()
    Ar = A.clone().requires_grad_()
    graphs = {name: f(Ar) for name, f in (("torch", linalg), ("ps", pyspectral))}
    cot = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in graphs["torch"]]
    out = [t.detach() for t in graphs["ps"]]
    if op == "svd":
        pullback = lambda: svd_pullback(*out, *cot, opts)  # noqa: E731
    else:
        pullback = lambda: eigh_pullback(*out, *cot, "L", opts)  # noqa: E731

    def backward(name: str) -> Callable[[], object]:
        return lambda: torch.autograd.grad(graphs[name], Ar, cot, retain_graph=True)

    tiny = torch.eye(2, dtype=A.dtype, requires_grad=True)
    keywords = dict(degeneracy_atol=None, broadening=None, gauge_atol=None)
    uplo = None if op == "svd" else "L"
    t_torch = cpu_us(bench.step(linalg, A, W), repeat)
    t_ps = cpu_us(bench.step(pyspectral, A, W), repeat)
    with torch.no_grad():  # as in a backward
        t_pullback = cpu_us(pullback, repeat)
    return [
        ("torch.linalg fwd+bwd", t_torch),
        ("pyspectral fwd+bwd", t_ps),
        ("overhead", t_ps - t_torch),
        ("forward: torch.linalg", cpu_us(lambda: linalg(Ar), repeat)),
        ("forward: pyspectral", cpu_us(lambda: pyspectral(Ar), repeat)),
        ("backward: torch.linalg", cpu_us(backward("torch"), repeat)),
        ("backward: pyspectral", cpu_us(backward("ps"), repeat)),
        ("Function round trip", round_trip(A, repeat)),
        ("torch ops in the backward: torch.linalg", ops_in(backward("torch"))),
        ("torch ops in the backward: pyspectral", ops_in(backward("ps"))),
        ("input check", cpu_us(lambda: check_matrix(op, Ar, uplo=uplo), repeat)),
        ("keyword check", cpu_us(lambda: check_keywords(op, A, **keywords), repeat)),
        ("options", cpu_us(options, repeat)),
        (
            "Function.apply binding",
            cpu_us(lambda: _Floor.apply(tiny, op, opts), repeat)
            - cpu_us(lambda: apply(_Floor, tiny, op, opts), repeat),
        ),
        ("pullback (warm)", t_pullback),
    ]


def _cell(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="4,64,16x8", help="n or BxN, comma-separated")
    p.add_argument("--op", default="svd,eigh", help="svd, eigh or both")
    p.add_argument("--repeat", type=int, default=15, help="rounds per row")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [_timing.parse_size(s) for s in args.sizes.split(",")]
    for op in args.op.split(","):
        table = _timing.Table(
            f"{op}: thread CPU time per call, us (torch {torch.__version__}, 1 thread)",
            ("", *(_timing.label(b, n) for b, n in sizes)),
        )
        columns = []
        for b, n in sizes:
            _timing.progress(f"measuring {op} {_timing.label(b, n)}...")
            columns.append(rows(op, b, n, args.repeat))
        for i, (what, _) in enumerate(columns[0]):
            table.row([what, *(_cell(c[i][1]) for c in columns)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
