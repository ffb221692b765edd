"""eig_function: V f(Lambda) V^-1 of a diagonalizable (non-Hermitian) matrix,
exact at repeated eigenvalues (divided differences in the eigenbasis), to
first and second order and in forward mode; matrix_function's refusal of a
non-Hermitian input. References: torch.linalg.matrix_exp / matrix_power
(whose derivatives are exact everywhere) and float64 central differences."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _julia import needs_julia
from torch.autograd import gradcheck, gradgradcheck

import pyspectral as ps

F64, C128 = torch.float64, torch.complex128


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def similar(diag, dtype=F64, seed=0) -> torch.Tensor:
    """``S diag S^-1`` with a well-conditioned ``S = I + 0.3 randn`` (a
    diagonalizable matrix with the chosen, possibly repeated, spectrum)."""
    g = _gen(seed)
    d = torch.as_tensor(diag, dtype=C128 if dtype.is_complex else F64)
    n = d.shape[-1]
    noise = torch.randn(n, n, dtype=d.dtype, generator=g)
    S = torch.eye(n, dtype=d.dtype) + 0.3 * noise
    return (S @ torch.diag_embed(d) @ torch.linalg.inv(S)).to(dtype)


def rotation_pairs(seed=0) -> torch.Tensor:
    """A real 4x4 matrix with the complex conjugate pair 1 +- 2i twice (a
    repeated pair) and a real similarity."""
    g = _gen(seed)
    block = torch.tensor([[1.0, -2.0], [2.0, 1.0]], dtype=F64)
    B = torch.block_diag(block, block)
    S = torch.eye(4, dtype=F64) + 0.3 * torch.randn(4, 4, dtype=F64, generator=g)
    return S @ B @ torch.linalg.inv(S)


def central_difference(loss, A: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    """The gradient of the real ``loss`` at ``A`` by float64 central
    differences (real and imaginary parts of a complex ``A``)."""
    grad = torch.zeros_like(A)
    flat = grad.view(-1)
    parts = (1.0, 1j) if A.is_complex() else (1.0,)
    for i in range(A.numel()):
        for unit in parts:
            E = torch.zeros_like(A).view(-1)
            E[i] = unit
            E = E.view_as(A)
            with torch.no_grad():
                d = (loss(A + h * E) - loss(A - h * E)) / (2 * h)
            flat[i] = flat[i] + unit * float(d)
    return grad


def weighted(Y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return (Y * W.conj()).real.sum()


REFERENCE = {
    "exp": torch.linalg.matrix_exp,
    ("pow", 3): lambda X: torch.linalg.matrix_power(X, 3),
    ("pow", -1): torch.linalg.inv,
    ("pow", 0): lambda X: torch.eye(X.shape[-1], dtype=X.dtype).expand_as(X),
}


# ------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", [F64, C128, torch.float32, torch.complex64])
@pytest.mark.parametrize("f", list(REFERENCE), ids=str)
def test_forward_matches_torch(f, dtype) -> None:
    g = _gen(1)
    A = torch.randn(3, 5, 5, dtype=dtype, generator=g)
    Y = ps.eig_function(A, f)
    assert Y.dtype == dtype and Y.shape == A.shape
    want = REFERENCE[f](A.to(C128 if dtype.is_complex else F64))
    tol = 1e-10 if dtype in (F64, C128) else 2e-4
    assert torch.allclose(Y.to(want.dtype), want, rtol=tol, atol=tol * want.abs().max())


def test_log_sqrt_invert_exp_and_square() -> None:
    A = similar([1.0, 2.0, 0.5 + 1j, 0.5 - 1j], C128).real  # a real conjugate pair
    L = ps.eig_function(A, "log")
    assert L.dtype == F64
    assert torch.allclose(torch.linalg.matrix_exp(L), A, atol=1e-12)
    R = ps.eig_function(A, "sqrt")
    assert torch.allclose(R @ R, A, atol=1e-12)
    Q = ps.eig_function(A, "invsqrt")
    assert torch.allclose(Q @ R, torch.eye(4, dtype=F64), atol=1e-12)
    P = ps.eig_function(A, ("pow", 0.5))
    assert torch.allclose(P, R, atol=1e-12)


# ------------------------------------------------- first order, exact


@pytest.mark.parametrize("dtype", [F64, C128])
@pytest.mark.parametrize(
    "f",
    ["exp", "log", "sqrt", "invsqrt", ("pow", 3), ("pow", -2), ("pow", 0.7)],
    ids=str,
)
def test_gradcheck_generic(f, dtype) -> None:
    # eigenvalues in the right half plane, apart: every f analytic there
    A = similar([1.0, 2.0, 3.5, 0.6], dtype, seed=3).requires_grad_()
    W = torch.randn(4, 4, dtype=dtype, generator=_gen(4))
    assert gradcheck(lambda X: weighted(ps.eig_function(X, f), W), (A,))


@pytest.mark.parametrize("dtype", [F64, C128])
@pytest.mark.parametrize(
    "spectrum", [[1.0, 1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 0.5]], ids=["double", "triple"]
)
@pytest.mark.parametrize("f", ["exp", ("pow", 3)], ids=str)
def test_repeated_eigenvalues_exact(f, spectrum, dtype) -> None:
    """At a repeated eigenvalue of a diagonalizable A: the gradient against
    torch.linalg.matrix_exp / matrix_power's (exact everywhere) and central
    differences."""
    A0 = similar(spectrum, dtype, seed=1)
    W = torch.randn(4, 4, dtype=dtype, generator=_gen(2))
    A = A0.clone().requires_grad_()
    (g,) = torch.autograd.grad(weighted(ps.eig_function(A, f), W), A)
    B = A0.clone().requires_grad_()
    (want,) = torch.autograd.grad(weighted(REFERENCE[f](B), W), B)
    assert torch.allclose(g, want, rtol=1e-10, atol=1e-10 * want.abs().max())
    fd = central_difference(lambda X: weighted(ps.eig_function(X, f), W), A0)
    assert torch.allclose(g, fd, rtol=1e-6, atol=1e-6 * fd.abs().max())


@pytest.mark.parametrize("gap", [1e-13, 1e-10, 1e-7, 1e-4])
def test_near_repeated_eigenvalues_exact(gap) -> None:
    """Every gap between exact ties and separated values (the divided
    differences' crossover from the derivative to the quotient)."""
    A0 = similar([1.0, 1.0 + gap, 2.0, 3.0], seed=2)
    W = torch.randn(4, 4, dtype=F64, generator=_gen(3))
    for f in ("exp", ("pow", 3)):
        A = A0.clone().requires_grad_()
        (g,) = torch.autograd.grad(weighted(ps.eig_function(A, f), W), A)
        B = A0.clone().requires_grad_()
        (want,) = torch.autograd.grad(weighted(REFERENCE[f](B), W), B)
        assert torch.allclose(g, want, rtol=1e-9, atol=1e-9 * want.abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_single_precision_gradient(dtype) -> None:
    A0 = similar([1.0, 1.0, 2.0, 3.0], dtype, seed=1)
    W = torch.randn(4, 4, dtype=dtype, generator=_gen(2))
    A = A0.clone().requires_grad_()
    (g,) = torch.autograd.grad(weighted(ps.eig_function(A, "exp"), W), A)
    assert g.dtype == dtype
    B = A0.to(C128 if dtype.is_complex else F64).requires_grad_()
    loss = weighted(torch.linalg.matrix_exp(B), W.to(B.dtype))
    (want,) = torch.autograd.grad(loss, B)
    tol = 1e-4 * want.abs().max()
    assert torch.allclose(g.to(want.dtype), want, rtol=1e-4, atol=tol)


def test_repeated_eigenvalue_log_by_differences() -> None:
    """log has no torch reference: central differences at a double eigenvalue."""
    A0 = similar([1.0, 1.0, 2.0, 3.0])
    W = torch.randn(4, 4, dtype=F64, generator=_gen(5))
    A = A0.clone().requires_grad_()
    (g,) = torch.autograd.grad(weighted(ps.eig_function(A, "log"), W), A)
    fd = central_difference(lambda X: weighted(ps.eig_function(X, "log"), W), A0)
    assert torch.allclose(g, fd, rtol=1e-6, atol=1e-6 * fd.abs().max())


def test_real_matrix_with_repeated_conjugate_pairs() -> None:
    A0 = rotation_pairs()
    L = torch.linalg.eigvals(A0)
    assert (L.imag.abs() > 1).all()  # complex eigenvalues, a real A
    W = torch.randn(4, 4, dtype=F64, generator=_gen(6))
    for f in ("exp", ("pow", 3), "log"):
        A = A0.clone().requires_grad_()
        Y = ps.eig_function(A, f)
        assert Y.dtype == F64
        (g,) = torch.autograd.grad(weighted(Y, W), A)
        fd = central_difference(lambda X, f=f: weighted(ps.eig_function(X, f), W), A0)
        assert torch.allclose(g, fd, rtol=1e-6, atol=1e-6 * fd.abs().max()), f
    B = A0.clone().requires_grad_()
    (want,) = torch.autograd.grad(weighted(torch.linalg.matrix_exp(B), W), B)
    A = A0.clone().requires_grad_()
    (g,) = torch.autograd.grad(weighted(ps.eig_function(A, "exp"), W), A)
    assert torch.allclose(g, want, rtol=1e-10, atol=1e-10 * want.abs().max())


def test_batched_mixed_spectra() -> None:
    A0 = torch.stack([similar([1.0, 1.0, 2.0, 3.0]), rotation_pairs(), similar(
        [0.5, 1.5, 2.5, -1.0], seed=4)])  # fmt: skip
    W = torch.randn(3, 4, 4, dtype=F64, generator=_gen(7))
    A = A0.clone().requires_grad_()
    (g,) = torch.autograd.grad(weighted(ps.eig_function(A, "exp"), W), A)
    B = A0.clone().requires_grad_()
    (want,) = torch.autograd.grad(weighted(torch.linalg.matrix_exp(B), W), B)
    assert torch.allclose(g, want, rtol=1e-10, atol=1e-10 * want.abs().max())


# ------------------------------------------- second order, forward mode


@pytest.mark.parametrize("dtype", [F64, C128])
@pytest.mark.parametrize("f", ["exp", "log", ("pow", 3), ("pow", 0.5)], ids=str)
def test_gradgradcheck_generic(f, dtype) -> None:
    A = similar([1.0, 2.0, 3.5, 0.6], dtype, seed=3).requires_grad_()
    W = torch.randn(4, 4, dtype=dtype, generator=_gen(4))
    assert gradgradcheck(lambda X: weighted(ps.eig_function(X, f), W), (A,))


@pytest.mark.parametrize("dtype", [F64, C128])
@pytest.mark.parametrize("spectrum", [[1.0, 1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 0.5]])
def test_second_order_and_jvp_at_repeated_eigenvalues(spectrum, dtype) -> None:
    A0 = similar(spectrum, dtype, seed=1)
    W = torch.randn(4, 4, dtype=dtype, generator=_gen(2))
    D = torch.randn(4, 4, dtype=dtype, generator=_gen(3))
    for f in ("exp", ("pow", 3)):
        ref = REFERENCE[f]

        def hvp(fun, f=f):
            A = A0.clone().requires_grad_()
            (g,) = torch.autograd.grad(weighted(fun(A), W), A, create_graph=True)
            (h,) = torch.autograd.grad(weighted(g, D), A)
            return h

        got, want = hvp(lambda X, f=f: ps.eig_function(X, f)), hvp(ref)
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-10 * want.abs().max())
        t = torch.func.jvp(lambda X, f=f: ps.eig_function(X, f), (A0,), (D,))[1]
        t_want = torch.func.jvp(ref, (A0,), (D,))[1]
        assert torch.allclose(t, t_want, rtol=1e-10, atol=1e-10 * t_want.abs().max())


def test_torch_func_transforms() -> None:
    A0 = similar([1.0, 1.0, 2.0, 3.0])
    W = torch.randn(4, 4, dtype=F64, generator=_gen(2))

    def loss(fun):
        return lambda X: weighted(fun(X), W)

    ours, ref = loss(lambda X: ps.eig_function(X, "exp")), loss(torch.linalg.matrix_exp)
    for transform in (torch.func.grad, torch.func.hessian):
        got, want = transform(ours)(A0), transform(ref)(A0)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9 * want.abs().max())
    got = torch.func.jacfwd(lambda X: ps.eig_function(X, "exp"))(A0)
    want = torch.func.jacfwd(torch.linalg.matrix_exp)(A0)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-10 * want.abs().max())
    got = torch.func.jacrev(torch.func.jacfwd(ours))(A0)
    assert torch.allclose(got, torch.func.hessian(ref)(A0), rtol=1e-9, atol=1e-9)
    batch = torch.stack([A0, rotation_pairs()])
    got = torch.func.vmap(torch.func.grad(ours))(batch)
    want = torch.func.vmap(torch.func.grad(ref))(batch)
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-9 * want.abs().max())


