"""Weight-file metadata as JSON: untrusted JSON files read with the package's one
strict parser (:func:`read_json`; :func:`parse_json` lives in
:mod:`kiln_np._core.jsontext`, below every floor that reads JSON),
metadata values encoded so that each keeps its type (:func:`encode_metadata`,
:func:`decode_metadata`: a GGUF file's keys survive GGUF -> Kiln directory -> GGUF,
a signalling NaN stays signalling), and :class:`Metadata`, the read-only key/values
a Kiln directory opens with.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.jsontext import (
    JSON_COST_ALLOWANCE,
    JSON_COST_FACTOR,
    MAX_JSON_DEPTH,
    check_json,
    parse_json,
)
from kiln_np._files.io import open_regular_raw

__all__ = [
    "JSON_COST_ALLOWANCE",
    "JSON_COST_FACTOR",
    "MAX_JSON_DEPTH",
    "MAX_METADATA_DEPTH",
    "Metadata",
    "check_json",
    "check_json_size",
    "decode_metadata",
    "encode_metadata",
    "parse_json",
    "read_json",
]


def read_json(path: str, where: str, max_bytes: int, what: str, *, serde: bool = True) -> Any:
    """The JSON document in the file ``path``, at most ``max_bytes`` long (TYPE
    before it is read otherwise; ``what`` names it in that message), parsed by
    :func:`parse_json`."""
    with open_regular_raw(path) as f:
        size = os.fstat(f.fileno()).st_size
        check_json_size(size, max_bytes, where, what)
        raw = f.read(size + 1)  # never more than max_bytes + 1, if it grew meanwhile
    return parse_json(raw, where, serde=serde)


def check_json_size(size: int, max_bytes: int, where: str, what: str) -> None:
    """TYPE when a JSON document of ``size`` bytes is over ``max_bytes``
    (``what`` names it: ``"an index"``), checked before anything is read, for
    a local file and a URL alike.

    >>> check_json_size(10, 100, "'i.json': ", "an index")
    """
    if size > max_bytes:
        raise KilnError(
            "TYPE",
            f"{where}expected {what} of at most {max_bytes} bytes, found {size}",
            expected=max_bytes,
            found=size,
        )


def encode_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as JSON that keeps each value's type: every value becomes
    ``[tag, value]``.

    ==================== ====================================================
    value                JSON
    ==================== ====================================================
    str, bool, int       ``["str", "x"]``, ``["bool", true]``, ``["int", 5]``
    float                ``["float", "0x3ff0000000000000"]`` (binary64 bits)
    numpy scalar         ``["np.uint8", 5]``; floats by their bits:
                         ``["np.float32", "0x7f800001"]`` (a signalling NaN
                         stays signalling)
    numpy array          ``["np.ndarray", "<f4", [2, 3], "base64 bytes"]``
    list, tuple          ``["list", [[tag, value], ...]]``
    dict (str keys)      ``["dict", {key: [tag, value], ...}]``
    bytes                ``["bytes", "base64"]``
    ==================== ====================================================

    Raises
    ------
    KilnError
        TYPE for a key that is not a str, a value of another type, or lists and
        dicts nested deeper than :data:`MAX_METADATA_DEPTH`.

    Examples
    --------
    >>> encode_metadata({"a": np.float32("nan"), "b": [1, "x"]})
    {'a': ['np.float32', '0x7fc00000'], 'b': ['list', [['int', 1], ['str', 'x']]]}
    """
    return {_key(k): _encode(v, k, 0) for k, v in metadata.items()}


MAX_METADATA_DEPTH = 32
"""The deepest lists and dicts :func:`encode_metadata` writes (GGUF nests arrays at
most 4 deep); encoded, they stay well inside :data:`MAX_JSON_DEPTH`."""


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise KilnError("TYPE", f"expected metadata keys as str, found {show_value(key)}")
    return key


def _encode(value: object, key: str, depth: int) -> list[Any]:
    if isinstance(value, (np.generic, np.ndarray)):
        dt = _numeric(value.dtype, f"metadata {key!r}: ")
        if isinstance(value, np.generic):
            if dt.kind in "biu":
                return [f"np.{dt.name}", value.item()]
            return [f"np.{dt.name}", _float_bits(np.asarray(value, dt))]
        le = np.ascontiguousarray(value, dt.newbyteorder("<"))
        return ["np.ndarray", le.dtype.str, list(le.shape), base64.b64encode(le.data).decode()]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", _float_bits(np.asarray(value, np.float64))]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, (bytes, bytearray)):
        return ["bytes", base64.b64encode(value).decode()]
    if isinstance(value, (Mapping, Sequence)) and depth == MAX_METADATA_DEPTH:
        raise KilnError(
            "TYPE",
            f"metadata {key!r}: expected lists and dicts nested at most "
            f"{MAX_METADATA_DEPTH} levels, found deeper",
        )
    if isinstance(value, Mapping):
        return ["dict", {_key(k): _encode(v, f"{key}.{k}", depth + 1) for k, v in value.items()}]
    if isinstance(value, Sequence):
        return ["list", [_encode(v, key, depth + 1) for v in value]]
    raise KilnError(
        "TYPE",
        f"metadata {key!r}: expected str, int, float, bool, bytes, a numpy number or "
        f"array, a list or a dict, found {show_value(value)}",
    )


