"""``kiln_np.compare`` and ``kiln-np diff`` across naming: a Hugging Face checkpoint
and a GGUF of an architecture of the model map pair their tensors through the map
(the checkpoints and GGUFs of ``tests/fixtures/hf``), unless ``names="raw"``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _helpers import HF_MODELS, run_main

import kiln_np
from kiln_np import KilnError

HF = Path(__file__).parents[1] / "fixtures" / "hf"
# gemma3 from f32 is not equal: the converter cuts its embedding's rows past the
# tokenizer, and its norms come back within 2**-24 (docs/weights.md)
EXACT = [n for n in HF_MODELS if n != "gemma3_f32"]


@pytest.mark.parametrize("name", EXACT)
def test_a_checkpoint_equals_its_own_gguf_through_the_map(name: str) -> None:
    r = kiln_np.compare(HF / name, HF / f"{name}.gguf")
    with kiln_np.open_weights(HF / name) as w:
        names = list(w)
    assert (r.equal, r.names, r.only_a, r.only_b) == (True, "map", (), ())
    assert sorted(t.name for t in r.tensors) == sorted(names)
    assert r.summary().endswith("0 only in A, 0 only in B, paired through the model map")
    back = kiln_np.compare(HF / f"{name}.gguf", HF / name)  # either side may be the GGUF
    assert (back.equal, back.names, len(back.tensors)) == (True, "map", len(names))


def test_names_raw_pairs_nothing_across_the_namings() -> None:
    r = kiln_np.compare(HF / "llama", HF / "llama.gguf", names="raw")
    assert (r.equal, r.names, r.tensors) == (False, "raw", ())
    assert len(r.only_a) == 21
    assert len(r.only_b) == 22  # rope_freqs too: raw names pair nothing away
    with pytest.raises(KilnError) as info:
        kiln_np.compare(HF / "llama", HF / "llama.gguf", names="gguf")
    assert info.value.kind == "TYPE"


def test_what_the_converter_lost_is_what_differs() -> None:
    r = kiln_np.compare(HF / "gemma3_f32", HF / "gemma3_f32.gguf")
    differ = {t.name: t for t in r.tensors if not t.equal}
    assert differ["model.embed_tokens.weight"].note == "shapes differ"
    norms = [n for n in differ if n != "model.embed_tokens.weight"]
    assert norms
    assert all("norm" in n for n in norms)
    # float32's round-off near 1
    assert all((differ[n].max_abs or np.inf) <= 2.0**-24 for n in norms)
    assert all(t.equal for t in r.tensors if "norm" not in t.name and "embed" not in t.name)


def test_a_quantized_gguf_reports_every_tensors_error_per_layer_and_role() -> None:
    r = kiln_np.compare(HF / "qwen3_moe", HF / "qwen3_moe-q8_0.gguf")
    assert not r.equal
    assert r.names == "map"
    assert len(r.tensors) == 45
    for t in r.tensors:
        assert t.compared
        if t.type_b == "ggml.q8_0":
            assert not t.equal
            assert t.rel_rmse is not None
            assert 0 < t.rel_rmse < 0.01
            assert t.cosine is not None
            assert t.cosine > 0.9999
        else:  # the norms and the router the converter keeps in float32
            assert t.type_b == "f32"
            assert t.equal
    layers = {g.name for g in r.by_layer()}
    assert layers == {"model.layers.0", "model.layers.1"}
    roles = {g.name for g in r.by_role()}
    assert {f"model.layers.*.mlp.experts.*.{p}_proj" for p in ("up", "gate", "down")} <= roles
    assert len(roles) == 12


def test_a_gguf_tensor_the_map_does_not_name_is_on_its_side_alone(tmp_path: Path) -> None:
    q = np.arange(16, dtype=np.float32).reshape(4, 4)
    meta = {"general.architecture": "llama", "llama.attention.head_count": 1}
    kiln_np.save_weights(
        tmp_path / "m.gguf",
        {"blk.0.attn_q.weight": q, "blk.0.odd.weight": np.ones(2, np.float32)},
        format="gguf",
        metadata=meta,
    )
    # the checkpoint's q_proj: the GGUF's rows out of llama.cpp's rope order
    hf = q.reshape(1, 2, 2, 4).swapaxes(1, 2).reshape(4, 4)
    kiln_np.save_weights(
        tmp_path / "hf.safetensors",
        {"model.layers.0.self_attn.q_proj.weight": hf, "extra": np.ones(1, np.float32)},
        format="safetensors",
    )
    r = kiln_np.compare(tmp_path / "hf.safetensors", tmp_path / "m.gguf")
    assert (r.only_a, r.only_b) == (("extra",), ("blk.0.odd.weight",))
    assert [(t.name, t.equal) for t in r.tensors] == [
        ("model.layers.0.self_attn.q_proj.weight", True)
    ]
    unpermuted = kiln_np.compare(tmp_path / "hf.safetensors", tmp_path / "m.gguf", names="raw")
    assert unpermuted.tensors == ()


def test_kiln_np_diff_pairs_through_the_map_unless_names_raw(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run_main(capsys, "diff", str(HF / "qwen3"), str(HF / "qwen3.gguf"))
    assert status == 0
    assert out.splitlines()[-1] == (
        "equal: 24 tensors in both (0 same bytes, 24 equal values, 0 different), 0 only in A, "
        "0 only in B, paired through the model map"
    )
    status, out, _ = run_main(
        capsys, "diff", str(HF / "qwen3"), str(HF / "qwen3-q8_0.gguf"), "--json"
    )
    assert status == 1
    record = json.loads(out)
    assert record["names"] == "map"
    assert record["by_layer"]
    status, out, _ = run_main(
        capsys, "diff", str(HF / "qwen3"), str(HF / "qwen3.gguf"), "--names", "raw", "--json"
    )
    assert status == 1
    assert json.loads(out)["names"] == "raw"


def test_kiln_np_diff_pairs_mixtrals_experts_with_the_llama_ggufs_stacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run_main(capsys, "diff", str(HF / "mixtral.gguf"), str(HF / "mixtral"))
    assert status == 0
    assert out.splitlines()[-1] == (
        "equal: 41 tensors in both (0 same bytes, 41 equal values, 0 different), 0 only in A, "
        "0 only in B, paired through the model map"
    )
    r = kiln_np.compare(HF / "mixtral", HF / "mixtral.gguf")
    roles = {g.name for g in r.by_role()}
    assert {f"model.layers.*.block_sparse_moe.experts.*.w{i}" for i in (1, 2, 3)} <= roles
