"""svd, svdvals, svd_function at distinct spectra: gradcheck and gradgradcheck,
full matrices, top-k, forward against torch.linalg, float32, and no mutation of
the incoming gradient. Degenerate spectra are in test_degenerate.py."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from _fake_julia import installed
from _julia import needs_julia
from _spectra import (
    clusters,
    fd_grad,
    gauge_free_cotangent,
    grad,
    inner,
    matrix_with_spectrum,
    randn,
    random_like,
    rel_err,
)
from torch.autograd import gradcheck, gradgradcheck

import pyspectral as ps
from pyspectral._settings import options
from pyspectral.pullbacks.svd import svd_pullback

SHAPES = [(5, 3), (3, 5), (4, 4), (2, 5, 3), (2, 1, 3, 4)]
DTYPES = [torch.float64, torch.complex128]
ALL_DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
LOW = {torch.float32: torch.float64, torch.complex64: torch.complex128}


def invariants(U, S, Vh):
    """Gauge-invariant functions of one SVD (a column phase or sign of U
    cancels against V's): polar factor, S, reconstruction, |U|^2, |Vh|^2."""
    return (
        U @ Vh,
        S,
        (U * S.to(U.dtype).unsqueeze(-2)) @ Vh,
        U.abs() ** 2,
        Vh.abs() ** 2,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_svd_gradcheck(shape, dtype) -> None:
    A = randn(*shape, dtype=dtype).requires_grad_()
    assert gradcheck(lambda X: invariants(*ps.svd(X, full_matrices=False)), (A,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 3, 3)])
def test_svd_gradgradcheck(shape, dtype) -> None:
    A = randn(*shape, dtype=dtype).requires_grad_()
    assert gradgradcheck(
        lambda X: invariants(*ps.svd(X, full_matrices=False))[:3], (A,)
    )


# ------------------------------------------------------------ full matrices


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd_full_matrices_gradcheck(shape, dtype) -> None:
    A = randn(*shape, dtype=dtype).requires_grad_()
    k = min(shape[-2:])

    def f(X):
        U, S, Vh = ps.svd(X, full_matrices=True)
        assert U.shape[-1] == shape[-2] and Vh.shape[-2] == shape[-1]
        Up, Vp = U[..., k:], Vh[..., k:, :]
        return U[..., :k] @ Vh[..., :k, :], S, Up @ Up.mH, Vp.mH @ Vp

    assert gradcheck(f, (A,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
def test_full_matrices_complement_projector_where_torch_is_wrong(shape, dtype) -> None:
    """The span of the complement columns (U_perp for tall, V_perp for wide A)
    is a smooth function of A; torch ignores their cotangent, pyspectral folds
    it into the thin pullback."""
    A = randn(*shape, dtype=dtype, seed=2)
    k, big = min(shape), max(shape)
    W = random_like(A, seed=3, shape=(big, big))

    def loss(svd):
        def f(X):
            U, _, Vh = svd(X, full_matrices=True)
            P = U[:, k:] @ U[:, k:].mH if shape[0] > k else Vh[k:].mH @ Vh[k:]
            return inner(P, W)

        return f

    exact = fd_grad(loss(torch.linalg.svd), A)
    assert rel_err(grad(loss(ps.svd), A), exact) < 1e-6
    assert rel_err(grad(loss(torch.linalg.svd), A), exact) > 0.1


# ------------------------------------------------------------------- top-k


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5)])
def test_topk_gradcheck(shape, dtype) -> None:
    A = randn(*shape, dtype=dtype).requires_grad_()

    def f(X):
        U, S, Vh = ps.svd(X, k=2)
        assert U.shape[-1] == 2 and S.shape[-1] == 2 and Vh.shape[-2] == 2
        return invariants(U, S, Vh)

    assert gradcheck(f, (A,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5)])
