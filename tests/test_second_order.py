"""Second derivatives: ``svd_function`` / ``matrix_function`` are exact at every
spectrum (their pullback is an operation whose derivative is the second-order
Daleckii-Krein formula); ``svd`` / ``eigh`` warn, or raise, when a second
derivative at a degenerate spectrum needs terms that are not in the cotangents,
and stay silent where it is exact.

Hessian-vector products, by double backward (reverse over reverse) and by
``jvp`` of ``torch.func.grad`` (forward over reverse, as ``torch.func.hessian``),
against central finite differences of the exact gradient; the second divided
differences against a 60-digit ``mpmath`` evaluation."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _spectra import (
    central4,
    fd_grad,
    fd_jacobian,
    grad,
    hermitian_with_spectrum,
    inner,
    matrix_with_spectrum,
    randn,
    random_like,
    rel_err,
)
from torch.func import hessian, jacrev, jvp, vmap

import pyspectral as ps
from pyspectral._settings import options
from pyspectral.eigh import _matfun
from pyspectral.pullbacks.matfun import matrix_function_second

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

DTYPES = [torch.float64, torch.complex128]
TOL = 1e-7  # relative, against a fourth-order stencil with h = 1e-4


def fd_hvp(loss, A: torch.Tensor, D: torch.Tensor, h: float = 1e-4):
    """``d/dt grad(loss)(A + t D)`` at 0 by the fourth-order central stencil."""

    return central4(lambda t: grad(loss, A + t * D), h)


def reverse_hvp(loss, A: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """Double backward: the gradient of ``<grad(loss), D>``."""
    X = A.detach().clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
    (Hd,) = torch.autograd.grad(inner(g, D), X)
    return Hd


def forward_hvp(loss, A: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """Forward over reverse, as torch.func.hessian does it."""
    return jvp(torch.func.grad(loss), (A,), (D,))[1]


def reverse_over_forward_hvp(loss, A: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """The gradient of the directional derivative ``jvp(loss)(A; D)``, as
    ``jacrev(jacfwd(loss))`` computes it."""
    return torch.func.grad(lambda X: jvp(loss, (X,), (D,))[1])(A)


def forward_over_forward(loss, A: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """``<D, H D>`` by two nested jvps, as ``jacfwd(jacfwd(loss))`` does."""
    return jvp(lambda X: jvp(loss, (X,), (D,))[1], (A,), (D,))[1]


def check_hvp(
    loss, A: torch.Tensor, seed: int = 5, tol: float = TOL, twice_forward: bool = True
) -> None:
    """The Hessian-vector product by every composition of the two modes
    (``twice_forward=False``: not forward over forward, which ``svd``/``eigh``
    do not support; see docs/limits.md)."""
    D = random_like(A, seed=seed)
    expected = fd_hvp(loss, A, D)
    assert bool(expected.abs().max() > 1e-3)  # the test sees a second derivative
    for hvp in (reverse_hvp, forward_hvp, reverse_over_forward_hvp):
        got = hvp(loss, A, D)
        assert torch.isfinite(got).all()
        assert rel_err(got, expected) < tol, hvp.__name__
    if not twice_forward:
        return
    dd = forward_over_forward(loss, A, D)
    ref = inner(expected, D)
    assert abs(float(dd) - float(ref)) <= tol * max(1.0, abs(float(ref)))


# ------------------------------------------------------- matrix_function

MATFUN_SPECTRA = {
    "generic": (0.5, 1.0, 2.0, 3.0, 4.0),
    "pairs": (0.25, 1.0, 1.0, 4.0, 4.0),  # the issue's spectrum
    "triple": (0.5, 0.5, 0.5, 2.0, 3.0),
    "near": (0.5, 1.0, 1.0 + 1e-9, 2.0, 2.0),
    "close": (0.5, 1.0, 1.0 + 1e-5, 2.0, 3.0),
}
MATFUNS = {
    "sqrt": "sqrt",
    "invsqrt": "invsqrt",
    "log": "log",
    "exp": "exp",
    "pow3": ("pow", 3),
    "pow1.5": ("pow", 1.5),
    "pair": (torch.sinh, torch.cosh),  # f'' by forward-mode AD of f_prime
    "triple": (torch.sin, torch.cos, lambda x: -torch.sin(x)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spectrum", MATFUN_SPECTRA)
@pytest.mark.parametrize("f", MATFUNS)
def test_matrix_function_hvp(dtype, spectrum, f):
    H = hermitian_with_spectrum(MATFUN_SPECTRA[spectrum], dtype=dtype, seed=1)
    W = random_like(H, seed=2)
    for uplo in "LU":
        # (perturbs single entries: one triangle read)
        check_hvp(
            lambda X, u=uplo: inner(
                ps.matrix_function(X, MATFUNS[f], u, check_hermitian=False), W
            ),
            H,
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_issue_trace_sqrt_at_repeated_eigenvalues(dtype):
    """The issue's case (14 % off before): tr(matrix_function(H, "sqrt")) at
    w = (.25, 1, 1, 4, 4), and the same loss's Hessian by torch.func.hessian,
    jacrev(jacrev) and the finite-difference Jacobian of the gradient."""
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), dtype=dtype, seed=3)

    def loss(X):
        return (
            ps.matrix_function(X, "sqrt", check_hermitian=False).diagonal().real.sum()
        )

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact: no warning
        check_hvp(loss, H)
    if dtype == torch.float64:
        expected = fd_jacobian(lambda X: grad(loss, X), H)
        assert rel_err(hessian(loss)(H), expected) < TOL
        assert rel_err(jacrev(jacrev(loss))(H), expected) < TOL


# ---------------------------------------------------------- svd_function

SVD_SPECTRA = {
    "generic": (5.0, 3.0, 2.0, 1.0, 0.5),
    "pair": (5.0, 2.0, 2.0, 1.0, 0.5),  # the issue's spectrum
    "all equal": (2.0, 2.0, 2.0, 2.0, 2.0),
    "near": (5.0, 2.0, 2.0 + 1e-9, 1.0, 0.5),
}
SHAPES = [(5, 5), (7, 5), (5, 8)]


def _tanh_second(x):
    return -2 * torch.tanh(x) * (1 - torch.tanh(x) ** 2)


SVD_FUNCTIONS = {
    "pow2": ("pow", 2),
    "pow3": ("pow", 3),
    "polar": "polar",
    "truncate": ("truncate", 3),
    "threshold": ("threshold", 1.5),
    "pair": (torch.sinh, torch.cosh),
    "triple": (torch.tanh, lambda x: 1 - torch.tanh(x) ** 2, _tanh_second),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spectrum", SVD_SPECTRA)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("f", SVD_FUNCTIONS)
def test_svd_function_hvp(dtype, spectrum, shape, f):
    s = SVD_SPECTRA[spectrum]
    if f == "truncate" and s[2] == s[3]:
        pytest.skip("('truncate', 3) inside a cluster is basis dependent (warns)")
    A = matrix_with_spectrum(s, *shape, dtype=dtype, seed=4)
    W = random_like(A, seed=5)
    check_hvp(lambda X: inner(ps.svd_function(X, SVD_FUNCTIONS[f]), W), A)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("f", ["pow3", "pair", "triple"])
def test_svd_function_hvp_at_zero_singular_values(dtype, shape, f):
    """Exact at zero singular values (with the complement of rectangular input,
    and complex phases) where f extends to an odd C^2 function."""
    A = matrix_with_spectrum((3.0, 2.0, 2.0, 0.0, 0.0), *shape, dtype=dtype, seed=6)
    W = random_like(A, seed=7)
    check_hvp(lambda X: inner(ps.svd_function(X, SVD_FUNCTIONS[f]), W), A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_issue_pow2_at_repeated_singular_values(dtype):
    """The issue's case (0.9 % off before): <W, svd_function(A, ("pow", 2))> at
    s = (5, 2, 2, 1, .5), and its Hessian by torch.func.hessian."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0, 0.5), 5, 5, dtype=dtype, seed=8)
    W = random_like(A, seed=9)

    def loss(X):
        return inner(ps.svd_function(X, ("pow", 2)), W)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_hvp(loss, A)
    if dtype == torch.float64:
        expected = fd_jacobian(lambda X: grad(loss, X), A)
        assert rel_err(hessian(loss)(A), expected) < TOL


