"""Safe arithmetic on spectra: gap inverses (hard cutoff and Lorentzian),
stable divided differences of first and second order, and maps evaluated
without ``0 * inf`` (mirrors ``julia/PySpectral/src/common/safemethods.jl``).
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch._C._functorch import is_functorch_wrapped_tensor

from .. import _linalg
from .defaults import _HOST_SPECTRUM, eps, eps34, peek

if TYPE_CHECKING:
    from .._settings import Options


def inv_safe(x: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Hard-cutoff inverse: ``1/x`` where ``|x| > tol``, else 0."""
    keep = x.abs() > tol
    if x.requires_grad or is_functorch_wrapped_tensor(x):
        # Differentiable use (double backward): keep the discarded quotient
        # and its derivative finite, or where() would backpropagate 0 * inf.
        x = torch.where(keep, x, 1.0)
    return torch.where(keep, x.reciprocal(), 0.0)


def inv_lorentz(x: torch.Tensor, width: float) -> torch.Tensor:
    """Lorentzian-broadened inverse ``x / (x**2 + width**2)`` (smooth, signed;
    for a complex gap ``conj(x) / (|x|**2 + width**2)``).

    Evaluated in units of ``m = max(|x|, width)``, the same value for every
    ``m > 0``: squaring ``x`` and ``width`` directly underflows to ``0 / 0``
    for widths below ``sqrt(tiny)`` (1e-154 in float64)."""
    m = torch.clamp(x.abs(), min=width)
    xm = x / m
    if xm.is_complex():
        return xm.conj() / ((xm.abs().square() + (width / m) ** 2) * m)
    return xm / ((xm * xm + (width / m) ** 2) * m)


def gap_inverse(x: torch.Tensor, tol: torch.Tensor, opts: Options) -> torch.Tensor:
    """The inverse of a spectral gap chosen by ``opts.broadening``."""
    if opts.broadening is None:
        return inv_safe(x, tol)
    return inv_lorentz(x, opts.broadening)


def divided_difference(
    a: torch.Tensor,
    b: torch.Tensor,
    fa: torch.Tensor,
    fb: torch.Tensor,
    da: torch.Tensor,
    db: torch.Tensor,
) -> torch.Tensor:
    """Stable ``(fa - fb) / (a - b)``, tending to ``(da + db) / 2`` as ``a -> b``.

    The quotient carries the rounding error of ``fa - fb``, about
    ``eps (|fa| + |fb|) / |a - b|``, the derivative average a Taylor error
    ``O(f'''(a - b)**2)``; their difference shows which one is larger. The
    quotient is used where it differs from the average by more than twice its
    rounding error, the average elsewhere (the two then agree to that error),
    and always for nodes within ``ULPS`` ulps of each other (one node to
    rounding). This assumes nothing about the scale on which ``f`` varies
    (``exp`` near 0 varies on scale 1, not ``|a|``) and squares nothing (no
    underflow).

    An infinite derivative at an end (``sqrt`` at 0) never replaces a finite
    quotient: ``sqrt[0, x] = sqrt(x) / x`` is finite for ``x != 0``; only the
    limit ``a = b`` itself is infinite (see :func:`with_infinite_weights`).
    """
    return _divided_difference(a, b, fa, fb, da, db)[0]


