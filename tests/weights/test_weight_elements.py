"""Weight tensors speak in elements: shapes, sizes and numbers, blocks on the payload.

GGUF files written by gguf-py's ``GGUFWriter`` (the oracle): a decodable GGML
tensor's ``shape`` is gguf-py's logical shape, ``np.asarray`` its values bit for
bit as ``gguf.quants.dequantize`` gives them, the blocks stay on the payload.
FNUZ float8 and complex tensors (safetensors, ONNX) are zero-copy views of
their type.  Every other opaque code keeps its block shape and bytes.
"""

from __future__ import annotations

import doctest
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, gguf_py_file, needs, optional, run_command

import kiln_np
from kiln_np import Layout, Payload
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import DECODERS

if TYPE_CHECKING:
    import gguf
    import onnx
    from onnx import helper, numpy_helper
else:
    gguf = optional("gguf")
    onnx = optional("onnx")
    helper = optional("onnx.helper")
    numpy_helper = optional("onnx.numpy_helper")

DECODED = sorted(DECODERS)
FNUZ = [ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz]


def _f32_bits(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr, np.float32).view(np.uint32)


def _random_blocks(name: str, rows: int, blocks: int, seed: int) -> np.ndarray:
    """gguf-py's byte shape of a quantized tensor, ``(rows, blocks * block bytes)``:
    random bytes whose f16 fields are finite (every byte pair read as f16 below
    2**15 in magnitude), so both decoders give numbers."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, blocks * BLOCKS[name].bytes), dtype=np.uint8)
    raw[:, 1::2] &= 0x77  # any f16 at any even offset: exponent <= 29, finite
    return raw


@pytest.fixture
def q8_file(tmp_path: Path) -> Path:
    """Q8_0 quantized by gguf-py from normal floats, beside plain f32 and f16."""
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    rng = np.random.default_rng(7)
    floats = rng.standard_normal((64, 96)).astype(np.float32)
    floats[3] = 0.0  # all-zero blocks: d = 0
    tensors = {
        "blk.0.attn_q.weight": (gguf.quants.quantize(floats, q8_0), q8_0),
        "blk.0.vector": (gguf.quants.quantize(floats[0], q8_0), q8_0),
        "f32": (floats[:2], None),
        "f16": (floats[:3].astype(np.float16), None),
    }
    return gguf_py_file(tmp_path / "q8.gguf", tensors)


def test_q8_0_elements_are_gguf_py_values(q8_file: Path) -> None:
    reader = gguf.GGUFReader(q8_file)
    with kiln_np.open_weights(q8_file) as weights:
        for theirs in reader.tensors:
            t = weights[theirs.name]
            quantized = theirs.tensor_type == gguf.GGMLQuantizationType.Q8_0
            values = gguf.quants.dequantize(theirs.data, theirs.tensor_type)
            assert t.shape == values.shape == tuple(int(d) for d in theirs.shape[::-1])
            assert t.size == int(theirs.n_elements) == values.size
            got = np.asarray(t)
            assert got.dtype == (np.float32 if quantized else theirs.data.dtype)
            assert bits(got) == bits(values if quantized else theirs.data)
            assert bits(t.numpy()) == bits(got)
            if quantized:
                blocks = (*values.shape[:-1], values.shape[-1] // 32)
                assert t.payload().shape == t.info.shape == blocks
                assert bytes(t.payload().data) == theirs.data.tobytes()
                assert got.flags.writeable  # a new array, never the map
            else:
                assert t.payload().shape == t.info.shape == t.shape


def _gguf_py_knows(name: str) -> bool:
    """Whether gguf-py writes and dequantizes GGML type ``name`` as ggml defines it
    (its table has Q8_1 at 40 bytes, ggml's block is 36; it lacks some types)."""
    kind = getattr(gguf.GGMLQuantizationType, name, None)
    block = BLOCKS[name]
    return (
        kind is not None
        and gguf.GGML_QUANT_SIZES[kind] == (block.elements, block.bytes)
        and hasattr(gguf.quants, name)
    )


@pytest.mark.parametrize("name", DECODED)
def test_every_decoder_gives_gguf_py_values_through_a_tensor(tmp_path: Path, name: str) -> None:
    block = BLOCKS[name]
    raw = _random_blocks(name, 3, 2, seed=len(name))
    path = tmp_path / "r.gguf"
    if _gguf_py_knows(name):
        gguf_py_file(path, {"w": (raw, gguf.GGMLQuantizationType[name])})
        theirs = gguf.GGUFReader(path).tensors[0]
        expected = gguf.quants.dequantize(theirs.data, theirs.tensor_type)
    else:  # written by kiln_np; ggml's own bits are tests/quants/test_ggml.py's
        layout = Layout(block.layout_name, block.bytes)
        payload = Payload(block.code, memoryview(raw.tobytes()), (3, 2), layout)
        kiln_np.save_weights(path, {"w": payload}, format="gguf")
        expected = kiln_np.gguf.dequantize(payload)
    with kiln_np.open_weights(path) as weights:
        t = weights["w"]
        assert t.shape == expected.shape == (3, 2 * block.elements)
        assert t.size == 6 * block.elements
        assert t.info.shape == t.payload().shape == (3, 2)
        got = np.asarray(t)
        assert np.array_equal(np.isnan(got), np.isnan(expected))
        finite = ~np.isnan(got)
        assert np.array_equal(_f32_bits(got)[finite], _f32_bits(expected)[finite])
        assert bits(got) == bits(kiln_np.gguf.dequantize(t))


def test_parameter_count_is_in_elements(q8_file: Path) -> None:
    reader = gguf.GGUFReader(q8_file)
    with kiln_np.open_weights(q8_file) as weights:
        assert sum(t.size for t in weights.values()) == sum(
            int(t.n_elements) for t in reader.tensors
        )
        q = weights["blk.0.attn_q.weight"]
        assert (q.shape, q.size, q.info.shape) == ((64, 96), 6144, (64, 3))


def test_array_protocol_of_a_quantized_tensor(q8_file: Path) -> None:
    with kiln_np.open_weights(q8_file) as weights:
        t = weights["blk.0.attn_q.weight"]
        f32 = np.asarray(t)
        for dtype in (np.float16, np.float64, ml_dtypes.bfloat16, np.int32):
            got = np.asarray(t, dtype=dtype)
            assert got.dtype == dtype
            assert got.shape == t.shape
            assert bits(got) == bits(f32.astype(dtype))
        with pytest.raises(ValueError, match="dequantize into a new array: copy=False"):
            np.asarray(t, copy=False)
        with pytest.raises(ValueError, match="copy=False is impossible"):
            t.__array__(np.float16, copy=False)
        copied = np.array(t, copy=True)
        assert bits(copied) == bits(f32)
        assert copied.flags.writeable


def test_array_protocol_of_a_plain_tensor(q8_file: Path) -> None:
    with kiln_np.open_weights(q8_file) as weights:
        t = weights["f32"]
        view = np.asarray(t, copy=False)
        assert not view.flags.writeable  # the map itself
        assert np.asarray(t, np.float32, copy=False).base is not None
        with pytest.raises(ValueError, match="float32 elements as float64: a new array"):
            np.asarray(t, np.float64, copy=False)
        assert np.array(t, copy=True).flags.writeable


def test_repr_shows_elements_and_blocks(q8_file: Path) -> None:
    with kiln_np.open_weights(q8_file) as weights:
        assert repr(weights["blk.0.attn_q.weight"]) == (
            "WeightTensor('blk.0.attn_q.weight', opaque code 18184 (0x4708), shape (64, 96), "
            "blocks (64, 3), 6528 bytes, Q8_0)"
        )
        assert (
            repr(weights["f32"])
            == "WeightTensor('f32', code 2 (f32), shape (2, 96), 768 bytes, F32)"
        )


def test_kiln_directory_keeps_a_quantized_tensor_in_elements(q8_file: Path, tmp_path: Path) -> None:
    with kiln_np.open_weights(q8_file) as weights:
        kiln_np.save_weights(tmp_path / "k", weights, format="kiln")
        expected = {name: bits(np.asarray(t)) for name, t in weights.items()}
    with kiln_np.open_weights(tmp_path / "k") as copied:
        t = copied["blk.0.attn_q.weight"]
        assert (t.shape, t.info.shape) == ((64, 96), (64, 3))
        assert {name: bits(np.asarray(c)) for name, c in copied.items()} == expected


@pytest.mark.parametrize("dtype", FNUZ, ids=lambda d: np.dtype(d).name)
def test_fnuz_from_safetensors_is_a_view_of_its_type(tmp_path: Path, dtype: type) -> None:
    arr: np.ndarray = np.arange(256, dtype=np.uint8).view(dtype).reshape(16, 16)
    kiln_np.save_weights(tmp_path / "f.safetensors", {"w": arr}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "f.safetensors") as weights:
        t = weights["w"]
        assert t.shape == t.info.shape == (16, 16)
        assert t.size == 256
        got = np.asarray(t)
        assert got.dtype == np.dtype(dtype)
        assert got.shape == (16, 16)
        assert bits(got) == bits(arr)
        assert not got.flags.writeable  # zero-copy: the map
        assert np.asarray(t, copy=False).dtype == np.dtype(dtype)
        assert bits(np.asarray(t, np.float32)) == bits(arr.astype(np.float32))
        assert bytes(t.payload().data) == arr.tobytes()


def test_complex_from_safetensors_is_a_view(tmp_path: Path) -> None:
    arr = (np.arange(6) + 1j * np.arange(6)[::-1]).astype(np.complex64).reshape(2, 3)
    kiln_np.save_weights(tmp_path / "c.safetensors", {"c": arr}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "c.safetensors") as weights:
        t = weights["c"]
        assert t.shape == (2, 3)
        assert t.size == 6
        got = t.numpy()
        assert got.dtype == np.complex64
        assert bits(got) == bits(arr)
        assert not got.flags.writeable


def test_fnuz_from_onnx(tmp_path: Path) -> None:
    arr = np.array([[0.5, -2.0, 240.0], [0.0, 1.0, -0.25]], ml_dtypes.float8_e4m3fnuz)
    raw = helper.make_tensor(
        "w", onnx.TensorProto.FLOAT8E4M3FNUZ, arr.shape, arr.view(np.uint8).tobytes(), raw=True
    )
    graph = helper.make_graph([], "g", [], [], initializer=[raw])
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    with kiln_np.open_weights(tmp_path / "m.onnx") as weights:
        t = weights["w"]
        assert t.shape == (2, 3)
        got = np.asarray(t)
        assert got.dtype == ml_dtypes.float8_e4m3fnuz
        assert bits(got) == bits(arr)
        assert (
            got.astype(np.float32).tolist()
            == numpy_helper.to_array(raw).astype(np.float32).tolist()
        )


def test_other_opaque_codes_keep_blocks(tmp_path: Path) -> None:
    p = Payload(4096, memoryview(bytes(range(12))), (2, 3), Layout("pair", 2))
    kiln_np.save_weights(tmp_path / "k", {"p": p}, format="kiln")
    with kiln_np.open_weights(tmp_path / "k") as weights:
        t = weights["p"]
        assert t.shape == t.info.shape == (2, 3)
        assert t.size == 6
        got = np.asarray(t, copy=False)
        assert got.dtype == np.uint8
        assert got.shape == (2, 3, 2)
        assert got.tobytes() == bytes(range(12))
        assert "blocks" not in repr(t)


def test_ls_lists_element_shapes(q8_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command("ls", str(q8_file), "--bytes") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["blk.0.attn_q.weight", "Q8_0", "ggml.q8_0", "64x96", "6528"]
    assert lines[2].split() == ["blk.0.vector", "Q8_0", "ggml.q8_0", "96", "102"]
    assert run_command("ls", str(q8_file), "--json") == 0
    listed = json.loads(capsys.readouterr().out)["tensors"]
    assert [(t["shape"], t["block_shape"]) for t in listed] == [
        ([64, 96], [64, 3]),
        ([96], [3]),
        ([2, 96], None),
        ([3, 96], None),
    ]


@needs("safetensors")
def test_weights_doc_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/weights.md walks through a Q8_0 tensor's numbers and blocks.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    doc = Path(__file__).resolve().parents[2] / "docs" / "weights.md"
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testfile(str(doc), module_relative=False, optionflags=flags)
    assert (result.failed, result.attempted > 40) == (0, True)
    assert list(tmp_path.iterdir()) == []
