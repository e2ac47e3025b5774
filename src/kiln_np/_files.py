"""Payloads in files: open without reading, decode lazily, write as a stream.

A payload file holds the payload bytes at some ``offset``; kiln_np keeps no
header, so ``code``, ``shape`` (and ``layout``) travel separately, as in any
Kiln directory.  The rules this module keeps:

- **Length.** :func:`open_payload` checks that the file holds at least
  ``byte_length(code, shape)`` bytes starting at ``offset`` (LENGTH
  otherwise).  Bytes *after* ``offset + byte_length`` are allowed and never
  read: one file may hold several payloads back to back.
- **Laziness.** Opening reads no payload byte.  Whole-byte codes (except
  bool) come back as a read-only :class:`numpy.memmap`: zero-copy, the
  operating system pages data in as it is touched.  Packed 4-bit codes and
  bool come back as a :class:`LazyPayload`, which decodes only the rows it is
  asked for and checks exactly the bytes it reads (a bad bool byte or a
  nonzero final padding nibble is TYPE when read, not when opened).
- **Writing.** :func:`write_payload` encodes an array, or an iterable of
  C-order chunks along axis 0, with memory bounded by the chunk size.  A
  chunk boundary on an odd 4-bit element carries the unpaired nibble into the
  next chunk.  To a path it writes ``path``'s temporary sibling and renames it
  over ``path`` only when the whole stream is good, so a short or
  inconsistent stream never leaves a complete-looking file.
"""

from __future__ import annotations

import contextlib
import operator
import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, NamedTuple

import numpy as np

from . import _codec, _nibbles
from ._codec import _as_array, _check_bool_bytes, _host_order, _length_error, from_numpy
from ._errors import KilnError
from ._table import (
    Code,
    DType,
    Layout,
    _check_representable,
    _check_shape,
    _count,
    _describe,
    _payload_bytes,
    _resolve,
    code_label,
)

__all__ = ["LazyPayload", "PayloadInfo", "open_payload", "write_payload"]

_U8 = np.dtype(np.uint8)

CHUNK_BYTES = 16 << 20
"""Default chunk size (decoded bytes) for :meth:`LazyPayload.iter_chunks` and
for splitting one large array in :func:`write_payload`."""

_COPY_BLOCK = 1 << 20
_MAX_OFFSET = 2**63 - 1  # off_t: the largest file offset

PathLike = str | os.PathLike[str]


class PayloadInfo(NamedTuple):
    """Where a written payload is and how to read it back.

    ``open_payload(path, info.code, info.shape, offset=info.offset,
    layout=info.layout)`` reopens it.

    Attributes
    ----------
    code : int
        The dtype code (a :class:`~kiln_np.Code` for closed codes).
    shape : tuple of int
        Element shape; for opaque codes, the shape of the blocks.
    offset : int
        Byte position of the payload in the file.
    nbytes : int
        Payload size in bytes, ``byte_length(code, shape, layout)``.
    layout : Layout or None
        The opaque layout, for codes 4096-32767.
    """

    code: int
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    layout: Layout | None = None


def _check_path(path: object) -> str:
    if isinstance(path, (str, os.PathLike)):
        name = os.fspath(path)
        if isinstance(name, str) and "\x00" not in name:  # the OS would raise ValueError
            return name
    raise KilnError("TYPE", f"path must be a str or os.PathLike path, got {_describe(path)}")


def _check_offset(offset: object) -> int:
    if isinstance(offset, (bool, np.bool_)) or not isinstance(offset, (int, np.integer)):
        raise KilnError("TYPE", f"offset must be an integer >= 0, got {_describe(offset)}")
    off = int(offset)
    if off < 0 or off > _MAX_OFFSET:  # past it, seek() raises OverflowError or ValueError
        bound = ">= 0" if off < 0 else "<= 2**63-1, the largest file offset"
        raise KilnError("TYPE", f"offset must be an integer {bound}, got {off}")
    return off


