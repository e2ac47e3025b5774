"""Weight-file formats: one table of them, :data:`FORMATS`, and the two doors built
on it, :func:`open_weights` and :func:`save_weights`.

:func:`open_weights` recognises a weight file from its content and returns a
:class:`~kiln_np.Weights`, a read-only mapping of names to
:class:`~kiln_np.WeightTensor` in file order; :func:`save_weights` writes any
mapping of names to payloads, arrays or such tensors as safetensors, GGUF, a
Kiln payload directory or a Zarr v3 group.  Each format lives in its own package
or module (``kiln_np.kilndir``, ``kiln_np.safetensors``, ``kiln_np.gguf``,
``kiln_np.onnx``, ``kiln_np.zarr``), which imports the kit of ``kiln_np._weights`` and never this
module: the table is the one place that names them all.

Recognising a format
--------------------
The rows of :data:`FORMATS` are tried in order, the first that fits opens it:

1. ``kiln``: a directory holding ``manifest.json``, or that file itself: a Kiln
   payload directory;
2. ``zarr``: a directory holding a Zarr v3 group's ``zarr.json``, or that file;
3. ``safetensors``: a directory holding one ``*.safetensors.index.json``, or
   such an index file itself: a sharded checkpoint; or a file whose first 8
   bytes are a little-endian size of at most 100 MB and at most the rest of
   the file, followed by ``{``;
4. ``gguf``: a file starting with ``GGUF`` (the first file of a split opens
   the whole split);
5. ``onnx``: a file that parses as a binary ONNX ``ModelProto``.  Protobuf has
   no magic, so this comes last, and only for a file whose first byte is
   ``0x08`` (the tag of ``ir_version``, field 1, which every ONNX writer puts
   first).

A directory that no row takes (a Hugging Face model folder: ``model.safetensors``
beside ``config.json`` and a tokenizer) opens as the one weight file it holds
(``*.safetensors``, ``*.gguf``, ``*.onnx``; a GGUF split set counts once, by its
first split); several are TYPE naming them.  A torch checkpoint (a zip holding
a pickle, as ``torch.save`` writes ``.pt``/``.bin``, or a bare pickle) is TYPE
saying so: kiln_np does not execute pickles.  Anything else is TYPE, showing
the first bytes in hex.  Only the order of
safetensors and ONNX matters for a file (a safetensors header of 8 bytes
starts with ``0x08``; ``GGUF`` read as a header size is above 100 MB), and of
the Kiln directory and a checkpoint for a directory (one may hold both).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kiln_np._codec import Payload
from kiln_np._core.checks import check_path, set_module, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._files.io import open_regular_raw, replacing
from kiln_np._quants.decode import block_of
from kiln_np._weights.policy import QuantizePolicy, as_policy
from kiln_np._weights.remote import is_url
from kiln_np._weights.sources import (
    Dequantize,
    KeptTensor,
    Progress,
    blocks_refused,
    dequantize_code,
    ggml_blocks,
    quantize_kept,
)
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights
from kiln_np.gguf import open_gguf, save_gguf
from kiln_np.gguf._types import MAGIC as GGUF_MAGIC
from kiln_np.gguf._writer import save_gguf_paths
from kiln_np.kilndir import MANIFEST, open_kiln, save_kiln, save_kiln_paths
from kiln_np.onnx._weights import open_model_weights
from kiln_np.safetensors import open_safetensors, save_safetensors
from kiln_np.safetensors._reader import looks_like_safetensors
from kiln_np.safetensors._types import INDEX_SUFFIX
from kiln_np.safetensors._writer import save_safetensors_paths
from kiln_np.zarr import open_zarr, save_zarr, save_zarr_paths, zarr_group_path

__all__ = [
    "FORMATS",
    "KeptTensor",
    "Quantize",
    "WeightFormat",
    "check_blocks",
    "open_weights",
    "plain_config",
    "quantize_kept",
    "save_weights",
    "save_weights_paths",
]

_HEAD = 16  # bytes shown of a file no format recognises

PathLike = str | os.PathLike[str]
Quantize = QuantizePolicy | str | None
"""A ``quantize=`` argument: a policy, its string, or None."""
Save = Callable[
    [
        str,
        Mapping[str, Any],
        Mapping[str, Any] | None,
        int | None,
        Progress | None,
        Dequantize,
        Quantize,
    ],
    list[str],
]
"""``(path, tensors, metadata, max_shard_size, progress, dequantize, quantize)``: a
format's writer, returning the paths it wrote."""
Paths = Callable[[str, Mapping[str, Any], int | None, Dequantize, Quantize], list[str]]
"""``(path, tensors, max_shard_size, dequantize, quantize)``: every file that writer
will write, absolute."""


