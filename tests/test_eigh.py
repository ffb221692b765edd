"""eigh, eigvalsh, matrix_function at distinct spectra: gradcheck and
gradgradcheck, the triangle convention, forward against torch.linalg, float32,
no mutation of the incoming gradient. Degenerate spectra: test_degenerate.py.

The forward reads one triangle (UPLO), and the gradient is the true gradient
w.r.t. the entries read (the other triangle gets 0), so plain gradcheck on a
general, non-Hermitian input is valid.
"""

from __future__ import annotations

import math

import pytest
import torch
from _spectra import (
    grad,
    hermitian_with_spectrum,
    inner,
    randn,
    random_like,
    rel_err,
)
from torch.autograd import gradcheck, gradgradcheck

import pyspectral as ps

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

DTYPES = [torch.float64, torch.complex128]
ALL_DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
HIGH = {torch.float32: torch.float64, torch.complex64: torch.complex128}


def positive(*shape, dtype=torch.float64, seed=0):
    """A general (non-Hermitian) matrix whose triangles each make a positive
    definite Hermitian matrix: the Hermitian part is X X^H / n + I, the
    anti-Hermitian noise is small."""
    X = randn(*shape, dtype=dtype, seed=seed)
    n = shape[-1]
    H = X @ X.mH / n + torch.eye(n, dtype=dtype)
    return H + 0.1 * randn(*shape, dtype=dtype, seed=seed + 1).tril(-1)


def invariants(w, V):
    """Gauge-invariant functions of one eigendecomposition."""
    return w, V.abs() ** 2, (V * torch.tanh(w).to(V.dtype).unsqueeze(-2)) @ V.mH


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (1, 2, 3, 3)])
def test_eigh_gradcheck_on_general_input(shape, dtype, uplo) -> None:
    A = randn(*shape, dtype=dtype).requires_grad_()
    assert gradcheck(lambda X: invariants(*ps.eigh(X, uplo)), (A,))
    assert gradcheck(lambda X: ps.eigvalsh(X, uplo), (A,))


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_gradgradcheck(dtype, uplo) -> None:
    A = randn(2, 4, 4, dtype=dtype).requires_grad_()
    assert gradgradcheck(lambda X: invariants(*ps.eigh(X, uplo)), (A,))
    assert gradgradcheck(lambda X: ps.eigvalsh(X, uplo), (A,))


STRICT = {  # strictly-lower/upper part: (the triangle read, the other one)
    "L": (lambda M: M.tril(-1), lambda M: M.triu(1)),
    "U": (lambda M: M.triu(1), lambda M: M.tril(-1)),
}


@pytest.mark.parametrize("dtype", DTYPES)
def test_only_the_read_triangle_gets_a_gradient(dtype) -> None:
    A = randn(5, 5, dtype=dtype, seed=3)
    H = ((A + A.mH) / 2).requires_grad_()
    c = torch.arange(5.0, dtype=torch.float64)
    for uplo in ("L", "U"):
        w, V = ps.eigh(H, uplo)
        (gH,) = torch.autograd.grad((w * c).sum(), H)
        G = ((V * c.to(V.dtype)) @ V.mH).detach()  # torch's Hermitian gradient
        read, other = STRICT[uplo]
        assert torch.count_nonzero(other(gH)) == 0
        assert torch.allclose(read(gH), 2 * read(G))
        assert torch.allclose(gH.diagonal(), G.diagonal().real.to(dtype))


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_equals_torch_through_a_hermitian_parametrisation(dtype, uplo) -> None:
    """Through eigh(X + X^H) both triangle conventions give the same gradient."""
    A = randn(5, 5, dtype=dtype, seed=3)
    W = random_like(A, seed=4)

    def loss(eigh, matfun):
        def f(X):
            w, V = eigh(X + X.mH, UPLO=uplo)
            Y = (V * torch.tanh(w).to(V.dtype)) @ V.mH
            return inner(Y, W) + (w**2).sum() + inner(matfun(X + X.mH), W)

        return f

    def torch_matfun(H):
        w, V = torch.linalg.eigh(H, UPLO=uplo)
        return (V * torch.exp(w / 4).to(V.dtype)) @ V.mH

    def ps_matfun(H):
        f = (lambda x: torch.exp(x / 4), lambda x: torch.exp(x / 4) / 4)
        return ps.matrix_function(H, f, uplo)

    expected = grad(loss(torch.linalg.eigh, torch_matfun), A)
    assert rel_err(grad(loss(ps.eigh, ps_matfun), A), expected) < 1e-10


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
REFERENCE = {  # f(w), keyed by str(f)
    "sqrt": torch.sqrt,
    "invsqrt": torch.rsqrt,
    "log": torch.log,
    "exp": torch.exp,
    "('pow', 1.5)": lambda w: w**1.5,
    "('pow', -1)": lambda w: 1 / w,
    "('pow', 3)": lambda w: w**3,
}


