"""The Julia backend against real Julia: agreement with the native backend
(values and gradients, all ops, dtypes, batches, degenerate spectra), and the
bridge's claims, proven with a spy on every glue call that records what Julia
itself received and returned: zero copy both ways (data pointers against
Julia's ``pointer``), a batch as one Julia call, backward from a foreign
thread (with GC paused); ps.julia.function through ChainRules' rrules, a
user's rrule (counted) and Zygote; torch imported before juliacall and the
time to the first Julia call, each in a fresh process.

Skipped as a whole where Julia is not installed (the reason says why); the
bridge logic itself is tested everywhere in test_julia_bridge.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import _spy
import pytest
import torch
from _gauge_cases import GAUGE_CASES, check_gauge_policy
from _julia import needs_julia
from _spectra import fd_grad, hermitian, hermitian_with_spectrum, randn, spd
from _spy import JArray, data_calls

import pyspectral as ps
from pyspectral._settings import options
from pyspectral.exceptions import DomainError, JuliaError
from pyspectral.julia import _blas, _bridge, _convert, _svd

# The Julia backend's rules, spies and zero-copy buffers are checked under the
# gradient w.r.t. the triangle read, which Julia computes and writes in place
# (the default, torch's Hermitian one, is the Hermitian part of the same gradient,
# formed in the same Julia pullback: tests/test_gradient_convention.py runs it on
# real Julia).
pytestmark = [needs_julia, pytest.mark.usefixtures("triangle_gradient")]

DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
SHAPES = [(5, 3), (3, 5), (4, 4)]
BATCHES = [(), (3,), (2, 3)]
GRAD_DTYPES = [torch.float64, torch.complex128]


def tol(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-10


def with_spectrum(m, n, s, dtype=torch.float64, seed=0):
    """An m x n matrix with the given singular values (exact repeats, zeros)."""
    Q1 = torch.linalg.qr(randn(m, m, dtype=dtype, seed=seed))[0]
    Q2 = torch.linalg.qr(randn(n, n, dtype=dtype, seed=seed + 1))[0]
    k = min(m, n)
    S = torch.zeros(m, n, dtype=dtype)
    S[range(k), range(k)] = torch.tensor(s, dtype=torch.float64).to(dtype)
    return Q1 @ S @ Q2.mH


def assert_same_basis(Q, R, atol):
    P = (Q.mH @ R).abs()
    eye = torch.eye(P.shape[-1], dtype=P.dtype).expand_as(P)
    torch.testing.assert_close(P, eye, atol=atol, rtol=0)


def grad_of(loss_fn, A):
    A = A.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss_fn(A), A)
    return g


def both(loss, A, **kw):
    """Gradients of ``loss(A, backend)`` on the Julia and the native backend."""
    return (
        grad_of(lambda X: loss(X, "julia", **kw), A),
        grad_of(lambda X: loss(X, "torch", **kw), A),
    )


def jl():
    _bridge.glue()
    return sys.modules["juliacall"].Main


# --------------------------------------------------------------- forward


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_agrees(dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    U, S, Vh = ps.svd(A, backend="julia", full_matrices=False)
    U0, S0, Vh0 = ps.svd(A, backend="torch", full_matrices=False)
    assert U.dtype == dtype and S.dtype == S0.dtype and U.shape == U0.shape
    assert U.is_contiguous() and S.is_contiguous() and Vh.is_contiguous()
    torch.testing.assert_close(S, S0, atol=tol(dtype), rtol=tol(dtype))
    torch.testing.assert_close(
        (U * S.unsqueeze(-2).to(dtype)) @ Vh, A, atol=tol(dtype) * 10, rtol=0
    )
    assert_same_basis(U, U0, tol(dtype) * 10)
    assert_same_basis(Vh.mH, Vh0.mH, tol(dtype) * 10)
    torch.testing.assert_close(
        ps.svdvals(A, backend="julia"), S0, atol=tol(dtype), rtol=tol(dtype)
    )


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_full_and_top_k_agree(dtype, shape):
    A = randn(2, *shape, dtype=dtype)
    U, S, Vh = ps.svd(A, full_matrices=True, backend="julia")
    k = min(shape)
    rec = (U[..., :k] * S.unsqueeze(-2).to(dtype)) @ Vh[..., :k, :]
    torch.testing.assert_close(rec, A, atol=tol(dtype) * 10, rtol=0)
    for Q in (U, Vh):
        eye = torch.eye(Q.shape[-1], dtype=dtype).expand_as(Q)
        torch.testing.assert_close(Q.mH @ Q, eye, atol=tol(dtype) * 10, rtol=0)
    U, S, Vh = ps.svd(A, k=2, backend="julia")
    U0, S0, Vh0 = ps.svd(A, k=2, backend="torch")
    torch.testing.assert_close(S, S0, atol=tol(dtype), rtol=tol(dtype))
    assert_same_basis(U, U0, tol(dtype) * 10)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_agrees(dtype, uplo, batch):
    H = hermitian(*batch, 4, 4, dtype=dtype)
    junk = 100 * randn(*batch, 4, 4, dtype=dtype, seed=1)
    A = (
        torch.tril(H) + torch.triu(junk, 1)
        if uplo == "L"
        else torch.triu(H) + (torch.tril(junk, -1))
    )
    w, V = ps.eigh(A, uplo, backend="julia")
    w0, V0 = ps.eigh(A, uplo, backend="torch")
    torch.testing.assert_close(w, w0, atol=tol(dtype) * 100, rtol=tol(dtype))
    torch.testing.assert_close(
        (V * w.unsqueeze(-2).to(dtype)) @ V.mH, H, atol=tol(dtype) * 100, rtol=0
    )
    assert_same_basis(V, V0, tol(dtype) * 10)
    torch.testing.assert_close(
        ps.eigvalsh(A, uplo, backend="julia"),
        w0,
        atol=tol(dtype) * 100,
        rtol=tol(dtype),
    )


@pytest.mark.parametrize(
    "f",
    ["polar", ("truncate", 2), ("threshold", 0.5), ("pow", 3), "normalize"],
    ids=str,
)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_function_agrees(dtype, shape, f):
    A = randn(2, *shape, dtype=dtype)
    Y = ps.svd_function(A, f, backend="julia")
    torch.testing.assert_close(
        Y, ps.svd_function(A, f, backend="torch"), atol=tol(dtype) * 10, rtol=0
    )


@pytest.mark.parametrize(
    "f", ["sqrt", "invsqrt", "log", "exp", ("pow", 2), ("pow", -1.5)], ids=str
)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_function_agrees(dtype, uplo, f):
    A = spd(2, 4, 4, dtype=dtype) / 4
    Y = ps.matrix_function(A, f, uplo, backend="julia")
    torch.testing.assert_close(
        Y,
        ps.matrix_function(A, f, uplo, backend="torch"),
        atol=tol(dtype) * 100,
        rtol=tol(dtype),
    )


# ------------------------------------------------------------- gradients


@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_qr_lq_polar_agree(dtype, shape, batch):
    """Julia's QR / LQ (both gauges, both modes) and polar factors are the
    native ones (the positive gauge makes them unique; LAPACK's signs are the
    same LAPACK's)."""
    A = randn(*batch, *shape, dtype=dtype)
    for op in ("qr", "lq"):
        for mode in ("reduced", "complete"):
            for positive in (False, True):
                got = getattr(ps, op)(A, mode, positive=positive, backend="julia")
                ref = getattr(ps, op)(A, mode, positive=positive)
                for x, y in zip(got, ref):
                    assert x.shape == y.shape and x.dtype == y.dtype
                    torch.testing.assert_close(x, y, atol=tol(dtype) * 10, rtol=0)
    for side in ("right", "left"):
        for x, y in zip(ps.polar(A, side, backend="julia"), ps.polar(A, side)):
            torch.testing.assert_close(x, y, atol=tol(dtype) * 10, rtol=0)


@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eig_agrees(dtype, batch):
    """Eigenvalues in LAPACK's order, the same on both backends; eigenvectors
    up to their phases (the projector onto each is the same)."""
    A = randn(*batch, 5, 5, dtype=dtype)
    L, V = ps.eig(A, backend="julia")
    L0, V0 = ps.eig(A)
    assert L.dtype == L0.dtype and V.dtype == V0.dtype
    torch.testing.assert_close(L, L0, atol=tol(dtype) * 10, rtol=0)
    torch.testing.assert_close(
        ps.eigvals(A, backend="julia"), L0, atol=tol(dtype) * 10, rtol=0
    )
    torch.testing.assert_close(V.abs(), V0.abs(), atol=tol(dtype) * 100, rtol=0)


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_factorization_gradients_agree(dtype):
    """Gradients through Julia's rules (qr/lq at full rank and at rank 2, the
    complement of a complete Q, polar at a repeated singular value, eig at a
    triple eigenvalue) are the native ones; both silent."""
    A = randn(2, 5, 3, dtype=dtype)
    B = randn(5, 2, dtype=dtype) @ randn(2, 4, dtype=dtype, seed=3)  # rank 2
    Wq = randn(5, 5, dtype=dtype, seed=4)
    S = randn(5, 5, dtype=dtype, seed=5)
    E = (
        S
        @ torch.diag(torch.tensor([1.0, 2.0, 2.0, 2.0, -0.5], dtype=dtype))
        @ torch.linalg.inv(S)
    )

    def qr_loss(X, backend):
        Q, R = ps.qr(X, "complete", positive=True, backend=backend)
        Q2 = Q[..., 3:]
        return (Q2 @ Q2.mH * Wq).real.sum() + R.abs().pow(2).sum()

    def rank_loss(X, backend):
        L, Q = ps.lq(X.mH, positive=True, backend=backend)
        return L[:, :2].abs().pow(2).sum() + (Q[:2] * Wq[:2, :5]).real.sum()

    def polar_loss(X, backend):
        U, P = ps.polar(X, "left", backend=backend)
        return (U * A[0]).real.sum() + P.abs().pow(3).sum()

    def eig_loss(X, backend):
        L, V = ps.eig(X, backend=backend)
        c = (L.detach() - 2).abs() < 0.3
        P = V[:, c] @ torch.linalg.inv(V)[c, :]
        return (P * Wq).real.sum() + L[c].sum().real ** 2

    repeated = with_spectrum(5, 3, [2.0, 2.0, 1.0], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        for loss, X in (
            (qr_loss, A),
            (rank_loss, B),
            (polar_loss, repeated),
            (eig_loss, E),
        ):
            g, g0 = both(loss, X)
            torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)


def svd_loss(A, backend, full=False, k=None):
    U, S, Vh = ps.svd(A, full_matrices=full, k=k, backend=backend)
    r = min(A.shape[-2:])
    W = randn(*A.shape, dtype=A.dtype, seed=1)
    loss = (S**2 * torch.arange(1, S.shape[-1] + 1)).sum()
    loss = loss + ((U[..., :r] @ Vh[..., :r, :]) * W).real.sum()
    Pu = U[..., :1] @ U[..., :1].mH
    Pv = Vh[..., :1, :].mH @ Vh[..., :1, :]
    loss = loss + (Pu * randn(*Pu.shape, dtype=A.dtype, seed=2)).real.sum()
    loss = loss + (Pv * randn(*Pv.shape, dtype=A.dtype, seed=3)).real.sum()
    return loss


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_gradients_agree(dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    for kw in ({}, {"full": True}, {"k": 2}):
        g, g0 = both(svd_loss, A, **kw)
        torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    "spectrum",
    [
        (3.0, 1.0, 1.0),
        (2.0, 2.0, 2.0),
        (3.0, 1.0, 0.0),
        (1.0, 0.0, 0.0),
        (1.0, 1.0, 0.0),
    ],
    ids=str,
)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (3, 3)], ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_degenerate_gradients_agree(dtype, shape, spectrum):
    """Exactly degenerate and rank-deficient spectra, gauge-invariant losses:
    symmetric functions of S, the projector onto a complete cluster, and the
    exact composites svd_function / matrix_function."""
    A = with_spectrum(*shape, spectrum, dtype=dtype)
    W = randn(*shape, dtype=dtype, seed=4)
    Wp = randn(shape[0], shape[0], dtype=dtype, seed=5)
    top_is_simple = spectrum[0] != spectrum[1]

    def loss(X, backend):
        U, S, Vh = ps.svd(X, backend=backend, full_matrices=False)
        out = (S**3).sum()
        if top_is_simple:  # the projector on a complete cluster
            out = out + ((U[:, :1] @ U[:, :1].mH) * Wp).real.sum()
        Y = ps.svd_function(X, ("pow", 2), backend=backend)
        return out + (Y * W).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)

    H = A.mH @ A
    Wh = randn(shape[1], shape[1], dtype=dtype, seed=6)

    def hloss(X, backend):
        w, V = ps.eigh(X, backend=backend)
        return (w**2).sum() + (
            ps.matrix_function(X, "exp", backend=backend) * Wh
        ).real.sum()

    g, g0 = both(hloss, H)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_eigh_gradients_agree(dtype, uplo, batch):
    A = randn(*batch, 4, 4, dtype=dtype)

    def loss(X, backend):
        w, V = ps.eigh(X, uplo, backend=backend)
        P = V[..., :2] @ V[..., :2].mH
        return (w * torch.arange(1.0, 5.0, dtype=w.dtype)).sum() + (
            P * randn(*P.shape, dtype=dtype, seed=4)
        ).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)
    g, g0 = both(lambda X, b: (ps.eigvalsh(X, uplo, backend=b) ** 3).sum(), A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    "f", ["polar", ("truncate", 2), ("pow", 3), "normalize"], ids=str
)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_function_gradients_agree(dtype, f):
    A = randn(2, 5, 3, dtype=dtype)
    W = randn(2, 5, 3, dtype=dtype, seed=5)
    g, g0 = both(lambda X, b: (ps.svd_function(X, f, backend=b) * W).real.sum(), A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("f", ["sqrt", "log", "exp", ("pow", 2)], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_matrix_function_gradients_agree(dtype, uplo, f):
    A = spd(2, 4, 4, dtype=dtype) / 4
    W = randn(2, 4, 4, dtype=dtype, seed=6)

    def loss(X, b):
        return (ps.matrix_function(X, f, uplo, backend=b) * W).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


# User (f, f_prime) pairs: evaluated in Python on Julia's spectrum, Julia gets
# the values (PySpectral.SpectralValues). Smooth f, so finite differences of a
# loss of Y (gauge invariant: Y is basis free) decide at ties and zeros too.

CUBE = (lambda s: s**3 + s, lambda s: 3 * s**2 + 1)
SIN = (torch.sin, torch.cos)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pairs_agree(dtype, batch):
    A = randn(*batch, 5, 3, dtype=dtype)
    for X in (A, A.mT):
        torch.testing.assert_close(
            ps.svd_function(X, CUBE, backend="julia"),
            ps.svd_function(X, CUBE, backend="torch"),
            atol=tol(dtype) * 10,
            rtol=tol(dtype),
        )
    H = hermitian(*batch, 4, 4, dtype=dtype)
    for uplo in ("L", "U"):
        torch.testing.assert_close(
            ps.matrix_function(H, SIN, uplo, backend="julia"),
            ps.matrix_function(H, SIN, uplo, backend="torch"),
            atol=tol(dtype) * 10,
            rtol=tol(dtype),
        )


@pytest.mark.parametrize(
    "spectrum", [(3.0, 2.0, 1.0), (2.0, 2.0, 1.0), (2.0, 1.0, 0.0), (1.0, 0.0, 0.0)]
)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (3, 3)], ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_function_pair_gradients(dtype, shape, spectrum):
    A = with_spectrum(*shape, spectrum, dtype=dtype)
    W = randn(*shape, dtype=dtype, seed=7)

    def loss(X, backend):
        return (ps.svd_function(X, CUBE, backend=backend) * W).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)
    g_fd = fd_grad(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(g, g_fd, atol=1e-7, rtol=1e-7)


@pytest.mark.parametrize(
    "spectrum", [(-1.0, 0.5, 2.0, 3.0), (1.0, 1.0, 2.0, 2.0), (0.5,) * 4], ids=str
)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_matrix_function_pair_gradients(dtype, uplo, spectrum):
    H = hermitian_with_spectrum(spectrum, dtype=dtype, seed=3)
    W = randn(4, 4, dtype=dtype, seed=8)

    def loss(X, backend):
        # (finite differences of single entries below: one triangle read)
        Y = ps.matrix_function(X, SIN, uplo, backend=backend, check_hermitian=False)
        return (Y * W).real.sum()

    g, g0 = both(loss, H)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)
    # the gradient w.r.t. the entries read (the uplo triangle), as FD sees it
    g_fd = fd_grad(lambda X: loss(X, "julia"), H)
    torch.testing.assert_close(g, g_fd, atol=1e-7, rtol=1e-7)


