"""pyspectral as a drop-in for torch.linalg (issue 37): the same signatures
(positional parameters, defaults, torch's keywords), exceptions that are
instances of torch's classes for the same misuse, and patching that never
makes pyspectral call itself (``patch_torch`` and a plain assignment)."""

from __future__ import annotations

import ast
import inspect
import threading
import warnings

import pytest
import torch

import pyspectral as ps
from pyspectral.patch import DROP_INS

F64 = torch.float64


def torch_signature(name: str) -> list[tuple[str, str, object]]:
    """``(name, kind, default)`` of ``torch.linalg.<name>``'s parameters, from
    the signature line its docstring starts with (a builtin has no
    ``inspect.signature``)."""
    line = getattr(torch.linalg, name).__doc__.strip().splitlines()[0]
    line = line.removeprefix("linalg.")  # (qr's docstring has no prefix)
    assert line.startswith(f"{name}("), line
    params = line[len(f"{name}(") : line.rindex(")", 0, line.find("->"))]
    fn = ast.parse(f"def f({params}): pass").body[0].args
    out = []
    positional = fn.posonlyargs + fn.args
    defaults = [None] * (len(positional) - len(fn.defaults)) + fn.defaults
    for a, d in zip(positional, defaults):
        out.append((a.arg, "positional", inspect.Parameter.empty if d is None
                    else ast.literal_eval(d)))  # fmt: skip
    for a, d in zip(fn.kwonlyargs, fn.kw_defaults):
        out.append((a.arg, "keyword", ast.literal_eval(d)))
    return out


@pytest.mark.parametrize("name", DROP_INS)
def test_signature_is_torchs(name):
    """Every parameter of torch's function is pyspectral's: the positional
    ones the same, in order, with the same defaults; torch's keyword-only
    ones keyword-only with the same defaults (pyspectral's own keywords come
    after, keyword-only)."""
    expected = torch_signature(name)
    params = list(inspect.signature(getattr(ps, name)).parameters.values())
    positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = {p.name: p for p in params if p.kind is p.KEYWORD_ONLY}
    want_pos = [(n, d) for n, kind, d in expected if kind == "positional"]
    assert [(p.name, p.default) for p in positional] == want_pos
    for n, kind, d in expected:
        if kind == "keyword":
            assert n in keyword, f"{name}: torch's keyword {n} missing"
            assert keyword[n].default == d


A = torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
H = A.mT @ A
NAN = A * float("nan")

# (function, args, kwargs): misuse torch.linalg rejects too
MISUSE = {
    "svd integer": ("svd", (torch.ones(3, 3, dtype=torch.long),), {}),
    "svd half": ("svd", (A.half(),), {}),
    "svd 1-d": ("svd", (torch.ones(3),), {}),
    "svd list": ("svd", ([[1.0]],), {}),
    "svd full_matrices str": ("svd", (A, "yes"), {}),
    "svd driver on CPU": ("svd", (A,), {"driver": "gesvd"}),
    "svd unknown keyword": ("svd", (A,), {"bogus": 1}),
    "svd NaN": ("svd", (NAN,), {}),
    "svdvals integer": ("svdvals", (torch.ones(3, 3, dtype=torch.long),), {}),
    "svdvals driver on CPU": ("svdvals", (A,), {"driver": "gesvdj"}),
    "eigh not square": ("eigh", (A,), {}),
    "eigh UPLO": ("eigh", (H, "X"), {}),
    "eigh NaN": ("eigh", (H * float("nan"),), {}),
    "eigh integer": ("eigh", (torch.ones(3, 3, dtype=torch.long),), {}),
    "eigvalsh not square": ("eigvalsh", (A,), {}),
    "qr mode": ("qr", (A, "foo"), {}),
    "qr mode int": ("qr", (A, 3), {}),
    "qr integer": ("qr", (torch.ones(3, 3, dtype=torch.long),), {}),
    "qr 1-d": ("qr", (torch.ones(3),), {}),
    "eig not square": ("eig", (A,), {}),
    "eig NaN": ("eig", (H * float("nan"),), {}),
    "eigvals not square": ("eigvals", (A,), {}),
}


