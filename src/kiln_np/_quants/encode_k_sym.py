"""Encoders of the symmetric k-quants (Q3_K, Q6_K): ggml's ``quantize_row_q3_K_ref``
and ``quantize_row_q6_K_ref``, and with an importance matrix
``quantize_row_q3_K_impl`` and ``quantize_row_q6_K_impl``, in numpy.

Both cut a block of 256 into 16 sub-blocks of 16, give each a scale by a search
(Q6_K: ggml's ``make_qx_quants`` with ``rmse_type`` 1, trying 19 inverse scales,
weighted by ``x * x`` or by the importance weights; Q3_K: ``make_q3_quants``,
moving one quant at a time while the weighted error falls, or with an
importance matrix ``make_qx_quants`` as Q6_K, weighted by ``qw * sqrt(sigma2 +
x * x)``, ``sigma2`` twice the block's mean square: a statistic of the
256-block, never of the row), quantize the 16 scales against the block's
largest (Q3_K with an importance matrix: by ``make_qx_quants`` again, weighted
by each sub-block's sum of weights), then requantize every element with its
sub-block's quantized scale.  The searches' sums run element by element in
ggml's order, vectorised across the sub-blocks of all blocks (and across the
19 candidate scales, each its own sum).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .blocks import f16_to_f32
from .encoder import Encoder, WeightedEncoder
from .rounding import f16_bits, le16, nearest_int

__all__ = ["ENCODERS", "WEIGHTED"]

_F = np.float32
_GROUP_MAX_EPS = _F(1e-15)
_CANDIDATES = np.arange(-9, 10).astype(_F)  # ggml's is = -9 .. 9; is = 0 is its first try
_FIRST = 9


def _largest(a: np.ndarray) -> np.ndarray:
    """Per row of ``a`` (float32), the first element whose magnitude is strictly the
    largest, as ggml's ``if (fabsf(v) > amax) { amax = fabsf(v); max = v; }`` from
    ``amax = 0`` finds it: 0 if no magnitude exceeds 0; a NaN is never taken."""
    mag = np.abs(a)
    mag = np.where(np.isnan(mag), _F(0), mag)
    pick = np.take_along_axis(a, np.argmax(mag, axis=1)[:, None], axis=1)[:, 0]
    result: np.ndarray = np.where(mag.max(axis=1) > 0, pick, _F(0))
    return result


def _make_qx_quants(xs: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_qx_quants(16, nmax, x, L, 1, w)`` for each row of ``xs`` (weights ``w``,
    the same shape; ggml's ``x * x`` without an importance matrix): the scales and
    the quants ``L`` (0 .. 2 nmax - 1) as int32.  Any float (the scales of a block
    whose weights overflowed are NaN or infinite) as ggml's ``nearest_int`` has it."""
    m = len(xs)
    mx = _largest(xs)
    iscale = -(_F(nmax) + _F(0.1) * _CANDIDATES) / mx[:, None]  # (m, 19)
    sumlx = np.zeros((m, len(_CANDIDATES)), _F)
    suml2 = np.zeros((m, len(_CANDIDATES)), _F)
    for i in range(xs.shape[1]):
        xi, wi = xs[:, i : i + 1], w[:, i : i + 1]
        wx = wi * xi
        lf = np.clip(nearest_int(iscale * xi), -nmax, nmax - 1).astype(_F)
        sumlx += wx * lf
        suml2 += (wi * lf) * lf
    slx, sl2 = sumlx[:, _FIRST], suml2[:, _FIRST]
    scale = np.where(sl2 != 0, slx / sl2, _F(0))
    best = scale * slx
    win = np.full(m, _FIRST)
    for k in range(len(_CANDIDATES)):
        if k == _FIRST:
            continue
        slx, sl2 = sumlx[:, k], suml2[:, k]
        better = (sl2 > 0) & (slx * slx > best * sl2)
        scale = np.where(better, slx / sl2, scale)
        best = np.where(better, scale * slx, best)
        win = np.where(better, k, win)
    chosen = np.take_along_axis(iscale, win[:, None], axis=1)
    quants = np.clip(nearest_int(chosen * xs), -nmax, nmax - 1) + nmax
    zero = np.abs(mx) < _GROUP_MAX_EPS
    return np.where(zero, _F(0), scale), np.where(zero[:, None], 0, quants)


