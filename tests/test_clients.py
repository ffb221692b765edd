"""Real clients with pyspectral plugged in as docs/guide/in-your-library.md
says: geotorch's layers under ``ps.patch_torch()``, and quimb through autoray
(pyspectral's functions registered, and pyspectral's split as quimb's
truncated-SVD driver).

Needs the ``clients`` extra (``pip install -e ".[clients]"``: quimb,
autoray, geotorch); the geotorch half and the quimb half each skip, saying
so, without their library. Gradients are checked against torch's at generic
points and against central finite differences (float64) where torch's are
NaN or wrong: geotorch at its initialisation (all singular values equal),
quimb at zero-padded bonds and at an exactly symmetric state. 15 s here (2
cores, 50 s with the machine loaded); the TNOptimizer run is a third of it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import warnings
from pathlib import Path

import pytest
import torch

import pyspectral as ps

DOCS = Path(__file__).resolve().parent.parent / "docs" / "guide" / "in-your-library.md"
F64 = torch.float64

# quimb builds its states with numpy and the checks draw from CPU generators:
# CPU code, as the docs page is.
pytestmark = pytest.mark.skipif(
    torch.empty(0).device.type != "cpu",
    reason="CPU code: quimb's numpy-built states, CPU generators",
)


def _importorskip(name: str):
    return pytest.importorskip(
        name, reason=f'{name} is not installed: pip install -e ".[clients]"'
    )


# ===================================================================== geotorch


@pytest.fixture(scope="module")
def geotorch():
    return _importorskip("geotorch")


# docs copy: polar_retraction (identical to docs/guide/in-your-library.md)
def polar_retraction(A):
    """SO(n) from a skew-symmetric A: the orthogonal polar factor of I + A."""
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    U, S, Vh = torch.linalg.svd(eye + A)
    return U @ Vh


# end docs copy


KINDS = {  # layer, the constraint, where in_features / out_features differ
    "orthogonal": ((6, 6), "orthogonal"),
    "stiefel": ((6, 4), "orthogonal"),  # a 4 x 6 weight: non-square orthogonal
    "positive_definite": ((5, 5), "positive_definite"),
}


def make_layer(geotorch, kind: str, triv="expm", seed: int = 0):
    (n_in, n_out), constraint = KINDS[kind]
    torch.manual_seed(seed)
    layer = torch.nn.Linear(n_in, n_out).double()
    getattr(geotorch, constraint)(layer, "weight", triv=triv)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, n_in, generator=gen, dtype=F64)
    y = torch.randn(32, n_out, generator=gen, dtype=F64)
    return layer, x, y


def mse(layer, x, y):
    return ((layer(x) - y) ** 2).mean()


def spectral_loss(kind: str, layer, x, y):
    """The fit plus a term through torch.linalg: the nuclear norm of the
    residual (svdvals), or the negative log-likelihood of x under a Gaussian
    with the bias as mean and the positive-definite weight as covariance,
    through its eigh."""
    if kind == "positive_definite":
        L, Q = torch.linalg.eigh(layer.weight)
        z = ((x - layer.bias) @ Q) / L.sqrt()
        return 0.5 * (z**2).sum(-1).mean() + 0.5 * L.log().sum()
    return mse(layer, x, y) + 0.1 * torch.linalg.svdvals(layer(x) - y).sum()


def original(layer):
    """geotorch's unconstrained parameter of the weight."""
    return layer.parametrizations.weight.original


