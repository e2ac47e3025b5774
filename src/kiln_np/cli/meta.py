"""The ``meta`` command: a weight file's metadata, key by key with its type.

GGUF key/values with their GGUF types (``uint32``, ``array[string]``),
safetensors' ``__metadata__``, an ONNX model's ``ir_version``, producer,
opsets and ``metadata_props``, a Kiln directory's manifest metadata.  The text
form fits 100 columns: a long array is its length and first items, a long
string is cut and its length given; a GGUF string array is decoded only as far
as shown (:meth:`kiln_np.gguf.GGUFMetadata.head`).  ``--json`` prints every
value in full (:func:`json_value`).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kiln_np.gguf import GGUFMetadata

from .args import json_flag, subparser
from .output import print_json
from .weights import open_weights_file

__all__ = ["add_meta", "json_value", "type_name"]

WIDTH = 100
"""The text form's columns."""
_KEY_COLUMN = 40  # a longer key stands alone on its line
_FIRST = 16  # array items decoded for the text form, at most


def type_name(value: object) -> str:
    """A value's type when the format names none, as ``encode_metadata`` tags
    it (``str``, ``int``, ``np.uint32``, ``np.ndarray[float32]``, ``list``).

    Examples
    --------
    >>> type_name("x"), type_name(np.uint32(3)), type_name(np.zeros(2, "<f4")), type_name({})
    ('str', 'np.uint32', 'np.ndarray[float32]', 'dict')
    """
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
    >>> json_value([np.float32(0.5), np.float64("nan"), np.uint64(2**64 - 1), b"\\x00"])
    [0.5, 'nan', 18446744073709551615, 'AA==']
    """
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
    with its control characters escaped."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
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
            inner = ", ".join(f"{k}: {_inline(v, width)}" for k, v in list(value.items())[:8])
            return _cut("{" + inner + "}", width)
        first = value[:_FIRST]
        inner = ", ".join(_inline(v, width) for v in first)
        return _cut("[" + inner + (", ..." if len(value) > len(first) else "") + "]", width)
    return _cut(_scalar_text(value), width)


def _rows(metadata: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """(key, type, value shown) for each key; a dict's entries follow it, indented."""
    types = getattr(metadata, "types", None)
    rows: list[tuple[str, str, Any]] = []

    def add(key: str, value: Any, type_: str, indent: str) -> None:
        if isinstance(value, Mapping):
            rows.append((indent + key, type_, _Shown(f"{len(value)} entries" if value else "{}")))
            for k, v in value.items():
                add(str(k), v, type_name(v), indent + "  ")
        else:
            rows.append((indent + key, type_, value))

    for key in metadata:
        type_ = types[key] if types is not None and key in types else None
        if isinstance(metadata, GGUFMetadata) and type_ is not None and type_.startswith("array"):
            n, first = metadata.head(key, _FIRST)
            rows.append((key, type_, _Array(n, first)))
            continue
        value = metadata[key]
        add(key, value, type_ or type_name(value), "")
    return rows


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
    aligned columns, each line at most :data:`WIDTH` columns (a key longer
    than 40 stands alone, its type and value on the next line).

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
    rows = _rows(metadata)
    key_w = max([3, *(len(k) for k, _, _ in rows if len(k) <= _KEY_COLUMN)])
    type_w = max(4, *(len(t) for _, t, _ in rows))
    value_w = max(WIDTH - key_w - type_w - 4, 20)
    lines = [f"{label}: {fmt}, {count} key{'s' * (count != 1)}"]
    lines.append(f"{'key':<{key_w}}  {'type':<{type_w}}  value")
    for key, type_, value in rows:
        shown = key
        if len(key) > key_w:
            lines.append(_cut(key, WIDTH))
            shown = ""
        text = _value_text(value, value_w)
        lines.append(f"{shown:<{key_w}}  {type_:<{type_w}}  {text}".rstrip())
    return "\n".join(lines)


def _cmd_meta(args: argparse.Namespace) -> int:
    with open_weights_file(args.path) as weights:
        metadata = weights.metadata
        if not args.json:
            print(meta_text(args.path, weights.format, metadata))
            return 0
        types = getattr(metadata, "types", None)
        entries = []
        for key in metadata:
            value = metadata[key]
            type_ = types[key] if types is not None and key in types else type_name(value)
            entries.append({"key": key, "type": type_, "value": json_value(value)})
        record = {
            "format": "kiln-np-meta/1",
            "path": args.path,
            "weights_format": weights.format,
            "metadata": entries,
        }
    print_json(record)
    return 0


def add_meta(sub: Any) -> None:
    """The ``meta`` command."""
    parser = subparser(
        sub,
        "meta",
        "print the metadata of a weight file",
        "Print the metadata of a weight file: GGUF key/values with their GGUF types, "
        "safetensors' __metadata__, an ONNX model's ir_version, producer, opsets and "
        "metadata_props, a Kiln directory's manifest metadata.  Long arrays are shown by "
        "their length and first items, long strings cut with their length; --json prints "
        "every value in full.  Only headers are read.",
        ["kiln-np meta llama.gguf", "kiln-np meta model.safetensors --json"],
    )
    parser.add_argument("path", metavar="PATH")
    json_flag(parser, "print one JSON object, every value in full")
    parser.set_defaults(run=_cmd_meta)
