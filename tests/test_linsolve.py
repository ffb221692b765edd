"""``linsolve`` (``pyspectral/linsolve.py``): ``(a0 I + a1 A) x = b`` by
GMRES / CG on a tensor or a never-formed operator, and its gradient by the
adjoint solve, into ``b``, ``a0``, ``a1``, a dense ``A``, the tensors an
operator's ``matmul`` uses, and ``project``'s eigenvectors. Checked by
``gradcheck``, against ``torch.linalg.solve`` and, for the 1D Ising chain,
against the closed-form magnetisation and susceptibility.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _julia import needs_julia

import pyspectral as ps

DTYPES = [torch.float64, torch.complex128]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=torch.float64, seed=0) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, generator=gen(seed))


def residual(A, x, b, a0=0.0, a1=1.0):
    return (a0 * x + a1 * (A @ x[..., None])[..., 0] - b).abs().max().item()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gmres_solves_a_batch_as_torch_solve(dtype):
    n = 60
    A = randn(3, n, n, dtype=dtype) / n**0.5
    b = randn(3, n, dtype=dtype, seed=1)
    x, info = ps.linsolve(A, b, a0=1.5, a1=-0.5, return_info=True)
    M = 1.5 * torch.eye(n, dtype=dtype) - 0.5 * A
    ref = torch.linalg.solve(M, b)
    assert info.converged and info.residual.shape == (3,)
    assert bool((info.residual <= info.tol).all())
    assert (x - ref).abs().max() < 1e-10
    # restarts: a small basis reaches the same solution
    x2 = ps.linsolve(A, b, a0=1.5, a1=-0.5, krylovdim=5)
    assert (x2 - ref).abs().max() < 1e-10


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradcheck_dense(dtype):
    n = 8
    A = (randn(n, n, dtype=dtype) / n**0.5).requires_grad_()
    b = randn(2, n, dtype=dtype, seed=1).requires_grad_()
    a0 = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    a1 = torch.tensor(0.7 + (0.2j if dtype.is_complex else 0), dtype=dtype)
    a1.requires_grad_()

    def f(A, b, a0, a1):
        return ps.linsolve(A.expand(2, n, n), b, a0=a0, a1=a1, krylovdim=4)

    assert torch.autograd.gradcheck(
        f, (A, b, a0, a1), fast_mode=True, check_forward_ad=True
    )


def test_complex_a0_with_a_real_matrix():
    n = 8
    A = randn(n, n).requires_grad_()
    b = randn(n, seed=1).requires_grad_()
    a0 = torch.tensor(0.3 + 1.1j, dtype=torch.complex128, requires_grad=True)

    def f(A, b, a0):
        return ps.linsolve(A, b, a0=a0)

    x = f(A, b, a0)
    assert x.dtype == torch.complex128
    assert residual(A.detach().to(x.dtype), x.detach(), b.detach(), a0.detach()) < 1e-12
    assert torch.autograd.gradcheck(
        f, (A, b, a0), fast_mode=True, check_forward_ad=True
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_cg_for_a_positive_definite_matrix(dtype):
    n = 8
    B = randn(n, n, dtype=dtype)
    H = (B @ B.mH + torch.eye(n, dtype=dtype)).requires_grad_()
    b = randn(n, dtype=dtype, seed=1).requires_grad_()

    def f(H, b):
        Hs = (H + H.mH) / 2
        return ps.linsolve(Hs, b, ishermitian=True, isposdef=True)

    assert torch.autograd.gradcheck(f, (H, b), check_forward_ad=True)
    x = f(H, b)
    assert (x - torch.linalg.solve((H + H.mH) / 2, b)).abs().max() < 1e-10


def test_cg_refuses_an_indefinite_matrix():
    H = torch.diag(torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64))
    with pytest.raises(ps.InputError, match="not positive definite; drop isposdef"):
        ps.linsolve(H, torch.ones(3, dtype=torch.float64), isposdef=True)
    # MINRES solves it
    x = ps.linsolve(H, torch.ones(3, dtype=torch.float64), ishermitian=True)
    assert torch.allclose(x, torch.tensor([1.0, -0.5, 1 / 3], dtype=torch.float64))


def spy_on(monkeypatch, name: str) -> list:
    """The calls to the Krylov solver ``name`` of forward/linsolve.py."""
    from pyspectral.forward import linsolve as K

    calls: list = []
    real = getattr(K, name)

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(K, name, spy)
    return calls


def indefinite(n, dtype, batch=(), seed=0):
    """A Hermitian matrix with eigenvalues of both signs, away from zero."""
    Q, _ = torch.linalg.qr(randn(*batch, n, n, dtype=dtype, seed=seed))
    w = torch.linspace(-2.0, 3.0, n, dtype=torch.float64)
    w = torch.where(w.abs() < 0.3, w.sign() * 0.3 + (w == 0) * 0.3, w)
    return (Q * w.to(dtype)) @ Q.mH


@pytest.mark.parametrize("dtype", DTYPES)
def test_minres_for_a_hermitian_indefinite_matrix(monkeypatch, dtype):
    """ishermitian=True, real a0 and a1: MINRES, in the forward and in the
    backward's adjoint solve (M^H = M); against torch.linalg.solve and by
    gradcheck; GMRES where a complex a1 makes M non-Hermitian."""
    calls = spy_on(monkeypatch, "minres")
    n = 40
    H = indefinite(n, dtype, batch=(2,))
    b = randn(2, n, dtype=dtype, seed=1)
    x, info = ps.linsolve(H, b, a0=0.1, ishermitian=True, return_info=True)
    assert len(calls) == 1 and info.converged
    ref = torch.linalg.solve(H + 0.1 * torch.eye(n, dtype=dtype), b)
    assert (x - ref).abs().max() < 1e-9 * ref.abs().max()
    # MINRES's short recurrences: no restarts, far fewer products than the
    # budget of maxiter * krylovdim, here at most n + a few
    assert info.products <= n + 5

    Hs, bs = H[0, :8, :8].clone().requires_grad_(), b[0, :8].clone().requires_grad_()

    def f(H, b):
        return ps.linsolve((H + H.mH) / 2, b, ishermitian=True)

    calls.clear()
    assert torch.autograd.gradcheck(f, (Hs, bs), check_forward_ad=True)
    assert len(calls) >= 2  # forward and adjoint solves
    calls.clear()
    ps.linsolve(H, b, a1=1j if dtype.is_complex else 1.0 + 0j, ishermitian=True)
    assert not calls


def test_minres_through_a_hermitian_operator(monkeypatch):
    """A never-formed Hermitian indefinite operator (rmatmul = matmul): x and
    the gradient into the operator's tensors, as by the dense matrix."""
    calls = spy_on(monkeypatch, "minres")
    n = 30
    B = randn(n, 3, seed=5)
    d = torch.linspace(-2.0, 2.5, n, dtype=torch.float64)
    d = torch.where(d.abs() < 0.2, torch.full_like(d, 0.2), d).requires_grad_()
    op = ps.LinearOperator((n, n), lambda X: d[:, None] * X + B @ (B.mT @ X),
                           dtype=torch.float64)  # fmt: skip
    b = randn(n, seed=6)
    x = ps.linsolve(op, b, ishermitian=True)
    (g,) = torch.autograd.grad(x.pow(2).sum(), d)
    assert len(calls) == 2
    A = torch.diag(d) + B @ B.mT
    x_ref = torch.linalg.solve(A, b)
    (g_ref,) = torch.autograd.grad(x_ref.pow(2).sum(), d)
    assert (x - x_ref).abs().max() < 1e-9 * x_ref.abs().max()
    assert (g - g_ref).abs().max() < 1e-7 * g_ref.abs().max()


