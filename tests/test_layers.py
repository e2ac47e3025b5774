"""The house's layering, enforced: imports run downward, at the top of the file.

``FLOORS`` is the map of docs/architecture.md as data: each unit of the package
(a folder, or a module standing alone) and its floor.  The rules:

1. A module imports modules of its own unit, or of units on LOWER floors; two
   units on one floor never import each other (the format adapters share one).
2. The module graph has no circle, within a unit too.
3. An import of one of the package's own modules stands at the top of its file
   (under ``if TYPE_CHECKING:``, ``try:`` or ``with`` at most), never inside a
   function or class: such an import hides a circle.
4. What may be imported lazily (inside a function): the standard library, the
   optional third-party dependencies (onnx and its protobuf, matplotlib, dask,
   torch, zarr) and ml_dtypes in the one accessor ``_core.table.load_ml_dtypes``.
   At the top of a module: the standard library, numpy and the package itself,
   and an optional door's own dependency (``kiln_np.dask`` imports dask).
   Under ``if TYPE_CHECKING:`` any third-party name (it never runs).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import kiln_np

SRC = Path(kiln_np.__file__).parent
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

FLOORS: dict[str, int] = {
    "_version": 0,
    "_core": 0,
    "_kernels": 1,
    "_codec": 2,
    "_quants": 2,
    "_schemes": 2,
    "_files": 3,
    "_weights": 4,
    "_convert": 5,
    "onnx": 6,
    "safetensors": 6,
    "gguf": 6,
    "kilndir": 6,
    "zarr": 6,
    "formats": 7,
    "mx": 8,
    "_explore": 9,
    "dask": 10,
    "torch": 10,
    "cli": 11,
    "": 12,  # kiln_np/__init__.py: the public face, re-exports only
}
"""Unit (the first name below ``kiln_np``) -> floor, bottom up."""

LAZY_THIRD_PARTY = frozenset(
    {
        "onnx",
        "google",
        "matplotlib",
        "dask",
        "distributed",
        "torch",
        "zarr",
        "fsspec",
        "aiohttp",
        "tokenizers",
    }
)
TOP_THIRD_PARTY = frozenset({"numpy"})
DOORS: dict[str, frozenset[str]] = {
    "dask": frozenset({"dask"}),
    "torch": frozenset({"torch"}),
    "zarr": frozenset({"zarr"}),
}
"""Optional doors: a leaf unit that exists to meet one optional dependency
imports it at its top (nothing below imports the door)."""
ML_DTYPES_ACCESSOR = ("_core/table.py", "load_ml_dtypes")


@dataclass(frozen=True)
class Import:
    source: str  # dotted module that imports
    target: str  # dotted module imported (kiln_np...), or a top-level third-party name
    line: int
    function: str | None  # the enclosing function or class, None at the top of the file
    typing_only: bool  # under ``if TYPE_CHECKING:``: never runs


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _is_module(root: Path, dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    base = root / rel
    return (base / "__init__.py").is_file() or any(
        p.suffix in {".py", ".pyi", ".so", ".pyd"} for p in base.parent.glob(f"{base.name}.*")
    )


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every import statement of ``path``, with what it imports resolved."""
    here = _module_name(path, root)
    package = here if _is_package(path) else here.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, function: str | None, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner, typed = function, typing_only
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.name if function is None else f"{function}.{child.name}"
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                typed = not ast.unparse(child.test).startswith("not ")
            if isinstance(child, ast.Import):
                found.extend(
                    Import(here, a.name, child.lineno, function, typing_only) for a in child.names
                )
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                for alias in child.names:
                    sub = f"{module}.{alias.name}"
                    is_sub = module.startswith(root.name) and _is_module(root, sub)
                    target = sub if is_sub else module
                    found.append(Import(here, target, child.lineno, function, typing_only))
            visit(child, inner, typed)

    visit(ast.parse(path.read_text()), None, False)
    return found