def test_third_derivative_raises() -> None:
    A = similar([1.0, 2.0, 3.0]).requires_grad_()
    (g,) = torch.autograd.grad(ps.eig_function(A, "exp").sum(), A, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), A, create_graph=True)
    with pytest.raises(ps.DerivativeError):
        torch.autograd.grad(h.sum(), A)


# ------------------------------------------------------------- user f


def test_user_f_matches_named_to_second_order() -> None:
    A0 = similar([1.0, 1.0, 2.0, 3.0])
    W = torch.randn(4, 4, dtype=F64, generator=_gen(8))
    D = torch.randn(4, 4, dtype=F64, generator=_gen(9))
    for user in (
        lambda z: z**3,
        (lambda z: z**3, lambda z: 3 * z**2),
        (lambda z: z**3, lambda z: 3 * z**2, lambda z: 6 * z),
    ):
        results = []
        for f in (user, ("pow", 3)):
            A = A0.clone().requires_grad_()
            Y = ps.eig_function(A, f)
            (g,) = torch.autograd.grad(weighted(Y, W), A, create_graph=True)
            (h,) = torch.autograd.grad(weighted(g, D), A)
            results.append((Y.detach(), g.detach(), h))
        for got, want in zip(*results):
            assert torch.allclose(got, want, rtol=1e-10, atol=1e-10 * want.abs().max())


