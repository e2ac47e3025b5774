"""Statistics of every tensor of a checkpoint: :func:`describe_weights` and its
table, :class:`WeightStats`.

``kiln_np.describe(weights)`` reads every tensor of a :class:`~kiln_np.Weights`
once, a bounded chunk at a time, and gives one :class:`TensorStats` row per
tensor.  The definitions, exactly:

- **What is counted.**  A closed code's elements; an FNUZ float8 as its float
  type; a GGML quantized tensor (Q8_0, Q4_K, MXFP4, ...) as its exact
  dequantized float32 values, as llama.cpp computes them, with the range of
  each of its blocks' float scale fields (``d``, ``dmin``, ``m``, MXFP4's
  ``e``; the integer sub-block scales are in ``describe(tensor)``).
  A weight a quantization scheme stores as several tensors is two or more
  rows, each as stored, in the plain view, and one row in the
  :meth:`~kiln_np.Weights.logical` view: its values as the scheme's
  reference computes them (in the reference's own output dtype), with each
  float part's range but the key's (``weight_scale_inv``, ``scales``) in
  ``scales``.  A tensor with no numeric reading
  (complex, a GGML type with no decoder, any other opaque layout) is a row
  with its counts only and a ``note`` saying why.
- **count** is the number of elements; **nan**, **posinf**, **neginf** and
  **zeros** (+0 and -0) count elements exactly.
- **min**, **max**, **absmax**, **mean** and **std** (population) are over the
  *finite* elements (``finite`` of them); ``None`` when there are none.  min,
  max and absmax are exact (Python ints for integer types).  mean and std are
  accumulated in float64 by a stable method: two passes over each cache-sized
  block, blocks merged by Chan, Golub and LeVeque's update in a pairwise
  order, so they agree with numpy's float64 ``mean`` and ``std`` of the whole
  tensor within ``1e-12 * mean(|x|)`` and ``1e-12 * rms(x)`` (tested).  Types
  of 16 bits or fewer other than f16 and bf16 are counted bit pattern by bit
  pattern, and their statistics come exactly from the counts.

f32, bf16, f16 and dequantized values run on the compiled statistics kernel
(``kiln_np._kernels.moments``), a tensor's elements split over the thread
pool; a large tensor is read in rounds of :data:`ROUND` elements, so memory
stays bounded (no copy of a tensor is ever made: the mapped file is read in
place), the ``progress`` callback is called after each round, and Ctrl-C
stops the pass between rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from kiln_np._core.checks import printable, set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code
from kiln_np._kernels import pool
from kiln_np._kernels.moments import Moments, moments
from kiln_np._quants.decode import DECODERS, dequantize_into
from kiln_np._quants.decoder import float_scales
from kiln_np._weights.logical import LogicalTensor, part_type, row_chunks
from kiln_np._weights.summary import human_count, ordered
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

from .chunks import Quantized, quantized, source
from .description import Number, html_table, share
from .pictures import heatmap_figure
from .stats import Summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "HEATMAP_STATS",
    "ROUND",
    "RUN",
    "TensorStats",
    "WeightStats",
    "describe_weights",
    "tensor_stats",
]

ROUND = 1 << 24
"""Elements read per round of a large tensor (64 MiB of f32): between rounds the
``progress`` callback runs and Ctrl-C takes effect."""

_KERNEL_KINDS = {int(Code.F32): "f32", int(Code.BF16): "bf16", int(Code.F16): "f16"}

RUN = 1 << 19
"""Elements of a GGML quantized tensor dequantized at a time by one thread: 2 MiB
of float32 scratch, read again by the statistics kernel from L2 or L3 (smaller
runs measured slower: the per-run calls cost more than the cache saves)."""

Progress = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)``: the payload bytes read so far."""

HEATMAP_STATS = ("std", "absmax", "max", "mean", "zero_fraction", "nan", "posinf", "neginf")
"""What :meth:`WeightStats.heatmap` can colour by (a log scale: cells of values
<= 0 are blank)."""


