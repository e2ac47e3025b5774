"""The statistics engine: one streaming pass over chunks, exact where it can be.

Types of 16 bits or fewer are only counted, pattern by pattern; their
statistics come exactly from those counts and the value of each pattern.
Wider types are widened to a *copy* (float64 for floats, int64/uint64 for
integers) one cache-sized chunk at a time, so memory stays bounded and a
memory-mapped file is read once, sequentially.  Means and standard deviations
are accumulated scaled by a power of two, so they never overflow
(``[1e308, 1e308]`` has the mean ``1e308``, without a warning).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from kiln_np._core.checks import U8
from kiln_np._core.table import DType, load_ml_dtypes

from . import chunks
from .chunks import COUNTED_BITS
from .description import Description, Number
from .patterns import (
    ExponentCounts,
    PatternCounts,
    bit_values,
    exponent_bits,
    exponents_of_patterns,
    finfo,
)

__all__ = ["Summary", "summarize"]

_F64 = np.dtype(np.float64)


def _times_power_of_two(x: np.ndarray, shift: int) -> np.ndarray:
    """``x * 2**shift`` for ``|shift|`` up to 1100 (``np.ldexp`` is several times
    slower): one or two multiplications by exact powers of two."""
    if abs(shift) <= 1000:
        return x * math.ldexp(1.0, shift)
    step = 1000 if shift > 0 else -1000
    return x * math.ldexp(1.0, step) * math.ldexp(1.0, shift - step)


class _Moments:
    """Count, mean and sum of squared deviations of finite float64 values.

    Chunks are merged with Chan, Golub and LeVeque's pairwise update.  Both
    sums are kept scaled by a power of two (``mean * 2**k``, ``m2 * 4**k``,
    every scaled value below 1 in magnitude), so no sum can overflow, whatever
    the values, and a power-of-two scale changes no rounding.
    """

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.k = 0

    def add(self, x: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Add finite values ``x``, each ``weights`` times (once when ``None``)."""
        n = x.size if weights is None else int(weights.sum())
        if n == 0:
            return
        top = float(np.max(np.abs(x)))
        k = math.frexp(top)[1] if top else self.k  # every |x| < 2**k
        with np.errstate(under="ignore"):  # tiny values beside huge ones: negligible
            y = _times_power_of_two(x, -k)
            w = None if weights is None else weights.astype(_F64)
            # Plain sums, not np.dot: a BLAS call stalls on a busy machine.
            mean = float(y.sum() if w is None else (w * y).sum()) / n
            d = y - mean
            m2 = float((d * d).sum() if w is None else (w * d * d).sum())
        self._merge(n, mean, m2, k)

    def _merge(self, n: int, mean: float, m2: float, k: int) -> None:
        if not self.n:
            self.n, self.mean, self.m2, self.k = n, mean, m2, k
            return
        top = max(self.k, k)
        a, b = math.ldexp(self.mean, self.k - top), math.ldexp(mean, k - top)
        a2, b2 = math.ldexp(self.m2, 2 * (self.k - top)), math.ldexp(m2, 2 * (k - top))
        total = self.n + n
        delta = b - a
        self.mean = a + delta * (n / total)
        self.m2 = a2 + b2 + delta * delta * (self.n / total * n)
        self.n, self.k = total, top

    def results(self, lo: Number, hi: Number) -> tuple[float, float]:
        """(mean, population std); the mean kept within [lo, hi] (rounding aside,
        it is there), the std within (hi - lo) / 2 (likewise)."""
        try:
            mean = math.ldexp(self.mean, self.k)
        except OverflowError:  # rounded past the largest float; hi or lo is the answer
            mean = math.copysign(math.inf, self.mean)
        bound = float(hi) / 2 - float(lo) / 2
        try:
            std = math.ldexp(math.sqrt(self.m2 / self.n), self.k)
        except OverflowError:
            std = bound
        return min(max(mean, float(lo)), float(hi)), min(std, bound)


def _wide(row: DType) -> np.dtype[Any]:
    """The dtype a chunk is copied to for statistics: exact for every value."""
    dtype = row.dtype
    if dtype.kind == "b":
        return U8
    if finfo(row) is not None:
        return _F64
    signed = load_ml_dtypes().iinfo(dtype).min < 0
    return np.dtype(np.int64 if signed else np.uint64)


