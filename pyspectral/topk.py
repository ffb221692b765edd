"""The autograd Functions of the iterative top-k path, on both backends: the
certified forward in ``forward/topk.py``, the pullback in
``pullbacks/truncated.py`` (Julia: ``PySpectral.svd_topk`` / ``eigh_topk`` and
their pullbacks).

The native Functions are in ``setup_context`` style with a ``vmap`` rule and
a ``jvp``, so ``torch.func.grad``, ``vjp``, ``jacrev``, ``jvp``, ``jacfwd``,
``vmap`` and ``torch.autograd.forward_ad`` run through them. Their forward
returns the result and, as non-differentiable outputs, the block the
derivatives need (kept triplets plus certified extras; or, when ``auto`` fell
back, the full thin decomposition). The backward and the jvp (the transpose
of the backward, ``truncated_*_pushforward``) are first order only: taking a
derivative of either raises ``DerivativeError`` (``method="full"`` is
differentiable twice). The Julia top-k Functions do the same through
Julia's truncated pullback and pushforward (old-style Functions: dual tensors
and reverse mode, not torch.func, which runs on the native backend). The
operator form (``operator.py``) has no forward mode: its ``jvp`` raises.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor

from . import _linalg
from ._settings import Options
from ._warnings import warn
from .exceptions import ConvergenceWarning, DerivativeError
from .forward.topk import TopKConfig, eigh_topk, svd_topk
from .julia import _eigh as jeigh
from .julia import _svd as jsvd
from .pullbacks.eigh import eigh_pullback, eigh_pushforward, fold_triangle
from .pullbacks.eigh import hermitian_from_triangle as hermitian_tangent
from .pullbacks.svd import svd_pullback, svd_pushforward
from .pullbacks.truncated import (
    dense_truncated_eigh_pullback,
    dense_truncated_eigh_pushforward,
    dense_truncated_svd_pullback,
    dense_truncated_svd_pushforward,
    pad_block,
    truncated_eigh_pullback,
    truncated_eigh_pushforward,
    truncated_svd_pullback,
    truncated_svd_pushforward,
)

# A backward (or jvp) whose CG solve does not converge (no gap past the
# certified block) redoes the pullback exactly with a dense decomposition of
# the complement when m n min(m, n) is at most this: about one full SVD, 2-3 s on
# the 2-core machine of benchmarks/bench_topk.py. Larger: ConvergenceWarning.
DENSE_FALLBACK_MAX = 2048**3
# the CG counts as converged up to this multiple of backward_rtol
RTOL_SLACK = 10.0


def hermitian_from_triangle(A: Tensor, uplo: str) -> Tensor:
    """The Hermitian matrix that ``torch.linalg.eigh(A, UPLO=uplo)`` reads:
    the ``uplo`` triangle, its conjugate transpose, the real diagonal."""
    T = torch.tril(A, -1) if uplo == "L" else torch.triu(A, 1)
    return T + T.mH + torch.diag_embed(A.diagonal(dim1=-2, dim2=-1).real.to(A.dtype))


def dense_ops(A: Tensor) -> tuple:
    """``matmul(X) = A @ X`` and ``rmatmul(X) = A^H @ X`` for a dense ``A``.

    Written as ``(X^T A^T)^T`` and ``(X^H A)^H``: the same numbers, but BLAS
    then streams the row-major ``A`` with the long dimension innermost, which
    measured 1.5-3x faster than ``A @ X`` for ``X`` of 8-64 columns at
    n = 2048-4096 on the benchmark machine (benchmarks/bench_topk.py).
    """
    return (lambda X: (X.mT @ A.mT).mT), (lambda X: (X.mH @ A).mH)


def _warn(message: str, opts: Options | None = None) -> None:
    # attributed to the user's line (the innermost frame outside torch and
    # pyspectral; a fixed stacklevel depends on torch's frames inside
    # Function.apply), else to the forward call's site
    warn(message, ConvergenceWarning, None if opts is None else opts.site)


def _backward_message(
    op: str, maxiter: int, residual: float, mode: str = "backward"
) -> str:
    result = "gradient" if mode == "backward" else "tangent"
    return (
        f"{op}(k=..., method='randomized') {mode}: the Sylvester solve did not "
        f"converge in {maxiter} iterations (relative residual {residual:.2g}): "
        "there is no gap between the kept spectrum and the rest beyond the "
        "certified block, and the matrix is too large for the exact dense "
        f"fallback. The {result} is approximate; use method='full', a k at a "
        "gap, or a larger oversample."
    )


_FORWARD_MODE = (
    "forward-mode AD (jvp, jacfwd, hessian) is not implemented for the "
    "linear-operator form of the iterative top-k path (svd_topk / eigh_topk of "
    "a LinearOperator); use reverse mode (grad, vjp, jacrev), a dense matrix, "
    "or method='full'"
)
_FIRST_ORDER = (
    "the derivatives of the iterative top-k path (method='randomized' or "
    "'krylov', or an iterating method='auto') are first order only; for second "
    "derivatives (double backward, hessian, jacrev of grad, jacfwd of jvp) use "
    "method='full'"
)


def _no_forward_mode(ctx: Any, *tangents: Any) -> Any:
    raise DerivativeError(_FORWARD_MODE)


class _NoDoubleBackward(torch.autograd.Function):
    """Identity on a first-order gradient; differentiating it raises."""

    generate_vmap_rule = True

    @staticmethod
    def forward(g: Tensor, A: Tensor) -> Tensor:
        return g.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *_: Tensor) -> tuple:
        raise DerivativeError(_FIRST_ORDER)

    @staticmethod
    def jvp(ctx: Any, *_: Any) -> Tensor:
        raise DerivativeError(_FIRST_ORDER)


def _first_order(g: Tensor | None, A: Tensor) -> Tensor | None:
    """``g`` (a first derivative computed from ``A``), such that
    differentiating it raises: wrapped when it may be differentiated, in
    reverse mode (grad mode on) or in forward mode (``A`` carries a tangent,
    or sits under a torch.func transform, whose levels grad mode ignores)."""
    if g is not None and (
        torch.is_grad_enabled()
        or is_functorch_wrapped_tensor(A)
        or fwAD.unpack_dual(A).tangent is not None
    ):
        return _NoDoubleBackward.apply(g, A)
    return g


def _own(t: Tensor) -> Tensor:
    """A contiguous copy, never a view: the differentiable outputs must not
    share storage with the block outputs (forward AD rejects an output that
    is a view of another with a tangent of a different layout)."""
    return t.clone(memory_format=torch.contiguous_format)


def _small(A: Tensor) -> bool:
    m, n = A.shape[-2:]
    return m * n * min(m, n) <= DENSE_FALLBACK_MAX


class SVDTopK(torch.autograd.Function):
    """Certified iterative top-k forward (subspace iteration or block Krylov);
    deflated CG backward."""

    @staticmethod
    def forward(A: Tensor, k: int, cfg: TopKConfig, opts: Options) -> tuple:
        res = svd_topk(
            *dense_ops(A),
            tuple(A.shape),
            A.dtype,
            A.device,
            k,
            cfg,
            opts,
        )
        if res is None:  # auto, not certified within budget: the full path
            U, S, Vh = _linalg.svd(A, full_matrices=False)
            V, d = Vh.mH, S.shape[-1]
        else:
            if res.message:
                _warn(
                    f"svd(k={k}, method={cfg.method!r}): not certified: "
                    f"{res.message}. "
                    "The result is approximate; use method='auto' (which falls "
                    "back to the full SVD), raise n_iter or oversample.",
                    opts,
                )
            U, S, V, d = res.U, res.S, res.V, res.d
        Uk, Sk, Vhk = U[..., :k], S[..., :k], V[..., :k].mH
        # the certified block, then the extras (which precondition the CG)
        block = (U[..., :d], S[..., :d], V[..., :d], U[..., d:], S[..., d:])
        return (*map(_own, (Uk, Sk, Vhk)), *block)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        A, ctx.k, ctx.cfg, ctx.opts = inputs
        ctx.mark_non_differentiable(*output[3:])
        ctx.save_for_backward(A, *output[3:])
        ctx.save_for_forward(A, *output[3:])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor, *_: Tensor) -> tuple:
        A, U, S, V, Ue, Se = ctx.saved_tensors
        with torch.no_grad():
            gA = _svd_gradient(
                A, (U, S, V), (Ue, Se), ctx.k, (gU, gS, gVh), ctx.opts, ctx.cfg
            )
        return _first_order(gA, A), None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        # the block and extras are non-differentiable outputs: no tangent
        A, U, S, V, Ue, Se = ctx.saved_tensors
        with torch.no_grad():
            tangents = _svd_tangents(A, (U, S, V), (Ue, Se), ctx.k, dA, ctx)
        return (*(_first_order(t, A) for t in tangents), *(None,) * 5)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, A: Tensor, k: int, cfg: Any, opts: Any):
        # the Function takes batch dimensions: move the vmapped one in front
        out = SVDTopK.apply(A.movedim(in_dims[0], 0), k, cfg, opts)
        return out, (0,) * len(out)


def _svd_gradient(
    A: Tensor,
    block: tuple,
    extras: tuple,
    k: int,
    cotangents: tuple,
    opts: Options,
    cfg: TopKConfig,
) -> Tensor | None:
    U, S, V = block
    if S.shape[-1] == min(A.shape[-2:]):
        # the full decomposition (auto fell back): the full path's pullback
        gU, gS, gVh = cotangents
        d = S.shape[-1]
        return svd_pullback(
            U, S, V.mH, pad_block(gU, d), pad_block(gS, d), pad_block(gVh, d, -2), opts
        )
    out = truncated_svd_pullback(
        *dense_ops(A), *block, k, *cotangents, opts, cfg.rtol, cfg.maxiter, extras
    )
    if out is None:
        return None
    P, Q, residual = out
    if residual > RTOL_SLACK * cfg.rtol:
        if _small(A):
            return dense_truncated_svd_pullback(A, *block, k, *cotangents, opts)
        _warn(_backward_message("svd", cfg.maxiter, residual), opts)
    return P @ Q


def _svd_tangents(
    A: Tensor, block: tuple, extras: tuple, k: int, dA: Tensor, ctx: Any
) -> tuple[Tensor, Tensor, Tensor]:
    """``(dU_k, dS_k, dVh_k)`` along ``dA``: the transpose of
    ``_svd_gradient``, with the same full-path branch, dense fallback and
    warning."""
    U, S, V = block
    opts, cfg = ctx.opts, ctx.cfg
    if S.shape[-1] == min(A.shape[-2:]):  # the full decomposition
        dU, dS, dVh = svd_pushforward(U, S, V.mH, dA, opts)
        return dU[..., :k], dS[..., :k], dVh[..., :k, :]
    *tangents, residual = truncated_svd_pushforward(
        *dense_ops(A), *block, k, dA, opts, cfg.rtol, cfg.maxiter, extras
    )
    if residual > RTOL_SLACK * cfg.rtol:
        if _small(A):
            return dense_truncated_svd_pushforward(A, *block, k, dA, opts)
        _warn(_backward_message("svd", cfg.maxiter, residual, "jvp"), opts)
    return tuple(tangents)


class EighTopK(torch.autograd.Function):
    """Certified iterative k extreme eigenpairs (subspace iteration or block
    Lanczos); deflated CG backward.
    Reads the ``uplo`` triangle, like ``torch.linalg.eigh``."""

    @staticmethod
    def forward(
        A: Tensor, k: int, largest: bool, uplo: str, cfg: TopKConfig, opts: Options
    ) -> tuple:
        H = hermitian_from_triangle(A, uplo)
        res = eigh_topk(
            dense_ops(H)[0], tuple(A.shape), A.dtype, A.device, k, largest, cfg, opts
        )
        if res is None:  # auto, not certified within budget: the full path
            w, V = _linalg.eigh(A, UPLO=uplo)
            # the whole ascending decomposition is the block (its backward is
            # eigh_pullback, which takes any order); the kept pairs are sliced
            sel = slice(-k, None) if largest else slice(0, k)
            empty = V[..., :0]
            block = (w, V, empty, w[..., :0])
            return (_own(w[..., sel]), _own(V[..., sel]), *block)
        else:
            if res.message:
                _warn(
                    f"eigh(k={k}, method={cfg.method!r}): not certified: "
                    f"{res.message}. The result is approximate; use "
                    "method='auto' (which falls back to the full eigh), raise "
                    "n_iter or oversample.",
                    opts,
                )
            w, V, d = res.S, res.U, res.d
            n = A.shape[-1]
            if d == n and largest:
                # complete: ascending order, as the backward's full-path
                # branch takes it (kept ascending first, extras descending)
                perm = [*range(n - 1, k - 1, -1), *range(k)]
                block = (w[..., perm], V[..., perm], V[..., :0], w[..., :0])
                return (_own(w[..., :k]), _own(V[..., :k]), *block)
        block = (w[..., :d], V[..., :d], V[..., d:], w[..., d:])
        return (_own(w[..., :k]), _own(V[..., :k]), *block)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        A, ctx.k, ctx.largest, ctx.uplo, ctx.cfg, ctx.opts = inputs
        ctx.mark_non_differentiable(*output[2:])
        ctx.save_for_backward(A, *output[2:])
        ctx.save_for_forward(A, *output[2:])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gw: Tensor, gV: Tensor, *_: Tensor) -> tuple:
        A, w, V, Ve, we = ctx.saved_tensors
        with torch.no_grad():
            G = _eigh_gradient(A, w, V, (Ve, we), gw, gV, ctx)
        return _first_order(G, A), None, None, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        A, w, V, Ve, we = ctx.saved_tensors
        with torch.no_grad():
            tangents = _eigh_tangents(A, w, V, (Ve, we), dA, ctx)
        return (*(_first_order(t, A) for t in tangents), *(None,) * 4)

    @staticmethod
    def vmap(
        info: Any,
        in_dims: tuple,
        A: Tensor,
        k: int,
        largest: bool,
        uplo: str,
        cfg: Any,
        opts: Any,
    ):
        out = EighTopK.apply(A.movedim(in_dims[0], 0), k, largest, uplo, cfg, opts)
        return out, (0,) * len(out)


def _eigh_gradient(
    A: Tensor,
    w: Tensor,
    V: Tensor,
    extras: tuple,
    gw: Tensor | None,
    gV: Tensor | None,
    ctx: Any,
) -> Tensor | None:
    k, cfg, opts, uplo = ctx.k, ctx.cfg, ctx.opts, ctx.uplo
    n = A.shape[-1]
    if w.shape[-1] == n:
        # the full ascending decomposition (auto fell back, or k + oversample
        # covers everything): the full path's pullback, cotangents in place
        at = n - k if ctx.largest else 0
        gw, gV = (None if g is None else _embed(g, at, n) for g in (gw, gV))
        return eigh_pullback(w, V, gw, gV, uplo, opts)
    H = hermitian_from_triangle(A, uplo)
    out = truncated_eigh_pullback(
        dense_ops(H)[0],
        w,
        V,
        k,
        gw,
        gV,
        ctx.largest,
        opts,
        cfg.rtol,
        cfg.maxiter,
        extras,
    )
    if out is None:
        return None
    P, Q, residual = out
    if residual > RTOL_SLACK * cfg.rtol:
        if _small(H):
            return dense_truncated_eigh_pullback(H, w, V, k, gw, gV, uplo, opts)
        _warn(_backward_message("eigh", cfg.maxiter, residual), opts)
    return fold_triangle(P @ Q, uplo)


def _eigh_tangents(
    A: Tensor, w: Tensor, V: Tensor, extras: tuple, dA: Tensor, ctx: Any
) -> tuple[Tensor, Tensor]:
    """``(dw_k, dV_k)`` along ``dA`` (read from the ``uplo`` triangle): the
    transpose of ``_eigh_gradient``."""
    k, cfg, opts = ctx.k, ctx.cfg, ctx.opts
    dH = hermitian_tangent(dA, ctx.uplo)
    n = A.shape[-1]
    if w.shape[-1] == n:  # the full ascending decomposition
        at = n - k if ctx.largest else 0
        dw, dV = eigh_pushforward(w, V, dH, "L", opts)
        return dw[..., at : at + k], dV[..., at : at + k]
    H = hermitian_from_triangle(A, ctx.uplo)
    *tangents, residual = truncated_eigh_pushforward(
        dense_ops(H)[0], w, V, k, dH, ctx.largest, opts, cfg.rtol, cfg.maxiter, extras
    )
    if residual > RTOL_SLACK * cfg.rtol:
        if _small(H):
            return dense_truncated_eigh_pushforward(H, w, V, k, dH, opts)
        _warn(_backward_message("eigh", cfg.maxiter, residual, "jvp"), opts)
    return tuple(tangents)


def _embed(g: Tensor, at: int, n: int) -> Tensor:
    """The cotangent ``g`` of ``k`` columns placed at ``at`` among ``n``."""
    k = g.shape[-1]
    zeros = g.new_zeros(*g.shape[:-1], n)
    return torch.cat([zeros[..., :at], g, zeros[..., at + k :]], -1)


def _julia_settings(k: int, cfg: TopKConfig, opts: Options) -> dict[str, Any]:
    """The forward keywords of Julia's svd_topk_block / eigh_topk_block for the
    native path's settings: the same block (``oversample = p - k``), iteration
    cap, certificate, budget (which includes the backward's CG) and cluster
    tolerance, so that both backends decide alike."""
    return {
        "method": cfg.method,
        "oversample": cfg.p - k,
        "n_iter": cfg.max_iter,
        "rtol": cfg.rtol,
        "maxiter": cfg.maxiter,
        "degeneracy_atol": opts.degeneracy_atol,
    }


def _not_views(out: tuple) -> tuple:
    """The kept columns as tensors of their own: those that are views of
    Julia's blocks (``p >= k`` columns) are copied, since forward AD rejects a
    tangent whose storage differs from that of a view output (``_own``)."""
    return tuple(_own(t) if t._is_view() else t for t in out)


class SVDTopKJulia(torch.autograd.Function):
    """``SVDTopK`` on the Julia backend: PySpectral.svd_topk_block (the same
    certified subspace iteration; ``method="auto"`` falls back to the full
    SVD in Julia, never returning an uncertified result; ``"randomized"``
    warns with the measured residual), svd_trunc_pullback! (the same
    deflated CG backward, dense fallback and warning) and its transpose
    truncated_svd_pushforward (the jvp, through the same blocks). First order
    only, as natively: a derivative of either raises ``DerivativeError``.
    Returns the top-k triplets and the block's singular values (not
    differentiable; for the truncation rules)."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, k: int, cfg: TopKConfig, opts: Options) -> tuple:
        settings = _julia_settings(k, cfg, opts)
        out, values, ctx.handles = jsvd.svd_topk(A, k, settings)
        ctx.k, ctx.cfg, ctx.opts = k, cfg, opts
        ctx.save_for_backward(A)
        ctx.save_for_forward(A)
        ctx.set_materialize_grads(False)
        # and, not differentiable, the block's singular values (truncation rules)
        ctx.mark_non_differentiable(values)
        return (*_not_views(out), values)

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor, *_: Tensor) -> tuple:
        (A,) = ctx.saved_tensors
        cfg = ctx.cfg
        with torch.no_grad():
            gA = jsvd.svd_trunc_pullback(
                A, ctx.handles, gU, gS, gVh, ctx.opts, cfg.rtol, cfg.maxiter
            )
        return _first_order(gA, A), None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        (A,) = ctx.saved_tensors
        cfg = ctx.cfg
        with torch.no_grad():
            tangents = jsvd.svd_trunc_pushforward(
                A, ctx.handles, ctx.k, dA, ctx.opts, cfg.rtol, cfg.maxiter
            )
        # the block's values are a non-differentiable output: no tangent
        return (*(_first_order(t, A) for t in tangents), None)


