"""The keys llama.cpp's converter writes of a Hugging Face checkpoint, but the
tokenizer's: ``general.*`` and the ``<arch>.*`` hyper-parameters, as
``convert_hf_to_gguf.py`` (llama.cpp vendored by llama-cpp-python 0.3.36) and its
gguf-py derive them (:mod:`kiln_np._convert.to_gguf` puts them in its order).

- :func:`find_hparam`, :func:`rope_parameters`: the config as the converter's
  ``TextModel`` reads it (the first key present; the rope parameters with the
  global keys mirrored);
- :func:`sampling_keys`: ``general.sampling.*`` of ``generation_config.json``;
- :func:`name_keys`: ``general.name`` and the parts gguf-py's ``Metadata``
  heuristics find in ``_name_or_path`` and the directory's name
  (:func:`id_components`), and ``general.size_label`` from the written tensors'
  counts (:func:`rounded`);
- :func:`hyper_parameters`: each architecture's ``set_gguf_parameters``, with
  ``general.file_type`` where it puts it.

Keys are set in a dict of ``key -> (type, value)``: a key set twice keeps its
first place, as gguf-py's writer keeps it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError

from .models import Architecture

__all__ = [
    "KeyValues",
    "find_hparam",
    "hyper_parameters",
    "id_components",
    "name_keys",
    "rope_parameters",
    "rounded",
    "sampling_keys",
]

KeyValues = dict[str, tuple[str, Any]]
"""Keys as they are set: ``key -> (GGUF type as kiln_np.gguf spells it, value)``."""


def find_hparam(h: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """The converter's ``find_hparam(keys, optional=True)``: the first key present."""
    return next((h[k] for k in keys if k in h), None)


def rope_parameters(h: Mapping[str, Any]) -> dict[str, Any]:
    """``TextModel.rope_parameters``: the config's, with the global keys mirrored."""
    rope = dict(h.get("rope_parameters", h.get("rope_scaling")) or {})
    if "full_attention" in rope or "sliding_attention" in rope:
        return rope
    local = find_hparam(h, ("local_rope_theta", "rope_local_theta", "rope_theta_local",
                      "swa_rope_theta", "rope_local_base_freq"))  # fmt: skip
    theta = find_hparam(h, ("global_rope_theta", "rope_global_theta", "rope_theta_global",
                      "rope_theta", "rotary_emb_base"))  # fmt: skip
    partial = find_hparam(h, ("partial_rotary_factor", "rope_pct", "rope_percent"))
    original = h.get("original_max_position_embeddings")
    if local is not None:
        rope["sliding_attention"] = {"rope_theta": local}
    if "rope_theta" not in rope and theta is not None:
        rope["rope_theta"] = theta
    if "rope_type" not in rope and rope.get("type") is not None:
        rope["rope_type"] = rope["type"]
    if "partial_rotary_factor" not in rope and partial is not None:
        rope["partial_rotary_factor"] = partial
    if "original_max_position_embeddings" not in rope and original is not None:
        rope["original_max_position_embeddings"] = original
    return rope


_SAMPLING: tuple[tuple[str, str, str], ...] = (
    # (generation_config.json key, general.sampling.*, type): Metadata.load
    ("sequence", "sequence", "string"),
    ("top_k", "top_k", "int32"),
    ("top_p", "top_p", "float32"),
    ("min_p", "min_p", "float32"),
    ("xtc_probability", "xtc_probability", "float32"),
    ("xtc_threshold", "xtc_threshold", "float32"),
    ("temperature", "temp", "float32"),
    ("penalty_last_n", "penalty_last_n", "int32"),
    ("penalty_repeat", "penalty_repeat", "float32"),
    ("mirostat", "mirostat", "int32"),
    ("mirostat_tau", "mirostat_tau", "float32"),
    ("mirostat_eta", "mirostat_eta", "float32"),
)


