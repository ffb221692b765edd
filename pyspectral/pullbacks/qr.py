"""QR pullback and pushforward as plain torch functions: ``qr_pullback``,
``qr_pushforward`` and the rank rule ``qr_rank``. The LQ decomposition is the
QR of ``A^H`` (``pyspectral/qr.py`` transposes). Mirrors
``julia/PySpectral/src/pullbacks/qr.jl``; the derivation is in docs/math.md
("QR and LQ at rank deficiency").

Full rank (Walter & Lehtovaara 2012; Liao et al. 2019; torch's
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
``gQ -= Q2 (gQ2^H Q)``.

Rank deficiency. Let ``j`` be the first pivot with ``|R_jj| <= rank_atol``
(default ``eps**(3/4) max|R|``). Householder QR builds column ``k`` from
``R[:k, k] = Q[:, :k]^H a_k`` and ``R_kk q_k = (I - Q_:k Q_:k^H) a_k``, so
``Q1 = Q[:, :j]``, ``R[:j, :]`` (every column) and the product
``Z = Q2 R2 = (I - Q1 Q1^H) A[:, j:]`` (``Q2 = Q[:, j:]``, ``R2 = R[j:, j:]``)
are smooth functions of ``A``; ``Q2`` and ``R2`` apart are one choice of many
(``q_j`` is any unit vector orthogonal to ``Q1``). A loss of ``(Q1, R[:j, :],
Z)`` has the cotangents ``gQ2 = gZ R2^H``, ``gR2 = Q2^H gZ`` (the entries of
``R2`` below its diagonal too: ``f(Q @ R)`` gives them), so

    gZ = Q2 gR2 + (I - Q Q^H) gZ,   (I - Q Q^H) gZ R2^H = (I - Q Q^H) gQ2,

and the chain rule through ``R12 = Q1^H A2``, ``Z = (I - Q1 Q1^H) A2`` gives

    gA2 = Q1 gR12 + gZ,
    gQ1' = gQ1 + A2 gR12^H - gZ R12^H - Q2 (Q1^H gQ2)^H,

``gA1`` the full-rank formula of ``(Q1, R11)`` with ``gQ1'`` (``A2 = A[:, j:]``
in full, not ``Q1 R12``). A square, wide or complete ``Q`` has
``I - Q Q^H = 0``: exact for every such loss, ``f(Q @ R)`` included. A thin
``Q`` of a tall ``A`` needs ``(I - Q Q^H) gZ``, known from ``gQ2`` through
``R2^-H`` only where ``R2`` inverts accurately (each small pivot's row no
larger than ``eps**-1/4`` times the pivot: rounding-level pivots at the end);
elsewhere the derivative along the rank-raising directions outside ``Q``'s
span is in no cotangent, and a cotangent that reaches them is reported
(``lost_message``). What the cotangent puts on the choice itself (the
anti-Hermitian part of ``Q2^H gQ2 - gR2 R2^H``, and ``(I - Q Q^H) gQ2`` on
the left null space of ``R2``) is measured and reported
(``undetermined_message``), and dropped.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .. import _linalg
from .._autograd import plain
from .._settings import Options
from ..common.defaults import eps, eps34, gauge_tol, max_abs, peek
from ..common.gauge import (
    apply_gauge_policy,
    complement_message,
    lost_message,
    qr_forward_message,
    undetermined_message,
)

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


def _rank_tol(R: Tensor, rank_atol: float | None) -> Tensor:
    """The rank tolerance of each matrix, ``(*, 1)``: ``rank_atol`` or
    ``eps**(3/4) max|R|``."""
    if rank_atol is not None:
        return R.real.new_full((*R.shape[:-2], 1), rank_atol)
    if R.is_complex():
        big = (R.real.square() + R.imag.square()).amax(dim=(-2, -1)).sqrt()
    else:  # max |R| without a temporary |R| (or a copy: R is column-major)
        big = torch.maximum(R.amax(dim=(-2, -1)), R.amin(dim=(-2, -1)).neg())
    return big.unsqueeze(-1) * eps34(R.dtype)


def _pivots_above(R: Tensor, rank_atol: float | None) -> Tensor:
    """``|R_ii| > rank_atol`` for the first ``min(R.shape[-2:])`` pivots."""
    p = min(R.shape[-2:])
    d = R.diagonal(dim1=-2, dim2=-1)[..., :p].abs()
    if rank_atol is not None:
        return d > rank_atol
    if R.shape[-1] * R.shape[-2] == 0:
        return torch.ones_like(d, dtype=torch.bool)
    return d > _rank_tol(R, None)


def _copyutl(M: Tensor) -> Tensor:
    """The Hermitian matrix with ``M``'s strict upper triangle (copied, conjugated,
    into the lower one) and the real part of ``M``'s diagonal (new)."""
    U = M.triu(1)
    H = U + U.mH
    d = M.diagonal(dim1=-2, dim2=-1)
    H.diagonal(dim1=-2, dim2=-1).copy_(d.real if d.is_complex() else d)
    return H


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
    complete ``Q``: for losses of the complement through its projector); at
    rank deficiency exact for losses of ``Q[:, :j]``, ``R[:j, :]`` and
    ``Q @ R`` (``j``: the first pivot ``|R_jj| <= rank_atol``), where ``Q``
    is square, wide or complete, and where the derivative they need is in
    the cotangents (see the module docstring); what a cotangent puts on the
    choice past ``j``, or on what no cotangent carries, triggers the gauge
    policy (messages name ``op``: ``"lq"`` for the transposed use). Nothing
    is modified in place."""
    if gQ is None and gR is None:
        return None
    m, n = Q.shape[-2], R.shape[-1]
    p = min(m, n)
    above = _pivots_above(R[..., :p, :], rank_atol)
    if not bool(peek(above).all()):
        return _at_rank(op, Q, R, gQ, gR, above, rank_atol, opts)
    if Q.shape[-1] > p:  # complete: the complement's span is determined
        Q, gQ = _fold_complement(op, Q, gQ, p, opts)
        R = R[..., :p, :]
        gR = None if gR is None else gR[..., :p, :]
    return _full_rank(Q, R, gQ, gR)


def _fold_complement(
    op: str, Q: Tensor, gQ: Tensor | None, p: int, opts: Options
) -> tuple[Tensor, Tensor | None]:
    """Fold the cotangent of a complete ``Q``'s complement columns
    ``Q2 = Q[..., p:]`` into the thin one, ``gQ1 -= Q2 (gQ2^H Q1)``: exact for
    losses that see ``Q2`` through its projector; the anti-Hermitian part of
    ``Q2^H gQ2`` would depend on its basis and is measured."""
    Q1, Q2 = Q[..., :p], Q[..., p:]
    if gQ is None:
        return Q1, None
    gQ2 = gQ[..., p:]
    if opts.gauge != "ignore":
        B = Q2.mH @ gQ2
        measured = max_abs(peek((B - B.mH).detach())) if B.numel() else 0.0
        if measured > 0:
            tol = gauge_tol(gQ, atol=opts.gauge_atol)
            if measured > tol:
                apply_gauge_policy(complement_message(op, measured, tol), opts)
    return Q1, gQ[..., :p] - Q2 @ (gQ2.mH @ Q1)


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


def _square_part(Q: Tensor, R: Tensor, gQ: Tensor | None, gR: Tensor | None) -> Tensor:
    """The square QR's pullback, ``(gQ + Q copyutl(M)) R^-H`` with ``M = gR
    R^H - Q^H gQ`` (``R`` square and invertible; ``gQ`` already holds what
    the columns right of ``R`` contribute)."""
    if R.shape[-1] == 0:
        return Q.new_zeros((*Q.shape[:-1], 0))
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
    return _linalg.solve_triangular(R.mH, B, upper=False, left=False)


# ------------------------------------------------------------ rank deficiency


class _Measured:
    """The largest violations of one call, by kind (``"rank"``: the cotangent
    on the choice past ``j``; ``"lost"``: on what no cotangent of a thin ``Q``
    carries; ``"complement"``: on a complete ``Q``'s complement basis)."""

    def __init__(self) -> None:
        self.values = {"rank": 0.0, "lost": 0.0, "complement": 0.0}
        self.gtol = 0.0  # the call's gauge tolerance

    def add(self, kind: str, violation: Tensor, member: Tensor) -> None:
        """``max |violation|`` (``(*, i, j)``) over the matrices ``member``."""
        v = peek(violation.detach())
        if not v.numel():
            return
        v = (v.real.square() + v.imag.square()).sqrt() if v.is_complex() else v.abs()
        v = v.amax(dim=(-2, -1)) * peek(member).to(v.dtype)
        self.values[kind] = max(self.values[kind], float(v.max()))

    def report(self, op: str, opts: Options) -> None:
        if opts.gauge == "ignore":
            return
        tol = self.gtol
        texts = {
            "rank": undetermined_message,
            "lost": lost_message,
            "complement": complement_message,
        }
        for kind, value in self.values.items():
            if value > tol:
                apply_gauge_policy(texts[kind](op, value, tol), opts)


def _groups(above: Tensor) -> tuple[Tensor, list[int]]:
    """The first small pivot ``j`` of each matrix (``(*,)``, ``p`` at full
    rank) and its distinct values (one host sync)."""
    j = above.to(torch.int64).cumprod(-1).sum(-1)
    return j, sorted(set(peek(j).reshape(-1).tolist()))


class _Blocks(NamedTuple):
    """The factors split at pivot ``j``: ``Q1 = Q[:, :j]``, ``Q2 = Q[:, j:]``,
    ``R11`` (the identity for the matrices not ``member``), ``R12``, ``R2 =
    R[j:, j:]`` and ``A2 = A[:, j:]``; ``p = min(m, n)``."""

    Q1: Tensor
    Q2: Tensor
    R11: Tensor
    R12: Tensor
    R2: Tensor
    A2: Tensor
    p: int


def _blocks(Q: Tensor, R: Tensor, j: int, member: Tensor) -> _Blocks:
    """:class:`_Blocks` of ``(Q, R)`` at ``j`` (the pullback's and the
    pushforward's)."""
    p = min(Q.shape[-2], R.shape[-1])
    R11 = _eye_where(member, R[..., :j, :j])
    A2 = Q[..., :p] @ R[..., :p, j:]
    return _Blocks(Q[..., :j], Q[..., j:], R11, R[..., :j, j:], R[..., j:, j:], A2, p)


def _eye_where(member: Tensor, X: Tensor) -> Tensor:
    """``X`` (square) for the matrices ``member``, the identity for the
    others: a triangular factor that inverts whatever the other matrices'
    pivots are."""
    eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device)
    return torch.where(member[..., None, None], X, eye)


