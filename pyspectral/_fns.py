"""Spectral functions ``f`` for ``svd_function`` / ``matrix_function``: named
and user-given ``f`` evaluated with ``f'`` on a spectrum, and ``f''`` for
their second derivatives (the divided differences their pullbacks are made of
are in ``common.safemethods``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor

from ._settings import Options
from ._validation import _as_integer, _as_real
from .common.defaults import peek
from .exceptions import (
    DerivativeError,
    DomainError,
    InputError,
    InputTypeError,
    PySpectralError,
)


class SpectralFn:
    """``f`` applied to a descending spectrum: ``fn(S, opts) -> (f(S), f'(S))``,
    and ``fn.second(S, opts) -> f''(S)`` for second derivatives.

    ``values(S, opts)`` may depend on the index (truncation) and raise on a
    spectrum outside the domain; ``second`` (``None``: no second derivative
    known, :class:`DerivativeError` when one is asked for) is evaluated after
    ``values`` on the same spectrum. ``spec``: a named function's argument,
    normalised (what the Julia backend reads). Hashable (by identity) so that
    torch.func can key it.
    """

    def __init__(
        self,
        name: str,
        values: Callable[[Tensor, Options], tuple],
        second: Callable[[Tensor, Options], Tensor] | None = None,
        spec: Any = None,
    ):
        self.name, self.values, self._second = name, values, second
        self.spec = spec

    def __call__(self, S: Tensor, opts: Options) -> tuple[Tensor, Tensor]:
        return self.values(S, opts)

    def second(self, S: Tensor, opts: Options) -> Tensor:
        """``f''`` on the spectrum ``S`` (after ``self(S, opts)`` has checked it)."""
        if self._second is None:
            raise DerivativeError(
                f"the spectral function {self.name} has no second derivative; "
                "second derivatives (double backward, hessian) are not available "
                "for it"
            )
        return self._second(S, opts)

    def __repr__(self) -> str:
        return f"<spectral function {self.name}>"


def power(p: float) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """``(s**p, p s**(p-1))`` with the right limits at 0 (``0**0 = 1``)."""

    def values(s: Tensor) -> tuple[Tensor, Tensor]:
        if p == 0:
            return torch.ones_like(s), torch.zeros_like(s)
        return s**p, p * s ** (p - 1)

    return values


def power_second(p: float) -> Callable[[Tensor], Tensor]:
    """``p (p-1) s**(p-2)``, the second derivative of ``s**p`` (0 for ``p`` in
    ``{0, 1}``, ``2`` for ``p = 2`` at 0; ``+-inf`` at 0 for ``p < 2``)."""

    def second(s: Tensor) -> Tensor:
        if p in (0, 1):
            return torch.zeros_like(s)
        return p * (p - 1) * s ** (p - 2)

    return second


class UserFunction:
    """A user's ``f``: a callable, a pair ``(f, f_prime)`` or a triple
    ``(f, f_prime, f_second)`` of elementwise torch functions (``f_prime``
    may be ``None``: taken from torch's derivative of ``f``, as ``f''`` is
    from ``f_prime``'s).

    ``values(s)`` evaluates ``f`` and ``f'`` on a spectrum, with autograd
    (and torch.func) recording whatever tensors they use besides ``s`` (a
    learned filter's coefficients): the values are differentiable inputs of
    the spectral function (``_values.py``). It checks what either backend's
    pullback needs (the Julia backend receives these values, not the
    functions): real tensors of ``s``'s shape, cast to its dtype; ``f(s)``
    finite (else ``Y`` is not); ``f'(s)`` not NaN (``+-inf`` is allowed: the
    documented infinite gradient where ``f`` is not differentiable).
    ``second(s)``: ``f''`` for second derivatives in ``A``, detached.
    """

    def __init__(self, op: str, f: Callable, f_prime: Callable | None, f_second: Any):
        self.op, self.f, self.f_prime, self.f_second = op, f, f_prime, f_second

    def __repr__(self) -> str:
        return f"<user spectral function {getattr(self.f, '__name__', self.f)!r}>"

    # (eager under torch.compile: torch.func.vjp of the user's f does not
    # trace; a graph break here, the rest of the call compiled around it)
    def values(self, s: Tensor) -> tuple[Tensor, Tensor]:
        """``(f(s), f'(s))``, checked; ``s`` is used detached."""
        return _eager(UserFunction._values)(self, s)

    def second(self, s: Tensor) -> Tensor:
        """``f''(s)``, detached: from ``f_second``, or torch's derivative of
        ``f_prime`` (or, without ``f_prime``, the second derivative of ``f``).
        Where torch's AD fails (numpy inside) a :class:`DerivativeError` asks
        for ``f_second``."""
        return _eager(UserFunction._second)(self, s)

    def _values(self, s: Tensor) -> tuple[Tensor, Tensor]:
        op, s = self.op, s.detach()
        if self.f_prime is not None:
            fv = _checked(op, "f", self.f(s), s)
            dv = _checked(op, "f_prime", self.f_prime(s), s)
            _check_elementwise(op, "f", self.f, s, fv)
            _check_elementwise(op, "f_prime", self.f_prime, s, dv)
            return fv, dv
        # f' by torch's AD: f is elementwise, so the pullback of ones is f'
        # (differentiable in whatever else f uses, for second derivatives)
        try:
            fv, pullback = torch.func.vjp(lambda x: _checked(op, "f", self.f(x), x), s)
        except PySpectralError:
            raise
        except Exception as err:  # any failure of the user's code under AD
            raise _no_derivative(op, "f", err, "f_prime") from err
        # (before the derivative: the pullback of ones is f' only if f is
        # elementwise)
        _check_elementwise(op, "f", self.f, s, fv)
        dv = _derivative(op, "f", "f_prime", pullback, s)
        return fv, _checked(op, "f_prime", dv, s)

    def _second(self, s: Tensor) -> Tensor:
        op, s = self.op, s.detach()
        if self.f_second is not None:
            h = _checked(op, "f_second", self.f_second(s), s).detach()
            _check_elementwise(op, "f_second", self.f_second, s, h)
            return h
        if self.f_prime is not None:
            first, name = self.f_prime, "f_prime"
        else:

            def first(x: Tensor) -> Tensor:
                _, pullback = torch.func.vjp(self.f, x)
                return pullback(torch.ones_like(x))[0]

            name = "f"
        try:
            _, pullback = torch.func.vjp(first, s)
        except PySpectralError:
            raise
        except Exception as err:  # any failure of the user's code under AD
            raise _no_derivative(op, name, err) from err
        h = _derivative(op, name, "f_second", pullback, s)
        return _checked(op, "f_second", h, s).detach()


_EAGER: dict[Callable, Callable] = {}


def _eager(fn: Callable) -> Callable:
    """``torch.compiler.disable(fn)``, made at the first call rather than as a
    decorator: it imports torch._dynamo, which would add a second to
    ``import pyspectral`` for everyone."""
    disabled = _EAGER.get(fn)
    if disabled is None:
        disabled = _EAGER[fn] = torch.compiler.disable(fn)
    return disabled


def _derivative(op: str, name: str, of: str, pullback: Callable, s: Tensor) -> Tensor:
    """The pullback of ones of an elementwise function: its derivative."""
    try:
        return pullback(torch.ones_like(s))[0]
    except Exception as err:  # any failure of the user's code under AD
        raise _no_derivative(op, name, err, of) from err


def _no_derivative(
    op: str, name: str, err: Exception, of: str = "f_second"
) -> DerivativeError:
    tuple_form = "(f, f_prime)" if of == "f_prime" else "(f, f_prime, f_second)"
    return DerivativeError(
        f"{op}: {of} of the user f was not given, and differentiating {name} "
        f"with torch's AD failed ({type(err).__name__}: {err}). Write {name} in "
        f"differentiable torch operations or pass {tuple_form}"
    )


def user_function(op: str, f: Any) -> UserFunction | None:
    """``f`` as a :class:`UserFunction`, or None if it is not one: a callable,
    or a tuple of 2 or 3 whose first entry is callable and whose others are
    callables or None (``f_prime`` or ``f_second`` left to torch's AD)."""
    if callable(f) and not isinstance(f, (str, tuple)):
        return UserFunction(op, f, None, None)
    if not (isinstance(f, tuple) and len(f) in (2, 3) and callable(f[0])):
        return None
    for name, g in zip(("f_prime", "f_second"), f[1:]):
        if g is not None and not callable(g):
            raise InputTypeError(
                f"{op}: in a user (f, f_prime[, f_second]) {name} must be a "
                f"callable or None (torch's derivative), got {type(g).__name__}"
            )
    return UserFunction(op, f[0], f[1], f[2] if len(f) == 3 else None)


def _check_elementwise(op: str, name: str, g: Callable, s: Tensor, gs: Tensor) -> None:
    """``InputError`` unless ``g`` (``gs = g(s)``) is elementwise: ``g`` on
    the spectrum with its first two values swapped and its last dropped (an
    input of another size and order) must give ``gs`` reordered the same way.
    A function of the whole spectrum fails it (``cumsum``, ``flip``, ``s *
    s.sum()``, ``s - s.mean()``, a per-index ``theta * s``), whose pullback
    the spectral-function formulas would silently get wrong. One more call
    of ``g`` on ``K - 1`` values, without autograd; not under a torch.func
    transform or torch.compile (the eager calls check it)."""
    if (
        s.shape[-1] < 2
        or torch._C._are_functorch_transforms_active()
        or torch.compiler.is_compiling()
    ):
        return
    K = s.shape[-1]
    order = torch.tensor([1, 0, *range(2, K)][:-1], device=s.device)
    x = s.index_select(-1, order)
    want = peek(gs.detach()).index_select(-1, order)
    why = ""
    try:
        with torch.no_grad():
            got = g(x)
    except Exception as err:  # any failure of the user's code on the subset
        why = f"it failed on {K_LESS_ONE} ({type(err).__name__}: {err})"
    else:
        if not isinstance(got, Tensor) or got.shape != x.shape:
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
            why = f"on {K_LESS_ONE} it returned {shape}, not {tuple(x.shape)}"
        else:
            got = peek(got.detach()).to(want.dtype)
            eps = torch.finfo(want.dtype).eps
            scale = want.abs().nan_to_num(posinf=0.0).amax(-1, keepdim=True)
            tol = 64 * eps * (got.abs() + want.abs() + scale)
            same = (got == want) | ((got - want).abs() <= tol)
            same = same | (got.isnan() & want.isnan())
            if not bool(same.all()):
                why = f"its values on {K_LESS_ONE} are not its values there"
    if why:
        raise InputError(
            f"{op}: the user {name} must be elementwise (each value a function of "
            f"that value alone, as torch.sin or lambda s: s**2 * c for a scalar "
            f"or a learned scalar c): {why}. A function of the whole spectrum "
            "(cumsum, flip, s * s.sum(), s - s.mean(), per-index weights) has no "
            "spectral-function derivative; write it on the output instead"
        )


K_LESS_ONE = "the spectrum reordered, less one value"


def _checked(op: str, name: str, v: Any, s: Tensor) -> Tensor:
    """``v = name(s)`` validated as :func:`user_pair` says."""
    if not isinstance(v, Tensor) or v.is_complex():
        got = f"a {v.dtype} tensor" if isinstance(v, Tensor) else type(v).__name__
        raise InputTypeError(
            f"{op}: the user {name} must map the (real) spectrum to a real tensor, "
            f"elementwise with torch functions; got {got}"
        )
    if v.shape != s.shape:
        raise InputError(
            f"{op}: the user {name} must be elementwise: {name}(s) must have the "
            f"shape of s, {tuple(s.shape)}, got {tuple(v.shape)}"
        )
    v = v.to(s.dtype)
    seen = peek(v.detach())
    bad = ~torch.isfinite(seen) if name == "f" else torch.isnan(seen)  # +-inf ok
    if bool(bad.any()):
        idx = tuple(bad.nonzero()[0].tolist())
        point = "singular value" if op.startswith("svd") else "eigenvalue"
        where = f"{point} {idx[-1]}" + (
            f" of batch element {idx[:-1]}" if len(idx) > 1 else ""
        )
        raise DomainError(
            f"{op}: the user {name} is {float(seen[idx])} at {where}, "
            f"{float(peek(s.detach())[idx]):.6g}; it must be "
            f"{'finite' if name == 'f' else 'a number (not NaN)'} on the spectrum. "
            "Use a function defined there, or shift or regularise A."
        )
    return v


# The named spectral functions with a number: the number's letter and what it
# must be (the rules of _validation.check_keywords: an integer is a Python,
# numpy or 0-d integer tensor, never a bool or a float such as 2.0; a real
# number also a 0-d real tensor).
_NAMED = {
    "truncate": ("k", "an integer 1 <= k <= min(m, n) = {kmax} (as svd's k)"),
    "threshold": ("tau", "a finite real number tau >= 0"),
    "pow": ("p", "a finite real number p"),
}


_LEARNABLE = {
    "truncate": "a smooth step lambda s: s * torch.sigmoid((s - t) / w)",
    "threshold": "lambda s: torch.clamp(s - tau, min=0)",
    "pow": "lambda s: s**p",
}


def named_argument(
    op: str, f: Any, names: tuple[str, ...], kmax: int = 0
) -> tuple[str, int | float] | None:
    """``(name, number)`` if ``f`` is a tuple ``(name, number)`` with ``name``
    in ``names``, the number validated and normalised (``int`` for
    ``"truncate"``, whose ``k`` must be at most ``kmax``; ``float``
    otherwise); None if ``f`` is no such tuple. The one place where these
    numbers are checked: an invalid one raises :class:`InputError` naming
    the argument, what it must be and what was passed."""
    if not (
        isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) and f[0] in names
    ):
        return None
    name, x = f
    letter, need = _NAMED[name]
    if isinstance(x, Tensor) and (
        x.requires_grad
        or is_functorch_wrapped_tensor(x)
        or torch.autograd.forward_ad.unpack_dual(x).tangent is not None
    ):
        raise InputError(
            f"{op}: ({name!r}, {letter}) takes {letter} as a number, so {letter} "
            "would get no gradient; for a learnable parameter pass f as a user "
            f"function of the spectrum, e.g. {_LEARNABLE[name]}"
        )
    if name == "truncate":
        k = _as_integer(x)
        if k is not None and 1 <= k <= kmax:
            return name, k
    else:
        y = _as_real(x)
        if y is not None and math.isfinite(y) and (name != "threshold" or y >= 0):
            return name, y
    raise InputError(
        f"{op}: ({name!r}, {letter}) needs {need.format(kmax=kmax)}; "
        f"got {letter} = {x!r}"
    )
