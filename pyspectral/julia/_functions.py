"""``ps.julia.function`` and ``ps.julia.include``: a Julia function (with its
``ChainRulesCore.rrule``, else Zygote) as a differentiable torch operation.

Inputs are CPU tensors, copied into Julia ``Array``s in their logical
(row-major) layout, which rules may dispatch on or mutate; outputs are arrays
or numbers, returned as tensors sharing Julia's memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from ..exceptions import InputTypeError
from ._bridge import call
from ._convert import check_tensor


def include(path: str | Path) -> None:
    """Evaluate a Julia file in pyspectral's user module (again, to reload it).

    Its functions (and their ``ChainRulesCore.rrule`` methods) are then callable
    by name through :func:`function`; including the file again after an
    edit makes the next call use the new definitions. Starts Julia on first
    use.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        BackendError: Julia cannot start here (not installed).
        JuliaError: the file fails in Julia (its Julia message;
            ``ArgumentError`` comes as :class:`InputError`).

    Example (needs the Julia backend)::

        >>> import tempfile, torch, pyspectral as ps
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "scaled.jl"
        >>> _ = path.write_text("scaled(x) = 2 .* x", encoding="utf-8")
        >>> ps.julia.include(path)
        >>> scaled = ps.julia.function("scaled")
        >>> scaled(torch.tensor([1.0, 2.0], dtype=torch.float64))
        tensor([2., 4.], dtype=torch.float64)
    """
    p = Path(path).resolve()
    if not p.is_file():
        raise FileNotFoundError(f"pyspectral.julia.include: no file {p}")
    call("julia.include", "user_include", str(p))


def function(f: str) -> JuliaFunction:
    """A Julia function as a differentiable operation on tensors.

    ``f`` is Julia source text evaluating to a function (``"x -> logdet(x' * x
    + I)"``, ``"inv"``) or the name of one defined by :func:`include`. Its
    backward uses ``ChainRulesCore.rrule(f, args...)`` when one exists (yours,
    or ChainRules.jl's for ``inv``, ``det``, ``logdet``, ``cholesky``, ``\\``,
    ...), else ``Zygote.pullback``; ``.last_rule`` says which ran.

    The returned :class:`JuliaFunction` takes CPU tensors of any shape and
    dtype (copied into Julia ``Array`` objects in their logical, row-major
    layout: a ``(m, n)`` tensor is the ``m x n`` matrix) and other
    arguments as juliacall converts them; it returns a tensor (a tuple of
    tensors when Julia returns a tuple) sharing Julia's memory, numbers as
    0-d tensors. Its gradient is exact as far as the rule used is.

    Returns:
        A :class:`JuliaFunction`.

    Raises:
        InputTypeError: ``f`` is not a string (raised before Julia starts).
        BackendError: Julia cannot start here (not installed); when called,
            a tensor argument not on the CPU.
        JuliaError: ``f`` fails in Julia (a syntax error, an unknown
            name); when called, an error inside ``f`` or its pullback, or
            arguments ``f`` has no method for (Julia's message;
            ``ArgumentError`` comes as :class:`InputError`, ``DomainError``
            as :class:`DomainError`).

    Example (needs the Julia backend)::

        >>> import torch, pyspectral as ps
        >>> f = ps.julia.function("x -> sum(abs2, x)")
        >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        >>> y = f(x)
        >>> float(y), f.last_rule  # no rrule for this lambda: Zygote
        (5.0, 'zygote')
        >>> y.backward()
        >>> x.grad
        tensor([2., 4.], dtype=torch.float64)
    """
    if not isinstance(f, str):
        raise InputTypeError(
            f"pyspectral.julia.function: f must be Julia source text or a name, "
            f"got {type(f).__name__}"
        )
    return JuliaFunction(f)


class JuliaFunction:
    """Callable returned by :func:`function`: a Julia function as a
    differentiable torch operation.

    Attributes: ``source`` (the text given to :func:`function`) and
    ``last_rule``, ``"rrule"`` or ``"zygote"`` (which pullback the last call
    recorded; ``None`` before the first call). Construct it with
    :func:`function`, which checks its argument.

    Raises:
        BackendError: when called with a tensor that is not on the CPU.
        JuliaError: when called, an error inside the Julia function or its
            pullback (see :func:`function`).

    Example (needs the Julia backend)::

        >>> import torch, pyspectral as ps
        >>> inv = ps.julia.function("inv")  # ChainRules.jl has its rrule
        >>> X = torch.tensor([[2.0, 0.0], [0.0, 4.0]], dtype=torch.float64)
        >>> torch.allclose(inv(X), torch.linalg.inv(X)), inv.last_rule
        (True, 'rrule')
        >>> inv
        pyspectral.julia.function('inv')
    """

    def __init__(self, source: str):
        self.source = source
        self.handle = call(source, "user_eval", source)
        self.last_rule: str | None = None

    def __call__(self, *args: Any) -> Any:
        """Call the Julia function on ``args`` (CPU tensors are passed as
        Julia arrays, in their logical layout); returns a tensor, or a tuple
        of tensors when Julia returns a tuple, differentiable in every tensor
        argument."""
        for a in args:
            if isinstance(a, torch.Tensor):
                check_tensor(self.source, a)
        # Whether Julia returned a tuple is this call's (two calls of one
        # function may differ, or run in two threads): the forward says it here.
        returned: list[bool] = []
        out = _JuliaFunction.apply(self, returned, *args)
        return out[0] if len(out) == 1 and not returned[0] else out

    def __repr__(self) -> str:
        return f"pyspectral.julia.function({self.source!r})"


def _to_julia(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        # Logical (row-major) layout: user functions see the matrix itself.
        return x.detach().resolve_conj().resolve_neg().numpy()
    return x


def _to_torch(y: Any, like: torch.dtype) -> torch.Tensor:
    if isinstance(y, (bool, int, float, complex)):
        dtype = (
            like
            if not isinstance(y, complex) or like.is_complex
            else (torch.complex128 if like == torch.float64 else torch.complex64)
        )
        return torch.tensor(y, dtype=dtype, device="cpu")  # as from_numpy's
    return torch.from_numpy(np.asarray(y))


class _JuliaFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, jf: JuliaFunction, returned: list, *args: Any) -> tuple:
        y, ctx.pullback, which = call(
            jf.source, "function_forward", jf.handle, *map(_to_julia, args)
        )
        jf.last_rule = str(which)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        like = tensors[0].dtype if tensors else torch.get_default_dtype()
        is_tuple = isinstance(y, tuple)
        returned.append(is_tuple)
        ys = y if is_tuple else (y,)
        ctx.inputs = [
            (a.shape, a.dtype) if isinstance(a, torch.Tensor) else None for a in args
        ]
        ctx.source, ctx.single = jf.source, not is_tuple
        return tuple(_to_torch(v, like) for v in ys)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *gys: torch.Tensor) -> tuple:
        cot = [
            g.item() if g.dim() == 0 else g.resolve_conj().contiguous().numpy()
            for g in gys
        ]
        gs = call(
            ctx.source,
            "function_pullback",
            ctx.pullback,
            cot[0] if ctx.single else tuple(cot),
        )
        grads = []
        for g, meta in zip(gs, ctx.inputs):
            if meta is None or g is None:
                grads.append(None)
                continue
            shape, dtype = meta
            t = _to_torch(g, dtype).to(dtype)
            grads.append(t.reshape(shape) if t.shape != shape else t)
        return (None, None, *grads)
