"""pyspectral's operations as PyTorch operators (``torch.library.custom_op``),
for ``torch.compile(..., fullgraph=True)`` and ``torch.export``.

Under torch.compile or torch.export the public functions hand the calls
whose output shapes follow from the input shapes (``svd``, ``svdvals``,
``eigh``, ``eigvalsh`` with a fixed ``k`` or none, ``svd_function`` and
``matrix_function`` with a named ``f``, on the native backend) to these
operators: Dynamo and export see one opaque node with a fake kernel for
its shapes, and AOTAutograd one node for its backward (``*_backward``),
whose kernels run the same pullbacks as the eager path. Nothing in them is
traced, so the input checks and the data-dependent work (degeneracy
tolerances, the gauge policy) run as in eager mode, when the compiled code
runs. Other calls (rank rules, whose output width depends on the values;
a user's ``f``; the Julia backend) keep the eager path, with graph breaks.

Settings left at ``None`` are read where each kernel runs (a
``defaults(...)`` block around the compiled call applies to its forward;
the backward's where ``backward()`` runs). The backward operators have no
derivatives of their own: second derivatives and forward mode need eager
mode (``torch.compiler.disable``), and raise otherwise.
"""

# torch.library reads each operator's schema from its annotations, evaluated
# at import: no "from __future__ import annotations", and Optional (X | None
# is not a type before Python 3.10).
# ruff: noqa: UP045
from typing import Optional

import torch
from torch import Tensor

from . import _linalg
from ._settings import GAUGE_POLICIES, Options, gradient_convention, options
from ._validation import check_hermitian_matrix, check_matrix
from .pullbacks.eig import eig_pullback
from .pullbacks.eigh import eigh_pullback, hermitian_part
from .pullbacks.matfun import matrix_function_pullback
from .pullbacks.qr import positive_gauge, qr_pullback
from .pullbacks.svd import svd_function_pullback, svd_pullback

__all__ = ["compiling"]


def compiling() -> bool:
    """Whether torch.compile or torch.export is tracing (torch >= 2.3)."""
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling and is_compiling())


def _opts(
    degeneracy_atol: Optional[float],
    broadening: Optional[float],
    gauge: Optional[str],
    gauge_atol: Optional[float],
    op: str,
) -> Options:
    # (validated by the public function before it called the operator)
    return options(degeneracy_atol, broadening, gauge, gauge_atol, op=op)


def _real(A: Tensor) -> torch.dtype:
    return A.real.dtype if A.is_complex() else A.dtype


def _zeros_if_none(g: Optional[Tensor], like: Tensor) -> Tensor:
    return torch.zeros_like(like) if g is None else g


# ----------------------------------------------------------------------- svd


@torch.library.custom_op("pyspectral::svd", mutates_args=())
def svd(
    A: Tensor,
    full_matrices: bool,
    degeneracy_atol: Optional[float],
    broadening: Optional[float],
    gauge: Optional[str],
    gauge_atol: Optional[float],
) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.linalg.svd(A, full_matrices)``, row-major outputs (the fake
    kernel's layout)."""
    check_matrix("svd", A)
    U, S, Vh = _linalg.svd(A, full_matrices=full_matrices)
    return U.contiguous(), S.contiguous(), Vh.contiguous()


@svd.register_fake
def _(A, full_matrices, degeneracy_atol, broadening, gauge, gauge_atol):
    *batch, m, n = A.shape
    k = min(m, n)
    u, v = (m, n) if full_matrices else (k, k)
    S = A.new_empty((*batch, k), dtype=_real(A))
    return A.new_empty((*batch, m, u)), S, A.new_empty((*batch, v, n))


@torch.library.custom_op("pyspectral::svd_backward", mutates_args=())
def svd_backward(
    A: Tensor,
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gU: Optional[Tensor],
    gS: Optional[Tensor],
    gVh: Optional[Tensor],
    degeneracy_atol: Optional[float],
    broadening: Optional[float],
    gauge: Optional[str],
    gauge_atol: Optional[float],
) -> Tensor:
    opts = _opts(degeneracy_atol, broadening, gauge, gauge_atol, "svd")
    gA = svd_pullback(U, S, Vh, gU, gS, gVh, opts, A=A)
    return torch.zeros_like(A) if gA is None else gA.contiguous()


@svd_backward.register_fake
def _(A, U, S, Vh, gU, gS, gVh, degeneracy_atol, broadening, gauge, gauge_atol):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


def _svd_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0], *output)
    ctx.settings = inputs[2:]


