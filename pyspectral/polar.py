"""The polar decomposition with both factors exact at repeated singular
values: ``polar``. ``W`` is ``U V^H`` (``svd_function(A, "polar")``, whose
pullback holds the divided differences); ``P`` is ``W^H A`` (``A W^H`` on
the left), made exactly Hermitian; ``pullbacks/polar.py`` composes their
rules, so one copy of the math serves both factors.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor

from . import _linalg
from ._route import Functions, compiled, decompose, on_julia
from ._settings import Options, options
from ._validation import check_choice, check_keywords, check_matrix
from .exceptions import DomainError
from .julia import _polar as jpolar
from .pullbacks.eigh import hermitian_part
from .pullbacks.polar import polar_pullback, polar_pushforward
from .svd import svd_function, zero_singular_value

__all__ = ["PolarResult", "polar"]

SIDES = ("right", "left")


class PolarResult(NamedTuple):
    """The result of :func:`polar`: ``W`` with orthonormal columns (rows, if
    ``m < n``), shape ``(*, m, n)``, and the Hermitian positive semidefinite
    ``P``: ``(*, n, n)`` with ``A = W P`` (``side="right"``) or ``(*, m, m)``
    with ``A = P W`` (``side="left"``).

    Example::

        >>> A = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64)
        >>> W, P = polar(A)
        >>> P
        tensor([[3., 0.],
                [0., 2.]], dtype=torch.float64)
    """

    W: Tensor
    P: Tensor


class _Polar(torch.autograd.Function):
    """``(W, P)`` from one SVD, with :func:`polar_pullback` as the first-order
    backward and :func:`polar_pushforward` as the forward rule; a derivative
    that will itself be differentiated runs the composite (:func:`_native`),
    whose second derivatives are svd_function's."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, side: str, opts: Options) -> tuple[Tensor, Tensor]:
        U, S, Vh = _linalg.svd(A, full_matrices=False)
        zero_singular_value(S, opts, "'polar' (f = 1, f(0) = 1)")
        W = U @ Vh
        P = hermitian_part(W.mH @ A if side == "right" else A @ W.mH)
        ctx.side, ctx.opts = side, opts
        ctx.save_for_backward(A, W, U, S, Vh)
        ctx.save_for_forward(A, W, U, S, Vh)
        ctx.set_materialize_grads(False)
        return W, P

    @staticmethod
    def backward(ctx: Any, gW: Tensor, gP: Tensor) -> tuple:
        A, W, U, S, Vh = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _composite_backward(ctx, A, gW, gP)
        return polar_pullback(W, U, S, Vh, gW, gP, ctx.side, ctx.opts), None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        A, W, U, S, Vh = ctx.saved_tensors
        if torch.is_grad_enabled() and (dA.requires_grad or A.requires_grad):
            return _composite_jvp(ctx, A, dA)
        return polar_pushforward(W, U, S, Vh, dA, ctx.side, ctx.opts)


