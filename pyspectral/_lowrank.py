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
from . import _julia
from .exceptions import GaugeWarning, InputError


def top_k_method(
    op: str,
    A: Tensor,
    k: Any,
    method: str,
    oversample: int,
    n_iter: int,
    rtol: float | None,
    maxiter: int,
) -> tuple[str, tuple]:
    """Validate ``k`` and ``method``; resolve ``"auto"``: randomized when
    ``min(m, n) >= 512`` and ``k + oversample <= min(m, n) / 8``. Returns the
    method and the parameters of the randomized one."""
    kmax = min(A.shape[-2:])
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= kmax:
        raise InputError(
            f"{op}: k must be an integer with 1 <= k <= min(m, n) = {kmax} for "
            f"A of shape {tuple(A.shape)}, got {k!r}"
        )
    if method not in ("auto", "full", "randomized"):
        raise InputError(
            f"{op}: method must be 'auto', 'full' or 'randomized', got {method!r}"
        )
    if method == "auto":
        big = kmax >= 512 and k + oversample <= kmax // 8
        method = "randomized" if big else "full"
    rtol = C.eps(A.dtype) ** 0.75 if rtol is None else rtol
    return method, (oversample, n_iter, rtol, maxiter)


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


# ------------------------------------------------------------------- eigh


def randomized_eigh(A: Tensor, k: int, oversample: int, n_iter: int) -> tuple:
    """The ``k`` largest eigenpairs of a Hermitian ``A`` whose largest
    eigenvalues are also its largest in magnitude (positive semidefinite
    matrices: covariances, Gram matrices), ascending, by subspace iteration and
    a Rayleigh-Ritz step. Warns when the Ritz pairs' residual shows that they
    have not converged (e.g. large negative eigenvalues)."""
    n = A.shape[-1]
    p = min(k + oversample, n)
    gen = torch.Generator(device=A.device).manual_seed(0)
    X = torch.randn(*A.shape[:-1], p, dtype=A.dtype, device=A.device, generator=gen)
    Q = torch.linalg.qr(A @ X).Q
    for _ in range(2 * n_iter):
        Q = torch.linalg.qr(A @ Q).Q
    T = Q.mH @ (A @ Q)
    w, Z = torch.linalg.eigh((T + T.mH) / 2)
    w, V = w[..., p - k :], Q @ Z[..., p - k :]
    residual = (A @ V - V * w.to(A.dtype).unsqueeze(-2)).abs().amax((-2, -1))
    scale = w.abs().amax(-1).clamp_min(torch.finfo(w.dtype).tiny)
    if bool(C._peek(residual > C.eps(A.dtype) ** 0.5 * scale).any()):
        warnings.warn(
            C.ritz_message(float(C._peek(residual / scale).max())),
            GaugeWarning,
            stacklevel=4,
        )
    return w, V


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
    from .eigh import eigh_pullback, fold_triangle

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


class EighTopK(torch.autograd.Function):
    """Randomized k extreme eigenpairs forward, Sylvester (CG) backward."""

    @staticmethod
    def forward(
        ctx: Any,
        A: Tensor,
        k: int,
        largest: bool,
        uplo: str,
        params: tuple,
        opts: C.Options,
    ) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        w, V = randomized_eigh(A, k, oversample, n_iter)
        ctx.largest, ctx.uplo, ctx.opts = largest, uplo, opts
        ctx.save_for_backward(A, w, V)
        ctx.set_materialize_grads(False)
        return w, V

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        A, w, V = ctx.saved_tensors
        gA = truncated_eigh_pullback(
            A, w, V, gw, gV, ctx.uplo, ctx.largest, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None, None, None


class SVDTopKJulia(torch.autograd.Function):
    """``SVDTopK`` on the Julia backend (PySpectral.svd_topk and its pullback)."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, k: int, params: tuple, opts: C.Options) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        out, ctx.handles = _julia.svd_topk(A, k, oversample, n_iter)
        ctx.opts = opts
        ctx.save_for_backward(A)
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        (A,) = ctx.saved_tensors
        gA = _julia.svd_trunc_pullback(
            A, ctx.handles, gU, gS, gVh, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None


class EighTopKJulia(torch.autograd.Function):
    """``EighTopK`` on the Julia backend (PySpectral.eigh_topk and its pullback)."""

    @staticmethod
    def forward(
        ctx: Any,
        A: Tensor,
        k: int,
        largest: bool,
        uplo: str,
        params: tuple,
        opts: C.Options,
    ) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        out, ctx.handles = _julia.eigh_topk(A, k, uplo, oversample, n_iter)
        ctx.uplo, ctx.opts = uplo, opts
        ctx.save_for_backward(A)
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        (A,) = ctx.saved_tensors
        gA = _julia.eigh_trunc_pullback(
            A, ctx.handles, gw, gV, ctx.uplo, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None, None, None
