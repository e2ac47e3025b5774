"""Payload files, written: :func:`save_payload` encodes an array, or an iterable
of C-order chunks along axis 0, into a payload file, with memory bounded by the
chunk size.

- **Description first.**  Code, layout and shape are checked (TYPE, SHAPE)
  before any file is touched; when both code and shape are known the
  payload's :class:`~kiln_np.PayloadInfo` is built at once, else as soon as
  the stream names them.
- **Chunks.**  Every chunk is encoded by :func:`~kiln_np.from_numpy` (never
  cast) and must continue the stream: the same trailing shape, no more rows
  than the shape holds.  A chunk boundary on an odd 4-bit element carries the
  unpaired nibble into the next chunk.  A content error names the element's
  index in the whole payload and the chunk it was in.
- **Crash safety.**  To a path it writes a temporary sibling and renames it
  over the path only when the whole stream is good
  (:func:`~kiln_np._files.io.replacing`), so a short or inconsistent stream
  never leaves a complete-looking file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import IO

import numpy as np

from kiln_np._codec import Payload, as_array, from_numpy
from kiln_np._core.checks import U8, check_offset, check_path, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import CodeLike, Layout, ShapeLike, check_shape, code_label, resolve

from .io import replacing, write_all
from .payload import CHUNK_BYTES, LazyPayload, PathLike

__all__ = ["save_payload"]


def _shift_in(carry: int, packed: np.ndarray, count: int) -> np.ndarray:
    """Pack the stream ``[carry, v0, v1, ...]`` from the packed ``count`` values
    ``v``: every element moves up one nibble.  Vectorized over bytes."""
    p = packed.size
    out = np.empty((count + 2) // 2, U8)
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
    """Encode C-order chunks along axis 0 and write them in order.

    ``code`` (and ``layout``) may be unknown until the first chunk names it;
    ``dims``, the shape the caller promised, may be unknown until the end.
    The description is built as soon as both are known."""

    def __init__(
        self,
        f: IO[bytes],
        code: CodeLike | None,
        layout: Layout | None,
        dims: tuple[int, ...] | None,
    ) -> None:
        self.f = f
        self.code = code
        self.layout = layout
        self.dims = dims
        self.info: PayloadInfo | None = None
        if code is not None and dims is not None:
            self.info = payload_info(code, dims, layout)
        self.tail: tuple[int, ...] | None = None if dims is None else dims[1:]
        self.rows = 0
        self.elements = 0
        self.written = 0
        self.chunks = 0
        self.carry: int | None = None
        self.data = np.empty(0, U8)

    def _encode(self, chunk: object) -> PayloadInfo:
        """Encode ``chunk``; its bytes go to ``self.data``, its description is returned."""
        try:
            payload = from_numpy(as_array(chunk), code=self.code, layout=self.layout)
        except KilnError as err:
            where = f"in chunk {self.chunks} (from row {self.rows})"
            raise err.shifted(self.elements, where) from None
        if self.code is None:
            self.code = payload.code
        if self.info is None and self.dims is not None:
            self.info = payload_info(self.code, self.dims, self.layout)
        self.data = np.frombuffer(payload.data, U8)
        return payload.info

    def feed(self, chunk: object) -> None:
        chunk_info = self._encode(chunk)
        data, shape, code = self.data, chunk_info.shape, int(chunk_info.code)
        if not shape:
            raise KilnError(
                "SHAPE",
                f"{code_label(code)}: expected an array, or chunks that are C-order slabs "
                f"along axis 0, found chunk {self.chunks} 0-d ({show_value(chunk)}): an "
                "iterable is read as chunks, so pass np.asarray(values) to write a sequence "
                "of numbers as one array, or a single 0-d array to write a scalar",
                code=code,
            )
        if self.tail is None:
            self.tail = shape[1:]
        if shape[1:] != self.tail:
            raise KilnError(
                "SHAPE",
                f"{code_label(code)}: chunk {self.chunks} has shape {shape}: every chunk "
                f"must be (rows, *{self.tail}) to continue the stream",
                code=code,
                shape=shape,
            )
        rows = shape[0]
        if self.info is not None and self.rows + rows > self.info.shape[0]:
            info = self.info
            raise KilnError(
                "LENGTH",
                f"{info.context}chunk {self.chunks} brings rows {self.rows}.."
                f"{self.rows + rows - 1}, past the {info.shape[0]} rows the shape holds "
                f"(expected {info.byte_length} bytes in all)",
                code=info.code,
                shape=info.shape,
                expected=info.byte_length,
                found=self.written + data.size,
            )
        count = chunk_info.count
        if chunk_info.element.packed and count:
            data = self._carry_nibbles(data, count)
        write_all(self.f, data)
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
        if self.code is None:
            raise KilnError(
                "TYPE",
                "an empty chunk stream names no dtype: expected code= (and shape=) to write "
                "an empty payload, found code=None",
            )
        if self.carry is not None:
            write_all(self.f, np.array([self.carry], U8))
            self.written += 1
            self.carry = None
        info = self.info or payload_info(self.code, (self.rows, *(self.tail or ())), self.layout)
        if self.rows != info.shape[0]:
            raise KilnError(
                "LENGTH",
                f"{info.context}the chunk stream ended after {self.rows} of {info.shape[0]} "
                f"rows: expected {info.byte_length} bytes, found {self.written} "
                f"(short by {info.byte_length - self.written})",
                code=info.code,
                shape=info.shape,
                expected=info.byte_length,
                found=self.written,
            )
        return info


_PAYLOAD_HINT = (
    "; a Payload is bytes already encoded: pass its array, kiln_np.to_numpy(*payload) "
    "(and code= and layout= for an opaque code)"
)


def _array_chunks(arr: np.ndarray) -> Iterator[np.ndarray]:
    row_bytes = max(1, arr[:1].nbytes)
    step = max(1, CHUNK_BYTES // row_bytes)
    # At least one chunk, so that an empty array still names its dtype.
    for start in range(0, max(arr.shape[0], 1), step):
        yield arr[start : start + step]


def _stream_to(
    f: IO[bytes],
    source: object,
    code: CodeLike | None,
    layout: Layout | None,
    dims: tuple[int, ...] | None,
) -> PayloadInfo:
    stream = _Stream(f, code, layout, dims)
    if isinstance(source, LazyPayload) and source.ndim:
        chunks: Iterable[object] = source.iter_chunks()
    elif isinstance(source, np.ndarray) or hasattr(source, "__array__"):
        arr = as_array(source)
        elem_ndim = arr.ndim - (1 if layout is not None else 0)
        if dims is not None and arr.shape[:elem_ndim] != dims:
            raise KilnError(
                "SHAPE",
                f"shape={dims} was given: expected an array of element shape {dims}, "
                f"found {arr.shape[:elem_ndim]}",
                shape=dims,
            )
        if elem_ndim <= 0:  # a scalar (or one opaque block): write it whole
            payload = from_numpy(arr, code=code, layout=layout)
            write_all(f, np.frombuffer(payload.data, U8))
            return payload.info
        chunks = _array_chunks(arr)
    elif isinstance(source, Iterable) and not isinstance(source, (str, bytes, bytearray, Payload)):
        if dims == ():
            raise KilnError(
                "SHAPE",
                "shape=() is a scalar: expected a single array, found an iterable of chunks",
            )
        chunks = source
    else:
        raise KilnError(
            "TYPE",
            f"expected an array or an iterable of array chunks, got {show_value(source)}"
            + (_PAYLOAD_HINT if isinstance(source, Payload) else ""),
        )
    for chunk in chunks:
        stream.feed(chunk)
    return stream.finish()


@set_module("kiln_np")
def save_payload(
    path_or_file: PathLike | IO[bytes],
    array_or_chunks: object,
    *,
    code: CodeLike | None = None,
    shape: ShapeLike | None = None,
    offset: int = 0,
    layout: Layout | None = None,
) -> PayloadInfo:
    """Encode an array, or a stream of chunks, into a payload file.

    Parameters
    ----------
    path_or_file : str, os.PathLike or binary file
        A path: the payload goes to a temporary file beside it,
        ``.NAME.kiln-np-RANDOM.part``, renamed over ``path`` only when the
        whole stream is written and checked, so a failure leaves ``path`` as
        it was.  A symlink is written through to its target; an existing
        file keeps its permission bits (other hard links to it keep the old
        bytes); an existing path that is not a regular file is refused.  With
        ``offset > 0`` the first ``offset`` bytes of the existing ``path`` are
        copied in front of the payload (what followed them is not kept).  The
        rename is atomic but not fsync'ed.  A seekable binary file object:
        the payload is written at ``offset``; the caller owns it, so a failure
        may leave part of the payload written.
    array_or_chunks : array_like or iterable of array_like
        An ndarray (or anything with ``__array__``), written in bounded
        chunks; a :class:`LazyPayload`, streamed chunk by chunk; or any other
        iterable of arrays that are consecutive C-order slabs along axis 0,
        all of one dtype and trailing shape.  A 4-bit chunk that ends on an
        odd element hands its last nibble to the next chunk.
    code : int or str, optional
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
        The written payload's description, with its ``offset``.

    Raises
    ------
    KilnError
        TYPE for a bad code, layout or offset (an integer in 0..2**63-1), a
        dtype that is not the code's, a bad bool byte or 4-bit value (the
        index is the element's in the whole payload), an empty stream with no
        ``code``, a path that exists but is not a regular file, a
        :class:`Payload` (pass its array, ``to_numpy(*payload)``); SHAPE for a
        bad shape, a 0-d chunk (a list of numbers is chunks of one number
        each: pass ``np.asarray(values)``) or one whose trailing shape
        differs; LENGTH when the stream gives fewer or more rows than
        ``shape[0]``.
    OSError
        When the file cannot be written (it names ``path``, not the
        temporary file).

    Examples
    --------
    >>> import os, tempfile, ml_dtypes
    >>> from pathlib import Path
    >>> chunks = (np.array(c, dtype=ml_dtypes.uint4) for c in ([1, 2, 3], [4, 5]))
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "u4.bin")
    ...     print(save_payload(path, chunks))
    ...     print(Path(path).read_bytes().hex(" "))
    PayloadInfo(code=<Code.U4: 17>, shape=(5,), layout=None, offset=0, byte_length=3)
    21 43 05
    """
    # Code, layout and shape are checked before any file is touched.
    if code is not None and shape is not None:
        dims: tuple[int, ...] | None = payload_info(code, shape, layout).shape
    else:
        if code is not None:
            resolve(code, layout)
        dims = None if shape is None else check_shape(shape)
    off = check_offset(offset)
    if isinstance(path_or_file, (str, os.PathLike)):
        with replacing(check_path(path_or_file), off) as (_, f):
            info = _stream_to(f, array_or_chunks, code, layout, dims)
    else:
        f = path_or_file
        if not (hasattr(f, "write") and hasattr(f, "seek")):
            raise KilnError(
                "TYPE",
                f"expected a path or a seekable binary file, got {show_value(path_or_file)}",
            )
        f.seek(off)
        info = _stream_to(f, array_or_chunks, code, layout, dims)
    return info.with_offset(off)
