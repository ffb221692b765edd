"""Matrix functions of a diagonalizable (non-Hermitian) matrix,
``eig_function(A, f) = V f(Lambda) V^-1``, with the exact divided-difference
derivatives of ``pullbacks/eigfun.py``; named ``f`` on the complex plane and
user ``f`` (analytic callables on the complex eigenvalues).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor

from . import _linalg
from ._autograd import LinearInA, SpectralMaps, apply
from ._fns import (
    SpectralFn,
    UserFunction,
    _check_elementwise,
    _eager,
    named_argument,
    user_function,
)
from ._route import on_julia
from ._settings import Options, options
from ._validation import check_matrix
from ._values import differentiated
from .common.defaults import eps, peek
from .exceptions import (
    DerivativeError,
    DomainError,
    InputError,
    InputTypeError,
    PySpectralError,
)
from .julia import _eigfun as jeigfun
from .pullbacks.eig import check_diagonalizable
from .pullbacks.eigfun import (
    eig_function_pullback,
    eig_function_pushforward,
    eig_function_pushforward_second,
    eig_function_second,
)
from .pullbacks.matfun import Nodes

__all__ = ["eig_function"]

OP = "eig_function"


# ------------------------------------------------------- named functions


def _off_cut(name: str, L: Tensor) -> None:
    """``DomainError`` unless every eigenvalue is off the principal branch's
    cut, the closed negative real axis (0 included: there ``f'`` is infinite
    or ``f`` undefined). Within ``eps**(3/4) max|lambda|`` of the axis counts
    as on it: rounding can put such an eigenvalue on either side, where ``f``
    jumps."""
    P = peek(L.detach())
    if P.numel() == 0:
        return
    scale = P.abs().amax(-1, keepdim=True)
    tol = eps(P.dtype) ** 0.75 * scale
    near_axis = P.imag.abs() <= tol
    bad = near_axis & (P.real <= tol)
    if not bool(bad.any()):
        return
    idx = tuple(bad.nonzero()[0].tolist())
    where = f"eigenvalue {idx[-1]}" + (
        f" of batch element {idx[:-1]}" if len(idx) > 1 else ""
    )
    raise DomainError(
        f"{OP}: {name} (principal branch) needs the eigenvalues off the closed "
        f"negative real axis, where it is discontinuous or not differentiable, "
        f"but {where} is {complex(P[idx]):.6g}. Shift or rotate the spectrum "
        "(A + c*I, c*A) or use a function analytic there (exp, an integer power)"
    )


def _named(name: str, p: float = 1.0, label: str | None = None) -> SpectralFn:
    """A named ``f`` on complex eigenvalues: ``(f, f')`` after the domain
    check, ``f''`` for second derivatives (``spec``: what Julia reads)."""
    spec = name if name != "pow" else (name, p)
    if name == "exp":
        return SpectralFn(
            "exp",
            lambda L, o: (torch.exp(L), torch.exp(L)),
            lambda L, o: torch.exp(L),
            spec=spec,
        )
    if name == "log":

        def log(L: Tensor, o: Options) -> tuple[Tensor, Tensor]:
            _off_cut("'log'", L)
            return torch.log(L), 1 / L

        return SpectralFn("log", log, lambda L, o: -1 / L**2, spec=spec)
    if name in ("sqrt", "invsqrt"):
        fn = _named("pow", 0.5 if name == "sqrt" else -0.5, f"'{name}'")
        fn.spec = name
        return fn
    if p == int(p):
        k = int(p)

        def integer(L: Tensor, o: Options) -> tuple[Tensor, Tensor]:
            if k < 0:
                _nonzero(L, p)
            if k == 0:
                return torch.ones_like(L), torch.zeros_like(L)
            return L**k, k * L ** (k - 1)

        def integer_second(L: Tensor, o: Options) -> Tensor:
            if k in (0, 1):
                return torch.zeros_like(L)
            return k * (k - 1) * L ** (k - 2)

        return SpectralFn(f"pow {k}", integer, integer_second, spec=spec)

    def fractional(L: Tensor, o: Options) -> tuple[Tensor, Tensor]:
        _off_cut(label or f"('pow', {p})", L)
        return L**p, p * L ** (p - 1)

    return SpectralFn(
        f"pow {p}", fractional, lambda L, o: p * (p - 1) * L ** (p - 2), spec=spec
    )


def _nonzero(L: Tensor, p: float) -> None:
    P = peek(L.detach())
    if P.numel() == 0:
        return
    bad = P.abs() <= eps(P.dtype) ** 0.75 * P.abs().amax(-1, keepdim=True)
    if bool(bad.any()):
        raise DomainError(
            f"{OP}: ('pow', {p}) needs an invertible A, but an eigenvalue is "
            f"(within rounding of) 0 (|lambda| = {float(P.abs().amin()):.3g}). "
            "Shift the spectrum (A + c*I) or use a non-negative power"
        )


_NAMES = ('"exp"', '"log"', '"sqrt"', '"invsqrt"', '("pow", p)', "a callable f",
          "(f, f_prime)", "(f, f_prime, f_second)")  # fmt: skip


def _named_fn(f: Any) -> SpectralFn:
    if isinstance(f, str) and f in ("exp", "log", "sqrt", "invsqrt"):
        return _named(f)
    named = named_argument(OP, f, ("pow",))
    if named is None:
        raise InputTypeError(f"{OP}: f must be one of {', '.join(_NAMES)}, got {f!r}")
    return _named("pow", named[1])


# ---------------------------------------------------------- a user's f


class _UserFn(SpectralFn):
    """A user's ``f`` on the complex eigenvalues: ``f`` analytic there, ``f'``
    and ``f''`` from ``f_prime`` / ``f_second`` or torch's derivatives. For a
    holomorphic ``g`` torch's vector-Jacobian product with the cotangent
    ``v`` is ``conj(g'(z)) v``: so ``g' = conj(vjp(1))``, and ``vjp(i) = i
    vjp(1)`` (Cauchy-Riemann) is checked, which a non-analytic ``f``
    (``conj``, ``abs``, ``real``) fails."""

    def __init__(self, user: UserFunction):
        super().__init__(repr(user), self._values, self._second_values)
        self.user = user

    def _values(self, L: Tensor, opts: Options) -> tuple[Tensor, Tensor]:
        return _eager(_UserFn._eval)(self, L)

    def _second_values(self, L: Tensor, opts: Options) -> Tensor:
        return _eager(_UserFn._eval_second)(self, L)

    def _eval(self, L: Tensor) -> tuple[Tensor, Tensor]:
        u, L = self.user, L.detach()
        if u.f_prime is not None:
            fv = _values_of(u.f, "f", L)
            dv = _values_of(u.f_prime, "f_prime", L)
            _check_elementwise(OP, "f", u.f, L, fv)
            return fv, dv
        fv, dv = _analytic_derivative(lambda z: _values_of(u.f, "f", z), "f", L)
        _check_elementwise(OP, "f", u.f, L, fv)
        return fv, dv

    def _eval_second(self, L: Tensor) -> Tensor:
        u, L = self.user, L.detach()
        if u.f_second is not None:
            return _values_of(u.f_second, "f_second", L).detach()
        if u.f_prime is not None:
            first = u.f_prime
        else:

            def first(z: Tensor) -> Tensor:
                return _analytic_derivative(
                    lambda x: _values_of(u.f, "f", x), "f", z, check=False
                )[1]

        return _analytic_derivative(first, "f_prime", L, check=False)[1].detach()


def _analytic_derivative(
    g: Callable[[Tensor], Tensor], name: str, z: Tensor, check: bool = True
) -> tuple[Tensor, Tensor]:
    """``(g(z), g'(z))`` for an elementwise analytic ``g`` by torch's AD
    (``check``: ``InputError`` unless ``g`` satisfies Cauchy-Riemann on
    ``z``)."""
    try:
        gz, pullback = torch.func.vjp(g, z)
        one = torch.ones_like(z)
        conj_d = pullback(one)[0]
        rotated = pullback(one * 1j)[0] if check else None
    except PySpectralError:
        raise
    except Exception as err:  # any failure of the user's code under AD
        raise DerivativeError(
            f"{OP}: the derivative of the user {name} was not given, and "
            f"differentiating it with torch's AD failed ({type(err).__name__}: "
            f"{err}). Write it in differentiable torch operations or pass "
            "(f, f_prime) or (f, f_prime, f_second)"
        ) from err
    if check:
        a, b = peek(rotated.detach()), peek((1j * conj_d).detach())
        scale = a.abs().amax().clamp_min(1.0) + b.abs().amax()
        if bool(((a - b).abs() > 64 * eps(z.dtype) * scale).any()):
            raise InputError(
                f"{OP}: the user {name} must be analytic (complex differentiable) "
                "at the eigenvalues: a matrix function is defined by a power "
                "series, and its derivative by the complex derivative f'. Its "
                "derivative by torch's AD breaks the Cauchy-Riemann equations "
                "there (conj, abs, real and imag are not analytic). Write f in "
                "analytic torch operations (exp, log, powers, sums and products)"
            )
    return gz, conj_d.conj()


def _values_of(g: Callable[[Tensor], Tensor], name: str, z: Tensor) -> Tensor:
    """``g(z)`` checked: a tensor of ``z``'s shape, cast to its complex dtype,
    finite."""
    v = g(z)
    if not isinstance(v, Tensor) or not (v.is_complex() or v.is_floating_point()):
        got = f"a {v.dtype} tensor" if isinstance(v, Tensor) else type(v).__name__
        raise InputTypeError(
            f"{OP}: the user {name} must map the (complex) eigenvalues to a "
            f"tensor, elementwise with torch functions; got {got}"
        )
    if v.shape != z.shape:
        raise InputError(
            f"{OP}: the user {name} must be elementwise: {name}(z) must have the "
            f"shape of z, {tuple(z.shape)}, got {tuple(v.shape)}"
        )
    v = v.to(z.dtype)
    seen = peek(v.detach())
    if not bool(torch.isfinite(seen).all()):
        raise DomainError(
            f"{OP}: the user {name} is not finite at an eigenvalue of A; it must "
            "be analytic on the spectrum. Use a function defined there, or shift "
            "or regularise A"
        )
    return v


def _check_real(fn: SpectralFn, L: Tensor, f: Tensor, opts: Options) -> None:
    """For a real ``A`` and a user ``f``: ``InputError`` unless ``f``
    commutes with conjugation on the spectrum, ``f(conj l) = conj f(l)`` to
    rounding (real eigenvalues: ``f`` real there), which makes ``V f(Lambda)
    V^-1`` real in exact arithmetic (the interpolating polynomial of ``f`` on
    the spectrum has real coefficients). The real eigenvalues of a real
    ``A`` have an exact ``+0`` imaginary part: their conjugates are formed
    with ``+0`` too (``-0.0 + 0.0 = +0.0``), so that ``f`` on the cut of a
    branch is compared with itself."""
    with torch.no_grad():
        Lc = torch.complex(L.real, -L.imag + 0.0)
        fc = fn(Lc, opts)[0]
        a, b = peek(fc.detach()), peek(f.detach()).conj()
        scale = torch.maximum(a.abs(), b.abs()).amax(-1, keepdim=True)
        bad = (a - b).abs() > 64 * eps(a.dtype) * scale
        if bool(bad.any()):
            raise InputError(
                f"{OP}: f(A) of this real A is not real: the user f does not "
                "commute with conjugation on its spectrum (f(conj l) != conj f(l), "
                f"max difference {float((a - b).abs().max()):.3g}). Pass A as a "
                "complex tensor, eig_function(A.to(torch.complex128), f), for the "
                "complex f(A); or an f with real Taylor coefficients"
            )


# ----------------------------------------------------------- autograd


def _eigenbasis(
    A: Tensor, fn: SpectralFn, opts: Options
) -> tuple[Tensor, Tensor, Tensor]:
    """``(L, V, V^-1)`` of ``A`` (constants: derivatives enter through the
    maps), after the diagonalizability check of ``eig``'s pullback: its
    condition 1 alone, ``kappa(V) < eps**(-1/2)``. Its condition 2 (pairs
    apart but within rounding of coalescing) is about the quotients ``1 /
    (w_i - w_j)`` of eig's pullback; ``Y`` and its derivatives are smooth
    functions of ``A`` whatever the gaps (divided differences of ``f``
    instead of quotients), amplified by at most ``kappa(V)**2``, so no pair
    counts as divided here (``pairs=False``)."""
    with torch.no_grad():
        L, V = _linalg.eig(A.detach())
        try:
            LU, pivots, inverse = check_diagonalizable(L, V, opts, OP, pairs=False)
        except DomainError as err:
            raise DomainError(f"{err} {_defective_route(fn)}") from err
        if inverse is None:
            eye = torch.eye(V.shape[-1], dtype=V.dtype, device=V.device)
            inverse = _linalg.lu_solve(LU, pivots, eye.expand_as(V))
    return L, V, inverse


def _defective_route(fn: SpectralFn) -> str:
    """What computes ``f(A)`` where ``A`` has no (well-conditioned)
    eigenbasis: the routes that do not diagonalize."""
    spec = fn.spec
    if spec == "exp":
        return "For exp(A) use torch.linalg.matrix_exp(A) (exact gradients)."
    if isinstance(spec, tuple) and spec[1] == int(spec[1]) and spec[1] >= 0:
        return (
            f"For A**{int(spec[1])} use torch.linalg.matrix_power(A, "
            f"{int(spec[1])}) (exact gradients)."
        )
    return (
        "V f(Lambda) V^-1 is inaccurate there too (error ~ eps * condition "
        "number): compute f(A) by a Schur-based method without eig (e.g. "
        "scipy.linalg.funm, logm, sqrtm; no gradient), or perturb A."
    )


def _maps(fn: SpectralFn, opts: Options, real: bool) -> SpectralMaps:
    """eig_function's first- and second-order maps (``LinearInA``), ``T =
    (L, V, Vinv, f, f', f'')`` (``f''`` empty: evaluated when needed)."""

    def nodes(T: tuple) -> Nodes:
        L, _, _, f, d, h = T
        return Nodes(L, f, d, fn.second(L, opts) if h.shape != L.shape else h)

    return SpectralMaps(
        OP,
        lambda T, G: eig_function_pullback(T[:3], T[3:5], G, real),
        lambda T, E: eig_function_pushforward(T[:3], T[3:5], E, real),
        lambda T, G, D: eig_function_second(T[:3], nodes(T), G, D, real),
        lambda T, E, D: eig_function_pushforward_second(T[:3], nodes(T), E, D, real),
    )


def _form(f: Tensor, V: Tensor, Vinv: Tensor, real: bool) -> Tensor:
    Y = (V * f.unsqueeze(-2)) @ Vinv
    return Y.real.contiguous() if real else Y


class _EigFunction(torch.autograd.Function):
    """``Y = V diag(f) V^-1`` as an operation of ``(A, f)``: ``f`` the values
    of ``f`` on the spectrum (differentiable where a user's ``f`` uses other
    tensors: ``gf = diag(V^H gY V^-H)``, first order), ``d, h`` its first and
    second derivatives there, ``L, V, Vinv`` the eigenbasis (constants)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, f, d, h, L, V, Vinv, fn, opts, real):  # noqa: ANN001, ANN205
        return _form(f, V, Vinv, real)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        A, f, d, h, L, V, Vinv, ctx.fn, ctx.opts, ctx.real = inputs
        ctx.save_for_backward(A, f, d, h, L, V, Vinv)
        ctx.save_for_forward(A, f, d, h, L, V, Vinv)

    @staticmethod
    def backward(ctx: Any, gY: Tensor) -> tuple:
        A, f, d, h, L, V, Vinv = ctx.saved_tensors
        maps = _maps(ctx.fn, ctx.opts, ctx.real)
        T = (L, V, Vinv, f.detach(), d, h)
        gA = gf = None
        if ctx.needs_input_grad[1]:
            gf = (V.mH @ gY.to(V.dtype) @ Vinv.mH).diagonal(dim1=-2, dim2=-1)
        if ctx.needs_input_grad[0]:
            if torch.is_grad_enabled():
                _first_order_only(ctx.needs_input_grad[1])
                gA = LinearInA.apply(A, gY, maps, True, *T)
            else:
                gA = maps.pullback(T, gY)
        return gA, gf, *(None,) * 8

    @staticmethod
    def jvp(ctx: Any, dA: Tensor | None, df: Tensor | None, *_: Any) -> Tensor:
        A, f, d, h, L, V, Vinv = ctx.saved_tensors
        out = None
        if dA is not None:
            maps = _maps(ctx.fn, ctx.opts, ctx.real)
            out = LinearInA.apply(A, dA, maps, False, L, V, Vinv, f.detach(), d, h)
        if df is not None:
            _first_order_only(torch.is_grad_enabled() and df.requires_grad)
            term = _form(df, V, Vinv, ctx.real)
            out = term if out is None else out + term
        return out


def _first_order_only(parameters: bool) -> None:
    if parameters:
        raise DerivativeError(
            f"{OP}: second derivatives involving the tensors a user f uses "
            "(its parameters) are not implemented; first derivatives are exact. "
            "Differentiate once, or make f a function of the eigenvalues alone"
        )


# ------------------------------------------------------------ public API


def eig_function(A: Tensor, f: Any, *, backend: str = "auto") -> Tensor:
    r"""eig_function(A, f, *, backend="auto") -> Tensor

    Matrix function of a diagonalizable (non-Hermitian) matrix with exact
    gradients at every spectrum, repeated eigenvalues included.

    .. math::
        Y = V f(\Lambda) V^{-1}, \qquad A = V \Lambda V^{-1}

    ``A`` has shape ``(*, n, n)`` where ``*`` is zero or more batch
    dimensions, dtype float32, float64, complex64 or complex128; ``Y`` has
    its shape and dtype. ``f`` is ``"exp"``, ``"log"``, ``"sqrt"``,
    ``"invsqrt"`` (principal branches), ``("pow", p)`` (``p`` a finite real;
    integer powers are single-valued) or a user ``f``: an elementwise torch
    function of the complex eigenvalues, analytic there (checked: its
    torch derivative must satisfy the Cauchy-Riemann equations), alone
    (``f'`` and ``f''`` by torch's AD), as ``(f, f_prime)`` or ``(f,
    f_prime, f_second)``. A real ``A`` gives a real ``Y``: the named ``f``
    commute with conjugation (real Taylor coefficients; the branches off the
    cut), and a user ``f`` is checked to (``f(conj l) = conj f(l)`` on the
    spectrum), so the imaginary part is rounding and is dropped. For a
    Hermitian ``A`` use :func:`matrix_function`, which needs no ``V^-1``.

    .. warning:: Gradients, second derivatives (double backward,
        ``hessian``) and forward mode (``jvp``, ``jacfwd``) are exact at
        every diagonalizable ``A``, degenerate spectra included: they use
        the divided differences ``f[l_i, l_j]`` (``f'`` at coincident
        eigenvalues) in the eigenbasis, ``gA = V^{-H} (\bar F \circ V^H g_Y
        V^{-H}) V^H``. A defective or numerically defective ``A`` (eigenvector
        condition number ``>= eps**(-1/2)``, as in :func:`eig`) raises
        :class:`DomainError` in the forward: there ``V f(\Lambda) V^{-1}`` is
        inaccurate and no eigenbasis derivative exists (for ``exp`` use
        ``torch.linalg.matrix_exp``, for integer powers
        ``torch.linalg.matrix_power``). ``log``, ``sqrt`` and fractional
        powers need the eigenvalues off the closed negative real axis
        (within ``eps**(3/4) max|l|``), negative integer powers an
        invertible ``A``. The forward's relative error is about ``eps``
        times the eigenvector condition number.

    Tensors a user ``f`` uses besides the eigenvalues (learned coefficients)
    get their first derivatives; second derivatives involving them raise
    :class:`DerivativeError`. ``backend="julia"`` runs the named ``f`` in
    Julia (CPU tensors).

    Returns:
        ``Y``, shape ``(*, n, n)``, the dtype of ``A``.

    Raises:
        InputTypeError: ``A`` is not a tensor, or ``f`` is not one of the
            forms above.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: ``p`` not finite, a user ``f`` not elementwise or not
            analytic, or, for a real ``A``, one whose ``f(A)`` is not real.
        DomainError: a (numerically) defective ``A``, or the spectrum
            outside ``f``'s domain.
        DerivativeError: a third derivative, a user ``f`` torch cannot
            differentiate, or a second derivative in its parameters.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call.

    Example::

        >>> A = torch.tensor([[1.0, 2.0], [0.5, -1.0]], dtype=torch.float64,
        ...                  requires_grad=True)
        >>> Y = eig_function(A, "exp")
        >>> bool(torch.dist(Y, torch.linalg.matrix_exp(A)) < 1e-12)
        True
        >>> eig_function(A, ("pow", 3)).trace().backward()  # d tr(A^3) = 3 (A^2)^T
        >>> torch.allclose(A.grad, 3 * (A @ A).mT)
        True
    """
    check_matrix(OP, A, square=True)
    user = user_function(OP, f)
    fn = _named_fn(f) if user is None else _UserFn(user)
    opts = options(op=OP)
    real = not A.is_complex()
    if on_julia(OP, backend, A):
        return _on_julia(A, f, fn, user, opts, real)
    L, V, Vinv = _eigenbasis(A, fn, opts)
    return _apply(A, fn, opts, real, L, V, Vinv)


def _apply(
    A: Tensor, fn: SpectralFn, opts: Options, real: bool, L: Tensor, V: Tensor,
    Vinv: Tensor,
) -> Tensor:  # fmt: skip
    """``Y`` from the eigenbasis: the values of ``f`` (recorded by autograd
    where a user's ``f`` uses other tensors) through :class:`_EigFunction`."""
    fv, dv = fn(L, opts)
    if real and isinstance(fn, _UserFn):
        _check_real(fn, L, fv, opts)
    if not (differentiated(A) or differentiated(fv)):
        return _form(fv, V, Vinv, real)
    h = _second_now(fn, L, opts)
    return apply(_EigFunction, A, fv, dv.detach(), h, L, V, Vinv, fn, opts, real)


def _second_now(fn: SpectralFn, L: Tensor, opts: Options) -> Tensor:
    """``f''`` on the spectrum evaluated now where a torch.func transform is
    active (a user's ``f`` evaluated later, in a backward, would meet the
    transform's tensors outside their level), else empty: evaluated when a
    second derivative asks for it."""
    if torch._C._are_functorch_transforms_active() or fwAD._current_level >= 0:
        try:
            return fn.second(L, opts).detach()
        except PySpectralError:
            pass
    return L.new_empty(0)


def _on_julia(
    A: Tensor, f: Any, fn: SpectralFn, user: Any, opts: Options, real: bool
) -> Tensor:
    """The Julia backend: Julia's eigenbasis (and its conditioning check);
    for a named ``f`` Julia's ``Y``, pullback and pushforward
    (:class:`_EigFunctionJulia`), for a user's ``f`` evaluated in Python on
    Julia's eigenvalues the native Function on Julia's eigenbasis."""
    try:
        L, V, Vinv, handles = jeigfun.eigenbasis(A)
    except DomainError as err:
        text = str(err)
        start = text.find(f"{OP}: A is")
        native = text[start:] if start >= 0 else text
        raise DomainError(f"{native} {_defective_route(fn)}") from err
    if user is not None:
        return _apply(A, fn, opts, real, L, V, Vinv)
    fn(L, opts)  # the domain check, with the native text, before Julia's forms
    return apply(_EigFunctionJulia, A, fn, opts, real, L, V, Vinv, handles)


class _EigFunctionJulia(torch.autograd.Function):
    """``_EigFunction`` on the Julia backend for a named ``f`` (``fn.spec``,
    which Julia reads): Julia forms ``Y`` and runs the first-order pullback
    and pushforward; under ``create_graph``, and for a differentiable
    tangent, the native maps (exact to second order) run on Julia's
    eigenbasis."""

    @staticmethod
    def forward(ctx, A, fn, opts, real, L, V, Vinv, handles):  # noqa: ANN001, ANN205
        ctx.fn, ctx.opts, ctx.real, ctx.handles = fn, opts, real, handles
        ctx.shape_dtype = (A.shape, A.dtype)
        ctx.save_for_backward(A, L, V, Vinv)
        ctx.save_for_forward(A, L, V, Vinv)
        return jeigfun.apply(handles, fn.spec, real, A.shape[:-2])

    @staticmethod
    def backward(ctx: Any, gY: Tensor) -> tuple:
        none = (None,) * 7
        if gY._is_zerotensor():
            return (None, *none)
        if torch.is_grad_enabled():
            A, L, V, Vinv = ctx.saved_tensors
            T = _native_basis(ctx, L, V, Vinv)
            return (LinearInA.apply(A, gY, _maps(ctx.fn, ctx.opts, ctx.real), True, *T),
                    *none)  # fmt: skip
        return (jeigfun.pullback(ctx.shape_dtype, ctx.handles, ctx.fn.spec, gY), *none)

    @staticmethod
    def jvp(ctx: Any, dA: Tensor, *_: Any) -> Tensor:
        A, L, V, Vinv = ctx.saved_tensors
        if torch.is_grad_enabled() and (dA.requires_grad or A.requires_grad):
            T = _native_basis(ctx, L, V, Vinv)
            return LinearInA.apply(A, dA, _maps(ctx.fn, ctx.opts, ctx.real), False, *T)
        return jeigfun.pushforward(ctx.handles, ctx.fn.spec, dA, ctx.real)


def _native_basis(ctx: Any, L: Tensor, V: Tensor, Vinv: Tensor) -> tuple:
    """``T`` of the native maps on Julia's eigenbasis (``f``, ``f'`` natively
    on Julia's eigenvalues; ``f''`` when asked for)."""
    f, d = ctx.fn(L, ctx.opts)
    return (L, V, Vinv, f, d, L.new_empty(0))
