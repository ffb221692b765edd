"""Every public function and class documents itself, and its example runs.

The public names are those of ``pyspectral.__all__`` and
``pyspectral.julia.__all__`` (what docs/api.md documents; tests/test_docs.py
checks that page covers them), less the module ``julia`` and the data
(``__version__``, ``PACKAGE_TESTS``, ``TEST_PACKAGES``). For each:

- its docstring has an example (``>>>``), run here as a doctest
  (``NORMALIZE_WHITESPACE | ELLIPSIS``, torch seeded); an example that
  needs Julia says so in its docstring and skips, saying why, where the
  Julia backend is not usable;
- a function or class that can raise has a ``Raises:`` section (or says it
  raises nothing), naming real exception classes; an exception or warning
  class says by what and when it is raised or warned;
- the decompositions state shapes (``(*, m, n)``) and dtypes.

A public function added without such a docstring fails here.
"""

from __future__ import annotations

import builtins
import doctest
import io
import re
import sys
import typing
import warnings

import pytest
import torch
from _julia import REASON
from _julia import USABLE as JULIA

import pyspectral as ps

# The examples that call Julia (``function`` and what it returns, ``include``,
# the test runners, the JuliaError it raises); every other example runs
# without it. "tests": also needs the Julia test packages.
NEEDS_JULIA = {
    "JuliaError": "julia",
    "julia.function": "julia",
    "julia.JuliaFunction": "julia",
    "julia.include": "julia",
    "julia.missing_test_packages": "julia",
    "julia.run_testset": "julia",
    "julia.run_tests": "tests",
}

# Functions taking a matrix (``A`` or ``op``): they state shapes and dtypes.
DECOMPOSITIONS = (
    "svd",
    "svdvals",
    "svd_function",
    "eigh",
    "eigvalsh",
    "matrix_function",
    "svd_topk",
    "eigh_topk",
)


def public_objects() -> list[tuple[str, object]]:
    """``(name, object)`` for every public function and class."""
    out = []
    for prefix, module in (("", ps), ("julia.", ps.julia)):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not isinstance(obj, type(ps)):
                out.append((prefix + name, obj))
    return out


PUBLIC = public_objects()


def is_exception(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseException)


def is_result_tuple(obj: object) -> bool:
    """A named tuple of results (``SVDResult``, ...): it raises nothing."""
    return isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields")


def doctests() -> list[tuple[str, doctest.DocTest]]:
    finder = doctest.DocTestFinder(recurse=False)
    out = []
    for name, obj in PUBLIC:
        module = sys.modules[obj.__module__]
        for test in finder.find(obj, name, module=module, globs=vars(module)):
            if test.examples:
                out.append((name, test))
    return out


DOCTESTS = doctests()


def test_the_collectors_see_every_public_name():
    """Guard against collectors that silently find nothing: the public
    callables are all of ``__all__`` but the module and the data, and each
    has exactly one docstring with examples."""
    data = {"__version__", "julia", "PACKAGE_TESTS", "TEST_PACKAGES"}
    expected = len(ps.__all__) + len(ps.julia.__all__) - len(data)
    assert len(PUBLIC) == expected
    assert len(PUBLIC) >= 35  # 30 in pyspectral, 7 in pyspectral.julia today
    assert sorted(name for name, _ in DOCTESTS) == sorted(name for name, _ in PUBLIC)
    assert sum(len(t.examples) for _, t in DOCTESTS) >= 3 * len(PUBLIC)


def skip_reason(name: str) -> str | None:
    need = NEEDS_JULIA.get(name)
    if need is None:
        return None
    if not JULIA:
        return f"the example of {name} needs the Julia backend: {REASON}"
    if need == "tests":
        missing = ps.julia.missing_test_packages()
        if missing:
            return f"the example of {name} needs the Julia test packages {missing}"
    return None


@pytest.mark.parametrize("test", [t for _, t in DOCTESTS], ids=[n for n, _ in DOCTESTS])
def test_docstring_example(test: doctest.DocTest):
    reason = skip_reason(test.name)
    if reason:
        pytest.skip(reason)
    torch.manual_seed(0)
    test.globs = dict(test.globs)  # examples leave their names in a copy
    flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    runner = doctest.DocTestRunner(optionflags=flags)
    out = io.StringIO()
    result = runner.run(test, out=out.write, clear_globs=True)
    assert result.attempted == len(test.examples)
    assert result.failed == 0, out.getvalue()


