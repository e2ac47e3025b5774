"""kiln_np.safetensors: the dtype table, files the safetensors package (and torch)
wrote read bit for bit, files kiln_np wrote read back by the package, the
header rules of the crate's ``validate``, sharded checkpoints, and hostile
headers that either open or raise KilnError."""

from __future__ import annotations

import json
import os
import struct
import tempfile
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, optional
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import KilnError, Layout
from kiln_np import onnx as konnx
from kiln_np import safetensors as kst
from kiln_np._core.foreign import FOREIGN_BY_NAME
from kiln_np.safetensors._types import BY_NAME

if TYPE_CHECKING:
    import safetensors
else:
    safetensors = optional("safetensors")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
st_deserialize: Any = safetensors.deserialize  # the package ships no annotations for it

# safetensors name -> (the package's TensorSpec dtype, bytes per element or None for F4)
SPEC_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F4": "float4_e2m1fn_x2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "C64": "complex64",
}


def _raise(kind: str, call: Any, *args: Any, **kwargs: Any) -> KilnError:
    with pytest.raises(KilnError) as info:
        call(*args, **kwargs)
    assert info.value.kind == kind, str(info.value)
    return info.value


def serialize(tensors: dict[str, tuple[str, list[int], bytes]], metadata: Any = None) -> bytes:
    """The safetensors package's own writer (torch-free): name -> (dtype, shape, bytes)."""
    keep = {
        name: np.frombuffer(data, np.uint8) if data else np.zeros(1, np.uint8)
        for name, (_, _, data) in tensors.items()
    }
    specs = {}
    for name, (dtype, shape, data) in tensors.items():
        storage = list(shape)
        if dtype == "F4":  # the package takes torch's storage shape: two F4 per byte
            storage[-1] //= 2
        specs[name] = safetensors.TensorSpec(
            dtype=SPEC_NAMES[dtype],
            shape=storage,
            data_ptr=keep[name].ctypes.data,
            data_len=len(data),
        )
    return bytes(safetensors.serialize(specs, metadata=metadata))


