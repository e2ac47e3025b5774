"""A GGUF's tensors as the Hugging Face checkpoint they were made from: the model
map (:mod:`kiln_np._convert.models`) applied by the conversion plan when the
destination's row names its tensors as transformers does (``--to hf``).

:func:`hf_view` turns a GGUF of a mapped architecture (its tensors and metadata)
into the checkpoint's tensors by Hugging Face name, each a :class:`MappedTensor`
(which GGUF tensor it is read from, the transform, its type and shape), and its
``config.json`` and ``generation_config.json``.  Nothing is read then but the
headers; :meth:`MappedTensor.chunks` reads its GGUF tensor (or an expert's slice
of a stacked one) a bounded run of whole rows at a time with ``readinto``, never
mapped, decodes GGML blocks to ggml's float32 (or widens a float type), applies
the map's transform to the run (a run is whole heads of a permuted tensor) and
rounds it to the checkpoint's type, to nearest even.  A tensor whose type is the
checkpoint's and that the map does not change is copied as it is; one the map
only reorders (the rope permutation) is reordered as it is, and GGML blocks
written as bfloat16 are decoded straight to it (ggml's float32 rounded in the
cache), with no float32 pass.  bfloat16 is handled as its bits throughout, so a
conversion never imports ml_dtypes (most of a second).  Memory is one run's
buffers, however large the model.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from kiln_np._codec import Payload, from_numpy
from kiln_np._core.checks import U8
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, code_label
from kiln_np._files.io import read_all
from kiln_np._kernels.bfloat16 import round_bfloat16_into, widen_bfloat16_into
from kiln_np._kernels.pool import cast_into
from kiln_np._quants.blocks import Block
from kiln_np._quants.decode import dequantize_bfloat16_into, dequantize_into
from kiln_np._quants.elements import element_of
from kiln_np._weights.summary import natural_key
from kiln_np._weights.tensors import WeightTensor, mapped_file
from kiln_np._weights.weights import Weights

from .models import (
    Pair,
    generation_config,
    gguf_architecture,
    hf_config,
    pairs,
    permute_group,
    to_hf,
)

__all__ = ["HF_SHARD_SIZE", "HfView", "MappedTensor", "first_blocks", "hf_view", "readable"]

HF_SHARD_SIZE = 50 * 10**9
"""transformers' default ``max_shard_size`` (``"50GB"``, transformers 5;
4.x wrote ``"5GB"``): a checkpoint of at most this many bytes is one
``model.safetensors``, a larger one shards and an index."""

_RUN = 1 << 21
"""Elements read, decoded and written at a time: an 8 MiB float32 buffer."""

_FLOATS = (Code.F32, Code.F16, Code.BF16, Code.F64)
_BITS: dict[int, np.dtype[Any]] = {
    Code.F32: np.dtype(np.float32),
    Code.F16: np.dtype(np.float16),
    Code.BF16: np.dtype(np.uint16),
    Code.F64: np.dtype(np.float64),
}
"""Each float type's values as numpy holds them without ml_dtypes (bfloat16: its bits)."""
_TORCH = {Code.F32: "float32", Code.F16: "float16", Code.BF16: "bfloat16"}
_FILE_TYPES = {0: Code.F32, 1: Code.F16, 32: Code.BF16}
"""llama.cpp's float file types (``general.file_type``): ALL_F32, MOSTLY_F16, MOSTLY_BF16."""


