"""One route in: how a public decomposition runs, decided in one place.

Every public function reads *validate -> route -> result*: under
``torch.compile`` / ``torch.export`` the custom operator of a call whose
shapes are static (:func:`compiled`); otherwise its own argument checks
(``_validation``), ``out=`` (:func:`with_out`: torch.linalg's forward, no
autograd), and the decomposition's ``torch.autograd.Function`` on the
backend that runs the call (:func:`decompose`). What differs between
decompositions (truncation, the split, the named functions) are small
functions of their own modules, each called from one line of the public
function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._autograd import apply
from ._backend import resolve_backend
from ._ops import compiling
from ._validation import check_out
from .exceptions import BackendError

__all__ = ["Functions", "compiled", "decompose", "on_julia", "with_out"]

NATIVE = ("auto", "torch")


class Functions(NamedTuple):
    """A decomposition's ``torch.autograd.Function`` on each backend (the
    Julia one takes the native one's arguments)."""

    native: type[torch.autograd.Function]
    julia: type[torch.autograd.Function] | None = None


def compiled(backend: str, eligible: bool, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` (an ``_ops`` caller: the custom operator, or None where
    the eager path must run) while torch.compile or torch.export traces a
    native call that can run as one (``eligible``: static shapes, no
    ``out=``); None otherwise."""
    if not (eligible and backend in NATIVE and compiling()):
        return None
    return call(*args)


def with_out(
    op: str,
    out: Any,
    backend: str,
    A: Tensor,
    forward: Callable[[], Any],
    k: Any = None,
) -> Any:
    """``forward()`` (torch.linalg's, writing into ``out``) where ``out=`` is
    given and allowed (see ``check_out``), else None."""
    if check_out(op, out, backend, A, k):
        return forward()
    return None


def on_julia(op: str, backend: str, A: Tensor) -> bool:
    """Whether the call runs on the Julia backend (``resolve_backend``)."""
    return resolve_backend(op, backend, A) == "julia"


def decompose(
    op: str, functions: Functions, A: Tensor, backend: str, *args: Any
) -> Any:
    """The decomposition's Function applied to ``(A, *args)`` on the backend
    that runs the call (``BackendError`` where it cannot)."""
    if not on_julia(op, backend, A):
        return apply(functions.native, A, *args)
    if functions.julia is None:
        raise BackendError(
            f"{op}: the Julia backend has no rule for {op}; use backend='auto'"
        )
    return apply(functions.julia, A, *args)
