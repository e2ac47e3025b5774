"""Quantizing on conversion: ``save_weights(..., quantize=)`` and ``QuantizePolicy``.

The policy grammar and every error it raises; which tensors are quantized and
why the others keep their type; the bytes of every quantized tensor are
``kiln_np.gguf.quantize``'s of the source (read back and decoded too), from
memory and from files, f32 / f16 / bf16 / f64 sources, across chunk boundaries;
float targets round to nearest even; GGUF metadata survives GGUF -> GGUF;
gguf-py opens what is written; a NaN leaves nothing behind; a Kiln directory
takes blocks and safetensors refuses the option; memory stays bounded buffers.
Positive cases run for every type of ``ENCODERS`` (more as they land) and Q8_0.
"""

from __future__ import annotations

import math
import os
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import optional

import kiln_np
from kiln_np import KilnError, Payload, QuantizePolicy
from kiln_np._convert import sources
from kiln_np._convert.policy import decide
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.quantize import ENCODERS
from kiln_np.cli import main
from kiln_np.formats import KeptTensor, quantize_kept, save_weights_paths
from kiln_np.gguf import dequantize, quantize, read_gguf

if TYPE_CHECKING:
    import gguf
else:
    gguf = optional("gguf")

TYPES = list(ENCODERS)
ROW = math.lcm(*(BLOCKS[name].elements for name in TYPES))  # a whole number of every block
FLOATS: dict[str, Any] = {
    "f32": np.float32,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "f64": np.float64,
}


