"""kiln_np.onnx: the table, strictness, the Kiln bridge, external data, and
the places where the seed (the ONNX data-type table) wins over onnx."""

from __future__ import annotations

import mmap
import os
import pickle
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, external_tensor, needs, optional
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import KilnError, Layout
from kiln_np import onnx as ko
from kiln_np._core.foreign import FOREIGN_BY_CODE
from kiln_np._core.table import code_label

if TYPE_CHECKING:
    import onnx
    import safetensors.numpy
    from onnx import numpy_helper
else:
    onnx = optional("onnx")
    safetensors = optional("safetensors", "numpy")
    numpy_helper = optional("onnx.numpy_helper")

ROWS = ko.DATA_TYPES
RAW_ROWS = [r for r in ROWS if r.bits is not None]
OPAQUE_ROWS = [r for r in ROWS if r.layout is not None]


def _raise(kind: str, call: Any, *args: Any) -> KilnError:
    with pytest.raises(KilnError) as info:
        call(*args)
    assert info.value.kind == kind, str(info.value)
    return info.value


# ----------------------------------------------------------------- the table


def test_table_matches_onnx_enum() -> None:
    assert [int(r.data_type) for r in ROWS] == list(range(1, 29))
    for row in ROWS:
        assert onnx.TensorProto.DataType.Name(int(row.data_type)) == row.name
        assert onnx.helper.tensor_dtype_to_field(int(row.data_type)) == row.field
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(int(row.data_type))
        assert np.dtype(np_dtype) == row.dtype


def test_table_kiln_mapping() -> None:
    closed = {r.kiln_code: r for r in ROWS if r.layout is None and r.kiln_code is not None}
    assert sorted(closed) == list(range(1, 20))  # every Kiln code, once
    for code, row in closed.items():
        assert kiln_np.dtype_for_code(code) == row.dtype
        assert kiln_np.dtype_info(code).bits == row.bits
    assert sorted(r.name for r in OPAQUE_ROWS) == sorted(
        [
            "COMPLEX64",
            "COMPLEX128",
            "FLOAT8E4M3FNUZ",
            "FLOAT8E5M2FNUZ",
            "UINT2",
            "INT2",
            "FLOAT6E2M3",
            "FLOAT6E3M2",
        ]
    )
    for row in OPAQUE_ROWS:
        assert row.layout is not None
        assert row.kiln_code is not None
        assert row.kiln_code == ko.OPAQUE_BASE + row.data_type
        assert kiln_np.code_range(row.kiln_code) == "opaque"
        assert row.layout.name == f"onnx.{row.name.lower()}"
        assert row.layout.block_size == {64: 8, 128: 16}.get(row.bits or 0, 1)
    string = ko.data_type_info(8)
    assert (string.bits, string.kiln_code, string.layout) == (None, None, None)


@pytest.mark.parametrize("value", [0, 29, 255, -1, 2**40])
def test_rejected_data_types(value: int) -> None:
    error = _raise("TYPE", ko.data_type_info, value)
    assert "1-28" in str(error)
    _raise("TYPE", ko.decode_raw, value, b"", (0,))
    _raise("TYPE", ko.decode_field, value, [], (0,))
    _raise("TYPE", ko.to_kiln, value, b"", (0,))


@pytest.mark.parametrize("value", [True, 1.0, "1", None])
def test_data_type_must_be_an_integer(value: object) -> None:
    _raise("TYPE", ko.data_type_info, value)


def test_data_type_for_dtype() -> None:
    # The ONNX mirror of code_for_dtype / dtype_for_code.
    for row in RAW_ROWS:
        assert ko.data_type_for_dtype(row.dtype) is row.data_type
        assert ko.data_type_for_dtype(row.dtype.newbyteorder(">")) is row.data_type
        assert ko.dtype_for_data_type(row.data_type) == row.dtype
    assert ko.data_type_for_dtype(object) is ko.DataType.STRING
    assert ko.data_type_for_dtype("<U3") is ko.DataType.STRING
    assert ko.dtype_for_data_type(8) == np.dtype(object)
    for bad in (ml_dtypes.float8_e3m4, ml_dtypes.float8_e4m3b11fnuz, "M8[s]", [("a", "<f4")], "V3"):
        _raise("TYPE", ko.data_type_for_dtype, bad)


def _doc_row(row: ko.OnnxType) -> str:
    bits = "\u2013" if row.bits is None else row.bits
    if row.kiln_code is None:
        kiln = "none: STRING has no Kiln form"
    elif row.layout is None:
        kiln = code_label(row.kiln_code)
    else:
        kiln = (
            f"opaque {row.kiln_code} (0x{row.kiln_code:04x}), `{row.layout.name}`, "
            f"{row.layout.block_size}-byte blocks"
        )
    return (
        f"| {int(row.data_type)} | {row.name} | {bits} | `{row.field}` | `{row.dtype}` | {kiln} |"
    )


def test_docs_table_matches() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "onnx.md").read_text("utf-8")
    lines = text.splitlines()
    start = lines.index("| value | name | bits | typed field | numpy dtype | Kiln |") + 2
    assert lines[start : start + len(ROWS)] == [_doc_row(r) for r in ROWS]
    assert lines[start + len(ROWS)] == ""


