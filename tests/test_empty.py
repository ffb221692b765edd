"""Empty inputs (a zero dimension: ``m``, ``n`` or a batch size) work as in
torch.linalg, forward and backward, first and second order: results of
torch's shapes and dtypes (and values, where torch has the op), gradients of
the input's shape, no error. They run on the native backend (``"auto"``);
``backend="julia"`` refuses them (tests/test_julia_bridge.py).
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

import pyspectral as ps

SHAPES = [(0, 3), (3, 0), (0, 0), (2, 0, 3), (2, 0, 0), (0, 2, 2)]
SQUARE = [s for s in SHAPES if s[-1] == s[-2]]
DTYPES = [torch.float32, torch.float64, torch.complex128]

# pyspectral op -> its torch.linalg twin (None: torch has no such op)
SVD_OPS = {
    "svd": (
        partial(ps.svd, full_matrices=False),
        partial(torch.linalg.svd, full_matrices=False),
    ),
    "svd full": (
        lambda A: ps.svd(A, full_matrices=True),
        lambda A: torch.linalg.svd(A, full_matrices=True),
    ),
    "svdvals": (ps.svdvals, torch.linalg.svdvals),
}
SVD_FUNCTIONS = ["polar", "normalize", ("threshold", 0.5), ("pow", 2), ("pow", 0.5)]
EIGH_OPS = {
    "eigh": (ps.eigh, torch.linalg.eigh),
    "eigh U": (lambda A: ps.eigh(A, "U"), lambda A: torch.linalg.eigh(A, "U")),
    "eigvalsh": (ps.eigvalsh, torch.linalg.eigvalsh),
}
MATRIX_FUNCTIONS = ["sqrt", "invsqrt", "log", "exp", ("pow", -1), ("pow", 3)]


def outputs(result) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, tuple) else (result,)


def loss_of(result) -> torch.Tensor:
    """A real loss that reads every output (gauge invariant: squared moduli)."""
    return sum((o.abs() ** 2).sum() for o in outputs(result))


def grads(op, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First and second order gradients of ``loss_of(op(A))``, zeros for None."""
    A = A.detach().requires_grad_()
    (g,) = torch.autograd.grad(loss_of(op(A)), A, create_graph=True)
    (gg,) = torch.autograd.grad((g.abs() ** 2).sum(), A, allow_unused=True)
    return g.detach(), torch.zeros_like(A) if gg is None else gg


def assert_like(ours, theirs) -> None:
    ours, theirs = outputs(ours), outputs(theirs)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert o.shape == t.shape and o.dtype == t.dtype and o.device == t.device
        assert o.numel() == 0 or torch.equal(o, t)


def empty(shape, dtype) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", SVD_OPS)
def test_svd_ops(name, shape, dtype) -> None:
    ours, theirs = SVD_OPS[name]
    A = empty(shape, dtype)
    assert_like(ours(A), theirs(A))
    g, gg = grads(ours, A)
    tg, tgg = grads(theirs, A)
    assert_like(g, tg)
    assert_like(gg, tgg)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SQUARE, ids=str)
@pytest.mark.parametrize("name", EIGH_OPS)
def test_eigh_ops(name, shape, dtype) -> None:
    ours, theirs = EIGH_OPS[name]
    A = empty(shape, dtype)
    assert_like(ours(A), theirs(A))
    g, gg = grads(ours, A)
    tg, tgg = grads(theirs, A)
    assert_like(g, tg)
    assert_like(gg, tgg)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("f", SVD_FUNCTIONS, ids=str)
def test_svd_function(f, shape, dtype) -> None:
    A = empty(shape, dtype)
    Y = ps.svd_function(A, f)
    assert Y.shape == A.shape and Y.dtype == A.dtype
    g, gg = grads(lambda X: ps.svd_function(X, f), A)
    assert g.shape == gg.shape == A.shape and g.dtype == A.dtype


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_svd_function_of_a_pair_and_truncate(shape) -> None:
    A = empty(shape, torch.float64)
    Y = ps.svd_function(A, (torch.sin, torch.cos))
    assert Y.shape == A.shape
    g, gg = grads(lambda X: ps.svd_function(X, (torch.tanh, torch.cosh)), A)
    assert g.shape == gg.shape == A.shape
    if min(shape[-2:]) > 0:  # an empty batch of 2 x 2 matrices
        assert ps.svd_function(A, ("truncate", 1)).shape == A.shape
        return
    # an empty spectrum has no top k for any k >= 1: the usual range error
    with pytest.raises(ps.InputError, match=r"1 <= k <= min\(m, n\) = 0"):
        ps.svd_function(A, ("truncate", 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SQUARE, ids=str)
@pytest.mark.parametrize("f", MATRIX_FUNCTIONS, ids=str)
def test_matrix_function(f, shape, dtype) -> None:
    A = empty(shape, dtype)
    Y = ps.matrix_function(A, f)
    assert Y.shape == A.shape and Y.dtype == A.dtype
    g, gg = grads(lambda X: ps.matrix_function(X, f), A)
    assert g.shape == gg.shape == A.shape and g.dtype == A.dtype
    if f == "exp":  # the one torch has
        assert_like(Y, torch.linalg.matrix_exp(A))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_top_k_and_keywords_on_empty_input(shape) -> None:
    A = empty(shape, torch.float64)

    # tolerances given explicitly take the empty path too
    def op(X):
        return ps.svd(
            X, degeneracy_atol=1e-8, broadening=1e-3, gauge="raise", full_matrices=False
        )

    assert op(A).S.shape == (*shape[:-2], min(shape[-2:]))
    g, gg = grads(op, A)
    assert g.shape == gg.shape == A.shape
    if min(shape[-2:]) == 0:
        # k past min(m, n) = 0 is a maximum: nothing to keep
        assert ps.svd(A, k=1).S.shape == (*shape[:-2], 0)
        # k = 0 keeps nothing, on an empty spectrum too
        assert ps.svd(A, k=0).S.shape == (*shape[:-2], 0)


def test_an_empty_batch_of_nonempty_matrices() -> None:
    """(0, 3, 2): no matrix at all, each of a non-empty shape."""
    A = torch.zeros(0, 3, 2, dtype=torch.float64, requires_grad=True)
    U, S, Vh = ps.svd(A, full_matrices=False)
    assert (U.shape, S.shape, Vh.shape) == ((0, 3, 2), (0, 2), (0, 2, 2))
    (g,) = torch.autograd.grad(loss_of((U, S, Vh)), A)
    assert g.shape == A.shape
    H = torch.zeros(0, 3, 3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(ps.matrix_function(H, "sqrt").sum(), H)
    assert g.shape == H.shape


def test_vmap_and_grad_of_empty_input() -> None:
    A = torch.zeros(2, 0, 3, dtype=torch.float64)
    S = torch.func.vmap(ps.svdvals)(A)
    assert S.shape == (2, 0)
    g = torch.func.grad(lambda X: ps.svd_function(X, ("pow", 2)).sum())(A[0])
    assert g.shape == (0, 3)
