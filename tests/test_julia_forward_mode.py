"""Forward-mode AD on both backends: the ``jvp`` of the Julia-backend autograd
Functions (``_SVDJulia``, ``_SVDFunctionJulia``, ``_EighJulia``,
``_MatrixFunctionJulia``), which push the tangent through Julia's pushforwards
(``*_pushforward_batched`` in ``glue.jl``, the transposes of PySpectral.jl's
pullbacks), checked

* against central finite differences and against the native backend, on both
  backends (the ``backend`` fixture: native, or Julia through the stand-in),
  at generic and degenerate spectra, through dual tensors
  (``torch.autograd.forward_ad``: ``torch.func`` runs on the native backend);
* exactly against the native pushforward applied to the Julia backend's own
  factors (every role swap of the bridge: transposes, conjugated
  eigenvectors, the swapped triangle), with the options reaching Julia;
* for the bridge's claims: one Julia call per batch, the tangent read without
  a copy, the results wrapping Julia's memory, the forward's handles reused;
  a tangent that will itself be differentiated runs natively;
* and, where Julia is installed, against the real Julia package (skipped here
  with the reason).

Top-k on the Julia backend pushes forward through Julia's truncated
pushforwards (the transposes of its truncated pullbacks), checked against the
full path's pushforward in the returned basis, against the native backend,
as the transpose of the reverse mode (a forward-mode Jacobian against
``jacrev``), for the bridge's claims (the stand-in's records; on real Julia,
the spy of tests/_spy.py on the bridge's one entry), its dense fallback and
warning, and its first-order limit (as natively).
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from pathlib import Path

import _spy
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _julia import needs_julia
from _spectra import (
    fd_directional,
    hermitian_with_spectrum,
    matrix_with_spectrum,
    randn,
    random_like,
    rel_err,
)

import pyspectral as ps
from pyspectral import topk as TK
from pyspectral._settings import Options, options
from pyspectral.julia import _bridge, _eigh, _events, _svd
from pyspectral.julia._bridge import GLUE_FUNCTIONS
from pyspectral.pullbacks.eigh import eigh_pushforward
from pyspectral.pullbacks.svd import svd_pushforward

# The formulas are checked against finite differences of the entries the
# forward reads: the triangle-true gradient (torch's Hermitian convention,
# the default, is its Hermitian part: tests/test_gradient_convention.py).
pytestmark = pytest.mark.usefixtures("triangle_gradient")

DTYPES = [torch.float64, torch.complex128]
ALL_DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
TOL = 1e-7  # relative, against a fourth-order stencil with h = 1e-4
CUBE = (lambda s: s**3 + s, lambda s: 3 * s**2 + 1)
SIN = (torch.sin, torch.cos)


def tol(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-11


def dual(f, A, dA):
    """``(f(A), d/dt f(A + t dA))`` through a dual tensor; ``f`` returns a
    tensor or a tuple of tensors."""
    with fwAD.dual_level():
        out = f(fwAD.make_dual(A, dA))
        parts = [
            fwAD.unpack_dual(t) for t in (out if isinstance(out, tuple) else (out,))
        ]
    primal = tuple(p.primal for p in parts)
    tangent = tuple(p.tangent for p in parts)
    return (primal, tangent) if isinstance(out, tuple) else (primal[0], tangent[0])


def check_against_fd(f, A, seed: int = 3):
    dA = random_like(A, seed=seed)
    value, tangent = dual(f, A, dA)
    assert torch.isfinite(tangent).all()
    assert rel_err(value, f(A)) < 1e-14
    assert rel_err(tangent, fd_directional(f, A, dA)) < TOL
    return tangent


def assert_julia_pushed(backend: str, rotated: bool = False) -> None:
    """On the Julia backend, the tangents came from Julia's pushforwards; or,
    ``rotated`` (a tangent that splits an exactly degenerate cluster), from
    the native pushforward (the same formulas) on the basis the forward
    rotated to follow the tangent: new tensors, not Julia's arrays."""
    if backend == "julia":
        pushed = [c for c in _bridge.runtime.calls if "pushforward" in c.name]
        assert not pushed if rotated else pushed


def projector(U, idx):
    return U[..., idx] @ U[..., idx].mH


# --------------------------------------- finite differences, both backends

SVD_SPECTRA = {
    "generic": ((5.0, 3.0, 2.0, 1.0), [slice(0, 1), slice(1, 2), slice(2, 4)]),
    "degenerate": ((5.0, 2.0, 2.0, 1.0), [slice(0, 1), slice(1, 3), slice(3, 4)]),
}


def svd_invariants(backend, clusters, full_matrices=False):
    """Outputs of ``svd`` differentiable at any spectrum: the polar factor,
    complete-cluster projectors, symmetric functions of ``S`` and, with
    ``full_matrices``, the projector onto the complement of ``U``."""

    def f(A):
        U, S, Vh = ps.svd(A, full_matrices=full_matrices, backend=backend)
        k = S.shape[-1]
        Uk, Vk = U[..., :k], Vh[..., :k, :].mH
        parts = [(Uk @ Vk.mH).flatten(), (S**3).sum(-1, keepdim=True)]
        for c in clusters:
            parts += [projector(Uk, c).flatten(), projector(Vk, c).flatten()]
        if full_matrices:
            parts += [projector(U, slice(k, None)).flatten()]
        return torch.cat([p.to(A.dtype) for p in parts])

    return f