def test_minres_not_converged_warns_and_a_solved_system_stays():
    n = 60
    H = indefinite(n, torch.float64, batch=(2,), seed=2)
    b = randn(2, n, seed=3)
    b[1] = 0  # solved at the start: x stays 0
    with pytest.warns(ps.ConvergenceWarning, match="did not converge"):
        x, info = ps.linsolve(H, b, ishermitian=True, krylovdim=2, maxiter=3,
                              return_info=True)  # fmt: skip
    assert info.products <= 2 * 3 + 1 and not info.converged
    assert torch.equal(x[1], torch.zeros(n, dtype=torch.float64))


def operator(B, C, d, with_rmatmul):
    """``A = diag(d) + B C`` through its products, never formed."""
    n = d.shape[-1]
    matmul = lambda X: d[..., None] * X + B @ (C @ X)  # noqa: E731
    rmatmul = lambda Y: d.conj()[..., None] * Y + C.mH @ (B.mH @ Y)  # noqa: E731
    return ps.LinearOperator(
        (n, n), matmul, rmatmul if with_rmatmul else None, dtype=d.dtype
    )


@pytest.mark.parametrize("with_rmatmul", [True, False], ids=["rmatmul", "vjp"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_operator_gradient_reaches_its_tensors(dtype, with_rmatmul):
    n, r = 10, 2
    B = randn(n, r, dtype=dtype).requires_grad_()
    C = randn(r, n, dtype=dtype, seed=1).requires_grad_()
    d = (2 + randn(n, dtype=dtype, seed=2).abs()).to(dtype).requires_grad_()
    b = randn(n, dtype=dtype, seed=3).requires_grad_()

    def f(B, C, d, b):
        return ps.linsolve(operator(B, C, d, with_rmatmul), b)

    assert torch.autograd.gradcheck(
        f, (B, C, d, b), fast_mode=True, check_forward_ad=True
    )
    # the same gradient as the dense path
    w = randn(n, dtype=dtype, seed=4)
    dense = ps.linsolve(torch.diag(d) + B @ C, b)
    g1 = torch.autograd.grad((f(B, C, d, b) * w.conj()).real.sum(), (B, C, d, b))
    g2 = torch.autograd.grad((dense * w.conj()).real.sum(), (B, C, d, b))
    for u, v in zip(g1, g2, strict=True):
        assert (u - v).abs().max() < 1e-10


def test_projected_solve_of_a_singular_system_and_its_gradient():
    n = 6
    W = randn(n, n, seed=5).requires_grad_()
    b = randn(n, seed=6).requires_grad_()

    def f(W, b):
        T = W @ W.mT / n + torch.diag(torch.arange(n, dtype=W.dtype)) / 10
        lam, V = torch.linalg.eigh(T)
        r = V[:, -1]
        # 1 - T / lam is singular: solve on the complement of r
        return ps.linsolve(T, b, a0=1.0, a1=-1 / lam[-1], project=(r, r))

    x = f(W, b)
    assert torch.autograd.gradcheck(f, (W, b), check_forward_ad=True)
    T = (W @ W.mT / n + torch.diag(torch.arange(n, dtype=W.dtype)) / 10).detach()
    lam, V = torch.linalg.eigh(T)
    r = V[:, -1]
    Qb = b.detach() - r * (r @ b.detach())
    assert abs(float(r @ x.detach())) < 1e-12
    assert residual(T, x.detach(), Qb, 1.0, -1 / float(lam[-1])) < 1e-10


def test_projected_solve_of_a_non_normal_matrix():
    n = 6
    A = randn(n, n, seed=7).requires_grad_()
    b = randn(n, seed=8, dtype=torch.complex128).requires_grad_()

    def f(A, b):
        w, V = torch.linalg.eig(A)
        i = int(torch.argmax(w.abs()))
        lam, r = w[i], V[:, i]
        wl, Vl = torch.linalg.eig(A.mH)
        j = int(torch.argmin((wl - lam.conj()).abs()))
        return ps.linsolve(A, b, a0=1.0, a1=-1 / lam, project=(Vl[:, j], r))

    x = f(A, b)
    assert x.dtype == torch.complex128
    assert torch.autograd.gradcheck(f, (A, b), check_forward_ad=True)


def test_project_refuses_vectors_that_are_not_eigenvectors():
    A = torch.diag(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    v = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    with pytest.raises(ps.InputError, match="is not a right eigenvector of A"):
        ps.linsolve(A, torch.ones(3, dtype=torch.float64), project=(v, v))


def ising_chain(K, h):
    """Magnetisation and susceptibility per site of the infinite 1D Ising
    chain, ``m`` from the dominant eigenvector of the transfer matrix and
    ``chi = sum_r <s_0 s_r>_c`` through one projected solve of
    ``1 - T / lambda``."""
    T = torch.stack(
        [
            torch.stack([torch.exp(K + h), torch.exp(-K)]),
            torch.stack([torch.exp(-K), torch.exp(K - h)]),
        ]
    )
    w, V = torch.linalg.eigh(T)
    lam, r = w[-1], V[:, -1]
    S = torch.diag(torch.tensor([1.0, -1.0], dtype=T.dtype))
    m = r @ S @ r
    Sr = S @ r
    x = ps.linsolve(T, Sr - r * (r @ Sr), a0=1.0, a1=-1 / lam, project=(r, r))
    chi = (1 - m**2) + 2 * (Sr @ (T @ x)) / lam
    return m, chi


def exact_ising(K, h):
    m = torch.sinh(h) / torch.sqrt(torch.sinh(h) ** 2 + torch.exp(-4 * K))
    chi = (
        torch.exp(-4 * K)
        * torch.cosh(h)
        / (torch.sinh(h) ** 2 + torch.exp(-4 * K)) ** 1.5
    )
    return m, chi


@pytest.mark.parametrize("K,h", [(0.5, 0.3), (1.0, 0.1), (0.2, -0.7)])
def test_ising_chain_against_its_closed_forms(K, h):
    Kt = torch.tensor(K, dtype=torch.float64, requires_grad=True)
    ht = torch.tensor(h, dtype=torch.float64, requires_grad=True)
    m, chi = ising_chain(Kt, ht)
    m_ex, chi_ex = exact_ising(Kt, ht)
    assert abs((m - m_ex).item()) < 1e-14 and abs((chi - chi_ex).item()) < 1e-13
    # chi = dm/dh, and the gradients of chi (through l, r and lambda)
    (dm,) = torch.autograd.grad(m, ht, retain_graph=True)
    assert abs((dm - chi_ex).item()) < 1e-13
    g = torch.autograd.grad(chi, (Kt, ht))
    g_ex = torch.autograd.grad(chi_ex, (Kt, ht))
    for u, v in zip(g, g_ex, strict=True):
        assert abs(float(u - v)) < 1e-12 * max(1.0, abs(float(v)))


def test_not_converged_warns_with_the_residual():
    n = 50
    A = randn(n, n) / n**0.5
    b = randn(n, seed=1)
    with pytest.warns(ps.ConvergenceWarning, match="did not converge: residual"):
        x, info = ps.linsolve(A, b, a0=0.1, krylovdim=2, maxiter=1, return_info=True)
    assert not info.converged and float(info.residual) > float(info.tol)


def test_the_backward_warns_when_its_adjoint_solve_does_not_converge():
    n = 30
    A = randn(n, n) / n**0.5
    b = randn(n, seed=1).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.ConvergenceWarning)
        x = ps.linsolve(A, b, a0=0.05, krylovdim=3, maxiter=2)
    with pytest.warns(ps.ConvergenceWarning, match="adjoint solve did not converge"):
        x.sum().backward()
    assert b.grad is not None


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"b": torch.ones(4, dtype=torch.float64)}, ps.ShapeError, "must have shape"),
        ({"b": torch.ones(3, dtype=torch.int64)}, ps.DtypeError, "dtype"),
        ({"b": [1.0, 2.0, 3.0]}, ps.InputTypeError, "must be a torch.Tensor"),
        ({"krylovdim": 0}, ps.InputError, "krylovdim must be an integer >= 1"),
        ({"maxiter": 1.5}, ps.InputError, "maxiter must be an integer >= 1"),
        ({"rtol": -1.0}, ps.InputError, "rtol must be a finite number >= 0"),
        ({"a0": "one"}, ps.InputTypeError, "a0 must be a number or a tensor"),
        ({"a1": float("nan")}, ps.NonFiniteError, "a1 is not finite"),
        ({"backend": "julia", "project": (1, 2)}, ps.InputError, "project= is"),
        ({"backend": "julia", "return_info": True}, ps.InputError, "return_info="),
        ({"backend": "jax"}, ps.BackendError, "backend must be"),
        ({"project": (1, 2)}, ps.InputTypeError, "project's l must be a tensor"),
    ],
)
def test_bad_input_says_what_to_do(kwargs, error, match):
    A = torch.eye(3, dtype=torch.float64)
    b = kwargs.pop("b", torch.ones(3, dtype=torch.float64))
    with pytest.raises(error, match=match):
        ps.linsolve(A, b, **kwargs)


