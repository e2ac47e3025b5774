"""The conversions ggml's reference quantizers make, in numpy, bit for bit.

ggml's quantizers are float32 C: ``roundf`` (half away from zero),
``nearest_int`` (half to even, by adding ``1.5 * 2**23``; its bits for any float), C's float-to-int
conversion (which x86-64 does with ``cvttss2si``: truncation, and the
"integer indefinite" ``INT_MIN`` for a NaN or a value out of range, which C
leaves undefined and which a block whose scale overflows or underflows
reaches), and ``GGML_FP32_TO_FP16`` (round to nearest even; a NaN becomes
``0x7e00`` with its sign).  Each helper here gives those results for every
float32, so the encoders can keep ggml's operation order and its bits.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INT_INDEFINITE", "c_int", "f16_bits", "le16", "nearest_int", "roundf"]

INT_INDEFINITE = -(2**31)
"""What x86-64's float-to-int32 conversion gives for a NaN or an out-of-range value."""


def roundf(x: np.ndarray) -> np.ndarray:
    """C's ``roundf``: to the nearest integer, halves away from zero (float32 in and out).

    >>> roundf(np.array([0.5, -0.5, 1.5, 0.49999997, -2.5], np.float32)).tolist()
    [1.0, -1.0, 2.0, 0.0, -3.0]
    """
    t = np.trunc(x)
    with np.errstate(invalid="ignore"):  # inf - inf: the NaN stays a NaN below
        up = np.abs(x - t) >= np.float32(0.5)
    result: np.ndarray = np.where(up, t + np.copysign(np.float32(1), x), t).astype(np.float32)
    return result


def nearest_int(x: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int`` for every float32, as int32: the low 23 bits of
    ``x + 1.5 * 2**23``, less ``2**22``.  In its range (``|x| <= 4194303``) that is to
    nearest, halves to even; outside it is what ggml's blocks whose sums overflow
    get (its assert is off in release builds): 0 for a NaN, ``-2**22`` for an
    infinity.

    >>> nearest_int(np.array([0.5, 1.5, -2.5, 2.4, np.nan, np.inf], np.float32)).tolist()
    [0, 2, -2, 2, 0, -4194304]
    """
    bits = (np.asarray(x, np.float32) + np.float32(12582912.0)).view(np.int32)
    result: np.ndarray = (bits & 0x007FFFFF) - 0x00400000
    return result


def c_int(x: np.ndarray) -> np.ndarray:
    """C's conversion of float32 ``x`` to int32 as x86-64 makes it: truncation toward
    zero, and :data:`INT_INDEFINITE` for a NaN or a value outside int32.  Storing the
    result in an ``int8_t`` or ``uint8_t`` keeps its low byte (``& 0xff``).

    >>> c_int(np.array([2.9, -2.9, np.inf, np.nan, 3e9], np.float32)).tolist()
    [2, -2, -2147483648, -2147483648, -2147483648]
    """
    with np.errstate(invalid="ignore"):
        inside = (x > np.float32(-2147483904.0)) & (x < np.float32(2147483648.0))
    return np.where(inside, np.trunc(np.where(inside, x, 0)), INT_INDEFINITE).astype(np.int32)


def f16_bits(x: np.ndarray) -> np.ndarray:
    """``GGML_FP32_TO_FP16``: float32 -> IEEE binary16 bits (uint16), to nearest even,
    overflow to infinity, a NaN to ``0x7e00`` with its sign.

    >>> f16_bits(np.array([1.0, 65520.0, -np.nan, 2.0**-25], np.float32)).tolist()
    [15360, 31744, 65024, 0]
    """
    with np.errstate(over="ignore"):
        bits = np.asarray(x, np.float32).astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        sign = (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16) & 0x8000
        bits = np.where(nan, sign | np.uint16(0x7E00), bits).astype(np.uint16)
    return bits


def le16(bits: np.ndarray) -> np.ndarray:
    """uint16 ``bits`` (any shape) as little-endian bytes: shape ``(..., 2)`` uint8.

    >>> le16(np.array([0x3C00], np.uint16)).tolist()
    [[0, 60]]
    """
    return bits.astype("<u2").view(np.uint8).reshape(*bits.shape, 2)