def test_topk_includes_the_discarded_pairs(shape, dtype) -> None:
    """The top-k gradient matches finite differences; the thin pullback applied
    to the k kept triplets alone (as if A were U_k S_k V_k^H) does not."""
    A = randn(*shape, dtype=dtype)
    W = random_like(A, seed=5)
    W2 = random_like(A, seed=6, shape=(shape[0], shape[0]))
    k = 2

    def loss_k(U, S, Vh):
        return inner(U @ Vh, W) + inner((U * S.to(U.dtype) ** 2) @ U.mH, W2)

    def loss(X):
        return loss_k(*ps.svd(X, k=k))

    exact = fd_grad(loss, A)
    assert rel_err(grad(loss, A), exact) < 1e-6
    kept = [t.detach().requires_grad_() for t in ps.svd(A, k=k)]
    cotangents = torch.autograd.grad(loss_k(*kept), kept)
    naive = svd_pullback(*(t.detach() for t in kept), *cotangents, options())
    assert rel_err(naive, exact) > 1e-2


# ----------------------------------------------------------------- svdvals


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 4), (4, 5), (2, 3, 3)])
def test_svdvals(shape, dtype) -> None:
    A = randn(*shape, dtype=dtype).requires_grad_()
    S0 = torch.linalg.svdvals(A.detach())
    assert torch.allclose(ps.svdvals(A), S0)
    assert torch.allclose(ps.svdvals(A.detach()), S0)
    assert gradcheck(ps.svdvals, (A,))


# ------------------------------------------------------------ svd_function

FUNCTIONS = [
    "polar",
    ("truncate", 2),
    ("threshold", 0.3),
    ("pow", 2),
    ("pow", 0.5),
    ("pow", -1),
    "normalize",
    (torch.sinh, torch.cosh),
]
REFERENCE = {  # f(S) for the forward check, keyed by str(f)
    "polar": torch.ones_like,
    "('truncate', 2)": lambda S: S * (torch.arange(S.shape[-1]) < 2),
    "('threshold', 0.3)": lambda S: (S - 0.3).clamp(min=0),
    "('pow', 2)": lambda S: S**2,
    "('pow', 0.5)": torch.sqrt,
    "('pow', -1)": lambda S: 1 / S,
    "normalize": lambda S: S / S[..., :1],
}


