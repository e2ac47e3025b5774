"""Reading safetensors: a file's header, or a sharded checkpoint's index and the
headers of its shards, checked as the module docstring of ``kiln_np.safetensors``
lists, and handed out as :class:`~kiln_np.Weights` without reading any data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from kiln_np._core.checks import check_path, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._weights.mapped import MappedFile
from kiln_np._weights.metadata import check_json_size, parse_json, read_json
from kiln_np._weights.remote import RemoteFile, is_url, join_url, list_url
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

from ._types import (
    BY_NAME,
    INDEX_SUFFIX,
    MAX_HEADER_BYTES,
    MAX_INDEX_BYTES,
    REFUSED,
    SIZE_BYTES,
    SafetensorsDType,
    safetensors_dtype,
)

__all__ = ["looks_like_safetensors", "open_safetensors"]

_SHARD = re.compile(r"-(\d+)-of-(\d+)\.safetensors$")


def looks_like_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of ``size`` bytes starting with ``head`` (at least 9 bytes
    of it) is safetensors as :func:`kiln_np.open_weights` recognises it: an
    8-byte little-endian size at most 100 MB and at most the rest of the file,
    then ``{``.

    >>> looks_like_safetensors(b"\\x02\\0\\0\\0\\0\\0\\0\\0{}", 10)
    True
    """
    if len(head) <= SIZE_BYTES:
        return False
    n = int.from_bytes(head[:SIZE_BYTES], "little")
    return n <= MAX_HEADER_BYTES and n <= size - SIZE_BYTES and head[8:9] == b"{"


