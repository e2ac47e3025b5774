"""The Kiln payload directory: ``manifest.json`` plus one payload file per tensor.

kiln_np's own convention, not part of the Kiln spec: each payload file holds
exactly the payload's bytes, and ``manifest.json`` is::

    {"format": "kiln-np-weights/1", "source_format": ..., "metadata": {...},
     "metadata_types": {...} or null, "tensors": [...]}

with one tensor entry per line.  Each entry holds ``name``, ``file`` (a plain
file name in the directory), ``code``, ``dtype`` (the decoded numpy dtype name,
informative), ``layout`` (``{"name", "block_size"}`` or null), ``shape``,
``byte_length`` and ``sha256``.  ``source_format`` is the format the tensors
were read from, when they came from a weight file.  Metadata values keep their
types (``kiln_np._weights.metadata.encode_metadata``), so a GGUF file's keys
survive GGUF -> directory -> GGUF; ``metadata_types`` keeps a format's type
names (GGUF's ``"uint32"``...).  The ``kiln-np-onnx/1`` manifests that
``kiln-np onnx`` wrote before (``payload_bytes`` for ``byte_length``, a
``model`` key) still open.

Opening reads the manifest and checks each entry (its keys, a plain file name,
the layout, code and shape, ``byte_length`` against the shape's, the payload
file's size against it; with ``verify``, every file's SHA-256).  Saving builds
the directory beside ``path`` and renames it into place; each file is hashed as
written, read back in a helper thread while the next is copied.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kiln_np._convert.plan import save_as
from kiln_np._convert.policy import QuantizePolicy
from kiln_np._convert.row import WeightFormat
from kiln_np._convert.sources import Dequantize, Progress, TensorSource, sha256_file
from kiln_np._core.checks import check_path, check_regular_file, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import payload_info
from kiln_np._core.table import Layout
from kiln_np._files.io import building_directory
from kiln_np._weights.mapped import FileIdentity, MappedFile
from kiln_np._weights.metadata import (
    Metadata,
    check_json,
    decode_metadata,
    encode_metadata,
    read_json,
)
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "FORMAT",
    "MANIFEST",
    "MAX_MANIFEST_BYTES",
    "kiln_paths",
    "open_kiln",
    "payload_file_name",
    "save_kiln",
    "save_kiln_paths",
    "write_kiln",
]

MANIFEST = "manifest.json"
"""The manifest's file name: a directory holding it is a Kiln payload directory."""
MAX_MANIFEST_BYTES = 100_000_000
"""The largest manifest read or written: the safetensors crate's cap on a JSON header.
A manifest is a line per tensor and the metadata; the largest it carries in practice,
a GGUF file's 256,000-token vocabulary and merges, is under 30 MB."""
_MANIFEST_FORMAT = "kiln-np-weights/1"
_ONNX_MANIFEST_FORMAT = "kiln-np-onnx/1"  # what `kiln-np onnx` wrote before this format
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def open_kiln(path: str | os.PathLike[str], verify: bool = False) -> Weights:
    """Open a Kiln payload directory, reading its manifest (and, with ``verify``,
    every payload file) but mapping nothing.

    ``kiln_np.open_weights`` calls this for a directory holding ``manifest.json``
    (or that file itself).

    Parameters
    ----------
    path : str or os.PathLike
        The directory.
    verify : bool
        Also check every payload file's SHA-256 against the manifest (this reads
        every byte; sizes are always checked).

    Raises
    ------
    KilnError
        TYPE for a malformed manifest (naming it and the tensor entry) or a hash
        mismatch; LENGTH for a payload file or ``byte_length`` that is not the
        shape's; SHAPE for a malformed shape.
    OSError
        When the manifest or a payload file cannot be read.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "w")
    >>> save_kiln(d, {"w": np.arange(3, dtype=np.int16)}, metadata={"step": 7})
    >>> with open_kiln(d, verify=True) as w:
    ...     print(w.format, w["w"], dict(w.metadata))
    kiln WeightTensor('w', code 10 (i16), shape (3,), 6 bytes, i16) {'step': 7}
    >>> import shutil; shutil.rmtree(os.path.dirname(d))
    """
    directory = os.path.realpath(check_path(path))
    manifest = os.path.join(directory, MANIFEST)
    where = f"{manifest!r}: "
    doc = read_json(manifest, where, MAX_MANIFEST_BYTES, "a manifest", serde=False)
    if not isinstance(doc, dict) or doc.get("format") not in (
        _MANIFEST_FORMAT,
        _ONNX_MANIFEST_FORMAT,
    ):
        found = doc.get("format") if isinstance(doc, dict) else doc
        raise KilnError(
            "TYPE",
            f'{where}expected a manifest with "format": "{_MANIFEST_FORMAT}", found '
            f"{show_value(found)}",
        )
    old = doc["format"] == _ONNX_MANIFEST_FORMAT
    entries = doc.get("tensors")
    if not isinstance(entries, list):
        raise KilnError(
            "TYPE", f'{where}expected "tensors" to be a list, found {show_value(entries)}'
        )
    files = [_payload_file(directory, where, i, e, old, verify) for i, e in enumerate(entries)]
    if old:
        metadata = Metadata({"model": doc.get("model")})
    else:
        types = doc.get("metadata_types")
        if types is not None and not (
            isinstance(types, dict) and all(isinstance(v, str) for v in types.values())
        ):
            raise KilnError(
                "TYPE",
                f'{where}expected "metadata_types" to be null or an object of str, found '
                f"{show_value(types)}",
            )
        metadata = Metadata(decode_metadata(doc.get("metadata", {}), where), types)
    return Weights(
        (tensor for tensor, _ in files),
        format="kiln",
        metadata=metadata,
        path=directory,
        files=[file for _, file in files],
        opener=open_kiln,
    )


