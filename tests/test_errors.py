"""Every documented bad input raises a pyspectral error (a ValueError or
TypeError subclass where one fits) whose message names the argument.

One behaviour whichever backend runs: each test runs on the native backend and,
through the ``backend`` fixture, with ``backend="julia"`` against the stand-in
Julia runtime (tests/_fake_julia.py, which reports errors as the real glue
does, Julia's way): the same error class and message, and for bad arguments no
Julia started at all (they are validated in Python first).
"""

from __future__ import annotations

import time

import pytest
import torch
from _fake_julia import installed

import pyspectral as ps
from pyspectral import _backend
from pyspectral.julia import _bridge

A = torch.randn(4, 3, dtype=torch.float64)
H = torch.eye(3, dtype=torch.float64)
OPS = {
    "svd": ps.svd,
    "svdvals": ps.svdvals,
    "svd_function": lambda X, **kw: ps.svd_function(X, "polar", **kw),
    "eigh": ps.eigh,
    "eigvalsh": ps.eigvalsh,
    "matrix_function": lambda X, *a, **kw: ps.matrix_function(X, "exp", *a, **kw),
}
SQUARE_OPS = ["eigh", "eigvalsh", "matrix_function"]


def julia_starts() -> int:
    """How often the stand-in Julia has started (0 on the native backend)."""
    return getattr(_bridge.runtime, "starts", 0)


def raises(error, match):
    """pytest.raises that also checks the error is a PySpectralError."""
    assert issubclass(error, ps.PySpectralError)
    return pytest.raises(error, match=match)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.bool, torch.float16, torch.bfloat16]
)
def test_dtype(op, dtype, backend) -> None:
    with raises(ps.DtypeError, r"^\w+: A must have dtype float32, float64") as e:
        OPS[op](torch.ones(3, 3, dtype=dtype), backend=backend)
    assert isinstance(e.value, TypeError) and str(dtype) in str(e.value)
    assert isinstance(e.value, RuntimeError)  # as torch.linalg raises
    assert str(e.value).startswith(op)
    assert julia_starts() == 0


@pytest.mark.parametrize("op", OPS)
def test_fewer_than_two_dimensions_and_non_tensors(op, backend) -> None:
    for X in (torch.ones(3, dtype=torch.float64), torch.tensor(1.0)):
        with raises(ps.ShapeError, r"A must have shape \(\*, m, n\)") as e:
            OPS[op](X, backend=backend)
        assert isinstance(e.value, ValueError) and str(tuple(X.shape)) in str(e.value)
        assert isinstance(e.value, RuntimeError)  # as torch.linalg raises
    with raises(ps.InputTypeError, "A must be a torch.Tensor") as e:
        OPS[op]([[1.0, 0.0], [0.0, 1.0]], backend=backend)
    assert isinstance(e.value, TypeError)
    assert julia_starts() == 0


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128])
def test_non_finite_entries(op, bad, dtype, backend) -> None:
    X = torch.eye(3, dtype=dtype).repeat(2, 1, 1)
    X[1, 2, 1] = bad  # in the lower triangle, which eigh reads by default
    with raises(ps.NonFiniteError, "A contains NaN or Inf") as e:
        OPS[op](X, backend=backend)
    # catchable as torch.linalg's error for NaN input, and as before
    assert isinstance(e.value, torch.linalg.LinAlgError)
    assert isinstance(e.value, (ps.InputError, ValueError))
    assert julia_starts() == 0


@pytest.mark.parametrize("k", [-1, 2.0, True, "2"])
def test_k_out_of_range(k, backend) -> None:
    # (a k past min(m, n) is a maximum: test_truncation.py)
    msg = r"k must be an integer >= 0 \(the maximum rank; a k past min\(m, n\) keeps"
    with raises(ps.InputError, msg):
        ps.svd(A, k=k, backend=backend)
    with raises(ps.InputError, msg):
        ps.eigh(H, k=k, backend=backend)
    assert julia_starts() == 0