# ------------------------------------------------- svd / eigh double backward


def _svd_cube(X):
    return (ps.svd(X).S ** 3).sum()


def _eigh_cube(X):
    return (ps.eigh(X).eigenvalues ** 3).sum()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hvp", [reverse_hvp, forward_hvp])
def test_issue_spectral_cubes_warn_and_raise_at_a_cluster(dtype, hvp):
    """sum(S**3) through svd at s = (5, 2, 2, 1, .5) and sum(w**3) through eigh
    at repeated w: the exact second derivative needs the divided difference of
    the S-cotangent over the cluster, which the pullback does not see. Both
    modes warn once (naming the remedy) and raise under gauge="raise"; the
    svd_function / matrix_function formulations of the same losses are exact."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0, 0.5), 5, 5, dtype=dtype, seed=10)
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), dtype=dtype, seed=10)
    for X, loss, exact, name in [
        (A, _svd_cube, lambda Y: inner(Y, ps.svd_function(Y, ("pow", 2))), "svd"),
        (
            H,
            _eigh_cube,
            lambda Y: (
                ps.matrix_function(Y, ("pow", 3), check_hermitian=False)
                .diagonal()
                .real.sum()
            ),
            "matrix_function",
        ),
    ]:
        D = random_like(X, seed=11)
        with pytest.warns(ps.GaugeWarning, match=name) as record:
            hvp(loss, X, D)
        assert len(record) == 1 and "second derivative" in str(record[0].message)
        with ps.defaults(gauge="raise"), pytest.raises(ps.GaugeError):
            hvp(loss, X, D)
        assert rel_err(hvp(exact, X, D), fd_hvp(loss, X, D)) < TOL
        assert rel_err(fd_hvp(exact, X, D), fd_hvp(loss, X, D)) < TOL  # same loss


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_eigh_second_order_exact_losses_stay_silent(dtype):
    """Where the cluster rule is exact at second order there is no warning:
    losses through sum(S) alone (sum(S), sum(S)**2) at a cluster, and every
    loss at a generic spectrum."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0, 0.5), 5, 5, dtype=dtype, seed=12)
    G = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0, 0.5), 6, 5, dtype=dtype, seed=12)
    H = hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0, 4.0), dtype=dtype, seed=12)
    W = random_like(G, seed=13)
    cases = [
        (A, lambda X: ps.svd(X, full_matrices=False).S.sum()),
        (A, lambda X: ps.svd(X).S.sum() ** 2),
        (G, _svd_cube),
        (
            G,
            lambda X: inner(
                (lambda U, S, Vh: U @ Vh)(*ps.svd(X, full_matrices=False)), W
            ),
        ),
        (H, _eigh_cube),
        (H, lambda X: (lambda w, V: inner(V[:, 3:] @ V[:, 3:].mH, W[:5]))(*ps.eigh(X))),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        for X, loss in cases:
            check_hvp(loss, X, twice_forward=False)


@pytest.mark.parametrize("hvp", [reverse_hvp, forward_hvp])
def test_svd_eigh_second_order_through_vectors_at_a_cluster_warns(hvp):
    """The polar factor and a complete-cluster projector are exact through svd
    / eigh at first order; their second derivative at a cluster needs the
    rotation inside it (degenerate perturbation theory): it warns."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0, 0.5), 5, 5, seed=14)
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), seed=14)
    W = random_like(A, seed=15)
    for X, loss in [
        (
            A,
            lambda X: inner(
                (lambda U, S, Vh: U @ Vh)(*ps.svd(X, full_matrices=False)), W
            ),
        ),
        (H, lambda X: (lambda w, V: inner(V[:, 1:3] @ V[:, 1:3].mH, W))(*ps.eigh(X))),
    ]:
        D = random_like(X, seed=16)
        with pytest.warns(ps.GaugeWarning, match="rotation inside it") as record:
            hvp(loss, X, D)
        assert len(record) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error", ps.GaugeWarning)
            grad(loss, X)  # first order: exact, silent


def test_svd_second_order_at_a_zero_singular_value_with_a_complement():
    """sum(S**2) = ||A||_F**2 through svd at a zero singular value of a tall
    matrix: the zero meets the complement (its S-cotangent's change is not 0
    there): warns. sum(S**3), whose change vanishes at 0, is exact."""
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0, 0.0), 7, 5, seed=17)
    D = random_like(A, seed=18)
    with pytest.warns(ps.GaugeWarning, match="second derivative"):
        reverse_hvp(lambda X: (ps.svd(X).S ** 2).sum(), A, D)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        got = reverse_hvp(_svd_cube, A, D)
    # |s|**3 is C^2 but not C^3 at 0: the stencil converges like h there
    assert rel_err(got, fd_hvp(_svd_cube, A, D, h=1e-6)) < 1e-5


def test_gauge_ignore_is_silent():
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0, 0.5), 5, 5, seed=19)
    with ps.defaults(gauge="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        reverse_hvp(_svd_cube, A, random_like(A, seed=20))
        forward_hvp(_svd_cube, A, random_like(A, seed=20))


# ------------------------------------------------------- torch machinery


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradgradcheck_at_generic_spectra(dtype):
    A = matrix_with_spectrum((3.0, 1.0), 3, 2, dtype=dtype, seed=21)
    H = hermitian_with_spectrum((0.5, 1.0, 2.0), dtype=dtype, seed=21)
    for f, X in [
        (lambda X: ps.svd_function(X, ("pow", 2)), A),
        (lambda X: ps.svd_function(X, "polar"), A.mT.conj()),
        (lambda X: ps.svd_function(X, (torch.sinh, torch.cosh)), A),
        (lambda X: ps.matrix_function(X, "sqrt", check_hermitian=False), H),
        (lambda X: ps.matrix_function(X, "exp", "U", check_hermitian=False), H),
    ]:
        assert torch.autograd.gradgradcheck(
            f, (X.detach().requires_grad_(),), check_fwd_over_rev=True
        )


def test_hessian_matches_finite_differences_at_degenerate_spectra():
    A = matrix_with_spectrum((3.0, 1.0, 1.0), 4, 3, seed=22)
    H = hermitian_with_spectrum((0.5, 2.0, 2.0), seed=22)
    W = random_like(A, seed=23)
    for loss, X in [
        (lambda X: inner(ps.svd_function(X, ("pow", 3)), W), A),
        (
            lambda X: inner(ps.matrix_function(X, "log", check_hermitian=False), W[:3]),
            H,
        ),
    ]:
        expected = fd_jacobian(lambda Y, loss=loss: grad(loss, Y), X)
        for Hess in (
            hessian(loss)(X),
            jacrev(jacrev(loss))(X),
            torch.autograd.functional.hessian(loss, X),
        ):
            assert rel_err(Hess, expected) < TOL


def test_batched_and_vmapped_hvp():
    B = torch.stack(
        [matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 4, 4, seed=i) for i in range(3)]
    )
    D, W = random_like(B, seed=24), random_like(B[0], seed=25)

    def loss(X):
        return inner(ps.svd_function(X, ("pow", 2)), W)

    batched = reverse_hvp(loss, B, D)
    mapped = vmap(lambda a, d: forward_hvp(loss, a, d))(B, D)
    for i in range(3):
        expected = fd_hvp(loss, B[i], D[i])
        assert rel_err(batched[i], expected) < TOL
        assert rel_err(mapped[i], expected) < TOL


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 3)], ids=str)
def test_empty_shapes_second_order(shape):
    A = torch.zeros(*shape, dtype=torch.float64)
    fns = [lambda X: ps.svd_function(X, ("pow", 2)).sum()]
    if shape[-1] == shape[-2]:
        fns.append(lambda X: ps.matrix_function(X, "exp", check_hermitian=False).sum())
    for loss in fns:
        X = A.clone().requires_grad_()
        (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
        (h,) = torch.autograd.grad(
            g.sum(), X, allow_unused=True, materialize_grads=True
        )
        assert h.shape == A.shape
        assert hessian(loss)(A).shape == (*shape, *shape)


def test_third_derivative_raises():
    A = matrix_with_spectrum((3.0, 2.0, 1.0), 3, 3, seed=26)
    W, D = random_like(A, seed=27), random_like(A, seed=28)
    for loss in [
        lambda X: inner(ps.svd_function(X, ("pow", 3)), W),
        lambda X: inner(ps.matrix_function(X + X.mT, "exp", check_hermitian=False), W),
    ]:
        X = A.clone().requires_grad_()
        (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
        (h,) = torch.autograd.grad(inner(g, D), X, create_graph=True)
        with pytest.raises(ps.DerivativeError, match="third"):
            torch.autograd.grad(h.sum(), X)


def test_sqrt_at_a_zero_eigenvalue_is_inf_not_nan():
    """f' and f'' infinite at an exact zero (sqrt): the Hessian is +-inf where
    the infinite divided differences reach, finite elsewhere, never NaN."""
    A = torch.diag(torch.tensor([0.0, 0.5, 2.0, 3.0], dtype=torch.float64))
    Hm = hessian(
        lambda X: ps.matrix_function(X, "sqrt", check_hermitian=False).diagonal().sum()
    )(A)
    assert not Hm.isnan().any() and Hm.isinf().any()
    assert torch.isfinite(Hm[1:, 1:, 1:, 1:]).all()
    B = torch.diag(torch.tensor([3.0, 2.0, 0.0], dtype=torch.float64))
    Hs = hessian(lambda X: ps.svd_function(X, ("pow", 0.5)).sum())(B)
    assert not Hs.isnan().any()


# ---------------------------------------------------------------- user f''


def test_user_pair_without_differentiable_f_prime_raises_only_at_second_order():
    """f'' of a pair comes from forward-mode AD of f_prime; where that fails
    the first derivative still works and the second raises DerivativeError,
    asking for the triple (which then works)."""
    H = hermitian_with_spectrum((0.5, 1.0, 1.0, 2.0), seed=29)
    W = random_like(H, seed=30)

    def opaque_cosh(x):  # not differentiable by torch: through numpy
        return torch.from_numpy(torch.cosh(x.detach()).numpy())

    pair, triple = (torch.sinh, opaque_cosh), (torch.sinh, opaque_cosh, torch.sinh)

    def loss(f):
        return lambda X: inner(ps.matrix_function(X, f, check_hermitian=False), W)

    grad(loss(pair), H)  # first order: fine
    with pytest.raises(ps.DerivativeError, match="f_second"):
        reverse_hvp(loss(pair), H, random_like(H, seed=32))
    D = random_like(H, seed=31)
    expected = fd_hvp(loss(triple), H, D)
    assert rel_err(reverse_hvp(loss(triple), H, D), expected) < TOL
    # (numpy inside f_prime rules out torch.func for the user's f_prime itself)
    check_hvp(loss((torch.sinh, torch.cosh)), H)


def test_user_f_second_is_validated():
    H = hermitian_with_spectrum((0.5, 1.0, 2.0), seed=32)
    X = H.clone().requires_grad_()
    bad = (torch.sinh, torch.cosh, lambda x: torch.full_like(x, float("nan")))
    (g,) = torch.autograd.grad(
        ps.matrix_function(X, bad, check_hermitian=False).sum(), X, create_graph=True
    )
    with pytest.raises(ps.DomainError, match="f_second"):
        torch.autograd.grad(g.sum(), X)


# -------------------------------------------------------- Julia backend


def test_double_backward_through_the_julia_backend_is_exact(backend):
    """With backend="julia" (the stand-in where Julia is absent) the first
    derivative is Julia's; a second one uses the native exact formula."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 4, 4, seed=33)
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0), seed=33)
    W = random_like(A, seed=34)
    for loss, X in [
        (lambda X: inner(ps.svd_function(X, ("pow", 2), backend=backend), W), A),
        (
            lambda X: inner(
                ps.matrix_function(X, "sqrt", backend=backend, check_hermitian=False), W
            ),
            H,
        ),
    ]:
        D = random_like(X, seed=35)
        expected = fd_hvp(loss, X, D)
        assert rel_err(reverse_hvp(loss, X, D), expected) < TOL
        # reverse over forward with torch.autograd.forward_ad (torch.func's
        # transforms take the native backend): the tangent is differentiable
        Y = X.clone().requires_grad_()
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(loss(fwAD.make_dual(Y, D))).tangent
        (got,) = torch.autograd.grad(tangent, Y)
        assert rel_err(got, expected) < TOL