def test_module_docstring_table_matches() -> None:
    doc = ko.__doc__ or ""
    for row in ROWS:
        line = next(
            x for x in doc.splitlines() if x.split()[:2] == [str(int(row.data_type)), row.name]
        )
        if row.layout is not None:
            assert f"0x{row.kiln_code:04x} {row.layout.name}/{row.layout.block_size}" in line
        elif row.kiln_code is not None:
            assert code_label(row.kiln_code).removeprefix("code ") in line
        assert row.field in line


def test_module_surface() -> None:
    assert ko.__name__ == "kiln_np.onnx"
    assert sorted(ko.__all__) == sorted(n for n in vars(ko) if not n.startswith("_"))
    for name in set(ko.__all__) - {"DATA_TYPES", "OPAQUE_BASE"}:
        assert getattr(ko, name).__module__ == "kiln_np.onnx", name


def test_opaque_types_come_from_the_shared_registry() -> None:
    for row in OPAQUE_ROWS:
        foreign = FOREIGN_BY_CODE[row.kiln_code or 0]
        assert (foreign.layout, foreign.dtype, foreign.bits) == (row.layout, row.dtype, row.bits)
    assert sorted(r.kiln_code or 0 for r in OPAQUE_ROWS) == sorted(FOREIGN_BY_CODE)


# ------------------------------------------------------------ seed vectors


def test_seed_float16_vector() -> None:
    # "64 38 in raw_data is 0x3864, 0.548828"
    value = ko.decode_raw(10, b"\x64\x38", ())
    assert float(value) == 0.548828125
    assert bits(ko.decode_field(10, [0x3864], ())) == b"\x64\x38"


def test_seed_int4_vector() -> None:
    # "88 01 in an INT4 tensor's int32_data is 136, 0x88: two elements of 8, both -8"
    tensor = onnx.TensorProto()
    tensor.ParseFromString(bytes.fromhex("0802 1016 2a02 8801"))  # dims 2, INT4, int32_data
    assert list(tensor.int32_data) == [136]
    assert ko.to_numpy(tensor).astype(int).tolist() == [-8, -8]


def test_seed_bit_layouts() -> None:
    # 2-bit: x0 | x1<<2 | x2<<4 | x3<<6
    assert ko.decode_raw(25, b"\xe4", (4,)).astype(int).tolist() == [0, 1, 2, 3]
    assert ko.decode_raw(26, b"\xe4\x01", (5,)).astype(int).tolist() == [0, 1, -2, -1, 1]
    # 6-bit: lowest bit first; 4 values in 3 bytes; ceil(6n/8) bytes
    values = np.array([1, 2, 3, 4, 5], np.uint8)
    stream = sum(int(v) << (6 * i) for i, v in enumerate(values))
    raw = stream.to_bytes(4, "little")
    assert bits(ko.decode_raw(27, raw, (5,))) == values.tobytes()
    assert bytes(ko.encode_raw(values.view(ml_dtypes.float6_e2m3fn))) == raw
    # complex: (real, imag)
    pair = np.array([1.5, -2.0], "<f4").tobytes()
    assert ko.decode_raw(14, pair, ()).item() == complex(1.5, -2.0)
    assert ko.decode_field(15, [1.5, -2.0], (1,)).tolist() == [complex(1.5, -2.0)]
    # bf16: the top half of a float
    assert float(ko.decode_raw(16, b"\x80\x3f", ())) == 1.0


def test_seed_float_biases() -> None:
    # FLOAT6E2M3 bias 1, FLOAT6E3M2 bias 3 (OCP MX), FNUZ: 0x80 is NaN, no -0.
    assert float(ko.decode_raw(27, b"\x08", (1,))[0]) == 1.0  # 0 01 000
    assert float(ko.decode_raw(28, b"\x0c", (1,))[0]) == 1.0  # 0 011 00
    assert float(ko.decode_raw(18, b"\x40", ())) == 1.0  # 0 1000 000, bias 8
    assert float(ko.decode_raw(20, b"\x40", ())) == 1.0  # 0 10000 00, bias 16
    assert np.isnan(float(ko.decode_raw(18, b"\x80", ())))
    assert np.isnan(float(ko.decode_raw(20, b"\x80", ())))
    assert float(ko.decode_raw(24, b"\x7f", ())) == 1.0  # e8m0: 2**(127 - 127)


# ------------------------------------------------------------ strictness


@pytest.mark.parametrize("row", RAW_ROWS, ids=lambda r: r.name)
@pytest.mark.parametrize("count", [0, 1, 5])
def test_raw_length_is_exact(row: ko.OnnxType, count: int) -> None:
    size = row.byte_length(count)
    for wrong in {size - 1, size + 1} - {-1}:
        error = _raise("LENGTH", ko.decode_raw, row.data_type, bytes(wrong), (count,))
        assert (error.expected, error.found) == (size, wrong)
        assert "expected" in str(error)
        assert row.name in str(error)
        _raise("LENGTH", ko.to_kiln, row.data_type, bytes(wrong), (count,))