@pytest.mark.parametrize("full_matrices", [False, True])
@pytest.mark.parametrize("case", sorted(SVD_SPECTRA))
@pytest.mark.parametrize("shape", [(4, 4), (6, 4), (4, 7)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_forward_ad(backend, dtype, shape, case, full_matrices):
    s, clusters = SVD_SPECTRA[case]
    A = matrix_with_spectrum(s, *shape, dtype=dtype, seed=1)
    check_against_fd(svd_invariants(backend, clusters, full_matrices), A)
    # each singular value is differentiable only outside a cluster
    sym = (lambda S: S) if case == "generic" else (lambda S: S.pow(2).sum(-1))
    check_against_fd(lambda X: sym(ps.svdvals(X, backend=backend)), A)
    assert_julia_pushed(backend, rotated=case != "generic")


EIGH_SPECTRA = {
    "generic": ((-1.0, 0.5, 2.0, 3.0, 4.5), [slice(0, 1), slice(1, 2), slice(2, 5)]),
    "degenerate": ((0.25, 1.0, 1.0, 4.0, 4.0), [slice(0, 1), slice(1, 3), slice(3, 5)]),
}


@pytest.mark.parametrize("case", sorted(EIGH_SPECTRA))
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_forward_ad(backend, dtype, uplo, case):
    """The tangent is not Hermitian: only its ``uplo`` triangle is read."""
    w, clusters = EIGH_SPECTRA[case]
    A = hermitian_with_spectrum(w, dtype=dtype, seed=4)

    def invariants(X):
        ev, V = ps.eigh(X, uplo, backend=backend)
        parts = [(ev**3).sum(-1, keepdim=True)]
        parts += [projector(V, c).flatten() for c in clusters]
        return torch.cat([p.to(X.dtype) for p in parts])

    check_against_fd(invariants, A)
    sym = (lambda w: w) if case == "generic" else (lambda w: w.exp().sum(-1))
    check_against_fd(lambda X: sym(ps.eigvalsh(X, uplo, backend=backend)), A)
    assert_julia_pushed(backend, rotated=case != "generic")


SVDFUNS = ["polar", "normalize", ("pow", 2), ("pow", 0.5), ("threshold", 1.5), CUBE]


@pytest.mark.parametrize("f", SVDFUNS, ids=str)
@pytest.mark.parametrize("s", [(5.0, 3.0, 2.0, 1.0), (5.0, 2.0, 2.0, 0.5)], ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (6, 4), (4, 7)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_function_forward_ad(backend, dtype, shape, s, f):
    """Exact at degenerate spectra; the same tangent as the native backend."""
    A = matrix_with_spectrum(s, *shape, dtype=dtype, seed=7)
    tangent = check_against_fd(lambda X: ps.svd_function(X, f, backend=backend), A)
    _, native = dual(lambda X: ps.svd_function(X, f), A, random_like(A, seed=3))
    assert rel_err(tangent, native) < 1e-12
    # ("normalize": A / s_max through svd, whose basis follows the tangent)
    assert_julia_pushed(backend, rotated=f == "normalize" and s[1] == s[2])


MATFUNS = ["sqrt", "exp", "log", "invsqrt", ("pow", 3), ("pow", 1.5), SIN]


@pytest.mark.parametrize("f", MATFUNS, ids=str)
@pytest.mark.parametrize(
    "w", [(0.5, 1.0, 2.0, 3.0), (0.25, 1.0, 1.0, 4.0, 4.0)], ids=str
)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_function_forward_ad(backend, dtype, uplo, w, f):
    A = hermitian_with_spectrum(w, dtype=dtype, seed=6)

    def g(X, backend=backend):
        # (finite differences perturb single entries: one triangle read)
        return ps.matrix_function(X, f, uplo, backend=backend, check_hermitian=False)

    tangent = check_against_fd(g, A)
    _, native = dual(lambda X: g(X, "torch"), A, random_like(A, seed=3))
    assert rel_err(tangent, native) < 1e-12
    assert_julia_pushed(backend)


def test_matrix_function_forward_ad_sqrt_at_zero(backend):
    """f' infinite at an exact zero eigenvalue: +-inf where f[0, 0] reaches,
    finite elsewhere, never NaN, as natively."""
    A = torch.diag(torch.tensor([0.0, 0.5, 2.0, 3.0], dtype=torch.float64))
    dA = torch.eye(4, dtype=torch.float64)
    _, t = dual(lambda X: ps.matrix_function(X, "sqrt", backend=backend), A, dA)
    assert not torch.isnan(t).any()
    assert torch.isinf(t[0, 0]) and torch.isfinite(t[1:, 1:]).all()


def test_gradcheck_forward_ad(backend):
    """torch's own forward-AD check (dual tensors against its numerical
    Jacobian). Not its batched variant: that batches tangents with torch's
    legacy vmap, through which the Julia backend does not run (torch.func
    transforms run on the native backend)."""
    A = matrix_with_spectrum((5.0, 3.0, 2.0, 1.0), 5, 4, dtype=torch.complex128)
    H = hermitian_with_spectrum((0.5, 1.0, 2.0, 3.0), dtype=torch.complex128)
    b = backend
    cases = [
        (
            lambda X: (lambda U, S, Vh: U @ Vh)(
                *ps.svd(X, backend=b, full_matrices=False)
            ),
            A,
        ),
        (lambda X: ps.svd(X, full_matrices=True, backend=b).S, A.mT),
        (lambda X: ps.svdvals(X, backend=b), A),
        (lambda X: ps.svd_function(X, ("pow", 0.5), backend=b), A),
        (lambda X: ps.svd_function(X, CUBE, backend=b), A.mT),
        (lambda X: ps.svd_function(X, "normalize", backend=b), A),
        (lambda X: ps.eigh(X, "U", backend=b).eigenvalues, H),
        # (gradcheck perturbs single entries: one triangle read)
        (lambda X: ps.matrix_function(X, "log", backend=b, check_hermitian=False), H),
        (
            lambda X: ps.matrix_function(X, SIN, "U", backend=b, check_hermitian=False),
            H,
        ),
    ]
    for f, X in cases:
        X = X.detach().clone().requires_grad_()
        assert torch.autograd.gradcheck(
            f, (X,), check_forward_ad=True, check_backward_ad=False
        )


# --------------------------------- the stand-in: role swaps and the bridge


def svd_case(dtype, batch, shape, seed=0):
    return randn(*batch, *shape, dtype=dtype, seed=seed)


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)], ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)], ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_svd_tangents_are_the_native_pushforward(fake, dtype, shape, batch):
    """Julia pushes the transposed tangent through its factors of the
    transposes; what comes back is, exactly, the native pushforward on the
    factors the Julia backend returned (thin, full and top-k)."""
    A = svd_case(dtype, batch, shape)
    dA = random_like(A, seed=1)
    for kw in ({"full_matrices": False}, {"full_matrices": True}, {"k": 2}):
        (U, S, Vh), tangents = dual(
            lambda X, kw=kw: tuple(ps.svd(X, **kw, backend="julia")),
            A,
            dA,
        )
        if "k" in kw:  # the tangents of the top-k: those of all, sliced
            (U, S, Vh), _ = dual(
                lambda X: tuple(ps.svd(X, backend="julia", full_matrices=False)), A, dA
            )
            ref = svd_pushforward(U, S, Vh, dA, Options())
            ref = (ref[0][..., :2], ref[1][..., :2], ref[2][..., :2, :])
        else:
            ref = svd_pushforward(U, S, Vh, dA, Options())
        for t, r in zip(tangents, ref):
            assert t.dtype == r.dtype and t.shape == r.shape
            torch.testing.assert_close(t, r, atol=tol(dtype), rtol=tol(dtype))
    assert fake.calls_to("svd_pushforward_batched")


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_eigh_tangents_are_the_native_pushforward(fake, dtype, uplo, batch):
    """Julia's problem is conj(A) read from the other triangle, with
    eigenvectors conj(V); the tangents come back as the native ones."""
    A = randn(*batch, 4, 4, dtype=dtype)  # not Hermitian: one triangle is read
    dA = random_like(A, seed=1)
    (w, V), (dw, dV) = dual(lambda X: tuple(ps.eigh(X, uplo, backend="julia")), A, dA)
    rw, rV = eigh_pushforward(w, V, dA, uplo, Options())
    torch.testing.assert_close(dw, rw, atol=tol(dtype), rtol=tol(dtype))
    torch.testing.assert_close(dV, rV, atol=tol(dtype), rtol=tol(dtype))
    _, t = dual(lambda X: ps.eigvalsh(X, uplo, backend="julia"), A, dA)
    torch.testing.assert_close(t, rw, atol=tol(dtype), rtol=tol(dtype))


