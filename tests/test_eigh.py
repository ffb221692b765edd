"""eigh, eigvalsh, matrix_function: gradcheck, the triangle convention, forward
against torch.linalg, no mutation."""

from __future__ import annotations

import pytest
import torch
from _spectra import grad, random_like
from torch.autograd import gradcheck, gradgradcheck

import pyspectral as ps

DTYPES = [torch.float64, torch.complex128]


def rand(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=gen)


def spd(shape, dtype, seed=0):
    X = rand(shape, dtype, seed)
    return X @ X.mH / shape[-1] + torch.eye(shape[-1], dtype=dtype)


def invariants(w, V):
    return w, (V.abs() ** 2) * 1.0, (V * w.to(V.dtype).unsqueeze(-2)) @ V.mH


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3)])
def test_eigh_gradcheck_on_general_input(shape, dtype, uplo) -> None:
    # The true gradient w.r.t. the entries read, so a non-Hermitian input works.
    A = rand(shape, dtype).requires_grad_()
    assert gradcheck(lambda X: invariants(*ps.eigh(X, uplo)), (A,))
    assert gradcheck(lambda X: ps.eigvalsh(X, uplo), (A,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_gradgradcheck(dtype) -> None:
    A = rand((4, 4), dtype).requires_grad_()
    assert gradgradcheck(lambda X: invariants(*ps.eigh(X)), (A,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_triangle_convention(dtype) -> None:
    A = rand((5, 5), dtype, seed=3)
    W = random_like(A, seed=4)

    def loss(eigh):
        def f(X):
            w, V = eigh((X + X.mH) / 2)
            return ((V * torch.tanh(w).to(V.dtype)) @ V.mH * W.conj()).real.sum()

        return f

    # through a Hermitian parametrisation both conventions agree
    assert torch.allclose(grad(loss(ps.eigh), A), grad(loss(torch.linalg.eigh), A))
    # directly: only the lower triangle is read, so the upper one gets zero
    H = ((A + A.mH) / 2).requires_grad_()
    w, V = ps.eigh(H)
    (w * torch.arange(5.0, dtype=w.dtype)).sum().backward()
    assert torch.count_nonzero(torch.triu(H.grad, 1)) == 0
    G = (V * torch.arange(5.0).to(V.dtype)) @ V.mH  # torch's Hermitian gradient
    assert torch.allclose(torch.tril(H.grad, -1), 2 * torch.tril(G, -1))
    assert torch.allclose(H.grad.diagonal(), G.diagonal().real.to(H.dtype))


MATFUNS = [
    "sqrt",
    "invsqrt",
    "log",
    "exp",
    ("pow", 1.5),
    ("pow", -1),
    ("pow", 3),
    (torch.sin, torch.cos),
]
REFERENCE = {
    "sqrt": torch.sqrt,
    "invsqrt": torch.rsqrt,
    "log": torch.log,
    "exp": torch.exp,
    "('pow', 1.5)": lambda w: w**1.5,
    "('pow', -1)": lambda w: 1 / w,
    "('pow', 3)": lambda w: w**3,
}


@pytest.mark.parametrize("f", MATFUNS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_function(dtype, f) -> None:
    A = spd((2, 4, 4), dtype).requires_grad_()
    assert gradcheck(lambda X: ps.matrix_function(X, f), (A,))
    w, V = torch.linalg.eigh(A.detach())
    expected = (
        V * REFERENCE.get(str(f), torch.sin)(w).to(V.dtype).unsqueeze(-2)
    ) @ V.mH
    assert torch.allclose(ps.matrix_function(A, f), expected, atol=1e-12)


def test_matrix_function_double_backward() -> None:
    A = spd((3, 3), torch.float64).requires_grad_()
    assert gradgradcheck(lambda X: ps.matrix_function(X, "log"), (A,))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128]
)
def test_forward_matches_torch(dtype) -> None:
    A = rand((3, 5, 5), dtype, seed=5)
    for uplo in ("L", "U"):
        w, V = ps.eigh(A, uplo)
        w0, V0 = torch.linalg.eigh(A, UPLO=uplo)
        tol = 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-10
        assert torch.allclose(w, w0, atol=tol) and w.dtype == w0.dtype
        assert torch.allclose(
            (V.mH @ V0).abs(), torch.eye(5, dtype=w.dtype), atol=100 * tol
        )
        assert torch.allclose(ps.eigvalsh(A, uplo), w0, atol=tol)


def test_float32_gradients() -> None:
    A = spd((5, 5), torch.float32, seed=2)
    g32 = grad(lambda X: ps.matrix_function(X, "log").sum(), A)
    g64 = grad(lambda X: ps.matrix_function(X, "log").sum(), A.double())
    assert torch.isfinite(g32).all()
    assert torch.allclose(g32.double(), g64, rtol=1e-3, atol=1e-4)


def test_backward_does_not_mutate_incoming_gradient() -> None:
    A = rand((4, 4), torch.complex128).requires_grad_()
    w, V = ps.eigh(A, gauge="ignore")
    gw, gV = random_like(w, seed=1), random_like(V, seed=2)
    cw, cV = gw.clone(), gV.clone()
    torch.autograd.grad((w, V), A, (gw, gV))
    assert torch.equal(gw, cw) and torch.equal(gV, cV)