@pytest.mark.parametrize("row", [r for r in RAW_ROWS if r.bits in (2, 4, 6)], ids=lambda r: r.name)
def test_padding_bits_must_be_zero(row: ko.OnnxType) -> None:
    assert row.bits is not None
    for count in range(1, 9):
        used = count * row.bits % 8
        if not used:
            continue
        raw = bytearray(row.byte_length(count))
        raw[-1] = 1 << used  # the lowest padding bit
        error = _raise("TYPE", ko.decode_raw, row.data_type, bytes(raw), (count,))
        assert f"0x{1 << used:02x}" in str(error)
        _raise("TYPE", ko.to_kiln, row.data_type, bytes(raw), (count,))
        raw[-1] = 0
        assert ko.decode_raw(row.data_type, bytes(raw), (count,)).shape == (count,)


def test_string_raw_is_refused() -> None:
    error = _raise("TYPE", ko.decode_raw, 8, b"abc", (1,))
    assert "string_data" in str(error)
    assert "raw_data" in str(error)
    _raise("TYPE", ko.to_kiln, 8, b"abc", (1,))
    _raise("TYPE", ko.encode_raw, np.array(["a"]))
    _raise("TYPE", ko.encode_raw, np.array([1], np.int8), 8)


def test_bad_dims() -> None:
    _raise("SHAPE", ko.decode_raw, 1, b"", (-1,))
    _raise("SHAPE", ko.decode_raw, 1, b"", "3")
    _raise("SHAPE", ko.decode_field, 1, [], (1.0,))
    _raise("SHAPE", ko.decode_raw, 1, b"", (0, 2**62, 2**62))


def test_typed_field_length() -> None:
    error = _raise("LENGTH", ko.decode_field, 22, [1, 2, 3], (3,))  # INT4: ceil(3/2) = 2
    assert (error.expected, error.found) == (2, 3)
    assert ko.decode_field(22, [0x21, 0x03], (3,)).astype(int).tolist() == [1, 2, 3]
    error = _raise("LENGTH", ko.decode_field, 14, [1.0, 2.0, 3.0], (2,))
    assert (error.expected, error.found) == (4, 3)
    _raise("LENGTH", ko.decode_field, 25, [0, 0], (4,))
    _raise("LENGTH", ko.decode_field, 8, [b"a"], (2,))


def test_typed_field_kinds() -> None:
    _raise("TYPE", ko.decode_field, 6, [1.5], (1,))
    _raise("TYPE", ko.decode_field, 1, [1], (1,))
    _raise("TYPE", ko.decode_field, 13, [2**64], (1,))
    error = _raise("TYPE", ko.decode_field, 13, [2**63, -1], (2,))  # numpy makes float64
    assert "beyond 64 bits" in str(error)
    _raise("TYPE", ko.decode_field, 6, [[1], [2, 3]], (2,))
    _raise("TYPE", ko.decode_field, 6, [[1, 2]], (2,))
    _raise("TYPE", ko.decode_field, 1, np.float32(1), ())
    _raise("TYPE", ko.decode_field, 8, ["not bytes"], (1,))
    error = _raise("TYPE", ko.decode_field, 8, [b"ok", b"\xff"], (2,))
    assert error.index == 1
    # float_data given as doubles: exact float32 values pass, others are TYPE.
    assert ko.decode_field(1, np.array([0.5, np.nan, -np.inf]), (3,)).dtype == np.float32
    error = _raise("TYPE", ko.decode_field, 1, [0.1], (1,))
    assert error.index == 0
    _raise("TYPE", ko.decode_field, 1, [1e300], (1,))


@needs("onnx")
def test_strings_keep_bom_and_nul() -> None:
    # "UTF-8, no terminator, no byte-order mark": so a leading EF BB BF is the
    # character U+FEFF (not a BOM to strip) and a trailing NUL is content.
    out = ko.decode_field(8, [b"\xef\xbb\xbfa", b"b\x00"], (2,))
    assert out.tolist() == ["\ufeffa", "b\x00"]
    tensor = ko.from_numpy(out)
    assert list(tensor.string_data) == [b"\xef\xbb\xbfa", b"b\x00"]
    _raise("TYPE", ko.from_numpy, np.array(["a", 3], dtype=object))


def test_encode_never_casts() -> None:
    error = _raise("TYPE", ko.encode_raw, np.zeros(2, np.float64), 1)
    assert "never casts" in str(error)
    _raise("TYPE", ko.encode_raw, np.zeros(2, ml_dtypes.float8_e3m4))
    _raise("TYPE", ko.encode_raw, np.ma.masked_array([1.0], mask=[True]))
    _raise("TYPE", ko.encode_raw, np.array([2], np.uint8).view(np.bool_))
    for dtype, bad in (
        (ml_dtypes.uint2, 4),
        (ml_dtypes.float6_e2m3fn, 0x40),
        (ml_dtypes.int4, 0x10),
    ):
        storage = np.array([0, bad], np.uint8).view(dtype)
        error = _raise("TYPE", ko.encode_raw, storage)
        assert error.index == 1
        assert error.found == bad


# ---------------------------------------------------- where the seed wins


def test_seed_wins_bool_bytes() -> None:
    # Seed: BOOL is "one byte in raw_data, 0 or 1". onnx returns a bool array
    # whose byte is 2; kiln_np refuses it.
    tensor = onnx.helper.make_tensor("b", onnx.TensorProto.BOOL, [2], b"\x01\x02", raw=True)
    assert bits(numpy_helper.to_array(tensor)) == b"\x01\x02"
    error = _raise("TYPE", ko.to_numpy, tensor)
    assert error.index == 1
    assert "0x02" in str(error)
    _raise("TYPE", ko.decode_field, 9, [0, 2], (2,))


