"""llama-quantize's file types, and the GGML type llama.cpp gives each tensor of
a model under one (``Q4_K_M``, ``IQ4_XS``, ``Q8_0``, ...): which tensors are
quantized at all, the mix's rules per category and layer, the flags, the
fallbacks for rows that are not whole blocks.

:func:`choose_types` is a pure function of the file type, the flags, the model's
GGUF metadata and its tensors (name, shape, GGML type) in llama.cpp's order
(:func:`llama_order_key`: tensors outside ``blk.`` first, then by layer, then by
name; a ``--keep-split`` run keeps the files' order instead).  It follows
``llama_model_quantize_impl`` of ``src/llama-quant.cpp`` in llama-cpp-python
0.3.36's ``vendor/llama.cpp``: the layers ``prune_layers`` drops are gone and
the later ones renumbered, the counters are set from every tensor, then each
tensor's type is chosen in order (``llama_tensor_get_type``):

1. a tensor llama.cpp never quantizes (1-D, a norm, a router, ...; every
   tensor under ``COPY``) keeps its type;
2. ``token_embedding_type`` / ``output_tensor_type`` give those tensors'
   types outright;
3. when the file type's default is a quantized type: the first
   ``tensor_types`` pattern that the tensor's name matches gives its type, else
   (without ``pure``) the mix's rules (``kiln_np._quants.mix_rules``), then the
   fallback when its rows are not whole blocks of that type.

Then, unless ``dry_run``, what llama-quantize refuses while writing: without
an importance matrix, any tensor whose type needs one (before anything is
written); then, a tensor at a time, an importance-matrix entry of the wrong
size, a tensor that needs an entry and has none, and requantizing a quantized
tensor without ``allow_requantize``.
``tests/quants/test_mix_snapshots.py`` holds it to llama.cpp's own snapshots
of 12 models.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from kiln_np._core.checks import check_int, show_value
from kiln_np._core.errors import KilnError

from .blocks import BLOCKS
from .filetypes import COPY, quantize_option
from .mix_patterns import compile_pattern, name_bytes
from .mix_rules import (
    ATTN_V_LIKE,
    FLOAT_TYPES,
    Counters,
    Model,
    Tensor,
    category,
    fallback,
    layer_of,
    mix_rule,
    refusal,
)

__all__ = [
    "GGML_TYPE_NAMES",
    "Choice",
    "MixTensor",
    "choose_types",
    "counted_layers",
    "llama_order_key",
    "model_facts",
    "pruned_block_count",
    "target_type",
]


_OTHER_TYPES: Mapping[str, int] = MappingProxyType(
    {"I8": 24, "I16": 25, "I32": 26, "I64": 27, "F64": 28}
)
GGML_TYPE_NAMES: Mapping[int, str] = MappingProxyType(
    {
        **{v: k for k, v in FLOAT_TYPES.items()},
        **{v: k for k, v in _OTHER_TYPES.items()},
        **{b.type_id: name for name, b in BLOCKS.items()},
    }
)
"""Every GGML type a GGUF tensor may have, by type id: ``kiln_np.gguf.TYPES``'
names (that table stands on a higher floor)."""
_TYPE_IDS: Mapping[str, int] = MappingProxyType({v: k for k, v in GGML_TYPE_NAMES.items()})
_BLOCK_IDS = frozenset(b.type_id for b in BLOCKS.values())
_TARGETS: Mapping[str, int] = MappingProxyType(
    {**FLOAT_TYPES, **{n: b.type_id for n, b in BLOCKS.items() if n not in ("Q8_1", "Q8_K")}}
)
"""The GGML types ggml quantizes to (``ggml_quantize_chunk``), by name."""
_KEPT = "kept: "
_IMATRIX_TYPES = frozenset({"IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_M", "IQ1_S"})
_MAX_LAYERS, _MAX_EXPERTS, _U32_MAX = 512, 1024, 2**32 - 1
_CLASS_70B: Mapping[str, tuple[int, bool]] = MappingProxyType(
    {
        "llama": (80, True),
        "llama-embed": (80, True),
        "qwen2": (80, False),
        "deci": (80, False),
        "olmo": (80, False),
        "jais2": (68, False),
    }
)
"""The architectures whose loader types a model ``LLM_TYPE_70B``: the layer
count (next-token layers left out), and whether it must also have fewer key/value
heads than query heads and a number of experts other than 8 (llama's rule)."""


class MixTensor(NamedTuple):
    """One tensor of the model: ``name``, ``shape`` in numpy order (rows last,
    as kiln_np's weight tensors give it; GGUF's ``ne`` reversed) and ``type_id``
    (``enum ggml_type``, as GGUF tensor infos store it)."""

    name: str
    shape: tuple[int, ...]
    type_id: int


@dataclass(frozen=True)
class Choice:
    """The type llama.cpp gives one tensor, and why.

    Attributes
    ----------
    name : str
        The tensor's name in the output (``prune_layers`` renumbers layers).
    source : str
        Its name in the input.
    type_id : int
        The GGML type it is written as (``enum ggml_type``).
    rule : str
        What chose it: ``"kept: a norm"``, ``"Q4_K_M default"``,
        ``"Q4_K_M rule for attn_v: use_more_bits(0, 32)"``, ``"--pure"``,
        ``"--tensor-type 'ffn_down'"``, with the fallback after ``"; "`` when
        the tensor's rows are not whole blocks.
    needs_imatrix : bool
        Whether llama-quantize needs an importance matrix to write it so.
    """

    name: str
    source: str
    type_id: int
    rule: str
    needs_imatrix: bool

    @property
    def type_name(self) -> str:
        """The GGML name of :attr:`type_id` (``"Q6_K"``)."""
        return GGML_TYPE_NAMES[self.type_id]


def target_type(value: object, what: str) -> str:
    """The GGML type named ``value`` (any case) that ggml quantizes to, upper
    case; TYPE naming ``what`` for anything else.

    >>> target_type("q6_k", "x"), target_type("bf16", "x")
    ('Q6_K', 'BF16')
    """
    if isinstance(value, str) and value.upper() in _TARGETS:
        return value.upper()
    raise KilnError(
        "TYPE",
        f"{what}: expected a GGML type to write, in any case ({', '.join(_TARGETS)}), "
        f"found {show_value(value)}",
    )


def _layer0(metadata: Mapping[str, object], key: str, n_layer: int, default: int) -> int:
    """``get_key_or_arr``: a per-layer count, as one integer or one per layer; layer 0's."""
    value = metadata.get(key)
    if value is None:
        return default
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim == 1):
        if len(value) != n_layer:
            raise KilnError(
                "TYPE",
                f"metadata {key!r}: expected an integer or an array of {n_layer} "
                f"(one per block), found an array of {len(value)}",
            )
        value = value[0]
    return check_int(value, f"metadata {key!r}", maximum=_U32_MAX)


