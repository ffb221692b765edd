"""Gaps just above the degeneracy tolerance (issue 15, item 8).

For a loss that does not depend on the rotation of a near-degenerate pair (a
polar factor, a projector onto a subspace holding the pair, a smooth function
of either) the numerator (Ja + Ka)_ij of the svd pullback, Ka_ij of eigh's, is
0 in exact arithmetic; before, its rounding noise divided by a gap of 1e-11
came out as the gradient (4e-5 relative). A numerator within its own rounding
error of 0 now counts as 0 (``common.safemethods.cut_rounding``). The sweeps
compare with the composites ``svd_function`` / ``matrix_function``, exact at
every spectrum; losses whose numerator is small but genuine (a tiny
basis-dependent term) keep their gradient.
"""

from __future__ import annotations

import pytest
import torch
from _julia import needs_julia
from _spectra import grad, inner, matrix_with_spectrum, random_like, rel_err, unitary

import pyspectral as ps
from pyspectral.common.safemethods import column_rounding, cut_rounding, pair_rounding

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

GAPS = [10.0 ** (-14 + 0.5 * i) for i in range(17)]  # 1e-14 ... 1e-6
BOUND = 1e-8  # relative, over the whole sweep (before: 4e-5)
DTYPES = [torch.float64, torch.complex128]


def pair_matrix(gap, m=6, n=4, dtype=torch.float64, seed=0):
    """``m x n`` with singular values ``(3, 2 + gap, 2, 1)``."""
    return matrix_with_spectrum((3.0, 2.0 + gap, 2.0, 1.0), m, n, dtype, seed)


def pair_hermitian(gap, dtype=torch.float64, seed=0):
    """Hermitian with eigenvalues ``(1, 2, 2 + gap, 3)``."""
    gen = torch.Generator().manual_seed(seed)
    V = unitary(4, dtype, gen)
    A = (V * torch.tensor([1.0, 2.0, 2.0 + gap, 3.0], dtype=dtype)) @ V.mH
    return (A + A.mH) / 2


def step(lo: float, hi: float):
    """The user pair ``(f, f')`` of the indicator of ``(lo, hi)``: through
    ``matrix_function`` / ``svd_function``, the spectral projector (or partial
    isometry) onto the values in that interval, with its exact pullback."""
    return (
        lambda x: ((x > lo) & (x < hi)).to(x.dtype),
        lambda x: torch.zeros_like(x),
    )


