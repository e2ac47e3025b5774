"""The kernel table: every compiled kernel as a row with its numpy twin.

A :class:`Kernel` row is one job done two ways: ``compiled`` (a driver of the
compiled extension ``kiln_np._kernels.native``, or ``None`` where it was not
built) and ``numpy`` (its twin: the same arguments, the same bytes out, the same
errors), with the threading threshold of the compiled kernel (the work, in the
row's units, from which the thread pool splits it).  Modules define their rows
once, at import, with :func:`register`; callers keep the row and ask it for the
callable to run (:meth:`Kernel.pick`), never for the backend.  The choice is made
at call time from ``backend.COMPILED``, so ``KILN_NP_PURE=1`` (read at import)
and a test or benchmark that switches the flag both reach every kernel.

Rows whose numpy twin lives on a higher floor (the GGML block coders of
``kiln_np._quants``, the block-scaled pair counts of ``kiln_np._explore``) are
registered by that floor with a compiled driver from here: behaviour passed
down, no import up.  ``tests/kernels/test_dispatch.py`` runs every row both
ways and compares the bytes.

>>> import numpy as np
>>> row = kernel("unpack")
>>> dst = np.empty(3, np.uint8)
>>> row.pick()(b"\\x21\\x03", dst, 0, 3)
>>> dst.tolist(), row.name in KERNELS
([1, 2, 3], True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kiln_np._kernels import backend

__all__ = ["KERNELS", "Kernel", "kernel", "register"]

_TABLE: dict[str, Kernel] = {}

KERNELS: Mapping[str, Kernel] = MappingProxyType(_TABLE)
"""Every registered row, by name (read-only)."""


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel: its name, compiled driver, numpy twin and threading threshold.

    ``compiled`` and ``numpy`` take the same arguments and give the same bytes;
    ``compiled`` is ``None`` when the extension (or this entry of it) is not
    built.  ``threshold`` is the work (the row's units, as its docstring says)
    from which the compiled driver splits a call over the thread pool, as
    ``kiln_np._kernels.pool`` set it at import (the drivers read the pool's
    constant at call time, so a test can shrink it); ``None`` for a kernel that
    is called on ranges the caller chose.

    >>> row = Kernel("twice", None, lambda x: 2 * x, None)
    >>> row.pick()(21), row(21), row.runs_compiled()
    (42, 42, False)
    """

    name: str
    compiled: Callable[..., Any] | None
    numpy: Callable[..., Any]
    threshold: int | None

    def pick(self) -> Callable[..., Any]:
        """The callable to run now: the compiled driver while the compiled kernels
        are on (built, ``KILN_NP_PURE`` unset, ``backend.COMPILED`` true), else the
        numpy twin."""
        compiled = self.compiled
        return compiled if compiled is not None and backend.COMPILED else self.numpy

    def runs_compiled(self) -> bool:
        """Whether :meth:`pick` gives the compiled driver now."""
        return self.compiled is not None and backend.COMPILED

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``self.pick()(*args, **kwargs)``."""
        return self.pick()(*args, **kwargs)


def register(row: Kernel) -> Kernel:
    """Add ``row`` to the table and return it; a second row of one name is a bug.

    >>> register(kernel("unpack"))
    Traceback (most recent call last):
    ...
    ValueError: kernel 'unpack' is registered twice
    """
    if row.name in _TABLE:
        raise ValueError(f"kernel {row.name!r} is registered twice")
    _TABLE[row.name] = row
    return row


def kernel(name: str) -> Kernel:
    """The row named ``name``.

    >>> kernel("first_above").threshold is not None
    True
    """
    return _TABLE[name]
