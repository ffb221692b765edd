"""Tolerance defaults (tested directly), gap inverses, divided differences and
the settings API."""

from __future__ import annotations

import math

import pytest
import torch
from _spectra import fd_grad, grad, random_like, rel_err, with_singular_values

import pyspectral as ps
from pyspectral import _common as C
from pyspectral._fns import divided_difference

EPS34 = {
    torch.float64: torch.finfo(torch.float64).eps ** 0.75,
    torch.float32: torch.finfo(torch.float32).eps ** 0.75,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_degeneracy_atol_default(dtype) -> None:
    S = torch.tensor([[3.0, 2.0, 1.0], [30.0, 1.0, 0.0]], dtype=dtype)
    tol = C.degeneracy_atol(S, None)
    assert tol.shape == (2, 1, 1)
    expected = torch.tensor([3.0, 30.0], dtype=dtype) * EPS34[dtype]
    assert torch.allclose(tol.flatten(), expected)
    assert torch.equal(
        C.degeneracy_atol(S, 0.5).flatten(), torch.full((2,), 0.5, dtype=dtype)
    )
    assert torch.allclose(C.degeneracy_atol(-S, None).flatten(), expected)  # |lambda|


def test_gauge_atol_default() -> None:
    gU = torch.tensor([[1.0, -4.0]], dtype=torch.float64)
    gV = torch.tensor([[2.0]], dtype=torch.float64)
    assert math.isclose(C.gauge_atol(gU, gV, atol=None), 4 * EPS34[torch.float64])
    assert C.gauge_atol(gU, atol=0.25) == 0.25


def test_hermitian_tol_default() -> None:
    A = torch.tensor([[2.0, 1.0], [1.0 + 1e-13, 3.0]], dtype=torch.float64)
    C.check_hermitian("eigh", A, None)  # 1e-13 < 3 * eps**0.75
    with pytest.raises(ps.InputError, match="not Hermitian"):
        C.check_hermitian("eigh", A + torch.tensor([[0, 0], [1e-9, 0]]), None)


def test_inverses() -> None:
    x = torch.tensor([-2.0, -1e-13, 0.0, 1e-13, 0.5], dtype=torch.float64)
    tol = torch.tensor(1e-12, dtype=torch.float64)
    assert torch.equal(
        C.inv_safe(x, tol), torch.tensor([-0.5, 0, 0, 0, 2.0], dtype=torch.float64)
    )
    L = C.inv_lorentz(x, 1e-3)
    assert L[2] == 0 and torch.allclose(L[[0, 4]], 1 / x[[0, 4]], rtol=1e-5)
    assert L[1] == -L[3]  # signed (odd) and finite


def test_divided_difference_limits_and_accuracy() -> None:
    d = torch.float64
    f, df = torch.exp, torch.exp
    for a, b in [
        (1.0, 1.0),
        (1.0, 1.0 + 1e-9),
        (1.0, 2.0),
        (1e-20, 2e-20),
        (-3.0, 4.0),
    ]:
        a_, b_ = torch.tensor(a, dtype=d), torch.tensor(b, dtype=d)
        got = divided_difference(a_, b_, f(a_), f(b_), df(a_), df(b_))
        exact = math.exp(b) * math.expm1(a - b) / (a - b) if a != b else math.exp(a)
        assert math.isclose(float(got), exact, rel_tol=1e-9), (a, b)
    for a, b in [(1e-8, 1e-8 * (1 + 1e-9)), (1e-8, 2e-8), (1.0, 1.0 + 1e-7)]:
        a_, b_ = torch.tensor(a, dtype=d), torch.tensor(b, dtype=d)
        got = divided_difference(a_, b_, a_.log(), b_.log(), 1 / a_, 1 / b_)
        exact = math.log1p((a - b) / b) / (a - b)
        assert math.isclose(float(got), exact, rel_tol=1e-8), (a, b)


def test_settings_api() -> None:
    before = ps.get_defaults()
    assert before == {
        "degeneracy_atol": None,
        "broadening": None,
        "gauge": "warn",
        "gauge_atol": None,
    }
    with ps.defaults(gauge="ignore", degeneracy_atol=1e-6):
        assert ps.get_defaults()["gauge"] == "ignore"
        assert C.options().degeneracy_atol == 1e-6
        assert C.options(degeneracy_atol=1e-3).degeneracy_atol == 1e-3
    assert ps.get_defaults() == before
    old = ps.set_defaults(broadening=1e-8)
    try:
        assert ps.get_defaults()["broadening"] == 1e-8
    finally:
        ps.set_defaults(**old)
    with pytest.raises(ps.InputError, match="unknown setting"):
        ps.set_defaults(tolerance=1)
    with pytest.raises(ps.InputError, match="gauge must be one of"):
        ps.set_defaults(gauge="loud")
    with pytest.raises(ps.InputError, match="non-negative"):
        ps.svd(torch.eye(2, dtype=torch.float64), degeneracy_atol=-1.0)
    assert ps.get_defaults() == before


def test_scale_invariance_at_near_degenerate_spectrum() -> None:
    A = with_singular_values((5, 2, 2 + 1e-13, 1), 5, 4, seed=1)
    W = random_like(A, seed=2)

    def loss(X):
        U, _, Vh = ps.svd(X)
        return ((U @ Vh) * W).sum()

    # the polar factor is scale invariant, so grad(c A) = grad(A) / c
    assert torch.allclose(grad(loss, 1000 * A) * 1000, grad(loss, A), rtol=1e-8)
    assert torch.allclose(grad(loss, 1e-3 * A) * 1e-3, grad(loss, A), rtol=1e-8)


def test_broadening() -> None:
    A = with_singular_values((5, 3, 2, 1), 5, 4, seed=3)  # well separated
    W = random_like(A, seed=4)

    def loss(**kw):
        def f(X):
            U, S, Vh = ps.svd(X, **kw)
            return ((U @ Vh) * W).sum() + (U[:, 0] ** 2).sum()

        return f

    sharp = grad(loss(), A)
    assert rel_err(grad(loss(broadening=1e-9), A), sharp) < 1e-10
    # a wide Lorentzian smooths the gradient: finite, and different
    wide = grad(loss(broadening=0.5), A)
    assert torch.isfinite(wide).all() and rel_err(wide, sharp) > 1e-3
    # near a degeneracy the broadened gradient stays finite and bounded
    B = with_singular_values((5, 2, 2 + 1e-6, 1), 5, 4, seed=3)
    g = grad(loss(broadening=1e-3, gauge="ignore"), B)
    assert torch.isfinite(g).all() and g.abs().max() < 1e4
    assert rel_err(grad(loss(), A), fd_grad(loss(), A)) < 1e-6
