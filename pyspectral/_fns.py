"""Spectral functions ``f`` for ``svd_function`` / ``matrix_function``: named
and user-given ``f`` evaluated with ``f'`` on a spectrum (the divided
differences their pullbacks are made of are in ``_common``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import _common as C
from .exceptions import DomainError, InputError, InputTypeError


class SpectralFn:
    """``f`` applied to a descending spectrum: ``fn(S, opts) -> (f(S), f'(S))``.

    ``values(S, opts)`` may depend on the index (truncation) and raise on a
    spectrum outside the domain. Hashable by name so that torch.func can key it.
    """

    def __init__(self, name: str, values: Callable[[Tensor, C.Options], tuple]):
        self.name, self.values = name, values

    def __call__(self, S: Tensor, opts: C.Options) -> tuple[Tensor, Tensor]:
        return self.values(S, opts)

    def __repr__(self) -> str:
        return f"<spectral function {self.name}>"


def power(p: float) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """``(s**p, p s**(p-1))`` with the right limits at 0 (``0**0 = 1``)."""

    def values(s: Tensor) -> tuple[Tensor, Tensor]:
        if p == 0:
            return torch.ones_like(s), torch.zeros_like(s)
        return s**p, p * s ** (p - 1)

    return values


def user_pair(op: str, f: Any) -> Callable[[Tensor], tuple[Tensor, Tensor]] | None:
    """``(f, f_prime)`` of elementwise torch callables, or None if ``f`` is not one.

    The result evaluates both on a spectrum ``s`` and checks what either
    backend's pullback needs (the Julia backend receives these values, not the
    functions): real tensors of ``s``'s shape, cast to its dtype; ``f(s)``
    finite (else ``Y`` is not); ``f_prime(s)`` not NaN (``+-inf`` is allowed:
    the documented infinite gradient where ``f`` is not differentiable).
    """
    if isinstance(f, tuple) and len(f) == 2 and callable(f[0]) and callable(f[1]):
        return lambda s: (
            _checked(op, "f", f[0](s), s),
            _checked(op, "f_prime", f[1](s), s),
        )
    return None


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
    seen = C._peek(v.detach())
    bad = ~torch.isfinite(seen) if name == "f" else torch.isnan(seen)
    if bool(bad.any()):
        idx = tuple(bad.nonzero()[0].tolist())
        point = "singular value" if op.startswith("svd") else "eigenvalue"
        where = f"{point} {idx[-1]}" + (
            f" of batch element {idx[:-1]}" if len(idx) > 1 else ""
        )
        raise DomainError(
            f"{op}: the user {name} is {float(seen[idx])} at {where}, "
            f"{float(C._peek(s.detach())[idx]):.6g}; it must be "
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