def rand(shape: tuple[int, ...], dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def payload_bytes(t: kiln_np.WeightTensor) -> bytes:
    return bytes(t.payload().data)


def bits(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr).view(np.uint8).tobytes()


def model() -> dict[str, Any]:
    """A small llama-like mapping: matrices of each float type, norms, integers."""
    return {
        "token_embd.weight": rand((4, ROW), np.float16, 1),
        "blk.0.attn_norm.weight": rand((ROW,), np.float32, 2),
        "blk.0.attn_q.weight": rand((3, ROW), np.float32, 3),
        "blk.0.ffn_down.weight": rand((2, 2 * ROW), ml_dtypes.bfloat16, 4),
        "blk.0.ffn_up.weight": rand((2, 3, ROW), np.float64, 5),
        "positions": np.arange(2 * ROW, dtype=np.int32).reshape(2, ROW),
        "odd.weight": rand((2, ROW + 1), np.float32, 6),
    }


# -- the grammar ---------------------------------------------------------------------


def test_the_grammar_round_trips_in_canonical_spelling() -> None:
    p = QuantizePolicy.parse(" q8_0 , *.ffn_down.*=Q8_0,*norm* = F32,out?=bf16,x=f16")
    assert p.default == "Q8_0"
    assert p.rules == (("*.ffn_down.*", "Q8_0"), ("*norm*", "f32"), ("out?", "bf16"), ("x", "f16"))
    assert str(p) == "*.ffn_down.*=Q8_0,*norm*=f32,out?=bf16,x=f16,Q8_0"
    assert QuantizePolicy.parse(str(p)) == p
    assert hash(QuantizePolicy.parse(str(p))) == hash(p)
    assert repr(p) == f"QuantizePolicy({str(p)!r})"
    assert QuantizePolicy(p.rules, p.default) == p
    assert p != str(p)


def test_patterns_are_whole_name_case_sensitive_globs_and_the_first_match_wins() -> None:
    p = QuantizePolicy.parse("*.ffn_down.*=f16,*norm*=f32,blk.[!0].*=bf16,q8_0")
    assert p.type_for("blk.0.ffn_down.weight") == "f16"  # * crosses dots
    assert p.type_for("blk.1.ffn_down.norm") == "f16"  # first match wins
    assert p.type_for("blk.0.attn_norm.weight") == "f32"
    assert p.type_for("blk.0.attn_NORM.weight") == "Q8_0"  # case-sensitive: the default
    assert p.type_for("blk.1.attn_q.weight") == "bf16"
    assert p.type_for("blk.0.attn_q.weight") == "Q8_0"
    assert QuantizePolicy.parse("norm=f32").type_for("attn_norm") is None  # the whole name
    assert QuantizePolicy.parse("[[]x]=f32").type_for("[x]") == "f32"  # a literal [


def test_the_default_may_stand_anywhere() -> None:
    assert QuantizePolicy.parse("q8_0,*norm*=f32") == QuantizePolicy.parse("*norm*=f32,q8_0")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"^policy entry 1: expected TYPE or PATTERN=TYPE between commas, found an empty "),
        ("q8_0,", r"^policy entry 2: expected TYPE or PATTERN=TYPE .* found an empty entry in"),
        ("q8_0,, *=f16", r"^policy entry 2: .*found an empty entry in 'q8_0,, \*=f16'$"),
        (
            "q9_9",
            r"^policy entry 1 \('q9_9'\): expected a type to quantize to, in any case: a GGML "
            r"type \(.*Q8_0.*\) or a float type \(f32, f16, bf16\); found 'q9_9'$",
        ),
        ("*=f64", r"^policy entry 1 \('\*=f64'\): expected a type to quantize to.*found 'f64'$"),
        ("*=", r"^policy entry 1 \('\*='\): expected a type .*; found ''$"),
        (
            "*=iq2_xxs",
            r"found 'iq2_xxs': IQ2_XXS is quantized only with an importance matrix \(ggml "
            r"asserts one; llama-quantize needs --imatrix for IQ2_XXS\)$",
        ),
        ("*=IQ1_s", r"found 'IQ1_s': IQ1_S is quantized only with an importance matrix"),
        ("q8_k", r"found 'q8_k': Q8_K is an intermediate type of ggml's dot products"),
        (
            "q8_0,f16",
            r"^policy entry 2 \('f16'\): expected at most one bare TYPE \(the default\), found "
            r"a second after 'Q8_0'$",
        ),
        (
            "a=b=q8_0",
            r"^policy entry 1 \('a=b=q8_0'\): expected PATTERN=TYPE with one '=', found 2",
        ),
        ("=q8_0", r"^policy entry 1 \('=q8_0'\): expected PATTERN=TYPE with a pattern, found none"),
        (
            "q8_0,blk.[0.*=f32",
            r"^policy entry 2 \('blk.\[0.\*=f32'\): expected a pattern whose every '\[' a '\]' "
            r"closes \(write '\[\[\]' for a literal '\['\), found 'blk.\[0.\*'$",
        ),
        ("x[!]=f32", r"found 'x\[!\]'$"),
        (
            "*norm*=f32,*norm*=f16",
            r"^policy entry 2 \('\*norm\*=f16'\): expected each pattern once \(the first match "
            r"wins, so a second '\*norm\*' never would\), found it twice$",
        ),
    ],
)
def test_every_malformed_policy_is_type_saying_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(KilnError) as info:
        QuantizePolicy.parse(text)
    assert info.value.kind == "TYPE"
    assert re.search(message, info.value.message), info.value.message


