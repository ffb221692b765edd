"""
Top-k of a matrix that is never formed
======================================

``A = B C + E``: a low-rank product of two factors you train, ``B`` (m x r)
and ``C`` (r x n), plus a fixed sparse matrix ``E``. At scale ``A`` is too
big to form (``m = 10**6, n = 10**5`` is 800 GB in float64), but ``A X`` and
``A^H Y`` are cheap. ``ps.svd_topk`` takes the products as a
``ps.LinearOperator`` and returns the top-k triplets with the exact top-k
gradient, which flows through the products into ``B`` and ``C``.

``torch.svd_lowrank`` needs the matrix itself (a dense or sparse tensor), so
on the same problem it is run on the formed ``A`` (at a size where that is
possible), with autograd through its range finder. Both gradients are
compared with the exact one: ``ps.svd(A, k=k, method="full")`` on the formed
matrix. The loss, ``sum(S) + ||U^T u0||^2``, sees ``U`` only through the
top-k projector, so it is smooth where ``s_k > s_(k+1)``.

The figure shows the leading singular values of the formed ``A`` and the
top-k that ``ps.svd_topk`` found from the products alone.
"""

from __future__ import annotations

import importlib.util
import time

import torch

import pyspectral as ps

DT = torch.float64


def problem(m: int, n: int, r: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    decay = 0.93 ** torch.arange(r, dtype=DT)  # slowly decaying: s_(k+1)/s_k ~ 0.93
    B = (torch.randn(m, r, generator=g, dtype=DT) * decay).requires_grad_()
    C = torch.randn(r, n, generator=g, dtype=DT).requires_grad_()
    nnz = 5 * max(m, n)
    idx = torch.stack(
        [torch.randint(m, (nnz,), generator=g), torch.randint(n, (nnz,), generator=g)]
    )
    values = 1e-3 * torch.randn(nnz, generator=g, dtype=DT)
    E = torch.sparse_coo_tensor(idx, values, (m, n), check_invariants=True).coalesce()
    u0 = torch.randn(m, 1, generator=g, dtype=DT)
    return B, C, E, u0


def operator(B, C, E) -> ps.LinearOperator:
    Et = E.t().coalesce()
    return ps.LinearOperator(
        (B.shape[0], C.shape[1]),
        lambda X: B @ (C @ X) + E @ X,  # A X,   X: (n, p)
        lambda Y: C.mT @ (B.mT @ Y) + Et @ Y,  # A^T Y, Y: (m, p)
        dtype=B.dtype,
    )


def loss(U, S, u0):
    return S.sum() + ((U.mT @ u0) ** 2).sum()


def grads(fn, B, C, u0) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Seconds for forward + backward, and the gradients into B and C."""
    B.grad = C.grad = None
    t = time.perf_counter()
    U, S, Vh = fn()
    loss(U, S, u0).backward()
    return time.perf_counter() - t, B.grad.clone(), C.grad.clone()


def main(m: int = 1500, n: int = 1000, r: int = 32, k: int = 6, seed: int = 0) -> dict:
    B, C, E, u0 = problem(m, n, r, seed)
    op = operator(B, C, E)
    print(
        f"A = B C + E: {m}x{n}, rank-{r} product plus a sparse E "
        f"({E._nnz()} entries); top-{k}"
    )

    def formed():
        return B @ C + E.to_dense()

    def lowrank():
        U, S, V = torch.svd_lowrank(formed(), q=k + 10, niter=4)
        return U[:, :k], S[:k], V[:, :k].mT

    runs = {
        "ps.svd_topk(LinearOperator)": lambda: ps.svd_topk(op, k),
        "torch.svd_lowrank(formed A)": lowrank,
        "exact: ps.svd(formed A, method='full')": lambda: ps.svd(
            formed(), k=k, method="full"
        ),
    }
    res = {name: grads(fn, B, C, u0) for name, fn in runs.items()}
    _, gB, gC = res["exact: ps.svd(formed A, method='full')"]
    out = {}
    for name, (t, b, c) in res.items():
        err = max(
            float((b - gB).abs().max() / gB.abs().max()),
            float((c - gC).abs().max() / gC.abs().max()),
        )
        out[name] = {"seconds": t, "error": err}
        print(f"  {name:<40} {t:6.2f} s   gradient error into B, C: {err:.1e}")
    S_op = ps.svd_topk(op, k).S.detach()
    S_all = torch.linalg.svdvals(formed().detach())
    S_exact = S_all[:k]
    out["values_error"] = float((S_op - S_exact).abs().max() / S_exact[0])
    out["topk_values"] = S_op.tolist()
    out["singular_values"] = S_all[: 2 * r].tolist()  # the leading 2 r, for figure
    print(
        f"  top-{k} singular values, operator vs dense: relative error "
        f"{out['values_error']:.1e}"
    )
    return out


def figure(result: dict):
    """The leading singular values of A, and the top-k that svd_topk found."""
    import matplotlib.pyplot as plt

    S = result["singular_values"]
    top = result["topk_values"]
    k = len(top)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.axvspan(0.5, k + 0.5, color="C1", alpha=0.12, label=f"kept: the top k = {k}")
    ax.plot(
        range(1, len(S) + 1), S, "o", color="0.5", ms=4, label="svdvals of formed A"
    )
    ax.plot(
        range(1, k + 1),
        top,
        "x",
        color="C1",
        ms=9,
        mew=2,
        label="ps.svd_topk(LinearOperator)",
    )
    ax.set_yscale("log")
    ax.set_xlabel("index i")
    ax.set_ylabel("singular value s_i")
    ax.set_title("Top-k of A = B C + E from its products")
    ax.legend()
    return fig


if __name__ == "__main__":
    result = main()
    if importlib.util.find_spec("matplotlib"):  # the figure is optional
        figure(result)
        import matplotlib.pyplot as plt

        plt.show()
