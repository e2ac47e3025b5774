"""describe, bit_histogram and bit_values on every Kiln code, payloads and
block-scaled tensors; every count checked against an independent numpy
computation."""

from __future__ import annotations

import doctest
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import available, bits, needs, optional

import kiln_np
from kiln_np import (
    DTYPES,
    Code,
    KilnError,
    Layout,
    _explore,
    bit_histogram,
    bit_values,
    describe,
)

if TYPE_CHECKING:
    import matplotlib
    import matplotlib.container
else:
    matplotlib = optional("matplotlib", "container")

if available("matplotlib"):
    matplotlib.use("Agg")

COUNTED = [r for r in DTYPES if r.bits <= 16]
SMALL = [r for r in DTYPES if r.bits <= 8]
WIDE = [r for r in DTYPES if r.bits > 16]
FLOATS = [r for r in DTYPES if r.name in ("f64", "f32", "f16", "bf16")]
DOCS = Path(__file__).resolve().parents[2] / "docs"
E8M0 = ml_dtypes.float8_e8m0fnu
E2M1 = ml_dtypes.float4_e2m1fn


def _ids(rows: list[kiln_np.DType]) -> list[str]:
    return [r.name for r in rows]


def _finfo(dtype: Any) -> Any:
    try:
        return ml_dtypes.finfo(dtype)  # type: ignore[no-untyped-call]
    except ValueError:
        return None


def _expected(arr: np.ndarray) -> dict[str, Any]:
    """What describe must find, computed with numpy alone from float64/int copies."""
    info = _finfo(arr.dtype)
    flat = arr.reshape(-1)
    if info is None:  # integers and bool: exact Python ints
        ints = flat.astype(np.int64 if arr.dtype != np.uint64 else np.uint64)
        lo: float | None = int(ints.min()) if ints.size else None
        hi: float | None = int(ints.max()) if ints.size else None
        wide = ints.astype(np.float64)
        nan = inf = sub = 0
        zero = int(np.count_nonzero(ints == 0))
    else:
        with np.errstate(invalid="ignore"):
            wide = flat.astype(np.float64)
        nan = int(np.isnan(wide).sum())
        inf = int(np.isinf(wide).sum())
        zero = int(np.count_nonzero(wide == 0))
        wide = wide[np.isfinite(wide)]
        tiny = float(info.smallest_normal)
        sub = int(np.count_nonzero((np.abs(wide) < tiny) & (wide != 0)))
        lo = float(wide.min()) if wide.size else None
        hi = float(wide.max()) if wide.size else None
    return {
        "nan": nan,
        "inf": inf,
        "zero": zero,
        "subnormal": sub,
        "min": lo,
        "max": hi,
        "absmax": None if lo is None or hi is None else max(abs(lo), abs(hi)),
        "mean": float(np.mean(wide)) if wide.size else None,
        "std": float(np.std(wide)) if wide.size else None,
    }


def _check(d: kiln_np.Description, arr: np.ndarray) -> None:
    want = _expected(arr)
    got = {k: getattr(d, k) for k in want}
    for key in ("mean", "std"):
        if want[key] is None:
            assert got[key] is None
        else:
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-300)
        del want[key], got[key]
    assert got == want
    assert (d.count, d.shape) == (arr.size, arr.shape)
    assert d.byte_length == kiln_np.byte_length(d.code, d.shape)


def _exponent_fields(arr: np.ndarray) -> np.ndarray:
    """Counts by exponent field from np.frexp: an independent route to the bits."""
    info = _finfo(arr.dtype)
    bias = int(info.maxexp) - 1
    with np.errstate(invalid="ignore"):
        wide = arr.reshape(-1).astype(np.float64)
    top = (1 << int(info.nexp)) - 1
    finite = np.isfinite(wide)
    normal = finite & (np.abs(wide) >= float(info.smallest_normal))
    fields = np.zeros(wide.size, np.int64)
    fields[normal] = np.frexp(wide[normal])[1] - 1 + bias
    fields[~finite] = top
    return np.bincount(fields, minlength=top + 1)


def _sample(row: kiln_np.DType, n: int = 3000) -> np.ndarray:
    """Random values of every kind the type has: NaN, inf, zeros, subnormals."""
    rng = np.random.default_rng(int(row.code))
    if row.bits <= 16:
        raw = rng.integers(0, 1 << row.bits, n, dtype=np.uint32)
        if row.code == Code.BOOL:
            raw &= 1
        return raw.astype(np.uint16 if row.bits == 16 else np.uint8).view(row.dtype)
    if _finfo(row.dtype) is None:
        ints = np.iinfo(row.dtype)
        ends = np.array([ints.min, ints.max, 0], row.dtype)
        return np.concatenate([rng.integers(ints.min, ints.max, n, dtype=row.dtype), ends])
    tiny = float(np.finfo(row.dtype).smallest_subnormal)
    body = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -1e-310]
    return np.concatenate([body, special]).astype(row.dtype)


# -- every pattern; random samples against numpy ---------------------------------