def _decoded_shape(kind: DType | Layout, dims: tuple[int, ...]) -> tuple[int, ...]:
    return (*dims, kind.block_size) if isinstance(kind, Layout) else dims


def _decoded_dtype(kind: DType | Layout) -> np.dtype[Any]:
    return _U8 if isinstance(kind, Layout) else kind.dtype


def _map_payload(
    path: str,
    code: int,
    kind: DType | Layout,
    dims: tuple[int, ...],
    offset: int,
    dtype: np.dtype[Any],
    shape: tuple[int, ...] | None,
) -> tuple[np.ndarray, int]:
    """Check the file holds the payload at ``offset``; map it read-only as
    ``dtype`` of ``shape`` (``None``: the flat bytes).

    Returns the :class:`numpy.memmap` (an empty read-only array for a 0-byte
    payload, which cannot be mapped) and the payload size."""
    expected = _payload_bytes(kind, _count(dims))
    if shape is None:
        shape = (expected,)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        found = max(size - offset, 0)
        if offset > size or found < expected:
            err = _length_error(kind, code, dims, expected, found)
            raise KilnError(
                "LENGTH",
                f"{path!r} is {size} bytes, so it holds {found} at offset {offset}: " + err.message,
                code=code,
                shape=dims,
                expected=expected,
                found=found,
            )
        if expected == 0:
            empty = np.empty(shape, dtype)
            empty.flags.writeable = False
            return empty, 0
        return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=shape), expected


def _resolve_all(
    path: object, code: int, shape: object, offset: object, layout: object
) -> tuple[str, int, DType | Layout, tuple[int, ...], int]:
    kind = _resolve(code, layout)
    dims = _check_shape(shape)
    decoded = _decoded_dtype(kind)
    _check_representable(_decoded_shape(kind, dims), decoded.itemsize, f"{code_label(int(code))}: ")
    return _check_path(path), int(code), kind, dims, _check_offset(offset)


def _content_error(
    err: KilnError, before: int, code: int, dims: tuple[int, ...] | None, where: str
) -> KilnError:
    """Re-aim a bad bool byte or 4-bit value found in a slice (``err``, from the
    core) at its element index in the whole payload, ``before + err.index``."""
    assert err.index is not None
    assert isinstance(err.found, int)
    index = before + err.index
    if code == Code.BOOL:
        rule = "byte 0x00 or 0x01"
        why = "case kiln-v2-bool-byte"
    else:
        rule = "storage bytes 0x00-0x0f"
        why = "bits above the nibble; kiln_np never masks them"
    shown = "" if dims is None else f" shape {dims}"
    return KilnError(
        err.kind,
        f"{code_label(code)}{shown}: expected {rule}, found 0x{err.found:02x} at element "
        f"{index} of the payload, {where} ({why})",
        code=code,
        shape=dims,
        expected=err.expected,
        found=err.found,
        index=index,
    )


