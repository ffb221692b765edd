"""The gallery scripts in examples/ run, small, and show what their users would
check: gradients against finite differences, losses that decrease, agreement
with an exact answer, and what torch.linalg does on the same problem.

Each example is a script with a ``main(...)`` that takes its sizes as
keywords and returns what it measured; the docs build runs it at its default
size (sphinx-gallery), these tests at a small one.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import sys
from pathlib import Path

import pytest

from pyspectral import _backend

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def load(name: str):
    """examples/<name>.py as a module (not run as __main__)."""
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def scripts() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", scripts(), ids=lambda p: p.name)
def test_example_is_a_gallery_script_with_main_and_a_test(path: Path):
    """sphinx-gallery needs a docstring with a reST title; the tests need a
    ``main``; and each script is run by a test in this file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc, f"{path.name}: no module docstring (the gallery's title and text)"
    title, underline = doc.splitlines()[:2]
    assert underline and set(underline) == {"="} and len(underline) >= len(title)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    assert "__main__" in path.read_text(encoding="utf-8")
    assert f'load("{path.stem}")' in Path(__file__).read_text(encoding="utf-8"), (
        f"{path.name} has no test in tests/test_examples.py"
    )


def test_the_gallery_has_my_examples():
    names = {p.stem for p in scripts()}
    assert {
        "covariance_pooling",
        "orthogonal_procrustes",
        "topk_operator",
        "julia_rule",
    } <= names


def test_covariance_pooling():
    r = load("covariance_pooling").main(
        batch=2, c_in=4, channels=8, samples=6, dead=2, steps=5
    )
    torch_, ps_ = r["torch.linalg.eigh"], r["ps.matrix_function"]
    # dead channels repeat the eigenvalue eps exactly: torch's eigh backward
    # divides by the zero gap
    assert not torch_["finite"]
    assert ps_["finite"] and ps_["error"] < 1e-6  # vs central differences
    assert math.isnan(torch_["losses"][-1])
    assert ps_["losses"][-1] < ps_["losses"][0]
    assert all(math.isfinite(v) for v in ps_["losses"])


def test_orthogonal_procrustes():
    r = load("orthogonal_procrustes").main(n=5, m=20, steps=150, lr=0.1)
    torch_, ps_ = r["torch.linalg.svd"], r["ps.svd_function"]
    assert not torch_["finite"]  # all singular values 1 at the orthogonal init
    assert ps_["finite"] and ps_["error"] < 1e-6
    assert ps_["orth"] < 1e-12  # Q stays orthogonal
    assert ps_["last"] < ps_["first"]
    # Adam reaches the closed-form solution polar(A^T B)
    assert ps_["dist"] < 1e-3
    assert ps_["last"] == pytest.approx(r["optimum"], rel=1e-4)


def test_topk_operator():
    r = load("topk_operator").main(m=300, n=200, r=16, k=4)
    assert r["ps.svd_topk(LinearOperator)"]["error"] < 1e-8
    assert r["values_error"] < 1e-12
    assert math.isfinite(r["torch.svd_lowrank(formed A)"]["error"])


def test_julia_rule():
    usable, why = _backend.backend_status()["julia"]
    if not usable:
        pytest.skip(f"needs the Julia backend: {why}")
    r = load("julia_rule").main(m=5, n=3)
    assert r["rule"] == "rrule"  # the rule in examples/myrules.jl ran
    assert r["value_err"] < 1e-12 and r["grad_err"] < 1e-10
    assert r["gradcheck"]
    assert r["zygote_rule"] == "zygote" and r["zygote_err"] < 1e-10
    assert r["julia_tests"] in (None, True)


def test_julia_rule_without_julia_says_why(capsys):
    usable, _ = _backend.backend_status()["julia"]
    if usable:
        pytest.skip("Julia is usable here: test_julia_rule runs the example")
    assert load("julia_rule").main() is None
    assert "skipped: the Julia backend is not usable here" in capsys.readouterr().out
