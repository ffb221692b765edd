"""A learnable spectral graph filter
=================================

The filter is trained to denoise a signal on a ring.

The filter is ``H = V g_theta(Lambda) V^T`` for the graph Laplacian
``L = V Lambda V^T``, with ``g_theta`` a polynomial in the normalised
eigenvalue, ``g_theta(lam) = sum_k theta_k (lam / lam_max)^k``:
``ps.matrix_function(L, g)`` with ``g`` a Python function that uses ``theta``,
so the gradient reaches ``theta`` (and the graph's edge weights, if they are
learned too) exactly, whatever the spectrum.

A ring is the hard case for eigenvector gradients: every non-zero eigenvalue
of the ring Laplacian is double (``2 - 2 cos(2 pi j / n)`` for ``j`` and
``n - j``). The script

1. trains ``theta`` with ``torch.optim.Adam`` to denoise noisy copies of a
   smooth signal and reports the loss before and after;
2. checks the gradient in ``theta``, and in the ring's edge weights, against
   central finite differences;
3. does the same with ``torch.linalg.eigh``: ``V diag(g(w)) V^T`` gives the
   right ``theta``-gradient (the Laplacian is fixed: nothing is
   differentiated through ``eigh``), but the gradient in the edge weights goes
   through ``eigh``'s eigenvector derivative, which divides by the gaps of the
   repeated eigenvalues: NaN or meaningless numbers.

The figure shows the training loss and the gradient errors of both ways.

Run: ``python examples/spectral_filter.py`` (``--help`` for the sizes).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from collections.abc import Callable

import torch

import pyspectral as ps

DTYPE = torch.float64


def ring_edges(n: int) -> list[tuple[int, int]]:
    """The ``n`` edges of a ring (cycle) graph."""
    return [(i, (i + 1) % n) for i in range(n)]


def chords(n: int) -> list[tuple[int, int]]:
    """Two chords that break the ring's symmetry (distinct eigenvalues)."""
    return [(0, n // 3), (1, n // 2 + 2)]


def laplacian(weights: torch.Tensor, edges: list[tuple[int, int]], n: int):
    """``L = sum_e w_e (e_i - e_j)(e_i - e_j)^T``, differentiable in the weights."""
    i = torch.tensor([e[0] for e in edges])
    j = torch.tensor([e[1] for e in edges])
    L = torch.zeros(n, n, dtype=weights.dtype)
    L = L.index_put((i, j), -weights, accumulate=True)
    L = L.index_put((j, i), -weights, accumulate=True)
    degree = torch.zeros(n, dtype=weights.dtype).index_add(0, i, weights)
    degree = degree.index_add(0, j, weights)
    return L + torch.diag(degree)


def polynomial(theta: torch.Tensor, scale: float) -> Callable:
    """``g(lam) = sum_k theta_k (lam / scale)^k`` (elementwise in ``lam``)."""

    def g(lam: torch.Tensor) -> torch.Tensor:
        x = lam / scale
        return sum(t * x**k for k, t in enumerate(theta))

    return g


def pyspectral_filter(L: torch.Tensor, g: Callable) -> torch.Tensor:
    """``V g(Lambda) V^T`` with the exact gradient (in ``L`` and in ``g``)."""
    return ps.matrix_function(L, g)


def torch_filter(L: torch.Tensor, g: Callable) -> torch.Tensor:
    """The same through ``torch.linalg.eigh`` and autograd."""
    w, V = torch.linalg.eigh(L)
    return (V * g(w)) @ V.mT


def problem(n: int, samples: int, noise: float, seed: int) -> dict:
    """A smooth signal on the ring (its two lowest non-constant frequencies)
    and noisy copies of it."""
    gen = torch.Generator().manual_seed(seed)
    phase = 2 * math.pi * torch.arange(n, dtype=DTYPE) / n
    clean = torch.cos(phase) + 0.5 * torch.sin(2 * phase)
    noisy = clean + noise * torch.randn(samples, n, dtype=DTYPE, generator=gen)
    return {"clean": clean, "noisy": noisy, "edges": ring_edges(n), "n": n}


def loss_of(filt: Callable, P: dict, weights: torch.Tensor, theta: torch.Tensor):
    """Mean squared error of the filtered noisy signals against the clean one
    (``lam_max = 4``: the ring's largest eigenvalue is at most ``2 max deg``)."""
    L = laplacian(weights, P["edges"], P["n"])
    H = filt(L, polynomial(theta, 4.0))
    denoised = P["noisy"] @ H  # H is symmetric: rows are H x
    return ((denoised - P["clean"]) ** 2).mean()


def central_differences(f: Callable, x: torch.Tensor, h: float = 1e-4):
    """Gradient of ``f`` at ``x`` by the fourth-order central stencil."""
    x = x.detach()
    g = torch.zeros_like(x)
    for i in range(x.numel()):
        e = torch.zeros_like(x)
        e.view(-1)[i] = 1.0
        with torch.no_grad():
            at = [float(f(x + t * h * e)) for t in (1, -1, 2, -2)]
        g.view(-1)[i] = (8 * (at[0] - at[1]) - (at[2] - at[3])) / (12 * h)
    return g


def gradient(f: Callable, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_()
    (g,) = torch.autograd.grad(f(x), x)
    return g


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def main(
    n: int = 16,
    degree: int = 3,
    steps: int = 150,
    samples: int = 8,
    noise: float = 0.5,
    seed: int = 0,
    verbose: bool = True,
) -> dict:
    """Train the filter, check the gradients; returns the numbers reported."""
    P = problem(n, samples, noise, seed)
    ones = torch.ones(n, dtype=DTYPE)  # the ring's edge weights
    theta = torch.zeros(degree + 1, dtype=DTYPE)
    theta[0] = 1.0  # the identity filter: nothing removed yet
    theta.requires_grad_()

    # 1. training
    opt = torch.optim.Adam([theta], lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(pyspectral_filter, P, ones, theta)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    final = float(loss_of(pyspectral_filter, P, ones, theta.detach()))

    # 2. gradients against finite differences, at the trained theta
    t0 = theta.detach()
    out = {"loss_start": losses[0], "loss_end": final, "theta": t0.tolist()}
    out["losses"] = losses + [final]  # before each step, and after the last
    for name, filt in (("pyspectral", pyspectral_filter), ("torch", torch_filter)):
        in_theta = lambda t, filt=filt: loss_of(filt, P, ones, t)  # noqa: E731
        in_edges = lambda w, filt=filt: loss_of(filt, P, w, t0)  # noqa: E731
        fd_theta = central_differences(in_theta, t0)
        fd_edges = central_differences(in_edges, ones)
        g_theta, g_edges = gradient(in_theta, t0), gradient(in_edges, ones)
        out[f"{name}_theta_error"] = relative_error(g_theta, fd_theta)
        out[f"{name}_edge_error"] = relative_error(g_edges, fd_edges)
        out[f"{name}_edge_gradient_finite"] = bool(torch.isfinite(g_edges).all())
    w = torch.linalg.eigvalsh(laplacian(ones, P["edges"], n))
    out["smallest_gap"] = float((w[1:] - w[:-1]).abs().min())

    # 3. where torch.linalg.eigh is fine: two chords break the ring's symmetry,
    # the eigenvalues separate, and its eigenvector derivative is right too
    Q = {**P, "edges": P["edges"] + chords(n)}
    more = torch.ones(len(Q["edges"]), dtype=DTYPE)
    w = torch.linalg.eigvalsh(laplacian(more, Q["edges"], n))
    out["chords_smallest_gap"] = float((w[1:] - w[:-1]).abs().min())
    for name, filt in (("pyspectral", pyspectral_filter), ("torch", torch_filter)):
        in_edges = lambda w, filt=filt: loss_of(filt, Q, w, t0)  # noqa: E731
        fd_edges = central_differences(in_edges, more)
        g_edges = gradient(in_edges, more)
        out[f"{name}_chords_edge_error"] = relative_error(g_edges, fd_edges)

    if verbose:
        print(
            f"ring of {n} nodes: eigenvalues in pairs (smallest gap "
            f"{out['smallest_gap']:.1e})"
        )
        print(
            f"denoising loss: {out['loss_start']:.4f} -> {out['loss_end']:.4f} "
            f"after {steps} Adam steps; theta = "
            f"{[round(t, 3) for t in out['theta']]}"
        )
        print("gradient error against central differences (max-norm, relative):")
        for name in ("pyspectral", "torch"):
            finite = "" if out[f"{name}_edge_gradient_finite"] else " (not finite)"
            print(
                f"  {name:10s}  theta: {out[f'{name}_theta_error']:.1e}   "
                f"edge weights: {out[f'{name}_edge_error']:.1e}{finite}"
            )
        print(
            f"with two chords (smallest gap {out['chords_smallest_gap']:.2f}), "
            "edge weights: pyspectral "
            f"{out['pyspectral_chords_edge_error']:.1e}, torch "
            f"{out['torch_chords_edge_error']:.1e}"
        )
    return out


# Log scale: an error of exactly 0 is drawn at this floor.
FLOOR = 1e-17


def figure(result: dict):
    """The training loss per Adam step, and the gradient errors of both ways."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    losses = result["losses"]
    left.plot(range(len(losses)), losses)
    left.set_xlabel("Adam step")
    left.set_ylabel("denoising loss (mean squared error)")
    left.set_title("training theta (pyspectral)")

    groups = {
        "theta\n(ring)": "theta_error",
        "edge weights\n(ring)": "edge_error",
        "edge weights\n(ring + chords)": "chords_edge_error",
    }
    ways = {"pyspectral": "ps.matrix_function", "torch": "torch.linalg.eigh"}
    errors = {w: [result[f"{w}_{key}"] for key in groups.values()] for w in ways}
    finite = [e for row in errors.values() for e in row if math.isfinite(e)]
    for i, (way, label) in enumerate(ways.items()):
        x = [g + (i - 0.5) * 0.38 for g in range(len(groups))]
        heights = [max(e, FLOOR) if math.isfinite(e) else FLOOR for e in errors[way]]
        right.bar(x, heights, width=0.38, label=label)
        for xi, e in zip(x, errors[way]):
            if not math.isfinite(e):  # no bar: say why
                right.annotate("NaN", (xi, FLOOR), ha="center", va="bottom")
    right.set_yscale("log")
    # from the floor up, with room above the bars for the legend
    right.set_ylim(FLOOR, max(finite, default=FLOOR) * 1e4)
    right.set_xticks(range(len(groups)), list(groups))
    right.set_xlabel("gradient in")
    right.set_ylabel("relative error vs finite differences")
    right.set_title("gradient errors")
    right.legend(loc="upper center", ncol=2)
    fig.suptitle("A learnable spectral filter on a ring")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=16, help="nodes of the ring")
    parser.add_argument("--degree", type=int, default=3, help="polynomial degree")
    parser.add_argument("--steps", type=int, default=150, help="Adam steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = main(n=args.n, degree=args.degree, steps=args.steps, seed=args.seed)
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
