"""The gallery scripts in examples/ run, small, and show what their users would
check: gradients against finite differences, losses that decrease, agreement
with an exact answer, and what torch.linalg does on the same problem.

Each example is a script with a ``main(...)`` that takes its sizes as
keywords and returns what it measured; the docs build runs it at its default
size (sphinx-gallery), these tests at a small one. The suite makes a
``GaugeWarning`` an error, so an example that warns fails here. Each also has
a ``figure(result)`` that draws what ``main`` returned (the gallery's
picture); the tests draw it under Agg, where any warning is an error.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

import matplotlib
import pytest
import torch
from _julia import skip_without_julia
from _spectra import central4

import pyspectral as ps
from pyspectral import _backend

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def load(name: str):
    """examples/<name>.py as a module (not run as __main__)."""
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def scripts() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def check_figure(module: ModuleType, result) -> None:
    """``module.figure(result)`` draws one matplotlib Figure, silently, with
    data on a labelled, titled axes; then closes it."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. a log scale given a zero
        fig = module.figure(result)
        fig.canvas.draw()  # the warnings of layout and log scales come here
    try:
        assert isinstance(fig, Figure), type(fig)
        drawn = [a for a in fig.axes if a.lines or a.collections or a.patches]
        assert drawn, "figure() drew no data"
        for ax in drawn:
            assert ax.get_xlabel() and ax.get_ylabel(), "unlabelled axes"
        titles = [ax.get_title() for ax in fig.axes]
        suptitles = [t.get_text() for t in fig.texts]  # fig.suptitle's text
        assert any(titles) or any(suptitles), "no title"
    finally:
        plt.close(fig)


@pytest.mark.parametrize("path", scripts(), ids=lambda p: p.name)
def test_example_is_a_gallery_script_with_main_and_a_test(path: Path):
    """sphinx-gallery needs a docstring with a reST title; the tests need a
    ``main``; and each script is run by a test in this file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc, f"{path.name}: no module docstring (the gallery's title and text)"
    title, underline = doc.splitlines()[:2]
    assert underline and set(underline) == {"="} and len(underline) >= len(title)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    assert "__main__" in path.read_text(encoding="utf-8")
    assert f'load("{path.stem}")' in Path(__file__).read_text(encoding="utf-8"), (
        f"{path.name} has no test in tests/test_examples.py"
    )


@pytest.mark.parametrize("path", scripts(), ids=lambda p: p.name)
def test_example_draws_its_figure_only_when_matplotlib_is_there(path: Path):
    """Each script defines ``figure(result)`` (documented) and calls it from
    its ``__main__`` block only where matplotlib is installed: matplotlib is
    in the [test] and [docs] extras, not a dependency, so the script imports
    it inside functions, never at the top."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    figures = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "figure"
    ]
    assert figures, f"{path.name}: no figure(result)"
    assert ast.get_docstring(figures[0]), f"{path.name}: figure() has no docstring"
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", "")]
            assert not any((n or "").startswith("matplotlib") for n in names), (
                f"{path.name} imports matplotlib at the top"
            )
    assert 'importlib.util.find_spec("matplotlib")' in source
    assert "figure(result)" in source


# The examples whose main is fast at these sizes (about 1 s on a busy 2-core
# machine): run again here for the figure. The others (5 to 45 s there) draw
# it in their own test below, from the main that test runs.
FAST = {
    "covariance_pooling": dict(batch=2, c_in=4, channels=8, samples=6, dead=2, steps=5),
    "spectral_filter": dict(n=10, degree=3, steps=30, verbose=False),
}


@pytest.mark.parametrize("name", sorted(FAST))
def test_example_figure(name: str):
    module = load(name)
    check_figure(module, module.main(**FAST[name]))


def test_the_gallery_has_my_examples():
    names = {p.stem for p in scripts()}
    assert {
        "covariance_pooling",
        "mps_canonical_form",
        "mps_correlation_length",
        "mps_transfer_operator",
        "orthogonal_procrustes",
        "topk_operator",
        "julia_rule",
    } <= names