class EighTopKJulia(torch.autograd.Function):
    """``EighTopK`` on the Julia backend (PySpectral.eigh_topk_block,
    eigh_trunc_pullback! and truncated_eigh_pushforward): largest or
    smallest, reading the ``uplo`` triangle, with the native path's
    certificate, fallback, warnings and first-order limit."""

    @staticmethod
    def forward(
        ctx: Any,
        A: Tensor,
        k: int,
        largest: bool,
        uplo: str,
        cfg: TopKConfig,
        opts: Options,
    ) -> tuple:
        settings = _julia_settings(k, cfg, opts)
        out, values, ctx.handles = jeigh.eigh_topk(A, k, uplo, largest, settings)
        ctx.k, ctx.largest, ctx.uplo = k, largest, uplo
        ctx.cfg, ctx.opts = cfg, opts
        ctx.save_for_backward(A)
        ctx.save_for_forward(A)
        ctx.set_materialize_grads(False)
        # and, not differentiable, the block's eigenvalues: the kept ones first,
        # ascending, then the others from the wanted end (truncation rules)
        ctx.mark_non_differentiable(values)
        return (*_not_views(out), values)

    @staticmethod
    def backward(ctx: Any, gw: Tensor, gV: Tensor, *_: Tensor) -> tuple:
        (A,) = ctx.saved_tensors
        cfg = ctx.cfg
        with torch.no_grad():
            gA = jeigh.eigh_trunc_pullback(
                A,
                ctx.handles,
                gw,
                gV,
                ctx.uplo,
                ctx.largest,
                ctx.opts,
                cfg.rtol,
                cfg.maxiter,
            )
        return _first_order(gA, A), None, None, None, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        (A,) = ctx.saved_tensors
        cfg = ctx.cfg
        with torch.no_grad():
            tangents = jeigh.eigh_trunc_pushforward(
                A,
                ctx.handles,
                ctx.k,
                dA,
                ctx.uplo,
                ctx.largest,
                ctx.opts,
                cfg.rtol,
                cfg.maxiter,
            )
        # the block's values are a non-differentiable output: no tangent
        return (*(_first_order(t, A) for t in tangents), None)
