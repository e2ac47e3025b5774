"""Two arrays of float values compared place by place in one pass: the kernel behind
``kiln_np.compare``'s counts and error figures.

:func:`differences` reads two flat arrays of float32, bfloat16 or IEEE float16
elements (each side its own kind) once and returns a :class:`Differences`:

- ``differ``: places whose values differ (NaN equals NaN, -0 equals +0), ``first``
  the first of them (-1 for none);
- ``nan_bits``: places NaN on both sides whose bits differ (both widened exactly to
  float32, which keeps a NaN's sign and payload); ``signed_zeros``: places zero on
  both sides with different signs;
- ``max_abs``, ``max_rel``: the largest ``|a - b|`` and ``|a - b| / max(|a|, |b|)``
  over the differing places (``inf`` where a side is NaN or infinite; 0.0 when none
  differ), ``max_abs_at``, ``max_rel_at`` the first place of each (-1 for none);
- ``nonfinite``: places where a side is NaN or infinite, left out of the sums;
- ``aa``, ``bb``, ``ab``, ``dd``: over the other places, the float64 sums of ``a*a``,
  ``b*b``, ``a*b`` and ``(a - b)**2``.

The sums run in blocks of :data:`BLOCK` added pairwise (the compiled kernel,
src/kiln_np/_kernels/differences.c, over 8 lanes a block; the numpy kernel by
``np.dot`` over chunks of :data:`kiln_np._kernels.pool.CHUNK_LANES`), so their
rounding error grows with the logarithm of the element count, and two builds differ
only by float64 roundings (exactly equal on small integers).  Counts, places and
maxima are exact and the same from any split.  :func:`float_differences` is the
numpy kernel on one chunk of any float (or integer-valued) arrays, and
:class:`Tally` adds the results of many chunks pairwise.

>>> import numpy as np
>>> a = np.array([1.0, 2.0, np.nan, 0.0, 4.0], np.float32)
>>> b = np.array([1.0, 2.5, np.nan, -0.0, 3.0], np.float32)
>>> d = differences(a, "f32", b, "f32")
>>> d.differ, d.first, d.signed_zeros, d.nonfinite
(2, 1, 1, 1)
>>> d.aa, d.bb, d.ab, d.dd
(21.0, 16.25, 18.0, 1.25)
>>> d.max_abs, d.max_abs_at, d.max_rel, d.max_rel_at
(1.0, 4, 0.25, 4)
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import NamedTuple

import numpy as np

from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register
from kiln_np._kernels.moments import KINDS, as_float32, check_values

with contextlib.suppress(ImportError):  # not built: the row's compiled driver is None
    from kiln_np._kernels import native

__all__ = ["BLOCK", "DIFFERENCES", "Differences", "Tally", "differences", "float_differences"]

BLOCK = 1024
"""Elements per block of the compiled kernel's sums."""


class Differences(NamedTuple):
    """What :func:`differences` found (see the module's docstring)."""

    count: int  # type: ignore[assignment]  # a field, shadowing tuple.count
    differ: int
    first: int
    nan_bits: int
    signed_zeros: int
    nonfinite: int
    aa: float
    bb: float
    ab: float
    dd: float
    max_abs: float
    max_abs_at: int
    max_rel: float
    max_rel_at: int

    @classmethod
    def empty(cls) -> Differences:
        """Nothing compared: what :meth:`merge` starts from.

        >>> Differences.empty().first, Differences.empty().max_abs_at
        (-1, -1)
        """
        return cls(0, 0, -1, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, -1, 0.0, -1)

    def shifted(self, offset: int) -> Differences:
        """The same, its places moved by ``offset`` (-1 stays -1).

        >>> Differences.empty()._replace(first=2).shifted(10).first
        12
        """

        def move(at: int) -> int:
            return at + offset if at >= 0 else -1

        return self._replace(
            first=move(self.first),
            max_abs_at=move(self.max_abs_at),
            max_rel_at=move(self.max_rel_at),
        )

    def merge(self, other: Differences) -> Differences:
        """These places followed by ``other``'s (places of one numbering): the counts
        and sums added, the first place and each maximum's first place kept.

        >>> a = differences(np.float32([1, 2]), "f32", np.float32([1, 3]), "f32")
        >>> b = differences(np.float32([5]), "f32", np.float32([4]), "f32").shifted(2)
        >>> m = a.merge(b)
        >>> m.differ, m.first, m.dd, m.max_abs_at, m.max_rel_at
        (2, 1, 2.0, 1, 1)
        """
        abs_later = other.max_abs > self.max_abs
        rel_later = other.max_rel > self.max_rel
        return Differences(
            self.count + other.count,
            self.differ + other.differ,
            self.first if self.first >= 0 else other.first,
            self.nan_bits + other.nan_bits,
            self.signed_zeros + other.signed_zeros,
            self.nonfinite + other.nonfinite,
            self.aa + other.aa,
            self.bb + other.bb,
            self.ab + other.ab,
            self.dd + other.dd,
            other.max_abs if abs_later else self.max_abs,
            other.max_abs_at if abs_later else self.max_abs_at,
            other.max_rel if rel_later else self.max_rel,
            other.max_rel_at if rel_later else self.max_rel_at,
        )


