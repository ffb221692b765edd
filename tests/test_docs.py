"""Every code block in README.md and docs/ is run or checked, and the API
reference covers the public API.

Fenced blocks, by language:

- ``python``: executed in order, one namespace per page (a block continues
  the ones above it on the same page); each page starts from
  ``torch.manual_seed(0)``. Warnings are the suite's (an unexpected
  ``GaugeWarning`` is an error).
- ``bash``: every command is checked without being run: ``python -m
  pyspectral ...`` is parsed by pyspectral's own argument parser (a usage
  line such as ``bench [svd|eigh] [--quick]`` in each of its forms), a script
  path must exist and take the options given, a ``pip install`` extra must be
  declared in pyproject.toml.
- ``text`` with the marker ``<!-- test: output-of "python -m pyspectral demo"
  -->``: compared with the real output, numbers masked (pyspectral's column
  must pass, torch's NaN stay NaN).

A block opts out only with a marker comment on the line before it, stating
why: ``<!-- test: skip "reason" -->``, ``<!-- test: julia -->`` (runs
where the Julia backend is usable, else skips saying why), or
``<!-- test: requires quimb, autoray -->`` (runs where those modules import,
else skips naming them: the ``clients`` extra). A block of any other
language, or unmarked ``text``, fails: mark it.
MyST directives (```` ```{figure} ````) are not code blocks.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
import torch
from _julia import REASON
from _julia import USABLE as JULIA

import pyspectral as ps

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")],
    key=lambda p: str(p.relative_to(ROOT)),
)
PAGES = [p for p in PAGES if "_build" not in p.parts and "gallery" not in p.parts]

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"^\s*<!--\s*test:\s*(?P<body>.*?)\s*-->\s*$")
PYTHON, BASH, TEXT = {"python", "py"}, {"bash", "sh", "shell"}, {"text", ""}


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the first line of code
    lang: str
    code: str
    marker: str | None = None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page (not MyST directives)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m["fence"], m["info"].strip()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if not info.startswith("{"):  # ```{figure} etc. are directives
            prev = i - 1
            while prev >= 0 and not lines[prev].strip():
                prev -= 1
            marker = MARKER.match(lines[prev]) if prev >= 0 else None
            lang = info.split()[0].lower() if info else ""
            indent = len(m["indent"])
            code = "\n".join(line[indent:] for line in lines[i + 1 : end])
            out.append(Block(path, i + 2, lang, code, marker and marker["body"]))
        i = end + 1
    return out


ALL = [b for p in PAGES for b in blocks(p)]


def test_the_collector_sees_the_pages():
    """Guard against a collector that silently finds nothing."""
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/index.md", "docs/guide/topk.md"} <= names
    assert sum(b.lang in PYTHON for b in ALL) >= 20
    assert sum(b.lang in BASH for b in ALL) >= 8


# ------------------------------------------------------------------ markers


def skip_reason(block: Block) -> str | None:
    """Why this block does not run here, or None."""
    if block.marker is None or block.marker.startswith("output-of"):
        return None
    if block.marker == "julia":
        return None if JULIA else f"needs the Julia backend: {REASON}"
    m = re.fullmatch(r"requires\s+(?P<mods>[\w.]+(?:\s*,\s*[\w.]+)*)", block.marker)
    if m is not None:
        missing = [
            mod
            for mod in re.split(r"\s*,\s*", m["mods"])
            if importlib.util.find_spec(mod) is None
        ]
        return f"needs {', '.join(missing)}, not installed" if missing else None
    m = re.fullmatch(r'skip\s+"(?P<reason>[^"]{10,})"', block.marker)
    if m is None:
        raise AssertionError(
            f"{block.name}: unknown marker {block.marker!r}; use "
            '<!-- test: skip "a reason of 10+ characters" -->, '
            "<!-- test: julia -->, <!-- test: requires module, ... --> or "
            '<!-- test: output-of "command" -->'
        )
    return m["reason"]


# ------------------------------------------------------------------ python


@dataclass
class Page:
    """A page's namespace and how many of its python blocks have run."""

    blocks: list[Block]
    namespace: dict = field(default_factory=dict)
    done: int = 0
    failed: str | None = None