@set_module("kiln_np.safetensors")
def open_safetensors(
    path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> Weights:
    """Open a safetensors file, or a sharded checkpoint by its index, reading
    headers only.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.safetensors`` file, or a ``*.safetensors.index.json``; or a URL
        (``https://``, ``s3://``, any fsspec protocol installed) of either, or
        of a directory holding one index or one ``*.safetensors`` file
        (docs/big-files.md, "Remote sources").
    storage_options : mapping, optional
        For a URL: what fsspec's file system is made with (credentials,
        ``endpoint_url``, ``client_kwargs``, headers), and the deadline of each
        request (``kiln_np_deadline``, ``kiln_np_min_rate``: read by kiln_np).

    Returns
    -------
    Weights
        Tensors in data-offset order (shards one after another); ``metadata``
        is ``__metadata__`` (the first shard's, for a checkpoint).

    Raises
    ------
    KilnError
        As the module docstring lists; for a URL, also as
        ``kiln_np._weights.remote`` lists (a range answer short, long or of
        another file; no fsspec: TYPE naming ``kiln-np[remote]``).
    OSError
        When a file cannot be read; ``FileNotFoundError`` for a missing shard.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/a.safetensors", {"x": np.ones(2, np.int16)},
    ...                          format="safetensors")
    >>> w = open_safetensors(d + "/a.safetensors")
    >>> w["x"].format_dtype, w["x"].offset
    ('I16', 64)
    >>> w.close(); import shutil; shutil.rmtree(d)
    """
    if is_url(path):
        assert isinstance(path, str)
        return _open_url(path, storage_options)
    name = os.path.realpath(check_path(path))
    if name.endswith(INDEX_SUFFIX):
        index = read_json(name, f"{name!r}: ", MAX_INDEX_BYTES, "an index")
        return _open_index(name, index, partial(_local_shard, os.path.dirname(name)))
    file = MappedFile.open(name)
    tensors, metadata = _read_file(file)
    return Weights(
        tensors,
        format="safetensors",
        metadata=metadata,
        path=name,
        files=[file],
        opener=open_safetensors,
        hf_config=True,
    )


def _local_shard(directory: str, shard: str) -> MappedFile:
    return MappedFile.open(os.path.join(directory, shard))


def _open_url(url: str, options: Mapping[str, Any] | None) -> Weights:
    """A URL: an index, a safetensors file, or a directory holding one index or
    one ``*.safetensors`` file; anything else is TYPE."""
    names = list_url(url, options)
    if names is not None:
        indexes = [n for n in names if n.endswith(INDEX_SUFFIX)]
        files = [n for n in names if n.endswith(".safetensors")]
        base = url if url.endswith("/") else url + "/"
        if len(indexes) == 1 or (not indexes and len(files) == 1):
            return _open_url(base + (indexes or files)[0], options)
        held = ", ".join(map(repr, names[:4])) + (", ..." if len(names) > 4 else "")
        raise KilnError(
            "TYPE",
            f"{url!r}: expected a directory holding one *{INDEX_SUFFIX} or one *.safetensors "
            f"file, found {held or 'nothing'}",
        )
    opener = partial(open_safetensors, storage_options=options)
    file = RemoteFile.open(url, options)
    where = f"{url!r}: "
    if url.endswith(INDEX_SUFFIX):
        check_json_size(file.size, MAX_INDEX_BYTES, where, "an index")
        index = parse_json(file.read(0, file.size), where)
        return _open_index(
            url, index, lambda shard: RemoteFile.open(join_url(url, shard), options), opener
        )
    head = b"" if url.endswith(".safetensors") else file.read(0, 16)  # by name: no sniff
    if head and not looks_like_safetensors(head, file.size):
        raise KilnError(
            "TYPE",
            f"{where}expected a safetensors file or index, found the bytes "
            f"{head.hex(' ')}{' ...' * (file.size > len(head))}",
            found=head,
        )
    tensors, metadata = _read_file(file)
    return Weights(
        tensors,
        format="safetensors",
        metadata=metadata,
        path=url,
        files=[file],
        opener=opener,
        hf_config=True,  # nothing is read beside a URL: config is None
    )


def _read_file(file: MappedFile) -> tuple[list[WeightTensor], dict[str, str]]:
    """The tensors and ``__metadata__`` of one file's header, read with
    ``file.read`` (a local file and a URL share every check)."""
    where = f"{file.path!r}: "
    size = file.size
    first = file.read(0, SIZE_BYTES)
    if len(first) < SIZE_BYTES:
        raise KilnError(
            "LENGTH",
            f"{where}expected at least 8 bytes (the header size), found {len(first)}",
            expected=SIZE_BYTES,
            found=len(first),
        )
    n = int.from_bytes(first, "little")
    if n > MAX_HEADER_BYTES:
        raise KilnError(
            "TYPE",
            f"{where}expected a header size of at most {MAX_HEADER_BYTES} bytes, found {n} "
            f"(bytes {first.hex(' ')})",
            expected=MAX_HEADER_BYTES,
            found=n,
        )
    if n > size - SIZE_BYTES:
        raise KilnError(
            "LENGTH",
            f"{where}expected a header of {n} bytes after the size, found a file of "
            f"{size} bytes (short by {n - (size - SIZE_BYTES)})",
            expected=n,
            found=size - SIZE_BYTES,
        )
    raw = file.read(SIZE_BYTES, n)
    header = parse_json(raw, f"{where}header: ")
    if not isinstance(header, dict):
        raise KilnError(
            "TYPE", f"{where}expected the header to be a JSON object, found {show_value(header)}"
        )
    metadata = _metadata(header.pop("__metadata__", None), where)
    data_start = SIZE_BYTES + n
    entries = sorted(
        (_entry(name, value, where) for name, value in header.items()),
        key=lambda e: (e[0], e[1]),
    )
    tensors = []
    end = 0
    for begin, stop, name, row, info in entries:
        at = f"{where}tensor {name!r}: "
        if begin != end or stop < begin:
            raise KilnError(
                "TYPE",
                f"{at}expected data_offsets to begin at {end}, where the tensor before ends "
                f"(contiguous, in order, not overlapping), found [{begin}, {stop}]",
                expected=end,
                found=begin,
            )
        info.check_length(stop - begin, f"{at}data_offsets [{begin}, {stop}]: ")
        tensors.append(WeightTensor(name, info.with_offset(data_start + begin), file, row.name))
        end = stop
    held = size - data_start
    if held != end:
        raise KilnError(
            "LENGTH",
            f"{where}expected {end} data bytes after the {n}-byte header (where the last "
            f"tensor ends), found {held} ({'short' if held < end else 'long'} by "
            f"{abs(held - end)})",
            expected=end,
            found=held,
        )
    return tensors, metadata


def _metadata(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise KilnError(
            "TYPE",
            f"{where}expected __metadata__ to map str to str, found {show_value(value)}",
        )
    return value


def _entry(
    name: str, value: object, where: str
) -> tuple[int, int, str, SafetensorsDType, PayloadInfo]:
    at = f"{where}tensor {name!r}: "
    if not isinstance(value, dict):
        raise KilnError(
            "TYPE",
            f'{at}expected {{"dtype", "shape", "data_offsets"}}, found {show_value(value)}',
        )
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    row = BY_NAME.get(dtype) if isinstance(dtype, str) else None
    if row is None:
        why = REFUSED.get(dtype) if isinstance(dtype, str) else None
        raise KilnError(
            "TYPE",
            f"{at}expected a dtype in {', '.join(BY_NAME)}, found {show_value(dtype)}"
            + (f": {why}" if why else ""),
        )
    if not isinstance(shape, list):
        raise KilnError(
            "SHAPE", f"{at}expected shape as a list of integers, found {show_value(shape)}"
        )
    try:
        info = payload_info(int(row.code), tuple(shape), row.layout)
        safetensors_dtype(info)  # an odd F4 count
    except KilnError as exc:
        raise exc.prefixed(at) from None
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(o) is int and o >= 0 for o in offsets)
    ):
        raise KilnError(
            "TYPE",
            f"{at}expected data_offsets as [begin, end], two integers >= 0, found "
            f"{show_value(offsets)}",
        )
    return offsets[0], offsets[1], name, row, info


