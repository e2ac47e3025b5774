"""The model map (``kiln_np._convert.models``) against the real thing: the tiny
models of ``tests/fixtures/hf`` and the GGUFs llama.cpp's converter made of them.

Both directions are held to the converter's own output: the map's names pair
every checkpoint tensor with a GGUF tensor and nothing else; its transforms
turn the checkpoint's tensors into the GGUF's bytes (``to_gguf``, then the
converter's cast) and back, exactly; its config keys are the ones the converter
wrote, value for value, and the config made of them is the checkpoint's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import HF_MODELS
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import KilnError
from kiln_np._convert import models
from kiln_np._convert.models import (
    Pair,
    architecture_of,
    gguf_architecture,
    gguf_name,
    pairs,
    to_gguf,
    to_hf,
)

HF = Path(__file__).parents[1] / "fixtures" / "hf"
GENERATED = {  # the rope scaling, as the converter writes it
    "llama": ["rope_freqs.weight"],
    "phi3": ["rope_factors_long.weight", "rope_factors_short.weight"],
}


def _open(name: str) -> tuple[Any, Any, dict[str, Any]]:
    checkpoint = kiln_np.open_weights(HF / name)
    gguf = kiln_np.open_weights(HF / f"{name}.gguf")
    return checkpoint, gguf, dict(gguf.metadata)


def test_every_fixture_is_here_and_every_architecture_has_one() -> None:
    assert sorted(p.name for p in HF.glob("*.gguf") if "-" not in p.name) == sorted(
        f"{n}.gguf" for n in HF_MODELS
    )
    archs = set()
    for n in HF_MODELS:
        with kiln_np.open_weights(HF / f"{n}.gguf") as w:
            archs.add(gguf_architecture(w.metadata, w).name)
    assert archs == {a.name for a in models.ARCHITECTURES}


@pytest.mark.parametrize("name", HF_MODELS)
def test_the_names_pair_every_checkpoint_tensor_with_a_gguf_tensor(name: str) -> None:
    checkpoint, gguf, meta = _open(name)
    with checkpoint, gguf:
        shapes = {n: t.shape for n, t in gguf.items()}
        arch = gguf_architecture(meta, shapes)
        made, generated, unmapped = pairs(arch, shapes, meta)
        assert unmapped == []
        assert generated == GENERATED.get(name, [])
        assert sorted(p.hf for p in made) == sorted(checkpoint)  # each once, nothing else
        for p in made:
            assert gguf_name(arch, p.hf) == (p.gguf, p.expert)
        if name in ("qwen3_moe", "mixtral", "qwen2_moe"):
            assert {p.expert for p in made if p.expert is not None} == {0, 1, 2, 3}


@pytest.mark.parametrize("name", HF_MODELS)
def test_to_gguf_makes_the_converters_bytes_and_to_hf_undoes_it(name: str) -> None:
    checkpoint, gguf, meta = _open(name)
    with checkpoint, gguf:
        arch = gguf_architecture(meta, gguf)
        made, _, _ = pairs(arch, {n: t.shape for n, t in gguf.items()}, meta)
        by_gguf: dict[str, list[Pair]] = {}
        for p in made:
            by_gguf.setdefault(p.gguf, []).append(p)
        for g, group in by_gguf.items():
            stored = np.asarray(gguf[g])
            hf = {p.hf: np.asarray(checkpoint[p.hf]) for p in group}
            # to GGUF: the converter's bytes (its cast to the stored type included)
            ours = [to_gguf(p, hf[p.hf].astype(np.float32)) for p in group]
            stacked = models.stack_experts(ours) if group[0].expert is not None else ours[0]
            stacked = stacked[: stored.shape[0]]  # rows gemma3's converter cut (gemma3_f32)
            assert stacked.astype(stored.dtype).tobytes() == stored.tobytes(), g
            # and back: the checkpoint's bytes (gemma's float32 norms: the offset test)
            values = stored.astype(np.float32)
            for p in group:
                back = to_hf(p, values if p.expert is None else values[p.expert])
                want = hf[p.hf][: back.shape[0]]
                if p.transform == "offset" and want.dtype == np.float32:
                    continue
                assert (
                    back.astype(want.dtype).view(np.uint8).tobytes()
                    == want.view(np.uint8).tobytes()
                ), p.hf


@given(
    heads=st.integers(1, 6),
    half=st.integers(1, 5),
    cols=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_rope_order_is_a_permutation_and_its_inverse(
    heads: int, half: int, cols: int, seed: int
) -> None:
    shape = (heads * 2 * half, cols) if cols else (heads * 2 * half,)
    w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    p = Pair("q", "blk.0.attn_q.weight", None, "permute", 2 * half)
    there = to_gguf(p, w)
    assert sorted(there.reshape(-1).tolist()) == sorted(w.reshape(-1).tolist())
    assert to_hf(p, there).view(np.uint8).tobytes() == w.view(np.uint8).tobytes()
    # the converter's own expression (conversion/llama.py: LlamaModel.permute)
    ref = w.reshape(heads, 2, half, *shape[1:]).swapaxes(1, 2).reshape(shape)
    assert there.view(np.uint8).tobytes() == ref.view(np.uint8).tobytes()
    # whole heads at a time give the same rows as all of it (what the writer streams)
    per_head = 2 * half
    runs = [to_hf(p, there[i : i + per_head]) for i in range(0, shape[0], per_head)]
    assert np.concatenate(runs).view(np.uint8).tobytes() == w.view(np.uint8).tobytes()


def test_gemmas_offset_is_exact_from_bfloat16_down_to_about_2_to_the_minus_16() -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    w = bits.view(ml_dtypes.bfloat16)
    with np.errstate(invalid="ignore"):  # ml_dtypes' isfinite of a NaN warns at its floor
        w = w[np.isfinite(w)]
    p = Pair("n", "blk.0.attn_norm.weight", None, "offset")
    stored = to_gguf(p, w.astype(np.float32))  # the converter: + 1 in float32
    back = to_hf(p, stored).astype(ml_dtypes.bfloat16)
    lost = back.view(np.uint16) != w.view(np.uint16)
    assert np.abs(w[lost].astype(np.float32)).max() < 2.0**-15
    assert not lost[np.abs(w.astype(np.float32)) >= 2.0**-16].any()
    # from float32, w + 1 - 1 keeps what float32 near 1 holds: within 2**-24 of w
    w32 = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 0.1
    err = np.abs(to_hf(p, to_gguf(p, w32)) - w32)
    assert err.max() <= 2.0**-24
    assert err.max() > 0


@pytest.mark.parametrize("name", HF_MODELS)
def test_the_config_keys_are_the_converters_both_ways(name: str) -> None:
    _, gguf, meta = _open(name)
    gguf.close()
    original = json.loads((HF / name / "config.json").read_text())
    arch = gguf_architecture(meta, kiln_np.open_weights(HF / f"{name}.gguf"))
    keys = models.gguf_metadata(original)
    own = {k for k in meta if k.startswith(arch.gguf + ".")}
    assert set(keys) - {"general.architecture"} == own  # every key, and only those
    for k in own:
        assert np.float32(keys[k]) == np.float32(meta[k]), k
    shapes = {n: t.shape for n, t in kiln_np.open_weights(HF / f"{name}.gguf").items()}
    config = models.hf_config(arch, meta, shapes, original["dtype"])
    flat = dict(original)
    rope = original["rope_parameters"]
    flat["rope_theta"] = rope.get("full_attention", rope)["rope_theta"]
    if "sliding_attention" in rope:
        flat["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
    if "num_local_experts" in flat:  # transformers 5 saves num_experts under this name
        flat["num_experts"] = flat["num_local_experts"]
    assert (config["architectures"], config["model_type"]) == (
        original["architectures"],
        original["model_type"],
    )
    if name == "gemma3_f32":
        flat["vocab_size"] = 261  # the converter cut the rows past the tokenizer's
    if "rope_scaling" in config:  # transformers 5 keeps it in rope_parameters
        scaling = config.pop("rope_scaling")
        assert scaling == {k: v for k, v in rope.items() if k in scaling}
        assert set(scaling) >= {"rope_type"} | ({"factor"} & set(rope)) | (
            {"long_factor"} & set(rope)
        )
    differ = {k: (v, flat.get(k)) for k, v in config.items() if flat.get(k) != v}
    assert differ == {}
    assert models.gguf_metadata({**config, "rope_scaling": rope}) == keys  # and back again


def test_architectures_are_named_by_gguf_or_by_model_type() -> None:
    assert architecture_of("mistral").gguf == "llama"
    assert architecture_of("llama").hf_class == "LlamaForCausalLM"
    assert (architecture_of("mixtral").gguf, architecture_of("mixtral").name) == (
        "llama",
        "mixtral",
    )
    assert architecture_of("gemma3_text").gguf == architecture_of("gemma3").gguf == "gemma3"
    with pytest.raises(KilnError) as info:
        architecture_of("falcon", "x: ")
    assert info.value.kind == "TYPE"
    assert "x: expected an architecture of the model map (llama, qwen2" in str(info.value)


def test_what_llama_cpp_assumes_goes_into_the_config() -> None:
    meta = {
        "gemma3.block_count": 62,
        "gemma3.embedding_length": 5376,
        "gemma3.attention.head_count": 32,
        "gemma3.attention.key_length": 128,
    }
    shapes = {"token_embd.weight": (262208, 5376)}
    big = models.hf_config(architecture_of("gemma3"), meta, shapes, "bfloat16")
    assert big["query_pre_attn_scalar"] == 168  # llama.cpp's 27B: n_embd / n_head
    assert big["layer_types"] == ["full_attention"] * 62  # no sliding_window key
    small = models.hf_config(
        architecture_of("gemma3"),
        {**meta, "gemma3.block_count": 26, "gemma3.attention.sliding_window": 512},
        shapes,
        "bfloat16",
    )
    assert small["query_pre_attn_scalar"] == 128
    assert "layer_types" not in small
    moe = models.hf_config(architecture_of("qwen3moe"), {}, shapes, "bfloat16")
    assert moe["norm_topk_prob"] is True
    linear = models.hf_config(
        architecture_of("llama"),
        {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": np.float32(2.0)},
        shapes,
        "float16",
    )
    assert linear["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}


@pytest.mark.parametrize(
    ("base", "dim", "factor", "high", "context"),
    [
        (500000.0, 128, 8.0, 4.0, 8192),
        (500000.0, 128, 32.0, 4.0, 8192),
        (10000.0, 16, 8.0, 4.0, 64),
    ],
    ids=["llama-3.1", "llama-3.2", "tiny"],
)
def test_llama3_scaling_comes_back_from_its_rope_freqs(
    base: float, dim: int, factor: float, high: float, context: int
) -> None:
    made = models._llama3_factors(base, dim, factor, 1.0, high, context).astype(np.float32)
    meta = {"llama.rope.freq_base": np.float32(base), "llama.rope.dimension_count": dim}
    got = models.rope_scaling(architecture_of("llama"), meta, {"rope_freqs.weight": made})
    assert got == {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": high,
        "original_max_position_embeddings": context,
    }
    ones = np.ones(dim // 2, np.float32)
    assert models.rope_scaling(architecture_of("llama"), meta, {"rope_freqs.weight": ones}) is None


@pytest.mark.parametrize(
    ("count", "names", "hf_class"),
    [
        (4, ["blk.0.ffn_gate_exps.weight"], "MixtralForCausalLM"),
        (4, ["blk.0.ffn_gate.weight"], "LlamaForCausalLM"),  # a count, but no experts
        (0, ["blk.0.ffn_gate_exps.weight"], "LlamaForCausalLM"),
        (None, ["blk.0.ffn_up_exps.weight"], "LlamaForCausalLM"),
        (True, ["blk.0.ffn_up_exps.weight"], "LlamaForCausalLM"),  # not a count
    ],
)
def test_a_llama_gguf_is_mixtral_by_its_experts_and_their_count(
    count: object, names: list[str], hf_class: str
) -> None:
    meta = {"general.architecture": "llama", "llama.expert_count": count}
    assert gguf_architecture(meta, names).hf_class == hf_class
    qwen = {"general.architecture": "qwen3moe", "qwen3moe.expert_count": 4}
    assert gguf_architecture(qwen, names).name == "qwen3moe"  # only llama has a mixtral
