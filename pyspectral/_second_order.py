"""Second derivatives through the ``svd`` / ``eigh`` pullbacks at a degenerate
spectrum: where they are exact, and the guard that measures it and applies
the gauge policy where they are not.
"""

from __future__ import annotations

from typing import Any

import torch

from ._settings import Options
from .common.defaults import degeneracy_tol, eps, gauge_tol, peek
from .common.gauge import apply_gauge_policy

# ------------------------------------------------ second order of svd / eigh
#
# At a degenerate cluster the svd / eigh pullbacks drop the 0/0 terms of the
# cluster (first order: exact for the losses that the gauge policy accepts).
# Their derivative, a second derivative of the loss, drops the next 0/0 terms:
# the rotation inside the cluster, which along A + t D is the finite rotation
# that diagonalises D in the cluster (degenerate perturbation theory), and the
# divided difference of the S-cotangent over the cluster. Neither is in the
# cotangents. The second derivative is still exact where both vanish: where the
# first-order middle matrix M (gA = U M Vh) commutes with every rotation inside
# every cluster (M scalar on the cluster and decoupled from the rest), and the
# change of the S-cotangent is constant on every cluster (sum(S), (sum S)**2).
# A zero singular value with a complement (rectangular or complex input, or
# two zeros) is a cluster with -0 and the complement, on which the odd
# extension makes that constant 0. The guard measures both, when a second
# derivative is taken: forward over reverse (its jvp sees the tangent of the
# S-cotangent) and reverse over reverse (its backward runs first, and leaves
# the S-cotangent check to the pullback's next call, the second-order one).
# Both dropped terms act through the part of the tangent dA that splits a
# cluster (off-diagonal herm(U_C^H dA V_C); for zeros, the rest of their
# block): where the tangent keeps a cluster degenerate to first order (a
# symmetry of the path, as in TRG), the derivative along it is exact whatever
# M is. Forward over reverse sees dA and measures only the clusters it
# splits (svd). Reverse over reverse cannot: its result, a gradient w.r.t. A,
# is contracted with the directions of A's own inputs after the guard has
# run, so it measures every cluster the loss touches. (The clusters a loss
# discards are exact either way: _discarded.)