_pages: dict[Path, Page] = {}


def run_through(block: Block) -> None:
    """Run the page's python blocks up to and including ``block`` (those
    before it first, if they have not run: blocks continue each other)."""
    page = _pages.get(block.path)
    if page is None:
        page = _pages[block.path] = Page(
            [b for b in ALL if b.path == block.path and b.lang in PYTHON]
        )
        page.namespace = {"__name__": "__docs__"}
        torch.manual_seed(0)
    index = page.blocks.index(block)
    while page.done <= index:
        current = page.blocks[page.done]
        page.done += 1
        if page.failed is not None:
            pytest.fail(f"an earlier block of this page failed: {page.failed}")
        if skip_reason(current) is not None:
            continue
        # Pad with blank lines so that tracebacks give the Markdown file's lines.
        source = "\n" * (current.line - 1) + current.code
        try:
            exec(compile(source, str(current.path), "exec"), page.namespace)
        except BaseException:
            page.failed = current.name
            raise


PY = [b for b in ALL if b.lang in PYTHON]


@pytest.mark.parametrize("block", PY, ids=[b.name for b in PY])
def test_python_block(block: Block):
    reason = skip_reason(block)
    if reason is not None:
        pytest.skip(reason)
    run_through(block)


# ------------------------------------------------------------------ bash


def declared_extras() -> set[str]:
    """The keys of pyproject.toml's [project.optional-dependencies] (read
    without tomllib, which Python 3.9 and 3.10 lack)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1]
    section = re.split(r"^\[", section, maxsplit=1, flags=re.M)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, flags=re.M))


def commands(code: str) -> list[list[str]]:
    """The commands of a bash block: comments dropped, ``&&`` / ``;`` split."""
    out = []
    for raw in code.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"&&|;", line):
            words = shlex.split(part.strip())
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value prefixes
            if words:
                out.append(words)
    return out


def variants(words: list[str]) -> list[list[str]]:
    """A usage line's concrete forms: ``[a|b]`` is a, b or nothing."""
    choices = []
    for w in words:
        if w.startswith("[") and w.endswith("]"):
            choices.append([*w[1:-1].split("|"), None])
        else:
            choices.append([w])
    return [
        [w for w in combo if w is not None] for combo in itertools.product(*choices)
    ]


def check_pyspectral_cli(argv: list[str]) -> None:
    """Parse with pyspectral's own parser; run nothing."""
    from pyspectral import __main__ as cli

    with mock.patch.object(cli, "_run", return_value=0) as run:
        try:
            assert cli.main(argv) == 0
        except SystemExit as err:
            raise AssertionError(
                f"`python -m pyspectral {shlex.join(argv)}` does not parse"
            ) from err
    assert run.called


def check_script(path: str, options: list[str]) -> None:
    script = ROOT / path
    assert script.is_file(), f"no script {path}"
    sources = script.read_text(encoding="utf-8")
    if script.parent.name == "benchmarks":  # shared options live in _timing.py
        sources += (script.parent / "_timing.py").read_text(encoding="utf-8")
    for option in options:
        if option.startswith("--"):
            name = option.split("=", 1)[0]
            assert f'"{name}"' in sources, f"{path} has no option {name}"


def check_command(words: list[str]) -> None:
    if words[0] == "pip" and words[1:2] == ["install"]:
        extras = {e for w in words[2:] for e in re.findall(r"\[([\w,-]+)\]", w)}
        declared = declared_extras()
        for group in extras:
            assert set(group.split(",")) <= declared, f"undeclared extra [{group}]"
        return
    if words[0] != "python":
        return  # other tools (julia's ]-mode, exports) are not checked
    args = words[1:]
    if args[:2] == ["-m", "pyspectral"]:
        for form in variants(args[2:]):
            check_pyspectral_cli(form)
    elif args[:2] == ["-m", "pytest"]:
        for w in args[2:]:
            if not w.startswith("-") and "/" in w:
                assert (ROOT / w.split("::")[0]).exists(), f"no test path {w}"
    elif args[:2] == ["-m", "sphinx"]:
        assert (ROOT / "docs" / "conf.py").is_file()
    elif args and args[0].endswith(".py"):
        if args[0].startswith(("benchmarks/", "docs/", "examples/")):
            check_script(args[0], args[1:])