def test_options_reach_the_pushforwards(fake):
    """degeneracy_atol and broadening reach Julia's pushforward and change the
    tangent as they change the native one."""
    A = matrix_with_spectrum((3.0, 2.0, 1.999, 1.0), 5, 4, dtype=torch.complex128)
    dA = random_like(A, seed=2)
    for kw in ({"degeneracy_atol": 0.01}, {"broadening": 0.5}):
        (U, S, Vh), tangents = dual(
            lambda X, kw=kw: tuple(
                ps.svd(X, backend="julia", gauge="ignore", full_matrices=False, **kw)
            ),
            A,
            dA,
        )
        ref = svd_pushforward(U, S, Vh, dA, Options(**kw))
        plain = svd_pushforward(U, S, Vh, dA, Options())
        assert rel_err(tangents[0], ref[0]) < 1e-12
        assert rel_err(tangents[0], plain[0]) > 1e-3  # the option mattered
        call = fake.calls_to("svd_pushforward_batched")[-1]
        assert {k: call.named[k] for k in kw} == kw
    H = hermitian_with_spectrum((1.0, 1.001, 2.0), dtype=torch.complex128)
    dH = random_like(H, seed=3)
    # (gauge="ignore": the tangent splits the pair the option makes a cluster,
    # which is 0.001 apart, not rotatable: forward mode warns there)
    eigh = lambda X: tuple(  # noqa: E731
        ps.eigh(X, backend="julia", degeneracy_atol=0.01, gauge="ignore")
    )
    (w, V), (_, dV) = dual(eigh, H, dH)
    ref = eigh_pushforward(w, V, dH, "L", Options(degeneracy_atol=0.01))[1]
    assert rel_err(dV, ref) < 1e-12
    assert (
        fake.calls_to("eigh_pushforward_batched")[-1].named["degeneracy_atol"] == 0.01
    )
    kw = {"degeneracy_atol": 0.01}
    tangents = [
        dual(lambda X, b=b: ps.matrix_function(X, "sqrt", backend=b, **kw), H, dH)[1]
        for b in ("julia", "torch")
    ]
    assert rel_err(*tangents) < 1e-12
    call = fake.calls_to("matrix_function_pushforward_batched")[-1]
    assert call.named["degeneracy_atol"] == 0.01


@pytest.mark.parametrize(
    "op, name, forward_name",
    [
        (
            lambda X: tuple(ps.svd(X, backend="julia", full_matrices=False)),
            "svd_pushforward_batched",
            "svd_batched",
        ),
        (
            lambda X: ps.svd_function(X, ("pow", 2), backend="julia"),
            "svd_function_pushforward_batched",
            "svd_function_batched",
        ),
        (
            lambda X: ps.svd_function(X, CUBE, backend="julia"),
            "svd_function_values_pushforward_batched",
            "svd_batched",
        ),
        (
            lambda X: tuple(ps.eigh(X, backend="julia")),
            "eigh_pushforward_batched",
            "eigh_batched",
        ),
        (
            lambda X: ps.matrix_function(
                X, "exp", backend="julia", check_hermitian=False
            ),
            "matrix_function_pushforward_batched",
            "matrix_function_batched",
        ),
        (
            lambda X: ps.matrix_function(
                X, SIN, backend="julia", check_hermitian=False
            ),
            "matrix_function_values_pushforward_batched",
            "eigh_batched",
        ),
    ],
    ids=[
        "svd",
        "svd_function",
        "svd_function pair",
        "eigh",
        "matrix_function",
        "matrix_function pair",
    ],
)
def test_one_call_per_batch_without_copies(fake, op, name, forward_name):
    """A batch is one Julia call; Julia reads the tangent's memory, reuses the
    forward's handles, and the tangents wrap the arrays Julia returned."""
    A = randn(2, 3, 4, 4, dtype=torch.complex128)
    dA = random_like(A, seed=1)
    with fwAD.dual_level():
        out = op(fwAD.make_dual(A, dA))
        tangents = [
            fwAD.unpack_dual(t).tangent
            for t in (out if isinstance(out, tuple) else (out,))
        ]
    (call,) = fake.calls_to(name)
    assert dA.data_ptr() in [a.pointer for a in call.args if hasattr(a, "pointer")]
    returned = {a.pointer for a in fake.calls_to(forward_name)[0].returned}
    handles = {a.pointer for a in call.args if hasattr(a, "pointer")}
    assert returned & handles  # the forward's own arrays, passed back
    for t in tangents:
        assert t.data_ptr() in {a.pointer for a in call.returned}


def test_a_differentiated_tangent_runs_natively(fake):
    """A tangent that will be differentiated (the input requires grad) takes
    the native pushforward, which is differentiable, as the backward does under
    create_graph. Its gradient is the mixed second derivative, here computed
    forward-over-reverse on the native backend."""
    A = matrix_with_spectrum((4.0, 2.0, 1.0), 5, 3, seed=5)
    H = hermitian_with_spectrum((0.5, 1.0, 2.0), seed=5)
    cases = [
        (
            lambda X, b: (lambda U, S, Vh: U @ Vh)(
                *ps.svd(X, backend=b, full_matrices=False)
            ),
            A,
        ),
        (lambda X, b: ps.svd(X, full_matrices=True, backend=b).S, A),
        (lambda X, b: ps.svd_function(X, ("pow", 3), backend=b), A),
        (lambda X, b: ps.svd_function(X, CUBE, backend=b), A),
        (lambda X, b: projector(ps.eigh(X, backend=b).eigenvectors, slice(0, 1)), H),
        (lambda X, b: ps.matrix_function(X, "exp", backend=b), H),
        (lambda X, b: ps.matrix_function(X, SIN, backend=b), H),
    ]
    for f, X0 in cases:
        dX, W = random_like(X0, seed=7), random_like(f(X0, "torch"), seed=8)
        X = X0.clone().requires_grad_()
        with fwAD.dual_level():
            t = fwAD.unpack_dual(f(fwAD.make_dual(X, dX), "julia")).tangent
        assert t.requires_grad
        (g,) = torch.autograd.grad((t * W).sum(), X)

        def grad(Z, f=f, W=W):
            return torch.func.grad(lambda Y: (f(Y, "torch") * W).sum())(Z)

        _, ref = torch.func.jvp(grad, (X0,), (dX,))
        assert rel_err(g, ref) < 1e-10
    assert not [c for c in fake.calls if "pushforward" in c.name]


# ------------------------------------------------------------------ top-k
# The iterative top-k path on the Julia backend pushes forward through
# PySpectral.jl's truncated_svd_pushforward / truncated_eigh_pushforward (the
# transposes of its truncated pullbacks; the glue's *_trunc_pushforward_batched)
# with the blocks its forward returned. The stand-in runs the native algorithm
# on Julia's side of the layout. Dual tensors: torch.func runs natively.

TRUNC = ("svd_trunc_pushforward_batched", "eigh_trunc_pushforward_batched")


def decaying(n: int, ratio: float = 0.7) -> list[float]:
    return [10 * ratio**i for i in range(n)]


