"""``eig_topk``: a few eigenpairs of a square non-Hermitian matrix or
never-formed operator by block Krylov-Schur (``forward/eig_topk.py``), with
the subspace adjoint (``pullbacks/eig_topk.py``), exact for gauge-invariant
losses at distinct and repeated eigenvalues of a diagonalizable operator.

How the gradient reaches an operator's tensors: as for ``linsolve``, the
forward computes ``Z = A V`` once with autograd on (``V`` detached); the
autograd Function takes ``Z`` as its input, and its backward returns
``Z̄ = U`` with ``Ā = U V^H`` (the pullback's factor), which autograd
carries through the user's ``matmul`` (a tensor's ``A @ V``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._autograd import check_not_nested_forward_mode
from ._operator_plan import _check_operator, _checked
from ._settings import Options, options
from ._validation import _as_integer, check_matrix
from ._warnings import warn
from .common.defaults import eps34, max_abs
from .common.gauge import apply_gauge_policy, check_gauge, check_weights
from .exceptions import ConvergenceWarning, InputError, ShapeError
from .forward import eig_topk as KS
from .linsolve import (
    _has_tangent,
    _julia_backend,
    _positive,
    _primal,
    _tolerance,
    _vjp_adjoint,
)
from .pullbacks.eig import split_measure, split_message
from .pullbacks.eig_topk import eig_topk_pullback, eig_topk_pushforward

__all__ = ["eig_topk", "EigTopKInfo", "EigTopKResult"]


class EigTopKResult(NamedTuple):
    """The result of :func:`eig_topk`: ``A V = V diag(eigenvalues)``,
    eigenvalues ``(k',)`` ordered by ``which`` and unit-norm eigenvectors
    ``(n, k')``, both complex.

    Example::

        >>> A = torch.diag(torch.tensor([3.0, -2.0, 1.0], dtype=torch.float64))
        >>> res = eig_topk(A, 1)
        >>> res.eigenvalues.real.round().tolist(), res.eigenvectors.shape
        ([3.0], torch.Size([3, 1]))
    """

    eigenvalues: Tensor
    eigenvectors: Tensor


class EigTopKInfo(NamedTuple):
    """The certificate of an :func:`eig_topk`: each returned pair's true
    residual ``||A v - λ v||`` (``(k',)``), the tolerance they were asked
    to meet (absolute: ``tol`` times the largest Ritz value's modulus), the
    products with ``A``, the restarts, and whether every residual met it.

    Example::

        >>> A = torch.diag(torch.arange(1.0, 41.0, dtype=torch.float64))
        >>> L, V, info = eig_topk(A, 2, return_info=True)
        >>> info.converged, L.real.round().tolist()
        (True, [40.0, 39.0])
    """

    residual: Tensor
    tol: float
    products: int
    restarts: int
    converged: bool


def eig_topk(
    op: Any,
    k: int,
    *,
    which: str = "LM",
    tol: float | None = None,
    krylovdim: int | None = None,
    maxiter: int = 300,
    blocksize: int | None = None,
    degeneracy_atol: float | None = None,
    gauge: str | None = None,
    backward_tol: float | None = None,
    backward_krylovdim: int = 30,
    backward_maxiter: int = 50,
    generator: torch.Generator | None = None,
    return_info: bool = False,
    backend: str = "auto",
) -> Any:
    r"""eig_topk(op, k, *, which="LM", ...) -> (eigenvalues, eigenvectors)

    The ``k`` eigenpairs ``A v = λ v`` of a square ``A`` (shape ``(n, n)``:
    a tensor or a :class:`LinearOperator`, only ``matmul`` needed; a tensor
    may be a batch ``(..., n, n)``, see below) that
    come first by ``which``: ``"LM"`` / ``"SM"`` the largest / smallest
    modulus, ``"LR"`` / ``"SR"`` real part, ``"LI"`` / ``"SI"`` imaginary
    part (ARPACK's and KrylovKit's meaning), ordered by it. Eigenvalues
    ``(k',)`` and unit-norm eigenvectors ``(n, k')``, complex also for a
    real ``A``; ``k' >= k``: ``k`` is extended while the next eigenvalue
    ties with the ``k``-th in the ordering (a conjugate pair under
    ``"LM"``, a modulus tie, a repeated eigenvalue) to ``degeneracy_atol``
    (default ``max|λ| max(eps**(3/4), 100 tol)``), so no cluster is cut.

    Forward: block Krylov-Schur (``krylovdim`` basis vectors, default
    ``max(30, 2k + 2 blocksize)``; restarts at most ``maxiter``), in real
    arithmetic for a real ``A`` (as ARPACK), complex otherwise;
    ``blocksize`` start vectors (default 1 for ``k = 1``, else 2) find an
    eigenvalue of that multiplicity (a larger one may be missed: raise
    ``blocksize``). Converged when each pair's true
    residual ``||A v - λ v|| <= tol max|θ|`` (default ``tol = eps**(3/4)``;
    ``return_info=True`` adds an :class:`EigTopKInfo`), else a
    ``ConvergenceWarning`` with the residual and the remedy. ``"SM"`` and
    interior targets converge slowly without a shift-invert (give ``op``
    as ``(A - σ)^{-1}``, e.g. by :func:`linsolve`). ``generator`` seeds
    the start block (default: a fixed seed, reproducible).

    Backward (first order): exact for losses that see the eigenvectors
    through complete clusters and the eigenvalues through symmetric
    functions of each cluster, at distinct and repeated eigenvalues of a
    diagonalizable ``A`` (the subspace adjoint: one shifted solve per kept
    pair on the complement of the kept subspace by GMRES to
    ``backward_tol``, default ``tol``; products by ``A^H`` only, through
    ``op.rmatmul`` where given, else the vjp of ``matmul``); the gauge
    policy (``gauge``) where the loss sees a phase or a basis in a cluster,
    as :func:`eig`; into ``A`` or the tensors ``op.matmul`` uses. Forward
    mode (dual tensors, ``torch.func.jvp``): one shifted solve per pair with
    products by ``A``; exact where the tangent keeps each cluster together,
    the gauge policy where it splits one.

    ``backend="julia"`` (a dense CPU tensor): Julia's ``PySpectral.eig_topk``
    (dense ``eigen`` up to 64 rows, KrylovKit's Arnoldi above, ``tol``,
    ``krylovdim``, ``maxiter`` as here; no ``blocksize`` or ``generator``) and
    its subspace adjoint, certified and gauge-checked here as natively; a
    :class:`LinearOperator` stays native (``BackendError``).

    A batch ``(..., n, n)`` is solved matrix by matrix (a loop: each its own
    Krylov run and autograd node), with one ``k'`` for all: the widest any
    matrix extends ``k`` to (results ``(..., k')`` and ``(..., n, k')``);
    where some matrix would then cut a cluster, ``InputError`` (ask for a
    ``k`` they agree on). With ``return_info``: residuals ``(..., k')``,
    ``tol`` a tensor ``(...)``, the products summed, the most restarts.

    Raises:
        InputTypeError, ShapeError, DtypeError, NonFiniteError: a bad ``op``.
        InputError: ``k`` not in ``1..n``, an unknown ``which``, a bad
            keyword, a batch whose matrices extend ``k`` incompatibly.
        BackendError: ``backend="julia"`` with a :class:`LinearOperator`
            (Julia would call back into Python per product), or a tensor not
            on the CPU.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(200, 200, dtype=torch.float64, generator=g)
        >>> L, V = eig_topk(A, 3)
        >>> full = torch.linalg.eigvals(A)
        >>> bool(torch.isclose(L.abs()[0], full.abs().max()))
        True
        >>> torch.allclose(A.to(V.dtype) @ V, V * L)
        True
    """
    if isinstance(op, Tensor) and op.ndim > 2:
        check_matrix("eig_topk", op, square=True)
        keywords = dict(
            which=which, tol=tol, krylovdim=krylovdim, maxiter=maxiter,
            blocksize=blocksize, degeneracy_atol=degeneracy_atol, gauge=gauge,
            backward_tol=backward_tol, backward_krylovdim=backward_krylovdim,
            backward_maxiter=backward_maxiter, generator=generator, backend=backend,
        )  # fmt: skip
        return _batched(op, k, return_info, keywords)
    c = _check(op, k, which, tol, krylovdim, maxiter, blocksize, degeneracy_atol,
               gauge, backward_tol, backward_krylovdim, backward_maxiter, generator,
               backend)  # fmt: skip
    if c.julia:
        return _julia(op, c, return_info)
    with torch.no_grad():
        ritz, kk = KS.krylov_schur(
            c.iterate, c.n, c.k, c.which, c.tol, c.krylovdim, c.maxiter, c.blocksize,
            c.cdtype.to_real() if c.real else c.cdtype, c.device, c.tie, c.gen,
        )  # fmt: skip
    scale = ritz.tol / c.tol if c.tol > 0 else 0.0
    converged = bool((ritz.residual <= ritz.tol).all())
    if not converged:
        worst = float(ritz.residual.max())
        warn(
            f"eig_topk: not converged after {ritz.restarts} restarts "
            f"({ritz.products} products): residual {worst:.3g} > {ritz.tol:.3g}. "
            "Raise maxiter or krylovdim (or blocksize at a repeated eigenvalue); "
            f"'SM' and interior targets need a shift-invert operator.",
            ConvergenceWarning,
        )
    L, V = ritz.values, ritz.vectors
    # Z = A V carries A's dependence (its gradient, or forward mode's dA V)
    Z = c.A(V)
    if Z.requires_grad or _has_tangent(Z):
        L, V = _EigTopK.apply(Z, L, V, c, c.cluster_tol(scale))
    out = EigTopKResult(L, V)
    if return_info:
        info = EigTopKInfo(ritz.residual, ritz.tol, ritz.products, ritz.restarts,
                           converged)  # fmt: skip
        return (*out, info)
    return out


def _batched(A: Tensor, k: Any, return_info: bool, keywords: dict) -> Any:
    """A batch ``(..., n, n)``: one :func:`eig_topk` per matrix, each with its
    own autograd node, and one ``k'`` for all: the matrices that extended
    ``k`` less than the widest are solved again with its ``k'``; if they then
    extend it further, no ``k'`` fits all without cutting a cluster
    (``InputError``)."""
    batch, n = A.shape[:-2], A.shape[-1]
    flat = A.reshape(-1, n, n)
    if flat.shape[0] == 0:  # the arguments checked as for one matrix
        c = _check(A.new_zeros(n, n), k, *keywords.values())
        L = torch.zeros(*batch, c.k, dtype=c.cdtype, device=A.device)
        V = torch.zeros(*batch, n, c.k, dtype=c.cdtype, device=A.device)
        if not return_info:
            return EigTopKResult(L, V)
        real = L.real.dtype
        residual = torch.zeros(*batch, c.k, dtype=real, device=A.device)
        tol = torch.zeros(batch, dtype=real, device=A.device)
        return L, V, EigTopKInfo(residual, tol, 0, 0, True)  # type: ignore[arg-type]
    results = [eig_topk(M, k, return_info=True, **keywords) for M in flat]
    widest = max(r[0].shape[-1] for r in results)
    for b, r in enumerate(results):  # once: those that extended k less
        if r[0].shape[-1] < widest:
            results[b] = eig_topk(flat[b], widest, return_info=True, **keywords)
    widths = sorted({r[0].shape[-1] for r in results})
    if len(widths) > 1:
        raise InputError(
            f"eig_topk: the matrices of the batch extend k = {k} to different "
            f"k' ({', '.join(map(str, widths))}): a conjugate pair or a tie at "
            "the k-th eigenvalue of some matrices, not of others, and one k' "
            "for all would cut a cluster; ask for a k at which they agree, or "
            "call eig_topk on each matrix"
        )
    L = torch.stack([r[0] for r in results]).reshape(*batch, widest)
    V = torch.stack([r[1] for r in results]).reshape(*batch, n, widest)
    out = EigTopKResult(L, V)
    if not return_info:
        return out
    infos = [r[2] for r in results]
    info = EigTopKInfo(  # type: ignore[arg-type]
        torch.stack([i.residual for i in infos]).reshape(*batch, widest),
        torch.tensor([i.tol for i in infos], dtype=L.real.dtype).reshape(batch),
        sum(i.products for i in infos),
        max(i.restarts for i in infos),
        all(i.converged for i in infos),
    )
    return (*out, info)


def _julia(A: Tensor, c: _Checked, return_info: bool) -> Any:
    """backend="julia": Julia's forward and pullback; the certificate (true
    residuals against ``tol max|λ|``), the warning and the gauge policy here,
    as the native backend's."""
    from .julia import _eig_topk as J

    if return_info:
        raise InputError(
            "eig_topk: return_info=True is the native backend's (KrylovKit does "
            "not report the products and restarts as it counts them); use "
            "backend='torch'"
        )
    Ad = A.detach()  # the primal: detach drops a forward-mode tangent too
    L, V, handles = J.eig_topk(Ad, c.k, c.which, c.tol, c.krylovdim, c.maxiter, c.atol)
    scale = float(L.abs().max())
    with torch.no_grad():
        residual = (Ad.to(V.dtype) @ V - V * L).norm(dim=0)
    tol = c.tol * scale
    if not bool((residual <= tol).all()):
        warn(
            f"eig_topk: not converged (Julia, KrylovKit): residual "
            f"{float(residual.max()):.3g} > {tol:.3g}. Raise maxiter or krylovdim; "
            "'SM' and interior targets need a shift-invert operator.",
            ConvergenceWarning,
        )
    dual = _has_tangent(A)
    if (torch.is_grad_enabled() and A.requires_grad) or dual:
        L, V = _JuliaEigTopK.apply(A, L, V, handles, c, c.cluster_tol(scale))
    return EigTopKResult(L, V)


class _JuliaEigTopK(torch.autograd.Function):
    """``(L, V)`` of a dense ``A`` by the Julia backend; backward in Julia,
    forward mode by the native pushforward on Julia's pairs (the same
    formula as Julia's frule, without a round trip per product)."""

    @staticmethod
    def forward(A, L, V, handles, c, cluster_tol):  # type: ignore[override]
        return L.clone(), V.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        A, L, V, ctx.handles, ctx.c, ctx.cluster_tol = inputs
        ctx.A = A.detach()
        ctx.save_for_backward(L, V)
        ctx.save_for_forward(L, V)
        ctx.set_materialize_grads(False)

    @staticmethod
    def jvp(ctx: Any, dA: Tensor | None, *_: Any) -> tuple:
        L, V = ctx.saved_tensors
        if dA is None:
            return torch.zeros_like(L), torch.zeros_like(V)
        return _pushforward(L, V, dA.to(V.dtype) @ V, ctx.c, ctx.cluster_tol)

    @staticmethod
    def backward(ctx: Any, gL: Tensor | None, gV: Tensor | None):  # type: ignore[override]
        from .julia import _eig_topk as J

        L, V = ctx.saved_tensors
        c = ctx.c
        if gL is None and gV is None:
            return (None,) * 6
        gL = None if gL is None else gL.to(L.dtype)
        gV = None if gV is None else gV.to(V.dtype)
        gA, N_in = J.eig_topk_pullback(
            ctx.A, ctx.handles, gL, gV, ctx.cluster_tol, c.backward_tol,
            c.backward_krylovdim, c.backward_maxiter,
        )  # fmt: skip
        _policy(L, V, gL, gV, N_in, _clusters(L, ctx.cluster_tol), ctx.cluster_tol, c)
        return gA, None, None, None, None, None


def _pushforward(L: Tensor, V: Tensor, dAV: Tensor, c: _Checked, cluster_tol: float):
    """Both backends' forward mode: the tangents ``(dL, dV)`` from ``dA V``,
    with the solve's certificate and the gauge policy where the tangent
    splits a cluster (as ``eig``'s forward mode)."""
    check_not_nested_forward_mode("eig_topk")
    with torch.no_grad():
        cluster = _clusters(L, cluster_tol)
        dL, dV, dP, solve, converged = eig_topk_pushforward(
            L, V, dAV, c.mm, cluster, c.backward_tol, c.backward_krylovdim,
            c.backward_maxiter,
        )  # fmt: skip
    if not converged:
        assert solve is not None
        warn(
            "eig_topk forward mode: the complement solve did not converge "
            f"(residual {float(solve.residual.max()):.3g} after "
            f"{solve.products} products): the tangent is approximate. "
            "Raise backward_maxiter / backward_krylovdim or choose k at a gap.",
            ConvergenceWarning,
        )
    if c.opts.gauge != "ignore":
        measured = split_measure(L, dP, torch.tensor(cluster_tol))
        allowed = max(eps34(V.dtype), 10 * c.tol) * max_abs(dP)
        if measured > allowed:
            apply_gauge_policy(split_message("eig_topk", measured, allowed), c.opts)
    return dL, dV


def _clusters(L: Tensor, cluster_tol: float) -> Tensor:
    """Which kept eigenvalues are one eigenvalue (``k' x k'`` booleans)."""
    return (L[:, None] - L[None, :]).abs() <= cluster_tol


def _policy(L, V, gL, gV, N_in, cluster, cluster_tol, c) -> None:
    """Both backends' backward, after the pullback: the gauge policy on the
    cotangent's part inside the clusters, and the cluster-weight check."""
    check_gauge("eig_topk", N_in, cluster, (V if gV is None else gV,), c.opts)
    if gL is not None:
        t = torch.full((1, 1), cluster_tol, dtype=L.real.dtype)
        check_weights("eig_topk", gL.to(L.dtype), L, t, c.opts)


class _Checked(NamedTuple):
    A: Callable[[Tensor], Tensor]  # complex block product, grad on
    mm: Callable[[Tensor], Tensor]  # the same, without forward mode's tangent
    iterate: Callable[[Tensor], Tensor]  # the forward's product: real for a real op
    AH: Callable[[Tensor], Tensor]
    n: int
    k: int
    which: str
    tol: float
    krylovdim: int
    maxiter: int
    blocksize: int
    cdtype: torch.dtype
    device: torch.device
    tie: float
    gen: torch.Generator
    atol: float | None
    opts: Options
    backward_tol: float
    backward_krylovdim: int
    backward_maxiter: int
    real: bool
    julia: bool

    def cluster_tol(self, scale: float) -> float:
        return self.atol if self.atol is not None else self.tie * scale


def _check(op, k, which, tol, krylovdim, maxiter, blocksize, degeneracy_atol,
           gauge, backward_tol, backward_krylovdim, backward_maxiter, generator,
           backend) -> _Checked:  # fmt: skip
    name = "eig_topk"
    dense = isinstance(op, Tensor)
    julia = _julia_backend(name, op, backend)
    if julia:
        for given, what in ((blocksize, "blocksize"), (generator, "generator")):
            if given is not None:
                raise InputError(
                    f"{name}: {what}= is the native backend's (block Krylov-Schur); "
                    "backend='julia' runs KrylovKit's Arnoldi from one fixed start "
                    f"vector (dense eigen up to 64 rows): drop {what}= or use "
                    "backend='torch'"
                )
    if dense:
        check_matrix(name, op, square=True)
        shape, dtype, device = tuple(op.shape), op.dtype, op.device
    else:
        _check_operator(name, op, need_rmatmul=False)
        shape, dtype, device = tuple(int(s) for s in op.shape), op.dtype, op.device
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(
            f"{name}: op must be one square matrix (n, n), got shape {shape} "
            "(batched operators: loop over the batch)"
        )
    n = shape[0]
    kk = _as_integer(k)
    if kk is None or not 1 <= kk <= n:
        raise InputError(f"{name}: k must be an integer in 1..{n}, got {k!r}")
    if which not in KS.WHICH:
        raise InputError(f"{name}: which must be one of {KS.WHICH}, got {which!r}")
    cdtype = torch.complex64 if dtype in (torch.float32, torch.complex64) else (
        torch.complex128)  # fmt: skip
    tol_ = _tolerance(name, "tol", tol, eps34(cdtype))
    bs = 1 if kk == 1 else 2
    if blocksize is not None:
        bs = _positive(name, "blocksize", blocksize)
    kd = max(30, 2 * kk + 2 * bs)
    if krylovdim is not None:
        kd = _positive(name, "krylovdim", krylovdim)
        if kd < kk + bs:
            raise InputError(
                f"{name}: krylovdim must be at least k + blocksize = {kk + bs}, "
                f"got {krylovdim}"
            )
    opts = options(degeneracy_atol, None, gauge, None, op=name)
    real = not dtype.is_complex
    if dense:
        matmul = lambda X: op @ X  # noqa: E731
        rmatmul = lambda Y: op.mH @ Y  # noqa: E731
    else:
        matmul = _checked(f"{name}: op.matmul", op.matmul, (n, 1), dtype)
        given = getattr(op, "rmatmul", None)
        rmatmul = (
            _checked(f"{name}: op.rmatmul", given, (n, 1), dtype)
            if callable(given)
            else _vjp_adjoint(matmul, shape, dtype, device)
        )

    def complex_product(f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        # a real operator on a complex block: its real and imaginary parts
        def g(X: Tensor) -> Tensor:
            if real:
                return KS.complex_product(lambda Y: f(Y.to(dtype)), X)
            return f(X.to(dtype))

        return g

    A, AH = complex_product(matmul), complex_product(rmatmul)
    gen = generator
    if gen is None:
        gen = torch.Generator().manual_seed(0)
    elif not isinstance(gen, torch.Generator):
        raise InputError(f"{name}: generator must be a torch.Generator or None")
    btol = _tolerance(name, "backward_tol", backward_tol, tol_)
    # the forward's product, on blocks of op's dtype (real for a real op); its
    # blocks are column-major views of the basis, which an operator's own
    # matmul gets contiguous (it may reshape them with view)
    iterate = _primal(matmul if dense else lambda X: matmul(X.contiguous()))
    return _Checked(
        A, _primal(A), iterate, AH, n, kk, which, tol_, kd,
        _positive(name, "maxiter", maxiter), bs, cdtype, torch.device(device),
        max(eps34(cdtype), 100 * tol_), gen, opts.degeneracy_atol, opts, btol,
        _positive(name, "backward_krylovdim", backward_krylovdim),
        _positive(name, "backward_maxiter", backward_maxiter), real, julia,
    )  # fmt: skip


class _EigTopK(torch.autograd.Function):
    """``(L, V)`` as a function of ``Z = A V``: the backward's ``Z̄ = U``;
    forward mode's tangent of ``Z`` is ``dA V``."""

    @staticmethod
    def forward(Z, L, V, c, cluster_tol):  # type: ignore[override]
        return L.clone(), V.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        _, L, V, ctx.c, ctx.cluster_tol = inputs
        ctx.save_for_backward(L, V)
        ctx.save_for_forward(L, V)
        ctx.set_materialize_grads(False)

    @staticmethod
    def jvp(ctx: Any, dZ: Tensor | None, *_: Any) -> tuple:
        L, V = ctx.saved_tensors
        if dZ is None:
            return torch.zeros_like(L), torch.zeros_like(V)
        return _pushforward(L, V, dZ.to(V.dtype), ctx.c, ctx.cluster_tol)

    @staticmethod
    def backward(ctx: Any, gL: Tensor | None, gV: Tensor | None):  # type: ignore[override]
        L, V = ctx.saved_tensors
        c = ctx.c
        if gL is None and gV is None:
            return (None,) * 5
        with torch.no_grad():
            cluster = _clusters(L, ctx.cluster_tol)
            U, N_in, solve, converged = eig_topk_pullback(
                L, V, None if gL is None else gL.to(L.dtype),
                None if gV is None else gV.to(V.dtype), c.AH, cluster,
                c.backward_tol, c.backward_krylovdim, c.backward_maxiter,
            )  # fmt: skip
            _policy(L, V, gL, gV, N_in, cluster, ctx.cluster_tol, c)
        if not converged:
            assert solve is not None
            warn(
                "eig_topk backward: the complement solve did not converge "
                f"(residual {float(solve.residual.max()):.3g} after "
                f"{solve.products} products): the kept eigenvalues are close "
                "to the rest of the spectrum; the gradient is approximate. "
                "Raise backward_maxiter / backward_krylovdim or choose k at "
                "a gap.",
                ConvergenceWarning,
            )
        return U, None, None, None, None