def model_facts(metadata: Mapping[str, object], layers: int = 1) -> Model:
    """What the mixes read of a model's GGUF metadata, checked as llama.cpp's
    loader reads it: ``general.architecture``, ``{arch}.block_count`` (1..512),
    ``{arch}.nextn_predict_layers``, ``{arch}.expert_count`` (0..1024), and
    layer 0's ``{arch}.attention.head_count`` and ``head_count_kv`` (an integer
    or one per block; key/value heads default to the query heads).

    A model llama.cpp would not load for want of an architecture or a block
    count (a diffusion model's GGUF, tensors with no metadata) gets the generic
    rules: ``layers`` blocks (:func:`choose_types` counts them from the tensor
    names), and :attr:`Model.generic` says which rules that leaves out.

    Raises
    ------
    KilnError
        TYPE for a value of the wrong type, a number out of range, a per-layer
        array of another length.

    >>> m = model_facts({"general.architecture": "llama", "llama.block_count": 80,
    ...                  "llama.attention.head_count": 64, "llama.attention.head_count_kv": 8})
    >>> m.n_gqa, m.class_70b, m.generic
    (8, True, '')
    >>> model_facts({"general.architecture": "flux"}, layers=19).generic[:44]
    "no 'flux.block_count' (llama.cpp would not l"
    """
    arch = metadata.get("general.architecture")
    if arch is not None and not isinstance(arch, str):
        raise KilnError(
            "TYPE",
            f"metadata 'general.architecture': expected the architecture's name (a string), "
            f"found {show_value(arch)}",
        )
    if arch is None or metadata.get(f"{arch}.block_count") is None:
        missing = "general.architecture" if arch is None else f"{arch}.block_count"
        generic = (
            f"no {missing!r} (llama.cpp would not load the model): the generic rules, "
            f"{layers} layer{'s' * (layers != 1)} counted from the tensor names; no "
            "architecture's rules, no "
            "attention heads (attn_v's GQA rules), no experts, no 70B class"
        )
        return Model(arch or "", layers, 0, 0, 0, False, generic)
    n_layer = check_int(
        metadata.get(f"{arch}.block_count"),
        f"metadata {arch + '.block_count'!r}",
        minimum=1,
        maximum=_MAX_LAYERS,
    )
    nextn = check_int(
        metadata.get(f"{arch}.nextn_predict_layers", 0),
        f"metadata {arch + '.nextn_predict_layers'!r}",
        maximum=n_layer,
    )
    n_expert = check_int(
        metadata.get(f"{arch}.expert_count", 0),
        f"metadata {arch + '.expert_count'!r}",
        maximum=_MAX_EXPERTS,
    )
    n_head = _layer0(metadata, f"{arch}.attention.head_count", n_layer, 0)
    n_head_kv = _layer0(metadata, f"{arch}.attention.head_count_kv", n_layer, n_head)
    layers, llama_rule = _CLASS_70B.get(arch, (0, False))
    class_70b = n_layer - nextn == layers and (
        not llama_rule or (n_expert != 8 and n_head != n_head_kv)
    )
    return Model(arch, n_layer, n_expert, n_head, n_head_kv, class_70b)


