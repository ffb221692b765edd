"""``ps.qr`` and ``ps.lq`` (pyspectral/qr.py, pullbacks/qr.py): drop-in
results, the positive gauge, exact gradients (gradcheck at full rank, finite
differences for the complement of a complete Q and at rank deficiency),
forward mode, second order, the gauge policy on what A does not determine,
both backends (Julia through its stand-in here; the real one in
test_julia_rules / the Julia suite)."""

from __future__ import annotations

import warnings

import pytest
import torch
from _spectra import fd_grad, grad, inner, randn, rel_err

import pyspectral as ps

F64, C128 = torch.float64, torch.complex128
SHAPES = [(5, 3), (4, 4), (3, 5)]
DTYPES = [torch.float32, F64, torch.complex64, C128]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("m, n", SHAPES, ids=str)
def test_drop_in_for_torch_linalg_qr(m, n, mode, dtype):
    A = randn(2, m, n, dtype=dtype, seed=m * n)
    Q, R = ps.qr(A, mode)
    Qt, Rt = torch.linalg.qr(A, mode)
    assert Q.shape == Qt.shape and R.shape == Rt.shape and R.dtype == dtype
    assert torch.equal(R, Rt)
    if mode != "r":
        assert torch.equal(Q, Qt)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete"])
@pytest.mark.parametrize("m, n", SHAPES, ids=str)
def test_positive_gauge(m, n, mode, dtype):
    """diag(R) >= 0 (real), A = Q R, Q orthonormal: the QR of tensor-network
    codes; lq likewise with diag(L) >= 0, and lq(A) is qr(A^H) transposed."""
    A = randn(3, m, n, dtype=dtype, seed=7)
    tol = 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-12
    Q, R = ps.qr(A, mode, positive=True)
    d = R.diagonal(dim1=-2, dim2=-1)
    assert bool((d.real >= 0).all())
    assert not d.is_complex() or bool((d.imag == 0).all())
    assert torch.dist(Q @ R, A) < tol * A.norm()
    eye = torch.eye(Q.shape[-1], dtype=dtype)
    assert torch.dist(Q.mH @ Q, eye.expand_as(Q.mH @ Q)) < tol * 10
    L, Ql = ps.lq(A, mode, positive=True)
    assert bool((L.diagonal(dim1=-2, dim2=-1).real >= 0).all())
    assert torch.dist(L @ Ql, A) < tol * A.norm()
    Qh, Rh = ps.qr(A.mH, mode, positive=True)
    assert torch.allclose(L, Rh.mH) and torch.allclose(Ql, Qh.mH)


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("m, n", SHAPES, ids=str)
@pytest.mark.parametrize("positive", [False, True])
def test_gradcheck_reduced_and_r(m, n, dtype, positive):
    A = randn(2, m, n, dtype=dtype, seed=m + n).requires_grad_()
    kw = dict(check_forward_ad=True, check_batched_grad=False)
    assert torch.autograd.gradcheck(lambda X: ps.qr(X, positive=positive), (A,), **kw)
    assert torch.autograd.gradcheck(lambda X: ps.lq(X, positive=positive), (A,), **kw)
    assert torch.autograd.gradcheck(lambda X: ps.qr(X, "r", positive=positive).R, (A,))
    assert torch.autograd.gradcheck(lambda X: ps.lq(X, "r", positive=positive).L, (A,))


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_gradgradcheck(dtype):
    A = randn(4, 3, dtype=dtype, seed=3).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda X: ps.qr(X, positive=True), (A,))
    assert torch.autograd.gradgradcheck(lambda X: ps.lq(X.mT, positive=True), (A,))