def test_types_not_yet_quantized_say_so() -> None:
    missing = [n for n in BLOCKS if n not in ENCODERS and n not in ("Q8_1", "Q8_K")]
    missing = [n for n in missing if not n.startswith(("IQ1", "IQ2", "IQ3"))]
    for name in missing:  # empty once every family has landed
        with pytest.raises(KilnError, match=f"kiln_np has no quantizer for {name}"):
            QuantizePolicy.parse(name.lower())
    for name in TYPES:
        assert QuantizePolicy.parse(name.lower()).default == name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([("*", "q8_0", "x")],), r"expected rules as \(pattern, type\) pairs of str, found"),
        (([("*", 8)],), r"expected rules as \(pattern, type\) pairs of str"),
        (([("*[", "q8_0")],), r"^policy rule \('\*\[', 'q8_0'\): expected a pattern whose"),
        (([("", "q8_0")],), r"^policy rule \('', 'q8_0'\): expected PATTERN=TYPE with a pattern"),
        (([("a", "f32"), ("a", "f16")],), r"expected each pattern once"),
        (((), 8), r"^expected the default type as a str or None, found "),
        (
            ([("*", "iq2_xs")],),
            r"^policy rule .*: expected a type to quantize to.*IQ2_XS is quantized only",
        ),
    ],
)
def test_the_constructor_checks_as_parse_does(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(KilnError) as info:
        QuantizePolicy(*args)
    assert info.value.kind == "TYPE"
    assert re.search(message, info.value.message), info.value.message


def test_only_a_string_parses_and_only_a_policy_or_string_is_quantize(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match=r"^TYPE: expected a policy string, found "):
        QuantizePolicy.parse(b"q8_0")  # type: ignore[arg-type]
    with pytest.raises(KilnError, match=r"^TYPE: expected quantize as a policy string \('q8_0', "):
        kiln_np.save_weights(tmp_path / "o.gguf", {}, format="gguf", quantize=8)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


# -- a llama-quantize file type: its mix ----------------------------------------------


def test_a_bare_file_type_is_its_mix_as_llama_quantize_chooses() -> None:
    tensors = model()
    policy = QuantizePolicy.parse("q8_0")
    assert policy.file_type is not None
    assert policy.file_type.number == 7
    metadata = {"general.architecture": "llama", "llama.block_count": 1}
    got = {s.name: s for s in sources.tensor_sources(tensors, quantize=policy, metadata=metadata)}
    # llama.cpp keeps 1-D tensors, names not ending in "weight" and integers; rows that
    # are not whole Q8_0 blocks fall back to F16 (the old meaning kept them as they were).
    assert got["blk.0.attn_norm.weight"].kept == "Q8_0 does not quantize it (1-D)"
    assert got["positions"].kept == (
        "Q8_0 does not quantize it (not a weight (the name does not end in 'weight'))"
    )
    assert got["odd.weight"].info.element.name == "f16"
    assert got["odd.weight"].rule == "Q8_0 default; rows of 257 are not whole Q8_0 blocks (32): F16"
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight"):
        assert got[name].info.element.name == "ggml.q8_0", name
        assert got[name].rule == "Q8_0 default"
    assert list(got) == list(tensors)


def test_flags_and_patterns_over_a_mix() -> None:
    tensors = {f"blk.{i}.ffn_down.weight": rand((2, 256), np.float32, i) for i in range(8)}
    tensors["output.weight"] = rand((4, 256), np.float32, 9)
    meta = {"general.architecture": "llama", "llama.block_count": 8}

    def types(policy: QuantizePolicy) -> dict[str, str]:
        described = sources.tensor_sources(tensors, quantize=policy, metadata=meta)
        return {s.name: s.info.element.name.removeprefix("ggml.") for s in described}

    mix = types(QuantizePolicy.parse("q4_k_m"))
    assert (mix["blk.0.ffn_down.weight"], mix["blk.4.ffn_down.weight"]) == ("q6_k", "q4_k")
    assert mix["output.weight"] == "q6_k"
    pure = types(QuantizePolicy.parse("q4_k_m", pure=True))
    assert set(pure.values()) == {"q4_k"}
    glob = types(QuantizePolicy.parse("blk.0.*=q5_0,q4_k_m"))
    assert glob["blk.0.ffn_down.weight"] == "q5_0"
    regex = types(QuantizePolicy.parse("q4_k", tensor_types=["BLK\\.[0-3]\\.=q8_0"]))
    # llama.cpp's counters move only for the tensors its rules choose: blk.4 is the
    # first ffn_down they see, so use_more_bits(0, 8) gives it Q6_K
    got = [regex[f"blk.{i}.ffn_down.weight"] for i in (0, 3, 4, 5)]
    assert got == ["q8_0", "q8_0", "q6_k", "q4_k"]
    out = types(QuantizePolicy.parse("q4_k", output_tensor_type="q8_0"))
    assert out["output.weight"] == "q8_0"
    kept = types(QuantizePolicy.parse("q4_k", leave_output_tensor=True))
    assert kept["output.weight"] == "f32"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"default": "nvfp4", "pure": True},
            r"^expected a llama-quantize file type as the default for pure",
        ),
        ({"pure": True}, r"found no default$"),
        (
            {"default": "q4_k", "output_tensor_type": "q9"},
            r"^output_tensor_type: expected a GGML type",
        ),
        ({"default": "q4_k", "tensor_types": ["x"]}, r"^tensor_types: expected 'PATTERN=TYPE'"),
    ],
)
def test_flags_need_a_file_type_and_valid_types(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(KilnError) as info:
        QuantizePolicy(**kwargs)
    assert info.value.kind == "TYPE"
    assert re.search(message, info.value.message), info.value.message


def test_a_bare_ggml_type_without_a_file_type_keeps_the_every_tensor_meaning() -> None:
    assert QuantizePolicy.parse("nvfp4").file_type is None
    got = {s.name: s for s in sources.tensor_sources(model(), quantize="mxfp4")}
    assert got["positions"].kept is not None
    assert got["positions"].rule is None
    assert got["blk.0.attn_q.weight"].info.element.name == "ggml.mxfp4"


# -- which tensors, and why ----------------------------------------------------------


def test_what_is_quantized_and_why_the_others_keep_their_type() -> None:
    tensors = {
        **model(),
        "flags": np.zeros((2, 32), bool),
        "scalar": np.float32(1.5),
        "blocks": quantize(rand((2, ROW)), "Q8_0"),
        "fp8": Payload(5, memoryview(bytes(64)), (2, 32)),
    }
    not_float = "is not a float type: Q8_0 quantizes f32, f16, bf16 and f64 tensors"
    assert quantize_kept(tensors, "*=q8_0") == [
        KeptTensor(
            "blk.0.attn_norm.weight", "f32", "a 1-D tensor: Q8_0 quantizes rows of two dims or more"
        ),
        KeptTensor("positions", "i32", f"i32 {not_float}"),
        KeptTensor(
            "odd.weight",
            "f32",
            f"rows of {ROW + 1} elements are not a whole number of Q8_0 blocks (32 elements each)",
        ),
        KeptTensor("flags", "bool", f"bool {not_float}"),
        KeptTensor("scalar", "f32", "a 0-D tensor: Q8_0 quantizes rows of two dims or more"),
        KeptTensor("blocks", "ggml.q8_0", "already GGML Q8_0 blocks (kiln_np does not requantize)"),
        KeptTensor("fp8", "f8e4m3", f"f8e4m3 {not_float}"),
    ]
    described = sources.tensor_sources(tensors, quantize="*=q8_0")
    quantized = [s.name for s in described if s.quantized is not None]
    assert quantized == [
        "token_embd.weight",
        "blk.0.attn_q.weight",
        "blk.0.ffn_down.weight",
        "blk.0.ffn_up.weight",
    ]
    assert quantize_kept(tensors, None) == []


def test_without_a_default_unmatched_tensors_keep_their_type_and_are_listed() -> None:
    policy = QuantizePolicy.parse("*.attn_q.*=q8_0,*norm*=f32")
    kept = {k.name: k.reason for k in quantize_kept(model(), policy)}
    assert "blk.0.attn_q.weight" not in kept
    assert "blk.0.attn_norm.weight" not in kept
    assert kept["token_embd.weight"] == (
        "no pattern of the policy matches it and it has no default type"
    )
    assert len(kept) == len(model()) - 2


def test_a_float_target_names_the_float_tensors_of_any_shape() -> None:
    p = QuantizePolicy.parse("*=f16")
    info = kiln_np.payload_info
    assert decide(p, "v", info("f32", (3,))) == kiln_np.Code.F16
    assert decide(p, "v", info("f16", (3,))) is None  # already so: written as it is
    assert decide(p, "v", info("i8", (3,))) == (
        "i8 is not a float type: f16 is stored as f32, f16, bf16 and f64 tensors"
    )
    assert decide(p, "e", info("f32", (0, 32))) == kiln_np.Code.F16
    assert decide(QuantizePolicy.parse("q8_0"), "e", info("f32", (0, 32))) == (
        "an empty tensor: Q8_0 has no blocks to write"
    )


# -- the bytes -----------------------------------------------------------------------


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("source", ["memory", "safetensors", "gguf"])
def test_quantized_bytes_are_gguf_quantize_s_and_read_back(
    name: str, source: str, tmp_path: Path
) -> None:
    tensors = model()
    given: Any = tensors
    if source != "memory":
        path = tmp_path / f"m.{source}"
        kiln_np.save_weights(path, tensors, format=source)
        given = kiln_np.open_weights(path)
    out = tmp_path / "o.gguf"
    assert kiln_np.save_weights(out, given, format="gguf", quantize=f"*={name.lower()}") == [
        str(out)
    ]
    with kiln_np.open_weights(out) as got:
        assert list(got) == list(given)
        for key in ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight"):
            expected = quantize(tensors[key], name)
            assert got[key].info.layout == expected.layout, key
            assert got[key].shape == tensors[key].shape
            assert payload_bytes(got[key]) == bytes(expected.data), key
            assert bits(dequantize(got[key].payload())) == bits(dequantize(expected))
        up = quantize(tensors["blk.0.ffn_up.weight"], name)  # f64: to float32 first
        assert payload_bytes(got["blk.0.ffn_up.weight"]) == bytes(up.data)
        up32 = quantize(tensors["blk.0.ffn_up.weight"].astype(np.float32), name)
        assert bytes(up.data) == bytes(up32.data)
        for key in ("blk.0.attn_norm.weight", "positions", "odd.weight"):
            assert payload_bytes(got[key]) == bits(tensors[key]), key


def test_float32_bytes_in_memory_not_aligned_are_copied(tmp_path: Path) -> None:
    x = rand((2, 64))
    raw = bytearray(1 + x.nbytes)
    raw[1:] = x.tobytes()
    misaligned = Payload(kiln_np.Code.F32, memoryview(raw)[1:], x.shape)
    out = tmp_path / "o.gguf"
    kiln_np.save_weights(out, {"x": misaligned}, format="gguf", quantize="*=q8_0")
    with kiln_np.open_weights(out) as got:
        assert payload_bytes(got["x"]) == bytes(quantize(x, "q8_0").data)


def test_chunk_boundaries_and_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 100 elements a chunk: 96 for Q8_0 (3 blocks), so rows of 256 straddle chunks
    monkeypatch.setattr(sources, "_QUANTIZE_CHUNK", 100)
    tensors = {"a": rand((5, 256)), "h": rand((3, 7, 64), np.float16), "n": rand((101,))}
    src = tmp_path / "m.safetensors"
    kiln_np.save_weights(src, tensors, format="safetensors")
    done: list[int] = []
    for given in (tensors, kiln_np.open_weights(src)):
        out = tmp_path / "o.gguf"
        kiln_np.save_weights(
            out, given, format="gguf", quantize="n=f16,*=q8_0", progress=done.append
        )
        with kiln_np.open_weights(out) as got:
            assert payload_bytes(got["a"]) == bytes(quantize(tensors["a"], "q8_0").data)
            assert payload_bytes(got["h"]) == bytes(quantize(tensors["h"], "q8_0").data)
            assert payload_bytes(got["n"]) == bits(tensors["n"].astype(np.float16))
            assert sum(done) == got.byte_length
        done.clear()


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", ["f32", "f16", "bf16"])
def test_float_targets_widen_exactly_and_narrow_to_nearest_even(
    src: str, dst: str, tmp_path: Path
) -> None:
    with np.errstate(over="ignore"):
        values = np.array(
            [[1.0, -0.0, 1 + 2**-12, 65504.0, 65520.0, 1e-8, np.inf, -np.inf, 3.0e38, 1 / 3]],
            np.float64,
        ).astype(FLOATS[src])
    out = tmp_path / "o.gguf"
    kiln_np.save_weights(out, {"v": values}, format="gguf", quantize=f"v={dst}")
    with np.errstate(over="ignore"):
        expected = values.astype(np.float32).astype(FLOATS[dst])  # f64: to float32 first
    with kiln_np.open_weights(out) as got:
        assert got["v"].info.element.name == dst
        assert payload_bytes(got["v"]) == bits(expected)
    assert read_gguf(out).tensors[0].ggml.name == dst.upper()


def test_f64_to_f16_rounds_twice_as_llama_cpp_s_converters_do(tmp_path: Path) -> None:
    # 1 + 2**-11 + 2**-40: float32 rounds it to 1 + 2**-11 (a tie for f16), which goes even
    v = np.array([1 + 2**-11 + 2**-40], np.float64)
    out = tmp_path / "o.gguf"
    kiln_np.save_weights(out, {"v": v}, format="gguf", quantize="*=f16")
    with kiln_np.open_weights(out) as got:
        assert np.frombuffer(got["v"].payload().data, np.float16).tolist() == [1.0]
    assert v.astype(np.float16).tolist() == [1.0009765625]  # once: up


# -- NaN and infinity: TYPE, nothing written -----------------------------------------


@pytest.mark.parametrize("bad", [np.nan, -np.inf])
@pytest.mark.parametrize("target", ["gguf", "kiln"])
def test_a_nan_in_the_third_tensor_leaves_no_output(
    bad: float, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "_QUANTIZE_CHUNK", 64)  # the NaN's chunk is not the first
    third = rand((4, 64), seed=3)
    third[2, 5] = bad
    tensors = {"a": rand((2, 64)), "b": rand((3, 64)), "c": third, "d": rand((2, 64))}
    with pytest.raises(KilnError) as direct:
        quantize(third, "q8_0")
    out = tmp_path / ("o.gguf" if target == "gguf" else "o")
    with pytest.raises(KilnError) as info:
        kiln_np.save_weights(out, tensors, format=target, quantize="*=q8_0")
    assert info.value.kind == "TYPE"
    assert info.value.message == f"tensor 'c': {direct.value.message}"
    assert "at index (2, 5)" in info.value.message
    assert os.listdir(tmp_path) == []


def test_f64_beyond_float32_s_range_is_named_as_such(tmp_path: Path) -> None:
    x = np.zeros((1, 32))
    x[0, 7] = 1e39
    with pytest.raises(KilnError) as direct, np.errstate(over="ignore"):
        quantize(x, "q8_0")
    with pytest.raises(KilnError) as info:
        kiln_np.save_weights(tmp_path / "o.gguf", {"x": x}, format="gguf", quantize="*=q8_0")
    assert info.value.message == f"tensor 'x': {direct.value.message}"
    assert "found 1e+39 (beyond float32's range) at index (0, 7)" in info.value.message


def test_a_nan_to_store_as_another_float_type_is_type_naming_the_index(tmp_path: Path) -> None:
    v = np.array([[1.0, 2.0], [np.nan, 3.0]], np.float32)
    with pytest.raises(KilnError) as info:
        kiln_np.save_weights(tmp_path / "o.gguf", {"v": v}, format="gguf", quantize="*=bf16")
    assert info.value.kind == "TYPE"
    assert info.value.message == (
        "tensor 'v': expected no NaN to store as bf16 (converters do not keep a NaN's bits "
        "alike), found nan at index (1, 0)"
    )
    assert os.listdir(tmp_path) == []
    # the type it has already: its bytes, NaN and all
    kiln_np.save_weights(tmp_path / "o.gguf", {"v": v}, format="gguf", quantize="*=f32")
    with kiln_np.open_weights(tmp_path / "o.gguf") as got:
        assert payload_bytes(got["v"]) == bits(v)


# -- the files -----------------------------------------------------------------------


def test_gguf_to_gguf_keeps_metadata_and_blocks(tmp_path: Path) -> None:
    src = tmp_path / "m.gguf"
    meta = {"general.architecture": "llama", "llama.block_count": np.uint32(1), "x.f": 0.5}
    tensors = {**model(), "q": quantize(rand((2, 64)), "q8_0")}
    kiln_np.save_weights(src, tensors, format="gguf", metadata=meta)
    out = tmp_path / "o.gguf"
    with kiln_np.open_weights(src) as given:
        policy = QuantizePolicy.parse("q8_0,*norm*=f32,token_embd.*=f16")
        kept = quantize_kept(given, policy)
        assert ("q", "ggml.q8_0") in [(k.name, k.type) for k in kept]
        kiln_np.save_weights(out, given, format="gguf", metadata=given.metadata, quantize=policy)
        before = read_gguf(src)
    after = read_gguf(out)
    # llama-quantize's Q8_0 file: the source's keys, then its two (issue 38)
    added = {"general.quantization_version": 2, "general.file_type": 7}
    assert dict(after.metadata) == dict(before.metadata) | added
    u32 = dict.fromkeys(added, "uint32")
    assert dict(after.metadata.types) == dict(before.metadata.types) | u32
    with kiln_np.open_weights(out) as got:
        assert payload_bytes(got["q"]) == bytes(tensors["q"].data)
        assert got["token_embd.weight"].info.element.name == "f16"
        assert payload_bytes(got["token_embd.weight"]) == bits(tensors["token_embd.weight"])


def test_gguf_py_reads_the_types_and_shapes(tmp_path: Path) -> None:
    out = tmp_path / "o.gguf"
    tensors = model()
    kiln_np.save_weights(out, tensors, format="gguf", quantize="*norm*=f16,*=q8_0")
    reader = gguf.GGUFReader(str(out))
    found = {t.name: (t.tensor_type.name, t.shape.tolist()) for t in reader.tensors}
    assert found == {
        "token_embd.weight": ("Q8_0", [ROW, 4]),
        "blk.0.attn_norm.weight": ("F16", [ROW]),
        "blk.0.attn_q.weight": ("Q8_0", [ROW, 3]),
        "blk.0.ffn_down.weight": ("Q8_0", [2 * ROW, 2]),
        "blk.0.ffn_up.weight": ("Q8_0", [ROW, 3, 2]),
        "positions": ("I32", [ROW, 2]),
        "odd.weight": ("F32", [ROW + 1, 2]),
    }
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert q.data.tobytes() == bytes(quantize(tensors["blk.0.attn_q.weight"], "q8_0").data)
    values = gguf.quants.dequantize(q.data, gguf.GGMLQuantizationType.Q8_0)
    assert bits(values) == bits(dequantize(quantize(tensors["blk.0.attn_q.weight"], "q8_0")))


def test_a_kiln_directory_takes_the_blocks(tmp_path: Path) -> None:
    out = tmp_path / "w"
    tensors = model()
    kiln_np.save_weights(out, tensors, format="kiln", quantize="q8_0")
    with kiln_np.open_weights(out, verify=True) as got:
        t = got["blk.0.ffn_down.weight"]
        expected = quantize(tensors["blk.0.ffn_down.weight"], "q8_0")
        assert (t.info.code, t.info.layout) == (expected.code, expected.layout)
        assert payload_bytes(t) == bytes(expected.data)
        assert payload_bytes(got["positions"]) == bits(tensors["positions"])


def test_safetensors_refuses_quantize_before_writing(tmp_path: Path) -> None:
    out = tmp_path / "o.safetensors"
    message = (
        r"^TYPE: expected quantize only for a format that holds GGML blocks \(gguf, kiln, zarr\), "
        r"found quantize='Q8_0' for 'safetensors'$"
    )
    with pytest.raises(KilnError, match=message):
        kiln_np.save_weights(out, model(), format="safetensors", quantize="q8_0")
    with pytest.raises(KilnError, match=message):
        save_weights_paths(out, model(), format="safetensors", quantize="q8_0")
    assert os.listdir(tmp_path) == []


def test_quantize_and_dequantize_together_are_type(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match=r"^TYPE: expected dequantize or quantize, not both: "):
        kiln_np.save_weights(
            tmp_path / "o.gguf", model(), format="gguf", dequantize="f32", quantize="q8_0"
        )
    assert os.listdir(tmp_path) == []


def test_splits_are_cut_by_the_quantized_sizes(tmp_path: Path) -> None:
    tensors = {"a": rand((8, 64)), "b": rand((8, 64))}  # 2 KiB each; 544 bytes as Q8_0
    out = tmp_path / "m.gguf"
    assert len(save_weights_paths(out, tensors, format="gguf", max_shard_size=1100)) == 2
    paths = save_weights_paths(out, tensors, format="gguf", max_shard_size=1100, quantize="*=q8_0")
    assert paths == [str(out)]
    names = kiln_np.save_weights(out, tensors, format="gguf", max_shard_size=600, quantize="*=q8_0")
    assert [os.path.basename(p) for p in names] == [f"m-0000{i}-of-00002.gguf" for i in (1, 2)]
    with kiln_np.open_weights(names[0]) as got:
        assert payload_bytes(got["b"]) == bytes(quantize(tensors["b"], "q8_0").data)


# -- memory --------------------------------------------------------------------------


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_memory_is_bounded_buffers_not_a_tensor(tmp_path: Path, dtype: str) -> None:
    # 16 Mi elements: 64 MiB of float32 (32 MiB of bf16) in; 17 MiB of blocks out
    src = tmp_path / "m.safetensors"
    big = np.ones((2048, 8192), FLOATS[dtype])
    kiln_np.save_weights(src, {"a": big, "b": np.ones(4)}, format="safetensors")
    del big
    out = tmp_path / "o.gguf"
    with kiln_np.open_weights(src) as given:
        peak = _peak(lambda: kiln_np.save_weights(out, given, format="gguf", quantize="*=q8_0"))
    assert peak <= 16 << 20, peak  # 8 MiB of source bytes, a float32 buffer (bf16), 2 MiB out
    with kiln_np.open_weights(out) as got:
        assert got["a"].byte_length == (16 << 20) // 32 * 34


# -- an architecture llama.cpp does not know (issue 38, item 5) -------------------------


def test_a_diffusion_model_gets_the_generic_rules_and_ggml_s_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A flux-like GGUF (as ComfyUI-GGUF writes them): an architecture llama.cpp does not
    # load, no block count. llama-quantize refuses it; kiln_np quantizes it by the
    # generic rules, each tensor's bytes kiln_np.gguf.quantize's (ggml's, as the golden
    # vectors of tests/fixtures/ggml/make_ggml_quant_golden.py hold it to, via ctypes).
    tensors = {
        "img_in.weight": rand((4, 64), np.float16, 1),  # rows of 64: not whole Q4_K blocks
        "img_in.bias": rand((4,), np.float32, 2),
        "double_blocks.0.img_attn.qkv.weight": rand((6, 256), np.float16, 3),
        "double_blocks.0.img_mlp.0.weight": rand((8, 256), np.float16, 4),
        "final_layer.linear.weight": rand((2, 512), np.float32, 5),
    }
    src, out = tmp_path / "flux.gguf", tmp_path / "flux-Q4_K_M.gguf"
    kiln_np.save_weights(src, tensors, format="gguf", metadata={"general.architecture": "flux"})
    assert main(["convert", str(src), str(out), "--quantize", "Q4_K_M"]) == 0
    err = capsys.readouterr().err
    assert "note: no 'flux.block_count' (llama.cpp would not load the model): the generic " in err
    with kiln_np.open_weights(out) as got:
        types = {n: t.info.element.name for n, t in got.items()}
        assert types == {
            "double_blocks.0.img_attn.qkv.weight": "ggml.q4_k",
            "double_blocks.0.img_mlp.0.weight": "ggml.q4_k",
            "final_layer.linear.weight": "ggml.q4_k",
            "img_in.bias": "f32",  # not a weight: kept
            "img_in.weight": "ggml.q5_0",  # llama.cpp's fallback for Q4_K on rows of 64
        }
        for name, t in got.items():
            if t.info.layout is not None:
                block = t.info.layout.name.removeprefix("ggml.")
                assert payload_bytes(t) == bytes(quantize(tensors[name], block).data), name
        assert got.metadata["general.file_type"] == 15
        assert list(got.metadata)[-2:] == ["general.quantization_version", "general.file_type"]
