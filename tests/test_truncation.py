"""Truncation rules of ``svd`` and ``eigh`` (issue 17): which values each rule
keeps (ties, the zero matrix, an all-equal spectrum, rules that keep nothing),
the truncation error, gradients against finite differences of gauge-invariant
losses, batches (padded to the largest rank), torch.func, the iterative top-k
path and the operator form, bad rules, and the Julia backend (through the
stand-in here; against real Julia where it is installed).

Expected ranks are worked out from the rules on spectra chosen for it, never
taken from the code's output; the same cases are in the Julia testset
"truncation rules" (julia/PySpectral/test/runtests.jl).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _julia import needs_julia
from _spectra import (
    fd_directional,
    fd_grad,
    hermitian_with_spectrum,
    matrix_with_spectrum,
    random_like,
    rel_err,
)

import pyspectral as ps
from pyspectral import _linalg  # torch's functions as pyspectral binds them
from pyspectral import topk as TK
from pyspectral.forward import topk as T
from pyspectral.forward.truncation import TruncationRule, tail_norms, truncation_rank
from pyspectral.julia import _bridge, _svd

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

F64, C128 = torch.float64, torch.complex128


def rule(**kw) -> TruncationRule:
    fields = dict(
        k=None, atol=None, rtol=None, error_atol=None, error_rtol=None, min_rank=None
    )
    return TruncationRule(**{**fields, "multiplets": "cut", **kw})


def keep(x, degeneracy_atol=None, **kw) -> int:
    t = torch.tensor(x, dtype=F64)
    return int(truncation_rank(t, rule(**kw), degeneracy_atol))


# ------------------------------------------------- the rules on a spectrum

S4 = [4.0, 3.0, 2.0, 1.0]  # tails ||S[r:]|| = sqrt(30), sqrt(14), sqrt(5), 1, 0
M5 = [3.0, 2.0, 2.0, 2.0, 1.0]  # a triplet {2, 2, 2}
Z4 = [2.0, 1.0, 0.0, 0.0]  # a block of zeros
E3 = [2.0, 2.0, 2.0]  # all equal
RANKS = [
    (S4, {}, 4),
    (S4, dict(k=2), 2),
    (S4, dict(k=0), 0),
    (S4, dict(atol=2.0), 2),  # strictly above, as matrix_rank: a tie is cut
    (S4, dict(rtol=0.5), 2),  # 0.5 * S_1 = 2
    (S4, dict(atol=1.0, rtol=0.6), 2),  # max(1, 2.4)
    (S4, dict(atol=2.5, rtol=0.1), 2),  # max(2.5, 0.4)
    (S4, dict(atol=0.0, k=1), 1),
    (S4, dict(k=10, atol=0.0), 4),  # k a maximum past min(m, n)
    (S4, dict(error_atol=1.0), 3),  # <= is inclusive (exact in units of S_1)
    (S4, dict(error_atol=0.99), 4),
    (S4, dict(error_rtol=0.5), 2),  # sqrt(5) <= 0.5 sqrt(30) < sqrt(14)
    (S4, dict(error_atol=6.0), 0),  # keeps nothing
    (S4, dict(error_atol=1.0, k=2), 2),
    (S4, dict(error_atol=1.0, atol=3.5), 1),
    (M5, dict(k=2), 2),
    (M5, dict(k=2, multiplets="down"), 1),
    (M5, dict(k=2, multiplets="up"), 4),
    (M5, dict(k=4, multiplets="down"), 4),  # already at a gap
    (M5, dict(atol=1.5, multiplets="down"), 4),
    (M5, dict(error_atol=2.5, multiplets="up"), 4),  # r = 3 inside the triplet
    (M5, dict(error_atol=2.5, multiplets="down"), 1),  # r = 3 inside the triplet
    (Z4, dict(k=3, multiplets="down"), 2),  # zeros are a multiplet too
    (Z4, dict(k=3, multiplets="up"), 4),
    (Z4, dict(atol=0.0), 2),
    ([0.0] * 3, dict(atol=0.0), 0),  # the zero matrix keeps nothing ...
    ([0.0] * 3, dict(rtol=0.1), 0),
    ([0.0] * 3, dict(error_atol=0.0), 0),
    ([0.0] * 3, dict(error_rtol=0.5), 0),
    ([0.0] * 3, dict(k=2), 2),  # ... but k alone keeps k zeros
    ([0.0] * 3, dict(k=2, multiplets="down"), 0),
    (E3, dict(k=1, multiplets="down"), 0),
    (E3, dict(k=1, multiplets="up"), 3),
    (E3, dict(rtol=1.0), 0),
    (E3, dict(rtol=0.99), 3),
    ([], dict(atol=0.0), 0),
    # the floor min_rank (issue 23, item 2), after the rules and the multiplets
    (S4, dict(atol=3.5, min_rank=2), 2),  # atol keeps 1
    (S4, dict(atol=1.5, min_rank=2), 3),  # already above the floor
    (S4, dict(k=3, error_atol=6.0, min_rank=1), 1),  # the error keeps 0
    ([4.0, 3.0], dict(rtol=0.9, min_rank=5), 2),  # at most all of them
    (M5, dict(atol=2.5, min_rank=2, multiplets="up"), 4),  # raised, then up
    (M5, dict(atol=2.5, min_rank=2, multiplets="down"), 2),  # the floor wins
    (Z4, dict(atol=0.5, min_rank=3), 3),  # zeros included
    ([0.0] * 3, dict(atol=0.0, min_rank=1), 1),
    (S4, dict(k=0, min_rank=0), 0),
]


@pytest.mark.parametrize("x, kw, r", RANKS, ids=lambda v: repr(v))
def test_rank_of_a_spectrum(x, kw, r) -> None:
    assert keep(x, **kw) == r


def test_multiplets_use_the_degeneracy_tolerance() -> None:
    N = [3.0, 2.0 + 1e-13, 2.0, 2.0 - 1e-13, 1.0]
    assert keep(N, k=2, multiplets="down") == 1  # gaps within max * eps**0.75
    assert keep(N, k=2, multiplets="down", degeneracy_atol=0.0) == 2  # every gap
    assert keep(M5, k=2, multiplets="down", degeneracy_atol=0.0) == 1  # equal values
    assert keep([3.0, 2.1, 2.0, 1.0], k=2, multiplets="up", degeneracy_atol=0.2) == 3


@pytest.mark.parametrize("scale", [1e-200, 1e200])
def test_ranks_are_scale_invariant(scale) -> None:
    x = [s * scale for s in S4]
    assert keep(x, error_rtol=0.5) == 2
    assert keep(x, rtol=0.6) == 2
    assert keep(x, error_atol=1.0 * scale) == 3


def test_ranks_of_a_batch_are_per_row() -> None:
    X = torch.tensor([S4, [4.0, 3.5, 3.0, 0.5], [4.0, 1.0, 0.5, 0.2]], dtype=F64)
    r = truncation_rank(X, rule(rtol=0.5), None)
    assert r.tolist() == [2, 3, 1] and r.dtype == torch.int64


# --------------------------------------------------------------- svd


def svd_matrix(dtype=F64, m=6, n=4, s=S4, seed=0):
    return matrix_with_spectrum(s, m, n, dtype, seed)


# rule, the kept singular values of S4
SVD_RULES = [
    (dict(k=2), [4.0, 3.0]),
    (dict(atol=2.5), [4.0, 3.0]),
    (dict(rtol=0.6), [4.0, 3.0]),
    (dict(atol=1.5, rtol=0.1), [4.0, 3.0, 2.0]),
    (dict(error_atol=1.05), [4.0, 3.0, 2.0]),
    (dict(error_rtol=0.5), [4.0, 3.0]),
    (dict(k=1, error_rtol=0.5), [4.0]),
    (dict(k=10, rtol=0.1), S4),
    (dict(k=0), []),
    (dict(error_atol=10.0), []),
]


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("kw, kept", SVD_RULES, ids=lambda v: repr(v))
def test_svd_keeps_and_reports_the_error(kw, kept, dtype, backend) -> None:
    A = svd_matrix(dtype)
    U, S, Vh, err, rel, r = ps.svd(
        A, full_matrices=False, **kw, return_error=True, backend=backend
    )
    assert S.tolist() == pytest.approx(kept, abs=1e-12)
    assert U.shape == (6, len(kept)) and Vh.shape == (len(kept), 4)
    assert r.dtype == torch.int64 and int(r) == len(kept)
    discarded = S4[len(kept) :]
    assert float(err) == pytest.approx(math.hypot(*discarded), abs=1e-12)
    # the error is the distance of the truncation from A
    R = A - (U * S.to(dtype)) @ Vh
    assert float(err) == pytest.approx(float(torch.linalg.matrix_norm(R)), abs=1e-12)
    assert float(rel) == pytest.approx(float(err) / math.hypot(*S4), rel=1e-12)
    # without return_error: the same triplets, a plain SVDResult
    plain = ps.svd(A, full_matrices=False, **kw, backend=backend)
    assert type(plain) is ps.SVDResult
    assert torch.equal(plain.S, S)


def test_result_types() -> None:
    A = svd_matrix()
    res = ps.svd(A, rtol=0.6, return_error=True)
    assert isinstance(res, ps.TruncatedSVDResult) and len(res) == 6
    U, S, Vh = ps.svd(A, rtol=0.6)  # unpacks as before
    assert res._fields == ("U", "S", "Vh", "error", "rel_error", "rank")
    # return_error without a rule: nothing discarded
    full = ps.svd(A, return_error=True)
    assert float(full.error) == 0 and int(full.rank) == 4
    H = hermitian_with_spectrum([-3.0, -1.0, 0.5, 2.0, 4.0])
    eres = ps.eigh(H, atol=0.2, return_error=True)
    assert isinstance(eres, ps.TruncatedEighResult)
    assert eres._fields == ("eigenvalues", "eigenvectors", "error", "rel_error", "rank")


def test_the_error_needs_no_second_decomposition(monkeypatch) -> None:
    calls = []
    svd = torch.linalg.svd
    monkeypatch.setattr(_linalg, "svd", lambda *a, **k: calls.append(1) or svd(*a, **k))
    X = svd_matrix().requires_grad_()
    res = ps.svd(X, error_rtol=0.5, return_error=True)
    (res.error + res.rel_error + res.S.sum()).backward()
    assert len(calls) == 1


def test_zero_matrix_keeps_nothing_under_any_tolerance(backend) -> None:
    for kw in (
        dict(atol=0.0),
        dict(rtol=0.1),
        dict(error_atol=0.0),
        dict(error_rtol=0.1),
    ):
        X = torch.zeros(5, 3, dtype=F64, requires_grad=True)
        U, S, Vh, err, rel, r = ps.svd(
            X, full_matrices=False, **kw, return_error=True, backend=backend
        )
        assert U.shape == (5, 0) and S.shape == (0,) and Vh.shape == (0, 3)
        assert float(err.detach()) == 0 and float(rel.detach()) == 0 and int(r) == 0
        (g,) = torch.autograd.grad(err + rel + (U @ Vh).sum(), X)
        assert torch.equal(g, torch.zeros_like(g))


@pytest.mark.parametrize("backend", ["torch", "julia"])
@pytest.mark.parametrize("method", ["auto", "full", "randomized"])
def test_k_past_min_m_n_is_a_maximum(method, backend, fake) -> None:
    """A bond dimension past min(m, n) keeps everything, as every
    tensor-network code clamps it (issue 23, item 2): the whole thin SVD / the
    whole eigendecomposition, with its gradient; rank min(m, n) reported."""
    A = matrix_with_spectrum([4.0, 3.0, 2.0, 1.0], 6, 4, seed=3)
    res = ps.svd(A, k=50, method=method, return_error=True, backend=backend)
    assert int(res.rank) == 4 and res.S.shape == (4,)
    assert float(res.error) <= 1e-13  # 0, or ||A - U U^H A|| on the iterative path
    torch.testing.assert_close(res.S, torch.linalg.svdvals(A))
    X = A.clone().requires_grad_()
    U, S, Vh = ps.svd(X, k=9, method=method, backend=backend)
    (g,) = torch.autograd.grad((U @ Vh).sum() + S.sum(), X)
    Y = A.clone().requires_grad_()
    U0, S0, Vh0 = ps.svd(Y, backend=backend, full_matrices=False)
    (g0,) = torch.autograd.grad((U0 @ Vh0).sum() + S0.sum(), Y)
    torch.testing.assert_close(g, g0)
    H = hermitian_with_spectrum([-1.0, 0.5, 2.0, 3.0], seed=4)
    w, _ = ps.eigh(H, k=7, largest=False, method=method, backend=backend)
    torch.testing.assert_close(w, torch.linalg.eigvalsh(H))


def test_k_zero_keeps_nothing(backend) -> None:
    """k = 0 (torch.linalg has no such call; MatrixAlgebraKit returns empty
    factors): empty factors with zero gradient, the error ||A||_F with its
    gradient A / ||A||_F."""
    A = svd_matrix(C128)
    X = A.clone().requires_grad_()
    U, S, Vh, err, rel, r = ps.svd(X, k=0, return_error=True, backend=backend)
    assert U.shape == (6, 0) and S.shape == (0,) and Vh.shape == (0, 4)
    assert float(rel.detach()) == pytest.approx(1.0)
    (g,) = torch.autograd.grad(
        (U @ Vh).abs().sum() + S.sum(), X, allow_unused=True, retain_graph=True
    )
    assert g is None or torch.equal(g, torch.zeros_like(g))
    (g,) = torch.autograd.grad(err, X)
    assert rel_err(g, A / torch.linalg.matrix_norm(A)) < 1e-12
    w, V = ps.eigh(hermitian_with_spectrum([1.0, 2.0]), k=0, backend=backend)
    assert w.shape == (0,) and V.shape == (2, 0)


def test_all_equal_spectrum() -> None:
    A = svd_matrix(s=[2.0, 2.0, 2.0, 2.0])
    assert ps.svd(A, k=2, multiplets="down").S.shape == (0,)
    assert ps.svd(A, k=2, multiplets="up").S.shape == (4,)
    assert ps.svd(A, rtol=1.0).S.shape == (0,)  # nothing strictly above 2
    assert ps.svd(A, rtol=0.999).S.shape == (4,)


# ------------------------------------------------------------- gradients

GRAD_RULES = [
    dict(k=2),
    dict(atol=2.0),
    dict(rtol=0.5, multiplets="down"),
    dict(error_atol=1.2),
    dict(k=3, error_rtol=0.3),
    dict(k=0),
]
SPREAD = [4.0, 3.0, 1.0, 0.5]  # every rule above cuts at a wide gap


def svd_loss(W, backend="torch", **kw):
    """Gauge invariant at a gap: U Vh, S, the error and the relative error."""

    def loss(X):
        U, S, Vh, err, rel, _ = ps.svd(
            X, full_matrices=False, **kw, return_error=True, backend=backend
        )
        return ((U @ Vh) * W.conj()).real.sum() + (S**2).sum() + 2 * err + 3 * rel

    return loss


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("kw", GRAD_RULES, ids=repr)
def test_svd_gradient_matches_finite_differences(kw, dtype, backend) -> None:
    A = svd_matrix(dtype, s=SPREAD)
    loss = svd_loss(random_like(A, seed=3), backend, **kw)
    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    assert rel_err(g, fd_grad(loss, A)) < 1e-7


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_gradcheck(dtype) -> None:
    A = svd_matrix(dtype, s=SPREAD).requires_grad_()

    def f(X):
        U, S, Vh, err, rel, _ = ps.svd(X, rtol=0.2, error_atol=1.2, return_error=True)
        return U @ Vh, S, err, rel

    assert torch.autograd.gradcheck(f, (A,))


@pytest.mark.parametrize("mult, kept", [("down", 1), ("up", 3)])
def test_whole_multiplets_make_the_gradient_basis_free(mult, kept, backend) -> None:
    """At a degenerate spectrum {3, 2, 2, 1}, k = 2 moved to a boundary: no gauge
    dependence (gauge="raise"), and the gradient of a loss of the kept
    triplets matches finite differences (degeneracy_atol above the step, so
    that the differences do not split the pair: the rank is piecewise
    constant, and splitting an exact degeneracy moves the cut)."""
    A = svd_matrix(C128, m=5, s=[3.0, 2.0, 2.0, 1.0])
    kw = dict(k=2, multiplets=mult, degeneracy_atol=0.1, gauge="raise")
    assert ps.svd(A, full_matrices=False, **kw).S.shape == (kept,)
    loss = svd_loss(random_like(A, seed=4), backend, **kw)
    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    assert rel_err(g, fd_grad(loss, A)) < 1e-7


def test_a_cut_multiplet_warns_for_a_basis_dependent_loss(backend) -> None:
    A = svd_matrix(m=5, s=[3.0, 2.0, 2.0, 1.0])
    X = A.clone().requires_grad_()
    U, S, Vh = ps.svd(X, k=2, backend=backend)  # multiplets="cut": as a fixed k
    with pytest.warns(ps.GaugeWarning):
        (U[:, 1] * random_like(U[:, 1], seed=5)).sum().backward()


def test_svd_forward_mode_and_torch_func() -> None:
    A = svd_matrix(s=SPREAD)
    dA = random_like(A, seed=5)

    def err(X):
        return ps.svd(X, rtol=0.2, return_error=True).error

    g = torch.func.grad(err)(A)
    X = A.clone().requires_grad_()
    (g0,) = torch.autograd.grad(err(X), X)
    assert rel_err(g, g0) < 1e-14
    assert rel_err(torch.func.jacrev(err)(A), g0) < 1e-14
    _, t = torch.func.jvp(err, (A,), (dA,))
    assert float(t) == pytest.approx(float(fd_directional(err, A, dA)), rel=1e-8)
    # U Vh along dA, against differences
    f = lambda X: (lambda r: r.U @ r.Vh)(ps.svd(X, atol=2.0))  # noqa: E731
    _, t = torch.func.jvp(f, (A,), (dA,))
    assert rel_err(t, fd_directional(f, A, dA)) < 1e-8


# --------------------------------------------------------------- batches

BATCH = [SPREAD, [4.0, 3.5, 3.0, 0.5], [4.0, 1.0, 0.5, 0.2]]  # rtol=0.45: 2, 3, 1


def batch_matrix(dtype=F64):
    return torch.stack([svd_matrix(dtype, s=s, seed=i) for i, s in enumerate(BATCH)])


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_a_batch_is_padded_to_its_largest_rank(dtype, backend) -> None:
    A = batch_matrix(dtype)
    U, S, Vh, err, rel, r = ps.svd(A, rtol=0.45, return_error=True, backend=backend)
    assert r.tolist() == [2, 3, 1]
    assert U.shape == (3, 6, 3) and S.shape == (3, 3) and Vh.shape == (3, 3, 4)
    for b, rb in enumerate(r.tolist()):
        # zeros past each matrix's rank, and each matrix its own truncation
        assert torch.all(S[b, rb:] == 0) and torch.all(U[b, :, rb:] == 0)
        assert torch.all(Vh[b, rb:] == 0)
        one = ps.svd(A[b], rtol=0.45, return_error=True, backend=backend)
        assert torch.allclose(S[b, :rb], one.S, atol=1e-12)
        assert torch.allclose(U[b, :, :rb] @ Vh[b, :rb], one.U @ one.Vh, atol=1e-12)
        assert float(err[b]) == pytest.approx(float(one.error), abs=1e-12)
        assert float(rel[b]) == pytest.approx(float(one.rel_error), abs=1e-12)


def test_a_padded_batch_has_each_matrix_s_gradient(backend) -> None:
    """The padding is constant: a loss that touches it (a linear term in U sees
    the zero columns) has the gradient of each matrix's own fixed-rank
    problem, and the batch gradient matches finite differences. (Real: a
    linear term in U is basis free up to signs, which are discrete.)"""
    A = batch_matrix(F64)
    W, Wu = random_like(A, seed=6), random_like(A[..., :3], seed=7)

    def loss(X):
        U, S, Vh, err, _, _ = ps.svd(X, rtol=0.45, return_error=True, backend=backend)
        return ((U @ Vh) * W).sum() + (U * Wu).sum() + S.sum() + err.sum()

    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    for b in range(3):
        Y = A[b].clone().requires_grad_()
        U, S, Vh, err, _, r = ps.svd(Y, rtol=0.45, return_error=True, backend=backend)
        one = ((U @ Vh) * W[b]).sum() + (U * Wu[b, :, : int(r)]).sum() + S.sum() + err
        (gb,) = torch.autograd.grad(one, Y)
        assert rel_err(g[b], gb) < 1e-12
    assert rel_err(g, fd_grad(loss, A)) < 1e-7


def test_vmap_pads_like_a_batch() -> None:
    A = batch_matrix()
    got = torch.func.vmap(lambda X: ps.svd(X, rtol=0.45, return_error=True))(A)
    want = ps.svd(A, rtol=0.45, return_error=True)
    assert type(got) is ps.TruncatedSVDResult
    assert got.rank.tolist() == [2, 3, 1]
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-12)
    # and its gradient through vmap
    f = lambda X: ps.svd(X, rtol=0.45, return_error=True).error  # noqa: E731
    g = torch.func.vmap(torch.func.grad(f))(A)
    X = A.clone().requires_grad_()
    (g0,) = torch.autograd.grad(ps.svd(X, rtol=0.45, return_error=True).error.sum(), X)
    assert rel_err(g, g0) < 1e-12


def test_an_empty_batch() -> None:
    A = torch.zeros(0, 5, 3, dtype=F64)
    assert ps.svd(A, rtol=0.1).S.shape == (0, 3)  # the cap: min(m, n)
    assert ps.svd(A, k=2, atol=0.0).S.shape == (0, 2)  # the cap: k
    res = ps.svd(A, k=2, return_error=True)
    assert res.error.shape == (0,) and res.rank.shape == (0,)


# ------------------------------------------------------------------ eigh

LAMBDA = [-3.0, -1.0, 0.5, 2.0, 4.0]
# rule, largest: the kept eigenvalues (ascending)
EIGH_RULES = [
    (dict(k=2), True, [2.0, 4.0]),
    (dict(k=2), False, [-3.0, -1.0]),
    (dict(atol=0.2), True, [0.5, 2.0, 4.0]),
    (dict(atol=0.2), False, [-3.0, -1.0]),  # -lambda > 0.2
    (dict(rtol=0.1), True, [0.5, 2.0, 4.0]),  # above 0.1 * 4
    (dict(rtol=0.5), False, [-3.0]),  # below -0.5 * 3
    (dict(error_atol=4.2), True, [4.0]),  # ||(-3, -1, .5, 2)|| = 3.775
    (dict(error_atol=4.2), False, [-3.0, -1.0, 0.5, 2.0]),  # ||(2, 4)|| = 4.47
    (dict(k=3, rtol=0.1), False, [-3.0, -1.0]),
    (dict(error_atol=10.0), True, []),
]


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("kw, largest, kept", EIGH_RULES, ids=repr)
def test_eigh_keeps_by_order_and_reports_the_error(
    kw, largest, kept, dtype, backend
) -> None:
    H = hermitian_with_spectrum(LAMBDA, dtype=dtype, seed=1)
    w, V, err, rel, r = ps.eigh(
        H, largest=largest, **kw, return_error=True, backend=backend
    )
    assert w.tolist() == pytest.approx(kept, abs=1e-12)
    assert V.shape == (5, len(kept)) and int(r) == len(kept)
    discarded = [x for x in LAMBDA if all(abs(x - y) > 1e-9 for y in kept)]
    assert float(err) == pytest.approx(math.hypot(*discarded), abs=1e-12)
    R = H - (V * w.to(dtype)) @ V.mH
    assert float(err) == pytest.approx(float(torch.linalg.matrix_norm(R)), abs=1e-12)
    assert float(rel) == pytest.approx(float(err) / math.hypot(*LAMBDA), rel=1e-12)


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize(
    "kw", [dict(k=2), dict(atol=0.2), dict(error_atol=4.2)], ids=repr
)
def test_eigh_gradient_matches_finite_differences(kw, largest, uplo, backend) -> None:
    H = hermitian_with_spectrum(LAMBDA, dtype=C128, seed=2)
    A = torch.tril(H) if uplo == "L" else torch.triu(H)  # only the triangle is read
    P = random_like(H, seed=7)

    def loss(X):
        w, V, err, rel, _ = ps.eigh(
            X, uplo, largest=largest, **kw, return_error=True, backend=backend
        )
        return (w**2).sum() + ((V @ V.mH) * P.conj()).real.sum() + 2 * err + rel

    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    assert rel_err(g, fd_grad(loss, A)) < 1e-7


def test_eigh_batch_pads_away_from_the_wanted_end(backend) -> None:
    H = torch.stack(
        [
            hermitian_with_spectrum([-1.0, 0.5, 2.0, 3.0], seed=1),  # 3 above 0.2
            hermitian_with_spectrum([-1.0, -0.5, 0.1, 3.0], seed=2),  # 1
        ]
    )
    w, V, _, _, r = ps.eigh(H, atol=0.2, return_error=True, backend=backend)
    assert r.tolist() == [3, 1] and w.shape == (2, 3)
    assert w[1, :2].tolist() == [0.0, 0.0] and torch.all(V[1, :, :2] == 0)
    assert w[1, 2] == pytest.approx(3.0)
    w, V, _, _, r = ps.eigh(-H, atol=0.2, largest=False, return_error=True)
    assert r.tolist() == [3, 1] and w[1, 1:].tolist() == [0.0, 0.0]
    assert w[1, 0] == pytest.approx(-3.0)


# --------------------------------------------------- the iterative path


def decaying(m, n, dtype=F64, seed=1):
    return matrix_with_spectrum(
        [10 * 0.7**i for i in range(min(m, n))], m, n, dtype, seed
    )


def iterative_grads(A, backend="torch", **kw):
    W = random_like(A, seed=8)
    X = A.clone().requires_grad_()
    U, S, Vh, err, rel, r = ps.svd(
        X, full_matrices=False, **kw, return_error=True, backend=backend
    )
    loss = ((U @ Vh) * W.conj()).real.sum() + (S**2).sum() + err + rel
    (g,) = torch.autograd.grad(loss, X)
    return (S.detach(), err.detach(), r), g


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("kw", [dict(rtol=0.05), dict(atol=0.5, multiplets="down")])
def test_randomized_cuts_inside_the_top_k(kw, dtype, backend) -> None:
    """10 * 0.7**i > 0.5 for i <= 8: 9 of the top 10. The error of the
    iterative path, ||A - U_r U_r^H A||, and its gradient equal the full
    path's (the discarded singular values)."""
    A = decaying(60, 50, dtype)
    (S, err, r), g = iterative_grads(A, backend, k=10, method="randomized", **kw)
    (S0, err0, r0), g0 = iterative_grads(A, k=10, method="full", **kw)
    assert int(r) == int(r0) == 9
    assert torch.allclose(S, S0, rtol=1e-12)
    assert float(err) == pytest.approx(float(err0), rel=1e-10)
    assert rel_err(g, g0) < 1e-9


