"""The Julia backend against real Julia: agreement with the native backend
(values and gradients, all ops, dtypes, batches, degenerate spectra), zero
copy as Julia sees it, ps.julia.function through rrules and Zygote, threads,
and the torch-before-juliacall import order.

Skipped as a whole where Julia is not installed (the reason says why); the
bridge logic itself is tested everywhere in test_julia_bridge.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from _spectra import fd_grad, hermitian, hermitian_with_spectrum, randn, spd

import pyspectral as ps
from pyspectral import _common as C
from pyspectral import _julia
from pyspectral.exceptions import DomainError, GaugeError, GaugeWarning, JuliaError

_OK, _WHY = _julia.status()  # the real runtime, probed once (never starts Julia)
pytestmark = pytest.mark.skipif(not _OK, reason="Julia is not installed: " + _WHY)

DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
SHAPES = [(5, 3), (3, 5), (4, 4)]
BATCHES = [(), (3,), (2, 3)]
GRAD_DTYPES = [torch.float64, torch.complex128]


def tol(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-10


def with_spectrum(m, n, s, dtype=torch.float64, seed=0):
    """An m x n matrix with the given singular values (exact repeats, zeros)."""
    Q1 = torch.linalg.qr(randn(m, m, dtype=dtype, seed=seed))[0]
    Q2 = torch.linalg.qr(randn(n, n, dtype=dtype, seed=seed + 1))[0]
    k = min(m, n)
    S = torch.zeros(m, n, dtype=dtype)
    S[range(k), range(k)] = torch.tensor(s, dtype=torch.float64).to(dtype)
    return Q1 @ S @ Q2.mH


def assert_same_basis(Q, R, atol):
    P = (Q.mH @ R).abs()
    eye = torch.eye(P.shape[-1], dtype=P.dtype).expand_as(P)
    torch.testing.assert_close(P, eye, atol=atol, rtol=0)


def grad_of(loss_fn, A):
    A = A.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss_fn(A), A)
    return g


def both(loss, A, **kw):
    """Gradients of ``loss(A, backend)`` on the Julia and the native backend."""
    return (
        grad_of(lambda X: loss(X, "julia", **kw), A),
        grad_of(lambda X: loss(X, "torch", **kw), A),
    )


def jl():
    _julia.glue()
    return sys.modules["juliacall"].Main


def julia_pointer(x) -> int:
    """The address Julia sees for ``x`` (a numpy view or a Julia array handle)."""
    return int(jl().seval("x -> UInt(pointer(x))")(x))


# --------------------------------------------------------------- forward


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_agrees(dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    U, S, Vh = ps.svd(A, backend="julia")
    U0, S0, Vh0 = ps.svd(A, backend="torch")
    assert U.dtype == dtype and S.dtype == S0.dtype and U.shape == U0.shape
    assert U.is_contiguous() and S.is_contiguous() and Vh.is_contiguous()
    torch.testing.assert_close(S, S0, atol=tol(dtype), rtol=tol(dtype))
    torch.testing.assert_close(
        (U * S.unsqueeze(-2).to(dtype)) @ Vh, A, atol=tol(dtype) * 10, rtol=0
    )
    assert_same_basis(U, U0, tol(dtype) * 10)
    assert_same_basis(Vh.mH, Vh0.mH, tol(dtype) * 10)
    torch.testing.assert_close(
        ps.svdvals(A, backend="julia"), S0, atol=tol(dtype), rtol=tol(dtype)
    )


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_full_and_top_k_agree(dtype, shape):
    A = randn(2, *shape, dtype=dtype)
    U, S, Vh = ps.svd(A, full_matrices=True, backend="julia")
    k = min(shape)
    rec = (U[..., :k] * S.unsqueeze(-2).to(dtype)) @ Vh[..., :k, :]
    torch.testing.assert_close(rec, A, atol=tol(dtype) * 10, rtol=0)
    for Q in (U, Vh):
        eye = torch.eye(Q.shape[-1], dtype=dtype).expand_as(Q)
        torch.testing.assert_close(Q.mH @ Q, eye, atol=tol(dtype) * 10, rtol=0)
    U, S, Vh = ps.svd(A, k=2, backend="julia")
    U0, S0, Vh0 = ps.svd(A, k=2, backend="torch")
    torch.testing.assert_close(S, S0, atol=tol(dtype), rtol=tol(dtype))
    assert_same_basis(U, U0, tol(dtype) * 10)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_agrees(dtype, uplo, batch):
    H = hermitian(*batch, 4, 4, dtype=dtype)
    junk = 100 * randn(*batch, 4, 4, dtype=dtype, seed=1)
    A = (
        torch.tril(H) + torch.triu(junk, 1)
        if uplo == "L"
        else torch.triu(H) + (torch.tril(junk, -1))
    )
    w, V = ps.eigh(A, uplo, backend="julia")
    w0, V0 = ps.eigh(A, uplo, backend="torch")
    torch.testing.assert_close(w, w0, atol=tol(dtype) * 100, rtol=tol(dtype))
    torch.testing.assert_close(
        (V * w.unsqueeze(-2).to(dtype)) @ V.mH, H, atol=tol(dtype) * 100, rtol=0
    )
    assert_same_basis(V, V0, tol(dtype) * 10)
    torch.testing.assert_close(
        ps.eigvalsh(A, uplo, backend="julia"),
        w0,
        atol=tol(dtype) * 100,
        rtol=tol(dtype),
    )


@pytest.mark.parametrize(
    "f",
    ["polar", ("truncate", 2), ("threshold", 0.5), ("pow", 3), "normalize"],
    ids=str,
)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_svd_function_agrees(dtype, shape, f):
    A = randn(2, *shape, dtype=dtype)
    Y = ps.svd_function(A, f, backend="julia")
    torch.testing.assert_close(
        Y, ps.svd_function(A, f, backend="torch"), atol=tol(dtype) * 10, rtol=0
    )


@pytest.mark.parametrize(
    "f", ["sqrt", "invsqrt", "log", "exp", ("pow", 2), ("pow", -1.5)], ids=str
)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_function_agrees(dtype, uplo, f):
    A = spd(2, 4, 4, dtype=dtype) / 4
    Y = ps.matrix_function(A, f, uplo, backend="julia")
    torch.testing.assert_close(
        Y,
        ps.matrix_function(A, f, uplo, backend="torch"),
        atol=tol(dtype) * 100,
        rtol=tol(dtype),
    )


# ------------------------------------------------------------- gradients


def svd_loss(A, backend, full=False, k=None):
    U, S, Vh = ps.svd(A, full_matrices=full, k=k, backend=backend)
    r = min(A.shape[-2:])
    W = randn(*A.shape, dtype=A.dtype, seed=1)
    loss = (S**2 * torch.arange(1, S.shape[-1] + 1)).sum()
    loss = loss + ((U[..., :r] @ Vh[..., :r, :]) * W).real.sum()
    Pu = U[..., :1] @ U[..., :1].mH
    Pv = Vh[..., :1, :].mH @ Vh[..., :1, :]
    loss = loss + (Pu * randn(*Pu.shape, dtype=A.dtype, seed=2)).real.sum()
    loss = loss + (Pv * randn(*Pv.shape, dtype=A.dtype, seed=3)).real.sum()
    return loss


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_gradients_agree(dtype, shape, batch):
    A = randn(*batch, *shape, dtype=dtype)
    for kw in ({}, {"full": True}, {"k": 2}):
        g, g0 = both(svd_loss, A, **kw)
        torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    "spectrum",
    [
        (3.0, 1.0, 1.0),
        (2.0, 2.0, 2.0),
        (3.0, 1.0, 0.0),
        (1.0, 0.0, 0.0),
        (1.0, 1.0, 0.0),
    ],
    ids=str,
)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (3, 3)], ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_degenerate_gradients_agree(dtype, shape, spectrum):
    """Exactly degenerate and rank-deficient spectra, gauge-invariant losses:
    symmetric functions of S, the projector onto a complete cluster, and the
    exact composites svd_function / matrix_function."""
    A = with_spectrum(*shape, spectrum, dtype=dtype)
    W = randn(*shape, dtype=dtype, seed=4)
    Wp = randn(shape[0], shape[0], dtype=dtype, seed=5)
    top_is_simple = spectrum[0] != spectrum[1]

    def loss(X, backend):
        U, S, Vh = ps.svd(X, backend=backend)
        out = (S**3).sum()
        if top_is_simple:  # the projector on a complete cluster
            out = out + ((U[:, :1] @ U[:, :1].mH) * Wp).real.sum()
        Y = ps.svd_function(X, ("pow", 2), backend=backend)
        return out + (Y * W).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)

    H = A.mH @ A
    Wh = randn(shape[1], shape[1], dtype=dtype, seed=6)

    def hloss(X, backend):
        w, V = ps.eigh(X, backend=backend)
        return (w**2).sum() + (
            ps.matrix_function(X, "exp", backend=backend) * Wh
        ).real.sum()

    g, g0 = both(hloss, H)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_eigh_gradients_agree(dtype, uplo, batch):
    A = randn(*batch, 4, 4, dtype=dtype)

    def loss(X, backend):
        w, V = ps.eigh(X, uplo, backend=backend)
        P = V[..., :2] @ V[..., :2].mH
        return (w * torch.arange(1.0, 5.0, dtype=w.dtype)).sum() + (
            P * randn(*P.shape, dtype=dtype, seed=4)
        ).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)
    g, g0 = both(lambda X, b: (ps.eigvalsh(X, uplo, backend=b) ** 3).sum(), A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    "f", ["polar", ("truncate", 2), ("pow", 3), "normalize"], ids=str
)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_function_gradients_agree(dtype, f):
    A = randn(2, 5, 3, dtype=dtype)
    W = randn(2, 5, 3, dtype=dtype, seed=5)
    g, g0 = both(lambda X, b: (ps.svd_function(X, f, backend=b) * W).real.sum(), A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("f", ["sqrt", "log", "exp", ("pow", 2)], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_matrix_function_gradients_agree(dtype, uplo, f):
    A = spd(2, 4, 4, dtype=dtype) / 4
    W = randn(2, 4, 4, dtype=dtype, seed=6)

    def loss(X, b):
        return (ps.matrix_function(X, f, uplo, backend=b) * W).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


# User (f, f_prime) pairs: evaluated in Python on Julia's spectrum, Julia gets
# the values (PySpectral.SpectralValues). Smooth f, so finite differences of a
# loss of Y (gauge invariant: Y is basis free) decide at ties and zeros too.

CUBE = (lambda s: s**3 + s, lambda s: 3 * s**2 + 1)
SIN = (torch.sin, torch.cos)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pairs_agree(dtype, batch):
    A = randn(*batch, 5, 3, dtype=dtype)
    for X in (A, A.mT):
        torch.testing.assert_close(
            ps.svd_function(X, CUBE, backend="julia"),
            ps.svd_function(X, CUBE, backend="torch"),
            atol=tol(dtype) * 10,
            rtol=tol(dtype),
        )
    H = hermitian(*batch, 4, 4, dtype=dtype)
    for uplo in ("L", "U"):
        torch.testing.assert_close(
            ps.matrix_function(H, SIN, uplo, backend="julia"),
            ps.matrix_function(H, SIN, uplo, backend="torch"),
            atol=tol(dtype) * 10,
            rtol=tol(dtype),
        )


@pytest.mark.parametrize(
    "spectrum", [(3.0, 2.0, 1.0), (2.0, 2.0, 1.0), (2.0, 1.0, 0.0), (1.0, 0.0, 0.0)]
)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (3, 3)], ids=str)
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_svd_function_pair_gradients(dtype, shape, spectrum):
    A = with_spectrum(*shape, spectrum, dtype=dtype)
    W = randn(*shape, dtype=dtype, seed=7)

    def loss(X, backend):
        return (ps.svd_function(X, CUBE, backend=backend) * W).real.sum()

    g, g0 = both(loss, A)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)
    g_fd = fd_grad(lambda X: loss(X, "julia"), A)
    torch.testing.assert_close(g, g_fd, atol=1e-7, rtol=1e-7)


@pytest.mark.parametrize(
    "spectrum", [(-1.0, 0.5, 2.0, 3.0), (1.0, 1.0, 2.0, 2.0), (0.5,) * 4], ids=str
)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_matrix_function_pair_gradients(dtype, uplo, spectrum):
    H = hermitian_with_spectrum(spectrum, dtype=dtype, seed=3)
    W = randn(4, 4, dtype=dtype, seed=8)

    def loss(X, backend):
        return (ps.matrix_function(X, SIN, uplo, backend=backend) * W).real.sum()

    g, g0 = both(loss, H)
    torch.testing.assert_close(g, g0, atol=1e-9, rtol=1e-9)
    # the gradient w.r.t. the entries read (the uplo triangle), as FD sees it
    g_fd = fd_grad(lambda X: loss(X, "julia"), H)
    torch.testing.assert_close(g, g_fd, atol=1e-7, rtol=1e-7)


def test_gradcheck_and_double_backward():
    A = randn(4, 3).requires_grad_(True)
    H = spd(3, 3).requires_grad_(True)
    for fn, x in (
        (lambda X: svd_loss(X, "julia"), A),
        (lambda X: ps.svd_function(X, ("pow", 3), backend="julia").sum(), A),
        (lambda X: ps.matrix_function(X, "log", backend="julia").sum(), H),
        (lambda X: ps.svd_function(X, CUBE, backend="julia").sum(), A),
        (lambda X: ps.matrix_function(X, SIN, backend="julia").sum(), H),
        (lambda X: ps.eigh(X + X.mT, backend="julia")[0].pow(2).sum(), H),
    ):
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))


def test_gauge_policy_through_julia():
    A = with_spectrum(5, 3, (3.0, 1.0, 1.0)).requires_grad_(True)
    U, S, Vh = ps.svd(A, backend="julia")
    with pytest.warns(GaugeWarning, match=r"^svd: "):
        U[:, 1].sum().backward()
    U, S, Vh = ps.svd(A, backend="julia", gauge="raise")
    with pytest.raises(GaugeError, match=r"svd \(Julia\)"):
        U[:, 1].sum().backward()


def test_julia_errors_carry_the_julia_message():
    with pytest.raises(DomainError, match=r"matrix_function \(Julia\)"):
        ps.matrix_function(-spd(3, 3), "log", backend="julia")
    with pytest.raises(JuliaError, match="UndefVarError"):
        ps.julia.function("no_such_function_anywhere")


# ------------------------------------------------------------- zero copy


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_copy_input(dtype, batch):
    A = randn(*batch, 5, 3, dtype=dtype)
    At = _julia.to_julia(A)
    assert julia_pointer(At) == A.data_ptr()
    # Julia indexes it as the n x m x B array of transposes
    size = jl().seval("x -> size(x)")(At)
    assert tuple(size) == (3, 5, max(1, A.numel() // 15))


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_copy_outputs(dtype, batch):
    A = randn(*batch, 5, 3, dtype=dtype)
    (U, S, Vh), (Uj, Sj, Vtj) = _julia.svd(A, False)
    assert julia_pointer(Vtj) == U.data_ptr()
    assert julia_pointer(Sj) == S.data_ptr()
    assert julia_pointer(Uj) == Vh.data_ptr()
    H = hermitian(*batch, 4, 4, dtype=dtype)
    (w, V), (wj, Vj) = _julia.eigh(H, "L")
    assert julia_pointer(wj) == w.data_ptr()
    assert julia_pointer(Vj) == V.data_ptr()


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=str)
def test_julia_writes_into_the_gradient_buffer(dtype):
    """The buffer pyspectral allocates is the one Julia fills: had Julia
    written into a copy, it would still be zero."""
    A = randn(2, 5, 3, dtype=dtype)
    (U, S, Vh), handles = _julia.svd(A, False)
    gS = torch.rand(2, 3, dtype=S.dtype)
    gA = _julia.svd_pullback((A.shape, A.dtype), handles, None, gS, None, C.options())
    torch.testing.assert_close(
        gA, (U * gS.unsqueeze(-2).to(dtype)) @ Vh, atol=1e-12, rtol=0
    )


# ---------------------------------------------------- ps.julia.function


def test_function_logdet_rrule():
    f = ps.julia.function("logdet")
    x = spd(4, 4).requires_grad_(True)
    y = f(x)
    assert y.dim() == 0 and y.dtype == torch.float64
    torch.testing.assert_close(y, torch.logdet(x))
    assert f.last_rule == "rrule"
    assert torch.autograd.gradcheck(f, (x,))


def test_function_inv_rrule():
    f = ps.julia.function("inv")
    x = spd(4, 4).requires_grad_(True)
    torch.testing.assert_close(f(x), torch.linalg.inv(x))
    assert f.last_rule == "rrule"
    assert torch.autograd.gradcheck(f, (x,))


def test_function_several_arguments_and_tuples():
    solve = ps.julia.function("\\")
    A = spd(4, 4).requires_grad_(True)
    b = randn(4, 2, seed=3).requires_grad_(True)
    torch.testing.assert_close(solve(A, b), torch.linalg.solve(A, b))
    assert torch.autograd.gradcheck(solve, (A, b))
    f = ps.julia.function("x -> (sum(abs2, x), 2 .* x)")
    s, y = f(b)
    torch.testing.assert_close(s, (b**2).sum())
    assert f.last_rule == "zygote"
    assert torch.autograd.gradcheck(f, (b,))


def test_function_zygote_path():
    f = ps.julia.function("x -> sum(abs2, x' * x)")
    x = randn(4, 3).requires_grad_(True)
    torch.testing.assert_close(f(x), ((x.T @ x) ** 2).sum())
    assert f.last_rule == "zygote"
    assert torch.autograd.gradcheck(f, (x,))


RULES = """
using ChainRulesCore