def test_truncation_is_thin_whatever_full_matrices(backend) -> None:
    """full_matrices=True is torch's default: a truncation or a split (thin
    by nature) does not raise under it, and gives what full_matrices=False
    gives."""
    for kw in ({"k": 2}, {"rtol": 0.1}, {"absorb": "left"}):
        full = ps.svd(A, full_matrices=True, backend=backend, **kw)
        thin = ps.svd(A, full_matrices=False, backend=backend, **kw)
        for a, b in zip(full, thin):
            assert a.shape == b.shape and torch.equal(a, b)


def test_top_k_method_arguments(backend) -> None:
    message = "svd: method must be 'auto', 'full', 'randomized' or 'krylov'"
    with raises(ps.InputError, message):
        ps.svd(A, k=2, method="lanczos", backend=backend)
    assert julia_starts() == 0


@pytest.mark.parametrize("op", SQUARE_OPS)
def test_non_square(op, backend) -> None:
    with raises(
        ps.ShapeError, r"A must be square, shape \(\*, n, n\), got shape \(4, 3\)"
    ) as e:
        OPS[op](A, backend=backend)
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, ps.InputError)
    assert julia_starts() == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_non_hermitian_when_checked(dtype, backend) -> None:
    X = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=dtype)
    ps.eigh(X, backend=backend)  # reads the lower triangle only, by default
    ps.matrix_function(X, "exp", backend=backend, check_hermitian=False)  # as asked
    with raises(ps.InputError, "A is not Hermitian: .*eig_function"):  # by default
        ps.matrix_function(X, "exp", backend=backend)
    for op in ("eigh", "matrix_function"):
        with raises(ps.InputError, "A is not Hermitian: .* hermitian_tol"):
            OPS[op](X, check_hermitian=True, backend=backend)
        with raises(ps.InputError, "not Hermitian"):
            OPS[op](X, check_hermitian=True, hermitian_tol=1.0, backend=backend)
        OPS[op](X, check_hermitian=True, hermitian_tol=2.0, backend=backend)
    if dtype.is_complex:
        Y = torch.eye(2, dtype=dtype) + 1e-3j * torch.tensor([[0, 1], [1, 0]])
        with raises(ps.InputError, "not Hermitian"):  # symmetric, not Hermitian
            ps.eigh(Y, check_hermitian=True, backend=backend)


def test_hermitian_check_is_per_matrix(backend) -> None:
    """Issue 15, item 5: the default hermitian_tol is each matrix's own
    ``eps**0.75 max|A_b|`` (as degeneracy_atol). Before, a batch used its
    largest matrix's scale: a non-Hermitian 1e-6 N beside 1e6 H passed."""
    gen = torch.Generator().manual_seed(3)
    N = torch.randn(3, 3, dtype=torch.float64, generator=gen)  # not Hermitian
    Hb = torch.randn(3, 3, dtype=torch.float64, generator=gen)
    Hb = Hb + Hb.mT
    for op in ("eigh", "matrix_function"):
        with raises(ps.InputError, "A is not Hermitian: max"):
            OPS[op](1e-6 * N, check_hermitian=True, backend=backend)
        batch = torch.stack([1e6 * Hb, 1e-6 * N])
        with raises(ps.InputError, r"not Hermitian \(batch element \(1,\) of \(2,\)\)"):
            OPS[op](batch, check_hermitian=True, backend=backend)
        OPS[op](torch.stack([1e6 * Hb, 1e-6 * Hb]), check_hermitian=True)
        # an absolute hermitian_tol applies to every matrix alike
        big = torch.stack([Hb, N]).reshape(1, 2, 3, 3)
        with raises(ps.InputError, r"batch element \(0, 1\)"):
            OPS[op](big, check_hermitian=True, hermitian_tol=1e-3, backend=backend)
    assert julia_starts() == 0


@pytest.mark.parametrize("op", OPS)
def test_unknown_backend(op) -> None:
    with raises(
        ps.BackendError, r"backend must be one of \('auto', 'torch', 'julia'\)"
    ):
        OPS[op](H, backend="jax")


