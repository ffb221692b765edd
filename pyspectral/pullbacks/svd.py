"""SVD pullbacks as plain torch functions (no autograd.Function): the thin/full
``svd_pullback`` and the exact ``svd_function_pullback`` of ``U f(S) Vh``, and
their forward-mode transposes ``svd_pushforward`` / ``svd_function_pushforward``.
Mirrors ``julia/PySpectral/src/pullbacks/svd.jl``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._autograd import plain, tangent_guard
from .._discarded import DiscardedTerm, add_discarded_term, discarded_clusters
from .._fns import SpectralFn
from .._second_order import (
    check_second_order_cotangent,
    second_order_guard,
    spectral_clusters,
)
from .._settings import Options
from ..common.defaults import degeneracy_tol, eps34, peek, separated
from ..common.gauge import check_gauge, check_weights, policy_applied
from ..common.safemethods import (
    TRANSPOSE_COPY,
    GapChecks,
    add_diagonal,
    adjoint_sum_,
    batch_rows,
    column_rounding,
    cut_rounding,
    cut_rounding_large,
    cut_rounding_rows,
    divided_difference,
    gap_checks,
    gap_inverse,
    max_abs,
    pair_rounding,
    with_adjoint,
    with_infinite_weights,
)
from .eigh import (
    adapted_rotation,
    branch_rotation,
    check_cluster_split,
    cluster_pairs,
    rounding_clusters,
    split_pairs,
    split_tol,
    tangent_scale,
)
from .matfun import Nodes, contraction, spectral_nodes

__all__ = [
    "svd_pullback",
    "svd_function_pullback",
    "svd_pushforward",
    "svd_adapted_rotation",
    "svd_check_split",
    "svd_function_pushforward",
    "svd_function_second_order",
]


def _skew(X: Tensor) -> Tensor:
    return with_adjoint(X, -1.0)


def svd_pullback(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gU: Tensor | None,
    gS: Tensor | None,
    gVh: Tensor | None,
    opts: Options,
    middle_only: bool = False,
    gauge_extra: float = 0.0,
    A: Tensor | None = None,
) -> Tensor | None:
    """Gradient w.r.t. ``A = U diag(S) Vh`` from the cotangents of U, S, Vh.

    ``U``/``Vh`` may be thin (``k = len(S)`` columns/rows) or full; ``None``
    cotangents are zero. Nothing is modified in place. ``middle_only=True``
    returns the ``k x k`` middle matrix ``M`` of ``U M Vh`` instead (for the
    truncated pullback in ``truncated.py``, which adds its own complement terms
    and passes the gauge part it drops there as ``gauge_extra``: one check).
    ``A``: the decomposed matrix, for the exact second derivative at clusters
    the loss discards (``_discarded``; None: those are measured and warned
    about like any cluster).
    """
    # Derivation (Townsend 2016; Wan & Zhang 2019; torch's svd_backward;
    # MatrixAlgebraKit.jl's svd_pullback!). With dP = U^H dA V, the skew part of
    # U^H dU solves dP_ij s_j + conj(dP_ji) s_i = (s_j^2 - s_i^2) (U^H dU)_ij, and
    # likewise for V. Collecting terms, the middle matrix is, for all i, j,
    #   M_ij = (Ja+Ka)_ij / (2(s_j - s_i)) + (Ja-Ka)_ij / (2(s_j + s_i)),
    # Ja = J - J^H, J = U^H gU, Ka = K - K^H, K = V^H gV. The second term on the
    # diagonal is the complex phase term i Im(J_ii - K_ii) / (2 s_i). Inside a
    # degenerate cluster the first term is 0/0: a gauge-invariant loss has
    # (Ja+Ka)_ij = 0 there, so it is set to 0 and the residual is measured.
    # Every 1/gap goes through one regularised inverse (cutoff or Lorentzian),
    # which makes the zero-singular-value terms pseudo-inverses.
    k = S.shape[-1]
    complement = U.shape[-2] > k or Vh.shape[-1] > k
    if U.shape[-1] > k or Vh.shape[-2] > k:
        U, gU = fold_complement("svd", U, gU, k, opts)
        V, gV = fold_complement("svd", Vh.mH, None if gVh is None else gVh.mH, k, opts)
        Vh, gVh = V.mH, None if gV is None else gV.mH
    # A second derivative through this pullback: its S-cotangent is checked
    # (see _second_order.second_order_guard); a first-order one must weight
    # each degenerate cluster equally (check_weights).
    first = middle_only or not check_second_order_cotangent(gS, (gU, gVh), opts)
    if gU is None and gVh is None:
        if gS is None:
            return None
        if first and not separated(peek(S), opts.degeneracy_atol, True):
            check_weights("svd", gS, S, degeneracy_tol(S, opts.degeneracy_atol), opts)
        gA = (U * gS.unsqueeze(-2)) @ Vh
        return _second_order_guard(gA, S, gS, None, complement, opts, A, U, Vh)

    # A numerator within its rounding error of 0 counts as 0: divided by a gap
    # just above the degeneracy tolerance, that noise would be the gradient of
    # a loss that does not depend on the pair's rotation (safemethods). A
    # plain pullback cuts only where a gap is small enough for it to matter
    # (gap_checks: the differences, the trailing sums); the others always.
    is_plain = plain(U, S, Vh, gU, gS, gVh)
    m, n = U.shape[-2], Vh.shape[-1]
    checks = gap_checks(S, opts.degeneracy_atol, m + n, True) if is_plain else None
    if (
        checks is not None
        and checks.separated
        and opts.broadening is None
        and gauge_extra == 0
    ):
        return _pullback_separated(U, S, Vh, gU, gS, gVh, checks, middle_only, opts)
    J, KH = _products(U, Vh, gU, gVh)
    K = None if KH is None else KH.mH
    Ja = 0 if J is None else _skew(J)
    Ka = 0 if K is None else _skew(K)
    JKa, JKd = Ja + Ka, Ja - Ka
    if checks is None:
        r = _numerator_rounding(gU, gVh, m, n)
        JKa, JKd = cut_rounding(JKa, r, False), cut_rounding(JKd, r, False)
    else:
        if checks.cut_differences:
            JKa = cut_rounding(JKa, _numerator_rounding(gU, gVh, m, n), True)
        _cut_tail(JKd, gU, gVh, m, n, checks.tail)
    # the general formula
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    Si, Sj = S.unsqueeze(-1), S.unsqueeze(-2)
    gap = Sj - Si
    blocks = _blocks(gU, gVh)
    check_gauge(
        "svd", JKa, gap.abs() <= tol, blocks, opts, extra=gauge_extra, spectrum=S
    )
    if first:
        check_weights("svd", gS, S, tol, opts)
    M = JKa * (0.5 * gap_inverse(gap, tol, opts)) + JKd * (
        0.5 * gap_inverse(Sj + Si, tol, opts)
    )
    if gS is not None:
        M = add_diagonal(M, gS)
    if middle_only:
        return M
    gA = U @ M @ Vh
    gA = _complement_terms(gA, U, S, Vh, gU, gVh, J, KH, opts)
    return _second_order_guard(gA, S, gS, M, complement, opts, A, U, Vh, gU, gVh)


def _complement_terms(
    gA: Tensor,
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gU: Tensor | None,
    gVh: Tensor | None,
    J: Tensor | None,
    KH: Tensor | None,
    opts: Options,
) -> Tensor:
    """``gA`` plus the one-sided terms of a thin tall (``(gU - U J) S^-1 Vh``)
    or wide (``U S^-1 (gVh - K^H Vh)``) SVD; ``J = U^H gU``, ``KH = gVh V``."""
    k = S.shape[-1]
    tall, wide = U.shape[-2] > k and J is not None, Vh.shape[-1] > k and KH is not None
    if not (tall or wide):
        return gA
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    Sinv = gap_inverse(S, tol.squeeze(-1), opts).unsqueeze(-2)
    if tall:
        gA = gA + ((gU - U @ J) * Sinv) @ Vh
    if wide:
        gA = gA + (U * Sinv) @ (gVh - KH @ Vh)
    return gA


def _cut_tail(
    JKd: Tensor, gU: Tensor | None, gVh: Tensor | None, m: int, n: int, tail: int
) -> None:
    """The rounding cut of ``JKd`` (new) in place on its trailing block from
    ``tail`` (the sums ``s_i + s_j`` in the window, ``GapChecks.tail``): off
    its diagonal, and on it for complex input (real: ``JKd_ii = 0``)."""
    k = JKd.shape[-1]
    if k - tail > (0 if JKd.is_complex() else 1):
        r = _numerator_rounding(
            None if gU is None else gU[..., tail:],
            None if gVh is None else gVh[..., tail:, :],
            m,
            n,
        )
        cut_rounding(JKd[..., tail:, tail:], r, True)


def _second_order_guard(
    gA: Tensor,
    S: Tensor,
    gS: Tensor | None,
    M: Tensor | None,
    complement: bool,
    opts: Options,
    A: Tensor | None,
    U: Tensor,
    Vh: Tensor,
    gU: Tensor | None = None,
    gVh: Tensor | None = None,
) -> Tensor:
    """``gA`` where a second derivative can be taken through it at a
    degenerate spectrum: with the exact term at the clusters the loss
    discards (given ``A``, see ``_discarded``), measured by
    ``second_order_guard`` at the others (``M``: the middle matrix, ``None``:
    ``diag(gS)``)."""
    if not torch.is_grad_enabled():
        return gA
    clusters = spectral_clusters(S, opts, complement or gA.is_complex())
    if clusters is None:
        return gA
    term = None
    if A is not None:
        found = discarded_clusters(S, gU, gS, gVh, *clusters)
        if found is not None:
            term = DiscardedTerm(U, S, Vh, gU, gVh, *found)
            gA = add_discarded_term(gA, A, term)
    if opts.gauge == "ignore":
        return gA
    if M is None:
        M = torch.diag_embed(gS)
    basis = None if A is None else (U, Vh)
    return second_order_guard("svd", gA, gS, M, clusters, opts, term, A, basis)


def _numerator_rounding(
    gU: Tensor | None, gVh: Tensor | None, m: int, n: int
) -> Tensor:
    """``r_ij`` bounding the rounding error of ``(Ja +- Ka)_ij`` (``J = U^H gU``:
    ``m`` rows; ``K = V^H gV``: ``n`` rows, ``gV``'s columns are ``gVh``'s
    rows; see ``column_rounding``)."""
    if gU is None:
        c = column_rounding(gVh, n, dim=-1)
    else:
        c = column_rounding(gU, m)
        if gVh is not None:
            c = c.add_(column_rounding(gVh, n, dim=-1))
    return pair_rounding(c)


def _blocks(*cotangents: Tensor | None) -> tuple[Tensor, ...]:
    """The given cotangents (the scale of the gauge tolerance)."""
    return tuple(g for g in cotangents if g is not None)


def _products(
    U: Tensor, Vh: Tensor, gU: Tensor | None, gVh: Tensor | None
) -> tuple[Tensor | None, Tensor | None]:
    """``J = U^H gU`` and ``KH = K^H = gVh V`` (None for a None cotangent)."""
    # K^H = gVh V, not K = Vh gVh^H: both of those factors are column-major
    # (LAPACK's Vh, the transpose of a C-ordered gVh), which torch's mm
    # multiplies 1.7x slower (n = 256)
    J = None if gU is None else U.mH @ gU
    KH = None if gVh is None else gVh @ Vh.mH
    return J, KH


def _pullback_separated(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gU: Tensor | None,
    gS: Tensor | None,
    gVh: Tensor | None,
    checks: GapChecks,
    middle_only: bool,
    opts: Options,
) -> Tensor:
    """:func:`svd_pullback` of a plain (``plain``) call where no two singular
    values are degenerate (``GapChecks.separated``; ``S >= 0`` descending, as
    svd returns it) and no broadening is asked for: the general formula's
    values, to rounding (it divides where that multiplies by inverses), in
    fewer passes and in place on the products (new).

    Off the diagonal no cutoff applies (``|s_j - s_i| > tol`` and
    ``s_j + s_i >= |s_j - s_i|``), so ``JKa / (2(s_j - s_i)) + JKd / (2(s_j +
    s_i))`` is computed as it stands, in units of ``2 s`` (exact), which folds
    the halves in; the diagonal, where the quotients are 0/0 (or ``x / 0``),
    is then overwritten with its value: ``gS`` plus, for complex input, the
    phase term ``JKd_ii / (4 s_i)`` cut where ``2 s_i <= tol`` (real input:
    ``JKd_ii = 0``). The gauge check is the diagonal's (real input: nothing).
    The cut of the numerators where a gap is small, as in the general path.
    """
    k = S.shape[-1]
    m, n = U.shape[-2], Vh.shape[-1]
    square = m == k and n == k
    if (
        square
        and k >= TRANSPOSE_COPY
        and gU is not None
        and gVh is not None
        and not (middle_only or U.is_complex())
    ):
        return _pullback_separated_large(U, S, Vh, gU, gS, gVh, checks)
    J, KH = _products(U, Vh, gU, gVh)
    JKa, JKd = _numerators(J, KH, inplace=square)
    if checks.cut_differences:  # (of a batch, only the matrices that need it)

        def bound(rows: Tensor | None) -> Tensor:
            return _numerator_rounding(
                batch_rows(gU, rows), batch_rows(gVh, rows), m, n
            )

        cut_rounding_rows(JKa, checks.rows, bound)
    _cut_tail(JKd, gU, gVh, m, n, checks.tail)
    S2 = S + S
    Si, Sj = S2.unsqueeze(-1), S2.unsqueeze(-2)
    M = JKd.div_(Si + Sj)  # its diagonal: JKd_ii / (4 s_i)
    diagonal = M.diagonal(dim1=-2, dim2=-1)
    if JKa.is_complex():
        violation = JKa.diagonal(dim1=-2, dim2=-1)
        check_gauge("svd", violation, None, _blocks(gU, gVh), opts)
        # cut where 2 s_i <= tol, i.e. 4 s_i <= 2 tol
        atol = opts.degeneracy_atol
        if atol is None:  # 2 tol = max(2 S) eps**(3/4); max(S) = S[0] >= 0
            tol2 = S2[..., :1] * eps34(S.dtype)
        else:
            tol2 = S2.new_full((*S.shape[:-1], 1), 2 * atol)
        phase = torch.where(S2 + S2 > tol2, diagonal, 0.0)
        diagonal = phase if gS is None else phase + gS
    else:
        diagonal = gS
    M.addcdiv_(JKa, Si - Sj, value=-1)
    _set_diagonal(M, diagonal)
    if middle_only:
        return M
    return _complement_terms(U @ M @ Vh, U, S, Vh, gU, gVh, J, KH, opts)


def _set_diagonal(M: Tensor, d: Tensor | None) -> None:
    """The diagonal of ``M`` set to ``d`` (None: 0), in place."""
    if d is None:
        M.diagonal(dim1=-2, dim2=-1).zero_()
    else:
        M.diagonal(dim1=-2, dim2=-1).copy_(d)


def _pullback_separated_large(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gU: Tensor,
    gS: Tensor | None,
    gVh: Tensor,
    checks: GapChecks,
) -> Tensor:
    """:func:`_pullback_separated` for a real square ``k x k`` SVD from
    ``TRANSPOSE_COPY`` on, with both vector cotangents: the same operations
    in three fresh ``k x k`` buffers (the products and one more). Each fresh
    buffer of that size costs more in page faults than a pass over it, so
    every temporary goes into one of them, the transposes of the skew parts
    and the rounding cut's ``|X| <= r`` included (as ``-r <= X <= r``)."""
    k = S.shape[-1]
    cut = checks.cut_differences
    buf = torch.empty_like(gU)
    if cut:  # (the squares for the bounds first: the buffer is free)
        c = column_rounding(gU, k, out=buf)
        c = c.add_(column_rounding(gVh, k, dim=-1, out=buf))
    J, KH = _products(U, Vh, gU, gVh)
    P = torch.sub(J, KH, out=buf)
    Q = J.add_(KH)
    JKa, JKd = adjoint_sum_(P, -1.0, KH), adjoint_sum_(Q, -1.0, KH)
    spare = KH  # free from here on
    if cut:
        cut_rounding_large(JKa, c, S, 2 * k, descending=True, spare=spare)
    _cut_tail(JKd, gU, gVh, k, k, checks.tail)
    S2 = S + S
    Si, Sj = S2.unsqueeze(-1), S2.unsqueeze(-2)
    M = JKd.div_(torch.add(Si, Sj, out=spare))
    M.addcdiv_(JKa, torch.sub(Si, Sj, out=spare), value=-1)
    _set_diagonal(M, gS)
    return torch.matmul(torch.matmul(U, M, out=spare), Vh, out=JKa)


