"""``kiln-np convert --dequantize {f32,bf16,f16}``: GGML blocks written as values.

In process through :func:`kiln_np.cli.main`, as ``tests/cli/test_cli.py`` runs
every other command.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np import Layout, Payload
from kiln_np.gguf import dequantize


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``m.gguf`` in the working directory: a Q8_0 tensor of 3 x 2 blocks and an F32 one."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (3, 2, 34), np.uint8)
    raw[..., :2] = rng.integers(0x1400, 0x2C00, (3, 2)).astype("<u2")[..., None].view(np.uint8)
    q = Payload(0x4708, memoryview(raw.tobytes()), (3, 2), Layout("ggml.q8_0", 34))
    tensors = {"blk.0.attn_q.weight": q, "norm": np.arange(4, dtype=np.float32)}
    kiln_np.save_weights("m.gguf", tensors, format="gguf")
    return tmp_path / "m.gguf"


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_without_the_option_the_error_names_it_and_the_tensor(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _listing(model.parent)
    status, out, err = run_main(capsys, "convert", "m.gguf", "o.safetensors")
    assert (status, out) == (2, "")
    assert err.startswith(
        "kiln-np: TYPE: tensor 'blk.0.attn_q.weight': safetensors cannot hold GGML Q8_0 blocks "
    )
    assert "pass --dequantize f32 (or bf16, f16) to write their values" in err
    assert err.count("\n") == 1
    assert _listing(model.parent) == before  # nothing written


@pytest.mark.parametrize(
    ("flag", "dtype"), [("f32", np.float32), ("bf16", ml_dtypes.bfloat16), ("f16", np.float16)]
)
def test_dequantize_writes_the_values_and_keeps_the_rest(
    model: Path, capsys: pytest.CaptureFixture[str], flag: str, dtype: Any
) -> None:
    status, out, err = run_main(capsys, "convert", "m.gguf", "o.safetensors", "--dequantize", flag)
    size = 3 * 64 * np.dtype(dtype).itemsize
    assert (status, err) == (0, "")
    assert out == (
        f"o.safetensors: 2 tensors, {size + 16} payload bytes, gguf -> safetensors, "
        f"1 dequantized to {flag}\n"
    )
    with kiln_np.open_weights(model) as src, kiln_np.open_weights("o.safetensors") as got:
        want = dequantize(src["blk.0.attn_q.weight"], dtype=dtype)
        q = got["blk.0.attn_q.weight"]
        assert (q.format_dtype, q.info.shape, q.byte_length) == (flag.upper(), (3, 64), size)
        assert bytes(q.payload().data) == want.tobytes()
        assert bytes(got["norm"].payload().data) == bytes(src["norm"].payload().data)


def test_json_record_says_what_was_dequantized(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["convert", "m.gguf", "k", "--to", "kiln", "--dequantize", "bf16", "--json"]
    status, out, _ = run_main(capsys, *argv)
    record = json.loads(out)
    assert status == 0
    assert (record["dequantize"], record["dequantized"], record["byte_length"]) == ("bf16", 1, 400)
    status, out, _ = run_main(capsys, "convert", "m.gguf", "k.gguf", "--json")
    record = json.loads(out)
    assert (record["to"], record["dequantize"], record["dequantized"]) == ("gguf", None, 0)


def test_gguf_to_gguf_keeps_the_blocks_without_the_option(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(capsys, "convert", "m.gguf", "copy.gguf")[0] == 0
    assert run_main(capsys, "convert", "m.gguf", "f32.gguf", "--dequantize", "f32")[0] == 0
    with (
        kiln_np.open_weights(model) as src,
        kiln_np.open_weights("copy.gguf") as copy,
        kiln_np.open_weights("f32.gguf") as f32,
    ):
        name = "blk.0.attn_q.weight"
        assert (copy[name].format_dtype, copy[name].layout) == ("Q8_0", src[name].layout)
        assert bytes(copy[name].payload().data) == bytes(src[name].payload().data)
        assert (f32[name].format_dtype, f32[name].info.shape) == ("F32", (3, 64))


def test_the_format_comes_from_the_suffix_or_from_to(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_main(capsys, "convert", "m.gguf", "weights", "--dequantize", "f32")
    assert (status, out) == (2, "")
    assert err == (
        "kiln-np: USAGE: cannot tell the format to write from 'weights' (only *.zarr, "
        "*.safetensors and *.gguf say it): pass --to kiln, zarr, safetensors, gguf or hf\n"
    )
    assert not os.path.exists("weights")
    assert (
        run_main(capsys, "convert", "m.gguf", "weights", "--to", "kiln", "--dequantize", "f32")[0]
        == 0
    )
    assert kiln_np.open_weights("weights").format == "kiln"


def test_another_dequantize_is_usage(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_main(capsys, "convert", "m.gguf", "o.safetensors", "--dequantize", "f64")
    assert status == 2
    assert "argument --dequantize: invalid choice: 'f64'" in err


def test_never_over_an_input_even_dequantized(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = model.read_bytes()
    argv = ["convert", "m.gguf", "m.gguf", "--dequantize", "f32", "--force"]
    status, out, err = run_main(capsys, *argv)
    assert (status, out) == (2, "")
    assert err.startswith("kiln-np: FILE: ")
    assert "it is the input file" in err
    assert model.read_bytes() == before