PULLBACK_RAN = Ref(false)

# A deliberately wrong pullback (twice the true gradient): only this rrule,
# not Zygote, can produce it.
doubled_sum(x) = sum(x)
function ChainRulesCore.rrule(::typeof(doubled_sum), x::AbstractArray)
    doubled_sum_pullback(dy) = (NoTangent(), fill(2 * unthunk(dy), size(x)))
    return doubled_sum(x), doubled_sum_pullback
end

# A correct one that leaves a trace.
square_norm(x) = sum(abs2, x)
function ChainRulesCore.rrule(::typeof(square_norm), x::AbstractArray)
    function square_norm_pullback(dy)
        PULLBACK_RAN[] = true
        return NoTangent(), 2 .* unthunk(dy) .* x
    end
    return square_norm(x), square_norm_pullback
end
"""


def test_user_rrule_from_an_included_file(tmp_path):
    path = tmp_path / "rules.jl"
    path.write_text(textwrap.dedent(RULES))
    ps.julia.include(path)
    f = ps.julia.function("doubled_sum")
    x = randn(3, 2).requires_grad_(True)
    f(x).backward()
    assert f.last_rule == "rrule"
    torch.testing.assert_close(x.grad, torch.full((3, 2), 2.0, dtype=torch.float64))

    g = ps.julia.function("square_norm")
    assert torch.autograd.gradcheck(g, (x,))
    assert g.last_rule == "rrule"
    assert bool(jl().seval("PySpectralGlue.USER.PULLBACK_RAN[]"))

    # edit the rule, include again: the next call uses the new one
    path.write_text(textwrap.dedent(RULES).replace("2 * unthunk", "3 * unthunk"))
    ps.julia.include(path)
    x.grad = None
    ps.julia.function("doubled_sum")(x).backward()
    torch.testing.assert_close(x.grad, torch.full((3, 2), 3.0, dtype=torch.float64))


# --------------------------------------------------------------- threads


def test_backward_from_a_worker_thread():
    A = randn(2, 5, 3, dtype=torch.complex128).requires_grad_(True)
    loss = (
        svd_loss(A, "julia")
        + ps.matrix_function(
            (A.mH @ A) + torch.eye(3), "sqrt", backend="julia"
        ).real.sum()
    )
    errors = []

    def work():
        try:
            loss.backward()
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    t = threading.Thread(target=work)
    t.start()
    t.join(300)
    assert not t.is_alive() and not errors

    def native(X):
        return (
            svd_loss(X, "torch")
            + ps.matrix_function(
                (X.mH @ X) + torch.eye(3), "sqrt", backend="torch"
            ).real.sum()
        )

    torch.testing.assert_close(A.grad, grad_of(native, A), atol=1e-10, rtol=1e-10)


def test_concurrent_threads():
    results, errors = {}, []

    def work(seed):
        try:
            A = randn(3, 5, 4, seed=seed).requires_grad_(True)
            results[seed] = grad_of(lambda X: svd_loss(X, "julia"), A)
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and len(results) == 6
    for seed, g in results.items():
        g0 = grad_of(lambda X: svd_loss(X, "torch"), randn(3, 5, 4, seed=seed))
        torch.testing.assert_close(g, g0, atol=1e-10, rtol=1e-10)


def test_torch_imported_before_pyspectral():
    code = textwrap.dedent(
        """
        import warnings
        import torch
        import pyspectral as ps
        A = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            U, S, Vh = ps.svd(A, backend="julia")
        assert torch.allclose(U @ torch.diag_embed(S) @ Vh, A, atol=1e-12)
        (U @ Vh).sum().backward()
        assert torch.isfinite(A.grad).all()
        print("import-order warnings:", [str(w.message)[:60] for w in caught])
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_randomized_top_k_agrees(dtype):
    m, n, k = 40, 30, 4
    s = torch.tensor([10 * 0.6**i for i in range(n)], dtype=torch.float64)
    Q1 = torch.linalg.qr(randn(m, m, dtype=dtype, seed=1))[0][:, :n]
    Q2 = torch.linalg.qr(randn(n, n, dtype=dtype, seed=2))[0]
    A = (Q1 * s.to(dtype)) @ Q2.mH
    W = randn(m, n, dtype=dtype, seed=3)
    grads = []
    for backend in ("julia", "torch"):
        X = A.clone().requires_grad_(True)
        U, S, Vh = ps.svd(X, k=k, method="randomized", n_iter=8, backend=backend)
        (((U @ Vh) * W.conj()).real.sum() + (S**2).sum()).backward()
        grads.append(X.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-9, rtol=1e-9)
    H = A.mH @ A
    grads = []
    for backend in ("julia", "torch"):
        X = H.clone().requires_grad_(True)
        w, V = ps.eigh(X, k=k, method="randomized", n_iter=10, backend=backend)
        ((V @ V.mH).real.sum() + w.sum()).backward()
        grads.append(X.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-8, rtol=1e-8)