@pytest.mark.parametrize("row", COUNTED, ids=_ids(COUNTED))
def test_describe_every_bit_pattern(row: kiln_np.DType) -> None:
    values = bit_values(row.dtype)
    before = values.view(np.uint8).copy()
    d = describe(values)
    assert (d.code, d.dtype) == (row.code, row.dtype)
    _check(d, values)
    assert d.histogram is not None
    np.testing.assert_array_equal(d.histogram, np.ones(values.size, np.int64))
    np.testing.assert_array_equal(
        d.first.view(np.uint8), values[:8].view(np.uint8)
    )  # the patterns 0..7, bit for bit
    np.testing.assert_array_equal(values.view(np.uint8), before)  # bits untouched


def test_every_pattern_of_known_types() -> None:
    # Spot values from the type definitions, not from numpy.
    f16 = describe(bit_values(np.float16))
    assert (f16.nan, f16.inf, f16.zero, f16.subnormal) == (2 * 1023, 2, 2, 2 * 1023)
    assert (f16.min, f16.max, f16.absmax) == (-65504.0, 65504.0, 65504.0)
    bf16 = describe(bit_values(ml_dtypes.bfloat16))
    assert (bf16.nan, bf16.inf, bf16.zero, bf16.subnormal) == (2 * 127, 2, 2, 2 * 127)
    e8m0 = describe(bit_values(E8M0))
    assert (e8m0.nan, e8m0.zero, e8m0.min, e8m0.max) == (1, 0, 2.0**-127, 2.0**127)
    e2m1 = describe(bit_values(E2M1))
    assert (e2m1.subnormal, e2m1.absmax, e2m1.mean) == (2, 6.0, 0.0)  # +-0.5
    u16 = describe(bit_values(np.uint16))
    assert (u16.min, u16.max, u16.mean) == (0, 65535, 32767.5)


@pytest.mark.parametrize("row", list(DTYPES), ids=_ids(list(DTYPES)))
def test_describe_random_samples_match_numpy(row: kiln_np.DType) -> None:
    arr = _sample(row).reshape(-1, 1)
    arr.flags.writeable = False  # describe only reads
    d = describe(arr, first=5)
    _check(d, arr)
    assert type(d.min) is type(d.max) is (float if _finfo(row.dtype) is not None else int)
    np.testing.assert_array_equal(d.first.view(np.uint8), arr[:5, 0].view(np.uint8))
    if row.bits <= 16:
        assert d.histogram is not None
        storage = arr.view(np.uint16 if row.bits == 16 else np.uint8).reshape(-1)
        np.testing.assert_array_equal(d.histogram, np.bincount(storage, minlength=d.histogram.size))
    else:
        assert d.histogram is None
    if row in FLOATS:
        assert d.exponents is not None
        np.testing.assert_array_equal(d.exponents, _exponent_fields(arr))
        assert int(d.exponents.sum()) == arr.size
        assert d.exponents[0] == d.zero + d.subnormal
        assert d.exponents[-1] == d.nan + d.inf
    else:
        assert d.exponents is None


@pytest.mark.parametrize("row", WIDE + FLOATS, ids=_ids(WIDE + FLOATS))
def test_wide_types_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch, row: kiln_np.DType) -> None:
    arr = _sample(row, 500)
    whole = describe(arr).to_dict()
    monkeypatch.setattr(_explore.chunks, "CHUNK", 7)
    monkeypatch.setattr(_explore.chunks, "COUNT_CHUNK", 11)
    chunked = describe(arr).to_dict()
    for key in ("mean", "std"):  # merged chunk by chunk: rounding differs
        assert chunked.pop(key) == pytest.approx(whole.pop(key), rel=1e-12)
    assert chunked == whole


# -- overflow-free moments ----------------------------------------------------------

BIG = float(np.finfo(np.float64).max)


@pytest.mark.parametrize(
    ("values", "mean", "std"),
    [
        ([1e308, 1e308], 1e308, 0.0),
        ([BIG, BIG, BIG], BIG, 0.0),
        ([BIG, -BIG], 0.0, BIG),
        ([5e-324, 1.5e-323], 1e-323, 5e-324),  # subnormals: scaled up, never lost
        ([1.0, 2.0, 3.0, 4.0], 2.5, math.sqrt(1.25)),
    ],
)
def test_mean_and_std_never_overflow(values: list[float], mean: float, std: float | None) -> None:
    with np.errstate(all="raise"):  # a numpy overflow would raise, a warning fails the test
        d = describe(np.array(values, np.float64))
    assert d.mean == mean
    if std is not None:
        assert d.std == pytest.approx(std, rel=1e-15)
    assert d.std is not None
    assert math.isfinite(d.std)


def test_mean_of_huge_values_from_a_list_and_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert describe([1e308, 1e308]).mean == 1e308
    monkeypatch.setattr(_explore.chunks, "CHUNK", 3)
    d = describe(np.array([1e308] * 10 + [-1e308] * 10 + [1e-300]))
    assert d.mean == pytest.approx(1e-300 / 21, rel=1e-6) or abs(d.mean or 0) < 1e292
    assert d.std == pytest.approx(1e308 * math.sqrt(20 / 21), rel=1e-12)


# -- shapes, repr, html, json ---------------------------------------------------------


