"""GGUF back to Hugging Face: ``kiln-np convert MODEL.gguf DIR --to hf`` and
``save_weights(DIR, weights, format="hf")``.

The GGUFs are llama.cpp's converter's, made from the tiny random checkpoints
beside them (``tests/fixtures/hf/make_hf_models.py``).  Every parameter comes back
bit for bit, in the checkpoint's dtype, under transformers' name, with the
config transformers needs to load it; what cannot come back is what the
converter dropped (gemma3_f32: the embedding rows past the tokenizer's, and its
float32 norms' ``(w + 1) - 1`` round-off).  Q8_0 GGUFs dequantized to f32 are
transformers' own GGUF loading, bit for bit, where that loader loads them
(``transformers_q8_0.json``, recorded by the same script).
"""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np import KilnError
from kiln_np._convert import hf
from kiln_np._convert.models import Pair, to_gguf, to_hf
from kiln_np.formats import plan_weights

HF = Path(__file__).parents[1] / "fixtures" / "hf"
FIXTURES = [
    "llama",
    "llama_tied_f16",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma3",
    "gemma3_f32",
    "phi3",
]
LOADED = json.loads((HF / "transformers_q8_0.json").read_text())


def _bits(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    with kiln_np.open_weights(path) as w:
        return {
            n: (t.format_dtype, t.shape, np.asarray(t).view(np.uint8).tobytes())
            for n, t in w.items()
        }


@pytest.mark.parametrize("name", FIXTURES)
def test_every_parameter_comes_back_bit_for_bit(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status, said, err = run_main(
        capsys, "convert", str(HF / f"{name}.gguf"), str(out), "--to", "hf"
    )
    assert (status, err) == (0, "")
    assert said.startswith(f"{out}: ")
    assert " gguf -> hf" in said
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json", "model.safetensors"]
    original, back = _bits(HF / name), _bits(out)
    assert sorted(back) == sorted(original)
    lost = []
    for n, (dtype, shape, data) in original.items():
        got = back[n]
        assert got[0] == dtype, n
        if got[1:] != (shape, data):
            lost.append(n)
    if name != "gemma3_f32":
        assert lost == []
        return
    # what the converter dropped: the rows past the tokenizer's 261, and what float32
    # near 1 cannot hold of a float32 norm (w + 1, then - 1: within 2**-24 of w)
    assert "model.embed_tokens.weight" in lost
    embd = np.asarray(kiln_np.open_weights(out)["model.embed_tokens.weight"])
    first = np.asarray(kiln_np.open_weights(HF / name)["model.embed_tokens.weight"])[:261]
    assert embd.tobytes() == first.tobytes()
    norms = [n for n in lost if n != "model.embed_tokens.weight"]
    assert norms
    assert all("norm" in n for n in norms)
    for n in norms:
        w = np.asarray(kiln_np.open_weights(HF / name)[n])
        p = Pair(n, "", None, "offset")
        expected = to_gguf(p, w) - np.float32(1)  # the arithmetic both ways, in float32
        assert np.asarray(kiln_np.open_weights(out)[n]).tobytes() == expected.tobytes()
        assert np.abs(expected - w).max() <= 2.0**-24


@pytest.mark.parametrize("name", ["llama", "qwen3_moe", "gemma3"])
def test_the_config_loads_as_the_originals(name: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with kiln_np.open_weights(HF / f"{name}.gguf") as w:
        written = kiln_np.save_weights(out, w, format="hf")
    assert written == [str(out)]
    config = json.loads((out / "config.json").read_text())
    original = json.loads((HF / name / "config.json").read_text())
    for key in ("architectures", "model_type", "hidden_size", "num_hidden_layers", "head_dim",
                "num_key_value_heads", "vocab_size", "tie_word_embeddings", "dtype",
                "bos_token_id", "eos_token_id"):  # fmt: skip
        assert config[key] == original[key], key
    assert json.loads((out / "generation_config.json").read_text()) == {
        "bos_token_id": 259,
        "eos_token_id": 260,
    }
    text = (out / "config.json").read_text()
    assert text == json.dumps(config, indent=2, sort_keys=True) + "\n"  # as transformers writes
    with kiln_np.open_weights(out) as back:
        assert back.config == config


def test_save_weights_and_the_command_line_write_the_same_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with kiln_np.open_weights(HF / "qwen3_moe.gguf") as w:
        kiln_np.save_weights(tmp_path / "a", w, format="hf")
    run_main(capsys, "convert", str(HF / "qwen3_moe.gguf"), str(tmp_path / "b"), "--to", "hf")
    for f in ("model.safetensors", "config.json", "generation_config.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


@pytest.mark.parametrize("name", sorted(LOADED))
def test_q8_0_dequantized_to_f32_is_transformers_own_gguf_loading(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = HF / f"{name}-q8_0.gguf"
    status, _, err = run_main(
        capsys, "convert", str(gguf), str(tmp_path / "o"), "--to", "hf", "--dequantize", "f32"
    )
    assert (status, err) == (0, "")
    ours = _bits(tmp_path / "o")
    theirs = LOADED[name]
    if "error" in theirs:  # transformers' loader fails here; kiln_np's directory loads
        assert name in ("qwen3", "qwen3_moe", "phi3")
        return
    tensors = theirs["tensors"]
    # transformers keeps a tied lm_head in its state dict; a checkpoint has none
    tied = {"lm_head.weight"} if "lm_head.weight" not in ours else set()
    assert set(tensors) - tied == set(ours)
    for n, (dtype, shape, data) in ours.items():
        assert dtype == "F32"
        assert list(shape) == tensors[n]["shape"], n
        assert hashlib.sha256(data).hexdigest() == tensors[n]["sha256"], n


def test_blocks_need_dequantize_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = str(HF / "llama-q8_0.gguf")
    status, out, err = run_main(capsys, "convert", gguf, str(tmp_path / "o"), "--to", "hf")
    assert (status, out) == (2, "")
    assert "hf cannot hold GGML Q8_0 blocks" in err
    assert "pass --dequantize f32 (or bf16, f16)" in err
    with kiln_np.open_weights(gguf) as w, pytest.raises(KilnError) as info:
        kiln_np.save_weights(tmp_path / "p", w, format="hf")
    assert info.value.kind == "TYPE"
    assert "pass dequantize='f32'" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_bf16_from_q8_0_is_the_f32_rounded_to_nearest_even(tmp_path: Path) -> None:
    with kiln_np.open_weights(HF / "qwen2-q8_0.gguf") as w:
        kiln_np.save_weights(tmp_path / "f32", w, format="hf", dequantize="f32")
        kiln_np.save_weights(tmp_path / "bf16", w, format="hf", dequantize="bf16")
    f32, bf16 = _bits(tmp_path / "f32"), _bits(tmp_path / "bf16")
    import ml_dtypes

    for n, (_, shape, data) in f32.items():
        values = np.frombuffer(data, np.float32).astype(ml_dtypes.bfloat16)
        assert bf16[n][0] == "BF16"
        assert bf16[n][1:] == (shape, values.tobytes()), n
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"


def test_past_the_shard_size_shards_and_an_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = str(HF / "llama.gguf")
    out = tmp_path / "o"
    status, _, err = run_main(
        capsys, "convert", gguf, str(out), "--to", "hf", "--max-shard-size", "100KB"
    )
    assert (status, err) == (0, "")
    assert sorted(os.listdir(out)) == [
        "config.json",
        "generation_config.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    assert _bits(out) == _bits(HF / "llama")
    # a size the checkpoint fits in: one model.safetensors, as transformers writes it
    run_main(
        capsys, "convert", gguf, str(tmp_path / "one"), "--to", "hf", "--max-shard-size", "1MB"
    )
    assert "model.safetensors" in os.listdir(tmp_path / "one")
    assert hf.HF_SHARD_SIZE == 50 * 10**9


def test_the_dry_run_names_each_source_and_transform(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_main(
        capsys, "convert", str(HF / "qwen3_moe.gguf"), "never", "--to", "hf", "--dry-run", "--json"
    )
    assert status == 0
    plan = json.loads(out)
    steps = {s["name"]: s for s in plan["tensors"]}
    expert = steps["model.layers.1.mlp.experts.2.down_proj.weight"]
    assert expert["action"] == "copy"
    assert expert["reason"] == "from blk.1.ffn_down_exps.weight[2] (bf16)"
    assert expert["source_bytes"] == expert["target_bytes"] == 64 * 32 * 2
    norm = steps["model.norm.weight"]
    assert (norm["action"], norm["source_type"], norm["target_type"]) == ("convert", "f32", "bf16")
    assert plan["files"] == [
        "never/model.safetensors",
        "never/config.json",
        "never/generation_config.json",
    ]
    assert not os.path.exists("never")
    status, out, _ = run_main(
        capsys, "convert", str(HF / "llama.gguf"), "never", "--to", "hf", "--dry-run"
    )
    assert "from blk.0.attn_q.weight (bf16), rows out of llama.cpp's rope order" in out
    with kiln_np.open_weights(HF / "gemma3.gguf") as w:
        plan_ = plan_weights("never", w, format="hf")
    reasons = {s.name: s.reason for s in plan_.steps}
    assert reasons["model.norm.weight"] == (
        "from output_norm.weight (f32 -> bf16), norm minus the converter's +1 (float32)"
    )


def test_include_writes_a_part_of_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    status, _, err = run_main(
        capsys, "convert", str(HF / "llama.gguf"), str(out), "--to", "hf", "--include", "blk.0.*",
        "--include", "token_embd.weight",
    )  # fmt: skip
    assert (status, err) == (0, "")
    names = sorted(_bits(out))
    assert names[0] == "model.embed_tokens.weight"
    assert all(n.startswith("model.layers.0.") for n in names[1:])
    assert len(names) == 10


def test_a_mapped_tensor_streams_in_bounded_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(1)
    heads, half, cols = 64, 32, 2048
    q = rng.standard_normal((heads * 2 * half, cols)).astype(np.float16)  # 16 MiB
    meta = {"general.architecture": "llama", "llama.attention.head_count": heads}
    tensors = {"token_embd.weight": np.ones((8, cols), np.float16), "blk.0.attn_q.weight": q}
    kiln_np.save_weights(tmp_path / "m.gguf", tensors, format="gguf", metadata=meta)
    monkeypatch.setattr(hf, "_RUN", 1 << 16)  # runs of whole heads of 64 rows
    with kiln_np.open_weights(tmp_path / "m.gguf") as w:
        tracemalloc.start()
        try:
            kiln_np.save_weights(tmp_path / "o", w, format="hf", dequantize="bf16")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 << 20  # a few runs' buffers, not the 16 MiB tensor
    import ml_dtypes

    got = np.asarray(kiln_np.open_weights(tmp_path / "o")["model.layers.0.self_attn.q_proj.weight"])
    p = Pair("q", "blk.0.attn_q.weight", None, "permute", 2 * half)
    want = to_hf(p, q.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()


def test_a_tensor_the_map_does_not_name_is_refused_before_writing(tmp_path: Path) -> None:
    tensors: dict[str, Any] = {
        "token_embd.weight": np.ones((8, 4), np.float32),
        "blk.0.ffn_gate_exps.weight": np.ones((2, 4, 4), np.float32),  # mixtral: not mapped
    }
    with pytest.raises(KilnError) as info:
        kiln_np.save_weights(
            tmp_path / "o", tensors, format="hf", metadata={"general.architecture": "llama"}
        )
    assert "found 1 without: 'blk.0.ffn_gate_exps.weight'" in str(info.value)
    assert os.listdir(tmp_path) == []
