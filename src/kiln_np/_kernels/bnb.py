"""bitsandbytes 4-bit decode (``kiln_np._schemes.bnb``), compiled or in numpy.

Element ``i`` of the packed codes (element ``2k`` is the **high** nibble of byte
``k``, as bitsandbytes packs) is ``table[code] * scales[i // blocksize]``, one
float32 multiplication, then rounded once to nearest even to the output type:
float32 (a no-op: NaN payloads kept), bfloat16 or IEEE float16, where a NaN
becomes the quiet NaN of its sign (0x7fc0 / 0x7e00 and the sign bit).

Two implementations, the same bits (``tests/schemes/test_bnb.py``): the compiled
loop (``bnb.c``: per block, its 16 possible outputs, each the same product and
rounding; then two lookups a byte; one pass, split over the thread pool) and
the numpy twin (one gather of both values of a byte, a multiplication per
block, ``astype``), which runs when the extension is absent or ``KILN_NP_PURE=1``.
Neither table has a NaN, so which NaN a NaN times a NaN gives (C leaves the
operand order to the compiler) never arises.

>>> import numpy as np
>>> table = np.arange(16, dtype=np.float32)
>>> codes, scales = np.array([0x21, 0x43], np.uint8), np.array([1.0, 10.0], np.float32)
>>> decode_4bit(codes, table, scales, 2, 0, 4, np.dtype(np.float32)).tolist()
[2.0, 1.0, 40.0, 30.0]
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the row's compiled driver is None
    from kiln_np._kernels import native

__all__ = ["DECODE_4BIT", "decode_4bit"]

_KINDS = {"float32": 0, "bfloat16": 1, "float16": 2}
_QUIET_NAN = {"bfloat16": 0x7FC0, "float16": 0x7E00}
_BYTES = np.arange(256)


def _numpy(
    codes: np.ndarray,
    table: np.ndarray,
    scales: np.ndarray,
    size: int,
    a: int,
    b: int,
    dtype: np.dtype[Any],
) -> np.ndarray:
    pairs = np.stack([table[_BYTES >> 4], table[_BYTES & 15]], axis=1).view(np.uint64)
    stop = min(-(-b // size) * size, 2 * codes.size)
    values = pairs.reshape(256).take(codes[: (stop + 1) // 2]).view(np.float32)[:stop]
    whole = stop // size
    blocked = values[: whole * size].reshape(whole, size)
    blocked *= scales[:whole, None]
    if whole * size < stop:  # the last, partial block
        values[whole * size :] *= scales[whole]
    values = values[a:b]
    if dtype.name == "float32":
        return values
    out = values.astype(dtype)
    nan = np.isnan(values)
    if nan.any():  # the canonical quiet NaN of each sign, as bnb.c writes it
        sign = (values.view(np.uint32)[nan] >> 16) & 0x8000
        out.view(np.uint16)[nan] = sign | _QUIET_NAN[dtype.name]
    return out


def decode_4bit(
    codes: np.ndarray,
    table: np.ndarray,
    scales: np.ndarray,
    blocksize: int,
    a: int,
    b: int,
    dtype: np.dtype[Any],
) -> np.ndarray:
    """Elements ``[a, b)`` of ``codes`` (flat uint8, two a byte, the high nibble
    first) times their block's scale, as a new 1-D array of ``dtype`` (float32,
    bfloat16 or float16).

    ``table``: the 16 float32 values of the codes; ``scales``: float32, one per
    block of ``blocksize`` elements from element 0 (at least up to element
    ``b - 1``'s).  Overflow and invalid products are values (inf, NaN), not
    warnings."""
    result: np.ndarray = DECODE_4BIT.pick()(codes, table, scales, blocksize, a, b, dtype)
    return result


def _numpy_quiet(
    codes: np.ndarray,
    table: np.ndarray,
    scales: np.ndarray,
    size: int,
    a: int,
    b: int,
    dtype: np.dtype[Any],
) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return _numpy(codes, table, scales, size, a, b, dtype)


def _compiled(
    codes: np.ndarray,
    table: np.ndarray,
    scales: np.ndarray,
    blocksize: int,
    a: int,
    b: int,
    dtype: np.dtype[Any],
) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        out = pool.empty(b - a, dtype, b - a)
        raw = out.view(np.uint8)  # the buffer protocol knows no ml_dtypes type
        pool.run_ranges(
            lambda lo, hi: native.bnb4(
                _KINDS[dtype.name], codes, table, scales, raw, blocksize, a, a + lo, a + hi
            ),
            b - a,
            compiled=True,
        )
        return out


DECODE_4BIT = register(
    Kernel(
        "bnb4",
        _compiled if backend.BUILT else None,
        _numpy_quiet,
        pool.COMPILED_THREAD_MIN_LANES,  # elements
    )
)
"""The row of :func:`decode_4bit`: its arguments, the same bits."""
