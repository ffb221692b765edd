"""Second derivatives through ``svd`` at degenerate clusters that the loss
discards (zero cotangents on their singular vectors and values: a truncated
SVD whose discarded part has zeros or multiplets, as in TRG), made exact: the
term the pullback's cluster rule drops there is added back.

Derivation. Let C be a cluster (value s, within ``degeneracy_atol``; or a
cluster of zero singular values, with the complement of a rectangular A) on
which gU, gV and gS vanish. With J = U^H gU, K = V^H gV, for i outside C only
J_ji = u_j^H gU_i and K_ji = v_j^H gV_i (j in C) are nonzero, and the part of
the pullback's gA = U M V^H that involves C is, with the partial fractions of
M_ij = Ja_ij s_j / (s_j^2 - s_i^2) + Ka_ij s_i / (s_j^2 - s_i^2),

    sum_i  - u_i gU_i^H U_C g_i(S_C) V_C^H - u_i gV_i^H V_C e_i(S_C) V_C^H
           - U_C e_i(S_C) U_C^H gU_i v_i^H - U_C g_i(S_C) V_C^H gV_i v_i^H,

g_i(x) = x / (x^2 - s_i^2) (odd), e_i(x) = s_i / (x^2 - s_i^2) (even). Each
bracket is a spectral function of the cluster's block of A (U_C g V_C^H of its
SVD, V_C e V_C^H of A^H A), so the exact derivative along D moves the cluster
by its whole block E = U_C^H D V_C: at the scalar point s I, by g_i'(s) herm(E)
+ (g_i(s) / s) skew(E) and e_i'(s) herm(E) (Daleckii-Krein at a multiple
eigenvalue). The derivative of the pullback (autograd through the pushforward)
has the real diagonal of E (the tangent of S_C) and skew(E) (the relative
rotation, gap s_j + s_i = 2s), and drops the rest: off-diagonal herm(E) times
g_i'(s), e_i'(s). At s = 0 the even functions are flat (e_i'(0) = 0) and the
odd ones have the derivative g_i'(0) E on the whole block that A has past its
other singular vectors, P_L D P_R with P_L = I - U_nc U_nc^H (the zero
cluster and the complement of a tall A), P_R likewise (wide A); of it, the
pullback's derivative has the real diagonal of E. The dropped part is linear
in D:

    dG[D] = U (-(J^H o a + K^H o b) E^ - E^ (J o b^T + K o a^T)) V^H + complement,

a_ij = g_i'(s_j) = -(s_j^2 + s_i^2) / (s_j^2 - s_i^2)^2, b_ij = e_i'(s_j) =
-2 s_j s_i / (s_j^2 - s_i^2)^2 for i outside the cluster of j (s_j: the
cluster's mean, 0 for zeros), E^ the dropped part of E (on each cluster
block), o the entrywise product. It is added to the first-order gradient as an operation
of A whose value is 0 (``_DiscardedTerm``): its jvp is dG[D] (forward over
reverse), its vjp the transpose (reverse over reverse). Every derivative of
the svd is then exact there, so the guard measures the coupling only at the
clusters that the loss touches. Zero cotangents at this A do not make a
cluster discarded to second order (sum(S**2) at exact zeros has gS = 2 S = 0
there): the S-cotangent's change on it must vanish as well, which the guard
checks (forward over reverse: its tangent; reverse over reverse: the
second-order S-cotangent less what the pullback's own gap inverses put there,
``DiscardedTerm.spectral_offset``). A loss that touches a cluster (a
projector onto it, its singular values) still needs the rotation inside it,
which no first-order cotangent determines (``_second_order``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._autograd import no_third_derivative
from .common.defaults import peek


def discarded_clusters(
    S: Tensor,
    gU: Tensor | None,
    gS: Tensor | None,
    gVh: Tensor | None,
    pairs: Tensor,
    zeros: Tensor,
) -> tuple[Tensor, Tensor] | None:
    """The clusters (``pairs``, ``zeros`` of ``spectral_clusters``) on which
    every cotangent is exactly 0: ``(same, zero)``, ``same`` (``(*, k, k)``)
    whether ``i`` and ``j`` lie in one such cluster (diagonal included),
    ``zero`` whether ``j`` lies in such a zero cluster. None if there is none,
    or if a torch.func transform batches the cotangents (the masks could not
    be aligned with them: the guard then measures every cluster)."""
    k = S.shape[-1]
    touched = torch.zeros_like(zeros)
    for g, dim in ((gU, -2), (gVh, -1)):
        if g is not None:
            p = peek(g.detach())
            if p.shape != g.shape:
                return None
            touched = touched | (p != 0).any(dim)
    if gS is not None:
        p = peek(gS.detach())
        if p.shape != gS.shape:
            return None
        touched = touched | (p != 0)
    if touched.shape != zeros.shape:
        return None
    eye = torch.eye(k, dtype=torch.bool, device=S.device)
    member = pairs.any(-1) | zeros
    same = (pairs | eye) & member.unsqueeze(-1) & member.unsqueeze(-2)
    # a cluster is discarded when none of its members is touched
    reached = (same & touched.unsqueeze(-2)).any(-1)
    discarded = member & ~reached
    same = same & discarded.unsqueeze(-1) & discarded.unsqueeze(-2)
    if not bool(peek(discarded).any()):
        return None
    # plain tensors: under a torch.func transform even operations on plain
    # tensors return wrapped ones, which must not outlive its level
    return peek(same), peek(zeros & discarded)


class DiscardedTerm:
    """``dG[D]`` of the module's comment and its transpose, for the thin SVD
    ``U, S, Vh`` (plain tensors) with first-order cotangents ``gU``, ``gVh``
    and the discarded clusters ``same``, ``zero``."""

    def __init__(self, U, S, Vh, gU, gVh, same, zero) -> None:
        U, S, Vh = (peek(t.detach()) for t in (U, S, Vh))
        k, dtype = S.shape[-1], U.dtype
        gU = torch.zeros_like(U) if gU is None else peek(gU.detach())
        gV = (torch.zeros_like(Vh) if gVh is None else peek(gVh.detach())).mH
        self.U, self.Vh = U, Vh
        self.J, self.K = U.mH @ gU, Vh @ gV
        eye = torch.eye(k, dtype=torch.bool, device=S.device)
        self.off = same & ~eye
        self.zero = zero
        self.members = same.any(-1)
        # the cluster's mean value (0 for zeros) per column j
        member = same.diagonal(dim1=-2, dim2=-1)
        count = same.sum(-1).clamp_min(1).to(S.dtype)
        mean = (same.to(S.dtype) @ S.unsqueeze(-1)).squeeze(-1) / count
        sj = torch.where(zero, torch.zeros_like(mean), mean).unsqueeze(-2)
        si = S.unsqueeze(-1)
        den = (sj * sj - si * si) ** 2
        valid = member.unsqueeze(-2) & ~same & (den > 0)
        safe = torch.where(valid, den, torch.ones_like(den))
        self.a = torch.where(valid, -(sj * sj + si * si) / safe, 0.0).to(dtype)
        self.b = torch.where(valid, -2 * sj * si / safe, 0.0).to(dtype)
        J, K = self.J, self.K
        self.left = J.mH * self.a + K.mH * self.b
        self.right = J * self.b.mT + K * self.a.mT
        self.tall = U.shape[-2] > k and bool(peek(zero).any())
        self.wide = Vh.shape[-1] > k and bool(peek(zero).any())
        if self.tall:
            self.Gp = gU - U @ J  # the complement part of gU
        if self.wide:
            self.Gp = gV - Vh.mH @ K
        # plain tensors (see discarded_clusters), used at any level later
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                setattr(self, name, peek(value))

    def _dropped(self, E: Tensor) -> Tensor:
        """The part of the cluster blocks of ``E`` that the derivative of the
        pullback drops (self-adjoint): off the diagonal, ``herm(E)`` on
        clusters at ``s > 0`` and ``E`` on zero clusters; on the diagonal of
        zero clusters, ``i Im E_jj``."""
        zero_pair = self.zero.unsqueeze(-1) & self.zero.unsqueeze(-2)
        H = (E + E.mH) * 0.5
        out = torch.where(self.off, torch.where(zero_pair, E, H), 0.0)
        if E.is_complex():
            d = E.diagonal(dim1=-2, dim2=-1).imag * self.zero
            out = out + torch.diag_embed(torch.complex(torch.zeros_like(d), d))
        return out

    def tangent(self, D: Tensor) -> Tensor:
        """``dG[D]`` (forward over reverse)."""
        U, Vh, a = self.U, self.Vh, self.a
        E = U.mH @ D @ Vh.mH
        Eh = self._dropped(E)
        out = U @ (-(self.left @ Eh + Eh @ self.right)) @ Vh
        z = self.zero.unsqueeze(-2).to(E.dtype)
        if self.tall:
            Q = (D @ Vh.mH - U @ E) * z
            X = (self.Gp.mH @ Q) * a
            out = out - U @ X @ Vh - Q @ (self.K * a.mT) @ Vh
        if self.wide:
            Q = (U.mH @ D - E @ Vh) * z.mT
            out = out - U @ (self.J.mH * a) @ Q - U @ ((Q @ self.Gp) * a.mT) @ Vh
        return out

    def _block_cotangent(self, Rk: Tensor) -> Tensor:
        """The cotangent of the whole cluster blocks of ``E`` (before
        ``_dropped``) for ``Rk = U^H R V``."""
        return -(self.left.mH @ Rk + Rk @ self.right.mH)

    def spectral_offset(self, R: Tensor) -> Tensor:
        """What the derivative of the pullback itself (its gap inverses)
        puts into the second-order S-cotangent of the discarded clusters, for
        the cotangent ``R`` of the gradient: the real diagonal of the block
        cotangent (``(*, k)``, 0 off the clusters). The rest of that
        S-cotangent comes from the loss, through its S-cotangent, and must
        vanish there (``SecondOrderCheck.spectral``)."""
        Rk = self.U.mH @ peek(R.detach()) @ self.Vh.mH
        d = self._block_cotangent(Rk).diagonal(dim1=-2, dim2=-1).real
        return d * self.members

    def cotangent(self, R: Tensor) -> Tensor:
        """The transpose of :meth:`tangent` (reverse over reverse)."""
        U, Vh, a = self.U, self.Vh, self.a
        V = Vh.mH
        Rk = U.mH @ R @ V
        Eb = self._dropped(self._block_cotangent(Rk))
        out = U @ Eb @ Vh
        z = self.zero.unsqueeze(-2).to(Rk.dtype)
        if self.tall:
            Qb = -(self.Gp @ (Rk * a) + R @ V @ (self.K * a.mT).mH) * z
            out = out + (Qb - U @ (U.mH @ Qb)) @ Vh
        if self.wide:
            Qb = -((self.J.mH * a).mH @ U.mH @ R + (Rk * a.mT) @ self.Gp.mH) * z.mT
            out = out + U @ (Qb - (Qb @ V) @ Vh)
        return out


class _DiscardedTerm(torch.autograd.Function):
    """Zero as an operation of ``A``, whose derivative is ``term``'s
    (``DiscardedTerm``): added to a first-order gradient, it supplies the term
    that the derivative of the pullback drops at discarded clusters."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, term: DiscardedTerm) -> Tensor:
        return torch.zeros_like(A)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        ctx.A, ctx.term = inputs

    @staticmethod
    def backward(ctx: Any, R: Tensor) -> tuple:
        (gA,) = no_third_derivative("svd", ctx.A, ctx.term.cotangent(R))
        return gA, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, _: Any) -> Tensor:
        return ctx.term.tangent(dA)


def add_discarded_term(gA: Tensor, A: Tensor, term: DiscardedTerm) -> Tensor:
    """``gA`` plus the zero whose derivative is the dropped term."""
    return gA + _DiscardedTerm.apply(A, term)
