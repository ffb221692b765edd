"""Certified top-k forward without a full decomposition: block subspace
iteration or block Krylov with Rayleigh-Ritz steps, for ``svd`` and ``eigh``,
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

Two iterations. *Subspace iteration* (``method="randomized"``): each
iteration costs two products with the ``p``-column block (one for ``eigh``)
and a QR and SVD of it; the residual norms fall like ``(s_{p+1}/s_i)^2`` per
iteration. *Block Krylov* (``method="krylov"``; Musco & Musco, NeurIPS 2015,
as a block Golub-Kahan-Lanczos bidiagonalization; block Lanczos for
``eigh``): each step applies ``A^H`` and ``A`` (``eigh``: ``A``) to one new
block of ``b`` columns (:func:`krylov_block`), orthogonalizes it against the
whole basis (block classical Gram-Schmidt, :func:`_extend`) and records the
coefficients, so that
``A^H U_K = V_K C`` holds to rounding: the Rayleigh-Ritz step is the SVD of
the small ``C`` (``eigh``: of ``T = V_K^H A V_K``) and its Ritz triplets
satisfy ``A^H U = V S`` as the subspace iteration's do. Its residuals
``A V - U S`` lie in the next block and cost no product; where they certify,
one product of the ``p`` Ritz vectors computes them explicitly, and the
explicit ones decide (the certificate above, unchanged). The wanted values
then converge at the Chebyshev rate :func:`chebyshev_rate` of the ratio
``r = (s_{b+1}/s_k)^2`` per step instead of ``r``: 0.07 instead of 0.25 at
the gap 0.5 before a slow tail. The basis is thick-restarted (the ``p``
leading Ritz triplets kept, with their residual block) when it would exceed
``p + KRYLOV_RESTART b`` columns per side, which bounds its memory.

Work budget. The residuals are measured after each step (the Krylov
iteration measures them less often once the rate is known: at the step it
predicts convergence, as the SVD of ``C`` grows with the basis); their rate
per step also gives the condition number of the backward's CG,
``1 / (1 - rate)`` for the subspace iteration. From the third measurement
on, the iteration stops as soon as the predicted total (steps left plus the
CG) exceeds the budget, or the rate shows no convergence (under
``method="randomized"`` / ``"krylov"`` from the
``RANDOMIZED_MIN_ITERATIONS``-th step on, and never with ``n_iter``, which
then alone limits the steps).
``auto`` tries the iteration only where three iterations cost at most
``AUTO_TRIAL`` (5 %) of the full path and a fast convergence would cost at
most ``AUTO_TRY`` of it, spends at most ``AUTO_BUDGET`` (half the full
path), and takes the full path (``None`` is returned) when the result is not
certified: with no gap at k that costs the three iterations.

Which iteration (``auto``). It starts with subspace iteration, whose block of
``p = k + max(10, k)`` columns converges in a few iterations wherever the
spectrum decays past ``p``. Once two iterations have measured its rate, the
cost model (:func:`krylov_pays`) predicts the rest of the work both ways:
the subspace iteration at its measured rate, the Krylov iteration (started
from the block's leading ``b`` vectors) at the Chebyshev rate of
``max(rate, (theta_{b+1}/theta_k)^2)`` from the current Ritz values, with its
Gram-Schmidt and Rayleigh-Ritz costs; it switches to Krylov where that is
predicted below ``KRYLOV_GAIN`` of the other (benchmarks/bench_topk.py's
slow tail past a gap at 4096^2, k = 32: 17 subspace iterations of 64
columns, against 2 of them and 8 Krylov steps of 32 columns). Either way the
result carries the same certificate.

Float32. Both iterations certify at ``eps**(3/4)`` of the scale (6.5e-6 in
float32), against residuals computed explicitly; the Krylov basis is
orthogonal to about ``eps`` times the square root of its width (Gram-Schmidt
twice where needed), well below that, and where rounding keeps a residual
above it the rate stalls and the call is not certified (``auto``: the full
path; otherwise a ``ConvergenceWarning``), as for subspace iteration.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from .. import _linalg
from .._settings import Options
from ..common.defaults import eps, peek
from ..exceptions import InputError

__all__ = [
    "TopKConfig",
    "TopKResult",
    "TOP_K_METHODS",
    "top_k_method",
    "svd_topk",
    "eigh_topk",
    "cg_iterations",
    "krylov_block",
    "chebyshev_rate",
    "krylov_pays",
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
# Block Krylov. The basis holds at most p + KRYLOV_RESTART b columns per side
# (then a thick restart keeps the p leading Ritz triplets): memory (m + n)
# (p + KRYLOV_RESTART b) entries, and the Rayleigh-Ritz SVD of at most that
# size. Measured on the same machine (2048^2, b = 32, N = 320 basis columns):
# one Gram-Schmidt pass against the basis runs at half the BLAS rate of a
# product (ORTH_COST (m + n) N b per step for one pass on each side), the SVD
# of the N x N projected matrix RITZ_COST N^3 (eigh: half).
KRYLOV_RESTART = 10
# Krylov steps between measurements, at most (the budget is checked at each)
KRYLOV_MAX_DUE = 8
ORTH_COST = 4.0
RITZ_COST = 10.0
# auto switches to Krylov only where its predicted cost is below this fraction
# of the subspace iteration's (the models' error: Krylov's rate is a bound)
KRYLOV_GAIN = 0.7
# the methods of the iterative path and the full one (svd / eigh / *_topk)
TOP_K_METHODS = ("auto", "full", "randomized", "krylov")


class TopKConfig(NamedTuple):
    """Settings of one iterative top-k call (validated by ``top_k_method``)."""

    method: str  # "auto" (fall back to full when not certified), "randomized"
    # (subspace iteration) or "krylov" (block Krylov); the last two warn
    p: int  # block size k + oversample, at most min(m, n)
    max_iter: int | None  # cap on iterations / Krylov steps (None: the budget)
    tol: float  # certificate: ||r_i|| <= tol * scale
    rtol: float  # backward CG relative tolerance
    maxiter: int  # backward CG iteration cap
    block: int = 0  # Krylov block b (0: p reaches min(m, n), no Krylov)
    switch: bool = False  # may hand over from subspace iteration to Krylov


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
    if method not in TOP_K_METHODS:
        raise InputError(
            f"{op}: method must be 'auto', 'full', 'randomized' or 'krylov', got "
            f"{method!r}"
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
        block=krylov_block(k, p, kmax),
        switch=method == "auto",
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


def krylov_block(k: int, p: int, kmax: int) -> int:
    """Block size ``b`` of the Krylov iteration: ``k`` (a block Krylov space
    resolves clusters of up to ``b`` equal values), at least ``MIN_COLUMNS``
    (a product with fewer columns costs as much) but at most ``p``, and at
    most ``(kmax - p) / 2`` so that a restart (``p`` Ritz vectors, the
    pending block and the next) fits in ``min(m, n)`` dimensions; 0 when
    that leaves nothing (subspace iteration then converges in a few
    iterations: its block holds almost everything)."""
    return max(0, min(p, max(k, MIN_COLUMNS), (kmax - p) // 2))


def chebyshev_rate(ratio: float) -> float:
    """Per-step rate of block Krylov on a wanted value ``lambda`` when the
    unwanted spectrum lies in ``[0, ratio * lambda]``: ``1 / (t + sqrt(t^2 -
    1))`` at ``t = 2 / ratio - 1``, the growth of the Chebyshev polynomial of
    that interval, which simplifies to ``ratio / (1 + sqrt(1 - ratio))^2``
    (``ratio = (s_{b+1} / s_k)^2`` for ``svd`` on ``A^H A``; 0.25 gives 0.072
    against subspace iteration's 0.25)."""
    r = min(max(ratio, 0.0), 1.0)
    return r / (1 + (1 - r) ** 0.5) ** 2


def _steps_left(residual: float, rate: float) -> float:
    """Steps for a residual ``residual`` times the tolerance to reach it at
    ``rate`` per step (inf when not converging)."""
    if rate >= 1:
        return float("inf")
    return float(_host(residual).log() / -_host(max(rate, 1e-300)).log()) + 1


def krylov_pays(
    residual: float,
    rate: float,
    ratio: float,
    subspace_step: float,
    krylov_step: float,
    check: float,
) -> bool:
    """The cost model's choice under ``auto``, after the subspace iteration
    has measured its ``rate`` per step: True where block Krylov is predicted
    to finish in under ``KRYLOV_GAIN`` of what the subspace iteration still
    costs. ``residual``: the worst needed residual in units of the
    tolerance; ``ratio``: ``(theta_{b+1}/theta_k)^2`` (``eigh``: the same
    ratio of distances to the lowest value), whose Chebyshev rate, or the
    measured ``rate`` if slower, the Krylov iteration converges at;
    ``subspace_step``, ``krylov_step``: the cost of one step of each;
    ``check``: Krylov's extra cost to finish (the explicit residual)."""
    sub = _steps_left(residual, rate) * subspace_step
    kry = _steps_left(residual, chebyshev_rate(max(rate, ratio))) * krylov_step
    return kry + check < KRYLOV_GAIN * sub


def _krylov_step_cost(shape: tuple, b: int, width: int, products: int) -> float:
    """Model cost of one Krylov step (per matrix) with a basis of ``width``
    columns per side: the products with the ``b``-column block, their QR,
    one Gram-Schmidt pass per side and the Rayleigh-Ritz of the projected
    matrix, amortized over the ``MIN_RATE_ITERATIONS`` steps between
    measurements."""
    m, n = shape[-2:]
    sides = (m + n) if products == 2 else n
    ritz = RITZ_COST * width**3 / (products * MIN_RATE_ITERATIONS)
    return products * _unit(shape, b, 1) + ORTH_COST * sides * width * b + ritz


# ------------------------------------------------------------ the monitor


class _Monitor:
    """Decides after each Rayleigh-Ritz step: certified, go on, or stop.

    ``values``: Ritz values, wanted end first (descending); ``res``: residual
    norms relative to ``scale``; both ``(B, p)`` with the batch flattened.
    Keeps the worst needed residual per measurement, and the step it was
    measured at, to measure the rate per step; under ``auto`` it also
    decides, once, whether the subspace iteration hands over to block Krylov
    (``switch``).
    """

    def __init__(
        self,
        op: str,
        cfg: TopKConfig,
        k: int,
        shape: tuple,
        unit: float,
        budget: float,
        products: int,
        opts: Options,
        batch: int,
    ) -> None:
        self.op, self.cfg, self.k, self.kmax = op, cfg, k, min(shape[-2:])
        self.unit, self.budget, self.products, self.opts = unit, budget, products, opts
        self.shape, self.batch = shape, batch
        self.cost = products * unit  # of one step of the running iteration
        self.spent = 0.0
        self.history: list[float] = []
        self.at: list[int] = []  # the step of each measurement
        self.iterations = 0
        self.d = k
        self.kappa = float("inf")
        self.certified = False
        self.why = ""
        self.may_switch = cfg.switch and 0 < cfg.block <= cfg.p
        self.switch = False
        self.krylov = False  # whether the running iteration is block Krylov

    def step(
        self,
        values: Tensor,
        res: Tensor,
        scale: Tensor,
        steps: int = 1,
        cost: float | None = None,
    ) -> bool:
        """True when the loop should stop (certified, handing over to
        Krylov, or given up), after ``steps`` steps costing ``cost`` (default:
        ``steps`` of the running iteration's) since the last call."""
        self.iterations += steps
        self.spent += steps * self.cost if cost is None else cost
        values, res, scale = (peek(t.detach()) for t in (values, res, scale))
        if self._certify(values, res, scale):
            return True
        return self._measure(values, res, scale)

    def confirm(self, values: Tensor, res: Tensor, scale: Tensor, cost: float) -> bool:
        """After a Krylov step certified by the residuals its recurrence
        gives: the explicitly computed residuals (one product, ``cost``)
        decide. When they do not certify, they are that step's measurement;
        True when the loop should stop."""
        self.spent += cost
        values, res, scale = (peek(t.detach()) for t in (values, res, scale))
        if self._certify(values, res, scale):
            return True
        self.certified = False
        return self._measure(values, res, scale)

    def start_krylov(self, cost: float) -> None:
        """The Krylov iteration takes over (``cost``: one of its steps): its
        rate is measured anew."""
        self.history.clear()
        self.at.clear()
        self.cost, self.may_switch, self.krylov = cost, False, True

    def due(self) -> int:
        """Krylov steps to run before the next measurement: one until a rate
        is known, then as many as it predicts to convergence (the Krylov
        rate improves as the basis grows, so this rarely overshoots), at most
        ``KRYLOV_MAX_DUE`` so that the budget is checked, and within
        ``n_iter``."""
        due = 1
        h, at = self.history, self.at
        if len(h) >= 2 and at[-1] > at[-2]:
            rate = (h[-1] / h[-2]) ** (1 / (at[-1] - at[-2]))
            left = _steps_left(h[-1], rate) - 1
            due = int(min(max(left, 1.0), KRYLOV_MAX_DUE))
        if self.cfg.max_iter is not None:
            due = max(1, min(due, self.cfg.max_iter - self.iterations))
        return due

    def _certify(self, values: Tensor, res: Tensor, scale: Tensor) -> bool:
        cfg, k, p = self.cfg, self.k, values.shape[-1]
        # length of the certified prefix of each batch element
        prefix = torch.cumprod((res <= cfg.tol).to(torch.int64), -1).sum(-1)
        needed = self._needed(values, scale)
        self.d = max(k, int(prefix.min()))
        self.prefix, self.needed = int(prefix.min()), int(needed.max())
        if self.prefix >= self.needed:
            self.certified, self.why = True, ""
            # the CG is preconditioned by the uncertified extras: predict
            # it from the block's end (exact when they are converged)
            nxt = p - 1 if p < self.kmax else p
            self.kappa = self._kappa(values, scale, max(nxt, self.needed))
            return True
        return False

    def _measure(self, values: Tensor, res: Tensor, scale: Tensor) -> bool:
        cfg, k, p = self.cfg, self.k, values.shape[-1]
        needed = self.needed
        if self.prefix >= k and needed > p:
            self.why = (
                f"the {'singular ' if self.op == 'svd' else 'eigen'}values at k = "
                f"{k} form a cluster (within degeneracy_atol) that extends past the "
                f"block of k + oversample = {p}; raise oversample"
            )
            return True
        upto = torch.arange(p, device=res.device) < min(needed, p)
        worst = float(torch.where(upto, res, torch.zeros_like(res)).max())
        self.history.append(max(worst / cfg.tol, 1.0))
        self.at.append(self.iterations)
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
        forced = cfg.method != "auto"  # "randomized" or "krylov"
        if cfg.max_iter is not None:
            # n_iter given: the iteration runs until certified or n_iter
            # (under auto the budget still applies: auto falls back cheaply)
            if self.iterations >= cfg.max_iter:
                return True
            if forced:
                return False
        if self.may_switch and len(self.history) >= 2:
            self.may_switch = False  # decided once, at the first rate
            if self._krylov_pays(values, scale):
                self.switch = True
                return True
        if forced and self.iterations < RANDOMIZED_MIN_ITERATIONS:
            return False
        return self._over_budget()

    def _rate(self, i: int) -> float:
        """The rate per step between measurements ``i - 1`` and ``i``."""
        h, at = self.history, self.at
        return (h[i] / h[i - 1]) ** (1 / max(at[i] - at[i - 1], 1))

    def krylov_cost(self, width: int) -> float:
        """Model cost of one Krylov step with a basis ``width`` wide."""
        b = self.cfg.block
        return self.batch * _krylov_step_cost(self.shape, b, width, self.products)

    def _krylov_pays(self, values: Tensor, scale: Tensor) -> bool:
        """:func:`krylov_pays` on the measured rate and the Ritz values."""
        b, k = self.cfg.block, self.k
        # theta_{b+1}, or the block's last value (b = p: a lower bound of it)
        vk, vb = values[:, k - 1], values[:, min(b, values.shape[-1] - 1)]
        if self.op == "svd":
            ratio = (vb / vk) ** 2
        else:  # distances to the lowest value seen (or 0), as in _kappa
            low = torch.minimum(values[:, -1], torch.zeros_like(vk))
            ratio = (vb - low) / (vk - low)
        ratio = float(ratio.nan_to_num(1.0).clamp(0, 1).max())
        # the first measured rate flatters (a random start's tail dies
        # first): at least what the block's last value says, about
        # (s_{p+1}/s_k)^2 (eigh: |w_{p+1}/w_k|) once it has converged
        last = values[:, -1] / vk
        guess = last**2 if self.op == "svd" else last.abs()
        guess = float(guess.nan_to_num(1.0).clamp(0, 1).max())
        rate = max(self._rate(len(self.history) - 1), guess)
        left = _steps_left(self.history[-1], chebyshev_rate(max(rate, ratio)))
        cap = min(self.kmax, self.cfg.p + KRYLOV_RESTART * b)
        width = int(min(cap, b * (1 + left / 2)))
        return krylov_pays(
            self.history[-1], rate, ratio, self.cost, self.krylov_cost(width), self.unit
        )

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
        """Predict the cost of finishing (steps left and the backward's CG,
        both from the measured rate); stop when it breaks the budget."""
        h = self.history
        if len(h) < MIN_RATE_ITERATIONS:
            return False  # early rates are erratic: iterate before predicting
        # the slower of the last two rates
        rate = max(self._rate(len(h) - 2), self._rate(len(h) - 1))
        if rate >= 1:
            self.why += "; it is not converging"
            return True
        left = _steps_left(h[-1], rate)
        # the rate is about r = (s_{p+1} / s_k)^2 (Krylov: the Chebyshev rate
        # of r, which inverts to r = 4 rate / (1 + rate)^2), and r sets the
        # condition number of the backward's CG: 1 / (1 - r)
        r = 4 * rate / (1 + rate) ** 2 if self.krylov else rate
        cg = cg_iterations(1 / (1 - float(r)), self.cfg.rtol, self.cfg.maxiter)
        predicted = self.spent + left * self.cost + 2 * cg * self.unit
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
    subspace iteration on ``A A^H`` with a Rayleigh-Ritz step per iteration
    (``method="randomized"``, and ``auto`` until its cost model hands over),
    or by block Krylov (``"krylov"``, and ``auto`` after the hand-over).

    Returns the certified block (kept triplets first, then the certified
    extras), or, if not certified: ``None`` under ``method="auto"`` (the caller
    takes the full path) and the kept triplets with a message under
    ``"randomized"`` / ``"krylov"``.
    """
    *batch, m, n = shape
    mon = _monitor("svd", cfg, k, shape, 2, opts)
    if cfg.method == "krylov" and cfg.block:
        out = _svd_krylov(matmul, rmatmul, shape, dtype, device, k, cfg, mon, None)
        return _finish(mon, cfg, *out)
    Q = _orth(matmul(_randn((*batch, n, cfg.p), dtype, device)))
    while True:
        # Rayleigh-Ritz: B = Q^H A = (A^H Q)^H = W S V^H, U = Q W; then
        # A^H U = V S exactly and the residual is R = A V - U S, whose
        # product A V is also the next iterate's.
        V, S, Wh = _linalg.svd(rmatmul(Q), full_matrices=False)
        U = Q @ Wh.mH
        AV = matmul(V)
        scale = S[..., 0]
        res = _relative(AV - U * S.to(dtype).unsqueeze(-2), scale)
        if mon.step(_flat(S, batch), _flat(res, batch), scale.reshape(-1)):
            break
        Q = _orth(AV)
    if mon.switch:
        # auto: block Krylov predicted cheaper; it starts from A V_b, the
        # leading b vectors of the next subspace iterate (no product)
        start = AV[..., : cfg.block]
        out = _svd_krylov(matmul, rmatmul, shape, dtype, device, k, cfg, mon, start)
        return _finish(mon, cfg, *out)
    return _finish(mon, cfg, U, S, V, scale)


def _svd_krylov(
    matmul: Op,
    rmatmul: Op,
    shape: tuple,
    dtype: torch.dtype,
    device: torch.device,
    k: int,
    cfg: TopKConfig,
    mon: _Monitor,
    start: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Block Golub-Kahan-Lanczos with full reorthogonalization and thick
    restarts: the left basis ``U_K`` spans ``[A X, (A A^H) A X, ...]``
    (``A X = start``, default ``A`` times a random block), the right basis
    ``V_K`` spans ``A^H U_K``, and ``A^H U_K = V_K C`` with the recorded
    coefficients ``C`` (square: a block per step on each side). Returns the
    ``p`` leading Ritz triplets ``(U, S, V)`` and the scale ``s_1``."""
    *batch, m, n = shape
    b, p = cfg.block, cfg.p
    cap = min(mon.kmax, p + KRYLOV_RESTART * b)
    if start is None:
        start = matmul(_randn((*batch, n, b), dtype, device))
        mon.spent += mon.batch * _unit(shape, b, 1)
    mon.start_krylov(mon.krylov_cost(min(cap, 4 * b)))
    U_new = _orth(start)
    # the bases and C in buffers of the largest width (no copy per step)
    Ub, Vb = start.new_empty(*batch, m, cap), start.new_empty(*batch, n, cap)
    C = start.new_zeros(*batch, cap, cap)
    w, due, steps, cost = 0, 1, 0, 0.0
    while True:
        # A^H U_new = V_K h + V_new R: C gains a block column (and row)
        h, V_new, R = _extend(Vb[..., :w], rmatmul(U_new), b)
        C[..., :w, w : w + b], C[..., w : w + b, w : w + b] = h, R
        Ub[..., w : w + b], Vb[..., w : w + b] = U_new, V_new
        w += b
        # A V_new = U_K g + U_next L: U_next is the next block, and the
        # residual A V - U S of every Ritz triplet lies in it (below)
        _, U_new, L = _extend(Ub[..., :w], matmul(V_new), b)
        steps, due, cost = steps + 1, due - 1, cost + mon.krylov_cost(w)
        full = w + 2 * b > cap  # the next step adds two blocks
        if w < p or (due > 0 and not full):
            continue
        # Rayleigh-Ritz: C = Y S X^H, U = U_K X, V = V_K Y: A^H U = V S, and
        # A V - U S = U_next L Y_last (Y_last: the rows of the last block)
        Y, S, Xh = _linalg.svd(C[..., :w, :w])
        Sp, scale = S[..., :p], S[..., 0]
        res = _relative(L @ Y[..., w - b : w, :p], scale)
        values = _flat(Sp, batch)
        stop = mon.step(values, _flat(res, batch), scale.reshape(-1), steps, cost)
        steps, cost = 0, 0.0
        if not (stop or full):
            due = mon.due()
            continue
        U, V = Ub[..., :w] @ Xh[..., :p, :].mH, Vb[..., :w] @ Y[..., :p]
        if stop and mon.certified:
            # the certificate: residuals computed from a product with A
            res = _relative(matmul(V) - U * Sp.to(dtype).unsqueeze(-2), scale)
            check = mon.batch * _unit(shape, p, 1)
            stop = mon.confirm(values, _flat(res, batch), scale.reshape(-1), check)
        if stop:
            return U, Sp, V, scale
        due = mon.due()
        if full:
            # thick restart: the p Ritz triplets (A^H U = V S) and the next
            # block, whose coefficients A V = U S + U_next L Y_last the next
            # step's Gram-Schmidt recovers
            Ub[..., :p], Vb[..., :p], w = U, V, p
            C.zero_()
            C[..., :p, :p] = torch.diag_embed(Sp.to(dtype))


def _extend(Q: Tensor, X: Tensor, recent: int) -> tuple[Tensor, Tensor, Tensor]:
    """``X = Q c + Q_new R`` with ``Q_new`` orthonormal and orthogonal to the
    orthonormal ``Q``: ``(c, Q_new, R)``. Block classical Gram-Schmidt: first
    against the ``recent`` last columns of ``Q``, which hold the large part
    of a Krylov block's component in ``span(Q)`` (the three-term recurrence),
    then once against all of ``Q`` (full reorthogonalization: what rounding
    left on the older blocks), again where that pass removed more than half
    of a column's norm (its own rounding is then not small against what is
    left), and on ``Q_new`` where a column of the block was, to rounding,
    inside ``span(Q)`` (QR then normalized rounding noise). The coefficients
    record every pass, so that the relation holds to rounding."""
    before = _linalg.vector_norm(X, dim=-2)
    recent = min(recent, Q.shape[-1])
    Q_r = Q[..., Q.shape[-1] - recent :]
    c_r = _coefficients(Q_r, X)
    X = X - Q_r @ c_r
    local = _linalg.vector_norm(X, dim=-2)
    c = _coefficients(Q, X)
    Y = X - Q @ c
    old = c.shape[-2] - recent
    c = torch.cat([c[..., :old, :], c[..., old:, :] + c_r], -2)
    after = _linalg.vector_norm(Y, dim=-2)
    if bool(peek(after < 0.5 * local).any()):
        c2 = _coefficients(Q, Y)
        Y, c = Y - Q @ c2, c + c2
    Q_new, R = _linalg.qr(Y)
    diag = R.diagonal(dim1=-2, dim2=-1).abs()
    if bool(peek(diag <= eps(X.dtype) ** 0.5 * before).any()):
        c3 = _coefficients(Q, Q_new)
        Q_new, R2 = _linalg.qr(Q_new - Q @ c3)
        c, R = c + c3 @ R, R2 @ R
    return c, Q_new, R


def _coefficients(Q: Tensor, X: Tensor) -> Tensor:
    """``Q^H X``, computed as ``(X^H Q)^H``: the same numbers, and BLAS then
    streams the tall ``Q`` along its rows (measured 1.8x faster for a
    2048 x 320 basis and 32 columns)."""
    return (X.mH @ Q).mH


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
    operator ``A`` by block subspace iteration with a Rayleigh-Ritz step
    (``method="randomized"``, and ``auto`` until its cost model hands over)
    or by block Lanczos (``"krylov"``, and ``auto`` after the hand-over).

    Subspace iteration favours the eigenvalues largest in *magnitude*, and
    "largest algebraic" is not "largest in magnitude". Eigenvalues past ``k``
    that are larger in magnitude than the k-th (a large negative end) enter
    the block and cost nothing while they fit in its extra columns; once they
    fill all but one, the iteration runs on ``A - sigma I`` (on ``-A`` for
    the smallest), ``sigma = min(0, (theta_low + theta_{k+1}) / 2)`` from the
    Ritz values seen so far (``theta_low`` the lowest), which folds the
    negative end below the wanted eigenvalues. Block Lanczos needs no shift:
    it converges to the algebraic ends. The eigenvalues are returned
    with the kept ones first,
    ascending (as ``torch.linalg.eigh``), then the certified extras.
    """
    *batch, n, _ = shape
    p = cfg.p
    sign = 1.0 if largest else -1.0
    mon = _monitor("eigh", cfg, k, shape, 1, opts)
    if cfg.method == "krylov" and cfg.block:
        out = _eigh_krylov(matmul, shape, dtype, device, k, sign, cfg, mon, None)
        return _eigh_result(mon, cfg, k, largest, sign, *out)
    Q = _orth(_randn((*batch, n, p), dtype, device))
    low, top, shifted = None, None, False
    while True:
        AQ = matmul(Q) * sign
        T = Q.mH @ AQ
        theta, Z = _linalg.eigh((T + T.mH) / 2)
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
    if mon.switch:
        # auto: block Lanczos predicted cheaper, from the leading b Ritz vectors
        start = V[..., : cfg.block]
        out = _eigh_krylov(matmul, shape, dtype, device, k, sign, cfg, mon, start)
        return _eigh_result(mon, cfg, k, largest, sign, *out)
    return _eigh_result(mon, cfg, k, largest, sign, V, theta, top)


def _eigh_result(
    mon: _Monitor,
    cfg: TopKConfig,
    k: int,
    largest: bool,
    sign: float,
    V: Tensor,
    theta: Tensor,
    top: Tensor,
) -> TopKResult | None:
    # kept eigenvalues ascending, as torch.linalg.eigh returns them
    p = theta.shape[-1]
    order = list(range(k - 1, -1, -1)) if largest else list(range(k))
    order += list(range(k, p))
    return _finish(mon, cfg, V[..., order], sign * theta[..., order], None, top)


def _eigh_krylov(
    matmul: Op,
    shape: tuple,
    dtype: torch.dtype,
    device: torch.device,
    k: int,
    sign: float,
    cfg: TopKConfig,
    mon: _Monitor,
    start: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Block Lanczos on ``sign * A`` with full reorthogonalization and thick
    restarts: the basis ``V_K`` spans ``[X, A X, A^2 X, ...]`` (``X =
    start``, default random) and ``A V_K = V_K T + V_next H`` with the
    recorded coefficients. Returns the ``p`` leading Ritz pairs ``(V,
    theta)`` of ``sign * A``, descending, and the scale ``max |theta|``."""
    *batch, n, _ = shape
    b, p = cfg.block, cfg.p
    cap = min(n, p + KRYLOV_RESTART * b)
    V_new = _orth(_randn((*batch, n, b), dtype, device) if start is None else start)
    mon.start_krylov(mon.krylov_cost(min(cap, 4 * b)))
    # the basis [V_K, V_new] and T in buffers of the largest width; H holds
    # the coefficients of V_new in A V_K = V_K T + V_new H
    Vb = V_new.new_empty(*batch, n, cap)
    T = V_new.new_zeros(*batch, cap, cap)
    H = V_new.new_zeros(*batch, b, cap)
    top: Tensor | None = None
    w, due, steps, cost = 0, 1, 0, 0.0
    while True:
        # A V_new = [V_K, V_new] c + V_next R
        Vb[..., w : w + b] = V_new
        c, V_new, R = _extend(Vb[..., : w + b], matmul(V_new) * sign, 2 * b)
        T[..., : w + b, w : w + b], T[..., w : w + b, :w] = c, H[..., :w]
        H.zero_()
        H[..., w : w + b] = R
        w += b
        steps, due, cost = steps + 1, due - 1, cost + mon.krylov_cost(w)
        full = w + 2 * b > cap  # the next step adds two blocks
        if w < p or (due > 0 and not full):
            continue
        # Rayleigh-Ritz: T = Z theta Z^H, V = V_K Z: A V - V theta = V_new H Z
        Tw = T[..., :w, :w]
        theta, Z = _linalg.eigh((Tw + Tw.mH) / 2)
        theta, Z = theta.flip(-1), Z.flip(-1)  # descending: the wanted end first
        big = theta.abs().amax(-1)
        top = big if top is None else torch.maximum(top, big)
        tp = theta[..., :p]
        res = _relative(H[..., :w] @ Z[..., :p], top)
        values = _flat(tp, batch)
        stop = mon.step(values, _flat(res, batch), top.reshape(-1), steps, cost)
        steps, cost = 0, 0.0
        if not (stop or full):
            due = mon.due()
            continue
        V = Vb[..., :w] @ Z[..., :p]
        if stop and mon.certified:
            # the certificate: residuals computed from a product with A
            R_exp = matmul(V) * sign - V * tp.to(dtype).unsqueeze(-2)
            res = _flat(_relative(R_exp, top), batch)
            check = mon.batch * _unit(shape, p, 1)
            stop = mon.confirm(values, res, top.reshape(-1), check)
        if stop:
            return V, tp, top
        due = mon.due()
        if full:
            # thick restart: the p Ritz pairs and the next block
            HZ = H[..., :w] @ Z[..., :p]
            Vb[..., :p], w = V, p
            T.zero_()
            T[..., :p, :p] = torch.diag_embed(tp.to(dtype))
            H.zero_()
            H[..., :p] = HZ


def _relative(R: Tensor, scale: Tensor) -> Tensor:
    """Column norms of ``R`` divided by ``scale`` (0 where ``scale`` is 0: the
    zero matrix, whose Ritz pairs are exact)."""
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    # divide first: the squares of a norm of entries of 1e200 overflow
    return _linalg.vector_norm(R / safe[..., None, None].to(R.dtype), dim=-2)


def _flat(t: Tensor, batch: list) -> Tensor:
    return t.reshape(-1, t.shape[-1]) if batch else t.unsqueeze(0)


def _orth(Y: Tensor) -> Tensor:
    return _linalg.qr(Y).Q


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
    if cfg.method != "auto" and cfg.max_iter is not None:
        budget = float("inf")
    return _Monitor(op, cfg, k, tuple(shape), unit, budget, products, opts, nb)


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
