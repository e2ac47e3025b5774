"""The safetensors row of the format table (:data:`FORMAT`) and the public writer,
:func:`save_safetensors`, which plans and executes a conversion into it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kiln_np._convert.plan import save_as
from kiln_np._convert.row import Sharded, WeightFormat
from kiln_np._convert.sources import Dequantize, Progress
from kiln_np._core.checks import set_module
from kiln_np._weights.weights import Weights

from ._reader import looks_like_safetensors, open_safetensors
from ._types import INDEX_SUFFIX
from ._writer import (
    checkpoint_files,
    safetensors_paths,
    shard_plan,
    write_index,
    write_safetensors,
    write_shard,
)

__all__ = ["FORMAT", "HF", "save_safetensors"]


def indexes(directory: str) -> list[str]:
    """The sharded checkpoints' indexes in ``directory``, sorted.

    >>> import tempfile
    >>> indexes(tempfile.mkdtemp())
    []
    """
    return sorted(f for f in os.listdir(directory) if f.endswith(INDEX_SUFFIX))


def _recognise(path: str, head: bytes | None, size: int) -> str | None:
    if head is None:
        found = indexes(path)
        return os.path.join(path, found[0]) if len(found) == 1 else None
    if path.endswith(INDEX_SUFFIX) and head.lstrip()[:1] == b"{":
        return path
    return path if looks_like_safetensors(head, size) else None


def _open(
    path: str, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    return open_safetensors(path, storage_options)


def _plan_shards(sources: Any, max_shard_size: int, metadata: Mapping[str, Any] | None) -> Any:
    return shard_plan(sources, max_shard_size, metadata=metadata)


FORMAT = WeightFormat(
    "safetensors",
    _recognise,
    _open,
    write_safetensors,
    safetensors_paths,
    suffixes=(".safetensors",),
    folder_file="model.safetensors",
    reads_urls=True,
    shards=True,
    sharded=Sharded(_plan_shards, write_shard, write_index, checkpoint_files),
    hf_config=True,
)
"""safetensors: a directory holding one ``*.safetensors.index.json``, such an index,
or a file whose first 8 bytes are a header size of at most 100 MB followed by ``{``."""


def _never(path: str, head: bytes | None, size: int) -> str | None:
    """A Hugging Face checkpoint directory opens as safetensors (its row comes first)."""
    return None


HF = WeightFormat(
    "hf",
    _never,
    _open,
    write_safetensors,
    safetensors_paths,
    folder=True,
    folder_file="model.safetensors",
    shards=True,
    naming="hf",
)
"""hf: a directory transformers' ``from_pretrained`` loads, written from a GGUF
through the model map (``config.json``, ``generation_config.json``, one
``model.safetensors`` or shards and their index); it opens as safetensors."""


@set_module("kiln_np.safetensors")
def save_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    metadata: Mapping[str, str] | None = None,
    max_shard_size: int | str | None = None,
    progress: Progress | None = None,
    dequantize: Dequantize = None,
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
    max_shard_size : int or str, optional
        Start a new shard before a tensor that would take a shard's data past
        this many bytes; a larger tensor gets a shard of its own.
    progress : callable, optional
        Called with each number of payload bytes written.
    dequantize : {"f32", "bf16", "f16"}, optional
        Write each tensor of a decodable GGML block type as its values of this
        type, decoded a chunk at a time (``kiln_np.gguf.dequantize``'s bits);
        every other tensor keeps its bytes.

    Raises
    ------
    KilnError
        TYPE for a tensor safetensors cannot hold (i4, u4, an odd-count e2m1,
        an opaque code other than the foreign types, GGML blocks without
        ``dequantize``; naming the tensor), a
        name that is ``__metadata__`` or not UTF-8, metadata that is not str
        to str, a header past 100 MB; LENGTH for a payload whose bytes are not
        its shape's.

    Examples
    --------
    >>> import os, tempfile, numpy as np, ml_dtypes
    >>> from kiln_np.safetensors import open_safetensors
    >>> d = tempfile.mkdtemp()
    >>> fp4 = np.array([0.5, -6.0], ml_dtypes.float4_e2m1fn)
    >>> save_safetensors(d + "/f4.safetensors", {"q": fp4}, metadata={"format": "pt"})
    >>> with open_safetensors(d + "/f4.safetensors") as w:
    ...     print(w["q"].format_dtype, bytes(w["q"].payload().data).hex())
    F4 f1
    >>> import shutil; shutil.rmtree(d)
    """
    save_as(
        FORMAT, path, tensors, metadata=metadata, max_shard_size=max_shard_size,
        progress=progress, dequantize=dequantize,
    )  # fmt: skip
