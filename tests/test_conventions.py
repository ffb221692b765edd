"""torch.linalg's conventions, and the warnings' manners.

- ``UPLO`` in either case; only the ``UPLO`` triangle (and the real part of
  its diagonal) must be finite, as torch reads only that.
- Errors catchable as torch's: for each bad input the class that
  ``torch.linalg`` raises *here* (measured live, not assumed) is a base of
  pyspectral's error, besides ``PySpectralError`` and ValueError/TypeError.
- ``out=`` with torch's semantics (svd, svdvals, eigh, eigvalsh), refused
  with ``k`` or ``backend="julia"``.
- Warnings name the user's line (this file), also when raised inside
  autograd's backward, and one event warns once.

Each behaviour runs on the native backend and, where a backend is chosen,
with ``backend="julia"`` against the stand-in Julia runtime.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from _fake_julia import installed
from _spectra import hermitian_with_spectrum, matrix_with_spectrum, random_like

import pyspectral as ps

HERE = __file__
NAN, INF = float("nan"), float("inf")


def herm(n: int = 4, dtype=torch.float64) -> torch.Tensor:
    return hermitian_with_spectrum([0.5, 1.0, 2.0, 4.0][:n], dtype=dtype, seed=1)


# ------------------------------------------------------------------- UPLO


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("upper, lower", [("L", "l"), ("U", "u")])
def test_uplo_in_either_case(upper, lower, dtype, backend) -> None:
    A = herm(dtype=dtype)
    A = A + torch.triu(torch.ones_like(A), 1) * 7  # garbage in the upper triangle
    if upper == "U":
        A = A.mH.clone()  # ... then in the lower one
    w, V = ps.eigh(A, lower, backend=backend)
    w0, V0 = torch.linalg.eigh(A, UPLO=upper)
    assert torch.allclose(w, w0, atol=1e-12)
    assert torch.allclose(ps.eigvalsh(A, lower, backend=backend), w0, atol=1e-12)
    assert torch.equal(torch.linalg.eigh(A, UPLO=lower)[0], w0)  # torch agrees
    X = A.clone().requires_grad_()
    W = random_like(A, seed=2)
    for f in ("exp", "sqrt"):  # (one triangle read: the other holds garbage)
        Y = ps.matrix_function(X, f, lower, backend=backend, check_hermitian=False)
        Y0 = ps.matrix_function(X, f, upper, backend=backend, check_hermitian=False)
        assert torch.allclose(Y, Y0, atol=1e-12)
        (g,) = torch.autograd.grad((Y * W).real.sum(), X)
        (g0,) = torch.autograd.grad((Y0 * W).real.sum(), X)
        assert torch.allclose(g, g0, atol=1e-12)
    # as a keyword too
    assert torch.allclose(ps.eigh(A, UPLO=lower, backend=backend)[0], w0, atol=1e-12)


# ----------------------------------------------- only what is read is checked


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U", "l"])
def test_non_finite_entries_of_the_triangle_not_read(uplo, dtype, bad, backend):
    A = herm(dtype=dtype)
    B = A.clone()
    unread = (0, 2) if uplo.upper() == "L" else (2, 0)
    B[unread] = bad
    # torch reads one triangle: no error, the clean matrix's results
    w0 = torch.linalg.eigvalsh(A, UPLO=uplo)
    assert torch.equal(torch.linalg.eigvalsh(B, UPLO=uplo), w0)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(ps.eigh(B, uplo, backend=backend)[0], w0, atol=tol)
    assert torch.allclose(ps.eigvalsh(B, uplo, backend=backend), w0, atol=tol)
    # (matrix_function reads one triangle where asked to; by default it checks
    # that A is Hermitian, reading both: the non-finite entry is refused)
    Y = ps.matrix_function(B, "exp", uplo, backend=backend, check_hermitian=False)
    assert torch.allclose(Y, ps.matrix_function(A, "exp", uplo), atol=tol * 10)
    with pytest.raises(ps.NonFiniteError, match="reads both triangles"):
        ps.matrix_function(B, "exp", uplo, backend=backend)
    # the gradient is finite: torch's Hermitian one by default, and the one
    # w.r.t. the triangle read (zero on the other) with gradient="triangle"
    X = B.clone().requires_grad_()
    (g,) = torch.autograd.grad(ps.eigh(X, uplo, backend=backend)[0].sum(), X)
    assert bool(torch.isfinite(g).all()) and torch.equal(g, g.mH)
    w = ps.eigh(X, uplo, backend=backend, gradient="triangle")[0]
    (g,) = torch.autograd.grad(w.sum(), X)
    assert bool(torch.isfinite(g).all()) and g[unread] == 0
    # the read triangle must be finite ...
    C = A.clone()
    C[unread[::-1]] = bad
    with pytest.raises(ps.NonFiniteError, match=f"UPLO='{uplo.upper()}' triangle"):
        ps.eigh(C, uplo, backend=backend)
    # ... and both, when both are read
    with pytest.raises(ps.NonFiniteError, match="reads both triangles"):
        ps.eigh(B, uplo, check_hermitian=True, backend=backend)
    with pytest.raises(ps.NonFiniteError):
        ps.matrix_function(B, "exp", uplo, check_hermitian=True, backend=backend)


def test_imaginary_part_of_the_diagonal_is_not_read(backend) -> None:
    A = herm(dtype=torch.complex128)
    B = A.clone()
    B[1, 1] = complex(float(A[1, 1].real), NAN)
    w0 = torch.linalg.eigvalsh(A)
    assert torch.equal(torch.linalg.eigvalsh(B), w0)  # torch ignores it
    assert torch.allclose(ps.eigvalsh(B, backend=backend), w0, atol=1e-12)
    B[1, 1] = complex(NAN, 0.0)
    with pytest.raises(ps.NonFiniteError):
        ps.eigvalsh(B, backend=backend)


# ------------------------------------------- errors catchable as torch's


def torch_error(call) -> type[BaseException] | None:
    """The class of the exception ``call()`` raises (None if it returns)."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - measuring which class torch raises
        return type(err)
    return None


