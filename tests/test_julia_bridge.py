"""The Julia bridge (pyspectral/julia/: the bridge, its ops, the public API;
and the backend dispatch), with the Julia runtime replaced at its one seam by a
numpy stand-in (tests/_fake_julia.py) that receives what Julia would receive:
column-major transposes of the batch. Runs everywhere; needs no Julia.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import _spy
import numpy as np
import pytest
import torch
from _fake_julia import FakeJulia, FakeJuliaError, installed, pointer
from _gauge_cases import GAUGE_CASES, check_gauge_policy
from _spectra import (
    hermitian,
    hermitian_with_spectrum,
    matrix_with_spectrum,
    randn,
    spd,
)

import pyspectral as ps
from pyspectral import _backend
from pyspectral._settings import options
from pyspectral.common.defaults import eps
from pyspectral.common.gauge import apply_gauge_records, gauge_message
from pyspectral.exceptions import (
    BackendError,
    DomainError,
    GaugeError,
    GaugeWarning,
    InputError,
    InputTypeError,
    JuliaError,
)
from pyspectral.julia import (
    _blas,
    _bridge,
    _convert,
    _events,
    _probe,
    _start,
    _svd,
    _sysimage,
)

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
SHAPES = [(5, 3), (3, 5), (4, 4)]
BATCHES = [(), (3,), (2, 3)]


def tol(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-11


def assert_same_basis(Q: torch.Tensor, R: torch.Tensor, atol: float) -> None:
    """Columns of Q and R equal up to a phase each: |Q^H R| = I."""
    P = (Q.mH @ R).abs()
    eye = torch.eye(P.shape[-1], dtype=P.dtype).expand_as(P)
    torch.testing.assert_close(P, eye, atol=atol, rtol=0)


def grad_of(loss_fn, A: torch.Tensor) -> torch.Tensor:
    A = A.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss_fn(A), A)
    return g


def weights(shape, dtype, seed):
    return randn(*shape, dtype=dtype, seed=seed)


# ------------------------------------------------------- layout, role swap


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_matches_torch_linalg(fake, dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
    U0, S0, Vh0 = torch.linalg.svd(A, full_matrices=False)
    assert len(fake.calls_to("svd_batched")) == 1
    k = min(shape)
    assert U.shape == (*batch, shape[0], k) and Vh.shape == (*batch, k, shape[1])
    assert S.shape == (*batch, k) and S.dtype == S0.dtype and U.dtype == dtype
    torch.testing.assert_close(S, S0, atol=tol(dtype), rtol=tol(dtype))
    torch.testing.assert_close(
        (U * S.unsqueeze(-2).to(dtype)) @ Vh, A, atol=tol(dtype) * 10, rtol=0
    )
    assert_same_basis(U, U0, tol(dtype) * 10)
    assert_same_basis(Vh.mH, Vh0.mH, tol(dtype) * 10)
    for t in (U, S, Vh):
        assert t.is_contiguous()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_svd_roles_are_swapped_exactly(fake, dtype, shape):
    """U is Julia's Vt transposed (not conjugated), Vh is Julia's U transposed."""
    A = randn(2, *shape, dtype=dtype)
    (U, S, Vh), (Uj, Sj, Vtj) = _svd.svd(A, False)
    for b in range(2):
        assert torch.equal(U[b], torch.from_numpy(Vtj[:, :, b]).T)
        assert torch.equal(Vh[b], torch.from_numpy(Uj[:, :, b]).T)
        assert torch.equal(S[b], torch.from_numpy(Sj[:, b]))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_full_matrices(fake, dtype, shape):
    m, n = shape
    A = randn(3, m, n, dtype=dtype)
    U, S, Vh = ps.svd(A, full_matrices=True, backend="julia")
    assert U.shape == (3, m, m) and Vh.shape == (3, n, n)
    assert fake.calls_to("svd_batched")[0].args[1] is True
    k = min(m, n)
    rec = (U[..., :k] * S.unsqueeze(-2).to(dtype)) @ Vh[..., :k, :]
    torch.testing.assert_close(rec, A, atol=tol(dtype) * 10, rtol=0)
    for Q in (U, Vh):
        eye = torch.eye(Q.shape[-1], dtype=dtype).expand_as(Q)
        torch.testing.assert_close(Q.mH @ Q, eye, atol=tol(dtype) * 10, rtol=0)
        assert Q.is_contiguous()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_top_k(fake, dtype):
    A = randn(2, 6, 4, dtype=dtype)
    U, S, Vh = ps.svd(A, k=2, backend="julia")
    U0, S0, Vh0 = torch.linalg.svd(A, full_matrices=False)
    assert U.shape == (2, 6, 2) and S.shape == (2, 2) and Vh.shape == (2, 2, 4)
    torch.testing.assert_close(S, S0[..., :2], atol=tol(dtype), rtol=tol(dtype))
    assert_same_basis(U, U0[..., :2], tol(dtype) * 10)
    assert_same_basis(Vh.mH, Vh0[..., :2, :].mH, tol(dtype) * 10)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_matches_torch_linalg(fake, dtype, uplo, batch):
    """Only the UPLO triangle is read: the other one is garbage. Julia reads
    the transpose, i.e. the other triangle of conj(A), and returns conj(V)."""
    H = hermitian(*batch, 4, 4, dtype=dtype)
    garbage = randn(*batch, 4, 4, dtype=dtype, seed=1) * 100
    if uplo == "L":
        A = torch.tril(H) + torch.triu(garbage, 1)
    else:
        A = torch.triu(H) + torch.tril(garbage, -1)
    w, V = ps.eigh(A, uplo, backend="julia")
    w0, V0 = torch.linalg.eigh(A, UPLO=uplo)
    (call,) = fake.calls_to("eigh_batched")
    assert call.args[1] == {"L": "U", "U": "L"}[uplo]
    assert w.shape == (*batch, 4) and V.shape == (*batch, 4, 4) and V.dtype == dtype
    torch.testing.assert_close(w, w0, atol=tol(dtype) * 10, rtol=tol(dtype))
    rec = (V * w.unsqueeze(-2).to(dtype)) @ V.mH
    torch.testing.assert_close(rec, H, atol=tol(dtype) * 100, rtol=0)
    assert_same_basis(V, V0, tol(dtype) * 10)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigvalsh(fake, dtype):
    A = hermitian(3, 4, 4, dtype=dtype)
    w = ps.eigvalsh(A, backend="julia")
    torch.testing.assert_close(
        w, torch.linalg.eigvalsh(A), atol=tol(dtype) * 10, rtol=0
    )
    assert fake.calls_to("eigh_batched")


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svdvals(fake, dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    S = ps.svdvals(A, backend="julia")
    assert len(fake.calls_to("svdvals_batched")) == 1
    assert S.is_contiguous() and S.shape == (*batch, min(shape))
    torch.testing.assert_close(
        S, torch.linalg.svdvals(A), atol=tol(dtype), rtol=tol(dtype)
    )


SVD_FUNCTIONS = ["polar", ("truncate", 2), ("pow", 3), ("pow", 0.5), "normalize"]


@pytest.mark.parametrize("f", SVD_FUNCTIONS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_function(fake, dtype, shape, f):
    A = randn(2, *shape, dtype=dtype)
    Y = ps.svd_function(A, f, backend="julia")
    Y0 = ps.svd_function(A, f, backend="torch")
    assert Y.shape == A.shape and Y.dtype == dtype and Y.is_contiguous()
    torch.testing.assert_close(Y, Y0, atol=tol(dtype) * 10, rtol=0)
    name = "svd_batched" if f == "normalize" else "svd_function_batched"
    assert len(fake.calls_to(name)) == 1


MATRIX_FUNCTIONS = ["sqrt", "log", "exp", "invsqrt", ("pow", 2), ("pow", -1.5)]


@pytest.mark.parametrize("f", MATRIX_FUNCTIONS, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_function(fake, dtype, uplo, f):
    A = spd(2, 4, 4, dtype=dtype) / 4
    Y = ps.matrix_function(A, f, uplo, backend="julia")
    Y0 = ps.matrix_function(A, f, uplo, backend="torch")
    assert Y.shape == A.shape and Y.dtype == dtype
    torch.testing.assert_close(Y, Y0, atol=tol(dtype) * 100, rtol=tol(dtype))
    (call,) = fake.calls_to("matrix_function_batched")
    assert call.args[1] == f and call.args[2] == {"L": "U", "U": "L"}[uplo]


# ------------------------------------------------------------- gradients


def svd_loss(A: torch.Tensor, backend: str, full: bool = False, k=None) -> torch.Tensor:
    """Gauge-invariant: symmetric in S, the polar factor, the projectors on
    the top-2 singular subspaces (and on the complement with full matrices)."""
    U, S, Vh = ps.svd(A, full_matrices=full, k=k, backend=backend)
    r = min(A.shape[-2:])
    W = weights(A.shape, A.dtype, 1)
    loss = (S**2 * torch.arange(1, S.shape[-1] + 1)).sum()
    loss = loss + ((U[..., :r] @ Vh[..., :r, :]) * W).real.sum()
    Pu = U[..., :2] @ U[..., :2].mH
    Pv = Vh[..., :2, :].mH @ Vh[..., :2, :]
    loss = loss + (Pu * weights(Pu.shape, A.dtype, 2)).real.sum()
    loss = loss + (Pv * weights(Pv.shape, A.dtype, 3)).real.sum()
    if full:
        Qu = U[..., r:] @ U[..., r:].mH
        Qv = Vh[..., r:, :].mH @ Vh[..., r:, :]
        loss = loss + (Qu * weights(Qu.shape, A.dtype, 4)).real.sum()
        loss = loss + (Qv * weights(Qv.shape, A.dtype, 5)).real.sum()
    return loss


GRAD_DTYPES = [torch.float64, torch.complex128]


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_gradient_matches_native(fake, dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    g = grad_of(lambda X: svd_loss(X, "julia"), A)
    g0 = grad_of(lambda X: svd_loss(X, "torch"), A)
    assert len(fake.calls_to("svd_pullback_batched!")) == 1
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_gradient_full_matrices_and_top_k(fake, dtype, shape):
    A = randn(2, *shape, dtype=dtype)
    for kw in ({"full": True}, {"k": 2}):
        g = grad_of(lambda X, kw=kw: svd_loss(X, "julia", **kw), A)
        g0 = grad_of(lambda X, kw=kw: svd_loss(X, "torch", **kw), A)
        torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("which", ["U", "S", "Vh"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_single_cotangent(fake, dtype, which):
    """Only one output used: the others' cotangents reach Julia as nothing,
    and gU/gVh land on Julia's Vt/U."""
    A = randn(2, 5, 3, dtype=dtype)

    def loss(X, backend):
        U, S, Vh = ps.svd(X, backend=backend, full_matrices=False)
        if which == "S":
            return S.sum()
        Q = U if which == "U" else Vh.mH
        P = Q[..., :1] @ Q[..., :1].mH
        return (P * weights(P.shape, dtype, 7)).real.sum()

    g = grad_of(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(
        g, grad_of(lambda X: loss(X, "torch"), A), atol=1e-10, rtol=1e-10
    )
    (call,) = fake.calls_to("svd_pullback_batched!")
    dU, dS, dVt = call.args[4:7]  # Julia's U = Vh^T, Vt = U^T
    assert (dU is None) == (which != "Vh")
    assert (dS is None) == (which != "S")
    assert (dVt is None) == (which != "U")


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svdvals_gradient(fake, dtype):
    A = randn(3, 5, 4, dtype=dtype)
    g = grad_of(lambda X: (ps.svdvals(X, backend="julia") ** 3).sum(), A)
    g0 = grad_of(lambda X: (torch.linalg.svdvals(X) ** 3).sum(), A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


def eigh_loss(A, uplo, backend):
    w, V = ps.eigh(A, uplo, backend=backend)
    P = V[..., :2] @ V[..., :2].mH
    return (w * torch.arange(1.0, w.shape[-1] + 1, dtype=w.dtype)).sum() + (
        P * weights(P.shape, A.dtype, 4)
    ).real.sum()


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_eigh_gradient_matches_native(fake, dtype, uplo, batch):
    """A general (non-Hermitian) leaf: the gradient lands on the UPLO triangle."""
    A = randn(*batch, 4, 4, dtype=dtype)
    g = grad_of(lambda X: eigh_loss(X, uplo, "julia"), A)
    g0 = grad_of(lambda X: eigh_loss(X, uplo, "torch"), A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)
    other = torch.triu(g, 1) if uplo == "L" else torch.tril(g, -1)
    assert not other.any()
    (call, *_) = fake.calls_to("eigh_pullback_batched!")
    assert call.named["uplo"] == {"L": "U", "U": "L"}[uplo]


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_eigvalsh_gradient(fake, dtype, uplo):
    """Eigenvalues only: the eigenvector cotangent reaches Julia as nothing."""
    A = randn(3, 4, 4, dtype=dtype)

    def loss(X, backend):
        return (ps.eigvalsh(X, uplo, backend=backend) ** 3).sum()

    g = grad_of(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(
        g, grad_of(lambda X: loss(X, "torch"), A), atol=1e-10, rtol=1e-10
    )
    (call,) = fake.calls_to("eigh_pullback_batched!")
    assert call.args[4] is None and call.args[3].shape == (4, 3)


@pytest.mark.parametrize("f", ["polar", ("truncate", 2), ("pow", 3)], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_function_gradient(fake, dtype, shape, f):
    A = randn(2, *shape, dtype=dtype)
    W = weights(A.shape, dtype, 5)

    def loss(X, backend):
        return (ps.svd_function(X, f, backend=backend) * W).real.sum()

    g = grad_of(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(
        g, grad_of(lambda X: loss(X, "torch"), A), atol=1e-10, rtol=1e-10
    )
    assert len(fake.calls_to("svd_function_pullback_batched!")) == 1


@pytest.mark.parametrize("f", ["sqrt", "log", "exp", ("pow", 2)], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_matrix_function_gradient(fake, dtype, uplo, f):
    A = spd(2, 4, 4, dtype=dtype) / 4
    W = weights(A.shape, dtype, 6)

    def loss(X, backend):
        return (ps.matrix_function(X, f, uplo, backend=backend) * W).real.sum()

    g = grad_of(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(
        g, grad_of(lambda X: loss(X, "torch"), A), atol=1e-10, rtol=1e-10
    )
    assert len(fake.calls_to("matrix_function_pullback_batched!")) == 1


# ------------------------------------------------- user (f, f_prime) pairs
# Evaluated in Python on the spectrum Julia computed; Julia forms Y and the
# pullback from the values (the *_values_* glue). Both backends must agree.

TANH = (torch.tanh, lambda s: 1 - torch.tanh(s) ** 2)
CUBE = (lambda s: s**3 + s, lambda s: 3 * s**2 + 1)
SIN = (torch.sin, torch.cos)

SVD_SPECTRA = [(3.0, 2.0, 1.0), (2.0, 2.0, 1.0), (1.0, 1.0, 1.0), (2.0, 1.0, 0.0)]
SVD_SPECTRA += [(1.0, 0.0, 0.0)]
EIG_SPECTRA = [(-1.0, 0.5, 2.0, 3.0), (1.0, 1.0, 2.0, 2.0), (0.5,) * 4]


def with_svd_spectrum(batch, shape, s, dtype):
    """A batch of ``shape`` matrices with singular values ``s`` (ties, zeros)."""
    n = len(batch) and int(np.prod(batch))
    Xs = [matrix_with_spectrum(s, *shape, dtype=dtype, seed=i) for i in range(n or 1)]
    return torch.stack(Xs).reshape(*batch, *shape)


def with_eig_spectrum(batch, w, dtype):
    n = len(batch) and int(np.prod(batch))
    Xs = [hermitian_with_spectrum(w, dtype=dtype, seed=i) for i in range(n or 1)]
    return torch.stack(Xs).reshape(*batch, len(w), len(w))


@pytest.mark.parametrize("pair", [TANH, CUBE], ids=["tanh", "cube"])
@pytest.mark.parametrize("s", SVD_SPECTRA, ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (3, 3)], ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_function_pair_values_and_gradients(fake, dtype, shape, s, pair):
    A = with_svd_spectrum((2,), shape, s, dtype)
    W = weights(A.shape, dtype, 7)

    def loss(X, backend):
        return (ps.svd_function(X, pair, backend=backend) * W).real.sum()

    Y = ps.svd_function(A, pair, backend="julia")
    torch.testing.assert_close(
        Y, ps.svd_function(A, pair, backend="torch"), atol=1e-12, rtol=0
    )
    assert Y.shape == A.shape and Y.dtype == dtype
    g = grad_of(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(
        g, grad_of(lambda X: loss(X, "torch"), A), atol=1e-10, rtol=1e-10
    )
    # the Julia path ran: one decomposition and the values glue, both ways
    names = [c.name for c in fake.calls]
    assert names.count("svd_batched") == 2  # the forward of each loss call
    assert names.count("svd_function_values_batched") == 2
    assert names.count("svd_function_values_pullback_batched!") == 1
    assert "svd_function_batched" not in names


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_function_pair_batches_and_dtypes(fake, dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    # f_prime returns float64 for every dtype: cast to the spectrum's, as natively
    pair = (torch.tanh, lambda s: (1 - torch.tanh(s) ** 2).double())
    Y = ps.svd_function(A, pair, backend="julia")
    Y0 = ps.svd_function(A, pair, backend="torch")
    assert Y.shape == A.shape and Y.dtype == dtype and Y.is_contiguous()
    torch.testing.assert_close(Y, Y0, atol=tol(dtype) * 10, rtol=0)
    (call,) = fake.calls_to("svd_function_values_batched")
    k, B = min(shape), int(np.prod(batch, dtype=int))
    for seen in call.args[3:]:  # the values: (k, B) column-major, S's dtype
        assert seen.shape == (k, B) and seen.f_contiguous
        assert seen.dtype == call.args[1].dtype


@pytest.mark.parametrize("pair", [SIN, (torch.exp, torch.exp)], ids=["sin", "exp"])
@pytest.mark.parametrize("w", EIG_SPECTRA, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_matrix_function_pair_values_and_gradients(fake, dtype, uplo, w, pair):
    A = with_eig_spectrum((2,), w, dtype)
    W = weights(A.shape, dtype, 8)

    def loss(X, backend):
        return (ps.matrix_function(X, pair, uplo, backend=backend) * W).real.sum()

    Y = ps.matrix_function(A, pair, uplo, backend="julia")
    torch.testing.assert_close(
        Y, ps.matrix_function(A, pair, uplo, backend="torch"), atol=1e-12, rtol=0
    )
    g = grad_of(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(
        g, grad_of(lambda X: loss(X, "torch"), A), atol=1e-10, rtol=1e-10
    )
    names = [c.name for c in fake.calls]
    assert names.count("eigh_batched") == 2
    assert names.count("matrix_function_values_batched") == 2
    (pb,) = fake.calls_to("matrix_function_values_pullback_batched!")
    assert pb.args[-1] == {"L": "U", "U": "L"}[uplo]  # Julia's triangle
    assert "matrix_function_batched" not in names


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_function_pair_batches_and_dtypes(fake, dtype, batch):
    A = hermitian(*batch, 4, 4, dtype=dtype)
    Y = ps.matrix_function(A, SIN, backend="julia")
    assert Y.shape == A.shape and Y.dtype == dtype
    torch.testing.assert_close(
        Y, ps.matrix_function(A, SIN, backend="torch"), atol=tol(dtype) * 10, rtol=0
    )
    assert len(fake.calls_to("matrix_function_values_batched")) == 1


def test_pairs_see_julias_spectrum_once_without_copies(fake):
    """f and f_prime get Julia's own spectrum (shared memory), once each in the
    forward; the backward reuses their values; everything is handed back
    zero-copy: Julia's factors by handle, the gradient buffer by pointer."""
    seen = []

    def f(s):
        seen.append(("f", s.data_ptr(), s.shape, s.dtype))
        return s**3 + s

    def fp(s):
        seen.append(("f_prime", s.data_ptr(), s.shape, s.dtype))
        return 3 * s**2 + 1

    A = randn(2, 3, 5, 4).requires_grad_(True)
    Y = ps.svd_function(A, (f, fp), backend="julia")
    (dec,) = fake.calls_to("svd_batched")
    assert dec.args[0].pointer == A.data_ptr()
    Uj, Sj, Vtj = dec.returned
    assert [c for c in seen if c[1] == Sj.pointer] == [
        ("f", Sj.pointer, (2, 3, 4), torch.float64),
        ("f_prime", Sj.pointer, (2, 3, 4), torch.float64),
    ]
    # the others: f(0) and the elementwise checks of f and f' on K - 1 values
    others = sorted((c[0], tuple(c[2])) for c in seen if c[1] != Sj.pointer)
    assert others == [("f", (1,)), ("f", (2, 3, 3)), ("f_prime", (2, 3, 3))]
    (fwd,) = fake.calls_to("svd_function_values_batched")
    assert [a.pointer for a in fwd.args[:3]] == [Uj.pointer, Sj.pointer, Vtj.pointer]
    assert Y.data_ptr() == fwd.returned[0].pointer

    (gA,) = torch.autograd.grad((Y * Y).sum(), A)
    assert len(seen) == 5  # not evaluated again
    (pb,) = fake.calls_to("svd_function_values_pullback_batched!")
    assert pb.args[0].pointer == gA.data_ptr()
    assert [a.pointer for a in pb.args[1:4]] == [Uj.pointer, Sj.pointer, Vtj.pointer]
    assert [a.pointer for a in pb.args[4:6]] == [a.pointer for a in fwd.args[3:5]]

    H = hermitian(2, 4, 4, dtype=torch.complex128).requires_grad_(True)
    seen.clear()
    Y = ps.matrix_function(H, (f, fp), backend="julia")
    (dec,) = fake.calls_to("eigh_batched")
    wj, Vj = dec.returned
    on_w = [x[:2] for x in seen if x[1] == wj.pointer]
    assert on_w == [("f", wj.pointer), ("f_prime", wj.pointer)]
    assert len(seen) == 4  # and the elementwise checks (no f(0) rule for eigh)
    (gH,) = torch.autograd.grad((Y.abs() ** 2).sum(), H)
    (pb,) = fake.calls_to("matrix_function_values_pullback_batched!")
    assert pb.args[0].pointer == gH.data_ptr()
    assert [a.pointer for a in pb.args[1:3]] == [wj.pointer, Vj.pointer]


BAD_PAIRS = [
    ((lambda s: s[..., :1], torch.ones_like), InputError, "must be elementwise"),
    ((lambda s: 1.0, torch.ones_like), InputTypeError, "got float"),
    ((lambda s: s * 1j, torch.ones_like), InputTypeError, "complex128"),
    ((lambda s: 1 / (s - s[..., :1]), torch.ones_like), DomainError, "finite"),
    ((torch.sin, lambda s: s * float("nan")), DomainError, "not NaN"),
]


@pytest.mark.parametrize("pair, error, match", BAD_PAIRS)
@pytest.mark.parametrize("backend", ["torch", "julia"])
def test_bad_pairs_same_error_on_both_backends(fake, backend, pair, error, match):
    with pytest.raises(error, match="^svd_function: the user f.*" + match):
        ps.svd_function(randn(2, 4, 3), pair, backend=backend)
    with pytest.raises(error, match="^matrix_function: the user f.*" + match):
        ps.matrix_function(hermitian(2, 3, 3), pair, backend=backend)


def test_bad_pair_message_names_the_point(fake):
    pair = (lambda s: 1 / (s - 1), lambda s: -1 / (s - 1) ** 2)
    H = torch.diag(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    for backend in ("torch", "julia"):
        with pytest.raises(DomainError, match="f is inf at eigenvalue 0, 1;"):
            ps.matrix_function(H, pair, backend=backend)
    # an infinite derivative is a documented infinite gradient, not an error
    sqrt = (torch.sqrt, lambda s: 0.5 / torch.sqrt(s))
    for backend in ("torch", "julia"):
        Y = ps.matrix_function(
            torch.diag(torch.tensor([0.0, 4.0])), sqrt, backend=backend
        )
        torch.testing.assert_close(Y, torch.diag(torch.tensor([0.0, 2.0])))


def test_pairs_under_torch_func_as_named_functions(fake):
    A = randn(4, 3)
    g = torch.func.grad(lambda X: ps.svd_function(X, CUBE).sum())(A)
    torch.testing.assert_close(
        g, grad_of(lambda X: ps.svd_function(X, CUBE, backend="torch").sum(), A)
    )
    Ys = torch.func.vmap(lambda X: ps.matrix_function(X, SIN))(hermitian(3, 3, 3))
    torch.testing.assert_close(
        Ys, ps.matrix_function(hermitian(3, 3, 3), SIN, backend="torch")
    )
    assert fake.calls == []
    for f in ("polar", CUBE):
        with pytest.raises(BackendError, match="torch.func"):
            torch.func.grad(
                lambda X, f=f: ps.svd_function(X, f, backend="julia").sum()
            )(A)


@pytest.mark.parametrize(
    "op",
    [
        lambda X: svd_loss(X, "julia"),
        lambda X: eigh_loss(X + X.mH, "L", "julia"),
        lambda X: ps.svd_function(X, ("pow", 3), backend="julia").sum(),
        lambda X: ps.matrix_function(
            X @ X.mT + 3 * torch.eye(3, dtype=X.dtype), "log", backend="julia"
        ).sum(),
        lambda X: ps.svd_function(X, CUBE, backend="julia").sum(),
        lambda X: ps.matrix_function(X + X.mT, SIN, backend="julia").sum(),
    ],
    ids=[
        "svd",
        "eigh",
        "svd_function",
        "matrix_function",
        "svd_function pair",
        "matrix_function pair",
    ],
)
def test_double_backward_falls_back_to_native(fake, op):
    A = randn(3, 3, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(op, (A,))
    assert torch.autograd.gradgradcheck(op, (A,))
    # With create_graph the first backward ran the native (differentiable)
    # pullback; the second-order terms went through Julia's pullback again.
    n = len(fake.calls)
    (g,) = torch.autograd.grad(op(A), A, create_graph=True)
    assert g.requires_grad
    assert not [c for c in fake.calls[n:] if "pullback" in c.name]


# ------------------------------------------------------------- zero copy


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_copy_svd(fake, dtype, batch):
    A = randn(*batch, 5, 3, dtype=dtype).requires_grad_(True)
    U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
    (call,) = fake.calls_to("svd_batched")  # one call for the whole batch
    assert call.args[0].pointer == A.data_ptr()
    Uj, Sj, Vtj = call.returned
    assert U.data_ptr() == Vtj.pointer
    assert S.data_ptr() == Sj.pointer
    assert Vh.data_ptr() == Uj.pointer

    (gA,) = torch.autograd.grad(svd_loss(A, "julia"), A)
    (pb,) = fake.calls_to("svd_pullback_batched!")
    assert pb.args[0].pointer == gA.data_ptr()  # Julia wrote into the gradient
    assert pb.args[0].writeable
    # the handles passed back are the very arrays returned by the forward
    Uj2, Sj2, Vtj2 = fake.calls_to("svd_batched")[1].returned
    assert [a.pointer for a in pb.args[1:4]] == [Uj2.pointer, Sj2.pointer, Vtj2.pointer]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_copy_eigh_and_functions(fake, dtype):
    A = hermitian(2, 3, 4, 4, dtype=dtype)
    w, V = ps.eigh(A, backend="julia")
    (call,) = fake.calls_to("eigh_batched")
    assert call.args[0].pointer == A.data_ptr()
    assert [w.data_ptr(), V.data_ptr()] == [a.pointer for a in call.returned]

    Y = ps.matrix_function(A, "exp", backend="julia")
    (call,) = fake.calls_to("matrix_function_batched")
    assert call.args[0].pointer == A.data_ptr()
    assert Y.data_ptr() == call.returned[0].pointer

    B = randn(2, 3, 5, 4, dtype=dtype)
    Y = ps.svd_function(B, "polar", backend="julia")
    (call,) = fake.calls_to("svd_function_batched")
    assert call.args[0].pointer == B.data_ptr()
    assert Y.data_ptr() == call.returned[0].pointer

    S = ps.svdvals(B, backend="julia")
    (call,) = fake.calls_to("svdvals_batched")
    assert call.args[0].pointer == B.data_ptr()
    assert S.data_ptr() == call.returned[0].pointer


@pytest.mark.parametrize(
    "name, run",
    [
        ("eigh_pullback_batched!", lambda X: eigh_loss(X, "L", "julia")),
        (
            "svd_function_pullback_batched!",
            lambda X: ps.svd_function(X, "polar", backend="julia").sum(),
        ),
        (
            "matrix_function_pullback_batched!",
            lambda X: ps.matrix_function(X, "exp", backend="julia").sum(),
        ),
    ],
)
def test_zero_copy_gradient_buffers(fake, name, run):
    A = hermitian(2, 4, 4).requires_grad_(True)
    (gA,) = torch.autograd.grad(run(A), A)
    (call,) = fake.calls_to(name)
    assert call.args[0].pointer == gA.data_ptr()


def test_gradient_buffer_shared_at_bridge_level(fake):
    A = randn(2, 5, 3)
    (U, S, Vh), handles = _svd.svd(A, False)
    gA = _svd.svd_pullback(
        (A.shape, A.dtype), handles, None, torch.ones_like(S), None, options()
    )
    (call,) = fake.calls_to("svd_pullback_batched!")
    assert call.args[0].pointer == gA.data_ptr()
    torch.testing.assert_close(gA, U @ Vh, atol=1e-12, rtol=0)


def test_non_contiguous_input_is_copied_not_misread(fake):
    A = randn(3, 5, dtype=torch.complex128).mT  # a (5, 3) view, not contiguous
    U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
    assert fake.calls_to("svd_batched")[0].args[0].pointer != A.data_ptr()
    torch.testing.assert_close(U * S.to(A.dtype) @ Vh, A, atol=1e-12, rtol=0)
    B = randn(4, 4, dtype=torch.complex128).conj()  # lazy conjugate bit
    w, V = ps.eigh(B + B.mH, backend="julia")
    torch.testing.assert_close(w, torch.linalg.eigvalsh(B + B.mH), atol=1e-12, rtol=0)


# --------------------------------------------------- dtype, batch mapping


NUMPY = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtype_mapping(fake, dtype):
    A = randn(5, 3, dtype=dtype)
    ps.svd(A, backend="julia", full_matrices=False)
    ps.eigh(hermitian(3, 3, dtype=dtype), backend="julia")
    for name in ("svd_batched", "eigh_batched"):
        (call,) = fake.calls_to(name)
        assert call.args[0].dtype == np.dtype(NUMPY[dtype])
    Uj, Sj, Vtj = fake.calls_to("svd_batched")[0].returned
    assert Uj.dtype == np.dtype(NUMPY[dtype])
    assert Sj.dtype == np.dtype(NUMPY[dtype]).type(0).real.dtype


@pytest.mark.parametrize(
    "batch, B", [((), 1), ((1,), 1), ((3,), 3), ((2, 3), 6), ((2, 1, 2), 4)], ids=str
)
def test_batch_mapping(fake, batch, B):
    """(*batch, m, n) is the column-major (n, m, B) array of the transposes."""
    A = randn(*batch, 5, 3)
    U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
    (call,) = fake.calls_to("svd_batched")
    At = call.args[0]
    assert At.shape == (3, 5, B)
    assert At.f_contiguous and At.strides == (8, 3 * 8, 15 * 8)
    assert [a.shape for a in call.returned] == [(3, 3, B), (3, B), (3, 5, B)]
    assert U.shape == (*batch, 5, 3) and S.shape == (*batch, 3)
    assert Vh.shape == (*batch, 3, 3)
    # the memory the bridge hands to Julia, read as Julia reads it
    # (unsafe_wrap: column-major), indexes the transposes
    keep: list = []
    Aj = fake._wrap(_convert.to_julia(A, keep))
    # the tensor's own memory, kept until the call returns
    assert keep[0].data_ptr() == A.data_ptr() == pointer(Aj)
    flat = A.reshape(B, 5, 3)
    for b in range(B):
        assert np.array_equal(Aj[:, :, b], flat[b].numpy().T)


def julia_result(a: np.ndarray) -> tuple:
    """What the glue's ``out`` returns for a Julia array (here a numpy one)."""
    a = np.asfortranarray(a)
    code = {np.dtype(t): c for c, t in _convert._NUMPY.items()}[a.dtype]
    return a, pointer(a), a.shape, code


def test_vector_and_matrix_conversions(fake):
    """Both ways without a copy: a tensor as ``(address, code, dims...)``
    (column-major dims) and a Julia result wrapped for torch."""
    t = randn(2, 3, 4)
    keep: list = []
    spec = _convert.to_julia_vectors(t, keep)
    assert spec == (t.data_ptr(), 2, 4, 6) and keep[0].data_ptr() == t.data_ptr()
    v = fake._wrap(spec)
    assert v.shape == (4, 6) and pointer(v) == t.data_ptr()
    result = julia_result(v.copy(order="F"))
    back = _convert.from_julia_vectors(result, (2, 3))
    assert torch.equal(back, t) and back.data_ptr() == pointer(result[0])
    M = randn(2, 3, 4)
    Mj = fake._wrap(_convert.to_julia_matrices(M, keep))
    assert Mj.shape == (3, 4, 2) and Mj.flags.f_contiguous
    result = julia_result(Mj.copy(order="F"))
    assert torch.equal(_convert.julia_matrices(result), M)
    assert _convert.julia_matrices(result).data_ptr() == pointer(result[0])
    # complex, and a lazily conjugated tensor: resolved (a copy), then kept
    Z = randn(2, 3, dtype=torch.complex128).conj()
    spec = _convert.to_julia(Z, keep)
    assert spec[1] == 4 and keep[-1].data_ptr() == spec[0] != Z.data_ptr()
    assert np.array_equal(fake._wrap(spec)[:, :, 0], Z.resolve_conj().numpy().T)


def test_results_keep_julias_array_alive(fake):
    """A tensor over a Julia result holds the array (the juliacall wrapper, here
    the stand-in's array) through numpy's base: dropping every other reference
    leaves the memory valid."""
    import gc
    import weakref

    a = np.asfortranarray(np.arange(6.0).reshape(2, 3))  # Julia's k x B = 2 x 3
    expected = torch.from_numpy(a.T.copy())  # as (B, k)
    ref = weakref.ref(a)
    t = _convert.from_julia_vectors(julia_result(a), (3,))
    del a
    gc.collect()
    assert ref() is not None  # still alive: the tensor holds it
    assert torch.equal(t, expected)
    del t
    gc.collect()
    assert ref() is None  # and only the tensor did


# ------------------------------------------------------ error translation


@pytest.mark.parametrize(
    "kind, error",
    [
        ("domain", DomainError),
        ("argument", InputError),
        ("gauge", GaugeError),
        ("other", JuliaError),
        ("something new", JuliaError),
    ],
)
def test_julia_errors_become_pyspectral_errors(fake, kind, error, monkeypatch):
    """Julia's message, never its stack trace (kept on the error, and chained
    as the cause with PYSPECTRAL_JULIA_TRACEBACK=yes)."""
    text = "DomainError with -1.0:\nsqrt was called with a negative real argument"
    monkeypatch.delenv("PYSPECTRAL_JULIA_TRACEBACK", raising=False)
    julia_error = FakeJuliaError(kind, text)
    fake.fail("svd_batched", julia_error)
    with pytest.raises(error) as info:
        ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    assert type(info.value) is error
    expected = text if kind == "gauge" else "svd (Julia): " + text
    assert str(info.value) == expected
    assert info.value.julia_error is julia_error
    assert info.value.julia_message == text
    assert info.value.__cause__ is None and info.value.__suppress_context__

    monkeypatch.setenv("PYSPECTRAL_JULIA_TRACEBACK", "yes")
    fake.fail("svd_batched", julia_error)
    with pytest.raises(error) as info:
        ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    assert info.value.__cause__ is julia_error


def test_non_julia_exceptions_propagate_unchanged(fake):
    err = ValueError("not from Julia")
    fake.fail("eigh_batched", err)
    with pytest.raises(ValueError) as info:
        ps.eigh(hermitian(3, 3), backend="julia")
    assert info.value is err
    assert _bridge.status()[0]  # still usable
    ps.eigh(hermitian(3, 3), backend="julia")


def test_errors_thrown_by_the_julia_rules(fake):
    with pytest.raises(DomainError, match=r"^matrix_function: 'log' .* eigenvalue 0 "):
        ps.matrix_function(-spd(3, 3), "log", backend="julia")
    with pytest.raises(JuliaError, match="UndefVarError"):
        ps.julia.function("no_such_function")
    # errors in a pullback too
    A = randn(4, 3).requires_grad_(True)
    U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
    fake.fail("svd_pullback_batched!", FakeJuliaError("argument", "DimensionMismatch"))
    with pytest.raises(InputError, match=r"svd \(Julia\): DimensionMismatch"):
        S.sum().backward()


# ------------------------------------------------------------------ gauge


def degenerate(dtype=torch.float64):
    """5x4 with singular values (3, 1, 1, 0.5): an exactly degenerate pair."""
    Q1 = torch.linalg.qr(randn(5, 5, dtype=dtype, seed=8))[0]
    Q2 = torch.linalg.qr(randn(4, 4, dtype=dtype, seed=9))[0]
    S = torch.tensor([3.0, 1.0, 1.0, 0.5], dtype=torch.float64).to(dtype)
    return Q1[:, :4] @ torch.diag(S) @ Q2.mH


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_gauge_warning_surfaces_from_julia(fake, dtype):
    A = degenerate(dtype).requires_grad_(True)
    U, S, Vh = ps.svd(A, backend="julia", gauge="warn", full_matrices=False)
    r = weights((5,), dtype, 3)
    with pytest.warns(GaugeWarning, match=r"^svd: .*degenerate") as record:
        (U[:, 1] * r).real.sum().backward()
    assert len(record) == 1
    # the glue recorded it in the pullback's own recorder and returned it
    (pb,) = fake.calls_to("svd_pullback_batched!")
    assert pb.named["gauge"] is True
    # the same loss on the native backend warns the same way (the gradients
    # differ: they depend on the basis each backend picked in the cluster)
    A2 = A.detach().clone().requires_grad_(True)
    U, S, Vh = ps.svd(A2, backend="torch", gauge="warn", full_matrices=False)
    with pytest.warns(GaugeWarning, match=r"^svd: "):
        (U[:, 1] * r).real.sum().backward()


def test_gauge_raise_and_ignore_through_julia(fake):
    A = degenerate().requires_grad_(True)
    U, S, Vh = ps.svd(A, backend="julia", gauge="raise", full_matrices=False)
    with pytest.raises(GaugeError, match=r"^svd: the incoming gradient depends") as e:
        U[:, 1].sum().backward()
    assert "Julia" not in str(e.value) and "Stacktrace" not in str(e.value)
    # "raise" is measured and recorded by Julia; Python raises
    assert fake.calls_to("svd_pullback_batched!")[-1].named["gauge"] is True
    U, S, Vh = ps.svd(A, backend="julia", gauge="ignore", full_matrices=False)
    U[:, 1].sum().backward()  # no warning (pytest turns GaugeWarning into errors)
    assert fake.calls_to("svd_pullback_batched!")[-1].named["gauge"] is False


@pytest.mark.parametrize("case", sorted(GAUGE_CASES))
def test_gauge_policy_on_every_checked_op(fake, case):
    """svd, eigh and both top-k paths: one native GaugeWarning under "warn",
    GaugeError under "raise", silence under "ignore", on the Julia backend (the
    stand-in records in each pullback call and returns the records, as the
    glue does) and natively (tests/_gauge_cases.py; the same check runs on real
    Julia in test_julia_backend.py)."""
    check_gauge_policy(case, "torch")
    check_gauge_policy(case, "julia")
    pullbacks = [c for c in fake.calls if "pullback" in c.name]
    assert [c.named["gauge"] for c in pullbacks] == [True, True, False]


# ------------------------------------------------------------- the spy


def test_a_spy_that_saw_nothing_fails_the_test():
    """The real-Julia spy (tests/_spy.py): ``take`` raises when it recorded no
    call, so a spy off the bridge's path cannot pass a test vacuously (the
    2026-11-27 run's spy tests failed only by unpacking an empty list)."""
    empty = _spy.Spy(lambda: ())
    with pytest.raises(_spy.SpySawNothing, match="recorded no Julia call"):
        empty.take()
    assert empty.take(allow_none=True) == []
    one = ("svd_batched", 1, 1, True, (("wrapped", 64, (3, 5, 1)),), ())
    seen = _spy.Spy(lambda: (one,)).take()
    assert seen == [
        _spy.Call(
            "svd_batched", 1, 1, True, (_spy.JArray("wrapped", 64, (3, 5, 1)),), ()
        )
    ]
    assert _spy.data_calls(seen) == seen


def test_the_spy_parses_as_one_julia_module():
    """tests/_spy.py's Julia source (it runs only where Julia is present)."""
    ts = pytest.importorskip("tree_sitter")
    tsj = pytest.importorskip("tree_sitter_julia")
    tree = ts.Parser(ts.Language(tsj.language())).parse(_spy.SPY_JL.encode())
    bad, stack = [], [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            bad.append(f"line {node.start_point[0] + 1}: {node.type}")
        stack.extend(node.children)
    assert not bad, bad
    top = [c for c in tree.root_node.children if c.type != "line_comment"]
    assert len(top) == 1 and top[0].type == "module_definition"  # seval: one expr


def test_every_glue_call_passes_the_spied_entry(fake, monkeypatch):
    """The spy sits on ``_bridge._state["enter"]``: every glue call, forward and
    pullback alike, passes there. (The bridge resolves its glue functions once,
    when Julia starts, so a spy replacing glue names afterwards would see
    nothing; the old one replaced ``_bridge.call``, which the gauge-checking
    pullbacks did not go through either.)"""
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)  # the stand-in starts
    seen: list[str] = []
    enter = _bridge._state["enter"]

    def spying(f, *args):
        seen.append(f.args[0])  # the stand-in's glue: partial(_run, name, impl)
        return enter(f, *args)

    monkeypatch.setitem(_bridge._state, "enter", spying)
    A = randn(2, 5, 3).requires_grad_(True)
    svd_loss(A, "julia").backward()
    H = hermitian(2, 4, 4).requires_grad_(True)
    eigh_loss(H, "L", "julia").backward()
    ps.matrix_function(H, "exp", backend="julia").sum().backward()
    ps.svd_function(A, "polar", backend="julia").sum().backward()
    assert seen == [
        "svd_batched",
        "svd_pullback_batched!",
        "eigh_batched",
        "eigh_pullback_batched!",
        "matrix_function_batched",
        "matrix_function_pullback_batched!",
        "svd_function_batched",
        "svd_function_pullback_batched!",
    ]
    assert [c.name for c in fake.calls[1:]] == seen  # and nothing else reached Julia


def test_the_glue_defines_every_function_the_bridge_resolves():
    """What the bridge resolves when Julia starts (GLUE_FUNCTIONS) is defined
    in glue.jl, and the element type codes agree on both sides."""
    glue = _bridge.GLUE.read_text()
    defined = set(re.findall(r"^function (\w+!?)\(", glue, re.M))
    defined |= set(re.findall(r"^(\w+!?)\([^\n]*\) =", glue, re.M))
    assert set(_bridge.GLUE_FUNCTIONS) <= defined, sorted(
        set(_bridge.GLUE_FUNCTIONS) - defined
    )
    assert "function logged(f, args...)" in glue  # positional only: no kwargs
    (eltypes,) = re.findall(r"^const ELTYPES = \((.*)\)$", glue, re.M)
    julia = [t.strip() for t in eltypes.split(",")]
    assert julia == ["Float32", "Float64", "ComplexF32", "ComplexF64"]
    torch_order = [torch.float32, torch.float64, torch.complex64, torch.complex128]
    assert [_convert._CODES[t] for t in torch_order] == [1, 2, 3, 4]


def glue_parameters(glue: str, name: str) -> list[str]:
    """The positional parameters of glue function ``name`` (its one method
    called from Python), read from glue.jl."""
    pattern = rf"^(?:function )?{re.escape(name)}\(([^)]*)\)"
    (params,) = re.findall(pattern, glue, re.M)
    return [p.split("::")[0].strip() for p in params.split(";")[0].split(",")]


@pytest.mark.parametrize("name", [n for n in _bridge.GLUE_FUNCTIONS if "batched" in n])
def test_the_stand_in_takes_the_glues_arguments(name):
    """Each built-in op of the stand-in has the glue function's positional
    parameters (the bridge is tested against the stand-in; the glue cannot run
    here), one by one, Python's ASCII names for Julia's Greek ones."""
    glue = glue_parameters(_bridge.GLUE.read_text(), name)
    impl = getattr(FakeJulia, name.replace("!", "_b"))
    fake = list(inspect.signature(impl).parameters)[1:]
    ascii = {"Δ": "d", "λ": "w"}
    assert len(glue) == len(fake), (glue, fake)
    for j, f in zip(glue, fake):
        j = "".join(ascii.get(c, c) for c in j)
        assert j == f or j.lower() == f.lower(), (name, glue, fake)


def test_a_stray_numpy_array_fails_the_stand_in(fake):
    """Only a result of an earlier call may reach a built-in op as an array:
    any other numpy array would reach Julia as PythonCall's PyArray, on which
    Julia's linear algebra runs its generic (non-BLAS) code."""
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    with pytest.raises(AssertionError, match="PyArray"):
        _bridge.call("svd", "svd_batched", np.ones((3, 3, 1), order="F"), False)


def test_eigh_gauge_warning(fake):
    Q = torch.linalg.qr(randn(4, 4))[0]
    H = Q @ torch.diag(torch.tensor([1.0, 2.0, 2.0, 3.0], dtype=torch.float64)) @ Q.T
    A = H.requires_grad_(True)
    w, V = ps.eigh(A, backend="julia")
    with pytest.warns(GaugeWarning, match=r"^eigh: ") as record:
        V[:, 1].sum().backward()
    assert len(record) == 1
    w, V = ps.eigh(A, backend="julia", gauge="raise")
    with pytest.raises(GaugeError, match=r"^eigh: the incoming gradient depends"):
        V[:, 1].sum().backward()


def test_domain_error_at_the_edge_keeps_julias_words(fake):
    """Should the native check pass on Julia's spectrum (a tie at the domain's
    edge), the error is Julia's, named as such."""
    spectrum = np.asfortranarray(np.array([[1.0], [2.0]]))
    text = "DomainError with -0.0:\nmatrix_function: :log needs ..."
    fake.fail("matrix_function_batched", FakeJuliaError("domain", text, spectrum))
    with pytest.raises(DomainError) as info:
        ps.matrix_function(spd(2, 2), "log", backend="julia")
    assert str(info.value) == "matrix_function (Julia): " + text


def test_options_reach_julia(fake):
    A = randn(4, 3).requires_grad_(True)
    U, S, Vh = ps.svd(
        A,
        backend="julia",
        degeneracy_atol=1e-3,
        broadening=1e-6,
        gauge="ignore",
        gauge_atol=0.5,
        full_matrices=False,
    )
    (U @ Vh).sum().backward()
    call = fake.calls_to("svd_pullback_batched!")[0]
    options = ("degeneracy_atol", "broadening", "gauge", "gauge_atol")
    assert {k: call.named[k] for k in options} == {
        "degeneracy_atol": 1e-3,
        "broadening": 1e-6,
        "gauge": False,
        "gauge_atol": 0.5,
    }


# -------------------------------------------------------- lock and threads


def run_in_thread(fn):
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised below
            out["error"] = err

    t = threading.Thread(target=target)
    t.start()
    t.join(30)
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out.get("value"), t.ident


def test_owner_thread_does_not_touch_gc(fake):
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    assert fake.gc_log == []
    assert fake.calls_to("svd_batched")[0].gc_enabled


def test_foreign_thread_runs_with_gc_paused(fake):
    ps.svd(
        randn(3, 3), backend="julia", full_matrices=False
    )  # Julia started on this thread
    (U, S, Vh), ident = run_in_thread(
        lambda: ps.svd(randn(4, 3), backend="julia", full_matrices=False)
    )
    call = fake.calls_to("svd_batched")[-1]
    assert call.thread == ident and not call.gc_enabled
    assert fake.gc_log == [(ident, False), (ident, True)]
    assert fake.gc_on
    torch.testing.assert_close(U * S @ Vh, randn(4, 3), atol=1e-12, rtol=0)


def test_foreign_thread_restores_gc_after_an_error(fake):
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    fake.fail("svd_batched", FakeJuliaError("domain", "boom"))
    with pytest.raises(DomainError, match="boom"):
        run_in_thread(lambda: ps.svd(randn(3, 3), backend="julia", full_matrices=False))
    assert fake.gc_on and [on for _, on in fake.gc_log] == [False, True]


def test_foreign_thread_leaves_gc_disabled_if_it_was(fake):
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    fake.gc_on = False
    run_in_thread(lambda: ps.svdvals(randn(3, 3), backend="julia"))
    assert fake.gc_on is False


def test_backward_from_a_worker_thread(fake):
    A = randn(2, 5, 3, dtype=torch.complex128).requires_grad_(True)
    loss = svd_loss(A, "julia")  # forward on the owner thread
    _, ident = run_in_thread(loss.backward)
    (call,) = fake.calls_to("svd_pullback_batched!")
    assert call.thread == ident and not call.gc_enabled
    assert fake.gc_on
    torch.testing.assert_close(
        A.grad, grad_of(lambda X: svd_loss(X, "torch"), A), atol=1e-10, rtol=1e-10
    )


def test_julia_started_from_a_worker_thread(fake):
    _, ident = run_in_thread(
        lambda: ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    )
    assert _bridge._state["owner"].ident == ident
    ps.svd(
        randn(3, 3), backend="julia", full_matrices=False
    )  # now the main thread is the foreign one
    assert not fake.calls_to("svd_batched")[-1].gc_enabled and fake.gc_on


def test_concurrent_calls_are_serialized(fake):
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    fake.delay = 0.002
    results, errors = [], []

    def work(seed):
        try:
            A = randn(2, 5, 3, dtype=torch.float64, seed=seed).requires_grad_(True)
            g = grad_of(lambda X: svd_loss(X, "julia"), A)
            w = ps.eigvalsh(hermitian(4, 4, seed=seed), backend="julia")
            results.append((seed, g, w))
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and not fake.reentered and len(results) == 8
    for seed, g, w in results:
        A = randn(2, 5, 3, dtype=torch.float64, seed=seed)
        torch.testing.assert_close(
            g, grad_of(lambda X: svd_loss(X, "torch"), A), atol=1e-10, rtol=1e-10
        )
        torch.testing.assert_close(w, torch.linalg.eigvalsh(hermitian(4, 4, seed=seed)))
    assert fake.gc_on


def test_the_lock_is_held_during_a_call(fake):
    held = []
    original = fake.svdvals_batched

    def try_lock():
        got = _bridge._lock.acquire(blocking=False)
        if got:
            _bridge._lock.release()
        held.append(got)

    def svdvals_batched(At):
        run_in_thread(try_lock)
        return original(At)

    fake.svdvals_batched = svdvals_batched  # bound when the glue starts
    ps.svdvals(randn(3, 3), backend="julia")
    run_in_thread(try_lock)
    assert held == [False, True]


# ------------------------------------------------------ backend selection


def test_auto_is_native_even_with_julia_installed(fake):
    """backend="auto" (the default) is the native backend for every call, the
    measured-fast one: Julia, installed here, is not even started."""
    A = randn(4, 3).requires_grad_(True)
    U, S, Vh = ps.svd(A, full_matrices=False)
    (U.sum() + S.sum()).backward()
    ps.svd(A, k=2)
    ps.eigh(hermitian(3, 3))
    ps.eigh(spd(6, 6), k=2, method="randomized")
    ps.svd_function(A, "polar")
    ps.matrix_function(spd(3, 3), "sqrt")
    ps.svdvals(A)
    ps.eigvalsh(hermitian(3, 3))
    for backend in ("auto", "torch"):
        assert _backend.resolve_backend("svd", backend, A) == "torch"
    assert fake.starts == 0 and fake.probes == 0 and fake.calls == []
    assert _bridge.status() == (True, "installed (not started yet)")  # installed
    assert _backend.resolve_backend("svd", "julia", A) == "julia" and fake.starts == 1


def test_auto_uses_torch_under_torch_func(fake):
    A = randn(3, 4, 3)
    S = torch.func.vmap(lambda X: ps.svd(X, full_matrices=False)[1])(A)
    torch.testing.assert_close(S, torch.linalg.svdvals(A))
    g = torch.func.grad(lambda X: ps.svdvals(X).sum())(A[0])
    torch.testing.assert_close(
        g, grad_of(lambda X: torch.linalg.svdvals(X).sum(), A[0])
    )
    torch.func.grad(lambda X: eigh_loss(X + X.mT, "L", "auto"))(A[0][:3])
    assert fake.calls == []
    with pytest.raises(BackendError, match="torch.func"):
        torch.func.vmap(lambda X: ps.svd(X, backend="julia", full_matrices=False)[1])(A)


def test_auto_treats_user_pairs_like_named_functions(fake):
    """Whatever ``auto`` picks for a named function it picks for a pair."""
    A, H = randn(4, 3), spd(3, 3)
    for call, named, pair in (
        (ps.svd_function, "polar", TANH),
        (ps.matrix_function, "exp", SIN),
    ):
        X = A if call is ps.svd_function else H
        n = len(fake.calls)
        call(X, named)
        named_on_julia = len(fake.calls) > n
        n = len(fake.calls)
        call(X, pair)
        assert (len(fake.calls) > n) == named_on_julia


def test_non_cpu_tensors(fake):
    A = torch.empty(4, 3, device="meta", dtype=torch.float64)
    assert _backend.resolve_backend("svd", "auto", A) == "torch"
    with pytest.raises(BackendError, match="CPU tensors only.*meta.*backend='torch'"):
        _backend.resolve_backend("svd", "julia", A)
    with pytest.raises(BackendError, match="CPU tensors only"):
        _convert.check_tensor("svd", A)
    assert fake.starts == 0  # refused before starting Julia


def test_empty_tensors_run_natively(fake):
    for A in (torch.zeros(0, 4, 3, dtype=torch.float64), torch.zeros(2, 0, 3)):
        U, S, Vh = ps.svd(A, full_matrices=False)
        assert S.shape == (*A.shape[:-2], 0 if 0 in A.shape[-2:] else 3)
        with pytest.raises(BackendError, match="empty tensors"):
            ps.svd(A, backend="julia", full_matrices=False)
    assert fake.calls == []


def test_unknown_backend(fake):
    with pytest.raises(BackendError, match="backend must be one of"):
        ps.svd(randn(3, 3), backend="jl", full_matrices=False)


def test_julia_not_installed():
    with installed(FakeJulia(probe_reason="Julia is not installed here")) as fake:
        A = randn(4, 3)
        U, S, Vh = ps.svd(A, full_matrices=False)  # auto: native
        torch.testing.assert_close(S, torch.linalg.svdvals(A))
        t0 = time.perf_counter()
        with pytest.raises(BackendError, match="Julia is not installed here"):
            ps.svd(A, backend="julia", full_matrices=False)
        with pytest.raises(BackendError, match="Julia is not installed here"):
            ps.julia.function("logdet")
        assert time.perf_counter() - t0 < 0.5
        assert _bridge.status() == (False, "Julia is not installed here")
        assert fake.starts == 0 and fake.probes == 1  # probed once per process


def test_julia_fails_to_start():
    err = RuntimeError("juliapkg: could not resolve")
    with installed(FakeJulia(start_error=err)) as fake:
        A = randn(4, 3)
        with pytest.raises(BackendError, match="could not resolve") as info:
            ps.svd(A, backend="julia", full_matrices=False)
        assert "python -m pyspectral install-julia" in str(info.value)
        assert "PYTHON_JULIAPKG_EXE" in str(info.value)
        assert info.value.__cause__ is err
        ok, why = _bridge.status()
        assert not ok and why.startswith("Julia failed to start: juliapkg")
        ps.svd(A, full_matrices=False)  # auto falls back without retrying
        with pytest.raises(BackendError, match="could not resolve"):
            ps.eigh(hermitian(3, 3), backend="julia")
        assert fake.starts == 1


def test_status_when_loaded(fake):
    assert _bridge.status() == (True, "installed (not started yet)")
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    assert _bridge.status() == (True, "Julia backend loaded")


# ---------------------------------------------------- ps.julia.function


def test_function_scalar_output(fake):
    f = ps.julia.function("logdet")
    for dtype in (torch.float64, torch.float32):
        x = spd(4, 4, dtype=dtype)
        y = f(x)
        assert y.dim() == 0 and y.dtype == dtype
        torch.testing.assert_close(y, torch.logdet(x))
    assert f.last_rule == "rrule"
    (call,) = fake.calls_to("user_eval")
    assert call.args == ["logdet"]
    fwd = fake.calls_to("function_forward")[-1]
    assert fwd.args[1].pointer == x.data_ptr() and fwd.args[1].c_contiguous
    assert fwd.args[1].shape == (4, 4)  # logical layout, not transposed


@pytest.mark.parametrize("source", ["logdet", "inv", "x -> sum(abs2, x)"])
def test_function_gradcheck(fake, source):
    f = ps.julia.function(source)
    x = spd(4, 4).requires_grad_(True)
    assert torch.autograd.gradcheck(f, (x,))
    assert f.last_rule == ("zygote" if "->" in source else "rrule")
    assert fake.calls_to("function_pullback")


def test_function_array_output_and_gradient(fake):
    f = ps.julia.function("inv")
    x = spd(3, 3).requires_grad_(True)
    y = f(x)
    assert isinstance(y, torch.Tensor) and y.shape == (3, 3) and y.dtype == x.dtype
    torch.testing.assert_close(y, torch.linalg.inv(x))
    (y * randn(3, 3)).sum().backward()
    g0 = grad_of(lambda X: (torch.linalg.inv(X) * randn(3, 3)).sum(), x)
    torch.testing.assert_close(x.grad, g0)


def test_function_several_arguments(fake):
    f = ps.julia.function("(x, y) -> x * y")
    x = randn(3, 4).requires_grad_(True)
    y = randn(4, 2, seed=1).requires_grad_(True)
    torch.testing.assert_close(f(x, y), x @ y)
    assert torch.autograd.gradcheck(f, (x, y))
    assert f.last_rule == "zygote"


def test_function_tuple_output(fake):
    f = ps.julia.function("x -> (sum(x), 2x)")
    x = randn(3, 3).requires_grad_(True)
    s, y = f(x)
    assert s.dim() == 0 and y.shape == (3, 3)
    torch.testing.assert_close(s, x.sum())
    torch.testing.assert_close(y, 2 * x)
    assert torch.autograd.gradcheck(f, (x,))


def test_function_non_tensor_argument(fake):
    f = ps.julia.function("(x, n) -> n * sum(x)")
    x = randn(3, 3).requires_grad_(True)
    y = f(x, 3.0)
    y.backward()
    torch.testing.assert_close(x.grad, torch.full((3, 3), 3.0, dtype=torch.float64))


def test_function_errors(fake):
    with pytest.raises(InputTypeError, match="Julia source text"):
        ps.julia.function(torch.logdet)
    f = ps.julia.function("logdet")
    with pytest.raises(BackendError, match="CPU tensors only"):
        f(torch.empty(3, 3, device="meta"))


def test_include(fake, tmp_path):
    path = tmp_path / "rules.jl"
    path.write_text("f(x) = 2x\n")
    ps.julia.include(path)
    (call,) = fake.calls_to("user_include")
    assert call.args == [str(path.resolve())]
    with pytest.raises(FileNotFoundError, match="no file"):
        ps.julia.include(tmp_path / "missing.jl")


# ------------------------------------------------------ Julia test items


def test_testset_runner_reports_julia_failures(fake, tmp_path):
    from test_julia_rules import check_testset

    path = tmp_path / "runtests.jl"
    path.write_text('@testset "good" begin end\n@testset "bad" begin end\n')
    assert ps.julia.testset_names(path) == ["good", "bad"]
    failure = (
        "Test Failed at /pkg/test/runtests.jl:12\n  Expression: svd_pullback(A) ≈ fd\n"
        "   Evaluated: [1.0] ≈ [2.0]"
    )
    fake.testsets = {"good": (7, []), "bad": (3, [failure, "Error During Test"])}
    check_testset(path, "good")  # passes
    with pytest.raises(pytest.fail.Exception) as info:
        check_testset(path, "bad")
    text = str(info.value)
    assert "runtests.jl:12" in text and "Evaluated: [1.0] ≈ [2.0]" in text
    assert "Error During Test" in text and "2 failure" in text
    calls = fake.calls_to("run_testset")
    assert [c.args for c in calls] == [
        [str(path.resolve()), "good"],
        [str(path.resolve()), "bad"],
    ]

    fake.missing = ["ChainRulesTestUtils"]
    with pytest.raises(pytest.skip.Exception, match="install-julia --tests"):
        check_testset(path, "good")


def test_testset_runner_skips_without_julia(tmp_path):
    from test_julia_rules import check_testset

    path = tmp_path / "runtests.jl"
    path.write_text('@testset "good" begin end\n')
    with installed(FakeJulia(probe_reason="no Julia here")):
        with pytest.raises(
            pytest.skip.Exception, match="Julia is not installed: no Julia"
        ):
            check_testset(path, "good")


def test_run_tests_summary(fake, tmp_path, capsys):
    path = tmp_path / "runtests.jl"
    path.write_text('@testset "a" begin end\n@testset "b \\"q\\"" begin end\n')
    fake.testsets = {"a": (2, []), 'b "q"': (1, ["Test Failed at x.jl:1"])}
    assert ps.julia.run_tests(path) is False
    out = capsys.readouterr().out
    assert "a: 2 passed, ok" in out and "1 FAILED" in out and "x.jl:1" in out
    assert [c.args[1] for c in fake.calls_to("run_testset")] == ["a", 'b "q"']


def test_testset_names_are_julia_strings(tmp_path):
    path = tmp_path / "runtests.jl"
    path.write_text(
        '@testset "plain" begin end\n'
        '@testset "esc \\"q\\" \\\\ \\$x" begin end\n'
        '@testset "n = $n" for n in 1:2\n'  # interpolated: not a literal name
        '    @testset "nested" begin end\n'
        "end\n"
        '# @testset "comment"\n'
    )
    assert ps.julia.testset_names(path) == ["plain", 'esc "q" \\ $x']


def test_missing_test_packages_sends_a_tuple(fake):
    fake.missing = ["Zygote"]
    assert ps.julia.missing_test_packages() == ["Zygote"]
    (call,) = fake.calls_to("missing_packages")
    assert isinstance(call.args[0], tuple) and "ChainRulesTestUtils" in call.args[0]


# --------------------------------------- import, and Julia really missing


def test_import_does_not_import_juliacall():
    env = {k: v for k, v in os.environ.items() if k != "PYSPECTRAL_START_JULIA"}
    code = (
        "import sys, pyspectral, pyspectral.julia\n"
        "assert 'juliacall' not in sys.modules, 'juliacall imported'\n"
        "assert 'juliapkg' not in sys.modules, 'juliapkg imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


@pytest.mark.skipif(_bridge.status()[0], reason="Julia is installed here")
def test_backend_julia_without_julia_raises_quickly():
    with _bridge._lock:
        saved = dict(_bridge._state)
        _bridge.reset()
    try:
        t0 = time.perf_counter()
        with pytest.raises(BackendError) as info:
            ps.svd(randn(3, 3), backend="julia", full_matrices=False)
        elapsed = time.perf_counter() - t0
        assert elapsed < 5, f"took {elapsed:.1f} s"
        assert "python -m pyspectral install-julia" in str(info.value)
        assert "PYTHON_JULIAPKG_EXE" in str(info.value)
        assert "juliacall" not in sys.modules or _bridge.status()[0]
        # auto quietly uses the native backend
        ps.svd(randn(3, 3), full_matrices=False)
    finally:
        with _bridge._lock:
            _bridge._state.update(saved)


def test_gauge_records_belong_to_their_own_call(fake):
    """Concurrent backward passes under gauge="raise": each pullback's gauge
    records come back from the very call that made them (under the lock), so a
    gauge-dependent loss raises in its own thread and an invariant one (the
    polar factor) never catches another thread's records."""
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)
    fake.delay = 0.001
    A = degenerate()
    outcomes, errors = [], []

    def work(dependent):
        try:
            for _ in range(3):
                X = A.clone().requires_grad_(True)
                U, S, Vh = ps.svd(
                    X, backend="julia", gauge="raise", full_matrices=False
                )
                loss = U[:, 1].sum() if dependent else (U @ Vh).sum()
                try:
                    loss.backward()
                    outcomes.append((dependent, "passed"))
                except GaugeError:
                    outcomes.append((dependent, "raised"))
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=work, args=(d,)) for d in (True, False) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(outcomes) == 18
    assert set(outcomes) == {(True, "raised"), (False, "passed")}


STUB_JULIACALL = """
import os
import warnings

# juliacall reads its options once, at import
SEEN = {k: v for k, v in os.environ.items() if k.startswith("PYTHON_JULIACALL_")}
warnings.warn("torch was imported before juliacall. This may cause a segfault.")
warnings.warn("an unrelated note from juliacall", FutureWarning)


class JuliaError(Exception):
    def __init__(self, exception, message):
        super().__init__(message)
        self.exception = exception


class _Glue:
    def error_description(self, e):
        kind = {"DomainError": "domain", "ArgumentError": "argument"}.get(e, "other")
        return kind, e + ": Julia's message", None


class _Main:
    def __init__(self):
        self.evals, self.includes = [], []
        self.PySpectralGlue = _Glue()

    def seval(self, src):
        self.evals.append(src)
        if "PYSPECTRAL_SYSIMAGE_SOURCES" in src:
            return ""  # not started from pyspectral's system image

    def include(self, path):
        self.includes.append(path)


Main = _Main()
"""


def test_real_runtime_start_and_describe(tmp_path, monkeypatch):
    """JuliaRuntime itself, against a stub juliacall module: what it evaluates,
    the import-order warning, the signal-handling default, error description."""
    if "juliacall" in sys.modules:
        pytest.skip("the real juliacall is loaded in this process")
    (tmp_path / "juliacall.py").write_text(STUB_JULIACALL)
    monkeypatch.syspath_prepend(str(tmp_path))
    for key in ("PYTHON_JULIACALL_HANDLE_SIGNALS", "PYTHON_JULIACALL_THREADS"):
        monkeypatch.setenv(key, "placeholder")  # restored after the test
        monkeypatch.delenv(key)
    monkeypatch.delenv("JULIA_NUM_THREADS", raising=False)
    # the stub has no BLAS to forward nor an image to start from
    monkeypatch.setenv(_blas.BLAS_ENV, "default")
    monkeypatch.setenv(_sysimage.ENV, "no")
    import juliapkg

    resolved = []
    monkeypatch.setattr(juliapkg, "resolve", lambda: resolved.append(True))
    rt = _bridge.JuliaRuntime()
    try:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            glue = rt.start()
        assert resolved == [True]  # juliapkg's resolve, before juliacall loads
        texts = {w.category: str(w.message) for w in record}
        assert "PYSPECTRAL_START_JULIA" in texts[RuntimeWarning]  # ours, instead of
        assert UserWarning not in texts  # juliacall's own torch warning
        assert texts[FutureWarning] == "an unrelated note from juliacall"  # passed on
        jc = sys.modules["juliacall"]
        assert glue is jc.Main.PySpectralGlue
        # Julia's BLAS is set up (start_blas) before any package loads.
        assert jc.Main.evals[:2] == [_blas.BLAS_JL.strip(), "using PySpectral"]
        # then whether the image has the glue (it has not), so it is loaded
        assert len(jc.Main.evals) == 3 and _sysimage.IMAGE_MARK in jc.Main.evals[2]
        assert jc.Main.includes == [str(_bridge.GLUE)]
        assert jc.SEEN["PYTHON_JULIACALL_HANDLE_SIGNALS"] == "yes"
        assert jc.SEEN["PYTHON_JULIACALL_THREADS"] == str(_start.cpus())
        # and not left behind for a subprocess to inherit
        assert "PYTHON_JULIACALL_HANDLE_SIGNALS" not in os.environ
        assert "PYTHON_JULIACALL_THREADS" not in os.environ
        err = jc.JuliaError("DomainError", "DomainError with -1.0: log")
        assert rt.describe(err) == ("domain", "DomainError: Julia's message", None)
        assert rt.describe(ValueError("not Julia")) is None
        assert rt.probe() is None  # juliacall loaded: installed
    finally:
        sys.modules.pop("juliacall", None)
    assert rt.describe(err) is None  # juliacall gone: nothing is a Julia error


def test_truncation_inside_cluster_warns_through_julia(fake):
    A = degenerate()  # a repeated singular value at positions 1, 2
    with pytest.warns(GaugeWarning, match=r"^svd_function: \('truncate', 2\)"):
        ps.svd_function(A, ("truncate", 2), backend="julia")
    with pytest.raises(GaugeError):
        ps.svd_function(A, ("truncate", 2), backend="julia", gauge="raise")
    call = fake.calls_to("svd_function_batched")[-1]
    assert call.named["degeneracy_atol"] is None


def test_degeneracy_atol_reaches_julia_matrix_function(fake):
    A = spd(4, 4)
    ps.matrix_function(A, "sqrt", backend="julia", degeneracy_atol=1e-6)
    assert fake.calls_to("matrix_function_batched")[-1].named["degeneracy_atol"] == 1e-6


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(24, 18), (18, 24), (2, 16, 12)])
def test_randomized_svd_through_julia_matches_native(fake, dtype, shape):
    *batch, m, n = shape
    s = torch.tensor([10 * 0.6**i for i in range(min(m, n))], dtype=torch.float64)
    Q1 = torch.linalg.qr(randn(m, m, dtype=dtype, seed=1))[0][:, : min(m, n)]
    Q2 = torch.linalg.qr(randn(n, n, dtype=dtype, seed=2))[0][:, : min(m, n)]
    A = ((Q1 * s.to(dtype)) @ Q2.mH).expand(*batch, m, n).contiguous()
    W = randn(*batch, m, n, dtype=dtype, seed=3)

    def grad(backend):
        X = A.clone().requires_grad_(True)
        U, S, Vh = ps.svd(X, k=3, method="randomized", n_iter=8, backend=backend)
        (((U @ Vh) * W.conj()).real.sum() + (S**2).sum()).backward()
        return U, S, Vh, X.grad

    U, S, Vh, gj = grad("julia")
    U0, S0, Vh0, gt = grad("torch")
    assert U.is_contiguous() and Vh.is_contiguous()
    assert torch.allclose(S, S0) and torch.allclose(U @ Vh, U0 @ Vh0, atol=1e-10)
    assert torch.allclose(gj, gt, atol=1e-9)
    assert fake.calls_to("svd_trunc_pullback_batched!")


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_randomized_eigh_through_julia_matches_native(fake, dtype, uplo):
    Q = torch.linalg.qr(randn(20, 20, dtype=dtype, seed=4))[0]
    w = torch.tensor([10 * 0.7**i for i in range(20)], dtype=torch.float64)
    H = (Q * w.to(dtype)) @ Q.mH
    H = (H + H.mH) / 2
    W = randn(20, 20, dtype=dtype, seed=5)

    def grad(backend):
        X = H.clone().requires_grad_(True)
        ev, V = ps.eigh(X, uplo, k=3, method="randomized", n_iter=10, backend=backend)
        ((V @ V.mH * W.conj()).real.sum() + (ev**2).sum()).backward()
        return ev, X.grad

    wj, gj = grad("julia")
    wt, gt = grad("torch")
    assert torch.allclose(wj, wt, atol=1e-10)
    assert torch.allclose(gj, gt, atol=1e-9)
    assert fake.calls_to("eigh_trunc_pullback_batched!")


# ----------------------------------------------------------------- the probe
# JuliaRuntime.probe against the real juliapkg, configured through its own
# environment variables, with juliacall claimed installed and a shell script
# that answers what juliapkg asks of a Julia executable.

FAKE_JULIA_EXE = """#!/bin/sh
# What juliapkg asks a Julia: its version, and (resolve) libjulia and bindir.
if [ "$1" = "--version" ]; then echo "julia version 1.10.4"; exit 0; fi
printf '%s\\0%s' "${0%/*}/libjulia.so" "${0%/*}"
"""


@pytest.fixture
def juliapkg_env(tmp_path, monkeypatch):
    """``configure(EXE=..., OFFLINE=..., PROJECT=...)``: juliapkg re-reads its
    settings from these variables only (no julia, no juliaup on PATH); the
    runtime probes afresh; juliacall counts as installed. Undone afterwards."""
    juliapkg = pytest.importorskip("juliapkg")
    if "juliacall" in sys.modules:
        pytest.skip("the real juliacall is loaded in this process")
    for key in ("EXE", "OFFLINE", "PROJECT"):
        monkeypatch.delenv(f"PYTHON_JULIAPKG_{key}", raising=False)
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("JULIA_DEPOT_PATH", str(tmp_path / "depot"))
    monkeypatch.setenv("JULIAUP_DEPOT_PATH", str(tmp_path / "depot"))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "juliacall" else find_spec(name, *a),
    )

    def configure(**env: str):
        for key, value in env.items():
            monkeypatch.setenv(f"PYTHON_JULIAPKG_{key}", value)
        juliapkg.state.reset_state()
        return juliapkg

    with installed(_bridge.JuliaRuntime()):
        yield configure
    monkeypatch.undo()
    juliapkg.state.reset_state()


def fake_julia(where) -> str:
    where.mkdir(exist_ok=True)
    exe = where / "julia"
    exe.write_text(FAKE_JULIA_EXE)
    exe.chmod(0o755)
    return str(exe)


def test_probe_offline_with_an_executable_and_a_project(juliapkg_env, tmp_path):
    """The user-provided offline Julia of issue 7: usable, with no resolve
    having run (juliapkg has no state file yet), and `info` says so."""
    project = tmp_path / "env"
    project.mkdir()
    jp = juliapkg_env(
        EXE=fake_julia(tmp_path / "bin"), OFFLINE="yes", PROJECT=str(project)
    )
    assert not jp.deps.can_skip_resolve()  # what the old probe asked
    assert _bridge.runtime.probe() is None
    assert _bridge.status() == (True, "installed (not started yet)")
    from pyspectral.__main__ import info

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        info()
    assert re.search(r"julia\s+usable\s+installed", out.getvalue())


def test_offline_resolve_writes_the_state_the_probe_then_uses(
    juliapkg_env, tmp_path, monkeypatch
):
    """juliapkg's offline resolve (what start() runs first) needs no network:
    it asks the given Julia where libjulia is and writes its state file, after
    which it would skip resolving."""
    project = tmp_path / "env"
    project.mkdir()
    exe = fake_julia(tmp_path / "bin")
    jp = juliapkg_env(EXE=exe, OFFLINE="yes", PROJECT=str(project))
    site = tmp_path / "site"  # no other juliapkg.json on the path than ours
    site.mkdir()
    (site / "juliapkg.json").write_text('{"julia": "~1.10"}')
    monkeypatch.setattr(sys, "path", [str(site)])
    assert jp.resolve() is True
    monkeypatch.undo()
    assert (project / "pyjuliapkg" / "meta.json").is_file()
    assert jp.executable() == exe
    jp = juliapkg_env(EXE=exe, OFFLINE="yes", PROJECT=str(project))  # a new process
    monkeypatch.setattr(sys, "path", [str(site)])
    assert jp.deps.can_skip_resolve()
    assert _probe.juliapkg_reason(jp) is None


@pytest.mark.parametrize(
    "setting, reason",
    [
        ({}, r"not installed yet\. Install it with `python -m pyspectral install"),
        ({"OFFLINE": "yes", "PROJECT": "env"}, r"no Julia .*PYTHON_JULIAPKG_EXE="),
        ({"OFFLINE": "yes", "EXE": "julia"}, r"PYTHON_JULIAPKG_PROJECT is not set"),
        (
            {"OFFLINE": "yes", "EXE": "julia", "PROJECT": "missing"},
            r"PYTHON_JULIAPKG_PROJECT=.*missing does not exist",
        ),
        (
            {"OFFLINE": "yes", "EXE": "not-julia", "PROJECT": "env"},
            r"not-julia is not a Julia executable",
        ),
    ],
    ids=["online", "offline-no-julia", "no-project", "missing-project", "not-julia"],
)
def test_probe_says_why_not(juliapkg_env, tmp_path, setting, reason):
    (tmp_path / "env").mkdir()
    paths = {
        "julia": fake_julia(tmp_path / "bin"),
        "not-julia": str(tmp_path / "not-julia"),
        "env": str(tmp_path / "env"),
        "missing": str(tmp_path / "missing"),
    }
    (tmp_path / "not-julia").write_text("#!/bin/sh\necho hello\n")
    (tmp_path / "not-julia").chmod(0o755)
    juliapkg_env(**{key: paths.get(value, value) for key, value in setting.items()})
    why = _bridge.runtime.probe()
    assert why is not None and re.search(reason, why), why
    ok, status = _bridge.status()
    assert not ok and status == why


def test_probe_offline_finds_julia_on_the_path(juliapkg_env, tmp_path, monkeypatch):
    """Offline without PYTHON_JULIAPKG_EXE, juliapkg uses a Julia it finds
    installed (here on PATH), as its find_julia does."""
    (tmp_path / "env").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    fake_julia(tmp_path / "bin")
    juliapkg_env(OFFLINE="yes", PROJECT=str(tmp_path / "env"))
    assert _bridge.runtime.probe() is None


def test_probe_with_a_matching_state_file(juliapkg_env, monkeypatch):
    """Online, Julia counts as installed when juliapkg can skip resolving
    (its state file matches), and not otherwise."""
    jp = juliapkg_env()
    monkeypatch.setattr(jp.deps, "can_skip_resolve", lambda: {"meta_version": 8})
    assert _bridge.runtime.probe() is None
    monkeypatch.setattr(jp.deps, "can_skip_resolve", lambda: False)
    assert "not installed yet" in _bridge.runtime.probe()


def test_probe_without_juliacall(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "juliacall" else find_spec(name, *a),
    )
    if "juliacall" in sys.modules:
        assert _bridge.JuliaRuntime().probe() is None  # loaded: nothing to find
    else:
        why = _bridge.JuliaRuntime().probe()
        assert why.startswith("juliacall is not installed: pip install")


# ------------------------------------- Julia's warnings, as the native ones


def test_gauge_warning_once_per_call_with_the_batch_tolerance(fake):
    """Julia checks each batch element against its own tolerance and records
    each violation; the bridge warns once per call, as the native backend does,
    with the largest measured value against the tolerance of the whole batch
    of cotangents (here eps**0.75 * max|gU| = eps**0.75)."""
    A = degenerate().expand(3, 5, 4).contiguous().requires_grad_(True)
    U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
    with pytest.warns(GaugeWarning) as record:
        U[..., 1].sum().backward()
    assert len(record) == 1
    text = str(record[0].message)
    measured = float(re.search(r"measured (\S+) >", text)[1])
    assert text == gauge_message("svd", measured, eps(A.dtype) ** 0.75)


def test_gauge_tolerance_is_the_whole_batchs(fake, monkeypatch):
    """An element whose violation is large only against its own (tiny)
    cotangent is recorded by Julia, but, as natively, measured against the
    batch's tolerance: no warning."""
    seen = []
    apply = apply_gauge_records
    monkeypatch.setattr(
        _bridge, "apply_gauge_records", lambda r, *a: (seen.append(r), apply(r, *a))
    )
    A = degenerate().expand(2, 5, 4).contiguous()
    W = weights((5, 4), torch.float64, 3)

    def loss(X, backend):
        U, S, Vh = ps.svd(X, backend=backend, full_matrices=False)
        # (1e-7: above the data floor, which no element's own check goes under)
        return 1e-7 * U[0, :, 1].sum() + 1e6 * ((U @ Vh)[1] * W).sum()

    for backend in ("torch", "julia"):  # neither warns (GaugeWarning is an error)
        grad_of(lambda X, b=backend: loss(X, b), A)
    assert len(seen) == 1 and len(seen[0]) == 1  # element 0's own violation


def no_gap_svd_grad(backend, batch=()):
    """A backward whose CG cannot converge (capped at one step; no gap past the
    certified block) on a matrix "too large" for the dense fallback."""
    s = [1 / (i + 1) ** 0.5 for i in range(30)]
    A = matrix_with_spectrum(s, 40, 30, seed=4)
    X = A.expand(*batch, 40, 30).contiguous().requires_grad_(True)
    kw = dict(k=4, method="randomized", oversample=6, backward_maxiter=1)
    U, S, Vh = ps.svd(X, backend=backend, full_matrices=False, **kw)
    (S.sum() + ((U @ Vh) ** 2).sum()).backward()
    return X.grad


@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
def test_top_k_backward_warns_once(fake, batch, monkeypatch):
    """Julia's svd_trunc_pullback! logs "did not converge" once per batch
    element, with the residual and maxiter as keyword arguments; Python gets
    one ConvergenceWarning, the native backend's text for the same event (up
    to the residual: Julia solves on the other side of the transpose)."""
    from pyspectral import topk

    monkeypatch.setattr(topk, "DENSE_FALLBACK_MAX", 0)  # the stand-in reads it too
    warned = {}
    for backend in ("julia", "torch"):
        with pytest.warns(ps.ConvergenceWarning, match="did not converge") as rec:
            g = no_gap_svd_grad(backend, batch)
        assert len(rec) == 1 and torch.isfinite(g).all()
        warned[backend] = re.sub(r"residual \S+\)", "residual r)", str(rec[0].message))
    assert warned["julia"] == warned["torch"]
    assert fake.calls_to("svd_trunc_pullback_batched!")


@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
def test_randomized_eigh_warns_once(fake, batch):
    """Ritz pairs not certified under method="randomized": Julia logs it per
    batch element with the measurements as keyword arguments; Python warns
    once, a ConvergenceWarning with the native text and the largest residual
    (for one matrix, the native backend's own warning)."""
    w = [-10, -9, -8, 1, 0.9, 0.5, 0.1, 0.05]
    seeds = (2, 5)[: batch[0] if batch else 1]
    mats = [hermitian_with_spectrum(w, seed=s) for s in seeds]
    A = torch.stack(mats).reshape(*batch, 8, 8)
    kw = dict(k=2, method="randomized", oversample=0, n_iter=1)

    def warning(X, backend):
        with pytest.warns(ps.ConvergenceWarning, match="not certified") as rec:
            ps.eigh(X, backend=backend, **kw)
        assert len(rec) == 1
        return str(rec[0].message)

    text = warning(A, "julia")
    assert fake.calls_to("eigh_topk_batched")
    singles = [warning(M, "julia") for M in mats]
    residual = re.compile(r"needed is (\S+) ")
    worst = max(singles, key=lambda t: float(residual.search(t)[1]))
    assert text == worst
    if not batch:
        assert text == warning(A, "torch")


def test_julia_warning_records(fake):
    """Top-k records become the native ConvergenceWarning texts from their
    keyword arguments; a record with no native twin is a RuntimeWarning naming
    the op (Julia's level and message)."""
    from _fake_julia import JULIA_UNCERTIFIED, JULIA_UNCONVERGED

    original = fake.svdvals_batched
    unconverged = JULIA_UNCONVERGED.format(op="svd", maxiter=7, residual="0.25")
    uncertified = JULIA_UNCERTIFIED.format(op="eigh", k=3, why="...", full="eigh")
    uncertified_kw = (
        ("reason", "residual"),
        ("residual", 0.0123),
        ("iterations", 4),
        ("tol", 1.8e-12),
        ("stop", "budget"),
        ("p", 13),
    )

    def svdvals_batched(At):
        fake._log(unconverged, "truncated", (("maxiter", 7), ("residual", 0.25)))
        fake._log(uncertified, "topk", uncertified_kw)
        fake.log_records.append(("Error", "something else", "Main", "x", ()))
        return original(At)

    fake.svdvals_batched = svdvals_batched  # bound when the glue starts
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ps.svdvals(randn(3, 3), backend="julia")
    texts = {(w.category, str(w.message)) for w in record}
    assert texts == {
        (RuntimeWarning, "svdvals (Julia Error): something else"),
        (
            ps.ConvergenceWarning,
            "svd(k=..., method='randomized') backward: the Sylvester solve did not "
            "converge in 7 iterations (relative residual 0.25): there is no gap "
            "between the kept spectrum and the rest beyond the certified block, and "
            "the matrix is too large for the exact dense fallback. The gradient is "
            "approximate; use method='full', a k at a gap, or a larger oversample.",
        ),
        (
            ps.ConvergenceWarning,
            "eigh(k=3, method='randomized'): not certified: after 4 iterations the "
            "largest relative residual |A v - w v| / max|w| of the eigenpairs "
            "needed is 0.012 (tolerance 1.8e-12); at the measured rate it would "
            "exceed the work budget. The result is approximate; use method='auto' "
            "(which falls back to the full eigh), raise n_iter or oversample.",
        ),
    }


def test_stand_in_texts_are_the_julia_packages():
    """The Julia texts the stand-in produces are PySpectral.jl's (the fixed
    parts of its messages and the keyword arguments it logs), and the bridge
    recognises them."""
    from _fake_julia import JULIA_UNCERTIFIED, JULIA_UNCONVERGED

    src = ps.julia.PACKAGE_TESTS.parent / "src"
    text = "\n".join(p.read_text(encoding="utf-8") for p in src.rglob("*.jl"))
    for fragment in (
        '"$(op)_topk(k=$k, method=:randomized): not certified: "',
        '"$(_uncertified_reason(mon)). The result is approximate; use "',
        '"method=:auto (which falls back to the full $full), or raise n_iter "',
        '"or oversample."',
        "@warn message reason residual iterations tol stop p",
        '"$(op)_topk $mode: the Sylvester solve did not converge in $maxiter "',
        '"iterations (relative residual $(_round2(residual))): there is no gap "',
        '"approximate; use method=:full, a k at a gap, or a larger oversample."',
        "@warn message maxiter residual",
        "needs a $need input, but eigenvalue $i (1-based, ",
        '"ascending) is λ[$i] = "',
        "needs nonzero singular values, but S[$i] = ",
    ):
        assert fragment in text, fragment
    kw = (("maxiter", 12), ("residual", 0.5))
    cg = JULIA_UNCONVERGED.format(op="eigh", maxiter=12, residual="0.5")
    assert _events._native_event(("Warn", cg, "PySpectral", "truncated", kw)) == (
        ("unconverged", "eigh", 12),
        0.5,
    )
    kw = (("reason", "cluster"), ("residual", 0.0), ("p", 6))
    ritz = JULIA_UNCERTIFIED.format(op="svd", k=2, why="the ...", full="SVD")
    assert _events._native_event(("Warn", ritz, "PySpectral", "topk", kw)) == (
        ("uncertified", "svd", 2),
        0.0,
    )


def test_testset_names_through_wrappers(tmp_path):
    """The names Python lists without Julia: top-level testsets, also in a
    try/begin/let/macro wrapper, past comments, strings, characters, adjoints,
    indices and the blocks of functions and types."""
    from test_julia_rules import WRAPPED_NAMES, WRAPPED_TESTSETS

    path = tmp_path / "wrapped.jl"
    path.write_text(WRAPPED_TESTSETS, encoding="utf-8")
    assert ps.julia.testset_names(path) == WRAPPED_NAMES


# ------------------------------------------------- Julia's BLAS threads


def test_blas_threads_policy(monkeypatch):
    """One thread below THREADS_FROM entries (THREADS_FROM_SHARED where MKL runs
    on torch's OpenMP threads), torch's count from there on, a fixed count from
    PYSPECTRAL_JULIA_BLAS_THREADS, a clear error for a bad one."""
    monkeypatch.delenv(_blas.THREADS_ENV, raising=False)
    monkeypatch.setattr(_blas, "_started", {"shared_pool": True})
    shared = _blas.THREADS_FROM_SHARED
    assert shared < _blas.THREADS_FROM
    assert _blas.threads_for(shared - 1) == 1
    assert _blas.threads_for(shared) == torch.get_num_threads()
    monkeypatch.setattr(_blas, "_started", {"shared_pool": False})
    big = _blas.THREADS_FROM
    assert _blas.threads_for(shared) == 1
    assert _blas.threads_for(big - 1) == 1
    assert _blas.threads_for(big) == torch.get_num_threads()
    monkeypatch.setenv(_blas.THREADS_ENV, "3")
    assert _blas.threads_for(1) == _blas.threads_for(big) == 3
    monkeypatch.setenv(_blas.THREADS_ENV, " auto ")
    assert _blas.threads_for(1) == 1
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv(_blas.THREADS_ENV, bad)
        with pytest.raises(ps.BackendError, match=_blas.THREADS_ENV):
            _blas.threads_for(1)


def test_each_call_sets_julia_blas_threads_by_its_size(fake, monkeypatch):
    """The bridge sets Julia's BLAS threads before a call whose matrices cross
    it, only when the count changes; the forward, backward and pushforward
    of one size use the same count, and a bookkeeping call none."""
    monkeypatch.delenv(_blas.THREADS_ENV, raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(_blas, "THREADS_FROM", 5 * 4)
    X = randn(5, 4, dtype=torch.float64).requires_grad_(True)
    U, S, Vh = ps.svd(X, backend="julia", full_matrices=False)
    assert fake.threads_log == [4] and fake.blas_threads == 4
    (S.sum() + U.sum() + Vh.sum()).backward()
    assert fake.threads_log == [4]  # unchanged: not set again
    ps.svdvals(randn(3, 2, dtype=torch.float64), backend="julia")
    assert fake.threads_log == [4, 1]
    H = spd(4, 4, dtype=torch.float64)
    ps.eigh(H, backend="julia")
    assert fake.threads_log == [4, 1]
    monkeypatch.setenv(_blas.THREADS_ENV, "2")
    ps.matrix_function(H, "sqrt", backend="julia")
    assert fake.threads_log == [4, 1, 2]


def test_an_empty_matrix_crosses_with_its_batch():
    """``(*, m, n)`` crosses as ``n x m x B`` with B from the batch shape, also
    where a matrix has no entries (B is not numel / (m n) there)."""
    keep: list = []
    for shape, dims in (
        ((3, 0, 4), (4, 0, 3)),
        ((2, 5, 0), (0, 5, 2)),
        ((0, 2, 2), (2, 2, 0)),
    ):
        spec = _convert.to_julia(torch.empty(shape, dtype=torch.float64), keep)
        assert spec[2:] == dims, (shape, spec)
    spec = _convert.to_julia_vectors(torch.empty(1, 0, dtype=torch.float64), keep)
    assert spec[2:] == (0, 1)
