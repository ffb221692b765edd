"""How tensors cross between torch and Julia, without copies.

Crossing conventions (stated once, used by every op of ``_svd`` and ``_eigh``):

* dtype: float32/float64/complex64/complex128 map to Float32/Float64/
  ComplexF32/ComplexF64; nothing is converted.
* device: CPU only; a CUDA tensor raises :class:`BackendError` (use the native
  backend, which runs on GPU, rather than a silent device round trip).
* layout: a C-contiguous ``(B, m, n)`` tensor is read by Julia, without a copy,
  as the column-major ``n x m x B`` array of its transposes. Julia decomposes
  the transposes and the ops swap roles: ``A^T = conj(V) S conj(U)^H``, so
  Julia's ``U`` is our ``Vh^T`` and Julia's ``Vt`` our ``U^T``; for Hermitian
  ``A``, ``A^T = conj(A)``, so Julia's eigenvectors are ``conj(V)`` (the glue
  conjugates them in place) and our lower triangle is Julia's upper one.
* memory: see below.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..exceptions import BackendError

# ------------------------------------------------------------ conversions
# Python -> Julia: a tensor crosses as ``(address, code, dims...)`` (``_spec``), which
# the glue's ``wrap`` turns into ``unsafe_wrap(Array, Ptr{T}(address), dims)``: the
# tensor's own memory as a plain Julia ``Array``, so that Julia works on it with BLAS
# and LAPACK (PythonCall's ``PyArray`` view of a numpy array is not a strided array
# to Julia's linear algebra, whose generic fallbacks made the bridge's cost grow like
# n^3). Julia neither copies nor frees that memory, and keeps no reference to it
# after the call: the tensor must live until the call returns, which every op below
# ensures by keeping it (and any contiguous copy made for the call) in a local list
# ``keep`` until then.
#
# Julia -> Python: the glue returns each result as ``(array, address, dims, code)``
# (its ``out``); ``_numpy`` wraps that memory with numpy's ``__array_interface__``
# and holds the juliacall wrapper of the array, which keeps the Julia array alive as
# long as any numpy array or tensor over its memory does.

# torch dtype -> the glue's element type code (its ELTYPES) and back as numpy's
_CODES = {torch.float32: 1, torch.float64: 2, torch.complex64: 3, torch.complex128: 4}
_NUMPY = {1: np.float32, 2: np.float64, 3: np.complex64, 4: np.complex128}
_NUMPY[5] = np.int64  # results only: the truncation ranks (Julia's Vector{Int64})
_TYPESTR = {code: np.dtype(t).str for code, t in _NUMPY.items()}


def elements(t: torch.Tensor | torch.Size) -> int:
    """The number of entries of one matrix of ``t`` (``(*, m, n)``, a tensor
    or its shape): what sets Julia's BLAS threads for a call (``_blas``)."""
    shape = t.shape if isinstance(t, torch.Tensor) else t
    return shape[-2] * shape[-1]


