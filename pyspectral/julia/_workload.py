"""The representative run of the Julia backend that ``python -m pyspectral
julia-sysimage`` traces (``_sysimage.build``): what it compiles goes into the
image. Run in the build's child process only; nothing in pyspectral imports
it (it imports pyspectral itself)."""

from __future__ import annotations


def workload() -> None:
    """Representative backend calls, each forward and backward, in every
    dtype: run under Julia's ``--trace-compile`` while an image is built, so
    the image holds what they compile."""
    import torch

    import pyspectral as ps

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        for batch in ((), (2,)):
            A = torch.randn(*batch, 6, 4, dtype=dtype, generator=g)
            S = torch.randn(*batch, 4, 4, dtype=dtype, generator=g)
            H = S + S.mH
            # well separated eigenvalues: eig's derivative exists (float32 too)
            E = torch.diag_embed(torch.arange(1, 5).to(dtype)) + 0.1 * S
            for f, X in (
                (lambda X: ps.svd(X, backend="julia"), A),
                (lambda X: (ps.svdvals(X, backend="julia"),), A),
                (lambda X: ps.eigh(X, backend="julia"), H),
                (lambda X: (ps.eigvalsh(X, backend="julia"),), H),
                (lambda X: ps.qr(X, backend="julia"), A),
                (lambda X: ps.lq(X, backend="julia"), A.mT),
                (lambda X: ps.polar(X, backend="julia"), A),
                (lambda X: ps.eig(X, backend="julia"), E),
                (lambda X: (ps.svd_function(X, "polar", backend="julia"),), A),
                (lambda X: (ps.matrix_function(X, "exp", backend="julia"),), H),
            ):
                X = X.detach().requires_grad_(True)
                out = f(X)
                loss = sum(y.abs().square().sum() for y in out)
                loss.backward()
