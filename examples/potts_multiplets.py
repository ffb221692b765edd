"""Kept multiplets: the split with S absorbed, and the 3-state Potts model
=========================================================================

Tensor-network codes split a tensor into two factors with the singular
values absorbed, ``U sqrt(S)`` and ``sqrt(S) V^H``, and contract the bond
between them. At a kept degenerate multiplet (a symmetry's doublet) the
triplets ``U, S, V`` are not differentiable, and no pullback of them alone
is exact for every loss: written by hand from ``ps.svd``'s triplets, the
split's gradient is silently wrong for a loss that breaks the symmetry
behind the multiplet. ``ps.svd(A, absorb="both")`` (``"left"``:
``U S, V^H``; ``"right"``: ``U, S V^H``) returns the two factors with the
exact derivative at every kept multiplet, under every truncation rule.

Part 1 measures a fit ``||L R - B||^2`` of the truncated product to a
random ``B`` at ``S = (3, 2, 2, 1, 0.5, 0.1)`` (a kept doublet) and at an
all-equal spectrum, against finite differences (exact here: the loss is
smooth), through the triplets (``torch.linalg.svd``'s: off, NaN at the all-equal
spectrum; ``ps.svd``'s: finite, off) and through the split.

Part 2 runs the Levin-Nave TRG of the 3-state Potts model, whose S_3
symmetry gives exact doublets in every split, with the splits of
``ps.svd(M, k=chi, rtol=1e-3, multiplets="down", absorb="both")``: at most
``chi`` values, none below ``1e-3 s_1`` (the exact zeros of the first
split, which a perturbation of the tensor would lift), no doublet cut. The
gradient of ``ln Z / N`` with respect to every entry of the site tensor, in
reverse and in forward mode, is checked against finite differences.
``ln Z`` is S_3 invariant, so its cotangent on a doublet is a multiple of
the identity (Schur's lemma) and the kept-multiplet term vanishes there:
for this loss the split written by hand is right too. A loss that breaks
the symmetry (part 1) is where the two differ.

The figure shows the gradient errors of both parts on a log scale.

    python examples/potts_multiplets.py
"""

from __future__ import annotations

import importlib.util
import math

import torch

import pyspectral as ps

F64 = torch.float64
MULTIPLET = [3.0, 2.0, 2.0, 1.0, 0.5, 0.1]  # a doublet, kept by atol=0.3
ALL_EQUAL = [1.0] * 6


