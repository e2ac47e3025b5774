"""Encoders of the non-linear 4-bit types IQ4_NL and IQ4_XS: what ggml's
``ggml_quantize_chunk`` writes for them without and with an importance matrix,
in numpy.

Both are ggml's ``quantize_row_iq4_nl_impl`` (ggml-quants.c) as ``quantize_iq4_nl``
and ``quantize_iq4_xs`` call it, with seven scale trials either side (``ntry``
7).  For each sub-block of 32 values, with weights ``w = x * x`` without an
importance matrix, and ``w = qw * sqrtf(sigma2 + x * x)`` with one (``qw`` the
sub-block's columns of the imatrix row; ``sigma2`` the block's own ``x * x``
summed in order, times ``2 / 32`` for IQ4_NL, ``2 / 256`` for IQ4_XS: unlike
Q4_0 ... Q5_1, nothing of the row outside the block):

- skip it (scale 0) when its largest magnitude is below ``GROUP_MAX_EPS``
  (``1e-15``);
- else, with ``max`` the first value of largest magnitude, map every value by
  ``127 / max`` to its nearest entry of the 16-entry table ``kvalues_iq4nl``
  (``best_index_int8``: ties go up), and take the least-squares scale
  ``sumqx / sumq2`` of those entries (sums in element order);
- then try the maps ``(t - 127) / max`` for ``t`` in ``-7 ... 7``, keeping a
  trial's least-squares scale where it explains more (``sumqx**2 / sumq2``).

IQ4_NL (one sub-block) stores that scale as f16 and the entries nearest ``x /
scale``.  IQ4_XS stores ``d = -max_scale / 32`` (f16, ``max_scale`` the first
sub-block scale of largest magnitude) and per sub-block the 6-bit ``l =
nearest_int(scale / d)`` clamped to ``-32 ... 31`` (``l + 32``: low nibbles in
``scales_l``, two high bits each in ``scales_h``), and the entries nearest ``x
/ (d * l)``.

ggml's ``quantize_row_iq4_nl_ref`` is not what ``ggml_quantize_chunk`` (nor
``llama-quantize``) runs for IQ4_NL: it makes no trials and maps by ``-127 /
max``, keeping the first pass's entries, so its bytes differ; these encoders
give ``ggml_quantize_chunk``'s.  Blocks whose sums overflow (magnitudes above
some 1e12) reach NaN scales, which ggml's ``nearest_int`` (a float trick: 0 for
a NaN) and ``best_index_int8`` (15 for a NaN) turn into bytes; both are
reproduced here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .encoder import Encoder, WeightedEncoder
from .rounding import f16_bits, le16, nearest_int

__all__ = ["ENCODERS", "KVALUES", "WEIGHTED", "best_index"]

KVALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32
)
"""ggml's ``kvalues_iq4nl``: the 16 levels of IQ4_NL and IQ4_XS, as float32."""

_EPS = np.float32(1e-15)  # GROUP_MAX_EPS
_NTRY = 7


def best_index(x: np.ndarray) -> np.ndarray:
    """ggml's ``best_index_int8`` over :data:`KVALUES`: the index of the level nearest
    each float32 of ``x`` (a tie goes to the upper level; beyond the ends, the end; a
    NaN, 15), as int64.

    >>> best_index(np.array([-200, -4.5, -4.6, 0, 7, 113, np.nan], np.float32)).tolist()
    [0, 8, 7, 8, 9, 15, 15]
    """
    # The binary search ends with KVALUES[mu - 1] <= x < KVALUES[mu]: searchsorted's
    # "right" (a NaN sorts last), clipped so that the comparison below also sends
    # values past either end (and a NaN) where ggml's early returns do.
    mu = np.clip(np.searchsorted(KVALUES, x, side="right"), 1, 15)
    below = x - KVALUES[mu - 1] < KVALUES[mu] - x
    result: np.ndarray = mu - below
    return result


def _sums(x: np.ndarray, w: np.ndarray, idl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sumqx``, ``sumq2`` of sub-blocks ``x`` mapped by ``idl`` (one per row), in order."""
    q = KVALUES[best_index(idl[:, None] * x)]
    wq = w * q
    qx, q2 = wq * x, wq * q
    sumqx = np.zeros(len(x), np.float32)
    sumq2 = np.zeros(len(x), np.float32)
    for j in range(x.shape[1]):  # ggml's sequential sums
        sumqx += qx[:, j]
        sumq2 += q2[:, j]
    return sumqx, sumq2


def _scales(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The scale ggml's search picks for each sub-block (row) of ``x`` with the
    weights ``w`` (the same shape), float32."""
    ax = np.abs(x)
    amax = ax.max(axis=1)
    big = np.take_along_axis(x, ax.argmax(axis=1)[:, None], axis=1)[:, 0]
    skip = amax < _EPS
    big = np.where(skip, np.float32(1), big)  # no 1 / 0 on the rows skipped anyway
    d = -big / KVALUES[0]
    sumqx, sumq2 = _sums(x, w, np.float32(1) / d)
    d = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, 1), np.float32(0))
    best = d * sumqx
    for itry in range(-_NTRY, _NTRY + 1):
        sumqx, sumq2 = _sums(x, w, np.float32(itry + int(KVALUES[0])) / big)
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(better, sumqx / np.where(better, sumq2, 1), d)
        best = np.where(better, d * sumqx, best)
    result: np.ndarray = np.where(skip, np.float32(0), d).astype(np.float32)
    return result


