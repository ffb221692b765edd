"""Jacobians and VJPs the way PyTorch users take them: autograd.grad with
grad_outputs, autograd.functional.jacobian/hessian, and torch.func (grad, vjp,
jacrev, vmap), on gauge-invariant functions, against finite differences."""

from __future__ import annotations

import pytest
import torch
from _spectra import (
    fd_jacobian,
    grad,
    hermitian,
    hermitian_with_spectrum,
    inner,
    matrix_with_spectrum,
    randn,
    random_like,
    rel_err,
    spd,
)

import pyspectral as ps

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")


def polar(X):
    U, _, Vh = ps.svd(X, full_matrices=False)
    return U @ Vh


def polar_and_values(X):
    U, S, Vh = ps.svd(X, full_matrices=False)
    return U @ Vh + S.sum(-1)[..., None, None]


def topk_projector(X):
    U, _, _ = ps.svd(X, k=2)
    return U @ U.mH


def eig_fn(X):
    w, V = ps.eigh(X)
    return (V * torch.tanh(w).unsqueeze(-2)) @ V.mT


def eig_projector(X):
    V = ps.eigh(X + X.mT).eigenvectors[..., 2:]
    return V @ V.mT


def truncate(X):
    return ps.svd_function(X, ("truncate", 3))


def log(X):
    # (jacobians by single-entry differences: one triangle read)
    return ps.matrix_function(X, "log", check_hermitian=False)


A = matrix_with_spectrum((3, 2, 2, 1), 5, 4, seed=1)  # repeated value: still exact
H = hermitian(4, 4, seed=2)
P = spd(4, 4, seed=3)
CASES = {
    "svd polar": (polar, A),
    "svd polar + S": (polar_and_values, A),
    "svd top-k": (topk_projector, randn(5, 4, seed=4)),
    "eigh": (eig_fn, H),
    # X + X^T has eigenvalues (-1, 0.5, 2, 2): a projector onto the cluster
    "eigh projector": (eig_projector, hermitian_with_spectrum((-1, 0.5, 2, 2)) / 2),
    "svd_function": (truncate, A),
    "matrix_function": (log, P),
}


@pytest.mark.parametrize("name", CASES)
def test_jacobians_match_finite_differences(name) -> None:
    f, X = CASES[name]
    J_fd = fd_jacobian(f, X)
    J_ad = torch.autograd.functional.jacobian(f, X)
    J_rev = torch.func.jacrev(f)(X)
    assert J_ad.shape == J_fd.shape == f(X).shape + X.shape
    assert rel_err(J_ad, J_fd) < 1e-7
    assert rel_err(J_rev, J_ad) < 1e-12


@pytest.mark.parametrize("name", ["svd polar + S", "eigh", "matrix_function"])
def test_grad_outputs_vjp_and_func_grad(name) -> None:
    f, X0 = CASES[name]
    W = random_like(X0, seed=3)
    X = X0.clone().requires_grad_()
    (g1,) = torch.autograd.grad(f(X), X, grad_outputs=W)
    _, vjp = torch.func.vjp(f, X0)
    (g2,) = vjp(W)
    g3 = torch.func.grad(lambda Y: (f(Y) * W).sum())(X0)
    expected = torch.einsum("ij,ijkl->kl", W, fd_jacobian(f, X0))
    for g in (g1, g2, g3):
        assert rel_err(g, expected) < 1e-7


@pytest.mark.parametrize("op", ["svd", "svd_function", "eigh", "matrix_function"])
def test_func_grad_equals_autograd_for_complex_input(op) -> None:
    X = randn(4, 4, dtype=torch.complex128, seed=5)
    W = random_like(X, seed=6)
    X = X @ X.mH + torch.eye(4, dtype=X.dtype) if op == "matrix_function" else X

    def loss(Y):
        if op == "svd":
            U, S, Vh = ps.svd(Y, full_matrices=False)
            return inner(U @ Vh, W) + S.sum()
        if op == "svd_function":
            return inner(ps.svd_function(Y, ("pow", 2)), W)
        if op == "eigh":
            w, V = ps.eigh(Y + Y.mH)
            return inner(V[:, 2:] @ V[:, 2:].mH, W) + (w**2).sum()
        return inner(ps.matrix_function(Y, "sqrt"), W)

    assert rel_err(torch.func.grad(loss)(X), grad(loss, X)) < 1e-12


def test_hessian_by_double_backward() -> None:
    """autograd.functional.hessian differentiates the backward: it equals the
    finite-difference Jacobian of the gradient."""
    X = randn(3, 2, seed=7)
    W = random_like(X, seed=8)

    def loss(Y):
        U, S, Vh = ps.svd(Y, full_matrices=False)
        return (
            inner(U @ Vh, W) + (S**3).sum() + inner(ps.svd_function(Y, ("pow", 2)), W)
        )

    Hess = torch.autograd.functional.hessian(loss, X)
    Hess_fd = fd_jacobian(lambda Y: grad(loss, Y), X)
    assert rel_err(Hess, Hess_fd) < 1e-7


def test_vmap_equals_batched_call() -> None:
    B = randn(3, 5, 4, seed=4)
    Hb = B[..., :4, :] + B[..., :4, :].mT
    Pb = Hb @ Hb.mT + torch.eye(4, dtype=B.dtype)
    cases = [
        (lambda X: tuple(ps.svd(X, full_matrices=False)), B),
        (lambda X: tuple(ps.svd(X, k=2)), B),
        (lambda X: tuple(ps.svd(X, full_matrices=True)), B),
        (ps.svdvals, B),
        (polar, B),
        (lambda X: ps.svd_function(X, ("truncate", 2)), B),
        (lambda X: ps.svd_function(X, "normalize"), B),
        (lambda X: tuple(ps.eigh(X)), Hb),
        (lambda X: ps.eigvalsh(X, "U"), Hb),
        (lambda X: ps.matrix_function(X, "sqrt"), Pb),
        (lambda X: ps.matrix_function(X, (torch.sin, torch.cos)), Hb),
    ]
    for f, X in cases:
        mapped, batched = torch.func.vmap(f)(X), f(X)
        for m, b in zip(_as_tuple(mapped), _as_tuple(batched)):
            assert m.shape == b.shape and torch.allclose(m, b, atol=1e-12)
    # a batch dimension that is not the first one
    moved = torch.func.vmap(polar, in_dims=2, out_dims=0)(B.permute(1, 2, 0))
    assert torch.allclose(moved, polar(B), atol=1e-12)


def _as_tuple(outputs):
    return outputs if isinstance(outputs, tuple) else (outputs,)


@pytest.mark.parametrize(
    "name", ["svd polar + S", "svd top-k", "eigh", "svd_function", "matrix_function"]
)
def test_vmap_of_grad_equals_per_matrix_gradients(name) -> None:
    f, X = CASES[name]
    Xb = torch.stack([X, X + 0.01 * random_like(X, seed=9)])
    if name == "matrix_function":
        Xb = (Xb + Xb.mT) / 2
    Wb = random_like(f(Xb), seed=5)

    def loss(Y, Wi):
        return (f(Y) * Wi).sum()

    g = torch.func.vmap(torch.func.grad(loss))(Xb, Wb)
    for i in range(2):
        assert rel_err(g[i], grad(lambda Y, i=i: loss(Y, Wb[i]), Xb[i])) < 1e-12