@pytest.mark.parametrize(
    ("data_type", "value", "truncated"),
    [
        (2, 256, 0),  # UINT8
        (3, 128, -128),  # INT8
        (5, 40000, -25536),  # INT16
        (4, -1, 0xFFFF),  # UINT16
        (10, 0x1_0000, 0),  # FLOAT16 bits
        (17, 0x100, 0),  # FLOAT8E4M3FN bits
        (22, 0x100, 0),  # INT4: one packed byte per integer
        (27, 0x40, 0),  # FLOAT6E2M3: bits 0-5 only
        (12, 2**32, 0),  # UINT32 in uint64_data
    ],
)
def test_seed_wins_typed_values_that_do_not_fit(data_type: int, value: int, truncated: int) -> None:
    # onnx truncates a value that does not fit the declared type; the seed's
    # field rules give each type a range, and kiln_np refuses what is outside.
    row = ko.data_type_info(data_type)
    count = 2 if row.bits == 4 else 1
    tensor = onnx.TensorProto()
    tensor.data_type = data_type
    tensor.dims.append(count)
    getattr(tensor, row.field).append(value)
    theirs = numpy_helper.to_array(tensor).reshape(-1)
    assert int(theirs.view(np.uint8 if theirs.itemsize == 1 else f"<i{theirs.itemsize}")[0]) & (
        (1 << (8 * theirs.itemsize)) - 1
    ) == truncated & ((1 << (8 * theirs.itemsize)) - 1)
    error = _raise("TYPE", ko.to_numpy, tensor)
    assert error.found == value
    assert error.index == 0
    assert "truncate" in str(error)


def test_seed_wins_exact_raw_length() -> None:
    # Seed: n values take ceil(bits * n / 8) bytes. onnx quietly ignores extra
    # bytes for the packed types; kiln_np says LENGTH.
    for data_type, raw, count in (
        (22, b"\x21\x03\x00", 3),
        (25, b"\xe4\x00", 4),
        (27, bytes(4), 4),
    ):
        tensor = onnx.TensorProto()
        tensor.data_type = data_type
        tensor.dims.append(count)
        tensor.raw_data = raw
        assert numpy_helper.to_array(tensor).shape == (count,)
        _raise("LENGTH", ko.to_numpy, tensor)


def test_seed_wins_padding() -> None:
    # The seed leaves the padding "unused"; Kiln requires it 0 (case
    # kiln-v2-high-nibble), and nonzero padding could not survive the Kiln
    # round trip, so kiln_np refuses it where onnx drops it silently.
    for data_type, raw, count in ((21, b"\xf1", 1), (25, b"\xc1", 3), (28, b"\xc1", 1)):
        tensor = onnx.helper.make_tensor("t", data_type, [count], raw, raw=True)
        assert numpy_helper.to_array(tensor).shape == (count,)
        _raise("TYPE", ko.to_numpy, tensor)


def test_seed_wins_string_raw_data() -> None:
    # "STRING cannot use raw_data, and the explorer turns down a tensor that
    # tries." onnx reads string_data and ignores raw_data.
    tensor = onnx.helper.make_tensor("s", onnx.TensorProto.STRING, [1], [b"x"])  # type: ignore[list-item]  # STRING
    tensor.raw_data = b"junk"
    assert numpy_helper.to_array(tensor).tolist() == ["x"]
    _raise("TYPE", ko.to_numpy, tensor)


def test_values_in_one_place() -> None:
    tensor = onnx.helper.make_tensor("f", onnx.TensorProto.FLOAT, [1], [1.0])
    tensor.int32_data.append(7)
    error = _raise("TYPE", ko.to_numpy, tensor)
    assert "int32_data" in str(error)
    assert "float_data" in str(error)
    tensor = onnx.helper.make_tensor("f", onnx.TensorProto.FLOAT, [1], b"\0\0\0\0", raw=True)
    tensor.float_data.append(1.0)
    _raise("TYPE", ko.to_numpy, tensor)
    _raise("TYPE", ko.to_numpy, b"not a tensor")
    tensor = onnx.TensorProto()
    tensor.data_type = 0
    error = _raise("TYPE", ko.to_numpy, tensor)
    assert "UNDEFINED" in str(error)


# ------------------------------------------------------------ the Kiln bridge


def test_to_kiln_is_zero_copy_for_whole_blocks() -> None:
    raw = bytearray(np.arange(4, dtype="<f4").tobytes())
    payload = ko.to_kiln(1, raw, (4,))
    assert payload.data.readonly
    raw[0:4] = np.float32(9).tobytes()
    assert kiln_np.to_numpy(*payload)[0] == 9


def test_from_kiln_refuses_foreign_payloads() -> None:
    _raise("TYPE", ko.from_kiln, 4096, b"\0", (1,), Layout("q4", 1))
    uint2 = ko.data_type_info(25)
    assert uint2.kiln_code is not None
    _raise("TYPE", ko.from_kiln, uint2.kiln_code, b"\0", (1,), Layout("onnx.uint2", 2))
    _raise("TYPE", ko.from_kiln, uint2.kiln_code, b"\0", (1,), Layout("onnx.int2", 1))
    error = _raise("TYPE", ko.from_kiln, uint2.kiln_code, b"\x00\x04", (2,), uint2.layout)
    assert error.index == 1
    assert error.found == 4
    _raise("TYPE", ko.from_kiln, 7, b"\x02", (1,))  # a Kiln bool byte of 2
    _raise("LENGTH", ko.from_kiln, 2, b"\0" * 3, (1,))
    _raise("TYPE", ko.from_kiln, 20, b"", (0,))  # reserved Kiln code