def with_spectrum(s: list[float], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    n = len(s)
    Q1 = torch.linalg.qr(torch.randn(n, n, dtype=F64, generator=g)).Q
    Q2 = torch.linalg.qr(torch.randn(n, n, dtype=F64, generator=g)).Q
    return (Q1 * torch.tensor(s, dtype=F64)) @ Q2.mT


def fd_grad(f, x: torch.Tensor, h: float = 1e-5) -> torch.Tensor:
    """``df/dx`` entry by entry, by the fourth-order central stencil."""
    x = x.detach()
    g = torch.zeros_like(x).reshape(-1)
    for i in range(x.numel()):
        e = torch.zeros_like(x).reshape(-1)
        e[i] = h
        e = e.reshape(x.shape)
        g[i] = (8 * (f(x + e) - f(x - e)) - (f(x + 2 * e) - f(x - 2 * e))) / (12 * h)
    return g.reshape(x.shape)


def grad(f, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_()
    (g,) = torch.autograd.grad(f(x), x)
    return g


def error(g: torch.Tensor, exact: torch.Tensor) -> float:
    """Relative max-norm error; NaN where ``g`` has a NaN."""
    return float((g - exact).abs().max() / exact.abs().max())


# %%
# Part 1: the fit ``||L R - B||^2`` through the triplets and through the split


def products(rule: dict) -> dict:
    """The truncated product ``L R`` six ways: the split by hand from
    ``torch.linalg.svd``, from the triplets of ``ps.svd`` (``U diag(S)
    V^H``, and the split by hand ``U sqrt(S)``, ``sqrt(S) V^H``), from
    ``absorb="left"`` and ``"both"``, and as ``svd_function(A, ("pow", 1),
    ...)``."""

    def torch_linalg(A):
        U, S, Vh = torch.linalg.svd(A)
        r = int((S > rule.get("atol", 0.0)).sum())
        S = S[:r].sqrt()
        return (U[:, :r] * S) @ (S[:, None] * Vh[:r])

    def triplets(A):
        U, S, Vh = ps.svd(A, **rule, gauge="ignore")
        return (U * S) @ Vh

    def by_hand(A):
        U, S, Vh = ps.svd(A, **rule, gauge="ignore")
        return (U * S.sqrt()) @ (S.sqrt()[:, None] * Vh)

    def absorbed(how):
        return lambda A: (lambda L, R: L @ R)(*ps.svd(A, **rule, absorb=how))

    return {
        "torch.linalg.svd by hand": torch_linalg,
        "U diag(S) Vh (triplets)": triplets,
        "U sqrt(S), sqrt(S) Vh by hand": by_hand,
        'absorb="left"': absorbed("left"),
        'absorb="both"': absorbed("both"),
        'svd_function("pow", 1)': lambda A: ps.svd_function(A, ("pow", 1), **rule),
    }


def fit_errors() -> dict[tuple[str, str], float]:
    """Relative max-norm error of each gradient against finite differences,
    per (case, way)."""
    out = {}
    B = with_spectrum([1.0] * 6, seed=9) * 0.7
    cases = {
        "S = (3,2,2,1,.5,.1)": (MULTIPLET, {}),
        "same, atol=0.3": (MULTIPLET, {"atol": 0.3}),
        "all equal": (ALL_EQUAL, {}),
    }
    for case, (spectrum, rule) in cases.items():
        A = with_spectrum(spectrum, seed=3)
        for way, product in products(rule).items():

            def loss(X, product=product):
                return ((product(X) - B) ** 2).sum()

            out[case, way] = error(grad(loss, A), fd_grad(loss, A))
    return out


# %%
# Part 2: the 3-state Potts model by TRG, doublets kept


def potts_tensor(K: float) -> torch.Tensor:
    """``T_ijkl = sum_s W_si W_sj W_sk W_sl`` with ``W W^T = exp(K delta)``
    (the symmetric square root), the bond weights of the 3-state Potts
    model at coupling ``K``."""
    w, V = torch.linalg.eigh(torch.exp(K * torch.eye(3, dtype=F64)))
    W = (V * w.sqrt()) @ V.mT
    return torch.einsum("ai,aj,ak,al->ijkl", W, W, W, W)


def split(M: torch.Tensor, chi: int, spectra: list | None = None):
    if spectra is not None:
        spectra.append(ps.svdvals(M.detach()))
    return ps.svd(M, k=chi, rtol=1e-3, multiplets="down", absorb="both")


def lnz(T: torch.Tensor, chi: int = 6, steps: int = 4, spectra=None) -> torch.Tensor:
    """``ln Z / N`` of the network of ``T`` on ``2**steps`` sites (periodic)
    by TRG with bond dimension ``chi``."""
    out = torch.zeros((), dtype=T.dtype)
    for n in range(steps):
        m = T.abs().max()
        T = T / m
        out = out + m.log() / 2**n
        d = T.shape[0]
        F1, F3 = split(T.reshape(d * d, d * d), chi, spectra)
        F2, F4 = split(T.permute(1, 2, 3, 0).reshape(d * d, d * d), chi, spectra)
        T = torch.einsum(
            "axw,byx,zyc,wze->abce",
            F3.reshape(-1, d, d),
            F4.reshape(-1, d, d),
            F1.reshape(d, d, -1),
            F2.reshape(d, d, -1),
        )
    return out + torch.einsum("ijij->", T).log() / 2**steps


def doublets_kept(spectra: list, chi: int) -> int:
    """How many doublets (pairs equal to 1e-10 relative) the splits kept."""
    count = 0
    for S in spectra:
        kept = S[: min(chi, int((S > 1e-3 * S[0]).sum()))]
        count += int(((kept[:-1] - kept[1:]).abs() < 1e-10 * kept[0]).sum())
    return count


def main(K: float = 1.0, chi: int = 6, steps: int = 4) -> dict:
    errors = fit_errors()
    T = potts_tensor(K)
    spectra: list = []
    lnz(T, chi, steps, spectra)

    def f(X):
        return lnz(X, chi, steps)

    exact = fd_grad(f, T)
    reverse = grad(f, T)
    forward = torch.func.jacfwd(f)(T)
    return {
        "fit": errors,
        "doublets": doublets_kept(spectra, chi),
        "reverse": error(reverse, exact),
        "forward": error(forward, exact),
    }


# Log scale: an error of exactly 0 is drawn at this floor.
FLOOR = 1e-17


def figure(result: dict):
    """The gradient errors of part 1 (each way, each spectrum) and of part 2."""
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(case for case, _ in result["fit"]))
    ways = list(dict.fromkeys(way for _, way in result["fit"]))
    rows = [(way, case, result["fit"][case, way]) for way in ways for case in cases]
    rows += [
        ("Potts TRG, d(ln Z/N)/dT", f"{mode} mode", result[mode])
        for mode in ("reverse", "forward")
    ]
    groups = list(dict.fromkeys(group for group, _, _ in rows))
    colours = {
        name: f"C{i}" for i, name in enumerate(dict.fromkeys(b for _, b, _ in rows))
    }
    fig, ax = plt.subplots(figsize=(8.0, 6.0))
    width = 0.8 / len(cases)
    for group_index, group in enumerate(groups):
        members = [(bar, e) for g, bar, e in rows if g == group]
        for i, (bar, e) in enumerate(members):
            y = group_index + (i - (len(members) - 1) / 2) * width
            finite = math.isfinite(e)
            ax.barh(
                y,
                max(e, FLOOR) if finite else FLOOR,
                height=width,
                color=colours[bar],
                label=bar,
            )
            if not finite:  # no bar: say why
                ax.annotate(
                    "NaN",
                    (FLOOR, y),
                    xytext=(3, 0),
                    va="center",
                    textcoords="offset points",
                    fontsize=8,
                )
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="lower right")
    ax.set_xscale("log")
    ax.set_xlim(left=FLOOR)
    ax.set_yticks(range(len(groups)), groups)
    ax.invert_yaxis()
    ax.set_xlabel("relative error vs finite differences")
    ax.set_ylabel("gradient through")
    ax.set_title("Gradients at kept multiplets: the split vs the triplets")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    result = main()
    print("gradient of ||L R - B||^2, relative error against finite differences")
    for (case, way), e in result["fit"].items():
        print(f"  {case:22s} {way:32s} {e:9.1e}")
    print(f"Potts TRG: {result['doublets']} kept doublets; d(ln Z/N)/dT, 81 entries:")
    print(
        f"  reverse mode {result['reverse']:.1e}, forward mode {result['forward']:.1e}"
    )
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