_NUMERIC_TYPES = frozenset(
    np.dtype(c).type
    for c in ("?", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16")
)


def _numeric(dtype: np.dtype[Any], where: str) -> np.dtype[Any]:
    if dtype.type not in _NUMERIC_TYPES:
        raise KilnError(
            "TYPE", f"{where}expected numpy bool, integers or floats, found dtype {dtype}"
        )
    return dtype


def _float_bits(value: np.ndarray) -> str:
    """A float scalar as the hex of its little-endian bits: NaN payloads kept."""
    return "0x" + value.astype(value.dtype.newbyteorder("<")).tobytes()[::-1].hex()


def decode_metadata(encoded: object, where: str = "") -> dict[str, Any]:
    """The inverse of :func:`encode_metadata`.

    Raises
    ------
    KilnError
        TYPE for anything :func:`encode_metadata` does not write.

    Examples
    --------
    >>> v = decode_metadata(encode_metadata({"x": np.float32("-0.0")}))["x"]
    >>> type(v).__name__, bool(np.signbit(v))
    ('float32', True)
    """
    if not isinstance(encoded, dict):
        raise KilnError(
            "TYPE", f"{where}expected metadata as a JSON object, found {show_value(encoded)}"
        )
    return {k: _decode(v, f"{where}metadata {k!r}: ") for k, v in encoded.items()}


def _decode(item: object, where: str) -> Any:
    try:
        return _decode_unchecked(item, where)
    except KilnError:
        raise
    except (TypeError, ValueError, IndexError, OverflowError) as exc:
        raise KilnError(
            "TYPE", f"{where}expected [tag, value] as encode_metadata writes, found: {exc}"
        ) from None


def _decode_unchecked(item: object, where: str) -> Any:
    if not (isinstance(item, list) and item and isinstance(item[0], str)):
        raise KilnError("TYPE", f"{where}expected [tag, value], found {show_value(item)}")
    tag, *rest = item
    value = rest[0] if len(rest) == 1 else None
    simple: dict[str, type] = {"str": str, "bool": bool, "int": int}
    if tag in simple and type(value) is simple[tag]:
        return value
    if tag == "float" and isinstance(value, str):
        return float(_from_bits(value, np.dtype("<f8")))
    if tag == "bytes" and isinstance(value, str):
        return base64.b64decode(value, validate=True)
    if tag == "list" and isinstance(value, list):
        return [_decode(v, where) for v in value]
    if tag == "dict" and isinstance(value, dict):
        return {k: _decode(v, f"{where}{k!r}: ") for k, v in value.items()}
    if tag == "np.ndarray" and len(rest) == 3:
        dt, shape, data = _numeric(np.dtype(rest[0]), where), rest[1], rest[2]
        if isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape):
            raw = base64.b64decode(data, validate=True)
            return np.frombuffer(raw, dt).reshape(shape).copy()  # ValueError: wrong size
    if tag.startswith("np.") and len(rest) == 1:
        dt = _numeric(np.dtype(tag[3:]), where)
        if dt.kind in "biu" and type(value) in (int, bool):
            return dt.type(value)
        if dt.kind in "fc" and isinstance(value, str):
            return _from_bits(value, dt.newbyteorder("<"))[()]
    raise KilnError("TYPE", f"{where}expected [tag, value], found {show_value(item)}")


def _from_bits(text: str, dtype: np.dtype[Any]) -> np.ndarray:
    if not text.startswith("0x"):
        raise ValueError(f"expected 0x and hex digits, found {text[:20]!r}")
    raw = int(text, 16).to_bytes(dtype.itemsize, "little")  # OverflowError: too many
    return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="))[0:1].reshape(())


class Metadata(Mapping[str, Any]):
    """Read-only key/values of a weight file, with each key's type name in the
    format that wrote it where that format has one (:attr:`types`, as GGUF's
    ``"uint32"``, ``"array[string]"``; None otherwise).

    Examples
    --------
    >>> m = Metadata({"n": np.uint32(3)}, {"n": "uint32"})
    >>> m["n"], m.types["n"]
    (np.uint32(3), 'uint32')
    """

    def __init__(self, values: Mapping[str, Any], types: Mapping[str, str] | None = None) -> None:
        self._values = dict(values)
        self.types: Mapping[str, str] | None = (
            None if types is None else MappingProxyType(dict(types))
        )

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Metadata({self._values!r})"
