"""When eig's derivatives exist (pullbacks/eig.py, ``check_diagonalizable``)
and forward mode at a cluster (``check_split``), both backends.

The reference at a near-defective matrix is the exact derivative at the
float matrix itself: central differences in 40-digit arithmetic (mpmath,
which torch requires through sympy), because float64 differences cannot
resolve a pair closer than their step. A refused matrix raises
``DomainError``; an accepted one is within the documented bound of that
reference, ``eps**(1/4)`` (docs/math.md, "eig: when a derivative exists").
"""

from __future__ import annotations

import warnings

import mpmath
import pytest
import torch
from _spectra import fd_grad, grad, randn, rel_err

import pyspectral as ps

F32, F64, C128 = torch.float32, torch.float64, torch.complex128
Tensor = torch.Tensor
DIGITS = 40


def near_jordan(delta: float, seed: int, extra: float | None = None) -> Tensor:
    """``S J S^-1`` in float64, ``J`` the Jordan block of 1 with ``delta`` in
    its corner (eigenvalues ``1 +- sqrt(delta)``), and ``extra`` a third
    eigenvalue; ``S = I + 0.3 randn`` (well conditioned)."""
    n = 2 if extra is None else 3
    gen = torch.Generator().manual_seed(seed)
    S = torch.eye(n, dtype=F64) + 0.3 * torch.randn(n, n, dtype=F64, generator=gen)
    J = torch.eye(n, dtype=F64)
    J[0, 1], J[1, 0] = 1.0, delta
    if extra is not None:
        J[2, 2] = extra
    return S @ J @ torch.linalg.inv(S)


def _order(L: Tensor) -> Tensor:
    return torch.argsort(L.real.detach() + 1e-3 * L.imag.detach())


def pair_loss(L: Tensor, V: Tensor) -> Tensor:
    """The splitting of the two lowest eigenvalues (by real part) and the
    moduli of the lowest one's eigenvector (phase-invariant)."""
    i = _order(L)
    L, V = L[i], V[:, i]
    weights = torch.arange(1.0, V.shape[0] + 1, dtype=V.real.dtype)
    return (L[0] - L[1]).abs() + (V[:, 0].abs() ** 2 * weights).sum()


def _pair_loss_mp(A: list) -> mpmath.mpf:
    E, ER = mpmath.eig(mpmath.matrix(A))
    n = len(E)
    cols = sorted(range(n), key=lambda k: mpmath.re(E[k]) + mpmath.im(E[k]) / 1000)
    v = [ER[r, cols[0]] for r in range(n)]
    norm2 = sum(abs(x) ** 2 for x in v)
    return abs(E[cols[0]] - E[cols[1]]) + sum(
        (r + 1) * abs(v[r]) ** 2 / norm2 for r in range(n)
    )


def mp_grad(loss, A: Tensor) -> Tensor:
    """The gradient of ``loss`` (a function of a list of mpmath rows) at the
    float matrix ``A`` exactly as stored, by central differences of step
    1e-25 in 40 digits (truncation 1e-50 relative, rounding 1e-15)."""
    rows = A.double().tolist()
    n = len(rows)
    G = torch.zeros(n, n, dtype=F64)
    with mpmath.workdps(DIGITS):
        h = mpmath.mpf("1e-25")
        for i in range(n):
            for j in range(n):
                plus = [[mpmath.mpf(x) for x in r] for r in rows]
                minus = [[mpmath.mpf(x) for x in r] for r in rows]
                plus[i][j] += h
                minus[i][j] -= h
                G[i, j] = float((loss(plus) - loss(minus)) / (2 * h))
    return G


def refused_or_exact(A: Tensor, backend: str = "torch", floor: float = 0.0) -> bool:
    """True when the gradient of ``pair_loss`` through ``ps.eig`` raises
    DomainError; else assert it is within ``eps**(1/4)`` of the exact one,
    or within twice ``floor`` (the error LAPACK's eigenvectors leave)."""
    X = A.clone().requires_grad_()
    try:
        pair_loss(*ps.eig(X, backend=backend)).backward()
    except ps.DomainError:
        return True
    bound = max(torch.finfo(A.dtype).eps ** 0.25, 2 * floor)
    err = rel_err(X.grad.double(), mp_grad(_pair_loss_mp, A))
    assert err < bound, (A, err)
    return False


def lapack_error(A: Tensor) -> float:
    """The error of ``torch.linalg.eig``'s gradient of ``pair_loss`` at a
    resolved pair (the same formula as pyspectral's there): what the
    accuracy of LAPACK's eigenvectors allows on this machine's kernels."""
    X = A.clone().requires_grad_()
    pair_loss(*torch.linalg.eig(X)).backward()
    return rel_err(X.grad.double(), mp_grad(_pair_loss_mp, A))


