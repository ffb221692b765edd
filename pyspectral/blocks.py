"""``svd_blocks``: one truncation over the blocks of a symmetric tensor.

A tensor with a symmetry is held as blocks, one per sector, and truncated
as one matrix would be (TensorKit's truncation of a ``TensorMap``, ITensor's
with quantum numbers): one bond dimension and one discarded-weight budget
over the singular values of all blocks together. The ranks are chosen on the
merged spectrum by the rules of :func:`svd`; each block is then cut at its
share of the kept values, so each block's result (and its gradient, exact
with the coupling to its discarded triplets) is that of :func:`svd` at that
rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ._autograd import apply
from ._backend import resolve_backend
from ._settings import Options, options
from ._validation import check_absorb, check_keywords, check_matrix, truncation_rule
from .common.defaults import degeneracy_tol
from .exceptions import DtypeError, InputError, InputTypeError, ShapeError
from .split import SVDSplit, TruncatedSVDSplit, split
from .svd import _SVD, SVDResult, _SVDJulia
from .truncation import TruncatedSVDResult, svd_ranks, truncated_svd

__all__ = ["svd_blocks"]


def svd_blocks(
    blocks: Sequence[Tensor],
    *,
    k: int | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    error_atol: float | None = None,
    error_rtol: float | None = None,
    multiplets: str = "cut",
    min_rank: int | None = None,
    absorb: str | None = None,
    return_error: bool = False,
    backend: str = "auto",
    degeneracy_atol: float | None = None,
    gauge: str | None = None,
) -> list[SVDResult | TruncatedSVDResult | SVDSplit | TruncatedSVDSplit]:
    r"""svd_blocks(blocks, *, k=None, error_rtol=None, ...) -> list

    The SVD of each block of a block-diagonal matrix, truncated by one rule
    over the singular values of all blocks together.

    ``blocks``: a list of tensors ``(*, m_b, n_b)``, shapes differing from
    block to block, with one batch shape ``*``, dtype and device. The rules
    of :func:`svd` (``k``, ``atol``, ``rtol``, ``error_atol``,
    ``error_rtol``, ``multiplets``, ``min_rank``) read the merged spectrum,
    all blocks' values in descending order, as they read one matrix's: ``k``
    is one bond dimension over all blocks, ``rtol`` is relative to the
    largest value of any block, ``error_atol`` and ``error_rtol`` bound the
    norm of all discarded values together (``error_rtol`` relative to the
    norm of all blocks), ``min_rank`` is a floor on the total, and
    ``multiplets`` moves the cut off a multiplet whose members lie in
    different blocks (sectors related by the symmetry) as off one inside a
    block. A cut between equal values of different blocks (within
    ``degeneracy_atol``, default ``max(S) * eps**0.75``) keeps those of the
    earlier block under ``"cut"``; ``"down"`` or ``"up"`` keep symmetric
    sectors alike. Each block is then cut at the number of its
    values among the kept ones.

    Returns a list with, per block, what :func:`svd` returns for that block
    at its rank (``absorb``, ``return_error`` as there: a block's ``error``
    is the norm of its own discarded values; the total discarded weight is
    ``torch.linalg.vector_norm(torch.stack([r.error for r in res]), dim=0)``).
    A block may keep nothing (empty factors). Gradients, forward mode and
    second derivatives are those of :func:`svd` for each block (the ranks
    are piecewise constant). Without a rule, each block's full thin SVD.

    ``backend="julia"``: each block's SVD and the rule on the merged
    spectrum run in Julia (empty blocks on the native backend).

    Raises:
        InputTypeError: ``blocks`` is not a list or tuple of tensors.
        DtypeError, ShapeError, InputError: blocks of different dtypes, batch
            shapes or devices, and everything :func:`svd` raises.

    Example::

        >>> import torch, pyspectral as ps
        >>> g = torch.Generator().manual_seed(0)
        >>> blocks = [torch.randn(4, 3, dtype=torch.float64, generator=g),
        ...           torch.randn(2, 5, dtype=torch.float64, generator=g)]
        >>> res = ps.svd_blocks(blocks, k=3, return_error=True)
        >>> [int(r.rank) for r in res], sum(int(r.rank) for r in res)
        ([1, 2], 3)
        >>> merged = torch.cat([ps.svdvals(b) for b in blocks]).sort().values
        >>> total = torch.linalg.vector_norm(torch.stack([r.error for r in res]))
        >>> bool(torch.isclose(total, merged[:-3].norm()))
        True
    """
    blocks = _check_blocks(blocks)
    kw = check_keywords(
        "svd_blocks",
        None,
        k=k,
        atol=atol,
        rtol=rtol,
        error_atol=error_atol,
        error_rtol=error_rtol,
        min_rank=min_rank,
        degeneracy_atol=degeneracy_atol,
    )
    rule = truncation_rule("svd_blocks", kw, multiplets, return_error)
    opts = options(kw["degeneracy_atol"], None, gauge, None, op="svd_blocks")
    absorb = check_absorb("svd_blocks", absorb, None)
    on_julia = [
        B.numel() > 0 and resolve_backend("svd_blocks", backend, B) == "julia"
        for B in blocks
    ]
    julia = any(on_julia)
    if not blocks:
        return []
    triplets = [
        apply(_SVDJulia if j else _SVD, B, False, opts, None)
        for B, j in zip(blocks, on_julia)
    ]
    if rule is None:
        plain = [SVDResult(*t) for t in triplets]
        if absorb is None:
            return plain
        return [
            split(B, r, absorb, opts, False, j)
            for B, r, j in zip(blocks, plain, on_julia)
        ]
    ranks = block_ranks([S for _, S, _ in triplets], rule, opts, julia)
    errors = return_error or absorb is not None
    out: list[Any] = []
    for B, (U, S, Vh), r, j in zip(blocks, triplets, ranks, on_julia):
        K = S.shape[-1]
        cap = K if rule.k is None else min(rule.k, K)
        res = truncated_svd(B, U, S, Vh, r, cap, errors, True)
        if absorb is not None:
            res = split(B, res, absorb, opts, return_error, j)
        elif not return_error:
            res = SVDResult(*res)
        out.append(res)
    return out


def block_ranks(
    spectra: list[Tensor], rule: Any, opts: Options, julia: bool
) -> list[Tensor]:
    """Each block's rank (``(*,)`` int64) under one ``rule`` over the merged
    spectrum of ``spectra`` (each ``(*, K_b)``, descending): the rank ``r``
    of the merged values in descending order (by PySpectral.jl's
    ``truncation_rank`` when ``julia``), then each block's count among the
    first ``r`` (equal values in block order: the sort is stable)."""
    merged = torch.cat([S.detach() for S in spectra], -1)
    device = merged.device
    owner = torch.cat(
        [
            torch.full((S.shape[-1],), b, dtype=torch.int64, device=device)
            for b, S in enumerate(spectra)
        ]
    )
    values, order = torch.sort(merged, dim=-1, descending=True, stable=True)
    r, _ = svd_ranks(values, rule, opts, julia, complete=True)
    N = merged.shape[-1]
    if N > 1:
        # Equal values of different blocks (sectors related by a symmetry)
        # differ by rounding: inside each cluster of values within the
        # degeneracy tolerance, take them in block order, so that a cut
        # there keeps the earlier block's, whatever the rounding.
        tol = degeneracy_tol(values, opts.degeneracy_atol)[..., 0]
        gaps = values[..., :-1] - values[..., 1:] > tol
        cluster = torch.cat([gaps.new_zeros(*gaps.shape[:-1], 1), gaps], -1).cumsum(-1)
        by_block = torch.sort(owner[order], dim=-1, stable=True).indices
        by_cluster = torch.sort(cluster.gather(-1, by_block), dim=-1, stable=True)
        order = order.gather(-1, by_block.gather(-1, by_cluster.indices))
    if r is None:  # k alone: a fixed rank
        r = torch.full(
            merged.shape[:-1], min(rule.k, N), dtype=torch.int64, device=device
        )
    kept = torch.arange(N, device=device) < r.to(device).unsqueeze(-1)
    whose = owner[order]
    return [(kept & (whose == b)).sum(-1) for b in range(len(spectra))]


def _check_blocks(blocks: Any) -> list[Tensor]:
    """``blocks`` as a list of matrices with one batch shape, dtype and
    device (each checked as :func:`svd` checks its ``A``)."""
    if not isinstance(blocks, (list, tuple)):
        raise InputTypeError(
            "svd_blocks: blocks must be a list or tuple of tensors (*, m_b, n_b), "
            f"got {type(blocks).__name__}; pass list(blocks)"
        )
    for B in blocks:
        check_matrix("svd_blocks", B)
    if not blocks:
        return []
    first = blocks[0]
    for b, B in enumerate(blocks):
        if B.dtype != first.dtype:
            raise DtypeError(
                f"svd_blocks: every block must have one dtype; block 0 is "
                f"{first.dtype}, block {b} {B.dtype}; convert with "
                f"B.to({first.dtype})"
            )
        if B.shape[:-2] != first.shape[:-2]:
            raise ShapeError(
                f"svd_blocks: every block must have one batch shape; block 0 has "
                f"{tuple(first.shape[:-2])}, block {b} {tuple(B.shape[:-2])}"
            )
        if B.device != first.device:
            raise InputError(
                f"svd_blocks: every block must be on one device; block 0 is on "
                f"{first.device}, block {b} on {B.device}; move it with "
                f"B.to('{first.device}')"
            )
    return list(blocks)
