"""The block Krylov top-k forward (``method="krylov"``, and ``auto``'s hand-over
to it): forward/topk.py's ``_svd_krylov`` / ``_eigh_krylov`` and the cost
model that chooses it (issue 32).

Exactness as for the subspace iteration (tests/test_topk.py): gradients
against the full path (``method="full"``), ``gradcheck`` in float64, the
certificate as an explicit residual, a ``ConvergenceWarning`` where the
budget cannot certify, operators and batches. The choice between the two
iterations is tested through the cost model's functions (no timing).
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from _julia import needs_julia
from _spectra import (
    EPS34,
    hermitian_with_spectrum,
    matrix_with_spectrum,
    randn,
    random_like,
    rel_err,
)
from _spectra import (
    topk_loss as loss,
)

import pyspectral as ps
import pyspectral.forward.topk as T
from pyspectral import topk as TK
from pyspectral._settings import options


def slow_tail(n: int, k: int) -> list[float]:
    """benchmarks/bench_topk.py's table 1b spectrum at 4096^2, cut to ``n``:
    ``logspace(0, -1, k)``, then a gap of 0.5 and the tail ``0.05 *
    10**(-5 i / 4064)``, which falls by 0.997 per value."""
    head = torch.logspace(0, -1, k, dtype=torch.float64)
    i = torch.arange(n - k, dtype=torch.float64)
    return torch.cat([head, 0.05 * 10 ** (-5 * i / 4064)]).tolist()


def grads(A, k, method, **kw):
    X = A.clone().requires_grad_()
    U, S, Vh = ps.svd(X, k=k, method=method, **kw)
    wide = torch.complex128 if A.is_complex() else torch.float64
    W = random_like(A.to(wide), seed=2).to(A.dtype)
    loss(U, S, Vh, W).backward()
    return (U.detach(), S.detach(), Vh.detach()), X.grad


def assert_as_full(A, k, tol=1e-9, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # certified at the gap: nothing to say
        (U, S, Vh), g = grads(A, k, **kw)
    (U0, S0, Vh0), g0 = grads(A, k, "full")
    assert torch.allclose(S, S0, rtol=tol, atol=0)
    assert torch.allclose(U @ Vh, U0 @ Vh0, atol=tol)
    assert rel_err(g, g0) < tol


@pytest.fixture
def spy(monkeypatch):
    """Which iteration the forward ran: the Krylov loops' ``start``
    argument (None: from a random block; a tensor: handed over by auto's
    subspace iteration), appended per call."""
    runs: list[str] = []
    for name in ("_svd_krylov", "_eigh_krylov"):
        original = getattr(T, name)

        def wrapped(*args, _original=original):
            runs.append("krylov" if args[-1] is None else "switched")
            return _original(*args)

        monkeypatch.setattr(T, name, wrapped)
    return runs


@pytest.fixture
def large(monkeypatch):
    """auto's decisions at scale on small matrices: the size thresholds off
    and the full path priced as for a large matrix (tests/test_topk.py)."""
    monkeypatch.setattr(T, "AUTO_MIN_SIZE", 0)
    monkeypatch.setattr(T, "AUTO_TRY", 1e9)
    monkeypatch.setattr(T, "AUTO_TRIAL", 1e9)
    monkeypatch.setattr(T, "ITERATION_OVERHEAD", 0.0)
    monkeypatch.setattr(T, "SVD_FULL_COST", 1e4)
    monkeypatch.setattr(T, "EIGH_FULL_COST", 1e4)


# ------------------------------------------------------------ exactness


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(80, 60), (60, 80), (3, 70, 50)])
def test_krylov_gradient_equals_full(shape, dtype, spy) -> None:
    *batch, m, n = shape
    s = [10 * 0.8**i for i in range(min(m, n))]
    A = matrix_with_spectrum(s, m, n, dtype, seed=1).expand(*batch, m, n).clone()
    assert_as_full(A, 5, method="krylov")
    assert spy == ["krylov"]


def test_krylov_gradient_on_a_slow_tail(spy) -> None:
    """The issue's spectrum, small: the gradient is the full path's."""
    A = matrix_with_spectrum(slow_tail(300, 16), 300, 300, seed=3)
    assert_as_full(A, 16, 1e-8, method="krylov")
    assert spy == ["krylov"]


def test_auto_hands_over_to_krylov_on_a_slow_tail(large, spy) -> None:
    """Auto at scale: subspace iteration measures its rate, the cost model
    hands over to block Krylov, and the result is the full path's."""
    A = matrix_with_spectrum(slow_tail(400, 32), 400, 400, seed=3)
    assert_as_full(A, 32, 1e-8, method="auto")
    assert spy == ["switched"]