def deserialize(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    return {
        name: (t["dtype"], list(t["shape"]), bytes(t["data"]))
        for name, t in st_deserialize(path.read_bytes())
    }


def random_payload(name: str, shape: tuple[int, ...], seed: int = 0) -> bytes:
    row = BY_NAME[name]
    info = kiln_np.payload_info(row.code, shape, row.layout)
    raw = np.random.default_rng(seed).integers(0, 256, info.byte_length, dtype=np.uint8)
    if name == "BOOL":
        raw &= 1
    return raw.tobytes()


def header_file(
    tmp_path: Path, header: object, data: bytes = b"", raw: bytes | None = None
) -> Path:
    text = raw if raw is not None else json.dumps(header).encode()
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


# ------------------------------------------------------------------ the table


def test_table_is_the_issue_mapping() -> None:
    closed = {r.name: int(r.code) for r in kst.DTYPES if r.layout is None}
    names = "BOOL U8 I8 I16 U16 I32 U32 I64 U64 F16 BF16 F32 F64 F8_E4M3 F8_E5M2 F8_E8M0 F4"
    codes = [7, 9, 8, 10, 11, 12, 13, 14, 15, 3, 4, 2, 1, 5, 6, 19, 18]
    assert closed == dict(zip(names.split(), codes, strict=True))
    assert sorted(kst.REFUSED) == ["F6_E2M3", "F6_E3M2"]


@pytest.mark.parametrize(
    ("name", "numpy_name"),
    [("F8_E4M3FNUZ", "float8_e4m3fnuz"), ("F8_E5M2FNUZ", "float8_e5m2fnuz"), ("C64", "complex64")],
)
def test_foreign_rows_share_the_onnx_registry(name: str, numpy_name: str) -> None:
    row = BY_NAME[name]
    foreign = FOREIGN_BY_NAME[numpy_name]
    assert (row.code, row.layout) == (foreign.code, foreign.layout)
    onnx_row = next(r for r in konnx.DATA_TYPES if r.dtype == foreign.dtype)
    assert (onnx_row.kiln_code, onnx_row.layout) == (row.code, row.layout)


def test_table_names_cover_the_package() -> None:
    # Every dtype the package writes is in DTYPES or REFUSED: nothing is silently unknown.
    assert set(SPEC_NAMES) == {r.name for r in kst.DTYPES}


def test_public_names_say_where_they_live() -> None:
    for name in kst.__all__:
        obj = getattr(kst, name)
        if callable(obj):
            assert obj.__module__ == "kiln_np.safetensors", name


# --------------------------------------------- files the package wrote, read by kiln_np


SHAPES = [(), (0,), (2, 0, 3), (3,), (5, 4), (1, 1, 7, 2)]


@pytest.mark.parametrize("name", list(SPEC_NAMES))
def test_reads_what_the_package_writes(tmp_path: Path, name: str) -> None:
    shapes = [s for s in SHAPES if name != "F4" or (s and s[-1] % 2 == 0)]
    tensors = {f"t{i}": (name, list(s), random_payload(name, s, i)) for i, s in enumerate(shapes)}
    path = tmp_path / "o.safetensors"
    path.write_bytes(serialize(tensors, {"format": "pt", "k": "v"}))
    with kiln_np.open_weights(path) as weights:
        assert weights.format == "safetensors"
        assert dict(weights.metadata) == {"format": "pt", "k": "v"}
        row = BY_NAME[name]
        for key, (_, shape, data) in tensors.items():
            t = weights[key]
            assert (t.code, t.shape, t.layout, t.format_dtype) == (
                row.code,
                tuple(shape),
                row.layout,
                name,
            )
            assert t.byte_length == len(data)
            assert bytes(t.payload().data) == data
            decoded = t.numpy()
            if row.layout is None:
                expected = kiln_np.to_numpy(row.code, data, tuple(shape))
                assert bits(decoded) == bits(expected)


def test_offsets_order_and_alignment_of_package_files(tmp_path: Path) -> None:
    tensors = {"b": ("U8", [3], b"abc"), "a": ("F64", [1], bytes(8)), "c": ("F32", [2], bytes(8))}
    path = tmp_path / "o.safetensors"
    path.write_bytes(serialize(tensors))
    with kiln_np.open_weights(path) as weights:
        offsets = [t.offset for t in weights.values()]
        assert offsets == sorted(offsets)  # file order is data order
        assert list(weights) == ["a", "c", "b"]  # the package writes widest first


# --------------------------------------------------------- torch fixtures (committed)


def test_torch_fixtures_bit_for_bit() -> None:
    expected = json.loads((FIXTURES / "torch_dtypes.json").read_text())
    with kiln_np.open_weights(FIXTURES / "torch_dtypes.safetensors") as weights:
        assert dict(weights.metadata) == expected["metadata"]
        assert list(weights) == list(expected["tensors"])
        for name, want in expected["tensors"].items():
            t = weights[name]
            assert t.format_dtype == want["dtype"]
            assert list(t.shape) == want["shape"]
            assert bytes(t.payload().data).hex() == want["bytes"]
            # torch's own decode, as float32 bits, against kiln_np's (ml_dtypes).  The
            # bits of a widened NaN are each library's policy (torch makes e8m0 0xff
            # 0x7f800001, ml_dtypes 0x7fc00000): NaN where torch has NaN, else every bit.
            ours = t.numpy().astype(np.float32).reshape(-1)
            theirs = np.frombuffer(bytes.fromhex(want["float32"]), "<f4")
            assert (np.isnan(ours) == np.isnan(theirs)).all(), name
            keep = ~np.isnan(theirs)
            assert bits(ours[keep]) == bits(theirs[keep]), name


# ------------------------------------------------- files kiln_np writes, read by the package


@pytest.mark.parametrize("name", list(SPEC_NAMES))
def test_package_reads_what_kiln_np_writes(tmp_path: Path, name: str) -> None:
    row = BY_NAME[name]
    shapes = [s for s in SHAPES if name != "F4" or (s and s[-1] % 2 == 0)]
    tensors = {
        f"t{i}": kiln_np.Payload(row.code, memoryview(random_payload(name, s, i)), s, row.layout)
        for i, s in enumerate(shapes)
    }
    path = tmp_path / "k.safetensors"
    kiln_np.save_weights(path, tensors, format="safetensors", metadata={"format": "pt"})
    got = deserialize(path)
    assert set(got) == set(tensors)
    for key, payload in tensors.items():
        assert got[key] == (name, list(payload.shape), bytes(payload.data))
    with safetensors.safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}


