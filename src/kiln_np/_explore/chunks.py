"""What the notebook reads: arrays, Payloads and LazyPayloads as C-order chunks.

Everything :func:`kiln_np.describe` and :func:`kiln_np.bit_histogram` look at
is read once, in C order, one bounded 1-D chunk at a time: a view of a
contiguous array, a small copy otherwise, a payload decoded a bounded range
of elements at a time.  The chunk sizes are here, read at call time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload, to_numpy
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import payload_info
from kiln_np._core.table import DType, Layout, code_label, dtype_info, row_for_dtype
from kiln_np._files.payload import LazyPayload

__all__ = [
    "CHUNK",
    "COUNTED_BITS",
    "COUNT_CHUNK",
    "Source",
    "as_array",
    "flat_chunks",
    "refuse_opaque",
    "source",
]

CHUNK = 1 << 16
"""Elements per chunk: a float64 widening copy of one chunk (512 KiB) and its
masks stay in cache across the several passes the statistics make."""

COUNT_CHUNK = 1 << 19
"""Elements per chunk when 16-bit patterns are counted: 65,536 counters are
added once per chunk, so chunks are larger (``np.bincount`` widens a chunk to
8-byte indices: 4 MiB)."""

COUNTED_BITS = 16
"""Types up to this width get exact bit-pattern counts."""

Source = npt.ArrayLike | Payload | LazyPayload
"""What is described: an array (or anything numpy makes one of) or a payload."""


def as_array(array: object) -> np.ndarray:
    """``np.asarray(array)``; TYPE when numpy cannot make an array of it.

    >>> as_array([1, 2]).tolist()
    [1, 2]
    """
    try:
        return np.asarray(array)
    except Exception as exc:  # ragged nesting, a failing __array__: user code raised
        raise KilnError(
            "TYPE",
            f"expected an array, cannot make one of {type(array).__name__}: "
            f"{type(exc).__name__}: {str(exc)[:200]}",
        ) from exc


def refuse_opaque(code: int, layout: Layout) -> KilnError:
    """The TYPE error for an opaque payload, whose blocks have no element type."""
    return KilnError(
        "TYPE",
        f"{code_label(code)} layout {layout.name!r}: expected elements of a closed code "
        "(1-19) to describe, found an opaque payload, whose blocks have no element type; "
        "decode its blocks first",
        code=code,
    )


def flat_chunks(arr: np.ndarray, size: int = CHUNK) -> Iterator[np.ndarray]:
    """C-order 1-D chunks of ``arr``: views when contiguous, small copies otherwise.

    >>> [c.tolist() for c in flat_chunks(np.arange(6).reshape(2, 3).T, 4)]
    [[0, 3, 1, 4], [2, 5]]
    """
    n = arr.size
    flat = arr.reshape(-1) if arr.flags.c_contiguous else None
    for lo in range(0, n, size):
        hi = min(lo + size, n)
        yield flat[lo:hi] if flat is not None else np.asarray(arr.flat[lo:hi])


def _payload_chunks(payload: Payload, row: DType, count: int) -> Iterator[np.ndarray]:
    """A payload decoded a bounded range of elements at a time (an even count per
    chunk, so every chunk but the last starts and ends on a byte)."""
    step = 2 * COUNT_CHUNK
    for e0 in range(0, count, step):
        e1 = min(e0 + step, count)
        b0 = payload_info(row.code, (e0,)).byte_length
        b1 = payload_info(row.code, (e1,)).byte_length
        try:
            yield to_numpy(row.code, payload.data[b0:b1], (e1 - e0,))
        except KilnError as exc:  # a bool byte or padding nibble: its index in the whole
            raise exc.shifted(e0) from None


def source(array: Source) -> tuple[DType, tuple[int, ...], Iterable[np.ndarray]]:
    """The row, shape and C-order 1-D chunks of what is described.

    >>> row, shape, chunks = source(np.zeros((2, 3), np.uint8))
    >>> row.name, shape, [c.size for c in chunks]
    ('u8', (2, 3), [6])
    """
    if isinstance(array, Payload):
        info = array.info
        if info.layout is not None:
            raise refuse_opaque(info.code, info.layout)
        info.check_length(array.data.nbytes)
        row = dtype_info(info.code)
        return row, info.shape, _payload_chunks(array, row, info.count)
    if isinstance(array, LazyPayload):
        if array.layout is not None:
            raise refuse_opaque(array.code, array.layout)
        chunks = (c.reshape(-1) for c in array.iter_chunks())
        return row_for_dtype(array.dtype), tuple(array.shape), chunks
    arr = as_array(array)
    row = row_for_dtype(arr.dtype)
    size = COUNT_CHUNK if row.bits == COUNTED_BITS else CHUNK
    return row, tuple(int(d) for d in arr.shape), flat_chunks(arr, size)
