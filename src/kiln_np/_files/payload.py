"""Payload files, read: open without reading, decode lazily.

A payload file holds the payload bytes at some ``offset``; kiln_np keeps no
header, so ``code``, ``shape`` (and ``layout``) travel separately, as in any
Kiln directory.  Every function here builds the payload's description
(:func:`~kiln_np._core.payload.payload_info`) first and trusts it: sizes, decoded
dtype and shape, and the wording of LENGTH errors all come from it.  The
rules this module keeps:

- **Checks, in order.**  Code and layout (TYPE), shape and whether numpy can
  represent the decoded array (SHAPE), path and offset (TYPE), the file type
  (TYPE unless a regular file: a FIFO or a device is refused before it is
  opened), then the length (LENGTH): the file must hold ``byte_length``
  bytes from ``offset``.  LENGTH messages start ``'path' at offset N:`` and
  then read exactly as :func:`~kiln_np.to_numpy`'s.
- **Trailing bytes.**  By default bytes *after* ``offset + byte_length`` are
  allowed and never read: one file may hold several payloads back to back.
  ``exact=True`` says the payload runs to the end of the file: any byte after
  it is LENGTH (``long by N``), as for a buffer.
- **Laziness.**  Opening reads no payload byte.  Whole-byte codes (except
  bool) come back as a read-only :class:`numpy.memmap`: zero-copy, the
  operating system pages data in as it is touched.  Packed 4-bit codes and
  bool come back as a :class:`LazyPayload`, which decodes only the rows it is
  asked for and checks exactly the bytes it reads (a bad bool byte or a
  nonzero final padding nibble is TYPE when read, not when opened).

Writing is :func:`kiln_np._files.saving.save_payload`'s.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kiln_np._codec import BIG_ENDIAN_HOST, check_bool_bytes, host_order, native_only
from kiln_np._core.checks import (
    U8,
    check_int,
    check_offset,
    check_path,
    set_module,
    show_int,
    show_value,
)
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, CodeLike, Layout, ShapeLike, code_label
from kiln_np._kernels import nibbles

from .chunks import check_padding_read, decode_span, file_where
from .io import open_regular

__all__ = [
    "CHUNK_BYTES",
    "LazyPayload",
    "PathLike",
    "open_payload",
]

CHUNK_BYTES = 16 << 20
"""Default chunk size (decoded bytes) for :meth:`LazyPayload.iter_chunks`
and for splitting one large array in :func:`~kiln_np._files.saving.save_payload`."""

_GATHER_BYTES = 1 << 20  # decoded bytes per batch of a stepped slice: bounds its scratch

PathLike = str | os.PathLike[str]
"""A path argument: ``str`` or ``os.PathLike``."""


# -- reading -----------------------------------------------------------------


def _check_file_length(path: str, info: PayloadInfo, size: int, exact: bool) -> None:
    """LENGTH unless the file of ``size`` bytes holds the payload at ``info.offset``
    (and, ``exact``, nothing after it)."""
    where = file_where(path, info)
    if info.offset > size:
        raise KilnError(
            "LENGTH",
            f"{where}{info.context}expected {info.byte_length} bytes, found the end of "
            f"the file at byte {size}, before the offset",
            code=info.code,
            shape=info.shape,
            expected=info.byte_length,
            found=0,
        )
    found = size - info.offset
    if exact or found < info.byte_length:
        info.check_length(found, where)


def _map(
    path: str, info: PayloadInfo, exact: bool, dtype: np.dtype[Any], shape: tuple[int, ...]
) -> np.ndarray:
    """Check the file holds the payload ``info`` describes; map it read-only as
    ``dtype`` of ``shape`` (an empty read-only array for a 0-byte payload,
    which cannot be mapped)."""
    with open_regular(path) as f:
        _check_file_length(path, info, os.fstat(f.fileno()).st_size, exact)
        if info.byte_length == 0:
            empty = np.empty(shape, dtype)
            empty.flags.writeable = False
            return empty
        return np.memmap(f, dtype=dtype, mode="r", offset=info.offset, shape=shape)


@set_module("kiln_np")
class LazyPayload:
    """A payload in a file, decoded only where it is indexed.

    :func:`open_payload` returns one for packed 4-bit codes and bool; build
    one directly to get lazy, copying access for any code (``kiln_np.dask``
    does).  The file is checked (TYPE, LENGTH) and memory-mapped read-only
    when the object is made; no payload byte is read until it is indexed.

    Indexing the leading axis with an int or a slice (any step; a tuple whose
    first item is one of those applies the rest in memory) reads only the
    bytes of the rows selected, decodes them into a **new** array that never
    aliases the file, and checks exactly those bytes: a bool byte other than
    0/1, or a nonzero padding nibble when the last element is read, is TYPE.
    Rows that start on an odd nibble are handled.  ``np.asarray(p)`` decodes
    everything; :meth:`iter_chunks` decodes it a bounded block at a time.

    Parameters
    ----------
    path : str or os.PathLike
        The file, a regular file.  Kept as its absolute path with symlinks
        resolved (``link/..`` as the kernel resolves it, not lexically), so a
        pickled ``LazyPayload`` reopens the same file from any working directory.
    code : int or str
        The dtype code, or a closed code's name (``"u4"``).
    shape : sequence of int
        Element shape (block shape for opaque codes).
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.
    exact : bool
        The payload ends the file: bytes after it are LENGTH.  By default
        they are allowed and never read.

    Attributes
    ----------
    info : PayloadInfo
        The payload's checked description, with its ``offset``.
    path : str
        The absolute path, symlinks resolved.
    code : int
    layout : Layout or None
    offset : int
    exact : bool
    payload_byte_length : int
        Payload bytes in the file (``info.byte_length``).
    shape : tuple of int
        Shape of the decoded array (``shape + (block_size,)`` for opaque codes).
    dtype : numpy.dtype
        dtype of the decoded array.
    nbytes : int
        Bytes of the decoded array, as ``ndarray.nbytes``.

    Raises
    ------
    KilnError
        TYPE (code, layout, path, offset, a file that is not a regular
        file), SHAPE (also for a shape numpy cannot represent), LENGTH (file
        too short; with ``exact``, too long).
    OSError
        When the file cannot be opened.

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "u4.bin")
    ...     _ = Path(path).write_bytes(bytes.fromhex("21 43 05"))
    ...     p = LazyPayload(path, 17, (5,))
    ...     p[1:4].astype(int), p[::2].astype(int)
    (array([2, 3, 4]), array([1, 3, 5]))
    """

    def __init__(
        self,
        path: PathLike,
        code: CodeLike,
        shape: ShapeLike,
        *,
        offset: int = 0,
        layout: Layout | None = None,
        exact: bool = False,
    ) -> None:
        info = payload_info(code, shape, layout)
        name = check_path(path)
        self.info = info.with_offset(check_offset(offset))
        mapped = _map(name, self.info, exact, U8, (info.byte_length,))
        self._map = mapped.view(np.ndarray)
        self.path = os.path.realpath(name)  # not abspath: 'link/../p' is not './p'
        self.code = self.info.code
        self.layout = layout
        self.offset = self.info.offset
        self.exact = exact
        self.payload_byte_length = info.byte_length
        self.shape = info.decoded_shape
        self.dtype = info.dtype
        # Decoded elements per leading-axis row (bytes, for opaque blocks).
        self._row_elems = math.prod(self.shape[1:])

    # -- array-like surface ------------------------------------------------

    @property
    def ndim(self) -> int:
        """Number of dimensions of the decoded array."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements of the decoded array."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded array (as ``ndarray.nbytes``; see ``payload_byte_length``)."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d LazyPayload")
        return self.shape[0]

    def __repr__(self) -> str:
        layout = "" if self.layout is None else f", layout={self.layout!r}"
        return (
            f"LazyPayload({code_label(int(self.code))}, shape={self.shape}, "
            f"dtype={self.dtype.name}, "
            f"{self.payload_byte_length} bytes at offset {self.offset} of {self.path!r}{layout})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles (dask workers, multiprocessing) reopen the file by its absolute path.
        info = self.info
        return (
            _reopen,
            (self.path, int(info.code), info.shape, info.offset, info.layout, self.exact),
        )

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a LazyPayload decodes into a new array: copy=False is impossible")
        arr = self._rows(0, self.shape[0]) if self.shape else self._rows(0, 1).reshape(())
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        rest: tuple[Any, ...] = ()
        lead = key
        if isinstance(key, tuple):
            lead, rest = (key[0], key[1:]) if key else (Ellipsis, ())
        if not self.shape or lead is Ellipsis:
            return np.asarray(self)[key]
        n = self.shape[0]
        if isinstance(lead, slice):
            rows = range(n)[lead]
            if rows.step == 1 and rows:
                block = self._rows(rows.start, rows.stop)
            else:
                block = self._stepped(rows)
            return block[(slice(None), *rest)] if rest else block
        if isinstance(lead, (bool, np.bool_)):
            raise _not_an_index(lead)
        try:
            i = operator.index(lead)
        except TypeError:  # a list, a boolean mask, an index array: numpy's words say less
            raise _not_an_index(lead) from None
        if not -n <= i < n:
            raise IndexError(f"index {show_int(i)} is out of bounds for axis 0 with size {n}")
        i %= n
        row = self._rows(i, i + 1)[0]
        return row[rest] if rest else row

    def __iter__(self) -> Iterator[Any]:
        """Rows, as iterating an ndarray gives, decoded a chunk at a time."""
        if not self.shape:
            raise TypeError("iteration over a 0-d LazyPayload")
        return (row for chunk in self.iter_chunks() for row in chunk)

    def iter_chunks(self, rows: int | None = None) -> Iterator[np.ndarray]:
        """Decode the payload in order, ``rows`` leading-axis rows at a time.

        Parameters
        ----------
        rows : int, optional
            Rows per chunk; by default as many as fit in ``CHUNK_BYTES``
            (16 MiB) of decoded data, at least one.

        Returns
        -------
        iterator of numpy.ndarray
            New arrays whose concatenation along axis 0 is the payload (one
            0-d array for a 0-d payload).

        Raises
        ------
        KilnError
            SHAPE for ``rows`` that is not an integer >= 1; TYPE for a bad
            bool byte or padding nibble, when its chunk is read.

        Examples
        --------
        >>> import os, tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "u4.bin")
        ...     _ = Path(path).write_bytes(bytes.fromhex("21 43 05"))
        ...     [c.astype(int).tolist() for c in LazyPayload(path, 17, (5,)).iter_chunks(2)]
        [[1, 2], [3, 4], [5]]
        """
        if rows is None:
            step = self._rows_per_chunk()
        else:
            step = check_int(rows, "rows", kind="SHAPE", minimum=1)
        if not self.shape:
            yield np.asarray(self)
            return
        n = self.shape[0]
        for start in range(0, n, step):
            yield self._rows(start, min(start + step, n))

    def _rows_per_chunk(self) -> int:
        return max(1, CHUNK_BYTES // max(1, self._row_elems * self.dtype.itemsize))

    # -- decoding ----------------------------------------------------------

    def _rows(self, r0: int, r1: int) -> np.ndarray:
        """Decode leading-axis rows ``[r0, r1)`` into a new array."""
        shape = (r1 - r0, *self.shape[1:])
        e0, e1 = r0 * self._row_elems, r1 * self._row_elems
        if self.info.packed:
            src = self._map[e0 // 2 : (e1 + 1) // 2]  # unpacked into a new array
        else:
            width = self.dtype.itemsize
            src = self._map[e0 * width : e1 * width].copy()  # never aliases the file
        note = f"read in rows {r0}..{r1 - 1}"
        return decode_span(self.info, src, e0, e1, note=note).reshape(shape)

    def _stepped(self, rows: range) -> np.ndarray:
        """Decode the rows of ``rows`` (a step other than 1) into a new array,
        reading only those rows: ascending batches of about 1 MiB of decoded
        rows, each gathered from a strided view of the map."""
        out = np.empty((len(rows), *self.shape[1:]), self.dtype)
        if not len(rows) or not self._row_elems:
            return out
        # Fill in ascending row order; a negative step fills the output backwards.
        up = rows if rows.step > 0 else rows[::-1]
        flat = out.reshape(len(rows), -1)
        if rows.step < 0:
            flat = flat[::-1]
        batch = max(1, _GATHER_BYTES // (self._row_elems * self.dtype.itemsize))
        for k in range(0, len(up), batch):
            part = up[k : k + batch]
            # Consecutive rows (p[::-1]), or one row whose step may be any size: a
            # contiguous read.
            if part.step == 1 or len(part) == 1:
                got = self._rows(part[0], part[-1] + 1)
            else:
                got = self._gather(part)
            flat[k : k + len(part)] = got.reshape(len(part), -1)
        return out

    def _gather(self, rows: range) -> np.ndarray:
        """Rows ``rows`` (ascending, step > 1, at least two) decoded, shape
        ``(len(rows), row_elems)``."""
        n, step, r = len(rows), rows.step, self._row_elems
        element = self.info.element
        if not element.packed:
            width = r * self.dtype.itemsize
            lo, hi = rows[0] * width, (rows[-1] + 1) * width
            src = self._map[lo:hi].reshape(-1, width)[::step].copy()
            self._check_bool(
                src.reshape(-1),
                lambda index: (rows[0] + index // r * step) * r + index % r,
                f"read in rows {rows[0]}..{rows[-1]} step {step}",
            )
            return self._host_order(src.reshape(-1)).reshape(n, r)
        check_padding_read(self.info, self._map, rows[-1] * r, (rows[-1] + 1) * r)
        out = np.empty((n, r), U8)
        # Rows of an odd length alternate between starting on a low and a high
        # nibble; an even step keeps one parity, an odd one alternates it, so
        # every other selected row shares a parity and a byte stride.
        parts = 1 if r % 2 == 0 or step % 2 == 0 else 2
        for j in range(min(parts, n)):
            sub = rows[j::parts]
            e0 = sub[0] * r
            first = e0 % 2
            span = (first + r + 1) // 2  # bytes covering one row from its first byte
            stride = sub.step * r // 2 if len(sub) > 1 else span
            b0 = e0 // 2
            windows = np.lib.stride_tricks.sliding_window_view(
                self._map[b0 : b0 + (len(sub) - 1) * stride + span], span
            )[::stride]
            unpacked = np.empty(2 * span * len(sub), U8)
            nibbles.unpack_into(np.ascontiguousarray(windows).reshape(-1), unpacked, unpacked.size)
            out[j::parts] = unpacked.reshape(len(sub), 2 * span)[:, first : first + r]
        return out.view(element.dtype)

    def _check_bool(self, src: np.ndarray, element_of: Callable[[int], int], where: str) -> None:
        """Check the bytes read of a bool payload; a bad byte's index is re-aimed at
        its element in the whole payload (``element_of`` maps the index in ``src``)."""
        if self.info.code != Code.BOOL:
            return
        try:
            check_bool_bytes(src, self.info)
        except KilnError as err:
            index = err.index or 0  # always set by the bool check
            raise err.shifted(element_of(index) - index, where) from None

    def _host_order(self, src: np.ndarray) -> np.ndarray:
        element = self.info.element
        return src if isinstance(element, Layout) else host_order(src, element)


def _not_an_index(lead: object) -> TypeError:
    """What indexing a :class:`LazyPayload`'s leading axis with ``lead`` (a bool,
    a list, a boolean mask, an index array) raises: what it takes, and what to do.

    >>> message = _not_an_index(np.array([True, False])).args[0]
    >>> message.split(", got ")[1]
    'ndarray array([ True, False]); decode a range first, e.g. p[a:b][key]'
    """
    return TypeError(
        "a LazyPayload indexes its leading axis with an int or a slice, got "
        f"{show_value(lead)}; decode a range first, e.g. p[a:b][key]"
    )


def _reopen(
    path: str,
    code: int,
    shape: tuple[int, ...],
    offset: int,
    layout: Layout | None,
    exact: bool,
) -> LazyPayload:
    return LazyPayload(path, code, shape, offset=offset, layout=layout, exact=exact)


@set_module("kiln_np")
def open_payload(
    path: PathLike,
    code: CodeLike,
    shape: ShapeLike,
    *,
    offset: int = 0,
    layout: Layout | None = None,
    exact: bool = False,
) -> np.ndarray | LazyPayload:
    """Open a payload stored in a file without reading it.

    Parameters
    ----------
    path : str or os.PathLike
        The file, a regular file (a FIFO or a device is refused before it is
        opened).  It must hold ``byte_length(code, shape, layout)`` bytes from
        ``offset``.
    code : int or str
        The dtype code: 1-19, or 4096-32767 with ``layout``; or a closed
        code's name (``"f32"``, ``"F32"``).
    shape : sequence of int
        Element shape; ``()`` is a scalar.
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.
    exact : bool
        The payload ends the file: a byte after it is LENGTH (``long by``).
        By default bytes after the payload are allowed (a file may hold
        several payloads) and never read.

    Returns
    -------
    numpy.ndarray or LazyPayload
        Whole-byte codes other than bool: a read-only :class:`numpy.memmap`
        with the same dtype and shape :func:`to_numpy` gives (opaque codes:
        uint8 blocks of shape ``shape + (block_size,)``); it aliases the file.
        A 0-byte payload cannot be mapped and comes back as an empty read-only
        array.  Packed 4-bit codes and bool (and, on a big-endian host, bf16,
        which must be byte-swapped): a :class:`LazyPayload` that decodes (and
        checks) only what is indexed.

    Raises
    ------
    KilnError
        In this order: TYPE for a bad code or layout; SHAPE for a malformed
        shape or one numpy cannot represent; TYPE for a bad path or offset
        (an integer in 0..2**63-1) or a file that is not a regular file;
        LENGTH when the file holds fewer than ``byte_length`` bytes at
        ``offset`` (with ``exact``, any other number).
    OSError
        When the file cannot be opened or mapped.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "f32.bin")
    ...     np.arange(6, dtype="<f4").tofile(path)
    ...     print(open_payload(path, 2, (2, 3))[1])
    [3. 4. 5.]
    """
    info = payload_info(code, shape, layout)
    name = check_path(path)
    off = check_offset(offset)
    element = info.element
    if element.packed or info.code == Code.BOOL or (BIG_ENDIAN_HOST and native_only(info.dtype)):
        # ml_dtypes types are native-only: a big-endian host must swap bf16.
        return LazyPayload(name, code, info.shape, offset=off, layout=layout, exact=exact)
    return _map(name, info.with_offset(off), exact, info.dtype, info.decoded_shape)
