"""``_weights.metadata``: typed metadata JSON, encoded and decoded, bounded; the
manifest's JSON against Python's json and an oracle."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import bits, raises_kind
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import KilnError, Layout, Payload
from kiln_np._core import jsontext
from kiln_np._weights import metadata
from kiln_np._weights.metadata import decode_metadata, encode_metadata

# ------------------------------------------------------------------ typed metadata


def test_metadata_encoding_keeps_types_and_bits() -> None:
    values = {
        "s": "x",
        "i": 2**70,
        "b": True,
        "f": -0.0,
        "nan": float("nan"),
        "u8": np.uint8(255),
        "bool": np.bool_(False),
        "f16": np.array([0x7C01], np.uint16).view("<f2")[0],
        "c": np.complex64(1 - 2j),
        "arr": np.arange(4, dtype=">i4").reshape(2, 2),
        "raw": b"\x00\xff",
        "list": [1, ["a", np.float64(2.0)]],
        "dict": {"k": np.int16(-1)},
    }
    back = decode_metadata(json.loads(json.dumps(encode_metadata(values))))
    for key, value in values.items():
        assert type(back[key]) is type(value), key
        if isinstance(value, (np.generic, np.ndarray, float)):
            assert bits(np.asarray(back[key])) == bits(np.asarray(value)), key
        elif key != "list":
            assert back[key] == value
    assert back["list"][1][1] == 2.0
    assert type(back["list"][1][1]) is np.float64
    assert back["arr"].dtype == np.dtype("<i4")


@pytest.mark.parametrize(
    "bad",
    [
        {1: "x"},
        {"a": object()},
        {"a": np.array(["s"])},
        {"a": np.datetime64(1, "s")},
        {"a": {2: 1}},
    ],
)
def test_metadata_encoding_refuses(bad: dict[Any, Any]) -> None:
    raises_kind("TYPE", encode_metadata, bad)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"a": "x"},
        {"a": []},
        {"a": ["float", 1.5]},
        {"a": ["float", "ff"]},
        {"a": ["float", "0x" + "f" * 20]},
        {"a": ["np.float32", 1]},
        {"a": ["np.object", 1]},
        {"a": ["np.ndarray", "<f4", [2], "AAAA"]},
        {"a": ["np.ndarray", "<f4", [-1], ""]},
        {"a": ["bytes", "!!"]},
        {"a": ["int", True]},
        {"a": ["nope", 1]},
    ],
)
def test_metadata_decoding_refuses(bad: object) -> None:
    raises_kind("TYPE", decode_metadata, bad)


_JSON_TEXT = st.text(st.sampled_from('ab\\"\ud800\udc00\U0001f600'), max_size=6)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | _JSON_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_JSON_TEXT, inner, max_size=4),
    max_leaves=12,
)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _lone_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(map(_lone_surrogate, value))


@given(
    value=_JSON_VALUES,
    wrap=st.sampled_from([0, 1, 120, 124, 125, 126, 127, 128]),
    chunk=st.sampled_from([1, 2, 3, 5, 7, 11, 1 << 18]),
    spaces=st.booleans(),
)
def test_parse_json_agrees_with_json_and_serde(
    value: object, wrap: int, chunk: int, spaces: bool
) -> None:
    """The pre-scan (its chunks cut anywhere) accepts exactly what is nested at most
    127 levels and holds no half surrogate pair; what it accepts parses as json
    parses it."""
    text = json.dumps(value, separators=(", ", ": ") if spaces else (",", ":"))
    raw = ("[" * wrap + text + "]" * wrap).encode()
    expected = json.loads(raw)  # escapes of two halves in a row are one character
    good = _depth(expected) <= metadata.MAX_JSON_DEPTH and not _lone_surrogate(expected)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsontext, "_SCAN_CHUNK", chunk)  # the one parser's module
        if not good:
            raises_kind("TYPE", metadata.parse_json, raw, "")
            return
        assert metadata.parse_json(raw, "") == expected
        assert metadata.parse_json(raw, "", serde=False) == expected


@given(edits=st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)), min_size=1, max_size=3))
def test_kiln_manifest_oracle(edits: list[tuple[int, int]]) -> None:
    """A Kiln directory whose manifest has bytes changed: it opens, every tensor's
    file holding exactly its byte_length, or it raises KilnError (or the OS's
    FileNotFoundError when a file name changed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dir"
        tensors = {"w": np.arange(4, dtype=np.int32), "q": MANIFEST_Q4}
        kiln_np.save_weights(out, tensors, format="kiln", metadata={"n": np.uint8(3)})
        raw = bytearray((out / "manifest.json").read_bytes())
        for pos, value in edits:
            if pos < len(raw):
                raw[pos] = value
        (out / "manifest.json").write_bytes(bytes(raw))
        try:
            weights = kiln_np.open_weights(out, verify=True)
        except (KilnError, FileNotFoundError):
            return
        with weights:
            for t in weights.values():
                assert len(t.payload().data) == t.byte_length


MANIFEST_Q4 = Payload(0x4702, memoryview(bytes(range(36))), (2, 1), Layout("ggml.q4_0", 18))
