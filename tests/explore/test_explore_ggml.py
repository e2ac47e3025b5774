"""describe, bit_histogram and the plots of GGML quantized and FNUZ tensors.

A quantized tensor is described as its exact float32 values plus its blocks'
scale fields, a bounded run of blocks at a time: every statistic equals
``describe`` of the whole dequantized array (gguf-py's values for a file it
wrote) and of the whole scale arrays (``DECODERS[name].scales``); the memory
stays below the float32 tensor.  FNUZ float8 tensors are described as their
float type, counted pattern by pattern.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import available, bits, gguf_py_file, needs, optional

import kiln_np
from kiln_np import KilnError, Layout, Payload, QuantizedDescription, bit_histogram, describe
from kiln_np._explore import chunks
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import DECODERS

if TYPE_CHECKING:
    import gguf
    import matplotlib
else:
    gguf = optional("gguf")
    matplotlib = optional("matplotlib")

if available("matplotlib"):
    matplotlib.use("Agg")

DECODED = sorted(DECODERS)
FNUZ = [ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz]


def _payload(name: str, block_shape: tuple[int, ...], seed: int) -> Payload:
    """Random blocks of GGML type ``name`` (every scale value possible: zero,
    subnormal, infinite and NaN f16 fields included)."""
    block = BLOCKS[name]
    count = math.prod(block_shape)
    raw = np.random.default_rng(seed).integers(0, 256, count * block.bytes, dtype=np.uint8)
    return Payload(
        block.code, memoryview(raw.tobytes()), block_shape, Layout(block.layout_name, block.bytes)
    )


def _q8_0_file(path: Path) -> Path:
    rng = np.random.default_rng(3)
    floats = rng.standard_normal((8, 128)).astype(np.float32) * np.float32(0.02)
    floats[5] = 0.0
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    return gguf_py_file(path, {"w": (gguf.quants.quantize(floats, q8_0), q8_0)})


def _quantized(x: Payload | kiln_np.WeightTensor, first: int = 8) -> QuantizedDescription:
    d = describe(x, first=first)
    assert isinstance(d, QuantizedDescription)
    return d


def _same(ours: dict[str, Any], whole: dict[str, Any]) -> None:
    """Descriptions equal, mean and std to rounding (chunks merge in another order)."""
    for key in ("mean", "std"):
        a, b = ours.pop(key), whole.pop(key)
        assert a == b or a == pytest.approx(b, rel=1e-12, abs=1e-300), key
    assert ours == whole


def test_q8_0_from_gguf_py_describes_its_values_and_d(tmp_path: Path) -> None:
    path = _q8_0_file(tmp_path / "q.gguf")
    theirs = gguf.GGUFReader(path).tensors[0]
    values = gguf.quants.dequantize(theirs.data, gguf.GGMLQuantizationType.Q8_0)
    d_field = theirs.data.reshape(8, 4, 34)[..., :2].copy().view(np.float16)[..., 0]
    with kiln_np.open_weights(path) as weights:
        t = weights["w"]
        d = _quantized(t)
    assert (d.type, d.shape, d.block_shape, d.blocks, d.block_elements) == (
        "Q8_0",
        (8, 128),
        (8, 4),
        32,
        32,
    )
    assert d.byte_length == 32 * 34
    assert d.values.to_dict() == describe(values).to_dict()
    assert d.scales["d"].to_dict() == describe(d_field.astype(np.float32)).to_dict()
    assert list(d.scales) == ["d"]
    assert d.zero_blocks == 4  # row 5: d = 0, q = 0
    assert d.nan_blocks == 0
    expected_exponents = np.bincount(
        (values.view(np.uint32).reshape(-1) >> 23) & 0xFF, minlength=256
    )
    assert d.values.exponents is not None
    assert d.values.exponents.tolist() == expected_exponents.tolist()
    assert bits(d.values.first) == bits(values.reshape(-1)[:8])


@pytest.mark.parametrize("name", DECODED)
def test_every_type_describes_as_its_whole_values_and_scales(name: str) -> None:
    p = _payload(name, (3, 5), seed=len(name))
    values = kiln_np.gguf.dequantize(p)
    rows = np.frombuffer(p.data, np.uint8).reshape(15, BLOCKS[name].bytes)
    d = _quantized(p, first=5)
    assert d.shape == values.shape
    assert d.values.to_dict() == describe(values, first=5).to_dict()
    scales = DECODERS[name].scales(rows)
    assert list(d.scales) == list(scales)
    for field, arr in scales.items():
        whole = np.asarray(arr).reshape(3, 5, *np.shape(arr)[1:])
        assert d.scales[field].to_dict() == describe(whole, first=5).to_dict(), field
    per_block = values.reshape(15, -1)
    assert d.zero_blocks == int(np.count_nonzero((per_block == 0).all(axis=1)))
    assert d.nan_blocks == int(np.count_nonzero(np.isnan(per_block).any(axis=1)))


@pytest.mark.parametrize("name", DECODED)
def test_runs_of_blocks_give_the_whole_tensors_description(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _payload(name, (4, 7), seed=1)
    whole = _quantized(p).to_dict()
    monkeypatch.setattr(chunks, "COUNT_CHUNK", 2 * BLOCKS[name].elements + 1)  # 2 blocks a run
    monkeypatch.setattr(chunks, "CHUNK", 40)
    ours = _quantized(p).to_dict()
    for field in list(whole["scales"]):
        _same(ours["scales"].pop(field), whole["scales"].pop(field))
    _same(ours.pop("values"), whole.pop("values"))
    assert ours == whole


def test_describe_never_holds_the_whole_float32_tensor() -> None:
    blocks = 1 << 17  # 4 Mi elements: 16 MiB of float32
    raw = np.zeros((blocks, 34), np.uint8)
    raw[:, 1] = 0x3C  # d = 1.0
    raw[:, 2:] = np.arange(32, dtype=np.uint8)
    p = Payload(0x4708, raw.reshape(-1).data, (blocks,), Layout("ggml.q8_0", 34))
    tracemalloc.start()
    try:
        d = _quantized(p)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        whole = kiln_np.gguf.dequantize(p)
        _, whole_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert whole_peak >= whole.nbytes  # the measurement sees numpy's arrays
    assert peak < whole.nbytes // 2  # runs of 2 MiB and their masks
    assert d.values.max == 31.0
    assert d.values.count == 4 << 20


def test_text_html_and_dict() -> None:
    block = bytes([0x00, 0x38]) + bytes([2, 0xFE] * 16)  # d = 0.5; q = 2, -2, ...
    zero = bytes(34)
    p = Payload(0x4708, memoryview(block + zero), (1, 2), Layout("ggml.q8_0", 34))
    d = _quantized(p, first=4)
    assert repr(d).splitlines()[:8] == [
        "<kiln_np.QuantizedDescription of Q8_0 (1, 64) in (1, 2) blocks>",
        "  type              Q8_0: opaque code 18184 (0x4708), layout ggml.q8_0",
        "  shape             1x64 (64 elements), in 1x2 blocks of 32",
        "  payload           68 bytes (8.5 bits per element)",
        "  all zero          1 blocks (50.0%)",
        "  NaN               0 blocks (0.0%) hold a NaN",
        "  scale fields      d",
        "  values:",
    ]
    text = repr(d)
    assert "    mean / std        0.0 / 0.7071067811865476" in text
    assert "  scale d:\n    code              code 2 (f32)" in text
    assert "    min / max         0.0 / 0.5" in text
    html = d._repr_html_()
    assert html.count("<table>") == 1 + 2 * 2  # the summary; each part's rows and exponents
    assert "<h4>values</h4>" in html
    assert "<h4>scale d</h4>" in html
    got = d.to_dict()
    assert list(got) == [
        "type",
        "code",
        "layout",
        "shape",
        "block_shape",
        "block_elements",
        "blocks",
        "byte_length",
        "zero_blocks",
        "nan_blocks",
        "values",
        "scales",
    ]
    assert got["layout"] == {"name": "ggml.q8_0", "block_size": 34}
    assert got["values"]["first"] == [1.0, -1.0, 1.0, -1.0]
    assert got["values"]["zero"] == 32
    assert got["scales"]["d"]["first"] == [0.5, 0.0]


def test_nan_scales_make_nan_blocks() -> None:
    nan = bytes([0x00, 0x7E]) + bytes([1] * 32)  # d = NaN
    inf = bytes([0x00, 0x7C]) + bytes([0] * 32)  # d = inf, q = 0: inf * 0 is NaN
    d = _quantized(Payload(0x4708, memoryview(nan + inf), (2,), Layout("ggml.q8_0", 34)))
    assert d.nan_blocks == 2
    assert d.values.nan == 64
    assert (d.scales["d"].nan, d.scales["d"].inf) == (1, 1)


@needs("matplotlib")
def test_plots() -> None:
    block = bytes([0x00, 0x38]) + bytes([2, 0xFE] * 16)
    d = _quantized(Payload(0x4708, memoryview(block * 3), (3,), Layout("ggml.q8_0", 34)))
    axes = d.plot(log=True)
    assert [ax.get_title() for ax in axes] == [
        "Q8_0 values: 96 elements",
        "scale d: f32, shape (3,)",
    ]
    assert axes[0].get_xlabel().startswith("binary exponent")
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["$2^{0}$"]
    with pytest.raises(KilnError, match="expected 2 axes to draw on") as info:
        d.plot(axes[:1])
    assert info.value.kind == "SHAPE"


def test_bit_histogram_of_a_quantized_tensor_says_values_are_float32() -> None:
    p = Payload(0x4708, memoryview(bytes(34)), (1,), Layout("ggml.q8_0", 34))
    with pytest.raises(KilnError, match=r"GGML Q8_0 values are float32: bit patterns") as info:
        bit_histogram(p)
    assert info.value.kind == "TYPE"


def test_an_opaque_tensor_with_no_reading_is_refused(tmp_path: Path) -> None:
    p = Payload(4096, memoryview(bytes(4)), (2,), Layout("pair", 2))
    kiln_np.save_weights(tmp_path / "k", {"p": p}, format="kiln")
    with kiln_np.open_weights(tmp_path / "k") as weights:
        for look in (describe, bit_histogram):
            with pytest.raises(KilnError, match="opaque payload, whose blocks have no element"):
                look(weights["p"])


@needs("matplotlib")
@pytest.mark.parametrize("dtype", FNUZ, ids=lambda d: np.dtype(d).name)
def test_fnuz_tensor_describes_as_its_float_type(tmp_path: Path, dtype: type) -> None:
    storage = np.random.default_rng(0).integers(0, 256, (32, 16), dtype=np.uint8)
    storage[0, :3] = 0x80  # NaN
    arr: np.ndarray = storage.view(dtype)
    kiln_np.save_weights(tmp_path / "f.safetensors", {"w": arr}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "f.safetensors") as weights:
        t = weights["w"]
        d = describe(t)
        assert isinstance(d, kiln_np.Description)
        histogram = bit_histogram(t)
        from_payload = describe(t.payload()).to_dict()
    name = np.dtype(dtype).name
    assert repr(d).splitlines()[0] == f"<kiln_np.Description of {name} (32, 16)>"
    assert (d.name, d.code, d.dtype) == (name, t.code, np.dtype(dtype))
    assert d.to_dict() == describe(arr).to_dict() == from_payload
    counts = np.bincount(storage.reshape(-1), minlength=256)
    assert histogram.tolist() == counts.tolist()
    assert d.histogram is not None
    assert d.histogram.tolist() == counts.tolist()
    wide = arr.astype(np.float64)
    finite = wide[np.isfinite(wide)]
    assert d.nan == int(np.isnan(wide).sum()) >= 3
    assert (d.min, d.max) == (finite.min(), finite.max())
    assert d.mean == pytest.approx(finite.mean(), rel=1e-12)
    tiny = ml_dtypes.finfo(dtype).smallest_normal  # type: ignore[no-untyped-call]
    assert d.subnormal == int(np.count_nonzero((np.abs(finite) < tiny) & (finite != 0)))
    assert kiln_np.bit_values(dtype).view(np.uint8).tolist() == list(range(256))
    assert len(d.plot(what="patterns").patches) == 256


def test_quantized_description_is_public() -> None:
    assert "QuantizedDescription" in kiln_np.__all__
    assert QuantizedDescription.__module__ == "kiln_np"
