"""Pullback of the linear solve ``(a0 I + a1 A) x = b``. Mirrors
``julia/PySpectral/src/pullbacks/linsolve.jl``.

With ``M = a0 I + a1 A`` and the adjoint solution ``y = M^{-H} x̄`` (one more
solve, by the caller), ``dx = M^{-1}(db - da0 x - da1 A x - a1 dA x)``, so in
torch's convention (the conjugate Wirtinger gradient, ``Re<x̄, dx>``)::

    b̄ = y,   ā0 = -x^H y,   ā1 = -(A x)^H y,   Ā = -conj(a1) y x^H.

``A`` is never formed: its gradient reaches the operator's tensors through
the product ``Z = A x`` (``x`` held fixed), whose cotangent is
``Z̄ = -conj(a1) y`` (``Re<Z̄, dA x> = Re<Z̄ x^H, dA>``). Vectors are
``(*, n)``; the scalars' gradients ``(*,)``, summed over the batch by the
caller where a scalar is shared.
"""

from __future__ import annotations

from torch import Tensor


def linsolve_pullback(
    x: Tensor, Ax: Tensor, y: Tensor, a1: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(b̄, ā0, ā1, Z̄)`` of ``x = (a0 I + a1 A)^{-1} b`` from the adjoint
    solution ``y = (a0 I + a1 A)^{-H} x̄``; ``Ax`` is ``A x``, ``a1`` a
    tensor broadcasting against the ``(*,)`` batch."""
    da0 = -(x.conj() * y).sum(-1)
    da1 = -(Ax.conj() * y).sum(-1)
    dZ = -a1.conj()[..., None] * y
    return y, da0, da1, dZ
