"""Warnings attributed to the user's line (``pyspectral/_warnings.py``) where
the user's ``__main__`` is interactive: the REPL, ``python -c``, a script piped
to ``python -``, IPython. There ``__main__``'s loader cannot give source, and
asking it for some raised ``ImportError`` instead of the warning, losing the
gradient (issue 15, item 1). Each case runs in a fresh interpreter.

Then repeated warnings: one cause warned at one line with different measured
values collapses under Python's default filter (the full text, then a stable
one), and every occurrence carries its values (``measured``, ``detail``)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
import warnings

import pytest

import pyspectral as ps
from pyspectral import _warnings
from pyspectral.common.gauge import gauge_message

# A backward GaugeWarning (a basis-dependent loss at a degenerate spectrum),
# then a forward ConvergenceWarning (an uncertified randomized top-k); the
# gradient must be computed and printed after both.
SCRIPT = """\
import torch, pyspectral as ps
A = torch.eye(3, dtype=torch.float64, requires_grad=True)
ps.svd(A, full_matrices=False).U[:, 0].sum().backward()
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


# Repeated warnings collapse (issue: a 4-second optimisation printed 147
# GaugeWarnings, each text carrying its measured value, so that Python's
# once-per-location rule never applied): the first occurrence of a cause at a
# line has the full text, later ones a stable text; the values of each are on
# the warning object (.measured, .detail).

# One cause, one line, different measured values: the incoming gradient of a
# vector of the degenerate cluster (2, 2) of a rotated diag(3, 2, 2, 1), scaled
# by a factor that changes at each step.
LOOP = """\
import torch, pyspectral as ps
torch.manual_seed(0)
Q, _ = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64))
A0 = Q @ torch.diag(torch.tensor([3.0, 2.0, 2.0, 1.0], dtype=torch.float64)) @ Q.mT
for step in range(STEPS):
    X = A0.clone().requires_grad_(True)
    (ps.svd(X, full_matrices=False).U[:, 1].sum() * (1 + 0.37 * step)).backward()
print("steps-done", step + 1)
"""


def loop(steps: int) -> None:
    """``LOOP`` in this process: its warnings come from one line."""
    exec(compile(LOOP.replace("STEPS", str(steps)), "<loop>", "exec"), {})


def test_a_many_step_run_prints_a_handful_under_the_default_filter() -> None:
    """150 steps, each warning the same cause at the same line with its own
    value, under Python's default filter (no -W, no PYTHONWARNINGS): the
    full text once, the stable text once, so 2 lines (it was 150)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    result = subprocess.run(
        [sys.executable, "-c", LOOP.replace("STEPS", "150")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert "steps-done 150" in result.stdout, result.stderr
    shown = [line for line in result.stderr.splitlines() if "GaugeWarning" in line]
    assert len(shown) == 2, result.stderr
    full, repeated = shown
    assert re.search(r"measured \d\S* > gauge_atol \d", full), full
    assert "measured <value> > gauge_atol <value>" in repeated, repeated
    assert "w.message.measured" in repeated


def test_every_occurrence_carries_its_values() -> None:
    """Under "always" every occurrence is warned, with its full text, and its
    values on the warning: ``measured`` (floats) and ``detail``; one stable
    text for all of them."""
    from pyspectral._warnings import stable_text

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop(150)
    assert len(caught) == 150
    assert all(w.category is ps.GaugeWarning for w in caught)
    messages = [w.message for w in caught]
    assert all(isinstance(m, ps.GaugeWarning) for m in messages)
    assert all(str(m) == m.detail for m in messages)
    # (measured, gauge_atol), as the text gives them; the measured one grows
    # with the step's scale
    assert all(len(m.measured) == 2 for m in messages)
    assert all(f"measured {m.measured[0]:.3g} >" in m.detail for m in messages)
    assert len({m.detail for m in messages}) > 100
    assert messages[-1].measured[0] > 10 * messages[0].measured[0]
    assert len({stable_text(m.detail)[0] for m in messages}) == 1


def test_default_filter_in_process() -> None:
    """Python's default action in a ``catch_warnings`` block: the full text,
    then the stable one with the note, each with its own values."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        loop(20)
    assert len(caught) == 2, [str(w.message) for w in caught]
    first, second = (w.message for w in caught)
    assert str(first) == first.detail and "<value>" not in str(first)
    assert str(second).startswith(
        "svd: the incoming gradient depends on the basis chosen inside a degenerate "
        "subspace (measured <value> > gauge_atol <value>)"
    )
    assert str(second).endswith(_warnings.REPEATED)
    assert second.detail != first.detail and second.measured != first.measured
    # a new catch_warnings block (new filters) starts afresh, as Python's registry
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("default")
        loop(3)
    assert [str(w.message) == w.message.detail for w in again] == [True, False]


def test_a_repeated_warning_as_error_still_raises() -> None:
    """GaugeWarning as an error (the suite's pyproject filter): every
    occurrence raises, also after the cause was warned at that line, with its
    full text and values."""
    from pyspectral._warnings import warn

    def at_one_line(value: float) -> None:
        warn(gauge_message("svd", value, 1e-12), ps.GaugeWarning)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        at_one_line(0.25)
        at_one_line(0.5)  # the stable text
        warnings.simplefilter("error", ps.GaugeWarning)
        for value in (0.75, 0.75, 1.5):
            with pytest.raises(ps.GaugeWarning) as raised:
                at_one_line(value)
            assert raised.value.measured == (value, 1e-12)
            assert str(raised.value) == gauge_message("svd", value, 1e-12)
    assert len(caught) == 2
    # and through the pullback, under the filter in force (pyproject's in the
    # suite)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        for _ in range(3):
            with pytest.raises(ps.GaugeWarning, match=r"measured \d"):
                loop(1)


