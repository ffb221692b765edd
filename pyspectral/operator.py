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

# The helpers that moved to _operator_plan / _operator_grad stay importable
# from here under their old names (``x as x``: an explicit re-export).
from ._operator_grad import _backward_warning as _backward_warning
from ._operator_grad import _eigh_cotangent as _eigh_cotangent
from ._operator_grad import _eigh_factors, _hermitian, _svd_factors
from ._operator_grad import _EighTopKOperator as _EighTopKOperator
from ._operator_grad import _hermitian_cotangent as _hermitian_cotangent
from ._operator_grad import _split_svd_gradient as _split_svd_gradient
from ._operator_grad import _svd_cotangents as _svd_cotangents
from ._operator_grad import _SVDTopKOperator as _SVDTopKOperator
from ._operator_grad import _tracked as _tracked
from ._operator_plan import _DTYPES as _DTYPES
from ._operator_plan import (
    _NO_ITERATION,
    _check_call,
    _check_operator,
    _device,
    _iterate,
    _not_certified,
)
from ._operator_plan import _check_backend as _check_backend
from ._operator_plan import _check_k as _check_k
from ._operator_plan import _checked as _checked
from ._operator_plan import _finite as _finite
from ._operator_plan import _iteration as _iteration
from ._operator_plan import _Op as _Op
from ._operator_plan import _operator_rule as _operator_rule
from ._operator_plan import _plan as _plan
from .eigh import EighResult, eigh
from .svd import SVDResult, svd
from .truncation import eigh_ranks, svd_ranks, truncated_eigh, truncated_svd

__all__ = ["LinearOperator", "svd_topk", "eigh_topk"]


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
        degeneracy_atol=degeneracy_atol, broadening=broadening, gauge_atol=gauge_atol,
        oversample=oversample, n_iter=n_iter, backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )  # fmt: skip
    trunc = dict(atol=atol, rtol=rtol, error_atol=error_atol, error_rtol=error_rtol,
                 multiplets=multiplets, min_rank=min_rank)  # fmt: skip
    if isinstance(op, Tensor):  # the same call as svd
        return svd(
            op, k=k, method=method, gauge=gauge, backend=backend,
            return_error=return_error, **trunc, **numeric,
        )  # fmt: skip
    call = _check_call(
        "svd", op, k, method, gauge, backend, trunc, numeric, return_error
    )
    A, k = call.A, call.k
    if k == 0:  # nothing to compute
        return _empty_svd(A)
    res = _iterate("svd", call)
    if res is None:  # formed: the full path, differentiable through A itself
        full = {**numeric, **_NO_ITERATION}
        return svd(A.dense(), k=k, method="full", gauge=gauge, **trunc, **full)
    if res.message:
        _not_certified("svd_topk", k, method, A, res.message)
    out = _svd_factors(call, res)
    full = res.S.shape[-1] == min(A.shape[-2:])
    r, _ = svd_ranks(res.S, call.rule._replace(k=k), call.opts, False, complete=full)
    return SVDResult(*truncated_svd(None, *out, r, k, False, full=False))


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
        degeneracy_atol=degeneracy_atol, broadening=broadening, gauge_atol=gauge_atol,
        oversample=oversample, n_iter=n_iter, backward_rtol=backward_rtol,
        backward_maxiter=backward_maxiter,
    )  # fmt: skip
    trunc = dict(atol=atol, rtol=rtol, error_atol=error_atol, error_rtol=error_rtol,
                 multiplets=multiplets, min_rank=min_rank)  # fmt: skip
    if isinstance(op, Tensor):  # the same call as eigh
        return eigh(
            op, k=k, largest=largest, method=method, gauge=gauge, backend=backend,
            return_error=return_error, **trunc, **numeric,
        )  # fmt: skip
    call = _check_call("eigh", op, k, method, gauge, backend, trunc, numeric,
                       return_error, largest)  # fmt: skip
    A, k, largest = call.A, call.k, call.largest
    if k == 0:  # nothing to compute
        return _empty_eigh(A)
    res = _iterate("eigh", call)
    if res is None:  # formed: the full path, differentiable through A itself
        full = {**numeric, **_NO_ITERATION}
        H = _hermitian(A.dense())
        return eigh(
            H, k=k, largest=largest, method="full", gauge=gauge, **trunc, **full
        )
    if res.message:
        _not_certified("eigh_topk", k, method, A, res.message)
    out = _eigh_factors(call, res)
    rule = call.rule._replace(k=k)
    r, _ = eigh_ranks(res.S, rule, largest, call.opts, False, kept_first=k)
    return EighResult(*truncated_eigh(None, *out, r, k, largest, False))


# ----------------------------------------------------------------- empty


def _empty_svd(A: _Op) -> SVDResult:
    """The factors for ``k = 0``, made without a product."""
    *batch, m, n = A.shape
    real = A.meta.real.dtype
    return SVDResult(
        torch.zeros((*batch, m, 0), dtype=A.dtype, device=A.device),
        torch.zeros((*batch, 0), dtype=real, device=A.device),
        torch.zeros((*batch, 0, n), dtype=A.dtype, device=A.device),
    )


def _empty_eigh(A: _Op) -> EighResult:
    """The eigenpairs for ``k = 0``, made without a product."""
    *batch, n, _ = A.shape
    w0 = torch.zeros((*batch, 0), dtype=A.meta.real.dtype, device=A.device)
    V0 = torch.zeros((*batch, n, 0), dtype=A.dtype, device=A.device)
    return EighResult(w0, V0)
