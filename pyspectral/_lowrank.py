"""Top-k SVD without a full decomposition: a randomized range finder for the
forward, and the exact truncated pullback through a Sylvester system solved with
products by ``A`` and ``A^H`` only (no m x n, m x m or n x n temporaries).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from . import _common as C
from .exceptions import GaugeWarning


def randomized_svd(A: Tensor, k: int, oversample: int, n_iter: int) -> tuple:
    """Top-``k`` ``(U, S, Vh)`` of ``A`` (``(*, m, n)``) by a randomized range
    finder (Halko, Martinsson, Tropp 2011, Alg. 4.4): ``k + oversample`` random
    probes, ``n_iter`` power iterations with re-orthonormalisation."""
    m, n = A.shape[-2:]
    p = min(k + oversample, m, n)
    gen = torch.Generator(device=A.device).manual_seed(0)
    Omega = torch.randn(
        *A.shape[:-2], n, p, dtype=A.dtype, device=A.device, generator=gen
    )
    Q = torch.linalg.qr(A @ Omega).Q
    for _ in range(n_iter):
        Q = torch.linalg.qr(A.mH @ Q).Q
        Q = torch.linalg.qr(A @ Q).Q
    Ub, S, Vh = torch.linalg.svd(Q.mH @ A, full_matrices=False)
    return (Q @ Ub[..., :k]), S[..., :k], Vh[..., :k, :]


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
    from .svd import svd_pullback

    gA = svd_pullback(U, S, Vh, gU, gS, gVh, opts, projectors=False)
    if gU is None and gVh is None:
        return gA
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
    return gA + X @ Vh + U @ Y.mH


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
            f"svd(k=...): the truncated backward did not converge in {maxiter} "
            f"iterations (relative residual {residual:.2g}): the gap between the "
            "kept and discarded singular values is too small. The gradient is "
            "finite but approximate; use method='full' or a k at a gap.",
            GaugeWarning,
            stacklevel=3,
        )
    return x


class SVDTopK(torch.autograd.Function):
    """Randomized top-k forward, Sylvester (CG) backward."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, k: int, params: tuple, opts: C.Options) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        U, S, Vh = randomized_svd(A, k, oversample, n_iter)
        ctx.opts = opts
        ctx.save_for_backward(A, U, S, Vh)
        ctx.set_materialize_grads(False)
        return U, S, Vh

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        A, U, S, Vh = ctx.saved_tensors
        gA = truncated_svd_pullback(
            A, U, S, Vh, gU, gS, gVh, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None
