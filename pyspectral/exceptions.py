"""Exceptions and warnings raised by pyspectral.

Every message says what was required, what was passed and what to do.

Where ``torch.linalg`` rejects the same input, the pyspectral error also
subclasses the class torch raises, so that ``except`` clauses written for
``torch.linalg`` catch it: a wrong dtype, rank, shape or ``UPLO`` is a
``RuntimeError`` there (:class:`DtypeError`, also a ``NotImplementedError``;
:class:`ShapeError`, :class:`UPLOError`), NaN entries a
``torch.linalg.LinAlgError`` (:class:`NonFiniteError`, raised for Inf too,
where torch returns NaN results). Checks torch does not make (``k`` out of range,
a function's domain, ...) keep the ``ValueError`` / ``TypeError`` bases alone.
"""

from __future__ import annotations

from torch.linalg import LinAlgError

__all__ = [
    "PySpectralError",
    "InputError",
    "InputTypeError",
    "DtypeError",
    "ShapeError",
    "UPLOError",
    "NonFiniteError",
    "DomainError",
    "GaugeError",
    "GaugeWarning",
    "ConvergenceWarning",
    "BackendError",
    "DerivativeError",
    "JuliaError",
]


class PySpectralError(Exception):
    """Base class of every error raised by pyspectral."""


class InputError(PySpectralError, ValueError):
    """An argument has the wrong value or shape (``k`` out of range, NaN, ...)."""


class InputTypeError(PySpectralError, TypeError):
    """An argument has the wrong type or dtype (integer tensor, unknown ``f``, ...)."""


class DtypeError(InputTypeError, NotImplementedError):
    """``A`` has a dtype other than float32/float64/complex64/complex128; also a
    ``NotImplementedError`` (a ``RuntimeError``), as ``torch.linalg`` raises
    one of them (which one depends on the op and the dtype)."""


class ShapeError(InputError, RuntimeError):
    """``A`` has fewer than 2 dimensions, or is not square where it must be; a
    ``RuntimeError`` too, as ``torch.linalg`` raises."""


class UPLOError(InputError, RuntimeError):
    """``UPLO`` is a string other than ``"L"``, ``"U"``, ``"l"``, ``"u"``; a
    ``RuntimeError`` too, as ``torch.linalg.eigh`` raises (a non-string
    ``UPLO`` is an :class:`InputTypeError`, a ``TypeError`` as in torch)."""


class NonFiniteError(InputError, LinAlgError):
    """``A`` has NaN or Inf entries where they are read; a
    ``torch.linalg.LinAlgError`` too, as ``torch.linalg`` raises for NaN."""


class DomainError(InputError):
    """The spectrum is outside the domain of the requested function (``log`` of a
    non-positive eigenvalue, a negative power of a zero singular value, ...)."""


class GaugeError(PySpectralError, ArithmeticError):
    """Raised under ``gauge="raise"`` when the incoming gradient depends on the
    (arbitrary) choice of basis inside a degenerate subspace."""


class GaugeWarning(UserWarning):
    """Warned under ``gauge="warn"`` (the default) when the incoming gradient depends
    on the choice of basis inside a degenerate subspace, so no gradient is exact."""


class ConvergenceWarning(UserWarning):
    """Warned when an iterative top-k computation (``method="randomized"``)
    returns a result it could not certify: its Ritz triplets' residual, the
    cluster at ``k`` or the backward's Sylvester solve did not converge. The
    message gives the measured value and what to do (``method="auto"`` never
    returns such a result: it takes the full decomposition instead)."""


class BackendError(PySpectralError, RuntimeError):
    """The requested backend cannot run here (Julia missing, CUDA tensor sent to
    Julia, unknown backend name, ...)."""


class DerivativeError(PySpectralError, RuntimeError):
    """A derivative that is not provided: through the iterative top-k path a
    second derivative (double backward, ``hessian``, ``jacrev`` of ``grad``,
    ``jacfwd`` of ``jacfwd``; ``method="full"`` has them), or forward mode
    (``jvp``, ``jacfwd``) on its linear-operator form; a
    third derivative of ``svd_function`` / ``matrix_function``; a user ``f``
    given without ``f_prime`` that torch cannot differentiate, and a second
    derivative through one whose ``f_prime`` it cannot differentiate."""


class JuliaError(PySpectralError, RuntimeError):
    """An exception raised inside Julia; the message carries Julia's own message."""