def test_a_non_square_or_non_finite_matrix_is_refused():
    with pytest.raises(ps.ShapeError, match="must be square"):
        ps.linsolve(
            torch.ones(3, 4, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
        )
    A = torch.eye(3, dtype=torch.float64)
    A[0, 1] = math.inf
    with pytest.raises(ps.NonFiniteError, match="NaN or Inf"):
        ps.linsolve(A, torch.ones(3, dtype=torch.float64))


def test_float32_meets_its_own_tolerance():
    n = 40
    A = (randn(n, n) / n**0.5).float()
    b = randn(n, seed=1).float()
    x, info = ps.linsolve(A, b, a0=2.0, return_info=True)
    assert x.dtype == torch.float32 and info.converged
    ref = torch.linalg.solve(2 * torch.eye(n) + A.double(), b.double())
    assert (x.double() - ref).abs().max() < 1e-4


def test_a_shift_per_system_of_a_batch():
    n = 6
    A = randn(3, n, n) / n**0.5
    b = randn(3, n, seed=1)
    a0 = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    x = ps.linsolve(A, b, a0=a0)
    M = a0.detach()[:, None, None] * torch.eye(n, dtype=torch.float64) + A
    assert (x - torch.linalg.solve(M, b)).abs().max() < 1e-10
    assert torch.autograd.gradcheck(lambda a0: ps.linsolve(A, b, a0=a0), (a0,))


# ------------------------------------------------------------ backend="julia"


def julia_case(dtype, seed=40):
    """A batch of three systems with a shift per system and a shared scale,
    every input requiring its gradient."""
    n = 30
    A = (randn(3, n, n, dtype=dtype, seed=seed) / n**0.5).requires_grad_()
    b = randn(3, n, dtype=dtype, seed=seed + 1).requires_grad_()
    a0 = torch.tensor([1.0, 2.0, 1.5], dtype=torch.float64, requires_grad=True)
    a1 = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    return A, b, a0, a1


def both_backends(A, b, a0, a1):
    """``x`` and the gradients of a real loss on both backends."""
    w = randn(*b.shape, dtype=b.dtype, seed=7)
    out = {}
    for backend in ("torch", "julia"):
        x = ps.linsolve(A, b, a0=a0, a1=a1, backend=backend)
        loss = (x * w.conj()).real.sum()
        out[backend] = (x.detach(), *torch.autograd.grad(loss, (A, b, a0, a1)))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_julia_route_through_the_stand_in(fake, dtype):
    """backend="julia" calls the glue's solve and adjoint solve (the stand-in
    solves natively), with one absolute tolerance per system and rtol 0, and
    returns the native backend's numbers and gradients."""
    A, b, a0, a1 = julia_case(dtype)
    out = both_backends(A, b, a0, a1)
    (solve,) = fake.calls_to("linsolve_dense")
    (pullback,) = fake.calls_to("linsolve_pullback_dense!")
    assert len(solve.args) == 10 and len(pullback.args) == 11
    for u, v in zip(out["torch"], out["julia"], strict=True):
        assert u.dtype == v.dtype and u.shape == v.shape
        assert (u - v).abs().max() <= 1e-10 * v.abs().max()


def tangents(A, b, a0, a1, backend):
    """Forward mode: ``dx`` along tangents of all four inputs (dual tensors)."""
    dA, db = (
        randn(*A.shape, dtype=A.dtype, seed=8),
        randn(*b.shape, dtype=b.dtype, seed=9),
    )
    da0 = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    da1 = torch.tensor(-0.4, dtype=torch.float64)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(t.detach(), d) for t, d in
                 zip((A, b, a0, a1), (dA, db, da0, da1), strict=True)]  # fmt: skip
        x = ps.linsolve(duals[0], duals[1], a0=duals[2], a1=duals[3], backend=backend)
        dx = fwAD.unpack_dual(x).tangent
    with fwAD.dual_level():  # the dense reference: torch.linalg.solve's tangent
        d = [fwAD.make_dual(t.detach(), dt) for t, dt in
             zip((A, b, a0, a1), (dA, db, da0, da1), strict=True)]  # fmt: skip
        eye = torch.eye(A.shape[-1], dtype=A.dtype)
        M = d[2][:, None, None] * eye + d[3] * d[0]
        ref = fwAD.unpack_dual(torch.linalg.solve(M, d[1])).tangent
    return dx, ref


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_mode_matches_the_dense_solve(dtype):
    """Dual tensors through the native solver: the tangent of the converged
    iteration, equal to torch.linalg.solve's."""
    dx, ref = tangents(*julia_case(dtype), "torch")
    assert dx is not None and (dx - ref).abs().max() <= 1e-9 * ref.abs().max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_julia_forward_mode_through_the_stand_in(fake, dtype):
    """Forward mode on the Julia backend: one more glue solve for the
    tangent, equal to the dense solve's (no tangent dropped)."""
    dx, ref = tangents(*julia_case(dtype), "julia")
    assert len(fake.calls_to("linsolve_dense")) == 2  # x, then dx
    assert dx is not None and (dx - ref).abs().max() <= 1e-9 * ref.abs().max()