@set_module("kiln_np")
@dataclass(frozen=True, eq=False)
class TensorStats:
    """One tensor's statistics: a row of :class:`WeightStats`.

    Attributes
    ----------
    name : str
        The tensor's name in the file.
    type : str
        The stored type as the file names it (``'BF16'``, ``'Q4_K'``).
    code : int
        The Kiln code.
    shape : tuple of int
        The element shape (``WeightTensor.shape``).
    count : int
        Elements counted: the values of a GGML quantized tensor, the blocks of
        a tensor with no numeric reading (see ``note``).
    byte_length : int
        The payload's bytes.
    finite : int
        Finite elements (those min, max, mean and std are over).
    min, max, absmax : int, float or None
        Over the finite elements; ``None`` when there are none.
    mean, std : float or None
        Mean and population standard deviation of the finite elements.
    zeros, nan, posinf, neginf : int
        Elements that are +-0, NaN, +inf and -inf.
    scales : Mapping of str to (min, max) or None
        For a GGML quantized tensor, each scale field's range over its finite
        values (``{'d': (2.4e-05, 0.0113), 'dmin': ...}``; None for a field
        with no finite value); empty otherwise.
    note : str or None
        Why a tensor has no statistics (an opaque type with no numeric
        reading); None when it has them.
    """

    name: str
    type: str
    code: int
    shape: tuple[int, ...]
    count: int
    byte_length: int
    finite: int = 0
    min: Number | None = None
    max: Number | None = None
    absmax: Number | None = None
    mean: float | None = None
    std: float | None = None
    zeros: int = 0
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    scales: Mapping[str, tuple[Number, Number] | None] = field(
        default_factory=lambda: MappingProxyType({})
    )
    note: str | None = None

    @property
    def zero_fraction(self) -> float | None:
        """``zeros / count``; None for no elements."""
        return self.zeros / self.count if self.count else None

    def to_record(self) -> dict[str, Any]:
        """The row as JSON-ready data: every attribute, ``shape`` a list,
        ``scales`` a dict of ``[min, max]`` lists, ``zero_fraction`` added,
        and non-finite floats as the strings ``'nan'``, ``'inf'``, ``'-inf'``
        (``mean`` of finite values is finite; a std can round to ``inf`` only
        past the largest float)."""
        return {
            "name": self.name,
            "type": self.type,
            "code": self.code,
            "shape": list(self.shape),
            "count": self.count,
            "byte_length": self.byte_length,
            "finite": self.finite,
            "min": _json(self.min),
            "max": _json(self.max),
            "absmax": _json(self.absmax),
            "mean": _json(self.mean),
            "std": _json(self.std),
            "zeros": self.zeros,
            "zero_fraction": self.zero_fraction,
            "nan": self.nan,
            "posinf": self.posinf,
            "neginf": self.neginf,
            "scales": {k: None if r is None else [r[0], r[1]] for k, r in self.scales.items()},
            "note": self.note,
        }


def _json(value: Number | None) -> Number | str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _g(value: Number | None, width: int = 9) -> str:
    """A statistic in at most ``width`` characters (ints in full when they fit)."""
    if value is None:
        return "-"
    if isinstance(value, int) and len(str(value)) <= width:
        return str(value)
    for digits in (4, 3, 2, 1):
        text = f"{float(value):.{digits}g}"
        if len(text) <= width:
            return text
    return f"{float(value):.0e}"


_COLUMNS = ("type", "count", "min", "max", "mean", "std", "zeros", "nan/inf")


