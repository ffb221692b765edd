"""The exact pullback of the top-``k`` triplets / eigenpairs from a certified
block (``forward/topk.py``), touching ``A`` only through ``matmul(X) = A @ X``
and ``rmatmul(X) = A^H @ X``, and returning the gradient as low-rank factors
``(P, Q)`` with ``dL/dA = P @ Q`` (a dense caller forms the product once; an
operator caller can pair the factors with its parameters instead); and its
transpose, the pushforward of the top-``k`` triplets / eigenpairs along a
dense tangent ``dA`` (``truncated_*_pushforward``: same block, same CG system
with other right-hand sides). Both mirror
``julia/PySpectral/src/pullbacks/truncated.jl`` (``svd_trunc_pullback!``,
``eigh_trunc_pullback!``, ``truncated_svd_pushforward``,
``truncated_eigh_pushforward``).

Derivation (Francuz, Schuch, Vanhecke, PRR 7, 013237 (2025), with deflation).
The forward hands over a block of ``d >= k`` certified Ritz triplets
``(U_d, S_d, V_d)``: the kept ``k`` and the extras after them, among which the
whole cluster of ``s_k`` (the forward certifies that). Split the full-path
pullback (``svd_pullback`` on all triplets, cotangents zero past ``k``) into

1. the pairs inside the block: the thin middle term of ``svd_pullback`` on the
   block with zero-padded cotangents, which applies the cluster rule, the
   pseudo-inverse of zero singular values and the gauge policy exactly as the
   full path does, including the pairs that ``k`` cuts;
2. the coupling of the kept triplets to the complement of the block,
   ``X V_k^H + U_k Y^H`` with ``X _|_ U_d``, ``Y _|_ V_d`` solving

       X S_k - A_p Y = (I - U_d U_d^H) gU,   Y S_k - A_p^H X = (I - V_d V_d^H) gV,

   ``A_p = A - U_d S_d V_d^H``. Eliminating ``Y``: column by column,
   ``(s_i^2 - A_p A_p^H) x_i = s_i PU_i + A_p PV_i``, Hermitian and positive
   definite on the complement, whose spectrum is below ``s_{d+1} < s_k``; it
   is solved by conjugate gradients with condition number
   ``s_i^2 / (s_i^2 - s_{d+1}^2)``, small whenever the block reaches past
   the gap. Everything is in units of ``s_1`` (``A / s_1``), so that scaling
   ``A`` scales only the gradient and no inner product over/underflows.
   Kept ``s_i`` below the rank tolerance get ``x_i = y_i = 0`` (the full
   path's pseudo-inverse).

``eigh`` is the same with ``X diag(w_k) - A_p X = (I - V_d V_d^H) gV``
(negated for the smallest eigenpairs) and the Hermitian part
``(X V_k^H + V_k X^H) / 2``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import _linalg
from .._settings import Options
from ..common.defaults import degeneracy_tol, eps, peek
from .eigh import eigh_pullback, eigh_pushforward
from .svd import svd_pullback, svd_pushforward

__all__ = [
    "truncated_svd_pullback",
    "truncated_eigh_pullback",
    "truncated_svd_pushforward",
    "truncated_eigh_pushforward",
    "dense_truncated_svd_pullback",
    "dense_truncated_eigh_pullback",
    "dense_truncated_svd_pushforward",
    "dense_truncated_eigh_pushforward",
    "pad_block",
]

Op = Any  # a callable Tensor -> Tensor (A @ X or A^H @ X)
Factors = tuple[Tensor, Tensor, float]


def truncated_svd_pullback(
    matmul: Op,
    rmatmul: Op,
    U: Tensor,
    S: Tensor,
    V: Tensor,
    k: int,
    gU: Tensor | None,
    gS: Tensor | None,
    gVh: Tensor | None,
    opts: Options,
    rtol: float,
    maxiter: int,
    extras: tuple[Tensor, Tensor] | None = None,
) -> Factors | None:
    """Gradient of the top-``k`` triplets from their cotangents, as factors.

    ``U (*, m, d)``, ``S (*, d)``, ``V (*, n, d)``: the certified block, kept
    triplets first. ``extras = (U_e, S_e)``: the block's other Ritz vectors
    (orthogonal to ``U``, not certified), which precondition the CG.
    Returns ``(P, Q, residual)`` with ``dL/dA = P @ Q`` and ``residual`` the
    relative residual the CG solve reached (0.0 when it met ``rtol``), or
    None when every cotangent is None.
    """
    Uk, Sk, Vk = U[..., :k], S[..., :k], V[..., :k]
    if gU is None and gVh is None:
        if gS is None:
            return None
        return Uk * gS.unsqueeze(-2).to(U.dtype), Vk.mH, 0.0
    d = S.shape[-1]
    PU = torch.zeros_like(Uk) if gU is None else gU - U @ (U.mH @ gU)
    PV = torch.zeros_like(Vk) if gVh is None else gVh.mH - V @ (V.mH @ gVh.mH)
    tol = degeneracy_tol(S, opts.degeneracy_atol)  # (*, 1, 1)
    keep = (Sk.unsqueeze(-2) > tol).to(U.dtype)  # pseudo-inverse: 0 below tol
    complete = d >= min(U.shape[-2], V.shape[-2])
    M = svd_pullback(
        U,
        S,
        V.mH,
        pad_block(gU, d),
        pad_block(gS, d),
        pad_block(gVh, d, -2),
        opts,
        middle_only=True,
        gauge_extra=0.0 if complete else _zero_block_gauge(PU, PV, keep),
    ).to(U.dtype)
    X, Y, residual = _svd_complement(
        matmul, rmatmul, U, S, V, k, PU, PV, keep, rtol, maxiter, extras
    )
    # U_d M V_d^H + X V_k^H + U_k Y^H = [U_d, X] @ [M V_d^H + E_k Y^H; V_k^H]
    top = M @ V.mH
    top = torch.cat([top[..., :k, :] + Y.mH, top[..., k:, :]], -2)
    return torch.cat([U, X], -1), torch.cat([top, Vk.mH], -2), residual


def _svd_complement(
    matmul: Op,
    rmatmul: Op,
    U: Tensor,
    S: Tensor,
    V: Tensor,
    k: int,
    PU: Tensor,
    PV: Tensor,
    keep: Tensor,
    rtol: float,
    maxiter: int,
    extras: tuple[Tensor, Tensor] | None,
) -> tuple[Tensor, Tensor, float]:
    """The coupling of the kept triplets to the complement of the block:
    ``X _|_ U_d``, ``Y _|_ V_d`` with

        X S_k - A_p Y = PU,   Y S_k - A_p^H X = PV,

    column by column ``(s_i^2 - A_p A_p^H) x_i = s_i PU_i + A_p PV_i`` and
    ``y_i = (PV_i + A_p^H x_i) / s_i`` (zero where ``keep`` is 0: the
    pseudo-inverse). Shared by the pullback (``PU, PV`` the projected
    cotangents) and the pushforward (``PU = (I - U_d U_d^H) dA v_i``,
    ``PV = (I - V_d V_d^H) dA^H u_i``): the system is the same, Hermitian and
    positive definite on the complement. Solved in units of ``s_1`` by
    preconditioned CG; returns ``(X, Y, residual)``."""
    Sk = S[..., :k]
    d = S.shape[-1]
    c = S[..., :1].unsqueeze(-1)
    c = torch.where(c > 0, c, torch.ones_like(c))
    s = (Sk.unsqueeze(-2) / c).to(U.dtype)  # units of s_1
    s_safe = torch.where(keep != 0, s, torch.ones_like(s))
    residual = 0.0
    if d >= min(U.shape[-2], V.shape[-2]):
        # complete block: A_p = 0 on the complement, x_i = PU_i / s_i
        X, Y = PU * keep / s_safe, PV * keep / s_safe
    else:
        Sd = (S.unsqueeze(-2) / c).to(U.dtype)

        def perp(Y: Tensor) -> Tensor:  # A_p Y / s_1
            return matmul(Y) / c - U @ (Sd.mT * (V.mH @ Y))

        def perp_h(X: Tensor) -> Tensor:  # A_p^H X / s_1
            return rmatmul(X) / c - V @ (Sd.mT * (U.mH @ X))

        def op(X: Tensor, cols: Tensor) -> Tensor:
            TX = X * s[..., cols] ** 2 - perp(perp_h(X))
            return TX - U @ (U.mH @ TX)  # stay in the complement (rounding)

        # preconditioner: T_i with A_p A_p^H replaced by U_e S_e^2 U_e^H
        s2 = (s * s).real
        pre = _preconditioner(extras, s2, c, lambda e: e * e, s2)
        rhs = (PU * s + perp(PV)) * keep
        X, residual = _cg(op, rhs, rtol, maxiter, pre)
        Y = (PV + perp_h(X)) * keep / s_safe
    return X / c, Y / c, residual  # back from units of s_1


def _zero_block_gauge(PU: Tensor, PV: Tensor, keep: Tensor) -> float:
    """The gauge part of the cotangents of kept triplets with ``s_i = 0``.

    When ``k`` cuts a block of zero singular values that reaches past the
    certified block, the rest of that block lies in the complement, and the
    pseudo-inverse drops the coupling to it (``x_i = y_i = 0``), as the full
    path's cluster rule drops the pairs inside the zero cluster. What is
    dropped is ``(PU_i, PV_i)``: its largest column norm is measured so that
    the gauge policy applies to it, as it would on the full path.
    """
    zero = keep == 0  # (*, 1, k)
    if not bool(peek(zero).any()):
        return 0.0
    norms = torch.sqrt(
        _linalg.vector_norm(PU, dim=-2, keepdim=True) ** 2
        + _linalg.vector_norm(PV, dim=-2, keepdim=True) ** 2
    )
    return float(peek(norms.masked_select(zero)).max())


def truncated_eigh_pullback(
    matmul: Op,
    w: Tensor,
    V: Tensor,
    k: int,
    gw: Tensor | None,
    gV: Tensor | None,
    largest: bool,
    opts: Options,
    rtol: float,
    maxiter: int,
    extras: tuple[Tensor, Tensor] | None = None,
) -> Factors | None:
    """Gradient of ``k`` extreme eigenpairs of a Hermitian ``A`` from their
    cotangents, as factors ``(P, Q, residual)`` of the Hermitian gradient
    ``G = P @ Q`` (the caller folds it onto the triangle it read).

    ``w (*, d)``, ``V (*, n, d)``: the certified block, kept pairs first;
    ``extras = (V_e, w_e)`` the other Ritz pairs (preconditioner).
    """
    Vk = V[..., :k]
    if gV is None:
        if gw is None:
            return None
        return Vk * gw.unsqueeze(-2).to(V.dtype), Vk.mH, 0.0
    d = w.shape[-1]
    M = eigh_pullback(
        w, V, pad_block(gw, d), pad_block(gV, d), "L", opts, middle_only=True
    ).to(V.dtype)
    rhs = gV - V @ (V.mH @ gV)
    X, residual = _eigh_complement(matmul, w, V, k, rhs, largest, rtol, maxiter, extras)
    # V_d M V_d^H + (X V_k^H + V_k X^H) / 2 = [V_d, X] @ [M V_d^H + E_k X^H/2; V_k^H/2]
    top = M @ V.mH
    top = torch.cat([top[..., :k, :] + X.mH / 2, top[..., k:, :]], -2)
    return torch.cat([V, X], -1), torch.cat([top, Vk.mH / 2], -2), residual


def _eigh_complement(
    matmul: Op,
    w: Tensor,
    V: Tensor,
    k: int,
    rhs: Tensor,
    largest: bool,
    rtol: float,
    maxiter: int,
    extras: tuple[Tensor, Tensor] | None,
) -> tuple[Tensor, float]:
    """``X _|_ V_d`` with ``X diag(w_k) - A_p X = rhs`` (``rhs _|_ V_d``),
    ``A_p = A - V_d diag(w_d) V_d^H``: the coupling of the kept eigenpairs to
    the complement of the block, shared by the pullback (``rhs`` the projected
    cotangent) and the pushforward (``rhs = (I - V_d V_d^H) dA V_k``). Negated
    for the smallest eigenpairs, the system is positive definite on the
    complement; solved in units of ``max |w|`` by preconditioned CG. Returns
    ``(X, residual)``."""
    if w.shape[-1] >= V.shape[-2]:
        return torch.zeros_like(rhs), 0.0
    sign = 1.0 if largest else -1.0
    c = w.abs().amax(-1, keepdim=True).unsqueeze(-1)
    if extras is not None and extras[1].shape[-1]:
        big = extras[1].abs().amax(-1, keepdim=True).unsqueeze(-1)
        c = torch.maximum(c, big)
    c = torch.where(c > 0, c, torch.ones_like(c))
    wd = (w.unsqueeze(-2) / c).to(V.dtype)
    theta = (sign * w[..., :k]).unsqueeze(-2) / c  # wanted end largest

    def op(X: Tensor, cols: Tensor) -> Tensor:  # +-(X w_i - A_p X) / c
        AX = matmul(X) / c - V @ (wd.mT * (V.mH @ X))
        TX = sign * (X * wd[..., :k][..., cols] - AX)
        return TX - V @ (V.mH @ TX)

    # preconditioner: theta_i - theta_e on the extras; on the rest
    # theta_i - theta_last (the lowest Ritz value seen past the block)
    known = w if extras is None else torch.cat([w, extras[1]], -1)
    last = (sign * known).amin(-1, keepdim=True).unsqueeze(-1) / c
    pre = _preconditioner(
        None if extras is None else (extras[0], sign * extras[1]),
        theta,
        c,
        lambda e: e,
        theta - last,
    )
    X, residual = _cg(op, sign * rhs, rtol, maxiter, pre)
    return X / c, residual


# ------------------------------------------------------------ pushforwards
# The transposes of the pullbacks above: the full path's pushforward
# (svd_pushforward / eigh_pushforward on all triplets) restricted to the kept
# columns, split the same way. Inside the block: the full path's formula in
# the block's basis (same cluster rule: no rotation inside a degenerate
# cluster, pseudo-inverse of zero singular values). Against the complement:
# differentiating A v_i = s_i u_i and A^H u_i = s_i v_i and projecting onto
# the complement of (U_d, V_d), where P_U A = A_p = A_p P_V, gives for the
# complement parts x_i = P_U du_i, y_i = P_V dv_i
#
#     s_i x_i - A_p y_i = P_U dA v_i,   s_i y_i - A_p^H x_i = P_V dA^H u_i,
#
# the pullback's system with these right-hand sides (``_svd_complement``).
# eigh: A v_i = w_i v_i gives (w_i - A_p) x_i = P dA v_i (``_eigh_complement``).
# Only the kept s_i differ from the rest of the spectrum by a gap (the forward
# certified the cluster of s_k inside the block), so the full path's
# complement terms sum_j u_j (...)_ji / (s_i -+ s_j) are this unique solution.


def _identity(d: int, like: Tensor) -> Tensor:
    return torch.eye(d, dtype=like.dtype, device=like.device)


def truncated_svd_pushforward(
    matmul: Op,
    rmatmul: Op,
    U: Tensor,
    S: Tensor,
    V: Tensor,
    k: int,
    dA: Tensor,
    opts: Options,
    rtol: float,
    maxiter: int,
    extras: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, float]:
    """Tangents ``(dU_k, dS_k, dVh_k, residual)`` of the top-``k`` triplets
    along the dense tangent ``dA``: the transpose of
    :func:`truncated_svd_pullback` (same block, same CG system), ``residual``
    the relative residual of the CG solve (0.0 when it met ``rtol``)."""
    dAV, dAhU = dA @ V, dA.mH @ U[..., :k]
    dP = U.mH @ dAV  # (*, d, d): U_d^H dA V_d
    # the block: the full path's formula with U_d, V_d as the basis (identity)
    I_d = _identity(S.shape[-1], U)
    Wu, dS, Wvh = svd_pushforward(I_d, S, I_d, dP, opts)
    PU = dAV[..., :k] - U @ dP[..., :k]
    PV = dAhU - V @ (V.mH @ dAhU)
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    keep = (S[..., :k].unsqueeze(-2) > tol).to(U.dtype)  # pseudo-inverse
    X, Y, residual = _svd_complement(
        matmul, rmatmul, U, S, V, k, PU, PV, keep, rtol, maxiter, extras
    )
    dU = U @ Wu[..., :k] + X
    dV = V @ Wvh[..., :k, :].mH + Y
    return dU, dS[..., :k], dV.mH, residual


def truncated_eigh_pushforward(
    matmul: Op,
    w: Tensor,
    V: Tensor,
    k: int,
    dH: Tensor,
    largest: bool,
    opts: Options,
    rtol: float,
    maxiter: int,
    extras: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, float]:
    """Tangents ``(dw_k, dV_k, residual)`` of ``k`` extreme eigenpairs along
    the Hermitian tangent ``dH`` (the caller reads it from the triangle):
    the transpose of :func:`truncated_eigh_pullback`."""
    dHV = dH @ V
    dP = V.mH @ dHV  # (*, d, d): V_d^H dH V_d, Hermitian
    dw, W = eigh_pushforward(w, _identity(w.shape[-1], V), dP, "L", opts)
    rhs = dHV[..., :k] - V @ dP[..., :k]
    X, residual = _eigh_complement(matmul, w, V, k, rhs, largest, rtol, maxiter, extras)
    return dw[..., :k], V @ W[..., :k] + X, residual


def pad_block(g: Tensor | None, d: int, dim: int = -1) -> Tensor | None:
    """Cotangent of the kept block, zero-padded to the ``d`` of the block."""
    if g is None or g.shape[dim] == d:
        return g
    shape = list(g.shape)
    shape[dim] = d - shape[dim]
    return torch.cat([g, g.new_zeros(shape)], dim)


def _preconditioner(
    extras: tuple[Tensor, Tensor] | None,
    shift: Tensor,
    c: Tensor,
    f: Any,
    rest: Tensor,
) -> Any:
    """``z -> P_i^{-1} z`` for the columns ``cols``, where ``P_i`` is the CG
    system with the complement's operator replaced by its Ritz approximation
    on the extras ``U_e`` (values ``f(s_e / c)``) and by 0 elsewhere:
    ``P_i^{-1} = (I - U_e U_e^H) / rest_i + U_e diag(1 / (shift_i - f_e)) U_e^H``.
    Exact (one CG step) when the extras are exact and span the rest of the
    spectrum above the gap; otherwise still positive definite (``f_e`` below
    ``shift_i``, clamped there), so CG converges, only less fast."""
    rest = rest.real
    rest = torch.where(rest > 0, rest, torch.ones_like(rest))  # pinv columns
    if extras is None or extras[1].shape[-1] == 0:
        return lambda z, cols: z / rest[..., cols].to(z.dtype)
    Ue, Se = extras
    fe = f(Se.real / c.squeeze(-1)).unsqueeze(-1)  # (*, e, 1)
    gap = (shift.real - fe).clamp_min(1e-3 * shift.real)  # (*, e, k)
    weight = 1 / gap - 1 / rest

    def apply(z: Tensor, cols: Tensor) -> Tensor:
        coef = (Ue.mH @ z) * weight[..., cols].to(z.dtype)
        return z / rest[..., cols].to(z.dtype) + Ue @ coef

    return apply


def _cg(op: Any, b: Tensor, rtol: float, maxiter: int, pre: Any):
    """Preconditioned conjugate gradients on every column of ``b`` at once
    (column-wise scalars); ``op(P, cols)`` applies the system of columns
    ``cols``, ``pre(R, cols)`` its preconditioner. Converged columns are
    locked (no more products for them). A column whose ``p^H T p`` is at
    rounding level (or negative: the system is not positive definite) stops
    there rather than divide by noise. Returns ``x`` and the largest relative
    residual ``|r| / |b|`` of a column that did not converge (0.0 if all
    did)."""

    def dot(x: Tensor, y: Tensor) -> Tensor:
        return (x.conj() * y).sum(-2, keepdim=True).real

    all_cols = torch.arange(b.shape[-1], device=b.device)
    x, r = torch.zeros_like(b), b
    z = pre(r, all_cols)
    p = z
    rr, rz = dot(r, r), dot(r, z)
    target = (rtol**2) * rr
    noise = 16 * eps(b.dtype)
    active = _columns(rr > target)
    for _ in range(maxiter):
        if active.numel() == 0:
            break
        P, rz_a = p[..., active], rz[..., active]
        TP = op(P, active)
        pTp, pp = dot(P, TP), dot(P, P)
        ok = pTp > noise * pp  # the operator is O(1) in these units
        alpha = torch.where(ok, rz_a / torch.where(ok, pTp, torch.ones_like(pTp)), 0)
        x = x.index_copy(-1, active, x[..., active] + alpha * P)
        r_a = r[..., active] - alpha * TP
        z_a = pre(r_a, active)
        rr_new, rz_new = dot(r_a, r_a), dot(r_a, z_a)
        beta = rz_new / torch.where(rz_a > 0, rz_a, torch.ones_like(rz_a))
        r = r.index_copy(-1, active, r_a)
        p = p.index_copy(-1, active, z_a + beta * P)
        rr = rr.index_copy(-1, active, rr_new)
        rz = rz.index_copy(-1, active, rz_new)
        # a column stays active while unconverged and still making progress
        going = (rr_new > target[..., active]) & ok
        active = active[_columns(going)]
    left = rr > target
    if not bool(peek(left).any()):
        return x, 0.0
    ratio = torch.where(left, rr / torch.where(target > 0, target, 1.0), 0.0)
    return x, float(peek(ratio).max()) ** 0.5 * rtol


def _columns(mask: Tensor) -> Tensor:
    """Indices of the columns (last dim) where ``mask`` holds for some batch
    element (read through torch.func wrappers: every element decides)."""
    m = peek(mask.detach())
    m = m.reshape(-1, m.shape[-1]).any(0)
    return m.nonzero().squeeze(-1).to(mask.device)


# ------------------------------------------------------- dense fallbacks


def _complement(Q: Tensor) -> Tensor:
    """Orthonormal basis of the orthogonal complement of the columns of ``Q``."""
    return _linalg.qr(Q, mode="complete").Q[..., Q.shape[-1] :]


def _completed_svd(A: Tensor, U: Tensor, S: Tensor, V: Tensor) -> tuple:
    """A complete thin SVD ``(U2, S2, V2)`` of the dense ``A`` that starts
    with the given block: the block, then an SVD of ``A`` on the complement
    of ``(U_d, V_d)``."""
    Wu, Wv = _complement(U), _complement(V)
    Ub, Sb, Vbh = _linalg.svd(Wu.mH @ A @ Wv, full_matrices=False)
    return (
        torch.cat([U, Wu @ Ub], -1),
        torch.cat([S, Sb], -1),
        torch.cat([V, Wv @ Vbh.mH], -1),
    )


def _completed_eigh(A: Tensor, w: Tensor, V: Tensor) -> tuple:
    """``_completed_svd`` for a Hermitian ``A``: ``(w2, V2)``."""
    W = _complement(V)
    wb, Z = _linalg.eigh(W.mH @ A @ W)
    return torch.cat([w, wb], -1), torch.cat([V, W @ Z], -1)


def dense_truncated_svd_pullback(
    A: Tensor,
    U: Tensor,
    S: Tensor,
    V: Tensor,
    k: int,
    gU: Tensor | None,
    gS: Tensor | None,
    gVh: Tensor | None,
    opts: Options,
) -> Tensor | None:
    """The full path's pullback for a dense ``A``, in the basis of the given
    block: the block completed by an SVD of ``A`` on the complement of
    ``(U_d, V_d)``, then ``svd_pullback`` with zero-padded cotangents. The
    fallback when the CG solve cannot converge (no gap past the block)."""
    U2, S2, V2 = _completed_svd(A, U, S, V)
    n = S2.shape[-1]
    return svd_pullback(
        U2, S2, V2.mH, pad_block(gU, n), pad_block(gS, n), pad_block(gVh, n, -2), opts
    )


def dense_truncated_eigh_pullback(
    A: Tensor,
    w: Tensor,
    V: Tensor,
    k: int,
    gw: Tensor | None,
    gV: Tensor | None,
    uplo: str,
    opts: Options,
) -> Tensor | None:
    """``dense_truncated_svd_pullback`` for ``eigh`` (folded onto ``uplo``)."""
    w2, V2 = _completed_eigh(A, w, V)
    n = w2.shape[-1]
    return eigh_pullback(w2, V2, pad_block(gw, n), pad_block(gV, n), uplo, opts)


def dense_truncated_svd_pushforward(
    A: Tensor, U: Tensor, S: Tensor, V: Tensor, k: int, dA: Tensor, opts: Options
) -> tuple[Tensor, Tensor, Tensor]:
    """The full path's pushforward for a dense ``A`` in the basis of the given
    block (completed as in :func:`dense_truncated_svd_pullback`), restricted
    to the kept triplets: the fallback of :func:`truncated_svd_pushforward`."""
    U2, S2, V2 = _completed_svd(A, U, S, V)
    dU, dS, dVh = svd_pushforward(U2, S2, V2.mH, dA, opts)
    return dU[..., :k], dS[..., :k], dVh[..., :k, :]


def dense_truncated_eigh_pushforward(
    A: Tensor, w: Tensor, V: Tensor, k: int, dH: Tensor, opts: Options
) -> tuple[Tensor, Tensor]:
    """``dense_truncated_svd_pushforward`` for ``eigh``, along the Hermitian
    tangent ``dH``."""
    w2, V2 = _completed_eigh(A, w, V)
    dw, dV = eigh_pushforward(w2, V2, dH, "L", opts)
    return dw[..., :k], dV[..., :k]