def sampling_keys(generation: Mapping[str, Any] | None) -> KeyValues:
    """The ``general.sampling.*`` keys of ``generation_config.json``.

    >>> sampling_keys({"temperature": 0.6, "top_p": 0.9, "repetition_penalty": 1.1})
    {'general.sampling.top_p': ('float32', 0.9), 'general.sampling.temp': ('float32', 0.6), 'general.sampling.penalty_repeat': ('float32', 1.1)}
    """  # noqa: E501
    given = dict(generation or {})
    if "penalty_repeat" not in given and "repetition_penalty" in given:
        given["penalty_repeat"] = given["repetition_penalty"]
    return {
        f"general.sampling.{key}": (kind, given[hf])
        for hf, key, kind in _SAMPLING
        if given.get(hf) is not None
    }


def name_keys(
    kv: KeyValues,
    h: Mapping[str, Any],
    folder: str,
    tensors: Sequence[tuple[str, tuple[int, ...]]],
) -> None:
    """``general.name`` and its parts, then ``general.size_label``."""
    total, shared, expert, count = _parameter_counts(tensors)
    found: dict[str, str | None] = dict.fromkeys(
        ("name", "organization", "basename", "finetune", "version", "size_label")
    )
    source = h.get("_name_or_path")
    ids = [source] if isinstance(source, str) and source.count("/") <= 1 else []
    for model_id in [*ids, os.path.basename(os.path.abspath(folder))]:
        parts = id_components(model_id, total)
        for field, value in zip(found, parts, strict=True):
            if found[field] is None and value is not None:
                found[field] = _title(value) if field in ("name", "organization") else value
    if found["name"] is None:
        found["name"] = os.path.basename(folder)
    if found["size_label"] is None and total > 0:
        found["size_label"] = _size_label(total, shared, expert, count)
    for field in ("name", "version", "organization", "finetune", "basename", "size_label"):
        if found[field] is not None:
            kv[f"general.{field}"] = ("string", found[field])


def _parameter_counts(tensors: Sequence[tuple[str, tuple[int, ...]]]) -> tuple[int, int, int, int]:
    """``GGUFWriter.get_total_parameter_count``: all, shared, per expert, experts."""
    total = shared = expert = expert_sum = stacked = 0
    for name, shape in tensors:
        size = math.prod(shape)
        if "_exps." in name and len(shape) >= 3:
            n = shape[-2 if ".bias" in name else -3]
            expert += size // n
            expert_sum += n
            stacked += 1
        else:
            shared += size
        total += size
    return total, shared, expert, expert_sum // stacked if stacked else 0


def rounded(n: int) -> str:
    """gguf-py's ``model_weight_count_rounded_notation`` (two digits at least).

    >>> rounded(111_000), rounded(1_234_567_890)
    ('111K', '1.2B')
    """
    steps = ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M"), (-math.inf, 1e-3, "K"))
    scale, suffix = next((scale, suffix) for limit, scale, suffix in steps if n > limit)
    scaled = n * scale
    digits = max(2 - len(str(round(scaled)).lstrip("0")), 0)
    return f"{scaled:.{digits}f}{suffix}"


def _size_label(total: int, shared: int, expert: int, count: int) -> str:
    return f"{count}x{rounded(shared + expert)}" if count > 0 else rounded(total)


def _title(text: str) -> str:
    """gguf-py's ``Metadata.id_to_title``.

    >>> _title("qwen3_moe"), _title("llama-3.2-1b")
    ('Qwen3_Moe', 'Llama 3.2 1b')
    """
    words = text.strip().replace("-", " ").split()
    version = re.compile(r"^(v\d+(?:\.\d+)*|\d.*)$")
    return " ".join(w.title() if w.islower() and not version.match(w) else w for w in words)


_SIZE = re.compile(r"(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)", re.I)


