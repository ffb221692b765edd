"""Spectral functions ``f`` for ``svd_function`` / ``matrix_function``: named
and user-given ``f`` evaluated with ``f'`` on a spectrum, and ``f''`` for
their second derivatives (the divided differences their pullbacks are made of
are in ``common.safemethods``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._settings import Options
from .common.defaults import peek
from .exceptions import DerivativeError, DomainError, InputError, InputTypeError


class SpectralFn:
    """``f`` applied to a descending spectrum: ``fn(S, opts) -> (f(S), f'(S))``,
    and ``fn.second(S, opts) -> f''(S)`` for second derivatives.

    ``values(S, opts)`` may depend on the index (truncation) and raise on a
    spectrum outside the domain; ``second`` (``None``: no second derivative
    known, :class:`DerivativeError` when one is asked for) is evaluated after
    ``values`` on the same spectrum. Hashable by name so that torch.func can
    key it.
    """

    def __init__(
        self,
        name: str,
        values: Callable[[Tensor, Options], tuple],
        second: Callable[[Tensor, Options], Tensor] | None = None,
    ):
        self.name, self.values, self._second = name, values, second

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


def user_pair(op: str, f: Any) -> Callable[[Tensor], tuple[Tensor, Tensor]] | None:
    """``(f, f_prime)`` (or ``(f, f_prime, f_second)``, see :func:`user_second`)
    of elementwise torch callables, or None if ``f`` is not one.

    The result evaluates both on a spectrum ``s`` and checks what either
    backend's pullback needs (the Julia backend receives these values, not the
    functions): real tensors of ``s``'s shape, cast to its dtype; ``f(s)``
    finite (else ``Y`` is not); ``f_prime(s)`` not NaN (``+-inf`` is allowed:
    the documented infinite gradient where ``f`` is not differentiable).
    """
    if isinstance(f, tuple) and len(f) in (2, 3) and all(map(callable, f)):
        return lambda s: (
            _checked(op, "f", f[0](s), s),
            _checked(op, "f_prime", f[1](s), s),
        )
    return None


def user_second(op: str, f: Any) -> Callable[[Tensor], Tensor]:
    """``f''`` of a user pair ``(f, f_prime)`` or triple ``(f, f_prime,
    f_second)`` (see :func:`user_pair`), for second derivatives.

    A triple's ``f_second`` is evaluated and checked as ``f_prime`` is. For a
    pair, ``f''`` is the derivative of ``f_prime`` by torch's AD
    (``torch.func.vjp``; ``f_prime`` is elementwise, so its pullback of ones);
    ``f_prime`` must then be written in differentiable torch operations (a
    detached one would give ``f'' = 0``): where AD fails (numpy inside) a
    :class:`DerivativeError` asks for the triple.
    """
    if len(f) == 3:
        return lambda s: _checked(op, "f_second", f[2](s), s)

    def second(s: Tensor) -> Tensor:
        try:
            _, pullback = torch.func.vjp(f[1], s)
            (h,) = pullback(torch.ones_like(s))
        except Exception as err:  # any failure of the user's code under AD
            raise DerivativeError(
                f"{op}: a second derivative through the user pair (f, f_prime) "
                "needs f''; differentiating f_prime with torch's AD "
                f"failed ({type(err).__name__}: {err}). Pass a triple "
                "(f, f_prime, f_second) instead"
            ) from err
        return _checked(op, "f_second", h, s)

    return second


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


def named_argument(f: Any, names: tuple[str, ...]) -> tuple[str, float] | None:
    """``(name, number)`` if ``f`` is such a pair with ``name`` in ``names``."""
    if (
        isinstance(f, tuple)
        and len(f) == 2
        and f[0] in names
        and isinstance(f[1], (int, float))
        and not isinstance(f[1], bool)
    ):
        return f[0], float(f[1])
    return None
