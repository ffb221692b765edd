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
    apply_gauge_records,
    check_gauge,
    check_weights,
    gauge_message,
    policy_applied,
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
