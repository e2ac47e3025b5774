"""Writing safetensors: a file, or a sharded checkpoint (shards and their index),
every tensor checked before a byte is written, then streamed widest element first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from kiln_np._convert.sources import Progress, TensorSource
from kiln_np._core.checks import check_int, show_value
from kiln_np._core.errors import KilnError
from kiln_np._files.io import TEMP_SUFFIX, building_directory, replacing
from kiln_np._weights.metadata import read_json

from ._types import (
    INDEX_SUFFIX,
    MAX_HEADER_BYTES,
    MAX_INDEX_BYTES,
    SIZE_BYTES,
    SafetensorsDType,
    safetensors_dtype,
)

__all__ = [
    "INDEX",
    "Shard",
    "ShardPlan",
    "checkpoint_files",
    "safetensors_paths",
    "shard_plan",
    "write_index",
    "write_safetensors",
    "write_shard",
]


def write_safetensors(
    path: str,
    sources: Sequence[TensorSource],
    *,
    metadata: Mapping[str, Any] | None = None,
    source_format: str | None = None,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """:func:`save_safetensors` of checked sources to the absolute ``path``: the
    safetensors row's ``save`` (``source_format`` is not recorded); returns ``[path]``.

    >>> import os, tempfile, numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> with tempfile.TemporaryDirectory() as d:
    ...     out = os.path.join(d, "m.safetensors")
    ...     write_safetensors(out, tensor_sources({"a": np.zeros(2)})) == [out]
    True
    """
    rows = [_row_for(s) for s in sources]
    meta = _check_metadata(metadata)
    if max_shard_size is None:
        header = _header(sources, rows, meta)
        with replacing(path) as (_, f):
            f.write(header)
            f.flush()
            for source in _widest_first(sources, rows):
                source.write_to(f.fileno(), progress=progress)
        return [path]
    plan = shard_plan(sources, max_shard_size, metadata=meta, rows=rows)
    with building_directory(path, checkpoint_files) as tmp:
        for shard in plan.shards:
            write_shard(shard, plan.sources, tmp, progress=progress)
        write_index(plan, tmp)
    return [path]  # the directory of a sharded checkpoint


INDEX = "model" + INDEX_SUFFIX
"""The index of a sharded checkpoint, as transformers names it."""


class Shard(NamedTuple):
    """One file of a sharded checkpoint, planned: its ``name``, its ``header``
    (the 8-byte size and the JSON, padded: computed before any data is
    written), the ``tensors`` it holds by name in write order (widest
    element first) and its ``size`` in bytes (header and data)."""

    name: str
    header: bytes
    tensors: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class ShardPlan:
    """A sharded checkpoint before a byte is written: every shard
    (:class:`Shard`), the checked sources by name, and the index's JSON text.
    :func:`save_safetensors` and ``kiln_np.dask.convert`` write the same plan,
    so their outputs are byte-identical."""

    shards: tuple[Shard, ...]
    sources: Mapping[str, TensorSource]
    index: str


def shard_plan(
    sources: Sequence[TensorSource],
    max_shard_size: int,
    *,
    metadata: Mapping[str, str] | None,
    rows: list[SafetensorsDType] | None = None,
) -> ShardPlan:
    """The shards of a checkpoint of ``sources`` (in order), each started before
    a tensor that would take its data past ``max_shard_size`` bytes; every
    tensor, the metadata and each header checked (as :func:`save_safetensors`
    checks them; ``rows`` are the sources' safetensors dtypes when already
    found).

    Examples
    --------
    >>> import numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> sources = tensor_sources({"a": np.zeros(8), "b": np.zeros(2, np.int8)})
    >>> plan = shard_plan(sources, 64, metadata=None)
    >>> for shard in plan.shards:
    ...     print(shard.name, shard.tensors, shard.size)
    model-00001-of-00002.safetensors ('a',) 128
    model-00002-of-00002.safetensors ('b',) 66
    >>> plan.index.splitlines()[2]
    '    "total_size": 66'
    """
    found = [_row_for(s) for s in sources] if rows is None else rows
    meta = _check_metadata(metadata)
    limit = check_int(max_shard_size, "max_shard_size", minimum=1)
    groups = _shard(sources, found, limit)
    names = _shard_names(len(groups))
    shards = []
    for name, group in zip(names, groups, strict=True):
        members, kinds = [s for s, _ in group], [r for _, r in group]
        header = _header(members, kinds, meta)
        order = tuple(s.name for s in _widest_first(members, kinds))
        data = sum(s.info.byte_length for s in members)
        shards.append(Shard(name, header, order, len(header) + data))
    index = {
        "metadata": {"total_size": sum(s.info.byte_length for s in sources)},
        "weight_map": {n: shard.name for shard in shards for n in shard.tensors},
    }
    return ShardPlan(
        tuple(shards),
        MappingProxyType({s.name: s for s in sources}),
        json.dumps(index, indent=2, sort_keys=True) + "\n",
    )


def write_shard(
    shard: Shard,
    sources: Mapping[str, TensorSource],
    directory: str,
    *,
    progress: Progress | None = None,
) -> str:
    """Write one planned shard into ``directory`` (the temporary directory of
    :func:`~kiln_np._files.io.building_directory`): its header, then each of its
    tensors from ``sources`` (by name) in the plan's order, into
    ``NAME.part``, renamed to ``NAME`` when whole.  A second write of the same
    shard (a retried task) replaces the first one's temporary file; nothing
    partial ever stands under ``NAME``.  Returns the shard's path.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> plan = shard_plan(tensor_sources({"a": np.zeros(2, np.int8)}), 64, metadata=None)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = write_shard(plan.shards[0], plan.sources, d)
    ...     os.listdir(d), os.path.getsize(path) == plan.shards[0].size
    (['model-00001-of-00001.safetensors'], True)
    """
    path = os.path.join(directory, shard.name)
    tmp = path + TEMP_SUFFIX
    with open(tmp, "wb") as f:
        f.write(shard.header)
        f.flush()
        for name in shard.tensors:
            sources[name].write_to(f.fileno(), progress=progress)
    os.replace(tmp, path)
    return path


def write_index(plan: ShardPlan, directory: str) -> None:
    """Write the plan's index (:data:`INDEX`) into ``directory``, once the shards are."""
    with open(os.path.join(directory, INDEX), "x", encoding="utf-8") as f:
        f.write(plan.index)


