"""Polar pullback and pushforward as plain torch functions: ``svd_function``'s
(``W = U V^H``, ``f = 1``) composed with the products that make ``P``.
Mirrors ``julia/PySpectral/src/pullbacks/polar.jl``.

On the right ``P = herm(W^H A)``: with ``H = herm(gP)``, ``<H, dW^H A + W^H
dA> = <A H, dW> + <W H, dA>``, so ``gA = W H`` plus the pullback of ``W``
with the cotangent ``gW + A H``; on the left (``P = herm(A W^H)``) ``gA = H
W`` and ``W``'s cotangent gains ``H A``. ``W``'s pullback has only divided
differences of ``f = 1``: exact at repeated singular values.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._fns import SpectralFn
from .._settings import Options
from .eigh import hermitian_part
from .svd import svd_function_pullback, svd_function_pushforward

__all__ = ["POLAR", "polar_pullback", "polar_pushforward"]


def _one(S: Tensor, opts: Options) -> tuple[Tensor, Tensor]:
    return torch.ones_like(S), torch.zeros_like(S)


# f = 1 (the domain check, a zero singular value, is the forward's)
POLAR = SpectralFn("polar", _one, lambda S, o: torch.zeros_like(S), spec="polar")


def polar_pullback(
    W: Tensor,
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gW: Tensor | None,
    gP: Tensor | None,
    side: str,
    opts: Options,
) -> Tensor | None:
    """Gradient w.r.t. ``A = U diag(S) Vh`` of ``polar``'s ``(W, P)`` (thin SVD,
    ``W = U Vh``) from their cotangents (None: zero). Never modifies its
    inputs."""
    if gW is None and gP is None:
        return None
    gA = None
    if gP is not None:
        H = hermitian_part(gP)
        A = (U * S.unsqueeze(-2).to(U.dtype)) @ Vh
        gA, extra = (W @ H, A @ H) if side == "right" else (H @ W, H @ A)
        gW = extra if gW is None else gW + extra
    gAw = svd_function_pullback(U, S, Vh, POLAR, gW, opts)
    return gAw if gA is None else gA + gAw


def polar_pushforward(
    W: Tensor, U: Tensor, S: Tensor, Vh: Tensor, dA: Tensor, side: str, opts: Options
) -> tuple[Tensor, Tensor]:
    """Tangents ``(dW, dP)`` of ``polar`` along ``dA``: the transpose of
    :func:`polar_pullback`."""
    dW = svd_function_pushforward(U, S, Vh, POLAR, dA, opts)
    A = (U * S.unsqueeze(-2).to(U.dtype)) @ Vh
    X = dW.mH @ A + W.mH @ dA if side == "right" else dA @ W.mH + A @ dW.mH
    return dW, hermitian_part(X)
