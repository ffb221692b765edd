"""``ps.eig`` and ``ps.eigvals`` (pyspectral/eig.py, pullbacks/eig.py):
drop-in results, gradcheck at distinct eigenvalues, finite differences for
gauge-invariant losses at a repeated eigenvalue of a diagonalizable matrix
(where torch.linalg.eig is wrong or NaN), the gauge policy on losses that
depend on phases, bases or unequal weights, defective matrices, forward
mode, second order, both backends."""

from __future__ import annotations

import warnings

import pytest
import torch
from _spectra import fd_grad, grad, randn, rel_err

import pyspectral as ps

F64, C128 = torch.float64, torch.complex128


def diagonalizable(values, dtype=F64, seed=0):
    """``S diag(values) S^-1`` with a random (non-unitary) ``S``: non-normal."""
    S = randn(len(values), len(values), dtype=dtype, seed=seed)
    return S @ torch.diag(torch.tensor(values, dtype=dtype)) @ torch.linalg.inv(S)


def near(L, value, radius=0.3):
    return (L - value).abs() < radius


def cluster_loss(value, W, backend="auto", eig=None):
    """A gauge-invariant loss at the cluster of eigenvalue ``value``: its
    spectral projector, a symmetric function of its eigenvalues, and the
    other eigenvalues one by one."""

    def loss(X):
        L, V = ps.eig(X, backend=backend) if eig is None else eig(X)
        c = near(L.detach(), value)
        P = V[:, c] @ torch.linalg.inv(V)[c, :]
        other = L[~c]
        return (W * P).real.sum() + (L[c].sum() ** 2).real + (other**3).real.sum()

    return loss


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.complex64, C128], ids=str)
def test_drop_in_for_torch_linalg_eig(dtype):
    A = randn(3, 5, 5, dtype=dtype, seed=1)
    L, V = ps.eig(A)
    Lt, Vt = torch.linalg.eig(A)
    assert torch.equal(L, Lt) and torch.equal(V, Vt)
    assert torch.equal(ps.eigvals(A), torch.linalg.eigvals(A))
    assert L.dtype == Lt.dtype and V.dtype == Vt.dtype


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_gradcheck_at_distinct_eigenvalues(dtype):
    A = randn(2, 4, 4, dtype=dtype, seed=2).requires_grad_()

    def projector(X):
        L, V = ps.eig(X)
        return L, V[..., :1] @ torch.linalg.inv(V)[..., :1, :]

    kw = dict(check_forward_ad=True, check_batched_grad=False)
    assert torch.autograd.gradcheck(projector, (A,), **kw)
    assert torch.autograd.gradcheck(ps.eigvals, (A,), **kw)
    assert torch.autograd.gradgradcheck(ps.eigvals, (A,))


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_exact_at_a_repeated_eigenvalue(dtype):
    """A triple eigenvalue of a non-normal diagonalizable matrix: the
    cluster's projector and a symmetric function of its eigenvalues, exact;
    torch.linalg.eig's gradient of the same loss is off or NaN."""
    A = diagonalizable([1.0, 2.0, 2.0, 2.0, -0.5], dtype=dtype, seed=3)
    W = randn(5, 5, dtype=C128, seed=4)
    loss = cluster_loss(2.0, W)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        g = grad(loss, A)
    exact = fd_grad(loss, A, h=1e-6)
    assert rel_err(g, exact) < 1e-7
    theirs = grad(cluster_loss(2.0, W, eig=torch.linalg.eig), A)
    assert not (torch.isfinite(theirs).all() and rel_err(theirs, exact) < 1e-3)


def test_loss_of_one_member_of_a_cluster_warns():
    """An eigenvalue of a cluster on its own is not differentiable there: the
    weights are unequal (item 1's rule), a GaugeWarning names the remedy."""
    A = diagonalizable([1.0, 2.0, 2.0, -0.5], seed=5).requires_grad_()
    L, _ = ps.eig(A)
    c = near(L.detach(), 2.0).nonzero()[0, 0]
    with pytest.warns(ps.GaugeWarning, match="eig: .*unequally.*symmetric function"):
        L[c].real.backward()


def test_basis_and_phase_dependent_losses_warn():
    A = diagonalizable([1.0, 2.0, 2.0, -0.5], seed=6).requires_grad_()
    L, V = ps.eig(A)
    c = near(L.detach(), 2.0).nonzero()[:, 0]
    with pytest.warns(ps.GaugeWarning, match="eig: the incoming gradient depends"):
        V[:, c[0]].real.sum().backward(retain_graph=True)  # a basis inside it
    with pytest.warns(ps.GaugeWarning, match="eig: the incoming gradient depends"):
        V[0, 0].imag.backward()  # a phase
    with pytest.raises(ps.GaugeError):
        ps.eig(A.detach().requires_grad_(), gauge="raise").eigenvectors[
            0, 0
        ].imag.backward()


