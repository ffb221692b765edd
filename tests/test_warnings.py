"""Warnings attributed to the user's line (``pyspectral/_warnings.py``) where
the user's ``__main__`` is interactive: the REPL, ``python -c``, a script piped
to ``python -``, IPython. There ``__main__``'s loader cannot give source, and
asking it for some raised ``ImportError`` instead of the warning, losing the
gradient (issue 15, item 1). Each case runs in a fresh interpreter."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

# A backward GaugeWarning (a basis-dependent loss at a degenerate spectrum),
# then a forward ConvergenceWarning (an uncertified randomized top-k); the
# gradient must be computed and printed after both.
SCRIPT = """\
import torch, pyspectral as ps
A = torch.eye(3, dtype=torch.float64, requires_grad=True)
ps.svd(A).U[:, 0].sum().backward()
print("grad-finite", bool(torch.isfinite(A.grad).all()))
torch.manual_seed(0)
M = torch.rand(50, 50, dtype=torch.float64)
S = ps.svd(M, k=10, method="randomized", n_iter=1).S
print("topk-done", S.shape[0])
"""


def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "always"}
    return subprocess.run(
        args, input=stdin, capture_output=True, text=True, timeout=300, env=env
    )


def check(result: subprocess.CompletedProcess, where: str) -> None:
    out, err = result.stdout, result.stderr
    assert "ImportError" not in err and "Traceback" not in err, err
    assert "grad-finite True" in out, (out, err)
    assert "topk-done 10" in out, (out, err)
    # both warnings reached the user, attributed to the interactive input
    for text in ("GaugeWarning: svd:", "ConvergenceWarning: svd(k=10, "):
        assert re.search(re.escape(where) + r"[^:\n]*:\d+: " + re.escape(text), err), (
            err
        )


@pytest.mark.parametrize(
    "how",
    [
        pytest.param((["-i"], SCRIPT), id="python -i, piped"),
        pytest.param((["-c", SCRIPT], None), id="python -c"),
        pytest.param((["-"], SCRIPT), id="python - (script on stdin)"),
    ],
)
def test_warnings_in_an_interactive_main(how) -> None:
    args, stdin = how
    where = "<string>" if args[0] == "-c" else "<stdin>"
    check(run([sys.executable, *args], stdin), where)


@pytest.mark.skipif(
    importlib.util.find_spec("IPython") is None,
    reason="IPython is not installed (pip install ipython) to run a session",
)
@pytest.mark.parametrize("mode", ["-c", "stdin"])
def test_warnings_in_ipython(mode) -> None:
    base = [sys.executable, "-m", "IPython", "--no-banner"]
    if mode == "-c":
        result = run([*base, "-c", SCRIPT])
    else:  # the cells of an interactive session, one statement per line
        result = run(base, SCRIPT + "exit\n")
    check(result, "<ipython-input-")
