"""One pass of statistics over float elements: the kernel behind ``kiln_np.describe``'s table.

:func:`moments` reads a flat array of float32, bfloat16 or IEEE float16 elements once
and returns a :class:`Moments`:

- ``count``: elements seen; ``finite``: the finite ones (neither NaN nor infinite);
- ``min``, ``max``: the smallest and largest finite value, exactly (the element's value
  as a Python float; a zero may come back as either ``0.0`` or ``-0.0`` when both
  occur, as they compare equal), ``None`` when no element is finite;
- ``mean`` and ``m2``: the mean of the finite values and the sum of their squared
  deviations from it, accumulated in float64 (both 0.0 when no element is finite);
  :attr:`Moments.std` is the population standard deviation
  ``sqrt(m2 / finite)``;
- ``zeros`` (+0.0 and -0.0), ``nan`` (every NaN pattern, quiet or signalling, either
  sign), ``posinf`` and ``neginf``.

How ``mean`` and ``m2`` are computed
------------------------------------
The elements go in blocks of :data:`BLOCK`.  Each block is summed (float64), divided
into its mean, then read again for the sum of squared deviations from that mean: the
two-pass algorithm, exact up to float64 rounding whatever the offset of the data (no
``sum(x**2) - n * mean**2`` cancellation).  The blocks' ``(finite, mean, m2)`` are then
merged by Chan's update (:meth:`Moments.merge`) pairwise, block ``2k`` with ``2k + 1``,
then pairs of pairs, so the rounding error grows with the logarithm of the element
count, not with the count.  Squares of float32 values do not overflow a float64 (the
largest, about 1.2e77, leaves room for 1e230 of them).  The contract, tested on normal
data, large offsets with a tiny spread, values near the float32 maximum, subnormals and
every special pattern: ``|mean - exact| <= 1e-12 * mean(|x|)`` and ``|std - exact| <=
1e-12 * rms(x)``, over the finite ``x``.

The compiled kernel (``native.moments``, src/kiln_np/_kernels/moments.c) sums over 16
independent lanes that the compiler turns into SIMD registers, with the GIL released;
inputs of :data:`kiln_np._kernels.pool.COMPILED_THREAD_MIN_LANES` elements or more are
split over the thread pool and the parts merged in order.  ``min``, ``max`` and every
count are exact and the same from any split; ``mean`` and ``m2`` differ with the split
(and between the compiled and the numpy kernels, which sum in another order) by float64
roundings within the contract.

>>> import numpy as np
>>> m = moments(np.array([1.0, -2.0, np.nan, 4.0, 0.0, np.inf], np.float32), "f32")
>>> m.count, m.finite, m.min, m.max, m.mean, m.m2, m.std
(6, 4, -2.0, 4.0, 0.75, 18.75, 2.165063509461097)
>>> m.zeros, m.nan, m.posinf, m.neginf
(1, 1, 1, 0)
>>> bits = np.array([0x3F80, 0x7FC0, 0xC000], np.uint16)  # bfloat16 1.0, NaN, -2.0
>>> moments(bits, "bf16")[:4], moments(bits, "bf16").merge(m).finite
((3, 2, -2.0, 1.0), 6)
>>> Moments.empty().min is None, Moments.empty().std is None
(True, True)
"""

from __future__ import annotations

import contextlib
import math
from functools import partial
from typing import NamedTuple

import numpy as np

from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the row's compiled driver is None
    from kiln_np._kernels import native

__all__ = ["BLOCK", "KINDS", "MOMENTS", "Moments", "as_float32", "check_values", "moments"]

BLOCK = 2048
"""Elements per block of the two-pass sums (the compiled kernel's and the numpy one's)."""

KINDS = {"f32": 0, "bf16": 1, "f16": 2}
"""The element kinds and the compiled kernel's code for each."""

_ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2}


