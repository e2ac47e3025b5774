"""Reading GGUF: the header parsed into checked descriptions, never the data.

:func:`read_gguf` checks everything the module docstring of ``kiln_np.gguf``
lists (magic and version, counts, key/values, tensor infos, alignment, overlap,
the data against the file's size, a split set) and returns a
:class:`GGUFFile`; :func:`open_gguf` hands its tensors out as
:class:`~kiln_np.Weights`, each file mapped when one of its tensors is read.

A file behind a URL (``kiln_np._weights.remote``) is parsed by the same code
over its header read in growing ranges, never the data: the first
:data:`HEADER_SLACK` bytes, then, each time the parser needs bytes past those
read, one range reaching to what it needs plus what the header must still hold
at the least (the rest of the array being read, the entries still to come at
their smallest; at most as much again as was read so far), plus
:data:`HEADER_SLACK`.  So a well-formed header of ``H`` bytes is read in a few
requests and at most ``H + HEADER_SLACK`` bytes whatever its metadata holds, and
a hostile one at most twice what was parsed before it failed.  A split set's
other splits are the URLs beside the first, named as locally.
"""

from __future__ import annotations

import bisect
import math
import mmap
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.checks import MAX_INT64, check_path, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._files.io import open_regular_raw
from kiln_np._quants.filetypes import file_type_number
from kiln_np._weights.mapped import MappedFile
from kiln_np._weights.remote import RemoteFile, is_url, join_url, url_name
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

from ._types import (
    DEFAULT_ALIGNMENT,
    FILE_TYPE_KEY,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_DIMS,
    SET_KEY,
    SPLIT_NAME,
    TYPES,
    GGMLType,
    split_path,
    unknown_layout,
    unknown_type,
)
from ._values import GGUFMetadata, HeaderParser, Spec, malformed, truncated

__all__ = ["HEADER_SLACK", "GGUFFile", "GGUFTensorInfo", "open_gguf", "read_gguf"]

_HEADER_BYTES = 24
HEADER_SLACK = 1 << 16
"""How far past what it needs a remote header is read (the module docstring): 64 KiB."""


@set_module("kiln_np.gguf")
class GGUFTensorInfo(NamedTuple):
    """One tensor of a GGUF file, checked: where its payload is and what it is.

    Attributes
    ----------
    name : str
    path : str
        The file (split) that holds it, absolute, or its URL.
    offset : int
        Absolute byte offset of its data in ``path``.
    info : PayloadInfo
        Kiln code, shape (dims reversed, innermost in blocks), layout and
        ``byte_length``.  For a type id :data:`TYPES` does not list: shape
        ``(byte_length,)`` of 1-byte blocks, ``Layout("ggml.type<id>[<ne>]", 1)``,
        the bytes up to the next tensor's offset (see the module docstring).
    ggml : GGMLType
        Its GGML type (``ggml.known`` is False for an unknown type id).
    dims : tuple of int
        GGUF's ``ne``, innermost first, as the file lists them.
    """

    name: str
    path: str
    offset: int
    info: PayloadInfo
    ggml: GGMLType
    dims: tuple[int, ...]


@set_module("kiln_np.gguf")
class GGUFFile(NamedTuple):
    """What :func:`read_gguf` found: metadata and tensors of a file or of all its splits.

    Attributes
    ----------
    paths : tuple of str
        The files read, absolute, or their URLs (one per split, in split order).
    version : int
        The GGUF version of the (first) file: 2 or 3.
    alignment : int
        The data alignment (``general.alignment``, or 32).
    metadata : GGUFMetadata
        The (first split's) key/values.
    tensors : tuple of GGUFTensorInfo
        In tensor-info order, splits one after another.
    """

    paths: tuple[str, ...]
    version: int
    alignment: int
    metadata: GGUFMetadata
    tensors: tuple[GGUFTensorInfo, ...]


