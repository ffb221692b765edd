"""
Correlation length of an MPS from its transfer matrix
=====================================================

An infinite matrix product state with tensor ``A^s`` (``D x D`` for each of
``d`` physical states) has the transfer matrix ``E = sum_s A^s (x) conj(A^s)``.
Its eigenvalues ``1 = |lambda_1| > |lambda_2| >= ...`` (after normalisation)
set the correlation length, ``xi = -1 / ln|lambda_2 / lambda_1|``, and its
eigenvectors the correlation functions: with ``E_O = sum O_st A^s (x)
conj(A^t)``, ``<O_0 O_r> = sum_c a_c (lambda_c / lambda_1)^(r - 1)``, the
amplitude of each cluster ``c`` of eigenvalues being ``a_c = l E_O P_c E_O r
/ lambda_1^2`` with ``P_c`` its spectral projector and ``l``, ``r`` the
dominant eigenvectors.

The AKLT state (``d = 3``, ``D = 2``: ``A^+ = sqrt(2/3) s^+``,
``A^0 = -sqrt(1/3) s^z``, ``A^- = -sqrt(2/3) s^-``) is the natural case: its
transfer matrix has the eigenvalue 1 and a *triple* ``-1/3``, so
``xi = 1 / ln 3`` and ``<S^x_0 S^x_r> = (4/3) (-1/3)^r``, amplitude ``-4/9``,
exactly. A repeated eigenvalue is where ``torch.linalg.eig``'s backward
divides by zero. This script differentiates the correlation length and the
amplitude w.r.t. the tensor through ``ps.eig`` (a symmetric function of the
cluster, and its projector: exact at a repeated eigenvalue) and checks them
against central finite differences, and the derivative of ``xi`` along the
one-parameter family ``A^0 -> t A^0`` against its closed form; there the
triple splits into an exactly degenerate pair ``-t^2/3`` (at every ``t``)
and ``(t^2 - 2)/3``, so the pair carries the transverse correlations. The
figure shows the relative gradient error of the amplitude along ``t``.
"""

from __future__ import annotations

import importlib.util
import math

import torch

import pyspectral as ps

DT = torch.float64
SP = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=DT)
SZ = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=DT)
# the spin-1 S^x in the basis (+, 0, -) of the physical index
SX = torch.tensor(
    [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]], dtype=DT
) / math.sqrt(2)


def aklt(t: float | torch.Tensor = 1.0) -> torch.Tensor:
    """The AKLT tensor, ``A^0`` scaled by ``t`` (``t = 1``: AKLT), ``(3, 2, 2)``."""
    return torch.stack(
        [math.sqrt(2 / 3) * SP, -t * math.sqrt(1 / 3) * SZ, -math.sqrt(2 / 3) * SP.mT]
    )


