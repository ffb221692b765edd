"""Hermitian eigendecomposition pullbacks as plain torch functions:
``eigh_pullback`` and the triangle fold ``fold_triangle``; their forward-mode
transposes ``eigh_pushforward`` and ``hermitian_from_triangle``.
Mirrors ``julia/PySpectral/src/pullbacks/eigh.jl``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._autograd import plain
from .._second_order import (
    check_second_order_cotangent,
    second_order_guard,
    spectral_clusters,
)
from .._settings import Options
from ..common.defaults import degeneracy_tol, peek, separated
from ..common.gauge import check_gauge, check_weights
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
    check_gauge("eigh", Ka, gap.abs() <= tol, (gV,), opts)
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
    w: Tensor, V: Tensor, dA: Tensor, uplo: str, opts: Options, hermitian: bool = False
) -> tuple[Tensor, Tensor]:
    """Tangents ``(dw, dV)`` of ``eigh`` along ``dA`` (read from the ``uplo``
    triangle; ``hermitian``: through its Hermitian part, torch's convention):
    the transpose of :func:`eigh_pullback`, same cluster rule."""
    # A V = V W gives dP = V^H dA_h V = Omega W - W Omega + dW with
    # Omega = V^H dV anti-Hermitian: dw = Re diag(dP) and, off the diagonal,
    # Omega_ij = dP_ij / (w_j - w_i), through the pullback's regularised
    # inverse, so 0 inside a degenerate cluster (and on the diagonal: no
    # phase rotation). No rounding cut (see svd_pushforward): dP is data.
    dH = hermitian_part(dA) if hermitian else hermitian_from_triangle(dA, uplo)
    dP = V.mH @ dH @ V
    tol = degeneracy_tol(w, opts.degeneracy_atol)
    gap = w.unsqueeze(-2) - w.unsqueeze(-1)  # w_j - w_i
    dV = V @ (dP * gap_inverse(gap, tol, opts))
    return dP.diagonal(dim1=-2, dim2=-1).real, dV
