"""QR pullback and pushforward as plain torch functions: ``qr_pullback``,
``qr_pushforward`` and the rank rule ``qr_rank``. The LQ decomposition is the
QR of ``A^H`` (``pyspectral/qr.py`` transposes). Mirrors
``julia/PySpectral/src/pullbacks/qr.jl``.

Derivation (Walter & Lehtovaara 2012; Liao et al. 2019; torch's
``linalg_qr_backward``; MatrixAlgebraKit.jl's ``qr_pullback!``). Let
``A = Q R`` with ``Q`` ``m x p`` orthonormal, ``R`` ``p x n`` upper triangular
with a real diagonal (LAPACK's Householder convention, and the positive
gauge ``diag(R) >= 0``), ``p = min(m, n)``; split ``A = [X Y]``, ``X = Q R1``
square-triangular, ``Y = Q R2``. With ``Omega = Q^H dX R1^-1``, the
anti-Hermitian ``C = Q^H dQ`` and the upper triangular ``dR1 R1^-1`` (real
diagonal) add up to ``Omega``, so ``C = L - L^H + i Im diag(Omega)``,
``L = tril(Omega, -1)``, and

    dQ = Q C + (I - Q Q^H) dX R1^-1,  dR1 = (Omega - C) R1,  dR2 = Q^H dY - C R2.

Pairing with ``gQ``, ``gR`` and transposing, with ``gQ' = gQ + Y gR2^H``,
``M = gR1 R1^H - Q^H gQ'``:

    gX = (gQ' + Q copyutl(M)) R1^-H,   gY = Q gR2,

``copyutl(M)`` the Hermitian matrix with ``M``'s strict upper triangle and
the real part of its diagonal. A complete ``Q`` (``m > n``) has ``m - n``
more columns ``Q2``, a basis of the complement of ``A``'s range: their span
is determined, not the basis, so a loss invariant under ``Q2 -> Q2 W`` has a
Hermitian ``Q2^H gQ2`` (checked) and reaches ``A`` through
``gQ -= Q2 (gQ2^H Q)``, as the complement of a full SVD does.

Rank deficiency (MatrixAlgebraKit's convention): the rank ``r`` is the number
of leading ``|R_ii| > rank_atol`` (default ``eps**(3/4) max|R|``). Past the
first small pivot the columns of ``Q`` and rows of ``R`` depend on a basis
choice, not on ``A``: the pullback is exact for losses of ``Q[:, :r]`` and
``R[:r, :]`` (the QR of ``A[:, :r]`` with ``R[:r, r:] = Q[:, :r]^H A[:, r:]``,
the formulas above with ``p = r``), and a loss that reaches the rest
triggers the gauge policy (that part is dropped).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._autograd import plain
from .._settings import Options
from ..common.defaults import eps34, gauge_tol, max_abs, peek
from ..common.gauge import apply_gauge_policy, undetermined_message
from .svd import fold_complement

__all__ = ["positive_gauge", "qr_pullback", "qr_pushforward", "qr_rank"]


def positive_gauge(Q: Tensor, R: Tensor) -> tuple[Tensor, Tensor]:
    """``(Q D, D^H R)`` with ``D = diag(sgn R_ii)`` (1 where ``R_ii = 0``):
    the QR with ``diag(R) >= 0``, unique at full rank. A complete ``Q``'s
    columns past ``min(m, n)`` are left as they are."""
    d = R.diagonal(dim1=-2, dim2=-1)
    s = torch.where(d == 0, torch.ones_like(d), d.sgn())
    if Q.shape[-1] > s.shape[-1]:
        s = torch.cat([s, s.new_ones((*s.shape[:-1], Q.shape[-1] - s.shape[-1]))], -1)
    return Q * s.unsqueeze(-2), R * s[..., : R.shape[-2]].conj().unsqueeze(-1)


def qr_rank(R: Tensor, rank_atol: float | None) -> Tensor:
    """The rank of each matrix as its QR reads it: the number of leading
    ``|R_ii| > rank_atol`` (default ``eps**(3/4) max|R|`` per matrix),
    ``(*,)`` int64, over the first ``p = min(R.shape[-2:])`` pivots."""
    above = _pivots_above(R, rank_atol)
    # the first pivot at or below the tolerance ends the rank (cumprod: 0 after)
    return above.to(torch.int64).cumprod(-1).sum(-1)


def _pivots_above(R: Tensor, rank_atol: float | None) -> Tensor:
    """``|R_ii| > rank_atol`` for the first ``min(R.shape[-2:])`` pivots."""
    p = min(R.shape[-2:])
    d = R.diagonal(dim1=-2, dim2=-1)[..., :p].abs()
    if rank_atol is not None:
        return d > rank_atol
    if R.shape[-1] * R.shape[-2] == 0:
        return torch.ones_like(d, dtype=torch.bool)
    if R.is_complex():
        big = (R.real.square() + R.imag.square()).amax(dim=(-2, -1)).sqrt()
    else:  # max |R| without a temporary |R| (or a copy: R is column-major)
        big = torch.maximum(R.amax(dim=(-2, -1)), R.amin(dim=(-2, -1)).neg())
    tol = big.unsqueeze(-1) * eps34(R.dtype)
    return d > tol


def _copyutl(M: Tensor) -> Tensor:
    """The Hermitian matrix with ``M``'s strict upper triangle (copied, conjugated,
    into the lower one) and the real part of ``M``'s diagonal (new)."""
    U = M.triu(1)
    H = U + U.mH
    d = M.diagonal(dim1=-2, dim2=-1)
    H.diagonal(dim1=-2, dim2=-1).copy_(d.real if d.is_complex() else d)
    return H


