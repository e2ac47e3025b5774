"""A checkpoint at a glance: what :meth:`Weights.summary` returns.

Headers only, no tensor's bytes read: the tensor count, parameters (elements:
a GGML quantized tensor counts its elements, not its blocks), bytes, bits per
weight overall and per stored type, the largest tensor, a memory estimate
(stored as is, as bf16, as f32), and a tree of the names.

The tree groups names by dotted prefix (``model.layers.0.attn.q.weight``):
numeric parts sort as numbers (``layers.10`` after ``layers.9``), a group
with one child and no tensor of its own is joined to it (``q.weight``), and a
run of consecutive numeric siblings that hold the same suffixes, with the same
shapes and stored types, folds into one row (under ``layers``:
``0-31  x32, 9 tensors each``) followed by one member's contents.  A layer
that differs (an extra tensor, another shape or type) breaks the run: it
stands on its own row, and the runs on either side fold (``0-14``, ``15``,
``16-31``).

The same reading of numbers orders a listing: :func:`natural_key` compares the
runs of ASCII digits in a name as numbers (``layers.2`` before ``layers.10``, so
a layer's tensors stand together, whatever shard holds them), and
:func:`ordered` lists tensors in one of :data:`ORDERS` (``kiln-np ls`` and
``kiln-np stats --sort``, ``kiln_np.describe(weights, sort=...)``).

A GGUF file's llama.cpp file type (``general.file_type``) is one of the facts,
in llama.cpp's words (``Q4_K_M``, :mod:`kiln_np._quants.filetypes`).

Parameters count elements as each tensor is stored: a block-scaled scheme
stored as two tensors (elements and scales) counts both; a tensor of an
opaque type with no numeric reading (a GGML type without a decoder) counts
its blocks.

This module names no format and imports nothing of ``tensors`` (which
imports it): it reads any object with ``name``, ``shape`` (elements),
``byte_length`` and ``format_dtype``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from kiln_np._core.checks import printable, show_value
from kiln_np._core.errors import KilnError
from kiln_np._quants.filetypes import file_type_label, file_type_record

__all__ = [
    "ORDERS",
    "Listed",
    "Summary",
    "TreeRow",
    "TypeRow",
    "human_bytes",
    "human_count",
    "natural_key",
    "ordered",
    "shown_bits",
    "summarize",
]

WIDTH = 100
"""The text form's columns."""


