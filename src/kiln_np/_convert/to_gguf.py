"""A Hugging Face checkpoint as the GGUF llama.cpp's converter writes of it: the
model map (:mod:`kiln_np._convert.models`) the other way, a rule the conversion
plan asks when a checkpoint directory of a mapped architecture is written as
GGUF (``convert_hf_to_gguf.py --outtype T``, llama.cpp vendored by
llama-cpp-python 0.3.36).

:func:`gguf_view` says, before a byte is read, what the converter writes:

- **tensors** (:class:`GgufTensor`), in its order: the tensors it generates
  from the config first (llama 3's ``rope_freqs``, phi3's
  ``rope_factors_long``/``short``), then the checkpoint's, file by file (file
  names sorted) and name by name within a file (sorted), each under its GGUF
  name, with the map's transform (llama's Q/K rows in rope order, the gemmas'
  norm ``+ 1`` in the tensor's float type, gemma3's embedding rows cut to the
  tokenizer's count; gemma2's ``lm_head`` left out) and a layer's experts
  stacked into ``*_exps`` where the last of them comes, in the order of their
  names (qwen3moe's down, gate, up; mixtral's ``w1``, ``w2``, ``w3``: gate,
  down, up);
- **types**, the converter's rule: float32 for 1-D tensors, ``*_norm.weight``,
  biases and the MoE router (``ffn_gate_inp``); the others ``T`` (``auto``:
  bf16 for a bf16 checkpoint, f16 otherwise, as the first matrix says), Q8_0
  falling back to f16 for rows not a multiple of 32;
- **keys** (``(key, type, value)``) in its order: ``general.architecture``,
  what the converter sets while it makes tensors (phi3's
  ``rope.scaling.attn_factor``), ``general.type``, the sampling keys of
  ``generation_config.json``, ``general.name`` and the name's parts (from
  ``config.json``'s ``_name_or_path``, then the directory's name),
  ``general.size_label`` (from the written tensors' counts), the ``<arch>.*``
  hyper-parameters with ``general.file_type`` where each architecture's
  ``set_gguf_parameters`` puts them (a key set twice keeps its first place),
  ``general.quantization_version`` (made by :mod:`kiln_np._convert.gguf_keys`),
  then the tokenizer's keys, which the caller hands in (:func:`gguf_view`'s
  ``tokenizer``).

:meth:`GgufTensor.chunks` reads the checkpoint a bounded run of whole rows
(whole heads of a permuted tensor) at a time, widens it to float32 (float16 for
a float16 norm gemma shifts), applies the transform and rounds or quantizes it
to the written type (to nearest even; Q8_0 as ggml does).

Not read, and so possibly different from the converter's file (docs/weights.md):
a ``README.md`` model card (license, tags, base models...), ``--metadata`` and
``--model-name`` overrides; the converter's ``general.name`` comes from the
path as typed, kiln_np's from the directory's own name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from kiln_np._codec import from_numpy
from kiln_np._core.checks import U8, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.jsontext import parse_json
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, Layout
from kiln_np._files.io import open_regular
from kiln_np._kernels.pool import cast_into
from kiln_np._quants.blocks import BLOCKS, Block
from kiln_np._quants.quantize import quantize_into, unquantizable
from kiln_np._weights.tensors import WeightTensor, mapped_file
from kiln_np._weights.weights import Weights

from .gguf_keys import find_hparam, hyper_parameters, name_keys, rope_parameters, sampling_keys
from .hf import MappedTensor, readable
from .models import Architecture, Pair, architecture_of, gguf_name, to_gguf

__all__ = [
    "OUTTYPES",
    "GgufTensor",
    "GgufView",
    "Key",
    "TokenizerKey",
    "checkpoint_architecture",
    "gguf_view",
]

OUTTYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "auto")
"""The converter's ``--outtype`` choices kiln_np writes (not ``tq1_0``, ``tq2_0``)."""

_FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}
"""``general.file_type`` of each outtype (llama.cpp's ``LlamaFileType``)."""
_FLOATS = {"f32": Code.F32, "f16": Code.F16, "bf16": Code.BF16}
_Q8_0 = BLOCKS["Q8_0"]
_RUN = 1 << 21
"""Elements read and written at a time: an 8 MiB float32 buffer."""
_QUANTIZATION_VERSION = 2
_SKIPPED = (".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")
_MULTIMODAL_PREFIXES = ("mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.")
_MULTIMODAL_PARTS = (
    "visual.", "vision.", "audio.", "vision_", "audio_", "projector.", "pre_mm_projector_norm",
    "image_newline", "patch_embed", "patch_merger.", "model.connector.",
)  # fmt: skip
_F32_ROLES = (".ffn_gate_inp.weight", ".ffn_gate_inp_shexp.weight")
"""Matrices the converter keeps float32 among the mapped architectures' (the routers:
the experts' and qwen2moe's shared expert's gate)."""

