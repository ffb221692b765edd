"""Regenerate every figure of the docs: run each ``docs/figures/fig_*.py``'s
``main(out_dir)``.

    python docs/figures/make_figures.py             # all figures, into docs/figures
    python docs/figures/make_figures.py gap topk    # only fig_gap.py, fig_topk.py
    python docs/figures/make_figures.py --out /tmp/figs

Needs matplotlib (``pip install -e ".[docs]"``). Figures with timings
(``fig_topk``, ``fig_bench``) name the machine in the image. ``fig_trg``
runs the TRG example of ``examples/trg_ising.py`` at 10 temperatures (chi =
8, 16 steps: about a minute). ``fig_bench``
plots the benchmark data in ``docs/figures/data/``; ``--measure`` re-runs the
benchmarks on this machine first (minutes).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent


def scripts() -> list[Path]:
    """Every figure script, in name order."""
    return sorted(HERE.glob("fig_*.py"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="e.g. gap topk (default: all)")
    p.add_argument("--out", type=Path, default=HERE, help="output folder")
    p.add_argument(
        "--measure",
        action="store_true",
        help="fig_bench: re-run the svd/eigh benchmarks first (minutes)",
    )
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    # This repository's pyspectral, not whichever one the environment
    # installed (an editable install of another checkout, an older wheel):
    # the figures must show the code they document.
    sys.path.insert(0, str(HERE.parent.parent))
    chosen = [s for s in scripts() if not args.names or s.stem[4:] in args.names]
    unknown = set(args.names) - {s.stem[4:] for s in scripts()}
    if unknown:
        have = [s.stem[4:] for s in scripts()]
        p.error(f"no figure script for {sorted(unknown)}; have {have}")
    args.out.mkdir(parents=True, exist_ok=True)
    for path in chosen:
        module = load(path)
        if args.measure and hasattr(module, "measure"):
            module.measure()
        t = time.perf_counter()
        module.main(args.out)
        print(f"{path.name}: {time.perf_counter() - t:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
