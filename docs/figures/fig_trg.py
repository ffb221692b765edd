"""The differentiable TRG of ``examples/trg_ising.py`` across the transition:
``ln Z / N`` against Onsager's, the internal energy ``u`` and the specific
heat ``c`` against the temperature ``T = 1/K``, by autograd through ``ps.svd``
(``u`` by one backward, ``c`` by forward over reverse), by central finite
differences of ``ln Z / N`` and from Onsager's solution (``ln Z / N`` and
``u`` in closed form; ``c`` as the numerical derivative of Onsager's ``u``,
which diverges like ``ln|T - T_c|``). Where autograd through
``torch.linalg.svd`` (the same run, the same truncation) gives NaN for
``u``, a red cross sits on the axis of the energy panel.

The SVDs are cut by ``ps.svd(M, k=chi, rtol=eps**0.75, multiplets="down",
return_error=True)``; the largest relative truncation error over the run's
splits is drawn too (right panel of the first row, on the ``ln Z`` axis).

Writes ``trg.png``. ``python docs/figures/fig_trg.py [out_dir]`` (chi = 8,
16 steps, 10 temperatures: about a minute).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHI, STEPS = 8, 16
TEMPERATURES = tuple(1.5 + 0.25 * i for i in range(9))


def example():
    """examples/trg_ising.py as a module."""
    path = ROOT / "examples" / "trg_ising.py"
    spec = importlib.util.spec_from_file_location("trg_ising", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def onsager_c(trg, K: float, h: float = 1e-5) -> float:
    """``c = K**2 d^2(ln Z/N)/dK^2 = -K**2 du/dK`` from Onsager's ``u`` by a
    central difference (step ``h``; ``u`` is smooth for ``K != K_c``)."""
    du = (trg.onsager_energy(K + h) - trg.onsager_energy(K - h)) / (2 * h)
    return -(K**2) * du


def measure(
    temperatures: Sequence[float] = TEMPERATURES,
    chi: int = CHI,
    steps: int = STEPS,
) -> dict[str, list[float]]:
    """Per temperature (``T_c`` added): the example's observables, finite
    differences, Onsager's values, torch.linalg's ``u`` and the largest
    relative truncation error."""
    trg = example()
    Ts = sorted({*temperatures, 1 / trg.K_CRITICAL})
    keys = ("T", "lnz_err", "u", "u_fd", "u_onsager", "u_torch", "c", "c_fd")
    data: dict[str, list[float]] = {k: [] for k in (*keys, "c_onsager", "trunc")}
    for T in Ts:
        K = 1 / T
        errors: list[float] = []
        f, u, c = trg.observables(K, chi, steps, "down", errors)
        u_fd, c_fd = trg.finite_differences(K, chi, steps)
        row = dict(
            T=T,
            lnz_err=abs(f - trg.onsager_lnz(K, nodes=20000)),
            u=u,
            u_fd=u_fd,
            u_onsager=trg.onsager_energy(K),
            u_torch=trg.torch_energy(K, chi, steps),
            c=c,
            c_fd=c_fd,
            c_onsager=math.nan if K == trg.K_CRITICAL else onsager_c(trg, K),
            trunc=max(errors),
        )
        for k, v in row.items():
            data[k].append(v)
        print(f"fig_trg: T = {T:.3f} done", file=sys.stderr, flush=True)
    data["chi"], data["steps"] = [chi], [steps]
    return data


def draw(data: dict[str, list[float]], out_dir: Path) -> Path:
    T = data["T"]
    chi, steps = data["chi"][0], data["steps"][0]
    Tc = 2 / math.log(1 + math.sqrt(2))
    fig, (ax_f, ax_u, ax_c) = plt.subplots(1, 3, figsize=(12, 3.6))
    ax_f.semilogy(
        T,
        [max(e, 1e-16) for e in data["lnz_err"]],
        "o-",
        ms=4,
        color="tab:blue",
        label="|ln Z/N (TRG) - Onsager|",
    )
    ax_f.semilogy(
        T,
        data["trunc"],
        "s--",
        ms=3,
        color="tab:gray",
        label="largest relative truncation error",
    )
    ax_f.set_ylabel("ln Z / N error; truncation error")
    trg = example()
    grid = [T[0] + (T[-1] - T[0]) * i / 400 for i in range(401)]
    ax_u.plot(
        grid,
        [trg.onsager_energy(1 / t) for t in grid],
        "-",
        color="black",
        lw=1,
        label="Onsager",
    )
    ax_u.plot(
        T,
        data["u"],
        "o",
        ms=5,
        mfc="none",
        color="tab:blue",
        label="autograd through ps.svd",
    )
    ax_u.plot(
        T,
        data["u_fd"],
        "+",
        ms=6,
        color="tab:orange",
        label="central finite differences",
    )
    nans = [t for t, v in zip(T, data["u_torch"]) if math.isnan(v)]
    bottom = min(data["u_onsager"]) - 0.15
    ax_u.plot(
        nans,
        [bottom] * len(nans),
        "x",
        ms=6,
        mew=1.5,
        color="tab:red",
        clip_on=False,
        label=f"torch.linalg.svd: NaN ({len(nans)}/{len(T)})",
    )
    ax_u.set_ylim(bottom=bottom)
    ax_u.set_ylabel("energy per site u")
    ok = [t for t in grid if abs(t - Tc) > 2e-3]  # c diverges at T_c
    ax_c.plot(
        ok,
        [onsager_c(trg, 1 / t) for t in ok],
        "-",
        color="black",
        lw=1,
        label="Onsager (dK of u, numerically)",
    )
    ax_c.plot(
        T,
        data["c"],
        "o",
        ms=5,
        mfc="none",
        color="tab:blue",
        label="autograd (forward over reverse)",
    )
    ax_c.plot(
        T,
        data["c_fd"],
        "+",
        ms=6,
        color="tab:orange",
        label="central finite differences",
    )
    ax_c.set_ylabel("specific heat c")
    for ax in (ax_f, ax_u, ax_c):
        ax.axvline(Tc, color="gray", lw=0.8, ls=":")
        ax.set_xlabel("temperature T = 1/K  (dotted: $T_c$)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(
        f"2D Ising model, Levin-Nave TRG, chi = {chi}, {steps} steps "
        f"($2^{{{steps}}}$ sites), float64; ps.svd(M, k=chi, rtol=eps**0.75, "
        "multiplets='down')",
        fontsize=9,
    )
    fig.tight_layout()
    out = _machine.save(fig, Path(out_dir) / "trg.png")
    plt.close(fig)
    return out


def main(out_dir: Path) -> Path:
    t0 = time.perf_counter()
    out = draw(measure(), out_dir)
    print(f"fig_trg: measured in {time.perf_counter() - t0:.0f} s")
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent))
