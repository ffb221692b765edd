"""Shared fixtures and the ``--device`` option. The matrix generators,
gauge-stripped cotangents and finite differences are in ``_spectra.py``
(imported by name by the test modules).

pyproject.toml turns an unexpected ``GaugeWarning`` into an error; tests that
expect one say so with ``pytest.warns``.

``pytest --device cuda`` runs the suite with CUDA tensors: the default device
of torch's factory functions (``torch.randn``, ``torch.tensor``, ...) is set to
it for the whole session, before the test modules are imported, so the
tensors a test builds live there; a test that must place a tensor explicitly
takes the ``device`` fixture. What cannot run off the CPU (the Julia backend,
its stand-in and the benchmarks' Julia paths) skips with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from _fake_julia import installed

import pyspectral as ps

DEVICES = ("cpu", "cuda")

# Test modules that would test nothing of another device, and why.
_JULIA = (
    "the Julia backend runs on CPU tensors only (a tensor elsewhere is a "
    "BackendError: test_device.py)"
)
CPU_ONLY_MODULES = {
    "test_julia_backend.py": _JULIA,
    "test_julia_bridge.py": _JULIA,
    "test_julia_rules.py": _JULIA,
    "test_bench.py": "the benchmarks' command line, output and Julia stand-in; "
    "they take their own --device (test_device.py runs them on this one)",
    "test_docstrings.py": "the docstring examples are CPU code, as a reader runs "
    "them (CPU generators; printed tensors show no device)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="run the tests with tensors on this device (default cpu; cuda needs "
        "a GPU and a CUDA build of torch)",
    )


def pytest_configure(config: pytest.Config) -> None:
    device = config.getoption("--device")
    if device == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
        raise pytest.UsageError(
            f"--device cuda: CUDA is not available (torch {torch.__version__}, a "
            f"{build} build); run on a machine with an NVIDIA GPU and a CUDA "
            "build of torch, or use --device cpu"
        )
    if device != "cpu":
        # Before collection: module-level tensors are built there too.
        torch.set_default_device(device)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from _julia import USABLE, WHY  # (probes once; never starts Julia)

    device = config.getoption("--device")
    name = f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""
    julia = "usable" if USABLE else f"not usable, so its tests skip: {WHY}"
    return [f"pyspectral tests on device: {device}{name}", f"julia backend: {julia}"]


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    device = config.getoption("--device")
    if device == "cpu":
        return
    for item in items:
        why = CPU_ONLY_MODULES.get(item.path.name)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=f"--device {device}: {why}"))


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    """The device of the session's tensors (``--device``), for a test that
    must place a tensor explicitly (``torch.from_numpy(x).to(device)``)."""
    return torch.device(pytestconfig.getoption("--device"))


@pytest.fixture(autouse=True)
def _package_defaults_unchanged() -> Iterator[None]:
    """Every test leaves the package defaults as it found them (a test that
    changes them must restore them, e.g. with ``ps.defaults``)."""
    before = ps.get_defaults()
    yield
    after = ps.get_defaults()
    ps.set_defaults(**before)
    assert after == before, f"the test left the package defaults at {after}"


@pytest.fixture
def fake() -> Iterator[object]:
    """The Julia runtime replaced by its stand-in (``_fake_julia.installed``),
    which the test can inspect and steer."""
    with installed() as f:
        yield f


@pytest.fixture(params=["torch", "julia"])
def backend(request) -> Iterator[str]:
    """The backend a test runs on: native, or Julia through the stand-in
    (``_fake_julia.installed``), for tests that must behave the same on both.
    The stand-in, like Julia, takes CPU tensors only: on another device the
    Julia case skips (in ``installed``)."""
    if request.param == "julia":
        with installed():
            yield "julia"
    else:
        yield "torch"


@pytest.fixture
def triangle_gradient():
    """``gradient="triangle"`` as the default for one test: the modules that
    check eigh's, eigvalsh's and matrix_function's derivatives against finite
    differences of the entries the forward reads use it (``pytestmark``);
    torch's Hermitian convention, the default, is the Hermitian part of the
    same numbers (tests/test_gradient_convention.py)."""
    import pyspectral as ps

    with ps.defaults(gradient="triangle"):
        yield
