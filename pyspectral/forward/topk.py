"""Certified top-k forward without a full decomposition: block subspace
iteration with a Rayleigh-Ritz step per iteration, for ``svd`` and ``eigh``,
touching ``A`` only through ``matmul(X) = A @ X`` and ``rmatmul(X) = A^H @ X``.
Mirrors ``julia/PySpectral/src/forward/topk.jl``.

Certificate. The Rayleigh-Ritz step on the block ``Q`` (``B = Q^H A = Ub S
Vb^H``, ``U = Q Ub``, ``V = Vb``) makes ``A^H U = V S`` and ``U^H A V = S``
exact, so the Ritz triplets are the exact top triplets of ``A - R V^H`` with
``R = A V - U S``: ``||r_i|| = ||A v_i - s_i u_i||`` is a backward error. A
triplet is *certified* when ``||r_i|| <= tol * s_1`` with ``tol = eps**(3/4)``,
the relative size below which ``degeneracy_atol`` already treats two singular
values as equal: a certified result is the exact top-k of a matrix closer to
``A`` than the package's own resolution, and its gradient differs from the full
path's by ``O(tol / relative gap)`` (measured 1e-12 to 1e-11 in float64 for
``s_{k+1}/s_k`` from 0.5 to 0.999: benchmarks/bench_topk.py). The
call is certified when the kept triplets are, and the cluster of ``s_k`` (Ritz
values within ``degeneracy_atol``) is closed inside the certified block, so
that the backward can treat the pairs that ``k`` cuts explicitly
(``pullbacks/truncated.py``). ``eigh`` is the same with ``T = Q^H A Q``.

Work budget. Each iteration costs two products with the ``p``-column block
(one for ``eigh``) and a QR and SVD of it; the residual norms fall like
``(s_{p+1}/s_i)^2`` per iteration, a rate measured from successive
residuals, which also gives the condition number of the backward's CG,
``1 / (1 - rate)``. From the third iteration on, the iteration stops as soon
as the predicted total (iterations left plus the CG) exceeds the budget, or
the rate shows no convergence (under ``method="randomized"`` from the
``RANDOMIZED_MIN_ITERATIONS``-th on, and never with ``n_iter``, which then
alone limits the iterations).
``auto`` tries the iteration only where those three iterations cost at most
``AUTO_TRIAL`` (5 %) of the full path and a fast convergence would cost at
most ``AUTO_TRY`` of it, spends at most ``AUTO_BUDGET`` (half the full
path), and takes the full path (``None`` is returned) when the result is not
certified: with no gap at k that costs the three iterations.

Why subspace iteration and not block Krylov / LOBPCG: with a block of
``p = k + max(10, k)`` columns the rate ``(s_{p+1}/s_k)^2`` is small wherever
the top of the spectrum decays at all (and where it does not, neither method
would beat the full SVD with a gradient to match), and every iterate is an
orthonormal block with exact Rayleigh-Ritz relations, so the certificate is
a plain residual norm. Where the tail after a gap decays slowly (a gap of 0.5
at ``k``, then 0.997 per value: rate 0.21, 17 iterations at 4096^2) a block
Krylov forward would need about 10 (docs/benchmarks.md, Top-k).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from .._settings import Options
from ..common.defaults import eps, peek
from ..exceptions import InputError

__all__ = [
    "TopKConfig",
    "TopKResult",
    "top_k_method",
    "svd_topk",
    "eigh_topk",
    "cg_iterations",
]

Op = Any  # a callable Tensor -> Tensor (A @ X or A^H @ X)

# Cost model, calibrated on this project's 2-core CPU (torch 2.13, float64,
# MKL) by ``python benchmarks/bench_topk.py --calibrate`` and by timing whole
# iterations. Unit: the time of m n p multiply-adds in a product of A with a
# 32-column block; a product with p columns costs m n max(p, 32) (below about
# 32 columns it is memory bound; wider blocks run faster per column, which the
# model ignores). A full thin SVD with vectors measured 8.3 (n = 2048) to 19
# (n = 256) m n min(m, n), the full path's top-k backward about 2 more; eigh
# 3.3 to 7.4, plus 2. One iteration measured 0.4 to 1 times the model below
# (products plus BLOCK_COST (m + n) p^2 for the QR and SVD of the block).
# The constants are the conservative ends (iterations dear, the full path
# cheap): "auto" only iterates where that clearly wins.
SVD_FULL_COST = 10.0
EIGH_FULL_COST = 5.0
MIN_COLUMNS = 32
BLOCK_COST = 10.0  # QR and SVD/eigh of the block: BLOCK_COST (m + n) p^2
ITERATION_OVERHEAD = 1e6
# auto: iterate only if the predicted cost is below this fraction of the full
# path's, and give up (fall back) as soon as it is predicted to exceed it.
AUTO_BUDGET = 0.5
AUTO_TRY = 0.3
# ... and the iterations that measure the rate before it can give up must cost
# at most this fraction of the full path (the price of a spectrum with no gap)
AUTO_TRIAL = 0.05
# iterations before the measured rate is trusted to stop an iteration
MIN_RATE_ITERATIONS = 3
# method="randomized" (without n_iter): iterations before it may give up, by
# the measured rate (stalled, or predicted over its budget, which is the full
# path's cost or this many iterations, whichever is more)
RANDOMIZED_MIN_ITERATIONS = 100
# below this size the full decomposition is faster than any iteration here
AUTO_MIN_SIZE = 96


class TopKConfig(NamedTuple):
    """Settings of one iterative top-k call (validated by ``top_k_method``)."""

    method: str  # "auto" (fall back to full when not certified) or "randomized"
    p: int  # block size k + oversample, at most min(m, n)
    max_iter: int | None  # cap on subspace iterations (None: the work budget)
    tol: float  # certificate: ||r_i|| <= tol * scale
    rtol: float  # backward CG relative tolerance
    maxiter: int  # backward CG iteration cap


class TopKResult(NamedTuple):
    """All ``p`` Ritz triplets (eigh: pairs), the kept ``k`` first; the first
    ``d`` are certified (the backward treats them exactly, the others
    precondition its CG). ``message`` says why a call is not certified
    (empty when it is)."""

    U: Tensor  # (*, m, p)   (eigh: eigenvectors (*, n, p))
    S: Tensor  # (*, p)      (eigh: eigenvalues, kept ones ascending first)
    V: Tensor | None  # (*, n, p); None for eigh
    d: int
    iterations: int
    message: str


def top_k_method(
    op: str,
    A: Tensor,
    k: Any,
    method: str,
    oversample: int | None,
    n_iter: int | None,
    rtol: float | None,
    maxiter: int,
) -> tuple[str, TopKConfig | None]:
    """Validate ``k`` and ``method`` and choose the path: ``"full"`` or
    ``"iterative"`` (with its config). ``auto`` takes the full path outright
    for small matrices, blocks wider than ``min(m, n) / 4`` and whenever even
    a fast-converging iteration would cost more than ``AUTO_TRY`` times the
    full decomposition. ``k`` and the numeric keywords were validated by
    ``_validation.check_keywords``."""
    kmax = min(A.shape[-2:])
    if method not in ("auto", "full", "randomized"):
        raise InputError(
            f"{op}: method must be 'auto', 'full' or 'randomized', got {method!r}"
        )
    extra = max(10, k) if oversample is None else oversample
    p = min(k + extra, kmax)
    rtol = eps(A.dtype) ** 0.75 if rtol is None else rtol
    cfg = TopKConfig(
        method=method,
        p=p,
        max_iter=n_iter,
        tol=eps(A.dtype) ** 0.75,
        rtol=rtol,
        maxiter=maxiter,
    )
    if method == "full" or A.numel() == 0:  # an empty batch: nothing to iterate
        return "full", None
    if method == "auto":
        unit = _unit(A.shape, p, 1)
        products = 2 if op == "svd" else 1
        full = full_cost(op, A)
        # the least an iteration can cost (3 iterations and 4 CG steps) must
        # be well below the full path, and giving up after the iterations
        # that measure the rate must cost next to nothing
        trial = MIN_RATE_ITERATIONS * products * unit
        least = trial + 2 * 4 * unit
        small = kmax < AUTO_MIN_SIZE or 4 * p > kmax
        if small or least > AUTO_TRY * full or trial > AUTO_TRIAL * full:
            return "full", None
    return "iterative", cfg


def full_cost(op: str, A: Tensor) -> float:
    """Cost of the full path (decomposition and backward), per matrix."""
    m, n = A.shape[-2:]
    c = SVD_FULL_COST if op == "svd" else EIGH_FULL_COST
    return c * m * n * min(m, n)


def _unit(shape: tuple, p: int, batch: int) -> float:
    """Cost of one product with the block plus its share of the block's QR
    and SVD / eigh, for ``batch`` matrices of ``shape[-2:]``."""
    m, n = shape[-2:]
    block = BLOCK_COST * (m + n) * p * p + ITERATION_OVERHEAD
    return batch * (m * n * max(p, MIN_COLUMNS) + block)


def cg_iterations(kappa: float, rtol: float, maxiter: int) -> int:
    """Conjugate-gradient steps to reduce the residual by ``rtol`` at condition
    number ``kappa``, from the Chebyshev bound ``2 q**j``,
    ``q = (sqrt(kappa) - 1) / (sqrt(kappa) + 1)``."""
    if not kappa < 1e300:
        return maxiter
    root = max(kappa, 1.0) ** 0.5
    if root - 1 < 1e-8:
        return 1
    # log(1 / q) as log1p(2 / (root - 1)): accurate, and > 0 also where
    # (root + 1) / (root - 1) rounds to 1 (whose log, 0, overflowed int())
    return min(
        maxiter, int(_host(2.0 / rtol).log() / _host(2 / (root - 1)).log1p()) + 1
    )


def _host(x: float) -> Tensor:
    """``x`` as a float64 CPU scalar, for host arithmetic: on the CPU whatever
    torch's default device is (no GPU tensor, no sync)."""
    return torch.tensor(x, dtype=torch.float64, device="cpu")


