"""The settings API of ``pyspectral/_settings.py``: ``set_defaults``,
``get_defaults``, scoped ``defaults(...)`` per thread, bad settings, and the
per-call ``Options``."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

import pyspectral as ps
from pyspectral._settings import options

# -------------------------------------------------------------- settings


def test_settings_api() -> None:
    before = ps.get_defaults()
    assert before == {
        "degeneracy_atol": None,
        "broadening": None,
        "gauge": "warn",
        "gauge_atol": None,
        "gradient": "hermitian",
    }
    with ps.defaults(gauge="ignore", degeneracy_atol=1e-6):
        assert ps.get_defaults()["gauge"] == "ignore"
        assert options().degeneracy_atol == 1e-6
        assert options(degeneracy_atol=1e-3).degeneracy_atol == 1e-3  # per call
        with ps.defaults(gauge="raise"):  # nested
            assert ps.get_defaults()["gauge"] == "raise"
            assert ps.get_defaults()["degeneracy_atol"] == 1e-6
        assert ps.get_defaults()["gauge"] == "ignore"
    assert ps.get_defaults() == before
    old = ps.set_defaults(broadening=1e-8, gauge_atol=1e-3)
    try:
        assert old == before
        assert ps.get_defaults()["broadening"] == 1e-8
        assert options().gauge_atol == 1e-3
    finally:
        assert ps.set_defaults(**old)["broadening"] == 1e-8
    assert ps.get_defaults() == before


def test_scoped_defaults_are_per_thread() -> None:
    """Two threads in ``defaults`` blocks, entered and left in crossing order
    (A enters, B enters, A leaves, B leaves): each sees only its own settings,
    the main thread sees neither, and nothing is left behind. (Saving and
    restoring process-wide values would leave B's "restored" value, A's.)"""
    barrier = threading.Barrier(2, timeout=30)
    seen, errors = {}, []

    def worker(name: str, gauge: str, first: bool) -> None:
        try:
            if not first:
                barrier.wait()  # 1: A is inside
            with ps.defaults(gauge=gauge, degeneracy_atol=len(name) * 1e-9):
                if first:
                    barrier.wait()  # 1
                barrier.wait()  # 2: both inside
                seen[name] = (ps.get_defaults()["gauge"], options().gauge)
                barrier.wait()  # 3: both have looked
                if not first:
                    barrier.wait()  # 4: A has left
            if first:
                barrier.wait()  # 4
        except Exception as err:  # noqa: BLE001 - reported in the main thread
            errors.append(err)

    before = ps.get_defaults()
    threads = [
        threading.Thread(target=worker, args=("a", "raise", True)),
        threading.Thread(target=worker, args=("b", "ignore", False)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert seen == {"a": ("raise", "raise"), "b": ("ignore", "ignore")}
    assert ps.get_defaults() == before


def test_scoped_defaults_over_process_wide_ones() -> None:
    """``set_defaults`` inside a block changes the process-wide value (what
    it returns and what is restored), the block's own settings still win."""
    before = ps.get_defaults()
    with ps.defaults(gauge="ignore"):
        old = ps.set_defaults(gauge="raise", broadening=1e-6)
        try:
            assert old["gauge"] == "warn"  # the process-wide value, not "ignore"
            assert ps.get_defaults()["gauge"] == "ignore"  # the block wins
            assert ps.get_defaults()["broadening"] == 1e-6  # seen inside
            seen_by_a_new_thread = []
            t = threading.Thread(
                target=lambda: seen_by_a_new_thread.append(ps.get_defaults())
            )
            t.start()
            t.join(30)
            assert seen_by_a_new_thread[0]["gauge"] == "raise"  # process-wide
        finally:
            ps.set_defaults(**old)
    assert ps.get_defaults() == before


def test_defaults_restored_after_an_exception() -> None:
    before = ps.get_defaults()
    with pytest.raises(RuntimeError, match="inside"), ps.defaults(gauge="ignore"):
        raise RuntimeError("inside")
    assert ps.get_defaults() == before


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"tolerance": 1.0}, "unknown setting"),
        ({"gauge": "loud"}, "set_defaults: gauge must be one of"),
        ({"gauge": None}, "gauge must be one of"),
        (
            {"degeneracy_atol": -1.0},
            "degeneracy_atol must be a finite number >= 0",
        ),
        (
            {"broadening": "wide"},
            "broadening must be a finite number > 0",
        ),
        (
            {"gauge_atol": -1e-3},
            "gauge_atol must be a finite number >= 0",
        ),
    ],
)
def test_bad_settings(settings, match) -> None:
    before = ps.get_defaults()
    with pytest.raises(ps.InputError, match=match):
        ps.set_defaults(**settings)
    with pytest.raises(ps.InputError, match=match), ps.defaults(**settings):
        pass
    assert ps.get_defaults() == before


def test_bad_per_call_settings() -> None:
    A = torch.eye(3, dtype=torch.float64)
    with pytest.raises(ps.InputError, match="degeneracy_atol"):
        ps.svd(A, degeneracy_atol=-1.0, full_matrices=False)
    with pytest.raises(ps.InputError, match="broadening"):
        ps.eigh(A, broadening=-1.0)
    with pytest.raises(ps.InputError, match="gauge"):
        ps.svd_function(A, "polar", gauge="sometimes")


def test_unexpected_gauge_warning_is_an_error_in_this_suite() -> None:
    """pyproject.toml's filterwarnings: a GaugeWarning no test expects fails."""
    with pytest.raises(ps.GaugeWarning):
        warnings.warn("svd: test", ps.GaugeWarning, stacklevel=1)