class MappedTensor:
    """One tensor of a Hugging Face checkpoint made from a GGUF tensor by the
    model map: ``pair`` (the names, an expert's index, the transform), the GGUF
    ``source`` tensor, and the float ``code`` and ``shape`` it is written as.

    >>> import numpy as np
    >>> from kiln_np._convert.models import Pair
    >>> src = _weight("blk.0.attn_norm.weight", np.float32([1.5, 0.75]))
    >>> t = MappedTensor(Pair("n.weight", src.name, None, "offset"), src, Code.BF16)
    >>> t.shape, [c.tolist() for c in t.chunks()]  # bfloat16 bits: 0.5, -0.25
    ((2,), [[16128, 48768]])
    """

    __slots__ = (
        "_block", "_row_bytes", "_rows", "code", "pair", "shape", "source", "start", "stop",
    )  # fmt: skip

    def __init__(self, pair: Pair, source: WeightTensor, code: Code) -> None:
        element = element_of(source.info.code, source.info.layout)
        if not readable(source):
            raise KilnError(
                "TYPE",
                f"tensor {source.name!r}: expected float values or GGML blocks kiln_np "
                f"decodes, found {code_label(int(source.info.code))}",
            )
        self.pair, self.source, self.code = pair, source, code
        self._block: Block | None = element.decoded
        whole = source.shape
        per_expert = source.info.byte_length // max(whole[0], 1) if whole else 0
        if pair.expert is None:
            self.shape = whole
            self.start, self.stop = 0, source.info.byte_length
        else:
            self.shape = whole[1:]
            self.start, self.stop = pair.expert * per_expert, (pair.expert + 1) * per_expert
        # a row: one index of the first axis (a 0-d tensor, or a 1-D one of blocks, is one)
        one = not self.shape or (len(self.shape) == 1 and self._block is not None)
        self._rows = 1 if one else max(self.shape[0], 1)
        self._row_bytes = (self.stop - self.start) // self._rows

    @property
    def name(self) -> str:
        """The Hugging Face name."""
        return self.pair.hf

    @property
    def info(self) -> PayloadInfo:
        """The description of the tensor written."""
        return payload_info(self.code, self.shape)

    @property
    def copied(self) -> bool:
        """Whether its bytes are the source's as they are (same type, no transform)."""
        return (
            self._block is None and self.source.info.code == self.code and not self.pair.transform
        )

    def reason(self) -> str:
        """What the conversion does to it, for the plan."""
        src = self.source
        what = f"{src.name}" + ("" if self.pair.expert is None else f"[{self.pair.expert}]")
        how = {
            "permute": "rows out of llama.cpp's rope order",
            "offset": "norm minus the converter's +1 (float32)",
        }.get(self.pair.transform, "")
        kind = (
            src.info.element.name if self._block is None else f"{self._block.name} blocks decoded"
        )
        out = self.code.name.lower()
        cast = "" if self.copied or kind == out else f" -> {out}"
        return f"from {what} ({kind}{cast}){', ' + how if how else ''}"

    def chunks(self, elements: int | None = None) -> Iterator[np.ndarray]:
        """The values to write, in order, a run of whole rows (whole heads of a
        permuted tensor) of about ``elements`` values (:data:`_RUN` when None)
        at a time: arrays of the written type's bits (bfloat16 as ``uint16``, so
        that writing never imports ml_dtypes), each valid until the next is
        asked for."""
        elements = _RUN if elements is None else elements
        per_row = math.prod(self.shape) // self._rows
        group = permute_group(self.pair)
        rows_per_run = max(group, (max(1, elements // max(per_row, 1)) // group) * group)
        runs = self._runs(rows_per_run * self._row_bytes)
        if self.copied:
            yield from (raw.view(_BITS[self.code]) for raw in runs)
        elif self.pair.transform != "offset" and (
            self.source.info.code == self.code
            or (self._block is not None and self.code == Code.BF16)
        ):  # the written type's values with no float32 pass: rows reordered as bits
            yield from self._as_bits(runs, rows_per_run, per_row)
        else:
            yield from self._through_float32(runs, rows_per_run, per_row)

    def _as_bits(
        self, runs: Iterator[np.ndarray], rows_per_run: int, per_row: int
    ) -> Iterator[np.ndarray]:
        """Each run's values in the written type (the source's own, or GGML blocks
        decoded straight to bfloat16), the map's reordering applied to the bits."""
        block = self._block
        out = np.empty(0 if block is None else rows_per_run * per_row, _BITS[self.code])
        for raw in runs:
            rows = raw.size // self._row_bytes
            if block is None:
                values = raw.view(_BITS[self.code])
            else:
                values = out[: rows * per_row]
                dequantize_bfloat16_into(block.name, raw, values)
            yield to_hf(self.pair, self._shaped(values, rows)).reshape(-1)

    def _through_float32(
        self, runs: Iterator[np.ndarray], rows_per_run: int, per_row: int
    ) -> Iterator[np.ndarray]:
        """Each run's values as float32 (ggml's, or a float type widened), the map's
        transform applied, rounded to the written type."""
        out = np.empty(rows_per_run * per_row, _BITS[self.code])
        f32 = out if self.code == Code.F32 else np.empty(out.size, np.float32)
        src = int(self.source.info.code)
        for raw in runs:
            rows = raw.size // self._row_bytes
            values = f32[: rows * per_row]
            if self._block is not None:
                dequantize_into(self._block.name, raw, values)
            elif src == Code.BF16:
                widen_bfloat16_into(values, raw.view(np.uint16))
            else:
                cast_into(values, raw.view(_BITS[src]))  # exact, but f64: rounded
            mapped = to_hf(self.pair, self._shaped(values, rows)).reshape(-1)
            written = out[: mapped.size]
            if self.code == Code.BF16:
                round_bfloat16_into(written, mapped)
            elif not np.may_share_memory(written, mapped):  # float32 as it is: in place
                cast_into(written, mapped)  # to nearest even, over the pool; past: inf
            yield written

    def _shaped(self, values: np.ndarray, rows: int) -> np.ndarray:
        """A run's flat ``values`` (``rows`` rows) in the written shape."""
        return values.reshape(self.shape if self._rows == 1 else (rows, *self.shape[1:]))

    def _runs(self, run: int) -> Iterator[np.ndarray]:
        """The bytes of the source's slice, ``run`` bytes at a time: read
        from its file with ``readinto`` into one reused buffer (never mapped), or
        views of its bytes in memory; LENGTH when the file shrank meanwhile."""
        src = self.source
        total = self.stop - self.start
        file = mapped_file(src)
        if file is None:
            data = np.frombuffer(src.payload().data, U8)
            for start in range(0, total, run):
                yield data[self.start + start : self.start + min(total, start + run)]
            return
        raw = np.empty(min(run, total), U8)
        where = src.info.offset + self.start
        with contextlib.ExitStack() as stack:
            try:
                f = stack.enter_context(file.opened(src.info.offset + self.stop))
            except KilnError as exc:  # replaced or modified since it was opened
                raise exc.prefixed(f"tensor {src.name!r}: ") from None
            for start in range(0, total, run):
                chunk = raw[: min(run, total - start)]
                f.seek(where + start)
                got = read_all(f, chunk.data)
                if got < chunk.size:
                    raise src.info.length_error(
                        self.start + start + got,
                        f"{file.path!r} shrank while tensor {src.name!r} was read: ",
                    )
                yield chunk


def readable(source: WeightTensor) -> bool:
    """Whether the model map reads ``source``'s values: a float type, or GGML
    blocks kiln_np decodes.

    >>> f16, i8 = _weight("w", np.zeros(2, np.float16)), _weight("i", np.zeros(2, np.int8))
    >>> readable(f16), readable(i8)
    (True, False)
    """
    info = source.info
    return element_of(info.code, info.layout).decoded is not None or info.code in _FLOATS


class HfView(NamedTuple):
    """A GGUF as its Hugging Face checkpoint: the tensors by name (in natural
    name order), ``config.json``, ``generation_config.json`` (None when the GGUF
    names no token), and the GGUF tensors the config stands for (``generated``)."""

    tensors: dict[str, MappedTensor]
    config: dict[str, Any]
    generation_config: dict[str, Any] | None
    generated: tuple[str, ...]


def _weight(name: str, value: object) -> WeightTensor:
    """``value`` (a :class:`WeightTensor`, a payload or an array) as a weight tensor."""
    if isinstance(value, WeightTensor):
        return value
    payload = value if isinstance(value, Payload) else from_numpy(np.asarray(value))
    info = payload_info(payload.code, payload.shape, payload.layout)
    data = memoryview(payload.data).cast("B")
    info.check_length(data.nbytes, f"tensor {name!r}: ")
    return WeightTensor(name, info, None, "", data=data)


def first_blocks(tensors: Mapping[str, Any]) -> tuple[str, PayloadInfo] | None:
    """The first tensor of GGML blocks in ``tensors`` (which a checkpoint holds
    only dequantized), by name and description, or None.

    >>> first_blocks({"w": np.zeros(2, np.float32)}) is None
    True
    """
    for name, value in tensors.items():
        info = _weight(name, value).info
        if element_of(info.code, info.layout).kind == "ggml":
            return name, info
    return None


def hf_view(
    tensors: Mapping[str, Any], metadata: Mapping[str, Any] | None, code: Code | None
) -> HfView:
    """The Hugging Face checkpoint the GGUF ``tensors`` (with their ``metadata``:
    a :class:`Weights`'s own when None) were converted from, written as ``code``
    (None: the float type of the GGUF's matrices).

    Raises
    ------
    KilnError
        TYPE for an architecture the map does not hold, a tensor it has no
        Hugging Face name for (naming it), matrices mostly of no float type and no
        ``code``, a source that is neither float nor decodable GGML blocks,
        metadata the config cannot be derived from.

    Examples
    --------
    >>> import numpy as np
    >>> meta = {"general.architecture": "qwen2", "qwen2.block_count": 1}
    >>> w = {"token_embd.weight": np.ones((8, 4), np.float32),
    ...      "blk.0.attn_norm.weight": np.ones(4, np.float32)}
    >>> view = hf_view(w, meta, None)
    >>> list(view.tensors), view.config["tie_word_embeddings"], view.config["dtype"]
    (['model.embed_tokens.weight', 'model.layers.0.input_layernorm.weight'], True, 'float32')
    """
    if metadata is None:
        metadata = tensors.metadata if isinstance(tensors, Weights) else {}
    weights = {name: _weight(name, value) for name, value in tensors.items()}
    arch = gguf_architecture(metadata, weights, "the GGUF's general.architecture: ")
    shapes = {name: t.shape for name, t in weights.items()}
    made, generated, unmapped = pairs(arch, shapes, metadata)
    if unmapped:
        shown = ", ".join(repr(n) for n in unmapped[:3]) + (", ..." if len(unmapped) > 3 else "")
        raise KilnError(
            "TYPE",
            f"expected every tensor of a {arch.gguf} GGUF to have a Hugging Face name in the "
            f"model map, found {len(unmapped)} without: {shown} (convert to safetensors to keep "
            "GGUF names, or leave them out: kiln-np convert --exclude, Weights.select)",
        )
    chosen = code if code is not None else _matrix_type(weights, metadata)
    mapped = [MappedTensor(p, weights[p.gguf], chosen) for p in made]
    mapped.sort(key=lambda t: natural_key(t.name))
    made_by_converter = {n: np.asarray(weights[n]) for n in generated}  # 1-D, small
    config = hf_config(arch, metadata, shapes, _TORCH[chosen], made_by_converter)
    return HfView(
        {t.name: t for t in mapped}, config, generation_config(metadata), tuple(generated)
    )


def _matrix_type(weights: Mapping[str, WeightTensor], metadata: Mapping[str, Any]) -> Code:
    """The checkpoint's float type: the converter's ``--outtype`` as
    ``general.file_type`` says it (0 F32, 1 F16, 32 BF16), else the type of most
    of the matrices' elements (a router or a norm the converter keeps f32 is
    not the checkpoint's type)."""
    file_type = _FILE_TYPES.get(metadata.get("general.file_type"))  # type: ignore[arg-type]
    if file_type is not None:
        return file_type
    counts: dict[Code, int] = {}
    for t in weights.values():
        if len(t.shape) >= 2:
            counts[Code(t.info.code)] = counts.get(Code(t.info.code), 0) + t.size
    top = max(counts, key=counts.__getitem__, default=None)
    if top in _TORCH:
        return top
    shown = ", ".join(sorted(code_label(int(c)) for c in counts)) or "no matrix"
    raise KilnError(
        "TYPE",
        "expected the GGUF's matrices to be mostly of a float type (f32, f16, bf16), the "
        f"checkpoint's, found {shown}: pass dequantize='bf16' (or 'f16', 'f32') to choose it",
    )
