"""safetensors files <-> Kiln payloads: a strict, lazy reader and a streaming writer.

The format (as the safetensors crate reads it)
----------------------------------------------
A file is:

1. ``N``, a little-endian uint64: the header's byte count.  It MUST be at
   most 100,000,000 (:data:`MAX_HEADER_BYTES`) and at most the rest of the
   file.
2. The header: ``N`` bytes of UTF-8 JSON, an object (writers pad it with
   spaces to a multiple of 8 bytes, so the data is 8-byte aligned).  Each key
   but ``__metadata__`` is a tensor name (unique) mapped to ``{"dtype":
   NAME, "shape": [dims], "data_offsets": [begin, end]}``; ``__metadata__``,
   when present, maps str to str.
3. The data: every tensor's bytes, little-endian, C order.  Offsets count
   from the end of the header.  Sorted by offset, the tensors MUST tile the
   data exactly: the first begins at 0, each begins where the one before
   ends, the last ends at the end of the file; each spans exactly the bytes
   its dtype and shape need.

What :func:`open_safetensors` checks (the crate's ``validate``, plus what a
serde parser gives it for free), each a :class:`~kiln_np.KilnError` naming the
file and the tensor: the header size (TYPE past 100 MB, LENGTH past the end
of the file); UTF-8 and JSON, an object, unique keys, nesting Python can
parse (TYPE); ``__metadata__`` str to str (TYPE); each entry's dtype (TYPE),
shape (SHAPE), offsets two integers (TYPE); offsets contiguous and in order
(TYPE); each tensor's span equal to its byte length (LENGTH); the data
section exactly the file's remainder (LENGTH); an odd F4 count (TYPE: its
last byte would be half a tensor).  Opening reads the header and nothing
else; tensors map the file when their payload is asked for.

Types
-----
:data:`DTYPES` maps each safetensors dtype to a Kiln code.  F4 is Kiln e2m1
with the same shape: safetensors counts F4 elements and packs two per byte,
the earlier element in the low nibble, exactly Kiln's packed payload (torch's
``float4_e2m1fn_x2`` writes it so).  F8_E4M3FNUZ, F8_E5M2FNUZ and C64 have
no Kiln code: they travel as opaque payloads under the codes and layouts of
kiln_np's one registry of foreign element types (the ones the ONNX bridge
uses for the same types), one block per element.  F6_E2M3 and F6_E3M2 are
refused (:data:`REFUSED`): safetensors does not document how 6-bit elements
are packed into bytes.

Sharded checkpoints
-------------------
Hugging Face writes ``model-00001-of-00003.safetensors`` ... and
``model.safetensors.index.json``: ``{"metadata": {"total_size": N},
"weight_map": {tensor name: shard file}}``.  :func:`open_safetensors` on the
index opens every shard's header (shard-number order) and checks the index
against them: each shard file named must exist (``FileNotFoundError``) and
stay inside the index's directory (no absolute path, no ``..``); every tensor
a shard holds must be listed for that shard, every listed tensor must be in
its shard (TYPE otherwise).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kiln_np._core.checks import check_int, check_path, set_module, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import FOREIGN_BY_NAME
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, Layout, code_label
from kiln_np._files.io import building_directory, open_regular_raw, replacing
from kiln_np._weights.kit import (
    MappedFile,
    Progress,
    TensorSource,
    Weights,
    WeightTensor,
    parse_json,
    tensor_sources,
)

__all__ = [
    "DTYPES",
    "INDEX_SUFFIX",
    "MAX_HEADER_BYTES",
    "REFUSED",
    "SafetensorsDType",
    "looks_like_safetensors",
    "open_safetensors",
    "safetensors_dtype",
    "save_safetensors",
]

MAX_HEADER_BYTES = 100_000_000
"""The safetensors crate's ``MAX_HEADER_SIZE``."""
INDEX_SUFFIX = ".safetensors.index.json"
"""How the index of a sharded checkpoint is named (``model.safetensors.index.json``)."""

_SIZE_BYTES = 8
_SHARD = re.compile(r"-(\d+)-of-(\d+)\.safetensors$")


