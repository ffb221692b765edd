"""The per-call shortcuts of the native path give what the general code gives:
the separated-spectrum pullbacks (in place, no k x k degeneracy mask) against
the general formulas, ``apply`` against ``Function.apply``, the cached
default options against freshly built ones."""

from __future__ import annotations

import pytest
import torch
from _spectra import hermitian_with_spectrum, matrix_with_spectrum, random_like

import pyspectral as ps
from pyspectral._autograd import apply
from pyspectral._settings import Options, options
from pyspectral.common import defaults
from pyspectral.common.defaults import _HOST_SPECTRUM, eps34
from pyspectral.pullbacks.eigh import eigh_pullback, fold_triangle
from pyspectral.pullbacks.svd import svd_pullback

DTYPES = [torch.float64, torch.complex128]


def general(pullback, *args):
    """``pullback(*args)`` through the general formula: with an input that
    requires grad under grad mode, the pullback is not ``plain``."""
    args = [
        a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args
    ]
    with torch.enable_grad():
        return pullback(*args).detach()


def svd_case(m, n, s, dtype, seed=0):
    A = matrix_with_spectrum(s, m, n, dtype, seed=seed)
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    return U, S, Vh, *(random_like(t, seed=seed + i) for i, t in enumerate((U, S, Vh)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "m, n, s",
    [
        (5, 5, (4, 3, 2, 1, 0.5)),
        (7, 4, (4, 3, 2, 1)),  # tall: the complement term
        (4, 7, (4, 3, 2, 1)),  # wide
        (5, 5, (4, 3, 2, 1, 0)),  # a zero singular value: the cut 1/(2 s_i)
        (5, 4, (4, 3, 2, 1e-20)),  # numerically zero
    ],
)
def test_svd_pullback_separated_equals_general(dtype, m, n, s) -> None:
    U, S, Vh, gU, gS, gVh = svd_case(m, n, s, dtype)
    opts = Options(gauge="ignore")  # the random cotangents have a phase part
    assert defaults.separated(S, None, descending=True)
    for cot in ((gU, gS, gVh), (gU, None, None), (None, gS, gVh), (None, None, gVh)):
        fast = svd_pullback(U, S, Vh, *cot, opts)
        assert torch.allclose(fast, general(svd_pullback, U, S, Vh, *cot, opts))
        M = svd_pullback(U, S, Vh, *cot, opts, middle_only=True)
        M_general = general(svd_pullback, U, S, Vh, *cot, opts, True)
        # (quotients there, products by inverses here: rounding apart)
        assert torch.allclose(M, M_general, rtol=1e-13, atol=1e-15 * M.abs().max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_pullback_separated_equals_general(dtype, uplo) -> None:
    A = hermitian_with_spectrum((-2, -1e-20, 0.5, 1, 3), dtype, seed=1)
    w, V = torch.linalg.eigh(A, UPLO=uplo)
    gw, gV = random_like(w, seed=2), random_like(V, seed=3)
    opts = Options(gauge="ignore")
    assert defaults.separated(w, None, descending=False)
    for cot in ((gw, gV), (None, gV)):
        fast = eigh_pullback(w, V, *cot, uplo, opts)
        slow = general(eigh_pullback, w, V, *cot, uplo, opts)
        # (a quotient there, a product by an inverse here: rounding apart)
        assert torch.allclose(fast, slow, rtol=1e-13, atol=1e-15 * slow.abs().max())
    values_only = fold_triangle((V * gw.unsqueeze(-2).to(V.dtype)) @ V.mH, uplo)
    assert torch.equal(eigh_pullback(w, V, gw, None, uplo, opts), values_only)


@pytest.mark.parametrize("dtype", DTYPES)
def test_separated_pullback_leaves_its_inputs_alone(dtype) -> None:
    U, S, Vh, gU, gS, gVh = svd_case(6, 4, (4, 3, 2, 0), dtype)
    inputs = [t.clone() for t in (U, S, Vh, gU, gS, gVh)]
    svd_pullback(U, S, Vh, gU, gS, gVh, Options(gauge="ignore"))
    assert all(torch.equal(a, b) for a, b in zip(inputs, (U, S, Vh, gU, gS, gVh)))
    w, V = torch.linalg.eigh(hermitian_with_spectrum((1, 2, 3), dtype))
    gw, gV = random_like(w, seed=1), random_like(V, seed=2)
    inputs = [t.clone() for t in (w, V, gw, gV)]
    eigh_pullback(w, V, gw, gV, "L", Options(gauge="ignore"))
    assert all(torch.equal(a, b) for a, b in zip(inputs, (w, V, gw, gV)))


def separated(x, atol, descending):
    """``separated`` on ``x`` with its tolerance ``atol`` (None: the
    default, relative), on the host and (tiled past the host's size) on the
    device path; both must agree."""
    x = torch.tensor(x, dtype=torch.float64)
    host = defaults.separated(x, atol, descending)
    big = x.expand(_HOST_SPECTRUM + 1, *x.shape) if x.shape[-1] else x
    assert defaults.separated(big, atol, descending) == host
    return host


def test_separated() -> None:
    assert separated([3, 2, 1, 0], 0.1, descending=True)
    assert not separated([3, 2, 1.95, 0], 0.1, descending=True)  # a cluster
    assert not separated([3, 2, 1, 0], 0.1, descending=False)  # wrong order
    assert not separated([0, 3, 2.96, 3.1], 0.1, descending=False)  # unsorted
    assert not separated([3, float("nan"), 1], 0.1, descending=True)
    assert separated([-1, 0, 1], 0.1, descending=False)
    assert separated([5], 0.1, descending=True)  # one value: no pair
    assert separated([[], []], 0.1, descending=True)  # empty
    assert not separated([[3.0, 2.0], [3.0, 2.99]], 0.1, descending=True)  # any
    # the default tolerance, max|x| eps**(3/4) per matrix
    tol = 1e4 * eps34(torch.float64)
    assert separated([-1e4, 0, 2 * tol], None, descending=False)
    assert not separated([-1e4, 0, tol / 2], None, descending=False)
    t = eps34(torch.float64)  # row 2's own tolerance, not row 1's 1e4 t:
    assert separated([[1e4, 1e4 - 2e4 * t], [1.0, 1 - 2 * t]], None, descending=True)
    assert not separated([[1e4, 1e4 - 2e4 * t], [1.0, 1 - t / 2]], None, True)


@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_phase_dependent_loss_warns_at_a_separated_spectrum(op) -> None:
    """Complex input, distinct spectrum: the one gauge freedom left is the
    phase of each vector (the diagonal, which the separated path checks)."""
    if op == "svd":
        A = matrix_with_spectrum((4, 3, 2, 1), 5, 4, torch.complex128)
    else:
        A = hermitian_with_spectrum((-1, 1, 2, 3), torch.complex128)
    X = A.clone().requires_grad_()
    vectors = ps.svd(X, full_matrices=False)[0] if op == "svd" else ps.eigh(X)[1]
    assert vectors[1, 1].imag.abs() > 0.01  # (LAPACK makes eigh's first row real)
    with pytest.warns(ps.GaugeWarning, match=rf"^{op}: "):
        vectors[1, 1].real.backward()  # Re u depends on u's phase
    vectors = ps.svd(X, full_matrices=False)[0] if op == "svd" else ps.eigh(X)[1]
    vectors[1, 1].abs().backward()  # phase invariant: silent (warnings are errors)


class _Twice(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A, scale):
        return A * scale, A.sum()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, gY, gs):
        return gY * ctx.scale + gs, None


def test_apply_is_function_apply() -> None:
    A = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    Y, s = apply(_Twice, A, 2.0)
    assert Y.grad_fn is not None and torch.equal(Y, A * 2)
    (Y.sum() + s).backward()
    assert torch.equal(A.grad, torch.full((3, 3), 3.0, dtype=torch.float64))
    # under torch.func it is Function.apply itself (vmap rule, functorch levels)
    g = torch.func.grad(lambda X: apply(_Twice, X, 2.0)[0].sum())(A.detach())
    assert torch.equal(g, torch.full((3, 3), 2.0, dtype=torch.float64))
    batched = torch.func.vmap(lambda X: apply(_Twice, X, 2.0)[1])(A.detach())
    assert torch.allclose(batched, A.detach().sum(-1))


def test_default_options_are_cached_and_follow_the_defaults() -> None:
    first = options()
    second = options()
    assert first == Options() and first.site is not None
    assert first.site[:2] != second.site[:2]  # two lines: two sites
    same = [options() for _ in range(2)]
    # one site: the cached settings (the same site object), each call its own
    # state (issue 15, item 0)
    assert same[0] == same[1] and same[0].site is same[1].site
    assert same[0].state is not same[1].state
    old = ps.set_defaults(gauge="raise", degeneracy_atol=1e-3)
    try:
        for _ in range(2):  # the second time from the cache
            assert options() == Options(degeneracy_atol=1e-3, gauge="raise")
        with ps.defaults(gauge="ignore"):
            assert options().gauge == "ignore"
        assert options().gauge == "raise"
    finally:
        ps.set_defaults(**old)
    assert options() == Options()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_batched_eigh_pullback_is_the_per_matrix_one(dtype, uplo) -> None:
    """A batch folds its triangles by a mask product, a matrix by tril/triu."""
    A = torch.stack(
        [hermitian_with_spectrum((-2, 0.5, 1, 3), dtype, seed=i) for i in range(3)]
    )
    w, V = torch.linalg.eigh(A, UPLO=uplo)
    gw, gV = random_like(w, seed=4), random_like(V, seed=5)
    opts = Options(gauge="ignore")
    for cot in ((gw, gV), (gw, None)):
        batched = eigh_pullback(w, V, *cot, uplo, opts)
        for i in range(3):
            one = [None if c is None else c[i] for c in cot]
            single = eigh_pullback(w[i], V[i], *one, uplo, opts)
            # (bmm and mm may round differently)
            assert torch.allclose(batched[i], single, rtol=1e-13, atol=1e-14)
    G = random_like(A, seed=6)
    folded = fold_triangle(G, uplo)
    assert all(torch.equal(folded[i], fold_triangle(G[i], uplo)) for i in range(3))


# ---------------------------------------------------- issue 25: speed round 2


def spread(n, close=None, seed=0):
    """``n`` distinct values in (1, 2], descending; ``close=(i, gap)`` puts
    value ``i + 1`` ``gap`` below value ``i`` (inside the rounding cut's
    window, outside the degeneracy tolerance)."""
    g = torch.Generator().manual_seed(seed)
    s = (1 + torch.rand(n, dtype=torch.float64, generator=g)).sort(descending=True)
    s = s.values
    if close is not None:
        i, gap = close
        s[i + 1] = s[i] - gap
    return tuple(s.tolist())


@pytest.mark.parametrize("n", [130, 140])  # from TRANSPOSE_COPY on: in place
@pytest.mark.parametrize("close", [None, (5, 1e-9)])
def test_large_svd_pullback_equals_general(n, close) -> None:
    """The in-place path of a large real square SVD (every temporary in three
    buffers) gives the general formula's gradient, with the rounding cut of
    the differences (at this size some adjacent gap is always in its window;
    here also a near-degenerate pair) and of the trailing sums (two values
    whose sum is in the window)."""
    from pyspectral.common.safemethods import TRANSPOSE_COPY, gap_checks

    assert n >= TRANSPOSE_COPY
    s = spread(n - 2, close) + (0.02, 0.01)
    U, S, Vh, gU, gS, gVh = svd_case(n, n, s, torch.float64)
    checks = gap_checks(S, None, 2 * n, True)
    assert checks.separated and checks.cut_differences and checks.tail == n - 2
    opts = Options(gauge="ignore")
    W = random_like(U, seed=7)
    polar = (W @ Vh.mH, None, U.mH @ W)  # invariant: the numerators are noise
    for cot in ((gU, gS, gVh), (gU, None, gVh), (gU, gS, None), (None, gS, gVh), polar):
        fast = svd_pullback(U, S, Vh, *cot, opts)
        slow = general(svd_pullback, U, S, Vh, *cot, opts)
        assert torch.allclose(fast, slow, rtol=1e-12, atol=1e-12 * slow.abs().max())


@pytest.mark.parametrize("hermitian", [False, True])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_large_eigh_pullback_equals_general(hermitian, uplo) -> None:
    """The same for eigh (130 x 130, a close pair), under both conventions;
    torch's Hermitian gradient comes out exactly Hermitian."""
    w0 = torch.linspace(-2, 3, 130, dtype=torch.float64)
    w0[7] = w0[6] + 1e-9
    A = hermitian_with_spectrum(tuple(w0.tolist()), torch.float64)
    w, V = torch.linalg.eigh(A, UPLO=uplo)
    gw, gV = random_like(w, seed=1), random_like(V, seed=2)
    opts = Options(gauge="ignore")
    W = random_like(A, seed=7)
    pair = torch.zeros_like(V)  # the projector onto the pair: invariant
    pair[:, 6:8] = (W + W.mT) @ V[:, 6:8]
    for cot in ((gw, gV), (None, gV), (gw, None), (None, pair)):
        fast = eigh_pullback(w, V, *cot, uplo, opts, hermitian=hermitian)
        slow = general(eigh_pullback, w, V, *cot, uplo, opts, False, hermitian)
        assert torch.allclose(fast, slow, rtol=1e-12, atol=1e-12 * slow.abs().max())
        if hermitian:
            assert torch.equal(fast, fast.mH)


@pytest.mark.parametrize("descending", [True, False])
def test_gap_checks_host_and_device_agree(descending) -> None:
    """``gap_checks`` reads a small spectrum on the host and a batch on its
    device: the same answers (NaN: degenerate, every cut)."""
    from pyspectral.common.safemethods import gap_checks

    g = torch.Generator().manual_seed(3)
    cases = [torch.rand(3, 6, dtype=torch.float64, generator=g) for _ in range(20)]
    cases.append(torch.tensor([[3.0, 2.0, 1.0, 1e-6], [3.0, 2.0, 1.0 + 1e-7, 1.0]]))
    cases.append(torch.tensor([[3.0, float("nan"), 1.0]]))
    for x in cases:
        x = x.sort(-1, descending=descending).values
        host = gap_checks(x, None, 10, descending)
        device = gap_checks(x.expand(_HOST_SPECTRUM, *x.shape), None, 10, descending)
        assert device[:3] == host[:3], (x, host, device)
    # the tail: the values whose double is below the window, from the end
    x = torch.tensor([3.0, 2.0, 1.0, 1e-6, 1e-7], dtype=torch.float64)
    assert gap_checks(x, None, 10, True).tail == 3


def test_gap_checks_rows_select_the_matrices_to_cut() -> None:
    from pyspectral.common.safemethods import gap_checks

    x = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64).repeat(40, 1)
    x[17, 2] = 3.0 - 1e-9  # one matrix with a close pair
    checks = gap_checks(x, None, 8, True)
    assert checks.cut_differences and checks.rows.tolist() == [17]
    x[:20, 2] = 3.0 - 1e-9  # half the batch: every matrix is cut (rows None)
    checks = gap_checks(x, None, 8, True)
    assert checks.cut_differences and checks.rows is None
    assert not gap_checks(x[20:], None, 8, True).cut_differences


