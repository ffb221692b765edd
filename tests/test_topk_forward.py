"""Forward mode through the iterative top-k path (``SVDTopK`` / ``EighTopK``:
``truncated_svd_pushforward`` / ``truncated_eigh_pushforward``).

The reference is the full path's pushforward restricted to the kept columns:
``torch.func.jvp`` through ``method="full"`` on outputs that do not depend on
the basis chosen inside a cluster (projectors, the polar factor, symmetric
functions of the kept values); where ``k`` cuts a cluster (the kept basis is
then arbitrary), ``svd_pushforward`` / ``eigh_pushforward`` on a complete
decomposition in the basis the iterative path returned. The pushforward is
also checked as the transpose of the pullback on the same certified block.
The Julia backend's top-k forward mode is tested in test_julia_forward_mode.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _spectra import hermitian_with_spectrum, matrix_with_spectrum, randn, rel_err

import pyspectral as ps
from pyspectral import topk as TK
from pyspectral._settings import options
from pyspectral.forward.topk import top_k_method
from pyspectral.pullbacks.eigh import eigh_pushforward
from pyspectral.pullbacks.svd import svd_pushforward
from pyspectral.pullbacks.truncated import (
    truncated_eigh_pullback,
    truncated_eigh_pushforward,
    truncated_svd_pullback,
    truncated_svd_pushforward,
)

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

DTYPES = [torch.float64, torch.complex128]


def decaying(n: int, ratio: float = 0.7) -> list[float]:
    return [10 * ratio**i for i in range(n)]


def svd_seen(k: int, method: str, values: bool = True, **kw):
    """Outputs of the top-k SVD that do not depend on the basis inside a
    complete cluster: projectors, polar factor, the kept values' sum; and
    the kept values (``values``: their tangents are basis independent at a
    gap only)."""

    def f(X):
        U, S, Vh = ps.svd(X, k=k, method=method, **kw)
        out = U @ U.mH, Vh.mH @ Vh, U @ Vh, S.sum(-1)
        return (*out, S) if values else out

    return f


def eigh_seen(k: int, largest: bool, method: str, uplo: str = "L", **kw):
    def f(X):
        w, V = ps.eigh(X, uplo, k=k, largest=largest, method=method, **kw)
        return V @ V.mH, w

    return f


def jvp_err(f_iter, f_full, A, dA) -> float:
    got = torch.func.jvp(f_iter, (A,), (dA,))[1]
    want = torch.func.jvp(f_full, (A,), (dA,))[1]
    return max(rel_err(a, b) for a, b in zip(got, want))


def tangent(A):
    return randn(*A.shape, dtype=A.dtype, seed=11)


# ------------------------------------------------ jvp equals the full path


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (2, 24, 20)])
def test_svd_jvp_equals_full_at_a_gap(shape, dtype) -> None:
    *batch, m, n = shape
    A = matrix_with_spectrum(decaying(min(m, n)), m, n, dtype, seed=1)
    A = A.expand(*batch, m, n).clone() if batch else A
    if batch:
        A[1] = A[1] * 0.5 + matrix_with_spectrum(decaying(min(m, n)), m, n, dtype, 2)
    f_it, f_full = svd_seen(4, "randomized"), svd_seen(4, "full")
    assert jvp_err(f_it, f_full, A, tangent(A)) < 1e-9


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_jvp_with_a_complete_cluster_inside_k(dtype) -> None:
    """(5, 3, 3, 1 | ...) with k = 3: the cluster is kept whole, so the
    projectors and the polar factor are differentiable; inside it the
    rotation is zero on both paths."""
    s = [5, 3, 3, 1] + [0.5 * 0.7**i for i in range(16)]
    A = matrix_with_spectrum(s, 30, 20, dtype, seed=3)
    f_it, f_full = svd_seen(3, "randomized", False), svd_seen(3, "full", False)
    assert jvp_err(f_it, f_full, A, tangent(A)) < 1e-9


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_jvp_equals_full(dtype, largest, uplo) -> None:
    w0 = [-10, -9, -8] + [5 * 0.7**i for i in range(27)]
    if not largest:
        w0 = [-x for x in w0]
    A = hermitian_with_spectrum(w0, dtype=dtype, seed=4)
    A = torch.tril(A) + torch.triu(randn(30, 30, dtype=dtype, seed=9), 1)  # junk
    if uplo == "U":
        A = A.mH.clone()
    f_it = eigh_seen(4, largest, "randomized", uplo, oversample=6)
    f_full = eigh_seen(4, largest, "full", uplo)
    dA = tangent(A)
    assert jvp_err(f_it, f_full, A, dA) < 1e-9
    # only the uplo triangle of the tangent is read
    other = torch.triu(dA, 1) if uplo == "L" else torch.tril(dA, -1)
    assert jvp_err(f_it, f_full, A, dA + 3 * other) < 1e-9


def test_eigh_jvp_reads_only_the_triangle() -> None:
    A = hermitian_with_spectrum(decaying(20, 0.6), seed=3)
    dA = randn(20, 20, seed=5)
    f = eigh_seen(3, True, "randomized")
    t1 = torch.func.jvp(f, (A,), (dA,))[1]
    t2 = torch.func.jvp(f, (A,), (torch.tril(dA),))[1]
    assert all(rel_err(a, b) < 1e-12 for a, b in zip(t1, t2))


# ------------------------------------------ k cuts a cluster or zero block


def completed_svd(A, U, S, Vh):
    k = S.shape[-1]
    Wu = torch.linalg.qr(U, mode="complete").Q[..., k:]
    Wv = torch.linalg.qr(Vh.mH, mode="complete").Q[..., k:]
    Ub, Sb, Vbh = torch.linalg.svd(Wu.mH @ A @ Wv, full_matrices=False)
    U2, S2 = torch.cat([U, Wu @ Ub], -1), torch.cat([S, Sb], -1)
    V2 = torch.cat([Vh.mH, Wv @ Vbh.mH], -1)
    return U2, S2, V2.mH


CUTS = {
    "cluster (3,2,2,1)": ([3, 2, 2, 1], 6, 4, {}),
    "zeros (3,0,0,0)": ([3, 0, 0, 0], 6, 4, {}),
    "cluster, CG path": ([3, 2, 2, 1] + [0.5 * 0.7**i for i in range(16)], 30, 20, {}),
    "zeros, CG path": ([3] + [0] * 19, 30, 20, {"oversample": 3}),
    "zeros past the block": ([3] + [0] * 19, 30, 20, {"oversample": 0}),
}


@pytest.mark.parametrize("case", CUTS)
def test_svd_jvp_cutting_a_cluster_is_the_full_formula(case) -> None:
    """k = 2 cuts a cluster or a block of zeros: the tangents are the full
    path's pushforward in the returned basis (no rotation inside the
    cluster, pseudo-inverse of the zeros), bounded."""
    s, m, n, kw = CUTS[case]
    A = matrix_with_spectrum(s, m, n, seed=1)
    dA = randn(m, n, seed=4)
    with fwAD.dual_level():
        U, S, Vh = ps.svd(fwAD.make_dual(A, dA), k=2, method="randomized", **kw)
        (U, dU), (S, dS), (Vh, dVh) = (fwAD.unpack_dual(t) for t in (U, S, Vh))
    opts = options(gauge="ignore")
    rU, rS, rVh = svd_pushforward(*completed_svd(A, U, S, Vh), dA, opts)
    assert rel_err(dU, rU[..., :2]) < 1e-10
    assert rel_err(dS, rS[..., :2]) < 1e-10
    assert rel_err(dVh, rVh[..., :2, :]) < 1e-10
    assert max(dU.abs().max(), dVh.abs().max()) < 10


def test_eigh_jvp_cutting_a_repeated_eigenvalue() -> None:
    A = hermitian_with_spectrum(
        [5, 3, 3, 1] + [0.5 * 0.6**i for i in range(16)], seed=2
    )
    dA = randn(20, 20, seed=7)
    with fwAD.dual_level():
        w, V = ps.eigh(fwAD.make_dual(A, dA), k=2, method="randomized")
        (w, dw), (V, dV) = (fwAD.unpack_dual(t) for t in (w, V))
    W = torch.linalg.qr(V, mode="complete").Q[..., 2:]
    wb, Z = torch.linalg.eigh(W.mH @ A @ W)
    w2, V2 = torch.cat([w, wb], -1), torch.cat([V, W @ Z], -1)
    rw, rV = eigh_pushforward(w2, V2, dA, "L", options(gauge="ignore"))
    assert rel_err(dw, rw[..., :2]) < 1e-10
    assert rel_err(dV, rV[..., :2]) < 1e-10
    assert dV.abs().max() < 10


# --------------------------------------------------- transposition


def svd_block(A, k, **kw):
    _, cfg = top_k_method(
        "svd", A, k, "randomized", kw.get("oversample"), None, None, 200
    )
    opts = options(gauge="ignore")
    out = TK.SVDTopK.apply(A, k, cfg, opts)
    return out[3:6], out[6:], cfg, opts


def inner(xs, ys) -> float:
    return sum(float((x.conj() * y).real.sum()) for x, y in zip(xs, ys))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("s", ["gap", "cut cluster"])
def test_svd_pushforward_is_the_transpose_of_the_pullback(s, dtype) -> None:
    """<jvp(dA), (gU, gS, gVh)> == <dA, vjp(gU, gS, gVh)> on one block."""
    spectrum = decaying(20) if s == "gap" else CUTS["cluster, CG path"][0]
    A = matrix_with_spectrum(spectrum, 30, 20, dtype, seed=5)
    k = 2
    block, extras, cfg, opts = svd_block(A, k)
    dA = randn(30, 20, dtype=dtype, seed=1)
    cot = (
        randn(30, k, dtype=dtype, seed=2),
        randn(k, dtype=torch.float64, seed=3),
        randn(k, 20, dtype=dtype, seed=4),
    )
    ops = TK.dense_ops(A)
    *tan, res = truncated_svd_pushforward(*ops, *block, k, dA, opts, 1e-14, 200, extras)
    P, Q, res2 = truncated_svd_pullback(*ops, *block, k, *cot, opts, 1e-14, 200, extras)
    assert res == 0.0 and res2 == 0.0
    lhs, rhs = inner(tan, cot), inner([dA], [P @ Q])
    assert abs(lhs - rhs) < 1e-11 * max(abs(lhs), 1.0)


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_pushforward_is_the_transpose_of_the_pullback(dtype, largest) -> None:
    w0 = [5, 3, 3, 1] + [0.5 * 0.6**i for i in range(16)]
    H = hermitian_with_spectrum(w0 if largest else [-x for x in w0], dtype, seed=2)
    k, n = 2, 20
    _, cfg = top_k_method("eigh", H, k, "randomized", None, None, None, 200)
    opts = options(gauge="ignore")
    out = TK.EighTopK.apply(H, k, largest, "L", cfg, opts)
    w, V, extras = out[2], out[3], out[4:]
    dH = randn(n, n, dtype=dtype, seed=1)
    dH = dH + dH.mH
    gw, gV = randn(k, seed=3), randn(n, k, dtype=dtype, seed=4)
    matmul = TK.dense_ops(H)[0]
    dw, dV, res = truncated_eigh_pushforward(
        matmul, w, V, k, dH, largest, opts, 1e-14, 200, extras
    )
    P, Q, res2 = truncated_eigh_pullback(
        matmul, w, V, k, gw, gV, largest, opts, 1e-14, 200, extras
    )
    assert res == 0.0 and res2 == 0.0
    lhs, rhs = inner([dw, dV], [gw, gV]), inner([dH], [P @ Q])
    assert abs(lhs - rhs) < 1e-11 * max(abs(lhs), 1.0)


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_jvp_when_the_block_is_complete(largest) -> None:
    """k + oversample covers the whole spectrum: the full path's pushforward
    on the block (eigh: ascending, the kept pairs at their place)."""
    A = matrix_with_spectrum(decaying(6), 9, 6, seed=2)
    f_it = svd_seen(3, "randomized", oversample=4)
    assert jvp_err(f_it, svd_seen(3, "full"), A, tangent(A)) < 1e-10
    H = hermitian_with_spectrum([-3, -1, 0.5, 2, 4, 7], seed=2)
    g_it = eigh_seen(2, largest, "randomized", oversample=5)
    assert jvp_err(g_it, eigh_seen(2, largest, "full"), H, tangent(H)) < 1e-10


# ------------------------------------------------------- torch.func


# large enough that the block (k + 10 columns) leaves a complement: the CG
# path, under the vmap of jacfwd / jacrev
A_FUNC = matrix_with_spectrum(decaying(20), 24, 20, seed=3)
H_FUNC = hermitian_with_spectrum(decaying(20, 0.6), seed=1)


def polar_and_values(method):
    def f(X):
        U, S, Vh = ps.svd(X, k=3, method=method)
        return U @ Vh + S.sum(-1)[..., None, None]

    return f


def eigh_projector(method):
    def f(X):
        V = ps.eigh(X, k=2, method=method).eigenvectors
        return V @ V.mH

    return f


def spy(monkeypatch, name: str) -> list:
    """Count the calls of ``topk.<name>`` (which path the jvp took)."""
    calls, fn = [], getattr(TK, name)
    monkeypatch.setattr(TK, name, lambda *a, **kw: calls.append(1) or fn(*a, **kw))
    return calls


def test_jacfwd_equals_jacrev(monkeypatch) -> None:
    svd_calls = spy(monkeypatch, "truncated_svd_pushforward")
    eigh_calls = spy(monkeypatch, "truncated_eigh_pushforward")
    f = polar_and_values("randomized")
    J = torch.func.jacfwd(f)(A_FUNC)
    assert rel_err(J, torch.func.jacrev(f)(A_FUNC)) < 1e-10
    assert rel_err(J, torch.func.jacfwd(polar_and_values("full"))(A_FUNC)) < 1e-9
    g = eigh_projector("randomized")
    J = torch.func.jacfwd(g)(H_FUNC)
    assert rel_err(J, torch.func.jacrev(g)(H_FUNC)) < 1e-10
    assert svd_calls and eigh_calls  # the CG path, under jacfwd's vmap


def test_jvp_under_vmap() -> None:
    As = torch.stack([A_FUNC, 2 * A_FUNC.flip(0)])
    dAs = randn(2, 24, 20, seed=8)
    f_it, f_full = polar_and_values("randomized"), polar_and_values("full")

    def jvp_of(f):
        return lambda A, dA: torch.func.jvp(f, (A,), (dA,))[1]

    want = torch.func.vmap(jvp_of(f_full))(As, dAs)
    assert rel_err(torch.func.vmap(jvp_of(f_it))(As, dAs), want) < 1e-9
    got = torch.func.jvp(torch.func.vmap(f_it), (As,), (dAs,))[1]
    assert rel_err(got, want) < 1e-9


def test_forward_ad_dual_tensors() -> None:
    A, dA = A_FUNC, randn(24, 20, seed=6)
    with fwAD.dual_level():
        Y = polar_and_values("randomized")(fwAD.make_dual(A, dA))
        got = fwAD.unpack_dual(Y).tangent
    want = torch.func.jvp(polar_and_values("full"), (A,), (dA,))[1]
    assert rel_err(got, want) < 1e-9


# ------------------------------------------------- scale invariance


@pytest.mark.parametrize("scale", [1e-150, 1e150])
def test_jvp_scale_invariance(scale) -> None:
    """Scaling A and dA together scales dS only; the CG runs in units of s_1,
    so nothing over- or underflows."""
    A = matrix_with_spectrum([5, 4, 3] + [0.8**i for i in range(27)], 40, 30)
    dA = tangent(A)

    def f(X):
        U, S, Vh = ps.svd(X, k=3, method="randomized")
        return U @ Vh, U @ U.mH, S

    got = torch.func.jvp(f, (A * scale,), (dA * scale,))[1]
    want = torch.func.jvp(svd_seen(3, "full"), (A,), (dA,))[1]
    assert all(torch.isfinite(t).all() for t in got)
    assert rel_err(got[0], want[2]) < 1e-10
    assert rel_err(got[1], want[0]) < 1e-10
    assert rel_err(got[2] / scale, want[4]) < 1e-10


# --------------------------------------------------- CG fallback


SLOW = matrix_with_spectrum([1 / (i + 1) ** 0.5 for i in range(30)], 40, 30, seed=4)


def test_jvp_without_a_gap_falls_back_to_the_exact_pushforward() -> None:
    """A CG capped at one step on a small matrix: the dense fallback gives
    the full path's tangents exactly, without a warning."""
    f = svd_seen(4, "randomized", oversample=6, backward_maxiter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.ConvergenceWarning)
        assert jvp_err(f, svd_seen(4, "full"), SLOW, tangent(SLOW)) < 1e-9


