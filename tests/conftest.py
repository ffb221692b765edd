"""Shared fixtures. The matrix generators, gauge-stripped cotangents and finite
differences are in ``_spectra.py`` (imported by name by the test modules).

pyproject.toml turns an unexpected ``GaugeWarning`` into an error; tests that
expect one say so with ``pytest.warns``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