# ----------------------------------------- second divided differences


@pytest.mark.parametrize("gap", [1e-1, 1e-3, 1e-5, 1e-7, 1e-9, 1e-12, 1e-15, 0.0])
@pytest.mark.parametrize("f", ["sqrt", "log", "exp", "invsqrt"])
def test_second_divided_differences_against_mpmath(gap, f):
    """The second-order map in the eigenbasis, sum_k f[w_i, w_k, w_j]
    (X_ik Y_kj + Y_ik X_kj), against 60-digit arithmetic, at a cluster of
    three eigenvalues spaced by ``gap`` (the rounding-error criterion picks
    the quotient or the confluent form entry by entry)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    exact = {"sqrt": mp.sqrt, "log": mp.log, "exp": mp.exp}.get(
        f, lambda x: 1 / mp.sqrt(x)
    )
    w = [0.25, 1.0, 1.0 + gap, 1.0 + 2 * gap, 4.0]

    def first(a, b):
        return (exact(a) - exact(b)) / (a - b) if a != b else mp.diff(exact, a)

    def second(a, b, c):
        x, y, z = sorted((a, b, c))
        return (
            (first(x, y) - first(y, z)) / (x - z)
            if x != z
            else mp.diff(exact, x, 2) / 2
        )

    gen = torch.Generator().manual_seed(36)
    X, Y = (torch.randn(5, 5, dtype=torch.float64, generator=gen) for _ in "XY")
    X, Y = X + X.mT, Y + Y.mT
    nodes = [mp.mpf(x) for x in w]
    expected = torch.tensor(
        [
            [
                float(
                    sum(
                        second(nodes[i], nodes[k], nodes[j])
                        * (float(X[i, k] * Y[k, j]) + float(Y[i, k] * X[k, j]))
                        for k in range(5)
                    )
                )
                for j in range(5)
            ]
            for i in range(5)
        ],
        dtype=torch.float64,
    )
    got = matrix_function_second(
        torch.tensor(w, dtype=torch.float64),
        torch.eye(5, dtype=torch.float64),
        _matfun(f),
        X,
        Y,
        options(),
        lambda T: T,
        torch.tensor(1.0),
    )
    assert rel_err(got, expected) < 1e-7


def test_svd_eigh_second_order_warns_on_both_backends(backend):
    """The second-order check of svd / eigh at a cluster on either backend (on
    Julia's, the second derivative's pullback is Julia's, checked natively)."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 4, 4, seed=36)
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0), seed=36)
    for X, loss in [
        (A, lambda X: (ps.svd(X, backend=backend).S ** 3).sum()),
        (H, lambda X: (ps.eigh(X, backend=backend).eigenvalues ** 3).sum()),
    ]:
        with pytest.warns(ps.GaugeWarning, match="second derivative") as record:
            reverse_hvp(loss, X, random_like(X, seed=37))
        assert len(record) == 1


