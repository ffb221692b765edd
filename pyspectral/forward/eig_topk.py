"""Block Krylov-Schur for a few eigenpairs of a square operator touching it
only through ``matmul`` (``(n, p) -> (n, p)`` blocks): the forward of
``eig_topk``.

The iteration keeps a Krylov decomposition ``A Q_p = Q_p H + Q_r E`` with
``[Q_p, Q_r]`` orthonormal (``n x (p + b)``, ``b`` the block size) and
extends it block by block (classical Gram-Schmidt twice, then a QR of the
new block) to ``m`` columns. The Ritz pairs are the eigenpairs ``(θ, Q_m
y)`` of the small ``H``; ``||E y||`` is the residual ``||A Q y - θ Q y||``.
A restart keeps the ``p`` wanted Ritz vectors: with ``Z`` an orthonormal
basis of their span (an invariant subspace of ``H``, as the leading Schur
vectors of a reordered Schur form are) ``A (Q Z) = (Q Z)(Z^H H Z) + Q_r (E
Z)`` is again a Krylov decomposition (Stewart's Krylov-Schur, with the span
of eigenvectors in place of the reordered Schur vectors: torch has no Schur
decomposition). A real operator is iterated in real arithmetic, as ARPACK's
``dnaupd`` does: the basis and ``H`` stay real, and a restart keeps a real
basis of the span of the kept Ritz vectors and their conjugates (the real
and imaginary parts of a complex pair's vector), so each product is half as
wide as a complex block's and Gram-Schmidt a quarter of the work; the Ritz
pairs come out complex, a complex pair as a pair. A complex operator is
iterated in complex arithmetic.

A block of ``b`` start vectors finds an eigenvalue of multiplicity up to
``b`` (a single vector's Krylov space holds only one vector of each
eigenspace); a block that the Gram-Schmidt finds rank-deficient (an invariant
subspace: exact eigenpairs) is completed by random vectors orthogonal to the
basis. Mirrors the Krylov-Schur of KrylovKit.jl's ``eigsolve``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

# a block product X -> A X on (n, p) complex tensors
Op = Any

WHICH = ("LM", "SM", "LR", "SR", "LI", "SI")


class Ritz(NamedTuple):
    """The iteration's result: the wanted Ritz values (ordered by ``which``),
    their unit-norm vectors ``(n, k)``, each pair's true residual norm
    ``||A v - θ v||``, the tolerance it met (or missed), the products and
    restarts spent."""

    values: Tensor
    vectors: Tensor
    residual: Tensor
    tol: float
    products: int
    restarts: int


def sort_key(theta: Tensor, which: str) -> Tensor:
    """The quantity ``which`` orders by, largest first."""
    return {
        "LM": lambda t: t.abs(),
        "SM": lambda t: -t.abs(),
        "LR": lambda t: t.real,
        "SR": lambda t: -t.real,
        "LI": lambda t: t.imag,
        "SI": lambda t: -t.imag,
    }[which](theta)


def _orthonormalize(W: Tensor, Q: Tensor, gen: torch.Generator) -> tuple:
    """``(Qn, C, R)``: ``W = Q C + Qn R`` with ``Qn`` orthonormal and
    orthogonal to ``Q`` (CGS2, then QR), at most ``n - Q.shape[1]`` columns.
    A rank-deficient remainder (an invariant subspace) is completed by random
    directions orthogonal to the basis, with zero rows in ``R``."""
    C = Q.mH @ W
    W = W - Q @ C
    C2 = Q.mH @ W
    W = W - Q @ C2
    C = C + C2
    Qn, R = torch.linalg.qr(W)
    scale = max(float(torch.linalg.matrix_norm(C)), float(torch.linalg.matrix_norm(R)))
    small = R.diagonal().abs() <= 1e-12 * max(scale, 1e-300)
    n, room = W.shape[0], W.shape[0] - Q.shape[1]
    if bool(small.any()) or room < W.shape[1]:
        Qn, R = Qn[:, ~small], R[~small]
        basis = torch.cat((Q, Qn), 1)
        real = W.real.dtype
        while Qn.shape[1] < min(W.shape[1], room):
            v = torch.randn(n, 1, generator=gen, dtype=real).to(W.device, W.dtype)
            for _ in range(2):
                v = v - basis @ (basis.mH @ v)
            v = v / torch.linalg.vector_norm(v)
            Qn, basis = torch.cat((Qn, v), 1), torch.cat((basis, v), 1)
            R = torch.cat((R, R.new_zeros(1, R.shape[1])), 0)
        Qn, R = Qn[:, :room], R[:room]
    return Qn, C, R


def krylov_schur(
    matmul: Op,
    n: int,
    k: int,
    which: str,
    tol: float,
    krylovdim: int,
    maxiter: int,
    blocksize: int,
    dtype: torch.dtype,
    device: torch.device,
    tie: float,
    gen: torch.Generator,
) -> tuple[Ritz, int]:
    """``(ritz, k')``: the ``k'`` wanted eigenpairs, ``k' >= k`` extended
    while the next Ritz value ties with the last one in the ordering (to
    ``tie`` relative to the largest Ritz value: a conjugate pair under
    ``LM``/``LR``/``SR``/``SM``, a modulus tie, a repeated eigenvalue), so
    that no cluster is cut. Converged when every kept pair's residual is at
    most ``tol`` times the largest Ritz value's modulus. ``matmul`` takes
    blocks of ``dtype``: real for a real operator (then iterated in real
    arithmetic), complex otherwise; the Ritz pairs are complex either way."""
    b = max(1, min(blocksize, n))
    m = min(n, max(krylovdim, k + 2 * b))
    real = not dtype.is_complex
    start = torch.randn(n, b, generator=gen, dtype=dtype.to_real()).to(device, dtype)
    # the basis is kept as rows, QT = Q^T: a block of it, QT[p:].mT, is then a
    # column-major (n, b) view, which BLAS multiplies about twice as fast as a
    # row-major block (2048^2 times 2 columns: 1.55 against 3.07 ms, 2 cores)
    QT = torch.linalg.qr(start)[0].mT.contiguous()
    H = torch.zeros(0, 0, dtype=dtype, device=device)
    E = torch.zeros(b, 0, dtype=dtype, device=device)
    p, products, restarts = 0, 0, 0
    while True:
        # extend the decomposition by its residual block to m columns (at
        # most n: Q_r has min(b, n - p) columns)
        while p < m:
            X = QT[p:].mT
            q = X.shape[1]
            W = matmul(X)
            products += q
            Qn, C, R = _orthonormalize(W, QT.mT, gen)
            size = QT.shape[0]
            Hn = torch.zeros(size + R.shape[0], p + q, dtype=dtype, device=device)
            Hn[:p, :p] = H
            Hn[p:size, :p] = E
            Hn[:size, p:] = C
            Hn[size:, p:] = R
            QT = torch.cat((QT, Qn.mT), 0)
            p += q
            H, E = Hn[:p, :p], Hn[p:, :p]
        theta, Y = torch.linalg.eig(H)
        order = torch.argsort(sort_key(theta, which), descending=True, stable=True)
        theta, Y = theta[order], Y[:, order]
        Y = Y / torch.linalg.vector_norm(Y, dim=0)
        res = torch.linalg.vector_norm(E.to(Y.dtype) @ Y, dim=0)
        scale = float(theta.abs().max()) if theta.numel() else 0.0
        kk = _extend(theta, k, which, tie * max(scale, 1e-300), p)
        done = bool((res[:kk] <= tol * max(scale, 1e-300)).all()) or p == n
        if done or restarts >= maxiter:
            V = QT[:p].mT.to(Y.dtype) @ Y[:, :kk]
            V = V / torch.linalg.vector_norm(V, dim=0)
            AV = complex_product(matmul, V) if real else matmul(V)
            true = torch.linalg.vector_norm(AV - V * theta[:kk], dim=0)
            products += kk
            ritz = Ritz(theta[:kk], V, true, tol * scale, products, restarts)
            return ritz, kk
        # restart: keep the wanted Ritz vectors and a few more
        keep = max(kk, min(p - b, kk + (m - kk) // 2))
        if real:
            Z = _real_span(theta[:keep], Y[:, :keep])
        else:
            Z, _ = torch.linalg.qr(Y[:, :keep])
        m = min(n, max(m, Z.shape[1] + b))
        H = Z.mH @ H @ Z
        E = E @ Z
        QT = torch.cat((Z.mT @ QT[:p], QT[p:]), 0)
        p = Z.shape[1]
        restarts += 1


def _real_span(theta: Tensor, Y: Tensor) -> Tensor:
    """A real orthonormal basis of the span of the Ritz vectors ``Y`` (of a
    real ``H``) and their conjugates: the real and imaginary parts, whose rank
    is the number of real Ritz values plus twice the number of conjugate
    pairs touched (LAPACK's ``geev`` gives a real ``H`` exactly real
    eigenvalues, real eigenvectors for them and exact conjugate pairs)."""
    complex_ = theta[theta.imag != 0]
    pairs = torch.unique(torch.stack((complex_.real, complex_.imag.abs()), 1), dim=0)
    rank = int((theta.imag == 0).sum()) + 2 * pairs.shape[0]
    U, _, _ = torch.linalg.svd(torch.cat((Y.real, Y.imag), 1), full_matrices=False)
    return U[:, :rank]


def complex_product(matmul: Op, V: Tensor) -> Tensor:
    """A real operator's product with a complex block: its real and imaginary
    parts in one block of twice the width."""
    p = V.shape[1]
    AV = matmul(torch.cat((V.real, V.imag), 1))
    return torch.complex(AV[:, :p], AV[:, p:])


def _extend(theta: Tensor, k: int, which: str, tie: float, p: int) -> int:
    """``k`` extended over ties of the ordering key at the cut."""
    key = sort_key(theta, which)
    kk = min(k, p)
    while kk < min(p, theta.numel()) and bool(
        (theta[kk] - theta[kk - 1]).abs() <= tie or (key[kk - 1] - key[kk]).abs() <= tie
    ):
        kk += 1
    return kk
