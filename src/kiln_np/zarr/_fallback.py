"""Arrays kiln_np does not lay out itself, read whole through zarr-python.

A group another writer made may compress its chunks, split a tensor into many
chunk files or leave chunks out (zarr reads a missing chunk as the fill value).
Such an array is read through zarr-python (imported here, when needed) into
memory, after a bound: its decoded size may be at most
:data:`MAX_EXPANSION` times the bytes its folder holds (or
:data:`SMALL_BYTES`), so a ``zarr.json`` claiming a huge shape over a few bytes
is an error, not an allocation.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo

__all__ = ["MAX_EXPANSION", "SMALL_BYTES", "read_array"]

MAX_EXPANSION = 1024
"""The most a fallback read may decode per stored byte (zstd of zeros reaches ~1000x)."""
SMALL_BYTES = 64 << 20
"""A fallback read may always decode this much."""


def _stored_bytes(folder: str, limit: int) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            total += os.lstat(os.path.join(root, f)).st_size
            if total >= limit:
                return total
    return total


def read_array(folder: str, info: PayloadInfo, at: str) -> np.ndarray:
    """The array of ``folder`` as zarr-python decodes it, checked against ``info``.

    >>> read_array.__name__
    'read_array'
    """
    need = info.byte_length
    stored = _stored_bytes(folder, -(-need // MAX_EXPANSION))
    if need > max(SMALL_BYTES, stored * MAX_EXPANSION):
        raise KilnError(
            "LENGTH",
            f"{at}expected at most {MAX_EXPANSION} decoded bytes per stored byte, found "
            f"{need} bytes over {stored} stored",
            expected=stored * MAX_EXPANSION,
            found=need,
        )
    try:
        import zarr
    except ImportError:
        raise KilnError(
            "TYPE",
            f"{at}the array is not laid out as kiln_np writes it (one file holding the "
            "payload); reading it needs zarr-python: pip install 'kiln-np[zarr]'",
        ) from None
    try:
        array: Any = zarr.open_array(store=folder, mode="r")
        values = np.asarray(array[...])
    except KilnError as exc:
        raise exc.prefixed(at) from None
    except Exception as exc:  # zarr's own errors: any class, user data
        raise KilnError("TYPE", f"{at}zarr-python cannot read the array: {exc}") from exc
    return values