# ------------------------------------------------------------ the monitor


class _Monitor:
    """Decides after each Rayleigh-Ritz step: certified, go on, or stop.

    ``values``: Ritz values, wanted end first (descending); ``res``: residual
    norms relative to ``scale``; both ``(B, p)`` with the batch flattened.
    Keeps the worst needed residual per iteration to measure the rate.
    """

    def __init__(
        self,
        op: str,
        cfg: TopKConfig,
        k: int,
        kmax: int,
        unit: float,
        budget: float,
        products: int,
        opts: Options,
    ) -> None:
        self.op, self.cfg, self.k, self.kmax = op, cfg, k, kmax
        self.unit, self.budget, self.products, self.opts = unit, budget, products, opts
        self.spent = 0.0
        self.history: list[float] = []
        self.iterations = 0
        self.d = k
        self.kappa = float("inf")
        self.certified = False
        self.why = ""

    def step(self, values: Tensor, res: Tensor, scale: Tensor) -> bool:
        """True when the loop should stop (certified or given up)."""
        self.iterations += 1
        self.spent += self.products * self.unit
        cfg, k, p = self.cfg, self.k, values.shape[-1]
        values, res, scale = (peek(t.detach()) for t in (values, res, scale))
        # length of the certified prefix of each batch element
        prefix = torch.cumprod((res <= cfg.tol).to(torch.int64), -1).sum(-1)
        needed = self._needed(values, scale)
        self.d = max(k, int(prefix.min()))
        if int(prefix.min()) >= int(needed.max()):
            self.certified, self.why = True, ""
            # the CG is preconditioned by the uncertified extras: predict
            # it from the block's end (exact when they are converged)
            nxt = p - 1 if p < self.kmax else p
            self.kappa = self._kappa(values, scale, max(nxt, int(needed.max())))
            return True
        if int(prefix.min()) >= k and int(needed.max()) > p:
            self.why = (
                f"the {'singular ' if self.op == 'svd' else 'eigen'}values at k = "
                f"{k} form a cluster (within degeneracy_atol) that extends past the "
                f"block of k + oversample = {p}; raise oversample"
            )
            return True
        upto = torch.arange(p, device=res.device) < needed.clamp(max=p)[:, None]
        worst = float(torch.where(upto, res, torch.zeros_like(res)).max())
        self.history.append(max(worst / cfg.tol, 1.0))
        what = (
            "|A v - s u| / s_1 of the triplets"
            if self.op == "svd"
            else "|A v - w v| / max|w| of the eigenpairs"
        )
        its = f"{self.iterations} iteration{'s' if self.iterations > 1 else ''}"
        self.why = (
            f"after {its} the largest relative residual {what} needed is "
            f"{worst:.2g} (tolerance {cfg.tol:.2g})"
        )
        if cfg.max_iter is not None:
            # n_iter given: the iteration runs until certified or n_iter
            # (under auto the budget still applies: auto falls back cheaply)
            if self.iterations >= cfg.max_iter:
                return True
            if cfg.method == "randomized":
                return False
        if cfg.method == "randomized" and self.iterations < RANDOMIZED_MIN_ITERATIONS:
            return False
        return self._over_budget()

    def _deg(self, scale: Tensor) -> Tensor:
        if self.opts.degeneracy_atol is not None:
            return torch.full_like(scale, self.opts.degeneracy_atol)
        return scale * eps(scale.dtype) ** 0.75

    def _needed(self, values: Tensor, scale: Tensor) -> Tensor:
        """Per element, how many leading Ritz pairs the backward needs exactly:
        the kept ones and the rest of the cluster of value ``k`` (``p + 1``:
        the cluster does not end inside the block)."""
        k, p = self.k, values.shape[-1]
        deg = self._deg(scale)
        outside = values[:, k:] < values[:, k - 1 : k] - deg[:, None]
        end = p if p == self.kmax else p + 1
        first = torch.full_like(scale, end, dtype=torch.int64)
        if k < p:
            past = k + outside.to(torch.int64).argmax(-1)
            first = torch.where(outside.any(-1), past, first)
        if self.op == "svd":
            # s_k numerically zero: the kept zeros get pseudo-inverse (zero)
            # couplings, whatever the size of the zero block
            first = torch.where(values[:, k - 1] <= deg, k, first)
        return first

    def _kappa(self, values: Tensor, scale: Tensor, nxt: int) -> float:
        """Condition number of the backward's CG for column k (worst element)
        when the first value past what it deflates is ``values[:, nxt]``."""
        k = self.k
        if nxt >= self.kmax:
            return 1.0
        # past the block only when s_k = 0 (svd, oversample 0), where kappa = 1
        nxt = min(nxt, values.shape[-1] - 1)
        # in units of the scale: squares of values near 1e200 overflow
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        vk, vn = values[:, k - 1] / safe, values[:, nxt] / safe
        if self.op == "svd":
            kappa = vk**2 / (vk**2 - vn**2).clamp_min(0)
            kappa = torch.where(vk * safe <= self._deg(scale), 1.0, kappa)
        else:
            low = torch.minimum(values[:, -1] / safe, torch.zeros_like(vk))
            kappa = (vk - low) / (vk - vn).clamp_min(0)
        return float(kappa.nan_to_num(float("inf")).max())

    def _over_budget(self) -> bool:
        """Predict the cost of finishing (iterations left and the backward's
        CG, both from the measured rate); stop when it breaks the budget."""
        h = self.history
        if len(h) < MIN_RATE_ITERATIONS:
            return False  # early rates are erratic: iterate before predicting
        # the slower of the last two rates
        rate = max(h[i + 1] / h[i] for i in range(len(h) - 3, len(h) - 1))
        if rate >= 1:
            self.why += "; it is not converging"
            return True
        left = float(_host(h[-1]).log() / -_host(rate).log()) + 1
        # the rate is about (s_{p+1} / s_k)^2, which also sets the condition
        # number of the backward's CG: 1 / (1 - rate)
        cg = cg_iterations(1 / (1 - float(rate)), self.cfg.rtol, self.cfg.maxiter)
        predicted = self.spent + (left * self.products + 2 * cg) * self.unit
        if predicted > self.budget:
            self.why += "; at the measured rate it would exceed the work budget"
            return True
        return False


