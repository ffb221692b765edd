"""The Julia backend's SVD operations: ``svd``, ``svdvals``,
``svd_function`` (named ``f``, or a user's ``f`` by its values), top-k and the
truncation ranks, each with its pullback and pushforward. Each returns tensors
in pyspectral's (torch's) layout plus the Julia handles the matching pullback
needs; Julia decomposes the transposes (``_convert``), so its ``U`` is our
``Vh^T`` and its ``Vt`` our ``U^T``. Every tensor handed to Julia sits in
``keep`` until the call has returned.
"""

from __future__ import annotations

from typing import Any

import torch

from ._bridge import (
    TOPK_SETTINGS,
    call,
    options,
    present,
    pullback,
    with_native_domain_error,
)
from ._convert import (
    _numpy,
    check_tensor,
    elements,
    from_julia,
    from_julia_vectors,
    gradient_buffer,
    handle,
    to_julia,
    to_julia_vectors,
)


def svd(A: torch.Tensor, full_matrices: bool) -> tuple:
    check_tensor("svd", A)
    batch, keep = A.shape[:-2], []
    U, S, Vt = call(
        "svd", "svd_batched", to_julia(A, keep), full_matrices, elements=elements(A)
    )
    # Julia's Vt is U^T, its U is Vh^T
    out = (from_julia(Vt, batch), from_julia_vectors(S, batch), from_julia(U, batch))
    return out, (handle(U), handle(S), handle(Vt))


def svd_pullback(
    shape_dtype: tuple,
    handles: tuple,
    gU: Any,
    gS: Any,
    gVh: Any,
    opts: Any,
    weights: bool = True,
) -> torch.Tensor:
    """``weights``: the first-order check of unequal weights applies (see
    ``_bridge.pullback``)."""
    Uj, Sj, Vtj = handles
    gA, keep = gradient_buffer(shape_dtype), []
    pullback(
        "svd",
        "svd_pullback_batched!",
        present(gU, gVh),
        opts,
        to_julia(gA, keep),
        Uj,
        Sj,
        Vtj,
        None if gVh is None else to_julia(gVh, keep),  # cotangent of Julia's U = Vh^T
        None if gS is None else to_julia_vectors(gS, keep),
        None if gU is None else to_julia(gU, keep),  # cotangent of Julia's Vt = U^T
        *options(opts),
        elements=elements(gA),
        weights=weights,
    )
    return gA


def svd_pushforward(handles: tuple, dA: torch.Tensor, opts: Any) -> tuple:
    """Forward mode: ``(dU, dS, dVh)`` along ``dA``. Julia pushes the tangent of
    the transposes through its factors (``handles``) and the roles swap back
    as for the factors: Julia's ``dVt`` is our ``dU^T``, its ``dU`` our
    ``dVh^T``. Each comes back wrapping Julia's memory."""
    batch, keep = dA.shape[:-2], []
    dUj, dSj, dVtj = call(
        "svd",
        "svd_pushforward_batched",
        *handles,
        to_julia(dA, keep),
        opts.degeneracy_atol,
        opts.broadening,
        elements=elements(dA),
    )
    dU, dVh = from_julia(dVtj, batch), from_julia(dUj, batch)
    return dU, from_julia_vectors(dSj, batch), dVh


def svdvals(A: torch.Tensor) -> torch.Tensor:
    check_tensor("svdvals", A)
    keep: list = []
    S = call("svdvals", "svdvals_batched", to_julia(A, keep), elements=elements(A))
    return from_julia_vectors(S, A.shape[:-2])


def svd_function(A: torch.Tensor, f: Any, opts: Any, native_check: Any = None) -> tuple:
    """``(Y, S, handles)``; ``S`` (sharing Julia's memory) lets the caller run
    the truncation check of the native backend, with the same message.
    ``native_check(S)``: the native domain check of ``f``, which reports a
    domain error Julia finds."""
    check_tensor("svd_function", A)
    batch, keep = A.shape[:-2], []
    Y, U, S, Vt = with_native_domain_error(
        batch,
        native_check,
        lambda: call(
            "svd_function",
            "svd_function_batched",
            to_julia(A, keep),
            f,
            opts.degeneracy_atol,
            elements=elements(A),
        ),
    )
    handles = (handle(U), handle(S), handle(Vt))
    return from_julia(Y, batch), from_julia_vectors(S, batch), handles


