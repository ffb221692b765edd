"""Whether the real Julia backend is usable here, probed once (never starts
Julia), and the one reason the tests give for skipping without it: short,
with the why printed once, in the header of the run
(``conftest.pytest_report_header``), not after each of ~500 skips."""

from __future__ import annotations

import pytest

from pyspectral.julia import _bridge

USABLE, WHY = _bridge.status()
REASON = (
    "Julia is not installed here (why: the 'julia backend' line at the top of "
    "this run; python -m pyspectral info)"
)
needs_julia = pytest.mark.skipif(not USABLE, reason=REASON)


def skip_without_julia(what: str = "") -> None:
    """Skip the running test where Julia is not usable now (``what`` it needs
    Julia for, if said): probed again, so that a stand-in installed by the
    test counts; a reason other than the run's is given in full."""
    ok, why = _bridge.status()
    if not ok:
        reason = REASON if why == WHY else f"Julia is not installed: {why}"
        pytest.skip(f"{what}: {reason}" if what else reason)