def test_reset_forgets_the_causes_seen() -> None:
    """``_warnings._reset`` (for tests): the next occurrence has its full text."""
    from pyspectral._warnings import warn

    def at_one_line(value: float) -> None:
        warn(gauge_message("svd", value, 1e-12), ps.GaugeWarning)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        at_one_line(0.25)
        at_one_line(0.5)
        _warnings._reset()
        at_one_line(0.75)
    assert [w.message.measured[0] for w in caught] == [0.25, 0.5, 0.75]
    assert ["<value>" in str(w.message) for w in caught] == [False, True, False]


def test_the_same_values_again_keep_the_text_shown() -> None:
    """An occurrence with the first one's very values keeps its text, which
    Python has shown: once per location, as for ``warnings.warn``."""
    from pyspectral._warnings import warn

    def at_one_line(value: float) -> None:
        warn(gauge_message("svd", value, 1e-12), ps.GaugeWarning)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for value in (0.25, 0.25, 0.25, 0.5, 0.25, 0.75):
            at_one_line(value)
    assert [w.message.measured[0] for w in caught] == [0.25, 0.5]


def _messages() -> list[tuple[str, object]]:
    """The message builders of the warnings, by name, each a function of
    (measured, tolerance)."""
    from pyspectral import split
    from pyspectral.common import gauge
    from pyspectral.pullbacks import eig as eig_pullback
    from pyspectral.pullbacks import eigh as eigh_pullback

    return [
        ("gauge", lambda a, b: gauge.gauge_message("svd", a, b)),
        ("gauge eig", lambda a, b: gauge.gauge_message("eig", a, b)),
        ("near pair", lambda a, b: gauge.near_pair_message("svd", a, a * b, b)),
        ("weights", lambda a, b: gauge.weights_message("svd", a, b)),
        ("undetermined", lambda a, b: gauge.undetermined_message("qr", a, b)),
        ("lost", lambda a, b: gauge.lost_message("lq", a, b)),
        ("complement", lambda a, b: gauge.complement_message("qr", a, b)),
        ("qr forward", lambda a, b: gauge.qr_forward_message("lq", a, b)),
        ("split tangent", lambda a, b: split.near_tangent_message("both", a, a, b)),
        ("split zero", lambda a, b: split.split_zero_message("right", True, False, a)),
        (
            "cluster split",
            lambda a, b: eigh_pullback.cluster_split_message("eigh", a, b),
        ),
        ("eig split", lambda a, b: eig_pullback.split_message("eig", a, b)),
    ]


# measured values as the messages format them (.3g): plain, small, large,
# integral-looking (123.4 is "123"), negative, non-finite
VALUES = [(0.138, 4.76e-13), (123.4, 1e-10), (-0.5, float("inf")), (float("nan"), 2.0)]


@pytest.mark.parametrize(
    "name, build", _messages(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_stable_text_of_the_messages(name, build) -> None:
    """Each message has one stable text for every measured value, the values
    replaced by the placeholder and the code in it intact."""
    from pyspectral._warnings import PLACEHOLDER, stable_text

    texts = [build(a, b) for a, b in VALUES]
    stables = {stable_text(t)[0] for t in texts}
    assert len(stables) == 1, stables
    (stable,) = stables
    assert PLACEHOLDER in stable
    for text in texts:
        measured = stable_text(text)[1]
        assert measured and all(isinstance(v, float) for v in measured)
        # every number left is one of the text's code
        for left in re.findall(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", stable):
            assert left in ("1", "2", "3", "4", "0"), (left, stable)
    for code in ("('pow', 1)", "eps**(3/4)", "Q[..., :, j:]", "V^-1", "Q2 Q2^H"):
        if code in texts[0]:
            assert code in stable, code


def test_stable_text_keeps_code_and_counts() -> None:
    from pyspectral._warnings import stable_text

    text = (
        "svd(k=10, method='randomized'): not certified: after 3 iterations (rank "
        "5, n_iter=1, s[2] - s[3] = 1.5e-09) the residual is 0.34 (tolerance "
        "1.8e-12 > eps**(3/4) = 1.82e-12, ('pow', 0.5), float64, 2048³ > "
        "8.59e+09); gap 2 |w_i - w_j| / (kappa_i + kappa_j) = -inf, measured 12 > 3."
    )
    stable, measured = stable_text(text)
    assert stable == (
        "svd(k=10, method='randomized'): not certified: after 3 iterations (rank "
        "5, n_iter=1, s[2] - s[3] = <value>) the residual is <value> (tolerance "
        "<value> > eps**(3/4) = <value>, ('pow', 0.5), float64, 2048³ > "
        "<value>); gap 2 |w_i - w_j| / (kappa_i + kappa_j) = <value>, measured "
        "<value> > <value>."
    )
    assert measured == (1.5e-09, 0.34, 1.8e-12, 1.82e-12, 8.59e09, -math.inf, 12.0, 3.0)
    assert stable_text("no values (k=3)") == ("no values (k=3)", ())
