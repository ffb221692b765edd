"""Per-call forward+backward time at tensor-network sizes: pyspectral against
torch.linalg in one run (native backend, float64, one torch thread).

    python benchmarks/bench_small.py [--sizes 8x4,16x8,16x16,32x32]
        [--repeat 21] [--threads 1] [--quimb] [--quick]

Tensor-network codes make thousands of calls on 8x4 ... 64x64 tensors, where
the per-call cost (Python dispatch, aten ops, host synchronisations) is the
time, not LAPACK. Rows: ``svd``, ``eigh``, ``qr``, ``lq``, ``eig`` against
``torch.linalg``'s (losses with cotangents on every factor, invariant under
the gauge torch's backward requires: the polar factor and ``S`` for the SVD,
a projector and the values for ``eigh``, ``|V|^2`` and ``Re(lambda)^2`` for
``eig``); ``split`` (``ps.svd(A, absorb="left")``) against ``ps.svd`` plus the
matmul a user would write (``U * S``, ``Vh``). ``--quimb`` adds a quimb
``TNOptimizer``-style evaluation (energy and gradient of a Heisenberg MPS, L
= 10, D = 8, through ``canonicalize`` and ``compress``) with torch.linalg,
with pyspectral's functions registered through autoray (docs/guide/
in-your-library.md), and with pyspectral's split as the truncated-SVD route.
A ratio is the median over rounds of the per-round ratio (benchmarks/
_timing.py), each round interleaving the implementations.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import pyspectral as ps  # noqa: E402

SIZES = "8x4,16x8,16x16,32x32"
QUICK = "8x4,32x32"


def shape_of(text: str) -> tuple[int, int]:
    m, _, n = text.partition("x")
    return int(m), int(n or m)


def step(fn: Callable[[torch.Tensor], torch.Tensor], A0: torch.Tensor):
    def run() -> None:
        A = A0.detach().requires_grad_(True)
        fn(A).backward()

    return run


def svd_loss(svd):
    def loss(A):
        U, S, Vh = svd(A, full_matrices=False)
        return (U @ Vh).sum() + S.sum()

    return loss


def eigh_loss(eigh):
    def loss(A):
        w, V = eigh(A)
        P = V[..., :, -2:] @ V[..., :, -2:].mH
        return P.sum() + w.pow(2).sum()

    return loss


def qr_loss(qr):
    def loss(A):
        Q, R = qr(A)
        return Q.sum() + R.sum()

    return loss


def torch_lq(A):
    Q, R = torch.linalg.qr(A.mH)
    return R.mH, Q.mH


def eig_loss(eig):
    def loss(A):
        L, V = eig(A)
        return (V.abs() ** 2).sum() + L.real.pow(2).sum()

    return loss


def split_loss(A):
    L, R = ps.svd(A, absorb="left")
    return (L @ R).sum() + L.sum() + R.sum()


def by_hand_loss(A):
    U, S, Vh = ps.svd(A, full_matrices=False)
    L, R = U * S, Vh
    return (L @ R).sum() + L.sum() + R.sum()


def cases(m: int, n: int, g: torch.Generator) -> dict[str, tuple]:
    A = torch.randn(m, n, generator=g, dtype=torch.float64)
    sq = torch.randn(n, n, generator=g, dtype=torch.float64)
    H = sq + sq.mT
    return {
        "svd": (A, svd_loss(torch.linalg.svd), svd_loss(ps.svd)),
        "eigh": (H, eigh_loss(torch.linalg.eigh), eigh_loss(ps.eigh)),
        "qr": (A, qr_loss(torch.linalg.qr), qr_loss(ps.qr)),
        "lq": (A.mT, qr_loss(torch_lq), qr_loss(ps.lq)),
        "eig": (sq, eig_loss(torch.linalg.eig), eig_loss(ps.eig)),
        "split vs svd + matmul": (A, by_hand_loss, split_loss),
    }


DOCS = Path(__file__).resolve().parents[1] / "docs" / "guide" / "in-your-library.md"


def recipe() -> dict:
    """The registration and the split driver as docs/guide/in-your-library.md
    writes them (its code blocks run here, so the benchmark measures what the
    docs recommend)."""
    import math

    import autoray

    text = DOCS.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    ns = {"ps": ps, "torch": torch, "autoray": autoray, "math": math}
    for needle in ("def thin_svd", "def svd_truncated"):
        exec(next(b for b in blocks if needle in b), ns)  # noqa: S102
    return ns


def quimb_rows(repeat: int, table: _timing.Table) -> None:
    """The quimb evaluation: energy and gradient through canonicalize and
    compress, with each route registered through autoray."""
    import autoray
    import quimb.tensor as qtn

    ns = recipe()  # (registers pyspectral: undone below from ns["saved"])
    saved = ns["saved"]
    L, D = 10, 8
    H = qtn.MPO_ham_heis(L)
    H.apply_to_arrays(torch.tensor)
    psi0 = qtn.MPS_rand_state(L, D, seed=7)
    psi0.apply_to_arrays(torch.tensor)
    arrays = [t.data for t in psi0]
    routes = {
        "torch": saved,
        "pyspectral": {**ns["PYSPECTRAL"], "svd_truncated": saved["svd_truncated"]},
        "pyspectral split": {**ns["PYSPECTRAL"], "svd_truncated": ns["svd_truncated"]},
    }

    def evaluate(route: dict) -> Callable[[], None]:
        def run() -> None:
            for name, fn in route.items():
                autoray.register_function("torch", name, fn)
            xs = [a.detach().requires_grad_(True) for a in arrays]
            psi = psi0.copy()
            for t, x in zip(psi, xs):
                t.modify(data=x)
            psi.canonicalize_(L // 2)
            psi.compress(max_bond=D // 2, cutoff=1e-10)
            ((psi.H @ H.apply(psi)) / (psi.H @ psi)).backward()

        return run

    fns = {name: evaluate(route) for name, route in routes.items()}
    times = _timing.interleaved(fns, repeat, what="quimb evaluation")
    for name in fns:
        if name != "torch":
            t0, t1, r = _timing.summary(times, "torch", name)
            table.row([f"quimb L={L} D={D} ({name})", f"{1e6 * t0:.0f}",
                       f"{1e6 * t1:.0f}", f"{r:.2f}"])  # fmt: skip
    for name, fn in saved.items():
        autoray.register_function("torch", name, fn)


def main(argv=None) -> None:
    p = _timing.parser(__doc__.splitlines()[0], SIZES, QUICK)
    p.add_argument("--quimb", action="store_true", help="add the quimb evaluation")
    args = p.parse_args(argv)
    if args.threads is None:
        args.threads = 1
    args = _timing.finish(args, SIZES, QUICK)
    g = torch.Generator().manual_seed(0)
    table = _timing.Table(
        f"fwd+bwd per call, float64, {torch.get_num_threads()} thread(s), median "
        f"us; torch {torch.__version__}",
        ("case", "torch.linalg (or base)", "pyspectral", "ratio"),
    )
    for size in args.sizes.split(","):
        m, n = shape_of(size)
        for op, (A, theirs, ours) in cases(m, n, g).items():
            times = _timing.interleaved(
                {"torch": step(theirs, A), "ps": step(ours, A)}, args.repeat
            )
            t0, t1, r = _timing.summary(times, "torch", "ps")
            label = "x".join(map(str, A.shape))
            table.row(
                [f"{op} {label}", f"{1e6 * t0:.0f}", f"{1e6 * t1:.0f}", f"{r:.2f}"]
            )
    if args.quimb:
        quimb_rows(args.repeat, table)


if __name__ == "__main__":
    main()