@pytest.mark.parametrize(
    "op",
    [
        lambda X: ps.svd(X, full_matrices=False).S.pow(3).sum(),
        lambda X: ps.svdvals(X).pow(3).sum(),
        lambda X: ps.eigh(X @ X.mT).eigenvalues.pow(3).sum(),
        lambda X: ps.eigvalsh(X @ X.mT).pow(3).sum(),
    ],
    ids=["svd", "svdvals", "eigh", "eigvalsh"],
)
def test_forward_over_forward_through_the_factors_raises(op):
    """torch gives a custom Function's forward rule no outer-level tangent of
    its saved outputs: jacfwd(jacfwd) through svd/eigh would be silently wrong
    (off by 8 and 578 before), so it raises; the other compositions agree."""
    A = random_like(torch.zeros(4, 3, dtype=torch.float64), seed=40)
    with pytest.raises(ps.DerivativeError, match="forward mode over forward mode"):
        torch.func.jacfwd(torch.func.jacfwd(op))(A)
    ref = jacrev(jacrev(op))(A)
    for H in (hessian(op)(A), jacrev(torch.func.jacfwd(op))(A)):
        assert rel_err(H, ref) < 1e-10


# ------------------------------------------ the state of one call is its own


def _one_line_svds(*terms: tuple[torch.Tensor, int]) -> torch.Tensor:
    """``sum over (M, p) of sum(S_M ** p)``, every SVD made by the same line."""
    out = 0
    for M, p in terms:
        U, S, Vh = ps.svd(
            M, full_matrices=False
        )  # one call site: one cached Options for all
        out = out + (S**p).sum()
    return out