@given(
    data_type=st.sampled_from([int(r.data_type) for r in RAW_ROWS]),
    raw=st.binary(max_size=40),
    dims=st.lists(st.integers(0, 6), max_size=3),
)
def test_random_raw_decodes_or_raises(data_type: int, raw: bytes, dims: list[int]) -> None:
    try:
        array = ko.decode_raw(data_type, raw, dims)
    except KilnError:
        with pytest.raises(KilnError):
            ko.to_kiln(data_type, raw, dims)
        return
    assert bytes(ko.encode_raw(array, data_type)) == raw
    assert bytes(ko.from_kiln(*ko.to_kiln(data_type, raw, dims))[1]) == raw


@given(
    data_type=st.sampled_from([int(r.data_type) for r in RAW_ROWS]),
    values=st.lists(st.integers(-(2**64), 2**64), max_size=8),
    dims=st.lists(st.integers(0, 4), max_size=2),
)
def test_random_integer_fields_decode_or_raise(
    data_type: int, values: list[int], dims: list[int]
) -> None:
    row = ko.data_type_info(data_type)
    try:
        array = ko.decode_field(data_type, values, dims)
    except KilnError as error:
        kind = error.kind
        assert kind in ("TYPE", "LENGTH")
        return
    assert row.field not in ("float_data", "double_data") or not values
    assert array.dtype == row.dtype
    assert array.shape == tuple(dims)


@given(raw=st.binary(min_size=0, max_size=64))
def test_random_sub_byte_round_trips(raw: bytes) -> None:
    for data_type, width in ((25, 2), (26, 2), (27, 6), (28, 6)):
        count = len(raw) * 8 // width
        if -(-count * width // 8) != len(raw):
            continue
        used = count * width % 8
        if used and raw[-1] >> used:  # nonzero padding bits
            _raise("TYPE", ko.decode_raw, data_type, raw, (count,))
            continue
        array = ko.decode_raw(data_type, raw, (count,))
        assert bytes(ko.encode_raw(array)) == raw


def test_large_sub_byte_round_trips() -> None:
    # Past the thread-pool threshold, with ragged tails.
    rng = np.random.default_rng(5)
    for data_type, count in ((25, (1 << 22) + 3), (27, (1 << 21) + 2), (28, (1 << 21) + 1)):
        row = ko.data_type_info(data_type)
        values = rng.integers(0, 1 << (row.bits or 0), count, dtype=np.uint8)
        raw = bytes(ko.encode_raw(values.view(row.dtype)))
        assert len(raw) == row.byte_length(count)
        assert bits(ko.decode_raw(data_type, raw, (count,))) == values.tobytes()
        head = numpy_helper.to_array(
            onnx.helper.make_tensor("t", data_type, [count], raw, raw=True)
        )
        assert bits(head) == values.tobytes()


# ------------------------------------------------------------ protos and models


def test_external_data_is_confined(tmp_path: Path) -> None:
    base = tmp_path / "model"
    base.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\x00" * 8)
    (base / "w.bin").write_bytes(np.array([1, 2], "<f4").tobytes())
    (base / "sub").mkdir()
    os.symlink(base / "w.bin", base / "sub" / "inside.bin")
    os.symlink(tmp_path / "secret.bin", base / "out.bin")
    assert ko.to_numpy(external_tensor("w.bin"), base).tolist() == [1, 2]
    assert ko.to_numpy(external_tensor("sub/inside.bin"), base).tolist() == [1, 2]
    for location in (
        "../secret.bin",
        "sub/../../secret.bin",
        str(tmp_path / "secret.bin"),
        "out.bin",
        "C:\\secret.bin",
    ):
        error = _raise("TYPE", ko.to_numpy, external_tensor(location), base)
        assert repr(location) in str(error)
    error = _raise("TYPE", ko.to_numpy, external_tensor("w.bin"))
    assert "base_dir" in str(error)
    _raise("TYPE", ko.to_numpy, external_tensor("sub"), base)
    with pytest.raises(FileNotFoundError):
        ko.to_numpy(external_tensor("missing.bin"), base)


def test_external_data_ranges(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(bytes(range(12)))
    tensor = external_tensor("w.bin", offset="4", length="8")
    assert bits(ko.to_numpy(tensor, tmp_path)) == bytes(range(4, 12))
    error = _raise(
        "LENGTH", ko.to_numpy, external_tensor("w.bin", offset="8", length="8"), tmp_path
    )
    assert (error.expected, error.found) == (16, 12)
    # Without a length the data runs to the end of the file: 4 bytes, not 8.
    _raise("LENGTH", ko.to_numpy, external_tensor("w.bin", offset="8"), tmp_path)
    _raise("LENGTH", ko.to_numpy, external_tensor("w.bin", offset="13"), tmp_path)
    _raise("TYPE", ko.to_numpy, external_tensor("w.bin", offset="-4"), tmp_path)
    _raise("TYPE", ko.to_numpy, external_tensor("w.bin", length="0x8"), tmp_path)
    _raise("TYPE", ko.to_numpy, external_tensor(""), tmp_path)


@needs("onnx")
def test_model_to_kiln(tmp_path: Path) -> None:
    weights = {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i2": np.array([-2, -1, 0, 1, 1], ml_dtypes.int2),
        "c": np.array([1 + 2j], np.complex64),
    }
    inits = [ko.from_numpy(v, name=k) for k, v in weights.items()]
    inits.append(onnx.helper.make_tensor("typed", onnx.TensorProto.INT4, [3], [1, 2, 3]))
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], initializer=inits))
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    assert (tmp_path / "w.bin").exists()
    out = dict(ko.model_to_kiln(path))
    assert list(out) == ["f", "i2", "c", "typed"]
    for name, array in weights.items():
        data_type, raw, dims = ko.from_kiln(*out[name])
        assert bits(ko.decode_raw(data_type, raw, dims)) == bits(array)
    assert out["typed"].code == kiln_np.Code.I4
    assert bytes(out["typed"].data) == b"\x21\x03"
    in_memory = dict(ko.model_to_kiln(onnx.load(path, load_external_data=False), tmp_path))
    assert {k: bytes(p.data) for k, p in in_memory.items()} == {
        k: bytes(p.data) for k, p in out.items()
    }
    _raise("TYPE", ko.model_to_kiln, 42)
    strings = onnx.helper.make_tensor("s", onnx.TensorProto.STRING, [1], [b"x"])  # type: ignore[list-item]  # STRING
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], initializer=[strings]))
    error = _raise("TYPE", list, ko.model_to_kiln(model))
    assert "'s'" in str(error)
    assert "STRING" in str(error)