@set_module("kiln_np")
class WeightStats(Sequence[TensorStats]):
    """What :func:`describe` found in every tensor of a checkpoint: one
    :class:`TensorStats` per tensor, in file order (or the order ``describe``'s
    ``sort=`` named).

    A sequence of rows (index by position, or by name with :meth:`row`); its
    ``str`` is a table of every name whole; in a notebook it renders as an
    HTML table; :meth:`to_records` and :meth:`to_json` are JSON-ready (a
    pandas DataFrame is ``pd.DataFrame(stats.to_records())``).

    Attributes
    ----------
    format : str
        The weight format (``'safetensors'``).
    path : str
        The checkpoint's path.
    tensors : tuple of TensorStats
        The rows.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> x = {"a": np.float32([1, -2, np.nan]), "b": np.zeros((2, 2), np.int8)}
    >>> _ = kiln_np.save_weights(d + "/w.safetensors", x, format="safetensors")
    >>> with kiln_np.open_weights(d + "/w.safetensors") as w:
    ...     stats = kiln_np.describe(w)
    >>> [(r.name, r.min, r.max, r.nan, r.zeros) for r in stats]
    [('a', -2.0, 1.0, 1, 0), ('b', 0, 0, 0, 4)]
    >>> stats.row("a").mean, stats.to_records()[1]["zero_fraction"]
    (-0.5, 1.0)
    >>> import shutil; shutil.rmtree(d)
    """

    def __init__(self, tensors: Sequence[TensorStats], *, format: str, path: str) -> None:
        self.tensors = tuple(tensors)
        self.format = format
        self.path = path
        self._by_name = {t.name: t for t in self.tensors}

    @overload
    def __getitem__(self, index: int) -> TensorStats: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TensorStats]: ...
    def __getitem__(self, index: int | slice) -> TensorStats | Sequence[TensorStats]:
        return self.tensors[index]

    def __len__(self) -> int:
        return len(self.tensors)

    def row(self, name: str) -> TensorStats:
        """The row of the tensor ``name``; ``KeyError`` when there is none."""
        return self._by_name[name]

    @property
    def nan(self) -> int:
        """NaN elements in every tensor together."""
        return sum(t.nan for t in self.tensors)

    @property
    def inf(self) -> int:
        """Infinite elements (+inf and -inf) in every tensor together."""
        return sum(t.posinf + t.neginf for t in self.tensors)

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per tensor (:meth:`TensorStats.to_record`)."""
        return [t.to_record() for t in self.tensors]

    def to_json(self) -> dict[str, Any]:
        """``{"weights_format", "path", "tensor_count", "nan", "inf", "tensors":
        [...]}``, JSON-ready (``nan`` and ``inf`` are totals over every tensor)."""
        return {
            "weights_format": self.format,
            "path": self.path,
            "tensor_count": len(self.tensors),
            "nan": self.nan,
            "inf": self.inf,
            "tensors": self.to_records(),
        }

    def _cells(self, t: TensorStats) -> tuple[str, ...]:
        bad = f"{t.nan}/{t.posinf + t.neginf}" if t.nan or t.posinf or t.neginf else "-"
        zeros = share(t.zeros, t.count) if t.count and t.note is None else "-"
        return (
            t.type,
            human_count(t.count).replace(" ", ""),
            _g(t.min),
            _g(t.max),
            _g(t.mean),
            _g(t.std),
            zeros,
            bad,
        )

    def _head(self) -> str:
        nan, inf = self.nan, self.inf
        flagged = f"; {nan:,} NaN and {inf:,} infinite elements" if nan or inf else ""
        return f"statistics of {len(self.tensors):,} tensors ({self.format}){flagged}"

    def __str__(self) -> str:
        """The table: every name whole (shown through
        :func:`~kiln_np._core.checks.printable`), the name column as wide as the
        longest, the statistics in fixed columns after it; a line is as long as
        its name needs."""
        widths = (7, 7, 9, 9, 9, 9, 6, 7)
        names = [printable(t.name) for t in self.tensors]
        name_w = max([12, *map(len, names)])
        head = f"{'name':<{name_w}}" + "".join(
            f" {c:>{w}}" for c, w in zip(_COLUMNS, widths, strict=True)
        )
        lines = [self._head(), head]
        for t, name in zip(self.tensors, names, strict=True):
            cells = self._cells(t)
            line = f"{name:<{name_w}}" + "".join(
                f" {c:>{w}}" for c, w in zip(cells, widths, strict=True)
            )
            lines.append(line if t.note is None else f"{line}  ({printable(t.note)})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<kiln_np WeightStats: {self._head()}>"

    def html_rows(self) -> tuple[list[str], list[list[tuple[str, str]]]]:
        """The table for HTML: the column titles and, per tensor, (text, sort
        key) cells; the sort key is the exact number (``''`` for none), so a
        page can sort numerically."""
        titles = ["name", "type", "count", "min", "max", "mean", "std", "absmax", "zeros"]
        titles += ["NaN", "+inf", "-inf", "scales"]
        rows = []
        for t in self.tensors:

            def num(v: Number | None) -> tuple[str, str]:
                return (_g(v), "" if v is None else repr(float(v)))

            scales = ", ".join(
                f"{k} {'-' if r is None else f'{_g(r[0])}..{_g(r[1])}'}"
                for k, r in t.scales.items()
            )
            fraction = t.zero_fraction
            rows.append(
                [
                    (t.name, t.name),
                    (t.type, t.type),
                    (f"{t.count:,}", str(t.count)),
                    num(t.min),
                    num(t.max),
                    num(t.mean),
                    num(t.std),
                    num(t.absmax),
                    (
                        "-" if fraction is None or t.note else share(t.zeros, t.count),
                        "" if fraction is None else repr(fraction),
                    ),
                    (str(t.nan), str(t.nan)),
                    (str(t.posinf), str(t.posinf)),
                    (str(t.neginf), str(t.neginf)),
                    (scales or (t.note or "-"), scales),
                ]
            )
        return titles, rows

    def heatmap(self, stat: str = "std", *, stack: str | None = None) -> Figure:
        """A per-layer heatmap of ``stat``: rows are layers, columns each
        tensor's role in its layer (``self_attn.q_proj``, ``ffn_down``), the
        colour ``stat`` on a log scale with a labelled colour bar; one panel per
        stack of layers (or only ``stack``).  Names are read as
        ``kiln_np._explore.layers.layer_role`` reads them; experts fold into
        one role, as their largest value; cells with no tensor or a value <= 0,
        NaN or None are blank.  Needs matplotlib.

        Parameters
        ----------
        stat : str
            One of :data:`HEATMAP_STATS`: ``'std'`` (the default), ``'absmax'``,
            ``'max'``, ``'mean'``, ``'zero_fraction'``, ``'nan'``, ``'posinf'``,
            ``'neginf'``.
        stack : str, optional
            Only this stack of layers (``'model.layers'``, ``'blk'``).

        Examples
        --------
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> rows = [TensorStats(f"blk.{i}.{r}.weight", "F32", 2, (4,), 4, 16, std=0.5 + i)
        ...         for i in range(3) for r in ("attn_q", "ffn_up")]
        >>> fig = WeightStats(rows, format="gguf", path="m.gguf").heatmap("std")
        >>> fig.axes[0].images[0].get_array().shape, fig.axes[1].get_ylabel()
        ((3, 2), 'std (log scale)')
        """
        if stat not in HEATMAP_STATS:
            raise KilnError(
                "SHAPE",
                f"heatmap: expected a stat among {', '.join(HEATMAP_STATS)}, found {stat!r}",
            )
        values = [getattr(t, stat) for t in self.tensors]
        return heatmap_figure(
            [t.name for t in self.tensors],
            [None if v is None else float(v) for v in values],
            label=f"{stat} (log scale)",
            title=f"{stat} of each tensor",
            stack=stack,
        )

    def _repr_html_(self) -> str:
        import html  # its entity table loads only when a notebook renders HTML

        titles, rows = self.html_rows()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in titles)
        body = "".join(
            "<tr>"
            + "".join(
                f"<td style='text-align:{'left' if i in (0, 1, 12) else 'right'}'>"
                f"{html.escape(text)}</td>"
                for i, (text, _) in enumerate(cells)
            )
            + "</tr>"
            for cells in rows
        )
        caption = html_table([("statistics", self._head())])
        return f"{caption}<table><tr>{head}</tr>{body}</table>"


def describe_weights(
    weights: Weights, *, progress: Progress | None = None, sort: str | None = None
) -> WeightStats:
    """Statistics of every tensor of ``weights``, in file order or the order
    ``sort`` names (``kiln_np._weights.summary.ordered``; see the module
    docstring for the definitions).

    ``progress(bytes_done, bytes_total)`` is called after each tensor and each
    round of a large one.  A tensor whose bytes are malformed (a bad bool
    byte, a nonzero padding nibble, a file cut short) raises its
    :class:`KilnError`, prefixed with the tensor's name.

    >>> import kiln_np
    >>> from kiln_np._core.payload import payload_info
    >>> t = WeightTensor("w", payload_info("bf16", (2,)), None, "BF16",
    ...                  data=memoryview(bytes([0x80, 0x3F, 0x80, 0xFF])))
    >>> s = describe_weights(Weights([t], format="kiln", metadata={}, path="-", opener=None))
    >>> s[0].max, s[0].neginf, s[0].finite
    (1.0, 1, 1)
    """
    tensors = ordered(weights.values(), "file" if sort is None else sort)
    total = weights.byte_length
    done = 0
    rows = []
    for t in tensors:
        base = done

        def step(nbytes: int, base: int = base) -> None:
            if progress is not None:
                progress(base + nbytes, total)

        try:
            rows.append(tensor_stats(t, step))
        except KilnError as exc:
            raise exc.prefixed(f"tensor {t.name!r}: ") from None
        done += t.byte_length
        if progress is not None:
            progress(done, total)
    return WeightStats(rows, format=weights.format, path=weights.path)


def tensor_stats(t: WeightTensor, step: Callable[[int], None] | None = None) -> TensorStats:
    """One tensor's :class:`TensorStats`; ``step(bytes_done)`` after each round."""
    head: dict[str, Any] = {
        "name": t.name,
        "type": t.format_dtype,
        "code": int(t.code),
        "shape": t.shape,
        "byte_length": t.byte_length,
    }
    if isinstance(t, LogicalTensor):
        return _row(head, *_logical_moments(t, step))
    if t.layout is None and int(t.code) in _KERNEL_KINDS:
        return _row(head, _kernel_moments(t, _KERNEL_KINDS[int(t.code)], step))
    q = quantized(t)
    if q is not None:
        return _row(head, *_quantized_moments(q, step))
    try:
        row, shape, chunks = source(t.payload())
    except KilnError as exc:
        if exc.kind != "TYPE" or t.layout is None:
            raise
        note = f"{t.layout.name}: no numeric reading (opaque blocks)"
        return TensorStats(**head, count=t.size, note=note)
    summary = Summary(row, shape, 0)
    for chunk in chunks:
        summary.add(chunk)
    return _from_summary(head, summary)


