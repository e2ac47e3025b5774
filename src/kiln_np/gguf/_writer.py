"""Writing GGUF (version 3): every tensor and key/value checked before a byte is
written, then the header and the data streamed into a new file, or into splits.

Each tensor is planned first (its GGML type and dims, or the TYPE or SHAPE
error that names it), the key/values are encoded, and only then are files
written, each to a temporary sibling renamed into place.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import struct
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.checks import check_int, check_path, set_module, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._files.io import replacing, write_all
from kiln_np._weights.policy import QuantizePolicy
from kiln_np._weights.sources import Dequantize, TensorSource, tensor_sources

from ._types import (
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_DIMS,
    SET_KEY,
    GGMLType,
    ggml_type_for_code,
    split_path,
    unknown_dims,
)
from ._values import U32, U64, GGUFMetadata, ValueType, encode_value, parse_spec, spell, utf8

__all__ = ["save_gguf", "save_gguf_paths"]

_MAX_NAME_BYTES = 63  # llama.cpp's GGML_MAX_NAME (64) less the NUL: it loads no longer name
_ZEROS = memoryview(bytes(MAX_ALIGNMENT))  # every padding is a slice of it: none is allocated
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count", SET_KEY)


class _Planned(NamedTuple):
    source: TensorSource
    ggml: GGMLType
    dims: tuple[int, ...]


def _plan(source: TensorSource) -> _Planned:
    """Check that GGUF (and llama.cpp) can hold one tensor, before anything is written."""
    what = f"tensor {source.name!r}: "
    info = source.info
    raw = utf8(source.name, f"{what}its name: ")
    if len(raw) > _MAX_NAME_BYTES:
        raise KilnError(
            "TYPE",
            f"{what}expected a name of at most {_MAX_NAME_BYTES} UTF-8 bytes (llama.cpp's "
            f"GGML_MAX_NAME), found {len(raw)}",
        )
    try:
        row = ggml_type_for_code(info.code, info.layout)
    except KilnError as exc:
        raise exc.prefixed(what) from None
    if row.known:
        dims = info.shape[::-1]
        if dims:
            dims = (dims[0] * row.block_elements, *dims[1:])
    else:  # an unknown type's layout keeps its dims
        kept = unknown_dims(info.code, info.layout)
        assert kept is not None  # ggml_type_for_code took the layout for that
        dims = kept
    empty = info.count == 0 or 0 in dims
    if len(info.shape) > MAX_DIMS or empty or (row.layout and not info.shape):
        found = (
            f"{len(info.shape)} dims"
            if len(info.shape) > MAX_DIMS
            else "an empty tensor (llama.cpp divides by ne[1])"
            if empty
            else "a scalar of one block"
        )
        raise KilnError(
            "SHAPE",
            f"{what}{info.context}GGUF expects 1 to {MAX_DIMS} dims (0 for a scalar of a plain "
            f"type) and at least one element, found {found}",
            code=info.code,
            shape=info.shape,
        )
    return _Planned(source, row, dims)


class _Encoded(NamedTuple):
    parts: list[bytes]  # each key/value's bytes, in order
    alignment: int  # what general.alignment asks for, or 32
    every_split: list[bytes]  # the key/values every split needs: general.alignment


def _metadata_bytes(metadata: Mapping[str, Any], types: Mapping[str, object]) -> _Encoded:
    """Each key/value's bytes, and the alignment ``general.alignment`` asks for."""
    parts = []
    alignment = DEFAULT_ALIGNMENT
    every_split = []
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise KilnError("TYPE", f"expected metadata keys as str, found {show_value(key)}")
        where = f"metadata key {key!r}: "
        spec = parse_spec(types[key], where) if key in types else None
        t, body = encode_value(value, spec, where)
        if key == "general.alignment":
            n = int(np.asarray(value))
            if t != ValueType.UINT32 or not _is_power_of_two(n) or n > MAX_ALIGNMENT:
                raise KilnError(
                    "TYPE",
                    f"{where}expected a uint32 power of two of at most {MAX_ALIGNMENT} "
                    f"(numpy.uint32(32)), found {spell(t)} {show_value(value)}",
                )
            alignment = int(np.asarray(value))
        raw = utf8(key, f"{where}its key: ")
        parts.append(U64.pack(len(raw)) + raw + U32.pack(t) + body)
        if key == "general.alignment":
            every_split.append(parts[-1])
    return _Encoded(parts, alignment, every_split)


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _shards(sizes: list[int], max_shard_size: int | None) -> list[range]:
    """Which tensors go in each split: a new split before a tensor that would take
    its data past ``max_shard_size`` bytes."""
    if max_shard_size is None:
        return [range(len(sizes))]
    starts = [0]
    held = 0
    for i, size in enumerate(sizes):
        if i > starts[-1] and held + size > max_shard_size:
            starts.append(i)
            held = 0
        held += size
    return [range(a, b) for a, b in zip(starts, [*starts[1:], len(sizes)], strict=True)]


