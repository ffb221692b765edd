"""torch.compile and torch.export (pyspectral/_ops.py): the public calls
whose shapes follow from the input's compile to one graph
(``fullgraph=True``) and export, with their backward, and give eager mode's
values and gradients; in a fresh process (Dynamo's caches and skip lists
start empty there, as a user's do). The operators pass torch.library's
``opcheck``; what keeps the eager path (rank rules, a user's ``f``) still
compiles with graph breaks; input errors and the gauge policy act when the
compiled code runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from _spectra import matrix_with_spectrum, random_like, rel_err

import pyspectral as ps
from pyspectral import _ops

F64 = torch.float64

# Each case: the input ("A": 6x5, "H": 5x5 positive definite) and a loss
# (W: weights of the input's shape); the child compiles each with
# fullgraph=True and exports it, and compares the gradients with eager's.
CASES = {
    "svd": (
        "A",
        "(lambda U, S, Vh: ((U * S) @ Vh * W).sum() + S.pow(3).sum())"
        "(*ps.svd(X, full_matrices=False))",
    ),
    "svd k=3": ("A", "(lambda U, S, Vh: ((U * S) @ Vh * W).sum())(*ps.svd(X, k=3))"),
    "svd full_matrices": (
        "A",
        "(ps.svd(X, full_matrices=True).U[:, :5].abs() ** 2 * W).sum()",
    ),
    "svdvals": ("A", "ps.svdvals(X).pow(2).sum()"),
    "eigh": (
        "H",
        "(lambda w, V: (V.abs() ** 2 * W).sum() + w.pow(3).sum())(*ps.eigh(X))",
    ),
    "eigh k=2 smallest": (
        "H",
        "ps.eigh(X, k=2, largest=False).eigenvalues.pow(2).sum()",
    ),
    "eigh UPLO=U triangle": (
        "H",
        "ps.eigh(X, 'U', gradient='triangle')[0].pow(3).sum()",
    ),
    "eigvalsh": ("H", "ps.eigvalsh(X).pow(3).sum()"),
    "svd_function pow": ("A", "(ps.svd_function(X, ('pow', 2)) * W).sum()"),
    "svd_function polar": ("A", "(ps.svd_function(X, 'polar') * W).sum()"),
    "matrix_function sqrt": ("H", "(ps.matrix_function(X, 'sqrt') * W).sum()"),
    "matrix_function pow": ("H", "(ps.matrix_function(X, ('pow', -0.5)) * W).sum()"),
    "qr positive": (
        "A",
        "(lambda Q, R: (Q * W).sum() + R.pow(2).sum())(*ps.qr(X, positive=True))",
    ),
    "qr r": ("A", "ps.qr(X, 'r').R.pow(3).sum()"),
    "lq": ("A", "(lambda L, Q: (L * W).sum() + Q.sum())(*ps.lq(X))"),
    "eig": (
        "H",
        "(lambda L, V: L.real.pow(3).sum() + (V.abs() ** 2 * W).sum())(*ps.eig(X))",
    ),
    "eigvals": ("H", "ps.eigvals(X).real.pow(2).sum()"),
    "polar left": (
        "A",
        "(lambda U, P: (U * W).sum() + P.pow(2).sum())(*ps.polar(X, 'left'))",
    ),
}

CHILD = """
import json, sys, torch, pyspectral as ps
cases = json.loads(sys.argv[1])
g = torch.Generator().manual_seed(0)
A = torch.randn(6, 5, dtype=torch.float64, generator=g)
H = A[:5] @ A[:5].mT + torch.eye(5, dtype=torch.float64)
out = {}
for name, (which, body) in cases.items():
    torch._dynamo.reset()  # each case compiles afresh (torch 2.11 counted them
    # as recompiles of one frame, past its limit of 8)
    X0 = {"A": A, "H": H}[which]
    W = torch.randn(X0.shape, dtype=torch.float64, generator=g)
    f = eval("lambda X: " + body, {"ps": ps, "torch": torch, "W": W})
    def grad(fn):
        X = X0.clone().requires_grad_()
        value = fn(X)
        return value.detach(), torch.autograd.grad(value, X)[0]
    eager = grad(f)
    compiled = grad(torch.compile(f, fullgraph=True))
    class M(torch.nn.Module):
        def forward(self, X):
            return f(X)
    program = torch.export.export(M(), (X0,))
    ops = sorted({str(n.target) for n in program.graph.nodes
                  if str(n.target).startswith("pyspectral.")})
    exported = grad(program.module())
    err = lambda a, b: float((a - b).abs().max() / b.abs().max())
    out[name] = dict(
        compiled=[err(compiled[0], eager[0]), err(compiled[1], eager[1])],
        exported=[err(exported[0], eager[0]), err(exported[1], eager[1])],
        ops=ops,
    )
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh_process_results() -> dict:
    run = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(CASES)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    return json.loads(lines[0][len("RESULT ") :])


