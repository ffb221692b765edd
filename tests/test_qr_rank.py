"""``ps.qr`` / ``ps.lq`` at rank deficiency (pullbacks/qr.py's split rule,
docs/math.md "QR and LQ at rank deficiency"): exact for the entries ``A``
determines (``Q[:, :j]``, ``R[:j, :]``, ``j`` the first small pivot) and for
``f(Q @ R)`` wherever the cotangents carry it (square, wide and complete
``Q``; rounding-level pivots at the end), a ``GaugeWarning`` exactly where a
loss reaches the choice past ``j`` or what no cotangent carries, each
message's route run on its case. Finite differences are the reference;
every case on both backends (Julia through its stand-in here, for real in
``test_julia_backend_agrees_at_rank_deficiency``)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _julia import needs_julia
from _spectra import fd_grad, grad, inner, randn, rel_err

import pyspectral as ps

F64, C128 = torch.float64, torch.complex128
TOL = 1e-7  # against fourth-order finite differences, h = 1e-5


def zero_columns(m, n, cols, dtype=F64, seed=0):
    """``m x n`` with the columns ``cols`` exactly zero (exact zero pivots)."""
    A = randn(m, n, dtype=dtype, seed=seed)
    A[:, list(cols)] = 0
    return A


def dependent_column(m, n, c, dtype=F64, seed=0):
    """``m x n`` whose column ``c`` is ``a_0 - 2 a_1`` of two others before
    it (``c >= 2``: a rounding-level pivot ``|R_cc| ~ eps``)."""
    A = randn(m, n, dtype=dtype, seed=seed)
    A[:, c] = A[:, 0] - 2 * A[:, 1]
    return A


def silent(fn, *args):
    """``fn(*args)`` with GaugeWarning an error (the suite's setting, explicit)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        return fn(*args)


def weights(A, seed):
    return randn(*A.shape, dtype=A.dtype, seed=seed)


def product_loss(backend, mode="reduced", positive=False, seed=7):
    """``sum(sin(Re(W * Q R)))``: a smooth function of ``Q @ R`` (= ``A``)."""

    def loss(X):
        W = weights(X, seed)
        Q, R = ps.qr(X, mode, positive=positive, backend=backend)
        return torch.sin((W * (Q @ R)).real).sum()

    return loss


def determined_loss(j, backend, positive=False, seed=8):
    """A loss of what ``A`` determines at first small pivot ``j``:
    ``Q[:, :j]``, ``R[:j, :]`` and the range projector ``Q1 Q1^H``."""

    def loss(X):
        Q, R = ps.qr(X, positive=positive, backend=backend)
        Q1 = Q[..., :j]
        G = randn(*R[..., :j, :].shape, dtype=X.dtype, seed=seed)
        P = Q1 @ Q1.mH
        Wp = randn(*P.shape, dtype=X.dtype, seed=seed + 1)
        return inner(R[..., :j, :], G) + (Q1.abs() ** 3).sum() + inner(P, Wp)

    return loss


def check(loss, A, tol=TOL):
    assert rel_err(grad(loss, A), fd_grad(loss, A)) < tol


# ------------------------------------------------- the reproducers


@pytest.mark.parametrize("positive", [False, True], ids=["lapack", "positive"])
def test_determined_entry_past_a_zero_middle_column(backend, positive):
    """6x3, zero middle column, loss R[0, 2] = q0^T a2: was 64 % off, silent."""
    A = zero_columns(6, 3, [1])
    loss = lambda X: ps.qr(X, positive=positive, backend=backend).R[0, 2]  # noqa: E731
    silent(check, loss, A)
    lq = lambda X: ps.lq(X, positive=positive, backend=backend).L[2, 0]  # noqa: E731
    silent(check, lq, A.mT.contiguous())


def test_product_at_a_rounding_level_last_pivot(backend):
    """5x4 whose last column is a0 - 2 a1: f(Q @ R) was 37-59 % off with a
    warning; torch.linalg.qr is exact there, and so is ps.qr, silently."""
    A = dependent_column(5, 4, 3, seed=1)
    for seed in (7, 9):
        silent(check, product_loss(backend, seed=seed), A)
    silent(check, determined_loss(3, backend), A)


# ------------------------------------------------------ pivot patterns


@pytest.mark.parametrize("cols", [[0], [1], [2], [1, 3], [0, 2]], ids=str)
@pytest.mark.parametrize("m, n", [(4, 4), (3, 5), (6, 4)], ids=str)
def test_zero_columns_determined_part_exact(backend, m, n, cols):
    cols = [c for c in cols if c < min(m, n)]
    A = zero_columns(m, n, cols, seed=m * n + sum(cols))
    j = cols[0]
    silent(check, determined_loss(j, backend), A)


@pytest.mark.parametrize("cols", [[0], [1], [3], [1, 2]], ids=str)
@pytest.mark.parametrize("m, n", [(4, 4), (3, 5), (4, 6)], ids=str)
def test_zero_columns_product_exact_square_and_wide(backend, m, n, cols):
    """Q square (m <= n): every cotangent the product needs is in gR (its
    structural zeros included), so f(Q @ R) is exact at every zero pivot."""
    cols = [c for c in cols if c < min(m, n)]
    A = zero_columns(m, n, cols, seed=m + n + sum(cols))
    silent(check, product_loss(backend), A)


@pytest.mark.parametrize("cols", [[0], [1], [2], [1, 2]], ids=str)
def test_zero_columns_thin_q_warns_and_complete_is_exact(backend, cols):
    """A thin Q of a tall A: the derivative along the rank-raising directions
    outside Q's span is in no cotangent: warned, and the route it names,
    mode="complete", is exact."""
    A = zero_columns(6, 3, cols, seed=5 + sum(cols))
    loss = product_loss(backend)
    with pytest.warns(ps.GaugeWarning, match='and Q is thin.*mode="complete"'):
        grad(loss, A)
    silent(check, product_loss(backend, "complete"), A)
    with pytest.raises(ps.GaugeError, match="Q is thin"):
        X = A.clone().requires_grad_()
        Q, R = ps.qr(X, gauge="raise", backend=backend)
        torch.sin(Q @ R).sum().backward()


@pytest.mark.parametrize("c", [2, 3], ids=str)
@pytest.mark.parametrize("m, n", [(4, 4), (4, 6)], ids=str)
def test_dependent_columns_product_exact(backend, m, n, c):
    """Rounding-level pivots (a column a combination of earlier ones): the
    product and the determined part exact, square and wide."""
    A = dependent_column(m, n, c, seed=m * n + c)
    silent(check, product_loss(backend), A)
    silent(check, determined_loss(c, backend), A)


def test_dependent_middle_column_of_a_tall_a(backend):
    """A rounding-level pivot followed by a large one, thin Q: the part of the
    product's cotangent outside Q's span is lost in rounding: warned; the
    determined part exact and silent; mode="complete" exact."""
    A = dependent_column(7, 4, 2, seed=3)
    with pytest.warns(ps.GaugeWarning, match="Q is thin"):
        grad(product_loss(backend), A)
    silent(check, determined_loss(2, backend), A)
    silent(check, product_loss(backend, "complete"), A)


def test_several_small_pivots_and_complex(backend):
    """Two zero columns and a dependent one, complex, both gauges."""
    A = zero_columns(5, 5, [1, 3], dtype=C128, seed=4)
    A[:, 4] = A[:, 0] * (1 - 2j) + A[:, 2]
    for positive in (False, True):
        silent(check, product_loss(backend, positive=positive), A)
        silent(check, determined_loss(1, backend, positive=positive), A)


def test_batched_mixed_ranks(backend):
    """One call, matrices of different first small pivots (and one full
    rank): each exact, as when alone."""
    A = torch.stack([
        randn(4, 4, seed=1),
        zero_columns(4, 4, [1], seed=2),
        zero_columns(4, 4, [3], seed=3),
        dependent_column(4, 4, 2, seed=4),
    ])  # fmt: skip
    silent(check, product_loss(backend), A)

    def loss(X):
        Q, R = ps.qr(X, positive=True, backend=backend)
        return (R[..., 0, :] ** 2).sum() + (Q[..., :, 0] ** 3).sum()

    silent(check, loss, A)


def test_lq_zero_rows(backend):
    A = zero_columns(5, 3, [1], seed=6).mT.contiguous()  # a zero middle row

    def loss(X):
        L, Q = ps.lq(X, backend=backend)
        W = weights(X, 3)
        return torch.sin(W * (L @ Q)).sum() + L[2, 0] ** 2 + (Q[0] ** 3).sum()

    with pytest.warns(ps.GaugeWarning, match="lq: A is rank deficient.*Q is thin"):
        grad(loss, A)

    def complete(X):
        L, Q = ps.lq(X, "complete", backend=backend)
        W = weights(X, 3)
        return torch.sin(W * (L @ Q)).sum() + L[2, 0] ** 2 + (Q[0] ** 3).sum()

    silent(check, complete, A)
    square = zero_columns(4, 4, [2], seed=7).mT.contiguous()
    silent(check, complete, square)


def test_mode_r(backend):
    """mode="r": R[:j, :] and |R|^2 = |A|^2 exact; an entry of the rows past
    j that the choice moves (R[1, 2] = q1^T a2) warns."""
    A = zero_columns(3, 4, [1], seed=9)

    def loss(X):
        R = ps.qr(X, "r", backend=backend).R
        return (R[0] ** 3).sum() + (R.abs() ** 2).sum()

    silent(check, loss, A)
    with pytest.warns(ps.GaugeWarning, match="qr: A is rank deficient.*one choice"):
        grad(lambda X: ps.qr(X, "r", backend=backend).R[1, 2], A)


def test_loss_of_the_choice_warns_and_the_named_route_is_exact(backend):
    """A loss of Q's columns past j depends on the choice: warned, and the
    message's route (a loss of Q @ R) is exact on the same matrix."""
    A = zero_columns(4, 4, [1], seed=10)
    X = A.clone().requires_grad_()
    Q, R = ps.qr(X, backend=backend)
    match = r"one choice of many.*Use a loss of Q @ R"
    with pytest.warns(ps.GaugeWarning, match=match):
        (Q[:, 2].sum() + R[2:].sum()).backward()
    silent(check, product_loss(backend), A)
    X = A.clone().requires_grad_()
    Q, R = ps.qr(X, backend=backend, gauge="raise")
    with pytest.raises(ps.GaugeError):
        Q[:, 1].sum().backward()
    Q, R = ps.qr(A.clone().requires_grad_(), backend=backend, gauge="ignore")
    silent(lambda: Q[:, 1].sum().backward())


def test_mps_sweep_with_a_zero_bond_column(backend):
    """A left-canonical QR sweep (examples/mps_canonical_form.py's) of an MPS
    with a zero bond column: the energy is f(Q R)-shaped; where the QR is
    square it is exact, where Q is thin it warns, and mode="complete" (the
    message's route) is exact."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(1, 2, 2), (2, 2, 4), (4, 2, 2), (2, 2, 1)]
    tensors = [torch.randn(s, dtype=F64, generator=gen) for s in shapes]
    H = randn(16, 16, seed=4)
    H = H + H.mT

    def energy(flat, mode, zero_site):
        ts, i = [], 0
        for s in shapes:
            k = s[0] * s[1] * s[2]
            ts.append(flat[i : i + k].reshape(s))
            i += k
        ts[zero_site] = (
            ts[zero_site]
            * torch.tensor([1.0, 0.0] + [1.0] * 2)[: ts[zero_site].shape[-1]]
        )  # a zero bond column (index 1)
        R = torch.ones(1, 1, dtype=F64)
        out = []
        for T in ts:
            _, d, Dr = T.shape
            M = (R @ T.reshape(R.shape[1], d * Dr)).reshape(-1, Dr)
            Q, R = ps.qr(M, mode, positive=True, backend=backend)
            out.append(Q.reshape(-1, d, Q.shape[-1]))
        psi = out[0].reshape(-1, out[0].shape[-1])
        for T in out[1:]:
            psi = (psi @ T.reshape(T.shape[0], -1)).reshape(-1, T.shape[-1])
        psi = (psi @ R).reshape(-1)
        return psi @ H @ psi / (psi @ psi)

    flat = torch.cat([t.reshape(-1) for t in tensors])
    # site 0: M is 2 x 2 (square): exact and silent
    silent(check, lambda x: energy(x, "reduced", 0), flat)
    # site 2: M is 8 x 2 (thin Q): warned; complete exact
    with pytest.warns(ps.GaugeWarning, match="Q is thin"):
        grad(lambda x: energy(x, "reduced", 2), flat)
    silent(check, lambda x: energy(x, "complete", 2), flat)


# ------------------------------------------------------------ forward mode


def jvp(loss, A, D):
    """The tangent of ``loss`` at ``A`` along ``D`` by forward-mode AD (dual
    numbers: torch.func transforms run on the native backend only)."""
    with fwAD.dual_level():
        out = loss(fwAD.make_dual(A, D))
        return float(fwAD.unpack_dual(out).tangent)


def directional_fd(loss, A, D, h=1e-5):
    f = lambda t: float(loss(A + t * D))  # noqa: E731
    return (8 * (f(h) - f(-h)) - (f(2 * h) - f(-2 * h))) / (12 * h)


def test_forward_mode_determined_and_product(backend):
    """jvp: the determined entries' and the product's tangents exact (square
    Q); a tangent that moves the factors past j warns (the tangents of the
    choice are one of many), and the route it names, reverse mode, is exact
    and silent. A tangent that leaves Z alone is silent."""
    A = zero_columns(4, 4, [1], seed=11)
    D = randn(4, 4, seed=12)
    for loss in (
        lambda X: ps.qr(X, backend=backend).R[0, 2],
        product_loss(backend),
    ):
        with pytest.warns(ps.GaugeWarning, match="forward mode.*reverse mode"):
            t = jvp(loss, A, D)
        assert abs(t - directional_fd(loss, A, D)) < TOL * (1 + abs(t))
        if backend == "torch":  # torch.func.jvp: the same rule
            with pytest.warns(ps.GaugeWarning, match="forward mode"):
                _, tf = torch.func.jvp(loss, (A,), (D,))
            assert abs(float(tf) - t) < 1e-12 * (1 + abs(t))
        silent(check, loss, A)
    # a tangent in the span of q0 that moves only R[0, :]: Z is unmoved
    Q, _ = torch.linalg.qr(A)
    D0 = Q[:, :1] @ randn(1, 4, seed=13)
    loss = determined_loss(1, backend)
    t = silent(lambda: jvp(loss, A, D0))
    assert abs(t - directional_fd(loss, A, D0)) < TOL * (1 + abs(t))


def test_forward_mode_zero_middle_column_thin(backend):
    """The issue's forward case: 6x3, zero middle column, R[0, 2]: was 33 %
    off; exact (and warned that the choice's tangents move)."""
    A = zero_columns(6, 3, [1])
    D = randn(6, 3, seed=14)
    loss = lambda X: ps.qr(X, positive=True, backend=backend).R[0, 2]  # noqa: E731
    with pytest.warns(ps.GaugeWarning, match="forward mode"):
        t = jvp(loss, A, D)
    assert abs(t - directional_fd(loss, A, D)) < TOL * (1 + abs(t))
    lq = lambda X: ps.lq(X, backend=backend).L[2, 0]  # noqa: E731
    with pytest.warns(ps.GaugeWarning, match="lq: forward mode"):
        t = jvp(lq, A.mT.contiguous(), D.mT.contiguous())
    assert abs(t - directional_fd(lq, A.mT, D.mT)) < TOL * (1 + abs(t))


def test_full_rank_gradcheck_and_jvp(backend):
    """Full rank: unchanged (gradcheck, jvp against the reverse mode)."""
    A = randn(5, 3, seed=15).requires_grad_()

    def f(X):
        Q, R = ps.qr(X, positive=True, backend=backend)
        return Q.sum(-1), R

    assert torch.autograd.gradcheck(f, (A,))
    D = randn(5, 3, seed=16)
    loss = lambda X: (f(X)[0] ** 2).sum() + f(X)[1].sum()  # noqa: E731
    t = silent(lambda: jvp(loss, A.detach(), D))
    assert abs(t - float(inner(grad(loss, A), D))) < 1e-10 * (1 + abs(t))


def test_complete_complement_message_names_its_projector(backend):
    """Item 8: the complement warning names Q2 Q2^H (and that route is exact)."""
    A = randn(6, 3, seed=17)
    X = A.clone().requires_grad_()
    Q, _ = ps.qr(X, "complete", backend=backend)
    with pytest.warns(ps.GaugeWarning, match=r"basis of Q's last columns.*Q2 Q2\^H"):
        Q[..., 4:].sum().backward()
    W = randn(6, 6, seed=18)

    def route(X):
        Q2 = ps.qr(X, "complete", backend=backend).Q[..., 3:]
        return inner(Q2 @ Q2.mH, W)

    silent(check, route, A)
    X = A.mT.contiguous().requires_grad_()
    _, Q = ps.lq(X, "complete", backend=backend)
    with pytest.warns(ps.GaugeWarning, match=r"lq: .*last rows.*Q2\^H Q2"):
        Q[..., 4:, :].sum().backward()


# ------------------------------------------------------------ real Julia


@needs_julia
def test_julia_backend_agrees_at_rank_deficiency():
    """The Julia rules themselves (no stand-in) against the native ones on the
    cases above: same gradients, same warnings."""
    cases = [
        (zero_columns(6, 3, [1]), "complete"),
        (zero_columns(4, 4, [0, 2], dtype=C128, seed=2), "reduced"),
        (dependent_column(5, 4, 3, seed=1), "reduced"),
        (zero_columns(3, 5, [1], seed=3), "reduced"),
    ]
    for A, mode in cases:
        for op in ("qr", "lq"):
            X0 = A if op == "qr" else A.mH.contiguous()

            def loss(X, backend, op=op, mode=mode):
                F = getattr(ps, op)(X, mode, backend=backend)
                W = weights(X, 5)
                return torch.sin((W * (F[0] @ F[1])).real).sum()

            got = silent(grad, lambda X: loss(X, "julia"), X0)
            ref = silent(grad, lambda X: loss(X, "torch"), X0)
            torch.testing.assert_close(got, ref, atol=1e-9, rtol=1e-9)
    A = zero_columns(6, 3, [1])
    for backend in ("julia", "torch"):
        with pytest.warns(ps.GaugeWarning, match="Q is thin"):
            grad(product_loss(backend), A)
        with pytest.warns(ps.GaugeWarning, match="forward mode"):
            jvp(product_loss(backend), A, randn(6, 3, seed=1))