def test_header_is_padded_with_spaces_and_data_aligned(tmp_path: Path) -> None:
    tensors = {"u": np.arange(3, dtype=np.uint8), "d": np.arange(2.0), "h": np.ones(3, np.float16)}
    path = tmp_path / "k.safetensors"
    kiln_np.save_weights(path, tensors, format="safetensors")
    raw = path.read_bytes()
    n = struct.unpack_from("<Q", raw)[0]
    assert n % 8 == 0
    text = raw[8 : 8 + n]
    assert (
        text.rstrip(b" ") != text
        or json.dumps(json.loads(text), separators=(",", ":")).encode() == text
    )
    header = json.loads(text)
    assert list(header) == ["d", "h", "u"]  # widest first, the given order within a width
    for t in kiln_np.open_weights(path).values():
        assert t.offset % max(1, t.numpy().dtype.itemsize) == 0


def test_metadata_as_given_and_absent(tmp_path: Path) -> None:
    path = tmp_path / "k.safetensors"
    kiln_np.save_weights(path, {"x": np.zeros(1, np.int8)}, format="safetensors")
    assert "__metadata__" not in json.loads(path.read_bytes()[8:].split(b"\x00")[0])
    kiln_np.save_weights(path, {"x": np.zeros(1, np.int8)}, format="safetensors", metadata={})
    with safetensors.safe_open(path, framework="numpy") as f:
        assert f.metadata() == {}


# ------------------------------------------------------------------- round trips


def _special_floats() -> dict[str, np.ndarray]:
    f32 = np.array([0x7FC00001, 0x7F800001, 0x80000000, 0xFF800000, 1], np.uint32).view("<f4")
    f64 = np.array([0x7FF0000000000001, 0x8000000000000000], np.uint64).view("<f8")
    f16 = np.array([0x7C01, 0x8000, 0x7E00], np.uint16).view("<f2")
    bf16 = np.array([0x7F81, 0x8000, 0xFFC1], np.uint16).view(ml_dtypes.bfloat16)
    return {
        "f32 nan payloads": f32,
        "f64 snan": f64,
        "f16": f16,
        "bf16": bf16,
        "f8": np.array([0x7F, 0x80, 0xFF], np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(3, 1),
        "e8m0": np.array([0, 0xFF, 127], np.uint8).view(ml_dtypes.float8_e8m0fnu),
        "fp4 odd shape": np.arange(6, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).reshape(3, 2),
        "empty": np.zeros((0, 5), np.float32),
        "scalar": np.array(-0.0, np.float64),
        "bool": np.array([[True, False, True]]),
        "complex": np.array([1 + 2j, np.nan], np.complex64),
    }


def test_safetensors_to_kiln_dir_to_safetensors(tmp_path: Path) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, _special_floats(), format="safetensors", metadata={"format": "pt"})
    with kiln_np.open_weights(src) as a:
        kiln_np.save_weights(tmp_path / "dir", a, format="kiln", metadata=a.metadata)
    with kiln_np.open_weights(tmp_path / "dir", verify=True) as d:
        kiln_np.save_weights(
            tmp_path / "b.safetensors", d, format="safetensors", metadata=d.metadata
        )
    before, after = deserialize(src), deserialize(tmp_path / "b.safetensors")
    assert before == after
    with safetensors.safe_open(tmp_path / "b.safetensors", framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}


GGUF_SHARED = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}


def test_safetensors_to_gguf_to_safetensors(tmp_path: Path) -> None:
    tensors = {
        f"{name.lower()}_{i}": kiln_np.Payload(
            BY_NAME[name].code, memoryview(random_payload(name, s, i)), s
        )
        for name in sorted(GGUF_SHARED)
        for i, s in enumerate([(), (3,), (5, 4), (1, 1, 7, 2)])
    }
    tensors |= {
        k: kiln_np.from_numpy(v)
        for k, v in _special_floats().items()
        if k in ("f32 nan payloads", "f64 snan", "f16", "bf16", "scalar")
    }
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, tensors, format="safetensors")
    with kiln_np.open_weights(src) as a:
        kiln_np.save_weights(tmp_path / "m.gguf", a, format="gguf")
    with kiln_np.open_weights(tmp_path / "m.gguf") as g:
        assert g.format == "gguf"
        kiln_np.save_weights(tmp_path / "b.safetensors", g, format="safetensors")
    assert deserialize(src) == deserialize(tmp_path / "b.safetensors")


