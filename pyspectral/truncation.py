"""Truncated ``svd`` / ``eigh``: a rank per matrix from the rules of
``forward/truncation.py`` applied to a computed decomposition, the padded
result, and the truncation error.

Batched inputs. The ranks ``r`` of the matrices of a batch may differ; the
result has the common width ``w = max r`` (for an empty batch: ``k``, else
``min(m, n)``), and in each matrix the ``w - r`` places past its rank hold
zeros (singular values or eigenvalues, and their vectors), so that
``U diag(S) Vh`` is each matrix's own truncation. With ``return_error=True``
the per-matrix ranks come back too.

Gradients. The rank is piecewise constant in ``A``, so the derivative of a
truncated decomposition is that of the fixed-rank problem at its rank: the
full path's pullback (``svd_pullback`` / ``eigh_pullback`` on the whole
decomposition, cotangents zero past the rank: the exact coupling to the
discarded pairs) or the iterative path's (``pullbacks/truncated.py``). The
zeros are constants: their cotangents are dropped. The truncation error

    error = ||x_discarded||_2,        rel_error = error / ||A||_F

(``x`` the singular values or eigenvalues) is computed on the full path from
the discarded values, summed without cancellation, and is differentiable
through them (its gradient ``sum_discarded x_i (u_i v_i^H) / error``; 0
where the error is 0). The iterative path has no discarded values: its error
is ``||A - U_r U_r^H A||_F`` (eigh: ``||A - V_r diag(w_r) V_r^H||_F``) from the
kept vectors and ``A``, the same number for exact vectors and, as the
Rayleigh-Ritz relations make it stationary in them, exact to first order for
the certified ones; its gradient, with the vectors held fixed, is the exact
``(A - U_r U_r^H A) / error``. No second decomposition in either case.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _linalg
from ._settings import Options
from .common.defaults import peek
from .forward.topk import TopKConfig, top_k_method
from .forward.truncation import TruncationRule, tail_norms, truncation_rank
from .julia import _svd as jsvd

__all__ = [
    "TruncatedSVDResult",
    "TruncatedEighResult",
    "truncation_path",
    "svd_ranks",
    "eigh_ranks",
    "truncated_svd",
    "truncated_eigh",
    "truncated_eigh_by_magnitude",
]


class _TruncatedSVDFields(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor
    error: Tensor
    rel_error: Tensor
    rank: Tensor


class TruncatedSVDResult(_TruncatedSVDFields):
    """``svd(..., return_error=True)``: the kept triplets (padded, see
    :mod:`pyspectral.truncation`), the truncation error ``||S_discarded||_2``
    and ``error / ||A||_F`` (shape ``(*,)``, differentiable), and the rank of
    each matrix (``(*,)``, int64).

    ``U: (*, m, w)``, ``S: (*, w)`` (real, descending), ``Vh: (*, w, n)``
    (``V^H``), ``w`` the largest rank of the batch; past its own rank each
    matrix's places hold zeros. ``error`` and ``rel_error`` are real, of the
    precision of ``A``. A named tuple; constructing one checks nothing.

    ``discarded`` (an attribute, not a field: unpacking gives the six above):
    the discarded singular values themselves, ``(*, K - min(rank))``
    descending (``K = min(m, n)``), each matrix's left-aligned and padded
    with zeros, differentiable; None on the iterative top-k path, which never
    computes them.

    Example::

        >>> import pyspectral as ps
        >>> d = torch.tensor([[3.0, 2.0, 1e-9], [3.0, 1e-9, 1e-9]],
        ...                  dtype=torch.float64)
        >>> A = torch.diag_embed(d)  # two 3 x 3 matrices, ranks 2 and 1
        >>> U, S, Vh, error, rel_error, rank = ps.svd(A, rtol=1e-6,
        ...                                           return_error=True)
        >>> rank, S.shape
        (tensor([2, 1]), torch.Size([2, 2]))
        >>> S[1].round(decimals=6)  # the place past its rank holds a zero
        tensor([3., 0.], dtype=torch.float64)
        >>> [f"{e:.3g}" for e in error.tolist()]
        ['1e-09', '1.41e-09']
        >>> res = ps.svd(A, rtol=1e-6, return_error=True)
        >>> [f"{x:.3g}" for x in res.discarded[1].tolist()]  # rank 1: two
        ['1e-09', '1e-09']
    """

    discarded: Tensor | None = None


class _TruncatedEighFields(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor
    error: Tensor
    rel_error: Tensor
    rank: Tensor


class TruncatedEighResult(_TruncatedEighFields):
    """``eigh(..., return_error=True)``: the kept eigenpairs (padded), the
    truncation error ``||eigenvalues_discarded||_2``, ``error / ||A||_F`` and
    the rank of each matrix.

    ``eigenvalues: (*, w)`` (real, ascending), ``eigenvectors: (*, n, w)``,
    ``w`` the largest rank of the batch, padded with zero eigenpairs on the
    side away from the wanted end (see :func:`pyspectral.eigh`); ``error``,
    ``rel_error`` ``(*,)`` real and differentiable, ``rank`` ``(*,)`` int64.
    A named tuple; constructing one checks nothing. ``discarded``: the
    discarded eigenvalues as for :class:`TruncatedSVDResult`, read from the
    wanted end (descending for ``largest=True``, ascending otherwise,
    decreasing ``|lambda|`` for ``by="magnitude"``).

    Example::

        >>> import pyspectral as ps
        >>> A = torch.diag(torch.tensor([-1e-9, 0.5, 2.0], dtype=torch.float64))
        >>> w, V, error, rel_error, rank = ps.eigh(A, rtol=1e-6,
        ...                                        return_error=True)
        >>> w, int(rank), f"{float(error):.3g}"
        (tensor([0.5000, 2.0000], dtype=torch.float64), 2, '1e-09')
    """

    discarded: Tensor | None = None


# ------------------------------------------------------------------- path


def truncation_path(
    op: str, A: Tensor, rule: TruncationRule, cap: int, method: str, kw: dict
) -> tuple[str, TopKConfig | None]:
    """``("full", None)`` or ``("iterative", cfg)`` for a truncated call with
    the maximum rank ``cap = min(k, min(m, n))``.

    The iterative top-k path computes the top ``k`` only: without ``k`` the
    rules take the full path, and so do the discarded-weight rule
    (``error_atol``, ``error_rtol``) and ``multiplets="up"``, which depend on
    the values past ``k`` (``atol``, ``rtol`` and ``multiplets="down"`` cut
    inside the top ``k``). ``k = 0`` keeps nothing and takes the full path
    (for the error). What cannot run (``method="randomized"`` there, the
    iteration keywords) was refused by ``_validation.check_top_k_keywords``
    and ``check_truncation_method`` before any backend was chosen."""
    if rule.k is None or rule.beyond_k or cap == 0:
        return "full", None
    rest = (kw["oversample"], kw["n_iter"], kw["backward_rtol"], kw["backward_maxiter"])
    return top_k_method(op, A, cap, method, *rest)


# ------------------------------------------------------------------ ranks


def svd_ranks(
    S: Tensor,
    rule: TruncationRule,
    opts: Options,
    julia: bool,
    complete: bool,
    errors: bool = False,
) -> tuple[Tensor | None, Tensor | None]:
    """``(ranks, tails)``: the rank of each matrix from its singular values
    ``S`` (``(*, K)``, descending: all of them, or the leading ones of an
    iterative block when ``complete`` is False), by PySpectral.jl's
    ``truncation_rank`` when ``julia``, None when it is ``min(k, K)``
    whatever ``S`` (``rule.fixed``); and, on the Julia backend with the
    whole spectrum, Julia's tail norms (``errors``: asked for even with a
    fixed rank), which the truncated result returns as its errors, so that
    Julia's rule and the errors are the same numbers (None otherwise: the
    native ``tail_norms``).

    A block that does not reach past the kept values gets a 0 appended: the
    next singular value lies in ``[0, s_k]``, so a cut there is a multiplet
    boundary exactly when ``s_k`` is not numerically zero (the certificate
    closed the cluster of ``s_k`` inside the block otherwise)."""
    if not complete:
        S = torch.cat([S, S.new_zeros(*S.shape[:-1], 1)], -1)
    return _ranks("svd", S, rule, opts, julia and (complete or not rule.fixed), errors)


def eigh_ranks(
    w: Tensor,
    rule: TruncationRule,
    largest: bool,
    opts: Options,
    julia: bool,
    kept_first: int | None = None,
    errors: bool = False,
) -> tuple[Tensor | None, Tensor | None]:
    """``(ranks, tails)`` as :func:`svd_ranks`, from the eigenvalues: all of
    them ascending (``kept_first`` None), or an iterative block with the
    ``kept_first`` kept ones first, ascending, then the others from the
    wanted end. The rules read them from the wanted end: ``w`` descending
    (``largest``) or ``-w`` ascending-negated (smallest)."""
    if kept_first is None:
        x = w.flip(-1) if largest else -w
    else:
        k = kept_first
        x = torch.cat([w[..., :k].flip(-1), w[..., k:]], -1) if largest else -w
    complete = kept_first is None
    return _ranks("eigh", x, rule, opts, julia and (complete or not rule.fixed), errors)


def _ranks(
    op: str, x: Tensor, rule: TruncationRule, opts: Options, julia: bool, errors: bool
) -> tuple[Tensor | None, Tensor | None]:
    if julia and (errors or not rule.fixed):
        r, tails = jsvd.truncation_ranks(op, x, rule, opts.degeneracy_atol)
        return (None if rule.fixed else r), tails
    if rule.fixed:
        return None, None
    return truncation_rank(x, rule, opts.degeneracy_atol), None


def _width(r: Tensor | None, cap: int) -> tuple[int, bool]:
    """The common width ``max r`` (``cap`` for an empty batch or a fixed
    rank) and whether every matrix has it (no padding)."""
    if r is None:
        return cap, True
    p = peek(r)
    if p.numel() == 0:
        return cap, True
    w = int(p.max())
    return w, bool((p == w).all())


def _rank_tensor(r: Tensor | None, w: int, like: Tensor) -> Tensor:
    if r is not None:
        return r
    return torch.full(like.shape[:-1], w, dtype=torch.int64, device=like.device)


def _error_and_norm(
    x: Tensor, rank: Tensor, values: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The truncation error ``||x[rank:]||`` of each spectrum ``x`` (read from
    the wanted end) and ``||x||``: the numbers the discarded-weight rule
    compared (``forward.truncation.tail_norms``), so that an error fed back as
    ``error_atol`` keeps the rank. ``values``: Julia's tail norms, whose
    numbers the Julia backend returns (torch's sqrt is not correctly rounded,
    Julia's is: an ulp apart), with the native tails' gradient."""
    tails = tail_norms(x)
    if values is not None:
        tails = values.to(tails.dtype) + (tails - tails.detach())
    error = tails.gather(-1, rank.unsqueeze(-1).to(x.device)).squeeze(-1)
    return error, tails[..., 0]


