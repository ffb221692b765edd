"""Top-k of a linear operator (``pyspectral/operator.py``): ``svd_topk`` and
``eigh_topk`` on ``LinearOperator``s that are never formed. The gradient
w.r.t. whatever the operator's products use (low-rank factors, a sparse
matrix's values, a sharded matrix behind collectives) must equal the dense
path's (``ps.svd(B @ C, k=k, method="full")``) and finite differences.

The spectra have a gap at k, so that ``method="randomized"`` runs the
certified iteration; the auto tests lower ``topk.DENSE_FALLBACK_MAX`` to
reach, on small matrices, the decisions taken for operators too large to
form.
"""

from __future__ import annotations

import gc
import socket
import warnings

import pytest
import torch
from _spectra import randn, random_like, rel_err, unitary

import pyspectral as ps
from pyspectral import topk as TK

DTYPES = [torch.float64, torch.complex128]


def decaying(r: int, ratio: float = 0.7) -> list[float]:
    return [10 * ratio**i for i in range(r)]


def factors(m, n, s, dtype=torch.float64, seed=3):
    """``B (m, r)``, ``C (r, n)`` with ``B @ C`` of singular values ``s``."""
    gen = torch.Generator().manual_seed(seed)
    r = len(s)
    U, V = unitary(m, dtype, gen)[:, :r], unitary(n, dtype, gen)[:, :r]
    B = U * torch.tensor(s, dtype=dtype)
    return B.requires_grad_(), V.mH.clone().requires_grad_()


def factored(B, C):
    """``A = B @ C`` through its products, never formed."""
    *batch, m, _ = B.shape
    return ps.LinearOperator(
        (*batch, m, C.shape[-1]),
        lambda X: B @ (C @ X),
        lambda Y: C.mH @ (B.mH @ Y),
        dtype=B.dtype,
    )


def svd_loss(U, S, Vh, W):
    """Gauge invariant at a gap: ``U Vh``, a projector, ``sum(S^2)``."""
    P = U @ U.mH
    return (
        ((U @ Vh) * W.conj()).real.sum()
        + (S**2).sum()
        + (P[..., :3, :].abs() ** 2).sum()
    )


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def op_grads(B, C, k, W, **kw):
    B, C = leaves(B, C)
    U, S, Vh = ps.svd_topk(factored(B, C), k, **kw)
    return (U, S, Vh), torch.autograd.grad(svd_loss(U, S, Vh, W), (B, C))


def dense_grads(B, C, k, W):
    B, C = leaves(B, C)
    U, S, Vh = ps.svd(B @ C, k=k, method="full")
    return (U, S, Vh), torch.autograd.grad(svd_loss(U, S, Vh, W), (B, C))


def assert_same(got, want, tol):
    (U, S, Vh), g = got
    (U0, S0, Vh0), g0 = want
    assert torch.allclose(S, S0, rtol=tol, atol=0)
    assert torch.allclose(U @ Vh, U0 @ Vh0, atol=tol)
    for a, b in zip(g, g0):
        assert rel_err(a, b) < tol


# -------------------------------------------------- factorised operator