def _unit(dotted: str, root_name: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == root_name else ""


def layering_errors(root: Path, floors: dict[str, int] = FLOORS) -> list[str]:
    """What breaks the four rules in the package at ``root``, one line each."""
    errors: list[str] = []
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        here = _module_name(path, root)
        graph.setdefault(here, set())
        unit = _unit(here, root.name)
        if unit not in floors:
            errors.append(f"{rel}: unit {unit!r} has no floor in FLOORS (docs/architecture.md)")
            continue
        for imp in imports_of(path, root):
            top = imp.target.split(".")[0]
            where = f"{rel}:{imp.line}"
            if top == root.name:
                target_unit = _unit(imp.target, root.name)
                if imp.target == root.name and unit == "":
                    continue  # the face's own lazy re-exports (importlib, by name)
                if imp.function is not None:
                    errors.append(
                        f"{where}: imports {imp.target} inside {imp.function}(): "
                        "a package module is imported at the top of the file"
                    )
                if target_unit not in floors:
                    errors.append(f"{where}: imports {imp.target}, whose unit has no floor")
                elif target_unit != unit and floors[target_unit] >= floors[unit]:
                    errors.append(
                        f"{where}: {unit or 'kiln_np'} (floor {floors[unit]}) imports "
                        f"{imp.target} (floor {floors[target_unit]}): imports run downward"
                    )
                graph[here].add(imp.target)
            elif top in sys.stdlib_module_names or top == "__future__" or imp.typing_only:
                continue
            elif imp.function is None:
                if top not in TOP_THIRD_PARTY | DOORS.get(unit, frozenset()):
                    errors.append(f"{where}: imports {top} at the top of the file")
            elif top == "ml_dtypes":
                if (rel, imp.function) != ML_DTYPES_ACCESSOR:
                    errors.append(
                        f"{where}: imports ml_dtypes in {imp.function}(): "
                        "only _core.table.load_ml_dtypes() does"
                    )
            elif top not in LAZY_THIRD_PARTY:
                errors.append(f"{where}: imports {top} lazily: not an optional dependency")
    errors += [f"import circle: {' -> '.join(c)}" for c in _circles(graph)]
    return errors


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            # A package's parent is always imported first: not an edge of a circle.
            if v.startswith(w + "."):
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append([*sorted(group), min(group)])

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return circles


def test_imports_run_downward_and_at_the_top() -> None:
    assert layering_errors(SRC) == []


def test_the_layering_check_can_fail(tmp_path: Path) -> None:
    root = tmp_path / "kiln_np"
    for rel, text in {
        "__init__.py": "from ._codec import f\n",
        "_core/__init__.py": "",
        "_core/table.py": "import ml_dtypes\n\ndef load_ml_dtypes():\n    import ml_dtypes\n",
        "_core/checks.py": "from kiln_np._codec import f\n",  # upward
        "_codec.py": "from kiln_np._core import checks\n\ndef f():\n    from kiln_np import gguf\n",
        "gguf/__init__.py": "from kiln_np.safetensors import g\n",  # same floor
        "safetensors/__init__.py": "def g():\n    import ml_dtypes\n    import requests\n",
        "newthing.py": "",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    errors = layering_errors(root)
    expected = [
        r"^_codec.py:4: imports kiln_np.gguf inside f\(\)",
        r"^_codec.py:4: _codec \(floor 2\) imports kiln_np.gguf \(floor 6\)",
        r"^_core/checks.py:1: _core \(floor 0\) imports kiln_np._codec \(floor 2\)",
        r"^_core/table.py:1: imports ml_dtypes at the top of the file",
        r"^gguf/__init__.py:1: gguf \(floor 6\) imports kiln_np.safetensors \(floor 6\)",
        r"^newthing.py: unit 'newthing' has no floor",
        r"^safetensors/__init__.py:2: imports ml_dtypes in g\(\)",
        r"^safetensors/__init__.py:3: imports requests lazily",
        r"^import circle: kiln_np._codec -> kiln_np._core.checks -> kiln_np._codec",
    ]
    assert len(errors) == len(expected), "\n".join(errors)
    for pattern in expected:
        assert sum(bool(re.match(pattern, e)) for e in errors) == 1, (pattern, errors)


def _documented_floors() -> dict[str, int]:
    """The units and floors of docs/architecture.md's layer table."""
    text = DOC.read_text().split("<!-- floors -->")[1]
    floors: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        for unit in re.findall(r"`([^`]+)`", cells[1]):
            floors[unit.removeprefix("kiln_np.").removesuffix("/").removesuffix(".py")] = int(
                cells[0]
            )
    return {("" if u == "kiln_np" else u): f for u, f in floors.items()}


def test_the_architecture_doc_shows_these_floors() -> None:
    assert _documented_floors() == FLOORS


@pytest.mark.parametrize("unit", sorted(u for u in FLOORS if u))
def test_every_unit_exists(unit: str) -> None:
    assert (SRC / unit).is_dir() or (SRC / f"{unit}.py").is_file()


def _imports_native(node: ast.AST) -> bool:
    """Whether ``node`` imports the compiled module (``kiln_np._kernels.native``)."""
    if isinstance(node, ast.Import):
        return any("native" in a.name.split(".") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        module = (node.module or "").split(".")
        return "native" in module or any(a.name == "native" for a in node.names)
    return False


def test_only_the_kernels_import_the_compiled_module() -> None:
    # Issue 34: a kernel is a row of _kernels' table; callers ask for the kernel,
    # never for the compiled module.
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] != "_kernels"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_native(node)
    ]
    assert found == []
    assert _imports_native(ast.parse("from kiln_np._kernels import native").body[0])


def test_the_format_table_stays_a_table() -> None:
    # Issue 34: formats.py is the table of rows and the doors that walk it (at most
    # 300 lines); what a door needs beyond walking the rows lives in a unit below.
    assert len((SRC / "formats.py").read_text().splitlines()) <= 300