@set_module("kiln_np.safetensors")
@dataclass(frozen=True)
class SafetensorsDType:
    """One safetensors dtype and its Kiln form.

    Attributes
    ----------
    name : str
        safetensors' name (``"BF16"``, ``"F8_E4M3"``, ``"F4"``).
    code : int
        The Kiln code: closed, or opaque (with ``layout``) for a foreign type.
    layout : Layout or None
        The foreign type's layout, for opaque codes.
    bits : int
        Bits per element (safetensors' ``bitsize``).
    """

    name: str
    code: int
    layout: Layout | None
    bits: int

    @property
    def alignment(self) -> int:
        """Bytes a writer aligns the tensor's data to: its element size."""
        return max(1, self.bits // 8)


def _closed(name: str, code: Code, bits: int) -> SafetensorsDType:
    return SafetensorsDType(name, code, None, bits)


def _foreign(name: str, numpy_name: str) -> SafetensorsDType:
    f = FOREIGN_BY_NAME[numpy_name]
    return SafetensorsDType(name, f.code, f.layout, f.bits)


DTYPES: tuple[SafetensorsDType, ...] = (
    _closed("BOOL", Code.BOOL, 8),
    _closed("U8", Code.U8, 8),
    _closed("I8", Code.I8, 8),
    _closed("I16", Code.I16, 16),
    _closed("U16", Code.U16, 16),
    _closed("I32", Code.I32, 32),
    _closed("U32", Code.U32, 32),
    _closed("I64", Code.I64, 64),
    _closed("U64", Code.U64, 64),
    _closed("F16", Code.F16, 16),
    _closed("BF16", Code.BF16, 16),
    _closed("F32", Code.F32, 32),
    _closed("F64", Code.F64, 64),
    _closed("F8_E4M3", Code.F8E4M3, 8),
    _closed("F8_E5M2", Code.F8E5M2, 8),
    _closed("F8_E8M0", Code.E8M0, 8),
    _closed("F4", Code.E2M1, 4),
    _foreign("F8_E4M3FNUZ", "float8_e4m3fnuz"),
    _foreign("F8_E5M2FNUZ", "float8_e5m2fnuz"),
    _foreign("C64", "complex64"),
)
"""Every safetensors dtype kiln_np reads and writes, with its Kiln code."""

_F6_WHY = (
    "safetensors does not document the bit order of its 6-bit types (how four elements "
    "share three bytes), and kiln_np does not guess"
)
REFUSED: Mapping[str, str] = MappingProxyType(dict.fromkeys(("F6_E2M3", "F6_E3M2"), _F6_WHY))
"""safetensors dtypes that are refused (TYPE), with why."""

_BY_NAME: Mapping[str, SafetensorsDType] = MappingProxyType({r.name: r for r in DTYPES})
_BY_KIND: Mapping[tuple[int, Layout | None], SafetensorsDType] = MappingProxyType(
    {(int(r.code), r.layout): r for r in DTYPES}
)
_F4 = _BY_NAME["F4"]


@set_module("kiln_np.safetensors")
def safetensors_dtype(info: PayloadInfo) -> SafetensorsDType:
    """The safetensors dtype that holds payloads of ``info``.

    Raises
    ------
    KilnError
        TYPE for a code safetensors has no dtype for (i4, u4, an opaque code
        other than the foreign types in :data:`DTYPES`), and for an odd count
        of e2m1 (safetensors refuses an F4 tensor that ends mid-byte).

    Examples
    --------
    >>> from kiln_np import PayloadInfo
    >>> safetensors_dtype(PayloadInfo("e2m1", (4, 2))).name
    'F4'
    """
    row = _BY_KIND.get((int(info.code), info.layout))
    if row is None:
        layout = "" if info.layout is None else f" with layout {info.layout!r}"
        raise KilnError(
            "TYPE",
            f"safetensors has no dtype for {code_label(int(info.code))}{layout}: expected one "
            f"of the codes of {', '.join(r.name for r in DTYPES)}",
            code=int(info.code),
        )
    if row is _F4 and info.count % 2:
        raise KilnError(
            "TYPE",
            f"{info.context}expected an even number of F4 elements (safetensors packs two "
            f"per byte and refuses a tensor that ends mid-byte), found {info.count}",
            code=int(info.code),
            shape=info.shape,
        )
    return row


@set_module("kiln_np.safetensors")
def looks_like_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of ``size`` bytes starting with ``head`` (at least 9 bytes
    of it) is safetensors as :func:`kiln_np.open_weights` recognises it: an
    8-byte little-endian size at most 100 MB and at most the rest of the file,
    then ``{``.

    >>> looks_like_safetensors(b"\\x02\\0\\0\\0\\0\\0\\0\\0{}", 10)
    True
    """
    if len(head) <= _SIZE_BYTES:
        return False
    n = int.from_bytes(head[:_SIZE_BYTES], "little")
    return n <= MAX_HEADER_BYTES and n <= size - _SIZE_BYTES and head[8:9] == b"{"


# -- reading ------------------------------------------------------------------------


@set_module("kiln_np.safetensors")
def open_safetensors(path: str | os.PathLike[str]) -> Weights:
    """Open a safetensors file, or a sharded checkpoint by its index, reading
    headers only.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.safetensors`` file, or a ``*.safetensors.index.json``.

    Returns
    -------
    Weights
        Tensors in data-offset order (shards one after another); ``metadata``
        is ``__metadata__`` (the first shard's, for a checkpoint).

    Raises
    ------
    KilnError
        As the module docstring lists.
    OSError
        When a file cannot be read; ``FileNotFoundError`` for a missing shard.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> kiln_np.save_weights(d + "/a.safetensors", {"x": np.ones(2, np.int16)},
    ...                      format="safetensors")
    >>> w = open_safetensors(d + "/a.safetensors")
    >>> w["x"].format_dtype, w["x"].offset
    ('I16', 64)
    >>> w.close(); import shutil; shutil.rmtree(d)
    """
    name = os.path.realpath(check_path(path))
    if name.endswith(INDEX_SUFFIX):
        return _open_index(name)
    file, tensors, metadata = _read_file(name)
    return Weights(tensors, format="safetensors", metadata=metadata, path=name, files=[file])


def _read_file(path: str) -> tuple[MappedFile, list[WeightTensor], dict[str, str]]:
    where = f"{path!r}: "
    with open_regular_raw(path) as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(_SIZE_BYTES)
        if len(first) < _SIZE_BYTES:
            raise KilnError(
                "LENGTH",
                f"{where}expected at least 8 bytes (the header size), found {len(first)}",
                expected=_SIZE_BYTES,
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
        if n > size - _SIZE_BYTES:
            raise KilnError(
                "LENGTH",
                f"{where}expected a header of {n} bytes after the size, found a file of "
                f"{size} bytes (short by {n - (size - _SIZE_BYTES)})",
                expected=n,
                found=size - _SIZE_BYTES,
            )
        raw = f.read(n)
    header = parse_json(raw, f"{where}header: ")
    if not isinstance(header, dict):
        raise KilnError(
            "TYPE", f"{where}expected the header to be a JSON object, found {show_value(header)}"
        )
    metadata = _metadata(header.pop("__metadata__", None), where)
    data_start = _SIZE_BYTES + n
    file = MappedFile(path, size)
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
    return file, tensors, metadata


def _metadata(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise KilnError(
            "TYPE",
            f"{where}expected __metadata__ to map str to str, found {show_value(value)}",
        )
    for key, text in value.items():
        _check_unicode(key, f"{where}__metadata__ key")
        _check_unicode(text, f"{where}__metadata__ {key!r}")
    return value


def _check_unicode(text: str, what: str) -> None:
    """JSON lets ``\\ud800`` escape half a character; the crate (serde) refuses it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise KilnError(
            "TYPE", f"{what}: expected text, found a lone surrogate escape in {text!r}"
        ) from None


def _entry(
    name: str, value: object, where: str
) -> tuple[int, int, str, SafetensorsDType, PayloadInfo]:
    at = f"{where}tensor {name!r}: "
    _check_unicode(name, f"{where}tensor name")
    if not isinstance(value, dict):
        raise KilnError(
            "TYPE",
            f'{at}expected {{"dtype", "shape", "data_offsets"}}, found {show_value(value)}',
        )
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    row = _BY_NAME.get(dtype) if isinstance(dtype, str) else None
    if row is None:
        why = REFUSED.get(dtype) if isinstance(dtype, str) else None
        raise KilnError(
            "TYPE",
            f"{at}expected a dtype in {', '.join(_BY_NAME)}, found {show_value(dtype)}"
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


def _open_index(path: str) -> Weights:
    where = f"{path!r}: "
    with open_regular_raw(path) as f:
        index = parse_json(f.read(), where)
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
    directory = os.path.dirname(path)
    shards = sorted(set(weight_map.values()), key=_shard_order)
    files, tensors = [], []
    metadata: dict[str, str] = {}
    for i, shard in enumerate(shards):
        _check_inside(shard, where)
        file, held, meta = _read_file(os.path.join(directory, shard))
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
    return Weights(tensors, format="safetensors", metadata=metadata, path=path, files=files)


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


# -- writing ------------------------------------------------------------------------


@set_module("kiln_np.safetensors")
def save_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    metadata: Mapping[str, str] | None = None,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> None:
    """Write tensors as a safetensors file, or as a sharded checkpoint.

    Every tensor is checked before a byte is written; data is copied a bounded
    chunk at a time (in the kernel, from a weight file's tensors).  Tensors
    are written widest element first (8-byte, 4, 2, then 1-byte and F4), in
    the given order within a width, so every tensor is aligned to its element
    size, as safetensors' own writer ensures; the header is padded with spaces
    to a multiple of 8 bytes.

    Parameters
    ----------
    path : str or os.PathLike
        The file (written to a temporary sibling, renamed into place); with
        ``max_shard_size``, a directory, built beside and renamed into place,
        holding ``model-00001-of-0000N.safetensors`` ... and
        ``model.safetensors.index.json`` (``{"metadata": {"total_size": ...},
        "weight_map": ...}``, written as transformers writes it).
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
    metadata : Mapping[str, str], optional
        Written as ``__metadata__`` as given (every shard gets it).
    max_shard_size : int, optional
        Start a new shard before a tensor that would take a shard's data past
        this many bytes; a larger tensor gets a shard of its own.
    progress : callable, optional
        Called with each number of payload bytes written.

    Raises
    ------
    KilnError
        TYPE for a tensor safetensors cannot hold (i4, u4, an odd-count e2m1,
        an opaque code other than the foreign types; naming the tensor), a
        name that is ``__metadata__`` or not UTF-8, metadata that is not str
        to str, a header past 100 MB; LENGTH for a payload whose bytes are not
        its shape's.

    Examples
    --------
    >>> import os, tempfile, numpy as np, ml_dtypes, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> fp4 = np.array([0.5, -6.0], ml_dtypes.float4_e2m1fn)
    >>> save_safetensors(d + "/f4.safetensors", {"q": fp4}, metadata={"format": "pt"})
    >>> with open_safetensors(d + "/f4.safetensors") as w:
    ...     print(w["q"].format_dtype, bytes(w["q"].payload().data).hex())
    F4 f1
    >>> import shutil; shutil.rmtree(d)
    """
    target = written_path(check_path(path))
    sources = tensor_sources(tensors)
    rows = [_row_for(s) for s in sources]
    meta = _check_metadata(metadata)
    if max_shard_size is None:
        header = _header(sources, rows, meta)
        with replacing(target) as (_, f):
            f.write(header)
            f.flush()
            for source in _widest_first(sources, rows):
                source.write_to(f.fileno(), progress=progress)
        return
    limit = check_int(max_shard_size, "max_shard_size", minimum=1)
    shards = _shard(sources, rows, limit)
    count = len(shards)
    names = [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]
    headers = [_header([s for s, _ in shard], [r for _, r in shard], meta) for shard in shards]
    weight_map = {s.name: name for name, shard in zip(names, shards, strict=True) for s, _ in shard}
    index = {
        "metadata": {"total_size": sum(s.info.byte_length for s in sources)},
        "weight_map": weight_map,
    }
    with building_directory(target, _index_files) as tmp:
        for name, header, shard in zip(names, headers, shards, strict=True):
            with open(os.path.join(tmp, name), "xb") as f:
                f.write(header)
                f.flush()
                for source in _widest_first([s for s, _ in shard], [r for _, r in shard]):
                    source.write_to(f.fileno(), progress=progress)
        with open(os.path.join(tmp, "model" + INDEX_SUFFIX), "x", encoding="utf-8") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


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


def _widest_first(sources: list[TensorSource], rows: list[SafetensorsDType]) -> list[TensorSource]:
    order = sorted(range(len(sources)), key=lambda i: -rows[i].alignment)  # stable
    return [sources[i] for i in order]


def _header(
    sources: list[TensorSource], rows: list[SafetensorsDType], meta: dict[str, str] | None
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
    return len(text).to_bytes(_SIZE_BYTES, "little") + text


def _shard(
    sources: list[TensorSource], rows: list[SafetensorsDType], limit: int
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


def _index_files(directory: str) -> set[str] | None:
    """What a previous sharded save wrote: the index and the shards it names."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, RecursionError):
        with open_regular_raw(os.path.join(directory, "model" + INDEX_SUFFIX)) as f:
            weight_map = json.loads(f.read())["weight_map"]
        return {"model" + INDEX_SUFFIX, *map(str, weight_map.values())}
    return None
