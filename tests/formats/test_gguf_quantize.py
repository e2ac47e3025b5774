"""``kiln_np.gguf.quantize``: what it takes, what it gives, what it refuses.

The bytes themselves are held to ggml's by ``tests/quants/test_ggml_quantize*.py``;
here: the Payload it returns (code, layout, block shape, read back by ``dequantize``
and by the GGUF writer), inputs of every float dtype and memory order, and each
refusal with its error code and message.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError, gguf
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.quantize import ENCODERS, NEEDS_IMATRIX

QUANTIZED = list(ENCODERS)


def _rows(name: str, rows: int = 3, blocks: int = 2, seed: int = 0) -> np.ndarray:
    e = BLOCKS[name].elements
    return np.random.default_rng(seed).standard_normal((rows, blocks * e)).astype(np.float32)


def _bytes(p: kiln_np.Payload) -> np.ndarray:
    return np.frombuffer(p.data, np.uint8)


@pytest.mark.parametrize("name", QUANTIZED)
def test_payload_is_what_a_gguf_reader_gives(name: str, tmp_path: object) -> None:
    block = BLOCKS[name]
    x = _rows(name).reshape(3, 1, -1)
    p = gguf.quantize(x, name)
    assert p.code == 0x4700 + block.type_id
    assert p.layout == kiln_np.Layout(f"ggml.{name.lower()}", block.bytes)
    assert p.shape == (3, 1, 2)
    assert p.byte_length == 6 * block.bytes
    assert p.data.readonly
    assert gguf.dequantize(p).shape == x.shape
    path = tmp_path / "q.gguf"  # type: ignore[operator]
    gguf.save_gguf(path, {"w": p})
    with kiln_np.open_weights(path) as f:
        t = f["w"]
        assert t.shape == x.shape
        assert np.array_equal(np.frombuffer(t.payload().data, np.uint8), _bytes(p))


def test_the_type_by_name_in_any_case_by_id_or_by_row() -> None:
    x = _rows("Q8_0")
    want = _bytes(gguf.quantize(x, "Q8_0"))
    for spelling in ("q8_0", "Q8_0", "q8_0".upper(), 8, np.uint32(8), gguf.TYPES[8]):
        assert np.array_equal(_bytes(gguf.quantize(x, spelling)), want)


@pytest.mark.parametrize("name", NEEDS_IMATRIX)
def test_types_that_need_an_importance_matrix_are_type(name: str) -> None:
    with pytest.raises(KilnError, match="importance matrix") as e:
        gguf.quantize(np.zeros((1, 256), np.float32), name)
    assert e.value.kind == "TYPE"
    assert name in str(e.value)


@pytest.mark.parametrize(
    ("type_", "says"),
    [
        ("Q8_K", "intermediate type"),
        ("Q8_1", "intermediate type"),
        ("F16", "not a quantized type"),
        ("F32", "not a quantized type"),
        ("Q9_9", "found str 'Q9_9'"),
        (4, "found int 4"),
        (True, "found bool True"),
        (None, "found None"),
    ],
)
def test_other_types_are_type(type_: object, says: str) -> None:
    with pytest.raises(KilnError, match=says) as e:
        gguf.quantize(np.zeros((1, 256), np.float32), type_)
    assert e.value.kind == "TYPE"
    assert "Q8_0" in str(e.value)  # the message lists what it can do


@pytest.mark.parametrize("name", QUANTIZED)
def test_rows_not_whole_blocks_are_shape(name: str) -> None:
    e = BLOCKS[name].elements
    for shape in [(2, e + 1), (e // 2,), ()]:
        with pytest.raises(KilnError, match="whole number of") as err:
            gguf.quantize(np.zeros(shape, np.float32), name)
        assert err.value.kind == "SHAPE"
        assert str(shape) in str(err.value)


def test_one_row_and_no_rows() -> None:
    x = _rows("Q8_0", rows=1)[0]
    assert gguf.quantize(x, "q8_0").shape == (2,)
    assert np.array_equal(_bytes(gguf.quantize(x, "q8_0")), _bytes(gguf.quantize(x[None], "q8_0")))
    empty = gguf.quantize(np.zeros((0, 64), np.float32), "q8_0")
    assert (empty.shape, empty.byte_length) == ((0, 2), 0)
    no_columns = gguf.quantize(np.zeros((5, 0), np.float32), "q8_0")
    assert (no_columns.shape, no_columns.byte_length) == ((5, 0), 0)


@pytest.mark.parametrize(
    "dtype", ["int32", "uint8", "bool", "complex64", "float8_e4m3fn", "longdouble"]
)
def test_non_float_inputs_are_type(dtype: str) -> None:
    d = np.dtype(getattr(ml_dtypes, dtype, dtype))
    with pytest.raises(KilnError, match="expected a float array") as e:
        gguf.quantize(np.zeros((1, 32), d), "q8_0")
    assert e.value.kind == "TYPE"


def test_narrow_floats_widen_exactly_and_float64_rounds_to_nearest_even() -> None:
    x = _rows("Q8_0", rows=4, blocks=3)
    for dtype in (np.float16, ml_dtypes.bfloat16):
        narrow = x.astype(dtype)
        want = _bytes(gguf.quantize(narrow.astype(np.float32), "q8_0"))
        assert np.array_equal(_bytes(gguf.quantize(narrow, "q8_0")), want)
    wide = x.astype(np.float64) + 1e-12  # not float32 values: rounded once, to nearest even
    want = _bytes(gguf.quantize(wide.astype(np.float32), "q8_0"))
    assert np.array_equal(_bytes(gguf.quantize(wide, "q8_0")), want)


def test_any_memory_order_and_byte_order() -> None:
    x = _rows("Q8_0", rows=6, blocks=4)
    want = _bytes(gguf.quantize(x, "q8_0"))
    fortran = np.asfortranarray(x)
    strided = np.repeat(x, 2, axis=0)[::2]
    swapped = x.astype(">f4")
    for other in (fortran, strided, swapped, x.tolist()):
        assert np.array_equal(_bytes(gguf.quantize(other, "q8_0")), want)


def test_inputs_are_never_written(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _rows("Q8_0", rows=8, blocks=8)
    before = x.copy()
    x.flags.writeable = False  # a read-only input is fine: nothing is written to it
    gguf.quantize(x, "q8_0")
    assert np.array_equal(x.view(np.uint32), before.view(np.uint32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_infinity_are_type_naming_the_first_index(bad: float) -> None:
    x = _rows("Q8_0", rows=4, blocks=3).reshape(2, 2, 96)
    x[1, 0, 70] = bad
    x[1, 1, 3] = np.nan
    with pytest.raises(KilnError, match=r"expected finite values") as e:
        gguf.quantize(x, "q8_0")
    assert e.value.kind == "TYPE"
    assert f"found {bad} at index (1, 0, 70)" in str(e.value)
    assert e.value.index == 1 * 192 + 70


def test_a_float64_beyond_float32_is_named_so() -> None:
    x = np.zeros((2, 32))
    x[1, 4] = 1e300
    with pytest.raises(
        KilnError, match=r"found 1e\+300 \(beyond float32's range\) at index \(1, 4\)"
    ):
        gguf.quantize(x, "q8_0")


def test_nan_in_a_narrow_input_past_the_first_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_np.gguf import _quantize

    monkeypatch.setattr(_quantize, "_CHUNK_ELEMENTS", 64)
    x = np.zeros((10, 64), np.float16)
    x[7, 9] = np.inf
    with pytest.raises(KilnError, match=r"found inf at index \(7, 9\)"):
        gguf.quantize(x, "q8_0")
    # and chunks give the bytes one call gives
    y = _rows("Q8_0", rows=10, blocks=2).astype(np.float16)
    want = _bytes(gguf.quantize(y.astype(np.float32), "q8_0"))
    assert np.array_equal(_bytes(gguf.quantize(y, "q8_0")), want)