def test_randomized_moves_the_cut_out_of_a_cluster(backend) -> None:
    s = [5.0, 4.0, 3.0, 3.0, 3.0, 1.0] + [0.5 * 0.7**i for i in range(24)]
    A = matrix_with_spectrum(s, 40, 30, seed=3)
    for mult, kept in (("cut", 4), ("down", 2)):
        got = ps.svd(A, k=4, multiplets=mult, method="randomized", backend=backend)
        assert got.S.shape == (kept,)
        assert torch.allclose(got.S, torch.tensor(s[:kept], dtype=F64), rtol=1e-12)


def test_randomized_eigh_with_a_tolerance(backend) -> None:
    w0 = [10 * 0.7**i for i in range(30)]
    H = hermitian_with_spectrum(w0, seed=3)
    kw = dict(k=8, atol=0.6, return_error=True)  # 10 * 0.7**i > 0.6: i <= 7, all 8
    X = H.clone().requires_grad_()
    w, V, err, _, r = ps.eigh(X, **kw, method="randomized", backend=backend)
    w0_, V0, err0, _, r0 = ps.eigh(H, **kw, method="full")
    assert int(r) == int(r0) == 8
    assert torch.allclose(w, w0_, rtol=1e-12)
    assert float(err.detach()) == pytest.approx(float(err0), rel=1e-10)
    kw = dict(k=8, atol=1.0)  # i <= 6: 7 of the top 8
    assert ps.eigh(H, **kw, method="randomized", backend=backend)[0].shape == (7,)


