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
        rule = svd_split_pullback
        if ctx.julia and not torch.is_grad_enabled():
            rule = jsvd.svd_split_pullback
        grads = rule(U, S, Vh, keep, ctx.absorb, gL, gR, ctx.opts)
        return (*grads, None, None, None, None)

    @staticmethod
    def jvp(
        ctx: Any, dA: Tensor, dU: Tensor, dS: Tensor, dVh: Tensor, *_: Any
    ) -> tuple:
        U, S, Vh, keep = ctx.saved_tensors
        if dA is None:
            dA = torch.zeros(
                U.shape[:-1] + Vh.shape[-1:], dtype=U.dtype, device=U.device
            )
        rule = svd_split_pushforward
        differentiable = any(
            t is not None and t.requires_grad for t in (dA, dU, dS, dVh, U)
        )
        if ctx.julia and not (torch.is_grad_enabled() and differentiable):
            rule = jsvd.svd_split_pushforward
        return rule(U, S, Vh, keep, ctx.absorb, dA, dU, dS, dVh, ctx.opts)


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
    if return_error:
        rank = result.rank
        keep = torch.arange(S.shape[-1], device=S.device) < rank.unsqueeze(-1)
    else:
        keep = torch.ones(S.shape, dtype=torch.bool, device=S.device)
    L, R = apply(_Split, A, U, S, Vh, keep, absorb, opts, julia)
    if return_error:
        return TruncatedSVDSplit(L, R, result.error, result.rel_error, result.rank)
    return SVDSplit(L, R)