def _shard_names(count: int) -> list[str]:
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def safetensors_paths(
    path: str, sources: Sequence[TensorSource], *, max_shard_size: int | None = None
) -> list[str]:
    """The files :func:`write_safetensors` will write for these sources, every
    tensor checked as it checks them, without writing anything: ``path`` itself,
    or with ``max_shard_size`` the shards and the index inside the directory ``path``.

    Examples
    --------
    >>> import numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> sources = tensor_sources({"a": np.zeros(8), "b": np.zeros(8)})  # 64 bytes each
    >>> for p in safetensors_paths("/ckpt", sources, max_shard_size=64):
    ...     print(p)
    /ckpt/model-00001-of-00002.safetensors
    /ckpt/model-00002-of-00002.safetensors
    /ckpt/model.safetensors.index.json
    """
    rows = [_row_for(s) for s in sources]
    if max_shard_size is None:
        return [path]
    limit = check_int(max_shard_size, "max_shard_size", minimum=1)
    names = _shard_names(len(_shard(sources, rows, limit)))
    return [os.path.join(path, name) for name in [*names, INDEX]]


def _row_for(source: TensorSource) -> SafetensorsDType:
    at = f"tensor {source.name!r}: "
    if source.name == "__metadata__":
        raise KilnError(
            "TYPE",
            f"{at}expected a tensor name other than __metadata__, which safetensors reserves",
        )
    try:
        source.name.encode("utf-8")
        return safetensors_dtype(source.info)
    except UnicodeEncodeError as exc:
        raise KilnError("TYPE", f"{at}expected a name that UTF-8 can encode: {exc}") from None
    except KilnError as exc:
        raise exc.prefixed(at) from None


def _check_metadata(metadata: object) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not (
        isinstance(metadata, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise KilnError(
            "TYPE",
            "expected safetensors metadata to map str to str (such as {'format': 'pt'}), "
            f"found {show_value(metadata)}",
        )
    try:
        json.dumps(dict(metadata), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KilnError("TYPE", f"expected metadata that UTF-8 can encode: {exc}") from None
    return dict(metadata)


def _widest_first(
    sources: Sequence[TensorSource], rows: list[SafetensorsDType]
) -> list[TensorSource]:
    order = sorted(range(len(sources)), key=lambda i: -rows[i].alignment)  # stable
    return [sources[i] for i in order]


def _header(
    sources: Sequence[TensorSource], rows: list[SafetensorsDType], meta: dict[str, str] | None
) -> bytes:
    by_source = dict(zip((id(s) for s in sources), rows, strict=True))
    obj: dict[str, Any] = {} if meta is None else {"__metadata__": meta}
    offset = 0
    for source in _widest_first(sources, rows):
        end = offset + source.info.byte_length
        obj[source.name] = {
            "dtype": by_source[id(source)].name,
            "shape": list(source.info.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    if len(text) > MAX_HEADER_BYTES:
        raise KilnError(
            "TYPE",
            f"expected a header of at most {MAX_HEADER_BYTES} bytes (safetensors' limit), "
            f"found {len(text)} for {len(sources)} tensors: write shards (max_shard_size)",
        )
    return len(text).to_bytes(SIZE_BYTES, "little") + text


def _shard(
    sources: Sequence[TensorSource], rows: list[SafetensorsDType], limit: int
) -> list[list[tuple[TensorSource, SafetensorsDType]]]:
    shards: list[list[tuple[TensorSource, SafetensorsDType]]] = [[]]
    held = 0
    for source, row in zip(sources, rows, strict=True):
        size = source.info.byte_length
        if shards[-1] and held + size > limit:
            shards.append([])
            held = 0
        shards[-1].append((source, row))
        held += size
    return shards


def checkpoint_files(directory: str) -> set[str] | None:
    """What a previous sharded save wrote: the index and the shards it names, or
    None unless each is named as this writer names shards
    (``model-00001-of-00002.safetensors``; ``building_directory`` checks that
    each is a regular file).  An index naming someone's ``notes.txt`` is not
    enough.  A ``config.json`` there is one too: ``save_weights`` writes the
    plain checkpoint's config into the directory of a dequantized logical view."""
    index = os.path.join(directory, INDEX)
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):  # KilnError too
        shards = set(read_json(index, "", MAX_INDEX_BYTES, "an index")["weight_map"].values())
        if all(isinstance(s, str) and _WRITTEN.fullmatch(s) for s in shards):
            return {INDEX, "config.json", *shards}
    return None


_WRITTEN = re.compile(r"model-[0-9]{5,}-of-[0-9]{5,}\.safetensors")  # the shards' names