class Tally:
    """:class:`Differences` of consecutive chunks merged pairwise (chunk ``2k`` with
    ``2k + 1``, then pairs of pairs), so that the sums' rounding error grows with the
    logarithm of the number of chunks.

    >>> t = Tally()
    >>> for k in range(5):
    ...     t.add(differences(np.float32([k]), "f32", np.float32([0]), "f32").shifted(k))
    >>> t.total().dd, t.total().max_abs_at, t.total().count
    (30.0, 4, 5)
    """

    def __init__(self) -> None:
        self._stack: list[tuple[int, Differences]] = []  # (level, merge of 2**level chunks)

    def add(self, part: Differences) -> None:
        """Add the next chunk's result (its places already numbered in the whole)."""
        level = 0
        while self._stack and self._stack[-1][0] == level:
            part = self._stack.pop()[1].merge(part)
            level += 1
        self._stack.append((level, part))

    def total(self) -> Differences:
        """Every chunk added so far."""
        result = Differences.empty()
        for _, part in reversed(self._stack):
            result = part.merge(result)
        return result


def differences(a: np.ndarray, kind_a: str, b: np.ndarray, kind_b: str) -> Differences:
    """The :class:`Differences` of ``a`` against ``b``, 1-D C-contiguous native-order
    arrays of one length: elements of ``kind_a`` and ``kind_b``, each ``"f32"``
    (4-byte items) or ``"bf16"`` / ``"f16"`` (2-byte items: the bits, as uint16 or any
    2-byte dtype).

    >>> h = np.array([0x3C00, 0x7E00], np.uint16)  # float16 1.0 and NaN
    >>> differences(h, "f16", np.float32([1.0, 2.0]), "f32")[:6]
    (2, 1, 1, 0, 0, 1)
    """
    for kind, values in ((kind_a, a), (kind_b, b)):
        check_values(values, kind)
    if a.size != b.size:
        raise ValueError(f"expected arrays of one length, got {a.size} and {b.size}")
    result: Differences = DIFFERENCES.pick()(a, kind_a, b, kind_b)
    return result