Key = tuple[str, str, Any]
"""One key as written: ``(key, GGUF type spelled as kiln_np.gguf spells it, value)``."""
TokenizerKey = tuple[str, Any, str]
"""One key as the tokenizer's conversion returns it: ``(key, value, type)``."""


class GgufTensor:
    """One tensor of the converter's GGUF: its ``name``, the checkpoint tensors
    it is made of (``parts``: one, or a layer's experts in order), the
    transform (``"permute"`` with ``head_rows``, ``"offset"``, or ``""``),
    ``rows`` (the first rows kept; None: all) and the written type
    (``target``: a float :class:`Code` or the Q8_0 block).

    >>> import numpy as np
    >>> src = _weight("model.norm.weight", np.float32([0.5, -0.25]))
    >>> t = GgufTensor("output_norm.weight", [src], Code.F32, "offset")
    >>> t.shape, [c.view(np.float32).tolist() for c in t.chunks()]
    ((2,), [[1.5, 0.75]])
    """

    __slots__ = (
        "head_rows",
        "name",
        "parts",
        "rows",
        "shape",
        "start",
        "stop",
        "target",
        "transform",
    )

    def __init__(
        self,
        name: str,
        parts: Sequence[WeightTensor],
        target: Code | Block,
        transform: str = "",
        head_rows: int = 0,
        rows: int | None = None,
    ) -> None:
        for part in parts:
            if not readable(part) or part.info.layout is not None:
                raise KilnError(
                    "TYPE",
                    f"tensor {part.name!r}: expected float values (f32, f16, bf16) in a "
                    f"checkpoint to convert to GGUF, found {part.info.element.name}",
                )
        first_info = parts[0].info
        odd = next(
            (p for p in parts if (p.shape, p.info.code) != (parts[0].shape, first_info.code)), None
        )
        if odd is not None:
            raise KilnError(
                "TYPE",
                f"tensor {odd.name!r}: expected the shape and type of {parts[0].name!r} "
                f"({parts[0].shape}, {first_info.element.name}) to stack it into {name!r}, "
                f"found {odd.shape}, {odd.info.element.name}",
            )
        self.name, self.parts, self.target = name, tuple(parts), target
        self.transform, self.head_rows, self.rows = transform, head_rows, rows
        first = parts[0].shape
        kept = first if rows is None or not first else (min(rows, first[0]), *first[1:])
        self.shape = kept if len(parts) == 1 else (len(parts), *first)
        self.start, self.stop = 0, sum(p.info.byte_length for p in parts)

    @property
    def source(self) -> WeightTensor:
        """The (first) checkpoint tensor it is made of."""
        return self.parts[0]

    @property
    def info(self) -> PayloadInfo:
        """The description of the tensor written."""
        if isinstance(self.target, Code):
            return payload_info(self.target, self.shape)
        block = self.target
        blocks = (*self.shape[:-1], self.shape[-1] // block.elements)
        return payload_info(block.code, blocks, Layout(block.layout_name, block.bytes))

    @property
    def copied(self) -> bool:
        """Whether its bytes are the checkpoint's as they are."""
        src = self.parts[0].info
        same = isinstance(self.target, Code) and src.code == self.target
        return same and len(self.parts) == 1 and not self.transform and self.rows is None

    def reason(self) -> str:
        """What the conversion does to it, for the plan."""
        names = self.parts[0].name
        if len(self.parts) > 1:
            names = f"{len(self.parts)} experts stacked ({names}, ...)"
        kind = self.parts[0].info.element.name
        out = self.target.name.lower() if isinstance(self.target, Code) else "q8_0"
        how = {
            "permute": ", rows in llama.cpp's rope order",
            "offset": ", norm plus gemma's 1",
        }.get(self.transform, "")
        cut = "" if self.rows is None else f", the tokenizer's first {self.rows} rows"
        return f"from {names} ({kind}{'' if kind == out else ' -> ' + out}){how}{cut}"

    def chunks(self) -> Iterator[np.ndarray]:
        """The bytes to write, in order, a bounded run of whole rows at a time:
        arrays, each valid until the next is asked for."""
        for part in self.parts:
            yield from self._part_chunks(part)

    def _part_chunks(self, part: WeightTensor) -> Iterator[np.ndarray]:
        shape = part.shape
        per_row = math.prod(shape[1:]) if len(shape) > 1 else 1
        group = self.head_rows if self.transform == "permute" else 1
        elements = max(1, _RUN // (group * per_row)) * group * per_row
        shifted = self.transform == "offset"
        wide = Code.F16 if shifted and part.info.code == Code.F16 else Code.F32
        reader = MappedTensor(Pair(part.name, part.name), part, wide)
        total = shape[0] if shape else 1
        left = total if self.rows is None else min(self.rows, total)
        for run in reader.chunks(elements):
            if left <= 0:
                return
            n = min(run.size // per_row, left)
            left -= n
            yield self._encoded(self._transformed(part, run[: n * per_row], n, shifted))

    def _transformed(
        self, part: WeightTensor, run: np.ndarray, n: int, shifted: bool
    ) -> np.ndarray:
        """``n`` rows of ``part`` with the transform applied."""
        if self.transform == "permute":
            how = Pair(part.name, self.name, None, "permute", self.head_rows)
            return to_gguf(how, run.reshape(n, *part.shape[1:])).reshape(-1)
        if shifted:
            plus_one: np.ndarray = np.add(run, run.dtype.type(1), dtype=run.dtype)
            return plus_one
        return run

    def _encoded(self, values: np.ndarray) -> np.ndarray:
        """``values`` as the written type: rounded to nearest even, or Q8_0 blocks."""
        target = self.target
        if isinstance(target, Code):
            dtype = payload_info(target, (1,)).dtype
            if values.dtype == dtype:
                return values
            out = np.empty(values.size, dtype)
            cast_into(out, values)
            return out
        f32 = np.ascontiguousarray(values, np.float32)
        blocks = np.empty(f32.size // target.elements * target.bytes, U8)
        bad = quantize_into(target.name, f32, blocks)
        if bad >= 0:
            raise unquantizable(target.name, self.shape, bad, f32[bad]).prefixed(
                f"tensor {self.name!r}: "
            )
        return blocks


def _weight(name: str, value: np.ndarray) -> WeightTensor:
    """An array as a weight tensor in memory (the generated tensors)."""
    payload = from_numpy(np.asarray(value))
    info = payload_info(payload.code, payload.shape)
    return WeightTensor(name, info, None, "", data=memoryview(payload.data).cast("B"))


class GgufView(NamedTuple):
    """A checkpoint as the converter's GGUF: the tensors by GGUF name in its
    order, the keys in its order, what the output should say."""

    tensors: dict[str, GgufTensor]
    keys: list[Key]
    notes: tuple[str, ...]


def checkpoint_architecture(weights: object) -> tuple[Architecture | None, str]:
    """The architecture of the model map a checkpoint directory's
    ``config.json`` names (``model_type``), or None and why not.

    >>> checkpoint_architecture({"w": 1})
    (None, 'not a Hugging Face checkpoint directory (no config.json)')
    """
    config = weights.config if isinstance(weights, Weights) else None
    if not isinstance(config, Mapping):
        return None, "not a Hugging Face checkpoint directory (no config.json)"
    model_type = config.get("model_type")
    try:
        return architecture_of(model_type), ""
    except KilnError:
        return None, (
            f"config.json's model_type {model_type!r} is no architecture of the "
            "model map (llama, mistral, qwen2, qwen3, qwen3_moe, gemma3, phi3, mixtral, gemma2, "
            "qwen2_moe)"
        )


def gguf_view(weights: Weights, outtype: str, tokenizer: Sequence[TokenizerKey] = ()) -> GgufView:
    """What ``convert_hf_to_gguf.py --outtype OUTTYPE`` writes of the checkpoint
    directory ``weights`` (opened by ``open_weights``), its ``tokenizer`` keys
    (``(key, value, type)`` in the order the converter's ``set_vocab`` writes
    them, as ``kiln_np._convert.tokenizer_gguf`` returns them) put where the
    converter puts them: last, after ``general.quantization_version``.

    Raises
    ------
    KilnError
        TYPE for a directory of no mapped architecture, quantized tensors (a
        ``quantization_config``: FP8, GPTQ, compressed-tensors... are not
        converted yet), a tensor the map has no GGUF name for, an outtype not
        in :data:`OUTTYPES`, a config the converter would refuse.
    """
    arch, why = checkpoint_architecture(weights)
    assert arch is not None, why  # the plan asks checkpoint_architecture first
    if outtype not in OUTTYPES:
        raise KilnError(
            "TYPE", f"expected an outtype among {', '.join(OUTTYPES)}, found {show_value(outtype)}"
        )
    config = dict(weights.config or {})
    folder = os.path.dirname(weights.config_path or "")
    _refuse_quantized(weights, config)
    try:
        tensors, kv = _made(arch, weights, config, folder, outtype)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        if isinstance(exc, KilnError):
            raise
        raise KilnError(
            "TYPE",
            f"{os.path.join(folder, 'config.json')!r}: expected the {arch.gguf} "
            f"hyper-parameters llama.cpp's converter reads, found {type(exc).__name__}: {exc}",
        ) from None
    keys = [(key, kind, value) for key, (kind, value) in kv.items()]
    keys += [(key, kind, value) for key, value, kind in tokenizer]  # set_vocab's, last
    notes = []
    if not tokenizer:
        notes.append(
            "no tokenizer.ggml.* keys are written (the tokenizer left out): llama.cpp needs "
            "them to load the file"
        )
    if os.path.isfile(os.path.join(folder, "README.md")):
        notes.append(
            "README.md's model card is not read: llama.cpp's converter takes general.* keys "
            "from its front matter (license, tags, base models...)"
        )
    return GgufView({t.name: t for t in tensors}, keys, tuple(notes))


def _made(
    arch: Architecture, weights: Weights, config: dict[str, Any], folder: str, outtype: str
) -> tuple[list[GgufTensor], dict[str, tuple[str, Any]]]:
    """The converter's tensors and its keys up to ``general.quantization_version``."""
    text = config.get("text_config")
    h = {**config, **text} if isinstance(text, dict) else config
    rope = rope_parameters(h)
    ordered = _converter_order(weights)
    chosen = outtype if outtype != "auto" else _guessed(ordered)
    kv: dict[str, tuple[str, Any]] = {"general.architecture": ("string", arch.gguf)}
    generated = _generated(arch, h, rope, kv)
    tensors = generated + _mapped(arch, h, ordered, folder, chosen)
    kv["general.type"] = ("string", "model")
    kv.update(sampling_keys(weights.generation_config))
    name_keys(kv, h, folder, [(t.name, t.shape) for t in tensors])
    hyper_parameters(arch, h, rope, kv, _FILE_TYPES[chosen])
    kv["general.quantization_version"] = ("uint32", _QUANTIZATION_VERSION)
    return tensors, kv


def _refuse_quantized(weights: Weights, config: Mapping[str, Any]) -> None:
    """TYPE for a checkpoint of quantized tensors (item 3 of issue 42: later)."""
    scheme = config.get("quantization_config")
    if scheme is None and not weights.quantization:
        return
    method = scheme.get("quant_method") if isinstance(scheme, Mapping) else None
    shown = repr(method) if isinstance(method, str) else show_value(scheme)
    raise KilnError(
        "TYPE",
        "expected a checkpoint of float tensors to convert to GGUF, found quantized ones "
        f"(quantization_config {shown}): FP8, GPTQ, compressed-tensors... sources are not "
        "converted yet; pass names='raw' (--names raw) to write the tensors under their "
        "own names",
    )


def _converter_order(weights: Weights) -> list[WeightTensor]:
    """The checkpoint's tensors as the converter walks them: files by name, each
    file's tensors by name."""

    def key(t: WeightTensor) -> tuple[str, str]:
        file = mapped_file(t)
        return ("" if file is None else os.path.basename(file.path), t.name)

    return sorted((weights[name] for name in weights), key=key)


def _guessed(ordered: Sequence[WeightTensor]) -> str:
    """``--outtype auto``: bf16 or f16 as the first matrix is, else f16."""
    first = next((t for t in ordered if len(t.shape) >= 2), None)
    return "bf16" if first is not None and first.info.code == Code.BF16 else "f16"


def _generated(
    arch: Architecture, h: Mapping[str, Any], rope: Mapping[str, Any], kv: dict[str, Any]
) -> list[GgufTensor]:
    """``generate_extra_tensors``: llama 3's ``rope_freqs``, phi3's long-rope
    factors (and the key phi3 sets then)."""
    made: list[tuple[str, np.ndarray]] = []
    params = rope.get("full_attention", rope)
    if arch.gguf == "llama" and params and str(params.get("rope_type", "")).lower() == "llama3":
        made.append(("rope_freqs.weight", _llama3_freqs(h, params)))
    if arch.gguf == "phi3" and rope.get("long_factor"):
        made += _phi3_factors(h, rope, kv)
    return [GgufTensor(name, [_weight(name, v)], Code.F32) for name, v in made]


def _llama3_freqs(h: Mapping[str, Any], params: Mapping[str, Any]) -> np.ndarray:
    """llama 3's rope factors, in float32 arithmetic as the converter's torch does."""
    base = float(params.get("rope_theta", 10000.0))
    dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
    factor = float(params.get("factor", 8.0))
    low = float(params.get("low_freq_factor", 1.0))
    high = float(params.get("high_freq_factor", 4.0))
    context = float(params.get("original_max_position_embeddings", 8192))
    f32 = np.float32
    freqs = f32(1.0) / np.power(f32(base), np.arange(0, dim, 2, dtype=f32) / f32(dim))
    wavelen = f32(2 * math.pi) / freqs
    smooth = (f32(context) / wavelen - f32(low)) / f32(high - low)
    medium = f32(1) / ((f32(1) - smooth) / f32(factor) + smooth)
    out = np.where(wavelen > context / low, f32(factor), medium)
    return np.where(wavelen < context / high, f32(1), out).astype(f32)


def _phi3_factors(
    h: Mapping[str, Any], rope: Mapping[str, Any], kv: dict[str, Any]
) -> list[tuple[str, np.ndarray]]:
    """phi3's long-rope factors and ``rope.scaling.attn_factor``."""
    embd, heads = (
        find_hparam(h, ("hidden_size", "n_embd")),
        find_hparam(h, ("num_attention_heads", "n_head")),
    )
    context = find_hparam(h, ("n_positions", "max_position_embeddings"))
    original = rope["original_max_position_embeddings"]
    dims = int(rope.get("partial_rotary_factor", 1.0) * embd) // heads
    scale = context / original
    kind = str(rope.get("rope_type", "")).lower()
    if kind in ("su", "longrope"):
        attn = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
    elif kind == "yarn":
        attn = 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0
    else:
        raise KilnError(
            "TYPE", f"expected phi3's rope_type su, longrope or yarn, found {show_value(kind)}"
        )
    kv["phi3.rope.scaling.attn_factor"] = ("float32", attn)
    long, short = list(rope["long_factor"]), rope.get("short_factor")
    if not isinstance(short, list) or len(long) != len(short) or len(long) * 2 != dims:
        raise KilnError(
            "TYPE",
            f"expected phi3's long_factor and short_factor of {dims // 2} values each, found "
            f"{show_value(long)} and {show_value(short)}",
        )
    return [
        ("rope_factors_long.weight", np.asarray(long, np.float32)),
        ("rope_factors_short.weight", np.asarray(short, np.float32)),
    ]


def _mapped(
    arch: Architecture,
    h: Mapping[str, Any],
    ordered: Sequence[WeightTensor],
    folder: str,
    outtype: str,
) -> list[GgufTensor]:
    """The checkpoint's tensors as the converter's ``modify_tensors`` makes them."""
    made: list[GgufTensor] = []
    experts: dict[int, dict[str, WeightTensor]] = {}
    n_experts = find_hparam(h, ("num_local_experts", "num_experts"))
    roles = sorted(hf for _, hf in arch.names if "{xid}" in hf)  # the converter's order
    for t in ordered:
        name = t.name.replace("language_model.", "")
        if _multimodal(name) or name.endswith(_SKIPPED) or _unused(arch, t.name):
            continue
        bid = next((int(p) for p in name.split(".") if p.isdecimal()), None)
        if roles and ".experts." in name and bid is not None:
            layer = experts.setdefault(bid, {})
            layer[name] = t
            if len(layer) >= int(n_experts or 0) * len(roles):
                for role in roles:
                    each = role.replace("{bid}", str(bid)) + ".weight"
                    parts = [layer.pop(each.replace("{xid}", str(x)), None)
                             for x in range(int(n_experts))]  # fmt: skip
                    made.append(
                        _tensor(arch, h, each.replace("{xid}", "0"), parts, outtype, folder)
                    )
            continue
        made.append(_tensor(arch, h, name, [t], outtype, folder))
    left = [n for layer in experts.values() for n in layer]
    if left:
        raise KilnError(
            "TYPE",
            f"expected {n_experts} experts of {len(roles)} tensors in each layer, found tensors no "
            f"layer completes: {left[:3]}",
        )
    return made


def _unused(arch: Architecture, name: str) -> bool:
    """``Gemma2Model.filter_tensors``: gemma2's ``lm_head`` (llama.cpp ties it)."""
    return arch.gguf == "gemma2" and name == "lm_head.weight"


def _multimodal(name: str) -> bool:
    """``TextModel.filter_tensors``: the tensors of another modality."""
    return name.startswith(_MULTIMODAL_PREFIXES) or any(p in name for p in _MULTIMODAL_PARTS)


def _tensor(
    arch: Architecture,
    h: Mapping[str, Any],
    hf: str,
    parts: Sequence[WeightTensor | None],
    outtype: str,
    folder: str,
) -> GgufTensor:
    """One written tensor: its GGUF name, transform and type."""
    found = gguf_name(arch, hf)
    if found is None or any(p is None for p in parts):
        raise KilnError(
            "TYPE",
            f"tensor {hf!r}: expected a tensor the model map names in GGUF ({arch.gguf}), "
            "found none (convert with names='raw', --names raw, to keep the checkpoint's names)",
        )
    name = found[0]
    given = [p for p in parts if p is not None]
    transform, head_rows, rows = "", 0, None
    if arch.permuted and hf.endswith(
        ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias")
    ):
        heads = find_hparam(h, ("n_heads", "num_attention_heads"))
        if hf.split(".")[-2] == "k_proj":
            heads = find_hparam(h, ("n_kv_heads", "num_key_value_heads"))
        rows_count = given[0].shape[0] if given[0].shape else 0
        if not isinstance(heads, int) or heads <= 0 or rows_count % (2 * heads):
            raise KilnError(
                "TYPE",
                f"tensor {hf!r}: expected config.json's head count to split its {rows_count} "
                f"rows into heads of two halves (llama.cpp's rope order), found {heads!r}",
            )
        transform, head_rows = "permute", rows_count // heads
    elif arch.norm_offset and hf.endswith("norm.weight"):
        transform = "offset"
    if arch.gguf == "gemma3" and "embed_tokens.weight" in hf:
        rows = _vocabulary_rows(h, folder)
    dims = len(given[0].shape) + (1 if len(given) > 1 else 0)
    last = given[0].shape[-1] if given[0].shape else 1
    target: Code | Block
    kept = name.endswith(("_norm.weight", *_F32_ROLES)) or not name.endswith(".weight")
    if dims <= 1 or kept:  # the converter's float32 tensors
        target = Code.F32
    elif outtype == "q8_0":
        target = _Q8_0 if last % _Q8_0.elements == 0 else Code.F16  # the converter's fallback
    else:
        target = _FLOATS[outtype]
    return GgufTensor(name, given, target, transform, head_rows, rows)


def _vocabulary_rows(h: Mapping[str, Any], folder: str) -> int:
    """gemma3's embedding rows the converter keeps: the SentencePiece
    vocabulary's size (the config's ``vocab_size``), else ``tokenizer.json``'s
    entries and added tokens."""
    if os.path.isfile(os.path.join(folder, "tokenizer.model")):
        size = find_hparam(h, ("vocab_size_per_layer_input", "vocab_size"))
        if isinstance(size, int) and size > 0:
            return size
        raise KilnError(
            "TYPE", f"expected config.json's vocab_size beside tokenizer.model, found {size!r}"
        )
    path = os.path.join(folder, "tokenizer.json")
    try:
        with open_regular(path) as f:
            data = parse_json(f.read(), f"{path!r}: ")
    except OSError as exc:
        raise KilnError(
            "TYPE",
            f"expected gemma3's tokenizer.json or tokenizer.model in {folder!r} (the converter "
            f"keeps as many embedding rows as they hold tokens), found neither: {exc}",
        ) from None
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = data.get("added_tokens") if isinstance(data, dict) else None
    if not isinstance(vocab, (dict, list)) or not isinstance(added, list):
        raise KilnError(
            "TYPE",
            f"{path!r}: expected a model.vocab and an added_tokens list, found "
            f"{show_value(vocab)} and {show_value(added)}",
        )
    return len(vocab) + len(added)
