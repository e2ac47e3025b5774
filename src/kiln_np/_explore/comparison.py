"""Comparing two checkpoints: :func:`compare` and its result, :class:`Comparison`.

Two weight files (paths or opened :class:`~kiln_np.Weights`, any formats on
either side) are compared name by name: the names only in A and only in B,
and for each name in both its shapes, its stored types, whether the stored
bytes are identical and whether the *values* are equal.

What "equal" means, exactly:

- **Same bytes.**  Two tensors of the same stored type (code and layout) and
  block shape whose payload bytes are identical: equal, read a bounded chunk
  at a time (``readinto`` from the files, never the whole tensor), and their
  values are not read again.
- **Values.**  Otherwise each side is read as its values, a bounded chunk at a
  time: a closed code as its elements, an FNUZ float8 as its float type, a
  GGML quantized tensor as its exact dequantized float32 values (so a Q8_0
  tensor compares as the numbers it holds, not as blocks).  Both floats
  (every Kiln float type, f64 included, has at most a 53-bit significand)
  compare as float64, which is exact.  Both integers (bool as 0 and 1)
  compare exactly, as int64 (a u64 above 2**63 - 1 equals only the same
  u64).  An integer against a float compares as float64 (exact for integers
  up to 2**53 in magnitude).
- **NaN** equals NaN in the same place; when their bits differ (same stored
  type: the stored bits; else, f32, bf16 and f16 against each other, the
  float32 bits, to which each widens exactly, a NaN's payload kept; otherwise
  the float64 bits) the place is counted in ``nan_payloads``, not as a
  difference.  **-0 and +0** are equal; such places are counted in
  ``signed_zeros``.
- **Differences**, over the places whose values differ: ``max_abs`` is the
  largest ``|a - b|`` (float64) and ``max_rel`` the largest
  ``|a - b| / max(|a|, |b|)`` (symmetric, at most 2); a place where one side
  is NaN or either side is infinite counts ``inf`` in both.  ``first_index``
  is the first differing place in C order, ``max_abs_index`` and
  ``max_rel_index`` the first place of each maximum, as multi-indices of the
  element shape.
- **Error figures** (A the reference), over the places where both sides are
  finite (``nonfinite`` counts the others, which are left out: one infinity
  would make every figure infinite and say nothing of the rest), from float64
  sums (:mod:`kiln_np._explore.metrics` defines them and their edge cases):
  ``rmse``, ``rel_rmse`` (the RMSE over the RMS of A), ``snr_db`` and
  ``cosine``; for an MX or NVFP4 block-scaled side, ``saturated_a`` or
  ``saturated_b``, how many of its elements hold the element format's largest
  magnitude (None for any other type, including every GGML block type but
  MXFP4 and NVFP4).  They are set whenever the values were read (``compared``), equal
  or not: identical values have RMSE 0, SNR ``inf`` and cosine 1.  Per layer
  and per role, the tensors pooled: :meth:`Comparison.by_layer` and
  :meth:`Comparison.by_role`.
- Tensors of different element shapes are not equal and their values are
  not read; an opaque type with no numeric reading (complex, a GGML type with
  no decoder) is equal only byte for byte.

>>> import numpy as np, os, tempfile, kiln_np
>>> d = tempfile.mkdtemp()
>>> for name, x in [("a", [1, 2, 3]), ("b", [1, 2, 3.5])]:
...     _ = kiln_np.save_weights(f"{d}/{name}", {"w": np.float32(x)}, format="safetensors")
>>> r = compare(d + "/a", d + "/b")
>>> t = r.tensors[0]
>>> r.equal, t.first_index, t.max_abs, t.max_abs_index, round(t.rmse, 4), round(t.cosine, 4)
(False, (2,), 0.5, (2,), 0.2887, 0.9974)
>>> import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln_np._codec import to_numpy
from kiln_np._convert.hf import MappedTensor, readable
from kiln_np._convert.models import ARCHITECTURES, gguf_architecture, pairs
from kiln_np._core.checks import printable, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code
from kiln_np._kernels.differences import Differences, Tally, differences, float_differences
from kiln_np._weights.logical import LogicalTensor, row_chunks
from kiln_np._weights.tensors import WeightTensor, mapped_file
from kiln_np._weights.weights import Weights
from kiln_np.formats import open_weights

from .chunks import source
from .description import html_table
from .metrics import (
    METRICS,
    ErrorSums,
    GroupMetrics,
    group_metrics,
    json_number,
    saturated,
    sort_key,
)

__all__ = ["Comparison", "TensorComparison", "compare"]

BYTE_CHUNK = 1 << 20
"""Bytes read from each side at a time when payload bytes are compared."""
VALUE_CHUNK = 1 << 16
"""Elements of each side compared at a time by numpy (integers, f64, float8)."""
KERNEL_CHUNK = 1 << 22
"""Elements of each side compared at a time by the differences kernel (f32, bf16
and f16 on both sides), split over the thread pool."""
_I64_MAX = np.iinfo(np.int64).max
_KINDS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
_IN_PLACE = frozenset({Code.F32, Code.BF16, Code.F16})
_FIGURES = ("rmse", "rel_rmse", "snr_db", "cosine", "max_abs", "max_rel")


@dataclass(frozen=True)
class TensorComparison:
    """One name held by both sides, compared (see :mod:`kiln_np._explore.comparison`
    for the definitions, :mod:`kiln_np._explore.metrics` for the error figures).

    Attributes
    ----------
    name : str
    shape_a, shape_b : tuple of int
        The element shapes.
    type_a, type_b : str
        The stored types: the Kiln name of a closed code (``'bf16'``), the
        layout's name otherwise (``'ggml.q8_0'``).
    same_bytes : bool
        Same stored type, block shape and payload bytes.
    equal : bool
        The same numbers in the same places (NaN equal to NaN, -0 to +0).
    compared : bool
        Whether the values were read: False when the shapes differ, the bytes
        were identical, or a side has no numeric reading.
    mismatches : int
        Places whose values differ.
    rmse, rel_rmse, snr_db, cosine : float or None
        The error figures of B against A over the places finite on both sides;
        None when the values were not read.
    max_abs, max_rel : float or None
        Over the differing places; None when there are none.
    max_abs_index, max_rel_index : tuple of int or None
        The first place of each maximum, in C order.
    first_index : tuple of int or None
        The first differing place, in C order.
    nonfinite : int
        Places left out of the error figures: NaN or infinite on a side.
    saturated_a, saturated_b : int or None
        For a side whose values were read and which is MX or NVFP4 block-scaled,
        its elements at the element format's largest magnitude; else None.
    nan_payloads, signed_zeros : int
        Places equal as NaN with different bits, and equal zeros of different signs.
    note : str
        Why the values were not compared, or ``''``.
    sums : ErrorSums or None
        The sums behind the error figures (what the per-layer and per-role
        aggregates pool); None when the values were not read.  Not in
        :meth:`to_record`.
    """

    name: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    type_a: str
    type_b: str
    same_bytes: bool
    equal: bool
    compared: bool
    mismatches: int = 0
    rmse: float | None = None
    rel_rmse: float | None = None
    snr_db: float | None = None
    cosine: float | None = None
    max_abs: float | None = None
    max_abs_index: tuple[int, ...] | None = None
    max_rel: float | None = None
    max_rel_index: tuple[int, ...] | None = None
    first_index: tuple[int, ...] | None = None
    nonfinite: int = 0
    saturated_a: int | None = None
    saturated_b: int | None = None
    nan_payloads: int = 0
    signed_zeros: int = 0
    note: str = ""
    sums: ErrorSums | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        """``'same bytes'``, ``'equal'`` (values), or what differs."""
        if self.same_bytes:
            return "same bytes"
        if self.equal:
            return "equal"
        if self.shape_a != self.shape_b:
            return "shape differs"
        return "DIFFERENT"

    @property
    def saturated(self) -> int | None:
        """``saturated_a`` and ``saturated_b`` added, None when neither is counted."""
        counts = [n for n in (self.saturated_a, self.saturated_b) if n is not None]
        return sum(counts) if counts else None

    def figure(self, metric: str) -> float | None:
        """The value of one of :data:`~kiln_np._explore.metrics.METRICS`."""
        value: float | None = getattr(self, metric)
        return value

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (strict JSON: ``inf``, ``-inf`` and NaN as the strings
        ``'inf'``, ``'-inf'``, ``'nan'``), without ``sums``."""
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del record["sums"]
        for key in ("shape_a", "shape_b", "first_index", "max_abs_index", "max_rel_index"):
            if record[key] is not None:
                record[key] = list(record[key])
        for key in _FIGURES:
            record[key] = json_number(record[key])
        record["status"] = self.status
        return record


