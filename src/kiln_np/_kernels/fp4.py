"""The e2m1 scaled decode: packed FP4 E2M1 codes times a float32 scale a block.

:func:`scaled_into` writes, for element ``i`` of block ``k`` (``block``
consecutive elements, two codes a byte, the even element in the low nibble),
``round((value(code) * table[scales[k]]) * post)``: the block's scale is one
byte indexing a 256-entry float32 table, two float32 products, each rounded
once to nearest even, then one rounding to nearest even to the output's dtype
(float32, bfloat16 or float16).  NaN stays NaN (bfloat16 ``sign | 0x7fc0`` as
ml_dtypes converts, float16 with its top payload bits as numpy converts);
products beyond the output's range are infinities.

A scale byte is an FP8 or e8m0 code, so each scheme's scale arithmetic
(NVFP4's ``float32(e4m3) * tensor scale``, compressed-tensors' ``/ global
scale``) is done once per code into the table, the same bits as per block.
``post`` is 1.0 for NVFP4; gpt-oss's ``2**(e - 127)`` reaches ``2**128``,
beyond float32, so its table holds ``2**(e - 128)`` and ``post`` is 2.0, every
product exact until the last.

The compiled kernel (``native.fp4_scaled``, src/kiln_np/_kernels/fp4.c) and the
numpy one (:func:`scaled_numpy`, used when the extension is absent or
``KILN_NP_PURE=1``) give the same bits; large inputs are split over the thread
pool by whole blocks.

>>> import numpy as np
>>> packed = np.array([0x21, 0xF9] * 4, np.uint8)  # codes 1, 2, 9, 15: 0.5, 1, -0.5, -6
>>> table = np.full(256, 3.0, np.float32)
>>> out = np.empty(16, np.float32)
>>> scaled_into(packed, np.zeros(1, np.uint8), table, out, 16, 1.0)
>>> out[:4].tolist()
[1.5, 3.0, -1.5, -18.0]
"""

from __future__ import annotations

import contextlib

import numpy as np

from kiln_np._core.checks import U8
from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the row's compiled driver is None
    from kiln_np._kernels import native

__all__ = ["E2M1", "KINDS", "SCALED", "scaled_into", "scaled_numpy"]

E2M1 = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    np.float32,
)
"""The 16 e2m1 codes' values (OCP MX v1.0: sign bit 3, exponent bits 2-1, mantissa bit 0)."""

_E2M1_PLUS_ZERO = np.where(E2M1 == 0, np.float32(0.0), E2M1).astype(np.float32)
"""The same with code 8 +0.0, as ModelOpt's ``e2m1_values`` has it."""

KINDS = {"float32": 0, "bfloat16": 1, "float16": 2}
"""The output dtypes and the compiled kernel's code for each."""

_CHUNK_BLOCKS = 1 << 13
"""Blocks per step of the numpy kernel (128 Ki elements of 16)."""


def scaled_numpy(
    packed: np.ndarray,
    scales: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
    block: int,
    post: float,
    *,
    minus_zero: bool = True,
) -> None:
    """The numpy kernel of :func:`scaled_into` (same arguments, same bits)."""
    half = block // 2
    rows = packed.reshape(-1, half)
    values_of = E2M1 if minus_zero else _E2M1_PLUS_ZERO
    codes = scales.view(U8).reshape(-1)
    flat = out.reshape(-1, block)
    factor = np.float32(post)
    with np.errstate(all="ignore"):  # infinities and NaNs are values here
        for k0 in range(0, codes.size, _CHUNK_BLOCKS):
            k1 = min(k0 + _CHUNK_BLOCKS, codes.size)
            values = np.empty((k1 - k0, block), np.float32)
            values[:, 0::2] = values_of[rows[k0:k1] & 0x0F]
            values[:, 1::2] = values_of[rows[k0:k1] >> 4]
            values *= table[codes[k0:k1], None]
            values *= factor
            flat[k0:k1] = values.astype(flat.dtype)


def scaled_into(
    packed: np.ndarray,
    scales: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
    block: int,
    post: float,
    *,
    minus_zero: bool = True,
) -> None:
    """Write ``out`` (C-contiguous float32, bfloat16 or float16, ``scales.size *
    block`` elements) from ``packed`` (uint8, ``scales.size * block // 2``
    bytes, C-contiguous), ``scales`` (one byte a block, C-contiguous) and
    ``table`` (256 float32, C-contiguous); ``block`` even (the compiled kernel
    takes multiples of 16, the numpy one the rest); code 8 is -0.0, or +0.0
    when not ``minus_zero`` (ModelOpt's table).  See the module's docstring."""
    SCALED.pick()(packed, scales, table, out, block, post, minus_zero=minus_zero)


def _scaled_compiled(
    packed: np.ndarray,
    scales: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
    block: int,
    post: float,
    *,
    minus_zero: bool = True,
) -> None:
    if block % 16:  # the compiled kernel takes multiples of 16
        scaled_numpy(packed, scales, table, out, block, post, minus_zero=minus_zero)
        return
    kind = KINDS[out.dtype.name]
    raw = packed.view(U8).reshape(-1)
    codes = scales.view(U8).reshape(-1)
    flat_out = out.reshape(-1).view(U8)
    sign = int(minus_zero)
    pool.run_blocks(
        lambda b0, b1: native.fp4_scaled(
            kind, raw, codes, table, flat_out, block, post, sign, b0, b1
        ),
        codes.size,
        block,
    )


SCALED = register(
    Kernel(
        "fp4_scaled",
        _scaled_compiled if backend.BUILT else None,
        scaled_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # elements, split by whole blocks
    )
)
"""The row of :func:`scaled_into`: its arguments, the same bits."""
