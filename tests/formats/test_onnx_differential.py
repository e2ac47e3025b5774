"""Differential tests: kiln_np.onnx against onnx.numpy_helper, all 28 types.

For well-formed tensors the two must agree on dtype, shape and every byte.
Where they part (onnx accepts what the seed or Kiln rules out), the tests are
in tests/formats/test_onnx.py under "the seed wins".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _helpers import needs, optional

import kiln_np
from kiln_np import onnx as ko

if TYPE_CHECKING:
    import onnx
    from onnx import numpy_helper
else:
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")

RAW_ROWS = [r for r in ko.DATA_TYPES if r.bits is not None]
SHAPES = [(), (0,), (1,), (2,), (3,), (4,), (5,), (7,), (9,), (2, 3), (3, 0, 2), (1, 4, 3)]
_PADDED_BITS = (2, 4, 6)


def _same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    if ours.dtype == object:
        assert ours.tolist() == theirs.tolist()
        assert all(type(a) is type(b) for a, b in zip(ours.flat, theirs.flat, strict=True))
    else:
        a = np.ascontiguousarray(ours).view(np.uint8)
        b = np.ascontiguousarray(theirs).view(np.uint8)
        assert a.tobytes() == b.tobytes()


def valid_raw(row: ko.OnnxType, count: int, rng: np.random.Generator) -> bytes:
    """Random raw_data that the seed allows: BOOL bytes 0/1, padding bits 0."""
    assert row.bits is not None
    size = row.byte_length(count)
    raw = rng.integers(0, 256, size, dtype=np.uint8)
    if row.data_type == ko.DataType.BOOL:
        raw &= 1
    used = count * row.bits % 8
    if row.bits in _PADDED_BITS and used:
        raw[-1] &= (1 << used) - 1
    return raw.tobytes()


def raw_tensor(row: ko.OnnxType, dims: tuple[int, ...], raw: bytes) -> Any:
    t = onnx.TensorProto()
    t.name = "t"
    t.data_type = int(row.data_type)
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def field_values(row: ko.OnnxType, raw: bytes, count: int) -> np.ndarray:
    """The typed-field values of a tensor, written from the seed's rules (not
    from kiln_np): what a producer following onnx.proto stores."""
    assert row.bits is not None
    if row.bits in (2, 4):
        return np.frombuffer(raw, np.uint8).astype(np.int64)  # packed bytes
    if row.bits == 6:
        return ko.decode_raw(row.data_type, raw, (count,)).view(np.uint8).astype(np.int64)
    if row.field in ("float_data", "double_data"):
        return np.frombuffer(raw, "<f4" if row.field == "float_data" else "<f8")
    width = row.bits // 8
    signed = row.dtype.kind == "i"
    return np.frombuffer(raw, f"<{'i' if signed else 'u'}{width}").astype(
        np.uint64 if row.data_type == ko.DataType.UINT64 else np.int64
    )


def field_tensor(row: ko.OnnxType, dims: tuple[int, ...], values: np.ndarray) -> Any:
    t = onnx.TensorProto()
    t.name = "t"
    t.data_type = int(row.data_type)
    t.dims.extend(dims)
    getattr(t, row.field).extend(values.tolist())
    return t


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("row", RAW_ROWS, ids=lambda r: r.name)
def test_raw_matches_numpy_helper(row: ko.OnnxType, shape: tuple[int, ...]) -> None:
    count = int(np.prod(shape))
    raw = valid_raw(row, count, np.random.default_rng([int(row.data_type), count]))
    theirs = numpy_helper.to_array(raw_tensor(row, shape, raw))
    _same(ko.decode_raw(row.data_type, raw, shape), theirs)
    _same(ko.to_numpy(raw_tensor(row, shape, raw)), theirs)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("row", RAW_ROWS, ids=lambda r: r.name)
def test_field_matches_numpy_helper(row: ko.OnnxType, shape: tuple[int, ...]) -> None:
    count = int(np.prod(shape))
    raw = valid_raw(row, count, np.random.default_rng([int(row.data_type), count, 1]))
    tensor = field_tensor(row, shape, field_values(row, raw, count))
    theirs = numpy_helper.to_array(tensor)
    _same(ko.decode_field(row.data_type, getattr(tensor, row.field), shape), theirs)
    _same(ko.to_numpy(tensor), theirs)
    if row.field not in ("float_data", "double_data"):
        # Integer fields carry bits exactly, so the field and raw_data agree.
        _same(ko.decode_raw(row.data_type, raw, shape), theirs)


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 2)], ids=str)
def test_string_field_matches_numpy_helper(shape: tuple[int, ...]) -> None:
    words = [b"", b"kiln", "\u00e9t\u00e9".encode(), b"\xef\xbb\xbfbom", b"nul\x00"]
    count = int(np.prod(shape))
    tensor = onnx.helper.make_tensor("s", onnx.TensorProto.STRING, shape, words[:count])  # type: ignore[arg-type]  # onnx stubs omit STRING
    theirs = numpy_helper.to_array(tensor)
    _same(ko.to_numpy(tensor), theirs)
    _same(ko.decode_field(8, tensor.string_data, shape), theirs)


EVERY_BYTE = bytes(range(256))


@pytest.mark.parametrize(
    "row", [r for r in RAW_ROWS if r.bits in (2, 4, 6, 8)], ids=lambda r: r.name
)
def test_every_bit_pattern(row: ko.OnnxType) -> None:
    """Every byte value in raw_data (and every 6-bit value in every slot)."""
    assert row.bits is not None
    if row.data_type == ko.DataType.BOOL:
        raw = b"\x00\x01"  # the other 254 bytes are TYPE: see test_onnx.py
    elif row.bits == 6:
        raw = bytes(np.repeat(np.arange(256, dtype=np.uint8), 3))  # all 64 values, all 4 slots
    else:
        raw = EVERY_BYTE
    count = len(raw) * 8 // row.bits
    theirs = numpy_helper.to_array(raw_tensor(row, (count,), raw))
    ours = ko.decode_raw(row.data_type, raw, (count,))
    _same(ours, theirs)
    assert bytes(ko.encode_raw(ours)) == raw
    if row.bits == 6:
        assert sorted(set(ours.view(np.uint8).tolist())) == list(range(64))
    # The same patterns through the typed field.
    tensor = field_tensor(row, (count,), field_values(row, raw, count))
    _same(ko.to_numpy(tensor), numpy_helper.to_array(tensor))


@needs("onnx")
@pytest.mark.parametrize("row", RAW_ROWS, ids=lambda r: r.name)
def test_from_numpy_matches_from_array(row: ko.OnnxType) -> None:
    raw = valid_raw(row, 7, np.random.default_rng(int(row.data_type)))
    array = ko.decode_raw(row.data_type, raw, (7,))
    ours = ko.from_numpy(array, name="w")
    theirs = numpy_helper.from_array(array, name="w")
    assert ours.SerializeToString() == theirs.SerializeToString()
    assert bytes(ko.encode_raw(array)) == raw
    # A big-endian or strided array encodes to the same little-endian bytes.
    if array.dtype.itemsize > 1 and array.dtype.kind in "iufc":
        swapped = array.astype(array.dtype.newbyteorder(">"))
        assert bytes(ko.encode_raw(swapped)) == raw
    doubled = np.repeat(array, 2)[::2]
    assert bytes(ko.encode_raw(doubled)) == raw


@needs("onnx")
def test_from_numpy_strings_match_from_array() -> None:
    array = np.array(["a", "\u00e9", "", "\ufeffx"], dtype=object).reshape(2, 2)
    ours = ko.from_numpy(array, name="s")
    assert ours.SerializeToString() == numpy_helper.from_array(array, name="s").SerializeToString()
    unicode = np.array(["a", "bc"])
    assert ko.from_numpy(unicode).SerializeToString() == (
        numpy_helper.from_array(unicode).SerializeToString()
    )


@needs("onnx")
def test_external_data_matches_numpy_helper(tmp_path: Any) -> None:
    from onnx import external_data_helper

    for row in RAW_ROWS:
        raw = valid_raw(row, 9, np.random.default_rng(int(row.data_type)))
        tensor = raw_tensor(row, (9,), raw)
        tensor.name = f"w{int(row.data_type)}"
        location = f"{tensor.name}.bin"
        (tmp_path / location).write_bytes(b"pad" + raw + b"tail")
        external_data_helper.set_external_data(tensor, location, offset=3, length=len(raw))
        tensor.ClearField("raw_data")
        _same(
            ko.to_numpy(tensor, tmp_path),
            numpy_helper.to_array(tensor, str(tmp_path)),
        )


@pytest.mark.parametrize("row", RAW_ROWS, ids=lambda r: r.name)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (3,), (5,), (2, 4)], ids=str)
def test_onnx_kiln_onnx_is_byte_identical(row: ko.OnnxType, shape: tuple[int, ...]) -> None:
    count = int(np.prod(shape))
    raw = valid_raw(row, count, np.random.default_rng([int(row.data_type), count, 7]))
    payload = ko.to_kiln(row.data_type, raw, shape)
    assert payload.code == row.kiln_code
    assert payload.layout == row.layout
    assert payload.shape == shape
    # A valid Kiln payload: the core decodes it.
    decoded = kiln_np.to_numpy(*payload)
    if row.layout is None:
        assert bytes(payload.data) == raw
        assert _bytes_of(decoded) == _bytes_of(ko.decode_raw(row.data_type, raw, shape))
    else:
        assert decoded.shape == (*shape, row.layout.block_size)
        assert _bytes_of(decoded) == _bytes_of(ko.decode_raw(row.data_type, raw, shape))
    data_type, back, dims = ko.from_kiln(*payload)
    assert (data_type, bytes(back), dims) == (row.data_type, raw, shape)


def _bytes_of(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).view(np.uint8).tobytes()
