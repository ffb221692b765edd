"""Differentiable CTMRG of the 2D Ising model
==========================================

``ln Z`` per site by the corner transfer matrix renormalisation group
(C4v-symmetric), its derivative ``d ln Z / dK`` by implicit differentiation
of the fixed point with ``ps.fixed_point``, against Onsager's exact
solution, finite differences and autograd through the unrolled iteration.

The partition function of the square-lattice Ising model at coupling
``K = beta J`` is the network of the site tensor ``a`` of the TRG example
(``examples/trg_ising.py``: ``a_uldr = sum_s W_su W_sl W_sd W_sr``, fully
symmetric in its legs). CTMRG (Nishino and Okunishi, J. Phys. Soc. Jpn. 65,
891 (1996)) describes the environment of one site by a corner ``C``
(``chi x chi``, symmetric) and an edge ``T`` (``chi x 2 x chi``): one step
grows the corner by an edge on each side and a site,
``M = C T T a`` (a ``2 chi x 2 chi`` symmetric matrix), keeps the ``chi``
eigenpairs of largest magnitude ``M ~ U diag(lam) U^T`` by ``ps.eigh(M,
k=chi, by="magnitude")`` and renormalises, ``C' = diag(lam)``,
``T' = U^T (T a) U``, each divided by its norm. At the fixed point

    ln Z / N = ln(Z1 Z4 / Z2^2),

``Z1`` the 3 x 3 patch (four corners, four edges, one site), ``Z2`` the
3 x 2 patch without the site and ``Z4 = tr C^4``.

Fixed point. The step is a fixed point only up to a gauge: the signs of the
eigenvectors, and rotations inside the corner's near-degenerate multiplets
(the corner spectrum of the Ising model has them: at chi = 16, K = 0.3, a
pair split by 3e-9 of its value). The gauge fix compares the step's edge
``T'`` with the current one ``T``: the dominant fixed point ``X`` of the
mixed transfer map ``X -> sum_r T'_r X T_r^T`` is ``Q rho`` where
``T' = Q T Q^T`` (``rho`` the positive fixed point of ``T``'s own map), so
the polar factor of ``X`` is the gauge ``Q``, and ``Q^T (C', T') Q`` is
compared element-wise (as PEPSKit and Francuz et al., PRR 7, 013237 (2025)
fix the gauge). ``ps.fixed_point`` freezes ``Q`` at convergence and
differentiates ``x* = Q^T step(x*) Q`` implicitly: one GMRES solve with the
step's vjp, whatever the number of iterations.

Degeneracy. Inside a multiplet of the corner the eigenvectors' rotation is
this gauge, so the eigh backward drops it: ``degeneracy_atol`` is
``1e-8 max|M|``, the multiplets' splitting above, and ``gauge="ignore"``,
because the frozen gauge makes the incoming gradient depend on the basis
inside them, which is the gauge the fixed point removes (checked: the
derivative agrees with Onsager's internal energy to 1e-14 at K = 0.3 and
0.6, chi = 16; taken as distinct, the 1/3e-12 quotients make the implicit
solve fail, a ``DerivativeError``).

``main`` prints, for K = 0.3 and 0.6 (either side of K_c = 0.4407) and
chi = 16, ``ln Z / N`` and the internal energy ``u = -d(ln Z / N)/dK``
against Onsager's, the central finite difference, autograd through the
unrolled iteration (the same steps with the graph kept: its saved tensors
beside the implicit gradient's) and the same unrolled iteration with
``torch.linalg.eigh``. Measured (2 cores): ``ln Z / N`` and ``u`` within
2e-15 and 1e-14 of Onsager's at both couplings; the finite difference
(h = 1e-4) within 2e-8; the unrolled gradient within 5e-15 of the implicit
one, with 15.2 MB of saved tensors against 0.26 MB; forward 2 s (the gauge
fix's power iterations most of it), backward 0.2-0.5 s. ``torch.linalg.eigh``
in the unrolled iteration gives the same number (these spectra have no
exact degeneracy inside the kept part), at the unrolled memory: torch has
no implicit route. At chi = 24 the ordered phase stalls at a relative change
of 3e-9 (the floor its corner's near-degenerate multiplets set), so
``fixed_point`` warns, and ``u`` is still within 2e-15 of Onsager's; the
chi at which no multiplet straddles the cut (printed by the spectrum of
``M``) is the one to use.

    python examples/ctmrg_ising.py
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import pyspectral as ps

# The site tensor and Onsager's formulas are the TRG example's.
# sphinx-gallery runs an example from its own folder, without __file__
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
sys.path.insert(0, str(HERE))
from trg_ising import ising_tensor, onsager_energy, onsager_lnz  # noqa: E402

State = tuple[torch.Tensor, torch.Tensor]
Eigh = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]

# Relative splitting below which corner eigenvalues count as one multiplet.
DEGENERACY = 1e-8


def ps_eigh(M: torch.Tensor, chi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``chi`` eigenpairs of largest magnitude, largest first."""
    tol = DEGENERACY * float(M.detach().abs().max())
    return ps.eigh(
        M, k=min(chi, M.shape[0]), by="magnitude", degeneracy_atol=tol, gauge="ignore"
    )


