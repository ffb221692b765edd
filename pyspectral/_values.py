"""A spectral function given by its values on the spectrum: ``Y = U f(S) V^H``
(``svd_function``) or ``V f(L) V^H`` (``matrix_function``) for a user's ``f``,
whose values may depend on tensors besides ``A`` (the coefficients of a
learned spectral filter, a temperature, a threshold).

``Y`` depends on such a tensor ``theta`` only through the values
``phi0 = f(s_i; theta)``: ``dL/dtheta = sum_i (d phi0_i / d theta) c_i`` with
``c = Re diag(U^H Gbar V)``. So ``f`` and ``f'`` are evaluated once, outside
every autograd Function, on the spectrum of ``A`` (detached), with autograd
and torch.func recording ``theta``, and the two value vectors
``phi = (phi0, phi1) = (f(S), f'(S))`` enter the Function as differentiable
inputs. Its first derivatives, ``L_phi`` the divided-difference map of the
spectral function with those values (its transpose ``L_phi^*``) and ``form(x)
= U diag(x) V^H``:

    dY = L_phi[dA] + form(dphi0),   gA = L_phi^*[Gbar],   gphi0 = c,   gphi1 = 0.

``phi1`` changes no value of ``Y`` but its ``A``-derivative; it must be an
input because the second derivatives pair ``A`` with ``theta`` through the
divided differences of ``rho = df/dtheta . v``, which need ``rho'`` where
spectral values meet. Second order, all exact at every spectrum:

- ``A, A``: the second-order map of ``f`` (``LinearInA``, ``f''`` values);
- ``theta, theta``: autograd through ``f`` (``c`` does not depend on theta);
- ``A, theta``: in reverse mode the pullback of ``(gphi0, gphi1)`` w.r.t.
  ``A`` receives the cotangents ``(r0, r1) = (rho(S), rho'(S))`` (autograd
  pulls ``v`` back through ``phi``), and is ``L_(r0, r1)^*[Gbar]``: the
  pullback of the spectral function with ``rho``'s values (``Diagonal``);
  the derivative of ``gA`` in ``phi`` is ``L_dphi^*[Gbar]``, and of ``dY``
  (forward mode) ``L_dphi[dA]``. There the values of ``rho`` are not at
  hand: these linear maps of ``dphi`` take the quotient or the derivative
  branch of each divided difference as they would for a cubic on the
  spectrum's scale (``_reference``), not as for ``f``, whose own choice
  says nothing about ``rho`` (a filter whose ``f`` is linear in ``s`` at the
  current ``theta`` takes the derivative average everywhere).

A user ``f`` is evaluated in Python on either backend (on Julia's, on the
spectrum Julia computed); Julia forms ``Y`` and the first-order pullback
from the values (``PySpectral.SpectralValues``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor

from ._autograd import LinearInA, SpectralMaps, apply, no_third_derivative
from ._fns import SpectralFn
from .exceptions import PySpectralError

__all__ = [
    "ValuesOp",
    "SpectralValues",
    "SpectralValuesJulia",
    "differentiated",
    "lazy",
    "second_values",
]


@dataclass(frozen=True, eq=False)
class ValuesOp:
    """One operation's pieces, ``T`` its decomposition (``(U, S, Vh)`` or
    ``(w, V)``): ``maps(fn)`` the first- and second-order maps of the spectral
    function ``fn`` (``SpectralMaps``), ``form(T, x) = U diag(x) V^H``,
    ``diagonal(T, G) = Re diag(U^H G V)`` (its transpose), ``second(S)`` the
    user's ``f''`` on the spectrum, for second derivatives in ``A`` where it
    was not evaluated with the values (see :func:`lazy`), ``spectrum`` the
    index of the spectrum in ``T`` and ``odd`` whether the maps use the odd
    extension of ``f`` (``svd_function``)."""

    name: str
    maps: Callable[[SpectralFn], SpectralMaps]
    form: Callable[[tuple, Tensor], Tensor]
    diagonal: Callable[[tuple, Tensor], Tensor]
    second: Callable[[Tensor], Tensor]
    spectrum: int
    odd: bool
    # the values depend on nothing that is differentiated (a named-like f):
    # their tangents and gradients are zero and not formed (torch.func's
    # forward over forward loses the outer tangent of a tangent that uses
    # the zero tangent it materialises for them)
    constant: bool = False


def lazy(S: Tensor) -> Tensor:
    """The ``h`` (``f''`` values) that stands for "``op.second(S)`` when
    needed": an empty tensor (a tensor, not None, for the vmap rule)."""
    return S.new_empty(0)