def test_gguf_refuses_what_it_cannot_hold_before_writing(tmp_path: Path) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(
        src, {"ok": np.ones(2, np.float32), "e": np.zeros((0, 2), np.float32)}, format="safetensors"
    )
    with kiln_np.open_weights(src) as a:
        err = _raise("SHAPE", kiln_np.save_weights, tmp_path / "m.gguf", a, format="gguf")
    assert "'e'" in str(err)
    assert not (tmp_path / "m.gguf").exists()


# ------------------------------------------------------------ what safetensors cannot hold


def test_refuses_codes_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "k.safetensors"
    good = np.ones(4, np.float32)
    u4 = np.array([1, 2], ml_dtypes.uint4)
    err = _raise("TYPE", kiln_np.save_weights, path, {"a": good, "q": u4}, format="safetensors")
    assert "'q'" in str(err)
    assert "u4" in str(err)
    odd = np.zeros(3, ml_dtypes.float4_e2m1fn)
    err = _raise("TYPE", kiln_np.save_weights, path, {"a": good, "f": odd}, format="safetensors")
    assert "'f'" in str(err)
    assert "even" in str(err)
    opaque = kiln_np.Payload(0x4702, memoryview(bytes(18)), (1,), Layout("ggml.q4_0", 18))
    _raise("TYPE", kiln_np.save_weights, path, {"g": opaque}, format="safetensors")
    _raise("TYPE", kiln_np.save_weights, path, {"__metadata__": good}, format="safetensors")
    _raise("TYPE", kiln_np.save_weights, path, {"\ud800": good}, format="safetensors")
    _raise("TYPE", kiln_np.save_weights, path, {"a": good}, format="safetensors", metadata={"a": 1})
    _raise(
        "TYPE",
        kiln_np.save_weights,
        path,
        {"a": good},
        format="safetensors",
        metadata={"\udcff": "x"},
    )
    short = kiln_np.Payload(2, memoryview(bytes(7)), (2,), None)
    _raise("LENGTH", kiln_np.save_weights, path, {"s": short}, format="safetensors")
    assert os.listdir(tmp_path) == []


def test_f6_is_refused_with_why(tmp_path: Path) -> None:
    path = header_file(
        tmp_path, {"x": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}}, bytes(3)
    )
    err = _raise("TYPE", kiln_np.open_weights, path)
    assert "does not document" in str(err)


# ----------------------------------------------------------------- header rules


