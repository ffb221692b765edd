"""Hermitian eigendecomposition with stable gradients: ``eigh``, ``eigvalsh``
and the spectral matrix functions ``matrix_function`` (``V f(L) Vh``).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch  # noqa: F401  (the docstrings' examples run in this namespace)
from torch import Tensor

from . import _linalg, _ops

# What moved to the private modules (the autograd Functions, matrix_function
# and its machinery, the checks and routes) stays importable from here under
# its old name (``x as x``: an explicit re-export) where other modules use it.
from ._eigh_autograd import _decompose
from ._eigh_plan import _check, _check_eigh, _route
from ._matrix_function import _matfun as _matfun
from ._matrix_function import matrix_function
from ._route import compiled, on_julia, with_out
from ._settings import gradient_convention, options
from ._validation import at_defaults, keyword_defaults
from ._values import differentiated
from .pullbacks.eigh import eigh_pullback
from .truncation import TruncatedEighResult

__all__ = ["EighResult", "eigh", "eigvalsh", "matrix_function", "eigh_pullback"]


class EighResult(NamedTuple):
    """The result of :func:`eigh` and :func:`eigh_topk`:
    ``A = V diag(eigenvalues) V^H`` with ``V = eigenvectors``.

    ``eigenvalues: (*, r)`` real (float32 or float64, the precision of
    ``A``) and ascending; ``eigenvectors: (*, n, r)`` of ``A``'s dtype, one
    eigenvector per column; ``r = n``, or the kept width of a top-k or
    truncated call. A named tuple, so it unpacks as ``w, V = eigh(A)``;
    constructing one checks nothing.

    Example::

        >>> A = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
        >>> result = eigh(A)
        >>> type(result).__name__, result._fields
        ('EighResult', ('eigenvalues', 'eigenvectors'))
        >>> result.eigenvalues.round(decimals=10)
        tensor([1., 2.], dtype=torch.float64)
    """

    eigenvalues: Tensor
    eigenvectors: Tensor


# ------------------------------------------------------------ public API


def eigh(
    A: Tensor,
    UPLO: str = "L",
    *,
    backend: str = "auto",
    gradient: str | None = None,
    check_hermitian: bool = False,
    hermitian_tol: float | None = None,
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    k: int | None = None,
    largest: bool = True,
    by: str = "value",
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
    out: tuple[Tensor, Tensor] | None = None,
) -> EighResult | TruncatedEighResult:
    r"""eigh(A, UPLO="L", *, backend="auto", ...) -> (eigenvalues, eigenvectors)

    Eigendecomposition of a Hermitian (real symmetric) matrix with a stable
    backward pass.

    .. math::
        A = V \operatorname{diag}(\Lambda) V^{H}, \qquad
        \Lambda_1 \le \Lambda_2 \le \dots

    ``A`` has shape ``(*, n, n)`` where ``*`` is zero or more batch dimensions
    (``n = 0`` and empty batches give empty results). As in
    ``torch.linalg.eigh``, ``UPLO`` is ``"L"`` or ``"U"`` in either case and
    only that triangle is read (and must be finite; the imaginary part of the
    diagonal is ignored), unless ``check_hermitian=True``, which first raises
    if ``max|A - A^H| > hermitian_tol`` for a matrix of the batch (default
    ``eps**0.75 max|A|``, per matrix; ``hermitian_tol`` without
    ``check_hermitian=True`` raises). ``A`` is float32, float64, complex64 or
    complex128 (other dtypes raise); the eigenvalues are real (float32 or
    float64), the eigenvectors (the columns of ``V``) of ``A``'s dtype. Each
    eigenvector is defined up to a phase (a sign for real input), and inside
    a degenerate cluster up to a rotation: the forward returns
    ``torch.linalg.eigh``'s choice, and the backward asks the loss not to
    depend on it (``gauge``, as in :func:`svd`).

    ``gradient``: the convention of the derivatives w.r.t. ``A``.
    ``"hermitian"`` (the default setting, torch's and JAX's; see
    :func:`set_defaults`) gives the Hermitian
    gradient ``G`` (a symmetric leaf stays symmetric under ``A -= lr *
    A.grad``) and reads a tangent ``dA`` through its Hermitian part: the
    derivatives of ``(A + A^H) / 2``. ``"triangle"`` gives the true
    gradient w.r.t. the entries read: the other triangle gets zero and the
    read triangle twice the off-diagonal entries of ``G``. The two agree on
    every Hermitian direction (any parametrisation such as
    ``eigh(X + X.mH)`` gets the same gradient under both).

    .. warning:: Gradients are finite at every spectrum and exact for
        losses that see eigenvectors through complete degenerate clusters
        (``degeneracy_atol``, default ``max|Lambda| * eps**0.75``); for
        ``V f(Lambda) V^H`` use :func:`matrix_function`. Basis-dependent
        losses trigger ``gauge``.

    With ``k``: the ``k`` largest (``largest=True``) or smallest eigenpairs,
    ascending, with the exact coupling to the rest of the spectrum in the
    gradient; ``method`` (``"full"``, ``"randomized"``, ``"krylov"``,
    ``"auto"``) and its parameters as in :func:`svd`. The iteration reads
    the ``UPLO`` triangle like the full path; it converges where the wanted
    end of the spectrum is separated from the rest (``auto`` takes the full
    path, and the iterative methods warn, where it is not).

    Truncation as in :func:`svd`, by order: the kept eigenpairs are always
    the ``r`` at the wanted end, and the rules read the eigenvalues from it,
    ``x = lambda`` descending (``largest=True``) or ``x = -lambda`` from the
    smallest (``largest=False``): ``k`` at most; ``atol``, ``rtol`` keep the
    ``x_i > max(atol, rtol |x_1|)`` (``|x_1|``: the extreme eigenvalue at the
    wanted end, the ``S_1`` of ``svd``; a positive semidefinite ``A`` keeps
    the ``lambda_i > max(atol, rtol lambda_max)``); ``error_atol``,
    ``error_rtol`` keep the fewest with ``||lambda_discarded||_2 <=
    max(error_atol, error_rtol ||lambda||_2)`` (every discarded eigenvalue
    counts, at either end); ``multiplets`` (``"cut"``, ``"down"``, ``"up"``:
    towards fewer or more kept pairs) and the floor ``min_rank`` as in
    :func:`svd`. ``by="magnitude"`` ranks the eigenvalues by ``|lambda|``
    instead (as MatrixAlgebraKit's and ITensor's truncations do; the rules
    then read ``x = |lambda|``; with ``largest=True``, on the full
    decomposition) and returns the kept pairs largest magnitude first,
    padding after them. Batched, the width is
    the largest rank, padded with zero eigenpairs on the side away from the
    wanted end (before the kept ones for ``largest=True``, after them
    otherwise). ``return_error=True`` returns a :class:`TruncatedEighResult`
    ``(eigenvalues, eigenvectors, error, rel_error, rank)``,
    ``error = ||lambda_discarded||_2`` and ``rel_error = error / ||A||_F``.
    The iterative path supports the rules as :func:`svd` (its error is
    ``||A - V_r diag(lambda_r) V_r^H||_F``), and unused arguments raise as
    there; ``largest=False`` needs ``k`` or a tolerance.
    ``backend`` and ``out=(eigenvalues, eigenvectors)`` as in
    :func:`pyspectral.svd` (``"auto"``: native; ``out=`` as
    ``torch.linalg.eigh``'s, without autograd, not with a truncation).

    Returns:
        ``(eigenvalues, eigenvectors)``, a named tuple (:class:`EighResult`);
        eigenvalues are real and ascending. With ``return_error=True``, a
        :class:`TruncatedEighResult`
        ``(eigenvalues, eigenvectors, error, rel_error, rank)``.

    Raises:
        InputTypeError: ``A`` is not a tensor, ``UPLO`` is not a string, or
            ``check_hermitian``, ``largest`` or ``return_error`` is not a
            bool.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        UPLOError: ``UPLO`` is a string other than ``"L"`` or ``"U"`` (either
            case).
        NonFiniteError: NaN or Inf in the ``UPLO`` triangle (in either
            triangle with ``check_hermitian=True``).
        InputError: ``check_hermitian=True`` and ``A`` is not Hermitian to
            ``hermitian_tol``; ``hermitian_tol`` without
            ``check_hermitian=True``; ``largest=False`` without ``k`` or a
            tolerance; a keyword out of range or one the call would not use,
            as in :func:`svd`.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        GaugeError: in the backward, under ``gauge="raise"``, when the loss
            depends on the basis inside a degenerate cluster (under
            ``"warn"``, the default, a :class:`GaugeWarning` instead).
        DerivativeError: a second derivative through the iterative top-k
            path (``method="full"`` has them).
        JuliaError: an error inside Julia (``backend="julia"``).

    Warns:
        GaugeWarning: under ``gauge="warn"``, as for ``GaugeError``.
        ConvergenceWarning: ``method="randomized"`` could not certify the
            ``k`` eigenpairs or the backward's solve.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(4, 4, dtype=torch.float64, generator=g)
        >>> w, V = eigh(X + X.mT)
        >>> w.shape, V.shape, bool((w[1:] >= w[:-1]).all())  # ascending
        (torch.Size([4]), torch.Size([4, 4]), True)
        >>> bool(torch.dist(V @ torch.diag(w) @ V.mT, X + X.mT) < 1e-12)
        True
        >>> A = torch.tensor([[2.0, 99.0], [1.0, 2.0]], dtype=torch.float64)
        >>> w = eigh(A).eigenvalues  # reads the lower triangle: [[2, 1], [1, 2]]
        >>> w.round(decimals=10)
        tensor([1., 3.], dtype=torch.float64)
    """
    call = locals()  # the arguments by name, before any other local
    # every keyword at its default (read off the signature, as svd's): the
    # common call, whose checks are A's, UPLO's and the convention's alone
    common = at_defaults(call, _DEFAULTS)
    static = method in ("auto", "full") and at_defaults(call, _COMPILED_DEFAULTS)
    settings = (degeneracy_atol, broadening, gauge, gauge_atol, gradient)
    res = compiled(backend, static, _ops.call_eigh, A, UPLO, k, largest, *settings)
    if res is not None:
        return EighResult(*res)
    # Every argument is validated before a backend is chosen (and Julia started).
    call = _check_eigh(
        A, UPLO, backend, gradient, check_hermitian, hermitian_tol, degeneracy_atol,
        broadening, gauge, gauge_atol, k, largest, by, atol, rtol, error_atol,
        error_rtol, multiplets, min_rank, return_error, method, oversample, n_iter,
        backward_rtol, backward_maxiter, out, common,
    )  # fmt: skip
    # (a partial, not a closure: a local captured by one is a cell, which
    # locals() above cannot read under torch.compile)
    forward = partial(_linalg.eigh, A, UPLO=call.uplo, out=out)
    res = with_out("eigh", out, backend, A, forward, call.rule)
    if res is not None:
        return EighResult(*res)
    res = _route(A, call, method, backend, return_error)
    return EighResult(*res) if type(res) is tuple else res  # (the bare pairs)


# What the fast paths compare a call with (at_defaults): every keyword but the
# backend (checked by the route) and the gradient convention (by the common
# call's own check); under torch.compile also the ones the custom operator takes.
_DEFAULTS = keyword_defaults(eigh, skip=("backend", "gradient"))
_COMPILED_DEFAULTS = keyword_defaults(
    eigh,
    skip=("backend", "gradient", "k", "largest", "degeneracy_atol", "broadening")
    + ("gauge", "gauge_atol", "method"),
)


def eigvalsh(
    A: Tensor,
    UPLO: str = "L",
    *,
    backend: str = "auto",
    gradient: str | None = None,
    out: Tensor | None = None,
) -> Tensor:
    r"""eigvalsh(A, UPLO="L", *, backend="auto", gradient=..., out=None) -> Tensor

    Eigenvalues of a Hermitian ``A`` (shape ``(*, n, n)``), real and ascending,
    shape ``(*, n)``: float32 for float32 and complex64 input, float64 for
    float64 and complex128 (other dtypes raise). Only the ``UPLO`` triangle
    is read, as in ``torch.linalg.eigvalsh``. The gradient ``V diag(gw) V^H``
    (``gradient="triangle"``: folded onto the ``UPLO`` triangle) is exact for
    symmetric functions of the eigenvalues at any spectrum (``trace``,
    ``sum(w**2)``, ...); second derivatives at a degenerate cluster as in
    :func:`eigh`. ``UPLO``, ``backend``, ``gradient`` and ``out`` as in
    :func:`eigh` (``"auto"``: native).

    Raises:
        InputTypeError: ``A`` is not a tensor, or ``UPLO`` is not a string.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        UPLOError: ``UPLO`` is a string other than ``"L"`` or ``"U"``.
        NonFiniteError: NaN or Inf in ``A`` (with ``check_hermitian=False``:
            in the ``UPLO`` triangle).
        InputError: ``out=`` with ``backend="julia"``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        JuliaError: an error inside Julia (``backend="julia"``).

    Example::

        >>> A = torch.tensor([[2.0, 0.0], [1.0, 2.0]], dtype=torch.float64,
        ...                  requires_grad=True)
        >>> w = eigvalsh(A)  # of [[2, 1], [1, 2]]: the lower triangle
        >>> w.round(decimals=10)
        tensor([1., 3.], dtype=torch.float64, grad_fn=<...>)
        >>> w.sum().backward()  # the trace: its gradient is the identity
        >>> torch.allclose(A.grad, torch.eye(2, dtype=torch.float64))
        True
    """
    res = compiled(backend, out is None, _ops.call_eigh, A, UPLO, None, True, None,
                   None, None, None, gradient)  # fmt: skip
    if res is not None:
        return res[0]
    UPLO = _check("eigvalsh", A, UPLO)
    hermitian = gradient_convention(gradient, "eigvalsh") == "hermitian"
    res = with_out("eigvalsh", out, backend, A, lambda: _linalg.eigvalsh(
        A, UPLO=UPLO, out=out))  # fmt: skip
    if res is not None:
        return res
    # torch's own eigvalsh only without autograd: its derivatives read both
    # triangles (a forward-AD dual tensor does not require grad)
    if not differentiated(A) and not on_julia("eigvalsh", backend, A):
        return _linalg.eigvalsh(A, UPLO=UPLO)
    return _decompose(A, UPLO, options(op="eigvalsh"), backend, hermitian, True)[0]