class SecondOrderCheck:
    """What a second derivative through a pullback at a degenerate spectrum
    must measure: ``coupling`` (``max |M|`` off the rotation-invariant
    pattern of the clusters the loss touches, with its tolerance
    ``coupling_tol``) and the clusters (``pairs``, ``zeros``) on which the
    change of the S-cotangent must be constant (0). ``parts``: the middle
    matrix and the touched clusters, to measure the coupling again at the
    clusters a tangent splits; ``basis``: ``(U, Vh)`` of an svd (None:
    every touched cluster counts as split)."""

    def __init__(
        self,
        op: str,
        pairs,
        zeros,
        coupling,
        coupling_tol,
        opts,
        discarded=None,
        parts=None,
        basis=None,
    ):
        self.op, self.pairs, self.zeros, self.opts = op, pairs, zeros, opts
        self.coupling, self.coupling_tol = coupling, coupling_tol
        self.discarded, self.offset = discarded, None
        self.parts, self.basis = parts, basis

    def reverse(self, R: torch.Tensor) -> None:
        """Reverse over reverse (``R``: the cotangent of the gradient): the
        coupling here; the S-cotangent at the pullback's second-order call
        (:func:`check_second_order_cotangent`), less what the discarded
        clusters' exact term accounts for."""
        if self._coupling():
            # (measured: the pullback's next call is still a second-order one)
            self.opts.state.second_order = _REPORTED
            return
        if self.discarded is not None:
            self.offset = self.discarded.spectral_offset(R)
        self.opts.state.second_order = self

    def forward(self, dgS: torch.Tensor | None, dA: torch.Tensor | None = None) -> None:
        """Forward over reverse: the coupling and the tangent of the
        S-cotangent, at the clusters that the tangent ``dA`` splits."""
        split = None if dA is None else self._split_pairs(dA)
        if split is not None:
            P, cpairs, czeros = self.parts
            self.coupling = _coupling(P, peek(cpairs & split), czeros)
            self.pairs = peek(self.pairs & split)
        if not self._coupling() and dgS is not None:
            self.spectral(dgS, (dgS,))

    def _split_pairs(self, dA: torch.Tensor) -> torch.Tensor | None:
        """The cluster pairs ``(i, j)`` whose entry of ``herm(U^H dA V)``, or
        the difference of whose diagonal entries, exceeds ``eps**(3/4) max
        |dA|`` (a tangent that keeps a cluster degenerate splits none of its
        pairs), or None where that cannot be measured (no
        svd basis, a transform's batch dimensions)."""
        if self.basis is None or self.parts is None:
            return None
        U, Vh = self.basis
        D = peek(dA.detach())
        if D.shape[:-2] != U.shape[:-2] or D.shape[-2:] != (U.shape[-2], Vh.shape[-1]):
            return None
        with torch.no_grad():
            E = U.mH @ D @ Vh.mH
            H = (E + E.mH) * 0.5
            tol = eps(D.dtype) ** 0.75 * D.abs().amax(dim=(-2, -1), keepdim=True)
            # a diagonal block with unequal entries splits the cluster too (a
            # basis adapted to the tangent: forward mode, pullbacks/eigh.py)
            d = H.diagonal(dim1=-2, dim2=-1).real
            spread = (d.unsqueeze(-1) - d.unsqueeze(-2)).abs()
            split = peek((H.abs() > tol) | (spread > tol))
        return split if split.shape == self.pairs.shape else None

    def _coupling(self) -> bool:
        if self.coupling > self.coupling_tol:
            vectors = "singular vectors" if self.op == "svd" else "eigenvectors"
            apply_gauge_policy(
                f"{self.op}: second derivative (double backward, hessian) at a "
                f"degenerate spectrum: the gradient depends on the {vectors} "
                f"inside a degenerate cluster (coupling measured "
                f"{self.coupling:.3g} > {self.coupling_tol:.3g}), and the exact "
                "second derivative needs their rotation inside it, which is not "
                f"in the cotangents: it is not exact. {_remedy(self.op)}",
                self.opts,
            )
            return True
        return False

    def spectral(self, g: torch.Tensor, scale: tuple[torch.Tensor, ...]) -> None:
        """Apply the gauge policy if ``g`` (the change of the S-cotangent, or
        the second-order S-cotangent) is not constant on each cluster (0 on
        the zero clusters)."""
        with torch.no_grad():
            g = peek(g)
            if self.offset is not None and self.offset.shape == g.shape:
                g = g - self.offset
            pairs, zeros = _aligned(self.pairs, self.zeros, g.shape[:-1])
            spread = (g.unsqueeze(-1) - g.unsqueeze(-2)).abs().masked_select(pairs)
            at_zeros = g.abs().masked_select(zeros)
            measured = max(
                (float(t.max()) for t in (spread, at_zeros) if t.numel()), default=0.0
            )
        if measured == 0:
            return
        tol = gauge_tol(*(b for b in scale if b is not None), atol=self.opts.gauge_atol)
        if measured > tol:
            values = "singular values" if self.op == "svd" else "eigenvalues"
            apply_gauge_policy(
                f"{self.op}: second derivative (double backward, hessian) at a "
                f"degenerate spectrum: the derivative of the gradient w.r.t. the "
                f"{values} differs inside a degenerate cluster (measured "
                f"{measured:.3g} > {tol:.3g}); the exact second derivative needs "
                "its divided difference over the cluster, which is not in the "
                f"cotangents: it is not exact. {_remedy(self.op)}",
                self.opts,
            )


def _aligned(
    pairs: torch.Tensor, zeros: torch.Tensor, batch: torch.Size
) -> tuple[torch.Tensor, torch.Tensor]:
    """The cluster masks broadcastable against a tensor of batch shape
    ``batch``: as they are where their batch shape ends it (extra leading
    dimensions: a transform's, such as jacrev's basis), else the pairs of any
    batch element."""
    b = pairs.shape[:-2]
    if len(b) <= len(batch) and batch[len(batch) - len(b) :] == b:
        return pairs, zeros
    k = pairs.shape[-1]
    return pairs.reshape(-1, k, k).any(0), zeros.reshape(-1, k).any(0)


def _remedy(op: str) -> str:
    if op == "eig":  # matrix_function reads one triangle: wrong for non-Hermitian A
        return (
            "eig_function has exact second derivatives at every spectrum of a "
            "diagonalizable A: e.g. sum(L**3) = trace(eig_function(A, ('pow', 3))) "
            "= trace(torch.linalg.matrix_power(A, 3))."
        )
    if op == "svd":
        return (
            "svd_function has exact second derivatives at every spectrum: e.g. "
            "sum(S**3) = <A, svd_function(A, ('pow', 2))>."
        )
    return (
        "matrix_function has exact second derivatives at every spectrum: e.g. "
        "sum(w**3) = trace(matrix_function(A, ('pow', 3)))."
    )


