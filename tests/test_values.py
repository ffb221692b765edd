"""A user's ``f`` that depends on tensors besides ``A`` (issue 15, item 2):
``svd_function(A, f)`` / ``matrix_function(A, f)`` with ``f(s) = f(s; theta)``
send the gradient into ``theta`` (before: ``t.grad`` was None, and 0 under
``torch.func``), on both backends, to first and second order (double
backward, ``torch.func.hessian``, ``jacrev(jacfwd)``, ``jacfwd(jacfwd)``;
``theta`` alone and mixed with ``A``), in forward mode and under
``torch.func``, with ``f'`` optional. Checked against central finite
differences in float64, at degenerate spectra too (``_values.py``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _spectra import (
    central4,
    fd_grad,
    grad,
    hermitian_with_spectrum,
    inner,
    matrix_with_spectrum,
    random_like,
    rel_err,
)
from torch.func import jvp

import pyspectral as ps

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

TOL = 1e-7  # against the fourth-order stencil


# ------------------------------------------------------------ the functions


def svd_fn(t, form):
    """``t0 sinh(t1 s) + t2 s^3`` (odd, ``f(0) = 0``) as a callable, a pair or
    a triple."""

    def f(s):
        return t[0] * torch.sinh(t[1] * s) + t[2] * s**3

    def fp(s):
        return t[0] * t[1] * torch.cosh(t[1] * s) + 3 * t[2] * s**2

    def fpp(s):
        return t[0] * t[1] ** 2 * torch.sinh(t[1] * s) + 6 * t[2] * s

    return {"callable": f, "pair": (f, fp), "triple": (f, fp, fpp)}[form]


def eig_fn(t, form):
    """``t0 exp(-t1 w) + t2 w^3`` (a heat kernel plus a cubic)."""

    def f(w):
        return t[0] * torch.exp(-t[1] * w) + t[2] * w**3

    def fp(w):
        return -t[0] * t[1] * torch.exp(-t[1] * w) + 3 * t[2] * w**2

    def fpp(w):
        return t[0] * t[1] ** 2 * torch.exp(-t[1] * w) + 6 * t[2] * w

    return {"callable": f, "pair": (f, fp), "triple": (f, fp, fpp)}[form]


def poly_fn(t, form):
    """``t0 + t1 w + t2 w^3``: at ``t = (1, 0, 0)`` a constant, whose divided
    differences take the derivative average everywhere; the derivatives in
    ``t`` need the quotients of ``w`` and ``w^3`` (the branch rule)."""
    return lambda w: t[0] + t[1] * w + t[2] * w**3


THETA = torch.tensor([1.3, 0.7, 0.2], dtype=torch.float64)
SVD_A = matrix_with_spectrum((3.0, 2.0, 2.0, 1.0), 5, 4, seed=1)  # a cluster
EIG_A = hermitian_with_spectrum((-1.0, 0.5, 2.0, 2.0), seed=2)  # a cluster


def matrix_function_triangle(A, f, **kw):
    """matrix_function reading one triangle: the finite differences below
    perturb single entries of A."""
    return ps.matrix_function(A, f, check_hermitian=False, **kw)


CASES = {
    "svd_function": (ps.svd_function, svd_fn, SVD_A, THETA),
    "svd_function generic": (
        ps.svd_function,
        svd_fn,
        matrix_with_spectrum((3.0, 2.0, 1.5, 1.0), 4, 5, seed=3),
        THETA,
    ),
    "matrix_function": (matrix_function_triangle, eig_fn, EIG_A, THETA),
    "matrix_function constant f": (
        matrix_function_triangle,
        poly_fn,
        hermitian_with_spectrum((-1.0, 0.5, 2.0, 2.5), seed=4),
        torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64),
    ),
}


def packed_loss(case, form="callable", backend="torch"):
    """``L(x)``, ``x = (vec A, theta)``: ``<W, Y> + 0.3 |Y|^2`` (a quadratic
    term, so that the Hessian has every block), and ``x0``."""
    op, fn, A, theta = CASES[case]
    m = A.numel()
    W = random_like(A, seed=3)

    def loss(x):
        Y = op(x[:m].reshape(A.shape), fn(x[m:], form), backend=backend)
        return inner(Y, W) + 0.3 * (Y * Y.conj()).real.sum()

    return loss, torch.cat([A.flatten(), theta]), m


# ----------------------------------------------------------- first order


@pytest.mark.parametrize("op", ["svd_function", "matrix_function"])
def test_the_issue_example(op, backend):
    """The issue's example: ``t.grad`` was None; it is the derivative."""
    A = torch.randn(
        5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    if op == "matrix_function":
        A = A[:4] + A[:4].mT

    def Y(t):
        f = (lambda s: t * torch.sinh(s), lambda s: t * torch.cosh(s))
        return getattr(ps, op)(A, f, backend=backend).sum()

    t = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    Y(t).backward()
    assert t.grad is not None
    expected = central4(lambda h: float(Y(torch.tensor(1.7 + h, dtype=A.dtype))), 1e-4)
    assert abs(float(t.grad) - expected) < 1e-8 * abs(expected)
    # Y is linear in t: dY/dt = Y(1) = sum(U sinh(S) Vh)
    assert abs(
        float(t.grad) - float(Y(torch.tensor(1.0, dtype=A.dtype)))
    ) < 1e-12 * abs(expected)


@pytest.mark.parametrize("form", ["callable", "pair", "triple"])
@pytest.mark.parametrize("case", list(CASES))
def test_gradient_in_a_and_theta(case, form, backend):
    if case.endswith("constant f") and form != "callable":
        pytest.skip("poly_fn is given as a callable only")
    loss, x0, m = packed_loss(case, form, backend)
    g, expected = grad(loss, x0), fd_grad(loss, x0, h=1e-4)
    assert rel_err(g[m:], expected[m:]) < TOL  # theta
    assert rel_err(g, expected) < TOL


def test_f_prime_is_optional():
    """``f`` alone: ``f'`` is torch's derivative of ``f``; the same ``Y`` and
    gradients as the pair (and a pair's ``None`` means the same)."""
    A, t = EIG_A, THETA.clone().requires_grad_()
    f, fp = eig_fn(t, "pair")
    results = []
    for g in (f, (f, fp), (f, None), (f, None, None)):
        Y = ps.matrix_function(A, g)
        results.append((Y, *torch.autograd.grad(Y.sin().sum(), t)))
    for Y, gt in results[1:]:
        torch.testing.assert_close(Y, results[0][0], rtol=0, atol=1e-14)
        torch.testing.assert_close(gt, results[0][1], rtol=0, atol=1e-13)


def test_f_prime_from_an_f_torch_cannot_differentiate():
    """Without ``f_prime``, ``f`` must be differentiable by torch; numpy
    inside raises a DerivativeError asking for ``f_prime``."""

    def opaque(s):
        return torch.from_numpy(torch.sinh(s.detach()).numpy())

    with pytest.raises(
        ps.DerivativeError, match=r"f_prime of the user f .*\(f, f_prime\)"
    ):
        ps.svd_function(SVD_A, opaque)
    Y = ps.svd_function(SVD_A, (opaque, torch.cosh))  # with f_prime: fine
    torch.testing.assert_close(Y, ps.svd_function(SVD_A, (torch.sinh, torch.cosh)))


def test_a_bad_f_prime_entry_is_refused():
    with pytest.raises(ps.InputTypeError, match="f_prime must be a callable or None"):
        ps.svd_function(SVD_A, (torch.sinh, 1.0))


# ---------------------------------------------------------- second order


def fd_hvp(loss, x, v, h=1e-4):
    return central4(lambda s: grad(loss, x + s * v), h)


def reverse_hvp(loss, x, v):
    X = x.detach().clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
    (Hv,) = torch.autograd.grad(g @ v, X)
    return Hv


def forward_hvp(loss, x, v):  # as torch.func.hessian
    return jvp(torch.func.grad(loss), (x,), (v,))[1]


def reverse_over_forward_hvp(loss, x, v):  # as jacrev(jacfwd)
    return torch.func.grad(lambda X: jvp(loss, (X,), (v,))[1])(x)


@pytest.mark.parametrize("case", list(CASES))
def test_second_order_in_a_and_theta(case):
    """The Hessian-vector product of ``L(A, theta)`` along a direction in
    both, by every composition of the two modes, including the mixed
    ``A``/``theta`` blocks, against finite differences of the gradient."""
    loss, x0, m = packed_loss(case)
    v = random_like(x0, seed=5)
    expected = fd_hvp(loss, x0, v)
    assert bool(expected[m:].abs().max() > 1e-2)  # the theta rows are seen
    for hvp in (reverse_hvp, forward_hvp, reverse_over_forward_hvp):
        got = hvp(loss, x0, v)
        assert rel_err(got, expected) < TOL, hvp.__name__
    # forward over forward (jacfwd(jacfwd)): the quadratic form v^T H v
    vHv = jvp(lambda X: jvp(loss, (X,), (v,))[1], (x0,), (v,))[1]
    assert abs(float(vHv - v @ expected)) < TOL * float(v.abs() @ expected.abs())


@pytest.mark.parametrize("case", ["svd_function", "matrix_function"])
def test_second_order_through_the_julia_backend(case):
    """Julia computes the first derivative; differentiated further, the
    native formulas on Julia's factors and the same values take over."""
    from _fake_julia import installed

    with installed():
        loss, x0, m = packed_loss(case, backend="julia")
        v = random_like(x0, seed=6)
        expected = fd_hvp(loss, x0, v)
        assert rel_err(reverse_hvp(loss, x0, v), expected) < TOL
        # reverse over forward with forward_ad (torch.func takes the native
        # backend): the tangent is differentiable
        X = x0.clone().requires_grad_()
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(loss(fwAD.make_dual(X, v))).tangent
        (got,) = torch.autograd.grad(tangent, X)
        assert rel_err(got, expected) < TOL


def test_hessian_in_theta():
    op, fn, A, theta = CASES["matrix_function"]
    W = random_like(A, seed=7)

    def loss(t):
        Y = op(A, fn(t, "callable"))
        return inner(Y, W) + (Y * Y).sum()

    expected = torch.stack(
        [
            central4(lambda h, e=e: grad(loss, theta + h * e), 1e-4)
            for e in torch.eye(3, dtype=theta.dtype)
        ]
    )
    for H in (
        torch.autograd.functional.hessian(loss, theta),
        torch.func.hessian(loss)(theta),
        torch.func.jacrev(torch.func.jacrev(loss))(theta),
    ):
        assert rel_err(H, expected) < TOL


def test_third_derivative_raises():
    loss, x0, m = packed_loss("matrix_function")
    X = x0.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
    (Hv,) = torch.autograd.grad(g.sum(), X, create_graph=True)
    with pytest.raises(ps.DerivativeError, match="third"):
        torch.autograd.grad(Hv[m:].sum(), X)


# ---------------------------------------------------------- forward mode


@pytest.mark.parametrize("case", ["svd_function", "matrix_function"])
def test_jvp_in_theta_on_both_backends(case, backend):
    op, fn, A, theta = CASES[case]
    dt = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)

    def Y(t):
        return op(A, fn(t, "pair"), backend=backend)

    expected = central4(lambda h: Y(theta + h * dt), 1e-4)
    with fwAD.dual_level():
        got = fwAD.unpack_dual(Y(fwAD.make_dual(theta, dt))).tangent
    assert rel_err(got, expected) < TOL
    if backend == "torch":
        assert rel_err(jvp(Y, (theta,), (dt,))[1], expected) < TOL


