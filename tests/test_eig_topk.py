"""``eig_topk`` (``pyspectral/eig_topk.py``): a few eigenpairs of a
non-Hermitian matrix or never-formed operator by block Krylov-Schur, and the
subspace adjoint. Checked against ``torch.linalg.eigvals`` and the dense
``ps.eig`` gradient, by ``gradcheck``, and, for the deformed AKLT MPS (whose
transfer operator has a 2-fold cluster and is non-normal), against the closed
forms of its spectrum, correlation length and their gradients.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _julia import needs_julia

import pyspectral as ps
from pyspectral.forward.eig_topk import sort_key

DTYPES = [torch.float64, torch.complex128]


def randn(*shape, dtype=torch.float64, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def canonical(x: torch.Tensor) -> torch.Tensor:
    return x[torch.argsort(x.real * 1e6 + x.imag)]


def wanted(A: torch.Tensor, which: str, k: int) -> torch.Tensor:
    full = torch.linalg.eigvals(A)
    return full[torch.argsort(sort_key(full, which), descending=True, stable=True)][:k]


@pytest.mark.parametrize("which", ["LM", "LR", "SR", "LI", "SI"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_values_and_vectors_match_torch(which, dtype):
    n = 80
    A = randn(n, n, dtype=dtype)
    L, V, info = ps.eig_topk(A, 4, which=which, return_info=True)
    assert info.converged and L.shape[0] >= 4 and V.shape == (n, L.shape[0])
    ref = wanted(A, which, L.shape[0])
    assert torch.allclose(canonical(L), canonical(ref), atol=1e-9)
    key = sort_key(L, which)
    assert bool((key[:-1] >= key[1:] - 1e-9).all())  # ordered by which
    assert torch.allclose(V.norm(dim=0), torch.ones(L.shape[0], dtype=torch.float64))
    assert (A.to(V.dtype) @ V - V * L).abs().max() < 1e-9
    assert bool((info.residual <= info.tol).all())


def test_a_real_operator_never_returns_half_a_conjugate_pair():
    A = randn(60, 60, seed=3)
    for k in range(1, 6):
        L, _ = ps.eig_topk(A, k)
        # every complex value's conjugate is in the result
        for lam in L[L.imag.abs() > 1e-8]:
            assert (L - lam.conj()).abs().min() < 1e-8


@pytest.mark.parametrize("which", ["LM", "LI", "SR"])
def test_a_real_operator_is_iterated_in_real_arithmetic(which):
    # as ARPACK's dnaupd: the Krylov blocks a real operator sees are real and
    # blocksize wide (a complex block would reach it as 2 * blocksize real
    # columns); only the final Ritz vectors (k' complex = 2k' real) are wider
    A = randn(120, 120, seed=5)
    seen: list[tuple[torch.dtype, int]] = []

    def matmul(X: torch.Tensor) -> torch.Tensor:
        seen.append((X.dtype, X.shape[1]))
        return A @ X

    op = ps.LinearOperator((120, 120), matmul, dtype=torch.float64)
    L, V, info = ps.eig_topk(op, 4, which=which, blocksize=2, return_info=True)
    assert info.converged
    assert torch.allclose(canonical(L), canonical(wanted(A, which, L.shape[0])))
    assert {d for d, _ in seen} == {torch.float64}
    widths = [w for _, w in seen if w != 1]  # 1: the operator check's probe
    final = 2 * L.shape[0]
    assert widths.count(2) >= 10 and set(widths) <= {2, final}


def test_smallest_modulus_on_the_whole_space():
    A = randn(12, 12, seed=4)
    L, _ = ps.eig_topk(A, 3, which="SM")
    assert torch.allclose(canonical(L), canonical(wanted(A, "SM", L.shape[0])))


def loss_of(c: torch.Tensor):
    def loss(L, V):
        # symmetric in a conjugate pair, phase invariant in V
        return (
            (L.real**2).sum()
            + 0.3 * (L.imag**2).sum()
            + ((V.conj() * c[:, None]).sum(0).abs() ** 2).sum()
        )

    return loss


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_matches_dense_eig(dtype):
    n = 50
    A = randn(n, n, dtype=dtype, seed=1).requires_grad_()
    loss = loss_of(randn(n, dtype=torch.complex128, seed=2))
    L, V = ps.eig_topk(A, 3)
    loss(L, V).backward()
    g = A.grad.clone()
    A.grad = None
    Lf, Vf = ps.eig(A)
    idx = [int((Lf - x).abs().argmin()) for x in L.detach()]
    loss(Lf[idx], Vf[:, idx]).backward()
    assert (g - A.grad).norm() < 1e-8 * A.grad.norm()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradcheck(dtype):
    n = 10
    A = randn(n, n, dtype=dtype, seed=5).requires_grad_()
    loss = loss_of(randn(n, dtype=torch.complex128, seed=6))

    def f(A):
        return loss(*ps.eig_topk(A, 2, krylovdim=10))

    assert torch.autograd.gradcheck(
        f, (A,), eps=1e-6, atol=1e-6, rtol=1e-5, check_forward_ad=True
    )


def low_rank_plus_diagonal(n: int, seed: int):
    B = randn(n, 3, seed=seed).requires_grad_()
    C = randn(3, n, seed=seed + 1).requires_grad_()
    d = (torch.linspace(0, 1, n, dtype=torch.float64) * 0.1).requires_grad_()
    return B, C, d


@pytest.mark.parametrize("rmatmul", [True, False])
def test_operator_gradient_reaches_its_tensors(rmatmul):
    n = 200
    B, C, d = low_rank_plus_diagonal(n, 7)
    op = ps.LinearOperator(
        (n, n),
        lambda X: B @ (C @ X) + d[:, None] * X,
        (lambda Y: C.mH @ (B.mH @ Y) + d[:, None] * Y) if rmatmul else None,
        dtype=torch.float64,
    )
    loss = loss_of(randn(n, dtype=torch.complex128, seed=8))
    L, V = ps.eig_topk(op, 2)
    loss(L, V).backward()
    got = [t.grad.clone() for t in (B, C, d)]
    for t in (B, C, d):
        t.grad = None
    A = B @ C + torch.diag(d)
    Lf, Vf = ps.eig(A)
    idx = [int((Lf - x).abs().argmin()) for x in L.detach()]
    loss(Lf[idx], Vf[:, idx]).backward()
    for g, t in zip(got, (B, C, d), strict=True):
        assert (g - t.grad).norm() <= 1e-7 * t.grad.norm()


# ----------------------------------------------- deformed AKLT (exact results)


def aklt(a, b, c):
    """The MPS tensors A^s (3, 2, 2): A+ = a σ+, A0 = b σz, A- = c σ-."""
    sp = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    sz = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
    return torch.stack((a * sp, b * sz, c * sp.mT))


def transfer(As: torch.Tensor) -> ps.LinearOperator:
    """``X -> sum_s A^s X A^s^H`` on vec(X) (D^2 x p blocks), never formed."""
    D = As.shape[-1]

    def matmul(X):
        Xs = X.mT.reshape(-1, D, D)
        Y = torch.einsum("sij,pjk,slk->pil", As, Xs.to(As.dtype), As.conj())
        return Y.reshape(-1, D * D).mT

    return ps.LinearOperator((D * D, D * D), matmul, dtype=As.dtype)


def test_aklt_transfer_spectrum_cluster_and_correlation_length():
    a, b, c = (torch.tensor(x, dtype=torch.float64, requires_grad=True)
               for x in (1.0, 0.8, 0.5))  # fmt: skip
    L, V = ps.eig_topk(transfer(aklt(a, b, c)), 2)
    # k = 2 is extended over the 2-fold cluster -b^2 (the second by modulus)
    assert L.shape == (3,)
    a_, b_, c_ = 1.0, 0.8, 0.5
    exact = torch.tensor([b_**2 + a_ * c_, -(b_**2), -(b_**2)], dtype=torch.complex128)
    assert torch.allclose(L, exact, atol=1e-12)
    # the correlation length: a symmetric function of the cluster
    xi = -1 / torch.log((L[1:].abs().mean()) / L[0].abs())
    ga, gb, gc = torch.autograd.grad(xi, (a, b, c))
    a2, b2, c2 = (t.detach().clone().requires_grad_() for t in (a, b, c))
    xi_exact = 1 / torch.log((b2**2 + a2 * c2) / b2**2)
    ea, eb, ec = torch.autograd.grad(xi_exact, (a2, b2, c2))
    assert float(xi.detach()) == pytest.approx(float(xi_exact.detach()), rel=1e-12)
    for g, e in ((ga, ea), (gb, eb), (gc, ec)):
        assert float(g) == pytest.approx(float(e), rel=1e-9)


def test_aklt_cluster_projector_gradient_matches_dense_and_a_basis_loss_warns():
    a, b, c = 1.0, 0.8, 0.5
    As = aklt(a, b, c).requires_grad_()
    L, V = ps.eig_topk(transfer(As), 2)
    # the projector onto the cluster's eigenspace: basis invariant
    Vc = V[:, 1:]
    P = Vc @ torch.linalg.pinv(Vc)
    w = randn(4, 4, dtype=torch.complex128, seed=9)
    (P * w).sum().real.backward()
    g = As.grad.clone()
    As.grad = None
    E = transfer(As).matmul(torch.eye(4, dtype=torch.float64))
    Lf, Vf = ps.eig(E)
    idx = [i for i in range(4) if abs(float(Lf[i].real.detach()) + b * b) < 1e-9]
    Vd = Vf[:, idx]
    (((Vd @ torch.linalg.pinv(Vd)) * w).sum().real).backward()
    assert (g - As.grad).norm() < 1e-8 * As.grad.norm()
    # one vector of the cluster is a basis choice: the gauge policy says so
    L, V = ps.eig_topk(transfer(aklt(a, b, c).requires_grad_()), 2)
    with pytest.warns(ps.GaugeWarning):
        (V[:, 1].abs() ** 2 * torch.arange(4.0)).sum().backward()


def test_random_mps_transfer_operator_against_dense_and_finite_differences():
    D, d = 4, 3
    As = randn(d, D, D, seed=10).requires_grad_()

    def xi(As):
        L, _ = ps.eig_topk(transfer(As), 2, krylovdim=16)
        return -1 / torch.log(L[1:].abs().mean() / L[0].abs())

    assert torch.autograd.gradcheck(
        xi, (As,), eps=1e-6, atol=1e-6, rtol=1e-5, check_forward_ad=True
    )
    with torch.no_grad():
        E = transfer(As).matmul(torch.eye(D * D, dtype=torch.float64))
    full = torch.linalg.eigvals(E)
    top = full[full.abs().argsort(descending=True)]
    n2 = 2 if abs(float(top[1].abs() - top[2].abs())) < 1e-9 else 1
    exact = -1 / torch.log(top[1 : 1 + n2].abs().mean() / top[0].abs())
    assert float(xi(As).detach()) == pytest.approx(float(exact), rel=1e-10)


# ---------------------------------------------------------------- forward mode


def jvp_of(f, x: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
    with fwAD.dual_level():
        return fwAD.unpack_dual(f(fwAD.make_dual(x, dx))).tangent


def central(f, x: torch.Tensor, dx: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    with torch.no_grad():
        return (f(x + h * dx) - f(x - h * dx)) / (2 * h)


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_mode_is_the_backward_transposed_and_matches_dense_eig(dtype):
    """The tangent of a gauge-invariant loss equals <gradient, dA> and the
    central difference; the eigenvalues' tangents equal the dense ps.eig's."""
    n = 60
    A, dA = randn(n, n, dtype=dtype, seed=40), randn(n, n, dtype=dtype, seed=41)
    loss = loss_of(randn(n, dtype=C128, seed=42))

    def f(X):
        return loss(*ps.eig_topk(X, 3))

    t = jvp_of(f, A, dA)
    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(f(X), X)
    assert float(t) == pytest.approx(float((g.conj() * dA).sum().real), rel=1e-9)
    assert float(t) == pytest.approx(float(central(f, A, dA)), rel=1e-7)
    with fwAD.dual_level():
        L, _ = ps.eig_topk(fwAD.make_dual(A, dA), 3)
        Lf, _ = ps.eig(fwAD.make_dual(A, dA))
        (L, dL), (Lf, dLf) = fwAD.unpack_dual(L), fwAD.unpack_dual(Lf)
    at = [int((Lf - lam).abs().argmin()) for lam in L]
    assert torch.allclose(dL, dLf[at], atol=1e-9 * float(dLf.abs().max()), rtol=0)
    # torch.func.jvp takes the same rule
    _, tf = torch.func.jvp(f, (A,), (dA,))
    assert float(tf) == pytest.approx(float(t), rel=1e-12)


def test_forward_mode_through_an_operator_and_its_tensors():
    """xi of a random MPS, the tangent pushed through the operator's tensors
    (never formed), against the central difference."""
    As, dAs = randn(3, 4, 4, seed=43), randn(3, 4, 4, seed=44)

    def xi(As):
        L, _ = ps.eig_topk(transfer(As), 2, krylovdim=16)
        return -1 / torch.log(L[1:].abs().mean() / L[0].abs())

    t = jvp_of(xi, As, dAs)
    assert float(t) == pytest.approx(float(central(xi, As, dAs)), rel=1e-7)


def test_forward_mode_at_the_aklt_cluster():
    """Along a, b, c the cluster -b^2 stays repeated: the tangent of xi is the
    closed form's, quietly. A tangent of all twelve entries splits it: the
    gauge policy says so."""
    abc = torch.tensor([1.0, 0.8, 0.5], dtype=torch.float64)
    d = torch.tensor([0.3, -0.7, 0.2], dtype=torch.float64)

    def xi(abc):
        L, _ = ps.eig_topk(transfer(aklt(*abc)), 2)
        return -1 / torch.log(L[1:].abs().mean() / L[0].abs())

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = jvp_of(xi, abc, d)

    def exact(abc):
        a, b, c = abc
        return 1 / torch.log((b**2 + a * c) / b**2)

    x = abc.clone().requires_grad_()
    (g,) = torch.autograd.grad(exact(x), x)
    assert float(t) == pytest.approx(float((g * d).sum()), rel=1e-9)
    As, dAs = aklt(1.0, 0.8, 0.5), randn(3, 2, 2, seed=45)
    with fwAD.dual_level(), pytest.warns(ps.GaugeWarning, match="splits it"):
        ps.eig_topk(transfer(fwAD.make_dual(As, dAs)), 2)


# ------------------------------------------------------------- errors, warnings


def test_not_converged_warns_with_the_remedy():
    A = randn(300, 300, seed=11)
    with pytest.warns(ps.ConvergenceWarning, match="Raise maxiter"):
        *_, info = ps.eig_topk(A, 4, maxiter=1, krylovdim=10, return_info=True)
    assert not info.converged


def test_quiet_when_converged():
    A = randn(100, 100, seed=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L, V = ps.eig_topk(A.requires_grad_(), 2)
        loss_of(randn(100, dtype=torch.complex128))(L, V).backward()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"k": 0}, ps.InputError, "k must be"),
        ({"k": 11}, ps.InputError, "k must be"),
        ({"k": 2, "which": "XX"}, ps.InputError, "which must be"),
        ({"k": 2, "krylovdim": 2}, ps.InputError, "krylovdim"),
        ({"k": 2, "backend": "julia", "blocksize": 3}, ps.InputError, "native"),
        ({"k": 2, "backend": "julia", "return_info": True}, ps.InputError, "native"),
        ({"k": 2, "tol": -1.0}, ps.InputError, "tol"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ps.eig_topk(randn(10, 10), **kwargs)


def test_bad_operators():
    with pytest.raises(ps.ShapeError, match="square"):
        ps.eig_topk(randn(2, 10, 8), 2)
    with pytest.raises(ps.ShapeError):
        ps.eig_topk(randn(10, 8), 2)
    with pytest.raises(ps.InputTypeError):
        ps.eig_topk([[1.0]], 1)


def test_dense_eig_with_k_is_eig_topk():
    A = randn(40, 40, seed=13)
    L, V = ps.eig(A, k=3, which="LR")
    L2, V2 = ps.eig_topk(A, 3, which="LR")
    assert torch.equal(L, L2) and torch.equal(V, V2)
    with pytest.raises(ps.InputError, match="k= takes the eig_topk route"):
        ps.eig(A, k=3, broadening=1e-3)


def test_a_zero_matrix_and_a_threefold_eigenvalue():
    # a zero block product (an invariant subspace at once): every value ties
    L, V = ps.eig_topk(torch.zeros(5, 5, dtype=torch.float64), 2)
    assert L.shape == (5,) and bool((L == 0).all())
    assert torch.allclose(V.norm(dim=0), torch.ones(5, dtype=torch.float64))
    # a 3-fold eigenvalue needs 3 start vectors; k = 2 is extended to it
    d = torch.tensor([3.0, 3.0, 3.0, 1.0, 0.5] + [0.1] * 95, dtype=torch.float64)
    L, V = ps.eig_topk(torch.diag(d), 2, blocksize=3)
    assert torch.allclose(L, torch.full((3,), 3.0, dtype=torch.complex128))
    assert torch.linalg.matrix_rank(V) == 3


# ------------------------------------------------------------------ batches

C128 = torch.complex128


def blocks(*parts) -> torch.Tensor:
    """A real block-diagonal matrix: numbers (1x1) and 2x2 rotations r*J
    (a conjugate pair ±ir), given as ("pair", r)."""
    J = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    mats = [
        p[1] * J if isinstance(p, tuple) else torch.tensor([[float(p)]]).double()
        for p in parts
    ]
    return torch.block_diag(*mats)


def test_a_batch_is_each_matrix_with_one_k():
    """(..., n, n): each matrix as alone, all with the same k'."""
    A = randn(2, 3, 30, 30, dtype=C128, seed=20)
    L, V, info = ps.eig_topk(A, 2, return_info=True)
    assert L.shape == (2, 3, 2) and V.shape == (2, 3, 30, 2)
    for i in range(2):
        for j in range(3):
            Lij, Vij = ps.eig_topk(A[i, j], 2)
            assert torch.equal(L[i, j], Lij) and torch.equal(V[i, j], Vij)
    assert info.residual.shape == (2, 3, 2) and info.tol.shape == (2, 3)
    assert info.converged and bool((info.residual <= info.tol[..., None]).all())
    assert info.products > 0