def svd_topk(
    matmul: Op,
    rmatmul: Op,
    shape: tuple,
    dtype: torch.dtype,
    device: torch.device,
    k: int,
    cfg: TopKConfig,
    opts: Options,
) -> TopKResult | None:
    """Top-``k`` singular triplets of the ``(*, m, n)`` operator ``A`` by block
    subspace iteration on ``A A^H`` with a Rayleigh-Ritz step per iteration.

    Returns the certified block (kept triplets first, then the certified
    extras), or, if not certified: ``None`` under ``method="auto"`` (the caller
    takes the full path) and the kept triplets with a message under
    ``"randomized"``.
    """
    *batch, m, n = shape
    mon = _monitor("svd", cfg, k, shape, 2, opts)
    Q = _orth(matmul(_randn((*batch, n, cfg.p), dtype, device)))
    while True:
        # Rayleigh-Ritz: B = Q^H A = (A^H Q)^H = W S V^H, U = Q W; then
        # A^H U = V S exactly and the residual is R = A V - U S, whose
        # product A V is also the next iterate's.
        V, S, Wh = torch.linalg.svd(rmatmul(Q), full_matrices=False)
        U = Q @ Wh.mH
        AV = matmul(V)
        scale = S[..., 0]
        res = _relative(AV - U * S.to(dtype).unsqueeze(-2), scale)
        if mon.step(_flat(S, batch), _flat(res, batch), scale.reshape(-1)):
            break
        Q = _orth(AV)
    return _finish(mon, cfg, U, S, V, scale)


