"""Gradients at degenerate, near-degenerate and rank-deficient spectra against
central finite differences (float64/complex128, relative error <= 1e-5).

Through ``svd``/``eigh`` the pullback is exact for losses that see the vectors
through complete clusters (projectors, the polar factor, cluster-constant
weights) and the values through symmetric functions; ``U f(S) Vh`` and
``V f(L) Vh`` at a cluster need ``svd_function``/``matrix_function``, exact at
every spectrum. Finite differences are only taken of smooth losses.
"""

from __future__ import annotations

import math

import pytest
import torch
from _spectra import (
    fd_grad,
    gauge_free_cotangent,
    gauge_free_eigh_cotangent,
    grad,
    hermitian_with_spectrum,
    inner,
    matrix_with_spectrum,
    random_like,
    rel_err,
    unitary,
)

import pyspectral as ps
from pyspectral._settings import options
from pyspectral.pullbacks.eigh import eigh_pullback
from pyspectral.pullbacks.svd import svd_pullback

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

TOL = 1e-5
DTYPES = [torch.float64, torch.complex128]

# name -> (singular values, shape)
SPECTRA = {
    "repeated": ((5, 2, 2, 1, 0.5), (6, 5)),
    "repeated wide": ((5, 2, 2, 1, 0.5), (5, 6)),
    "1e-9 apart": ((5, 2, 2 + 1e-9, 1, 0.5), (6, 5)),
    "1e-13 apart": ((5, 2, 2 + 1e-13, 1, 0.5), (5, 6)),
    "orthogonal": ((1, 1, 1, 1, 1), (5, 5)),
    "all equal tall": ((1, 1, 1, 1, 1), (6, 5)),
    "wide 4x7": ((3, 1, 1, 0.5), (4, 7)),
    "rank deficient": ((3, 2, 2, 0, 0), (6, 5)),
    "rank deficient wide": ((3, 2, 2, 0, 0), (5, 6)),
}


def case(name: str, dtype: torch.dtype, seed: int = 3):
    s, shape = SPECTRA[name]
    A = matrix_with_spectrum(s, *shape, dtype=dtype, seed=seed)
    s = sorted(s, reverse=True)
    cuts = [i + 1 for i in range(len(s) - 1) if s[i] - s[i + 1] > 0.1]
    return A, torch.tensor(s, dtype=torch.float64), cuts, s[-1] > 0


def check(loss, A: torch.Tensor, tol: float = TOL) -> None:
    """pyspectral's gradient against finite differences, relative to
    max(max|exact|, 1e-3): some losses are constant (a projector onto the
    whole space), with a gradient that is 0 up to rounding."""
    exact = fd_grad(loss, A)
    g = grad(loss, A)
    assert torch.isfinite(g).all()
    err = float((g - exact).abs().max()) / max(float(exact.abs().max()), 1e-3)
    assert err <= tol, f"relative error {err:.2e}"


def through_svd(f):
    """``U f(S) Vh`` built from ``ps.svd`` (exact only away from clusters)."""

    def Y(X):
        U, S, Vh = ps.svd(X, full_matrices=False)
        return (U * f(S).to(U.dtype)) @ Vh

    return Y


