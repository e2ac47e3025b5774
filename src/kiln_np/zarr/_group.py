"""Weights as a Zarr v3 group: written and read by kiln_np itself (no zarr here).

Writing lays each tensor out so that one file holds its Kiln payload whole, as
the first ``byte_length`` bytes (see the package docstring for the layout);
reading maps that file, so a tensor of a group kiln_np wrote is a zero-copy
payload, as from a safetensors file.  An array laid out otherwise (compressed,
split into chunk files, chunks missing) is read whole through zarr-python
(``kiln_np.zarr._fallback``).
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kiln_np._codec import from_numpy
from kiln_np._convert.plan import save_as
from kiln_np._convert.policy import QuantizePolicy
from kiln_np._convert.row import WeightFormat
from kiln_np._convert.sources import Dequantize, Progress, TensorSource
from kiln_np._core.checks import U8, check_path, check_regular_file, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._files.io import building_directory, open_regular_raw, write_all
from kiln_np._weights.mapped import FileIdentity, MappedFile
from kiln_np._weights.metadata import Metadata, decode_metadata, encode_metadata, read_json
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

from ._fallback import read_array
from ._layout import ArrayLayout, array_document, chunk_rows, group_document, parse_array
from ._packbits import decode_packbits, packbits_size, packbits_type

__all__ = [
    "FORMAT",
    "MAX_ZARR_JSON_BYTES",
    "ZARR_JSON",
    "open_zarr",
    "save_zarr",
    "save_zarr_paths",
    "write_zarr",
    "zarr_group_path",
    "zarr_paths",
]

ZARR_JSON = "zarr.json"
"""The metadata document of every Zarr v3 node."""
MAX_ZARR_JSON_BYTES = 100_000_000
"""The largest ``zarr.json`` read (the root holds the metadata: as a Kiln manifest)."""
GROUP_FORMAT = "kiln-np-zarr/1"


def zarr_group_path(path: str, head: bytes | None, size: int) -> str | None:
    """The group directory when ``path`` is a Zarr v3 group (a directory holding
    ``zarr.json`` with ``"node_type": "group"``, or that file), else None: the
    ``recognise`` of the format table's ``zarr`` row.

    >>> zarr_group_path("/nonexistent", None, 0) is None
    True
    """
    if head is None:
        directory, document = path, os.path.join(path, ZARR_JSON)
    elif os.path.basename(path) == ZARR_JSON:
        directory, document = os.path.dirname(path), path
    else:
        return None
    try:
        with open_regular_raw(document) as f:
            text = f.read(1 << 16)
    except OSError:
        return None
    # A cheap look, not the check: open_zarr parses the document.
    compact = text.replace(b" ", b"").replace(b"\n", b"")
    return directory if b'"node_type":"group"' in compact else None


# -- reading ----------------------------------------------------------------------------


def open_zarr(path: str | os.PathLike[str], verify: bool = False) -> Weights:
    """Open a Zarr v3 group as :class:`~kiln_np.Weights`, one tensor per array.

    ``kiln_np.open_weights`` calls this for a directory holding a group's
    ``zarr.json``.  A group kiln_np wrote lists its tensors (in order) and
    metadata in its attributes; any other group's arrays are found by walking
    its directories, in name order.

    Parameters
    ----------
    path : str or os.PathLike
        The group's directory (or its ``zarr.json``).
    verify : bool
        Accepted for the format table; sizes are always checked, and there are
        no hashes.

    Raises
    ------
    KilnError
        TYPE for a malformed ``zarr.json`` (naming it), a data type with no Kiln
        element, or an array kiln_np cannot lay out without zarr-python when
        zarr-python is not installed; SHAPE for a bad shape; LENGTH for a chunk
        file whose size is not the shape's.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "w.zarr")
    >>> save_zarr(d, {"w": np.arange(3, dtype=np.int16)})
    >>> with open_zarr(d) as w:
    ...     print(w.format, w["w"], w["w"].numpy().tolist())
    zarr WeightTensor('w', code 10 (i16), shape (3,), 6 bytes, int16) [0, 1, 2]
    >>> import shutil; shutil.rmtree(os.path.dirname(d))
    """
    given = os.path.realpath(check_path(path))
    directory = os.path.dirname(given) if os.path.basename(given) == ZARR_JSON else given
    where = f"{os.path.join(directory, ZARR_JSON)!r}: "
    root = _inside(directory, [ZARR_JSON], "")
    doc = read_json(root, where, MAX_ZARR_JSON_BYTES, "zarr.json")
    if not (
        isinstance(doc, dict) and doc.get("zarr_format") == 3 and doc.get("node_type") == "group"
    ):
        raise KilnError(
            "TYPE",
            f'{where}expected a Zarr v3 group ("zarr_format": 3, "node_type": "group"), found '
            f"{show_value(doc)}",
        )
    attributes = doc.get("attributes", {})
    ours = attributes.get("kiln_np") if isinstance(attributes, dict) else None
    if isinstance(ours, dict) and ours.get("format") == GROUP_FORMAT:
        names = ours.get("tensors")
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise KilnError(
                "TYPE", f'{where}expected "tensors" as a list of str, found {show_value(names)}'
            )
        metadata = Metadata(
            decode_metadata(ours.get("metadata", {}), where), ours.get("metadata_types")
        )
    else:
        names = _walk(directory)
        metadata = Metadata({})
    tensors, files = [], []
    for name in names:
        tensor, file = _open_array(directory, name)
        tensors.append(tensor)
        if file is not None:
            files.append(file)
    return Weights(
        tensors, format="zarr", metadata=metadata, path=directory, files=files, opener=open_zarr
    )


def _inside(directory: str, parts: Sequence[str], at: str) -> str:
    """``directory`` joined with ``parts``, every step of it inside the group: TYPE
    naming the path for a symlink (it could lead anywhere, and a secret file
    become tensor data) or a step that leaves ``directory`` (the group's real
    path).  A missing step ends the walk: the caller's open says so."""
    path = directory
    for part in parts:
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            break
        escapes = os.path.commonpath([directory, os.path.abspath(path)]) != directory
        if stat.S_ISLNK(st.st_mode) or escapes:
            raise KilnError(
                "TYPE",
                f"{at}{os.path.relpath(path, directory)!r}: expected a folder or file inside the "
                f"group {directory!r}, found {'a symlink' if not escapes else 'a path out'} "
                f"({path!r}; a Zarr group must not lead out of its directory)",
            )
    return os.path.join(directory, *parts)


