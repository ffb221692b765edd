"""The autograd Functions of the iterative top-k path, on both backends: the
forward in ``forward/topk.py``, the pullback in ``pullbacks/truncated.py``
(Julia: ``PySpectral.svd_topk`` / ``eigh_topk`` and their pullbacks).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _common as C
from . import _julia
from .forward.topk import randomized_eigh, randomized_svd
from .pullbacks.truncated import truncated_eigh_pullback, truncated_svd_pullback


class SVDTopK(torch.autograd.Function):
    """Randomized top-k forward, Sylvester (CG) backward."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, k: int, params: tuple, opts: C.Options) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        U, S, Vh = randomized_svd(A, k, oversample, n_iter)
        ctx.opts = opts
        ctx.save_for_backward(A, U, S, Vh)
        ctx.set_materialize_grads(False)
        return U, S, Vh

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        A, U, S, Vh = ctx.saved_tensors
        gA = truncated_svd_pullback(
            A, U, S, Vh, gU, gS, gVh, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None


class EighTopK(torch.autograd.Function):
    """Randomized k extreme eigenpairs forward, Sylvester (CG) backward."""

    @staticmethod
    def forward(
        ctx: Any,
        A: Tensor,
        k: int,
        largest: bool,
        uplo: str,
        params: tuple,
        opts: C.Options,
    ) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        w, V = randomized_eigh(A, k, oversample, n_iter)
        ctx.largest, ctx.uplo, ctx.opts = largest, uplo, opts
        ctx.save_for_backward(A, w, V)
        ctx.set_materialize_grads(False)
        return w, V

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        A, w, V = ctx.saved_tensors
        gA = truncated_eigh_pullback(
            A, w, V, gw, gV, ctx.uplo, ctx.largest, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None, None, None


class SVDTopKJulia(torch.autograd.Function):
    """``SVDTopK`` on the Julia backend (PySpectral.svd_topk and its pullback)."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, k: int, params: tuple, opts: C.Options) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        out, ctx.handles = _julia.svd_topk(A, k, oversample, n_iter)
        ctx.opts = opts
        ctx.save_for_backward(A)
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        (A,) = ctx.saved_tensors
        gA = _julia.svd_trunc_pullback(
            A, ctx.handles, gU, gS, gVh, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None


class EighTopKJulia(torch.autograd.Function):
    """``EighTopK`` on the Julia backend (PySpectral.eigh_topk and its pullback)."""

    @staticmethod
    def forward(
        ctx: Any,
        A: Tensor,
        k: int,
        largest: bool,
        uplo: str,
        params: tuple,
        opts: C.Options,
    ) -> tuple:
        oversample, n_iter, ctx.rtol, ctx.maxiter = params
        out, ctx.handles = _julia.eigh_topk(A, k, uplo, oversample, n_iter)
        ctx.uplo, ctx.opts = uplo, opts
        ctx.save_for_backward(A)
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        (A,) = ctx.saved_tensors
        gA = _julia.eigh_trunc_pullback(
            A, ctx.handles, gw, gV, ctx.uplo, ctx.opts, ctx.rtol, ctx.maxiter
        )
        return gA, None, None, None, None, None