def topk_matrices(dtype, batch, m, n, spectrum=None):
    """``batch`` matrices of singular values ``spectrum`` (default: a gap at
    every k), each with its own singular vectors."""
    s = decaying(min(m, n)) if spectrum is None else spectrum
    count = 1
    for b in batch:
        count *= b
    mats = [matrix_with_spectrum(s, m, n, dtype, seed=i + 1) for i in range(count)]
    return torch.stack(mats).reshape(*batch, m, n)


def topk_hermitian(dtype, batch, spectrum, uplo="L"):
    """``batch`` Hermitian matrices of eigenvalues ``spectrum``, their other
    triangle replaced by junk (only the ``uplo`` triangle is read)."""
    count = 1
    for b in batch:
        count *= b
    n = len(spectrum)
    mats = []
    for i in range(count):
        H = hermitian_with_spectrum(spectrum, dtype=dtype, seed=i + 1)
        junk = randn(n, n, dtype=dtype, seed=i + 7)
        if uplo == "L":
            mats.append(torch.tril(H) + torch.triu(junk, 1))
        else:
            mats.append(torch.triu(H) + torch.tril(junk, -1))
    return torch.stack(mats).reshape(*batch, n, n)


def topk_calls(name: str) -> list:
    """The calls of the stand-in's glue entry ``name``; fails when there are
    none (the tangent would not have come from the Julia entry)."""
    calls = _bridge.runtime.calls_to(name)
    assert calls, f"the Julia backend's top-k tangent did not come from {name}"
    return calls


def polar_projectors_values(k: int, backend: str, **kw):
    """Outputs of the top-k SVD that do not depend on the basis of the kept
    triplets at a gap: the polar factor, both projectors, the values."""

    def f(X):
        U, S, Vh = ps.svd(X, k=k, backend=backend, **kw)
        return U @ Vh, U @ U.mH, Vh.mH @ Vh, S

    return f


def eigen_projector_values(k: int, largest: bool, uplo: str, backend: str, **kw):
    def f(X):
        w, V = ps.eigh(X, uplo, k=k, largest=largest, backend=backend, **kw)
        return V @ V.mH, w

    return f