def test_covariance_pooling():
    r = load("covariance_pooling").main(
        batch=2, c_in=4, channels=8, samples=6, dead=2, steps=5
    )
    torch_, ps_ = r["torch.linalg.eigh"], r["ps.matrix_function"]
    # dead channels repeat the eigenvalue eps exactly: torch's eigh backward
    # divides by the zero gap
    assert not torch_["finite"]
    assert ps_["finite"] and ps_["error"] < 1e-6  # vs central differences
    assert math.isnan(torch_["losses"][-1])
    assert ps_["losses"][-1] < ps_["losses"][0]
    assert all(math.isfinite(v) for v in ps_["losses"])


def test_orthogonal_procrustes():
    example = load("orthogonal_procrustes")
    r = example.main(n=5, m=20, steps=150, lr=0.1)
    check_figure(example, r)
    torch_, ps_ = r["torch.linalg.svd"], r["ps.svd_function"]
    assert not torch_["finite"]  # all singular values 1 at the orthogonal init
    assert ps_["finite"] and ps_["error"] < 1e-6
    assert ps_["orth"] < 1e-12  # Q stays orthogonal
    assert ps_["last"] < ps_["first"]
    # Adam reaches the closed-form solution polar(A^T B)
    assert ps_["dist"] < 1e-3
    assert ps_["last"] == pytest.approx(r["optimum"], rel=1e-4)


def test_mps_correlation_length():
    """The AKLT values (xi = 1/ln 3, amplitude -4/9) exactly; the gradients
    through ps.eig against finite differences (xi's is 0 there, by symmetry)
    and d xi / dt against its closed form along the family; torch.linalg.eig
    gives NaN for the amplitude's gradient at the repeated eigenvalues."""
    example = load("mps_correlation_length")
    r = example.main(ts=(1.2, 1.45), verbose=False)
    check_figure(example, r)
    aklt = r["aklt"]
    assert aklt["xi"] == pytest.approx(1 / math.log(3), rel=1e-14)
    assert aklt["amplitude"] == pytest.approx(-4 / 9, rel=1e-12)
    assert aklt["pyspectral dxi"] < 1e-12 and aklt["fd dxi"] < 1e-8
    assert aklt["pyspectral damplitude"] < 1e-8
    assert math.isnan(aklt["torch.linalg.eig damplitude"])
    for row in r["family"]:
        assert row["xi"] == pytest.approx(row["xi_exact"], rel=1e-13)
        assert row["dxi"] == pytest.approx(row["dxi_exact"], rel=1e-8)
        assert row["pyspectral"] < 1e-8
        assert math.isnan(row["torch.linalg.eig"])


def test_mps_transfer_operator():
    """xi of a random MPS through the never-formed transfer operator: its
    gradient along a direction against the central difference, and xi and
    the whole gradient against the dense ps.eig of the formed matrix."""
    example = load("mps_transfer_operator")
    r = example.main(Ds=(4, 6), dense_upto=6, verbose=False)
    check_figure(example, r)
    assert [row["D"] for row in r["rows"]] == [4, 6]
    for row in r["rows"]:
        assert row["fd_error"] < 1e-6
        assert row["xi"] == pytest.approx(row["xi_dense"], rel=1e-10)
        assert row["dense_error"] < 1e-9


def test_mps_canonical_form():
    """The gradient through the positive-gauge QR sweep against finite
    differences and against the QR-free <H>/<psi|psi> (gauge invariance);
    the canonical tensors continuous where torch.linalg.qr's sign flips a
    column; the optimised energy above, and close to, the exact one."""
    example = load("mps_canonical_form")
    r = example.main(n=6, D=4, steps=150, lr=0.1)
    check_figure(example, r)
    assert r["fd_error"] < 1e-7
    assert r["direct_error"] < 1e-12
    assert r["jumps"]["ps.qr"] < 0.05 < 1.0 < r["jumps"]["torch.linalg.qr"]
    assert r["exact"] <= r["final"] < r["exact"] + 0.05