# ------------------------------------------------------------- torch.func


@pytest.mark.parametrize("case", ["svd_function", "matrix_function"])
def test_torch_func_transforms_over_a_captured_tensor(case):
    """``f`` closing over the transformed tensor: grad (0 before), jacrev,
    and vmap over a batch of ``theta`` (and of ``A``)."""
    op, fn, A, theta = CASES[case]
    W = random_like(A, seed=8)

    def loss(t, X=A):
        return inner(op(X, fn(t, "callable")), W)

    expected = fd_grad(loss, theta, h=1e-4)
    assert rel_err(torch.func.grad(loss)(theta), expected) < TOL
    assert rel_err(torch.func.jacrev(loss)(theta), expected) < TOL
    thetas = torch.stack([theta, theta * 0.9, theta + 0.1])
    batched = torch.func.vmap(torch.func.grad(loss))(thetas)
    for i in range(3):
        assert rel_err(batched[i], grad(loss, thetas[i])) < 1e-12
    As = torch.stack([A, A * 1.1])
    both = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1)))(thetas[:2], As)
    for i in range(2):
        t, X = thetas[i], As[i]
        assert rel_err(both[0][i], grad(lambda t, X=X: loss(t, X), t)) < 1e-12
        assert rel_err(both[1][i], grad(lambda X, t=t: loss(t, X), X)) < 1e-12


