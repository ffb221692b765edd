"""The tolerance defaults of ``pyspectral/common/defaults.py``, tested directly
and through gradients (scale invariance, per batch element)."""

from __future__ import annotations

import math

import pytest
import torch
from _spectra import (
    fd_grad,
    grad,
    inner,
    matrix_with_spectrum,
    random_like,
    rel_err,
)

import pyspectral as ps
from pyspectral._settings import options
from pyspectral._validation import require_hermitian
from pyspectral.common.defaults import degeneracy_tol, gauge_tol, separated
from pyspectral.pullbacks.svd import svd_pullback

EPS34 = {d: torch.finfo(d).eps ** 0.75 for d in (torch.float32, torch.float64)}


def polar_loss(W, **kw):
    def loss(X):
        U, _, Vh = ps.svd(X, full_matrices=False, **kw)
        return inner(U @ Vh, W)

    return loss


# ------------------------------------------------------- tolerance defaults


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_degeneracy_atol_default_formula(dtype) -> None:
    """max(S) * eps**(3/4) per batch element; max|lambda| for eigenvalues."""
    S = torch.tensor([[3.0, 2.0, 1.0], [30.0, 1.0, 0.0]], dtype=dtype)
    tol = degeneracy_tol(S, None)
    assert tol.shape == (2, 1, 1)
    expected = torch.tensor([3.0, 30.0], dtype=dtype) * EPS34[dtype]
    assert torch.allclose(tol.flatten(), expected, rtol=1e-6)
    lam = torch.tensor([[-3.0, 2.0, 1.0], [-1.0, 0.0, 30.0]], dtype=dtype)
    assert torch.allclose(degeneracy_tol(lam, None).flatten(), expected, rtol=1e-6)
    given = degeneracy_tol(S, 0.5).flatten()
    assert torch.equal(given, torch.full((2,), 0.5, dtype=dtype))
    batch = degeneracy_tol(torch.ones(4, 5, 3, dtype=dtype), None)
    assert batch.shape == (4, 5, 1, 1)


def test_degeneracy_atol_is_per_batch_element() -> None:
    """Element 0 (1e-9 apart, scale 1) is distinct for its own tolerance but
    would be degenerate under element 1's (scale 1000): the reconstruction
    through svd is exact only with the per-element tolerance."""
    A = torch.stack(
        [
            matrix_with_spectrum((5, 2, 2 + 1e-9, 1), 5, 4, seed=1),
            1000 * matrix_with_spectrum((5, 2, 2, 1), 5, 4, seed=2),
        ]
    )
    W = random_like(A, seed=3)

    def loss(**kw):
        def f(X):
            U, S, Vh = ps.svd(X, full_matrices=False, **kw)
            return inner((U[0] * S[0]) @ Vh[0], W[0]) + inner(U[1] @ Vh[1], W[1])

        return f

    exact = fd_grad(loss(), A)
    assert rel_err(grad(loss(), A), exact) < 1e-6
    shared = 1000 * 5 * EPS34[torch.float64]  # element 1's tolerance, for both
    with pytest.warns(ps.GaugeWarning):
        g = grad(loss(degeneracy_atol=shared), A)
    assert rel_err(g[0], exact[0]) > 1e-4


@pytest.mark.parametrize("c", [1e-3, 1e3, 1e6])
def test_scale_invariance_at_a_near_degenerate_spectrum(c) -> None:
    """1e-13 apart is degenerate at every scale: the polar factor is
    scale invariant, so grad(c A) = grad(A) / c to rounding. A fixed absolute
    tolerance (1e-11) changes its decision at c = 1000 (the pair is no cluster
    there); the polar factor's numerator is then rounding noise, which the
    rounding cut (issue 15, item 8) counts as 0, so the gradient stays exact
    (before the cut it lost digits: 1e-5 off)."""
    A = matrix_with_spectrum((5, 2, 2 + 1e-13, 1), 5, 4, seed=1)
    W = random_like(A, seed=2)
    g = grad(polar_loss(W), A)
    assert rel_err(g, fd_grad(polar_loss(W), A)) < 1e-8
    assert rel_err(c * grad(polar_loss(W), c * A), g) < 1e-12
    S = torch.linalg.svdvals(c * A)
    assert separated(S, 1e-11, descending=True) == (c > 1)
    fixed = c * grad(polar_loss(W, degeneracy_atol=1e-11), c * A)
    assert rel_err(fixed, g) < 1e-12


def test_gauge_atol_default_formula() -> None:
    gU = torch.tensor([[1.0, -4.0]], dtype=torch.float64)
    gV = torch.tensor([[2.0]], dtype=torch.float64)
    assert math.isclose(gauge_tol(gU, gV, atol=None), 4 * EPS34[torch.float64])
    assert gauge_tol(gU, atol=0.25) == 0.25


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_gauge_atol_default_threshold(dtype) -> None:
    """A gauge violation just below eps**(3/4) * max|gU| passes silently (an
    unexpected warning fails this suite), one just above it warns."""
    A = matrix_with_spectrum((3, 2, 2, 1), 5, 4, dtype=dtype, seed=4)
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    B = torch.zeros(4, 4, dtype=dtype)
    B[0, 3] = 10  # the pair (0, 3) is no cluster: no violation
    tol = EPS34[torch.float64] * float((U @ B).abs().max())
    for factor in (0.5, 2.0):
        B[1, 2] = factor * tol  # J = U^H gU = B: (J - J^H)_12 = factor * tol
        gU = U @ B
        if factor < 1:
            svd_pullback(U, S, Vh, gU, None, None, options())
        else:
            with pytest.warns(ps.GaugeWarning, match=r"measured .* > gauge_atol"):
                svd_pullback(U, S, Vh, gU, None, None, options())


def test_hermitian_tol_default() -> None:
    A = torch.tensor([[2.0, 1.0], [1.0 + 1e-13, 3.0]], dtype=torch.float64)
    require_hermitian("eigh", A, None)  # 1e-13 < 3 * eps**(3/4) = 5.5e-12
    with pytest.raises(ps.InputError, match="not Hermitian"):
        require_hermitian("eigh", A + torch.tensor([[0, 0], [1e-11, 0]]), None)
    require_hermitian("eigh", A + torch.tensor([[0, 0], [1e-11, 0]]), 1e-10)
