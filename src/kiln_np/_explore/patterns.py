"""Bit patterns: what each pattern of a small type means, and exact counts of them.

A type of 16 bits or fewer has at most 65,536 bit patterns, so it is counted
pattern by pattern (``np.bincount`` on the storage bits), never converted;
the floats of 16 bits or more are also counted by exponent field.  Every
statistic of a small type comes exactly from these counts and
:func:`bit_values`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kiln_np._core.checks import U8, set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, DType, code_label, load_ml_dtypes

from .chunks import COUNTED_BITS, Source, element_row, quantized, source

__all__ = [
    "ExponentCounts",
    "PatternCounts",
    "bit_histogram",
    "bit_values",
    "exponent_bits",
    "exponents_of_patterns",
    "finfo",
    "pattern_count",
    "pattern_floats",
]

_U16 = np.dtype(np.uint16)
_STORAGE: dict[int, np.dtype[Any]] = {32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}


def pattern_count(row: DType) -> int:
    """How many bit patterns a type of 16 bits or fewer has; TYPE for wider ones.

    >>> from kiln_np import dtype_info
    >>> pattern_count(dtype_info("e2m1")), pattern_count(dtype_info("bool"))
    (16, 2)
    """
    if row.bits > COUNTED_BITS:
        raise KilnError(
            "TYPE",
            f"bit patterns are counted exactly: expected a type of {COUNTED_BITS} bits or "
            f"fewer, found {code_label(row.code)} ({row.dtype}, {row.bits} bits)",
            code=int(row.code),
        )
    # Only the bytes 0x00 and 0x01 are bools (Kiln rejects any other byte).
    return 2 if row.code == Code.BOOL else 1 << row.bits


def finfo(row: DType) -> Any:
    """ml_dtypes' finfo of a float row (numpy and ml_dtypes types), else None."""
    try:
        return load_ml_dtypes().finfo(row.dtype)
    except ValueError:  # an integer or bool type
        return None


def exponent_bits(row: DType) -> int:
    """Width of the exponent field of the floats histogrammed by binary exponent
    (f16, bf16, f32, f64); 0 for the other types.

    >>> from kiln_np import dtype_info
    >>> exponent_bits(dtype_info("bf16")), exponent_bits(dtype_info("f8e4m3"))
    (8, 0)
    """
    info = finfo(row)
    return int(info.nexp) if info is not None and row.bits >= 16 else 0


@set_module("kiln_np")
def bit_values(dtype: npt.DTypeLike) -> np.ndarray:
    """The value each bit pattern of a type of 16 bits or fewer means.

    Parameters
    ----------
    dtype : dtype_like
        A Kiln dtype of at most 16 bits: ``bfloat16``, ``float16``,
        ``int16``, ``uint16``, ``float8_e4m3fn``, ``float8_e5m2``,
        ``float8_e8m0fnu``, ``int8``, ``uint8``, ``bool``, ``int4``,
        ``uint4``, ``float4_e2m1fn``; or an FNUZ float8
        (``float8_e4m3fnuz``, ``float8_e5m2fnuz``).

    Returns
    -------
    numpy.ndarray
        A 1-D array of ``dtype`` whose element ``i`` has bit pattern ``i``:
        16 elements for the 4-bit types, 256 for the 8-bit ones, 65,536 for
        the 16-bit ones, 2 for bool (only the bytes 0x00 and 0x01 are bools).
        Index it with the same pattern as :func:`bit_histogram` to label
        counts.

    Raises
    ------
    KilnError
        TYPE for a dtype with no Kiln code (other than the FNUZ float8s) or
        wider than 16 bits.

    Examples
    --------
    >>> import ml_dtypes
    >>> values = bit_values(ml_dtypes.float4_e2m1fn)
    >>> values.dtype.name
    'float4_e2m1fn'
    >>> values.tolist()
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    >>> float(bit_values(ml_dtypes.bfloat16)[0x3F80])
    1.0
    """
    row = element_row(dtype)
    storage = U8 if row.bits <= 8 else _U16
    return np.arange(pattern_count(row), dtype=storage).view(row.dtype)


def pattern_floats(dtype: np.dtype[Any]) -> np.ndarray:
    """The float64 value of every bit pattern (casting a NaN pattern of an ml_dtypes
    type warns on some platforms; NaN is the answer).

    >>> pattern_floats(np.dtype(np.int8))[[1, 0xFF]].tolist()
    [1.0, -1.0]
    """
    with np.errstate(invalid="ignore"):
        return bit_values(dtype).astype(np.float64)