def test_julia_backend_where_julia_is_missing() -> None:
    if _backend.backend_status()["julia"][0]:
        pytest.skip("Julia is installed here")
    for op in OPS.values():
        t = time.perf_counter()
        with raises(ps.BackendError, "Julia") as e:
            op(H, backend="julia")
        assert time.perf_counter() - t < 5 and "backend='torch'" in str(e.value)
        assert isinstance(e.value, RuntimeError)


@pytest.mark.parametrize("f", ["sqrt", "pow", ("pow",), ("root", 2), 3, ("polar", 1)])
def test_unknown_svd_function(f, backend) -> None:
    with raises(ps.InputTypeError, "svd_function: f must be one of") as e:
        ps.svd_function(A, f, backend=backend)
    assert isinstance(e.value, TypeError) and repr(f) in str(e.value)
    assert julia_starts() == 0


@pytest.mark.parametrize(
    "f", ["polar", "normalize", ("truncate", 2), ("pow",), None, ("exp", 1)]
)
def test_unknown_matrix_function(f, backend) -> None:
    with raises(ps.InputTypeError, "matrix_function: f must be one of") as e:
        ps.matrix_function(H, f, backend=backend)
    assert isinstance(e.value, TypeError)
    assert julia_starts() == 0


@pytest.mark.parametrize("k", [0, 4, 2.5, -1])
def test_truncate_out_of_range(k, backend) -> None:
    with raises(ps.InputError, r"\('truncate', k\) needs an integer 1 <= k <= .* = 3"):
        ps.svd_function(A, ("truncate", k), backend=backend)
    assert julia_starts() == 0


def test_negative_threshold(backend) -> None:
    with raises(
        ps.InputError,
        r"\('threshold', tau\) needs a finite real number tau >= 0; got tau = -1",
    ):
        ps.svd_function(A, ("threshold", -1.0), backend=backend)
    assert julia_starts() == 0


# Issue 15, item 3: the number of a named function is checked once, by the
# rules of the keywords (an integer k as svd's k; finite real numbers), with an
# InputError naming it. Before: ("threshold", nan) and ("pow", nan | inf) gave
# NaN output; ("truncate", nan | inf) and matrix_function's ("pow", nan | inf)
# raised raw ValueError / OverflowError; ("truncate", 2.0) was accepted; a 0-d
# tensor p was refused with a message that repeated the documented forms.
NAN, INF = float("nan"), float("inf")
BAD_NUMBERS = [
    ("svd_function", ("threshold", NAN), "tau"),
    ("svd_function", ("threshold", INF), "tau"),
    ("svd_function", ("threshold", "1"), "tau"),
    ("svd_function", ("pow", NAN), "p"),
    ("svd_function", ("pow", INF), "p"),
    ("svd_function", ("pow", -INF), "p"),
    ("svd_function", ("pow", "2"), "p"),
    ("svd_function", ("pow", True), "p"),
    ("svd_function", ("pow", 1j), "p"),
    ("svd_function", ("truncate", NAN), "k"),
    ("svd_function", ("truncate", INF), "k"),
    ("svd_function", ("truncate", 2.0), "k"),
    ("svd_function", ("truncate", True), "k"),
    ("svd_function", ("truncate", torch.tensor(2.0)), "k"),
    ("matrix_function", ("pow", NAN), "p"),
    ("matrix_function", ("pow", INF), "p"),
    ("matrix_function", ("pow", -INF), "p"),
    ("matrix_function", ("pow", "2"), "p"),
    ("matrix_function", ("pow", torch.tensor([1.5])), "p"),
]


@pytest.mark.parametrize("op, f, letter", BAD_NUMBERS, ids=str)
def test_bad_number_of_a_named_function(op, f, letter, backend) -> None:
    X = A if op == "svd_function" else H
    name = f[0]
    with raises(ps.InputError, rf"^{op}: \('{name}', {letter}\) needs ") as e:
        getattr(ps, op)(X, f, backend=backend)
    assert isinstance(e.value, ValueError)
    assert f"got {letter} = {f[1]!r}" in str(e.value)
    assert julia_starts() == 0


