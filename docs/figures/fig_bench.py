"""pyspectral / torch.linalg time ratio (forward + backward, float64) against
the matrix size, for svd and eigh, from the benchmark scripts
(``benchmarks/bench_svd.py`` and ``bench_eigh.py``'s ``rows()``).

``main(out_dir)`` plots the measurements stored in
``docs/figures/data/bench_cpu.json``; ``measure()`` (``python
docs/figures/fig_bench.py --measure``, or ``make_figures.py bench
--measure``) re-runs the benchmarks on this machine and stores them there
with the machine's description, which the image shows.

Writes ``bench.png``.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "bench_cpu.json"
SIZES = "64,128,256,512,1024,4096x8"
REPEAT = 21


def _bench(name: str):
    path = ROOT / "benchmarks" / f"bench_{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(sizes: str = SIZES, repeat: int = REPEAT, path: Path = DATA) -> dict:
    """Run the svd and eigh benchmarks; store and return their rows."""
    data = {
        "machine": _machine.describe(),
        "date": f"measured {datetime.date.today().isoformat()}",
        "repeat": repeat,
        "columns": ["size", "t_torch_s", "t_pyspectral_s", "ratio"],
    }
    for op in ("svd", "eigh"):
        rows = []
        for size, t_torch, t_ps, ratio in _bench(op).rows(sizes, repeat):
            rows.append([size, t_torch, t_ps, ratio])
            print(
                f"{op} {size}: torch {t_torch * 1e3:.2f} ms, pyspectral "
                f"{t_ps * 1e3:.2f} ms, ratio {ratio:.2f}",
                flush=True,
            )
        data[op] = rows
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


def main(out_dir: Path) -> Path:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for op, style, color in (("svd", "s-", "tab:blue"), ("eigh", "o-", "tab:orange")):
        square = [r for r in data[op] if " x " not in r[0]]
        batches = [r for r in data[op] if " x " in r[0]]
        n = [int(r[0].split("x")[-1]) for r in square]
        ax.semilogx(n, [r[3] for r in square], style, color=color, label=op, base=2)
        for r in batches:  # a batch of small matrices: its own marker
            ax.annotate(
                f"{op}, batch {r[0]}: {r[3]:.2f}",
                xy=(n[-1], r[3]),
                xytext=(-150, -25 if op == "svd" else -40),
                textcoords="offset points",
                fontsize=7,
                color=color,
            )
    sizes = sorted({int(r[0].split("x")[-1]) for r in data["svd"] if " x " not in r[0]})
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(n) for n in sizes])
    ax.minorticks_off()
    ax.axhline(1.0, color="gray", lw=1, ls="--")
    ax.set_xlabel("n (forward + backward of one n x n matrix)")
    ax.set_ylabel("time ratio pyspectral / torch.linalg")
    top = max(r[3] for op in ("svd", "eigh") for r in data[op])
    ax.set_ylim(0.8, max(1.4, top + 0.1))
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(
        f"float64, median of {data['repeat']} interleaved rounds; "
        f"{data['machine']}\n{data['date']}",
        fontsize=8,
    )
    fig.tight_layout()
    out = _machine.save(fig, Path(out_dir) / "bench.png")
    plt.close(fig)
    return out


if __name__ == "__main__":
    if "--measure" in sys.argv:
        measure()
    out = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(main(Path(out[0]) if out else Path(__file__).parent))