def test_randomized_rule_has_forward_mode(backend) -> None:
    """Forward mode through a rule on the iterative path: the top-k jvp (on
    Julia, its truncated pushforward; the block's values, which the rule
    reads, are a non-differentiable output) gives the kept values' and
    vectors' tangents, equal to the full path's (a gap at the cut) and to
    finite differences of gauge-invariant outputs."""
    A = decaying(60, 50)
    dA = random_like(A, seed=6)
    H = hermitian_with_spectrum([10 * 0.7**i for i in range(30)], seed=3)
    dH = random_like(H, seed=7)
    dH = dH + dH.mT

    def svd_out(method, backend=backend):
        def f(X):
            U, S, Vh = ps.svd(X, k=10, rtol=0.05, method=method, backend=backend)
            return S, U @ Vh

        return f

    def eigh_out(method, backend=backend):
        def f(X):
            w, V = ps.eigh(X, k=8, atol=0.6, method=method, backend=backend)
            return w, V @ V.mT

        return f

    for make, X, dX, kept in ((svd_out, A, dA, 9), (eigh_out, H, dH, 8)):
        with fwAD.dual_level():
            out = make("randomized")(fwAD.make_dual(X, dX))
            tangents = [fwAD.unpack_dual(o).tangent for o in out]
        assert out[0].shape == (kept,)
        _, full = torch.func.jvp(make("full", "torch"), (X,), (dX,))
        for t, t0 in zip(tangents, full):
            assert rel_err(t, t0) < 1e-8
        full_f = make("full", "torch")
        fd = fd_directional(lambda Y, f=full_f: f(Y)[1], X, dX)
        assert rel_err(tangents[1], fd) < 1e-6


