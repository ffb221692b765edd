"""Losses that depend on the basis chosen inside a degenerate cluster, one per
operation whose pullback checks the gauge (svd, eigh, and their top-k paths),
and the check that the gauge policy applies to them as natively: run on the
Julia backend through the stand-in (test_julia_bridge.py) and through real
Julia (test_julia_backend.py), and on the native backend in both."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from _spectra import hermitian_with_spectrum, matrix_with_spectrum

import pyspectral as ps
from pyspectral.exceptions import GaugeError, GaugeWarning

# Iterative top-k (method="randomized"), the cluster inside the kept block.
_TOPK = {"method": "randomized", "oversample": 4}


def _svd(X, backend, gauge):
    return ps.svd(X, backend=backend, gauge=gauge, full_matrices=False).U[:, 1].sum()


def _eigh(X, backend, gauge):
    return ps.eigh(X, backend=backend, gauge=gauge).eigenvectors[:, 1].sum()


def _svd_topk(X, backend, gauge):
    return ps.svd(X, k=3, backend=backend, gauge=gauge, **_TOPK).U[:, 1].sum()


def _eigh_topk(X, backend, gauge):
    # the 3 largest, ascending: (4, 4, 9); vector 0 is inside the cluster
    w, V = ps.eigh(X, k=3, backend=backend, gauge=gauge, **_TOPK)
    return V[:, 0].sum()


# name -> (loss(X, backend, gauge), input, the message's start)
GAUGE_CASES: dict[str, tuple[Callable, torch.Tensor, str]] = {
    "svd": (
        _svd,
        matrix_with_spectrum((3.0, 1.0, 1.0, 0.5, 0.25), 6, 5, seed=1),
        r"^svd: ",
    ),
    "eigh": (
        _eigh,
        hermitian_with_spectrum([0.5, 2.0, 2.0, 5.0, 7.0, 9.0], seed=3),  # ascending
        r"^eigh: ",
    ),
    "svd top-k": (
        _svd_topk,
        matrix_with_spectrum(
            [5.0, 2.0, 2.0] + [0.5**i for i in range(1, 22)], 30, 24, seed=4
        ),
        r"^svd: ",
    ),
    "eigh top-k": (
        _eigh_topk,
        hermitian_with_spectrum([9.0, 4.0, 4.0] + [0.5**i for i in range(27)], seed=5),
        r"^eigh: ",
    ),
}


def check_gauge_policy(case: str, backend: str) -> None:
    """The dependent loss of ``case`` warns (one GaugeWarning per call, the
    native text) under "warn", raises GaugeError under "raise", and is silent
    under "ignore" (pytest's configuration makes any GaugeWarning an error)."""
    loss, A, text = GAUGE_CASES[case]
    X = A.clone().requires_grad_(True)
    with pytest.warns(GaugeWarning, match=text) as record:
        loss(X, backend, "warn").backward()
    gauge = [w for w in record if issubclass(w.category, GaugeWarning)]
    assert len(gauge) == 1, [str(w.message) for w in record]  # once per call
    assert "Julia" not in str(gauge[0].message)
    with pytest.raises(GaugeError, match=text):
        loss(X, backend, "raise").backward()
    loss(X, backend, "ignore").backward()
