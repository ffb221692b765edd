"""``linsolve``: ``(a0 I + a1 A) x = b`` for a matrix or a never-formed
operator, by Krylov iteration (``forward/linsolve.py``), with the exact
gradient by one adjoint solve (``pullbacks/linsolve.py``).

How the gradient reaches an operator's tensors: as for ``svd_topk``
(``operator.py``), the forward computes ``Z = A x`` once with autograd on
(``x`` detached) and the autograd Function takes ``Z`` as an input; its
backward returns ``Z̄ = -conj(a1) y`` and autograd carries it through the
user's ``matmul`` into whatever tensors it uses. Every other product runs
under ``no_grad``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor

from ._operator_plan import _DTYPES, _check_operator, _checked, _finite
from ._validation import _as_integer, check_flag, check_matrix
from ._warnings import warn
from .common.defaults import eps34
from .exceptions import (
    BackendError,
    ConvergenceWarning,
    DtypeError,
    InputError,
    InputTypeError,
    NonFiniteError,
    ShapeError,
)
from .forward import linsolve as K
from .pullbacks.linsolve import linsolve_pullback

__all__ = ["linsolve", "LinsolveInfo"]


class LinsolveInfo(NamedTuple):
    """The certificate of a :func:`linsolve`: each system's true residual
    ``||b - (a0 + a1 A) x||`` and its tolerance (``(*,)`` tensors), the
    number of products with ``A`` and whether every residual is within its
    tolerance.

    Example::

        >>> A = torch.diag(torch.arange(1.0, 6.0, dtype=torch.float64))
        >>> x, info = linsolve(A, torch.ones(5, dtype=torch.float64), return_info=True)
        >>> info.converged, bool(info.residual <= info.tol)
        (True, True)
    """

    residual: Tensor
    tol: Tensor
    products: int
    converged: bool


def linsolve(
    op: Any,
    b: Tensor,
    *,
    a0: complex | Tensor = 0.0,
    a1: complex | Tensor = 1.0,
    x0: Tensor | None = None,
    ishermitian: bool = False,
    isposdef: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
    krylovdim: int = 30,
    maxiter: int = 100,
    project: tuple[Tensor, Tensor] | None = None,
    return_info: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, LinsolveInfo]:
    r"""linsolve(op, b, *, a0=0, a1=1, x0=None, ...) -> x

    The solution of

    .. math::
        (a_0 I + a_1 A)\, x = b

    for ``A`` of shape ``(*, n, n)`` given as a tensor or as a square
    :class:`LinearOperator` (only ``matmul``; ``rmatmul`` is used by the
    backward where given, else the vjp of ``matmul``), ``b`` and ``x`` of
    shape ``(*, n)`` (one system per batch entry). ``a0`` and ``a1`` are
    numbers or tensors broadcasting against ``(*,)``.

    Forward (KrylovKit's ``linsolve`` keywords): restarted GMRES with
    ``krylovdim`` basis vectors per cycle and at most ``maxiter`` cycles;
    conjugate gradients (``maxiter * krylovdim`` products) where
    ``isposdef=True`` says that ``M = a0 I + a1 A`` is Hermitian positive
    definite; MINRES (the same budget, no restarts, short recurrences)
    where ``ishermitian=True`` says that ``A = A^H`` and ``a0``, ``a1`` are
    real, so that ``M`` is Hermitian but maybe indefinite (the backward's
    solve with ``M^H = M`` too; with ``project``, GMRES). Converged when the
    true residual ``||b - M x|| <= max(atol, rtol ||b||)`` for every system
    (defaults: ``atol = 0``, ``rtol = eps**(3/4)``); otherwise the result comes with a
    ``ConvergenceWarning`` that gives the residual (a singular ``M``, where
    ``a0 + a1 λ = 0`` for an eigenvalue ``λ`` of ``A``, is one cause).
    ``return_info=True`` returns ``(x, LinsolveInfo)``.

    ``project=(l, r)``: a left and right eigenvector of ``A`` (``(*, n)``,
    ``l^H r != 0``) whose eigenvalue makes ``M`` singular, as ``1 - T/λ``
    of a transfer operator ``T`` with its dominant pair (VUMPS, excitation
    and susceptibility codes). The system is solved on the complement:
    ``M x = Q b`` with ``l^H x = 0``, ``Q = I - r l^H / (l^H r)``. ``l``
    and ``r`` are checked to be eigenvectors (``||A r - μ r|| <=
    sqrt(eps) ||A r||``, and for ``A^H l``; two products) and receive their
    gradient where they require one (exact while they remain eigenvectors,
    as when they come from ``eig``).

    Backward: exact for the computed ``x`` by one adjoint solve
    ``M^H y = x̄`` to the same tolerance (warned as above where it does not
    converge), then ``b̄ = y``, ``ā0 = -x^H y``, ``ā1 = -(A x)^H y`` and
    ``Ā = -conj(a1) y x^H`` into ``A`` (a tensor) or, through ``A x``, into
    the tensors an operator's ``matmul`` uses. First order; forward mode
    (dual tensors) by one more solve, ``M dx = db - da0 x - da1 A x -
    a1 dA x``.

    ``backend="julia"`` (a dense CPU tensor): Julia's ``PySpectral.linsolve``
    (KrylovKit's GMRES, CG with ``isposdef``, or PySpectral's MINRES, as
    here) and its adjoint solve
    ``linsolve_pullback!``, zero copy, to the same tolerances; the
    certificate (the true residual) and the warning are computed here as
    for the native backend. ``"auto"`` and ``"torch"`` run natively on
    ``b``'s device.

    Raises:
        InputTypeError: ``b`` is not a tensor, ``op`` is not a tensor or an
            operator.
        ShapeError: ``A`` is not square or ``b`` (``x0``) is not ``(*, n)``
            with ``A``'s batch.
        DtypeError: ``b`` is not float32/64 or complex64/128.
        NonFiniteError: NaN or Inf in ``A``, ``b``, ``x0``, ``a0``, ``a1``
            or a product.
        InputError: a bad keyword, or ``isposdef=True`` where ``M`` is not
            positive definite (found by conjugate gradients).

    Example::

        >>> g = torch.Generator().manual_seed(0)
        >>> A = torch.randn(50, 50, dtype=torch.float64, generator=g) / 50
        >>> b = torch.randn(50, dtype=torch.float64, generator=g)
        >>> x = linsolve(A, b, a0=1.0)
        >>> torch.allclose(x + A @ x, b)
        True
    """
    s = _check(
        op,
        b,
        a0,
        a1,
        x0,
        ishermitian,
        isposdef,
        atol,
        rtol,
        krylovdim,
        maxiter,
        project,
        return_info,
        backend,
    )
    if s.julia:
        return _julia(op, s)
    with torch.no_grad():
        x, info = _solve(s.M, s.Q(s.b.detach().to(s.x0.dtype)), s.Q(s.x0), s.tol, s)
    _not_converged("linsolve", info.residual, info.tol, info.products)
    inputs = (s.b, s.a0, s.a1, *s.tracked)
    given = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    dual = any(_has_tangent(t) for t in inputs)
    # A x through the user's products, for both modes: whether an operator's
    # tensors carry a gradient or a tangent shows only on the product
    Z = s.A(x) if given or dual or not s.dense else None
    if Z is not None and (given or Z.requires_grad or dual or _has_tangent(Z)):
        with torch.enable_grad():
            if s.lr is None:
                x = _Linsolve.apply(s.b, s.a0, s.a1, Z, x, s)
            else:
                # Q b and -r (l^H x) / (l^H r) (zero in value) carry the
                # gradient into l and r: see _Linsolve
                lv, r = s.lr
                lr = (lv.conj() * r).sum(-1, keepdim=True)
                Qb = s.b - r * (lv.conj() * s.b).sum(-1, keepdim=True) / lr
                E = -r * (lv.conj() * x).sum(-1, keepdim=True) / lr
                x = _Linsolve.apply(Qb, s.a0, s.a1, Z, x, s) + E
    return (x, info) if return_info else x


class _System(NamedTuple):
    """A checked call: the products (``A`` with grad on, ``M`` and ``M^H``
    under no_grad), the data and the iteration's settings."""

    A: Callable[[Tensor], Tensor]
    M: Callable[[Tensor], Tensor]
    MH: Callable[[Tensor], Tensor]
    b: Tensor
    a0: Tensor
    a1: Tensor
    x0: Tensor
    tol: Tensor
    posdef: bool
    krylovdim: int
    maxiter: int
    tracked: tuple[Tensor, ...]  # a dense A, l and r: requires_grad visible
    dense: bool
    Q: Callable[[Tensor], Tensor]  # I - r l^H / (l^H r), or the identity
    QH: Callable[[Tensor], Tensor]
    lr: tuple[Tensor, Tensor] | None  # project's (l, r)
    hermitian: bool
    minres: bool  # M = a0 I + a1 A Hermitian, not said to be definite
    julia: bool


def _julia_backend(name: str, op: Any, backend: str) -> bool:
    """Whether ``backend`` asks for Julia (checked: one of the three names,
    and Julia only for a dense tensor)."""
    if backend not in ("auto", "torch", "julia"):
        raise BackendError(
            f"{name}: backend must be 'auto', 'torch' or 'julia', got {backend!r}"
        )
    if backend == "julia" and not isinstance(op, Tensor):
        raise BackendError(
            f"{name}: backend='julia' takes a dense tensor; an operator's "
            "products are Python functions, which Julia's Krylov solver would "
            "call back into Python once per product (not supported): use "
            "backend='torch' for a LinearOperator, or pass the matrix"
        )
    return backend == "julia"


def _check(
    op,
    b,
    a0,
    a1,
    x0,
    ishermitian,
    isposdef,
    atol,
    rtol,
    krylovdim,
    maxiter,
    project,
    return_info,
    backend,
) -> _System:
    name = "linsolve"
    dense = isinstance(op, Tensor)
    julia = _julia_backend(name, op, backend)
    if julia:
        for given, what in ((project, "project"), (return_info, "return_info")):
            if given not in (None, False):
                raise InputError(
                    f"{name}: {what}= is the native backend's (KrylovKit's linsolve "
                    "neither projects nor reports its products as counted here): "
                    f"drop {what}= or use backend='torch'"
                )
    if dense:
        check_matrix(name, op, square=True)
        shape, op_dtype, device = tuple(op.shape), op.dtype, op.device
    else:
        _check_operator(name, op, need_rmatmul=False)
        shape, op_dtype, device = tuple(int(s) for s in op.shape), op.dtype, op.device
        if shape[-1] != shape[-2]:
            raise ShapeError(
                f"{name}: op must be square, shape (*, n, n), got shape {shape}"
            )
    if not isinstance(b, Tensor):
        raise InputTypeError(
            f"{name}: b must be a torch.Tensor, got {type(b).__name__}"
        )
    _vector(name, "b", b, shape)
    if b.device != torch.device(device):
        raise InputError(f"{name}: b is on {b.device}, the operator on {device}")
    a0t, a1t = _scalar(name, "a0", a0, b), _scalar(name, "a1", a1, b)
    dtype = _promote(op_dtype, b.dtype, a0t.dtype, a1t.dtype)
    if x0 is None:
        x0t = torch.zeros(b.shape, dtype=dtype, device=b.device)
    else:
        if not isinstance(x0, Tensor):
            raise InputTypeError(
                f"{name}: x0 must be a torch.Tensor or None, got {type(x0).__name__}"
            )
        _vector(name, "x0", x0, shape)
        x0t = x0.detach().to(dtype)
    ishermitian = check_flag(name, "ishermitian", ishermitian)
    isposdef = check_flag(name, "isposdef", isposdef)
    check_flag(name, "return_info", return_info)
    if isposdef and (a0t.is_complex() or a1t.is_complex()):
        raise InputError(
            f"{name}: isposdef=True needs real a0 and a1 (a0 I + a1 A is not "
            "Hermitian otherwise); drop isposdef"
        )
    krylovdim = _positive(name, "krylovdim", krylovdim)
    maxiter = _positive(name, "maxiter", maxiter)
    atol_, rtol_ = (
        _tolerance(name, "atol", atol, 0.0),
        _tolerance(name, "rtol", rtol, eps34(dtype)),
    )
    bd = b.detach().to(dtype)
    tol = torch.clamp(rtol_ * torch.linalg.vector_norm(bd, dim=-1), min=atol_)

    real_op = not op_dtype.is_complex
    if dense:
        matmul = lambda X: op @ X  # noqa: E731
        rmatmul = lambda Y: op.mH @ Y  # noqa: E731
    else:
        out = (*shape[:-1], 1)
        matmul = _checked(f"{name}: op.matmul", op.matmul, out, op_dtype)
        given = getattr(op, "rmatmul", None)
        if ishermitian:
            rmatmul = matmul
        elif callable(given):
            rmatmul = _checked(f"{name}: op.rmatmul", given, out, op_dtype)
        else:
            rmatmul = _vjp_adjoint(matmul, shape, op_dtype, device)

    def apply(f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        # (*, n) -> (*, n) through (*, n, p) products; a complex vector by a
        # real operator as its real and imaginary parts, two columns
        def g(v: Tensor) -> Tensor:
            if real_op and v.is_complex():
                Y = f(torch.stack((v.real, v.imag), -1).to(op_dtype))
                return torch.complex(Y[..., 0], Y[..., 1])
            return f(v[..., None].to(op_dtype))[..., 0].to(dtype)

        return g

    A, AH = apply(matmul), apply(rmatmul if not ishermitian else matmul)
    # the iterations see no forward-mode tangent (the jvp solves for it)
    Ap, AHp = _primal(A), _primal(AH)
    c0, c1 = a0t.detach().to(dtype), a1t.detach().to(dtype)
    M = lambda v: c0[..., None] * v + c1[..., None] * Ap(v)  # noqa: E731
    MH = lambda v: c0.conj()[..., None] * v + c1.conj()[..., None] * AHp(v)  # noqa: E731
    tracked = (op,) if dense else ()
    Q = QH = _identity
    lr = None
    if project is not None:
        lv, r = lr = _projection(name, project, shape, dtype, A, AH)
        Q, QH = _projector(lv.detach(), r.detach()), _projector(r.detach(), lv.detach())
        M0, MH0 = M, MH
        M = lambda v: Q(M0(Q(v)))  # noqa: E731
        MH = lambda v: QH(MH0(QH(v)))  # noqa: E731
        tracked = (*tracked, lv, r)
        if isposdef:
            raise InputError(
                f"{name}: project needs GMRES (the projected system is not "
                "Hermitian in general); drop isposdef"
            )
    return _System(
        A,
        M,
        MH,
        b,
        a0t,
        a1t,
        x0t,
        tol,
        isposdef,
        krylovdim,
        maxiter,
        tracked,
        dense,
        Q,
        QH,
        lr,
        ishermitian,
        ishermitian and not isposdef and project is None
        and not (a0t.is_complex() or a1t.is_complex()),
        julia,
    )  # fmt: skip


def _identity(v: Tensor) -> Tensor:
    return v


def _projector(left: Tensor, r: Tensor) -> Callable[[Tensor], Tensor]:
    """``v -> v - r (l^H v) / (l^H r)`` for ``l = left``."""
    lr = (left.conj() * r).sum(-1, keepdim=True)

    def Q(v: Tensor) -> Tensor:
        return v - r * ((left.conj() * v).sum(-1, keepdim=True) / lr)

    return Q


def _projection(name, project, shape, dtype, A, AH) -> tuple[Tensor, Tensor]:
    """``project``'s ``(l, r)`` checked: vectors ``(*, n)``, ``l^H r`` not
    small, eigenvectors of ``A`` (left and right) to ``sqrt(eps)``."""
    if not (isinstance(project, (tuple, list)) and len(project) == 2):
        raise InputTypeError(
            f"{name}: project must be a pair (l, r) of a left and a right "
            f"eigenvector of A, got {type(project).__name__}"
        )
    for what, v in zip(("l", "r"), project, strict=True):
        if not isinstance(v, Tensor):
            raise InputTypeError(f"{name}: project's {what} must be a tensor")
        _vector(name, f"project's {what}", v, shape)
    lv, r = (v.to(dtype) for v in project)
    with torch.no_grad():
        ld, rd = lv.detach(), r.detach()
        lr = (ld.conj() * rd).sum(-1)
        scale = torch.linalg.vector_norm(ld, dim=-1) * torch.linalg.vector_norm(
            rd, dim=-1
        )
        if bool((lr.abs() <= 1e-8 * scale).any()):
            raise InputError(
                f"{name}: project's l and r are (nearly) orthogonal, l^H r = "
                f"{float(lr.abs().min()):.3g}; they must be the left and right "
                "eigenvectors of one eigenvalue"
            )
        tol = torch.finfo(rd.real.dtype).eps ** 0.5
        for what, v, f in (("r", rd, A), ("l", ld, AH)):
            w = f(v)
            mu = (v.conj() * w).sum(-1, keepdim=True) / (v.conj() * v).sum(
                -1, keepdim=True
            )
            res = torch.linalg.vector_norm(w - mu * v, dim=-1)
            big = torch.linalg.vector_norm(w, dim=-1).clamp(
                min=torch.finfo(res.dtype).tiny
            )
            if bool((res > tol * big).any()):
                side = "right" if what == "r" else "left"
                raise InputError(
                    f"{name}: project's {what} is not a {side} eigenvector of A: "
                    f"relative residual {float((res / big).max()):.3g} > {tol:.3g}; "
                    "pass the eigenvectors of the eigenvalue that makes the system "
                    "singular, e.g. from pyspectral.eig"
                )
    return lv, r


def _vector(name: str, what: str, v: Tensor, shape: tuple) -> None:
    if v.dtype not in _DTYPES:
        raise DtypeError(
            f"{name}: {what} must have dtype float32, float64, complex64 or "
            f"complex128, got {v.dtype}"
        )
    want = (*shape[:-2], shape[-1])
    if tuple(v.shape) != want:
        raise ShapeError(
            f"{name}: {what} must have shape (*, n) = {want} for an operator of "
            f"shape {shape}, got {tuple(v.shape)}"
        )
    if not _finite(v):
        raise NonFiniteError(f"{name}: {what} contains NaN or Inf entries")


def _scalar(name: str, what: str, a: Any, b: Tensor) -> Tensor:
    """``a0`` / ``a1`` as a tensor broadcasting against ``b``'s batch."""
    if isinstance(a, Tensor):
        batch = b.shape[:-1]
        try:
            torch.broadcast_shapes(a.shape, batch)
        except RuntimeError as err:
            raise ShapeError(
                f"{name}: {what} of shape {tuple(a.shape)} does not broadcast "
                f"against the batch {tuple(batch)}"
            ) from err
        if len(torch.broadcast_shapes(a.shape, batch)) > len(batch):
            raise ShapeError(f"{name}: {what} has more dimensions than the batch")
        if not (a.dtype.is_floating_point or a.dtype.is_complex):
            a = a.to(b.dtype if not b.is_complex() else b.real.dtype)
        t = a.to(b.device)
    elif isinstance(a, (int, float, complex)) and not isinstance(a, bool):
        real = b.real.dtype if b.is_complex() else b.dtype
        t = torch.tensor(
            a,
            dtype=torch.complex128 if isinstance(a, complex) else real,
            device=b.device,
        )
        if t.is_complex():
            t = t.to(torch.complex64 if real == torch.float32 else torch.complex128)
    else:
        raise InputTypeError(
            f"{name}: {what} must be a number or a tensor, got {type(a).__name__}"
        )
    if not _finite(t):
        raise NonFiniteError(f"{name}: {what} is not finite")
    return t


def _promote(*dtypes: torch.dtype) -> torch.dtype:
    out = dtypes[0]
    for d in dtypes[1:]:
        out = torch.promote_types(out, d)
    return out


def _positive(name: str, what: str, value: Any) -> int:
    n = _as_integer(value)
    if n is None or n < 1:
        raise InputError(f"{name}: {what} must be an integer >= 1, got {value!r}")
    return n


def _tolerance(name: str, what: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value >= 0 and value < float("inf"))
    ):
        raise InputError(f"{name}: {what} must be a finite number >= 0, got {value!r}")
    return float(value)


def _vjp_adjoint(matmul, shape, dtype, device) -> Callable[[Tensor], Tensor]:
    """``Y -> A^H Y`` as the vjp of the linear ``matmul`` (torch's convention
    gives ``A^H`` for a complex ``A``), for an operator without ``rmatmul``.
    Each call runs ``matmul`` once more with grad on."""

    def rmatmul(Y: Tensor) -> Tensor:
        X = torch.zeros(
            *shape[:-1], Y.shape[-1], dtype=dtype, device=device, requires_grad=True
        )
        with torch.enable_grad():
            (g,) = torch.autograd.grad(matmul(X), X, Y)
        return g

    return rmatmul


def _solve(
    M, b: Tensor, x0: Tensor, tol: Tensor, s: _System
) -> tuple[Tensor, LinsolveInfo]:
    b = b.to(x0.dtype)
    if s.posdef:
        solve, definite = K.cg(M, b, x0, tol, s.maxiter * s.krylovdim)
        if not definite:
            raise InputError(
                "linsolve: isposdef=True, but conjugate gradients met a direction "
                "p with p^H (a0 I + a1 A) p <= 0: the matrix is not positive "
                "definite; drop isposdef (GMRES)"
            )
    elif s.minres:
        solve = K.minres(M, b, x0, tol, s.maxiter * s.krylovdim)
    else:
        solve = K.gmres(M, b, x0, tol, s.krylovdim, s.maxiter)
    converged = bool((solve.residual <= tol).all())
    return solve.x, LinsolveInfo(solve.residual, tol, solve.products, converged)


def _not_converged(
    name: str,
    residual: Tensor,
    tol: Tensor,
    products: int | None,
    *,
    adjoint: bool = False,
    tangent: bool = False,
) -> None:
    """A ``ConvergenceWarning`` with the worst system's residual where one is
    above its tolerance (``products`` None: the Julia backend's count); the
    solve named: the forward's, the backward's adjoint or forward mode's."""
    if bool((residual <= tol).all()):
        return
    worst = int(torch.argmax(residual - tol)) if residual.dim() else 0
    res = float(residual.reshape(-1)[worst])
    t = float(tol.reshape(-1)[worst])
    what = "the backward's adjoint solve" if adjoint else "the solve"
    what = "forward mode's tangent solve" if tangent else what
    after = "(Julia, KrylovKit)" if products is None else f"after {products} products"
    warn(
        f"{name}: {what} did not converge: residual {res:.3g} > tolerance "
        f"{t:.3g} {after}. Raise maxiter or krylovdim, give a better x0, or "
        "check that a0 I + a1 A is not (nearly) singular.",
        ConvergenceWarning,
    )


class _Linsolve(torch.autograd.Function):
    """``x`` as a function of ``b``, ``a0``, ``a1`` and ``Z = A x``. With
    ``project``, ``b`` is ``Q b`` (built by autograd from ``b``, ``l``, ``r``)
    and the adjoint solve is on the complement: ``y = (Q M Q)^{-H} Q^H x̄``;
    the term ``-r (l^H x) / (l^H r)`` the caller adds gives ``l`` the rest of
    its gradient (``l^H dx = -dl^H x``)."""

    @staticmethod
    def forward(b, a0, a1, Z, x, s) -> Tensor:  # type: ignore[override]
        return x.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        b, a0, a1, Z, x, ctx.s = inputs
        ctx.save_for_backward(x, Z.detach(), a1.detach())
        ctx.save_for_forward(x, Z, a1)
        ctx.meta = [(t.shape, t.dtype) for t in (b, a0, a1, Z)]

    @staticmethod
    def jvp(ctx: Any, db, da0, da1, dZ, *_: Any) -> Tensor:
        """``dx = M^-1 Q (db - da0 x - da1 A x - a1 dA x)``, ``dZ = dA x``:
        one more solve, certified as the forward's."""
        x, Z, a1 = ctx.saved_tensors
        s = ctx.s
        rhs = _tangent_rhs(x, Z, a1, db, da0, da1, dZ)
        with torch.no_grad():
            tol = _adjoint_tol(rhs, s)
            dx, info = _solve(s.M, s.Q(rhs), torch.zeros_like(x), tol, s)
        _not_converged("linsolve", info.residual, tol, info.products, tangent=True)
        return dx

    @staticmethod
    def backward(ctx: Any, gx: Tensor):  # type: ignore[override]
        x, Z, a1 = ctx.saved_tensors
        s = ctx.s
        gx = gx.to(x.dtype)
        with torch.no_grad():
            rhs = s.QH(gx)
            y, info = _solve(s.MH, rhs, torch.zeros_like(gx), _adjoint_tol(rhs, s), s)
        _not_converged("linsolve", info.residual, info.tol, info.products, adjoint=True)
        db, da0, da1, dZ = linsolve_pullback(x, Z.to(x.dtype), y, a1.to(x.dtype))
        grads = [
            _like(g, *meta) if need else None
            for g, meta, need in zip(
                (db, da0, da1, dZ), ctx.meta, ctx.needs_input_grad, strict=False
            )
        ]
        return (*grads, None, None)


def _julia(A: Tensor, s: _System) -> Tensor:
    """backend="julia": Julia's solve and adjoint solve; the certificate (the
    true residual, one product) and the warning here, as the native
    backend's."""
    from .julia import _linsolve as J

    dtype = s.x0.dtype
    Ad, bd = A.detach().to(dtype), s.b.detach().to(dtype)
    x = J.linsolve(Ad, bd, s.x0, s.a0, s.a1, s.tol, s.hermitian, s.posdef,
                   s.krylovdim, s.maxiter)  # fmt: skip
    with torch.no_grad():
        residual = torch.linalg.vector_norm(bd - s.M(x), dim=-1)
    _not_converged("linsolve", residual, s.tol, None)
    inputs = (A, s.b, s.a0, s.a1)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    if grad or any(_has_tangent(t) for t in inputs):
        x = _JuliaLinsolve.apply(*inputs, Ad, x, s)
    return x


class _JuliaLinsolve(torch.autograd.Function):
    """``x`` as a function of ``A``, ``b``, ``a0`` and ``a1`` by the Julia
    backend; the adjoint solve and the gradients in Julia, its certificate
    (``||x̄ - M^H y||``, one product) here."""

    @staticmethod
    def forward(A, b, a0, a1, Ad, x, s) -> Tensor:  # type: ignore[override]
        return x.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        A, b, a0, a1, ctx.Ad, x, ctx.s = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.meta = [(t.shape, t.dtype) for t in (A, b, a0, a1)]

    @staticmethod
    def jvp(ctx: Any, dA, db, da0, da1, *_: Any) -> Tensor:
        """``dx = M^-1 (db - da0 x - da1 A x - a1 dA x)``: one more solve in
        Julia, certified here as the forward's."""
        from .julia import _linsolve as J

        (x,) = ctx.saved_tensors
        s, Ad = ctx.s, ctx.Ad
        Ax = (Ad @ x[..., None])[..., 0]
        dAx = None if dA is None else (dA.to(x.dtype) @ x[..., None])[..., 0]
        rhs = _tangent_rhs(x, Ax, s.a1.detach(), db, da0, da1, dAx)
        tol = _adjoint_tol(rhs, s)
        dx = J.linsolve(Ad, rhs, torch.zeros_like(x), s.a0, s.a1, tol, s.hermitian,
                        s.posdef, s.krylovdim, s.maxiter)  # fmt: skip
        with torch.no_grad():
            residual = torch.linalg.vector_norm(rhs - s.M(dx), dim=-1)
        _not_converged("linsolve", residual, tol, None, tangent=True)
        return dx

    @staticmethod
    def backward(ctx: Any, gx: Tensor):  # type: ignore[override]
        from .julia import _linsolve as J

        (x,) = ctx.saved_tensors
        s = ctx.s
        gx = gx.to(x.dtype)
        tol = _adjoint_tol(gx, s)
        gA, gb, ga0, ga1 = J.linsolve_pullback(
            ctx.Ad, ctx.meta[0][1], x, gx, s.a0, s.a1, tol, s.hermitian,
            s.posdef, s.krylovdim, s.maxiter,
        )  # fmt: skip
        with torch.no_grad():
            residual = torch.linalg.vector_norm(gx - s.MH(gb), dim=-1)
        _not_converged("linsolve", residual, tol, None, adjoint=True)
        grads = [
            _like(g, *meta) if need else None
            for g, meta, need in zip(
                (gA, gb, ga0, ga1), ctx.meta, ctx.needs_input_grad, strict=False
            )
        ]
        return (*grads, None, None, None)


def _tangent_rhs(x, Ax, a1, db, da0, da1, dAx) -> Tensor:
    """``db - da0 x - da1 A x - a1 dA x`` (a None tangent: zero), ``a0`` and
    ``a1`` scalars or one per system."""
    rhs = torch.zeros_like(x)
    if db is not None:
        rhs = rhs + db.to(x.dtype)
    if da0 is not None:
        rhs = rhs - da0.to(x.dtype)[..., None] * x
    if da1 is not None:
        rhs = rhs - da1.to(x.dtype)[..., None] * Ax.to(x.dtype)
    if dAx is not None:
        rhs = rhs - a1.to(x.dtype)[..., None] * dAx.to(x.dtype)
    return rhs


def _has_tangent(t: Tensor) -> bool:
    """Whether ``t`` is a forward-mode dual tensor (``torch.autograd.forward_ad``)."""
    return fwAD.unpack_dual(t).tangent is not None


def _primal(f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``f`` with its result's forward-mode tangent dropped: an iteration on
    an operator whose tensors are dual computes the primal only."""

    def g(X: Tensor) -> Tensor:
        return fwAD.unpack_dual(f(X)).primal

    return g


def _adjoint_tol(gx: Tensor, s: _System) -> Tensor:
    # the same relative accuracy as the forward's
    bn = torch.linalg.vector_norm(s.b.detach().to(gx.dtype), dim=-1)
    rel = torch.where(bn > 0, s.tol / torch.where(bn > 0, bn, 1), s.tol)
    return rel * torch.linalg.vector_norm(gx, dim=-1)


def _like(g: Tensor, shape: torch.Size, dtype: torch.dtype) -> Tensor:
    """``g`` summed to an input's shape (a scalar shared by the batch), real
    where the input is."""
    if not dtype.is_complex and g.is_complex():
        g = g.real
    return (g.sum_to_size(shape) if g.shape != shape else g).to(dtype)
