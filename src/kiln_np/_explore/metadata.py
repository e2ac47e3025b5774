"""Metadata key by key, with its type, in any format: the text form of
``kiln-np meta`` and the rows of the report; and the model a checkpoint
holds, in its own words (:func:`model_title`).

GGUF key/values with their GGUF types (``uint32``, ``array[string]``),
safetensors' ``__metadata__``, an ONNX model's ``ir_version``, producer,
opsets and ``metadata_props``, a Kiln directory's manifest metadata: whatever
:attr:`kiln_np.Weights.metadata` holds.  A type the format does not name is
the value's Python or numpy type (:func:`type_name`).  In the text form each
value fits 100 columns (a key is never cut): a long array is its length and
first items, a long string is cut and its length given;
a GGUF string array is decoded only as far as shown
(:meth:`kiln_np.gguf.GGUFMetadata.head`).  :func:`json_value` is every value in
full, as strict JSON.  A Hugging Face ``config.json`` (:attr:`kiln_np.Weights.config`)
is shown the same way, its JSON types as their names (``null`` for null).
llama.cpp's ``general.file_type`` is shown with its name (``15 (Q4_K_M)``,
:mod:`kiln_np._quants.filetypes`).
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.checks import printable
from kiln_np._quants.filetypes import file_type_label, file_type_number
from kiln_np._weights.remote import is_url
from kiln_np._weights.weights import Weights
from kiln_np.gguf import GGUFMetadata
from kiln_np.gguf._types import ARCHITECTURE_KEY, FILE_TYPE_KEY, NAME_KEY

__all__ = [
    "MetadataRow",
    "json_value",
    "meta_text",
    "metadata_rows",
    "model_title",
    "type_name",
]

WIDTH = 100
"""The text form's columns."""
_KEY_COLUMN = 40  # a longer key stands alone on its line
_FIRST = 16  # array items decoded for the text form, at most


def type_name(value: object) -> str:
    """A value's type when the format names none, as ``encode_metadata`` tags
    it (``str``, ``int``, ``np.uint32``, ``np.ndarray[float32]``, ``list``);
    ``null`` for a JSON null (a ``config.json``'s).

    Examples
    --------
    >>> type_name("x"), type_name(np.uint32(3)), type_name(np.zeros(2, "<f4")), type_name({})
    ('str', 'np.uint32', 'np.ndarray[float32]', 'dict')
    >>> type_name(None)
    'null'
    """
    if value is None:
        return "null"
    if isinstance(value, np.ndarray):
        return f"np.ndarray[{value.dtype.name}]"
    if isinstance(value, np.generic):
        return f"np.{value.dtype.name}"
    for t in (bool, int, float, str, bytes):
        if isinstance(value, t):
            return t.__name__
    return "dict" if isinstance(value, Mapping) else "list"