@dataclass(frozen=True)
class WeightFormat:
    """One weight-file format: how it is recognised, opened and written.

    Attributes
    ----------
    name : str
        What :attr:`Weights.format` says and ``save_weights(format=...)`` takes.
    recognise : callable
        ``(path, head, size)``: the path its ``open`` takes (a directory's
        index, a manifest's directory) when ``path`` is of this format, else
        None.  ``head`` is the file's first 16 bytes and ``size`` its size;
        for a directory, ``head`` is None.
    open : callable
        ``(path, verify)``: the :class:`~kiln_np.Weights` of a recognised path.
    save : callable or None
        ``(path, tensors, metadata, max_shard_size, progress, dequantize,
        quantize)``, returning the paths written (the file, each split, or the directory);
        None for a format kiln_np only reads.
    paths : callable or None
        ``(path, tensors, max_shard_size, dequantize, quantize)``: every file ``save``
        will write for those arguments (each split, shard, index, payload file
        and manifest), absolute, computed with the names ``save`` gives them;
        nothing is written.
    holds_blocks : bool
        Whether it holds GGML blocks as they are; where it cannot, a quantized
        tensor is written only dequantized (``save_weights(..., dequantize=)``),
        and nothing is quantized (``save_weights(..., quantize=)`` is TYPE).
    """

    name: str
    recognise: Callable[[str, bytes | None, int], str | None]
    open: Callable[[str, bool], Weights]
    save: Save | None
    paths: Paths | None
    holds_blocks: bool


# -- recognising ----------------------------------------------------------------------


def _kiln_path(path: str, head: bytes | None, size: int) -> str | None:
    if head is None:
        return path if os.path.lexists(os.path.join(path, MANIFEST)) else None
    return os.path.dirname(path) if os.path.basename(path) == MANIFEST else None


def _indexes(directory: str) -> list[str]:
    return sorted(f for f in os.listdir(directory) if f.endswith(INDEX_SUFFIX))


def _safetensors_path(path: str, head: bytes | None, size: int) -> str | None:
    if head is None:
        indexes = _indexes(path)
        return os.path.join(path, indexes[0]) if len(indexes) == 1 else None
    if path.endswith(INDEX_SUFFIX) and head.lstrip()[:1] == b"{":
        return path
    return path if looks_like_safetensors(head, size) else None


def _gguf_path(path: str, head: bytes | None, size: int) -> str | None:
    return path if head is not None and head[:4] == GGUF_MAGIC else None


def _onnx_path(path: str, head: bytes | None, size: int) -> str | None:
    # 0x08: field 1 (ir_version) as a varint, the tag every ONNX writer puts first
    return path if head is not None and head[:1] == b"\x08" else None


# -- each format's doors, as the table calls them -------------------------------------


def _open_safetensors(path: str, verify: bool) -> Weights:
    return open_safetensors(path)


def _open_gguf(path: str, verify: bool) -> Weights:
    return open_gguf(path)


def _open_onnx(path: str, verify: bool) -> Weights:
    return open_model_weights(path)


