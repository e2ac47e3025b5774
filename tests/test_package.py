"""The public surface: names, modules, version, typing marker, doctests, imports."""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import pkgutil
from importlib import metadata, resources
from pathlib import Path
from types import ModuleType

import pytest
from _helpers import needs

import kiln_np

SRC = Path(kiln_np.__file__).parent


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in dir(kiln_np) if not n.startswith("_")} - {
        m.name for m in pkgutil.iter_modules(kiln_np.__path__)
    }
    assert set(kiln_np.__all__) - {"__version__"} == public


@pytest.mark.parametrize("name", [n for n in kiln_np.__all__ if n not in {"__version__", "DTYPES"}])
def test_public_objects_say_where_they_live(name: str) -> None:
    # numpy's set_module: a traceback shows kiln_np.KilnError, not kiln_np._core.errors.KilnError.
    assert getattr(kiln_np, name).__module__ == "kiln_np"


def _installed() -> bool:
    try:
        metadata.version("kiln-np")
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _installed(), reason="kiln-np is not installed (a source tree on the path)")
def test_version_matches_metadata() -> None:
    assert kiln_np.__version__ == metadata.version("kiln-np")


def test_typed_and_golden_shipped() -> None:
    root = resources.files("kiln_np")
    assert (root / "py.typed").is_file()
    assert sorted(e.name for e in (root / "golden").iterdir() if e.name.endswith(".json"))


def _is_module(package: Path, name: str) -> bool:
    # A Python module, a package, or a compiled extension (_kernels.cpython-311-....so).
    return (package / name / "__init__.py").is_file() or any(
        p.suffix in {".py", ".pyi", ".so", ".pyd"} for p in package.glob(f"{name}.*")
    )


