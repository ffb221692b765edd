"""``fixed_point``: the fixed point of an iteration, its gradient by implicit
differentiation (``pullbacks/fixed_point.py``): memory and cost independent
of the number of forward iterations.

How the gradient reaches the step's tensors: the forward iterates under
``no_grad``, then evaluates the (gauge-fixed) step once more at ``x*`` with
autograd on, ``out = F(x*)`` (``x*`` a detached leaf). The autograd Function
takes ``out`` as its input and returns ``x*``; its backward solves
``(1 - J^H) y = x̄`` with ``J^H v`` the vjp of ``out`` w.r.t. the leaf
(the graph kept), and returns ``y`` as ``out``'s gradient, which autograd
carries through the step into whatever tensors it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._validation import _as_integer
from ._warnings import warn
from .common.defaults import eps34
from .exceptions import (
    ConvergenceWarning,
    DerivativeError,
    GaugeError,
    InputError,
    InputTypeError,
    NonFiniteError,
)
from .pullbacks.fixed_point import fixed_point_pullback

__all__ = ["fixed_point", "FixedPointInfo"]

State = Tensor | tuple[Tensor, ...]


class FixedPointInfo(NamedTuple):
    """How :func:`fixed_point` converged: the iterations, the last change
    ``||x_{k+1} - x_k|| / ||x_k||`` and whether it is within ``tol``.

    Example::

        >>> x, info = fixed_point(torch.cos, torch.zeros((), dtype=torch.float64),
        ...                       return_info=True)
        >>> info.converged, info.iterations > 10
        (True, True)
    """

    iterations: int
    change: float
    converged: bool


def fixed_point(
    step: Callable[..., Any],
    x0: State,
    *,
    tol: float | None = None,
    maxiter: int = 1000,
    gauge_fix: Callable[[State, State], Callable[[State], State]] | None = None,
    backward_tol: float | None = None,
    backward_krylovdim: int = 30,
    backward_maxiter: int = 20,
    return_info: bool = False,
) -> State | tuple[State, FixedPointInfo]:
    r"""fixed_point(step, x0, *, tol=None, maxiter=1000, gauge_fix=None) -> x*

    The fixed point ``x* = F(x*)`` of ``F = fix ∘ step``, found by iterating
    ``x_{k+1} = F(x_k)`` from ``x0`` under ``no_grad``, with the gradient by
    implicit differentiation: for the cotangent ``x̄``, solve

    .. math::
        (1 - J^{H})\, y = \bar x, \qquad J = \partial F / \partial x \,|_{x^*}

    by GMRES in real arithmetic (one vjp of ``F`` per step), then one vjp of
    ``F`` carries ``y`` into every tensor ``step`` uses. Memory: one graph of
    ``F`` at ``x*``, whatever the number of iterations.

    ``x0``: a tensor or a tuple of tensors (a CTMRG corner and edge);
    ``step`` maps such a state to one of the same shapes and dtypes.
    ``tol``: converged when ``||x_{k+1} - x_k|| <= tol ||x_k||`` (norms over
    all entries; default ``eps**(3/4)`` of the dtype); otherwise a
    ``ConvergenceWarning`` after ``maxiter`` steps.

    ``gauge_fix(new, ref) -> fix``: where the step is a fixed point only up
    to a gauge (signs or phases of eigenvectors, a unitary on a bond), a
    function that, from the step's output ``new`` and the current state
    ``ref``, returns the transformation ``fix`` (a function of a state)
    aligning ``new`` with ``ref``; the iteration takes ``fix(new)``. At
    convergence ``fix`` is computed once from ``(step(x*), x*)`` and *frozen*:
    the implicit function is ``F(x) = fix*(step(x))``, with the gauge data
    held constant (PEPSKit's and Francuz et al.'s element-wise fixed point).

    Never silent: ``GaugeError`` where the (gauge-fixed) step does not
    reproduce ``x*`` to ``10 tol`` (an unfixed gauge: pass or correct
    ``gauge_fix``); ``DerivativeError`` in the backward where the solve
    does not converge within ``backward_tol`` (default ``tol``) in
    ``backward_maxiter`` GMRES cycles of ``backward_krylovdim``, or finds
    ``||y|| > ||x̄|| / sqrt(eps)`` (singular to working precision): ``J`` has
    an eigenvalue at or near 1 (a residual gauge freedom, or a fixed point
    that is not a differentiable function of the tensors). First order.

    Raises:
        InputTypeError: ``step`` or ``gauge_fix`` (or the ``fix`` it returns)
            is not callable, ``x0`` is not a tensor or a tuple of floating or
            complex tensors.
        InputError: ``step`` returns a state of other shapes or dtypes; a
            bad ``tol`` or ``maxiter``.
        NonFiniteError: NaN or Inf in ``x0`` or in a step's output.
        GaugeError: the (gauge-fixed) step does not reproduce ``x*``.
        DerivativeError: (backward) ``(1 - J^H) y = x̄`` has no solution to
            ``backward_tol``.

    Example::

        >>> a = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        >>> x0 = torch.zeros((), dtype=torch.float64)
        >>> x = fixed_point(lambda x: torch.cos(a * x), x0)
        >>> bool(torch.isclose(x, torch.cos(a * x)))
        True
        >>> (g,) = torch.autograd.grad(x, a)  # -x sin(ax) / (1 + a sin(ax))
        >>> s = torch.sin(a * x)
        >>> bool(torch.isclose(g, -x * s / (1 + a * s)))
        True
    """
    single = isinstance(x0, Tensor)
    x = _state("x0", x0)
    tol_ = _tolerance("tol", tol, eps34(x[0].dtype))
    btol = _tolerance("backward_tol", backward_tol, tol_)
    maxiter = _positive("maxiter", maxiter)
    kdim = _positive("backward_krylovdim", backward_krylovdim)
    bmax = _positive("backward_maxiter", backward_maxiter)
    if gauge_fix is not None and not callable(gauge_fix):
        raise InputTypeError(
            f"fixed_point: gauge_fix must be a callable (new, ref) -> fix, got "
            f"{type(gauge_fix).__name__}"
        )
    if not callable(step):
        raise InputTypeError(
            f"fixed_point: step must be a callable, got {type(step).__name__}"
        )

    def call(f: Callable, s: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        return _output(f(s[0] if single else s), x)

    with torch.no_grad():
        x = tuple(t.detach() for t in x)
        change, k = float("inf"), 0
        for step_count in range(1, maxiter + 1):
            k = step_count
            new = call(step, x)
            if gauge_fix is not None:
                new = call(_fix(gauge_fix, new, x, single), new)
            change = _norm(_sub(new, x)) / max(
                _norm(x), torch.finfo(torch.float64).tiny
            )
            x = new
            if change <= tol_:
                break
        converged = change <= tol_
        if not converged:
            warn(
                f"fixed_point: not converged after {maxiter} iterations: relative "
                f"change {change:.3g} > tol {tol_:.3g}. Raise maxiter or tol, or "
                "give gauge_fix where the step is a fixed point only up to a gauge; "
                "the gradient is that of the state reached.",
                ConvergenceWarning,
            )
        fix = _fix(gauge_fix, call(step, x), x, single) if gauge_fix else None

    def F(s: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        out = call(step, s)
        return call(fix, out) if fix is not None else out

    info = FixedPointInfo(k, change, converged)
    # F at x*: the check that it reproduces x*, and whether the step's
    # tensors need a gradient (then F once more, from a leaf x*, for J^H)
    with torch.enable_grad() if torch.is_grad_enabled() else torch.no_grad():
        out = F(x)
    _check_reproduces(out, x, tol_, converged, gauge_fix is not None)
    if any(o.requires_grad for o in out):
        leaf = tuple(t.detach().requires_grad_() for t in x)
        with torch.enable_grad():
            out = F(leaf)
        x = _FixedPoint.apply((leaf, out, btol, kdim, bmax), *out)
    result = x[0] if single else tuple(x)
    return (result, info) if return_info else result


def _state(what: str, x: Any) -> tuple[Tensor, ...]:
    items = (x,) if isinstance(x, Tensor) else x
    if (
        not isinstance(items, Sequence)
        or not items
        or not all(isinstance(t, Tensor) for t in items)
    ):
        raise InputTypeError(
            f"fixed_point: {what} must be a tensor or a tuple of tensors, got "
            f"{type(x).__name__}"
        )
    for t in items:
        if not (t.dtype.is_floating_point or t.dtype.is_complex):
            raise InputTypeError(
                f"fixed_point: {what} must hold floating or complex tensors, "
                f"got {t.dtype}"
            )
        if not bool(torch.isfinite(t.detach()).all()):
            raise NonFiniteError(f"fixed_point: {what} contains NaN or Inf entries")
    return tuple(items)


def _output(y: Any, like: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    out = (y,) if isinstance(y, Tensor) else y
    ok = (
        isinstance(out, Sequence)
        and len(out) == len(like)
        and all(
            isinstance(o, Tensor) and o.shape == t.shape and o.dtype == t.dtype
            for o, t in zip(out, like, strict=False)
        )
    )
    if not ok:
        want = [(tuple(t.shape), t.dtype) for t in like]
        got = (
            [(tuple(o.shape), o.dtype) for o in out if isinstance(o, Tensor)]
            if isinstance(out, Sequence)
            else type(y).__name__
        )
        raise InputError(
            f"fixed_point: step (and gauge_fix's fix) must return a state of the "
            f"shapes and dtypes of x0, {want}, got {got}"
        )
    if not all(bool(torch.isfinite(o.detach()).all()) for o in out):
        raise NonFiniteError(
            "fixed_point: the step returned NaN or Inf entries; check its tensors "
            "or normalise the state inside the step"
        )
    return tuple(out)


def _fix(gauge_fix, new, ref, single) -> Callable:
    fix = gauge_fix(new[0], ref[0]) if single else gauge_fix(new, ref)
    if not callable(fix):
        raise InputTypeError(
            "fixed_point: gauge_fix(new, ref) must return the gauge "
            f"transformation as a callable state -> state, got {type(fix).__name__}"
        )
    return fix


def _sub(a, b):
    return tuple(u - v for u, v in zip(a, b, strict=True))


def _norm(s: tuple[Tensor, ...]) -> float:
    return float(sum(torch.linalg.vector_norm(t.detach()) ** 2 for t in s)) ** 0.5


def _check_reproduces(out, x, tol: float, converged: bool, gauged: bool) -> None:
    """The implicit function theorem needs ``F(x*) = x*``; a converged
    iteration whose frozen step does not reproduce its state has a gauge
    that is not fixed."""
    if not converged:
        return  # warned already; its gradient is that of the state reached
    err = _norm(_sub(out, x)) / max(_norm(x), torch.finfo(torch.float64).tiny)
    if err > 10 * tol:
        remedy = (
            "the gauge transformation gauge_fix returns does not align step(x*) "
            "with x*; correct it"
            if gauged
            else "the step is a fixed point only up to a gauge (signs or phases "
            "of eigenvectors); pass gauge_fix"
        )
        raise GaugeError(
            f"fixed_point: the step does not reproduce its fixed point: "
            f"||F(x*) - x*|| / ||x*|| = {err:.3g} > 10 tol = {10 * tol:.3g}; "
            f"{remedy}"
        )


def _positive(what: str, value: Any) -> int:
    n = _as_integer(value)
    if n is None or n < 1:
        raise InputError(f"fixed_point: {what} must be an integer >= 1, got {value!r}")
    return n


def _tolerance(what: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0 < value < float("inf"))
    ):
        raise InputError(
            f"fixed_point: {what} must be a finite number > 0, got {value!r}"
        )
    return float(value)


def _flat(ts: Sequence[Tensor]) -> Tensor:
    """A state as one real vector (complex entries as pairs)."""
    return torch.cat(
        [
            (torch.view_as_real(t.resolve_conj()) if t.is_complex() else t).reshape(-1)
            for t in ts
        ]
    )


def _unflat(v: Tensor, like: Sequence[Tensor]) -> tuple[Tensor, ...]:
    out, i = [], 0
    for t in like:
        n = t.numel() * (2 if t.is_complex() else 1)
        piece = v[i : i + n]
        i += n
        if t.is_complex():
            piece = torch.view_as_complex(piece.reshape(*t.shape, 2).contiguous())
        out.append(piece.reshape(t.shape).to(t.dtype))
    return tuple(out)


class _FixedPoint(torch.autograd.Function):
    """``x*`` as a function of ``out = F(x*)`` (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, config, *out: Tensor):  # type: ignore[override]
        ctx.config = config
        leaf = config[0]
        return tuple(t.detach().clone() for t in leaf)

    @staticmethod
    def backward(ctx: Any, *xbar: Tensor):  # type: ignore[override]
        leaf, out, btol, kdim, bmax = ctx.config
        grads = [
            g if g is not None else torch.zeros_like(t)
            for g, t in zip(xbar, leaf, strict=True)
        ]
        b = _flat(grads)
        real = b.dtype

        def vjp(v: Tensor) -> Tensor:
            vs = _unflat(v, leaf)
            with torch.enable_grad():
                gs = torch.autograd.grad(
                    out, leaf, vs, retain_graph=True, allow_unused=True
                )
            gs = [
                g if g is not None else torch.zeros_like(t)
                for g, t in zip(gs, leaf, strict=True)
            ]
            return _flat(gs).to(real)

        solve = fixed_point_pullback(vjp, b, btol, kdim, bmax)
        scale = float(torch.linalg.vector_norm(b))
        res = float(solve.residual)
        if res > btol * scale:
            raise DerivativeError(
                f"fixed_point: the implicit gradient's solve (1 - J^H) y = x̄ did not "
                f"converge: relative residual {res / max(scale, 1e-300):.3g} > "
                f"backward_tol {btol:.3g} after {solve.products} vjps. The step's "
                "Jacobian at x* has an eigenvalue at or near 1: a gauge freedom "
                "the step does not fix (pass gauge_fix), or a fixed point that is "
                "not a differentiable function of the step's tensors. Raise "
                "backward_maxiter if the iteration converges slowly."
            )
        # A Jacobian eigenvalue 1 up to rounding leaves the system consistent to
        # working precision: GMRES then converges to a huge y along it.
        growth = float(torch.linalg.vector_norm(solve.x)) / max(scale, 1e-300)
        if growth > torch.finfo(real).eps ** -0.5:
            raise DerivativeError(
                f"fixed_point: the implicit gradient's solve (1 - J^H) y = x̄ is "
                f"singular to working precision: ||y|| / ||x̄|| = {growth:.3g}. The "
                "step's Jacobian at x* has an eigenvalue at 1: a gauge freedom the "
                "step does not fix (pass gauge_fix), or a loss that depends on that "
                "gauge."
            )
        return (None, *_unflat(solve.x, leaf))
