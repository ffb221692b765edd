"""Top-k SVD by the randomized method: its gradient (truncated Sylvester
pullback) equals the full path's, and a missing gap at k warns."""

from __future__ import annotations

import pytest
import torch
from _spectra import matrix_with_spectrum, random_like, rel_err

import pyspectral as ps


def decaying(m, n, dtype, seed=1, ratio=0.7):
    return matrix_with_spectrum(
        [10 * ratio**i for i in range(min(m, n))], m, n, dtype, seed
    )


def loss(U, S, Vh, W):
    P = U @ U.mH
    return ((U @ Vh) * W.conj()).real.sum() + (S**2).sum() + (P[:3].abs() ** 2).sum()


def grads(A, k, method, **kw):
    X = A.clone().requires_grad_()
    U, S, Vh = ps.svd(X, k=k, method=method, **kw)
    loss(
        U,
        S,
        Vh,
        random_like(
            A.to(torch.complex128 if A.is_complex() else torch.float64), seed=2
        ).to(A.dtype),
    ).backward()
    return (U, S, Vh), X.grad


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (2, 24, 20)])
def test_randomized_gradient_equals_full(shape, dtype) -> None:
    *batch, m, n = shape
    A = decaying(m, n, dtype).expand(*batch, m, n).clone()
    k = 5
    (U, S, Vh), g_rand = grads(A, k, "randomized", n_iter=8)
    (U0, S0, Vh0), g_full = grads(A, k, "full")
    assert torch.allclose(S, S0, rtol=1e-10)
    assert torch.allclose(U @ Vh, U0 @ Vh0, atol=1e-10)
    assert rel_err(g_rand, g_full) < 1e-8


def test_no_gap_at_k_warns_and_stays_finite() -> None:
    s = [5, 4, 3, 3, 3, 1, 0.5, 0.1]
    A = matrix_with_spectrum(s, 10, 8, seed=3)
    X = A.clone().requires_grad_()
    U, S, Vh = ps.svd(X, k=3, method="randomized", n_iter=6, backward_maxiter=30)
    with pytest.warns(ps.GaugeWarning, match="did not converge"):
        (S.sum() + (U @ U.mT).trace() + ((U @ Vh) ** 2).sum()).backward()
    assert torch.isfinite(X.grad).all()


def test_auto_method_and_errors() -> None:
    A = decaying(20, 16, torch.float64)
    U, S, Vh = ps.svd(A, k=3)  # small: auto takes the full path (exact)
    assert torch.allclose(S, torch.linalg.svdvals(A)[:3])
    with pytest.raises(ps.InputError, match="method must be"):
        ps.svd(A, k=3, method="lanczos")
    with pytest.raises(ps.InputError, match="k must be"):
        ps.svd(A, k=17, method="randomized")


def hermitian_decaying(n, dtype, seed=4):
    from _spectra import hermitian_with_spectrum

    w = [10 * 0.7**i for i in range(n)]  # positive definite, decaying
    return hermitian_with_spectrum(w, dtype=dtype, seed=seed)


def eigh_grad(A, k, largest, method, uplo="L"):
    X = A.clone().requires_grad_()
    w, V = ps.eigh(X, uplo, k=k, largest=largest, method=method, n_iter=10)
    Wt = random_like(A, seed=5)
    ((V @ V.mH * Wt.conj()).real.sum() + (w**2).sum()).backward()
    return w, X.grad


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_randomized_eigh_gradient_equals_full(dtype, uplo) -> None:
    A = hermitian_decaying(30, dtype)
    w, g_rand = eigh_grad(A, 4, True, "randomized", uplo)
    w0, g_full = eigh_grad(A, 4, True, "full", uplo)
    assert torch.allclose(w, w0, atol=1e-10)
    assert torch.allclose(w0, torch.linalg.eigvalsh(A)[-4:])
    assert rel_err(g_rand, g_full) < 1e-8


def test_smallest_eigenpairs_full_path() -> None:
    A = hermitian_decaying(12, torch.float64)
    w, _ = eigh_grad(A, 3, False, "full")
    assert torch.allclose(w, torch.linalg.eigvalsh(A)[:3])
    with pytest.raises(ps.InputError, match="largest"):
        ps.eigh(A, k=3, largest=False, method="randomized")


def test_randomized_eigh_warns_when_not_converged() -> None:
    from _spectra import hermitian_with_spectrum

    # the largest algebraic eigenvalues are not the largest in magnitude
    A = hermitian_with_spectrum([-10, -9, -8, 1, 0.9, 0.5, 0.1, 0.05], seed=2)
    with pytest.warns(ps.GaugeWarning, match="not converged"):
        ps.eigh(A, k=2, method="randomized", oversample=0, n_iter=1)


def test_randomized_eigh_needs_hermitian_input() -> None:
    A = torch.randn(12, 12, dtype=torch.float64)
    with pytest.raises(ps.InputError, match="not Hermitian"):
        ps.eigh(A, k=2, method="randomized")


def test_float32_randomized() -> None:
    A = decaying(30, 20, torch.float32)
    (_, S, _), g = grads(A, 3, "randomized", n_iter=8)
    (_, S0, _), g0 = grads(A.double(), 3, "full")
    assert torch.isfinite(g).all()
    assert torch.allclose(S.double(), S0, rtol=1e-4)
    assert rel_err(g.double(), g0) < 1e-3
