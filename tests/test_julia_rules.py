"""The Julia package's own tests (julia/PySpectral/test/runtests.jl) as pytest
items: one per top-level ``@testset``, run in-process through juliacall.

Skipped, with the reason, where Julia or its test packages are not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pyspectral.julia as psj
from pyspectral import _julia

RUNTESTS = psj.PACKAGE_TESTS / "runtests.jl"


def check_testset(path: str | Path, name: str) -> None:
    """Run one top-level ``@testset`` of ``path`` and fail with Julia's own
    failure texts (message and location); skip if Julia cannot run it here."""
    ok, why = _julia.status()
    if not ok:
        pytest.skip("Julia is not installed: " + why)
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
