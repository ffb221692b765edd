"""
Prototype a rule in Julia, call it from PyTorch
===============================================

Write a function and its ``ChainRulesCore.rrule`` in a ``.jl`` file
(``examples/myrules.jl``), ``ps.julia.include`` it, and ``ps.julia.function``
makes it a torch operation whose backward is your rule. Edit the file, include
it again, and the next call uses the new rule. Here the rule is for ``f(X) =
logdet(X^T X + I)``, whose gradient is ``2 X (X^T X + I)^-1``; it is checked
against torch's own autograd of the same function and against finite
differences (``gradcheck``). A function without an ``rrule`` goes through
Zygote instead (``.last_rule`` says which ran). The rule's own tests,
``test_rrule`` of ChainRulesTestUtils in ``examples/myrules_test.jl``, run
with ``ps.julia.run_tests`` (``python -m pyspectral test-julia
examples/myrules_test.jl``).

Needs the Julia backend (``pip install -e ".[julia]"`` in the clone and
``python -m pyspectral install-julia``); where it is not installed the script
says why and stops. The figure shows the errors of the three checks on a log
scale.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

# Julia before torch, the order PythonCall recommends (PythonCall.jl #215/#384):
# asked for before pyspectral is first imported, pyspectral starts Julia where it
# is usable, and only then loads torch. (In a process that has imported torch
# already, Julia starts at the first Julia call, and pyspectral warns.)
os.environ.setdefault("PYSPECTRAL_START_JULIA", "auto")

# isort: off
import pyspectral as ps  # noqa: E402 - starts Julia first where it is usable
import torch  # noqa: E402
from pyspectral import _backend  # noqa: E402
# isort: on

DT = torch.float64

# sphinx-gallery runs an example from its own folder, without __file__
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
RULES = HERE / "myrules.jl"  # logdet_reg and its rrule
RULE_TESTS = HERE / "myrules_test.jl"  # test_rrule(logdet_reg, ...) in a @testset


def reference(X: torch.Tensor) -> torch.Tensor:
    """The same function in torch (torch.linalg's autograd)."""
    return torch.logdet(X.mT @ X + torch.eye(X.shape[-1], dtype=X.dtype))


def main(m: int = 6, n: int = 4, seed: int = 0) -> dict | None:
    usable, why = _backend.backend_status()["julia"]
    if not usable:
        print(f"skipped: the Julia backend is not usable here: {why}")
        return None
    print(RULES.read_text(encoding="utf-8"))
    ps.julia.include(RULES)  # again after an edit: the next call uses the new rule
    f = ps.julia.function("logdet_reg")

    g = torch.Generator().manual_seed(seed)
    X = torch.randn(m, n, generator=g, dtype=DT, requires_grad=True)
    y = f(X)
    y.backward()
    X_t = X.detach().clone().requires_grad_()
    reference(X_t).backward()
    value_err = float((y.detach() - reference(X.detach())).abs())
    grad_err = float((X.grad - X_t.grad).abs().max() / X_t.grad.abs().max())
    fd_ok = torch.autograd.gradcheck(f, (X.detach().clone().requires_grad_(),))
    print(
        f"logdet(X^T X + I) via Julia rule '{f.last_rule}': value error "
        f"{value_err:.1e}, gradient vs torch autograd {grad_err:.1e}, "
        f"gradcheck {fd_ok}"
    )

    z = ps.julia.function("X -> sum(abs2, X' * X)")  # no rrule: Zygote
    Z = X.detach().clone().requires_grad_()
    z(Z).backward()
    zygote_err = float(
        (Z.grad - 4 * Z.detach() @ (Z.detach().mT @ Z.detach())).abs().max()
    )
    print(f"sum(abs2, X^T X) via '{z.last_rule}': gradient error {zygote_err:.1e}")

    # The rule's own Julia tests (ChainRulesTestUtils), as
    # `python -m pyspectral test-julia examples/myrules_test.jl` runs them.
    missing = ps.julia.missing_test_packages()
    if missing:
        print(
            f"Julia tests skipped: test packages {missing} not installed "
            "(python -m pyspectral install-julia --tests)"
        )
        julia_tests = None
    else:
        julia_tests = ps.julia.run_tests(RULE_TESTS)
    return {
        "rule": f.last_rule,
        "value_err": value_err,
        "grad_err": grad_err,
        "gradcheck": fd_ok,
        "zygote_rule": z.last_rule,
        "zygote_err": zygote_err,
        "julia_tests": julia_tests,
    }


# Log scale: an error of exactly 0 is drawn at this floor.
FLOOR = 1e-17


def figure(result: dict):
    """The errors of the Julia rule's value and gradient, and of Zygote's."""
    import matplotlib.pyplot as plt

    rule, zygote = result["rule"], result["zygote_rule"]
    checks = {
        "value vs torch (absolute)": result["value_err"],
        f"gradient ({rule}) vs torch's (relative)": result["grad_err"],
        f"gradient ({zygote}) vs closed form (absolute)": result["zygote_err"],
    }
    fig, ax = plt.subplots(figsize=(8.0, 3.2))
    ax.barh(range(len(checks)), [max(e, FLOOR) for e in checks.values()], color="C0")
    for i, e in enumerate(checks.values()):
        if e == 0:  # no bar: say why
            ax.annotate(
                "exactly 0",
                (FLOOR, i),
                xytext=(3, 0),
                va="center",
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.set_xlim(left=FLOOR)
    ax.set_yticks(range(len(checks)), list(checks))
    ax.invert_yaxis()
    ax.set_xlabel("error (max-norm)")
    ax.set_ylabel("check")
    ax.set_title("A Julia rule called from PyTorch: its errors")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    result = main()
    # without Julia there is nothing to draw
    if result is not None and importlib.util.find_spec("matplotlib"):
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