def _entry(dtype: str = "F32", shape: Any = (2,), offsets: Any = (0, 8)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


@pytest.mark.parametrize(
    ("kind", "header", "data", "words"),
    [
        ("TYPE", [1, 2], b"", "JSON object"),
        ("TYPE", {"__metadata__": {"a": 1}}, b"", "str to str"),
        ("TYPE", {"__metadata__": ["a"]}, b"", "str to str"),
        ("TYPE", {"x": [1]}, bytes(8), "dtype"),
        ("TYPE", {"x": _entry("F33")}, bytes(8), "expected a dtype"),
        ("TYPE", {"x": {"shape": [2], "data_offsets": [0, 8]}}, bytes(8), "dtype"),
        ("SHAPE", {"x": _entry(shape=[-2])}, bytes(8), "shape"),
        ("SHAPE", {"x": _entry(shape=[2.0])}, bytes(8), "shape"),
        ("SHAPE", {"x": _entry(shape=[True, 2])}, bytes(8), "shape"),
        ("SHAPE", {"x": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}, bytes(8), "shape"),
        ("SHAPE", {"x": _entry(shape=[2**40, 2**40])}, bytes(8), "shape"),
        ("TYPE", {"x": _entry(offsets=[0])}, bytes(8), "data_offsets"),
        ("TYPE", {"x": _entry(offsets=[0, 8.0])}, bytes(8), "data_offsets"),
        ("TYPE", {"x": _entry(offsets=[-8, 0])}, bytes(8), "data_offsets"),
        ("TYPE", {"x": _entry(offsets=[4, 12])}, bytes(12), "begin at 0"),
        ("TYPE", {"x": _entry(offsets=[8, 0])}, bytes(8), "begin at 0"),
        ("TYPE", {"x": _entry(), "y": _entry(offsets=[4, 12])}, bytes(12), "begin at 8"),
        ("TYPE", {"x": _entry(), "y": _entry(offsets=[12, 20])}, bytes(20), "begin at 8"),
        ("LENGTH", {"x": _entry(offsets=[0, 12])}, bytes(12), "long by 4"),
        ("LENGTH", {"x": _entry(offsets=[0, 4])}, bytes(4), "short by 4"),
        ("LENGTH", {"x": _entry()}, bytes(9), "long by 1"),
        ("LENGTH", {"x": _entry()}, bytes(7), "short by 1"),
        ("TYPE", {"x": _entry("F4", [3], [0, 2])}, bytes(2), "even"),
        ("LENGTH", {"x": _entry("F4", [4], [0, 4])}, bytes(4), "expected"),
    ],
)
def test_header_rules(tmp_path: Path, kind: str, header: object, data: bytes, words: str) -> None:
    path = header_file(tmp_path, header, data)
    err = _raise(kind, kst.open_safetensors, path)
    assert words in str(err)
    assert repr(str(path)) in str(err)
    # the crate agrees that these files are broken
    with pytest.raises(Exception):  # noqa: B017, PT011 - the package has one error type
        st_deserialize(path.read_bytes())


@pytest.mark.parametrize(
    ("kind", "raw", "words"),
    [
        ("TYPE", b'{"a": 1, "a": 2}', "twice"),
        ("TYPE", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
        ("TYPE", b'{"x": "\xff"}', "JSON"),
        ("TYPE", b'{"x": 1', "JSON"),
        ("TYPE", "{}".encode("utf-16"), "JSON"),
        ("TYPE", b'{"x": {"dtype": "F32", "shape": [' + b"9" * 5000 + b"]}}", "JSON"),
    ],
)
def test_header_json(tmp_path: Path, kind: str, raw: bytes, words: str) -> None:
    err = _raise(kind, kst.open_safetensors, header_file(tmp_path, None, raw=raw))
    assert words in str(err)


_ENTRY = b'"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]'


def _with_field(value: bytes, key: bytes = b'"x"') -> bytes:
    """A valid one-tensor header whose entry has a field the crate ignores."""
    return b"{" + _ENTRY + b"," + key + b":" + value + b"}}"


@pytest.mark.parametrize(
    "raw",
    [
        _with_field(b"NaN"),
        _with_field(b"Infinity"),
        _with_field(b"-Infinity"),
        _with_field(b"[1, NaN]"),
        _with_field(b'"\\ud800"'),  # a lone high half
        _with_field(b'"\\udc00"'),  # a lone low half
        _with_field(b'"\\ud800\\u0041"'),  # a high half then not a low one
        _with_field(b'"\\udc00\\ud800"'),  # the halves in the wrong order
        _with_field(b"1", key=b'"\\udbff"'),  # in a key
        b'{"__metadata__":{"k":"\\ud800"},' + _ENTRY + b"}}",
        _with_field(b'"\\ud83d\\ude00"'),  # a pair: both accept
        _with_field(b'"\\\\ud800"'),  # an escaped backslash, then text: both accept
        _with_field(b'"\\\\\\ud800"'),  # an escaped backslash, then a lone half
        _with_field(b"[" * 125 + b"]" * 125),  # 127 levels: both accept
        _with_field(b"[" * 126 + b"]" * 126),  # 128 levels
        _with_field(b"9" * 308),
        _with_field(b"9" * 309),
        _with_field(b"-" + b"9" * 309),
        _with_field(b"1e308"),
        _with_field(b"1e999"),
        _with_field(b"-1.5e400"),
        _with_field(b'"\\u0000"'),
        _with_field(b'"a\tb"'),
        _with_field(b"[1,]"),
    ],
)
def test_header_json_is_as_strict_as_the_crate(tmp_path: Path, raw: bytes) -> None:
    """serde_json (the crate's parser) and kiln_np refuse and accept the same
    headers, fields the crate ignores included."""
    path = header_file(tmp_path, None, b"\x01", raw=raw + b" " * (-len(raw) % 8))
    try:
        with safetensors.safe_open(path, framework="numpy") as f:
            theirs = list(f.keys())
    except Exception:
        theirs = None
    ours: list[str] | None = None
    try:
        with kst.open_safetensors(path) as w:
            ours = list(w)
    except KilnError as exc:
        kind = exc.kind
    else:
        kind = "TYPE"
    assert (ours, kind) == (theirs, "TYPE")


def test_lone_surrogates_are_found_across_scan_chunks(tmp_path: Path) -> None:
    for gap in range((1 << 18) - 16, (1 << 18) + 2):  # the two halves either side of a chunk
        pair = b'"\\ud83d\\ude00"'
        raw = b'{"__metadata__":{"k":"' + b"a" * gap + b'","p":' + pair + b"}}"
        assert (
            kst.open_safetensors(header_file(tmp_path, None, raw=raw)).metadata["p"] == "\U0001f600"
        )
        lone = raw.replace(b"\\ude00", b"x" * 6)
        _raise("TYPE", kst.open_safetensors, header_file(tmp_path, None, raw=lone))
    # a backslash run across a chunk boundary: 3 backslashes escape a quote, 2 do not
    for cut in range(1, 4):
        text = b"a" * ((1 << 18) - 5 - cut) + b"\\" * 2 + b'"'
        doc = json.dumps({"__metadata__": {"k": text.decode()}}).encode()
        assert kst.open_safetensors(header_file(tmp_path, None, raw=doc)).metadata["k"] == (
            text.decode()
        )


def test_hostile_headers_are_refused_before_they_are_parsed(tmp_path: Path) -> None:
    """1,500,000 empty objects (5 MB) used to take 300 MB of Python objects before the
    first was refused: now refused by a scan that keeps a few MiB."""
    for raw in (
        b"{" + b",".join(b'"%d":{}' % i for i in range(1_500_000)) + b"}",
        b'{"x":[' + b"[]," * 2_500_000 + b"[]]}",
    ):
        path = header_file(tmp_path, None, raw=raw)
        tracemalloc.start()
        err = _raise("TYPE", kst.open_safetensors, path)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert "as Python objects" in str(err)
        assert peak < len(raw) + (24 << 20), peak


def test_header_sizes(tmp_path: Path) -> None:
    path = tmp_path / "s.safetensors"
    path.write_bytes(struct.pack("<Q", 100_000_001) + b"{}")
    assert "100000000" in str(_raise("TYPE", kst.open_safetensors, path))
    path.write_bytes(struct.pack("<Q", 3) + b"{}")
    assert "short by 1" in str(_raise("LENGTH", kst.open_safetensors, path))
    path.write_bytes(b"\x02\x00\x00")
    _raise("LENGTH", kst.open_safetensors, path)
    path.write_bytes(struct.pack("<Q", 2**64 - 1) + b"{}")
    _raise("TYPE", kst.open_safetensors, path)
    path.write_bytes(struct.pack("<Q", 8) + b"{}      ")
    assert len(kst.open_safetensors(path)) == 0


def test_metadata_null_and_unknown_entry_keys_as_the_crate(tmp_path: Path) -> None:
    header = {"__metadata__": None, "x": {**_entry(), "extra": [1]}}
    path = header_file(tmp_path, header, bytes(8))
    st_deserialize(path.read_bytes())
    with kst.open_safetensors(path) as w:
        assert dict(w.metadata) == {}
        assert w["x"].shape == (2,)


def test_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "f.safetensors"
    os.mkfifo(fifo)
    assert "FIFO" in str(_raise("TYPE", kst.open_safetensors, fifo))


# ------------------------------------------------------------------ hostile headers


def _valid_file() -> bytes:
    return serialize(
        {
            "a": ("F32", [2, 2], bytes(range(16))),
            "b": ("U8", [3], b"xyz"),
            "c": ("F4", [4], b"\x21\x43"),
        },
        {"k": "v"},
    )


@given(
    edits=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 300)),
)
def test_safetensors_header_oracle(edits: list[tuple[int, int]], cut: int | None) -> None:
    """A valid file with bytes changed or cut: kiln_np opens it or raises KilnError,
    and what it opens the safetensors crate opens too, with the same bytes."""
    raw = bytearray(_valid_file())
    for pos, value in edits:
        if pos < len(raw):
            raw[pos] = value
    data = bytes(raw if cut is None else raw[:cut])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.safetensors"
        path.write_bytes(data)
        try:
            weights = kst.open_safetensors(path)
        except KilnError:
            return
        with weights:
            ours = {n: bytes(t.payload().data) for n, t in weights.items()}
    theirs = {name: bytes(t["data"]) for name, t in st_deserialize(data)}
    assert ours == theirs