def on_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


X34 = torch.randn(3, 4, dtype=torch.float64)
X33 = torch.randn(3, 3, dtype=torch.float64)
NAN33 = X33.clone()
NAN33[2, 0] = NAN  # lower triangle: read by every op


def svd_polar(A, **kw):
    return ps.svd_function(A, "polar", **kw)


def matrix_exp(A, *args, **kw):
    return ps.matrix_function(A, "exp", *args, **kw)


# pyspectral op -> torch.linalg's; that of a composite is the decomposition it runs
TORCH_TWINS = {
    "svd": (ps.svd, torch.linalg.svd),
    "svdvals": (ps.svdvals, torch.linalg.svdvals),
    "svd_function": (svd_polar, torch.linalg.svd),
    "eigh": (ps.eigh, torch.linalg.eigh),
    "eigvalsh": (ps.eigvalsh, torch.linalg.eigvalsh),
    "matrix_function": (matrix_exp, torch.linalg.eigh),
}
SQUARE = ("eigh", "eigvalsh", "matrix_function")

BAD_INPUTS = {
    "NaN": ((NAN33,), ps.NonFiniteError),
    "1-d": ((torch.ones(3, dtype=torch.float64),), ps.ShapeError),
    "0-d": ((torch.tensor(1.0),), ps.ShapeError),
    "int64": ((torch.ones(3, 3, dtype=torch.int64),), ps.DtypeError),
    "bool": ((torch.ones(3, 3, dtype=torch.bool),), ps.DtypeError),
    "float16": ((torch.ones(3, 3, dtype=torch.float16),), ps.DtypeError),
    "bfloat16": ((torch.ones(3, 3, dtype=torch.bfloat16),), ps.DtypeError),
    "list": (([[1.0, 0.0], [0.0, 1.0]],), ps.InputTypeError),
    "non-square": ((X34,), ps.ShapeError),
    "UPLO 'x'": ((X33, "x"), ps.UPLOError),
    "UPLO 'Lo'": ((X33, "Lo"), ps.UPLOError),
    "UPLO 1": ((X33, 1), ps.InputTypeError),
}


def applies(op: str, case: str) -> bool:
    """Whether ``op`` takes the argument that ``case`` gets wrong."""
    return op in SQUARE or not (case == "non-square" or case.startswith("UPLO"))


