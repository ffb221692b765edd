"""Differentiable TRG of the 2D Ising model
========================================

Energy and specific heat by
autograd through ``ps.svd``, against finite differences, Onsager's exact
solution and ``torch.linalg.svd``.

The square-lattice Ising model ``H = -J sum_<ij> s_i s_j`` at coupling
``K = beta J`` (``J = 1``, ``k_B = 1``: ``K = 1 / T``). Its partition function
is a network of one tensor per site, ``T_ijkl = sum_s W_si W_sj W_sk W_sl``
with ``sum_i W_si W_ti = exp(K s t)``, contracted by the tensor
renormalisation group of Levin and Nave (PRL 99, 120601 (2007)): each step
splits every tensor by a truncated SVD (bond dimension ``chi``) and
recombines the halves, halving the number of sites. ``ln Z / N`` follows
from the normalisations; the internal energy per site is
``u = -d(ln Z / N)/dK`` and the specific heat ``c = K**2 d^2(ln Z / N)/dK^2``,
both by autograd through the SVDs.

The SVDs meet exact zeros (the Ising tensor has rank 2 as a 4 x 4 matrix;
later ones, rank chi at most in chi**2 rows) and the multiplets of the
lattice's symmetry: ``torch.linalg.svd`` gives NaN gradients once zeros
repeat; ``ps.svd`` is exact, and so are its second derivatives, at the
clusters the split discards (``pyspectral/_discarded.py``) and, along
``dA/dK``, at the multiplets it keeps, which the path keeps degenerate.

Truncation, as a TRG user sets it: every split is
``ps.svd(M, k=chi, rtol=eps**0.75, multiplets="down", return_error=True)``.
``k=chi`` bounds the bond dimension; ``rtol`` drops the exact zeros (below
``eps**(3/4) s_1``: a zero carries no weight, and ``sqrt(S)`` has an infinite
derivative there); ``multiplets="down"`` never splits a degenerate multiplet
(the cut moves below it), so the bond stays at most ``chi`` and the kept
subspace does not depend on the basis chosen inside a multiplet, where
``"cut"`` would make the result basis dependent and ``"up"`` would let the
bond exceed ``chi``. Measured on this run (chi = 3 ... 16, K = 0.3, 0.4, K_c,
0.5, 0.6): no multiplet straddles the cut at chi, so the three rules give the
same numbers to the last digit: ``"down"`` costs no accuracy here and is a
guard. ``return_error=True`` gives each split's relative truncation error
``||S_discarded||_2 / ||M||_F`` from the same decomposition; ``main`` prints
the largest over the run (at chi = 8, 16 steps: 1.0e-2 at K = 0.3 and 0.6,
6.7e-2 at K_c, where the spectrum decays slowest). The number kept is
piecewise constant in ``K``, so the gradient is that of the fixed-rank
network, exact: ``u`` and ``c`` agree with central finite differences of
the same truncated ``ln Z / N`` (tests: ``u`` to 1e-6, ``c`` to 1e-5
relative, at chi = 6, 8 steps).

The second-order guard may warn: in the ordered phase a late step's two
largest singular values form a near-degenerate doublet (the two ground
states) that ``dA/dK`` splits a little, more than the guard's tolerance for
a pair, so it warns that the specific heat through that node is not exact
(a ``GaugeWarning`` naming the coupling it measured). Its effect on ``c`` is
below the finite-difference agreement printed in the table; a check local
to one SVD cannot know that, so it warns rather than stay silent. ``main``
collects the warnings of each coupling and prints them after the table,
with the coupling at which they arose.

The figure shows the energy per site from the TRG against Onsager's exact
curve, as a function of the temperature ``T = 1 / K``.

    python examples/trg_ising.py
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Callable

import torch

import pyspectral as ps

Svd = Callable[[torch.Tensor], tuple]
K_CRITICAL = 0.5 * math.log(1 + math.sqrt(2))  # Onsager: sinh(2 K_c) = 1
# Singular values at most this far below s_1 count as zeros and are dropped:
# the package's degeneracy tolerance, eps**(3/4) = 1.8e-12 in float64.
ZERO_RTOL = torch.finfo(torch.float64).eps ** 0.75


def split(
    M: torch.Tensor,
    chi: int,
    svd: Svd | None = None,
    multiplets: str = "down",
    errors: list[float] | None = None,
) -> tuple:
    """``M ~ F1 @ F3`` with ``F1 = U sqrt(S)``, ``F3 = sqrt(S) Vh`` over the
    singular values that ``ps.svd(M, k=chi, rtol=ZERO_RTOL,
    multiplets=multiplets, return_error=True)`` keeps: at most ``chi``, none
    below ``ZERO_RTOL * s_1`` (``sqrt`` has an infinite derivative at 0, and a
    zero carries no weight), and with ``multiplets="down"`` no part of a
    degenerate multiplet (the cut moves down to its lower edge). The
    relative truncation error ``||S_discarded||_2 / ||M||_F`` is appended to
    ``errors`` if given.

    ``svd``: another decomposition (``torch.linalg.svd``) for comparison; its
    factors are cut by the same rule, applied by :func:`rank` to its ``S``."""
    if svd is None:
        U, S, Vh, _, rel, _ = ps.svd(
            M, k=chi, rtol=ZERO_RTOL, multiplets=multiplets, return_error=True
        )
        r = S.shape[-1]
    else:
        U, S, Vh = svd(M)
        r = rank(S.detach(), chi, multiplets)
        rel = S[r:].detach().norm() / S.detach().norm()
        U, S, Vh = U[:, :r], S[:r], Vh[:r]
    if errors is not None:
        errors.append(float(rel.detach()))
    root = S.sqrt()
    return U * root, root[:, None] * Vh


def rank(S: torch.Tensor, chi: int, multiplets: str = "down") -> int:
    """The number of singular values ``ps.svd``'s rule keeps from a
    descending ``S``: those above ``ZERO_RTOL * s_1``, at most ``chi``, the
    cut then moved below a multiplet it splits (``"down"``; gaps at most
    ``s_1 eps**(3/4)`` join a multiplet) or above it (``"up"``)."""
    tol = float(S[0]) * ZERO_RTOL
    r = min(chi, int((S > tol).sum()))
    step = {"down": -1, "up": 1}.get(multiplets, 0)
    while step and 0 < r < S.numel() and float(S[r - 1] - S[r]) <= tol:
        r += step  # the cut after r values splits a multiplet
    return r


def ising_tensor(K: torch.Tensor) -> torch.Tensor:
    """The site tensor ``T_ijkl = sum_s W_si W_sj W_sk W_sl`` with
    ``W = [[sqrt(cosh K), sqrt(sinh K)], [sqrt(cosh K), -sqrt(sinh K)]]``
    (rows: the spin ``s = +1, -1``), so that ``sum_i W_si W_ti = exp(K s t)``
    (``K > 0``)."""
    c, s = K.cosh().sqrt(), K.sinh().sqrt()
    W = torch.stack([torch.stack([c, s]), torch.stack([c, -s])])
    return torch.einsum("ai,aj,ak,al->ijkl", W, W, W, W)


def lnz(
    K: torch.Tensor,
    chi: int = 8,
    steps: int = 12,
    svd: Svd | None = None,
    multiplets: str = "down",
    errors: list[float] | None = None,
) -> torch.Tensor:
    """``ln Z / N`` of the Ising model at coupling ``K`` by ``steps`` TRG steps
    of bond dimension ``chi`` (``2**steps`` sites, periodic), differentiable
    in ``K`` through the truncated SVDs of :func:`split` (``ps.svd``, or
    ``svd`` cut by the same rule). Each split's relative truncation error is
    appended to ``errors`` if given (two per step)."""
    T = ising_tensor(K)
    out = torch.zeros((), dtype=T.dtype)
    for n in range(steps):
        m = T.abs().max()  # normalise: ln m per tensor, 2**-n tensors per site
        T = T / m
        out = out + m.log() / 2**n
        d = T.shape[0]
        F1, F3 = split(T.reshape(d * d, d * d), chi, svd, multiplets, errors)
        F2, F4 = split(
            T.permute(1, 2, 3, 0).reshape(d * d, d * d), chi, svd, multiplets, errors
        )
        T = torch.einsum(
            "axw,byx,zyc,wze->abce",
            F3.reshape(-1, d, d),
            F4.reshape(-1, d, d),
            F1.reshape(d, d, -1),
            F2.reshape(d, d, -1),
        )
    return out + torch.einsum("ijij->", T).log() / 2**steps


def observables(
    K: float,
    chi: int = 8,
    steps: int = 12,
    multiplets: str = "down",
    errors: list[float] | None = None,
) -> tuple[float, float, float]:
    """``(ln Z / N, u, c)`` at ``K`` by TRG, ``u = -d(ln Z/N)/dK`` and
    ``c = K**2 d^2(ln Z/N)/dK^2`` by autograd: forward over reverse
    (``torch.func.jvp`` of ``torch.func.grad``), whose second-order check sees
    the direction ``dA/dK`` of every SVD. Along it the Ising tensor's symmetry
    multiplets stay degenerate, so nothing is dropped there and nothing is
    reported; double backward (``create_graph``) gives the same numbers but
    cannot see that direction, and warns at the multiplets the loss keeps."""
    k = torch.tensor(K, dtype=torch.float64)
    (g, f), (h, _) = torch.func.jvp(
        torch.func.grad_and_value(
            lambda x: lnz(x, chi, steps, None, multiplets, errors)
        ),
        (k,),
        (torch.ones_like(k),),
    )
    return f.item(), -g.item(), K**2 * h.item()


def finite_differences(
    K: float,
    chi: int = 8,
    steps: int = 12,
    h: float = 1e-4,
    multiplets: str = "down",
) -> tuple[float, float]:
    """``(u, c)`` by central differences of ``lnz`` (step ``h``)."""

    def f(x: float) -> float:
        with torch.no_grad():
            K = torch.tensor(x, dtype=torch.float64)
            return lnz(K, chi, steps, None, multiplets).item()

    fp, f0, fm = f(K + h), f(K), f(K - h)
    return -(fp - fm) / (2 * h), K**2 * (fp - 2 * f0 + fm) / h**2


# ------------------------------------------------------------ Onsager


def onsager_lnz(K: float, nodes: int = 2000) -> float:
    """Onsager's exact ``ln Z / N`` of the square-lattice Ising model in the
    thermodynamic limit (zero field, ``J = 1``), in its single-integral form

        ln Z / N = ln(2 cosh 2K)
                   + 1/(2 pi) int_0^pi ln[(1 + sqrt(1 - k^2 sin^2 t)) / 2] dt,

    ``k = 2 sinh 2K / cosh^2 2K`` (L. Onsager, Phys. Rev. 65, 117 (1944); this
    form as in K. Huang, Statistical Mechanics, 2nd ed., Wiley 1987, the
    chapter on the Onsager solution), by the midpoint rule on ``nodes``
    points: the integrand is smooth and periodic for ``K != K_c`` (spectral
    accuracy); at ``K_c`` (``k = 1``) it has a kink, and the rule converges
    like ``nodes**-2``."""
    k = 2 * math.sinh(2 * K) / math.cosh(2 * K) ** 2
    t = (torch.arange(nodes, dtype=torch.float64) + 0.5) * (math.pi / nodes)
    inner = ((1 + (1 - (k * t.sin()) ** 2).clamp_min(0).sqrt()) / 2).log()
    return math.log(2 * math.cosh(2 * K)) + inner.mean().item() / 2


def _elliptic_k(k: float) -> float:
    """The complete elliptic integral of the first kind ``K(k)`` (modulus
    ``k < 1``) by the arithmetic-geometric mean, ``pi / (2 AGM(1, k'))``."""
    a, b = 1.0, math.sqrt(1 - k * k)
    # quadratic convergence: 6 steps reach rounding for k' >= 1e-10; a fixed
    # count, because in floating point a and b may end up alternating between
    # two neighbours and never meet a tolerance below one ulp
    for _ in range(64):
        a, b = (a + b) / 2, math.sqrt(a * b)
        if abs(a - b) <= 4 * math.ulp(a):
            break
    return math.pi / (2 * a)


def onsager_energy(K: float) -> float:
    """Onsager's internal energy per site ``u = -d(ln Z/N)/dK``:

        u = -coth(2K) [1 + (2/pi) (2 tanh^2(2K) - 1) K1(k)],

    ``K1`` the complete elliptic integral of the first kind of modulus
    ``k = 2 sinh 2K / cosh^2 2K`` (same sources as :func:`onsager_lnz`);
    at ``K_c`` the second term vanishes and ``u = -sqrt(2)``."""
    k = 2 * math.sinh(2 * K) / math.cosh(2 * K) ** 2
    if k >= 1:
        return -1 / math.tanh(2 * K)
    t2 = math.tanh(2 * K) ** 2
    return -(1 / math.tanh(2 * K)) * (1 + (2 / math.pi) * (2 * t2 - 1) * _elliptic_k(k))


# ---------------------------------------------------------------- run


def torch_svd(M: torch.Tensor) -> tuple:
    return torch.linalg.svd(M, full_matrices=False)


def torch_energy(
    K: float, chi: int = 8, steps: int = 12, multiplets: str = "down"
) -> float:
    """``u`` by autograd through ``torch.linalg.svd`` on the same run (the
    same truncation, by :func:`rank`): NaN once an SVD has repeated exact
    zeros (from the fifth step at ``chi = 6``), where its backward divides 0
    by their zero gaps."""
    k = torch.tensor(K, dtype=torch.float64, requires_grad=True)
    f = lnz(k, chi, steps, torch_svd, multiplets)
    (g,) = torch.autograd.grad(f, k)
    return -g.item()


def main(
    couplings: tuple[float, ...] = (0.3, 0.4, K_CRITICAL, 0.5, 0.6),
    chi: int = 8,
    steps: int = 16,
    multiplets: str = "down",
) -> list[dict[str, float]]:
    """Print and return, per coupling: ``ln Z / N`` (TRG, Onsager), ``u``
    (autograd, finite differences, Onsager, through torch.linalg.svd), ``c``
    (autograd, finite differences) and the largest relative truncation error
    ``||S_discarded||_2 / ||M||_F`` of the run's ``2 * steps`` splits."""
    rows = []
    print(
        f"TRG of the 2D Ising model, chi = {chi}, {steps} steps (2**{steps} "
        f"sites), multiplets={multiplets!r}"
    )
    head = "    K   lnZ/N TRG  Onsager     u autograd  u FD        u Onsager"
    print(head + "   u torch.linalg  c autograd  c FD        max trunc. err")
    met: list[tuple[float, str]] = []
    for K in couplings:
        errors: list[float] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ps.GaugeWarning)
            f, u, c = observables(K, chi, steps, multiplets, errors)
        met += [(K, str(w.message)) for w in caught]
        u_fd, c_fd = finite_differences(K, chi, steps, multiplets=multiplets)
        row = dict(
            K=K,
            lnz=f,
            lnz_onsager=onsager_lnz(K),
            u=u,
            u_fd=u_fd,
            u_onsager=onsager_energy(K),
            u_torch=torch_energy(K, chi, steps, multiplets),
            c=c,
            c_fd=c_fd,
            truncation_error=max(errors),
            warnings=sum(k == K for k, _ in met),
        )
        rows.append(row)
        print(
            f"{K:6.4f}  {f:.7f}  {row['lnz_onsager']:.7f}  {u:+.7f}  {u_fd:+.7f}"
            f"  {row['u_onsager']:+.7f}  {row['u_torch']:14.7f}  {c:10.6f}"
            f"  {c_fd:10.6f}  {max(errors):.2e}"
        )
    if met:
        print(
            f"{len(met)} GaugeWarning(s) of the second-order guard (see the docstring):"
        )
        for K, message in met:
            print(f"  K = {K:.4f}: {message.split(', and ')[0]}")
    return rows


def figure(result: list[dict[str, float]]):
    """The energy per site against the temperature: TRG, and Onsager's curve."""
    import matplotlib.pyplot as plt

    T = [1 / r["K"] for r in result]
    lo, hi = 0.9 * min(T), 1.1 * max(T)
    grid = [lo + (hi - lo) * i / 400 for i in range(401)]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(grid, [onsager_energy(1 / t) for t in grid], "k-", lw=1, label="Onsager")
    ax.axvline(1 / K_CRITICAL, color="0.6", ls=":", label="T_c")
    ax.plot(T, [r["u"] for r in result], "o", mfc="none", ms=8, label="TRG, ps.svd")
    torch_ = [(t, r["u_torch"]) for t, r in zip(T, result)]
    finite = [(t, u) for t, u in torch_ if math.isfinite(u)]
    label = "TRG, torch.linalg.svd"
    if len(finite) < len(torch_):
        nan = len(torch_) - len(finite)
        label += f": NaN at {nan} of {len(torch_)} temperatures"
    ax.plot([t for t, _ in finite], [u for _, u in finite], "x", ms=8, label=label)
    ax.set_xlabel("temperature T = 1/K")
    ax.set_ylabel("energy per site u = -d(ln Z/N)/dK")
    ax.set_title("2D Ising model: energy by autograd through the TRG")
    ax.legend()
    return fig


if __name__ == "__main__":
    result = main()
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
