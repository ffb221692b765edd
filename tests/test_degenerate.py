"""Gradients at degenerate, near-degenerate and rank-deficient spectra against
central finite differences (float64, relative error <= 1e-5)."""

from __future__ import annotations

import pytest
import torch
from _spectra import (
    fd_grad,
    grad,
    hermitian_with_eigenvalues,
    random_like,
    rel_err,
    with_singular_values,
)

import pyspectral as ps

TOL = 1e-5

# name -> (singular values of a 6x5 matrix, a k with s_k > s_{k+1}, full rank?)
SPECTRA = {
    "repeated": ((5, 2, 2, 1, 0.5), 3, True),
    "1e-9 apart": ((5, 2, 2 + 1e-9, 1, 0.5), 3, True),
    "1e-13 apart": ((5, 2, 2 + 1e-13, 1, 0.5), 3, True),
    "all equal": ((1, 1, 1, 1, 1), 5, True),
    "rank deficient": ((3, 2, 2, 0, 0), 3, False),
}
DTYPES = [torch.float64, torch.complex128]
SHAPES = [(6, 5), (5, 6)]


def case(name: str, dtype: torch.dtype, shape: tuple[int, int]):
    s, k, full_rank = SPECTRA[name]
    A = with_singular_values(s, *shape, dtype=dtype, seed=3)
    W = random_like(A, seed=4)
    return A, W, k, full_rank, torch.tensor(s, dtype=torch.float64)


def inner(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return (X * W.conj()).real.sum()


def check(loss, A: torch.Tensor) -> None:
    # relative to max(|grad|, 1e-3): some losses are constant (a projector onto
    # the whole space), and their gradient is then 0 up to rounding.
    exact = fd_grad(loss, A)
    err = float((grad(loss, A) - exact).abs().max()) / max(
        float(exact.abs().max()), 1e-3
    )
    assert err <= TOL, f"relative error {err:.2e}"


# ------------------------------------------------------------------ svd


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SPECTRA)
def test_svd_exact_losses(name: str, dtype: torch.dtype, shape: tuple) -> None:
    A, W, k, full_rank, s = case(name, dtype, shape)
    Wk = random_like(A, seed=5, shape=(shape[0], shape[0]))

    def projector(X):
        U = ps.svd(X).U[:, :k]
        return inner(U @ U.mH, Wk)

    def topk_projector(X):
        U, _, _ = ps.svd(X, k=k)
        return inner(U @ U.mH, Wk)

    # weights constant on every cluster (0 on the zero cluster)
    c = torch.where(s > 0, s.round(), 0.0)

    def cluster_weights(X):
        U, _, Vh = ps.svd(X)
        return inner((U * c.to(U.dtype)) @ Vh, W)

    def sum_squares(X):
        return (ps.svd(X).S ** 2).sum()

    for loss in (projector, topk_projector, cluster_weights, sum_squares):
        check(loss, A)
    if full_rank:

        def polar(X):
            U, _, Vh = ps.svd(X)
            return inner(U @ Vh, W)

        def nuclear(X):
            return ps.svdvals(X).sum()

        check(polar, A)
        check(nuclear, A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_reconstruction_exact_where_gap_exceeds_tolerance(dtype) -> None:
    A, W, *_ = case("1e-9 apart", dtype, (6, 5))

    def reconstruct(X):
        U, S, Vh = ps.svd(X)
        return inner((U * S.to(U.dtype)) @ Vh, W)

    check(reconstruct, A)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SPECTRA)
def test_svd_function_exact_everywhere(name: str, dtype: torch.dtype, shape) -> None:
    A, W, k, full_rank, s = case(name, dtype, shape)
    tau = 0.7  # away from every singular value
    fs = [("pow", 1), ("pow", 2), ("pow", 3), ("truncate", k), ("threshold", tau)]
    if full_rank:
        fs += ["polar", ("pow", 0.5)]
    if s[0] > s[1]:
        fs.append("normalize")
    for f in fs:
        check(lambda X, f=f: inner(ps.svd_function(X, f), W), A)


def test_svd_function_user_pair_at_degenerate_point() -> None:
    A, W, *_ = case("repeated", torch.float64, (6, 5))
    f = (torch.sinh, torch.cosh)  # odd, f(0) = 0
    check(lambda X: inner(ps.svd_function(X, f), W), A)


def test_reconstruction_through_svd_is_not_exact_at_a_cluster() -> None:
    """The documented limit: the 0/0 term of U f(S) Vh is not in the cotangents."""
    A, W, *_ = case("repeated", torch.float64, (6, 5))

    def reconstruct(X):
        U, S, Vh = ps.svd(X)
        return inner((U * S) @ Vh, W)

    assert rel_err(grad(reconstruct, A), fd_grad(reconstruct, A)) > 1e-4
    check(lambda X: inner(ps.svd_function(X, ("pow", 1)), W), A)