# ------------------------------------------------------------------ svd


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SPECTRA)
def test_svd_exact_losses(name: str, dtype: torch.dtype) -> None:
    A, s, cuts, full_rank = case(name, dtype)
    m, n = A.shape
    W = random_like(A, seed=4)
    Wm, Wn = random_like(A, seed=5, shape=(m, m)), random_like(A, seed=6, shape=(n, n))
    losses = []
    # projectors onto complete clusters (with zero singular values the last
    # columns of U or V are an arbitrary basis of a larger null space)
    for k in cuts + [len(s)] * full_rank:

        def projectors(X, k=k):
            U, _, Vh = ps.svd(X, full_matrices=False)
            return inner(U[:, :k] @ U[:, :k].mH, Wm) + inner(Vh[:k].mH @ Vh[:k], Wn)

        losses.append(projectors)
    for k in cuts:  # top-k projectors, gap at k

        def topk(X, k=k):
            U, _, Vh = ps.svd(X, k=k)
            return inner(U @ U.mH, Wm) + inner(Vh.mH @ Vh, Wn)

        losses.append(topk)
    # weights constant on every cluster (0 on the zero cluster, whose left and
    # right bases rotate independently)
    c = torch.where(s > 0, 1 + s.round(), 0.0)

    def cluster_weights(X):
        U, _, Vh = ps.svd(X, full_matrices=False)
        return inner((U * c.to(U.dtype)) @ Vh, W)

    def sum_of_squares(X):
        return (ps.svd(X).S ** 2).sum() + (ps.svdvals(X) ** 4).sum()

    losses += [cluster_weights, sum_of_squares]
    if full_rank:

        def polar(X):
            U, _, Vh = ps.svd(X, full_matrices=False)
            return inner(U @ Vh, W)

        def nuclear(X):
            return ps.svdvals(X).sum() + 0.5 * ps.svd(X, full_matrices=False).S.sum()

        losses += [polar, nuclear]
    for loss in losses:
        check(loss, A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_reconstruction_exact_where_the_gap_exceeds_the_tolerance(dtype) -> None:
    """1e-9 apart counts as distinct (above max(S) eps^(3/4) = 9e-12)."""
    A, s, *_ = case("1e-9 apart", dtype)
    assert 1e-9 > float(s.max()) * torch.finfo(torch.float64).eps ** 0.75 > 1e-13
    W = random_like(A, seed=4)
    check(lambda X: inner(through_svd(lambda S: S)(X), W), A)
    check(lambda X: inner(through_svd(torch.exp)(X), W), A)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["repeated", "1e-13 apart", "rank deficient"])
def test_svd_reconstruction_at_a_cluster_needs_svd_function(name, dtype) -> None:
    """The documented limit: at a cluster (1e-13 apart counts as one) the 0/0
    term of U f(S) Vh is not in the cotangents of U, S, Vh; svd_function has
    it. The plain pullback says so: the S-cotangent weights the cluster
    unequally (a GaugeWarning naming svd_function)."""
    A, *_ = case(name, dtype)
    W = random_like(A, seed=4)

    def through(X):
        return inner(through_svd(lambda S: S)(X), W)

    with pytest.warns(ps.GaugeWarning, match="unequally.*svd_function"):
        wrong = grad(through, A)
    assert rel_err(wrong, fd_grad(through, A)) > 1e-4
    check(lambda X: inner(ps.svd_function(X, ("pow", 1)), W), A)


def phase_sensitive(u: torch.Tensor) -> torch.Tensor:
    """A real loss of a complex entry ``u`` whose derivative along the phase
    of its column is ``-|u|^2`` (``Re u`` alone is phase invariant to first
    order where LAPACK returns a real entry)."""
    return (1j * u.detach().conj() * u).real