def _at_rank(
    op: str,
    Q: Tensor,
    R: Tensor,
    gQ: Tensor | None,
    gR: Tensor | None,
    above: Tensor,
    rank_atol: float | None,
    opts: Options,
) -> Tensor:
    """:func:`qr_pullback` where some matrix has a small pivot: the split
    formula at each matrix's first small pivot ``j``, one ``j`` at a time."""
    jj, values = _groups(above)
    p = min(Q.shape[-2], R.shape[-1])
    tol = _rank_tol(R[..., :p, :], rank_atol)
    found = _Measured()
    blocks = tuple(g for g in (gQ, gR) if g is not None)
    found.gtol = gauge_tol(*blocks, atol=opts.gauge_atol)
    gA = None
    for j in values:
        member = jj == j
        part = _split_pullback(Q, R, gQ, gR, j, member, tol, found)
        part = torch.where(member[..., None, None], part, torch.zeros_like(part))
        gA = part if gA is None else gA + part
    found.report(op, opts)
    return gA


def _split_pullback(
    Q: Tensor,
    R: Tensor,
    gQ: Tensor | None,
    gR: Tensor | None,
    j: int,
    member: Tensor,
    tol: Tensor,
    found: _Measured,
) -> Tensor:
    """The pullback split at pivot ``j`` (exact at the matrices ``member``,
    whose first small pivot is ``j``; ``j = p``: full rank), the violations
    it sees added to ``found`` (module docstring)."""
    m, k = Q.shape[-2], Q.shape[-1]
    Q1, Q2, R11, R12, R2, A2, p = _blocks(Q, R, j, member)
    gQ1 = None if gQ is None else gQ[..., :j]
    gQ2 = None if gQ is None else gQ[..., j:]
    gR11 = None if gR is None else gR[..., :j, :j]
    gR12 = None if gR is None else gR[..., :j, j:]
    gR2 = None if gR is None else gR[..., j:, j:]
    # gZ = Q2 gR2 (+ the part outside Q's span, thin Q of a tall A)
    gZ = Q2 @ gR2 if gR2 is not None else A2.new_zeros(A2.shape)
    if j < p:
        # the choice past j: Q2^H gQ2 - gR2 R2^H is Hermitian for a loss of Z
        D = gR2 @ R2.mH if gR2 is not None else None
        if gQ2 is not None:
            QgQ = Q2.mH @ gQ2
            D = QgQ if D is None else QgQ - D
        elif D is not None:
            D = -D
        if D is not None:
            found.add("rank", D - D.mH, member)
        if k == p and m > p:  # thin Q of a tall A
            gZ = gZ + _outside(Q, R2, gQ2, gR2, j, member, tol, found)
    elif k > p and gQ2 is not None:  # full rank, complete: the complement basis
        B = Q2.mH @ gQ2
        found.add("complement", B - B.mH, member)
    gQ1e = gZ.new_zeros((*gZ.shape[:-1], j)) if gQ1 is None else gQ1
    if gR12 is not None:
        gQ1e = gQ1e + A2 @ gR12.mH - gZ @ R12.mH
    else:
        gQ1e = gQ1e - gZ @ R12.mH
    if gQ2 is not None:
        gQ1e = gQ1e - Q2 @ (Q1.mH @ gQ2).mH
    gA1 = _square_part(Q1, R11, gQ1e, gR11)
    gA2 = gZ if gR12 is None else gZ + Q1 @ gR12
    return torch.cat([gA1, gA2], -1)