@pytest.mark.parametrize("op", ["svd_function", "matrix_function"])
def test_user_f_with_a_parameter(op):
    """Issue 15, item 2, on real Julia: a user f that closes over a tensor
    theta; the gradients in A and theta (Julia's pullback for A, the native
    diagonal on Julia's factors for theta) equal the native ones and finite
    differences, at a degenerate spectrum; second derivatives too."""
    if op == "svd_function":
        A = with_spectrum(5, 4, (3.0, 2.0, 2.0, 1.0))
    else:
        A = hermitian_with_spectrum((-1.0, 0.5, 2.0, 2.0), seed=3)
    W = randn(*A.shape, seed=9)
    m = A.numel()
    x0 = torch.cat([A.flatten(), torch.tensor([1.3, 0.7], dtype=torch.float64)])

    def loss(x, backend):
        t = x[m:]
        X = x[:m].reshape(A.shape)
        # (finite differences of single entries: one triangle read)
        kw = {"check_hermitian": False} if op == "matrix_function" else {}
        f = lambda s: t[0] * torch.sinh(t[1] * s)  # noqa: E731
        Y = getattr(ps, op)(X, f, backend=backend, **kw)
        return (Y * W).sum() + 0.3 * (Y * Y).sum()

    g, g0 = both(loss, x0)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)
    g_fd = fd_grad(lambda x: loss(x, "julia"), x0)
    torch.testing.assert_close(g, g_fd, atol=1e-7, rtol=1e-7)
    assert torch.autograd.gradgradcheck(
        lambda x: loss(x, "julia"), (x0.clone().requires_grad_(True),)
    )