@pytest.mark.parametrize("hvp", [reverse_hvp, forward_hvp])
@pytest.mark.parametrize("sizes", [((5, 4), (3, 3)), ((4, 4), (4, 4))], ids=str)
def test_two_svds_from_one_line_keep_their_own_second_order_check(hvp, sizes):
    """Issue 15, item 0 (a TRG's double backward): the second-order check of
    one SVD was kept in the Options cached for the call site and consumed by
    the next pullback from that site, another SVD's: of another size a crash
    (size mismatch), of the same size a check of the wrong spectrum (here a
    false GaugeWarning, an error in this suite: the generic B's S-cotangent
    measured on A's cluster). ``sum(S)`` is exact to second order at A's
    cluster, ``sum(S**3)`` at B's distinct spectrum: nothing warns, and the
    Hessian-vector product is right."""
    (m, n), (p, q) = sizes
    A = matrix_with_spectrum([3.0, 2.0, 2.0, 1.0], m, n, seed=1)
    B = matrix_with_spectrum(torch.linspace(4, 1, min(p, q)).tolist(), p, q, seed=2)
    X = torch.cat([A.flatten(), B.flatten()])
    D = random_like(X, seed=3)

    def loss(X):
        A, B = X[: m * n].reshape(m, n), X[m * n :].reshape(p, q)
        return _one_line_svds((A, 1), (B, 3))

    assert rel_err(hvp(loss, X, D), fd_hvp(loss, X, D)) < TOL