def _discarded(x: Tensor, rank: Tensor) -> Tensor:
    """The values of each spectrum ``x`` (``(*, K)``, in the order the result
    reports them) past its rank, left-aligned and padded with zeros:
    ``(*, K - min(rank))``, differentiable (a gather)."""
    K = x.shape[-1]
    low = int(peek(rank).min()) if rank.numel() else K
    j = rank.unsqueeze(-1).to(x.device) + torch.arange(K - low, device=x.device)
    if K == 0:
        return x[..., :0]
    values = x.gather(-1, j.clamp(max=K - 1).expand(*x.shape[:-1], K - low))
    return values * (j < K).to(x.dtype)


def _relative(error: Tensor, norm: Tensor) -> Tensor:
    """``error / norm``, 0 where ``norm`` is 0 (the zero matrix)."""
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    return torch.where(norm > 0, error / safe, torch.zeros_like(error))


# ------------------------------------------------------------------- svd


def truncated_svd(
    A: Tensor,
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    r: Tensor | None,
    cap: int,
    return_error: bool,
    full: bool,
    tails: Tensor | None = None,
) -> tuple:
    """The truncated result from differentiable triplets ``U, S, Vh``: the
    whole thin SVD (``full``) or the top ``cap`` of the iterative path, and
    the ranks ``r`` (None: ``cap`` for every matrix). Returns the fields of
    ``SVDResult`` or, with ``return_error``, of ``TruncatedSVDResult``;
    ``tails``: the values of the errors when the Julia backend computed them
    (:func:`svd_ranks`)."""
    w, uniform = _width(r, cap)
    Uk, Sk, Vhk = U[..., :w], S[..., :w], Vh[..., :w, :]
    if not uniform:
        keep = torch.arange(w, device=S.device) < r.unsqueeze(-1)
        Uk = Uk * keep.unsqueeze(-2).to(U.dtype)
        Sk = Sk * keep.to(S.dtype)
        Vhk = Vhk * keep.unsqueeze(-1).to(Vh.dtype)
    if not return_error:
        return Uk, Sk, Vhk
    rank = _rank_tensor(r, w, S)
    discarded = None
    if full:
        error, norm = _error_and_norm(S, rank, tails)
        discarded = _discarded(S, rank)
    else:
        # A - U_r U_r^H A, with U_r (zero past each rank) held fixed
        P = Uk.detach()
        error = _linalg.matrix_norm(A - P @ (P.mH @ A))
        norm = _linalg.matrix_norm(A)
    res = TruncatedSVDResult(Uk, Sk, Vhk, error, _relative(error, norm), rank)
    res.discarded = discarded
    return res


