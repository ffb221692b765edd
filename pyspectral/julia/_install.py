"""``python -m pyspectral install-julia``: Julia and the Julia packages
through juliapkg, then a check, in a fresh process, that the backend loads."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from ..exceptions import BackendError
from ._bridge import reset
from ._probe import INSTALL_HINT, JULIACALL

# ------------------------------------------------------------------ install

# name -> UUID of the Julia packages `install-julia --tests` adds for running
# julia/PySpectral/test from Python (Test and Random are standard libraries).
TEST_PACKAGES = {
    "Test": "8dfed614-e22c-5e08-85e1-65c5234f0b40",
    "Random": "9a3f8284-a2c9-5f02-9a11-845980a1fd5c",
    "ChainRulesTestUtils": "cdddcdb0-9152-4a09-a978-84456f9df70a",
    "FiniteDifferences": "26cc04aa-876d-5657-8c51-4c34ba976000",
}


# Started by install(): Julia first, then torch (the order PythonCall recommends),
# PySpectral and the glue loaded (precompiled on the way), the status printed.
LOAD_CHECK = """
import juliacall
from pyspectral.julia import _bridge
_bridge.glue()
print(_bridge.status()[1])
"""


def install(tests: bool = False) -> str:
    """Install Julia (if needed) and the Julia packages through juliapkg, with
    juliapkg's own progress output; then start Julia once, in a fresh process
    that starts it before torch (this one has imported torch), to precompile
    and check that the backend loads. Returns what that process reports."""
    if importlib.util.find_spec("juliacall") is None:
        raise BackendError(
            f"juliacall is not installed: pip install '{JULIACALL}' first (in a "
            "clone of pyspectral: pip install -e '.[julia]')"
        )
    import juliapkg

    try:
        if tests:
            for name, uuid in TEST_PACKAGES.items():
                juliapkg.add(name, uuid)
        juliapkg.resolve()
    except Exception as err:  # noqa: BLE001 - juliapkg raises many kinds
        raise BackendError(
            f"juliapkg could not install Julia: {err}. " + INSTALL_HINT
        ) from err
    reset()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # this pyspectral first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    run = subprocess.run(
        [sys.executable, "-c", LOAD_CHECK], capture_output=True, text=True, env=env
    )
    if run.returncode != 0:
        raise BackendError(
            "Julia and its packages are installed, but the backend does not load: "
            + (run.stderr.strip().splitlines() or ["(no message)"])[-1]
        )
    return run.stdout.strip().splitlines()[-1]
