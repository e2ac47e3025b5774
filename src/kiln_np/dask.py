"""Kiln payload files as dask arrays (optional extra: ``pip install 'kiln-np[dask]'``).

:func:`from_payload` turns a payload file into a :class:`dask.array.Array`
whose chunks are read and decoded lazily by whichever scheduler runs the graph
(threads, processes, a ``dask.distributed`` cluster); :func:`to_payload`
writes a dask array's chunks in parallel, each to its own byte range of one
file.  Workers open the file by path, so with a distributed cluster the path
must name the same file on every worker (a local cluster or a shared
filesystem).

``import kiln_np`` never imports dask; ``import kiln_np.dask`` does.
"""

from __future__ import annotations

import math
import os
from typing import Any, cast

import numpy as np

try:
    import dask.array as da
    from dask.array.core import normalize_chunks
    from dask.base import tokenize
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "kiln_np.dask needs dask: install the extra with pip install 'kiln-np[dask]'"
    ) from exc

from ._codec import from_numpy
from ._core.checks import check_offset, check_path, set_module, show_value
from ._core.errors import KilnError
from ._core.payload import PayloadInfo, payload_info
from ._core.table import CodeLike, Layout, ShapeLike, code_label, row_for_dtype
from ._files.io import replacing, write_all
from ._files.payload import LazyPayload

__all__ = ["from_payload", "to_payload"]


@set_module("kiln_np.dask")
def from_payload(
    path: str | os.PathLike[str],
    code: CodeLike,
    shape: ShapeLike,
    *,
    offset: int = 0,
    layout: Layout | None = None,
    exact: bool = False,
    chunks: Any = "auto",
) -> da.Array:
    """A dask array over a payload file, each chunk read and decoded when computed.

    Parameters
    ----------
    path : str or os.PathLike
        The file; it must hold ``byte_length(code, shape, layout)`` bytes at
        ``offset`` (checked now, LENGTH otherwise).
    code : int or str
        The dtype code: 1-19, or 4096-32767 with ``layout``; or a closed
        code's name.
    shape : sequence of int
        Element shape (block shape for opaque codes).
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.
    exact : bool
        The payload ends the file: bytes after it are LENGTH (as
        :func:`kiln_np.open_payload`).
    chunks : dask chunks spec
        Anything :func:`dask.array.from_array` takes.  The default, ``"auto"``
        along axis 0 and whole trailing axes, makes every chunk one
        contiguous byte range; splitting a trailing axis works but each chunk
        then reads its whole rows.

    Returns
    -------
    dask.array.Array
        Of the dtype and shape :func:`kiln_np.to_numpy` would give.  A bad
        bool byte or padding nibble is TYPE when its chunk is computed.

    Raises
    ------
    KilnError
        TYPE, SHAPE, LENGTH as :func:`kiln_np.open_payload`; SHAPE for
        ``chunks`` dask cannot apply to the shape (``0``, sizes that do not
        add up to it, ...).

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "u8.bin")
    ...     np.arange(10, dtype=np.uint8).tofile(path)
    ...     x = from_payload(path, 9, (10,), chunks=4)
    ...     x.chunks, int(x.sum().compute())
    (((4, 4, 2),), 45)
    """
    lazy = LazyPayload(path, code, shape, offset=offset, layout=layout, exact=exact)
    if isinstance(chunks, str) and chunks == "auto" and lazy.ndim:
        chunks = ("auto",) + (-1,) * (lazy.ndim - 1)
    try:
        sizes = normalize_chunks(chunks, lazy.shape, dtype=lazy.dtype)  # type: ignore[no-untyped-call]
    except Exception as exc:  # dask raises ValueError, TypeError, ZeroDivisionError, ...
        why = str(exc).split("\n", 1)[0][:100]
        raise KilnError(
            "SHAPE",
            f"{lazy.info.context}expected dask chunks for the decoded shape {lazy.shape}, "
            f"found {show_value(chunks)}: dask cannot use them ({type(exc).__name__}: {why})",
            code=lazy.info.code,
            shape=lazy.info.shape,
        ) from exc
    stat = os.stat(lazy.path)
    # The name changes with the file's size and mtime, so an edited file is
    # never served from a stale cache of an older graph.
    token = tokenize(
        lazy.path,
        stat.st_size,
        stat.st_mtime_ns,
        int(lazy.code),
        lazy.shape,
        lazy.offset,
        lazy.layout,
        sizes,
    )
    meta = np.empty((0,) * lazy.ndim, lazy.dtype)
    array = da.from_array(  # type: ignore[no-untyped-call]
        lazy, chunks=sizes, name=f"kiln-payload-{token}", lock=False, asarray=False, meta=meta
    )
    return cast("da.Array", array)