@pytest.mark.parametrize("method", ["randomized", "krylov", "auto", "full"])
@pytest.mark.parametrize("shape", [(60, 50), (50, 60)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_factorised_gradient_equals_dense_path(shape, method, dtype) -> None:
    m, n = shape
    B, C = factors(m, n, decaying(20), dtype)
    W = random_like(torch.empty(m, n, dtype=dtype), seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # certified at the gap: nothing to say
        got = op_grads(B, C, 4, W, method=method)
    assert_same(got, dense_grads(B, C, 4, W), 1e-9)


def test_batched_operator() -> None:
    (B1, C1), (B2, C2) = (
        factors(40, 30, decaying(12)),
        factors(40, 30, decaying(12, 0.5), seed=4),
    )
    B, C = torch.stack([B1, B2]).detach(), torch.stack([C1, C2]).detach()
    W = randn(2, 40, 30, seed=5)
    assert_same(
        op_grads(B, C, 3, W, method="randomized"), dense_grads(B, C, 3, W), 1e-9
    )


def test_batched_hermitian_operator() -> None:
    (B1, D1), (B2, D2) = (
        hermitian_factors(30, 8, torch.float64, 1.0, seed=s) for s in (1, 2)
    )
    B, D = leaves(torch.stack([B1, B2]), torch.stack([D1, D2]))
    op = ps.LinearOperator(
        (2, 30, 30), lambda X: B @ (B.mH @ X) + D[..., None] * X, dtype=B.dtype
    )
    W = randn(30, 30, seed=3)
    w, V = ps.eigh_topk(op, 3, method="randomized")
    g = torch.autograd.grad(eigh_loss(w, V, W), (B, D))
    B0, D0 = leaves(B, D)
    w0, V0 = ps.eigh(B0 @ B0.mH + torch.diag_embed(D0), k=3, method="full")
    g0 = torch.autograd.grad(eigh_loss(w0, V0, W), (B0, D0))
    assert torch.allclose(w, w0, atol=1e-12)
    assert all(rel_err(a, b) < 1e-9 for a, b in zip(g, g0))


def test_float32_operator() -> None:
    B, C = factors(40, 30, decaying(12), torch.float32)
    W = randn(40, 30, seed=5)
    (_, S, _), g = op_grads(B, C, 3, W.float(), method="randomized")
    (_, S0, _), g0 = dense_grads(B.double(), C.double(), 3, W)
    assert torch.allclose(S.double(), S0, rtol=1e-5)
    assert all(rel_err(a.double(), b) < 1e-4 for a, b in zip(g, g0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradcheck_through_the_iteration(dtype) -> None:
    B, C = factors(16, 12, decaying(6, 0.5), dtype)
    W = random_like(torch.empty(16, 12, dtype=dtype), seed=2)

    def f(B, C):
        return svd_loss(*ps.svd_topk(factored(B, C), 2, method="randomized"), W)

    assert torch.autograd.gradcheck(f, leaves(B, C), fast_mode=True)


def test_torch_func_over_the_factors() -> None:
    B, C = (t.detach() for t in factors(50, 40, decaying(15)))
    W = randn(50, 40, seed=2)

    def f(method):
        def loss(B, C):
            return svd_loss(*ps.svd_topk(factored(B, C), 3, method=method), W)

        return loss

    g = torch.func.grad(f("randomized"), argnums=(0, 1))(B, C)
    _, g0 = dense_grads(B, C, 3, W)
    assert all(rel_err(a, b) < 1e-9 for a, b in zip(g, g0))
    J = torch.func.jacrev(f("randomized"), argnums=(0, 1))(B, C)
    assert all(rel_err(a, b) < 1e-9 for a, b in zip(J, g0))
    _, vjp = torch.func.vjp(f("randomized"), B, C)
    assert all(
        rel_err(a, b) < 1e-9 for a, b in zip(vjp(torch.tensor(1.0, dtype=B.dtype)), g0)
    )


def test_second_derivative_raises() -> None:
    B, C = leaves(*factors(40, 30, decaying(12)))
    U, S, Vh = ps.svd_topk(factored(B, C), 3, method="randomized")
    gB, _ = torch.autograd.grad(
        svd_loss(U, S, Vh, randn(40, 30)), (B, C), create_graph=True
    )
    with pytest.raises(ps.DerivativeError, match="first order only"):
        gB.sum().backward()


# ---------------------------------------------------------- sparse matrix


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sparse_matrix_gradient_into_its_values(dtype) -> None:
    A, _ = factors(50, 40, decaying(40, 0.6), dtype, seed=2)
    mask = torch.rand(50, 40, generator=torch.Generator().manual_seed(1)) < 0.5
    A = A.detach() * mask
    idx = A.nonzero().T
    values = A[idx[0], idx[1]].clone().requires_grad_()
    S = torch.sparse_coo_tensor(idx, values, (50, 40), check_invariants=True)
    Sh = torch.sparse_coo_tensor(
        idx.flip(0), values.conj(), (40, 50), check_invariants=True
    )
    op = ps.LinearOperator(
        (50, 40),
        lambda X: torch.sparse.mm(S, X),
        lambda Y: torch.sparse.mm(Sh, Y),
        dtype=dtype,
    )
    W = random_like(A, seed=2)
    (g,) = torch.autograd.grad(
        svd_loss(*ps.svd_topk(op, 3, method="randomized"), W), values
    )
    D = A.clone().requires_grad_()
    (g0,) = torch.autograd.grad(svd_loss(*ps.svd(D, k=3, method="full"), W), D)
    assert rel_err(g, g0[idx[0], idx[1]]) < 1e-9


def convolution(w, n):
    """``A X``: each column of ``X`` convolved with the kernel ``w`` (zero
    padded, same length); ``A^H Y``: the transposed convolution."""
    pad = (w.shape[0] - 1) // 2
    kernel = w.view(1, 1, -1)

    def matmul(X):
        out = torch.nn.functional.conv1d(X.mT.unsqueeze(-2), kernel, padding=pad)
        return out.squeeze(-2).mT

    def rmatmul(Y):
        t = torch.nn.functional.conv_transpose1d(
            Y.mT.unsqueeze(-2), kernel, padding=pad
        )
        return t.squeeze(-2).mT

    return ps.LinearOperator((n, n), matmul, rmatmul, dtype=w.dtype)


@pytest.mark.parametrize("method", ["randomized", "auto"])
def test_convolution_gradient_into_its_kernel(method) -> None:
    """A convolution's spectrum decays slowly (no gap past k): the block
    takes most columns so that the iteration converges."""
    w = torch.tensor([1.0, 2.0, 3.0, 2.0, 1.0], dtype=torch.float64) + 0.1 * randn(
        5, seed=1
    )
    eye = torch.eye(40, dtype=torch.float64)
    assert torch.equal(
        convolution(w, 40).rmatmul(eye), convolution(w, 40).matmul(eye).mT
    )
    W = randn(40, 40, seed=2)
    w1, w0 = leaves(w, w)
    U, S, Vh = ps.svd_topk(convolution(w1, 40), 3, method=method, oversample=30)
    (g,) = torch.autograd.grad(svd_loss(U, S, Vh, W), w1)
    A = convolution(w0, 40).matmul(eye)  # formed, differentiable in w0
    (g0,) = torch.autograd.grad(svd_loss(*ps.svd(A, k=3, method="full"), W), w0)
    assert rel_err(g, g0) < 1e-9


# ---------------------------------------------------------------- eigh


def hermitian_factors(n, r, dtype, sign, seed=5):
    """``B (n, r)`` and the real diagonal ``D`` of ``H = sign B B^H + diag(D)``:
    the wanted end (largest for sign = 1, smallest for -1) is ``B``'s
    decaying spectrum, well above the small diagonal."""
    gen = torch.Generator().manual_seed(seed)
    U = unitary(n, dtype, gen)[:, :r]
    B = U * torch.tensor(decaying(r), dtype=dtype).sqrt()
    D = 0.05 * torch.rand(n, dtype=torch.float64, generator=gen)
    return B.requires_grad_(), D.requires_grad_()


def hermitian_op(B, D, sign):
    n = B.shape[-2]
    return ps.LinearOperator(
        (n, n),
        lambda X: sign * (B @ (B.mH @ X)) + D.to(B.dtype)[:, None] * X,
        dtype=B.dtype,
    )


def eigh_loss(w, V, W):
    return ((V @ V.mH) * W.conj()).real.sum() + (w**2).sum() + (V[:3].abs() ** 2).sum()


@pytest.mark.parametrize("method", ["randomized", "auto"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_topk_hermitian_factorised(dtype, largest, method) -> None:
    sign = 1.0 if largest else -1.0
    B, D = leaves(*hermitian_factors(60, 15, dtype, sign))
    W = random_like(torch.empty(60, 60, dtype=dtype), seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w, V = ps.eigh_topk(hermitian_op(B, D, sign), 4, largest=largest, method=method)
        g = torch.autograd.grad(eigh_loss(w, V, W), (B, D))
    B0, D0 = leaves(B, D)
    H = sign * (B0 @ B0.mH) + torch.diag(D0.to(dtype))
    w0, V0 = ps.eigh(H, k=4, largest=largest, method="full")
    g0 = torch.autograd.grad(eigh_loss(w0, V0, W), (B0, D0))
    assert torch.allclose(w, w0, atol=1e-12)
    assert torch.allclose(V @ V.mH, V0 @ V0.mH, atol=1e-10)
    assert all(rel_err(a, b) < 1e-9 for a, b in zip(g, g0))


def test_eigh_gradcheck_and_torch_func() -> None:
    B, D = (t.detach() for t in hermitian_factors(14, 5, torch.float64, 1.0))

    def f(B, D):
        return eigh_loss(
            *ps.eigh_topk(hermitian_op(B, D, 1.0), 2, method="randomized"), W
        )

    W = randn(14, 14, seed=4)
    assert torch.autograd.gradcheck(f, leaves(B, D), fast_mode=True)
    g = torch.func.grad(f, argnums=(0, 1))(B, D)
    B1, D1 = leaves(B, D)
    g0 = torch.autograd.grad(f(B1, D1), (B1, D1))
    assert all(rel_err(a, b) < 1e-12 for a, b in zip(g, g0))


# --------------------------------------------------- a tensor is ps.svd


def test_a_tensor_is_the_same_call_as_svd_and_eigh() -> None:
    A = leaves(factors(40, 30, decaying(30))[0] @ factors(30, 30, decaying(30))[1])[0]
    for method in ("randomized", "full", "auto"):
        got = ps.svd_topk(A, 3, method=method)
        want = ps.svd(A, k=3, method=method)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        g = torch.autograd.grad(got.S.sum() + got.U.sum(), A)[0]
        g0 = torch.autograd.grad(want.S.sum() + want.U.sum(), A)[0]
        assert torch.equal(g, g0)
    H = leaves(randn(20, 20, seed=1) + randn(20, 20, seed=1).mT)[0]
    got = ps.eigh_topk(H, 3, largest=False, method="full")
    want = ps.eigh(H, k=3, largest=False, method="full")
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    with pytest.raises(ps.InputError, match="svd: k must be"):
        ps.svd_topk(A, -1)


# ----------------------------------------------- where the products run


class Recorder:
    """A factorised operator that records, per product, whether autograd was
    on and the shape of the block it was given."""

    def __init__(self, B, C):
        self.calls: list[tuple[str, bool, tuple]] = []
        self.shape, self.dtype, self.device = (
            (B.shape[0], C.shape[1]),
            B.dtype,
            B.device,
        )
        self.B, self.C = B, C

    def matmul(self, X):
        self.calls.append(("matmul", torch.is_grad_enabled(), tuple(X.shape)))
        return self.B @ (self.C @ X)

    def rmatmul(self, Y):
        self.calls.append(("rmatmul", torch.is_grad_enabled(), tuple(Y.shape)))
        return self.C.mH @ (self.B.mH @ Y)


def test_products_run_without_autograd_but_two() -> None:
    """The iteration and the backward's CG run under no_grad; only
    ``A V_k`` and ``A^H U_d`` are computed with autograd, once; every product
    is on a block of at most p = k + oversample columns."""
    B, C = leaves(*factors(60, 50, decaying(20)))
    op = Recorder(B, C)
    U, S, Vh = ps.svd_topk(op, 4, method="randomized", oversample=6)
    forward = list(op.calls)
    tracked = [c for c in forward if c[1]]
    assert [c[0] for c in tracked] == ["matmul", "rmatmul"]
    assert tracked[0][2] == (50, 4) and tracked[1][2][0] == 60
    op.calls.clear()
    svd_loss(U, S, Vh, randn(60, 50)).backward()
    assert op.calls and not any(c[1] for c in op.calls)
    blocks = {c[2][0]: c[0] for c in forward + op.calls}
    assert blocks == {50: "matmul", 60: "rmatmul"}
    assert max(c[2][1] for c in forward + op.calls) <= 10
    assert B.grad is not None and C.grad is not None


def test_no_graph_without_grad() -> None:
    B, C = leaves(*factors(60, 50, decaying(20)))
    op = Recorder(B, C)
    with torch.no_grad():
        U, S, Vh = ps.svd_topk(op, 4, method="randomized")
    assert not any(c[1] for c in op.calls)
    assert not (U.requires_grad or S.requires_grad or Vh.requires_grad)
    op.calls.clear()
    B.requires_grad_(False), C.requires_grad_(False)
    U, S, Vh = ps.svd_topk(op, 4, method="randomized")
    assert not S.requires_grad


def test_auto_forms_a_small_operator_once() -> None:
    B, C = leaves(*factors(40, 30, decaying(20)))
    op = Recorder(B, C)
    W = randn(40, 30, seed=2)
    U, S, Vh = ps.svd_topk(op, 3)
    assert [(c[0], c[2]) for c in op.calls] == [("matmul", (30, 30))]
    g = torch.autograd.grad(svd_loss(U, S, Vh, W), (B, C))
    _, g0 = dense_grads(B, C, 3, W)
    assert all(rel_err(a, b) < 1e-12 for a, b in zip(g, g0))


# ------------------------------------------ large operators (auto) and CG


@pytest.fixture
def too_large_to_form(monkeypatch):
    monkeypatch.setattr(TK, "DENSE_FALLBACK_MAX", 0)


def test_auto_iterates_on_an_operator_too_large_to_form(too_large_to_form) -> None:
    B, C = factors(60, 50, decaying(20))
    W = randn(60, 50, seed=2)
    op = Recorder(*leaves(B, C))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ps.svd_topk(op, 4)
    assert all(c[2][1] < 50 for c in op.calls)  # never formed
    assert_same(op_grads(B, C, 4, W), dense_grads(B, C, 4, W), 1e-9)
    Bh, D = leaves(*hermitian_factors(60, 15, torch.float64, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w, V = ps.eigh_topk(hermitian_op(Bh, D, 1.0), 4)
    w0, V0 = ps.eigh(Bh @ Bh.mH + torch.diag(D), k=4, method="full")
    assert torch.allclose(w, w0, atol=1e-12)


def test_auto_warns_where_it_cannot_certify_nor_form(too_large_to_form) -> None:
    op = factored(randn(40, 30, seed=1), torch.eye(30, dtype=torch.float64))
    with pytest.warns(ps.ConvergenceWarning, match=r"relative residual .* is \S+") as w:
        U, S, Vh = ps.svd_topk(op, 3, n_iter=2)
    message = str(w[0].message)
    assert "method='auto'" in message and "too large to form" in message
    assert "oversample" in message
    assert torch.isfinite(S).all()
    with pytest.warns(ps.ConvergenceWarning, match=r"method='randomized'.*residual"):
        ps.svd_topk(op, 3, method="randomized", n_iter=2)
    with pytest.warns(ps.ConvergenceWarning, match="eigh_topk.*residual"):
        ps.eigh_topk(
            hermitian_op(randn(30, 30, seed=2), torch.zeros(30), 1.0), 3, n_iter=2
        )


def no_gap(dtype=torch.float64):
    """Factors of a slowly decaying spectrum: no gap past a small block."""
    return factors(40, 30, [1 / (i + 1) ** 0.5 for i in range(30)], dtype, seed=4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_without_a_gap_falls_back_to_the_exact_pullback(dtype) -> None:
    """A CG capped at one step cannot converge; the operator is small, so it is
    formed and the pullback redone exactly; no warning."""
    B, C = no_gap(dtype)
    W = random_like(torch.empty(40, 30, dtype=dtype), seed=2)
    got = op_grads(B, C, 4, W, method="randomized", oversample=6, backward_maxiter=1)
    assert_same(got, dense_grads(B, C, 4, W), 1e-9)


def test_eigh_backward_without_a_gap_falls_back_to_the_exact_pullback() -> None:
    gen = torch.Generator().manual_seed(3)
    w0 = torch.tensor([1 / (i + 1) ** 0.5 for i in range(30)], dtype=torch.float64)
    B = (unitary(30, torch.float64, gen) * w0.sqrt()).requires_grad_()
    D = torch.zeros(30, dtype=torch.float64, requires_grad=True)
    W = randn(30, 30, seed=2)
    w, V = ps.eigh_topk(
        hermitian_op(B, D, 1.0),
        4,
        method="randomized",
        oversample=6,
        backward_maxiter=1,
    )
    g = torch.autograd.grad(eigh_loss(w, V, W), (B, D))
    B0, D0 = leaves(B, D)
    w1, V1 = ps.eigh(B0 @ B0.mH + torch.diag(D0), k=4, method="full")
    g0 = torch.autograd.grad(eigh_loss(w1, V1, W), (B0, D0))
    assert all(rel_err(a, b) < 1e-9 for a, b in zip(g, g0))


def test_backward_without_a_gap_warns_when_too_large(too_large_to_form) -> None:
    B, C = no_gap()
    with pytest.warns(
        ps.ConvergenceWarning, match=r"svd_topk backward.*relative residual \S+"
    ):
        _, g = op_grads(
            B,
            C,
            4,
            randn(40, 30),
            method="randomized",
            oversample=6,
            backward_maxiter=1,
        )
    assert all(torch.isfinite(t).all() for t in g)
    B = B.detach().requires_grad_()
    w, V = ps.eigh_topk(
        hermitian_op(B, torch.zeros(40), 1.0),
        4,
        method="randomized",
        oversample=6,
        backward_maxiter=1,
    )
    with pytest.warns(ps.ConvergenceWarning, match=r"eigh_topk backward.*residual"):
        (g,) = torch.autograd.grad(eigh_loss(w, V, randn(40, 40)), B)
    assert torch.isfinite(g).all()


# ----------------------------------------------------------- distributed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def row_sharded(A_r, rows, m, how):
    """``A`` sharded by rows across ranks (this rank holds ``A_r = A[rows]``):
    ``A X`` gathers the local products, ``A^H Y`` sums ``A_r^H Y[rows]``
    over the ranks; both collectives are differentiable."""
    import torch.distributed as dist

    if how == "nn.functional":
        import torch.distributed.nn.functional as DF

        def matmul(X):
            return torch.cat(DF.all_gather(A_r @ X), -2)

        def rmatmul(Y):
            return DF.all_reduce(A_r.mH @ Y[rows])

    else:
        import torch.distributed._functional_collectives as fc

        group = dist.group.WORLD

        def matmul(X):
            return fc.wait_tensor(fc.all_gather_single(A_r @ X, 0, group))

        def rmatmul(Y):
            return fc.wait_tensor(fc.all_reduce(A_r.mH @ Y[rows], "sum", group))

    return ps.LinearOperator((m, A_r.shape[-1]), matmul, rmatmul, dtype=A_r.dtype)


def sharded_run(rank, world, port, A, W, hows, folder) -> None:
    """One rank: its rows of ``A``, the same loss on every rank (divided by
    the world size: the collectives' backward sums the ranks' gradients, the
    data-parallel convention), its rows of the gradient saved to ``folder``."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}"
    )
    try:
        for how in hows:
            sharded_step(rank, world, A, W, how, folder)
    finally:
        # What the differentiable collectives' backward leaves in reference
        # cycles, collected only at interpreter exit, after the group is gone,
        # aborts a spawned rank now and then ("terminate called without an
        # active exception": torch 2.13 with gloo, about 1 run in 6, the same
        # without pyspectral; none in 100 when collected here).
        gc.collect()
        dist.destroy_process_group()


def sharded_step(rank, world, A, W, how, folder) -> None:
    rows = torch.arange(A.shape[0]).chunk(world)[rank]
    A_r = A[rows].clone().requires_grad_()
    op = row_sharded(A_r, rows, A.shape[0], how)
    with warnings.catch_warnings():  # nn.functional is deprecated
        warnings.simplefilter("ignore", FutureWarning)
        U, S, Vh = ps.svd_topk(op, 3, method="randomized")
        (svd_loss(U, S, Vh, W) / world).backward()
    torch.save((S.detach(), A_r.grad), f"{folder}/{how}-{rank}.pt")


def collectives() -> list[str]:
    import torch.distributed._functional_collectives as fc

    # differentiable all_gather_single / all_reduce: torch >= 2.10 or so
    return ["nn.functional"] + (
        ["functional_collectives"] * hasattr(fc, "all_gather_single")
    )


@pytest.mark.parametrize("world", [1, 2])
def test_row_sharded_operator_through_collectives(world, tmp_path) -> None:
    """Real gloo runs, one process or two, through torch.distributed's
    differentiable collectives: every rank gets the top-k singular values and
    its rows of the dense path's gradient."""
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available here")
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    B, C = factors(60, 40, decaying(30, 0.6))
    A, W = (B @ C).detach(), randn(60, 40, seed=2)
    args = (world, free_port(), A, W, collectives(), str(tmp_path))
    if world == 1:
        sharded_run(0, *args)
    else:
        torch.multiprocessing.spawn(sharded_run, args=args, nprocs=world)
    D = A.clone().requires_grad_()
    U0, S0, Vh0 = ps.svd(D, k=3, method="full")
    svd_loss(U0, S0, Vh0, W).backward()
    for how in collectives():
        for rank, rows in enumerate(torch.arange(60).chunk(world)):
            S, g = torch.load(tmp_path / f"{how}-{rank}.pt")
            assert torch.allclose(S, S0, rtol=1e-12)
            assert rel_err(g, D.grad[rows]) < 1e-9


# ----------------------------------------------------------------- errors


def good_op():
    B, C = factors(20, 15, decaying(10))
    return factored(B.detach(), C.detach())


class Lacking:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def test_operator_errors() -> None:
    op = good_op()
    mm = op.matmul
    with pytest.raises(ps.InputTypeError, match="lacks shape, dtype, device, matmul"):
        ps.svd_topk(object(), 2)
    with pytest.raises(ps.InputTypeError, match="lacks matmul"):
        ps.svd_topk(Lacking(shape=(3, 3), dtype=torch.float64, device="cpu"), 2)
    with pytest.raises(ps.InputTypeError, match="lacks shape"):
        ps.eigh_topk(Lacking(matmul=mm, dtype=torch.float64, device="cpu"), 2)
    no_r = ps.LinearOperator((20, 15), mm, dtype=torch.float64)
    with pytest.raises(ps.InputTypeError, match="rmatmul must be a callable"):
        ps.svd_topk(no_r, 2)
    with pytest.raises(ps.InputTypeError, match="matmul must be a callable"):
        ps.LinearOperator((20, 15), "B @ C", dtype=torch.float64)
    with pytest.raises(ps.InputTypeError, match="rmatmul must be a callable"):
        ps.LinearOperator((20, 15), mm, "C.mH @ B.mH", dtype=torch.float64)
    with pytest.raises(ps.ShapeError, match="at least 2"):
        ps.LinearOperator((20.0, 15), mm, dtype=torch.float64)
    with pytest.raises(ps.ShapeError, match="at least 2"):
        ps.LinearOperator((20,), mm, dtype=torch.float64)
    with pytest.raises(ps.ShapeError, match="non-negative"):
        ps.LinearOperator((20, -1), mm, dtype=torch.float64)
    with pytest.raises(ps.DtypeError, match="op.dtype"):
        ps.LinearOperator((20, 15), mm, dtype=torch.int64)
    with pytest.raises(ps.ShapeError, match="square"):
        ps.eigh_topk(op, 2)
    assert "LinearOperator(shape=(20, 15)" in repr(op)


def test_backend_errors() -> None:
    with pytest.raises(ps.BackendError, match="native backend only"):
        ps.svd_topk(good_op(), 2, backend="julia")
    with pytest.raises(ps.BackendError, match="native backend only"):
        ps.eigh_topk(hermitian_op(randn(8, 2), torch.zeros(8), 1.0), 2, backend="julia")
    with pytest.raises(ps.BackendError, match="backend must be one of"):
        ps.svd_topk(good_op(), 2, backend="jax")


@pytest.mark.parametrize("k", [-1, 2.0, True, "2", None])
def test_k_out_of_range(k) -> None:
    with pytest.raises(
        ps.InputError,
        match=r"svd_topk: k must be an integer >= 0 \(the maximum rank; a k past "
        r"min\(m, n\)",
    ):
        ps.svd_topk(good_op(), k)


def test_k_past_min_m_n_keeps_every_triplet() -> None:
    """A k past min(m, n) is a maximum, for an operator too."""
    U, S, Vh = ps.svd_topk(good_op(), 40)
    assert S.shape[-1] == 15


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"method": "lanczos"}, "method"),
        ({"oversample": -1}, "oversample"),
        ({"n_iter": -1}, "n_iter"),
        ({"backward_rtol": 2.0}, "backward_rtol"),
        ({"backward_maxiter": 0}, "backward_maxiter"),
        ({"broadening": 0.0}, "broadening"),
        ({"degeneracy_atol": float("inf")}, "degeneracy_atol"),
        ({"gauge": "loud"}, "gauge"),
    ],
)
def test_bad_keywords(kw, name) -> None:
    with pytest.raises(ps.InputError, match=name):
        ps.svd_topk(good_op(), 2, **kw)
    with pytest.raises(ps.InputError, match=name):
        ps.eigh_topk(hermitian_op(randn(8, 2), torch.zeros(8), 1.0), 2, **kw)


def test_products_of_the_wrong_shape_or_dtype() -> None:
    B = randn(20, 15)
    wrong_shape = ps.LinearOperator(
        (20, 15), lambda X: B @ X[:, :1], lambda Y: B.mT @ Y, dtype=B.dtype
    )
    with pytest.raises(
        ps.InputError, match=r"op.matmul .* must return .* shape \(20, "
    ):
        ps.svd_topk(wrong_shape, 2, method="randomized")
    wrong_dtype = ps.LinearOperator(
        (20, 15), lambda X: B @ X, lambda Y: (B.mT @ Y).float(), dtype=B.dtype
    )
    with pytest.raises(ps.InputError, match="op.rmatmul .* dtype torch.float64"):
        ps.svd_topk(wrong_dtype, 2, method="randomized")


@pytest.mark.parametrize("method", ["randomized", "auto", "full"])
def test_products_with_nan_or_inf(method) -> None:
    """Issue 15, item 6: a product with NaN or Inf entries is a
    NonFiniteError naming the product, wherever it is made (before: torch's
    LinAlgError from the QR or eigh of the block, for eigh blaming
    "ill-conditioned ... repeated eigenvalues")."""
    B = randn(200, 150)
    H = B.mT @ B
    nan = float("nan")
    bad_matmul = ps.LinearOperator(
        B.shape, lambda X: B @ X * nan, lambda Y: B.mT @ Y, dtype=B.dtype
    )
    with pytest.raises(ps.NonFiniteError, match=r"^svd_topk: op.matmul .* NaN or Inf"):
        ps.svd_topk(bad_matmul, 3, method=method)
    if method == "randomized":  # (auto and full form A = matmul(I))
        bad_rmatmul = ps.LinearOperator(
            B.shape, lambda X: B @ X, lambda Y: B.mT @ Y * nan, dtype=B.dtype
        )
        with pytest.raises(ps.NonFiniteError, match=r"^svd_topk: op.rmatmul .* NaN"):
            ps.svd_topk(bad_rmatmul, 3, method=method)
    inf = ps.LinearOperator(H.shape, lambda X: H @ X + float("inf"), dtype=H.dtype)
    with pytest.raises(
        ps.NonFiniteError, match=r"^eigh_topk: op.matmul .* NaN or Inf"
    ) as e:
        ps.eigh_topk(inf, 3, method=method)
    assert isinstance(e.value, torch.linalg.LinAlgError)  # as torch's was


def test_a_product_that_turns_nan_in_the_backward() -> None:
    """The backward's products are checked as the forward's are."""
    B, C = factors(200, 150, decaying(20))
    broken = []

    def matmul(X):
        Y = B @ (C @ X)
        return Y * float("nan") if broken else Y

    op = ps.LinearOperator(
        (200, 150), matmul, lambda Y: C.mH @ (B.mH @ Y), dtype=B.dtype
    )
    U, S, Vh = ps.svd_topk(op, 3, method="randomized")
    broken.append(True)  # the CG of the backward multiplies by A again
    with pytest.raises(ps.NonFiniteError, match="op.matmul .* NaN or Inf"):
        svd_loss(U, S, Vh, random_like(B @ C, seed=4)).backward()


def test_every_numeric_keyword_has_a_rule() -> None:
    """As tests/test_keywords.py for svd/eigh: check_keywords knows them all."""
    import inspect

    from pyspectral._validation import _INTEGER_KEYWORDS, _REAL_KEYWORDS

    rules = {"k", *_INTEGER_KEYWORDS, *_REAL_KEYWORDS}
    numeric = {"int", "float", "int | None", "float | None"}
    for f in (ps.svd_topk, ps.eigh_topk):
        for p in inspect.signature(f).parameters.values():
            if p.annotation in numeric:
                assert p.name in rules, f"{f.__name__}({p.name}) has no rule"
