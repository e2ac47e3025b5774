"""Untrusted JSON parsed strictly, with caps on its nesting and on what its values
cost as Python objects: the package's one JSON parser (:func:`parse_json`), for every
floor that reads JSON from untrusted hands (safetensors headers and indexes, Kiln
manifests, Zarr documents, a checkpoint's ``config.json`` and
``hf_quant_config.json``, a bitsandbytes quant state).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import numpy as np

from .errors import KilnError

__all__ = [
    "JSON_COST_ALLOWANCE",
    "JSON_COST_FACTOR",
    "MAX_JSON_DEPTH",
    "check_json",
    "parse_json",
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


def parse_json(
    text: bytes | str, where: str, *, serde: bool = True, constants: bool = False
) -> Any:
    """Parse untrusted JSON strictly: duplicate object keys, invalid UTF-8,
    ``NaN`` / ``Infinity``, nesting deeper than :data:`MAX_JSON_DEPTH`, and
    documents whose values would cost too much memory (:func:`check_json`) are
    TYPE (``where`` starts the message); depth and cost are checked before
    anything is parsed.  With ``serde`` (for the formats the safetensors crate
    reads), as strict as serde_json, its parser: also numbers past binary64's
    range (``1e999``, a 400-digit integer) and escapes of half a UTF-16
    surrogate pair.  Without it (a Kiln manifest, which keeps any Python int
    and the lone surrogates of GGUF text that is not UTF-8), those are read as
    Python's json reads them.  With ``constants`` (a document Python's json
    wrote: a ``config.json``, a bitsandbytes quant state), ``NaN``,
    ``Infinity`` and ``-Infinity`` are read as Python's json reads them.

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
            parse_constant=float if constants else _no_constant,
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
