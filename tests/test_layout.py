"""The package layout: no import cycle among pyspectral's modules, the math
layers (``pullbacks/``, ``forward/``) import nothing above them, and they
mirror the Julia package file by file and name by name.

Imports are read from the source with ``ast`` (function-level imports
included: a lazy import is still an import cycle, only a hidden one).
"""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "pyspectral"
JULIA_SRC = ROOT / "julia" / "PySpectral" / "src"

# What the math layers may import from pyspectral (besides each other): the
# shared mathematics (common/), settings, validation, warnings, autograd
# plumbing and the spectral functions; never an operation module or a backend.
COMMON = "pyspectral.common"
BASE = {
    "pyspectral._autograd",
    "pyspectral._discarded",  # the svd's exact second-order term (as _second_order)
    "pyspectral._fns",
    "pyspectral._linalg",  # torch's own functions, bound once (a leaf)
    "pyspectral._second_order",
    "pyspectral._settings",
    "pyspectral._validation",
    "pyspectral._warnings",
    "pyspectral.exceptions",
}
LAYERS = ("pyspectral.pullbacks", "pyspectral.forward")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The pyspectral modules that ``path`` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(_without_type_checking(ast.parse(path.read_text()))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from X import Y`: Y is a module of its own when X.Y is one
            subs = {f"{base}.{a.name}" for a in node.names} & known
            found.update(subs or {base})
    return {m for m in found if m in known}


def _without_type_checking(tree: ast.Module) -> ast.Module:
    """``tree`` without its ``if TYPE_CHECKING:`` blocks: imports for
    annotations only, never executed, so neither a cycle nor a dependency."""
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                setattr(node, field, [s for s in block if not _type_checking(s)])
    return tree


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "pyspectral.pullbacks.svd" in graph["pyspectral.svd"]  # from .x.y import
    assert "pyspectral.julia._probe" in graph["pyspectral.julia"]  # from . import x
    assert "pyspectral._demo" in graph["pyspectral.__main__"]  # inside a function
    assert "pyspectral" in graph["pyspectral._demo"]  # import pyspectral as ps
    assert "pyspectral.pullbacks.eigh" in graph["pyspectral.pullbacks.matfun"]


def test_no_import_cycle() -> None:
    try:
        tuple(TopologicalSorter(import_graph()).static_order())
    except CycleError as err:
        pytest.fail(f"import cycle among pyspectral's modules: {err.args[1]}")


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


def in_layers(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in LAYERS)


def in_common(name: str) -> bool:
    return name == COMMON or name.startswith(COMMON + ".")


@pytest.mark.parametrize(
    "name", sorted(m for m in modules() if in_layers(m)), ids=lambda m: m
)
def test_math_layers_import_nothing_above_them(name: str) -> None:
    graph = import_graph()
    above = {
        m for m in reachable(graph, name) if not (in_layers(m) or in_common(m))
    } - BASE
    assert not above, f"{name} reaches {sorted(above)}; allowed: {sorted(BASE)}"
    third_party = {
        a.names[0].name.split(".")[0] if isinstance(a, ast.Import) else a.module
        for a in ast.walk(ast.parse(modules()[name].read_text()))
        if isinstance(a, (ast.Import, ast.ImportFrom)) and not getattr(a, "level", 0)
    }
    assert third_party <= {"__future__", "typing", "warnings", "torch"}, third_party


def stems(folder: Path, suffix: str) -> set[str]:
    return {p.stem for p in folder.glob(f"*{suffix}") if p.stem != "__init__"}


@pytest.mark.parametrize(
    "name", sorted(m for m in modules() if in_common(m)), ids=lambda m: m
)
def test_common_imports_only_warnings_and_exceptions(name: str) -> None:
    # The shared mathematics sits below everything else (as src/common/ in
    # Julia): settings, validation and autograd build on it, not it on them.
    # (_linalg: torch's own functions, bound once, a leaf)
    allowed = {"pyspectral._linalg", "pyspectral._warnings", "pyspectral.exceptions"}
    above = {m for m in reachable(import_graph(), name) if not in_common(m)}
    assert above <= allowed, f"{name} reaches {sorted(above - allowed)}"


def test_common_files_mirror_julia() -> None:
    assert stems(PKG / "common", ".py") == stems(JULIA_SRC / "common", ".jl")


def test_each_common_module_has_its_test_module() -> None:
    tests = stems(ROOT / "tests", ".py")
    missing = {s for s in stems(PKG / "common", ".py") if f"test_{s}" not in tests}
    assert not missing, f"no tests/test_<name>.py for common/{sorted(missing)}"


def test_pullback_files_mirror_julia() -> None:
    assert stems(PKG / "pullbacks", ".py") == stems(JULIA_SRC / "pullbacks", ".jl")


def test_forward_files_exist_in_julia() -> None:
    # svd/eigh forwards are single torch.linalg calls in Python; only the
    # iterative one needs a file, and it has Julia's name.
    python = stems(PKG / "forward", ".py")
    assert python and python <= stems(JULIA_SRC / "forward", ".jl")


# Julia pullbacks whose Python counterpart has another name (documented gaps).
PYTHON_NAME = {
    # svd_pullback with only gS given is the svdvals pullback
    "svdvals_pullback": "svd_pullback",
    "svd_trunc_pullback": "truncated_svd_pullback",
    "eigh_trunc_pullback": "truncated_eigh_pullback",
}


def julia_exports() -> set[str]:
    text = (JULIA_SRC / "PySpectral.jl").read_text()
    names: set[str] = set()
    for block in re.findall(r"^export (.*?)(?=\n\S|\Z)", text, re.M | re.S):
        names.update(n.strip() for n in block.replace("\n", " ").split(","))
    return names


def python_defs(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize(
    "stem", sorted(stems(JULIA_SRC / "pullbacks", ".jl")), ids=lambda s: s
)
def test_each_julia_pullback_has_its_python_twin_in_the_same_file(stem: str) -> None:
    text = (JULIA_SRC / "pullbacks" / f"{stem}.jl").read_text()
    defined = set(re.findall(r"^function (\w+!)\(", text, re.M))
    exported = sorted(defined & julia_exports())
    assert exported, f"pullbacks/{stem}.jl defines no exported pullback"
    wanted = {PYTHON_NAME.get(n[:-1], n[:-1]) for n in exported}
    missing = wanted - python_defs(PKG / "pullbacks" / f"{stem}.py")
    assert not missing, f"pyspectral/pullbacks/{stem}.py lacks {sorted(missing)}"


# The Julia backend lives in one room, pyspectral/julia/: its bridge is the only
# module that imports juliacall (the probe starts Julia early by importlib, with
# no import of its own); no module outside the room reaches juliacall; the
# probe, which runs before torch is imported, imports neither.
JULIA_ROOM = "pyspectral.julia"


def third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_bridge_imports_juliacall() -> None:
    importers = {
        name
        for name, path in modules().items()
        if "juliacall" in third_party_imports(path)
    }
    assert importers == {"pyspectral.julia._bridge"}, importers


def test_the_julia_backend_is_one_room() -> None:
    room = {m for m in modules() if m == JULIA_ROOM or m.startswith(JULIA_ROOM + ".")}
    assert {"pyspectral.julia._bridge", "pyspectral.julia._probe"} <= room
    assert (PKG / "julia" / "glue.jl").is_file()
    stray = [p.name for p in PKG.glob("*julia*") if p.name != "julia"]
    assert not stray, f"Julia modules outside julia/: {stray}"
    # nothing in the room imports the operation modules that use it
    graph = import_graph()
    for name in room:
        outside = {m for m in graph[name] if m.startswith("pyspectral.")} - room
        assert not outside & {"pyspectral.svd", "pyspectral.eigh", "pyspectral.topk"}


def test_the_probe_imports_neither_torch_nor_juliacall() -> None:
    imported = third_party_imports(PKG / "julia" / "_probe.py")
    assert not imported & {"torch", "juliacall", "numpy"}, imported
    assert import_graph()["pyspectral.julia._probe"] == set()


def test_the_julia_room_starts_julia_before_anything_imports_torch() -> None:
    # pyspectral/__init__.py imports the room first, and the room's __init__
    # runs the probe's start before its first import of a torch-using module.
    top = ast.parse((PKG / "__init__.py").read_text()).body
    first = next(n for n in top if isinstance(n, (ast.Import, ast.ImportFrom)))
    assert ast.unparse(first) == "from . import julia"
    body = ast.parse((PKG / "julia" / "__init__.py").read_text()).body
    kinds = [
        "start"
        if isinstance(n, ast.If) and "start_julia" in ast.unparse(n)
        else ast.unparse(n)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        else None
        for n in body
    ]
    kinds = [k for k in kinds if k is not None]
    assert kinds[:2] == ["from . import _probe", "start"], kinds
