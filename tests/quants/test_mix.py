"""llama-quantize's file types and flags (``kiln_np._quants.mix``): each flag on a
small llama, the fallbacks, the refusals, hostile metadata and tensors.

``test_mix_snapshots`` (llama.cpp's 12 snapshots) and ``test_mix_dry_runs``
(``llama-quantize --dry-run`` itself) hold the rules as a whole; the cases here
say what each flag and check does, and that each can fail.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln_np import KilnError
from kiln_np._quants.filetypes import COPY, OPTIONS, quantize_option
from kiln_np._quants.mix import (
    GGML_TYPE_NAMES,
    Choice,
    choose_types,
    llama_order_key,
    model_facts,
)
from kiln_np._quants.mix_patterns import compile_pattern, name_bytes
from kiln_np._quants.mix_rules import layer_of
from kiln_np.gguf import TYPES

F32, F16, Q4_K = 0, 1, 12


def llama(
    layers: int = 8,
    *,
    heads: tuple[int, int] = (8, 2),
    down: int = 512,
    tied: bool = False,
    arch: str = "llama",
    experts: int = 0,
    **meta: object,
) -> tuple[list[tuple[str, tuple[int, ...], int]], dict[str, object]]:
    """A llama's tensors (llama.cpp's order) and metadata: 2-row matrices of
    rows of 256, ``ffn_down`` rows of ``down``."""
    tensors = [("token_embd.weight", (4, 256), F16), ("output_norm.weight", (256,), F32)]
    tensors += [] if tied else [("output.weight", (4, 256), F16)]
    for i in range(layers):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (256,), F32)]
        tensors += [(b + f"attn_{p}.weight", (2, 256), F16) for p in ("q", "k", "v", "output")]
        if experts:
            tensors += [
                (b + f"ffn_{p}_exps.weight", (experts, 2, 256), F16) for p in ("gate", "up")
            ]
            tensors += [(b + "ffn_down_exps.weight", (experts, 2, down), F16)]
        else:
            tensors += [(b + f"ffn_{p}.weight", (2, 256), F16) for p in ("gate", "up")]
            tensors += [(b + "ffn_down.weight", (2, down), F16)]
    tensors.sort(key=lambda t: llama_order_key(t[0]))
    metadata = {
        "general.architecture": arch,
        f"{arch}.block_count": layers,
        f"{arch}.attention.head_count": heads[0],
        f"{arch}.attention.head_count_kv": heads[1],
        **({f"{arch}.expert_count": experts} if experts else {}),
        **{f"{arch}.{k}": v for k, v in meta.items()},
    }
    return tensors, metadata


def types(choices: list[Choice]) -> dict[str, str]:
    return {c.name: c.type_name for c in choices}


def chosen(ftype: str, model: Any = None, **flags: Any) -> dict[str, str]:
    tensors, metadata = model or llama()
    return types(choose_types(ftype, tensors, metadata, **flags))


# -- the tables ------------------------------------------------------------------


def test_file_types_are_llama_quantizes_options() -> None:
    assert len(OPTIONS) == 39
    assert [OPTIONS[n].option for n in ("Q3_K", "Q4_K", "Q5_K")] == ["Q3_K_M", "Q4_K_M", "Q5_K_M"]
    # A number finds its row (COPY writes 0 too, but 0 is F32's row).
    assert [quantize_option(n).option for n in (0, 12, 15, 17, "7")] == [
        "F32",
        "Q3_K_M",
        "Q4_K_M",
        "Q5_K_M",
        "Q8_0",
    ]
    assert quantize_option("copy") is COPY
    assert quantize_option("iq4_xs").default == "IQ4_XS"
    assert (quantize_option("IQ2_S").default, quantize_option("IQ2_M").default) == (
        "IQ2_XS",
        "IQ2_S",
    )


@pytest.mark.parametrize("bad", ["Q4_K_X", "NVFP4", 4, 39, True, "", " q8_0", None, 1.0])
def test_unknown_file_types_are_refused(bad: Any) -> None:
    with pytest.raises(KilnError, match="expected a llama-quantize file type"):
        quantize_option(bad)


def test_type_names_are_gguf_types_names() -> None:
    assert {i: row.name for i, row in TYPES.items()} == GGML_TYPE_NAMES


# -- the model's facts -------------------------------------------------------------


def test_the_70b_class_follows_each_loader() -> None:
    def cls(arch: str, layers: int, heads: tuple[int, int] = (8, 2), **meta: object) -> bool:
        return model_facts(
            llama(1, heads=heads, arch=arch)[1]
            | {f"{arch}.block_count": layers, **{f"{arch}.{k}": v for k, v in meta.items()}}
        ).class_70b

    assert cls("llama", 80)
    assert cls("llama-embed", 80)
    assert not cls("llama", 80, (8, 8))  # 65B: as many key/value heads as heads
    assert not cls("llama", 80, expert_count=8)  # 8 experts: the 8x7B rules
    assert cls("llama", 81, nextn_predict_layers=1)  # next-token layers do not count
    assert cls("qwen2", 80, (8, 8))
    assert cls("deci", 80)
    assert cls("olmo", 80)
    assert cls("jais2", 68)
    assert not cls("jais2", 80)
    assert not cls("qwen3", 80)
    assert not cls("llama", 79)


def test_per_layer_head_counts_read_layer_0() -> None:
    meta = llama(3)[1] | {"llama.attention.head_count_kv": np.array([0, 2, 2], np.uint32)}
    assert model_facts(meta).n_gqa == 0
    meta["llama.attention.head_count_kv"] = [4, 2, 2]
    assert model_facts(meta).n_gqa == 2
    del meta["llama.attention.head_count_kv"]  # defaults to the query heads
    assert model_facts(meta).n_gqa == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"general.architecture": b"llama"}, "architecture's name"),
        ({"llama.block_count": 0}, "in 1..512, found 0"),
        ({"llama.block_count": 513}, "in 1..512, found 513"),
        ({"llama.block_count": True}, "found bool"),
        ({"llama.block_count": 8.0}, "found float"),
        ({"llama.block_count": "8"}, "found str"),
        ({"llama.expert_count": 1025}, "in 0..1024"),
        ({"llama.expert_count": -1}, "found -1"),
        ({"llama.nextn_predict_layers": 9}, "in 0..8"),
        (
            {"llama.attention.head_count": [8] * 7},
            "an array of 8 .one per block., found an array of 7",
        ),
        ({"llama.attention.head_count": np.zeros(8, np.float32)}, "found float32"),
        ({"llama.attention.head_count_kv": np.zeros((8, 1), np.uint32)}, "found ndarray"),
        ({"llama.attention.head_count_kv": 2**32}, "in 0..4294967295"),
        ({"llama.attention.head_count_kv": ["2"] * 8}, "found str"),
    ],
)
def test_hostile_metadata_is_refused(change: dict[str, object], message: str) -> None:
    tensors, metadata = llama()
    metadata |= change
    with pytest.raises(KilnError, match=message) as info:
        choose_types("Q4_K_M", tensors, {k: v for k, v in metadata.items() if v is not None})
    assert info.value.kind == "TYPE"


@pytest.mark.parametrize(
    ("change", "missing"),
    [
        ({"general.architecture": None}, "general.architecture"),
        ({"llama.block_count": None}, "llama.block_count"),
    ],
)
def test_a_model_llama_cpp_would_not_load_gets_the_generic_rules(
    change: dict[str, object], missing: str
) -> None:
    tensors, metadata = llama(8)
    metadata = {k: v for k, v in (metadata | change).items() if v is not None}
    model = model_facts(metadata, layers=8)
    assert model.generic.startswith(f"no {missing!r} (llama.cpp would not load the model)")
    assert (model.n_layer, model.n_head, model.n_expert, model.class_70b) == (8, 0, 0, False)
    got = types(choose_types("Q4_K_M", tensors, metadata))
    # The layers are counted from the names: use_more_bits picks the same layers.
    assert got == types(
        choose_types(
            "Q4_K_M", tensors, {**metadata, "general.architecture": "x", "x.block_count": 8}
        )
    )
    assert got["blk.0.ffn_down.weight"] == "Q6_K"
    assert got["blk.4.ffn_down.weight"] == "Q4_K"


# -- the flags -----------------------------------------------------------------------


def test_the_q4_k_m_mix() -> None:
    got = chosen("Q4_K_M")
    assert got["output.weight"] == "Q6_K"
    assert got["token_embd.weight"] == "Q4_K"
    assert got["output_norm.weight"] == "F32"
    # use_more_bits over 8 attn_v / 8 layers: 0 and 7 (the eighths), then every third
    assert [got[f"blk.{i}.attn_v.weight"] for i in range(8)] == [
        "Q6_K",
        "Q4_K",
        "Q4_K",
        "Q6_K",
        "Q4_K",
        "Q4_K",
        "Q6_K",
        "Q6_K",
    ]
    assert got["blk.3.ffn_down.weight"] == "Q6_K"
    assert got["blk.2.ffn_down.weight"] == "Q4_K"


def test_pure_gives_every_quantizable_tensor_the_default() -> None:
    got = chosen("Q4_K_M", pure=True)
    assert {t for n, t in got.items() if "norm" not in n} == {"Q4_K"}
    # but rows that are not whole blocks still fall back
    assert chosen("Q2_K", llama(down=1408), pure=True)["blk.0.ffn_down.weight"] == "Q4_0"


def test_output_and_token_embedding_types() -> None:
    got = chosen("Q4_K_M", output_tensor_type="q8_0", token_embedding_type="Q5_0")
    assert (got["output.weight"], got["token_embd.weight"]) == ("Q8_0", "Q5_0")
    # given outright: no fallback, whatever the rows
    model = llama(tied=True)
    model[0][:] = [(n, (4, 1408) if "embd" in n else s, t) for n, s, t in model[0]]
    assert chosen("Q4_K_M", model, token_embedding_type="q4_k")["token_embd.weight"] == "Q4_K"
    # tied embeddings follow the output's rule, then the fallback: 1408 rows -> Q5_0
    assert chosen("Q4_K_M", model, output_tensor_type="q4_k")["token_embd.weight"] == "Q5_0"
    assert chosen("Q4_K_M", model)["token_embd.weight"] == "Q8_0"  # not whole Q4_K blocks


def test_tensor_type_patterns() -> None:
    flags = {"tensor_types": [r"BLK\.0\.attn_v=q8_0", "attn_v=iq4_nl", "ffn_down=Q6_K"]}
    got = chosen("Q4_K_M", **flags)
    assert got["blk.0.attn_v.weight"] == "Q8_0"  # the first that matches wins
    assert {got[f"blk.{i}.attn_v.weight"] for i in range(1, 8)} == {"IQ4_NL"}
    assert chosen("F16", **flags)["blk.0.attn_v.weight"] == "F16"  # only where quantized
    assert chosen("Q4_K_M", llama(down=1408), **flags)["blk.0.ffn_down.weight"] == "Q8_0"
    # a tensor a pattern names skips the mix, and its counters: the next attn_v is the first
    got = chosen("Q4_K_M", tensor_types=[r"blk\.0\.attn_v=q8_0"])
    assert got["blk.1.attn_v.weight"] == "Q6_K"
    assert chosen("Q4_K_M")["blk.1.attn_v.weight"] == "Q4_K"


def test_per_layer_token_embd_follows_the_embedding_type_unless_named() -> None:
    tensors, metadata = llama()
    tensors.insert(0, ("per_layer_token_embd.weight", (4, 256), F16))
    flags: dict[str, Any] = {"token_embedding_type": "q8_0"}
    assert (
        types(choose_types("Q4_K_M", tensors, metadata, **flags))["per_layer_token_embd.weight"]
        == "Q8_0"
    )
    flags["tensor_types"] = ["per_layer=q4_0"]
    got = types(choose_types("Q4_K_M", tensors, metadata, **flags))
    assert (got["per_layer_token_embd.weight"], got["token_embd.weight"]) == ("Q4_0", "Q8_0")


def test_leave_output_tensor() -> None:
    got = chosen("Q4_K_M", leave_output_tensor=True)
    assert got["output.weight"] == "F16"
    assert got["token_embd.weight"] == "Q4_K"  # still not tied: the output is there


def test_prune_layers_drops_and_renumbers() -> None:
    tensors, metadata = llama(4)
    choices = choose_types("Q8_0", tensors, metadata, prune_layers=[2, 1, 2])
    names = [c.name for c in choices]
    assert "blk.2.attn_q.weight" not in names
    assert "blk.3.attn_q.weight" not in names
    moved = next(c for c in choices if c.source == "blk.3.attn_q.weight")
    assert moved.name == "blk.1.attn_q.weight"
    assert len(choices) == len(tensors) - 2 * 8


def test_copy_and_the_float_file_types() -> None:
    assert set(chosen("COPY").values()) == {"F16", "F32"}
    got = chosen("F32")
    assert (got["blk.0.attn_q.weight"], got["output_norm.weight"]) == ("F32", "F32")
    assert chosen("BF16")["output.weight"] == "BF16"


def test_a_name_of_five_bytes_is_quantized_as_llama_cpp_does() -> None:
    tensors, metadata = llama(1)
    tensors += [("abcde", (2, 256), F16), ("abcdef", (2, 256), F16)]
    got = chosen("Q8_0", (tensors, metadata))
    assert (got["abcde"], got["abcdef"]) == ("Q8_0", "F16")


# -- rows that are not whole blocks -----------------------------------------------------


@pytest.mark.parametrize(
    ("ftype", "down", "expected"),
    [
        ("Q4_K_S", 1408, "Q5_0"),  # (layer 0, in the first eighth: Q5_K -> Q5_1)
        ("Q5_K_S", 1408, "Q5_1"),
        ("Q6_K", 1408, "Q8_0"),
        ("Q3_K_S", 1408, "Q4_0"),
        ("IQ4_XS", 1408, "IQ4_NL"),
        ("TQ2_0", 1408, "Q4_0"),
        ("Q2_0", 96, "Q4_0"),
        ("Q6_K", 100, "F16"),
        ("Q8_0", 100, "F16"),
        ("MXFP4_MOE", 100, "F16"),
    ],
)
def test_fallbacks(ftype: str, down: int, expected: str) -> None:
    choices = choose_types(ftype, *llama(down=down))
    c = next(c for c in choices if c.name == "blk.1.ffn_down.weight")
    assert c.type_name == expected
    assert f"rows of {down} are not whole" in c.rule


def test_no_fallback_for_q1_0() -> None:
    with pytest.raises(KilnError, match="no fallback type for Q1_0") as info:
        choose_types("Q1_0", *llama(down=100))
    assert info.value.kind == "SHAPE"


# -- what only the writing refuses ---------------------------------------------------------


@pytest.mark.parametrize(
    "ftype",
    ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "IQ3_XXS", "IQ3_XS", "Q2_K_S"],
)
def test_types_that_need_an_importance_matrix_are_refused(ftype: str) -> None:
    with pytest.raises(KilnError, match=r"needs an importance matrix, .* \(--imatrix FILE\)"):
        choose_types(ftype, *llama())
    choices = choose_types(ftype, *llama(), dry_run=True)
    assert any(c.needs_imatrix for c in choices)
    exempt = ("token_embd.weight", "output.weight")
    assert not any(c.needs_imatrix for c in choices if c.name in exempt)


@pytest.mark.parametrize(
    "ftype", ["IQ3_S", "IQ3_M", "IQ4_XS", "IQ4_NL", "Q2_K", "TQ1_0", "MXFP4_MOE"]
)
def test_types_that_need_no_importance_matrix(ftype: str) -> None:
    assert not any(c.needs_imatrix for c in choose_types(ftype, *llama()))


def test_requantizing_needs_allow_requantize() -> None:
    tensors, metadata = llama(1)
    tensors = [(n, s, Q4_K if n == "blk.0.attn_q.weight" else t) for n, s, t in tensors]
    with pytest.raises(
        KilnError, match="is Q4_K already: requantizing it as Q8_0 needs allow_requantize"
    ):
        choose_types("Q8_0", tensors, metadata)
    assert (
        chosen("Q8_0", (tensors, metadata), allow_requantize=True)["blk.0.attn_q.weight"] == "Q8_0"
    )
    assert chosen("Q8_0", (tensors, metadata), dry_run=True)["blk.0.attn_q.weight"] == "Q8_0"
    assert chosen("Q4_K_S", (tensors, metadata))["blk.0.attn_q.weight"] == "Q4_K"  # unchanged


# -- mixtures of experts ------------------------------------------------------------------


def test_eight_experts() -> None:
    got = chosen("Q4_K_M", llama(4, experts=8))
    assert (got["blk.0.attn_k.weight"], got["blk.0.attn_v.weight"]) == ("Q8_0", "Q8_0")
    assert got["blk.0.attn_output.weight"] == "Q5_K"
    assert chosen("MXFP4_MOE", llama(4, experts=8))["blk.2.ffn_up_exps.weight"] == "MXFP4"


def test_experts_read_their_layer_from_the_name() -> None:
    tensors, metadata = llama(2, experts=4)
    tensors.append(("experts.ffn_down_exps.weight", (4, 2, 256), F16))
    with pytest.raises(
        KilnError, match=r"expected a name 'blk\.N\.' with N in 0\.\.1 .* found no layer"
    ):
        choose_types("Q4_K_M", tensors, metadata)
    tensors[-1] = ("blk.7.ffn_down_exps.weight", (4, 2, 256), F16)
    with pytest.raises(KilnError, match="found layer 7"):
        choose_types("Q4_K_M", tensors, metadata)


# -- hostile tensors and flags -----------------------------------------------------------


@pytest.mark.parametrize(
    ("tensor", "kind", "message"),
    [
        (["w.weight", (2, 256), 1], "TYPE", "expected .name, shape, GGML type id."),
        (("w.weight", (2, 256)), "TYPE", "expected .name, shape, GGML type id."),
        ((b"w.weight", (2, 256), 1), "TYPE", "expected .name, shape, GGML type id."),
        (("w.weight", (1, 1, 1, 2, 256), 1), "SHAPE", "at most 4 dims"),
        (("w.weight", 256, 1), "SHAPE", "at most 4 dims"),
        (("w.weight", (2, -1), 1), "SHAPE", "each dim of tensor 'w.weight' to be an integer"),
        (("w.weight", (2, 2.0), 1), "SHAPE", "found float"),
        (("w.weight", (2, 256), 4), "TYPE", "id of a GGML type"),
        (("w.weight", (2, 256), True), "TYPE", "id of a GGML type"),
    ],
)
def test_hostile_tensors_are_refused(tensor: Any, kind: str, message: str) -> None:
    tensors, metadata = llama(1)
    with pytest.raises(KilnError, match=message) as info:
        choose_types("Q8_0", [*tensors, tensor], metadata)
    assert info.value.kind == kind


def test_numpy_type_ids_are_read() -> None:
    tensors, metadata = llama(1)
    tensors = [(n, s, np.int32(t)) for n, s, t in tensors]  # type: ignore[misc]
    assert chosen("Q8_0", (tensors, metadata))["blk.0.attn_q.weight"] == "Q8_0"


def test_a_name_twice_is_refused() -> None:
    tensors, metadata = llama(3)
    with pytest.raises(KilnError, match=re.escape("found 'blk.0.attn_q.weight' twice")):
        choose_types("Q8_0", [*tensors, next(t for t in tensors if "attn_q" in t[0])], metadata)
    # blk.02 and blk.2 become one name, blk.1, once layer 1 is pruned
    tensors.append(("blk.02.attn_q.weight", (2, 256), F16))
    assert len(choose_types("Q8_0", tensors, metadata)) == len(tensors)
    with pytest.raises(KilnError, match=re.escape("found 'blk.1.attn_q.weight' twice")):
        choose_types("Q8_0", tensors, metadata, prune_layers=[1])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"output_tensor_type": "q8_1"}, "output_tensor_type: expected a GGML type to write"),
        ({"token_embedding_type": "i8"}, "token_embedding_type: expected a GGML type"),
        ({"token_embedding_type": 8}, "found int 8"),
        (
            {"tensor_types": "attn_v=q8_0"},
            "an iterable of 'PATTERN=TYPE' strings, found the string",
        ),
        ({"tensor_types": ["attn_v"]}, "expected 'PATTERN=TYPE' with a pattern and a type"),
        ({"tensor_types": ["=q8_0"]}, "with a pattern and a type"),
        ({"tensor_types": ["attn_v="]}, "with a pattern and a type"),
        ({"tensor_types": [("attn_v", "q8_0")]}, "with a pattern and a type"),
        (
            {"tensor_types": ["attn_v=q9_0"]},
            "tensor_types entry 'attn_v=q9_0': expected a GGML type",
        ),
        ({"tensor_types": ["(?<=a)b=q8_0"]}, re.escape("found '(?<' at byte 0")),
        ({"prune_layers": [-1]}, "each of prune_layers to be an integer"),
        ({"prune_layers": "1,2"}, "found str"),
    ],
)
def test_hostile_flags_are_refused(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(KilnError, match=message) as info:
        choose_types("Q4_K_M", *llama(), **flags)
    assert info.value.kind == "TYPE"


def test_a_layer_number_past_an_int_is_refused_when_pruning() -> None:
    tensors, metadata = llama(1)
    tensors.append(("blk.99999999999.attn_q.weight", (2, 256), F16))
    assert len(choose_types("Q8_0", tensors, metadata)) == len(tensors)
    with pytest.raises(KilnError, match="a layer number that fits an int, found 99999999999"):
        choose_types("Q8_0", tensors, metadata, prune_layers=[0])
    tensors[-1] = ("blk.000000000001.attn_k.weight", (2, 256), F16)  # stoi reads it: layer 1
    choices = choose_types("Q8_0", tensors, metadata, prune_layers=[0])
    assert choices[-1].name == "blk.0.attn_k.weight"


# -- llama.cpp's reading of names --------------------------------------------------------


def test_layer_of_reads_as_sscanf_does() -> None:
    assert [layer_of(n) for n in ("blk.3.a", "blk.3x", "blk. 7.a", "blk.+2.a", "blk.-5.a")] == [
        3,
        3,
        7,
        2,
        -5,
    ]
    assert [layer_of(n) for n in ("blk.a", "blk", "xblk.1.a", "blk.-.a")] == [None] * 4
    assert layer_of("blk.99999999999.a") == 99999999999 % 2**32 - 2**32 * (
        99999999999 % 2**32 >= 2**31
    )
    assert layer_of("blk." + "9" * 30 + ".a") == -1  # LONG_MAX cut to an int
    assert layer_of("blk.-" + "9" * 30 + ".a") == 0  # LONG_MIN cut to an int


def test_llama_order() -> None:
    names = [
        "blk.10.a",
        "blk.2.b",
        "output.weight",
        "blk.2.a",
        "token_embd.weight",
        "blk.-1.z",
        "a",
    ]
    assert sorted(names, key=llama_order_key) == [
        "a",
        "blk.-1.z",
        "output.weight",
        "token_embd.weight",
        "blk.2.a",
        "blk.2.b",
        "blk.10.a",
    ]
    # bytes order, as std::string compares (a lone surrogate is a byte >= 0x80)
    assert sorted(["b\udcff", "b\u00e9", "bz"], key=llama_order_key) == ["bz", "b\u00e9", "b\udcff"]


@pytest.mark.parametrize(
    ("pattern", "name", "found"),
    [
        ("ATTN_V", "blk.0.attn_v.weight", True),  # lower-cased
        ("attn_v", "blk.0.ATTN_V.weight", False),  # the name is not
        (r"^blk\.1\.", "blk.11.a", False),
        ("weight$", "output.weight\n", False),  # $ is the end, not before a newline
        ("a.b", "a\rb", False),  # '.' stops at \r as at \n
        ("a.b", "a\u00e9b", False),  # a byte at a time: é is two
        ("a..b", "a\u00e9b", True),
        (r"[^]", "x", True),
        (r"[]", "x", False),
        (r"[[a]", "[", True),
        (r"[a-c-e]", "-", True),
        (r"[\d-]", "-", True),
        (r"a\x41", "aA", True),  # an escape lower-cased keeps its meaning here
        (r"\cj", "\n", True),
        (r"a{2}", "baab", True),
        (r"(a)\1", "aa", True),
        (r"(?=b)b", "b", True),
        ("\u00e9", "caf\u00e9", True),
    ],
)
def test_patterns_read_as_ecmascript(pattern: str, name: str, found: bool) -> None:
    assert bool(compile_pattern(pattern).search(name_bytes(name))) is found


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(?<=a)b", "found '(?<' at byte 0"),
        (r"(?P<n>a)", "found '(?p' at byte 0"),  # lower-cased first
        (r"(?i)a", "found '(?i' at byte 0"),
        (r"\Aa", "found the escape '\\a' at byte 0"),
        (r"a\z", "found the escape '\\z' at byte 1"),
        (r"a*+", "found a '+' after a quantifier at byte 2"),
        (r"a{2}+", "found a '+' after a quantifier at byte 4"),
        (r"a{", "found a '{' at byte 1 that is not a {n,m} count"),
        (r"a{x}", "found a '{' at byte 1 that is not a {n,m} count"),
        (r"(a)\12", "found a back-reference of two digits at byte 3"),
        ("[a", "found a '[' at byte 0 that no ']' closes"),
        ("a\\", "found a '\\' that ends the pattern"),
        (r"\u0041", "found the escape '\\u' at byte 0"),
        ("(a", "found missing ), unterminated subpattern"),
        ("*a", "found nothing to repeat"),
    ],
)
def test_patterns_python_would_read_otherwise_are_refused(pattern: str, message: str) -> None:
    with pytest.raises(KilnError, match=re.escape(message)) as info:
        compile_pattern(pattern)
    assert info.value.kind == "TYPE"


# -- any input: choices or KilnError ------------------------------------------------------

_PARTS = st.sampled_from(
    [
        "blk.",
        "0",
        "1",
        "7",
        ".",
        "attn_v",
        "attn_qkv",
        "ffn_down",
        "ffn_gate",
        "_exps",
        "weight",
        "output",
        "token_embd",
        "_norm",
        "per_layer_",
        "\udcff",
        "x",
    ]
)


@given(
    tensors=st.lists(
        st.tuples(
            st.lists(_PARTS, max_size=6).map("".join),
            st.lists(st.integers(0, 600), max_size=4).map(tuple),
            st.sampled_from([0, 1, 8, 12, 30, 4, 99]),
        ),
        max_size=12,
    ),
    meta=st.fixed_dictionaries(
        {
            "general.architecture": st.sampled_from(["llama", "falcon", "qwen2", "zzz"]),
            "llama.block_count": st.integers(-1, 600),
            "llama.expert_count": st.sampled_from([0, 1, 4, 8, 2000]),
            "llama.attention.head_count": st.integers(0, 9),
        }
    ),
    ftype=st.sampled_from(list(OPTIONS)),
    flags=st.fixed_dictionaries(
        {},
        optional={
            "pure": st.booleans(),
            "tensor_types": st.lists(
                st.sampled_from(["attn=q8_0", "blk\\.1=q4_k", "x=f16"]), max_size=2
            ),
            "prune_layers": st.lists(st.integers(0, 3), max_size=2),
            "output_tensor_type": st.sampled_from(["q8_0", "iq2_xxs"]),
            "leave_output_tensor": st.booleans(),
        },
    ),
)
def test_any_input_gives_choices_or_kiln_error(
    tensors: list[Any], meta: dict[str, object], ftype: str, flags: dict[str, Any]
) -> None:
    try:
        choices = choose_types(ftype, tensors, meta, dry_run=True, **flags)
    except KilnError:
        return
    assert len(choices) <= len(tensors)
    assert all(c.type_id in GGML_TYPE_NAMES for c in choices)
