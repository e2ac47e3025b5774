"""``kiln-np ls``: human-readable sizes, ``--bytes``, and the totals (tensors,
parameters, payload bytes) in text and JSON, for every format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _helpers import gguf_py_file, optional, run_main

import kiln_np
from kiln_np.cli.output import human_bytes, human_count

if TYPE_CHECKING:
    import gguf
    import onnx
    from onnx import numpy_helper
else:
    gguf = optional("gguf")
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (10 * 2**20 - 1, "10.0 MiB"),
        (999 * 2**20, "999 MiB"),
        (1000 * 2**20, "0.98 GiB"),
        (16060522496, "15.0 GiB"),
        (3 * 2**40, "3.00 TiB"),
    ],
)
def test_human_bytes(n: int, text: str) -> None:
    assert human_bytes(n) == text


def test_human_count() -> None:
    assert human_count(9999) == "9,999"
    assert human_count(10_000) == "10,000 (10.0 K)"
    assert human_count(8_030_261_248) == "8,030,261,248 (8.03 B)"
    assert human_count(123_456_789) == "123,456,789 (123 M)"


def _last(out: str) -> str:
    return out.splitlines()[-1]


def test_safetensors_sizes_and_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    tensors = {"big": np.zeros((512, 1024), np.float32), "b": np.zeros(3, np.float16)}
    kiln_np.save_weights(path, tensors, format="safetensors")
    status, out, _ = run_main(capsys, "ls", str(path))
    assert status == 0
    assert out.splitlines() == [
        "name  dtype  kiln  shape         size",
        "b     F16    f16   3              6 B",
        "big   F32    f32   512x1024  2.00 MiB",
        "2 tensors, 524,291 (524 K) parameters, 2.00 MiB (2,097,158 payload bytes), safetensors",
    ]
    out = run_main(capsys, "ls", str(path), "--bytes")[1]
    assert out.splitlines()[:3] == [
        "name  dtype  kiln  shape       bytes",
        "b     F16    f16   3               6",
        "big   F32    f32   512x1024  2097152",
    ]
    record = json.loads(run_main(capsys, "ls", str(path), "--json")[1])
    assert list(record)[-3:] == ["tensors", "tensor_count", "parameters"]
    assert (record["tensor_count"], record["parameters"]) == (2, 524_291)
    assert record["byte_length"] == 2_097_158
    assert [t["elements"] for t in record["tensors"]] == [3, 524_288]


def test_sharded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tensors = {"a": np.zeros(64, np.float32), "b": np.ones((2, 64), np.float32)}
    kiln_np.save_weights(tmp_path / "ck", tensors, format="safetensors", max_shard_size=300)
    record = json.loads(run_main(capsys, "ls", str(tmp_path / "ck"), "--json")[1])
    assert (record["tensor_count"], record["parameters"], record["byte_length"]) == (2, 192, 768)
    assert _last(run_main(capsys, "ls", str(tmp_path / "ck"))[1]) == (
        "2 tensors, 192 parameters, 768 B (768 payload bytes), safetensors"
    )


def test_gguf_quantized_counts_elements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q8 = gguf.GGMLQuantizationType.Q8_0
    blocks = gguf.quants.quantize(np.ones((4, 64), np.float32), q8)
    path = gguf_py_file(
        tmp_path / "q.gguf", {"q": (blocks, q8), "f": (np.ones(5, np.float32), None)}
    )
    record = json.loads(run_main(capsys, "ls", str(path), "--json")[1])
    assert [t["elements"] for t in record["tensors"]] == [256, 5]  # not 8 blocks
    assert record["parameters"] == 261
    assert record["byte_length"] == 8 * 34 + 20
    out = run_main(capsys, "ls", str(path))[1]
    assert out.splitlines()[1].split() == ["q", "Q8_0", "ggml.q8_0", "4x64", "272", "B"]
    assert _last(out) == "2 tensors, 261 parameters, 292 B (292 payload bytes), gguf"


def test_onnx_and_kiln(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init = numpy_helper.from_array(np.ones((3, 4), np.float32), name="w")
    graph = onnx.helper.make_graph([], "g", [], [], initializer=[init])
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    assert _last(run_main(capsys, "ls", str(tmp_path / "m.onnx"))[1]) == (
        "1 tensor, 12 parameters, 48 B (48 payload bytes), onnx"
    )
    status, _, _ = run_main(
        capsys, "convert", str(tmp_path / "m.onnx"), str(tmp_path / "d"), "--to", "kiln"
    )
    assert status == 0
    record = json.loads(run_main(capsys, "ls", str(tmp_path / "d"), "--json")[1])
    assert (record["weights_format"], record["tensor_count"], record["parameters"]) == (
        "kiln",
        1,
        12,
    )


def test_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kiln_np.save_weights(tmp_path / "e.safetensors", {}, format="safetensors")
    out = run_main(capsys, "ls", str(tmp_path / "e.safetensors"))[1]
    assert _last(out) == "0 tensors, 0 parameters, 0 B (0 payload bytes), safetensors"
    record = json.loads(run_main(capsys, "ls", str(tmp_path / "e.safetensors"), "--json")[1])
    assert (record["tensor_count"], record["parameters"], record["byte_length"]) == (0, 0, 0)
