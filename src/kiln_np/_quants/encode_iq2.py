"""Encoders of the 2-bit grid types IQ2_XXS, IQ2_XS and IQ2_S: what ggml's
``ggml_quantize_chunk`` writes for them, in numpy.

They are ggml's ``quantize_row_iq2_xxs_impl``, ``quantize_row_iq2_xs_impl`` and
``quantize_row_iq2_s_impl`` (ggml-quants.c) over the tables of
:mod:`kiln_np._quants.neighbours`.  A block of 256 has sub-blocks of 32 (IQ2_XXS)
or 16 values, each cut into groups of 8 stored as a grid index and signs.  With
``sigma2`` the block's mean square (``sum x**2 / 256``; twice that for IQ2_S),
each value's weight is ``qw * sqrt(sigma2 + x**2)`` (``qw`` its importance-matrix
column; IQ2_S without one: ``sigma2 / 4 + x**2``), and per sub-block:

- the signs: ``xval = |x|``, the signs kept per group; IQ2_XXS and IQ2_XS store 7
  sign bits, so a group with an odd number of negatives flips its value of least
  ``w * x**2`` (the first of equals) back to positive; IQ2_S stores all 8;
- a sub-block whose largest ``xval`` is below ``GROUP_MAX_EPS`` (1e-15, IQ2_S
  1e-8) gets scale 0;
- trial scales: IQ2_XS and IQ2_S try ``id = (5 + 0.1 is) / max`` for ``is`` in
  ``-9 ... 9``; IQ2_XXS first runs ggml's ``make_qp_quants`` (levels 0 ... 4,
  eight scale tweaks, then up to five rounds of one-level moves) and tries ``id =
  (5 + 0.1 is) / (3 scale)`` for ``is`` in ``-6 ... 6``.  Each trial maps the
  values to levels ``clip(nearest_int((id xval - 1) / 2), 0, 2)``, and a group of 8
  whose levels are no grid point takes its neighbour of least ``sum(sqrt(w) (q /
  id - xval)**2)`` (``q = 2 l + 1``; ``iq2_find_best_neighbour``); the trial's
  least-squares scale ``sumqx / sumq2`` is kept where it explains more
  (``sumqx**2 > best * sumq2``, in trial order);
- the kept scale then maps the groups again (IQ2_XXS all of them, the others
  those the kept trial had off the grid), with one more least-squares fit.

The block stores ``d = max_scale / 31`` as f16 (IQ2_S: ``d * 0.9875``) and per
sub-block the 4-bit ``clip(nearest_int((scale / d - 1) / 2), 0, 15)``.  Every sum
is ggml's: sequential, in element order (``np.cumsum``, never the pairwise
``np.sum``).  The trials run at once, every trial of every sub-block of every
block, and the neighbour searches over flat lists of candidates.

Where ggml aborts, the encoder raises :class:`GGMLAbortError` for the first such
block: a neighbour search that finds no distance below ``FLT_MAX``
(``GGML_ASSERT(grid_index >= 0)``: values or weights so large that every
candidate's distance overflows), or a scale that ends as a NaN
(``GGML_ASSERT(scale >= 0)``; in IQ2_XXS, ``make_qp_quants``'s levels reaching the
grid check, ``GGML_ABORT``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .encoder import Encoder, GGMLAbortError, WeightedEncoder
from .neighbours import KMAP_SIZE, GridTable, first_least, table
from .rounding import f16_bits, le16, nearest_int

__all__ = ["ENCODERS", "WEIGHTED", "block_weights", "total"]

_F0 = np.float32(0)
_F1 = np.float32(1)
_HALF = np.float32(0.5)
_SHIFTS = 2 * np.arange(8)


def total(terms: np.ndarray) -> np.ndarray:
    """``s = 0; s += terms[0]; s += terms[1]; ...`` along the last axis, float32."""
    result: np.ndarray = np.cumsum(terms, axis=-1, dtype=np.float32)[..., -1] + _F0
    return result


def block_weights(x: np.ndarray, qw: np.ndarray | None, twice: bool) -> np.ndarray:
    """Each value's weight in its block's searches: ``qw * sqrtf(sigma2 + x * x)`` with
    ``sigma2 = sumx2 / 256`` (``2 * sumx2 / 256`` where ``twice``), or, with no
    importance matrix (IQ2_S), ``0.25f * sigma2 + x * x``.  Blocks ``(n, 256)``.

    >>> x = np.full((1, 256), 2.0, np.float32)
    >>> block_weights(x, np.ones_like(x), False)[0, 0].item()
    2.8284270763397217
    """
    x2 = x * x
    sumx2 = total(x2)
    sigma2 = ((np.float32(2) * sumx2) if twice else sumx2) / np.float32(256)
    if qw is None:
        weights: np.ndarray = np.float32(0.25) * sigma2[:, None] + x2
        return weights
    weighted: np.ndarray = qw * np.sqrt(sigma2[:, None] + x2)
    return weighted


def _packed(levels: np.ndarray) -> np.ndarray:
    """Levels ``(..., 8)`` -> ggml's ``u = sum(l[i] << 2 i)`` (as ``uint16_t``)."""
    u: np.ndarray = ((levels.astype(np.int64) << _SHIFTS).sum(axis=-1)) & 0xFFFF
    return u