def _make_q3_quants(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``make_q3_quants(16, 4, x, L, true)`` for each row of ``xs``: the scales and the
    quants ``L`` (0 .. 7) as int32."""
    m = len(xs)
    mx = _largest(xs)
    iscale = _F(-4) / mx
    quants = np.empty(xs.shape, np.int32)
    sumlx = np.zeros(m, _F)
    suml2 = np.zeros(m, _F)
    w = xs * xs
    wx = w * xs
    for i in range(16):
        li = np.clip(nearest_int(iscale * xs[:, i]), -4, 3)
        quants[:, i] = li
        lf = li.astype(_F)
        sumlx += wx[:, i] * lf
        suml2 += (w[:, i] * lf) * lf
    for _ in range(5):
        changed = False
        for i in range(16):
            xi, wi, wxi = xs[:, i], w[:, i], wx[:, i]
            lf = quants[:, i].astype(_F)
            without = sumlx - wxi * lf
            sl2 = suml2 - (wi * lf) * lf
            new = np.clip(nearest_int((xi * sl2) / without), -4, 3)
            nf = new.astype(_F)
            slx = without + wxi * nf
            sl2 = sl2 + (wi * nf) * nf
            take = (
                (without > 0)
                & (new != quants[:, i])
                & (sl2 > 0)
                & ((slx * slx) * suml2 > (sumlx * sumlx) * sl2)
            )
            if take.any():
                changed = True
                quants[:, i] = np.where(take, new, quants[:, i])
                sumlx = np.where(take, slx, sumlx)
                suml2 = np.where(take, sl2, suml2)
        if not changed:  # ggml stops each sub-block after a pass that moves nothing in
            break  # it; such a pass leaves it as it was, so running on changes nothing
    scale = np.where(suml2 > 0, sumlx / suml2, _F(0))
    zero = np.abs(mx) < _GROUP_MAX_EPS
    return np.where(zero, _F(0), scale), np.where(zero[:, None], 0, quants + 4)


def _requantize(xs: np.ndarray, quants: np.ndarray, d: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """ggml's second pass: where the sub-block's ``d`` is not 0 (a NaN is not),
    ``L = clamp(nearest_int(x / d), lo, hi) - lo``; elsewhere the search's ``L``."""
    again = np.clip(nearest_int(xs / d[:, None]), lo, hi) - lo
    result: np.ndarray = np.where((d != 0)[:, None], again, quants)
    return result


def _q6_k_bytes(xs: np.ndarray, sub_scales: np.ndarray, quants: np.ndarray) -> np.ndarray:
    """Q6_K's blocks from the sub-blocks ``xs`` ``(n * 16, 16)``, their scales and the
    search's quants: the scales as int8 against the largest (``d = max / -128``,
    f16), 6-bit quants in 4-bit ``ql`` and 2-bit ``qh``."""
    n = len(xs) // 16
    scales = sub_scales.reshape(n, 16)
    max_scale = _largest(scales)
    live = np.abs(max_scale) >= _GROUP_MAX_EPS
    iscale = _F(-128) / np.where(live, max_scale, _F(1))
    d_bits = f16_bits(_F(1) / iscale)
    q_scales = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8)
    d = f16_to_f32(d_bits)[:, None] * q_scales.astype(_F)
    q = _requantize(xs, quants, d.reshape(-1), -32, 31).reshape(n, 2, 4, 32)
    out = np.zeros((n, 210), np.uint8)
    low, high = q & 0xF, q >> 4
    ql = np.stack([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], 2)
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    out[:, :128] = ql.reshape(n, 128)
    out[:, 128:192] = qh.reshape(n, 64)
    out[:, 192:208] = q_scales.view(np.uint8)
    out[:, 208:] = le16(d_bits)
    out[~live] = 0
    return out


def _q6_k(x: np.ndarray) -> np.ndarray:
    """Q6_K: 16 sub-block scales by ``make_qx_quants`` weighted ``x * x``.

    >>> with np.errstate(all="ignore"):  # the zero sub-block's 1/max
    ...     block = _q6_k(np.repeat(np.arange(16, dtype=np.float32), 16)[None])[0]
    >>> block[192:208].view(np.int8).tolist()
    [0, -9, -17, -26, -34, -43, -51, -60, -68, -77, -85, -94, -102, -111, -119, -128]
    >>> block[208:].tolist(), block[:2].tolist()
    ([128, 27], [0, 0])
    """
    xs = x.reshape(-1, 16)
    return _q6_k_bytes(xs, *_make_qx_quants(xs, xs * xs, 32))