def _walk(directory: str) -> list[str]:
    """Every array under ``directory``, by path, in name order (a group's own walk;
    TYPE for a symlink met on the way)."""
    found: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        steps = os.path.relpath(root, directory).split(os.sep) if root != directory else []
        for entry in (*dirs, *files):
            _inside(directory, [*steps, entry], "")
        if ZARR_JSON in files and root != directory:
            rel = os.path.relpath(root, directory).replace(os.sep, "/")
            try:
                with open_regular_raw(os.path.join(root, ZARR_JSON)) as f:
                    text = f.read(1 << 16).replace(b" ", b"")
            except OSError:
                continue
            if b'"node_type":"array"' in text:
                found.append(rel)
                dirs.clear()  # an array's folder holds chunks, not nodes
    return found


def _open_array(directory: str, name: str) -> tuple[WeightTensor, MappedFile | None]:
    parts = name.split("/")
    if any(p in ("", ".", "..") or p.startswith("__") or "\x00" in p for p in parts):
        raise KilnError("TYPE", f"tensor {name!r}: expected a Zarr node path, found {name!r}")
    folder = _inside(directory, parts, f"tensor {name!r}: ")
    document = _inside(directory, [*parts, ZARR_JSON], f"tensor {name!r}: ")
    where = f"{document!r}: "
    doc = read_json(document, where, MAX_ZARR_JSON_BYTES, "zarr.json")
    array = parse_array(doc, where)
    at = f"{where}tensor {name!r}: "
    try:
        info = payload_info(array.code, array.kiln_shape, array.layout)
    except KilnError as exc:
        raise exc.prefixed(at) from None
    label = array.row_name
    chunk = _inside(directory, [*parts, *array.chunk_key], at)
    if array.direct and os.path.lexists(chunk):
        mapped = _chunk_file(chunk, at)
        if not array.mapped:
            return _read_packed(name, info, array, mapped, at), None
        if not array.index_bytes or _back_to_back(mapped, array, info, at):
            found = mapped.size - array.index_bytes
            info.check_length(found, f"{at}chunk file {os.path.relpath(chunk, directory)!r}: ")
            return WeightTensor(name, info, mapped, label), mapped
        # a shard zarr-python wrote otherwise (chunks left out, in another order): read whole
    if info.byte_length == 0:
        return WeightTensor(name, info, None, label, data=memoryview(b"")), None
    values = read_array(folder, info, at)
    payload = from_numpy(values, code=info.code, layout=info.layout)
    return WeightTensor(name, info, None, label, data=payload.data), None