_ENTRY_KEYS = ("name", "file", "code", "layout", "shape", "sha256")


def _payload_file(
    directory: str, where: str, index: int, entry: object, old: bool, verify: bool
) -> tuple[WeightTensor, MappedFile]:
    """The tensor of one manifest entry, checked, and the file it maps."""
    size_key = "payload_bytes" if old else "byte_length"
    if not isinstance(entry, dict) or any(k not in entry for k in (*_ENTRY_KEYS, size_key)):
        raise KilnError(
            "TYPE",
            f"{where}tensor entry {index}: expected an object with keys "
            f"{', '.join((*_ENTRY_KEYS, size_key))}, found {show_value(entry)}",
        )
    name, file, layout = entry["name"], entry["file"], entry["layout"]
    if not isinstance(name, str):
        raise KilnError(
            "TYPE", f"{where}tensor entry {index}: expected a str name, found {show_value(name)}"
        )
    at = f"{where}tensor {name!r}: "
    if not (
        isinstance(file, str)
        and file not in ("", ".", "..")
        and "/" not in file
        and os.sep not in file
        and "\x00" not in file
    ):
        raise KilnError(
            "TYPE", f"{at}expected a plain file name in the directory, found {show_value(file)}"
        )
    if layout is not None:
        if not (isinstance(layout, dict) and set(layout) == {"name", "block_size"}):
            raise KilnError(
                "TYPE",
                f'{at}expected a layout {{"name", "block_size"}} or null, '
                f"found {show_value(layout)}",
            )
        try:
            layout = Layout(layout["name"], layout["block_size"])
        except KilnError as exc:
            raise exc.prefixed(at) from None
    try:
        info = payload_info(entry["code"], entry["shape"], layout)
    except KilnError as exc:
        raise exc.prefixed(at) from None
    recorded, digest = entry[size_key], entry["sha256"]
    if type(recorded) is not int:
        raise KilnError(
            "TYPE", f"{at}expected {size_key} as an integer, found {show_value(recorded)}"
        )
    info.check_length(recorded, f"{at}{size_key} in the manifest: ")
    if not (isinstance(digest, str) and _SHA256_HEX.fullmatch(digest)):
        raise KilnError(
            "TYPE", f"{at}expected sha256 as 64 lowercase hex digits, found {show_value(digest)}"
        )
    path = os.path.join(directory, file)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):  # it could lead anywhere: a secret becomes tensor data
        raise KilnError(
            "TYPE",
            f"{at}file {file!r}: expected a regular file in the directory, found a symlink "
            "(a payload file must not lead out of its directory)",
        )
    check_regular_file(path)  # TYPE for a FIFO, a device, a directory
    # The identity is the entry's own (lstat): a symlink put there later is TYPE when mapped.
    mapped = MappedFile(path, FileIdentity.of(st))
    info.check_length(mapped.size, f"{at}file {file!r}: ")
    if verify:
        found = sha256_file(path)
        if found != digest:
            raise KilnError(
                "TYPE",
                f"{at}file {file!r}: expected SHA-256 {digest}, found {found}",
                expected=digest,
                found=found,
            )
    # The format's own type name is Kiln's: the code's short name, or the layout's.
    label = info.element.name
    return WeightTensor(name, info, mapped, label), mapped


