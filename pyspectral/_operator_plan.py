"""A call of ``svd_topk`` / ``eigh_topk`` on a linear operator
(``operator.py``) checked and planned, and the plan's iteration.

An operator is only its products, so what a tensor's checks read off the
entries is checked on each product instead (``_checked``: shape, dtype,
finiteness), and the choice between forming ``A`` and iterating is made on
its size alone (``_Op.meta``). Every argument is checked, in one order for
both functions, before anything is computed: a call that raises costs no
product.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import topk as TK
from ._backend import BACKENDS
from ._settings import Options, options
from ._validation import (
    _as_integer,
    check_flag,
    check_keywords,
    check_top_k_keywords,
    truncation_rule,
)
from ._warnings import warn
from .common.defaults import peek
from .exceptions import (
    BackendError,
    ConvergenceWarning,
    DtypeError,
    InputError,
    InputTypeError,
    NonFiniteError,
    ShapeError,
)
from .forward import topk as F

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def _check_operator(name: str, op: Any, need_rmatmul: bool) -> None:
    """Raise ``InputTypeError`` / ``InputError`` / ``DtypeError`` for an
    ``op`` that is not a usable linear operator."""
    need = ("shape", "dtype", "device", "matmul")
    missing = [a for a in need if not hasattr(op, a)]
    if missing:
        raise InputTypeError(
            f"{name}: op must be a torch.Tensor or a linear operator with "
            f"attributes shape, dtype, device and matmul (and rmatmul for "
            f"svd_topk), e.g. pyspectral.LinearOperator; got "
            f"{type(op).__name__}, which lacks {', '.join(missing)}"
        )
    for attr in ("matmul", "rmatmul") if need_rmatmul else ("matmul",):
        f = getattr(op, attr, None)
        if not callable(f):
            why = "svd_topk needs A^H @ X" if attr == "rmatmul" else "A @ X"
            raise InputTypeError(
                f"{name}: op.{attr} must be a callable ({why}), got "
                f"{type(f).__name__}; pass {attr}= to pyspectral.LinearOperator"
            )
    shape = op.shape
    ok = isinstance(shape, (tuple, torch.Size)) and len(shape) >= 2
    if not ok or not all(_as_integer(s) is not None and int(s) >= 0 for s in shape):
        raise ShapeError(
            f"{name}: op.shape must be a tuple (*, m, n) of at least 2 "
            f"non-negative integers, got {shape!r}"
        )
    if op.dtype not in _DTYPES:
        raise DtypeError(
            f"{name}: op.dtype must be float32, float64, complex64 or "
            f"complex128, got {op.dtype!r}"
        )


def _checked(name: str, f: Callable, out_shape: tuple, dtype: torch.dtype):
    """``f`` with its result checked: shape ``(*, out_rows, p)``, ``dtype``."""

    def g(X: Tensor) -> Tensor:
        Y = f(X)
        want = (*out_shape[:-1], X.shape[-1])
        if not isinstance(Y, Tensor) or tuple(Y.shape) != want or Y.dtype != dtype:
            got = (
                f"shape {tuple(Y.shape)}, dtype {Y.dtype}"
                if isinstance(Y, Tensor)
                else type(Y).__name__
            )
            raise InputError(
                f"{name} of an input of shape {tuple(X.shape)} must return a "
                f"tensor of shape {want} and dtype {dtype}, got {got}"
            )
        if not _finite(Y):
            raise NonFiniteError(
                f"{name} of an input of shape {tuple(X.shape)} returned NaN or Inf "
                "entries; the products of the operator must be finite (check the "
                "tensors it uses, or its scale)"
            )
        return Y

    return g


def _finite(Y: Tensor) -> bool:
    """Whether every entry of a product is finite: one reduction (a NaN or
    Inf entry makes the sum non-finite) and one host sync, per product; only
    a sum that overflows is looked at entry by entry."""
    P = peek(Y).detach()
    if P.numel() == 0:
        return True
    total = P.sum()
    if bool(torch.isfinite(total.real if total.is_complex() else total)):
        return True
    return bool(torch.isfinite(P).all())


def _device(name: str, device: Any) -> torch.device:
    """``device`` as a ``torch.device`` (a device or its name), else
    ``InputTypeError`` naming it."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise InputTypeError(
            f"{name}: device must be a torch.device or a device name such as "
            f"'cpu' or 'cuda:0', got {device!r}"
        ) from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        # (else torch's AssertionError "Torch not compiled with CUDA enabled"
        # from the first tensor made there, deep inside the iteration)
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
        raise BackendError(
            f"{name}: device {device!r}, but CUDA is not available here (torch "
            f"{torch.__version__}, a {build} build). Install a CUDA build of torch "
            "on a machine with an NVIDIA GPU, or use device='cpu'"
        )
    return dev


