"""Truncation rules: how many leading values of a spectrum a truncated ``svd``
or ``eigh`` keeps. Mirrors ``julia/PySpectral/src/forward/truncation.jl``
(change the rules in both places or in neither).

The spectrum ``x`` is given from the wanted end, descending: the singular
values as ``svd`` returns them; for ``eigh`` the eigenvalues from the largest
(``largest=True``) or, negated, from the smallest (``largest=False``). Each
rule gives a number of leading values to keep, and the rank is the smallest:

- ``k``: at most ``k``;
- ``atol``, ``rtol``: the values ``x_i > max(atol, rtol |x_1|)`` (a tolerance
  given as None counts as 0), as ``torch.linalg.matrix_rank`` counts;
- ``error_atol``, ``error_rtol``: the fewest leading values whose discarded
  tail has ``||x_discarded||_2 <= max(error_atol, error_rtol ||x||_2)``.

Then the multiplet policy moves the cut to a multiplet boundary: ``"cut"``
(default) leaves it; ``"down"`` moves it down to the nearest boundary (the
multiplet it would split is dropped), ``"up"`` up (it is kept whole). Last,
``min_rank`` is a floor: at least ``min(min_rank, len(x))`` values (ITensor's
``mindim``), zeros included, moved up to a boundary again under ``"up"``; it
never exceeds ``k`` (refused above it), and under ``"down"`` the floor wins. A
boundary after ``r`` values is ``r = 0``, ``r = len(x)``, or a gap
``x_r - x_{r+1} > degeneracy_atol`` (default ``max|x| eps**(3/4)``, the
package's degeneracy tolerance), so that no degenerate pair straddles the cut;
a block of numerically zero values is a multiplet too.

The rank is piecewise constant in ``A``: the derivatives of a truncated
decomposition are those of the fixed-rank problem at that rank.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..common.defaults import degeneracy_tol

__all__ = ["MULTIPLETS", "TruncationRule", "tail_norms", "truncation_rank"]

MULTIPLETS = ("cut", "down", "up")


class TruncationRule(NamedTuple):
    """The validated truncation keywords of one call (``_validation``)."""

    k: int | None  # the maximum rank
    atol: float | None
    rtol: float | None
    error_atol: float | None
    error_rtol: float | None
    multiplets: str  # one of MULTIPLETS
    min_rank: int | None = None  # the floor

    @property
    def by_value(self) -> bool:
        """Whether a tolerance on the values (``atol``, ``rtol``) is given."""
        return self.atol is not None or self.rtol is not None

    @property
    def by_error(self) -> bool:
        """Whether a discarded-weight target (``error_atol``, ``error_rtol``)
        is given: it needs the whole spectrum's tail."""
        return self.error_atol is not None or self.error_rtol is not None

    @property
    def truncates(self) -> bool:
        """Whether a rule asks for a cut (``k`` or a tolerance), rather than
        only ``return_error=True`` on the whole spectrum."""
        return self.k is not None or self.by_value or self.by_error

    @property
    def fixed(self) -> bool:
        """Whether the rank is ``min(k, len(x))`` whatever the values (``k``
        alone, cut where it falls)."""
        return not (self.by_value or self.by_error) and self.multiplets == "cut"

    @property
    def beyond_k(self) -> bool:
        """Whether the rank may depend on values past the ``k``-th (the
        discarded weight, or a multiplet kept whole past ``k``): what the
        iterative top-k path does not compute."""
        return self.by_error or self.multiplets == "up"


