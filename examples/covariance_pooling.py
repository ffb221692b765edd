"""
Covariance pooling with a matrix square root
============================================

Global covariance pooling (the matrix-power normalisation of
MPN-COV / iSQRT-COV networks) replaces the average pooling of a CNN by the
square root of the channel covariance, ``sqrt(Sigma + eps I)``. Two things make
that covariance singular in practice: fewer spatial samples than channels
(rank deficiency) and dead ReLU channels, whose rows and columns are exactly
zero. Each dead channel gives ``Sigma + eps I`` the eigenvalue ``eps``
*exactly*, with an exact eigenvector, so the eigenvalue ``eps`` is repeated.

The usual eigh-based square root, ``V sqrt(w) V^T`` through
``torch.linalg.eigh``, then divides by a zero gap in its backward: the
gradient is NaN, and one SGD step makes every weight NaN.
``ps.matrix_function(S, "sqrt")`` pulls back with divided differences (the
Daleckii-Krein formula), exact at repeated eigenvalues; this script checks it
against central finite differences and trains a few steps.

Without ``eps`` the zero eigenvalues make the square root non-differentiable
(``sqrt'(0) = inf``): pyspectral's gradient with respect to ``Sigma`` is
``+-inf`` in the entries the null space reaches, which becomes NaN once it is
chained into the features. Keep ``eps > 0``.

The figure shows the training loss per SGD step with each square root.
"""

from __future__ import annotations

import importlib.util
import math

import torch

import pyspectral as ps

DT = torch.float64


def sqrt_eigh(S: torch.Tensor) -> torch.Tensor:
    """The eigh-based matrix square root most code uses."""
    w, V = torch.linalg.eigh(S)
    return (V * w.clamp(min=0).sqrt().unsqueeze(-2)) @ V.mT


def sqrt_ps(S: torch.Tensor) -> torch.Tensor:
    return ps.matrix_function(S, "sqrt")


class Model:
    """1x1 convolution (channel mixing) + ReLU + covariance pooling + a linear
    head on the pooled matrix's upper triangle. Channels ``< dead`` have a
    bias of -10: dead ReLUs."""

    def __init__(self, c_in: int, channels: int, dead: int, eps: float, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.eps = eps
        self.mix = torch.randn(channels, c_in, generator=g, dtype=DT) / c_in**0.5
        self.bias = torch.zeros(channels, 1, dtype=DT)
        self.bias[:dead] = -10.0
        n_out = channels * (channels + 1) // 2
        self.head = torch.randn(n_out, generator=g, dtype=DT) / n_out**0.5
        self.iu = torch.triu_indices(channels, channels)

    def parameters(self) -> list[torch.Tensor]:
        return [self.mix, self.head]

    def pooled(self, Z: torch.Tensor, mix: torch.Tensor, sqrt) -> torch.Tensor:
        X = torch.relu(mix @ Z + self.bias)  # (batch, channels, samples)
        Xc = X - X.mean(-1, keepdim=True)
        S = Xc @ Xc.mT / X.shape[-1]
        eye = torch.eye(S.shape[-1], dtype=DT)
        return sqrt(S + self.eps * eye)

    def loss(self, Z, y, mix, head, sqrt) -> torch.Tensor:
        P = self.pooled(Z, mix, sqrt)
        scores = P[..., self.iu[0], self.iu[1]] @ head
        return ((scores - y) ** 2).mean()


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
    batch: int = 4,
    c_in: int = 6,
    channels: int = 16,
    samples: int = 12,
    dead: int = 3,
    eps: float = 1e-4,
    steps: int = 20,
    lr: float = 0.05,
    seed: int = 0,
) -> dict:
    g = torch.Generator().manual_seed(seed + 1)
    Z = torch.randn(batch, c_in, samples, generator=g, dtype=DT)
    y = torch.randn(batch, generator=g, dtype=DT)
    model = Model(c_in, channels, dead, eps, seed)
    rank = min(samples - 1, channels - dead)
    print(
        f"{batch} images, {channels} channels ({dead} dead), {samples} samples: "
        f"covariance rank <= {rank} of {channels}, eps = {eps}"
    )

    # 1. The gradient with respect to the channel mixing, both ways, against
    #    central finite differences of the same (smooth) loss.
    def loss_of_mix(mix, sqrt=sqrt_ps):
        return model.loss(Z, y, mix, model.head, sqrt)

    reference = fd_grad(loss_of_mix, model.mix)
    result = {}
    for name, sqrt in (
        ("torch.linalg.eigh", sqrt_eigh),
        ("ps.matrix_function", sqrt_ps),
    ):
        mix = model.mix.clone().requires_grad_()
        loss_of_mix(mix, sqrt).backward()
        g = mix.grad
        finite = bool(torch.isfinite(g).all())
        err = float((g - reference).abs().max() / reference.abs().max())
        result[name] = {"finite": finite, "error": err}
        print(
            f"  {name:<20} gradient finite: {finite!s:<5}  relative error vs "
            f"finite differences: {err:.1e}"
        )

    # 2. A few SGD steps with each square root.
    for name, sqrt in (
        ("torch.linalg.eigh", sqrt_eigh),
        ("ps.matrix_function", sqrt_ps),
    ):
        mix, head = (p.clone().requires_grad_() for p in model.parameters())
        losses = []
        for step in range(steps + 1):
            try:
                loss = model.loss(Z, y, mix, head, sqrt)
            except torch.linalg.LinAlgError as err:  # eigh of a NaN matrix
                print(f"  {name:<20} step {step}: {str(err).splitlines()[0][:60]}...")
                losses.append(float("nan"))
                break
            losses.append(float(loss.detach()))
            if step == steps:
                break
            gm, gh = torch.autograd.grad(loss, (mix, head))
            with torch.no_grad():
                mix -= lr * gm
                head -= lr * gh
        result[name]["losses"] = losses
        print(
            f"  {name:<20} training loss: {losses[0]:.4f} -> {losses[-1]:.4f} "
            f"after {len(losses) - 1} SGD steps"
        )
    return result


def figure(result: dict):
    """The training loss per SGD step with each square root (a NaN ends a curve)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, style in (
        ("ps.matrix_function", dict(marker="o", ms=5, color="C0")),
        ("torch.linalg.eigh", dict(marker="x", ms=11, mew=2, color="C3")),
    ):
        r = result[name]
        losses = r["losses"]
        finite = [v for v in losses if math.isfinite(v)]
        if r["finite"]:
            label = f"{name}: gradient error {r['error']:.0e} vs finite differences"
        else:
            label = f"{name}: NaN gradient"
        ax.plot(range(len(finite)), finite, label=label, **style)
        if len(finite) < len(losses):  # where the loss turns NaN
            ax.axvline(len(finite), color=style["color"], ls=":", label="NaN loss")
    ax.set_xlabel("SGD step")
    ax.set_ylabel("training loss")
    ax.set_title("Covariance pooling with dead channels: sqrt(Sigma + eps I)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="lower left", fontsize="small")
    return fig


if __name__ == "__main__":
    result = main()
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
