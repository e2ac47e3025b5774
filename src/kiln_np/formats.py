"""Weight-file formats: one table of them, :data:`FORMATS` (each row its adapter's
``FORMAT``), and the doors built on it: :func:`open_weights` (a file or directory
recognised from its content, as a lazy :class:`~kiln_np.Weights`),
:func:`save_weights` (a conversion planned, then executed) and :func:`plan_weights`
(the plan alone).  No adapter imports this module: the table names them all.

The rows are tried in order, the first that fits opens it:

1. ``kiln``: a directory holding ``manifest.json``, or that file;
2. ``zarr``: a directory holding a Zarr v3 group's ``zarr.json``, or that file;
3. ``safetensors``: a directory holding one ``*.safetensors.index.json``, such an
   index, or a file whose first 8 bytes are a little-endian size of at most 100 MB
   and at most the rest of the file, followed by ``{``;
4. ``gguf``: a file starting with ``GGUF`` (the first split opens them all);
5. ``onnx``: a file that parses as a binary ``ModelProto``; protobuf has no magic,
   so this comes last, only for a first byte ``0x08`` (``ir_version``'s tag);
6. ``hf``: nothing: it writes a Hugging Face directory from a GGUF (the model map,
   ``kiln_np._convert.hf``), which opens as safetensors.

A directory no row takes (a Hugging Face model folder) opens as the one weight file
it holds (a suffix of a row that is a file; a GGUF split set counts once); several
are TYPE naming them.  A torch pickle is TYPE saying so (kiln_np never unpickles);
anything else is TYPE showing the first bytes.  Only the order of safetensors and
ONNX matters for a file, and of ``kiln`` and a checkpoint for a directory.  A URL
goes to the rows that read URLs (safetensors and GGUF: ``kiln_np._convert.urls``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kiln_np._convert.plan import Plan, execute, plan_conversion
from kiln_np._convert.policy import QuantizePolicy
from kiln_np._convert.row import WeightFormat
from kiln_np._convert.sources import Dequantize, KeptTensor, Progress, quantize_kept
from kiln_np._convert.urls import open_url
from kiln_np._core.checks import check_path, set_module, show_value, written_path
from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular_raw
from kiln_np._weights.remote import is_url
from kiln_np._weights.unknown import HEAD, START, one_weight_file, unrecognised
from kiln_np._weights.weights import Weights
from kiln_np.gguf._format import FORMAT as GGUF
from kiln_np.gguf._imatrix import with_imatrix_read
from kiln_np.gguf._types import later_split
from kiln_np.kilndir import FORMAT as KILN
from kiln_np.kilndir import MANIFEST
from kiln_np.onnx._weights import FORMAT as ONNX
from kiln_np.safetensors._format import FORMAT as SAFETENSORS
from kiln_np.safetensors._format import HF, indexes
from kiln_np.safetensors._types import INDEX_SUFFIX
from kiln_np.zarr._group import FORMAT as ZARR

__all__ = [
    "FORMATS",
    "KeptTensor",
    "WeightFormat",
    "open_weights",
    "plan_weights",
    "quantize_kept",
    "save_weights",
    "save_weights_paths",
]

PathLike = str | os.PathLike[str]

FORMATS: tuple[WeightFormat, ...] = (KILN, ZARR, SAFETENSORS, GGUF, ONNX, HF)
"""Every weight-file format (each its adapter's ``FORMAT``), in the order tried."""


@set_module("kiln_np")
def open_weights(
    path: PathLike, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    """Open a weight file (or directory), recognised from its content.

    Parameters
    ----------
    path : str or os.PathLike
        A file or directory of a format of :data:`FORMATS` (the module docstring
        gives the order they are tried in), or a directory holding one weight
        file.  A URL (``https://``, ``s3://``, ``simplecache::https://``, ...:
        safetensors and GGUF) is read with range requests (docs/big-files.md).
    storage_options : mapping, optional
        For a URL: the options of its fsspec file system, and the deadline
        of each request (``kiln_np_deadline``, ``kiln_np_min_rate``: read by
        kiln_np, docs/big-files.md).
    verify : bool
        For a Kiln payload directory, also check every payload file's SHA-256
        against the manifest (this reads every byte; sizes are always checked).

    Returns
    -------
    Weights
        Only headers are read: tensors are mapped when their payloads are asked.

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
        rows, index = [r for r in FORMATS if r.reads_urls], (INDEX_SUFFIX, SAFETENSORS)
        return open_url(str(path), storage_options, rows, index=index, later_split=later_split)
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


def _writer(format: object) -> WeightFormat:
    """The row of a format kiln_np writes, by name; TYPE otherwise."""
    for row in (f for f in FORMATS if f.save is not None):
        if row.name == format:
            return row
    names = [repr(f.name) for f in FORMATS if f.save is not None]
    spelled = f"{', '.join(names[:-1])} or {names[-1]}"
    raise KilnError("TYPE", f"expected format {spelled}, found {show_value(format)}")


def plan_weights(
    path: PathLike, tensors: Mapping[str, Any], *, format: str, **options: Any
) -> Plan:
    """The plan of ``save_weights`` with these arguments: ``plan_conversion`` of
    ``tensors`` to ``path`` in ``format`` (``options``: ``metadata``,
    ``max_shard_size``, ``dequantize``, ``quantize``, ``tokenizer``, the command line's
    ``spelling``, ``distributed``, ``force``, ``folder``): every tensor's action,
    the output paths, every refusal; nothing is written but a ``quantize``
    policy's importance matrix given by path is read.

    >>> import numpy as np
    >>> plan = plan_weights("m.gguf", {"blk.0.ffn_up.weight": np.ones((4, 32), "<f4")},
    ...                     format="gguf", quantize="q8_0")
    >>> [(s.action, s.source_type, s.target_type, s.target_bytes) for s in plan.steps]
    [('quantize', 'f32', 'ggml.q8_0', 136)]
    """
    if "quantize" in options:  # an importance matrix given by path is read here
        options["quantize"] = with_imatrix_read(options["quantize"])
    return plan_conversion(tensors, written_path(check_path(path)), _writer(format), **options)


@set_module("kiln_np")
def save_weights(
    path: PathLike,
    tensors: Mapping[str, Any],
    *,
    format: str,
    metadata: Mapping[str, Any] | None = None,
    max_shard_size: int | str | None = None,
    progress: Progress | None = None,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
    tokenizer: bool = True,
    names: str = "map",
    outtype: str | None = None,
) -> list[str]:
    """Write named tensors as safetensors, GGUF, a Kiln payload directory, a Zarr v3
    group, or a GGUF's as its Hugging Face directory (``"hf"``): the conversion
    :func:`plan_weights` plans, executed.

    Every tensor is checked against what the format can hold before anything is
    written; data is streamed a bounded chunk at a time, bit for bit; the result
    appears whole or not at all (a temporary sibling, or a directory built beside
    ``path``, renamed into place).  docs/weights.md tells each option at length.

    Parameters
    ----------
    path : str or os.PathLike
        The file, or for ``"kiln"``, ``"zarr"`` and sharded safetensors the
        directory (an existing one is replaced only when empty or holding only
        what a previous save of that kind wrote).
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
        In the order to write (safetensors: widest element first, this order
        within a width).  A :class:`Weights` is such a mapping: pass one to
        convert a file.
    format : {"safetensors", "gguf", "kiln", "zarr", "hf"}
        ``"hf"``: a GGUF of a model map architecture (llama, qwen2, qwen3, qwen3moe, gemma3,
        phi3, mixtral, gemma2, qwen2moe; its ``metadata``, a :class:`Weights`' own when None)
        as transformers' directory ``path``: tensors, configs, tokenizer files (docs/weights.md).
    metadata : Mapping, optional
        safetensors: str to str (``{"format": "pt"}``).  GGUF: key/values
        (types from ``metadata.types`` when it has them).  kiln, zarr: any
        values :func:`~kiln_np._weights.metadata.encode_metadata` keeps.
    max_shard_size : int or str, optional
        Bytes of data per shard (``"5GB"``, ``"2GiB"``: the command line's
        sizes): safetensors: shards and ``model.safetensors.index.json`` in the
        directory ``path``; GGUF: splits.  Not for ``"kiln"`` or ``"zarr"``.
    progress : callable, optional
        Called with each number of payload bytes written.
    dequantize : {"f32", "bf16", "f16"}, optional
        Write GGML blocks and a logical view's scheme weights as their values of
        this type (ggml's float32, rounded to nearest even), streamed; without
        it, blocks are written as they are, or are TYPE where the format cannot
        hold them, naming the tensor and this option.
    quantize : str or QuantizePolicy, optional
        GGUF, kiln and zarr, not with ``dequantize``: the type each tensor is
        written as, by name (:class:`~kiln_np.QuantizePolicy`'s grammar:
        ``"q4_k,*.ffn_down.*=q6_k,*norm*=f32"``), ``kiln_np.gguf.quantize``'s
        bytes; each tensor that keeps its type (1-D, integer, rows not whole
        blocks, GGML blocks) is listed with the reason by
        :func:`~kiln_np.formats.quantize_kept` and the plan.  A policy's
        ``imatrix=`` path is read here (:func:`kiln_np.gguf.read_imatrix`).
    tokenizer : bool, default True
        ``"hf"``: write the tokenizer's files (TYPE for one not covered); False: none.
    names, outtype
        A Hugging Face checkpoint directory to GGUF as llama.cpp's converter
        writes it, or by its own names (docs/weights.md).

    Returns
    -------
    list of str
        The absolute paths written: ``[path]`` for a file or a directory (a
        Kiln payload directory, a sharded checkpoint), each split's for GGUF
        splits (``NAME-00001-of-00002.gguf``, ...).

    Raises
    ------
    KilnError
        TYPE for an unknown format, a tensor the format cannot hold (naming it
        and its type), a bad name, metadata or option (``OptionsError``), a NaN
        or infinity to quantize (naming the tensor and index); SHAPE (GGUF: over
        4 dims, an empty tensor); LENGTH for a payload whose bytes are not its
        shape's.  Nothing is written then.
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
    given: dict[str, Any] = {"metadata": metadata, "max_shard_size": max_shard_size}
    given |= {"dequantize": dequantize, "quantize": quantize, "names": names, "outtype": outtype}
    given["tokenizer"] = tokenizer
    return execute(plan_weights(path, tensors, format=format, **given), progress=progress)


def save_weights_paths(
    path: PathLike, tensors: Mapping[str, Any], *, format: str, **options: Any
) -> list[str]:
    """Every file :func:`save_weights` writes with these arguments (``options``:
    ``max_shard_size``, ``dequantize``, ``quantize``), absolute, after every
    refusal: ``plan_weights(...).outputs``; nothing is written.

    >>> import numpy as np
    >>> tensors = {"a": np.zeros(8), "b": np.zeros(8)}  # 64 bytes each
    >>> paths = save_weights_paths("m.gguf", tensors, format="gguf", max_shard_size=64)
    >>> [os.path.basename(p) for p in paths]
    ['m-00001-of-00002.gguf', 'm-00002-of-00002.gguf']
    >>> [os.path.basename(p) for p in save_weights_paths("w", tensors, format="kiln")]
    ['0000_a.kiln', '0001_b.kiln', 'manifest.json']
    """
    return plan_weights(path, tensors, format=format, **options).outputs
