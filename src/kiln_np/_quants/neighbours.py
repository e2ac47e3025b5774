"""The tables ggml's ``iq2xs_init_impl`` builds for the 2-bit and 1-bit grid types,
and the neighbour search every one of their quantizers runs over them, in numpy.

IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M store each group of 8 values as the index
of a point of a fixed grid (256, 512, 1024 and 2048 points; IQ1_S and IQ1_M share
one).  A point is 8 levels ``l`` (0 ... 3 for the IQ2 grids, 0 ... 2 for IQ1's),
and a group's levels pack into ``u = sum(l[i] << 2 i)`` (``u < 43692``: no level
above 2 is ever packed).  ``iq2xs_init_impl`` makes, per grid:

- the grid's levels (ggml's ``kgrid_2bit_*`` and ``kgrid_1bit_2048``, which hold
  each point as its packed ``u``; here read back from the decoding grids of
  :mod:`kiln_np._quants.grids`, whose bytes are the same levels: ``8, 25, 43``
  for IQ2's ``0, 1, 2``, ``-1, 0, 1`` for IQ1's);
- ``kmap_q2xs``: every ``u`` to its grid index, or off the grid;
- for every ``u`` off the grid, its neighbours: the grid points at the
  ``nwant`` smallest squared distances ``sum((2 l - 2 l')**2)`` (``nwant`` 2 for
  IQ2_XXS and IQ2_XS, 1 for IQ2_S, 3 for IQ1), in the order of ggml's ``qsort``
  by (distance, index), a total order, so the lists are the same on every C
  library.

:func:`table` builds a grid's tables once, on first use (some 0.2 s for IQ2_XXS
to 1.5 s for IQ1's grid), and keeps them.  :func:`first_least` is the search
ggml's ``iq2_find_best_neighbour`` and ``iq1_find_best_neighbour2`` make over
those lists: the first candidate of least weighted distance below ``FLT_MAX``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from . import grids

__all__ = ["FLT_MAX", "KMAP_SIZE", "GridTable", "first_least", "table"]

KMAP_SIZE = 43692
"""ggml's ``kmap_size``: ``u`` of every level tuple packed (levels at most 2)."""

FLT_MAX = np.float32(np.finfo(np.float32).max)


class GridTable(NamedTuple):
    """One grid's tables, as ``iq2xs_init_impl`` makes them (read-only arrays)."""

    levels: np.ndarray
    """``(points, 8)`` int8: each grid point's levels ``l``."""
    values: np.ndarray
    """``(points, 8)`` float32: the same as ggml's grid bytes ``2 l + 1``."""
    kmap: np.ndarray
    """``(KMAP_SIZE,)`` int32: the grid index of ``u``, or -1 off the grid."""
    start: np.ndarray
    """``(KMAP_SIZE,)`` int64: where ``u``'s neighbour list starts in ``neighbours``."""
    lengths: np.ndarray
    """``(KMAP_SIZE,)`` int64: its length (0 on the grid)."""
    neighbours: np.ndarray
    """The lists, one after another: grid indices (int32)."""


_GRIDS = {  # ggml's gindex: (decoding grid, its byte of level 0, 1, 2, 3; nwant)
    "IQ2_XXS": (grids.IQ2XXS_GRID, (8, 25, 43, 62), 2),
    "IQ2_XS": (grids.IQ2XS_GRID, (8, 25, 43, 62), 2),
    "IQ2_S": (grids.IQ2S_GRID, (8, 25, 43, 62), 1),
    "IQ1": (grids.IQ1S_GRID, (255, 0, 1), 3),  # int8 -1, 0, 1 as bytes
}

_SHIFTS = 2 * np.arange(8)


def _levels(grid: str) -> np.ndarray:
    decode, byte_of_level, _ = _GRIDS[grid]
    raw = decode.view(np.uint8).reshape(len(decode), 8)
    lookup = np.full(256, -1, np.int8)
    lookup[list(byte_of_level)] = np.arange(len(byte_of_level))
    levels = lookup[raw]
    if (levels < 0).any():
        raise AssertionError(f"{grid}: a grid byte that is no level")
    return levels