class _SecondOrderGuard(torch.autograd.Function):
    """Identity on a first-order gradient built differentiably; its backward
    and jvp run when a second derivative is taken, and measure it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        gA: torch.Tensor, gS: Any, A: Any, check: SecondOrderCheck
    ) -> torch.Tensor:
        return gA.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.check = inputs[3]

    @staticmethod
    def backward(ctx: Any, R: torch.Tensor) -> tuple:
        ctx.check.reverse(R)
        return R, None, None, None

    @staticmethod
    def jvp(ctx: Any, dgA: torch.Tensor, dgS: Any, dA: Any, _: Any) -> torch.Tensor:
        ctx.check.forward(dgS, dA)
        return dgA


def spectral_clusters(
    spectrum: torch.Tensor, opts: Options, svd_zeros: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The degenerate pairs ``i != j`` of ``spectrum`` (within
    ``degeneracy_atol``) and, for singular values (``svd_zeros`` not None),
    the zero clusters: values within ``degeneracy_atol`` of 0 that have a
    complement or a phase of their own (``svd_zeros``) or another zero (two
    zero singular values rotate independently). None if there are none, or
    under Lorentzian broadening (which drops nothing). Plain tensors."""
    if opts.broadening is not None:
        return None
    s = peek(spectrum.detach())
    k = s.shape[-1]
    if k == 0 or s.numel() == 0:
        return None
    tol = peek(degeneracy_tol(s, opts.degeneracy_atol))
    pairs = (s.unsqueeze(-1) - s.unsqueeze(-2)).abs() <= tol
    pairs &= ~torch.eye(k, dtype=torch.bool, device=s.device)
    zeros = torch.zeros_like(s, dtype=torch.bool)
    if svd_zeros is not None:
        small = s <= tol[..., 0]
        zeros = small & (svd_zeros | (small.sum(-1, keepdim=True) > 1))
    if not (bool(pairs.any()) or bool(zeros.any())):
        return None
    # Plain tensors, for a second derivative taken at another level of torch.func
    return peek(pairs), peek(zeros)


def second_order_guard(
    op: str,
    gA: torch.Tensor,
    gS: torch.Tensor | None,
    M: torch.Tensor,
    clusters: tuple[torch.Tensor, torch.Tensor],
    opts: Options,
    discarded: Any = None,
    A: torch.Tensor | None = None,
    basis: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``gA`` through :class:`_SecondOrderGuard` (see the comment above), where
    a gradient is built differentiably at a degenerate spectrum; ``M`` is the
    first-order middle matrix (``gA = U M Vh``). ``discarded``: the exact
    term of the clusters the loss discards (``_discarded.DiscardedTerm``),
    whose coupling is not measured (it is computed); their S-cotangent is.
    ``A`` and ``basis = (U, Vh)`` (svd): forward over reverse then measures
    only the clusters that the tangent of ``A`` splits."""
    P = peek(M.detach())
    pairs, zeros = (peek(t) for t in _aligned(*clusters, P.shape[:-2]))
    cpairs, czeros = pairs, zeros
    if discarded is not None and discarded.members.shape == zeros.shape:
        out = discarded.members
        cpairs = pairs & ~(out.unsqueeze(-1) | out.unsqueeze(-2))
        czeros = zeros & ~out
    # plain tensors: under a torch.func transform even operations on plain
    # tensors return wrapped ones, which must not outlive its level
    cpairs, czeros = peek(cpairs), peek(czeros)
    coupling = _coupling(P, cpairs, czeros)
    tol = opts.gauge_atol
    if tol is None:
        tol = eps(P.dtype) ** 0.75 * (float(P.abs().max()) if P.numel() else 0.0)
    if basis is not None:
        basis = tuple(peek(t.detach()) for t in basis)
    check = SecondOrderCheck(
        op, pairs, zeros, coupling, tol, opts, discarded, (P, cpairs, czeros), basis
    )
    return _SecondOrderGuard.apply(gA, gS, A, check)


def _coupling(P: torch.Tensor, pairs: torch.Tensor, zeros: torch.Tensor) -> float:
    """``max |P|`` off the rotation-invariant pattern of the clusters
    (``pairs``, ``zeros``): the entries that couple a cluster (or a zero) to
    the rest or lie off the diagonal inside it, the spread of the diagonal on
    it, and the rows and columns of the zeros."""
    member = pairs.any(-1) | zeros
    couple = (member.unsqueeze(-1) | member.unsqueeze(-2)) & ~torch.eye(
        P.shape[-1], dtype=torch.bool, device=P.device
    )
    d = P.diagonal(dim1=-2, dim2=-1)
    parts = [
        P.abs().masked_select(couple),
        (d.unsqueeze(-1) - d.unsqueeze(-2)).abs().masked_select(pairs),
        d.abs().masked_select(zeros),
    ]
    return max((float(p.max()) for p in parts if p.numel()), default=0.0)


def check_second_order_cotangent(
    gS: torch.Tensor | None, scale: tuple[torch.Tensor | None, ...], opts: Options
) -> bool:
    """In the pullback's call after :class:`_SecondOrderGuard`'s backward (the
    second-order one): the S-cotangent must be constant on the clusters.
    Whether this is that call (the first-order checks then do not apply)."""
    check, opts.state.second_order = opts.state.second_order, None
    if check is not None and check is not _REPORTED and gS is not None:
        check.spectral(gS, (gS, *scale))
    return check is not None


# The second-order check of a call whose coupling was already reported.
_REPORTED = object()