def counted_layers(names: Iterable[str]) -> int:
    """The layers of a model without a block count: one past the highest
    ``blk.N.`` of ``names`` (1..512).

    >>> counted_layers(["blk.0.w", "blk.18.w", "x"]), counted_layers([])
    (19, 1)
    """
    layers = (layer_of(name) for name in names)
    counted = max((n for n in layers if n is not None), default=0) + 1
    return max(1, min(counted, _MAX_LAYERS))


def llama_order_key(name: str) -> tuple[int, bytes]:
    """The sort key of llama.cpp's ``weight_name_comparer``: the layer
    ``sscanf("blk.%d.")`` reads (-1 for none), then the name's bytes.

    >>> sorted(["blk.10.a.weight", "output.weight", "blk.2.a.weight"], key=llama_order_key)
    ['output.weight', 'blk.2.a.weight', 'blk.10.a.weight']
    """
    layer = layer_of(name)
    return (-1 if layer is None else layer), name_bytes(name)


def _checked(tensors: Iterable[object]) -> list[MixTensor]:
    """The tensors as ``MixTensor`` rows: each a (name, shape, type id) checked."""
    out: list[MixTensor] = []
    for i, item in enumerate(tensors):
        if not isinstance(item, tuple) or len(item) != 3 or not isinstance(item[0], str):
            raise KilnError(
                "TYPE",
                f"tensor {i}: expected (name, shape, GGML type id), found {show_value(item)}",
            )
        name, shape, type_id = item
        where = f"tensor {name!r}: "
        if not isinstance(shape, (tuple, list)) or len(shape) > 4:
            raise KilnError(
                "SHAPE", f"{where}expected a shape of at most 4 dims, found {show_value(shape)}"
            )
        dims = tuple(
            check_int(d, f"each dim of tensor {name!r}", kind="SHAPE", maximum=2**63 - 1)
            for d in shape
        )
        known = isinstance(type_id, (int, np.integer)) and not isinstance(type_id, bool)
        if not known or int(type_id) not in GGML_TYPE_NAMES:
            raise KilnError(
                "TYPE",
                f"{where}expected the id of a GGML type a GGUF tensor may have "
                f"(0 F32, 1 F16, ... 42 Q2_0), found {show_value(type_id)}",
            )
        out.append(MixTensor(name, dims, int(type_id)))
    return out


_BLOCK = re.compile(r"blk\.([0-9]+)\.")


def _remapped(
    tensors: list[MixTensor], prune: list[int]
) -> tuple[list[tuple[str, MixTensor]], int]:
    """``remap_layer``: each kept tensor with its output name (a pruned layer's
    tensors left out, the later layers renumbered in the order they come), and
    the blocks kept (``blk_id``, llama-quantize's new block count)."""
    if not prune:
        return [(t.name, t) for t in tensors], 0
    mapped: dict[int, str] = {}
    next_id = 0
    out: list[tuple[str, MixTensor]] = []
    for t in tensors:
        found = _BLOCK.search(t.name)
        if found is None:
            out.append((t.name, t))
            continue
        digits = found[1].lstrip("0") or "0"  # std::stoi: leading zeros are fine
        if len(digits) > 10 or int(digits) > 2**31 - 1:
            raise KilnError(
                "TYPE",
                f"tensor {t.name!r}: expected a layer number that fits an int, "
                f"found {digits[:20]}{'...' * (len(digits) > 20)}",
            )
        block = int(digits)
        if block not in mapped:
            if block in prune:
                mapped[block] = ""
            elif block < prune[0]:
                mapped[block], next_id = str(block), block + 1
            else:
                mapped[block], next_id = str(next_id), next_id + 1
        if mapped[block]:
            out.append((t.name[: found.start(1)] + mapped[block] + t.name[found.end(1) :], t))
    return out, next_id