class _Directory:
    """The ``save`` and ``paths`` doors of a format written as one directory
    (``kiln``, ``zarr``): its own writer and path list, no shards."""

    def __init__(
        self,
        name: str,
        save: Callable[..., None],
        paths: Callable[[str, Mapping[str, Any]], list[str]],
    ) -> None:
        self.name, self._save, self._paths = name, save, paths

    def _no_shards(self, max_shard_size: int | None) -> None:
        if max_shard_size is not None:
            raise KilnError(
                "TYPE",
                f"expected max_shard_size only for safetensors or GGUF, found it for {self.name!r}",
            )

    def save(
        self,
        path: str,
        tensors: Mapping[str, Any],
        metadata: Mapping[str, Any] | None,
        max_shard_size: int | None,
        progress: Progress | None,
        dequantize: Dequantize,
        quantize: Quantize,
    ) -> list[str]:
        self._no_shards(max_shard_size)
        self._save(
            path,
            tensors,
            metadata=metadata,
            progress=progress,
            dequantize=dequantize,
            quantize=quantize,
        )
        return [path]

    def paths(
        self,
        path: str,
        tensors: Mapping[str, Any],
        max_shard_size: int | None,
        dequantize: Dequantize,
        quantize: Quantize,
    ) -> list[str]:
        self._no_shards(max_shard_size)
        return self._paths(path, tensors)


_KILN = _Directory("kiln", save_kiln, save_kiln_paths)
_ZARR = _Directory("zarr", save_zarr, save_zarr_paths)


def _save_safetensors(
    path: str,
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    max_shard_size: int | None,
    progress: Progress | None,
    dequantize: Dequantize,
    quantize: Quantize,
) -> list[str]:
    assert quantize is None  # save_weights refuses it for a format holding no blocks
    save_safetensors(
        path,
        tensors,
        metadata=metadata,
        max_shard_size=max_shard_size,
        progress=progress,
        dequantize=dequantize,
    )
    return [path]  # a file, or the directory of a sharded checkpoint


def _save_gguf(
    path: str,
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    max_shard_size: int | None,
    progress: Progress | None,
    dequantize: Dequantize,
    quantize: Quantize,
) -> list[str]:
    return save_gguf(
        path,
        tensors,
        metadata,
        metadata_types=getattr(metadata, "types", None),
        max_shard_size=max_shard_size,
        progress=progress,
        dequantize=dequantize,
        quantize=quantize,
    )


def _safetensors_paths(
    path: str,
    tensors: Mapping[str, Any],
    max_shard_size: int | None,
    dequantize: Dequantize,
    quantize: Quantize,
) -> list[str]:
    assert quantize is None  # save_weights_paths refuses it for a format holding no blocks
    return save_safetensors_paths(
        path, tensors, max_shard_size=max_shard_size, dequantize=dequantize
    )


def _gguf_paths(
    path: str,
    tensors: Mapping[str, Any],
    max_shard_size: int | None,
    dequantize: Dequantize,
    quantize: Quantize,
) -> list[str]:
    return save_gguf_paths(
        path, tensors, max_shard_size=max_shard_size, dequantize=dequantize, quantize=quantize
    )


FORMATS: tuple[WeightFormat, ...] = (
    WeightFormat("kiln", _kiln_path, open_kiln, _KILN.save, _KILN.paths, True),
    WeightFormat("zarr", zarr_group_path, open_zarr, _ZARR.save, _ZARR.paths, True),
    WeightFormat(
        "safetensors",
        _safetensors_path,
        _open_safetensors,
        _save_safetensors,
        _safetensors_paths,
        False,
    ),
    WeightFormat("gguf", _gguf_path, _open_gguf, _save_gguf, _gguf_paths, True),
    WeightFormat("onnx", _onnx_path, _open_onnx, None, None, False),
)
"""Every weight-file format, in the order :func:`open_weights` tries them."""


# -- the doors ------------------------------------------------------------------------