def _grid_index(t: GridTable, levels: np.ndarray) -> np.ndarray:
    """``kmap_q2xs[u]`` of levels ``(..., 8)``; -1 off the grid (and past the map)."""
    u = _packed(levels)
    index: np.ndarray = np.where(u < KMAP_SIZE, t.kmap[np.minimum(u, KMAP_SIZE - 1)], -1)
    return index


def _levels(id_: np.ndarray, xval: np.ndarray) -> np.ndarray:
    """``MAX(0, MIN(2, nearest_int(0.5f * (id * xval - 1))))`` (broadcast)."""
    levels: np.ndarray = np.clip(nearest_int(_HALF * (id_ * xval - _F1)), 0, 2)
    return levels


def _snap(
    t: GridTable,
    levels: np.ndarray,
    scale: np.ndarray,
    xval: np.ndarray,
    waux: np.ndarray,
    which: np.ndarray,
) -> np.ndarray:
    """Move each group of 8 in ``which`` (a mask over the leading axes of ``levels``,
    ``(..., groups, 8)``) that is off the grid to its best neighbour at ``scale``
    (one per group's sub-block, over its leading axes), as
    ``iq2_find_best_neighbour`` does (in place); returns where none was found."""
    at = np.nonzero(which & (_grid_index(t, levels) < 0))
    failed = np.zeros(which.shape, bool)
    if not at[0].size:
        return failed
    u = _packed(levels[at])
    s = scale[at[:-1]]  # the group's sub-block (and trial)
    xv, wa = xval[at[-2:]], waux[at[-2:]]  # the group's values: (queries, 8)

    # ggml's terms w * diff * diff, diff = scale * q - xval, for every level q = 2 l + 1
    q = np.arange(1, 8, 2, dtype=np.float32)
    diff = s[:, None, None] * q - xv[..., None]
    terms = wa[..., None] * diff * diff
    found = first_least(t, u, terms)
    levels[at] = t.levels[np.maximum(found, 0)]
    failed[at] = found < 0
    return failed


def _signs(x: np.ndarray, w: np.ndarray, parity: bool) -> tuple[np.ndarray, np.ndarray]:
    """``xval`` and the sign bits of groups of 8 (``(m, groups, 8)``): ``x`` where
    ``x >= 0``, else ``-x`` with its bit set; where ``parity``, a group with an odd
    count of bits flips back its first value of least ``w * x * x`` (7 bits kept)."""
    negative = ~(x >= 0)
    xval = np.where(negative, -x, x)
    bits = (negative.astype(np.int64) << np.arange(8)).sum(axis=-1)
    if not parity:
        return xval, bits
    odd = negative.sum(axis=-1) % 2 == 1
    wx = w * x * x
    least, imin = wx[..., 0], np.zeros(bits.shape, np.int64)
    for i in range(1, 8):
        lower = wx[..., i] < least
        least = np.where(lower, wx[..., i], least)
        imin = np.where(lower, i, imin)
    flip = odd[..., None] & (np.arange(8) == imin[..., None])
    xval = np.where(flip, -xval, xval)
    bits = np.where(odd, bits ^ (1 << imin), bits) & 127
    return xval, bits