@pytest.mark.parametrize(
    "f, same",
    [
        (("pow", torch.tensor(1.5, dtype=torch.float64)), ("pow", 1.5)),
        (("pow", torch.tensor(2)), ("pow", 2)),
        (("threshold", torch.tensor(0.25)), ("threshold", 0.25)),
        (("truncate", torch.tensor(2)), ("truncate", 2)),
    ],
    ids=str,
)
def test_numbers_as_the_keywords_take_them(f, same, backend) -> None:
    """A 0-d tensor (or numpy number) is a number, as for the keywords; Julia
    receives the normalised Python number."""
    np = pytest.importorskip("numpy")
    X = A @ A.mT + torch.eye(4, dtype=A.dtype)
    for g in (f, (f[0], np.float64(same[1]) if f[0] != "truncate" else np.int64(2))):
        for op, Y in (("svd_function", A), ("matrix_function", X)):
            if op == "matrix_function" and f[0] != "pow":
                continue
            got = getattr(ps, op)(Y, g, backend=backend)
            torch.testing.assert_close(got, getattr(ps, op)(Y, same, backend=backend))


@pytest.mark.parametrize("name", ["pow", "threshold", "truncate"])
def test_a_number_that_requires_grad_is_refused(name, backend) -> None:
    """A named function's number gets no gradient: one that asks for it is
    refused (with the user-function form that does differentiate it), never
    silently left without a gradient."""
    x = torch.tensor(2 if name == "truncate" else 0.5, dtype=torch.float64)
    x = x.requires_grad_() if name != "truncate" else x.double().requires_grad_()
    with raises(ps.InputError, rf"\('{name}', \w+\) takes .* no gradient.*lambda s"):
        ps.svd_function(A, (name, x), backend=backend)
    assert julia_starts() == 0


# The domain errors below depend on the spectrum: on the Julia backend Julia
# finds them (1-based, per batch element) and the bridge reports them as the
# native backend does.


@pytest.mark.parametrize("f", ["log", "invsqrt", ("pow", -1), "sqrt", ("pow", 0.5)])
def test_matrix_function_outside_its_domain(f, backend) -> None:
    X = torch.diag(torch.tensor([2.0, -1.0, 3.0], dtype=torch.float64))
    with raises(ps.DomainError, r"eigenvalue 0 is -1\b") as e:  # ascending: -1 first
        ps.matrix_function(X, f, backend=backend)
    assert isinstance(e.value, ValueError)
    assert "Julia" not in str(e.value) and "1-based" not in str(e.value)
    Z = torch.diag(torch.tensor([2.0, 0.0, 3.0], dtype=torch.float64))
    if f in ("log", "invsqrt", ("pow", -1)):
        with raises(
            ps.DomainError, "needs a positive definite input, but eigenvalue 0"
        ):
            ps.matrix_function(Z, f, backend=backend)
    else:  # semidefinite is fine, and rounding noise below 0 is clamped
        ps.matrix_function(Z - 1e-15 * torch.eye(3, dtype=Z.dtype), f, backend=backend)


def test_domain_error_names_the_batch_element(backend) -> None:
    X = torch.stack([torch.eye(3), torch.diag(torch.tensor([1.0, 5.0, -2.0]))]).double()
    with raises(ps.DomainError, r"'log' .* eigenvalue 0 of batch element \(1,\) is -2"):
        ps.matrix_function(X, "log", backend=backend)
    Y = torch.stack([X, X.flip(0)])  # (2, 2, 3, 3): the first bad one is (0, 1)
    with raises(ps.DomainError, r"eigenvalue 0 of batch element \(0, 1\) is -2"):
        ps.matrix_function(Y, "log", backend=backend)


def test_negative_power_of_a_zero_singular_value(backend) -> None:
    Z = torch.diag(torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64))
    with raises(
        ps.DomainError,
        r"^svd_function: \('pow', -1.0\) needs nonzero singular values, but "
        r"singular value 2 is 0",
    ) as e:
        ps.svd_function(Z, ("pow", -1), backend=backend)
    assert isinstance(e.value, ValueError)
    ps.svd_function(Z, ("pow", 2), backend=backend)  # p >= 0 is fine


