"""llama.cpp's rules for one tensor's type in a file type's mix, ported from
``src/llama-quant.cpp`` (llama-cpp-python 0.3.36's ``vendor/llama.cpp``).

Each rule is a pure function of the tensor (name, shape), the model's facts read
from its metadata (:class:`Model`) and the counters llama.cpp keeps while it
walks the tensors in its order (:class:`Counters`); it returns the type and the
reason, for a dry run to show.  ``kiln_np._quants.mix`` walks the tensors and
applies the flags; this module only decides.

- :func:`refusal`: why ``tensor_allows_quantization`` keeps a tensor's type
  (None: the tensor may be quantized).
- :func:`category`: ``tensor_get_category``, by name.
- :func:`mix_rule`: ``llama_tensor_get_type_impl``, the mix itself.
- :func:`fallback`: ``tensor_type_fallback``, for rows that are not whole blocks.

Two branches of ``llama_tensor_get_type_impl`` cannot be reached from
``llama_tensor_get_type`` and are not ported: the token embedding's
``--token-embedding-type`` (the wrapper returns that type first) and the
``ATTENTION_QKV`` branch (``category_is_attn_v`` takes those tensors first).
The rules that read an importance matrix are ported for its absence (a later
issue adds it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kiln_np._core.errors import KilnError

from .blocks import BLOCKS

__all__ = [
    "ATTN_V_LIKE",
    "FLOAT_TYPES",
    "Counters",
    "Model",
    "Tensor",
    "block_elements",
    "category",
    "fallback",
    "layer_of",
    "mix_rule",
    "refusal",
]

FLOAT_TYPES: Mapping[str, int] = MappingProxyType({"F32": 0, "F16": 1, "BF16": 30})
"""The unquantized GGML types a mix gives, by name: their type ids."""


def block_elements(type_name: str) -> int:
    """``ggml_blck_size``: elements per block of a GGML type (1 for F32, F16, BF16).

    >>> block_elements("Q4_K"), block_elements("Q8_0"), block_elements("F16")
    (256, 32, 1)
    """
    return 1 if type_name in FLOAT_TYPES else BLOCKS[type_name].elements


@dataclass(frozen=True)
class Model:
    """What the rules read of a model (``llama_hparams`` and ``llm_type``).

    ``n_layer`` is ``{arch}.block_count`` (``n_layer_all``, next-token layers
    included); ``n_head``/``n_head_kv`` are layer 0's; ``class_70b`` is
    whether llama.cpp's loader types the model ``LLM_TYPE_70B``; ``generic``,
    when not empty, says why only the generic rules apply (llama.cpp would not
    load the model) and which rules that leaves out.
    """

    architecture: str
    n_layer: int
    n_expert: int
    n_head: int
    n_head_kv: int
    class_70b: bool
    generic: str = ""

    @property
    def n_gqa(self) -> int:
        """``n_gqa()``: query heads per key/value head, 0 without key/value heads."""
        return self.n_head // self.n_head_kv if self.n_head_kv else 0


@dataclass(frozen=True)
class Tensor:
    """One tensor as the rules see it: its name and ``ne`` (GGML order, 4 dims)."""

    name: str
    ne: tuple[int, int, int, int]

    @classmethod
    def of(cls, name: str, shape: tuple[int, ...]) -> Tensor:
        """The tensor of a numpy-order ``shape`` (at most 4 dims).

        >>> Tensor.of("w", (8, 2, 256)).ne
        (256, 2, 8, 1)
        """
        ne = (*shape[::-1], 1, 1, 1, 1)
        return cls(name, (ne[0], ne[1], ne[2], ne[3]))

    @property
    def n_dims(self) -> int:
        """``ggml_n_dims``: dims up to the last that is not 1 (at least 1)."""
        return next((i + 1 for i in (3, 2, 1) if self.ne[i] > 1), 1)


@dataclass
class Counters:
    """``quantize_state_impl``'s counters: set from all the tensors first, then
    moved by the rules in tensor order (so a rule depends on what came before);
    and its ``has_imatrix``, whether an importance matrix was given (four rules
    read it)."""

    n_attention_wv: int
    n_layer: int  # n_ffn_down = n_ffn_gate = n_ffn_up
    tied_embeddings: bool
    has_imatrix: bool = False
    i_attention_wv: int = 0
    i_ffn_down: int = 0
    i_ffn_gate: int = 0
    i_ffn_up: int = 0


# -- which tensors are quantized ---------------------------------------------------

_KEPT_PARTS: tuple[tuple[str, str], ...] = (
    ("_norm.weight", "a norm"),
    ("ffn_gate_inp.weight", "an expert router"),
    ("ffn_gate_tid2eid.weight", "a token-to-expert table"),
    ("altup", "an altup tensor (tiny)"),
    ("laurel", "a laurel tensor (tiny)"),
    ("per_layer_model_proj", "the per-layer model projection"),
    ("ssm_conv1d", "a small conv1d"),
    ("shortconv.conv.weight", "a small conv1d"),
    ("indexer.k_proj.weight", "an indexer projection (tiny)"),
    ("indexer.q_proj.weight", "an indexer projection (tiny)"),
    *(
        (f"time_mix_{part}.weight", "an RWKV small 2-D weight")
        for part in (
            *("first", "w0", "w1", "w2", "v0", "v1", "v2", "a0", "a1", "a2", "g1", "g2"),
            *("decay_w1", "decay_w2", "lerp_fused"),
        )
    ),
    ("attn_rel_b.weight", "a relative position bias"),
    *(
        (part, "a multimodal tensor kept as it is")
        for part in (".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos")
    ),
    (".patch_embd", "a multimodal tensor kept as it is"),
    (".patch_merger", "a multimodal tensor kept as it is"),
    ("a.rvq.codebook", "an audio codebook"),
    ("mm.a.code_embd", "an audio codebook"),
)
"""``tensor_allows_quantization``'s name parts (``name.find(part)``), each with
the reason a dry run shows."""

_KEPT_NAMES: Mapping[str, str] = MappingProxyType(
    {"position_embd.weight": "a position embedding", "token_types.weight": "token types"}
)

_KEPT_GLM5_NEXT = (
    *("hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate"),
    *("indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight"),
    *("ssm_g_b.weight", "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight"),
    "attn_v_b.weight",
)


def refusal(tensor: Tensor, architecture: str, *, copy: bool, keep_output: bool) -> str | None:
    """Why llama.cpp keeps ``tensor``'s type whatever the file type
    (``tensor_allows_quantization``), or None when it may be quantized.

    llama.cpp asks every condition; the reason given is the first that fails.

    >>> t = Tensor("blk.0.attn_norm.weight", (64, 64, 1, 1))
    >>> refusal(t, "llama", copy=False, keep_output=False)
    'a norm'
    >>> refusal(Tensor.of("blk.0.attn_q.weight", (1, 64)), "llama", copy=False, keep_output=False)
    '1-D'
    """
    name = tensor.name
    if copy:
        return "COPY keeps every tensor"
    if tensor.n_dims < 2:
        return "1-D"
    # llama.cpp asks name.rfind("weight") == name.size() - 6: true for a name
    # ending in "weight", and (unsigned wrap-around) for any name of 5 bytes.
    if not name.endswith("weight") and len(name.encode("utf-8", "surrogateescape")) != 5:
        return "not a weight (the name does not end in 'weight')"
    if keep_output and name == "output.weight":
        return "--leave-output-tensor"
    if name in _KEPT_NAMES:
        return _KEPT_NAMES[name]
    if architecture == "glm5-next" and any(part in name for part in _KEPT_GLM5_NEXT):
        return "a glm5-next tensor kept as it is"
    return next((why for part, why in _KEPT_PARTS if part in name), None)


# -- categories ------------------------------------------------------------------

_CATEGORY_PARTS = (
    ("attn_qkv.weight", "attn_qkv"),
    ("attn_kv_b.weight", "attn_kv_b"),
    ("attn_v.weight", "attn_v"),
    ("attn_k.weight", "attn_k"),
    ("attn_q.weight", "attn_q"),
    ("attn_output.weight", "attn_output"),
    ("ffn_up", "ffn_up"),
    ("ffn_gate", "ffn_gate"),
    ("ffn_down", "ffn_down"),
)
ATTN_V_LIKE = frozenset({"attn_v", "attn_qkv", "attn_kv_b"})
"""The categories ``category_is_attn_v`` counts (``n_attention_wv``)."""


def category(name: str) -> str:
    """``tensor_get_category``: ``"output"``, ``"token_embd"``, the first of the
    name parts llama.cpp looks for, or ``"other"``.

    >>> category("blk.3.ffn_down_exps.weight"), category("per_layer_token_embd.weight")
    ('ffn_down', 'token_embd')
    """
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    return next((cat for part, cat in _CATEGORY_PARTS if part in name), "other")


_LAYER = re.compile(rb"blk\.[ \t\n\v\f\r]*([+-]?)([0-9]+)")
_LONG = 1 << 63


def layer_of(name: str) -> int | None:
    """The layer ``sscanf(name, "blk.%d.", &layer)`` reads (glibc: the digits
    saturated to a C ``long``, then cut to an ``int``), or None when it reads none.

    >>> layer_of("blk.12.attn_q.weight"), layer_of("output.weight"), layer_of("blk.4294967297.x")
    (12, None, 1)
    """
    found = _LAYER.match(name.encode("utf-8", "surrogateescape"))
    if found is None:
        return None
    digits = found[2].lstrip(b"0") or b"0"
    value = int(digits) if len(digits) <= 19 else _LONG  # 20 digits: past LONG_MAX
    value = -value if found[1] == b"-" else value
    value = max(min(value, _LONG - 1), -_LONG) & 0xFFFFFFFF  # strtol saturates, (int) cuts
    return value - (1 << 32) if value >= 1 << 31 else value


# -- the mix -------------------------------------------------------------------------

_IQ2_MIXES = frozenset({"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"})
_OUTPUT_Q5_K = frozenset({"IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"})
_TOKEN_EMBD: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"), "Q2_K"),
        **dict.fromkeys(("IQ2_S", "IQ2_M", "IQ3_XXS"), "IQ3_S"),
        **dict.fromkeys(("TQ1_0", "TQ2_0", "Q2_0"), "Q4_K"),
    }
)
_ATTN_OUTPUT_8_EXPERTS = frozenset(
    {"Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M"}
    | {"IQ3_S", "IQ3_M", "IQ4_XS"}
)
_ATTN_OUTPUT: Mapping[str, str] = MappingProxyType(
    {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}
)
_ATTN_QK: Mapping[str, str] = MappingProxyType({"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"})


def _more_bits(i_layer: int, n_layers: int) -> bool:
    """``use_more_bits``: the first and last eighths, and every third layer between."""
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or ((i_layer - n_layers // 8) % 3 == 2)
    )


def _layer(tensor: Tensor, counter: int, model: Model) -> tuple[int, int]:
    """``layer_info``: the tensor's layer (from its name in a mixture of experts,
    whose experts llama.cpp may see out of order) and the layer count."""
    if max(1, model.n_expert) == 1:
        return counter, model.n_layer
    layer = layer_of(tensor.name)
    if layer is None or not 0 <= layer < model.n_layer:
        raise KilnError(
            "TYPE",
            f"tensor {tensor.name!r}: expected a name 'blk.N.' with N in 0..{model.n_layer - 1} "
            f"(a mixture of experts' layers are read from the names), found "
            f"{'no layer' if layer is None else f'layer {layer}'}",
        )
    return layer, model.n_layer


def _attn_v(mix: str, new: str, model: Model, n: Counters) -> tuple[str, str | None]:
    gqa4 = model.n_gqa >= 4
    i, count = n.i_attention_wv, n.n_attention_wv
    rule: str | None = None
    if mix == "Q2_K":
        new, rule = ("Q4_K", "GQA >= 4") if gqa4 else ("Q3_K", "GQA < 4")
    elif mix in ("Q2_K_S", "IQ3_XS", "IQ3_S") and gqa4:
        new, rule = "Q4_K", "GQA >= 4"
    elif mix == "IQ3_XXS":
        if gqa4:
            new, rule = "Q4_K", "GQA >= 4"
        elif n.has_imatrix:
            new, rule = "IQ3_XXS", "GQA < 4, an importance matrix"
        else:
            new, rule = "IQ3_S", "GQA < 4, no importance matrix"
    elif mix == "IQ3_M":
        new, rule = "Q4_K", "always"
    elif mix == "Q3_K_M":
        new, rule = ("Q5_K", "first two") if i < 2 else ("Q4_K", "after the first two")
    elif mix == "Q3_K_L":
        new, rule = "Q5_K", "always"
    elif mix in ("IQ4_NL", "IQ4_XS") and gqa4:
        new, rule = "Q5_K", "GQA >= 4"
    elif mix in ("Q4_K_M", "Q5_K_M") and _more_bits(i, count):
        new, rule = "Q6_K", f"use_more_bits({i}, {count})"
    elif mix == "Q4_K_S" and i < 4:
        new, rule = "Q5_K", "first four"
    if model.class_70b and new in ("Q3_K", "Q4_K"):
        new, rule = "Q5_K", "70B-class model"
    if model.n_expert == 8:
        new, rule = "Q8_0", "8 experts"
    n.i_attention_wv += 1
    return new, rule


def _ffn_down(mix: str, new: str, t: Tensor, model: Model, n: Counters) -> tuple[str, str | None]:
    i, count = _layer(t, n.i_ffn_down, model)
    falcon = model.architecture == "falcon"
    more = _more_bits(i, count)
    head = f"layer {i} of {count}"
    rule: str | None = None
    if mix == "Q2_K":
        new, rule = "Q3_K", "always"
    elif mix == "Q2_K_S":
        if i < count // 8:
            new, rule = "Q4_K", f"{head}: first eighth"
    elif mix == "IQ3_XXS" and not n.has_imatrix:
        new, rule = ("Q4_K", f"{head}: first eighth") if i < count // 8 else ("Q3_K", head)
        rule += ", no importance matrix"
    elif mix == "Q3_K_M":
        if i < count // 16:
            new, rule = "Q5_K", f"{head}: first sixteenth"
        elif not falcon or more:
            new, rule = "Q4_K", f"{head}: use_more_bits or not falcon"
        else:
            new, rule = "Q3_K", f"{head}: falcon"
    elif mix == "IQ3_M" and (i < count // 8 or (model.n_expert == 8 and more)):
        new, rule = "Q4_K", f"{head}: first eighth or 8 experts and use_more_bits"
    elif mix == "Q3_K_L":
        new, rule = ("Q4_K", "falcon") if falcon else ("Q5_K", "always")
    elif mix == "Q4_K_M":
        if falcon:
            new = "Q6_K" if i < count // 16 else "Q5_K" if more else "Q4_K"
            rule = f"{head}: falcon"
        elif more:
            new, rule = "Q6_K", f"{head}: use_more_bits"
    elif i < count // 8 and mix in ("IQ4_NL", "IQ4_XS") and not n.has_imatrix:
        new, rule = "Q5_K", f"{head}: first eighth, no importance matrix"
    elif mix == "Q5_K_M" and more:
        new, rule = "Q6_K", f"{head}: use_more_bits"
    elif mix == "Q4_K_S" and not falcon and i < count // 8:
        new, rule = "Q5_K", f"{head}: first eighth"
    elif mix in ("Q4_0", "Q5_0") and n.has_imatrix and i < count // 8:
        new = "Q4_1" if mix == "Q4_0" else "Q5_1"
        rule = f"{head}: first eighth, an importance matrix"
    n.i_ffn_down += 1
    return new, rule


def _iq2_family(mix: str, new: str, cat: str, model: Model, n: Counters) -> tuple[str, str | None]:
    """The IQ1/IQ2 mixes' rules for the tensors that are not output or embeddings."""
    iq3 = mix in ("IQ2_S", "IQ2_M")
    if cat in ATTN_V_LIKE:
        n.i_attention_wv += 1
        if model.n_gqa >= 4 or model.n_expert >= 4:
            return "Q4_K", "GQA >= 4 or 4+ experts"
        return ("IQ3_S" if iq3 else "Q2_K"), "GQA < 4"
    if model.n_expert == 8 and cat == "attn_k":
        return "Q4_K", "8 experts"
    if cat == "ffn_down":
        first = n.i_ffn_down < n.n_layer // 8
        n.i_ffn_down += 1
        if first:
            return ("IQ3_S" if iq3 else "Q2_K"), f"among the first {n.n_layer // 8}"
        return new, None
    if cat == "attn_output":
        if model.n_expert == 8:
            return "Q5_K", "8 experts"
        if mix in ("IQ1_S", "IQ1_M"):
            return "IQ2_XXS", "always"
        if iq3:
            return "IQ3_S", "always"
    return new, None