def matrix_function_triangle(X, f):
    """On Julia, reading one triangle: gradcheck perturbs single entries."""
    return ps.matrix_function(X, f, backend="julia", check_hermitian=False)


def test_gradcheck_and_double_backward():
    A = randn(4, 3).requires_grad_(True)
    H = spd(3, 3).requires_grad_(True)
    for fn, x in (
        (lambda X: svd_loss(X, "julia"), A),
        (lambda X: ps.svd_function(X, ("pow", 3), backend="julia").sum(), A),
        (lambda X: matrix_function_triangle(X, "log").sum(), H),
        (lambda X: ps.svd_function(X, CUBE, backend="julia").sum(), A),
        (lambda X: matrix_function_triangle(X, SIN).sum(), H),
        (lambda X: ps.eigh(X + X.mT, backend="julia")[0].pow(2).sum(), H),
    ):
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))


# ------------------------------------------------------------ gauge policy
# Julia measures the gauge dependence in each pullback call (its own
# PySpectral.GaugeRecorder) and returns what it recorded; Python applies the
# policy once per call with the native message. Checked at each layer, so that a
# failure says which one: the glue's return value, then the public functions
# under "warn", "raise" and "ignore", for svd, eigh and both top-k paths, each
# beside the native backend on the same input.


def test_glue_pullback_returns_its_gauge_records():
    """The glue's svd pullback, called as the bridge calls it: a basis-dependent
    cotangent inside the cluster (3, 1, 1) comes back as one record per batch
    element, (op, measured, tol), nothing when not asked to measure, nothing
    for an invariant cotangent."""
    A = with_spectrum(5, 3, (3.0, 1.0, 1.0)).expand(2, 5, 3).contiguous()
    (U, S, Vh), handles = _svd.svd(A, False)
    gU = torch.zeros_like(U)
    gU[..., 1] = 1.0  # the second left vector: inside the cluster

    def records(gU, measure):
        gA, keep = torch.zeros_like(A), []
        return _bridge.call(
            "svd",
            "svd_pullback_batched!",
            _convert.to_julia(gA, keep),
            *handles,
            None,
            None,
            _convert.to_julia(gU, keep),
            None,
            None,
            measure,
            None,
        )

    recorded = [(str(o), float(v), float(t)) for o, v, t in records(gU, True)]
    assert len(recorded) == 2 and all(op == "svd" for op, _, _ in recorded)
    assert all(v > t > 0 for _, v, t in recorded), recorded
    assert len(records(gU, False)) == 0
    invariant = U.detach().clone()  # gU = U: the cotangent of sum(U * U), invariant
    assert len(records(invariant, True)) == 0