@set_module("kiln_np")
@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found.

    Attributes
    ----------
    a, b : str
        The two paths compared.
    only_a, only_b : tuple of str
        Names held by one side only, in that side's order.
    tensors : tuple of TensorComparison
        Every name held by both, in A's order (worst first by ``sort``).
    sort : str or None
        The figure the tensors and the aggregates are sorted by
        (:meth:`sorted`), None for A's order.
    names : str
        How the tensors were paired: ``"raw"``, by their names; ``"map"``, a
        GGUF's through the model map with a Hugging Face checkpoint's (its
        names are the checkpoint's, its values the GGUF's as the checkpoint
        holds them: rows out of llama.cpp's rope order, experts unstacked,
        gemma's norms minus 1).
    """

    a: str
    b: str
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    tensors: tuple[TensorComparison, ...]
    sort: str | None = None
    names: str = "raw"

    @property
    def equal(self) -> bool:
        """Both sides hold the same names and every tensor is equal."""
        return not self.only_a and not self.only_b and all(t.equal for t in self.tensors)

    def differences(self) -> list[TensorComparison]:
        """The tensors not equal, or equal with NaN bits or zero signs that differ."""
        return [t for t in self.tensors if not t.equal or t.nan_payloads or t.signed_zeros]

    def sorted(self, metric: str) -> Comparison:
        """The same comparison, its tensors and aggregates worst first by ``metric``:
        one of ``rmse``, ``rel_rmse``, ``snr_db``, ``cosine``, ``max_abs``,
        ``max_rel``, ``saturated``, ``mismatches`` (smallest first for ``snr_db`` and
        ``cosine``, largest first for the others; a NaN figure first, a tensor
        without the figure last; ties in A's order).

        Raises
        ------
        KilnError
            TYPE for another ``metric``.
        """
        if metric not in METRICS:
            raise KilnError(
                "TYPE",
                f"sort: expected one of {', '.join(METRICS)}, found {show_value(metric)}",
            )
        ordered = sorted(self.tensors, key=lambda t: sort_key(metric, t.figure(metric)))
        return dataclasses.replace(self, tensors=tuple(ordered), sort=metric)

    def by_layer(self) -> list[GroupMetrics]:
        """The error figures of each layer, its compared tensors pooled
        (:func:`~kiln_np._explore.metrics.group_metrics`), by stack and index, or
        worst first by ``sort``."""
        return self._sorted_groups(group_metrics(self.tensors)[0])

    def by_role(self) -> list[GroupMetrics]:
        """The error figures of each role (``model.layers.*.self_attn.q_proj``), its
        compared tensors pooled, in the order roles first occur, or worst first by
        ``sort``."""
        return self._sorted_groups(group_metrics(self.tensors)[1])

    def _sorted_groups(self, groups: list[GroupMetrics]) -> list[GroupMetrics]:
        metric = self.sort
        if metric is None:
            return groups
        return sorted(groups, key=lambda g: sort_key(metric, getattr(g, metric)))

    def summary(self) -> str:
        """One line: how many names, equal, different, only on one side."""
        same = sum(t.same_bytes for t in self.tensors)
        equal = sum(t.equal for t in self.tensors)
        verdict = "equal" if self.equal else "different"
        paired = ", paired through the model map" if self.names == "map" else ""
        return (
            f"{verdict}: {len(self.tensors)} tensors in both ({same} same bytes, "
            f"{equal - same} equal values, {len(self.tensors) - equal} different), "
            f"{len(self.only_a)} only in A, {len(self.only_b)} only in B{paired}"
        )

    def _rows(self, every: bool) -> list[list[str]]:
        blank = [""] * 8
        rows = [[n, "only in A", *blank, ""] for n in self.only_a]
        rows += [[n, "only in B", *blank, ""] for n in self.only_b]
        for t in self.tensors if every else self.differences():
            notes = [t.note] if t.note and t.shape_a == t.shape_b else []
            if t.type_a != t.type_b:
                notes.append(f"{t.type_a} vs {t.type_b}")
            if t.shape_a != t.shape_b:
                notes.append(f"{_shape(t.shape_a)} vs {_shape(t.shape_b)}")
            if t.mismatches:
                notes.append(f"{t.mismatches} differ")
            if t.nonfinite:
                notes.append(f"{t.nonfinite} NaN/inf left out")
            if t.nan_payloads:
                notes.append(f"{t.nan_payloads} NaN bits differ")
            if t.signed_zeros:
                notes.append(f"{t.signed_zeros} -0/+0")
            first = "" if t.first_index is None else _shape(t.first_index)
            rows.append(
                [
                    t.name,
                    t.status,
                    *_figures(t),
                    first,
                    _saturation(t.saturated_a, t.saturated_b),
                    ", ".join(notes),
                ]
            )
        return rows

    def text(self, every: bool = False) -> str:
        """A table (only the differences unless ``every``; a column of figures only
        when a row has one), the per-layer and per-role aggregates when a tensor
        with a layer index was compared, then :meth:`summary`.  Nothing is cut:
        every name whole (shown through :func:`~kiln_np._core.checks.printable`),
        each column as wide as its widest cell, a line as long as its row needs."""
        head = ["name", "status", *_HEADS, "first", "saturated", "notes"]
        blocks = [_columns(head, self._rows(every), keep=(0, 1, len(head) - 1))]
        for label, groups in (("layer", self.by_layer()), ("role", self.by_role())):
            if groups:
                rows = [[g.name, str(g.tensors), *_figures(g), _count(g.saturated)] for g in groups]
                head = [label, "tensors", *_HEADS[:4], "max abs", "max rel", "saturated"]
                blocks.append(_columns(head, rows, (0, 1)))
        return "\n".join([*(b for b in blocks if b), self.summary()])

    def __str__(self) -> str:
        return self.text()

    def to_records(self) -> list[dict[str, Any]]:
        """A dict per name: the tensors in both, then those only in A, only in B."""
        records = [t.to_record() for t in self.tensors]
        records += [{"name": n, "status": "only in A"} for n in self.only_a]
        records += [{"name": n, "status": "only in B"} for n in self.only_b]
        return records

    def to_json(self) -> dict[str, Any]:
        """The whole comparison as one JSON-ready dict."""
        return {
            "a": self.a,
            "b": self.b,
            "equal": self.equal,
            "sort": self.sort,
            "names": self.names,
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "tensors": [t.to_record() for t in self.tensors],
            "by_layer": [g.to_record() for g in self.by_layer()],
            "by_role": [g.to_record() for g in self.by_role()],
        }

    def _repr_html_(self) -> str:
        rows = [(r[0], " | ".join(c for c in r[1:] if c)) for r in self._rows(every=False)]
        return f"<p>{self.summary()}</p>" + (html_table(rows) if rows else "")


_HEADS = ("rmse", "rel rmse", "SNR dB", "cosine", "max abs (at)", "max rel (at)")


def _figures(x: TensorComparison | GroupMetrics) -> list[str]:
    """The cells of the six figures (a maximum with its place when there is one)."""
    cells = [_number(x.rmse), _number(x.rel_rmse), _number(x.snr_db)]
    cells.append("" if x.cosine is None else f"{x.cosine:.7g}")
    for value, at in (
        (x.max_abs, getattr(x, "max_abs_index", None)),
        (x.max_rel, getattr(x, "max_rel_index", None)),
    ):
        cells.append(_number(value) + ("" if at is None else f" {_shape(at)}"))
    return cells


def _columns(head: list[str], rows: list[list[str]], keep: tuple[int, ...]) -> str:
    """``rows`` under ``head``, left-aligned, the columns empty in every row left
    out but those of ``keep``; ``''`` for no row."""
    if not rows:
        return ""
    rows = [[printable(cell) for cell in r] for r in rows]
    shown = [i for i in range(len(head)) if i in keep or any(r[i] for r in rows)]
    widths = {i: max(len(r[i]) for r in [head, *rows]) for i in shown}
    return "\n".join(
        "  ".join(r[i].ljust(widths[i]) for i in shown).rstrip() for r in [head, *rows]
    )


def _saturation(a: int | None, b: int | None) -> str:
    return ", ".join(f"{n} in {side}" for side, n in (("A", a), ("B", b)) if n is not None)


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


@set_module("kiln_np")
def compare(
    a: Weights | str | os.PathLike[str],
    b: Weights | str | os.PathLike[str],
    *,
    names: str = "map",
) -> Comparison:
    """Compare two weight files, name by name (see the module for what is equal).

    ``a`` and ``b`` are paths (opened with :func:`kiln_np.open_weights` and
    closed again) or opened :class:`~kiln_np.Weights`, of any formats.  Memory
    stays bounded: a chunk of each side at a time.

    ``names="map"`` (the default): when one side is a GGUF of an architecture of
    the model map (llama, qwen2, qwen3, qwen3moe, gemma3, phi3, mixtral, gemma2,
    qwen2moe) and the other is not a GGUF, the GGUF's tensors are paired with the
    checkpoint's through the map, each read as the checkpoint holds it (``docs/weights.md``); a GGUF
    tensor the map has no name for is listed on its side alone, and what the
    converter generated from the config (``rope_freqs``) is left out.
    ``names="raw"``: by the names as they are.

    Raises
    ------
    KilnError
        TYPE when ``a`` or ``b`` is neither a path nor a :class:`~kiln_np.Weights`,
        or ``names`` is neither; as :func:`kiln_np.open_weights` and the tensors'
        decoders raise (a payload whose bool bytes or padding are invalid: TYPE).
    """
    if names not in ("map", "raw"):
        raise KilnError("TYPE", f"expected names 'map' or 'raw', found {show_value(names)}")
    wa, close_a = _opened(a)
    try:
        wb, close_b = _opened(b)
        try:
            return _compare(wa, wb, names)
        finally:
            if close_b:
                wb.close()
    finally:
        if close_a:
            wa.close()


def _opened(x: Weights | str | os.PathLike[str]) -> tuple[Weights, bool]:
    if isinstance(x, Weights):
        return x, False
    if not isinstance(x, (str, os.PathLike)):
        raise KilnError("TYPE", f"expected a path or a kiln_np.Weights, found {show_value(x)}")
    return open_weights(x), True


Side = tuple[dict[str, Any], list[str]]
"""One side's tensors by the name they are paired under, and its tensors paired
with none (a GGUF's the model map has no name for)."""


def _compare(wa: Weights, wb: Weights, names: str) -> Comparison:
    mapped_b = _through_map(wb) if names == "map" and wa.format != "gguf" else None
    mapped_a = (
        _through_map(wa) if names == "map" and wb.format != "gguf" and mapped_b is None else None
    )
    (a, left_a), (b, left_b) = (
        mapped_a or (dict(wa.items()), []),
        mapped_b or (dict(wb.items()), []),
    )
    both = [n for n in a if n in b]
    return Comparison(
        wa.path,
        wb.path,
        (*(n for n in a if n not in b), *left_a),
        (*(n for n in b if n not in a), *left_b),
        tuple(compare_tensors(a[n], b[n]) for n in both),
        names="raw" if mapped_a is None and mapped_b is None else "map",
    )


def _through_map(w: Weights) -> Side | None:
    """A GGUF's tensors as the Hugging Face checkpoint's, through the model map
    (float32 values), when it is a GGUF of a mapped architecture; else None."""
    if w.format != "gguf" or not any(
        a.gguf == w.metadata.get("general.architecture") for a in ARCHITECTURES
    ):
        return None
    arch = gguf_architecture(w.metadata, w)
    made, _, unmapped = pairs(arch, {n: t.shape for n, t in w.items()}, w.metadata)
    tensors = {p.hf: MappedTensor(p, w[p.gguf], Code.F32) for p in made if readable(w[p.gguf])}
    # a GGML type with no decoder has no values to compare: on its side alone
    unmapped += [p.gguf for p in made if p.hf not in tensors]
    return tensors, list(dict.fromkeys(unmapped))


def _type(t: WeightTensor | MappedTensor) -> str:
    if isinstance(t, MappedTensor):  # the GGUF tensor's own type
        return t.source.info.element.name
    if isinstance(t, LogicalTensor):
        return t.scheme
    return t.info.element.name


def compare_tensors(
    a: WeightTensor | MappedTensor, b: WeightTensor | MappedTensor
) -> TensorComparison:
    """Compare two tensors (``a``'s name names the result; a :class:`MappedTensor`
    is a GGUF tensor as the model map makes it of the Hugging Face one).

    >>> from kiln_np._core.payload import payload_info
    >>> t = WeightTensor("w", payload_info(2, (2,)), None, "F32", data=memoryview(bytes(8)))
    >>> compare_tensors(t, t).status
    'same bytes'
    """
    base: dict[str, Any] = {
        "name": a.name,
        "shape_a": a.shape,
        "shape_b": b.shape,
        "type_a": _type(a),
        "type_b": _type(b),
    }
    if isinstance(a, MappedTensor) or isinstance(b, MappedTensor):
        same_type = same = False  # read as values
    elif isinstance(a, LogicalTensor) or isinstance(b, LogicalTensor):
        same_type = _same_parts(a, b)
        same = same_type
    else:
        same_type = a.code == b.code and a.layout == b.layout and a.info.shape == b.info.shape
        same = same_type and _same_bytes(a, b)
    if same:
        return TensorComparison(**base, same_bytes=True, equal=True, compared=False)
    if a.shape != b.shape:
        return TensorComparison(
            **base, same_bytes=False, equal=False, compared=False, note="shapes differ"
        )
    try:
        chunks_a, chunks_b = _values(a), _values(b)
    except KilnError:  # a type with no numeric reading: only its bytes compare
        return TensorComparison(
            **base, same_bytes=False, equal=False, compared=False, note="no numeric reading"
        )
    d = _compare_values(math.prod(a.shape), chunks_a, chunks_b, same_type)
    sums = ErrorSums(d.count - d.nonfinite, d.aa, d.bb, d.ab, d.dd)

    def place(at: int) -> tuple[int, ...] | None:
        return None if at < 0 else tuple(int(i) for i in np.unravel_index(at, a.shape))

    return TensorComparison(
        **base,
        same_bytes=False,
        equal=d.differ == 0,
        compared=True,
        mismatches=d.differ,
        rmse=sums.rmse,
        rel_rmse=sums.rel_rmse,
        snr_db=sums.snr_db,
        cosine=sums.cosine,
        max_abs=d.max_abs if d.differ else None,
        max_abs_index=place(d.max_abs_at),
        max_rel=d.max_rel if d.differ else None,
        max_rel_index=place(d.max_rel_at),
        first_index=place(d.first),
        nonfinite=d.nonfinite,
        saturated_a=saturated(a) if isinstance(a, WeightTensor) else None,
        saturated_b=saturated(b) if isinstance(b, WeightTensor) else None,
        nan_payloads=d.nan_bits,
        signed_zeros=d.signed_zeros,
        sums=sums,
    )


def _values(t: WeightTensor | MappedTensor) -> Iterator[np.ndarray]:
    """``t``'s values as 1-D chunks in C order: an f32, bf16 or f16 payload whole,
    read in place (a view of the mapped file); a mapped tensor's float32 runs
    (copied: the writer reuses its buffers); else as :func:`~.chunks.source`
    reads it."""
    if isinstance(t, MappedTensor):
        return (chunk.reshape(-1).copy() for chunk in t.chunks(KERNEL_CHUNK))
    if isinstance(t, LogicalTensor):
        return (chunk.reshape(-1) for chunk in row_chunks(t, None, KERNEL_CHUNK))
    payload = t.payload()
    if payload.layout is None and payload.code in _IN_PLACE:
        return iter([to_numpy(payload.code, payload.data, (t.info.count,))])
    _, _, chunks = source(payload)
    return iter(chunks)


def _same_parts(a: WeightTensor, b: WeightTensor) -> bool:
    """Whether two logical tensors are one scheme with the same parts' bytes."""
    if not (isinstance(a, LogicalTensor) and isinstance(b, LogicalTensor)):
        return False
    if a.scheme != b.scheme or a.plan != b.plan or list(a.parts) != list(b.parts):
        return False
    return all(
        pa.code == pb.code and pa.info.shape == pb.info.shape and _same_bytes(pa, pb)
        for pa, pb in zip(a.parts.values(), b.parts.values(), strict=True)
    )


def _same_bytes(a: WeightTensor, b: WeightTensor) -> bool:
    """Whether the payloads' bytes are identical, read a chunk of each at a time."""
    n = a.byte_length
    if n != b.byte_length:
        return False
    with _ByteReader(a) as ra, _ByteReader(b) as rb:
        for lo in range(0, n, BYTE_CHUNK):
            m = min(BYTE_CHUNK, n - lo)
            if ra.read(lo, m) != rb.read(lo, m):
                return False
    return True


class _ByteReader:
    """A tensor's payload bytes: read with ``readinto`` from its file into one
    reused buffer, or sliced from memory."""

    def __init__(self, t: WeightTensor) -> None:
        self._t = t
        self._file: io.RawIOBase | None = None
        self._opened: Any = None
        self._buffer = bytearray()
        self._memory: memoryview | None = None

    def __enter__(self) -> _ByteReader:
        file = mapped_file(self._t)
        if file is None:
            self._memory = self._t.payload().data.cast("B")
        else:
            self._opened = file.opened(self._t.offset + self._t.byte_length)
            self._file = self._opened.__enter__()
            self._buffer = bytearray(min(BYTE_CHUNK, self._t.byte_length))
        return self

    def read(self, lo: int, n: int) -> bytes | bytearray:
        if self._memory is not None:
            return bytes(self._memory[lo : lo + n])
        assert self._file is not None
        view = memoryview(self._buffer)[:n]  # bytearrays compare with memcmp
        self._file.seek(self._t.offset + lo)
        done = 0
        while done < n:
            got = self._file.readinto(view[done:])
            if not got:
                return bytes(view[:done])  # shrank since it was opened: cannot be equal
            done += got
        return self._buffer if n == len(self._buffer) else bytes(view)

    def __exit__(self, *exc: object) -> None:
        if self._opened is not None:
            self._opened.__exit__(None, None, None)


class _Aligned:
    """Chunks of one side, handed out as views: :meth:`head` is the rest of the
    current chunk, :meth:`take` cuts its first ``n`` off."""

    def __init__(self, chunks: Iterator[np.ndarray]) -> None:
        self._chunks = chunks
        self._rest = np.empty(0)

    def head(self) -> np.ndarray:
        while self._rest.size == 0:
            self._rest = next(self._chunks).reshape(-1)
        return self._rest

    def take(self, n: int) -> np.ndarray:
        part = self._rest[:n]
        self._rest = self._rest[n:]
        return np.ascontiguousarray(part)


def _kind(x: np.ndarray) -> str | None:
    """The differences kernel's kind of ``x``'s elements, or None for numpy's way."""
    return _KINDS.get(x.dtype.name) if x.dtype.isnative else None


def _int_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact equality of two integer (or bool) chunks."""
    if a.dtype == b.dtype:
        return np.asarray(a == b)
    big_a = a > _I64_MAX if a.dtype == np.uint64 else None
    big_b = b > _I64_MAX if b.dtype == np.uint64 else None
    eq = np.asarray(a.astype(np.int64) == b.astype(np.int64))
    for big in (big_a, big_b):
        if big is not None:
            eq &= ~big
    return eq


def _compare_values(
    total: int, chunks_a: Iterator[np.ndarray], chunks_b: Iterator[np.ndarray], same_type: bool
) -> Differences:
    """Both sides' values, a run of each at a time as long as both current chunks
    allow (no copy): two f32, bf16 or f16 runs on the differences kernel, any others
    in float64 by numpy (integers compared exactly first)."""
    ra, rb = _Aligned(chunks_a), _Aligned(chunks_b)
    tally = Tally()
    lo = 0
    while lo < total:
        head_a, head_b = ra.head(), rb.head()
        kind_a, kind_b = _kind(head_a), _kind(head_b)
        if kind_a is not None and kind_b is not None:
            n = min(total - lo, head_a.size, head_b.size, KERNEL_CHUNK)
            found = differences(_bits(ra.take(n)), kind_a, _bits(rb.take(n)), kind_b)
        else:
            n = min(total - lo, head_a.size, head_b.size, VALUE_CHUNK)
            found = _numpy_values(ra.take(n), rb.take(n), same_type)
        tally.add(found.shifted(lo))
        lo += n
    return tally.total()


def _bits(x: np.ndarray) -> np.ndarray:
    """``x``'s elements as unsigned integers of their size (ml_dtypes' types have no
    buffer format)."""
    return x.view(f"u{x.dtype.itemsize}")


def _numpy_values(a: np.ndarray, b: np.ndarray, same_type: bool) -> Differences:
    """Two runs compared in float64 by numpy; two integer runs' equality exactly."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        return float_differences(x, y, equal=_int_equal(a, b))
    return float_differences(x, y, bits=(a, b) if same_type else None)
