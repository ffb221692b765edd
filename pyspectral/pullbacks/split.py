"""The split ``L = U g(S)``, ``R = h(S) V^H`` of a (truncated) SVD, with the
singular values absorbed (quimb's ``absorb``): ``g, h = S, 1`` ("left"),
``1, S`` ("right") or ``sqrt(S), sqrt(S)`` ("both"). Plain torch functions
(no autograd.Function); mirrors ``julia/PySpectral/src/pullbacks/split.jl``.

Derivation (the comment behind ``svd_split_pullback``). With ``P = U^H dA V``,
``A_L = U^H Lbar`` and ``B_R = Rbar V``, the pairing
``<Lbar, dL> + <Rbar, dR>`` is the SVD pullback of the cotangents
``dU = Lbar g``, ``dV^H = h Rbar``, ``dS = g' Re diag(A_L) + h' Re diag(B_R)``
(``svd_pullback``, which couples the kept triplets to the discarded ones
exactly), whose middle matrix for a pair ``i != j`` is

    M_ij = [s_j (g_j a - g_i a') - s_i (h_i b - h_j b')] / (s_j^2 - s_i^2),

``a = (A_L)_ij``, ``a' = conj (A_L)_ji``, ``b``, ``b'`` likewise of ``B_R``.
Splitting ``a``, ``b`` into Hermitian and anti-Hermitian parts, the
anti-Hermitian part of ``g A_L - h B_R`` over ``s_j - s_i`` is the 0/0 of a
degenerate pair, which ``svd_pullback`` drops inside a cluster (it vanishes
there for a loss invariant under ``L -> L Q``, ``R -> Q^H R``, ``Q`` unitary
on the cluster). Its limit is not 0: at an exact cluster the derivative of
the split along the Hermitian part of ``P`` is ``g' sym(P)``, ``h' sym(P)``
(degenerate perturbation theory in the gauge of the perturbed basis), so the
middle matrix there is ``g' sym(A_L) + h' sym(B_R) + skew(g A_L + h B_R) /
(2 s)``. ``svd_pullback`` gives the last term; this module adds the missing
Hermitian one, ``C_ij = g[s_i, s_j] sym(A_L)_ij + h[s_i, s_j] sym(B_R)_ij``
(divided differences) on the off-diagonal pairs of each kept cluster. The
sum is exact for every loss invariant under that gauge, at every spectrum.
The pushforward adds the transpose: ``U C'`` to ``dL``, ``C'' V^H`` to ``dR``
with ``C' = g[] . sym(P)``, ``C'' = h[] . sym(P)`` on the same pairs.

``sqrt`` ("both") has an infinite derivative at 0: a kept exact zero
singular value gives an infinite gradient where a cotangent reaches it,
never NaN (0 where none does).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._settings import Options
from ..common.defaults import degeneracy_tol
from ..common.safemethods import divided_difference
from .eigh import hermitian_part

__all__ = ["ABSORB", "split_weights", "svd_split_pullback", "svd_split_pushforward"]

ABSORB = ("left", "right", "both")


def split_weights(S: Tensor, absorb: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(g, g', h, h')`` on the singular values ``S`` (real, ``(*, k)``)."""
    one, zero = torch.ones_like(S), torch.zeros_like(S)
    if absorb == "left":
        return S, one, one, zero
    if absorb == "right":
        return one, zero, S, one
    root = S.sqrt()
    slope = 0.5 / root  # inf at an exact zero
    return root, slope, root, slope


def _times(w: Tensor, x: Tensor) -> Tensor:
    """``w x``, 0 where ``x`` is 0 and ``w`` infinite (an infinite weight
    reaching nothing); linear in ``x`` everywhere else, also at ``x = 0``
    (the double-backward jvp differentiates it there, at a zero cotangent)."""
    unreached = torch.isinf(w) & (x == 0)
    return torch.where(unreached, torch.zeros_like(w), w) * x


def _cluster_pairs(S: Tensor, keep: Tensor, opts: Options) -> Tensor:
    """The off-diagonal pairs ``(i, j)`` of kept singular values closer than
    the degeneracy tolerance (``(*, k, k)`` bool)."""
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    close = (S.unsqueeze(-1) - S.unsqueeze(-2)).abs() <= tol
    both = keep.unsqueeze(-1) & keep.unsqueeze(-2)
    eye = torch.eye(S.shape[-1], dtype=torch.bool, device=S.device)
    return close & both & ~eye


def _divided(S: Tensor, f: Tensor, d: Tensor) -> Tensor:
    """``f[s_i, s_j]`` for all pairs."""
    return divided_difference(
        S.unsqueeze(-1), S.unsqueeze(-2), f.unsqueeze(-1), f.unsqueeze(-2),
        d.unsqueeze(-1), d.unsqueeze(-2),
    )  # fmt: skip