@pytest.mark.parametrize(
    "call",
    [
        lambda b: ps.matrix_function(
            torch.diag(torch.tensor([1.0, -0.25, 3.0])).double().repeat(2, 1, 1),
            ("pow", -0.5),
            backend=b,
        ),
        lambda b: ps.svd_function(
            torch.diag(torch.tensor([2.0, 1.0, 0.0])).double().repeat(3, 1, 1),
            ("pow", -2),
            backend=b,
        ),
    ],
    ids=["matrix_function", "svd_function"],
)
def test_domain_errors_read_the_same_on_both_backends(call) -> None:
    with pytest.raises(ps.DomainError) as native:
        call("torch")
    with installed() as fake, pytest.raises(ps.DomainError) as julia:
        call("julia")
    assert fake.calls  # Julia found it
    assert str(julia.value) == str(native.value)
    assert julia.value.__cause__ is None and julia.value.__suppress_context__
    # Julia's own words stay available
    assert "1-based" in julia.value.julia_message or "S[3]" in julia.value.julia_message


def test_normalize_of_a_zero_matrix(backend) -> None:
    with raises(ps.DomainError, "'normalize' .* is 0 \\(A is a zero matrix\\)"):
        ps.svd_function(
            torch.zeros(3, 2, dtype=torch.float64), "normalize", backend=backend
        )


@pytest.mark.parametrize("op", SQUARE_OPS)
@pytest.mark.parametrize("uplo", ["X", "lower", "Lo", ""])
def test_bad_uplo(op, uplo, backend) -> None:
    with raises(ps.UPLOError, r"UPLO must be 'L' or 'U' \(either case\), got") as e:
        OPS[op](H, uplo, backend=backend)
    # a RuntimeError, as torch.linalg.eigh raises, and an InputError as before
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, ValueError)
    assert julia_starts() == 0


@pytest.mark.parametrize("op", SQUARE_OPS)
@pytest.mark.parametrize("uplo", [None, 1, b"L"])
def test_uplo_of_another_type(op, uplo, backend) -> None:
    with raises(ps.InputTypeError, "UPLO must be a str") as e:
        OPS[op](H, uplo, backend=backend)
    assert isinstance(e.value, TypeError)  # as torch.linalg.eigh's
    assert julia_starts() == 0


@pytest.mark.parametrize("op", ["svd", "svd_function", "eigh"])
@pytest.mark.parametrize("gauge", ["loud", "", "Warn", 1])
def test_bad_gauge_policy(op, gauge, backend) -> None:
    with raises(ps.InputError, r"gauge must be one of \('warn', 'raise', 'ignore'\)"):
        OPS[op](H, gauge=gauge, backend=backend)
    assert julia_starts() == 0


@pytest.mark.parametrize("op", ["svd", "svd_function", "eigh", "matrix_function"])
def test_bad_tolerance(op, backend) -> None:
    with raises(ps.InputError, f"{op}: degeneracy_atol must be a finite number >= 0"):
        OPS[op](H, degeneracy_atol=-1.0, backend=backend)
    assert julia_starts() == 0


