"""Julia rule tests from Python: the names of a test file's top-level
``@testset`` blocks (read without Julia, so pytest can list them anywhere),
and running them one by one in Julia (``python -m pyspectral test-julia``,
the pytest items of tests/test_julia_rules.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..exceptions import BackendError
from ._bridge import call
from ._sysimage import package_dir

#: The bundled PySpectral Julia package's test folder (its ``runtests.jl``
#: is what :func:`run_tests` runs by default), a ``pathlib.Path``.
PACKAGE_TESTS = package_dir() / "test"
#: The Julia packages the Julia tests use (``python -m pyspectral
#: install-julia --tests`` installs them; see :func:`missing_test_packages`).
TEST_PACKAGES = ("Test", "Random", "ChainRulesTestUtils", "FiniteDifferences", "Zygote")


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
    return [str(n) for n in call("julia tests", "testset_names", str(path))]


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
    return [str(p) for p in call("julia tests", "missing_packages", names)]


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
    passed, failures = call(
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
