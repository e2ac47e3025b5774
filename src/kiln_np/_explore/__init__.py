"""Looking at what a tensor really holds: summaries, exact histograms, plots.

:func:`describe` summarizes an array of any Kiln dtype (counts of NaN, inf,
zero and subnormal elements; min, max, absmax, mean and std; the first
values; the exact bit-pattern histogram for types of 16 bits or fewer and the
histogram by binary exponent for the floats of 16 bits or more).  Given
``scales`` it summarizes a block-scaled (MX, NVFP4-style) tensor: its scale
exponents, its element codes, its dequantized values, and how many blocks
saturate or are all zero.  :func:`bit_histogram` counts each bit pattern
exactly and :func:`bit_values` says what each pattern means.

numpy's reductions trip over several ml_dtypes types, and the original bits
must never change.  So types of 16 bits or fewer are only counted, pattern by
pattern (``np.bincount`` on the storage bits), and their statistics come
exactly from those counts and the value of each pattern; wider types are
widened to a *copy* (float64 for floats, int64/uint64 for integers) one
cache-sized chunk at a time.  Memory stays bounded and a memory-mapped file
is read once, sequentially.  Means and standard deviations are accumulated
scaled by a power of two, so they never overflow (``[1e308, 1e308]`` has the
mean ``1e308``, without a warning).
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload, to_numpy
from kiln_np._core.checks import MAX_INT64, U8, check_int, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import payload_info
from kiln_np._core.table import (
    Code,
    DType,
    Layout,
    code_label,
    dtype_info,
    load_ml_dtypes,
    row_for_dtype,
)
from kiln_np._files.payload import LazyPayload

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CHUNK",
    "Description",
    "ScaledDescription",
    "bit_histogram",
    "bit_values",
    "describe",
    "flat_chunks",
    "summarize",
]

CHUNK = 1 << 16
"""Elements per chunk: a float64 widening copy of one chunk (512 KiB) and its
masks stay in cache across the several passes the statistics make."""

_COUNT_CHUNK = 1 << 19
"""Elements per chunk when 16-bit patterns are counted: 65,536 counters are
added once per chunk, so chunks are larger (``np.bincount`` widens a chunk to
8-byte indices: 4 MiB)."""

_F64 = np.dtype(np.float64)
_U16 = np.dtype(np.uint16)
_COUNTED_BITS = 16  # types up to this width get exact bit-pattern counts
_STORAGE: dict[int, np.dtype[Any]] = {32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}

Source = npt.ArrayLike | Payload | LazyPayload
Number = int | float


# -- bit patterns ----------------------------------------------------------------


def _pattern_count(row: DType) -> int:
    """How many bit patterns a type of 16 bits or fewer has; TYPE for wider ones."""
    if row.bits > _COUNTED_BITS:
        raise KilnError(
            "TYPE",
            f"bit patterns are counted exactly: expected a type of {_COUNTED_BITS} bits or "
            f"fewer, found {code_label(row.code)} ({row.dtype}, {row.bits} bits)",
            code=int(row.code),
        )
    # Only the bytes 0x00 and 0x01 are bools (Kiln rejects any other byte).
    return 2 if row.code == Code.BOOL else 1 << row.bits


def _finfo(row: DType) -> Any:
    """ml_dtypes' finfo of a float row (numpy and ml_dtypes types), else None."""
    try:
        return load_ml_dtypes().finfo(row.dtype)
    except ValueError:  # an integer or bool type
        return None


def _exponent_bits(row: DType) -> int:
    """Width of the exponent field of the floats histogrammed by binary exponent
    (f16, bf16, f32, f64); 0 for the other types."""
    info = _finfo(row)
    return int(info.nexp) if info is not None and row.bits >= 16 else 0


def _wide(row: DType) -> np.dtype[Any]:
    """The dtype a chunk is copied to for statistics: exact for every value."""
    dtype = row.dtype
    if dtype.kind == "b":
        return U8
    if _finfo(row) is not None:
        return _F64
    signed = load_ml_dtypes().iinfo(dtype).min < 0
    return np.dtype(np.int64 if signed else np.uint64)


@set_module("kiln_np")
def bit_values(dtype: npt.DTypeLike) -> np.ndarray:
    """The value each bit pattern of a type of 16 bits or fewer means.

    Parameters
    ----------
    dtype : dtype_like
        A Kiln dtype of at most 16 bits: ``bfloat16``, ``float16``,
        ``int16``, ``uint16``, ``float8_e4m3fn``, ``float8_e5m2``,
        ``float8_e8m0fnu``, ``int8``, ``uint8``, ``bool``, ``int4``,
        ``uint4``, ``float4_e2m1fn``.

    Returns
    -------
    numpy.ndarray
        A 1-D array of ``dtype`` whose element ``i`` has bit pattern ``i``:
        16 elements for the 4-bit types, 256 for the 8-bit ones, 65,536 for
        the 16-bit ones, 2 for bool (only the bytes 0x00 and 0x01 are bools).
        Index it with the same pattern as :func:`bit_histogram` to label
        counts.

    Raises
    ------
    KilnError
        TYPE for a dtype with no Kiln code or wider than 16 bits.

    Examples
    --------
    >>> import ml_dtypes
    >>> values = bit_values(ml_dtypes.float4_e2m1fn)
    >>> values.dtype.name
    'float4_e2m1fn'
    >>> values.tolist()
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    >>> float(bit_values(ml_dtypes.bfloat16)[0x3F80])
    1.0
    """
    row = row_for_dtype(dtype)
    storage = U8 if row.bits <= 8 else _U16
    return np.arange(_pattern_count(row), dtype=storage).view(row.dtype)


class _Patterns:
    """Accumulates exact bit-pattern counts over chunks."""

    def __init__(self, row: DType, shape: tuple[int, ...]) -> None:
        self.row = row
        self.shape = shape
        self.counts = np.zeros(_pattern_count(row), np.int64)
        self.storage = U8 if row.bits <= 8 else _U16
        self.seen = 0

    def add(self, chunk: np.ndarray) -> None:
        # In the row's (native) byte order: a '>f2' chunk is copied, then counted.
        storage = np.ascontiguousarray(chunk, dtype=self.row.dtype).view(self.storage)
        counts = np.bincount(storage, minlength=self.counts.size)
        if counts.size > self.counts.size:
            index = int(np.argmax(storage >= self.counts.size))
            found = int(storage[index])
            raise KilnError(
                "TYPE",
                f"{code_label(self.row.code)} shape {self.shape}: expected storage bytes "
                f"0x00-0x{self.counts.size - 1:02x}, found 0x{found:02x} at element "
                f"{self.seen + index}; it is no bit pattern of the type",
                code=int(self.row.code),
                shape=self.shape,
                expected=self.counts.size - 1,
                found=found,
                index=self.seen + index,
            )
        self.counts += counts
        self.seen += storage.size