def _chunk_file(path: str, at: str) -> MappedFile:
    st = os.lstat(path)  # not a symlink (_inside): a symlink put there later fails when mapped
    check_regular_file(path)
    return MappedFile(path, FileIdentity.of(st))


def _read_packed(
    name: str, info: PayloadInfo, array: ArrayLayout, mapped: MappedFile, at: str
) -> WeightTensor:
    """One packbits chunk that is not the Kiln payload as it is (a padding byte,
    a bit range, 2- or 6-bit elements): its size checked, then decoded in memory."""
    assert array.packbits is not None
    count = math.prod(array.shape)
    plan = packbits_type(array.dtype, array.packbits)
    expected = packbits_size(count, plan, array.packbits)
    if mapped.size != expected:
        raise KilnError(
            "LENGTH",
            f"{at}chunk file: expected ceil({count} x {plan.k} / 8) bytes of packbits"
            f"{' + 1 padding byte' if array.packbits.padding != 'none' else ''} = {expected}, "
            f"found {mapped.size}",
            expected=expected,
            found=mapped.size,
        )
    data = np.frombuffer(mapped.read(0, mapped.size), U8)
    try:
        values = decode_packbits(data, array.dtype, count, array.packbits)
    except KilnError as exc:
        raise exc.prefixed(at) from None
    payload = from_numpy(values.reshape(array.shape), code=info.code, layout=info.layout)
    return WeightTensor(name, info, None, array.row_name, data=payload.data)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial ``0x82F63B78``) of ``data``: the
    checksum zarr's ``crc32c`` codec appends to a shard index.  Table-driven over
    bytes in Python: an index is small.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_table() -> tuple[int, ...]:
    rows = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        rows.append(c)
    return tuple(rows)


_CRC32C_TABLE = _crc32c_table()
_EMPTY = np.uint64(2**64 - 1)  # an index entry's offset and length for a chunk left out


def _back_to_back(mapped: MappedFile, array: ArrayLayout, info: PayloadInfo, at: str) -> bool:
    """True when the shard index (its crc32c checked, if it has one) says what
    kiln_np writes, inner chunks back to back from offset 0; False for another
    index zarr reads (chunks left out, in another order: the caller reads the
    array through zarr-python); TYPE for a wrong checksum or an entry out of
    the shard.  A file shorter than its index is the caller's LENGTH."""
    if mapped.size < array.index_bytes:
        return True
    raw = mapped.read(mapped.size - array.index_bytes, array.index_bytes)
    if array.index_bytes % 16:  # the index, then its crc32c (little-endian)
        raw, stored = raw[:-4], int.from_bytes(raw[-4:], "little")
        found = crc32c(raw)
        if found != stored:
            raise KilnError(
                "TYPE",
                f"{at}shard index: expected crc32c 0x{stored:08x} (stored after it), found "
                f"0x{found:08x}",
                expected=stored,
                found=found,
            )
    index = np.frombuffer(raw, "<u8").reshape(-1, 2)
    step = info.byte_length // len(index)
    expected = np.stack(
        [np.arange(len(index), dtype=np.uint64) * step, np.full(len(index), step)], 1
    ).astype(np.uint64)
    if np.array_equal(index, expected):
        return True
    data = mapped.size - array.index_bytes
    empty = np.all(index == _EMPTY, axis=1)
    # offset <= data and length <= data - offset, in uint64 without overflow
    room = np.uint64(data) - np.minimum(index[:, 0], np.uint64(data))
    inside = (index[:, 0] <= data) & (index[:, 1] <= room)
    if np.all(empty | inside):
        return False
    bad = int(np.argmax(~(empty | inside)))
    raise KilnError(
        "TYPE",
        f"{at}shard index entry {bad}: expected a chunk inside the shard's {data} bytes "
        f"(offset {bad * step} and {step} bytes, as kiln_np writes), found offset "
        f"{int(index[bad, 0])} and {int(index[bad, 1])} bytes",
        index=bad,
    )


