"""FP8 E4M3 codes times block scales, rounded once: the kernel behind the FP8 schemes.

:func:`dequantize` takes rows of a matrix of FP8 E4M3 codes (uint8), the tensor's float32
scales, one per block of ``b0`` rows by ``b1`` columns (the last block of a row or a column
may be partial), and an output dtype (float32, bfloat16 or float16).  Element ``(r, c)`` is
the code's value (float32, exact) times ``scales[r // b0, c // b1]``, one float32
multiplication, then rounded once to the output dtype, to nearest even (a NaN stays a NaN).
A per-tensor scale is one block of the whole matrix, a per-row scale blocks of one row.

The compiled kernel (``native.fp8_dequant``, src/kiln_np/_kernels/fp8.c) and the numpy one
give the same bits; large inputs are split by rows over the thread pool.

>>> import numpy as np
>>> codes = np.array([[0x38, 0xB8, 0x7F, 0x01]], np.uint8)  # 1.0, -1.0, NaN, 2**-9
>>> dequantize(codes, np.array([[3.0]], np.float32), (1, 4), np.dtype(np.float32)).tolist()
[[3.0, -3.0, nan, 0.005859375]]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import cache, partial
from typing import Any

import numpy as np

from kiln_np._core.table import spec_dtype
from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the row's compiled driver is None
    from kiln_np._kernels import native

__all__ = ["DEQUANT", "KINDS", "dequantize", "values"]

KINDS = {"float32": 0, "bfloat16": 1, "float16": 2}
"""The output dtypes (by name) and the compiled kernel's code for each."""


@cache
def values() -> np.ndarray:
    """The float32 value of each of the 256 E4M3 codes (ml_dtypes' ``float8_e4m3fn``),
    read-only.

    >>> values()[[0x00, 0x08, 0x7E, 0xFE]].tolist()
    [0.0, 0.015625, 448.0, -448.0]
    """
    table = (
        np.arange(256, dtype=np.uint8)
        .view(spec_dtype("ml_dtypes.float8_e4m3fn"))
        .astype(np.float32)
    )
    table.flags.writeable = False
    return table


def dequantize(
    codes: np.ndarray,
    scales: np.ndarray,
    block: tuple[int, int],
    dtype: np.dtype[Any],
    row0: int = 0,
) -> np.ndarray:
    """Rows ``row0 .. row0 + len(codes)`` of the tensor, of ``dtype``.

    ``codes``: a C-contiguous 2-D uint8 array of those rows; ``scales``: the tensor's
    C-contiguous float32 scales, ``(ceil(rows / b0), ceil(cols / b1))`` (at least as many
    rows as ``row0 + len(codes)`` needs); ``block``: ``(b0, b1)``.

    >>> c = np.full((3, 2), 0x40, np.uint8)  # 2.0 each
    >>> s = np.array([[0.5], [-4.0]], np.float32)
    >>> dequantize(c[1:], s, (2, 2), np.dtype("float16"), row0=1).tolist()
    [[1.0, 1.0], [-8.0, -8.0]]
    """
    if dtype.name not in KINDS:
        raise ValueError(f"dtype must be one of {sorted(KINDS)}, got {dtype.name}")
    if codes.ndim != 2 or codes.dtype != np.uint8 or not codes.flags.c_contiguous:
        raise ValueError("codes must be a C-contiguous 2-D uint8 array")
    if scales.ndim != 2 or scales.dtype != np.float32 or not scales.flags.c_contiguous:
        raise ValueError("scales must be a C-contiguous 2-D float32 array")
    b0, b1 = block
    rows, cols = codes.shape
    if b0 < 1 or b1 < 1 or row0 < 0:
        raise ValueError(f"bad block {block} or first row {row0}")
    if scales.shape[1] < -(-cols // b1) or (rows and scales.shape[0] < (row0 + rows - 1) // b0 + 1):
        raise ValueError(f"scales {scales.shape} do not cover rows {row0}.. of {codes.shape}")
    out = pool.empty((rows, cols), dtype, rows * cols)
    if rows and cols:  # nothing to write: no pass over the rows of an empty matrix
        DEQUANT.pick()(codes, scales, out, b0, b1, row0)
    return out


def _split_rows(task: Callable[[int, int], None], rows: int, cols: int, least: int) -> None:
    """``task`` over rows, split over the pool from ``least`` elements on."""
    fewest = -(-least // max(cols, 1))
    if rows < fewest:
        task(0, rows)
    else:
        pool.run_ranges(task, rows, least=fewest)


def _dequant_compiled(
    codes: np.ndarray, scales: np.ndarray, out: np.ndarray, b0: int, b1: int, row0: int
) -> None:
    task = partial(_compiled, KINDS[out.dtype.name], codes, scales, out, b0, b1, row0)
    _split_rows(task, codes.shape[0], codes.shape[1], pool.COMPILED_THREAD_MIN_LANES)


def _dequant_numpy(
    codes: np.ndarray, scales: np.ndarray, out: np.ndarray, b0: int, b1: int, row0: int
) -> None:
    task = partial(_numpy, codes, scales, out, b0, b1, row0)
    _split_rows(task, codes.shape[0], codes.shape[1], pool.THREAD_MIN_LANES)


def _compiled(
    kind: int,
    codes: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    b0: int,
    b1: int,
    row0: int,
    lo: int,
    hi: int,
) -> None:
    cols = codes.shape[1]
    native.fp8_dequant(
        kind, codes, values(), scales, out, cols, b0, b1, scales.shape[1], row0, lo, hi
    )


def _numpy(
    codes: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    b0: int,
    b1: int,
    row0: int,
    lo: int,
    hi: int,
) -> None:
    cols = codes.shape[1]
    step = max(1, pool.CHUNK_LANES // max(cols, 1))
    table = values()
    for r0 in range(lo, hi, step):
        r1 = min(r0 + step, hi)
        srows = scales[(row0 + np.arange(r0, r1)) // b0]
        per = srows[:, np.arange(cols) // b1]  # each column's scale: memory of cols, any b1
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are results here
            out[r0:r1] = (table[codes[r0:r1]] * per).astype(out.dtype)


DEQUANT = register(
    Kernel(
        "fp8_dequant",
        _dequant_compiled if backend.BUILT else None,
        _dequant_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # elements, split by whole rows
    )
)
"""The row of :func:`dequantize`'s work: ``(codes, scales, out, b0, b1, row0)``."""