def _kiln_files(directory: str) -> set[str] | None:
    """What a previous :func:`save_kiln` wrote: its manifest and the payload files
    it lists, or None unless everything says this writer made it: a
    ``kiln-np-weights/1`` manifest whose entry ``i`` names a file as
    :func:`_file_name` names it (``building_directory`` checks that each is a
    regular file).  A manifest naming someone's ``notes.txt`` is not enough."""
    try:
        manifest = os.path.join(directory, MANIFEST)
        doc = read_json(manifest, "", MAX_MANIFEST_BYTES, "a manifest", serde=False)
        if doc["format"] != _MANIFEST_FORMAT:
            return None
        names = [entry["file"] for entry in doc["tensors"]]
    except (OSError, ValueError, TypeError, KeyError):  # KilnError too
        return None
    for index, name in enumerate(names):
        if not (isinstance(name, str) and _WRITTEN.fullmatch(name)):
            return None
        if not name.startswith(f"{index:04d}_"):
            return None
    return {MANIFEST, *names}


_WRITTEN = re.compile(r"[0-9]{4,}_[A-Za-z0-9._-]{1,100}\.kiln")  # what _file_name gives


def payload_file_name(index: int, name: str) -> str:
    """The payload file :func:`save_kiln` writes for the ``index``-th tensor: the
    index, then the name with characters other than letters, digits, ``.``,
    ``_``, ``-`` replaced (never a path, never hidden).

    Examples
    --------
    >>> payload_file_name(3, "model/layers.0:w"), payload_file_name(4, "..")
    ('0003_model_layers.0_w.kiln', '0004_tensor.kiln')
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "tensor"
    return f"{index:04d}_{cleaned[:100]}.kiln"


def kiln_paths(
    path: str, sources: Sequence[TensorSource], *, max_shard_size: int | None = None
) -> list[str]:
    """The files :func:`write_kiln` will write into the directory ``path`` for these
    sources, in order, absolute, without writing anything: each payload file, then
    the manifest.

    Examples
    --------
    >>> import numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> sources = tensor_sources({"a/b": np.zeros(1), "c": np.zeros(1)})
    >>> [os.path.basename(p) for p in kiln_paths("/w", sources)]
    ['0000_a_b.kiln', '0001_c.kiln', 'manifest.json']
    """
    return save_kiln_paths(path, [s.name for s in sources])


def save_kiln_paths(path: str | os.PathLike[str], names: Iterable[str]) -> list[str]:
    """The files :func:`save_kiln` will write into the directory ``path`` for
    tensors of these names, in order, absolute, without writing anything: each
    payload file, then the manifest.

    Examples
    --------
    >>> [os.path.basename(p) for p in save_kiln_paths("w", ["a/b", "c"])]
    ['0000_a_b.kiln', '0001_c.kiln', 'manifest.json']
    """
    target = written_path(check_path(path))
    files = [payload_file_name(i, name) for i, name in enumerate(names)]
    return [os.path.join(target, file) for file in [*files, MANIFEST]]


def _recognise(path: str, head: bytes | None, size: int) -> str | None:
    if head is None:
        return path if os.path.lexists(os.path.join(path, MANIFEST)) else None
    return os.path.dirname(path) if os.path.basename(path) == MANIFEST else None


def _open(
    path: str, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    return open_kiln(path, verify)


def save_kiln(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
) -> None:
    """Write tensors as a Kiln payload directory, built beside ``path`` and
    renamed into place.

    ``kiln_np.save_weights(..., format="kiln")`` calls this.  Every tensor is
    checked before anything is written; an existing directory is replaced only
    when it is empty or holds nothing but what a previous save wrote.

    Parameters
    ----------
    path : str or os.PathLike
        The directory.
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
        In the order to write; a :class:`~kiln_np.Weights` also records its
        format as ``source_format``.
    metadata : Mapping, optional
        Any values ``encode_metadata`` keeps, with their types (and
        ``metadata.types``, when it has them).
    progress : callable, optional
        Called with each number of payload bytes written.
    dequantize : {"f32", "bf16", "f16"}, optional
        Write each tensor of a decodable GGML block type as its values of this
        type, decoded a chunk at a time (``kiln_np.gguf.dequantize``'s bits);
        without it, blocks are written as they are.
    quantize : str or kiln_np.QuantizePolicy, optional
        Quantize float tensors to GGML blocks (or store them as another float
        type) by name, as the policy says (see ``kiln_np.save_weights``);
        not with ``dequantize``.

    Raises
    ------
    KilnError
        TYPE for a tensor or metadata value of another type (naming it); LENGTH
        for a payload whose bytes are not its shape's.  Nothing is written then.
    OSError
        When the directory cannot be written; ``FileExistsError`` for a
        directory holding other files.

    Examples
    --------
    >>> import json, os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "w")
    >>> save_kiln(d, {"a/b": np.zeros(2, np.uint8)})
    >>> sorted(os.listdir(d))
    ['0000_a_b.kiln', 'manifest.json']
    >>> import shutil; shutil.rmtree(os.path.dirname(d))
    """
    save_as(
        FORMAT, path, tensors, metadata=metadata, progress=progress, dequantize=dequantize,
        quantize=quantize,
    )  # fmt: skip


def write_kiln(
    path: str,
    sources: Sequence[TensorSource],
    *,
    metadata: Mapping[str, Any] | None = None,
    source_format: str | None = None,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """Write checked sources as a Kiln payload directory at the absolute ``path``
    (the kiln row's ``save``; :func:`save_kiln` documents the rest), recording
    ``source_format``; returns ``[path]``.

    >>> import tempfile, numpy as np
    >>> from kiln_np._convert.sources import tensor_sources
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = os.path.join(tmp, "w")
    ...     write_kiln(out, tensor_sources({"a": np.zeros(2, np.uint8)})) == [out]
    True
    """
    assert max_shard_size is None  # the plan refuses it: the row has no shards
    target = path
    encoded = {} if metadata is None else encode_metadata(metadata)
    types = getattr(metadata, "types", None)
    head = json.dumps(
        {
            "format": _MANIFEST_FORMAT,
            "source_format": source_format,
            "metadata": encoded,
            "metadata_types": None if types is None else dict(types),
        },
        allow_nan=False,
    )
    _check_manifest(head + "}")  # the metadata alone, before a payload is written
    # Each file is hashed as written, read back from the page cache in a helper
    # thread while the next one is copied (in the kernel): hashing costs little
    # more than one pass, and the digest is of the bytes on disk.
    # concurrent.futures (with logging and threading) is loaded by a save, not at import.
    from concurrent.futures import ThreadPoolExecutor

    with building_directory(target, _kiln_files) as tmp, ThreadPoolExecutor(1) as pool:
        entries: list[dict[str, Any]] = []
        digests = []
        for index, source in enumerate(sources):
            info, file = source.info, payload_file_name(index, source.name)
            written = os.path.join(tmp, file)
            fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                source.write_to(fd, progress=progress)
            finally:
                os.close(fd)
            digests.append(_hash_later(pool, written))
            entries.append(
                {
                    "name": source.name,
                    "file": file,
                    "code": int(info.code),
                    "dtype": None if info.layout is not None else info.dtype.name,
                    "layout": None
                    if info.layout is None
                    else {"name": info.layout.name, "block_size": info.layout.block_size},
                    "shape": list(info.shape),
                    "byte_length": info.byte_length,
                }
            )
        for entry, digest in zip(entries, digests, strict=True):
            entry["sha256"] = digest()
        # One line per tensor: readable, and diffable.
        rows = ",\n".join("  " + json.dumps(e, allow_nan=False) for e in entries)
        body = f"\n{rows}\n" if entries else ""
        text = f'{head[:-1]}, "tensors": [{body}]}}\n'
        _check_manifest(text)
        with open(os.path.join(tmp, MANIFEST), "x", encoding="utf-8") as f:
            f.write(text)
    return [target]


def _check_manifest(text: str) -> None:
    """Refuse to write a manifest that :func:`open_kiln` would refuse to read."""
    raw = text.encode("utf-8")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise KilnError(
            "TYPE",
            f"expected a manifest of at most {MAX_MANIFEST_BYTES} bytes, found {len(raw)}: "
            "the metadata and tensor list are too large for a Kiln directory",
            expected=MAX_MANIFEST_BYTES,
            found=len(raw),
        )
    check_json(raw, "the manifest: ", serde=False)


def _hash_later(pool: ThreadPoolExecutor, path: str) -> Callable[[], str]:
    """The SHA-256 of ``path``, computed in ``pool`` while the caller goes on
    (inline when no thread can start, as at interpreter exit)."""
    try:
        return pool.submit(sha256_file, path).result
    except RuntimeError:
        digest = sha256_file(path)
        return lambda: digest


FORMAT = WeightFormat(
    "kiln",
    _recognise,
    _open,
    write_kiln,
    kiln_paths,
    folder=True,
    holds_blocks=True,
    carries=lambda metadata: True,
)
"""The Kiln payload directory: a directory holding ``manifest.json``, or that file;
any metadata is carried, with its types."""
