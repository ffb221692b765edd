"""Krylov solvers for ``M x = b`` touching ``M`` only through ``matvec``:
restarted GMRES for any ``M``, conjugate gradients for a Hermitian
positive definite one and MINRES for a Hermitian indefinite one. Mirrors
``julia/PySpectral/src/forward/linsolve.jl``.

Vectors are ``(*, n)`` tensors: one system per batch entry, all advanced by
the same products (``matvec`` maps ``(*, n)`` to ``(*, n)``). ``tol`` is a
``(*,)`` tensor of absolute residual norms; a system is converged when its
*true* residual ``||b - M x||``, computed by one product at the end of each
GMRES cycle (CG: every ``CG_RESIDUAL_EVERY`` steps and at the end), is at
most its ``tol``. Within a cycle GMRES tracks the residual of its small
least-squares problem, which equals the true one in exact arithmetic.

``matvec`` may be only real-linear (``M(i x) != i M(x)``, as the transpose
Jacobians of ``fixed_point``): GMRES is then run on real vectors (the caller
views complex vectors as real ones), where its least-squares problem is
real.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

# a product v -> M v on (*, n) tensors
Op = Any

# Conjugate gradients recompute the true residual this often, so that the
# recursively updated one cannot drift below tol unnoticed.
CG_RESIDUAL_EVERY = 50

# GMRES orthogonalizes a new vector twice only where one classical Gram-Schmidt
# pass left less than this fraction of its norm (the criterion of Daniel, Gragg,
# Kaufman and Stewart, 1976): only then can rounding leave it far from
# orthogonal to the basis. Most steps take one pass over the basis, not two.
REORTHOGONALIZE = 2**-0.5


class Solve(NamedTuple):
    """A Krylov solve: the solution, each system's true residual norm
    ``||b - M x||`` (``(*,)``), and the number of products with ``M``."""

    x: Tensor
    residual: Tensor
    products: int


def _dot(u: Tensor, v: Tensor) -> Tensor:
    """``u^H v`` over the last dimension."""
    return (u.conj() * v).sum(-1)


def _norm(u: Tensor) -> Tensor:
    """``||u||`` over the last dimension; of a complex ``u`` as the norm of its
    real view (the same number; torch's complex norm of a (6, 2048) block
    took 75 us against 8, a tenth of a GMRES step's cost)."""
    if u.is_complex():
        real = torch.view_as_real(u.conj() if u.is_conj() else u)
        return torch.linalg.vector_norm(real, dim=(-2, -1))
    return torch.linalg.vector_norm(u, dim=-1)


def _safe_div(u: Tensor, s: Tensor) -> Tensor:
    """``u / s`` with zero where ``s`` is zero (a system already solved)."""
    ok = s != 0
    return torch.where(ok[..., None], u / torch.where(ok, s, 1)[..., None], 0)


def gmres(
    matvec: Op,
    b: Tensor,
    x0: Tensor,
    tol: Tensor,
    krylovdim: int,
    maxiter: int,
) -> Solve:
    """Restarted GMRES(``krylovdim``), at most ``maxiter`` cycles.

    Each cycle builds an Arnoldi basis ``V`` of the residual's Krylov space
    (classical Gram-Schmidt, a second pass where the first cancelled more than
    ``1 - REORTHOGONALIZE`` of the new vector's norm: as accurate as modified
    Gram-Schmidt, in one or two matrix products per step) and minimises
    ``||beta e_1 - H y||`` over the Hessenberg matrix ``H``; the cycle ends
    early when every system's least-squares residual is below its ``tol``.
    A zero new basis vector (a *lucky breakdown*: the Krylov space is
    invariant, its solution exact) ends the cycle too.
    """
    x = x0
    r = b - matvec(x)
    products = 1
    beta = _norm(r)
    batch, n = b.shape[:-1], b.shape[-1]
    m = max(1, min(krylovdim, n))
    for _ in range(maxiter):
        if bool((beta <= tol).all()):
            break
        # the basis as rows (*, m + 1, n): each new vector is contiguous, and
        # the projections read a contiguous block
        V = torch.zeros(*batch, m + 1, n, dtype=b.dtype, device=b.device)
        H = torch.zeros(*batch, m + 1, m, dtype=b.dtype, device=b.device)
        V[..., 0, :] = _safe_div(r, beta)
        rhs = torch.zeros(*batch, m + 1, dtype=b.dtype, device=b.device)
        rhs[..., 0] = beta
        y, j = None, 0
        for j in range(m):
            w = matvec(V[..., j, :])
            products += 1
            basis = V[..., : j + 1, :]
            wn = _norm(w)
            h = (basis.conj() @ w[..., None])[..., 0]
            w = w - (h[..., None, :] @ basis)[..., 0, :]
            hn = _norm(w)
            if bool((hn < REORTHOGONALIZE * wn).any()):
                h2 = (basis.conj() @ w[..., None])[..., 0]
                w = w - (h2[..., None, :] @ basis)[..., 0, :]
                h, hn = h + h2, _norm(w)
            H[..., : j + 1, j] = h
            H[..., j + 1, j] = hn
            V[..., j + 1, :] = _safe_div(w, hn)
            y, res = _least_squares(H[..., : j + 2, : j + 1], rhs[..., : j + 2])
            # relative to the cycle's start: a breakdown leaves hn at rounding
            if bool((res <= tol).all()) or bool((hn <= 1e-14 * beta).all()):
                break
        assert y is not None
        x = x + (y[..., None, :] @ V[..., : j + 1, :])[..., 0, :]
        r = b - matvec(x)
        products += 1
        beta = _norm(r)
    return Solve(x, beta, products)


def _least_squares(H: Tensor, rhs: Tensor) -> tuple[Tensor, Tensor]:
    """``y = argmin ||rhs - H y||`` for the ``(*, j+1, j)`` Hessenberg ``H``
    by QR, and the residual norm ``||rhs - H y||``. A zero column (a system
    solved before this step) gets ``y = 0`` through a unit pivot."""
    Q, R = torch.linalg.qr(H)
    d = R.diagonal(dim1=-2, dim2=-1)
    tiny = d.abs() <= torch.finfo(d.abs().dtype).tiny
    R = R + torch.diag_embed(tiny.to(R.dtype))
    c = (Q.mH @ rhs[..., None])[..., 0]
    y = torch.linalg.solve_triangular(R, c[..., None], upper=True)[..., 0]
    y = torch.where(tiny, 0, y)
    res = _norm(rhs - (H @ y[..., None])[..., 0])
    return y, res


def cg(
    matvec: Op,
    b: Tensor,
    x0: Tensor,
    tol: Tensor,
    maxiter: int,
) -> tuple[Solve, bool]:
    """Conjugate gradients for a Hermitian positive definite ``M``, at most
    ``maxiter`` products. Returns the solve and whether ``p^H M p > 0`` held
    at every step (False: ``M`` is not positive definite on the Krylov space
    seen, and the caller should not trust CG)."""
    x = x0
    r = b - matvec(x)
    products = 1
    p, rs = r, _dot(r, r).real
    definite = True
    for step in range(1, maxiter + 1):
        if bool((rs.sqrt() <= tol).all()):
            break
        Mp = matvec(p)
        products += 1
        pMp = _dot(p, Mp).real
        active = rs > 0
        if bool((active & (pMp <= 0)).any()):
            definite = False
            break
        alpha = torch.where(active, rs / torch.where(active, pMp, 1), 0)
        x = x + alpha[..., None] * p
        if step % CG_RESIDUAL_EVERY == 0:
            r = b - matvec(x)
            products += 1
        else:
            r = r - alpha[..., None] * Mp
        rs_new = _dot(r, r).real
        beta = torch.where(active, rs_new / torch.where(active, rs, 1), 0)
        p, rs = r + beta[..., None] * p, rs_new
    r = b - matvec(x)
    return Solve(x, _norm(r), products + 1), definite


def minres(
    matvec: Op,
    b: Tensor,
    x0: Tensor,
    tol: Tensor,
    maxiter: int,
) -> Solve:
    """MINRES (Paige and Saunders 1975) for a Hermitian ``M``, definite or
    not, at most ``maxiter`` products (and one for the final residual): the
    Lanczos recurrence (real ``alpha`` and ``beta``) with the Givens QR of
    its tridiagonal matrix, which minimises ``||b - M x||`` over the Krylov
    space with short recurrences.

    Its residual estimate ``|phibar|`` is exact only in exact arithmetic, so
    the true residual is computed where the estimate says converged and
    every ``CG_RESIDUAL_EVERY`` steps; where the estimate says converged and
    the true residual does not (Lanczos vectors that lost orthogonality),
    the recurrence restarts from the current ``x``. A system already solved
    (a zero residual) stays where it is.
    """
    x = x0
    r = b - matvec(x)
    products = 1
    residual = _norm(r)
    while not bool((residual <= tol).all()) and products < maxiter:
        zero = torch.zeros_like(residual)
        v_prev, v = torch.zeros_like(r), _safe_div(r, residual)
        beta, dbar, epsln, sn = zero, zero, zero, zero
        cs, phibar = -torch.ones_like(residual), residual
        d_prev, d = torch.zeros_like(r), torch.zeros_like(r)
        step = 0
        while products < maxiter:
            step += 1
            w = matvec(v) - beta[..., None] * v_prev
            products += 1
            alpha = _dot(v, w).real
            w = w - alpha[..., None] * v
            beta_next = _norm(w)
            # the Givens rotation that eliminates this column's subdiagonal
            oldeps = epsln
            delta = cs * dbar + sn * alpha
            gbar = sn * dbar - cs * alpha
            epsln = sn * beta_next
            dbar = -cs * beta_next
            gamma = torch.hypot(gbar, beta_next)
            live = gamma > 0
            cs = torch.where(live, gbar / torch.where(live, gamma, 1), 1)
            sn = torch.where(live, beta_next / torch.where(live, gamma, 1), 0)
            phi, phibar = cs * phibar, sn * phibar
            d_prev, d = (
                d,
                _safe_div(v - oldeps[..., None] * d_prev - delta[..., None] * d, gamma),
            )
            x = x + phi[..., None] * d
            v_prev, v, beta = v, _safe_div(w, beta_next), beta_next
            estimate = bool((phibar <= tol).all())
            if estimate or step % CG_RESIDUAL_EVERY == 0:
                r = b - matvec(x)
                products += 1
                residual = _norm(r)
                if estimate or bool((residual <= tol).all()):
                    break  # solved, or restart from x: the estimate drifted
        else:
            r = b - matvec(x)
            products += 1
            residual = _norm(r)
    return Solve(x, residual, products)