@pytest.mark.parametrize("row", list(DTYPES), ids=_ids(list(DTYPES)))
def test_describe_empty_and_scalar(row: kiln_np.DType) -> None:
    empty = describe(np.empty((0, 3), row.dtype))
    assert (empty.count, empty.min, empty.max, empty.mean, empty.std, empty.absmax) == (
        0,
        *[None] * 5,
    )
    assert empty.first.size == 0
    assert "- / -" in repr(empty)
    scalar = describe(np.ones((), row.dtype))
    assert (scalar.shape, scalar.count, scalar.first.size) == ((), 1, 1)
    assert scalar.min == scalar.max == scalar.absmax == 1
    assert (scalar.mean, scalar.std) == (1.0, 0.0)
    assert "() (scalar)" in repr(scalar)


@pytest.mark.parametrize("row", list(DTYPES), ids=_ids(list(DTYPES)))
def test_describe_repr_html_and_json(row: kiln_np.DType) -> None:
    arr = _sample(row, 40)
    d = describe(arr, first=3)
    text = repr(d)
    assert text.startswith(f"<kiln_np.Description of {row.name} ")
    for label in ("nan / inf / zero", "min / max", "absmax", "mean / std"):
        assert label in text
    assert ("subnormal" in text) == (_finfo(row.dtype) is not None)
    assert ("histogram" in text) == (row.bits <= 16)
    assert ("binary exponents used" in text) == (row in FLOATS)
    page = d._repr_html_()
    assert page.startswith("<table>")
    assert f"<td style='text-align:left'>{row.dtype}</td>" in page
    assert ("<th>exponent</th>" in page) == (row in FLOATS)
    record = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert (record["code"], record["name"], record["count"]) == (row.code, row.name, arr.size)
    assert record["byte_length"] == kiln_np.byte_length(row.code, arr.shape)
    for key in ("nan", "inf", "zero", "subnormal"):
        assert record[key] == getattr(d, key)
    assert len(record["first"]) == len(record["first_bits"]) == 3
    width = max(row.dtype.itemsize, 1)
    raw = arr[:3].view(np.uint8).reshape(3, width)[:, ::-1]  # little-endian -> value order
    assert record["first_bits"] == ["0x" + bytes(b).hex() for b in raw]
    assert (record["histogram"] is None) == (row.bits > 16)
    assert (record["exponents"] is None) == (row not in FLOATS)


def test_describe_nonfinite_json() -> None:
    d = describe(np.array([np.nan, np.inf, -np.inf], np.float32))
    record = d.to_dict()
    assert record["first"] == ["nan", "inf", "-inf"]
    assert [record[k] for k in ("min", "max", "absmax", "mean", "std")] == [None] * 5
    json.dumps(record, allow_nan=False)


def test_describe_chunks_in_c_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_explore.chunks, "CHUNK", 7)
    base = np.arange(-50, 50, dtype=np.int8).reshape(10, 10)
    view = base.T[::2]  # not contiguous: chunks are small C-order copies
    d = describe(view, first=12)
    np.testing.assert_array_equal(d.first.view(np.uint8), view.reshape(-1)[:12].view(np.uint8))
    _check(d, view)
    assert d.histogram is not None
    np.testing.assert_array_equal(
        d.histogram, np.bincount(view.reshape(-1).view(np.uint8), minlength=256)
    )


def test_describe_big_endian_input_reports_values_and_bits() -> None:
    arr = np.array([1.0, -2.0, np.nan, 0.0, 2.0**-140], ">f4")
    d = describe(arr)
    assert d.dtype == np.dtype("<f4")
    assert (d.nan, d.zero, d.subnormal, d.min, d.max) == (1, 1, 1, -2.0, 1.0)
    assert d.exponents is not None
    np.testing.assert_array_equal(d.exponents, _exponent_fields(arr.astype("<f4")))
    assert d.to_dict()["first_bits"][:2] == ["0x3f800000", "0xc0000000"]
    np.testing.assert_array_equal(d.first.view(np.uint8), arr.astype("<f4").view(np.uint8))
    halves = describe(np.array([1.0, -2.0], ">f2"))
    assert halves.histogram is not None
    assert np.flatnonzero(halves.histogram).tolist() == [0x3C00, 0xC000]
    ints = describe(np.array([0x0102, 7], ">u2"))
    assert (ints.min, ints.max, ints.to_dict()["first_bits"]) == (7, 0x0102, ["0x0102", "0x0007"])


# -- bit_histogram, bit_values ---------------------------------------------------------


@pytest.mark.parametrize("row", COUNTED, ids=_ids(COUNTED))
def test_bit_histogram_counts_every_pattern(row: kiln_np.DType) -> None:
    values = bit_values(row.dtype)
    weights = (np.arange(values.size) * 7 + 3) % 5  # 0 for some patterns
    arr = np.repeat(values, weights)
    arr = arr[np.random.default_rng(0).permutation(arr.size)]
    counts = bit_histogram(arr)
    assert counts.dtype == np.int64
    assert counts.size == (2 if row.code == Code.BOOL else 1 << row.bits)
    np.testing.assert_array_equal(counts, weights)


@pytest.mark.parametrize("row", WIDE, ids=_ids(WIDE))
def test_bit_histogram_refuses_wide_types(row: kiln_np.DType) -> None:
    with pytest.raises(KilnError, match=rf"16 bits or fewer, found code {int(row.code)} ") as info:
        bit_histogram(np.zeros(3, row.dtype))
    assert info.value.kind == "TYPE"
    with pytest.raises(KilnError, match="16 bits or fewer"):
        bit_values(row.dtype)