def _outside(
    Q: Tensor,
    R2: Tensor,
    gQ2: Tensor | None,
    gR2: Tensor | None,
    j: int,
    member: Tensor,
    tol: Tensor,
    found: _Measured,
) -> Tensor:
    """``(I - Q Q^H) gZ`` of a thin ``Q`` (``R2`` square) from
    ``(I - Q Q^H) gZ R2^H = (I - Q Q^H) gQ2``: by the triangular solve where
    each small pivot of ``R2`` is nonzero and its row no larger than
    ``eps**-1/4`` times it (the solve is then accurate for a loss of ``Z``),
    else on ``R2``'s row space (the rest is in no cotangent: reported where
    the cotangent reaches the rank-raising directions)."""
    s = R2.shape[-1]
    with torch.no_grad():
        U, S, Vh = _linalg.svd(R2.detach())
        small = S <= tol  # (*, s)
        Us = U * small.unsqueeze(-2).to(U.dtype)
        Vs = Vh.mH * small.unsqueeze(-2).to(U.dtype)
        d = R2.detach().diagonal(dim1=-2, dim2=-1)
        row = R2.detach().triu(1).norm(dim=-1)
        tiny = d.abs() <= tol
        accurate = ~tiny | ((d != 0) & (row <= d.abs() * eps(R2.dtype) ** -0.25))
        accurate = accurate.all(-1)
    clean = accurate
    if gQ2 is None:
        B = None
    else:
        B = gQ2 - Q @ (Q.mH @ gQ2)
        BUs = B @ Us  # (I - QQ^H) gQ2 on R2's left null space: on the choice
        found.add("rank", BUs, member)
        # where it is above the tolerance it is dropped, not amplified by 1/R_jj
        clean = BUs.detach().abs().amax(dim=(-2, -1)) <= found.gtol
    lost = ~accurate & member
    if gR2 is not None:
        found.add("lost", Us.mH @ gR2 @ Vs, lost)  # reaches the rank-raising ones
    if B is None:
        return Q.new_zeros((*Q.shape[:-1], s))
    found.add("lost", B, lost)
    # the accurate solve (a zero pivot, where it is not used, made 1)
    safe = torch.where(d == 0, torch.ones_like(d), d)
    R2s = R2 - torch.diag_embed(d) + torch.diag_embed(safe)
    X = _linalg.solve_triangular(R2s.mH, B, upper=False, left=False)
    # on the row space: B R2^H+ = B U S^+ V^H
    Sinv = torch.where(
        small, torch.zeros_like(S), 1 / S.clamp_min(torch.finfo(S.dtype).tiny)
    )
    Y = ((B @ U) * Sinv.unsqueeze(-2).to(U.dtype)) @ Vh
    return torch.where((accurate & clean)[..., None, None], X, Y)