def _numerators(
    J: Tensor | None, KH: Tensor | None, inplace: bool
) -> tuple[Tensor, Tensor]:
    """``(JKa, JKd)``: ``JKa = Ja + Ka``, ``JKd = Ja - Ka`` (``Ja = J - J^H``,
    ``Ka = K - K^H``, ``K = KH^H``; a None product is 0) as ``JKa = P - P^H``,
    ``JKd = Q - Q^H`` with ``P = J - KH``, ``Q = J + KH``; ``inplace``: in
    the buffers of ``J`` and ``KH`` where it can (new, not needed after)."""
    if J is None or KH is None:
        X = KH if J is None else J
        skew = adjoint_sum_(X, -1.0) if inplace else with_adjoint(X, -1.0)
        other = skew.neg() if J is None else skew.clone()
        return (other, skew) if J is None else (skew, other)
    if not inplace:
        return adjoint_sum_(J - KH, -1.0), adjoint_sum_(J + KH, -1.0)
    P = torch.sub(J, KH)
    Q = J.add_(KH)
    return adjoint_sum_(P, -1.0, KH), adjoint_sum_(Q, -1.0, KH)


def fold_complement(
    op: str, U: Tensor, gU: Tensor | None, k: int, opts: Options
) -> tuple[Tensor, Tensor | None]:
    """Fold the cotangent of the complement columns ``U[..., k:]`` of a full
    SVD into the thin one: ``gU_k -= U_perp (gU_perp^H U_k)``.

    Exact for losses that see ``U_perp`` only through its span (its basis is
    arbitrary); the part of ``U_perp^H gU_perp`` that is not Hermitian would
    depend on that basis and is checked like any gauge dependence.
    """
    Uk, Up = U[..., :k], U[..., k:]
    if gU is None or Up.shape[-1] == 0:
        return Uk, None if gU is None else gU[..., :k]
    gUp = gU[..., k:]
    block = Up.mH @ gUp
    everywhere = torch.ones(block.shape[-2:], dtype=torch.bool, device=U.device)
    check_gauge(op, _skew(block), everywhere, (gU,), opts)
    return Uk, gU[..., :k] - Up @ (gUp.mH @ Uk)