@pytest.mark.parametrize("test", [t for _, t in DOCTESTS], ids=[n for n, _ in DOCTESTS])
def test_docstring_example_compiles(test: doctest.DocTest):
    """Every example is valid Python, also those skipped here for want of
    Julia."""
    for example in test.examples:
        compile(example.source, f"<{test.name}:{example.lineno}>", "single")


def test_julia_examples_say_they_need_julia():
    """An example skipped without Julia tells the reader it needs Julia, and
    every name that needs it is public."""
    names = dict(PUBLIC)
    assert set(NEEDS_JULIA) <= set(names)
    for name in NEEDS_JULIA:
        assert "needs the Julia backend" in names[name].__doc__, name


def test_examples_without_julia_do_not_start_it():
    """The examples that are not marked as needing Julia run where it is
    absent: none of them mentions the Julia-only calls."""
    julia_calls = re.compile(
        r"backend=\"julia\"|julia\.(function|include|run_tests?|run_testset|"
        r"missing_test_packages)\("
    )
    for name, test in DOCTESTS:
        if name in NEEDS_JULIA:
            continue
        for example in test.examples:
            assert not julia_calls.search(example.source), (name, example.source)


RAISES = re.compile(r"^(?P<indent>[ ]*)Raises:[ ]*\n", re.MULTILINE)


def raised_names(doc: str) -> list[str]:
    """The exception names of a docstring's ``Raises:`` section."""
    m = RAISES.search(doc)
    if m is None:
        return []
    entry = re.compile(rf"^{m['indent']}    (?P<name>[\w.]+):")
    names = []
    for line in doc[m.end() :].splitlines():
        if line.strip() and not line.startswith(m["indent"] + "    "):
            break  # the section ends at the next line indented as its header
        e = entry.match(line)
        if e:
            names.append(e["name"])
    return names


def resolve_exception(name: str) -> type | None:
    obj = getattr(ps, name, None) or getattr(builtins, name, None)
    return obj if isinstance(obj, type) and issubclass(obj, BaseException) else None


@pytest.mark.parametrize("name, obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_docstring_states_errors_and_example(name: str, obj: object):
    doc = obj.__doc__
    assert doc and doc.strip(), f"{name} has no docstring"
    if is_result_tuple(obj):
        assert not doc.startswith(f"{obj.__name__}("), f"{name}: the default doc"
    assert ">>>" in doc, f"{name}: no example (>>>) in its docstring"
    if is_exception(obj):
        assert re.search(r"\b(Raised|Warned)\b", doc), (
            f"{name}: does not say when it is raised or warned"
        )
        return
    if is_result_tuple(obj):
        return  # a named tuple of results: nothing to raise
    if re.search(r"raises nothing", doc, re.IGNORECASE):
        return
    names = raised_names(doc)
    assert names, f"{name}: no Raises: section (or 'raises nothing')"
    unknown = [n for n in names if resolve_exception(n) is None]
    assert not unknown, f"{name}: Raises: names no exception class: {unknown}"


@pytest.mark.parametrize("name", DECOMPOSITIONS)
def test_decompositions_state_shapes_and_dtypes(name: str):
    doc = getattr(ps, name).__doc__
    assert "(*, " in doc, f"{name}: no shape with batch dimensions (*, m, n)"
    assert re.search(r"float32|dtypes", doc, re.IGNORECASE), f"{name}: no dtypes"
    assert "Returns:" in doc or name in ("svdvals", "eigvalsh"), name


def test_raises_sections_are_parsed():
    """The parser behind the checks above reads a section as napoleon does."""
    doc = """Summary.

    Raises:
        InputError: one
            continued.
        DtypeError: two.

    Example::

        >>> 1
        1
    """
    assert raised_names(doc) == ["InputError", "DtypeError"]
    assert raised_names("No section.") == []
    assert resolve_exception("FileNotFoundError") is FileNotFoundError
    assert resolve_exception("svd") is None


def test_result_tuples_are_recognised():
    assert is_result_tuple(ps.SVDResult) and is_result_tuple(ps.TruncatedEighResult)
    assert not is_result_tuple(ps.LinearOperator)
    assert typing.get_type_hints(ps.SVDResult)  # still a typed NamedTuple
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ps.SVDResult(*(torch.zeros(1),) * 3).S.shape == (1,)