def test_what_the_iterative_path_cannot_compute_raises() -> None:
    A = decaying(60, 50)
    for kw, what in (
        (dict(k=5, error_atol=0.1), "error_atol / error_rtol"),
        (dict(k=5, error_rtol=0.1), "error_atol / error_rtol"),
        (dict(k=5, multiplets="up"), "multiplets='up'"),
    ):
        with pytest.raises(ps.InputError, match=what) as e:
            ps.svd(A, method="randomized", full_matrices=False, **kw)
        assert "method='auto'" in str(e.value)
    with pytest.raises(ps.InputError, match="pass k"):
        ps.svd(A, rtol=0.1, method="randomized")


def test_auto_takes_the_full_path_for_the_discarded_weight(monkeypatch) -> None:
    """Where auto would iterate (thresholds lowered as in test_topk), a rule
    that needs the spectrum past k sends it to the full path."""
    monkeypatch.setattr(T, "AUTO_MIN_SIZE", 0)
    monkeypatch.setattr(T, "AUTO_TRY", 1e9)
    monkeypatch.setattr(T, "AUTO_TRIAL", 1e9)
    monkeypatch.setattr(T, "SVD_FULL_COST", 1e3)
    iterated = []
    real = TK.svd_topk
    monkeypatch.setattr(TK, "svd_topk", lambda *a: iterated.append(1) or real(*a))
    A = decaying(80, 70)
    ps.svd(A, k=4, rtol=0.01)
    assert iterated == [1]  # the tolerance: iterated
    res = ps.svd(A, k=4, error_atol=1e-3, return_error=True)  # k decides: 4
    assert iterated == [1]  # the discarded weight: the full path
    s = torch.linalg.svdvals(A)
    assert float(res.error) == pytest.approx(float(torch.linalg.vector_norm(s[4:])))


