"""Singular value decomposition with stable gradients: ``svd``, ``svdvals`` and
the composite ``svd_function`` (``U f(S) Vh``) with an exact pullback.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch  # noqa: F401  (the docstrings' examples run in this namespace)
from torch import Tensor

from . import _linalg, _ops
from ._autograd import forward_tangent
from ._route import compiled, decompose, on_julia, with_out
from ._settings import options

# What moved to the private modules (the autograd Functions, svd_function and
# its machinery, the checks and routes) stays importable from here under its
# old name (``x as x``: an explicit re-export) where other modules use it.
from ._svd_autograd import _FUNCTIONS
from ._svd_autograd import _SVD as _SVD
from ._svd_autograd import _SVDJulia as _SVDJulia
from ._svd_function import _svd_fn as _svd_fn
from ._svd_function import svd_function
from ._svd_plan import _check_svd, _route
from ._svd_values import zero_singular_value as zero_singular_value
from ._validation import at_defaults, check_driver, check_matrix, keyword_defaults
from ._values import differentiated
from .julia import _svd as jsvd
from .pullbacks.svd import svd_pullback
from .split import SVDSplit, TruncatedSVDSplit
from .truncation import TruncatedSVDResult

__all__ = ["SVDResult", "svd", "svdvals", "svd_function", "svd_pullback"]


class SVDResult(NamedTuple):
    """The result of :func:`svd` and :func:`svd_topk`: ``A = U diag(S) Vh``.

    ``U: (*, m, r)`` and ``Vh: (*, r, n)`` (``Vh`` is ``V^H``, not ``V``) of
    ``A``'s dtype, ``S: (*, r)`` real and descending; ``r = min(m, n)``, or
    the kept width of a top-k or truncated call (``U``, ``Vh`` square with
    ``full_matrices=True``, the default, as in torch). A named tuple, so it
    unpacks as ``U, S, Vh = svd(A)``; constructing one checks nothing.

    Example::

        >>> A = torch.tensor([[3.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
        >>> result = svd(A)
        >>> type(result).__name__, result._fields
        ('SVDResult', ('U', 'S', 'Vh'))
        >>> result.S.round(decimals=10)
        tensor([3., 2.], dtype=torch.float64)
    """

    U: Tensor
    S: Tensor
    Vh: Tensor


# ------------------------------------------------------------ public API


def svd(
    A: Tensor,
    full_matrices: bool = True,
    *,
    driver: str | None = None,
    k: int | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    error_atol: float | None = None,
    error_rtol: float | None = None,
    multiplets: str = "cut",
    min_rank: int | None = None,
    absorb: str | None = None,
    return_error: bool = False,
    backend: str = "auto",
    degeneracy_atol: float | None = None,
    broadening: float | None = None,
    gauge: str | None = None,
    gauge_atol: float | None = None,
    method: str = "auto",
    oversample: int | None = None,
    n_iter: int | None = None,
    backward_rtol: float | None = None,
    backward_maxiter: int = 500,
    out: tuple[Tensor, Tensor, Tensor] | None = None,
) -> SVDResult | TruncatedSVDResult | SVDSplit | TruncatedSVDSplit:
    r"""svd(A, full_matrices=True, *, driver=None, k=None, ..., out=None) -> (U, S, Vh)

    Singular value decomposition with a stable backward pass.

    .. math::
        A = U \operatorname{diag}(S) V^{H}, \qquad S_1 \ge S_2 \ge \dots \ge 0

    ``A`` has shape ``(*, m, n)`` where ``*`` is zero or more batch dimensions.
    ``torch.linalg.svd``'s signature and results: ``full_matrices=True`` (the
    default, as torch's) gives ``U: (*, m, m)``, ``Vh: (*, n, n)``, ``False``
    the thin ``U: (*, m, p)``, ``Vh: (*, p, n)``, ``p = min(m, n)``;
    ``driver`` is cuSOLVER's algorithm for a CUDA tensor (``"gesvd"``,
    ``"gesvdj"``, ``"gesvda"``; torch's meaning: elsewhere a
    :class:`ChoiceError`, a ``RuntimeError`` as torch raises). With ``k`` only
    the top-``k`` triplets (``U: (*, m, k)``, ``S: (*, k)``, ``Vh: (*, k, n)``),
    whose gradient includes the exact coupling to the discarded singular
    pairs; a truncation or a split is thin whatever ``full_matrices`` says.

    ``A`` is float32, float64, complex64 or complex128 (other dtypes raise);
    ``U`` and ``Vh`` have its dtype, ``S`` the real dtype of that precision.
    ``Vh`` is ``V^H`` (not ``V``), as in torch. Each singular pair is
    defined up to a phase (a sign for real input), and inside a degenerate
    cluster up to a rotation: the forward returns ``torch.linalg.svd``'s
    choice, and the backward asks the loss not to depend on it (the
    ``gauge`` policy below). ``S`` is descending.

    .. warning:: Gradients are finite at every spectrum. They are exact when
        the loss sees ``U`` and ``V`` through complete degenerate clusters
        (projectors, the polar factor ``U Vh``) and ``S`` through symmetric
        functions; for ``U f(S) Vh`` at (near-)degenerate or zero singular
        values use :func:`svd_function`. Singular values closer than
        ``degeneracy_atol`` (default ``max(S) * eps**0.75``) count as
        degenerate; a loss that depends on the basis inside such a cluster
        triggers the ``gauge`` policy (``"warn"``, ``"raise"`` or ``"ignore"``).
        ``broadening=eta`` replaces the hard cutoff ``1/x`` by ``x/(x^2+eta^2)``.
        With ``full_matrices=True`` the extra columns count through their span.

    Truncation (the rank ``r`` of each matrix is the smallest the rules give):
    ``k`` keeps at most ``k`` triplets (any ``k >= 0``: past ``min(m, n)``
    every triplet, as tensor-network codes clamp a bond dimension); ``atol``,
    ``rtol`` keep the ``S_i > max(atol, rtol * S_1)``, as
    ``torch.linalg.matrix_rank`` counts; ``error_atol``, ``error_rtol`` keep
    the fewest leading triplets whose discarded singular values have
    ``||S_discarded||_2 <= max(error_atol, error_rtol * ||S||_2)``. Then
    ``multiplets`` moves the cut: ``"cut"`` (default) leaves it, also inside a
    degenerate multiplet (gap ``<= degeneracy_atol``; the kept basis is then
    arbitrary, and a loss that depends on it triggers the ``gauge`` policy in
    the backward), ``"down"`` moves it to the nearest multiplet boundary below
    (drops the split multiplet: at most ``k`` kept, the discarded weight may
    exceed the error target), ``"up"`` above (keeps it whole: may exceed
    ``k``). ``min_rank`` is a floor: at least ``min(min_rank, min(m, n))``
    triplets, zeros included (ITensor's ``mindim``; at most ``k``; moved up
    again under ``"up"``, it wins over ``"down"``). A zero matrix keeps
    nothing under any tolerance (but the floor's zero triplets); a rule may keep
    nothing (``r = 0``: empty factors, zero gradient). The rank is piecewise
    constant in ``A``: the gradient is that of the fixed-rank problem at
    ``r``, with the exact coupling to the discarded triplets. Batched, the
    result has the width ``max r`` over the batch, each matrix's places past
    its own rank zero (values and vectors). ``return_error=True`` returns a
    :class:`TruncatedSVDResult` ``(U, S, Vh, error, rel_error, rank)``:
    ``error = ||S_discarded||_2``, ``rel_error = error / ||A||_F`` (both
    ``(*,)``, differentiable, from the decomposition already computed) and
    the ranks (``(*,)`` int64).

    ``absorb`` splits the (truncated) SVD into the two factors a
    tensor-network code writes, the singular values absorbed (quimb's name):
    ``"left"`` ``(U S, Vh)``, ``"right"`` ``(U, S Vh)``, ``"both"``
    ``(U sqrt(S), sqrt(S) Vh)``, an :class:`SVDSplit` ``(left, right)``
    (:class:`TruncatedSVDSplit` with ``return_error``). Its gradient and
    tangents are exact for every loss invariant under ``L -> L Q``,
    ``R -> Q^H R`` (any contraction over the bond index), also inside a kept
    degenerate multiplet, where ``U * S.sqrt()`` written from the triplets
    is silently wrong; second derivatives are exact away from kept
    multiplets (at one: a ``GaugeWarning``).

    Top-k methods (with ``k``): ``method="full"`` slices the full thin SVD.
    ``"randomized"`` runs block subspace iteration with ``p = k + oversample``
    columns (default ``oversample = max(10, k)``) and a Rayleigh-Ritz step,
    until the kept triplets are certified (``|A v_i - s_i u_i| <= eps**0.75
    s_1``, and the cluster of ``s_k`` closed inside the block), for at most
    ``n_iter`` iterations if given (whatever the convergence rate), else
    within a work budget (the full path's cost, and at least 100
    iterations); its backward treats
    the certified block exactly and the rest by conjugate gradients with
    products by ``A`` and ``A^H`` only, to ``backward_rtol`` (default
    ``eps**0.75``) in at most ``backward_maxiter`` steps. What it cannot
    certify it returns with a :class:`ConvergenceWarning`. ``"krylov"`` runs
    block Lanczos (Golub-Kahan) from the same start, with thick restarts,
    the same certificate, budget and warning: fewer products where the
    spectrum decays slowly past ``k``. ``"auto"`` (the
    default) iterates only where that is predicted to be much cheaper than
    the full SVD and keeps only a certified result, else takes the full path:
    it is exact on every spectrum; it starts with subspace iteration and
    hands over to ``"krylov"`` where its cost model, fed by the measured
    convergence rate, predicts fewer products. The iterative path's
    gradient is first order (second derivatives: ``method="full"``). It
    computes the top ``k``: ``atol``, ``rtol`` and ``multiplets="down"`` cut
    inside them (its error is ``||A - U_r U_r^H A||_F``, see
    :mod:`pyspectral.truncation`);
    ``error_atol``, ``error_rtol`` and ``multiplets="up"`` need the spectrum
    past ``k``: ``"auto"`` then takes the full path, ``"randomized"`` and
    ``"krylov"`` raise.
    Arguments the call would not use raise ``InputError``: ``method=
    "randomized"``, ``oversample``, ``n_iter``, ``backward_rtol``,
    ``backward_maxiter`` without ``k`` (a tolerance without ``k`` runs the
    full path), and the last four with ``method="full"`` or a rule that needs
    the spectrum past ``k``.

    ``backend``: ``"auto"`` (the default) and ``"torch"`` run the native
    backend (any device); ``"julia"`` runs the same rules in Julia (CPU
    tensors; see docs/guide/julia.md), with the same errors and warnings.

    ``out=(U, S, Vh)``: as in ``torch.linalg.svd`` (results written into the
    given tensors, resized if needed, dtypes checked, no autograd: a ``RuntimeError``
    if ``A`` requires grad); native backend only, not with ``k`` or another
    truncation keyword (``InputError`` otherwise).

    Empty inputs (``m``, ``n`` or a batch size 0) give empty results, and
    empty gradients, as torch does.

    Returns:
        ``(U, S, Vh)``, a named tuple (:class:`SVDResult`); ``S`` is real and
        descending. With ``return_error=True``, a
        :class:`TruncatedSVDResult` ``(U, S, Vh, error, rel_error, rank)``;
        with ``absorb``, an :class:`SVDSplit` ``(left, right)`` or
        :class:`TruncatedSVDSplit` ``(left, right, error, rel_error, rank)``.

    Raises:
        InputTypeError: ``A`` is not a tensor, or ``full_matrices`` or
            ``return_error`` is not a bool.
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: a keyword out of range (a negative ``k`` or
            tolerance, an unknown ``method``, ``multiplets`` or ``gauge``),
            or one the call would not use (see above); ``k`` or a
            truncation rule with ``out=``.
        ChoiceError: ``driver`` on a tensor not on CUDA, or not one of
            cuSOLVER's (a ``RuntimeError``, as torch's).
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (not installed, a CUDA or empty
            tensor, inside a ``torch.func`` transform).
        GaugeError: in the backward, under ``gauge="raise"``, when the loss
            depends on the basis inside a degenerate cluster (under
            ``"warn"``, the default, a :class:`GaugeWarning` instead).
        DerivativeError: a second derivative through the iterative top-k
            path (``method="full"`` has them).
        JuliaError: an error inside Julia (``backend="julia"``).

    Warns:
        GaugeWarning: under ``gauge="warn"``, as for ``GaugeError``.
        ConvergenceWarning: ``method="randomized"`` could not certify the
            top ``k`` or the backward's solve.

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(5, 3, dtype=torch.float64, generator=g)
        >>> U, S, Vh = svd(A, full_matrices=False)
        >>> U.shape, S.shape, Vh.shape
        (torch.Size([5, 3]), torch.Size([3]), torch.Size([3, 3]))
        >>> bool(torch.dist(U @ torch.diag(S) @ Vh, A) < 1e-12)
        True
        >>> U, S, Vh, err, rel, r = svd(A, k=2, return_error=True)
        >>> R = A - U @ torch.diag(S) @ Vh  # its norm is the truncation error
        >>> bool(torch.dist(torch.linalg.matrix_norm(R), err) < 1e-12), int(r)
        (True, 2)
    """
    call = locals()  # the arguments by name, before any other local
    thin = full_matrices if k is None else False  # (truncated: thin)
    static = method in ("auto", "full") and at_defaults(call, _COMPILED_DEFAULTS)
    res = compiled(backend, static, _ops.call_svd, A, thin, k,
                   degeneracy_atol, broadening, gauge, gauge_atol)  # fmt: skip
    if res is not None:
        return SVDResult(*res)
    # The common call, every keyword at its default (read off the signature,
    # so it cannot drift from the checks below): A is all there is to check.
    if type(full_matrices) is bool and at_defaults(call, _DEFAULTS):
        check_matrix("svd", A)
        args = (full_matrices, options(op="svd"), forward_tangent(A))
        return SVDResult(*decompose("svd", _FUNCTIONS, A, backend, *args))
    # Every argument is validated before a backend is chosen (and Julia started).
    call = _check_svd(
        A, full_matrices, driver, k, atol, rtol, error_atol, error_rtol, multiplets,
        min_rank, absorb, return_error, degeneracy_atol, broadening, gauge, gauge_atol,
        method, oversample, n_iter, backward_rtol, backward_maxiter, out,
    )  # fmt: skip
    # (a partial, not a closure: a local captured by one is a cell, which
    # locals() above cannot read under torch.compile)
    forward = partial(_linalg.svd, A, call.full_matrices, driver=driver, out=out)
    res = with_out("svd", out, backend, A, forward, call.rule)
    if res is not None:
        return SVDResult(*res)
    res = _route(A, call, method, backend, return_error)
    return SVDResult(*res) if type(res) is tuple else res  # (the bare triplets)


# What the fast paths compare a call with (at_defaults): every keyword but the
# backend (checked by the route); under torch.compile also the ones the custom
# operator takes.
_DEFAULTS = keyword_defaults(svd, skip=("backend",))
_COMPILED_DEFAULTS = keyword_defaults(
    svd,
    skip=("backend", "k", "degeneracy_atol", "broadening", "gauge", "gauge_atol")
    + ("method",),
)


def svdvals(
    A: Tensor,
    *,
    driver: str | None = None,
    backend: str = "auto",
    out: Tensor | None = None,
) -> Tensor:
    r"""svdvals(A, *, driver=None, backend="auto", out=None) -> Tensor

    Singular values of ``A`` (shape ``(*, m, n)``), descending, shape
    ``(*, min(m, n))``, real (float32 for float32 and complex64 input,
    float64 for float64 and complex128; other dtypes raise), as
    ``torch.linalg.svdvals``. The gradient ``U diag(gS) Vh`` is exact for
    symmetric functions of the singular values at any spectrum (nuclear
    norm, ``sum(S**2)``, ...); second derivatives at a degenerate cluster as
    in :func:`svd` (the ``gauge`` policy applies where they are not exact).
    ``driver``, ``backend`` and ``out`` as in :func:`svd` (``"auto"``: native).

    Raises:
        InputTypeError: ``A`` is not a tensor.
        ChoiceError: a ``driver`` other than None on a tensor not on CUDA, or
            not one of cuSOLVER's (a ``RuntimeError``, as torch's).
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions.
        NonFiniteError: ``A`` has NaN or Inf entries.
        InputError: ``out=`` with ``backend="julia"``.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        JuliaError: an error inside Julia (``backend="julia"``).

    Example::

        >>> A = torch.tensor([[3.0, 0.0], [0.0, -4.0], [0.0, 0.0]],
        ...                  dtype=torch.float64, requires_grad=True)
        >>> S = svdvals(A)
        >>> S.round(decimals=10)
        tensor([4., 3.], dtype=torch.float64, grad_fn=<...>)
        >>> S.sum().backward()  # the nuclear norm: its gradient is U Vh
        >>> UVh = torch.tensor([[1.0, 0.0], [0.0, -1.0], [0.0, 0.0]],
        ...                    dtype=torch.float64)
        >>> torch.allclose(A.grad, UVh)
        True
    """
    res = compiled(backend, out is None and driver is None, _ops.call_svd, A, False,
                   None, None, None, None, None)  # fmt: skip
    if res is not None:
        return res[1]
    check_matrix("svdvals", A)
    driver = check_driver("svdvals", driver, A)
    res = with_out(
        "svdvals", out, backend, A, lambda: _linalg.svdvals(A, driver=driver, out=out)
    )
    if res is not None:
        return res
    if not differentiated(A):  # the values alone: no singular vectors
        julia = on_julia("svdvals", backend, A)
        return jsvd.svdvals(A) if julia else _linalg.svdvals(A, driver=driver)
    opts = options(op="svdvals")
    opts.state.driver = driver
    args = (False, opts, forward_tangent(A))
    return decompose("svdvals", _FUNCTIONS, A, backend, *args)[1]
