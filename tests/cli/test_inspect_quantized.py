"""``kiln-np inspect`` of a GGML quantized payload: its blocks, then its values and
block scales as ``kiln_np.describe`` gives them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
import kiln_np.gguf


@pytest.fixture
def q4k(tmp_path: Path) -> tuple[Path, kiln_np.Payload]:
    x = np.random.default_rng(3).standard_normal((4, 512)).astype(np.float32)
    x[1, 7] = 0.0
    payload = kiln_np.gguf.quantize(x, "Q4_K")
    path = tmp_path / "q.gguf"
    kiln_np.save_weights(path, {"blk.0.ffn_up.weight": payload}, format="gguf")
    return path, payload


def test_tensor_json_has_the_values_and_scales(
    q4k: tuple[Path, kiln_np.Payload], capsys: pytest.CaptureFixture[str]
) -> None:
    path, payload = q4k
    code, out, _ = run_main(
        capsys, "inspect", str(path), "--tensor", "blk.0.ffn_up.weight", "--json"
    )
    assert code == 0
    record = json.loads(out)
    with kiln_np.open_weights(path) as w:
        expected = kiln_np.describe(w["blk.0.ffn_up.weight"]).to_dict()
        values = np.asarray(w["blk.0.ffn_up.weight"], np.float64)
    assert record["quantized"] == json.loads(json.dumps(expected))
    assert record["quantized"]["values"]["mean"] == pytest.approx(values.mean(), rel=1e-12)
    assert record["quantized"]["values"]["max"] == values.max()
    assert record["count"] == 8  # the blocks stay the record's own shape and count
    assert record["first_bits"][0] == bytes(payload.data[:144]).hex()


def test_tensor_text_and_a_payload_file_by_layout(
    q4k: tuple[Path, kiln_np.Payload], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, payload = q4k
    code, out, _ = run_main(capsys, "inspect", str(path), "--tensor", "blk.0.ffn_up.weight")
    assert code == 0
    assert "ggml shape        4x512 (2048 elements), in 4x2 blocks of 256" in out
    assert "scale dmin:" in out
    ours = out.split("ggml type")[1].splitlines()
    assert all(len(line) <= 100 for line in ours)
    raw = tmp_path / "q.bin"
    raw.write_bytes(bytes(payload.data))
    argv = ["inspect", str(raw), "--code", "0x470c", "--layout", "ggml.q4_k:144", "--shape", "4,2"]
    code, text, _ = run_main(capsys, *argv)
    assert code == 0
    assert text.split("ggml type")[1] == out.split("ggml type")[1]


def test_plain_and_unknown_opaque_payloads_have_no_quantized_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "x.bin"
    raw.write_bytes(bytes(6))
    argv = ["inspect", str(raw), "--code", "5000", "--layout", "x:2", "--shape", "3", "--json"]
    assert json.loads(run_main(capsys, *argv)[1])["quantized"] is None
    argv = ["inspect", str(raw), "--code", "f16", "--shape", "3", "--json"]
    assert json.loads(run_main(capsys, *argv)[1])["quantized"] is None
