"""Checked chunks of a payload: a run of its elements decoded and checked in the
whole payload's terms, and a payload file streamed a bounded chunk at a time.

A chunk's content error reads as the whole payload's would: its context (code
and shape), the bad bool byte's element index in the payload (not in the
chunk), the padding nibble's count and byte offset.  :func:`decode_span` is
that check and decode; :class:`~kiln_np.LazyPayload` reads the rows it is
asked for through it, from its map, and :func:`read_chunks` streams a file
through it with ``readinto`` into one reused buffer, so memory stays bounded
and a file that shrinks while it is read is a clean LENGTH error (a mapped
file that shrinks is a SIGBUS): ``kiln-np decode`` and ``inspect`` read so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from kiln_np._codec import check_bool_bytes, host_order
from kiln_np._core.checks import U8
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, Layout
from kiln_np._kernels import nibbles, pool

from .io import open_regular_raw, read_all

__all__ = ["READ_BYTES", "check_padding_read", "decode_span", "file_where", "read_chunks"]

READ_BYTES = 16 << 20
"""Payload bytes :func:`read_chunks` reads (and decodes) at a time."""


def file_where(path: str, info: PayloadInfo) -> str:
    """How a message names the payload ``info`` in the file ``path``.

    Examples
    --------
    >>> file_where("w.kiln", payload_info(2, (3,)).with_offset(64))
    "'w.kiln' at offset 64: "
    """
    return f"{path!r} at offset {info.offset}: "


def decode_span(
    info: PayloadInfo, src: np.ndarray, e0: int, e1: int, *, note: str = "", where: str = ""
) -> np.ndarray:
    """Elements ``[e0, e1)`` of the payload ``info`` describes, decoded from
    ``src``, their bytes (a flat uint8 array; for a packed code, bytes
    ``e0 // 2`` to ``(e1 + 1) // 2``, so a span may start on an odd nibble).

    The content is checked in the whole payload's terms: a bool byte other
    than 0/1 is TYPE at its element's index in the payload, with ``note``
    after it (``"read in rows 3..5"``); when ``e1`` is the last element, a
    nonzero padding nibble is TYPE.  ``where`` (:func:`file_where`) goes
    before either message.

    Returns
    -------
    numpy.ndarray
        Flat: a view of ``src`` as the dtype for whole-byte codes (a swapped
        copy where the host needs one); a new array for packed codes; ``src``
        itself for opaque blocks (``e0`` and ``e1`` then count bytes).

    Examples
    --------
    >>> info = payload_info(17, (5,))  # u4: bytes 21 43 05
    >>> decode_span(info, np.array([0x43, 0x05], U8), 3, 5).astype(int).tolist()
    [4, 5]
    >>> decode_span(info, np.array([0xF5], U8), 4, 5)
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: TYPE: code 17 (u4) shape (5,): odd count 5: ... 0xf5 at byte offset 2 ...
    """
    element = info.element
    if isinstance(element, Layout):
        return src
    if info.packed:
        check_padding_read(info, src, e0, e1, where)
        out = pool.empty(2 * src.size, U8, 2 * src.size)
        nibbles.unpack_into(src, out, out.size)
        first = e0 % 2  # an odd first element is the high nibble of the first byte
        return out[first : first + e1 - e0].view(element.dtype)
    if info.code == Code.BOOL:
        try:
            check_bool_bytes(src, info)
        except KilnError as err:
            raise err.shifted(e0, note).prefixed(where) from None
    return host_order(src, element)


def check_padding_read(
    info: PayloadInfo, src: np.ndarray, e0: int, e1: int, where: str = ""
) -> None:
    """A read of elements ``[e0, e1)`` of the packed payload ``info`` that
    reaches its last element checks the padding nibble, in the whole payload's
    terms (its count, the byte offset of its last byte); ``src`` ends with the
    payload's last byte, the only one read.  ``where`` goes before the message.

    Examples
    --------
    >>> check_padding_read(payload_info(17, (3,)), np.array([0x03], U8), 2, 3)
    >>> check_padding_read(payload_info(17, (3,)), np.array([0x13], U8), 0, 2)  # not the last
    """
    if e1 == info.count and e1 > e0:
        # The check reads only the last byte and the size: a zero-stride view of
        # that byte stands in for the payload.
        whole = np.lib.stride_tricks.as_strided(src[-1:], (info.byte_length,), (0,))
        nibbles.check_padding(whole, info.count, where + info.context)


def read_chunks(
    path: str, info: PayloadInfo, progress: Callable[[int], None] | None = None
) -> Iterator[np.ndarray]:
    """Decoded 1-D chunks of the payload ``info`` describes at ``info.offset``
    of the file ``path``, in order, each checked as it is read
    (:func:`decode_span`), about :data:`READ_BYTES` payload bytes each.

    An opaque payload comes as its bytes (blocks Kiln does not interpret), so
    a chunk stays bounded whatever the block size; a packed one in chunks of
    an even element count, each starting on a byte.  A chunk is a view of a
    reused buffer: use it before asking for the next.  ``progress`` is called
    with the payload bytes of each chunk read.

    Raises
    ------
    KilnError
        TYPE for a file that is not a regular file or a bad bool byte or
        padding nibble; LENGTH when the file ends before the payload does
        (it shrank since it was measured).  Messages start with
        :func:`file_where`.
    OSError
        When the file cannot be opened or read.

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "u4.bin")
    ...     _ = Path(path).write_bytes(bytes.fromhex("ff 21 43 05"))
    ...     info = payload_info(17, (5,)).with_offset(1)
    ...     [c.astype(int).tolist() for c in read_chunks(path, info)]
    [[1, 2, 3, 4, 5]]
    """
    reading = payload_info(Code.U8, (info.byte_length,)) if info.layout else info
    element = reading.element
    step = max(1, 8 * READ_BYTES // element.bits)
    if element.packed:
        step = max(2, step - step % 2)  # chunks start on a byte: an even element count
    buf = bytearray(element.byte_length(min(step, reading.count)))
    where = file_where(path, info)
    with open_regular_raw(path) as f:
        f.seek(info.offset)
        for start in range(0, reading.count, step):
            stop = min(start + step, reading.count)
            view = memoryview(buf)[: element.byte_length(stop - start)]
            got = read_all(f, view)
            if got < len(view):
                found = element.byte_length(start) + got
                raise info.length_error(found, f"{where}the file shrank while read: ")
            if progress is not None:
                progress(got)
            yield decode_span(reading, np.frombuffer(view, U8), start, stop, where=where)
