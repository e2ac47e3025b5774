"""Moments of float elements: count, finite min/max, mean, m2 and special counts.

A provisional numpy implementation (the compiled kernel replaces it): blocks of
:data:`BLOCK` elements widened to float64, two passes per block, blocks merged
by Chan's update.

>>> m = moments(np.array([1, 2, np.nan, -np.inf], np.float32), "f32")
>>> m.finite, m.min, m.max, m.mean, m.std, m.nan, m.neginf
(2, 1.0, 2.0, 1.5, 0.5, 1, 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BLOCK", "Moments", "moments"]

BLOCK = 1 << 16
"""Elements widened at a time."""


@dataclass(frozen=True)
class Moments:
    """Counts, finite extremes and moments of some float elements."""

    count: int
    finite: int
    min: float | None
    max: float | None
    mean: float
    m2: float
    zeros: int
    nan: int
    posinf: int
    neginf: int

    @property
    def std(self) -> float | None:
        """Population standard deviation of the finite elements."""
        return math.sqrt(self.m2 / self.finite) if self.finite else None

    def merge(self, other: Moments) -> Moments:
        """Both sets of elements together (Chan's update)."""
        n = self.finite + other.finite
        if not other.finite:
            mean, m2 = self.mean, self.m2
        elif not self.finite:
            mean, m2 = other.mean, other.m2
        else:
            d = other.mean - self.mean
            mean = self.mean + d * (other.finite / n)
            m2 = self.m2 + other.m2 + d * d * (self.finite / n * other.finite)
        lo = [v for v in (self.min, other.min) if v is not None]
        hi = [v for v in (self.max, other.max) if v is not None]
        return Moments(
            self.count + other.count,
            n,
            min(lo) if lo else None,
            max(hi) if hi else None,
            mean,
            m2,
            self.zeros + other.zeros,
            self.nan + other.nan,
            self.posinf + other.posinf,
            self.neginf + other.neginf,
        )


def _widened(values: np.ndarray, kind: str) -> np.ndarray:
    if kind == "f32":
        return values.view(np.float32).astype(np.float64)
    if kind == "f16":
        return values.view(np.float16).astype(np.float64)
    bits = values.view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64)


def _block(x: np.ndarray) -> Moments:
    finite = np.isfinite(x)
    nan = int(np.count_nonzero(np.isnan(x)))
    posinf = int(np.count_nonzero(x == np.inf))
    f = x[finite]
    zeros = int(np.count_nonzero(f == 0))
    if not f.size:
        return Moments(x.size, 0, None, None, 0.0, 0.0, zeros, nan, posinf, x.size - nan - posinf)
    mean = float(f.sum()) / f.size
    d = f - mean
    return Moments(
        x.size,
        f.size,
        float(f.min()),
        float(f.max()),
        mean,
        float((d * d).sum()),
        zeros,
        nan,
        posinf,
        x.size - f.size - nan - posinf,
    )


def moments(values: np.ndarray, kind: str) -> Moments:
    """The moments of ``values`` (a 1-D array of float32 or 16-bit patterns)
    read as ``kind``: ``'f32'``, ``'bf16'`` or ``'f16'``."""
    total = Moments(0, 0, None, None, 0.0, 0.0, 0, 0, 0, 0)
    for lo in range(0, values.size, BLOCK):
        total = total.merge(_block(_widened(values[lo : lo + BLOCK], kind)))
    return total