# -- writing ----------------------------------------------------------------------------


NAME_MAX = 255
"""The longest part of a tensor name, in UTF-8 bytes: one folder's name (Linux's ``NAME_MAX``)."""


def _check_name(name: str) -> list[str]:
    """The parts of a tensor name, or TYPE naming the tensor when the group
    could not hold it, or could not be read back: not a Zarr node path, not
    UTF-8 (a lone surrogate), a part that is the layout's own ``zarr.json`` or
    longer than a folder name may be."""
    parts = name.split("/")
    if any(
        p == "" or set(p) == {"."} or p.startswith("__") or "\x00" in p or "\\" in p for p in parts
    ):
        raise KilnError(
            "TYPE",
            f"tensor {name!r}: expected a Zarr node path (parts not empty, only periods, or "
            "starting '__'), found it",
        )
    try:
        encoded = [p.encode("utf-8") for p in parts]
    except UnicodeEncodeError as exc:
        raise KilnError(
            "TYPE",
            f"tensor {name!r}: expected a name of UTF-8 text (zarr.json is UTF-8 JSON), found "
            f"{exc.object[exc.start : exc.end]!r} at index {exc.start} of a part",
        ) from None
    for part, raw in zip(parts, encoded, strict=True):
        if part == ZARR_JSON or len(raw) > NAME_MAX:
            why = "the layout's" if part == ZARR_JSON else f"{len(raw)} bytes, over {NAME_MAX}"
            raise KilnError(
                "TYPE",
                f"tensor {name!r}: expected parts a Zarr group can hold as folders, found "
                f"{part[:40]!r}{'...' if len(part) > 40 else ''} ({why})",
            )
    return parts


def zarr_paths(
    path: str, sources: Sequence[TensorSource], *, max_shard_size: int | None = None
) -> list[str]:
    """The files :func:`write_zarr` will write for these sources, every name checked
    as it checks them, without writing anything (:func:`save_zarr_paths`).

    >>> from kiln_np._convert.sources import tensor_sources
    >>> [os.path.relpath(p, "/w") for p in zarr_paths("/w", tensor_sources({"a": np.zeros(2)}))]
    ['a/zarr.json', 'a/c/0', 'zarr.json']
    """
    _check_groups(sources)
    return save_zarr_paths(path, {s.name: s.info for s in sources})


def save_zarr_paths(path: str | os.PathLike[str], tensors: Mapping[str, Any]) -> list[str]:
    """Every file :func:`save_zarr` writes for tensors of these names, absolute,
    without writing anything: each array's ``zarr.json`` and chunk file, the
    groups' ``zarr.json`` (the root's last).

    Examples
    --------
    >>> import numpy as np
    >>> ps = save_zarr_paths("w.zarr", {"a/b": np.zeros(2, np.uint8)})
    >>> [os.path.relpath(p, os.path.abspath("w.zarr")) for p in ps]
    ['a/b/zarr.json', 'a/b/c/0', 'a/zarr.json', 'zarr.json']
    """
    target = written_path(check_path(path))
    files, groups = [], []
    for name, value in tensors.items():
        parts = _check_name(name)
        shape = value.shape if isinstance(value, PayloadInfo) else np.shape(value)
        shape = value.info.shape if hasattr(value, "info") else shape
        files.append(os.path.join(target, *parts, ZARR_JSON))
        if math.prod(shape):
            files.append(os.path.join(target, *parts, "c", *(["0"] * len(shape))))
        for i in range(1, len(parts)):
            group = os.path.join(target, *parts[:i], ZARR_JSON)
            if group not in groups:
                groups.append(group)
    return [*files, *groups, os.path.join(target, ZARR_JSON)]