def _open_index(
    path: str,
    index: Any,
    open_shard: Callable[[str], MappedFile],
    opener: Callable[[str], Weights] = open_safetensors,
) -> Weights:
    """The checkpoint of the parsed ``index`` at ``path``, each shard opened by
    ``open_shard(its name)`` (a local file, or a URL beside the index)."""
    where = f"{path!r}: "
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not (
        isinstance(weight_map, dict)
        and all(isinstance(v, str) for v in weight_map.values())
        and isinstance(index.get("metadata"), (dict, type(None)))
    ):
        raise KilnError(
            "TYPE",
            f'{where}expected an index {{"metadata": {{...}}, "weight_map": {{tensor: '
            f"shard file}}}}, found {show_value(index)}",
        )
    shards = sorted(set(weight_map.values()), key=_shard_order)
    files, tensors = [], []
    metadata: dict[str, str] = {}
    for i, shard in enumerate(shards):
        _check_inside(shard, where)
        file = open_shard(shard)
        held, meta = _read_file(file)
        files.append(file)
        metadata = meta if i == 0 else metadata
        for t in held:
            listed = weight_map.get(t.name)
            if listed != shard:
                said = "does not list" if listed is None else f"lists in {listed!r}"
                raise KilnError(
                    "TYPE",
                    f"{where}expected the index to list every tensor of shard {shard!r} "
                    f"there, found tensor {t.name!r}, which the index {said}",
                )
        tensors += held
    if len(tensors) != len(weight_map):
        found = {t.name for t in tensors}
        missing = next(n for n in weight_map if n not in found)
        raise KilnError(
            "TYPE",
            f"{where}expected shard {weight_map[missing]!r} to hold tensor {missing!r}, as "
            "the index lists, found no such tensor there",
        )
    return Weights(
        tensors,
        format="safetensors",
        metadata=metadata,
        path=path,
        files=files,
        opener=opener,
        hf_config=True,
    )


def _shard_order(name: str) -> tuple[int, str]:
    match = _SHARD.search(name)
    return (int(match[1]) if match else 0, name)


def _check_inside(shard: str, where: str) -> None:
    parts = re.split(r"[/\\]", shard)
    if not shard or os.path.isabs(shard) or ".." in parts or "\x00" in shard:
        raise KilnError(
            "TYPE",
            f"{where}expected shard files inside the index's directory (relative, no '..'), "
            f"found {show_value(shard)}",
        )