Override = tuple[str, Callable[[str], bool], str]
"""A per-tensor type: the rule's words, whether it matches a name, the type."""


def _globs(name_types: Iterable[tuple[str, str]]) -> list[Override]:
    """``(glob, TYPE)`` pairs matched against the whole name (``fnmatchcase``)."""
    out: list[Override] = []
    for glob, type_ in name_types:
        where = f"name_types entry {glob + '=' + type_!r}"
        matches = functools.partial(fnmatch.fnmatchcase, pat=glob)
        out.append(
            (f"{glob + '=' + type_.upper()!r} of the policy", matches, target_type(type_, where))
        )
    return out


def pruned_block_count(names: Iterable[str], prune_layers: Iterable[int]) -> int:
    """The ``{arch}.block_count`` llama-quantize writes after ``--prune-layers``:
    the layers kept, as ``remap_layer`` counts them over ``names`` in llama.cpp's
    order.

    >>> pruned_block_count([f"blk.{i}.w" for i in range(4)], [1])
    3
    """
    prune = sorted({check_int(p, "each of prune_layers", maximum=2**31 - 1) for p in prune_layers})
    return _remapped([MixTensor(n, (), 0) for n in names], prune)[1]


def _overrides(tensor_types: Iterable[str]) -> list[Override]:
    """``--tensor-type PATTERN=TYPE`` entries: the rule's words, the pattern's
    search, the type."""
    if isinstance(tensor_types, str):
        raise KilnError(
            "TYPE",
            f"tensor_types: expected an iterable of 'PATTERN=TYPE' strings, found the string "
            f"{tensor_types!r}",
        )
    out: list[Override] = []
    for entry in tensor_types:
        pattern, eq, type_ = entry.partition("=") if isinstance(entry, str) else ("", "", "")
        if not (eq and pattern and type_):
            raise KilnError(
                "TYPE",
                f"tensor_types: expected 'PATTERN=TYPE' with a pattern and a type, "
                f"found {show_value(entry)}",
            )
        where = f"tensor_types entry {entry!r}"
        found = compile_pattern(pattern).search
        out.append((f"--tensor-type {pattern!r}", _searcher(found), target_type(type_, where)))
    return out


def _searcher(search: Callable[[bytes], object]) -> Callable[[str], bool]:
    """Whether ``search`` finds its pattern in a name's bytes."""
    return lambda name: search(name_bytes(name)) is not None


def _needs_imatrix(name: str, chosen: str, mix: str) -> bool:
    """``tensor_requires_imatrix``: the grid types, and Q2_K in a Q2_K_S file,
    except for the output and the token embeddings."""
    if category(name) in ("output", "token_embd"):
        return False
    return chosen in _IMATRIX_TYPES or (chosen == "Q2_K" and mix == "Q2_K_S")


@dataclass(frozen=True)
class _Options:
    mix: str  # the option's name, aliases resolved: Q4_K_M
    default: str
    copy: bool
    model: Model
    pure: bool
    output_type: str | None
    embd_type: str | None
    patterns: tuple[Override, ...]
    keep_output: bool


def _choose(name: str, t: Tensor, source: MixTensor, o: _Options, n: Counters) -> tuple[str, str]:
    """``llama_tensor_get_type``: the type of one tensor and the rule that chose it
    (``"kept: ..."`` for a tensor llama.cpp does not quantize)."""
    why = refusal(t, o.model.architecture, copy=o.copy, keep_output=o.keep_output)
    if why is not None:
        return GGML_TYPE_NAMES[source.type_id], f"{_KEPT}{why}"
    cat = category(name)
    matched = next((p for p in o.patterns if p[1](name)), None)
    # per_layer_token_embd follows --token-embedding-type too, unless a pattern names it
    named = name == "per_layer_token_embd.weight" and matched is not None
    if o.embd_type is not None and cat == "token_embd" and not named:
        return o.embd_type, "--token-embedding-type"
    if o.output_type is not None and cat == "output":
        return o.output_type, "--output-tensor-type"
    chosen = o.default
    if chosen in FLOAT_TYPES:
        return chosen, f"{o.mix} default"
    if matched is not None:
        chosen, rule = matched[2], matched[0]
    elif o.pure:
        rule = "--pure"
    else:
        chosen, because = mix_rule(o.mix, chosen, t, cat, o.model, n, o.output_type)
        rule = f"{o.mix} rule for {cat}: {because}" if because else f"{o.mix} default"
    chosen, instead = fallback(t, chosen)
    return chosen, rule if instead is None else f"{rule}; {instead}"


