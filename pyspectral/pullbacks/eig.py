"""Non-Hermitian eigendecomposition pullback and pushforward as plain torch
functions: ``eig_pullback``, ``eig_pushforward`` and the check that a
derivative exists, ``check_diagonalizable``. Mirrors
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
singular, or a pair the pullback divides by is within rounding of
coalescing, and ``check_diagonalizable`` raises (docs/math.md, "eig: when a
derivative exists").
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _linalg
from .._autograd import plain
from .._second_order import (
    check_second_order_cotangent,
    second_order_guard,
    spectral_clusters,
)
from .._settings import Options
from ..common.defaults import degeneracy_tol, eps, eps34, gauge_tol, max_abs, peek
from ..common.gauge import apply_gauge_policy, check_gauge, check_weights
from ..common.safemethods import gap_inverse
from ..exceptions import DomainError

__all__ = [
    "check_diagonalizable",
    "check_split",
    "eig_pullback",
    "eig_pushforward",
]


def check_diagonalizable(
    w: Tensor,
    V: Tensor,
    opts: Options,
    op: str = "eig",
    *,
    pairs: bool = True,
    tol: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(LU, pivots, inverse)``: the LU factors of the eigenvectors ``V``
    (``torch.linalg.lu_factor``; ``inverse`` is ``V^-1`` for ``n <= 32``,
    else None), after checking that a derivative of ``A = V diag(w) V^-1``
    can be trusted there; :class:`DomainError` where it cannot.

    ``w``: the eigenvalues ``(*, n)``; ``V``: unit-norm eigenvectors
    ``(*, n, n)``; ``opts``: the call's options (``degeneracy_atol`` decides
    which pairs are one cluster); ``op``: the name in the error text. Two
    conditions (docs/math.md, "eig: when a derivative exists"):

    1. ``V`` is invertible to half the digits: ``kappa(V) = sqrt(n)
       ||V^-1|| < eps**(-1/2)`` (Frobenius norm for a small ``V``, else
       LAPACK's ``xGECON`` 1-norm estimate). Inside a cluster this is what
       says the cluster is an eigenspace (a basis of it), not a Jordan block.
    2. Every pair the pullback divides by (``|w_i - w_j| >
       degeneracy_atol``, default ``max|w| eps**(3/4)``) is resolved: its
       effective gap ``2 |w_i - w_j| / (kappa_i + kappa_j)``, with
       ``kappa_i = ||row i of V^-1||`` the condition number of ``w_i``
       (unit-norm columns), is at least ``degeneracy_atol`` where given,
       else ``eps**(3/4) max(max|w|, ||A||_F / sqrt(n))``. Half the
       effective gap, ``s_ij``, is the pair's first-order distance to a
       matrix where it coalesces; the derivatives of the pair change by
       about ``||dA|| / s_ij`` of themselves under a perturbation ``dA``,
       so the rounding of ``A`` (``eps ||A||``) leaves a resolved pair's
       within about ``eps**(1/4)`` of exact: what eigh grants a pair at
       its degeneracy tolerance (for a normal ``A``, ``kappa = 1``, every
       pair the tolerance separates passes). A near-Jordan pair (``S J
       S^-1``, the Jordan block perturbed by ``delta``: gap ``2
       sqrt(delta)``, ``kappa ~ 1 / sqrt(delta)``) has ``s ~ delta`` and
       is refused below ``delta ~ eps**(3/4)``; a well-conditioned near
       pair (gap ``1e-9``, ``kappa ~ 1``) is not.

    ``pairs=False`` checks condition 1 alone (``eig_function``, whose
    divided differences of ``f`` replace the quotients ``1 / (w_i - w_j)``).
    ``tol``: ``degeneracy_tol(w, opts.degeneracy_atol)`` where the caller
    has it already. Public for those callers; the signature is stable.
    """
    LU, pivots, info = _linalg.lu_factor_ex(V)
    n = V.shape[-1]
    inverse = None
    if n <= _EXACT_INVERSE:
        eye = torch.eye(n, dtype=V.dtype, device=V.device).expand_as(V)
        inverse = _linalg.lu_solve(LU, pivots, eye)
    with torch.no_grad():
        F, piv, bad = (peek(t.detach()) for t in (LU, pivots, info))
        if F.numel() == 0:
            return LU, pivots, inverse
        W = None if inverse is None else peek(inverse.detach())
        if W is not None:
            norm = _linalg.vector_norm(torch.view_as_real(W), dim=(-3, -2, -1))
        else:
            norm = _inverse_norm1(F, piv)
        cond = norm * n**0.5
        limit = eps(V.dtype) ** -0.5
        singular = (bad != 0) | ~torch.isfinite(cond) | (cond >= limit)
        checks = [singular.any()]
        if pairs and n > 1:
            w_ = peek(w.detach())
            tol = degeneracy_tol(w_, opts.degeneracy_atol) if tol is None else tol
            gap, divided, unsure = _pairs_screen(w_, W, norm, peek(tol), opts)
            checks.append(unsure)
        # one read of the device for both tests
        flags = torch.stack(checks).tolist()
        if flags[0]:
            worst = float(cond.masked_fill(bad != 0, float("inf")).max())
            raise DomainError(_defective_message(op, worst, limit))
        if len(flags) > 1 and flags[1]:
            _check_pairs(w_, peek(V.detach()), F, piv, W, gap, divided, opts, op)
    return LU, pivots, inverse