def test_a_batch_takes_the_widest_k():
    """A real matrix whose dominant eigenvalues are a conjugate pair makes k=1
    two for the whole batch; the other matrix is solved again with k=2."""
    one, two = blocks(3, 1, 0.5, 0.1), blocks(("pair", 3), 0.5, 0.1)
    assert ps.eig_topk(one, 1)[0].shape == (1,)
    L, V = ps.eig_topk(torch.stack([one, two]), 1)
    assert L.shape == (2, 2) and V.shape == (2, 4, 2)
    assert torch.equal(L[0], ps.eig_topk(one, 2)[0])
    assert torch.allclose(L[0].real, torch.tensor([3.0, 1.0], dtype=torch.float64))
    assert torch.allclose(L[1].abs(), torch.full((2,), 3.0, dtype=torch.float64))


def test_a_batch_with_no_common_k_is_refused():
    """k=1: widths 1 and 2; at k=2 the first matrix's 2nd and 3rd eigenvalues
    are a conjugate pair (3): no k' fits both without cutting it."""
    one, two = blocks(3, ("pair", 2), 0.5), blocks(("pair", 3), 1, 0.5)
    with pytest.raises(ps.InputError, match=r"different k' \(2, 3\)"):
        ps.eig_topk(torch.stack([one, two]), 1)
    L, _ = ps.eig_topk(torch.stack([one, two]), 3)  # where they agree
    assert L.shape == (2, 3)