class _BlockWriter:
    """A ``da.store`` target: ``writer[rows, ...] = block`` encodes the block and
    writes it at its byte range of the (pre-sized) file; picklable by value."""

    def __init__(self, path: str, info: PayloadInfo) -> None:
        self.path = path
        self.info = info

    def __setitem__(self, key: tuple[slice, ...], block: np.ndarray) -> None:
        info = self.info
        first_row = int(key[0].start or 0) if key else 0
        # The rows before this block, described: their byte length is where it starts.
        before = payload_info(info.code, (first_row, *info.shape[1:]), decodable=False)
        try:
            payload = from_numpy(block, code=info.code)
        except KilnError as err:
            raise err.shifted(before.count, f"in the dask chunk from row {first_row}") from None
        # to_payload puts 4-bit chunk starts on even elements: whole bytes.
        with open(self.path, "r+b") as f:
            f.seek(info.offset + before.byte_length)
            write_all(f, np.frombuffer(payload.data, np.uint8))


def _even_rows(chunks: tuple[int, ...]) -> tuple[int, ...]:
    """Move each interior chunk boundary down to an even row (dropping empties)."""
    bounds = np.cumsum(chunks)
    inner = bounds[:-1] - bounds[:-1] % 2
    edges = np.unique(np.concatenate(([0], inner, bounds[-1:])))
    return tuple(int(n) for n in np.diff(edges))


@set_module("kiln_np.dask")
def to_payload(darray: da.Array, path: str | os.PathLike[str], *, offset: int = 0) -> PayloadInfo:
    """Compute a dask array and write it as one payload file, chunks in parallel.

    Each chunk is encoded by the worker that computes it and written to its
    own byte range of a temporary sibling of ``path`` (as
    :func:`kiln_np.save_payload` names it), which is renamed over ``path``
    once every chunk is written (on failure it is removed and ``path`` is
    untouched; a symlink is written through and permission bits kept, as
    ``save_payload`` does).  Trailing axes are rechunked whole, so each
    chunk is one contiguous byte range; for 4-bit codes with an odd row size
    the axis-0 chunk boundaries move down to even rows, so no two chunks
    share a byte.

    Parameters
    ----------
    darray : dask.array.Array
        Of a dtype with a Kiln code (closed codes only) and known chunk sizes.
    path : str or os.PathLike
        The file to write.  With ``offset > 0`` the first ``offset`` bytes of
        the existing file are kept in front of the payload.
    offset : int
        Byte position of the payload in the file.

    Returns
    -------
    PayloadInfo
        The written payload's description, with its ``offset``.

    Raises
    ------
    KilnError
        TYPE for a dtype with no Kiln code, a bad bool byte or 4-bit value
        (the index is the element's in the whole payload); SHAPE for unknown
        (NaN) chunk sizes.

    Examples
    --------
    >>> import os, tempfile, dask.array as da
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "i16.bin")
    ...     print(to_payload(da.arange(6, dtype="<i2", chunks=4), path))
    ...     print(Path(path).read_bytes().hex(" "))
    PayloadInfo(code=<Code.I16: 10>, shape=(6,), layout=None, offset=0, byte_length=12)
    00 00 01 00 02 00 03 00 04 00 05 00
    """
    name = check_path(path)
    off = check_offset(offset)
    row = row_for_dtype(darray.dtype)
    if any(np.isnan(n) for axis in darray.chunks for n in axis):
        raise KilnError(
            "SHAPE",
            f"{code_label(int(row.code))}: expected known chunk sizes, found unknown chunk "
            f"sizes {darray.chunks}; call .compute_chunk_sizes() first",
            code=int(row.code),
        )
    info = payload_info(int(row.code), tuple(int(d) for d in darray.shape)).with_offset(off)
    arr = darray
    if arr.ndim > 1 and any(len(c) > 1 for c in arr.chunks[1:]):
        arr = arr.rechunk(dict.fromkeys(range(1, arr.ndim), -1))  # type: ignore[no-untyped-call]
    if row.packed and arr.ndim and math.prod(info.shape[1:]) % 2 and len(arr.chunks[0]) > 1:
        even = _even_rows(arr.chunks[0])
        if even != arr.chunks[0]:
            arr = arr.rechunk({0: even})  # type: ignore[no-untyped-call]
    with replacing(name, off) as (tmp, f):
        f.truncate(off + info.byte_length)
        f.flush()
        # Any object with __setitem__ is a store target; dask's annotation is narrower.
        target: Any = _BlockWriter(tmp, info)
        da.store(arr, target, lock=False, compute=True)
    return info