@functools.cache
def table(grid: str) -> GridTable:
    """The tables of ``grid`` (``"IQ2_XXS"``, ``"IQ2_XS"``, ``"IQ2_S"`` or ``"IQ1"``,
    for IQ1_S and IQ1_M), built on first use.

    >>> t = table("IQ2_XXS")
    >>> t.kmap[[0, 2, 1]].tolist(), t.lengths[1].item(), t.neighbours[t.start[1]:][:3].tolist()
    ([0, 1, -1], 34, [0, 1, 2])
    """
    levels = _levels(grid)
    nwant = _GRIDS[grid][2]
    packed = (levels.astype(np.int64) << _SHIFTS).sum(axis=1)
    kmap = np.full(KMAP_SIZE, -1, np.int32)
    kmap[packed] = np.arange(len(levels), dtype=np.int32)
    off = np.flatnonzero(kmap < 0)
    # Squared distance of u to point j, 4 (l - l')**2 summed: the low four levels'
    # part plus the high four's, each a lookup in a table of bytes x bytes.
    nibble = (np.arange(256)[:, None] >> _SHIFTS[:4]) & 3
    half = (4 * (nibble[:, None, :] - nibble[None, :, :]) ** 2).sum(axis=2).astype(np.int16)
    low, high = packed & 255, packed >> 8
    lengths = np.zeros(KMAP_SIZE, np.int64)
    rows, points, distances = [], [], []
    for lo in range(0, len(off), 4096):
        u = off[lo : lo + 4096]
        d2 = half[u & 255][:, low] + half[u >> 8][:, high]  # (u, points)
        # The nwant smallest distinct distances (at most 288 = 8 * 36): the last
        # one is the list's bound.
        seen = np.zeros((len(u), 289), bool)
        seen[np.arange(len(u))[:, None], d2] = True
        bound = np.argmax(np.cumsum(seen, axis=1) >= nwant, axis=1)
        r, j = np.nonzero(d2 <= bound[:, None])
        rows.append(u[r])
        points.append(j)
        distances.append(d2[r, j])
        lengths[u] = np.bincount(r, minlength=len(u))
    u_all = np.concatenate(rows)
    order = np.lexsort((np.concatenate(points), np.concatenate(distances), u_all))
    neighbours = np.concatenate(points)[order].astype(np.int32)
    start = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    values = (2 * levels + 1).astype(np.float32)
    for array in (levels, values, kmap, start, lengths, neighbours):
        array.setflags(write=False)
    return GridTable(levels, values, kmap, start, lengths, neighbours)


def first_least(t: GridTable, u: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """For each query ``u`` (off the grid), its neighbour of least distance: the first
    of equals below ``FLT_MAX``, as ggml's searches pick it (``best = FLT_MAX; if (d2 <
    best) ...``).

    A candidate's distance is ggml's ``d2 = 0; d2 += w[i] * diff * diff`` over its 8
    values, each term a function of the value's place ``i`` and the candidate's level
    there: ``terms[query, i, level]`` (float32, computed by the caller as ggml does,
    ``diff = scale * q - x``), summed here in ggml's order.  Returns the grid index per
    query, int32: -1 where none is below ``FLT_MAX`` (ggml's ``GGML_ASSERT(grid_index
    >= 0)`` fails; a NaN is never below).

    >>> t = table("IQ2_S")
    >>> u = np.flatnonzero(t.kmap < 0)[:1]
    >>> listed = t.neighbours[t.start[u[0]] :][: t.lengths[u[0]]]
    >>> terms = np.zeros((1, 8, 4), np.float32)
    >>> terms[0, :, 3] = 1  # level 3 costs 1 wherever it is
    >>> int(first_least(t, u, terms)[0]) in listed
    True
    """
    if not len(u):
        return np.zeros(0, np.int32)
    count = t.lengths[u]
    total = int(count.sum())
    query = np.repeat(np.arange(len(u)), count)
    first = np.cumsum(count) - count  # where each query's candidates start here
    candidate = t.neighbours[t.start[u][query] + (np.arange(total) - first[query])]
    levels = t.levels[candidate]
    width = terms.shape[2]
    flat = terms.reshape(-1)
    base = query * (8 * width)
    d2 = np.zeros(total, np.float32)
    for i in range(8):
        d2 += flat[base + (i * width + levels[:, i])]
    below = d2 < FLT_MAX  # False for a NaN
    least = np.minimum.reduceat(np.where(below, d2, np.inf), first)
    place = np.where(below & (d2 == least[query]), np.arange(total), total)
    best = np.minimum.reduceat(place, first)
    found: np.ndarray = np.where(best < total, candidate[np.minimum(best, total - 1)], -1)
    return found.astype(np.int32)