def test_external_data_maps_only_the_pages_it_needs(tmp_path: Path) -> None:
    # 300 tensors of 16 bytes spread over a sparse 1 TiB file: mapping the whole
    # file per tensor ran out of address space (ENOMEM) after 126 of them.
    size, count = 1 << 40, 300
    step = size // count // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
    # An unaligned offset in each; the last tensor ends exactly at the end of the file.
    offsets = [i * step + 4093 for i in range(count - 1)] + [size - 16]
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(size)
        for i, offset in enumerate(offsets):
            os.pwrite(f.fileno(), np.arange(4, dtype="<f4").tobytes() + bytes([i % 256]), offset)
    held = []
    for offset in offsets:
        tensor = external_tensor("big.bin", dims=(4,), offset=str(offset), length="16")
        held.append(ko.to_numpy(tensor, tmp_path))
        assert held[-1].tolist() == [0, 1, 2, 3]
    assert all(a.base is not None for a in held)  # views of the maps, still alive
    # A variant through model_to_kiln, which keeps every payload it yields.
    inits = [
        external_tensor("big.bin", name=f"t{i}", dims=(4,), offset=str(o), length="16")
        for i, o in enumerate(offsets)
    ]
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], initializer=inits))
    payloads = dict(ko.model_to_kiln(model, tmp_path))
    assert len(payloads) == count
    assert {bytes(p.data)[:4] for p in payloads.values()} == {bytes(4)}


def _garbled(tensor: Any, text: str) -> Any:
    """``tensor`` as a hostile file holds it: the UTF-8 of ``text`` replaced by
    bytes that are not UTF-8 (protobuf then hands back ``bytes``)."""
    wire = tensor.SerializeToString().replace(text.encode(), b"\xff" * len(text.encode()))
    return onnx.TensorProto.FromString(wire)


def test_hostile_external_data_entries_are_type_errors(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(bytes(8))
    assert ko.to_numpy(external_tensor("w.bin"), tmp_path).tolist() == [0, 0]
    cases = {
        "location not UTF-8": _garbled(external_tensor("\u00e9.bin"), "\u00e9"),
        "offset not UTF-8": _garbled(external_tensor("w.bin", offset="\u00e9"), "\u00e9"),
        "offset of 5000 digits": external_tensor("w.bin", offset="9" * 5000),
        "length of 5000 digits": external_tensor("w.bin", length="1" * 5000),
        "offset 2**63": external_tensor("w.bin", offset=str(2**63)),
    }
    for what, tensor in cases.items():
        error = _raise("TYPE", ko.to_numpy, tensor, tmp_path)
        assert len(str(error)) < 400, what
        assert "expected" in str(error), what
    # Leading zeros are still a decimal integer, however many.
    tensor = external_tensor("w.bin", offset="0" * 5000, length="0" * 30 + "8")
    assert ko.to_numpy(tensor, tmp_path).tolist() == [0, 0]


@needs("onnx")
def test_names_that_are_not_utf8_are_type_errors(tmp_path: Path) -> None:
    tensor = _garbled(ko.from_numpy(np.zeros(2, "<f4"), name="\u00e9"), "\u00e9")
    assert isinstance(tensor.name, bytes)  # what protobuf hands back
    error = _raise("TYPE", ko.to_numpy, tensor)
    assert "UTF-8" in str(error)
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], initializer=[tensor]))
    _raise("TYPE", list, ko.model_to_kiln(model))
    # The variant from a file: the same bytes read back by model_to_kiln(path).
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    _raise("TYPE", list, ko.model_to_kiln(tmp_path / "m.onnx"))