# ------------------------------------------------------------------ eigh


def truncated_eigh(
    H: Tensor | None,
    w: Tensor,
    V: Tensor,
    r: Tensor | None,
    cap: int,
    largest: bool,
    return_error: bool,
    tails: Tensor | None = None,
) -> tuple:
    """The truncated result from differentiable eigenpairs ascending: the
    whole decomposition (``H`` None) or the ``cap`` kept pairs of the
    iterative path (``H`` the Hermitian matrix read from the triangle, for
    the error). The kept ones of each matrix are the last ``r`` (``largest``)
    or the first ``r``; padding sits on the other side of the width."""
    n = w.shape[-1]
    width, uniform = _width(r, cap)
    sel = slice(n - width, n) if largest else slice(0, width)
    wk, Vk = w[..., sel], V[..., sel]
    j = torch.arange(width, device=w.device)
    if not uniform:
        rr = r.unsqueeze(-1)
        keep = j >= width - rr if largest else j < rr
        wk = wk * keep.to(w.dtype)
        Vk = Vk * keep.unsqueeze(-2).to(V.dtype)
    if not return_error:
        return wk, Vk
    rank, discarded = _rank_tensor(r, width, w), None
    if H is None:
        wanted = w.flip(-1) if largest else -w  # from the wanted end, as the rules
        error, norm = _error_and_norm(wanted, rank, tails)
        discarded = _discarded(w.flip(-1) if largest else w, rank)
    else:
        Q, lam = Vk.detach(), wk.detach()
        error = _linalg.matrix_norm(H - (Q * lam.unsqueeze(-2).to(Q.dtype)) @ Q.mH)
        norm = _linalg.matrix_norm(H)
    res = TruncatedEighResult(wk, Vk, error, _relative(error, norm), rank)
    res.discarded = discarded
    return res


