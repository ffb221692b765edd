"""Top-k forward without a full decomposition: the choice of method, and the
randomized range finder / subspace iteration for ``svd`` and ``eigh``.
Mirrors ``julia/PySpectral/src/forward/topk.jl``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from .. import _common as C
from ..exceptions import GaugeWarning, InputError

__all__ = ["top_k_method", "randomized_svd", "randomized_eigh"]


def top_k_method(
    op: str,
    A: Tensor,
    k: Any,
    method: str,
    oversample: int,
    n_iter: int,
    rtol: float | None,
    maxiter: int,
) -> tuple[str, tuple]:
    """Validate ``method`` and resolve ``"auto"``: randomized when
    ``min(m, n) >= 512`` and ``k + oversample <= min(m, n) / 8``. Returns the
    method and the parameters of the randomized one. The numbers (``k`` and
    the rest) were validated by ``_common.check_keywords``."""
    kmax = min(A.shape[-2:])
    if method not in ("auto", "full", "randomized"):
        raise InputError(
            f"{op}: method must be 'auto', 'full' or 'randomized', got {method!r}"
        )
    if method == "auto":
        big = kmax >= 512 and k + oversample <= kmax // 8
        method = "randomized" if big else "full"
    rtol = C.eps(A.dtype) ** 0.75 if rtol is None else rtol
    return method, (oversample, n_iter, rtol, maxiter)


def randomized_svd(A: Tensor, k: int, oversample: int, n_iter: int) -> tuple:
    """Top-``k`` ``(U, S, Vh)`` of ``A`` (``(*, m, n)``) by a randomized range
    finder (Halko, Martinsson, Tropp 2011, Alg. 4.4): ``k + oversample`` random
    probes, ``n_iter`` power iterations with re-orthonormalisation."""
    m, n = A.shape[-2:]
    p = min(k + oversample, m, n)
    gen = torch.Generator(device=A.device).manual_seed(0)
    Omega = torch.randn(
        *A.shape[:-2], n, p, dtype=A.dtype, device=A.device, generator=gen
    )
    Q = torch.linalg.qr(A @ Omega).Q
    for _ in range(n_iter):
        Q = torch.linalg.qr(A.mH @ Q).Q
        Q = torch.linalg.qr(A @ Q).Q
    Ub, S, Vh = torch.linalg.svd(Q.mH @ A, full_matrices=False)
    return (Q @ Ub[..., :k]), S[..., :k], Vh[..., :k, :]


def randomized_eigh(A: Tensor, k: int, oversample: int, n_iter: int) -> tuple:
    """The ``k`` largest eigenpairs of a Hermitian ``A`` whose largest
    eigenvalues are also its largest in magnitude (positive semidefinite
    matrices: covariances, Gram matrices), ascending, by subspace iteration and
    a Rayleigh-Ritz step. Warns when the Ritz pairs' residual shows that they
    have not converged (e.g. large negative eigenvalues)."""
    n = A.shape[-1]
    p = min(k + oversample, n)
    gen = torch.Generator(device=A.device).manual_seed(0)
    X = torch.randn(*A.shape[:-1], p, dtype=A.dtype, device=A.device, generator=gen)
    Q = torch.linalg.qr(A @ X).Q
    for _ in range(2 * n_iter):
        Q = torch.linalg.qr(A @ Q).Q
    T = Q.mH @ (A @ Q)
    w, Z = torch.linalg.eigh((T + T.mH) / 2)
    w, V = w[..., p - k :], Q @ Z[..., p - k :]
    residual = (A @ V - V * w.to(A.dtype).unsqueeze(-2)).abs().amax((-2, -1))
    scale = w.abs().amax(-1).clamp_min(torch.finfo(w.dtype).tiny)
    if bool(C._peek(residual > C.eps(A.dtype) ** 0.5 * scale).any()):
        warnings.warn(
            C.ritz_message(float(C._peek(residual / scale).max())),
            GaugeWarning,
            stacklevel=4,
        )
    return w, V
