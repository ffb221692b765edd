"""The gauge policy of ``pyspectral/common/gauge.py``, directly: what is
measured (only the cluster entries, plus a violation measured elsewhere),
against which tolerance (``gauge_atol`` or the default from the cotangents),
and what each policy does. Through the operations: ``test_degenerate.py``."""

from __future__ import annotations

import warnings

import pytest
import torch

import pyspectral as ps
from pyspectral._settings import Options
from pyspectral.common.defaults import eps34
from pyspectral.common.gauge import (
    FLOOR_CURVATURE,
    WEIGHT_SLOPE,
    apply_gauge_records,
    check_gauge,
    check_weights,
    data_floor,
    gauge_message,
    policy_applied,
    weights_floor,
    weights_message,
)

F64 = torch.float64


def violation_and_cluster() -> tuple[torch.Tensor, torch.Tensor]:
    V = torch.tensor([[0.0, 5.0, 1e-3], [-5.0, 0.0, 0.0], [-1e-3, 0.0, 0.0]], dtype=F64)
    cluster = torch.zeros(3, 3, dtype=torch.bool)
    cluster[0, 2] = cluster[2, 0] = True  # only (0, 2) is degenerate
    return V, cluster


def test_only_the_cluster_entries_are_measured() -> None:
    V, cluster = violation_and_cluster()
    scale = (torch.ones(3, 3, dtype=F64),)  # default tolerance eps**0.75
    with pytest.warns(ps.GaugeWarning) as record:
        check_gauge("svd", V, cluster, scale, Options())
    assert str(record[0].message) == gauge_message("svd", 1e-3, eps34(F64))
    # the large entry (0, 1) is outside every cluster: not measured
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_gauge("svd", V, cluster, scale, Options(gauge_atol=2e-3))


def test_the_extra_violation_counts() -> None:
    V, cluster = violation_and_cluster()
    scale = (torch.ones(3, 3, dtype=F64),)
    with pytest.warns(ps.GaugeWarning, match="measured 0.5 >"):
        check_gauge("eigh", V, cluster, scale, Options(gauge_atol=0.1), extra=0.5)


def test_default_tolerance_scales_with_the_cotangents() -> None:
    V, cluster = violation_and_cluster()  # measured 1e-3
    big = (torch.full((3, 3), 1e10, dtype=F64),)  # tolerance 1e10 * eps**0.75
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_gauge("svd", V, cluster, big, Options())
    with pytest.warns(ps.GaugeWarning):
        check_gauge("svd", V, cluster, (big[0] * 1e-10,), Options())


