"""to_numpy / from_numpy: bits intact, zero-copy, strict lengths, check order."""

from __future__ import annotations

import array
import mmap
import pickle
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import DTYPES, Code, KilnError, Layout, _codec, from_numpy, to_numpy

ROW_IDS = [r.name for r in DTYPES]
WHOLE = [r for r in DTYPES if not r.packed]
PACKED = [r for r in DTYPES if r.packed]


def bits(a: np.ndarray) -> bytes:
    """The element bytes of ``a`` in C order, as stored."""
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def patterns(row: kiln_np.DType) -> np.ndarray:
    """Every bit pattern of a 1- or 2-byte element (0/1 for bool, 0-15 for 4-bit)."""
    if row.code == Code.BOOL:
        return np.array([0, 1], np.uint8)
    if row.packed:
        return np.arange(16, dtype=np.uint8)
    return np.arange(256**row.dtype.itemsize, dtype=f"<u{row.dtype.itemsize}")


# -- every bit pattern round-trips ------------------------------------------------------


@pytest.mark.parametrize("row", [r for r in DTYPES if r.dtype.itemsize <= 2], ids=lambda r: r.name)
def test_every_pattern_round_trips(row: kiln_np.DType) -> None:
    wire = patterns(row)
    payload = wire.tobytes() if not row.packed else kiln_np.pack_nibbles(wire).tobytes()
    arr = to_numpy(row.code, payload, (wire.size,))
    assert arr.dtype == row.dtype
    assert bits(arr) == wire.astype(f"<u{row.dtype.itemsize}").tobytes()
    back = from_numpy(arr)
    assert back.code == row.code
    assert bytes(back.data) == payload


@pytest.mark.parametrize(
    ("code", "wire_hex"),
    [
        (Code.F32, "0100807f 0100c0ff 00000080 01000000 ffff7f00"),
        (Code.F64, "010000000000f07f 010000000000f8ff 0000000000000080 0100000000000000"),
        (Code.F16, "017c 01fe 0080 0100"),
    ],
)
def test_nan_payloads_signed_zero_subnormals(code: int, wire_hex: str) -> None:
    payload = bytes.fromhex(wire_hex.replace(" ", ""))
    row = kiln_np.dtype_info(code)
    n = len(payload) // row.dtype.itemsize
    arr = to_numpy(code, payload, (n,))
    assert bits(arr) == payload
    assert bytes(from_numpy(arr).data) == payload
    # The same through a big-endian array and a copy.
    big = arr.astype(arr.dtype.newbyteorder(">"))
    assert bytes(from_numpy(big).data) == payload
    assert bits(to_numpy(code, payload, (n,), copy=True)) == payload


# -- zero-copy, read-only, copy= ---------------------------------------------------------


@pytest.mark.parametrize("row", WHOLE, ids=lambda r: r.name)
def test_whole_byte_decode_is_a_view(row: kiln_np.DType) -> None:
    buf = bytearray(3 * row.dtype.itemsize)
    arr = to_numpy(row.code, buf, (3,))
    assert np.shares_memory(arr, np.frombuffer(buf, np.uint8))
    assert arr.flags.writeable
    assert arr.dtype == row.dtype
    if row.dtype.num < 256 and row.dtype.itemsize > 1:
        assert arr.dtype.str[0] == "<"
    ro = to_numpy(row.code, bytes(buf), (3,))
    assert not ro.flags.writeable
    fresh = to_numpy(row.code, bytes(buf), (3,), copy=True)
    assert fresh.flags.writeable
    assert fresh.flags.owndata
    assert not np.shares_memory(fresh, ro)


@pytest.mark.parametrize("row", PACKED, ids=lambda r: r.name)
def test_packed_decode_is_fresh_and_writable(row: kiln_np.DType) -> None:
    arr = to_numpy(row.code, b"\x21\x03", (3,))
    assert arr.dtype == row.dtype
    assert arr.flags.writeable
    assert bits(arr) == b"\x01\x02\x03"


