"""Encoder of the 3-bit grid type IQ3_S: what ggml's ``ggml_quantize_chunk`` writes
for it with no importance matrix, in numpy.

That is ggml's ``quantize_row_iq3_s_impl`` (ggml-quants.c) with sub-blocks of 32
(``quantize_iq3_s``), over the tables ``iq3xs_init_impl(512)`` builds: the 512
grid points (4 odd levels ``2 l + 1``, ``l`` in 0 ... 7, ggml's ``kgrid_512``,
the same points as the decoders' ``iq3s_grid``), the map of the 4096 level
quadruples ``u = l0 | l1 << 3 | l2 << 6 | l3 << 9`` to their grid index, and
for every quadruple off the grid its neighbour list: the grid points at the
three smallest squared distances from it, in ggml's ``qsort`` order (distance,
then index).  A block of 256 has weights ``w`` (:func:`weights`: ``x * x``
with no importance matrix) and per sub-block ``xval = |x|`` with a sign bit per
negative value; a sub-block whose largest ``xval`` is 0 gets scale 0 and
nothing else (see below).  Otherwise, with ``waux = sqrt(w)``:

- a search over 19 scales, ``id = (15 + 0.2 is) / max`` for ``is`` in ``-9 ...
  9``: each group of 4 takes the levels ``nearest_int(0.5 (id xval - 1))``
  clamped to 0 ... 7; a quadruple off the grid becomes its neighbour with the
  least ``sum waux (scale q - xval)**2`` at ``scale = 1 / id`` (the first of
  equals; ``iq3_find_best_neighbour``); a trial is kept where its least-squares
  scale ``sumqx / sumq2`` (``q = 2 l + 1``, sums in element order) explains more
  (``sumqx**2 > best sumq2``), with its levels and which groups were on the grid;
  the scale starts at ``max / 15``, the levels at 0, no group on the grid;
- if a group of the kept trial was off the grid and the scale is positive, every
  group is mapped again by ``1 / scale`` (neighbours searched at ``scale``) and
  the scale becomes their ``sumqx / sumq2`` where ``sumq2 > 0``;
- a negative scale is negated with the sign bits (never with the weights ``x *
  x``, whose sums are never negative; ggml guards against it for any weights).

The block stores f16 ``d = max_scale / 31`` times ``1.033`` (``max_scale`` the
largest scale; 0 and nothing more where it is 0), per sub-block the 4-bit
``nearest_int(0.5 (scale / d - 1))`` clamped to 0 ... 15 (two to a byte, the
first low), per group the grid index (its low byte in ``qs``, bit 8 in bit ``k``
of ``qh[ib]`` for group ``k`` of sub-block ``ib``) and per 8 values a byte of
sign bits.  ggml's quirk is kept: a sub-block whose largest magnitude is 0 skips
ahead before its pointers into ``qs`` and ``signs`` move, so the following
sub-blocks' groups and signs are written 8 and 4 bytes earlier than their place
(``qh`` is indexed by the sub-block's own number) and the tail stays 0.

ggml aborts (``GGML_ASSERT``) where a neighbour search finds no distance below
``FLT_MAX`` or the last scale is a NaN, which needs magnitudes whose squares
times squares overflow float32 (from about 2**42 on; never below 2**38): the
encoder raises :class:`~kiln_np._quants.encoder.GGMLAbortError` for the first
such block, exactly where ggml aborts.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from .encoder import Encoder, GGMLAbortError
from .grids import IQ3S_GRID
from .rounding import f16_bits, le16, nearest_int

__all__ = ["ENCODERS", "neighbours", "weights"]

_SUB = 32  # the sub-block (IQ3S_BLOCK_SIZE)
_KMAXQ = 8
_FLT_MAX = np.float32(np.finfo(np.float32).max)


class _Tables(NamedTuple):
    """``iq3xs_init_impl(512)``'s tables, in the form the vectorised search reads."""

    grid_index: np.ndarray  # (4096,) int32: the quadruple's grid index, or -1
    levels: np.ndarray  # (512, 4) int8: each grid point's levels l
    start: np.ndarray  # (4096,) int64: where a quadruple's neighbours start in `flat`
    length: np.ndarray  # (4096,) int64: how many it has (0 on the grid)
    flat: np.ndarray  # (total,) int32: every neighbour list, one after the other


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@cache
def _tables() -> _Tables:
    """Built once, on first use, as ``iq3xs_init_impl(512)`` builds them."""
    levels = ((IQ3S_GRID.view(np.uint8).reshape(512, 4) - 1) // 2).astype(np.int8)
    shifts = np.array([0, 3, 6, 9], np.int32)
    grid_index = np.full(4096, -1, np.int32)
    grid_index[(levels.astype(np.int32) << shifts).sum(axis=1)] = np.arange(512, dtype=np.int32)
    every = (np.arange(4096, dtype=np.int32)[:, None] >> shifts) & 7  # (4096, 4) levels
    # ggml's distances between odd positions 2 l + 1: (2 dl)**2 summed, as ints.
    d2 = (4 * (every[:, None, :] - levels[None, :, :].astype(np.int32)) ** 2).sum(axis=2)
    # qsort's order, (distance, index): a stable sort of the distances (at most 784)
    order = np.argsort(d2.astype(np.int16), axis=1, kind="stable")
    ranked = np.take_along_axis(d2, order, axis=1)
    # The third distinct distance of each row (nwant 3): the lists stop past it.
    new = np.ones_like(ranked, dtype=bool)
    new[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    third = np.take_along_axis(ranked, np.argmax(np.cumsum(new, axis=1) == 3, axis=1)[:, None], 1)
    keep = ranked <= third
    length = np.where(grid_index < 0, keep.sum(axis=1), 0)
    flat = order[(grid_index < 0)[:, None] & keep].astype(np.int32)
    start = np.cumsum(length) - length
    return _Tables(
        _read_only(grid_index),
        _read_only(levels),
        _read_only(start),
        _read_only(length),
        _read_only(flat),
    )


def neighbours(u: int) -> list[int]:
    """The neighbour list of level quadruple ``u`` (``l0 | l1 << 3 | l2 << 6 | l3 << 9``):
    the grid indices ggml's ``iq3xs_init_impl(512)`` lists for it, in its order
    (empty for a quadruple on the grid).

    >>> neighbours(0), neighbours(7 | 7 << 3 | 7 << 6 | 7 << 9)
    ([], [437, 338, 431, 441])
    """
    t = _tables()
    return [int(j) for j in t.flat[t.start[u] : t.start[u] + t.length[u]]]


def weights(blocks: np.ndarray) -> np.ndarray:
    """Each element's weight in the searches, for blocks ``(n, 256)``: with no importance
    matrix, ggml's ``x * x``.

    >>> weights(np.array([[-3.0, 0.5]], np.float32)).tolist()
    [[9.0, 0.25]]
    """
    w: np.ndarray = blocks * blocks
    return w


def _quadruples(levels: np.ndarray) -> np.ndarray:
    """Levels ``(s, 32)`` -> the 8 quadruples ``u`` of each row, ``(s, 8)``."""
    g = levels.reshape(len(levels), 8, 4).astype(np.int32)
    return g[..., 0] | (g[..., 1] << 3) | (g[..., 2] << 6) | (g[..., 3] << 9)


def _map_levels(xval: np.ndarray, id_: np.ndarray) -> np.ndarray:
    """``nearest_int(0.5 (id xval - 1))`` clamped to 0 ... 7, as int8, id per row."""
    near = nearest_int(np.float32(0.5) * (id_[:, None] * xval - np.float32(1)))
    levels: np.ndarray = np.clip(near, 0, _KMAXQ - 1).astype(np.int8)
    return levels


def _onto_grid(
    levels: np.ndarray, xval: np.ndarray, waux: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each group's grid index and whether its levels were on the grid, ``(s, 8)``
    each, a group off the grid taking ``iq3_find_best_neighbour``'s at ``scale``
    (one per row); and which rows had a search that found no distance below
    ``FLT_MAX``, where ggml asserts (then the list's first entry stands in)."""
    t = _tables()
    u = _quadruples(levels)
    index = t.grid_index[u]
    on = index >= 0
    none = np.zeros(len(levels), bool)
    rows, groups = np.nonzero(~on)
    if rows.size:
        uo = u[rows, groups]
        counts = t.length[uo]
        seg = np.cumsum(counts) - counts  # where each group's candidates start
        owner = np.repeat(np.arange(rows.size), counts)
        cand = t.flat[np.repeat(t.start[uo] - seg, counts) + np.arange(counts.sum())]
        q = (2 * t.levels[cand].astype(np.float32) + 1).astype(np.float32)  # (c, 4)
        xg = xval.reshape(len(xval), 8, 4)[rows, groups][owner]
        wg = waux.reshape(len(waux), 8, 4)[rows, groups][owner]
        sg = scale[rows][owner]
        d2 = np.zeros(len(cand), np.float32)
        for i in range(4):
            diff = sg * q[:, i] - xg[:, i]
            d2 += wg[:, i] * diff * diff
        d2 = np.where(d2 < _FLT_MAX, d2, np.float32(np.inf))  # NaN and FLT_MAX lose
        least = np.minimum.reduceat(d2, seg)
        none[rows[np.isinf(least)]] = True
        at = np.where(d2 == least[owner], np.arange(len(cand)), len(cand))
        index[rows, groups] = cand[np.minimum.reduceat(at, seg)]
    return index, on, none


def _grid_levels(index: np.ndarray) -> np.ndarray:
    """Grid indices ``(s, 8)`` -> their levels ``(s, 32)``."""
    levels: np.ndarray = _tables().levels[index].reshape(len(index), _SUB)
    return levels


def _sums(w: np.ndarray, xval: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sumqx``, ``sumq2`` of each row, ``q = 2 l + 1``, in element order."""
    q = (2 * levels.astype(np.float32) + 1).astype(np.float32)
    wq = w * q
    qx, q2 = w * xval * q, wq * q
    sumqx = np.zeros(len(w), np.float32)
    sumq2 = np.zeros(len(w), np.float32)
    for j in range(_SUB):  # ggml's sequential sums
        sumqx += qx[:, j]
        sumq2 += q2[:, j]
    return sumqx, sumq2


def _sub_blocks(
    w: np.ndarray, xval: np.ndarray, big: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scale and grid indices ggml's search gives each sub-block (row) with a
    largest ``xval`` ``big`` above 0: float32 ``(s,)``, ``(s, 8)``; and which
    sub-blocks ggml aborts on (a search with no distance below ``FLT_MAX``, or a
    final scale that is a NaN)."""
    waux = np.sqrt(w)
    s = len(w)
    aborted = np.zeros(s, bool)
    best = np.zeros(s, np.float32)
    scale = big / np.float32(2 * _KMAXQ - 1)
    levels = np.zeros((s, _SUB), np.int8)
    on_grid = np.zeros((s, 8), bool)
    for is_ in range(-9, 10):
        id_ = (np.float32(2 * _KMAXQ - 1) + np.float32(is_) * np.float32(0.2)) / big
        this_scale = np.float32(1) / id_
        index, on, none = _onto_grid(_map_levels(xval, id_), xval, waux, this_scale)
        aborted |= none
        trial = _grid_levels(index)
        sumqx, sumq2 = _sums(w, xval, trial)
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        scale = np.where(better, sumqx / np.where(better, sumq2, 1), scale)
        best = np.where(better, scale * sumqx, best)
        levels = np.where(better[:, None], trial, levels)
        on_grid = np.where(better[:, None], on, on_grid)
    again = np.flatnonzero(~on_grid.all(axis=1) & (scale > 0))
    if again.size:
        xa, sa = xval[again], scale[again]
        index, _, none = _onto_grid(_map_levels(xa, np.float32(1) / sa), xa, waux[again], sa)
        aborted[again] |= none
        levels[again] = _grid_levels(index)
        sumqx, sumq2 = _sums(w[again], xa, levels[again])
        scale[again] = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, 1), sa)
    aborted |= np.isnan(scale)
    return scale, _tables().grid_index[_quadruples(levels)], aborted


def _iq3_s(x: np.ndarray) -> np.ndarray:
    """IQ3_S (110 bytes): f16 ``d``, ``qs`` (64), ``qh`` (8), ``signs`` (32), ``scales`` (4).

    >>> _iq3_s(np.linspace(-1, 1, 256, dtype=np.float32)[None])[0, :8].tolist()
    [224, 25, 181, 181, 181, 181, 181, 181]
    """
    n = len(x)
    sub = x.reshape(n * 8, _SUB)
    w = weights(x).reshape(n * 8, _SUB)
    xval = np.where(sub >= 0, sub, -sub)
    negative = ~(sub >= 0)
    signs = np.packbits(negative.reshape(n * 8, 4, 8), axis=2, bitorder="little")[..., 0]
    big = xval.max(axis=1)
    kept = np.flatnonzero(big != 0)  # ggml's `if (!max) continue`
    scale = np.zeros(n * 8, np.float32)
    index = np.zeros((n * 8, 8), np.int32)
    if kept.size:
        scale[kept], index[kept], aborted = _sub_blocks(w[kept], xval[kept], big[kept])
        if aborted.any():
            raise GGMLAbortError(int(kept[np.argmax(aborted)]) // 8)
    flip = scale < 0  # never with weights x * x; kept as ggml has it
    scale = np.where(flip, -scale, scale)
    signs = np.where(flip[:, None], ~signs, signs)

    out = np.zeros((n, 110), np.uint8)
    live = (big != 0).reshape(n, 8)
    slot = np.cumsum(live, axis=1) - live  # where ggml's moving pointers write
    rows, subs = np.nonzero(live)
    at = rows * 8 + subs
    qs = out[:, 2:66].reshape(n, 8, 8)
    qs[rows, slot[rows, subs]] = (index[at] & 255).astype(np.uint8)
    high = ((index >> 8) << np.arange(8)).sum(axis=1)
    out[:, 66:74] = np.where(live, high.reshape(n, 8), 0).astype(np.uint8)
    sg = out[:, 74:106].reshape(n, 8, 4)
    sg[rows, slot[rows, subs]] = signs[at]

    scales = scale.reshape(n, 8)
    max_scale = scales.max(axis=1)
    d = max_scale / np.float32(31)
    out[:, :2] = le16(f16_bits(np.where(max_scale != 0, d * np.float32(1.033), 0)))
    id_ = np.float32(1) / np.where(max_scale != 0, d, 1)
    near = nearest_int(np.float32(0.5) * (id_[:, None] * scales - np.float32(1)))
    nibbles = np.where(max_scale[:, None] != 0, np.clip(near, 0, 15), 0).astype(np.uint8)
    out[:, 106:110] = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return out


ENCODERS: Mapping[str, Encoder] = MappingProxyType({"IQ3_S": _iq3_s})
"""This family's numpy encoders, by GGML name."""