@pytest.mark.parametrize("f", FUNCTIONS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd_function_gradcheck(shape, dtype, f) -> None:
    A = randn(*shape, dtype=dtype, seed=1).requires_grad_()
    assert gradcheck(lambda X: ps.svd_function(X, f), (A,))


@pytest.mark.parametrize("f", FUNCTIONS, ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_svd_function_forward(dtype, f) -> None:
    A = randn(2, 5, 4, dtype=dtype, seed=2)
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    fS = REFERENCE.get(str(f), torch.sinh)(S)
    Y = ps.svd_function(A, f)
    assert Y.dtype == A.dtype and Y.shape == A.shape
    tol = 1e-5 if dtype in LOW else 1e-12
    assert torch.allclose(Y, (U * fS.to(dtype).unsqueeze(-2)) @ Vh, atol=tol)


@pytest.mark.parametrize("f", ["polar", ("pow", 3), ("truncate", 2)], ids=str)
def test_svd_function_gradgradcheck(f) -> None:
    A = randn(4, 3, dtype=torch.complex128).requires_grad_()
    assert gradgradcheck(lambda X: ps.svd_function(X, f), (A,))


# ---------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_torch(shape, dtype) -> None:
    A = randn(*shape, dtype=dtype, seed=4)
    U, S, Vh = ps.svd(A, full_matrices=False)
    U0, S0, Vh0 = torch.linalg.svd(A, full_matrices=False)
    tol = 1e-4 if dtype in LOW else 1e-10
    assert (U.dtype, S.dtype, Vh.dtype) == (U0.dtype, S0.dtype, Vh0.dtype)
    assert (U.shape, S.shape, Vh.shape) == (U0.shape, S0.shape, Vh0.shape)
    assert torch.allclose(S, S0, atol=tol)
    # up to gauge: the same reconstruction; |U^H U0| = I (distinct spectrum)
    assert torch.allclose((U * S.to(dtype).unsqueeze(-2)) @ Vh, A, atol=10 * tol)
    eye = torch.eye(S.shape[-1], dtype=S.dtype).expand(S.shape + S.shape[-1:])
    assert torch.allclose((U.mH @ U0).abs(), eye, atol=100 * tol)
    assert torch.allclose((Vh @ Vh0.mH).abs(), eye, atol=100 * tol)
    Uf, Sf, Vhf = ps.svd(A, full_matrices=True)
    m, n = shape[-2:]
    assert Uf.shape[-2:] == (m, m) and Vhf.shape[-2:] == (n, n)
    assert torch.allclose(Uf.mH @ Uf, torch.eye(m, dtype=dtype), atol=10 * tol)
    assert torch.allclose(Sf, S0, atol=tol)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_forward_matches_torch_at_a_degenerate_spectrum(dtype) -> None:
    """Inside a cluster the basis is arbitrary: U^H U0 is block diagonal with a
    unitary block on each cluster."""
    A = matrix_with_spectrum((5, 2, 2, 1, 0.5), 6, 5, dtype=LOW.get(dtype, dtype))
    A = A.to(dtype)
    U, S, Vh = ps.svd(A, full_matrices=False)
    U0, S0, _ = torch.linalg.svd(A, full_matrices=False)
    tol = 1e-4 if dtype in LOW else 1e-10
    assert torch.allclose(S, S0, atol=tol)
    group = torch.tensor([0, 1, 1, 2, 3])  # which cluster each value is in
    block = group.unsqueeze(-1) == group
    assert torch.equal(clusters(S0), block)
    overlap = U.mH @ U0
    assert float(overlap.masked_fill(block, 0).abs().max()) < 100 * tol
    B = overlap[1:3, 1:3]
    assert torch.allclose(B.mH @ B, torch.eye(2, dtype=dtype), atol=100 * tol)
    assert torch.allclose((U * S.to(dtype)) @ Vh, A, atol=10 * tol)


# ----------------------------------------------------------------- float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_float32_svd_gradients_finite_and_close(dtype) -> None:
    A = matrix_with_spectrum((4, 3, 3, 1), 5, 4, dtype=LOW[dtype], seed=1)
    W = random_like(A, seed=2)

    def loss(X):
        U, S, Vh = ps.svd(X, full_matrices=False)
        return inner(U @ Vh, W.to(X.dtype)) + S.sum()

    g32 = grad(loss, A.to(dtype))
    assert g32.dtype == dtype and torch.isfinite(g32).all()
    assert rel_err(g32.to(LOW[dtype]), grad(loss, A)) < 1e-3


@pytest.mark.parametrize("f", ["polar", ("truncate", 3), ("pow", 2)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_float32_svd_function_gradients_finite_and_close(dtype, f) -> None:
    A = matrix_with_spectrum((4, 3, 3, 1), 5, 4, dtype=LOW[dtype], seed=1)
    W = random_like(A, seed=2)

    def loss(X):
        return inner(ps.svd_function(X, f), W.to(X.dtype)) + ps.svdvals(X).sum()

    g32 = grad(loss, A.to(dtype))
    assert g32.dtype == dtype and torch.isfinite(g32).all()
    assert rel_err(g32.to(LOW[dtype]), grad(loss, A)) < 1e-3


# ------------------------------------------------------------ no mutation


OPS = {
    "svd": lambda A: ps.svd(A, full_matrices=False),
    "svd full": lambda A: ps.svd(A, full_matrices=True),
    "svd top-k": lambda A: ps.svd(A, k=2),
    "svdvals": lambda A: (ps.svdvals(A),),
    "svd_function": lambda A: (ps.svd_function(A, ("pow", 2)),),
    "normalize": lambda A: (ps.svd_function(A, "normalize"),),
}


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_backward_does_not_mutate_incoming_gradient(op, create_graph) -> None:
    A = randn(5, 4, dtype=torch.complex128).requires_grad_()
    outputs = OPS[op](A)
    if op.startswith("svd") and len(outputs) == 3:
        # a complex cotangent must not depend on the phases of the columns
        # (that would warn); the complement block of the full SVD likewise
        k = outputs[1].shape[-1]
        thin = gauge_free_cotangent(outputs[0][:, :k], outputs[1], outputs[2][:k])
        gU = torch.cat([thin[0], torch.zeros_like(outputs[0][:, k:])], -1)
        gVh = torch.cat([thin[2], torch.zeros_like(outputs[2][k:])], -2)
        cotangents = [gU, thin[1], gVh]
    else:
        cotangents = [random_like(t, seed=i) for i, t in enumerate(outputs)]
    copies = [g.clone() for g in cotangents]
    seen = []
    for t in outputs:  # the hook sees the incoming gradient as it arrives
        t.register_hook(lambda g: seen.append(g.clone()))
    (gA,) = torch.autograd.grad(outputs, A, cotangents, create_graph=create_graph)
    assert torch.isfinite(gA).all() and gA.abs().max() > 0
    for g, c in zip(cotangents, copies):
        assert torch.equal(g, c)
    assert all(any(torch.equal(s, c) for s in seen) for c in copies)


# ------------------------------------- an infinite derivative at an exact 0


@pytest.mark.parametrize("wide", [False, True])
def test_pow_half_at_an_exact_zero_singular_value(wide) -> None:
    """("pow", 0.5) of a 4x3 matrix with singular values (2, .5, 0), its null
    column the first: perturbing A[0, 0] or A[3, 0] (rows outside the range of
    the other columns) opens the zero singular value, where sqrt has an
    infinite slope; every other entry keeps it at exactly 0 and has a finite
    derivative. So: +-inf at those two entries, finite elsewhere, never NaN
    (before: all 12 NaN)."""
    A = torch.zeros(4, 3, dtype=torch.float64)
    A[1, 1], A[2, 2] = 0.5, 2.0
    W = random_like(A, seed=7)
    infinite = [(0, 0), (3, 0)]
    if wide:
        A, W, infinite = A.mT.contiguous(), W.mT.contiguous(), [(0, 0), (0, 3)]

    def loss(X):
        return inner(ps.svd_function(X, ("pow", 0.5)), W)

    G = grad(loss, A)
    assert not torch.isnan(G).any()
    assert [tuple(i) for i in torch.isinf(G).nonzero().tolist()] == infinite
    for i, j in infinite:
        assert G[i, j] == math.copysign(math.inf, float(W[i, j]))
    # the finite entries that keep the zero singular value exactly 0 (the
    # first column / row stays zero) against central differences
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            if (j if not wide else i) == 0:
                continue
            E = torch.zeros_like(A)
            E[i, j] = 1e-5
            fd = 8 * (loss(A + E) - loss(A - E)) - loss(A + 2 * E) + loss(A - 2 * E)
            assert float(G[i, j]) == pytest.approx(float(fd) / 12e-5, abs=1e-8)


def test_pow_half_at_a_zero_singular_value_complex_and_batched() -> None:
    A = matrix_with_spectrum([2.0, 0.5, 0.0], 4, 3, dtype=torch.complex128, seed=8)
    A = torch.stack([A, matrix_with_spectrum([2.0, 0.5, 0.1], 4, 3, seed=9).cdouble()])
    W = random_like(A, seed=9)
    G = grad(lambda X: inner(ps.svd_function(X, ("pow", 0.5)), W), A)
    parts = torch.view_as_real(G)
    assert not torch.isnan(parts).any()
    assert torch.isfinite(G[1]).all()  # no zero singular value there


# ------------------------------------------ svd_function with a truncation

# every rule keeps r = 3 ({3, 2, 2}: the tail from 1 is sqrt(1.26) = 1.12,
# 0.26 of ||S|| = sqrt(18.26)), but k=4, min_rank=2, which keeps 4
TRUNC_RULES = [dict(k=3), dict(atol=1.5), dict(error_rtol=0.3), dict(k=4, min_rank=2)]
TRUNC_FNS = [("pow", 2), ("pow", 1), "polar", lambda s: torch.tanh(s)]
TRUNC_SPECTRUM = [3.0, 2.0, 2.0, 1.0, 0.5, 0.1]  # a doublet kept by every rule


def _on(backend: str):
    """The backend: native, or Julia through the stand-in."""
    return installed() if backend == "julia" else contextlib.nullcontext()


def _by_hand(A, f, rank):
    """``U_r f(S_r) V_r^H`` from torch.linalg.svd, ``f`` applied by hand."""
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    if f == "polar":
        fs = torch.ones_like(S)
    elif callable(f):
        fs = f(S)
    else:
        fs = S ** f[1]
    fs = fs[..., :rank]
    return (U[..., :rank] * fs.to(U.dtype).unsqueeze(-2)) @ Vh[..., :rank, :]


@pytest.mark.parametrize("backend", ["torch", "julia"])
@pytest.mark.parametrize("f", TRUNC_FNS, ids=["pow2", "pow1", "polar", "tanh"])
@pytest.mark.parametrize("kw", TRUNC_RULES, ids=repr)
@pytest.mark.parametrize("m, n", [(6, 6), (8, 6), (6, 9)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_truncated_svd_function_exact_at_a_kept_doublet(dtype, m, n, kw, f, backend):
    A = matrix_with_spectrum(TRUNC_SPECTRUM, m, n, dtype=dtype, seed=m + n)
    W = random_like(A, seed=4)
    with _on(backend):
        Y = ps.svd_function(A, f, **kw, backend=backend)
        rank = 4 if kw.get("k") == 4 else 3
        assert rel_err(Y, _by_hand(A, f, rank)) < 1e-12

        def loss(X):
            return inner(ps.svd_function(X, f, **kw, backend=backend), W)

        assert rel_err(grad(loss, A), fd_grad(loss, A)) < 1e-7


def test_truncated_svd_function_by_hand_misses_the_cut():
    # the by-hand U_r f(S_r) V_r^H with torch's backward: not finite at the
    # kept doublet (1 / (2 - 2)), or, where LAPACK's two values of the doublet
    # differ in the last bits (MKL's AVX-512 kernels), finite and a few percent
    # off; the truncated svd_function is exact
    A = matrix_with_spectrum(TRUNC_SPECTRUM, 7, 6, seed=5)
    W = random_like(A, seed=4)

    def loss(X):
        return inner(ps.svd_function(X, ("pow", 2), k=3), W)

    def by_hand(X):
        return inner(_by_hand(X, ("pow", 2), 3), W)

    exact = fd_grad(loss, A)
    assert rel_err(grad(loss, A), exact) < 1e-7
    naive = grad(by_hand, A)
    assert not torch.isfinite(naive).all() or rel_err(naive, exact) > 1e-2


@pytest.mark.parametrize("f", [("pow", 2), ("pow", 3), lambda s: s**2], ids=str)
@pytest.mark.parametrize("m, n", [(5, 5), (7, 4), (4, 7)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_truncated_svd_function_second_order(dtype, m, n, f):
    # a quadratic on the kept values and zero on the others: its divided
    # differences agree with the derivative averages, yet the second ones
    # are no quadratic's (the criterion once took the wrong branch here)
    A = randn(m, n, dtype=dtype, seed=m * n).requires_grad_()
    assert gradgradcheck(lambda X: ps.svd_function(X, f, k=2), (A,))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_truncated_svd_function_batches_and_forward_mode(dtype):
    # each matrix its own rank (error_atol), forward mode and vmap against
    # the reverse mode on the same batch
    # tails: sqrt(1.26) = 1.12 from 1 in the first (r = 3; from 2, 2.29);
    # sqrt(1.27) = 1.13 from 0.9 in the second (r = 1)
    spectra = [TRUNC_SPECTRUM, [5.0, 0.9, 0.5, 0.4, 0.2, 0.1]]
    A = torch.stack(
        [
            matrix_with_spectrum(s, 7, 6, dtype=dtype, seed=i)
            for i, s in enumerate(spectra)
        ]
    )
    kw = dict(error_atol=1.2)
    Y = ps.svd_function(A, ("pow", 2), **kw)
    for i, r in enumerate([3, 1]):
        assert rel_err(Y[i], _by_hand(A[i], ("pow", 2), r)) < 1e-12
    assert gradcheck(
        lambda X: ps.svd_function(X, ("pow", 2), **kw), (A.clone().requires_grad_(),)
    )
    dA = random_like(A, seed=2)
    _, jvp = torch.func.jvp(lambda X: ps.svd_function(X, ("pow", 2), **kw), (A,), (dA,))
    ref = torch.autograd.functional.jvp(
        lambda X: ps.svd_function(X, ("pow", 2), **kw), A.detach(), dA
    )[1]
    assert rel_err(jvp, ref) < 1e-10


def test_truncated_svd_function_cut_in_a_cluster():
    A = matrix_with_spectrum(TRUNC_SPECTRUM, 6, 6, seed=1)
    with pytest.warns(ps.GaugeWarning, match="cuts a degenerate cluster"):
        ps.svd_function(A, ("pow", 2), k=2)
    with pytest.raises(ps.GaugeError, match="multiplets='down'"):
        ps.svd_function(A, ("pow", 2), k=2, gauge="raise")
    for multiplets, r in [("down", 1), ("up", 3)]:
        Y = ps.svd_function(A, ("pow", 2), k=2, multiplets=multiplets)
        assert rel_err(Y, _by_hand(A, ("pow", 2), r)) < 1e-12


def test_truncated_svd_function_refuses_normalize():
    with pytest.raises(ps.InputError, match="'normalize'"):
        ps.svd_function(randn(4, 4), "normalize", k=2)


@needs_julia
@pytest.mark.parametrize("f", TRUNC_FNS[:3], ids=["pow2", "pow1", "polar"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_real_julia_truncated_svd_function_agrees_with_native(dtype, f):
    A = matrix_with_spectrum(TRUNC_SPECTRUM, 7, 6, dtype=dtype, seed=2)
    W = random_like(A, seed=4)
    out = []
    for backend in ("torch", "julia"):
        X = A.clone().requires_grad_()
        Y = ps.svd_function(X, f, error_rtol=0.3, backend=backend)
        (g,) = torch.autograd.grad(inner(Y, W), X)
        out.append((Y.detach(), g))
    assert rel_err(out[1][0], out[0][0]) < 1e-12
    assert rel_err(out[1][1], out[0][1]) < 1e-10


@pytest.mark.parametrize("m, n", [(6, 6), (8, 6), (6, 9)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_truncated_svd_function_second_order_at_a_kept_doublet(dtype, m, n):
    # no warning: the kept doublet is inside f's smooth part
    A = matrix_with_spectrum(TRUNC_SPECTRUM, m, n, dtype=dtype, seed=1)
    A.requires_grad_()
    assert gradgradcheck(lambda X: ps.svd_function(X, ("pow", 2), k=3), (A,))
    assert gradgradcheck(lambda X: ps.svd_function(X, torch.tanh, atol=1.5), (A,))