def transfer(A: torch.Tensor, op: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_st op_st A^s (x) conj(A^t)`` (no ``op``: the transfer matrix)."""
    D = A.shape[-1]
    op = torch.eye(A.shape[0], dtype=A.dtype) if op is None else op.to(A.dtype)
    return torch.einsum("sab,st,tcd->acbd", A, op, A.conj()).reshape(D * D, D * D)


def correlation(
    A: torch.Tensor, m: int, eig=ps.eig
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(xi, a)``: the correlation length of the cluster of the ``m``
    subleading eigenvalues (largest in modulus after the dominant one), as the
    symmetric function ``-m / sum_c ln|lambda_c / lambda_1|`` (the usual
    ``-1 / ln|lambda_2 / lambda_1|`` where they are equal), and the amplitude
    of ``<S^x_0 S^x_r>`` through the cluster's spectral projector."""
    L, V = eig(transfer(A))
    Vinv = torch.linalg.inv(V)
    order = torch.argsort(L.abs().detach(), descending=True)
    first, cluster = order[0], order[1 : 1 + m]
    lam1, right, left = L[first], V[:, first], Vinv[first, :]
    xi = -m / torch.log((L[cluster] / lam1).abs()).sum()
    EO = transfer(A, SX).to(V.dtype)
    P = V[:, cluster] @ Vinv[cluster, :]
    amplitude = ((left @ EO @ P @ EO @ right) / (lam1**2 * (left @ right))).real
    return xi, amplitude


def fd_grad(fn, x: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    """Central finite differences of a scalar function, entry by entry."""
    G = torch.zeros_like(x)
    for i in range(x.numel()):
        E = torch.zeros(x.numel(), dtype=x.dtype)
        E[i] = h
        E = E.view_as(x)
        G.view(-1)[i] = (fn(x + E) - fn(x - E)) / (2 * h)
    return G


def grad(fn, x: torch.Tensor) -> torch.Tensor:
    X = x.clone().requires_grad_()
    return torch.autograd.grad(fn(X), X)[0]


def relative(g: torch.Tensor, ref: torch.Tensor) -> float:
    err = float((g - ref).norm() / ref.norm())
    return err if math.isfinite(err) else float("nan")


def xi_exact(t: float, m: int) -> tuple[float, float]:
    """``xi`` along the family and its ``t``-derivative, from the spectrum
    ``(t^2 + 2)/3``, ``(t^2 - 2)/3``, ``-t^2/3`` (twice), in closed form:
    ``m = 3`` the three subleading ones, ``m = 2`` the pair."""

    def xi(t: float) -> float:
        top, pair = t * t + 2, t * t
        if m == 2:
            return -1 / math.log(pair / top)
        return -3 / (math.log(abs(t * t - 2) / top) + 2 * math.log(pair / top))

    h = 1e-5  # the derivative of the closed form by a 4th-order stencil
    dxi = (-xi(t + 2 * h) + 8 * xi(t + h) - 8 * xi(t - h) + xi(t - 2 * h)) / (12 * h)
    return xi(t), dxi


def main(
    ts: tuple[float, ...] = (1.1, 1.2, 1.3, 1.45, 1.6), verbose: bool = True
) -> dict:
    result: dict = {}
    # 1. AKLT: the triple -1/3; values against the exact ones, gradients of
    # xi and of the amplitude w.r.t. the 12 tensor entries against finite
    # differences, through ps.eig and torch.linalg.eig
    A = aklt()
    xi, amp = correlation(A, 3)
    row = {"xi": float(xi), "amplitude": float(amp)}
    for name, eig in (("pyspectral", ps.eig), ("torch.linalg.eig", torch.linalg.eig)):
        for what, k in (("xi", 0), ("amplitude", 1)):

            def f(X, eig=eig, k=k):
                return correlation(X, 3, eig)[k]

            g, ref = grad(f, A), fd_grad(lambda X, k=k: correlation(X, 3)[k], A)
            # xi is stationary at AKLT (its gradient is 0, by symmetry): absolute
            if what == "xi":
                row[f"{name} d{what}"] = (
                    float(g.norm()) if torch.isfinite(g).all() else float("nan")
                )
                row["fd dxi"] = float(ref.norm())
            else:
                row[f"{name} d{what}"] = relative(g, ref)
    result["aklt"] = row
    if verbose:
        print(
            f"AKLT: xi = {row['xi']:.15f} (exact 1/ln 3 = {1 / math.log(3):.15f}), "
            f"amplitude = {row['amplitude']:.15f} (exact -4/9)"
        )
        print(
            "  |grad xi| (exact 0):            pyspectral "
            f"{row['pyspectral dxi']:.1e}   torch.linalg.eig "
            f"{row['torch.linalg.eig dxi']:.1e}"
        )
        print(
            "  grad amplitude, error vs FD:    pyspectral "
            f"{row['pyspectral damplitude']:.1e}   torch.linalg.eig "
            f"{row['torch.linalg.eig damplitude']:.1e}"
        )
    # 2. The family A^0 -> t A^0 (the exactly degenerate pair -t^2/3 for t > 1):
    # d xi / dt against its closed form; the amplitude's tensor gradient
    # against finite differences
    rows = []
    for t in ts:
        tt = torch.tensor(t, dtype=DT, requires_grad=True)
        xi_t, _ = correlation(aklt(tt), 2)
        (dxi,) = torch.autograd.grad(xi_t, tt)
        exact, dexact = xi_exact(t, 2)
        At = aklt(t)
        ref = fd_grad(lambda X: correlation(X, 2)[1], At)
        errs = {
            name: relative(grad(lambda X, e=eig: correlation(X, 2, e)[1], At), ref)
            for name, eig in (
                ("pyspectral", ps.eig),
                ("torch.linalg.eig", torch.linalg.eig),
            )
        }
        rows.append(
            dict(
                t=t,
                xi=float(xi_t.detach()),
                xi_exact=exact,
                dxi=float(dxi),
                dxi_exact=dexact,
                **errs,
            )  # fmt: skip
        )
    result["family"] = rows
    if verbose:
        print(
            "A^0 -> t A^0: the pair -t^2/3 sets xi; its derivative, the "
            "amplitude's gradient"
        )
        print(
            "   t   xi         exact      d xi/dt    exact      "
            "amplitude grad error: ps / torch"
        )
        for r in rows:
            print(
                f"  {r['t']:.2f} {r['xi']:.8f} {r['xi_exact']:.8f} {r['dxi']:+.7f} "
                f"{r['dxi_exact']:+.7f}   {r['pyspectral']:.1e} / "
                f"{r['torch.linalg.eig']:.1e}"
            )
    return result


def figure(result: dict):
    """The relative error of the amplitude's gradient along the family, for
    ps.eig and torch.linalg.eig (NaN drawn at the top)."""
    import matplotlib.pyplot as plt

    rows = result["family"]
    ts = [r["t"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.semilogy(ts, [r["pyspectral"] for r in rows], "o-", color="C0", label="ps.eig")
    top = 10.0
    theirs = [r["torch.linalg.eig"] for r in rows]
    ax.semilogy(
        ts,
        [top if not math.isfinite(x) else x for x in theirs],
        "x",
        ms=11,
        mew=2,
        color="C3",
        label="torch.linalg.eig (NaN drawn at 10)",
    )
    ax.set_xlabel("t (A^0 -> t A^0; t = 1: AKLT)")
    ax.set_ylabel("relative error of d(amplitude)/dA vs FD")
    ax.set_title("Transverse correlation amplitude at an exactly degenerate pair")
    ax.legend(loc="center right")
    return fig


if __name__ == "__main__":
    result = main()
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