def worst(make, loss, exact, dtype=torch.float64):
    """The largest relative gradient error of ``loss`` against ``exact`` over
    the gap sweep."""
    return max(
        rel_err(grad(loss, X), grad(exact, X))
        for X in (make(gap, dtype=dtype) for gap in GAPS)
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (4, 4)])
def test_polar_factor_through_svd(dtype, shape):
    """The issue's case: <W, U Vh> against svd_function(A, "polar")."""
    W = random_like(torch.zeros(shape, dtype=dtype), seed=1)

    def make(gap, dtype):
        return pair_matrix(gap, *shape, dtype=dtype)

    def loss(X):
        U, _, Vh = ps.svd(X, full_matrices=False)
        return inner(U @ Vh, W)

    assert worst(make, loss, lambda X: inner(ps.svd_function(X, "polar"), W), dtype) < (
        BOUND
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_gauge_invariant_losses_through_svd(dtype):
    """A smooth function of the polar factor, and the projector onto the top
    three left singular vectors (the pair inside), against the composites."""
    W = random_like(torch.zeros(6, 6, dtype=dtype), seed=2)

    def smooth(X):
        U, _, Vh = ps.svd(X, full_matrices=False)
        return (U @ Vh).abs().pow(2).sin().sum()

    def projector(X):
        U = ps.svd(X, full_matrices=False).U[:, :3]
        return inner(U @ U.mH, W)

    cases = [
        (smooth, lambda X: ps.svd_function(X, "polar").abs().pow(2).sin().sum()),
        (projector, lambda X: inner(ps.matrix_function(X @ X.mH, step(2.5, 10)), W)),
    ]
    for loss, exact in cases:
        assert worst(pair_matrix, loss, exact, dtype) < BOUND


@pytest.mark.parametrize("dtype", DTYPES)
def test_cluster_projector_through_eigh(dtype):
    """The issue's eigh case: the projector onto the pair's eigenvectors, and
    a smooth function of it, against matrix_function of the indicator."""
    W = random_like(torch.zeros(4, 4, dtype=dtype), seed=3)

    def projector(X):
        V = ps.eigh(X).eigenvectors[:, 1:3]
        return inner(V @ V.mH, W)

    def smooth(X):
        V = ps.eigh(X).eigenvectors[:, 1:3]
        return (V @ V.mH).real.exp().sum()

    P = lambda X: ps.matrix_function(X, step(1.5, 2.5))  # noqa: E731
    for loss, exact in [
        (projector, lambda X: inner(P(X), W)),
        (smooth, lambda X: P(X).real.exp().sum()),
    ]:
        assert worst(pair_hermitian, loss, exact, dtype) < BOUND


@pytest.mark.parametrize("method", ["full", "randomized"])
def test_top_k_polar_factor(method):
    """The truncated pullback uses the same middle matrix (svd_pullback on the
    certified block): U_3 Vh_3 with the pair inside the kept three, against
    svd_function of the indicator of the top three (a real complement: the
    randomized path solves for the coupling to it)."""
    rest = torch.linspace(0.5, 0.05, 12).tolist()
    W = random_like(torch.zeros(30, 16, dtype=torch.float64), seed=4)

    def make(gap, dtype):
        s = [3.0, 2.0 + gap, 2.0, 1.0, *rest]
        return matrix_with_spectrum(s, 30, 16, dtype, seed=5)

    # oversample configures the iteration; method="full" does not iterate
    extra = {"oversample": 3} if method == "randomized" else {}

    def loss(X):
        U, _, Vh = ps.svd(X, k=3, method=method, **extra)
        return inner(U @ Vh, W)

    exact = lambda X: inner(ps.svd_function(X, step(1.5, 10)), W)  # noqa: E731
    assert worst(make, loss, exact) < BOUND


def test_small_genuine_numerators_keep_their_gradient():
    """A basis-dependent term with a tiny weight (its numerator 1e-12, a
    hundred times its rounding error) on top of a gauge-invariant loss: its
    gradient, 1e-12 / gap, is kept (zeroed, the error would be all of it).
    Against the two parts differentiated apart (linearity), the invariant one
    through svd_function."""
    W, W2 = (
        random_like(torch.zeros(6, 4, dtype=torch.float64), seed=s) for s in (6, 7)
    )
    tau = 1e-12
    for gap in (1e-11, 1e-10, 1e-9):
        A = pair_matrix(gap)

        def basis(X):  # u_2 v_2^H: invariant under signs, not under rotations
            U, _, Vh = ps.svd(X, full_matrices=False)
            return tau * inner(U[:, 1:2] @ Vh[1:2], W2)

        def total(X):
            U, _, Vh = ps.svd(X, full_matrices=False)
            return inner(U @ Vh, W) + tau * inner(U[:, 1:2] @ Vh[1:2], W2)

        g_basis = grad(basis, A)
        g_exact = grad(lambda X: inner(ps.svd_function(X, "polar"), W), A)
        err = (grad(total, A) - g_exact - g_basis).abs().max()
        # far above the rounding level of the total (~1e-15 relative)
        assert g_basis.abs().max() > 1e-5 * g_exact.abs().max()
        assert err < 1e-2 * g_basis.abs().max()


def test_basis_dependent_losses_match_torch():
    """At a gap above the tolerance a basis-dependent loss is a function of A
    (through the computed basis): O(1) numerators are never cut, and the
    gradient agrees with torch.linalg.svd's and eigh's to their own rounding
    (~ eps * s / gap)."""
    W = random_like(torch.zeros(6, 4, dtype=torch.float64), seed=8)
    H = random_like(torch.zeros(4, 4, dtype=torch.float64), seed=9)
    for gap in (1e-10, 1e-8, 1e-6):
        A, B = pair_matrix(gap), pair_hermitian(gap)

        def svd_loss(X, svd):
            U, _, Vh = svd(X)
            return inner(U[:, 1:2] @ Vh[1:2], W)

        def eigh_loss(X, eigh):
            V = eigh(X)[1][:, 2:3]
            return inner(V @ V.mH, H)

        g = grad(lambda X: svd_loss(X, ps.svd), A)
        g0 = grad(lambda X: svd_loss(X, torch.linalg.svd), A)
        assert rel_err(g, g0) < 1e-3
        # torch's gradient is w.r.t. both triangles; pyspectral's w.r.t. the
        # lower one it reads: 2 tril(G, -1) + diag(G)
        g = grad(lambda X: eigh_loss(X, ps.eigh), B)
        G = grad(lambda X: eigh_loss(X, torch.linalg.eigh), B)
        assert rel_err(g, 2 * torch.tril(G, -1) + torch.diag(G.diagonal())) < 1e-3


@needs_julia
@pytest.mark.parametrize("dtype", DTYPES)
def test_polar_factor_and_projector_through_julia(dtype):
    """The same rule in julia/PySpectral (svd_middle, eigh_pullback!)."""
    W = random_like(torch.zeros(6, 4, dtype=dtype), seed=1)
    Wh = random_like(torch.zeros(4, 4, dtype=dtype), seed=3)

    def polar(X):
        U, _, Vh = ps.svd(X, backend="julia", full_matrices=False)
        return inner(U @ Vh, W)

    def projector(X):
        V = ps.eigh(X, backend="julia").eigenvectors[:, 1:3]
        return inner(V @ V.mH, Wh)

    exact = lambda X: inner(ps.svd_function(X, "polar"), W)  # noqa: E731
    assert worst(pair_matrix, polar, exact, dtype) < BOUND
    P = lambda X: inner(ps.matrix_function(X, step(1.5, 2.5)), Wh)  # noqa: E731
    assert worst(pair_hermitian, projector, P, dtype) < BOUND


def test_cut_rounding():
    """Entries at or below ``r_ij = c_i + c_j`` become 0, NaN stays; in place for a
    plain pullback; otherwise the value is cut and the derivative kept."""
    X = torch.tensor(
        [[0.0, 1e-15, 3.0], [-1e-15, float("nan"), 2e-15], [1.0, 0.0, 4.0]]
    )
    r = pair_rounding(torch.tensor([1e-15, 0.0, 0.5e-15]))
    Y = cut_rounding(X.clone(), r, inplace=True)
    assert Y[0, 1] == 0 and Y[1, 0] == 0 and Y[1, 2] == 2e-15 and Y[0, 2] == 3.0
    assert torch.isnan(Y[1, 1])
    Z = X.clone().requires_grad_()
    out = cut_rounding(Z, r, inplace=False)
    assert out[0, 1] == 0
    (g,) = torch.autograd.grad(out[0, 1], Z)
    assert g[0, 1] == 1.0  # the derivative of the cut entry is kept


def test_column_rounding_bounds_the_error_of_the_skew_part():
    """``c_i + c_j`` bounds the computed ``(J - J^H)_ij`` error (against the
    same product in higher precision), for many random cotangents."""
    for seed in range(20):
        Q = torch.linalg.qr(random_like(torch.zeros(50, 8), seed=seed))[0]
        G = random_like(torch.zeros(50, 8), seed=100 + seed) * 10.0 ** (seed % 5)
        J = Q.mT @ G
        J64 = Q.to(torch.float64).mT @ G.to(torch.float64)
        err = ((J - J.mT).to(torch.float64) - (J64 - J64.mT)).abs()
        c = column_rounding(G, 50).to(torch.float64)
        assert bool((err <= c.unsqueeze(-1) + c.unsqueeze(-2)).all())


# Forward mode at a near-degenerate gap (issue 36, items 3 and 7): the
# pushforwards' tangents are each exact, but an invariant output cancels the
# pair's rotation |tangent| / gap after them, in the caller's graph: measured
# and warned, naming reverse mode and the composite, which are exact there.
FORWARD_GAPS = [1e-11, 1e-9]


def _jvp(f, X, T):
    return torch.func.jvp(f, (X,), (T,))[1]


@pytest.mark.parametrize("backend", ["torch", pytest.param("julia", marks=needs_julia)])
@pytest.mark.parametrize("gap", FORWARD_GAPS)
def test_forward_polar_factor_at_a_near_degenerate_gap_warns(gap, backend):
    A = pair_matrix(gap)
    T = random_like(A, seed=3)

    def polar(X):
        U, _, Vh = ps.svd(X, backend=backend, full_matrices=False)
        return U @ Vh

    if backend == "julia":  # torch.func runs the native backend only
        import torch.autograd.forward_ad as fwAD

        with fwAD.dual_level(), pytest.warns(ps.GaugeWarning, match="near-degenerate"):
            U, _, Vh = ps.svd(
                fwAD.make_dual(A, T), backend=backend, full_matrices=False
            )
            assert fwAD.unpack_dual(U @ Vh).tangent is not None
    else:
        with pytest.warns(ps.GaugeWarning, match="forward mode at a near-degenerate"):
            _jvp(polar, A, T)
    # the routes the warning names: the composite in forward mode, reverse mode
    exact = _jvp(lambda X: ps.svd_function(X, "polar"), A, T)
    W = random_like(A, seed=4)
    g = grad(lambda X: inner(polar(X), W), A)
    assert abs(float(inner(T, g)) - float(inner(exact, W))) < 1e-10 * float(
        exact.norm() * W.norm()
    )


@pytest.mark.parametrize("gap", FORWARD_GAPS)
def test_forward_projector_at_a_near_degenerate_gap_warns(gap):
    A = pair_hermitian(gap)
    T = hermitian_tangent(A)

    def projector(X):
        _, V = ps.eigh(X)
        return V[:, 1:3] @ V[:, 1:3].mH

    with pytest.warns(ps.GaugeWarning, match="forward mode at a near-degenerate"):
        _jvp(projector, A, T)
    lo, hi = step(1.5, 2.5)
    exact = _jvp(lambda X: ps.matrix_function(X, (lo, hi)), A, T)
    W = hermitian_tangent(A, seed=6)
    g = grad(lambda X: inner(projector(X), W), A)
    assert abs(float(inner(T, g)) - float(inner(exact, W))) < 1e-10 * float(
        exact.norm() * W.norm()
    )


def test_forward_mode_at_separated_values_is_quiet():
    """Gaps of 1e-3 and more: no pair in the window, no warning (the suite
    turns a GaugeWarning into an error)."""
    A, H = pair_matrix(1e-3), pair_hermitian(1e-3)
    _jvp(
        lambda X: (lambda U, S, Vh: U @ Vh)(*ps.svd(X, full_matrices=False)),
        A,
        random_like(A, seed=3),
    )
    _jvp(lambda X: ps.eigh(X)[1], H, hermitian_tangent(H))


def test_forward_near_pair_ignored_under_gauge_ignore():
    A = pair_matrix(1e-11)
    with ps.defaults(gauge="ignore"):
        _jvp(lambda X: ps.svd(X, full_matrices=False)[0], A, random_like(A, seed=3))


def hermitian_tangent(A, seed=5):
    T = random_like(A, seed=seed)
    return (T + T.mH) / 2
