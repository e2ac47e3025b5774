"""What :func:`kiln_np.describe` found: :class:`Description` and its views.

A :class:`Description` is plain data (counts, extremes, moments, the first
elements, the histograms); its views are the text of its ``repr`` and of
``kiln-np inspect``, an HTML table for Jupyter, JSON-ready dicts
(``kiln-np inspect --json``) and a plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from kiln_np._core.checks import U8, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, code_label

from . import plot
from .chunks import row_of_code
from .patterns import bit_values, finfo, pattern_count

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Description", "Number", "html_table", "share"]

Number = int | float
"""A statistic of the elements: a Python int for integer and bool types."""


def _show(value: Number | None) -> str:
    return "-" if value is None else str(value)


def _json_number(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # 'nan', 'inf', '-inf'
    return value


def _python_values(first: np.ndarray) -> list[object]:
    if first.dtype.kind in "biuf":
        return list(first.tolist())
    return list(first.astype(np.float64).tolist())


def _shown(first: np.ndarray) -> list[object]:
    """Values to print: f32 as float32 (its shortest repr, not float64's)."""
    return list(first) if first.dtype == np.float32 else list(first.tolist())


def share(count: int, total: int) -> str:
    """``count`` as a percentage of ``total``, for a table.

    >>> share(1, 3)
    '33.3%'
    """
    return f"{100 * count / total:.1f}%"


def _escape(text: str) -> str:
    # html (and its 2,000-entity table) loads when a notebook first renders HTML.
    import html

    return html.escape(text)


def html_table(rows: list[tuple[str, str]]) -> str:
    """(label, text) rows as an HTML table, left-aligned, escaped.

    >>> html_table([("a", "<b>")]).count("<tr>"), "&lt;b&gt;" in html_table([("a", "<b>")])
    (1, True)
    """
    cells = "".join(
        f"<tr><th style='text-align:left'>{_escape(k)}</th>"
        f"<td style='text-align:left'>{_escape(v)}</td></tr>"
        for k, v in rows
    )
    return f"<table>{cells}</table>"


@set_module("kiln_np")
@dataclass(frozen=True, eq=False)
class Description:
    """What :func:`describe` found in an array.

    Attributes
    ----------
    code : Code
        The Kiln code of the array's dtype (the opaque code of an FNUZ
        float8).
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
        """The spec's short name of the code (``'e2m1'``; ``'float8_e4m3fnuz'``)."""
        return row_of_code(self.code).name

    def rows(self) -> list[tuple[str, str]]:
        """The summary as (label, text) rows: what the repr and the HTML table show
        above the histograms (``kiln-np inspect`` prints them too).

        Examples
        --------
        >>> from kiln_np import describe
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
        if finfo(row_of_code(self.code)) is not None:
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
        >>> from kiln_np import describe
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
                share(int(self.histogram[p]), self.count),
            )
            for p in used.tolist()
        ]

    def _bias(self) -> int:
        return int(finfo(row_of_code(self.code)).maxexp) - 1

    def exponent_label(self, field: int) -> str:
        """What exponent field ``field`` of :attr:`exponents` holds: ``'2^-3'``
        (magnitudes in [2^-3, 2^-2)), ``'0/subnormal'`` or ``'inf/nan'``.

        Examples
        --------
        >>> from kiln_np import describe
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
        >>> from kiln_np import describe
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
                share(int(self.exponents[f]), self.count),
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
        page = html_table(self.rows())
        if self.histogram is not None:
            rows = "".join(
                f"<tr><td>{p}</td><td>{_escape(v)}</td><td>{c}</td><td>{s}</td></tr>"
                for p, v, c, s in self.histogram_rows(16)
            )
            page += (
                "<table><tr><th>pattern</th><th>value</th><th>count</th>"
                f"<th>share</th></tr>{rows}</table>"
            )
        if self.exponents is not None:
            rows = "".join(
                f"<tr><td>{_escape(e)}</td><td>{c}</td><td>{s}</td></tr>"
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
        >>> from kiln_np import describe
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
        >>> from kiln_np import describe
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
                pattern_count(row_of_code(self.code))  # raises the TYPE error
            assert self.histogram is not None
            counts = self.histogram
        if ax is None:
            ax = plot.figure((10, 4) if counts.size > 16 else (7, 4))[1][0]
        if what == "exponents":
            plot.draw_exponents(ax, counts, self._bias(), log)
        else:
            plot.draw_patterns(ax, counts, bit_values(self.dtype), log)
        ax.set_ylabel("count", **plot.PLAIN)
        ax.set_title(
            f"{self.name} ({self.dtype}), shape {self.shape}: {self.count} elements", **plot.PLAIN
        )
        return ax