def _number(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def json_value(value: Any) -> Any:
    """A metadata value as strict JSON, in full: numpy numbers as numbers
    (float32 exactly, as float64), NaN and infinities as ``"nan"``, ``"inf"``,
    ``"-inf"``, a complex number as ``[real, imag]``, bytes as base64 (as
    ``encode_metadata`` writes them), arrays and GGUF arrays of arrays as lists.
    A string holding bytes that are not UTF-8 keeps them as lone surrogates
    (``\\udcff``), as ``ls --json`` prints such names.

    Examples
    --------
    >>> json_value([np.float32(0.5), np.float64("nan"), np.uint64(2**64 - 1), b"\\x00", None])
    [0.5, 'nan', 18446744073709551615, 'AA==', None]
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _number(float(value))
    if isinstance(value, np.complexfloating):
        return [_number(float(value.real)), _number(float(value.imag))]
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return json_value(value[()])
        if value.dtype.kind in "biu":
            return value.tolist()
        return [json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    return [json_value(v) for v in value]


def _scalar_text(value: Any) -> str:
    """One scalar as the text form shows it: numbers as numpy prints them
    (``0.1`` for a float32), ``true``/``false``, a string in double quotes
    with its control characters escaped (JSON's escapes, then
    :func:`~kiln_np._core.checks.printable` for the rest: C1 controls, lone
    surrogates); ``null`` for None."""
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, str):
        return printable(json.dumps(value, ensure_ascii=False))
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes: {bytes(value[:32]).hex()}"
    return str(value)


def _cut(text: str, width: int, length: int | None = None) -> str:
    """``text`` in ``width`` columns: cut, and the whole's length said.

    Examples
    --------
    >>> _cut('"abcdefghijklmnopqrstuvwxyz"', 24, 26)
    '"abcdefghi... (26 chars)'
    """
    if len(text) <= width:
        return text
    tail = "..." if length is None else f"... ({length} chars)"
    return text[: max(width - len(tail), 1)] + tail


def _items_text(n: int, first: Sequence[Any], width: int) -> str:
    """``N items: a, b, ...``: as many of the first items as fit ``width``."""
    head = f"{n} items" if n != 1 else "1 item"
    shown: list[str] = []
    used = len(head) + 2
    for i, item in enumerate(first):
        text = _inline(item, 24)
        more = i + 1 < n
        if used + len(text) + 2 + (5 if more else 0) > width:
            break
        shown.append(text)
        used += len(text) + 2
    rest = ", ..." if len(shown) < n else ""
    return f"{head}: {', '.join(shown)}{rest}" if shown else f"{head}{', ...' * (n > 0)}"


def _inline(value: Any, width: int) -> str:
    """Any value on part of a line, at most ``width`` columns."""
    if isinstance(value, str):
        return _cut(_scalar_text(value), width, len(value))
    if isinstance(value, (Mapping, np.ndarray, list, tuple)) or (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))
    ):
        if isinstance(value, Mapping):
            inner = ", ".join(
                f"{printable(str(k))}: {_inline(v, width)}" for k, v in list(value.items())[:8]
            )
            return _cut("{" + inner + "}", width)
        first = value[:_FIRST]
        inner = ", ".join(_inline(v, width) for v in first)
        return _cut("[" + inner + (", ..." if len(value) > len(first) else "") + "]", width)
    return _cut(_scalar_text(value), width)


def _rows(metadata: Mapping[str, Any]) -> list[tuple[int, str, str, Any]]:
    """(depth, key, type, value shown) for each key; a dict's entries follow it,
    one level deeper."""
    types = getattr(metadata, "types", None)
    rows: list[tuple[int, str, str, Any]] = []

    def add(key: str, value: Any, type_: str, depth: int) -> None:
        if isinstance(value, Mapping):
            rows.append((depth, key, type_, _Shown(f"{len(value)} entries" if value else "{}")))
            for k, v in value.items():
                add(str(k), v, type_name(v), depth + 1)
        else:
            rows.append((depth, key, type_, value))

    for key in metadata:
        type_ = types[key] if types is not None and key in types else None
        if isinstance(metadata, GGUFMetadata) and type_ is not None and type_.startswith("array"):
            n, first = metadata.head(key, _FIRST)
            rows.append((0, key, type_, _Array(n, first)))
            continue
        value = metadata[key]
        if key == FILE_TYPE_KEY:
            value = _file_type_shown(value)
        add(key, value, type_ or type_name(value), 0)
    return rows


def _file_type_shown(value: Any) -> Any:
    """A ``general.file_type`` value with llama.cpp's name for it (``15 (Q4_K_M)``);
    an unknown number or a value that is not an integer as it is.

    >>> _file_type_shown(np.uint32(15)).text, _file_type_shown(99), _file_type_shown("x")
    ('15 (Q4_K_M)', 99, 'x')
    """
    number = file_type_number(value)
    label = file_type_label(value)
    if number is None or label is None or label == str(number):
        return value
    return _Shown(f"{number} ({label})")


class _Shown:
    """Text the text form shows as it is (a dict's entry count)."""

    def __init__(self, text: str) -> None:
        self.text = text


class _Array:
    """An array's length and first items, as the text form shows it."""

    def __init__(self, n: int, first: Sequence[Any]) -> None:
        self.n, self.first = n, first


def _value_text(value: Any, width: int) -> str:
    if isinstance(value, _Array):
        return _items_text(value.n, value.first, width)
    if isinstance(value, _Shown):
        return value.text
    if isinstance(value, str):
        return _cut(_scalar_text(value), width, len(value))
    if isinstance(value, (bytes, bytearray)):
        return _cut(_scalar_text(value), width)
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return _cut(_scalar_text(value[()]), width)
        return _items_text(len(value), list(value[:_FIRST]), width)
    if isinstance(value, Sequence):
        return _items_text(len(value), value[:_FIRST], width)
    return _cut(_scalar_text(value), width)


def meta_text(label: str, fmt: str, metadata: Mapping[str, Any]) -> str:
    """The text form: a line naming the file, then key, type and value in
    aligned columns, each value cut to fit :data:`WIDTH` columns.  A key is
    never cut: one longer than 40 stands alone on its line, whole, its type
    and value on the next.  Keys are shown through
    :func:`~kiln_np._core.checks.printable`.

    Examples
    --------
    >>> text = meta_text("m.safetensors", "safetensors", {"format": "pt", "x": "y" * 200})
    >>> print(text[:97])
    m.safetensors: safetensors, 2 keys
    key     type  value
    format  str   "pt"
    x       str   "yyyyyyyy
    >>> text.endswith('yyy... (200 chars)'), max(len(line) for line in text.splitlines())
    (True, 100)
    """
    count = len(metadata)
    if not count:
        return f"{label}: {fmt}, no metadata"
    rows = [
        ("  " * depth + printable(key), type_, value)
        for depth, key, type_, value in _rows(metadata)
    ]
    key_w = max([3, *(len(k) for k, _, _ in rows if len(k) <= _KEY_COLUMN)])
    type_w = max(4, *(len(t) for _, t, _ in rows))
    value_w = max(WIDTH - key_w - type_w - 4, 20)
    lines = [f"{label}: {fmt}, {count} key{'s' * (count != 1)}"]
    lines.append(f"{'key':<{key_w}}  {'type':<{type_w}}  value")
    for key, type_, value in rows:
        shown = key
        if len(key) > key_w:
            lines.append(key)
            shown = ""
        text = _value_text(value, value_w)
        lines.append(f"{shown:<{key_w}}  {type_:<{type_w}}  {text}".rstrip())
    return "\n".join(lines)


class MetadataRow(NamedTuple):
    """One metadata key as the report shows it: ``depth`` (a dict's entries are
    one level below it), the key, its type and its value as text."""

    depth: int
    key: str
    type: str
    text: str


def metadata_rows(metadata: Mapping[str, Any], width: int = 160) -> list[MetadataRow]:
    """Every key of ``metadata`` with its type (the format's, else
    :func:`type_name`) and its value as the text form shows it, in at most
    ``width`` characters: a long array by its length and first items, a long
    string cut with its length.  A GGUF string array is decoded only as far as
    shown; a dict's entries follow it, one level deeper.

    Examples
    --------
    >>> for row in metadata_rows({"format": "pt", "cfg": {"n": 2}, "ids": list(range(100))}, 40):
    ...     print(row.depth, row.key, row.type, row.text)
    0 format str "pt"
    0 cfg dict 1 entries
    1 n int 2
    0 ids list 100 items: 0, 1, 2, 3, 4, 5, 6, ...
    """
    return [
        MetadataRow(depth, key, type_, _value_text(value, width))
        for depth, key, type_, value in _rows(metadata)
    ]


_TITLE_PART = 120  # a name or architecture longer than this is cut in a title


def _text_of(value: object) -> str | None:
    """A description's text value, cut to :data:`_TITLE_PART` characters; None for
    no text (missing, empty, or another type: a hostile file's)."""
    if not isinstance(value, str) or not value.strip():
        return None
    return _cut(value.strip(), _TITLE_PART)


def model_title(weights: Weights) -> str:
    """The model a checkpoint holds, in its own words: a report's title.

    A GGUF file: its ``general.name`` (else its file name) and its
    ``general.architecture``.  A checkpoint with a Hugging Face ``config.json``:
    its directory's name, then its ``architectures`` and ``model_type`` in
    parentheses (or ``model_type`` alone).  Otherwise what was opened:
    a file's name, or for a sharded checkpoint's index (and a directory) the
    directory's name, never ``model.safetensors.index.json``.  A value that is
    not text is left out; a long one is cut.

    Examples
    --------
    >>> import numpy as np, os, tempfile, json, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> folder = os.path.join(d, "tiny-llama")
    >>> _ = kiln_np.save_weights(folder, {"w": np.ones(4, "<f4")}, format="safetensors",
    ...                          max_shard_size=16)
    >>> sorted(os.listdir(folder))[-1]
    'model.safetensors.index.json'
    >>> with kiln_np.open_weights(folder) as w:
    ...     model_title(w)
    'tiny-llama'
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, f)
    >>> with kiln_np.open_weights(folder) as w:
    ...     model_title(w)
    'tiny-llama: LlamaForCausalLM (llama)'
    >>> _ = kiln_np.save_weights(d + "/m.gguf", {"w": np.ones(4, "<f4")}, format="gguf",
    ...                          metadata={"general.name": "Tiny", "general.architecture": "llama"})
    >>> with kiln_np.open_weights(d + "/m.gguf") as w:
    ...     model_title(w)
    'Tiny: llama'
    >>> import shutil; shutil.rmtree(d)
    """
    path = weights.path.rstrip("/")
    opened = os.path.basename(path) or path
    folder = os.path.basename(os.path.dirname(path)) or opened
    if not is_url(path) and os.path.isdir(path):  # a Kiln directory, a Zarr group
        folder = opened
    if weights.format == "gguf":
        name = _text_of(weights.metadata.get(NAME_KEY)) or opened
        architecture = _text_of(weights.metadata.get(ARCHITECTURE_KEY))
        return name if architecture is None else f"{name}: {architecture}"
    config = weights.config
    if config is not None:
        found = config.get("architectures")
        names = [n for n in map(_text_of, found) if n] if isinstance(found, list) else []
        kind = _text_of(config.get("model_type"))
        said = ", ".join(names) or kind
        if said is not None and kind is not None and said != kind:
            said += f" ({kind})"
        return folder if said is None else f"{folder}: {_cut(said, _TITLE_PART)}"
    return folder if path.endswith(".index.json") else opened