def choose_types(
    ftype: str | int,
    tensors: Iterable[MixTensor | tuple[str, Sequence[int], int]],
    metadata: Mapping[str, object],
    *,
    pure: bool = False,
    output_tensor_type: str | None = None,
    token_embedding_type: str | None = None,
    tensor_types: Iterable[str] = (),
    name_types: Iterable[tuple[str, str]] = (),
    leave_output_tensor: bool = False,
    allow_requantize: bool = False,
    prune_layers: Iterable[int] = (),
    imatrix: Mapping[str, int] | None = None,
    dry_run: bool = False,
) -> list[Choice]:
    """The GGML type llama-quantize gives each tensor under file type ``ftype``.

    Parameters
    ----------
    ftype : str or int
        A llama-quantize file type
        (:func:`~kiln_np._quants.filetypes.quantize_option`): ``"Q4_K_M"``, ``"q8_0"``, 15.
    tensors : iterable of MixTensor or (name, shape, type id)
        Every tensor of the model (1-D ones too: they decide nothing but are
        counted as llama.cpp counts them), in llama.cpp's order
        (``sorted(..., key=lambda t: llama_order_key(t.name))``, or the files'
        order for ``--keep-split``); shapes in numpy order.
    metadata : mapping
        The model's GGUF metadata (:func:`model_facts` says what is read).
    pure, output_tensor_type, token_embedding_type, leave_output_tensor, allow_requantize
        llama-quantize's ``--pure``, ``--output-tensor-type``,
        ``--token-embedding-type``, ``--leave-output-tensor``,
        ``--allow-requantize``; types are GGML names in any case.
    tensor_types : iterable of str
        ``--tensor-type`` entries, ``"PATTERN=TYPE"``: the pattern is lower-cased
        and searched in each name as an ECMAScript regular expression
        (``kiln_np._quants.mix_patterns``); the first that matches gives the
        type of a tensor the file type would quantize (its rows' fallback still
        applies).  ``--tensor-type-file`` is these entries read from a file.
    name_types : iterable of (str, str)
        ``(glob, TYPE)`` pairs (a :class:`~kiln_np.QuantizePolicy`'s rules),
        matched against the whole name (:func:`fnmatch.fnmatchcase`) and tried
        before ``tensor_types``, with the same effect.
    prune_layers : iterable of int
        ``--prune-layers``: the layers left out; the later ones are renumbered.
    imatrix : mapping of str to int, optional
        ``--imatrix``: the importance matrix's entries (input tensor names) and
        their sizes, after ``--include-weights`` / ``--exclude-weights``.  Given
        (even empty), the rules that read ``has_imatrix`` see one, and a tensor
        that needs one is refused only when it has no entry.
    dry_run : bool
        As ``--dry-run``: choose without refusing what only the writing refuses.

    Returns
    -------
    list of Choice
        One per tensor written, in the order given (pruned layers left out).

    Raises
    ------
    KilnError
        TYPE for an unknown file type or GGML type, a malformed pattern,
        metadata llama.cpp would not load (:func:`model_facts`), a tensor of a
        mixture of experts whose name gives no layer in range; unless
        ``dry_run``, a tensor whose type needs an importance matrix it lacks,
        an importance-matrix entry whose size is not the tensor's row length
        times its experts, and a quantized tensor whose type would change
        without ``allow_requantize``.
        SHAPE for a malformed shape, or rows llama.cpp has no fallback for.

    Examples
    --------
    >>> meta = {"general.architecture": "llama", "llama.block_count": 1,
    ...         "llama.attention.head_count": 8, "llama.attention.head_count_kv": 2}
    >>> tensors = [("token_embd.weight", (1000, 512), 1), ("output_norm.weight", (512,), 0),
    ...            ("blk.0.attn_v.weight", (128, 512), 1), ("blk.0.ffn_up.weight", (1408, 512), 1),
    ...            ("blk.0.ffn_down.weight", (512, 1408), 1)]
    >>> for c in choose_types("Q4_K_M", tensors, meta):
    ...     print(f"{c.name:22} {c.type_name:4} {c.rule}")
    token_embd.weight      Q6_K Q4_K_M rule for token_embd: tied to the output, always
    output_norm.weight     F32  kept: 1-D
    blk.0.attn_v.weight    Q6_K Q4_K_M rule for attn_v: use_more_bits(0, 1)
    blk.0.ffn_up.weight    Q4_K Q4_K_M default
    blk.0.ffn_down.weight  Q8_0 Q4_K_M rule for ffn_down: layer 0 of 1: use_more_bits; rows ...
    >>> choose_types("Q4_K_M", tensors, meta)[-1].rule.split("; ")[1]
    'rows of 1408 are not whole Q6_K blocks (256): Q8_0'
    """
    row = quantize_option(ftype)
    assert row.option is not None  # every option row has an option and a default
    assert row.default is not None
    checked = _checked(tensors)
    model = model_facts(metadata, counted_layers(t.name for t in checked))
    options = _Options(
        mix=row.option,
        default=row.default,
        copy=row is COPY,
        model=model,
        pure=bool(pure),
        output_type=None
        if output_tensor_type is None
        else target_type(output_tensor_type, "output_tensor_type"),
        embd_type=None
        if token_embedding_type is None
        else target_type(token_embedding_type, "token_embedding_type"),
        patterns=(*_globs(name_types), *_overrides(tensor_types)),
        keep_output=bool(leave_output_tensor),
    )
    prune = sorted({check_int(p, "each of prune_layers", maximum=2**31 - 1) for p in prune_layers})
    kept, _ = _remapped(checked, prune)
    names = [name for name, _ in kept]
    if len(set(names)) != len(names):
        twice = next(name for i, name in enumerate(names) if name in names[:i])
        raise KilnError("TYPE", f"expected each tensor name once, found {twice!r} twice")
    cats = [category(name) for name in names]
    counters = Counters(
        n_attention_wv=sum(cat in ATTN_V_LIKE for cat in cats),
        n_layer=model.n_layer,
        tied_embeddings="output" not in cats,
        has_imatrix=imatrix is not None,
    )
    choices: list[Choice] = []
    for name, source in kept:
        t = Tensor.of(name, source.shape)
        chosen, rule = _choose(name, t, source, options, counters)
        needs = not rule.startswith(_KEPT) and _needs_imatrix(name, chosen, options.mix)
        choices.append(Choice(name, source.name, _TYPE_IDS[chosen], rule, needs))
    if not dry_run:
        _refuse_unwritable(choices, kept, options.mix, allow_requantize, imatrix)
    return choices