def _svd_backward(ctx, gU, gS, gVh):
    A, U, S, Vh = ctx.saved_tensors
    gA = svd_backward(A, U, S, Vh, gU, gS, gVh, *ctx.settings)
    return gA, None, None, None, None, None


svd.register_autograd(_svd_backward, setup_context=_svd_setup)


# ---------------------------------------------------------------------- eigh


@torch.library.custom_op("pyspectral::eigh", mutates_args=())
def eigh(
    A: Tensor,
    uplo: str,
    degeneracy_atol: Optional[float],
    broadening: Optional[float],
    gauge: Optional[str],
    gauge_atol: Optional[float],
    gradient: Optional[str],
) -> tuple[Tensor, Tensor]:
    """``torch.linalg.eigh(A, UPLO=uplo)``, row-major eigenvectors."""
    check_matrix("eigh", A, square=True, uplo=uplo)
    w, V = _linalg.eigh(A, UPLO=uplo)
    return w.contiguous(), V.contiguous()


@eigh.register_fake
def _(A, uplo, degeneracy_atol, broadening, gauge, gauge_atol, gradient):
    return A.new_empty(A.shape[:-1], dtype=_real(A)), torch.empty_like(A)


@torch.library.custom_op("pyspectral::eigh_backward", mutates_args=())
def eigh_backward(
    w: Tensor,
    V: Tensor,
    gw: Optional[Tensor],
    gV: Optional[Tensor],
    uplo: str,
    degeneracy_atol: Optional[float],
    broadening: Optional[float],
    gauge: Optional[str],
    gauge_atol: Optional[float],
    gradient: Optional[str],
) -> Tensor:
    opts = _opts(degeneracy_atol, broadening, gauge, gauge_atol, "eigh")
    gA = eigh_pullback(w, V, gw, gV, uplo, opts)
    return _convention(torch.zeros_like(V) if gA is None else gA, gradient)


@eigh_backward.register_fake
def _(w, V, gw, gV, uplo, degeneracy_atol, broadening, gauge, gauge_atol, gradient):
    return torch.empty_like(V, memory_format=torch.contiguous_format)


def _convention(G: Tensor, gradient: Optional[str]) -> Tensor:
    """The triangle-true gradient ``G`` under the convention ``gradient``
    (None: the default in force): ``"hermitian"``, its Hermitian part
    (whose fold onto the triangle ``G`` is; eigh.py's ``_with_gradient``)."""
    if gradient_convention(gradient, "eigh") == "triangle":
        return G.contiguous()
    return hermitian_part(G).contiguous()


def _eigh_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*output)
    ctx.uplo, ctx.settings = inputs[1], inputs[2:]


def _eigh_backward(ctx, gw, gV):
    w, V = ctx.saved_tensors
    gA = eigh_backward(w, V, gw, gV, ctx.uplo, *ctx.settings)
    return (gA, *(None,) * 6)


eigh.register_autograd(_eigh_backward, setup_context=_eigh_setup)


# ------------------------------------------- spectral functions, named f


# The builders of the named spectral functions (``_svd_function._svd_fn(f, k)``
# and ``_matrix_function._matfun(f)``): those modules import this one, and
# register them here when they are imported.
NAMED: dict = {}


def _svd_named(name: str, x: float, k: int):
    spec = name if name == "polar" else (name, int(x) if name == "truncate" else x)
    return NAMED["svd_function"](spec, k)


def _matfun_named(name: str, x: float):
    return NAMED["matrix_function"](name if name != "pow" else ("pow", x))