@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
@pytest.mark.parametrize("shape", [(40, 30), (30, 40)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_top_k_svd_tangents_are_the_full_pushforward(fake, dtype, shape, batch):
    """The tangents of the kept triplets are, entry by entry, the full path's
    pushforward in the basis the Julia backend returned (every role swap of
    the bridge: Julia pushes the transposed tangent through its blocks of the
    transposes), from one Julia call for the batch."""
    from test_topk_forward import completed_svd

    A = topk_matrices(dtype, batch, *shape)
    dA = random_like(A, seed=2)
    (U, S, Vh), tangents = dual(
        lambda X: tuple(ps.svd(X, k=3, method="randomized", backend="julia")), A, dA
    )
    ref = svd_pushforward(*completed_svd(A, U, S, Vh), dA, options(gauge="ignore"))
    ref = (ref[0][..., :3], ref[1][..., :3], ref[2][..., :3, :])
    for t, r in zip(tangents, ref):
        assert t.dtype == r.dtype and t.shape == r.shape
        assert rel_err(t, r) < 1e-9
    assert len(topk_calls(TRUNC[0])) == 1


def completed_eigh(A, w, V, uplo):
    """The eigendecomposition of the Hermitian matrix read from ``A``'s
    ``uplo`` triangle, starting with the given pairs (then the complement's)."""
    H = TK.hermitian_from_triangle(A, uplo)
    k = w.shape[-1]
    W = torch.linalg.qr(V, mode="complete").Q[..., k:]
    wb, Z = torch.linalg.eigh(W.mH @ H @ W)
    return torch.cat([w, wb], -1), torch.cat([V, W @ Z], -1)


@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_top_k_eigh_tangents_are_the_full_pushforward(
    fake, dtype, largest, uplo, batch
):
    """Julia's problem is conj(A) read from the other triangle, with
    eigenvectors conj(V); the tangents come back as the full path's
    pushforward in the returned basis, reading only the ``uplo`` triangle of
    the (non-Hermitian) tangent."""
    w0 = decaying(30) if largest else [-x for x in decaying(30)]
    A = topk_hermitian(dtype, batch, w0, uplo)
    dA = random_like(A, seed=3)
    (w, V), (dw, dV) = dual(
        lambda X: tuple(
            ps.eigh(X, uplo, k=3, largest=largest, method="randomized", backend="julia")
        ),
        A,
        dA,
    )
    rw, rV = eigh_pushforward(
        *completed_eigh(A, w, V, uplo), dA, uplo, options(gauge="ignore")
    )
    assert dw.dtype == rw.dtype and dV.shape == V.shape
    assert rel_err(dw, rw[..., :3]) < 1e-9
    assert rel_err(dV, rV[..., :3]) < 1e-9
    assert len(topk_calls(TRUNC[1])) == 1


# spectrum, k, keywords
TOPK_SPECTRA = {
    "gap": (decaying(30), 3, {}),
    # k = 4 keeps a cluster whole
    "cluster kept": ([5, 3, 3, 3, 1] + [0.5 * 0.7**i for i in range(25)], 4, {}),
    # the block (k + 2) ends inside a five-fold cluster of the discarded values
    "degenerate outside": (
        [5, 4, 3] + [1] * 5 + [0.5 * 0.7**i for i in range(22)],
        3,
        {"oversample": 2},
    ),
    # a zero block past the kept values
    "zeros outside": ([5, 4, 3] + [0] * 27, 3, {"oversample": 2}),
}


@pytest.mark.parametrize("case", TOPK_SPECTRA)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_top_k_forward_ad_agrees_with_native(backend, dtype, case):
    """On both backends the top-k tangents of basis-independent outputs are
    the native iterative path's and the full path's (``method="full"``)."""
    s, k, kw = TOPK_SPECTRA[case]
    A = matrix_with_spectrum(s, 40, 30, dtype, seed=5)
    dA = random_like(A, seed=6)
    f = polar_projectors_values(k, backend, method="randomized", **kw)
    _, got = dual(f, A, dA)
    _, native = dual(
        polar_projectors_values(k, "torch", method="randomized", **kw), A, dA
    )
    _, full = dual(polar_projectors_values(k, "torch", method="full"), A, dA)
    values = case != "cluster kept"  # single values inside a kept cluster: no
    for i, (t, n, r) in enumerate(zip(got, native, full)):
        if i < 3 or values:
            assert rel_err(t, n) < 1e-9 and rel_err(t, r) < 1e-9
    assert rel_err(got[3].sum(-1), full[3].sum(-1)) < 1e-9
    if backend == "julia":
        topk_calls(TRUNC[0])
    H = hermitian_with_spectrum(s, dtype=dtype, seed=5)
    dH = random_like(H, seed=7)
    for largest in (True, False):
        X = H if largest else -H
        g = eigen_projector_values(k, largest, "L", backend, method="randomized", **kw)
        _, got = dual(g, X, dH)
        _, full = dual(
            eigen_projector_values(k, largest, "L", "torch", method="full"), X, dH
        )
        assert rel_err(got[0], full[0]) < 1e-9
        assert rel_err(got[1].sum(-1), full[1].sum(-1)) < 1e-9
    if backend == "julia":
        topk_calls(TRUNC[1])


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_top_k_jvp_when_the_block_is_complete(backend, largest):
    """``method="auto"`` on a small matrix (the full path) and a block
    ``k + oversample`` that covers the spectrum: the full path's pushforward
    on the complete block (eigh: the kept pairs first, then the rest)."""
    A = matrix_with_spectrum(decaying(6), 9, 6, seed=2)
    H = hermitian_with_spectrum([-3, -1, 0.5, 2, 4, 7], seed=2)
    dA, dH = random_like(A, seed=3), random_like(H, seed=3)
    full_svd = polar_projectors_values(3, "torch", method="full")
    full_eigh = eigen_projector_values(2, largest, "U", "torch", method="full")
    for kw in ({"method": "auto"}, {"method": "randomized", "oversample": 4}):
        got = dual(polar_projectors_values(3, backend, **kw), A, dA)[1]
        want = dual(full_svd, A, dA)[1]
        assert all(rel_err(t, r) < 1e-10 for t, r in zip(got, want))
        kw = {**kw, "oversample": 5} if "oversample" in kw else kw
        got = dual(eigen_projector_values(2, largest, "U", backend, **kw), H, dH)[1]
        want = dual(full_eigh, H, dH)[1]
        assert all(rel_err(t, r) < 1e-10 for t, r in zip(got, want))
    if backend == "julia":
        topk_calls(TRUNC[0])
        topk_calls(TRUNC[1])


def forward_jacobian(f, A):
    """The Jacobian of ``f`` (real) at ``A`` column by column, each column a
    tangent through dual tensors: what ``jacfwd`` computes (``torch.func``
    itself runs on the native backend only)."""
    columns = []
    for i in range(A.numel()):
        dA = torch.zeros(A.numel(), dtype=A.dtype)
        dA[i] = 1
        columns.append(dual(f, A, dA.reshape(A.shape))[1].reshape(-1))
    return torch.stack(columns, -1)


def test_top_k_forward_jacobian_equals_reverse(fake):
    """The forward-mode Jacobian through Julia's pushforwards equals the
    reverse-mode one through Julia's pullbacks (its transposes), and the
    native ``jacfwd`` of the native iterative path."""
    A = matrix_with_spectrum(decaying(8), 10, 8, seed=3)  # block 2 + 3 < 8
    H = hermitian_with_spectrum(decaying(8, 0.6), seed=1)

    def polar(backend):
        def f(X):
            U, S, Vh = ps.svd(
                X, k=2, method="randomized", oversample=3, backend=backend
            )
            return U @ Vh + S.sum(-1)[..., None, None]

        return f

    def projector(backend):
        def f(X):
            V = ps.eigh(X, k=2, method="randomized", oversample=3, backend=backend)[1]
            return V @ V.mH

        return f

    for make, X in ((polar, A), (projector, H)):
        J = forward_jacobian(make("julia"), X)
        Jrev = torch.autograd.functional.jacobian(make("julia"), X).reshape(J.shape)
        assert rel_err(J, Jrev) < 1e-10
        assert rel_err(J, torch.func.jacfwd(make("torch"))(X).reshape(J.shape)) < 1e-9
    topk_calls(TRUNC[0])
    topk_calls(TRUNC[1])
    with pytest.raises(ps.BackendError, match="torch.func"):
        torch.func.jacfwd(polar("julia"))(A)


def test_top_k_bridge_one_call_per_batch_without_copies(fake):
    """A batch is one Julia call; Julia reads the tangent's memory and the
    input's, reuses the forward's blocks, and the tangents wrap the arrays
    Julia returned (grad mode off: with it on, they are wrapped so that
    differentiating them raises)."""
    A = topk_matrices(torch.complex128, (2, 3), 24, 20)
    H = topk_hermitian(torch.complex128, (2, 3), decaying(20))
    ops = [
        (A, lambda X: ps.svd(X, k=3, method="randomized", backend="julia"), 0),
        (H, lambda X: ps.eigh(X, k=3, method="randomized", backend="julia"), 1),
    ]
    for X, op, which in ops:
        dX = random_like(X, seed=1)
        with torch.no_grad(), fwAD.dual_level():
            tangents = [fwAD.unpack_dual(t).tangent for t in op(fwAD.make_dual(X, dX))]
        (call,) = topk_calls(TRUNC[which])
        seen = [a.pointer for a in call.args if hasattr(a, "pointer")]
        assert dX.data_ptr() in seen and X.data_ptr() in seen
        forward = fake.calls_to(("svd_topk_batched", "eigh_topk_batched")[which])
        assert {a.pointer for a in forward[-1].returned} <= set(seen)
        returned = {a.pointer for a in call.returned}
        # eigh: dw; torch copies dV into the C order of the kept V (which the
        # forward copied out of Julia's column-major block)
        wrapped = tangents if which == 0 else tangents[:1]
        assert all(t.data_ptr() in returned for t in wrapped)


def test_top_k_settings_reach_the_pushforwards(fake):
    """The glue takes positional arguments only: each setting arrives as the
    parameter of its name (the stand-in binds them to the glue's parameter
    names), the triangle swapped as for the forward."""
    A = topk_matrices(torch.float64, (), 24, 20)
    H = topk_hermitian(torch.float64, (), [-x for x in decaying(20)], "U")
    kw = dict(
        k=3,
        method="randomized",
        backward_rtol=1e-9,
        backward_maxiter=321,
        degeneracy_atol=1e-10,
        broadening=1e-12,
        backend="julia",
    )
    dual(
        lambda X: tuple(ps.svd(X, full_matrices=False, **kw)), A, random_like(A, seed=1)
    )
    dual(lambda X: tuple(ps.eigh(X, "U", largest=False, **kw)), H, random_like(H))
    settings = {
        "k": 3,
        "rtol": 1e-9,
        "maxiter": 321,
        "degeneracy_atol": 1e-10,
        "broadening": 1e-12,
    }
    (svd_call,) = topk_calls(TRUNC[0])
    assert {name: svd_call.named[name] for name in settings} == settings
    (eigh_call,) = topk_calls(TRUNC[1])
    assert {name: eigh_call.named[name] for name in settings} == settings
    assert eigh_call.named["uplo"] == "L" and eigh_call.named["largest"] is False
    # the blocks the forward returned, passed back as they are, and its d's
    # (one per batch element, each at least k)
    forward = fake.calls_to("svd_topk_batched")[-1]
    assert [a.pointer for a in svd_call.args[1:4]] == [
        a.pointer for a in forward.returned
    ]
    (d,) = svd_call.named["d"]
    assert isinstance(d, int) and d >= 3


def test_top_k_forward_mode_passes_the_spied_entry(fake, monkeypatch):
    """Every top-k glue call, forward, pushforward and pullback, passes the
    bridge's one entry (``_bridge._state["enter"]``, where the real-Julia spy
    of tests/_spy.py sits), and nothing else reaches Julia."""
    ps.svd(randn(3, 3), backend="julia", full_matrices=False)  # the stand-in starts
    seen: list[str] = []
    enter = _bridge._state["enter"]

    def spying(f, *args):
        seen.append(f.args[0])  # the stand-in's glue: partial(_run, name, impl)
        return enter(f, *args)

    monkeypatch.setitem(_bridge._state, "enter", spying)
    A = topk_matrices(torch.float64, (2,), 24, 20)
    H = topk_hermitian(torch.float64, (2,), decaying(20))
    svd = polar_projectors_values(3, "julia", method="randomized")
    eigh = eigen_projector_values(3, True, "L", "julia", method="randomized")
    for f, X in ((svd, A), (eigh, H)):
        dual(f, X, random_like(X, seed=1))
        X = X.clone().requires_grad_()
        sum(t.sum() for t in f(X)).backward()
    assert seen == [
        "svd_topk_batched",
        "svd_trunc_pushforward_batched",
        "svd_topk_batched",
        "svd_trunc_pullback_batched!",
        "eigh_topk_batched",
        "eigh_trunc_pushforward_batched",
        "eigh_topk_batched",
        "eigh_trunc_pullback_batched!",
    ]
    assert [c.name for c in fake.calls[1:]] == seen


def test_top_k_on_julia_is_first_order(fake):
    """As natively: a derivative of the top-k tangent or gradient raises
    DerivativeError (double backward, reverse over forward, forward over
    reverse); torch.func (hessian, jacfwd of jacfwd) runs on the native
    backend, so on the Julia backend it raises BackendError before anything."""
    A = matrix_with_spectrum(decaying(20), 24, 20, seed=3)
    H = hermitian_with_spectrum(decaying(20, 0.6), seed=1)
    dA, dH = random_like(A, seed=2), random_like(H, seed=2)

    def svd_loss(X):
        U, S, Vh = ps.svd(X, k=3, method="randomized", backend="julia")
        return (S**3).sum() + (U @ Vh).sum()

    def eigh_loss(X):
        w, V = ps.eigh(X, k=3, method="randomized", backend="julia")
        return (w**3).sum() + (V @ V.mH).abs().sum()

    for loss, X0, dX in ((svd_loss, A, dA), (eigh_loss, H, dH)):
        X = X0.clone().requires_grad_()
        (g,) = torch.autograd.grad(loss(X), X, create_graph=True)
        with pytest.raises(ps.DerivativeError, match="first order only"):
            g.sum().backward()
        with fwAD.dual_level():
            t = fwAD.unpack_dual(loss(fwAD.make_dual(X, dX))).tangent
        with pytest.raises(ps.DerivativeError, match="first order only"):
            torch.autograd.grad(t, X)
        with fwAD.dual_level():
            with pytest.raises(ps.DerivativeError, match="first order only"):
                torch.autograd.grad(loss(fwAD.make_dual(X, dX)), X)
        with pytest.raises(ps.BackendError, match="torch.func"):
            torch.func.hessian(loss)(X0)
    assert fake.calls_to(TRUNC[0]) and fake.calls_to(TRUNC[1])


NO_GAP = [1 / (i + 1) ** 0.5 for i in range(30)]
NO_GAP_KW = dict(k=4, method="randomized", oversample=6, backward_maxiter=1)


def no_gap_tangent(op: str, backend: str, batch=(), kw=NO_GAP_KW) -> torch.Tensor:
    """A top-k tangent (of the polar factor, of the projector) whose CG
    cannot converge under ``NO_GAP_KW`` (capped at one step; no gap past the
    certified block)."""
    if op == "svd":
        A = matrix_with_spectrum(NO_GAP, 40, 30, seed=4)

        def f(X):
            U, S, Vh = ps.svd(X, backend=backend, full_matrices=False, **kw)
            return U @ Vh

    else:
        A = hermitian_with_spectrum(NO_GAP, seed=4)

        def f(X):
            V = ps.eigh(X, backend=backend, **kw).eigenvectors
            return V @ V.mH

    A = A.expand(*batch, *A.shape).contiguous()
    return dual(f, A, random_like(A, seed=5))[1]


@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_top_k_jvp_without_a_gap_falls_back(fake, op):
    """On a small matrix the dense fallback gives the full path's tangent,
    silently."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.ConvergenceWarning)
        t = no_gap_tangent(op, "julia")
    full = no_gap_tangent(op, "torch", kw=dict(k=4, method="full"))
    assert rel_err(t, full) < 1e-9
    topk_calls(TRUNC[op == "eigh"])


@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_top_k_jvp_warns_once(fake, op, batch, monkeypatch):
    """Julia's truncated pushforward logs "did not converge" once per batch
    element (maxiter and residual as keyword arguments); Python gets one
    ConvergenceWarning, the native backend's jvp text for the same event (up
    to the residual: Julia solves on the other side of the transpose)."""
    monkeypatch.setattr(TK, "DENSE_FALLBACK_MAX", 0)  # the stand-in reads it too
    warned = {}
    for backend in ("julia", "torch"):
        with pytest.warns(ps.ConvergenceWarning, match="jvp: the Sylvester") as rec:
            t = no_gap_tangent(op, backend, batch)
        caught = [w for w in rec if issubclass(w.category, ps.ConvergenceWarning)]
        assert len(caught) == 1 and torch.isfinite(t).all()
        warned[backend] = re.sub(
            r"residual \S+\)", "residual r)", str(caught[0].message)
        )
    assert warned["julia"] == warned["torch"]
    assert "The tangent is approximate" in warned["julia"]
    topk_calls(TRUNC[op == "eigh"])


def test_top_k_pushforward_records_are_the_julia_packages():
    """The stand-in's pushforward record is PySpectral.jl's (the fixed parts
    of its message, its keyword arguments), and the bridge turns it into the
    native jvp warning."""
    from _fake_julia import JULIA_UNCONVERGED_PUSHFORWARD

    src = ps.julia.PACKAGE_TESTS.parent / "src" / "pullbacks" / "truncated.jl"
    text = src.read_text(encoding="utf-8")
    for fragment in (
        '"$(op)_topk $mode: the Sylvester solve did not converge in $maxiter "',
        'result = mode === :backward ? "gradient" : "tangent"',
        "_warn_unconverged(:svd, maxiter, residual; mode=:pushforward)",
        "_warn_unconverged(:eigh, maxiter, residual; mode=:pushforward)",
        "@warn message maxiter residual",
    ):
        assert fragment in text, fragment
    message = JULIA_UNCONVERGED_PUSHFORWARD.format(
        op="eigh", maxiter=12, residual="0.5"
    )
    record = (
        "Warn",
        message,
        "PySpectral",
        "truncated",
        (("maxiter", 12), ("residual", 0.5)),
    )
    assert _events._native_event(record) == (("unconverged_jvp", "eigh", 12), 0.5)
    with pytest.warns(ps.ConvergenceWarning) as rec:
        _events.warn_julia_logs("eigh", [record])
    assert str(rec[0].message) == TK._backward_message("eigh", 12, 0.5, "jvp")


def test_the_glue_defines_what_the_bridge_calls():
    """Every ``*_batched`` glue function the bridge calls is defined in
    ``glue.jl`` and imitated by the stand-in (the Julia file cannot run here)."""
    ops = (Path(_svd.__file__), Path(_eigh.__file__))
    called = {n for p in ops for n in re.findall(r'"(\w+_batched!?)"', p.read_text())}
    glue = _bridge.GLUE.read_text()
    defined = set(re.findall(r"^function (\w+!?)\(", glue, re.M))
    defined |= set(re.findall(r"^(\w+!?)\([^\n]*\) =", glue, re.M))
    assert {n for n in called if "pushforward" in n} >= {
        "svd_pushforward_batched",
        "svd_function_pushforward_batched",
        "svd_function_values_pushforward_batched",
        "svd_trunc_pushforward_batched",
        "eigh_pushforward_batched",
        "eigh_trunc_pushforward_batched",
        "matrix_function_pushforward_batched",
        "matrix_function_values_pushforward_batched",
    }
    assert called <= defined, sorted(called - defined)
    assert called <= set(GLUE_FUNCTIONS), sorted(called - set(GLUE_FUNCTIONS))


def test_pushforwards_mirror_julia():
    """Each exported Julia pushforward has its Python twin, of the same name,
    in the file of the same name (as test_layout checks for the pullbacks),
    and the frules cover the operations that have rrules (top-k included)."""
    # this checkout's Julia package (beside tests/, also when testing a wheel)
    src = Path(__file__).resolve().parent.parent / "julia" / "PySpectral" / "src"
    exports = set(
        re.findall(r"\b(\w+_pushforward)\b", (src / "PySpectral.jl").read_text())
    )
    assert exports == {
        "svd_pushforward",
        "svd_function_pushforward",
        "eigh_pushforward",
        "matrix_function_pushforward",
        "truncated_svd_pushforward",
        "truncated_eigh_pushforward",
        "dense_truncated_svd_pushforward",
        "dense_truncated_eigh_pushforward",
        "svd_split_pushforward",
        "qr_pushforward",
        "lq_pushforward",
        "polar_pushforward",
        "eig_pushforward",
        "eig_function_pushforward",
    }
    pkg = Path(ps.__file__).parent / "pullbacks"
    for jl in sorted((src / "pullbacks").glob("*.jl")):
        defined = set(
            re.findall(r"^function (\w+_pushforward)\(", jl.read_text(), re.M)
        )
        tree = ast.parse((pkg / f"{jl.stem}.py").read_text())
        python = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert defined & exports <= python, (jl.name, sorted(defined - python))

    def ruled(kind: str) -> set[str]:
        text = (src / f"{kind}s.jl").read_text()
        pattern = rf"^function ChainRulesCore\.{kind}\((?:\(.*?\), )?::typeof\((\w+)\)"
        return set(re.findall(pattern, text, re.M))

    rrules, frules = ruled("rrule"), ruled("frule")
    assert rrules >= {"svd", "eigh", "matrix_function", "svd_topk", "eigh_topk"}
    assert frules == rrules


# ----------------------------------------------------------- real Julia


@needs_julia
@pytest.mark.parametrize("batch", [(), (2, 3)], ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_real_julia_tangents_are_the_native_pushforward(dtype, batch):
    """PySpectral.jl's pushforwards through the bridge equal the native ones
    on the factors Julia returned (svd thin/full/top-k, eigh both triangles)
    and the native backend's tangents of spectral functions."""
    for shape in [(5, 3), (3, 5)]:
        A = svd_case(dtype, batch, shape)
        dA = random_like(A, seed=1)
        for kw in ({"full_matrices": False}, {"full_matrices": True}):
            (U, S, Vh), tangents = dual(
                lambda X, kw=kw: tuple(ps.svd(X, backend="julia", **kw)),
                A,
                dA,
            )
            for t, r in zip(tangents, svd_pushforward(U, S, Vh, dA, Options())):
                torch.testing.assert_close(t, r, atol=tol(dtype), rtol=tol(dtype))
        for f in ("polar", ("pow", 2), CUBE):
            _, t = dual(lambda X, f=f: ps.svd_function(X, f, backend="julia"), A, dA)
            _, r = dual(lambda X, f=f: ps.svd_function(X, f), A, dA)
            torch.testing.assert_close(t, r, atol=tol(dtype) * 10, rtol=tol(dtype))
    H = randn(*batch, 4, 4, dtype=dtype)
    H = H @ H.mH + torch.eye(4, dtype=dtype)
    dH = random_like(H, seed=2)
    for uplo in "LU":
        (w, V), (dw, dV) = dual(
            lambda X, uplo=uplo: tuple(ps.eigh(X, uplo, backend="julia")), H, dH
        )
        rw, rV = eigh_pushforward(w, V, dH, uplo, Options())
        torch.testing.assert_close(dw, rw, atol=tol(dtype), rtol=tol(dtype))
        torch.testing.assert_close(dV, rV, atol=tol(dtype), rtol=tol(dtype))
        for f in ("log", ("pow", 3), SIN):
            _, t, _, r = (
                x
                for b in ("julia", "torch")
                for x in dual(
                    lambda X, f=f, u=uplo, b=b: ps.matrix_function(X, f, u, backend=b),
                    H,
                    dH,
                )
            )
            torch.testing.assert_close(t, r, atol=tol(dtype) * 10, rtol=tol(dtype))


@needs_julia
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_real_julia_forward_ad_at_degenerate_spectra(dtype):
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 0.5), 6, 4, dtype=dtype, seed=9)
    check_against_fd(svd_invariants("julia", [slice(0, 1), slice(1, 3)], True), A)
    check_against_fd(lambda X: ps.svd_function(X, ("pow", 3), backend="julia"), A)
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), dtype=dtype, seed=9)
    check_against_fd(  # (differences along a non-Hermitian dA: one triangle read)
        lambda X: ps.matrix_function(X, "sqrt", backend="julia", check_hermitian=False),
        H,
    )
    check_against_fd(
        lambda X: projector(ps.eigh(X, "U", backend="julia").eigenvectors, slice(1, 3)),
        H,
    )


