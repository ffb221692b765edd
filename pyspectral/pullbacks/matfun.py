"""The exact (Daleckii-Krein) pullback of a spectral matrix function
``V f(diag(w)) V^H``. Mirrors ``julia/PySpectral/src/pullbacks/matfun.jl``
(the pullback of ``U f(S) V^H`` is in ``svd.py``, as in Julia's ``svd.jl``),
and its forward-mode transpose ``matrix_function_pushforward``.
"""

from __future__ import annotations

from torch import Tensor

from .. import _common as C
from .._common import divided_difference
from .._fns import SpectralFn
from .eigh import fold_triangle, hermitian_from_triangle, tangent_scale

__all__ = ["matrix_function_pullback", "matrix_function_pushforward"]


def matrix_function_pullback(
    w: Tensor, V: Tensor, fn: SpectralFn, gY: Tensor, uplo: str, opts: C.Options
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
    return C.with_infinite_weights(pullback, (L,), C.max_abs(gY))


def _divided_differences(w: Tensor, fn: SpectralFn, opts: C.Options) -> Tensor:
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
    w: Tensor, V: Tensor, fn: SpectralFn, dA: Tensor, uplo: str, opts: C.Options
) -> Tensor:
    """Tangent of ``Y = V f(diag(w)) V^H`` along ``dA`` (Daleckii-Krein):
    ``V (L o V^H dA_h V) V^H`` with ``dA_h`` read from the ``uplo`` triangle
    and ``L`` the divided differences of ``f``; exact at every spectrum,
    ``+-inf`` (never NaN) where an infinite ``f[0, 0]`` reaches."""
    L = _divided_differences(w, fn, opts)
    dP = V.mH @ hermitian_from_triangle(dA, uplo) @ V

    def pushforward(L: Tensor) -> Tensor:
        return V @ (L * dP) @ V.mH

    return C.with_infinite_weights(pushforward, (L,), tangent_scale(dA))