def _invariant_loss(op, X, W):
    """Invariant under rotations of the pair (5, 5 - 1e-10): the polar
    factor, the projector onto the eigenvectors of the pair (W symmetric)."""
    if op == "svd":
        U, S, Vh = ps.svd(X, full_matrices=False)
        return ((U @ Vh) * W).sum() + S.sum()
    w, V = ps.eigh(X)
    P = V[..., :, 3:5] @ V[..., :, 3:5].mT
    return (P * W).sum() + w.sum()


@pytest.mark.parametrize("op", ["svd", "eigh"])
def test_batched_cut_of_a_few_matrices_is_exact(op) -> None:
    """A batch of 40 where one matrix has a near-degenerate pair: that one
    alone is cut (``GapChecks.rows``), and each gradient is the matrix's
    alone (read on the host). Uncut, matrix 17's would be off by 5e-7 (the
    rounding of the pair's numerator over its gap of 1e-10)."""
    dtype = torch.float64
    close, far = (8, 7, 6, 5, 5 - 1e-10, 3, 2, 1), (8, 7, 6, 5, 4, 3, 2, 1)
    mats = []
    for i in range(40):
        s = close if i == 17 else far
        if op == "svd":
            mats.append(matrix_with_spectrum(s, 8, 8, dtype, seed=i))
        else:
            mats.append(hermitian_with_spectrum(s, dtype, seed=i))
    A = torch.stack(mats).requires_grad_()
    W = random_like(A.detach(), seed=99)
    W = W + W.mT
    (batched,) = torch.autograd.grad(_invariant_loss(op, A, W), A)
    for i in (0, 17):
        Ai = A.detach()[i].clone().requires_grad_()
        (single,) = torch.autograd.grad(_invariant_loss(op, Ai, W[i]), Ai)
        assert torch.allclose(batched[i], single, rtol=1e-12, atol=1e-13)