def _row(
    head: dict[str, Any],
    m: Moments,
    scales: Mapping[str, tuple[Number, Number] | None] | None = None,
) -> TensorStats:
    lo, hi = m.min, m.max
    absmax = mean = None
    if lo is not None and hi is not None:
        absmax = max(abs(lo), abs(hi))
        mean = min(max(m.mean, lo), hi)  # rounding never leaves the values' range
    return TensorStats(
        **head,
        count=m.count,
        finite=m.finite,
        min=lo,
        max=hi,
        absmax=absmax,
        mean=mean,
        std=m.std,
        zeros=m.zeros,
        nan=m.nan,
        posinf=m.posinf,
        neginf=m.neginf,
        scales=MappingProxyType(dict(scales or {})),
    )


def _kernel_moments(t: WeightTensor, kind: str, step: Callable[[int], None] | None) -> Moments:
    """A f32/bf16/f16 tensor's moments, read in place a round at a time."""
    data = t.payload().data
    itemsize = 4 if kind == "f32" else 2
    t.info.check_length(memoryview(data).nbytes)
    flat = np.frombuffer(data, np.dtype(f"<u{itemsize}"))
    total = Moments.empty()
    for lo in range(0, max(flat.size, 1), ROUND):
        total = total.merge(moments(flat[lo : lo + ROUND], kind))
        if step is not None:
            step(min(lo + ROUND, flat.size) * itemsize)
    return total