DELTAS = [0.0, 1e-14, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4]


@pytest.mark.parametrize("dtype", [F64, F32], ids=str)
@pytest.mark.parametrize("delta", DELTAS, ids=str)
def test_near_jordan_pairs_are_refused_or_exact(dtype, delta):
    """The reproducer of issue 36: 20 seeds of a Jordan block perturbed by
    ``delta`` in a well-conditioned basis; each raises or is exact (before,
    2 of 20 exact Jordan blocks passed with a gradient of norm 4e7)."""
    refused = [refused_or_exact(near_jordan(delta, s).to(dtype)) for s in range(20)]
    eps = torch.finfo(dtype).eps
    if delta <= eps:  # a Jordan block to rounding: no derivative at all
        assert all(refused)
    if delta >= eps**0.5:  # resolved: effective gap ~ delta >> eps**(3/4)
        assert not any(refused)


@pytest.mark.parametrize("delta", [0.0, 1e-13, 1e-9, 1e-5], ids=str)
def test_near_jordan_with_a_third_eigenvalue(delta):
    for seed in range(4):
        refused = refused_or_exact(near_jordan(delta, seed, extra=3.0))
        assert refused == (delta < 1e-12)


@pytest.mark.parametrize("sign", [1, -1], ids=["real pair", "complex pair"])
def test_near_jordan_complex_and_batched(sign):
    """A real near-Jordan pair split into a complex pair (``delta < 0``), in
    a batch with a resolved matrix: the batch raises for the one refused."""
    ok = near_jordan(sign * 1e-6, 0)
    assert not refused_or_exact(ok)
    X = torch.stack([ok, near_jordan(sign * 1e-15, 1)]).requires_grad_()
    with pytest.raises(ps.DomainError, match="effective gap|linearly dependent"):
        ps.eig(X).eigenvalues.abs().sum().backward()


def well_conditioned_pair(gap: float, dtype, seed: int = 0) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    S = torch.eye(3, dtype=F64) + 0.3 * torch.randn(3, 3, dtype=F64, generator=gen)
    D = torch.diag(torch.tensor([1.0, 1.0 + gap, 2.0], dtype=F64))
    return (S @ D @ torch.linalg.inv(S)).to(dtype)


@pytest.mark.parametrize(("dtype", "gap"), [(F64, 1e-6), (F32, 1e-3)])
def test_well_conditioned_near_pairs_are_not_refused(dtype, gap):
    """Nearly repeated, diagonalizable, well-conditioned: accepted, and the
    (large) eigenvector derivatives exact to the bound, or as accurate as
    LAPACK's eigenvectors allow (float32 at a gap of 1e-3 under MKL's
    AVX-512 kernels: 4e-2 for seed 1, torch.linalg.eig's gradient too)."""
    for seed in range(3):
        A = well_conditioned_pair(gap, dtype, seed)
        floor = lapack_error(A)
        assert floor < 0.1  # the eigenvectors still carry the derivative
        assert not refused_or_exact(A, floor=floor)


def test_pair_1e9_apart_is_not_refused():
    """diag(1, 1 + 1e-9, 2) in a well-conditioned basis: accepted, with the
    derivative at distinct eigenvalues torch.linalg.eig computes too. Its
    eigenvector derivatives (1e9) are as accurate as LAPACK's eigenvectors
    of a pair 1e-9 apart allow: 1e-6 of the exact in most seeds, 2e-4 in the
    worst of these (float64 differences cannot tell either)."""
    for seed in range(3):
        A = well_conditioned_pair(1e-9, F64, seed)
        X, Y = A.clone().requires_grad_(), A.clone().requires_grad_()
        pair_loss(*ps.eig(X)).backward()
        pair_loss(*torch.linalg.eig(Y)).backward()
        assert rel_err(X.grad, Y.grad) < 1e-8
        assert rel_err(X.grad, mp_grad(_pair_loss_mp, A)) < 1e-3


def test_normal_matrices_are_never_refused():
    """For a normal A (kappa = 1) the effective gap is the gap: every pair the
    degeneracy tolerance separates passes, even just above it."""
    gen = torch.Generator().manual_seed(3)
    Q, _ = torch.linalg.qr(torch.randn(3, 3, dtype=F64, generator=gen))
    tol = torch.finfo(F64).eps ** 0.75 * 2.0
    A = Q @ torch.diag(torch.tensor([1.0, 1.0 + 1.5 * tol, 2.0], dtype=F64)) @ Q.T
    X = A.clone().requires_grad_()
    L, V = ps.eig(X)
    (L.real**2).sum().backward()
    assert torch.isfinite(X.grad).all()


