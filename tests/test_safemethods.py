"""Gap inverses (hard cutoff, Lorentzian broadening), divided differences and
maps with infinite weights of ``pyspectral/common/safemethods.py``, directly
and through the gradients they make."""

from __future__ import annotations

import math

import pytest
import torch
from _spectra import (
    fd_grad,
    grad,
    hermitian_with_spectrum,
    inner,
    matrix_with_spectrum,
    random_like,
    rel_err,
)

import pyspectral as ps
from pyspectral._settings import options
from pyspectral.common.safemethods import (
    divided_difference,
    gap_inverse,
    inv_lorentz,
    inv_safe,
    max_abs,
    with_infinite_weights,
)

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

# ------------------------------------------------------------ gap inverses


def test_inv_safe_and_inv_lorentz() -> None:
    x = torch.tensor([-2.0, -1e-13, 0.0, 1e-13, 0.5], dtype=torch.float64)
    tol = torch.tensor(1e-12, dtype=torch.float64)
    expected = torch.tensor([-0.5, 0, 0, 0, 2.0], dtype=torch.float64)
    assert torch.equal(inv_safe(x, tol), expected)
    assert torch.equal(
        inv_safe(x, torch.tensor(0.0, dtype=x.dtype))[[1, 3]], 1 / x[[1, 3]]
    )
    L = inv_lorentz(x, 1e-3)
    assert L[2] == 0 and L[1] == -L[3] and torch.isfinite(L).all()  # signed
    assert torch.allclose(L[[0, 4]], 1 / x[[0, 4]], rtol=1e-5)
    assert float(inv_lorentz(torch.tensor(1e-3), 1e-3)) == pytest.approx(500)
    opts = options(broadening=1e-3)
    assert torch.equal(gap_inverse(x, tol, opts), L)
    assert torch.equal(gap_inverse(x, tol, options()), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inv_lorentz_with_a_width_whose_square_underflows(dtype) -> None:
    w = 100 * torch.finfo(dtype).tiny  # w**2 and x**2 underflow to 0
    x = torch.tensor([-w, 0.0, w, 4 * w, 1.0], dtype=dtype)
    exact = [-1 / (2 * w), 0.0, 1 / (2 * w), 4 / (17 * w), 1.0]
    for got, want in zip(inv_lorentz(x, w).tolist(), exact):
        assert got == pytest.approx(want, rel=1e-5)


def test_tiny_broadening_gives_finite_gradients_at_degeneracy() -> None:
    from _spectra import matrix_with_spectrum, randn

    A = matrix_with_spectrum([3.0, 2.0, 2.0, 1.0], 5, 4)
    W = randn(5, 4, seed=0)

    def loss(X, b):
        U, S, Vh = ps.svd(X, broadening=b, gauge="ignore", full_matrices=False)
        return (W * (U @ Vh)).sum() + S.sum()

    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X, 1e-170), X)
    (g_ref,) = torch.autograd.grad(loss(X, 1e-100), X)
    assert torch.isfinite(g).all()
    torch.testing.assert_close(g, g_ref, rtol=1e-9, atol=1e-9)