def identity(S):
    return S


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SPECTRA)
def test_svd_function_exact_at_every_spectrum(name: str, dtype) -> None:
    A, s, cuts, full_rank = case(name, dtype)
    W = random_like(A, seed=4)
    assert all(abs(x - tau) > 0.1 for x in s.tolist() for tau in (0.7, 1.5))
    fs = [
        (identity, torch.ones_like),  # reconstruction
        ("pow", 1),
        ("pow", 2),
        ("pow", 3),
        ("threshold", 0.7),
        ("threshold", 1.5),
        (torch.sinh, torch.cosh),
    ]
    fs += [("truncate", k) for k in cuts + [len(s)]]  # len(s): the identity
    if full_rank:
        fs += ["polar", ("pow", 0.5), ("pow", -1)]
    if s[0] - s[1] > 0.1:
        fs.append("normalize")
    for f in fs:
        check(lambda X, f=f: inner(ps.svd_function(X, f), W), A)
    # the reconstruction is the identity map: its gradient is W itself
    assert (
        rel_err(grad(lambda X: inner(ps.svd_function(X, ("pow", 1)), W), A), W) < 1e-9
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_degenerate_spectra(dtype) -> None:
    A = torch.stack([case(name, dtype)[0] for name in ("repeated", "rank deficient")])
    W = random_like(A, seed=8)
    Wm = random_like(A, seed=9, shape=(2, 6, 6))

    def loss(X):
        U = ps.svd(X, full_matrices=False).U[..., :3]
        Y = ps.svd_function(X, ("threshold", 0.7))
        return inner(U @ U.mH, Wm) + inner(Y, W)

    check(loss, A)


# ------------------------------------------------ what torch.linalg gets wrong


def polar_and_projector(svd, W, Wm=None):
    """``<U Vh, W> + <U_3 U_3^H, Wm>`` through ``svd`` (torch's or ours)."""

    def loss(X):
        U, _, Vh = svd(X, full_matrices=False)
        P = 0 if Wm is None else inner(U[:, :3] @ U[:, :3].mH, Wm)
        return inner(U @ Vh, W) + P

    return loss


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_polar_gradient_is_nan_on_an_orthogonal_matrix(dtype) -> None:
    A, *_ = case("orthogonal", dtype)
    W = random_like(A, seed=4)
    if A.device.type == "cpu":  # LAPACK's exact ties (cuSOLVER's differ: finite)
        g = grad(polar_and_projector(torch.linalg.svd, W), A)
        assert not torch.isfinite(g).all()
    check(polar_and_projector(ps.svd, W), A)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "s, shape", [((5, 2, 2, 1, 0.5), (6, 5)), ((3, 1, 1, 0.5), (4, 7))]
)
def test_torch_is_nan_on_exactly_repeated_diagonal_input(s, shape, dtype) -> None:
    """Exactly equal computed singular values: torch divides 0 by 0."""
    A = torch.zeros(shape, dtype=dtype)
    A.diagonal().copy_(torch.tensor(s))
    W = random_like(A, seed=4)
    Wm = random_like(A, seed=5, shape=(shape[0], shape[0]))
    assert not torch.isfinite(
        grad(polar_and_projector(torch.linalg.svd, W, Wm), A)
    ).all()
    check(polar_and_projector(ps.svd, W, Wm), A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_is_wrong_at_a_repeated_value(dtype) -> None:
    """Random bases: how wrong torch is depends on rounding, so take the worst
    of three matrices (measured: 5 % to 65 %)."""
    errors = []
    for seed in (0, 1, 3):
        A, *_ = case("repeated", dtype, seed=seed)
        W, Wm = random_like(A, seed=4), random_like(A, seed=5, shape=(6, 6))
        exact = fd_grad(polar_and_projector(torch.linalg.svd, W, Wm), A)
        g = grad(polar_and_projector(torch.linalg.svd, W, Wm), A)
        errors.append(rel_err(g, exact) if torch.isfinite(g).all() else math.inf)
        assert rel_err(grad(polar_and_projector(ps.svd, W, Wm), A), exact) < TOL
    if A.device.type == "cpu":  # on LAPACK's bases (cuSOLVER's: other errors)
        assert max(errors) > 1e-2


# ------------------------------------------------------------------ eigh

# name -> (eigenvalues, cuts between complete clusters)
EIGEN = {
    "repeated": ((-1, 0.5, 2, 2, 2, 3), (1, 2, 5)),
    "1e-9 apart": ((-1, 0.5, 2, 2 + 1e-9, 2 - 1e-9, 3), (1, 2, 5)),
    "1e-13 apart": ((-1, 0.5, 2, 2 + 1e-13, 2, 3), (1, 2, 5)),
    "all equal": ((1.5, 1.5, 1.5, 1.5, 1.5, 1.5), ()),
    "two clusters with zero": ((-1, 0, 0, 2, 2, 2), (1, 3)),
}


def eigen_case(name: str, dtype: torch.dtype, shift: float = 0.0, seed: int = 6):
    w, cuts = EIGEN[name]
    A = hermitian_with_spectrum([x + shift for x in w], dtype=dtype, seed=seed)
    return A, torch.tensor(sorted(w), dtype=torch.float64) + shift, cuts


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", EIGEN)
def test_eigh_exact_losses(name: str, dtype: torch.dtype, uplo: str) -> None:
    A, w, cuts = eigen_case(name, dtype)
    W = random_like(A, seed=7)
    losses = []
    for lo, hi in zip((0,) + cuts, cuts + (6,)):  # every complete cluster

        def projector(X, lo=lo, hi=hi):
            V = ps.eigh(X, uplo).eigenvectors[:, lo:hi]
            return inner(V @ V.mH, W)

        losses.append(projector)
    c = w.round()

    def cluster_weights(X):
        V = ps.eigh(X, uplo).eigenvectors
        return inner((V * c.to(V.dtype)) @ V.mH, W)

    def eigenvalues(X):
        lam = ps.eigh(X, uplo).eigenvalues
        return lam.sum() + (lam**2).sum() + (ps.eigvalsh(X, uplo) ** 3).sum()

    def symmetrised(X):  # a Hermitian parametrisation of a general X
        V = ps.eigh(X + X.mH, uplo).eigenvectors
        P = V[:, : cuts[-1]] @ V[:, : cuts[-1]].mH if cuts else V @ V.mH
        return inner(P, W) + (ps.eigvalsh(X + X.mH, uplo) ** 2).sum()

    for loss in losses + [cluster_weights, eigenvalues]:
        check(loss, A)
    check(symmetrised, A / 2)


MATFUNS = [
    "sqrt",
    "invsqrt",
    "log",
    "exp",
    ("pow", 1.5),
    ("pow", -2),
    ("pow", 3),
    (torch.tanh, lambda x: 1 - torch.tanh(x) ** 2),
]


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", EIGEN)
def test_matrix_function_exact_at_every_spectrum(name: str, dtype, uplo) -> None:
    A, *_ = eigen_case(name, dtype, shift=1.6, seed=8)  # positive definite
    W = random_like(A, seed=9)
    for f in MATFUNS:
        # (finite differences perturb single entries: one triangle read)
        check(
            lambda X, f=f: inner(
                ps.matrix_function(X, f, uplo, check_hermitian=False), W
            ),
            A,
        )
    # through a Hermitian parametrisation too
    check(lambda X: inner(ps.matrix_function(X + X.mH, "sqrt", uplo), W), A / 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["two clusters with zero", "all equal"])
def test_matrix_function_at_a_spectrum_with_ties_near_zero(name, dtype) -> None:
    """Unshifted: the zero cluster is computed as eigenvalues of order 1e-16
    (and "all equal" shifted to 0), so the divided differences of functions
    with f(0) != 0 (exp, cosh) are ties on scale 1e-16."""
    A, w, _ = eigen_case(name, dtype, shift=-1.5 if name == "all equal" else 0.0)
    assert float(w.abs().min()) == 0
    W = random_like(A, seed=9)
    for f in ("exp", (torch.cosh, torch.sinh), ("pow", 3), MATFUNS[-1]):
        check(
            lambda X, f=f: inner(ps.matrix_function(X, f, check_hermitian=False), W),
            A,
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_function_through_eigh_at_a_cluster_needs_matrix_function(dtype) -> None:
    """The eigh counterpart of the reconstruction limit: V sqrt(L) V^H built
    from eigh is not exact at a cluster (torch's is not either); pyspectral
    says so (a GaugeWarning naming matrix_function)."""
    A, *_ = eigen_case("repeated", dtype, shift=1.6, seed=8)
    W = random_like(A, seed=9)

    def through(eigh):
        def loss(X):
            w, V = eigh((X + X.mH) / 2)
            return inner((V * w.sqrt().to(V.dtype)) @ V.mH, W)

        return loss

    exact = fd_grad(through(torch.linalg.eigh), A)
    with pytest.warns(ps.GaugeWarning, match="unequally.*matrix_function"):
        wrong = grad(through(ps.eigh), A)
    assert rel_err(wrong, exact) > 1e-4
    g = grad(through(torch.linalg.eigh), A)
    assert not (torch.isfinite(g).all() and rel_err(g, exact) < 1e-4)
    check(lambda X: inner(ps.matrix_function((X + X.mH) / 2, "sqrt"), W), A)


def cluster_projector(eigh, W, lo=2, hi=5):
    """``<V_c V_c^H, W>`` for the eigenvectors ``lo:hi`` of ``(X + X^H)/2``."""

    def loss(X):
        V = eigh((X + X.mH) / 2)[1][:, lo:hi]
        return inner(V @ V.mH, W)

    return loss


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_eigh_projector_is_nan_on_diagonal_input(dtype) -> None:
    A = torch.diag(torch.tensor([-1.0, 0.5, 2, 2, 2, 3])).to(dtype)
    W = random_like(A, seed=2)
    assert not torch.isfinite(grad(cluster_projector(torch.linalg.eigh, W), A)).all()
    check(cluster_projector(ps.eigh, W), A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_eigh_projector_is_wrong_at_a_repeated_value(dtype) -> None:
    """Worst of three random bases (measured: 0.6 % to 40 %, or NaN)."""
    errors = []
    for seed in (0, 1, 6):
        A, *_ = eigen_case("repeated", dtype, seed=seed)
        W = random_like(A, seed=7)
        exact = fd_grad(cluster_projector(torch.linalg.eigh, W), A)
        g = grad(cluster_projector(torch.linalg.eigh, W), A)
        errors.append(rel_err(g, exact) if torch.isfinite(g).all() else math.inf)
        assert rel_err(grad(cluster_projector(ps.eigh, W), A), exact) < TOL
    assert max(errors) > 1e-2


# ------------------------------------------------------------------ gauge


def test_gauge_dependent_svd_loss_warns_and_raises() -> None:
    A, *_ = case("repeated", torch.float64)
    X = A.clone().requires_grad_()

    def loss(**kw):
        return (
            ps.svd(X, full_matrices=False, **kw).U[:, 1].sum()
        )  # one vector of the cluster {1, 2}

    with pytest.warns(ps.GaugeWarning, match=r"^svd: ") as record:
        loss().backward()
    msg = str(record[0].message)
    assert "gauge_atol" in msg and "svd_function" in msg
    assert torch.isfinite(X.grad).all()
    with pytest.raises(ps.GaugeError, match=r"^svd: "):
        loss(gauge="raise").backward()
    with ps.defaults(gauge="raise"), pytest.raises(ps.GaugeError, match=r"^svd: "):
        loss().backward()
    assert ps.get_defaults()["gauge"] == "warn"
    loss(gauge="ignore").backward()  # silent (a warning would be an error here)


@pytest.mark.parametrize("name", ["repeated", "1e-13 apart", "1e-9 apart"])
def test_complex_phase_dependent_loss_warns(name) -> None:
    A, *_ = case(name, torch.complex128)
    X = A.clone().requires_grad_()
    U, _, _ = ps.svd(X, full_matrices=False)
    with pytest.warns(ps.GaugeWarning, match=r"^svd: "):
        phase_sensitive(U[0, 0]).backward()  # depends on the phase of u_0
    U, _, _ = ps.svd(X, gauge="raise", full_matrices=False)
    with pytest.raises(ps.GaugeError, match=r"^svd: "):
        phase_sensitive(U[0, 3]).backward()


def test_topk_and_complement_basis_dependence_warn() -> None:
    A, *_ = case("repeated", torch.float64)
    X = A.clone().requires_grad_()
    U, _, _ = ps.svd(X, k=2)  # cuts the cluster {1, 2}
    with pytest.warns(ps.GaugeWarning, match=r"^svd: "):
        (U @ U.mT).sum().backward()
    # one column of a 3-dimensional complement (a single column would only
    # have a sign to choose: no first-order gauge dependence)
    Y = matrix_with_spectrum((3, 2, 1, 0.5), 7, 4).requires_grad_()
    U, _, _ = ps.svd(Y, full_matrices=True)
    with pytest.warns(ps.GaugeWarning, match=r"^svd: "):
        U[:, 5].sum().backward()


def test_gauge_dependent_eigh_loss_warns_and_raises() -> None:
    A, *_ = eigen_case("repeated", torch.float64)
    X = A.clone().requires_grad_()
    with pytest.warns(ps.GaugeWarning, match=r"^eigh: "):
        ps.eigh(X).eigenvectors[:, 2].sum().backward()
    with pytest.raises(ps.GaugeError, match=r"^eigh: "):
        ps.eigh(X, gauge="raise").eigenvectors[:, 3].sum().backward()
    with ps.defaults(gauge="raise"), pytest.raises(ps.GaugeError, match=r"^eigh: "):
        ps.eigh(X).eigenvectors[:, 4].sum().backward()
    ps.eigh(X, gauge="ignore").eigenvectors[:, 4].sum().backward()
    Z = eigen_case("repeated", torch.complex128)[0].requires_grad_()
    with pytest.warns(ps.GaugeWarning, match=r"^eigh: "):
        phase_sensitive(ps.eigh(Z).eigenvectors[0, 0]).backward()


def test_truncation_inside_a_cluster_warns() -> None:
    A, *_ = case("repeated", torch.float64)
    with pytest.warns(ps.GaugeWarning, match=r"^svd_function: \('truncate', 2\)"):
        ps.svd_function(A, ("truncate", 2))
    with pytest.raises(ps.GaugeError, match="truncate"):
        ps.svd_function(A, ("truncate", 2), gauge="raise")
    with ps.defaults(gauge="raise"), pytest.raises(ps.GaugeError):
        ps.svd_function(A, ("truncate", 2))
    ps.svd_function(A, ("truncate", 3))  # at the gap: silent


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_pullback_with_gauge_free_cotangent_is_gauge_covariant(dtype) -> None:
    """Rotating the basis inside each cluster (U -> UQ, V -> VQ) and the
    cotangents with it leaves a gauge-free pullback unchanged, silently; a
    random cotangent warns and its pullback changes."""
    A, *_ = case("repeated", dtype)
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    Q = torch.eye(5, dtype=dtype)
    Q[1:3, 1:3] = unitary(2, dtype, torch.Generator().manual_seed(1))
    if dtype.is_complex:  # and a phase on every column
        Q = Q * torch.exp(1j * torch.arange(5, dtype=torch.float64))
    gU, gS, gVh = gauge_free_cotangent(U, S, Vh, seed=2)
    opts = options()
    gA = svd_pullback(U, S, Vh, gU, gS, gVh, opts)
    gA_rot = svd_pullback(U @ Q, S, Q.mH @ Vh, gU @ Q, gS, Q.mH @ gVh, opts)
    assert rel_err(gA_rot, gA) < 1e-10
    # a random cotangent warns, and what is kept of it is covariant too
    gU = random_like(U, seed=3)
    with pytest.warns(ps.GaugeWarning, match=r"^svd: "):
        gA = svd_pullback(U, S, Vh, gU, None, None, opts)
    with pytest.warns(ps.GaugeWarning):
        gA_rot = svd_pullback(U @ Q, S, Q.mH @ Vh, gU @ Q, None, None, opts)
    assert rel_err(gA_rot, gA) < 1e-10


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_pullback_with_gauge_free_cotangent_is_gauge_covariant(dtype) -> None:
    A, *_ = eigen_case("repeated", dtype)
    w, V = torch.linalg.eigh(A)
    Q = torch.eye(6, dtype=dtype)
    Q[2:5, 2:5] = unitary(3, dtype, torch.Generator().manual_seed(1))
    gw, gV = gauge_free_eigh_cotangent(w, V, seed=2)
    opts = options()
    gA = eigh_pullback(w, V, gw, gV, "L", opts)
    assert rel_err(eigh_pullback(w, V @ Q, gw, gV @ Q, "L", opts), gA) < 1e-10
    gV = random_like(V, seed=3)
    with pytest.warns(ps.GaugeWarning, match=r"^eigh: "):
        gA = eigh_pullback(w, V, None, gV, "L", opts)
    with pytest.warns(ps.GaugeWarning):
        assert rel_err(eigh_pullback(w, V @ Q, None, gV @ Q, "L", opts), gA) < 1e-10