def second_values(op: ValuesOp, S: Tensor) -> Tensor:
    """The ``h`` for :class:`SpectralValues`: ``op.second(S)`` evaluated now
    where a torch.func transform is active (a user's ``f`` evaluated later,
    inside a Function's rule, would meet the transform's tensors outside
    their level), else :func:`lazy`. Where ``f''`` fails (a ``f_prime`` torch
    cannot differentiate) it is left lazy: the error belongs to a second
    derivative, if one is taken."""
    if torch._C._are_functorch_transforms_active():
        try:
            return op.second(S)
        except PySpectralError:
            pass
    return lazy(S)


def _fn(f: Tensor, d: Tensor, second: Callable[[Tensor], Tensor] | None) -> SpectralFn:
    """The spectral function with the values ``f`` and derivatives ``d`` (on
    the spectrum the maps are called with) and ``f''`` from ``second``."""
    return SpectralFn(
        "values",
        lambda S, o: (f, d),
        None if second is None else (lambda S, o: second(S)),
    )


def _of_values(op: ValuesOp) -> SpectralMaps:
    """``op``'s maps of the spectral function whose values ``(f, d, h)`` are
    the last three tensors of ``T``: ``LinearInA`` saves them with the
    decomposition, so that torch.func unwraps them with it (values closed
    over would escape their transform level in a nested forward mode).
    ``h``: ``f''`` on the spectrum, or ``lazy`` (``op.second``)."""

    def at(Tv: tuple) -> tuple[tuple, SpectralMaps]:
        *T, f, d, h = Tv
        S = T[op.spectrum]
        second = op.second if h.shape != S.shape else (lambda S: h)
        return tuple(T), op.maps(_fn(f, d, second))

    def pullback(Tv: tuple, X: Tensor) -> Tensor:
        T, maps = at(Tv)
        return maps.pullback(T, X)

    def pushforward(Tv: tuple, X: Tensor) -> Tensor:
        T, maps = at(Tv)
        return maps.pushforward(T, X)

    def second(Tv: tuple, X: Tensor, D: Tensor) -> Tensor:
        T, maps = at(Tv)
        return maps.second(T, X, D)

    def pushforward_second(Tv: tuple, X: Tensor, D: Tensor) -> Tensor:
        T, maps = at(Tv)
        return maps.pushforward_second(T, X, D)

    return SpectralMaps(op.name, pullback, pushforward, second, pushforward_second)


def differentiated(*tensors: Tensor) -> bool:
    """Whether autograd, forward AD or a torch.func transform follows any of
    ``tensors`` (values that do not are ``ValuesOp.constant``)."""
    return any(
        t.requires_grad
        or is_functorch_wrapped_tensor(t)
        or fwAD.unpack_dual(t).tangent is not None
        for t in tensors
    )


def _tracked(*tensors: Tensor | None) -> bool:
    """Whether autograd or a torch.func transform follows any of ``tensors``."""
    return any(
        t is not None and (t.requires_grad or is_functorch_wrapped_tensor(t))
        for t in tensors
    )


def _reference(S: Tensor, odd: bool) -> tuple[Tensor, Tensor]:
    """Values and derivatives of a cubic on the spectrum's scale ``sigma =
    max|S|``: the branch of each divided difference taken for it (quotient
    where ``|s_i - s_j|`` exceeds about ``eps**(1/3) sigma``, where the
    quotient's rounding and the average's Taylor error balance for a
    function that varies on that scale; the derivative average below) is
    the one taken for a variation of the values (module docstring). Odd for
    the singular values (``x (x^2 + 3)``, as the odd extension there), else
    positive and increasing on the spectrum (``(x + 2)^3``), ``x = S /
    sigma``."""
    S = S.detach()
    if S.shape[-1] == 0:
        return S, S
    sigma = S.abs().amax(-1, keepdim=True)
    sigma = torch.where(sigma > 0, sigma, torch.ones_like(sigma))
    x = S / sigma
    if odd:
        return x * (x * x + 3), (3 * x * x + 3) / sigma
    u = x + 2
    return u**3, 3 * u * u / sigma