@pytest.mark.parametrize(
    "op, case", [(op, c) for op in TORCH_TWINS for c in BAD_INPUTS if applies(op, c)]
)
def test_errors_are_catchable_as_torch_linalg_errors(op, case, backend) -> None:
    args, ours = BAD_INPUTS[case]
    call, twin = TORCH_TWINS[op]
    theirs = torch_error(lambda: twin(*args))
    if theirs is None and NAN33.device.type != "cpu":
        # torch.linalg on a GPU need not check (cuSOLVER may return NaN):
        # the class to be catchable as is then the one it raises on the CPU
        theirs = torch_error(lambda: twin(*(on_cpu(a) for a in args)))
    assert theirs is not None, f"torch.linalg accepted {case}"
    with pytest.raises(ours) as e:
        call(*args, backend=backend)
    assert isinstance(e.value, theirs), (type(e.value).__mro__, theirs)
    assert isinstance(e.value, ps.PySpectralError)
    # the bases they had before stay: a wrong value is a ValueError, a wrong
    # type a TypeError
    wrong_type = issubclass(ours, ps.InputTypeError)
    assert isinstance(e.value, TypeError if wrong_type else ValueError)
    assert str(e.value).startswith(f"{op}: ")


def test_inf_input_is_refused_though_torch_returns_nan() -> None:
    """torch.linalg runs LAPACK on Inf and returns NaN; pyspectral refuses
    it, with the class torch uses for NaN."""
    A = X33.clone()
    A[1, 0] = INF
    assert torch.isnan(torch.linalg.svdvals(A.cpu())).any()  # LAPACK's answer
    with pytest.raises(torch.linalg.LinAlgError, match="NaN or Inf"):
        ps.svdvals(A)


# -------------------------------------------------------------------- out=


def test_svd_out_as_torch() -> None:
    A = matrix_with_spectrum([3.0, 2.0, 1.0], 4, 3, seed=3)
    U, S, Vh = (torch.empty(0, dtype=torch.float64) for _ in range(3))
    res = ps.svd(A, out=(U, S, Vh), full_matrices=False)
    assert isinstance(res, ps.SVDResult)
    assert res.U is U and res.S is S and res.Vh is Vh  # written in place
    ref = torch.linalg.svd(A, full_matrices=False)
    for ours, theirs in zip(res, ref):
        assert torch.equal(ours, theirs)
    # full_matrices, into tensors of another shape: resized, with torch's warning
    outs = tuple(torch.empty(2, dtype=torch.float64) for _ in range(3))
    with pytest.warns(UserWarning, match="resized"):
        ps.svd(A, full_matrices=True, out=outs)
    assert outs[0].shape == (4, 4) and outs[2].shape == (3, 3)
    S = torch.empty(3, dtype=torch.float64)
    assert ps.svdvals(A, out=S) is S and torch.equal(S, torch.linalg.svdvals(A))


def test_eigh_out_as_torch() -> None:
    A = herm()
    A[0, 3] = NAN  # not read
    w, V = torch.empty(4, dtype=torch.float64), torch.empty(4, 4, dtype=torch.float64)
    res = ps.eigh(A, "l", out=(w, V))
    assert isinstance(res, ps.EighResult) and res.eigenvalues is w
    w0, V0 = torch.linalg.eigh(A, UPLO="L")
    assert torch.equal(w, w0) and torch.equal(V, V0)
    out = torch.empty(4, dtype=torch.float64)
    assert ps.eigvalsh(A, out=out) is out
    assert torch.equal(out, torch.linalg.eigvalsh(A))


@pytest.mark.parametrize("op", ["svd", "svdvals", "eigh", "eigvalsh"])
def test_out_errors_are_torch_errors(op) -> None:
    ours, twin = TORCH_TWINS[op]
    A = herm()
    wrong_dtype = (
        torch.empty(0, dtype=torch.float32)
        if op in ("svdvals", "eigvalsh")
        else tuple(torch.empty(0, dtype=torch.float32) for _ in range(len(twin(A))))
    )
    with pytest.raises(RuntimeError, match="dtype") as e:
        ours(A, out=wrong_dtype)
    with pytest.raises(RuntimeError, match="dtype") as t:
        twin(A, out=wrong_dtype)
    assert type(e.value) is type(t.value)
    # no autograd with out=, as in torch
    X = A.clone().requires_grad_()
    out = (
        torch.empty(0, dtype=torch.float64)
        if op in ("svdvals", "eigvalsh")
        else tuple(torch.empty(0, dtype=torch.float64) for _ in range(len(twin(A))))
    )
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        ours(X, out=out)
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        twin(X, out=out)
    # refused where torch has no such call, with a pyspectral error
    with pytest.raises(ps.InputError, match="native backend"):
        ours(A, out=out, backend="julia")
    with pytest.raises(ps.BackendError, match="backend must be one of"):
        ours(A, out=out, backend="fast")
    if op in ("svd", "eigh"):
        with pytest.raises(ps.InputError, match="out= is not supported with k"):
            ours(A, out=out, k=2)