def test_bit_histogram_refuses_non_kiln_dtypes() -> None:
    for bad in (np.zeros(2, np.complex64), np.zeros(2, ml_dtypes.float8_e3m4)):  # FNUZ: counted
        with pytest.raises(KilnError, match="has no Kiln code") as info:
            bit_histogram(bad)
        assert info.value.kind == "TYPE"


@pytest.mark.parametrize(
    ("dtype", "storage", "limit"),
    [
        (ml_dtypes.int4, 0x1F, "0x0f"),
        (E2M1, 0x10, "0x0f"),
        (np.bool_, 2, "0x01"),
    ],
)
def test_bit_histogram_refuses_bytes_outside_the_type(
    monkeypatch: pytest.MonkeyPatch, dtype: Any, storage: int, limit: str
) -> None:
    monkeypatch.setattr(_explore.chunks, "CHUNK", 4)  # the bad byte sits in the third chunk
    raw = np.zeros(11, np.uint8)
    raw[9] = storage
    with pytest.raises(
        KilnError, match=rf"0x00-{limit}, found 0x{storage:02x} at element 9"
    ) as info:
        bit_histogram(raw.view(dtype))
    assert (info.value.kind, info.value.index, info.value.found) == ("TYPE", 9, storage)
    with pytest.raises(KilnError, match="at element 9"):
        describe(raw.view(dtype))


def test_bit_values_spot_values() -> None:
    # Each label checked against the type's own definition.
    assert float(bit_values(ml_dtypes.float8_e4m3fn)[0x38]) == 1.0
    assert float(bit_values(ml_dtypes.float8_e4m3fn)[0x7E]) == 448.0
    assert np.isnan(float(bit_values(ml_dtypes.float8_e5m2)[0x7D]))
    assert float(bit_values(ml_dtypes.float8_e5m2)[0x7C]) == np.inf
    assert float(bit_values(E8M0)[0x7F]) == 1.0
    assert float(bit_values(E2M1)[0xF]) == -6.0
    assert int(bit_values(ml_dtypes.int4)[0x8]) == -8
    assert int(bit_values(np.int8)[0x80]) == -128
    assert float(bit_values(ml_dtypes.bfloat16)[0x3F80]) == 1.0  # the spec's bf16 1.0
    assert float(bit_values(np.float16)[0x3C00]) == 1.0  # the spec's f16 1.0
    assert int(bit_values(np.int16)[0x8000]) == -32768
    assert bit_values(np.bool_).tolist() == [False, True]
    for row in COUNTED:
        values = bit_values(row.dtype)
        assert values.dtype == row.dtype
        storage = np.uint16 if row.bits == 16 else np.uint8
        np.testing.assert_array_equal(values.view(storage), np.arange(values.size))


def test_histogram_and_exponent_rows() -> None:
    d = describe(np.array([2, 2, 1, 7, 7, 7], ml_dtypes.uint4))
    assert d.histogram_rows() == [
        ("0x7", "7", 3, "50.0%"),
        ("0x2", "2", 2, "33.3%"),
        ("0x1", "1", 1, "16.7%"),
    ]
    assert [r[0] for r in d.histogram_rows(order="pattern")] == ["0x1", "0x2", "0x7"]
    assert d.histogram_rows(1) == [("0x7", "7", 3, "50.0%")]
    assert d.exponent_rows() == []
    assert describe(np.zeros(2, np.float32)).histogram_rows() == []
    f = describe(np.array([0.0, 1e-40, 3.0, -2.5, np.nan, 0.75], np.float32))
    assert f.exponent_rows(order="exponent") == [
        ("0/subnormal", 2, "33.3%"),
        ("2^-1", 1, "16.7%"),
        ("2^1", 2, "33.3%"),
        ("inf/nan", 1, "16.7%"),
    ]
    assert f.exponent_rows(1) == [("0/subnormal", 2, "33.3%")]
    h = describe(np.array([1.0, 1.0, -2.0], ml_dtypes.bfloat16))
    assert h.histogram_rows() == [("0x3f80", "1", 2, "66.7%"), ("0xc000", "-2", 1, "33.3%")]
    assert h.exponent_rows() == [("2^0", 2, "66.7%"), ("2^1", 1, "33.3%")]


# -- payloads -------------------------------------------------------------------------


@pytest.mark.parametrize("row", list(DTYPES), ids=_ids(list(DTYPES)))
def test_describe_a_payload(monkeypatch: pytest.MonkeyPatch, row: kiln_np.DType) -> None:
    arr = _sample(row, 41).reshape(-1)[:41]  # odd: a padding nibble for 4-bit codes
    payload = kiln_np.from_numpy(arr)
    want = describe(arr).to_dict()
    monkeypatch.setattr(_explore.chunks, "COUNT_CHUNK", 5)  # chunks of 10 elements
    got = describe(payload).to_dict()
    for key in ("mean", "std"):  # merged chunk by chunk: rounding differs
        assert got.pop(key) == pytest.approx(want.pop(key), rel=1e-12)
    assert got == want
    if row.bits <= 16:
        np.testing.assert_array_equal(bit_histogram(payload), bit_histogram(arr))


