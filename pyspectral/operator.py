"""Top-k of a matrix that is never formed: ``LinearOperator``, ``svd_topk`` and
``eigh_topk``, on the certified iteration of ``forward/topk.py`` and the
factored pullback of ``pullbacks/truncated.py``.

How the gradient reaches the operator's tensors. The pullback returns
``dL/dA = P Q`` with ``P = [U_d, X]`` and ``Q = [T; V_k^H]`` (``T`` is
``d x n``), i.e. ``dL = Re<U_d T, dA> + Re<X V_k^H, dA>``
``= Re<T^H, dA^H U_d> + Re<X, dA V_k>``. So the forward computes, once and
with autograd on, ``Z = A V_k`` and ``W = A^H U_d`` through the user's
callables (``V_k``, ``U_d`` detached), and the autograd Function below takes
``Z`` and ``W`` as its differentiable inputs: its backward returns
``grad_Z = X`` and ``grad_W = T^H``, and autograd carries them through the
callables into whatever tensors they use, exactly as it would carry
``dL/dA`` through ``A``. ``eigh`` (``A`` Hermitian, so ``dA`` is): the
gradient is ``V_d T + X V_k^H / 2``, and with ``Z = A V_d``,
``grad_Z = T^H + [X / 2, 0]`` (``Re<N, dA> = Re<N^H, dA>`` for Hermitian
``dA``). Every other product (the iteration, the backward's CG) runs under
``no_grad`` on ``(*, n, p)`` / ``(*, m, p)`` blocks, so a distributed or
sharded product plugs in unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor

from . import topk as TK
from ._backend import BACKENDS
from ._settings import options
from ._validation import (
    _as_integer,
    check_flag,
    check_keywords,
    check_top_k_keywords,
    truncation_rule,
)
from ._warnings import warn
from .common.defaults import peek
from .eigh import EighResult, eigh
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
from .pullbacks.truncated import (
    dense_truncated_eigh_pullback,
    dense_truncated_svd_pullback,
    pad_block,
    truncated_eigh_pullback,
    truncated_svd_pullback,
)
from .svd import SVDResult, svd
from .truncation import eigh_ranks, svd_ranks, truncated_eigh, truncated_svd

__all__ = ["LinearOperator", "svd_topk", "eigh_topk"]

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


class LinearOperator:
    r"""LinearOperator(shape, matmul, rmatmul=None, *, dtype, device="cpu")

    A matrix ``A`` of shape ``(*, m, n)`` known only through its products:

    .. math::
        \mathrm{matmul}(X) = A X, \qquad \mathrm{rmatmul}(Y) = A^{H} Y

    for ``X`` of shape ``(*, n, p)`` and ``Y`` of shape ``(*, m, p)``
    (results ``(*, m, p)`` and ``(*, n, p)``, of ``dtype``; ``*`` is zero or
    more batch dimensions, as in ``shape``). Both must be linear in ``X`` and
    differentiable torch code: :func:`svd_topk` and :func:`eigh_topk` send
    the gradient through them into the tensors they use. ``rmatmul`` is
    needed by :func:`svd_topk` only; :func:`eigh_topk` needs a Hermitian
    ``A`` (``rmatmul = matmul``) and calls ``matmul`` alone.

    Any object with the attributes ``shape``, ``dtype``, ``device``,
    ``matmul`` (and ``rmatmul`` for ``svd_topk``) is accepted in its place.

    ``dtype`` is float32, float64, complex64 or complex128; ``device`` a
    ``torch.device`` or its name. The constructor checks these and the
    shape; the products' shapes, dtypes and finiteness are checked each
    time :func:`svd_topk` or :func:`eigh_topk` calls them (``InputError`` /
    ``NonFiniteError`` there).

    Raises:
        InputTypeError: ``matmul`` (or a given ``rmatmul``) is not callable,
            or ``device`` is not a device.
        ShapeError: ``shape`` is not a tuple of at least 2 non-negative
            integers.
        DtypeError: ``dtype`` is not float32, float64, complex64 or
            complex128.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> B = torch.randn(500, 8, dtype=torch.float64, generator=g)
        >>> C = torch.randn(8, 400, dtype=torch.float64, generator=g)
        >>> op = LinearOperator((500, 400), lambda X: B @ (C @ X),
        ...                     lambda Y: C.mH @ (B.mH @ Y), dtype=B.dtype)
        >>> op
        LinearOperator(shape=(500, 400), dtype=torch.float64, device=cpu,
                       rmatmul=True)
        >>> op.matmul(torch.ones(400, 2, dtype=torch.float64)).shape
        torch.Size([500, 2])
    """

    def __init__(
        self,
        shape: tuple[int, ...] | torch.Size,
        matmul: Callable[[Tensor], Tensor],
        rmatmul: Callable[[Tensor], Tensor] | None = None,
        *,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else shape
        self.matmul, self.rmatmul = matmul, rmatmul
        self.dtype, self.device = dtype, _device("LinearOperator", device)
        _check_operator("LinearOperator", self, need_rmatmul=rmatmul is not None)
        self.shape = torch.Size(self.shape)

    def __repr__(self) -> str:
        return (
            f"LinearOperator(shape={tuple(self.shape)}, dtype={self.dtype}, "
            f"device={self.device}, rmatmul={self.rmatmul is not None})"
        )


# ------------------------------------------------------------- validation


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


def _backward_warning(name: str, A: _Op, maxiter: int, residual: float, opts):
    warn(
        f"{name} backward: the Sylvester solve did not converge in {maxiter} "
        f"iterations (relative residual {residual:.2g}): there is no gap "
        "between the kept spectrum and the rest beyond the certified block, "
        f"and the operator is too large to form for the exact dense fallback "
        f"({A.size()}). The gradient is approximate; choose k at a gap, or "
        "raise oversample or backward_maxiter.",
        ConvergenceWarning,
        opts.site,
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


def _tracked(t: Tensor) -> bool:
    """Whether autograd (or torch.func) follows ``t``."""
    return t.requires_grad or is_functorch_wrapped_tensor(t)


# ------------------------------------------------------------------- svd


class _SVDTopKOperator(torch.autograd.Function):
    """Returns the (already computed) top-k triplets; differentiable inputs
    ``Z = A V_k`` and ``W = A^H U_d``, whose cotangents are ``X`` and ``T^H``
    (module docstring). The other tensor inputs are the certified block and
    the extras, not differentiable."""

    @staticmethod
    def forward(Z, W, Uk, Sk, Vhk, U, S, V, Ue, Se, A, k, cfg, opts) -> tuple:
        return tuple(
            t.clone(memory_format=torch.contiguous_format) for t in (Uk, Sk, Vhk)
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        Z, W, _, _, _, U, S, V, Ue, Se, ctx.A, ctx.k, ctx.cfg, ctx.opts = inputs
        ctx.save_for_backward(Z, W, U, S, V, Ue, Se)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gU: Tensor, gS: Tensor, gVh: Tensor) -> tuple:
        Z, W, U, S, V, Ue, Se = ctx.saved_tensors
        with torch.no_grad():
            gZ, gW = _svd_cotangents(ctx, (U, S, V), (Ue, Se), (gU, gS, gVh))
        return (TK._first_order(gZ, Z), TK._first_order(gW, W), *(None,) * 12)

    jvp = staticmethod(TK._no_forward_mode)


def _svd_cotangents(ctx: Any, block: tuple, extras: tuple, cot: tuple) -> tuple:
    """``(grad_Z, grad_W)`` from the factors ``P = [U_d, X]``,
    ``Q = [T; V_k^H]`` of the pullback (``grad_W = None``: zero)."""
    A, k, cfg, opts = ctx.A, ctx.k, ctx.cfg, ctx.opts
    U, S, V = block
    gU, gS, gVh = cot
    out = truncated_svd_pullback(
        A.matmul, A.rmatmul, *block, k, *cot, opts, cfg.rtol, cfg.maxiter, extras
    )
    if out is None:
        return None, None
    P, Q, residual = out
    if gU is None and gVh is None:  # dL/dA = (U_k diag(gS)) V_k^H = P V_k^H
        return P, None
    d = S.shape[-1]
    if residual > TK.RTOL_SLACK * cfg.rtol:
        if A.small():
            gA = dense_truncated_svd_pullback(A.dense(), *block, k, *cot, opts)
            return _split_svd_gradient(gA, U[..., :k], V[..., :k], d)
        _backward_warning("svd_topk", A, cfg.maxiter, residual, opts)
    return P[..., d:], Q[..., :d, :].mH


def _split_svd_gradient(G: Tensor, Uk: Tensor, Vk: Tensor, d: int) -> tuple:
    """``(grad_Z, grad_W)`` for a dense top-k gradient ``G``, which has the
    form ``U_k Y^H + X V_k^H`` (cotangents on the kept triplets only), so
    ``G = G V_k V_k^H + U_k U_k^H G (I - V_k V_k^H)``: ``grad_Z = G V_k`` and
    ``grad_W = [(I - V_k V_k^H) G^H U_k, 0]``."""
    GhU = G.mH @ Uk
    gW = GhU - Vk @ (Vk.mH @ GhU)
    return G @ Vk, pad_block(gW, d)


def svd_topk(
    op: Any,
    k: int,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    error_atol: float | None = None,
    error_rtol: float | None = None,
    multiplets: str = "cut",
    min_rank: int | None = None,
    return_error: bool = False,
    method: str = "auto",
    oversample: int | None = None,
    n_iter: int | None = None,
    backward_rtol: float | None = None,
    backward_maxiter: int = 500,
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    backend: str = "auto",
) -> SVDResult:
    r"""svd_topk(op, k, *, method="auto", ...) -> (U, S, Vh)

    The top-``k`` singular triplets of a matrix given as a tensor or as a
    :class:`LinearOperator` (never formed), with the exact top-k gradient.

    .. math::
        A V_k = U_k \operatorname{diag}(S_k), \qquad
        A^{H} U_k = V_k \operatorname{diag}(S_k), \qquad
        S_1 \ge \dots \ge S_k

    ``op`` of shape ``(*, m, n)``; ``U: (*, m, k)``, ``S: (*, k)``,
    ``Vh: (*, k, n)``. A tensor ``op`` is the same call as
    ``svd(op, k=k, ...)``. For an operator, the gradient flows through
    ``op.matmul`` and ``op.rmatmul`` into every tensor they use (factors, a
    sparse matrix's values, convolution weights) through the two products
    ``A V_k`` and ``A^H U_d``, computed once in the forward with autograd on
    (the derivation is in this module's docstring); every other product (the
    iteration, the backward's conjugate gradients) runs under ``no_grad`` on
    ``(*, n, p)`` and ``(*, m, p)`` blocks.

    ``method``: ``"randomized"`` runs the certified iteration of :func:`svd`
    and warns (``ConvergenceWarning``) where it cannot certify; ``"full"``
    forms ``A = op.matmul(I)`` and takes the full SVD; ``"auto"`` (default)
    decides as :func:`svd` does where ``m n min(m, n) <= DENSE_FALLBACK_MAX``
    (``2048**3``, in ``pyspectral.topk``), i.e. it forms ``A`` once for a
    small operator or an uncertified iteration, and above that size iterates
    as ``"randomized"`` (it cannot fall back: an uncertified result comes
    with a ``ConvergenceWarning`` giving the residual and the remedy). The
    backward's dense fallback (a Sylvester solve that does not converge) is
    taken only at that size too, else it warns. The work budget of the
    iteration is the one of :func:`svd` (the cost of a dense full SVD);
    ``n_iter`` caps the iterations. Other keywords as in :func:`svd`.
    ``backend="julia"`` raises ``BackendError`` for an operator (its
    products are Python callables).

    Truncation rules as in :func:`svd`, ``k`` the maximum rank: for an
    operator, those that cut inside the top ``k`` (``atol``, ``rtol``,
    ``multiplets="cut"`` or ``"down"``); ``error_atol``, ``error_rtol``,
    ``multiplets="up"`` (the spectrum past ``k``) and ``return_error=True``
    (``||A||_F``) raise ``InputError`` (a tensor takes them all). ``k = 0``
    returns empty factors without a product.

    The gradient is first order; ``torch.func.grad``, ``vjp`` and
    ``jacrev`` work over the tensors the callables use (``vmap`` does not:
    give the operator batch dimensions instead).

    Dtypes float32, float64, complex64, complex128 (``U``, ``Vh`` of that
    dtype, ``S`` real); conventions (``Vh`` is ``V^H``, phases and the
    ``gauge`` policy) and exactness as in :func:`svd`: the gradient includes
    the exact coupling to the discarded singular pairs, and is exact for
    losses that see ``U``, ``V`` through complete clusters and ``S``
    through symmetric functions.

    Returns:
        ``(U, S, Vh)``, a named tuple (:class:`SVDResult`); ``S`` real and
        descending.

    Raises:
        InputTypeError: ``op`` is neither a tensor nor an operator (no
            ``shape``, ``dtype``, ``device``, ``matmul``), or its
            ``matmul`` / ``rmatmul`` is not callable.
        ShapeError: ``op.shape`` is not ``(*, m, n)``.
        DtypeError: ``op.dtype`` is not float32, float64, complex64 or
            complex128.
        InputError: ``k`` missing or out of range, a keyword invalid or
            unused (as in :func:`svd`), a rule the operator form cannot
            take (above), or a product of the wrong shape or dtype.
        NonFiniteError: a product returned NaN or Inf.
        BackendError: ``backend="julia"`` for an operator (for a tensor: as
            in :func:`svd`).
        GaugeError: in the backward, under ``gauge="raise"``, when the loss
            depends on the basis inside a degenerate cluster.
        DerivativeError: a second derivative through the iterative path, or
            forward mode (``jvp``, ``jacfwd``) on an operator.

    Warns:
        ConvergenceWarning: the iteration, or the backward's solve, could
            not be certified (the message gives the residual and the remedy).
        GaugeWarning: under ``gauge="warn"``, as for ``GaugeError``.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> B = torch.randn(300, 12, dtype=torch.float64, generator=g)
        >>> C = torch.randn(12, 200, dtype=torch.float64, generator=g)
        >>> B, C = B.requires_grad_(), C.requires_grad_()
        >>> op = LinearOperator((300, 200), lambda X: B @ (C @ X),
        ...                     lambda Y: C.mH @ (B.mH @ Y), dtype=B.dtype)
        >>> U, S, Vh = svd_topk(op, 4)
        >>> U.shape, S.shape, Vh.shape
        (torch.Size([300, 4]), torch.Size([4]), torch.Size([4, 200]))
        >>> S.sum().backward()  # into B.grad and C.grad
        >>> B.grad.shape, C.grad.shape
        (torch.Size([300, 12]), torch.Size([12, 200]))
        >>> bool(torch.dist(S, torch.linalg.svdvals(B @ C)[:4]) < 1e-10)
        True
    """
    numeric = dict(
        degeneracy_atol=degeneracy_atol,
        broadening=broadening,
        gauge_atol=gauge_atol,
        oversample=oversample,
        n_iter=n_iter,
        backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )
    trunc = dict(
        atol=atol,
        rtol=rtol,
        error_atol=error_atol,
        error_rtol=error_rtol,
        multiplets=multiplets,
        min_rank=min_rank,
    )
    if isinstance(op, Tensor):
        return svd(
            op,
            k=k,
            method=method,
            gauge=gauge,
            backend=backend,
            return_error=return_error,
            **trunc,
            **numeric,
        )
    _check_backend("svd_topk", backend)
    _check_operator("svd_topk", op, need_rmatmul=True)
    A = _Op(op, need_rmatmul=True, who="svd_topk")
    _check_k("svd_topk", A, k)
    names = ("atol", "rtol", "error_atol", "error_rtol", "min_rank")
    tols = {name: trunc[name] for name in names}
    kw = check_keywords("svd_topk", A.meta, k=k, **tols, **numeric)
    check_top_k_keywords("svd_topk", kw["k"], method, **_iteration(numeric))
    rule = _operator_rule("svd_topk", kw, multiplets, return_error)
    *batch, m, n = A.shape
    k = min(kw["k"], m, n)
    opts = options(
        kw["degeneracy_atol"], kw["broadening"], gauge, kw["gauge_atol"], op="svd_topk"
    )
    plan, cfg = _plan("svd", A, {**kw, "k": max(k, 1)}, method)
    if k == 0:  # nothing to compute
        real = A.meta.real.dtype
        return SVDResult(
            torch.zeros((*batch, m, 0), dtype=A.dtype, device=A.device),
            torch.zeros((*batch, 0), dtype=real, device=A.device),
            torch.zeros((*batch, 0, n), dtype=A.dtype, device=A.device),
        )
    res = None
    if plan == "iterate":
        with torch.no_grad():
            res = F.svd_topk(
                A.matmul, A.rmatmul, A.shape, A.dtype, A.device, k, cfg, opts
            )
    if res is None:  # formed: the full path, differentiable through A itself
        full = {**numeric, **_NO_ITERATION}
        return svd(A.dense(), k=k, method="full", gauge=gauge, **trunc, **full)
    if res.message:
        _not_certified("svd_topk", k, method, A, res.message)
    U, S, V, d = res.U, res.S, res.V, res.d
    Uk, Sk, Vhk = U[..., :k], S[..., :k], V[..., :k].mH
    out = (Uk.contiguous(), Sk.contiguous(), Vhk.contiguous())
    if torch.is_grad_enabled():
        Z, W = A.matmul(V[..., :k]), A.rmatmul(U[..., :d])
        if _tracked(Z) or _tracked(W):
            block = (U[..., :d], S[..., :d], V[..., :d], U[..., d:], S[..., d:])
            out = _SVDTopKOperator.apply(Z, W, Uk, Sk, Vhk, *block, A, k, cfg, opts)
    full = S.shape[-1] == min(m, n)
    r, _ = svd_ranks(S, rule._replace(k=k), opts, False, complete=full)
    return SVDResult(*truncated_svd(None, *out, r, k, False, full=False))


# ------------------------------------------------------------------ eigh


class _EighTopKOperator(torch.autograd.Function):
    """Returns the (already computed) k extreme eigenpairs; differentiable
    input ``Z = A V_d``, whose cotangent is ``T^H + [X / 2, 0]``."""

    @staticmethod
    def forward(Z, wk, Vk, w, V, Ve, we, A, k, largest, cfg, opts) -> tuple:
        return tuple(t.clone(memory_format=torch.contiguous_format) for t in (wk, Vk))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        Z, _, _, w, V, Ve, we, ctx.A, ctx.k, ctx.largest, ctx.cfg, ctx.opts = inputs
        ctx.save_for_backward(Z, w, V, Ve, we)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, gw: Tensor, gV: Tensor) -> tuple:
        Z, w, V, Ve, we = ctx.saved_tensors
        with torch.no_grad():
            gZ = _eigh_cotangent(ctx, w, V, (Ve, we), gw, gV)
        return (TK._first_order(gZ, Z), *(None,) * 11)

    jvp = staticmethod(TK._no_forward_mode)


def _eigh_cotangent(ctx: Any, w: Tensor, V: Tensor, extras: tuple, gw, gV):
    """``grad_Z`` from the factors ``P = [V_d, X]``, ``Q = [T; V_k^H / 2]``
    of the pullback (the gradient ``V_d T + X V_k^H / 2``)."""
    A, k, cfg, opts = ctx.A, ctx.k, ctx.cfg, ctx.opts
    out = truncated_eigh_pullback(
        A.matmul, w, V, k, gw, gV, ctx.largest, opts, cfg.rtol, cfg.maxiter, extras
    )
    if out is None:
        return None
    P, Q, residual = out
    d = w.shape[-1]
    if gV is None:  # V_k diag(gw) V_k^H: Hermitian, grad_Z = [V_k diag(gw), 0]
        return pad_block(P, d)
    if residual > TK.RTOL_SLACK * cfg.rtol:
        if A.small():
            L = dense_truncated_eigh_pullback(
                _hermitian(A.dense()), w, V, k, gw, gV, "L", opts
            )
            return pad_block(_hermitian_cotangent((L + L.mH) / 2, V[..., :k]), d)
        _backward_warning("eigh_topk", A, cfg.maxiter, residual, opts)
    T, X = Q[..., :d, :].mH, P[..., d:]
    return torch.cat([T[..., :k] + X / 2, T[..., k:]], -1)


def _hermitian(H: Tensor) -> Tensor:
    return (H + H.mH) / 2


def _hermitian_cotangent(G: Tensor, Vk: Tensor) -> Tensor:
    """``g`` with ``(V_k g^H + g V_k^H) / 2 = G`` for a Hermitian top-k
    gradient ``G = P G + G P - P G P`` (``P = V_k V_k^H``; cotangents on the
    kept pairs only): ``g = 2 G V_k - V_k (V_k^H G V_k)``. (The triangle
    ``L`` that ``dense_truncated_eigh_pullback`` returns, off-diagonal
    entries doubled, unfolds to ``G = (L + L^H) / 2``.)"""
    GV = G @ Vk
    return 2 * GV - Vk @ (Vk.mH @ GV)


def eigh_topk(
    op: Any,
    k: int,
    *,
    largest: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    error_atol: float | None = None,
    error_rtol: float | None = None,
    multiplets: str = "cut",
    min_rank: int | None = None,
    return_error: bool = False,
    method: str = "auto",
    oversample: int | None = None,
    n_iter: int | None = None,
    backward_rtol: float | None = None,
    backward_maxiter: int = 500,
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    backend: str = "auto",
) -> EighResult:
    r"""eigh_topk(op, k, *, largest=True, ...) -> (eigenvalues, eigenvectors)

    The ``k`` largest (``largest=True``) or smallest eigenpairs of a Hermitian
    matrix given as a tensor or as a :class:`LinearOperator` (never formed),
    with the exact top-k gradient.

    .. math::
        A V_k = V_k \operatorname{diag}(\Lambda_k), \qquad A = A^{H}

    ``op`` of shape ``(*, n, n)``; eigenvalues ``(*, k)`` ascending,
    eigenvectors ``(*, n, k)``. A tensor ``op`` is the same call as
    ``eigh(op, k=k, largest=largest, ...)`` (which reads the lower
    triangle). An operator must be Hermitian for every value of the tensors
    it uses (not checked), and only ``op.matmul`` is called; the gradient
    flows through it into those tensors through the product ``A V_d``,
    computed once in the forward with autograd on. ``method``, the dense
    fallbacks and the other keywords as in :func:`svd_topk` (``"full"``
    forms ``(A + A^H) / 2`` with ``A = op.matmul(I)``). Truncation rules as
    in :func:`eigh`, with the operator restrictions of :func:`svd_topk`.

    Dtypes, conventions (phases, the ``gauge`` policy) and exactness as in
    :func:`eigh`; the gradient includes the exact coupling to the rest of
    the spectrum.

    Returns:
        ``(eigenvalues, eigenvectors)``, a named tuple (:class:`EighResult`);
        eigenvalues real and ascending.

    Raises:
        InputTypeError: ``op`` is neither a tensor nor an operator, its
            ``matmul`` is not callable, or ``largest`` is not a bool.
        ShapeError: ``op.shape`` is not ``(*, n, n)``.
        DtypeError: ``op.dtype`` is not float32, float64, complex64 or
            complex128.
        InputError: ``k`` missing or out of range, a keyword invalid or
            unused, a rule the operator form cannot take (as in
            :func:`svd_topk`), or a product of the wrong shape or dtype.
        NonFiniteError: a product returned NaN or Inf.
        BackendError: ``backend="julia"`` for an operator.
        GaugeError: in the backward, under ``gauge="raise"``, when the loss
            depends on the basis inside a degenerate cluster.
        DerivativeError: a second derivative through the iterative path, or
            forward mode on an operator.

    Warns:
        ConvergenceWarning: the iteration, or the backward's solve, could
            not be certified.
        GaugeWarning: under ``gauge="warn"``, as for ``GaugeError``.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> B = torch.randn(300, 6, dtype=torch.float64, generator=g)
        >>> B = B.requires_grad_()
        >>> op = LinearOperator((300, 300), lambda X: B @ (B.mH @ X) + X,
        ...                     dtype=B.dtype)
        >>> w, V = eigh_topk(op, 3)  # the 3 largest, ascending
        >>> w.shape, V.shape, bool(w[0] <= w[1] <= w[2])
        (torch.Size([3]), torch.Size([300, 3]), True)
        >>> w.sum().backward()  # into B.grad
        >>> bool(torch.dist(op.matmul(V), V * w) < 1e-9)
        True
    """
    numeric = dict(
        degeneracy_atol=degeneracy_atol,
        broadening=broadening,
        gauge_atol=gauge_atol,
        oversample=oversample,
        n_iter=n_iter,
        backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )
    trunc = dict(
        atol=atol,
        rtol=rtol,
        error_atol=error_atol,
        error_rtol=error_rtol,
        multiplets=multiplets,
        min_rank=min_rank,
    )
    if isinstance(op, Tensor):
        return eigh(
            op,
            k=k,
            largest=largest,
            method=method,
            gauge=gauge,
            backend=backend,
            return_error=return_error,
            **trunc,
            **numeric,
        )
    _check_backend("eigh_topk", backend)
    _check_operator("eigh_topk", op, need_rmatmul=False)
    A = _Op(op, need_rmatmul=False, who="eigh_topk")
    if A.shape[-1] != A.shape[-2]:
        raise ShapeError(
            f"eigh_topk: op must be square, shape (*, n, n), got shape {A.shape}"
        )
    _check_k("eigh_topk", A, k)
    names = ("atol", "rtol", "error_atol", "error_rtol", "min_rank")
    tols = {name: trunc[name] for name in names}
    kw = check_keywords("eigh_topk", A.meta, k=k, **tols, **numeric)
    check_top_k_keywords("eigh_topk", kw["k"], method, **_iteration(numeric))
    largest = check_flag("eigh_topk", "largest", largest)
    rule = _operator_rule("eigh_topk", kw, multiplets, return_error)
    *batch, n, _ = A.shape
    k = min(kw["k"], n)
    opts = options(
        kw["degeneracy_atol"], kw["broadening"], gauge, kw["gauge_atol"], op="eigh_topk"
    )
    plan, cfg = _plan("eigh", A, {**kw, "k": max(k, 1)}, method)
    if k == 0:  # nothing to compute
        w0 = torch.zeros((*batch, 0), dtype=A.meta.real.dtype, device=A.device)
        V0 = torch.zeros((*batch, n, 0), dtype=A.dtype, device=A.device)
        return EighResult(w0, V0)
    res = None
    if plan == "iterate":
        with torch.no_grad():
            res = F.eigh_topk(
                A.matmul, A.shape, A.dtype, A.device, k, largest, cfg, opts
            )
    if res is None:  # formed: the full path, differentiable through A itself
        full = {**numeric, **_NO_ITERATION}
        H = _hermitian(A.dense())
        return eigh(
            H, k=k, largest=largest, method="full", gauge=gauge, **trunc, **full
        )
    if res.message:
        _not_certified("eigh_topk", k, method, A, res.message)
    w, V, d = res.S, res.U, res.d
    wk, Vk = w[..., :k], V[..., :k]
    out = (wk.contiguous(), Vk.contiguous())
    if torch.is_grad_enabled():
        Z = A.matmul(V[..., :d])
        if _tracked(Z):
            block = (w[..., :d], V[..., :d], V[..., d:], w[..., d:])
            out = _EighTopKOperator.apply(Z, wk, Vk, *block, A, k, largest, cfg, opts)
    r, _ = eigh_ranks(w, rule._replace(k=k), largest, opts, False, kept_first=k)
    return EighResult(*truncated_eigh(None, *out, r, k, largest, False))
