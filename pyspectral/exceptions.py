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
    "ChoiceError",
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
    """Base class of every error raised by pyspectral.

    Raised (as one of its subclasses below) by every public function; catch
    it to handle any pyspectral error. The warnings (:class:`GaugeWarning`,
    :class:`ConvergenceWarning`) subclass ``UserWarning``, not this class.

    Example::

        >>> import torch, pyspectral as ps
        >>> try:
        ...     ps.svd(torch.ones(3, dtype=torch.float64))
        ... except ps.PySpectralError as err:
        ...     print(type(err).__name__, isinstance(err, RuntimeError))
        ShapeError True
    """


class InputError(PySpectralError, ValueError):
    """An argument has the wrong value or shape (``k`` out of range, NaN, ...).

    Raised before anything is computed, by every public function, for a
    keyword out of range (``k``, a negative tolerance, an unknown ``method``
    or ``multiplets``), an argument the call would not use, a matrix that is
    not Hermitian under ``check_hermitian=True``; also a ``ValueError``. Its
    subclasses: :class:`ShapeError`, :class:`UPLOError`,
    :class:`NonFiniteError`, :class:`DomainError`.

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.svd(torch.ones(3, 2, dtype=torch.float64), k=-1)
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.InputError: svd: k must be an integer >= 0 ...
    """


class InputTypeError(PySpectralError, TypeError):
    """An argument has the wrong type or dtype (integer tensor, unknown ``f``, ...).

    Raised before anything is computed for ``A`` not a tensor, a flag not a
    bool, an ``f`` of no known form, a ``UPLO`` that is not a string; also a
    ``TypeError``. Its subclass :class:`DtypeError` is for the dtype of
    ``A``.

    Example::

        >>> import pyspectral as ps
        >>> ps.svd([[1.0, 2.0], [3.0, 4.0]])
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.InputTypeError: svd: A must be a torch.Tensor, ...
    """


class DtypeError(InputTypeError, NotImplementedError):
    """``A`` has a dtype other than float32/float64/complex64/complex128; also a
    ``NotImplementedError`` (a ``RuntimeError``), as ``torch.linalg`` raises
    one of them (which one depends on the op and the dtype).

    Raised by every public function for an integer, bool, float16 or
    bfloat16 ``A`` (and a :class:`LinearOperator` of such a ``dtype``).

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.svd(torch.ones(2, 2, dtype=torch.int64))
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.DtypeError: svd: A must have dtype float32, ...
        >>> issubclass(ps.DtypeError, (TypeError, RuntimeError))
        True
    """


class ShapeError(InputError, RuntimeError):
    """``A`` has fewer than 2 dimensions, or is not square where it must be; a
    ``RuntimeError`` too, as ``torch.linalg`` raises.

    Raised by every public function (``eigh``, ``eigvalsh``,
    ``matrix_function`` and ``eigh_topk`` need ``(*, n, n)``).

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.eigh(torch.ones(2, 3, dtype=torch.float64))
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.ShapeError: eigh: A must be square, ...
    """


class UPLOError(InputError, RuntimeError):
    """``UPLO`` is a string other than ``"L"``, ``"U"``, ``"l"``, ``"u"``; a
    ``RuntimeError`` too, as ``torch.linalg.eigh`` raises (a non-string
    ``UPLO`` is an :class:`InputTypeError`, a ``TypeError`` as in torch).

    Raised by ``eigh``, ``eigvalsh`` and ``matrix_function``.

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.eigh(torch.eye(2, dtype=torch.float64), "X")
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.UPLOError: eigh: UPLO must be 'L' or 'U' ...
    """


class ChoiceError(InputError, RuntimeError):
    """A string argument ``torch.linalg`` also takes names no choice it offers
    here: ``qr``'s / ``lq``'s ``mode``, ``svd``'s / ``svdvals``'s ``driver``
    (cuSOLVER's, on CUDA tensors only, as in torch); a ``RuntimeError`` too, as
    torch raises for the same misuse (a non-string is an
    :class:`InputTypeError`, a ``TypeError`` as in torch).

    Raised by ``qr``, ``lq``, ``svd`` and ``svdvals``.

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.qr(torch.eye(2, dtype=torch.float64), "foo")
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.ChoiceError: qr: mode must be ...
    """


class NonFiniteError(InputError, LinAlgError):
    """``A`` has NaN or Inf entries where they are read; a
    ``torch.linalg.LinAlgError`` too, as ``torch.linalg`` raises for NaN.

    Raised by every public function before the decomposition (``eigh`` and
    the other Hermitian functions check only the ``UPLO`` triangle), and by
    :func:`svd_topk` / :func:`eigh_topk` when an operator's product is not
    finite.

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.svd(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.NonFiniteError: svd: A contains NaN or Inf ...
    """


class DomainError(InputError):
    """The spectrum is outside the domain of the requested function (``log`` of a
    non-positive eigenvalue, a negative power of a zero singular value, ...).

    Raised by ``matrix_function`` and ``svd_function`` (also for a user
    ``f`` that is not finite on the spectrum); the message names the
    eigenvalue or singular value.

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.matrix_function(-torch.eye(2, dtype=torch.float64), "log")
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.DomainError: matrix_function: 'log' needs a ...
    """


class GaugeError(PySpectralError, ArithmeticError):
    """Raised under ``gauge="raise"`` when the incoming gradient depends on the
    (arbitrary) choice of basis inside a degenerate subspace.

    Raised in the backward of ``svd``, ``eigh`` and their top-k forms (and
    by a second derivative through them that is not exact at a cluster), in
    the forward of ``svd_function(A, ("truncate", k))`` when ``k`` cuts a
    cluster; ``gauge="warn"`` (the default) warns :class:`GaugeWarning`
    instead.

    Example::

        >>> import torch, pyspectral as ps
        >>> A = torch.eye(2, dtype=torch.float64, requires_grad=True)
        >>> U, S, Vh = ps.svd(A, gauge="raise")  # S = (1, 1): one cluster
        >>> U[:, 0].sum().backward()  # depends on the basis U chose
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.GaugeError: svd: the incoming gradient depends ...
    """