def id_components(model_id: str, total: int) -> tuple[str | None, ...]:
    """gguf-py's ``Metadata.get_model_id_components``: ``(name, organization,
    basename, finetune, version, size_label)`` of a model id or a directory name.

    >>> id_components("Mistral-7B-Instruct-v0.2", 7_000_000_000)
    ('Mistral-7B-Instruct-v0.2', None, 'Mistral', 'Instruct', 'v0.2', '7B')
    """
    if " " in model_id:
        return model_id, None, None, None, None, None
    org, full = model_id.split("/", 1) if "/" in model_id else (None, model_id)
    if org is not None and org.startswith("."):
        org = None
    parts = [p for p in full.split("-") if p]
    kinds: list[set[str]] = [set() for _ in parts]
    for i, part in enumerate(parts):
        if re.fullmatch(r"(v|iter)?\d+([.]\d+)*", part, re.I):
            kinds[i].add("version")
        elif re.fullmatch(r"i?q\d(_\w)*|b?fp?(16|32)", part, re.I):
            kinds[i].add("type")
            parts[i] = part.upper()
        elif i > 0 and _SIZE.fullmatch(part):
            parts[i] = _size_part(part, total, kinds[i])
        elif i > 0 and re.fullmatch(r"chat|instruct|vision|lora", part, re.I):
            kinds[i].add("finetune")
    sizes = [p for p, k in zip(parts, kinds, strict=True) if "size_label" in k]
    if any(c.isdecimal() for p in sizes for c in p):
        for p, k in zip(parts, kinds, strict=True):
            if "size_label" in k and all(c.isalpha() for c in p):
                k.remove("size_label")
    at_start = True
    for p, k in zip(parts, kinds, strict=True):
        if at_start and ((not k and p[0].isalpha()) or "version" in k):
            k.add("basename")
        else:
            at_start = False
            if not k:
                k.add("finetune")
    for k in reversed(kinds):
        if "basename" in k and len(k) > 1:
            k.remove("basename")
        else:
            break

    def joined(kind: str, exclude: str = "") -> str | None:
        picked = [p for p, k in zip(parts, kinds, strict=True) if kind in k and exclude not in k]
        return "-".join(dict.fromkeys(picked) if kind == "size_label" else picked) or None

    basename, size = joined("basename"), joined("size_label")
    finetune, version = joined("finetune"), joined("version", "basename")
    if size is None and finetune is None and version is None:
        basename = None
    return full, org, basename, finetune, version, size