@set_module("kiln_np.gguf")
def read_gguf(
    path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> GGUFFile:
    """Read the header of a GGUF file (and of its other splits), not its data.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.gguf`` file, or its URL (``https://``, ``s3://``, a chained
        ``simplecache::https://``...: docs/big-files.md, "Remote sources");
        the first split (``NAME-00001-of-000NN.gguf``) reads every split.
    storage_options : mapping, optional
        For a URL: what fsspec's file system is made with, and the deadline of
        each request (``kiln_np_deadline``, ``kiln_np_min_rate``).

    Returns
    -------
    GGUFFile
        Metadata (parsed lazily) and the checked tensor descriptions.

    Raises
    ------
    KilnError
        TYPE for a malformed header or split set, LENGTH for counts, strings,
        arrays or tensor data the file cannot hold, SHAPE for bad dims; each
        names the file and the key or tensor.  For a URL, also as
        ``kiln_np._weights.remote`` lists (an answer short, long or of another
        file; no fsspec: TYPE naming ``kiln-np[remote]``).
    FileNotFoundError
        When the file or a split does not exist (naming it).
    OSError
        For a URL, a transport that failed (``TimeoutError`` past a deadline).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import save_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = save_gguf(p, {"w": np.zeros((2, 3), np.float32)})
    ...     gguf = read_gguf(p)
    >>> [(t.name, t.ggml.name, t.dims, t.info.shape, t.offset) for t in gguf.tensors]
    [('w', 'F32', (3, 2), (2, 3), 96)]
    """
    return _read_set(path, storage_options)[0]


def _read_set(
    path: str | os.PathLike[str], options: Mapping[str, Any] | None
) -> tuple[GGUFFile, dict[str, RemoteFile]]:
    """The file or split set at ``path``, and the remote files read (by URL)."""
    remote: dict[str, RemoteFile] = {}

    def read_one(name: str) -> GGUFFile:
        if not is_url(name):
            return _read_one(name)
        file = remote[name] = RemoteFile.open(name, options)
        return _read_remote(file)

    first = read_one(str(path) if is_url(path) else os.path.realpath(check_path(path)))
    if first.metadata.get("split.count") is not None:
        first = _read_splits(first, read_one)
    return first, remote


def _read_one(path: str) -> GGUFFile:
    where = f"{path!r}: "
    with open_regular_raw(path) as f:  # a FIFO named like a split is TYPE, never opened
        size = os.fstat(f.fileno()).st_size
        if size < _HEADER_BYTES:
            raise truncated(where, "GGUF header", 0, _HEADER_BYTES, size)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _parse(path, mm, size, where)


def _read_remote(file: RemoteFile) -> GGUFFile:
    """A remote file's header, read in growing ranges (the module docstring)."""
    where = f"{file.path!r}: "
    size = file.size
    if size < _HEADER_BYTES:
        raise truncated(where, "GGUF header", 0, _HEADER_BYTES, size)
    buf = bytearray(file.read(0, min(size, HEADER_SLACK)))

    def grow(end: int, reach: int) -> None:
        stop = min(size, max(end, min(reach, 2 * len(buf))) + HEADER_SLACK)
        buf.extend(file.read(len(buf), stop - len(buf)))

    return _parse(file.path, buf, size, where, grow)


def _version(p: HeaderParser) -> int:
    """The version after the magic (TYPE for another magic or version)."""
    p.need(0, 4, "GGUF magic")
    magic = bytes(p.buf[:4])
    if magic != MAGIC:
        raise malformed(
            p.where,
            f"expected the GGUF magic 47 47 55 46 ('GGUF'), found {magic.hex(' ')}",
            expected=MAGIC,
            found=magic,
        )
    version = p.u32(4, "version")
    if version not in (2, 3):
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        why = (
            f"a big-endian GGUF (version {swapped} byte-swapped), which kiln_np does not read"
            if swapped in (2, 3)
            else "version 1 used 32-bit counts and is not supported"
            if version == 1
            else "an unknown version"
        )
        raise malformed(
            p.where,
            f"expected GGUF version 2 or 3, found {version}: {why}",
            expected=3,
            found=version,
        )
    return version


def _parse(
    path: str,
    buf: mmap.mmap | bytearray,
    size: int,
    where: str,
    grow: Callable[[int, int], None] | None = None,
) -> GGUFFile:
    p = HeaderParser(buf, size, where, grow)
    version = _version(p)
    n_tensors = p.u64(8, "tensor count")
    n_kv = p.u64(16, "metadata key/value count")
    # Every key/value takes at least 12 bytes, every tensor info 24: fail before looping.
    p.check(
        _HEADER_BYTES, 12 * n_kv + 24 * n_tensors, f"{n_kv} key/values and {n_tensors} tensor infos"
    )
    pos = _HEADER_BYTES
    entries: dict[str, tuple[Spec, int]] = {}
    for i in range(n_kv):
        p.floor = 12 * (n_kv - 1 - i) + 24 * n_tensors
        end = p.string(pos, f"key {i}")
        key = p.text(pos, end)
        if key in entries:
            raise malformed(where, f"key {key!r}: expected unique keys, found it twice")
        vtype = p.u32(end, f"key {key!r} value type")
        pos, spec = p.value(vtype, end + 4, f"key {key!r}")
        entries[key] = (spec, end + 4)
    infos: list[tuple[str, tuple[int, ...], GGMLType, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        p.floor = 24 * (n_tensors - 1 - i)
        end = p.string(pos, f"tensor info {i} name")
        name = p.text(pos, end)
        what = f"tensor {name!r}"
        if name in names:
            raise malformed(where, f"{what}: expected unique tensor names, found it twice")
        names.add(name)
        n_dims = p.u32(end, f"{what} n_dims")
        if n_dims > MAX_DIMS:
            raise KilnError(
                "SHAPE", f"{where}{what}: expected at most {MAX_DIMS} dims, found {n_dims}"
            )
        p.need(end + 4, 8 * n_dims + 12, f"{what} dims, type and offset")
        dims = struct.unpack_from(f"<{n_dims}Q", buf, end + 4)
        pos = end + 4 + 8 * n_dims
        type_id = p.u32(pos, f"{what} type")
        try:
            row = TYPES.get(type_id) or unknown_type(type_id)
        except KilnError as exc:
            raise exc.prefixed(f"{where}{what}: ") from None
        infos.append((name, dims, row, p.u64(pos + 4, f"{what} offset")))
        pos += 12
    metadata_end = pos
    header = bytes(buf[:metadata_end])
    metadata = GGUFMetadata(header, entries)
    alignment = _alignment_of(metadata, where)
    data_start = -(-metadata_end // alignment) * alignment
    starts = sorted({data_start + rel for *_, rel in infos})  # where unknown types' bytes end
    tensors = tuple(
        _tensor(path, where, name, dims, row, rel, data_start, alignment, size, starts)
        for name, dims, row, rel in infos
    )
    _check_overlap(tensors, where)
    return GGUFFile((path,), version, alignment, metadata, tensors)


def _alignment_of(metadata: GGUFMetadata, where: str) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    kind = metadata.types["general.alignment"]
    value = metadata["general.alignment"]
    if kind != "uint32" or value == 0 or value & (value - 1) or value > MAX_ALIGNMENT:
        raise malformed(
            where,
            f"key 'general.alignment': expected a uint32 power of two of at most "
            f"{MAX_ALIGNMENT}, found {show_value(value)} (GGUF {kind})",
            expected="uint32 power of two",
            found=value,
        )
    return int(value)


def _tensor(
    path: str,
    where: str,
    name: str,
    dims: tuple[int, ...],
    row: GGMLType,
    rel: int,
    data_start: int,
    alignment: int,
    size: int,
    starts: Sequence[int],
) -> GGUFTensorInfo:
    what = f"{where}tensor {name!r} ({row.name}, dims {list(dims)}): "
    if max(dims, default=0) > MAX_INT64 or math.prod(dims) > MAX_INT64:
        raise KilnError(
            "SHAPE",
            f"{what}expected dims whose product is at most 2**63-1, found {math.prod(dims)}",
            shape=dims,
        )
    if row.block_elements > 1 and (not dims or dims[0] % row.block_elements):
        found = f"ne[0] = {dims[0]}" if dims else "a scalar"
        raise KilnError(
            "SHAPE",
            f"{what}expected ne[0] to be a multiple of the {row.block_elements}-element "
            f"block, found {found}",
            shape=dims,
        )
    if rel % alignment:
        raise malformed(
            what,
            f"expected a data offset that is a multiple of the alignment {alignment}, found {rel}",
            expected=alignment,
            found=rel,
        )
    offset = data_start + rel
    if offset > MAX_INT64:  # past it no file holds it (seek fails): even an empty tensor's
        raise malformed(
            what,
            f"expected a data offset of at most 2**63-1 from the file's start, found "
            f"{offset} (data section at {data_start} + {rel})",
            expected=MAX_INT64,
            found=offset,
        )
    if row.known:
        shape = dims[::-1]
        if dims:
            shape = (*shape[:-1], shape[-1] // row.block_elements)
        layout = row.layout
    else:  # opaque bytes; the layout keeps the dims, for a writer
        shape = (_unknown_length(what, dims, offset, size, starts),)
        layout = unknown_layout(row.type_id, dims)
    try:
        info = payload_info(row.code, shape, layout)
    except KilnError as exc:
        raise exc.prefixed(what) from None
    held = max(size - offset, 0)
    if held < info.byte_length:
        raise info.length_error(held, f"{what}data at byte {offset} of a {size}-byte file: ")
    return GGUFTensorInfo(name, path, offset, info.with_offset(offset), row, dims)


def _unknown_length(
    what: str, dims: tuple[int, ...], offset: int, size: int, starts: Sequence[int]
) -> int:
    """The bytes of a tensor of an unknown type: none when a dim is 0 (ggml_nbytes),
    else up to the next larger offset of a tensor in this file, or its end, whichever
    comes first (alignment padding included).  At least one byte: every GGML block has one."""
    if 0 in dims:
        return 0
    later = bisect.bisect_right(starts, offset)
    end = min(starts[later], size) if later < len(starts) else size
    if end <= offset:
        why = "its data (a type kiln_np does not know: up to the next tensor or the file's end)"
        raise truncated(what, why, offset, 1, size)
    return end - offset


def _check_overlap(tensors: Sequence[GGUFTensorInfo], where: str) -> None:
    if len(tensors) < 2:
        return
    starts = np.array([t.offset for t in tensors], np.int64)
    ends = starts + np.array([t.info.byte_length for t in tensors], np.int64)
    # By start, then end: an empty tensor at another's start (as llama.cpp writes one) is
    # no overlap, whichever comes first in the file.
    order = np.lexsort((ends, starts))
    clash = np.flatnonzero(ends[order[:-1]] > starts[order[1:]])
    if clash.size:
        a, b = tensors[int(order[clash[0]])], tensors[int(order[clash[0] + 1])]
        raise malformed(
            where,
            f"tensor {b.name!r}: expected its data to start at or after byte "
            f"{a.offset + a.info.byte_length}, where tensor {a.name!r} ends; found byte {b.offset} "
            "(tensors overlap)",
            expected=a.offset + a.info.byte_length,
            found=b.offset,
        )


def _split_value(gguf: GGUFFile, key: str) -> int:
    value = gguf.metadata.get(key)
    kind = gguf.metadata.types.get(key, "missing")
    if not isinstance(value, np.integer):
        found = "no such key" if key not in gguf.metadata else f"{show_value(value)} (GGUF {kind})"
        raise malformed(
            f"{gguf.paths[0]!r}: ",
            f"key {key!r}: expected an integer, found {found}",
            expected="integer",
            found=kind,
        )
    return int(value)


def _set_id(gguf: GGUFFile) -> str | None:
    """The set id ``save_gguf`` wrote into every split, or None (gguf-split writes none)."""
    value = gguf.metadata.get(SET_KEY)
    if value is None or isinstance(value, str):
        return value
    raise malformed(
        f"{gguf.paths[0]!r}: ",
        f"key {SET_KEY!r}: expected a string, found {show_value(value)} "
        f"(GGUF {gguf.metadata.types[SET_KEY]})",
        expected="string",
        found=gguf.metadata.types[SET_KEY],
    )


def _read_splits(first: GGUFFile, read_one: Callable[[str], GGUFFile]) -> GGUFFile:
    """The set whose first split is ``first``: the other splits named beside it (a
    file in its folder, a URL in its directory), each read with ``read_one``."""
    path = first.paths[0]
    count = _split_value(first, "split.count")
    if count <= 1:
        return first  # a single split names itself as one
    no = _split_value(first, "split.no")
    url = is_url(path)
    match = SPLIT_NAME.match(url_name(path) if url else os.path.basename(path))
    if no != 0 or match is None or int(match["count"]) != count:
        raise malformed(
            f"{path!r}: ",
            f"expected the first of {count} splits, named NAME-00001-of-{count:05d}.gguf with "
            f"split.no 0, found split.no {no}",
            expected=0,
            found=no,
        )
    total = _split_value(first, "split.tensors.count")
    beside = partial(join_url, path) if url else partial(os.path.join, os.path.dirname(path))
    tensors = list(first.tensors)
    paths = [path]
    ids = _set_id(first)
    for i in range(1, count):
        shard = read_one(beside(split_path(match["stem"], i + 1, count)))
        got = (_split_value(shard, "split.no"), _split_value(shard, "split.count"))
        if got != (i, count):
            raise malformed(
                f"{shard.paths[0]!r}: ",
                f"expected split.no {i} and split.count {count}, found {got[0]} and {got[1]}",
                expected=(i, count),
                found=got,
            )
        if _set_id(shard) != ids:
            # A write that stopped while it replaced a set's splits leaves some of each.
            shown = [repr(v) if v is not None else "no such key" for v in (ids, _set_id(shard))]
            raise malformed(
                f"{shard.paths[0]!r}: ",
                f"expected the {SET_KEY} of the first split {path!r}, {shown[0]}, found "
                f"{shown[1]}: the splits come from different writes (one interrupted while it "
                "replaced the set?); write the set again",
                expected=ids,
                found=_set_id(shard),
            )
        if shard.alignment != first.alignment:
            # Each split is read at its own alignment, as llama.cpp reads it; a set
            # whose splits differ is what a writer that kept the key to the first
            # split leaves, and its later splits would read as the wrong bytes.
            raise malformed(
                f"{shard.paths[0]!r}: ",
                f"expected the alignment of the first split {path!r}, {first.alignment}, "
                f"found {shard.alignment} (general.alignment, 32 when absent, must agree "
                "across a split set)",
                expected=first.alignment,
                found=shard.alignment,
            )
        tensors += shard.tensors
        paths.append(shard.paths[0])
    names = [t.name for t in tensors]
    if len(set(names)) != len(names) or len(names) != total:
        twice = sorted({n for n in names if names.count(n) > 1})[:3]
        raise malformed(
            f"{path!r}: ",
            f"expected split.tensors.count {total} distinct tensors in {count} splits, found "
            f"{len(names)}" + (f" (listed twice: {twice})" if twice else ""),
            expected=total,
            found=len(names),
        )
    return GGUFFile(tuple(paths), first.version, first.alignment, first.metadata, tuple(tensors))


@set_module("kiln_np.gguf")
def open_gguf(
    path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> Weights:
    """Open a GGUF file (all splits, from the first) as :class:`~kiln_np.Weights`.

    ``kiln_np.open_weights`` calls this for a file starting with ``GGUF``, and
    for a URL naming a ``.gguf`` file (or one starting so).  Only the headers
    are read; each file is mapped when one of its tensors hands out a payload.
    A URL's tensors are read by exact range requests, each when asked for
    (``storage_options`` as :func:`read_gguf` takes them).

    Raises
    ------
    KilnError, FileNotFoundError, OSError
        As :func:`read_gguf`.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import save_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = save_gguf(p, {"w": np.arange(3, dtype=np.float32)})
    ...     with open_gguf(p) as w:
    ...         print(w.format, w["w"], w["w"].numpy())
    gguf WeightTensor('w', code 2 (f32), shape (3,), 12 bytes, F32) [0. 1. 2.]
    """
    gguf, remote = _read_set(path, storage_options)
    files = {p: remote[p] if p in remote else MappedFile.open(p) for p in gguf.paths}
    tensors = [WeightTensor(t.name, t.info, files[t.path], t.ggml.name) for t in gguf.tensors]
    return Weights(
        tensors,
        format="gguf",
        metadata=gguf.metadata,
        path=gguf.paths[0],
        files=files.values(),
        opener=partial(open_gguf, storage_options=storage_options) if remote else open_gguf,
        file_type=file_type_number(gguf.metadata.get(FILE_TYPE_KEY)),
    )