# ------------------------------------------------------------------------- shards


def _hf_checkpoint(directory: Path, weight_map: dict[str, str] | None = None) -> dict[str, Any]:
    shards = {
        "model-00001-of-00002.safetensors": {
            "a": ("F32", [2], bytes(8)),
            "b": ("I8", [1], b"\x07"),
        },
        "model-00002-of-00002.safetensors": {"c": ("BF16", [3], bytes(range(6)))},
    }
    for name, tensors in shards.items():
        (directory / name).write_bytes(serialize(tensors, {"format": "pt"}))
    index = {
        "metadata": {"total_size": 15},
        "weight_map": weight_map
        or {t: shard for shard, tensors in shards.items() for t in tensors},
    }
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return shards


def test_sharded_checkpoint_opens_as_one(tmp_path: Path) -> None:
    shards = _hf_checkpoint(tmp_path)
    for target in (tmp_path, tmp_path / "model.safetensors.index.json"):
        with kiln_np.open_weights(target) as w:
            assert list(w) == ["a", "b", "c"]
            assert dict(w.metadata) == {"format": "pt"}
            assert Path(str(w["c"].path)).name == "model-00002-of-00002.safetensors"
            assert (
                bytes(w["c"].payload().data) == shards["model-00002-of-00002.safetensors"]["c"][2]
            )