class GaugeWarning(UserWarning):
    """Warned under ``gauge="warn"`` (the default) when the incoming gradient depends
    on the choice of basis inside a degenerate subspace, so no gradient is exact.

    Warned where :class:`GaugeError` is raised under ``gauge="raise"``; the
    message starts with the op, gives the measured value and the remedy.
    The gradient is still finite (the basis-dependent part is dropped).

    Every warning pyspectral warns carries its values (this class's and
    :class:`ConvergenceWarning`'s instances, ``w.message`` of a caught one):

    - ``measured``: the numbers the message measured (the measured value, the
      tolerance, ...), as floats, in the order of the text;
    - ``detail``: the full message, those numbers included.

    Under Python's default filter a warning shows once per line and text, so
    a repeated one takes a stable text: the first occurrence of a cause at a
    line shows the full message, later ones ``<value>`` in place of the
    numbers (and a note that they are on the warning), which Python then
    shows once; every occurrence still has its own ``measured`` and
    ``detail``. Under the ``"always"`` and ``"error"`` filters every
    occurrence has its full message.

    Example::

        >>> import warnings, torch, pyspectral as ps
        >>> A = torch.eye(2, dtype=torch.float64, requires_grad=True)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     U, S, Vh = ps.svd(A)
        ...     U[:, 0].sum().backward()
        >>> [w.category.__name__ for w in caught]
        ['GaugeWarning']
        >>> w = caught[0].message  # (measured, gauge_atol)
        >>> w.detail == str(w), len(w.measured)
        (True, 2)
    """

    #: The numbers the message measured, as floats, in the order of the text.
    measured: tuple[float, ...] = ()
    #: The full message, the measured numbers included.
    detail: str = ""


class ConvergenceWarning(UserWarning):
    """Warned when an iterative top-k computation (``method="randomized"``)
    returns a result it could not certify: its Ritz triplets' residual, the
    cluster at ``k`` or the backward's Sylvester solve did not converge. The
    message gives the measured value and what to do (``method="auto"`` never
    returns such a result: it takes the full decomposition instead).

    Warned by ``svd`` and ``eigh`` with ``k``, and by ``svd_topk`` /
    ``eigh_topk`` (for an operator too large to form, also under
    ``"auto"``). As for :class:`GaugeWarning`, the warning carries its
    values, ``measured`` (floats) and ``detail`` (the full message), and a
    repeated one takes a stable text under Python's default filter.

    Example::

        >>> import warnings, torch, pyspectral as ps
        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(60, 40, dtype=torch.float64, generator=g)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     U, S, Vh = ps.svd(A, k=3, method="randomized", n_iter=0)
        >>> [w.category.__name__ for w in caught]
        ['ConvergenceWarning']
        >>> len(caught[0].message.measured)  # (residual, tolerance)
        2
    """

    #: The numbers the message measured, as floats, in the order of the text.
    measured: tuple[float, ...] = ()
    #: The full message, the measured numbers included.
    detail: str = ""


class BackendError(PySpectralError, RuntimeError):
    """The requested backend cannot run here (Julia missing, CUDA tensor sent to
    Julia, unknown backend name, ...).

    Raised by every public function that takes ``backend``, before any
    work; ``python -m pyspectral info`` says which backends work here and
    why not.

    Example::

        >>> import torch, pyspectral as ps
        >>> ps.svd(torch.eye(2), backend="numpy")
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.BackendError: svd: backend must be one of ...
    """


class DerivativeError(PySpectralError, RuntimeError):
    """A derivative that is not provided: through the iterative top-k path a
    second derivative (double backward, ``hessian``, ``jacrev`` of ``grad``,
    ``jacfwd`` of ``jacfwd``; ``method="full"`` has them), or forward mode
    (``jvp``, ``jacfwd``) on its linear-operator form; a
    third derivative of ``svd_function`` / ``matrix_function``; a user ``f``
    given without ``f_prime`` that torch cannot differentiate, and a second
    derivative through one whose ``f_prime`` it cannot differentiate.

    Raised when that derivative is taken (the forward succeeds).

    Example::

        >>> import torch, pyspectral as ps
        >>> g = torch.Generator().manual_seed(0)
        >>> B = torch.randn(60, 3, dtype=torch.float64, generator=g)
        >>> C = torch.randn(3, 40, dtype=torch.float64, generator=g)
        >>> A = (B @ C).requires_grad_()  # rank 3: the iteration converges
        >>> U, S, Vh = ps.svd(A, k=3, method="randomized")
        >>> (gA,) = torch.autograd.grad(S.sum(), A, create_graph=True)
        >>> torch.autograd.grad(gA.sum(), A)  # a second derivative
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.DerivativeError: the derivatives of the ...
    """


class JuliaError(PySpectralError, RuntimeError):
    """An exception raised inside Julia; the message carries Julia's own message.

    Raised by calls with ``backend="julia"`` and by :mod:`pyspectral.julia`
    (Julia's ``ArgumentError`` and ``DomainError`` come as
    :class:`InputError` and :class:`DomainError`).

    Example (needs the Julia backend)::

        >>> import torch, pyspectral as ps
        >>> f = ps.julia.function('x -> error("no such thing")')
        >>> f(torch.ones(2))
        Traceback (most recent call last):
            ...
        pyspectral.exceptions.JuliaError: ...no such thing...
    """
