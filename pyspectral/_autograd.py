"""Autograd plumbing shared by the operations: calling a ``Function`` cheaply,
when a pullback may work in place, the derivative-order limits (third
derivatives, forward over forward) and ``LinearInA``, the first-order map of a
spectral function as an operation whose own derivative is the exact
second-order formula.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import is_functorch_wrapped_tensor

from .exceptions import DerivativeError

# torch.compiler.is_compiling is in torch >= 2.3; before it, assume not compiling
_is_compiling: Callable[[], bool] = getattr(
    getattr(torch, "compiler", None), "is_compiling", lambda: False
)


def apply(function: type[torch.autograd.Function], *args: Any) -> Any:
    """``function.apply(*args)`` without its per-call cost in Python.

    For a Function with ``setup_context``, ``Function.apply`` binds the
    arguments to ``forward``'s signature with ``inspect`` on every call (about
    25 us, a few percent of a 64x64 SVD's forward and backward), for the sake
    of default arguments, which pyspectral's Functions do not have (``args``:
    all of them, positional).
    Outside torch.func transforms and torch.compile, and with no tensor left
    over from a finished transform, ``Function.apply`` then only calls the
    C++ ``apply``, which this calls directly; elsewhere it is
    ``function.apply`` itself.
    """
    if torch._C._are_functorch_transforms_active() or _is_compiling():
        return function.apply(*args)
    for a in args:
        if isinstance(a, torch.Tensor) and is_functorch_wrapped_tensor(a):
            return function.apply(*args)
    return super(torch.autograd.Function, function).apply(*args)  # type: ignore[misc]


def in_layout_of(t: torch.Tensor, primal: torch.Tensor) -> torch.Tensor:
    """The tangent ``t`` (differentiably) laid out as its ``primal``, strides
    and conjugate bit: forward AD requires it where the primal is a view, as a
    decomposition's factors often are (LAPACK's and cuSOLVER's column-major
    results, cuSOLVER's ``V^H`` as a lazy conjugate, Julia's arrays), and a
    pushforward computes in C order (``V @ X``)."""
    conj = primal.is_conj()
    if t.stride() == primal.stride() and t.is_conj() == conj and not t.is_neg():
        return t
    # new_empty_strided: batched like t under vmap (jacfwd), on its device
    out = t.new_empty_strided(primal.shape, primal.stride())
    return out.copy_(t.conj()).conj() if conj else out.copy_(t)


def forward_tangent(A: torch.Tensor) -> torch.Tensor | None:
    """The forward-mode tangent of ``A`` at the innermost level where one is
    visible (a dual tensor, ``torch.func.jvp`` / ``jacfwd``, also under
    ``jacrev`` of those), else None (no forward mode; forward over reverse,
    whose reverse level hides it). A decomposition that sees it returns the
    basis inside a degenerate cluster that the tangent follows."""
    return fwAD.unpack_dual(A).tangent


def plain(*tensors: torch.Tensor | None) -> bool:
    """Whether a pullback runs plainly: no torch.func transform is active and
    autograd records nothing of it (grad mode off, as in a first-order
    backward, or no input requiring grad). Its results may then be computed in
    place and by the shortcuts that are exact but not differentiable."""
    if torch._C._are_functorch_transforms_active():
        return False
    return not torch.is_grad_enabled() or not any(
        t is not None and t.requires_grad for t in tensors
    )


class _NoThirdDerivative(torch.autograd.Function):
    """Identity on a second-order gradient ``g`` (made to depend on ``A``);
    differentiating it raises."""

    generate_vmap_rule = True

    @staticmethod
    def forward(g: torch.Tensor, A: torch.Tensor, op: str) -> torch.Tensor:
        return g.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.op = inputs[2]

    @staticmethod
    def backward(ctx: Any, *_: torch.Tensor) -> tuple:
        raise DerivativeError(_third(ctx.op))

    @staticmethod
    def jvp(ctx: Any, *_: Any) -> torch.Tensor:
        raise DerivativeError(_third(ctx.op))


def _third(op: str) -> str:
    return (
        f"{op}: third and higher derivatives are not implemented (first and "
        "second derivatives are exact); differentiate at most twice"
    )


def check_not_nested_forward_mode(op: str) -> None:
    """Raise ``DerivativeError`` inside a forward-mode transform nested in
    another (``jacfwd(jacfwd(...))``, ``jvp`` of ``jvp``): torch hands a
    custom Function's forward rule its saved outputs without the outer
    level's tangent, so the tangent of the tangent would be silently wrong."""
    try:
        from torch._C._functorch import TransformType
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
    except ImportError:  # a torch without functorch's interpreter stack
        return
    stack = retrieve_all_functorch_interpreters()
    if sum(i.key() == TransformType.Jvp for i in stack) >= 2:
        raise DerivativeError(
            f"{op}: forward mode over forward mode (jacfwd of jacfwd, jvp of "
            "jvp) is not supported through the factors; use torch.func.hessian "
            "(forward over reverse), jacrev(jacfwd(...)) or double backward, or "
            "svd_function / matrix_function, which support every composition"
        )


