"""The GGUF row of the format table (:data:`FORMAT`) and the public writer,
:func:`save_gguf`, which plans and executes a conversion into it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from kiln_np._convert.plan import plan_conversion
from kiln_np._convert.policy import QuantizePolicy
from kiln_np._convert.row import WeightFormat, all_text
from kiln_np._convert.sources import Dequantize
from kiln_np._core.checks import check_path, set_module, written_path
from kiln_np._weights.weights import Weights

from ._imatrix import with_imatrix_read
from ._reader import open_gguf
from ._types import MAGIC, split_siblings
from ._writer import gguf_paths, write_gguf

__all__ = ["FORMAT", "save_gguf"]


def _recognise(path: str, head: bytes | None, size: int) -> str | None:
    return path if head is not None and head[:4] == MAGIC else None


def _open(
    path: str, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    return open_gguf(path, storage_options)


def _carries(metadata: Mapping[str, Any]) -> bool:
    """GGUF holds typed key/values: metadata that says its types (a Kiln
    directory's of a GGUF), or text."""
    return getattr(metadata, "types", None) is not None or all_text(metadata)


FORMAT = WeightFormat(
    "gguf",
    _recognise,
    _open,
    write_gguf,
    gguf_paths,
    suffixes=(".gguf",),
    holds_blocks=True,
    carries=_carries,
    reads_urls=True,
    shards=True,
    replaces=split_siblings,
    listing_order="file",
)
"""GGUF: a file starting ``GGUF`` (the first file of a split opens the whole split),
local or behind a URL."""


@set_module("kiln_np.gguf")
def save_gguf(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    *,
    metadata_types: Mapping[str, str] | None = None,
    max_shard_size: int | str | None = None,
    progress: Callable[[int], None] | None = None,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
) -> list[str]:
    """Write tensors and metadata as a GGUF (version 3) file, or as splits.

    Everything is checked before a byte is written; the data is streamed
    (a weight-file tensor is copied from its file a chunk at a time).  Each
    file is written to a temporary sibling and renamed into place; with
    splits, each is closed before the next is opened (one descriptor however
    many splits), none is renamed until all are written, and the first is
    renamed last, so a reader never finds a first split whose others are
    missing.  Every split holds the same random ``kiln_np.split.set_id``: a
    crash between the renames leaves a mix that reading refuses.

    Parameters
    ----------
    path : str or os.PathLike
        The file; with splits, ``NAME.gguf`` becomes ``NAME-00001-of-000NN.gguf``...
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
        In the order to write.  Kiln f32, f16, bf16, f64, i8, i16, i32, i64,
        and GGML blocks (code ``0x4700 + type id`` with its ``ggml.*`` layout).
        A scalar (shape ``()``) of a plain type is written with ``n_dims`` 0
        and reads back as a scalar (llama.cpp sees a 1-element tensor).
    metadata : Mapping[str, Any], optional
        Key/values, written in order.  Values say their type (see the module
        docstring); a Python ``int`` is int32 (int64 or uint64 when it needs
        them), a Python ``float`` float32 when float32 holds it exactly.
        ``split.*`` keys are dropped: splits get their own.
    metadata_types : Mapping[str, str], optional
        Types by key, overriding what values say; a :class:`GGUFMetadata`
        passed as ``metadata`` brings its own :attr:`~GGUFMetadata.types`.
    max_shard_size : int or str, optional
        Start a new split before a tensor that would take a split's data past
        this many bytes (gguf-split's ``--split-max-size``).  When everything
        fits in one split, ``path`` itself is written.
    progress : callable, optional
        Called with each number of payload bytes written.
    dequantize : {"f32", "bf16", "f16"}, optional
        Write each tensor of a decodable GGML block type as F32, BF16 or F16
        values, decoded a chunk at a time (``kiln_np.gguf.dequantize``'s bits);
        without it, blocks are copied as they are.
    quantize : str or kiln_np.QuantizePolicy, optional
        Quantize float tensors to GGML blocks (or store them as another float
        type) by name, as the policy says (``"q8_0"``, ``"q4_k,*norm*=f32"``:
        see ``kiln_np.save_weights``), a bounded run of blocks at a time, byte
        for byte as :func:`quantize`; not with ``dequantize``.  A policy's
        importance matrix given as a path is read here (:func:`read_imatrix`).

    Returns
    -------
    list of str
        The files written.

    Raises
    ------
    KilnError
        TYPE for a tensor type GGUF cannot hold (naming the tensor and its
        type), a name longer than 63 bytes, a metadata value of no GGUF type;
        a NaN or infinity in a tensor to quantize (naming it and the index:
        raised while the file is a temporary, nothing is left);
        SHAPE for more than 4 dims, an empty tensor or a one-block scalar;
        LENGTH for a Payload whose bytes are not its shape's.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import read_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = save_gguf(p, {"w": np.ones((2, 3), np.float32)}, {"n": np.uint32(7)})
    ...     g = read_gguf(p)
    ...     print(g.tensors[0].dims, g.metadata["n"], g.metadata.types["n"])
    (3, 2) 7 uint32
    """
    target = written_path(check_path(path))
    plan = plan_conversion(
        tensors, target, FORMAT, max_shard_size=max_shard_size, dequantize=dequantize,
        quantize=with_imatrix_read(quantize), names="raw",  # the tensors as given
    )  # fmt: skip
    return write_gguf(
        target,
        plan.sources,
        metadata=metadata,
        max_shard_size=plan.max_shard_size,
        progress=progress,
        metadata_types=metadata_types,
    )