def test_describe_a_payload_with_a_bad_byte_names_its_element(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_explore.chunks, "COUNT_CHUNK", 2)  # chunks of 4 elements
    data = bytes([1, 0, 1, 1, 0, 0, 2, 1, 0])
    payload = kiln_np.Payload(Code.BOOL, memoryview(data), (9,))
    with pytest.raises(KilnError, match="at element 6") as info:
        describe(payload)
    assert (info.value.kind, info.value.index) == ("TYPE", 6)
    nibbles = kiln_np.Payload(Code.U4, memoryview(bytes([0x21, 0x43, 0x65, 0x17])), (7,))
    with pytest.raises(KilnError) as info:
        bit_histogram(nibbles)  # the padding nibble of the last byte is 1
    assert info.value.kind == "TYPE"


def test_describe_refuses_a_short_or_opaque_payload() -> None:
    short = kiln_np.Payload(Code.F32, memoryview(bytes(7)), (2,))
    with pytest.raises(KilnError, match=r"expected 2 x 4 = 8 bytes, found 7") as info:
        describe(short)
    assert info.value.kind == "LENGTH"
    opaque = kiln_np.Payload(4096, memoryview(bytes(4)), (2,), Layout("pair", 2))
    with pytest.raises(KilnError, match="opaque payload") as info:
        describe(opaque)
    assert info.value.kind == "TYPE"
    with pytest.raises(KilnError, match="opaque payload"):
        bit_histogram(opaque)


def test_describe_a_lazy_payload_chunk_by_chunk(tmp_path: Path) -> None:
    arr = np.resize(bit_values(E2M1), (9, 7))  # odd count: padding nibble
    path = tmp_path / "w.kiln"
    path.write_bytes(bytes(kiln_np.from_numpy(arr).data))
    lazy = kiln_np.LazyPayload(path, Code.E2M1, arr.shape)
    got, want = describe(lazy).to_dict(), describe(arr).to_dict()
    assert got == want
    assert got["shape"] == [9, 7]
    np.testing.assert_array_equal(bit_histogram(lazy), bit_histogram(arr))
    blocks = tmp_path / "o.kiln"
    blocks.write_bytes(bytes(4))
    opaque = kiln_np.LazyPayload(blocks, 4096, (2,), layout=Layout("pair", 2))
    with pytest.raises(KilnError, match="opaque payload"):
        describe(opaque)


# -- hostile input ----------------------------------------------------------------------


class _Raising:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise self.exc


@pytest.mark.parametrize(
    "exc", [RuntimeError("broken"), ValueError("bad"), KeyError("k"), ZeroDivisionError()]
)
def test_array_raising_is_type(exc: Exception) -> None:
    for call in (describe, bit_histogram):
        with pytest.raises(KilnError, match=f"cannot make one of _Raising: {type(exc).__name__}"):
            call(_Raising(exc))
    with pytest.raises(KilnError) as info:
        describe(_Raising(exc), np.ones(1, E8M0))
    assert info.value.kind == "TYPE"


@pytest.mark.parametrize("first", [10**5000, -(10**5000), 2**63], ids=["huge", "-huge", "2**63"])
def test_first_beyond_any_index_is_a_bounded_shape_error(first: int) -> None:
    with pytest.raises(KilnError, match=r"expected first to be an integer in 0\.\.") as info:
        describe(np.zeros(2, np.uint8), first=first)
    assert info.value.kind == "SHAPE"
    assert len(str(info.value)) < 200


def test_first_at_the_largest_index_takes_everything() -> None:
    d = describe(np.arange(5, dtype=np.int16), first=2**63 - 1)
    assert d.first.tolist() == [0, 1, 2, 3, 4]


# -- block-scaled tensors ------------------------------------------------------------


def _reference(
    values: np.ndarray, scales: np.ndarray, block: int, axis: int
) -> tuple[np.ndarray, int, int, int, tuple[np.ndarray, np.ndarray]]:
    """From the OCP definition: value = element x 2^(scale byte - 127), 0xFF a NaN
    block (e8m0); value = element x scale (f8e4m3).  Returns the dequantized
    values in block order, saturated / zero / NaN block counts, scale exponents."""
    v = np.moveaxis(values, axis, -1)
    s = np.moveaxis(scales, axis, -1)
    n, nb = v.shape[-1], s.shape[-1]
    if values.dtype == np.int8:
        element = np.ldexp(v.astype(np.float64), -6)
        ends = (v == -128) | (v == 127)
    else:
        element = v.astype(np.float64)
        ends = np.abs(element) == float(ml_dtypes.finfo(values.dtype).max)  # type: ignore[no-untyped-call]
    if scales.dtype == E8M0:
        raw = s.view(np.uint8).astype(np.int64)
        scale = np.where(raw == 0xFF, np.nan, np.ldexp(1.0, raw - 127))
        exps = raw[raw != 0xFF] - 127
    else:
        scale = s.astype(np.float64)
        ok = np.isfinite(scale) & (scale != 0)
        exps = np.floor(np.log2(np.abs(scale[ok]))).astype(np.int64)
    with np.errstate(invalid="ignore"):
        deq = element * np.repeat(scale, block, axis=-1)[..., :n]
    pad = [(0, 0)] * (v.ndim - 1) + [(0, nb * block - n)]
    blocks = np.pad(element, pad).reshape(*v.shape[:-1], nb, block)
    sat = np.pad(ends, pad).reshape(blocks.shape).any(axis=-1)
    zero = (blocks == 0).all(axis=-1)
    return (
        deq,
        int(sat.sum()),
        int(zero.sum()),
        int(np.isnan(scale).sum()),
        np.unique(exps, return_counts=True),
    )


