"""Julia from PyTorch: prototype a rule in Julia and call it on tensors, and run
Julia rule tests.

Workflow: write a function (and, if you like, its ``ChainRulesCore.rrule``) in
a ``.jl`` file; ``ps.julia.include("rules.jl")``; ``f = ps.julia.function("f")``;
call ``f(x)`` on tensors and backpropagate. Edit the file and ``include`` it
again: the next call uses the new rule. Test it with ChainRulesTestUtils'
``test_rrule`` in a ``@testset`` and run ``python -m pyspectral test-julia
file.jl``.

Julia starts on first use. Inputs are CPU tensors (copied into Julia
``Array``s, which rules may dispatch on or mutate); outputs are arrays or
numbers, returned as tensors sharing Julia's memory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import _julia
from .exceptions import BackendError, InputTypeError

__all__ = [
    "function",
    "include",
    "JuliaFunction",
    "testset_names",
    "run_testset",
    "run_tests",
    "PACKAGE_TESTS",
    "TEST_PACKAGES",
    "missing_test_packages",
]


def _package_dir() -> Path:
    """The bundled Julia package: inside an installed wheel, or the checkout's."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "jl" / "PySpectral", here.parent / "julia" / "PySpectral"):
        if (candidate / "Project.toml").is_file():
            return candidate
    return here.parent / "julia" / "PySpectral"


#: The bundled PySpectral Julia package's test folder (its ``runtests.jl``
#: is what :func:`run_tests` runs by default), a ``pathlib.Path``.
PACKAGE_TESTS = _package_dir() / "test"
#: The Julia packages the Julia tests use (``python -m pyspectral
#: install-julia --tests`` installs them; see :func:`missing_test_packages`).
TEST_PACKAGES = ("Test", "Random", "ChainRulesTestUtils", "FiniteDifferences", "Zygote")


def include(path: str | Path) -> None:
    """Evaluate a Julia file in pyspectral's user module (again, to reload it).

    Its functions (and their ``ChainRulesCore.rrule`` methods) are then callable
    by name through :func:`function`; including the file again after an
    edit makes the next call use the new definitions. Starts Julia on first
    use.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        BackendError: Julia cannot start here (not installed).
        JuliaError: the file fails in Julia (its Julia message;
            ``ArgumentError`` comes as :class:`InputError`).

    Example (needs the Julia backend)::

        >>> import tempfile, torch, pyspectral as ps
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "scaled.jl"
        >>> _ = path.write_text("scaled(x) = 2 .* x", encoding="utf-8")
        >>> ps.julia.include(path)
        >>> scaled = ps.julia.function("scaled")
        >>> scaled(torch.tensor([1.0, 2.0], dtype=torch.float64))
        tensor([2., 4.], dtype=torch.float64)
    """
    p = Path(path).resolve()
    if not p.is_file():
        raise FileNotFoundError(f"pyspectral.julia.include: no file {p}")
    _julia.call("julia.include", "user_include", str(p))


def function(f: str) -> JuliaFunction:
    """A Julia function as a differentiable operation on tensors.

    ``f`` is Julia source text evaluating to a function (``"x -> logdet(x' * x
    + I)"``, ``"inv"``) or the name of one defined by :func:`include`. Its
    backward uses ``ChainRulesCore.rrule(f, args...)`` when one exists (yours,
    or ChainRules.jl's for ``inv``, ``det``, ``logdet``, ``cholesky``, ``\\``,
    ...), else ``Zygote.pullback``; ``.last_rule`` says which ran.

    The returned :class:`JuliaFunction` takes CPU tensors of any shape and
    dtype (copied into Julia ``Array`` objects in their logical, row-major
    layout: a ``(m, n)`` tensor is the ``m x n`` matrix) and other
    arguments as juliacall converts them; it returns a tensor (a tuple of
    tensors when Julia returns a tuple) sharing Julia's memory, numbers as
    0-d tensors. Its gradient is exact as far as the rule used is.

    Returns:
        A :class:`JuliaFunction`.

    Raises:
        InputTypeError: ``f`` is not a string (raised before Julia starts).
        BackendError: Julia cannot start here (not installed); when called,
            a tensor argument not on the CPU.
        JuliaError: ``f`` fails in Julia (a syntax error, an unknown
            name); when called, an error inside ``f`` or its pullback, or
            arguments ``f`` has no method for (Julia's message;
            ``ArgumentError`` comes as :class:`InputError`, ``DomainError``
            as :class:`DomainError`).

    Example (needs the Julia backend)::

        >>> import torch, pyspectral as ps
        >>> f = ps.julia.function("x -> sum(abs2, x)")
        >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        >>> y = f(x)
        >>> float(y), f.last_rule  # no rrule for this lambda: Zygote
        (5.0, 'zygote')
        >>> y.backward()
        >>> x.grad
        tensor([2., 4.], dtype=torch.float64)
    """
    if not isinstance(f, str):
        raise InputTypeError(
            f"pyspectral.julia.function: f must be Julia source text or a name, "
            f"got {type(f).__name__}"
        )
    return JuliaFunction(f)