def test_defective_raises():
    J = torch.tensor([[2.0, 1.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]], dtype=F64)
    A = J.requires_grad_()
    with pytest.raises(ps.DomainError, match="defective"):
        ps.eigvals(A).real.sum().backward()
    with pytest.raises(ps.DomainError, match="defective"):
        torch.func.jvp(
            lambda X: ps.eig(X).eigenvalues, (J.detach(),), (torch.ones_like(J),)
        )


def test_real_input_with_conjugate_pairs():
    A = torch.tensor([[0.0, -2.0, 0.3], [1.0, 0.0, 0.1], [0.0, 0.2, 1.5]], dtype=F64)
    L, V = ps.eig(A)
    assert L.is_complex() and (L.imag.abs() > 0.1).sum() == 2
    X = A.clone().requires_grad_()
    (L.abs() ** 2).sum()  # (not differentiated: the forward is torch's)

    def loss(X):
        L, V = ps.eig(X)
        return (L.abs() ** 2).sum() + (V.abs() ** 2 * torch.arange(3.0)).sum()

    g = grad(loss, X)
    assert g.dtype == F64 and rel_err(g, fd_grad(loss, A)) < 1e-8


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_forward_mode_at_a_repeated_eigenvalue(dtype):
    A = diagonalizable([1.0, 2.0, 2.0, -0.5], dtype=dtype, seed=7)
    W = randn(4, 4, dtype=C128, seed=8)
    D = randn(4, 4, dtype=dtype, seed=9)
    loss = cluster_loss(2.0, W)
    # D splits the cluster: forward mode cannot see that this loss is
    # invariant there, so it warns (test_eig_defective.py: the cases it is
    # not), and the tangent is still exact for this loss
    with pytest.warns(ps.GaugeWarning, match="splits it"):
        _, tangent = torch.func.jvp(loss, (A,), (D,))
    g = grad(loss, A)
    assert abs(float(tangent) - float((g.conj() * D).real.sum())) < 1e-8 * float(
        g.norm()
    )


def test_second_order_at_distinct_and_a_cluster():
    """Exact second order away from clusters (gradgradcheck above); at a
    cluster a loss whose gradient couples into it warns, as svd / eigh."""
    A = diagonalizable([1.0, 2.0, 2.0, -0.5], seed=10)
    X = A.clone().requires_grad_()
    L, V = ps.eig(X)
    c = near(L.detach(), 2.0)
    P = V[:, c] @ torch.linalg.inv(V)[c, :]
    (g,) = torch.autograd.grad((P.real**2).sum(), X, create_graph=True)
    with pytest.warns(ps.GaugeWarning, match="second derivative"):
        g.sum().backward()


def test_bad_input():
    with pytest.raises(ps.ShapeError, match="square"):
        ps.eig(torch.ones(3, 2, dtype=F64))
    with pytest.raises(ps.DtypeError):
        ps.eigvals(torch.ones(2, 2, dtype=torch.int32))
    with pytest.raises(ps.NonFiniteError):
        ps.eig(torch.tensor([[1.0, float("inf")], [0.0, 1.0]]))
    with pytest.raises(ps.InputError, match="degeneracy_atol"):
        ps.eig(torch.eye(2), degeneracy_atol=-1)


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_both_backends_agree(backend, dtype):
    A = diagonalizable([1.0, 2.0, 2.0, 2.0, -0.5], dtype=dtype, seed=11)
    W = randn(5, 5, dtype=C128, seed=12)
    L, V = ps.eig(A, backend=backend)
    L0, V0 = ps.eig(A)
    assert torch.allclose(L, L0) and torch.allclose(V, V0)
    assert torch.allclose(ps.eigvals(A, backend=backend), L0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        g = grad(cluster_loss(2.0, W, backend), A)
        g0 = grad(cluster_loss(2.0, W), A)
    assert rel_err(g, g0) < 1e-12
    D = randn(5, 5, dtype=dtype, seed=13)
    loss = cluster_loss(2.0, W, backend)
    t = None
    if backend == "torch":
        with pytest.warns(ps.GaugeWarning, match="splits it"):  # D splits it
            _, t = torch.func.jvp(loss, (A,), (D,))
    if t is not None:
        assert abs(float(t) - float((g0.conj() * D).real.sum())) < 1e-8 * float(
            g0.norm()
        )


def test_torch_func_vmap_grad_and_hessian():
    """vmap, grad and hessian (forward over reverse) through eig agree with
    the batched call, autograd's Jacobian and double backward."""
    A = randn(3, 4, 4, seed=14)
    assert torch.allclose(torch.func.vmap(ps.eigvals)(A), ps.eigvals(A))

    def f(X):
        return ps.eig(X).eigenvalues.real.pow(3).sum()

    g = torch.func.vmap(torch.func.grad(f))(A)
    assert torch.allclose(g, torch.stack([grad(f, a) for a in A]))
    H = torch.func.hessian(f)(A[0])
    X = A[0].clone().requires_grad_()
    (gx,) = torch.autograd.grad(f(X), X, create_graph=True)
    D = randn(4, 4, seed=15)
    (hd,) = torch.autograd.grad((gx * D).sum(), X)
    assert torch.allclose((H * D).sum((-2, -1)), hd)
