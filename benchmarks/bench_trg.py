"""Time per temperature point of the differentiable TRG of
``examples/trg_ising.py`` (issue 17): ``ln Z / N`` forward and the energy
``u = -d(ln Z/N)/dK`` by one backward, through ``ps.svd`` with its truncation
rule and through ``torch.linalg.svd`` cut by the same rule.

    python benchmarks/bench_trg.py [--sizes 16,32] [--steps 16] [--repeat 3]
        [--threads N] [--second] [--quick]

``--sizes`` are bond dimensions chi (the SVDs are chi^2 x chi^2). Both run
interleaved in one process (``_timing.interleaved``); the ratio is the
median of the per-round ratios. torch.linalg's gradient is NaN on this run
(repeated exact zeros in the SVDs); it is timed anyway, and the table says
what each gave. ``--second`` also times pyspectral's specific heat (the
second derivative, forward over reverse as in the example; torch.linalg's
first derivative is already NaN).
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SIZES = "16,32"
QUICK_SIZES = "6"
K = 0.4  # a point of the disordered phase near T_c (T = 2.5)


def example() -> ModuleType:
    """examples/trg_ising.py as a module."""
    path = ROOT / "examples" / "trg_ising.py"
    spec = importlib.util.spec_from_file_location("trg_ising", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def energy_call(trg: ModuleType, chi: int, steps: int, svd) -> Callable[[], float]:
    """One temperature point: ``ln Z / N`` forward, ``u`` by one backward."""

    def run() -> float:
        k = torch.tensor(K, dtype=torch.float64, requires_grad=True)
        f = trg.lnz(k, chi, steps, svd)
        (g,) = torch.autograd.grad(f, k)
        run.u = -g.item()

    return run


def second_call(trg: ModuleType, chi: int, steps: int) -> Callable[[], None]:
    """``(ln Z / N, u, c)`` as the example computes them (forward over
    reverse)."""

    def run() -> None:
        run.u = trg.observables(K, chi, steps)[1]

    return run


def rows(
    sizes: str, steps: int, repeat: int, second: bool = False
) -> Iterator[list[str]]:
    """One row per chi: chi, steps, the two times (median ms), the ratio, the
    energy each gave; with ``second``, pyspectral's forward over reverse."""
    trg = example()
    for size in sizes.split(","):
        chi = int(size)
        fns = {
            "torch.linalg": energy_call(trg, chi, steps, trg.torch_svd),
            "pyspectral": energy_call(trg, chi, steps, None),
        }
        if second:
            fns["pyspectral u, c"] = second_call(trg, chi, steps)
        what = f"TRG chi = {chi}, {steps} steps"
        times = _timing.interleaved(fns, repeat, warmup=1, what=what)
        t_torch, t_ps, r = _timing.summary(times, "torch.linalg", "pyspectral")
        u_torch, u_ps = fns["torch.linalg"].u, fns["pyspectral"].u
        row = [
            str(chi),
            str(steps),
            f"{1e3 * t_torch:.0f}",
            f"{1e3 * t_ps:.0f}",
            f"{r:.2f}",
            "NaN" if math.isnan(u_torch) else f"{u_torch:.7f}",
            f"{u_ps:.7f}",
        ]
        if second:
            row.append(f"{1e3 * statistics.median(times['pyspectral u, c']):.0f}")
        yield row


def main(argv: Sequence[str] | None = None) -> int:
    p = _timing.parser(__doc__.splitlines()[0], SIZES, QUICK_SIZES)
    p.add_argument("--steps", type=int, default=None, help="TRG steps (default 16)")
    p.add_argument(
        "--second",
        action="store_true",
        help="also time pyspectral's u and c (forward over reverse)",
    )
    args = p.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args = _timing.finish(args, SIZES, QUICK_SIZES)
    steps = args.steps or (6 if args.quick else 16)
    columns = ["chi", "steps", "torch.linalg ms", "pyspectral ms", "ratio"]
    columns += ["u torch.linalg", "u pyspectral"]
    if args.second:
        columns.append("pyspectral u and c ms")
    table = _timing.Table(
        f"TRG of the 2D Ising model at K = {K}, one temperature point: ln Z "
        "forward + u by one backward, float64, median ms over "
        f"{args.repeat} rounds; torch {torch.__version__}, "
        f"{_timing.device_name(torch.device('cpu'))}",
        columns,
    )
    for row in rows(args.sizes, steps, args.repeat, args.second):
        table.row(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