def _fit(w: np.ndarray, xval: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sumqx``, ``sumq2`` of ``q = 2 l + 1`` over the last two axes, in order."""
    q = (2 * levels + 1).astype(np.float32)
    shape = (*q.shape[:-2], q.shape[-2] * q.shape[-1])
    return total((w * xval * q).reshape(shape)), total((w * q * q).reshape(shape))


def _make_qp(xval: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``make_qp_quants(32, 4, xval, L, w)`` per row (element-major ``(32,
    m)``): the scale and levels (as the ``uint8_t`` ggml stores)."""
    nmax = np.float32(4)
    big = xval.max(axis=0)  # no row here is below GROUP_MAX_EPS
    iscale = nmax / big
    levels = nearest_int(iscale * xval) & 0xFF
    scale = _F1 / iscale
    diff = xval - scale * levels.astype(np.float32)
    best = total((w * diff * diff).T)
    for step in (-4, -3, -2, -1, 1, 2, 3, 4):
        iscale_is = (np.float32(0.1) * np.float32(step) + nmax) / big
        trial = np.minimum(4, nearest_int(iscale_is * xval)).astype(np.float32)
        diff = xval - (_F1 / iscale_is) * trial
        mse = total((w * diff * diff).T)
        better = mse < best
        best = np.where(better, mse, best)
        iscale = np.where(better, iscale_is, iscale)
    levels = np.minimum(4, nearest_int(iscale * xval))
    lf = levels.astype(np.float32)
    sumlx, suml2 = total((w * xval * lf).T), total((w * lf * lf).T)
    levels = levels & 0xFF
    for _ in range(5):  # a round that changes nothing leaves the next nothing to change
        for i in range(32):
            wi, xi, li = w[i], xval[i], levels[i].astype(np.float32)
            slx0 = sumlx - wi * xi * li
            sl20 = suml2 - wi * li * li
            new = np.minimum(4, nearest_int(xi * sl20 / slx0))
            nf = new.astype(np.float32)
            slx = slx0 + wi * xi * nf
            sl2 = sl20 + wi * nf * nf
            take = (slx0 > 0) & (sl20 > 0) & (new != levels[i])
            take &= slx * slx * suml2 > sumlx * sumlx * sl2
            levels[i] = np.where(take, new & 0xFF, levels[i])
            sumlx = np.where(take, slx, sumlx)
            suml2 = np.where(take, sl2, suml2)
    return np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, _F1), _F0), levels