@pytest.mark.parametrize(
    ("weight_map", "words"),
    [
        (
            {"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"},
            "does not list",
        ),
        (
            {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00002-of-00002.safetensors",
                "c": "model-00002-of-00002.safetensors",
            },
            "lists in",
        ),
        (
            {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00001-of-00002.safetensors",
                "c": "model-00002-of-00002.safetensors",
                "d": "model-00002-of-00002.safetensors",
            },
            "to hold tensor 'd'",
        ),
        ({"a": "../model-00001-of-00002.safetensors"}, "inside"),
        ({"a": "/etc/passwd"}, "inside"),
    ],
)
def test_index_and_shards_must_agree(
    tmp_path: Path, weight_map: dict[str, str], words: str
) -> None:
    _hf_checkpoint(tmp_path, weight_map)
    assert words in str(_raise("TYPE", kiln_np.open_weights, tmp_path))


def test_missing_shard_is_file_not_found(tmp_path: Path) -> None:
    _hf_checkpoint(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="00002"):
        kiln_np.open_weights(tmp_path)


def test_index_json_rules(tmp_path: Path) -> None:
    _hf_checkpoint(tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"a": "x", "a": "y"}}')
    assert "twice" in str(_raise("TYPE", kiln_np.open_weights, tmp_path))
    index.write_text('{"weight_map": {"a": 1}}')
    _raise("TYPE", kiln_np.open_weights, tmp_path)
    index.write_text("[]")
    _raise("TYPE", kst.open_safetensors, index)
    (tmp_path / "other.safetensors.index.json").write_text("{}")
    assert "2 indexes" in str(_raise("TYPE", kiln_np.open_weights, tmp_path))