class _Split:
    """The factors restricted to the determined part at ranks ``r`` (``(*,)``):
    ``Q1 = Q[:, :r]``, ``R11 = R[:r, :r]`` (the identity past ``r``, so that
    it inverts), ``R12 = R[:r, r:]`` and the column mask of ``Y = A[:, r:]``,
    each zero-padded to ``p`` (``n``)."""

    def __init__(self, Q: Tensor, R: Tensor, r: Tensor) -> None:
        p, n = R.shape[-2], R.shape[-1]
        keep = torch.arange(p, device=R.device) < r.unsqueeze(-1)  # (*, p)
        self.rows = keep
        self.ycols = torch.arange(n, device=R.device) >= r.unsqueeze(-1)  # (*, n)
        self.Q1 = Q * keep.unsqueeze(-2).to(Q.dtype)
        block = (keep.unsqueeze(-1) & keep.unsqueeze(-2)).to(R.dtype)
        eye = torch.diag_embed((~keep).to(R.dtype))
        self.R11 = R[..., :p] * block + eye
        self.R12 = R * (keep.unsqueeze(-1) & self.ycols.unsqueeze(-2)).to(R.dtype)

    def rows_mask(self, X: Tensor) -> Tensor:
        """``X`` (``(*, p, j)``) with its rows past the rank zeroed."""
        return X * self.rows.unsqueeze(-1).to(X.dtype)

    def cols_mask(self, X: Tensor, keep_y: bool) -> Tensor:
        """``X`` (``(*, i, n)``) on the columns of ``Y`` (``keep_y``) or of ``X``."""
        mask = self.ycols if keep_y else ~self.ycols
        return X * mask.unsqueeze(-2).to(X.dtype)