@set_module("kiln_np")
def open_weights(
    path: PathLike, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    """Open a weight file (or directory), recognised from its content.

    Parameters
    ----------
    path : str or os.PathLike
        A safetensors, GGUF or ONNX file; a sharded safetensors checkpoint (its
        ``*.safetensors.index.json``, or the directory holding it); the first
        split of a GGUF; a Kiln payload directory; a directory holding one
        weight file (a Hugging Face model folder).  The module docstring gives
        the order in which formats are tried (the order of :data:`FORMATS`).
        A URL (``https://``, ``s3://``, ...: safetensors only) is read with
        range requests (``open_safetensors``; docs/big-files.md).
    storage_options : mapping, optional
        For a URL: the options of its fsspec file system.
    verify : bool
        For a Kiln payload directory, also check every payload file's SHA-256
        against the manifest (this reads every byte; sizes are always checked).

    Returns
    -------
    Weights
        Only headers are read: tensors are mapped when their payloads are asked for.

    Raises
    ------
    KilnError
        TYPE for a file no format recognises (showing its first bytes in hex;
        a torch pickle checkpoint says so), a directory of several weight files,
        a malformed header, index or manifest (naming the file and tensor), a
        hash mismatch; LENGTH for a byte count the file contradicts; SHAPE for
        a malformed shape.
    OSError
        When a file cannot be read: ``FileNotFoundError`` names a missing
        file or shard.
    ImportError
        For a file that starts like an ONNX model when onnx is not installed.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> path = os.path.join(d, "m.safetensors")
    >>> _ = kiln_np.save_weights(path, {"w": np.eye(2, dtype=np.float32)}, format="safetensors")
    >>> w = kiln_np.open_weights(path)
    >>> w.format, list(w), w["w"].code, w["w"].byte_length
    ('safetensors', ['w'], <Code.F32: 2>, 16)
    >>> w.close(); import shutil; shutil.rmtree(d)
    """
    if isinstance(verify, bool) is False:
        raise KilnError("TYPE", f"expected verify to be a bool, found {show_value(verify)}")
    if is_url(path):
        return open_safetensors(path, storage_options)
    name = os.path.realpath(check_path(path))
    if os.path.isdir(name):
        for row in FORMATS:
            target = row.recognise(name, None, 0)
            if target is not None:
                return row.open(target, verify)
        name = _one_weight_file(name)
    with open_regular_raw(name) as f:
        size = os.fstat(f.fileno()).st_size
        start = f.read(_START)
    head = start[:_HEAD]
    for row in FORMATS:
        target = row.recognise(name, head, size)
        if target is not None:
            return row.open(target, verify)
    pickled = _pickle_kind(start)
    if pickled is not None:
        raise KilnError(
            "TYPE",
            f"{name!r}: expected a weight file, found {pickled}: {_NO_PICKLES}",
            found=head,
        )
    shown = f"the bytes {head.hex(' ')}{' ...' * (size > _HEAD)}" if head else "an empty file"
    raise KilnError(
        "TYPE",
        f"{name!r}: expected a weight file (safetensors, GGUF, ONNX, a Kiln payload directory "
        f"or a sharded checkpoint), found {shown}",
        found=head,
    )


# -- what a directory or a file that is no weight file holds --------------------------

_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".onnx")
"""The files a directory is opened as, when it holds exactly one."""
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_LATER_SPLIT = re.compile(r"-(?!00001-)\d{5}-of-\d{5}\.gguf$")  # opened with the first
_NO_PICKLES = (
    "kiln_np does not execute pickles (unpickling runs whatever code the file holds); "
    "convert it to safetensors where torch runs, e.g. "
    "safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors')"
)
_START = 512  # bytes read to recognise a file: the head, a zip's first member name


def _one_weight_file(directory: str) -> str:
    """The one weight file in a directory no row recognises (a Hugging Face
    model folder: ``model.safetensors``, ``config.json``, a tokenizer), else
    TYPE naming what it holds: several weight files, pickles, or nothing."""
    entries = sorted(os.listdir(directory))
    files = [
        f
        for f in entries
        if f.endswith(_WEIGHT_SUFFIXES)
        and not _LATER_SPLIT.search(f)
        and not os.path.isdir(os.path.join(directory, f))
    ]
    if len(files) == 1:
        return os.path.join(directory, files[0])
    indexes = _indexes(directory)
    named = [f for f in entries if f.endswith(_PICKLE_SUFFIXES)][:4]
    pickles = [f for f in named if _pickle_kind(_start(os.path.join(directory, f)))]
    if len(indexes) > 1:
        found = f"{len(indexes)} indexes ({_names(indexes)})"
    elif files:
        found = f"{len(files)} weight files ({_names(files)}): open one of them"
    elif pickles:
        found = f"only pickles ({_names(pickles)}): {_NO_PICKLES}"
    else:
        found = "neither a manifest nor an index nor a weight file"
    raise KilnError(
        "TYPE",
        f"{directory!r}: expected a directory holding {MANIFEST} (a Kiln payload directory), "
        f"one *{INDEX_SUFFIX} (a sharded safetensors checkpoint) or one weight file "
        f"(*{', *'.join(_WEIGHT_SUFFIXES)}), found {found}",
    )