def _names(target: str, count: int) -> list[str]:
    """The files of ``count`` splits of ``target`` (``target`` itself for one)."""
    if count == 1:
        return [target]
    stem = target[:-5] if target.endswith(".gguf") else target
    return [split_path(stem, i + 1, count) for i in range(count)]


def _limit(max_shard_size: int | None) -> int | None:
    return (
        None if max_shard_size is None else check_int(max_shard_size, "max_shard_size", minimum=1)
    )


def save_gguf_paths(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    max_shard_size: int | None = None,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
) -> list[str]:
    """The files :func:`save_gguf` will write for these arguments, absolute,
    without writing anything.

    ``kiln-np convert`` checks them against the files it reads.

    Examples
    --------
    >>> import numpy as np
    >>> tensors = {"a": np.zeros(8), "b": np.zeros(8)}  # 64 bytes each
    >>> [os.path.basename(p) for p in save_gguf_paths("m.gguf", tensors, max_shard_size=64)]
    ['m-00001-of-00002.gguf', 'm-00002-of-00002.gguf']
    """
    target = written_path(check_path(path))
    sources = tensor_sources(tensors, dequantize=dequantize, quantize=quantize)
    sizes = [s.info.byte_length for s in sources]
    return _names(target, len(_shards(sizes, _limit(max_shard_size))))