def qr_pullback(
    Q: Tensor,
    R: Tensor,
    gQ: Tensor | None,
    gR: Tensor | None,
    opts: Options,
    rank_atol: float | None = None,
    op: str = "qr",
) -> Tensor | None:
    """Gradient w.r.t. ``A = Q R`` from the cotangents of ``Q`` (``(*, m, k)``,
    ``k = min(m, n)``, or ``m`` for a complete ``Q``) and ``R``
    (``(*, k, n)``); ``None`` cotangents are zero. Exact at full rank (for a
    complete ``Q``: for losses invariant under the complement's basis), and
    at rank ``r`` for losses of ``Q[:, :r]`` and ``R[:r, :]`` (see the module
    docstring); what a loss takes from elsewhere triggers the gauge policy
    (its messages name ``op``: ``"lq"`` for the transposed use). Nothing is
    modified in place."""
    if gQ is None and gR is None:
        return None
    m, n = Q.shape[-2], R.shape[-1]
    p = min(m, n)
    above = _pivots_above(R[..., :p, :], rank_atol)
    r = None
    if not bool(peek(above).all()):
        r = above.to(torch.int64).cumprod(-1).sum(-1)
        gQ, gR = _check_undetermined(op, r, gQ, gR, opts)
    if Q.shape[-1] > p:  # complete: the complement's span is determined
        Q, gQ = fold_complement(op, Q, gQ, p, opts)
        R = R[..., :p, :]
        gR = None if gR is None else gR[..., :p, :]
    if r is None:
        return _full_rank(Q, R, gQ, gR)
    return _at_rank(Q, R, gQ, gR, r)


def _full_rank(Q: Tensor, R: Tensor, gQ: Tensor | None, gR: Tensor | None) -> Tensor:
    """:func:`qr_pullback` at full rank, thin ``Q`` (``(*, m, p)``)."""
    p, n = R.shape[-2], R.shape[-1]
    R1 = R[..., :p]
    gQe, gY = gQ, None
    if gR is not None and n > p:
        # A = [X Y]: gQ' = gQ + Y gR2^H, Y = Q R2; gY = Q gR2
        gR2 = gR[..., p:]
        gY = Q @ gR2
        QRgR = Q @ (R[..., p:] @ gR2.mH)
        gQe = QRgR if gQe is None else gQe + QRgR
    gX = _square_part(Q, R1, gQe, None if gR is None else gR[..., :p])
    if n == p:
        return gX
    if gY is None:
        gY = gX.new_zeros((*gX.shape[:-1], n - p))
    return torch.cat([gX, gY], -1)


def _at_rank(
    Q: Tensor, R: Tensor, gQ: Tensor | None, gR: Tensor | None, r: Tensor
) -> Tensor:
    """:func:`qr_pullback` at ranks ``r`` (``(*,)``, some below ``p``): the
    full-rank formulas on the determined part, masked per matrix."""
    p, n = R.shape[-2], R.shape[-1]
    part = _Split(Q, R, r)
    Q1, R11 = part.Q1, part.R11
    gQe = None if gQ is None else part.rows_mask(gQ.mT).mT  # gQ[:, :r]
    gR11 = gR12 = None
    if gR is not None:
        gR1 = part.rows_mask(gR)
        gR11 = part.cols_mask(gR1, keep_y=False)[..., :p]
        gR12 = part.cols_mask(gR1, keep_y=True)
        YgR = Q @ (part.R12 @ gR12.mH)  # A[:, r:] gR12^H
        gQe = YgR if gQe is None else gQe + YgR
    gX = _square_part(Q1, R11, gQe, gR11)
    if n > p:
        gX = torch.cat([gX, gX.new_zeros((*gX.shape[:-1], n - p))], -1)
    if gR12 is not None:
        gX = gX + Q1 @ gR12
    return gX


def _square_part(Q: Tensor, R: Tensor, gQ: Tensor | None, gR: Tensor | None) -> Tensor:
    """The square QR's pullback, ``(gQ + Q copyutl(M)) R^-H`` with ``M = gR
    R^H - Q^H gQ`` (``R`` square and invertible; ``gQ`` already holds what
    the columns right of ``R`` contribute)."""
    # in place where nothing records it: for a batch of small matrices each
    # fresh temporary costs more (its pages faulted in) than the arithmetic
    inplace = plain(Q, R, gQ, gR)
    M = None if gR is None else gR @ R.mH
    if gQ is not None:
        QgQ = Q.mH @ gQ
        if M is None:
            M = QgQ.neg_() if inplace else -QgQ
        else:
            M = M.sub_(QgQ) if inplace else M - QgQ
    B = Q @ _copyutl(M)
    if gQ is not None:
        B = B.add_(gQ) if inplace else B + gQ
    return torch.linalg.solve_triangular(R.mH, B, upper=False, left=False)