def test_user_f_exp_sin_combination_complex() -> None:
    A0 = similar([1.0, 1.0, 2.0 + 1j, -0.5], C128, seed=2)
    W = torch.randn(4, 4, dtype=C128, generator=_gen(3))

    def f(z):
        return torch.exp(z) + 2 * z**2

    def ref(X):
        return torch.linalg.matrix_exp(X) + 2 * X @ X

    A = A0.clone().requires_grad_()
    Y = ps.eig_function(A, f)
    (g,) = torch.autograd.grad(weighted(Y, W), A)
    B = A0.clone().requires_grad_()
    (want,) = torch.autograd.grad(weighted(ref(B), W), B)
    assert torch.allclose(Y.detach(), ref(A0), atol=1e-12)
    assert torch.allclose(g, want, rtol=1e-10, atol=1e-10 * want.abs().max())


def test_user_f_parameters_get_their_gradient() -> None:
    A0 = rotation_pairs()
    W = torch.randn(4, 4, dtype=F64, generator=_gen(10))
    beta = torch.tensor(0.7, dtype=F64, requires_grad=True)

    def loss(b):
        return weighted(ps.eig_function(A0, lambda z: torch.exp(-b * z)), W)

    (g,) = torch.autograd.grad(loss(beta), beta)
    with torch.no_grad():
        h = 1e-6
        fd = (loss(beta + h) - loss(beta - h)) / (2 * h)
    assert abs(float(g) - float(fd)) <= 1e-7 * abs(float(fd))
    # the same as matrix_exp(-beta A)
    b2 = beta.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(weighted(torch.linalg.matrix_exp(-b2 * A0), W), b2)
    assert torch.allclose(g, want, rtol=1e-10)
    # forward mode in the parameter
    one = torch.ones((), dtype=F64)

    def filtered(b):
        return ps.eig_function(A0, lambda z: torch.exp(-b * z))

    t = torch.func.jvp(filtered, (b2.detach(),), (one,))[1]
    t_want = torch.func.jvp(lambda b: torch.linalg.matrix_exp(-b * A0), (b2.detach(),),
                            (one,))[1]  # fmt: skip
    assert torch.allclose(t, t_want, rtol=1e-10, atol=1e-12)
    # second derivatives involving the parameters are not implemented: said
    # (when the graph for them is asked for)
    A = A0.clone().requires_grad_()
    Y = ps.eig_function(A, lambda z: torch.exp(-beta * z))
    with pytest.raises(ps.DerivativeError, match="parameters"):
        torch.autograd.grad(weighted(Y, W), A, create_graph=True)