SH = [b for b in ALL if b.lang in BASH]


@pytest.mark.parametrize("block", SH, ids=[b.name for b in SH])
def test_bash_block(block: Block):
    reason = skip_reason(block)
    if reason is not None:
        pytest.skip(reason)
    found = commands(block.code)
    assert found, f"{block.name}: a bash block with no command"
    for words in found:
        check_command(words)


# ------------------------------------------------------------------ output


NUMBER = re.compile(r"\d+(\.\d+)?(e[-+]?\d+)?|NaN")


def masked(text: str) -> list[str]:
    """Numbers (and NaN) as ``#``, runs of blanks as one: torch's column at an
    exact tie is NaN on some LAPACK kernels and a wrong number on others
    (MKL's AVX-512 path: the complex polar row), so only its shape is compared."""
    return [
        re.sub(r"\s+", " ", NUMBER.sub("#", line)).rstrip()
        for line in text.strip().splitlines()
    ]


OUT = [b for b in ALL if b.lang in TEXT | {"console"}]


@pytest.mark.parametrize("block", OUT, ids=[b.name for b in OUT])
def test_output_block(block: Block):
    reason = skip_reason(block)
    if reason is not None:
        pytest.skip(reason)
    m = re.fullmatch(r'output-of\s+"(?P<cmd>[^"]+)"', block.marker or "")
    assert m, (
        f"{block.name}: a {block.lang or 'plain'} block is neither run nor "
        'compared; mark it <!-- test: output-of "command" --> or skip it with a reason'
    )
    assert m["cmd"] == "python -m pyspectral demo", f"no runner for {m['cmd']!r}"
    from pyspectral import _demo

    buffer = io.StringIO()
    status = _demo.run(0, out=buffer)
    actual = buffer.getvalue()
    assert status == 0
    assert masked(block.code) == masked(actual), actual
    # pyspectral's column (the third) is never NaN, in the docs or here.
    for line in block.code.strip().splitlines() + actual.strip().splitlines():
        columns = re.split(r"\s{2,}", line.strip())
        assert len(columns) < 3 or "NaN" not in columns[2], line


def test_every_block_has_a_known_language():
    unknown = [
        b.name
        for b in ALL
        if b.lang not in PYTHON | BASH | TEXT | {"console"} and b.marker is None
    ]
    assert not unknown, f"blocks neither run nor checked nor marked: {unknown}"


# ------------------------------------------------------------------ API


def api_names() -> list[str]:
    names = [n for n in ps.__all__ if n != "julia"]
    names += [f"julia.{n}" for n in ps.julia.__all__]
    return names


def test_api_reference_covers_the_public_api():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(
        re.findall(r"\.\. (?:auto\w+|py:data):: pyspectral\.([\w.]+)", text)
    )
    missing = [n for n in api_names() if n not in documented]
    assert not missing, f"public names missing from docs/api.md: {missing}"
    stale = [n for n in documented if n not in api_names()]
    assert not stale, f"docs/api.md documents names that are not public: {stale}"


def test_declared_extras_are_read():
    assert {"test", "julia", "docs"} <= declared_extras()


def test_ci_builds_the_docs_with_the_readme_command():
    """The README states one docs build command; .ci/run runs exactly it,
    after the README's test command, and the getting-started page agrees."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(
        r"`(pip install -e \"\.\[docs\]\" && python -m sphinx [^`]+)`", readme
    )
    assert m, "README.md states no docs build command"
    command = m[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert command in ci
    assert ci.index("python -m pytest; }") < ci.index(command)
    guide = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert command in guide
