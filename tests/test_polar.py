"""``ps.polar`` (pyspectral/polar.py): the factors, both sides, any shape,
exact first and second derivatives and forward mode at repeated singular
values (where the polar factor through torch.linalg.svd is wrong or NaN),
the rank-deficient rule, both backends."""

from __future__ import annotations

import warnings

import pytest
import torch
from _spectra import fd_grad, grad, inner, matrix_with_spectrum, randn, rel_err

import pyspectral as ps

F64, C128 = torch.float64, torch.complex128
SHAPES = [(5, 3), (4, 4), (3, 5)]


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.complex64, C128], ids=str)
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("m, n", SHAPES, ids=str)
def test_factors(m, n, side, dtype):
    A = randn(2, m, n, dtype=dtype, seed=m * n)
    W, P = ps.polar(A, side)
    tol = 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-12
    assert W.shape == A.shape and P.shape[-1] == (n if side == "right" else m)
    assert torch.dist(W @ P if side == "right" else P @ W, A) < tol * A.norm()
    assert torch.equal(P, P.mH)
    assert bool((torch.linalg.eigvalsh(P) > -tol).all())
    k = min(m, n)
    G = W.mH @ W if m >= n else W @ W.mH
    assert torch.dist(G, torch.eye(k, dtype=dtype).expand_as(G)) < tol * 10


def repeated(m, n, dtype):
    s = [2.0, 2.0, 2.0, 1.0, 0.5][: min(m, n)]
    return matrix_with_spectrum(s, m, n, dtype=dtype, seed=m + n)


def both_factors(side, W0, P0, backend="auto"):
    def loss(X):
        W, P = ps.polar(X, side, backend=backend)
        return inner(W, W0) + inner(P, P0) + (P.abs() ** 2).sum()

    return loss


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("m, n", SHAPES, ids=str)
def test_exact_at_repeated_singular_values(m, n, side, dtype):
    """A triple singular value: both factors exact, first order and forward
    mode; through torch.linalg.svd the same factors are off or NaN."""
    A = repeated(m, n, dtype)
    k = n if side == "right" else m
    W0, P0 = randn(m, n, dtype=dtype, seed=1), randn(k, k, dtype=dtype, seed=2)
    loss = both_factors(side, W0, P0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        g = grad(loss, A)
    exact = fd_grad(loss, A)
    assert rel_err(g, exact) < 1e-8
    D = randn(m, n, dtype=dtype, seed=3)
    _, t = torch.func.jvp(loss, (A,), (D,))
    assert abs(float(t) - float(inner(g, D))) < 1e-9 * float(g.norm() * D.norm())

    def through_svd(X):
        U, S, Vh = torch.linalg.svd(X, full_matrices=False)
        W, V = U @ Vh, Vh.mH
        P = (
            V @ torch.diag_embed(S).to(X.dtype) @ V.mH
            if side == "right"
            else (U @ torch.diag_embed(S).to(X.dtype) @ U.mH)
        )
        return inner(W, W0) + inner(P, P0) + (P.abs() ** 2).sum()

    theirs = grad(through_svd, A)
    assert not (torch.isfinite(theirs).all() and rel_err(theirs, exact) < 1e-3)


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_second_order_at_repeated_singular_values(dtype):
    A = repeated(4, 3, dtype)
    W0, P0 = randn(4, 3, dtype=dtype, seed=4), randn(3, 3, dtype=dtype, seed=5)
    D = randn(4, 3, dtype=dtype, seed=6)
    loss = both_factors("right", W0, P0)

    def directional(t):
        return inner(grad(loss, A + t * D), D)

    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        X = A.clone().requires_grad_()
        (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
        (hvp,) = torch.autograd.grad(inner(g, D), X)
    h = 1e-5
    fd = (directional(h) - directional(-h)) / (2 * h)
    assert abs(float(inner(hvp, D)) - float(fd)) < 1e-6 * abs(float(fd))


def test_gradcheck_and_gradgradcheck():
    for side, shape in (("right", (4, 3)), ("left", (3, 4))):
        A = randn(*shape, dtype=C128, seed=7).requires_grad_()

        def f(X, side=side):
            return ps.polar(X, side)

        assert torch.autograd.gradcheck(f, (A,), check_forward_ad=True)
        assert torch.autograd.gradgradcheck(f, (A,))


def test_rank_deficient_raises():
    A = matrix_with_spectrum([2.0, 1.0, 0.0], 4, 3, seed=8)
    with pytest.raises(ps.DomainError, match="polar: A has a .*zero singular value"):
        ps.polar(A)


def test_bad_input():
    with pytest.raises(ps.InputError, match="side must be one of"):
        ps.polar(torch.eye(2), "up")
    with pytest.raises(ps.DtypeError):
        ps.polar(torch.eye(2, dtype=torch.int64))


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("side", ["right", "left"])
def test_both_backends_agree(backend, side, dtype):
    A = torch.stack([repeated(5, 3, dtype), randn(5, 3, dtype=dtype, seed=9)])
    k = 3 if side == "right" else 5
    W0, P0 = randn(5, 3, dtype=dtype, seed=10), randn(k, k, dtype=dtype, seed=11)
    got = ps.polar(A, side, backend=backend)
    ref = ps.polar(A, side)
    assert all(torch.allclose(a, b) for a, b in zip(got, ref))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        g = grad(both_factors(side, W0, P0, backend), A)
        g0 = grad(both_factors(side, W0, P0), A)
    assert rel_err(g, g0) < 1e-12


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_rank_deficient_error_names_a_route_that_is_exact(dtype, side):
    """polar's DomainError gives polar's advice (not svd_function's f(0) = 0),
    and the route it names, the partial isometry of the kept singular values
    svd_function(A, 'polar', rtol=r) with P = W_r^H A (A W_r^H), is exact:
    P is (A^H A)^(1/2) ((A A^H)^(1/2)) and the gradient of a loss of (W_r, P)
    matches finite differences (the steps leave the zero below the cut)."""
    m, n = (4, 3) if side == "right" else (3, 4)
    A = matrix_with_spectrum([2.0, 1.0, 0.0], m, n, dtype=dtype, seed=8)
    with pytest.raises(ps.DomainError) as caught:
        ps.polar(A, side)
    text = str(caught.value)
    assert "f(0) = 0" not in text and "svd_function(A, 'polar', rtol=r)" in text

    def route(X):
        W = ps.svd_function(X, "polar", rtol=1e-3)
        P = W.mH @ X if side == "right" else X @ W.mH
        return W, P

    W, P = route(A)
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    V = Vh.mH if side == "right" else U  # (A^H A)^(1/2) = V S V^H, A A^H: U S U^H
    assert rel_err(P, (V * S.to(V.dtype)) @ V.mH) < 1e-12
    B, C = randn(*W.shape, dtype=dtype, seed=1), randn(*P.shape, dtype=dtype, seed=2)

    def loss(X):
        W, P = route(X)
        return inner(W, B) + inner(P, C)

    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    assert rel_err(g, fd_grad(loss, A)) < 1e-7