def test_user_f_not_analytic_refused() -> None:
    A = similar([1.0, 2.0, 3.0], C128)
    for f in (lambda z: z.conj(), lambda z: z.abs() + 0j, lambda z: z * z.conj()):
        with pytest.raises(ps.InputError, match="analytic"):
            ps.eig_function(A, f)


def test_user_f_not_real_on_real_matrix_refused_and_complex_route() -> None:
    A = rotation_pairs()

    def f(z):
        return torch.exp(1j * z)  # not real on the real axis

    with pytest.raises(ps.InputError, match="complex128") as err:
        ps.eig_function(A, f)
    assert "eig_function(A.to(torch.complex128), f)" in str(err.value)
    # the route named: the complex f(A), exact
    Ac = A.to(C128)
    Y = ps.eig_function(Ac, f)
    assert torch.allclose(Y, torch.linalg.matrix_exp(1j * Ac), atol=1e-12)


def test_user_f_not_elementwise_refused() -> None:
    A = similar([1.0, 2.0, 3.0], C128)
    with pytest.raises(ps.InputError, match="elementwise"):
        ps.eig_function(A, lambda z: z * z.sum())


# --------------------------------------------------- refusals, domain


def jordan(dtype=F64, seed=0) -> torch.Tensor:
    g = _gen(seed)
    J = torch.tensor([[2.0, 1.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -1.0]], dtype=F64)
    S = torch.eye(3, dtype=F64) + 0.3 * torch.randn(3, 3, dtype=F64, generator=g)
    return (S @ J @ torch.linalg.inv(S)).to(dtype)


