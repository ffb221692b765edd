"""The spectral matrix function ``matrix_function`` (``V f(L) V^H``) with the
exact (Daleckii-Krein) pullback: the public function, its checks, the named
functions (``f``, ``f'``, ``f''`` with their domains; ``fn.spec`` is what
Julia reads) and a user's ``f`` (through ``_values.py``). Its autograd
Functions are ``_eigh_autograd.py``'s.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _linalg, _ops
from ._autograd import apply
from ._eigh_autograd import (
    _matrix_function_maps,
    _MatrixFunction,
    _MatrixFunctionJulia,
    _with_gradient,
)
from ._eigh_plan import _check_hermitian_flags
from ._fns import (
    SpectralFn,
    UserFunction,
    named_argument,
    power,
    power_second,
    user_function,
)
from ._route import compiled, on_julia
from ._settings import Options, options
from ._validation import (
    check_hermitian_matrix,
    check_keywords,
    check_matrix,
    check_uplo,
)
from ._values import ValuesOp, apply_values
from .common.defaults import degeneracy_tol, peek
from .exceptions import DomainError, InputTypeError
from .julia import _eigh as jeigh

__all__ = ["matrix_function"]


def matrix_function(
    A: Tensor,
    f: Any,
    UPLO: str = "L",
    *,
    backend: str = "auto",
    gradient: str | None = None,
    check_hermitian: bool = True,
    hermitian_tol: float | None = None,
    degeneracy_atol: float | None = None,
) -> Tensor:
    r"""matrix_function(A, f, UPLO="L", *, backend="auto", ...) -> Tensor

    Spectral function of a Hermitian matrix with the exact (Daleckii-Krein)
    pullback.

    .. math::
        Y = V f(\Lambda) V^{H}, \qquad A = V \Lambda V^{H}

    ``A`` has shape ``(*, n, n)``; ``Y`` the same. ``f`` is ``"sqrt"``,
    ``"invsqrt"``, ``"log"``, ``"exp"``, ``("pow", p)`` (``p`` a finite real)
    or an elementwise torch function ``f`` that maps the eigenvalues to real
    tensors of their shape (``f`` finite there): alone (``f'`` is torch's
    derivative of it), as a pair ``(f, f_prime)`` or as a triple
    ``(f, f_prime, f_second)``. ``f`` may use other tensors (the coefficients
    of a spectral filter, a temperature ``beta`` in ``exp(-beta w)``): they
    get the gradient ``sum_i df(w_i)/dtheta Re(V^H gY V)_ii``, to second
    order. It runs on either backend: on Julia's, it is evaluated in Python
    on the eigenvalues Julia computed, and Julia gets the values.

    .. warning:: The gradient is exact at every spectrum, degenerate ones
        included, and so are second derivatives (second divided differences;
        ``f''`` from ``f_second`` or torch's derivative of ``f_prime``).
        ``"log"``, ``"invsqrt"`` and negative powers need a positive
        definite ``A``; ``"sqrt"`` and fractional powers a semidefinite one
        (eigenvalues down to ``-degeneracy_atol`` are clamped to 0). Outside
        the domain a :class:`DomainError` names the eigenvalue. Where ``f'`` is
        infinite (``sqrt`` at an exact zero eigenvalue) the gradient is ``+-inf``
        exactly in the entries that the infinite divided difference
        ``f[0, 0]`` reaches (``diag(0, .5, 2, 3)``: entry ``(0, 0)`` alone) and
        finite, never NaN, elsewhere: ``f[0, x] = f(x) / x`` is finite.
        ``gradient`` (torch's Hermitian convention, or ``"triangle"``) and
        ``UPLO`` as in :func:`eigh`; ``n = 0`` gives an empty result.

    ``A`` is float32, float64, complex64 or complex128 (other dtypes raise);
    ``Y`` has its dtype and is Hermitian. ``Y`` does not depend on the
    phases or the basis chosen inside a degenerate cluster, so no gauge
    convention enters and no gauge policy applies. Exactness class: exact
    gradients at every spectrum, the composite to use for ``V f(Lambda)
    V^H`` rather than :func:`eigh`.

    ``A`` must be Hermitian: ``max|A - A^H| <= hermitian_tol`` per matrix
    (default ``eps**(3/4) max|A|``), else :class:`InputError` naming
    :func:`eig_function`, the route for ``f(A)`` of a non-Hermitian ``A``
    (``V f(Lambda) V^H`` of one triangle is not ``f(A)`` there).
    ``check_hermitian=False`` skips the check and reads only the ``UPLO``
    triangle, as ``torch.linalg.eigh`` does (for a matrix stored in one
    triangle, or a finite-difference check that perturbs single entries).
    ``backend`` as in :func:`pyspectral.svd` (``"auto"``: native);
    ``degeneracy_atol`` as in :func:`eigh`.

    Returns:
        ``Y``, shape ``(*, n, n)``, the dtype of ``A``.

    Raises:
        InputTypeError: ``A`` is not a tensor, ``UPLO`` is not a string,
            ``check_hermitian`` is not a bool, or ``f`` is not one of the
            forms above (or a user ``f`` returns a non-tensor or a complex
            tensor).
        DtypeError: ``A`` is not float32, float64, complex64 or complex128.
        ShapeError: ``A`` has fewer than 2 dimensions or is not square.
        UPLOError: ``UPLO`` is a string other than ``"L"`` or ``"U"``.
        NonFiniteError: NaN or Inf in ``A`` (with ``check_hermitian=False``:
            in the ``UPLO`` triangle).
        InputError: ``p`` of ``("pow", p)`` not finite (or a tensor that
            requires grad), a user ``f`` not elementwise, an invalid
            ``degeneracy_atol`` / ``hermitian_tol``, ``hermitian_tol``
            with ``check_hermitian=False``, or ``A`` not Hermitian (unless
            ``check_hermitian=False``).
        DomainError: the spectrum is outside ``f``'s domain (see above), or
            a user ``f`` is not finite on it.
        DerivativeError: a third derivative, or a user ``f`` whose
            derivative torch cannot take and no ``f_prime`` was given.
        BackendError: an unknown ``backend``, or ``backend="julia"`` where
            Julia cannot run the call (as in :func:`svd`).
        JuliaError: an error inside Julia (``backend="julia"``).

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(4, 4, dtype=torch.float64, generator=g)
        >>> A = X @ X.mT + torch.eye(4, dtype=X.dtype)
        >>> R = matrix_function(A, "sqrt")
        >>> bool(torch.dist(R @ R, A) < 1e-10)
        True
        >>> I3 = torch.eye(3, dtype=torch.float64, requires_grad=True)
        >>> L = matrix_function(I3, "log")  # a triple eigenvalue: still exact
        >>> L.trace().backward()  # d trace(log A) / dA = A^-1 = I here
        >>> torch.allclose(I3.grad, torch.eye(3, dtype=torch.float64))
        True
    """
    static = hermitian_tol is None and type(check_hermitian) is bool
    Y = compiled(backend, static, _ops.call_matrix_function, A, f, UPLO,
                 degeneracy_atol, gradient, check_hermitian)  # fmt: skip
    if Y is not None:
        return Y
    kw = check_keywords(
        "matrix_function", hermitian_tol=hermitian_tol, degeneracy_atol=degeneracy_atol
    )
    check = _check_hermitian_flags("matrix_function", check_hermitian,
                                   kw["hermitian_tol"])  # fmt: skip
    UPLO = _check_matfun_input(A, UPLO, check, kw["hermitian_tol"])
    user = user_function("matrix_function", f)
    fn = _matfun(f) if user is None else None
    opts = options(kw["degeneracy_atol"], None, None, None, op="matrix_function")
    A = _with_gradient("matrix_function", A, gradient)
    julia = on_julia("matrix_function", backend, A)
    if fn is None:
        return _user_matrix_function(A, user, UPLO, opts, julia)
    if julia:
        return apply(_MatrixFunctionJulia, A, fn.spec, fn, UPLO, opts)
    return apply(_MatrixFunction, A, fn, UPLO, opts)[0]


def _check_matfun_input(A: Any, UPLO: Any, check: bool, tol: float | None) -> str:
    """``matrix_function``'s ``A`` and ``UPLO`` (:func:`_check`), and, unless
    ``check_hermitian=False``, that ``A`` is Hermitian: ``V f(Lambda) V^H``
    of one triangle is ``f(A)`` only then. One host read for both checks
    (``check_hermitian_matrix``)."""
    uplo = check_uplo("matrix_function", UPLO)
    check_matrix("matrix_function", A, square=True, uplo=uplo, finite=not check)
    if check:
        check_hermitian_matrix("matrix_function", A, tol, _ops.NON_HERMITIAN)
    return uplo


# ------------------------------------------------------ matrix functions


def _positive(name: str, strict: bool) -> Any:
    """Domain check for functions of a positive (semi)definite spectrum.

    Eigenvalues within ``degeneracy_atol`` below zero are rounding noise of a
    semidefinite matrix and are clamped to 0 where ``f(0)`` exists.
    """

    def check(w: Tensor, opts: Options) -> Tensor:
        tol = degeneracy_tol(w, opts.degeneracy_atol)[..., 0]
        bad = peek(w <= 0 if strict else w < -tol)
        if bool(bad.any()):
            idx = bad.nonzero()[0].tolist()
            value = float(peek(w)[tuple(idx)])
            where = f"eigenvalue {idx[-1]}" + (
                f" of batch element {tuple(idx[:-1])}" if len(idx) > 1 else ""
            )
            need = "positive definite" if strict else "positive semidefinite"
            raise DomainError(
                f"matrix_function: {name} needs a {need} input, but {where} is "
                f"{value:.6g}. Shift the spectrum (A + c*I) or use a function "
                "defined there."
            )
        return w if strict else torch.clamp(w, min=0)

    return check


def _named(name: str, p: float = 1.0) -> SpectralFn:
    spec = name if name != "pow" else (name, p)
    if name == "exp":
        return SpectralFn(
            "exp",
            lambda w, o: (torch.exp(w), torch.exp(w)),
            lambda w, o: torch.exp(w),
            spec=spec,
        )
    if name == "log":
        dom = _positive("'log'", strict=True)
        return SpectralFn(
            "log",
            lambda w, o: (torch.log(dom(w, o)), 1 / w),
            lambda w, o: -1 / w**2,
            spec=spec,
        )
    if name in ("sqrt", "invsqrt"):
        fn = _named("pow", 0.5 if name == "sqrt" else -0.5)
        fn.spec = name
        return fn
    second = power_second(p)
    if p == int(p) and p >= 0:
        return SpectralFn(
            f"pow {p}", lambda w, o: power(p)(w), lambda w, o: second(w), spec=spec
        )
    dom = _positive(f"('pow', {p})", strict=p < 0)
    return SpectralFn(
        f"pow {p}",
        lambda w, o: power(p)(dom(w, o)),
        lambda w, o: second(torch.clamp(w, min=0) if p > 0 else w),
        spec=spec,
    )


_MATFUN_NAMES = (
    '"sqrt"',
    '"invsqrt"',
    '"log"',
    '"exp"',
    '("pow", p)',
    "a callable f",
    "(f, f_prime)",
    "(f, f_prime, f_second)",
)


def _matfun(f: Any) -> SpectralFn:
    """The named matrix function ``f``, its argument validated; ``fn.spec``
    is ``f`` normalised (what Julia reads)."""
    if isinstance(f, str) and f in ("exp", "log", "sqrt", "invsqrt"):
        return _named(f)
    named = named_argument("matrix_function", f, ("pow",))
    if named is None:
        raise InputTypeError(
            f"matrix_function: f must be one of {', '.join(_MATFUN_NAMES)}, got {f!r}"
        )
    return _named("pow", named[1])


_ops.NAMED["matrix_function"] = _matfun


def _user_matrix_function(
    A: Tensor, user: UserFunction, uplo: str, opts: Options, julia: bool
) -> Tensor:
    """``V f(w) V^H`` for a user's ``f``, differentiable in ``A`` and in every
    tensor ``f`` uses (see ``_values.py`` and ``_svd_values._user_svd_function``)."""
    if julia:
        (w, V), on_julia = jeigh.eigh_values(A, uplo)
    else:
        w, V = _linalg.eigh(A.detach(), UPLO=uplo)
    f, d = user.values(w)
    op = ValuesOp(
        "matrix_function",
        lambda fn: _matrix_function_maps(fn, uplo, opts),
        _eigh_form,
        _eigh_diagonal,
        user.second,
        spectrum=0,
        odd=False,
    )
    return apply_values(A, f, d, op, (w, V), on_julia if julia else None)


def _eigh_form(T: tuple, x: Tensor) -> Tensor:
    _, V = T
    return (V * x.unsqueeze(-2).to(V.dtype)) @ V.mH


def _eigh_diagonal(T: tuple, G: Tensor) -> Tensor:
    """``Re diag(V^H G V)``, the transpose of :func:`_eigh_form` in ``x``."""
    _, V = T
    return (V.conj() * (G @ V)).sum(-2).real
