"""The model map: one architecture's Hugging Face checkpoint and its GGUF, both ways.

A GGUF made by llama.cpp's converter (``convert_hf_to_gguf.py``) from a
transformers checkpoint holds the same numbers under other names, some of them
moved.  For each architecture of :data:`ARCHITECTURES` (llama, which mistral is
in GGUF, qwen2, qwen3, qwen3moe, gemma3's text model, phi3, mixtral, which
is llama with experts in GGUF: :func:`gguf_architecture`, gemma2 and qwen2moe)
this module says, as
pure functions of names, shapes, values and metadata:

- **names** (:func:`pairs`, :func:`gguf_name`): each GGUF tensor's Hugging Face
  name, from the generated table ``model_names`` (gguf-py's ``TensorNameMap``
  applied to transformers' checkpoint names);
- **values** (:func:`to_hf`, :func:`to_gguf`), each the other's exact inverse:

  ============================  ==================================================
  llama's ``attn_q``/``attn_k``  rows (and biases) in llama.cpp's rope order: the
                                 converter's ``LlamaModel.permute`` per head
                                 (``n_head`` for Q, ``n_head_kv`` for K), a row
                                 permutation (mixtral's too); qwen2, qwen3 and
                                 the others are not permuted
  ``blk.N.ffn_*_exps``           the experts' tensors stacked on a first axis;
                                 expert ``E`` is the slice ``[E]``
  gemma3's, gemma2's             the scale ``1 + w`` the model applies, added in
  ``*norm.weight``
                                 float32 by the converter: ``w`` is the float32
                                 ``stored - 1``, exact for a bfloat16 ``w`` of at
                                 least about 2**-16 in magnitude
  phi3's ``qkv_proj``,           fused in both: one tensor each (``attn_qkv``,
  ``gate_up_proj``               ``ffn_up``), names only
  ============================  ==================================================

- **what is not a pair**: a tied model has no ``output`` (``lm_head``), and its
  config says ``tie_word_embeddings``; the tensors the converter generates from
  the config (``rope_freqs``, phi3's ``rope_factors_long``/``short``) go back
  into the config (:func:`hf_config`), never into the checkpoint;
- **the config** (:func:`hf_config`, :func:`gguf_metadata`): ``config.json`` from
  the ``<arch>.*`` keys as the converter wrote them, and back.  Float keys are
  float32 in GGUF; they come back as the shortest decimal that is that float32
  (``1e-06``), which is the config's own value whenever it was one.

Nothing here reads a file: ``kiln_np._convert.hf`` streams a GGUF's tensors
through these functions into a Hugging Face directory; ``kiln_np.compare``
pairs a checkpoint with its GGUF through them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError

from .model_names import ARCHITECTURES as _FACTS
from .model_names import NAMES

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "Pair",
    "architecture_of",
    "generation_config",
    "gguf_architecture",
    "gguf_metadata",
    "gguf_name",
    "hf_config",
    "pairs",
    "rope_scaling",
    "to_gguf",
    "to_hf",
]


@dataclass(frozen=True)
class Architecture:
    """One architecture of the map.

    Attributes
    ----------
    name : str
        Its name in the map: the GGUF architecture, but ``"mixtral"``.
    gguf : str
        ``general.architecture`` (``"qwen3moe"``; mixtral's ``"llama"``).
    model_type, hf_class : str
        transformers' ``model_type`` and causal-LM class.
    names : tuple of (str, str)
        ``(GGUF name, Hugging Face name)`` without suffix (``model_names``).
    generated : tuple of str
        GGUF tensors the converter makes from the config.
    permuted : bool
        Q/K rows in llama.cpp's rope order (the converter's ``undo_permute``).
    norm_offset : bool
        Norm weights stored as ``1 + w`` (gemma's ``norm_shift``).
    """

    name: str
    gguf: str
    model_type: str
    hf_class: str
    names: tuple[tuple[str, str], ...]
    generated: tuple[str, ...]
    permuted: bool = False
    norm_offset: bool = False


def _row(name: str, **facts: bool) -> Architecture:
    gguf, model_type, hf_class, generated = _FACTS[name]
    return Architecture(name, gguf, model_type, hf_class, NAMES[name], generated, **facts)


ARCHITECTURES: tuple[Architecture, ...] = (
    _row("llama", permuted=True),  # conversion/llama.py: LlamaModel.undo_permute
    _row("qwen2"),
    _row("qwen3"),
    _row("qwen3moe"),
    _row("gemma3", norm_offset=True),  # conversion/gemma.py: Gemma3Model.norm_shift
    _row("phi3"),
    _row("mixtral", permuted=True),  # conversion/llama.py: MixtralForCausalLM is LlamaModel
    _row("gemma2", norm_offset=True),  # conversion/gemma.py: Gemma2Model.modify_tensors
    _row("qwen2moe"),  # conversion/qwen.py: Qwen2MoeModel
)
"""Every architecture of the map, by its name."""

_BY_GGUF = {a.gguf: a for a in ARCHITECTURES if a.name == a.gguf}
_WITH_EXPERTS = {"llama": next(a for a in ARCHITECTURES if a.name == "mixtral")}
"""The architecture a GGUF of this one is when it has experts (mixtral)."""
_BY_MODEL_TYPE = {a.model_type: a for a in ARCHITECTURES} | {
    "mistral": _BY_GGUF["llama"],  # llama.cpp's converter writes mistral as llama
    "gemma3": _BY_GGUF["gemma3"],  # a Gemma3ForConditionalGeneration's text model
}


def architecture_of(name: object, where: str = "") -> Architecture:
    """The architecture of a GGUF ``general.architecture`` or a transformers
    ``model_type``; TYPE naming the mapped ones otherwise.  A GGUF's ``"llama"``
    is llama: :func:`gguf_architecture` tells mixtral's by its experts.

    >>> architecture_of("qwen3moe").model_type, architecture_of("mistral").gguf
    ('qwen3_moe', 'llama')
    >>> architecture_of("mixtral").gguf, architecture_of("llama").hf_class
    ('llama', 'LlamaForCausalLM')
    """
    found = _BY_GGUF.get(name) or _BY_MODEL_TYPE.get(name) if isinstance(name, str) else None
    if found is None:
        mapped = ", ".join(a.name for a in ARCHITECTURES)
        raise KilnError(
            "TYPE",
            f"{where}expected an architecture of the model map ({mapped}; mistral is llama, "
            f"mixtral llama with experts), found {show_value(name)}",
        )
    return found


def gguf_architecture(
    metadata: Mapping[str, Any], names: Iterable[str], where: str = ""
) -> Architecture:
    """The architecture of a GGUF from its metadata and tensor ``names``: its
    ``general.architecture``, but a llama with experts (``llama.expert_count``
    above 0 and ``*_exps`` tensors, as the converter writes mixtral) is mixtral.

    >>> meta = {"general.architecture": "llama", "llama.expert_count": 8}
    >>> gguf_architecture(meta, ["blk.0.ffn_up_exps.weight"]).hf_class
    'MixtralForCausalLM'
    >>> gguf_architecture(meta, ["blk.0.ffn_up.weight"]).hf_class
    'LlamaForCausalLM'
    """
    arch = architecture_of(metadata.get("general.architecture"), where)
    moe = _WITH_EXPERTS.get(arch.name)
    count = metadata.get(f"{arch.gguf}.expert_count")
    counted = isinstance(count, (int, np.integer)) and not isinstance(count, bool) and count > 0
    if moe is not None and counted and any(_EXPERTS.search(n) for n in names):
        return moe
    return arch


_EXPERTS = re.compile(r"^blk\.[0-9]+\.ffn_[a-z_]*_exps\.")


class Pair(NamedTuple):
    """One Hugging Face tensor and the GGUF tensor it is made from.

    ``expert``: its index in a stacked ``*_exps`` tensor (None otherwise);
    ``transform``: ``"permute"`` (llama's Q/K rows, each head's ``head_rows``
    rows in llama.cpp's rope order),
    ``"offset"`` (gemma's norm, ``1 + w``) or ``""`` (the values as they are).
    """

    hf: str
    gguf: str
    expert: int | None = None
    transform: str = ""
    head_rows: int = 0


def _templates(arch: Architecture) -> list[tuple[re.Pattern[str], str]]:
    """Each GGUF template as a pattern (``{bid}`` a layer) and its HF template."""
    made = []
    for g, h in arch.names:
        pattern = re.escape(g).replace(r"\{bid\}", r"(?P<bid>[0-9]{1,9})")
        made.append((re.compile(pattern + r"\.(?P<suffix>weight|bias)"), h))
    return made


def pairs(
    arch: Architecture, shapes: Mapping[str, tuple[int, ...]], metadata: Mapping[str, Any]
) -> tuple[list[Pair], list[str], list[str]]:
    """The Hugging Face tensors a GGUF's tensors make: ``(pairs, generated,
    unmapped)``, in the GGUF's order (an expert's tensors after one another).

    ``shapes``: each GGUF tensor's element shape (numpy order); ``generated``:
    the tensors the converter made from the config; ``unmapped``: the names the
    map has no Hugging Face name for.

    Raises
    ------
    KilnError
        TYPE when the head counts a permutation needs are missing or do not
        divide the rows.

    >>> arch = architecture_of("llama")
    >>> meta = {"llama.attention.head_count": 4, "llama.attention.head_count_kv": 2}
    >>> made, _, _ = pairs(arch, {"blk.0.attn_k.weight": (32, 64)}, meta)
    >>> made
    [Pair(hf='model.layers.0.self_attn.k_proj.weight', gguf='blk.0.attn_k.weight', expert=None, transform='permute', head_rows=16)]
    """  # noqa: E501
    templates = _templates(arch)
    made: list[Pair] = []
    generated: list[str] = []
    unmapped: list[str] = []
    for name, shape in shapes.items():
        if name.rsplit(".", 1)[0] in arch.generated:
            generated.append(name)
            continue
        hit = next(((m, h) for p, h in templates if (m := p.fullmatch(name))), None)
        if hit is None:
            unmapped.append(name)
            continue
        match, template = hit
        bid = match.groupdict().get("bid")
        hf = template.replace("{bid}", str(int(bid)) if bid is not None else "")
        hf += "." + match["suffix"]
        transform, head_rows = _transform(arch, name, shape, metadata)
        if "{xid}" in hf:
            made += [
                Pair(hf.replace("{xid}", str(e)), name, e, transform, head_rows)
                for e in range(shape[0] if shape else 0)
            ]
        else:
            made.append(Pair(hf, name, None, transform, head_rows))
    return made, generated, unmapped


def _transform(
    arch: Architecture, name: str, shape: tuple[int, ...], metadata: Mapping[str, Any]
) -> tuple[str, int]:
    """What the converter did to tensor ``name`` beyond naming it."""
    base = name.rsplit(".", 1)[0]
    if arch.norm_offset and name.endswith("norm.weight"):
        return "offset", 0
    if arch.permuted and base.endswith((".attn_q", ".attn_k")):
        key = "head_count" if base.endswith(".attn_q") else "head_count_kv"
        heads = metadata.get(f"{arch.gguf}.attention.{key}")
        rows = shape[0] if shape else 0
        if isinstance(heads, (int, np.integer)) and heads > 0 and rows % (2 * heads) == 0:
            return "permute", rows // int(heads)
        raise KilnError(
            "TYPE",
            f"tensor {name!r}: expected {arch.gguf}.attention.{key} to be a count of heads "
            f"that splits its {rows} rows into pairs of halves (llama.cpp's rope order), "
            f"found {show_value(heads)}",
        )
    return "", 0


def gguf_name(arch: Architecture, hf: str) -> tuple[str, int | None] | None:
    """The GGUF tensor holding Hugging Face tensor ``hf``, and its expert index
    in a stacked tensor; None when the map has none.

    >>> gguf_name(architecture_of("qwen3moe"), "model.layers.1.mlp.experts.3.up_proj.weight")
    ('blk.1.ffn_up_exps.weight', 3)
    """
    base, _, suffix = hf.rpartition(".")
    for g, h in arch.names:
        pattern = re.escape(h).replace(r"\{bid\}", r"(?P<bid>[0-9]{1,9})")
        pattern = pattern.replace(r"\{xid\}", r"(?P<xid>[0-9]{1,9})")
        m = re.fullmatch(pattern, base)
        if m is not None:
            found = m.groupdict()
            name = g.replace("{bid}", str(int(found["bid"])) if "bid" in found else "")
            xid = found.get("xid")
            return f"{name}.{suffix}", None if xid is None else int(xid)
    return None


def to_hf(pair: Pair, values: np.ndarray) -> np.ndarray:
    """Hugging Face values from a GGUF tensor's ``values`` (float32; for a stacked
    tensor, the expert's slice): whole head groups of rows at a time, or all of it.

    >>> w = np.arange(8, dtype=np.float32).reshape(4, 2)
    >>> p = Pair("q", "blk.0.attn_q.weight", None, "permute", 4)
    >>> to_hf(p, w)[:, 0].tolist(), to_gguf(p, to_hf(p, w)).tolist() == w.tolist()
    ([0.0, 4.0, 2.0, 6.0], True)
    """
    if pair.transform == "permute":
        return _rope_rows(values, pair.head_rows, to_hf=True)
    if pair.transform == "offset":
        shifted: np.ndarray = np.subtract(values, np.float32(1), dtype=np.float32)
        return shifted
    return values


def to_gguf(pair: Pair, values: np.ndarray) -> np.ndarray:
    """The converter's values of ``pair``'s GGUF tensor from Hugging Face ``values``
    (float32): the exact inverse of :func:`to_hf` (experts are stacked by the
    caller).

    >>> to_gguf(Pair("n", "blk.0.attn_norm.weight", None, "offset"), np.float32([0.5])).tolist()
    [1.5]
    """
    if pair.transform == "permute":
        return _rope_rows(values, pair.head_rows, to_hf=False)
    if pair.transform == "offset":
        shifted: np.ndarray = np.add(values, np.float32(1), dtype=np.float32)
        return shifted
    return values


def _rope_rows(values: np.ndarray, head_rows: int, *, to_hf: bool) -> np.ndarray:
    """llama.cpp's rope row order undone (``to_hf``) or made, over the whole heads
    of ``head_rows`` rows that ``values`` holds: the converter's
    ``w.reshape(n_head, 2, head_rows // 2, ...).swapaxes(1, 2)`` and its inverse."""
    heads, rest = values.shape[0] // head_rows, values.shape[1:]
    halves = (heads, head_rows // 2, 2) if to_hf else (heads, 2, head_rows // 2)
    return values.reshape(*halves, *rest).swapaxes(1, 2).reshape(values.shape)


def permute_group(pair: Pair) -> int:
    """The rows a run of ``pair``'s values must be a multiple of: one head's rows
    for a permuted tensor, else 1.

    >>> permute_group(Pair("q", "q", None, "permute", 16)), permute_group(Pair("n", "n"))
    (16, 1)
    """
    return pair.head_rows if pair.transform == "permute" else 1


# -- the config ---------------------------------------------------------------------

_COMMON: tuple[tuple[str, str, str], ...] = (
    # (GGUF key after "<arch>.", config.json key, kind): TextModel.set_gguf_parameters
    ("block_count", "num_hidden_layers", "int"),
    ("context_length", "max_position_embeddings", "int"),
    ("embedding_length", "hidden_size", "int"),
    ("feed_forward_length", "intermediate_size", "int"),
    ("attention.head_count", "num_attention_heads", "int"),
    ("attention.head_count_kv", "num_key_value_heads", "int"),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps", "float"),
)
_ROPE_BASE = ("rope.freq_base", "rope_theta", "float")
"""Written by every architecture's converter but gemma2's (llama.cpp's default, 10000)."""
_EXTRA: dict[str, tuple[tuple[str, str, str], ...]] = {  # by the map's name
    "qwen3moe": (  # conversion/qwen.py: Qwen2MoeModel
        ("expert_count", "num_experts", "int"),
        ("expert_used_count", "num_experts_per_tok", "int"),
        ("expert_feed_forward_length", "moe_intermediate_size", "int"),
    ),
    "gemma3": (  # conversion/gemma.py: Gemma3Model
        ("attention.sliding_window", "sliding_window", "int"),
        ("rope.freq_base_swa", "rope_local_base_freq", "float"),
        ("final_logit_softcapping", "final_logit_softcapping", "float"),
    ),
    "phi3": (  # conversion/phi.py: Phi3MiniModel
        ("rope.scaling.original_context_length", "original_max_position_embeddings", "int"),
        ("attention.sliding_window", "sliding_window", "int"),
    ),
    "mixtral": (  # conversion/base.py: TextModel, its experts
        ("expert_count", "num_local_experts", "int"),
        ("expert_used_count", "num_experts_per_tok", "int"),
    ),
    "qwen2moe": (  # conversion/qwen.py: Qwen2MoeModel, with the shared expert
        ("expert_count", "num_experts", "int"),
        ("expert_used_count", "num_experts_per_tok", "int"),
        ("expert_feed_forward_length", "moe_intermediate_size", "int"),
        ("expert_shared_feed_forward_length", "shared_expert_intermediate_size", "int"),
    ),
    "gemma2": (  # conversion/gemma.py: Gemma2Model
        ("attn_logit_softcapping", "attn_logit_softcapping", "float"),
        ("final_logit_softcapping", "final_logit_softcapping", "float"),
        ("attention.sliding_window", "sliding_window", "int"),
    ),
}


def _keys(arch: Architecture) -> tuple[tuple[str, str, str], ...]:
    rope = () if arch.name == "gemma2" else (_ROPE_BASE,)
    return _COMMON + rope + _EXTRA.get(arch.name, ())


def _number(value: object, kind: str, key: str) -> int | float:
    """A metadata number as config.json holds it: an int, or a float32 as the
    shortest decimal that is that float32."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise KilnError(
            "TYPE", f"metadata key {key!r}: expected a number, found {show_value(value)}"
        )
    if kind == "int":
        if float(value) != int(value) or int(value) < 0:
            raise KilnError(
                "TYPE", f"metadata key {key!r}: expected a count, found {show_value(value)}"
            )
        return int(value)
    return float(str(np.float32(value)))


def hf_config(
    arch: Architecture,
    metadata: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]],
    dtype: str,
    generated: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """``config.json`` of the Hugging Face checkpoint a GGUF's tensors make, from
    its ``<arch>.*`` and tokenizer keys as llama.cpp's converter wrote them, and
    from its tensors (``shapes``: the vocabulary's rows, whether the output is
    tied, which biases there are; ``generated``: the values of the tensors the
    converter generated from the rope scaling, :func:`rope_scaling`); ``dtype``:
    the checkpoint's torch dtype name.

    What the converter writes nowhere is what llama.cpp assumes: qwen3moe's
    expert weights normalized (``norm_topk_prob``), qwen2moe's not, gemma3's sliding window on
    five layers of six, gemma2's on one of two (transformers' default
    ``layer_types``, and its default window 4096 for a GGUF without one, as
    llama.cpp's), the gemmas' attention scale ``1/sqrt(head_dim)`` (the 27B's,
    62 layers for gemma3, 46 for gemma2, ``hidden_size / num_attention_heads``),
    gemma2's rope base 10000 (the converter writes none).

    Raises
    ------
    KilnError
        TYPE for a key of the wrong type, or a missing ``token_embd.weight``.

    >>> meta = {"qwen3.block_count": 2, "qwen3.embedding_length": 64,
    ...         "qwen3.attention.head_count": 4, "qwen3.attention.key_length": 32,
    ...         "qwen3.attention.layer_norm_rms_epsilon": np.float32(1e-6)}
    >>> c = hf_config(architecture_of("qwen3"), meta, {"token_embd.weight": (288, 64)}, "bfloat16")
    >>> c["architectures"], c["head_dim"], c["rms_norm_eps"], c["tie_word_embeddings"]
    (['Qwen3ForCausalLM'], 32, 1e-06, True)
    """
    a = arch.gguf
    config: dict[str, Any] = {"architectures": [arch.hf_class], "model_type": arch.model_type}
    for key, hf, kind in _keys(arch):
        value = metadata.get(f"{a}.{key}")
        if value is not None:
            config[hf] = _number(value, kind, f"{a}.{key}")
    embd = shapes.get("token_embd.weight")
    if embd is None or len(embd) != 2:
        raise KilnError(
            "TYPE",
            f"expected a GGUF of {a} to hold token_embd.weight of 2 dims (the vocabulary's "
            f"rows), found {show_value(embd)}",
        )
    config["vocab_size"] = embd[0]
    config["tie_word_embeddings"] = "output.weight" not in shapes
    # phi3's rope.dimension_count is its rotary part, not the head size; mixtral's
    # config has none but hidden / heads when the converter wrote no key_length
    dims = None if arch.name in ("phi3", "mixtral") else metadata.get(f"{a}.rope.dimension_count")
    head_dim = metadata.get(f"{a}.attention.key_length", dims)
    if head_dim is not None:
        config["head_dim"] = _number(head_dim, "int", f"{a}.attention.key_length")
    _attention_options(arch, config, shapes)
    _rope(arch, config, metadata)
    scaling = rope_scaling(arch, metadata, generated or {})
    if scaling is not None:
        config["rope_scaling"] = scaling
    for key, hf in _TOKENS:  # null where the GGUF names none, not the class's default
        value = metadata.get(f"tokenizer.ggml.{key}")
        config[hf] = None if value is None else _number(value, "int", f"tokenizer.ggml.{key}")
    config["dtype"] = dtype
    return config


_TOKENS: tuple[tuple[str, str], ...] = (
    ("bos_token_id", "bos_token_id"),
    ("eos_token_id", "eos_token_id"),
    ("padding_token_id", "pad_token_id"),
)
"""``tokenizer.ggml.*`` keys and the config's token ids."""


def _attention_options(
    arch: Architecture, config: dict[str, Any], shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """What the tensors say: biases, and the facts llama.cpp assumes."""
    if arch.name in ("llama", "qwen3", "qwen3moe", "gemma3", "gemma2"):
        config["attention_bias"] = "blk.0.attn_q.bias" in shapes
    if arch.name == "llama":
        config["mlp_bias"] = "blk.0.ffn_up.bias" in shapes
    if arch.gguf == "qwen3moe":
        config["norm_topk_prob"] = True  # llama.cpp's qwen3moe graph normalizes them
    if arch.gguf == "qwen2moe":
        config["qkv_bias"] = "blk.0.attn_q.bias" in shapes
        config["norm_topk_prob"] = False  # llama.cpp's qwen2moe graph does not
    if arch.gguf in ("gemma3", "gemma2"):
        layers = config.get("num_hidden_layers", 0)
        if arch.gguf == "gemma3" and "sliding_window" not in config:  # sliding_window_pattern 1
            config["layer_types"] = ["full_attention"] * layers
        head_dim = config.get("head_dim")
        sizes = {"hidden_size", "num_attention_heads"} <= set(config)
        big = layers == _LARGEST[arch.gguf] and sizes
        scalar = config["hidden_size"] // config["num_attention_heads"] if big else head_dim
        if scalar is not None:
            config["query_pre_attn_scalar"] = scalar
    if arch.gguf == "phi3" and config.get("sliding_window") == 0:
        config["sliding_window"] = None


_LARGEST = {"gemma3": 62, "gemma2": 46}
"""The layers of the gemma whose attention scale llama.cpp takes from hidden / heads (27B)."""


def _rope(arch: Architecture, config: dict[str, Any], metadata: Mapping[str, Any]) -> None:
    """Rope scaling and partial rotary dimensions from the ``rope.*`` keys."""
    a = arch.gguf
    kind = metadata.get(f"{a}.rope.scaling.type")
    factor = metadata.get(f"{a}.rope.scaling.factor")
    if kind in ("linear", "yarn") and factor is not None:
        scaling: dict[str, Any] = {
            "rope_type": kind,
            "factor": _number(factor, "float", f"{a}.rope.scaling.factor"),
        }
        orig = metadata.get(f"{a}.rope.scaling.original_context_length")
        if kind == "yarn" and orig is not None:
            scaling["original_max_position_embeddings"] = _number(orig, "int", "orig")
        config["rope_scaling"] = scaling
    dims = metadata.get(f"{a}.rope.dimension_count")
    if a == "phi3" and dims is not None and "hidden_size" in config:
        heads = config.get("num_attention_heads", 1)
        factor_ = _number(dims, "int", f"{a}.rope.dimension_count") * heads / config["hidden_size"]
        if factor_ != 1:
            config["partial_rotary_factor"] = factor_


def rope_scaling(
    arch: Architecture, metadata: Mapping[str, Any], generated: Mapping[str, np.ndarray]
) -> dict[str, Any] | None:
    """The config's ``rope_scaling`` that the converter turned into tensors, from
    their values: llama's ``rope_freqs`` (``"llama3"`` scaling, recovered as the
    parameters whose factors the converter's formula gives, to float32 rounding;
    ``low_freq_factor`` is taken as 1, as every published llama 3 has it),
    phi3's ``rope_factors_long``/``short`` (``"longrope"``, the factors as the
    shortest decimals of their float32 values); None when there are none, or
    all of llama's factors are 1.

    Raises
    ------
    KilnError
        TYPE for llama factors no llama 3 scaling gives.

    >>> meta = {"llama.rope.freq_base": 10000.0, "llama.rope.dimension_count": 16}
    >>> f = _llama3_factors(10000.0, 16, 8.0, 1.0, 4.0, 64)
    >>> rope_scaling(architecture_of("llama"), meta, {"rope_freqs.weight": f.astype(np.float32)})
    {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, 'original_max_position_embeddings': 64}
    """  # noqa: E501
    long, short = (
        generated.get("rope_factors_long.weight"),
        generated.get("rope_factors_short.weight"),
    )
    if long is not None and short is not None:
        return {
            "rope_type": "longrope",
            "long_factor": [float(str(v)) for v in np.asarray(long, np.float32).tolist()],
            "short_factor": [float(str(v)) for v in np.asarray(short, np.float32).tolist()],
        }
    freqs = generated.get("rope_freqs.weight")
    if freqs is None or not np.any(np.asarray(freqs) != 1):
        return None
    a = arch.gguf
    base = _number(metadata.get(f"{a}.rope.freq_base", 10000.0), "float", f"{a}.rope.freq_base")
    dims = metadata.get(f"{a}.rope.dimension_count", metadata.get(f"{a}.attention.key_length"))
    dim = int(_number(dims, "int", f"{a}.rope.dimension_count"))
    found = np.asarray(freqs, np.float64).reshape(-1)
    for low, high, context in _llama3_candidates(found, base, dim):
        made = _llama3_factors(base, dim, float(found.max()), low, high, context)
        if made.shape == found.shape and np.allclose(made, found, rtol=2e-7, atol=0):
            return {
                "rope_type": "llama3",
                "factor": float(str(np.float32(found.max()))),
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": context,
            }
    raise KilnError(
        "TYPE",
        f"tensor 'rope_freqs.weight': expected the factors of a llama 3 rope scaling "
        f"(llama.cpp's converter's, {dim // 2} of them for base {base}), found "
        f"{found.size} values no low_freq_factor 1 scaling gives: {found[:4].tolist()} ...",
    )


def _llama3_factors(
    base: float, dim: int, factor: float, low: float, high: float, context: int
) -> np.ndarray:
    """The converter's ``rope_freqs`` (``LlamaModel.generate_extra_tensors``)."""
    wavelen = 2 * np.pi * base ** (np.arange(0, dim, 2) / dim)
    smooth = (context / wavelen - low) / (high - low)
    medium = 1 / ((1 - smooth) / factor + smooth)
    return np.where(
        wavelen < context / high, 1.0, np.where(wavelen > context / low, factor, medium)
    )


def _llama3_candidates(found: np.ndarray, base: float, dim: int) -> list[tuple[float, float, int]]:
    """``(low_freq_factor, high_freq_factor, original context)`` to try: solved
    from the factors between 1 and the largest (``smooth`` is linear in
    ``1 / wavelen``), then llama 3.1's."""
    factor = found.max()
    wavelen = 2 * np.pi * base ** (np.arange(0, dim, 2) / dim)
    medium = (found > 1) & (found < factor)
    tried = []
    if medium.sum() >= 2 and wavelen.size == found.size:
        smooth = (1 / found[medium] - 1 / factor) / (1 - 1 / factor)
        # smooth * (high - 1) = context / wavelen - 1, for low = 1
        system = np.stack([1 / wavelen[medium], -smooth], axis=1)
        context, span = np.linalg.lstsq(system, np.ones(medium.sum()), rcond=None)[0]
        if np.isfinite(context) and context > 0 and np.isfinite(span):
            tried.append((1.0, round(float(span) + 1, 3), round(float(context))))
    return [*tried, (1.0, 4.0, 8192)]


def generation_config(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """``generation_config.json``: the token ids the GGUF names (bos, eos, pad),
    as transformers derives it from a model's config; None when it names none.

    >>> generation_config({"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2})
    {'bos_token_id': 1, 'eos_token_id': 2}
    """
    found = {
        hf: _number(metadata[f"tokenizer.ggml.{key}"], "int", key)
        for key, hf in _TOKENS
        if metadata.get(f"tokenizer.ggml.{key}") is not None
    }
    return found or None


def gguf_metadata(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``<arch>.*`` keys llama.cpp's converter writes for a ``config.json``
    (the inverse of :func:`hf_config` over the keys both hold).

    >>> gguf_metadata({"model_type": "qwen3", "num_hidden_layers": 2, "head_dim": 32})
    {'general.architecture': 'qwen3', 'qwen3.block_count': 2, 'qwen3.attention.key_length': 32, 'qwen3.attention.value_length': 32}
    """  # noqa: E501
    arch = architecture_of(config.get("model_type"), "config.json's model_type: ")
    a = arch.gguf
    out: dict[str, Any] = {"general.architecture": a}
    flat = dict(config)
    rope = config.get("rope_parameters")
    if isinstance(rope, Mapping):  # transformers 5 keeps rope_theta here
        full = rope.get("full_attention", rope)
        flat.setdefault("rope_theta", full.get("rope_theta"))
        sliding = rope.get("sliding_attention")
        if isinstance(sliding, Mapping):
            flat.setdefault("rope_local_base_freq", sliding.get("rope_theta"))
    if a in ("qwen3moe", "qwen2moe"):
        flat.setdefault("num_experts", config.get("num_local_experts"))
    for key, hf, _ in _keys(arch):
        if flat.get(hf) is not None:
            out[f"{a}.{key}"] = flat[hf]
    heads, hidden = flat.get("num_attention_heads"), flat.get("hidden_size")
    if a == "phi3":  # no head size; the rotary part's dimensions, 0 for no window
        out["phi3.attention.sliding_window"] = flat.get("sliding_window") or 0
        if heads and hidden:
            rotary = flat.get("partial_rotary_factor") or (rope or {}).get("partial_rotary_factor")
            out["phi3.rope.dimension_count"] = int((rotary or 1.0) * hidden) // heads
        scaling = flat.get("rope_scaling") or rope or {}
        context, orig = (
            flat.get("max_position_embeddings"),
            flat.get("original_max_position_embeddings"),
        )
        if scaling.get("long_factor") and context and orig:  # Phi3MiniModel's longrope
            scale = context / orig
            factor = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0
            out["phi3.rope.scaling.attn_factor"] = factor
    elif config.get("head_dim") is not None:
        out[f"{a}.attention.key_length"] = out[f"{a}.attention.value_length"] = config["head_dim"]
    if a == "llama":  # conversion/llama.py: LlamaModel.set_gguf_parameters
        if flat.get("vocab_size") is not None:
            out["llama.vocab_size"] = flat["vocab_size"]
        head_dim = flat.get("head_dim") or (hidden // heads if heads and hidden else None)
        if head_dim is not None:
            out["llama.rope.dimension_count"] = head_dim
    return out


def stack_experts(experts: Sequence[np.ndarray]) -> np.ndarray:
    """The converter's stacked ``*_exps`` tensor of one layer's experts, in order.

    >>> stack_experts([np.zeros((2, 3)), np.ones((2, 3))]).shape
    (2, 2, 3)
    """
    return np.stack(experts)
