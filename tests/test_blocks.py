"""``svd_blocks`` (pyspectral/blocks.py): one truncation rule over the
singular values of all blocks, ranks worked out by hand on chosen spectra
and checked against ``svd`` of the block-diagonal matrix over random ones;
each block's result is ``svd``'s at its rank; gradients against finite
differences at kept multiplets, inside a block and across blocks; batches,
bad input, and the Julia backend (through the stand-in here; for real where
Julia is installed).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from _fake_julia import installed
from _julia import needs_julia
from _spectra import fd_grad, grad, matrix_with_spectrum, random_like, rel_err

import pyspectral as ps

F64, C128 = torch.float64, torch.complex128


def on(backend: str):
    """The backend: native, or Julia through the stand-in."""
    return installed() if backend == "julia" else contextlib.nullcontext()


def blocks_with(spectra, shapes, dtype=F64, seed=0):
    return [
        matrix_with_spectrum(s, m, n, dtype=dtype, seed=seed + i)
        for i, (s, (m, n)) in enumerate(zip(spectra, shapes))
    ]


# merged: 5, 4, 3, 2, 1, 0.5 (tails from 1: sqrt(1.25) = 1.12; from 2: 2.29)
SPECTRA = [[5.0, 3.0, 1.0], [4.0, 2.0], [0.5]]
SHAPES = [(4, 3), (2, 5), (1, 1)]
CASES = [
    (dict(k=3), [2, 1, 0]),
    (dict(k=10), [3, 2, 1]),  # past the total: every value
    (dict(atol=2.5), [2, 1, 0]),
    (dict(rtol=0.35), [2, 2, 0]),  # > 1.75
    (dict(error_atol=1.2), [2, 2, 0]),
    (dict(error_rtol=0.16), [2, 2, 0]),  # 0.16 ||S|| = 0.16 sqrt(55.25) = 1.19
    (dict(error_rtol=0.15), [3, 2, 0]),  # 1.11 < 1.12: the tail from 0.5 only
    (dict(k=5, atol=4.5, min_rank=3), [2, 1, 0]),  # the floor over all blocks
    (dict(k=0), [0, 0, 0]),
]


@pytest.mark.parametrize("backend", ["torch", "julia"])
@pytest.mark.parametrize("kw, ranks", CASES, ids=lambda x: repr(x))
def test_one_rule_over_all_blocks(kw, ranks, backend):
    blocks = blocks_with(SPECTRA, SHAPES)
    with on(backend):
        res = ps.svd_blocks(blocks, **kw, return_error=True, backend=backend)
    assert [int(r.rank) for r in res] == ranks
    for B, r, rank in zip(blocks, res, ranks):
        U, S, Vh = ps.svd(B, k=rank)
        assert r.S.shape == (rank,)
        assert rel_err(r.U @ torch.diag(r.S) @ r.Vh, U @ torch.diag(S) @ Vh) < 1e-12
    # the total discarded weight: the norm of all values past the kept ones
    merged = torch.tensor(sorted(sum(SPECTRA, []), reverse=True), dtype=F64)
    total = torch.linalg.vector_norm(torch.stack([r.error for r in res]))
    assert abs(float(total) - float(merged[sum(ranks) :].norm())) < 1e-12


MULTIPLET_ACROSS = [[3.0, 2.0], [2.0, 1.0]]  # a doublet {2, 2} over two blocks


@pytest.mark.parametrize(
    "multiplets, ranks", [("cut", [2, 0]), ("down", [1, 0]), ("up", [2, 1])]
)
def test_a_multiplet_across_blocks(multiplets, ranks):
    # a cut between equal values of two blocks keeps the earlier block's
    blocks = blocks_with(MULTIPLET_ACROSS, [(3, 2), (2, 4)])
    res = ps.svd_blocks(blocks, k=2, multiplets=multiplets, return_error=True)
    assert [int(r.rank) for r in res] == ranks


@pytest.mark.parametrize("seed", range(40))
def test_the_rank_is_that_of_the_block_diagonal_matrix(seed):
    # random spectra (no ties): the total rank and the kept values are those
    # of svd of the block-diagonal matrix under the same rule
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (2, 5), (3, 3)]
    blocks = [torch.randn(m, n, dtype=F64, generator=g) for m, n in shapes]
    D = torch.block_diag(*blocks)
    rules = [
        dict(k=4),
        dict(atol=1.0),
        dict(rtol=0.4),
        dict(error_rtol=0.3),
        dict(error_atol=1.5, min_rank=2, k=6),
    ]
    for kw in rules:
        res = ps.svd_blocks(blocks, **kw, return_error=True)
        whole = ps.svd(D, **kw, return_error=True)
        assert sum(int(r.rank) for r in res) == int(whole.rank), kw
        kept = torch.cat([r.S for r in res]).sort(descending=True).values
        assert rel_err(kept, whole.S) < 1e-12, kw
        total = torch.linalg.vector_norm(torch.stack([r.error for r in res]))
        assert abs(float(total - whole.error)) < 1e-12 * float(whole.error + 1)


def loss_of(blocks_shapes, dtype, absorb):
    """A smooth loss of every block's result, invariant under the gauge of
    each kept multiplet, that breaks its symmetry. Of the triplets: weighted
    projectors on the kept left and right spaces, a symmetric function of
    the kept values and the errors (what a pullback of U, S, V is exact for
    at a multiplet); of a split: a fit of each block's product to a random
    matrix and a weighted norm of the left factors."""
    Bs = [
        random_like(torch.empty(m, n, dtype=dtype), seed=7 + i)
        for i, (m, n) in enumerate(blocks_shapes)
    ]

    def loss(res):
        total = 0
        for r, B in zip(res, Bs):
            if absorb is None:
                P, Q = r.U @ r.U.mH, r.Vh.mH @ r.Vh
                total = (
                    total + (P * (B @ B.mH)).real.sum() + (Q * (B.mH @ B)).real.sum()
                )
                total = total + (r.S**3).sum() + r.error**2
            else:
                L, R = r[:2]
                total = total + ((L @ R - B).abs() ** 2).sum()
                total = total + 0.3 * (L.abs() ** 2).sum()
        return total

    return loss


@pytest.mark.parametrize("backend", ["torch", "julia"])
@pytest.mark.parametrize("absorb", [None, "both", "left"])
@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_gradient_exact_at_kept_multiplets(dtype, absorb, backend):
    # a doublet kept inside block 0 ({2, 2}) and one across blocks 0 and 1
    # ({1, 1}, kept whole: the cut is at the gap below it); everything
    # packed in one vector so that finite differences see every entry
    spectra = [[3.0, 2.0, 2.0, 1.0, 0.2], [1.0, 0.5, 0.1]]
    shapes = [(6, 5), (3, 4)]
    blocks = blocks_with(spectra, shapes, dtype=dtype, seed=3)
    sizes = [b.numel() for b in blocks]
    x0 = torch.cat([b.reshape(-1) for b in blocks])
    ell = loss_of(shapes, dtype, absorb)

    def loss(x):
        bs = [p.reshape(s) for p, s in zip(torch.split(x, sizes), shapes)]
        res = ps.svd_blocks(bs, k=5, absorb=absorb, return_error=True, backend=backend)
        assert [int(r.rank) for r in res] == [4, 1]
        return ell(res)

    with on(backend):
        assert rel_err(grad(loss, x0), fd_grad(loss, x0)) < 1e-7


def test_batches_each_their_own_ranks():
    # two batch elements, the same shapes, different spectra: each its ranks
    first = blocks_with(SPECTRA, SHAPES)
    # (merged 6, 5, 1, ...: the second keeps 1 of block 0 and 2 of block 1)
    second = blocks_with([[1.0, 0.9, 0.8], [6.0, 5.0], [0.7]], SHAPES, seed=5)
    blocks = [torch.stack(pair) for pair in zip(first, second)]
    res = ps.svd_blocks(blocks, k=3, return_error=True)
    assert [r.rank.tolist() for r in res] == [[2, 1], [1, 2], [0, 0]]
    # each matrix's places past its own rank are zero, as in svd's batches
    assert float(res[0].S[1, 1]) == 0.0 and float(res[1].S[0, 1]) == 0.0


@pytest.mark.parametrize(
    "blocks, error, match",
    [
        (torch.eye(3), ps.InputTypeError, "list or tuple"),
        ([torch.eye(3, dtype=F64), torch.eye(2)], ps.DtypeError, "one dtype"),
        ([torch.eye(3), torch.eye(2).expand(2, 2, 2)], ps.ShapeError, "batch shape"),
        ([torch.eye(3), torch.ones(3)], ps.ShapeError, "at least 2 dimensions"),
    ],
)
def test_bad_blocks(blocks, error, match):
    with pytest.raises(error, match=match):
        ps.svd_blocks(blocks, k=2)


def test_no_blocks_and_no_rule():
    assert ps.svd_blocks([], k=2) == []
    blocks = blocks_with(SPECTRA, SHAPES)
    res = ps.svd_blocks(blocks)
    for B, r in zip(blocks, res):
        assert rel_err(r.U @ torch.diag(r.S) @ r.Vh, B) < 1e-12


@needs_julia
@pytest.mark.parametrize("dtype", [F64, C128], ids=str)
def test_real_julia_blocks_agree_with_native(dtype):
    blocks = blocks_with(SPECTRA, SHAPES, dtype=dtype)
    W = [random_like(b, seed=2) for b in blocks]
    out = []
    for backend in ("torch", "julia"):
        xs = [b.clone().requires_grad_() for b in blocks]
        res = ps.svd_blocks(xs, error_rtol=0.15, absorb="both", backend=backend)
        loss = sum(((r.left @ r.right) * w.conj()).real.sum() for r, w in zip(res, W))
        out.append([g for g in torch.autograd.grad(loss, xs)])
    for a, b in zip(*out):
        assert rel_err(b, a) < 1e-10


def test_symmetric_sectors_are_cut_alike():
    # two sectors related by a symmetry: the same spectrum up to rounding
    # (block 1 is block 0 rotated); a cut inside their common values keeps
    # the earlier block's under "cut", whatever the rounding, and keeps or
    # drops both under "up" or "down"
    B = matrix_with_spectrum([3.0, 2.0, 1.0], 4, 3, seed=1)
    Q = torch.linalg.qr(random_like(torch.empty(4, 4, dtype=F64), seed=2)).Q
    blocks = [B, Q @ B]
    for multiplets, ranks in [("cut", [2, 1]), ("down", [1, 1]), ("up", [2, 2])]:
        res = ps.svd_blocks(blocks, k=3, multiplets=multiplets, return_error=True)
        assert [int(r.rank) for r in res] == ranks, multiplets


def test_forward_mode_and_second_order():
    blocks = blocks_with([[3.0, 2.0, 1.0], [2.5, 0.5]], [(4, 3), (2, 2)])
    sizes, shapes = [12, 4], [(4, 3), (2, 2)]
    x = torch.cat([b.reshape(-1) for b in blocks])
    W = random_like(x, seed=3)

    def f(x):
        bs = [p.reshape(s) for p, s in zip(torch.split(x, sizes), shapes)]
        res = ps.svd_blocks(bs, k=3, absorb="both")
        return torch.cat([(r.left @ r.right).reshape(-1) for r in res])

    dx = random_like(x, seed=4)
    _, jvp = torch.func.jvp(f, (x,), (dx,))
    ref = torch.autograd.functional.jvp(f, x, dx)[1]
    assert rel_err(jvp, ref) < 1e-12
    assert torch.autograd.gradgradcheck(
        lambda x: (f(x) * W).sum(), (x.clone().requires_grad_(),)
    )