def raised(fn, args, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - the class is what is compared
            return e
    return None


@pytest.mark.parametrize("case", MISUSE)
def test_misuse_raises_an_instance_of_torchs_class(case):
    name, args, kw = MISUSE[case]
    theirs = raised(getattr(torch.linalg, name), args, kw)
    ours = raised(getattr(ps, name), args, kw)
    assert theirs is not None, f"torch accepts {case}: not a misuse"
    assert ours is not None, f"pyspectral accepts {case}"
    assert isinstance(ours, type(theirs)), (type(ours).__mro__, type(theirs))
    if not isinstance(ours, TypeError) or isinstance(ours, ps.PySpectralError):
        assert isinstance(ours, ps.PySpectralError), (
            "a pyspectral error says what to do"
        )


def test_positional_full_matrices_and_torchs_default():
    U, S, Vh = ps.svd(A)  # full_matrices=True, as torch's
    assert U.shape == (5, 5) and Vh.shape == (3, 3)
    U, S, Vh = ps.svd(A, False)
    Ut, St, Vht = torch.linalg.svd(A, False)
    assert U.shape == Ut.shape and torch.allclose(S, St)


def test_svd_out_as_torchs():
    out = (
        torch.empty(0, dtype=F64),
        torch.empty(0, dtype=F64),
        torch.empty(0, dtype=F64),
    )
    ps.svd(A, out=out)
    assert out[0].shape == (5, 5)
    ps.svdvals(A, out=out[1])
    assert torch.allclose(out[1], torch.linalg.svdvals(A))


def grad_of_polar(svd):
    X = A.clone().requires_grad_()
    U, S, Vh = svd(X, full_matrices=False)
    (g,) = torch.autograd.grad((U @ Vh).sum() + S.sum(), X)
    return g


def test_assigning_torch_linalg_does_not_recurse(monkeypatch):
    """The first thing a user writes: ``torch.linalg.svd = ps.svd`` (and the
    rest). pyspectral calls torch's own functions, bound once, so the
    patched calls run (torch's RecursionError before)."""
    expected = grad_of_polar(ps.svd)
    for name in DROP_INS:
        monkeypatch.setattr(torch.linalg, name, getattr(ps, name))
    assert torch.allclose(grad_of_polar(torch.linalg.svd), expected)
    for name, args in [("svdvals", (A,)), ("eigh", (H,)), ("eigvalsh", (H,)),
                       ("qr", (A,)), ("eig", (H,)), ("eigvals", (H,))]:  # fmt: skip
        getattr(torch.linalg, name)(*args)


def test_patch_torch_routes_and_restores():
    original = {n: getattr(torch.linalg, n) for n in DROP_INS}
    with ps.patch_torch() as p:
        for n in DROP_INS:
            assert getattr(torch.linalg, n) is getattr(ps, n)
        with ps.patch_torch("svd"):  # nested: still patched after it ends
            pass
        assert torch.linalg.svd is ps.svd
        # exact gradient where torch's is NaN: a repeated singular value
        X = torch.eye(3, dtype=F64, requires_grad=True)
        U, S, Vh = torch.linalg.svd(X)
        (g,) = torch.autograd.grad((U @ Vh).sum(), X)
        assert torch.isfinite(g).all()
    assert p.names == DROP_INS
    for n in DROP_INS:
        assert getattr(torch.linalg, n) is original[n]


def test_patch_torch_as_decorator_and_start_stop():
    @ps.patch_torch("eigh")
    def f():
        return torch.linalg.eigh is ps.eigh

    assert f() and torch.linalg.eigh is not ps.eigh
    p = ps.patch_torch("qr").start()
    assert torch.linalg.qr is ps.qr
    p.stop()
    assert torch.linalg.qr is not ps.qr
    with pytest.raises(ps.InputError, match="without a matching start"):
        p.stop()
    with pytest.raises(ps.InputError, match="not among"):
        ps.patch_torch("cholesky")


def test_patch_torch_overlapping_threads():
    """Two threads' scopes overlap: torch.linalg stays patched until the last
    ends, then is torch's again."""
    inside, release = threading.Event(), threading.Event()
    seen = []

    def worker():
        with ps.patch_torch("svd"):
            inside.set()
            release.wait(10)
            seen.append(torch.linalg.svd is ps.svd)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    with ps.patch_torch("svd"):
        pass
    seen.append(torch.linalg.svd is ps.svd)  # the worker still holds it
    release.set()
    t.join()
    assert seen == [True, True]
    assert torch.linalg.svd is torch._C._linalg.linalg_svd


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="driver= is cuSOLVER's: needs a CUDA device"
)
@pytest.mark.parametrize("driver", ["gesvd", "gesvdj", "gesvda"])
def test_driver_runs_cusolvers_algorithm_on_cuda(driver):
    """On a CUDA tensor driver= reaches torch's forward (as torch.linalg.svd's),
    and the gradient is pyspectral's."""
    X = A.cuda().requires_grad_()
    U, S, Vh = ps.svd(X, full_matrices=False, driver=driver)
    Ut, St, Vht = torch.linalg.svd(A.cuda(), full_matrices=False, driver=driver)
    torch.testing.assert_close(S, St)
    (g,) = torch.autograd.grad((U @ Vh).sum(), X)
    (ref,) = torch.autograd.grad(
        (lambda U, S, Vh: (U @ Vh).sum())(*ps.svd(X, full_matrices=False)), X
    )
    torch.testing.assert_close(g, ref)
    torch.testing.assert_close(ps.svdvals(X, driver=driver), St)
