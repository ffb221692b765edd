"""The docs' figures: every ``docs/figures/fig_<name>.py`` has a
``main(out_dir)`` and a committed ``<name>.png`` small enough for the
repository (<= 150 KB). The figures are not regenerated here (minutes of
measurements): ``python docs/figures/make_figures.py`` does that.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"
MAX_BYTES = 150 * 1024
SCRIPTS = sorted(FIGURES.glob("fig_*.py"))


def load(path: Path):
    sys.path.insert(0, str(FIGURES))  # fig_*.py import _machine
    try:
        spec = importlib.util.spec_from_file_location(f"docs_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(FIGURES))
    return module


def test_there_are_figures():
    names = {p.stem for p in SCRIPTS}
    assert {"fig_gap", "fig_topk", "fig_bench", "fig_trg"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_figure_script_has_main_and_a_committed_image(path: Path):
    pytest.importorskip(
        "matplotlib",
        reason='the figure scripts need matplotlib (pip install -e ".[test]")',
    )
    module = load(path)
    main = getattr(module, "main", None)
    assert callable(main), f"{path.name} has no main(out_dir)"
    assert list(inspect.signature(main).parameters) == ["out_dir"]
    image = FIGURES / f"{path.stem.removeprefix('fig_')}.png"
    assert image.is_file(), f"no committed {image.name}: run make_figures.py"
    data = image.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{image.name} is not a PNG"
    assert len(data) <= MAX_BYTES, f"{image.name}: {len(data)} bytes > 150 KB"


def test_make_figures_finds_every_script():
    pytest.importorskip(
        "matplotlib", reason="make_figures.py runs the scripts, which need matplotlib"
    )
    make = load(FIGURES / "make_figures.py")
    assert make.scripts() == SCRIPTS
    with pytest.raises(SystemExit):  # an unknown figure name is an error
        make.main(["no_such_figure"])


def test_benchmark_figure_data_names_its_machine():
    data = json.loads((FIGURES / "data" / "bench_cpu.json").read_text())
    assert data["machine"] and data["date"]
    for op in ("svd", "eigh"):
        assert len(data[op]) >= 4
        for _size, t_torch, t_ps, ratio in data[op]:
            assert t_torch > 0 and t_ps > 0 and ratio > 0


def test_trg_figure_small(tmp_path):
    """fig_trg's measurement and drawing at a tiny size (chi = 6, 6 steps,
    two temperatures and T_c): autograd's u and c agree with the finite
    differences, torch.linalg's u is NaN (drawn as a cross), the truncation
    error is reported, and the PNG is small."""
    pytest.importorskip("matplotlib", reason="the figure scripts need matplotlib")
    fig = load(FIGURES / "fig_trg.py")
    data = fig.measure((2.0, 3.0), chi=6, steps=6)
    assert len(data["T"]) == 3  # T_c added
    for u, u_fd, c, c_fd in zip(data["u"], data["u_fd"], data["c"], data["c_fd"]):
        assert abs(u - u_fd) < 1e-5 * abs(u_fd)
        assert abs(c - c_fd) < 1e-3 * abs(c_fd)
    assert all(math.isnan(v) for v in data["u_torch"])
    assert all(0 < e < 1 for e in data["trunc"])
    png = fig.draw(data, tmp_path)
    assert png.name == "trg.png" and png.stat().st_size <= MAX_BYTES