# ------------------------------------------------------------ forward mode


def qr_pushforward(
    Q: Tensor,
    R: Tensor,
    dA: Tensor,
    rank_atol: float | None = None,
    opts: Options | None = None,
    op: str = "qr",
) -> tuple[Tensor, Tensor]:
    """Tangents ``(dQ, dR)`` of the QR along ``dA``: the transpose of
    :func:`qr_pullback` (same factor shapes; a complete ``Q``'s complement
    turns with the range, its basis fixed by ``Q2^H dQ2 = 0``). At rank
    deficiency (first small pivot ``j``) the tangents of ``Q[:, :j]``,
    ``R[:j, :]`` and of ``Q @ R`` are exact (the last where ``Q`` is square,
    wide or complete); those of ``Q[:, j:]``, ``R[j:, :]`` are one choice
    (``Q2^H dQ2 = 0``, ``dR2 = Q2^H dZ``, ``dZ`` the tangent of
    ``(I - Q1 Q1^H) A[:, j:]``), and where ``dZ`` is not zero the gauge
    policy of ``opts`` applies (``None``: not checked)."""
    m, n = Q.shape[-2], R.shape[-1]
    p = min(m, n)
    above = _pivots_above(R[..., :p, :], rank_atol)
    if bool(peek(above).all()):
        return _full_rank_tangents(Q, R, dA, p)
    jj, values = _groups(above)
    tol = _rank_tol(R[..., :p, :], rank_atol)
    dQ = dR = None
    moved = 0.0
    for j in values:
        member = jj == j
        dQj, dRj, dZ = _split_pushforward(Q, R, dA, j, member, tol)
        if dZ is not None:
            v = peek(dZ.detach())
            v = v.abs().amax(dim=(-2, -1)) * peek(member).to(v.real.dtype)
            moved = max(moved, float(v.max()) if v.numel() else 0.0)
        keep = member[..., None, None]
        dQj = torch.where(keep, dQj, torch.zeros_like(dQj))
        dRj = torch.where(keep, dRj, torch.zeros_like(dRj))
        dQ = dQj if dQ is None else dQ + dQj
        dR = dRj if dR is None else dR + dRj
    if opts is not None and opts.gauge != "ignore" and moved > 0:
        atol = opts.gauge_atol
        limit = (
            atol if atol is not None else eps34(dA.dtype) * max_abs(peek(dA.detach()))
        )
        if moved > limit:
            apply_gauge_policy(qr_forward_message(op, moved, limit), opts)
    return dQ, dR


