"""Shared fixtures. The matrix generators, gauge-stripped cotangents and finite
differences are in ``_spectra.py`` (imported by name by the test modules).

pyproject.toml turns an unexpected ``GaugeWarning`` into an error; tests that
expect one say so with ``pytest.warns``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _fake_julia import installed

import pyspectral as ps


@pytest.fixture(autouse=True)
def _package_defaults_unchanged() -> Iterator[None]:
    """Every test leaves the package defaults as it found them (a test that
    changes them must restore them, e.g. with ``ps.defaults``)."""
    before = ps.get_defaults()
    yield
    after = ps.get_defaults()
    ps.set_defaults(**before)
    assert after == before, f"the test left the package defaults at {after}"


@pytest.fixture(params=["torch", "julia"])
def backend(request) -> Iterator[str]:
    """The backend a test runs on: native, or Julia through the stand-in
    (``_fake_julia.installed``), for tests that must behave the same on both."""
    if request.param == "julia":
        with installed():
            yield "julia"
    else:
        yield "torch"
