"""The convention of the derivatives of ``eigh``, ``eigvalsh`` and
``matrix_function`` w.r.t. ``A`` (``gradient=``, ``_eigh_autograd._with_gradient``):
torch's Hermitian gradient by default, equal to ``torch.linalg``'s on
symmetric leaves; ``gradient="triangle"`` the gradient w.r.t. the entries
read, the fold of the Hermitian one; forward mode, second order and
torch.func under each; the setting and bad values; on both backends (the
Julia one through the stand-in here, for real where Julia is installed).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from _fake_julia import installed
from _julia import needs_julia
from _spectra import random_like, rel_err

import pyspectral as ps

F64, C128 = torch.float64, torch.complex128


def on(backend: str):
    """The backend: native, or Julia through the stand-in."""
    return installed() if backend == "julia" else contextlib.nullcontext()


def hermitian(n: int, dtype, seed: int) -> torch.Tensor:
    X = random_like(torch.empty(n, n, dtype=dtype), seed=seed)
    return (X + X.mH) / 2


def fold(G: torch.Tensor, uplo: str) -> torch.Tensor:
    """The triangle-true gradient from the Hermitian one: twice the read
    off-diagonal entries, the real diagonal, zero elsewhere."""
    tri = torch.tril(G, -1) if uplo == "L" else torch.triu(G, 1)
    return 2 * tri + torch.diag_embed(G.diagonal(dim1=-2, dim2=-1).real.to(G.dtype))


def _torch_function(A, f):
    """``V f(w) V^H`` by ``torch.linalg.eigh`` (Hermitian gradient; not
    ``matrix_exp``, whose gradient is that of a general matrix)."""
    w, V = torch.linalg.eigh(A)
    return (V * f(w).to(V.dtype)) @ V.mH


def _top3(w, V, W):
    return w.pow(3).sum() + (((V * w.to(V.dtype)) @ V.mH) * W.conj()).real.sum()


# Each case: (pyspectral's loss, torch.linalg's), at a generic spectrum.
def _weights(n, dtype):
    return random_like(torch.empty(n, n, dtype=dtype), seed=11)


CASES = {
    "eigh": (
        lambda A, W, **kw: (
            (ps.eigh(A, **kw)[1].abs() ** 2 * W.real).sum()
            + ps.eigh(A, **kw)[0].pow(3).sum()
        ),
        lambda A, W: (
            (torch.linalg.eigh(A)[1].abs() ** 2 * W.real).sum()
            + torch.linalg.eigh(A)[0].pow(3).sum()
        ),
    ),
    "eigvalsh": (
        lambda A, W, **kw: (ps.eigvalsh(A, **kw) * W.real[0]).sum(),
        lambda A, W: (torch.linalg.eigvalsh(A) * W.real[0]).sum(),
    ),
    # the 3 largest, a sum over kept pairs (order and phase free)
    "eigh k=3": (
        lambda A, W, **kw: _top3(*ps.eigh(A, k=3, **kw), W),
        lambda A, W: _top3(*[x[..., -3:] for x in torch.linalg.eigh(A)], W),
    ),
    "eigh k=3 randomized": (
        lambda A, W, **kw: _top3(*ps.eigh(A, k=3, method="randomized", **kw), W),
        lambda A, W: _top3(*[x[..., -3:] for x in torch.linalg.eigh(A)], W),
    ),
    "matrix_function exp": (
        lambda A, W, **kw: (ps.matrix_function(A, "exp", **kw) * W.conj()).real.sum(),
        lambda A, W: (_torch_function(A, torch.exp) * W.conj()).real.sum(),
    ),
    "matrix_function user f": (
        lambda A, W, **kw: (
            ps.matrix_function(A, torch.sin, **kw) * W.conj()
        ).real.sum(),
        lambda A, W: (_torch_function(A, torch.sin) * W.conj()).real.sum(),
    ),
}


@pytest.mark.parametrize("backend", ["torch", "julia"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_the_default_is_torchs_gradient_and_triangle_its_fold(
    dtype, case, uplo, backend
):
    ours, theirs = CASES[case]
    A = hermitian(5, dtype, seed=1)
    W = _weights(5, dtype)
    X = A.clone().requires_grad_()
    (expected,) = torch.autograd.grad(theirs(X, W), X)
    with on(backend):
        X = A.clone().requires_grad_()
        (default,) = torch.autograd.grad(ours(X, W, UPLO=uplo, backend=backend), X)
        X = A.clone().requires_grad_()
        (tri,) = torch.autograd.grad(
            ours(X, W, UPLO=uplo, backend=backend, gradient="triangle"), X
        )
    assert rel_err(default, expected) < 1e-10
    assert torch.equal(default, default.mH)  # a symmetric leaf stays symmetric
    assert rel_err(tri, fold(expected, uplo)) < 1e-10


def test_a_step_keeps_a_symmetric_leaf_symmetric():
    # the user's complaint: A -= lr * A.grad left the symmetric set
    A = hermitian(6, F64, seed=2).requires_grad_()
    for _ in range(3):
        loss = ps.eigvalsh(A).pow(2)[-1] + ps.eigh(A)[1][:, 0].pow(4).sum()
        (g,) = torch.autograd.grad(loss, A)
        with torch.no_grad():
            A -= 0.1 * g
        assert torch.equal(A, A.mT)


@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_triangle_is_the_gradient_of_the_entries_read(dtype):
    # gradcheck perturbs every entry; only the triangle's count
    A = hermitian(4, dtype, seed=3).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda X: ps.matrix_function(
            X, "exp", gradient="triangle", check_hermitian=False
        ),
        (A,),
    )
    assert torch.autograd.gradcheck(
        lambda X: ps.eigvalsh(X, UPLO="U", gradient="triangle"), (A,)
    )
    # and the default, with the Hermitian part of every direction
    assert torch.autograd.gradcheck(
        lambda X: ps.matrix_function((X + X.mH) / 2, "exp"), (A,)
    )


@pytest.mark.parametrize("gradient", ["hermitian", "triangle"])
@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_forward_mode_is_the_transpose(dtype, gradient):
    # <G, dA> = the tangent of the loss along dA, for a direction that is not
    # Hermitian; "hermitian" reads it through its Hermitian part
    A = hermitian(5, dtype, seed=4)
    W = _weights(5, dtype)
    dA = random_like(A, seed=5)
    ours = CASES["matrix_function exp"][0]

    def loss(X):
        return ours(X, W, gradient=gradient)

    X = A.clone().requires_grad_()
    (G,) = torch.autograd.grad(loss(X), X)
    _, tangent = torch.func.jvp(loss, (A,), (dA,))
    assert abs(float(tangent) - float((G.conj() * dA).real.sum())) < 1e-10
    if gradient == "hermitian":
        _, along_h = torch.func.jvp(loss, (A,), ((dA + dA.mH) / 2,))
        assert abs(float(tangent - along_h)) < 1e-10


def test_second_order_and_torch_func():
    A = hermitian(5, F64, seed=6)
    D = random_like(A, seed=7)
    D = D + D.mT

    def loss(X):
        return ps.matrix_function(X, "exp").sum() + ps.eigvalsh(X).pow(3).sum()

    def loss_torch(X):
        return (
            _torch_function(X, torch.exp).sum() + torch.linalg.eigvalsh(X).pow(3).sum()
        )

    hvp = torch.func.jvp(torch.func.grad(loss), (A,), (D,))[1]
    hvp_torch = torch.func.jvp(torch.func.grad(loss_torch), (A,), (D,))[1]
    assert rel_err(hvp, hvp_torch) < 1e-9
    X = A.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
    (hv,) = torch.autograd.grad((g * D).sum(), X)
    assert rel_err(hv, hvp_torch) < 1e-9
    assert rel_err(torch.func.grad(loss)(A), torch.func.grad(loss_torch)(A)) < 1e-10


def test_the_setting_and_bad_values():
    A = hermitian(4, F64, seed=8).requires_grad_()
    (h,) = torch.autograd.grad(ps.eigvalsh(A).pow(3).sum(), A)
    with ps.defaults(gradient="triangle"):
        (t,) = torch.autograd.grad(ps.eigvalsh(A).pow(3).sum(), A)
        (k,) = torch.autograd.grad(ps.eigvalsh(A, gradient="hermitian").pow(3).sum(), A)
    assert rel_err(t, fold(h, "L")) < 1e-12 and torch.equal(k, h)
    assert ps.get_defaults()["gradient"] == "hermitian"
    with pytest.raises(ps.InputError, match="gradient must be 'hermitian'"):
        ps.eigh(A, gradient="symmetric")
    with pytest.raises(ps.InputError, match="gradient must be 'hermitian'"):
        ps.set_defaults(gradient=True)


def test_non_finite_entries_outside_the_triangle():
    # the other triangle may hold anything: no NaN reaches the gradient
    A = hermitian(4, F64, seed=9)
    A[0, 3] = float("nan")
    A.requires_grad_()
    (g,) = torch.autograd.grad(ps.eigvalsh(A).pow(3).sum(), A)
    assert torch.isfinite(g).all() and torch.equal(g, g.mT)


@needs_julia
@pytest.mark.parametrize("case", list(CASES))
def test_real_julia_default_is_torchs_gradient(case):
    ours, theirs = CASES[case]
    A = hermitian(5, C128, seed=10)
    W = _weights(5, C128)
    X = A.clone().requires_grad_()
    (expected,) = torch.autograd.grad(theirs(X, W), X)
    X = A.clone().requires_grad_()
    (got,) = torch.autograd.grad(ours(X, W, backend="julia"), X)
    assert rel_err(got, expected) < 1e-10
