"""Conversion as a plan, then its execution: :func:`plan_conversion` computes once,
from the tensors to write, the destination's format row and the options, everything
a conversion will do, and :func:`execute` does it.

The plan holds, before a byte is written:

- each tensor's :class:`Step`: its action (``copy`` its bytes, ``dequantize`` GGML
  blocks or a scheme's parts to a float type, ``quantize`` to a GGML or float
  type, ``keep`` its type although the policy named it), the reason, its output
  name, its type and bytes before and after;
- the checked :class:`~kiln_np._convert.sources.TensorSource` items the writer
  streams;
- every path the format's writer will write (shards, splits, payload files, an
  index) and the other files written beside (a plain ``config.json``);
- the metadata carried, or why it is dropped;
- every refusal, raised here and nowhere else: both ``dequantize`` and
  ``quantize``; ``quantize`` for a format that holds no GGML blocks; GGML blocks
  for such a format without ``dequantize``; what the format's own writer refuses
  of a tensor (its ``paths`` makes every check its ``save`` makes); a plain config
  over the source's own.  A refusal about the options themselves is
  :class:`OptionsError` (TYPE, a ``KilnError``), whose :attr:`~OptionsError.usage`
  is the command line's wording (``kiln-np`` reports it as USAGE).

Only headers, sidecar JSON and the small tensors a logical view reads to describe
itself are read: ``kiln-np convert --dry-run`` prints a plan and reads no tensor
data.  ``save_weights``, ``kiln-np convert`` and ``kiln_np.dask.convert`` execute
the same plan.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.checks import byte_size, check_path, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo
from kiln_np._files.io import open_regular_raw, replacing
from kiln_np._quants.elements import element_of
from kiln_np._quants.filetypes import (
    COPY,
    QUANTIZATION_VERSION,
    file_type_number,
    guessed_file_type,
)
from kiln_np._quants.mix import llama_order_key, pruned_block_count
from kiln_np._weights.weights import Weights

from .hf import HF_SHARD_SIZE, first_blocks, hf_view
from .imatrix import Imatrix, imatrix_keys
from .policy import QuantizePolicy, as_policy, generic_rules
from .row import Sharded, WeightFormat
from .sources import (
    Dequantize,
    Progress,
    TensorSource,
    blocks_refused,
    dequantize_code,
    tensor_sources,
)
from .to_gguf import OUTTYPES, TokenizerKey, checkpoint_architecture, gguf_view
from .tokenizer_gguf import tokenizer_keys
from .tokenizer_hf import tokenizer_files

__all__ = [
    "CLI",
    "GENERATION_CONFIG",
    "PLAIN_CONFIG",
    "PYTHON",
    "HfPlan",
    "KeyValues",
    "OptionsError",
    "Plan",
    "Spelling",
    "Step",
    "carried_metadata",
    "execute",
    "file_type_metadata",
    "plan_conversion",
    "remove_stale",
    "save_as",
    "sharded_writer",
]

PLAIN_CONFIG = "config.json"
"""The Hugging Face config written beside (or, sharded, inside) a safetensors
checkpoint dequantized from a logical view that had one."""
GENERATION_CONFIG = "generation_config.json"
"""The generation config written inside a Hugging Face directory (``--to hf``)
when the GGUF names its tokens."""


class Spelling(NamedTuple):
    """How the options are spelled in a refusal: Python's keywords or the command line's."""

    dequantize: str
    quantize: str
    no_tokenizer: str


PYTHON = Spelling("dequantize", "quantize", "tokenizer=False")
CLI = Spelling("--dequantize", "--quantize", "--no-tokenizer")


class OptionsError(KilnError):
    """A refusal about the options themselves: TYPE for Python, and :attr:`usage`,
    the command line's wording, which ``kiln-np`` reports as :attr:`cli_kind`
    (USAGE; FILE for a file it would replace without ``--force``).

    >>> err = OptionsError("expected x", "pass x")
    >>> err.kind, err.usage
    ('TYPE', 'pass x')
    """

    def __init__(self, message: str, usage: str, cli_kind: str = "USAGE") -> None:
        super().__init__("TYPE", message)
        self.usage = usage
        self.cli_kind = cli_kind


class Step(NamedTuple):
    """One tensor of a plan: ``action`` (``copy``, ``dequantize``, ``quantize``,
    ``keep``), why, and its type, bytes and bits per weight before and after;
    ``imatrix``, for a tensor quantized under an importance matrix, what it gave
    the tensor (``"weights"``, ``"ignored"``: its type ignores them, ``"no
    entry"``), else None."""

    name: str
    action: str
    reason: str
    source_type: str
    target_type: str
    source_bytes: int
    target_bytes: int
    elements: int
    imatrix: str | None = None

    def record(self) -> dict[str, Any]:
        """The step as JSON (``kiln-np convert --dry-run --json``)."""
        fields = self._asdict()
        imatrix = fields.pop("imatrix")
        return {
            **fields,
            "source_bpw": _bpw(self.source_bytes, self.elements),
            "target_bpw": _bpw(self.target_bytes, self.elements),
            "imatrix": imatrix,
        }


def _bpw(n: int, elements: int) -> float | None:
    """Bits per weight, to 4 places.

    >>> _bpw(18, 32), _bpw(0, 0)
    (4.5, None)
    """
    return round(8 * n / elements, 4) if elements else None


@dataclass(frozen=True)
class Plan:
    """A conversion before a byte is written (:func:`plan_conversion`)."""

    row: WeightFormat
    target: str
    source_format: str | None
    sources: tuple[TensorSource, ...]
    steps: tuple[Step, ...]
    paths: tuple[str, ...]
    extras: tuple[tuple[str, bytes], ...]
    replaced: tuple[str, ...]
    stale: tuple[str, ...]
    folder: str | None
    metadata: Mapping[str, Any] | None
    max_shard_size: int | None
    dequantize: str | None
    quantize: QuantizePolicy | None
    notes: tuple[str, ...] = ()
    """What the output says beside the steps: which rules of a llama-quantize
    file type's mix did not apply to a model llama.cpp would not load."""

    @property
    def outputs(self) -> list[str]:
        """Every file the plan writes: the format's, then the extras."""
        return [*self.paths, *(where for where, _ in self.extras)]

    def totals(self) -> dict[str, Any]:
        """Tensors per action and bytes before and after.

        >>> import numpy as np
        >>> from kiln_np.formats import FORMATS
        >>> row = next(r for r in FORMATS if r.name == "gguf")
        >>> w = {"blk.0.ffn_up.weight": np.ones((2, 32), "<f4")}
        >>> plan = plan_conversion(w, "m.gguf", row, quantize="q8_0")
        >>> plan.totals()["actions"], plan.totals()["target_bytes"]
        ({'quantize': 1}, 68)
        """
        actions: dict[str, int] = {}
        for s in self.steps:
            actions[s.action] = actions.get(s.action, 0) + 1
        source = sum(s.source_bytes for s in self.steps)
        target = sum(s.target_bytes for s in self.steps)
        elements = sum(s.elements for s in self.steps)
        return {
            "tensors": len(self.steps),
            "actions": actions,
            "source_bytes": source,
            "target_bytes": target,
            "elements": elements,
            "source_bpw": _bpw(source, elements),
            "target_bpw": _bpw(target, elements),
        }


def carried_metadata(weights: Weights, row: WeightFormat) -> Mapping[str, Any] | None:
    """The metadata of ``weights`` when the format of ``row`` can hold it (its own
    format's always; another's as :attr:`WeightFormat.carries` says), else None.

    >>> from kiln_np.formats import FORMATS
    >>> gguf = next(r for r in FORMATS if r.name == "gguf")
    >>> gguf.carries({"format": "pt"}), gguf.carries({"n": 1})
    (True, False)
    """
    metadata = weights.metadata
    return metadata if weights.format == row.name or row.carries(metadata) else None


def plan_conversion(
    tensors: Mapping[str, Any],
    target: str,
    row: WeightFormat,
    *,
    metadata: Mapping[str, Any] | None = None,
    max_shard_size: int | str | None = None,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
    spelling: Spelling = PYTHON,
    distributed: bool = False,
    force: bool = False,
    folder: bool = False,
    tokenizer: bool = True,
    names: str = "map",
    outtype: str | None = None,
) -> Plan:
    """The plan of writing ``tensors`` to ``target`` (absolute) in the format of ``row``
    (``distributed``: a shard per task, as ``kiln_np.dask`` executes it; ``force``:
    replace an existing file beside the output that the conversion did not write,
    listed in :attr:`Plan.replaced`, which is otherwise refused, and remove what the
    output replaces without overwriting it, :attr:`Plan.stale`: the old DST beside
    new splits, an older split set of DST's name; ``folder``: ``target`` is a
    directory to write the format's folder layout into, as a checkpoint directory
    converted to a DST without a suffix is: ``model.safetensors`` (or shards and
    their index) and ``config.json`` inside, as transformers writes them;
    ``tokenizer``: for Hugging Face names, write the GGUF's tokenizer as
    transformers' files, refusing one :mod:`~kiln_np._convert.tokenizer_hf` does
    not cover, and for a checkpoint converted to GGUF through the map its
    ``tokenizer.ggml.*`` keys (:mod:`~kiln_np._convert.tokenizer_gguf`), refusing
    one the converter refuses; False writes the model without them; ``names``: ``"map"`` writes a
    Hugging Face checkpoint directory of an architecture of the model map to GGUF
    as llama.cpp's converter does, under ``outtype`` (``kiln_np._convert.to_gguf``;
    its default ``"f16"`` is the converter's), ``"raw"`` under its own names with
    no llama.cpp keys).

    Raises
    ------
    KilnError
        Every refusal (the module docstring), before anything is written:
        :class:`OptionsError` for the options, TYPE, SHAPE or LENGTH naming the
        tensor for what the format cannot hold.

    Examples
    --------
    >>> import numpy as np
    >>> from kiln_np.formats import FORMATS
    >>> row = next(r for r in FORMATS if r.name == "gguf")
    >>> w = {"blk.0.ffn_up.weight": np.ones((2, 64), "<f4"),
    ...      "blk.0.ffn_norm.weight": np.ones(64, "<f4")}
    >>> plan = plan_conversion(w, "/tmp/m.gguf", row, quantize="q8_0")  # llama.cpp's order
    >>> [(s.name, s.action, s.target_type) for s in plan.steps]
    [('blk.0.ffn_norm.weight', 'keep', 'f32'), ('blk.0.ffn_up.weight', 'quantize', 'ggml.q8_0')]
    >>> plan.steps[0].reason
    'Q8_0 does not quantize it (1-D)'
    >>> plan.paths
    ('/tmp/m.gguf',)
    """
    assert row.paths is not None  # the caller found a writer
    if max_shard_size is not None:  # an int, or a size as Hugging Face writes it ("5GB")
        max_shard_size = byte_size(max_shard_size, "max_shard_size")
    if distributed:
        _sharded(row, max_shard_size)  # a shard per task: the format must say how
    code = dequantize_code(dequantize, spelling.dequantize)
    policy = as_policy(quantize, spelling.quantize)
    _refuse_options(code, policy, dequantize, row, max_shard_size)
    model = metadata
    if model is None and isinstance(tensors, Weights):
        model = tensors.metadata  # the mix reads the model's metadata, carried or not
    if policy is not None and policy.override_kv:  # llama.cpp's loader reads them too
        model = {**(model or {}), **{key: value for key, _, value in policy.override_kv}}
    # the model map: a GGUF's tensors under transformers' names, in a directory
    hf = _hf_tensors(tensors, metadata, code, row, spelling, target, max_shard_size, tokenizer)
    if hf is not None:
        tensors, max_shard_size = hf.tensors, hf.max_shard_size
        metadata, folder = {"format": "pt"}, True
    tensors, metadata, model, gguf_notes = _gguf_tensors(
        tensors, metadata, model, row, names, outtype, policy, code, spelling, tokenizer
    )
    sources = tensor_sources(tensors, dequantize=dequantize, quantize=policy, metadata=model)
    notes: tuple[str, ...] = gguf_notes if hf is None else hf.notes
    if policy is not None and policy.file_type is not None:
        generic = generic_rules((s.name for s in sources), model)
        notes = (generic,) if generic else ()
        # llama-quantize's file: weight_name_comparer's order (--keep-split: the
        # input's, each tensor in its split), its two keys last
        if policy.keep_split:
            given = tensors.format if isinstance(tensors, Weights) else None
            sources = _kept_splits([_ggml_dims(s) for s in sources], given, row, max_shard_size)
        else:
            sources = sorted(map(_ggml_dims, sources), key=lambda s: llama_order_key(s.name))
        number = policy.file_type.number
        if policy.file_type is COPY:  # the input's, or the loader's guess
            found = file_type_number((model or {}).get("general.file_type"))
            types = (s.info.element.name.removeprefix("ggml.").upper() for s in sources)
            number = guessed_file_type(types) if found is None else found
        # --imatrix's keys are key overrides added after the user's (quantize.cpp)
        imatrix = policy.imatrix
        keys = (
            *policy.override_kv,
            *(imatrix_keys(imatrix) if isinstance(imatrix, Imatrix) else ()),
        )
        labelled = file_type_metadata(metadata, number, keys, _block_count(policy, tensors, model))
        metadata = labelled if row.carries(labelled) else metadata
        if row.name == "gguf":  # the one format whose writer lays data out by the key
            _refuse_alignment(model)
    if not row.holds_blocks:
        _refuse_blocks(sources, row.name, spelling.dequantize)
    directory = None
    if folder and row.folder_file is not None and max_shard_size is None:
        directory, target = target, os.path.join(target, row.folder_file)
    paths = row.paths(target, sources, max_shard_size=max_shard_size)
    config = _plain_config(target, tensors, row, max_shard_size, code is not None)
    extras = [*(hf.extras if hf is not None else ()), *(() if config is None else (config,))]
    replaced = tuple(where for extra in extras for where in _replaced(extra, target, force))
    stale = _stale(row, target, paths) if force else ()
    return Plan(
        row,
        target,
        tensors.format if isinstance(tensors, Weights) else None,
        tuple(sources),
        tuple(_step(s, policy) for s in sources),
        tuple(paths),
        tuple(extras),
        replaced,
        stale,
        directory,
        metadata,
        max_shard_size,
        None if code is None else code.name.lower(),
        policy,
        notes,
    )


def _refuse_options(
    code: object,
    policy: QuantizePolicy | None,
    dequantize: Dequantize,
    row: WeightFormat,
    max_shard_size: int | None,
) -> None:
    """The refusals of the options themselves, before any tensor is looked at."""
    if code is not None and policy is not None:
        raise OptionsError(
            "expected dequantize or quantize, not both: kiln_np does not requantize GGML "
            f"blocks (found dequantize={str(dequantize)!r} and quantize={str(policy)!r})",
            "pass --quantize or --dequantize, not both: kiln_np does not requantize GGML "
            "blocks (with --quantize they keep their type)",
        )
    if policy is not None and not row.holds_blocks:
        raise OptionsError(
            "expected quantize only for a format that holds GGML blocks (gguf, kiln, zarr), "
            f"found quantize={str(policy)!r} for {row.name!r}",
            f"--quantize writes GGML blocks, which {row.name} cannot hold: convert to gguf or kiln",
        )
    if max_shard_size is not None and not row.shards:
        raise KilnError(
            "TYPE",
            f"expected max_shard_size only for safetensors or GGUF, found it for {row.name!r}",
        )


def _gguf_tensors(
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    model: Mapping[str, Any] | None,
    row: WeightFormat,
    names: str,
    outtype: str | None,
    policy: QuantizePolicy | None,
    code: object,
    spelling: Spelling,
    tokenizer: bool,
) -> tuple[Mapping[str, Any], Mapping[str, Any] | None, Mapping[str, Any] | None, tuple[str, ...]]:
    """``(tensors, metadata, model, notes)`` of a conversion.  For a Hugging Face
    checkpoint directory of an architecture of the model map written as GGUF
    (``names="map"``): its tensors as llama.cpp's converter writes them
    (``kiln_np._convert.to_gguf``), the converter's keys as both the metadata
    and the model, and the notes; else the given ones, with what the output
    says of it (no note: nothing).  A ``quantize`` policy of a
    llama-quantize file type takes the converter's f32 file (its mix then runs
    over these tensors and keys, as llama-quantize over that file).  Refusals of
    the options: ``outtype`` where no converter's file is written, or other than
    f32 with a file type; ``dequantize`` or a policy of patterns with the map.
    ``tokenizer``: with the checkpoint's ``tokenizer.ggml.*`` keys
    (``kiln_np._convert.tokenizer_gguf``), the last keys, as the converter's."""
    if names not in ("map", "raw"):
        raise OptionsError(
            f"expected names 'map' or 'raw', found {show_value(names)}",
            f"--names takes map or raw, found {names!r}",
        )
    arch, why = checkpoint_architecture(tensors)
    applies = row.name == "gguf" and names == "map" and arch is not None
    if outtype is not None and not applies:
        found = why or ("names='raw'" if names == "raw" else f"format {row.name!r}")
        raise OptionsError(
            f"expected outtype only for a Hugging Face checkpoint of the model map written as "
            f"GGUF through the map, found {found}",
            f"--outtype writes what llama.cpp's converter writes of a Hugging Face checkpoint "
            f"directory as GGUF (without --names raw), found {found}",
        )
    if not applies:
        raw = row.name == "gguf" and names == "map" and isinstance(tensors, Weights)
        has_config = isinstance(tensors, Weights) and tensors.config is not None
        note = f"{why}: written under its own names, no llama.cpp keys"
        return tensors, metadata, model, (note,) if raw and has_config else ()
    mixed = policy is not None and policy.file_type is not None
    if (policy is not None and not mixed) or code is not None:
        option = spelling.quantize if policy is not None else spelling.dequantize
        raise OptionsError(
            f"expected no {option} for a Hugging Face checkpoint written to GGUF through the "
            "model map but a llama-quantize file type (q4_k_m, iq4_xs...): outtype (f32, f16, "
            "bf16, q8_0, auto) chooses its types; pass names='raw' to write the checkpoint's "
            "tensors as they are named",
            f"{option} is not taken for a Hugging Face checkpoint converted through the model "
            f"map, but for --quantize a llama-quantize file type: --outtype "
            f"{{{','.join(OUTTYPES)}}} chooses its types, or pass --names raw",
        )
    if mixed and outtype not in (None, "f32"):
        raise OptionsError(
            f"expected no outtype but f32 with a llama-quantize file type (the converter's "
            f"--outtype f32, then llama-quantize), found {outtype!r}",
            f"--quantize FTYPE of a Hugging Face checkpoint is the converter's --outtype f32 "
            f"followed by llama-quantize FTYPE: drop --outtype {outtype}",
        )
    assert isinstance(tensors, Weights)  # checkpoint_architecture found its config
    assert arch is not None  # applies
    keys = _tokenizer_keys(tensors, arch.gguf, spelling) if tokenizer else []
    view = gguf_view(tensors, "f32" if mixed else "f16" if outtype is None else outtype, keys)
    values = {key: value for key, _, value in view.keys}
    types = {key: kind for key, kind, _ in view.keys}
    made = KeyValues(values, types)
    return view.tensors, made, made, view.notes


class HfPlan(NamedTuple):
    """What the model map makes of a conversion to Hugging Face names: the
    tensors, the configs written beside them, the shard size, the notes."""

    tensors: Mapping[str, Any]
    extras: list[tuple[str, bytes]]
    max_shard_size: int | None
    notes: tuple[str, ...]


def _hf_tensors(
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    code: Any,
    row: WeightFormat,
    spelling: Spelling,
    target: str,
    max_shard_size: int | None,
    tokenizer: bool,
) -> HfPlan | None:
    """For a format that names its tensors as transformers does (``row.naming``;
    None for the others): the Hugging Face checkpoint of the GGUF ``tensors``
    (the model map), the configs written inside ``target`` (a directory), and
    the shard size: None (one ``model.safetensors``) up to ``max_shard_size``
    bytes, transformers' default :data:`~kiln_np._convert.hf.HF_SHARD_SIZE`
    when it is not given, and the tokenizer's files (``tokenizer``: TYPE naming
    the option for a tokenizer they cannot be written for).  GGML blocks need
    ``dequantize`` (TYPE naming it)."""
    if row.naming != "hf":
        return None
    quantized = first_blocks(tensors)
    if code is None and quantized is not None:
        refused = blocks_refused(*quantized, row.name, spelling.dequantize)
        assert refused is not None  # first_blocks found GGML blocks
        raise refused
    if metadata is None:
        metadata = tensors.metadata if isinstance(tensors, Weights) else {}
    view = hf_view(tensors, metadata, code)
    limit = HF_SHARD_SIZE if max_shard_size is None else max_shard_size
    total = sum(t.info.byte_length for t in view.tensors.values())
    configs = [(PLAIN_CONFIG, view.config), (GENERATION_CONFIG, view.generation_config)]
    extras = [
        (os.path.join(target, name), _json_file(value))
        for name, value in configs
        if value is not None
    ]
    files = _tokenizer_files(metadata, spelling) if tokenizer else None
    extras += [(os.path.join(target, name), body) for name, body in (files or {}).items()]
    notes = tuple(
        f"{name} was generated by llama.cpp's converter from the rope scaling, "
        "which config.json holds"
        for name in view.generated
    )
    return HfPlan(view.tensors, extras, limit if total > limit else None, notes)


def _tokenizer_keys(weights: Weights, arch: str, spelling: Spelling) -> Sequence[TokenizerKey]:
    """The checkpoint's tokenizer as the converter's ``tokenizer.ggml.*`` keys; a
    refusal names the option that leaves them out."""
    folder = os.path.dirname(weights.config_path or "")
    try:
        return tokenizer_keys(folder, arch, dict(weights.config or {}))
    except KilnError as exc:
        raise KilnError(
            exc.kind,
            f"the checkpoint's tokenizer: {exc.message} ({spelling.no_tokenizer} writes the "
            "GGUF without its tokenizer keys, which llama.cpp needs to load it)",
            expected=exc.expected,
            found=exc.found,
        ) from None


def _tokenizer_files(metadata: Mapping[str, Any], spelling: Spelling) -> dict[str, bytes] | None:
    """The GGUF's tokenizer as transformers' files, or None when it has none; a
    refusal names the option that leaves them out."""
    try:
        return tokenizer_files(metadata)
    except KilnError as exc:
        raise KilnError(
            exc.kind,
            f"the GGUF's tokenizer: {exc.message} ({spelling.no_tokenizer} writes the model "
            "without its tokenizer)",
            expected=exc.expected,
            found=exc.found,
        ) from None


def _json_file(value: Mapping[str, Any]) -> bytes:
    """A config as transformers writes one: indented, keys sorted, a newline last."""
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _kept_splits(
    sources: list[TensorSource], given: str | None, row: WeightFormat, max_shard_size: int | None
) -> list[TensorSource]:
    """``sources`` in the input's order (a GGUF's splits, one after another),
    each marked with its input file's split: ``--keep-split``, which needs a
    split GGUF input and a GGUF output."""
    files = [None if s.file is None else s.file.path for s in sources]
    splits = {path: i for i, path in enumerate(dict.fromkeys(files))}
    if row.name != "gguf" or max_shard_size is not None or given != "gguf" or len(splits) < 2:
        found = (
            f"a {row.name} output"
            if row.name != "gguf"
            else "max_shard_size"
            if max_shard_size is not None
            else f"tensors not from a GGUF ({given or 'arrays'})"
            if given != "gguf"
            else "one input file"
        )
        raise OptionsError(
            f"expected keep_split only from a split GGUF to GGUF without max_shard_size, "
            f"found {found}",
            f"--keep-split writes a split GGUF's splits again: expected SRC-00001-of-0000N.gguf "
            f"to a GGUF without --max-shard-size, found {found}",
        )
    return [s._replace(split=splits[path]) for s, path in zip(sources, files, strict=True)]


def _refuse_alignment(model: Mapping[str, Any] | None) -> None:
    """Refuse a ``general.alignment`` other than 32 under a file type.

    llama-quantize copies the key but lays the data out at 32 bytes
    (``GGUF_DEFAULT_ALIGNMENT`` in ``llama_model_quantize_impl``), a file whose
    offsets its own loader refuses: no file kiln_np should write.
    """
    value = (model or {}).get("general.alignment")
    if value is not None and not (isinstance(value, (int, np.integer)) and value == 32):
        raise KilnError(
            "TYPE",
            f"metadata key 'general.alignment': expected 32 (or no key) under a llama-quantize "
            f"file type, found {show_value(value)}: llama-quantize keeps the key but lays the data "
            "out at 32, a file llama.cpp cannot load; drop the key or convert without --quantize",
        )


def _block_count(
    policy: QuantizePolicy, tensors: Mapping[str, Any], model: Mapping[str, Any] | None
) -> tuple[str, int] | None:
    """``({arch}.block_count, layers kept)`` under ``--prune-layers``, else None."""
    prune = policy.flags["prune_layers"]
    arch = (model or {}).get("general.architecture")
    if not prune or not isinstance(arch, str):
        return None
    names = sorted((n for n in tensors if isinstance(n, str)), key=llama_order_key)
    return f"{arch}.block_count", pruned_block_count(names, prune)


class KeyValues(dict[str, Any]):
    """Metadata with each key's GGUF type spelled (:attr:`types`), as a GGUF
    file's own metadata has them: what the plan hands a writer when it adds keys.

    >>> KeyValues({"n": 1}, {"n": "uint32"}).types
    {'n': 'uint32'}
    """

    def __init__(self, values: Mapping[str, Any], types: Mapping[str, str]) -> None:
        super().__init__(values)
        self.types = dict(types)


def file_type_metadata(
    metadata: Mapping[str, Any] | None,
    number: int,
    overrides: Sequence[tuple[str, str, Any]] = (),
    block_count: tuple[str, int] | None = None,
) -> KeyValues:
    """``metadata`` as ``llama-quantize`` writes it for file type ``number``: the
    input's keys in order (with their types), then ``general.quantization_version``
    and ``general.file_type`` (``uint32``) moved to the end, then each of
    ``overrides`` (``(key, type, value)``, ``--override-kv``) moved or added there,
    then ``block_count`` (``(key, count)``, after ``--prune-layers``).  An
    importance matrix's ``quantize.imatrix.*`` keys are overrides too, after the
    user's (``kiln_np._convert.imatrix.imatrix_keys``).

    >>> m = file_type_metadata({"general.file_type": 1, "a": "x"}, 15)
    >>> list(m.items()), m.types["general.file_type"]
    ([('a', 'x'), ('general.quantization_version', 2), ('general.file_type', 15)], 'uint32')
    """
    given = {} if metadata is None else metadata
    types = dict(getattr(given, "types", None) or {})
    last = ("general.quantization_version", "general.file_type")
    values = {k: v for k, v in given.items() if k not in last}
    types = {k: v for k, v in types.items() if k not in last}
    values["general.quantization_version"] = QUANTIZATION_VERSION
    values["general.file_type"] = number
    types |= {last[0]: "uint32", last[1]: "uint32"}
    count = () if block_count is None else ((block_count[0], "uint32", block_count[1]),)
    for key, kind, value in (*overrides, *count):  # gguf_set_val_*: removed, then appended
        values.pop(key, None)
        values[key], types[key] = value, kind
    return KeyValues(values, types)


def execute(plan: Plan, *, progress: Progress | None = None) -> list[str]:
    """Write what ``plan`` says, in one process: the format's files, then the extras.
    Returns the paths the format's writer wrote."""
    save = plan.row.save
    assert save is not None  # a plan is made only for a format with a writer
    if plan.folder is not None:
        os.makedirs(plan.folder, exist_ok=True)
    written = save(
        plan.target,
        plan.sources,
        metadata=plan.metadata,
        source_format=plan.source_format,
        max_shard_size=plan.max_shard_size,
        progress=progress,
    )
    for where, body in plan.extras:
        with replacing(where) as (_, f):
            f.write(body)
    remove_stale(plan)
    return [plan.folder] if plan.folder is not None else written


def remove_stale(plan: Plan) -> None:
    """Remove what the written output replaced without overwriting it
    (:attr:`Plan.stale`), once it is whole: replacing means the old set is gone."""
    for path in plan.stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _stale(row: WeightFormat, target: str, paths: Sequence[str]) -> tuple[str, ...]:
    """The files that stand for the output now and that writing ``paths`` leaves
    in place: the old DST file beside new splits, older splits of its name.

    >>> from kiln_np.formats import FORMATS
    >>> _stale(FORMATS[3], "/no/such/m.gguf", ["/no/such/m.gguf"])
    ()
    """
    old = [target] if os.path.isfile(target) else []
    old += row.replaces(target) if row.replaces is not None else []
    return tuple(p for p in old if p not in paths)


def save_as(
    row: WeightFormat, path: str | os.PathLike[str], tensors: Mapping[str, Any], **options: Any
) -> list[str]:
    """An adapter's public ``save_*``: the conversion of ``tensors`` to ``path`` in the
    format of ``row`` planned (``options``: those of :func:`plan_conversion`, and
    ``progress``), then executed; returns the paths written.

    >>> import tempfile, numpy as np
    >>> from kiln_np.kilndir import FORMAT
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = os.path.join(tmp, "w")
    ...     save_as(FORMAT, out, {"a": np.zeros(2)}) == [out]
    True
    """
    progress = options.pop("progress", None)
    plan = plan_conversion(tensors, written_path(check_path(path)), row, **options)
    return execute(plan, progress=progress)


def sharded_writer(plan: Plan) -> Sharded:
    """How the plan's format writes its shards one task at a time (``kiln_np.dask``,
    ``kiln-np convert --scheduler``); :class:`OptionsError` for a format that
    cannot, or a plan without ``max_shard_size``.

    >>> from kiln_np.formats import plan_weights
    >>> plan = plan_weights("m.gguf", {}, format="gguf")
    >>> try:
    ...     sharded_writer(plan)
    ... except OptionsError as e:
    ...     print(e.usage[:51])
    --scheduler writes a sharded safetensors checkpoint
    """
    return _sharded(plan.row, plan.max_shard_size)


def _sharded(row: WeightFormat, max_shard_size: int | None) -> Sharded:
    if row.sharded is None or max_shard_size is None:
        found = f"--to {row.name}" + ("" if max_shard_size is None else " --max-shard-size")
        raise OptionsError(
            "expected a plan of a sharded safetensors checkpoint, one task per shard (format "
            f"'safetensors' with max_shard_size), found format {row.name!r} with "
            f"max_shard_size={max_shard_size}",
            "--scheduler writes a sharded safetensors checkpoint, one task per shard: pass "
            f"--to safetensors and --max-shard-size SIZE (found {found})",
        )
    return row.sharded


def _refuse_blocks(sources: Sequence[TensorSource], target: str, option: str) -> None:
    """TYPE for a tensor of GGML blocks left as blocks, which ``target`` cannot hold."""
    for s in sources:
        if s.dequantized is None and s.logical is None:
            refused = blocks_refused(s.name, s.info, target, option)
            if refused is not None:
                raise refused


def _ggml_dims(source: TensorSource) -> TensorSource:
    """A tensor as llama-quantize's file describes it: ``ggml_n_dims`` dims, its
    leading dims of 1 (numpy order; ggml's trailing ones) dropped (qwen2moe's
    ``ffn_gate_inp_shexp``, ``(1, n_embd)``, is written ``(n_embd,)``)."""
    info = source.info
    shape = info.shape
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    if shape == info.shape:
        return source
    squeezed = PayloadInfo(info.code, shape, info.layout, offset=info.offset)
    return source._replace(info=squeezed)


def _elements(info: PayloadInfo) -> int:
    return info.count * element_of(info.code, info.layout).per_block


def _rule(policy: QuantizePolicy, name: str) -> str:
    """Which entry of ``policy`` chose the type of tensor ``name``.

    >>> _rule(QuantizePolicy.parse("q8_0,*norm*=f32"), "attn_norm")
    "'*norm*=f32'"
    """
    for pattern, type_ in policy.rules:
        if fnmatch.fnmatchcase(name, pattern):
            return repr(f"{pattern}={type_}")
    return f"the default {policy.default}"


def _step(s: TensorSource, policy: QuantizePolicy | None) -> Step:
    info = s.info
    target_type = info.element.name
    if s.mapped is not None and s.quantized is None:
        m = s.mapped
        source = m.source.info
        decoded = element_of(source.code, source.layout).kind == "ggml"
        action = "dequantize" if decoded else "copy" if m.copied else "convert"
        return Step(
            s.name, action, m.reason(), source.element.name, target_type, m.stop - m.start,
            info.byte_length, info.count,
        )  # fmt: skip
    if s.logical is not None:
        t = s.logical
        parts = ", ".join(t.parts)
        reason = f"a {t.scheme} weight stored as {len(t.parts)} tensors ({parts}), decoded"
        return Step(
            s.name, "dequantize", reason, t.scheme, target_type, t.byte_length, info.byte_length,
            t.size,
        )  # fmt: skip
    if s.dequantized is not None:
        blocks = s.dequantized.blocks
        reason = f"GGML {s.dequantized.block.name} blocks decoded (ggml's float32)"
        return Step(
            s.name, "dequantize", reason, blocks.element.name, target_type, blocks.byte_length,
            info.byte_length, info.count,
        )  # fmt: skip
    if s.quantized is not None:
        values = s.quantized.values
        assert policy is not None  # only a policy quantizes
        reason = s.rule or f"{_rule(policy, s.name)} of the policy"
        return Step(
            s.name, "quantize", reason, values.element.name, target_type, values.byte_length,
            info.byte_length, values.count, s.quantized.imatrix,
        )  # fmt: skip
    action, reason = ("keep", s.kept) if s.kept is not None else ("copy", "its bytes as they are")
    if s.rule is not None and s.kept is None:
        reason = f"{s.rule}: already {target_type}"
    elif s.kept is None and policy is not None and policy.type_for(s.name) is not None:
        reason = f"{_rule(policy, s.name)} of the policy: already {target_type}"
    n = info.byte_length
    return Step(s.name, action, reason, target_type, target_type, n, n, _elements(info))


def _replaced(extra: tuple[str, bytes], target: str, force: bool) -> tuple[str, ...]:
    """The extra file ``extra`` when it exists beside ``target`` with other bytes
    (a file the conversion did not write), allowed only with ``force``;
    :class:`OptionsError` (the command line: FILE) without it.  An existing file of
    the very bytes to write is no replacement: nothing is lost.

    >>> import shutil, tempfile
    >>> d = tempfile.mkdtemp()
    >>> where = os.path.join(d, "config.json")
    >>> with open(where, "wb") as f:
    ...     _ = f.write(b"{}")
    >>> _replaced((where, b"{}"), d, False), _replaced((where, b"[]"), d, True) == (where,)
    ((), True)
    >>> shutil.rmtree(d)
    """
    where, body = extra
    if not os.path.lexists(where) or _holds(where, body):
        return ()
    if force:
        return (where,)
    what = _what(where)
    raise OptionsError(
        f"{where!r}: expected to write the plain checkpoint's config beside {target!r}, "
        f"found {what} that this conversion did not write: remove it, or write the output "
        "into another directory",
        f"cannot write {where!r} beside the output: it exists ({what}) and this conversion "
        "did not write it; pass --force to replace it",
        "FILE",
    )


def _holds(path: str, body: bytes) -> bool:
    """Whether ``path`` is a regular file of exactly the bytes ``body``."""
    try:
        with open_regular_raw(path) as f:
            return f.read(len(body) + 1) == body
    except (OSError, KilnError):
        return False


def _what(path: str) -> str:
    """What stands at ``path``, for a message: a file of N bytes, or another kind.

    >>> _what("/")
    'a directory'
    """
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        return f"a file of {st.st_size} bytes"
    return "a directory" if stat.S_ISDIR(st.st_mode) else "a link or special file"


def _plain_config(
    target: str, tensors: object, row: WeightFormat, shards: int | None, dequantized: bool
) -> tuple[str, bytes] | None:
    """Where and what the plain checkpoint's ``config.json`` is: the source's, without
    its ``quantization_config``; None unless a logical view with a config is
    dequantized to safetensors.  A plain mapping (``--parts``) has its config too,
    but its scheme's parts stay quantized (``--dequantize`` reads GGML blocks):
    a config without ``quantization_config`` beside them would be false.  TYPE
    when it would replace the source's own config.
    """
    if (
        not dequantized
        or not row.hf_config
        or not isinstance(tensors, Weights)
        or tensors.plain is tensors
        or tensors.config is None
    ):
        return None
    folder = target if shards is not None else os.path.dirname(target)
    where = os.path.join(folder, PLAIN_CONFIG)
    source = tensors.config_path
    if source is not None and os.path.lexists(where) and os.path.samefile(where, source):
        raise KilnError(
            "TYPE",
            f"{where!r}: expected to write the plain checkpoint's config beside it, found the "
            "source checkpoint's own config there: write the output into another directory",
        )
    kept = {k: v for k, v in tensors.config.items() if k != "quantization_config"}
    return where, (json.dumps(kept, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