def test_the_policies() -> None:
    V, cluster = violation_and_cluster()
    scale = (torch.ones(3, 3, dtype=F64),)
    with pytest.raises(ps.GaugeError, match=r"svd: .*measured 0.001 >"):
        check_gauge("svd", V, cluster, scale, Options(gauge="raise"))
    for opts in (Options(gauge="ignore"), policy_applied(Options(gauge="raise"))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_gauge("svd", V, cluster, scale, opts)


def test_a_zero_violation_never_reports_even_at_tolerance_zero() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_gauge(
            "svd",
            torch.zeros(2, 2, dtype=F64),
            None,
            (torch.ones(2, 2, dtype=F64),),
            Options(gauge_atol=0.0, gauge="raise"),
        )


def test_julia_records_take_the_largest_per_op_against_the_batch_tolerance() -> None:
    records = [("svd", 1e-3, 0.0), ("svd", 2e-3, 0.0), ("eigh", 1e-20, 0.0)]
    scale = (torch.ones(2, 2, dtype=F64),)
    with pytest.warns(ps.GaugeWarning) as record:
        apply_gauge_records(records, scale, Options())
    # one warning per op over the tolerance, with its largest value
    assert [str(w.message) for w in record] == [gauge_message("svd", 2e-3, eps34(F64))]


def test_the_message_names_the_op_the_values_and_the_remedy() -> None:
    text = gauge_message("eigh", 0.25, 1e-12)
    assert text.startswith("eigh: ")
    assert "measured 0.25 > gauge_atol 1e-12" in text
    assert "svd_function / matrix_function" in text


# ------------------------------------------------ unequal weights on a cluster


def test_weights_measured_only_on_cluster_pairs() -> None:
    """check_weights: the spread of g over pairs within the degeneracy
    tolerance; a spread between separated values is no concern."""
    S = torch.tensor([3.0, 2.0, 2.0, 1.0], dtype=F64)
    tol = torch.full((1, 1), 1e-9, dtype=F64)
    apart = torch.tensor([0.0, 1.0, 1.0, 5.0], dtype=F64)  # equal on the pair
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        check_weights("svd", apart, S, tol, Options())
    unequal = torch.tensor([1.0, 0.3, 0.7, 1.0], dtype=F64)
    with pytest.warns(ps.GaugeWarning, match=r"spread 0\.4 > allowed") as record:
        check_weights("svd", unequal, S, tol, Options())
    assert len(record) == 1
    with pytest.raises(ps.GaugeError, match="unequally"):
        check_weights("svd", unequal, S, tol, Options(gauge="raise"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        check_weights("svd", unequal, S, tol, Options(gauge="ignore"))


def test_weights_allow_what_a_symmetric_function_spreads_at_a_near_degenerate_pair():
    """Values within the tolerance but apart: a symmetric function's weights
    differ by about f'' times the gap (sum S**4: 12 s**2 gap), which the
    allowance admits; a spread of the weights' own size is refused."""
    gap = 1e-12
    S = torch.tensor([1.0 + gap, 1.0, 0.5], dtype=F64)
    tol = torch.full((1, 1), 2 * gap, dtype=F64)
    quartic = 4 * S**3  # d/ds sum(S**4)
    assert float(quartic[1] - quartic[2]) > eps34(F64) * float(quartic.abs().max())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        check_weights("svd", quartic, S, tol, Options())
        check_weights("eigh", torch.log(S).reciprocal(), S, tol, Options())
    with pytest.warns(ps.GaugeWarning, match="eigenvalues weights the members"):
        check_weights(
            "eigh", torch.tensor([1.0, 0.0, 0.0], dtype=F64), S, tol, Options()
        )


def test_weights_message_names_the_exact_route() -> None:
    assert "svd_function" in weights_message("svd", 1.0, 1e-12)
    assert "absorb=" in weights_message("svd", 1.0, 1e-12)
    assert "matrix_function" in weights_message("eigh", 1.0, 1e-12)
    assert "symmetric function" in weights_message("eig", 1.0, 1e-12)


def test_julia_weights_records_keep_julias_verdict() -> None:
    """A weights record carries Julia's per-pair allowance: it is reported as
    recorded (the largest spread), not against the batch tolerance."""
    records = [("svd:weights", 0.25, 1e-12), ("svd:weights", 0.5, 2e-12)]
    with pytest.warns(ps.GaugeWarning) as record:
        apply_gauge_records(records, (torch.ones(2, dtype=F64),), Options())
    assert [str(r.message) for r in record] == [weights_message("svd", 0.5, 2e-12)]
    with pytest.warns(ps.GaugeWarning, match="qr: A is rank deficient"):
        apply_gauge_records([("qr:rank", 1.0, 0.0)], (torch.ones(2, dtype=F64),),
                            Options())  # fmt: skip


# ---------------------------------------------- the allowance floor (data scale)


def test_weights_floor_is_the_documented_formula() -> None:
    """``data_floor``: ``2 FLOOR_CURVATURE (k + 1) eps max|x|`` per matrix;
    ``weights_floor``: ``eps**(3/4) FLOOR_CURVATURE max|x|``, at least that.
    A spread just below it at a cluster is quiet whatever the cotangent's
    size (here 1e-30), just above it warns."""
    S = torch.tensor([[3.0, 2.0, 2.0, 1.0], [6.0, 4.0, 4.0, 2.0]], dtype=F64)
    eps = torch.finfo(F64).eps
    top = S.amax(-1, keepdim=True)
    expected = 2 * FLOOR_CURVATURE * 5 * eps * top
    torch.testing.assert_close(data_floor(S.abs(), F64), expected, rtol=0, atol=0)
    floor = weights_floor(S.abs(), F64)
    resolution = eps**0.75 * FLOOR_CURVATURE * top
    torch.testing.assert_close(floor, torch.maximum(resolution, expected))
    tol = torch.full((2, 1, 1), 1e-9, dtype=F64)
    for scale, quiet in ((0.9, True), (1.1, False)):
        g = torch.zeros(2, 4, dtype=F64)
        g[:, 1] = scale * floor[:, 0]  # the doublet (2, 2) weighted unequally
        g[:, 0] = 1e-30
        if quiet:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                check_weights("svd", g, S, tol, Options())
        else:
            with pytest.warns(ps.GaugeWarning, match="unequally"):
                check_weights("svd", g, S, tol, Options())
    # gauge_atol sets the allowance outright: no floor under it
    with pytest.warns(ps.GaugeWarning, match="unequally"):
        check_weights("svd", g * 0.5, S, tol, Options(gauge_atol=0.0))


def fit_at_its_minimum(A0: torch.Tensor, absorb: str | None):
    """``||L R - A0||^2`` (``U diag(S) Vh`` by hand for ``absorb=None``): at
    ``A = A0`` its gradient is 0 and every cotangent rounding."""

    def loss(X):
        if absorb is None:
            U, S, Vh = ps.svd(X, full_matrices=False)
            Y = (U * S.to(U.dtype)) @ Vh
        else:
            L, R = ps.svd(X, absorb=absorb)
            Y = L @ R
        return ((Y - A0).abs() ** 2).sum()

    return loss


def kron_doublets(dtype) -> torch.Tensor:
    """``C (x) I_2``: every singular value an exact doublet (a symmetry)."""
    gen = torch.Generator().manual_seed(4)
    C = torch.randn(3, 3, dtype=dtype, generator=gen)
    return torch.kron(C, torch.eye(2, dtype=dtype))


@pytest.mark.parametrize("absorb", [None, "left", "both"])
@pytest.mark.parametrize("dtype", [F64, torch.complex128, torch.float32], ids=str)
def test_no_false_alarm_at_a_stationary_point(dtype, absorb) -> None:
    """The issue's false alarm: ``||U diag(S) Vh - A0||^2`` at ``A = A0``
    with a doublet warned "spread 4e-15 > allowed 6e-27" (the allowance
    scaled with a cotangent that is rounding at convergence). Over seeds,
    shapes, a random doublet and a symmetric one (kron), every route: quiet,
    and the gradient is rounding (exact: 0)."""
    from _spectra import matrix_with_spectrum

    cases = [kron_doublets(dtype)]
    for seed in range(6):
        for m, n in ((6, 4), (4, 6), (8, 8)):
            spectrum = [3.0, 2.0, 2.0] + [1.0 / (i + 1) for i in range(min(m, n) - 3)]
            cases.append(matrix_with_spectrum(spectrum, m, n, dtype=dtype, seed=seed))
    eps = torch.finfo(dtype.to_real()).eps
    for A0 in cases:
        X = A0.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("error", ps.GaugeWarning)
            (g,) = torch.autograd.grad(fit_at_its_minimum(A0, absorb)(X), X)
        assert float(g.abs().max()) < 100 * eps * float(A0.abs().max())


@pytest.mark.parametrize("dtype", [F64, torch.complex128], ids=str)
def test_a_basis_dependent_loss_still_warns_at_the_symmetric_doublets(dtype) -> None:
    """Next to the quiet cases: the same symmetric matrix, a fit away from
    its minimum through U diag(S) Vh by hand (the plain pullback misses the
    doublets' rotation: warned), and a loss of one column of U (basis
    dependent: warned); the split's gradient of the same fit is exact and
    quiet."""
    A = kron_doublets(dtype)
    B = torch.randn(6, 6, dtype=dtype, generator=torch.Generator().manual_seed(9))
    X = A.clone().requires_grad_()
    with pytest.warns(ps.GaugeWarning, match="unequally"):
        torch.autograd.grad(fit_at_its_minimum(B, None)(X), X)
    X = A.clone().requires_grad_()
    with pytest.warns(ps.GaugeWarning, match="basis chosen inside"):
        U = ps.svd(X, full_matrices=False)[0]
        torch.autograd.grad(((U[:, 0] * B[:, 0]).sum().abs() ** 2), X)
    X = A.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.GaugeWarning)
        (g,) = torch.autograd.grad(fit_at_its_minimum(B, "both")(X), X)
    ref = 2 * (A - B)
    assert float((g - ref).abs().max() / ref.abs().max()) < 1e-12


def test_gauge_check_with_the_spectrum_floors_and_slopes_its_allowance() -> None:
    """Given the spectrum, a cluster pair's allowance is at least the data's
    floor (data_floor times max|S|: a stationary point's rounding) and has the
    gap slope (WEIGHT_SLOPE times the relative gap times the cotangents'
    scale); without it, the old scalar tolerance; gauge_atol replaces both."""
    S = torch.tensor([3.0, 2.0 + 1e-12, 2.0], dtype=F64)
    cluster = torch.zeros(3, 3, dtype=torch.bool)
    cluster[1, 2] = cluster[2, 1] = True
    floor = float(data_floor(S.abs(), F64)) * 3.0
    tiny = (torch.full((3, 3), 1e-20, dtype=F64),)  # cotangents at rounding
    V = torch.zeros(3, 3, dtype=F64)
    V[1, 2], V[2, 1] = 0.9 * floor, -0.9 * floor
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_gauge("svd", V, cluster, tiny, Options(), spectrum=S)
    with pytest.warns(ps.GaugeWarning, match="basis chosen inside"):
        check_gauge("svd", V, cluster, tiny, Options())
    with pytest.warns(ps.GaugeWarning, match="basis chosen inside"):
        check_gauge("svd", 2 * V, cluster, tiny, Options(), spectrum=S)
    with pytest.warns(ps.GaugeWarning, match="basis chosen inside"):
        check_gauge("svd", V, cluster, tiny, Options(gauge_atol=0.0), spectrum=S)
    # the slope: 1e-12 / 4 relative gap times 16 times max|cotangent| = 1
    one = (torch.ones(3, 3, dtype=F64),)
    W = torch.zeros(3, 3, dtype=F64)
    W[1, 2] = 0.9 * WEIGHT_SLOPE * 1e-12 / 4.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_gauge("svd", W, cluster, one, Options(), spectrum=S)
    W[1, 2] = 2 * WEIGHT_SLOPE * 1e-12 / 4.0
    with pytest.warns(ps.GaugeWarning, match="basis chosen inside"):
        check_gauge("svd", W, cluster, one, Options(), spectrum=S)