class JuliaFunction:
    """Callable returned by :func:`function`: a Julia function as a
    differentiable torch operation.

    Attributes: ``source`` (the text given to :func:`function`) and
    ``last_rule``, ``"rrule"`` or ``"zygote"`` (which pullback the last call
    recorded; ``None`` before the first call). Construct it with
    :func:`function`, which checks its argument.

    Raises:
        BackendError: when called with a tensor that is not on the CPU.
        JuliaError: when called, an error inside the Julia function or its
            pullback (see :func:`function`).

    Example (needs the Julia backend)::

        >>> import torch, pyspectral as ps
        >>> inv = ps.julia.function("inv")  # ChainRules.jl has its rrule
        >>> X = torch.tensor([[2.0, 0.0], [0.0, 4.0]], dtype=torch.float64)
        >>> torch.allclose(inv(X), torch.linalg.inv(X)), inv.last_rule
        (True, 'rrule')
        >>> inv
        pyspectral.julia.function('inv')
    """

    def __init__(self, source: str):
        self.source = source
        self.handle = _julia.call(source, "user_eval", source)
        self.last_rule: str | None = None

    def __call__(self, *args: Any) -> Any:
        """Call the Julia function on ``args`` (CPU tensors are passed as
        Julia arrays, in their logical layout); returns a tensor, or a tuple
        of tensors when Julia returns a tuple, differentiable in every tensor
        argument."""
        for a in args:
            if isinstance(a, torch.Tensor):
                _julia.check_tensor(self.source, a)
        # Whether Julia returned a tuple is this call's (two calls of one
        # function may differ, or run in two threads): the forward says it here.
        returned: list[bool] = []
        out = _JuliaFunction.apply(self, returned, *args)
        return out[0] if len(out) == 1 and not returned[0] else out

    def __repr__(self) -> str:
        return f"pyspectral.julia.function({self.source!r})"


def _to_julia(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        # Logical (row-major) layout: user functions see the matrix itself.
        return x.detach().resolve_conj().resolve_neg().numpy()
    return x


def _to_torch(y: Any, like: torch.dtype) -> torch.Tensor:
    if isinstance(y, (bool, int, float, complex)):
        dtype = (
            like
            if not isinstance(y, complex) or like.is_complex
            else (torch.complex128 if like == torch.float64 else torch.complex64)
        )
        return torch.tensor(y, dtype=dtype, device="cpu")  # as from_numpy's
    return torch.from_numpy(np.asarray(y))


class _JuliaFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, jf: JuliaFunction, returned: list, *args: Any) -> tuple:
        y, ctx.pullback, which = _julia.call(
            jf.source, "function_forward", jf.handle, *map(_to_julia, args)
        )
        jf.last_rule = str(which)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        like = tensors[0].dtype if tensors else torch.get_default_dtype()
        is_tuple = isinstance(y, tuple)
        returned.append(is_tuple)
        ys = y if is_tuple else (y,)
        ctx.inputs = [
            (a.shape, a.dtype) if isinstance(a, torch.Tensor) else None for a in args
        ]
        ctx.source, ctx.single = jf.source, not is_tuple
        return tuple(_to_torch(v, like) for v in ys)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *gys: torch.Tensor) -> tuple:
        cot = [
            g.item() if g.dim() == 0 else g.resolve_conj().contiguous().numpy()
            for g in gys
        ]
        gs = _julia.call(
            ctx.source,
            "function_pullback",
            ctx.pullback,
            cot[0] if ctx.single else tuple(cot),
        )
        grads = []
        for g, meta in zip(gs, ctx.inputs):
            if meta is None or g is None:
                grads.append(None)
                continue
            shape, dtype = meta
            t = _to_torch(g, dtype).to(dtype)
            grads.append(t.reshape(shape) if t.shape != shape else t)
        return (None, None, *grads)


# ------------------------------------------------------------- Julia tests
# The named top-level @testsets of a Julia test file, read without Julia (pytest
# lists them where Julia is absent) by the rule of the glue's split_testfile:
# a top-level `@testset ... "name" ...`, or the first @testset inside a
# top-level wrapper (`try`, `begin`, `let`, another macro call), if its name is
# a string literal. The scanner knows what it must: comments, strings (with
# interpolation), character literals, brackets, and the keywords whose blocks
# close with `end` (outside brackets, where `end`/`begin` are indices).

