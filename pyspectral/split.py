"""``svd(A, ..., absorb=...)``: the two factors a tensor-network code splits a
tensor into, ``L = U g(S)`` and ``R = h(S) V^H`` (quimb's ``absorb``:
``"left"`` ``(U S, V^H)``, ``"right"`` ``(U, S V^H)``, ``"both"``
``(U sqrt(S), sqrt(S) V^H)``), with every truncation rule of :func:`svd`.

The factors are formed from the triplets ``svd`` returns, so their gradient
is the triplets' (the exact coupling to the discarded ones included) plus
the term a pullback of ``U, S, V`` alone cannot know: inside a kept
degenerate multiplet the split's derivative is a divided difference of ``g``
and ``h`` (``pullbacks/split.py``). Exact for every loss of ``(L, R)``
invariant under ``L -> L Q``, ``R -> Q^H R`` (``Q`` unitary on a multiplet:
what any contraction over the bond index is), at every kept multiplet.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._autograd import apply
from ._settings import Options
from .common.defaults import degeneracy_tol, peek
from .common.gauge import apply_gauge_policy, svd_pair_cancellation
from .julia import _svd as jsvd
from .pullbacks.split import split_weights, svd_split_pullback, svd_split_pushforward

__all__ = ["SVDSplit", "TruncatedSVDSplit", "split"]


class SVDSplit(NamedTuple):
    """``svd(A, absorb=...)``: the factors ``left = U g(S)`` ``(*, m, r)`` and
    ``right = h(S) V^H`` ``(*, r, n)``, ``left @ right`` the (truncated)
    ``A``; ``r`` the largest rank of a batch, each matrix's places past its
    own rank zero. A named tuple.

    Example::

        >>> import torch, pyspectral as ps
        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(5, 4, dtype=torch.float64, generator=g)
        >>> L, R = ps.svd(A, absorb="both", k=2)  # U sqrt(S), sqrt(S) Vh
        >>> L.shape, R.shape
        (torch.Size([5, 2]), torch.Size([2, 4]))
        >>> U, S, Vh = ps.svd(A, k=2)
        >>> bool(torch.dist(L @ R, (U * S) @ Vh) < 1e-12)
        True
    """

    left: Tensor
    right: Tensor


class TruncatedSVDSplit(NamedTuple):
    """``svd(A, absorb=..., return_error=True)``: the factors, the truncation
    error and ``error / ||A||_F`` (``(*,)``, differentiable) and the ranks
    (``(*,)`` int64), as :class:`pyspectral.TruncatedSVDResult`.

    Example::

        >>> import torch, pyspectral as ps
        >>> A = torch.diag(torch.tensor([3.0, 2.0, 0.1], dtype=torch.float64))
        >>> L, R, error, rel_error, rank = ps.svd(
        ...     A, absorb="left", atol=0.5, return_error=True
        ... )
        >>> int(rank), round(float(error), 12), L.shape
        (2, 0.1, torch.Size([3, 2]))
    """

    left: Tensor
    right: Tensor
    error: Tensor
    rel_error: Tensor
    rank: Tensor


class _Split(torch.autograd.Function):
    """``(L, R)`` from the kept triplets ``U, S, Vh`` (``keep``: False on a
    batch's padding); ``A`` is an input only so that the kept-multiplet term
    of the pullback reaches it. ``julia``: the rule runs in Julia (its
    ``svd_split_pullback!``), except under ``create_graph`` and for a
    differentiable tangent, where the native formula, differentiable, runs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        A: Tensor,
        U: Tensor,
        S: Tensor,
        Vh: Tensor,
        keep: Tensor,
        absorb: str,
        opts: Options,
        julia: bool,
    ) -> tuple[Tensor, Tensor]:
        g, _, h, _ = split_weights(S, absorb)
        return U * g.unsqueeze(-2).to(U.dtype), Vh * h.unsqueeze(-1).to(Vh.dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        _, U, S, Vh, keep, ctx.absorb, ctx.opts, ctx.julia = inputs
        ctx.save_for_backward(U, S, Vh, keep)
        ctx.save_for_forward(U, S, Vh, keep)

    @staticmethod
    def backward(ctx: Any, gL: Tensor, gR: Tensor) -> tuple:
        U, S, Vh, keep = ctx.saved_tensors
        _unreachable(U, S, Vh, keep, ctx.absorb, ctx.opts)
        rule = svd_split_pullback
        # (under a broadening the native rule, which leaves the SVD's smooth
        # inverses as they stand; Julia's split takes no broadening)
        if ctx.julia and not torch.is_grad_enabled() and ctx.opts.broadening is None:
            rule = jsvd.svd_split_pullback
        grads = rule(U, S, Vh, keep, ctx.absorb, gL, gR, ctx.opts)
        return (*grads, None, None, None, None)

    @staticmethod
    def jvp(
        ctx: Any, dA: Tensor, dU: Tensor, dS: Tensor, dVh: Tensor, *_: Any
    ) -> tuple:
        U, S, Vh, keep = ctx.saved_tensors
        _unreachable(U, S, Vh, keep, ctx.absorb, ctx.opts)
        if dA is None:
            dA = torch.zeros(
                U.shape[:-1] + Vh.shape[-1:], dtype=U.dtype, device=U.device
            )
        _near_degenerate_tangent(U, S, Vh, keep, dA, ctx.absorb, ctx.opts)
        rule = svd_split_pushforward
        differentiable = any(
            t is not None and t.requires_grad for t in (dA, dU, dS, dVh, U)
        )
        if (
            ctx.julia
            and not (torch.is_grad_enabled() and differentiable)
            and ctx.opts.broadening is None
        ):
            rule = jsvd.svd_split_pushforward
        return rule(U, S, Vh, keep, ctx.absorb, dA, dU, dS, dVh, ctx.opts)


def _unreachable(
    U: Tensor, S: Tensor, Vh: Tensor, keep: Tensor, absorb: str, opts: Options
) -> None:
    """Apply the gauge policy where a kept singular value is at or below the
    degeneracy tolerance and the split's derivative there needs what the
    cotangents (tangents) of ``L``, ``R`` cannot carry: ``"both"`` at an
    exact zero (``sqrt(0) = 0`` zeroes both factors' columns there, and
    ``L_z(t) R_z(t) = t P_zz`` is a product of two ``sqrt(t)``: no chain
    rule through ``L``, ``R``), ``"right"`` on a tall ``A`` and ``"left"``
    on a wide one (the factor with weight 1 has a column / row for it that
    is arbitrary in the complement, discontinuous in ``A``). Everywhere else
    the split's pullback is exact there (``pullbacks/split.py``). Under a
    broadening the SVD's inverses are the user's regularisation: nothing
    is checked."""
    if opts.gauge == "ignore" or opts.broadening is not None or S.shape[-1] == 0:
        return
    m, n = U.shape[-2], Vh.shape[-1]
    tall, wide = m > n, n > m
    x, kept = peek(S.detach()), peek(keep)
    if absorb == "both":
        bad = kept & (x == 0)
    elif (absorb == "right" and tall) or (absorb == "left" and wide):
        bad = kept & (x <= degeneracy_tol(x, opts.degeneracy_atol)[..., 0])
    else:
        return
    if bool(bad.any()):
        s = float(x.masked_select(bad).max())
        apply_gauge_policy(split_zero_message(absorb, tall, wide, s), opts)


def _near_degenerate_tangent(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    keep: Tensor,
    dA: Tensor,
    absorb: str,
    opts: Options,
) -> None:
    """Apply the gauge policy where forward mode meets a kept pair above the
    degeneracy tolerance but close enough that the tangents of ``L``, ``R``
    carry a rotation of the bond, ``L E``, ``-E R`` with ``E_ij = H_ij /
    (s_j - s_i)`` (``H = herm(U^H dA V)``), so large that an output invariant
    under it (``L @ R``, any contraction over the bond) cancels it in the
    caller's graph (:func:`~pyspectral.common.gauge.near_pair_cancellation`).
    The split's tangents are each exact; the cancellation happens after them
    (reverse mode cancels it before it divides: exact at every gap)."""
    found = svd_pair_cancellation(U, S, Vh, dA, opts, kept=keep)
    if found is not None:
        apply_gauge_policy(near_tangent_message(absorb, *found), opts)


def near_tangent_message(absorb: str, gap: float, measured: float, res: float) -> str:
    """The text of :func:`_near_degenerate_tangent`."""
    return (
        f"svd(absorb={absorb!r}): forward mode at a near-degenerate pair of kept "
        f"singular values (gap {gap:.3g}, above degeneracy_atol): the tangents of L "
        "and R carry a rotation of the bond of size |tangent| / gap, which an output "
        "invariant under it (L @ R, any contraction over the bond) cancels in your "
        f"graph, losing about {measured:.3g} of relative accuracy (> {res:.3g}), so "
        "such an output's tangent is not exact (each of L's and R's is). Use reverse "
        "mode (torch.autograd.grad, torch.func.vjp), whose rule cancels it before it "
        "divides (exact at every gap), or svd_function(A, ('pow', 1), ...) for "
        "L @ R itself."
    )


def split_zero_message(absorb: str, tall: bool, wide: bool, s: float) -> str:
    """The text of :func:`_unreachable` (both backends: the check runs here)."""
    if absorb == "both":
        why = (
            "sqrt(S) has an infinite slope at an exact zero, and the cotangents "
            "of U sqrt(S), sqrt(S) Vh carry nothing of the product's block there"
        )
        other = "'right'" if wide else "'left'"
    elif absorb == "right":
        why = (
            "U's column for it is arbitrary in the complement of the range (a tall "
            "A), which the cotangent of L = U cannot see"
        )
        other = "'left'"
    else:
        why = (
            "Vh's row for it is arbitrary in the complement of the row space (a "
            "wide A), which the cotangent of R = Vh cannot see"
        )
        other = "'right'"
    return (
        f"svd(absorb={absorb!r}): a kept singular value {s:.3g} is at or below "
        f"degeneracy_atol (a rank-deficient A); {why}, so this gradient is not "
        f"exact for a loss of L @ R. Use absorb={other}, exact at kept zero "
        "singular values of this shape, or a truncation that drops them (atol= "
        "or rtol= above them: the rank is then constant nearby, and exact), or "
        "svd_function(A, ('pow', 1), ...) for L @ R itself."
    )


def split(
    A: Tensor,
    result: tuple,
    absorb: str,
    opts: Options,
    return_error: bool,
    julia: bool,
) -> SVDSplit | TruncatedSVDSplit:
    """The factors of ``result`` (an ``SVDResult`` or ``TruncatedSVDResult``
    of ``A``, differentiable in ``A``) with the singular values absorbed;
    ``julia``: the split's rule runs in Julia."""
    U, S, Vh = result[:3]
    rank = getattr(result, "rank", None)  # (a truncation's; padding past it)
    if rank is not None:
        keep = torch.arange(S.shape[-1], device=S.device) < rank.unsqueeze(-1)
    else:
        keep = torch.ones(S.shape, dtype=torch.bool, device=S.device)
    L, R = apply(_Split, A, U, S, Vh, keep, absorb, opts, julia)
    if return_error:
        return TruncatedSVDSplit(L, R, result.error, result.rel_error, result.rank)
    return SVDSplit(L, R)