# ----------------------------------------------------------------- Julia


def test_julia_evaluates_f_once_and_forms_y_in_julia(fake):
    """On the Julia backend ``f`` and ``f'`` run in Python on Julia's spectrum,
    Julia forms ``Y`` and pulls back ``A``; ``theta``'s gradient is the native
    diagonal ``Re diag(U^H G V)`` on Julia's factors."""
    A = SVD_A.clone().requires_grad_()
    t = THETA.clone().requires_grad_()
    W = random_like(A, seed=9)
    seen = []

    f, fp = svd_fn(t, "pair")

    def spy(s):
        seen.append(s.data_ptr())
        return f(s)

    loss = inner(ps.svd_function(A, (spy, fp), backend="julia"), W)
    gA, gt = torch.autograd.grad(loss, (A, t))
    (dec,) = fake.calls_to("svd_batched")
    # f once on Julia's S; besides, f(0) and the elementwise check (K - 1
    # values, reordered), each on a tensor of its own
    assert seen.count(dec.returned[1].pointer) == 1
    assert len(seen) == 3
    assert len(fake.calls_to("svd_function_values_batched")) == 1
    assert len(fake.calls_to("svd_function_values_pullback_batched!")) == 1
    native = torch.autograd.grad(
        inner(ps.svd_function(A, svd_fn(t, "callable")), W), (A, t)
    )
    assert rel_err(gA, native[0]) < 1e-12 and rel_err(gt, native[1]) < 1e-12