def _variation(
    op: ValuesOp, T: tuple, f: Tensor, d: Tensor, linear: Callable[..., Tensor]
) -> Tensor:
    """``linear(maps)`` (a map linear in the values) as a zero-valued tensor
    whose derivative w.r.t. the values ``(f, d)`` is that map of their
    variation, the branches chosen by :func:`_reference`. A variation of an
    infinite ``f'`` (``sqrt`` at 0, whose gradient entries are then infinite)
    is dropped: those entries have no derivative."""
    f0, d0 = _reference(T[op.spectrum], op.odd)
    df = f - f.detach()
    dd = torch.where(torch.isfinite(d.detach()), d - d.detach(), 0.0)
    out = linear(op.maps(_fn(f0 + df, d0 + dd, None)))
    return out - out.detach()


def _values(f: Tensor, d: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return f.detach(), d.detach(), h.detach()


# ------------------------------------------------------- the derivatives


def pullback(
    op: ValuesOp,
    A: Tensor,
    V: tuple[Tensor, Tensor, Tensor],
    T: tuple,
    gY: Tensor,
    needs: tuple[bool, ...],
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """``(gA, gf, gd)`` for the cotangent ``gY`` (module docstring), ``V =
    (f, d, h)`` the values, as operations whose derivatives are exact under
    ``create_graph``."""
    f, d, h = V
    gA = gf = gd = None
    if not torch.is_grad_enabled():
        if needs[0]:
            gA = _of_values(op).pullback((*T, *_values(*V)), gY)
        if needs[1] or needs[2]:
            gf = op.diagonal(T, gY)
        return gA, gf, gd
    if needs[0]:
        gA = LinearInA.apply(A, gY, _of_values(op), True, *T, *_values(*V))
        if _tracked(f, d):
            G = gY.detach()
            gA = gA + _variation(op, T, f, d, lambda maps: maps.pullback(T, G))
    if needs[1] or needs[2]:
        gf, gd = Diagonal.apply(A, gY, op, f.detach(), *T)
    return gA, gf, gd


def pushforward(
    op: ValuesOp,
    A: Tensor,
    V: tuple[Tensor, Tensor, Tensor],
    T: tuple,
    dA: Tensor | None,
    df: Tensor | None,
    dd: Tensor | None,
) -> Tensor:
    """The tangent ``L_phi[dA] + form(dphi0)``, as one :class:`Tangent`
    (whose derivatives are exact). One Function's output, nothing added to
    it: in torch.func's forward over forward, an outer tangent passes only
    through a jvp rule's output that is itself a Function's."""
    f, d, h = V
    zero = torch.zeros_like(f)
    dA = torch.zeros_like(A) if dA is None else dA
    df = zero if df is None else df
    dd = zero if dd is None else dd
    return Tangent.apply(A, dA, f, d, h, df, dd, op, *T)


class SpectralValues(torch.autograd.Function):
    """``Y = form(T, f)``, the spectral function with the values ``f``,
    derivatives ``d`` and second derivatives ``h`` (or ``lazy``) on the
    spectrum of ``T``, the decomposition of ``A`` (computed by the caller; not
    differentiable inputs: everything ``A`` does enters through the maps).
    Differentiable in ``A``, ``f`` and ``d`` (module docstring); ``h`` enters
    only second derivatives in ``A``, as a constant."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        A: Tensor, f: Tensor, d: Tensor, h: Tensor, op: ValuesOp, *T: Tensor
    ) -> Tensor:
        return op.form(T, f)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        A, f, d, h, ctx.op, *T = inputs
        ctx.save_for_backward(A, f, d, h, *T)
        ctx.save_for_forward(A, f, d, h, *T)

    @staticmethod
    def backward(ctx: Any, gY: Tensor) -> tuple:
        A, f, d, h, *T = ctx.saved_tensors
        needs = ctx.needs_input_grad
        if ctx.op.constant:
            needs = (needs[0], False, False)
        grads = pullback(ctx.op, A, (f, d, h), T, gY, needs)
        return (*grads, None, None, *(None for _ in T))

    @staticmethod
    def jvp(ctx: Any, dA: Any, df: Any, dd: Any, *_: Any) -> Tensor:
        A, f, d, h, *T = ctx.saved_tensors
        if ctx.op.constant:
            df = dd = None
        return pushforward(ctx.op, A, (f, d, h), T, dA, df, dd)


class Tangent(torch.autograd.Function):
    """The tangent ``dY = L_phi[X] + form(T, psi0)`` of :class:`SpectralValues`
    along ``X = dA`` and the values' tangents ``psi = (psi0, psi1)``, as an
    operation of ``(A, X, phi, psi)`` (``phi = (f, d)``, ``h`` its ``f''``)
    with the exact derivatives (second derivatives of ``Y``; third ones
    raise): along ``tA``, ``L2_phi[X, tA] + L_psi[tA]`` (``psi`` the values
    and derivatives of the function along which the values move, so its own
    divided differences); along ``tX``, ``L_phi[tX]``; along ``tphi``,
    ``L_tphi[X]`` (branches of :func:`_reference`); along ``tpsi0``,
    ``form(T, tpsi0)`` (``psi1`` enters only the ``A``-derivative)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, X, f, d, h, df, dd, op, *T):  # noqa: ANN001, ANN205
        out = _of_values(op).pushforward((*T, f, d, h), X)
        return out if op.constant else out + op.form(T, df)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        ctx.A, X, f, d, h, df, dd, ctx.op, *T = inputs
        ctx.save_for_backward(X, f, d, h, df, dd, *T)
        ctx.save_for_forward(X, f, d, h, df, dd, *T)

    @staticmethod
    def backward(ctx: Any, R: Tensor) -> tuple:
        X, f, d, h, df, dd, *T = ctx.saved_tensors
        op, needs = ctx.op, ctx.needs_input_grad
        maps, Tv = _of_values(op), (*T, f, d, h)
        g = [None] * 7
        if needs[0]:
            g[0] = maps.second(Tv, R, X)
            if not op.constant:
                g[0] = g[0] + op.maps(_fn(df, dd, None)).pullback(T, R)
        if needs[1]:
            g[1] = maps.pullback(Tv, R)
        if not op.constant and (needs[2] or needs[3]):
            g[2], g[3] = _value_gradients(op, T, X, R)
        if not op.constant and needs[5]:
            g[5] = op.diagonal(T, R).to(f.dtype)
        g = no_third_derivative(op.name, ctx.A, *g)
        return (*g, None, *(None for _ in T))

    @staticmethod
    def jvp(ctx: Any, tA, tX, tf, td, th, tdf, tdd, *_: Any) -> Tensor:  # noqa: ANN001
        X, f, d, h, df, dd, *T = ctx.saved_tensors
        op = ctx.op
        maps, Tv = _of_values(op), (*T, f, d, h)
        out = maps.pushforward(Tv, torch.zeros_like(X) if tX is None else tX)
        if tA is not None:
            out = out + maps.pushforward_second(Tv, X, tA)
            if not op.constant:
                out = out + op.maps(_fn(df, dd, None)).pushforward(T, tA)
        if not op.constant:
            if tf is not None or td is not None:
                tf = torch.zeros_like(f) if tf is None else tf
                td = torch.zeros_like(d) if td is None else td
                f0, d0 = _reference(T[op.spectrum], op.odd)
                ref = op.maps(_fn(f0 + tf, d0 + td, None)).pushforward(T, X)
                out = out + ref - op.maps(_fn(f0, d0, None)).pushforward(T, X)
            if tdf is not None:
                out = out + op.form(T, tdf)
        return no_third_derivative(op.name, ctx.A, out)[0]


def _value_gradients(op: ValuesOp, T: tuple, X: Tensor, R: Tensor) -> tuple:
    """The gradient of ``<R, L_phi[X]>`` w.r.t. the values ``phi = (f, d)``
    (linear in them; branches of :func:`_reference`)."""
    f0, d0 = _reference(T[op.spectrum], op.odd)

    def tangent(f: Tensor, d: Tensor) -> Tensor:
        return op.maps(_fn(f, d, None)).pushforward(T, X)

    _, vjp = torch.func.vjp(tangent, f0, d0)
    return vjp(R)


class Diagonal(torch.autograd.Function):
    """``(c, 0)``, ``c = diagonal(T, G)``: the gradient w.r.t. the values
    ``(f, d)`` under ``create_graph``, as an operation of ``(A, G)``. Its
    pullback receives the cotangents ``(r0, r1)``, the values and derivatives
    on the spectrum of the function along which the values move
    (``rho = df/dtheta . v``), and is ``L_(r0, r1)^*[G]`` w.r.t. ``A`` and
    ``form(T, r0)`` w.r.t. ``G``; its tangent along ``dA`` is the pair of
    vectors through which ``<G, L_phi[dA]>`` depends on ``phi`` (branches of
    :func:`_reference`). ``f``: the values, for their dtype (a constant)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A: Tensor, G: Tensor, op: ValuesOp, f: Tensor, *T: Tensor):
        c = op.diagonal(T, G).to(f.dtype)
        return c, torch.zeros_like(c)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        # A (an input: no reference cycle) only for no_third_derivative
        ctx.A, G, ctx.op, _, *T = inputs
        ctx.save_for_backward(G, *T)
        ctx.save_for_forward(G, *T)

    @staticmethod
    def backward(ctx: Any, r0: Tensor, r1: Tensor) -> tuple:
        G, *T = ctx.saved_tensors
        op = ctx.op
        gA = gG = None
        if ctx.needs_input_grad[0]:
            gA = op.maps(_fn(r0, r1, None)).pullback(T, G)
        if ctx.needs_input_grad[1]:
            gG = op.form(T, r0)
        gA, gG = no_third_derivative(op.name, ctx.A, gA, gG)
        return (gA, gG, None, None, *(None for _ in T))

    @staticmethod
    def jvp(ctx: Any, dA: Any, dG: Any, *_: Any) -> tuple:
        G, *T = ctx.saved_tensors
        op = ctx.op
        S = T[op.spectrum]
        c = torch.zeros_like(S) if dG is None else op.diagonal(T, dG).to(S.dtype)
        e = torch.zeros_like(c)
        if dA is not None:
            a, b = _value_gradients(op, T, dA, G)
            c, e = c + a, e + b
        return c, e


# ----------------------------------------------------------------- Julia


class SpectralValuesJulia(torch.autograd.Function):
    """:class:`SpectralValues` on the Julia backend: ``julia`` forms ``Y``
    from the values on Julia's decomposition (``T``: its factors, sharing
    Julia's memory) and pulls back / pushes forward ``A`` in Julia; the
    gradient w.r.t. the values (``c``, a diagonal) is native, and so is
    everything differentiated further (the native formulas on the same
    factors and values)."""

    @staticmethod
    def forward(
        ctx: Any,
        A: Tensor,
        f: Tensor,
        d: Tensor,
        h: Tensor,
        op: ValuesOp,
        julia: Any,
        *T: Tensor,
    ) -> Tensor:
        ctx.op, ctx.julia = op, julia
        ctx.save_for_backward(A, f, d, h, *T)
        ctx.save_for_forward(A, f, d, h, *T)
        return julia.form(f, d)

    @staticmethod
    def backward(ctx: Any, gY: Tensor) -> tuple:
        A, f, d, h, *T = ctx.saved_tensors
        rest = (None,) * (3 + len(T))  # h, op, julia, T
        if gY._is_zerotensor():
            # autograd's zero (Y not in the loss, e.g. differentiating a
            # forward-mode tangent): nothing to pull back, nothing for Julia
            return (None, None, None, *rest)
        needs = ctx.needs_input_grad
        if ctx.op.constant:
            needs = (needs[0], False, False)
        if torch.is_grad_enabled():
            gA, gf, gd = pullback(ctx.op, A, (f, d, h), T, gY, needs)
        else:
            gA = ctx.julia.pullback(gY) if needs[0] else None
            gf = ctx.op.diagonal(T, gY) if needs[1] or needs[2] else None
            gd = None
        return (gA, gf, gd, *rest)

    @staticmethod
    def jvp(ctx: Any, dA: Any, df: Any, dd: Any, *_: Any) -> Tensor:
        A, f, d, h, *T = ctx.saved_tensors
        if ctx.op.constant:
            df = dd = None
        tangents = [t for t in (dA, df, dd) if t is not None]
        if torch.is_grad_enabled() and _tracked(A, f, d, *tangents):
            # a differentiable tangent: the native operation whose derivatives
            # are the exact second-order formulas
            return pushforward(ctx.op, A, (f, d, h), T, dA, df, dd)
        out = None if dA is None else ctx.julia.pushforward(dA)
        if df is not None:
            theta = ctx.op.form(T, df)
            out = theta if out is None else out + theta
        return torch.zeros_like(ctx.op.form(T, f)) if out is None else out


def apply_values(
    A: Tensor, f: Tensor, d: Tensor, op: ValuesOp, T: tuple, on_julia: Any = None
) -> Tensor:
    """``Y`` from the values ``f``, ``f'`` of a user's function on the spectrum
    ``T[op.spectrum]`` of the factors ``T`` (``(U, S, Vh)`` or ``(w, V)``):
    :class:`SpectralValuesJulia` where Julia decomposed (``on_julia``, what
    the bridge returned with the factors), else :class:`SpectralValues`."""
    h = second_values(op, T[op.spectrum])
    if not differentiated(f, d):
        op = replace(op, constant=True)
    if on_julia is not None:
        return apply(SpectralValuesJulia, A, f, d, h, op, on_julia, *T)
    return apply(SpectralValues, A, f, d, h, op, *T)
