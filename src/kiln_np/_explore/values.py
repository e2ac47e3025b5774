"""Value histograms: how a tensor's finite values spread between its extremes.

:func:`value_histogram` counts the finite values of a tensor in ``bins`` equal
bins from its smallest to its largest finite value, exactly: every finite value
falls in one bin, ``floor((x - min) / (max - min) * bins)`` (the largest in the
last), computed in float64 from halves so that no range overflows; NaN and the
infinities are left out (:func:`kiln_np.describe` counts them).  It takes what
:func:`kiln_np.describe` found in the tensor: its extremes, and for a type of 16
bits or fewer its exact bit-pattern counts, from which the bins are counted with
no second pass over the data.  A wider type (f32, f64, the 32- and 64-bit
integers, a GGML quantized tensor's float32 values, a scheme's weight's values)
is read once more, a bounded chunk at a time.  Integers are binned as their
float64 (exact up to 2**53 in magnitude).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kiln_np._core.checks import check_int

from .chunks import Source, source
from .description import Description
from .patterns import pattern_floats
from .quantized import QuantizedDescription

__all__ = ["BINS", "ValueHistogram", "value_histogram"]

BINS = 64
"""Bins of a value histogram, by default."""


class ValueHistogram(NamedTuple):
    """A tensor's finite values counted in equal bins between ``low`` and ``high``
    (its smallest and largest finite values): ``counts`` is int64, one count per
    bin (one bin when ``low == high``); :attr:`edges` are the bins' edges."""

    low: float
    high: float
    counts: np.ndarray

    @property
    def edges(self) -> np.ndarray:
        """The ``len(counts) + 1`` edges, float64, from ``low`` to ``high`` (one
        value: a bin of width 1 around it, or of its magnitude).

        >>> ValueHistogram(0.0, 1.0, np.zeros(4, np.int64)).edges.tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        low, high = self.low, self.high
        if low == high:
            half = abs(low) / 2 or 0.5
            low, high = low - half, high + half
        return np.linspace(low, high, self.counts.size + 1)


def _bins(values: np.ndarray, low: float, high: float, bins: int) -> np.ndarray:
    """The bin of each finite float64 value in ``[low, high]``."""
    if low == high:
        return np.zeros(values.shape, np.intp)
    width = high / 2 - low / 2  # halves: a range of +-1e308 does not overflow
    place = np.floor((values / 2 - low / 2) / width * bins)
    return np.clip(place, 0, bins - 1).astype(np.intp)


def value_histogram(
    x: Source, description: Description | QuantizedDescription, *, bins: int = BINS
) -> ValueHistogram | None:
    """The histogram of ``x``'s finite values: ``bins`` equal bins from its
    smallest to its largest finite value (see the module docstring).

    Parameters
    ----------
    x : array_like, Payload, LazyPayload or WeightTensor
        What was described (what :func:`kiln_np.describe` takes).
    description : Description or QuantizedDescription
        ``kiln_np.describe(x)``: its extremes, and its pattern counts (types of
        16 bits or fewer), which make a second pass needless.
    bins : int
        How many bins (at least 1).

    Returns
    -------
    ValueHistogram or None
        None when ``x`` has no finite value; one bin when it has one value.

    Raises
    ------
    KilnError
        SHAPE for ``bins`` below 1; as :func:`kiln_np.describe` for ``x``.

    Examples
    --------
    >>> from kiln_np import describe
    >>> x = np.array([0.0, 0.1, 0.5, 0.9, 1.0, np.nan], np.float32)
    >>> h = value_histogram(x, describe(x), bins=4)
    >>> h.counts.tolist(), h.low, h.high
    ([2, 0, 1, 2], 0.0, 1.0)
    >>> import ml_dtypes
    >>> b = x.astype(ml_dtypes.bfloat16)  # counted from the patterns: no pass
    >>> value_histogram(b, describe(b), bins=4).counts.tolist()
    [2, 0, 1, 2]
    """
    count = check_int(bins, "bins", kind="SHAPE", minimum=1)
    part = description.values if isinstance(description, QuantizedDescription) else description
    if part.min is None or part.max is None:
        return None
    low, high = float(part.min), float(part.max)
    if low == high:  # one value: one bin around it
        count = 1
    counts = np.zeros(count, np.int64)
    if part.histogram is not None:  # every pattern's count, exact: no pass
        values = pattern_floats(part.dtype)
        used = (part.histogram > 0) & np.isfinite(values)
        np.add.at(counts, _bins(values[used], low, high, count), part.histogram[used])
        return ValueHistogram(low, high, counts)
    _, _, chunks = source(x)
    for chunk in chunks:
        with np.errstate(invalid="ignore", over="ignore"):
            wide = chunk.astype(np.float64)
        finite = wide[np.isfinite(wide)]
        if finite.size:
            counts += np.bincount(_bins(finite, low, high, count), minlength=count)
    return ValueHistogram(low, high, counts)
