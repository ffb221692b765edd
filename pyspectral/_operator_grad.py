"""The gradient of ``svd_topk`` / ``eigh_topk`` on a linear operator: the
autograd Functions, the cotangents they send into the products ``Z = A V_k``
and ``W = A^H U_d`` (``eigh``: ``Z = A V_d``), and the backward's dense
fallback (the derivation is in the docstring of ``operator.py``).

They are apart from the public functions because they run in the backward
only, on the pullback of ``pullbacks/truncated.py``: the forward never reads
them, and the products they call run under ``no_grad``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor

from . import topk as TK
from ._operator_plan import _Call, _Op
from ._warnings import warn
from .exceptions import ConvergenceWarning
from .pullbacks.truncated import (
    dense_truncated_eigh_pullback,
    dense_truncated_svd_pullback,
    pad_block,
    truncated_eigh_pullback,
    truncated_svd_pullback,
)


def _backward_warning(name: str, A: _Op, maxiter: int, residual: float, opts):
    warn(
        f"{name} backward: the Sylvester solve did not converge in {maxiter} "
        f"iterations (relative residual {residual:.2g}): there is no gap "
        "between the kept spectrum and the rest beyond the certified block, "
        f"and the operator is too large to form for the exact dense fallback "
        f"({A.size()}). The gradient is approximate; choose k at a gap, or "
        "raise oversample or backward_maxiter.",
        ConvergenceWarning,
        opts.site,
    )


def _tracked(t: Tensor) -> bool:
    """Whether autograd (or torch.func) follows ``t``."""
    return t.requires_grad or is_functorch_wrapped_tensor(t)


# ------------------------------------------------------------------- svd


class _SVDTopKOperator(torch.autograd.Function):
    """Returns the (already computed) top-k triplets; differentiable inputs
    ``Z = A V_k`` and ``W = A^H U_d``, whose cotangents are ``X`` and ``T^H``
    (module docstring). The other tensor inputs are the certified block and
    the extras, not differentiable."""

    @staticmethod
    def forward(Z, W, Uk, Sk, Vhk, U, S, V, Ue, Se, A, k, cfg, opts) -> tuple:
        return tuple(
            t.clone(memory_format=torch.contiguous_format) for t in (Uk, Sk, Vhk)
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        Z, W, _, _, _, U, S, V, Ue, Se, ctx.A, ctx.k, ctx.cfg, ctx.opts = inputs
        ctx.save_for_backward(Z, W, U, S, V, Ue, Se)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        Z, W, U, S, V, Ue, Se = ctx.saved_tensors
        with torch.no_grad():
            gZ, gW = _svd_cotangents(ctx, (U, S, V), (Ue, Se), (gU, gS, gVh))
        return (TK._first_order(gZ, Z), TK._first_order(gW, W), *(None,) * 12)

    jvp = staticmethod(TK._no_forward_mode)


def _svd_cotangents(ctx: Any, block: tuple, extras: tuple, cot: tuple) -> tuple:
    """``(grad_Z, grad_W)`` from the factors ``P = [U_d, X]``,
    ``Q = [T; V_k^H]`` of the pullback (``grad_W = None``: zero)."""
    A, k, cfg, opts = ctx.A, ctx.k, ctx.cfg, ctx.opts
    U, S, V = block
    gU, gS, gVh = cot
    out = truncated_svd_pullback(
        A.matmul, A.rmatmul, *block, k, *cot, opts, cfg.rtol, cfg.maxiter, extras
    )
    if out is None:
        return None, None
    P, Q, residual = out
    if gU is None and gVh is None:  # dL/dA = (U_k diag(gS)) V_k^H = P V_k^H
        return P, None
    d = S.shape[-1]
    if residual > TK.RTOL_SLACK * cfg.rtol:
        if A.small():
            gA = dense_truncated_svd_pullback(A.dense(), *block, k, *cot, opts)
            return _split_svd_gradient(gA, U[..., :k], V[..., :k], d)
        _backward_warning("svd_topk", A, cfg.maxiter, residual, opts)
    return P[..., d:], Q[..., :d, :].mH


def _split_svd_gradient(G: Tensor, Uk: Tensor, Vk: Tensor, d: int) -> tuple:
    """``(grad_Z, grad_W)`` for a dense top-k gradient ``G``, which has the
    form ``U_k Y^H + X V_k^H`` (cotangents on the kept triplets only), so
    ``G = G V_k V_k^H + U_k U_k^H G (I - V_k V_k^H)``: ``grad_Z = G V_k`` and
    ``grad_W = [(I - V_k V_k^H) G^H U_k, 0]``."""
    GhU = G.mH @ Uk
    gW = GhU - Vk @ (Vk.mH @ GhU)
    return G @ Vk, pad_block(gW, d)


def _svd_factors(call: _Call, res: Any) -> tuple:
    """``(U_k, S_k, V_k^H)`` of the certified block ``res``; where autograd
    (or torch.func) follows the operator, through ``_SVDTopKOperator`` on the
    products ``Z = A V_k`` and ``W = A^H U_d``, made here with autograd on."""
    A, k, cfg, opts = call.A, call.k, call.cfg, call.opts
    U, S, V, d = res.U, res.S, res.V, res.d
    Uk, Sk, Vhk = U[..., :k], S[..., :k], V[..., :k].mH
    out = (Uk.contiguous(), Sk.contiguous(), Vhk.contiguous())
    if torch.is_grad_enabled():
        Z, W = A.matmul(V[..., :k]), A.rmatmul(U[..., :d])
        if _tracked(Z) or _tracked(W):
            block = (U[..., :d], S[..., :d], V[..., :d], U[..., d:], S[..., d:])
            out = _SVDTopKOperator.apply(Z, W, Uk, Sk, Vhk, *block, A, k, cfg, opts)
    return out


# ------------------------------------------------------------------ eigh


class _EighTopKOperator(torch.autograd.Function):
    """Returns the (already computed) k extreme eigenpairs; differentiable
    input ``Z = A V_d``, whose cotangent is ``T^H + [X / 2, 0]``."""

    @staticmethod
    def forward(Z, wk, Vk, w, V, Ve, we, A, k, largest, cfg, opts) -> tuple:
        return tuple(t.clone(memory_format=torch.contiguous_format) for t in (wk, Vk))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        Z, _, _, w, V, Ve, we, ctx.A, ctx.k, ctx.largest, ctx.cfg, ctx.opts = inputs
        ctx.save_for_backward(Z, w, V, Ve, we)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        Z, w, V, Ve, we = ctx.saved_tensors
        with torch.no_grad():
            gZ = _eigh_cotangent(ctx, w, V, (Ve, we), gw, gV)
        return (TK._first_order(gZ, Z), *(None,) * 11)

    jvp = staticmethod(TK._no_forward_mode)


def _eigh_cotangent(ctx: Any, w: Tensor, V: Tensor, extras: tuple, gw, gV):
    """``grad_Z`` from the factors ``P = [V_d, X]``, ``Q = [T; V_k^H / 2]``
    of the pullback (the gradient ``V_d T + X V_k^H / 2``)."""
    A, k, cfg, opts = ctx.A, ctx.k, ctx.cfg, ctx.opts
    out = truncated_eigh_pullback(
        A.matmul, w, V, k, gw, gV, ctx.largest, opts, cfg.rtol, cfg.maxiter, extras
    )
    if out is None:
        return None
    P, Q, residual = out
    d = w.shape[-1]
    if gV is None:  # V_k diag(gw) V_k^H: Hermitian, grad_Z = [V_k diag(gw), 0]
        return pad_block(P, d)
    if residual > TK.RTOL_SLACK * cfg.rtol:
        if A.small():
            L = dense_truncated_eigh_pullback(
                _hermitian(A.dense()), w, V, k, gw, gV, "L", opts
            )
            return pad_block(_hermitian_cotangent((L + L.mH) / 2, V[..., :k]), d)
        _backward_warning("eigh_topk", A, cfg.maxiter, residual, opts)
    T, X = Q[..., :d, :].mH, P[..., d:]
    return torch.cat([T[..., :k] + X / 2, T[..., k:]], -1)


def _hermitian(H: Tensor) -> Tensor:
    return (H + H.mH) / 2


def _hermitian_cotangent(G: Tensor, Vk: Tensor) -> Tensor:
    """``g`` with ``(V_k g^H + g V_k^H) / 2 = G`` for a Hermitian top-k
    gradient ``G = P G + G P - P G P`` (``P = V_k V_k^H``; cotangents on the
    kept pairs only): ``g = 2 G V_k - V_k (V_k^H G V_k)``. (The triangle
    ``L`` that ``dense_truncated_eigh_pullback`` returns, off-diagonal
    entries doubled, unfolds to ``G = (L + L^H) / 2``.)"""
    GV = G @ Vk
    return 2 * GV - Vk @ (Vk.mH @ GV)


def _eigh_factors(call: _Call, res: Any) -> tuple:
    """``(w_k, V_k)`` of the certified block ``res``; where autograd follows
    the operator, through ``_EighTopKOperator`` on ``Z = A V_d``, made here
    with autograd on."""
    A, k, largest, cfg, opts = call.A, call.k, call.largest, call.cfg, call.opts
    w, V, d = res.S, res.U, res.d
    wk, Vk = w[..., :k], V[..., :k]
    out = (wk.contiguous(), Vk.contiguous())
    if torch.is_grad_enabled():
        Z = A.matmul(V[..., :d])
        if _tracked(Z):
            block = (w[..., :d], V[..., :d], V[..., d:], w[..., d:])
            out = _EighTopKOperator.apply(Z, wk, Vk, *block, A, k, largest, cfg, opts)
    return out