def rebuilt(backend):
    """``V diag(w) V^H`` and ``U diag(S) Vh`` term by term: outputs that read a
    cluster's values through its vectors (exact only in the basis the tangent
    follows, see docs/guide/forward-mode.md)."""

    def eigh_rebuilt(X):
        w, V = ps.eigh(X, backend=backend)
        return (V * w.to(V.dtype)) @ V.mH

    def svd_rebuilt(X):
        U, S, Vh = ps.svd(X, backend=backend, full_matrices=False)
        return (U * S.to(U.dtype)) @ Vh

    return eigh_rebuilt, svd_rebuilt


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_ad_rebuilt_at_a_cluster(backend, dtype):
    """At clusters the tangent splits, both backends return the basis it
    follows (the Julia backend rotates Julia's factors, and pushes natively),
    so V diag(w) V^H and U diag(S) Vh rebuilt are exact; a near-degenerate
    split cluster warns on both (the check runs in Python before Julia's
    pushforward)."""
    eigh_rebuilt, svd_rebuilt = rebuilt(backend)
    H = hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), dtype=dtype, seed=4)
    check_against_fd(eigh_rebuilt, H)
    A = matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 6, 4, dtype=dtype, seed=4)
    check_against_fd(svd_rebuilt, A)
    H2 = hermitian_with_spectrum((0.25, 1.0, 1.0 + 1e-13, 4.0, 5.0), dtype=dtype)
    with pytest.warns(ps.GaugeWarning, match="eigh: forward mode"):
        dual(eigh_rebuilt, H2, random_like(H2, seed=5))


