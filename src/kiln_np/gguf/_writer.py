"""Writing GGUF (version 3): every tensor and key/value checked before a byte is
written, then the header and the data streamed into a new file, or into splits.

Each tensor is planned first (its GGML type and dims, or the TYPE or SHAPE
error that names it), the key/values are encoded, and only then are files
written, each to a temporary sibling renamed into place.
"""

from __future__ import annotations

import contextlib
import secrets
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from kiln_np._convert.sources import TensorSource
from kiln_np._core.checks import check_int, show_value
from kiln_np._core.errors import KilnError
from kiln_np._files.io import replacing, write_all

from ._types import (
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_DIMS,
    MAX_NAME_BYTES,
    SET_KEY,
    GGMLType,
    ggml_type_for_code,
    split_path,
    unknown_dims,
)
from ._values import U32, U64, ValueType, encode_value, parse_spec, spell, utf8

__all__ = ["gguf_paths", "write_gguf"]

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
    if len(raw) > MAX_NAME_BYTES:
        raise KilnError(
            "TYPE",
            f"{what}expected a name of at most {MAX_NAME_BYTES} UTF-8 bytes (llama.cpp's "
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


def _kept(plans: list[_Planned]) -> list[range] | None:
    """The splits the sources are marked with (``--keep-split``: runs of one
    ``split`` each), or None when they are not marked."""
    marks = [p.source.split for p in plans]
    if not marks or marks[0] is None:
        return None
    starts = [i for i, mark in enumerate(marks) if i == 0 or mark != marks[i - 1]]
    return [range(a, b) for a, b in zip(starts, [*starts[1:], len(marks)], strict=True)]


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


def gguf_paths(
    path: str, sources: Sequence[TensorSource], *, max_shard_size: int | None = None
) -> list[str]:
    """The files :func:`write_gguf` will write for these sources, every tensor
    checked as it checks them (GGUF's types, dims and names), without writing
    anything: ``path``, or its splits.

    Examples
    --------
    >>> import os, numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> sources = tensor_sources({"a": np.zeros(8), "b": np.zeros(8)})  # 64 bytes each
    >>> [os.path.basename(p) for p in gguf_paths("/m.gguf", sources, max_shard_size=64)]
    ['m-00001-of-00002.gguf', 'm-00002-of-00002.gguf']
    """
    plans = [_plan(s) for s in sources]
    kept = _kept(plans)
    if kept is not None:
        return _names(path, len(kept))
    sizes = [p.source.info.byte_length for p in plans]
    return _names(path, len(_shards(sizes, _limit(max_shard_size))))


def write_gguf(
    path: str,
    sources: Sequence[TensorSource],
    *,
    metadata: Mapping[str, Any] | None = None,
    source_format: str | None = None,
    max_shard_size: int | None = None,
    progress: Callable[[int], None] | None = None,
    metadata_types: Mapping[str, str] | None = None,
) -> list[str]:
    """Write checked sources as a GGUF file at the absolute ``path``, or as splits
    (the GGUF row's ``save``; ``kiln_np.gguf.save_gguf`` documents the rest;
    ``source_format`` is not recorded).  Returns the files written.

    >>> import os, tempfile, numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = os.path.join(tmp, "m.gguf")
    ...     write_gguf(out, tensor_sources({"w": np.ones(2, np.float32)})) == [out]
    True
    """
    plans = [_plan(source) for source in sources]
    limit = _limit(max_shard_size)
    metadata = {} if metadata is None else metadata
    for what, given in (("metadata", metadata), ("metadata_types", metadata_types or {})):
        if not isinstance(given, Mapping):
            raise KilnError("TYPE", f"expected {what} as a Mapping, found {show_value(given)}")
    if metadata_types is None:
        metadata_types = getattr(metadata, "types", None) or {}
    meta = {k: v for k, v in metadata.items() if k not in _SPLIT_KEYS}
    kv = _metadata_bytes(meta, metadata_types)
    alignment = kv.alignment
    kept = _kept(plans)
    ranges = kept or _shards([p.source.info.byte_length for p in plans], limit)
    shards = [plans[r.start : r.stop] for r in ranges]
    names = _names(path, len(shards))
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
                }
                # llama-quantize's splits carry no set id, and only the first its keys
                extra = _metadata_bytes(split if kept else {**split, SET_KEY: set_id}, {}).parts
            # Each split is read on its own (llama.cpp, gguf-py): every one needs its alignment.
            others = [] if kept else kv.every_split
            head = _header(shard, (kv.parts if i == 0 else others) + extra, alignment)
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
