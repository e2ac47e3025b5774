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

import os
from collections.abc import Mapping
from typing import Any

from kiln_np._convert.plan import Plan, Spelling, execute, plan_conversion
from kiln_np._convert.policy import QuantizePolicy
from kiln_np._convert.row import WeightFormat
from kiln_np._convert.sources import Dequantize, KeptTensor, Progress, quantize_kept
from kiln_np._core.checks import check_path, set_module, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular_raw
from kiln_np._weights.remote import is_url
from kiln_np._weights.unknown import HEAD, START, one_weight_file, unrecognised
from kiln_np._weights.weights import Weights
from kiln_np.gguf._format import FORMAT as GGUF
from kiln_np.gguf._types import later_split
from kiln_np.kilndir import FORMAT as KILN
from kiln_np.kilndir import MANIFEST
from kiln_np.onnx._weights import FORMAT as ONNX
from kiln_np.safetensors._format import FORMAT as SAFETENSORS
from kiln_np.safetensors._format import indexes
from kiln_np.safetensors._types import INDEX_SUFFIX
from kiln_np.zarr._group import FORMAT as ZARR

__all__ = [
    "FORMATS",
    "KeptTensor",
    "Quantize",
    "WeightFormat",
    "open_weights",
    "plan_weights",
    "quantize_kept",
    "save_weights",
    "save_weights_paths",
    "writer",
]

PathLike = str | os.PathLike[str]
Quantize = QuantizePolicy | str | None
"""A ``quantize=`` argument: a policy, its string, or None."""

FORMATS: tuple[WeightFormat, ...] = (KILN, ZARR, SAFETENSORS, GGUF, ONNX)
"""Every weight-file format, in the order :func:`open_weights` tries them: each row
is its adapter's ``FORMAT`` (``kiln_np._convert.row.WeightFormat``)."""


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
        row = next(r for r in FORMATS if r.reads_urls)
        return row.open(str(path), storage_options=storage_options)
    name = os.path.realpath(check_path(path))
    if os.path.isdir(name):
        for row in FORMATS:
            target = row.recognise(name, None, 0)
            if target is not None:
                return row.open(target, verify=verify)
        suffixes = tuple(s for r in FORMATS if not r.folder for s in r.suffixes)
        expected = f"{MANIFEST} (a Kiln payload directory), one *{INDEX_SUFFIX} (a sharded "
        expected += "safetensors checkpoint)"
        name = one_weight_file(name, suffixes, later_split, expected, indexes(name))
    with open_regular_raw(name) as f:
        size = os.fstat(f.fileno()).st_size
        start = f.read(START)
    for row in FORMATS:
        target = row.recognise(name, start[:HEAD], size)
        if target is not None:
            return row.open(target, verify=verify)
    raise unrecognised(name, start, size)


def writer(format: object) -> WeightFormat:
    """The row of the format ``format`` names, one kiln_np writes; TYPE otherwise.

    >>> writer("gguf").suffixes
    ('.gguf',)
    """
    row = next((f for f in FORMATS if f.save is not None and f.name == format), None)
    if row is None:
        names = [f.name for f in FORMATS if f.save is not None]
        spelled = ", ".join(repr(n) for n in names[:-1]) + f" or {names[-1]!r}"
        raise KilnError("TYPE", f"expected format {spelled}, found {show_value(format)}")
    return row


def plan_weights(
    path: PathLike,
    tensors: Mapping[str, Any],
    *,
    format: str,
    metadata: Mapping[str, Any] | None = None,
    max_shard_size: int | None = None,
    dequantize: Dequantize = None,
    quantize: Quantize = None,
    spelling: Spelling | None = None,
    distributed: bool = False,
) -> Plan:
    """The plan of ``save_weights`` with these arguments
    (:func:`kiln_np._convert.plan.plan_conversion`): every tensor's action, the
    output paths, every refusal; nothing is written.

    >>> import numpy as np
    >>> plan = plan_weights("m.gguf", {"w": np.ones((4, 32), "<f4")}, format="gguf",
    ...                     quantize="q8_0")
    >>> [(s.action, s.source_type, s.target_type, s.target_bytes) for s in plan.steps]
    [('quantize', 'f32', 'ggml.q8_0', 136)]
    """
    row = writer(format)
    target = written_path(check_path(path))
    options: dict[str, Any] = {} if spelling is None else {"spelling": spelling}
    return plan_conversion(
        tensors,
        target,
        row,
        metadata=metadata,
        max_shard_size=max_shard_size,
        dequantize=dequantize,
        quantize=quantize,
        distributed=distributed,
        **options,
    )


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
    plan = plan_weights(
        path,
        tensors,
        format=format,
        metadata=metadata,
        max_shard_size=max_shard_size,
        dequantize=dequantize,
        quantize=quantize,
    )
    return execute(plan, progress=progress)


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
    plan = plan_weights(
        path,
        tensors,
        format=format,
        max_shard_size=max_shard_size,
        dequantize=dequantize,
        quantize=quantize,
    )
    return plan.outputs
