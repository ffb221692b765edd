"""Tolerance defaults: the one place where a ``None`` tolerance becomes a
number, from the data (mirrors ``julia/PySpectral/src/common/defaults.jl``;
change the formulas in both places or in neither).
"""

from __future__ import annotations

import torch
from torch._C._functorch import get_unwrapped, is_functorch_wrapped_tensor


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of the real type underlying ``dtype``."""
    return torch.finfo(dtype).eps


_EPS34: dict[torch.dtype, float] = {}


def eps34(dtype: torch.dtype) -> float:
    """``eps(dtype) ** 0.75``, the package's relative resolution (cached)."""
    value = _EPS34.get(dtype)
    if value is None:
        value = _EPS34[dtype] = eps(dtype) ** 0.75
    return value


def degeneracy_tol(spectrum: torch.Tensor, atol: float | None) -> torch.Tensor:
    """Absolute degeneracy tolerance, shape ``(*, 1, 1)``.

    Default: ``max|spectrum| * eps**(3/4)`` per matrix, so that results do not
    change when the input is rescaled.
    """
    if atol is not None:
        return torch.full(
            (*spectrum.shape[:-1], 1, 1),
            atol,
            dtype=spectrum.dtype,
            device=spectrum.device,
        )
    if spectrum.shape[-1] == 0:
        # An empty spectrum (0 x n matrices) has no pair to compare; amax has
        # no identity element and would raise.
        return spectrum.detach().new_zeros((*spectrum.shape[:-1], 1, 1))
    scale = spectrum.detach().abs().amax(dim=-1, keepdim=True)
    return (scale * eps34(spectrum.dtype)).unsqueeze(-1)


# A spectrum of at most this many values is tested on the host: one copy
# there instead of five device operations (1-2 us each from Python); at 64
# values the two cost the same, above it the copy costs more.
_HOST_SPECTRUM = 64


def separated(x: torch.Tensor, atol: float | None, descending: bool) -> bool:
    """Whether the sorted spectrum ``x`` (``(*, k)``: singular values
    descending, eigenvalues ascending) has no degenerate pair: whether each
    adjacent gap in sort order (``x_i - x_{i+1}`` descending, ``x_{i+1} -
    x_i`` ascending) exceeds the tolerance, ``atol`` or, if None,
    :func:`degeneracy_atol`'s ``max|x| * eps**(3/4)`` per matrix. Then
    ``|x_i - x_j| > tol`` for every ``i != j``, so the only degenerate pairs
    are the diagonal ones. O(k) work and one host sync, where the degeneracy
    mask of the pairs is O(k**2). False for an unsorted spectrum and for NaN.

    A small spectrum is tested on the host in double precision, a larger one
    on its device in its dtype: they can differ only for a gap within rounding
    of the tolerance, which either answer treats correctly."""
    k = x.shape[-1]
    if k < 2:
        return True
    eps = eps34(x.dtype)
    if x.numel() <= _HOST_SPECTRUM:
        for r in x.detach().reshape(-1, k).tolist():
            if descending:
                r.reverse()  # ascending
            tol = eps * max(abs(r[0]), abs(r[-1])) if atol is None else atol
            # (a NaN gap fails the test, as it should)
            if not all(b - a > tol for a, b in zip(r, r[1:])):
                return False
        return True
    x = x.detach()
    if atol is None:
        # max|x| = max(|x_1|, |x_k|) if sorted (else a gap fails): from the
        # ends, since a reduction over a short last dimension is slow (a batch
        # of 4096 8x8: 27 us, where abs().amax() takes 64 and vector_norm 700)
        tol = torch.maximum(x[..., :1].abs(), x[..., -1:].abs()) * eps
    else:
        tol = atol
    gaps = x[..., :-1] - x[..., 1:] if descending else x[..., 1:] - x[..., :-1]
    return bool((gaps > tol).all())


def gauge_tol(*cotangent_blocks: torch.Tensor, atol: float | None) -> float:
    """Absolute gauge tolerance: default ``eps**(3/4) * max |gU|, |gVh|`` (the
    largest entry of the incoming cotangents of the singular/eigen vectors)."""
    if atol is not None:
        return atol
    scale = max(
        (max_abs(peek(b.detach())) for b in cotangent_blocks if b.numel()),
        default=0.0,
    )
    return eps34(cotangent_blocks[0].dtype) * scale


def max_abs(t: torch.Tensor) -> float:
    """``max |t|`` of a non-empty tensor, as a float. A complex tensor's by
    its squared modulus: complex ``abs`` (a ``hypot`` per entry) takes about
    seven times as long (a batch of 4096 8x8: 1.3 against 0.18 ms), except on
    a small tensor, where the extra operations cost more."""
    if t.is_complex() and t.numel() > _SMALL_COMPLEX:
        return float((t.real.square() + t.imag.square()).max()) ** 0.5
    return float(t.abs().max())


# Up to this many entries complex ``abs`` (two operations) is the faster way:
# there the five operations of the squared modulus (1-2 us each from Python)
# cost more than the hypot per entry.
_SMALL_COMPLEX = 4096


def peek(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor under torch.func wrappers, to read values from (vmap
    forbids reading a batched tensor; the checks here look at every entry)."""
    while is_functorch_wrapped_tensor(t):
        t = get_unwrapped(t)
    return t
