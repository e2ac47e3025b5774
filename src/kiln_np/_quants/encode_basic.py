"""Encoders of the GGML types with one scale a block (Q4_0 ... Q8_0, Q1_0, Q2_0)
and the ternary TQ1_0, TQ2_0: ggml's ``quantize_row_*_ref``, in numpy.

What ggml's loops decide beyond plain arithmetic, kept here:

- Q4_0 and Q5_0 scale by the *first* element of largest magnitude, with its
  sign (``if (amax < fabsf(v))``), and by ``+0.0`` when the block is all zeros.
- Q4_1 and Q5_1 store the *first* element equal to the block's minimum
  (``if (v < min)``): its sign when that is a zero.
- Q1_0's scale is the mean of ``|x|`` summed left to right, in float32.
- The casts of ``x * id`` to ``int8_t``/``uint8_t`` (and ``lroundf`` to ``int``)
  are C's on x86-64: when ``1/d`` overflows to infinity they meet infinities and
  NaNs (:func:`~kiln_np._quants.rounding.c_int`), and Q4_0's ``MIN(15, (int8_t)v)``
  compares signed bytes.

With an importance matrix, Q4_0 ... Q5_1 are ggml's ``quantize_row_q*_impl``
(what ``ggml_quantize_chunk`` runs with ``quant_weights``), a search per block
of 32 values ``x`` with the weights ``w = qw * sqrtf(sigma2 + x * x)``: ``qw``
the block's columns of the imatrix row, ``sigma2`` the mean of ``x * x`` over
the block's whole *row* (``sum_x2 += x[j]*x[j]`` in order over ``n_per_row``
values, then ``/ n_per_row``: :func:`row_sigma2`), which the caller computes
once per row and hands in (:data:`~kiln_np._quants.encoder.RowWeightedEncoder`).

- Q4_0 and Q5_0: ``make_qx_quants(32, nmax, x, L, 1, w)`` (``nmax`` 8 or 16).
  Below ``GROUP_MAX_EPS`` (``1e-15``) the block is zeros; else, with ``max``
  the first element of largest magnitude, each of the inverse scales
  ``-(nmax + 0.1 * is) / max`` (``is = 0``, then ``-9 ... 9`` without 0) maps
  ``x`` to ``l = clamp(nearest_int(iscale * x), -nmax, nmax - 1)``; the least
  squares scale ``sumlx / suml2`` of the first is the start, a later one is
  taken where it explains more (``sumlx**2 > best * suml2``).  The block stores
  that scale (f16) and the winning ``l + nmax``.
- Q4_1 and Q5_1: ``make_qkx3_quants(32, nmax, x, w, ..., -0.9, 0.05, 36,
  false)`` (``nmax`` 15 or 31): ggml's ``make_qkx2_quants`` with these weights.
  From ``min = min(x, 0)`` (the first of equal minima: a zero keeps its sign,
  which the stored min shows) and the range's scale, 37 candidate inverse scales
  ``(-0.9 + 0.05 * is + nmax) / (max - min)`` are each fitted (scale and min)
  by weighted least squares and kept where their weighted squared error is
  smaller; a candidate maps ``x - min`` with the min the best one so far left,
  so the search is a loop over the candidates, every block at once.  The block
  stores the scale and the min (f16 both) and the levels.

Every sum runs in ggml's element order (``np.cumsum`` adds in order; ``np.sum``
pairs), so that the weighted searches keep its bits.

>>> sorted(ENCODERS)
['Q1_0', 'Q2_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'TQ1_0', 'TQ2_0']
>>> sorted(ROW_WEIGHTED)
['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1']
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .encoder import Encoder, RowWeightedEncoder
from .qkx import make_qkx
from .rounding import c_int, f16_bits, le16, nearest_int, roundf

__all__ = ["ENCODERS", "ROW_WEIGHTED", "row_sigma2"]

_F32 = np.float32


def _inverse(d: np.ndarray) -> np.ndarray:
    """ggml's ``id = d ? 1.0f/d : 0.0f``, per block, as a column."""
    safe = np.where(d != 0, d, _F32(1))
    return np.where(d != 0, _F32(1) / safe, _F32(0)).astype(np.float32)[:, None]