_LOGICAL_KINDS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
_FLOAT_PARTS = frozenset({"f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2"})


def _logical_moments(
    t: LogicalTensor, step: Callable[[int], None] | None
) -> tuple[Moments, Mapping[str, tuple[Number, Number] | None]]:
    """A logical tensor's values (its reference's own output dtype), a round of
    whole rows at a time, and the range of each float part but the key (its
    scales)."""
    kind = _LOGICAL_KINDS[t.dtype.name]
    unsigned = np.dtype(f"u{t.dtype.itemsize}")
    total = Moments.empty()
    done = 0
    for chunk in row_chunks(t, None, ROUND):
        total = total.merge(moments(chunk.reshape(-1).view(unsigned), kind))
        done += chunk.size
        if step is not None and t.size:
            step(t.byte_length * done // t.size)
    ranges = _Ranges()
    key = next(iter(t.parts))
    for role, part in t.parts.items():
        if role != key and part_type(part) in _FLOAT_PARTS:
            flat = part.numpy().reshape(-1)
            for lo in range(0, flat.size, RUN):
                ranges.add_fields({role: flat[lo : lo + RUN].astype(np.float64)})
    return total, MappingProxyType(ranges.ranges)


class _Ranges:
    """Per-field running (min, max) of a quantized tensor's finite scales (None
    for a field with no finite value yet)."""

    def __init__(self) -> None:
        self.ranges: dict[str, tuple[Number, Number] | None] = {}

    def add(self, name: str, lo: Number | None, hi: Number | None) -> None:
        old = self.ranges.get(name)
        if lo is None or hi is None:
            self.ranges[name] = old
        elif old is None:
            self.ranges[name] = (lo, hi)
        else:
            self.ranges[name] = (min(lo, old[0]), max(hi, old[1]))

    def add_fields(self, fields: Mapping[str, np.ndarray]) -> None:
        for name, found in fields.items():
            a = found[np.isfinite(found)] if found.dtype.kind == "f" else found
            if a.size:
                self.add(name, a.min().item(), a.max().item())
            else:
                self.add(name, None, None)

    def merge(self, other: _Ranges) -> None:
        for name, found in other.ranges.items():
            self.add(name, *(found or (None, None)))


def _quantized_part(q: Quantized, b0: int, b1: int) -> tuple[Moments, _Ranges]:
    """Blocks ``[b0, b1)`` of ``q``: dequantized a run at a time into one scratch
    buffer, their moments; the scale ranges of all of them at once (a few numpy
    calls on a strided field: per run they would cost as much as decoding, and
    hold the GIL)."""
    block = q.block
    decoder = DECODERS[block.name]
    step = max(1, RUN // block.elements)
    scratch = np.empty(min(step, max(b1 - b0, 1)) * block.elements, np.float32)
    ranges = _Ranges()
    total = Moments.empty()
    for c0 in range(b0, b1, step):
        c1 = min(c0 + step, b1)
        part = scratch[: (c1 - c0) * block.elements]
        dequantize_into(block.name, q.data[c0 * block.bytes : c1 * block.bytes], part)
        total = total.merge(moments(part, "f32"))
    ranges.add_fields(float_scales(decoder, q.data.reshape(-1, block.bytes)[b0:b1]))
    return total, ranges


def _quantized_moments(
    q: Quantized, step: Callable[[int], None] | None
) -> tuple[Moments, Mapping[str, tuple[Number, Number] | None]]:
    """A GGML quantized tensor's values' moments and its scale ranges: rounds of
    blocks, each split over the thread pool."""
    block = q.block
    blocks = q.data.size // block.bytes
    per_round = max(1, ROUND // block.elements)
    total = Moments.empty()
    ranges = _Ranges()
    for r0 in range(0, blocks, per_round):
        r1 = min(r0 + per_round, blocks)

        def part(lo: int, hi: int, r0: int = r0) -> tuple[Moments, _Ranges]:
            return _quantized_part(q, r0 + lo, r0 + hi)

        parts = pool.run_ranges(part, r1 - r0, least=max(1, RUN // block.elements))
        for m, found in parts:
            total = total.merge(m)
            ranges.merge(found)
        if step is not None:
            step(r1 * block.bytes)
    return total, MappingProxyType(ranges.ranges)


def _from_summary(head: dict[str, Any], summary: Summary) -> TensorStats:
    """A row from the statistics engine's pass (the types the kernel does not take):
    its :class:`Description`, with the infinities split by sign."""
    d = summary.result()
    posinf = summary.stats.posinf
    return TensorStats(
        **head,
        count=d.count,
        finite=d.count - d.nan - d.inf,
        min=d.min,
        max=d.max,
        absmax=d.absmax,
        mean=d.mean,
        std=d.std,
        zeros=d.zero,
        nan=d.nan,
        posinf=posinf,
        neginf=d.inf - posinf,
    )
