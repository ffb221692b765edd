"""Relative gradient error against central finite differences as two singular
values meet: ``torch.linalg.svd`` against pyspectral for three smooth, gauge
invariant losses of a 6x5 float64 matrix with singular values
``(4, 2 + gap, 2, 1, 0.5)``:

- the polar factor ``<U V^H, W>``: ``ps.svd`` and ``ps.svd_function(A,
  "polar")``;
- the projector onto the top-3 left singular subspace, ``<U_3 U_3^H, W>``,
  which holds both close singular values: ``ps.svd`` and
  ``ps.matrix_function(A A^H, step)`` (the step function that is 1 on the
  top 3 eigenvalues of ``A A^H`` and 0 on the rest);
- ``<U tanh(S) V^H, W>``: ``ps.svd_function``.

``torch.linalg.svd`` divides the rounding error of the cotangent by the gap:
its error grows like 1/gap and is O(1) at gap 0. ``ps.svd`` is exact at every
gap for the polar factor and the projector: below ``degeneracy_atol`` (about
7e-12 here) by its cluster rule, above it because an entry of ``J_a + K_a``
within its own rounding error counts as zero (the rounding cut,
``docs/near_degenerate.md``). The composites use divided differences and are
exact at every gap, also for ``U tanh(S) V^H``, which ``ps.svd`` is not
(hence no ``ps.svd`` curve in that panel).

Writes ``gap.png``. ``python docs/figures/fig_gap.py [out_dir]``.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import pyspectral as ps  # noqa: E402

DT = torch.float64
GAPS = [10.0**-e for e in range(1, 15)] + [0.0]
H = 1e-3  # finite-difference step (fourth-order stencil: error ~ H**4)


def matrix(gap: float, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(6, 5, generator=g, dtype=DT))
    V, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=DT))
    s = torch.tensor([4.0, 2.0 + gap, 2.0, 1.0, 0.5], dtype=DT)
    return (U * s) @ V.mT


def torch_svd(A):
    return torch.linalg.svd(A, full_matrices=False)


def tanh_pair():
    return (torch.tanh, lambda s: 1 - torch.tanh(s) ** 2)


def losses(W: torch.Tensor) -> dict:
    """name -> (loss through torch.linalg.svd, through ps.svd or None, and
    (label, loss) through a pyspectral composite); ``W`` is 6x6, its first 5
    columns weigh the 6x5 outputs."""
    W5 = W[:, :5]

    def polar(svd):
        def loss(A):
            U, S, Vh = svd(A)
            return (U @ Vh * W5).sum()

        return loss

    def projector(svd):
        def loss(A):
            U3 = svd(A).U[:, :3]
            return (U3 @ U3.mT * W).sum()

        return loss

    def polar_fn(A):
        return (ps.svd_function(A, "polar") * W5).sum()

    def step(w):  # 1 on the top 3 eigenvalues of A A^H (4, (2+gap)^2, 4), 0 below
        return (w > 2.5).to(w.dtype)

    def projector_fn(A):
        P = ps.matrix_function(A @ A.mT, (step, torch.zeros_like))
        return (P * W).sum()

    def fun_torch(A):
        U, S, Vh = torch_svd(A)
        return ((U * torch.tanh(S)) @ Vh * W5).sum()

    def fun_ps(A):
        return (ps.svd_function(A, tanh_pair()) * W5).sum()

    return {
        "polar factor $\\langle UV^H, W\\rangle$": (
            polar(torch_svd),
            polar(ps.svd),
            ("ps.svd_function(A, 'polar')", polar_fn),
        ),
        "projector $\\langle U_3U_3^H, W\\rangle$": (
            projector(torch_svd),
            projector(ps.svd),
            ("ps.matrix_function(A A^H, step)", projector_fn),
        ),
        "$\\langle U \\tanh(S) V^H, W\\rangle$": (
            fun_torch,
            None,
            ("ps.svd_function(A, (tanh, tanh'))", fun_ps),
        ),
    }


def grad(loss, A: torch.Tensor) -> torch.Tensor:
    X = A.clone().requires_grad_()
    try:
        (g,) = torch.autograd.grad(loss(X), X)
    except RuntimeError:  # torch.linalg may refuse to differentiate
        return torch.full_like(A, math.nan)
    return g


def fd_grad(loss, A: torch.Tensor) -> torch.Tensor:
    """Central finite differences, fourth order, entry by entry."""
    G = torch.zeros_like(A)
    with torch.no_grad():
        for idx in range(A.numel()):
            E = torch.zeros_like(A).view(-1)
            E[idx] = H
            E = E.view_as(A)
            f = [float(loss(A + c * E)) for c in (2, 1, -1, -2)]
            G.view(-1)[idx] = (-f[0] + 8 * f[1] - 8 * f[2] + f[3]) / (12 * H)
    return G


def rel_err(g: torch.Tensor, ref: torch.Tensor) -> float:
    e = float((g - ref).abs().max() / ref.abs().max())
    return e if math.isfinite(e) else math.nan


def errors() -> dict:
    """name -> (torch errors, ps.svd errors or None, (label, composite errors))
    over GAPS."""
    W = torch.randn(6, 6, generator=torch.Generator().manual_seed(1), dtype=DT)
    out = {}
    for name, (lt, ls, (label, lc)) in losses(W).items():
        et, es, ec = [], [], []
        for gap in GAPS:
            A = matrix(gap)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = fd_grad(lt, A)  # the forward of a smooth loss is fine
                et.append(rel_err(grad(lt, A), ref))
                es.append(rel_err(grad(ls, A), ref) if ls is not None else None)
                ec.append(rel_err(grad(lc, A), ref))
        out[name] = (et, None if ls is None else es, (label, ec))
    return out


def main(out_dir: Path) -> Path:
    data = errors()
    x = list(range(len(GAPS)))
    labels = [f"1e-{e}" for e in range(1, 15)] + ["0"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), sharey=True)
    top = 10.0
    for ax, (name, (et, es, (label, ec))) in zip(axes, data.items()):
        tx = [i for i, e in zip(x, et) if not math.isnan(e)]
        ty = [max(e, 1e-17) for e in et if not math.isnan(e)]
        ax.semilogy(tx, ty, "o-", color="tab:red", label="torch.linalg.svd")
        nans = [i for i, e in zip(x, et) if math.isnan(e)]
        ax.semilogy(nans, [top] * len(nans), "x", color="tab:red", ms=9, mew=2)
        for i in nans:
            ax.annotate(
                "NaN",
                (i, top),
                textcoords="offset points",
                xytext=(-8, -14),
                color="tab:red",
                fontsize=8,
            )
        if es is not None:
            ax.semilogy(
                x,
                [max(e, 1e-17) for e in es],
                "s-",
                color="tab:blue",
                label="ps.svd",
                ms=5,
            )
        ax.semilogy(
            x, [max(e, 1e-17) for e in ec], "^-", color="tab:green", label=label, ms=5
        )
        ax.legend(loc="upper left", fontsize=7)
        ax.set_title(name, fontsize=10)
        ax.set_xticks(x[::2] + [x[-1]])
        ax.set_xticklabels(labels[::2] + [labels[-1]], fontsize=7, rotation=45)
        ax.set_xlabel("gap $s_2 - s_3$")
        ax.set_ylim(1e-13, 3 * top)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("relative gradient error\n(vs central finite differences)")
    fig.suptitle(
        "6x5 float64, singular values (4, 2 + gap, 2, 1, 0.5); reference: central "
        "finite differences (4th order) of the loss",
        fontsize=10,
    )
    fig.tight_layout()
    out = Path(out_dir) / "gap.png"
    fig.savefig(out, dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent))