class _PolarJulia(torch.autograd.Function):
    """``_Polar`` on the Julia backend (``src/pullbacks/polar.jl``)."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, side: str, opts: Options) -> tuple[Tensor, Tensor]:
        W, P, ctx.handles = jpolar.polar(
            A, side, opts
        )  # (Julia's DomainError: polar's)
        ctx.side, ctx.opts, ctx.shape_dtype = side, opts, (A.shape, A.dtype)
        ctx.save_for_backward(A)
        ctx.save_for_forward(A)
        ctx.set_materialize_grads(False)
        return W, P

    @staticmethod
    def backward(ctx: Any, gW: Tensor, gP: Tensor) -> tuple:
        if gW is None and gP is None:
            return None, None, None
        if torch.is_grad_enabled():
            return _composite_backward(ctx, ctx.saved_tensors[0], gW, gP)
        gA = jpolar.polar_pullback(
            ctx.shape_dtype, ctx.handles, gW, gP, ctx.side, ctx.opts
        )
        return gA, None, None

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> tuple:
        (A,) = ctx.saved_tensors
        if torch.is_grad_enabled() and (dA.requires_grad or A.requires_grad):
            return _composite_jvp(ctx, A, dA)
        return jpolar.polar_pushforward(ctx.handles, dA, ctx.side, ctx.opts)


def _composite_backward(ctx: Any, A: Tensor, gW: Any, gP: Any) -> tuple:
    """The backward under ``create_graph``: the composite's, differentiable."""
    if gW is None and gP is None:
        return None, None, None
    # (from the saved A itself, which the outer graph follows: a detached copy
    # would cut the second derivative off)
    with torch.enable_grad():
        W, P = _native(A, ctx.side, ctx.opts)
        outs = [(t, g) for t, g in ((W, gW), (P, gP)) if g is not None]
        (gA,) = torch.autograd.grad(
            [t for t, _ in outs], A, [g for _, g in outs], create_graph=True
        )
    return gA, None, None


def _composite_jvp(ctx: Any, A: Tensor, dA: Tensor) -> tuple:
    """The tangent when it will be differentiated: the composite's, as the
    transpose of its (linear) vector-Jacobian product, differentiable in
    ``A`` and ``dA`` (forward mode cannot nest inside the forward-mode call
    this serves)."""
    with torch.enable_grad():
        W, P = _native(A, ctx.side, ctx.opts)
        u = (
            torch.zeros_like(W, requires_grad=True),
            torch.zeros_like(P, requires_grad=True),
        )
        (g,) = torch.autograd.grad((W, P), A, u, create_graph=True)
        dW, dP = torch.autograd.grad(g, u, dA, create_graph=True)
    return dW, dP


_FUNCTIONS = Functions(_Polar, _PolarJulia)


def polar(
    A: Tensor,
    side: str = "right",
    *,
    backend: str = "auto",
    degeneracy_atol: float | None = None,
    gauge: str | None = None,
) -> PolarResult:
    r"""polar(A, side="right", *, backend="auto", degeneracy_atol=None, ...) -> (W, P)

    Polar decomposition with both factors exact at repeated singular values.

    .. math::
        A = W P \quad (\text{side}=\text{"right"}), \qquad
        A = P W \quad (\text{side}=\text{"left"}), \qquad W = U V^{H}

    ``A`` has shape ``(*, m, n)`` where ``*`` is zero or more batch dimensions,
    any ``m``, ``n``, dtype float32, float64, complex64 or complex128. ``W =
    U V^H`` (``(*, m, n)``, orthonormal columns if ``m >= n``, rows if
    ``m < n``) is the unitary factor closest to ``A`` (orthogonal
    Procrustes); ``P`` is Hermitian positive semidefinite, ``(A^H A)^{1/2} =
    W^H A`` of shape ``(*, n, n)`` on the right, ``(A A^H)^{1/2} = A W^H`` of
    shape ``(*, m, m)`` on the left.

    .. warning:: Gradients of both factors are exact at every spectrum,
        repeated singular values included (first and second order, forward
        mode): ``W`` is ``svd_function(A, "polar")``, whose pullback uses
        divided differences, and ``P`` is built from it and ``A``.
        (``torch.linalg.svd``'s factors give 19-740 % errors or NaN there.)
        Where ``A`` has a (numerically) zero singular value (at most
        ``degeneracy_atol``, default ``max(S) eps**(3/4)``), ``W`` is not
        unique: :class:`DomainError`, as ``svd_function(A, "polar")`` raises.
        ``gauge`` applies to nothing here but is accepted for symmetry.

    ``backend="julia"`` runs Julia's ``PySpectral.polar`` and its rule (CPU
    tensors, see docs/guide/julia.md).

    Returns:
        ``(W, P)``, a named tuple (:class:`PolarResult`).

    Raises:
        InputTypeError: ``A`` is not a tensor, or ``side`` not a string.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: an unknown ``side`` or ``gauge``, a negative
            ``degeneracy_atol``.
        DomainError: ``A`` has a (numerically) zero singular value.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(5, 3, dtype=torch.float64, generator=g)
        >>> W, P = polar(A)
        >>> eye = torch.eye(3, dtype=A.dtype)
        >>> bool(torch.dist(W @ P, A) < 1e-12), bool(torch.dist(W.mT @ W, eye) < 1e-12)
        (True, True)
    """
    side = check_choice("polar", "side", side, SIDES)
    res = compiled(backend, True, _composite, A, side, degeneracy_atol, gauge)
    if res is not None:  # (svd_function's operator, checks in its kernel)
        return PolarResult(*res)
    check_matrix("polar", A)
    kw = check_keywords("polar", A, degeneracy_atol=degeneracy_atol)
    opts = options(kw["degeneracy_atol"], None, gauge, None, op="polar")
    if on_julia("polar", backend, A) or not _transformed(A):
        return PolarResult(*_domain("polar", lambda: decompose(
            "polar", _FUNCTIONS, A, backend, side, opts)))  # fmt: skip
    # torch.func follows the composite (svd_function has the rules it needs)
    return PolarResult(*_domain("polar", lambda: _native(A, side, opts)))