# Issue 15, item 4: every argument is used or refused. Before, each of these
# was accepted and had no effect (largest="no" was read as True).
P = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
P = P @ P.mT + torch.eye(6, dtype=torch.float64)
UNUSED = [
    (lambda b: ps.svd(A, method="bogus", backend=b), ps.InputError, "svd: method"),
    (lambda b: ps.svd(A, k=2, method=None, backend=b), ps.InputError, "svd: method"),
    (
        lambda b: ps.svd(A, oversample=5, backend=b, full_matrices=False),
        ps.InputError,
        "oversample .* k",
    ),
    (
        lambda b: ps.svd(A, n_iter=3, backend=b, full_matrices=False),
        ps.InputError,
        "n_iter .* with k",
    ),
    (
        lambda b: ps.svd(A, backward_rtol=1e-6, backend=b, full_matrices=False),
        ps.InputError,
        "backward_",
    ),
    (
        lambda b: ps.svd(A, backward_maxiter=9, backend=b, full_matrices=False),
        ps.InputError,
        "backward_",
    ),
    (lambda b: ps.svd(A, method="randomized", backend=b), ps.InputError, "with k"),
    (
        lambda b: ps.svd(A, k=2, method="full", n_iter=3, backend=b),
        ps.InputError,
        "method='full' does not iterate",
    ),
    (
        lambda b: ps.svd(A, full_matrices="no", backend=b),
        ps.InputTypeError,
        "full_matrices must be True or False, got 'no'",
    ),
    (
        lambda b: ps.eigh(P, k=2, largest="no", backend=b),
        ps.InputTypeError,
        "eigh: largest must be True or False, got 'no'",
    ),
    (lambda b: ps.eigh(P, largest=False, backend=b), ps.InputError, "largest=False"),
    (lambda b: ps.eigh(P, method="lanczos", backend=b), ps.InputError, "eigh: method"),
    (lambda b: ps.eigh(P, oversample=2, backend=b), ps.InputError, "oversample"),
    (
        lambda b: ps.eigh(P, check_hermitian="yes", backend=b),
        ps.InputTypeError,
        "check_hermitian must be True or False",
    ),
    (
        lambda b: ps.eigh(P, hermitian_tol=1e-3, backend=b),
        ps.InputError,
        "hermitian_tol is the tolerance of check_hermitian=True",
    ),
    (
        lambda b: ps.matrix_function(
            P, "exp", check_hermitian=False, hermitian_tol=1e-3, backend=b
        ),
        ps.InputError,
        "matrix_function: hermitian_tol",
    ),
    (
        lambda b: ps.matrix_function(P, "exp", check_hermitian=1, backend=b),
        ps.InputTypeError,
        "matrix_function: check_hermitian must be True or False, got 1",
    ),
    (
        lambda b: ps.svd_topk(A, 2, method="full", oversample=4, backend=b),
        ps.InputError,
        "does not iterate",
    ),
    (
        lambda b: ps.eigh_topk(P, 2, largest=0, backend=b),
        ps.InputTypeError,
        "largest must be True or False",
    ),
]


@pytest.mark.parametrize("call, error, match", UNUSED)
def test_arguments_are_used_or_refused(call, error, match, backend) -> None:
    with raises(error, match):
        call(backend)
    assert julia_starts() == 0


def _operator(M: torch.Tensor, device="cpu") -> ps.LinearOperator:
    return ps.LinearOperator(
        M.shape, lambda X: M @ X, lambda Y: M.mH @ Y, dtype=M.dtype, device=device
    )


def test_operator_arguments_are_used_or_refused() -> None:
    op = _operator(P)
    for call, error, match in [
        (lambda: ps.svd_topk(op, 2, n_iter=3, method="full"), ps.InputError, "n_iter"),
        (lambda: ps.svd_topk(op, 2, method="bogus"), ps.InputError, "method must be"),
        (lambda: ps.eigh_topk(op, 2, largest="no"), ps.InputTypeError, "largest"),
        (
            lambda: ps.eigh_topk(op, 2, method="full", backward_rtol=1e-3),
            ps.InputError,
            "backward_rtol",
        ),
        (lambda: _operator(P, device="gpu!"), ps.InputTypeError, "device must be"),
    ]:
        with raises(error, match):
            call()


def test_the_defaults_and_numpy_bools_pass() -> None:
    """What is used passes: explicit defaults, numpy bools, method='full' or
    'auto' without k (the full decomposition is what they ask for)."""
    np = pytest.importorskip("numpy")
    U, S, Vh = ps.svd(A, method="full", backward_maxiter=500, full_matrices=np.False_)
    torch.testing.assert_close(S, torch.linalg.svdvals(A))
    w, _ = ps.eigh(P, k=2, largest=np.True_, check_hermitian=True, hermitian_tol=1e-9)
    torch.testing.assert_close(w, torch.linalg.eigvalsh(P)[-2:])
    w, _ = ps.eigh_topk(_operator(P), 2, largest=False, method="full")
    torch.testing.assert_close(w, torch.linalg.eigvalsh(P)[:2])