def test_index_json_is_bounded(tmp_path: Path) -> None:
    _hf_checkpoint(tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    listed = json.dumps(weight_map).encode()
    deep = b"[" * 500 + b"]" * 500
    index.write_bytes(b'{"metadata": {"x": ' + deep + b'}, "weight_map": ' + listed + b"}")
    assert "127 levels" in str(_raise("TYPE", kiln_np.open_weights, tmp_path))
    index.write_bytes(b'{"metadata": {"x": NaN}, "weight_map": ' + listed + b"}")
    _raise("TYPE", kiln_np.open_weights, tmp_path)
    with open(index, "wb") as f:  # past the cap: refused from its size, nothing read
        f.write(b"{")
        f.truncate(kst.MAX_INDEX_BYTES + 1)
    tracemalloc.start()
    err = _raise("TYPE", kiln_np.open_weights, tmp_path)
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()
    assert "at most 100000000 bytes" in str(err)
    # a directory holding such an index is not one this writer may replace
    with pytest.raises(FileExistsError):
        kiln_np.save_weights(tmp_path, {"a": np.ones(2)}, format="safetensors", max_shard_size=8)


def test_writes_shards_as_transformers_does(tmp_path: Path) -> None:
    tensors = {f"t{i}": np.full(i + 1, i, np.float32) for i in range(5)}  # 4..20 bytes
    out = tmp_path / "ckpt"
    kiln_np.save_weights(
        out, tensors, format="safetensors", max_shard_size=24, metadata={"format": "pt"}
    )
    names = sorted(os.listdir(out))
    assert names[-1] == "model.safetensors.index.json"
    assert names[:-1] == [f"model-0000{i}-of-00003.safetensors" for i in range(1, 4)]
    text = (out / names[-1]).read_text()
    index = json.loads(text)
    assert text == json.dumps(index, indent=2, sort_keys=True) + "\n"
    assert index["metadata"] == {"total_size": 60}
    assert index["weight_map"] == {
        "t0": names[0],
        "t1": names[0],
        "t2": names[0],  # 4 + 8 + 12 bytes fill the first 24-byte shard
        "t3": names[1],
        "t4": names[2],
    }
    for name in names[:-1]:
        with safetensors.safe_open(out / name, framework="numpy") as f:
            assert f.metadata() == {"format": "pt"}
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                assert bits(f.get_tensor(key)) == bits(tensors[key])
    with kiln_np.open_weights(out) as w:
        assert list(w) == list(tensors)
        # writing the checkpoint over itself, from itself, replaces it whole
        kiln_np.save_weights(out, w, format="safetensors", max_shard_size=1000)
    assert sorted(os.listdir(out)) == [
        "model-00001-of-00001.safetensors",
        "model.safetensors.index.json",
    ]
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_sharded_write_never_replaces_a_directory_with_other_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileExistsError):
        kiln_np.save_weights(tmp_path, {"x": np.ones(1)}, format="safetensors", max_shard_size=8)
    assert os.listdir(tmp_path) == ["config.json"]


# ------------------------------------------------------------ streaming and crash safety


def test_convert_memory_is_bounded(tmp_path: Path) -> None:
    big = 48 << 20
    src = tmp_path / "big.safetensors"
    header = json.dumps({"w": _entry("U8", [big], [0, big])}).encode()
    header += b" " * (-len(header) % 8)
    with open(src, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + big)  # sparse
    with kiln_np.open_weights(src) as w:
        tracemalloc.start()
        try:
            kiln_np.save_weights(tmp_path / "copy.safetensors", w, format="safetensors")
            kiln_np.save_weights(tmp_path / "dir", w, format="kiln")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 12 << 20, peak
    with kiln_np.open_weights(tmp_path / "copy.safetensors") as copy:
        assert copy["w"].byte_length == big  # and the reader checked the file ends there


def test_a_source_that_shrinks_leaves_nothing(tmp_path: Path) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {"w": np.arange(1000, dtype=np.float64)}, format="safetensors")
    weights = kiln_np.open_weights(src)
    with open(src, "r+b") as f:
        f.truncate(500)
    _raise(
        "LENGTH", kiln_np.save_weights, tmp_path / "b.safetensors", weights, format="safetensors"
    )
    _raise("LENGTH", kiln_np.save_weights, tmp_path / "d", weights, format="kiln")
    assert sorted(os.listdir(tmp_path)) == ["a.safetensors"]
