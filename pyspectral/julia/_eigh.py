"""The Julia backend's Hermitian operations: ``eigh``, top-k eigenpairs and
``matrix_function`` (named ``f``, or a user's ``f`` by its values), each with
its pullback and pushforward. For Hermitian ``A``, ``A^T = conj(A)``: Julia
decomposes the transpose, our lower triangle is its upper one (``_SWAP``) and
its eigenvectors are ``conj(V)``, which the glue conjugates in place.
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
    check_tensor,
    elements,
    from_julia,
    from_julia_vectors,
    gradient_buffer,
    handle,
    julia_matrices,
    to_julia,
    to_julia_matrices,
    to_julia_vectors,
)

_SWAP = {"L": "U", "U": "L"}


def eigh(A: torch.Tensor, uplo: str) -> tuple:
    check_tensor("eigh", A)
    batch, keep = A.shape[:-2], []
    w, V = call(
        "eigh", "eigh_batched", to_julia(A, keep), _SWAP[uplo], elements=elements(A)
    )
    # the glue conjugated Julia's conj(V) in place
    out = (from_julia_vectors(w, batch), julia_matrices(V, batch))
    return out, (handle(w), handle(V))


def eigh_pullback(
    shape_dtype: tuple,
    handles: tuple,
    gw: Any,
    gV: Any,
    uplo: str,
    opts: Any,
    weights: bool = True,
    hermitian: bool = False,
) -> torch.Tensor:
    """``weights``: the first-order check of unequal weights applies (see
    ``_bridge.pullback``); ``hermitian``: torch's gradient convention (the
    Hermitian part of the gradient) instead of the triangle read."""
    wj, Vj = handles
    gA, keep = gradient_buffer(shape_dtype), []
    pullback(
        "eigh",
        "eigh_pullback_batched!",
        present(gV),
        opts,
        to_julia(gA, keep),
        wj,
        Vj,
        None if gw is None else to_julia_vectors(gw, keep),
        None if gV is None else to_julia_matrices(gV, keep),
        _SWAP[uplo],
        "hermitian" if hermitian else "triangle",
        *options(opts),
        elements=elements(gA),
        weights=weights,
    )
    return gA


def eigh_pushforward(handles: tuple, dA: torch.Tensor, uplo: str, opts: Any) -> tuple:
    """Forward mode: ``(dw, dV)`` along ``dA`` (read from the ``uplo``
    triangle); the glue conjugates Julia's ``conj(dV)`` in place, as it does
    the eigenvectors."""
    batch, keep = dA.shape[:-2], []
    dwj, dVj = call(
        "eigh",
        "eigh_pushforward_batched",
        *handles,
        to_julia(dA, keep),
        _SWAP[uplo],
        opts.degeneracy_atol,
        opts.broadening,
        elements=elements(dA),
    )
    return from_julia_vectors(dwj, batch), julia_matrices(dVj, batch)


def eigh_topk(
    A: torch.Tensor, k: int, uplo: str, largest: bool, settings: dict[str, Any]
) -> tuple:
    """``(out, values, handles)``: the ``k`` largest (smallest) eigenpairs by
    Julia's eigh_topk_block, kept ascending, the block's eigenvalues (a copy:
    the kept ones first, ascending, then the others from the wanted end) and
    the handles of its blocks; ``settings`` as for :func:`svd_topk`."""
    check_tensor("eigh", A)
    batch, keep = A.shape[:-2], []
    wj, Vj, d = call(
        "eigh",
        "eigh_topk_batched",
        to_julia(A, keep),
        k,
        _SWAP[uplo],
        largest,
        *(settings[name] for name in TOPK_SETTINGS),
        elements=elements(A),
    )
    # the blocks have p >= k columns, the kept ones first (ascending)
    V = julia_matrices(Vj, batch)[..., :k]  # conjugated in place by the glue
    wp = from_julia_vectors(wj, batch)
    out = (wp[..., :k].contiguous(), V.contiguous())
    # the block's eigenvalues (the kept ones first, ascending, then the others
    # from the wanted end), as a copy, for the truncation rules
    return out, wp.clone(), (handle(wj), handle(Vj), d)


def eigh_trunc_pullback(
    A: torch.Tensor,
    handles: tuple,
    gw: Any,
    gV: Any,
    uplo: str,
    largest: bool,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> torch.Tensor:
    """Gradient of the top-k eigenpairs from the blocks of :func:`eigh_topk`."""
    wj, Vj, d = handles
    gA, keep = gradient_buffer((A.shape, A.dtype)), []
    pullback(
        "eigh",
        "eigh_trunc_pullback_batched!",
        present(gV),
        opts,
        to_julia(gA, keep),
        to_julia(A, keep),
        wj,
        Vj,
        d,
        None if gw is None else to_julia_vectors(gw, keep),
        None if gV is None else to_julia_matrices(gV, keep),
        _SWAP[uplo],
        largest,
        rtol,
        maxiter,
        *options(opts),
        elements=elements(gA),
    )
    return gA


def eigh_trunc_pushforward(
    A: torch.Tensor,
    handles: tuple,
    k: int,
    dA: torch.Tensor,
    uplo: str,
    largest: bool,
    opts: Any,
    rtol: float,
    maxiter: int,
) -> tuple:
    """Forward mode of :func:`eigh_topk`: ``(dw, dV)`` of the kept ``k``
    eigenpairs along ``dA`` (read from the ``uplo`` triangle), by Julia's
    truncated_eigh_pushforward through the blocks of :func:`eigh_topk`; the
    glue conjugates Julia's ``conj(dV)`` in place, as for :func:`eigh_pushforward`."""
    wj, Vj, d = handles
    batch, keep = dA.shape[:-2], []
    dwj, dVj = call(
        "eigh",
        "eigh_trunc_pushforward_batched",
        to_julia(A, keep),
        wj,
        Vj,
        d,
        k,
        to_julia(dA, keep),
        _SWAP[uplo],
        largest,
        rtol,
        maxiter,
        opts.degeneracy_atol,
        opts.broadening,
        elements=elements(A),
    )
    return from_julia_vectors(dwj, batch), julia_matrices(dVj, batch)


