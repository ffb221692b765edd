"""Every numeric keyword of every public function is validated in one place
(``_validation.check_keywords``), before a backend is chosen: a bad value raises
``InputError`` naming the keyword, what it must be and what was passed, on the
native backend and with ``backend="julia"`` (the stand-in Julia runtime, never
started for a bad keyword); good edge values (no extra probes, no power
iteration, numpy and 0-d tensor numbers) are accepted and mean exactly what
the plain Python value means.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from _spectra import seeded_randn

import pyspectral as ps
from pyspectral._validation import _INTEGER_KEYWORDS, _REAL_KEYWORDS, check_keywords
from pyspectral.julia import _bridge

F64 = torch.float64
_gen = torch.Generator().manual_seed(1)
A = seeded_randn(4, 3, dtype=torch.float64, gen=_gen)
Q = torch.linalg.qr(seeded_randn(3, 3, dtype=torch.float64, gen=_gen)).Q
H = Q @ torch.diag(torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)) @ Q.mT
H = (H + H.mT) / 2  # exactly symmetric: hermitian_tol=0 accepts it

TOP_K = ["k", "oversample", "n_iter", "backward_rtol", "backward_maxiter"]
OPTIONS = ["degeneracy_atol", "broadening", "gauge_atol"]
TRUNCATION = ["atol", "rtol", "error_atol", "error_rtol"]
# op: (call on a matrix X, its numeric keywords)
CALLS: dict[str, tuple[Callable[..., Any], list[str]]] = {
    "svd": (partial(ps.svd, full_matrices=False), [*TOP_K, *OPTIONS, *TRUNCATION]),
    "svd_function": (
        lambda X, **kw: ps.svd_function(X, ("pow", 2), **kw),
        ["degeneracy_atol"],
    ),
    "eigh": (ps.eigh, [*TOP_K, *OPTIONS, *TRUNCATION, "hermitian_tol"]),
    "matrix_function": (
        lambda X, **kw: ps.matrix_function(X, "log", **kw),
        ["degeneracy_atol", "hermitian_tol"],
    ),
}
SQUARE = ("eigh", "matrix_function")

NAN, INF = float("nan"), float("inf")
TOLERANCE_BAD = [-1.0, -1, -1e-300, NAN, INF, -INF, True, "1e-8", 1j]
TOLERANCE_BAD += [torch.tensor([1.0]), torch.tensor(True), np.bool_(False)]
BAD: dict[str, list[Any]] = {
    "k": [-1, -4, 2.0, True, "2", np.float64(2.0), np.bool_(True)]
    + [torch.tensor(2.0), torch.tensor([2]), torch.tensor(True)],
    "oversample": [-1, -2, 2.5, 1.0, True, "3", torch.tensor(1.0)],
    "n_iter": [-1, 1.0, False, np.float32(2), torch.tensor([1])],
    "backward_maxiter": [0, -5, 10.0, True, None, np.int64(0)],
    "backward_rtol": [0, 0.0, -1e-6, 1, 1.0, 2.0, NAN, INF, True, "1e-6", 1j],
    "broadening": [0, 0.0, -1e-3, NAN, INF, True, "wide", 1j, torch.tensor(0.0)],
    "degeneracy_atol": TOLERANCE_BAD,
    "gauge_atol": TOLERANCE_BAD,
    "hermitian_tol": TOLERANCE_BAD,
    **{name: TOLERANCE_BAD for name in TRUNCATION},
}
REQUIRED = {
    "k": "an integer >= 0 (the maximum rank; a k past min(m, n) keeps every value)",
    "oversample": "an integer >= 0, or None (automatic)",
    "n_iter": "an integer >= 0, or None (automatic)",
    "backward_maxiter": "an integer >= 1",
    "backward_rtol": "a number with 0 < backward_rtol < 1, or None",
    "broadening": "a finite number > 0, or None",
    "degeneracy_atol": "a finite number >= 0, or None",
    "gauge_atol": "a finite number >= 0, or None",
    "hermitian_tol": "a finite number >= 0, or None",
    **{name: "a finite number >= 0, or None" for name in TRUNCATION},
}


def julia_starts() -> int:
    return getattr(_bridge.runtime, "starts", 0)


def cases(table: dict[str, list[Any]]) -> list[Any]:
    return [
        pytest.param(op, name, value, id=f"{op}-{name}-{value!r}")
        for op, (_, names) in CALLS.items()
        for name in names
        for value in table[name]
    ]


def assert_names(err: Exception, op: str, name: str, value: Any) -> None:
    message = str(err)
    assert message.startswith(f"{op}: {name} must be {REQUIRED[name]}"), message
    assert f"got {value!r}" in message, message


@pytest.mark.parametrize("op, name, value", cases(BAD))
def test_bad_keyword_raises_input_error_naming_it(op, name, value, backend) -> None:
    call, _ = CALLS[op]
    X = H if op in SQUARE else A
    # the top-k keywords with k given, where they are used (they are checked
    # without it too: see the next test)
    extra = {"k": 2} if name in TOP_K and name != "k" else {}
    with pytest.raises(ps.InputError) as e:
        call(X, backend=backend, **extra, **{name: value})
    assert isinstance(e.value, ValueError)
    assert_names(e.value, op, name, value)
    assert julia_starts() == 0  # validated before any backend is chosen


@pytest.mark.parametrize("op", ["svd", "eigh"])
@pytest.mark.parametrize("name", TOP_K[1:])
def test_top_k_keywords_are_checked_without_k(op, name) -> None:
    call, _ = CALLS[op]
    with pytest.raises(ps.InputError) as e:
        call(H, **{name: BAD[name][0]})
    assert_names(e.value, op, name, BAD[name][0])


@pytest.mark.parametrize("name", OPTIONS)
@pytest.mark.parametrize("value", TOLERANCE_BAD, ids=repr)
def test_bad_setting_raises_naming_it(name, value) -> None:
    with pytest.raises(ps.InputError) as e:
        ps.set_defaults(**{name: value})
    assert_names(e.value, "set_defaults", name, value)
    with pytest.raises(ps.InputError) as e, ps.defaults(**{name: value}):
        pass
    assert_names(e.value, "set_defaults", name, value)
    assert ps.get_defaults()[name] is None


@pytest.mark.parametrize("name", ["degeneracy_atol", "gauge_atol"])
def test_zero_tolerance_settings_are_valid_and_normalised(name) -> None:
    with ps.defaults(**{name: np.float32(0.0)}):
        value = ps.get_defaults()[name]
        assert value == 0.0 and type(value) is float


def test_zero_broadening_setting_is_invalid() -> None:
    with pytest.raises(ps.InputError) as e:
        ps.set_defaults(broadening=0.0)
    assert_names(e.value, "set_defaults", "broadening", 0.0)


# Good edge values, each with the plain Python value it must mean.
GOOD: dict[str, tuple[Any, list[Any]]] = {
    "k": (3, [np.int64(3), np.int32(3), torch.tensor(3), torch.tensor(3).byte()]),
    "oversample": (0, [np.int64(0), torch.tensor(0)]),
    "n_iter": (0, [np.uint8(0), torch.tensor(0, dtype=torch.int32)]),
    "backward_maxiter": (1, [np.int64(1), torch.tensor(1)]),
    "backward_rtol": (0.5, [np.float32(0.5), torch.tensor(0.5)]),
    "broadening": (
        1e-100,
        [np.float64(1e-100), torch.tensor(1e-100, dtype=torch.float64)],
    ),
    "degeneracy_atol": (0.0, [0, np.float32(0), torch.tensor(0)]),
    "gauge_atol": (0.0, [0, np.float64(0), torch.tensor(0.0)]),
    "hermitian_tol": (0.0, [0, np.float64(0), torch.tensor(0.0)]),
    **{name: (0.0, [0, np.float32(0), torch.tensor(0)]) for name in TRUNCATION},
}
W = seeded_randn(4, 3, dtype=torch.float64, gen=_gen)


def run(op: str, backend: str, **kw: Any) -> list[torch.Tensor]:
    """The outputs of ``op`` and the gradient of a gauge-invariant loss through
    them. Top-k keywords run the randomized method with ``k = min(m, n)``
    (whose range is then exact), so that they reach the forward and the
    backward that use them."""
    call, _ = CALLS[op]
    X = (H if op in SQUARE else A).clone().requires_grad_()
    if set(kw) & set(TOP_K):
        kw = {"k": 3, "method": "randomized", **kw}
    if "hermitian_tol" in kw:
        kw["check_hermitian"] = True
    out = call(X, backend=backend, **kw)
    if op == "svd":  # U f(S) Vh with distinct f(S): invariant under signs
        U, S, Vh = out
        Y = (U * (S + S**2)) @ Vh
    elif op == "eigh":
        w, V = out
        Y = (V * w**2) @ V.mT
    else:
        Y = out
    (g,) = torch.autograd.grad((W[: Y.shape[0]] * Y).sum(), X)
    return [*(t.detach() for t in (out if isinstance(out, tuple) else (out,))), g]


@pytest.mark.parametrize(
    "op, name, value",
    [
        pytest.param(op, name, value, id=f"{op}-{name}-{value!r}")
        for op, (_, names) in CALLS.items()
        for name in names
        for value in GOOD[name][1]
    ],
)
def test_good_keyword_means_the_plain_value(op, name, value, backend) -> None:
    expected = run(op, backend, **{name: GOOD[name][0]})
    got = run(op, backend, **{name: value})
    assert all(torch.isfinite(t).all() for t in got)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_normalised_types() -> None:
    kw = check_keywords(
        "svd",
        A,
        k=torch.tensor(2),
        oversample=np.int64(0),
        n_iter=np.uint8(0),
        backward_maxiter=torch.tensor(7),
        backward_rtol=np.float32(0.25),
        broadening=None,
        degeneracy_atol=torch.tensor(0),
        gauge_atol=np.float64(1e-9),
    )
    assert kw == {
        "k": 2,
        "oversample": 0,
        "n_iter": 0,
        "backward_maxiter": 7,
        "backward_rtol": 0.25,
        "broadening": None,
        "degeneracy_atol": 0.0,
        "gauge_atol": 1e-9,
    }
    assert [type(v) for v in kw.values()] == [int] * 4 + [float, type(None)] + [
        float
    ] * 2


def test_every_public_keyword_has_a_rule() -> None:
    """The rules cover each numeric keyword of the public signatures (so a new
    one cannot be added without a rule)."""
    import inspect

    rules = {"k", *_INTEGER_KEYWORDS, *_REAL_KEYWORDS}
    numeric = {"int", "float", "int | None", "float | None"}
    for f in (ps.svd, ps.svd_function, ps.eigh, ps.matrix_function):
        for p in inspect.signature(f).parameters.values():
            if p.annotation in numeric:
                assert p.name in rules, f"{f.__name__}({p.name}) has no rule"
