"""Gradients at near-degenerate gaps: the error of the factor path (``ps.svd``,
``ps.eigh``) against the composites (``svd_function``, ``matrix_function``),
exact at every spectrum, over gaps 1e-14 ... 1e-6 (docs/near_degenerate.md).

    PYTHONPATH=. python docs/figures/fig_near_degenerate.py [--out DIR] [--before SRC]
    python docs/figures/make_figures.py near_degenerate

(from the repository root: the pyspectral measured is the one Python imports.)
Writes ``near_degenerate.png`` into ``DIR`` (default: this folder) and prints
the table of the worst relative errors. ``--before SRC``: also measure the
pyspectral in ``SRC`` (a source tree, e.g. ``git archive 23d6b67 pyspectral |
tar -x -C SRC``) in a subprocess, and draw it dashed. ``--json``: print the
curves of the pyspectral that Python imports, as JSON (what ``--before``
runs). ``main(out_dir)`` (what ``make_figures.py`` calls) draws the dashed
curves of commit ``BEFORE`` itself, extracted with ``git archive`` into a
temporary folder, where this is a git checkout that has that commit.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

import pyspectral as ps

BEFORE = "23d6b67"  # the last commit before the rounding cut
GAPS = [10.0 ** (-14 + 0.25 * i) for i in range(33)]  # 1e-14 ... 1e-6
DTYPE = torch.float64


def _unitary(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(n, n, dtype=DTYPE, generator=gen))[0]


def _indicator(lo: float, hi: float):
    """The user pair ``(f, f')`` of the indicator of ``(lo, hi)``: the spectral
    projector onto the values in it, with its exact pullback."""
    return (
        lambda x: ((x > lo) & (x < hi)).to(x.dtype),
        lambda x: torch.zeros_like(x),
    )


def cases() -> dict[str, tuple[Callable, Callable, Callable]]:
    """``name: (matrix(gap), loss through the factors, the same loss exact)``:
    singular values ``(3, 2 + gap, 2, 1)`` of a 6 x 4 matrix, eigenvalues
    ``(1, 2, 2 + gap, 3)``; every loss is invariant under rotations of the
    near-degenerate pair."""
    gen = torch.Generator().manual_seed(0)
    Q1, Q2, Q = _unitary(6, gen), _unitary(4, gen), _unitary(4, gen)
    W = torch.randn(6, 4, dtype=DTYPE, generator=gen)
    Wm = torch.randn(6, 6, dtype=DTYPE, generator=gen)
    Wh = torch.randn(4, 4, dtype=DTYPE, generator=gen)

    def svd_matrix(gap):
        return (Q1[:, :4] * torch.tensor([3, 2 + gap, 2, 1], dtype=DTYPE)) @ Q2.T

    def eigh_matrix(gap):
        H = (Q * torch.tensor([1, 2, 2 + gap, 3], dtype=DTYPE)) @ Q.T
        return (H + H.T) / 2

    def polar(X):
        U, _, Vh = ps.svd(X, full_matrices=False)
        return U @ Vh

    def top3(X):
        U = ps.svd(X, full_matrices=False).U[:, :3]
        return U @ U.T

    def pair(X):
        V = ps.eigh(X).eigenvectors[:, 1:3]
        return V @ V.T

    P_top3 = lambda X: ps.matrix_function(X @ X.T, _indicator(2.5, 10))  # noqa: E731
    P_pair = lambda X: ps.matrix_function(X, _indicator(1.5, 2.5))  # noqa: E731
    return {
        "svd: polar factor <W, U Vh>": (
            svd_matrix,
            lambda X: (W * polar(X)).sum(),
            lambda X: (W * ps.svd_function(X, "polar")).sum(),
        ),
        "svd: sum sin(U Vh)": (
            svd_matrix,
            lambda X: polar(X).sin().sum(),
            lambda X: ps.svd_function(X, "polar").sin().sum(),
        ),
        "svd: projector U_3 U_3^T": (
            svd_matrix,
            lambda X: (Wm * top3(X)).sum(),
            lambda X: (Wm * P_top3(X)).sum(),
        ),
        "eigh: pair projector V_2 V_2^T": (
            eigh_matrix,
            lambda X: (Wh * pair(X)).sum(),
            lambda X: (Wh * P_pair(X)).sum(),
        ),
        "eigh: sum exp(V_2 V_2^T)": (
            eigh_matrix,
            lambda X: pair(X).exp().sum(),
            lambda X: P_pair(X).exp().sum(),
        ),
    }


def _grad(loss: Callable, A: torch.Tensor) -> torch.Tensor:
    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    return g


def measure() -> dict[str, list[float]]:
    """The relative gradient error ``max|g - g_exact| / max|g_exact|`` of
    every case at every gap."""
    curves = {}
    for name, (matrix, loss, exact) in cases().items():
        errors = []
        for gap in GAPS:
            A = matrix(gap)
            g, g0 = _grad(loss, A), _grad(exact, A)
            errors.append(float((g - g0).abs().max() / g0.abs().max()))
        curves[name] = errors
    return curves


def measure_in(src: Path) -> dict[str, list[float]]:
    """:func:`measure` with the pyspectral of the source tree ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run(
        [sys.executable, __file__, "--json"],
        env=env,
        cwd=src,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def table(after: dict, before: dict | None = None) -> str:
    """The worst error of each case over the sweep, as a Markdown table."""
    if before is None:
        rows = ["| loss | worst relative error |", "|---|---:|"]
        rows += [f"| {k} | {max(v):.1e} |" for k, v in after.items()]
    else:
        rows = ["| loss | before | after |", "|---|---:|---:|"]
        rows += [
            f"| {k} | {max(before[k]):.1e} | {max(v):.1e} |" for k, v in after.items()
        ]
    return "\n".join(rows)


def before_tree(dest: Path) -> Path | None:
    """pyspectral as of commit ``BEFORE``, extracted into ``dest`` with ``git
    archive``; None where this is not a git checkout that has the commit."""
    root = Path(__file__).resolve().parents[2]
    try:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", BEFORE, "pyspectral"],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest)  # our own repository's files
    return dest


def main(out_dir: Path) -> dict:
    """:func:`render` with the curves of commit ``BEFORE`` dashed, where git
    has it (as the committed image); else the current curves alone."""
    with tempfile.TemporaryDirectory() as tmp:
        return render(Path(out_dir), before_tree(Path(tmp)))


def render(out_dir: Path, before: Path | None = None) -> dict:
    """Measure, print the table, draw ``near_degenerate.png`` into
    ``out_dir``; returns the curves (``{"after": ..., "before": ...}``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    after = measure()
    old = None if before is None else measure_in(before)
    print(table(after, old))
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    tol = 3 * torch.finfo(DTYPE).eps ** 0.75
    ax.axvline(tol, color="0.6", lw=0.8)
    ax.text(tol * 1.3, 2e-17, "degeneracy tolerance", fontsize=7, color="0.4")
    floor = 1e-17  # an exact 0 would vanish from a log scale
    for i, (name, errors) in enumerate(after.items()):
        color = f"C{i}"
        ax.loglog(GAPS, [max(e, floor) for e in errors], color=color, label=name)
        if old is not None:
            ax.loglog(GAPS, [max(e, floor) for e in old[name]], "--", color=color)
    ax.set_xlabel("gap between the near-degenerate pair")
    ax.set_ylabel("relative gradient error")
    title = "through ps.svd / ps.eigh vs the exact composites"
    ax.set_title(title + ("\n(dashed: before the rounding cut)" if old else ""))
    ax.set_ylim(floor, 1e-3)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / "near_degenerate.png")
    plt.close(fig)
    return {"after": after, "before": old}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure()))
    else:
        render(args.out, args.before)