class LazyPayload:
    """A payload in a file, decoded only where it is indexed.

    :func:`open_payload` returns one for packed 4-bit codes and bool; build
    one directly to get lazy, copying access for any code (``kiln_np.dask``
    does).  The file is checked (LENGTH) and memory-mapped read-only when the
    object is made; no payload byte is read until it is indexed.

    Indexing the leading axis with an int or a slice (any step; a tuple whose
    first item is one of those applies the rest in memory) reads only the
    bytes those rows occupy, decodes them into a **new** array that never
    aliases the file, and checks exactly those bytes: a bool byte other than
    0/1, or a nonzero padding nibble when the last element is read, is TYPE.
    Rows that start on an odd nibble are handled.  ``np.asarray(p)`` decodes
    everything; :meth:`iter_chunks` decodes it a bounded block at a time.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    code : int
        The dtype code.
    shape : sequence of int
        Element shape (block shape for opaque codes).
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.

    Attributes
    ----------
    path : str
    code : int
    layout : Layout or None
    offset : int
    byte_length : int
        Payload bytes in the file.
    shape : tuple of int
        Shape of the decoded array (``shape + (block_size,)`` for opaque codes).
    dtype : numpy.dtype
        dtype of the decoded array.

    Raises
    ------
    KilnError
        TYPE (code, layout, path, offset), SHAPE (also for a shape numpy cannot
        represent), LENGTH (file too short).
    OSError
        When the file cannot be opened.

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> path = os.path.join(tempfile.mkdtemp(), "u4.bin")
    >>> _ = Path(path).write_bytes(bytes.fromhex("21 43 05"))
    >>> p = LazyPayload(path, 17, (5,))
    >>> p[1:4].astype(int)
    array([2, 3, 4])
    """

    def __init__(
        self,
        path: PathLike,
        code: int,
        shape: Sequence[int],
        *,
        offset: int = 0,
        layout: Layout | None = None,
    ) -> None:
        name, c, kind, dims, off = _resolve_all(path, code, shape, offset, layout)
        mapped, self.byte_length = _map_payload(name, c, kind, dims, off, _U8, None)
        self._map = mapped.view(np.ndarray).reshape(-1)
        self._kind = kind
        self._dims = dims
        self.path = name
        self.code = c
        self.layout = layout
        self.offset = off
        self.shape = _decoded_shape(kind, dims)
        self.dtype = _decoded_dtype(kind)
        self._count = _count(dims)
        self._row_elems = _count(self.shape[1:])

    # -- array-like surface ------------------------------------------------

    @property
    def ndim(self) -> int:
        """Number of dimensions of the decoded array."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements of the decoded array."""
        return _count(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded array (as ``ndarray.nbytes``; see ``byte_length``)."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d LazyPayload")
        return self.shape[0]

    def __repr__(self) -> str:
        layout = "" if self.layout is None else f", layout={self.layout!r}"
        return (
            f"LazyPayload({code_label(self.code)}, shape={self.shape}, dtype={self.dtype}, "
            f"{self.byte_length} bytes at offset {self.offset} of {self.path!r}{layout})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles (dask workers, multiprocessing) reopen the file by path.
        return (_reopen, (self.path, self.code, self._dims, self.offset, self.layout))

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
            start, stop, step = lead.indices(n)
            rows = range(start, stop, step)
            if not rows:
                block = self._rows(0, 0)
            elif step == 1:
                block = self._rows(start, stop)
            else:
                lo, hi = min(rows[0], rows[-1]), max(rows[0], rows[-1]) + 1
                span = self._rows(lo, hi)
                block = np.ascontiguousarray(span[rows[0] - lo :: step][: len(rows)])
            return block[(slice(None), *rest)] if rest else block
        if isinstance(lead, (bool, np.bool_)) or not hasattr(lead, "__index__"):
            raise TypeError(
                "a LazyPayload indexes its leading axis with an int or a slice, got "
                f"{_describe(lead)}; decode a range first, e.g. p[a:b][key]"
            )
        i = operator.index(lead)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
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
        >>> path = os.path.join(tempfile.mkdtemp(), "u4.bin")
        >>> _ = Path(path).write_bytes(bytes.fromhex("21 43 05"))
        >>> [c.astype(int).tolist() for c in LazyPayload(path, 17, (5,)).iter_chunks(2)]
        [[1, 2], [3, 4], [5]]
        """
        if not self.shape:
            yield np.asarray(self)
            return
        if rows is None:
            step = max(1, CHUNK_BYTES // max(1, self._row_elems * self.dtype.itemsize))
        elif isinstance(rows, (bool, np.bool_)) or not isinstance(rows, (int, np.integer)):
            raise KilnError("SHAPE", f"rows must be an integer >= 1, got {_describe(rows)}")
        elif rows < 1:
            raise KilnError("SHAPE", f"rows must be an integer >= 1, got {int(rows)}")
        else:
            step = int(rows)
        n = self.shape[0]
        for start in range(0, n, step):
            yield self._rows(start, min(start + step, n))

    # -- decoding ----------------------------------------------------------

    def _rows(self, r0: int, r1: int) -> np.ndarray:
        """Decode leading-axis rows ``[r0, r1)`` into a new array."""
        shape = (r1 - r0, *self.shape[1:])
        kind = self._kind
        if isinstance(kind, DType) and kind.packed:
            e0, e1 = r0 * self._row_elems, r1 * self._row_elems
            if e1 == self._count and e1 > e0:
                _nibbles.check_padding(
                    self._map, self._count, f"{code_label(self.code)} shape {self._dims}: "
                )
            b0, b1 = e0 // 2, (e1 + 1) // 2
            out = np.empty(2 * (b1 - b0), _U8)
            _nibbles.unpack_into(self._map[b0:b1], out, out.size)
            # An odd first element is the high nibble of byte b0: skip one.
            first = e0 % 2
            return out[first : first + e1 - e0].view(kind.dtype).reshape(shape)
        width = self.dtype.itemsize
        unit = self._row_elems * width
        src = self._map[r0 * unit : r1 * unit]
        if isinstance(kind, DType) and kind.code == Code.BOOL:
            try:
                _check_bool_bytes(src, self.code, self._dims)
            except KilnError as err:
                where = f"read in rows {r0}..{r1 - 1}"
                raise _content_error(
                    err, r0 * self._row_elems, self.code, self._dims, where
                ) from None
        out = src.copy()
        if isinstance(kind, Layout):
            return out.reshape(shape)
        return _host_order(out, kind).reshape(shape)


def _reopen(
    path: str, code: int, dims: tuple[int, ...], offset: int, layout: Layout | None
) -> LazyPayload:
    return LazyPayload(path, code, dims, offset=offset, layout=layout)


def open_payload(
    path: PathLike,
    code: int,
    shape: Sequence[int],
    *,
    offset: int = 0,
    layout: Layout | None = None,
) -> np.ndarray | LazyPayload:
    """Open a payload stored in a file without reading it.

    Parameters
    ----------
    path : str or os.PathLike
        The file.  It must hold at least ``byte_length(code, shape, layout)``
        bytes from ``offset``; bytes after the payload are allowed (a file
        may hold several payloads) and are never read.
    code : int
        The dtype code: 1-19, or 4096-32767 with ``layout``.
    shape : sequence of int
        Element shape; ``()`` is a scalar.
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.

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
        TYPE for a bad code, layout, path or offset (an integer in
        0..2**63-1); SHAPE for a malformed shape or one numpy cannot
        represent; LENGTH when the file holds fewer than ``byte_length`` bytes
        at ``offset``.
    OSError
        When the file cannot be opened or mapped.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "f32.bin")
    >>> np.arange(6, dtype="<f4").tofile(path)
    >>> open_payload(path, 2, (2, 3))[1]
    memmap([3., 4., 5.], dtype=float32)
    """
    name, c, kind, dims, off = _resolve_all(path, code, shape, offset, layout)
    if isinstance(kind, DType) and (
        kind.packed
        or kind.code == Code.BOOL
        # ml_dtypes types are native-only: a big-endian host must swap bf16.
        or (_codec._BIG_ENDIAN_HOST and _codec._native_only(kind.dtype))
    ):
        return LazyPayload(name, c, dims, offset=off)
    mapped, _ = _map_payload(
        name, c, kind, dims, off, _decoded_dtype(kind), _decoded_shape(kind, dims)
    )
    return mapped


# -- writing ---------------------------------------------------------------


@contextlib.contextmanager
def _replacing(path: str, offset: int) -> Iterator[tuple[str, IO[bytes]]]:
    """Yield a temporary sibling of ``path`` (holding a copy of ``path``'s first
    ``offset`` bytes) and rename it over ``path`` when the block succeeds; on
    any failure the temporary file is removed and ``path`` is untouched."""
    directory, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.part")
    # 0o666 through the umask, as open() would: the final file gets the usual mode.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            if offset:
                _copy_prefix(path, f, offset)
            yield tmp, f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _copy_prefix(path: str, dst: IO[bytes], offset: int) -> None:
    block = bytearray(min(_COPY_BLOCK, offset))
    left = offset
    with open(path, "rb") as src:
        while left:
            view = memoryview(block)[: min(left, len(block))]
            got = src.readinto(view)
            if not got:
                break
            dst.write(view[:got])
            left -= got
    if left:
        raise KilnError(
            "LENGTH",
            f"writing at offset {offset} of {path!r} keeps its first {offset} bytes: "
            f"expected {offset} bytes, but it holds {offset - left} (short by {left})",
            expected=offset,
            found=offset - left,
        )


def _write_all(f: IO[bytes], data: np.ndarray) -> None:
    view = np.ascontiguousarray(data).reshape(-1).view(_U8).data
    while view.nbytes:
        # Raw (unbuffered) files may write part of the buffer.
        view = view[f.write(view) or 0 :]


def _shift_in(carry: int, packed: np.ndarray, count: int) -> np.ndarray:
    """Pack the stream ``[carry, v0, v1, ...]`` from the packed ``count`` values
    ``v``: every element moves up one nibble.  Vectorized over bytes."""
    p = packed.size
    out = np.empty((count + 2) // 2, _U8)
    out[0] = carry | (int(packed[0]) & 0x0F) << 4
    if p > 1:
        body = out[1:p]
        np.right_shift(packed[: p - 1], 4, out=body)
        low = np.bitwise_and(packed[1:p], 0x0F)
        np.left_shift(low, 4, out=low)
        np.bitwise_or(body, low, out=body)
    if out.size > p:  # count even: the last value moves into a byte of its own
        out[p] = packed[p - 1] >> 4
    return out


class _Stream:
    """Encode C-order chunks along axis 0 and write them in order."""

    def __init__(
        self,
        f: IO[bytes],
        kind: DType | Layout | None,
        code: int | None,
        layout: Layout | None,
        dims: tuple[int, ...] | None,
    ) -> None:
        self.f = f
        self.kind = kind
        self.code = code
        self.layout = layout
        self.dims = dims
        self.tail: tuple[int, ...] | None = None if dims is None else dims[1:]
        self.rows = 0
        self.elements = 0
        self.written = 0
        self.chunks = 0
        self.carry: int | None = None

    def _expected_bytes(self) -> int | None:
        if self.dims is None or self.kind is None:
            return None
        return _payload_bytes(self.kind, _count(self.dims))

    def _encode(self, chunk: object) -> tuple[np.ndarray, tuple[int, ...]]:
        arr = _as_array(chunk)
        try:
            payload = from_numpy(arr, code=self.code, layout=self.layout)
        except KilnError as err:
            if err.index is None or err.code is None:
                raise
            where = f"in chunk {self.chunks} (from row {self.rows})"
            raise _content_error(err, self.elements, err.code, self.dims, where) from None
        if self.code is None:
            self.code = int(payload.code)
            self.kind = _resolve(payload.code, self.layout)
        return np.frombuffer(payload.data, _U8), payload.shape

    def feed(self, chunk: object) -> None:
        data, shape = self._encode(chunk)
        assert self.kind is not None
        assert self.code is not None
        if not shape:
            raise KilnError(
                "SHAPE",
                f"{code_label(self.code)}: expected chunks that are C-order slabs along axis 0, "
                f"found chunk {self.chunks} 0-d (pass a single array to write a scalar)",
                code=self.code,
            )
        if self.tail is None:
            self.tail = shape[1:]
        if shape[1:] != self.tail:
            raise KilnError(
                "SHAPE",
                f"{code_label(self.code)}: chunk {self.chunks} has shape {shape}: every chunk "
                f"must be (rows, *{self.tail}) to continue the stream",
                code=self.code,
                shape=shape,
            )
        rows = shape[0]
        if self.dims is not None and self.rows + rows > self.dims[0]:
            expected = self._expected_bytes()
            raise KilnError(
                "LENGTH",
                f"{code_label(self.code)} shape {self.dims}: chunk {self.chunks} brings rows "
                f"{self.rows}..{self.rows + rows - 1}, past the {self.dims[0]} rows the shape "
                f"holds (expected {expected} bytes in all)",
                code=self.code,
                shape=self.dims,
                expected=expected,
                found=self.written + data.size,
            )
        count = _count(shape)
        if isinstance(self.kind, DType) and self.kind.packed and count:
            data = self._carry_nibbles(data, count)
        _write_all(self.f, data)
        self.written += data.size
        self.rows += rows
        self.elements += count
        self.chunks += 1

    def _carry_nibbles(self, data: np.ndarray, count: int) -> np.ndarray:
        if self.carry is not None:
            data = _shift_in(self.carry, data, count)
            count += 1
        self.carry = None
        if count % 2:  # hold the unpaired nibble back for the next chunk
            self.carry = int(data[-1])
            data = data[:-1]
        return data

    def finish(self) -> PayloadInfo:
        if self.code is None or self.kind is None:
            raise KilnError(
                "TYPE",
                "an empty chunk stream names no dtype: expected code= (and shape=) to write "
                "an empty payload, found code=None",
            )
        if self.carry is not None:
            _write_all(self.f, np.array([self.carry], _U8))
            self.written += 1
            self.carry = None
        if self.dims is None:
            self.dims = (self.rows, *(self.tail or ()))
        expected = self._expected_bytes()
        assert expected is not None
        if self.rows != self.dims[0]:
            raise KilnError(
                "LENGTH",
                f"{code_label(self.code)} shape {self.dims}: the chunk stream ended after "
                f"{self.rows} of {self.dims[0]} rows: expected {expected} bytes, found "
                f"{self.written} (short by {expected - self.written})",
                code=self.code,
                shape=self.dims,
                expected=expected,
                found=self.written,
            )
        code = self.kind.code if isinstance(self.kind, DType) else self.code
        return PayloadInfo(code, self.dims, 0, self.written, self.layout)


def _array_chunks(arr: np.ndarray) -> Iterator[np.ndarray]:
    row_bytes = max(1, arr[:1].nbytes)
    step = max(1, CHUNK_BYTES // row_bytes)
    # At least one chunk, so that an empty array still names its dtype.
    for start in range(0, max(arr.shape[0], 1), step):
        yield arr[start : start + step]


def _stream_to(
    f: IO[bytes],
    source: object,
    kind: DType | Layout | None,
    code: int | None,
    layout: Layout | None,
    dims: tuple[int, ...] | None,
) -> PayloadInfo:
    stream = _Stream(f, kind, code, layout, dims)
    if isinstance(source, LazyPayload) and source.ndim:
        chunks: Iterable[object] = source.iter_chunks()
    elif isinstance(source, np.ndarray) or hasattr(source, "__array__"):
        arr = _as_array(source)
        elem_ndim = arr.ndim - (1 if isinstance(kind, Layout) else 0)
        if dims is not None and arr.shape[:elem_ndim] != dims:
            raise KilnError(
                "SHAPE",
                f"{'' if code is None else code_label(code) + ': '}shape={dims} was given: "
                f"expected an array of element shape {dims}, found {arr.shape[:elem_ndim]}",
                code=code,
                shape=dims,
            )
        if elem_ndim <= 0:  # a scalar (or one opaque block): write it whole
            payload = from_numpy(arr, code=code, layout=layout)
            _write_all(f, np.frombuffer(payload.data, _U8))
            return PayloadInfo(payload.code, payload.shape, 0, payload.nbytes, layout)
        chunks = _array_chunks(arr)
    elif isinstance(source, Iterable) and not isinstance(source, (str, bytes, bytearray)):
        if dims == ():
            raise KilnError(
                "SHAPE",
                "shape=() is a scalar: expected a single array, found an iterable of chunks",
                code=code,
            )
        chunks = source
    else:
        raise KilnError(
            "TYPE",
            f"expected an array or an iterable of array chunks, got {_describe(source)}",
        )
    for chunk in chunks:
        stream.feed(chunk)
    return stream.finish()


def write_payload(
    path_or_file: PathLike | IO[bytes],
    array_or_chunks: object,
    *,
    code: int | None = None,
    shape: Sequence[int] | None = None,
    offset: int = 0,
    layout: Layout | None = None,
) -> PayloadInfo:
    """Encode an array, or a stream of chunks, into a payload file.

    Parameters
    ----------
    path_or_file : str, os.PathLike or binary file
        A path: the payload goes to a temporary file beside it that is renamed
        over ``path`` only when the whole stream is written and checked, so a
        failure leaves ``path`` as it was.  With ``offset > 0`` the first
        ``offset`` bytes of the existing ``path`` are copied in front of the
        payload (what followed them is not kept).  The rename is atomic but not
        fsync'ed.  A seekable binary file object: the payload is written at
        ``offset``; the caller owns it, so a failure may leave part of the
        payload written.
    array_or_chunks : array_like or iterable of array_like
        An ndarray (or anything with ``__array__``), written in bounded
        chunks; a :class:`LazyPayload`, streamed chunk by chunk; or any other
        iterable of arrays that are consecutive C-order slabs along axis 0,
        all of one dtype and trailing shape.  A 4-bit chunk that ends on an
        odd element hands its last nibble to the next chunk.
    code : int, optional
        Inferred from the dtype when omitted; when given, every chunk's dtype
        must be the code's (kiln_np never casts).
    shape : sequence of int, optional
        The payload's element shape.  Given, the stream must supply exactly
        ``shape[0]`` rows of ``shape[1:]``; omitted, it is the rows the stream
        supplies.
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        For opaque codes: chunks are uint8 blocks of shape
        ``(rows, ..., block_size)``.

    Returns
    -------
    PayloadInfo
        ``(code, shape, offset, nbytes, layout)`` of the written payload.

    Raises
    ------
    KilnError
        TYPE for a dtype that is not the code's, a bad bool byte or 4-bit
        value (the index is the element's in the whole payload), an empty
        stream with no ``code``, an offset that is not an integer in
        0..2**63-1; SHAPE for a 0-d chunk or one whose trailing
        shape differs; LENGTH when the stream gives fewer or more rows than
        ``shape[0]``.
    OSError
        When the file cannot be written.

    Examples
    --------
    >>> import os, tempfile, ml_dtypes
    >>> from pathlib import Path
    >>> path = os.path.join(tempfile.mkdtemp(), "u4.bin")
    >>> chunks = (np.array(c, dtype=ml_dtypes.uint4) for c in ([1, 2, 3], [4, 5]))
    >>> write_payload(path, chunks)
    PayloadInfo(code=<Code.U4: 17>, shape=(5,), offset=0, nbytes=3, layout=None)
    >>> Path(path).read_bytes().hex(" ")
    '21 43 05'
    """
    off = _check_offset(offset)
    dims = None if shape is None else _check_shape(shape)
    if code is None and layout is not None:
        raise KilnError(
            "TYPE", f"a layout ({layout!r}) needs an opaque code in 4096-32767, got code=None"
        )
    kind = None if code is None else _resolve(code, layout)
    c = None if code is None else int(code)
    if isinstance(path_or_file, (str, os.PathLike)):
        with _replacing(_check_path(path_or_file), off) as (_, f):
            info = _stream_to(f, array_or_chunks, kind, c, layout, dims)
    else:
        f = path_or_file
        if not (hasattr(f, "write") and hasattr(f, "seek")):
            raise KilnError(
                "TYPE",
                f"expected a path or a seekable binary file, got {_describe(path_or_file)}",
            )
        f.seek(off)
        info = _stream_to(f, array_or_chunks, kind, c, layout, dims)
    return info._replace(offset=off)