def eigh_topk(
    matmul: Op,
    shape: tuple,
    dtype: torch.dtype,
    device: torch.device,
    k: int,
    largest: bool,
    cfg: TopKConfig,
    opts: Options,
) -> TopKResult | None:
    """The ``k`` largest (or smallest) eigenpairs of the Hermitian ``(*, n, n)``
    operator ``A`` by block subspace iteration with a Rayleigh-Ritz step.

    Subspace iteration favours the eigenvalues largest in *magnitude*, and
    "largest algebraic" is not "largest in magnitude". Eigenvalues past ``k``
    that are larger in magnitude than the k-th (a large negative end) enter
    the block and cost nothing while they fit in its extra columns; once they
    fill all but one, the iteration runs on ``A - sigma I`` (on ``-A`` for
    the smallest), ``sigma = min(0, (theta_low + theta_{k+1}) / 2)`` from the
    Ritz values seen so far (``theta_low`` the lowest), which folds the
    negative end below the wanted eigenvalues. The eigenvalues are returned
    with the kept ones first,
    ascending (as ``torch.linalg.eigh``), then the certified extras.
    """
    *batch, n, _ = shape
    p = cfg.p
    sign = 1.0 if largest else -1.0
    mon = _monitor("eigh", cfg, k, shape, 1, opts)
    Q = _orth(_randn((*batch, n, p), dtype, device))
    low, top, shifted = None, None, False
    while True:
        AQ = matmul(Q) * sign
        T = Q.mH @ AQ
        theta, Z = torch.linalg.eigh((T + T.mH) / 2)
        theta, Z = theta.flip(-1), Z.flip(-1)  # descending: the wanted end first
        V, AV = Q @ Z, AQ @ Z
        big = theta.abs().amax(-1)
        top = big if top is None else torch.maximum(top, big)
        res = _relative(AV - V * theta.to(dtype).unsqueeze(-2), top)
        if mon.step(_flat(theta, batch), _flat(res, batch), top.reshape(-1)):
            break
        low = theta[..., -1:] if low is None else torch.minimum(low, theta[..., -1:])
        if k < p and not shifted:
            # eigenvalues past k larger in magnitude than the k-th: they take
            # the block's extra columns; shift once they fill all but one
            invaders = (theta[..., k:].abs() > theta[..., k - 1 : k].abs()).sum(-1)
            shifted = int(peek(invaders).max()) >= max(1, p - k - 1)
        if shifted:
            sigma = torch.clamp((low + theta[..., k : k + 1]) / 2, max=0)
            AV = AV - V * sigma.to(dtype).unsqueeze(-2)
        Q = _orth(AV)
    # kept eigenvalues ascending, as torch.linalg.eigh returns them
    order = list(range(k - 1, -1, -1)) if largest else list(range(k))
    order += list(range(k, p))
    return _finish(mon, cfg, V[..., order], sign * theta[..., order], None, top)


