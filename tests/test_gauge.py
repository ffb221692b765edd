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
    gauge_message,
    policy_applied,
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
