"""The split ``L = U g(S)``, ``R = h(S) V^H`` of a (truncated) SVD, with the
singular values absorbed (quimb's ``absorb``): ``g, h = S, 1`` ("left"),
``1, S`` ("right") or ``sqrt(S), sqrt(S)`` ("both"). Plain torch functions
(no autograd.Function); mirrors ``julia/PySpectral/src/pullbacks/split.jl``.

Derivation (docs/math.md, "The split at every gap"). With ``X = U^H Lbar``
(``A_L``), ``Y = Rbar V`` (``B_R``), the pairing ``<Lbar, dL> + <Rbar, dR>``
is the SVD pullback of ``gU = Lbar g``, ``gVh = h Rbar``, ``gS = g' Re diag
X + h' Re diag Y``, whose numerators split as

    (J_a + K_a)_ij = (W - W^H)_ij + (g_j - g_i)(X + X^H)_ij + (h_j - h_i)(Y + Y^H)_ij
    (J_a - K_a)_ij = -beta (W - W^H)_ij + Dd_ij

with ``W = g X - Y h = L^H Lbar - Rbar R^H``, the generator of the bond gauge
``L -> L (1 + E)``, ``R -> (1 - E) R``: its anti-Hermitian part vanishes for
every loss invariant under a unitary ``E`` (``W = 0`` for any loss of
``L @ R``), at every spectrum. The rest, divided by ``2 (s_j - s_i)`` and
``2 (s_j + s_i)``, are divided differences of ``g`` and ``h`` (``_pair_terms``),
which the SVD's quotient computes with the rounding of ``X``, ``Y`` over a
small gap (``eps / gap``: 6.7e-5 at 1e-11) or cuts where ``s_i + s_j <= tol``
(kept zeros). So this pullback moves them out of ``gU``, ``gVh`` (by ``U
D_U``, ``D_V Vh``) and adds them as ``U C Vh``: the SVD then sees ``+-(W -
W^H)``, zero to rounding for an invariant loss (cut there), dropped and
measured inside a cluster, where it is exactly the gauge check's quantity.
The complement terms of kept values the SVD's pseudo-inverse cuts are added
as ``g[s, 0]`` (``h[s, 0]``). The pushforward adds the transposes where the
SVD's pushforward cuts (cluster pairs; ``s_i + s_j <= tol``; the
complement of values ``<= tol``); at a cluster that is the derivative along
the tangent-adapted basis, exact for invariant outputs whatever basis was
returned.

``sqrt`` ("both") has an infinite derivative at 0: a kept exact zero
singular value gives an infinite gradient where a cotangent reaches it,
never NaN (0 where none does).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._settings import Options
from ..common.defaults import degeneracy_tol, peek
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


def _kept_pairs(keep: Tensor, diagonal: bool = False) -> Tensor:
    """The pairs ``(i, j)`` of kept triplets (``(*, k, k)``), off the
    diagonal unless ``diagonal``."""
    both = keep.unsqueeze(-1) & keep.unsqueeze(-2)
    if diagonal:
        return both
    eye = torch.eye(keep.shape[-1], dtype=torch.bool, device=keep.device)
    return both & ~eye


def _on(mask: Tensor, X: Tensor) -> Tensor:
    return torch.where(mask, X, torch.zeros_like(X))


def _sums(S: Tensor, f: Tensor, df: Tensor, odd: bool) -> Tensor:
    """``(f_i + f_j) / (s_i + s_j)`` (``odd``: the divided difference
    ``f[s_i, -s_j]`` of the odd extension) or ``(f_i - f_j) / (s_i + s_j)``
    (of the even one; 0 where ``f_i = f_j``, also at ``s_i = s_j = 0``)."""
    Si, Sj, fi, fj = S.unsqueeze(-1), S.unsqueeze(-2), f.unsqueeze(-1), f.unsqueeze(-2)
    di, dj = df.unsqueeze(-1), df.unsqueeze(-2)
    if odd:
        return divided_difference(Si, -Sj, fi, -fj, di, dj)
    q = divided_difference(Si, -Sj, fi, fj, di, -dj)
    return torch.where(fi == fj, torch.zeros_like(q), q)


def _skew_part(X: Tensor) -> Tensor:
    return (X - X.mH) * 0.5


# Which part of the numerator J_a - K_a over s_j + s_i the split takes over
# (the module's docstring): beta = +1 where g(0) = 0 (g's odd divided
# differences and h's even ones; "left", "both"), -1 where h(0) = 0 and
# g(0) = 1 ("right"). Either is exact; the other would be 1/0 at a kept zero.
_BETA = {"left": 1, "right": -1, "both": 1}


# The pairs whose numerator J_a + K_a the split takes over: relative gap at
# most NEAR. Within it the SVD's quotient carries the rounding of its
# numerator over a small gap; outside it that rounding is at most eps / NEAR
# of the term. Moving a numerator rewrites gU by U D_U, whose rounding
# (eps |D_U|) reaches the complement terms (a 1 / s_j): within the window
# |D_U| is at most NEAR s_j |g'| |A_L| there, so that costs nothing either.
# 1/64: outside, 64 eps (1.4e-14 in float64; float32's 7.6e-6, about its
# eps**(3/4)); narrow, so that a spectrum with no pair that close (most, at
# tensor-network sizes) takes the pullback's short path, nothing moved.
NEAR = 1 / 64


def _moved_pairs(S: Tensor, keep: Tensor, opts: Options) -> tuple[Tensor, Tensor]:
    """``(near, low)``: the off-diagonal kept pairs within :data:`NEAR` of
    each other (relative gap), and the kept pairs, diagonal included, with
    ``s_i + s_j`` at or below the degeneracy tolerance (whose ``1 / (s_i +
    s_j)`` the SVD's pullback cuts)."""
    Si, Sj = S.unsqueeze(-1), S.unsqueeze(-2)
    near = (Si - Sj).abs() <= NEAR * torch.maximum(Si, Sj)
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    low = Si + Sj <= tol
    if opts.broadening is not None:  # its smooth inverses stand as they are
        low = torch.zeros_like(low)
    return near & _kept_pairs(keep), low & _kept_pairs(keep, diagonal=True)


def _pair_terms(
    S: Tensor,
    pairs: tuple[Tensor, Tensor | None],
    f: Tensor,
    df: Tensor,
    X: Tensor,
    left: bool,
    beta: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """The split's terms of one factor (``left``: ``L``'s weights ``f = g``
    and ``X = A_L``; else ``R``'s, ``f = h``, ``X = B_R``) on the ``pairs``
    of :func:`_moved_pairs`: ``(C, Da, Dd)``, ``C`` the middle-matrix term
    and ``Da``, ``Dd`` the parts of ``J_a + K_a``, ``J_a - K_a`` it replaces
    (anti-Hermitian; ``Da = 2 (s_j - s_i) C_a``, ``Dd = 2 (s_j + s_i) C_d``)."""
    near, low = pairs
    dt = X.dtype
    H, K = hermitian_part(X), _skew_part(X)
    fi, fj = f.unsqueeze(-1).to(dt), f.unsqueeze(-2).to(dt)
    # J_a + K_a: (f_j - f_i) (X + X^H) over s_j - s_i, a divided difference
    C = _on(near, _times(_divided(S, f, df).to(dt), H))
    Da = _on(near, (fj - fi) * (X + X.mH))
    if low is None:  # no kept pair with s_i + s_j <= tol: nothing more moves
        return C, Da, torch.zeros_like(Da)
    # J_a - K_a: which part (beta) depends on the factor's side
    if (beta > 0) == left:  # f's odd differences on the anti-Hermitian part
        C = C + _on(low, _times(_sums(S, f, df, True).to(dt), K))
        Dd = _on(low, (fi + fj) * (X - X.mH))
    else:  # f's even differences on the Hermitian part (L's with a minus)
        sign = -1 if left else 1
        C = C + sign * _on(low, _times(_sums(S, f, df, False).to(dt), H))
        Dd = sign * _on(low, (fi - fj) * (X + X.mH))
    return C, Da, Dd


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
    gVh)``, where ``gU, gS, gVh`` are cotangents for the SVD's own pullback
    (``gS`` averaged over each kept cluster, which its weights check reads
    as a symmetric function; ``gU``, ``gVh`` with the well-conditioned part
    of the kept pairs moved out, so that the numerators that pullback
    divides by ``s_j -+ s_i`` are the gauge generator ``skew(g A_L - B_R
    h)``: zero to rounding for a gauge-invariant loss, cut there, dropped at
    a cluster and measured) and ``gA`` the rest: the divided-difference
    terms of every kept pair, the complement terms of kept singular values
    the SVD's pseudo-inverse cuts, and the rest of ``gS`` (see the module's
    docstring). Never modifies its inputs."""
    if gL is None and gR is None:
        return None, None, None, None
    g, dg, h, dh = split_weights(S, absorb)
    beta = _BETA[absorb]
    gU = gVh = None
    gS = torch.zeros_like(S)
    cut = _cut_singular_values(S, keep, opts)
    pairs = _moved_pairs(S, keep, opts)
    # (one host read: with no kept pair near another, and none low, nothing
    # moves and no kept cluster exists, so the terms below are all zero)
    # (peeked before any(): under vmap the masks carry the batch)
    flags = torch.stack([peek(p).any() for p in pairs]).tolist()
    any_near, any_low = flags
    moved = any_near or any_low
    if not any_low:  # (then _pair_terms skips the low pairs' sums)
        pairs = (pairs[0], None)
    if moved:
        C = torch.zeros(*S.shape, S.shape[-1], dtype=U.dtype, device=U.device)
        Da = torch.zeros_like(C)
        Dd = torch.zeros_like(C)
    k = S.shape[-1]
    extra = None
    if gL is not None:
        X = U.mH @ gL  # A_L
        gU = gL * g.unsqueeze(-2).to(gL.dtype)
        gS = gS + _times(dg, X.diagonal(dim1=-2, dim2=-1).real)
        if moved:
            terms = _pair_terms(S, pairs, g, dg, X, True, beta)
            C, Da, Dd = C + terms[0], Da + terms[1], Dd + terms[2]
        if cut is not None and U.shape[-2] > k:  # tall: (I - U U^H) gL g[s, 0]
            w = _on(cut, _zero_divided(S, g, absorb, True)).unsqueeze(-2)
            extra = (_times(w.to(gL.dtype), gL - U @ X)) @ Vh
    if gR is not None:
        Y = gR @ Vh.mH  # B_R
        gVh = gR * h.unsqueeze(-1).to(gR.dtype)
        gS = gS + _times(dh, Y.diagonal(dim1=-2, dim2=-1).real)
        if moved:
            terms = _pair_terms(S, pairs, h, dh, Y, False, beta)
            C, Da, Dd = C + terms[0], Da + terms[1], Dd + terms[2]
        if cut is not None and Vh.shape[-1] > k:  # wide: h[s, 0] (I - V V^H) gR
            w = _on(cut, _zero_divided(S, h, absorb, False)).unsqueeze(-1)
            term = U @ _times(w.to(gR.dtype), gR - Y @ Vh)
            extra = term if extra is None else extra + term
    # J = U^H gU, K = V^H gV lose D_U = (Da + Dd) / 4, D_V = (Da - Dd) / 4
    # (anti-Hermitian): J_a + K_a loses Da, J_a - K_a loses Dd, and the parts
    # of gU, gVh outside the spans of U, V, which the complement and
    # truncation terms read, are unchanged. U C Vh adds the quotients back as
    # divided differences: exact where the SVD's quotient carried the
    # rounding of Da over a small gap or cut Dd over s_j + s_i <= tol.
    gS = torch.where(keep, gS, torch.zeros_like(gS))
    if not moved:  # no pair to move, no kept cluster: the mean is gS, C = 0
        gA = torch.zeros(*U.shape[:-1], Vh.shape[-1], dtype=U.dtype, device=U.device)
        return (gA if extra is None else extra), gU, gS, gVh
    DU, DV = (Da + Dd) * 0.25, (Da - Dd) * 0.25
    gU = -(U @ DU) if gU is None else gU - U @ DU
    gVh = DV @ Vh if gVh is None else gVh + DV @ Vh
    # The SVD's pullback takes a cluster's mean of gS (a symmetric function's
    # weights: its check_weights), the split's term the rest, on the diagonal
    # of C: the same sum U (C + diag(gS)) Vh, whatever the spectrum.
    mean = _kept_cluster_mean(S, keep, gS, opts)
    C = C + torch.diag_embed(gS - mean).to(C.dtype)
    gA = U @ C @ Vh
    return (gA if extra is None else gA + extra), gU, mean, gVh


def _cut_singular_values(S: Tensor, keep: Tensor, opts: Options) -> Tensor | None:
    """Kept singular values at or below the degeneracy tolerance, whose
    inverse the SVD's pullback cuts to 0 (``(*, k)`` bool); None where there
    are none or a broadening replaces the cut (its smooth inverse is the
    user's regularisation, applied as it stands)."""
    if opts.broadening is not None:
        return None
    tol = degeneracy_tol(S, opts.degeneracy_atol)[..., 0]
    cut = keep & (S <= tol)
    return cut if bool(peek(cut).any()) else None


def _zero_divided(S: Tensor, f: Tensor, absorb: str, left: bool) -> Tensor:
    """``f[s, 0] = f(s) / s`` of a weight with ``f(0) = 0`` (the limit
    ``f'(0)`` at 0; ``sqrt``: infinite), 0 for a weight with ``f(0) = 1``,
    whose ``1 / s`` is the SVD's own pseudo-inverse."""
    if absorb == ("right" if left else "left"):
        return torch.zeros_like(S)
    if absorb == "both":
        return S.rsqrt()  # sqrt(s) / s, inf at an exact 0
    return torch.ones_like(S)


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
    dAV = dA @ Vh.mH
    P = U.mH @ dAV
    CL = _cluster_term(S, keep, g, dg, P, opts)
    CR = _cluster_term(S, keep, h, dh, P, opts)
    # Where the SVD's pushforward cut 1 / (s_i + s_j) (both at or below the
    # tolerance) and 1 / s (the complement): the split's finite limits, the
    # transposes of the pullback's C_d and complement terms.
    low = _cut_singular_values(S, keep, opts)
    if low is not None:
        tol = degeneracy_tol(S, opts.degeneracy_atol)
        pairs = (S.unsqueeze(-1) + S.unsqueeze(-2) <= tol) & _kept_pairs(keep, True)
        K = _skew_part(P)
        dt = P.dtype
        if _BETA[absorb] > 0:  # L: g's odd differences, R: h's even ones
            CL = CL + _on(pairs, _times(_sums(S, g, dg, True).to(dt), K))
            CR = CR + _on(pairs, _times(_sums(S, h, dh, False).to(dt), K))
        else:  # L: minus g's even differences, R: h's odd ones
            CL = CL - _on(pairs, _times(_sums(S, g, dg, False).to(dt), K))
            CR = CR + _on(pairs, _times(_sums(S, h, dh, True).to(dt), K))
        k = S.shape[-1]
        if U.shape[-2] > k:
            w = _on(low, _zero_divided(S, g, absorb, True)).unsqueeze(-2)
            dL = dL + _times(w.to(dt), dAV - U @ P)
        if Vh.shape[-1] > k:
            w = _on(low, _zero_divided(S, h, absorb, False)).unsqueeze(-1)
            dR = dR + _times(w.to(dt), U.mH @ dA - P @ Vh)
    return dL + U @ CL, dR + CR @ Vh
