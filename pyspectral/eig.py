"""The non-Hermitian eigendecomposition with gradients exact at repeated
eigenvalues of a diagonalizable matrix: ``eig`` and ``eigvals``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import _linalg, _ops
from ._autograd import check_not_nested_forward_mode, in_layout_of
from ._route import Functions, compiled, decompose, on_julia, with_out
from ._second_order import check_second_order_cotangent
from ._settings import Options, options
from ._validation import check_keywords, check_matrix
from ._values import differentiated
from .exceptions import InputError
from .julia import _eig as jeig
from .pullbacks.eig import eig_pullback, eig_pushforward

__all__ = ["EigResult", "eig", "eigvals"]


class EigResult(NamedTuple):
    """The result of :func:`eig`: ``A = V diag(eigenvalues) V^-1``,
    ``eigenvalues: (*, n)`` and ``eigenvectors: (*, n, n)`` (unit-norm
    columns), both complex, in LAPACK's order.

    Example::

        >>> A = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
        >>> L, V = eig(A)  # a rotation: eigenvalues +-i
        >>> sorted(L.imag.tolist())
        [-1.0, 1.0]
    """

    eigenvalues: Tensor
    eigenvectors: Tensor


class _Eig(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, opts: Options) -> tuple[Tensor, Tensor]:
        return tuple(_linalg.eig(A))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        A, ctx.opts = inputs
        ctx.real = not A.is_complex()
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gL: Tensor, gV: Tensor) -> tuple:
        L, V = ctx.saved_tensors
        gA = eig_pullback(L, V, gL, gV, ctx.opts)
        return (gA.real if ctx.real and gA is not None else gA), None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, _: Any) -> tuple:
        check_not_nested_forward_mode("eig")
        L, V = ctx.saved_tensors
        dL, dV = eig_pushforward(L, V, dA, ctx.opts)
        return in_layout_of(dL, L), in_layout_of(dV, V)


class _EigJulia(torch.autograd.Function):
    """``_Eig`` on the Julia backend (``src/pullbacks/eig.jl``); under
    ``create_graph`` and for a differentiable tangent the native formula,
    which is differentiable, runs on Julia's factors."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, opts: Options) -> tuple[Tensor, Tensor]:
        L, V, ctx.handles = jeig.eig(A)
        ctx.opts, ctx.real, ctx.shape_dtype = (
            opts,
            not A.is_complex(),
            (A.shape, A.dtype),
        )
        ctx.save_for_backward(L, V)
        ctx.save_for_forward(L, V)
        ctx.set_materialize_grads(False)
        return L, V

    @staticmethod
    def backward(ctx: Any, gL: Tensor, gV: Tensor) -> tuple:
        if torch.is_grad_enabled():
            return _Eig.backward(ctx, gL, gV)
        if gL is None and gV is None:
            return None, None
        second = check_second_order_cotangent(gL, (gV,), ctx.opts)
        gA = jeig.eig_pullback(
            ctx.shape_dtype, ctx.handles, gL, gV, ctx.opts, weights=not second
        )
        return gA, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, _: Any) -> tuple:
        L, V = ctx.saved_tensors
        if torch.is_grad_enabled() and (dA.requires_grad or V.requires_grad):
            return _Eig.jvp(ctx, dA, None)
        return jeig.eig_pushforward(ctx.handles, dA, ctx.opts)


_FUNCTIONS = Functions(_Eig, _EigJulia)