@pytest.mark.parametrize("dtype", [F64, C128])
def test_defective_refused_and_the_named_route_is_exact(dtype) -> None:
    A0 = jordan(dtype)
    for f, route in (("exp", "torch.linalg.matrix_exp"), (("pow", 2), "matrix_power")):
        with pytest.raises(ps.DomainError, match="defective") as err:
            ps.eig_function(A0, f)
        assert route in str(err.value)
    # the routes named: exact at the Jordan block
    W = torch.randn(3, 3, dtype=dtype, generator=_gen(1))
    for fun in (torch.linalg.matrix_exp, lambda X: torch.linalg.matrix_power(X, 2)):
        A = A0.clone().requires_grad_()
        (g,) = torch.autograd.grad(weighted(fun(A), W), A)
        fd = central_difference(lambda X, fun=fun: weighted(fun(X), W), A0)
        assert torch.allclose(g, fd, rtol=1e-6, atol=1e-6 * fd.abs().max())
    with pytest.raises(ps.DomainError, match="Schur"):
        ps.eig_function(A0, "log")


def test_log_on_the_negative_axis_refused() -> None:
    A = similar([1.0, -2.0, 3.0])  # a real negative eigenvalue
    for f in ("log", "sqrt", ("pow", 0.5), ("pow", -0.5)):
        with pytest.raises(ps.DomainError, match="negative real axis"):
            ps.eig_function(A, f)
    # the advice: shifted off the axis, exact
    B = A + 3 * torch.eye(3, dtype=F64)
    assert torch.allclose(torch.linalg.matrix_exp(ps.eig_function(B, "log")), B)
    with pytest.raises(ps.DomainError, match="invertible"):
        ps.eig_function(similar([0.0, 1.0, 2.0]), ("pow", -1))


def test_bad_arguments() -> None:
    A = similar([1.0, 2.0])
    with pytest.raises(ps.InputTypeError):
        ps.eig_function(A, "cosh")
    with pytest.raises(ps.InputError):
        ps.eig_function(A, ("pow", float("nan")))
    with pytest.raises(ps.ShapeError):
        ps.eig_function(torch.randn(2, 3, dtype=F64), "exp")
    with pytest.raises(ps.NonFiniteError):
        ps.eig_function(torch.full((2, 2), float("nan"), dtype=F64), "exp")


# ------------------------------------------- matrix_function's refusal


def non_hermitian() -> torch.Tensor:
    return torch.tensor([[1.0, 2.0, 0.0], [0.5, 1.0, 1.0], [0.0, 0.3, 0.5]], dtype=F64)


@pytest.mark.parametrize("f", ["exp", ("pow", 3)], ids=str)
def test_matrix_function_refuses_non_hermitian_naming_eig_function(f, backend) -> None:
    A0 = non_hermitian()
    with pytest.raises(ps.InputError, match="eig_function") as err:
        ps.matrix_function(A0, f, backend=backend)
    assert "check_hermitian=False" in str(err.value)
    # the route named: exact, value and gradient
    W = torch.randn(3, 3, dtype=F64, generator=_gen(1))
    A = A0.clone().requires_grad_()
    Y = ps.eig_function(A, f, backend=backend)
    (g,) = torch.autograd.grad(weighted(Y, W), A)
    B = A0.clone().requires_grad_()
    Z = REFERENCE[f](B)
    (want,) = torch.autograd.grad(weighted(Z, W), B)
    assert torch.allclose(Y.detach(), Z.detach(), atol=1e-12)
    assert torch.allclose(g, want, rtol=1e-10, atol=1e-12)