def test_auto_keeps_subspace_iteration_at_a_fast_gap(large, spy) -> None:
    s = [0.9**i for i in range(32)] + [0.5 * 0.9**31 * 0.7**i for i in range(368)]
    A = matrix_with_spectrum(s, 400, 400, seed=3)
    assert_as_full(A, 32, 1e-8, method="auto")
    assert spy == []


def test_gradcheck_svd() -> None:
    A = matrix_with_spectrum([10 * 0.5**i for i in range(12)], 16, 12, seed=2)
    W = random_like(A, seed=3)

    def f(X):
        U, S, Vh = ps.svd(X, k=2, method="krylov", oversample=2)
        return loss(U, S, Vh, W)

    X = A.clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (X,), fast_mode=True)


def test_gradcheck_eigh() -> None:
    H = hermitian_with_spectrum([-6.0, 5.0] + [0.5**i for i in range(12)], seed=2)
    Wt = random_like(H, seed=3)

    def f(X):
        # through the Hermitian part: the derivative torch's convention gives
        w, V = ps.eigh((X + X.mH) / 2, k=2, method="krylov", oversample=2)
        return (V @ V.mH * Wt).sum() + (w**2).sum()

    X = H.clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (X,), fast_mode=True)


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_krylov_eigh_equals_full(largest, dtype, spy) -> None:
    """Block Lanczos reads the algebraic ends: a large negative end needs no
    shift (subspace iteration's difficulty)."""
    w0 = [-10.0, -9.0, -8.0] + [5 * 0.8**i for i in range(57)]
    w0 = w0 if largest else [-x for x in w0]
    A = hermitian_with_spectrum(w0, dtype=dtype, seed=4).expand(2, 60, 60).clone()
    out = {}
    for method in ("krylov", "full"):
        X = A.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            w, V = ps.eigh(X, k=4, largest=largest, method=method)
        Wt = random_like(A, seed=5)
        ((V @ V.mH * Wt.conj()).real.sum() + (w**2).sum()).backward()
        out[method] = (w.detach(), X.grad)
    assert torch.allclose(out["krylov"][0], out["full"][0], atol=1e-12)
    assert rel_err(out["krylov"][1], out["full"][1]) < 1e-9
    assert spy == ["krylov"]


def test_auto_hands_over_to_lanczos_on_a_slow_tail(large, spy, monkeypatch) -> None:
    # at 300^2 the Rayleigh-Ritz of the Krylov basis costs as much as the
    # products; without it, as where n is in the thousands
    monkeypatch.setattr(T, "RITZ_COST", 0.0)
    monkeypatch.setattr(T, "ORTH_COST", 0.0)
    H = hermitian_with_spectrum(slow_tail(300, 16), seed=5)
    X = H.clone().requires_grad_()
    w, V = ps.eigh(X, k=16, method="auto")
    (V.abs().sum() + w.sum()).backward()
    w0 = torch.linalg.eigvalsh(H)[-16:]
    assert torch.allclose(w, w0, atol=1e-12)
    assert spy == ["switched"]


def test_float32() -> None:
    A = matrix_with_spectrum([10 * 0.7**i for i in range(40)], 60, 40, seed=1)
    (_, S, _), g = grads(A.float(), 3, "krylov")
    (_, S0, _), g0 = grads(A, 3, "full")
    assert torch.allclose(S.double(), S0, rtol=1e-5)
    assert rel_err(g.double(), g0) < 1e-4


# ------------------------------------------------ certificate and budget


def test_certificate_is_an_explicit_residual() -> None:
    """The returned block: ``A^H U = V S`` and ``|A v_i - s_i u_i| <= tol s_1``
    for the certified ``d``, computed here from ``A``."""
    A = matrix_with_spectrum(slow_tail(200, 8), 200, 200, seed=6)
    _, cfg = T.top_k_method("svd", A, 8, "krylov", None, None, None, 500)
    ops = TK.dense_ops(A)
    res = T.svd_topk(*ops, tuple(A.shape), A.dtype, A.device, 8, cfg, options())
    assert res.message == "" and res.d >= 8
    U, S, V = res.U[:, : res.d], res.S[: res.d], res.V[:, : res.d]
    s1 = float(S[0])
    assert float((A.mH @ U - V * S).norm(dim=0).max()) < 1e-13 * s1
    assert float((A @ V - U * S).norm(dim=0).max()) <= EPS34 * s1
    assert torch.allclose(U.mH @ U, torch.eye(res.d, dtype=U.dtype), atol=1e-13)