def test_column_rounding_never_cuts_everything_on_overflow() -> None:
    """A single-precision bound that overflows is 0 (nothing cut there), not
    inf (everything cut: a zero gradient); NaN stays NaN."""
    from pyspectral.common.safemethods import column_rounding

    G = torch.tensor([[1e20, 1.0], [1e20, 1.0]], dtype=torch.float32)
    c = column_rounding(G, 2)
    assert torch.isfinite(c).all() and c[0] == 0 and c[1] > 0
    assert torch.isnan(column_rounding(torch.full((2, 1), float("nan")), 2)).all()


@pytest.mark.parametrize("descending", [True, False])
def test_cut_rounding_band_is_the_cut_near_the_diagonal(descending) -> None:
    """The band cut of the large paths: the full cut on every pair within
    its band (which holds the pairs whose values are closer than the window),
    nothing outside it; a band wider than k / 8 leaves the matrix alone (the
    caller then cuts all of it)."""
    from pyspectral.common.safemethods import cut_rounding, cut_rounding_band

    k, g = 200, torch.Generator().manual_seed(5)
    x = torch.linspace(1, 100, k, dtype=torch.float64)  # gaps 0.5, window ~2.4
    x = x.flip(0) if descending else x
    X = torch.randn(k, k, dtype=torch.float64, generator=g) * 1e-14
    X = X - X.mT  # exactly skew
    c = torch.rand(k, dtype=torch.float64, generator=g) * 1e-14
    full = cut_rounding(X.clone(), c.unsqueeze(-1) + c, True)
    banded = X.clone()
    assert cut_rounding_band(banded, c, x, 2 * k, descending)
    i, j = torch.meshgrid(torch.arange(k), torch.arange(k), indexing="ij")
    wide = (2 * k + 4) * eps34(torch.float64) ** (1 / 3) * 100  # eps**(1/4)
    near = (x.unsqueeze(-1) - x).abs() < wide
    band = int(((i - j).abs() * near).max())
    assert 0 < band <= k // 8
    inside = (i - j).abs() <= band
    assert torch.equal(banded[inside], full[inside])  # the cut, in the band
    assert torch.equal(banded[~inside], X[~inside])  # nothing, outside
    assert (banded[near & (i != j)] == 0).sum() > 0  # (some entry was cut)
    # a wide band (values 1000x closer): nothing done, False
    dense = X.clone()
    assert not cut_rounding_band(dense, c, x / 1000 + 1, 2 * k, descending)
    assert torch.equal(dense, X)
