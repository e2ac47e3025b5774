"""What the notebook reads: arrays, Payloads, LazyPayloads and weight tensors as
C-order chunks.

Everything :func:`kiln_np.describe` and :func:`kiln_np.bit_histogram` look at
is read once, in C order, one bounded 1-D chunk at a time: a view of a
contiguous array, a small copy otherwise, a payload decoded a bounded range
of elements at a time, a GGML quantized payload dequantized a bounded run of
blocks at a time (never the whole tensor's float32 at once).  The chunk sizes
are here, read at call time.

The element types described are the closed codes' and the foreign float
types that fill their byte (the FNUZ float8s, :data:`FOREIGN_ROWS`): rows of
the same shape as the code table's, under their opaque code.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import NamedTuple, cast

import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload, to_numpy
from kiln_np._core.checks import byte_view
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import FOREIGN, foreign_for_dtype
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import (
    Code,
    DType,
    Layout,
    code_label,
    dtype_info,
    row_for_dtype,
)
from kiln_np._core.torch_types import is_tensor, tensor_array
from kiln_np._files.payload import LazyPayload
from kiln_np._quants.blocks import Block
from kiln_np._quants.decode import dequantize_blocks
from kiln_np._quants.elements import element_of
from kiln_np._weights.logical import LogicalTensor, row_chunks
from kiln_np._weights.tensors import WeightTensor

__all__ = [
    "CHUNK",
    "COUNTED_BITS",
    "COUNT_CHUNK",
    "FOREIGN_ROWS",
    "Quantized",
    "Source",
    "as_array",
    "dequantized_chunks",
    "element_row",
    "flat_chunks",
    "quantized",
    "refuse_opaque",
    "row_of_code",
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

Source = npt.ArrayLike | Payload | LazyPayload | WeightTensor
"""What is described: an array (or anything numpy makes one of), a payload or a
weight tensor."""

FOREIGN_ROWS: Mapping[int, DType] = MappingProxyType(
    {
        f.code: DType(cast(Code, f.code), f.name, f.dtype_spec, f.bits, f.element)
        for f in FOREIGN
        if f.name in ("float8_e4m3fnuz", "float8_e5m2fnuz")
    }
)
"""The foreign element types described as their float type (the FNUZ float8s),
as rows under their opaque code: every other foreign type is complex or sub-byte."""


def row_of_code(code: int) -> DType:
    """The row of a closed code or of a :data:`FOREIGN_ROWS` code.

    >>> row_of_code(2).name, row_of_code(0x4F12).name
    ('f32', 'float8_e4m3fnuz')
    """
    found = FOREIGN_ROWS.get(code)
    return dtype_info(code) if found is None else found


def element_row(dtype: npt.DTypeLike) -> DType:
    """The row of a Kiln dtype, or of an FNUZ float8 (:data:`FOREIGN_ROWS`); TYPE
    for any other.

    >>> import ml_dtypes
    >>> element_row(np.float32).name, element_row(ml_dtypes.float8_e5m2fnuz).code
    ('f32', 20244)
    """
    try:
        return row_for_dtype(dtype)
    except KilnError:
        try:
            foreign = foreign_for_dtype(np.dtype(dtype))
        except (TypeError, ValueError):  # no dtype at all: row_for_dtype's TYPE stands
            foreign = None
        if foreign is None or foreign.code not in FOREIGN_ROWS:
            raise
        return FOREIGN_ROWS[foreign.code]


class Quantized(NamedTuple):
    """A GGML quantized payload that has a decoder: its checked description, its
    block type and its bytes (flat uint8, their length checked)."""

    info: PayloadInfo
    block: Block
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical element shape (the last block axis times the block's elements)."""
        blocks = self.info.shape
        elements = self.block.elements
        return (*blocks[:-1], blocks[-1] * elements) if blocks else (elements,)


def quantized(x: object) -> Quantized | None:
    """``x`` (a Payload or a weight tensor) as a decodable GGML payload, or None.

    >>> q = quantized(Payload(0x4708, bytes(68), (2,), Layout("ggml.q8_0", 34)))
    >>> q.block.name, q.shape, quantized(np.zeros(2)) is None
    ('Q8_0', (64,), True)
    """
    if isinstance(x, WeightTensor):
        if element_of(x.code, x.layout).decoded is None:
            return None
        x = x.payload()
    if not isinstance(x, Payload):
        return None
    info = x.info
    block = element_of(info.code, info.layout).decoded
    if block is None:
        return None
    data = byte_view(x.data, "the payload's data")
    info.check_length(data.size)
    return Quantized(info, block, data)


def dequantized_chunks(q: Quantized) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Runs of whole blocks of ``q``: ``(blocks, values)``, the blocks as uint8
    rows ``(n, block bytes)`` (views of the payload) and their exact float32
    values ``(n, block elements)``, about :data:`COUNT_CHUNK` elements a run.

    >>> q = quantized(Payload(0x4708, bytes([0, 0x3C] + [1] * 32), (1,), Layout("ggml.q8_0", 34)))
    >>> [(b.shape, v[0, :2].tolist()) for b, v in dequantized_chunks(q)]
    [((1, 34), [1.0, 1.0])]
    """
    block = q.block
    rows = q.data.reshape(-1, block.bytes)
    step = max(1, COUNT_CHUNK // block.elements)
    for b0 in range(0, rows.shape[0], step):
        part = rows[b0 : b0 + step]
        values = dequantize_blocks(block.name, part, (part.shape[0],))
        yield part, values.reshape(part.shape[0], block.elements)


def as_array(array: object) -> np.ndarray:
    """``np.asarray(array)``; TYPE when numpy cannot make an array of it.

    A torch tensor is read bit for bit (``_core.torch_types``).

    >>> as_array([1, 2]).tolist()
    [1, 2]
    """
    if is_tensor(array):
        return tensor_array(array)
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
    """The row, shape and C-order 1-D chunks of what is described: a GGML
    quantized payload (or tensor) as its f32 values, an FNUZ float8 payload as
    its float type, a quantization scheme's weight (a logical tensor) as its
    values in the reference's own output dtype.

    >>> row, shape, chunks = source(np.zeros((2, 3), np.uint8))
    >>> row.name, shape, [c.size for c in chunks]
    ('u8', (2, 3), [6])
    """
    if isinstance(array, LogicalTensor):  # a scheme's weight: its values, whole rows a chunk
        values = (c.reshape(-1) for c in row_chunks(array, None, COUNT_CHUNK))
        return row_for_dtype(array.dtype), array.shape, values
    if isinstance(array, WeightTensor) and array.layout is not None:
        array = array.payload()  # opaque: read as a payload; closed codes as arrays
    if isinstance(array, Payload):
        q = quantized(array)
        if q is not None:
            values = (v.reshape(-1) for _, v in dequantized_chunks(q))
            return dtype_info(Code.F32), q.shape, values
        info = array.info
        found = element_of(info.code, info.layout).foreign
        foreign = None if found is None else FOREIGN_ROWS.get(found.code)
        if foreign is not None:
            data = byte_view(array.data, "the payload's data")
            info.check_length(data.size)
            return foreign, info.shape, flat_chunks(data.view(foreign.dtype), COUNT_CHUNK)
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
    row = element_row(arr.dtype)
    size = COUNT_CHUNK if row.bits == COUNTED_BITS else CHUNK
    return row, tuple(int(d) for d in arr.shape), flat_chunks(arr, size)
