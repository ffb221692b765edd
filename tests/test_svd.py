"""svd, svdvals, svd_function: gradcheck at distinct spectra, forward against
torch.linalg, full matrices, top-k, float32, no mutation of incoming grads."""

from __future__ import annotations

import pytest
import torch
from _spectra import fd_grad, grad, random_like, rel_err, with_singular_values
from torch.autograd import gradcheck, gradgradcheck

import pyspectral as ps

SHAPES = [(5, 3), (3, 5), (4, 4), (2, 5, 3), (2, 1, 3, 4)]
DTYPES = [torch.float64, torch.complex128]


def rand(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=gen)


def invariants(U, S, Vh):
    """Gauge-invariant functions of one SVD (real and complex)."""
    return U @ Vh, S, (U * S.to(U.dtype).unsqueeze(-2)) @ Vh, (U.abs() ** 2) * 1.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_svd_gradcheck(shape, dtype) -> None:
    A = rand(shape, dtype).requires_grad_()
    assert gradcheck(lambda X: invariants(*ps.svd(X)), (A,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 3, 3)])
def test_svd_gradgradcheck(shape, dtype) -> None:
    A = rand(shape, dtype).requires_grad_()
    assert gradgradcheck(lambda X: invariants(*ps.svd(X))[:3], (A,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd_full_matrices_gradcheck(shape, dtype) -> None:
    A = rand(shape, dtype).requires_grad_()
    k = min(shape[-2:])

    def f(X):
        U, S, Vh = ps.svd(X, full_matrices=True)
        Up, Vp = U[..., k:], Vh[..., k:, :]
        return U[..., :k] @ Vh[..., :k, :], Up @ Up.mH, Vp.mH @ Vp

    assert gradcheck(f, (A,))


def test_full_matrices_complement_where_torch_is_wrong() -> None:
    """torch ignores the cotangent of the complement columns; their span is a
    smooth function of A, and pyspectral differentiates it."""
    A = rand((5, 3), torch.float64, seed=2)
    W = random_like(A, seed=3, shape=(5, 5))

    def loss(svd):
        def f(X):
            Up = svd(X, full_matrices=True)[0][:, 3:]
            return ((Up @ Up.mT) * W).sum()

        return f

    exact = fd_grad(loss(torch.linalg.svd), A)
    assert rel_err(grad(loss(ps.svd), A), exact) < 1e-6
    assert rel_err(grad(loss(torch.linalg.svd), A), exact) > 1e-2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5)])
def test_topk_gradcheck_and_discarded_coupling(shape, dtype) -> None:
    A = rand(shape, dtype).requires_grad_()
    assert gradcheck(lambda X: invariants(*ps.svd(X, k=2)), (A,))
    # the gradient includes the coupling to the discarded pairs
    W = random_like(A, seed=5)

    def loss(X):
        U, S, Vh = ps.svd(X, k=2)
        return ((U @ Vh) * W.conj()).real.sum() + S.sum()

    assert rel_err(grad(loss, A), fd_grad(loss, A)) < 1e-6


def test_svdvals() -> None:
    A = rand((5, 4), torch.float64).requires_grad_()
    assert torch.allclose(ps.svdvals(A), torch.linalg.svdvals(A))
    assert gradcheck(lambda X: ps.svdvals(X), (A,))
    assert torch.allclose(ps.svdvals(A.detach()), torch.linalg.svdvals(A.detach()))


FUNCTIONS = [
    "polar",
    ("truncate", 2),
    ("threshold", 0.3),
    ("pow", 2),
    ("pow", 0.5),
    "normalize",
    (torch.sinh, torch.cosh),
]


@pytest.mark.parametrize("f", FUNCTIONS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd_function_gradcheck(shape, dtype, f) -> None:
    A = rand(shape, dtype, seed=1).requires_grad_()
    assert gradcheck(lambda X: ps.svd_function(X, f), (A,))


EXPECTED = {
    "polar": lambda S: torch.ones_like(S),
    "('truncate', 2)": lambda S: torch.where(torch.arange(len(S)) < 2, S, 0.0),
    "('threshold', 0.3)": lambda S: (S - 0.3).clamp(min=0),
    "('pow', 2)": lambda S: S**2,
    "('pow', 0.5)": lambda S: S**0.5,
    "normalize": lambda S: S / S[0],
}


@pytest.mark.parametrize("f", FUNCTIONS, ids=str)
def test_svd_function_forward(f) -> None:
    A = rand((5, 4), torch.complex128, seed=2)
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    fS = EXPECTED.get(str(f), torch.sinh)(S)
    assert torch.allclose(ps.svd_function(A, f), (U * fS.to(U.dtype)) @ Vh, atol=1e-12)


def test_svd_function_double_backward() -> None:
    A = rand((4, 3), torch.float64).requires_grad_()
    assert gradgradcheck(lambda X: ps.svd_function(X, ("pow", 3)), (A,))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128]
)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_torch(shape, dtype) -> None:
    A = rand(shape, dtype, seed=4)
    U, S, Vh = ps.svd(A)
    U0, S0, Vh0 = torch.linalg.svd(A, full_matrices=False)
    tol = 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-10
    assert S.dtype == S0.dtype and U.dtype == A.dtype
    assert torch.allclose(S, S0, atol=tol)
    # up to gauge: same reconstruction; |U^H U0| is the identity (distinct s)
    assert torch.allclose((U * S.to(dtype).unsqueeze(-2)) @ Vh, A, atol=10 * tol)
    eye = torch.eye(S.shape[-1], dtype=S.dtype).expand(S.shape + S.shape[-1:])
    assert torch.allclose((U.mH @ U0).abs(), eye, atol=100 * tol)
    Uf, _, Vhf = ps.svd(A, full_matrices=True)
    assert Uf.shape[-1] == A.shape[-2] and Vhf.shape[-2] == A.shape[-1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_float32_gradients_finite_and_close(dtype) -> None:
    A = with_singular_values((4, 3, 3, 1), 5, 4, dtype=dtype, seed=1)
    W = random_like(A, seed=2)
    high = torch.complex128 if dtype.is_complex else torch.float64

    def loss(X):
        U, S, Vh = ps.svd(X)
        Wx = W.to(X.dtype)
        return ((U @ Vh) * Wx.conj()).real.sum() + S.sum()

    g32 = grad(loss, A)
    g64 = grad(loss, A.to(high))
    assert torch.isfinite(g32).all()
    assert rel_err(g32.to(high), g64) < 1e-3


def test_backward_does_not_mutate_incoming_gradient() -> None:
    A = rand((5, 4), torch.complex128).requires_grad_()
    U, S, Vh = ps.svd(A)
    gU, gS, gVh = (random_like(t, seed=i) for i, t in enumerate((U, S, Vh)))
    copies = [g.clone() for g in (gU, gS, gVh)]
    # a gauge-dependent cotangent is fine here (warning ignored): only mutation counts
    U2, S2, Vh2 = ps.svd(A, gauge="ignore")
    torch.autograd.grad((U2, S2, Vh2), A, (gU, gS, gVh))
    for g, c in zip((gU, gS, gVh), copies):
        assert torch.equal(g, c)
    Y = ps.svd_function(A, ("pow", 2))
    gY = random_like(Y, seed=9)
    c = gY.clone()
    torch.autograd.grad(Y, A, gY)
    assert torch.equal(gY, c)