# ------------------------------------------------------------- operators


def operator(A):
    return ps.LinearOperator(
        tuple(A.shape), lambda X: A @ X, lambda Y: A.mH @ Y, dtype=A.dtype
    )


def test_an_operator_cuts_inside_the_top_k() -> None:
    A = decaying(60, 50)
    B = A.clone().requires_grad_()
    got = ps.svd_topk(operator(B), 10, rtol=0.05, method="randomized")
    want = ps.svd(A, k=10, rtol=0.05, method="full")
    assert got.S.shape == (9,) and torch.allclose(got.S, want.S, rtol=1e-12)
    got.S.sum().backward()
    X = A.clone().requires_grad_()
    ps.svd(X, k=10, rtol=0.05, method="full").S.sum().backward()
    assert rel_err(B.grad, X.grad) < 1e-9
    H = hermitian_with_spectrum([10 * 0.7**i for i in range(30)], seed=3)
    w = ps.eigh_topk(operator(H), 8, atol=1.0, method="randomized")[0]
    assert w.shape == (7,)
    assert ps.svd_topk(operator(A), 0).S.shape == (0,)
    assert ps.svd_topk(operator(A), 100, atol=0.0).S.shape == (50,)  # a maximum


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(error_atol=0.1), "error_atol / error_rtol"),
        (dict(multiplets="up"), "multiplets='up'"),
        (dict(return_error=True), "return_error=True needs"),
    ],
)
def test_what_an_operator_cannot_give_raises(kw, match) -> None:
    A = decaying(60, 50)
    with pytest.raises(ps.InputError, match=match):
        ps.svd_topk(operator(A), 5, **kw)
    H = hermitian_with_spectrum([10 * 0.7**i for i in range(30)], seed=3)
    with pytest.raises(ps.InputError, match=match):
        ps.eigh_topk(operator(H), 5, **kw)
    # a tensor takes them all
    assert ps.svd_topk(A, 5, **kw) is not None


# ------------------------------------------------------------ bad rules


def julia_starts() -> int:
    return getattr(_bridge.runtime, "starts", 0)