def _private_imports(path: Path, root: Path = SRC) -> list[str]:
    """``from .x import _name`` (or ``from kiln_np.x import _name``) lines, where
    ``_name`` is not a module (a private module may be imported; a private name
    of another module may not)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        if node.level:  # from ._x import y
            package = path.parents[node.level - 1].joinpath(*module.split("."))
        elif module.split(".")[0] == root.name:  # from kiln_np._x import y
            package = root.joinpath(*module.split(".")[1:])
        else:
            continue
        found += [
            f"{path.relative_to(root)}:{node.lineno}: from {'.' * node.level}"
            f"{node.module or ''} import {alias.name}"
            for alias in node.names
            if alias.name.startswith("_")
            and not alias.name.startswith("__")
            and not _is_module(package, alias.name)
        ]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    # A leading underscore means "used only in this module"; shared helpers
    # live in internal modules (_checks, _table, _payload) under public names.
    assert [hit for path in sorted(SRC.rglob("*.py")) for hit in _private_imports(path)] == []


def test_the_private_import_check_can_fail(tmp_path: Path) -> None:
    tmp_path = tmp_path / "kiln_np"
    tmp_path.mkdir()
    sample = tmp_path / "sample.py"
    (tmp_path / "_nibbles.py").write_text("")
    sample.write_text(
        "from ._table import _BY_CODE\nfrom . import _nibbles\n"
        "from kiln_np._codec import _wire\nfrom kiln_np import _nibbles\n"
    )
    assert _private_imports(sample, tmp_path) == [
        "sample.py:1: from ._table import _BY_CODE",
        "sample.py:3: from kiln_np._codec import _wire",
    ]


# -- every file read goes through the one opener ------------------------------------------

_OPENER = Path("_files") / "io.py"  # open_regular / open_regular_raw live here
_LOADERS = {"memmap", "fromfile", "load"}  # numpy's and onnx's, given a path they open it
_READ_ALLOWED = {
    # The package's own golden files, through importlib.resources (maybe inside a zip).
    ("_explore/golden.py", "read_bytes"),
}


def _opened_regular(tree: ast.AST) -> set[str]:
    """Names bound by ``with open_regular[_raw](...) as name``: files already checked."""
    return {
        item.optional_vars.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.With, ast.AsyncWith))
        for item in node.items
        if isinstance(item.context_expr, ast.Call)
        and getattr(item.context_expr.func, "id", None) in {"open_regular", "open_regular_raw"}
        and isinstance(item.optional_vars, ast.Name)
    }


def _reads_by_mode(call: ast.Call) -> bool:
    """``open(path[, mode])``: True unless the mode writes (``w``, ``a``, ``x``, ``+``)."""
    mode = call.args[1] if len(call.args) > 1 else None
    mode = next((k.value for k in call.keywords if k.arg == "mode"), mode)
    if mode is None:
        return True
    if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
        return True  # a mode only known at run time: assume it reads
    return not set(mode.value) & set("wax+")


def _read_opens(path: Path, root: Path = SRC) -> list[str]:
    """Every place in ``path`` that opens a file to read without
    ``kiln_np._files.io.open_regular`` / ``open_regular_raw`` (which refuse a FIFO or
    a device before opening it): ``open()``, ``io.open()``, a read-only ``os.open()``,
    ``Path.read_bytes()`` / ``read_text()``, and numpy's or onnx's loaders given
    anything but a file those opened."""
    rel = path.relative_to(root)
    if rel == _OPENER:
        return []
    tree = ast.parse(path.read_text())
    checked = _opened_regular(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
        if name == "open" and (owner in {"", "io", "builtins"}):
            bad = _reads_by_mode(node)
        elif name == "open" and owner == "os":
            flags = ast.dump(node.args[1]) if len(node.args) > 1 else ""
            bad = "O_WRONLY" not in flags and "O_RDWR" not in flags
        elif name in {"read_bytes", "read_text"}:
            bad = (rel.as_posix(), name) not in _READ_ALLOWED
        elif name in _LOADERS and (owner in {"np", "numpy"} or "onnx" in owner):
            first = node.args[0] if node.args else None
            bad = not (isinstance(first, ast.Name) and first.id in checked)
        else:
            continue
        if bad:
            found.append(f"{rel.as_posix()}:{node.lineno}: {ast.unparse(node)[:60]}")
    return found


def test_every_file_read_goes_through_open_regular() -> None:
    # A FIFO named like an input (a GGUF split, a payload, a .npy) would block a plain
    # open() forever; open_regular refuses it before opening (docs/safety.md).
    assert [hit for path in sorted(SRC.rglob("*.py")) for hit in _read_opens(path)] == []


def test_the_read_open_check_can_fail(tmp_path: Path) -> None:
    root = tmp_path / "kiln_np"
    root.mkdir()
    sample = root / "sample.py"
    sample.write_text(
        "open(p)\nopen(p, 'rb')\nio.open(p, mode='r')\nos.open(p, os.O_RDONLY)\n"
        "Path(p).read_text()\nnp.memmap(p)\nonnx.load(p)\n"
        "open(p, 'wb')\nopen(p, 'r+b')\nos.open(p, os.O_WRONLY | os.O_CREAT)\n"
        "with open_regular(p) as f:\n    np.memmap(f)\n    onnx_pkg.load(f)\n"
    )
    assert [hit.split(": ")[0] for hit in _read_opens(sample, root)] == [
        f"sample.py:{line}" for line in range(1, 8)
    ]


class _DefinedHere(doctest.DocTestFinder):
    """Find the examples of what a module defines, whatever ``__module__`` it
    reports (set_module moves public names to ``kiln_np``)."""

    def _from_module(self, module: ModuleType | None, object: object) -> bool:
        here = getattr(module, "__file__", None)
        if inspect.isfunction(object):
            return object.__code__.co_filename == here
        if inspect.isclass(object):
            return any(
                inspect.isfunction(v) and v.__code__.co_filename == here
                for v in vars(object).values()
            ) or super()._from_module(module, object)  # type: ignore[misc]
        return bool(super()._from_module(module, object))  # type: ignore[misc]


def _modules() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.walk_packages(kiln_np.__path__, "kiln_np.")
        if importlib.util.find_spec(m.name) is not None
    )


DOCTEST_NEEDS = {
    "kiln_np._explore.description": "matplotlib",
    "kiln_np._explore.entry": "matplotlib",
    "kiln_np._explore.page": "matplotlib",
    "kiln_np._explore.pictures": "matplotlib",
    "kiln_np._explore.plot": "matplotlib",
    "kiln_np._explore.quantized": "matplotlib",
    "kiln_np._explore.report": "matplotlib",
    "kiln_np._explore.scaled": "matplotlib",
    "kiln_np._explore.weight_stats": "matplotlib",
    "kiln_np._weights.remote": "fsspec",
    "kiln_np.dask": "dask",
    "kiln_np.mx.layouts": "onnx",
    "kiln_np.onnx._proto": "onnx",
    "kiln_np.onnx._weights": "onnx",
    "kiln_np.torch": "torch",
    "kiln_np.zarr._plugin": "zarr",
}
"""The modules whose examples use an optional package: they skip without it."""


@pytest.mark.parametrize(
    "module",
    [
        pytest.param(m, marks=needs(DOCTEST_NEEDS[m]) if m in DOCTEST_NEEDS else ())
        for m in _modules()
    ],
)
def test_doctests(module: str) -> None:
    mod = importlib.import_module(module)
    finder = _DefinedHere()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in finder.find(mod, module):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0
    # Every module documents itself by example, except the command line, which the
    # CLI tests run, and a package whose __init__ is only its docstring (and
    # re-exports): its modules carry the examples.
    if result.attempted == 0:
        command_line = module == "kiln_np.cli" or module.startswith("kiln_np.cli.")
        body = ast.parse(inspect.getsource(mod)).body
        assert command_line or not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in body)


def test_notebook_and_weight_names_load_on_first_use() -> None:
    # import kiln_np costs the core only (issue 14's import-time figure); the
    # lazily re-exported names still resolve, star-import and show in dir().
    import subprocess
    import sys

    code = (
        "import sys, kiln_np\n"
        "lazy = ('kiln_np._explore', 'kiln_np._weights.tensors', 'kiln_np._weights.weights',\n"
        "        'kiln_np.formats')\n"
        "before = {m for m in lazy if m in sys.modules}\n"
        "from kiln_np import *\n"
        "assert describe is kiln_np.describe and open_weights.__module__ == 'kiln_np'\n"
        "print(sorted(before), 'describe' in dir(kiln_np))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = kiln_np.nope  # type: ignore[attr-defined]


def test_ml_dtypes_loads_when_a_dtype_is_first_needed(tmp_path: Path) -> None:
    # ml_dtypes takes most of a second to import: facts about codes, sizes and
    # headers, the version and a listing must not pay for it (issue 18).
    import subprocess
    import sys

    import ml_dtypes
    import numpy as np

    path = tmp_path / "m.safetensors"
    tensors = {f"w{i}": np.zeros((2, 3), ml_dtypes.bfloat16 if i % 2 else "<f4") for i in range(6)}
    kiln_np.save_weights(path, tensors, format="safetensors")
    code = (
        "import contextlib, io, sys, kiln_np, kiln_np.onnx, kiln_np.mx, kiln_np._explore\n"
        "from kiln_np.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--version'])\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['ls', sys.argv[1]]) == 0\n"
        "w = kiln_np.open_weights(sys.argv[1])\n"
        "facts = [kiln_np.byte_length(c, (3,)) for c in range(1, 20)]\n"
        "facts += [r.bits for r in kiln_np.DTYPES] + [w['w1'].byte_length, w['w1'].code]\n"
        "info = kiln_np.payload_info('bf16', (2,)).with_offset(8)\n"
        "print('ml_dtypes' in sys.modules)\n"
        "print(info.dtype.name, type(info).__name__, info.offset)\n"
        "print(kiln_np.DTYPES[3].dtype.name, w['w1'].numpy().dtype.name)\n"
        "print('ml_dtypes' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [
        *("False", "bfloat16", "PayloadInfo", "8"),
        *("bfloat16", "bfloat16", "True"),
    ]
