"""Weight-file metadata as JSON: untrusted JSON parsed strictly (:func:`parse_json`),
metadata values encoded so that each keeps its type (:func:`encode_metadata`,
:func:`decode_metadata`: a GGUF file's keys survive GGUF -> Kiln directory -> GGUF,
a signalling NaN stays signalling), and :class:`Metadata`, the read-only key/values
a Kiln directory opens with.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError
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


MAX_JSON_DEPTH = 127
"""The deepest nesting of arrays and objects a JSON document may have: what
serde_json's recursion limit (128) lets through, which the safetensors crate parses
headers with."""

JSON_COST_FACTOR = 16
JSON_COST_ALLOWANCE = 64 << 20
"""A JSON document whose values would cost more than ``JSON_COST_FACTOR`` times its
size plus ``JSON_COST_ALLOWANCE`` bytes as Python objects is refused before it is
parsed (:func:`check_json`).  The cost is estimated from what the document holds
(below); 16 times fits every document kiln_np writes, the densest being a Kiln
manifest of a GGUF vocabulary (about 13 times its size)."""

# Estimated bytes of Python objects per JSON token (CPython 3.10-3.13, 64-bit): an
# object member (its pair, a slot in the dict) and its key, an object (the dict and the
# pair list object_pairs_hook is given), an array (the list), a string, a separator
# (a slot).  Numbers are at most 32 bytes and 2 of text: the factor covers them.
_MEMBER, _OBJECT, _ARRAY, _STRING, _SLOT = 110, 120, 72, 52, 8
_SCAN_CHUNK = 1 << 18  # bytes of the document scanned at once (about 10 MiB of scratch)
# Kinds of structural byte: 1 "[", 2 "{", 3 "]", 4 "}", 5 ",", 6 ":"
_KIND = np.zeros(256, np.uint8)
for _kind, _char in enumerate(b"[{]},:", 1):
    _KIND[_char] = _kind
_DEPTH = np.array([0, 1, 1, -1, -1, 0, 0], np.int64)
_BACKSLASH, _QUOTE, _U = ord("\\"), ord('"'), ord("u")


def parse_json(text: bytes | str, where: str, *, serde: bool = True) -> Any:
    """Parse untrusted JSON strictly: duplicate object keys, invalid UTF-8,
    ``NaN`` / ``Infinity``, nesting deeper than :data:`MAX_JSON_DEPTH`, and
    documents whose values would cost too much memory (:func:`check_json`) are
    TYPE (``where`` starts the message); depth and cost are checked before
    anything is parsed.  With ``serde`` (for the formats the safetensors crate
    reads), as strict as serde_json, its parser: also numbers past binary64's
    range (``1e999``, a 400-digit integer) and escapes of half a UTF-16
    surrogate pair.  Without it (a Kiln manifest, which keeps any Python int
    and the lone surrogates of GGUF text that is not UTF-8), those are read as
    Python's json reads them.

    >>> parse_json(b'{"a": [1, 2.5]}', "header: ")
    {'a': [1, 2.5]}
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    check_json(raw, where, serde=serde)
    numbers: dict[str, Any] = {}
    if serde:
        numbers["parse_float"] = _finite
        if _LONG_DIGITS.search(raw):  # rare: only then is every integer checked
            numbers["parse_int"] = _in_range
    try:
        # Decoded here: json.loads would also take UTF-16 and UTF-32 bytes.
        decoded = raw.decode("utf-8")
        return json.loads(
            decoded,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            **numbers,
        )
    except _DuplicateKeyError as exc:
        raise KilnError("TYPE", f"{where}expected unique keys, found {exc.key!r} twice") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the 4300-digit limit
        raise KilnError("TYPE", f"{where}expected valid JSON, found: {exc}") from None