@pytest.mark.parametrize("name", ["atol", "rtol", "error_atol", "error_rtol"])
@pytest.mark.parametrize(
    "value", [-1.0, -1e-300, float("nan"), float("inf"), True, "1"]
)
def test_a_bad_tolerance_is_an_input_error(name, value, backend) -> None:
    A = svd_matrix()
    for op, call in (
        ("svd", ps.svd),
        ("eigh", lambda X, **kw: ps.eigh(X @ X.mT, **kw)),
    ):
        with pytest.raises(ps.InputError) as e:
            call(A, **{name: value}, backend=backend)
        assert str(e.value).startswith(f"{op}: {name} must be a finite number >= 0")
        assert f"got {value!r}" in str(e.value)
    assert julia_starts() == 0  # validated before any backend is chosen


@pytest.mark.parametrize(
    "kw, error, match",
    [
        (dict(k=2, multiplets="sideways"), ps.InputError, "multiplets must be 'cut'"),
        (dict(k=2, multiplets=None), ps.InputError, "multiplets must be 'cut'"),
        (dict(multiplets="down"), ps.InputError, "none is asked for"),
        (dict(rtol=0.1, return_error=1), ps.InputTypeError, "return_error must be"),
        (dict(rtol=0.1, out=(torch.empty(0),) * 3), ps.InputError, "out= is not"),
        (dict(k=-1, atol=0.0), ps.InputError, "k must be an integer >= 0"),
        (dict(rtol=0.1, method="lanczos"), ps.InputError, "method must be"),
        (dict(min_rank=2), ps.InputError, "min_rank=2 is the floor of a truncation"),
        (dict(k=2, min_rank=3), ps.InputError, "min_rank = 3 exceeds k = 2"),
        (
            dict(atol=0.1, min_rank=-1),
            ps.InputError,
            "min_rank must be an integer >= 0",
        ),
        (dict(atol=0.1, min_rank=1.5), ps.InputError, "min_rank must be an integer"),
    ],
)
def test_conflicting_or_bad_rules(kw, error, match, backend) -> None:
    with pytest.raises(error, match=match):
        ps.svd(svd_matrix(), backend=backend, **kw)
    assert julia_starts() == 0


@pytest.mark.parametrize(
    "kw, match",
    [
        # a rule without k runs the full path
        (dict(rtol=0.1, oversample=4), "oversample configures"),
        (dict(atol=0.0, method="randomized"), "pass k"),
        # and so does one that reads the spectrum past k
        (dict(k=5, error_rtol=0.1, oversample=4), "oversample .* full"),
        (dict(k=2, multiplets="up", n_iter=3), "n_iter .* full"),
        (dict(k=2, error_atol=0.1, backward_maxiter=9), "backward_maxiter .* top k"),
    ],
)
def test_iteration_keywords_where_nothing_iterates(kw, match, backend) -> None:
    """Every argument is used or refused: the iteration keywords configure
    nothing where a rule takes the full decomposition whatever the data."""
    with pytest.raises(ps.InputError, match=match):
        ps.svd(svd_matrix(), backend=backend, **kw)
    with pytest.raises(ps.InputError, match=match):
        ps.eigh(hermitian_with_spectrum(LAMBDA, seed=1), backend=backend, **kw)
    assert julia_starts() == 0


def test_iteration_keywords_with_a_rule_inside_the_top_k(backend) -> None:
    """A rule that cuts inside the top k (atol, rtol, multiplets="down") may
    iterate: the iteration keywords are used, not refused."""
    A = decaying(60, 50)
    for kw in (dict(rtol=0.05), dict(atol=0.5, multiplets="down")):
        got = ps.svd(A, k=10, method="randomized", oversample=6, n_iter=200, **kw)
        ref = ps.svd(A, k=10, method="full", **kw)
        assert got.S.shape == ref.S.shape == (9,)
        assert torch.allclose(got.S, ref.S, rtol=1e-12)


def test_largest_false_needs_k_or_a_tolerance(backend) -> None:
    """largest=False picks the end the rules read from: with k or a
    tolerance it is used; with neither (return_error alone keeps the whole
    spectrum) it would be ignored, and raises."""
    H = hermitian_with_spectrum(LAMBDA, seed=1)
    assert ps.eigh(H, atol=0.2, largest=False, backend=backend)[0].shape == (2,)
    for kw in (dict(), dict(return_error=True)):
        with pytest.raises(ps.InputError, match="largest=False .* needs k"):
            ps.eigh(H, largest=False, backend=backend, **kw)
    # a numpy bool is a bool here as for the other flags
    res = ps.eigh(H, atol=0.2, return_error=np.True_, backend=backend)
    assert int(res.rank) == 3


def test_out_with_a_rule_is_an_input_error() -> None:
    A = svd_matrix()
    out = tuple(torch.empty(0, dtype=F64) for _ in range(3))
    with pytest.raises(ps.InputError, match="out= is not supported with k"):
        ps.svd(A, rtol=0.1, out=out)
    with pytest.raises(ps.InputError, match="out= is not supported with k"):
        ps.eigh(A @ A.mT, atol=0.0, out=out[:2])


@pytest.mark.parametrize("backend", ["torch", "julia"])
def test_min_rank_is_a_floor(backend, fake) -> None:
    """min_rank keeps at least that many triplets / eigenpairs when a
    tolerance would keep fewer (ITensor's mindim), zeros included, with the
    gradient of the fixed-rank problem at that rank."""
    A = matrix_with_spectrum([4.0, 3.0, 2.0, 1.0], 5, 4, seed=1)
    res = ps.svd(A, atol=3.5, min_rank=2, return_error=True, backend=backend)
    assert int(res.rank) == 2 and res.S.shape == (2,)
    assert float(res.error) == pytest.approx(5**0.5, rel=1e-12)
    X = A.clone().requires_grad_()
    U, S, Vh = ps.svd(X, atol=3.5, min_rank=2, backend=backend)
    loss = lambda Y: (lambda U, S, Vh: (U @ Vh).sum() + S.sum())(  # noqa: E731
        *ps.svd(Y, atol=3.5, min_rank=2, backend=backend)
    )
    g = torch.autograd.grad(loss(X), X)[0]
    assert rel_err(g, fd_grad(loss, A)) < 1e-6
    H = hermitian_with_spectrum([-1.0, 0.5, 2.0, 3.0], seed=2)
    w, V = ps.eigh(H, atol=2.5, min_rank=3, backend=backend)
    assert w.tolist() == pytest.approx([0.5, 2.0, 3.0])
    Z = torch.zeros(3, 3, dtype=F64)
    assert ps.svd(Z, atol=0.0, min_rank=1, backend=backend).S.tolist() == [0.0]