@pytest.mark.parametrize("suffix", [".json", ".textproto", ".onnxtxt", ".txt"])
def test_model_files_are_binary_whatever_their_name(tmp_path: Path, suffix: str) -> None:
    # onnx.load picks a text parser by extension; kiln_np reads the binary format.
    model = onnx.helper.make_model(
        onnx.helper.make_graph([], "g", [], [], initializer=[ko.from_numpy(np.ones(2, "<f4"))])
    )
    path = tmp_path / f"m{suffix}"
    path.write_bytes(model.SerializeToString())
    [(_, payload)] = list(ko.model_to_kiln(path))
    assert kiln_np.to_numpy(*payload).tolist() == [1, 1]
    path.write_text('{"irVersion": "7"}' if suffix == ".json" else "ir_version: 7")
    error = _raise("TYPE", ko.model_to_kiln, path)
    assert "ModelProto" in str(error)


def test_opaque_forms_have_at_most_63_dimensions() -> None:
    uint2 = ko.data_type_info(25)
    for call, args in (
        (ko.from_kiln, (uint2.kiln_code, b"\x00", (1,) * 64, uint2.layout)),
        (ko.to_kiln, (25, b"\x00", (1,) * 64)),
        (ko.from_kiln, (0x4F0E, bytes(8), (1,) * 64, ko.data_type_info(14).layout)),
    ):
        error = _raise("SHAPE", call, *args)
        assert "63" in str(error)
    assert ko.to_kiln(25, b"\x00", (1,) * 63).shape == (1,) * 63
    assert ko.decode_raw(1, bytes(4), (1,) * 64).shape == (1,) * 64  # closed: 64 is fine


@pytest.mark.parametrize("huge", [10**5000, -(10**5000), 2**64], ids=["big", "negative", "2**64"])
def test_unbounded_integers_are_never_formatted(huge: int) -> None:
    for call, args in (
        (ko.data_type_info, (huge,)),
        (ko.decode_raw, (huge, b"", (0,))),
        (ko.decode_field, (huge, [], (0,))),
        (ko.dtype_for_data_type, (huge,)),
    ):
        error = _raise("TYPE", call, *args)
        assert len(str(error)) < 300
    error = _raise("SHAPE", ko.decode_raw, 1, b"", (huge,))
    assert len(str(error)) < 300


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_ndarray_subclasses_as_bytes_give_plain_arrays() -> None:
    matrix = np.matrix(np.arange(4, dtype=np.uint8))
    for data_type, dims in ((2, (2, 2)), (22, (8,)), (25, (16,))):
        out = ko.decode_raw(data_type, matrix, dims)
        assert type(out) is np.ndarray
        assert out.shape == dims
        payload = ko.to_kiln(data_type, matrix, dims)
        assert bytes(ko.from_kiln(*payload)[1]) == bytes(range(4))
    masked = np.ma.masked_array(np.arange(4, dtype=np.uint8), mask=[True, False, False, False])
    out = ko.decode_raw(2, masked, (4,))
    assert type(out) is np.ndarray
    assert out.tolist() == [0, 1, 2, 3]  # bytes are bytes: no mask
    _, raw, _ = ko.from_kiln(9, masked, (4,))
    assert bytes(raw) == bytes(range(4))


@pytest.mark.parametrize("where", [0, -1], ids=["first", "last"])
def test_rejecting_sub_byte_storage_costs_a_chunk(where: int) -> None:
    storage = np.zeros(64 << 20, np.uint8)
    storage[where] = 4  # bits above a 2-bit element
    uint2 = ko.data_type_info(25)
    tracemalloc.start()
    try:
        for call, args in (
            (ko.encode_raw, (storage.view(ml_dtypes.uint2),)),
            (ko.from_kiln, (uint2.kiln_code, storage, (storage.size,), uint2.layout)),
        ):
            error = _raise("TYPE", call, *args)
            assert error.index == storage.size - 1 if where else error.index == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # a mask of the whole input would be 64 MiB


class _RaisingArray:
    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise RuntimeError("no array today")


@needs("onnx")
def test_array_raising_in_encode_paths_is_type() -> None:
    for call in (ko.encode_raw, ko.from_numpy):
        error = _raise("TYPE", call, _RaisingArray())
        assert "no array today" in str(error)
    _raise("TYPE", ko.decode_field, 6, _RaisingArray(), (1,))
    _raise("TYPE", ko.encode_raw, [[1.0], [1.0, 2.0]])  # the ragged variant


@pytest.mark.parametrize(
    ("code", "size", "shape"),
    [(2, 7, (2,)), (2, 9, (2,)), (17, 3, (3,)), (1, 0, (2**62, 4))],
    ids=["short", "long", "long-packed", "unrepresentable"],
)
def test_bridge_errors_read_as_kiln_errors(code: int, size: int, shape: tuple[int, ...]) -> None:
    # The same payload gives the same error at every door; the ONNX bridge adds
    # only its prefix (the ONNX type, the tensor name).
    with pytest.raises(KilnError) as core:
        kiln_np.to_numpy(code, bytes(size), shape)
    data_type = next(r.data_type for r in ROWS if r.kiln_code == code and r.layout is None)
    tensor = onnx.TensorProto(name="w", data_type=data_type, dims=shape, raw_data=bytes(size))
    for call, args in (
        (ko.from_kiln, (code, bytes(size), shape)),
        (ko.decode_raw, (data_type, bytes(size), shape)),
        (ko.to_kiln, (data_type, bytes(size), shape)),
        (ko.to_numpy, (tensor,)),
    ):
        error = _raise(core.value.kind, call, *args)
        assert error.message.endswith(core.value.message), call
        assert (error.expected, error.found) == (core.value.expected, core.value.found)