def svd_function_pullback(
    shape_dtype: tuple, handles: tuple, f: Any, gY: torch.Tensor, opts: Any
) -> torch.Tensor:
    gA, keep = gradient_buffer(shape_dtype), []
    call(
        "svd_function",
        "svd_function_pullback_batched!",
        to_julia(gA, keep),
        *handles,
        f,
        to_julia(gY, keep),
        opts.degeneracy_atol,
        elements=elements(gA),
    )
    return gA


def svd_function_pushforward(
    handles: tuple, f: Any, dA: torch.Tensor, opts: Any
) -> torch.Tensor:
    """Forward mode: the tangent of ``Y`` along ``dA`` (Julia's, of the
    transposes, which reads as ours as ``Y`` does)."""
    keep: list = []
    dY = call(
        "svd_function",
        "svd_function_pushforward_batched",
        *handles,
        f,
        to_julia(dA, keep),
        opts.degeneracy_atol,
        elements=elements(dA),
    )
    return from_julia(dY, dA.shape[:-2])


def svd_topk(A: torch.Tensor, k: int, settings: dict[str, Any]) -> tuple:
    """``(out, values, handles)``: the top-``k`` triplets by Julia's
    svd_topk_block on the transposes, the block's singular values (all ``p``
    of them, descending: a copy) and the handles of its blocks for
    :func:`svd_trunc_pullback`. ``settings``:
    ``method`` ("auto"/"randomized"), ``oversample``, ``n_iter`` (None:
    automatic), ``rtol``, ``maxiter`` (the backward's) and ``degeneracy_atol``."""
    check_tensor("svd", A)
    batch, keep = A.shape[:-2], []
    Uj, Sj, Vtj, d = call(
        "svd",
        "svd_topk_batched",
        to_julia(A, keep),
        k,
        *(settings[name] for name in TOPK_SETTINGS),
        elements=elements(A),
    )
    # the blocks have p >= k columns: the kept ones, contiguous as natively
    U = from_julia(Vtj, batch)[..., :k]  # Julia's Vt is U^T
    Vh = from_julia(Uj, batch)[..., :k, :]  # Julia's U is Vh^T
    Sp = from_julia_vectors(Sj, batch)
    out = tuple(t.contiguous() for t in (U, Sp[..., :k], Vh))
    # the block's singular values, descending, as a copy (the truncation rules
    # read past the kept ones; Julia's array stays the pullback's)
    return out, Sp.clone(), (handle(Uj), handle(Sj), handle(Vtj), d)


