"""The exact pullback of the top-``k`` triplets / eigenpairs through a Sylvester
system solved with products by ``A`` and ``A^H`` only (no m x n, m x m or n x n
temporaries). Mirrors ``julia/PySpectral/src/pullbacks/truncated.jl``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from .. import _common as C
from ..exceptions import GaugeWarning
from .eigh import eigh_pullback, fold_triangle
from .svd import svd_pullback

__all__ = ["truncated_svd_pullback", "truncated_eigh_pullback"]


def truncated_svd_pullback(
    A: Tensor,
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gU: Tensor | None,
    gS: Tensor | None,
    gVh: Tensor | None,
    opts: C.Options,
    rtol: float,
    maxiter: int,
) -> Tensor:
    """Exact gradient of the top-``k`` triplets of ``A`` from their cotangents.

    The kept block uses the thin pullback (same tolerances and gauge policy);
    the coupling to the discarded spectrum and to the complement is
    ``X V^H + U Y^H`` with (Francuz, Schuch, Vanhecke, PRR 7, 013237 (2025))

        X S - A_perp Y = (I - U U^H) gU,   Y S - A_perp^H X = (I - V V^H) gV,

    ``A_perp = A - U S V^H``. Eliminating ``Y`` gives, column by column, the
    Hermitian system ``(s_i^2 - A_perp A_perp^H) x_i = r_i``, positive definite
    when every discarded singular value is below ``s_k``; it is solved by
    conjugate gradients with products by ``A`` and ``A^H`` only.
    """
    if gU is None and gVh is None:
        return svd_pullback(U, S, Vh, gU, gS, gVh, opts)
    M = svd_pullback(U, S, Vh, gU, gS, gVh, opts, middle_only=True)
    V = Vh.mH
    Sc = S.to(A.dtype).unsqueeze(-2)

    def perp(Y: Tensor) -> Tensor:  # A_perp @ Y
        return A @ Y - U @ (Sc.mT * (Vh @ Y))

    def perp_h(X: Tensor) -> Tensor:  # A_perp^H @ X
        return A.mH @ X - V @ (Sc.mT * (U.mH @ X))

    PU = torch.zeros_like(U) if gU is None else gU - U @ (U.mH @ gU)
    PV = torch.zeros_like(V) if gVh is None else gVh.mH - V @ (Vh @ gVh.mH)
    rhs = PU * Sc + perp(PV)
    S2 = Sc * Sc

    def op(X: Tensor) -> Tensor:
        return X * S2 - perp(perp_h(X))

    X = _cg(op, rhs, rtol, maxiter)
    Y = (PV + perp_h(X)) / Sc
    # U M Vh + X Vh + U Y^H as one product: a single m x n allocation
    return torch.cat([U, X], -1) @ torch.cat([M.to(A.dtype) @ Vh + Y.mH, Vh], -2)


def _cg(op: Any, b: Tensor, rtol: float, maxiter: int) -> Tensor:
    """Conjugate gradients on every column of ``b`` at once (column-wise
    scalars). Warns ``GaugeWarning`` when it does not converge: the gap at
    ``k`` is too small for the truncated gradient to be well defined."""

    def dot(x: Tensor, y: Tensor) -> Tensor:
        return (x.conj() * y).sum(-2, keepdim=True).real

    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rr = dot(r, r)
    target = (rtol**2) * rr.clamp_min(torch.finfo(rr.dtype).tiny)
    for _ in range(maxiter):
        if bool(C._peek(rr <= target).all()):
            return x
        Ap = op(p)
        pAp = dot(p, Ap)
        alpha = torch.where(pAp > 0, rr / torch.where(pAp > 0, pAp, 1.0), 0.0)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_new = dot(r, r)
        p = r + (rr_new / rr.clamp_min(torch.finfo(rr.dtype).tiny)) * p
        rr = rr_new
    if not bool(C._peek(rr <= target).all()):
        residual = float(C._peek(rr / target).max()) ** 0.5 * rtol
        warnings.warn(
            C.topk_backward_message(maxiter, residual), GaugeWarning, stacklevel=3
        )
    return x


def truncated_eigh_pullback(
    A: Tensor,
    w: Tensor,
    V: Tensor,
    gw: Tensor | None,
    gV: Tensor | None,
    uplo: str,
    largest: bool,
    opts: C.Options,
    rtol: float,
    maxiter: int,
) -> Tensor:
    """Exact gradient of ``k`` extreme eigenpairs: the kept block as in
    ``eigh_pullback``, plus ``(X V^H + V X^H) / 2`` where ``X`` solves
    ``X diag(w) - A_perp X = (I - V V^H) gV`` (``A_perp = A - V diag(w) V^H``),
    positive definite column by column for the largest eigenvalues (negated
    for the smallest); folded onto the ``uplo`` triangle like ``eigh``."""
    if gV is None:
        return eigh_pullback(w, V, gw, gV, uplo, opts)
    W = w.to(A.dtype).unsqueeze(-2)
    sign = 1.0 if largest else -1.0

    def op(X: Tensor) -> Tensor:  # +-(X diag(w) - A_perp X)
        return sign * (X * W - (A @ X - V @ (W.mT * (V.mH @ X))))

    rhs = sign * (gV - V @ (V.mH @ gV))
    X = _cg(op, rhs, rtol, maxiter)
    M = eigh_pullback(w, V, gw, gV, uplo, opts, middle_only=True)
    # V M V^H + (X V^H + V X^H) / 2 as one product, then the triangle fold
    G = torch.cat([V, X], -1) @ torch.cat([M @ V.mH + X.mH / 2, V.mH / 2], -2)
    return fold_triangle(G, uplo)