def _buffers(payload: bytes) -> Iterator[tuple[str, object]]:
    yield "bytes", payload
    yield "bytearray", bytearray(payload)
    yield "memoryview", memoryview(payload)
    yield "unaligned-slice", memoryview(b"\x00" + payload)[1:]
    yield "uint8-array", np.frombuffer(payload, np.uint8)
    yield "int8-array", np.frombuffer(payload, np.int8)
    yield "2d-memoryview", memoryview(payload).cast("B", (2, len(payload) // 2))
    yield "array.array", array.array("f", np.frombuffer(payload, "<f4").tolist())
    m = mmap.mmap(-1, len(payload))
    m.write(payload)
    yield "mmap", m


@pytest.mark.parametrize(
    ("kind", "buf"), list(_buffers(np.arange(4, dtype="<f4").tobytes())), ids=lambda x: str(x)[:20]
)
def test_bytes_like_kinds(kind: str, buf: object) -> None:
    arr = to_numpy(Code.F32, buf, (2, 2))
    assert bits(arr) == np.arange(4, dtype="<f4").tobytes()


def test_unaligned_view_keeps_bits() -> None:
    raw = bytearray(b"\x00" + bytes.fromhex("0100807f0000803f"))
    arr = to_numpy(Code.F32, memoryview(raw)[1:], (2,))
    assert not arr.flags.aligned
    assert bits(arr) == bytes(raw[1:])
    assert np.shares_memory(arr, np.frombuffer(raw, np.uint8))


def test_non_buffer_is_type_error() -> None:
    for buf in ("abc", [1, 2, 3, 4], None, 7):
        with pytest.raises(TypeError) as info:
            to_numpy(Code.U8, buf, (4,))
        assert not isinstance(info.value, KilnError)


@pytest.mark.parametrize(
    "buf",
    [
        memoryview(bytes(8))[::2],
        np.zeros((2, 4), np.uint8).T,
        np.zeros(8, np.uint8)[::2],
        np.zeros((2, 2), np.uint8, order="F").data,
    ],
    ids=["strided-memoryview", "transposed-array", "strided-array", "fortran-memoryview"],
)
def test_non_contiguous_buffers_refused(buf: object) -> None:
    with pytest.raises(KilnError, match="C-contiguous") as info:
        to_numpy(Code.U8, buf, (4,))
    assert info.value.kind == "TYPE"


# -- lengths: exact, before any allocation ------------------------------------------------


@pytest.mark.parametrize("row", DTYPES, ids=ROW_IDS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_one_byte_short_or_long(row: kiln_np.DType, delta: int) -> None:
    n = 5
    size = kiln_np.byte_length(row.code, (n,))
    with pytest.raises(KilnError) as info:
        to_numpy(row.code, bytes(size + delta), (n,))
    err = info.value
    assert err.kind == "LENGTH"
    assert (err.expected, err.found) == (size, size + delta)
    assert "expected" in str(err)
    assert f"{size} bytes, found {size + delta}" in str(err)
    assert row.name in str(err)


@pytest.mark.parametrize(
    ("shape", "f64", "u4"),
    [
        ((2**28, 2**28), "LENGTH", "LENGTH"),
        ((2**40,), "LENGTH", "LENGTH"),
        ((2**60,), "SHAPE", "LENGTH"),  # 2**63 bytes of f64 is one too many for numpy
        ((2**32, 2**32), "SHAPE", "SHAPE"),
        ((2**63 - 1, 2**63 - 1), "SHAPE", "SHAPE"),
    ],
)
def test_huge_shapes_fail_without_allocating_shape_before_length(
    shape: tuple[int, ...], f64: str, u4: str
) -> None:
    # Representability is a property of the shape, so it is checked (SHAPE)
    # before the buffer's length (LENGTH), at every entry point.
    with pytest.raises(KilnError) as info:
        to_numpy(Code.F64, b"", shape)
    assert info.value.kind == f64
    with pytest.raises(KilnError) as info:
        to_numpy(Code.U4, b"\x00", shape)
    assert info.value.kind == u4


# -- content: bool bytes and padding nibbles -------------------------------------------------


def test_bool_bad_byte_names_index_and_hex() -> None:
    payload = bytes([0, 1, 1, 0, 0, 0xFE, 2])
    with pytest.raises(KilnError) as info:
        to_numpy(Code.BOOL, payload, (7,))
    err = info.value
    assert (err.kind, err.index, err.found) == ("TYPE", 5, 0xFE)
    assert "0xfe" in str(err)
    assert "element 5" in str(err)


def test_bool_index_is_flat_c_order() -> None:
    payload = bytes([0, 0, 0, 1, 0, 3])
    with pytest.raises(KilnError) as info:
        to_numpy(Code.BOOL, payload, (2, 3))
    assert info.value.index == 5


@pytest.mark.parametrize("row", PACKED, ids=lambda r: r.name)
@pytest.mark.parametrize("high", range(1, 16))
def test_nonzero_padding_nibble(row: kiln_np.DType, high: int) -> None:
    with pytest.raises(KilnError, match="padding") as info:
        to_numpy(row.code, bytes([0x21, (high << 4) | 3]), (3,))
    assert info.value.kind == "TYPE"
    assert info.value.found == (high << 4) | 3
    assert f"0x{(high << 4) | 3:02x}" in str(info.value)


def test_even_count_high_nibble_is_data() -> None:
    arr = to_numpy(Code.U4, b"\x21\xf3", (4,))
    assert bits(arr) == b"\x01\x02\x03\x0f"


# -- check order ----------------------------------------------------------------------


def test_check_order() -> None:
    # code before layout / shape / buffer type / length / content
    with pytest.raises(KilnError, match="0x0014"):
        to_numpy(20, "not a buffer", "bad shape", Layout("x", 1))  # type: ignore[arg-type]
    # layout before shape
    with pytest.raises(KilnError, match=r"needs a kiln_np\.Layout"):
        to_numpy(5000, "not a buffer", "bad shape")  # type: ignore[arg-type]
    # shape before buffer type
    with pytest.raises(KilnError) as info:
        to_numpy(2, "not a buffer", "bad shape")  # type: ignore[arg-type]
    assert info.value.kind == "SHAPE"
    # buffer type before length
    with pytest.raises(TypeError):
        to_numpy(2, "not a buffer", (1000,))
    # length before content
    with pytest.raises(KilnError) as info:
        to_numpy(Code.BOOL, b"\x02\x02", (3,))
    assert info.value.kind == "LENGTH"


# -- opaque codes -------------------------------------------------------------------------


def test_opaque_round_trip() -> None:
    layout = Layout("vendor-q", 3)
    payload = bytes(range(18))
    blocks = to_numpy(4242, payload, (2, 3), layout)
    assert blocks.shape == (2, 3, 3)
    assert blocks.dtype == np.uint8
    assert np.shares_memory(blocks, np.frombuffer(payload, np.uint8))
    p = from_numpy(blocks, code=4242, layout=layout)
    assert (p.code, p.shape, p.layout) == (4242, (2, 3), layout)
    assert bytes(p.data) == payload
    assert bits(to_numpy(*p)) == payload
    assert to_numpy(4242, payload, (6,), layout, copy=True).flags.owndata


@pytest.mark.parametrize(
    "blocks",
    [np.zeros((2, 4), np.uint8), np.zeros((2, 3), np.int8), np.zeros((), np.uint8)],
    ids=["wrong-block", "wrong-dtype", "scalar"],
)
def test_opaque_blocks_checked(blocks: np.ndarray) -> None:
    with pytest.raises(KilnError) as info:
        from_numpy(blocks, code=4096, layout=Layout("v", 3))
    assert info.value.kind == "SHAPE"


def test_layout_without_code_refused() -> None:
    with pytest.raises(KilnError, match="needs an opaque code") as info:
        from_numpy(np.zeros((1, 3), np.uint8), layout=Layout("v", 3))
    assert info.value.kind == "TYPE"


# -- from_numpy: any layout in memory, C order on the wire -----------------------------------


@pytest.mark.parametrize("row", WHOLE, ids=lambda r: r.name)
def test_memory_layouts_written_in_c_order(row: kiln_np.DType) -> None:
    rng = np.random.default_rng(int(row.code))
    wire = rng.integers(0, 2 if row.code == Code.BOOL else 256, (4, 6 * row.dtype.itemsize))
    base = wire.astype(np.uint8).view(row.dtype)  # (4, 6)
    expected = bits(base)
    for variant in (np.asfortranarray(base), base[::-1][::-1], base.T.T, base.copy()):
        assert bytes(from_numpy(variant).data) == expected
    assert bytes(from_numpy(base[:, ::-2]).data) == bits(np.ascontiguousarray(base[:, ::-2]))
    assert bytes(from_numpy(base.T).data) == bits(np.ascontiguousarray(base.T))
    bcast = np.broadcast_to(base[:1], (3, 6))
    assert bytes(from_numpy(bcast).data) == bits(base[:1]) * 3
    assert from_numpy(bcast).shape == (3, 6)


def test_zero_d_and_empty() -> None:
    p = from_numpy(np.float32(1.0))
    assert (p.code, bytes(p.data), p.shape) == (Code.F32, b"\x00\x00\x80\x3f", ())
    p = from_numpy(np.zeros((0, 3), ml_dtypes.int4))
    assert (p.code, bytes(p.data), p.shape) == (Code.I4, b"", (0, 3))
    p = from_numpy(np.array([7], ml_dtypes.uint4).reshape(()))
    assert (bytes(p.data), p.shape) == (b"\x07", ())
    assert to_numpy(*p).shape == ()


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_python_objects_and_matrix() -> None:
    assert from_numpy([1, 2]).code == Code.I64
    assert from_numpy(True).code == Code.BOOL
    p = from_numpy(np.matrix([[1.0, 2.0]], dtype="<f4"))
    assert p.shape == (1, 2)
    with pytest.raises(KilnError, match="cannot make an array") as info:
        from_numpy([[1], [1, 2]])
    assert info.value.kind == "TYPE"


def test_masked_arrays_refused() -> None:
    m = np.ma.masked_array([1.0, 2.0], mask=[False, True])
    with pytest.raises(KilnError, match="masked") as info:
        from_numpy(m)
    assert info.value.kind == "TYPE"


@pytest.mark.parametrize(
    "arr",
    [
        np.zeros(2, np.complex64),
        np.zeros(2, object),
        np.zeros(2, "U2"),
        np.zeros(2, "S2"),
        np.zeros(2, "V2"),
        np.zeros(2, "M8[s]"),
        np.zeros(2, [("a", "<f4")]),
        np.zeros(2, ml_dtypes.float8_e4m3fnuz),
        np.zeros(2, ml_dtypes.int2),
        np.zeros(2, ml_dtypes.float6_e2m3fn),
    ],
    ids=lambda a: str(a.dtype),
)
def test_unsupported_dtypes_named(arr: np.ndarray) -> None:
    with pytest.raises(KilnError, match="has no Kiln code") as info:
        from_numpy(arr)
    assert info.value.kind == "TYPE"
    assert str(arr.dtype) in str(info.value)


def test_code_must_match_dtype_without_casting() -> None:
    with pytest.raises(KilnError, match="never casts") as info:
        from_numpy(np.zeros(2, np.float64), code=Code.F32)
    assert info.value.kind == "TYPE"
    assert bytes(from_numpy(np.ones(1, ">f4"), code=2).data) == b"\x00\x00\x80\x3f"
    with pytest.raises(KilnError, match="0x0014"):
        from_numpy(np.zeros(2, np.float32), code=20)


def test_bool_with_non_canonical_byte_refused() -> None:
    arr = np.array([0, 1, 2], np.uint8).view(np.bool_)
    with pytest.raises(KilnError, match="0x02") as info:
        from_numpy(arr)
    assert (info.value.kind, info.value.index) == ("TYPE", 2)


@pytest.mark.parametrize("row", PACKED, ids=lambda r: r.name)
@pytest.mark.parametrize("byte", [0x10, 0x1F, 0x80, 0xF0, 0xFF])
def test_four_bit_high_bits_refused(row: kiln_np.DType, byte: int) -> None:
    storage = np.array([1, 2, byte, 3], np.uint8)
    with pytest.raises(KilnError, match="never masks") as info:
        from_numpy(storage.view(row.dtype))
    assert (info.value.kind, info.value.index, info.value.found) == ("TYPE", 2, byte)


def test_int4_values_pack_as_twos_complement() -> None:
    p = from_numpy(np.array([-8, -1, 0, 7], ml_dtypes.int4))
    assert bytes(p.data) == b"\xf8\x70"


def test_payload_is_read_only_and_aliases_c_input() -> None:
    arr = np.arange(4, dtype="<i4")
    p = from_numpy(arr)
    assert p.data.readonly
    assert np.shares_memory(np.frombuffer(p.data, np.uint8), arr)
    assert "code 12 (i32)" in repr(p)
    assert p.byte_length == 16


def test_payload_and_errors_pickle() -> None:
    p = from_numpy(np.array([1, 2, 3], ml_dtypes.uint4))
    q = pickle.loads(pickle.dumps(p))
    assert (q.code, bytes(q.data), q.shape, q.layout) == (Code.U4, b"\x21\x03", (3,), None)
    assert q.data.readonly
    opaque = from_numpy(np.zeros((2, 3), np.uint8), code=5000, layout=Layout("v", 3))
    assert pickle.loads(pickle.dumps(opaque)).layout == Layout("v", 3)
    with pytest.raises(KilnError) as info:
        to_numpy(Code.BOOL, b"\x05", (1,))
    err = pickle.loads(pickle.dumps(info.value))
    assert (err.kind, err.code, err.index, err.found, str(err)) == (
        "TYPE",
        7,
        0,
        5,
        str(info.value),
    )


def test_big_endian_host_path_swaps_two_byte_ml_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    # ml_dtypes types are native-order only; on a big-endian host bf16 must be swapped.
    monkeypatch.setattr(_codec, "BIG_ENDIAN_HOST", True)
    arr = to_numpy(Code.BF16, b"\x80\x3f", (1,))
    assert bits(arr) == b"\x3f\x80"
    assert bytes(from_numpy(arr).data) == b"\x80\x3f"
    assert bits(to_numpy(Code.F32, b"\x00\x00\x80\x3f", (1,))) == b"\x00\x00\x80\x3f"


# -- properties --------------------------------------------------------------------------

shapes = st.lists(st.integers(0, 6), min_size=0, max_size=4).map(tuple)


@given(row=st.sampled_from(DTYPES), shape=shapes, data=st.data())
def test_round_trip_random(row: kiln_np.DType, shape: tuple[int, ...], data: st.DataObject) -> None:
    n = kiln_np.byte_length(row.code, shape)
    count = int(np.prod(shape))
    if row.code == Code.BOOL:
        payload = bytes(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    elif row.packed:
        nibbles = data.draw(st.lists(st.integers(0, 15), min_size=count, max_size=count))
        payload = kiln_np.pack_nibbles(np.array(nibbles, np.uint8)).tobytes()
    else:
        payload = data.draw(st.binary(min_size=n, max_size=n))
    arr = to_numpy(row.code, payload, shape)
    assert arr.shape == shape
    p = from_numpy(arr)
    assert (p.code, p.shape) == (row.code, shape)
    assert bytes(p.data) == payload


@given(code=st.integers(-5, 70000), shape=shapes, payload=st.binary(max_size=64))
def test_random_bytes_decode_or_raise(code: int, shape: tuple[int, ...], payload: bytes) -> None:
    layout = Layout("fuzz", 3) if 4096 <= code <= 32767 else None
    kind: str
    try:
        arr = to_numpy(code, payload, shape, layout)
    except KilnError as exc:
        kind = exc.kind
    else:
        kind = "ok"
        assert kiln_np.byte_length(code, shape, layout) == len(payload)
        assert arr.shape[: len(shape)] == shape
    assert kind in {"ok", "TYPE", "LENGTH", "SHAPE"}