@torch.library.custom_op("pyspectral::svd_function", mutates_args=())
def svd_function(
    A: Tensor,
    name: str,
    x: float,
    degeneracy_atol: Optional[float],
    gauge: Optional[str],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(U f(S) V^H, U, S, V^H)`` for the named ``f`` (``name``, its number
    ``x``); the triplets are outputs for the backward, not differentiated."""
    check_matrix("svd_function", A)
    opts = _opts(degeneracy_atol, None, gauge, None, "svd_function")
    U, S, Vh = _linalg.svd(A, full_matrices=False)
    f, _ = _svd_named(name, x, S.shape[-1])(S, opts)
    Y = (U * f.unsqueeze(-2).to(U.dtype)) @ Vh
    return Y.contiguous(), U.contiguous(), S.contiguous(), Vh.contiguous()


@svd_function.register_fake
def _(A, name, x, degeneracy_atol, gauge):
    *batch, m, n = A.shape
    k = min(m, n)
    return (
        torch.empty_like(A, memory_format=torch.contiguous_format),
        A.new_empty((*batch, m, k)),
        A.new_empty((*batch, k), dtype=_real(A)),
        A.new_empty((*batch, k, n)),
    )


@torch.library.custom_op("pyspectral::svd_function_backward", mutates_args=())
def svd_function_backward(
    U: Tensor,
    S: Tensor,
    Vh: Tensor,
    gY: Tensor,
    name: str,
    x: float,
    degeneracy_atol: Optional[float],
    gauge: Optional[str],
) -> Tensor:
    opts = _opts(degeneracy_atol, None, gauge, None, "svd_function")
    fn = _svd_named(name, x, S.shape[-1])
    return svd_function_pullback(U, S, Vh, fn, gY, opts).contiguous()


@svd_function_backward.register_fake
def _(U, S, Vh, gY, name, x, degeneracy_atol, gauge):
    return torch.empty_like(gY, memory_format=torch.contiguous_format)


def _function_setup(ctx, inputs, output) -> None:
    """Both spectral-function operators: the factors (outputs after ``Y``)
    saved, the arguments after ``A`` handed to the backward operator."""
    ctx.save_for_backward(*output[1:])
    ctx.rest = inputs[1:]


def _svd_function_backward(ctx, gY, *_):
    U, S, Vh = ctx.saved_tensors
    gA = svd_function_backward(U, S, Vh, _zeros_if_none(gY, U @ Vh), *ctx.rest)
    return (gA, *(None,) * 4)


svd_function.register_autograd(_svd_function_backward, setup_context=_function_setup)


@torch.library.custom_op("pyspectral::matrix_function", mutates_args=())
def matrix_function(
    A: Tensor,
    name: str,
    x: float,
    uplo: str,
    degeneracy_atol: Optional[float],
    gradient: Optional[str],
    check_hermitian: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(V f(L) V^H, L, V)`` for the named ``f`` (``A`` checked Hermitian
    unless ``check_hermitian=False``, as eager ``matrix_function``)."""
    check_matrix("matrix_function", A, square=True, uplo=uplo,
                 finite=not check_hermitian)  # fmt: skip
    if check_hermitian:
        check_hermitian_matrix("matrix_function", A, None, NON_HERMITIAN)
    opts = _opts(degeneracy_atol, None, None, None, "matrix_function")
    w, V = _linalg.eigh(A, UPLO=uplo)
    f, _ = _matfun_named(name, x)(w, opts)
    Y = (V * f.unsqueeze(-2).to(V.dtype)) @ V.mH
    return Y.contiguous(), w.contiguous(), V.contiguous()


# matrix_function's advice for a non-Hermitian A (eager and compiled)
NON_HERMITIAN = (
    "For f(A) of a non-Hermitian A use pyspectral.eig_function(A, f) (V f(Lambda) "
    "V^-1, exact gradients at every diagonalizable A)"
)


@matrix_function.register_fake
def _(A, name, x, uplo, degeneracy_atol, gradient, check_hermitian):
    return (
        torch.empty_like(A, memory_format=torch.contiguous_format),
        A.new_empty(A.shape[:-1], dtype=_real(A)),
        torch.empty_like(A, memory_format=torch.contiguous_format),
    )


@torch.library.custom_op("pyspectral::matrix_function_backward", mutates_args=())
def matrix_function_backward(
    w: Tensor,
    V: Tensor,
    gY: Tensor,
    name: str,
    x: float,
    uplo: str,
    degeneracy_atol: Optional[float],
    gradient: Optional[str],
) -> Tensor:
    opts = _opts(degeneracy_atol, None, None, None, "matrix_function")
    fn = _matfun_named(name, x)
    return _convention(matrix_function_pullback(w, V, fn, gY, uplo, opts), gradient)


@matrix_function_backward.register_fake
def _(w, V, gY, name, x, uplo, degeneracy_atol, gradient):
    return torch.empty_like(V, memory_format=torch.contiguous_format)


def _matrix_function_backward(ctx, gY, *_):
    w, V = ctx.saved_tensors
    gA = matrix_function_backward(w, V, _zeros_if_none(gY, V), *ctx.rest[:-1])
    return (gA, *(None,) * 6)


matrix_function.register_autograd(
    _matrix_function_backward, setup_context=_function_setup
)


# ------------------------------------------------------------------ qr, lq


@torch.library.custom_op("pyspectral::qr", mutates_args=())
def qr(
    A: Tensor,
    mode: str,
    positive: bool,
    gauge: Optional[str],
    gauge_atol: Optional[float],
) -> tuple[Tensor, Tensor]:
    """``torch.linalg.qr(A, mode)`` (``"reduced"`` or ``"complete"``), in the
    positive gauge if asked, row-major outputs."""
    check_matrix("qr", A)
    Q, R = _linalg.qr(A, mode=mode)
    if positive:
        Q, R = positive_gauge(Q, R)
    return Q.contiguous(), R.contiguous()


@qr.register_fake
def _(A, mode, positive, gauge, gauge_atol):
    *batch, m, n = A.shape
    k = m if mode == "complete" else min(m, n)
    return A.new_empty((*batch, m, k)), A.new_empty((*batch, k, n))


@torch.library.custom_op("pyspectral::qr_backward", mutates_args=())
def qr_backward(
    A: Tensor,
    Q: Tensor,
    R: Tensor,
    gQ: Optional[Tensor],
    gR: Optional[Tensor],
    gauge: Optional[str],
    gauge_atol: Optional[float],
) -> Tensor:
    opts = _opts(None, None, gauge, gauge_atol, "qr")
    gA = qr_pullback(Q, R, gQ, gR, opts)
    return torch.zeros_like(A) if gA is None else gA.contiguous()


@qr_backward.register_fake
def _(A, Q, R, gQ, gR, gauge, gauge_atol):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


def _qr_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0], *output)
    ctx.settings = inputs[3:]