@needs_julia
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_real_julia_forward_ad_rebuilt_at_a_cluster(dtype):
    """The same through PySpectral.jl (the forward's factors rotated in
    Python), and the same tangents as the native backend."""
    for f, g, X in zip(
        rebuilt("julia"),
        rebuilt("torch"),
        (
            hermitian_with_spectrum((0.25, 1.0, 1.0, 4.0, 4.0), dtype=dtype, seed=4),
            matrix_with_spectrum((5.0, 2.0, 2.0, 1.0), 6, 4, dtype=dtype, seed=4),
        ),
    ):
        tangent = check_against_fd(f, X)
        assert rel_err(tangent, dual(g, X, random_like(X, seed=3))[1]) < 1e-12


@needs_julia
@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_real_julia_top_k_tangents_are_native(dtype, batch):
    """PySpectral.jl's truncated pushforwards through the bridge: the full
    path's pushforward in the basis Julia returned, and the native backend's
    tangents of basis-independent outputs (svd both shapes; eigh both ends,
    both triangles)."""
    from test_topk_forward import completed_svd

    for shape in [(40, 30), (30, 40)]:
        A = topk_matrices(dtype, batch, *shape)
        dA = random_like(A, seed=2)
        (U, S, Vh), tangents = dual(
            lambda X: tuple(ps.svd(X, k=3, method="randomized", backend="julia")),
            A,
            dA,
        )
        opts = options(gauge="ignore")
        ref = svd_pushforward(*completed_svd(A, U, S, Vh), dA, opts)
        for t, r in zip(
            tangents, (ref[0][..., :3], ref[1][..., :3], ref[2][..., :3, :])
        ):
            assert rel_err(t, r) < 1e-9
        for s, k, kw in TOPK_SPECTRA.values():
            X = topk_matrices(dtype, batch, *shape, spectrum=s)
            got = dual(
                polar_projectors_values(k, "julia", method="randomized", **kw), X, dA
            )
            native = dual(
                polar_projectors_values(k, "torch", method="randomized", **kw), X, dA
            )
            for t, n in zip(got[1][:3], native[1][:3]):
                assert rel_err(t, n) < 1e-9
    for largest in (True, False):
        w0 = decaying(30) if largest else [-x for x in decaying(30)]
        for uplo in "LU":
            A = topk_hermitian(dtype, batch, w0, uplo)
            dA = random_like(A, seed=3)
            (w, V), (dw, dV) = dual(
                lambda X, u=uplo, big=largest: tuple(
                    ps.eigh(
                        X, u, k=3, largest=big, method="randomized", backend="julia"
                    )
                ),
                A,
                dA,
            )
            rw, rV = eigh_pushforward(
                *completed_eigh(A, w, V, uplo), dA, uplo, options(gauge="ignore")
            )
            assert rel_err(dw, rw[..., :3]) < 1e-9
            assert rel_err(dV, rV[..., :3]) < 1e-9