@pytest.mark.parametrize("backend", ["torch", "julia"])
def test_eigh_by_magnitude(backend, fake) -> None:
    """by='magnitude' keeps the eigenpairs largest in |lambda| (the rules read
    |lambda|), largest first, padded after; the error is the discarded
    eigenvalues' norm; the gradient of a loss of the kept pairs matches
    finite differences; bad combinations are refused (issue 23, item 2)."""
    lam = [-3.0, -0.5, 0.2, 1.0, 2.0]
    H = hermitian_with_spectrum(lam, seed=6)
    res = ps.eigh(H, k=2, by="magnitude", return_error=True, backend=backend)
    assert res.eigenvalues.tolist() == pytest.approx([-3.0, 2.0])
    assert float(res.error) == pytest.approx((0.25 + 0.04 + 1.0) ** 0.5, rel=1e-12)
    w = ps.eigh(H, atol=0.9, by="magnitude", backend=backend)[0]
    assert w.tolist() == pytest.approx([-3.0, 2.0, 1.0])
    # a batch of two ranks: padding after the kept pairs
    B = torch.stack([H, hermitian_with_spectrum([-0.1, 0.1, 0.2, 0.3, 4.0], seed=7)])
    wb, Vb, _, _, rb = ps.eigh(B, atol=0.9, by="magnitude", return_error=True)
    assert rb.tolist() == [3, 1] and wb[1].tolist() == pytest.approx([4.0, 0, 0])

    def loss(X):
        w, V = ps.eigh(X, k=2, by="magnitude", backend=backend)
        P = V @ V.mH  # the kept pairs' projector: gauge invariant
        return (P * W).sum() + (w**3).sum()

    W = random_like(H, seed=8)
    X = H.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X)
    assert rel_err(g, fd_grad(loss, H)) < 1e-6
    for kw, match in (
        (dict(k=2, by="abs"), "by must be 'value' or 'magnitude'"),
        (dict(k=2, by="magnitude", largest=False), "largest=False has no meaning"),
        (dict(k=2, by="magnitude", method="randomized"), "drop method='randomized'"),
        (dict(by="magnitude"), "orders a truncation, but none is asked for"),
    ):
        with pytest.raises(ps.InputError, match=match):
            ps.eigh(H, **kw, backend=backend)


@pytest.mark.parametrize("backend", ["torch", "julia"])
def test_the_discarded_values_themselves(backend, fake) -> None:
    """res.discarded: the values past each rank, read from the wanted end,
    left-aligned and zero-padded, differentiable; their norm is the error
    (issue 23, item 2); None on the iterative path, which never has them."""
    d = torch.tensor([[3.0, 2.0, 1.0, 0.5], [3.0, 0.2, 0.1, 0.05]], dtype=F64)
    A = torch.diag_embed(d).requires_grad_()
    res = ps.svd(A, atol=0.75, return_error=True, backend=backend)
    assert res.rank.tolist() == [3, 1] and len(res) == 6
    assert res.discarded.tolist() == [[0.5, 0.0, 0.0], [0.2, 0.1, 0.05]]
    torch.testing.assert_close(
        torch.linalg.vector_norm(res.discarded, dim=-1), res.error
    )
    (g,) = torch.autograd.grad(res.discarded.sum(), A)
    assert g.diagonal(dim1=-2, dim2=-1).tolist() == [[0, 0, 0, 1], [0, 1, 1, 1]]
    H = torch.diag(torch.tensor([-1.0, 0.5, 2.0, 3.0], dtype=F64))
    for kw, expect in (
        (dict(k=2), [0.5, -1.0]),  # from the largest end: descending
        (dict(k=2, largest=False), [2.0, 3.0]),  # from the smallest: ascending
        (dict(k=2, by="magnitude"), [-1.0, 0.5]),  # decreasing |lambda|
    ):
        assert (
            ps.eigh(H, **kw, return_error=True, backend=backend).discarded.tolist()
            == expect
        )
    A = matrix_with_spectrum([4.0, 3.0, 2.0, 1.0], 6, 4, seed=2)
    iterative = ps.svd(A, k=2, method="randomized", return_error=True)
    assert iterative.discarded is None


# ------------------------------------------ ties: one computation of the error


@pytest.mark.parametrize("backend", ["torch", "julia"])
def test_a_tie_keeps_the_fewer_values(backend, fake) -> None:
    """Keeping 1 of (0.7, 0.3) discards exactly 0.3: error_atol = 0.3 keeps
    one value, and the error returned is that 0.3 (issue 23, item 4)."""
    A = torch.diag(torch.tensor([0.7, 0.3], dtype=F64))
    res = ps.svd(A, error_atol=0.3, return_error=True, backend=backend)
    assert int(res.rank) == 1 and float(res.error) == 0.3
    H = torch.diag(torch.tensor([-0.3, 0.7], dtype=F64))
    w, _, err, _, r = ps.eigh(H, error_atol=0.3, return_error=True, backend=backend)
    assert int(r) == 1 and w.tolist() == [0.7] and float(err) == 0.3


@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_the_error_fed_back_keeps_the_rank(op) -> None:
    """For 400 random spectra and each rule (discarded weight, k, rtol), the
    returned error given back as error_atol selects the same rank: the rule
    and the error are the same numbers (forward.truncation.tail_norms)."""
    g = torch.Generator().manual_seed(23)
    x = torch.rand(400, 8, generator=g, dtype=F64)
    if op == "svd":
        A = torch.diag_embed(x.sort(-1, descending=True).values)
        run = functools.partial(ps.svd, A, return_error=True)
    else:
        A = torch.diag_embed(x - 0.5)  # both signs
        run = functools.partial(ps.eigh, A, return_error=True)
    for kw in (dict(error_rtol=0.3), dict(k=3), dict(rtol=0.5), dict(error_atol=0.8)):
        first = run(**kw)
        changed = sum(
            int(run_one.rank) != int(r)
            for r, e, Ai in zip(first.rank, first.error, A)
            for run_one in [
                (ps.svd if op == "svd" else ps.eigh)(
                    Ai, error_atol=float(e), return_error=True
                )
            ]
        )
        assert changed == 0, (kw, changed)