def save_zarr(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
) -> None:
    """Write tensors as a Zarr v3 group, one array per tensor, built beside
    ``path`` and renamed into place.

    ``kiln_np.save_weights(..., format="zarr")`` calls this.  A tensor named
    ``a/b`` is the array ``b`` of the group ``a``.  Every tensor is checked
    before anything is written; an existing ``path`` is replaced only when it
    is an empty directory.

    Parameters
    ----------
    path : str or os.PathLike
        The group's directory.
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
        In the order to write (the group's attributes keep it).
    metadata : Mapping, optional
        Kept with its types in the group's attributes, as a Kiln manifest does.
    progress, dequantize, quantize
        As for ``kiln_np.save_weights``.

    Raises
    ------
    KilnError
        TYPE for a tensor of another type, or a name that is not a Zarr node
        path (``a/b`` nests; empty parts, ``.``, ``..``, ``__x`` are refused),
        or one that is also a group of another tensor's name.
    OSError
        When the directory cannot be written; ``FileExistsError`` for a
        directory that is not empty.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "w.zarr")
    >>> save_zarr(d, {"w": np.zeros(3, np.float32)})
    >>> sorted(os.listdir(os.path.join(d, "w")))
    ['c', 'zarr.json']
    >>> import shutil; shutil.rmtree(os.path.dirname(d))
    """
    save_as(
        FORMAT, path, tensors, metadata=metadata, progress=progress, dequantize=dequantize,
        quantize=quantize,
    )  # fmt: skip


def write_zarr(
    path: str,
    sources: Sequence[TensorSource],
    *,
    metadata: Mapping[str, Any] | None = None,
    source_format: str | None = None,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """Write checked sources as a Zarr v3 group at the absolute ``path`` (the zarr
    row's ``save``; :func:`save_zarr` documents the rest), recording
    ``source_format``; returns ``[path]``.

    >>> import tempfile
    >>> from kiln_np._convert.sources import tensor_sources
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = os.path.join(tmp, "w.zarr")
    ...     write_zarr(out, tensor_sources({"a": np.zeros(2, np.uint8)})) == [out]
    True
    """
    assert max_shard_size is None  # the plan refuses it: the row has no shards
    target = path
    _check_groups(sources)
    encoded = {} if metadata is None else encode_metadata(metadata)
    types = getattr(metadata, "types", None)
    root = {
        "format": GROUP_FORMAT,
        "source_format": source_format,
        "tensors": [s.name for s in sources],
        "metadata": encoded,
        "metadata_types": None if types is None else dict(types),
    }
    with building_directory(target, lambda _: None) as tmp:
        groups: set[tuple[str, ...]] = set()
        for source in sources:
            parts = tuple(_check_name(source.name))
            for i in range(1, len(parts)):
                if parts[:i] not in groups:
                    groups.add(parts[:i])
                    os.makedirs(os.path.join(tmp, *parts[:i]), exist_ok=True)
                    _write_json(os.path.join(tmp, *parts[:i], ZARR_JSON), group_document({}))
            _write_array(os.path.join(tmp, *parts), source, progress)
        _write_json(os.path.join(tmp, ZARR_JSON), group_document({"kiln_np": root}))
    return [target]


def _check_groups(sources: Sequence[TensorSource]) -> None:
    """TYPE for a tensor name that is not a Zarr node path, or that is the group of another."""
    arrays = {tuple(_check_name(s.name)) for s in sources}
    for parts in arrays:
        for i in range(1, len(parts)):
            if parts[:i] in arrays:
                raise KilnError(
                    "TYPE",
                    f"tensor {'/'.join(parts)!r}: expected no tensor named as its group, found "
                    f"{'/'.join(parts[:i])!r}",
                )


def _write_json(path: str, doc: Mapping[str, Any]) -> None:
    with open(path, "x", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")


def _write_array(folder: str, source: TensorSource, progress: Progress | None) -> None:
    info = source.info
    rows = chunk_rows(info)
    document, key = array_document(info, rows)
    os.makedirs(os.path.join(folder, *key[:-1]), exist_ok=True)
    _write_json(os.path.join(folder, ZARR_JSON), document)
    if info.byte_length == 0:
        return  # no chunk: the chunk grid of an empty array has none
    fd = os.open(os.path.join(folder, *key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        source.write_to(fd, progress=progress)
        if rows is not None:
            n = info.shape[0] // rows
            step = info.byte_length // n
            index = np.empty((n, 2), "<u8")
            index[:, 0] = np.arange(n, dtype=np.uint64) * step
            index[:, 1] = step
            write_all(fd, index)
    finally:
        os.close(fd)


def _open(
    path: str, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    return open_zarr(path, verify)


FORMAT = WeightFormat(
    "zarr",
    zarr_group_path,
    _open,
    write_zarr,
    zarr_paths,
    suffixes=(".zarr",),
    folder=True,
    holds_blocks=True,
)
"""Zarr v3: a directory holding a ``zarr.json`` of ``"node_type": "group"``, or that file."""