def matrix_function(
    A: torch.Tensor, f: Any, uplo: str, opts: Any, native_check: Any = None
) -> tuple:
    """``(Y, handles)``; ``native_check(w)``: the native domain check of ``f``,
    which reports a domain error Julia finds."""
    check_tensor("matrix_function", A)
    batch, keep = A.shape[:-2], []
    Y, w, V = with_native_domain_error(
        batch,
        native_check,
        lambda: call(
            "matrix_function",
            "matrix_function_batched",
            to_julia(A, keep),
            f,
            _SWAP[uplo],
            opts.degeneracy_atol,
            elements=elements(A),
        ),
    )
    return from_julia(Y, batch), (handle(w), handle(V))


def matrix_function_pullback(
    shape_dtype: tuple, handles: tuple, f: Any, gY: torch.Tensor, uplo: str, opts: Any
) -> torch.Tensor:
    gA, keep = gradient_buffer(shape_dtype), []
    call(
        "matrix_function",
        "matrix_function_pullback_batched!",
        to_julia(gA, keep),
        *handles,
        f,
        to_julia(gY, keep),
        _SWAP[uplo],
        opts.degeneracy_atol,
        elements=elements(gA),
    )
    return gA


def matrix_function_pushforward(
    handles: tuple, f: Any, dA: torch.Tensor, uplo: str, opts: Any
) -> torch.Tensor:
    """Forward mode: the tangent of ``Y`` along ``dA``."""
    keep: list = []
    dY = call(
        "matrix_function",
        "matrix_function_pushforward_batched",
        *handles,
        f,
        to_julia(dA, keep),
        _SWAP[uplo],
        opts.degeneracy_atol,
        elements=elements(dA),
    )
    return from_julia(dY, dA.shape[:-2])


def eigh_values(A: torch.Tensor, uplo: str) -> tuple:
    """``((w, V), values)``: Julia's eigendecomposition of the ``uplo``
    triangle of ``A`` and the :class:`EighValues` that forms ``V f(w) V^H``."""
    check_tensor("matrix_function", A)
    batch, keep = A.shape[:-2], []
    w, V = call(
        "matrix_function",
        "eigh_batched",
        to_julia(A, keep),
        _SWAP[uplo],
        elements=elements(A),
    )
    # the glue conjugated Julia's conj(V) in place
    out = (from_julia_vectors(w, batch), julia_matrices(V, batch))
    return out, EighValues((handle(w), handle(V)), A, uplo)


class EighValues:
    """``Y = V f(w) V^H`` on Julia's eigendecomposition (``handles``; ``V``
    conjugated in place by eigh_batched: Python's ``V``) from the values of
    ``f`` and ``f'`` on ``w``; its pullback folded onto the ``uplo``
    triangle, as natively."""

    def __init__(self, handles: tuple, A: torch.Tensor, uplo: str) -> None:
        self.handles, self.shape_dtype = handles, (A.shape, A.dtype)
        self.uplo, self.values = _SWAP[uplo], ()

    def _values(self, keep: list) -> tuple:
        return tuple(to_julia_vectors(x, keep) for x in self.values)

    def form(self, fw: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
        self.values, keep = (fw.detach(), dw.detach()), []
        Y = call(
            "matrix_function",
            "matrix_function_values_batched",
            *self.handles,
            *self._values(keep),
            elements=elements(self.shape_dtype[0]),
        )
        return from_julia(Y, self.shape_dtype[0][:-2])

    def pullback(self, gY: torch.Tensor) -> torch.Tensor:
        gA, keep = gradient_buffer(self.shape_dtype), []
        call(
            "matrix_function",
            "matrix_function_values_pullback_batched!",
            to_julia(gA, keep),
            *self.handles,
            *self._values(keep),
            to_julia(gY, keep),
            self.uplo,
            elements=elements(gA),
        )
        return gA

    def pushforward(self, dA: torch.Tensor) -> torch.Tensor:
        keep: list = []
        dY = call(
            "matrix_function",
            "matrix_function_values_pushforward_batched",
            *self.handles,
            *self._values(keep),
            to_julia(dA, keep),
            self.uplo,
            elements=elements(dA),
        )
        return from_julia(dY, dA.shape[:-2])