def _qr_backward(ctx, gQ, gR):
    A, Q, R = ctx.saved_tensors
    return (qr_backward(A, Q, R, gQ, gR, *ctx.settings), *(None,) * 4)


qr.register_autograd(_qr_backward, setup_context=_qr_setup)


# ----------------------------------------------------------------------- eig


@torch.library.custom_op("pyspectral::eig", mutates_args=())
def eig(
    A: Tensor,
    degeneracy_atol: Optional[float],
    broadening: Optional[float],
    gauge: Optional[str],
    gauge_atol: Optional[float],
) -> tuple[Tensor, Tensor]:
    """``torch.linalg.eig(A)``, row-major eigenvectors."""
    check_matrix("eig", A, square=True)
    L, V = _linalg.eig(A)
    return L.contiguous(), V.contiguous()


@eig.register_fake
def _(A, degeneracy_atol, broadening, gauge, gauge_atol):
    dtype = torch.promote_types(A.dtype, torch.complex64)
    return A.new_empty(A.shape[:-1], dtype=dtype), A.new_empty(A.shape, dtype=dtype)


@torch.library.custom_op("pyspectral::eig_backward", mutates_args=())
def eig_backward(
    A: Tensor,
    L: Tensor,
    V: Tensor,
    gL: Optional[Tensor],
    gV: Optional[Tensor],
    degeneracy_atol: Optional[float],
    broadening: Optional[float],
    gauge: Optional[str],
    gauge_atol: Optional[float],
) -> Tensor:
    opts = _opts(degeneracy_atol, broadening, gauge, gauge_atol, "eig")
    gA = eig_pullback(L, V, gL, gV, opts)
    if gA is None:
        return torch.zeros_like(A)
    return (gA if A.is_complex() else gA.real).contiguous()


@eig_backward.register_fake
def _(A, L, V, gL, gV, degeneracy_atol, broadening, gauge, gauge_atol):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


def _eig_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0], *output)
    ctx.settings = inputs[1:]


def _eig_backward(ctx, gL, gV):
    A, L, V = ctx.saved_tensors
    return (eig_backward(A, L, V, gL, gV, *ctx.settings), *(None,) * 4)


eig.register_autograd(_eig_backward, setup_context=_eig_setup)


# ------------------------------------------------- the public calls routed


def _settings_ok(*numbers: object, gauge: object = None) -> bool:
    """Plain Python settings (the operators' schema: float or None, a known
    gauge policy); anything else keeps the eager path, which validates it."""
    plain = all(x is None or type(x) in (int, float) for x in numbers)
    return plain and (gauge is None or gauge in GAUGE_POLICIES)


def _matrix_ok(A: object, square: bool = False) -> bool:
    ok = (
        isinstance(A, Tensor)
        and A.dim() >= 2
        and A.dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128)
    )
    return ok and (not square or A.shape[-1] == A.shape[-2])


def _k_ok(k: object) -> bool:
    return k is None or (type(k) is int and k >= 0)


def _floats(*numbers: object) -> tuple:
    return tuple(None if x is None else float(x) for x in numbers)


def call_svd(A, full_matrices, k, degeneracy_atol, broadening, gauge, gauge_atol):
    """``svd``'s triplets (the top ``k``), or None where the eager path must
    run."""
    ok = _matrix_ok(A) and _k_ok(k) and type(full_matrices) is bool
    numbers = (degeneracy_atol, broadening, gauge_atol)
    if not (ok and _settings_ok(*numbers, gauge=gauge)) or (full_matrices and k):
        return None
    d, b, ga = _floats(*numbers)
    U, S, Vh = torch.ops.pyspectral.svd(A, full_matrices, d, b, gauge, ga)
    if k is None:
        return U, S, Vh
    return U[..., :k], S[..., :k], Vh[..., :k, :]