def test_refusal_advice_smooth_functions_are_exact():
    """The other routes both messages name: torch's polynomial and matrix
    exponential, smooth at a Jordan block (their gradients against float64
    differences)."""
    A = near_jordan(0.0, 0)
    with pytest.raises(ps.DomainError, match="matrix_power"):
        ps.eig(A.clone().requires_grad_()).eigenvalues.abs().sum().backward()
    W = randn(2, 2, seed=1)

    def power(X):
        return torch.linalg.matrix_power(X, 3).trace()

    def expm(X):
        return (torch.linalg.matrix_exp(X) * W).sum()

    assert rel_err(grad(power, A), 3 * (A @ A).T) < 1e-13
    assert rel_err(grad(expm, A), fd_grad(expm, A)) < 1e-8


def test_both_backends_refuse_alike(backend):
    """Julia's check_diagonalizable: the same verdicts on the reproducer."""
    for delta in (0.0, 1e-14, 1e-8):
        for seed in range(5):
            A = near_jordan(delta, seed)
            assert refused_or_exact(A, backend) == refused_or_exact(A)


# ------------------------------------------------------ forward mode at a cluster


def triple(dtype=F64, seed: int = 0) -> Tensor:
    """``S diag(1, 1, 1, 2) S^-1``: a triple eigenvalue, non-normal."""
    S = torch.eye(4, dtype=dtype) + 0.3 * randn(4, 4, dtype=dtype, seed=seed)
    D = torch.diag(torch.tensor([1.0, 1.0, 1.0, 2.0], dtype=dtype))
    return S @ D @ torch.linalg.inv(S)


def expm_through_eig(backend: str = "torch"):
    def f(X):
        L, V = ps.eig(X, backend=backend)
        Y = V @ torch.diag_embed(L.exp()) @ torch.linalg.inv(V)
        return Y if X.is_complex() else Y.real

    return f


def dual_jvp(f, A: Tensor, D: Tensor) -> Tensor:
    """The tangent of ``f`` at ``A`` along ``D`` by torch.autograd.forward_ad
    (the route both backends take)."""
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        return fwAD.unpack_dual(f(fwAD.make_dual(A, D))).tangent


def has_eig_function() -> bool:
    return hasattr(ps, "eig_function")


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_forward_mode_warns_where_the_tangent_splits_a_cluster(backend, dtype):
    """jvp of V exp(L) V^-1 at a triple eigenvalue (issue 36: 24-150 % off,
    silent): a GaugeWarning naming eig_function, which is exact there."""
    A, D = triple(dtype), randn(4, 4, dtype=dtype, seed=3)
    exact = dual_jvp(torch.linalg.matrix_exp, A, D)
    with pytest.warns(ps.GaugeWarning, match=r"splits it.*eig_function\(A, f\)"):
        t = dual_jvp(expm_through_eig(backend), A, D)
    assert rel_err(t, exact) > 1e-3  # the case the warning is for
    if not has_eig_function():
        pytest.skip("ps.eig_function (issue 36 item 5) is not in this tree yet")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        t = dual_jvp(lambda X: ps.eig_function(X, "exp"), A, D)
    assert rel_err(t, exact) < 1e-10


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_forward_mode_exact_and_silent_where_the_cluster_stays(backend, dtype):
    """Tangents that keep the cluster together (a polynomial in A, the
    identity): no warning, and V exp(L) V^-1 exact."""
    A = triple(dtype)
    f = expm_through_eig(backend)
    for D in (A @ A - 2 * A, torch.eye(4, dtype=dtype)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ps.GaugeWarning)
            t = dual_jvp(f, A, D)
        assert rel_err(t, dual_jvp(torch.linalg.matrix_exp, A, D)) < 1e-10


def test_forward_mode_split_policy_raise_and_ignore():
    A, D = triple(), randn(4, 4, seed=3)

    def f(gauge):
        def g(X):
            L, V = ps.eig(X, gauge=gauge)
            return (V * L.exp().unsqueeze(-2)).real

        return g

    with pytest.raises(ps.GaugeError, match="splits it"):
        dual_jvp(f("raise"), A, D)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        dual_jvp(f("ignore"), A, D)


