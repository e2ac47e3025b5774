"""A weight-file format as one row of data: :class:`WeightFormat`.

Each format adapter (``kiln_np.kilndir``, ``kiln_np.zarr``, ``kiln_np.safetensors``,
``kiln_np.gguf``, ``kiln_np.onnx``) exports its row as ``FORMAT``, beside its reader
and writer; ``kiln_np.formats.FORMATS`` is the tuple of them.  Everything that
walks the formats (``open_weights``, ``save_weights``, the conversion plan, the
command line's ``--to`` choices, suffixes and metadata carrying, ``kiln_np.dask``)
reads these rows, so a new format is one module and one line in that tuple.

Every door of a row has one signature:

- ``recognise(path, head, size)``: the path ``open`` takes when ``path`` is of
  this format, else None (``head``: a file's first 16 bytes, None for a directory);
- ``open(path, *, verify=False, storage_options=None)``: the :class:`Weights`;
- ``save(path, sources, *, metadata, source_format, max_shard_size, progress)``:
  write checked :class:`~kiln_np._convert.sources.TensorSource` items, return
  the paths written (the file, each split, or the directory);
- ``paths(path, sources, *, max_shard_size)``: every file ``save`` will write,
  absolute, after every check ``save`` makes of the tensors (nothing is written).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kiln_np._weights.weights import Weights

from .sources import Progress, TensorSource

__all__ = ["Open", "Paths", "Save", "Sharded", "WeightFormat", "all_text"]


class Open(Protocol):
    """``open(path, *, verify=False, storage_options=None)``."""

    def __call__(
        self, path: str, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
    ) -> Weights: ...


class Save(Protocol):
    """``save(path, sources, *, metadata, source_format, max_shard_size, progress)``."""

    def __call__(
        self,
        path: str,
        sources: Sequence[TensorSource],
        *,
        metadata: Mapping[str, Any] | None = None,
        source_format: str | None = None,
        max_shard_size: int | None = None,
        progress: Progress | None = None,
    ) -> list[str]: ...


class Paths(Protocol):
    """``paths(path, sources, *, max_shard_size)``."""

    def __call__(
        self, path: str, sources: Sequence[TensorSource], *, max_shard_size: int | None = None
    ) -> list[str]: ...


@dataclass(frozen=True)
class Sharded:
    """How a format writes a sharded output one shard at a time, each shard a task
    that may run in another process (``kiln_np.dask.convert``):

    ``plan(sources, max_shard_size, metadata)`` gives an object with ``shards``
    (each with ``name`` and ``tensors``, the names it holds) computed before any data
    is written; ``write(shard, sources_by_name, directory)`` writes one shard into
    the directory being built (as ``NAME.part`` renamed when whole) and returns its
    path; ``finish(plan, directory)`` writes what follows the shards (an index);
    ``owned(directory)`` is the set of files a previous save left there (None when
    the directory holds anything else), for ``building_directory``.
    """

    plan: Callable[[Sequence[TensorSource], int, Mapping[str, Any] | None], Any]
    write: Callable[[Any, Mapping[str, TensorSource], str], str]
    finish: Callable[[Any, str], None]
    owned: Callable[[str], set[str] | None]


def all_text(metadata: Mapping[str, Any]) -> bool:
    """Whether every metadata value is a str (what safetensors' ``__metadata__`` holds).

    >>> all_text({"format": "pt"}), all_text({"n": 1})
    (True, False)
    """
    return all(isinstance(v, str) for v in metadata.values())


@dataclass(frozen=True)
class WeightFormat:
    """One weight-file format: how it is recognised, opened and written, and what it holds.

    Attributes
    ----------
    name : str
        What :attr:`Weights.format` says and ``save_weights(format=...)`` takes.
    recognise, open, save, paths
        The doors (the module docstring); ``save`` and ``paths`` are None for a
        format kiln_np only reads.
    suffixes : tuple of str
        The suffixes that name the format in a path (``kiln-np convert`` writes it
        for a DST ending so; a directory holding one file of such a suffix opens
        as that file).  The first is the one to write.
    folder : bool
        Whether it is written as a directory (``kiln``, ``zarr``): a directory is
        never opened as a file of its suffix.
    folder_file : str or None
        For a format written as a file: its name inside a directory output (a
        checkpoint directory converted to a DST without a suffix: transformers'
        ``model.safetensors``); None where a directory output means nothing.
    holds_blocks : bool
        Whether it holds GGML blocks as they are; where it cannot, a quantized
        tensor is written only dequantized, and nothing is quantized.
    carries : callable
        ``carries(metadata)``: whether it can hold the metadata of another format
        (its own is always carried).
    reads_urls : bool
        Whether ``open`` reads a URL (``https://``, ``s3://``, ...).
    shards : bool
        Whether ``max_shard_size`` splits its output into several files.
    sharded : Sharded or None
        How a sharded output is written a shard per task, where it can be.
    hf_config : bool
        Whether a dequantized logical view with a Hugging Face ``config.json`` is
        written with the plain checkpoint's config beside it (the plan's extra).
    replaces : callable or None
        ``replaces(path)``: existing files beside ``path`` that writing it with
        ``max_shard_size`` may replace (a GGUF's splits), which ``kiln-np convert``
        refuses to replace without ``--force``.
    naming : str or None
        The names its tensors are written under when they are not the source's:
        ``"hf"``, transformers' (a GGUF's tensors pass through the model map,
        ``kiln_np._convert.hf``, and the checkpoint's ``config.json`` and
        ``generation_config.json`` are written beside them); None, the names
        as they are.
    listing_order : str
        The order ``kiln-np ls`` and ``kiln-np stats`` list its tensors in when
        ``--sort`` is not given (one of ``kiln_np._weights.summary.ORDERS``):
        ``"name"``, natural name order across shards, where the file's order
        is an accident of the writer; ``"file"`` where it is the producer's
        choice (GGUF: llama.cpp's order).
    """

    name: str
    recognise: Callable[[str, bytes | None, int], str | None]
    open: Open
    save: Save | None = None
    paths: Paths | None = None
    suffixes: tuple[str, ...] = ()
    folder: bool = False
    folder_file: str | None = None
    holds_blocks: bool = False
    carries: Callable[[Mapping[str, Any]], bool] = all_text
    reads_urls: bool = False
    shards: bool = False
    sharded: Sharded | None = None
    hf_config: bool = False
    replaces: Callable[[str], list[str]] | None = None
    naming: str | None = None
    listing_order: str = "name"