def mix_rule(
    mix: str, new: str, t: Tensor, cat: str, model: Model, n: Counters, output_type: str | None
) -> tuple[str, str | None]:
    """``llama_tensor_get_type_impl``: the type the file type ``mix`` (its
    QUANT_OPTIONS name, aliases resolved) gives tensor ``t`` of category ``cat``
    whose default is ``new``, and the rule that chose it (None: the default stood).
    ``n``'s counters move as llama.cpp's do; ``output_type`` is
    ``--output-tensor-type``, which tied token embeddings follow.

    >>> m = Model("llama", 32, 0, 32, 8, False)
    >>> n = Counters(n_attention_wv=32, n_layer=32, tied_embeddings=False)
    >>> t = Tensor.of("blk.0.attn_v.weight", (1024, 4096))
    >>> mix_rule("Q4_K_M", "Q4_K", t, "attn_v", m, n, None)
    ('Q6_K', 'use_more_bits(0, 32)')
    >>> n.i_attention_wv
    1
    """
    name, arch = t.name, model.architecture
    glm5_kept = any(part in name for part in ("attn_q_a", "attn_q_b", "nextn.eh_proj"))
    if arch == "glm5-next" and new not in FLOAT_TYPES and glm5_kept:
        return "Q8_0", "glm5-next keeps it at Q8_0 or more"
    if cat == "output" or (n.tied_embeddings and cat == "token_embd"):
        tied = "tied to the output, " if cat == "token_embd" else ""
        if output_type is not None:
            return output_type, f"{tied}--output-tensor-type"
        if mix == "MXFP4_MOE":
            return "Q8_0", f"{tied}always"
        if arch == "falcon":
            return "Q8_0", f"{tied}falcon"
        if t.ne[0] % block_elements(new):
            return "Q8_0", f"{tied}rows of {t.ne[0]} are not whole {new} blocks"
        if mix in _OUTPUT_Q5_K:
            return "Q5_K", f"{tied}always"
        return ("Q6_K", f"{tied}always") if new != "Q8_0" else (new, None)
    if mix == "MXFP4_MOE":
        experts = cat in ("ffn_up", "ffn_gate", "ffn_down")
        if t.ne[2] > 1 and (arch != "bailingmoe3" or experts):
            return "MXFP4", "experts (3-D)"
        return "Q8_0", "not experts"
    if cat == "token_embd":
        return (_TOKEN_EMBD[mix], "always") if mix in _TOKEN_EMBD else (new, None)
    if mix in _IQ2_MIXES:
        return _iq2_family(mix, new, cat, model, n)
    if cat in ATTN_V_LIKE:
        return _attn_v(mix, new, model, n)
    if cat == "attn_k" and model.n_expert == 8:
        return "Q8_0", "8 experts"
    if cat in ("attn_k", "attn_q"):
        return (_ATTN_QK[mix], "always") if mix in _ATTN_QK else (new, None)
    if cat == "ffn_down":
        return _ffn_down(mix, new, t, model, n)
    if cat == "attn_output":
        if arch == "falcon":
            return ("Q4_K", "falcon") if mix == "Q3_K_L" else (new, None)
        if model.n_expert == 8:
            return ("Q5_K", "8 experts") if mix in _ATTN_OUTPUT_8_EXPERTS else (new, None)
        return (_ATTN_OUTPUT[mix], "always") if mix in _ATTN_OUTPUT else (new, None)
    if cat in ("ffn_gate", "ffn_up"):
        counter = "i_ffn_gate" if cat == "ffn_gate" else "i_ffn_up"
        i, count = _layer(t, getattr(n, counter), model)
        setattr(n, counter, getattr(n, counter) + 1)
        if mix == "IQ3_XS" and count // 8 <= i < 7 * count // 8:
            return "IQ3_XXS", f"layer {i} of {count}: the middle"
    return new, None