def _relative(R: Tensor, scale: Tensor) -> Tensor:
    """Column norms of ``R`` divided by ``scale`` (0 where ``scale`` is 0: the
    zero matrix, whose Ritz pairs are exact)."""
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    # divide first: the squares of a norm of entries of 1e200 overflow
    return torch.linalg.vector_norm(R / safe[..., None, None].to(R.dtype), dim=-2)


def _flat(t: Tensor, batch: list) -> Tensor:
    return t.reshape(-1, t.shape[-1]) if batch else t.unsqueeze(0)


def _orth(Y: Tensor) -> Tensor:
    return torch.linalg.qr(Y).Q


def _randn(shape: tuple, dtype: torch.dtype, device: torch.device) -> Tensor:
    gen = torch.Generator(device=device).manual_seed(0)
    return torch.randn(*shape, dtype=dtype, device=device, generator=gen)


def _monitor(
    op: str, cfg: TopKConfig, k: int, shape: tuple, products: int, opts: Options
) -> _Monitor:
    *batch, m, n = shape
    nb = 1
    for b in batch:
        nb *= b
    unit = _unit(shape, cfg.p, nb)
    full = nb * (SVD_FULL_COST if op == "svd" else EIGH_FULL_COST) * m * n * min(m, n)
    # auto: well below the full path; randomized: the full path's cost, but at
    # least RANDOMIZED_MIN_ITERATIONS iterations (small matrices, where the full
    # path is cheap), or n_iter iterations when given (no budget: step)
    least = RANDOMIZED_MIN_ITERATIONS * products * unit
    budget = AUTO_BUDGET * full if cfg.method == "auto" else max(full, least)
    if cfg.method == "randomized" and cfg.max_iter is not None:
        budget = float("inf")
    return _Monitor(op, cfg, k, min(m, n), unit, budget, products, opts)


def _finish(
    mon: _Monitor,
    cfg: TopKConfig,
    U: Tensor,
    S: Tensor,
    V: Tensor | None,
    scale: Tensor,
) -> TopKResult | None:
    if cfg.method == "auto":
        if not mon.certified:
            return None
        # the backward's CG must fit in the budget too
        cg = cg_iterations(mon.kappa, cfg.rtol, cfg.maxiter)
        if mon.spent + 2 * cg * mon.unit > mon.budget:
            return None
    d = mon.d if mon.certified else mon.k
    return TopKResult(U, S, V, d, mon.iterations, mon.why)