def test_inv_safe_is_differentiable_at_the_cutoff() -> None:
    x = torch.tensor([0.0, 1e-14, 2.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(inv_safe(x, torch.tensor(1e-12)).sum(), x)
    assert torch.isfinite(g).all() and g[0] == 0 and g[1] == 0 and g[2] == -0.25


# ---------------------------------------------------- divided differences


def _dd(a: float, b: float, f, df, dtype=torch.float64) -> float:
    a_, b_ = torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype)
    return float(divided_difference(a_, b_, f(a_), f(b_), df(a_), df(b_)))


def test_divided_difference_limits() -> None:
    def t(x):
        return torch.tensor(x, dtype=torch.float64)

    assert (
        float(divided_difference(t(2.0), t(2.0), t(4.0), t(4.0), t(4.0), t(4.0))) == 4
    )
    assert (
        float(divided_difference(t(0.0), t(0.0), t(0.0), t(0.0), t(1.0), t(3.0))) == 2
    )
    assert (
        float(divided_difference(t(3.0), t(1.0), t(9.0), t(1.0), t(6.0), t(2.0))) == 4
    )
    # f constant (the polar factor): 0, also across a tie
    assert (
        float(divided_difference(t(1.0), t(1e-300), t(1.0), t(1.0), t(0.0), t(0.0)))
        == 0
    )
    # an infinite derivative at 0 (sqrt) does not leak into a finite quotient
    assert _dd(1e-20, 0.0, torch.sqrt, lambda x: 0.5 / x.sqrt()) == pytest.approx(1e10)
    # broadcasting and no NaN from the discarded branch
    a = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    L = divided_difference(a, b, a.exp(), b.exp(), a.exp(), b.exp())
    assert L.shape == (2, 2) and torch.isfinite(L).all()
    assert torch.allclose(L.diagonal(), torch.tensor([1.0, 2.0]).double().exp())


def test_divided_difference_with_an_infinite_derivative() -> None:
    """sqrt at 0: f' = inf there. The secant to any x > 0 is finite,
    sqrt(x) / x; only the tie itself is infinite. A NaN average (inf - inf)
    never replaces a quotient either."""

    def half_power(x):
        return 0.5 * x ** (-0.5)

    for x in (0.5, 1e-300, 3.0):
        assert _dd(0.0, x, torch.sqrt, half_power) == pytest.approx(x**0.5 / x)
    assert _dd(0.0, 0.0, torch.sqrt, half_power) == math.inf
    t = torch.tensor
    nan_average = divided_difference(
        t(1.0), t(2.0), t(1.0), t(4.0), t(math.inf), t(-math.inf)
    )
    assert float(nan_average) == 3.0


def test_with_infinite_weights() -> None:
    """inf where the infinite weights reach (with their sign), the finite
    part elsewhere; 0 * inf never becomes NaN."""
    V = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8], [0.0, -0.8, 0.6]]).double()
    X = torch.arange(9.0, dtype=torch.float64).reshape(3, 3) - 3.0  # X[0, 0] < 0

    def linear(L):
        return V @ (L * X) @ V.mT

    L = torch.ones(3, 3, dtype=torch.float64)
    L[0, 0] = math.inf
    G = with_infinite_weights(linear, (L,), max_abs(X))
    assert not torch.isnan(G).any()
    assert G[0, 0] == -math.inf  # sign of X[0, 0]
    assert torch.isfinite(G.flatten()[1:]).all()
    L0 = L.clone()
    L0[0, 0] = 0
    assert torch.equal(G.flatten()[1:], linear(L0).flatten()[1:])
    # without infinite weights: the map itself, evaluated once
    calls = []
    L1 = torch.ones(3, 3, dtype=torch.float64)
    G1 = with_infinite_weights(lambda L: calls.append(1) or linear(L), (L1,), 1.0)
    assert torch.equal(G1, linear(L1)) and len(calls) == 1
    # complex: by real and imaginary part
    Xc = X * (1 + 0j)
    Gc = with_infinite_weights(
        lambda L: V.cdouble() @ (L * Xc) @ V.mT.cdouble(), (L,), 1.0
    )
    assert Gc[0, 0].real == -math.inf and Gc[0, 0].imag == 0
    assert not torch.isnan(torch.view_as_real(Gc)).any()


# f, f', exact divided difference from math's expm1/log1p (no cancellation)
DD_CASES = {
    "exp": (
        torch.exp,
        torch.exp,
        lambda a, b: math.exp(b) * math.expm1(a - b) / (a - b),
    ),
    "log": (torch.log, lambda x: 1 / x, lambda a, b: math.log1p((a - b) / b) / (a - b)),
    "sqrt": (torch.sqrt, lambda x: 0.5 / x.sqrt(), lambda a, b: 1 / (a**0.5 + b**0.5)),
    "cube": (lambda x: x**3, lambda x: 3 * x**2, lambda a, b: a * a + a * b + b * b),
    "x + 1": (lambda x: x + 1, torch.ones_like, lambda a, b: 1.0),
    "sinh": (
        torch.sinh,
        torch.cosh,
        lambda a, b: 2 * math.cosh((a + b) / 2) * math.sinh((a - b) / 2) / (a - b),
    ),
}
# where each is tested: exp near 0 (it varies on scale 1, not |a|), log and
# sqrt down to tiny arguments (where squares would underflow)
DD_RANGES = {
    "exp": (-30, -1e-20, 1e-20, 30),
    "log": (1e-150, 1e3),
    "sqrt": (1e-150, 1e3),
    "cube": (-1e3, -1e-10, 1e-10, 1e3),
    "x + 1": (-1e3, -1e-20, 1e-20, 1e3),
    "sinh": (-30, -1e-20, 1e-20, 30),
}