def check_tensor(op: str, t: torch.Tensor) -> None:
    if t.device.type != "cpu":
        raise BackendError(
            f"{op}: the Julia backend runs on CPU tensors only, got a tensor on "
            f"{t.device}; use backend='torch' (which runs on {t.device.type}) or "
            "move the tensor with .cpu()"
        )


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` C-contiguous, without lazy conj/neg bits: ``t`` itself if it is
    (Julia only reads or writes its memory), else a detached copy."""
    if t.is_contiguous() and not t.is_conj() and not t.is_neg():
        return t
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t.contiguous()


def _spec(t: torch.Tensor, dims: tuple[int, ...], keep: list) -> tuple[int, ...]:
    keep.append(t)  # the memory Julia reads must outlive the call
    return (t.data_ptr(), _CODES[t.dtype], *dims)


def to_julia(t: torch.Tensor, keep: list) -> tuple[int, ...]:
    """``(*, m, n)`` tensor -> the column-major ``n x m x B`` array of its
    transposes, without a copy (unless ``t`` is not C-contiguous or carries a lazy
    conj/neg bit). ``keep`` holds what must live until the call returns."""
    t = _plain(t)
    m, n = t.shape[-2:]
    # the batch from the shape, not numel // (m n): an empty matrix has a batch too
    return _spec(t, (n, m, math.prod(t.shape[:-2])), keep)


def to_julia_vectors(t: torch.Tensor, keep: list) -> tuple[int, ...]:
    """``(*, k)`` tensor -> column-major ``k x B`` (no copy, as :func:`to_julia`)."""
    t = _plain(t)
    k = t.shape[-1]
    return _spec(t, (k, math.prod(t.shape[:-1])), keep)


def to_julia_matrices(t: torch.Tensor, keep: list) -> tuple[int, ...]:
    """``(*, p, q)`` tensor -> column-major ``p x q x B`` with the same indexing
    (for eigenvector cotangents: a copy unless ``t`` already has column-major
    strides, as the eigenvectors Julia returns do)."""
    p, q = t.shape[-2:]
    t = _plain(t.reshape(-1, p, q).mT)  # (B, q, p) C order = column-major p x q x B
    return _spec(t, (p, q, t.shape[0]), keep)


class _JuliaMemory:
    """A Julia array's memory as numpy sees it (``__array_interface__``, from the
    address and element type the glue reported, C-contiguous of ``shape``),
    holding the juliacall wrapper of the array: numpy keeps this object as the
    base of its array, so the Julia array lives as long as any numpy array or
    tensor over its memory."""

    __slots__ = ("__array_interface__", "array")

    def __init__(self, array: Any, address: int, shape: tuple, code: int):
        self.array = array
        self.__array_interface__ = {
            "shape": shape,
            "typestr": _TYPESTR[code],
            "data": (address, False),
            "version": 3,
        }


def _numpy(x: Any, batch: tuple[int, ...] | None = None) -> np.ndarray:
    """A result ``(array, address, dims, code)`` of the glue as a C-order numpy
    array sharing Julia's memory: column-major ``d1 x ... x dn`` is C-order
    ``dn x ... x d1``, whose leading (batch) axis is given the shape ``batch``
    when given (no reshape afterwards)."""
    array, address, dims, code = x
    shape = tuple(map(int, dims))[::-1]
    if batch is not None:
        if math.prod(batch) != shape[0]:  # never read past Julia's array
            raise RuntimeError(f"Julia returned {shape[0]} matrices for {batch}")
        shape = (*batch, *shape[1:])
    return np.asarray(_JuliaMemory(array, int(address), shape, int(code)))


def handle(x: Any) -> Any:
    """The Julia array of a glue result, to pass back to a later call."""
    return x[0]


def from_julia(x: Any, batch: tuple[int, ...]) -> torch.Tensor:
    """Julia ``p x q x B`` result -> tensor ``(*batch, q, p)`` sharing its memory."""
    return torch.from_numpy(_numpy(x, batch))


def from_julia_vectors(x: Any, batch: tuple[int, ...]) -> torch.Tensor:
    """Julia ``k x B`` result -> tensor ``(*batch, k)`` sharing its memory."""
    return torch.from_numpy(_numpy(x, batch))


def julia_matrices(x: Any, batch: tuple[int, ...] | None = None) -> torch.Tensor:
    """Julia ``p x q x B`` result -> tensor ``(*batch, p, q)`` (default batch:
    ``(B,)``) with the same indexing (column-major strides, no copy): for
    eigenvectors, which are not swapped."""
    return torch.from_numpy(_numpy(x, batch)).mT


def gradient_buffer(shape_dtype: tuple) -> torch.Tensor:
    """A zeroed C-contiguous gradient that Julia's pullbacks write into (CPU
    memory, whatever torch's default device is)."""
    shape, dtype = shape_dtype
    return torch.zeros(shape, dtype=dtype, device="cpu")