def _cluster_term(
    S: Tensor, keep: Tensor, f: Tensor, df: Tensor, X: Tensor, opts: Options
) -> Tensor:
    """``f[s_i, s_j] sym(X)_ij`` on the off-diagonal pairs of each kept
    cluster, 0 elsewhere (``X``: ``(*, k, k)``)."""
    term = _times(_divided(S, f, df).to(X.dtype), hermitian_part(X))
    return torch.where(_cluster_pairs(S, keep, opts), term, torch.zeros_like(term))


def svd_split_pullback(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    keep: Tensor,
    absorb: str,
    gL: Tensor | None,
    gR: Tensor | None,
    opts: Options,
) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]:
    """The pullback of ``(L, R)`` (cotangents ``gL``: ``(*, m, k)``, ``gR``:
    ``(*, k, n)``, either may be None) at the kept triplets ``U, S, Vh``
    (``keep``: ``(*, k)`` bool, False on a batch's padding): ``(gA, gU, gS,
    gVh)``, where ``gU, gS, gVh`` are the cotangents of the triplets (for the
    SVD's own pullback; ``gS`` averaged over each kept cluster, which its
    weights check reads as a symmetric function) and ``gA`` the kept-cluster
    term that pullback cannot know (see the module's docstring), with the
    rest of ``gS``. Never modifies its inputs."""
    if gL is None and gR is None:
        return None, None, None, None
    g, dg, h, dh = split_weights(S, absorb)
    gU = gVh = None
    gS = torch.zeros_like(S)
    C = torch.zeros(*S.shape, S.shape[-1], dtype=U.dtype, device=U.device)
    if gL is not None:
        X = U.mH @ gL  # A_L
        gU = gL * g.unsqueeze(-2).to(gL.dtype)
        gS = gS + _times(dg, X.diagonal(dim1=-2, dim2=-1).real)
        C = C + _cluster_term(S, keep, g, dg, X, opts)
    if gR is not None:
        Y = gR @ Vh.mH  # B_R
        gVh = gR * h.unsqueeze(-1).to(gR.dtype)
        gS = gS + _times(dh, Y.diagonal(dim1=-2, dim2=-1).real)
        C = C + _cluster_term(S, keep, h, dh, Y, opts)
    gS = torch.where(keep, gS, torch.zeros_like(gS))
    # The SVD's pullback takes a cluster's mean of gS (a symmetric function's
    # weights: its check_weights), the split's term the rest, on the diagonal
    # of C: the same sum U (C + diag(gS)) Vh, whatever the spectrum.
    mean = _kept_cluster_mean(S, keep, gS, opts)
    C = C + torch.diag_embed(gS - mean).to(C.dtype)
    return U @ C @ Vh, gU, mean, gVh


def _kept_cluster_mean(S: Tensor, keep: Tensor, g: Tensor, opts: Options) -> Tensor:
    """``g`` averaged over each run of kept singular values (descending) whose
    adjacent gaps are within the degeneracy tolerance (0 where not kept)."""
    tol = degeneracy_tol(S, opts.degeneracy_atol)[..., 0]
    both = keep[..., 1:] & keep[..., :-1]
    joined = both & (S[..., :-1] - S[..., 1:] <= tol)
    label = torch.cat([torch.zeros_like(S[..., :1]), (~joined).to(S.dtype)], -1)
    label = label.cumsum(-1).long()
    kept = keep.to(g.dtype)
    sums = torch.zeros_like(g).scatter_add(-1, label, g * kept)
    counts = torch.zeros_like(g).scatter_add(-1, label, kept)
    mean = sums.gather(-1, label) / counts.gather(-1, label).clamp(min=1)
    return torch.where(keep, mean, torch.zeros_like(mean))


def svd_split_pushforward(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    keep: Tensor,
    absorb: str,
    dA: Tensor,
    dU: Tensor | None,
    dS: Tensor | None,
    dVh: Tensor | None,
    opts: Options,
) -> tuple[Tensor, Tensor]:
    """The tangents ``(dL, dR)`` along ``dA`` from those of the kept triplets
    (``dU``, ``dS``, ``dVh``, the SVD's pushforward; None for zero) and the
    kept-cluster term, the transpose of :func:`svd_split_pullback`."""
    g, dg, h, dh = split_weights(S, absorb)
    dL = torch.zeros_like(U)
    dR = torch.zeros_like(Vh)
    if dU is not None:
        dL = dL + dU * g.unsqueeze(-2).to(U.dtype)
    if dVh is not None:
        dR = dR + dVh * h.unsqueeze(-1).to(Vh.dtype)
    if dS is not None:
        dL = dL + U * _times(dg, dS).unsqueeze(-2).to(U.dtype)
        dR = dR + Vh * _times(dh, dS).unsqueeze(-1).to(Vh.dtype)
    P = U.mH @ dA @ Vh.mH
    dL = dL + U @ _cluster_term(S, keep, g, dg, P, opts)
    dR = dR + _cluster_term(S, keep, h, dh, P, opts) @ Vh
    return dL, dR