def _signed_absmax(x: np.ndarray) -> np.ndarray:
    """Per block, the first element of largest magnitude (``+0.0`` if all are zero)."""
    mag = np.abs(x)
    amax = mag.max(axis=1)
    first = np.argmax(mag == amax[:, None], axis=1)
    picked = x[np.arange(len(x)), first]
    return np.where(amax == 0, _F32(0), picked).astype(np.float32)


def _first_min(x: np.ndarray) -> np.ndarray:
    """Per block, the first element equal to the minimum (its bits: the sign of a zero)."""
    low = x.min(axis=1)
    first: np.ndarray = x[np.arange(len(x)), np.argmax(x == low[:, None], axis=1)]
    return first


def _int8(v: np.ndarray) -> np.ndarray:
    """C's ``(int8_t)v`` of float32 ``v`` on x86-64: the low byte of ``cvttss2si``."""
    result: np.ndarray = c_int(v).astype(np.int8)
    return result


def _nibbles(q: np.ndarray) -> np.ndarray:
    """Rows of 32 quants (uint8) -> 16 bytes ``q[j] | q[j + 16] << 4`` (low bytes kept)."""
    packed: np.ndarray = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)
    return packed


def _fifth_bits(q: np.ndarray) -> np.ndarray:
    """Rows of 32 quants (uint8) -> the 4 little-endian bytes of ggml's ``qh``: bit
    ``j`` is bit 4 of ``q[j]``."""
    return np.packbits((q >> 4) & 1, axis=1, bitorder="little")