@set_module("kiln_np.gguf")
def save_gguf(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    *,
    metadata_types: Mapping[str, str] | None = None,
    max_shard_size: int | None = None,
    progress: Callable[[int], None] | None = None,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
) -> list[str]:
    """Write tensors and metadata as a GGUF (version 3) file, or as splits.

    Everything is checked before a byte is written; the data is streamed
    (a weight-file tensor is copied from its file a chunk at a time).  Each
    file is written to a temporary sibling and renamed into place; with
    splits, each is closed before the next is opened (one descriptor however
    many splits), none is renamed until all are written, and the first is
    renamed last, so a reader never finds a first split whose others are
    missing.  Every split holds the same random ``kiln_np.split.set_id``: a
    crash between the renames leaves a mix that reading refuses.

    Parameters
    ----------
    path : str or os.PathLike
        The file; with splits, ``NAME.gguf`` becomes ``NAME-00001-of-000NN.gguf``...
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
        In the order to write.  Kiln f32, f16, bf16, f64, i8, i16, i32, i64,
        and GGML blocks (code ``0x4700 + type id`` with its ``ggml.*`` layout).
        A scalar (shape ``()``) of a plain type is written with ``n_dims`` 0
        and reads back as a scalar (llama.cpp sees a 1-element tensor).
    metadata : Mapping[str, Any], optional
        Key/values, written in order.  Values say their type (see the module
        docstring); a Python ``int`` is int32 (int64 or uint64 when it needs
        them), a Python ``float`` float32 when float32 holds it exactly.
        ``split.*`` keys are dropped: splits get their own.
    metadata_types : Mapping[str, str], optional
        Types by key, overriding what values say; a :class:`GGUFMetadata`
        passed as ``metadata`` brings its own :attr:`~GGUFMetadata.types`.
    max_shard_size : int, optional
        Start a new split before a tensor that would take a split's data past
        this many bytes (gguf-split's ``--split-max-size``).  When everything
        fits in one split, ``path`` itself is written.
    progress : callable, optional
        Called with each number of payload bytes written.
    dequantize : {"f32", "bf16", "f16"}, optional
        Write each tensor of a decodable GGML block type as F32, BF16 or F16
        values, decoded a chunk at a time (``kiln_np.gguf.dequantize``'s bits);
        without it, blocks are copied as they are.
    quantize : str or kiln_np.QuantizePolicy, optional
        Quantize float tensors to GGML blocks (or store them as another float
        type) by name, as the policy says (``"q8_0"``, ``"q4_k,*norm*=f32"``:
        see ``kiln_np.save_weights``), a bounded run of blocks at a time, byte
        for byte as :func:`quantize`; not with ``dequantize``.

    Returns
    -------
    list of str
        The files written.

    Raises
    ------
    KilnError
        TYPE for a tensor type GGUF cannot hold (naming the tensor and its
        type), a name longer than 63 bytes, a metadata value of no GGUF type;
        a NaN or infinity in a tensor to quantize (naming it and the index:
        raised while the file is a temporary, nothing is left);
        SHAPE for more than 4 dims, an empty tensor or a one-block scalar;
        LENGTH for a Payload whose bytes are not its shape's.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import read_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = save_gguf(p, {"w": np.ones((2, 3), np.float32)}, {"n": np.uint32(7)})
    ...     g = read_gguf(p)
    ...     print(g.tensors[0].dims, g.metadata["n"], g.metadata.types["n"])
    (3, 2) 7 uint32
    """
    target = written_path(check_path(path))
    sources = tensor_sources(tensors, dequantize=dequantize, quantize=quantize)
    plans = [_plan(source) for source in sources]
    limit = _limit(max_shard_size)
    metadata = {} if metadata is None else metadata
    for what, given in (("metadata", metadata), ("metadata_types", metadata_types or {})):
        if not isinstance(given, Mapping):
            raise KilnError("TYPE", f"expected {what} as a Mapping, found {show_value(given)}")
    if metadata_types is None:
        metadata_types = metadata.types if isinstance(metadata, GGUFMetadata) else {}
    meta = {k: v for k, v in metadata.items() if k not in _SPLIT_KEYS}
    kv = _metadata_bytes(meta, metadata_types)
    alignment = kv.alignment
    shards = [
        plans[r.start : r.stop] for r in _shards([p.source.info.byte_length for p in plans], limit)
    ]
    names = _names(target, len(shards))
    set_id = secrets.token_hex(16)  # one per write: a mix of two writes' splits is refused
    # Nothing replaces a destination until every split is written: each split's
    # replacing() block stays open on the stack, and they rename as it unwinds, the
    # first split last.  A crash between those renames leaves a mix, which the set id
    # makes TYPE on reading.
    with contextlib.ExitStack() as stack:
        for i, (name, shard) in enumerate(zip(names, shards, strict=True)):
            extra = []
            if len(shards) > 1:
                split = {
                    "split.no": np.uint16(i),
                    "split.count": np.uint16(len(shards)),
                    "split.tensors.count": np.int32(len(plans)),
                    SET_KEY: set_id,
                }
                extra = _metadata_bytes(split, {}).parts
            # Each split is read on its own (llama.cpp, gguf-py): every one needs its alignment.
            head = _header(shard, (kv.parts if i == 0 else kv.every_split) + extra, alignment)
            _, f = stack.enter_context(replacing(name))
            fd = f.fileno()  # everything goes through the descriptor, unbuffered
            write_all(fd, head)
            write_all(fd, _ZEROS[: -len(head) % alignment])
            for plan in shard:
                plan.source.write_to(fd, progress=progress)
                write_all(fd, _ZEROS[: -plan.source.info.byte_length % alignment])
            # One descriptor at a time (a thousand splits would pass RLIMIT_NOFILE): the
            # closed temporary waits in its replacing() block until every split is written.
            f.close()
    return names


def _header(shard: list[_Planned], kv: list[bytes], alignment: int) -> bytes:
    parts = [MAGIC, U32.pack(3), U64.pack(len(shard)), U64.pack(len(kv)), *kv]
    rel = 0
    for plan in shard:
        raw = utf8(plan.source.name, "")  # checked by _plan
        parts += [
            U64.pack(len(raw)),
            raw,
            struct.pack(
                f"<I{len(plan.dims)}QIQ", len(plan.dims), *plan.dims, plan.ggml.type_id, rel
            ),
        ]
        rel += -(-plan.source.info.byte_length // alignment) * alignment
    return b"".join(parts)  # the caller pads it to the alignment