def _start(path: str) -> bytes:
    """The first bytes of a file (empty when it cannot be read, or is no regular file)."""
    try:
        with open_regular_raw(path) as f:
            return f.read(_START)
    except (OSError, KilnError):
        return b""


def _names(files: list[str]) -> str:
    return ", ".join(map(repr, files[:4])) + (", ..." if len(files) > 4 else "")


def _pickle_kind(start: bytes) -> str | None:
    """What a file starting with ``start`` is when it is a torch checkpoint:
    a zip (``torch.save`` since torch 1.6, a pickle inside) or a bare pickle
    (the legacy format: protocol 2, the pickled magic number first)."""
    if start[:4] == b"PK\x03\x04":
        # the local file header: the name's length at 26, the name at 30
        member = start[30 : 30 + int.from_bytes(start[26:28], "little")]
        if member.endswith(b".pkl"):
            shown = member.decode(errors="replace")
            return f"a torch.save checkpoint (a zip archive holding the pickle {shown!r})"
        return "a zip archive (torch.save writes .pt and .bin checkpoints so, pickles inside)"
    if start[:1] == b"\x80" and start[1:2] in {b"\x02", b"\x03", b"\x04", b"\x05"}:
        return f"a Python pickle (protocol {start[1]}; torch.save's legacy .pt/.bin format)"
    return None


