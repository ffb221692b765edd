"""The pullback of ``k`` eigenpairs of a square operator known only by its
products: the subspace adjoint of ``eig_topk``.

With ``A V = V diag(L)`` (``V`` ``n x k``, unit-norm columns), ``V = Q R``
(``Q`` orthonormal) and ``Π = I - Q Q^H``, a perturbation ``dA`` moves the
eigenvectors by ``dV = V X + Y`` before normalisation, where ``Y = Π dV``
solves the Sylvester equation on the complement

    (Π A Π) Y - Y diag(L) = -Π dA V                         (one shifted
                                                             solve per column)

and, with ``dP = R^-1 Q^H (dA V + A Y)``, ``dL = diag(dP)`` and ``X_ij =
dP_ij / (L_j - L_i)`` off the diagonal (``Q^H`` of ``dA V + A dV = dV L + V
dL``). Transposed, with ``gV' = gV - V Re diag(V^H gV)`` (the normalisation)
and ``N = V^H gV'``:

    gP = diag(gL) + N / conj(L_j - L_i),   W = Q R^-H
    (Π A^H Π) Ξ - Ξ conj(diag(L)) = Π (gV' + A^H W gP)
    gA = (W gP - Ξ) V^H.

Inside a cluster of equal eigenvalues ``N`` is zero for a loss that does not
see the basis of the cluster's eigenspace (and the phases: the diagonal), so
the quotient is set to zero there and ``N`` measured (the gauge policy), and
a loss of the eigenvalues must weight a cluster equally (``check_weights``),
as in ``pullbacks/eig.py``; the Sylvester solve is regular as long as no
kept eigenvalue is one of the complement's, which the forward's cluster
extension ensures. The products are ``A^H`` only: ``k`` for ``A^H W gP``,
one block per Krylov step of the solve.

Forward mode is the same algebra untransposed (:func:`eig_topk_pushforward`):
``Y`` by one shifted solve per pair with products by ``A`` only, then ``dP``,
``dL`` and ``X``; exact where the tangent keeps each cluster together (``dP``
a multiple of the identity on it), which the caller checks (the gauge policy).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..forward import linsolve as K

# rmatmul: a block product X -> A^H X on (n, p) complex tensors

__all__ = ["eig_topk_pullback", "eig_topk_pushforward"]


def eig_topk_pullback(
    L: Tensor,
    V: Tensor,
    gL: Tensor | None,
    gV: Tensor | None,
    rmatmul: Any,
    cluster: Tensor,
    tol: float,
    krylovdim: int,
    maxiter: int,
) -> tuple[Tensor, Tensor, K.Solve | None, bool]:
    """``(U, N_in, solve, converged)`` with ``gA = U V^H``: ``L`` ``(k,)`` and ``V``
    ``(n, k)`` complex, the cotangents ``gL``, ``gV`` (None: zero),
    ``rmatmul`` the block product ``A^H X``, ``cluster`` the ``(k, k)`` mask
    of pairs counted as one eigenvalue (diagonal included), ``tol`` the
    relative tolerance of the Sylvester solve. ``N_in`` (the cluster part of
    ``N``) and ``gL`` are for the caller's gauge and weight checks; ``solve``
    is the complement solve's certificate (None where there was nothing to
    solve)."""
    k = L.shape[-1]
    Q, R = torch.linalg.qr(V)
    W = torch.linalg.solve_triangular(R, Q.mH, upper=True).mH  # Q R^-H
    if gV is None:
        gVn = torch.zeros_like(V)
        N = torch.zeros(k, k, dtype=V.dtype, device=V.device)
    else:
        gVn = gV - V * (V.conj() * gV).sum(0).real
        N = V.mH @ gVn
    gap = L[None, :] - L[:, None]  # L_j - L_i
    inv = torch.where(cluster, 0, 1 / torch.where(cluster, 1, gap).conj())
    gP = N * inv
    if gL is not None:
        gP = gP + torch.diag(gL.to(V.dtype))
    Wg = W @ gP
    Xi, solve, converged = _complement_solve(
        rmatmul, L.conj(), Q, gVn + rmatmul(Wg), tol, krylovdim, maxiter
    )
    return Wg - Xi, N.masked_fill(~cluster, 0), solve, converged


def _complement_solve(
    product: Any,
    shift: Tensor,
    Q: Tensor,
    rhs: Tensor,
    tol: float,
    krylovdim: int,
    maxiter: int,
) -> tuple[Tensor, K.Solve | None, bool]:
    """``(Y, solve, converged)``: ``(Π B Π - shift_j) y_j = Π rhs_j`` for each
    column ``j`` by one batched GMRES on the complement ``Π = I - Q Q^H`` of
    the kept subspace, ``B`` the block ``product`` (``A`` or ``A^H``), to the
    relative ``tol``; zero (and ``solve`` None) where ``Π rhs`` is zero."""
    rhs = rhs - Q @ (Q.mH @ rhs)
    if not bool((rhs != 0).any()):
        return torch.zeros_like(rhs), None, True

    def op(X: Tensor) -> Tensor:  # rows are systems: X is (k, n)
        Z = X.mT - Q @ (Q.mH @ X.mT)
        Z = product(Z)
        Z = Z - Q @ (Q.mH @ Z)
        return Z.mT - shift[:, None] * X

    b = rhs.mT.contiguous()
    t = tol * torch.linalg.vector_norm(b, dim=-1)
    solve = K.gmres(op, b, torch.zeros_like(b), t, krylovdim, maxiter)
    Y = solve.x.mT
    return Y - Q @ (Q.mH @ Y), solve, bool((solve.residual <= t).all())


def eig_topk_pushforward(
    L: Tensor,
    V: Tensor,
    dAV: Tensor,
    matmul: Any,
    cluster: Tensor,
    tol: float,
    krylovdim: int,
    maxiter: int,
) -> tuple[Tensor, Tensor, Tensor, K.Solve | None, bool]:
    """``(dL, dV, dP, solve, converged)``: the tangents of ``eig_topk``'s
    ``(L, V)`` along ``dA``, given ``dAV = dA V`` (``(n, k)`` complex) and
    ``matmul`` the block product ``A X``; ``cluster`` and ``tol`` as in
    :func:`eig_topk_pullback`. ``dV`` keeps unit norm (``Re v_j^H dv_j =
    0``) and has no rotation inside a cluster; ``dP = R^-1 Q^H (dA V + A Y)``
    is returned for the caller's split check."""
    Q, R = torch.linalg.qr(V)
    Y, solve, converged = _complement_solve(matmul, L, Q, -dAV, tol, krylovdim, maxiter)
    dP = torch.linalg.solve_triangular(R, Q.mH @ (dAV + matmul(Y)), upper=True)
    gap = L[None, :] - L[:, None]  # L_j - L_i
    X = torch.where(cluster, 0, dP / torch.where(cluster, 1, gap))
    dV = V @ X + Y
    dV = dV - V * (V.conj() * dV).sum(0).real
    return dP.diagonal(), dV, dP, solve, converged
