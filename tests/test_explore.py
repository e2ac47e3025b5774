"""describe, bit_histogram and bit_values on every Kiln code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib
import ml_dtypes
import numpy as np
import pytest
from matplotlib.container import BarContainer

import kiln_np
from kiln_np import DTYPES, Code, KilnError, _explore, bit_histogram, bit_values, describe

matplotlib.use("Agg")

SMALL = [r for r in DTYPES if r.bits <= 8]
WIDE = [r for r in DTYPES if r.bits > 8]


def _ids(rows: list[kiln_np.DType]) -> list[str]:
    return [r.name for r in rows]


# What the exhaustive array of every bit pattern holds, from the type definitions:
# (nan, inf, zero, min, max, mean).
EVERY_PATTERN: dict[str, tuple[int, int, int, float, float, float]] = {
    "f8e4m3": (2, 0, 2, -448.0, 448.0, 0.0),
    "f8e5m2": (6, 2, 2, -57344.0, 57344.0, 0.0),
    "bool": (0, 0, 1, 0, 1, 0.5),
    "i8": (0, 0, 1, -128, 127, -0.5),
    "u8": (0, 0, 1, 0, 255, 127.5),
    "i4": (0, 0, 1, -8, 7, -0.5),
    "u4": (0, 0, 1, 0, 15, 7.5),
    "e2m1": (0, 0, 2, -6.0, 6.0, 0.0),
    "e8m0": (1, 0, 0, 2.0**-127, 2.0**127, float(np.mean(2.0 ** np.arange(-127, 128)))),
}


def test_every_small_code_has_expectations() -> None:
    assert set(EVERY_PATTERN) == {r.name for r in SMALL}


@pytest.mark.parametrize("row", SMALL, ids=_ids(SMALL))
def test_describe_every_bit_pattern(row: kiln_np.DType) -> None:
    values = bit_values(row.dtype)
    before = values.view(np.uint8).copy()
    d = describe(values)
    nan, inf, zero, lo, hi, mean = EVERY_PATTERN[row.name]
    assert (d.code, d.dtype, d.shape, d.count) == (row.code, row.dtype, values.shape, values.size)
    assert d.payload_bytes == kiln_np.byte_length(row.code, values.shape)
    assert (d.nan, d.inf, d.zero) == (nan, inf, zero)
    assert (d.min, d.max) == (lo, hi)
    assert d.mean == pytest.approx(mean, rel=1e-12, abs=1e-12)
    assert d.histogram is not None
    np.testing.assert_array_equal(d.histogram, np.ones(values.size, np.int64))
    np.testing.assert_array_equal(d.first.view(np.uint8), np.arange(min(8, values.size)))
    np.testing.assert_array_equal(values.view(np.uint8), before)  # bits untouched


def _wide_sample(row: kiln_np.DType) -> tuple[np.ndarray, tuple[Any, ...]]:
    """An array of a wide type and its (nan, inf, zero, min, max, mean)."""
    if row.dtype.kind in "iu" or row.name.startswith(("i", "u")):
        info = np.iinfo(row.dtype)
        arr = np.array([info.max, 0, info.min, 1, 0], dtype=row.dtype)
        mean = (float(info.max) + float(info.min) + 1) / 5
        return arr, (0, 0, 3 if info.min == 0 else 2, int(info.min), int(info.max), mean)
    arr = np.array([1.5, -0.0, np.nan, np.inf, -np.inf, -2.0, 0.0, 0.5]).astype(row.dtype)
    return arr, (1, 2, 2, -2.0, 1.5, 0.0)


@pytest.mark.parametrize("row", WIDE, ids=_ids(WIDE))
def test_describe_wide_types(row: kiln_np.DType) -> None:
    arr, (nan, inf, zero, lo, hi, mean) = _wide_sample(row)
    arr.flags.writeable = False  # describe only reads
    d = describe(arr)
    assert (d.nan, d.inf, d.zero, d.min, d.max) == (nan, inf, zero, lo, hi)
    assert type(d.min) is type(lo)  # ints stay exact Python ints (u64 max, i64 min)
    assert d.mean == pytest.approx(mean)
    assert d.histogram is None
    assert d.payload_bytes == arr.nbytes
    np.testing.assert_array_equal(d.first.view(np.uint8), arr.view(np.uint8))


@pytest.mark.parametrize("row", list(DTYPES), ids=_ids(list(DTYPES)))
def test_describe_empty_and_scalar(row: kiln_np.DType) -> None:
    empty = describe(np.empty((0, 3), row.dtype))
    assert (empty.count, empty.min, empty.max, empty.mean, empty.first.size) == (
        0,
        None,
        None,
        None,
        0,
    )
    assert "- / -" in repr(empty)
    scalar = describe(np.ones((), row.dtype))
    assert (scalar.shape, scalar.count, scalar.first.size) == ((), 1, 1)
    assert scalar.min == scalar.max == 1
    assert "() (scalar)" in repr(scalar)


@pytest.mark.parametrize("row", list(DTYPES), ids=_ids(list(DTYPES)))
def test_describe_repr_html_and_json(row: kiln_np.DType) -> None:
    arr = np.tile(bit_values(row.dtype), 2) if row.bits <= 8 else _wide_sample(row)[0]
    d = describe(arr, first=3)
    text = repr(d)
    assert text.startswith(f"<kiln_np.Description of {row.name} ")
    assert str(row.dtype) in text
    assert "nan / inf / zero" in text
    page = d._repr_html_()
    assert page.startswith("<table>")
    assert f"<td style='text-align:left'>{row.dtype}</td>" in page
    record = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert record["code"] == row.code
    assert record["name"] == row.name
    assert len(record["first"]) == len(record["first_bits"]) == 3
    width = max(row.dtype.itemsize, 1)
    raw = arr[:3].view(np.uint8).reshape(3, width)[:, ::-1]  # little-endian -> value order
    assert record["first_bits"] == ["0x" + bytes(b).hex() for b in raw]
    assert (record["histogram"] is None) == (row.bits > 8)


def test_describe_nonfinite_json_and_repr_escaping() -> None:
    d = describe(np.array([np.nan, np.inf, -np.inf], np.float32))
    record = d.to_dict()
    assert record["first"] == ["nan", "inf", "-inf"]
    assert (record["min"], record["max"], record["mean"]) == (None, None, None)
    json.dumps(record, allow_nan=False)


def test_describe_chunks_in_c_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_explore, "CHUNK", 7)
    base = np.arange(-50, 50, dtype=np.int8).reshape(10, 10)
    view = base.T[::2]  # not contiguous: chunks are small C-order copies
    d = describe(view, first=12)
    np.testing.assert_array_equal(d.first.view(np.uint8), view.reshape(-1)[:12].view(np.uint8))
    assert (d.min, d.max, d.count) == (int(view.min()), int(view.max()), view.size)
    assert d.mean == pytest.approx(float(view.mean()))
    assert d.histogram is not None
    np.testing.assert_array_equal(
        d.histogram, np.bincount(view.reshape(-1).view(np.uint8), minlength=256)
    )


@pytest.mark.parametrize("row", SMALL, ids=_ids(SMALL))
def test_bit_histogram_counts_every_pattern(row: kiln_np.DType) -> None:
    values = bit_values(row.dtype)
    weights = (np.arange(values.size) * 7 + 3) % 5  # 0 for some patterns
    arr = np.repeat(values, weights)
    rng = np.random.default_rng(0)
    arr = arr[rng.permutation(arr.size)]
    counts = bit_histogram(arr)
    assert counts.dtype == np.int64
    assert counts.size == {4: 16, 8: 256}[row.bits] if row.code != Code.BOOL else counts.size == 2
    np.testing.assert_array_equal(counts, weights)


@pytest.mark.parametrize("row", WIDE, ids=_ids(WIDE))
def test_bit_histogram_refuses_wide_types(row: kiln_np.DType) -> None:
    with pytest.raises(KilnError, match=rf"8 bits or fewer, found code {int(row.code)} ") as info:
        bit_histogram(np.zeros(3, row.dtype))
    assert info.value.kind == "TYPE"
    with pytest.raises(KilnError, match="8 bits or fewer"):
        bit_values(row.dtype)


def test_bit_histogram_refuses_non_kiln_dtypes() -> None:
    for bad in (np.zeros(2, np.complex64), np.zeros(2, ml_dtypes.float8_e4m3fnuz)):
        with pytest.raises(KilnError, match="has no Kiln code") as info:
            bit_histogram(bad)
        assert info.value.kind == "TYPE"


@pytest.mark.parametrize(
    ("dtype", "storage", "limit"),
    [
        (ml_dtypes.int4, 0x1F, "0x0f"),
        (ml_dtypes.float4_e2m1fn, 0x10, "0x0f"),
        (np.bool_, 2, "0x01"),
    ],
)
def test_bit_histogram_refuses_bytes_outside_the_type(
    monkeypatch: pytest.MonkeyPatch, dtype: Any, storage: int, limit: str
) -> None:
    monkeypatch.setattr(_explore, "CHUNK", 4)  # the bad byte sits in the third chunk
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
    assert float(bit_values(ml_dtypes.float8_e8m0fnu)[0x7F]) == 1.0
    assert float(bit_values(ml_dtypes.float4_e2m1fn)[0xF]) == -6.0
    assert int(bit_values(ml_dtypes.int4)[0x8]) == -8
    assert int(bit_values(np.int8)[0x80]) == -128
    assert bit_values(np.bool_).tolist() == [False, True]
    for row in SMALL:
        values = bit_values(row.dtype)
        assert values.dtype == row.dtype
        np.testing.assert_array_equal(values.view(np.uint8), np.arange(values.size))


def test_histogram_rows_orders() -> None:
    d = describe(np.array([2, 2, 1, 7, 7, 7], ml_dtypes.uint4))
    assert d.histogram_rows() == [
        ("0x7", "7", 3, "50.0%"),
        ("0x2", "2", 2, "33.3%"),
        ("0x1", "1", 1, "16.7%"),
    ]
    assert [r[0] for r in d.histogram_rows(order="pattern")] == ["0x1", "0x2", "0x7"]
    assert d.histogram_rows(1) == [("0x7", "7", 3, "50.0%")]
    assert describe(np.zeros(2, np.float32)).histogram_rows() == []


@pytest.mark.parametrize(
    ("dtype", "bars", "ticks"),
    [(ml_dtypes.float4_e2m1fn, 16, 16), (ml_dtypes.float8_e4m3fn, 256, 16), (np.bool_, 2, 2)],
)
def test_plot_draws_the_histogram_with_value_labels(dtype: Any, bars: int, ticks: int) -> None:
    import matplotlib.pyplot as plt

    arr = np.repeat(bit_values(dtype), 2)
    ax = describe(arr).plot(log=True)
    try:
        assert len(ax.patches) == bars
        drawn = ax.containers[0]
        assert isinstance(drawn, BarContainer)
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


def test_plot_refuses_wide_types_and_explains_missing_matplotlib(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(KilnError, match="8 bits or fewer"):
        describe(np.zeros(2, np.float32)).plot()
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'kiln-np\[plot\]'"):
        describe(np.zeros(2, np.uint8)).plot()


def test_public_names() -> None:
    for name in ("describe", "bit_histogram", "bit_values", "Description"):
        assert name in kiln_np.__all__
        assert getattr(kiln_np, name).__module__ == "kiln_np._explore"


def test_describe_big_endian_input_reports_values_and_bits() -> None:
    arr = np.array([1.0, -2.0, np.nan, 0.0], ">f4")
    d = describe(arr)
    assert d.dtype == np.dtype("<f4")
    assert (d.nan, d.zero, d.min, d.max) == (1, 1, -2.0, 1.0)
    assert d.to_dict()["first_bits"][:2] == ["0x3f800000", "0xc0000000"]
    np.testing.assert_array_equal(d.first.view(np.uint8), arr.astype("<f4").view(np.uint8))
    ints = describe(np.array([0x0102, 7], ">u2"))
    assert (ints.min, ints.max, ints.to_dict()["first_bits"]) == (7, 0x0102, ["0x0102", "0x0007"])


def test_describe_a_lazy_payload_chunk_by_chunk(tmp_path: Path) -> None:
    arr = np.resize(bit_values(ml_dtypes.float4_e2m1fn), (9, 7))  # odd count: padding nibble
    path = tmp_path / "w.kiln"
    path.write_bytes(bytes(kiln_np.from_numpy(arr).data))
    lazy = kiln_np.open_payload(path, Code.E2M1, arr.shape)
    assert isinstance(lazy, kiln_np.LazyPayload)
    got, want = describe(lazy).to_dict(), describe(arr).to_dict()
    assert got == want
    assert got["shape"] == [9, 7]