def torch_eigh(M: torch.Tensor, chi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same pairs from ``torch.linalg.eigh`` (the full decomposition)."""
    lam, U = torch.linalg.eigh(M)
    keep = lam.detach().abs().argsort(descending=True)[: min(chi, M.shape[0])]
    return lam[keep], U[:, keep]


def initial(a: torch.Tensor) -> State:
    """Open boundaries: the corner and edge of one site (``chi = 2``)."""
    C = a.sum((0, 1))  # a_uldr summed over u, l: C_dr
    T = a.sum(1).permute(0, 2, 1)  # over l: T_(u)(r)(d), up, inward, down
    return C / C.norm(), T / T.norm()


def step(state: State, a: torch.Tensor, chi: int, eigh: Eigh = ps_eigh) -> State:
    """One C4v CTMRG step: the enlarged corner, its ``chi`` dominant
    eigenpairs, the renormalised corner and edge (each of norm 1). The
    eigenvectors' signs are fixed (largest entry positive)."""
    C, T = state
    D = a.shape[0]
    CT = torch.einsum("ab,buc->auc", C, T)  # corner and the upper edge
    M = torch.einsum("alx,auc,uldr->xdcr", T, CT, a)  # and the left edge, a site
    n = M.shape[0] * D
    M = M.reshape(n, n)
    lam, U = eigh((M + M.mT) / 2, chi)
    big = U.detach().abs().argmax(0, keepdim=True)
    U = U * U.detach().gather(0, big).sign()
    E = torch.einsum("apb,updr->aurbd", T, a).reshape(n, D, n)  # edge and a site
    T = torch.einsum("ia,irj,jb->arb", U, E, U)
    C = torch.diag(lam)
    return C / C.norm(), T / T.norm()


def gauge(new: State, ref: State, tol: float = 1e-15, maxiter: int = 2000):
    """The gauge fix of ``new`` against ``ref`` (see the module docstring):
    ``Q``, the polar factor of the dominant fixed point of
    ``X -> sum_r T'_r X T_r^T``, as a function applying ``Q^T . Q``."""
    Tn, Tr = new[1], ref[1]
    X = torch.eye(Tn.shape[0], dtype=Tn.dtype)
    for _ in range(maxiter):
        Y = torch.einsum("arb,bc,drc->ad", Tn, X, Tr)
        Y = Y / Y.norm()
        done = float((Y - X).norm()) <= tol
        X = Y
        if done:
            break
    W, _, Vh = torch.linalg.svd(X)
    Q = W @ Vh

    def fix(state: State) -> State:
        C, T = state
        return Q.mT @ C @ Q, torch.einsum("ia,irj,jb->arb", Q, T, Q)

    return fix


def grow(a: torch.Tensor, chi: int) -> State:
    """From open boundaries to bond dimension ``chi`` (no gradient: the fixed
    point does not depend on where the iteration starts)."""
    with torch.no_grad():
        state = initial(a)
        while state[0].shape[0] < chi:
            state = step(state, a, chi)
    return state


def lnz_per_site(state: State, a: torch.Tensor) -> torch.Tensor:
    """``ln(Z1 Z4 / Z2^2)`` from the corner and edge."""
    C, T = state
    R = torch.einsum("ab,buc,cg->aug", C, T, C)  # a row: corner, edge, corner
    Z1 = torch.einsum("aug,alb,grh,uldr,bdh->", R, T, T, a, R)
    Z2 = (R * R).sum()
    C2 = C @ C
    Z4 = (C2 * C2).sum()
    return Z1.log() + Z4.log() - 2 * Z2.log()


def lnz(K: torch.Tensor, chi: int = 16, tol: float = 1e-10) -> torch.Tensor:
    """``ln Z / N`` at the CTMRG fixed point, differentiable in ``K`` by the
    implicit function theorem (``ps.fixed_point``)."""
    a = ising_tensor(K)
    state = ps.fixed_point(
        lambda s: step(s, a, chi), grow(a, chi), tol=tol, gauge_fix=gauge, maxiter=500
    )
    return lnz_per_site(state, a)


def lnz_unrolled(
    K: torch.Tensor, chi: int = 16, steps: int = 150, eigh: Eigh = ps_eigh
) -> torch.Tensor:
    """The same ``ln Z / N`` after ``steps`` gauge-fixed steps from the grown
    environment, with autograd's graph through every one of them."""
    a = ising_tensor(K)
    state = grow(a, chi)
    for _ in range(steps):
        new = step(state, a, chi, eigh)
        with torch.no_grad():
            fix = gauge(new, state)
        state = fix(new)
    return lnz_per_site(state, a)


def energy(f: Callable[[torch.Tensor], torch.Tensor], K: float) -> dict[str, float]:
    """``u = -d f / dK`` by autograd, its time and the bytes of the tensors
    autograd saved for it."""
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    x = torch.tensor(K, dtype=torch.float64, requires_grad=True)
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        value = f(x)
    middle = time.perf_counter()
    (g,) = torch.autograd.grad(value, x)
    end = time.perf_counter()
    return {
        "lnz": float(value.detach()),
        "u": -float(g),
        "forward_s": middle - start,
        "backward_s": end - middle,
        "saved_bytes": float(saved[0]),
    }


def finite_difference(K: float, chi: int, h: float = 1e-4) -> float:
    """``-(f(K + h) - f(K - h)) / 2h`` of the same CTMRG ``ln Z / N``."""
    with torch.no_grad():
        fp = float(lnz(torch.tensor(K + h, dtype=torch.float64), chi))
        fm = float(lnz(torch.tensor(K - h, dtype=torch.float64), chi))
    return -(fp - fm) / (2 * h)


def main(
    couplings: tuple[float, ...] = (0.3, 0.6), chi: int = 16, steps: int = 150
) -> list[dict[str, float]]:
    rows = []
    for K in couplings:
        implicit = energy(lambda x: lnz(x, chi), K)
        unrolled = energy(lambda x: lnz_unrolled(x, chi, steps), K)
        torch_u = float("nan")
        try:
            torch_u = energy(lambda x: lnz_unrolled(x, chi, steps, torch_eigh), K)["u"]
        except RuntimeError as err:  # torch.linalg.eigh's backward may raise
            print(f"torch.linalg.eigh at K = {K}: {err}")
        rows.append(
            dict(
                K=K,
                lnz=implicit["lnz"],
                lnz_onsager=onsager_lnz(K),
                u=implicit["u"],
                u_onsager=onsager_energy(K),
                u_fd=finite_difference(K, chi),
                u_unrolled=unrolled["u"],
                u_torch=torch_u,
                forward_s=implicit["forward_s"],
                backward_s=implicit["backward_s"],
                saved_bytes=implicit["saved_bytes"],
                unrolled_saved_bytes=unrolled["saved_bytes"],
            )
        )
    print(f"CTMRG, chi = {chi}; unrolled: {steps} steps")
    print(
        "   K    ln Z/N - Onsager   u (implicit)   u - Onsager   u_fd - u   "
        "u_unrolled - u   u_torch - u   fwd s   bwd s   saved MB (unrolled)"
    )
    for r in rows:
        print(
            f"{r['K']:5.2f}  {r['lnz'] - r['lnz_onsager']:+.2e}  {r['u']:+.12f}"
            f"  {r['u'] - r['u_onsager']:+.2e}  {r['u_fd'] - r['u']:+.2e}"
            f"  {r['u_unrolled'] - r['u']:+.2e}  {r['u_torch'] - r['u']:+.2e}"
            f"  {r['forward_s']:6.2f}  {r['backward_s']:6.2f}"
            f"  {r['saved_bytes'] / 2**20:.2f}"
            f" ({r['unrolled_saved_bytes'] / 2**20:.1f})"
        )
    return rows


def figure(result: list[dict[str, float]]):
    """The internal energy's distance to Onsager's, for the implicit gradient,
    the unrolled one and the finite difference, at each coupling (log scale)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    labels = ["implicit", "unrolled", "finite difference"]
    keys = ["u", "u_unrolled", "u_fd"]
    width = 0.25
    for i, (label, key) in enumerate(zip(labels, keys, strict=True)):
        errors = [max(abs(r[key] - r["u_onsager"]), 1e-17) for r in result]
        ax.bar([j + i * width for j in range(len(result))], errors, width, label=label)
    ax.set_xticks([j + width for j in range(len(result))])
    ax.set_xticklabels([f"K = {r['K']}" for r in result])
    ax.set_yscale("log")
    ax.set_xlabel("coupling")
    ax.set_ylabel("|u - u_Onsager|")
    ax.set_title("CTMRG internal energy against Onsager")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    result = main()
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib.pyplot as plt

        figure(result)
        plt.show()