def _mx(
    shape: tuple[int, ...], axis: int, block: int, element: Any, scale: Any, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if element == np.int8:
        values = rng.integers(-128, 128, shape).astype(np.int8)
    else:
        codes = rng.integers(0, 16 if element == E2M1 else 256, shape)
        values = codes.astype(np.uint8).view(element)
    lead: tuple[Any, ...] = (0,) * (len(shape) - 1)
    np.moveaxis(values, axis, -1)[(*lead, slice(0, block))] = 0  # an all-zero block
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    if scale == E8M0:
        raw = rng.integers(110, 140, sshape).astype(np.uint8)
        raw.reshape(-1)[-1] = 0xFF  # a NaN block
        scales = raw.view(E8M0)
    else:
        raw = rng.integers(0x20, 0x60, sshape).astype(np.uint8)
        raw.reshape(-1)[-1] = 0x7F  # NaN in f8e4m3
        scales = raw.view(ml_dtypes.float8_e4m3fn)
    return values, scales


CASES = [
    ((8, 64), -1, 32, E2M1, E8M0),
    ((70,), 0, 32, E2M1, E8M0),  # a partial last block
    ((3, 50, 4), 1, 16, ml_dtypes.float8_e4m3fn, E8M0),  # blocks along a middle axis
    ((40, 3), 0, 32, ml_dtypes.float8_e5m2, E8M0),  # along the first axis
    ((6, 48), -1, 32, np.int8, E8M0),  # MXINT8
    ((5, 64), -1, 16, E2M1, ml_dtypes.float8_e4m3fn),  # NVFP4-style
]


@pytest.mark.parametrize(("shape", "axis", "block", "element", "scale"), CASES)
def test_describe_block_scaled_against_the_definition(
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple[int, ...],
    axis: int,
    block: int,
    element: Any,
    scale: Any,
) -> None:
    values, scales = _mx(shape, axis, block, element, scale)
    before = bits(values), bits(scales)
    d = describe(values, scales, block_size=block, axis=axis, first=5)
    assert (bits(values), bits(scales)) == before
    deq, sat, zero, nan, (exps, counts) = _reference(values, scales, block, axis)
    assert (d.block_size, d.axis, d.blocks) == (block, axis % len(shape), scales.size)
    assert (d.saturated, d.zero_blocks, d.nan_blocks) == (sat, zero, nan)
    assert zero > 0
    assert nan == 1
    assert d.scale_exponents() == list(zip(exps.tolist(), counts.tolist(), strict=True))
    assert d.values.shape == values.shape
    assert d.scales.shape == scales.shape
    assert d.dequantized.shape == values.shape
    _check_counts(d.values, values)
    _check_counts(d.scales, scales)
    want = _expected(deq)
    for key in ("nan", "inf", "zero", "min", "max", "absmax"):
        assert getattr(d.dequantized, key) == want[key]
    assert d.dequantized.mean == pytest.approx(want["mean"], rel=1e-9)
    assert d.dequantized.std == pytest.approx(want["std"], rel=1e-9)
    assert bits(d.dequantized.first) == bits(deq.reshape(-1)[:5])
    assert d.dequantized.exponents is not None
    np.testing.assert_array_equal(d.dequantized.exponents, _exponent_fields(deq))
    # chunk by chunk: rows and columns cut small give the same answers
    monkeypatch.setattr(_explore.chunks, "CHUNK", 16)
    small = describe(values, scales, block_size=block, axis=axis, first=5)
    for part in ("values", "scales", "dequantized"):
        a, b = getattr(small, part).to_dict(), getattr(d, part).to_dict()
        for key in ("mean", "std"):
            assert a.pop(key) == pytest.approx(b.pop(key), rel=1e-12)
        assert a == b
    assert small.to_dict()["saturated"] == sat


def _check_counts(d: kiln_np.Description, arr: np.ndarray) -> None:
    assert d.histogram is not None
    np.testing.assert_array_equal(
        d.histogram, np.bincount(arr.reshape(-1).view(np.uint8), minlength=d.histogram.size)
    )
    assert (d.nan, d.zero) == (_expected(arr)["nan"], _expected(arr)["zero"])


def test_block_scaled_payloads_and_lazy_payloads(tmp_path: Path) -> None:
    values, scales = _mx((12, 96), -1, 32, E2M1, E8M0)
    want = describe(values, scales).to_dict()
    pv, ps = kiln_np.from_numpy(values), kiln_np.from_numpy(scales)
    assert describe(pv, ps).to_dict() == want
    vpath, spath = tmp_path / "v.kiln", tmp_path / "s.kiln"
    vpath.write_bytes(bytes(pv.data))
    spath.write_bytes(bytes(ps.data))
    lv = kiln_np.LazyPayload(vpath, Code.E2M1, values.shape)
    ls = kiln_np.LazyPayload(spath, Code.E8M0, scales.shape)
    assert describe(lv, ls).to_dict() == want
    # 1-D and 3-D lazy values, and blocks along the first axis (decoded whole)
    for shape, axis in (((70,), 0), ((2, 3, 64), -1), ((64, 3), 0)):
        v, s = _mx(shape, axis, 32, E2M1, E8M0, seed=1)
        v.tofile(tmp_path / "x")  # not a payload: write the packed one
        (tmp_path / "v3").write_bytes(bytes(kiln_np.from_numpy(v).data))
        (tmp_path / "s3").write_bytes(bytes(kiln_np.from_numpy(s).data))
        lazy_v = kiln_np.LazyPayload(tmp_path / "v3", Code.E2M1, v.shape)
        lazy_s = kiln_np.LazyPayload(tmp_path / "s3", Code.E8M0, s.shape)
        assert describe(lazy_v, lazy_s, axis=axis).to_dict() == describe(v, s, axis=axis).to_dict()


def test_block_scaled_long_rows_in_lazy_payloads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values, scales = _mx((3, 320), -1, 32, E2M1, E8M0, seed=2)
    want = describe(values, scales).to_dict()
    (tmp_path / "v").write_bytes(bytes(kiln_np.from_numpy(values).data))
    (tmp_path / "s").write_bytes(bytes(kiln_np.from_numpy(scales).data))
    monkeypatch.setattr(_explore.chunks, "CHUNK", 64)  # a row is read in column ranges
    got = describe(
        kiln_np.LazyPayload(tmp_path / "v", Code.E2M1, values.shape),
        kiln_np.LazyPayload(tmp_path / "s", Code.E8M0, scales.shape),
    ).to_dict()
    for part in ("values", "scales", "dequantized"):
        for key in ("mean", "std"):
            assert got[part].pop(key) == pytest.approx(want[part].pop(key), rel=1e-12)
    assert got == want


def test_block_scaled_defaults_and_saturation() -> None:
    values = np.zeros(64, E2M1)
    values[[3, 40]] = [-6.0, 4.0]
    d = describe(values, np.array([1.0, 2.0**-3], E8M0))
    assert (d.block_size, d.blocks, d.saturated, d.zero_blocks, d.nan_blocks) == (32, 2, 1, 0, 0)
    assert (d.dequantized.min, d.dequantized.max) == (-6.0, 0.5)
    nv = describe(np.zeros(32, E2M1), np.ones(2, ml_dtypes.float8_e4m3fn))
    assert (nv.block_size, nv.zero_blocks) == (16, 2)
    raw = describe(values, np.array([127, 124], np.uint8))  # raw bytes read as e8m0
    assert raw.to_dict() == d.to_dict()


@needs("matplotlib")
def test_block_scaled_repr_html_json_plot() -> None:
    import matplotlib.pyplot as plt

    values, scales = _mx((8, 64), -1, 32, E2M1, E8M0)
    d = describe(values, scales)
    text = repr(d)
    assert text.startswith("<kiln_np.ScaledDescription of e2m1 (8, 64) with e8m0 scales (8, 2)>")
    for part in ("saturated", "all zero", "NaN scale", "scale exponents", "dequantized:"):
        assert part in text
    assert "<h4>dequantized</h4>" in d._repr_html_()
    record = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert record["blocks"] == 16
    assert record["values"]["histogram"] == d.values.to_dict()["histogram"]
    assert sum(c for _, c in record["scale_exponents"]) == 15  # one NaN scale
    try:
        axes = d.plot(log=True)
        assert len(axes) == 3
        assert len(axes[1].patches) == 16
        assert axes[0].get_xlabel() == "scale exponent (scale = 2^e)"
        with pytest.raises(KilnError, match="expected three axes"):
            d.plot(axes[:2])
    finally:
        plt.close("all")


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (lambda: describe(np.zeros(32, np.float32), np.ones(1, E8M0)), "TYPE", "found code 2"),
        (lambda: describe(np.zeros(32, E2M1), np.ones(1, np.int8)), "TYPE", "e8m0 scales"),
        (lambda: describe(np.zeros(32, E2M1), np.ones(2, E8M0)), "SHAPE", r"shape \(1,\)"),
        (lambda: describe(np.zeros((2, 32), E2M1), np.ones(2, E8M0)), "SHAPE", r"\(2, 1\)"),
        (lambda: describe(np.zeros(32, E2M1), np.ones(1, E8M0), axis=1), "SHAPE", "axis"),
        (lambda: describe(np.zeros(32, E2M1), np.ones(1, E8M0), axis=-2), "SHAPE", "axis"),
        (
            lambda: describe(np.zeros(32, E2M1), np.ones(1, E8M0), block_size=0),
            "SHAPE",
            r"in 1\.\.",
        ),
        (
            lambda: describe(np.zeros(32, E2M1), np.ones(1, E8M0), block_size=2.0),  # type: ignore[call-overload]
            "SHAPE",
            "float",
        ),
        (lambda: describe(np.zeros((), E2M1), np.ones((), E8M0)), "SHAPE", "one dimension"),
        (lambda: describe(np.zeros(4, E2M1), block_size=2), "SHAPE", "no scales"),  # type: ignore[call-overload]
        (lambda: describe(np.zeros(4, E2M1), axis=0), "SHAPE", "axis=int 0 and no scales"),  # type: ignore[call-overload]
    ],
)
def test_block_scaled_errors(call: Any, kind: str, message: str) -> None:
    with pytest.raises(KilnError, match=message) as info:
        call()
    assert info.value.kind == kind