def test_tail_norms() -> None:
    """A single discarded value is its own error, powers of two scale exactly
    (no underflow of the squares), the last tail is 0, empty spectra work,
    and the gradient is x_i / error on the discarded values."""
    t = torch.tensor([4.0, 3.0], dtype=F64)
    assert tail_norms(t).tolist() == [5.0, 3.0, 0.0]
    assert tail_norms(t * 2.0**-600).tolist() == [5 * 2.0**-600, 3 * 2.0**-600, 0.0]
    assert tail_norms(torch.zeros(3, dtype=F64)).tolist() == [0.0] * 4
    assert tail_norms(torch.zeros(2, 0, dtype=F64)).shape == (2, 1)
    x = torch.tensor([4.0, 3.0, 0.0], dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(tail_norms(x)[1], x)
    assert g.tolist() == [0.0, 1.0, 0.0]
    (g,) = torch.autograd.grad(tail_norms(x)[2], x)  # error 0: gradient 0
    assert g.tolist() == [0.0, 0.0, 0.0]


# ---------------------------------------------- the Julia backend's rule


def test_the_julia_backend_asks_julia_for_the_ranks(fake) -> None:
    """The ranks come from PySpectral.truncation_rank through the glue (the
    stand-in runs the native rule on what the glue receives: one call per
    decomposition, the spectra as K x B columns, read from the wanted end);
    a fixed k asks nothing."""
    spectra = []
    ranks = fake.truncation_ranks_batched

    @functools.wraps(ranks)  # the glue's parameters, by which the call is recorded
    def spy(*args):
        spectra.append(fake._wrap(args[0]).copy())  # the (address, code, dims) read
        return ranks(*args)

    fake.truncation_ranks_batched = spy  # before the stand-in starts
    A = batch_matrix(C128)
    ps.svd(A, rtol=0.45, backend="julia")
    (call,) = fake.calls_to("truncation_ranks_batched")
    assert call.args[0].shape == (4, 3)
    assert call.named["rtol"] == 0.45 and call.named["multiplets"] == "cut"
    assert call.named["k"] is None and call.named["atol"] is None
    H = hermitian_with_spectrum(LAMBDA, seed=1)
    w = ps.eigh(H, atol=0.2, largest=False, backend="julia")[0]
    x = torch.from_numpy(spectra[-1][:, 0])
    assert torch.allclose(x, -torch.tensor(LAMBDA, dtype=F64), atol=1e-12)  # -lambda
    assert len(spectra) == 2
    assert w.tolist() == pytest.approx([-3.0, -1.0])
    n = len(fake.calls_to("truncation_ranks_batched"))
    ps.svd(A, k=2, backend="julia")
    assert len(fake.calls_to("truncation_ranks_batched")) == n


@needs_julia
@pytest.mark.parametrize("x, kw, r", RANKS, ids=lambda v: repr(v))
def test_real_julia_truncation_rank(x, kw, r) -> None:
    X = torch.tensor(x, dtype=F64).reshape(1, -1)
    ranks, tails = _svd.truncation_ranks("svd", X, rule(**kw), None)
    assert ranks.tolist() == [r] and tails.shape == (1, len(x) + 1)


@needs_julia
def test_real_julia_tails_and_ranks_are_the_native_numbers() -> None:
    """Julia's tail norms, which its ranks compare and the Julia backend
    returns as errors, are the native ones to the last ulp or one ulp
    apart (torch's sqrt is not correctly rounded, Julia's is: the same sums in
    the same order otherwise), and the error rules keep the same ranks on
    200 random spectra."""
    g = torch.Generator().manual_seed(5)
    x = torch.rand(200, 9, generator=g, dtype=F64).sort(-1, descending=True).values
    for r in (rule(error_rtol=0.4), rule(error_atol=0.9)):
        ranks, tails = _svd.truncation_ranks("svd", x, r, None)
        assert torch.equal(ranks, truncation_rank(x, r, None))
        ulps = (tails - tail_norms(x)).abs() / torch.finfo(F64).eps
        assert float((ulps / tails.clamp(min=1e-300)).max()) <= 1.0


@needs_julia
@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_real_julia_error_fed_back_keeps_the_rank(op) -> None:
    """The Julia backend's errors, given back as error_atol, keep its ranks
    (Julia's rule and errors are the same numbers), on 100 random spectra."""
    g = torch.Generator().manual_seed(29)
    x = torch.rand(100, 8, generator=g, dtype=F64)
    A = torch.diag_embed(x.sort(-1, descending=True).values if op == "svd" else x - 0.5)
    fn = ps.svd if op == "svd" else ps.eigh
    for kw in (dict(error_rtol=0.3), dict(k=3), dict(rtol=0.5)):
        first = fn(A, **kw, return_error=True, backend="julia")
        again = [
            int(fn(Ai, error_atol=float(e), return_error=True, backend="julia").rank)
            for Ai, e in zip(A, first.error)
        ]
        assert again == first.rank.tolist(), kw


@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_the_julia_backend_returns_julias_errors(op, fake) -> None:
    """On the Julia backend the errors are Julia's tail norms (the numbers
    its rule compared; here the stand-in's, a correctly rounded sqrt), with
    the native gradient; and an error fed back keeps the rank there too."""
    g = torch.Generator().manual_seed(3)
    x = torch.rand(60, 7, generator=g, dtype=F64)
    A = torch.diag_embed(x.sort(-1, descending=True).values if op == "svd" else x - 0.5)
    fn = ps.svd if op == "svd" else ps.eigh
    X = A.clone().requires_grad_()
    res = fn(X, k=3, return_error=True, backend="julia")
    (call,) = fake.calls_to("truncation_ranks_batched")
    assert call.named["k"] == 3  # asked for the errors though the rank is fixed
    res.error.sum().backward()
    Y = A.clone().requires_grad_()
    nat = fn(Y, k=3, return_error=True)
    nat.error.sum().backward()
    assert torch.allclose(res.error, nat.error, rtol=4 * torch.finfo(F64).eps, atol=0)
    assert torch.allclose(X.grad, Y.grad, rtol=1e-12, atol=1e-14)
    for Ai, e, r in zip(A, res.error, res.rank):
        again = fn(Ai, error_atol=float(e), return_error=True, backend="julia")
        assert int(again.rank) == int(r)


@needs_julia
@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
@pytest.mark.parametrize("kw", GRAD_RULES, ids=repr)
def test_real_julia_svd_rules_agree_with_native(kw, dtype) -> None:
    A = batch_matrix(dtype)
    W = random_like(A, seed=9)
    grads = []
    for backend in ("julia", "torch"):
        X = A.clone().requires_grad_()
        res = ps.svd(X, full_matrices=False, **kw, return_error=True, backend=backend)
        loss = ((res.U @ res.Vh) * W.conj()).real.sum() + res.S.sum() + res.error.sum()
        grads.append((res, torch.autograd.grad(loss, X)[0]))
    (jl, g), (nat, g0) = grads
    assert torch.equal(jl.rank, nat.rank)
    assert torch.allclose(jl.S, nat.S, atol=1e-12)
    assert torch.allclose(jl.error, nat.error, atol=1e-12)
    assert rel_err(g, g0) < 1e-10


@needs_julia
@pytest.mark.parametrize("largest", [True, False])
def test_real_julia_eigh_rules_agree_with_native(largest) -> None:
    H = hermitian_with_spectrum(LAMBDA, dtype=C128, seed=1)
    for kw in (dict(k=2), dict(atol=0.2), dict(error_atol=4.2), dict(k=3, rtol=0.1)):
        out = []
        for backend in ("julia", "torch"):
            X = H.clone().requires_grad_()
            w, V, err, _, r = ps.eigh(
                X, largest=largest, **kw, return_error=True, backend=backend
            )
            loss = (w**2).sum() + (V @ V.mH).real.sum() + err
            out.append((w, r, err, torch.autograd.grad(loss, X)[0]))
        (w, r, err, g), (w0, r0, err0, g0) = out
        assert torch.equal(r, r0) and torch.allclose(w, w0, atol=1e-12)
        assert torch.allclose(err, err0, atol=1e-12) and rel_err(g, g0) < 1e-10