# ------------------------------------------------------------------ warnings


def degenerate_svd_input() -> torch.Tensor:
    return matrix_with_spectrum([3.0, 2.0, 2.0, 1.0], 5, 4, seed=4)


def gauge_dependent_loss(A, backend="torch"):
    U, S, Vh = ps.svd(A, backend=backend, full_matrices=False)
    return U[:, 1].sum()  # one vector of the degenerate pair: basis dependent


def only(record, category):
    found = [w for w in record if issubclass(w.category, category)]
    assert len(found) == 1, [str(w.message) for w in found]
    return found[0]


def backward_line(A: torch.Tensor, line: int) -> int:
    """The line a warning raised in the backward names: the user's ``line``,
    whose frame is on the stack of the thread that runs the backward; for
    CUDA tensors autograd runs it on a device thread, with no user frame, and
    the warning names the forward call (in ``gauge_dependent_loss``)."""
    if A.device.type == "cpu":
        return line
    return gauge_dependent_loss.__code__.co_firstlineno + 1


@pytest.mark.parametrize(
    "entry", ["backward", "autograd.grad", "func.grad", "create_graph"]
)
def test_gauge_warning_names_the_users_line(entry) -> None:
    A = degenerate_svd_input().requires_grad_()
    with pytest.warns(ps.GaugeWarning) as record:
        if entry == "backward":
            line = _line() + 1
            gauge_dependent_loss(A).backward()
        elif entry == "autograd.grad":
            line = _line() + 1
            torch.autograd.grad(gauge_dependent_loss(A), A)
        elif entry == "func.grad":
            line = _line() + 1
            torch.func.grad(gauge_dependent_loss)(A.detach())
        else:
            line = _line() + 1
            torch.autograd.grad(gauge_dependent_loss(A), A, create_graph=True)
    w = only(record, ps.GaugeWarning)
    assert w.filename == HERE, w.filename
    assert w.lineno == backward_line(A, line)


def _line() -> int:
    import inspect

    return inspect.currentframe().f_back.f_lineno


def test_backward_with_no_user_frame_names_the_forward_call() -> None:
    """A backward run where no frame of the user's is on the stack (CUDA
    tensors: autograd's device threads; here a thread that runs
    ``torch.autograd.backward`` itself) names the line of the forward call."""
    A = degenerate_svd_input().requires_grad_()
    loss = gauge_dependent_loss(A)  # the forward call: in the helper above
    with pytest.warns(ps.GaugeWarning) as record:
        t = threading.Thread(target=torch.autograd.backward, args=(loss,))
        t.start()
        t.join(60)
    w = only(record, ps.GaugeWarning)
    assert w.filename == HERE
    # the user's line that called pyspectral: ps.svd in gauge_dependent_loss
    assert w.lineno == gauge_dependent_loss.__code__.co_firstlineno + 1


def test_gauge_warning_of_the_julia_backend_names_the_users_line() -> None:
    A = degenerate_svd_input().requires_grad_()
    with installed(), pytest.warns(ps.GaugeWarning) as record:
        line = _line() + 1
        gauge_dependent_loss(A, backend="julia").backward()
    w = only(record, ps.GaugeWarning)
    assert (w.filename, w.lineno) == (HERE, line)


def test_warning_filters_and_registry_work_as_for_warnings_warn() -> None:
    A = degenerate_svd_input().requires_grad_()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")  # once per location
        for _ in range(3):
            gauge_dependent_loss(A).backward()  # one location
    assert len([w for w in record if w.category is ps.GaugeWarning]) == 1
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=ps.GaugeWarning, module=__name__)
        with pytest.raises(ps.GaugeWarning):
            gauge_dependent_loss(A).backward()


@pytest.mark.parametrize("create_graph", [False, True])
def test_truncation_inside_a_cluster_warns_once(create_graph, backend) -> None:
    """One event, one warning: the forward reports the truncation; the
    backward, which re-evaluates f on the same spectrum, stays silent."""
    A = degenerate_svd_input().requires_grad_()
    W = random_like(A, seed=5)
    with pytest.warns(ps.GaugeWarning, match=r"\('truncate', 2\) cuts") as record:
        line = _line() + 1
        Y = ps.svd_function(A, ("truncate", 2), backend=backend)
        torch.autograd.grad((Y * W).sum(), A, create_graph=create_graph)
    w = only(record, ps.GaugeWarning)
    assert (w.filename, w.lineno) == (HERE, line)