class _Op:
    """A validated operator: checked products, shape, dtype, device."""

    def __init__(self, op: Any, need_rmatmul: bool, who: str) -> None:
        *batch, m, n = self.shape = tuple(int(s) for s in op.shape)
        self.dtype, self.device = op.dtype, _device(f"{who}: op.device", op.device)
        matmul, rmatmul = f"{who}: op.matmul", f"{who}: op.rmatmul"
        self.matmul = _checked(matmul, op.matmul, (*batch, m, 1), op.dtype)
        self.rmatmul = (
            _checked(rmatmul, op.rmatmul, (*batch, n, 1), op.dtype)
            if need_rmatmul
            else None
        )
        # stands in for A where only shape, dtype and numel are read
        self.meta = torch.empty(self.shape, dtype=op.dtype, device="meta")

    def dense(self) -> Tensor:
        """``A`` formed as ``matmul(I)`` (differentiable where grad is on)."""
        *batch, _, n = self.shape
        eye = torch.eye(n, dtype=self.dtype, device=self.device)
        return self.matmul(eye.expand(*batch, n, n).contiguous())

    def small(self) -> bool:
        """Small enough to form (``m n min(m, n) <= DENSE_FALLBACK_MAX``)."""
        return TK._small(self.meta)

    def size(self) -> str:
        m, n = self.shape[-2:]
        return f"m n min(m, n) = {m * n * min(m, n):.3g} > {TK.DENSE_FALLBACK_MAX:.3g}"


def _check_backend(name: str, backend: Any) -> None:
    if backend not in BACKENDS:
        raise BackendError(
            f"{name}: backend must be one of {BACKENDS}, got {backend!r}"
        )
    if backend == "julia":
        raise BackendError(
            f"{name}: a linear operator runs on the native backend only (its "
            "products are Python callables, which Julia cannot call); use "
            "backend='torch', or pass the matrix as a tensor"
        )


def _plan(which: str, A: _Op, kw: dict, method: str) -> tuple[str, Any]:
    """``("dense", None)`` (form ``A`` and take the full path) or
    ``("iterate", cfg)``. ``full`` forms ``A``; ``randomized`` (subspace
    iteration) and ``krylov`` (block Krylov) iterate; ``auto`` decides as for
    a tensor where ``A`` is small enough to form (``DENSE_FALLBACK_MAX``), and
    otherwise iterates as ``randomized`` does (a result it cannot certify
    comes with a ``ConvergenceWarning``), handing over to block Krylov where
    its cost model predicts that cheaper, as for a tensor."""
    if method not in F.TOP_K_METHODS:
        raise InputError(
            f"{which}_topk: method must be 'auto', 'full', 'randomized' or "
            f"'krylov', got {method!r}"
        )
    rest = (kw["oversample"], kw["n_iter"], kw["backward_rtol"], kw["backward_maxiter"])
    path, cfg = F.top_k_method(which, A.meta, kw["k"], method, *rest)
    if method == "full" or A.meta.numel() == 0:  # an empty batch costs nothing
        return "dense", None
    if method == "auto":
        if A.small():
            return ("dense", None) if path == "full" else ("iterate", cfg)
        _, cfg = F.top_k_method(which, A.meta, kw["k"], "randomized", *rest)
        cfg = cfg._replace(switch=True)
    return "iterate", cfg


def _not_certified(name: str, k: int, method: str, A: _Op, why: str) -> None:
    if method in ("randomized", "krylov"):
        remedy = (
            "raise n_iter or oversample, or use method='auto' (which forms an "
            f"operator with m n min(m, n) <= {TK.DENSE_FALLBACK_MAX:.3g} and "
            "takes the full decomposition)"
        )
    else:
        remedy = (
            f"the operator is too large to form for the full decomposition "
            f"({A.size()}); raise oversample (so that the block reaches past a "
            "gap of the spectrum) or n_iter, or choose k at a gap"
        )
    warn(
        f"{name}(k={k}, method='{method}'): not certified: {why}. The result is "
        f"approximate; {remedy}.",
        ConvergenceWarning,
    )


