"""Which backend runs a call: ``resolve_backend`` and ``backend_status``.

Kept out of ``_settings`` and ``_validation`` because it needs the Julia bridge,
which uses them: the layers that the pullbacks build on must not reach Julia.
"""

from __future__ import annotations

import torch
from torch._C._functorch import is_functorch_wrapped_tensor

from .exceptions import BackendError
from .julia import _bridge, _convert

BACKENDS = ("auto", "torch", "julia")


def backend_status() -> dict[str, tuple[bool, str]]:
    """For each backend name: whether it can run here, and why (not)."""
    return {"torch": (True, "native PyTorch backend"), "julia": _bridge.status()}


def resolve_backend(op: str, backend: str, A: torch.Tensor) -> str:
    """Map ``backend`` to the one that runs: ``"torch"`` or ``"julia"``.

    ``"auto"`` (the default) is the native backend, for every call: it is the
    one measured fast (benchmarks/), it runs on GPU and under torch.func, and it
    needs no Julia. Julia runs only when asked for with ``backend="julia"``,
    which raises when it cannot run this call. Should Julia be measured faster
    for some call, this is where ``"auto"`` would send that call there; none
    is today.
    """
    if backend not in BACKENDS:
        raise BackendError(f"{op}: backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "julia":
        return "torch"
    # (under an active transform even a tensor it does not follow cannot be
    # handed to Julia: a user f may use one it does)
    transformed = is_functorch_wrapped_tensor(A)
    why_not = (
        "torch.func transforms (vmap, grad, jacrev) run on the native backend"
        if transformed or torch._C._are_functorch_transforms_active()
        else "empty tensors run on the native backend"
        if A.numel() == 0
        else ""
    )
    if why_not:
        raise BackendError(f"{op}: {why_not}; use backend='torch'")
    _convert.check_tensor(op, A)
    _bridge.glue()
    return "julia"