def _size_part(part: str, total: int, kind: set[str]) -> str:
    """A size-looking part of a model id, normalized, marked a size label or
    (a context length, far from the model's size) a finetune."""
    part = part.replace("_", ".")
    if part[-1].isdecimal():  # bloom-7b1
        part = part[:-2] + "." + part[-1] + part[-2]
    if len(part) > 1 and part[-2].isdecimal() and part[-1] in "kmbt":
        part = part[:-1] + part[-1].upper()
    if total != 0:
        try:
            label = float(part[:-1]) * pow(1000, " KMBT".find(part[-1]))
        except ValueError:
            label = None
        if label is not None and (
            (total < 0 and label < abs(total) // 8)
            or (total > 0 and abs(label - total) > 7 * total // 8)
        ):
            kind.add("finetune")
            part = part[:-1] + part[-1].lower()
    if not kind:
        kind.add("size_label")
    return part


def hyper_parameters(
    arch: Architecture,
    h: Mapping[str, Any],
    rope: Mapping[str, Any],
    kv: KeyValues,
    file_type: int,
) -> None:
    """Each architecture's ``set_gguf_parameters``, in its order."""
    a = arch.gguf

    def put(key: str, kind: str, value: Any) -> None:
        kv[f"{a}.{key}"] = (kind, value)

    if a == "phi3":  # Phi3MiniModel's own, without TextModel's
        embd, heads = (
            find_hparam(h, ("hidden_size", "n_embd")),
            find_hparam(h, ("num_attention_heads", "n_head")),
        )
        put("context_length", "uint32", find_hparam(h, ("n_positions", "max_position_embeddings")))
        put(
            "rope.scaling.original_context_length",
            "uint32",
            rope["original_max_position_embeddings"],
        )
        put("embedding_length", "uint32", embd)
        put("feed_forward_length", "uint32", find_hparam(h, ("intermediate_size",)))
        put("block_count", "uint32", _block_count(h))
        put("attention.head_count", "uint32", heads)
        put(
            "attention.head_count_kv",
            "uint32",
            find_hparam(h, ("num_key_value_heads", "n_head_kv")),
        )
        put("attention.layer_norm_rms_epsilon", "float32", find_hparam(h, ("rms_norm_eps",)))
        put(
            "rope.dimension_count",
            "uint32",
            int(rope.get("partial_rotary_factor", 1.0) * embd) // heads,
        )
        put("rope.freq_base", "float32", rope.get("full_attention", rope)["rope_theta"])
        kv["general.file_type"] = ("uint32", file_type)
        put("attention.sliding_window", "uint32", h.get("sliding_window") or 0)
        return
    if a == "gemma2":
        _gemma2_parameters(h, kv, file_type)
        return
    _text_parameters(h, rope, put)
    kv["general.file_type"] = ("uint32", file_type)
    if a == "llama":
        put("vocab_size", "uint32", h["vocab_size"])
        put(
            "rope.dimension_count",
            "uint32",
            h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"],
        )
    elif a in ("qwen3moe", "qwen2moe"):
        if h.get("moe_intermediate_size") is not None:
            put("expert_feed_forward_length", "uint32", h["moe_intermediate_size"])
        if h.get("shared_expert_intermediate_size") is not None:
            put("expert_shared_feed_forward_length", "uint32", h["shared_expert_intermediate_size"])
    elif a == "gemma3":  # Gemma3Model: defaults, some keys set again in place
        put("context_length", "uint32", h.get("max_position_embeddings", 131072))
        put("attention.head_count", "uint32", h.get("num_attention_heads", 8))
        put("attention.layer_norm_rms_epsilon", "float32", h.get("rms_norm_eps", 1e-6))
        put("attention.key_length", "uint32", h.get("head_dim", 256))
        put("attention.value_length", "uint32", h.get("head_dim", 256))
        put("rope.freq_base", "float32", rope.get("full_attention", rope).get("rope_theta", 1e6))
        if h.get("final_logit_softcapping"):
            put("final_logit_softcapping", "float32", h["final_logit_softcapping"])
        if h.get("sliding_window_pattern") != 1:
            put("attention.sliding_window", "uint32", h["sliding_window"])
        put("attention.head_count_kv", "uint32", h.get("num_key_value_heads", 4))


def _gemma2_parameters(h: Mapping[str, Any], kv: KeyValues, file_type: int) -> None:
    """``Gemma2Model.set_gguf_parameters``: its own, without TextModel's (no rope base)."""

    def put(key: str, kind: str, value: Any) -> None:
        kv[f"gemma2.{key}"] = (kind, value)

    heads = h["num_attention_heads"]
    put("context_length", "uint32", h["max_position_embeddings"])
    put("embedding_length", "uint32", h["hidden_size"])
    put("block_count", "uint32", _block_count(h))
    put("feed_forward_length", "uint32", h["intermediate_size"])
    put("attention.head_count", "uint32", heads)
    put("attention.head_count_kv", "uint32", h.get("num_key_value_heads", heads))
    put("attention.layer_norm_rms_epsilon", "float32", h["rms_norm_eps"])
    put("attention.key_length", "uint32", h["head_dim"])
    put("attention.value_length", "uint32", h["head_dim"])
    kv["general.file_type"] = ("uint32", file_type)
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        put(key, "float32", _required(h, key))
    put("attention.sliding_window", "uint32", _required(h, "sliding_window"))


def _required(h: Mapping[str, Any], key: str) -> Any:
    """``hparams[key]`` as the converter writes it: a number, not null."""
    value = h[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KilnError(
            "TYPE", f"expected config.json's {key}, a number, found {show_value(value)}"
        )
    return value


def _block_count(h: Mapping[str, Any]) -> Any:
    count = find_hparam(h, ("n_layers", "num_hidden_layers", "n_layer", "num_layers"))
    if not isinstance(count, int) or count < 0:
        raise KilnError(
            "TYPE", f"expected config.json's num_hidden_layers, a count, found {show_value(count)}"
        )
    return count


_TEXT: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # TextModel.set_gguf_parameters, before the rope keys
    ("context_length", ("max_position_embeddings", "n_ctx", "n_positions", "max_length",
                        "max_sequence_length", "model_max_length"), "uint32"),
    ("embedding_length", ("hidden_size", "n_embd", "dim"), "uint32"),
    ("feed_forward_length", ("prefix_dense_intermediate_size", "dense_intermediate_size",
                             "intermediate_size", "n_inner", "hidden_dim"), "uint32"),
    ("attention.head_count", ("num_attention_heads", "n_head", "n_heads"), "uint32"),
    ("attention.head_count_kv", ("num_key_value_heads", "n_kv_heads"), "uint32"),
)  # fmt: skip
_AFTER_ROPE: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("attention.layer_norm_rms_epsilon", ("rms_norm_eps", "norm_eps"), "float32"),
    ("attention.layer_norm_epsilon", ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"),
     "float32"),
    ("expert_count", ("num_local_experts", "num_experts", "n_routed_experts"), "uint32"),
    ("expert_used_count", ("num_experts_per_tok", "num_experts_per_token", "top_k_experts"),
     "uint32"),
    ("expert_group_count", ("n_group",), "uint32"),
    ("expert_group_used_count", ("topk_group",), "uint32"),
)  # fmt: skip
_GATING = (
    "score_function", "scoring_func", "score_func", "moe_router_activation",
    "moe_router_activation_func", "expert_selection_fn",
)  # fmt: skip
_YARN = (
    ("extrapolation_factor", "yarn_ext_factor"),
    ("attention_factor", "yarn_attn_factor"),
    ("beta_fast", "yarn_beta_fast"),
    ("beta_slow", "yarn_beta_slow"),
)


def _text_parameters(h: Mapping[str, Any], rope: Mapping[str, Any], put: Any) -> None:
    """``TextModel.set_gguf_parameters`` up to ``general.file_type``."""
    put("block_count", "uint32", _block_count(h))
    for key, names, kind in _TEXT:
        if (value := find_hparam(h, names)) is not None:
            put(key, kind, value)
    if h.get("is_causal") is False:
        put("attention.causal", "bool", False)
    params = rope.get("full_attention", rope)
    kind, factor = params.get("rope_type"), params.get("factor")
    if kind in ("linear", "yarn") and factor is not None:
        put("rope.scaling.type", "string", kind)
        put("rope.scaling.factor", "float32", factor)
        if kind == "yarn":
            put(
                "rope.scaling.original_context_length",
                "uint32",
                params["original_max_position_embeddings"],
            )
            attention = params.get("attention_factor", params.get("attn_factor"))
            for hf, key in _YARN:
                value = attention if hf == "attention_factor" else params.get(hf)
                if value is not None:
                    put(f"rope.scaling.{key}", "float32", value)
    elif kind in ("su", "longrope"):
        put("rope.scaling.type", "string", "longrope")
    if (theta := params.get("rope_theta")) is not None:
        put("rope.freq_base", "float32", theta)
    sliding = rope.get("sliding_attention")
    if isinstance(sliding, Mapping) and sliding.get("rope_theta") is not None:
        put("rope.freq_base_swa", "float32", sliding["rope_theta"])
    for key, names, kind in _AFTER_ROPE:
        if (value := find_hparam(h, names)) is not None:
            put(key, kind, value)
    gating = find_hparam(h, _GATING)
    if gating is not None:
        functions = {"softmax": 1, "sigmoid": 2, "sqrtsoftplus": 4}
        if gating not in functions:
            raise KilnError(
                "TYPE", f"expected an expert gating function {list(functions)}, found {gating!r}"
            )
        put("expert_gating_func", "uint32", functions[gating])
    if (head_dim := h.get("head_dim")) is not None:
        put("attention.key_length", "uint32", head_dim)
        put("attention.value_length", "uint32", head_dim)