def _keep_best(
    sumqx: np.ndarray, sumq2: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The trials in order (``(trials, m)``): ``if (sumq2 > 0 && sumqx*sumqx >
    best*sumq2) { scale = sumqx/sumq2; best = scale*sumqx; }`` from ``best = 0``;
    the scale and the trial kept (-1: none)."""
    best = np.zeros_like(scale)
    kept = np.full(scale.shape, -1)
    for trial in range(len(sumqx)):
        qx, q2 = sumqx[trial], sumq2[trial]
        take = (q2 > 0) & (qx * qx > best * q2)
        scale = np.where(take, qx / np.where(take, q2, _F1), scale)
        best = np.where(take, scale * qx, best)
        kept = np.where(take, trial, kept)
    return scale, kept


def _search(
    t: GridTable,
    xval: np.ndarray,
    w: np.ndarray,
    eff_max: np.ndarray,
    scale: np.ndarray,
    levels: np.ndarray,
    steps: range,
    all_groups: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trials and the final mapping of sub-blocks ``(m, groups, 8)`` from the
    scale and levels given (IQ2_XXS: ``make_qp_quants``'s; else ``max / 5`` and 0):
    the scale, levels and which sub-blocks made ggml abort."""
    waux = np.sqrt(w)
    id_ = np.stack([(np.float32(5) + np.float32(s) * np.float32(0.1)) / eff_max for s in steps])
    trial = _levels(id_[..., None, None], xval[None])  # (trials, m, groups, 8)
    on_grid = _grid_index(t, trial) >= 0
    everywhere = np.ones(trial.shape[:-1], bool)
    failed = _snap(t, trial, _F1 / id_, xval, waux, everywhere).any(axis=(0, 2))
    sumqx, sumq2 = _fit(w[None], xval[None], trial)
    scale, kept = _keep_best(sumqx, sumq2, scale)
    m = np.arange(len(xval))
    levels = np.where((kept >= 0)[:, None, None], trial[np.maximum(kept, 0), m], levels)
    off = ~on_grid[np.maximum(kept, 0), m] & (kept >= 0)[:, None]
    redo = (np.ones_like(off) if all_groups else off) & (scale > 0)[:, None]
    again = redo.any(axis=1)
    if again.any():
        id_ = _F1 / np.where(again, scale, _F1)
        levels = np.where(redo[..., None], _levels(id_[:, None, None], xval), levels)
        failed |= _snap(t, levels, scale, xval, waux, redo).any(axis=1)
        sumqx, sumq2 = _fit(w, xval, levels)
        refit = again & (sumq2 > 0)
        scale = np.where(refit, sumqx / np.where(refit, sumq2, _F1), scale)
    # ggml's last check of the levels (GGML_ABORT off the grid) and GGML_ASSERT(scale >= 0)
    failed |= (_grid_index(t, levels) < 0).any(axis=1) | np.isnan(scale)
    return scale, levels, failed


def _sub_blocks(
    x: np.ndarray, w: np.ndarray, size: int, eps: float, parity: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Blocks ``(n, 256)`` as sub-blocks ``(n * 256 / size, size / 8, 8)``: ``xval``,
    the weights, the sign bits per group, and which are searched (max >= eps)."""
    xs = x.reshape(-1, size // 8, 8)
    ws = w.reshape(xs.shape)
    xval, bits = _signs(xs, ws, parity)
    searched = xval.max(axis=(1, 2)) >= np.float32(eps)
    return xval, ws, bits, searched


def _abort(failed: np.ndarray, per_block: int) -> None:
    bad = failed.reshape(-1, per_block).any(axis=1)
    if bad.any():
        raise GGMLAbortError(int(np.argmax(bad)))


def _block_scales(scales: np.ndarray, stretch: float) -> tuple[np.ndarray, np.ndarray]:
    """Per block (``scales``: ``(n, sub-blocks)``): f16 bits of ``d = max_scale / 31``
    (times ``stretch``) and each sub-block's 4-bit scale; ``max_scale`` 0 -> 0s."""
    max_scale = np.maximum(scales.max(axis=1), _F0)
    d = max_scale / np.float32(31)
    zero = max_scale == 0
    id_ = _F1 / np.where(zero, _F1, d)
    ls = np.clip(nearest_int(_HALF * (id_[:, None] * scales - _F1)), 0, 15)
    bits = f16_bits(d * np.float32(stretch))
    return np.where(zero, 0, bits).astype(np.uint16), np.where(zero[:, None], 0, ls)


def _search_16(
    t: GridTable, x: np.ndarray, w: np.ndarray, eps: float, parity: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """IQ2_XS and IQ2_S's sub-blocks of 16: grid indices ``(m, 2)``, sign bits, scales
    (0 where not searched) and which sub-blocks were searched."""
    xval, ws, bits, searched = _sub_blocks(x, w, 16, eps, parity)
    xv, wv = xval[searched], ws[searched]
    big = xv.max(axis=(1, 2))
    scale, levels, failed = _search(
        t, xv, wv, big, big / np.float32(5), np.zeros(xv.shape, np.int64), range(-9, 10), False
    )
    every = np.zeros(len(xval), bool)
    every[searched] = failed
    _abort(every, 256 // 16)
    negative = scale < 0
    flipped = ~bits[searched] & (127 if parity else 255)
    bits[searched] = np.where(negative[:, None], flipped, bits[searched])
    scales = np.zeros(len(xval), np.float32)
    scales[searched] = np.where(negative, -scale, scale)
    index = np.zeros((len(xval), 2), np.int64)
    index[searched] = _grid_index(t, levels)
    return index, bits, scales, searched


def _iq2_xs(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """IQ2_XS: f16 ``d``, 32 u16 ``qs`` (grid index | 7 sign bits << 9), 8 bytes of
    4-bit scales.

    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
    >>> _iq2_xs(x, np.ones_like(x))[0, :6].tolist()
    [57, 30, 255, 255, 255, 255]
    """
    n = len(x)
    t = table("IQ2_XS")
    index, bits, scales, searched = _search_16(t, x, block_weights(x, qw, False), 1e-15, True)
    d_bits, ls = _block_scales(scales.reshape(n, 16), 1)
    qs = np.where(searched[:, None], index | (bits << 9), 0).reshape(n, 32)
    qs = np.where((scales.reshape(n, 16).max(axis=1) > 0)[:, None], qs, 0)
    out = np.empty((n, 74), np.uint8)
    out[:, :2] = le16(d_bits)
    out[:, 2:66] = le16(qs.astype(np.uint16)).reshape(n, 64)
    out[:, 66:] = (ls[:, 0::2] | (ls[:, 1::2] << 4)).astype(np.uint8)
    return out


def _iq2_s(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """IQ2_S: f16 ``d``, 32 bytes of grid indices' low bits, 32 of signs, ``qh`` (their
    2 high bits), 8 bytes of 4-bit scales.

    >>> out = _iq2_s(np.linspace(-1, 1, 256, dtype=np.float32)[None], None)
    >>> out[0, :6].tolist(), out[0, 74:78].tolist()
    ([40, 30, 255, 255, 255, 255], [223, 155, 87, 19])
    """
    n = len(x)
    t = table("IQ2_S")
    index, bits, scales, searched = _search_16(t, x, block_weights(x, qw, True), 1e-8, False)
    d_bits, ls = _block_scales(scales.reshape(n, 16), 0.9875)
    index = index.reshape(n, 32)
    out = np.zeros((n, 82), np.uint8)
    out[:, :2] = le16(d_bits)
    out[:, 2:34] = index & 255
    out[:, 34:66] = np.where(searched.reshape(n, 16)[..., None], bits.reshape(n, 16, 2), 0).reshape(
        n, 32
    )
    out[:, 66:74] = ((index >> 8).reshape(n, 8, 4) << (2 * np.arange(4))).sum(axis=2)
    out[:, 74:] = (ls[:, 0::2] | (ls[:, 1::2] << 4)).astype(np.uint8)
    return out


def _iq2_xxs(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """IQ2_XXS: f16 ``d``, then per sub-block of 32 a u32 of 4 grid indices and a u32
    of 4 x 7 sign bits and the 4-bit scale at bit 28.

    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)[None]
    >>> _iq2_xxs(x, np.ones_like(x))[0, :6].tolist()
    [97, 32, 201, 201, 201, 201]
    """
    n = len(x)
    t = table("IQ2_XXS")
    xval, ws, bits, searched = _sub_blocks(x, block_weights(x, qw, False), 32, 1e-15, True)
    xv, wv = xval[searched], ws[searched]
    scale, qp_levels = _make_qp(xv.reshape(len(xv), 32).T, wv.reshape(len(wv), 32).T)
    eff_max = scale * np.float32(3)
    go = ~(eff_max <= 0)
    sub = np.flatnonzero(searched)
    searched[sub[~go]] = False
    xv, wv, scale, eff_max = xv[go], wv[go], scale[go], eff_max[go]
    qp_levels = qp_levels.T[go].reshape(len(xv), 4, 8).astype(np.int8).astype(np.int64)
    scale, levels, failed = _search(t, xv, wv, eff_max, scale, qp_levels, range(-6, 7), True)
    every = np.zeros(len(xval), bool)
    every[searched] = failed
    _abort(every, 256 // 32)
    negative = scale < 0
    bits[searched] = np.where(negative[:, None], ~bits[searched] & 127, bits[searched])
    scales = np.zeros(len(xval), np.float32)
    scales[searched] = np.where(negative, -scale, scale)
    index = np.zeros((len(xval), 4), np.int64)
    index[searched] = _grid_index(t, levels)
    d_bits, ls = _block_scales(scales.reshape(n, 8), 1)
    grid_word = (index << (8 * np.arange(4))).sum(axis=1)
    sign_word = (bits << (7 * np.arange(4))).sum(axis=1)
    sign_word = np.where(searched, sign_word, 0) | (ls.reshape(-1) << 28)
    words = np.stack([np.where(searched, grid_word, 0), sign_word], axis=1).reshape(n, 16)
    words = np.where((scales.reshape(n, 8).max(axis=1) > 0)[:, None], words, 0)
    out = np.empty((n, 66), np.uint8)
    out[:, :2] = le16(d_bits)
    out[:, 2:] = words.astype("<u4").view(np.uint8).reshape(n, 64)
    return out


WEIGHTED: Mapping[str, WeightedEncoder] = MappingProxyType(
    {"IQ2_XXS": _iq2_xxs, "IQ2_XS": _iq2_xs, "IQ2_S": _iq2_s}
)
"""This family's numpy encoders with an importance matrix, by GGML name."""

ENCODERS: Mapping[str, Encoder] = MappingProxyType({"IQ2_S": lambda x: _iq2_s(x, None)})
"""This family's numpy encoders without one (ggml requires it for IQ2_XXS and IQ2_XS)."""
