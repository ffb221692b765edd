"""Exceptions and warnings raised by pyspectral.

Every message says what was required, what was passed and what to do.
"""

from __future__ import annotations

__all__ = [
    "PySpectralError",
    "InputError",
    "InputTypeError",
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
    """A derivative that the iterative top-k path does not provide: a second
    derivative (double backward, ``hessian``, ``jacrev`` of ``grad``) or
    forward mode (``jvp``, ``jacfwd``). ``method="full"`` has second
    derivatives."""


class JuliaError(PySpectralError, RuntimeError):
    """An exception raised inside Julia; the message carries Julia's own message."""