@set_module("kiln_np")
def save_weights(
    path: PathLike,
    tensors: Mapping[str, Any],
    *,
    format: str,
    metadata: Mapping[str, Any] | None = None,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
    dequantize: Dequantize = None,
    quantize: Quantize = None,
) -> list[str]:
    """Write named tensors as safetensors, GGUF or a Kiln payload directory.

    Every tensor is checked against what the format can hold before anything
    is written; data is streamed a bounded chunk at a time, bit for bit; the
    result appears whole or not at all (a file: a temporary sibling renamed
    into place; a directory: built beside ``path`` and renamed into place).
    Quantized GGML tensors are written as their blocks, or with ``dequantize``
    as their values; with ``quantize``, float tensors are quantized to GGML
    blocks (GGUF, kiln) byte for byte as ``kiln_np.gguf.quantize``.

    Parameters
    ----------
    path : str or os.PathLike
        The file, or for ``"kiln"`` and sharded safetensors the directory.  An
        existing directory is replaced only when it is empty or holds nothing
        but what a previous save of that kind wrote.
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
        In the order to write (safetensors groups them by alignment, widest
        first, keeping this order within a width).  A :class:`Weights` is such
        a mapping: pass one to convert a file.
    format : {"safetensors", "gguf", "kiln"}
    metadata : Mapping, optional
        safetensors: str to str (``{"format": "pt"}`` is what transformers
        expects).  GGUF: key/values (types from ``metadata.types`` when it has
        them, as a GGUF :class:`Weights` does).  kiln: any values
        :func:`~kiln_np._weights.metadata.encode_metadata` keeps, with their types.
    max_shard_size : int, optional
        safetensors: write a sharded checkpoint into the directory ``path``
        (``model-00001-of-0000N.safetensors`` ... and
        ``model.safetensors.index.json``); GGUF: splits.  Not for ``"kiln"``.
    progress : callable, optional
        Called with each number of payload bytes written.
    dequantize : {"f32", "bf16", "f16"}, optional
        Write each tensor of a decodable GGML block type (what
        ``kiln_np.gguf.dequantize`` decodes) as its values of this type: ggml's
        float32, rounded to nearest even for bf16 and f16, the element shape
        (GGUF: F32, BF16, F16 tensors).  Streamed: each tensor is decoded a
        chunk at a time into one reused buffer, its blocks read (never mapped)
        a chunk at a time.  Every other tensor keeps its bytes.  Without it,
        blocks are written as they are (GGUF, kiln), or are TYPE (safetensors
        cannot hold them) naming the tensor and this option.
    quantize : str or QuantizePolicy, optional
        GGUF and kiln only, not with ``dequantize``: the type each tensor is
        written as, by name (the grammar is :class:`~kiln_np.QuantizePolicy`'s:
        ``"q8_0"``; ``"q4_k,*.ffn_down.*=q6_k,*norm*=f32"``, the first matching
        glob wins, the bare type is the default).  A float tensor (f32, f16,
        bf16; f64 rounded to f32 to nearest even first, as llama.cpp's
        converters do) of two dims or more whose rows are a whole number of
        the type's blocks is quantized (``kiln_np.gguf.quantize``'s bytes),
        streamed a bounded run of blocks at a time through one reused buffer;
        a float type (f32, f16, bf16) stores a float tensor as that type
        (rounded to nearest even).  Every other tensor keeps its type (1-D
        ones, integer and bool ones, rows not whole blocks, GGML blocks):
        :func:`~kiln_np.formats.quantize_kept` lists them with the reason.

    Returns
    -------
    list of str
        The absolute paths written: ``[path]`` for a file or a directory (a
        Kiln payload directory, a sharded checkpoint), each split's for GGUF
        splits (``NAME-00001-of-00002.gguf``, ...).

    Raises
    ------
    KilnError
        TYPE for an unknown format, a tensor the format cannot hold (naming
        the tensor and its type), a bad name, metadata, ``dequantize`` or
        ``quantize`` (a malformed policy, safetensors, both options), a NaN or
        infinity in a tensor to quantize (naming it and the index; a NaN in
        one to store as another float type); SHAPE (GGUF: more
        than 4 dims, an empty tensor); LENGTH for a payload whose bytes are
        not its shape's.  Nothing is written then.
    OSError
        When the target cannot be written; ``FileExistsError`` for a
        directory holding other files.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> path = os.path.join(d, "m.safetensors")
    >>> written = kiln_np.save_weights(path, {"w": np.zeros(3, np.uint8)},
    ...                                format="safetensors", metadata={"format": "pt"})
    >>> written == [path], kiln_np.open_weights(path).metadata
    (True, mappingproxy({'format': 'pt'}))
    >>> import shutil; shutil.rmtree(d)
    """
    target = written_path(check_path(path))
    row = _writer(format)
    policy = _policy_for(row, quantize)
    assert row.save is not None  # _writer finds only rows that write
    config = plain_config(target, tensors, row.name, max_shard_size, dequantize)
    written = row.save(target, tensors, metadata, max_shard_size, progress, dequantize, policy)
    if config is not None:
        where, body = config
        with replacing(where) as (_, f):
            f.write(body)
    return written


PLAIN_CONFIG = "config.json"
"""The Hugging Face config that :func:`save_weights` writes beside (or, sharded,
inside) a safetensors checkpoint dequantized from a logical view that had one."""