def _pairs_screen(
    w: Tensor, W: Tensor | None, norm: Tensor, tol: Tensor, opts: Options
) -> tuple[Tensor, Tensor, Tensor]:
    """``(gap, divided, unsure)`` for condition 2 of
    :func:`check_diagonalizable`: the pairs' gaps, which pairs the pullback
    divides by, and whether a cheap sufficient test leaves any of them to
    :func:`_check_pairs` (a boolean tensor, not read here)."""
    n = w.shape[-1]
    gap = (w.unsqueeze(-1) - w.unsqueeze(-2)).abs()
    eye = torch.eye(n, dtype=torch.bool, device=w.device)
    divided = (gap > tol.real) & ~eye
    big = w.abs().amax(-1)
    # The test (O(n^2), passes for most matrices): with k >= ||V^-1||_2 (the
    # Frobenius norm, or sqrt(n) times the 1-norm estimate), kappa_i <= k and
    # ||A||_F / sqrt(n) <= ||A||_2 <= max|w| ||V||_2 k <= max|w| sqrt(n) k.
    # No divided pair: the least gap is inf and passes.
    k = norm if W is not None else norm * n**0.5
    least = gap.masked_fill(~divided, float("inf")).amin((-2, -1)) / k
    return gap, divided, ~(least >= _resolution(big * n**0.5 * k, opts)).all()


def _check_pairs(
    w: Tensor,
    V: Tensor,
    F: Tensor,
    piv: Tensor,
    W: Tensor | None,
    gap: Tensor,
    divided: Tensor,
    opts: Options,
    op: str,
) -> None:
    """Condition 2 of :func:`check_diagonalizable` where the screen could not
    pass it (no autograd; ``W``: ``V^-1`` or None)."""
    n = w.shape[-1]
    big = w.abs().amax(-1)
    if W is None:
        eye_n = torch.eye(n, dtype=V.dtype, device=V.device).expand_as(V)
        W = _linalg.lu_solve(F, piv, eye_n)
    kappa = _linalg.vector_norm(W, dim=-1)  # rows of V^-1: (*, n)
    A = (V * w.unsqueeze(-2)) @ W
    scale = torch.maximum(big, _linalg.vector_norm(A, dim=(-2, -1)) / n**0.5)
    effective = 2 * gap / (kappa.unsqueeze(-1) + kappa.unsqueeze(-2))
    short = divided & (effective < _resolution(scale, opts)[..., None, None])
    if bool(short.any()):
        worst = effective.masked_fill(~short, float("inf"))
        i = int(worst.flatten().argmin())
        raise DomainError(
            pair_message(
                op,
                float(worst.flatten()[i]),
                float(gap.flatten()[i]),
                float(_resolution(scale, opts).max()),
            )  # fmt: skip
        )