def no_third_derivative(
    op: str, A: torch.Tensor, *grads: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    """``grads`` as they are, except that under ``create_graph`` (grad mode on
    in a backward) differentiating them (w.r.t. ``A``, or anything) raises
    ``DerivativeError``: they are second derivatives computed by a formula
    whose own derivative would miss terms."""
    if not torch.is_grad_enabled():
        return grads
    return tuple(
        None if g is None else _NoThirdDerivative.apply(g, A, op) for g in grads
    )


@dataclass(frozen=True)
class SpectralMaps:
    """The first-order maps of a spectral function ``Y(A)`` at ``A``, given
    the tensors ``T`` of its decomposition: ``pullback(T, gY)`` (``gA``) and
    ``pushforward(T, dA)`` (``dY``), the transpose of each other, and their
    derivatives w.r.t. ``A`` along ``D`` (second-order formulas, exact at
    every spectrum): ``second(T, gY, D)`` of the pullback, and
    ``pushforward_second(T, dA, D)`` of the pushforward. ``name``: the
    operation, for the third-derivative error."""

    name: str
    pullback: Callable[..., torch.Tensor]
    pushforward: Callable[..., torch.Tensor]
    second: Callable[..., torch.Tensor]
    pushforward_second: Callable[..., torch.Tensor]


class LinearInA(torch.autograd.Function):
    """``maps.pullback(T, X)`` (``is_pullback``) or ``maps.pushforward(T, X)``
    as an operation of ``(A, X)``, ``T`` the decomposition of ``A`` (constants:
    everything ``A`` does enters through the second-order maps). Linear in
    ``X``, so its derivative w.r.t. ``X`` is the other first-order map. W.r.t.
    ``A``, along ``D``, it is ``maps.second(T, X, D)`` or
    ``maps.pushforward_second(T, X, D)``; the gradient is ``second(T, X, R)``
    for the pullback and, for the pushforward, whose ``<R, dY>`` is
    ``<pullback(T, R), X>``, ``second(T, R, X)``. The pullback of a spectral
    function under ``create_graph``, and its pushforward under forward mode,
    are these operations, so that every composition of derivatives is exact
    to second order; third derivatives raise ``DerivativeError``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        A: torch.Tensor,
        X: torch.Tensor,
        maps: SpectralMaps,
        is_pullback: bool,
        *T: torch.Tensor,
    ) -> torch.Tensor:
        return (maps.pullback if is_pullback else maps.pushforward)(T, X)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        # A (an input: no reference cycle) only for no_third_derivative; among
        # the saved tensors it breaks the generated vmap rule of jacrev(jacrev).
        ctx.A, X, ctx.maps, ctx.is_pullback, *T = inputs
        ctx.save_for_backward(X, *T)
        ctx.save_for_forward(X, *T)

    @staticmethod
    def backward(ctx: Any, R: torch.Tensor) -> tuple:
        X, *T = ctx.saved_tensors
        maps, is_pullback = ctx.maps, ctx.is_pullback
        gA = gX = None
        if ctx.needs_input_grad[0]:
            gA = maps.second(T, X, R) if is_pullback else maps.second(T, R, X)
        if ctx.needs_input_grad[1]:
            gX = (maps.pushforward if is_pullback else maps.pullback)(T, R)
        gA, gX = no_third_derivative(maps.name, ctx.A, gA, gX)
        return (gA, gX, None, None, *(None for _ in T))

    @staticmethod
    def jvp(
        ctx: Any, tA: torch.Tensor | None, tX: torch.Tensor | None, *_: Any
    ) -> torch.Tensor:
        X, *T = ctx.saved_tensors
        maps, is_pullback = ctx.maps, ctx.is_pullback
        linear = maps.pullback if is_pullback else maps.pushforward
        out = linear(T, torch.zeros_like(X) if tX is None else tX)
        if tA is not None:
            second = maps.second if is_pullback else maps.pushforward_second
            out = out + second(T, X, tA)
        return out


# ------------------------------------------------- reverse over forward
#
# Differentiating a tangent of svd / eigh (jacrev or grad of a jvp's output) at a
# degenerate cluster differentiates the pushforward, whose inverse gaps are cut
# inside the cluster: the result is d/dA <R, J(A) dA> = Hess(phi)(A) dA for the
# loss phi = <R, (U, S, V)> whose cotangents R are those of the tangents, the
# quantity that forward over reverse computes for phi along dA. So the
# measure is the one of forward over reverse (_second_order): exact where phi's
# first-order middle matrix M commutes with every rotation inside each cluster
# that dA splits (scalar there, decoupled from the rest), else not exact and
# the gauge policy applies. (phi is linear in S: its S-cotangent does not move.)


class _TangentCheck:
    """The measure of one pushforward's tangents under reverse over forward:
    ``middle(grads)`` (the first-order middle matrix of the decomposition's
    pullback for the cotangents of its tangents, or None) against the cluster
    pairs ``split`` that the tangent splits."""

    def __init__(
        self, op: str, split: torch.Tensor, middle: Callable, opts: Any, ranks: tuple
    ):
        self.op, self.split, self.middle, self.opts = op, split, middle, opts
        self.ranks = ranks  # of the tangents, each matrix's (without batches)

    def __call__(self, grads: tuple) -> None:
        from ._second_order import _aligned, _coupling, _remedy
        from .common.defaults import eps, peek
        from .common.gauge import apply_gauge_policy

        if self.opts.gauge == "ignore":
            return
        with torch.no_grad():
            grads = tuple(
                None if g is None or g._is_zerotensor() else peek(g.detach())
                for g in grads
            )
            # plain, with a transform's batch dimensions (jacrev's basis) in
            # front, where some are: the same in every one
            given = [(g, r) for g, r in zip(grads, self.ranks) if g is not None]
            batch = torch.broadcast_shapes(*(g.shape[: g.dim() - r] for g, r in given))
            grads = tuple(
                None if g is None else g.expand(*batch, *g.shape[g.dim() - r :])
                for g, r in zip(grads, self.ranks)
            )
            M = self.middle(grads)
            if M is None:
                return
            P = peek(M)
            split = peek(self.split)
            zeros = torch.zeros(split.shape[:-1], dtype=torch.bool, device=P.device)
            pairs, zeros = _aligned(split, zeros, P.shape[:-2])
            coupling = _coupling(P, pairs, zeros)
            tol = self.opts.gauge_atol
            if tol is None:
                size = float(P.abs().max()) if P.numel() else 0.0
                tol = eps(P.dtype) ** 0.75 * size
        if coupling > tol:
            vectors = "singular vectors" if self.op == "svd" else "eigenvectors"
            apply_gauge_policy(
                f"{self.op}: reverse over forward (jacrev or grad of a jvp's "
                "tangent) at a degenerate spectrum: the tangent splits a degenerate "
                f"cluster, and the derivative of the tangents depends on the {vectors} "
                f"inside it (coupling measured {coupling:.3g} > {tol:.3g}); the exact "
                "derivative needs their rotation inside the cluster, which is not in "
                f"the cotangents: it is not exact. {_remedy(self.op)} "
                f"{_EVERY_COMPOSITION[self.op]}",
                self.opts,
            )


_EVERY_COMPOSITION = {
    "svd": "svd_function(A, f) is exact in every composition, reverse over "
    "forward included (svd_function(A, 'polar') for the polar factor U Vh, "
    "('pow', 1) for U diag(S) Vh).",
    "eigh": "matrix_function(A, f) is exact in every composition, reverse over "
    "forward included (V f(w) V^H).",
}


class _TangentGuard(torch.autograd.Function):
    """Identity on the tangents of a pushforward; its backward (reverse over
    forward) measures them (:class:`_TangentCheck`)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(check: _TangentCheck, *tangents: torch.Tensor) -> tuple:
        return tuple(t.clone() for t in tangents)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.check = inputs[0]

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
        ctx.check(grads)
        return (None, *grads)

    @staticmethod
    def jvp(ctx: Any, _: Any, *tangents: torch.Tensor) -> tuple:
        return tangents


def tangent_guard(
    op: str,
    tangents: tuple[torch.Tensor, ...],
    split: torch.Tensor,
    inputs: tuple[torch.Tensor, ...],
    middle: Callable[[tuple], torch.Tensor | None],
    opts: Any,
) -> tuple[torch.Tensor, ...]:
    """``tangents`` as they are, except where they may be differentiated
    (grad mode on and one of ``inputs`` or ``tangents`` recorded, or under a
    torch.func transform) and the
    tangent splits some degenerate cluster (``split``: the pairs): then
    through :class:`_TangentGuard`, whose backward applies the gauge policy
    where reverse over forward is not exact (comment above)."""
    if not torch.is_grad_enabled():
        return tangents
    # (under a torch.func transform, requires_grad does not show a grad level)
    if plain(*inputs, *tangents) and not any(t.requires_grad for t in inputs):
        return tangents
    from .common.defaults import peek

    if not bool(peek(split.detach()).any()):
        return tangents
    ranks = tuple(t.dim() for t in tangents)
    return _TangentGuard.apply(_TangentCheck(op, split, middle, opts, ranks), *tangents)