# ------------------------------------------- silent cases made loud (issue 24)

NOT_ELEMENTWISE = {
    "cumsum": lambda s: s.cumsum(-1),
    "flip": lambda s: s.flip(-1),
    "s * s.sum()": lambda s: s * s.sum(),
    "s - s.mean()": lambda s: s - s.mean(),
    "per-index weights": lambda s: s * torch.arange(1, s.shape[-1] + 1, dtype=s.dtype),
}


@pytest.mark.parametrize("form", ["callable", "pair", "triple"])
@pytest.mark.parametrize("f", NOT_ELEMENTWISE, ids=str)
@pytest.mark.parametrize("op", ["svd_function", "matrix_function"])
def test_a_user_f_that_is_not_elementwise(op, f, form, backend) -> None:
    g = NOT_ELEMENTWISE[f]
    user = {"callable": g, "pair": (g, torch.ones_like), "triple": (g, None, None)}
    X = A if op == "svd_function" else A.mT @ A
    with raises(ps.InputError, match="must be elementwise"):
        getattr(ps, op)(X, user[form], backend=backend)
    # and one whose f_prime is not (f is)
    if form == "pair":
        with raises(ps.InputError, match="the user f_prime must be elementwise"):
            getattr(ps, op)(X, (torch.sin, g), backend=backend)


def test_elementwise_functions_pass_and_the_check_is_not_fooled() -> None:
    # a learned scalar, a clamp, a where on the value: elementwise
    c = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    for f in [
        lambda s: c * s**2,
        lambda s: torch.clamp(s - 0.3, min=0),
        lambda s: torch.where(s > 1, s, s**3),
    ]:
        ps.svd_function(A, f)
        ps.matrix_function(A.mT @ A, f)


def rank_deficient(m: int = 4, n: int = 3) -> torch.Tensor:
    B = torch.randn(m, n - 1, dtype=torch.float64)
    return B @ torch.randn(n - 1, n, dtype=torch.float64)  # rank n - 1


def test_polar_at_a_rank_deficient_matrix_is_a_domain_error(backend) -> None:
    # polar(A) and polar(A^T)^T differed by 2.9 there, silently; f = 1 has
    # f(0) = 1, so it follows the rule of every f with f(0) != 0
    with raises(ps.DomainError, match="'polar'.*numerically zero"):
        ps.svd_function(rank_deficient(), "polar", backend=backend)
    with raises(ps.DomainError, match="'polar'.*numerically zero"):
        ps.svd_function(
            torch.zeros(3, 3, dtype=torch.float64), "polar", backend=backend
        )
    with raises(ps.DomainError, match="f\\(0\\) = 1.*numerically zero"):
        ps.svd_function(rank_deficient(), lambda s: s * 0 + 1, backend=backend)
    ps.svd_function(A, "polar", backend=backend)  # full rank: fine


def test_f_at_zero_is_said_at_the_first_call() -> None:
    # a training run learns it from its first step, not when a singular
    # value reaches 0 far into it (then: the DomainError above)
    def shifted(s):
        return torch.exp(s)  # f(0) = 1

    with pytest.warns(UserWarning, match=r"f\(0\) = 1 != 0.*DomainError will stop"):
        ps.svd_function(A, shifted)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ps.svd_function(A, shifted)  # once per function
        ps.svd_function(A, torch.sinh)  # f(0) = 0: nothing


def test_a_cuda_device_without_cuda_is_a_backend_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: this checks a torch without it")
    with raises(ps.BackendError, match="CUDA is not available.*device='cpu'"):
        ps.LinearOperator(
            (5, 4), lambda X: X[:5], lambda Y: Y[:4], dtype=torch.float64, device="cuda"
        )