@pytest.mark.parametrize("backend", ["julia", "torch"])
@pytest.mark.parametrize("case", sorted(GAUGE_CASES))
def test_gauge_policy_through_julia(case, backend):
    """Each basis-dependent loss warns (one GaugeWarning, the native text) under
    "warn", raises GaugeError under "raise", and is silent under "ignore", on
    the Julia backend as on the native one (tests/_gauge_cases.py)."""
    check_gauge_policy(case, backend)


# -------------------------------------------------------------- error text
# docs/guide/julia.md, "One behaviour on both backends": what only Julia can
# see is reported as the native backend reports it. A spectrum outside f's
# domain raises the native DomainError (native text, 0-based index), with
# Julia's own message kept on the error (julia_message); any other Julia
# exception is the pyspectral error of its kind, "<op> (Julia): " + Julia's
# message.


def test_julia_errors_carry_the_julia_message():
    with pytest.raises(DomainError) as info:
        ps.matrix_function(-spd(3, 3), "log", backend="julia")
    with pytest.raises(DomainError) as native:
        ps.matrix_function(-spd(3, 3), "log", backend="torch")
    assert str(info.value) == str(native.value)
    assert str(info.value).startswith("matrix_function: 'log' needs a positive")
    assert "DomainError" in info.value.julia_message  # Julia's words, kept
    assert ":log" in info.value.julia_message
    with pytest.raises(JuliaError, match=r"^no_such_function_anywhere \(Julia\): "):
        ps.julia.function("no_such_function_anywhere")
    with pytest.raises(JuliaError, match="UndefVarError"):
        ps.julia.function("no_such_function_anywhere")


# ------------------------------------------------------------ the spy
# tests/_spy.py: a Julia function on the bridge's one entry (every glue call,
# forward and backward, goes through it) that records, for each call, the arrays
# among its arguments and results as Julia holds them (kind, ``pointer``, size),
# the Python and the Julia thread, and whether GC was enabled. ``take`` fails
# when it recorded nothing.


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _spy.Spy:
    return _spy.install(monkeypatch, jl(), _bridge)