def _resolution(scale: Tensor, opts: Options) -> Tensor:
    """The least effective gap of a resolved pair: ``degeneracy_atol`` where
    given, else ``eps**(3/4)`` times ``scale``."""
    if opts.degeneracy_atol is not None:
        return torch.full_like(scale, opts.degeneracy_atol)
    return scale * eps34(scale.dtype)


def pair_message(op: str, effective: float, gap: float, limit: float) -> str:
    """The text of :func:`check_diagonalizable`'s ``DomainError`` at a pair
    within rounding of coalescing (both backends)."""
    return (
        f"{op}: A is numerically defective: two of its eigenvalues are apart "
        f"(|w_i - w_j| = {gap:.3g}) but within rounding of coalescing: their "
        f"effective gap 2 |w_i - w_j| / (kappa_i + kappa_j) = {effective:.3g} is "
        f"below the resolution {limit:.3g} (eps**(3/4) max(max|w|, ||A||_F / "
        "sqrt(n)), or degeneracy_atol; kappa_i: the condition number of w_i), "
        "so the derivatives of the pair (which divide by w_i - w_j) are not "
        "determined by A to any accuracy. Differentiate a function that stays "
        "smooth there (trace(A), "
        "det(A), torch.linalg.matrix_exp(A), torch.linalg.matrix_power(A, k)), "
        "or perturb A."
    )


def _defective_message(op: str, measured: float, limit: float) -> str:
    """The text of :func:`check_diagonalizable`'s ``DomainError`` at nearly
    dependent eigenvectors (both backends)."""
    return (
        f"{op}: A is defective or numerically defective: its eigenvectors are "
        f"(nearly) linearly dependent (condition number {measured:.3g} >= "
        f"eps**(-1/2) = {limit:.3g}), so its eigenvalues are not differentiable "
        "there (they move like the square root of a perturbation). Differentiate "
        "a function that stays smooth there (trace(A), det(A), "
        "torch.linalg.matrix_exp(A), torch.linalg.matrix_power(A, k)), or "
        "perturb A."
    )


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
        y = _linalg.lu_solve(LU, pivots, x)
        estimate = torch.maximum(estimate, y.abs().sum((-2, -1)))
        sign = torch.where(y == 0, torch.ones_like(y), y.sgn())
        z = _linalg.lu_solve(LU, pivots, sign, adjoint=True)
        j = z.abs().argmax(-2, keepdim=True)
        x = torch.zeros_like(x).scatter_(-2, j, 1.0)
    return estimate