def _grid(ends):
    out = []
    for lo, hi in zip(ends[::2], ends[1::2]):
        sign = 1 if lo > 0 else -1
        lo, hi = sorted((abs(lo), abs(hi)))
        n = max(2, int(math.log10(hi / lo)) + 1)
        out += [sign * lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return out


@pytest.mark.parametrize("name", DD_CASES)
def test_divided_difference_accuracy_near_ties(name) -> None:
    """Relative accuracy over every argument scale and every relative gap
    from 0 to 1, float64 and float32 (where the difference f(a) - f(b) itself
    cancels to the relative precision eps |f| / |f(a) - f(b)|, float32 gets
    that much less)."""
    f, df, exact = DD_CASES[name]
    gaps = [0.0] + [10.0 ** (-e / 2) for e in range(33)]
    for dtype, tol in ((torch.float64, 1e-8), (torch.float32, 1e-3)):
        worst = 0.0
        tiny = torch.finfo(dtype).tiny ** 0.5
        for a in _grid(DD_RANGES[name]):
            if abs(a) < tiny:
                continue
            a = float(torch.tensor(a, dtype=dtype))
            for gap in gaps:
                b = float(torch.tensor(a * (1 + gap), dtype=dtype))
                ref = (
                    float(df(torch.tensor(a, dtype=torch.float64)))
                    if a == b
                    else exact(a, b)
                )
                got = _dd(a, b, f, df, dtype)
                worst = max(worst, abs(got - ref) / abs(ref))
        assert worst < tol, f"{dtype}: worst relative error {worst:.2e}"


def test_divided_difference_of_values_that_cancel_at_nodes_ulps_apart() -> None:
    """Nodes a few ulps apart are one node (a repeated eigenvalue, rounded):
    the derivative average, also where f's values are a sum that cancels,
    whose rounding is then many ulps of |f| and the quotient noise. Before,
    a polynomial filter on a ring's double eigenvalues took that noise (here
    0, the quotient of two equal roundings; 1e-3 off in the gradient of
    examples/spectral_filter.py)."""
    t = (1.033, -1.88, -0.207, 1.044)

    def f(x):
        u = x / 4
        return t[0] + t[1] * u + t[2] * u**2 + t[3] * u**3

    def df(x):
        u = x / 4
        return (t[1] + 2 * t[2] * u + 3 * t[3] * u**2) / 4

    a = torch.tensor(2 + 2**0.5 * (1 + 2**-0.5) ** 0.5, dtype=torch.float64)
    exact = float(df(a))
    for ulps in range(1, 9):
        b = a + ulps * torch.finfo(torch.float64).eps * 2  # a in [2, 4): ulp 2 eps
        got = divided_difference(a, b, f(a), f(b), df(a), df(b))
        assert abs(float(got) - exact) < 1e-12 * abs(exact), ulps
    # well apart, the quotient, as before
    b = a + 1e-3
    got = divided_difference(a, b, f(a), f(b), df(a), df(b))
    assert abs(float(got - (f(a) - f(b)) / (a - b))) < 1e-12


def test_exp_near_zero_through_matrix_function() -> None:
    """exp of a PSD matrix with a threefold zero eigenvalue (computed as
    +-1e-16): every divided difference in the zero cluster is a tie."""
    for seed in range(3):
        A = hermitian_with_spectrum((0, 0, 0, 1, 2), seed=seed)
        W = random_like(A, seed=9)

        def loss(X, W=W):
            return inner(ps.matrix_function(X, "exp", check_hermitian=False), W)

        assert rel_err(grad(loss, A), fd_grad(loss, A)) < 1e-8


# ------------------------------------------------------------ broadening


def test_broadening_converges_smoothly_to_the_cutoff() -> None:
    """At a well-separated spectrum the Lorentzian result differs from the
    cutoff one by O(eta^2): 1/x - x/(x^2 + eta^2) = eta^2 / x^3 + ..."""
    A = matrix_with_spectrum((5, 3, 2, 1), 5, 4, seed=3)
    W = random_like(A, seed=4)

    def loss(**kw):
        def f(X):
            U, S, Vh = ps.svd(X, full_matrices=False, **kw)
            return inner(U @ Vh, W) + (U[:, 0] ** 2 * W[:, 0]).sum() + S.prod()

        return f

    sharp = grad(loss(), A)
    assert rel_err(sharp, fd_grad(loss(), A)) < 1e-8
    assert rel_err(grad(loss(broadening=1e-9), A), sharp) < 1e-10
    ratios = [
        rel_err(grad(loss(broadening=eta), A), sharp) / eta**2
        for eta in (1e-2, 1e-3, 1e-4)
    ]
    assert max(ratios) < 1.01 * min(ratios) and min(ratios) > 0
    with ps.defaults(broadening=1e-2):  # as a package default too
        assert rel_err(grad(loss(), A), sharp) == pytest.approx(
            ratios[0] * 1e-4, rel=1e-6
        )


def test_broadening_keeps_the_gradient_bounded_through_a_crossing() -> None:
    """A gauge-dependent loss (the first vector of a close pair) has a gradient
    of size 1/gap with the cutoff; broadened it stays bounded and changes
    continuously as the gap closes."""
    grads = []
    for gap in (1e-4, 1e-6, 1e-8):  # all above the degeneracy tolerance
        A = matrix_with_spectrum((5, 2 + gap, 2, 1), 5, 4, seed=3)
        W = random_like(A, seed=4)

        def loss(X, W=W, **kw):
            U, _, Vh = ps.svd(X, full_matrices=False, **kw)
            return inner(U[:, 1:2] @ Vh[1:2], W)

        sharp = grad(loss, A)
        assert float(sharp.abs().max()) > 0.1 / gap
        grads.append(grad(lambda X: loss(X, broadening=1e-2), A))
        assert float(grads[-1].abs().max()) < 1e2
    # Lipschitz in the gap: the change from 1e-8 scales with the gap
    ratio = rel_err(grads[0], grads[2]) / rel_err(grads[1], grads[2])
    assert 90 < ratio < 110
