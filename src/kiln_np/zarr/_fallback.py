"""Arrays kiln_np does not lay out itself, read whole through zarr-python.

A group another writer made may compress its chunks, split a tensor into many
chunk files or leave chunks out (zarr reads a missing chunk as the fill value).
Such an array is read through zarr-python (imported here, when needed) into
memory, after two checks of its folder:

- every entry under it is a folder or a regular file, none a symlink (TYPE
  naming it): zarr-python follows links, so a chunk file linked to any file
  would make that file tensor data;
- a bound: its decoded size may be at most :data:`MAX_EXPANSION` times the
  bytes its chunk files really store (allocated blocks, so a sparse file counts
  for what it holds, not its apparent size), or :data:`SMALL_BYTES`, and never
  more than :data:`MAX_FALLBACK_BYTES`; so a ``zarr.json`` claiming a huge shape
  over a few bytes is an error, not an allocation.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo

__all__ = ["MAX_EXPANSION", "MAX_FALLBACK_BYTES", "SMALL_BYTES", "read_array"]

MAX_EXPANSION = 1024
"""The most a fallback read may decode per stored byte (zstd of zeros reaches ~1000x)."""
SMALL_BYTES = 64 << 20
"""A fallback read may always decode this much."""
MAX_FALLBACK_BYTES = 4 << 30
"""The most a fallback read decodes, however much is stored (4 GiB): a larger
array is read only as kiln_np lays it out (mapped, never decoded in memory)."""

_ZARR_JSON = "zarr.json"


def _stored_bytes(folder: str, at: str) -> int:
    """The bytes the chunk files under ``folder`` really store (allocated blocks);
    TYPE for a symlink or anything but folders and regular files on the way."""
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for entry in (*dirs, *files):
            path = os.path.join(root, entry)
            st = os.lstat(path)
            folder_entry = entry in dirs and stat.S_ISDIR(st.st_mode)
            if not (folder_entry or stat.S_ISREG(st.st_mode)):
                what = "a symlink" if stat.S_ISLNK(st.st_mode) else "no regular file"
                raise KilnError(
                    "TYPE",
                    f"{at}{os.path.relpath(path, folder)!r}: expected a folder or regular file "
                    f"of the array, found {what} ({path!r}; zarr-python would follow it)",
                )
            if not folder_entry and not (root == folder and entry == _ZARR_JSON):
                total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
    return total


def read_array(folder: str, info: PayloadInfo, at: str) -> np.ndarray:
    """The array of ``folder`` as zarr-python decodes it, checked against ``info``.

    >>> read_array.__name__
    'read_array'
    """
    need = info.byte_length
    if need > MAX_FALLBACK_BYTES:
        raise KilnError(
            "TYPE",
            f"{at}expected at most {MAX_FALLBACK_BYTES} bytes (MAX_FALLBACK_BYTES) from an "
            f"array read through zarr-python, found {need}: rewrite it with kiln_np (one "
            "uncompressed chunk file, mapped) to read it",
            expected=MAX_FALLBACK_BYTES,
            found=need,
        )
    stored = _stored_bytes(folder, at)
    if need > max(SMALL_BYTES, stored * MAX_EXPANSION):
        raise KilnError(
            "TYPE",
            f"{at}expected at most {MAX_EXPANSION} decoded bytes per stored byte (allocated "
            f"blocks of the chunk files), found {need} bytes over {stored} stored",
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