@pytest.mark.parametrize("case", list(CASES))
def test_fullgraph_and_export_with_backward_in_a_fresh_process(
    fresh_process_results, case
):
    got = fresh_process_results[case]
    assert max(got["compiled"]) < 1e-12, got
    assert max(got["exported"]) < 1e-12, got
    # one pyspectral operator in the exported graph (not inlined torch ops)
    assert len(got["ops"]) == 1 and got["ops"][0].startswith("pyspectral."), got


def _args():
    A = matrix_with_spectrum([3.0, 2.0, 1.0], 4, 3, seed=1)
    H = A.mT @ A + torch.eye(3, dtype=F64)
    return A, H


@pytest.mark.parametrize(
    "op, make",
    [
        (torch.ops.pyspectral.svd, lambda A, H: (A, False, None, None, None, None)),
        (torch.ops.pyspectral.svd, lambda A, H: (A, True, 1e-10, None, "ignore", None)),
        (
            torch.ops.pyspectral.eigh,
            lambda A, H: (H, "L", None, None, None, None, None),
        ),
        (
            torch.ops.pyspectral.svd_function,
            lambda A, H: (A, "pow", 2.0, None, None),
        ),
        (
            torch.ops.pyspectral.matrix_function,
            lambda A, H: (H, "sqrt", 0.0, "U", None, "triangle", True),
        ),
        (torch.ops.pyspectral.qr, lambda A, H: (A, "complete", True, None, None)),
        (torch.ops.pyspectral.eig, lambda A, H: (H, None, None, "warn", None)),
    ],
    ids=["svd", "svd full", "eigh", "svd_function", "matrix_function", "qr", "eig"],
)
def test_the_operators_pass_opcheck(op, make):
    args = make(*_args())
    args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    # (test_aot_dispatch_dynamic: the backward kernels are opaque by design)
    torch.library.opcheck(
        op,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


def test_calls_that_keep_the_eager_path_still_compile():
    # a rank rule (its width depends on the values) and a user's f: graph
    # breaks, the same numbers
    torch.compiler.reset()
    A = matrix_with_spectrum([3.0, 2.0, 1.0, 0.5], 5, 4, seed=2)
    W = random_like(A, seed=3)

    def f(X):
        U, S, Vh = ps.svd(X, atol=0.7)
        return ((U * S) @ Vh * W).sum() + (ps.svd_function(X, torch.tanh) * W).sum()

    def grad(fn):
        X = A.clone().requires_grad_()
        return torch.autograd.grad(fn(X), X)[0]

    assert rel_err(grad(torch.compile(f, backend="eager")), grad(f)) < 1e-12


def test_errors_act_when_the_compiled_code_runs():
    torch.compiler.reset()
    f = torch.compile(lambda X: ps.svd(X, full_matrices=False).S.sum(), fullgraph=True)
    A = matrix_with_spectrum([3.0, 2.0, 1.0], 4, 3, seed=4)
    bad = A.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ps.NonFiniteError, match="NaN or Inf"):
        f(bad)
    # the gauge policy in the backward kernel: a basis-dependent loss at a
    # degenerate spectrum raises under gauge="raise"
    g = torch.compile(
        lambda X: ps.svd(X, gauge="raise", full_matrices=False).U[:, 0].sum(),
        fullgraph=True,
    )
    X = torch.eye(3, dtype=F64, requires_grad=True)
    with pytest.raises(ps.GaugeError):
        g(X).backward()


def test_compiling_is_false_in_eager_mode():
    assert _ops.compiling() is False
