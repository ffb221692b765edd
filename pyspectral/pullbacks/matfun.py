"""The exact (Daleckii-Krein) pullback of a spectral matrix function
``V f(diag(w)) V^H``. Mirrors ``julia/PySpectral/src/pullbacks/matfun.jl``
(the pullback of ``U f(S) V^H`` is in ``svd.py``, as in Julia's ``svd.jl``),
and its forward-mode transpose ``matrix_function_pushforward``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import Tensor

from .._fns import SpectralFn
from .._settings import Options
from ..common.defaults import eps
from ..common.gauge import policy_applied
from ..common.safemethods import (
    ULPS,
    confluent_divided_difference,
    divided_difference,
    divided_difference_with_error,
    max_abs,
    with_infinite_weights,
)
from .eigh import fold_triangle, hermitian_from_triangle, tangent_scale

__all__ = [
    "matrix_function_pullback",
    "matrix_function_pushforward",
    "matrix_function_second",
    "matrix_function_second_order",
]


def matrix_function_pullback(
    w: Tensor, V: Tensor, fn: SpectralFn, gY: Tensor, uplo: str, opts: Options
) -> Tensor:
    """Gradient of ``Y = V f(diag(w)) V^H`` (Daleckii-Krein), exact at every
    spectrum: ``V (L o herm(V^H gY V)) V^H`` with ``L`` the divided differences
    of ``f``, then folded onto the triangle the forward read. Where ``f'`` is
    infinite (``sqrt`` at an exact zero eigenvalue) only ``L`` on that
    eigenvalue's pairs with itself is, and the gradient is ``+-inf`` in the
    entries that part reaches, finite elsewhere."""
    f, d = fn(w, opts)
    L = divided_difference(
        w.unsqueeze(-1),
        w.unsqueeze(-2),
        f.unsqueeze(-1),
        f.unsqueeze(-2),
        d.unsqueeze(-1),
        d.unsqueeze(-2),
    )
    X = V.mH @ gY @ V

    def pullback(L: Tensor) -> Tensor:
        return fold_triangle(V @ (L * (X + X.mH) * 0.5) @ V.mH, uplo)

    # f' infinite at an exact zero eigenvalue (sqrt): +-inf exactly where the
    # infinite divided differences reach, finite elsewhere, never NaN. The fold
    # is inside the linear map: torch's complex arithmetic on inf + 0j (even
    # 2 * z) gives NaN imaginary parts, so no arithmetic may follow the infs.
    return with_infinite_weights(pullback, (L,), max_abs(gY))


def _divided_differences(w: Tensor, fn: SpectralFn, opts: Options) -> Tensor:
    """The matrix ``L_ij = f[w_i, w_j]`` of first divided differences."""
    f, d = fn(w, opts)
    return divided_difference(
        w.unsqueeze(-1),
        w.unsqueeze(-2),
        f.unsqueeze(-1),
        f.unsqueeze(-2),
        d.unsqueeze(-1),
        d.unsqueeze(-2),
    )


def matrix_function_pushforward(
    w: Tensor, V: Tensor, fn: SpectralFn, dA: Tensor, uplo: str, opts: Options
) -> Tensor:
    """Tangent of ``Y = V f(diag(w)) V^H`` along ``dA`` (Daleckii-Krein):
    ``V (L o V^H dA_h V) V^H`` with ``dA_h`` read from the ``uplo`` triangle
    and ``L`` the divided differences of ``f``; exact at every spectrum,
    ``+-inf`` (never NaN) where an infinite ``f[0, 0]`` reaches."""
    L = _divided_differences(w, fn, opts)
    dP = V.mH @ hermitian_from_triangle(dA, uplo) @ V

    def pushforward(L: Tensor) -> Tensor:
        return V @ (L * dP) @ V.mH

    return with_infinite_weights(pushforward, (L,), tangent_scale(dA))


# ---------------------------------------------------------- second order
#
# The derivative of the Frechet derivative L_f(A)[E] = V (F1 o V^H E V) V^H in a
# direction D (Daleckii-Krein, second order; Bhatia, Matrix Analysis, V.3) is,
# in the eigenbasis (X = V^H E V, Y = V^H D V),
#   L2_f(A; E, D)^_ij = sum_k f[w_i, w_k, w_j] (X_ik Y_kj + Y_ik X_kj),
# symmetric in E and D, and <R, L2(E, D)> is symmetric in (R, E, D): the
# pullback of the pullback G -> L_f(A)[herm G] w.r.t. A is L2(herm G, R), and
# w.r.t. G the first-order map itself. The sum is formed with matrix products:
# for w_i != w_j, f[w_i, w_k, w_j] = (f[w_i, w_k] - f[w_k, w_j]) / (w_i - w_j),
#   sum_k ... = ((F1 o X) Y - X (F1 o Y))_ij / (w_i - w_j)        (quotient),
# and as w_j -> w_i, f[w_i, w_k, w_j] -> (f[w_i, w_i, w_k] + f[w_j, w_j, w_k]) / 2
# up to O((w_i - w_j)^2) (the mean over the two ends is symmetric in them),
#   sum_k ... = ((N o X) Y + X (N^T o Y))_ij / 2, N_ik = f[w_i, w_i, w_k]
# (confluent). Entry by entry the quotient is taken where it differs from the
# confluent form by more than twice its rounding error (the criterion of
# divided_difference, with the rounding of the first divided differences
# carried along): exact at every spectrum, degenerate ones included.


class Nodes(NamedTuple):
    """Interpolation nodes ``x`` of ``f`` with ``f``, ``f'``, ``f''`` there
    (each of shape ``(*, p)``)."""

    x: Tensor
    f: Tensor
    d: Tensor
    h: Tensor


def spectral_nodes(w: Tensor, fn: SpectralFn, opts: Options) -> Nodes:
    """The spectrum ``w`` as nodes of ``fn`` (the forward has applied the gauge
    policy to this spectrum already: evaluating ``fn`` here does not warn)."""
    opts = policy_applied(opts)
    f, d = fn(w, opts)
    return Nodes(w, f, d, fn.second(w, opts))


class Contraction(NamedTuple):
    """``T_ij = sum over (X, Y) in pairs of sum_k f[rho_i, lam_k, kap_j] X_ik Y_kj``,
    prepared: the divided differences (``weights``, linear in them, some
    possibly infinite) and, per entry, the form taken (``quotient``)."""

    weights: tuple[Tensor, ...]
    inv: Tensor
    quotient: Tensor

    def __call__(self, weights: tuple[Tensor, ...], pairs: list) -> Tensor:
        L1, L2, N1, N2 = weights
        return torch.where(
            self.quotient,
            _quotient_form(L1, L2, self.inv, pairs),
            _confluent_form(N1, N2, pairs),
        )


def _quotient_form(L1: Tensor, L2: Tensor, inv: Tensor, pairs: list) -> Tensor:
    return sum((L1 * X) @ Y - X @ (L2 * Y) for X, Y in pairs) * inv


def _confluent_form(N1: Tensor, N2: Tensor, pairs: list) -> Tensor:
    return sum((N1 * X) @ Y + X @ (N2.mT * Y) for X, Y in pairs) * 0.5


def _first(a: Nodes, b: Nodes) -> tuple[Tensor, Tensor]:
    """``f[a_i, b_j]`` and its error estimate."""
    col, row = (lambda t: t.unsqueeze(-1)), (lambda t: t.unsqueeze(-2))
    return divided_difference_with_error(
        col(a.x), row(b.x), col(a.f), row(b.f), col(a.d), row(b.d), col(a.h), row(b.h)
    )


def _confluent(a: Nodes, b: Nodes, L: Tensor, E: Tensor) -> Tensor:
    """``f[a_i, a_i, b_k]`` from ``L = f[a_i, b_k]`` with error ``E``."""
    col, row = (lambda t: t.unsqueeze(-1)), (lambda t: t.unsqueeze(-2))
    return confluent_divided_difference(
        col(a.x), row(b.x), col(a.d), col(a.h), row(b.h), L, E
    )


def contraction(rho: Nodes, lam: Nodes, kap: Nodes, pairs: list) -> Contraction:
    """Prepare :class:`Contraction` for the ``(X, Y)`` in ``pairs`` (``X``:
    rows at the nodes ``rho``, columns at ``lam``; ``Y``: rows at ``lam``,
    columns at ``kap``)."""
    L1, E1 = _first(rho, lam)
    L2, E2 = _first(lam, kap)
    N1 = _confluent(rho, lam, L1, E1)
    N2 = _confluent(kap, lam, L2.mT, E2.mT)
    delta = rho.x.unsqueeze(-1) - kap.x.unsqueeze(-2)
    nonzero = delta != 0
    inv = torch.where(nonzero, 1 / torch.where(nonzero, delta, 1.0), 0.0)
    # The form is chosen on the finite parts (infinite weights are decided
    # entry by entry by with_infinite_weights, under the same choice).
    fin = [torch.where(torch.isfinite(w), w, 0.0) for w in (L1, L2, N1, N2)]
    quotient = _quotient_form(fin[0], fin[1], inv, pairs)
    confluent = _confluent_form(fin[2], fin[3], pairs)
    # Rounding of the quotient form: that of the first divided differences
    # (E) and of the products (a few ulps of |F1| per term, times a summation
    # factor).
    c = eps(delta.dtype) * (ULPS + lam.x.shape[-1] ** 0.5)
    a1, a2 = c * fin[0].abs() + E1, c * fin[1].abs() + E2
    rounding = (
        sum((a1 * X.abs()) @ Y.abs() + X.abs() @ (a2 * Y.abs()) for X, Y in pairs)
        * inv.abs()
    )
    choose = nonzero & ((quotient - confluent).abs() > 2 * rounding)
    return Contraction((L1, L2, N1, N2), inv, choose)


def matrix_function_second(
    w: Tensor,
    V: Tensor,
    fn: SpectralFn,
    E: Tensor,
    D: Tensor,
    opts: Options,
    finish: Callable[[Tensor], Tensor],
    scale: Tensor,
) -> Tensor:
    """``finish(L2_f(A; E, D))`` for Hermitian ``E``, ``D`` (see the comment
    above): the derivative of the Daleckii-Krein map along ``D``, exact at
    every spectrum. ``finish`` is the linear map applied to the result (the
    triangle fold); ``scale``: the size of ``E`` times that of ``D``, for the
    infinite weights of ``f`` with an infinite ``f'`` or ``f''`` at a node
    (``sqrt`` at an exact zero): ``+-inf`` where they reach, never NaN."""
    nodes = spectral_nodes(w, fn, opts)
    X, Y = V.mH @ E @ V, V.mH @ D @ V
    pairs = [(X, Y), (Y, X)]
    T = contraction(nodes, nodes, nodes, pairs)

    def second(*weights: Tensor) -> Tensor:
        return finish(V @ T(weights, pairs) @ V.mH)

    return with_infinite_weights(second, T.weights, scale)


def matrix_function_second_order(
    w: Tensor,
    V: Tensor,
    fn: SpectralFn,
    gY: Tensor,
    dA: Tensor,
    uplo: str,
    opts: Options,
) -> Tensor:
    """Derivative of :func:`matrix_function_pullback` (at the cotangent ``gY``)
    along ``dA`` (read from the ``uplo`` triangle), which is also its pullback
    w.r.t. ``A`` with cotangent ``dA``: ``fold(L2_f(A; herm gY, dA_h))``, exact
    at every spectrum (second divided differences of ``f``)."""
    return matrix_function_second(
        w,
        V,
        fn,
        (gY + gY.mH) * 0.5,
        hermitian_from_triangle(dA, uplo),
        opts,
        lambda G: fold_triangle(G, uplo),
        max_abs(gY) * tangent_scale(dA),
    )