@needs_julia
@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_real_julia_top_k_jvp_without_a_gap(op):
    """Julia's CG capped at one step: its dense fallback gives the full
    path's tangent, silently; and the first-order limit holds there too."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.ConvergenceWarning)
        t = no_gap_tangent(op, "julia")
    assert rel_err(t, no_gap_tangent(op, "torch", kw=dict(k=4, method="full"))) < 1e-9
    A = matrix_with_spectrum(decaying(20), 24, 20, seed=3)
    X = A.clone().requires_grad_()
    with fwAD.dual_level():
        S = ps.svd(
            fwAD.make_dual(X, random_like(A)), k=3, method="randomized", backend="julia"
        ).S
        t = fwAD.unpack_dual(S).tangent
    with pytest.raises(ps.DerivativeError, match="first order only"):
        torch.autograd.grad(t.sum(), X)


def julia_size(X: torch.Tensor) -> tuple[int, ...]:
    """How Julia sees a C-contiguous ``(*, m, n)`` tensor: ``n x m x B``."""
    m, n = X.shape[-2:]
    return (n, m, X.numel() // (m * n))


@needs_julia
@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_real_julia_top_k_jvp_zero_copy_as_julia_sees_it(op, monkeypatch):
    """Through the spy on the bridge's one entry (tests/_spy.py; ``take``
    fails when it recorded nothing): a (2, 3) batch pushes forward in one
    Julia call after the forward's one, which reads the input's and the
    tangent's own memory (the glue's ``wrap``), gets back the forward's blocks
    (arrays Julia allocated) and returns the arrays the tangents wrap (eigh:
    ``dw``; torch copies ``dV`` into the C order of the kept ``V``)."""
    _bridge.glue()
    spy = _spy.install(monkeypatch, sys.modules["juliacall"].Main, _bridge)
    if op == "svd":
        X = topk_matrices(torch.complex128, (2, 3), 24, 20)

        def f(Y):
            return ps.svd(Y, k=3, method="randomized", backend="julia")

    else:
        X = topk_hermitian(torch.complex128, (2, 3), decaying(20))

        def f(Y):
            return ps.eigh(Y, k=3, method="randomized", backend="julia")

    dX = random_like(X, seed=1)
    with torch.no_grad(), fwAD.dual_level():
        tangents = [fwAD.unpack_dual(t).tangent for t in f(fwAD.make_dual(X, dX))]
    fwd, jvp = _spy.data_calls(spy.take())
    assert (fwd.name, jvp.name) == (f"{op}_topk_batched", TRUNC[op == "eigh"])
    wrapped_input = _spy.JArray("wrapped", X.data_ptr(), julia_size(X))
    assert wrapped_input in fwd.args and wrapped_input in jvp.args, jvp.args
    assert _spy.JArray("wrapped", dX.data_ptr(), julia_size(dX)) in jvp.args
    blocks = {r.address for r in fwd.results if r.kind == "Array"}
    handles = {a.address for a in jvp.args if a.kind == "Array"}
    assert handles and handles == blocks, (jvp.args, fwd.results)
    assert all(r.size[-1] == 6 for r in jvp.results), jvp.results
    returned = {r.address for r in jvp.results if r.kind == "Array"}
    wrapped = tangents if op == "svd" else tangents[:1]
    assert all(t.data_ptr() in returned for t in wrapped), jvp.results