class _Stats:
    """Accumulates counts, finite min/max and the moments of widened values."""

    def __init__(self, row: DType) -> None:
        self.wide = _wide(row)
        info = finfo(row)
        self.tiny = None if info is None else float(info.smallest_normal)
        self.nan = self.inf = self.posinf = self.zero = self.subnormal = 0
        self.lo: Number | None = None
        self.hi: Number | None = None
        self.moments = _Moments()

    def widen(self, values: np.ndarray) -> np.ndarray:
        """A widened copy: the original bits are never touched.  (Casting a NaN
        pattern of an ml_dtypes type warns on some platforms; NaN is the answer.)"""
        with np.errstate(invalid="ignore"):
            return values.astype(self.wide)

    def add(self, wide: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Add widened values, each ``weights`` times (once when ``None``)."""

        def count(mask: np.ndarray) -> int:
            return int(np.count_nonzero(mask) if weights is None else weights[mask].sum())

        self.zero += count(wide == 0)
        if self.wide == _F64:
            finite = np.isfinite(wide)
            if not finite.all():
                nan = np.isnan(wide)
                self.nan += count(nan)
                self.inf += count(~(finite | nan))
                self.posinf += count(wide == np.inf)
                wide = wide[finite]
                weights = None if weights is None else weights[finite]
        if weights is not None:
            used = weights > 0
            wide, weights = wide[used], weights[used]
        if not wide.size:
            return
        if self.tiny is not None:
            magnitude = np.abs(wide)
            self.subnormal += count((magnitude < self.tiny) & (magnitude > 0))
        lo, hi = wide.min().item(), wide.max().item()
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)
        self.moments.add(wide if self.wide == _F64 else wide.astype(_F64), weights)


class Summary:
    """One pass over C-order 1-D chunks, building a :class:`Description`."""

    def __init__(self, row: DType, shape: tuple[int, ...], first: int) -> None:
        self.row = row
        self.shape = tuple(shape)
        self.count = math.prod(self.shape)
        self.first = first
        self.stats = _Stats(row)
        self.patterns = PatternCounts(row, shape) if row.bits <= COUNTED_BITS else None
        wide_float = self.patterns is None and exponent_bits(row)
        self.exponents = ExponentCounts(row) if wide_float else None
        self.heads: list[np.ndarray] = []
        self.taken = 0

    def add(self, chunk: np.ndarray) -> None:
        if self.taken < self.first:
            self.heads.append(chunk[: self.first - self.taken].astype(self.row.dtype))
            self.taken += self.heads[-1].size
        # A caller's chunk may be large (a lazily decoded file): bounded pieces.
        if self.patterns is not None:
            for lo in range(0, chunk.size, chunks.COUNT_CHUNK):
                self.patterns.add(chunk[lo : lo + chunks.COUNT_CHUNK])
            return
        for lo in range(0, chunk.size, chunks.CHUNK):
            piece = chunk[lo : lo + chunks.CHUNK]
            if self.exponents is not None:
                self.exponents.add(piece)
            self.stats.add(self.stats.widen(piece))

    def result(self) -> Description:
        row, stats = self.row, self.stats
        histogram = exponents = None
        if self.patterns is not None:
            histogram = self.patterns.counts
            stats.add(stats.widen(bit_values(row.dtype)), histogram)
            if exponent_bits(row):
                exponents = exponents_of_patterns(row, histogram)
        elif self.exponents is not None:
            exponents = self.exponents.counts
        mean = std = absmax = None
        if stats.lo is not None and stats.hi is not None:
            mean, std = stats.moments.results(stats.lo, stats.hi)
            absmax = max(abs(stats.lo), abs(stats.hi))
        return Description(
            code=row.code,
            dtype=row.dtype,
            shape=self.shape,
            count=self.count,
            byte_length=row.byte_length(self.count),
            nan=stats.nan,
            inf=stats.inf,
            zero=stats.zero,
            subnormal=stats.subnormal,
            min=stats.lo,
            max=stats.hi,
            absmax=absmax,
            mean=mean,
            std=std,
            first=np.concatenate(self.heads) if self.heads else np.empty(0, row.dtype),
            histogram=histogram,
            exponents=exponents,
        )


def summarize(
    row: DType, shape: tuple[int, ...], chunks: Iterable[np.ndarray], first: int
) -> Description:
    """A :class:`Description` from one pass over C-order 1-D chunks of an array of
    ``row``'s dtype and ``shape`` (the CLI feeds a file's chunks).

    Types of 16 bits or fewer are only counted by bit pattern; their statistics
    then come from the counts and the pattern values, exactly, with no
    per-element arithmetic.  Wider types are widened a chunk at a time.

    >>> from kiln_np import dtype_info
    >>> parts = [np.array([1, 2], np.float32), np.array([6], np.float32)]
    >>> d = summarize(dtype_info("f32"), (3,), parts, 2)
    >>> d.mean, d.first.tolist()
    (3.0, [1.0, 2.0])
    """
    summary = Summary(row, shape, first)
    for chunk in chunks:
        summary.add(chunk)
    return summary.result()