def call_eigh(A, uplo, k, largest, degeneracy_atol, broadening, gauge, gauge_atol,
              gradient):  # fmt: skip
    """``eigh``'s pairs (the ``k`` at the wanted end, ascending), or None."""
    ok = _matrix_ok(A, square=True) and _k_ok(k) and type(largest) is bool
    numbers = (degeneracy_atol, broadening, gauge_atol)
    known = uplo in ("L", "U", "l", "u") and gradient in (None, "hermitian", "triangle")
    if not (ok and known and _settings_ok(*numbers, gauge=gauge)):
        return None
    d, b, ga = _floats(*numbers)
    w, V = torch.ops.pyspectral.eigh(A, uplo.upper(), d, b, gauge, ga, gradient)
    if k is None:
        return w, V
    n = w.shape[-1]
    lo = max(n - k, 0) if largest else 0
    hi = n if largest else min(k, n)
    return w[..., lo:hi], V[..., lo:hi]


def call_svd_function(A, f, degeneracy_atol, gauge):
    """``U f(S) V^H`` for a named ``f`` but ``"normalize"``, or None."""
    spec = _svd_spec(f)
    if spec is None or not (
        _matrix_ok(A) and _settings_ok(degeneracy_atol, gauge=gauge)
    ):
        return None
    (d,) = _floats(degeneracy_atol)
    return torch.ops.pyspectral.svd_function(A, *spec, d, gauge)[0]


def call_matrix_function(A, f, uplo, degeneracy_atol, gradient, check_hermitian):
    """``V f(L) V^H`` for a named ``f``, or None."""
    spec = _matfun_spec(f)
    known = uplo in ("L", "U", "l", "u") and gradient in (None, "hermitian", "triangle")
    ok = _matrix_ok(A, square=True) and _settings_ok(degeneracy_atol)
    if spec is None or not (ok and known):
        return None
    (d,) = _floats(degeneracy_atol)
    op = torch.ops.pyspectral.matrix_function
    return op(A, *spec, uplo.upper(), d, gradient, check_hermitian)[0]


def _svd_spec(f: object) -> Optional[tuple[str, float]]:
    if f == "polar":
        return "polar", 0.0
    if isinstance(f, tuple) and len(f) == 2 and type(f[1]) in (int, float):
        name, x = f
        if name == "pow" or (name == "threshold" and x >= 0):
            return name, float(x)
        if name == "truncate" and type(x) is int and x >= 1:
            return name, float(x)
    return None


def _matfun_spec(f: object) -> Optional[tuple[str, float]]:
    if f in ("exp", "log", "sqrt", "invsqrt"):
        return f, 0.0
    if isinstance(f, tuple) and len(f) == 2 and f[0] == "pow":
        if type(f[1]) in (int, float):
            return "pow", float(f[1])
    return None


def call_qr(A, mode, positive, gauge, gauge_atol):
    """``qr``'s ``(Q, R)`` (``mode="r"``: an empty ``Q``), or None."""
    ok = _matrix_ok(A) and mode in ("reduced", "complete", "r")
    if not (ok and type(positive) is bool and _settings_ok(gauge_atol, gauge=gauge)):
        return None
    (ga,) = _floats(gauge_atol)
    Q, R = torch.ops.pyspectral.qr(A, "reduced" if mode == "r" else mode, positive,
                                   gauge, ga)  # fmt: skip
    return (A.new_empty(0), R) if mode == "r" else (Q, R)


def call_lq(A, mode, positive, gauge, gauge_atol):
    """``lq``'s ``(L, Q)``, as the QR of ``A^H``, or None."""
    res = call_qr(
        A.mH if isinstance(A, Tensor) else A, mode, positive, gauge, gauge_atol
    )
    if res is None:
        return None
    Q, R = res
    return R.mH, Q if mode == "r" else Q.mH


def call_eig(A, degeneracy_atol, broadening, gauge, gauge_atol):
    """``eig``'s ``(L, V)``, or None."""
    numbers = (degeneracy_atol, broadening, gauge_atol)
    if not (_matrix_ok(A, square=True) and _settings_ok(*numbers, gauge=gauge)):
        return None
    return torch.ops.pyspectral.eig(
        A, *_floats(*numbers)[:2], gauge, _floats(gauge_atol)[0]
    )
