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
  type: the stored bits; else the float64 bits) the place is counted in
  ``nan_payloads``, not as a difference.  **-0 and +0** are equal; such
  places are counted in ``signed_zeros``.
- **Differences**, over the places whose values differ: ``max_abs`` is the
  largest ``|a - b|`` (float64) and ``max_rel`` the largest
  ``|a - b| / max(|a|, |b|)`` (symmetric, at most 2); a place where one side
  is NaN or either side is infinite counts ``inf`` in both.  ``first_index``
  is the first differing place in C order, as a multi-index of the element
  shape.
- Tensors of different element shapes are not equal and their values are
  not read; an opaque type with no numeric reading (complex, a GGML type with
  no decoder) is equal only byte for byte.

>>> import numpy as np, os, tempfile, kiln_np
>>> d = tempfile.mkdtemp()
>>> for name, x in [("a", [1, 2, 3]), ("b", [1, 2, 3.5])]:
...     _ = kiln_np.save_weights(f"{d}/{name}", {"w": np.float32(x)}, format="safetensors")
>>> r = compare(d + "/a", d + "/b")
>>> r.equal, r.tensors[0].first_index, r.tensors[0].max_abs
(False, (2,), 0.5)
>>> import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from kiln_np._core.checks import printable, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._weights.logical import LogicalTensor, row_chunks
from kiln_np._weights.tensors import WeightTensor, mapped_file
from kiln_np._weights.weights import Weights
from kiln_np.formats import open_weights

from .chunks import source
from .description import html_table

__all__ = ["Comparison", "TensorComparison", "compare"]