_ESCAPE = re.compile(r"\\(.)")
_WORD = re.compile(r"[^\W\d]\w*!*")
_MACRO = re.compile(r"@[^\W\d][\w.!]*")
_CHAR = re.compile(r"'(?:\\[^']*|[^'\\\n])'")
_OPENERS = frozenset(
    ("begin", "function", "macro", "for", "while", "if", "let", "try", "quote")
    + ("struct", "module", "baremodule", "do")
)
_WRAPPERS = frozenset(("try", "begin", "let"))


def _unescape(m: re.Match) -> str:
    return {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(m.group(1), m.group(1))


def _skip_string(text: str, i: int) -> tuple[int, str]:
    """End of the string literal starting at ``text[i]`` and its raw contents."""
    quote = '"""' if text.startswith('"""', i) else '"'
    j = i + len(quote)
    while j < len(text) and not text.startswith(quote, j):
        if text[j] == "\\":
            j += 2
        elif text.startswith("$(", j):
            j = _skip_brackets(text, j + 1)
        else:
            j += 1
    return j + len(quote), text[i + len(quote) : j]


def _skip_brackets(text: str, i: int) -> int:
    """End of the bracketed expression starting at ``text[i]`` (in a string)."""
    depth = 0
    while i < len(text):
        if text[i] == '"':
            i = _skip_string(text, i)[0]
            continue
        depth += text[i] in "([{"
        depth -= text[i] in ")]}"
        i += 1
        if depth == 0:
            break
    return i


def _tokens(text: str) -> list[tuple[str, str]]:
    """``(kind, value)`` tokens of Julia source: word, macro, string (raw
    contents), open, close, newline (also ``;``) and other; no comments."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        c = text[i]
        word = _WORD.match(text, i)
        if c in " \t\r":
            i += 1
        elif text.startswith("#=", i):  # block comments nest
            depth, i = 1, i + 2
            while i < len(text) and depth:
                depth += text.startswith("#=", i) - text.startswith("=#", i)
                i += 2 if text.startswith(("#=", "=#"), i) else 1
        elif c == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif c == '"':
            i, raw = _skip_string(text, i)
            out.append(("string", raw))
        elif _CHAR.match(text, i) and not (out and out[-1][0] in ("word", "close")):
            i = _CHAR.match(text, i).end()  # a character, not an adjoint
            out.append(("other", "char"))
        elif c == "@" and _MACRO.match(text, i):
            m = _MACRO.match(text, i)
            out.append(("macro", m.group()))
            i = m.end()
        elif word:
            out.append(("word", word.group()))
            i = word.end()
        else:
            kind = "newline" if c in "\n;" else "other"
            kind = "open" if c in "([{" else "close" if c in ")]}" else kind
            out.append((kind, c))
            i += 1
    return out


def _literal_name(tokens: list[tuple[str, str]], i: int) -> str | None:
    """The first string-literal argument of the @testset at ``tokens[i - 1]``
    (``None`` if there is none: an interpolated name is not a literal)."""
    depth, previous = 0, None
    for kind, value in tokens[i:]:
        if depth == 0 and (kind == "newline" or value in ("begin", "for", "let")):
            return None
        if kind == "string" and depth == 0 and previous != "=":
            if "$" not in _ESCAPE.sub("", value):
                return _ESCAPE.sub(_unescape, value)
        depth += (kind == "open") - (kind == "close")
        previous = value
    return None


def testset_names(path: str | Path) -> list[str]:
    """Names of the top-level ``@testset "name"`` blocks of a Julia test file
    (read without Julia, so pytest can list them even where Julia is absent);
    a testset may sit in a top-level ``try``/``begin``/``let``/macro wrapper.

    Returns:
        The names, in file order (a testset whose name is not a string
        literal, or interpolates, is not listed).

    Raises:
        FileNotFoundError: ``path`` does not exist (as ``Path.read_text``;
            other ``OSError`` subclasses likewise).

    Example::

        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "rules_test.jl"
        >>> _ = path.write_text('''using Test
        ... @testset "sum" begin @test sum([1, 2]) == 3 end
        ... @testset "prod" begin @test prod([2, 3]) == 6 end
        ... ''', encoding="utf-8")
        >>> testset_names(path)
        ['sum', 'prod']
    """
    tokens = _tokens(Path(path).read_text(encoding="utf-8"))
    names: list[str] = []
    blocks = brackets = 0
    statement_start, searching = True, False
    for i, (kind, value) in enumerate(tokens):
        top = blocks == 0 and brackets == 0
        if top and kind == "newline":
            statement_start = True
            continue
        if top and statement_start:
            statement_start = False
            searching = kind == "macro" or value in _WRAPPERS
        if searching and value == "@testset":
            searching = False
            name = _literal_name(tokens, i + 1)
            if name is not None:
                names.append(name)
        brackets += (kind == "open") - (kind == "close" and brackets > 0)
        if kind == "word" and brackets == 0:
            after = tokens[i + 1][1] if i + 1 < len(tokens) else ""
            if value in _OPENERS or (
                value in ("abstract", "primitive") and after == "type"
            ):
                blocks += 1
            elif value == "end" and blocks > 0:
                blocks -= 1
    return names


def julia_testset_names(path: str | Path) -> list[str]:
    """The same names as Julia's split of the file finds them (starts Julia)."""
    return [str(n) for n in _julia.call("julia tests", "testset_names", str(path))]


def missing_test_packages() -> list[str]:
    """The Julia test packages not installed in pyspectral's Julia environment.

    Checks :data:`TEST_PACKAGES`; ``python -m pyspectral install-julia
    --tests`` installs what is missing. Starts Julia.

    Returns:
        The missing package names (empty when all are installed).

    Raises:
        BackendError: Julia cannot start here (not installed).
        JuliaError: an error inside Julia.

    Example (needs the Julia backend)::

        >>> import pyspectral as ps
        >>> missing = ps.julia.missing_test_packages()
        >>> set(missing) <= set(ps.julia.TEST_PACKAGES)
        True
    """
    # A tuple: juliacall passes it as a Tuple of Strings (a list would arrive as
    # PyList{Py}, whose elements String() cannot convert).
    names = tuple(TEST_PACKAGES)
    return [str(p) for p in _julia.call("julia tests", "missing_packages", names)]


def run_testset(path: str | Path, name: str) -> tuple[int, list[str]]:
    """Run one top-level ``@testset`` of ``path`` in Julia; ``(passed, failures)``
    with each failure as Julia prints it (message and location).

    The file's other top-level code (``using``, helper definitions) runs
    first, once per file, in a module of its own; the other testsets do not
    run. Failed and errored tests are returned, not raised.

    Raises:
        BackendError: Julia cannot start here (not installed).
        InputError: the file has no top-level ``@testset`` of that name, or
            a top-level expression wraps more than one (Julia's
            ``ArgumentError``).
        JuliaError: the file's setup code fails in Julia.

    Example (needs the Julia backend)::

        >>> import tempfile, pyspectral as ps
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "rules_test.jl"
        >>> _ = path.write_text('''using Test
        ... @testset "sum" begin @test sum([1, 2]) == 3 end
        ... @testset "wrong" begin @test 1 + 1 == 3 end
        ... ''', encoding="utf-8")
        >>> ps.julia.run_testset(path, "sum")
        (1, [])
        >>> passed, failures = ps.julia.run_testset(path, "wrong")
        >>> passed, len(failures)
        (0, 1)
    """
    passed, failures = _julia.call(
        f"julia test {name!r}", "run_testset", str(Path(path).resolve()), name
    )
    return int(passed), [str(f) for f in failures]


def run_tests(path: str | Path | None = None) -> bool:
    """Run every top-level ``@testset`` of a Julia test file (default: the
    PySpectral package tests), print a summary, return True if all passed.

    One line per testset (``name: N passed, ok`` or ``K FAILED``, then each
    failure); ``python -m pyspectral test-julia [file]`` runs this, and
    pytest runs the package's testsets as items. The package tests take
    minutes.

    Raises:
        BackendError: Julia cannot start here, or the test packages
            (:data:`TEST_PACKAGES`) are not installed.
        InputError: a top-level expression wraps more than one ``@testset``.
        JuliaError: the file's setup code fails in Julia.

    Example (needs the Julia backend and its test packages)::

        >>> import tempfile, pyspectral as ps
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "rules_test.jl"
        >>> _ = path.write_text('''using Test
        ... @testset "sum" begin @test sum([1, 2]) == 3 end
        ... ''', encoding="utf-8")
        >>> ps.julia.run_tests(path)
        sum: 1 passed, ok
        True
    """
    path = Path(path) if path is not None else PACKAGE_TESTS / "runtests.jl"
    missing = missing_test_packages()
    if missing:
        raise BackendError(
            f"the Julia test packages {missing} are not installed; run "
            "`python -m pyspectral install-julia --tests`"
        )
    ok = True
    for name in testset_names(path):
        passed, failures = run_testset(path, name)
        status = "ok" if not failures else f"{len(failures)} FAILED"
        print(f"{name}: {passed} passed, {status}")
        for f in failures:
            print("  " + f.replace("\n", "\n  "))
        ok = ok and not failures
    return ok
