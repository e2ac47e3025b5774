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

import os
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

try:
    import dask.array as da
    from dask.base import tokenize
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "kiln_np.dask needs dask: install the extra with pip install 'kiln-np[dask]'"
    ) from exc

from ._codec import from_numpy
from ._errors import KilnError
from ._files import (
    LazyPayload,
    PayloadInfo,
    _check_offset,
    _check_path,
    _content_error,
    _replacing,
    _write_all,
)
from ._table import DType, Layout, _count, _row_for_dtype, code_label

__all__ = ["from_payload", "to_payload"]


def from_payload(
    path: str | os.PathLike[str],
    code: int,
    shape: Sequence[int],
    *,
    offset: int = 0,
    layout: Layout | None = None,
    chunks: Any = "auto",
) -> da.Array:
    """A dask array over a payload file, each chunk read and decoded when computed.

    Parameters
    ----------
    path : str or os.PathLike
        The file; it must hold ``byte_length(code, shape, layout)`` bytes at
        ``offset`` (checked now, LENGTH otherwise).
    code : int
        The dtype code: 1-19, or 4096-32767 with ``layout``.
    shape : sequence of int
        Element shape (block shape for opaque codes).
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.
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
        TYPE, SHAPE, LENGTH as :func:`kiln_np.open_payload`.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "u8.bin")
    >>> np.arange(10, dtype=np.uint8).tofile(path)
    >>> x = from_payload(path, 9, (10,), chunks=4)
    >>> x.chunks, int(x.sum().compute())
    (((4, 4, 2),), 45)
    """
    lazy = LazyPayload(path, code, shape, offset=offset, layout=layout)
    if isinstance(chunks, str) and chunks == "auto" and lazy.ndim:
        chunks = ("auto",) + (-1,) * (lazy.ndim - 1)
    stat = os.stat(lazy.path)
    # The name changes with the file's size and mtime, so an edited file is
    # never served from a stale cache of an older graph.
    token = tokenize(
        lazy.path,
        stat.st_size,
        stat.st_mtime_ns,
        lazy.code,
        lazy.shape,
        lazy.offset,
        lazy.layout,
        chunks,
    )
    meta = np.empty((0,) * lazy.ndim, lazy.dtype)
    array = da.from_array(  # type: ignore[no-untyped-call]
        lazy, chunks=chunks, name=f"kiln-payload-{token}", lock=False, asarray=False, meta=meta
    )
    return cast("da.Array", array)


class _BlockWriter:
    """A ``da.store`` target: ``writer[rows, ...] = block`` encodes the block and
    writes it at its byte range of the (pre-sized) file; picklable by value."""

    def __init__(self, path: str, row: DType, shape: tuple[int, ...], offset: int) -> None:
        self.path = path
        self.row = row
        self.shape = shape
        self.offset = offset
        self.row_elems = _count(shape[1:])

    def __setitem__(self, key: tuple[slice, ...], block: np.ndarray) -> None:
        first_row = int(key[0].start or 0) if key else 0
        before = first_row * self.row_elems
        code = int(self.row.code)
        try:
            payload = from_numpy(block, code=code)
        except KilnError as err:
            if err.index is None:
                raise
            where = f"in the dask chunk from row {first_row}"
            raise _content_error(err, before, code, self.shape, where) from None
        # to_payload puts 4-bit chunk starts on even elements: whole bytes.
        start = self.offset + self.row.byte_length(before)
        with open(self.path, "r+b") as f:
            f.seek(start)
            _write_all(f, np.frombuffer(payload.data, np.uint8))


def _even_rows(chunks: tuple[int, ...]) -> tuple[int, ...]:
    """Move each interior chunk boundary down to an even row (dropping empties)."""
    bounds = np.cumsum(chunks)
    inner = bounds[:-1] - bounds[:-1] % 2
    edges = np.unique(np.concatenate(([0], inner, bounds[-1:])))
    return tuple(int(n) for n in np.diff(edges))


def to_payload(darray: da.Array, path: str | os.PathLike[str], *, offset: int = 0) -> PayloadInfo:
    """Compute a dask array and write it as one payload file, chunks in parallel.

    Each chunk is encoded by the worker that computes it and written to its
    own byte range of a temporary sibling of ``path``, which is renamed over
    ``path`` once every chunk is written (on failure it is removed and
    ``path`` is untouched).  Trailing axes are rechunked whole, so each chunk
    is one contiguous byte range; for 4-bit codes with an odd row size the
    axis-0 chunk boundaries move down to even rows, so no two chunks share a
    byte.

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
        ``(code, shape, offset, nbytes, layout)`` of the written payload.

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
    >>> path = os.path.join(tempfile.mkdtemp(), "i16.bin")
    >>> to_payload(da.arange(6, dtype="<i2", chunks=4), path)
    PayloadInfo(code=<Code.I16: 10>, shape=(6,), offset=0, nbytes=12, layout=None)
    >>> Path(path).read_bytes().hex(" ")
    '00 00 01 00 02 00 03 00 04 00 05 00'
    """
    name = _check_path(path)
    off = _check_offset(offset)
    row = _row_for_dtype(darray.dtype)
    if any(np.isnan(n) for axis in darray.chunks for n in axis):
        raise KilnError(
            "SHAPE",
            f"{code_label(int(row.code))}: expected known chunk sizes, found unknown chunk "
            f"sizes {darray.chunks}; call .compute_chunk_sizes() first",
            code=int(row.code),
        )
    dims = tuple(int(d) for d in darray.shape)
    arr = darray
    if arr.ndim > 1 and any(len(c) > 1 for c in arr.chunks[1:]):
        arr = arr.rechunk(dict.fromkeys(range(1, arr.ndim), -1))  # type: ignore[no-untyped-call]
    if row.packed and arr.ndim and _count(dims[1:]) % 2 and len(arr.chunks[0]) > 1:
        even = _even_rows(arr.chunks[0])
        if even != arr.chunks[0]:
            arr = arr.rechunk({0: even})  # type: ignore[no-untyped-call]
    nbytes = row.byte_length(_count(dims))
    with _replacing(name, off) as (tmp, f):
        f.truncate(off + nbytes)
        f.flush()
        # Any object with __setitem__ is a store target; dask's annotation is narrower.
        target: Any = _BlockWriter(tmp, row, dims, off)
        da.store(arr, target, lock=False, compute=True)
    return PayloadInfo(row.code, dims, off, nbytes)
