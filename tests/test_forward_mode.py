"""Forward-mode AD (the ``jvp`` of every non-top-k autograd Function):
directional derivatives against central finite differences at generic and
degenerate spectra, on outputs that are differentiable there (complete-cluster
projectors, the polar factor, symmetric functions of the spectrum, spectral
functions); the transpose relation with the pullbacks (jacfwd == jacrev, and
<jvp, W> == <dA, vjp(W)> for complex input); torch.autograd.forward_ad dual
tensors; jvp under vmap; forward-over-reverse Hessians."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _spectra import (
    fd_directional,
    fd_jacobian,
    hermitian_with_spectrum,
    inner,
    matrix_with_spectrum,
    random_like,
    rel_err,
)
from torch.func import hessian, jacfwd, jacrev, jvp, vjp, vmap

import pyspectral as ps
from pyspectral import _linalg  # torch's functions as pyspectral binds them

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

DTYPES = [torch.float64, torch.complex128]
TOL = 1e-7  # relative, against a fourth-order stencil with h = 1e-4


def check_jvp(f, A, seed: int = 3):
    dA = random_like(A, seed=seed)
    value, tangent = jvp(f, (A,), (dA,))
    assert torch.isfinite(tangent).all()
    assert rel_err(value, f(A)) < 1e-14
    assert rel_err(tangent, fd_directional(f, A, dA)) < TOL


def cluster_projector(U, idx):
    Uc = U[..., idx]
    return Uc @ Uc.mH


# ------------------------------------------------------------------ svd


SVD_SPECTRA = {
    "generic": ((5.0, 3.0, 2.0, 1.0), [slice(0, 1), slice(1, 2), slice(2, 4)]),
    "degenerate": ((5.0, 2.0, 2.0, 1.0), [slice(0, 1), slice(1, 3), slice(3, 4)]),
    "triple": ((3.0, 3.0, 3.0, 0.5), [slice(0, 3), slice(3, 4)]),
}


def svd_invariants(clusters, full_matrices=False):
    """Gauge-invariant outputs of ``svd``: the polar factor, the projectors
    onto complete clusters (both sides), symmetric functions of ``S``, and
    with ``full_matrices`` the projectors onto the complements."""

    def f(A):
        U, S, Vh = ps.svd(A, full_matrices=full_matrices)
        k = S.shape[-1]
        Uk, Vk = U[..., :k], Vh[..., :k, :].mH
        parts = [(Uk @ Vk.mH).flatten(), (S**3).sum(-1, keepdim=True), S.sum(-1, True)]
        for c in clusters:
            parts += [cluster_projector(Uk, c).flatten()]
            parts += [cluster_projector(Vk, c).flatten()]
        if full_matrices:
            parts += [cluster_projector(U, slice(k, None)).flatten()]
            parts += [cluster_projector(Vh.mH, slice(k, None)).flatten()]
        return torch.cat([p.to(A.dtype) for p in parts])

    return f


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (6, 4), (4, 7)])
@pytest.mark.parametrize("case", sorted(SVD_SPECTRA))
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_jvp_matches_finite_differences(dtype, shape, case, full_matrices):
    s, clusters = SVD_SPECTRA[case]
    A = matrix_with_spectrum(s, *shape, dtype=dtype, seed=1)
    check_jvp(svd_invariants(clusters, full_matrices), A)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (6, 4), (4, 7)])
def test_svd_jvp_generic_all_outputs(dtype, shape):
    """At a generic spectrum each singular triplet is differentiable up to its
    sign/phase, so each rank-one term ``s_i u_i v_i^H`` is; and ``S``."""
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), *shape, dtype=dtype, seed=2)

    def terms(A):
        U, S, Vh = ps.svd(A, full_matrices=False)
        rank_one = U.unsqueeze(-1) * Vh.unsqueeze(-3)  # (m, k, n): u_i v_i^H
        weighted = rank_one * S[:, None].to(A.dtype)
        return torch.cat([S.to(A.dtype), weighted.flatten()])

    check_jvp(terms, A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svdvals_jvp(dtype):
    A = matrix_with_spectrum((4.0, 2.0, 1.0), 5, 3, dtype=dtype, seed=3)
    check_jvp(ps.svdvals, A)
    Ad = matrix_with_spectrum((4.0, 2.0, 2.0), 5, 3, dtype=dtype, seed=3)
    check_jvp(lambda A: ps.svdvals(A).pow(2).sum(-1), Ad)


# ------------------------------------------------------------------ eigh

EIGH_SPECTRA = {
    "generic": ((-1.0, 0.5, 2.0, 3.0, 4.5), [slice(0, 1), slice(1, 2), slice(2, 5)]),
    "degenerate": ((0.25, 1.0, 1.0, 4.0, 4.0), [slice(0, 1), slice(1, 3), slice(3, 5)]),
}


def eigh_invariants(clusters, uplo):
    """Differentiable outputs of ``eigh`` at any spectrum: symmetric functions
    of ``w`` and the projectors onto complete clusters (not ``V diag(w) V^H``
    term by term: the split of a cluster's tangent into eigenvalues is not
    differentiable; ``matrix_function`` is exact for it)."""

    def f(A):
        w, V = ps.eigh(A, uplo)
        parts = [(w**3).sum(-1, keepdim=True), w.sum(-1, keepdim=True)]
        parts += [cluster_projector(V, c).flatten() for c in clusters]
        return torch.cat([p.to(A.dtype) for p in parts])

    return f


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("case", sorted(EIGH_SPECTRA))
def test_eigh_jvp_matches_finite_differences(dtype, uplo, case):
    """The tangent is not Hermitian: the finite difference of A + t dA sees
    only the ``uplo`` triangle of dA, as the pushforward does."""
    w, clusters = EIGH_SPECTRA[case]
    A = hermitian_with_spectrum(w, dtype=dtype, seed=4)
    check_jvp(eigh_invariants(clusters, uplo), A)
    check_jvp(lambda A: ps.eigvalsh(A, uplo).pow(3).sum(-1), A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigvalsh_jvp_generic(dtype):
    A = hermitian_with_spectrum((-1.0, 0.5, 2.0, 3.0), dtype=dtype, seed=5)
    check_jvp(ps.eigvalsh, A)


# ----------------------------------------------------- spectral functions

MATFUNS = ["sqrt", "exp", "log", "invsqrt", ("pow", 3), ("pow", 1.5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", MATFUNS, ids=str)
@pytest.mark.parametrize("w", [(0.5, 1.0, 2.0, 3.0), (0.25, 1.0, 1.0, 4.0, 4.0)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_matrix_function_jvp(dtype, f, w, uplo):
    A = hermitian_with_spectrum(w, dtype=dtype, seed=6)
    # (tangents in every direction: one triangle read)
    check_jvp(lambda A: ps.matrix_function(A, f, uplo, check_hermitian=False), A)


SVDFUNS = ["polar", "normalize", ("pow", 2), ("pow", 0.5), ("threshold", 1.5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", SVDFUNS, ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (6, 4), (4, 7)])
@pytest.mark.parametrize("s", [(5.0, 3.0, 2.0, 1.0), (5.0, 2.0, 2.0, 0.5)])
def test_svd_function_jvp(dtype, f, shape, s):
    A = matrix_with_spectrum(s, *shape, dtype=dtype, seed=7)
    check_jvp(lambda A: ps.svd_function(A, f), A)


def test_svd_function_user_pair_and_truncate_jvp():
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), 5, 4, seed=8)
    pair = (lambda s: torch.sin(s), lambda s: torch.cos(s))
    check_jvp(lambda A: ps.svd_function(A, pair), A)
    check_jvp(lambda A: ps.svd_function(A, ("truncate", 2)), A)


def test_matrix_function_jvp_sqrt_at_zero_is_inf_not_nan():
    """f' infinite at an exact zero eigenvalue: +-inf where f[0, 0] reaches,
    finite elsewhere, never NaN (as the pullback)."""
    A = torch.diag(torch.tensor([0.0, 0.5, 2.0, 3.0], dtype=torch.float64))
    dA = torch.eye(4, dtype=torch.float64)
    _, t = jvp(lambda A: ps.matrix_function(A, "sqrt"), (A,), (dA,))
    assert not torch.isnan(t).any()
    assert torch.isinf(t[0, 0]) and torch.isfinite(t[1:, 1:]).all()


# ----------------------------------------- the transpose of the pullbacks


def _real_cases():
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), 5, 4, seed=9)
    H = hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0), seed=9)
    Ad = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 4, 6, seed=9)
    Hd = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), seed=9)
    return [
        ("svd_degenerate", Ad, svd_invariants(SVD_SPECTRA["degenerate"][1], True)),
        ("eigh_degenerate", Hd, eigh_invariants(EIGH_SPECTRA["degenerate"][1], "U")),
        ("svd_function_degenerate", Ad, lambda A: ps.svd_function(A, ("pow", 3))),
        ("matrix_function_degenerate", Hd, lambda A: ps.matrix_function(A, "exp")),
        ("svd", A, svd_invariants(SVD_SPECTRA["generic"][1])),
        ("svd_full", A, svd_invariants(SVD_SPECTRA["generic"][1], True)),
        ("svd_function", A, lambda A: ps.svd_function(A, ("pow", 2))),
        ("eigh", H, eigh_invariants(EIGH_SPECTRA["generic"][1][:1], "L")),
        ("matrix_function", H, lambda A: ps.matrix_function(A, "sqrt", "U")),
    ]


@pytest.mark.parametrize("name,A,f", _real_cases(), ids=[c[0] for c in _real_cases()])
def test_jacfwd_equals_jacrev(name, A, f):
    assert rel_err(jacfwd(f)(A), jacrev(f)(A)) < 1e-12


@pytest.mark.parametrize(
    "f",
    [
        # gauge dependent (gauge="ignore"): the conventions must agree
        lambda A: ps.svd(A, gauge="ignore", full_matrices=False).U,
        lambda A: ps.svd(A, full_matrices=True, gauge="ignore").U,
        lambda A: ps.svd(A.mT, full_matrices=True, gauge="ignore").Vh,
        lambda A: ps.svd_function(A, ("pow", 0.5)),
        lambda A: ps.eigh(A[:4, :4], gauge="ignore").eigenvectors,
        lambda A: ps.matrix_function(A[:4, :4], "exp", check_hermitian=False),
        # the Lorentzian-broadened inverse, both sides
        lambda A: ps.svd(A, broadening=0.5, gauge="ignore", full_matrices=False).Vh,
        lambda A: ps.eigh(A[:4, :4], "U", broadening=0.5, gauge="ignore").eigenvectors,
    ],
)
def test_jvp_is_transpose_of_vjp_complex(f):
    """Re <jvp(dA), W> == Re <dA, vjp(W)> for complex input (jacfwd/jacrev do
    not take complex functions), also for basis-dependent outputs: the
    pushforward and the pullback use the same gauge conventions."""
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), 5, 4, dtype=torch.complex128)
    dA = random_like(A, seed=10)
    Y, dY = jvp(f, (A,), (dA,))
    W = random_like(Y, seed=11)
    _, pullback = vjp(f, A)
    (gA,) = pullback(W)
    lhs, rhs = inner(dY, W), inner(dA, gA)
    assert abs(float(lhs - rhs)) < 1e-12 * max(1.0, abs(float(rhs)))


# ---------------------------------------------------- other entry points


def test_forward_ad_dual_tensors():
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), 5, 4, seed=12)
    H = hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0), seed=12)
    for f, X in [
        (svd_invariants(SVD_SPECTRA["generic"][1]), A),
        (lambda A: ps.svd_function(A, "polar"), A),
        (eigh_invariants(EIGH_SPECTRA["generic"][1][:1], "L"), H),
        (lambda A: ps.matrix_function(A, "log"), H),
    ]:
        dX = random_like(X, seed=13)
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(f(fwAD.make_dual(X, dX))).tangent
        assert rel_err(tangent, jvp(f, (X,), (dX,))[1]) < 1e-13


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigvalsh_dual_tensor_reads_one_triangle(dtype):
    """A dual tensor (no requires_grad) must not take torch's eigvalsh, whose
    tangent reads both triangles; gradcheck's forward-AD check, as torch's
    OpInfo tests run it."""
    A = hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0), dtype=dtype, seed=17)
    dA = random_like(A, seed=18)
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(ps.eigvalsh(fwAD.make_dual(A, dA), "U")).tangent
    assert rel_err(tangent, fd_directional(lambda A: ps.eigvalsh(A, "U"), A, dA)) < TOL
    X = A.clone().requires_grad_()
    for uplo in "LU":
        f = lambda X, uplo=uplo: ps.eigvalsh(X, uplo)  # noqa: E731
        assert torch.autograd.gradcheck(f, (X,), check_forward_ad=True)


def test_jvp_under_vmap():
    batch = torch.stack(
        [matrix_with_spectrum((4.0, 2.0, 1.0), 4, 3, seed=s) for s in range(3)]
    )
    tangents = random_like(batch, seed=14)
    hbatch = torch.stack(
        [hermitian_with_spectrum((0.5, 1.0, 2.0), seed=s) for s in range(3)]
    )
    for f, X in [
        (lambda A: ps.svd_function(A, ("pow", 2)), batch),
        (
            lambda A: (lambda U, S, Vh: U @ Vh + S.sum())(
                *ps.svd(A, full_matrices=False)
            ),
            batch,
        ),
        (lambda A: ps.matrix_function(A, "sqrt"), hbatch),
        (lambda A: ps.eigvalsh(A), hbatch),
    ]:
        dX = random_like(X, seed=15)
        batched = vmap(lambda x, t, f=f: jvp(f, (x,), (t,))[1])(X, dX)
        for i in range(X.shape[0]):
            assert rel_err(batched[i], jvp(f, (X[i],), (dX[i],))[1]) < 1e-13
    # and a batched input straight through jvp (batch dims of the Function)
    f = lambda A: ps.svd_function(A, "polar")  # noqa: E731
    _, t = jvp(f, (batch,), (tangents,))
    assert rel_err(t, fd_directional(f, batch, tangents)) < TOL


@pytest.mark.parametrize(
    "loss,kind",
    [
        (lambda A: (ps.svd(A).S ** 3).sum(), "svd"),
        (
            lambda A: (lambda U, S, Vh: inner(U @ Vh, torch.ones_like(A)))(
                *ps.svd(A, full_matrices=False)
            ),
            "svd",
        ),
        (lambda A: inner(ps.svd_function(A, ("pow", 2)), torch.ones_like(A)), "svd"),
        (lambda A: (ps.eigh(A).eigenvalues ** 3).sum(), "eigh"),
        (lambda A: ps.matrix_function(A, "sqrt").diagonal().sum(), "eigh"),
        (lambda A: ps.eigvalsh(A, "U").exp().sum(), "eigh"),
    ],
)
def test_hessian_forward_over_reverse(loss, kind):
    """torch.func.hessian (jacfwd of jacrev) at a generic spectrum equals
    jacrev of jacrev (the double backward)."""
    if kind == "svd":
        A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), 5, 4, seed=16)
    else:
        A = hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0), seed=16)
    assert rel_err(hessian(loss)(A), jacrev(jacrev(loss))(A)) < 1e-10


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 3)])
def test_jvp_of_empty_inputs(shape):
    """Empty inputs give tangents of the primal shapes (the square factors of a
    full SVD of an empty matrix are not empty: their tangent is 0), as torch."""
    A = torch.zeros(*shape, dtype=torch.float64)
    fns = [
        lambda A: ps.svd(A, full_matrices=False),
        lambda A: ps.svd(A, full_matrices=True),
        ps.svdvals,
        lambda A: ps.svd_function(A, ("pow", 2)),
        lambda A: ps.svd_function(A, "normalize"),
    ]
    if shape[-1] == shape[-2]:
        fns += [ps.eigh, ps.eigvalsh, lambda A: ps.matrix_function(A, "exp")]
    for f in fns:
        primal, tangent = jvp(f, (A,), (A,))
        for p, t in zip(
            torch.utils._pytree.tree_leaves(primal),
            torch.utils._pytree.tree_leaves(tangent),
        ):
            assert t.shape == p.shape and not t.any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradcheck_forward_ad(dtype):
    """torch's own forward-AD check (dual tensors, numerical Jacobian), with
    its legacy-vmap batched tangents. Not on complex outputs that slice the
    factors (``U[:, k:]``): torch.linalg.svd/eigh fail that batched check
    with the same internal layout assert (a torch limitation)."""
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), 5, 4, dtype=dtype, seed=19)
    H = hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0), dtype=dtype, seed=19)
    cases = [
        (lambda A: (lambda U, S, Vh: U @ Vh)(*ps.svd(A, full_matrices=False)), A),
        (lambda A: ps.svd(A, full_matrices=True).S, A.mT),
        (ps.svdvals, A),
        (lambda A: ps.svd_function(A, ("pow", 0.5)), A),
        (lambda A: ps.svd_function(A, "normalize"), A.mT),
        (lambda A: ps.eigh(A, "U").eigenvalues, H),
        # (gradcheck perturbs single entries: one triangle read, as eigh)
        (lambda A: ps.matrix_function(A, "log", check_hermitian=False), H),
        (lambda A: ps.matrix_function(A, "exp", "U", check_hermitian=False), H),
    ]
    if not dtype.is_complex:
        cases += [
            (
                lambda A: (lambda U, _, __: U[:, 4:] @ U[:, 4:].mT)(
                    *ps.svd(A, full_matrices=True)
                ),
                A,
            ),
            (lambda A: (lambda _, V: V[:, 2:] @ V[:, 2:].mT)(*ps.eigh(A)), H),
        ]
    for f, X in cases:
        X = X.detach().clone().requires_grad_()
        assert torch.autograd.gradcheck(
            f,
            (X,),
            check_forward_ad=True,
            check_backward_ad=False,
            check_batched_forward_grad=True,
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_tangents_laid_out_as_column_major_factors(dtype, monkeypatch):
    """cuSOLVER returns some factors column-major, complex ones as lazy
    conjugates (``V.mH``); forward AD then needs each tangent in its primal's
    layout, conjugate bit included, or a view of the output (``Vh.mH``, a
    slice, a product) trips torch's internal assert. Here torch.linalg's
    factors are made so on the CPU."""
    svd, eigh = torch.linalg.svd, torch.linalg.eigh

    def like_cusolver(t):  # column-major, complex ones with a conjugate bit
        if t.dim() < 2:
            return t
        B = t.conj().resolve_conj().mT.contiguous().mT
        return B.conj() if t.is_complex() else B

    def column_major(*ts):
        return tuple(map(like_cusolver, ts))

    monkeypatch.setattr(_linalg, "svd", lambda *a, **k: column_major(*svd(*a, **k)))
    monkeypatch.setattr(_linalg, "eigh", lambda *a, **k: column_major(*eigh(*a, **k)))
    A = random_like(torch.empty(5, 4, dtype=dtype), seed=1)
    dA = random_like(A, seed=2)
    H, dH = A.mH @ A, dA.mH @ A + A.mH @ dA
    with fwAD.dual_level():
        U, S, Vh = ps.svd(fwAD.make_dual(A, dA), full_matrices=False)
        assert not Vh.is_contiguous()  # the layout under test
        assert Vh.is_conj() == dtype.is_complex
        P = fwAD.unpack_dual(U[:, :2] @ Vh.mH[:2]).tangent
        w, V = ps.eigh(fwAD.make_dual(H, dH))
        Q = fwAD.unpack_dual(V[:, -2:] @ V.mH[-2:]).tangent
    U0, S0, Vh0 = svd(A, full_matrices=False)
    _, (dU, dS, dVh) = jvp(lambda X: tuple(ps.svd(X, full_matrices=False)), (A,), (dA,))
    assert torch.allclose(P, dU[:, :2] @ Vh0.mH[:2] + U0[:, :2] @ dVh.mH[:2])
    w0, V0 = eigh(H)
    _, (dw, dV) = jvp(lambda X: tuple(ps.eigh(X)), (H,), (dH,))
    assert torch.allclose(Q, dV[:, -2:] @ V0.mH[-2:] + V0[:, -2:] @ dV.mH[-2:])


# ------------------------------------------- forward mode at a degenerate cluster
#
# A tangent that splits an exactly degenerate cluster selects the basis the
# eigen/singular vectors follow: the forward that sees it returns that basis,
# and its tangents are the branch's (docs/guide/forward-mode.md). So what reads
# the values through the vectors (V diag(w) V^H rebuilt, U diag(S) Vh, U S^2 Vh)
# is exact, each value's tangent is its one-sided derivative, each vector's that
# of the branch through the basis returned; and nothing warns.


def one_sided(f, A, dA, h=1e-4, f0=None):
    """``d/dt f(A + t dA)`` at ``0+`` by the second-order one-sided stencil
    (``f0``: the limit ``f(A + 0+ dA)``, where ``f`` jumps at 0)."""
    with torch.no_grad():
        f0 = f(A) if f0 is None else f0
        f1, f2 = f(A + h * dA), f(A + 2 * h * dA)
    return (-3 * f0 + 4 * f1 - f2) / (2 * h)


def eigh_rebuilt(A, uplo="L"):
    w, V = ps.eigh(A, uplo)
    return torch.cat([((V * w.to(V.dtype)) @ V.mH).flatten(),
                      ((V * w.exp().to(V.dtype)) @ V.mH).flatten()])  # fmt: skip


def svd_rebuilt(A, full_matrices=False):
    U, S, Vh = ps.svd(A, full_matrices=full_matrices)
    k = S.shape[-1]
    U, Vh = U[..., :k], Vh[..., :k, :]
    return torch.cat([((U * S.to(U.dtype)) @ Vh).flatten(),
                      ((U * (S**2).to(U.dtype)) @ Vh).flatten()])  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("gradient", ["triangle", "hermitian"])
def test_eigh_jvp_of_v_f_w_vh_at_a_cluster_is_exact(dtype, uplo, gradient):
    """The issue's case (44 % off, silent, before): V diag(w) V^H term by term
    at w = (.25, 1, 1, 4, 4) along a tangent that splits both pairs; also
    V exp(w) V^H, through dual tensors and jacfwd. (Under the Hermitian
    convention a tangent acts through its Hermitian part: the finite
    difference of the triangle read sees the same for a Hermitian tangent.)"""
    A = hermitian_with_spectrum(EIGH_SPECTRA["degenerate"][0], dtype=dtype, seed=4)
    dA = random_like(A, seed=5)
    if gradient == "hermitian":
        dA = (dA + dA.mH) / 2
    f = lambda A: eigh_rebuilt(A, uplo)  # noqa: E731
    with ps.defaults(gradient=gradient):
        _, t = jvp(f, (A,), (dA,))
        assert rel_err(t, fd_directional(f, A, dA)) < TOL
        with fwAD.dual_level():
            t = fwAD.unpack_dual(f(fwAD.make_dual(A, dA))).tangent
        assert rel_err(t, fd_directional(f, A, dA)) < TOL
        if gradient == "triangle" and not dtype.is_complex:
            g = lambda A: eigh_rebuilt(A, uplo)[:25]  # noqa: E731
            assert rel_err(jacfwd(g)(A), fd_jacobian(g, A)) < TOL


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (6, 4), (4, 7)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_jvp_of_u_f_s_vh_at_a_cluster_is_exact(dtype, shape, full_matrices):
    """U diag(S) Vh and U diag(S**2) Vh term by term at a pair and a triple."""
    for case in ("degenerate", "triple"):
        A = matrix_with_spectrum(SVD_SPECTRA[case][0], *shape, dtype=dtype, seed=1)
        check_jvp(lambda A: svd_rebuilt(A, full_matrices), A)
    if not dtype.is_complex:
        f = lambda A: svd_rebuilt(A)  # noqa: E731
        assert rel_err(jacfwd(f)(A), fd_jacobian(f, A)) < TOL


@pytest.mark.parametrize("dtype", DTYPES)
def test_jvp_values_inside_a_split_cluster_are_one_sided_derivatives(dtype):
    """The values of a cluster split by the tangent are not differentiable
    (sorted, they cross at t = 0); their tangents are the derivatives from the
    side the tangent points to, in the order of the values."""
    H = hermitian_with_spectrum((0.5, 2.0, 2.0, 2.0, 3.0), dtype=dtype, seed=7)
    dH = random_like(H, seed=8)
    _, dw = jvp(lambda A: ps.eigvalsh(A), (H,), (dH,))
    assert rel_err(dw, one_sided(lambda A: ps.eigvalsh(A), H, dH)) < 1e-6
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 2.0), 6, 4, dtype=dtype, seed=7)
    dA = random_like(A, seed=8)
    _, dS = jvp(ps.svdvals, (A,), (dA,))
    assert rel_err(dS, one_sided(ps.svdvals, A, dA)) < 1e-6


def _aligned_columns(X, X0):
    """``X`` with each column's phase turned to that of ``X0``'s (the
    eigenvectors of a split cluster are determined up to a phase)."""
    c = (X0.conj() * X).sum(-2, keepdim=True)
    return X * (c.conj() / c.abs())


@pytest.mark.parametrize("dtype", DTYPES)
def test_jvp_vectors_inside_a_split_cluster_follow_the_branch(dtype):
    """The basis returned with the tangents is the one the tangent splits the
    cluster into, and the tangents of its vectors are the branch's: the
    one-sided derivative of the eigenvectors of A + t dA (phases aligned),
    the rotation inside the cluster (second order) included."""
    H = hermitian_with_spectrum((0.5, 2.0, 2.0, 2.0, 3.0), dtype=dtype, seed=9)
    dH = random_like(H, seed=10)
    (w, V), (dw, dV) = jvp(lambda A: tuple(ps.eigh(A)), (H,), (dH,))
    assert rel_err((V * w.to(V.dtype)) @ V.mH, H) < 1e-14
    vectors = lambda A: _aligned_columns(ps.eigh(A).eigenvectors, V)  # noqa: E731
    # the branch's basis (to the splitting's resolution, eps / 1e-8)
    assert rel_err(vectors(H + 1e-8 * dH), V) < 1e-6
    assert rel_err(dV, one_sided(vectors, H, dH, f0=V)) < 1e-6
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 2.0), 6, 4, dtype=dtype, seed=9)
    dA = random_like(A, seed=10)
    (U, S, Vh), (dU, _, dVh) = jvp(
        lambda A: tuple(ps.svd(A, full_matrices=False)), (A,), (dA,)
    )
    assert rel_err((U * S.to(U.dtype)) @ Vh, A) < 1e-14

    def factors(A):
        # (u_i, v_i) share a phase; the tangents split its rate equally
        # between them (Im u^H du = -Im v^H dv), so the pair is aligned by
        # the phase that turns u_i^H u1_i and v_i^H v1_i to opposite angles
        U1, _, Vh1 = ps.svd(A, full_matrices=False)
        a, b = (U.conj() * U1).sum(-2), (Vh.conj() * Vh1).sum(-1).conj()
        phase = a.conj() / a.abs()
        phase = phase * torch.exp(-0.5j * torch.angle(b * phase)).to(phase.dtype)
        U1, Vh1 = U1 * phase, Vh1 * phase.conj()[:, None]
        return torch.cat([U1.flatten(), Vh1.flatten()])

    expected = one_sided(factors, A, dA, f0=torch.cat([U.flatten(), Vh.flatten()]))
    assert rel_err(torch.cat([dU.flatten(), dVh.flatten()]), expected) < 1e-6


def test_jvp_at_a_cluster_is_quiet_for_invariant_outputs():
    """The polar factor, the cluster projectors, symmetric functions and the
    spectral functions along a splitting tangent: exact (check_jvp) and no
    warning (the suite runs with GaugeWarning as an error), also under
    jacfwd."""
    A = matrix_with_spectrum(SVD_SPECTRA["degenerate"][0], 5, 4, seed=11)
    f = svd_invariants(SVD_SPECTRA["degenerate"][1])
    check_jvp(f, A)
    assert rel_err(jacfwd(f)(A), fd_jacobian(f, A)) < TOL
    H = hermitian_with_spectrum(EIGH_SPECTRA["degenerate"][0], seed=11)
    check_jvp(eigh_invariants(EIGH_SPECTRA["degenerate"][1], "L"), H)


@pytest.mark.parametrize("dtype", DTYPES)
def test_jvp_at_a_near_degenerate_split_cluster_warns(dtype):
    """A cluster degenerate within degeneracy_atol but not to rounding (gap
    1e-13 relative) cannot be rotated (that would change A by the gap): a
    tangent that splits it warns, naming matrix_function / svd_function, and
    the route named is exact on the same case."""
    w = (0.25, 1.0, 1.0 + 1e-13, 4.0, 5.0)
    H = hermitian_with_spectrum(w, dtype=dtype, seed=12)
    dH = random_like(H, seed=13)
    with pytest.warns(ps.GaugeWarning, match=r"eigh: forward mode.*matrix_function"):
        jvp(eigh_rebuilt, (H,), (dH,))
    check_jvp(lambda A: ps.matrix_function(A, ("pow", 1), check_hermitian=False), H)
    A = matrix_with_spectrum((5.0, 2.0, 2.0 + 1e-13, 1.0), 5, 4, dtype=dtype, seed=12)
    dA = random_like(A, seed=13)
    with pytest.warns(ps.GaugeWarning, match=r"svd: forward mode.*svd_function"):
        jvp(svd_rebuilt, (A,), (dA,))
    check_jvp(lambda A: ps.svd_function(A, ("pow", 1)), A)


def test_jvp_along_a_tangent_that_keeps_a_cluster_is_unchanged():
    """A tangent that keeps every cluster degenerate (here dA = A) rotates
    nothing: the primal is LAPACK's, and the tangents are exact."""
    A = matrix_with_spectrum(SVD_SPECTRA["triple"][0], 5, 4, seed=14)
    (U, _, _), _ = jvp(lambda A: tuple(ps.svd(A, full_matrices=False)), (A,), (A,))
    assert torch.equal(U, torch.linalg.svd(A, full_matrices=False).U)
    check_jvp(svd_rebuilt, A)