def _check_undetermined(
    op: str, r: Tensor, gQ: Tensor | None, gR: Tensor | None, opts: Options
) -> tuple[Tensor | None, Tensor | None]:
    """The gauge policy on the cotangents of what rank ``r`` leaves
    undetermined, ``Q``'s columns and ``R``'s (upper) rows past ``r``; that
    part is dropped (returned zeroed)."""
    parts, blocks = [], []
    if gQ is not None:
        past = torch.arange(gQ.shape[-1], device=gQ.device) >= r.unsqueeze(-1)
        parts.append(past.unsqueeze(-2))
        blocks.append(gQ)
    if gR is not None:
        k, n = gR.shape[-2:]
        rows = torch.arange(k, device=gR.device) >= r.unsqueeze(-1)
        upper = torch.ones(k, n, dtype=torch.bool, device=gR.device).triu()
        parts.append(rows.unsqueeze(-1) & upper)
        blocks.append(gR)
    dropped = [
        torch.where(mask, g, torch.zeros_like(g)) for g, mask in zip(blocks, parts)
    ]
    if opts.gauge != "ignore":
        measured = max(
            (max_abs(peek(d.detach())) for d in dropped if d.numel()),
            default=0.0,
        )
        tol = gauge_tol(*blocks, atol=opts.gauge_atol)
        if measured > tol:
            apply_gauge_policy(undetermined_message(op, measured, tol), opts)
    out = [g - d for g, d in zip(blocks, dropped)]
    gQ2 = out.pop(0) if gQ is not None else None
    gR2 = out.pop(0) if gR is not None else None
    return gQ2, gR2


def qr_pushforward(
    Q: Tensor,
    R: Tensor,
    dA: Tensor,
    rank_atol: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Tangents ``(dQ, dR)`` of the QR along ``dA``: the transpose of
    :func:`qr_pullback` (same factor shapes; a complete ``Q``'s complement
    turns with the range, its basis fixed by ``Q2^H dQ2 = 0``). At rank
    ``r`` the tangents of the undetermined part (``Q``'s columns and ``R``'s
    rows past ``r``) are 0."""
    m, n = Q.shape[-2], R.shape[-1]
    p = min(m, n)
    complete = Q.shape[-1] > p
    Q2 = Q[..., p:] if complete else None
    Qp, Rp = (Q[..., :p], R[..., :p, :]) if complete else (Q, R)
    part = _Split(Qp, Rp, qr_rank(Rp, rank_atol))
    Q1, R11 = part.Q1, part.R11
    dX = part.cols_mask(dA, keep_y=False)[..., :p]
    # Z = dX R11^-1, Omega = Q1^H Z
    Z = torch.linalg.solve_triangular(R11, dX, upper=True, left=False)
    Z = part.rows_mask(Z.mT).mT
    Omega = Q1.mH @ Z
    L = Omega.tril(-1)
    C = L - L.mH
    d = Omega.diagonal(dim1=-2, dim2=-1)
    if d.is_complex():
        C = C + torch.diag_embed(1j * d.imag).to(C.dtype)
    dR = part.rows_mask(((Omega - C) @ R11).triu())  # (the identity padding: 0)
    Zp = Z - Q1 @ Omega  # (I - Q1 Q1^H) dX R11^-1
    dQ = Q1 @ C + Zp
    if n > p or bool(peek(part.ycols).any()):
        dY = part.cols_mask(dA, keep_y=True)
        dR2 = Q1.mH @ dY - C @ part.R12
        dR2 = part.cols_mask(part.rows_mask(dR2), keep_y=True)
        pad = dR.new_zeros((*dR.shape[:-1], n - p))
        dR = torch.cat([dR, pad], -1) + dR2
    if complete:
        dQ2 = -Q1 @ (Zp.mH @ Q2)
        dQ = torch.cat([dQ, dQ2], -1)
        dR = torch.cat([dR, dR.new_zeros((*dR.shape[:-2], m - p, n))], -2)
    return dQ, dR