def _q6_k_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Q6_K with an importance matrix (``quantize_row_q6_K_impl``): the search weighted
    by ``qw`` itself (ggml leaves its ``sigma2`` weighting commented out).

    >>> with np.errstate(all="ignore"):  # the zero sub-block's 1/max
    ...     block = _q6_k_weighted(np.repeat(np.arange(16, dtype=np.float32), 16)[None],
    ...                            np.ones((1, 256), np.float32))[0]
    >>> block[192:208].view(np.int8).tolist()
    [0, -9, -17, -26, -34, -43, -51, -60, -68, -77, -85, -94, -102, -111, -119, -128]
    """
    xs = x.reshape(-1, 16)
    return _q6_k_bytes(xs, *_make_qx_quants(xs, qw.reshape(-1, 16), 32))


def _q3_k_bytes(
    xs: np.ndarray, quants: np.ndarray, six: np.ndarray, d_bits: np.ndarray
) -> np.ndarray:
    """Q3_K's blocks from the sub-blocks ``xs`` ``(n * 16, 16)``, the search's quants,
    the 6-bit scales ``six`` ``(n, 16)`` (0 .. 63: the scale ``six - 32`` times
    ``d``) and f16 ``d``: 3-bit quants as 2 bits in ``qs`` and one in ``hmask``."""
    n = len(six)
    d = f16_to_f32(d_bits)[:, None] * (six.astype(np.int32) - 32).astype(_F)
    q = _requantize(xs, quants, d.reshape(-1), -4, 3).reshape(n, 256)
    out = np.empty((n, 110), np.uint8)
    high = (q > 3).reshape(n, 8, 32)
    out[:, :32] = sum((high[:, b] << b).astype(np.uint8) for b in range(8))
    low = (q & 3).reshape(n, 2, 4, 32)
    qs = low[:, :, 0] | (low[:, :, 1] << 2) | (low[:, :, 2] << 4) | (low[:, :, 3] << 6)
    out[:, 32:96] = qs.reshape(n, 64)
    out[:, 96:104] = (six[:, :8] & 0xF) | ((six[:, 8:] & 0xF) << 4)
    top = (six >> 4).reshape(n, 4, 4)  # [j // 4, j % 4]
    out[:, 104:108] = top[:, 0] | (top[:, 1] << 2) | (top[:, 2] << 4) | (top[:, 3] << 6)
    out[:, 108:] = le16(d_bits)
    return out


def _q3_k(x: np.ndarray) -> np.ndarray:
    """Q3_K: 16 sub-block scales by ``make_q3_quants`` as 6 bits against the largest
    (``d = max / -32``, f16).

    >>> with np.errstate(all="ignore"):  # the zero sub-block's 1/max
    ...     block = _q3_k(np.repeat(np.arange(16, dtype=np.float32), 16)[None])[0]
    >>> block[96:108].tolist(), block[108:].tolist(), block[:2].tolist()
    ([240, 222, 188, 154, 103, 69, 35, 1, 6, 5, 5, 5], [128, 47], [0, 0])
    """
    n = len(x)
    xs = x.reshape(n * 16, 16)
    sub_scales, quants = _make_q3_quants(xs)
    scales = sub_scales.reshape(n, 16)
    max_scale = _largest(scales)
    live = max_scale != 0
    iscale = _F(-32) / np.where(live, max_scale, _F(1))
    six = np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31) + 32
    six = np.where(live[:, None], six, 0).astype(np.uint8)
    d_bits = np.where(live, f16_bits(_F(1) / iscale), np.uint16(0)).astype(np.uint16)
    return _q3_k_bytes(xs, quants, six, d_bits)


def _q3_k_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Q3_K with an importance matrix (``quantize_row_q3_K_impl``): the sub-blocks'
    scales by ``make_qx_quants`` weighted ``qw * sqrt(sigma2 + x * x)``, those
    scales by ``make_qx_quants`` weighted by their sums.

    >>> with np.errstate(all="ignore"):  # the zero sub-block's 1/max
    ...     block = _q3_k_weighted(np.repeat(np.arange(16, dtype=np.float32), 16)[None],
    ...                            np.ones((1, 256), np.float32))[0]
    >>> block[96:108].tolist(), block[108:].tolist(), block[:2].tolist()
    ([48, 46, 13, 155, 216, 184, 163, 1, 22, 21, 21, 5], [7, 49], [0, 0])
    """
    n = len(x)
    total = np.cumsum(x * x, axis=1, dtype=_F)[:, -1] + _F(0)
    sigma2 = _F(2) * total / _F(256)
    w = qw * np.sqrt(sigma2[:, None] + x * x)
    xs, ws = x.reshape(n * 16, 16), w.reshape(n * 16, 16)
    sw = (np.cumsum(ws, axis=1, dtype=_F)[:, -1] + _F(0)).reshape(n, 16)
    sub_scales, quants = _make_qx_quants(xs, ws, 4)
    d, six = _make_qx_quants(sub_scales.reshape(n, 16), sw, 32)
    return _q3_k_bytes(xs, quants, six.astype(np.uint8), f16_bits(d))


ENCODERS: Mapping[str, Encoder] = MappingProxyType({"Q3_K": _q3_k, "Q6_K": _q6_k})
"""This family's numpy encoders, by GGML name."""

WEIGHTED: Mapping[str, WeightedEncoder] = MappingProxyType(
    {"Q3_K": _q3_k_weighted, "Q6_K": _q6_k_weighted}
)
"""This family's numpy encoders with an importance matrix, by GGML name."""