def _solve_adjoint(V: Tensor, factors: tuple, B: Tensor) -> Tensor:
    """``V^-H B``: by the inverse (small ``V``) or the LU factors in a plain
    pullback, by ``linalg.solve`` (differentiable in ``V``) where the result
    will be differentiated."""
    LU, pivots, inverse = factors
    if not plain(V, B):
        return _linalg.solve(V.mH, B)
    if inverse is not None:
        return inverse.mH @ B
    return _linalg.lu_solve(LU, pivots, B, adjoint=True)


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
    tol = degeneracy_tol(L, opts.degeneracy_atol).real  # complex L: real tol
    factors = check_diagonalizable(L, V, opts, tol=tol)
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
    no phase: ``Re(v_i^H dv_i) = 0`` keeps unit norm, ``Im`` is set 0). A
    tangent that splits a cluster (:func:`check_split`) triggers the gauge
    policy."""
    LU, pivots, inverse = check_diagonalizable(L, V, opts)
    B = dA.to(V.dtype) @ V
    if not plain(V, B):
        dP = _linalg.solve(V, B)
    elif inverse is not None:
        dP = inverse @ B
    else:
        dP = _linalg.lu_solve(LU, pivots, B)
    tol = degeneracy_tol(L, opts.degeneracy_atol).real  # complex L: real tol
    gap = L.unsqueeze(-2) - L.unsqueeze(-1)  # L_j - L_i
    if opts.gauge != "ignore" and opts.broadening is None:
        check_split(L, dP, tol, (LU, pivots, inverse), dA, opts)
    X = V @ (dP * gap_inverse(gap, tol, opts))
    dV = X - V * (V.conj() * X).sum(-2).real.unsqueeze(-2)
    return dP.diagonal(dim1=-2, dim2=-1), dV


def split_measure(L: Tensor, dP: Tensor, tol: Tensor) -> float:
    """``max |dP_c - mean(diag dP_c) I|`` over the degenerate clusters ``c``
    (``|L_i - L_j| <= tol``) of ``dP = V^-1 dA V``, pair by pair: ``|dP_ij|``
    and ``|dP_ii - dP_jj|`` for ``i != j`` in one cluster (0: none)."""
    with torch.no_grad():
        Lp, D = peek(L.detach()), peek(dP.detach())
        n = Lp.shape[-1]
        close = (Lp.unsqueeze(-1) - Lp.unsqueeze(-2)).abs() <= peek(tol).real
        close &= ~torch.eye(n, dtype=torch.bool, device=Lp.device)
        if D.shape[-2:] != close.shape[-2:] or not bool(close.any()):
            return 0.0
        close = close.expand(D.shape)
        d = D.diagonal(dim1=-2, dim2=-1)
        spread = torch.maximum(D.abs(), (d.unsqueeze(-1) - d.unsqueeze(-2)).abs())
        inside = spread.masked_select(close)
        return float(inside.max()) if inside.numel() else 0.0


def check_split(L: Tensor, dP: Tensor, tol: Tensor, factors: tuple, dA: Tensor,
                opts: Options) -> None:  # fmt: skip
    """The gauge policy where the tangent splits a degenerate cluster: the
    block of ``dP = V^-1 dA V`` on a cluster is the first-order change of
    ``A`` seen by its eigenspace, and the cluster stays repeated to first
    order iff that block is a multiple of the identity. Otherwise ``A + t dA``
    has ``k`` eigenvalue branches through the cluster, whose tangents are the
    eigenvalues of the block and whose eigenvectors tend to the block's
    eigenvectors, not to the basis returned: the tangents returned (the
    block's diagonal, no rotation) follow no branch consistent with it, and
    only the cluster's symmetric functions and spectral projector are exact.
    Measured by :func:`split_measure`; allowed: ``gauge_atol``, default
    ``eps**(3/4) max|dP|`` plus the rounding of ``dP`` (``4 n eps kappa(V)
    max|dA|``)."""
    measured = split_measure(L, dP, tol)
    if measured == 0:
        return
    if opts.gauge_atol is not None:
        allowed = opts.gauge_atol
    else:
        LU, pivots, inverse = factors
        with torch.no_grad():
            n = dP.shape[-1]
            if inverse is not None:
                W = torch.view_as_real(peek(inverse.detach()))
                norm = float(_linalg.vector_norm(W, dim=(-3, -2, -1)).max())
            else:
                norm = float(_inverse_norm1(peek(LU.detach()), peek(pivots)).max())
            D = peek(dA.detach())
            rounding = 4 * n * eps(dP.dtype) * norm * n**0.5 * max_abs(D)
        allowed = gauge_tol(dP, atol=None) + rounding
    if measured > allowed:
        apply_gauge_policy(split_message("eig", measured, allowed), opts)


def split_message(op: str, measured: float, allowed: float) -> str:
    """The text of :func:`check_split` (both backends)."""
    return (
        f"{op}: forward mode at a degenerate cluster of eigenvalues: the tangent "
        "splits it (V^-1 dA V on the cluster is not a multiple of the identity: "
        f"measured {measured:.3g} > allowed {allowed:.3g}), so the tangents "
        "returned for its eigenvalues and eigenvectors follow no branch "
        "consistent with the eigenvectors returned and are not exact (only "
        "functions of the cluster's sum or mean and of its spectral projector "
        "are: reverse mode, which sees the loss, tells them apart). Use "
        "eig_function(A, f) for V f(L) V^-1 (exact at every spectrum of a "
        "diagonalizable A, forward mode included), or a tangent dA that keeps "
        "the cluster together."
    )