class PatternCounts:
    """Accumulates exact bit-pattern counts over chunks.

    >>> from kiln_np import dtype_info
    >>> counts = PatternCounts(dtype_info("u4"), (3,))
    >>> counts.add(np.array([1, 1, 15], np.uint8))
    >>> counts.counts[[1, 15]].tolist(), counts.seen
    ([2, 1], 3)
    """

    def __init__(self, row: DType, shape: tuple[int, ...]) -> None:
        self.row = row
        self.shape = shape
        self.counts = np.zeros(pattern_count(row), np.int64)
        self.storage = U8 if row.bits <= 8 else _U16
        self.seen = 0

    def add(self, chunk: np.ndarray) -> None:
        # In the row's (native) byte order: a '>f2' chunk is copied, then counted.
        storage = np.ascontiguousarray(chunk, dtype=self.row.dtype).view(self.storage)
        counts = np.bincount(storage, minlength=self.counts.size)
        if counts.size > self.counts.size:
            index = int(np.argmax(storage >= self.counts.size))
            found = int(storage[index])
            raise KilnError(
                "TYPE",
                f"{code_label(self.row.code)} shape {self.shape}: expected storage bytes "
                f"0x00-0x{self.counts.size - 1:02x}, found 0x{found:02x} at element "
                f"{self.seen + index}; it is no bit pattern of the type",
                code=int(self.row.code),
                shape=self.shape,
                expected=self.counts.size - 1,
                found=found,
                index=self.seen + index,
            )
        self.counts += counts
        self.seen += storage.size


def exponents_of_patterns(row: DType, counts: np.ndarray) -> np.ndarray:
    """Counts by exponent field from the counts of every 16-bit pattern (sign,
    exponent, mantissa from the top bit down): exact, no element touched.

    >>> from kiln_np import dtype_info
    >>> counts = np.zeros(1 << 16, np.int64)
    >>> counts[[0x3C00, 0xBC00]] = 1  # float16 1.0 and -1.0
    >>> int(np.flatnonzero(exponents_of_patterns(dtype_info("f16"), counts))[0])
    15
    """
    nexp = exponent_bits(row)
    fields = counts.reshape(2, 1 << nexp, -1)
    return np.asarray(fields.sum(axis=(0, 2)), np.int64)


class ExponentCounts:
    """Counts by exponent field of the f32 and f64 elements, from their bits.

    >>> from kiln_np import dtype_info
    >>> counts = ExponentCounts(dtype_info("f32"))
    >>> counts.add(np.array([1.0, 3.0], np.float32))
    >>> np.flatnonzero(counts.counts).tolist()
    [127, 128]
    """

    def __init__(self, row: DType) -> None:
        info = finfo(row)
        self.row = row
        self.shift = int(info.nmant)
        self.mask = (1 << int(info.nexp)) - 1
        self.counts = np.zeros(1 << int(info.nexp), np.int64)

    def add(self, chunk: np.ndarray) -> None:
        bits = np.ascontiguousarray(chunk, dtype=self.row.dtype).view(_STORAGE[self.row.bits])
        fields = (bits >> self.shift).astype(np.intp) & self.mask
        self.counts += np.bincount(fields, minlength=self.counts.size)


@set_module("kiln_np")
def bit_histogram(array: Source) -> np.ndarray:
    """Exact counts of each bit pattern in an array of 16 bits or fewer per element.

    Parameters
    ----------
    array : array_like, Payload, LazyPayload or WeightTensor
        An array of a Kiln dtype of at most 16 bits (4-bit types as ml_dtypes
        stores them, one element per byte) or of an FNUZ float8, or a payload
        or weight tensor of one.  It is read, never changed, one chunk at a
        time, so a memory-mapped array needs no extra memory.  A GGML
        quantized tensor's elements are its float32 values: TYPE, saying so
        (``describe`` gives their exponents and the scales' histograms).

    Returns
    -------
    numpy.ndarray
        int64 counts indexed by bit pattern: length 16 for the 4-bit types,
        256 for the 8-bit ones, 65,536 for the 16-bit ones, 2 for bool.
        :func:`bit_values` gives the value of each index.

    Raises
    ------
    KilnError
        TYPE for something numpy cannot make an array of, a dtype with no
        Kiln code, wider than 16 bits, an opaque payload, or a storage byte
        that is no pattern of the type (above 0x0f for 4-bit types, above
        0x01 for bool); a payload's own LENGTH and SHAPE errors.

    Examples
    --------
    >>> import ml_dtypes
    >>> x = np.array([0.5, 0.5, -6.0], dtype=ml_dtypes.float4_e2m1fn)
    >>> bit_histogram(x)
    array([0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    """
    row, shape, chunks = source(array)
    try:
        patterns = PatternCounts(row, shape)
    except KilnError as exc:
        q = quantized(array)
        if q is None:
            raise
        raise exc.prefixed(f"{q.info.context}GGML {q.block.name} values are float32: ") from None
    for chunk in chunks:
        patterns.add(chunk)
    return patterns.counts
