"""Looking at what a tensor really holds: summaries and exact bit histograms.

:func:`describe` summarizes an array of any Kiln dtype (counts, stats, first
values, and for types of 8 bits or fewer the histogram of bit patterns);
:func:`bit_histogram` counts each bit pattern exactly and :func:`bit_values`
says what each pattern means, so the counts can be labelled.

numpy's reductions trip over several ml_dtypes types, and the original bits
must never change.  So types of 8 bits or fewer are only counted, pattern by
pattern (``np.bincount`` on the bytes), and their statistics come exactly from
those counts and the value of each pattern; wider types are widened to a
*copy* (float64 for floats, int64/uint64 for integers) one cache-sized chunk
at a time.  Memory stays bounded and a memory-mapped file is read once,
sequentially.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import ml_dtypes
import numpy as np
import numpy.typing as npt

from ._errors import KilnError
from ._files import LazyPayload
from ._checks import show_value as _describe
from ._table import Code, DType, code_label
from ._table import row_for_dtype as _row_for_dtype

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Description", "bit_histogram", "bit_values", "describe"]

CHUNK = 1 << 16
"""Elements per chunk: a float64 widening copy of one chunk (512 KiB) and its
masks stay in cache across the several passes the statistics make."""

_U8 = np.dtype(np.uint8)
_F64 = np.dtype(np.float64)


def _pattern_count(row: DType) -> int:
    """How many bit patterns a type of 8 bits or fewer has; TYPE for wider ones."""
    if row.bits > 8:
        raise KilnError(
            "TYPE",
            f"bit patterns are counted exactly: expected a type of 8 bits or fewer, found "
            f"{code_label(row.code)} ({row.dtype}, {row.bits} bits)",
            code=int(row.code),
        )
    # Only the bytes 0x00 and 0x01 are bools (Kiln rejects any other byte).
    return 2 if row.code == Code.BOOL else 1 << row.bits


def _wide(row: DType) -> np.dtype[Any]:
    """The dtype a chunk is copied to for statistics: exact for every value."""
    dtype = row.dtype
    if dtype.kind == "b":
        return _U8
    try:
        signed = ml_dtypes.iinfo(dtype).min < 0  # type: ignore[no-untyped-call]
    except ValueError:  # not an integer type: numpy or ml_dtypes float
        return _F64
    return np.dtype(np.int64 if signed else np.uint64)


def bit_values(dtype: npt.DTypeLike) -> np.ndarray:
    """The value each bit pattern of a type of 8 bits or fewer means.

    Parameters
    ----------
    dtype : dtype_like
        A Kiln dtype of at most 8 bits: ``float8_e4m3fn``, ``float8_e5m2``,
        ``float8_e8m0fnu``, ``int8``, ``uint8``, ``bool``, ``int4``, ``uint4``,
        ``float4_e2m1fn``.

    Returns
    -------
    numpy.ndarray
        A 1-D array of ``dtype`` whose element ``i`` has bit pattern ``i``:
        16 elements for the 4-bit types, 256 for the 8-bit ones, 2 for bool
        (only the bytes 0x00 and 0x01 are bools).  Index it with the same
        pattern as :func:`bit_histogram` to label counts.

    Raises
    ------
    KilnError
        TYPE for a dtype with no Kiln code or wider than 8 bits.

    Examples
    --------
    >>> import ml_dtypes
    >>> values = bit_values(ml_dtypes.float4_e2m1fn)
    >>> values.dtype
    dtype(float4_e2m1fn)
    >>> values.tolist()
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    """
    row = _row_for_dtype(dtype)
    return np.arange(_pattern_count(row), dtype=_U8).view(row.dtype)


def _array(array: object) -> np.ndarray:
    try:
        return np.asarray(array)
    except (ValueError, TypeError) as exc:  # ragged nesting, a failing __array__
        raise KilnError(
            "TYPE", f"expected an array, cannot make one of {type(array).__name__}: {exc}"
        ) from exc


def _flat_chunks(arr: np.ndarray) -> Iterator[np.ndarray]:
    """C-order 1-D chunks of ``arr``: views when contiguous, small copies otherwise."""
    n = arr.size
    flat = arr.reshape(-1) if arr.flags.c_contiguous else None
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        yield flat[lo:hi] if flat is not None else np.asarray(arr.flat[lo:hi])


class _Patterns:
    """Accumulates exact bit-pattern counts over chunks."""

    def __init__(self, row: DType, shape: tuple[int, ...]) -> None:
        self.row = row
        self.shape = shape
        self.counts = np.zeros(_pattern_count(row), np.int64)
        self.seen = 0

    def add(self, chunk: np.ndarray) -> None:
        storage = np.ascontiguousarray(chunk).view(_U8)
        counts = np.bincount(storage, minlength=self.counts.size)
        if counts.size > self.counts.size:
            index = int(np.flatnonzero(storage >= self.counts.size)[0])
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


def bit_histogram(array: npt.ArrayLike) -> np.ndarray:
    """Exact counts of each bit pattern in an array of 8 bits or fewer per element.

    Parameters
    ----------
    array : array_like
        An array of a Kiln dtype of at most 8 bits (4-bit types as ml_dtypes
        stores them, one element per byte).  It is read, never changed, one
        chunk at a time, so a memory-mapped array needs no extra memory.

    Returns
    -------
    numpy.ndarray
        int64 counts indexed by bit pattern: length 16 for the 4-bit types,
        256 for the 8-bit ones, 2 for bool.  :func:`bit_values` gives the
        value of each index.

    Raises
    ------
    KilnError
        TYPE for something numpy cannot make an array of, a dtype with no
        Kiln code, wider than 8 bits, or a storage byte that is no pattern of
        the type (above 0x0f for 4-bit types, above 0x01 for bool).

    Examples
    --------
    >>> import ml_dtypes
    >>> x = np.array([0.5, 0.5, -6.0], dtype=ml_dtypes.float4_e2m1fn)
    >>> bit_histogram(x)
    array([0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    """
    arr = _array(array)
    patterns = _Patterns(_row_for_dtype(arr.dtype), arr.shape)
    for chunk in _flat_chunks(arr):
        patterns.add(chunk)
    return patterns.counts


Number = int | float


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
    payload_bytes : int
        Bytes of the Kiln payload (4-bit types pack two elements per byte).
    nan, inf, zero : int
        Elements that are NaN, +-infinity, and +-0 (0 for NaN and inf in
        types that have none).
    min, max : int, float or None
        Over the finite elements; ``None`` when there are none.  Python ints
        for integer and bool types, so int64/uint64 extremes are exact.
    mean : float or None
        float64 mean of the finite elements; ``None`` when there are none.
    first : numpy.ndarray
        A copy of the first elements in C order, in ``dtype``.
    histogram : numpy.ndarray or None
        :func:`bit_histogram` of the array for types of 8 bits or fewer.
    """

    code: Code
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    count: int
    payload_bytes: int
    nan: int
    inf: int
    zero: int
    min: Number | None
    max: Number | None
    mean: float | None
    first: np.ndarray
    histogram: np.ndarray | None

    @property
    def name(self) -> str:
        """The spec's short name of the code (``'e2m1'``)."""
        return _row_for_dtype(self.dtype).name

    def _rows(self) -> list[tuple[str, str]]:
        shape = "x".join(map(str, self.shape)) or "() (scalar)"
        more = " ..." if self.count > self.first.size else ""
        return [
            ("code", code_label(int(self.code))),
            ("dtype", str(self.dtype)),
            ("shape", f"{shape} ({self.count} elements)"),
            ("payload", f"{self.payload_bytes} bytes"),
            ("nan / inf / zero", f"{self.nan} / {self.inf} / {self.zero}"),
            ("min / max", f"{_show(self.min)} / {_show(self.max)}"),
            ("mean", _show(self.mean)),
            ("first", " ".join(map(str, self.first.tolist())) + more),
        ]

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
        digits = 1 if self.histogram.size <= 16 else 2
        return [
            (
                f"0x{int(p):0{digits}x}",
                str(values[p]),
                int(self.histogram[p]),
                f"{100 * int(self.histogram[p]) / self.count:.1f}%",
            )
            for p in used.tolist()
        ]

    def __repr__(self) -> str:
        width = max(len(k) for k, _ in self._rows())
        lines = [f"<kiln_np.Description of {self.name} {self.shape}>"]
        lines += [f"  {k.ljust(width)}  {v}" for k, v in self._rows()]
        if self.histogram is not None:
            shown = self.histogram_rows(8)
            used = int(np.count_nonzero(self.histogram))
            lines.append(
                f"  {'histogram'.ljust(width)}  {used} of {self.histogram.size} patterns used"
                + ("; most common:" if shown else "")
            )
            lines += [f"    {p}  {v:>12}  {c:>12}  {s:>6}" for p, v, c, s in shown]
            if used > len(shown):
                lines.append(f"    ... {used - len(shown)} more")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._rows()
        )
        table = f"<table>{cells}</table>"
        if self.histogram is None:
            return table
        rows = "".join(
            f"<tr><td>{p}</td><td>{html.escape(v)}</td><td>{c}</td><td>{s}</td></tr>"
            for p, v, c, s in self.histogram_rows(16)
        )
        return (
            f"{table}<table><tr><th>pattern</th><th>value</th><th>count</th>"
            f"<th>share</th></tr>{rows}</table>"
        )

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data (the ``kiln-np inspect --json`` fields).

        Non-finite floats appear as the strings ``"nan"``, ``"inf"``, ``"-inf"``
        so the result is strict JSON.

        Returns
        -------
        dict
            Keys ``code``, ``name``, ``dtype``, ``shape``, ``count``,
            ``payload_bytes``, ``nan``, ``inf``, ``zero``, ``min``, ``max``,
            ``mean``, ``first``, ``first_bits``, ``histogram``; see
            ``docs/cli.md``.

        Examples
        --------
        >>> describe(np.array([1, 2], np.uint8)).to_dict()["histogram"][:3]
        [0, 1, 1]
        """
        width = max(self.dtype.itemsize, 1)
        bits = self.first.view(f"<u{width}") if width > 1 else self.first.view(_U8)
        return {
            "code": int(self.code),
            "name": self.name,
            "dtype": str(self.dtype),
            "shape": list(self.shape),
            "count": self.count,
            "payload_bytes": self.payload_bytes,
            "nan": self.nan,
            "inf": self.inf,
            "zero": self.zero,
            "min": _json_number(self.min),
            "max": _json_number(self.max),
            "mean": _json_number(self.mean),
            "first": [_json_number(v) for v in _python_values(self.first)],
            "first_bits": [f"0x{int(b):0{2 * width}x}" for b in bits.tolist()],
            "histogram": None if self.histogram is None else self.histogram.tolist(),
        }

    def plot(self, ax: Axes | None = None, *, log: bool = False) -> Axes:
        """Draw the bit-pattern histogram, each bar labelled with its value.

        Needs matplotlib (``pip install kiln-np[plot]``).

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure's axes by default.
        log : bool
            Use a logarithmic count axis (weights often pile up on a few
            patterns).

        Returns
        -------
        matplotlib.axes.Axes
            The axes drawn on.

        Raises
        ------
        KilnError
            TYPE for a type wider than 8 bits (no bit histogram).
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
        """
        if self.histogram is None:
            _pattern_count(_row_for_dtype(self.dtype))  # raises the TYPE error
        assert self.histogram is not None
        try:
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise ImportError(
                "Description.plot needs matplotlib: pip install 'kiln-np[plot]'"
            ) from exc
        if ax is None:
            ax = plt.figure(figsize=(10, 4) if self.histogram.size > 16 else (7, 4)).gca()
        patterns = np.arange(self.histogram.size)
        ax.bar(patterns, self.histogram, width=0.85, log=log)
        values = bit_values(self.dtype)
        # Every pattern labelled for 4-bit types; every 16th for 8-bit ones.
        ticks = patterns if self.histogram.size <= 16 else patterns[::16]
        digits = 1 if self.histogram.size <= 16 else 2
        ax.set_xticks(ticks, [f"{values[t]!s}\n0x{t:0{digits}x}" for t in ticks.tolist()])
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel("value / bit pattern")
        ax.set_ylabel("count")
        ax.set_title(f"{self.name} ({self.dtype}), shape {self.shape}: {self.count} elements")
        return ax


def _show(value: Number | None) -> str:
    return "-" if value is None else str(value)


def _json_number(value: object) -> object:
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)  # 'nan', 'inf', '-inf'
    return value


def _python_values(first: np.ndarray) -> list[object]:
    if first.dtype.kind in "biuf":
        return list(first.tolist())
    return list(first.astype(_F64).tolist())


class _Stats:
    """Accumulates counts, finite min/max and the float64 sum of widened values."""

    def __init__(self, row: DType) -> None:
        self.wide = _wide(row)
        self.nan = self.inf = self.zero = self.finite = 0
        self.total = 0.0
        self.lo: Number | None = None
        self.hi: Number | None = None

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
        lo, hi = wide.min().item(), wide.max().item()
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)
        if weights is None:
            self.total += float(wide.sum(dtype=_F64))
            self.finite += wide.size
        else:
            self.total += float(np.dot(wide.astype(_F64), weights.astype(_F64)))
            self.finite += int(weights.sum())


def _summarize(
    row: DType, shape: tuple[int, ...], chunks: Iterable[np.ndarray], first: int
) -> Description:
    """One pass over C-order 1-D chunks of the array (the CLI feeds file chunks).

    Types of 8 bits or fewer are only counted by bit pattern; their statistics
    then come from the counts and the 256 (or 16) pattern values, exactly, with
    no per-element arithmetic.  Wider types are widened a chunk at a time."""
    stats = _Stats(row)
    patterns = _Patterns(row, shape) if row.bits <= 8 else None
    heads: list[np.ndarray] = []
    taken = 0
    # Callers' chunks may be large (a lazily decoded file): cut them to CHUNK.
    pieces = (c[lo : lo + CHUNK] for c in chunks for lo in range(0, c.size, CHUNK))
    for chunk in pieces:
        if taken < first:
            heads.append(chunk[: first - taken].astype(row.dtype))  # copy, native order
            taken += heads[-1].size
        if patterns is not None:
            patterns.add(chunk)
        else:
            stats.add(stats.widen(chunk))
    if patterns is not None:
        stats.add(stats.widen(bit_values(row.dtype)), patterns.counts)
    count = 1
    for d in shape:
        count *= d
    return Description(
        code=row.code,
        dtype=row.dtype,
        shape=shape,
        count=count,
        payload_bytes=row.byte_length(count),
        nan=stats.nan,
        inf=stats.inf,
        zero=stats.zero,
        min=stats.lo,
        max=stats.hi,
        mean=stats.total / stats.finite if stats.finite else None,
        first=np.concatenate(heads) if heads else np.empty(0, row.dtype),
        histogram=None if patterns is None else patterns.counts,
    )


def describe(array: npt.ArrayLike | LazyPayload, *, first: int = 8) -> Description:
    """Summarize an array of any Kiln dtype without touching its bits.

    Parameters
    ----------
    array : array_like or LazyPayload
        An array of a Kiln dtype: numpy's or ml_dtypes' (bfloat16, float8,
        float4, int4, ...).  Read one chunk at a time, never changed, so a
        memory-mapped array costs no extra memory; a :class:`LazyPayload`
        from :func:`open_payload` is decoded one bounded chunk at a time.
    first : int
        How many leading elements (C order) to keep.

    Returns
    -------
    Description
        Counts of NaN, inf and zero elements, min/max/mean of the finite
        elements, the first elements, and for types of 8 bits or fewer the
        exact bit-pattern histogram.  Its ``repr`` is a readable summary and
        it renders as a table in Jupyter.

    Raises
    ------
    KilnError
        TYPE for something numpy cannot make an array of, a dtype with no
        Kiln code, or a storage byte that is no bit pattern of the type
        (4-bit above 0x0f, bool above 0x01); SHAPE for ``first`` that is not
        an integer >= 0.

    Examples
    --------
    >>> import ml_dtypes
    >>> d = describe(np.array([1.0, -0.0, np.nan, 448.0], ml_dtypes.float8_e4m3fn))
    >>> d.nan, d.zero, d.min, d.max, d.mean
    (1, 1, -0.0, 448.0, 149.66666666666666)
    """
    if isinstance(first, (bool, np.bool_)) or not isinstance(first, (int, np.integer)) or first < 0:
        raise KilnError("SHAPE", f"first must be an integer >= 0, got {_describe(first)}")
    if isinstance(array, LazyPayload):
        chunks: Iterable[np.ndarray] = (c.reshape(-1) for c in array.iter_chunks())
        return _summarize(_row_for_dtype(array.dtype), array.shape, chunks, int(first))
    arr = _array(array)
    row = _row_for_dtype(arr.dtype)
    return _summarize(row, tuple(int(d) for d in arr.shape), _flat_chunks(arr), int(first))
