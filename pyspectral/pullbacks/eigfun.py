"""The exact pullback of a matrix function of a diagonalizable (non-Hermitian)
matrix, ``Y = V f(diag(L)) V^-1``, its pushforward and their second-order
maps, as plain torch functions. Mirrors
``julia/PySpectral/src/pullbacks/eigfun.jl``; the derivation is in
docs/math.md ("Matrix functions of a diagonalizable matrix").

For ``A = V diag(L) V^-1`` and an ``f`` analytic at the eigenvalues, the
Frechet derivative of ``f`` at ``A`` is, in the eigenbasis (``X = V^-1 E V``),

    L_f(A)[E] = V (F o X) V^-1,     F_ij = f[L_i, L_j]

(divided differences on the complex nodes, ``f'(L_i)`` where ``L_i = L_j``:
Daleckii-Krein for a similarity instead of a unitary; any eigenbasis of a
repeated eigenvalue gives the same map). Under the real inner product
``<X, Y> = Re tr(X^H Y)`` (torch's convention for complex gradients) its
adjoint is

    L_f(A)^*[G] = V^-H (conj(F) o (V^H G V^-H)) V^H.

Second order: ``L2_f(A; E, D) = V T(X, Y) V^-1``, ``T_ij = sum_k f[L_i, L_k,
L_j] (X_ik Y_kj + Y_ik X_kj)`` with ``Y = V^-1 D V``, and the derivative of
the pullback along ``D`` is the adjoint of ``E -> L2_f(A; E, D)``, which is the
same contraction with conjugated divided differences on ``(Gt, Y^H)``, ``Gt =
V^H G V^-H``, mapped back by ``V^-H . V^H``. The divided differences and the
contraction (quotient or confluent form, entry by entry) are matfun's, on
complex nodes.

``T = (L, V, Vinv)``: the eigenvalues, eigenvectors and ``V^-1``. A real ``A``
with an ``f`` that commutes with conjugation on its spectrum has a real
``Y``; the maps then take the real part (``real=True``), which is exact: for a
real tangent ``L_f(A)`` is real, and so is its adjoint on a real cotangent.
"""

from __future__ import annotations

from torch import Tensor

from .._fns import SpectralFn
from .._settings import Options
from ..common.safemethods import divided_difference
from .matfun import Nodes, contraction, spectral_nodes

__all__ = [
    "eig_function_nodes",
    "eig_function_pullback",
    "eig_function_pushforward",
    "eig_function_pushforward_second",
    "eig_function_second",
]


def _divided_differences(L: Tensor, f: Tensor, d: Tensor) -> Tensor:
    """``F_ij = f[L_i, L_j]`` on complex nodes (``f'`` where they meet)."""
    col, row = (lambda t: t.unsqueeze(-1)), (lambda t: t.unsqueeze(-2))
    return divided_difference(col(L), row(L), col(f), row(f), col(d), row(d))


def _real(Y: Tensor, real: bool) -> Tensor:
    return Y.real if real else Y


def eig_function_pullback(T: tuple, fd: tuple, gY: Tensor, real: bool) -> Tensor:
    """Gradient of ``Y = V f(diag(L)) V^-1`` at the cotangent ``gY``:
    ``V^-H (conj(F) o (V^H gY V^-H)) V^H``, ``F`` the divided differences of
    ``f`` (``fd = (f(L), f'(L))``); exact at every spectrum of a
    diagonalizable ``A``, repeated eigenvalues included. ``real``: the real
    part, for a real ``A``."""
    L, V, Vinv = T
    F = _divided_differences(L, *fd)
    Gt = V.mH @ gY.to(V.dtype) @ Vinv.mH
    return _real(Vinv.mH @ (F.conj() * Gt) @ V.mH, real)


def eig_function_pushforward(T: tuple, fd: tuple, dA: Tensor, real: bool) -> Tensor:
    """Tangent of ``Y`` along ``dA``: ``V (F o (V^-1 dA V)) V^-1``, the
    transpose of :func:`eig_function_pullback`."""
    L, V, Vinv = T
    F = _divided_differences(L, *fd)
    return _real(V @ (F * (Vinv @ dA.to(V.dtype) @ V)) @ Vinv, real)


def eig_function_nodes(L: Tensor, fn: SpectralFn, opts: Options) -> Nodes:
    """The eigenvalues as interpolation nodes of ``fn`` (``f``, ``f'``, ``f''``
    there), for the second-order maps."""
    return spectral_nodes(L, fn, opts)


def _conj(nodes: Nodes) -> Nodes:
    """The nodes and values conjugated: their divided differences are the
    conjugates of the original ones."""
    return Nodes(*(t.conj().resolve_conj() for t in nodes))


def eig_function_pushforward_second(
    T: tuple, nodes: Nodes, E: Tensor, D: Tensor, real: bool
) -> Tensor:
    """``L2_f(A; E, D)``, the derivative of the pushforward at ``E`` along
    ``D`` (symmetric in ``E``, ``D``): ``V T(X, Y) V^-1``, ``X = V^-1 E V``,
    ``Y = V^-1 D V``, with second divided differences of ``f``."""
    L, V, Vinv = T
    X = Vinv @ E.to(V.dtype) @ V
    Y = Vinv @ D.to(V.dtype) @ V
    pairs = [(X, Y), (Y, X)]
    C = contraction(nodes, nodes, nodes, pairs)
    return _real(V @ C(C.weights, pairs) @ Vinv, real)


def eig_function_second(
    T: tuple, nodes: Nodes, G: Tensor, D: Tensor, real: bool
) -> Tensor:
    """The derivative of :func:`eig_function_pullback` (at the cotangent
    ``G``) along ``D``: the adjoint of ``E -> L2_f(A; E, D)`` applied to
    ``G``, ``V^-H conj(T)(Gt, Y^H) V^H`` with ``Gt = V^H G V^-H`` and ``Y =
    V^-1 D V`` (``conj(T)``: the contraction with conjugated divided
    differences). By the symmetry of ``L2`` it is also the gradient w.r.t.
    ``A`` of ``<D, pullback(G)>``."""
    L, V, Vinv = T
    Gt = V.mH @ G.to(V.dtype) @ Vinv.mH
    Yh = (Vinv @ D.to(V.dtype) @ V).mH
    pairs = [(Gt, Yh), (Yh, Gt)]
    cn = _conj(nodes)
    C = contraction(cn, cn, cn, pairs)
    return _real(Vinv.mH @ C(C.weights, pairs) @ V.mH, real)
