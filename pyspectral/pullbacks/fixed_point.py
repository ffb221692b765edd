"""Pullback of a fixed point ``x* = F(x*, θ)`` by implicit differentiation.
Mirrors ``julia/PySpectral/src/pullbacks/fixed_point.jl``.

With ``J = ∂F/∂x`` at ``x*``, ``dx* = (1 - J)^{-1} ∂F/∂θ dθ``, so the
cotangent ``x̄`` of ``x*`` becomes ``θ̄ = (∂F/∂θ)^H y`` with ``y`` the
solution of

    (1 - J^H) y = x̄,

one vector-Jacobian product of ``F`` per Krylov step, whatever the number of
forward iterations. ``J^H`` is the transpose of a real-linear map (a step
with ``conj``, ``abs`` or an SVD is not complex-linear), so the solve runs
in real arithmetic on ``x``'s entries viewed as real numbers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..forward import linsolve as K

# a vector-Jacobian product v -> J^H v on real (N,) vectors
Op = Any


def fixed_point_pullback(
    vjp: Op,
    xbar: Tensor,
    tol: float,
    krylovdim: int,
    maxiter: int,
) -> K.Solve:
    """The solution ``y`` of ``(1 - J^H) y = x̄`` by GMRES, with ``vjp(v) =
    J^H v`` on real vectors ``(N,)`` (``x̄`` as one real vector) and the
    residual tolerance ``tol`` relative to ``||x̄||``. The caller applies
    ``(∂F/∂θ)^H`` to ``y`` (its last vjp) and checks the returned residual:
    a solve that does not converge means an eigenvalue of ``J`` at or near 1,
    where ``x*`` is not a differentiable function of ``θ``."""
    b = xbar
    scale = torch.linalg.vector_norm(b)
    tol_t = (tol * scale).reshape(())
    return K.gmres(
        lambda v: v - vjp(v), b, torch.zeros_like(b), tol_t, krylovdim, maxiter
    )
