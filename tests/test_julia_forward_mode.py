"""Forward-mode AD on both backends: the ``jvp`` of the Julia-backend autograd
Functions (``_SVDJulia``, ``_SVDFunctionJulia``, ``_EighJulia``,
``_MatrixFunctionJulia``), which push the tangent through Julia's pushforwards
(``*_pushforward_batched`` in ``_glue.jl``, the transposes of PySpectral.jl's
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

Top-k on the Julia backend has no forward mode: it raises the native top-k's
DerivativeError.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _spectra import (
    fd_directional,
    hermitian_with_spectrum,
    matrix_with_spectrum,
    randn,
    random_like,
    rel_err,
)

import pyspectral as ps
from pyspectral import _common as C
from pyspectral import _julia
from pyspectral._julia import GLUE_FUNCTIONS
from pyspectral.exceptions import DerivativeError
from pyspectral.pullbacks.eigh import eigh_pushforward
from pyspectral.pullbacks.svd import svd_pushforward

DTYPES = [torch.float64, torch.complex128]
ALL_DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
TOL = 1e-7  # relative, against a fourth-order stencil with h = 1e-4
CUBE = (lambda s: s**3 + s, lambda s: 3 * s**2 + 1)
SIN = (torch.sin, torch.cos)

_OK, _WHY = _julia.status()  # the real runtime, probed once (never starts Julia)
needs_julia = pytest.mark.skipif(not _OK, reason="Julia is not installed: " + _WHY)


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


def assert_julia_pushed(backend: str) -> None:
    """On the Julia backend, the tangents came from Julia's pushforwards."""
    if backend == "julia":
        assert [c for c in _julia.runtime.calls if "pushforward" in c.name]


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
    assert_julia_pushed(backend)


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
    assert_julia_pushed(backend)


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
    assert_julia_pushed(backend)


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
        return ps.matrix_function(X, f, uplo, backend=backend)

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
        (lambda X: (lambda U, S, Vh: U @ Vh)(*ps.svd(X, backend=b)), A),
        (lambda X: ps.svd(X, full_matrices=True, backend=b).S, A.mT),
        (lambda X: ps.svdvals(X, backend=b), A),
        (lambda X: ps.svd_function(X, ("pow", 0.5), backend=b), A),
        (lambda X: ps.svd_function(X, CUBE, backend=b), A.mT),
        (lambda X: ps.svd_function(X, "normalize", backend=b), A),
        (lambda X: ps.eigh(X, "U", backend=b).eigenvalues, H),
        (lambda X: ps.matrix_function(X, "log", backend=b), H),
        (lambda X: ps.matrix_function(X, SIN, "U", backend=b), H),
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
    for kw in ({}, {"full_matrices": True}, {"k": 2}):
        (U, S, Vh), tangents = dual(
            lambda X, kw=kw: tuple(ps.svd(X, **kw, backend="julia")), A, dA
        )
        if "k" in kw:  # the tangents of the top-k: those of all, sliced
            (U, S, Vh), _ = dual(lambda X: tuple(ps.svd(X, backend="julia")), A, dA)
            ref = svd_pushforward(U, S, Vh, dA, C.Options())
            ref = (ref[0][..., :2], ref[1][..., :2], ref[2][..., :2, :])
        else:
            ref = svd_pushforward(U, S, Vh, dA, C.Options())
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
    rw, rV = eigh_pushforward(w, V, dA, uplo, C.Options())
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
            lambda X, kw=kw: tuple(ps.svd(X, backend="julia", gauge="ignore", **kw)),
            A,
            dA,
        )
        ref = svd_pushforward(U, S, Vh, dA, C.Options(**kw))
        plain = svd_pushforward(U, S, Vh, dA, C.Options())
        assert rel_err(tangents[0], ref[0]) < 1e-12
        assert rel_err(tangents[0], plain[0]) > 1e-3  # the option mattered
        call = fake.calls_to("svd_pushforward_batched")[-1]
        assert {k: call.named[k] for k in kw} == kw
    H = hermitian_with_spectrum((1.0, 1.001, 2.0), dtype=torch.complex128)
    dH = random_like(H, seed=3)
    (w, V), (_, dV) = dual(
        lambda X: tuple(ps.eigh(X, backend="julia", degeneracy_atol=0.01)), H, dH
    )
    ref = eigh_pushforward(w, V, dH, "L", C.Options(degeneracy_atol=0.01))[1]
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
            lambda X: tuple(ps.svd(X, backend="julia")),
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
            lambda X: ps.matrix_function(X, "exp", backend="julia"),
            "matrix_function_pushforward_batched",
            "matrix_function_batched",
        ),
        (
            lambda X: ps.matrix_function(X, SIN, backend="julia"),
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
        (lambda X, b: (lambda U, S, Vh: U @ Vh)(*ps.svd(X, backend=b)), A),
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


def test_top_k_on_julia_has_no_forward_mode(fake):
    s = torch.tensor([10 * 0.6**i for i in range(12)], dtype=torch.float64)
    A = matrix_with_spectrum(s.tolist(), 16, 12, seed=8)
    H = hermitian_with_spectrum(s.tolist(), seed=8)
    with fwAD.dual_level():
        with pytest.raises(DerivativeError, match="forward-mode"):
            ps.svd(fwAD.make_dual(A, A), k=3, method="randomized", backend="julia")
        with pytest.raises(DerivativeError, match="forward-mode"):
            ps.eigh(fwAD.make_dual(H, H), k=3, method="randomized", backend="julia")


def test_the_glue_defines_what_the_bridge_calls():
    """Every ``*_batched`` glue function the bridge calls is defined in
    ``_glue.jl`` and imitated by the stand-in (the Julia file cannot run here)."""
    called = set(re.findall(r'"(\w+_batched!?)"', Path(_julia.__file__).read_text()))
    glue = _julia.GLUE.read_text()
    defined = set(re.findall(r"^function (\w+!?)\(", glue, re.M))
    defined |= set(re.findall(r"^(\w+!?)\([^\n]*\) =", glue, re.M))
    assert {n for n in called if "pushforward" in n} >= {
        "svd_pushforward_batched",
        "svd_function_pushforward_batched",
        "svd_function_values_pushforward_batched",
        "eigh_pushforward_batched",
        "matrix_function_pushforward_batched",
        "matrix_function_values_pushforward_batched",
    }
    assert called <= defined, sorted(called - defined)
    assert called <= set(GLUE_FUNCTIONS), sorted(called - set(GLUE_FUNCTIONS))


def test_pushforwards_mirror_julia():
    """Each exported Julia pushforward has its Python twin, of the same name,
    in the file of the same name (as test_layout checks for the pullbacks),
    and the frules cover the operations that have rrules (top-k aside)."""
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
    assert rrules >= {"svd", "eigh", "matrix_function"}
    assert frules == rrules - {"svd_topk", "eigh_topk"}


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
        for kw in ({}, {"full_matrices": True}):
            (U, S, Vh), tangents = dual(
                lambda X, kw=kw: tuple(ps.svd(X, backend="julia", **kw)), A, dA
            )
            for t, r in zip(tangents, svd_pushforward(U, S, Vh, dA, C.Options())):
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
        rw, rV = eigh_pushforward(w, V, dH, uplo, C.Options())
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
    check_against_fd(lambda X: ps.matrix_function(X, "sqrt", backend="julia"), H)
    check_against_fd(
        lambda X: projector(ps.eigh(X, "U", backend="julia").eigenvectors, slice(1, 3)),
        H,
    )