def test_the_second_order_check_is_still_made_per_call():
    """The check itself is kept (only its owner changed): A's S-cotangent
    changing inside A's cluster still warns, with a generic B beside it from
    the same line."""
    A = matrix_with_spectrum([3.0, 2.0, 2.0, 1.0], 5, 4, seed=1)
    B = matrix_with_spectrum([4.0, 2.5, 1.0], 3, 3, seed=2)
    X = torch.cat([A.flatten(), B.flatten()])

    def loss(X):
        return _one_line_svds((X[:20].reshape(5, 4), 3), (X[20:].reshape(3, 3), 3))

    with pytest.warns(ps.GaugeWarning, match="differs inside a degenerate cluster"):
        reverse_hvp(loss, X, random_like(X, seed=3))


# ------------------------- clusters the loss discards (issue 15, item 9)


def _truncated_loss(keep: int, W: torch.Tensor):
    """A loss of the top ``keep`` triplets only, as TRG's split uses them
    (``U sqrt(S)``, ``sqrt(S) Vh``), invariant under their signs: every
    cotangent past ``keep`` is exactly 0."""

    def loss(X):
        U, S, Vh = ps.svd(X, full_matrices=False)
        r = S[:keep].sqrt()
        F1, F3 = U[:, :keep] * r, r[:, None] * Vh[:keep]
        Y = F3 @ W.mH @ F1
        return (Y.abs() ** 2).sum() + Y.diagonal().real.sum() + inner(F1 @ F3, W)

    return loss


