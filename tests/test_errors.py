"""Every documented bad input raises a pyspectral error that names the argument."""

from __future__ import annotations

import time

import pytest
import torch

import pyspectral as ps

A = torch.randn(4, 3, dtype=torch.float64)
H = torch.eye(3, dtype=torch.float64)
OPS = [
    ps.svd,
    ps.svdvals,
    lambda X: ps.svd_function(X, "polar"),
    ps.eigh,
    ps.eigvalsh,
    lambda X: ps.matrix_function(X, "exp"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float16])
def test_dtype(op, dtype) -> None:
    with pytest.raises(ps.InputTypeError, match="dtype") as e:
        op(torch.ones(3, 3, dtype=dtype))
    assert isinstance(e.value, TypeError) and str(dtype) in str(e.value)


@pytest.mark.parametrize("op", OPS)
def test_rank_and_type(op) -> None:
    with pytest.raises(ps.InputError, match=r"\(\*, m, n\)") as e:
        op(torch.ones(3, dtype=torch.float64))
    assert isinstance(e.value, ValueError)
    with pytest.raises(ps.InputTypeError, match="torch.Tensor"):
        op([[1.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite(op, bad) -> None:
    X = torch.eye(3, dtype=torch.float64)
    X[1, 2] = bad
    with pytest.raises(ps.InputError, match="NaN or Inf"):
        op(X)


def test_k() -> None:
    for k in (0, 4, -1, 2.0, True):
        with pytest.raises(
            ps.InputError, match=r"k must be an integer with 1 <= k <= min\(m, n\) = 3"
        ):
            ps.svd(A, k=k)
    with pytest.raises(ps.InputError, match="full_matrices"):
        ps.svd(A, k=2, full_matrices=True)


@pytest.mark.parametrize(
    "op", [ps.eigh, ps.eigvalsh, lambda X: ps.matrix_function(X, "exp")]
)
def test_square(op) -> None:
    with pytest.raises(ps.InputError, match="square"):
        op(A)


def test_hermitian_check_and_uplo() -> None:
    X = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
    ps.eigh(X)  # reads the lower triangle only, by default
    for op in (ps.eigh, lambda Y, **kw: ps.matrix_function(Y, "exp", **kw)):
        with pytest.raises(ps.InputError, match="not Hermitian"):
            op(X, check_hermitian=True)
    with pytest.raises(ps.InputError, match="UPLO"):
        ps.eigh(H, "X")


def test_backend_names() -> None:
    with pytest.raises(ps.BackendError, match="backend must be one of"):
        ps.svd(A, backend="jax")
    t = time.perf_counter()
    with pytest.raises(ps.BackendError, match="Julia"):
        ps.svd(A, backend="julia")
    assert time.perf_counter() - t < 5


def test_unknown_f() -> None:
    with pytest.raises(ps.InputTypeError, match="svd_function: f must be one of"):
        ps.svd_function(A, "sqrt")
    with pytest.raises(ps.InputTypeError, match="matrix_function: f must be one of"):
        ps.matrix_function(H, "polar")
    with pytest.raises(ps.InputError, match="truncate"):
        ps.svd_function(A, ("truncate", 5))
    with pytest.raises(ps.InputError, match="threshold"):
        ps.svd_function(A, ("threshold", -1.0))


@pytest.mark.parametrize("f", ["log", "invsqrt", ("pow", -1), "sqrt", ("pow", 0.5)])
def test_domain(f) -> None:
    X = torch.diag(torch.tensor([2.0, -1.0, 3.0], dtype=torch.float64))
    with pytest.raises(ps.DomainError, match=r"eigenvalue 0 .*-1") as e:
        ps.matrix_function(X, f)
    assert isinstance(e.value, ValueError)
    Z = torch.diag(torch.tensor([2.0, 0.0, 3.0], dtype=torch.float64))
    if f in ("log", "invsqrt", ("pow", -1)):
        with pytest.raises(ps.DomainError, match="positive definite"):
            ps.matrix_function(Z, f)
    else:
        ps.matrix_function(Z - 1e-15 * torch.eye(3, dtype=Z.dtype), f)  # rounding noise


def test_batched_domain_error_names_batch_element() -> None:
    X = torch.stack([torch.eye(2), torch.diag(torch.tensor([1.0, -2.0]))]).double()
    with pytest.raises(ps.DomainError, match=r"eigenvalue 0 of batch element \(1,\)"):
        ps.matrix_function(X, "log")


def test_svd_function_domain() -> None:
    Z = torch.diag(torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64))
    with pytest.raises(ps.DomainError, match="pow"):
        ps.svd_function(Z, ("pow", -1))
    with pytest.raises(ps.DomainError, match="zero matrix"):
        ps.svd_function(torch.zeros(3, 2, dtype=torch.float64), "normalize")