def _divided_difference(
    a: torch.Tensor,
    b: torch.Tensor,
    fa: torch.Tensor,
    fb: torch.Tensor,
    da: torch.Tensor,
    db: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`divided_difference`, with where the quotient was taken and the
    quotient's rounding error estimate."""
    d = a - b
    average = (da + db) / 2
    safe_d = torch.where(d != 0, d, torch.ones_like(d))
    quotient = (fa - fb) / safe_d
    rounding = eps(a.dtype) * (fa.abs() + fb.abs()) / safe_d.abs()
    quotient_ok = _apart(a, b, d) & (
        ~torch.isfinite(average) | ((quotient - average).abs() > 2 * rounding)
    )
    return torch.where(quotient_ok, quotient, average), quotient_ok, rounding


def _apart(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Whether the nodes ``a``, ``b`` (``d = a - b``) are more than ``ULPS``
    ulps apart. Closer, they are one node to rounding (a computed spectrum
    carries at least that error), and the quotient is noise whatever ``f``:
    also where ``f``'s values cancel (a polynomial filter summing terms of
    size 1 to 0.03), so that their rounding exceeds the estimate
    ``eps |f|`` the criterion uses."""
    return d.abs() > ULPS * eps(a.dtype) * torch.maximum(a.abs(), b.abs())


# Values of f and f' computed by a formula come with a few ulps of error, not
# one (1 - tanh(x)**2 loses bits to cancellation): the rounding estimates of the
# second divided differences count that many, so that nodes a few ulps apart
# (an exact tie, rounded) are never divided by.
ULPS = 8


def divided_difference_with_error(
    a: torch.Tensor,
    b: torch.Tensor,
    fa: torch.Tensor,
    fb: torch.Tensor,
    da: torch.Tensor,
    db: torch.Tensor,
    ha: torch.Tensor,
    hb: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`divided_difference` ``f[a, b]`` and an estimate of its error, for
    the second divided differences built from it (``ha``, ``hb``: ``f''``).

    Where the quotient is taken its error is its rounding error (``ULPS``
    ulps of ``f``); where the derivative average is, its Taylor remainder
    ``f'''(xi) (a - b)**2 / 12``, estimated (doubled) by
    ``|f''(a) - f''(b)| |a - b| / 6``, plus the rounding of the average, or,
    for nodes apart, the quotient's error plus their difference if smaller.
    Non-finite estimates (an infinite ``f''``) count as 0: the infinite
    weights are handled by :func:`with_infinite_weights`.
    """
    value, quotient_ok, rounding = _divided_difference(a, b, fa, fb, da, db)
    d = (a - b).abs()
    taylor = torch.where(d != 0, (ha - hb).abs() * d / 6, 0.0)
    taylor = taylor + ULPS * eps(a.dtype) * (da.abs() + db.abs()) / 2
    # Where the nodes are apart and the average was taken, it agrees with the
    # quotient to 2 roundings: the quotient's error bounds it too (a quadratic
    # on some nodes and not others, as a truncated f, has a large Taylor
    # estimate there that would wrongly reject exact second quotients).
    agreed = torch.minimum(taylor, (ULPS + 2) * rounding)
    error = torch.where(
        quotient_ok, ULPS * rounding, torch.where(_apart(a, b, a - b), agreed, taylor)
    )
    return value, torch.where(torch.isfinite(error), error, 0.0)


def confluent_divided_difference(
    x: torch.Tensor,
    z: torch.Tensor,
    dx: torch.Tensor,
    hx: torch.Tensor,
    hz: torch.Tensor,
    fxz: torch.Tensor,
    fxz_error: torch.Tensor,
) -> torch.Tensor:
    """Stable second divided difference ``f[x, x, z] = (f'(x) - f[x, z]) / (x - z)``
    with two equal nodes, tending to ``f''(x) / 2`` as ``z -> x``.

    ``fxz`` is ``f[x, z]`` with its error estimate ``fxz_error``
    (:func:`divided_difference_with_error`). The criterion of
    :func:`divided_difference`: the quotient, whose rounding error is about
    ``(ulps (|f'(x)| + |f[x, z]|) + fxz_error) / |x - z|``, where it differs
    from the confluent value by more than twice that; elsewhere the mean of
    ``f''/2`` over the nodes ``(x, x, z)``, ``(2 f''(x) + f''(z)) / 6``, which
    is the limit up to ``O(f''''(x - z)**2)``. An infinite ``f''`` (``sqrt`` at
    0) makes the limit infinite but never a finite quotient.
    """
    d = x - z
    safe_d = torch.where(d != 0, d, torch.ones_like(d))
    quotient = (dx - fxz) / safe_d
    ulps = ULPS * eps(x.dtype)
    rounding = (ulps * (dx.abs() + fxz.abs()) + fxz_error) / safe_d.abs()
    confluent = (2 * hx + hz) / 6
    quotient_ok = _apart(x, z, d) & (
        ~torch.isfinite(confluent) | ((quotient - confluent).abs() > 2 * rounding)
    )
    return torch.where(quotient_ok, quotient, confluent)


def with_infinite_weights(
    linear: Callable[..., torch.Tensor],
    weights: tuple[torch.Tensor, ...],
    scale: torch.Tensor,
) -> torch.Tensor:
    """``linear(*weights)`` for a map linear in each weight tensor, without the
    NaN of ``0 * inf`` where some weights are infinite.

    A divided difference is infinite where ``f'`` is (``sqrt`` at an exact zero
    eigenvalue or singular value): the true gradient is then infinite in the
    entries that the infinite weights reach and finite elsewhere, but the
    matrix products of the pullback would mix ``inf`` with zeros into NaN
    everywhere. So the map is evaluated twice: with the infinite weights set to
    0 (the finite part) and with only their signs (the direction ``D`` of the
    infinite part). An entry is ``sign(D) * inf`` where ``|D|`` exceeds the
    rounding level ``eps**(3/4) * scale`` (``scale``: the largest entry of the
    incoming cotangent), else the finite part. Complex entries are treated by
    real and imaginary part. Without infinite weights: one evaluation.
    """
    if not any(bool(torch.isinf(peek(w.detach())).any()) for w in weights):
        return linear(*weights)
    infinite = [torch.isinf(w.detach()) for w in weights]
    finite = linear(*(torch.where(i, 0.0, w) for i, w in zip(infinite, weights)))
    direction = linear(
        *(torch.where(i, w.detach().sign(), 0.0) for i, w in zip(infinite, weights))
    ).detach()
    tol = eps34(finite.dtype) * scale
    if finite.is_complex():
        return torch.complex(
            _infinite_where(direction.real, finite.real, tol),
            _infinite_where(direction.imag, finite.imag, tol),
        )
    return _infinite_where(direction, finite, tol)


# The skew numerators of the svd / eigh pullbacks, (Ja +- Ka)_ij with
# J = U^H gU, K = V^H gV, are divided by the gaps s_j - s_i (and s_j + s_i,
# lambda_j - lambda_i). For a loss that is invariant under rotations of a
# near-degenerate pair (a polar factor, a projector onto a subspace that
# contains the pair) the numerator is 0 in exact arithmetic; computed, it is
# the rounding error of the products, and that divided by a gap just above
# the degeneracy tolerance is what came out (1e-5 relative at gaps ~1e-11).
# So, with the criterion of divided_difference, a numerator at or below its
# own rounding error counts as 0. The bound: for J = U^H G with orthonormal
# columns u_i of length m, |fl(J)_ij - J_ij| <= gamma_m sum_l |U_li| |G_lj|
# <= gamma_m ||u_i|| ||g_j|| = gamma_m ||g_j|| (Higham, Accuracy and Stability
# of Numerical Algorithms, 2nd ed., sec. 3.1 and Lemma 3.5; Cauchy-Schwarz),
# gamma_m = m u / (1 - m u), u = eps / 2; complex products cost a factor
# sqrt(2) (gamma_{m+2}). Ja_ij = J_ij - conj(J_ji) adds the error of J_ji and
# one subtraction, (Ja + Ka) one more. eps (m + 2) (||g_i|| + ||g_j||) per
# factor covers all of it with a margin (the worst case, not the typical
# sqrt(m) eps: what escapes the cut is divided by the smallest gaps). Cost:
# one norm per column of each cotangent and a few k x k passes, no product.
# It never drops more than the rounding error it is compared with: an entry
# cut was within that error of 0, so the result moves by at most what the
# noise would have moved it. Not counted: rounding already in the incoming
# cotangents (the caller's data, as any cotangent's error).


def column_rounding(
    G: torch.Tensor, inner: int, dim: int = -2, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``eps (inner + 2) ||g_j||`` per column ``g_j`` of ``G`` (``dim=-2``;
    ``dim=-1``: per row), detached, shape ``(*, k)``: with ``c_i + c_j``
    (:func:`pair_rounding`), a bound on the rounding error of the skew part of
    ``Q^H G`` (``Q``: ``inner`` rows, orthonormal columns) at entry ``(i, j)``
    (see the comment above). ``out``: a free real buffer of ``G``'s shape for
    the squares. A bound that overflows (single precision, entries past 1e19)
    is 0: nothing is cut there, rather than everything."""
    if G.requires_grad or is_functorch_wrapped_tensor(G):
        G = G.detach()
    if dim == -1 or G.shape[-2] == 1:  # along rows (contiguous): one pass
        c = _linalg.vector_norm(G, dim=dim)
    else:  # (a sum of squares: vector_norm along a column is 6x slower at
        # n = 256, and it does not rescale either)
        a = G.abs() if G.is_complex() else G
        c = torch.mul(a, a, out=out).sum(dim).sqrt_()
    c = c.mul_(eps(G.dtype) * (inner + 2))
    if c.dtype == torch.float32:
        c = c.nan_to_num_(nan=math.nan, posinf=0.0)
    return c


def pair_rounding(c: torch.Tensor) -> torch.Tensor:
    """``r_ij = c_i + c_j``, shape ``(*, k, k)``."""
    return c.unsqueeze(-1) + c.unsqueeze(-2)


def cut_rounding(X: torch.Tensor, r: torch.Tensor, inplace: bool) -> torch.Tensor:
    """``X`` (``(*, k, k)``) with every entry ``|X_ij| <= r_ij`` (its rounding
    error, :func:`pair_rounding`) set to 0, as :func:`divided_difference`
    treats a quotient within its rounding error.

    ``inplace`` (a new tensor of a plain pullback): masked in place. Else the
    value is cut and the derivative kept (a second derivative through the
    pullback: an entry that is 0 here may still change along ``A``). NaN is
    never cut (``NaN <= r`` is false)."""
    if inplace:
        return X.masked_fill_(X.abs() <= r, 0)
    small = X.detach().abs() <= r
    return X - torch.where(small, X.detach(), 0)


# From this many rows on, X^H is read through a contiguous copy: an operand
# read transposed makes an elementwise pass 3x slower than the (blocked)
# copy and a plain pass together (n = 256); below, the copy costs more.
TRANSPOSE_COPY = 128


def batch_rows(
    G: torch.Tensor | None, rows: torch.Tensor | None
) -> torch.Tensor | None:
    """The matrices ``rows`` of the flattened batch ``G`` (None: all of ``G``;
    ``G`` None: None), as :func:`cut_rounding_rows` selects them."""
    if G is None or rows is None:
        return G
    return G.reshape(-1, *G.shape[-2:])[rows]


def cut_rounding_rows(
    X: torch.Tensor, rows: torch.Tensor | None, bound: Callable[..., torch.Tensor]
) -> None:
    """:func:`cut_rounding` in place on the matrices ``rows`` of the batch
    ``X`` (new, contiguous; ``rows`` index its flattened batch, as
    ``GapChecks.rows``; None: every matrix) and on no other;
    ``bound(rows)``: their ``r``."""
    if rows is None:
        cut_rounding(X, bound(None), True)
        return
    Xf = X.view(-1, *X.shape[-2:])
    sub = Xf[rows]
    Xf[rows] = sub.masked_fill_(sub.abs() <= bound(rows), 0)


def cut_rounding_large(
    X: torch.Tensor,
    c: torch.Tensor,
    x: torch.Tensor,
    inner: int,
    descending: bool,
    spare: torch.Tensor,
) -> None:
    """:func:`cut_rounding` in place on ``X`` (new, real, exactly
    skew-symmetric, ``r_ij = c_i + c_j``) of the large in-place pullbacks,
    without a fresh full-size buffer: on the band of :func:`cut_rounding_band`
    where it is narrow, else on all of ``X`` with ``r`` in ``spare`` (a free
    buffer of ``X``'s shape) and ``|X| <= r`` as ``-r <= X <= r``."""
    if cut_rounding_band(X, c, x, inner, descending):
        return
    r = torch.add(c.unsqueeze(-1), c.unsqueeze(-2), out=spare)
    small = X <= r
    X.masked_fill_(small.logical_and_(X >= r.neg_()), 0)


def cut_rounding_band(
    X: torch.Tensor, c: torch.Tensor, x: torch.Tensor, inner: int, descending: bool
) -> bool:
    """:func:`cut_rounding` of the single ``k x k`` matrix ``X`` (new, C
    ordered, exactly skew-Hermitian: ``|X_ij| = |X_ji|``, ``r_ij = c_i + c_j``)
    in place on the band along its diagonal that holds every pair whose values
    ``x_i``, ``x_j`` (sorted, finite) are closer than the window ``(inner + 4)
    eps**(1/4) max|x|``: elsewhere the cut changes nothing beyond the package's
    resolution (see above). Where the band is at most ``k / 8`` wide that costs
    ``O(k b)``, not the full cut's passes over ``k**2`` entries, and True is
    returned; where it is wider, or ``X`` is a batch or not C ordered, False
    (nothing done)."""
    k = X.shape[-1]
    if X.dim() != 2 or X.stride() != (k, 1):
        return False
    a = (-x if descending else x).detach()  # ascending
    ends = a[[0, -1]].tolist()  # max|x| from the ends (sorted)
    wide = (inner + 4) * eps(x.dtype) ** 0.25 * max(abs(ends[0]), abs(ends[1]))
    # (a number, not a tensor: searchsorted is 9x slower on a + tensor)
    hi = torch.searchsorted(a, a + wide)  # the first j with a_j >= a_i + wide
    band = int((hi - torch.arange(k, device=x.device)).amax()) - 1  # (one sync)
    if band > k // 8:
        return False
    if band <= 0:
        return True
    m = k - band  # the rows i < m have all their band, i + 1 ... i + band
    offset = X.storage_offset()
    upper = X.as_strided((m, band), (k + 1, 1), offset + 1)  # X[i, i + d]
    lower = X.as_strided((m, band), (k + 1, k), offset + k)  # X[i + d, i]
    small = upper.abs() <= c[:m].unsqueeze(-1) + c[1:].unfold(0, band, 1)[:m]
    upper.masked_fill_(small, 0)
    lower.masked_fill_(small, 0)
    # the pairs of the last rows: the trailing block
    block = X[m:, m:]
    block.masked_fill_(block.abs() <= c[m:].unsqueeze(-1) + c[m:], 0)
    return True


def with_adjoint(X: torch.Tensor, sign: float) -> torch.Tensor:
    """``X + sign * X^H`` (``sign`` +1 or -1: twice the Hermitian or the skew
    part), a new tensor (differentiable)."""
    Xh = X.mH.contiguous() if X.shape[-1] >= TRANSPOSE_COPY else X.mH
    return X + Xh if sign > 0 else X - Xh


def adjoint_sum_(
    X: torch.Tensor, sign: float, spare: torch.Tensor | None = None
) -> torch.Tensor:
    """:func:`with_adjoint` in place on ``X`` (new, not differentiated) where
    the transpose is copied, into ``spare`` if given (a free buffer of
    ``X``'s shape and dtype): no fresh full-size buffer, which at n = 256
    costs more in page faults than the pass itself."""
    if X.shape[-1] < TRANSPOSE_COPY:
        return X + X.mH if sign > 0 else X - X.mH
    Xh = X.mH.contiguous() if spare is None else spare.copy_(X.mH)
    return X.add_(Xh, alpha=sign)


# The cut changes a result only where a gap is small: entry (i, j) of the
# middle matrix by at most r_ij / (2 gap) <= eps (m + n + 4) g / gap (g the
# largest column norm of the cotangents), against its natural scale
# g / max(s). Where a gap is at least (m + n + 4) eps**(1/4) max(s) that is
# below eps**(3/4) relative, the package's resolution, so a plain pullback
# cuts only where some gap is below that window: the differences (all of
# them, if any adjacent one is) and, for singular values, the sums s_i + s_j
# (only the trailing block where 2 s_i is below it: the others are wider).


class GapChecks(NamedTuple):
    """What a plain pullback needs to know of its sorted spectrum, from one
    look at it (:func:`gap_checks`)."""

    separated: bool  # no degenerate pair (defaults.separated)
    cut_differences: bool  # some adjacent gap below the rounding-cut window
    tail: int  # singular values: the first i with 2 x_i below it (k: none)
    # a batch read on its device: the (flattened) matrices with such a gap,
    # where they are at most a quarter of it (None: every matrix)
    rows: torch.Tensor | None = None


def gap_checks(
    x: torch.Tensor, atol: float | None, inner: int, descending: bool
) -> GapChecks:
    """:class:`GapChecks` of the sorted spectrum ``x`` (``(*, k)``, plain;
    singular values ``descending``, eigenvalues ascending), over the batch.
    ``atol``: the degeneracy tolerance (None: :func:`degeneracy_tol`'s);
    ``inner``: ``m + n`` (svd), ``n`` (eigh), the rounding-cut window being
    ``(inner + 4) eps**(1/4) max|x|`` (see above). NaN counts as degenerate
    and as needing every cut; an unsorted spectrum as not separated. A small
    spectrum is read on the host as ``separated`` reads it, a larger one
    tested on its device with one sync."""
    k = x.shape[-1]
    if k == 0 or x.numel() == 0:
        return GapChecks(True, False, k)
    window = (inner + 4) * eps(x.dtype) ** 0.25
    resolution = eps34(x.dtype)
    if x.numel() <= _HOST_SPECTRUM:
        is_separated, cut, tail = True, False, k
        for r in x.detach().reshape(-1, k).tolist():  # (tolist reads no graph)
            if descending:
                r.reverse()  # ascending
            if math.isnan(sum(r)):
                return GapChecks(False, True, 0 if descending else k)
            scale = max(abs(r[0]), abs(r[-1]))
            tol = resolution * scale if atol is None else atol
            wide = window * scale
            gap = min(map(operator.sub, r[1:], r[:-1]), default=math.inf)
            is_separated = is_separated and gap > tol
            cut = cut or gap < wide
            if descending:  # (unsorted, gap < 0: the whole block)
                tail = min(tail, k - bisect.bisect_left(r, wide / 2) if gap >= 0 else 0)
        return GapChecks(is_separated, cut, tail)
    x = x.detach().reshape(-1, k)
    # max|x| from the ends (sorted; else a gap fails), as separated does
    scale = torch.maximum(x[..., :1].abs(), x[..., -1:].abs())
    tol = scale * resolution if atol is None else atol
    wide = scale * window
    gaps = x[..., :-1] - x[..., 1:] if descending else x[..., 1:] - x[..., :-1]
    close = ~(gaps >= wide).all(-1)  # per matrix
    flags = [(gaps > tol).all(), close.sum()]
    if descending:
        flags.append((~(x + x >= wide)).sum(-1).amax())
    flags = torch.stack([f.to(torch.int64) for f in flags]).tolist()
    small = flags[2] if descending else 0
    # (few matrices to cut in a large batch: those alone, see the pullbacks)
    few = 0 < flags[1] <= x.shape[0] // 4
    rows = close.nonzero().squeeze(-1) if few else None
    return GapChecks(bool(flags[0]), flags[1] > 0, k - small, rows)


def max_abs(G: torch.Tensor) -> torch.Tensor:
    """``max |G|`` per matrix, detached, shape ``(*, 1, 1)`` (0 if empty)."""
    if G.shape[-1] * G.shape[-2] == 0:
        return G.detach().abs().new_zeros((*G.shape[:-2], 1, 1))
    return G.detach().abs().amax(dim=(-2, -1), keepdim=True)


def _infinite_where(
    direction: torch.Tensor, finite: torch.Tensor, tol: torch.Tensor
) -> torch.Tensor:
    inf = torch.full_like(finite.detach(), math.inf).copysign(direction)
    return torch.where(direction.abs() > tol, inf, finite)


def add_diagonal(M: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``M + diag_embed(d)`` with one full-size temporary instead of two."""
    diagonal = M.diagonal(dim1=-2, dim2=-1) + d
    return torch.diagonal_scatter(M, diagonal, dim1=-2, dim2=-1)