def plain_config(
    target: str, tensors: object, format: str, shards: int | None, dequantize: object
) -> tuple[str, bytes] | None:
    """Where and what the plain checkpoint's ``config.json`` is when ``tensors``
    are saved to ``target`` in ``format`` (``shards``: ``max_shard_size``): the
    source's, without its ``quantization_config``, every other key kept; None
    unless a logical view with a config is dequantized to safetensors.  TYPE when
    it would replace the source's own config (``kiln_np.dask.convert`` writes
    it too).

    >>> plain_config("out.safetensors", {}, "safetensors", None, "bf16") is None
    True
    """
    if (
        dequantize is None
        or format != "safetensors"
        or not isinstance(tensors, Weights)
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


def _policy_for(row: WeightFormat, quantize: object) -> QuantizePolicy | None:
    """``quantize`` as a policy, refused (TYPE) for a format that holds no GGML blocks."""
    policy = as_policy(quantize)
    if policy is not None and not row.holds_blocks:
        raise KilnError(
            "TYPE",
            f"expected quantize only for a format that holds GGML blocks (gguf, kiln), "
            f"found quantize={str(policy)!r} for {row.name!r}",
        )
    return policy


def _writer(format: object) -> WeightFormat:
    row = next((f for f in FORMATS if f.save is not None and f.name == format), None)
    if row is None:
        raise KilnError(
            "TYPE",
            f"expected format 'safetensors', 'gguf' or 'kiln', found {show_value(format)}",
        )
    return row


def save_weights_paths(
    path: PathLike,
    tensors: Mapping[str, Any],
    *,
    format: str,
    max_shard_size: int | None = None,
    dequantize: Dequantize = None,
    quantize: Quantize = None,
) -> list[str]:
    """Every file :func:`save_weights` will write for these arguments, absolute
    (a symlink among them is written through), computed by the format's own naming
    (:attr:`WeightFormat.paths`); nothing is written.

    A GGUF's splits, a sharded checkpoint's shards and index, a Kiln directory's
    payload files and manifest.  ``kiln-np convert`` refuses to write when one of
    them is a file it reads.

    Raises
    ------
    KilnError
        As :func:`save_weights` does before writing: an unknown format, a tensor
        the format cannot hold (safetensors), a bad ``max_shard_size``,
        ``dequantize`` or ``quantize``.

    Examples
    --------
    >>> import numpy as np
    >>> tensors = {"a": np.zeros(8), "b": np.zeros(8)}  # 64 bytes each
    >>> paths = save_weights_paths("m.gguf", tensors, format="gguf", max_shard_size=64)
    >>> [os.path.basename(p) for p in paths]
    ['m-00001-of-00002.gguf', 'm-00002-of-00002.gguf']
    >>> [os.path.basename(p) for p in save_weights_paths("w", tensors, format="kiln")]
    ['0000_a.kiln', '0001_b.kiln', 'manifest.json']
    """
    row = _writer(format)
    policy = _policy_for(row, quantize)
    assert row.paths is not None  # every format kiln_np writes names its files
    target = written_path(check_path(path))
    paths = row.paths(target, tensors, max_shard_size, dequantize, policy)
    config = plain_config(target, tensors, row.name, max_shard_size, dequantize)
    return paths if config is None else [*paths, config[0]]


def check_blocks(
    tensors: Mapping[str, Any],
    *,
    format: str,
    dequantize: Dequantize = None,
    option: str = "dequantize",
) -> None:
    """Refuse, before anything is written, a tensor of GGML blocks that ``format``
    cannot hold, as ``save_weights(..., dequantize=dequantize)`` would write it:
    TYPE naming the tensor and ``option`` (``"--dequantize"`` for ``kiln-np
    convert``), which the error tells to pass, or why it cannot help (a type
    with no decoder).

    Raises
    ------
    KilnError
        TYPE as above, for an unknown format or another ``dequantize``.

    Examples
    --------
    >>> from kiln_np import Layout, Payload
    >>> q8 = {"w": Payload(0x4708, bytes(34), (1,), Layout("ggml.q8_0", 34))}
    >>> check_blocks(q8, format="safetensors", dequantize="f32")
    >>> try:
    ...     check_blocks(q8, format="safetensors", option="--dequantize")
    ... except KilnError as e:
    ...     print(e.message[:52], "...", e.message.split(": ")[2][:21])
    tensor 'w': safetensors cannot hold GGML Q8_0 blocks ... pass --dequantize f32
    """
    row = _writer(format)
    code = dequantize_code(dequantize, option)
    if row.holds_blocks or not isinstance(tensors, Mapping):
        return  # a non-mapping is the writer's TYPE
    for name, value in tensors.items():
        info = _description(value)
        if info is None or ggml_blocks(info) is None:
            continue
        if code is None or block_of(info.code, info.layout) is None:
            refused = blocks_refused(str(name), info, row.name, option)
            assert refused is not None  # ggml_blocks found blocks
            raise refused


def _description(value: object) -> PayloadInfo | None:
    """The description of a tensor that may hold GGML blocks (a weight tensor, a
    payload), None for another value or one the writer will refuse anyway."""
    if isinstance(value, WeightTensor):
        return value.info
    if isinstance(value, Payload):
        try:
            return payload_info(value.code, value.shape, value.layout)
        except KilnError:
            return None
    return None