# ------------------------------------------------------------ without onnx


def test_works_without_onnx() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["onnx"] = None  # any `import onnx` now raises ImportError
        import kiln_np
        import kiln_np.onnx as ko
        assert bytes(ko.encode_raw(ko.decode_raw(26, b"\\x1b", (3,)))) == b"\\x1b"
        assert ko.decode_field(22, [0x88], (2,)).astype(int).tolist() == [-8, -8]
        assert bytes(ko.from_kiln(*ko.to_kiln(27, b"\\x08\\x02", (2,)))[1]) == b"\\x08\\x02"
        try:
            ko.from_numpy([1.0])
        except ImportError as exc:
            assert "kiln-np[onnx]" in str(exc)
        else:
            raise AssertionError("from_numpy worked without onnx")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_import_kiln_np_does_not_import_onnx() -> None:
    script = "import sys, kiln_np, kiln_np.onnx; print('onnx' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"


# -- external data as weight files ----------------------------------------------------------


def _external_model(directory: Path, tensors: dict[str, np.ndarray]) -> Path:
    """A model whose initializers all go to ``model.data``, as onnx saves it."""
    inits = [numpy_helper.from_array(a, name) for name, a in tensors.items()]
    graph = onnx.helper.make_graph([], "g", [], [], initializer=inits)
    path = directory / "model.onnx"
    onnx.save_model(
        onnx.helper.make_model(graph), path, save_as_external_data=True,
        location="model.data", size_threshold=0,
    )  # fmt: skip
    return path


def test_external_tensors_are_tensors_of_their_file(tmp_path: Path) -> None:
    tensors = {"w1": np.arange(6, dtype=np.float32), "w3": np.arange(1 << 20, dtype=np.int32)}
    path = _external_model(tmp_path, tensors)
    oracle = onnx.load(path, load_external_data=False)
    with kiln_np.open_weights(path) as w:
        for init in oracle.graph.initializer:
            t = w[init.name]
            entries = {e.key: e.value for e in init.external_data}
            assert (t.path, t.offset) == (str(tmp_path / "model.data"), int(entries["offset"]))
            # onnx itself reads the external data
            assert bits(t.numpy()) == bits(numpy_helper.to_array(init, base_dir=str(tmp_path)))
        # one map for the file, however many tensors it holds: released by close()
        w3 = pickle.dumps(w["w3"])
        assert len(w3) < 1000  # by reference, not its 4 MiB
    back = pickle.loads(w3)
    assert (back.path, back.offset) == (str(tmp_path / "model.data"), w["w3"].offset)
    assert bits(back.numpy()) == bits(tensors["w3"])


def test_external_tensors_convert_from_their_file(tmp_path: Path) -> None:
    tensors: dict[str, np.ndarray] = {
        "a": np.arange(5, dtype=np.float16),
        "b": np.array([1, -2], np.int64),
    }
    path = _external_model(tmp_path, tensors)
    with kiln_np.open_weights(path) as w:
        kiln_np.save_weights(tmp_path / "m.safetensors", w, format="safetensors")
    loaded = safetensors.numpy.load_file(str(tmp_path / "m.safetensors"))
    assert {n: bits(a) for n, a in loaded.items()} == {n: bits(a) for n, a in tensors.items()}


def test_external_data_is_checked_against_its_file_when_opened(tmp_path: Path) -> None:
    path = _external_model(tmp_path, {"w": np.arange(4, dtype=np.float32)})
    with (tmp_path / "model.data").open("r+b") as f:
        f.truncate(12)
    err = _raise("LENGTH", kiln_np.open_weights, path)
    assert "tensor 'w': external data" in str(err)
    os.unlink(tmp_path / "model.data")
    os.mkfifo(tmp_path / "model.data")  # never opened: it would block
    assert "FIFO" in str(_raise("TYPE", kiln_np.open_weights, path))


def test_two_bit_external_tensors_are_held_unpacked(tmp_path: Path) -> None:
    # ONNX packs 2-bit values four to a byte, Kiln one per byte: no file offset
    # holds the Kiln payload, so it is in memory (and pickles as its bytes)
    init = onnx.helper.make_tensor("q", onnx.TensorProto.UINT2, [4], b"\xe4", raw=True)
    graph = onnx.helper.make_graph([], "g", [], [], initializer=[init])
    path = tmp_path / "model.onnx"
    onnx.save_model(
        onnx.helper.make_model(graph), path, save_as_external_data=True,
        location="model.data", size_threshold=0,
    )  # fmt: skip
    with kiln_np.open_weights(path) as w:
        assert w["q"].path is None
        assert bytes(pickle.loads(pickle.dumps(w["q"])).payload().data) == b"\x00\x01\x02\x03"