def _full_rank_tangents(Q: Tensor, R: Tensor, dA: Tensor, p: int) -> tuple:
    """:func:`qr_pushforward` at full rank."""
    m, n = Q.shape[-2], R.shape[-1]
    complete = Q.shape[-1] > p
    Q2 = Q[..., p:] if complete else None
    Qp, Rp = (Q[..., :p], R[..., :p, :]) if complete else (Q, R)
    R1 = Rp[..., :p]
    Z = _linalg.solve_triangular(R1, dA[..., :p], upper=True, left=False)
    Omega = Qp.mH @ Z
    C = _skew_part(Omega)
    dR = ((Omega - C) @ R1).triu()
    Zp = Z - Qp @ Omega  # (I - Q Q^H) dX R1^-1
    dQ = Qp @ C + Zp
    if n > p:
        dR2 = Qp.mH @ dA[..., p:] - C @ Rp[..., p:]
        dR = torch.cat([dR, dR2], -1)
    if complete:
        dQ = torch.cat([dQ, -Qp @ (Zp.mH @ Q2)], -1)
        dR = torch.cat([dR, dR.new_zeros((*dR.shape[:-2], m - p, n))], -2)
    return dQ, dR


def _skew_part(Omega: Tensor) -> Tensor:
    """``C = L - L^H + i Im diag(Omega)``, ``L = tril(Omega, -1)``."""
    L = Omega.tril(-1)
    C = L - L.mH
    d = Omega.diagonal(dim1=-2, dim2=-1)
    if d.is_complex():
        C = C + torch.diag_embed(1j * d.imag).to(C.dtype)
    return C


