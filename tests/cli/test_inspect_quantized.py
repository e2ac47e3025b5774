"""``kiln-np inspect`` of a quantized tensor: its values (a head laid out as numpy
prints the tensor) and scales as ``kiln_np.describe`` gives them, its raw bytes only
with ``--hex`` (issue 37): a GGML quantized payload or tensor, and a weight a
quantization scheme stores as several tensors (``--tensor`` of its logical name)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
import kiln_np.gguf

FP8 = Path(__file__).resolve().parents[1] / "fixtures" / "schemes" / "fp8" / "block128"


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


def _row_text(values: np.ndarray) -> str:
    """One row as the head shows it: three of each end of a long row, "..." between."""
    shown = [*values[:3], "...", *values[-3:]] if values.size > 6 else list(values)
    return "[" + ", ".join(str(v) for v in shown) + "]"


def test_tensor_text_shows_values_and_scales_not_bytes(
    q4k: tuple[Path, kiln_np.Payload], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, payload = q4k
    code, out, _ = run_main(capsys, "inspect", str(path), "--tensor", "blk.0.ffn_up.weight")
    assert code == 0
    assert "shape             4x512 (2048 elements), in 4x2 blocks of 256" in out
    values = out.index("values (float32, as ggml dequantizes them):")
    assert values < out.index("scale d (8 float32, shape 4x2):") < out.index("scale dmin")
    with kiln_np.open_weights(path) as w:
        expected = np.asarray(w["blk.0.ffn_up.weight"])
    # The head: every row of four (numpy shows up to six), three values of each end.
    head = [line.strip(" [],") for line in out[values:].splitlines()[4:8]]
    assert head == [_row_text(row).strip("[]") for row in expected]
    # No hex without --hex: no run of 32 hex digits, and the line that says how.
    assert not re.search(r"[0-9a-f]{32}", out)
    assert "blocks            8 of 144 bytes (--hex shows the first 8 in hex)" in out
    ours = out.split("\n", 1)[1].splitlines()
    assert all(len(line) <= 100 for line in ours)
    raw = tmp_path / "q.bin"
    raw.write_bytes(bytes(payload.data))
    argv = ["inspect", str(raw), "--code", "0x470c", "--layout", "ggml.q4_k:144", "--shape", "4,2"]
    code, text, _ = run_main(capsys, *argv)
    assert code == 0
    assert text.split("\n", 1)[1] == out.split("\n", 1)[1]  # the same but for the file


def test_hex_shows_the_first_blocks(
    q4k: tuple[Path, kiln_np.Payload], capsys: pytest.CaptureFixture[str]
) -> None:
    path, payload = q4k
    argv = ["inspect", str(path), "--tensor", "blk.0.ffn_up.weight", "--hex", "--first", "2"]
    code, out, _ = run_main(capsys, *argv)
    assert code == 0
    hexed = out.split("first blocks      2 of 8, 144 bytes each, in hex:\n")[1].splitlines()
    assert [line.split()[0] for line in hexed if len(line.split()) == 2] == ["0", "1"]
    digits = "".join(line.split()[-1] for line in hexed)
    assert digits == bytes(payload.data[:288]).hex()
    assert out.index("values (") < out.index("first blocks")


@pytest.mark.parametrize("ggml", ["Q8_0", "MXFP4", "NVFP4"])
def test_a_huge_tensor_shows_a_bounded_head(
    ggml: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = np.random.default_rng(9).standard_normal((300, 4096)).astype(np.float32)
    path = tmp_path / "big.gguf"
    kiln_np.save_weights(path, {"w": kiln_np.gguf.quantize(x, ggml)}, format="gguf")
    code, out, _ = run_main(capsys, "inspect", str(path), "--tensor", "w", "--hex")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) < 80
    assert all(len(line) <= 100 for line in lines[1:])
    with kiln_np.open_weights(path) as w:
        expected = np.asarray(w["w"])
    start = lines.index("values (float32, as ggml dequantizes them):") + 4
    head = [line.strip(" ,") for line in lines[start : start + 7]]
    rows = [expected[i] for i in (0, 1, 2)] + [expected[i] for i in (-3, -2, -1)]
    want = [_row_text(r) for r in rows]
    assert head == ["[" + want[0], *want[1:3], "...", *want[3:5], want[5] + "]"]


def test_a_logical_weight_shows_its_values_then_its_parts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = FP8 / "model.safetensors"
    name = "model.layers.0.self_attn.q_proj.weight"
    code, out, _ = run_main(capsys, "inspect", str(path), "--tensor", name)
    assert code == 0
    with kiln_np.open_weights(path) as w:
        t = w.logical()[name]
        assert isinstance(t, kiln_np.LogicalTensor)
        expected = np.asarray(t)  # float32 shown by its own repr, other floats as Python's
        if expected.dtype != np.float32:
            expected = expected.astype(np.float64)
        stored = w[name].payload()
    assert out.startswith(f"tensor            {name}: a fp8-block weight stored as 2 tensors")
    values = out.index(f"values ({t.dtype.name}, as the scheme's reference computes them):")
    assert values < out.index("part weight (") < out.index("part scale (")
    head = [line.strip(" ,") for line in out[values:].splitlines()[4:11]]
    rows = [*expected[:3], *expected[-3:]]
    want = [_row_text(r) for r in rows]
    assert head == ["[" + want[0], *want[1:3], "...", *want[3:5], want[5] + "]"]
    assert not re.search(r"[0-9a-f]{32}", out)
    code, hexed, _ = run_main(capsys, "inspect", str(path), "--tensor", name, "--hex")
    assert bytes(stored.data[:32]).hex() in hexed
    # --parts: the stored codes, as before.
    code, parts, _ = run_main(capsys, "inspect", str(path), "--tensor", name, "--parts")
    assert "code              code 5 (f8e4m3)" in parts


@pytest.mark.parametrize(
    "fixture", ["fp4/nvfp4-modelopt", "fp4/mxfp4-gpt-oss", "int4/ct_channel_asym", "bnb/nf4"]
)
def test_every_scheme_shows_values_then_parts(
    fixture: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = FP8.parents[1] / fixture / "model.safetensors"
    with kiln_np.open_weights(path) as w:
        logical = w.logical()
        name = next(n for n, t in logical.items() if isinstance(t, kiln_np.LogicalTensor))
        t = logical[name]
        assert isinstance(t, kiln_np.LogicalTensor)
        first = np.asarray(t).reshape(-1, t.shape[-1])[0]
    code, out, _ = run_main(capsys, "inspect", str(path), "--tensor", name)
    assert code == 0
    values = out.index(f"values ({t.dtype.name}, as the scheme's reference computes them):")
    assert values < out.index("part ")
    row = out[values:].splitlines()[4].strip(" [,")  # the first row's start
    shown = first if first.dtype == np.float32 else first.astype(np.float64)
    assert row.split(", ")[:3] == [str(v) for v in shown[:3]]
    assert not re.search(r"[0-9a-f]{32}", out)


def test_a_logical_weights_json_is_the_documented_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = FP8 / "model.safetensors"
    name = "model.layers.0.self_attn.q_proj.weight"
    code, out, _ = run_main(capsys, "inspect", str(path), "--tensor", name, "--json")
    assert code == 0
    record = json.loads(out)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    table = doc.split("<!-- inspect-logical-json -->")[1].split("<!-- /inspect-logical-json -->")
    keys = re.findall(r"^\| `([\w.]+)` \|", table[0], re.M)
    assert list(record) + [f"parts.{k}" for k in record["parts"][0]] == keys
    with kiln_np.open_weights(path) as w:
        t = w.logical()[name]
        assert record["values"] == json.loads(json.dumps(kiln_np.describe(t).to_dict()))
        part = w[name]
        assert record["parts"][0]["first_bytes"] == bytes(part.payload().data[:64]).hex()
        assert (record["parts"][0]["file"], record["parts"][0]["offset"]) == (
            part.path,
            part.offset,
        )


def test_plain_and_unknown_opaque_payloads_have_no_quantized_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "x.bin"
    raw.write_bytes(bytes(6))
    argv = ["inspect", str(raw), "--code", "5000", "--layout", "x:2", "--shape", "3", "--json"]
    assert json.loads(run_main(capsys, *argv)[1])["quantized"] is None
    argv = ["inspect", str(raw), "--code", "f16", "--shape", "3", "--json"]
    assert json.loads(run_main(capsys, *argv)[1])["quantized"] is None