class Listed(Protocol):
    """What a summary reads of a tensor (a :class:`WeightTensor` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def byte_length(self) -> int: ...
    @property
    def format_dtype(self) -> str: ...


ORDERS = ("file", "name", "size", "type")
"""The orders a listing of tensors can take (:func:`ordered`)."""

_DIGITS = re.compile(r"([0-9]+)")

NaturalKey = tuple[tuple[int, str], ...]
"""What :func:`natural_key` returns."""

L = TypeVar("L", bound=Listed)


def natural_key(name: str) -> NaturalKey:
    """The key that sorts names in natural order: each run of ASCII digits as a
    number, the text between as text.

    A run compares by its length without leading zeros, then its digits, so a
    run of any length is a number without converting it (Python refuses ints of
    more than 4300 digits); names equal as numbers (``l.01``, ``l.1``) fall
    back to the name itself.

    Examples
    --------
    >>> names = ["blk.10.ffn", "blk.2.ffn", "blk.2.attn", "blk.1", "output", "blk.02.x"]
    >>> sorted(names, key=natural_key)
    ['blk.1', 'blk.2.attn', 'blk.2.ffn', 'blk.02.x', 'blk.10.ffn', 'output']
    """
    runs = _DIGITS.split(name)  # text, digits, text, ...: a digit run at every odd place
    key = [(0, run) if i % 2 == 0 else _number(run) for i, run in enumerate(runs)]
    return (*key, (0, name))


def _number(digits: str) -> tuple[int, str]:
    significant = digits.lstrip("0")
    return len(significant), significant


def ordered(tensors: Iterable[L], sort: str) -> list[L]:
    """``tensors`` (given in file order) listed in the order ``sort`` names.

    Parameters
    ----------
    tensors : iterable
        Objects with ``name``, ``byte_length`` and ``format_dtype``, in file order.
    sort : {"file", "name", "size", "type"}
        ``"file"``: as given; ``"name"``: natural name order (:func:`natural_key`);
        ``"size"``: the most payload bytes first; ``"type"``: grouped by the
        format's type name (``BF16``, ``Q4_K``) in natural order.  Ties of size
        or type go in natural name order.

    Raises
    ------
    KilnError
        SHAPE when ``sort`` is none of :data:`ORDERS`.

    Examples
    --------
    >>> from types import SimpleNamespace as T
    >>> ts = [T(name=n, byte_length=b, format_dtype=d)
    ...       for n, b, d in (("l.10.w", 8, "F32"), ("l.9.w", 4, "BF16"), ("l.9.b", 8, "F32"))]
    >>> for sort in ORDERS:
    ...     print(sort, [t.name for t in ordered(ts, sort)])
    file ['l.10.w', 'l.9.w', 'l.9.b']
    name ['l.9.b', 'l.9.w', 'l.10.w']
    size ['l.9.b', 'l.10.w', 'l.9.w']
    type ['l.9.w', 'l.9.b', 'l.10.w']
    """
    if not isinstance(sort, str) or sort not in ORDERS:
        raise KilnError(
            "SHAPE", f"expected sort= among {', '.join(ORDERS)}, found {show_value(sort)}"
        )
    listed = list(tensors)
    if sort == "file":
        return listed
    by_name = sorted(listed, key=lambda t: natural_key(t.name))
    if sort == "size":  # sorts are stable: ties keep the name order
        by_name.sort(key=lambda t: -t.byte_length)
    elif sort == "type":
        kinds = {kind: natural_key(kind) for kind in {t.format_dtype for t in by_name}}
        by_name.sort(key=lambda t: kinds[t.format_dtype])
    return by_name


def human_count(n: int) -> str:
    """A count with a K/M/B/T suffix, three significant digits.

    >>> human_count(999), human_count(1234), human_count(6_738_415_616)
    ('999', '1.23 K', '6.74 B')
    """
    for step, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= step:
            return f"{n / step:.3g} {suffix}"
    return str(n)


def human_bytes(n: int) -> str:
    """Bytes in binary units, one decimal.

    >>> human_bytes(512), human_bytes(4096), human_bytes(3 * 2**30 // 2)
    ('512 B', '4.0 KiB', '1.5 GiB')
    """
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if n >= 1024**power:
            return f"{n / 1024**power:.1f} {unit}"
    return f"{n} B"


def _bits(byte_length: int, parameters: int) -> float | None:
    return 8 * byte_length / parameters if parameters else None


def shown_bits(bits: float | None) -> str:
    """Bits per weight as the summary shows them.

    >>> shown_bits(4.5), shown_bits(None)
    ('4.50', '-')
    """
    return "-" if bits is None else f"{bits:.2f}"


@dataclass(frozen=True)
class TypeRow:
    """The tensors of one stored type (the format's name for it)."""

    type: str
    tensors: int
    parameters: int
    byte_length: int

    @property
    def bits_per_weight(self) -> float | None:
        """``8 * byte_length / parameters`` (None for no parameters)."""
        return _bits(self.byte_length, self.parameters)


@dataclass(frozen=True)
class TreeRow:
    """One row of the name tree.

    ``depth`` is the indentation level; ``name`` the row's part of the name
    (dotted parts joined, ``layers.0-31`` for a fold); ``repeat`` how many
    identical siblings the row stands for (1 unless folded); ``tensors``,
    ``parameters`` and ``byte_length`` count one of them; ``shape`` and
    ``type`` are set for a tensor's own row, None for a group."""

    depth: int
    name: str
    repeat: int
    tensors: int
    parameters: int
    byte_length: int
    shape: tuple[int, ...] | None = None
    type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data."""
        return {
            "depth": self.depth,
            "name": self.name,
            "repeat": self.repeat,
            "tensors": self.tensors,
            "parameters": self.parameters,
            "byte_length": self.byte_length,
            "shape": None if self.shape is None else list(self.shape),
            "type": self.type,
        }


NOTE = (
    "parameters are elements as stored: a quantization scheme's scales count as their own "
    "tensors (not in Weights.logical()); an opaque type with no numeric reading counts its blocks"
)


@dataclass(frozen=True)
class Summary:
    """A checkpoint at a glance (see the module's docstring for the tree).

    Its ``str`` is a text form at most 100 columns wide but for the lines
    naming a tensor, whose name is never cut; in a notebook it
    renders as tables (``_repr_html_``); :meth:`to_dict` is JSON-ready.

    Examples
    --------
    >>> from types import SimpleNamespace as T
    >>> ts = [T(name=f"l.{i}.w", shape=(4, 8), byte_length=64, format_dtype="BF16")
    ...       for i in range(3)]
    >>> s = summarize(ts, format="x", path="/x")
    >>> s.parameters, s.byte_length, s.bits_per_weight, s.memory()["f32"]
    (96, 192, 16.0, 384)
    >>> [(r.depth, r.name, r.repeat, r.tensors) for r in s.tree]
    [(0, 'l', 1, 3), (1, '0-2', 3, 1), (2, 'w', 1, 1)]
    """

    format: str
    path: str
    tensors: int
    parameters: int
    byte_length: int
    types: tuple[TypeRow, ...]
    largest: str | None
    largest_parameters: int
    largest_byte_length: int
    tree: tuple[TreeRow, ...] = field(repr=False)
    file_type: int | None = None

    @property
    def file_type_label(self) -> str | None:
        """llama.cpp's file type in its words (``'Q4_K_M'``), or None when the
        checkpoint has none (:func:`~kiln_np._quants.filetypes.file_type_label`)."""
        return None if self.file_type is None else file_type_label(self.file_type)

    @property
    def bits_per_weight(self) -> float | None:
        """``8 * byte_length / parameters`` over every tensor (None for none)."""
        return _bits(self.byte_length, self.parameters)

    def memory(self) -> dict[str, int]:
        """Bytes to hold every tensor: ``stored`` (as the file holds them),
        ``bf16`` (2 bytes a parameter) and ``f32`` (4 bytes a parameter)."""
        return {"stored": self.byte_length, "bf16": 2 * self.parameters, "f32": 4 * self.parameters}

    def _facts(self) -> list[tuple[str, str]]:
        memory = self.memory()
        rows = [
            ("tensors", f"{self.tensors:,}"),
            ("parameters", f"{self.parameters:,} ({human_count(self.parameters)})"),
            ("bytes", f"{self.byte_length:,} ({human_bytes(self.byte_length)})"),
            ("bits/weight", shown_bits(self.bits_per_weight)),
        ]
        if self.file_type is not None:
            rows.append(
                ("file type", f"{self.file_type_label} (general.file_type {self.file_type})")
            )
        if self.largest is not None:
            rows.append(
                (
                    "largest",
                    f"{printable(self.largest)} ({self.largest_parameters:,} parameters, "
                    f"{human_bytes(self.largest_byte_length)})",
                )
            )
        rows.append(
            (
                "memory",
                f"{human_bytes(memory['stored'])} stored, {human_bytes(memory['bf16'])} "
                f"as bf16, {human_bytes(memory['f32'])} as f32",
            )
        )
        return rows

    def _type_cells(self) -> list[tuple[str, str, str, str, str]]:
        return [
            (
                r.type,
                f"{r.tensors:,}",
                f"{r.parameters:,}",
                f"{r.byte_length:,}",
                shown_bits(r.bits_per_weight),
            )
            for r in self.types
        ]

    def _tree_cells(self) -> list[tuple[int, str, str, str]]:
        """(depth, name, what, size) per tree row."""
        cells = []
        for r in self.tree:
            if r.shape is not None:
                what = f"{r.shape} {r.type}"
            elif r.repeat > 1:
                what = f"x{r.repeat}, {r.tensors:,} tensors each"
            else:
                what = f"{r.tensors:,} tensors"
            size = f"{human_count(r.parameters)} / {human_bytes(r.byte_length)}"
            name = printable(r.name)
            cells.append((r.depth, name, what, size + (" each" if r.repeat > 1 else "")))
        return cells

    def __str__(self) -> str:
        lines = [f"Weights summary ({self.format})"]
        # A fact naming a tensor (largest) is never cut; the others fit WIDTH.
        lines += [
            f"  {k:<12} {v}" if k == "largest" else _clip(f"  {k:<12} {v}")
            for k, v in self._facts()
        ]
        lines.append(_clip(f"  note: {NOTE}", wrap=True))
        head = ("type", "tensors", "parameters", "bytes", "bits/weight")
        lines.append("")
        for kind, count, params, nbytes, bits in [head, *self._type_cells()]:
            lines.append(_clip(f"  {kind:<12} {count:>8} {params:>18} {nbytes:>18} {bits:>11}"))
        if self.tree:
            lines += ["", "  tree (parameters / bytes)"]
            rows = [("  " * d + n, w, z) for d, n, w, z in self._tree_cells()]
            what_w = max(len(w) for _, w, _ in rows)
            name_w = max(len(n) for n, _, _ in rows)  # every name whole
            for name, what, size in rows:
                lines.append(f"    {name:<{name_w}}  {what:<{what_w}}  {size}".rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<kiln_np Summary: {self.tensors:,} tensors, {human_count(self.parameters)} "
            f"parameters, {human_bytes(self.byte_length)} ({self.format})>"
        )

    def _repr_html_(self) -> str:
        import html  # its entity table loads only when a notebook renders HTML

        e = html.escape
        left = "style='text-align:left'"
        facts = "".join(
            f"<tr><th {left}>{e(k)}</th><td {left}>{e(v)}</td></tr>" for k, v in self._facts()
        )
        head = "".join(
            f"<th>{h}</th>" for h in ("type", "tensors", "parameters", "bytes", "bits/weight")
        )
        types = "".join(
            f"<tr><td {left}>{e(c[0])}</td>" + "".join(f"<td>{e(x)}</td>" for x in c[1:]) + "</tr>"
            for c in self._type_cells()
        )
        tree = "".join(
            f"<tr><td style='text-align:left;padding-left:{1.5 * depth:g}em'>{e(name)}</td>"
            f"<td {left}>{e(what)}</td><td>{e(size)}</td></tr>"
            for depth, name, what, size in self._tree_cells()
        )
        return (
            f"<div><strong>Weights summary ({e(self.format)})</strong>"
            f"<table>{facts}</table><p><small>{e(NOTE)}</small></p>"
            f"<table><tr>{head}</tr>{types}</table>"
            f"<table><tr><th {left}>name</th><th {left}>what</th>"
            f"<th>parameters / bytes</th></tr>{tree}</table></div>"
        )

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data: ``format``, ``path``, ``tensors``,
        ``parameters``, ``byte_length``, ``bits_per_weight``, ``types`` (one
        dict per stored type), ``file_type`` (``{"value", "name", "option",
        "gguf_name"}``: llama.cpp's file type; or None), ``largest`` (name,
        parameters, byte_length; or None), ``memory``, ``note`` and ``tree``
        (:meth:`TreeRow.to_dict`)."""
        largest = None
        if self.largest is not None:
            largest = {
                "name": self.largest,
                "parameters": self.largest_parameters,
                "byte_length": self.largest_byte_length,
            }
        return {
            "format": self.format,
            "path": self.path,
            "tensors": self.tensors,
            "parameters": self.parameters,
            "byte_length": self.byte_length,
            "bits_per_weight": self.bits_per_weight,
            "types": [
                {
                    "type": r.type,
                    "tensors": r.tensors,
                    "parameters": r.parameters,
                    "byte_length": r.byte_length,
                    "bits_per_weight": r.bits_per_weight,
                }
                for r in self.types
            ],
            "file_type": file_type_record(self.file_type),
            "largest": largest,
            "memory": self.memory(),
            "note": NOTE,
            "tree": [r.to_dict() for r in self.tree],
        }


def _clip(line: str, *, wrap: bool = False) -> str:
    """A line within :data:`WIDTH` columns: cut, or wrapped under its indent."""
    if len(line) <= WIDTH:
        return line
    if not wrap:
        return line[: WIDTH - 3] + "..."
    import textwrap  # only for a long note

    return textwrap.fill(line, WIDTH, subsequent_indent="        ")


class _Item(NamedTuple):
    """A tensor's facts, read once."""

    name: str
    shape: tuple[int, ...]
    size: int
    byte_length: int
    format_dtype: str


class _Node:
    """A dotted prefix: its children, its own tensor if a name ends here, and
    the totals of every tensor under it."""

    __slots__ = ("byte_length", "children", "parameters", "signature", "tensor", "tensors")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.tensor: _Item | None = None
        self.tensors = self.parameters = self.byte_length = 0
        self.signature = -1


class _Tree:
    """The rows of a name tree, built top down."""

    def __init__(self) -> None:
        self.rows: list[TreeRow] = []
        self.signatures: dict[tuple[Any, ...], int] = {}

    def signature(self, node: _Node) -> int:
        """What a group holds, up to its own name, as a small int (equal for
        equal contents): the shape and type of its own tensor and its children's
        keys and signatures, sorted by key (two layers that list their tensors
        in another order fold)."""
        if node.signature < 0:
            own = None if node.tensor is None else (node.tensor.shape, node.tensor.format_dtype)
            parts = sorted((k, self.signature(c)) for k, c in node.children.items())
            node.signature = self.signatures.setdefault((own, tuple(parts)), len(self.signatures))
        return node.signature

    def add(self, key: str, node: _Node, depth: int, repeat: int = 1) -> None:
        """The rows of ``node`` named ``key``: a single-child group with no tensor
        joins its child's name."""
        while node.tensor is None and len(node.children) == 1 and repeat == 1:
            ((child_key, node),) = node.children.items()
            key = f"{key}.{child_key}"
        if node.tensor is not None:
            t = node.tensor
            self.rows.append(
                TreeRow(depth, key, repeat, 1, t.size, t.byte_length, t.shape, t.format_dtype)
            )
            if not node.children:
                return
        self.rows.append(
            TreeRow(depth, key, repeat, node.tensors, node.parameters, node.byte_length)
        )
        self.children(node, depth + 1)

    def children(self, node: _Node, depth: int) -> None:
        """The rows of ``node``'s children: numeric keys sorted as numbers,
        consecutive equal ones folded."""
        items = _ordered(node.children)
        i = 0
        while i < len(items):
            key, child = items[i]
            j = i + 1
            if _numeric(key) and child.children:
                mine = self.signature(child)
                while (
                    j < len(items)
                    and _numeric(items[j][0])
                    and _follows(items[j - 1][0], items[j][0])
                    and self.signature(items[j][1]) == mine
                ):
                    j += 1
            if j - i > 1:
                self.add(f"{key}-{items[j - 1][0]}", child, depth, repeat=j - i)
            else:
                self.add(key, child, depth)
            i = j


def _numeric(key: str) -> bool:
    """Whether a name part is a layer index (ASCII digits)."""
    return key.isascii() and key.isdigit()


def _follows(before: str, key: str) -> bool:
    """Whether the layer index ``key`` is ``before`` + 1 (ASCII digits both);
    an index of more than 18 digits never is (no int of it is made).

    >>> _follows("9", "10"), _follows("09", "10"), _follows("1", "3"), _follows("1" * 19, "2")
    (True, True, False, False)
    """
    if len(before) > 18 or len(key) > 18:
        return False
    return int(key) == int(before) + 1


def _ordered(children: dict[str, _Node]) -> list[tuple[str, _Node]]:
    """File order, but the numeric keys together, sorted as numbers
    (:func:`natural_key`), where the first of them stood."""
    numeric = sorted((k for k in children if _numeric(k)), key=natural_key)
    out: list[tuple[str, _Node]] = []
    placed = False
    for key, node in children.items():
        if not _numeric(key):
            out.append((key, node))
        elif not placed:
            out += [(k, children[k]) for k in numeric]
            placed = True
    return out


def _tree(tensors: list[_Item]) -> tuple[TreeRow, ...]:
    root = _Node()
    for t in tensors:
        node = root
        for part in t.name.split("."):
            node = node.children.get(part) or node.children.setdefault(part, _Node())
            node.tensors += 1
            node.parameters += t.size
            node.byte_length += t.byte_length
        node.tensor = t
    tree = _Tree()
    tree.children(root, 0)
    return tuple(tree.rows)


def summarize(
    tensors: Iterable[Listed], *, format: str, path: str, file_type: int | None = None
) -> Summary:
    """The :class:`Summary` of ``tensors`` (in file order) of a checkpoint;
    ``file_type`` is llama.cpp's (a GGUF file's ``general.file_type``), if any.

    Examples
    --------
    >>> from types import SimpleNamespace as T
    >>> s = summarize([T(name="a", shape=(64,), byte_length=34, format_dtype="Q8_0")],
    ...               format="gguf", path="/m.gguf", file_type=7)
    >>> s.parameters, s.bits_per_weight, [r.type for r in s.types], s.file_type_label
    (64, 4.25, ['Q8_0'], 'Q8_0')
    """
    listed = []
    for t in tensors:
        shape = tuple(t.shape)
        listed.append(_Item(t.name, shape, math.prod(shape), t.byte_length, t.format_dtype))
    by_type: dict[str, list[int]] = {}
    parameters = byte_length = 0
    largest: _Item | None = None
    for t in listed:
        size, nbytes = t.size, t.byte_length
        parameters += size
        byte_length += nbytes
        row = by_type.setdefault(t.format_dtype, [0, 0, 0])
        row[0] += 1
        row[1] += size
        row[2] += nbytes
        if largest is None or (size, nbytes) > (largest.size, largest.byte_length):
            largest = t
    types = tuple(
        TypeRow(name, *row) for name, row in sorted(by_type.items(), key=lambda kv: -kv[1][2])
    )
    return Summary(
        format=format,
        path=path,
        tensors=len(listed),
        parameters=parameters,
        byte_length=byte_length,
        types=types,
        largest=None if largest is None else largest.name,
        largest_parameters=0 if largest is None else largest.size,
        largest_byte_length=0 if largest is None else largest.byte_length,
        tree=_tree(listed),
        file_type=file_type,
    )
