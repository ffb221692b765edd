"""Non-Hermitian eigendecomposition pullback and pushforward as plain torch
functions: ``eig_pullback``, ``eig_pushforward`` and the eigenvector
LU factors with their conditioning check, ``eigenvector_lu``. Mirrors
``julia/PySpectral/src/pullbacks/eig.jl``.

Derivation (Giles 2008; Boeddeker et al. 2017, eq. 4.77; torch's
``linalg_eig_backward``). With ``A = V diag(L) V^-1``, unit-norm columns of
``V`` and ``dP = V^-1 dA V``: ``dL = diag(dP)`` and ``dV = V X - V Re
diag(V^H V X)``, ``X_ij = dP_ij / (L_j - L_i)`` off the diagonal (the second
term keeps the columns at unit norm). Transposed, with
``N = V^H gV - V^H V Re diag(V^H gV)``:

    gA = V^-H (diag(gL) + N / conj(L_j - L_i)) V^H.

Inside a cluster of (numerically) equal eigenvalues of a diagonalizable
``A`` the quotient is 0/0: the eigenvectors of a repeated eigenvalue are any
basis of its eigenspace (each normalised), and a loss that does not depend
on that basis (spectral projectors, eigenvectors it normalises itself) has
``N = 0`` on the cluster, diagonal included (the phases), so it is set to 0
there and ``N`` on the cluster is measured (the gauge policy); a loss of the
cluster's eigenvalues must be a symmetric function of them (equal ``gL`` on
the cluster, ``check_weights``). Both are what svd and eigh check. At a
defective (or numerically defective) ``A`` no derivative exists: ``V`` is
singular, and ``eigenvector_lu`` raises.
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
from ..common.defaults import degeneracy_tol, eps, peek
from ..common.gauge import check_gauge, check_weights
from ..common.safemethods import gap_inverse
from ..exceptions import DomainError

__all__ = ["eig_pullback", "eig_pushforward", "eigenvector_lu"]


def eigenvector_lu(V: Tensor, op: str = "eig") -> tuple[Tensor, Tensor, Tensor | None]:
    """``(LU, pivots, inverse)``: the LU factors of ``V``
    (``torch.linalg.lu_factor``) and, for a small ``V``, ``V^-1`` (None
    otherwise), after checking that ``V`` (unit-norm columns) is well enough
    conditioned for a derivative to exist: ``DomainError`` where ``kappa(V)
    = sqrt(n) ||V^-1|| >= eps**(-1/2)`` (``sqrt(n) = ||V||_F``; the norm of
    the inverse: Frobenius for a small ``V``, else the 1-norm estimate of
    LAPACK's ``xGECON``, from a few solves with vectors). That is a
    defective ``A``, or one within rounding of defective: eigenvector angles
    below ``sqrt(eps)``, where the eigenvalues move like ``sqrt(dA)``, not
    linearly."""
    LU, pivots, info = torch.linalg.lu_factor_ex(V)
    n = V.shape[-1]
    inverse = None
    if n <= _EXACT_INVERSE:
        eye = torch.eye(n, dtype=V.dtype, device=V.device).expand_as(V)
        inverse = torch.linalg.lu_solve(LU, pivots, eye)
    with torch.no_grad():
        F, piv, bad = (peek(t.detach()) for t in (LU, pivots, info))
        if F.numel() == 0:
            return LU, pivots, inverse
        if inverse is not None:
            real = torch.view_as_real(peek(inverse.detach()))
            norm = torch.linalg.vector_norm(real, dim=(-3, -2, -1))
        else:
            norm = _inverse_norm1(F, piv)
        cond = norm * n**0.5
        limit = eps(V.dtype) ** -0.5
        singular = (bad != 0) | ~torch.isfinite(cond) | (cond >= limit)
        if bool(singular.any()):
            worst = float(cond.masked_fill(bad != 0, float("inf")).max())
            raise DomainError(
                f"{op}: A is defective or numerically defective: its eigenvectors "
                f"are (nearly) linearly dependent (condition number {worst:.3g} >= "
                f"eps**(-1/2) = {limit:.3g}), so its eigenvalues are not "
                "differentiable there (they move like the square root of a "
                "perturbation). Differentiate a function that stays smooth there "
                "(trace(A), det(A), a matrix function computed without eig), "
                "or perturb A."
            )
    return LU, pivots, inverse


# Up to this order the inverse itself is cheaper than the estimator's
# vector solves (a batch of small matrices: one batched solve, not eight),
# and multiplying by it cheaper than a second solve.
_EXACT_INVERSE = 32


def _inverse_norm1(LU: Tensor, pivots: Tensor, steps: int = 4) -> Tensor:
    """A lower estimate of ``||V^-1||_1`` per matrix from ``V``'s LU factors,
    by Hager's iteration (Higham 1988, the estimator of LAPACK's ``xGECON``):
    within a small factor of the norm in practice, and never above it."""
    n = LU.shape[-1]
    x = torch.full((*LU.shape[:-1], 1), 1.0 / n, dtype=LU.dtype, device=LU.device)
    estimate = torch.zeros(LU.shape[:-2], dtype=LU.real.dtype, device=LU.device)
    for _ in range(steps):
        y = torch.linalg.lu_solve(LU, pivots, x)
        estimate = torch.maximum(estimate, y.abs().sum((-2, -1)))
        sign = torch.where(y == 0, torch.ones_like(y), y.sgn())
        z = torch.linalg.lu_solve(LU, pivots, sign, adjoint=True)
        j = z.abs().argmax(-2, keepdim=True)
        x = torch.zeros_like(x).scatter_(-2, j, 1.0)
    return estimate


def _solve_adjoint(V: Tensor, factors: tuple, B: Tensor) -> Tensor:
    """``V^-H B``: by the inverse (small ``V``) or the LU factors in a plain
    pullback, by ``linalg.solve`` (differentiable in ``V``) where the result
    will be differentiated."""
    LU, pivots, inverse = factors
    if not plain(V, B):
        return torch.linalg.solve(V.mH, B)
    if inverse is not None:
        return inverse.mH @ B
    return torch.linalg.lu_solve(LU, pivots, B, adjoint=True)


def _squared_modulus(z: Tensor) -> Tensor:
    """``|z|**2`` of a complex tensor, without the square root of ``abs``
    (and without a reduction over ``view_as_real``'s trailing pair, which is
    several times slower)."""
    return z.real.square() + z.imag.square()


def eig_pullback(
    L: Tensor,
    V: Tensor,
    gL: Tensor | None,
    gV: Tensor | None,
    opts: Options,
) -> Tensor | None:
    """Gradient w.r.t. ``A = V diag(L) V^-1`` (complex; a real ``A`` takes its
    real part) from the cotangents of ``L`` (``(*, n)``) and ``V``
    (``(*, n, n)``, unit-norm columns); ``None`` cotangents are zero. Exact
    for losses invariant under the choice of eigenvectors inside each cluster
    of repeated eigenvalues and symmetric in its eigenvalues (see the module
    docstring); other losses trigger the gauge policy. Nothing is modified
    in place."""
    # A second derivative through this pullback: its L-cotangent is checked
    # (see _second_order.second_order_guard); a first-order one must weight
    # each degenerate cluster equally (check_weights).
    first = not check_second_order_cotangent(gL, (gV,), opts)
    if gL is None and gV is None:
        return None
    factors = eigenvector_lu(V)
    tol = degeneracy_tol(L, opts.degeneracy_atol)
    # conj(L_j - L_i), formed conjugated: dividing by a conj() view takes a
    # slow path (4x the division's time for a batch of small matrices)
    Lc = L.conj()
    gap = Lc.unsqueeze(-2) - Lc.unsqueeze(-1)
    with torch.no_grad():
        close = _squared_modulus(peek(gap.detach())) <= peek(tol).square()
        n = L.shape[-1]
        clustered = bool(close.sum() > close.numel() // max(n, 1))  # off the diagonal
    if gV is None:
        M = torch.diag_embed(gL)
    else:
        VhgV = V.mH @ gV
        # minus the part that keeps the columns at unit norm, V^H V Re diag(VhgV);
        # as the Gram matrix times the diagonal: V^H (V Re diag) multiplies a
        # conjugated row-major by a column-major factor, 4x the time
        G = V.mH @ V
        d = VhgV.diagonal(dim1=-2, dim2=-1).real.unsqueeze(-2)
        # in place where nothing records it (fewer large temporaries: each a
        # fresh allocation, its pages faulted in)
        N = VhgV.sub_(G.mul_(d)) if plain(V, gV) else VhgV - G * d
        if clustered or opts.broadening is not None:
            check_gauge("eig", N, close, (gV,), opts)
            M = N * gap_inverse(gap, tol, opts)
            if gL is not None:
                M = M + torch.diag_embed(gL)
        else:  # separated: only the phases (the diagonal) to check
            check_gauge("eig", N.diagonal(dim1=-2, dim2=-1), None, (gV,), opts)
            M = _divided_by_gaps(N, gap, gL, plain(N, gap, gL))
    if first and gL is not None and clustered:
        check_weights("eig", gL, L, tol, opts)
    gA = _solve_adjoint(V, factors, M @ V.mH)
    if not torch.is_grad_enabled() or opts.gauge == "ignore" or not clustered:
        return gA
    clusters = spectral_clusters(L, opts)
    if clusters is None:
        return gA
    return second_order_guard("eig", gA, gL, M, clusters, opts)


def _divided_by_gaps(
    N: Tensor, gap: Tensor, gL: Tensor | None, inplace: bool
) -> Tensor:
    """``N / gap`` off the diagonal (``gap = conj(L_j - L_i)``), ``gL``
    (None: 0) on it, for a spectrum with no degenerate pair (``inplace``: in
    ``N``'s and ``gap``'s buffers, both new)."""
    if not inplace:
        eye = torch.eye(N.shape[-1], dtype=torch.bool, device=N.device)
        M = N / torch.where(eye, torch.ones_like(gap), gap)
        diagonal = torch.zeros_like(M[..., 0, :]) if gL is None else gL
        return M - torch.diag_embed(M.diagonal(dim1=-2, dim2=-1) - diagonal)
    gap.diagonal(dim1=-2, dim2=-1).fill_(1)
    M = N.div_(gap)
    if gL is None:
        M.diagonal(dim1=-2, dim2=-1).zero_()
    else:
        M.diagonal(dim1=-2, dim2=-1).copy_(gL)
    return M


def eig_pushforward(
    L: Tensor, V: Tensor, dA: Tensor, opts: Options
) -> tuple[Tensor, Tensor]:
    """Tangents ``(dL, dV)`` of ``eig`` along ``dA``: the transpose of
    :func:`eig_pullback`, same cluster rule (no rotation inside a cluster,
    no phase: ``Re(v_i^H dv_i) = 0`` keeps unit norm, ``Im`` is set 0)."""
    LU, pivots, inverse = eigenvector_lu(V)
    B = dA.to(V.dtype) @ V
    if not plain(V, B):
        dP = torch.linalg.solve(V, B)
    elif inverse is not None:
        dP = inverse @ B
    else:
        dP = torch.linalg.lu_solve(LU, pivots, B)
    tol = degeneracy_tol(L, opts.degeneracy_atol)
    gap = L.unsqueeze(-2) - L.unsqueeze(-1)  # L_j - L_i
    X = V @ (dP * gap_inverse(gap, tol, opts))
    dV = X - V * (V.conj() * X).sum(-2).real.unsqueeze(-2)
    return dP.diagonal(dim1=-2, dim2=-1), dV