@pytest.mark.parametrize("f", MATFUNS, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_function_gradcheck_on_general_input(dtype, uplo, f) -> None:
    A = positive(2, 4, 4, dtype=dtype).requires_grad_()
    fun = lambda X: ps.matrix_function(X, f, uplo, check_hermitian=False)  # noqa: E731
    assert gradcheck(fun, (A,))


@pytest.mark.parametrize("f", ["log", ("pow", -1), (torch.sin, torch.cos)], ids=str)
def test_matrix_function_gradgradcheck(f) -> None:
    A = positive(3, 3, dtype=torch.complex128).requires_grad_()
    fun = lambda X: ps.matrix_function(X, f, check_hermitian=False)  # noqa: E731
    assert gradgradcheck(fun, (A,))


@pytest.mark.parametrize("f", MATFUNS, ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_matrix_function_forward(dtype, f) -> None:
    A = positive(2, 4, 4, dtype=dtype)
    for uplo in ("L", "U"):
        w, V = torch.linalg.eigh(A, UPLO=uplo)
        fw = REFERENCE.get(str(f), torch.sin)(w).to(dtype)
        Y = ps.matrix_function(A, f, uplo, check_hermitian=False)  # one triangle
        assert Y.dtype == dtype and Y.shape == A.shape
        tol = 1e-5 if dtype in HIGH else 1e-12
        assert torch.allclose(Y, (V * fw.unsqueeze(-2)) @ V.mH, atol=tol)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_forward_matches_torch(dtype) -> None:
    A = randn(3, 5, 5, dtype=dtype, seed=5)
    tol = 1e-4 if dtype in HIGH else 1e-10
    for uplo in ("L", "U"):
        w, V = ps.eigh(A, uplo)
        w0, V0 = torch.linalg.eigh(A, UPLO=uplo)
        assert (w.dtype, V.dtype) == (w0.dtype, V0.dtype)
        assert torch.allclose(w, w0, atol=tol) and bool((w.diff(dim=-1) >= 0).all())
        # up to gauge: |V^H V0| = I at a distinct spectrum; V diag(w) V^H = H
        eye = torch.eye(5, dtype=w.dtype)
        assert torch.allclose((V.mH @ V0).abs(), eye, atol=100 * tol)
        H = A.tril() + A.tril(-1).mH if uplo == "L" else A.triu() + A.triu(1).mH
        if dtype.is_complex:  # LAPACK ignores the imaginary part of the diagonal
            H = H - 1j * torch.diag_embed(H.diagonal(dim1=-2, dim2=-1).imag)
        assert torch.allclose((V * w.to(dtype).unsqueeze(-2)) @ V.mH, H, atol=10 * tol)
        assert torch.allclose(ps.eigvalsh(A, uplo), w0, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_float32_gradients_finite_and_close(dtype) -> None:
    A = positive(5, 5, dtype=HIGH[dtype], seed=2)
    W = random_like(A, seed=3)

    def loss(X):
        w, V = ps.eigh(X)
        P = V[:, 3:] @ V[:, 3:].mH
        return inner(P, W.to(X.dtype)) + inner(
            ps.matrix_function(X, "log", check_hermitian=False), W.to(X.dtype)
        )

    g32 = grad(loss, A.to(dtype))
    assert g32.dtype == dtype and torch.isfinite(g32).all()
    assert rel_err(g32.to(HIGH[dtype]), grad(loss, A)) < 1e-3


@pytest.mark.parametrize("create_graph", [False, True])
def test_backward_does_not_mutate_incoming_gradient(create_graph) -> None:
    A = positive(4, 4, dtype=torch.complex128).requires_grad_()
    outputs = [
        *ps.eigh(A, gauge="ignore"),
        ps.matrix_function(A, "sqrt", check_hermitian=False),
    ]
    outputs.append(ps.eigvalsh(A))
    cotangents = [random_like(t, seed=i) for i, t in enumerate(outputs)]
    copies = [g.clone() for g in cotangents]
    (gA,) = torch.autograd.grad(outputs, A, cotangents, create_graph=create_graph)
    assert torch.isfinite(gA).all() and gA.abs().max() > 0
    for g, c in zip(cotangents, copies):
        assert torch.equal(g, c)


# ------------------------------------- an infinite derivative at an exact 0


@pytest.mark.parametrize("seed", [0, 1])
def test_sqrt_at_an_exact_zero_eigenvalue_is_infinite_only_there(seed) -> None:
    """sqrt(A) at diag(0, .5, 2, 3): d sqrt is infinite only along the zero
    eigenvalue's own direction, entry (0, 0). Every other entry of the
    gradient is finite (before: 9 of 16 entries NaN): the Daleckii-Krein
    divided differences sqrt[0, x] = sqrt(x) / x are finite."""
    lam = [0.0, 0.5, 2.0, 3.0]
    A = torch.diag(torch.tensor(lam, dtype=torch.float64))
    W = torch.ones(4, 4, dtype=torch.float64) if seed == 0 else random_like(A, seed)

    def loss(X):
        return inner(ps.matrix_function(X, "sqrt", check_hermitian=False), W)

    G = grad(loss, A)
    assert not torch.isnan(G).any()
    assert G[0, 0] == math.copysign(math.inf, float(W[0, 0]))
    finite = torch.ones(4, 4, dtype=torch.bool)
    finite[0, 0] = False
    assert torch.isfinite(G[finite]).all()
    # Daleckii-Krein at V = I, folded onto the lower triangle read: with
    # H = (W + W^T) / 2, G_ij = 2 H_ij (sqrt(l_i) - sqrt(l_j)) / (l_i - l_j)
    # below the diagonal, H_jj / (2 sqrt(l_j)) on it, 0 above.
    H = (W + W.mT) / 2
    for i in range(4):
        for j in range(4):
            if (i, j) == (0, 0):
                continue
            li, lj = lam[i], lam[j]
            want = (
                0.0
                if i < j
                else H[j, j] / (2 * lj**0.5)
                if i == j
                else 2 * H[i, j] * (li**0.5 - lj**0.5) / (li - lj)
            )
            assert float(G[i, j]) == pytest.approx(float(want), abs=1e-12)
    # and against central differences where the zero eigenvalue stays put
    # (the read entries of the positive block; the others leave the domain)
    for i in range(1, 4):
        for j in range(1, i + 1):
            E = torch.zeros_like(A)
            E[i, j] = 1e-5
            fd = 8 * (loss(A + E) - loss(A - E)) - loss(A + 2 * E) + loss(A - 2 * E)
            assert float(G[i, j]) == pytest.approx(float(fd) / 12e-5, abs=1e-8)


def test_sqrt_at_a_zero_eigenvalue_of_a_dense_matrix() -> None:
    """A rotated semidefinite matrix: the zero eigenvector is dense, so the
    infinite part reaches every entry of the triangle read, with the sign of
    v0 v0^T <v0, W v0>; never NaN. Batched and complex too. (Infinite where
    LAPACK returns the zero exactly; where it returns a rounding-level
    positive value, as MKL's AVX-512 kernels do, finite and enormous.)"""
    A = hermitian_with_spectrum([0.0, 0.5, 2.0, 3.0], dtype=torch.complex128, seed=3)
    A = torch.stack([A, A + torch.eye(4)])  # the second one is definite
    W = random_like(A, seed=4)
    G = grad(lambda X: inner(ps.matrix_function(X, "sqrt"), W), A)
    assert not torch.isnan(torch.view_as_real(G)).any()
    assert torch.isfinite(G[1]).all()  # definite: finite everywhere
    blown_up = torch.view_as_real(G[0]).tril().abs().max()
    assert blown_up > 1e4 * G[1].abs().max()  # inf, or 1 / sqrt(rounding)
