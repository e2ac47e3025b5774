"""Encoders of the 1-bit grid types IQ1_S and IQ1_M: what ggml's ``ggml_quantize_chunk``
writes for them, in numpy.

They are ggml's ``quantize_row_iq1_s_impl`` and ``quantize_row_iq1_m_impl``
(ggml-quants.c) over the 2048-point grid of :mod:`kiln_np._quants.neighbours`,
whose levels 0, 1, 2 stand for ``-1 + delta``, ``delta``, ``1 + delta`` (``x_p``) or
``-1 - delta``, ``-delta``, ``1 - delta`` (``x_m``), ``delta = 0.125``.  A block of
256 has sub-blocks of 32 (IQ1_S) or 16 (IQ1_M) values, each value weighted by
``qw * sqrt(sigma2 + x**2)`` (``sigma2 = 2 sum x**2 / 256``; IQ1_M without an
importance matrix: ``x**2``), and per sub-block:

- a sub-block whose largest ``|x|`` is below ``GROUP_MAX_EPS`` (1e-12, IQ1_M 1e-7)
  gets scale 0;
- the values are sorted (ggml's ``qsort`` with ``iq1_sort_helper``, which compares
  values only), and every split of the sorted values into three runs (levels 0,
  1, 2) is scored: its least-squares scale ``sumqx / sumq2`` from prefix sums of
  ``w x`` and ``w``, with ``x_p`` and then ``x_m`` (IQ1_M: the four choices of
  ``x_p`` or ``x_m`` for its two halves of 8), kept where ``sumqx**2 > best *
  sumq2``, in ggml's order (splits by first then second boundary);
- each group of 8 whose levels are no grid point takes its neighbour of least
  ``sum(w (scale q - x)**2)`` (``iq1_find_best_neighbour2``), and then the
  sub-block's scale is fitted again.

IQ1_S stores ``d = 1.125 max_scale / 15`` (f16) and per sub-block a 3-bit scale
and the ``x_m`` bit; IQ1_M a 3-bit scale per sub-block and the ``x_m`` bits, and
an f16 block scale fitted over all 256 values (times 1.1125), its four nibbles
spread over the scales' top bits.

**The sort.** ``iq1_sort_helper`` leaves equal values (ties, and -0.0 with 0.0)
in whatever order the C library's ``qsort`` leaves them.  glibc (2.36 here, as
llama.cpp's builds on Linux) sorts arrays this small with a merge sort, which is
stable: equal values keep their order.  So do these encoders (``np.argsort``,
``kind="stable"``) and the compiled ones; a ``qsort`` that is not stable (musl's
smoothsort, for one) can order ties otherwise and give other bytes for blocks
with equal values (``tests/quants/test_ggml_quantize_iq1.py`` shows golden rows
that change).

Where ggml aborts, the encoder raises :class:`GGMLAbortError` for the first such
block: a scale that ends as a NaN (``GGML_ASSERT(scale >= 0)``), or a group
whose listed neighbours all have distances at or above ``FLT_MAX``.  On those
ggml goes on to search the whole grid, reading values of ``x`` at the grid
point's index (up to 2047 floats past the group: other blocks, other rows,
memory past the tensor), which is undefined; kiln_np refuses the block there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from .encode_iq2 import block_weights, total
from .encoder import Encoder, GGMLAbortError, WeightedEncoder
from .neighbours import GridTable, first_least, table
from .rounding import f16_bits, le16, nearest_int

__all__ = ["ENCODERS", "WEIGHTED", "X_M", "X_P", "sort_order"]

_F0 = np.float32(0)
_F1 = np.float32(1)
_DELTA = np.float32(0.125)  # IQ1S_DELTA, IQ1M_DELTA
X_P = np.array([-1 + _DELTA, _DELTA, 1 + _DELTA], np.float32)
X_M = np.array([-1 - _DELTA, -_DELTA, 1 - _DELTA], np.float32)
_SHIFTS = 2 * np.arange(8)

_Sums = Callable[
    [np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]
]


def _prefix(terms: np.ndarray) -> np.ndarray:
    """``p[0] = 0; p[j + 1] = p[j] + terms[j]`` along the last axis."""
    zero = np.zeros((*terms.shape[:-1], 1), np.float32)
    both = np.concatenate([zero, terms], axis=-1)
    result: np.ndarray = np.cumsum(both, axis=-1, dtype=np.float32)
    return result


def sort_order(x: np.ndarray) -> np.ndarray:
    """The order ggml's ``qsort(pairs, n, ..., iq1_sort_helper)`` leaves each row of
    ``x`` in on glibc: by value, equal values (-0.0 and 0.0 too) in their order, as
    its merge sort keeps them (a stable sort).

    >>> sort_order(np.array([[1.0, -0.0, 0.0, -1.0, 0.0]], np.float32)).tolist()
    [[3, 1, 2, 4, 0]]
    """
    order: np.ndarray = np.argsort(x, axis=1, kind="stable")
    return order


def _keep_best(
    sumqx: np.ndarray, sumq2: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates ``(m, count)`` in order: ``if (sumq2 > 0 && sumqx*sumqx >
    best*sumq2) { scale = sumqx/sumq2; best = scale*sumqx; }`` from ``best =
    -FLT_MAX``, ``scale = start``; the scale and the candidate kept (-1: none)."""
    positive = (sumq2 > 0).T.copy()
    squared = (sumqx * sumqx).T.copy()
    scale_c = (sumqx / np.where(sumq2 > 0, sumq2, _F1)).T.copy()
    best_c = scale_c * sumqx.T
    q2 = sumq2.T.copy()
    best = np.full(len(start), -np.finfo(np.float32).max, np.float32)
    kept = np.full(len(start), -1)
    with np.errstate(over="ignore"):  # -FLT_MAX * sumq2: ggml's start overflows to -inf
        for c in range(len(q2)):
            take = positive[c] & (squared[c] > best * q2[c])
            best = np.where(take, best_c[c], best)
            kept = np.where(take, c, kept)
    scale = np.where(kept >= 0, scale_c[np.maximum(kept, 0), np.arange(len(start))], start)
    return scale, kept


