"""The Julia package's own tests (julia/PySpectral/test/runtests.jl) as pytest
items: one per top-level ``@testset``, run in-process through juliacall.

Skipped, with the reason, where Julia or its test packages are not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _julia import skip_without_julia

import pyspectral as ps
import pyspectral.julia as psj
from pyspectral.julia import _testsets

RUNTESTS = psj.PACKAGE_TESTS / "runtests.jl"


def require_julia() -> None:
    skip_without_julia()


def check_testset(path: str | Path, name: str) -> None:
    """Run one top-level ``@testset`` of ``path`` and fail with Julia's own
    failure texts (message and location); skip if Julia cannot run it here."""
    require_julia()
    missing = psj.missing_test_packages()
    if missing:
        pytest.skip(
            f"Julia test packages missing: {', '.join(missing)}; run "
            "python -m pyspectral install-julia --tests"
        )
    passed, failures = psj.run_testset(path, name)
    if failures:
        pytest.fail(
            f"{len(failures)} failure(s) in Julia @testset {name!r} of {path} "
            f"({passed} passed):\n\n" + "\n\n".join(failures),
            pytrace=False,
        )


if RUNTESTS.is_file():
    TESTSETS = [pytest.param(n, id=n) for n in psj.testset_names(RUNTESTS)]
else:
    TESTSETS = [
        pytest.param(
            None,
            id="no-runtests",
            marks=pytest.mark.skip(
                reason=f"{RUNTESTS} does not exist (yet): no Julia test sets to run"
            ),
        )
    ]


@pytest.mark.parametrize("name", TESTSETS)
def test_julia_testset(name: str) -> None:
    check_testset(RUNTESTS, name)


# A test file whose testsets sit in the wrappers a script may put around them
# (each listed name once, in order; see pyspectral.julia.testset_names).
WRAPPED_TESTSETS = r"""
using Test
const X = [1, 2, 3]
f(x) = x[end] + x[begin]   # indices, not blocks
g(A) = A' * A'             # adjoints, not characters
c = 'e'                    # a character
#= a block comment with @testset "not me" begin end
   #= nested =# and still a comment =#
s = "with @testset \"no\" and end in it, $(join(["x", "end"])) done"
function helper()
    @testset "inside a function" begin end  # part of the setup
end
@testset "plain" begin
    @testset "nested" begin
        @test X[end] == 3
    end
    for i in 1:2
        @test i in X
    end
end
try
    @testset "in try" begin
        @test 1 + 1 == 3
    end
catch err
    @warn err
end
@time @testset "in a macro" begin end
begin
    @testset "in begin" verbose = true begin end
end
let y = 2
    @testset MyTestSet "in let, with a type" begin
        @test y == 2
    end
end
@testset "n = $n" for n in 1:2  # not a literal: part of the setup
end
@testset "for, literal" for n in 1:2
    @test n > 0
end
struct S
    x::Int
end
abstract type T end
@testset "after types" begin
    @test [i for i in 1:3 if isodd(i)] == [1, 3]
end
"""

WRAPPED_NAMES = [
    "plain",
    "in try",
    "in a macro",
    "in begin",
    "in let, with a type",
    "for, literal",
    "after types",
]


def test_testset_names_agree_with_julia(tmp_path) -> None:
    """The items pytest lists (names read without Julia) are the testsets
    Julia's runner finds, in the package tests and through wrappers."""
    require_julia()
    assert psj.testset_names(RUNTESTS) == _testsets.julia_testset_names(RUNTESTS)
    path = tmp_path / "wrapped.jl"
    path.write_text(WRAPPED_TESTSETS, encoding="utf-8")
    assert _testsets.julia_testset_names(path) == WRAPPED_NAMES


def test_runner_runs_wrapped_testsets(tmp_path) -> None:
    """Julia's runner, for real: each testset alone (its wrapper left out),
    nested and `for` testsets counted, failures with message and location."""
    require_julia()
    path = tmp_path / "wrapped.jl"
    path.write_text(WRAPPED_TESTSETS, encoding="utf-8")
    assert psj.run_testset(path, "plain") == (3, [])
    passed, failures = psj.run_testset(path, "in try")
    assert passed == 0 and len(failures) == 1
    assert "Test Failed at " + str(path.resolve()) + ":" in failures[0]
    assert "1 + 1 == 3" in failures[0]
    assert psj.run_testset(path, "in let, with a type") == (1, [])
    assert psj.run_testset(path, "for, literal") == (2, [])
    assert psj.run_testset(path, "in begin") == (0, [])


def test_runner_refuses_a_wrapper_of_several_testsets(tmp_path) -> None:
    require_julia()
    path = tmp_path / "two.jl"
    path.write_text('begin\n@testset "a" begin end\n@testset "b" begin end\nend\n')
    assert psj.testset_names(path) == ["a"]
    with pytest.raises(ps.InputError, match="wraps more than one @testset"):
        psj.run_testset(path, "a")