def svd_trunc_pullback(
    A: torch.Tensor,
    handles: tuple,
    gU: Any,
    gS: Any,
    gVh: Any,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> torch.Tensor:
    """Gradient of the top-k triplets from the blocks of :func:`svd_topk`
    (Julia's svd_trunc_pullback!, dense fallback and warning included)."""
    gA, keep = gradient_buffer((A.shape, A.dtype)), []
    pullback(
        "svd",
        "svd_trunc_pullback_batched!",
        present(gU, gVh),
        opts,
        to_julia(gA, keep),
        to_julia(A, keep),
        *handles,
        None if gVh is None else to_julia(gVh, keep),  # cotangent of Julia's U = Vh^T
        None if gS is None else to_julia_vectors(gS, keep),
        None if gU is None else to_julia(gU, keep),  # cotangent of Julia's Vt = U^T
        rtol,
        maxiter,
        *options(opts),
        elements=elements(gA),
    )
    return gA


def svd_trunc_pushforward(
    A: torch.Tensor,
    handles: tuple,
    k: int,
    dA: torch.Tensor,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> tuple:
    """Forward mode of :func:`svd_topk`: ``(dU, dS, dVh)`` of the kept ``k``
    triplets along ``dA``, by Julia's truncated_svd_pushforward through the
    blocks of :func:`svd_topk` (dense fallback and warning included). Julia
    pushes the transposed tangent through its factors of the transposes and
    the roles swap back as for the factors (Julia's ``dVt`` is our ``dU^T``,
    its ``dU`` our ``dVh^T``); each comes back wrapping Julia's memory."""
    batch, keep = dA.shape[:-2], []
    dUj, dSj, dVtj = call(
        "svd",
        "svd_trunc_pushforward_batched",
        to_julia(A, keep),
        *handles,
        k,
        to_julia(dA, keep),
        rtol,
        maxiter,
        opts.degeneracy_atol,
        opts.broadening,
        elements=elements(A),
    )
    dU, dVh = from_julia(dVtj, batch), from_julia(dUj, batch)
    return dU, from_julia_vectors(dSj, batch), dVh


def truncation_ranks(
    op: str, x: torch.Tensor, rule: Any, degeneracy_atol: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rank of each spectrum ``x`` (``(*, K)``, descending from the wanted
    end: singular values, or eigenvalues read from the wanted end) under the
    truncation ``rule`` (``forward.truncation.TruncationRule``), by
    PySpectral.truncation_rank, shape ``(*,)``, int64, and Julia's tail norms
    of each spectrum (``(*, K + 1)``: PySpectral.tail_norms, the errors that
    rule compared). The layout does not matter here: a spectrum is the same
    on both sides of the transpose (it crosses as the column-major ``K x B``
    array of :func:`to_julia_vectors`). The ranks come back as a Julia
    ``Vector{Int64}`` of length ``B``, the tails as a ``(K + 1) x B``
    matrix."""
    check_tensor(op, x)
    keep: list = []
    ranks, tails = call(
        op,
        "truncation_ranks_batched",
        to_julia_vectors(x, keep),
        rule.k,
        rule.atol,
        rule.rtol,
        rule.error_atol,
        rule.error_rtol,
        rule.multiplets,
        rule.min_rank,
        degeneracy_atol,
    )
    r = torch.from_numpy(_numpy(ranks).copy())  # Julia's Vector{Int64}: int64
    return r.reshape(x.shape[:-1]), from_julia_vectors(tails, x.shape[:-1])


# --------------------------------------------------------------- split
# Julia splits the transposes: Python's U is Julia's Vt, its Vh Julia's U, its L
# (U g(S)) Julia's R, and absorb "left" is Julia's :right.
_SPLIT_SWAP = {"left": "right", "right": "left", "both": "both"}


def _kept(keep: torch.Tensor, crossing: list) -> tuple[int, ...]:
    """The kept count of each matrix, as the ``1 x B`` array of a ``(B, 1)``
    float64 tensor."""
    return to_julia_vectors(keep.sum(-1, keepdim=True).to(torch.float64), crossing)


def svd_split_pullback(
    U: torch.Tensor,
    S: torch.Tensor,
    Vh: torch.Tensor,
    keep: torch.Tensor,
    absorb: str,
    gL: Any,
    gR: Any,
    opts: Any,
) -> tuple:
    """``(gA, gU, gS, gVh)`` of the split by Julia's svd_split_pullback!
    (``pullbacks/split.py``'s ``svd_split_pullback``)."""
    gA, keep_alive = gradient_buffer((U.shape[:-1] + Vh.shape[-1:], U.dtype)), []
    dUj, dS, dVtj = call(
        "svd",
        "svd_split_pullback_batched!",
        to_julia(gA, keep_alive),
        to_julia(Vh, keep_alive),  # Julia's U
        to_julia_vectors(S, keep_alive),
        to_julia(U, keep_alive),  # Julia's Vt
        _kept(keep, keep_alive),
        _SPLIT_SWAP[absorb],
        None if gR is None else to_julia(gR, keep_alive),  # Julia's ΔL
        None if gL is None else to_julia(gL, keep_alive),  # Julia's ΔR
        opts.degeneracy_atol,
        elements=elements(gA),
    )
    batch = S.shape[:-1]
    # Julia's ΔU is our gVh^T, its ΔVt our gU^T
    gU, gVh = from_julia(dVtj, batch), from_julia(dUj, batch)
    return gA, gU, from_julia_vectors(dS, batch), gVh


def svd_split_pushforward(
    U: torch.Tensor,
    S: torch.Tensor,
    Vh: torch.Tensor,
    keep: torch.Tensor,
    absorb: str,
    dA: torch.Tensor,
    dU: Any,
    dS: Any,
    dVh: Any,
    opts: Any,
) -> tuple:
    """``(dL, dR)`` of the split by Julia's svd_split_pushforward."""
    crossing: list = []
    dLj, dRj = call(
        "svd",
        "svd_split_pushforward_batched",
        to_julia(Vh, crossing),
        to_julia_vectors(S, crossing),
        to_julia(U, crossing),
        _kept(keep, crossing),
        _SPLIT_SWAP[absorb],
        to_julia(dA, crossing),
        None if dVh is None else to_julia(dVh, crossing),  # Julia's ΔU
        None if dS is None else to_julia_vectors(dS, crossing),
        None if dU is None else to_julia(dU, crossing),  # Julia's ΔVt
        opts.degeneracy_atol,
        elements=elements(dA),
    )
    batch = S.shape[:-1]
    # Julia's ΔL is our dR^T, its ΔR our dL^T
    return from_julia(dRj, batch), from_julia(dLj, batch)


# ------------------------------------------- f given by its values (user f)
# A user's f is Python code, which Julia cannot call. Julia decomposes (the
# svd_batched / eigh_batched glue: svd_values / eigh_values below), the caller
# evaluates f and f' on that spectrum in Python (a tensor sharing Julia's
# memory), and the glue forms Y and later the pullback from the values
# (PySpectral.SpectralValues). The values cross like S: (*, k) tensors as
# column-major (k, B) arrays (to_julia_vectors, at each call); the objects
# below keep them (as tensors) for the pullback and pushforward.


def svd_values(A: torch.Tensor) -> tuple:
    """``((U, S, Vh), values)``: Julia's thin SVD of ``A`` (tensors sharing
    its memory) and the :class:`SVDValues` that forms ``U f(S) Vh`` there."""
    check_tensor("svd_function", A)
    batch, keep = A.shape[:-2], []
    U, S, Vt = call(
        "svd_function", "svd_batched", to_julia(A, keep), False, elements=elements(A)
    )
    # Julia's Vt is U^T, its U is Vh^T
    out = (from_julia(Vt, batch), from_julia_vectors(S, batch), from_julia(U, batch))
    return out, SVDValues((handle(U), handle(S), handle(Vt)), (A.shape, A.dtype))


class SVDValues:
    """``Y = U f(S) Vh`` on Julia's factors (``handles``) from the values
    ``fS``, ``dS`` of ``f`` and ``f'`` on its ``S``: ``form`` (once), then its
    ``pullback`` / ``pushforward`` along ``A`` (Julia's factors of the
    transposes: ``Y`` and the gradient arrive in our layout, as ``A`` left)."""

    def __init__(self, handles: tuple, shape_dtype: tuple) -> None:
        self.handles, self.shape_dtype = handles, shape_dtype
        self.values: tuple = ()  # (fS, dS), detached tensors

    def _values(self, keep: list) -> tuple:
        return tuple(to_julia_vectors(x, keep) for x in self.values)

    def form(self, fS: torch.Tensor, dS: torch.Tensor) -> torch.Tensor:
        self.values, keep = (fS.detach(), dS.detach()), []
        Y = call(
            "svd_function",
            "svd_function_values_batched",
            *self.handles,
            *self._values(keep),
            elements=elements(self.shape_dtype[0]),
        )
        return from_julia(Y, self.shape_dtype[0][:-2])

    def pullback(self, gY: torch.Tensor) -> torch.Tensor:
        gA, keep = gradient_buffer(self.shape_dtype), []
        call(
            "svd_function",
            "svd_function_values_pullback_batched!",
            to_julia(gA, keep),
            *self.handles,
            *self._values(keep),
            to_julia(gY, keep),
            elements=elements(gA),
        )
        return gA

    def pushforward(self, dA: torch.Tensor) -> torch.Tensor:
        keep: list = []
        dY = call(
            "svd_function",
            "svd_function_values_pushforward_batched",
            *self.handles,
            *self._values(keep),
            to_julia(dA, keep),
            elements=elements(dA),
        )
        return from_julia(dY, dA.shape[:-2])