def _levels(order: np.ndarray, i1: np.ndarray, i2: np.ndarray) -> np.ndarray:
    """Levels of sub-blocks ``(m, size)``: 0 for the sorted places before ``i1``, 1
    before ``i2``, 2 after, put back at the values' places."""
    place = np.arange(order.shape[1])
    sorted_levels = (place >= i1[:, None]).astype(np.int64) + (place >= i2[:, None])
    levels = np.empty_like(sorted_levels)
    np.put_along_axis(levels, order, sorted_levels, axis=1)
    return levels


def _snap(
    t: GridTable,
    levels: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    scale: np.ndarray,
    values: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Grid indices of the groups ``(m, groups, 8)``: each group's own point, or off
    the grid its best neighbour (``iq1_find_best_neighbour2``: least ``w * diff *
    diff``, ``diff = scale * values[level] - x``, ``values``: each group's ``x_p`` or
    ``x_m``, ``(m, groups, 3)``); and which groups found none."""
    u = (levels << _SHIFTS).sum(axis=-1)
    index = t.kmap[u].astype(np.int64)
    at = np.nonzero(index < 0)
    diff = scale[at[0], None, None] * values[at][:, None, :] - x[at][..., None]
    found = first_least(t, u[at], w[at][..., None] * diff * diff)
    index[at] = np.maximum(found, 0)
    failed = np.zeros(index.shape, bool)
    failed[at] = found < 0
    return index, failed


def _refit(
    t: GridTable, index: np.ndarray, x: np.ndarray, w: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``sumqx``, ``sumq2`` of the groups' points (``q = values[level]``), in order."""
    q = np.take_along_axis(values, t.levels[index].astype(np.int64), axis=-1)
    wq = w * q
    flat = (len(q), q.shape[1] * q.shape[2])
    return total((wq * x).reshape(flat)), total((wq * q).reshape(flat))


def _values(choice: np.ndarray, groups: int) -> np.ndarray:
    """Each group's level values ``(m, groups, 3)`` for a sub-block's ``choice``: its
    bits from the top, one per part (IQ1_S: one part; IQ1_M: its two halves), set
    for ``x_m``."""
    parts = 1 if groups == 4 else 2
    bit = (choice[:, None] >> (parts - 1 - np.arange(groups) * parts // groups)) & 1
    result: np.ndarray = np.where(bit[..., None] == 1, X_M, X_P)
    return result


class _Found(NamedTuple):
    """A sub-block search's result, per sub-block (0 where none was kept)."""

    scale: np.ndarray
    choice: np.ndarray
    grid: np.ndarray


def _search(x: np.ndarray, w: np.ndarray, eps: float, sums: _Sums, choices: int) -> _Found:
    """The sub-blocks ``(m, size)``' scales, ``x_p``/``x_m`` choices and grid indices
    (``(m, size / 8)``): ``sums`` scores every split of each sub-block's sorted
    values with each of ``choices`` (splits in ggml's order, then choices); the
    best is kept, its groups put on the grid and its scale fitted again.  Raises
    :class:`GGMLAbortError` for the first sub-block of ggml's abort."""
    m, size = x.shape
    t = table("IQ1")
    big = np.abs(x).max(axis=1)
    searched = np.flatnonzero(big >= np.float32(eps))
    xv, wv = x[searched], w[searched]
    order = sort_order(xv)
    i1, i2 = np.triu_indices(size + 1)  # every split 0 <= i1 <= i2 <= size, ggml's order
    sumqx, sumq2 = sums(xv, wv, order, i1, i2)
    scale, kept = _keep_best(sumqx, sumq2, big[searched])
    split, choice = np.maximum(kept, 0) // choices, np.maximum(kept, 0) % choices
    levels = _levels(order, i1[split], i2[split])
    negative = scale < 0  # the levels and the choice mirrored
    levels = np.where(negative[:, None], 2 - levels, levels)
    scale = np.where(negative, -scale, scale)
    choice = np.where(negative, choices - 1 - choice, choice)
    groups = (len(xv), size // 8, 8)
    values = _values(choice, size // 8)
    xg, wg, lg = xv.reshape(groups), wv.reshape(groups), levels.reshape(groups)
    index, failed = _snap(t, lg, xg, wg, scale, values)
    sumqx_f, sumq2_f = _refit(t, index, xg, wg, values)
    refit = (t.kmap[(lg << _SHIFTS).sum(axis=-1)] < 0).any(axis=1)
    refit &= (sumqx_f > 0) & (sumq2_f > 0)
    scale = np.where(refit, sumqx_f / np.where(refit, sumq2_f, _F1), scale)
    found = kept >= 0
    bad = found & (failed.any(axis=1) | np.isnan(scale))
    if bad.any():
        raise GGMLAbortError(int(searched[np.argmax(bad)]) * size // 256)
    result = _Found(
        np.zeros(m, np.float32), np.zeros(m, np.int64), np.zeros((m, size // 8), np.int64)
    )
    at = searched[found]
    result.scale[at], result.choice[at], result.grid[at] = (
        scale[found],
        choice[found],
        index[found],
    )
    return result


def _sums_s(
    x: np.ndarray, w: np.ndarray, order: np.ndarray, i1: np.ndarray, i2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """IQ1_S's scores: per split, ``sumqx`` and ``sumq2`` of the three runs with
    ``x_p``, then with ``x_m``, from prefix sums of the sorted ``w x`` and ``w``."""
    sumx = _prefix(np.take_along_axis(w * x, order, axis=1))
    sumw = _prefix(np.take_along_axis(w, order, axis=1))
    end = x.shape[1]
    a, b, c = sumx[:, i1] - sumx[:, :1], sumx[:, i2] - sumx[:, i1], sumx[:, end:] - sumx[:, i2]
    aw, bw, cw = sumw[:, i1] - sumw[:, :1], sumw[:, i2] - sumw[:, i1], sumw[:, end:] - sumw[:, i2]
    qx = [a * v[0] + b * v[1] + c * v[2] for v in (X_P, X_M)]
    q2 = [aw * v[0] * v[0] + bw * v[1] * v[1] + cw * v[2] * v[2] for v in (X_P, X_M)]
    shape = (len(x), 2 * len(i1))
    return np.stack(qx, axis=2).reshape(shape), np.stack(q2, axis=2).reshape(shape)


def _sums_m(
    x: np.ndarray, w: np.ndarray, order: np.ndarray, i1: np.ndarray, i2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """IQ1_M's scores: per split, ``sumqx`` and ``sumq2`` with each half of 8 on
    ``x_p`` or ``x_m`` (``+ +``, ``+ -``, ``- +``, ``- -``), from prefix sums kept per
    half and ggml's collapsed formula (``T v[2] - px[i1] - px[i2]``)."""
    m, size = x.shape
    high = np.take_along_axis(np.broadcast_to(np.arange(size) >= size // 2, x.shape), order, 1)
    wx = np.take_along_axis(w * x, order, axis=1)
    wo = np.take_along_axis(w, order, axis=1)
    qx: list[list[np.ndarray]] = [[], []]  # per half: with x_p, with x_m
    q2: list[list[np.ndarray]] = [[], []]
    for h in (0, 1):
        px = _prefix(np.where(high == h, wx, _F0))
        pw = _prefix(np.where(high == h, wo, _F0))
        sx = px[:, i1] + px[:, i2]
        for v in (X_P, X_M):
            c1, c2 = v[0] * v[0] - v[1] * v[1], v[1] * v[1] - v[2] * v[2]
            qx[h].append(px[:, size:] * v[2] - sx)
            q2[h].append(pw[:, size:] * v[2] * v[2] + pw[:, i1] * c1 + pw[:, i2] * c2)
    pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]
    shape = (m, 4 * len(i1))
    return (
        np.stack([qx[0][a] + qx[1][b] for a, b in pairs], axis=2).reshape(shape),
        np.stack([q2[0][a] + q2[1][b] for a, b in pairs], axis=2).reshape(shape),
    )


def _block_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per block (``scales``: ``(n, sub-blocks)``): ``d = max_scale / 15``, each
    sub-block's 3-bit ``clip(nearest_int((scale / d - 1) / 2), 0, 7)``, and which
    blocks have ``max_scale`` 0 (ggml writes no scales for them)."""
    max_scale = np.maximum(scales.max(axis=1), _F0)
    zero = max_scale == 0
    d = max_scale / np.float32(15)
    id_ = _F1 / np.where(zero, _F1, d)
    ls = np.clip(nearest_int(np.float32(0.5) * (id_[:, None] * scales - _F1)), 0, 7)
    return d, ls, zero


def _iq1_s(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """IQ1_S: f16 ``d``, 32 bytes of grid indices' low bits, 8 u16 ``qh`` (3 high bits
    per group, the 3-bit scale at bit 12, the ``x_m`` bit at 15).

    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
    >>> _iq1_s(x, np.ones_like(x))[0, :6].tolist()
    [214, 44, 0, 0, 0, 0]
    """
    n = len(x)
    w = block_weights(x, qw, True).reshape(-1, 32)
    found = _search(x.reshape(-1, 32), w, 1e-12, _sums_s, 2)
    d, ls, zero = _block_scales(found.scale.reshape(n, 8))
    ls = ls | (found.choice.reshape(n, 8) << 3)
    qh = ((found.grid >> 8) << (3 * np.arange(4))).sum(axis=1).reshape(n, 8)
    qh = np.where(zero[:, None], qh, qh | (ls << 12))
    out = np.empty((n, 50), np.uint8)
    out[:, :2] = le16(np.where(zero, 0, f16_bits(d * np.float32(1.125))).astype(np.uint16))
    out[:, 2:34] = (found.grid & 255).reshape(n, 32)
    out[:, 34:] = le16(qh.astype(np.uint16)).reshape(n, 16)
    return out


def _iq1_m(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """IQ1_M: 32 bytes of grid indices' low bits, 16 of ``qh`` (3 high bits per group,
    the ``x_m`` bits 3 and 7), 4 u16 of 3-bit scales with the f16 ``d``'s nibbles on
    top.

    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
    >>> _iq1_m(x, None)[0, 48:].tolist()
    [55, 168, 0, 128, 0, 128, 132, 63]
    """
    n = len(x)
    w = (x * x if qw is None else block_weights(x, qw, True)).reshape(-1, 16)
    found = _search(x.reshape(-1, 16), w, 1e-7, _sums_m, 4)
    d, ls, zero = _block_scales(found.scale.reshape(n, 16))
    # ggml's last fit of d over the block's 256 values, with the levels and scales stored
    values = _values(found.choice, 2)
    levels = table("IQ1").levels[found.grid].astype(np.int64)
    q = np.take_along_axis(values, levels, axis=-1).reshape(n, 16, 16)
    q = q * (2 * ls[..., None] + 1).astype(np.float32)
    wq = w.reshape(n, 16, 16) * q
    sumqx, sumq2 = (
        total((wq * x.reshape(n, 16, 16)).reshape(n, 256)),
        total((wq * q).reshape(n, 256)),
    )
    d = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, _F1), d)
    s = f16_bits(d * np.float32(1.1125)).astype(np.int64)
    sc = (ls.reshape(n, 4, 4) << (3 * np.arange(4))).sum(axis=2)
    sc |= np.stack([(s & 0xF) << 12, (s & 0xF0) << 8, (s & 0xF00) << 4, s & 0xF000], axis=1)
    index = found.grid
    qh = (index[:, 0] >> 8) | ((index[:, 1] >> 8) << 4)
    qh = np.where(np.repeat(zero, 16), qh, qh | np.array([0x00, 0x80, 0x08, 0x88])[found.choice])
    out = np.empty((n, 56), np.uint8)
    out[:, :32] = (index & 255).reshape(n, 32)
    out[:, 32:48] = qh.reshape(n, 16)
    out[:, 48:] = np.where(zero[:, None], 0, le16(sc.astype(np.uint16)).reshape(n, 8))
    return out


WEIGHTED: Mapping[str, WeightedEncoder] = MappingProxyType({"IQ1_S": _iq1_s, "IQ1_M": _iq1_m})
"""This family's numpy encoders with an importance matrix, by GGML name."""

ENCODERS: Mapping[str, Encoder] = MappingProxyType({"IQ1_M": lambda x: _iq1_m(x, None)})
"""This family's numpy encoders without one (ggml requires it for IQ1_S)."""