def projector_loss(op, mode, W, backend="auto"):
    """A loss of a complete Q through the complement's projector and of the
    rest of the factors directly: invariant under the complement's basis."""

    def loss(X):
        if op == "qr":
            Q, R = ps.qr(X, mode, positive=True, backend=backend)
            k = R.shape[-1]
            Q1, Q2 = Q[..., :k], Q[..., k:]
            return inner(Q2 @ Q2.mH, W) + inner(Q1, W[..., :k]) + (R.abs() ** 2).sum()
        L, Q = ps.lq(X, mode, positive=True, backend=backend)
        k = L.shape[-2]
        Q1, Q2 = Q[..., :k, :], Q[..., k:, :]
        return inner(Q2.mH @ Q2, W) + inner(Q1, W[..., :k, :]) + (L.abs() ** 2).sum()

    return loss


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_complete_mode_exact_through_the_complements_projector(dtype):
    """torch.linalg.qr(mode="complete") raises for every loss of a tall A; the
    complement's span is determined, so losses of its projector are exact."""
    A = randn(6, 3, dtype=dtype, seed=11)
    W = randn(6, 6, dtype=dtype, seed=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        for op, X in (("qr", A), ("lq", A.mH.contiguous())):
            loss = projector_loss(op, "complete", W)
            assert rel_err(grad(loss, X), fd_grad(loss, X)) < 1e-8
    with pytest.raises(RuntimeError):
        torch.linalg.qr(A.clone().requires_grad_(), "complete").Q.sum().backward()


def test_complete_mode_basis_dependent_loss_warns():
    A = randn(6, 3, seed=13).requires_grad_()
    Q, _ = ps.qr(A, "complete")
    with pytest.warns(ps.GaugeWarning, match="qr: the incoming gradient depends"):
        Q[..., 4:].sum().backward()


def rank_deficient(m, n, r, dtype, seed):
    """An m x n matrix of rank r whose first r columns are independent."""
    return randn(m, r, dtype=dtype, seed=seed) @ randn(r, n, dtype=dtype, seed=seed + 1)


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("m, n, r", [(6, 4, 2), (4, 4, 3), (3, 5, 2)], ids=str)
def test_rank_deficient_exact_for_the_determined_part(m, n, r, dtype):
    """MatrixAlgebraKit's convention: at rank r, Q[:, :r] and R[:r, :] are the
    QR of A[:, :r] with R[:r, r:] = Q[:, :r]^H A[:, r:]; their losses get
    exact gradients, silently (torch.linalg.qr is off there)."""
    A = rank_deficient(m, n, r, dtype, seed=m + n + r)
    G1, G2 = randn(m, r, dtype=dtype, seed=1), randn(r, n, dtype=dtype, seed=2)

    def loss(X):
        Q, R = ps.qr(X, positive=True)
        return inner(Q[:, :r], G1) + inner(R[:r], G2)

    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        g = grad(loss, A)
    assert rel_err(g, fd_grad(loss, A, h=1e-6)) < 1e-6

    def through_lq(X):  # the transposed rule
        L, Q = ps.lq(X.mH, positive=True)
        return inner(Q[:r].mH, G1) + inner(L[:, :r].mH, G2)

    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        assert rel_err(grad(through_lq, A), g) < 1e-10


def test_rank_deficient_loss_past_the_rank_warns_or_raises():
    A = rank_deficient(5, 4, 2, F64, seed=21)
    X = A.clone().requires_grad_()
    Q, R = ps.qr(X)
    with pytest.warns(ps.GaugeWarning, match="qr: A is rank deficient"):
        (Q.sum() + R.sum()).backward()
    X = A.clone().requires_grad_()
    L, Q = ps.lq(X.mT, gauge="raise")
    with pytest.raises(
        ps.GaugeError, match="lq: A is rank deficient.*rows and L's columns"
    ):
        Q[3].sum().backward()  # a row of Q past the rank: one choice of many
    # rank_atol: a pivot above the tolerance counts, and the loss is exact
    X = A.clone().requires_grad_()
    Q, R = ps.qr(X, rank_atol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        R[:2].sum().backward()


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_forward_mode_and_func(dtype):
    A = randn(5, 3, dtype=dtype, seed=31)
    D = randn(5, 3, dtype=dtype, seed=32)
    W = randn(5, 3, dtype=dtype, seed=33)

    def loss(X):
        Q, R = ps.qr(X, positive=True)
        return inner(Q, W) + (R.abs() ** 2).sum()

    _, tangent = torch.func.jvp(loss, (A,), (D,))
    assert abs(float(tangent) - float(inner(grad(loss, A), D))) < 1e-10 * (
        1 + abs(tangent)
    )
    if not dtype.is_complex:  # (jacrev takes real inputs)
        assert torch.allclose(torch.func.jacrev(loss)(A), grad(loss, A))
    batched = torch.func.vmap(lambda X: ps.qr(X, positive=True).R)(
        randn(4, 5, 3, seed=34)
    )
    assert torch.allclose(batched, ps.qr(randn(4, 5, 3, seed=34), positive=True).R)


def test_backward_leaves_the_cotangents_alone():
    A = randn(5, 3, seed=41).requires_grad_()
    Q, R = ps.qr(A, positive=True)
    gQ, gR = torch.ones_like(Q), torch.ones_like(R)
    before = (gQ.clone(), gR.clone())
    torch.autograd.backward((Q, R), (gQ, gR))
    assert torch.equal(gQ, before[0]) and torch.equal(gR, before[1])


def test_bad_input():
    A = randn(3, 2, seed=51)
    with pytest.raises(ps.InputError, match="mode must be one of"):
        ps.qr(A, "economic")
    with pytest.raises(ps.InputTypeError, match="positive must be True or False"):
        ps.lq(A, positive=1)
    with pytest.raises(ps.DtypeError):
        ps.qr(torch.ones(3, 2, dtype=torch.int64))
    with pytest.raises(ps.ShapeError):
        ps.lq(torch.ones(3))
    with pytest.raises(ps.NonFiniteError):
        ps.qr(torch.tensor([[1.0, float("nan")]], dtype=F64))
    with pytest.raises(ps.InputError, match="rank_atol"):
        ps.qr(A, rank_atol=-1.0)
    with pytest.raises(ps.InputError, match="out= .* no positive gauge"):
        ps.qr(A, positive=True, out=(torch.empty(0), torch.empty(0)))
    Q, R = torch.empty(0, dtype=F64), torch.empty(0, dtype=F64)
    ps.qr(A, out=(Q, R))
    assert torch.allclose(Q @ R, A)


def test_empty():
    for shape in ((0, 3), (3, 0), (2, 0, 0)):
        A = torch.zeros(shape, dtype=F64, requires_grad=True)
        Q, R = ps.qr(A)
        Qt, Rt = torch.linalg.qr(A.detach())
        assert Q.shape == Qt.shape and R.shape == Rt.shape
        (Q.sum() + R.sum()).backward()
        assert A.grad.shape == A.shape


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_both_backends_agree(backend, dtype):
    """The Julia rule (here its stand-in: the bridge's layout and role swaps)
    against the native one, every mode, both gauges, a batch."""
    A = randn(2, 5, 3, dtype=dtype, seed=61)
    W = randn(2, 5, 5, dtype=dtype, seed=62)
    for op in ("qr", "lq"):
        X = A if op == "qr" else A.mH.contiguous()
        for positive in (False, True):
            ref = getattr(ps, op)(X, positive=positive)
            got = getattr(ps, op)(X, positive=positive, backend=backend)
            assert all(torch.allclose(a, b) for a, b in zip(got, ref))
        loss = projector_loss(op, "complete", W, backend)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ps.GaugeWarning)
            assert rel_err(grad(loss, X), fd_grad(loss, X)) < 1e-8


def test_torch_func_hessian_is_double_backward():
    A = randn(5, 3, seed=71)

    def f(X):
        Q, R = ps.qr(X, positive=True)
        return R.pow(3).sum() + (Q[:, :2] ** 2 * A[:, :2]).sum()

    H = torch.func.hessian(f)(A)
    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(f(X), X, create_graph=True)
    D = randn(5, 3, seed=72)
    (hd,) = torch.autograd.grad((g * D).sum(), X)
    assert torch.allclose((H * D).sum((-2, -1)), hd)