def test_matrix_function_opt_out_reads_one_triangle() -> None:
    A = non_hermitian()
    for uplo in ("L", "U"):
        Y = ps.matrix_function(A, "exp", uplo, check_hermitian=False)
        H = torch.tril(A) if uplo == "L" else torch.triu(A)
        H = H + H.mT - torch.diag_embed(A.diagonal())
        assert torch.allclose(Y, torch.linalg.matrix_exp(H), atol=1e-12)


def test_matrix_function_accepts_rounding_asymmetry() -> None:
    X = torch.randn(6, 6, dtype=F64, generator=_gen(2))
    A = X @ X.mT + torch.eye(6, dtype=F64)
    A[0, 1] += 1e-14 * A.abs().max()  # rounding-level asymmetry
    Y = ps.matrix_function(A, "sqrt")
    assert torch.allclose(Y @ Y, A, atol=1e-10)
    # per matrix of a batch, with the batch element named
    B = torch.stack([A, non_hermitian().new_zeros(6, 6) + torch.triu(A)])
    with pytest.raises(ps.InputError, match=r"batch element \(1,\)"):
        ps.matrix_function(B, "sqrt")
    C = A.clone()
    C[5, 0] = float("nan")  # in the triangle that UPLO="U" does not read
    with pytest.raises(ps.NonFiniteError):
        ps.matrix_function(C, "exp", "U")
    assert ps.matrix_function(C, "exp", "U", check_hermitian=False).isfinite().all()


# ------------------------------------------------------ both backends
# ``backend``: native, or Julia through its stand-in (tests/_fake_julia.py);
# the same tests against real Julia where it is installed (needs_julia).


def _backend_case(backend: str) -> None:
    A0 = torch.stack([similar([1.0, 1.0, 2.0, 3.0]), rotation_pairs()])
    W = torch.randn(2, 4, 4, dtype=F64, generator=_gen(11))
    D = torch.randn(2, 4, 4, dtype=F64, generator=_gen(12))
    for dtype in (F64, C128):
        A0c, Wc, Dc = A0.to(dtype), W.to(dtype), D.to(dtype)
        for f in ("exp", ("pow", 3), "log"):
            results = []
            for b in ("torch", backend):
                A = A0c.clone().requires_grad_()
                Y = ps.eig_function(A, f, backend=b)
                (g,) = torch.autograd.grad(weighted(Y, Wc), A)
                A = A0c.clone().requires_grad_()
                (g2,) = torch.autograd.grad(
                    weighted(ps.eig_function(A, f, backend=b), Wc), A, create_graph=True
                )
                (h,) = torch.autograd.grad(weighted(g2, Dc), A)
                with fwAD.dual_level():
                    out = ps.eig_function(fwAD.make_dual(A0c, Dc), f, backend=b)
                    t = fwAD.unpack_dual(out).tangent
                results.append((Y.detach(), g, h, t))
            for got, want in zip(results[1], results[0]):
                assert got.dtype == want.dtype
                assert torch.allclose(got, want, rtol=1e-10, atol=1e-10)
    # a user f runs in Python on the backend's eigenbasis
    A = A0.clone().requires_grad_()
    Y = ps.eig_function(A, lambda z: z**3, backend=backend)
    assert torch.allclose(Y, torch.linalg.matrix_power(A0, 3), atol=1e-12)
    with pytest.raises(ps.DomainError, match="matrix_exp"):
        ps.eig_function(jordan(), "exp", backend=backend)
    with pytest.raises(ps.DomainError, match="negative real axis"):
        ps.eig_function(similar([1.0, -2.0, 3.0]), "log", backend=backend)


def test_backends_agree_through_the_stand_in(fake) -> None:
    _backend_case("julia")
    assert fake.calls_to("eig_function_pullback_batched!")
    assert fake.calls_to("eig_function_pushforward_batched")


@needs_julia
def test_backends_agree_on_real_julia() -> None:
    _backend_case("julia")