def _inverse(d: np.ndarray) -> np.ndarray:
    """C's ``d ? 1 / d : 0`` (a NaN is true)."""
    return np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0))


def _nibbles(levels: np.ndarray) -> np.ndarray:
    """Level indices ``(n, 32 k)`` -> ggml's ``qs`` bytes ``(n, 16 k)``: per 32, the
    first 16 in the low nibbles, the next 16 in the high ones."""
    pairs = levels.reshape(len(levels), -1, 2, 16).astype(np.uint8)
    return (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(len(levels), -1)


def _sigma2_weights(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """ggml's importance weights of the blocks (rows) of ``x``: ``qw * sqrtf(sigma2 +
    x * x)``, ``sigma2`` the row's ``x * x`` summed in order times ``2 / its length``."""
    sigma2 = np.cumsum(x * x, axis=1, dtype=np.float32)[:, -1] * np.float32(2 / x.shape[1])
    result: np.ndarray = qw * np.sqrt(sigma2[:, None] + x * x)
    return result


def _iq4_nl(x: np.ndarray) -> np.ndarray:
    """IQ4_NL: f16 ``d`` (the searched scale), 16 bytes of level nibbles.

    >>> _iq4_nl(np.linspace(-1, 1, 32, dtype=np.float32)[None])[0, :6].tolist()
    [68, 32, 128, 145, 161, 161]
    """
    return _iq4_nl_blocks(x, x * x)


def _iq4_nl_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """IQ4_NL with an importance matrix.

    >>> x = np.linspace(-1, 1, 32, dtype=np.float32)[None]
    >>> _iq4_nl_weighted(x, np.ones_like(x))[0, :6].tolist()
    [66, 32, 128, 145, 161, 161]
    """
    return _iq4_nl_blocks(x, _sigma2_weights(x, qw))


def _iq4_nl_blocks(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """IQ4_NL's bytes of the blocks ``x`` searched with the weights ``w``."""
    d = _scales(x, w)
    out = np.empty((len(x), 18), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:] = _nibbles(best_index(_inverse(d)[:, None] * x))
    return out


def _iq4_xs(x: np.ndarray) -> np.ndarray:
    """IQ4_XS: f16 ``d``, ``scales_h`` (u16), ``scales_l`` (4 bytes), 128 of nibbles.

    >>> _iq4_xs(np.linspace(-1, 1, 256, dtype=np.float32)[None])[0, :8].tolist()
    [184, 139, 80, 254, 128, 128, 8, 248]
    """
    return _iq4_xs_blocks(x, x * x)


def _iq4_xs_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """IQ4_XS with an importance matrix.

    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
    >>> _iq4_xs_weighted(x, np.ones_like(x))[0, :8].tolist()
    [184, 139, 80, 254, 128, 128, 8, 248]
    """
    return _iq4_xs_blocks(x, _sigma2_weights(x, qw))


def _iq4_xs_blocks(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """IQ4_XS's bytes of the blocks ``x`` searched with the weights ``w``."""
    n = len(x)
    sub = x.reshape(n * 8, 32)
    scales = _scales(sub, w.reshape(n * 8, 32)).reshape(n, 8)
    magnitude = np.abs(scales)
    magnitude = np.where(np.isnan(magnitude), np.float32(-1), magnitude)  # never picked
    first = np.take_along_axis(scales, magnitude.argmax(axis=1)[:, None], axis=1)[:, 0]
    max_scale = np.where(magnitude.max(axis=1) > 0, first, np.float32(0))
    d = -max_scale / np.float32(32)
    ls = np.clip(nearest_int(_inverse(d)[:, None] * scales), -32, 31)
    dl = d[:, None] * ls.astype(np.float32)
    levels = best_index(_inverse(dl).reshape(n * 8, 1) * sub)
    biased = (ls + 32).astype(np.uint16)
    out = np.empty((n, 136), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    high = np.zeros(n, np.uint16)
    for ib in range(8):
        high |= (biased[:, ib] >> 4) << (2 * ib)
    out[:, 2:4] = le16(high)
    low = (biased & 0xF).astype(np.uint8)
    out[:, 4:8] = low[:, 0::2] | (low[:, 1::2] << 4)
    out[:, 8:] = _nibbles(levels.reshape(n, 256))
    return out


ENCODERS: Mapping[str, Encoder] = MappingProxyType({"IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs})
"""This family's numpy encoders, by GGML name."""

WEIGHTED: Mapping[str, WeightedEncoder] = MappingProxyType(
    {"IQ4_NL": _iq4_nl_weighted, "IQ4_XS": _iq4_xs_weighted}
)
"""This family's numpy encoders with an importance matrix, by GGML name."""