def test_a_batch_gradient_is_each_matrix_gradient():
    A = randn(3, 12, 12, dtype=C128, seed=21).requires_grad_()
    loss = loss_of(randn(12, dtype=C128, seed=22))
    L, V = ps.eig_topk(A, 2, krylovdim=12)
    sum(loss(L[b], V[b]) for b in range(3)).backward()
    for b in range(3):
        Ab = A.detach()[b].clone().requires_grad_()
        loss(*ps.eig_topk(Ab, 2, krylovdim=12)).backward()
        assert torch.allclose(A.grad[b], Ab.grad, atol=1e-10, rtol=0)
    c = randn(8, dtype=C128, seed=23)

    def f(A):
        L, V = ps.eig_topk(A, 2, krylovdim=8)
        return sum(loss_of(c)(L[b], V[b]) for b in range(2))

    B = randn(2, 8, 8, dtype=C128, seed=24).requires_grad_()
    assert torch.autograd.gradcheck(f, (B,), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_an_empty_batch():
    L, V, info = ps.eig_topk(randn(0, 6, 6), 2, return_info=True)
    assert L.shape == (0, 2) and V.shape == (0, 6, 2) and L.dtype == C128
    assert info.residual.shape == (0, 2) and info.tol.shape == (0,) and info.converged
    with pytest.raises(ps.InputError, match="k must be"):
        ps.eig_topk(randn(0, 6, 6), 7)


def test_dense_eig_with_k_takes_batches():
    A = randn(2, 20, 20, dtype=C128, seed=25)
    L, V = ps.eig(A, k=2, which="LR")
    L2, V2 = ps.eig_topk(A, 2, which="LR")
    assert torch.equal(L, L2) and torch.equal(V, V2) and L.shape == (2, 2)


# ------------------------------------------------------------ backend="julia"


def test_julia_takes_no_python_operator():
    B, C, d = low_rank_plus_diagonal(20, seed=30)
    op = ps.LinearOperator((20, 20), lambda X: B @ (C @ X) + d[:, None] * X,
                           dtype=torch.float64)  # fmt: skip
    with pytest.raises(ps.BackendError, match="back into Python"):
        ps.eig_topk(op, 2, backend="julia")
    with pytest.raises(ps.InputError, match="generator= is the native"):
        ps.eig_topk(randn(10, 10), 2, backend="julia", generator=torch.Generator())


@pytest.mark.parametrize("dtype", DTYPES)
def test_julia_route_through_the_stand_in(fake, dtype):
    """backend="julia" calls the glue's forward and pullback once each (the
    stand-in runs the native ones) and returns the native numbers."""
    A = randn(30, 30, dtype=dtype, seed=34).requires_grad_()
    loss = loss_of(randn(30, dtype=C128, seed=35))
    out = []
    for backend in ("torch", "julia"):
        L, V = ps.eig_topk(A, 3, backend=backend)
        out.append((canonical(L.detach()), *torch.autograd.grad(loss(L, V), A)))
    assert len(fake.calls_to("eig_topk_dense")) == 1
    assert len(fake.calls_to("eig_topk_pullback_dense!")) == 1
    for u, v in zip(*out, strict=True):
        assert u.dtype == v.dtype and torch.allclose(u, v, atol=1e-10, rtol=0)


def test_julia_forward_mode_through_the_stand_in(fake):
    """Forward mode on the Julia backend: Julia's pairs, the native
    pushforward (the formula of Julia's frule), the native tangents."""
    A, dA = randn(30, 30, seed=46), randn(30, 30, seed=47)
    loss = loss_of(randn(30, dtype=C128, seed=48))
    t = [jvp_of(lambda X, b=b: loss(*ps.eig_topk(X, 3, backend=b)), A, dA)
         for b in ("torch", "julia")]  # fmt: skip
    assert len(fake.calls_to("eig_topk_dense")) == 1
    assert not fake.calls_to("eig_topk_pullback_dense!")
    assert float(t[1]) == pytest.approx(float(t[0]), rel=1e-10)


@needs_julia
@pytest.mark.parametrize("n", [40, 100], ids=["dense eigen", "KrylovKit"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["LM", "LR"])
def test_julia_matches_native(n, dtype, which):
    """Both backends: the same eigenvalues (a conjugate pair's order aside)
    and the same gradient of a gauge-invariant loss."""
    A = randn(n, n, dtype=dtype, seed=31).requires_grad_()
    loss = loss_of(randn(n, dtype=C128, seed=32))
    grads, values = [], []
    for backend in ("torch", "julia"):
        L, V = ps.eig_topk(A, 3, which=which, backend=backend)
        assert (A.detach().to(V.dtype) @ V - V * L).abs().max() < 1e-9
        loss(L, V).backward()
        grads.append(A.grad.clone())
        values.append(canonical(L.detach()))
        A.grad = None
    assert values[0].shape == values[1].shape
    assert torch.allclose(values[0], values[1], atol=1e-9, rtol=0)
    assert (grads[0] - grads[1]).norm() < 1e-8 * grads[0].norm()
    assert grads[1].dtype == dtype


@needs_julia
def test_julia_aklt_cluster_gradient_and_gauge_policy():
    """The dense AKLT transfer matrix: its 2-fold cluster kept whole by Julia
    too, the cluster-symmetric gradient equal, a basis loss warned."""
    a, b, c = 1.0, 0.8, 0.5
    E = transfer(aklt(a, b, c)).matmul(torch.eye(4, dtype=torch.float64))
    E = E.detach().requires_grad_()
    grads = []
    for backend in ("torch", "julia"):
        L, V = ps.eig_topk(E, 2, backend=backend)
        assert L.shape == (3,)
        (-1 / torch.log(L[1:].abs().mean() / L[0].abs())).backward()
        grads.append(E.grad.clone())
        E.grad = None
    assert torch.allclose(grads[0], grads[1], atol=1e-10, rtol=0)
    L, V = ps.eig_topk(E, 2, backend="julia")
    w = randn(4, dtype=C128, seed=33)  # one vector's overlap: a basis choice
    with pytest.warns(ps.GaugeWarning):
        ((V[:, 1].conj() * w).sum().abs() ** 2).backward()
