"""PyTorch's own OpInfo gradient tests, run on pyspectral.

The OpInfos of ``linalg.svd``, ``svd``, ``linalg.svdvals``, ``linalg.eigh``
and ``linalg.eigvalsh`` are taken from the installed torch's ``op_db`` and
copied with their ``op`` replaced by the pyspectral function (through a thin
adapter where the signature differs). Everything else is torch's: the sample
inputs, ``gradcheck_wrapper`` (``input + input.mH`` for eigh/eigvalsh),
``output_process_fn_grad`` (the gauge-invariant outputs), the
``gradcheck_fast_mode`` / ``check_batched_*`` / ``supports_*`` flags, the
decorators and declared skips. The test methods make the calls that torch's
``test/test_ops_gradients.py`` (``TestBwdGradients``: gradcheck,
gradgradcheck) and ``test/test_ops_fwd_gradients.py`` (``TestFwdGradients``:
forward AD, forward-over-reverse) make, through torch's own
``TestGradients`` helpers (which set ``check_undefined_grad``,
``check_grad_dtypes``, non-contiguous grad outputs, ...), and torch's
``instantiate_device_type_tests`` applies the OpInfos' dtypes (float64 and
complex128, as torch's gradient tests), decorators and skips, on CPU.

None of the skips and xfails the five OpInfos declare in torch 2.13 targets
these test classes on CPU (they name TestCommon, TestJit, TestFakeTensor and
TestSchemaCheckModeOpInfo, on mps or cuda): each would be applied as in torch.
The five declare ``check_batched_forward_grad=False``, so torch's forward-AD
test does not vmap the forward gradients; neither does this one. (Measured
with torch 2.13 and ``check_batched_forward_grad=True``: torch's own ``svd``,
``linalg.eigh`` and ``linalg.eigvalsh`` fail it on every complex128 sample,
an internal assert on forward-AD views under vmap, and pyspectral fails the
same samples alike; both pass every other sample.)

About 2 CPU-minutes (marker ``opinfo``; ``-m "not opinfo"`` deselects it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

import pyspectral as ps

try:  # torch's test internals (and their dependency expecttest) are optional
    from torch.testing._internal.common_device_type import (
        OpDTypes,
        instantiate_device_type_tests,
        ops,
    )
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_utils import TestGradients
except ImportError as err:  # pragma: no cover - depends on the installation
    pytest.skip(
        f"torch.testing._internal cannot be imported ({err}); it is part of "
        "torch's wheels and needs expecttest (in pyspectral's [test] extra)",
        allow_module_level=True,
    )

pytestmark = [
    pytest.mark.opinfo,
    # torch scripts its forward-AD decompositions when it first needs them
    pytest.mark.filterwarnings(
        "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
    ),
]


def _linalg_svd(A, full_matrices=True):
    """``torch.linalg.svd(A, full_matrices)`` (torch's default: full)."""
    return tuple(ps.svd(A, full_matrices=full_matrices))


def _svd(A, some=True):
    """``torch.svd(A, some)``: ``(U, S, V)`` with ``V = Vh^H``;
    ``some=False`` is ``full_matrices=True``."""
    U, S, Vh = ps.svd(A, full_matrices=not some)
    return U, S, Vh.mH


def _linalg_eigh(A, UPLO="L"):
    """``torch.linalg.eigh(A, UPLO)``."""
    return tuple(ps.eigh(A, UPLO=UPLO))


# torch's op name -> the pyspectral function that replaces it
SUBSTITUTES: dict[str, Callable] = {
    "linalg.svd": _linalg_svd,
    "svd": _svd,
    "linalg.svdvals": ps.svdvals,
    "linalg.eigh": _linalg_eigh,
    "linalg.eigvalsh": ps.eigvalsh,
}
# pyspectral's autograd Functions (their backward nodes' class names)
PS_NODES = {"_SVDBackward", "_EighBackward"}

TORCH_OPS = [o for o in op_db if o.name in SUBSTITUTES]
assert {o.name for o in TORCH_OPS} == set(SUBSTITUTES), "op_db lacks an op"


def _substituted(opinfo):
    """A copy of torch's OpInfo whose op is the pyspectral function (name,
    samples, wrappers, flags and decorators unchanged)."""
    op = copy.copy(opinfo)
    op.op = SUBSTITUTES[opinfo.name]
    return op


PS_OP_DB = [_substituted(o) for o in TORCH_OPS]

# as torch's test_ops_gradients.py: gradcheck requires double precision
_gradcheck_ops = ops(
    PS_OP_DB, dtypes=OpDTypes.supported, allowed_dtypes=[torch.double, torch.cdouble]
)


class TestBwdGradients(TestGradients):
    """gradcheck and gradgradcheck, called as torch's ``TestBwdGradients``
    calls them (``test_fn_grad``, ``test_fn_gradgrad``)."""

    @_gradcheck_ops
    def test_fn_grad(self, device, dtype, op):
        if dtype not in op.supported_backward_dtypes(torch.device(device).type):
            self.skipTest("Skipped! Dtype is not in supported backward dtypes!")
        self._grad_test_helper(device, dtype, op, op.get_op())

    @_gradcheck_ops
    def test_fn_gradgrad(self, device, dtype, op):
        self._skip_helper(op, device, dtype)
        if not op.supports_gradgrad:
            self.skipTest("torch declares no gradgrad for this op")
        self._check_helper(device, dtype, op, op.get_op(), "bwgrad_bwgrad")


class TestFwdGradients(TestGradients):
    """Forward AD and forward-over-reverse, called as torch's
    ``TestFwdGradients`` calls them (``test_forward_mode_AD``,
    ``test_fn_fwgrad_bwgrad``)."""

    @_gradcheck_ops
    def test_forward_mode_AD(self, device, dtype, op):
        self._skip_helper(op, device, dtype)
        if not op.supports_forward_ad:
            self.skipTest("torch declares no forward AD for this op")
        self._grad_test_helper(
            device,
            dtype,
            op,
            op.get_op(),
            check_forward_ad=True,
            check_backward_ad=False,
            check_batched_grad=False,
            check_batched_forward_grad=op.check_batched_forward_grad,
        )

    @_gradcheck_ops
    def test_fn_fwgrad_bwgrad(self, device, dtype, op):
        self._skip_helper(op, device, dtype)
        if not op.supports_fwgrad_bwgrad:
            self.skipTest("torch declares no forward-over-reverse for this op")
        self._check_helper(device, dtype, op, op.get_op(), "fwgrad_bwgrad")


instantiate_device_type_tests(TestBwdGradients, globals(), only_for="cpu")
instantiate_device_type_tests(TestFwdGradients, globals(), only_for="cpu")


# ------------------------------------------- the substitution is what runs


def _node_names(outputs) -> set[str]:
    """Class names of every autograd node behind ``outputs``."""
    todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
    seen: set[str] = set()
    while todo:
        node = todo.pop()
        seen.add(type(node).__name__)
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return seen


def _run(op, sample):
    """What the gradient tests differentiate: the op through its
    ``gradcheck_wrapper`` and ``output_process_fn_grad``, as a tuple."""
    out = op.gradcheck_wrapper(op.get_op(), sample.input, *sample.args, **sample.kwargs)
    if sample.output_process_fn_grad is not None:
        out = sample.output_process_fn_grad(out)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("torch_op", TORCH_OPS, ids=lambda o: o.formatted_name)
def test_substitute_runs_pyspectral_and_matches_torch(torch_op, dtype):
    """On every sample, the functions the gradient tests differentiate are
    pyspectral's autograd Functions (no torch.linalg node in the graph) and
    equal torch's to rounding: the adapters keep torch's conventions."""
    ps_op = _substituted(torch_op)
    torch.manual_seed(0)
    conj = torch_op.test_conjugated_samples and dtype.is_complex
    samples = list(
        torch_op.sample_inputs(
            "cpu", dtype, requires_grad=True, include_conjugated_inputs=conj
        )
    )
    assert samples
    for sample in samples:
        got, want = _run(ps_op, sample), _run(torch_op, sample)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
        if sample.input.numel():
            nodes = _node_names(got)
            assert nodes & PS_NODES, f"no pyspectral node in {nodes}"
            assert not any(n.startswith("Linalg") for n in nodes), nodes