def test_convergence_warning_when_the_budget_is_too_small() -> None:
    A = randn(60, 50, seed=0)
    with pytest.warns(ps.ConvergenceWarning, match="method='krylov'") as w:
        U, S, Vh = ps.svd(A, k=3, method="krylov", n_iter=2)
    (message,) = [str(x.message) for x in w]
    assert "not certified: after 2 iterations" in message
    assert torch.isfinite(S).all()


def test_n_iter_alone_limits_the_krylov_steps() -> None:
    slow = [1.0 - 1e-3 * i for i in range(120)]
    A = matrix_with_spectrum(slow, 120, 120, seed=1)
    with pytest.warns(ps.ConvergenceWarning) as w:
        ps.svd(A, k=2, method="krylov", oversample=10, n_iter=7)
    assert "after 7 iterations" in str(w[0].message)


# --------------------------------------------------- operators, batches


def test_linear_operator_input() -> None:
    gen = torch.Generator().manual_seed(3)
    s = torch.tensor([10 * 0.7**i for i in range(20)], dtype=torch.float64)
    B0 = torch.linalg.qr(torch.randn(70, 20, dtype=torch.float64, generator=gen)).Q
    C0 = torch.linalg.qr(torch.randn(60, 20, dtype=torch.float64, generator=gen)).Q
    W = randn(70, 60, seed=2)
    grads_ = {}
    for method in ("krylov", "dense"):
        B = (B0 * s).clone().requires_grad_()
        C = C0.mT.clone().requires_grad_()
        if method == "dense":
            U, S, Vh = ps.svd(B @ C, k=4, method="full")
        else:
            op = ps.LinearOperator(
                (70, 60),
                lambda X, B=B, C=C: B @ (C @ X),
                lambda Y, B=B, C=C: C.mH @ (B.mH @ Y),
                dtype=B.dtype,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                U, S, Vh = ps.svd_topk(op, 4, method="krylov")
        grads_[method] = torch.autograd.grad(loss(U, S, Vh, W), (B, C))
    for a, b in zip(grads_["krylov"], grads_["dense"]):
        assert rel_err(a, b) < 1e-9


def test_batched_eigh_topk_operator() -> None:
    H = torch.stack(
        [
            hermitian_with_spectrum([4 * 0.6**i for i in range(50)], seed=i)
            for i in (1, 2)
        ]
    )
    op = ps.LinearOperator(H.shape, lambda X: H @ X, dtype=H.dtype)
    w, V = ps.eigh_topk(op, 3, method="krylov")
    w0 = torch.linalg.eigvalsh(H)[..., -3:]
    assert torch.allclose(w, w0, atol=1e-12)


# ------------------------------------------------------ the cost model


def test_block_size() -> None:
    assert T.krylov_block(32, 64, 4096) == 32  # k
    assert T.krylov_block(5, 15, 4096) == 15  # at most p (MIN_COLUMNS = 32)
    assert T.krylov_block(100, 200, 4096) == 100
    assert T.krylov_block(4, 14, 50) == 14
    assert T.krylov_block(4, 14, 30) == 8  # p + 2 b fits in min(m, n)
    assert T.krylov_block(2, 12, 12) == 0  # the block holds everything


def test_chebyshev_rate() -> None:
    assert T.chebyshev_rate(0.25) == pytest.approx(0.0718, abs=1e-4)
    assert T.chebyshev_rate(0.0) == 0.0 and T.chebyshev_rate(1.0) == 1.0
    for r in (1e-3, 0.1, 0.5, 0.9, 0.99):
        assert T.chebyshev_rate(r) < r


def step_costs(n: int, k: int) -> tuple[float, float, float]:
    """One subspace iteration, one Krylov step (the basis half full) and the
    explicit residual, for the top k of an n x n matrix."""
    p = 2 * k
    b = T.krylov_block(k, p, n)
    unit = T._unit((n, n), p, 1)
    width = p + T.KRYLOV_RESTART * b // 2
    return 2 * unit, T._krylov_step_cost((n, n), b, width, 2), unit


def test_auto_chooses_krylov_on_the_slow_tail() -> None:
    """Table 1b (4096^2, k = 32): subspace iteration measured 0.21 per
    iteration; the gap of 0.5 gives the ratio 0.25 for Krylov. After two
    iterations the residual is about 1e10 times the tolerance: Krylov."""
    sub, kry, check = step_costs(4096, 32)
    assert T.krylov_pays(1e10, 0.21, 0.25, sub, kry, check)
    # and at 2048^2 (the comparison with torch.svd_lowrank)
    assert T.krylov_pays(1e10, 0.21, 0.25, *step_costs(2048, 32))


def test_auto_keeps_subspace_iteration_where_it_is_cheaper() -> None:
    """Table 1 (a gap of 0.5, then 0.9 per value): the block of 2k columns
    reaches past the tail's top, subspace iteration converges at 3e-4 per
    iteration and has almost finished when the rate is measured."""
    sub, kry, check = step_costs(4096, 32)
    assert not T.krylov_pays(1e5, 3e-4, 0.25, sub, kry, check)
    # a tiny gap: Krylov's square-root advantage wins (if either fits the
    # budget, which the monitor decides)
    assert T.krylov_pays(1e10, 0.999, 0.999, sub, kry, check)


def test_cost_model_on_measured_runs(large, monkeypatch) -> None:
    """The monitor's decision on the Ritz values of a run: the slow tail
    hands over, the fast gap does not (``_Monitor.krylov``)."""
    make = T._monitor
    decisions = {}
    for name, s in {
        "slow": slow_tail(400, 32),
        "fast": [0.9**i for i in range(32)]
        + [0.5 * 0.9**31 * 0.7**i for i in range(368)],
    }.items():
        A = matrix_with_spectrum(s, 400, 400, seed=3)
        _, cfg = T.top_k_method("svd", A, 32, "auto", None, None, None, 500)
        mon = make("svd", cfg, 32, tuple(A.shape), 2, options())
        mon.budget = float("inf")
        monkeypatch.setattr(T, "_monitor", lambda *a, mon=mon: mon)
        ops = TK.dense_ops(A)
        T.svd_topk(*ops, tuple(A.shape), A.dtype, A.device, 32, cfg, options())
        decisions[name] = mon.krylov
    assert decisions == {"slow": True, "fast": False}


# ------------------------------------------------- the Julia backend (real)


@needs_julia
@pytest.mark.parametrize("method", ["krylov", "auto"])
def test_julia_krylov_agrees_with_native(method, large) -> None:
    """PySpectral.jl's svd_topk_block runs the same iterations and cost model
    (julia/PySpectral/src/forward/topk.jl): its gradient is the full path's.
    (``large`` lowers the native thresholds only; Julia's ``:auto`` takes the
    full path here, exact too.)"""
    A = matrix_with_spectrum(slow_tail(200, 8), 200, 200, seed=3)
    (U, S, Vh), g = grads(A, 8, method, backend="julia")
    (U0, S0, Vh0), g0 = grads(A, 8, "full")
    assert torch.allclose(S, S0, rtol=1e-10, atol=0)
    assert rel_err(g, g0) < 1e-8


@needs_julia
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_julia_krylov_eigh_agrees_with_native(largest) -> None:
    w0 = [-10.0, -9.0, -8.0] + [5 * 0.8**i for i in range(57)]
    H = hermitian_with_spectrum(w0 if largest else [-x for x in w0], seed=4)
    out = []
    for backend, method in (("julia", "krylov"), ("torch", "krylov")):
        X = H.clone().requires_grad_()
        w, V = ps.eigh(X, k=4, largest=largest, method=method, backend=backend)
        ((V @ V.mH * random_like(H, seed=5)).sum() + (w**2).sum()).backward()
        out.append((w.detach(), X.grad))
    assert torch.allclose(out[0][0], out[1][0], atol=1e-12)
    assert rel_err(out[0][1], out[1][1]) < 1e-9


@needs_julia
def test_julia_krylov_warning_is_the_native_one() -> None:
    A = randn(60, 50, seed=0)
    texts = []
    for backend in ("julia", "torch"):
        with pytest.warns(ps.ConvergenceWarning, match="method='krylov'") as w:
            ps.svd(A, k=3, method="krylov", n_iter=2, backend=backend)
        texts.append([re.sub(r"\d\S*", "#", str(x.message)) for x in w])
    assert texts[0] == texts[1]
