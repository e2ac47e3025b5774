"""Encoders of the 3-bit grid types IQ3_XXS and IQ3_S: what ggml's
``ggml_quantize_chunk`` writes for them, without an importance matrix and with
one, in numpy.

That is ggml's ``quantize_row_iq3_xxs_impl(256, ...)`` and
``quantize_row_iq3_s_impl`` with sub-blocks of 32 (``quantize_iq3_s``), each
over the tables ``iq3xs_init_impl`` builds for its grid (:func:`neighbours`):
the grid points (4 levels ``l`` in 0 ... 7 each, searched as the odd values
``2 l + 1``: ggml's ``kgrid_256`` for IQ3_XXS, whose decoders' ``iq3xxs_grid``
holds ``8 l + 4`` (62 for level 7), and ``kgrid_512`` for IQ3_S, whose
``iq3s_grid`` holds ``2 l + 1``; the same points in the same order), the map
of the 4096 level quadruples ``u = l0 | l1 << 3 | l2 << 6 | l3 << 9`` to
their grid index, and for every quadruple off the grid its neighbour list:
the grid points at the two (256 points) or three (512) smallest squared
distances from it, in ggml's ``qsort`` order (distance, then index).

A block of 256 has weights ``w`` (:func:`weights`: ``x * x`` with no
importance matrix; with one, ``qw * sqrt(sigma2 + x * x)``, ``sigma2 = 2
sumx2 / 256`` of the block) and per sub-block of 32 ``xval = |x|`` with a
sign bit per negative value.  IQ3_XXS stores 7 sign bits per 8 values and an
even count of them: where the count is odd, the value with the least ``w x
x`` (the first of equals) has its bit flipped and its ``xval`` negated.  A
sub-block whose largest ``xval`` is 0 (IQ3_S) or below ``1e-8`` (IQ3_XXS)
gets scale 0 and nothing else.  Otherwise, with ``waux = sqrt(w)``:

- a search over 19 (IQ3_S) or 31 (IQ3_XXS) scales, ``id = (15 + 0.2 is) /
  max`` for ``is`` in ``-9 ... 9`` or ``-15 ... 15``: each group of 4 takes
  the levels ``nearest_int(0.5 (id xval - 1))`` clamped to 0 ... 7; a
  quadruple off the grid becomes its neighbour with the least ``sum waux
  (scale q - xval)**2`` at ``scale = 1 / id`` (the first of equals;
  ``iq3_find_best_neighbour``); a trial is kept where its least-squares scale
  ``sumqx / sumq2`` (``q = 2 l + 1``, sums in element order) explains more
  (``sumqx**2 > best sumq2``), with its levels and which groups were on the
  grid; the scale starts at ``max / 15``, the levels at 0, and no group (IQ3_S)
  or every group (IQ3_XXS) on the grid;
- if a group of the kept trial was off the grid and the scale is positive, the
  groups (IQ3_S: every one; IQ3_XXS: those off the grid) are mapped again by
  ``1 / scale`` (neighbours searched at ``scale``) and the scale becomes their
  ``sumqx / sumq2`` where ``sumq2 > 0``;
- a negative scale is negated with the sign bits (IQ3_S never has one: its
  ``xval`` and weights are not negative; an IQ3_XXS sub-block can, where a
  negated ``xval`` weighs most).

Each block stores f16 ``d = max_scale / 31`` times a fudge factor (``1.0125``
IQ3_XXS, ``1.033`` IQ3_S; ``max_scale`` the largest scale) and per sub-block
the 4-bit ``nearest_int(0.5 (scale / d - 1))`` clamped to 0 ... 15.  IQ3_XXS
(98 bytes): ``d``, the 64 grid indices, then per sub-block a little-endian
uint32 of its four 7-bit sign groups and the nibble in bits 28 ... 31; a block
whose ``max_scale`` is 0 is all zero.  IQ3_S (110 bytes): ``d`` (0 and no
nibbles where ``max_scale`` is 0), the indices' low bytes in ``qs``, bit 8 in
bit ``k`` of ``qh[ib]`` for group ``k`` of sub-block ``ib``, a byte of sign
bits per 8 values, the nibbles two to a byte (the first low).  IQ3_S's quirk
is kept: a sub-block whose largest magnitude is 0 skips ahead before its
pointers into ``qs`` and ``signs`` move, so the following sub-blocks' groups and
signs are written 8 and 4 bytes earlier than their place (``qh`` is indexed by
the sub-block's own number) and the tail stays 0.

ggml aborts (``GGML_ASSERT``) where a neighbour search finds no distance below
``FLT_MAX`` or the last scale is a NaN, which needs weighted squares that
overflow float32 (without an importance matrix, magnitudes from about 2**42
on, never below 2**38): the encoders raise
:class:`~kiln_np._quants.encoder.GGMLAbortError` for the first such block,
exactly where ggml aborts.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from .encoder import Encoder, GGMLAbortError, WeightedEncoder
from .grids import IQ3S_GRID, IQ3XXS_GRID
from .rounding import f16_bits, le16, nearest_int

__all__ = ["ENCODERS", "WEIGHTED", "neighbours", "weights"]

_SUB = 32  # the sub-block (IQ3S_BLOCK_SIZE; IQ3_XXS's too)
_KMAXQ = 8
_FLT_MAX = np.float32(np.finfo(np.float32).max)
_XXS_VALUES = np.array([4, 12, 20, 28, 36, 44, 52, 62], np.uint8)  # iq3xxs_grid's, by level


class _Kind(NamedTuple):
    """Where ``quantize_row_iq3_xxs_impl`` and ``quantize_row_iq3_s_impl`` differ."""

    size: int  # grid points: iq3xs_init_impl(size)
    trials: range  # the scales tried: is in trials
    least: np.float32  # the least largest magnitude of a sub-block searched
    start_on_grid: bool  # is_on_grid before the first trial
    remap_all: bool  # the second pass maps every group, or only those off the grid
    even_signs: bool  # 7 sign bits per 8 values, their count made even


_XXS = _Kind(256, range(-15, 16), np.float32(1e-8), True, False, True)
_S = _Kind(512, range(-9, 10), np.float32(2.0**-149), False, True, False)  # `if (!max)`


class _Tables(NamedTuple):
    """``iq3xs_init_impl``'s tables, in the form the vectorised search reads."""

    grid_index: np.ndarray  # (4096,) int32: the quadruple's grid index, or -1
    levels: np.ndarray  # (size, 4) int8: each grid point's levels l
    start: np.ndarray  # (4096,) int64: where a quadruple's neighbours start in `flat`
    length: np.ndarray  # (4096,) int64: how many it has (0 on the grid)
    flat: np.ndarray  # (total,) int32: every neighbour list, one after the other


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@cache
def _tables(size: int) -> _Tables:
    """Built once per grid, on first use, as ``iq3xs_init_impl(size)`` builds them."""
    levels = (
        np.searchsorted(_XXS_VALUES, IQ3XXS_GRID.view(np.uint8).reshape(256, 4))
        if size == 256
        else (IQ3S_GRID.view(np.uint8).reshape(512, 4) - 1) // 2
    ).astype(np.int8)
    nwant = 2 if size == 256 else 3  # distinct distances listed
    shifts = np.array([0, 3, 6, 9], np.int32)
    grid_index = np.full(4096, -1, np.int32)
    grid_index[(levels.astype(np.int32) << shifts).sum(axis=1)] = np.arange(size, dtype=np.int32)
    every = (np.arange(4096, dtype=np.int32)[:, None] >> shifts) & 7  # (4096, 4) levels
    # ggml's distances between odd positions 2 l + 1: (2 dl)**2 summed, as ints.
    d2 = (4 * (every[:, None, :] - levels[None, :, :].astype(np.int32)) ** 2).sum(axis=2)
    # qsort's order, (distance, index): a stable sort of the distances (at most 784)
    order = np.argsort(d2.astype(np.int16), axis=1, kind="stable")
    ranked = np.take_along_axis(d2, order, axis=1)
    # The nwant-th distinct distance of each row: the lists stop past it.
    new = np.ones_like(ranked, dtype=bool)
    new[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    last = np.argmax(np.cumsum(new, axis=1) == nwant, axis=1)[:, None]
    keep = ranked <= np.take_along_axis(ranked, last, 1)
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


def neighbours(u: int, grid: int = 512) -> list[int]:
    """The neighbour list of level quadruple ``u`` (``l0 | l1 << 3 | l2 << 6 | l3 << 9``):
    the grid indices ggml's ``iq3xs_init_impl(grid)`` lists for it (``grid`` 512 for
    IQ3_S, 256 for IQ3_XXS), in its order (empty for a quadruple on the grid).

    >>> neighbours(0), neighbours(7 | 7 << 3 | 7 << 6 | 7 << 9)
    ([], [437, 338, 431, 441])
    >>> neighbours(7 | 7 << 3 | 7 << 6 | 7 << 9, grid=256)
    [168, 190, 229, 163, 170, 171, 228, 231, 232]
    """
    t = _tables(grid)
    return [int(j) for j in t.flat[t.start[u] : t.start[u] + t.length[u]]]


def weights(blocks: np.ndarray, qw: np.ndarray | None = None) -> np.ndarray:
    """Each element's weight in the searches, for blocks ``(n, 256)``: with no importance
    matrix, ggml's ``x * x``; with one (``qw``, the blocks' importance weights, the
    same shape), ``qw * sqrt(sigma2 + x * x)``, ``sigma2 = 2 sumx2 / 256`` and
    ``sumx2`` the block's ``x * x`` summed in element order.

    >>> weights(np.array([[-3.0, 0.5]], np.float32)).tolist()
    [[9.0, 0.25]]
    >>> x = np.zeros((1, 256), np.float32)
    >>> x[0, :72] = 4.0  # sumx2 1152, sigma2 9
    >>> weights(x, np.full((1, 256), 0.5, np.float32))[0, [0, 255]].tolist()
    [2.5, 1.5]
    """
    square: np.ndarray = blocks * blocks
    if qw is None:
        return square
    sumx2 = np.cumsum(square, axis=1, dtype=np.float32)[:, -1]  # sumx2 += x * x, from 0
    sigma2 = np.float32(2) * sumx2 / np.float32(256)
    w: np.ndarray = qw * np.sqrt(sigma2[:, None] + square)
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
    t: _Tables,
    levels: np.ndarray,
    xval: np.ndarray,
    waux: np.ndarray,
    scale: np.ndarray,
    searched: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each group's grid index and whether its levels were on the grid, ``(s, 8)``
    each, a group off the grid taking ``iq3_find_best_neighbour``'s at ``scale``
    (one per row); and which rows had a search that found no distance below
    ``FLT_MAX``, where ggml asserts (then the list's first entry stands in).  Only
    the groups ``searched`` marks (all by default) are looked at: the others' index
    means nothing."""
    u = _quadruples(levels)
    index = t.grid_index[u]
    on = index >= 0
    none = np.zeros(len(levels), bool)
    rows, groups = np.nonzero(~on if searched is None else ~on & searched)
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


def _grid_levels(t: _Tables, index: np.ndarray) -> np.ndarray:
    """Grid indices ``(s, 8)`` -> their levels ``(s, 32)``."""
    levels: np.ndarray = t.levels[index].reshape(len(index), _SUB)
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
    kind: _Kind, w: np.ndarray, xval: np.ndarray, big: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scale and grid indices ggml's search gives each sub-block (row) with a
    largest ``xval`` ``big`` it searches: float32 ``(s,)``, ``(s, 8)``; and which
    sub-blocks ggml aborts on (a search with no distance below ``FLT_MAX``, or a
    final scale that is a NaN)."""
    t = _tables(kind.size)
    waux = np.sqrt(w)
    s = len(w)
    aborted = np.zeros(s, bool)
    best = np.zeros(s, np.float32)
    scale = big / np.float32(2 * _KMAXQ - 1)
    levels = np.zeros((s, _SUB), np.int8)
    on_grid = np.full((s, 8), kind.start_on_grid)
    for is_ in kind.trials:
        id_ = (np.float32(2 * _KMAXQ - 1) + np.float32(is_) * np.float32(0.2)) / big
        this_scale = np.float32(1) / id_
        index, on, none = _onto_grid(t, _map_levels(xval, id_), xval, waux, this_scale)
        aborted |= none
        trial = _grid_levels(t, index)
        sumqx, sumq2 = _sums(w, xval, trial)
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        scale = np.where(better, sumqx / np.where(better, sumq2, 1), scale)
        best = np.where(better, scale * sumqx, best)
        levels = np.where(better[:, None], trial, levels)
        on_grid = np.where(better[:, None], on, on_grid)
    again = np.flatnonzero(~on_grid.all(axis=1) & (scale > 0))
    if again.size:
        xa, sa = xval[again], scale[again]
        searched = None if kind.remap_all else ~on_grid[again]
        index, _, none = _onto_grid(
            t, _map_levels(xa, np.float32(1) / sa), xa, waux[again], sa, searched
        )
        aborted[again] |= none
        mapped = _grid_levels(t, index)
        if searched is not None:  # the groups on the grid keep their levels
            mapped = np.where(np.repeat(searched, 4, axis=1), mapped, levels[again])
        levels[again] = mapped
        sumqx, sumq2 = _sums(w[again], xa, mapped)
        scale[again] = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, 1), sa)
    aborted |= np.isnan(scale)
    return scale, t.grid_index[_quadruples(levels)], aborted