def test_the_theta_gradient_is_exact_at_a_degenerate_spectrum():
    """At an exactly repeated eigenvalue the theta-gradient is
    ``sum_i df(w_i)/dtheta (V^H G V)_ii``: what the cluster's basis cannot
    change (a sum over the cluster of a function constant on it)."""
    A = torch.diag(torch.tensor([1.0, 2.0, 2.0, 2.0, 3.0], dtype=torch.float64))
    Q = torch.linalg.qr(
        torch.randn(
            5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
        )
    ).Q
    A = Q @ A @ Q.mT
    W = random_like(A, seed=10)
    beta = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    Y = ps.matrix_function(A, lambda w: torch.exp(-beta * w))
    (g,) = torch.autograd.grad(inner(Y, W), beta)
    w = torch.tensor([1.0, 2.0, 2.0, 2.0, 3.0], dtype=torch.float64)
    expected = (-w * torch.exp(-0.8 * w) * (Q.mT @ W @ Q).diagonal()).sum()
    assert abs(float(g - expected)) < 1e-12 * max(1.0, abs(float(expected)))
    assert math.isfinite(float(g))


def test_torch_func_over_a_captured_tensor_on_the_julia_backend(fake):
    """torch.func runs on the native backend: a transformed tensor that f
    uses raises BackendError, as a transformed A does (not a torch error)."""

    def loss(t):
        return ps.svd_function(SVD_A, lambda s: t * s, backend="julia").sum()

    with pytest.raises(ps.BackendError, match="torch.func .* backend='torch'"):
        torch.func.grad(loss)(torch.tensor(1.5, dtype=torch.float64))


# ------------------------------------------------------------ f(0) != 0


def test_f_of_zero_must_vanish_at_a_zero_singular_value(backend):
    """``U f(S) Vh`` with ``f(0) != 0`` at a zero singular value depends on the
    arbitrary (independent) singular vectors of that zero: refused with a
    DomainError on both backends. Before, it returned a basis-dependent
    result silently (P @ svd_function(B, f) != svd_function(P @ B, f) for an
    orthogonal P). Full rank, or f(0) = 0, is fine."""
    g = torch.Generator().manual_seed(3)
    B = torch.randn(5, 2, dtype=torch.float64, generator=g)
    B = B @ torch.randn(2, 4, dtype=torch.float64, generator=g)  # rank 2 of 4
    shifted = (lambda s: s + 1, lambda s: torch.ones_like(s))
    with pytest.raises(ps.DomainError, match=r"^svd_function: f\(0\) = 1, "):
        ps.svd_function(B, shifted, backend=backend)
    with pytest.raises(ps.DomainError, match=r"f\(0\) = 1"):
        ps.svd_function(
            torch.stack([B[:4] + torch.eye(4, dtype=B.dtype), B[:4]]),
            shifted,
            backend=backend,
        )  # the second of a batch
    full = torch.randn(5, 4, dtype=torch.float64, generator=g)
    Y = ps.svd_function(full, shifted, backend=backend)
    U, S, Vh = torch.linalg.svd(full, full_matrices=False)
    assert torch.allclose(Y, (U * (S + 1)) @ Vh)
    P = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64, generator=g)).Q
    odd = (torch.sinh, torch.cosh)  # f(0) = 0: basis independent at the zeros
    Z = ps.svd_function(P @ B, odd, backend=backend)
    assert torch.allclose(Z, P @ ps.svd_function(B, odd, backend=backend))
