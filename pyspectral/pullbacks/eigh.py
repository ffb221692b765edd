"""Hermitian eigendecomposition pullbacks as plain torch functions:
``eigh_pullback`` and the triangle fold ``fold_triangle``; their forward-mode
transposes ``eigh_pushforward`` and ``hermitian_from_triangle``.
Mirrors ``julia/PySpectral/src/pullbacks/eigh.jl``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _linalg
from .._autograd import plain, tangent_guard
from .._second_order import (
    check_second_order_cotangent,
    second_order_guard,
    spectral_clusters,
)
from .._settings import Options
from ..common.defaults import degeneracy_tol, eps, eps34, peek, separated
from ..common.gauge import (
    apply_gauge_policy,
    check_gauge,
    check_weights,
    policy_applied,
)
from ..common.safemethods import (
    TRANSPOSE_COPY,
    GapChecks,
    add_diagonal,
    adjoint_sum_,
    batch_rows,
    column_rounding,
    cut_rounding,
    cut_rounding_large,
    cut_rounding_rows,
    gap_checks,
    gap_inverse,
    inv_safe,
    pair_rounding,
    with_adjoint,
)

__all__ = [
    "eigh_pullback",
    "fold_triangle",
    "eigh_pushforward",
    "hermitian_from_triangle",
    "hermitian_part",
    "tangent_scale",
    "eigh_adapted_rotation",
    "eigh_check_split",
    "rounding_clusters",
    "adapted_rotation",
    "branch_rotation",
    "check_cluster_split",
    "cluster_pairs",
    "cluster_split_message",
    "split_pairs",
    "split_tol",
]


def fold_triangle(G: Tensor, uplo: str) -> Tensor:
    """Gradient w.r.t. the input of a function that reads only the ``uplo``
    triangle, given its gradient ``G`` w.r.t. the Hermitian matrix it builds.

    Entry ``(i, j)`` of the triangle stands for both ``A_ij`` and
    ``conj(A_ji)``, so it gets ``2 G_ij``; the diagonal gets ``Re G_ii`` (LAPACK
    ignores its imaginary part) and the other triangle nothing.
    """
    T = _strict_triangle(G, uplo, 2.0)
    # In place on T, which is new: one full-size temporary instead of four.
    T.diagonal(dim1=-2, dim2=-1).copy_(G.diagonal(dim1=-2, dim2=-1).real)
    return T


def hermitian_part(X: Tensor) -> Tensor:
    """``(X + X^H) / 2``: under the Hermitian gradient convention (torch's)
    both the gradient from the triangle-true one and the tangent a direction
    acts through (self-adjoint; differentiable operations)."""
    return (X + X.mH) * 0.5


_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _strict_triangle(G: Tensor, uplo: str, scale: float = 1.0) -> Tensor:
    """``scale`` times the strict ``uplo`` triangle of ``G`` (zero elsewhere),
    a new tensor, in one pass: ``tril``/``triu`` for one matrix; for a batch,
    a product with an ``n x n`` mask, which torch vectorises over the batch
    where ``tril`` goes matrix by matrix (about 10x slower for 4096 8x8)."""
    if G.dim() == 2:
        T = torch.tril(G, -1) if uplo == "L" else torch.triu(G, 1)
        return T if scale == 1.0 else T.mul_(scale)
    n = G.shape[-1]
    mask = torch.full((n, n), scale, dtype=_REAL.get(G.dtype, G.dtype), device=G.device)
    return G * (mask.tril_(-1) if uplo == "L" else mask.triu_(1))


def eigh_pullback(
    w: Tensor,
    V: Tensor,
    gw: Tensor | None,
    gV: Tensor | None,
    uplo: str,
    opts: Options,
    middle_only: bool = False,
    hermitian: bool = False,
) -> Tensor | None:
    """Gradient w.r.t. the input of ``eigh`` from the cotangents of ``w, V``
    (``middle_only=True``: the middle matrix ``M`` of ``fold(V M V^H)``, for
    ``gV`` given). ``hermitian=False``: the gradient w.r.t. the ``uplo``
    triangle read (``fold_triangle``); ``True``: torch's, the Hermitian
    ``G = V M V^H`` itself, as its Hermitian part (exactly Hermitian)."""
    # With dP = V^H dA V (Hermitian) and Omega = V^H dV (anti-Hermitian),
    # dP_ij = Omega_ij (w_j - w_i) off the diagonal; pairing with K = V^H gV and
    # keeping the Hermitian part (dP is Hermitian) gives
    #   G = V (Ka / (2 (w_j - w_i)) + diag(gw)) V^H,   Ka = K - K^H.
    # Inside a degenerate cluster (diagonal included: complex phases) the
    # quotient is 0/0; a gauge-invariant loss has Ka = 0 there.
    # A second derivative through this pullback: its w-cotangent is checked
    # (see _second_order.second_order_guard); a first-order one must weight
    # each degenerate cluster equally (check_weights).
    first = middle_only or not check_second_order_cotangent(gw, (gV,), opts)
    if gV is None:
        if gw is None:
            return None
        if first and not separated(peek(w), opts.degeneracy_atol, False):
            check_weights("eigh", gw, w, degeneracy_tol(w, opts.degeneracy_atol), opts)
        if plain(w, V, gw):
            if hermitian:  # Y + Y^H, Y = V diag(gw / 2) V^H
                Y = (V * (gw * 0.5).unsqueeze(-2).to(V.dtype)) @ V.mH
                return with_adjoint(Y, 1.0)
            G2 = (V * (gw + gw).unsqueeze(-2).to(V.dtype)) @ V.mH  # 2 V diag(gw) V^H
            return _fold_doubled(G2, uplo)
        G = (V * gw.unsqueeze(-2).to(V.dtype)) @ V.mH
        return _second_order_guard(_fold(G, uplo, hermitian), w, gw, None, opts)
    K = V.mH @ gV
    is_plain = plain(w, V, gw, gV)
    # Ka_ij within its rounding error of 0 counts as 0 (see svd_pullback); a
    # plain pullback cuts only where a gap is small enough for it to matter
    n = V.shape[-2]
    checks = gap_checks(w, opts.degeneracy_atol, n, False) if is_plain else None
    fast = opts.broadening is None and not middle_only
    if fast and checks is not None and checks.separated:
        return _pullback_separated(w, V, gw, gV, K, checks, uplo, hermitian, opts)
    Ka = with_adjoint(K, -1.0)
    if checks is None or checks.cut_differences:
        Ka = cut_rounding(Ka, pair_rounding(column_rounding(gV, n)), is_plain)
    tol = degeneracy_tol(w, opts.degeneracy_atol)
    gap = w.unsqueeze(-2) - w.unsqueeze(-1)  # w_j - w_i
    check_gauge("eigh", Ka, gap.abs() <= tol, (gV,), opts, spectrum=w)
    if first:
        check_weights("eigh", gw, w, tol, opts)
    M = Ka * (0.5 * gap_inverse(gap, tol, opts))
    if gw is not None:
        M = add_diagonal(M, gw)
    if middle_only:
        return M
    gA = _fold(V @ M @ V.mH, uplo, hermitian)
    return _second_order_guard(gA, w, gw, M, opts)


def _fold(G: Tensor, uplo: str, hermitian: bool) -> Tensor:
    """The gradient w.r.t. the input from ``G`` w.r.t. the Hermitian matrix
    built from it, under the convention (see :func:`eigh_pullback`)."""
    return hermitian_part(G) if hermitian else fold_triangle(G, uplo)


def _second_order_guard(
    gA: Tensor, w: Tensor, gw: Tensor | None, M: Tensor | None, opts: Options
) -> Tensor:
    """``gA``, measured by ``second_order_guard`` if a second derivative can
    be taken through it at a degenerate spectrum (``M``: the middle matrix,
    ``None``: ``diag(gw)``)."""
    if not torch.is_grad_enabled() or opts.gauge == "ignore":
        return gA
    clusters = spectral_clusters(w, opts)
    if clusters is None:
        return gA
    if M is None:
        M = torch.diag_embed(gw)
    return second_order_guard("eigh", gA, gw, M, clusters, opts)


def _pullback_separated(
    w: Tensor,
    V: Tensor,
    gw: Tensor | None,
    gV: Tensor,
    K: Tensor,
    checks: GapChecks,
    uplo: str,
    hermitian: bool,
    opts: Options,
) -> Tensor:
    """``eigh_pullback`` for a spectrum with no degenerate pair
    (``GapChecks.separated``), plain (``plain``), from ``K = V^H gV`` (new):
    the general formula's values, to rounding (it divides where that
    multiplies by an inverse), in fewer passes, in place (in ``K``'s buffer
    and one more: a fresh full-size buffer costs page faults at n = 256).

    Off the diagonal no cutoff applies, so ``Ka / (c (w_j - w_i))`` is
    computed as it stands; its diagonal (0/0) is then overwritten with its
    value, ``2 gw / c``. With ``c = 1`` that is ``2 M``, whose ``V (2M) V^H``
    folds onto the triangle with the factor 2 already in (no halving pass, no
    doubling pass); with ``c = 4`` (``hermitian``) it is ``M / 2``, and
    ``Y + Y^H``, ``Y = V (M/2) V^H``, is the Hermitian part of ``G`` in one
    pass. (Scaling by powers of 2 is exact.)"""
    n = K.shape[-1]
    cut = checks.cut_differences
    if n >= TRANSPOSE_COPY and not K.is_complex():
        # one more fresh n x n buffer, every temporary in it (see svd.py's
        # _pullback_separated_large: page faults), |Ka| <= r as -r <= Ka <= r
        spare = torch.empty_like(K)
        c = column_rounding(gV, n, out=spare) if cut else None
        Ka = adjoint_sum_(K, -1.0, spare)
        if c is not None:
            cut_rounding_large(Ka, c, w, n, descending=False, spare=spare)
    else:
        Ka, spare = K - K.mH, K
        if cut:  # (of a batch, only the matrices that need it)

            def bound(rows: Tensor | None) -> Tensor:
                return pair_rounding(column_rounding(batch_rows(gV, rows), n))

            cut_rounding_rows(Ka, checks.rows, bound)
    # (real buffers for the gaps: a complex one would divide slower)
    real = None if Ka.is_complex() else spare
    if Ka.is_complex():  # (real: the diagonal of Ka is exactly 0)
        check_gauge("eigh", Ka.diagonal(dim1=-2, dim2=-1), None, (gV,), opts)
    if hermitian:
        w = w * 4.0
    M2 = Ka.div_(torch.sub(w.unsqueeze(-2), w.unsqueeze(-1), out=real))
    diagonal = M2.diagonal(dim1=-2, dim2=-1)
    if gw is None:
        diagonal.zero_()
    elif hermitian:
        torch.mul(gw, 0.5, out=diagonal)
    else:
        torch.add(gw, gw, out=diagonal)
    Y = torch.matmul(torch.matmul(V, M2, out=spare), V.mH, out=M2)
    return adjoint_sum_(Y, 1.0, spare) if hermitian else _fold_doubled(Y, uplo)


def _fold_doubled(G2: Tensor, uplo: str) -> Tensor:
    """``fold_triangle(G2 / 2, uplo)`` without the halving pass, in place on
    ``G2`` (a new product, plain pullbacks only): the strict ``uplo`` triangle
    of ``G2`` and half the real part of its diagonal (exact). In place, no
    second full-size buffer: at n = 256 a fresh one costs more in page faults
    than the pass itself."""
    if G2.dim() == 2:
        T = G2.tril_() if uplo == "L" else G2.triu_()
        diagonal = T.diagonal()
        diagonal.mul_(0.5)
    else:  # one mask product (tril_ goes matrix by matrix, see _strict_triangle)
        n = G2.shape[-1]
        mask = torch.ones((n, n), dtype=_REAL.get(G2.dtype, G2.dtype), device=G2.device)
        mask = mask.tril_(-1) if uplo == "L" else mask.triu_(1)
        mask.diagonal().fill_(0.5)
        T = G2.mul_(mask)
        diagonal = T.diagonal(dim1=-2, dim2=-1)
    if diagonal.is_complex():  # LAPACK reads only the real part of the diagonal
        diagonal.imag.zero_()
    return T


def hermitian_from_triangle(dA: Tensor, uplo: str) -> Tensor:
    """The Hermitian matrix that a function reading only the ``uplo`` triangle
    sees: that triangle, its conjugate transpose in the other one, and the real
    part of the diagonal (the transpose of :func:`fold_triangle`; the tangent
    of the unread triangle does not matter)."""
    T = torch.tril(dA, -1) if uplo == "L" else torch.triu(dA, 1)
    return T + T.mH + torch.diag_embed(dA.diagonal(dim1=-2, dim2=-1).real).to(dA.dtype)


def tangent_scale(dA: Tensor) -> Tensor:
    """``max |dA|`` per matrix, shape ``(*, 1, 1)`` (0 if empty): the scale of
    :func:`~pyspectral.common.safemethods.with_infinite_weights` for a pushforward.

    ``max_abs`` without its ``detach``: a tangent batched by the legacy
    ``vmap`` of ``gradcheck``'s batched forward-AD check has no batching rule
    for ``detach``; the value is the same."""
    if dA.shape[-1] * dA.shape[-2] == 0:
        return dA.abs().new_zeros((*dA.shape[:-2], 1, 1))
    return dA.abs().amax(dim=(-2, -1), keepdim=True)


def eigh_pushforward(
    w: Tensor,
    V: Tensor,
    dA: Tensor,
    uplo: str,
    opts: Options,
    hermitian: bool = False,
    adapted: bool = False,
) -> tuple[Tensor, Tensor]:
    """Tangents ``(dw, dV)`` of ``eigh`` along ``dA`` (read from the ``uplo``
    triangle; ``hermitian``: through its Hermitian part, torch's convention):
    the transpose of :func:`eigh_pullback`, same cluster rule.

    ``adapted``: the basis ``V`` was rotated to the tangent inside the
    clusters degenerate to rounding (:func:`adapted_rotation`, applied by the
    forward that saw ``dA``). The tangents then add the rotation of the
    branch inside each cluster that ``dA`` splits (second order), and
    measure the clusters the basis could not follow (``GaugeWarning``, see
    :func:`check_cluster_split`). Without it (forward over reverse, whose own guard
    measures) the cluster rule alone. Differentiated (reverse over forward),
    the tangents are measured as :func:`tangent_guard` says."""
    # A V = V W gives dP = V^H dA_h V = Omega W - W Omega + dW with
    # Omega = V^H dV anti-Hermitian: dw = Re diag(dP) and, off the diagonal,
    # Omega_ij = dP_ij / (w_j - w_i), through the pullback's regularised
    # inverse, so 0 inside a degenerate cluster (and on the diagonal: no
    # phase rotation). No rounding cut (see svd_pushforward): dP is data.
    # Inside a cluster the basis adapted to dA (dP diagonal there) moves by
    # the second-order rotation Omega_ij = N_ij / (mu_j - mu_i), N = dP Omega,
    # mu = diag(dP) (docs/math.md, forward mode at a degenerate cluster).
    dH = hermitian_part(dA) if hermitian else hermitian_from_triangle(dA, uplo)
    dP = V.mH @ dH @ V
    tol = degeneracy_tol(w, opts.degeneracy_atol)
    gap = w.unsqueeze(-2) - w.unsqueeze(-1)  # w_j - w_i
    Omega = dP * gap_inverse(gap, tol, opts)
    dw = dP.diagonal(dim1=-2, dim2=-1).real
    pairs = cluster_pairs(w, tol, opts)
    if pairs is not None:
        t = split_tol(dH)
        if adapted:
            check_cluster_split("eigh", dP, pairs, t, opts)
            same, _ = rounding_clusters(w)
            if same is not None:  # (the clusters the forward could rotate)
                Omega = Omega + branch_rotation(dP @ Omega, dw, pairs & same, t)
        wp, Vp = peek(w.detach()), peek(V.detach())  # (the guard's backward: plain)
        dw, dV = tangent_guard(
            "eigh", (dw, V @ Omega), split_pairs(dP, pairs, t), (w, V, dA),
            lambda g: _middle(wp, Vp, *g, uplo, opts), opts,
        )  # fmt: skip
        return dw, dV
    return dw, V @ Omega


def eigh_adapted_rotation(
    w: Tensor, V: Tensor, dA: Tensor, uplo: str, opts: Options, hermitian: bool
) -> Tensor | None:
    """The rotation ``R`` of ``V`` (``V R``) to the basis adapted to the
    tangent ``dA`` (read as :func:`eigh_pushforward` reads it) inside each
    cluster degenerate to rounding that ``dA`` splits, ascending (comment
    below). None where there is nothing to rotate."""
    if w.shape[-1] < 2 or opts.broadening is not None:
        return None
    dH = hermitian_part(dA) if hermitian else hermitian_from_triangle(dA, uplo)
    return adapted_rotation(w, V.mH @ dH @ V, split_tol(dH), False)


def _middle(
    w: Tensor, V: Tensor, gw: Tensor | None, gV: Tensor | None, uplo: str, opts: Options
) -> Tensor | None:
    """The middle matrix of :func:`eigh_pullback` for the cotangents of the
    tangents (``None``: nothing to measure)."""
    if gV is None:
        return None if gw is None else torch.diag_embed(gw).to(V.dtype)
    return eigh_pullback(w, V, gw, gV, uplo, policy_applied(opts), middle_only=True)


# ------------------------------------------ forward mode at a degenerate cluster
#
# Along A + t D, a cluster of k equal eigenvalues lam splits to first order by the
# eigenvalues mu of its block dP_cc = V_c^H D_h V_c, and the eigenvectors converge
# (t -> 0+) to V_c Q, Q the eigenvectors of dP_cc (degenerate perturbation theory).
# A tangent whose block is not diagonal in the basis returned (E = off-diagonal of
# dP_cc != 0) has tangents (dw, dV) that belong to no branch through that basis:
# dP_cc = dW_cc is then impossible, and every output that reads the cluster's values
# through its vectors (V diag(w) V^H: its block of the tangent is diag(dP_cc), not
# dP_cc) is off by E. So a forward that sees the tangent returns the basis V_c Q
# (which is as valid a basis of the cluster as LAPACK's) with mu in the order of the
# values (ascending; S: descending), and its tangents are those of the branch:
# dw_c = mu, and inside the cluster the rotation the second order fixes,
#   Omega_ab = N_ab / (mu_b - mu_a),  N = dP Omega^(1)  (eigh; svd: the dilation's
#   N = (U^H D dV + V^H D^H dU) / 2 from the first-order tangents),
# for mu_a != mu_b (a sub-cluster left degenerate stays unrotated: its tangent is
# scalar, consistent with any basis to first order). Only a cluster degenerate to
# the rounding of the spectrum can be rotated (rotating a near-degenerate one would
# change A = V W V^H by its spread); the others, degenerate within degeneracy_atol
# only, are measured: a tangent that splits one there warns (check_cluster_split).


def cluster_pairs(spectrum: Tensor, tol: Tensor, opts: Options) -> Tensor | None:
    """The pairs ``i != j`` of ``spectrum`` within the degeneracy tolerance
    ``tol`` (``(*, 1, 1)``), or None where there is none or Lorentzian
    broadening drops nothing (one host read)."""
    if opts.broadening is not None or spectrum.shape[-1] < 2:
        return None
    k = spectrum.shape[-1]
    eye = torch.eye(k, dtype=torch.bool, device=spectrum.device)
    pairs = ((spectrum.unsqueeze(-1) - spectrum.unsqueeze(-2)).abs() <= tol) & ~eye
    return pairs if bool(peek(pairs).any()) else None


def eigh_check_split(
    w: Tensor, V: Tensor, dA: Tensor, uplo: str, opts: Options, hermitian: bool
) -> None:
    """The measure of :func:`eigh_pushforward` with ``adapted`` alone (the
    clusters the basis could not follow), for a backend that pushes the
    tangents itself (Julia's pushforward: the same formulas)."""
    tol = degeneracy_tol(w, opts.degeneracy_atol)
    pairs = cluster_pairs(w, tol, opts)
    if pairs is None:
        return
    dH = hermitian_part(dA) if hermitian else hermitian_from_triangle(dA, uplo)
    check_cluster_split("eigh", V.mH @ dH @ V, pairs, split_tol(dH), opts)


def split_tol(dA: Tensor) -> Tensor:
    """``eps**(3/4) max |dA|`` per matrix (``(*, 1, 1)``): an entry of a
    cluster's block of the tangent above it splits the cluster (as
    ``_second_order``'s measure of the clusters a tangent splits)."""
    return tangent_scale(dA) * eps34(dA.dtype)


def split_pairs(H: Tensor, pairs: Tensor, t: Tensor) -> Tensor:
    """The cluster ``pairs`` that the tangent's Hermitian block ``H`` splits:
    an off-diagonal entry or a difference of diagonal entries above ``t``."""
    d = H.diagonal(dim1=-2, dim2=-1).real
    spread = (d.unsqueeze(-1) - d.unsqueeze(-2)).abs()
    return pairs & ((H.abs() > t) | (spread > t))


def adapted_rotation(
    spectrum: Tensor,
    H: Tensor,
    t: Tensor,
    descending: bool,
    eligible: Tensor | None = None,
) -> Tensor | None:
    """The unitary ``R`` (``k x k``) that turns the basis of each cluster
    degenerate to rounding into the one adapted to the tangent (the
    eigenvectors of its block of ``H``, the tangent's Hermitian block in the
    basis returned), in the order of the values (``descending``: largest
    first, as ``S``); identity on the clusters the tangent does not split and
    outside the ``eligible`` members (svd: not the zero cluster). None if
    there is nothing to rotate. Branch-free over a batch: one eigh of the
    masked blocks, each shifted by ``kappa`` times its cluster's label so that
    the blocks' eigenvalues do not interleave."""
    # (called by a forward, on its results: nothing here is recorded; the
    # spectrum is read first, so that a tangent batched by the legacy vmap of
    # gradcheck is not read where there is no cluster)
    if spectrum.shape[-1] < 2:
        return None
    same, label = rounding_clusters(spectrum)
    if same is None:
        return None
    s = spectrum
    if eligible is not None:
        same = same & eligible.unsqueeze(-1) & eligible.unsqueeze(-2)
    split = split_pairs(H, same, t)
    split.diagonal(dim1=-2, dim2=-1).zero_()
    rows = (same & split.any(-1).unsqueeze(-2)).any(-1)
    if not bool(peek(rows).any()):
        return None
    Hc = H * same
    kappa = 3 * _linalg.matrix_norm(Hc).unsqueeze(-1) + torch.finfo(s.dtype).tiny
    shift = torch.diag_embed(label.to(s.dtype) * kappa).to(H.dtype)
    _, Q = _linalg.eigh((-Hc if descending else Hc) + shift)
    eye = torch.eye(s.shape[-1], dtype=H.dtype, device=H.device)
    return torch.where(rows.unsqueeze(-1), Q * same, eye)


def rounding_clusters(spectrum: Tensor) -> tuple[Tensor | None, Tensor]:
    """``(same, label)``: the clusters of the (sorted) ``spectrum`` degenerate
    to its rounding, consecutive values within ``4 k eps max|s|`` (``same``:
    the pairs in one, diagonal included; None where there is none, one host
    read), and each value's cluster number ``label``."""
    s = spectrum
    k = s.shape[-1]
    r = s.abs().amax(-1, keepdim=True) * (4 * k * eps(s.dtype))  # the rounding of s
    breaks = (s[..., 1:] - s[..., :-1]).abs() > r
    label = torch.cat((torch.zeros_like(breaks[..., :1]), breaks), -1).cumsum(-1)
    if not bool(peek(~breaks).any()):
        return None, label
    return label.unsqueeze(-1) == label.unsqueeze(-2), label


def branch_rotation(N: Tensor, mu: Tensor, pairs: Tensor, t: Tensor) -> Tensor:
    """``N_ab / (mu_b - mu_a)`` on the cluster ``pairs`` whose ``mu`` (the
    tangent's values, diagonal of its adapted block) differ by more than
    ``t``, 0 elsewhere: the rotation of the branch inside the cluster."""
    g = mu.unsqueeze(-2) - mu.unsqueeze(-1)  # mu_b - mu_a
    return N * (inv_safe(g, t) * pairs).to(N.dtype)


def check_cluster_split(
    op: str, H: Tensor, pairs: Tensor, t: Tensor, opts: Options
) -> None:
    """Apply the gauge policy where the tangent splits a cluster that the
    basis is not adapted to (``H``: its Hermitian block in the basis
    returned, off-diagonal above ``t`` on the cluster ``pairs``): degenerate
    within the tolerance but not to rounding, it could not be rotated. Not
    for a split (``opts.state.split``), whose own rule is exact there."""
    if opts.gauge == "ignore" or opts.state.split:
        return
    with torch.no_grad():
        E = peek((H.abs() * pairs).detach())
        over = peek((H.abs() > t).detach()) & peek(pairs)
        if not bool(over.any()):
            return
        measured = float(E.max())
        limit = float(peek(t.detach()).max())
    apply_gauge_policy(cluster_split_message(op, measured, limit), opts)


def cluster_split_message(op: str, measured: float, limit: float) -> str:
    """The text of :func:`check_cluster_split` (shared by both backends)."""
    values, route = (
        ("singular values", "svd_function(A, f) for U f(S) Vh (('pow', 1) for "
         "U diag(S) Vh)")
        if op == "svd"
        else ("eigenvalues", "matrix_function(A, f) for V f(w) V^H")
    )  # fmt: skip
    return (
        f"{op}: forward mode: the tangent splits a cluster of {values} that are "
        f"degenerate within degeneracy_atol but not to rounding (entry {measured:.3g} "
        f"> {limit:.3g} off the diagonal of the tangent's block there), so the basis "
        "returned cannot follow it: the tangents of that cluster's values and "
        "vectors are those of no branch through this basis, and an output that "
        "reads the values through the vectors is not exact (outputs invariant "
        "under rotations inside the cluster are). "
        f"Use {route}: exact at every spectrum."
    )