DISCARDED = {  # spectrum, shape, kept triplets
    "zeros": ((5.0, 3.0, 2.0, 0.0, 0.0), (5, 5), 3),
    "zero, tall": ((5.0, 3.0, 2.0, 1.0, 0.0), (7, 5), 4),
    "zeros, wide": ((5.0, 3.0, 2.0, 0.0, 0.0), (5, 8), 3),
    "pair": ((5.0, 3.0, 2.0, 1.0, 1.0), (5, 5), 3),
    "pair, tall": ((5.0, 3.0, 2.0, 1.0, 1.0), (7, 5), 3),
    "triple": ((5.0, 3.0, 1.0, 1.0, 1.0), (6, 5), 2),
    "pair and zeros": ((5.0, 3.0, 1.0, 1.0, 0.0, 0.0), (6, 6), 2),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", DISCARDED)
@pytest.mark.parametrize("hvp", [reverse_hvp, forward_hvp])
def test_svd_second_order_at_discarded_clusters_is_exact_and_silent(case, dtype, hvp):
    """Zeros and multiplets that the loss discards (TRG's first SVD has both):
    the term the pullback's derivative drops there is computed
    (pyspectral/_discarded.py), so the Hessian-vector product agrees with
    finite differences and nothing warns (the suite makes a GaugeWarning an
    error). Before, it warned and was off by 1e-2 .. 8e-1."""
    spectrum, (m, n), keep = DISCARDED[case]
    A = matrix_with_spectrum(spectrum, m, n, dtype=dtype, seed=41)
    loss = _truncated_loss(keep, random_like(A, seed=42))
    D = random_like(A, seed=43)
    assert rel_err(hvp(loss, A, D), fd_hvp(loss, A, D)) < TOL


@pytest.mark.parametrize("hvp", [reverse_hvp, forward_hvp])
def test_svd_second_order_at_exact_zeros_the_loss_uses_still_warns(hvp):
    """sum(S**2) = ||A||**2 at exact zero singular values: its S-cotangent 2 S
    is 0 there at this A, but changes along any tangent, so the cluster is not
    discarded: the exact Hessian (2 D) needs the block of the zeros, which
    the cotangents do not give. It still warns (and is wrong); sum over the
    kept values only is exact and silent."""
    A = torch.zeros(5, 4, dtype=torch.float64)
    A[:2, :2] = randn(2, 2, seed=44)  # singular values (s1, s2, 0, 0) exactly
    D = random_like(A, seed=45)
    with pytest.warns(ps.GaugeWarning, match="second derivative"):
        got = hvp(lambda X: (ps.svd(X).S ** 2).sum(), A, D)
    assert rel_err(got, 2 * D) > 1e-2
    top2 = lambda X: (ps.svd(X).S[:2] ** 2).sum()  # noqa: E731
    assert rel_err(hvp(top2, A, D), fd_hvp(top2, A, D)) < TOL


def test_forward_over_reverse_measures_only_the_clusters_its_tangent_splits():
    """The polar factor at a kept cluster: along a tangent that keeps the
    cluster degenerate (off-diagonal herm(U_C^H D V_C) = 0, as a symmetry of
    the path keeps TRG's multiplets) forward over reverse drops nothing, and
    is exact and silent; along a generic tangent it warns. Reverse over
    reverse cannot see the tangent (its gradient is contracted with A's own
    directions after the guard ran), and the Hessian-vector product it
    returns does miss the term: it warns for both."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0, 0.5), 5, 5, seed=14)
    W = random_like(A, seed=15)
    U, _, Vh = torch.linalg.svd(A)
    X = random_like(A, seed=16)
    X[1:3, 1:3] = torch.tensor([[0.7, 0.3], [-0.3, 0.7]], dtype=A.dtype)
    keeps = U @ X @ Vh  # its cluster block: 0.7 I + an anti-Hermitian part

    def loss(X):
        U, _, Vh = ps.svd(X, full_matrices=False)
        return inner(U @ Vh, W)

    exact = lambda X: inner(ps.svd_function(X, "polar"), W)  # noqa: E731
    assert rel_err(forward_hvp(loss, A, keeps), fd_hvp(exact, A, keeps)) < TOL
    for hvp, D in [
        (forward_hvp, random_like(A, seed=17)),
        (reverse_hvp, keeps),
        (reverse_hvp, random_like(A, seed=17)),
    ]:
        with pytest.warns(ps.GaugeWarning, match="rotation inside it"):
            got = hvp(loss, A, D)
        assert rel_err(got, fd_hvp(exact, A, D)) > 1e-3


# ------------------------------------------------ reverse over forward
#
# jacrev / grad of a jvp's tangent through svd / eigh differentiates the
# pushforward; at a cluster that the tangent splits it is exact where the
# cotangent of the tangents is rotation-invariant there (sum(S), sum(S**3):
# quiet) and warns where it is not (the polar factor, 4 % off silently before),
# naming the route that is exact in every composition; a tangent that keeps
# the cluster degenerate is exact.


def _warns_with(match, run):
    """``run()`` raises a GaugeWarning matching ``match`` (among others: the
    first-order pullback of the same graph may warn about its own part)."""
    import re

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    texts = [str(w.message) for w in caught if issubclass(w.category, ps.GaugeWarning)]
    assert any(re.search(match, t, re.S) for t in texts), texts


def _reverse_over_forward(f, dA, W):
    """``A -> <W, jvp(f)(A; dA)>``, whose gradient is reverse over forward."""
    return lambda A: inner(jvp(f, (A,), (dA,))[1], W)


def _polar_from_svd(A):
    U, _, Vh = ps.svd(A, full_matrices=False)
    return U @ Vh


def _rebuilt_exp(A):
    w, V = ps.eigh(A)
    return (V * w.exp().to(V.dtype)) @ V.mH


@pytest.mark.parametrize("transform", ["jacrev", "grad", "dual"])
def test_reverse_over_forward_polar_at_a_split_cluster_warns(transform):
    """The issue's case: the polar factor U Vh through svd at S = (5, 2, 2, 1),
    reverse over forward along a tangent that splits the pair: warns
    (GaugeWarning naming svd_function(A, 'polar')), and that route is exact."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 4, 4, seed=1)
    dA, W = random_like(A, seed=3), random_like(A, seed=5)
    loss = _reverse_over_forward(_polar_from_svd, dA, W)

    def run():
        if transform == "dual":  # forward-mode dual tensors and .backward()
            X = A.clone().requires_grad_()
            with fwAD.dual_level():
                t = fwAD.unpack_dual(_polar_from_svd(fwAD.make_dual(X, dA))).tangent
                inner(t, W).backward()
        else:
            getattr(torch.func, transform)(loss)(A)

    _warns_with(r"reverse over forward.*'polar'", run)
    exact = _reverse_over_forward(lambda A: ps.svd_function(A, "polar"), dA, W)
    assert rel_err(jacrev(exact)(A), fd_grad(exact, A)) < TOL


def test_reverse_over_forward_eigh_at_a_split_cluster_warns():
    """V exp(w) V^H rebuilt from eigh: warns, naming matrix_function, which is
    exact on the same case."""
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), seed=4)
    dH, W = random_like(H, seed=3), random_like(H, seed=5)
    loss = _reverse_over_forward(_rebuilt_exp, dH, W)
    _warns_with(r"reverse over forward.*matrix_function", lambda: jacrev(loss)(H))
    f = lambda A: ps.matrix_function(A, "exp", check_hermitian=False)  # noqa: E731
    exact = _reverse_over_forward(f, dH, W)
    assert rel_err(jacrev(exact)(H), fd_grad(exact, H)) < TOL


def test_reverse_over_forward_exact_cases_are_quiet():
    """At the same clusters, exact and quiet: symmetric functions of the
    values (svdvals, eigvalsh) along the splitting tangent, and the polar
    factor along a tangent that keeps the pair degenerate (dA = A)."""
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 4, 4, seed=1)
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), seed=4)
    dA, W = random_like(A, seed=3), random_like(A, seed=5)
    dH = random_like(H, seed=3)
    one = torch.ones((), dtype=A.dtype)
    cases = [
        (_reverse_over_forward(lambda A: ps.svdvals(A).sum(), dA, one), A),
        (_reverse_over_forward(lambda A: ps.svdvals(A).pow(3).sum(), dA, one), A),
        (_reverse_over_forward(lambda A: ps.eigvalsh(A).pow(3).sum(), dH, one), H),
        (_reverse_over_forward(_polar_from_svd, A, W), A),
    ]
    for loss, X in cases:
        assert rel_err(jacrev(loss)(X), fd_grad(loss, X)) < TOL