def _magnitudes(kind: _Kind, sub: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``xval`` of sub-blocks ``(s, 32)`` and their sign bytes ``(s, 4)`` (uint8: a bit
    per negative value, the first low; IQ3_XXS: 7 bits, their count made even by
    flipping the value of least ``w x x`` of an odd group, whose ``xval`` is negated)."""
    negative = ~(sub >= 0)  # -0.0 >= 0 in C
    xval = np.where(negative, -sub, sub)
    if kind.even_signs:
        s = len(sub)
        odd = negative.reshape(s, 4, 8).sum(axis=2) % 2 == 1
        ax = (w * sub * sub).reshape(s, 4, 8)
        nan = np.isnan(ax)  # C's `ax < min`: a NaN never wins, nor loses when first
        least = np.where(nan[..., 0], 0, np.argmin(np.where(nan, np.float32(np.inf), ax), axis=2))
        flip = (odd[..., None] & (np.arange(8) == least[..., None])).reshape(s, _SUB)
        xval = np.where(flip, -xval, xval)
        negative = negative ^ flip
    signs = np.packbits(negative.reshape(len(sub), 4, 8), axis=2, bitorder="little")[..., 0]
    return xval, signs & _sign_mask(kind)


def _sign_mask(kind: _Kind) -> np.uint8:
    return np.uint8(0x7F if kind.even_signs else 0xFF)


class _Search(NamedTuple):
    """What the search gives each sub-block of ``n`` blocks (row ``8 b + ib``)."""

    scale: np.ndarray  # (8n,) float32, not negative: 0 where not searched
    grid_index: np.ndarray  # (8n, 8) int32: each group's grid index (0 where not searched)
    signs: np.ndarray  # (8n, 4) uint8: the sign bytes, flipped with a negative scale
    live: np.ndarray  # (n, 8) bool: searched (its largest magnitude not too small)


def _search(kind: _Kind, x: np.ndarray, qw: np.ndarray | None) -> _Search:
    """The search of every sub-block of the blocks ``x`` ``(n, 256)`` (weights ``qw``)."""
    n = len(x)
    sub = x.reshape(n * 8, _SUB)
    w = weights(x, qw).reshape(n * 8, _SUB)
    xval, signs = _magnitudes(kind, sub, w)
    big = xval.max(axis=1)
    live = big >= kind.least
    kept = np.flatnonzero(live)
    scale = np.zeros(n * 8, np.float32)
    index = np.zeros((n * 8, 8), np.int32)
    if kept.size:
        scale[kept], index[kept], aborted = _sub_blocks(kind, w[kept], xval[kept], big[kept])
        if aborted.any():
            raise GGMLAbortError(int(kept[np.argmax(aborted)]) // 8)
    flip = scale < 0
    scale = np.where(flip, -scale, scale)
    signs = np.where(flip[:, None], ~signs & _sign_mask(kind), signs)
    return _Search(scale, index, signs, live.reshape(n, 8))


def _nibbles(scales: np.ndarray, d: np.ndarray, written: np.ndarray) -> np.ndarray:
    """Each sub-block's 4-bit scale ``nearest_int(0.5 (scale / d - 1))`` in 0 ... 15
    (``scales`` ``(n, 8)``; 0 in the blocks not ``written``), as uint32."""
    id_ = np.float32(1) / np.where(written, d, 1)
    near = nearest_int(np.float32(0.5) * (id_[:, None] * scales - np.float32(1)))
    result: np.ndarray = np.where(written[:, None], np.clip(near, 0, 15), 0).astype(np.uint32)
    return result


def _iq3_xxs_bytes(found: _Search) -> np.ndarray:
    """IQ3_XXS (98 bytes): f16 ``d``, 64 grid indices, 8 uint32 of signs and scale."""
    n = len(found.live)
    scales = found.scale.reshape(n, 8)
    max_scale = scales.max(axis=1)
    written = max_scale != 0  # ggml's `if (!max_scale)`: the whole block stays 0
    d = max_scale / np.float32(31)
    out = np.zeros((n, 98), np.uint8)
    out[:, :2] = le16(f16_bits(np.where(written, d * np.float32(1.0125), 0)))
    live = found.live.reshape(n * 8)
    out[:, 2:66] = np.where(live[:, None], found.grid_index, 0).reshape(n, 64).astype(np.uint8)
    s = np.where(live[:, None], found.signs, 0).astype(np.uint32)
    words = (s[:, 0] | (s[:, 1] << 7) | (s[:, 2] << 14) | (s[:, 3] << 21)).reshape(n, 8)
    words |= _nibbles(scales, d, written) << 28
    out[:, 66:98] = words.astype("<u4").view(np.uint8).reshape(n, 32)
    out[~written] = 0
    return out


def _iq3_s_bytes(found: _Search) -> np.ndarray:
    """IQ3_S (110 bytes): f16 ``d``, ``qs`` (64), ``qh`` (8), ``signs`` (32), ``scales`` (4)."""
    n = len(found.live)
    out = np.zeros((n, 110), np.uint8)
    live = found.live
    slot = np.cumsum(live, axis=1) - live  # where ggml's moving pointers write
    rows, subs = np.nonzero(live)
    at = rows * 8 + subs
    qs = out[:, 2:66].reshape(n, 8, 8)
    qs[rows, slot[rows, subs]] = (found.grid_index[at] & 255).astype(np.uint8)
    high = ((found.grid_index >> 8) << np.arange(8)).sum(axis=1)
    out[:, 66:74] = np.where(live, high.reshape(n, 8), 0).astype(np.uint8)
    sg = out[:, 74:106].reshape(n, 8, 4)
    sg[rows, slot[rows, subs]] = found.signs[at]

    scales = found.scale.reshape(n, 8)
    max_scale = scales.max(axis=1)
    written = max_scale != 0
    d = max_scale / np.float32(31)
    out[:, :2] = le16(f16_bits(np.where(written, d * np.float32(1.033), 0)))
    nibbles = _nibbles(scales, d, written).astype(np.uint8)
    out[:, 106:110] = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return out


def _iq3_xxs(x: np.ndarray) -> np.ndarray:
    """IQ3_XXS with no importance matrix.

    >>> _iq3_xxs(np.linspace(-1, 1, 256, dtype=np.float32)[None])[0, :8].tolist()
    [14, 26, 168, 168, 168, 168, 187, 187]
    """
    return _iq3_xxs_bytes(_search(_XXS, x, None))


def _iq3_xxs_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """IQ3_XXS with the importance weights ``qw``.

    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
    >>> _iq3_xxs_weighted(x, np.ones_like(x))[0, :8].tolist()
    [10, 26, 168, 168, 168, 168, 187, 187]
    """
    return _iq3_xxs_bytes(_search(_XXS, x, qw))


def _iq3_s(x: np.ndarray) -> np.ndarray:
    """IQ3_S with no importance matrix.

    >>> _iq3_s(np.linspace(-1, 1, 256, dtype=np.float32)[None])[0, :8].tolist()
    [224, 25, 181, 181, 181, 181, 181, 181]
    """
    return _iq3_s_bytes(_search(_S, x, None))


def _iq3_s_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """IQ3_S with the importance weights ``qw``.

    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
    >>> _iq3_s_weighted(x, np.ones_like(x))[0, :8].tolist()
    [210, 25, 181, 181, 181, 181, 181, 181]
    """
    return _iq3_s_bytes(_search(_S, x, qw))


ENCODERS: Mapping[str, Encoder] = MappingProxyType({"IQ3_XXS": _iq3_xxs, "IQ3_S": _iq3_s})
"""This family's numpy encoders, by GGML name."""

WEIGHTED: Mapping[str, WeightedEncoder] = MappingProxyType(
    {"IQ3_XXS": _iq3_xxs_weighted, "IQ3_S": _iq3_s_weighted}
)
"""This family's numpy encoders with an importance matrix, by GGML name."""