BYTE_CHUNK = 1 << 20
"""Bytes read from each side at a time when payload bytes are compared."""
VALUE_CHUNK = 1 << 16
"""Elements of each side compared at a time."""
_I64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class TensorComparison:
    """One name held by both sides, compared (see :mod:`kiln_np._explore.comparison`
    for the definitions).

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
    max_abs, max_rel : float or None
        Over the differing places; None when there are none.
    first_index : tuple of int or None
        The first differing place, in C order.
    nan_payloads, signed_zeros : int
        Places equal as NaN with different bits, and equal zeros of different signs.
    note : str
        Why the values were not compared, or ``''``.
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
    max_abs: float | None = None
    max_rel: float | None = None
    first_index: tuple[int, ...] | None = None
    nan_payloads: int = 0
    signed_zeros: int = 0
    note: str = ""

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

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (strict JSON: infinities as the strings ``'inf'``)."""
        record = asdict(self)
        for key in ("shape_a", "shape_b", "first_index"):
            if record[key] is not None:
                record[key] = list(record[key])
        for key in ("max_abs", "max_rel"):
            value = record[key]
            if value is not None and not math.isfinite(value):
                record[key] = str(value)
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
        Every name held by both, in A's order.
    """

    a: str
    b: str
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    tensors: tuple[TensorComparison, ...]

    @property
    def equal(self) -> bool:
        """Both sides hold the same names and every tensor is equal."""
        return not self.only_a and not self.only_b and all(t.equal for t in self.tensors)

    def differences(self) -> list[TensorComparison]:
        """The tensors not equal, or equal with NaN bits or zero signs that differ."""
        return [t for t in self.tensors if not t.equal or t.nan_payloads or t.signed_zeros]

    def summary(self) -> str:
        """One line: how many names, equal, different, only on one side."""
        same = sum(t.same_bytes for t in self.tensors)
        equal = sum(t.equal for t in self.tensors)
        verdict = "equal" if self.equal else "different"
        return (
            f"{verdict}: {len(self.tensors)} tensors in both ({same} same bytes, "
            f"{equal - same} equal values, {len(self.tensors) - equal} different), "
            f"{len(self.only_a)} only in A, {len(self.only_b)} only in B"
        )

    def _rows(self, every: bool) -> list[list[str]]:
        rows = [[n, "only in A", "", "", "", ""] for n in self.only_a]
        rows += [[n, "only in B", "", "", "", ""] for n in self.only_b]
        for t in self.tensors if every else self.differences():
            notes = [t.note] if t.note and t.shape_a == t.shape_b else []
            if t.type_a != t.type_b:
                notes.append(f"{t.type_a} vs {t.type_b}")
            if t.shape_a != t.shape_b:
                notes.append(f"{_shape(t.shape_a)} vs {_shape(t.shape_b)}")
            if t.mismatches:
                notes.append(f"{t.mismatches} differ")
            if t.nan_payloads:
                notes.append(f"{t.nan_payloads} NaN bits differ")
            if t.signed_zeros:
                notes.append(f"{t.signed_zeros} -0/+0")
            first = "" if t.first_index is None else _shape(t.first_index)
            rows.append(
                [t.name, t.status, _number(t.max_abs), _number(t.max_rel), first, ", ".join(notes)]
            )
        return rows

    def text(self, every: bool = False) -> str:
        """A table (only the differences unless ``every``; the difference
        columns only when a row has them), then :meth:`summary`.  Nothing is
        cut: every name whole (shown through
        :func:`~kiln_np._core.checks.printable`), each column as wide as its
        widest cell, a line as long as its row needs."""
        head = ["name", "status", "max abs", "max rel", "first", "notes"]
        rows = [[printable(cell) for cell in r] for r in self._rows(every)]
        if not rows:
            return self.summary()
        shown = [i for i in range(6) if i < 2 or i == 5 or any(r[i] for r in rows)]
        widths = {i: max(len(r[i]) for r in [head, *rows]) for i in shown}
        lines = []
        for r in [head, *rows]:
            cells = [r[i].ljust(widths[i]) for i in shown[:-1]]
            lines.append(("  ".join(cells) + "  " + r[5]).rstrip())
        return "\n".join([*lines, self.summary()])

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
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "tensors": [t.to_record() for t in self.tensors],
        }

    def _repr_html_(self) -> str:
        rows = [(r[0], " | ".join(c for c in r[1:] if c)) for r in self._rows(every=False)]
        return f"<p>{self.summary()}</p>" + (html_table(rows) if rows else "")


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


@set_module("kiln_np")
def compare(a: Weights | str | os.PathLike[str], b: Weights | str | os.PathLike[str]) -> Comparison:
    """Compare two weight files, name by name (see the module for what is equal).

    ``a`` and ``b`` are paths (opened with :func:`kiln_np.open_weights` and
    closed again) or opened :class:`~kiln_np.Weights`, of any formats.  Memory
    stays bounded: a chunk of each side at a time.

    Raises
    ------
    KilnError
        TYPE when ``a`` or ``b`` is neither a path nor a :class:`~kiln_np.Weights`;
        as :func:`kiln_np.open_weights` and the tensors' decoders raise (a
        payload whose bool bytes or padding are invalid: TYPE).
    """
    wa, close_a = _opened(a)
    try:
        wb, close_b = _opened(b)
        try:
            return _compare(wa, wb)
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


def _compare(wa: Weights, wb: Weights) -> Comparison:
    both = [n for n in wa if n in wb]
    return Comparison(
        wa.path,
        wb.path,
        tuple(n for n in wa if n not in wb),
        tuple(n for n in wb if n not in wa),
        tuple(compare_tensors(wa[n], wb[n]) for n in both),
    )


def _type(t: WeightTensor) -> str:
    if isinstance(t, LogicalTensor):
        return t.scheme
    return t.info.element.name


def compare_tensors(a: WeightTensor, b: WeightTensor) -> TensorComparison:
    """Compare two tensors (``a``'s name names the result).

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
    if isinstance(a, LogicalTensor) or isinstance(b, LogicalTensor):
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
    return _compare_values(base, a.shape, chunks_a, chunks_b, same_type)


def _values(t: WeightTensor) -> Iterator[np.ndarray]:
    if isinstance(t, LogicalTensor):
        return (chunk.reshape(-1) for chunk in row_chunks(t))
    _, _, chunks = source(t.payload())
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
    """Chunks of one side re-cut to the lengths asked for."""

    def __init__(self, chunks: Iterator[np.ndarray]) -> None:
        self._chunks = chunks
        self._rest = np.empty(0)

    def take(self, n: int) -> np.ndarray:
        parts: list[np.ndarray] = []
        have = 0
        while have < n:
            if self._rest.size == 0:
                self._rest = next(self._chunks).reshape(-1)
                continue
            part = self._rest[: n - have]
            self._rest = self._rest[part.size :]
            parts.append(part)
            have += part.size
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind not in "biu"


def _widened(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both chunks in the type they compare in (the module's definitions)."""
    if _is_float(a) or _is_float(b):
        return a.astype(np.float64), b.astype(np.float64)
    return a, b


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
    base: dict[str, Any],
    shape: tuple[int, ...],
    chunks_a: Iterator[np.ndarray],
    chunks_b: Iterator[np.ndarray],
    same_type: bool,
) -> TensorComparison:
    ra, rb = _Aligned(chunks_a), _Aligned(chunks_b)
    total = math.prod(shape)
    mismatches = nan_payloads = signed_zeros = 0
    max_abs = max_rel = 0.0
    first: int | None = None
    for lo in range(0, total, VALUE_CHUNK):
        n = min(VALUE_CHUNK, total - lo)
        raw_a, raw_b = ra.take(n), rb.take(n)
        a, b = _widened(raw_a, raw_b)
        if not _is_float(a):
            eq = _int_equal(a, b)
            differ = ~eq
        else:
            with np.errstate(invalid="ignore"):
                nan_a, nan_b = np.isnan(a), np.isnan(b)
                both_nan = nan_a & nan_b
                differ = ~((a == b) | both_nan)
            if both_nan.any():
                bits_a, bits_b = (raw_a, raw_b) if same_type else (a, b)
                ua = bits_a.view(f"u{bits_a.dtype.itemsize}")
                ub = bits_b.view(f"u{bits_b.dtype.itemsize}")
                nan_payloads += int(np.count_nonzero(both_nan & (ua != ub)))
            zeros = (a == 0) & (b == 0)
            if zeros.any():
                signed_zeros += int(np.count_nonzero(zeros & (np.signbit(a) != np.signbit(b))))
        count = int(np.count_nonzero(differ))
        if not count:
            continue
        if first is None:
            first = lo + int(np.argmax(differ))
        mismatches += count
        da = a[differ].astype(np.float64)
        db = b[differ].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(da - db)
            scale = np.maximum(np.abs(da), np.abs(db))
            bad = ~(np.isfinite(da) & np.isfinite(db))
            diff[bad] = np.inf
            rel = np.where(bad, np.inf, diff / scale)
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float(rel.max()))
    index = None
    if first is not None:
        index = tuple(int(i) for i in np.unravel_index(first, shape))
    return TensorComparison(
        **base,
        same_bytes=False,
        equal=mismatches == 0,
        compared=True,
        mismatches=mismatches,
        max_abs=max_abs if mismatches else None,
        max_rel=max_rel if mismatches else None,
        first_index=index,
        nan_payloads=nan_payloads,
        signed_zeros=signed_zeros,
    )