def _exponents_of_patterns(row: DType, counts: np.ndarray) -> np.ndarray:
    """Counts by exponent field from the counts of every 16-bit pattern (sign,
    exponent, mantissa from the top bit down): exact, no element touched."""
    nexp = _exponent_bits(row)
    fields = counts.reshape(2, 1 << nexp, -1)
    return np.asarray(fields.sum(axis=(0, 2)), np.int64)


class _Exponents:
    """Counts by exponent field of the f32 and f64 elements, from their bits."""

    def __init__(self, row: DType) -> None:
        info = _finfo(row)
        self.row = row
        self.shift = int(info.nmant)
        self.mask = (1 << int(info.nexp)) - 1
        self.counts = np.zeros(1 << int(info.nexp), np.int64)

    def add(self, chunk: np.ndarray) -> None:
        bits = np.ascontiguousarray(chunk, dtype=self.row.dtype).view(_STORAGE[self.row.bits])
        fields = (bits >> self.shift).astype(np.intp) & self.mask
        self.counts += np.bincount(fields, minlength=self.counts.size)


# -- input: arrays, Payloads, LazyPayloads -----------------------------------------


def _array(array: object) -> np.ndarray:
    try:
        return np.asarray(array)
    except Exception as exc:  # ragged nesting, a failing __array__: user code raised
        raise KilnError(
            "TYPE",
            f"expected an array, cannot make one of {type(array).__name__}: "
            f"{type(exc).__name__}: {str(exc)[:200]}",
        ) from exc


def _refuse_opaque(code: int, layout: Layout) -> KilnError:
    return KilnError(
        "TYPE",
        f"{code_label(code)} layout {layout.name!r}: expected elements of a closed code "
        "(1-19) to describe, found an opaque payload, whose blocks have no element type; "
        "decode its blocks first",
        code=code,
    )


def flat_chunks(arr: np.ndarray, size: int = CHUNK) -> Iterator[np.ndarray]:
    """C-order 1-D chunks of ``arr``: views when contiguous, small copies otherwise."""
    n = arr.size
    flat = arr.reshape(-1) if arr.flags.c_contiguous else None
    for lo in range(0, n, size):
        hi = min(lo + size, n)
        yield flat[lo:hi] if flat is not None else np.asarray(arr.flat[lo:hi])


def _payload_chunks(payload: Payload, row: DType, count: int) -> Iterator[np.ndarray]:
    """A payload decoded a bounded range of elements at a time (an even count per
    chunk, so every chunk but the last starts and ends on a byte)."""
    step = 2 * _COUNT_CHUNK
    for e0 in range(0, count, step):
        e1 = min(e0 + step, count)
        b0 = payload_info(row.code, (e0,)).byte_length
        b1 = payload_info(row.code, (e1,)).byte_length
        try:
            yield to_numpy(row.code, payload.data[b0:b1], (e1 - e0,))
        except KilnError as exc:  # a bool byte or padding nibble: its index in the whole
            raise exc.shifted(e0) from None


def _source(array: Source) -> tuple[DType, tuple[int, ...], Iterable[np.ndarray]]:
    """The row, shape and C-order 1-D chunks of what is described."""
    if isinstance(array, Payload):
        info = array.info
        if info.layout is not None:
            raise _refuse_opaque(info.code, info.layout)
        info.check_length(array.data.nbytes)
        row = dtype_info(info.code)
        return row, info.shape, _payload_chunks(array, row, info.count)
    if isinstance(array, LazyPayload):
        if array.layout is not None:
            raise _refuse_opaque(array.code, array.layout)
        chunks = (c.reshape(-1) for c in array.iter_chunks())
        return row_for_dtype(array.dtype), tuple(array.shape), chunks
    arr = _array(array)
    row = row_for_dtype(arr.dtype)
    size = _COUNT_CHUNK if row.bits == _COUNTED_BITS else CHUNK
    return row, tuple(int(d) for d in arr.shape), flat_chunks(arr, size)


@set_module("kiln_np")
def bit_histogram(array: Source) -> np.ndarray:
    """Exact counts of each bit pattern in an array of 16 bits or fewer per element.

    Parameters
    ----------
    array : array_like, Payload or LazyPayload
        An array of a Kiln dtype of at most 16 bits (4-bit types as ml_dtypes
        stores them, one element per byte), or a payload of one.  It is read,
        never changed, one chunk at a time, so a memory-mapped array needs no
        extra memory.

    Returns
    -------
    numpy.ndarray
        int64 counts indexed by bit pattern: length 16 for the 4-bit types,
        256 for the 8-bit ones, 65,536 for the 16-bit ones, 2 for bool.
        :func:`bit_values` gives the value of each index.

    Raises
    ------
    KilnError
        TYPE for something numpy cannot make an array of, a dtype with no
        Kiln code, wider than 16 bits, an opaque payload, or a storage byte
        that is no pattern of the type (above 0x0f for 4-bit types, above
        0x01 for bool); a payload's own LENGTH and SHAPE errors.

    Examples
    --------
    >>> import ml_dtypes
    >>> x = np.array([0.5, 0.5, -6.0], dtype=ml_dtypes.float4_e2m1fn)
    >>> bit_histogram(x)
    array([0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    """
    row, shape, chunks = _source(array)
    patterns = _Patterns(row, shape)
    for chunk in chunks:
        patterns.add(chunk)
    return patterns.counts


# -- statistics ------------------------------------------------------------------


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


class _Stats:
    """Accumulates counts, finite min/max and the moments of widened values."""

    def __init__(self, row: DType) -> None:
        self.wide = _wide(row)
        info = _finfo(row)
        self.tiny = None if info is None else float(info.smallest_normal)
        self.nan = self.inf = self.zero = self.subnormal = 0
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


