"""The closed dtype table, code classification, Layout and byte_length."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import DTYPES, Code, KilnError, Layout, byte_length

SPEC_ROWS = [  # code, name, bytes per element (0 for packed), from the spec's table
    (1, "f64", 8), (2, "f32", 4), (3, "f16", 2), (4, "bf16", 2), (5, "f8e4m3", 1),
    (6, "f8e5m2", 1), (7, "bool", 1), (8, "i8", 1), (9, "u8", 1), (10, "i16", 2),
    (11, "u16", 2), (12, "i32", 4), (13, "u32", 4), (14, "i64", 8), (15, "u64", 8),
    (16, "i4", 0), (17, "u4", 0), (18, "e2m1", 0), (19, "e8m0", 1),
]  # fmt: skip

ROW_IDS = [r.name for r in DTYPES]


def test_table_matches_spec() -> None:
    assert [(int(r.code), r.name) for r in DTYPES] == [(c, n) for c, n, _ in SPEC_ROWS]
    for row, (_, _, width) in zip(DTYPES, SPEC_ROWS, strict=True):
        assert row.bits == (4 if width == 0 else 8 * width)
        assert row.packed == (width == 0)
        assert row.dtype.itemsize == max(width, 1)


@pytest.mark.parametrize(
    ("code", "dtype"),
    [
        (Code.BF16, ml_dtypes.bfloat16),
        (Code.F8E4M3, ml_dtypes.float8_e4m3fn),
        (Code.F8E5M2, ml_dtypes.float8_e5m2),
        (Code.E8M0, ml_dtypes.float8_e8m0fnu),
        (Code.I4, ml_dtypes.int4),
        (Code.U4, ml_dtypes.uint4),
        (Code.E2M1, ml_dtypes.float4_e2m1fn),
        (Code.BOOL, np.bool_),
    ],
)
def test_special_dtypes(code: Code, dtype: type) -> None:
    assert kiln_np.dtype_for_code(code) == np.dtype(dtype)
    assert kiln_np.code_for_dtype(dtype) is code


@pytest.mark.parametrize("row", DTYPES, ids=ROW_IDS)
def test_lookups_both_ways(row: kiln_np.DType) -> None:
    assert kiln_np.dtype_info(int(row.code)) is row
    assert kiln_np.dtype_for_code(np.uint16(row.code)) == row.dtype
    assert kiln_np.code_for_dtype(row.dtype) is row.code
    if row.dtype.itemsize > 1 and row.dtype.byteorder != "=":
        assert kiln_np.code_for_dtype(row.dtype.newbyteorder(">")) is row.code
    assert row.dtype.byteorder in "<|="  # never native-ambiguous for numpy's own types


def test_builtin_dtypes_are_explicitly_little_endian() -> None:
    for row in DTYPES:
        if row.dtype.kind in "fiu" and row.dtype.itemsize > 1 and row.dtype.num < 256:
            assert row.dtype.str.startswith("<"), row


@pytest.mark.parametrize(
    "dtype",
    [
        np.complex64, np.complex128, object, "U3", "S3", "V4", "M8[s]", "m8[s]",
        [("a", "<f4")], ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz,
        ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn,
        np.longdouble,
    ],
    ids=str,
)  # fmt: skip
def test_dtypes_without_a_code(dtype: object) -> None:
    with pytest.raises(KilnError, match="has no Kiln code") as info:
        kiln_np.code_for_dtype(dtype)  # type: ignore[arg-type]
    assert info.value.kind == "TYPE"


def test_not_a_dtype() -> None:
    with pytest.raises(KilnError, match="expected a numpy dtype") as info:
        kiln_np.code_for_dtype("no-such-dtype")
    assert info.value.kind == "TYPE"


def test_whole_code_space_classified() -> None:
    kinds = [kiln_np.code_range(c) for c in range(65536)]
    assert kinds[0] == "rejected"
    assert set(kinds[1:20]) == {"closed"}
    assert set(kinds[20:4096]) == {"reserved"}
    assert set(kinds[4096:32768]) == {"opaque"}
    assert set(kinds[32768:]) == {"rejected"}
    assert kiln_np.code_range(-1) == "rejected"
    assert kiln_np.code_range(2**70) == "rejected"


@pytest.mark.parametrize("code", [0, 20, 4095, 32768, 65535, -1, 2**64])
def test_rejected_codes_raise_type_with_hex(code: int) -> None:
    with pytest.raises(KilnError) as info:
        byte_length(code, (1,))
    assert info.value.kind == "TYPE"
    assert info.value.code == code
    if code >= 0:
        assert f"0x{code:04x}" in str(info.value)


@pytest.mark.parametrize("code", [True, np.True_, 2.0, "2", None, b"\x02", [2]], ids=repr)
def test_non_integer_codes(code: object) -> None:
    with pytest.raises(KilnError, match="expected an integer dtype code") as info:
        byte_length(code, (1,))  # type: ignore[arg-type]
    assert info.value.kind == "TYPE"


@pytest.mark.parametrize("code", [2, np.int64(2), np.uint16(2), np.int8(2), Code.F32])
def test_integer_codes(code: int) -> None:
    assert byte_length(code, (3,)) == 12


def test_byte_length_rules() -> None:
    assert byte_length(17, (3,)) == 2
    assert byte_length(16, (4,)) == 2
    assert byte_length(18, ()) == 1
    assert byte_length(18, (0,)) == 0
    assert byte_length(1, ()) == 8
    assert byte_length(1, (2**62, 4)) == 2**67
    assert byte_length(17, (2**63 - 1, 2**63 - 1)) == -(-((2**63 - 1) ** 2) // 2)
    assert byte_length(4096, (2, 3), Layout("blk", 5)) == 30


@pytest.mark.parametrize("row", DTYPES, ids=ROW_IDS)
@pytest.mark.parametrize("count", [0, 1, 2, 3, 7, 1000])
def test_byte_length_per_row(row: kiln_np.DType, count: int) -> None:
    width = row.bits / 8
    assert byte_length(row.code, (count,)) == int(np.ceil(count * width))


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        (3, "sequence"),
        (None, "sequence"),
        ("3", "sequence"),
        (b"\x03", "sequence"),
        ((3.0,), "to be an integer"),
        ((True,), "integer"),
        ((np.True_,), "integer"),
        ((None,), "integer"),
        (("3",), "integer"),
        ((-1,), r"0\.\.2\*\*63-1"),
        ((2**63,), r"0\.\.2\*\*63-1"),
        ((1,) * 65, "at most 64"),
        (np.array([[1]]), "1-D"),
        (np.array([1.0]), "1-D integers"),
    ],
    ids=repr,
)
def test_bad_shapes(shape: object, match: str) -> None:
    with pytest.raises(KilnError, match=match) as info:
        byte_length(2, shape)  # type: ignore[arg-type]
    assert info.value.kind == "SHAPE"


@pytest.mark.parametrize(
    "shape", [(), [2, 3], (np.int64(2), np.uint8(3)), range(1, 3), np.array([2, 3]), (1,) * 64]
)
def test_good_shapes(shape: object) -> None:
    assert byte_length(9, shape) in (1, 2, 6)  # type: ignore[arg-type]


def test_layout_validation() -> None:
    size = Layout("x", np.int32(3)).block_size  # type: ignore[arg-type]
    assert size == 3
    assert type(size) is int
    for name, bad in [("", 1), (None, 1), (b"x", 1), ("x", 0), ("x", -1), ("x", True),
                       ("x", 1.0), ("x", "1"), ("x", None)]:  # fmt: skip
        with pytest.raises(KilnError) as info:
            Layout(name, bad)  # type: ignore[arg-type]
        assert info.value.kind == "TYPE"


def test_layout_placement() -> None:
    with pytest.raises(KilnError, match=r"needs a kiln_np\.Layout") as info:
        byte_length(4096, (1,))
    assert info.value.kind == "TYPE"
    with pytest.raises(KilnError, match="takes no layout") as info:
        byte_length(2, (1,), Layout("foreign", 4))
    assert info.value.kind == "TYPE"
    with pytest.raises(KilnError, match=r"needs a kiln_np\.Layout"):
        byte_length(4096, (1,), ("x", 4))  # type: ignore[arg-type]


def test_opaque_code_has_no_dtype() -> None:
    with pytest.raises(KilnError, match="no element dtype") as info:
        kiln_np.dtype_for_code(4096)
    assert info.value.kind == "TYPE"


def test_check_order_code_before_layout_before_shape() -> None:
    with pytest.raises(KilnError) as info:
        byte_length(20, "bad", Layout("x", 1))  # type: ignore[arg-type]
    assert "0x0014" in str(info.value)
    with pytest.raises(KilnError, match="takes no layout"):
        byte_length(2, "bad", Layout("x", 1))  # type: ignore[arg-type]