def check_values(values: object, kind: str) -> None:
    """Raise unless ``values`` is what the float kernels read as ``kind``: a 1-D
    C-contiguous native-order numpy array of the kind's item size (ValueError,
    TypeError: a caller's mistake, not a file's)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if not isinstance(values, np.ndarray):
        raise TypeError(f"values must be a numpy array, got {type(values).__name__}")
    dtype = values.dtype
    if values.ndim != 1 or not values.flags.c_contiguous or not dtype.isnative:
        raise ValueError("values must be a 1-D C-contiguous array in native byte order")
    if dtype.itemsize != _ITEMSIZE[kind]:
        raise ValueError(f"{kind} elements are {_ITEMSIZE[kind]} bytes, got dtype {dtype}")


class Moments(NamedTuple):
    """The statistics of some float elements (see the module's docstring)."""

    count: int  # type: ignore[assignment]  # a field, shadowing tuple.count
    finite: int
    min: float | None
    max: float | None
    mean: float
    m2: float
    zeros: int
    nan: int
    posinf: int
    neginf: int

    @classmethod
    def empty(cls) -> Moments:
        """The statistics of no element: what :meth:`merge` starts from.

        >>> Moments.empty().count, Moments.empty().min, Moments.empty().mean
        (0, None, 0.0)
        """
        return cls(0, 0, None, None, 0.0, 0.0, 0, 0, 0, 0)

    @property
    def std(self) -> float | None:
        """The population standard deviation of the finite values, ``None`` if none.

        >>> moments(np.array([1, 3], np.float32), "f32").std
        1.0
        """
        return math.sqrt(self.m2 / self.finite) if self.finite else None

    def merge(self, other: Moments) -> Moments:
        """The statistics of these elements followed by ``other``'s: Chan's update
        (the same arithmetic as the compiled kernel's merge of its blocks).

        >>> a = moments(np.array([1, 2], np.float32), "f32")
        >>> b = moments(np.array([3, 4, 5], np.float32), "f32")
        >>> a.merge(b)[:6], a.merge(Moments.empty()) == a
        ((5, 5, 1.0, 5.0, 3.0, 10.0), True)
        """
        if not self.finite or not other.finite:
            mean, m2 = (other.mean, other.m2) if other.finite else (self.mean, self.m2)
        else:
            n = self.finite + other.finite
            delta = other.mean - self.mean
            mean = self.mean + delta * (other.finite / n)
            m2 = self.m2 + other.m2 + delta * delta * (float(self.finite) * other.finite / n)
        return Moments(
            self.count + other.count,
            self.finite + other.finite,
            other.min
            if self.min is None or (other.min is not None and other.min < self.min)
            else self.min,
            other.max
            if self.max is None or (other.max is not None and other.max > self.max)
            else self.max,
            mean,
            m2,
            self.zeros + other.zeros,
            self.nan + other.nan,
            self.posinf + other.posinf,
            self.neginf + other.neginf,
        )


def moments(values: np.ndarray, kind: str) -> Moments:
    """The :class:`Moments` of ``values``, a 1-D C-contiguous native-order array of
    ``kind`` elements: ``"f32"`` (4-byte items, float32), ``"bf16"`` or ``"f16"``
    (2-byte items: bfloat16 or IEEE float16 bits, as uint16 or any 2-byte dtype).

    >>> moments(np.array([0x3C00, 0x7C00, 0x0001], np.uint16), "f16")[:4]
    (3, 2, 5.960464477539063e-08, 1.0)
    """
    check_values(values, kind)
    result: Moments = MOMENTS.pick()(values, kind)
    return result


def _merged(parts: list[Moments]) -> Moments:
    result = parts[0]
    for part in parts[1:]:
        result = result.merge(part)
    return result


def _moments_compiled(values: np.ndarray, kind: str) -> Moments:
    count = values.size
    kernel = partial(_compiled, KINDS[kind], values)
    if count < pool.COMPILED_THREAD_MIN_LANES:  # run_compiled's one call, without its costs
        return kernel(0, count)
    return _merged(pool.run_compiled(kernel, count, per=1))


def _moments_numpy(values: np.ndarray, kind: str) -> Moments:
    return _merged(pool.run_ranges(partial(_numpy, values, kind), values.size))


def _compiled(code: int, values: np.ndarray, lo: int, hi: int) -> Moments:
    finite, lo_value, hi_value, mean, m2, zeros, nan, posinf, neginf = native.moments(
        code, values, lo, hi
    )
    some = finite > 0
    return Moments(
        hi - lo,
        finite,
        lo_value if some else None,
        hi_value if some else None,
        mean,
        m2,
        zeros,
        nan,
        posinf,
        neginf,
    )


def as_float32(values: np.ndarray, kind: str) -> np.ndarray:
    """The elements' values as float32, exactly: a view, or widened (numpy's float16
    arithmetic is several times slower than its float32).

    >>> as_float32(np.array([0x3F80, 0xC000], np.uint16), "bf16").tolist()
    [1.0, -2.0]
    """
    if kind == "f32":
        return values.view(np.float32)
    if kind == "f16":
        return values.view(np.float16).astype(np.float32)
    return (values.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _numpy(values: np.ndarray, kind: str, lo: int, hi: int) -> Moments:
    """The numpy kernel over ``values[lo:hi]`` (``lo`` on a block):
    each chunk of :data:`pool.CHUNK_LANES` elements counted, then its blocks' two-pass
    sums; every block of the range merged pairwise at the end.  A chunk with no NaN or
    infinity (the common one) skips the masks."""
    parts: list[np.ndarray] = []
    total = Moments.empty()
    for start in range(lo, hi, pool.CHUNK_LANES):
        chunk = as_float32(values[start : min(start + pool.CHUNK_LANES, hi)], kind)
        finite = np.isfinite(chunk)
        clean = bool(finite.all())
        kept = chunk if clean else chunk[finite]
        nan = 0 if clean else int(np.count_nonzero(np.isnan(chunk)))
        posinf = 0 if clean else int(np.count_nonzero(chunk == np.inf))
        some = kept.size > 0
        total = total.merge(
            Moments(
                chunk.size,
                kept.size,
                float(kept.min()) if some else None,
                float(kept.max()) if some else None,
                0.0,
                0.0,
                int(np.count_nonzero(chunk == 0)),
                nan,
                posinf,
                chunk.size - kept.size - nan - posinf,
            )
        )
        # The NaNs and infinities replaced before any arithmetic (a signalling NaN
        # would raise numpy's invalid-value warning).
        wide = (chunk if clean else np.where(finite, chunk, 0)).astype(np.float64)
        parts.append(_block_sums(wide, None if clean else finite))
    mean, m2 = _pairwise(np.concatenate(parts, axis=1)) if parts else (0.0, 0.0)
    return total._replace(mean=mean, m2=m2)


def _block_sums(x: np.ndarray, finite: np.ndarray | None) -> np.ndarray:
    """Rows ``(finite, mean, m2)`` of each :data:`BLOCK` of ``x`` (the last may be
    short): the block's sum, its mean, then the sum of squared deviations from that
    mean, over the finite values (``finite``: where they are, ``None`` for all; ``x``
    holds 0.0 elsewhere)."""
    pad = -x.size % BLOCK
    if pad:
        finite = np.ones(x.size, bool) if finite is None else finite
        x = np.concatenate([x, np.zeros(pad)])
        finite = np.concatenate([finite, np.zeros(pad, bool)])
    x = x.reshape(-1, BLOCK)
    if finite is None:
        n = np.full(x.shape[0], float(BLOCK))
        mean = x.sum(axis=1) / BLOCK
        deviation = x - mean[:, None]
    else:
        finite = finite.reshape(-1, BLOCK)
        n = finite.sum(axis=1, dtype=np.float64)
        mean = x.sum(axis=1) / np.maximum(n, 1.0)
        deviation = np.where(finite, x - mean[:, None], 0.0)
    return np.stack([n, mean, np.einsum("ij,ij->i", deviation, deviation)])


def _pairwise(rows: np.ndarray) -> tuple[float, float]:
    """``(mean, m2)`` by Chan's update over the blocks' ``(finite, mean, m2)`` columns,
    neighbours first (an odd one out waits for the next level): depth log2 of the block
    count.  Blocks with no finite value (mean 0.0, m2 0.0) change nothing."""
    n, mean, m2 = rows
    while n.size > 1:
        even = n.size - n.size % 2
        na, nb = n[0:even:2], n[1:even:2]
        both = na + nb
        delta = mean[1:even:2] - mean[0:even:2]
        share = nb / np.maximum(both, 1.0)
        merged_mean = mean[0:even:2] + delta * share
        merged_m2 = m2[0:even:2] + m2[1:even:2] + delta * delta * (na * share)
        n = np.concatenate([both, n[even:]])
        mean = np.concatenate([merged_mean, mean[even:]])
        m2 = np.concatenate([merged_m2, m2[even:]])
    return float(mean[0]), float(m2[0])


MOMENTS = register(
    Kernel(
        "moments",
        _moments_compiled if backend.BUILT else None,
        _moments_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # elements
    )
)
"""The row of :func:`moments`: ``(values, kind) -> Moments``; the two sum in another
order, so ``mean`` and ``m2`` agree within the contract (exactly on small integers)."""
