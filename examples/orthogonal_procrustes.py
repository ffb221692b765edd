"""
An orthogonality constraint through the polar factor
====================================================

To keep a weight matrix orthogonal (on the Stiefel manifold) while training
with a plain optimiser, parametrise it by the polar factor of an
unconstrained parameter: ``Q = U V^T`` where ``W = U S V^T``. The usual
initialisation, ``torch.nn.init.orthogonal_``, makes ``W`` orthogonal, so
*all* its singular values are 1: exactly the repeated singular values at
which ``torch.linalg.svd``'s backward divides by zero. Its gradient at the
first step is NaN.

``ps.svd_function(W, "polar")`` is exact at every spectrum (so is the polar
factor ``U @ Vh`` of ``ps.svd``, at exactly repeated singular values; near
them ``svd_function`` is the accurate one, see the docs' "What is exact
where"). This script checks the gradient at the orthogonal initialisation
against central finite differences and then solves an orthogonal Procrustes
problem, ``min_Q ||A Q - B||`` over orthogonal ``Q``, with Adam, comparing
with its closed-form solution ``Q* = polar(A^T B)``. The figure shows the
loss per Adam step through each polar factor, against the closed form's.
"""

from __future__ import annotations

import importlib.util
import math

import torch

import pyspectral as ps

DT = torch.float64


def polar_torch(W: torch.Tensor) -> torch.Tensor:
    U, _, Vh = torch.linalg.svd(W, full_matrices=False)
    return U @ Vh


def polar_ps(W: torch.Tensor) -> torch.Tensor:
    return ps.svd_function(W, "polar")


def fd_grad(fn, x: torch.Tensor, h: float = 1e-5) -> torch.Tensor:
    """Central finite differences of a scalar function, entry by entry."""
    G = torch.zeros_like(x)
    with torch.no_grad():
        for i in range(x.numel()):
            E = torch.zeros_like(x).view(-1)
            E[i] = h
            E = E.view_as(x)
            G.view(-1)[i] = (fn(x + E) - fn(x - E)) / (2 * h)
    return G


def main(
    n: int = 8, m: int = 40, steps: int = 200, lr: float = 0.1, seed: int = 0
) -> dict:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(m, n, generator=g, dtype=DT)
    Q_true, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=DT))
    B = A @ Q_true + 0.1 * torch.randn(m, n, generator=g, dtype=DT)
    Q_star = polar_ps(A.mT @ B)  # the closed-form Procrustes solution

    W0 = torch.empty(n, n, dtype=DT)
    torch.nn.init.orthogonal_(W0, generator=g)  # singular values all 1
    # polar(W) cannot change its determinant's sign without W passing through
    # a singular matrix: start in the component of O(n) that holds Q*.
    if torch.linalg.det(W0) * torch.linalg.det(Q_star) < 0:
        W0[:, 0] = -W0[:, 0]
    s = torch.linalg.svdvals(W0)
    print(
        f"Procrustes, A: {m}x{n}; W initialised orthogonal, singular values "
        f"{s.min():.15f} ... {s.max():.15f}"
    )

    def loss(W, polar=polar_ps):
        return ((A @ polar(W) - B) ** 2).sum()

    reference = fd_grad(loss, W0)
    result = {}
    for name, polar in (
        ("torch.linalg.svd", polar_torch),
        ("ps.svd_function", polar_ps),
    ):
        W = W0.clone().requires_grad_()
        loss(W, polar).backward()
        finite = bool(torch.isfinite(W.grad).all())
        err = float((W.grad - reference).abs().max() / reference.abs().max())
        result[name] = {"finite": finite, "error": err}
        print(
            f"  {name:<17} gradient at the orthogonal init: finite {finite!s:<5} "
            f"relative error vs finite differences {err:.1e}"
        )

    # Train the unconstrained W with Adam; Q = polar(W) stays orthogonal.
    for name, polar in (
        ("torch.linalg.svd", polar_torch),
        ("ps.svd_function", polar_ps),
    ):
        W = W0.clone().requires_grad_()
        opt = torch.optim.Adam([W], lr=lr)
        first = float(loss(W.detach(), polar))
        losses = []  # the loss before each step, then after the last one
        result[name]["losses"] = losses
        for step in range(steps):
            opt.zero_grad()
            value = loss(W, polar)
            value.backward()
            losses.append(float(value.detach()))
            opt.step()
            if not torch.isfinite(W).all():  # a NaN gradient made W NaN
                print(f"  {name:<17} W is NaN after step {step + 1}: stopped")
                result[name].update(first=first, last=float("nan"))
                break
        else:
            result[name].update(first=first)
        if not torch.isfinite(W).all():
            continue
        Q = polar(W.detach())
        last = float(loss(W.detach(), polar))
        losses.append(last)
        dist = float(torch.linalg.matrix_norm(Q - Q_star))
        orth = float(torch.linalg.matrix_norm(Q.mT @ Q - torch.eye(n, dtype=DT)))
        result[name].update(last=last, dist=dist, orth=orth)
        print(
            f"  {name:<17} loss {first:.3f} -> {last:.3f} in {steps} Adam steps; "
            f"||Q - Q*|| = {dist:.1e}, ||Q^T Q - I|| = {orth:.1e}"
        )
    result["optimum"] = float(loss(Q_star, lambda Q: Q))
    print(f"  closed form Q* = polar(A^T B): loss {result['optimum']:.3f}")
    return result


def figure(result: dict):
    """The loss per Adam step through each polar factor, and the closed form's."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, style in (
        ("ps.svd_function", dict(color="C0")),
        ("torch.linalg.svd", dict(marker="x", ms=11, mew=2, color="C3")),
    ):
        r = result[name]
        if r["finite"]:
            label = f"{name}: gradient error at the init {r['error']:.0e}"
        else:
            label = f"{name}: NaN gradient at the init"
        losses = r["losses"]
        if not math.isfinite(r["last"]):
            label += f", W NaN after step {len(losses)}"
        ax.plot(range(len(losses)), losses, label=label, **style)
    optimum = result["optimum"]
    ax.axhline(optimum, color="k", ls="--", lw=1, label="closed form polar(A^T B)")
    ax.set_yscale("log")
    ax.set_xlabel("Adam step")
    ax.set_ylabel("loss ||A polar(W) - B||^2")
    ax.set_title("Orthogonal Procrustes from an orthogonal initialisation")
    ax.legend(loc="center right")
    return fig


if __name__ == "__main__":
    result = main()
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