def _refuse_unwritable(
    choices: list[Choice],
    kept: list[tuple[str, MixTensor]],
    mix: str,
    requantize: bool,
    imatrix: Mapping[str, int] | None,
) -> None:
    """What llama-quantize refuses once the types are chosen: without an
    importance matrix, one needed (checked over every tensor first); then, for
    each tensor it quantizes in order, its imatrix entry's size, a needed entry
    missing, and a requantization."""
    need = next((c for c in choices if c.needs_imatrix), None)
    if imatrix is None and need is not None:
        raise KilnError(
            "TYPE",
            f"{mix}: tensor {need.name!r} as {need.type_name} needs an importance matrix "
            "(llama-quantize --imatrix), which kiln_np's conversion does not take yet: "
            "choose another file type or another type for the tensor",
        )
    for c, (_, source) in zip(choices, kept, strict=True):
        if c.type_id == source.type_id:
            continue  # written as it is
        size = None if imatrix is None else imatrix.get(source.name)
        wanted = source.shape[-1] * (source.shape[-3] if len(source.shape) >= 3 else 1)
        if size is not None and size != wanted and category(source.name) != "token_embd":
            raise KilnError(
                "TYPE",
                f"tensor {source.name!r}: expected an importance-matrix entry of {wanted} "
                f"values (its row length times its experts), found {size}",
            )
        if c.needs_imatrix and (size is None or size != wanted):
            raise KilnError(
                "TYPE",
                f"{mix}: tensor {source.name!r} as {c.type_name} needs an importance matrix "
                "entry (a very low-bit type), and the importance matrix has none for it",
            )
        if source.type_id in _BLOCK_IDS and not requantize:
            raise KilnError(
                "TYPE",
                f"tensor {source.name!r} is {GGML_TYPE_NAMES[source.type_id]} already: "
                f"requantizing it as {c.type_name} needs allow_requantize=True "
                "(llama-quantize --allow-requantize)",
            )
