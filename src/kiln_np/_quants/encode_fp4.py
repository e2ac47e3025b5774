"""Encoders of the FP4 block types, MXFP4 (e8m0 scale) and NVFP4 (UE4M3 scales):
ggml's ``quantize_row_mxfp4_ref`` and ``quantize_row_nvfp4_ref``, in numpy.

Both pick each element's E2M1 level with ggml's ``best_index_mxfp4``: the first
of ``kvalues_fp4`` (:data:`~kiln_np._quants.basic.KVALUES_FP4`, the levels
doubled, the scale ``d`` halved to match) whose float32 error
``|kvalue * d - x|`` is smallest.  That search is done here on magnitudes: for
``x >= 0`` no negative level can beat the level of the same magnitude (its
error is ``rnd(k d + x) >= rnd(|k d - x|)``, and the positive one comes first),
for ``x < 0`` no positive level can beat level 0 (``rnd(k d + |x|) >= |x|``,
level 0's error), and a negative level's error on ``x`` is the positive level's
on ``|x|`` (rounding is symmetric).  So the index is the first smallest of
``|x|`` (level 0) and ``rnd(|k d - |x||)`` for ``k = 1, 2, 3, 4, 6, 8, 12``,
plus 8 when ``x < 0`` and the level is not 0 (index 8, ``-0``, ties with level 0
and never wins).

MXFP4's scale byte is ``e = (uint8_t)(floorf(log2f(amax)) - 2 + 127)`` (0 for an
all-zero block): a block whose largest magnitude is below ``2**-125`` makes
that negative, and C's conversion (x86-64's, as ggml's build makes it: the low
byte of the int32) wraps it to 232 ... 255, a huge scale under which every
element is level 0.  ``floorf(log2f(amax))`` depends on how ``log2f`` rounds
just below a power of two, where ``log2f`` reaches the integer above:
:data:`LOG2_FLOOR_BITS` holds, for the correctly rounded ``log2f`` (glibc's),
where each integer starts (``tests/quants/test_ggml_quantize_fp4.py`` checks
them against the C library's ``log2f``).

NVFP4's scales are ggml's ``ggml_fp32_to_ue4m3(amax / 6)``: ``x`` above 448 is
448, the mantissa rounds on its fourth bit alone (halves up), exponents past 15
give 0x7E (448), and below ``2**-6`` it is ``(int)(x * 512 + 0.5f)`` capped at 7.

>>> block = np.array([[1.0, -0.3, 0.25, 6.0] + [0.0] * 28], np.float32)
>>> ENCODERS["MXFP4"](block)[0, :5].tolist()  # d = 0.5: 2 (1.0), 9 (-0.5), 0 (a tie), 7 (6.0)
[127, 2, 9, 0, 7]
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .basic import E8M0_HALF, UE4M3_HALF
from .encoder import Encoder
from .rounding import c_int

__all__ = ["ENCODERS", "LOG2_FLOOR_BITS"]


def _log2_floor_bits() -> np.ndarray:
    """Where each ``floorf(log2f(x))`` starts, as float32 bits, for ``-148 ... 128``."""
    n = np.arange(-148, 129)
    with np.errstate(over="ignore"):  # 2**128: infinity, one past the largest float
        top = np.ldexp(1.0, n).astype(np.float32).view(np.uint32).astype(np.int64)
    # log2f rounds up to n for at most 2**6 * ln 2 < 45 floats just below 2**n
    below = (top[:, None] - np.arange(1, 64)).clip(1).astype(np.uint32).view(np.float32)
    rounds_up = np.log2(below.astype(np.float64)).astype(np.float32) >= n[:, None]
    bits: np.ndarray = (top - rounds_up.sum(axis=1)).astype(np.uint32)
    return bits


LOG2_FLOOR_BITS = _log2_floor_bits()
"""float32 bits, by ``n + 148`` for ``n = -148 ... 128``: the smallest positive float
whose correctly rounded ``log2f`` is at least ``n``, so ``floorf(log2f(x)) = n``
from here to the next entry (and -149 below the first).  An entry is ``2**n``,
less the floats below it whose logarithm rounds up to ``n``: up to 44 of them
(``floor(2**6 * ln 2)``, where the float32 spacing below ``|n|`` is ``2**-17``)."""

_LEVELS = np.array([1, 2, 3, 4, 6, 8, 12], np.float32)


def _e2m1_codes(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """ggml's ``best_index_mxfp4(x, d)`` for float32 ``x`` and scales ``d`` (broadcast
    against ``x``), as uint8 codes 0 ... 15."""
    a = np.abs(x)
    best = a
    code = np.zeros(x.shape, np.uint8)
    for k, level in enumerate(_LEVELS, start=1):
        err = np.abs(level * d - a)
        wins = err < best
        best = np.where(wins, err, best)
        code[wins] = k
    code[np.signbit(x) & (code != 0)] |= 8
    return code


def _floor_log2(amax: np.ndarray) -> np.ndarray:
    """``floorf(log2f(amax))`` for positive float32 ``amax``, as int32."""
    start = np.searchsorted(LOG2_FLOOR_BITS, amax.view(np.uint32), side="right")
    return (start - 149).astype(np.int32)


def _mxfp4(x: np.ndarray) -> np.ndarray:
    """MXFP4: ``e`` from ``amax``, ``d = 2**(e - 128)``; nibble ``j`` of ``qs`` is element
    ``j`` low, ``j + 16`` high.

    >>> with np.errstate(over="ignore"):  # 12 * d overflows: an error of inf, as in ggml
    ...     out = _mxfp4(np.array([[2.0**-126] + [0.0] * 31, [0.0] * 32], np.float32))
    >>> out[:, 0].tolist(), out[:, 1:].max()  # floor(log2) - 2 + 127 = -1 wraps to 255
    ([255, 0], np.uint8(0))
    """
    amax = np.abs(x).max(axis=1)
    e = np.where(amax > 0, (_floor_log2(amax) + 125) & 0xFF, 0).astype(np.uint8)
    code = _e2m1_codes(x, E8M0_HALF[e][:, None])
    out = np.empty((len(x), 17), np.uint8)
    out[:, 0] = e
    out[:, 1:] = code[:, :16] | (code[:, 16:] << 4)
    return out


def _ue4m3(q: np.ndarray) -> np.ndarray:
    """ggml's ``ggml_fp32_to_ue4m3`` of float32 ``q >= 0`` (any shape), uint8.

    >>> _ue4m3(np.array([0.0, 1.0, 1.0625, 1.06249994, 300.0, 0.0146], np.float32)).tolist()
    [0, 56, 57, 56, 126, 7]
    """
    q = np.minimum(q, np.float32(448))
    bits = q.view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int32) - 120  # the UE4M3 exponent (bias 7)
    man = ((bits >> 20) & 7) + ((bits >> 19) & 1)
    exp = np.where(man > 7, exp + 1, exp)
    normal = np.where(exp >= 15, 0x7E, (exp << 3) | (man & 7))
    tiny = np.minimum(c_int(q * np.float32(512) + np.float32(0.5)), 7)
    out = np.where(((bits >> 23) & 0xFF) <= 120, tiny.clip(0), normal)
    return np.where(q > 0, out, 0).astype(np.uint8)


def _nvfp4(x: np.ndarray) -> np.ndarray:
    """NVFP4: four sub-blocks of 16, each ``ue = ue4m3(amax / 6)``; nibble ``j`` of a
    sub-block's 8 bytes is its element ``j`` low, ``j + 8`` high.

    >>> out = _nvfp4(np.array([[6.0, -3.0] + [0.0] * 62], np.float32))
    >>> out[0, :4].tolist(), out[0, 4:6].tolist()  # 1.0 is 0x38; 6 = 12 * 0.5, -3 = -6 * 0.5
    ([56, 0, 0, 0], [7, 13])
    """
    sub = x.reshape(len(x), 4, 16)
    ue = _ue4m3(np.abs(sub).max(axis=2) / np.float32(6))
    code = _e2m1_codes(sub, UE4M3_HALF[ue][:, :, None])
    out = np.empty((len(x), 36), np.uint8)
    out[:, :4] = ue
    out[:, 4:] = (code[:, :, :8] | (code[:, :, 8:] << 4)).reshape(len(x), 32)
    return out


ENCODERS: Mapping[str, Encoder] = MappingProxyType({"MXFP4": _mxfp4, "NVFP4": _nvfp4})
"""This family's numpy encoders, by GGML name."""