def adam(layer, loss, steps: int, lr: float = 0.05) -> list[float]:
    opt = torch.optim.Adam(layer.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        value = loss()
        value.backward()
        opt.step()
        losses.append(value.item())
    return losses


def central_differences(f, P: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    """The gradient of the scalar ``f()`` in the entries of ``P`` (in place)."""
    G = torch.zeros_like(P)
    with torch.no_grad():
        for idx in itertools.product(*map(range, P.shape)):
            old = P[idx].item()
            P[idx] = old + h
            plus = f().item()
            P[idx] = old - h
            minus = f().item()
            P[idx] = old
            G[idx] = (plus - minus) / (2 * h)
    return G


def test_geotorch_default_layers_call_no_decomposition_in_the_forward(
    geotorch, monkeypatch
):
    """What the docs say of geotorch 0.4: its default layers decompose only
    where no gradient flows (creation), so a patch changes no gradient."""
    calls: dict[str, int] = {}
    for name in ps.patch.DROP_INS:
        fn = getattr(torch.linalg, name)

        def counted(*args, _fn=fn, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _fn(*args, **kwargs)

        monkeypatch.setattr(torch.linalg, name, counted)
    layers = {kind: make_layer(geotorch, kind) for kind in KINDS}
    assert calls.get("qr", 0) >= 3  # uniform_init_ of each layer's SO(n) base
    calls.clear()
    for layer, x, y in layers.values():
        torch.autograd.grad(mse(layer, x, y), list(layer.parameters()))
    assert calls == {}


@pytest.mark.parametrize("kind", list(KINDS))
def test_geotorch_layers_train_under_the_patch_with_torchs_gradients(geotorch, kind):
    """Default layers: under the patch the fit's gradient is torch's bit for
    bit, a loss through torch.linalg (svdvals, eigh) at a generic point
    torch's to rounding, and a few Adam steps train."""
    grads = {}
    for patched in (False, True):
        with ps.patch_torch() if patched else contextlib.nullcontext():
            model = layer, x, y = make_layer(geotorch, kind)
            params = list(layer.parameters())
            fit = torch.autograd.grad(mse(layer, x, y), params)
            spectral = torch.autograd.grad(spectral_loss(kind, layer, x, y), params)
            if patched:
                losses = adam(layer, lambda m=model: spectral_loss(kind, *m), 10)
        grads[patched] = fit, spectral
    (fit_t, spec_t), (fit_p, spec_p) = grads[False], grads[True]
    assert all(torch.equal(a, b) for a, b in zip(fit_t, fit_p))
    for a, b in zip(spec_t, spec_p):
        assert torch.isfinite(a).all()
        assert (a - b).abs().max() <= 1e-10 * a.abs().max()
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    assert torch.isfinite(layer.weight).all()


@pytest.mark.parametrize(
    "kind, point",
    [
        ("orthogonal", "init"),
        ("stiefel", "init"),
        ("positive_definite", "init"),
        ("positive_definite", "identity"),  # layer.weight = I: every eigenvalue 1
        ("orthogonal", "trained"),
        ("stiefel", "trained"),
    ],
)
def test_geotorch_polar_retraction_gradient_against_finite_differences(
    geotorch, kind, point
):
    """triv=polar_retraction puts torch.linalg.svd in the forward; geotorch
    starts at A = 0, where I + A has all singular values equal, and they
    stay in equal pairs: torch's gradient is NaN (or wrong), pyspectral's
    is the finite differences'."""
    with ps.patch_torch():
        layer, x, y = make_layer(geotorch, kind, triv=polar_retraction)
        if point == "identity":
            layer.weight = torch.eye(5, dtype=F64)
        if point == "trained":
            adam(layer, lambda: mse(layer, x, y), 5)
        P = original(layer)
        (g,) = torch.autograd.grad(mse(layer, x, y), P)
        fd = central_differences(lambda: mse(layer, x, y), P)
    (g_torch,) = torch.autograd.grad(mse(layer, x, y), P)
    scale = fd.abs().max()
    assert torch.isfinite(g).all()
    assert (g - fd).abs().max() <= 1e-7 * scale  # measured 5e-10 .. 4e-9 relative
    torch_error = (g_torch - fd).abs().max()  # NaN; or finite, 6e-2 relative off
    assert not torch.isfinite(g_torch).all() or torch_error > 1e-4 * scale


@pytest.mark.parametrize("kind", list(KINDS))
def test_geotorch_polar_retraction_trains_under_the_patch(geotorch, kind):
    layer, x, y = make_layer(geotorch, kind, triv=polar_retraction)

    @ps.patch_torch()
    def train(steps):
        return adam(layer, lambda: mse(layer, x, y), steps)

    losses = train(20)
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.8 * losses[0]
    W = layer.weight.detach()
    if kind == "positive_definite":
        assert torch.linalg.eigvalsh(W).min() > 0
    else:
        W = W if W.shape[0] >= W.shape[1] else W.mT
        assert torch.allclose(W.mT @ W, torch.eye(W.shape[1], dtype=F64), atol=1e-12)


# ======================================================================== quimb


@pytest.fixture(scope="module")
def qtn():
    _importorskip("autoray")
    return _importorskip("quimb.tensor")


# docs copy: registration (identical to docs/guide/in-your-library.md)
def thin_svd(A, full_matrices=False, **kwargs):
    """ps.svd with autoray's torch default, the thin SVD (quimb expects it)."""
    return ps.svd(A, full_matrices, **kwargs)


PYSPECTRAL = {
    "linalg.svd": thin_svd,
    "linalg.qr": ps.qr,
    "linalg.eigh": ps.eigh,
    "linalg.eig": ps.eig,
}
# end docs copy


# docs copy: split driver (identical to docs/guide/in-your-library.md)
# quimb's numeric codes (decomp.cutoff_mode_abs = 1, ...; decomp.get_Us_VH = -1, ...)
CUTOFF_MODES = {1: "abs", 2: "rel", 3: "sum2", 4: "rsum2", 5: "sum1", 6: "rsum1"}
ABSORB = {  # quimb's absorb code: (ps.svd's absorb, the factors returned)
    -1: ("left", "LR"),
    0: ("both", "LR"),
    1: ("right", "LR"),
    -10: ("left", "L"),
    -11: ("left", "R"),
    10: ("right", "L"),
    11: ("right", "R"),
    -12: ("both", "L"),
    12: ("both", "R"),
}


def truncation(x, cutoff, cutoff_mode, max_bond):
    """quimb's (cutoff, cutoff_mode, max_bond) as ps.svd keywords."""
    kw = {} if max_bond is None or max_bond <= 0 else {"k": int(max_bond)}
    if cutoff is None or cutoff <= 0.0:
        return kw
    mode = CUTOFF_MODES.get(cutoff_mode, cutoff_mode)
    kw["min_rank"] = 1  # quimb keeps at least one value
    if mode == "abs":
        kw["atol"] = cutoff
    elif mode == "rel":
        kw["rtol"] = cutoff
    elif mode == "sum2":
        kw["error_atol"] = math.sqrt(cutoff)
    elif mode == "rsum2":
        kw["error_rtol"] = math.sqrt(cutoff)
    else:  # "sum1", "rsum1": no 1-norm rule in pyspectral; quimb's rank, as k
        s = ps.svdvals(x.detach())
        csum = s.cumsum(-1)
        total = csum[..., -1:]
        above = csum < (total * (1 - cutoff) if mode == "rsum1" else total - cutoff)
        rank = int(above.sum(-1).max()) + 1
        kw = {"k": min(rank, kw.get("k", rank))}
    return kw


def svd_truncated(
    x, cutoff=-1.0, cutoff_mode=4, max_bond=-1, absorb=0, renorm=0, info=None
):
    """quimb's svd split driver (decomp.svd_truncated's signature) on ps.svd's split."""
    mode = CUTOFF_MODES.get(cutoff_mode, cutoff_mode)
    if renorm and mode in ("sum1", "rsum1"):
        raise NotImplementedError("renorm with a 1-norm cutoff_mode")
    absorb = {"left": -1, "both": 0, "right": 1}.get(absorb, absorb)
    kw = truncation(x, cutoff, cutoff_mode, max_bond)
    kw["return_error"] = bool(renorm) or info is not None
    if absorb in (None, 2):  # the values separately
        res = ps.svd(x, False, **kw)
        left, s, right = res[:3]
        if renorm:
            s = s * (1 - res.rel_error**2).rsqrt()
        out = (left, s, right) if absorb is None else (None, s, None)
    else:
        how, factors = ABSORB[absorb]
        res = ps.svd(x, False, absorb=how, **kw)
        left, right = res[:2]
        if renorm:  # the kept values rescaled to the norm of all
            scale = (1 - res.rel_error**2).rsqrt()
            if how == "left":
                left = left * scale
            elif how == "right":
                right = right * scale
            else:
                left, right = left * scale.sqrt(), right * scale.sqrt()
        out = (
            left if "L" in factors else None,
            None,
            right if "R" in factors else None,
        )
    if info is not None:
        info["error"] = res.error
    return out


# end docs copy


def test_the_recipe_here_is_the_docs():
    """The registration, driver and triv above are the docs page's, verbatim."""
    docs = DOCS.read_text(encoding="utf-8")
    source = Path(__file__).read_text(encoding="utf-8")
    copies = re.findall(r"# docs copy: .*?\n(.*?)# end docs copy", source, flags=re.S)
    assert len(copies) == 3
    for copy in copies:
        assert copy.strip() in docs, copy[:200]


def torch_thin_svd(A, full_matrices=False, **kwargs):
    return torch.linalg.svd(A, full_matrices, **kwargs)


@contextlib.contextmanager
def route(which: str):
    """autoray's torch functions for quimb: ``"torch"`` (torch.linalg's and
    quimb's own driver), ``"pyspectral"`` (the docs' registration) or
    ``"split"`` (that and the docs' driver); restored afterwards."""
    import autoray
    from quimb.tensor import decomp

    assert torch.linalg.svd is torch._C._linalg.linalg_svd  # not patched
    names = [*PYSPECTRAL, "svd_truncated"]
    saved = {name: autoray.get_lib_fn("torch", name) for name in names}
    chosen = {
        "linalg.svd": torch_thin_svd,
        "linalg.qr": torch.linalg.qr,
        "linalg.eigh": torch.linalg.eigh,
        "linalg.eig": torch.linalg.eig,
        # quimb's generic driver, what autoray builds for torch
        "svd_truncated": decomp.svd_truncated._default_fn,
    }
    if which in ("pyspectral", "split"):
        chosen.update(PYSPECTRAL)
    if which == "split":
        chosen["svd_truncated"] = svd_truncated
    try:
        for name, fn in chosen.items():
            autoray.register_function("torch", name, fn)
        yield
    finally:
        for name, fn in saved.items():
            autoray.register_function("torch", name, fn)


L = 6


@pytest.fixture(scope="module")
def heisenberg(qtn):
    H = qtn.MPO_ham_heis(L)
    H.apply_to_arrays(torch.tensor)
    return H


@pytest.fixture(scope="module")
def fields(qtn):
    """Random fields on Z and X: a Hamiltonian without SU(2) symmetry."""
    import numpy as np

    rng = np.random.default_rng(0)
    builder = qtn.SpinHam1D(S=1 / 2)
    for i in range(L):
        builder[i] += rng.normal(), "Z"
        builder[i] += rng.normal(), "X"
    H = builder.build_mpo(L)
    H.apply_to_arrays(torch.tensor)
    return H


@pytest.fixture(scope="module")
def random_mps(qtn):
    psi = qtn.MPS_rand_state(L, 4, seed=3)
    psi.apply_to_arrays(torch.tensor)
    return psi


@pytest.fixture(scope="module")
def padded_mps(random_mps):
    psi = random_mps.copy()
    psi.expand_bond_dimension(8, inplace=True)  # bonds zero-padded from 4 to 8
    return psi


@pytest.fixture(scope="module")
def ground_state(qtn):
    """The Heisenberg chain's ground state, an SU(2) singlet: its Schmidt
    values come in exact multiplets."""
    import numpy as np

    p0 = qtn.MPS_rand_state(L, 8, seed=0)  # a fixed start: a reproducible gauge
    dmrg = qtn.DMRG2(qtn.MPO_ham_heis(L), bond_dims=[8, 16], cutoffs=1e-14, p0=p0)
    dmrg.solve(tol=1e-12, verbosity=0)
    psi = dmrg.state.copy()
    psi.apply_to_arrays(lambda a: torch.tensor(np.asarray(a)))
    middle = psi.singular_values(L // 2)
    assert abs(middle[0] - middle[1]) < 1e-8  # a multiplet kept
    return psi


def energy(arrays, psi0, H, **compress_opts):
    """<psi|H|psi> / <psi|psi> of psi0 with its arrays replaced, canonicalised
    and compressed (quimb's defaults: cutoff=1e-10, cutoff_mode="rsum2")."""
    psi = psi0.copy()
    for tensor, data in zip(psi, arrays):
        tensor.modify(data=data)
    psi.canonicalize_(L // 2)
    psi.compress(**compress_opts)
    return (psi.H @ H.apply(psi)) / (psi.H @ psi)


def gradient(psi0, H, **compress_opts):
    arrays = [t.data.clone().requires_grad_() for t in psi0]
    return torch.autograd.grad(energy(arrays, psi0, H, **compress_opts), arrays)


def direction(psi0):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(t.data.shape, generator=gen, dtype=F64) for t in psi0]


def along(grads, d) -> float:
    return sum((g * v).sum() for g, v in zip(grads, d)).item()


def fd4(psi0, H, d, h, **compress_opts) -> float:
    """Fourth-order central differences of the energy along ``d``."""
    base = [t.data for t in psi0]

    def e(t):
        with torch.no_grad():
            moved = [a + t * v for a, v in zip(base, d)]
            return energy(moved, psi0, H, **compress_opts)

    return ((-e(2 * h) + 8 * e(h) - 8 * e(-h) + e(-2 * h)) / (12 * h)).item()


@pytest.mark.parametrize(
    "opts",
    [dict(max_bond=4), dict(max_bond=3), dict()],
    ids=["no-truncation", "max_bond=3", "default-cutoff"],
)
def test_quimb_generic_mps_gradient_is_torchs(qtn, heisenberg, random_mps, opts):
    with route("torch"):
        ref = gradient(random_mps, heisenberg, **opts)
    scale = max(g.abs().max() for g in ref)
    for which in ("pyspectral", "split"):
        with route(which):
            grads = gradient(random_mps, heisenberg, **opts)
        err = max((g - r).abs().max() for g, r in zip(grads, ref))
        assert err <= 1e-10 * scale, (which, float(err))  # measured 5e-16 .. 2e-15


@pytest.mark.parametrize(
    "opts",
    [dict(), dict(max_bond=4, cutoff=0.0)],
    ids=["default-cutoff", "max_bond=4"],
)
def test_quimb_zero_padded_bonds(qtn, heisenberg, padded_mps, opts):
    """compress drops the padded zeros; torch's SVD backward divides by
    their zero gaps: NaN. pyspectral's: the finite differences'."""
    with route("torch"):
        assert any(g.isnan().any() for g in gradient(padded_mps, heisenberg, **opts))
    d = direction(padded_mps)
    for which in ("pyspectral", "split"):
        with route(which):
            ad = along(gradient(padded_mps, heisenberg, **opts), d)
            fd = fd4(padded_mps, heisenberg, d, 1e-4, **opts)
        assert abs(ad - fd) <= 1e-9 * abs(fd), (which, ad, fd)  # measured 1.2e-12


def test_quimb_zero_padded_bonds_kept(qtn, heisenberg, padded_mps):
    """max_bond=8 without a cutoff keeps the padded zeros (compress then
    changes nothing): the split is exact, and silent."""
    opts = dict(max_bond=8, cutoff=0.0)
    d = direction(padded_mps)
    with route("split"):
        ad = along(gradient(padded_mps, heisenberg, **opts), d)
        fd = fd4(padded_mps, heisenberg, d, 1e-4, **opts)
    assert abs(ad - fd) <= 1e-9 * abs(fd), (ad, fd)


def test_quimb_symmetric_state(qtn, heisenberg, ground_state):
    """At the ground state the energy is stationary: the true gradient is 0.
    compress (quimb's default cutoff) runs SVDs with exact multiplets:
    torch's gradient is wrong, pyspectral's is 0 to rounding, as the
    finite differences (fourth order, h = 1e-3) are to their own error."""
    d = direction(ground_state)
    with route("torch"):
        ad_torch = along(gradient(ground_state, heisenberg), d)
    with route("pyspectral"):
        fd = fd4(ground_state, heisenberg, d, 1e-3)
        fd_small = fd4(ground_state, heisenberg, d, 1e-4)
    # the finite differences' own error, O(h^4): measured 1.1e-7 and 1.6e-11
    assert abs(fd) < 1e-6 and abs(fd_small) < 1e-9
    assert abs(ad_torch) > 1e-4  # measured 4.0e-2
    for which in ("pyspectral", "split"):
        with route(which):
            ad = along(gradient(ground_state, heisenberg), d)
        assert abs(ad) < 1e-10, which  # measured 1.3e-12
        assert abs(ad - fd) < 1e-6 and abs(ad - fd_small) < 1e-9, which


@pytest.mark.parametrize(
    "opts",
    [dict(), dict(max_bond=4), dict(form="flat")],
    ids=["default-cutoff", "max_bond=4", "absorb-both"],
)
def test_quimb_split_driver_at_the_symmetric_state(qtn, fields, ground_state, opts):
    """A symmetry-breaking energy at the symmetric state, through compress
    (max_bond=4 truncates the middle bond at a multiplet boundary; form
    "flat" absorbs sqrt(s) both ways): the split is exact; quimb's driver
    on pyspectral's triplets warns and is wrong; torch's is wrong (or NaN)."""
    d = direction(ground_state)
    with route("split"):
        ad = along(gradient(ground_state, fields, **opts), d)
        fd = fd4(ground_state, fields, d, 1e-4, **opts)
    assert abs(ad - fd) <= 1e-8 * abs(fd), (ad, fd)  # measured 3e-13 .. 6e-10
    with route("pyspectral"), pytest.warns(ps.GaugeWarning):
        ad_triplets = along(gradient(ground_state, fields, **opts), d)
    assert abs(ad_triplets - fd) > 1e-3 * abs(fd)  # measured 2.6 % .. 67 % off
    with route("torch"):
        ad_torch = along(gradient(ground_state, fields, **opts), d)
    # measured 6.6e-4, 7.6e-4 relative, NaN
    assert not math.isfinite(ad_torch) or abs(ad_torch - fd) > 1e-4 * abs(fd)


def test_quimb_tn_optimizer_decreases_the_energy(qtn, heisenberg):
    psi = qtn.MPS_rand_state(L, 4, seed=7)

    def norm_fn(psi):
        return psi / (psi.H @ psi) ** 0.5

    def loss_fn(psi, H):
        psi = psi.copy()
        psi.compress(max_bond=4)
        return (psi.H @ H.apply(psi)) / (psi.H @ psi)

    with route("split"):
        opt = qtn.TNOptimizer(
            psi,
            loss_fn=loss_fn,
            norm_fn=norm_fn,
            loss_constants={"H": heisenberg},
            autodiff_backend="torch",
            optimizer="L-BFGS-B",
            progbar=False,
        )
        with warnings.catch_warnings():
            # torch.as_tensor of quimb's read-only numpy arrays
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            opt.optimize(20)
    losses = [float(v) for v in opt.losses]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0] - 1.0
    assert losses[-1] < -2.45  # the ground state: -2.4936; bond 4 and 20 steps


def test_quimb_driver_keeps_quimbs_values(qtn):
    """Every cutoff mode, max_bond, absorb code and renorm: the docs'
    driver keeps quimb's rank, product, values and error."""
    from quimb.tensor import decomp

    quimb_own = decomp.svd_truncated._default_fn
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for _ in range(8):
        Q1 = torch.linalg.qr(torch.randn(9, 9, generator=gen, dtype=F64)).Q
        Q2 = torch.linalg.qr(torch.randn(7, 7, generator=gen, dtype=F64)).Q
        s = torch.rand(7, generator=gen, dtype=F64).sort(descending=True).values ** 4
        x = (Q1[:, :7] * s) @ Q2.mT
        modes = [(1, 0.05), (2, 0.1), (3, 1e-3), (4, 1e-3), (5, 0.05), (6, 0.05)]
        for (mode, cutoff), max_bond, absorb in itertools.product(
            modes, (-1, 3), (-1, 0, 1, None, 10, -11)
        ):
            for renorm in (0, 2) if mode in (3, 4) else (0,):
                args = (x, cutoff, mode, max_bond, absorb, renorm)
                with route("torch"):
                    info_a: dict = {}
                    a = quimb_own(*args, info=info_a)
                info_b: dict = {}
                b = svd_truncated(*args, info=info_b)
                error_a, error_b = float(info_a["error"]), float(info_b["error"])
                assert error_a == pytest.approx(error_b, abs=1e-12)
                for fa, fb in zip(a, b):
                    assert (fa is None) == (fb is None)
                if absorb is None:
                    assert torch.allclose(a[1], b[1])
                    a, b = (a[0] * a[1], a[2]), (b[0] * b[1], b[2])
                else:
                    a, b = (a[0], a[2]), (b[0], b[2])
                if a[0] is not None and a[1] is not None:
                    assert a[0].shape == b[0].shape
                    assert torch.allclose(a[0] @ a[1], b[0] @ b[1])
                else:  # an isometric factor alone: the same projector
                    fa = a[0] if a[0] is not None else a[1].mT
                    fb = b[0] if b[0] is not None else b[1].mT
                    assert fa.shape == fb.shape
                    assert torch.allclose(fa @ fa.mT, fb @ fb.mT)
                checked += 1
    assert checked == 8 * (4 * 2 * 6 + 2 * 2 * 6 * 2)


def test_autoray_caches_what_patch_torch_installs(qtn):
    """Why the docs register with autoray rather than patch: autoray looks a
    function up once; a first lookup inside the scope keeps pyspectral's."""
    import autoray

    # drop autoray's cached torch.linalg.eigvals (a no-op wrapper: a fresh lookup)
    autoray.register_function("torch", "linalg.eigvals", wrapper=lambda fn: fn)
    try:
        with ps.patch_torch("eigvals"):
            assert autoray.get_lib_fn("torch", "linalg.eigvals") is ps.eigvals
        assert torch.linalg.eigvals is not ps.eigvals
        assert autoray.get_lib_fn("torch", "linalg.eigvals") is ps.eigvals  # kept
    finally:
        autoray.register_function("torch", "linalg.eigvals", wrapper=lambda fn: fn)
    assert autoray.get_lib_fn("torch", "linalg.eigvals") is torch.linalg.eigvals