def truncation_rank(
    x: Tensor, rule: TruncationRule, degeneracy_atol: float | None
) -> Tensor:
    """Number of leading values of ``x`` (shape ``(*, K)``, descending from
    the wanted end) that ``rule`` keeps, shape ``(*,)``, int64.

    Computed from ``x`` detached, with plain tensor operations (so that it
    runs under ``torch.func.vmap``: the ranks are then batched like ``x``).
    The tail norms are :func:`tail_norms`.
    """
    x = x.detach()
    K = x.shape[-1]
    cap = K if rule.k is None else min(rule.k, K)
    r = torch.full(x.shape[:-1], cap, dtype=torch.int64, device=x.device)
    if K == 0 or cap == 0:
        return r
    if rule.by_value:
        thr = x[..., 0].abs() * (rule.rtol or 0.0)
        thr = torch.clamp(thr, min=rule.atol or 0.0)
        r = torch.minimum(r, (x > thr.unsqueeze(-1)).sum(-1))
    if rule.by_error:
        r = torch.minimum(r, _error_rank(x, rule))
    if rule.multiplets != "cut":
        r = _multiplet_cut(x, r, rule.multiplets, degeneracy_atol)
    if rule.min_rank:
        least = torch.full_like(r, min(rule.min_rank, cap))
        raised = r < least
        r = torch.maximum(r, least)
        if rule.multiplets == "up":
            r = torch.where(raised, _multiplet_cut(x, r, "up", degeneracy_atol), r)
    return r


def tail_norms(x: Tensor) -> Tensor:
    """``||x[..., r:]||_2`` for ``r = 0, ..., K``: shape ``(*, K + 1)``, the
    last one 0. The one computation of a truncation error: the discarded-
    weight rule compares these numbers and a truncated call returns them, so
    an error fed back as ``error_atol`` gives the same rank (ties included).
    Summed from the smallest value, in units of a power of two near
    ``max|x|`` (exact scaling: no overflow or underflow of the squares, and a
    single discarded value is its own error exactly). Differentiable in
    ``x``: the gradient of the ``r``-th is ``x_i / error`` on the discarded
    values, 0 where the error is 0. ``julia/PySpectral``'s ``tail_norms``
    sums the same numbers in the same order."""
    if x.shape[-1] == 0:
        return x.new_zeros(*x.shape[:-1], 1).real
    m = x.detach().abs().amax(-1, keepdim=True)
    # 2**e with m = f 2**e, f in [0.5, 1) (frexp); 1 for a zero spectrum
    c = torch.ldexp(torch.ones_like(m), torch.frexp(m).exponent)
    c = torch.where(m > 0, c, torch.ones_like(c))
    sq = (x / c).abs() ** 2
    tail = sq.flip(-1).cumsum(-1).flip(-1)
    tail = torch.cat([tail, torch.zeros_like(sq[..., :1])], -1)
    positive = tail > 0
    root = torch.sqrt(torch.where(positive, tail, torch.ones_like(tail)))
    return torch.where(positive, c * root, torch.zeros_like(tail))


def _error_rank(x: Tensor, rule: TruncationRule) -> Tensor:
    """The fewest leading values whose tail ``||x[r:]||_2`` is at most
    ``max(error_atol, error_rtol ||x||_2)`` (both from :func:`tail_norms`)."""
    tail = tail_norms(x)
    target = tail[..., :1] * (rule.error_rtol or 0.0)
    target = torch.clamp(target, min=rule.error_atol or 0.0)
    # keeping r values discards tail[r] (tail[K] = 0): r is the number of
    # tails above the target, as they do not increase with r
    return (tail[..., :-1] > target).sum(-1)


def _multiplet_cut(
    x: Tensor, r: Tensor, direction: str, degeneracy_atol: float | None
) -> Tensor:
    """``r`` moved to the nearest multiplet boundary below (``"down"``) or
    above (``"up"``) it."""
    K = x.shape[-1]
    tol = degeneracy_tol(x, degeneracy_atol)[..., 0]  # (*, 1)
    inner = (x[..., :-1] - x[..., 1:]) > tol  # a gap after value j + 1
    edge = torch.ones_like(inner[..., :1])
    boundary = torch.cat([edge, inner, edge], -1)  # (*, K + 1): cut after j values
    j = torch.arange(K + 1, device=x.device)
    r = r.unsqueeze(-1)
    if direction == "down":
        ok = boundary & (j <= r)
        return torch.where(ok, j, torch.zeros_like(j)).amax(-1)
    ok = boundary & (j >= r)
    return torch.where(ok, j, torch.full_like(j, K)).amin(-1)
