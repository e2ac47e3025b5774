"""Encoders of the k-quants with a scale and a min per sub-block (Q2_K, Q4_K, Q5_K):
ggml's ``quantize_row_q{2,4,5}_K_ref``, and with an importance matrix its
``quantize_row_q{2,4,5}_K_impl``, in numpy.

Each sub-block (16 values for Q2_K, 32 for Q4_K and Q5_K) gets a scale and a
min from ggml's ``make_qkx2_quants`` (``make_qkx3_quants`` with an importance
matrix: the same arithmetic once the weights are given, other constants): a
first guess from the sub-block's range, then ``nstep + 1`` candidate scales,
each fitted by weighted least squares and kept if its weighted error is
smaller.  The search is sequential (a candidate's levels use the min the best
candidate so far left), so the candidates are a Python loop; every sub-block
of every block goes through it at once, its arrays laid out element-major
``(elements, sub-blocks)``.  ggml's sums are sequential (``sum += ...`` in
element order): here they are ``np.cumsum`` along the element axis, which adds
in that order too (unlike ``np.sum``, which pairs).

Without an importance matrix the block's scales and mins are then quantized
against the largest of each (4 bits for Q2_K, 6 bits for Q4_K and Q5_K).  With
one, the search's weights are ``qw * sqrt(sigma2 + x * x)``, ``sigma2`` the
block's mean square (twice it for Q4_K and Q5_K: a statistic of the 256-block,
never of the row), and the scales and mins are quantized by ggml's
``make_qp_quants``, weighted by each sub-block's sum of weights: nine trial
scales, then up to five passes moving one level at a time while the fit
improves (a loop over the 16 or 8 positions, across all blocks at once).
Either way every sub-block whose quantized scale is not zero is requantized
with the f16-rounded ``d`` and ``dmin`` the block stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .blocks import f16_to_f32
from .encoder import Encoder, WeightedEncoder
from .qkx import make_qkx, total
from .rounding import f16_bits, le16, nearest_int

__all__ = ["ENCODERS", "WEIGHTED"]

_F0 = np.float32(0)
_GROUP_MAX_EPS = np.float32(1e-15)
_QP_TRIES = np.array([-4, -3, -2, -1, 1, 2, 3, 4], np.float32)  # make_qp_quants' is


def _largest(values: np.ndarray) -> np.ndarray:
    """``m = 0; if (v > m) m = v`` over each row of ``values``."""
    most = np.zeros(len(values), np.float32)
    for column in values.T:
        most = np.where(column > most, column, most)
    return most


def _sub_blocks(x: np.ndarray, size: int) -> np.ndarray:
    """Blocks ``(n, 256)`` as sub-blocks element-major: ``(size, n * 256 // size)``."""
    return np.ascontiguousarray(x.reshape(len(x), -1, size).transpose(2, 0, 1)).reshape(size, -1)


def _blocks(levels: np.ndarray, n: int) -> np.ndarray:
    """The inverse of :func:`_sub_blocks`: levels ``(n, 256)``."""
    size = len(levels)
    return levels.reshape(size, n, -1).transpose(1, 2, 0).reshape(n, -1)


def _requantize(
    x: np.ndarray, levels: np.ndarray, d: np.ndarray, dm: np.ndarray, size: int, nmax: int
) -> np.ndarray:
    """Levels ``(n, 256)`` redone as ``nearest_int((x + dm) / d)`` for every sub-block
    whose ``d`` (``(n, 256 // size)``, as ``dm``) is not zero."""
    n = len(x)
    xs = x.reshape(n, -1, size)
    again = np.clip(nearest_int((xs + dm[..., None]) / d[..., None]), 0, nmax)
    redo = (d != 0)[..., None]
    result: np.ndarray = np.where(redo, again, levels.reshape(n, -1, size)).reshape(n, -1)
    return result


def _qp(x: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``make_qp_quants(n, nmax, x, L, w)`` for each row of ``x`` (a block's
    scales or mins, ``(blocks, n)``, weights ``w`` the same): the scale (float32 per
    row) and the levels ``L`` (int32, 0 .. 255: ggml stores them as ``uint8_t``, and
    its later passes read a wrapped one back).

    >>> x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    >>> scale, levels = _qp(x, np.ones_like(x), 15)
    >>> scale.tolist(), levels.tolist()
    ([0.2700729966163635], [[4, 7, 11, 15]])
    """
    top = np.float32(nmax)
    most = np.zeros(len(x), np.float32)
    for column in x.T:  # MAX(max, x[i]): a NaN is taken, then left by the next value
        most = np.where(most > column, most, column)
    dead = most < _GROUP_MAX_EPS
    most = np.where(dead, np.float32(1), most)
    iscale = top / most
    stored = nearest_int(iscale[:, None] * x) & 0xFF
    diff = x - (np.float32(1) / iscale)[:, None] * stored.astype(np.float32)
    best = _row_total(w * diff * diff)
    tries = (np.float32(0.1) * _QP_TRIES + top) / most[:, None]  # (blocks, 8)
    levels = np.minimum(nmax, nearest_int(tries[:, :, None] * x[:, None]))
    diff = x[:, None] - (np.float32(1) / tries)[:, :, None] * levels.astype(np.float32)
    errors = _row_total(w[:, None] * diff * diff)
    for k in range(len(_QP_TRIES)):
        better = errors[:, k] < best
        best = np.where(better, errors[:, k], best)
        iscale = np.where(better, tries[:, k], iscale)
    found = np.minimum(nmax, nearest_int(iscale[:, None] * x))
    lf = found.astype(np.float32)
    sumlx = _row_total(w * x * lf)
    suml2 = _row_total(w * lf * lf)
    stored = found & 0xFF
    for _ in range(5):
        changed = False
        for i in range(x.shape[1]):
            xi, wi, old = x[:, i], w[:, i], stored[:, i]
            of = old.astype(np.float32)
            slx = sumlx - wi * xi * of
            sl2 = suml2 - wi * of * of
            new = np.minimum(nmax, nearest_int(xi * sl2 / slx))
            nf = new.astype(np.float32)
            nslx = slx + wi * xi * nf
            nsl2 = sl2 + wi * nf * nf
            take = (
                (slx > 0) & (sl2 > 0) & (new != old) & (nslx * nslx * suml2 > sumlx * sumlx * nsl2)
            )
            if take.any():
                changed = True
                stored[:, i] = np.where(take, new & 0xFF, old)
                sumlx = np.where(take, nslx, sumlx)
                suml2 = np.where(take, nsl2, suml2)
        if not changed:  # ggml stops each row after a pass that moves nothing in it;
            break  # such a pass leaves it as it was, so running on changes nothing
    scale = np.where(suml2 > 0, sumlx / suml2, _F0)
    return np.where(dead, _F0, scale), np.where(dead[:, None], 0, stored)


def _row_total(terms: np.ndarray) -> np.ndarray:
    """``s = 0; s += terms[0]; ...`` along the last axis."""
    result: np.ndarray = np.cumsum(terms, axis=-1, dtype=np.float32)[..., -1] + _F0
    return result


def _weigh(
    x: np.ndarray, qw: np.ndarray, two: bool, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """With an importance matrix: the blocks' sub-blocks of ``size`` and ggml's weights
    ``qw * sqrt(sigma2 + x * x)`` element-major (as :func:`_sub_blocks`), and each
    sub-block's sum of weights ``(n, 256 // size)``; ``sigma2`` the block's sum of
    squares (twice it with ``two``) over 256."""
    squares = _row_total(x * x)
    sigma2 = (np.float32(2) * squares if two else squares) / np.float32(256)
    w = qw * np.sqrt(sigma2[:, None] + x * x)
    wt = _sub_blocks(w, size)
    sw = (total(wt) + _F0).reshape(len(x), -1)
    return _sub_blocks(x, size), wt, sw


def _q2_k_bytes(
    x: np.ndarray, levels: np.ndarray, sc: np.ndarray, d_bits: np.ndarray, dmin_bits: np.ndarray
) -> np.ndarray:
    """Q2_K's blocks from the search's levels ``(n, 256)``, the packed scales ``sc``
    (4-bit scale | 4-bit min << 4) and f16 ``d`` and ``dmin``."""
    n = len(x)
    d = f16_to_f32(d_bits)[:, None] * (sc & 0xF).astype(np.float32)
    dm = f16_to_f32(dmin_bits)[:, None] * (sc >> 4).astype(np.float32)
    levels = _requantize(x, levels, d, dm, 16, 3).reshape(n, 2, 4, 32)
    out = np.empty((n, 84), np.uint8)
    out[:, :16] = sc
    out[:, 16:80] = (
        levels[:, :, 0] | (levels[:, :, 1] << 2) | (levels[:, :, 2] << 4) | (levels[:, :, 3] << 6)
    ).reshape(n, 64)
    out[:, 80:82] = le16(d_bits)
    out[:, 82:84] = le16(dmin_bits)
    return out


def _q2_k(x: np.ndarray) -> np.ndarray:
    """Q2_K: 16 sub-blocks of 16 values at 2 bits, a 4-bit scale and min each.

    >>> x = np.tile(np.array([0.0, 1.0, 2.0, 3.0], np.float32), 64)[None]
    >>> out = _q2_k(x)
    >>> out[0, :2].tolist(), out[0, 16:18].tolist(), out[0, 80:].tolist()
    ([15, 15], [0, 85], [68, 44, 0, 0])
    """
    n = len(x)
    xt = _sub_blocks(x, 16)
    levels, scales, mins = make_qkx(xt, np.abs(xt), 3, -0.5, 0.1, 15, True)
    scales, mins = scales.reshape(n, 16), mins.reshape(n, 16)
    max_scale, max_min = _largest(scales), _largest(mins)
    q4 = np.float32(15)
    has_scale, has_min = max_scale > 0, max_min > 0
    inv_scale = q4 / np.where(has_scale, max_scale, 1)[:, None]
    inv_min = q4 / np.where(has_min, max_min, 1)[:, None]
    sc = np.where(has_scale[:, None], nearest_int(inv_scale * scales) & 0xFF, 0)
    sc = np.where(has_min[:, None], (sc | (nearest_int(inv_min * mins) << 4)) & 0xFF, sc)
    d_bits = np.where(has_scale, f16_bits(max_scale / q4), 0).astype(np.uint16)
    dmin_bits = np.where(has_min, f16_bits(max_min / q4), 0).astype(np.uint16)
    return _q2_k_bytes(x, _blocks(levels, n), sc, d_bits, dmin_bits)


def _q2_k_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Q2_K with an importance matrix (``quantize_row_q2_K_impl``).

    >>> x = np.tile(np.array([0.0, 1.0, 2.0, 3.0], np.float32), 64)[None]
    >>> with np.errstate(all="ignore"):  # 0 / 0 in make_qp_quants' passes over the mins
    ...     out = _q2_k_weighted(x, np.ones_like(x))
    >>> np.array_equal(out, _q2_k(x))  # an exact fit: the same bytes as without weights
    True
    """
    n = len(x)
    xt, wt, sw = _weigh(x, qw, False, 16)
    levels, scales, mins = make_qkx(xt, wt, 3, -0.9, 0.05, 36, False)
    d, ls = _qp(scales.reshape(n, 16), sw, 15)
    m, lm = _qp(mins.reshape(n, 16), sw, 15)
    sc = (ls | (lm << 4)) & 0xFF
    return _q2_k_bytes(x, _blocks(levels, n), sc, f16_bits(d), f16_bits(m))


def _k6_head(
    x: np.ndarray,
    levels: np.ndarray,
    ls: np.ndarray,
    lm: np.ndarray,
    d_bits: np.ndarray,
    dmin_bits: np.ndarray,
    nmax: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K and Q5_K: the 16 header bytes (d, dmin, the 6-bit scales ``ls`` and mins
    ``lm`` packed, as ggml stores them: Q4_K's may have wrapped) and the levels
    ``(n, 256)`` requantized with the scales and mins read back as
    ``get_scale_min_k4`` reads them."""
    n = len(x)
    head = np.empty((n, 16), np.uint8)
    head[:, 0:2] = le16(d_bits)
    head[:, 2:4] = le16(dmin_bits)
    head[:, 4:8] = (ls[:, :4] | ((ls[:, 4:] >> 4) << 6)) & 0xFF
    head[:, 8:12] = (lm[:, :4] | ((lm[:, 4:] >> 4) << 6)) & 0xFF
    head[:, 12:16] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    q = head[:, 4:16].astype(np.int32)
    s = np.concatenate([q[:, 0:4] & 63, (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([q[:, 4:8] & 63, (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)], axis=1)
    d = f16_to_f32(d_bits)[:, None] * s.astype(np.float32)
    dm = f16_to_f32(dmin_bits)[:, None] * m.astype(np.float32)
    return _requantize(x, levels, d, dm, 32, nmax), head


def _k6(x: np.ndarray, nmax: int, rmin: float, nstep: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K and Q5_K: levels ``(n, 256)`` and the 16 header bytes (d, dmin, scales)."""
    n = len(x)
    xt = _sub_blocks(x, 32)
    av_x = np.sqrt((total(xt * xt) + _F0) / np.float32(32))
    levels, scales, mins = make_qkx(xt, av_x + np.abs(xt), nmax, rmin, 0.1, nstep, False)
    scales, mins = scales.reshape(n, 8), mins.reshape(n, 8)
    max_scale, max_min = _largest(scales), _largest(mins)
    q6 = np.float32(63)
    inv_scale = np.where(max_scale > 0, q6 / np.where(max_scale > 0, max_scale, 1), _F0)
    inv_min = np.where(max_min > 0, q6 / np.where(max_min > 0, max_min, 1), _F0)
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
    d_bits, dmin_bits = f16_bits(max_scale / q6), f16_bits(max_min / q6)
    return _k6_head(x, _blocks(levels, n), ls, lm, d_bits, dmin_bits, nmax)


def _k6_weighted(x: np.ndarray, qw: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K and Q5_K with an importance matrix (``quantize_row_q{4,5}_K_impl``): levels
    and header as :func:`_k6`, the scales and mins by ``make_qp_quants``; Q5_K caps
    them at 63, Q4_K stores them as they come."""
    n = len(x)
    xt, wt, sw = _weigh(x, qw, True, 32)
    levels, scales, mins = make_qkx(xt, wt, nmax, -0.9, 0.05, 36, False)
    d, ls = _qp(scales.reshape(n, 8), sw, 63)
    m, lm = _qp(mins.reshape(n, 8), sw, 63)
    if nmax == 31:
        ls, lm = np.minimum(ls, 63), np.minimum(lm, 63)
    return _k6_head(x, _blocks(levels, n), ls, lm, f16_bits(d), f16_bits(m), nmax)


def _q4_k_bytes(levels: np.ndarray, head: np.ndarray) -> np.ndarray:
    """Q4_K's blocks: the header, then ``qs[32 k + l] = L[64 k + l] | L[64 k + 32 + l] << 4``."""
    n = len(levels)
    pairs = levels.reshape(n, 4, 2, 32)
    out = np.empty((n, 144), np.uint8)
    out[:, :16] = head
    out[:, 16:] = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, 128)
    return out


def _q5_k_bytes(levels: np.ndarray, head: np.ndarray) -> np.ndarray:
    """Q5_K's blocks: the header, ``qh`` (the fifth bits), then the low 4 bits as Q4_K's."""
    n = len(levels)
    pairs = levels.reshape(n, 4, 2, 32)
    high = (pairs >> 4) << (2 * np.arange(4)[:, None, None] + np.arange(2)[:, None])
    out = np.empty((n, 176), np.uint8)
    out[:, :16] = head
    out[:, 16:48] = high.reshape(n, 8, 32).sum(axis=1)  # disjoint bits: the sum is the or
    out[:, 48:] = ((pairs[:, :, 0] & 0xF) | ((pairs[:, :, 1] & 0xF) << 4)).reshape(n, 128)
    return out


def _q4_k(x: np.ndarray) -> np.ndarray:
    """Q4_K: 8 sub-blocks of 32 values at 4 bits, a 6-bit scale and min each.

    >>> x = np.tile(np.arange(16, dtype=np.float32), 16)[None]
    >>> out = _q4_k(x)
    >>> out[0, :6].tolist(), out[0, 16:18].tolist(), out[0, 142:].tolist()
    ([16, 36, 0, 0, 255, 255], [0, 17], [238, 255])
    """
    return _q4_k_bytes(*_k6(x, 15, -1.0, 20))


def _q4_k_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Q4_K with an importance matrix (``quantize_row_q4_K_impl``).

    >>> x = np.tile(np.arange(16, dtype=np.float32), 16)[None]
    >>> with np.errstate(all="ignore"):  # 0 / 0 in make_qp_quants' passes over the mins
    ...     out = _q4_k_weighted(x, np.ones_like(x))
    >>> np.array_equal(out, _q4_k(x))  # an exact fit: the same bytes as without weights
    True
    """
    return _q4_k_bytes(*_k6_weighted(x, qw, 15))


def _q5_k(x: np.ndarray) -> np.ndarray:
    """Q5_K: 8 sub-blocks of 32 values at 5 bits, a 6-bit scale and min each.

    >>> x = np.tile(np.arange(32, dtype=np.float32), 8)[None]
    >>> out = _q5_k(x)
    >>> out[0, :6].tolist(), out[0, 16:18].tolist(), out[0, 174:].tolist()
    ([16, 36, 0, 0, 255, 255], [0, 0], [238, 255])
    """
    return _q5_k_bytes(*_k6(x, 31, -0.5, 15))


def _q5_k_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Q5_K with an importance matrix (``quantize_row_q5_K_impl``).

    >>> x = np.tile(np.arange(32, dtype=np.float32), 8)[None]
    >>> with np.errstate(all="ignore"):  # 0 / 0 in make_qp_quants' passes over the mins
    ...     out = _q5_k_weighted(x, np.ones_like(x))
    >>> out[0, :6].tolist(), out[0, 16:18].tolist(), out[0, 174:].tolist()
    ([16, 36, 0, 0, 255, 255], [0, 0], [238, 255])
    """
    return _q5_k_bytes(*_k6_weighted(x, qw, 31))


ENCODERS: Mapping[str, Encoder] = MappingProxyType({"Q2_K": _q2_k, "Q4_K": _q4_k, "Q5_K": _q5_k})
"""This family's numpy encoders, by GGML name."""

WEIGHTED: Mapping[str, WeightedEncoder] = MappingProxyType(
    {"Q2_K": _q2_k_weighted, "Q4_K": _q4_k_weighted, "Q5_K": _q5_k_weighted}
)
"""This family's numpy encoders with an importance matrix, by GGML name."""