def _svd_function_weights(
    S: Tensor, f: Tensor, d: Tensor, complement: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """The divided differences of ``U f(S) Vh``'s derivative (shared by its
    pullback and pushforward): ``f[s_i, s_j]``, ``f[s_i, -s_j]`` (``f`` odd
    extended) and the complement weights ``f[s_i, 0]`` (zero when
    ``complement`` is False: square input has no complement)."""
    Si, Sj, fi, fj = S.unsqueeze(-1), S.unsqueeze(-2), f.unsqueeze(-1), f.unsqueeze(-2)
    di, dj = d.unsqueeze(-1), d.unsqueeze(-2)
    Lm = divided_difference(Si, Sj, fi, fj, di, dj)
    Lp = divided_difference(Si, -Sj, fi, -fj, di, dj)
    zero = torch.zeros_like(S)
    w = divided_difference(S, zero, f, zero, d, d) if complement else zero
    return Lm, Lp, w


def svd_function_pullback(
    U: Tensor, S: Tensor, Vh: Tensor, fn: SpectralFn, gY: Tensor, opts: Options
) -> Tensor:
    """Gradient of ``Y = U f(S) Vh`` (thin SVD) with cotangent ``gY``.

    Exact at every spectrum: only divided differences of ``f`` appear.
    """
    # dY = U (L- o sym(dP) + L+ o skew(dP)) V^H + the one-sided complement
    # terms, dP = U^H dA V, where L-_ij = (f_i - f_j)/(s_i - s_j) and
    # L+_ij = (f_i + f_j)/(s_i + s_j) (divided differences of the odd extension
    # of f). The map is self-adjoint entrywise, so the pullback has the same
    # form with X = U^H gY V. Ties are limits (f'), never 0/0. An infinite f'
    # (sqrt at s = 0) makes some divided differences infinite: the gradient is
    # then +-inf where they reach and finite elsewhere (with_infinite_weights).
    # The forward has applied the gauge policy to this spectrum (a truncation
    # inside a cluster) already: evaluating f here must not warn a second time.
    f, d = fn(S, policy_applied(opts))
    tall, wide = U.shape[-2] > S.shape[-1], Vh.shape[-1] > S.shape[-1]
    Lm, Lp, w = _svd_function_weights(S, f, d, tall or wide)
    X = U.mH @ gY @ Vh.mH

    def pullback(Lm: Tensor, Lp: Tensor, w: Tensor) -> Tensor:
        gA = U @ ((Lm * (X + X.mH) + Lp * (X - X.mH)) * 0.5) @ Vh
        w = w.unsqueeze(-2)
        if tall:
            gA = gA + ((gY @ Vh.mH - U @ X) * w) @ Vh
        if wide:
            gA = gA + (U * w) @ (U.mH @ gY - X @ Vh)
        return gA

    return with_infinite_weights(pullback, (Lm, Lp, w), max_abs(gY))


def svd_pushforward(
    U: Tensor, S: Tensor, Vh: Tensor, dA: Tensor, opts: Options, adapted: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Tangents ``(dU, dS, dVh)`` of ``A = U diag(S) Vh`` along ``dA``: the
    transpose of :func:`svd_pullback`, with the same cluster rule.

    ``U``/``Vh`` may be thin or full; the complement columns of a full SVD
    move only as much as orthogonality to the thin ones requires (their basis
    inside the complement is arbitrary, as in the pullback's fold).
    ``adapted``: the basis was rotated to the tangent inside the clusters
    degenerate to rounding (:func:`svd_adapted_rotation`), as in
    :func:`~pyspectral.pullbacks.eigh.eigh_pushforward` (the branch's
    rotation inside a split cluster; the clusters it could not follow are
    measured); differentiated, the tangents are measured (``tangent_guard``).
    The zero singular values are left as they are (their cluster is not
    rotated: the singular values of its block are not differentiable).
    """
    # With dP = U^H dA V, Omega_U = U^H dU, Omega_V = V^H dV (anti-Hermitian),
    # dP = Omega_U S + dS - S Omega_V. Split dP = H + K (Hermitian and
    # anti-Hermitian parts): for all i, j
    #   Omega_U_ij = H_ij / (s_j - s_i) + K_ij / (s_j + s_i),
    #   Omega_V_ij = H_ij / (s_j - s_i) - K_ij / (s_j + s_i),
    # dS = Re diag(dP). The diagonal of the second term is the complex phase
    # i Im(dP_ii) / (2 s_i), split equally between U and V (the convention of
    # the pullback, whose transpose this is). Every inverse is the pullback's
    # regularised one: inside a degenerate cluster the rotation is 0, and the
    # zero-singular-value terms are pseudo-inverses. The thin complement terms
    # (I - U U^H) dA V S^-1 and (I - V V^H) dA^H U S^-1 are added one-sided.
    # No rounding cut here (the pullback's cut_rounding): dP is data, the
    # tangent's own components, not a difference that is 0 for a class of
    # inputs; a small H_ij is a genuine small component whose quotient is the
    # exact tangent to its ordinary rounding, and there is no exact 0 to snap
    # it to. (The cancellation of a polar factor's dU Vh + U dVh happens in the
    # caller's graph, after this; svd_function is exact there.)
    k = S.shape[-1]
    Uk, Vk = U[..., :k], Vh[..., :k, :].mH
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    Si, Sj = S.unsqueeze(-1), S.unsqueeze(-2)
    dAV = dA @ Vk
    dP = Uk.mH @ dAV
    H, K = (dP + dP.mH) * 0.5, (dP - dP.mH) * 0.5
    Hg = H * gap_inverse(Sj - Si, tol, opts)
    Ks = K * gap_inverse(Sj + Si, tol, opts)
    dS = dP.diagonal(dim1=-2, dim2=-1).real
    dU, dV = Uk @ (Hg + Ks), Vk @ (Hg - Ks)
    Sinv = gap_inverse(S, tol.squeeze(-1), opts).unsqueeze(-2).to(U.dtype)
    if U.shape[-2] > k:
        dU = dU + (dAV - Uk @ dP) * Sinv
    if Vh.shape[-1] > k:
        dAhU = dA.mH @ Uk
        dV = dV + (dAhU - Vk @ dP.mH) * Sinv
    pairs = cluster_pairs(S, tol, opts)
    if pairs is not None:
        # the clusters of nonzero singular values (a zero one is not rotated)
        nonzero = S > tol.squeeze(-1)
        pairs = pairs & nonzero.unsqueeze(-1) & nonzero.unsqueeze(-2)
        t = split_tol(dA)
        if adapted:
            # the branch's rotation inside the split clusters, common to U and
            # V (the Hermitian dilation's eigenvectors [u; v] / sqrt 2)
            check_cluster_split("svd", H, pairs, t, opts)
            same, _ = rounding_clusters(S)
            if same is not None:  # (the clusters the forward could rotate)
                N = (Uk.mH @ (dA @ dV) + Vk.mH @ (dA.mH @ dU)) * 0.5
                Omega = branch_rotation(N, dS, pairs & same, t)
                dU, dV = dU + Uk @ Omega, dV + Vk @ Omega
    dU, dV = _complement_tangent(U, Uk, dU), _complement_tangent(Vh.mH, Vk, dV)
    if pairs is None:
        return dU, dS, dV.mH
    Up, Sp, Vhp = (peek(x.detach()) for x in (U, S, Vh))  # (the guard: plain)
    dU, dS, dVh = tangent_guard(
        "svd", (dU, dS, dV.mH), split_pairs(H, pairs, t), (U, S, Vh, dA),
        lambda g: _middle(Up, Sp, Vhp, *g, opts), opts,
    )  # fmt: skip
    return dU, dS, dVh


def _middle(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gU: Tensor | None,
    gS: Tensor | None,
    gVh: Tensor | None,
    opts: Options,
) -> Tensor | None:
    """The middle matrix of :func:`svd_pullback` for the cotangents of the
    tangents (``None``: nothing to measure)."""
    if gU is None and gVh is None:
        return None if gS is None else torch.diag_embed(gS).to(U.dtype)
    return svd_pullback(U, S, Vh, gU, gS, gVh, policy_applied(opts), middle_only=True)


def svd_check_split(
    U: Tensor, S: Tensor, Vh: Tensor, dA: Tensor, opts: Options
) -> None:
    """The measure of :func:`svd_pushforward` with ``adapted`` alone (the
    clusters of nonzero values the basis could not follow), for a backend
    that pushes the tangents itself (Julia's pushforward: the same formulas)."""
    k = S.shape[-1]
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    pairs = cluster_pairs(S, tol, opts)
    if pairs is None:
        return
    nonzero = S > tol.squeeze(-1)
    pairs = pairs & nonzero.unsqueeze(-1) & nonzero.unsqueeze(-2)
    P = U[..., :k].mH @ dA @ Vh[..., :k, :].mH
    check_cluster_split("svd", (P + P.mH) * 0.5, pairs, split_tol(dA), opts)


def svd_adapted_rotation(
    U: Tensor, S: Tensor, Vh: Tensor, dA: Tensor, opts: Options
) -> Tensor | None:
    """The rotation ``R`` (``k x k``) of the thin factors, ``U_k R`` and
    ``R^H Vh_k``, to the basis adapted to the tangent ``dA`` inside each
    cluster of nonzero singular values degenerate to rounding that ``dA``
    splits: the eigenvectors of its block of ``herm(U^H dA V)``, largest
    first (see pullbacks/eigh.py, forward mode at a degenerate cluster).
    None where there is nothing to rotate."""
    k = S.shape[-1]
    if k < 2 or opts.broadening is not None:
        return None
    tol = degeneracy_tol(S, opts.degeneracy_atol)
    P = U[..., :k].mH @ dA @ Vh[..., :k, :].mH
    H = (P + P.mH) * 0.5
    nonzero = S > tol.squeeze(-1)
    return adapted_rotation(S, H, split_tol(dA), True, nonzero)


def _complement_tangent(U: Tensor, Uk: Tensor, dUk: Tensor) -> Tensor:
    """Append the tangent ``-U_k (dU_k^H U_perp)`` of the complement columns of
    a full SVD: the least motion that keeps ``[U_k, U_perp]`` unitary (no
    rotation inside the complement), the transpose of ``fold_complement``."""
    k = Uk.shape[-1]
    if U.shape[-1] == k:
        return dUk
    Up = U[..., k:]
    return torch.cat((dUk, -Uk @ (dUk.mH @ Up)), dim=-1)


def svd_function_pushforward(
    U: Tensor, S: Tensor, Vh: Tensor, fn: SpectralFn, dA: Tensor, opts: Options
) -> Tensor:
    """Tangent of ``Y = U f(S) Vh`` (thin SVD) along ``dA``, exact at every
    spectrum: the map of :func:`svd_function_pullback` (self-adjoint
    entrywise) applied to ``dA``, with the same divided differences."""
    f, d = fn(S, policy_applied(opts))
    tall, wide = U.shape[-2] > S.shape[-1], Vh.shape[-1] > S.shape[-1]
    Lm, Lp, w = _svd_function_weights(S, f, d, tall or wide)
    dAV = dA @ Vh.mH
    dP = U.mH @ dAV

    def pushforward(Lm: Tensor, Lp: Tensor, w: Tensor) -> Tensor:
        dY = U @ ((Lm * (dP + dP.mH) + Lp * (dP - dP.mH)) * 0.5) @ Vh
        w = w.unsqueeze(-2)
        if tall:
            dY = dY + ((dAV - U @ dP) * w) @ Vh
        if wide:
            dY = dY + (U * w) @ (U.mH @ dA - dP @ Vh)
        return dY

    return with_infinite_weights(pushforward, (Lm, Lp, w), tangent_scale(dA))


# ---------------------------------------------------------- second order
#
# U f(S) V^H is the top-right block of g(H), H = [[0, A], [A^H, 0]] the
# Hermitian dilation and g the odd extension of f (g(-s) = -f(s), g(0) = 0):
# H has the eigenvalues +s_i, -s_i with eigenvectors [u_i; +-v_i] / sqrt(2),
# and 0 on the complement ([U_perp; 0] for tall A, [0; V_perp] for wide A),
# where g(0) = 0 makes the block vanish. The first-order pullback is
# block12(L_g(H)[dil G]), dil G = [[0, G], [G^H, 0]] (the divided differences
# f[s_i, s_j], f[s_i, -s_j], f[s_i, 0] of svd_function_pullback), and its
# derivative along dA, which is also its pullback w.r.t. A with cotangent dA,
# is block12(L2_g(H; dil G, dil dA)): the Hermitian second-order formula of
# pullbacks/matfun.py on the 2k nodes (s, -s) and the complement node 0. In
# the eigenbasis of the nodes (s, -s), with P = U^H X V,
#   X^ = [[herm P, -skew P], [skew P, -herm P]],
# and the complement enters through its coordinates in the ambient space
# (never forming U_perp): (I - U U^H) X V [1, -1] / sqrt(2) for tall A,
# (I - V V^H) X^H U [1, 1] / sqrt(2) for wide A. f'(0) at the complement node
# matters only where it meets a zero singular value; that node's f' is used.


def _dilation_coordinates(
    U: Tensor, V: Tensor, X: Tensor, tall: bool, wide: bool
) -> tuple[Tensor, Tensor | None]:
    """``X^`` on the nodes ``(s, -s)`` and the complement coordinates."""
    P = U.mH @ X @ V
    H, K = (P + P.mH) * 0.5, (P - P.mH) * 0.5
    Xh = torch.cat((torch.cat((H, -K), -1), torch.cat((K, -H), -1)), -2)
    r = 0.5**0.5
    if tall:
        Q = (X @ V - U @ P) * r
        return Xh, torch.cat((Q, -Q), -1)
    if wide:
        Q = (X.mH @ U - V @ P.mH) * r
        return Xh, torch.cat((Q, Q), -1)
    return Xh, None


def svd_function_second_order(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    fn: SpectralFn,
    gY: Tensor,
    dA: Tensor,
    opts: Options,
) -> Tensor:
    """Derivative of :func:`svd_function_pullback` (at the cotangent ``gY``)
    along ``dA``, which is also its pullback w.r.t. ``A`` with cotangent
    ``dA``: the second-order Daleckii-Krein formula on the Hermitian dilation
    (comment above), exact at every spectrum, zero singular values included
    where ``f`` extends to an odd ``C^2`` function (``f(0) = f''(0) = 0``)."""
    k = S.shape[-1]
    if k == 0:
        return torch.zeros_like(dA)
    tall, wide = U.shape[-2] > k, Vh.shape[-1] > k
    V = Vh.mH
    s = spectral_nodes(S, fn, opts)
    # The nodes (s, -s) with the odd extension: g(-s) = -f(s), g'(-s) = f'(s),
    # g''(-s) = -f''(s), except at an exact zero, where -0 takes f''(0) too (g
    # is C^2 there only if f''(0) = 0; else the second derivative does not
    # exist, and an infinite f''(0) then gives +-inf, not inf - inf = NaN).
    h = torch.where(S == 0, s.h, -s.h)
    E = Nodes(*(torch.cat(pair, -1) for pair in zip(s, (-S, -s.f, s.d, h))))
    Xh, Xz = _dilation_coordinates(U, V, gY, tall, wide)
    Yh, Yz = _dilation_coordinates(U, V, dA, tall, wide)
    pairs = [[(Xh, Yh), (Yh, Xh)]]
    parts = [contraction(E, E, E, pairs[0])]
    if Xz is not None:
        zero = torch.zeros_like(Xz[..., 0].real)
        Z = Nodes(zero, zero, zero + s.d[..., -1:], zero)
        pairs += [[(Xz.mH, Yz), (Yz.mH, Xz)], [(Xz, Yh), (Yz, Xh)]]
        parts += [contraction(E, Z, E, pairs[1]), contraction(Z, E, E, pairs[2])]
    r = 0.5**0.5
    top, bottom = torch.cat((U, U), -1) * r, torch.cat((V, -V), -1) * r

    def second(*weights: Tensor) -> Tensor:
        T = [
            part(weights[4 * i : 4 * i + 4], p)
            for i, (part, p) in enumerate(zip(parts, pairs))
        ]
        inner = T[0] if len(T) == 1 else T[0] + T[1]
        out = top @ inner @ bottom.mH
        if tall:
            out = out + T[2] @ bottom.mH
        elif wide:
            out = out + top @ T[2].mH
        return out

    weights = tuple(w for part in parts for w in part.weights)
    return with_infinite_weights(second, weights, max_abs(gY) * tangent_scale(dA))