def julia_size(X: torch.Tensor) -> tuple[int, ...]:
    """How Julia sees a C-contiguous ``(*, m, n)`` tensor: ``n x m x B``."""
    m, n = X.shape[-2:]
    return (n, m, X.numel() // (m * n))


# The ops whose memory crosses the bridge: input, forward, gauge-invariant
# loss (a random seed-fixed weighting, so no GaugeWarning).
def _svd_case(batch, dtype):
    X = randn(*batch, 5, 3, dtype=dtype)
    W = randn(*batch, 5, 3, dtype=dtype, seed=1)

    def loss(out):
        U, S, Vh = out
        return (S**2).sum() + ((U @ Vh) * W).real.sum()

    return X, lambda A, b: tuple(ps.svd(A, backend=b, full_matrices=False)), loss


def _eigh_case(batch, dtype):
    X = hermitian(*batch, 4, 4, dtype=dtype)
    W = randn(*batch, 4, 4, dtype=dtype, seed=1)

    def loss(out):
        w, V = out
        P = V[..., :2] @ V[..., :2].mH  # the two lowest: a complete cluster
        return (w**2).sum() + (P * W).real.sum()

    return X, lambda A, b: tuple(ps.eigh(A, backend=b)), loss


def _matrix_function_case(batch, dtype):
    X = hermitian(*batch, 4, 4, dtype=dtype) / 4
    W = randn(*batch, 4, 4, dtype=dtype, seed=1)
    return (
        X,
        lambda A, b: (ps.matrix_function(A, "exp", backend=b),),
        lambda out: (out[0] * W).real.sum(),
    )


def _svd_function_case(batch, dtype):
    X = randn(*batch, 5, 3, dtype=dtype)
    W = randn(*batch, 5, 3, dtype=dtype, seed=1)
    return (
        X,
        lambda A, b: (ps.svd_function(A, ("pow", 2), backend=b),),
        lambda out: (out[0] * W).real.sum(),
    )


def _qr_case(batch, dtype, op="qr"):
    X = randn(*batch, 5, 3, dtype=dtype)
    W = randn(*batch, 5, 3, dtype=dtype, seed=1)

    def loss(out):
        F, G = out  # (Q, R) or (L, Q)
        return (F * W[..., : F.shape[-2], : F.shape[-1]]).real.sum() + G.abs().pow(
            2
        ).sum()

    return X, lambda A, b: tuple(getattr(ps, op)(A, positive=True, backend=b)), loss


def _polar_case(batch, dtype):
    X = randn(*batch, 5, 3, dtype=dtype)
    W = randn(*batch, 5, 3, dtype=dtype, seed=1)

    def loss(out):
        U, P = out
        return (U * W).real.sum() + P.abs().pow(2).sum()

    return X, lambda A, b: tuple(ps.polar(A, backend=b)), loss


def _eig_case(batch, dtype):
    X = randn(*batch, 4, 4, dtype=dtype)
    W = randn(*batch, 4, 4, dtype=torch.complex128, seed=1).to(
        torch.complex64
        if dtype in (torch.float32, torch.complex64)
        else torch.complex128
    )

    def loss(out):
        L, V = out  # the projector onto the first eigenvector: phase free
        P = V[..., :1] @ torch.linalg.inv(V)[..., :1, :]
        return (L.real**2).sum() + (P * W).real.sum()

    return X, lambda A, b: tuple(ps.eig(A, backend=b)), loss


CASES = {
    "svd": _svd_case,
    "eigh": _eigh_case,
    "matrix_function": _matrix_function_case,
    "svd_function": _svd_function_case,
    "qr": _qr_case,
    "lq": lambda batch, dtype: _qr_case(batch, dtype, "lq"),
    "polar": _polar_case,
    "eig": _eig_case,
}


# ------------------------------------------------------------- zero copy


@pytest.mark.parametrize("batch", [(), (2, 3)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "op", ["svd", "eigh", "matrix_function", "qr", "lq", "polar", "eig"]
)
def test_zero_copy_as_julia_sees_it(spy, op, dtype, batch):
    """Both ways, against Julia's own ``pointer``: the array the glue makes of
    what it receives (its ``wrap``: ``unsafe_wrap``, a plain ``Array``) is the
    input tensor's memory; every output tensor wraps an array Julia allocated
    and returned; the backward hands Julia those same arrays back and the
    gradient autograd delivers is the buffer Julia wrote."""
    A, forward, loss = CASES[op](batch, dtype)
    X = A.clone().requires_grad_(True)
    delivered = []
    X.register_hook(delivered.append)  # sees the gradient before accumulation

    outs = forward(X, "julia")
    (fwd,) = spy.take()
    assert JArray("wrapped", X.data_ptr(), julia_size(X)) in fwd.args, fwd
    owned = {r.address for r in fwd.results if r.kind == "Array"}
    for t in outs:
        assert t.data_ptr() in owned, (fwd.name, t.shape, fwd.results)

    loss(outs).backward()
    (bwd,) = data_calls(spy.take())
    handles = {a.address for a in bwd.args if a.kind == "Array"}
    assert handles and handles <= owned, (bwd.name, bwd.args, fwd.results)
    (g,) = delivered
    assert JArray("wrapped", g.data_ptr(), julia_size(X)) in bwd.args, bwd
    # and what Julia wrote there is the gradient
    g0 = grad_of(lambda Y: loss(forward(Y, "torch")), A)
    torch.testing.assert_close(g, g0, atol=tol(dtype) * 100, rtol=tol(dtype) * 100)


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_batch_is_one_julia_call(spy, op):
    """A (2, 3) batch of matrices: the forward is one Julia call and the
    backward one call that passes matrices (besides, at most, bookkeeping
    calls that pass none), each given the whole batch of 6."""
    A, forward, loss = CASES[op]((2, 3), torch.float64)
    X = A.clone().requires_grad_(True)
    outs = forward(X, "julia")
    fwd = spy.take()
    assert len(fwd) == 1, [c.name for c in fwd]
    assert JArray("wrapped", X.data_ptr(), julia_size(X)) in fwd[0].args
    assert all(r.size[-1] == 6 for r in fwd[0].results), fwd[0].results

    loss(outs).backward()
    calls = spy.take()
    bwd = data_calls(calls)
    assert len(bwd) == 1, [(c.name, len(c.args)) for c in calls]
    assert all(a.size[-1] == 6 for a in bwd[0].args), bwd[0]


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_julia_writes_into_the_gradient_buffer(dtype):
    """The buffer pyspectral allocates is the one Julia fills: had Julia
    written into a copy, it would still be zero."""
    A = randn(2, 5, 3, dtype=dtype)
    (U, S, Vh), handles = _svd.svd(A, False)
    gS = torch.rand(2, 3, dtype=S.dtype)
    gA = _svd.svd_pullback((A.shape, A.dtype), handles, None, gS, None, options())
    torch.testing.assert_close(
        gA, (U * gS.unsqueeze(-2).to(dtype)) @ Vh, atol=1e-12, rtol=0
    )


# ---------------------------------------------------- ps.julia.function


def torch_grad(fn, x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """d/dx of <fn(x), W> by torch's own autograd."""
    y = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad((fn(y) * W).sum(), y)
    return g


def test_function_logdet_rrule():
    f = ps.julia.function("logdet")
    x = spd(4, 4).requires_grad_(True)
    y = f(x)
    assert f.last_rule == "rrule"  # ChainRules.jl's rrule(logdet, X)
    assert y.dim() == 0 and y.dtype == torch.float64
    torch.testing.assert_close(y, torch.logdet(x))
    (2.5 * y).backward()
    W = torch.tensor(2.5, dtype=torch.float64)
    torch.testing.assert_close(x.grad, torch_grad(torch.logdet, x, W))
    assert torch.autograd.gradcheck(f, (x,))


def test_function_inv_rrule():
    f = ps.julia.function("inv")
    x = spd(4, 4).requires_grad_(True)
    W = randn(4, 4, seed=2)
    y = f(x)
    assert f.last_rule == "rrule"  # ChainRules.jl's rrule(inv, X)
    torch.testing.assert_close(y, torch.linalg.inv(x))
    (y * W).sum().backward()
    torch.testing.assert_close(x.grad, torch_grad(torch.linalg.inv, x, W))
    assert torch.autograd.gradcheck(f, (x,))


def test_function_several_arguments_and_tuples():
    solve = ps.julia.function("\\")
    A = spd(4, 4).requires_grad_(True)
    b = randn(4, 2, seed=3).requires_grad_(True)
    torch.testing.assert_close(solve(A, b), torch.linalg.solve(A, b))
    assert torch.autograd.gradcheck(solve, (A, b))
    f = ps.julia.function("x -> (sum(abs2, x), 2 .* x)")
    s, y = f(b)
    torch.testing.assert_close(s, (b**2).sum())
    assert f.last_rule == "zygote"
    assert torch.autograd.gradcheck(f, (b,))


def test_function_without_rrule_goes_through_zygote():
    """No rrule exists for a user's anonymous function: Zygote differentiates
    through it (ChainRules' rules for its pieces included)."""
    f = ps.julia.function("x -> sum(abs2, x' * x) + logdet(x' * x + I)")
    x = randn(4, 3).requires_grad_(True)

    def reference(t):
        G = t.T @ t
        return (G**2).sum() + torch.logdet(G + torch.eye(3, dtype=t.dtype))

    y = f(x)
    assert f.last_rule == "zygote"
    torch.testing.assert_close(y, reference(x))
    y.backward()
    W = torch.tensor(1.0, dtype=torch.float64)
    torch.testing.assert_close(x.grad, torch_grad(reference, x, W))
    assert torch.autograd.gradcheck(f, (x,))


# The counters live in a module of their own in Main, so that the test reads
# them without knowing where pyspectral evaluates user code.
COUNTERS_JL = """
module PySpectralRuleCounters
const RRULE = Ref(0)
const PULLBACK = Ref(0)
end
"""

RULES = """
using ChainRulesCore
const COUNT = Main.PySpectralRuleCounters

# A correct rule that counts its forward and pullback calls.
square_norm(x) = sum(abs2, x)
function ChainRulesCore.rrule(::typeof(square_norm), x::AbstractArray)
    COUNT.RRULE[] += 1
    function square_norm_pullback(dy)
        COUNT.PULLBACK[] += 1
        return NoTangent(), 2 .* unthunk(dy) .* x
    end
    return square_norm(x), square_norm_pullback
end

# A deliberately marked rule (value + 100, twice the gradient): only this
# rrule, not the function itself nor Zygote, can produce these numbers.
marked_sum(x) = sum(x)
function ChainRulesCore.rrule(::typeof(marked_sum), x::AbstractArray)
    marked_sum_pullback(dy) = (NoTangent(), fill(2 * unthunk(dy), size(x)))
    return marked_sum(x) + 100, marked_sum_pullback
end
"""


def rule_counts() -> tuple[int, int]:
    counts = jl().seval(
        "(PySpectralRuleCounters.RRULE[], PySpectralRuleCounters.PULLBACK[])"
    )
    return int(counts[0]), int(counts[1])


def test_user_rrule_from_an_included_file(tmp_path):
    main = jl()
    if not bool(main.seval("isdefined(Main, :PySpectralRuleCounters)")):
        main.seval(COUNTERS_JL)
    path = tmp_path / "rules.jl"
    path.write_text(RULES)
    ps.julia.include(path)

    g = ps.julia.function("square_norm")
    x = randn(3, 2).requires_grad_(True)
    before = rule_counts()
    y = g(x)
    assert g.last_rule == "rrule"
    assert rule_counts() == (before[0] + 1, before[1])  # the rrule ran, once
    torch.testing.assert_close(y, (x**2).sum())
    y.backward()
    assert rule_counts() == (before[0] + 1, before[1] + 1)  # its pullback too
    torch.testing.assert_close(x.grad, 2 * x.detach())
    assert torch.autograd.gradcheck(g, (x,))

    f = ps.julia.function("marked_sum")
    x.grad = None
    y = f(x)
    assert f.last_rule == "rrule"
    torch.testing.assert_close(y, x.detach().sum() + 100)
    y.backward()
    torch.testing.assert_close(x.grad, torch.full((3, 2), 2.0, dtype=torch.float64))

    # edit the rule, include again: the next call uses the new one
    path.write_text(RULES.replace("2 * unthunk", "3 * unthunk"))
    ps.julia.include(path)
    x.grad = None
    ps.julia.function("marked_sum")(x).backward()
    torch.testing.assert_close(x.grad, torch.full((3, 2), 3.0, dtype=torch.float64))


# --------------------------------------------------------------- threads


def test_backward_from_a_worker_thread(spy):
    """The pullbacks run in Julia on a thread that did not start Julia (a new
    one), entered through the bridge's foreign-thread path: GC paused during
    the call. The gradient matches the native backend's."""
    _bridge.glue()  # Julia runs (started by this or an earlier thread)
    main = threading.get_ident()
    A = randn(2, 5, 3, dtype=torch.complex128).requires_grad_(True)

    def loss_of(X, backend):
        H = X.mH @ X + torch.eye(3)
        return (
            svd_loss(X, backend)
            + ps.matrix_function(H, "sqrt", backend=backend).real.sum()
        )

    loss = loss_of(A, "julia")
    forward = spy.take()
    assert len(data_calls(forward)) == 2 and all(c.pythread == main for c in forward)

    errors, worker = [], {}

    def work():
        worker["ident"] = threading.get_ident()
        try:
            loss.backward()
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    t = threading.Thread(target=work)
    t.start()
    t.join(300)
    assert not t.is_alive() and not errors, errors
    calls = spy.take()
    pullbacks = data_calls(calls)
    assert len(pullbacks) == 2, [c.name for c in calls]  # svd, matrix_function
    assert worker["ident"] != main
    for c in calls:
        assert c.pythread == worker["ident"], c.name  # Julia entered from the worker
        assert c.jlthread != forward[0].jlthread, c.name  # a different Julia thread
        assert not c.gc_enabled, f"{c.name} ran on a foreign thread with GC on"
    torch.testing.assert_close(
        A.grad, grad_of(lambda X: loss_of(X, "torch"), A), atol=1e-10, rtol=1e-10
    )


def test_concurrent_threads():
    results, errors = {}, []

    def work(seed):
        try:
            A = randn(3, 5, 4, seed=seed).requires_grad_(True)
            results[seed] = grad_of(lambda X: svd_loss(X, "julia"), A)
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and len(results) == 6
    for seed, g in results.items():
        g0 = grad_of(lambda X: svd_loss(X, "torch"), randn(3, 5, 4, seed=seed))
        torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


# ------------------------------------------------------- fresh processes


def fresh_python(code: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter that imports this pyspectral and does
    not start Julia at import (PYSPECTRAL_START_JULIA unset)."""
    env = dict(os.environ)
    env.pop("PYSPECTRAL_START_JULIA", None)
    root = str(Path(ps.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_torch_imported_before_juliacall():
    """torch first, then pyspectral (which must not start Julia), then Julia
    started by the first backend="julia" call: results and gradient right."""
    run = fresh_python(
        """
        import sys, warnings
        import torch
        assert "juliacall" not in sys.modules
        import pyspectral as ps
        assert "juliacall" not in sys.modules, "importing pyspectral started Julia"
        A = torch.randn(2, 5, 3, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
        X = A.clone().requires_grad_(True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            U, S, Vh = ps.svd(X, backend="julia", full_matrices=False)
        assert "juliacall" in sys.modules, "Julia did not start"
        assert torch.allclose(S, torch.linalg.svdvals(A), atol=1e-12, rtol=0)
        assert torch.allclose((U * S.unsqueeze(-2)) @ Vh, A, atol=1e-12, rtol=0)
        (S.sum() + (U @ Vh).sum()).backward()
        Y = A.clone().requires_grad_(True)
        U0, S0, Vh0 = ps.svd(Y, backend="torch", full_matrices=False)
        (S0.sum() + (U0 @ Vh0).sum()).backward()
        assert torch.allclose(X.grad, Y.grad, atol=1e-10, rtol=1e-10)
        print("import-order warnings:", [str(w.message)[:70] for w in caught])
        print("ok")
        """
    )
    assert run.returncode == 0 and run.stdout.rstrip().endswith("ok"), (
        run.stdout + run.stderr
    )


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    "argv",
    [
        [str(EXAMPLES / "julia_rule.py")],
        ["-m", "pyspectral", "test-julia", str(EXAMPLES / "myrules_test.jl")],
    ],
    ids=["examples/julia_rule.py", "pyspectral test-julia"],
)
def test_the_julia_workflows_start_julia_before_torch(argv):
    """The prototyping workflow as a user runs it: the example and the
    test-julia command start Julia before torch, so neither pyspectral's
    import-order warning nor juliacall's own appears, and both succeed."""
    env = dict(os.environ)
    env.pop("PYSPECTRAL_START_JULIA", None)
    env["MPLBACKEND"] = "Agg"  # the example's figure: no window to wait on
    root = str(Path(ps.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    run = subprocess.run(
        [sys.executable, "-W", "always", *argv],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "passed, ok" in run.stdout, run.stdout
    for warning in (_bridge.IMPORT_ORDER_WARNING[:45], "imported before juliacall"):
        assert warning not in run.stderr, run.stderr


TTFX = "pyspectral-ttfx "


def test_time_to_first_julia_call(record_property):
    """Time to the first ps.svd(A, backend="julia") in a fresh process (Julia
    start, package load, and whatever the PrecompileTools workload did not
    compile), reported, not asserted; the result is checked.
    benchmarks/bench_julia_ttfx.py compares it with the workload disabled."""
    run = fresh_python(
        f"""
        import json, time
        import torch
        import pyspectral as ps
        A = torch.randn(2, 6, 4, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
        X = A.clone().requires_grad_(True)
        t0 = time.perf_counter()
        U, S, Vh = ps.svd(X, backend="julia", full_matrices=False)
        t1 = time.perf_counter()
        (S.sum() + (U @ Vh).sum()).backward()
        t2 = time.perf_counter()
        U2, S2, Vh2 = ps.svd(X, backend="julia", full_matrices=False)
        (S2.sum() + (U2 @ Vh2).sum()).backward()
        t3 = time.perf_counter()
        assert torch.allclose(S, torch.linalg.svdvals(A), atol=1e-12, rtol=0)
        assert torch.allclose((U * S.unsqueeze(-2)) @ Vh, A, atol=1e-12, rtol=0)
        Y = A.clone().requires_grad_(True)
        U0, S0, Vh0 = ps.svd(Y, backend="torch", full_matrices=False)
        (S0.sum() + (U0 @ Vh0).sum()).backward()
        assert torch.allclose(X.grad / 2, Y.grad, atol=1e-10, rtol=1e-10)
        print({TTFX!r} + json.dumps({{
            "first_svd_s": t1 - t0,
            "first_backward_s": t2 - t1,
            "second_svd_and_backward_s": t3 - t2,
        }}))
        """
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(TTFX)]
    times = json.loads(line[len(TTFX) :])
    for name, seconds in times.items():
        record_property(name, round(seconds, 3))
    print("time to first Julia call (fresh process):", times)


# ------------------------------------------------------------- top-k (issue 8)
# PySpectral.jl's certified top-k forward and deflated backward against the
# native path: the same algorithm, started from other random numbers, so results
# agree to the certificate's tolerance, not to rounding.


def decaying(m, n, dtype=torch.float64, ratio=0.6):
    s = [10 * ratio**i for i in range(min(m, n))]
    return with_spectrum(m, n, s, dtype, seed=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (2, 24, 20)], ids=str)
def test_randomized_top_k_agrees(dtype, shape):
    *batch, m, n = shape
    A = decaying(m, n, dtype).expand(*batch, m, n).contiguous()
    W = randn(*batch, m, n, dtype=dtype, seed=3)
    out = {}
    for backend, method in (("julia", "randomized"), ("torch", "full")):
        X = A.clone().requires_grad_(True)
        U, S, Vh = ps.svd(X, k=4, method=method, backend=backend)
        (((U @ Vh) * W.conj()).real.sum() + (S**2).sum()).backward()
        out[backend] = (S.detach(), (U @ Vh).detach(), X.grad)
    for a, b in zip(out["julia"], out["torch"]):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_randomized_eigh_top_k_agrees(largest, uplo):
    w = [-10, -9, -8] + [5 * 0.7**i for i in range(27)]
    w = w if largest else [-x for x in w]
    H = hermitian_with_spectrum(w, dtype=torch.complex128, seed=4)
    A = torch.tril(H) if uplo == "L" else torch.triu(H)  # only the triangle is read
    W = randn(30, 30, dtype=torch.complex128, seed=5)
    out = {}
    for backend, method in (("julia", "randomized"), ("torch", "full")):
        X = A.clone().requires_grad_(True)
        kw = dict(k=4, largest=largest, method=method, backend=backend)
        ev, V = ps.eigh(X, uplo, **kw)
        ((V @ V.mH * W.conj()).real.sum() + (ev**2).sum()).backward()
        out[backend] = (ev.detach(), X.grad)
    for a, b in zip(out["julia"], out["torch"]):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)


def test_default_top_k_on_a_gaussian_is_exact():
    """Issue 8's 600 x 600 Gaussian: method="auto" (the default) iterates in
    Julia, cannot certify (no gap) and takes the full path: exact."""
    A = randn(600, 600, seed=0)
    W = randn(600, 600, seed=1)
    grads = []
    for backend, method in (("julia", "auto"), ("torch", "full")):
        X = A.clone().requires_grad_(True)
        U, S, Vh = ps.svd(X, k=8, method=method, backend=backend)
        (S.sum() + ((U @ Vh) * W).sum()).backward()
        grads.append(X.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("scale", [1e-150, 1e150])
def test_julia_top_k_is_scale_invariant(scale):
    s = [5, 4, 3] + [0.8**i for i in range(27)]
    A = with_spectrum(40, 30, s, seed=2)
    W = randn(40, 30, seed=3)
    grads = []
    for B, backend, method in (
        (A * scale, "julia", "randomized"),
        (A, "torch", "full"),
    ):
        X = B.clone().requires_grad_(True)
        U, S, Vh = ps.svd(X, k=3, method=method, backend=backend)
        (((U @ Vh) * W).sum() + S.sum() / B.abs().max()).backward()
        grads.append(X.grad * (scale if backend == "julia" else 1.0))
    assert torch.isfinite(grads[0]).all()
    torch.testing.assert_close(grads[0], grads[1], atol=1e-9, rtol=1e-9)


def test_julia_top_k_warnings_are_the_native_ones(monkeypatch):
    """An uncertified randomized forward and a backward whose CG does not
    converge on a matrix too large for the dense fallback: one native
    ConvergenceWarning each (numbers aside: other random starts)."""
    G = randn(40, 40, seed=7)
    A = G + G.mT

    def texts(backend):
        with pytest.warns(ps.ConvergenceWarning, match="not certified") as rec:
            ps.svd(A, k=3, method="randomized", n_iter=2, backend=backend)
        return [re.sub(r"\d\S*", "#", str(w.message)) for w in rec]

    assert texts("julia") == texts("torch")
    s = [1 / (i + 1) ** 0.5 for i in range(30)]
    B = with_spectrum(40, 30, s, seed=4)
    X = B.clone().requires_grad_(True)
    kw = dict(method="randomized", oversample=6, backward_maxiter=1)
    U, S, Vh = ps.svd(X, k=4, backend="julia", **kw)
    # Julia's own dense-fallback threshold cannot be lowered from here: a CG
    # capped at one step on this small matrix is redone exactly, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (S.sum() + ((U @ Vh) ** 2).sum()).backward()
    assert torch.isfinite(X.grad).all()


def test_julia_blas_threads_follow_the_size_of_the_call(monkeypatch):
    """Julia's BLAS runs one thread for a small call and torch's thread count
    for a large one (pyspectral/julia/_blas.py), as Julia itself reports."""
    monkeypatch.delenv(_blas.THREADS_ENV, raising=False)
    threads = jl().seval("() -> PySpectralGlue.BLAS.get_num_threads()")
    A = randn(6, 4, dtype=torch.float64)
    ps.svd(A, backend="julia", full_matrices=False)
    assert int(threads()) == 1
    monkeypatch.setattr(_blas, "THREADS_FROM", 24)  # (Julia's own BLAS)
    monkeypatch.setattr(_blas, "THREADS_FROM_SHARED", 24)  # (MKL on torch's OpenMP)
    ps.svd(A, backend="julia", full_matrices=False)
    assert int(threads()) == torch.get_num_threads()
    monkeypatch.setenv(_blas.THREADS_ENV, "1")
    ps.eigh(spd(4, 4, dtype=torch.float64), backend="julia")
    assert int(threads()) == 1


# ------------------------------------------------------ Julia's threads over a batch

# More matrices than two of the glue's ranges (CHUNK = 16): the batch runs on Julia's
# threads, where Julia has more than one (pyspectral starts it with one per CPU).
BIG = 3 * 16 + 5


def threaded_workers(nb: int) -> int:
    """How many Julia tasks the glue spreads a batch of ``nb`` small matrices
    over; skips where Julia runs one thread (nothing to spread)."""
    glue = _bridge.glue()  # (starts Julia as pyspectral does, if no test did)
    from juliacall import Main as jl

    if int(jl.seval("Threads.nthreads()")) < 2:
        pytest.skip(
            "Julia runs one thread here (one CPU, or PYTHON_JULIACALL_THREADS=1): "
            "a batch has nothing to be spread over"
        )
    jl.seval("using LinearAlgebra: BLAS; BLAS.set_num_threads(1)")
    _bridge._state["threads"] = 1  # (what the bridge would set for small matrices)
    return int(glue.nworkers(nb))


@pytest.mark.parametrize("op", ["svd", "eigh"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_a_large_batch_on_julias_threads_agrees(op, dtype):
    """A batch spread over Julia's threads: the same values and gradients as
    the native backend, every matrix in its place."""
    assert threaded_workers(BIG) >= 2
    if op == "svd":
        A = randn(BIG, 6, 4, dtype=dtype, seed=3)

        def loss(X, backend):
            U, S, Vh = ps.svd(X, backend=backend, full_matrices=False)
            P = U @ U.mH  # gauge invariant, every matrix weighted differently
            w = torch.arange(1, BIG + 1, dtype=S.dtype).reshape(-1, 1)
            return (S * w).sum() + (P.real * w.unsqueeze(-1)).square().sum()

    else:
        A = hermitian(BIG, 5, 5, dtype=dtype, seed=3)

        def loss(X, backend):
            w, V = ps.eigh(X, backend=backend)
            P = V[..., :2] @ V[..., :2].mH
            c = torch.arange(1, BIG + 1, dtype=w.dtype).reshape(-1, 1)
            return (w * c).sum() + (P.real * c.unsqueeze(-1)).square().sum()

    j, n = both(loss, A)
    torch.testing.assert_close(j, n, atol=1e-10, rtol=0)
    if op == "svd":
        Sj = ps.svdvals(A, backend="julia")
        torch.testing.assert_close(Sj, torch.linalg.svdvals(A), atol=1e-12, rtol=0)
    else:
        wj = ps.eigvalsh(A, backend="julia")
        torch.testing.assert_close(wj, torch.linalg.eigvalsh(A), atol=1e-12, rtol=0)


def test_a_gauge_violation_in_a_later_range_is_recorded():
    """Each of Julia's tasks records into its own gauge recorder and the call
    gets all their records: a basis-dependent loss on one matrix late in a
    threaded batch warns as it does natively."""
    assert threaded_workers(BIG) >= 2
    A = hermitian(BIG, 5, 5, seed=4)
    A[BIG - 3] = hermitian_with_spectrum([1.0, 1.0, 2.0, 3.0, 4.0], seed=5)

    def loss(X, backend):
        w, V = ps.eigh(X, backend=backend)
        return V[BIG - 3, :, 0].sum() ** 2  # the basis inside the double

    for backend in ("julia", "torch"):
        X = A.clone().requires_grad_(True)
        with pytest.warns(ps.GaugeWarning, match="eigh"):
            loss(X, backend).backward()


def test_a_failure_on_a_thread_is_the_first_failing_range():
    """The glue's each_range: every index once, in ranges; a failure rethrows
    the exception of the first failing range (the one a sequential loop would
    throw), after every task has finished."""
    nb = 200
    assert threaded_workers(nb) >= 2
    from juliacall import JuliaError
    from juliacall import Main as jl

    run = jl.seval(
        "(nb, bad) -> PySpectralGlue.each_range("
        '(r, seen) -> for b in r; b in bad && error("matrix $b"); push!(seen, b); end,'
        " () -> Int[], nb)"
    )
    for _ in range(10):  # each worker its own state: a shared one races
        seen = run(nb, ())
        assert len(seen) >= 2
        assert sorted(int(b) for s in seen for b in s) == list(range(1, nb + 1))
    for _ in range(5):
        with pytest.raises(JuliaError, match=r"matrix 70\b"):
            run(nb, (190, 70, 150))