def test_eigh_jvp_without_a_gap_falls_back() -> None:
    H = hermitian_with_spectrum([1 / (i + 1) ** 0.5 for i in range(30)], seed=4)
    f = eigh_seen(4, True, "randomized", oversample=6, backward_maxiter=1)
    assert jvp_err(f, eigh_seen(4, True, "full"), H, tangent(H)) < 1e-9


def test_jvp_without_a_gap_warns_when_too_large(monkeypatch) -> None:
    monkeypatch.setattr(TK, "DENSE_FALLBACK_MAX", 0)
    f = svd_seen(4, "randomized", oversample=6, backward_maxiter=1)
    match = r"jvp: .*relative residual .* tangent is approximate"
    with pytest.warns(ps.ConvergenceWarning, match=match):
        out = torch.func.jvp(f, (SLOW,), (tangent(SLOW),))[1]
    assert all(torch.isfinite(t).all() for t in out)


# ---------------------------------------------- what still raises


def test_second_order_raises() -> None:
    def loss(X):
        U, S, Vh = ps.svd(X, k=3, method="randomized")
        return (S**3).sum() + (U @ Vh).sum()

    dA = randn(24, 20, seed=2)
    with pytest.raises(ps.DerivativeError, match="first order only"):
        torch.func.hessian(loss)(A_FUNC)  # forward over reverse
    with pytest.raises(ps.DerivativeError, match="first order only"):
        torch.func.jacfwd(torch.func.jacfwd(loss))(A_FUNC)
    with pytest.raises(ps.DerivativeError, match="first order only"):
        torch.func.grad(lambda X: torch.func.jvp(loss, (X,), (dA,))[1])(A_FUNC)
    X = A_FUNC.clone().requires_grad_()
    with fwAD.dual_level():  # a gradient of a dual input, no create_graph
        with pytest.raises(ps.DerivativeError, match="first order only"):
            torch.autograd.grad(loss(fwAD.make_dual(X, dA)), X)
    with pytest.raises(ps.DerivativeError, match="first order only"):
        torch.func.hessian(lambda X: eigh_projector("randomized")(X).sum())(H_FUNC)


def test_operator_form_has_no_forward_mode() -> None:
    B = matrix_with_spectrum(decaying(10), 20, 10, seed=1)
    C_ = torch.eye(10, dtype=B.dtype)
    dB = randn(20, 10, seed=2)

    def f(B):
        op = ps.LinearOperator(
            (20, 10),
            lambda X: B @ (C_ @ X),
            lambda Y: C_.mH @ (B.mH @ Y),
            dtype=B.dtype,
        )
        return ps.svd_topk(op, 3, method="randomized").S

    with pytest.raises(ps.DerivativeError, match="forward-mode"):
        torch.func.jvp(f, (B,), (dB,))