def test_julia_refuses_a_python_operator(fake):
    op = ps.LinearOperator((4, 4), lambda X: 2 * X, dtype=torch.float64)
    with pytest.raises(ps.BackendError, match="back into Python"):
        ps.linsolve(op, torch.ones(4, dtype=torch.float64), backend="julia")
    assert not fake.calls_to("linsolve_dense")


@needs_julia
@pytest.mark.parametrize("dtype", DTYPES)
def test_julia_matches_native(dtype):
    """Julia's KrylovKit GMRES and adjoint solve against the native ones: the
    same x and gradients to the solves' tolerance, and a gradcheck."""
    A, b, a0, a1 = julia_case(dtype)
    out = both_backends(A, b, a0, a1)
    for u, v in zip(out["torch"], out["julia"], strict=True):
        assert u.dtype == v.dtype and u.shape == v.shape
        assert (u - v).abs().max() <= 1e-9 * v.abs().max()
    # a zero cotangent per system (gradcheck's unit vectors) solves to zero
    assert torch.autograd.gradcheck(
        lambda A, b, a0, a1: ps.linsolve(A, b, a0=a0, a1=a1, backend="julia"),
        (A[:, :6, :6], b[:, :6], a0, a1),
    )


@needs_julia
@pytest.mark.parametrize("dtype", DTYPES)
def test_julia_forward_mode_matches_the_dense_solve(dtype):
    dx, ref = tangents(*julia_case(dtype), "julia")
    assert dx is not None and (dx - ref).abs().max() <= 1e-9 * ref.abs().max()