def test_topk_operator():
    example = load("topk_operator")
    r = example.main(m=300, n=200, r=16, k=4)
    check_figure(example, r)
    assert r["ps.svd_topk(LinearOperator)"]["error"] < 1e-8
    assert r["values_error"] < 1e-12
    assert math.isfinite(r["torch.svd_lowrank(formed A)"]["error"])


def test_julia_rule():
    skip_without_julia("needs the Julia backend")
    r = load("julia_rule").main(m=5, n=3)
    assert r["rule"] == "rrule"  # the rule in examples/myrules.jl ran
    assert r["value_err"] < 1e-12 and r["grad_err"] < 1e-10
    assert r["gradcheck"]
    assert r["zygote_rule"] == "zygote" and r["zygote_err"] < 1e-10
    assert r["julia_tests"] in (None, True)


def test_julia_rule_figure():
    skip_without_julia("needs the Julia backend")
    example = load("julia_rule")
    check_figure(example, example.main(m=5, n=3))


def test_julia_rule_as_the_docs_gallery_runs_it(monkeypatch, capsys):
    """sphinx-gallery runs an example from its own folder, without
    ``__file__``: the example finds its .jl files there too (where Julia is
    usable the docs build runs it for real)."""
    skip_without_julia("needs the Julia backend")
    source = (EXAMPLES / "julia_rule.py").read_text(encoding="utf-8")
    monkeypatch.chdir(EXAMPLES)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)  # as the gallery
    exec(compile(source, "julia_rule.py", "exec"), {"__name__": "__main__"})
    plt.close("all")
    out = capsys.readouterr().out
    assert "via Julia rule 'rrule'" in out and "logdet_reg rrule" in out, out


def test_julia_rule_without_julia_says_why(capsys):
    usable, _ = _backend.backend_status()["julia"]
    if usable:
        pytest.skip("Julia is usable here: test_julia_rule runs the example")
    assert load("julia_rule").main() is None
    assert "skipped: the Julia backend is not usable here" in capsys.readouterr().out


def test_spectral_filter():
    """A polynomial filter V g_theta(Lambda) V^T on a ring (every non-zero
    eigenvalue double) learns to denoise; its gradients, in theta and in the
    edge weights, agree with central differences; torch.linalg.eigh gets the
    theta-gradient right but not the edge weights' at the ring's repeated
    eigenvalues, and both are right once chords separate them."""
    out = load("spectral_filter").main(n=10, degree=3, steps=30, verbose=False)
    assert out["loss_end"] < 0.7 * out["loss_start"]
    assert out["smallest_gap"] < 1e-12  # the ring's pairs: the hard case
    assert out["pyspectral_theta_error"] < 1e-8
    assert out["pyspectral_edge_error"] < 1e-8
    assert out["pyspectral_edge_gradient_finite"]
    assert out["pyspectral_chords_edge_error"] < 1e-8
    assert out["torch_theta_error"] < 1e-8  # nothing differentiated through eigh
    assert out["chords_smallest_gap"] > 1e-2
    assert out["torch_chords_edge_error"] < 1e-8
    # (torch's edge gradient on the ring itself is reported, not asserted: NaN
    # in torch 2.13, its value depends on rounding)


def test_spectral_filter_runs_as_a_script():
    # Agg: the script's plt.show() returns at once (a GUI backend would wait)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    run = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "spectral_filter.py"),
            "--n",
            "8",
            "--steps",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "denoising loss" in run.stdout and "pyspectral" in run.stdout


@pytest.fixture(scope="module")
def trg() -> ModuleType:
    return load("trg_ising")