class _Summary:
    """One pass over C-order 1-D chunks, building a :class:`Description`."""

    def __init__(self, row: DType, shape: tuple[int, ...], first: int) -> None:
        self.row = row
        self.info = payload_info(row.code, shape)
        self.first = first
        self.stats = _Stats(row)
        self.patterns = _Patterns(row, shape) if row.bits <= _COUNTED_BITS else None
        wide_float = self.patterns is None and _exponent_bits(row)
        self.exponents = _Exponents(row) if wide_float else None
        self.heads: list[np.ndarray] = []
        self.taken = 0

    def add(self, chunk: np.ndarray) -> None:
        if self.taken < self.first:
            self.heads.append(chunk[: self.first - self.taken].astype(self.row.dtype))
            self.taken += self.heads[-1].size
        # A caller's chunk may be large (a lazily decoded file): bounded pieces.
        if self.patterns is not None:
            for lo in range(0, chunk.size, _COUNT_CHUNK):
                self.patterns.add(chunk[lo : lo + _COUNT_CHUNK])
            return
        for lo in range(0, chunk.size, CHUNK):
            piece = chunk[lo : lo + CHUNK]
            if self.exponents is not None:
                self.exponents.add(piece)
            self.stats.add(self.stats.widen(piece))

    def result(self) -> Description:
        row, stats = self.row, self.stats
        histogram = exponents = None
        if self.patterns is not None:
            histogram = self.patterns.counts
            stats.add(stats.widen(bit_values(row.dtype)), histogram)
            if _exponent_bits(row):
                exponents = _exponents_of_patterns(row, histogram)
        elif self.exponents is not None:
            exponents = self.exponents.counts
        mean = std = absmax = None
        if stats.lo is not None and stats.hi is not None:
            mean, std = stats.moments.results(stats.lo, stats.hi)
            absmax = max(abs(stats.lo), abs(stats.hi))
        return Description(
            code=row.code,
            dtype=row.dtype,
            shape=self.info.shape,
            count=self.info.count,
            byte_length=self.info.byte_length,
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
    per-element arithmetic.  Wider types are widened a chunk at a time."""
    summary = _Summary(row, shape, first)
    for chunk in chunks:
        summary.add(chunk)
    return summary.result()


# -- the description -----------------------------------------------------------------


def _show(value: Number | None) -> str:
    return "-" if value is None else str(value)


def _json_number(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # 'nan', 'inf', '-inf'
    return value


def _python_values(first: np.ndarray) -> list[object]:
    if first.dtype.kind in "biuf":
        return list(first.tolist())
    return list(first.astype(_F64).tolist())


def _shown(first: np.ndarray) -> list[object]:
    """Values to print: f32 as float32 (its shortest repr, not float64's)."""
    return list(first) if first.dtype == np.float32 else list(first.tolist())


def _pattern_floats(dtype: np.dtype[Any]) -> np.ndarray:
    """The float64 value of every bit pattern (casting a NaN pattern of an ml_dtypes
    type warns on some platforms; NaN is the answer)."""
    with np.errstate(invalid="ignore"):
        return bit_values(dtype).astype(_F64)


def _share(count: int, total: int) -> str:
    return f"{100 * count / total:.1f}%"


def _figure(size: tuple[float, float], panels: int = 1) -> tuple[Figure, list[Axes]]:
    """A new figure that lays itself out (constrained layout): labels stay inside
    the saved picture."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot() needs matplotlib: pip install 'kiln-np[plot]'") from exc
    fig = plt.figure(figsize=size, layout="constrained")
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


@set_module("kiln_np")
@dataclass(frozen=True, eq=False)
class Description:
    """What :func:`describe` found in an array.

    Attributes
    ----------
    code : Code
        The Kiln code of the array's dtype.
    dtype : numpy.dtype
        The array's dtype.
    shape : tuple of int
        The array's shape.
    count : int
        Number of elements.
    byte_length : int
        Bytes of the Kiln payload (4-bit types pack two elements per byte).
    nan, inf, zero, subnormal : int
        Elements that are NaN, +-infinity, +-0, and subnormal (nonzero,
        finite, below the type's smallest normal magnitude): 0 in types that
        have none.
    min, max, absmax : int, float or None
        Over the finite elements (``absmax`` is the largest magnitude);
        ``None`` when there are none.  Python ints for integer and bool
        types, so int64/uint64 extremes are exact.
    mean, std : float or None
        Mean and population standard deviation of the finite elements;
        ``None`` when there are none.  Accumulated scaled by powers of two,
        so they never overflow.
    first : numpy.ndarray
        A copy of the first elements in C order, in ``dtype``.
    histogram : numpy.ndarray or None
        :func:`bit_histogram` of the array, for types of 16 bits or fewer.
    exponents : numpy.ndarray or None
        For f16, bf16, f32 and f64: int64 counts indexed by the exponent
        field of each element.  Field ``e`` holds the magnitudes in
        ``[2**(e - bias), 2**(e - bias + 1))``; field 0 holds zeros and
        subnormals, the largest field infinities and NaNs.
        :meth:`exponent_rows` labels them.
    """

    code: Code
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    count: int
    byte_length: int
    nan: int
    inf: int
    zero: int
    subnormal: int
    min: Number | None
    max: Number | None
    absmax: Number | None
    mean: float | None
    std: float | None
    first: np.ndarray
    histogram: np.ndarray | None
    exponents: np.ndarray | None

    @property
    def name(self) -> str:
        """The spec's short name of the code (``'e2m1'``)."""
        return dtype_info(self.code).name

    def rows(self) -> list[tuple[str, str]]:
        """The summary as (label, text) rows: what the repr and the HTML table show
        above the histograms (``kiln-np inspect`` prints them too).

        Examples
        --------
        >>> describe(np.array([1, 2], np.uint8)).rows()[4]
        ('nan / inf / zero', '0 / 0 / 0')
        """
        shape = "x".join(map(str, self.shape)) or "() (scalar)"
        more = " ..." if self.count > self.first.size else ""
        rows = [
            ("code", code_label(int(self.code))),
            ("dtype", str(self.dtype)),
            ("shape", f"{shape} ({self.count} elements)"),
            ("payload", f"{self.byte_length} bytes"),
            ("nan / inf / zero", f"{self.nan} / {self.inf} / {self.zero}"),
        ]
        if _finfo(dtype_info(self.code)) is not None:
            rows.append(("subnormal", str(self.subnormal)))
        rows += [
            ("min / max", f"{_show(self.min)} / {_show(self.max)}"),
            ("absmax", _show(self.absmax)),
            ("mean / std", f"{_show(self.mean)} / {_show(self.std)}"),
            ("first", " ".join(map(str, _shown(self.first))) + more),
        ]
        return rows

    def histogram_rows(
        self, limit: int | None = None, *, order: Literal["count", "pattern"] = "count"
    ) -> list[tuple[str, str, int, str]]:
        """The patterns that occur: (pattern, value, count, share).

        Parameters
        ----------
        limit : int, optional
            Keep at most this many rows.
        order : {"count", "pattern"}
            Most common first (ties by pattern), or by pattern.

        Returns
        -------
        list of tuple
            ``('0x38', '1', 12, '50.0%')``: the pattern in hex, its value,
            its count and its share of all elements.  Empty when the type has
            no histogram.

        Examples
        --------
        >>> import ml_dtypes
        >>> describe(np.array([1.0, 1.0, 2.0], ml_dtypes.float8_e4m3fn)).histogram_rows()
        [('0x38', '1', 2, '66.7%'), ('0x40', '2', 1, '33.3%')]
        """
        if self.histogram is None:
            return []
        used = np.flatnonzero(self.histogram)
        if order == "count":
            used = used[np.argsort(-self.histogram[used], kind="stable")]
        used = used[:limit]
        values = bit_values(self.dtype)
        digits = {2: 1, 16: 1, 256: 2}.get(self.histogram.size, 4)
        return [
            (
                f"0x{p:0{digits}x}",
                str(values[p]),
                int(self.histogram[p]),
                _share(int(self.histogram[p]), self.count),
            )
            for p in used.tolist()
        ]

    def _bias(self) -> int:
        return int(_finfo(dtype_info(self.code)).maxexp) - 1

    def exponent_label(self, field: int) -> str:
        """What exponent field ``field`` of :attr:`exponents` holds: ``'2^-3'``
        (magnitudes in [2^-3, 2^-2)), ``'0/subnormal'`` or ``'inf/nan'``.

        Examples
        --------
        >>> d = describe(np.array([0.25, 1.0], np.float32))
        >>> [d.exponent_label(f) for f in (0, 125, 127, 255)]
        ['0/subnormal', '2^-2', '2^0', 'inf/nan']
        """
        top = 0 if self.exponents is None else self.exponents.size - 1
        if field == 0:
            return "0/subnormal"
        if field == top:
            return "inf/nan"
        return f"2^{field - self._bias()}"

    def exponent_rows(
        self, limit: int | None = None, *, order: Literal["count", "exponent"] = "count"
    ) -> list[tuple[str, int, str]]:
        """The binary exponents that occur: (exponent, count, share).

        Parameters
        ----------
        limit : int, optional
            Keep at most this many rows.
        order : {"count", "exponent"}
            Most common first (ties by exponent), or by exponent.

        Returns
        -------
        list of tuple
            ``('2^-3', 12, '50.0%')``: see :meth:`exponent_label`.  Empty
            when the type has no exponent histogram.

        Examples
        --------
        >>> describe(np.array([0.3, 0.25, 3.0], np.float32)).exponent_rows()
        [('2^-2', 2, '66.7%'), ('2^1', 1, '33.3%')]
        """
        if self.exponents is None:
            return []
        used = np.flatnonzero(self.exponents)
        if order == "count":
            used = used[np.argsort(-self.exponents[used], kind="stable")]
        return [
            (
                self.exponent_label(f),
                int(self.exponents[f]),
                _share(int(self.exponents[f]), self.count),
            )
            for f in used[:limit].tolist()
        ]

    def _tail(self) -> list[str]:
        """The repr's histogram and exponent sections."""
        lines: list[str] = []
        if self.histogram is not None:
            shown = self.histogram_rows(8)
            used = int(np.count_nonzero(self.histogram))
            lines.append(
                f"  histogram         {used} of {self.histogram.size} patterns used"
                + ("; most common:" if shown else "")
            )
            lines += [f"    {p:<6}  {v:>12}  {c:>12}  {s:>6}" for p, v, c, s in shown]
            if used > len(shown):
                lines.append(f"    ... {used - len(shown)} more")
        if self.exponents is not None:
            rows = self.exponent_rows(8)
            used = int(np.count_nonzero(self.exponents))
            lines.append(
                f"  exponents         {used} of {self.exponents.size} binary exponents used"
                + ("; most common:" if rows else "")
            )
            lines += [f"    {e:<12}  {c:>12}  {s:>6}" for e, c, s in rows]
            if used > len(rows):
                lines.append(f"    ... {used - len(rows)} more")
        return lines

    def __repr__(self) -> str:
        lines = [f"<kiln_np.Description of {self.name} {self.shape}>"]
        lines += [f"  {k:<16}  {v}" for k, v in self.rows()]
        return "\n".join(lines + self._tail())

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self.rows()
        )
        page = f"<table>{cells}</table>"
        if self.histogram is not None:
            rows = "".join(
                f"<tr><td>{p}</td><td>{html.escape(v)}</td><td>{c}</td><td>{s}</td></tr>"
                for p, v, c, s in self.histogram_rows(16)
            )
            page += (
                "<table><tr><th>pattern</th><th>value</th><th>count</th>"
                f"<th>share</th></tr>{rows}</table>"
            )
        if self.exponents is not None:
            rows = "".join(
                f"<tr><td>{html.escape(e)}</td><td>{c}</td><td>{s}</td></tr>"
                for e, c, s in self.exponent_rows(16)
            )
            page += f"<table><tr><th>exponent</th><th>count</th><th>share</th></tr>{rows}</table>"
        return page

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data (the ``kiln-np inspect --json`` fields).

        Non-finite floats appear as the strings ``"nan"``, ``"inf"``, ``"-inf"``
        so the result is strict JSON.

        Returns
        -------
        dict
            Keys ``code``, ``name``, ``dtype``, ``shape``, ``count``,
            ``byte_length``, ``nan``, ``inf``, ``zero``, ``subnormal``,
            ``min``, ``max``, ``absmax``, ``mean``, ``std``, ``first``,
            ``first_bits``, ``histogram`` and ``exponents`` (lists of counts
            or ``None``); see ``docs/cli.md``.

        Examples
        --------
        >>> describe(np.array([1, 2], np.uint8)).to_dict()["histogram"][:3]
        [0, 1, 1]
        """
        width = max(self.dtype.itemsize, 1)
        bits = self.first.view(f"<u{width}") if width > 1 else self.first.view(U8)
        return {
            "code": int(self.code),
            "name": self.name,
            "dtype": str(self.dtype),
            "shape": list(self.shape),
            "count": self.count,
            "byte_length": self.byte_length,
            "nan": self.nan,
            "inf": self.inf,
            "zero": self.zero,
            "subnormal": self.subnormal,
            "min": _json_number(self.min),
            "max": _json_number(self.max),
            "absmax": _json_number(self.absmax),
            "mean": _json_number(self.mean),
            "std": _json_number(self.std),
            "first": [_json_number(v) for v in _python_values(self.first)],
            "first_bits": [f"0x{int(b):0{2 * width}x}" for b in bits.tolist()],
            "histogram": None if self.histogram is None else self.histogram.tolist(),
            "exponents": None if self.exponents is None else self.exponents.tolist(),
        }

    def plot(
        self,
        ax: Axes | None = None,
        *,
        log: bool = False,
        what: Literal["patterns", "exponents"] | None = None,
    ) -> Axes:
        """Draw the bit-pattern histogram (bars labelled with their values) or the
        histogram by binary exponent.

        Needs matplotlib (``pip install kiln-np[plot]``).  A figure made here
        lays itself out (constrained layout), so a saved picture keeps its
        labels; given ``ax``, the figure's layout is yours.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure's axes by default.
        log : bool
            Use a logarithmic count axis (weights often pile up on a few
            patterns).
        what : {"patterns", "exponents"}, optional
            ``"patterns"`` (types of 16 bits or fewer; the default for those
            of 8 bits or fewer and the 16-bit integers) or ``"exponents"``
            (f16, bf16, f32, f64; their default): the used range of exponents,
            zeros and subnormals, infinities and NaNs each a bar.

        Returns
        -------
        matplotlib.axes.Axes
            The axes drawn on.

        Raises
        ------
        KilnError
            TYPE for a histogram the type does not have (the 32- and 64-bit
            integers have none), or another ``what``.
        ImportError
            When matplotlib is not installed.

        Examples
        --------
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import ml_dtypes
        >>> ax = describe(np.array([0.5, -6.0], ml_dtypes.float4_e2m1fn)).plot()
        >>> len(ax.patches)
        16
        >>> ax = describe(np.array([0.5, 3.0, np.inf], np.float32)).plot()
        >>> [t.get_text() for t in ax.get_xticklabels()]
        ['$2^{-1}$', '$2^{0}$', '$2^{1}$', 'inf/nan']
        """
        if what is None:
            what = "exponents" if self.exponents is not None else "patterns"
        if what not in ("patterns", "exponents"):
            raise KilnError(
                "TYPE", f"expected what='patterns' or 'exponents', found {show_value(what)}"
            )
        if what == "exponents":
            if self.exponents is None:
                raise KilnError(
                    "TYPE",
                    "a histogram by binary exponent: expected f16, bf16, f32 or f64, found "
                    f"{code_label(int(self.code))} ({self.dtype})",
                    code=int(self.code),
                )
            counts = self.exponents
        else:
            if self.histogram is None:
                _pattern_count(dtype_info(self.code))  # raises the TYPE error
            assert self.histogram is not None
            counts = self.histogram
        if ax is None:
            ax = _figure((10, 4) if counts.size > 16 else (7, 4))[1][0]
        if what == "exponents":
            self._plot_exponents(ax, counts, log)
        else:
            self._plot_patterns(ax, counts, log)
        ax.set_ylabel("count")
        ax.set_title(f"{self.name} ({self.dtype}), shape {self.shape}: {self.count} elements")
        return ax

    def _plot_patterns(self, ax: Axes, counts: np.ndarray, log: bool) -> None:
        patterns = np.arange(counts.size)
        if counts.size <= 256:
            ax.bar(patterns, counts, width=0.85, log=log)
        else:  # 65,536 bars would be 65,536 patches: one filled outline instead
            ax.fill_between(patterns, counts, step="mid", linewidth=0)
            if log:
                ax.set_yscale("log")
        values = bit_values(self.dtype)
        # Every pattern labelled for 4-bit types, every 16th for 8-bit ones, every
        # 8192nd (short values) for 16-bit ones.
        wide = counts.size > 256
        ticks = patterns[:: 8192 if wide else max(1, counts.size // 16)]
        digits = {2: 1, 16: 1, 256: 2}.get(counts.size, 4)
        shown = [f"{float(values[t]):.3g}" if wide else str(values[t]) for t in ticks.tolist()]
        ax.set_xticks(ticks, [f"{v}\n0x{t:0{digits}x}" for v, t in zip(shown, ticks, strict=True)])
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel("value / bit pattern")

    def _plot_exponents(self, ax: Axes, counts: np.ndarray, log: bool) -> None:
        # The used range of binary exponents, then zeros and subnormals on the
        # left and infinities and NaNs on the right, each one bar set apart.
        top = counts.size - 1
        used = np.flatnonzero(counts[1:top]) + 1
        fields = np.arange(used[0], used[-1] + 1) if used.size else np.arange(1, 1)
        place = fields - self._bias()
        ticks = list(place[:: max(1, -(-fields.size // 14))])
        labels = [f"$2^{{{e}}}$" for e in ticks]
        left = int(place[0]) - 2 if place.size else 0
        right = int(place[-1]) + 2 if place.size else 2
        ends = [(left, 0, "0/sub"), (right, top, "inf/nan")]
        for where, field, label in ends:
            if counts[field]:
                place = np.append(place, where)
                fields = np.append(fields, field)
                ticks.append(where)
                labels.append(label)
        ax.bar(place, counts[fields], width=0.85, log=log)
        ax.set_xticks(ticks, labels)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel("binary exponent e (|x| in [2^e, 2^(e+1)))")


# -- block-scaled tensors ----------------------------------------------------------

_ELEMENTS = (Code.E2M1, Code.F8E4M3, Code.F8E5M2, Code.I8)
_SCALES = {Code.E8M0: 32, Code.F8E4M3: 16}  # scale code -> default block size


def _dequantize(values: np.ndarray, scales: np.ndarray, block_size: int) -> np.ndarray:
    """The exact float64 values of ``(r, c)`` elements with ``(r, ceil(c / block_size))``
    scales: the one place describe dequantizes, with the MX codec's own rule."""
    from kiln_np import mx  # the codec imports the GGUF adapter: loaded when first needed

    return mx.dequantize(values, scales, block_size=block_size, axis=-1, dtype=_F64)


def _blocks_input(x: Source, what: str) -> tuple[np.ndarray | LazyPayload, DType]:
    """An array (or a LazyPayload, read lazily) and its row."""
    if isinstance(x, Payload):
        info = x.info
        if info.layout is not None:
            raise _refuse_opaque(info.code, info.layout)
        arr: np.ndarray | LazyPayload = to_numpy(x.code, x.data, x.shape)
    elif isinstance(x, LazyPayload):
        if x.layout is not None:
            raise _refuse_opaque(x.code, x.layout)
        arr = x
    else:
        arr = _array(x)
    if what == "scales" and isinstance(arr, np.ndarray) and arr.dtype == U8:
        # Raw scale bytes are e8m0, as the MX codec reads them.
        arr = arr.view(dtype_info(Code.E8M0).dtype)
    row = row_for_dtype(arr.dtype)
    allowed = _ELEMENTS if what == "values" else tuple(_SCALES)
    if row.code not in allowed:
        kinds = (
            "e2m1, f8e4m3, f8e5m2 or i8 elements (MXFP4, MXFP8, MXINT8)"
            if what == "values"
            else "e8m0 scales (MX; raw uint8 bytes too) or f8e4m3 scales (NVFP4-style)"
        )
        raise KilnError(
            "TYPE",
            f"block-scaled {what}: expected {kinds}, found {code_label(row.code)} ({row.dtype})",
            code=int(row.code),
        )
    return arr, row


def _rows_reader(
    x: np.ndarray | LazyPayload, axis: int
) -> Callable[[int, int, int, int], np.ndarray]:
    """``read(r0, r1, c0, c1)``: rows ``[r0, r1)`` and columns ``[c0, c1)`` of ``x``
    seen with ``axis`` last and the other axes flattened in C order (block
    order), as a new ``(r, c)`` array."""
    if isinstance(x, LazyPayload):
        if axis != x.ndim - 1:  # only leading-axis rows read lazily: decode it all
            return _rows_reader(np.asarray(x), axis)
        lazy = x
        if lazy.ndim == 1:
            return lambda r0, r1, c0, c1: np.asarray(lazy[c0:c1])[None]
        inner = math.prod(lazy.shape[1:-1])  # block rows per leading-axis index
        n = lazy.shape[-1]
        held: dict[tuple[int, int], np.ndarray] = {}  # the rows last decoded

        def read_lazy(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
            span = (r0 // inner, -(-r1 // inner))
            if span not in held:
                held.clear()  # a long row is read in column ranges: decode it once
                held[span] = np.asarray(lazy[span[0] : span[1]]).reshape(-1, n)
            skip = span[0] * inner
            return held[span][r0 - skip : r1 - skip, c0:c1]

        return read_lazy
    moved = np.moveaxis(x, axis, -1)
    lead = moved.shape[:-1]

    def read(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        if not lead:
            return moved[c0:c1][None]
        index = np.unravel_index(np.arange(r0, r1), lead)
        return np.asarray(moved[(*index, slice(c0, c1))])  # type: ignore[arg-type]

    return read


def _saturating(row: DType) -> np.ndarray:
    """By storage byte: the element is at an end of its type's finite range."""
    values = _pattern_floats(row.dtype)
    finite = values[np.isfinite(values)]
    table = (values == finite.max()) | (values == finite.min())
    return np.resize(table, 256)  # the bytes past a 4-bit type's 16 never occur


@set_module("kiln_np")
@dataclass(frozen=True, eq=False)
class ScaledDescription:
    """What :func:`describe` found in a block-scaled tensor (values and scales).

    Attributes
    ----------
    values : Description
        The element codes (their exact bit-pattern histogram, unscaled).
    scales : Description
        The scales: one per block (for e8m0, the histogram of scale bytes is
        the distribution of scale exponents, byte - 127).
    dequantized : Description
        The exact dequantized values, as float64: statistics and the
        histogram by binary exponent.
    block_size : int
        Elements per block.
    axis : int
        The axis the blocks run along (non-negative).
    blocks : int
        Number of blocks (``scales.count``).
    saturated : int
        Blocks holding an element at an end of the element type's finite
        range (+-6 for e2m1, +-448 for f8e4m3, +-57344 for f8e5m2, -128 or
        127 for i8): the block's scale could not be smaller.
    zero_blocks : int
        Blocks whose elements are all +-0 (whatever their scale).
    nan_blocks : int
        Blocks whose scale is NaN (e8m0 0xFF; f8e4m3 0x7F, 0xFF), which makes
        every element NaN.

    ``first`` of the three descriptions is in block order: the block axis
    last, the other axes in C order (C order itself when the blocks run along
    the last axis).
    """

    values: Description
    scales: Description
    dequantized: Description
    block_size: int
    axis: int
    blocks: int
    saturated: int
    zero_blocks: int
    nan_blocks: int

    def scale_exponents(self) -> list[tuple[int, int]]:
        """(binary exponent, blocks) of the finite nonzero scales, by exponent.

        Examples
        --------
        >>> import ml_dtypes
        >>> values = np.ones(64, ml_dtypes.float4_e2m1fn)
        >>> scales = np.array([0.25, 8.0], ml_dtypes.float8_e8m0fnu)
        >>> describe(values, scales).scale_exponents()
        [(-2, 1), (3, 1)]
        """
        histogram = self.scales.histogram
        assert histogram is not None
        values = _pattern_floats(self.scales.dtype)
        usable = np.isfinite(values) & (values != 0) & (histogram > 0)
        exponents = np.frexp(values[usable])[1] - 1
        counts = histogram[usable]
        unique, where = np.unique(exponents, return_inverse=True)
        totals = np.zeros(unique.size, np.int64)
        np.add.at(totals, where, counts)
        return list(zip(unique.tolist(), totals.tolist(), strict=True))

    def rows(self) -> list[tuple[str, str]]:
        """The block summary as (label, text) rows.

        Examples
        --------
        >>> import ml_dtypes
        >>> values = np.zeros(64, ml_dtypes.float4_e2m1fn)
        >>> scales = np.ones(2, ml_dtypes.float8_e8m0fnu)
        >>> describe(values, scales).rows()[0]
        ('blocks', '2 of 32 elements each, along axis 0')
        """
        top = _pattern_floats(self.values.dtype)
        largest = float(np.max(np.abs(top[np.isfinite(top)])))
        exponents = self.scale_exponents()
        spread = (
            f"{exponents[0][0]} .. {exponents[-1][0]}; most common: "
            + ", ".join(
                f"{e} ({_share(c, self.blocks)})"
                for e, c in sorted(exponents, key=lambda ec: -ec[1])[:4]
            )
            if exponents
            else "-"
        )
        return [
            ("blocks", f"{self.blocks} of {self.block_size} elements each, along axis {self.axis}"),
            ("saturated", f"{self.saturated} (hold +-{largest:g}, the largest element)"),
            ("all zero", str(self.zero_blocks)),
            ("NaN scale", str(self.nan_blocks)),
            ("scale exponents", spread),
        ]

    def __repr__(self) -> str:
        head = (
            f"<kiln_np.ScaledDescription of {self.values.name} {self.values.shape} with "
            f"{self.scales.name} scales {self.scales.shape}>"
        )
        lines = [head] + [f"  {k:<16}  {v}" for k, v in self.rows()]
        for label, part in (
            ("scales", self.scales),
            ("values", self.values),
            ("dequantized", self.dequantized),
        ):
            lines.append(f"  {label}:")
            lines += ["  " + line for line in repr(part).splitlines()[1:]]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self.rows()
        )
        parts = "".join(
            f"<h4>{label}</h4>{part._repr_html_()}"
            for label, part in (
                ("scales", self.scales),
                ("values", self.values),
                ("dequantized", self.dequantized),
            )
        )
        return f"<table>{cells}</table>{parts}"

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data.

        Returns
        -------
        dict
            ``block_size``, ``axis``, ``blocks``, ``saturated``,
            ``zero_blocks``, ``nan_blocks``, ``scale_exponents`` (pairs of
            exponent and blocks), and ``values``, ``scales``, ``dequantized``
            as :meth:`Description.to_dict` gives them.

        Examples
        --------
        >>> import ml_dtypes
        >>> values = np.full(32, 6.0, ml_dtypes.float4_e2m1fn)
        >>> scales = np.ones(1, ml_dtypes.float8_e8m0fnu)
        >>> describe(values, scales).to_dict()["saturated"]
        1
        """
        return {
            "block_size": self.block_size,
            "axis": self.axis,
            "blocks": self.blocks,
            "saturated": self.saturated,
            "zero_blocks": self.zero_blocks,
            "nan_blocks": self.nan_blocks,
            "scale_exponents": [list(pair) for pair in self.scale_exponents()],
            "values": self.values.to_dict(),
            "scales": self.scales.to_dict(),
            "dequantized": self.dequantized.to_dict(),
        }

    def plot(self, axes: Sequence[Axes] | None = None, *, log: bool = False) -> list[Axes]:
        """Draw three panels: blocks by scale exponent, the element codes, and
        the dequantized values by binary exponent.

        Needs matplotlib.  A figure made here lays itself out (constrained
        layout); given ``axes``, the figure's layout is yours.

        Parameters
        ----------
        axes : sequence of three matplotlib.axes.Axes, optional
            Where to draw; a new figure's three axes by default.
        log : bool
            Logarithmic count axes.

        Returns
        -------
        list of matplotlib.axes.Axes
            The three axes drawn on.

        Examples
        --------
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import ml_dtypes
        >>> values = np.ones(64, ml_dtypes.float4_e2m1fn)
        >>> scales = np.array([0.25, 8.0], ml_dtypes.float8_e8m0fnu)
        >>> [ax.get_xlabel() for ax in describe(values, scales).plot()][0]
        'scale exponent (scale = 2^e)'
        """
        drawn = list(axes) if axes is not None else _figure((16, 4), 3)[1]
        from matplotlib.ticker import MaxNLocator

        if len(drawn) != 3:
            raise KilnError("SHAPE", f"expected three axes to draw on, found {len(drawn)}")
        first, second, third = drawn
        exponents = self.scale_exponents()
        if exponents:
            where, counts = zip(*exponents, strict=True)
            first.bar(where, counts, width=0.85, log=log)
        first.xaxis.set_major_locator(MaxNLocator(integer=True))
        first.set_xlabel("scale exponent (scale = 2^e)")
        first.set_ylabel("blocks")
        first.set_title(
            f"{self.blocks} blocks of {self.block_size}: {self.saturated} saturated, "
            f"{self.zero_blocks} all zero"
        )
        self.values.plot(second, log=log, what="patterns")
        second.set_title(f"{self.values.name} element codes (unscaled)")
        self.dequantized.plot(third, log=log, what="exponents")
        third.set_title(f"dequantized: {self.dequantized.count} values")
        return drawn


def _describe_scaled(
    values: Source, scales: Source, block_size: object, axis: object, first: int
) -> ScaledDescription:
    v, vrow = _blocks_input(values, "values")
    s, srow = _blocks_input(scales, "scales")
    shape, found = tuple(v.shape), tuple(s.shape)
    if not shape:
        raise KilnError(
            "SHAPE", "block-scaled values: expected an array of at least one dimension, found ()"
        )
    ax = check_int(axis, "axis", kind="SHAPE", minimum=-len(shape), maximum=len(shape) - 1)
    ax %= len(shape)
    size = _SCALES[srow.code] if block_size is None else block_size
    bs = check_int(size, "block_size", kind="SHAPE", minimum=1, maximum=MAX_INT64)
    n = shape[ax]
    nb = -(-n // bs)
    expected = (*shape[:ax], nb, *shape[ax + 1 :])
    if found != expected:
        raise KilnError(
            "SHAPE",
            f"block-scaled values of shape {shape} in blocks of {bs} along axis {ax}: "
            f"expected scales of shape {expected}, found {found}",
            shape=found,
        )
    rows = math.prod(shape) // n if n else 0
    moved = (*shape[:ax], *shape[ax + 1 :], n)
    vsum = _Summary(vrow, moved, first)
    ssum = _Summary(srow, (*moved[:-1], nb), first)
    dsum = _Summary(dtype_info(Code.F64), moved, first)
    read_v, read_s = _rows_reader(v, ax), _rows_reader(s, ax)
    saturating = _saturating(vrow)
    zero = np.resize(_pattern_floats(vrow.dtype) == 0, 256)
    nan_scale = np.isnan(_pattern_floats(srow.dtype))
    saturated = zero_blocks = nan_blocks = 0
    step = max(1, CHUNK // max(n, 1))  # rows per chunk
    cols = n if step > 1 else bs * max(1, CHUNK // bs)
    for r0 in range(0, rows, step):
        r1 = min(r0 + step, rows)
        for c0 in range(0, n, cols):
            c1 = min(c0 + cols, n)
            vc = read_v(r0, r1, c0, c1)
            sc = read_s(r0, r1, c0 // bs, -(-c1 // bs))
            vsum.add(vc.reshape(-1))
            ssum.add(sc.reshape(-1))
            dsum.add(_dequantize(vc, sc, bs).reshape(-1))
            codes = np.zeros((vc.shape[0], sc.shape[1] * bs), U8)
            codes[:, : vc.shape[1]] = vc.view(U8)
            blocks = codes.reshape(vc.shape[0], sc.shape[1], bs)
            saturated += int(np.count_nonzero(saturating[blocks].any(axis=-1)))
            zero_blocks += int(np.count_nonzero(zero[blocks].all(axis=-1)))
            nan_blocks += int(np.count_nonzero(nan_scale[np.ascontiguousarray(sc).view(U8)]))

    return ScaledDescription(
        values=dataclasses.replace(vsum.result(), shape=shape),
        scales=dataclasses.replace(ssum.result(), shape=found),
        dequantized=dataclasses.replace(dsum.result(), shape=shape),
        block_size=bs,
        axis=ax,
        blocks=math.prod(found),
        saturated=saturated,
        zero_blocks=zero_blocks,
        nan_blocks=nan_blocks,
    )


@overload
def describe(array: Source, scales: None = None, *, first: int = 8) -> Description: ...


@overload
def describe(
    array: Source,
    scales: Source,
    *,
    block_size: int | None = None,
    axis: int | None = None,
    first: int = 8,
) -> ScaledDescription: ...


@set_module("kiln_np")
def describe(
    array: Source,
    scales: Source | None = None,
    *,
    block_size: int | None = None,
    axis: int | None = None,
    first: int = 8,
) -> Description | ScaledDescription:
    """Summarize an array of any Kiln dtype, or a block-scaled tensor, without
    touching its bits.

    Parameters
    ----------
    array : array_like, Payload or LazyPayload
        An array of a Kiln dtype: numpy's or ml_dtypes' (bfloat16, float8,
        float4, int4, ...), or a payload of one (a :class:`Payload`, as
        ``kiln_np.onnx.model_to_kiln`` yields, decoded a bounded range at a
        time; a :class:`LazyPayload` from :func:`open_payload`, decoded a
        bounded chunk at a time).  Read, never changed, so a memory-mapped
        array costs no extra memory.  With ``scales``: the elements of a
        block-scaled tensor, e2m1, f8e4m3, f8e5m2 or i8 (MXINT8).
    scales : array_like, Payload or LazyPayload, optional
        One scale per block: e8m0 (MX; raw uint8 bytes are read as e8m0) or
        f8e4m3 (NVFP4-style).  Their shape is the array's with ``axis``
        divided by ``block_size``, rounded up (the last block may be
        partial).  Read a chunk of blocks at a time; a :class:`LazyPayload`
        is read lazily when the blocks run along its last axis, decoded
        whole otherwise.
    block_size : int, optional
        Elements per block; by default 32 for e8m0 scales, 16 for f8e4m3.
    axis : int, optional
        The axis the blocks run along; by default the last.
    first : int
        How many leading elements (C order) to keep.

    Returns
    -------
    Description or ScaledDescription
        Without ``scales``: counts of NaN, inf, zero and subnormal elements;
        min, max, absmax, mean and std of the finite elements; the first
        elements; for types of 16 bits or fewer the exact bit-pattern
        histogram, for f16, bf16, f32, f64 the histogram by binary exponent.
        With ``scales``: a :class:`ScaledDescription` of the scales, the
        element codes and the dequantized values, and counts of saturated,
        all-zero and NaN-scaled blocks.  Their ``repr`` is a readable
        summary and they render as tables in Jupyter.

    Raises
    ------
    KilnError
        TYPE for something numpy cannot make an array of (``__array__``
        raising included), a dtype with no Kiln code, an opaque payload, a
        storage byte that is no bit pattern of the type (4-bit above 0x0f,
        bool above 0x01), element or scale types that are not block-scaled
        ones; SHAPE for ``first`` that is not an integer in 0..2**63-1, a
        ``block_size`` below 1, an ``axis`` out of range, or scales whose
        shape does not match, ``block_size`` or ``axis`` without ``scales``;
        a payload's own LENGTH and SHAPE errors.

    Examples
    --------
    >>> import ml_dtypes
    >>> d = describe(np.array([1.0, -0.0, np.nan, 448.0], ml_dtypes.float8_e4m3fn))
    >>> d.nan, d.zero, d.min, d.max, d.mean
    (1, 1, -0.0, 448.0, 149.66666666666666)
    >>> values = np.array([6.0, 1.0, 0.0, 0.0], ml_dtypes.float4_e2m1fn)
    >>> blocks = describe(values, np.array([0.5, 4.0], ml_dtypes.float8_e8m0fnu), block_size=2)
    >>> blocks.saturated, blocks.zero_blocks, blocks.dequantized.max
    (1, 1, 3.0)
    """
    head = check_int(first, "first", kind="SHAPE", maximum=MAX_INT64)
    if scales is not None:
        return _describe_scaled(array, scales, block_size, -1 if axis is None else axis, head)
    if block_size is not None or axis is not None:
        given = "block_size" if block_size is not None else "axis"
        raise KilnError(
            "SHAPE",
            f"{given} is for block-scaled tensors: expected scales with it, found "
            f"{given}={show_value(block_size if block_size is not None else axis)} and no scales",
        )
    row, shape, chunks = _source(array)
    return summarize(row, shape, chunks, head)