@needs_julia
def test_julia_cg_and_a_real_matrix_with_a_complex_right_hand_side():
    n = 25
    B = randn(n, n, seed=3)
    H = (B @ B.mT / n + torch.eye(n, dtype=torch.float64)).requires_grad_()
    h = randn(n, seed=4)
    x = ps.linsolve(H, h, ishermitian=True, isposdef=True, backend="julia")
    assert (x - torch.linalg.solve(H.detach(), h)).abs().max() < 1e-9
    x.sum().backward()
    g = H.grad.clone()
    H.grad = None
    ps.linsolve(H, h, ishermitian=True, isposdef=True).sum().backward()
    assert torch.allclose(g, H.grad, atol=1e-9, rtol=0)
    # real A, complex b: a complex x, a real gradient for A
    A = (randn(n, n, seed=5) / n**0.5).requires_grad_()
    c = randn(n, dtype=torch.complex128, seed=6)
    x = ps.linsolve(A, c, a0=2.0, backend="julia")
    assert (
        x.dtype == torch.complex128
        and residual(A.detach().to(x.dtype), x, c, 2.0) < 1e-10
    )
    x.abs().pow(2).sum().backward()
    assert A.grad.dtype == torch.float64
    g = A.grad.clone()
    A.grad = None
    ps.linsolve(A, c, a0=2.0).abs().pow(2).sum().backward()
    assert torch.allclose(g, A.grad, atol=1e-9, rtol=0)


@needs_julia
def test_julia_warns_when_not_converged():
    n = 50
    A = randn(n, n) / n**0.5
    b = randn(n, seed=1)
    with pytest.warns(ps.ConvergenceWarning, match=r"residual .* \(Julia, KrylovKit\)"):
        ps.linsolve(A, b, a0=0.1, krylovdim=2, maxiter=1, backend="julia")