def test_trg_split_keeps_at_most_chi_and_reports_the_error(trg):
    """The split keeps at most chi singular values, drops the exact zeros
    (the Ising tensor is 4 x 4 of rank 2) and reports the relative truncation
    error ``||M - F1 F3||_F / ||M||_F``."""
    T = trg.ising_tensor(torch.tensor(0.4, dtype=torch.float64))
    errors: list[float] = []
    F1, F3 = trg.split(T.reshape(4, 4), chi=3, errors=errors)
    assert F1.shape == (4, 2) and F3.shape == (2, 4)  # the two zeros dropped
    assert torch.allclose(F1 @ F3, T.reshape(4, 4), atol=1e-14)
    assert errors[0] < 1e-15
    M = torch.randn(
        16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    F1, F3 = trg.split(M, chi=5, errors=errors)
    assert F1.shape == (16, 5)
    rel = torch.linalg.matrix_norm(M - F1 @ F3) / torch.linalg.matrix_norm(M)
    assert abs(errors[1] - rel.item()) < 1e-12 * rel.item()


@pytest.mark.parametrize("multiplets", ["cut", "down", "up"])
@pytest.mark.parametrize("chi", [1, 2, 3, 4, 5])
def test_trg_rank_is_ps_svds_rule(trg, chi, multiplets):
    """The torch.linalg comparison cuts where ps.svd does: the example's
    ``rank`` against ``ps.svd(..., return_error=True).rank`` on a spectrum
    with a doublet (2, 2) and two zeros."""
    S = torch.tensor([3.0, 2.0, 2.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    Q, _ = torch.linalg.qr(
        torch.randn(6, 6, dtype=S.dtype, generator=torch.Generator().manual_seed(1))
    )
    M = (Q * S) @ Q.mT
    got = ps.svd(M, k=chi, rtol=trg.ZERO_RTOL, multiplets=multiplets, return_error=True)
    assert trg.rank(torch.linalg.svdvals(M), chi, multiplets) == int(got.rank)


def test_trg_torch_linalg_run_is_the_same_truncation(trg):
    """The torch.linalg run has the same forward (the same values kept)."""
    with torch.no_grad():
        K = torch.tensor(0.4, dtype=torch.float64)
        f_ps = trg.lnz(K, 6, 6)
        f_torch = trg.lnz(K, 6, 6, trg.torch_svd)
    assert abs(f_ps.item() - f_torch.item()) < 1e-12


@pytest.mark.parametrize("K", [0.3, 0.6])
def test_trg_multiplet_rules_agree_on_this_run(trg, K):
    """No multiplet straddles the cut at chi in this run (measured: at chi =
    3 ... 16, 5 couplings): ``"cut"``, ``"down"`` and ``"up"`` keep the same
    values; ``"down"`` is the guard for the runs where one would."""
    K = torch.tensor(K, dtype=torch.float64)
    with torch.no_grad():
        f = [trg.lnz(K, 6, 8, None, m).item() for m in ("cut", "down", "up")]
    assert f[0] == f[1] == f[2]


@pytest.mark.parametrize("K", [0.3, 0.6])
def test_trg_derivatives_match_finite_differences(trg, K):
    """u and c by autograd (forward over reverse) against central differences
    of ln Z / N, at chi = 6, 8 steps (2**8 sites)."""
    _, u, c = trg.observables(K, chi=6, steps=8)
    u_fd, c_fd = trg.finite_differences(K, chi=6, steps=8)
    assert abs(u - u_fd) < 1e-6 * abs(u_fd)
    assert abs(c - c_fd) < 1e-5 * abs(c_fd)


@pytest.mark.parametrize("K", [0.3, 0.6])
def test_trg_double_backward_is_exact_and_silent(trg, K):
    """Double backward (create_graph) through the first SVDs, whose exact zeros
    the split discards: exact (the same number as forward over reverse) and
    silent. Before, every such call warned (the coupling to the discarded
    zeros, 0.05 .. 1.2 against 1e-12)."""
    k = torch.tensor(K, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(trg.lnz(k, 8, 6), k, create_graph=True)
    (h,) = torch.autograd.grad(g, k)
    _, u, c = trg.observables(K, chi=8, steps=6)
    assert abs(-g.item() - u) < 1e-12 * abs(u)
    assert abs(K**2 * h.item() - c) < 1e-10 * abs(c)


@pytest.mark.parametrize("K", [0.3, 0.6])
def test_trg_energy_matches_onsager_away_from_the_critical_point(trg, K):
    """At chi = 8, 10 steps (2**10 sites): u within 3e-4 of Onsager's (the
    bond truncation's error: 1.2e-4 at K = 0.3, 7e-6 at K = 0.6), ln Z / N
    within 1e-3 (at K = 0.6 the ordered phase's two ground states add
    ln 2 / N = 7e-4 on 2**10 sites)."""
    k = torch.tensor(K, dtype=torch.float64, requires_grad=True)
    f = trg.lnz(k, 8, 10)
    (g,) = torch.autograd.grad(f, k)
    assert abs(-g.item() - trg.onsager_energy(K)) < 3e-4
    assert abs(f.item() - trg.onsager_lnz(K)) < 1e-3


def test_torch_linalg_svd_gives_nan(trg):
    """The same run through torch.linalg.svd: from the fifth step at chi = 6
    (36 x 36 matrices with repeated exact zeros) its backward divides 0 by
    their zero gaps."""
    assert math.isnan(trg.torch_energy(0.4, chi=6, steps=5))
    assert math.isfinite(trg.observables(0.4, chi=6, steps=5)[1])


def test_onsager(trg):
    """The energy's closed form is minus the derivative of the integral form;
    at K_c, ln Z / N = 2 G / pi + ln(2) / 2 (G: Catalan's constant) and
    u = -sqrt(2)."""
    for K in (0.2, 0.35, 0.6, 0.9):
        du = central4(lambda t, K=K: trg.onsager_lnz(K + t), 1e-3)
        assert abs(-du - trg.onsager_energy(K)) < 1e-9
    catalan = 0.915965594177219015054603514932
    exact = 2 * catalan / math.pi + math.log(2) / 2
    assert abs(trg.onsager_lnz(trg.K_CRITICAL, nodes=20000) - exact) < 1e-9
    assert trg.onsager_energy(trg.K_CRITICAL) == pytest.approx(-math.sqrt(2))
    # the AGM of _elliptic_k ends at moduli where a and b end up alternating
    # between two neighbouring floats (it looped forever here before)
    # (nearer K_c: a smaller step for the fourth-order stencil)
    for K in (1 / 2.5 - 1e-5, 1 / 2.5 + 1e-5):
        du = central4(lambda t, K=K: trg.onsager_lnz(K + t), 2e-4)
        assert abs(-du - trg.onsager_energy(K)) < 1e-9


def test_trg_main_runs(trg, capsys):
    """The script's table, small: one row per coupling, every number finite
    but torch.linalg's energy (NaN), and the largest truncation error."""
    rows = trg.main(couplings=(0.3, 0.5), chi=6, steps=5)
    check_figure(trg, rows)
    assert [r["K"] for r in rows] == [0.3, 0.5]
    for r in rows:
        assert math.isnan(r.pop("u_torch"))
        assert all(math.isfinite(v) for v in r.values())
        assert 0 < r["truncation_error"] < 0.1
    out = capsys.readouterr().out
    assert "TRG of the 2D Ising model" in out and "max trunc. err" in out


def test_near_degenerate_figure(tmp_path):
    """docs/figures/fig_near_degenerate.py draws its picture (small) and its
    curves stay below the bound of tests/test_near_degenerate.py."""
    pytest.importorskip("matplotlib", reason="the figure scripts need matplotlib")
    spec = importlib.util.spec_from_file_location(
        "fig_near_degenerate",
        EXAMPLES.parent / "docs" / "figures" / "fig_near_degenerate.py",
    )
    fig = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fig)
    curves = fig.main(tmp_path)
    png = tmp_path / "near_degenerate.png"
    assert png.exists() and png.stat().st_size <= 150_000
    assert max(max(v) for v in curves["after"].values()) < 1e-8


def test_potts_multiplets():
    """The fit through the triplets is off at the kept doublet and the
    all-equal spectrum, the split and svd_function are exact; the Potts TRG
    keeps doublets and its gradient w.r.t. every entry of the site tensor
    matches finite differences in reverse and forward mode."""
    example = load("potts_multiplets")
    out = example.main(steps=3)
    check_figure(example, out)
    for (case, way), e in out["fit"].items():
        if "triplets" in way or "by hand" in way:  # torch.linalg's: NaN or off
            assert math.isnan(e) or e > 1e-3, (case, way)
        else:
            assert e < 1e-7, (case, way)
    assert out["doublets"] >= 6
    assert out["reverse"] < 1e-7 and out["forward"] < 1e-7


def test_trg_main_prints_warnings_after_its_table(trg, capsys, monkeypatch):
    """A GaugeWarning met while computing a row goes after the table, with
    its coupling, not into the middle of it (and not to stderr)."""
    real = trg.observables

    def warning_observables(K, *args):
        if K == 0.5:
            warnings.warn(
                "svd: a stand-in guard, and the rest", ps.GaugeWarning, stacklevel=2
            )
        return real(K, *args)

    monkeypatch.setattr(trg, "observables", warning_observables)
    rows = trg.main(couplings=(0.3, 0.5), chi=6, steps=5)
    assert [r["warnings"] for r in rows] == [0, 1]
    out = capsys.readouterr().out.splitlines()
    table_end = max(i for i, line in enumerate(out) if line.startswith("0.5000"))
    assert out[table_end + 1].startswith("1 GaugeWarning(s)")
    assert out[table_end + 2] == "  K = 0.5000: svd: a stand-in guard"


# ------------------------------------------------------------ CTMRG


@pytest.fixture(scope="module")
def ctmrg_run() -> tuple[ModuleType, list[dict[str, float]]]:
    """The CTMRG example's main at chi = 16 (both phases), run once."""
    module = load("ctmrg_ising")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # quiet: no warning where the number is right
        rows = module.main(couplings=(0.3, 0.6), chi=16, steps=150)
    return module, rows


def test_ctmrg_meets_onsager_and_its_checks(ctmrg_run):
    """ln Z / N against Onsager's; u = -d(ln Z / N)/dK by the implicit
    gradient against Onsager's internal energy, the central finite
    difference of the same CTMRG and autograd through the unrolled
    iteration; the implicit gradient saves a small fraction of the unrolled
    graph's tensors (one step's)."""
    _, rows = ctmrg_run
    for r in rows:
        assert abs(r["lnz"] - r["lnz_onsager"]) < 1e-12, r
        assert abs(r["u"] - r["u_onsager"]) < 1e-10, r
        assert abs(r["u_fd"] - r["u"]) < 1e-6, r
        assert abs(r["u_unrolled"] - r["u"]) < 1e-10, r
        assert r["saved_bytes"] * 20 < r["unrolled_saved_bytes"], r


def test_ctmrg_figure(ctmrg_run):
    module, rows = ctmrg_run
    check_figure(module, rows)


def test_ctmrg_gauge_fix_undoes_a_gauge():
    """The gauge fix finds Q from T' = Q T Q^T (Q orthogonal) and maps the
    rotated state back onto the reference."""
    module = load("ctmrg_ising")
    a = module.ising_tensor(torch.tensor(0.3, dtype=torch.float64))
    C, T = module.grow(a, 8)
    Q, _ = torch.linalg.qr(
        torch.randn(
            8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
        )
    )
    rotated = (Q @ C @ Q.mT, torch.einsum("ia,arb,jb->irj", Q, T, Q))
    back = module.gauge(rotated, (C, T))(rotated)
    assert torch.allclose(back[0], C, atol=1e-12)
    assert torch.allclose(back[1], T, atol=1e-12)
