"""kiln_np's data types for zarr-python 3.1.0-3.4.0, in a process that never names kiln_np.

zarr-python collects the ``zarr.data_type`` entry points of installed packages
but, before 3.4.1, never loads them (``DataTypeRegistry._lazy_load`` has no
caller), and ``zarr.open_array(path)`` parses an array's ``data_type`` before
anything else of a plugin can run: ``No Zarr data type found that matches
'bfloat16'`` (docs/interop.md, "zarr-python versions", has the reproduction).

The one line of ``kiln_np-zarr.pth``, which an install puts in site-packages,
imports this module and calls :func:`install` at interpreter start.  It imports
only the standard library (every interpreter start in the environment pays for
it: well under a millisecond) and waits in ``sys.meta_path`` for ``import
zarr``.  Once zarr's own ``__init__`` has run, on a zarr-python that does not
load the entry points itself, it arranges for the data-type registry's first
lookup to import ``kiln_np.zarr._plugin``, which registers kiln_np's data types
and ``packbits`` codec; then it leaves ``sys.meta_path``.  On zarr-python 2.x
and 3.0 (no data-type registry) and 3.4.1 or newer it does nothing.

An error while registering (a broken install of kiln_np) is raised by that
lookup, as zarr-python 3.4.1 raises a broken entry point's.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # never imported at run time: every interpreter start pays for imports
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["FIRST", "LOADS_ENTRY_POINTS", "install", "needs_registering"]

FIRST = (3, 1, 0)
"""The first zarr-python with the data-type registry kiln_np's plugin subclasses."""
LOADS_ENTRY_POINTS = (3, 4, 1)
"""The first zarr-python that loads ``zarr.data_type`` entry points itself."""


def needs_registering(version: str) -> bool:
    """Whether a zarr-python of ``version`` needs kiln_np's types registered by hand.

    >>> [needs_registering(v) for v in ("2.18.7", "3.0.10", "3.1.0", "3.4.0", "3.4.1", "")]
    [False, False, True, True, False, False]
    """
    release = []
    for part in version.split(".")[:3]:
        digits = part[: len(part) - len(part.lstrip("0123456789"))]  # "1rc1": 1
        if not digits:
            return False
        release.append(int(digits))
    return len(release) == 3 and FIRST <= tuple(release) < LOADS_ENTRY_POINTS


class _AfterZarr:
    """A meta path finder that answers for ``zarr`` only, with the spec the other
    finders give, its loader's ``exec_module`` wrapped to register afterwards."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "zarr":
            return None
        spec: ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is not self and find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module: Callable[[ModuleType], None] | None = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_zarr(module: ModuleType) -> None:
            del loader.exec_module  # the loader's own again (it may serve other modules)
            exec_module(module)
            if module.__name__ != "zarr":  # a shared loader (a zip's) whose zarr spec was unused
                return
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            if needs_registering(str(getattr(module, "__version__", ""))):
                _register_on_first_lookup(module.core.dtype.data_type_registry)

        try:
            loader.exec_module = exec_zarr  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # a loader that takes no attribute: left alone
            return spec
        return spec


_LOOKUPS = ("get", "match_dtype", "match_json")
"""The registry's methods every data-type lookup of zarr-python 3.1.0-3.4.0 goes
through (``get_data_type_from_json``, ``get_data_type_from_native_dtype``)."""


def _register_on_first_lookup(registry: object) -> None:
    """Register kiln_np's types at ``registry``'s first lookup, as zarr-python 3.4.1
    loads entry points: ``import zarr`` itself never imports kiln_np and ml_dtypes
    (about 0.2 s), a process that reads no array never does."""

    def register() -> None:
        importlib.import_module("kiln_np.zarr._plugin")  # registers; an error raises here
        for name in _LOOKUPS:
            vars(registry).pop(name, None)  # the registry's own methods again

    for name in _LOOKUPS:
        lookup = getattr(registry, name)

        def first(*args: object, _lookup: Callable[..., object] = lookup, **kw: object) -> object:
            register()
            return _lookup(*args, **kw)

        object.__setattr__(registry, name, first)  # a frozen dataclass: past its __setattr__


def install() -> None:
    """Wait for ``import zarr`` (what ``kiln_np-zarr.pth`` runs at interpreter start);
    once per process."""
    if not any(isinstance(finder, _AfterZarr) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterZarr())