def _transformed(A: Tensor) -> bool:
    """Whether a torch.func transform follows ``A``."""
    return is_functorch_wrapped_tensor(A) or torch._C._are_functorch_transforms_active()


def _native(A: Tensor, side: str, opts: Options) -> tuple[Tensor, Tensor]:
    """``(W, P)`` on the native backend: differentiable operations."""
    return _composite(A, side, opts.degeneracy_atol, opts.gauge)


def _composite(
    A: Tensor, side: str, degeneracy_atol: float | None, gauge: str | None
) -> tuple[Tensor, Tensor]:
    """``W = svd_function(A, "polar")`` and ``P`` from it (also what
    torch.compile traces: svd_function's operator and two products)."""
    W = svd_function(A, "polar", degeneracy_atol=degeneracy_atol, gauge=gauge)
    P = W.mH @ A if side == "right" else A @ W.mH
    return W, hermitian_part(P)


def _domain(op: str, run: Any) -> Any:
    """``run()``, its zero-singular-value ``DomainError`` (svd_function's or
    Julia's polar's) said as ``op``'s, with advice for a polar factor."""
    try:
        return run()
    except DomainError as err:
        raise DomainError(zero_singular_value_message(op, str(err))) from err


def zero_singular_value_message(op: str, detail: str) -> str:
    """The text of ``op``'s ``DomainError`` at a (numerically) zero singular
    value; ``detail``: the error that found it (its value is quoted)."""
    python, julia = r"singular value (\d+) of A is (\S+?) ", r"S\[(\d+)\] = (\S+)"
    found = re.search(f"{python}|{julia}", detail)
    where = ""
    if found:
        i, v = (
            (found.group(1), found.group(2))
            if found.group(1)
            else (str(int(found.group(3)) - 1), found.group(4))
        )  # Julia counts from 1
        where = f" (singular value {i} is {float(v):.3g})"
    return (
        f"{op}: A has a (numerically) zero singular value{where}, at most "
        "degeneracy_atol, so the unitary factor W = U Vh is not unique there (the "
        "singular vectors of a zero value are arbitrary) and not differentiable. "
        "For the polar factor on A's range use svd_function(A, 'polar', rtol=r) "
        "with r above the zero values and below the others: the partial isometry "
        "W_r = U_r Vh_r of the kept singular values, unique and exact (the rank is "
        "constant nearby), with P = W_r^H A (side='right'; A W_r^H for 'left') = "
        "(A^H A)^(1/2); or a full-rank A (e.g. A + eps * I)."
    )