def float_differences(
    x: np.ndarray,
    y: np.ndarray,
    *,
    equal: np.ndarray | None = None,
    bits: tuple[np.ndarray, np.ndarray] | None = None,
) -> Differences:
    """The numpy kernel on one chunk: :class:`Differences` of two 1-D float arrays
    of one length (any float dtype numpy computes in; the arithmetic in float64).

    ``equal``, when given, says where the values are equal instead of ``x == y``
    (integers compared exactly before they were made floats); ``bits``, the arrays
    whose bits tell NaNs apart (by default ``x`` and ``y`` themselves).

    >>> d = float_differences(np.array([1.0, np.inf]), np.array([1.5, 2.0]))
    >>> d.differ, d.max_abs, d.max_abs_at, d.nonfinite, d.dd
    (2, inf, 1, 1, 0.25)
    """
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(x) & np.isfinite(y)
        clean = bool(finite.all())
        if equal is not None:
            same = equal
            both_nan = None
        elif clean:
            same = x == y
            both_nan = None
        else:
            both_nan = np.isnan(x) & np.isnan(y)
            same = (x == y) | both_nan
        nan_bits = 0
        if both_nan is not None and both_nan.any():
            bx, by = (x, y) if bits is None else bits
            ux, uy = bx.view(f"u{bx.dtype.itemsize}"), by.view(f"u{by.dtype.itemsize}")
            nan_bits = int(np.count_nonzero(both_nan & (ux != uy)))
        zeros = (x == 0) & (y == 0)
        signed_zeros = 0
        if zeros.any():
            signed_zeros = int(np.count_nonzero(zeros & (np.signbit(x) != np.signbit(y))))
        # The NaNs and infinities replaced before any arithmetic (a signalling NaN
        # would raise numpy's invalid-value warning).
        dx = (x if clean else np.where(finite, x, 0)).astype(np.float64)
        dy = (y if clean else np.where(finite, y, 0)).astype(np.float64)
        d = dx - dy
        differ = ~same
        ad = np.abs(d)
        scale = np.maximum(np.abs(dx), np.abs(dy))
        rel = ad / np.where(differ, scale, 1.0)
        bad = differ & ~finite
        ad[~differ] = 0.0
        rel[~differ] = 0.0
        ad[bad] = np.inf
        rel[bad] = np.inf
    count = int(np.count_nonzero(differ))
    at_abs = int(np.argmax(ad)) if count else -1
    at_rel = int(np.argmax(rel)) if count else -1
    return Differences(
        x.size,
        count,
        int(np.argmax(differ)) if count else -1,
        nan_bits,
        signed_zeros,
        x.size - int(np.count_nonzero(finite)),
        float(np.dot(dx, dx)),
        float(np.dot(dy, dy)),
        float(np.dot(dx, dy)),
        float(np.dot(d, d)),
        float(ad[at_abs]) if count else 0.0,
        at_abs,
        float(rel[at_rel]) if count else 0.0,
        at_rel,
    )


def _differences_compiled(a: np.ndarray, kind_a: str, b: np.ndarray, kind_b: str) -> Differences:
    kernel = partial(_compiled, KINDS[kind_a], a, KINDS[kind_b], b)
    parts = pool.run_compiled(kernel, a.size, per=1)
    result = parts[0]
    for part in parts[1:]:
        result = result.merge(part)
    return result


def _compiled(ka: int, a: np.ndarray, kb: int, b: np.ndarray, lo: int, hi: int) -> Differences:
    return Differences(hi - lo, *native.differences(ka, a, kb, b, lo, hi))


def _differences_numpy(a: np.ndarray, kind_a: str, b: np.ndarray, kind_b: str) -> Differences:
    tally = Tally()
    for part in pool.run_ranges(partial(_numpy, a, kind_a, b, kind_b), a.size):
        tally.add(part)
    return tally.total()


def _numpy(a: np.ndarray, kind_a: str, b: np.ndarray, kind_b: str, lo: int, hi: int) -> Differences:
    """The numpy kernel over ``[lo, hi)``, a chunk of :data:`pool.CHUNK_LANES` at a
    time, each side widened exactly to float32 (a NaN's bits kept)."""
    tally = Tally()
    for start in range(lo, hi, pool.CHUNK_LANES):
        end = min(start + pool.CHUNK_LANES, hi)
        x, y = as_float32(a[start:end], kind_a), as_float32(b[start:end], kind_b)
        tally.add(float_differences(x, y).shifted(start))
    return tally.total()


DIFFERENCES = register(
    Kernel(
        "differences",
        _differences_compiled if backend.BUILT else None,
        _differences_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # elements
    )
)
"""The row of :func:`differences`: ``(a, kind_a, b, kind_b) -> Differences``; the two
add in other orders, so the sums agree to float64 roundings (exactly on small
integers), everything else exactly."""