def _centred(x: np.ndarray, divisor: int, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 / Q5_0: ``d = max / -divisor`` and ``MIN(top, (int8_t)(x*id + divisor + 0.5))``
    as uint8."""
    d = _signed_absmax(x) / _F32(-divisor)
    v = x * _inverse(d) + _F32(divisor + 0.5)
    q = np.minimum(_int8(v), np.int8(top)).astype(np.uint8)
    return d, q


def _offset(x: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_1 / Q5_1: ``d = (max - min) / levels``, the first minimum, and
    ``(int8_t)((x - min)*id + 0.5f)`` (an int8)."""
    low = _first_min(x)
    high = x.max(axis=1)  # when it equals low, both are the block's first element: +0.0
    d = np.where(high == low, _F32(0), high - low) / _F32(levels)
    v = (x - low[:, None]) * _inverse(d) + _F32(0.5)
    return d, low, _int8(v)


def _q4_0(x: np.ndarray) -> np.ndarray:
    """Q4_0: ``d = max / -8`` (``max`` the first element of largest magnitude),
    ``q = MIN(15, (int8_t)(x/d + 8.5))``, nibbles ``q[j] | q[j+16] << 4``.

    >>> _q4_0(np.array([[-4.0, 1.0, 4.0] + [0.0] * 29], np.float32))[0, :4].tolist()
    [0, 56, 128, 138]
    """
    d, q = _centred(x, 8, 15)
    out = np.empty((len(x), 18), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:] = _nibbles(q)
    return out


def _q4_1(x: np.ndarray) -> np.ndarray:
    """Q4_1: ``d = (max - min) / 15``, ``m = min``, ``q = MIN(15, (int8_t)((x-min)/d + .5))``.

    >>> _q4_1(np.array([[1.0, 16.0] + [1.0] * 30], np.float32))[0, :6].tolist()
    [0, 60, 0, 60, 0, 15]
    """
    d, low, q = _offset(x, 15)
    out = np.empty((len(x), 20), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:4] = le16(f16_bits(low))
    out[:, 4:] = _nibbles(np.minimum(q, np.int8(15)).astype(np.uint8))
    return out


def _q5_0(x: np.ndarray) -> np.ndarray:
    """Q5_0: ``d = max / -16``, ``q = MIN(31, (int8_t)(x/d + 16.5))``; the fifth bits
    in ``qh`` (4 bytes after ``d``), the low nibbles as Q4_0's.

    >>> _q5_0(np.array([[16.0] + [0.0] * 31], np.float32))[0, :7].tolist()
    [0, 188, 254, 255, 255, 255, 0]
    """
    d, q = _centred(x, 16, 31)
    out = np.empty((len(x), 22), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:6] = _fifth_bits(q)
    out[:, 6:] = _nibbles(q & 0x0F)
    return out


def _q5_1(x: np.ndarray) -> np.ndarray:
    """Q5_1: ``d = (max - min) / 31``, ``m = min``, ``q = (uint8_t)((x-min)/d + .5)``.

    >>> _q5_1(np.array([[0.0, 31.0] + [0.0] * 30], np.float32))[0, :10].tolist()
    [0, 60, 0, 0, 2, 0, 0, 0, 0, 15]
    """
    d, low, q = _offset(x, 31)
    u = q.astype(np.uint8)
    out = np.empty((len(x), 24), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:4] = le16(f16_bits(low))
    out[:, 4:8] = _fifth_bits(u)
    out[:, 8:] = _nibbles(u & 0x0F)
    return out


def _q8_0(x: np.ndarray) -> np.ndarray:
    """Q8_0: ``d = max |x| / 127`` (f16), ``q = roundf(x / d)`` (int8).

    >>> _q8_0(np.array([[-127.0, 0.5] + [0.0] * 30], np.float32))[0, :4].tolist()
    [0, 60, 129, 1]
    """
    amax = np.abs(x).max(axis=1)
    d = amax / _F32(127)
    out = np.empty((len(x), 34), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:] = c_int(roundf(x * _inverse(d))).astype(np.uint8)
    return out


def _q1_0(x: np.ndarray) -> np.ndarray:
    """Q1_0: ``d`` the mean of ``|x|`` (summed in order), bit ``j`` set when
    ``x[j] >= 0`` (``-0.0`` too), least significant bit first.

    >>> _q1_0(np.array([[-0.0, -1.0, 3.0] + [-1.0] * 125], np.float32))[0, :4].tolist()
    [8, 60, 5, 0]
    """
    total = np.zeros(len(x), np.float32)
    for j in range(x.shape[1]):  # ggml's sequential float32 sum
        total += np.abs(x[:, j])
    out = np.empty((len(x), 18), np.uint8)
    out[:, :2] = le16(f16_bits(total / _F32(128)))
    out[:, 2:] = np.packbits(x >= 0, axis=1, bitorder="little")
    return out


def _q2_0(x: np.ndarray) -> np.ndarray:
    """Q2_0: ``d = max |x|``, ``q = clamp((int)roundf(x/d) + 1, 0, 3)``, four to a byte
    from the low bits up.

    >>> _q2_0(np.array([[-2.0, 0.0, 2.0, 1.0] + [0.0] * 60], np.float32))[0, :4].tolist()
    [0, 64, 164, 85]
    """
    d = np.abs(x).max(axis=1)
    q = np.clip(c_int(roundf(x * _inverse(d))).astype(np.int64) + 1, 0, 3).astype(np.uint8)
    q = q.reshape(len(x), -1, 4)
    out = np.empty((len(x), 18), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:] = q[..., 0] | (q[..., 1] << 2) | (q[..., 2] << 4) | (q[..., 3] << 6)
    return out


def _trits(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TQ1_0 / TQ2_0: ``d = max |x|`` and ``lroundf(x/d) + 1`` as C's ``int`` (in 0..2:
    ``lroundf`` of an infinity or NaN is ``LONG_MIN``, plus 1 is 1 in an ``int``)."""
    d = np.abs(x).max(axis=1)
    v = x * _inverse(d)
    t = np.where(np.isfinite(v), roundf(v) + _F32(1), _F32(1)).astype(np.uint8)
    return d, t


def _base3(t: np.ndarray) -> np.ndarray:
    """Trits (uint8, trailing axis of 4 or 5, the first most significant) -> ggml's byte
    ``ceil(value * 256 / 243)`` (4 trits get a fifth, zero, at the bottom)."""
    value = np.zeros(t.shape[:-1], np.int32)
    for n in range(t.shape[-1]):
        value = value * 3 + t[..., n]
    if t.shape[-1] == 4:
        value = value * 3
    return ((value * 256 + 242) // 243).astype(np.uint8)


def _tq1_0(x: np.ndarray) -> np.ndarray:
    """TQ1_0: 48 bytes of 5 trits (byte ``m`` of the first 32 holds ``x[m + 32n]``,
    n = 0..4; of the next 16, ``x[160 + m + 16n]``), 4 bytes of 4 trits
    (``x[240 + j + 4n]``), then ``d = max |x|`` (f16).

    >>> row = np.zeros((1, 256), np.float32); row[0, 0] = 1.0; row[0, 1] = -1.0
    >>> b = _tq1_0(row)[0]; b[:3].tolist(), b[48:54].tolist()
    ([213, 43, 128], [127, 127, 127, 127, 0, 60])
    """
    n = len(x)
    d, t = _trits(x)
    out = np.empty((n, 54), np.uint8)
    out[:, :32] = _base3(t[:, :160].reshape(n, 5, 32).transpose(0, 2, 1))
    out[:, 32:48] = _base3(t[:, 160:240].reshape(n, 5, 16).transpose(0, 2, 1))
    out[:, 48:52] = _base3(t[:, 240:].reshape(n, 4, 4).transpose(0, 2, 1))
    out[:, 52:] = le16(f16_bits(d))
    return out


def _tq2_0(x: np.ndarray) -> np.ndarray:
    """TQ2_0: 64 bytes, byte ``32h + m`` holding ``x[128h + m + 32n]`` in bits ``2n``
    (n = 0..3), then ``d = max |x|`` (f16).

    >>> row = np.zeros((1, 256), np.float32); row[0, 0] = 1.0; row[0, 32] = -1.0
    >>> b = _tq2_0(row)[0]; b[:2].tolist(), b[64:].tolist()
    ([82, 85], [0, 60])
    """
    n = len(x)
    d, t = _trits(x)
    t = t.reshape(n, 2, 4, 32)
    out = np.empty((n, 66), np.uint8)
    packed = t[:, :, 0] | (t[:, :, 1] << 2) | (t[:, :, 2] << 4) | (t[:, :, 3] << 6)
    out[:, :64] = packed.reshape(n, 64)
    out[:, 64:] = le16(f16_bits(d))
    return out


ENCODERS: Mapping[str, Encoder] = MappingProxyType(
    {
        "Q4_0": _q4_0,
        "Q4_1": _q4_1,
        "Q5_0": _q5_0,
        "Q5_1": _q5_1,
        "Q8_0": _q8_0,
        "TQ1_0": _tq1_0,
        "TQ2_0": _tq2_0,
        "Q1_0": _q1_0,
        "Q2_0": _q2_0,
    }
)
"""This family's numpy encoders, by GGML name."""

_GROUP_MAX_EPS = _F32(1e-15)
_QX_TRIES = (0, *range(-9, 0), *range(1, 10))  # make_qx_quants' is: the first, then its loop
_SIGMA_ELEMENTS = 1 << 16  # row_sigma2's temporaries: 256 KiB


def row_sigma2(rows: np.ndarray) -> np.ndarray:
    """ggml's ``sigma2`` of each row of ``rows`` (float32 ``(r, n_per_row)``): ``sum_x2
    += x[j]*x[j]`` over the row in order, from 0, then ``sum_x2 / n_per_row``; float32
    ``(r,)``.  Takes the rows a slice of columns at a time (the running sum joins the
    next slice's first square, as ggml's next addition does), so its temporaries stay
    small whatever the row length.  (In order, ``2**24 + 1 + 1`` is ``2**24``.)

    >>> row_sigma2(np.array([[4096, 1, 1], [1, 1, 4096]], np.float32)).tolist()
    [5592405.5, 5592406.0]
    """
    total = np.zeros(len(rows), np.float32)
    columns = min(rows.shape[1], _SIGMA_ELEMENTS) or 1
    batch = max(1, _SIGMA_ELEMENTS // columns)
    for r in range(0, len(rows), batch):
        for c in range(0, rows.shape[1], columns):
            part = rows[r : r + batch, c : c + columns] * rows[r : r + batch, c : c + columns]
            part[:, 0] += total[r : r + batch]
            total[r : r + batch] = np.cumsum(part, axis=1, dtype=np.float32)[:, -1]
    result: np.ndarray = total / _F32(rows.shape[1])
    return result


def _weights(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """``qw[j] * sqrtf(sigma2 + x[j]*x[j])``, ``sigma2`` one per block."""
    result: np.ndarray = qw * np.sqrt(sigma2[:, None] + x * x)
    return result


def _in_order(terms: np.ndarray) -> np.ndarray:
    """``s = 0; s += terms[..., 0]; s += terms[..., 1] ...`` along the last axis."""
    result: np.ndarray = np.cumsum(terms, axis=-1, dtype=np.float32)[..., -1] + _F32(0)
    return result


def _qx_levels(iscale: np.ndarray, x: np.ndarray, nmax: int) -> np.ndarray:
    """``MAX(-nmax, MIN(nmax-1, nearest_int(iscale * x)))`` as float32."""
    result: np.ndarray = np.clip(nearest_int(iscale * x), -nmax, nmax - 1).astype(np.float32)
    return result


def _make_qx_quants(x: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_qx_quants(32, nmax, x, L, 1, w)`` for each block (row) of ``x``: the
    scale (float32) and ``L`` (``l + nmax``, uint8; zeros below ``GROUP_MAX_EPS``).

    >>> x = np.array([[4.0, -8.0, 1.0, 2.0] + [0.0] * 28], np.float32)
    >>> scale, levels = _make_qx_quants(x, np.ones_like(x), 8)
    >>> scale.tolist(), levels[0, :4].tolist()
    ([1.0], [12, 0, 9, 10])
    """
    n = len(x)
    mag = np.abs(x)
    amax = mag.max(axis=1)
    big = np.take_along_axis(x, np.argmax(mag, axis=1)[:, None], axis=1)[:, 0]
    zero = amax < _GROUP_MAX_EPS
    big = np.where(zero, _F32(1), big)  # no 1 / 0 on the blocks set to zero anyway
    tries = np.array(_QX_TRIES, np.float32)
    iscale = -(_F32(nmax) + _F32(0.1) * tries) / big[:, None]  # (n, 19)
    lf = _qx_levels(iscale[:, :, None], x[:, None, :], nmax)  # (n, 19, 32)
    wl = w[:, None, :] * lf
    sumlx = _in_order((w * x)[:, None, :] * lf)
    suml2 = _in_order(wl * lf)
    scale = np.where(suml2[:, 0] != 0, sumlx[:, 0] / suml2[:, 0], _F32(0))  # a NaN is not 0
    best = scale * sumlx[:, 0]
    win = np.zeros(n, np.intp)
    for t in range(1, len(tries)):
        slx, sl2 = sumlx[:, t], suml2[:, t]
        better = (sl2 > 0) & (slx * slx > best * sl2)
        scale = np.where(better, slx / sl2, scale)
        best = np.where(better, scale * slx, best)
        win = np.where(better, t, win)
    chosen = np.take_along_axis(lf, win[:, None, None], axis=1)[:, 0]
    levels = np.where(zero[:, None], 0, chosen + nmax).astype(np.uint8)
    return np.where(zero, _F32(0), scale).astype(np.float32), levels


def _make_qkx3_quants(
    x: np.ndarray, w: np.ndarray, nmax: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``make_qkx3_quants(32, nmax, x, w, L, &the_min, Laux, -0.9, 0.05, 36, false)``
    for each block (row) of ``x``: the scale, ``-the_min`` (the offset, <= 0; float32
    both) and the levels (uint8).

    >>> x = np.array([[0.0, 1.0, 2.0, 3.0] * 8], np.float32)
    >>> scale, low, levels = _make_qkx3_quants(x, np.ones_like(x), 15)
    >>> scale.tolist(), low.tolist(), levels[0, :4].tolist()
    ([0.20000000298023224], [0.0], [0, 5, 10, 15])
    """
    levels, scale, the_min = make_qkx(x.T, w.T, nmax, -0.9, 0.05, 36, False)
    return scale, -the_min, np.ascontiguousarray(levels.T).astype(np.uint8)


def _q4_0_weighted(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """Q4_0 with an importance matrix: ``make_qx_quants`` with 8 levels either side.

    >>> x = np.array([[4.0, -8.0, 1.0, 2.0] + [0.0] * 28], np.float32)
    >>> _q4_0_weighted(x, np.ones_like(x), row_sigma2(x))[0, :4].tolist()
    [0, 60, 140, 128]
    """
    d, levels = _make_qx_quants(x, _weights(x, qw, sigma2), 8)
    out = np.empty((len(x), 18), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:] = _nibbles(levels)
    return out


def _q5_0_weighted(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """Q5_0 with an importance matrix: ``make_qx_quants`` with 16 levels either side.

    >>> x = np.array([[16.0, -8.0, 1.0, 2.0] + [0.0] * 28], np.float32)
    >>> _q5_0_weighted(x, np.ones_like(x), row_sigma2(x))[0, :7].tolist()
    [0, 188, 242, 255, 255, 255, 0]
    """
    d, levels = _make_qx_quants(x, _weights(x, qw, sigma2), 16)
    out = np.empty((len(x), 22), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:6] = _fifth_bits(levels)
    out[:, 6:] = _nibbles(levels & 0x0F)
    return out


def _q4_1_weighted(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """Q4_1 with an importance matrix: ``make_qkx3_quants`` with 16 levels.

    >>> x = np.array([[0.0, 1.0, 2.0, 3.0] * 8], np.float32)
    >>> _q4_1_weighted(x, np.ones_like(x), row_sigma2(x))[0, :6].tolist()
    [102, 50, 0, 0, 0, 85]
    """
    d, low, levels = _make_qkx3_quants(x, _weights(x, qw, sigma2), 15)
    out = np.empty((len(x), 20), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:4] = le16(f16_bits(low))
    out[:, 4:] = _nibbles(levels)
    return out


def _q5_1_weighted(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """Q5_1 with an importance matrix: ``make_qkx3_quants`` with 32 levels.

    >>> x = np.array([[0.0, 1.0, 2.0, 3.0] * 8], np.float32)
    >>> _q5_1_weighted(x, np.ones_like(x), row_sigma2(x))[0, :10].tolist()
    [102, 46, 0, 0, 204, 204, 204, 204, 0, 170]
    """
    d, low, levels = _make_qkx3_quants(x, _weights(x, qw, sigma2), 31)
    out = np.empty((len(x), 24), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:4] = le16(f16_bits(low))
    out[:, 4:8] = _fifth_bits(levels)
    out[:, 8:] = _nibbles(levels & 0x0F)
    return out


ROW_WEIGHTED: Mapping[str, RowWeightedEncoder] = MappingProxyType(
    {
        "Q4_0": _q4_0_weighted,
        "Q4_1": _q4_1_weighted,
        "Q5_0": _q5_0_weighted,
        "Q5_1": _q5_1_weighted,
    }
)
"""This family's numpy encoders with an importance matrix, by GGML name: each
block also takes its row's ``sigma2`` (:func:`row_sigma2`)."""
