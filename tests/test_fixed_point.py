"""``fixed_point`` (``pyspectral/fixed_point.py``): the iteration, its
implicit gradient against closed forms, ``gradcheck`` and unrolled
autograd, the gauge hook frozen at convergence, and the errors where the
implicit function theorem does not apply.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import pyspectral as ps

F64 = torch.float64


def randn(*shape, dtype=F64, seed=0) -> torch.Tensor:
    return torch.randn(
        *shape, dtype=dtype, generator=torch.Generator().manual_seed(seed)
    )


def test_scalar_against_its_closed_form():
    a = torch.tensor(0.7, dtype=F64, requires_grad=True)
    x, info = ps.fixed_point(
        lambda x: torch.cos(a * x), torch.zeros((), dtype=F64), return_info=True
    )
    assert info.converged and info.iterations > 5
    assert abs((x - torch.cos(a * x)).item()) < 1e-12
    (g,) = torch.autograd.grad(x, a)
    s = torch.sin(a * x).detach()
    assert abs((g - (-x * s / (1 + a * s))).item()) < 1e-12


@pytest.mark.parametrize("dtype", [F64, torch.complex128])
def test_gradcheck_of_a_contraction(dtype):
    # conj makes the step only real-linear: the solve runs in real arithmetic
    n = 5
    W = (0.3 * randn(n, n, dtype=dtype)).requires_grad_()
    c = randn(n, dtype=dtype, seed=1).requires_grad_()

    def f(W, c):
        return ps.fixed_point(
            lambda x: 0.5 * torch.tanh(W @ x.conj() + c), torch.zeros(n, dtype=dtype)
        )

    assert torch.autograd.gradcheck(f, (W, c), fast_mode=True)


def test_against_unrolled_autograd_and_its_memory():
    n = 6
    W = (0.2 * randn(n, n)).requires_grad_()
    c = randn(n, seed=1).requires_grad_()
    w = randn(n, seed=2)

    def step(x):
        return torch.tanh(W @ x + c)

    x = ps.fixed_point(step, torch.zeros(n, dtype=F64))
    g = torch.autograd.grad((x * w).sum(), (W, c))
    u = torch.zeros(n, dtype=F64)
    for _ in range(200):
        u = step(u)
    g_unrolled = torch.autograd.grad((u * w).sum(), (W, c))
    for a, b in zip(g, g_unrolled, strict=True):
        assert (a - b).abs().max() < 1e-11


def test_the_step_runs_with_grad_twice_whatever_the_iterations():
    calls = {"grad": 0, "plain": 0}
    a = torch.tensor(0.9, dtype=F64, requires_grad=True)

    def step(x):
        calls["grad" if torch.is_grad_enabled() else "plain"] += 1
        return 0.5 * torch.sin(a * x) + 0.3

    x, info = ps.fixed_point(step, torch.zeros(3, dtype=F64), return_info=True)
    assert calls["plain"] == info.iterations and info.iterations > 10
    assert calls["grad"] == 2  # the check at x*, then the graph for J^H
    x.sum().backward()
    assert a.grad is not None and calls["grad"] == 2


def test_a_tuple_state():
    a = torch.tensor(0.4, dtype=F64, requires_grad=True)
    b = torch.tensor(0.3, dtype=F64, requires_grad=True)

    def step(s):
        u, v = s
        return torch.cos(a * v), torch.sin(b * u)

    u, v = ps.fixed_point(step, (torch.zeros(2, dtype=F64), torch.zeros(2, dtype=F64)))
    assert torch.allclose(u, torch.cos(a * v)) and torch.allclose(v, torch.sin(b * u))
    assert torch.autograd.gradcheck(
        lambda a, b: ps.fixed_point(
            lambda s: (torch.cos(a * s[1]), torch.sin(b * s[0])),
            (torch.zeros(2, dtype=F64), torch.zeros(2, dtype=F64)),
        ),
        (a, b),
    )


def power_step(A):
    """One power-iteration step: its fixed point is the dominant eigenvector
    only up to its sign, which flips at every step where the eigenvalue is
    negative."""
    return lambda x: (A @ x) / torch.linalg.vector_norm(A @ x)


def sign_fix(new, ref):
    s = torch.sign((new * ref).sum()).detach()
    return lambda x: s * x


def test_gauge_fix_frozen_at_convergence():
    n = 6
    B = randn(n, n)
    lam = torch.tensor([-5.0, 2.0, 1.0, 0.5, 0.2, 0.1], dtype=F64)
    Q, _ = torch.linalg.qr(B)
    A0 = Q @ torch.diag(lam) @ Q.mT
    H = randn(n, n, seed=1)
    P = (H + H.mT) / 2
    x0 = torch.ones(n, dtype=F64)
    with pytest.warns(ps.ConvergenceWarning, match="not converged after"):
        ps.fixed_point(power_step(A0), x0, maxiter=50)

    def loss(A, use_fixed_point):
        A = (A + A.mT) / 2  # eigh's gradient is that of the symmetric part
        if use_fixed_point:
            v = ps.fixed_point(power_step(A), x0, gauge_fix=sign_fix)
        else:
            w, V = torch.linalg.eigh(A)
            v = V[:, torch.argmax(w.abs())]
        return v @ P @ v  # sign invariant

    A = A0.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(A, True), A)
    (g_ref,) = torch.autograd.grad(loss(A, False), A)
    assert (g - g_ref).abs().max() < 1e-9


def test_a_gauge_fix_that_does_not_reproduce_the_fixed_point_is_an_error():
    n = 4
    lam = torch.tensor([-3.0, 1.0, 0.5, 0.2], dtype=F64)
    A = torch.diag(lam)
    x0 = torch.ones(n, dtype=F64)
    _, info = ps.fixed_point(power_step(A), x0, gauge_fix=sign_fix, return_info=True)
    calls = {"n": 0}

    def bad_fix(new, ref):
        # aligns while iterating, then (the call at convergence) does not
        calls["n"] += 1
        fix = sign_fix(new, ref)
        return fix if calls["n"] <= info.iterations else (lambda x: -fix(x))

    with pytest.raises(ps.GaugeError, match="does not reproduce its fixed point"):
        ps.fixed_point(power_step(A), x0, gauge_fix=bad_fix)
    assert calls["n"] == info.iterations + 1


def test_a_jacobian_eigenvalue_one_is_a_derivative_error():
    # the phase of a complex eigenvector is free: J has the eigenvalue 1
    # along i v, and a loss that sees the phase cannot be differentiated
    n = 4
    A = torch.diag(torch.tensor([3.0, 1.0, 0.5, 0.2], dtype=torch.complex128))
    A.requires_grad_()
    x0 = torch.ones(n, dtype=torch.complex128) * (1 + 1j)
    v = ps.fixed_point(power_step(A), x0)
    with pytest.raises(ps.DerivativeError, match="eigenvalue at or near 1"):
        v[0].imag.backward()


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"x0": [1.0]}, ps.InputTypeError, "tensor or a tuple of tensors"),
        ({"x0": torch.tensor([1, 2])}, ps.InputTypeError, "floating or complex"),
        ({"x0": torch.tensor([float("nan")])}, ps.NonFiniteError, "NaN"),
        ({"tol": 0.0}, ps.InputError, "tol must be a finite number > 0"),
        ({"maxiter": 0}, ps.InputError, "maxiter must be an integer >= 1"),
        ({"gauge_fix": 3}, ps.InputTypeError, "gauge_fix must be a callable"),
        ({"step": lambda x: x[:1]}, ps.InputError, "shapes and dtypes of x0"),
        ({"step": lambda x: x / 0}, ps.NonFiniteError, "NaN or Inf"),
        ({"gauge_fix": lambda new, ref: None}, ps.InputTypeError, "as a callable"),
    ],
)
def test_bad_input_says_what_to_do(kwargs, error, match):
    step = kwargs.pop("step", lambda x: 0.5 * x)
    x0 = kwargs.pop("x0", torch.ones(2, dtype=F64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.ConvergenceWarning)
        with pytest.raises(error, match=match):
            ps.fixed_point(step, x0, **kwargs)