def truncated_eigh_by_magnitude(
    w: Tensor,
    V: Tensor,
    rule: TruncationRule,
    opts: Options,
    julia: bool,
    return_error: bool,
) -> tuple:
    """The eigenpairs largest in magnitude: the whole decomposition
    (``w`` ascending, differentiable) ranked by ``|lambda|`` descending, the
    rules read on that ranking (``x = |lambda|``), the kept ones in that
    order (largest magnitude first), padding at the end; the error is
    ``||lambda_discarded||_2`` as by value. The ranking is a permutation
    (gather): the gradient is the whole decomposition's, cotangents zero on
    the discarded pairs, as every truncation's."""
    order = torch.argsort(w.detach().abs(), dim=-1, descending=True, stable=True)
    ws = w.gather(-1, order)
    Vs = V.gather(-1, order.unsqueeze(-2).expand(V.shape))
    r, tails = _ranks("eigh", ws.abs(), rule, opts, julia, return_error)
    n = w.shape[-1]
    cap = n if rule.k is None else min(rule.k, n)
    width, uniform = _width(r, cap)
    wk, Vk = ws[..., :width], Vs[..., :width]
    if not uniform:
        keep = torch.arange(width, device=w.device) < r.unsqueeze(-1)
        wk = wk * keep.to(w.dtype)
        Vk = Vk * keep.unsqueeze(-2).to(V.dtype)
    if not return_error:
        return wk, Vk
    rank = _rank_tensor(r, width, w)
    error, norm = _error_and_norm(ws.abs(), rank, tails)
    res = TruncatedEighResult(wk, Vk, error, _relative(error, norm), rank)
    res.discarded = _discarded(ws, rank)
    return res