def eig(
    A: Tensor,
    *,
    backend: str = "auto",
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    out: tuple[Tensor, Tensor] | None = None,
    k: int | None = None,
    which: str = "LM",
) -> EigResult:
    r"""eig(A, *, backend="auto", ...) -> (eigenvalues, eigenvectors)

    Eigendecomposition of a square (non-Hermitian) matrix, with gradients
    exact at repeated eigenvalues.

    .. math::
        A = V \operatorname{diag}(\lambda) V^{-1}

    ``A`` has shape ``(*, n, n)`` where ``*`` is zero or more batch dimensions,
    dtype float32, float64, complex64 or complex128. Same results as
    ``torch.linalg.eig(A)``: complex eigenvalues ``(*, n)`` and eigenvectors
    ``(*, n, n)`` with unit-norm columns (complex64 for single precision,
    complex128 for double), in LAPACK's order; a real ``A`` has conjugate
    pairs, and its gradient is real. Each eigenvector is defined up to a
    phase, and the eigenvectors of a repeated eigenvalue up to any basis of
    its eigenspace: the forward returns LAPACK's choice, and the backward
    asks the loss not to depend on it.

    .. warning:: Gradients are exact at every diagonalizable ``A`` for losses
        that see the eigenvectors through complete clusters (spectral
        projectors ``V_c (V^{-1})_c``, eigenvectors the loss normalises
        itself) and the eigenvalues through symmetric functions of each
        cluster (sum, product, mean: ``torch.linalg.eig`` is 43-790 % off or
        NaN there). Eigenvalues closer than ``degeneracy_atol`` (default
        ``max|lambda| eps**(3/4)``) count as repeated; a loss that depends on
        a phase or a basis inside a cluster, or weights a cluster's
        eigenvalues unequally, triggers the ``gauge`` policy (``"warn"``: a
        :class:`GaugeWarning`, ``"raise"``, ``"ignore"``); for
        ``V f(Lambda) V^-1`` use :func:`eig_function`, exact at every
        spectrum. At a defective or numerically defective ``A`` no
        derivative can be trusted: the backward and forward mode raise
        :class:`DomainError` where the eigenvector condition number is
        ``>= eps**(-1/2)`` or a pair divided by is within rounding of
        coalescing (``2 |l_i - l_j| / (kappa_i + kappa_j) < eps**(3/4)
        max(max|l|, ||A||_F / sqrt(n))``, ``kappa_i`` the condition number
        of ``l_i``; accepted pairs are within ``eps**(1/4)`` of exact:
        docs/math.md). ``broadening=eta`` replaces ``1/x`` by
        ``conj(x) / (|x|^2 + eta^2)``.

    Forward mode, ``torch.func`` and second derivatives (exact away from
    clusters; at one a :class:`GaugeWarning`: in forward mode where the
    tangent splits the cluster, ``V^-1 dA V`` on it not a multiple of the
    identity) as for :func:`eigh`;
    ``backend="julia"`` runs the same formulas in Julia (CPU tensors).
    ``out=`` as in ``torch.linalg.eig`` (no autograd, native backend).
    ``k=`` (and ``which=``, default ``"LM"``): only the ``k`` eigenpairs
    first by ``which``, by :func:`eig_topk` on the matrix (a batch matrix
    by matrix; ``k`` extended over ties, see there).

    Returns:
        ``(eigenvalues, eigenvectors)``, a named tuple (:class:`EigResult`).

    Raises:
        InputTypeError: ``A`` is not a tensor.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: a keyword out of range, or ``out=`` with
            ``backend="julia"``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call.
        DomainError: in the backward or forward mode, at a (numerically)
            defective ``A``.
        GaugeError: in the backward or forward mode, under
            ``gauge="raise"``, as for :class:`GaugeWarning` above.

    Example::

        >>> A = torch.tensor([[2.0, 1.0], [0.0, 3.0]], dtype=torch.float64,
        ...                  requires_grad=True)
        >>> L, V = eig(A)
        >>> L.real.tolist()
        [2.0, 3.0]
        >>> L.real.sum().backward()  # the trace: its gradient is the identity
        >>> torch.allclose(A.grad, torch.eye(2, dtype=torch.float64))
        True
    """
    if k is not None:
        from .eig_topk import eig_topk

        if out is not None or broadening is not None or gauge_atol is not None:
            raise InputError(
                "eig: k= takes the eig_topk route, which has no out=, broadening "
                "or gauge_atol; drop them or call eig without k"
            )
        L, V = eig_topk(A, k, which=which, degeneracy_atol=degeneracy_atol,
                        gauge=gauge, backend=backend)  # fmt: skip
        return EigResult(L, V)
    numbers = (degeneracy_atol, broadening, gauge, gauge_atol)
    res = compiled(backend, out is None, _ops.call_eig, A, *numbers)
    if res is not None:
        return EigResult(*res)
    opts = _check("eig", A, degeneracy_atol, broadening, gauge, gauge_atol)
    res = with_out("eig", out, backend, A, lambda: _linalg.eig(A, out=out))
    if res is not None:
        return EigResult(*res)
    return EigResult(*decompose("eig", _FUNCTIONS, A, backend, opts))


def eigvals(A: Tensor, *, backend: str = "auto", out: Tensor | None = None) -> Tensor:
    r"""eigvals(A, *, backend="auto", out=None) -> Tensor

    Eigenvalues of a square matrix ``A`` (shape ``(*, n, n)``), complex, shape
    ``(*, n)``, in LAPACK's order, as ``torch.linalg.eigvals``. The gradient
    ``V^-H diag(g) V^H`` is exact for symmetric functions of each cluster of
    repeated eigenvalues of a diagonalizable ``A`` (a loss that weights a
    cluster unequally triggers the gauge policy, as in :func:`eig`); at a
    defective ``A`` the backward raises :class:`DomainError`. ``backend``
    and ``out`` as in :func:`eig`.

    Raises:
        InputTypeError: ``A`` is not a tensor.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: ``out=`` with ``backend="julia"``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call.
        DomainError: in the backward, at a (numerically) defective ``A``.
        GaugeError: in the backward, under ``gauge="raise"`` (set with
            :func:`defaults`), where a loss weights a cluster unequally.

    Example::

        >>> A = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
        >>> eigvals(A).real.tolist()  # a Jordan block: no gradient there
        [1.0, 1.0]
    """
    res = compiled(backend, out is None, _ops.call_eig, A, None, None, None, None)
    if res is not None:
        return res[0]
    opts = _check("eigvals", A, None, None, None, None)
    res = with_out("eigvals", out, backend, A, lambda: _linalg.eigvals(A, out=out))
    if res is not None:
        return res
    if not differentiated(A):  # the values alone: no eigenvectors
        return (
            jeig.eigvals(A) if on_julia("eigvals", backend, A) else _linalg.eigvals(A)
        )
    return decompose("eigvals", _FUNCTIONS, A, backend, opts)[0]


def _check(op: str, A: Any, degeneracy_atol: Any, broadening: Any, gauge: Any,
           gauge_atol: Any) -> Options:  # fmt: skip
    """The arguments of :func:`eig` / :func:`eigvals` checked, and the options."""
    check_matrix(op, A, square=True)
    kw = check_keywords(
        op, A, degeneracy_atol=degeneracy_atol, broadening=broadening,
        gauge_atol=gauge_atol,
    )  # fmt: skip
    return options(kw["degeneracy_atol"], kw["broadening"], gauge, kw["gauge_atol"],
                   op=op)  # fmt: skip
