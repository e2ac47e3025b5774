"""ggml's ``make_qkx2_quants`` in numpy, bit for bit, over many groups at once: the
search for a scale and a minimum (``x ~ scale * level - the_min``) that the
offset types make.  ``make_qkx3_quants`` is the same search with an importance
matrix's weights (the last argument false: weights given); Q4_1 and Q5_1 with an
importance matrix, Q2_K, Q4_K and Q5_K with and without one all run it.

Groups are laid out element-major, ``(elements, groups)``, so that each of ggml's
sums (``s = t[0]; s += t[i]``) is one ``np.cumsum`` along axis 0, in ggml's order.
"""

from __future__ import annotations

import numpy as np

from .rounding import nearest_int

__all__ = ["first_min", "make_qkx", "total"]

_F0 = np.float32(0)


def total(terms: np.ndarray) -> np.ndarray:
    """``s = terms[0]; s += terms[1]; ...`` along the element axis (the one before last).

    >>> total(np.array([[1e8], [1.0], [-1e8]], np.float32)).tolist()  # not pairwise
    [0.0]
    """
    result: np.ndarray = np.cumsum(terms, axis=-2, dtype=np.float32)[..., -1, :]
    return result


def first_min(x: np.ndarray) -> np.ndarray:
    """Per group (column), ggml's minimum ``m = x[0]; if (x[i] < m) m = x[i]``: the
    first element equal to the least, so its bits (the sign of a zero).

    >>> first_min(np.array([[-0.0, 1.0], [0.0, 0.0]], np.float32)).tolist()
    [-0.0, 0.0]
    """
    low = x.min(axis=0)
    first: np.ndarray = x[np.argmax(x == low, axis=0), np.arange(x.shape[1])]
    return first


def make_qkx(
    x: np.ndarray,
    w: np.ndarray,
    nmax: int,
    rmin: float,
    rdelta: float,
    nstep: int,
    use_mad: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``make_qkx2_quants(n, nmax, x, w, L, &the_min, Laux, rmin, rdelta, nstep,
    use_mad)`` for each group (column) of ``x`` (float32 ``(n, groups)``, weights
    ``w`` the same): the levels (int32, same layout), the scale and ``the_min``
    (float32 per group; ``the_min >= 0``, ``x ~ scale * level - the_min``).

    >>> x = np.array([[-1.0], [0.0], [1.0], [2.0]], np.float32)
    >>> levels, scale, the_min = make_qkx(x, np.abs(x), 3, -0.5, 0.1, 15, True)
    >>> levels[:, 0].tolist(), scale.tolist(), the_min.tolist()
    ([0, 1, 2, 3], [1.0], [1.0])
    """
    top = np.float32(nmax)
    lo = first_min(x)
    hi = x.max(axis=0)
    sum_w = total(w)  # sum_w = w[0]; sum_w += w[i]
    sum_x = total(w * x)  # sum_x = sum_w * x[0]; sum_x += w[i] * x[i]
    lo = np.where(lo > 0, _F0, lo)
    flat = hi == lo
    lo_flat = lo

    def error(scale: np.ndarray, the_min: np.ndarray, levels: np.ndarray) -> np.ndarray:
        diff = scale * levels + the_min - x
        diff = np.abs(diff) if use_mad else diff * diff
        result: np.ndarray = total(w * diff) + _F0  # from 0: a total of -0.0 is +0.0
        return result

    iscale = top / (hi - lo)
    scale = np.float32(1) / iscale
    levels = np.clip(nearest_int(iscale * (x - lo)), 0, nmax)
    best = error(scale, lo, levels.astype(np.float32))
    for step in range(nstep + 1):
        factor = np.float32(rmin) + np.float32(rdelta) * np.float32(step) + top
        iscale = factor / (hi - lo)
        trial = np.clip(nearest_int(iscale * (x - lo)), 0, nmax)
        t = trial.astype(np.float32)
        wl = w * t
        sum_l, sum_l2, sum_xl = total(np.stack([wl, wl * t, wl * x])) + _F0
        det = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
        positive = this_min > 0
        this_min = np.where(positive, _F0, this_min)
        this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
        current = error(this_scale, this_min, t)
        better = (det > 0) & (current < best)
        levels = np.where(better, trial, levels)
        best = np.where(better, current, best)
        scale = np.where(better, this_scale, scale)
        lo = np.where(better, this_min, lo)
    levels = np.where(flat, 0, levels)
    scale = np.where(flat, _F0, scale)
    lo = np.where(flat, lo_flat, lo)
    return levels, scale, -lo
