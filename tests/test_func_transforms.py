"""Jacobians and VJPs the way PyTorch users take them: autograd.grad with
grad_outputs, autograd.functional.jacobian, and torch.func (grad, vjp, jacrev,
vmap), on gauge-invariant functions, against finite differences."""

from __future__ import annotations

import pytest
import torch
from _spectra import random_like, with_singular_values

import pyspectral as ps


def polar(X):
    U, _, Vh = ps.svd(X)
    return U @ Vh


def eig_fn(X):
    w, V = ps.eigh(X)
    return (V * torch.tanh(w).unsqueeze(-2)) @ V.mT


def fd_jacobian(f, A, h=1e-6):
    cols = []
    for i in range(A.numel()):
        E = torch.zeros(A.numel(), dtype=A.dtype)
        E[i] = h
        E = E.view_as(A)
        cols.append(((f(A + E) - f(A - E)) / (2 * h)).flatten())
    return torch.stack(cols, dim=-1).view(*f(A).shape, *A.shape)


A = with_singular_values((3, 2, 2, 1), 5, 4, seed=1)  # repeated value: still exact
H = (lambda X: X + X.mT)(
    torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
)


@pytest.mark.parametrize("f, X", [(polar, A), (eig_fn, H)], ids=["svd", "eigh"])
def test_jacobians_match_finite_differences(f, X) -> None:
    J_fd = fd_jacobian(f, X)
    assert torch.allclose(torch.autograd.functional.jacobian(f, X), J_fd, atol=1e-7)
    assert torch.allclose(torch.func.jacrev(f)(X), J_fd, atol=1e-7)


def test_grad_outputs_vjp_and_func_grad() -> None:
    W = random_like(A, seed=3)
    X = A.clone().requires_grad_()
    (g1,) = torch.autograd.grad(polar(X), X, grad_outputs=W)
    _, vjp = torch.func.vjp(polar, A)
    (g2,) = vjp(W)
    g3 = torch.func.grad(lambda Y: (polar(Y) * W).sum())(A)
    J = fd_jacobian(polar, A)
    expected = (J * W.unsqueeze(-1).unsqueeze(-1)).sum((0, 1))
    for g in (g1, g2, g3):
        assert torch.allclose(g, expected, atol=1e-7)


def test_vmap_equals_batched_call() -> None:
    B = torch.randn(
        3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4)
    )
    Hb = B[..., :4, :] + B[..., :4, :].mT
    P = Hb @ Hb.mT + torch.eye(4, dtype=B.dtype)
    cases = [
        (lambda X: ps.svd(X).S, B),
        (polar, B),
        (lambda X: ps.svd_function(X, ("truncate", 2)), B),
        (lambda X: ps.eigh(X).eigenvalues, Hb),
        (lambda X: ps.matrix_function(X, "sqrt"), P),
    ]
    for f, X in cases:
        assert torch.allclose(torch.func.vmap(f)(X), f(X), atol=1e-12)
    # and vmap of a gradient equals the per-matrix gradients
    W = random_like(B, seed=5)
    g = torch.func.vmap(torch.func.grad(lambda X, Wi: (polar(X) * Wi).sum()))(B, W)
    for i in range(3):
        gi = torch.func.grad(lambda X, Wi=W[i]: (polar(X) * Wi).sum())(B[i])
        assert torch.allclose(g[i], gi, atol=1e-12)


def test_jacrev_of_matrix_function() -> None:
    P = H @ H.mT + torch.eye(4, dtype=H.dtype)
    f = lambda X: ps.matrix_function(X, "log")  # noqa: E731
    # matrix_function reads the lower triangle: FD perturbs entries one by one too
    assert torch.allclose(torch.func.jacrev(f)(P), fd_jacobian(f, P), atol=1e-6)