def _split_pushforward(
    Q: Tensor, R: Tensor, dA: Tensor, j: int, member: Tensor, tol: Tensor
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(dQ, dR, dZ)`` split at pivot ``j`` (exact at the matrices
    ``member``; ``dZ`` None at full rank)."""
    m, n, k = Q.shape[-2], R.shape[-1], Q.shape[-1]
    Q1, Q2, R11, R12, R2, A2, p = _blocks(Q, R, j, member)
    dX, dY = dA[..., :j], dA[..., j:]
    Z = _linalg.solve_triangular(R11, dX, upper=True, left=False)
    Omega = Q1.mH @ Z
    C = _skew_part(Omega)
    dR11 = ((Omega - C) @ R11).triu()
    Zp = Z - Q1 @ Omega  # (I - Q1 Q1^H) dX R11^-1
    dQ1 = Q1 @ C + Zp
    dR12 = Q1.mH @ dY + dQ1.mH @ A2  # R12 = Q1^H A2
    # the complement of Q1 turns with it (Q1^H dQ2 = -dQ1^H Q2), Q2^H dQ2 = 0
    dQ2 = -Q1 @ (dQ1.mH @ Q2)
    top = torch.cat([dR11, dR12], -1)
    if j == p:  # full rank: the rows past p are structural zeros
        dR = torch.cat([top, top.new_zeros((*top.shape[:-2], k - j, n))], -2)
        return torch.cat([dQ1, dQ2], -1), dR, None
    dZ = dY - dQ1 @ R12
    dZ = dZ - Q1 @ (Q1.mH @ dZ)  # (I - Q1 Q1^H)(dA2 - dQ1 R12)
    dR2 = Q2.mH @ dZ
    if k == p and m > p:  # thin Q of a tall A: the part outside Q's span
        out = dZ - Q @ (Q.mH @ dZ)
        with torch.no_grad():
            U, S, Vh = _linalg.svd(R2.detach())
            small = S <= tol
        Sinv = torch.where(
            small, torch.zeros_like(S), 1 / S.clamp_min(torch.finfo(S.dtype).tiny)
        )
        dQ2 = dQ2 + ((out @ Vh.mH) * Sinv.unsqueeze(-2).to(U.dtype)) @ U.mH
    left = torch.cat([dR2.new_zeros((*dR2.shape[:-1], j)), dR2], -1)
    return torch.cat([dQ1, dQ2], -1), torch.cat([top, left], -2), dZ