def check_json(raw: bytes, where: str, *, serde: bool = True) -> None:
    """Refuse, before parsing, a JSON document nested deeper than
    :data:`MAX_JSON_DEPTH`, one whose values would cost more than
    :data:`JSON_COST_FACTOR` times its size plus :data:`JSON_COST_ALLOWANCE` as
    Python objects, or, with ``serde``, one escaping half a surrogate pair
    (``"\\ud800"`` alone): TYPE.  A vectorized scan, a bounded chunk at a time,
    of the structural bytes outside strings; writers call it on what they
    write, so kiln_np reads back every document it writes.

    >>> check_json(b'[[[]]]', "x: ")
    >>> check_json(b'[' * 128 + b']' * 128, "x: ")
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: TYPE: x: expected JSON nested at most 127 levels, found 128
    """
    arr = np.frombuffer(raw, np.uint8)
    counts = np.zeros(7, np.int64)
    quotes = depth = deepest = run = 0  # run: backslashes ending the chunk before
    inside = False
    paired: np.ndarray = np.zeros(0, np.int64)  # low surrogates a high one announced
    for start in range(0, arr.size, _SCAN_CHUNK):
        chunk = arr[start : start + _SCAN_CHUNK]
        backslash = chunk == _BACKSLASH
        # Backslashes just before each byte: an odd number escapes it.
        if backslash.any():
            at = np.arange(chunk.size)
            last = np.maximum.accumulate(np.where(backslash, -1 - run, at))
            before = np.empty(chunk.size, np.int64)
            before[0] = run
            before[1:] = at[:-1] - last[:-1]
            run = int(chunk.size - 1 - last[-1])
            escapes = np.flatnonzero(backslash & (before % 2 == 0)) + start
            if serde:
                paired = _check_surrogates(arr, escapes, paired, start + chunk.size, where)
            real = np.flatnonzero((chunk == _QUOTE) & (before % 2 == 0))
        else:
            run = 0
            real = np.flatnonzero(chunk == _QUOTE)
        kinds = _KIND[chunk]
        structural = np.flatnonzero(kinds)
        # Outside a string: an even number of real quotes before it (with those before).
        outside = ((np.searchsorted(real, structural) + inside) % 2) == 0
        kinds = kinds[structural[outside]]
        counts += np.bincount(kinds, minlength=7)
        if kinds.size:
            levels = depth + np.cumsum(_DEPTH[kinds])
            deepest = max(deepest, int(levels.max()))
            depth = int(levels[-1])
        quotes += real.size
        inside ^= bool(real.size % 2)
        if deepest > MAX_JSON_DEPTH:
            raise KilnError(
                "TYPE",
                f"{where}expected JSON nested at most {MAX_JSON_DEPTH} levels, found {deepest}",
                expected=MAX_JSON_DEPTH,
                found=deepest,
            )
        _check_cost(counts, quotes, arr.size, where)  # refused as soon as it is too much
    if paired.size:
        _lone_surrogate(arr, int(paired[0]) - 6, where)


def _check_cost(counts: np.ndarray, quotes: int, size: int, where: str) -> None:
    objects, arrays, members = int(counts[2]), int(counts[1]), int(counts[6])
    cost = (
        _MEMBER * members
        + _OBJECT * objects
        + _ARRAY * arrays
        + _SLOT * int(counts[5])
        + _STRING * (quotes // 2)
    )
    limit = JSON_COST_FACTOR * size + JSON_COST_ALLOWANCE
    if cost > limit:
        raise KilnError(
            "TYPE",
            f"{where}expected JSON whose values take at most {JSON_COST_FACTOR} times its "
            f"size plus {JSON_COST_ALLOWANCE >> 20} MiB as Python objects, found {size} "
            f"bytes holding at least {objects} objects, {members} members, {arrays} arrays "
            f"and {quotes // 2} strings (about {cost >> 20} MiB)",
            expected=limit,
            found=cost,
        )


def _check_surrogates(
    arr: np.ndarray, escapes: np.ndarray, paired: np.ndarray, stop: int, where: str
) -> np.ndarray:
    """Refuse a ``\\uXXXX`` escape of half a surrogate pair that has no other half.
    ``escapes``: where real escapes start, in bytes before ``stop``; ``paired``:
    where low halves announced by earlier high halves start.  Returns the low
    halves announced at or past ``stop``."""
    escapes = escapes[escapes + 5 < arr.size]
    escapes = escapes[arr[escapes + 1] == _U]
    surrogate = escapes[(arr[escapes + 2] | 0x20) == ord("d")]
    third = arr[surrogate + 3] | 0x20
    high = surrogate[np.isin(third, np.frombuffer(b"89ab", np.uint8))]
    low = surrogate[np.isin(third, np.frombuffer(b"cdef", np.uint8))]
    ok = high + 11 < arr.size
    follows = high[ok] + 6
    ok[ok] = (
        (arr[follows] == _BACKSLASH)
        & (arr[follows + 1] == _U)
        & ((arr[follows + 2] | 0x20) == ord("d"))
        & np.isin(arr[follows + 3] | 0x20, np.frombuffer(b"cdef", np.uint8))
    )
    if not ok.all():
        _lone_surrogate(arr, int(high[~ok][0]), where)
    announced = np.concatenate([paired, high + 6])
    unannounced = low[~np.isin(low, announced)]
    if unannounced.size:
        _lone_surrogate(arr, int(unannounced[0]), where)
    return announced[announced >= stop]


def _lone_surrogate(arr: np.ndarray, at: int, where: str) -> None:
    shown = arr[at : at + 6].tobytes().decode("ascii", "replace")
    raise KilnError(
        "TYPE",
        f"{where}expected text, found {shown!r} at byte {at}: half a UTF-16 surrogate "
        "pair with no other half, which serde_json (the safetensors crate) refuses",
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (serde_json refuses it)")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} is out of range of a binary64 (serde_json refuses it)")
    return value


_INT_DIGITS = len(str(int(sys.float_info.max)))  # 309: serde_json reads longer ones as f64
_LONG_DIGITS = re.compile(rb"(?<![0-9])[0-9]{%d}" % _INT_DIGITS)


def _in_range(text: str) -> int:
    if len(text.lstrip("-")) >= _INT_DIGITS:
        _finite(text)
    return int(text)


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return result


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
