"""The public surface: names, modules, version, typing marker, doctests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from importlib import metadata, resources

import pytest

import kiln_np


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in dir(kiln_np) if not n.startswith("_")} - {
        m.name for m in pkgutil.iter_modules(kiln_np.__path__)
    }
    assert set(kiln_np.__all__) - {"__version__"} == public


@pytest.mark.parametrize("name", [n for n in kiln_np.__all__ if n not in {"__version__", "DTYPES"}])
def test_public_objects_report_a_kiln_np_module(name: str) -> None:
    assert getattr(kiln_np, name).__module__.startswith("kiln_np.")


def test_version_matches_metadata() -> None:
    assert kiln_np.__version__ == metadata.version("kiln-np")


def test_typed_and_golden_shipped() -> None:
    root = resources.files("kiln_np")
    assert (root / "py.typed").is_file()
    assert sorted(e.name for e in (root / "golden").iterdir() if e.name.endswith(".json"))


def _modules() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.walk_packages(kiln_np.__path__, "kiln_np.")
        if importlib.util.find_spec(m.name) is not None
    )


@pytest.mark.parametrize("module", _modules())
def test_doctests(module: str) -> None:
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.failed == 0
    # Every module documents itself by example, except the command line, which the
    # CLI tests run as a subprocess.
    assert result.attempted > 0 or module == "kiln_np.cli"