# -- plots -------------------------------------------------------------------------------


@needs("matplotlib")
@pytest.mark.parametrize(
    ("dtype", "bars", "ticks"),
    [(E2M1, 16, 16), (ml_dtypes.float8_e4m3fn, 256, 16), (np.bool_, 2, 2)],
)
def test_plot_draws_the_histogram_with_value_labels(dtype: Any, bars: int, ticks: int) -> None:
    import matplotlib.pyplot as plt

    arr = np.repeat(bit_values(dtype), 2)
    ax = describe(arr).plot(log=True)
    try:
        assert len(ax.patches) == bars
        drawn = ax.containers[0]
        assert isinstance(drawn, matplotlib.container.BarContainer)
        np.testing.assert_array_equal(np.asarray(drawn.datavalues), np.full(bars, 2))
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert len(labels) == ticks
        assert labels[1].split("\n") == [
            str(bit_values(dtype)[bars // ticks]),
            f"0x{bars // ticks:0{1 if bars <= 16 else 2}x}",
        ]
        assert ax.get_yscale() == "log"
    finally:
        plt.close("all")


@needs("matplotlib")
def test_plot_exponents_of_wide_floats() -> None:
    import matplotlib.pyplot as plt

    arr = np.array([0.0, 0.3, 0.3, 3.0, 1e-40, np.nan], np.float32)
    try:
        ax = describe(arr).plot()
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == ["$2^{-2}$", "$2^{-1}$", "$2^{0}$", "$2^{1}$", "0/sub", "inf/nan"]
        heights = [int(p.get_height()) for p in ax.patches]  # type: ignore[attr-defined]
        assert heights == [2, 0, 0, 1, 2, 1]
        assert "binary exponent" in ax.get_xlabel()
        for dtype, low in ((ml_dtypes.bfloat16, -2), (np.float16, -2), (np.float64, -133)):
            ax = describe(arr.astype(dtype)).plot()
            assert ax.get_xticklabels()[0].get_text() == f"$2^{{{low}}}$"
        patterns = describe(arr.astype(ml_dtypes.bfloat16)).plot(what="patterns", log=True)
        assert [t.get_text() for t in patterns.get_xticklabels()][2] == "2\n0x4000"
        ints = describe(np.array([1, -3], np.int16)).plot()
        assert len(ints.get_xticklabels()) == 8
    finally:
        plt.close("all")


def test_plot_refuses_missing_histograms_and_explains_missing_matplotlib(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(KilnError, match="16 bits or fewer"):
        describe(np.zeros(2, np.int32)).plot()
    with pytest.raises(KilnError, match="expected f16, bf16, f32 or f64, found code 9"):
        describe(np.zeros(2, np.uint8)).plot(what="exponents")
    with pytest.raises(KilnError, match="16 bits or fewer"):
        describe(np.zeros(2, np.float32)).plot(what="patterns")
    with pytest.raises(KilnError, match="expected what='patterns' or 'exponents', found str"):
        describe(np.zeros(2, np.float32)).plot(what="values")  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'kiln-np\[plot\]'"):
        describe(np.zeros(2, np.uint8)).plot()


def _inside(fig: Any, artist: Any) -> bool:
    box = artist.get_window_extent(fig.canvas.get_renderer())
    whole = fig.bbox
    return bool(
        whole.x0 <= box.x0 <= box.x1 <= whole.x1 and whole.y0 <= box.y0 <= box.y1 <= whole.y1
    )


@needs("matplotlib")
def test_every_plot_lays_itself_out(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    values, scales = _mx((8, 64), -1, 32, E2M1, E8M0)
    drawn = [
        describe(np.resize(bit_values(E2M1), 64)).plot(),
        describe(np.resize(bit_values(np.int8), 512)).plot(),
        describe(_sample(kiln_np.dtype_info(Code.F32))).plot(),
        describe(_sample(kiln_np.dtype_info(Code.BF16))).plot(what="patterns"),
        *describe(values, scales).plot(),
    ]
    try:
        for i, ax in enumerate(drawn):
            fig = ax.figure
            assert isinstance(fig, Figure)
            assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
            fig.savefig(tmp_path / f"{i}.png")  # saving runs the layout, at the figure's dpi
            for label in (ax.xaxis.label, ax.yaxis.label, ax.title, *ax.get_xticklabels()):
                assert _inside(fig, label), (i, label.get_text())
    finally:
        plt.close("all")


@needs("matplotlib")
def test_plot_on_given_axes_keeps_the_figure_layout() -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    try:
        assert describe(np.zeros(3, E2M1)).plot(ax) is ax
        assert fig.get_layout_engine() is None
    finally:
        plt.close("all")


# -- the package, the docs ----------------------------------------------------------------


def test_public_names() -> None:
    for name in ("describe", "bit_histogram", "bit_values", "Description", "ScaledDescription"):
        assert name in kiln_np.__all__
        assert getattr(kiln_np, name).__module__ == "kiln_np"


@needs("gguf", "matplotlib", "onnx")
def test_explore_doc_leaves_no_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = doctest.testfile(
        str(DOCS / "explore.md"),
        module_relative=False,
        optionflags=doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    assert result.failed == 0
    assert result.attempted > 10
    assert list(tmp_path.iterdir()) == []