# -- rows that are not whole blocks ---------------------------------------------------

_FALLBACK: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL"
        ),
        **dict.fromkeys(("Q2_0", "Q2_K", "Q3_K", "TQ1_0", "TQ2_0"), "Q4_0"),
        "Q4_K": "Q5_0",
        "Q5_K": "Q5_1",
        "Q6_K": "Q8_0",
    }
)
"""``tensor_type_fallback``: the type of 32-element blocks a type of longer blocks
falls back to when a tensor's rows are not whole blocks of it."""


def fallback(t: Tensor, target: str) -> tuple[str, str | None]:
    """``tensor_type_fallback``: ``target``, or what llama.cpp writes instead when
    ``t``'s rows are not whole ``target`` blocks (F16 when the fallback's are
    not either), and why.

    >>> fallback(Tensor("blk.0.ffn_down.weight", (1408, 512, 1, 1)), "Q4_K")
    ('Q5_0', 'rows of 1408 are not whole Q4_K blocks (256): Q5_0')
    >>> fallback(Tensor("blk.0.ffn_down.weight", (100, 512, 1, 1)), "Q6_K")
    ('F16', 'rows of 100 are not whole Q6_K blocks (256) nor Q8_0 blocks (32): F16')
    """
    ncols, qk = t.ne[0], block_elements(target)
    if ncols % qk == 0:
        return target, None
    if target in _FALLBACK:
        instead = _FALLBACK[target]
    elif qk <= 32:
        instead = target
    else:
        raise KilnError(
            "SHAPE",
            f"tensor {t.name!r}: expected rows of a whole number of {target} blocks "
            f"({qk} elements; llama.cpp has no fallback type for {target}), found {ncols}",
        )
    why = f"rows of {ncols} are not whole {target} blocks ({qk})"
    if ncols % block_elements(instead):
        if instead != target:
            why += f" nor {instead} blocks ({block_elements(instead)})"
        return "F16", f"{why}: F16"
    return instead, f"{why}: {instead}"