def test_torch_fails_where_pyspectral_does_not() -> None:
    A, W, *_ = case("all equal", torch.float64, (6, 5))

    def polar(svd):
        def loss(X):
            U, _, Vh = svd(X, full_matrices=False)
            return inner(U @ Vh, W)

        return loss

    torch_grad = grad(polar(torch.linalg.svd), A)
    assert not torch.isfinite(torch_grad).all()
    check(polar(ps.svd), A)


# ------------------------------------------------------------------ eigh

EIGEN = {
    "repeated": ((-1, 0.5, 2, 2, 2, 3), (2, 5)),
    "1e-9 apart": ((-1, 0.5, 2, 2 + 1e-9, 2 - 1e-9, 3), (2, 5)),
    "1e-13 apart": ((-1, 0.5, 2, 2 + 1e-13, 2, 3), (2, 5)),
    "all equal": ((1.5, 1.5, 1.5, 1.5, 1.5, 1.5), (0, 6)),
}


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", EIGEN)
def test_eigh_exact_losses(name: str, dtype: torch.dtype, uplo: str) -> None:
    w, (lo, hi) = EIGEN[name]
    A = hermitian_with_eigenvalues(w, dtype=dtype, seed=6)
    W = random_like(A, seed=7)

    def projector(X):
        V = ps.eigh(X, uplo).eigenvectors[:, lo:hi]
        return inner(V @ V.mH, W)

    c = torch.tensor(w, dtype=torch.float64).round()

    def cluster_weights(X):
        V = ps.eigh(X, uplo).eigenvectors
        return inner((V * c.to(V.dtype)) @ V.mH, W)

    def eigenvalues(X):
        return (ps.eigvalsh(X, uplo) ** 3).sum()

    for loss in (projector, cluster_weights, eigenvalues):
        check(loss, A)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", EIGEN)
def test_matrix_function_exact_everywhere(name: str, dtype: torch.dtype) -> None:
    w, _ = EIGEN[name]
    A = hermitian_with_eigenvalues([x + 1.6 for x in w], dtype=dtype, seed=8)
    W = random_like(A, seed=9)
    for f in (
        "sqrt",
        "invsqrt",
        "log",
        "exp",
        ("pow", 1.5),
        ("pow", -2),
        (torch.tanh, lambda x: 1 - torch.tanh(x) ** 2),
    ):
        check(lambda X, f=f: inner(ps.matrix_function(X, f), W), A)


def test_eigh_projector_torch_nan_on_diagonal_input() -> None:
    A = torch.diag(torch.tensor([-1.0, 0.5, 2, 2, 2, 3], dtype=torch.float64))
    W = random_like(A, seed=2)

    def loss(eigh):
        def f(X):
            V = eigh((X + X.mT) / 2)[1][:, 2:5]
            return inner(V @ V.mT, W)

        return f

    assert not torch.isfinite(grad(loss(torch.linalg.eigh), A)).all()
    check(loss(ps.eigh), A)


# ------------------------------------------------------------------ gauge


def test_gauge_dependent_svd_loss_warns_and_raises() -> None:
    A, *_ = case("repeated", torch.float64, (6, 5))
    X = A.clone().requires_grad_()

    def loss(**kw):
        return ps.svd(X, **kw).U[:, 1].sum()

    with pytest.warns(ps.GaugeWarning, match=r"^svd: "):
        loss().backward()
    with pytest.raises(ps.GaugeError, match=r"^svd: "):
        loss(gauge="raise").backward()
    with ps.defaults(gauge="raise"), pytest.raises(ps.GaugeError):
        loss().backward()
    assert ps.get_defaults()["gauge"] == "warn"
    loss(gauge="ignore").backward()  # silent


def test_complex_phase_dependent_loss_warns() -> None:
    A, *_ = case("1e-9 apart", torch.complex128, (6, 5))
    X = A.clone().requires_grad_()
    U, _, _ = ps.svd(X)
    with pytest.warns(ps.GaugeWarning, match=r"^svd: "):
        U[0, 0].real.backward()  # depends on the phase of u_0


def test_gauge_dependent_eigh_loss_warns_and_raises() -> None:
    A = hermitian_with_eigenvalues((-1, 0.5, 2, 2, 2, 3), seed=6)
    X = A.clone().requires_grad_()
    with pytest.warns(ps.GaugeWarning, match=r"^eigh: "):
        ps.eigh(X).eigenvectors[:, 2].sum().backward()
    with pytest.raises(ps.GaugeError, match=r"^eigh: "):
        ps.eigh(X, gauge="raise").eigenvectors[:, 3].sum().backward()


def test_truncation_inside_a_cluster_warns() -> None:
    A, *_ = case("repeated", torch.float64, (6, 5))
    with pytest.warns(ps.GaugeWarning, match="truncate"):
        ps.svd_function(A, ("truncate", 2))
    with pytest.raises(ps.GaugeError):
        ps.svd_function(A, ("truncate", 2), gauge="raise")