def _check_k(name: str, A: _Op, k: Any) -> None:
    """``k`` is required (``check_keywords`` takes None for "no k")."""
    if k is None:
        raise InputError(
            f"{name}: k must be an integer >= 0 (the maximum rank; a k past "
            f"min(m, n) = {min(A.shape[-2:])} keeps every value), got None"
        )


def _operator_rule(name: str, kw: dict, multiplets: Any, return_error: Any) -> Any:
    """The truncation rule of an operator call: the rules that cut inside the
    top ``k`` (``atol``, ``rtol``, ``multiplets`` "cut" or "down"); what
    needs the spectrum past ``k`` or ``||A||_F`` raises ``InputError``."""
    rule = truncation_rule(name, kw, multiplets, return_error)
    if rule.beyond_k:
        what = (
            "error_atol / error_rtol (the discarded weight)"
            if rule.by_error
            else "multiplets='up'"
        )
        raise InputError(
            f"{name}: {what} depends on the spectrum past the top k, which the "
            "linear-operator form does not compute; pass the matrix as a tensor "
            "(method='auto' then takes the full decomposition)"
        )
    if return_error:
        raise InputError(
            f"{name}: return_error=True needs ||A||_F (the truncation error is "
            "||A - U_r S_r V_r^H||_F), which a linear operator does not give; "
            "pass the matrix as a tensor, or compute the error from a norm of "
            "A you know"
        )
    return rule


# the full path, taken by the formed matrix, does not iterate
_NO_ITERATION = {
    "oversample": None,
    "n_iter": None,
    "backward_rtol": None,
    "backward_maxiter": 500,
}


def _iteration(numeric: dict) -> dict:
    """The keywords that configure the iteration (``check_top_k_keywords``)."""
    names = ("oversample", "n_iter", "backward_rtol", "backward_maxiter")
    return {name: numeric[name] for name in names}


class _Call(NamedTuple):
    """A checked operator call: what the route and the result read."""

    A: _Op
    k: int  # clipped to min(m, n)
    largest: bool | None  # eigh_topk only
    rule: Any
    opts: Options
    plan: str  # "dense" or "iterate"
    cfg: Any  # the iteration's configuration where it iterates


def _check_call(
    which: str,
    op: Any,
    k: Any,
    method: str,
    gauge: Any,
    backend: Any,
    trunc: dict,
    numeric: dict,
    return_error: Any,
    largest: Any = None,
) -> _Call:
    """The arguments of :func:`svd_topk` (``which="svd"``) or :func:`eigh_topk`
    (``"eigh"``) for an operator ``op`` checked, in the order their errors
    are raised, and the call planned (``_plan``)."""
    name, svd = f"{which}_topk", which == "svd"
    _check_backend(name, backend)
    _check_operator(name, op, need_rmatmul=svd)
    A = _Op(op, need_rmatmul=svd, who=name)
    if not svd and A.shape[-1] != A.shape[-2]:
        raise ShapeError(
            f"eigh_topk: op must be square, shape (*, n, n), got shape {A.shape}"
        )
    _check_k(name, A, k)
    names = ("atol", "rtol", "error_atol", "error_rtol", "min_rank")
    tols = {key: trunc[key] for key in names}
    kw = check_keywords(name, A.meta, k=k, **tols, **numeric)
    check_top_k_keywords(name, kw["k"], method, **_iteration(numeric))
    if not svd:
        largest = check_flag(name, "largest", largest)
    rule = _operator_rule(name, kw, trunc["multiplets"], return_error)
    k = min(kw["k"], *A.shape[-2:])
    opts = options(
        kw["degeneracy_atol"], kw["broadening"], gauge, kw["gauge_atol"], op=name
    )
    plan, cfg = _plan(which, A, {**kw, "k": max(k, 1)}, method)
    return _Call(A, k, largest, rule, opts, plan, cfg)


def _iterate(which: str, call: _Call) -> Any:
    """The certified iteration's block (``forward/topk.py``), under
    ``no_grad``: the gradient goes through the products ``_svd_factors`` /
    ``_eigh_factors`` make, not through these. None where the plan forms
    ``A``, or where the iteration gives up to the full path (``auto``:
    uncertified, or over its budget)."""
    if call.plan != "iterate":
        return None
    A, k, cfg, opts = call.A, call.k, call.cfg, call.opts
    with torch.no_grad():
        if which == "svd":
            return F.svd_topk(
                A.matmul, A.rmatmul, A.shape, A.dtype, A.device, k, cfg, opts
            )
        return F.eigh_topk(
            A.matmul, A.shape, A.dtype, A.device, k, call.largest, cfg, opts
        )