def test_reverse_over_forward():
    """jacrev of the jvp of V exp(L) V^-1 through eig: at distinct
    eigenvalues against float64 differences of the jvp; at a cluster split
    by the tangent, a GaugeWarning (the jvp itself is not exact)."""
    A = randn(4, 4, seed=21)
    D = randn(4, 4, seed=22)
    f = expm_through_eig()

    def tangent(X):
        return torch.func.jvp(f, (X,), (D,))[1]

    W = randn(4, 4, seed=23)

    def loss(X):
        return (tangent(X) * W).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        exact = torch.func.jacrev(loss)(A)
    assert rel_err(exact, fd_grad(loss, A)) < 1e-7
    expm = torch.linalg.matrix_exp
    reference = torch.func.jacrev(
        lambda X: (torch.func.jvp(expm, (X,), (D,))[1] * W).sum()
    )(A)
    assert rel_err(exact, reference) < 1e-12
    # the jvp warns, and so does the backward through it (its eigenvector
    # cotangent depends on the basis inside the cluster)
    with pytest.warns(ps.GaugeWarning) as record:
        torch.func.jacrev(loss)(triple())
    assert any("splits it" in str(w.message) for w in record)


# -------------------------------------------------------- the routes warnings name


def test_backward_warning_names_eig_function_and_it_is_exact():
    """The weights warning of V exp(L) V^-1 through ps.eig at a cluster
    (issue 36 item 6: it offered spectral projectors, which cannot express
    exp(A)) names eig_function, exact there."""
    A, W = triple(), randn(4, 4, seed=4)

    def through_eig(X):
        return (expm_through_eig()(X) * W).sum()

    with pytest.warns(ps.GaugeWarning, match=r"eig_function\(A, f\)"):
        grad(through_eig, A)
    if not has_eig_function():
        pytest.skip("ps.eig_function (issue 36 item 5) is not in this tree yet")

    def routed(X):
        return (ps.eig_function(X, "exp") * W).sum()

    exact = grad(lambda X: (torch.linalg.matrix_exp(X) * W).sum(), A)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        assert rel_err(grad(routed, A), exact) < 1e-10


def test_second_order_warning_names_routes_that_are_exact():
    """The second-order eig warning (issue 36 item 6: it recommended
    trace(matrix_function(A, ('pow', 3))), 25.28 for a trace(A^3) of 24.875
    at a non-Hermitian A) names eig_function and matrix_power; both give the
    exact second derivative of sum(L**3) = trace(A^3) at the cluster."""
    A, C = triple(), randn(4, 4, seed=6)
    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(ps.eig(X).eigenvalues.pow(3).sum().real, X,
                               create_graph=True)  # fmt: skip
    with pytest.warns(ps.GaugeWarning, match=r"matrix_power\(A, 3\)") as record:
        (h,) = torch.autograd.grad((g * C).sum(), X)
    assert "eig_function(A, ('pow', 3))" in str(record[0].message)
    # d/dA <grad trace(A^3), C> = 3 d/dA <(A^2)^T, C>: exact, by hand
    exact = 3 * (A @ C + C @ A).T

    def second(f):
        Y = A.clone().requires_grad_()
        (g,) = torch.autograd.grad(f(Y), Y, create_graph=True)
        (h,) = torch.autograd.grad((g * C).sum(), Y)
        return h

    assert rel_err(second(lambda Y: torch.linalg.matrix_power(Y, 3).trace()),
                   exact) < 1e-12  # fmt: skip
    if not has_eig_function():
        pytest.skip("ps.eig_function (issue 36 item 5) is not in this tree yet")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        h = second(lambda Y: ps.eig_function(Y, ("pow", 3)).trace())
    assert rel_err(h, exact) < 1e-10


def test_large_matrices_take_the_estimate_and_then_the_exact_check():
    """n > 32: the LU 1-norm estimate decides a well-separated matrix alone
    and hands a near-Jordan pair inside a large one to the exact check."""
    n = 40
    A = randn(n, n, seed=30)
    X = A.clone().requires_grad_()
    ps.eig(X).eigenvalues.abs().sum().backward()
    assert torch.isfinite(X.grad).all()
    B = torch.block_diag(near_jordan(1e-13, 3), torch.diag(torch.arange(3.0, n + 1)))
    S = torch.eye(n, dtype=F64) + 0.05 * randn(n, n, seed=31)
    B = (S @ B.double() @ torch.linalg.inv(S)).requires_grad_()
    with pytest.raises(ps.DomainError, match="effective gap"):
        ps.eig(B).eigenvalues.abs().sum().backward()


def test_condition_one_alone():
    """``pairs=False`` (eig_function's check): a near-Jordan pair whose
    eigenvectors are still independent to half the digits passes; a
    rounded Jordan block does not."""
    from pyspectral._settings import Options
    from pyspectral.pullbacks.eig import check_diagonalizable

    L, V = torch.linalg.eig(near_jordan(1e-13, 0))
    with pytest.raises(ps.DomainError, match="effective gap"):
        check_diagonalizable(L, V, Options())
    check_diagonalizable(L, V, Options(), pairs=False)
    L, V = torch.linalg.eig(torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=F64))
    with pytest.raises(ps.DomainError, match="linearly dependent"):
        check_diagonalizable(L, V, Options(), pairs=False)
