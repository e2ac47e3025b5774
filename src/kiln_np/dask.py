"""Kiln payloads and checkpoints on dask (optional extra: ``pip install 'kiln-np[dask]'``).

:func:`from_payload` turns a payload file (or one tensor of a weight file) into
a :class:`dask.array.Array` whose chunks are read and decoded lazily by
whichever scheduler runs the graph (threads, processes, a ``dask.distributed``
cluster); :func:`from_weights` does so for every tensor of a checkpoint,
quantized ones as their values; :func:`to_payload` writes a dask array's
chunks in parallel, each to its own byte range of one file.

:func:`convert` writes a sharded safetensors checkpoint with one task per
output shard, byte-identical to :func:`kiln_np.save_weights` (it executes the
same conversion plan, :func:`run_plan`, each shard as the format's row writes
it); :func:`describe` computes
the statistics of every tensor with one task per tensor, equal to
:func:`kiln_np.describe`.  Without a client both run on dask's local threaded
scheduler.

Workers open files by path, so with a distributed cluster every path (the
sources, and for :func:`convert` the destination's directory) must name the
same file on every worker (a local cluster or a shared file system).

``import kiln_np`` never imports dask; ``import kiln_np.dask`` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pickle
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

try:
    import dask.array as da
    import dask.threaded
    from dask.array.core import normalize_chunks
    from dask.base import tokenize
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "kiln_np.dask needs dask: install the extra with pip install 'kiln-np[dask]'"
    ) from exc

from ._codec import from_numpy
from ._convert.plan import Plan, remove_stale, sharded_writer
from ._convert.row import Sharded
from ._convert.sources import Dequantize, tensor_sources
from ._core.checks import U8, check_offset, check_path, set_module, show_value, written_path
from ._core.errors import KilnError
from ._core.payload import PayloadInfo, payload_info
from ._core.table import CodeLike, Layout, ShapeLike, code_label, row_for_dtype
from ._explore.weight_stats import TensorStats, WeightStats, tensor_stats
from ._files.chunks import decode_span
from ._files.io import TEMP_SUFFIX, building_directory, replacing, write_all
from ._files.payload import LazyPayload
from ._quants.elements import element_of
from ._weights.logical import LogicalTensor
from ._weights.summary import ordered
from ._weights.tensors import WeightTensor
from ._weights.weights import Weights
from .formats import open_weights, plan_weights

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["convert", "describe", "from_payload", "from_weights", "run_plan", "to_payload"]


@set_module("kiln_np.dask")
def from_payload(
    path: str | os.PathLike[str] | WeightTensor,
    code: CodeLike | None = None,
    shape: ShapeLike | None = None,
    *,
    offset: int = 0,
    layout: Layout | None = None,
    exact: bool = False,
    chunks: Any = "auto",
) -> da.Array:
    """A dask array over a payload file, each chunk read and decoded when computed.

    Parameters
    ----------
    path : str, os.PathLike or WeightTensor
        The file; it must hold ``byte_length(code, shape, layout)`` bytes at
        ``offset`` (checked now, LENGTH otherwise).  Or a tensor of a weight
        file (:class:`~kiln_np.WeightTensor`, :class:`~kiln_np.LogicalTensor`),
        alone: its own description says the rest, and the array is
        :func:`from_weights`' (its values, as ``tensor.numpy()``).
    code : int or str
        The dtype code: 1-19, or 4096-32767 with ``layout``; or a closed
        code's name.
    shape : sequence of int
        Element shape (block shape for opaque codes).
    offset : int
        Byte position of the payload in the file.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.
    exact : bool
        The payload ends the file: bytes after it are LENGTH (as
        :func:`kiln_np.open_payload`).
    chunks : dask chunks spec
        Anything :func:`dask.array.from_array` takes.  The default, ``"auto"``
        along axis 0 and whole trailing axes, makes every chunk one
        contiguous byte range; splitting a trailing axis works but each chunk
        then reads its whole rows.

    Returns
    -------
    dask.array.Array
        Of the dtype and shape :func:`kiln_np.to_numpy` would give.  A bad
        bool byte or padding nibble is TYPE when its chunk is computed.

    Raises
    ------
    KilnError
        TYPE, SHAPE, LENGTH as :func:`kiln_np.open_payload`; SHAPE for
        ``chunks`` dask cannot apply to the shape (``0``, sizes that do not
        add up to it, ...); TYPE for a path without ``code`` and ``shape``,
        or a tensor with any of them, ``offset``, ``layout`` or ``exact``.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "u8.bin")
    ...     np.arange(10, dtype=np.uint8).tofile(path)
    ...     x = from_payload(path, 9, (10,), chunks=4)
    ...     x.chunks, int(x.sum().compute())
    (((4, 4, 2),), 45)
    """
    if isinstance(path, WeightTensor):
        given = {"code": code, "shape": shape, "layout": layout}
        named = [k for k, v in given.items() if v is not None]
        named += ["offset"] * (offset != 0) + ["exact"] * (exact is not False)
        if named:
            raise KilnError(
                "TYPE",
                f"tensor {path.name!r}: expected a WeightTensor alone (its description is its "
                f"own), found {', '.join(named)} given too",
            )
        return _tensor_array(path, chunks)
    if code is None or shape is None:
        missing = " and ".join(n for n, v in (("code", code), ("shape", shape)) if v is None)
        raise KilnError(
            "TYPE",
            f"expected a payload file's code and shape (or a WeightTensor in place of the "
            f"path), found no {missing}",
        )
    lazy = LazyPayload(path, code, shape, offset=offset, layout=layout, exact=exact)
    sizes = _chunk_sizes(chunks, lazy.shape, lazy.dtype, 1, lazy.info.context, lazy.info)
    stat = os.stat(lazy.path)
    # The name changes with the file's size and mtime, so an edited file is
    # never served from a stale cache of an older graph.
    token = tokenize(
        lazy.path,
        stat.st_size,
        stat.st_mtime_ns,
        int(lazy.code),
        lazy.shape,
        lazy.offset,
        lazy.layout,
        sizes,
    )
    meta = np.empty((0,) * lazy.ndim, lazy.dtype)
    array = da.from_array(  # type: ignore[no-untyped-call]
        lazy, chunks=sizes, name=f"kiln-payload-{token}", lock=False, asarray=False, meta=meta
    )
    return cast("da.Array", array)


def _chunk_sizes(
    chunks: Any,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    unit: int,
    context: str,
    info: PayloadInfo,
) -> tuple[tuple[int, ...], ...]:
    """``chunks`` as dask's sizes for ``shape``; ``"auto"``: along axis 0 only,
    rows a multiple of ``unit`` (a block's rows), whole trailing axes.  SHAPE
    (after ``context``, with ``info``'s code and shape) for chunks dask cannot
    use."""
    auto = isinstance(chunks, str) and chunks == "auto" and bool(shape)
    if auto:
        chunks = ("auto",) + (-1,) * (len(shape) - 1)
    try:
        sizes: tuple[tuple[int, ...], ...] = normalize_chunks(chunks, shape, dtype=dtype)  # type: ignore[no-untyped-call]
    except Exception as exc:  # dask raises ValueError, TypeError, ZeroDivisionError, ...
        why = str(exc).split("\n", 1)[0][:100]
        raise KilnError(
            "SHAPE",
            f"{context}expected dask chunks for the decoded shape {shape}, "
            f"found {show_value(chunks)}: dask cannot use them ({type(exc).__name__}: {why})",
            code=info.code,
            shape=info.shape,
        ) from exc
    if auto and unit > 1 and len(sizes[0]) > 1:  # one chunk of the whole axis stays
        step = max(unit, sizes[0][0] // unit * unit)
        rows = (step,) * (shape[0] // step) + ((shape[0] % step,) if shape[0] % step else ())
        sizes = (rows, *sizes[1:])
    return sizes


class _BlockWriter:
    """A ``da.store`` target: ``writer[rows, ...] = block`` encodes the block and
    writes it at its byte range of the (pre-sized) file; picklable by value."""

    def __init__(self, path: str, info: PayloadInfo) -> None:
        self.path = path
        self.info = info

    def __setitem__(self, key: tuple[slice, ...], block: np.ndarray) -> None:
        info = self.info
        first_row = int(key[0].start or 0) if key else 0
        # The rows before this block, described: their byte length is where it starts.
        before = payload_info(info.code, (first_row, *info.shape[1:]), decodable=False)
        try:
            payload = from_numpy(block, code=info.code)
        except KilnError as err:
            raise err.shifted(before.count, f"in the dask chunk from row {first_row}") from None
        # to_payload puts 4-bit chunk starts on even elements: whole bytes.
        with open(self.path, "r+b") as f:
            f.seek(info.offset + before.byte_length)
            write_all(f, np.frombuffer(payload.data, np.uint8))


def _even_rows(chunks: tuple[int, ...]) -> tuple[int, ...]:
    """Move each interior chunk boundary down to an even row (dropping empties)."""
    bounds = np.cumsum(chunks)
    inner = bounds[:-1] - bounds[:-1] % 2
    edges = np.unique(np.concatenate(([0], inner, bounds[-1:])))
    return tuple(int(n) for n in np.diff(edges))


@set_module("kiln_np.dask")
def to_payload(darray: da.Array, path: str | os.PathLike[str], *, offset: int = 0) -> PayloadInfo:
    """Compute a dask array and write it as one payload file, chunks in parallel.

    Each chunk is encoded by the worker that computes it and written to its
    own byte range of a temporary sibling of ``path`` (as
    :func:`kiln_np.save_payload` names it), which is renamed over ``path``
    once every chunk is written (on failure it is removed and ``path`` is
    untouched; a symlink is written through and permission bits kept, as
    ``save_payload`` does).  Trailing axes are rechunked whole, so each
    chunk is one contiguous byte range; for 4-bit codes with an odd row size
    the axis-0 chunk boundaries move down to even rows, so no two chunks
    share a byte.

    Parameters
    ----------
    darray : dask.array.Array
        Of a dtype with a Kiln code (closed codes only) and known chunk sizes.
    path : str or os.PathLike
        The file to write.  With ``offset > 0`` the first ``offset`` bytes of
        the existing file are kept in front of the payload.
    offset : int
        Byte position of the payload in the file.

    Returns
    -------
    PayloadInfo
        The written payload's description, with its ``offset``.

    Raises
    ------
    KilnError
        TYPE for a dtype with no Kiln code, a bad bool byte or 4-bit value
        (the index is the element's in the whole payload); SHAPE for unknown
        (NaN) chunk sizes.

    Examples
    --------
    >>> import os, tempfile, dask.array as da
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "i16.bin")
    ...     print(to_payload(da.arange(6, dtype="<i2", chunks=4), path))
    ...     print(Path(path).read_bytes().hex(" "))
    PayloadInfo(code=<Code.I16: 10>, shape=(6,), layout=None, offset=0, byte_length=12)
    00 00 01 00 02 00 03 00 04 00 05 00
    """
    name = check_path(path)
    off = check_offset(offset)
    row = row_for_dtype(darray.dtype)
    if any(np.isnan(n) for axis in darray.chunks for n in axis):
        raise KilnError(
            "SHAPE",
            f"{code_label(int(row.code))}: expected known chunk sizes, found unknown chunk "
            f"sizes {darray.chunks}; call .compute_chunk_sizes() first",
            code=int(row.code),
        )
    info = payload_info(int(row.code), tuple(int(d) for d in darray.shape)).with_offset(off)
    arr = darray
    if arr.ndim > 1 and any(len(c) > 1 for c in arr.chunks[1:]):
        arr = arr.rechunk(dict.fromkeys(range(1, arr.ndim), -1))  # type: ignore[no-untyped-call]
    if row.packed and arr.ndim and math.prod(info.shape[1:]) % 2 and len(arr.chunks[0]) > 1:
        even = _even_rows(arr.chunks[0])
        if even != arr.chunks[0]:
            arr = arr.rechunk({0: even})  # type: ignore[no-untyped-call]
    with replacing(name, off) as (tmp, f):
        f.truncate(off + info.byte_length)
        f.flush()
        # Any object with __setitem__ is a store target; dask's annotation is narrower.
        target: Any = _BlockWriter(tmp, info)
        da.store(arr, target, lock=False, compute=True)
    return info


# -- weight tensors as dask arrays ----------------------------------------------------


class _TensorRows:
    """A weight tensor as ``da.from_array`` reads it: ``rows[r0:r1, ...]`` decodes
    rows ``[r0, r1)`` of its values (``tensor.numpy()``'s) from its payload, a new
    array; picklable (the tensor travels by reference: path, identity, offset).

    Rows are the payload's first axis, except for a 1-D GGML tensor, whose
    blocks each hold ``per_row`` values (``unit``); a 0-d tensor is one chunk."""

    def __init__(self, tensor: WeightTensor) -> None:
        self.tensor = tensor
        info = tensor.info
        self.per_row = 1
        if isinstance(tensor, LogicalTensor):
            self.shape, self.dtype = tensor.shape, tensor.dtype
        elif not info.shape:
            whole = tensor.numpy()
            self.shape, self.dtype = whole.shape, whole.dtype
        else:
            block = element_of(info.code, info.layout).decoded
            if block is not None and len(info.shape) == 1:
                self.per_row = block.elements
            empty = self._stored(0, 0)  # the dtype and trailing axes, from no bytes
            self.shape, self.dtype = (info.shape[0] * self.per_row, *empty.shape[1:]), empty.dtype
        self.ndim = len(self.shape)

    def unit(self) -> int:
        """Rows per block: the block rows of a scheme's scales (fp8 block-scaled:
        ``weight_block_size[0]``) when the axis holds more than one block, a 1-D
        GGML tensor's values per block; else 1."""
        t = self.tensor
        if isinstance(t, LogicalTensor):
            block = t.plan.params.get("block")
            rows = block[0] if isinstance(block, tuple) else 1
            return rows if self.shape and rows < self.shape[0] else 1
        return self.per_row

    def __getitem__(self, key: tuple[slice, ...]) -> np.ndarray:
        t = self.tensor
        if not self.shape:
            return self._whole()[key]
        r0, r1, _ = key[0].indices(self.shape[0])  # dask asks for slices of step 1
        r1 = max(r0, r1)
        if isinstance(t, LogicalTensor):
            rows = t.rows(r0, r1)
        else:
            p0, p1 = r0 // self.per_row, -(-r1 // self.per_row)
            rows = self._stored(p0, p1)[r0 - p0 * self.per_row : r1 - p0 * self.per_row]
        return rows[(slice(None), *key[1:])]

    def _whole(self) -> np.ndarray:
        return np.array(self.tensor.numpy())  # a copy: a chunk never aliases a file

    def _stored(self, p0: int, p1: int) -> np.ndarray:
        """Rows ``[p0, p1)`` of the payload's first axis, decoded as ``numpy()`` does."""
        t = self.tensor
        info = t.info
        n = info.shape[0]
        if info.layout is None:  # a closed code: checked in the whole payload's terms
            row = info.count // n if n else 0
            e0, e1 = p0 * row, p1 * row
            width = info.element.bits
            b0, b1 = e0 * width // 8, -(-e1 * width // 8)
            src = np.frombuffer(t.payload().data, U8)[b0:b1]
            where = f"tensor {t.name!r}: "
            note = f"read in rows {p0}..{p1 - 1}"
            own = src if info.packed else src.copy()  # unpacking copies; a view would alias
            flat = decode_span(info, own, e0, e1, note=note, where=where)
            return flat.reshape(p1 - p0, *info.shape[1:])
        # opaque blocks: whole rows of blocks, decoded by the tensor's own rules
        row_bytes = info.byte_length // n if n else 0
        data = t.payload().data[p0 * row_bytes : p1 * row_bytes]
        part = payload_info(info.code, (p1 - p0, *info.shape[1:]), info.layout)
        piece = WeightTensor(t.name, part, None, t.format_dtype, data=memoryview(bytes(data)))
        return piece.numpy()


def _tensor_array(tensor: WeightTensor, chunks: Any) -> da.Array:
    rows = _TensorRows(tensor)
    where = f"tensor {tensor.name!r}: "
    sizes = _chunk_sizes(chunks, rows.shape, rows.dtype, rows.unit(), where, tensor.info)
    # The tensor pickles as its file's path and identity (size, mtime): an edited
    # file gets a new name, never a stale cache of an older graph.
    token = tokenize(pickle.dumps(tensor), sizes)
    meta = np.empty((0,) * rows.ndim, rows.dtype)
    array = da.from_array(  # type: ignore[no-untyped-call]
        rows, chunks=sizes, name=f"kiln-tensor-{token}", lock=False, asarray=False, meta=meta
    )
    return cast("da.Array", array)


@set_module("kiln_np.dask")
def from_weights(
    weights: Mapping[str, WeightTensor], *, chunks: Any = "auto"
) -> dict[str, da.Array]:
    """Every tensor of a weight file as a dask array of its values, each chunk
    read and decoded when computed.

    Parameters
    ----------
    weights : Weights or Mapping[str, WeightTensor]
        What :func:`kiln_np.open_weights` gives, or a view of it (a
        :meth:`~kiln_np.Weights.logical` view: each quantization scheme's
        weight is one array of its values).
    chunks : dask chunks spec
        Applied to each tensor's shape.  The default, ``"auto"`` along axis 0
        and whole trailing axes, reads each chunk from one byte range and puts
        chunk boundaries on block boundaries: a multiple of a block-scaled
        weight's block rows (``weight_block_size[0]``), whole GGML blocks.

    Returns
    -------
    dict of str to dask.array.Array
        In file order; each of the dtype and shape ``tensor.numpy()`` gives (a
        GGML quantized tensor's float32 values, a :class:`~kiln_np.LogicalTensor`'s
        values in its reference's own dtype, another opaque tensor's block
        bytes), bit for bit.  Workers reopen the tensors' files by path.

    Raises
    ------
    KilnError
        TYPE for a value that is not a weight tensor; SHAPE for ``chunks`` dask
        cannot apply to a tensor's shape; a chunk's bytes as ``numpy()`` raises
        them (a bad bool byte, a file replaced), when it is computed.

    Examples
    --------
    >>> import os, tempfile, kiln_np
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "w.safetensors")
    ...     _ = kiln_np.save_weights(path, {"w": np.ones((6, 2), "<f4")}, format="safetensors")
    ...     with kiln_np.open_weights(path) as w:
    ...         x = from_weights(w, chunks=4)["w"]
    ...         x.chunks, float(x.sum().compute(scheduler="sync"))
    (((4, 2), (2,)), 12.0)
    """
    arrays = {}
    for name, t in weights.items():
        if not isinstance(t, WeightTensor):
            raise KilnError(
                "TYPE",
                f"tensor {name!r}: expected a WeightTensor (a Weights of kiln_np.open_weights), "
                f"found {show_value(t)}",
            )
        arrays[name] = _tensor_array(t, chunks)
    return arrays


# -- checkpoints on a cluster -------------------------------------------------------


def _run(jobs: list[Any], client: Client | None, kind: str) -> list[Any]:
    """Run each callable of ``jobs`` as one task (on ``client``'s cluster, else on
    dask's local threaded scheduler), their results in order.  Every task has
    ended, finished or failed, before a failure is raised, so nothing still
    writes once the caller cleans up."""
    token = os.urandom(8).hex()
    graph = {f"kiln-{kind}-{token}-{i}": (job,) for i, job in enumerate(jobs)}
    keys = list(graph)
    if client is None:
        with ThreadPoolExecutor(os.cpu_count()) as pool:  # leaving it waits for every task
            return list(dask.threaded.get(graph, keys, pool=pool))
    import distributed  # the client's own package: installed with it

    futures = client.get(graph, keys, sync=False)  # type: ignore[no-untyped-call]
    distributed.wait(futures)  # type: ignore[no-untyped-call]
    return list(client.gather(futures))  # type: ignore[no-untyped-call]


class _ShardJob:
    """One task of :func:`run_plan`: write one planned shard (its tensors travel by
    reference and are reopened on the worker)."""

    def __init__(
        self,
        sharded: Sharded,
        shard: Any,
        tensors: dict[str, WeightTensor],
        dequantize: Dequantize,
        to: str,
    ) -> None:
        self.sharded, self.shard, self.tensors = sharded, shard, tensors
        self.dequantize, self.to = dequantize, to

    def __call__(self) -> str:
        sources = tensor_sources(self.tensors, dequantize=self.dequantize)
        return self.sharded.write(self.shard, {s.name: s for s in sources}, self.to)


@set_module("kiln_np.dask")
def convert(
    src: str | os.PathLike[str] | Weights,
    dst: str | os.PathLike[str],
    *,
    max_shard_size: int | str,
    format: str = "safetensors",
    dequantize: Dequantize = None,
    metadata: Mapping[str, str] | None = None,
    include: str | Iterable[str] = (),
    exclude: str | Iterable[str] = (),
    client: Client | None = None,
) -> list[str]:
    """Write a weight file as a sharded safetensors checkpoint, one task per
    shard, byte-identical to :func:`kiln_np.save_weights` in one process.

    The client plans (every tensor checked, each shard's tensors and header
    computed before any data is written: the plan ``save_weights`` writes);
    each task reopens its tensors' files on its worker and writes its shard
    into the temporary directory built beside ``dst``, as ``NAME.part`` renamed
    to ``NAME`` when whole (a task retried after its worker died writes it
    again; nothing partial is left).  Once every shard is written the client
    removes any ``NAME.part`` a dead worker left, writes the index (and,
    dequantizing a logical view with a ``config.json``, the plain checkpoint's
    config, as ``save_weights`` does) and swaps the directory into place: a run that fails or is
    interrupted leaves the old ``dst`` as it was.

    Parameters
    ----------
    src : str, os.PathLike or Weights
        A weight file (anything :func:`kiln_np.open_weights` opens), read as
        its :meth:`~kiln_np.Weights.logical` view with ``dequantize``; or a
        :class:`~kiln_np.Weights` (or a view of one), written as it is.
    dst : str or os.PathLike
        The checkpoint's directory (replaced only when empty or holding only
        what a sharded save wrote, as ``save_weights``).
    max_shard_size : int or str
        Start a new shard before a tensor that would take a shard's data past
        this many bytes.
    format : {"safetensors"}
        The one format written this way.
    dequantize : {"f32", "bf16", "f16"}, optional
        As ``save_weights``: GGML blocks and each scheme's weights written as
        their values of this type.
    metadata : Mapping[str, str], optional
        Every shard's ``__metadata__``.
    include, exclude : str or iterable of str
        Only the tensors :meth:`~kiln_np.Weights.select` keeps (globs).
    client : distributed.Client, optional
        The cluster to run on; every worker must see ``src`` and ``dst``'s
        directory at the same paths.  None: dask's local threaded scheduler.

    Returns
    -------
    list of str
        ``[dst]``, absolute, as ``save_weights`` returns it.

    Raises
    ------
    KilnError
        TYPE for another ``format``; as ``save_weights`` for the tensors, the
        metadata and ``max_shard_size`` (before anything is written).
    OSError
        As ``save_weights``; ``FileNotFoundError`` naming the temporary
        directory from a worker that does not see ``dst``'s directory.  A
        task's error is raised here, after every task has ended.

    Examples
    --------
    >>> import os, tempfile, kiln_np
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     src = os.path.join(tmp, "m.safetensors")
    ...     tensors = {"a": np.zeros(16, "<f4"), "b": np.ones(16, "<f4")}
    ...     _ = kiln_np.save_weights(src, tensors, format="safetensors")
    ...     _ = convert(src, os.path.join(tmp, "ckpt"), max_shard_size=64)
    ...     print(*sorted(os.listdir(os.path.join(tmp, "ckpt"))))
    model-00001-of-00002.safetensors model-00002-of-00002.safetensors model.safetensors.index.json
    """
    target = written_path(check_path(dst))
    if format != "safetensors":
        raise KilnError(
            "TYPE",
            "expected format 'safetensors' (kiln_np.dask.convert writes sharded safetensors "
            f"checkpoints), found {show_value(format)}",
        )
    options = (max_shard_size, dequantize, metadata, include, exclude, client)
    if isinstance(src, Weights):
        return _convert(src, target, *options)
    with open_weights(src) as stored:
        return _convert(stored if dequantize is None else stored.logical(), target, *options)


def _convert(
    weights: Weights,
    target: str,
    max_shard_size: int | str,
    dequantize: Dequantize,
    metadata: Mapping[str, str] | None,
    include: str | Iterable[str],
    exclude: str | Iterable[str],
    client: Client | None,
) -> list[str]:
    patterns = (include,) if isinstance(include, str) else tuple(include)
    excluded = (exclude,) if isinstance(exclude, str) else tuple(exclude)
    view = weights.select(*patterns, exclude=excluded) if patterns or excluded else weights
    plan = plan_weights(
        target,
        view,
        format="safetensors",
        metadata=metadata,
        max_shard_size=max_shard_size,
        dequantize=dequantize,
        distributed=True,
    )
    return run_plan(plan, view, client=client)


@set_module("kiln_np.dask")
def run_plan(plan: Plan, tensors: Mapping[str, Any], *, client: Client | None = None) -> list[str]:
    """Execute a conversion plan (``kiln_np.formats.plan_weights``) of weight-file
    ``tensors`` one task per output shard, as the format's row writes a shard
    (:attr:`~kiln_np._convert.row.WeightFormat.sharded`); byte-identical to
    :func:`kiln_np.save_weights` of the same plan.  :func:`convert` documents the
    rest.

    Raises
    ------
    KilnError
        TYPE (``kiln-np convert --scheduler``: USAGE) for a plan whose format does
        not write shards a task at a time, or that has no ``max_shard_size``.

    Examples
    --------
    >>> from kiln_np.formats import plan_weights
    >>> plan = plan_weights("m.gguf", {"a": np.zeros(2, "<f4")}, format="gguf")
    >>> try:
    ...     run_plan(plan, {})
    ... except KilnError as e:
    ...     print(e.message[:60])
    expected a plan of a sharded safetensors checkpoint, one tas
    """
    sharded = sharded_writer(plan)
    assert plan.max_shard_size is not None  # sharded_writer refuses a plan without it
    shards = sharded.plan(plan.sources, plan.max_shard_size, plan.metadata)
    with building_directory(plan.target, sharded.owned) as tmp:
        jobs = [
            _ShardJob(sharded, shard, {n: tensors[n] for n in shard.tensors}, plan.dequantize, tmp)
            for shard in shards.shards
        ]
        _run(jobs, client, "shard")
        _sweep([shard.name for shard in shards.shards], tmp)
        sharded.finish(shards, tmp)
        for where, body in plan.extras:
            with open(os.path.join(tmp, os.path.basename(where)), "xb") as f:
                f.write(body)
    remove_stale(plan)
    return [plan.target]


def _sweep(names: list[str], directory: str) -> None:
    """Remove a ``NAME.part`` that a task whose worker died (or one the scheduler
    gave up on while it still ran) left in ``directory`` beside its retried
    task's whole ``NAME``, before the directory is swapped in."""
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name + TEMP_SUFFIX))


class _StatsJob:
    """One task of :func:`describe`: one tensor's statistics (its scale ranges as a
    dict, which pickles; a mapping proxy does not)."""

    def __init__(self, tensor: WeightTensor) -> None:
        self.tensor = tensor

    def __call__(self) -> TensorStats:
        try:
            row = tensor_stats(self.tensor)
        except KilnError as exc:
            raise exc.prefixed(f"tensor {self.tensor.name!r}: ") from None
        return dataclasses.replace(row, scales=dict(row.scales))


@set_module("kiln_np.dask")
def describe(
    weights: Weights, *, client: Client | None = None, sort: str | None = None
) -> WeightStats:
    """The statistics of every tensor of ``weights``, one task per tensor: equal,
    row for row, to :func:`kiln_np.describe` (the same code runs on the workers).

    Parameters
    ----------
    weights : Weights
        Or a view of one (:meth:`~kiln_np.Weights.logical`,
        :meth:`~kiln_np.Weights.select`); its tensors travel by reference and
        are reopened on the workers.
    client : distributed.Client, optional
        The cluster to run on; None: dask's local threaded scheduler.
    sort : {"file", "name", "size", "type"}, optional
        The rows' order, as :func:`kiln_np.describe` takes it; file order by
        default.

    Returns
    -------
    WeightStats
        In file order, or the order ``sort`` names.

    Raises
    ------
    KilnError
        As :func:`kiln_np.describe`: a tensor's malformed bytes, naming it;
        SHAPE for a ``sort`` that names no order.

    Examples
    --------
    >>> import os, tempfile, kiln_np
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "w.safetensors")
    ...     _ = kiln_np.save_weights(path, {"a": np.float32([1, -2])}, format="safetensors")
    ...     with kiln_np.open_weights(path) as w:
    ...         [(r.name, r.min, r.max) for r in describe(w)]
    [('a', -2.0, 1.0)]
    """
    if not isinstance(weights, Weights):
        raise KilnError(
            "TYPE", f"expected a Weights (kiln_np.open_weights), found {show_value(weights)}"
        )
    tensors = ordered(weights.values(), "file" if sort is None else sort)
    rows = _run([_StatsJob(t) for t in tensors], client, "stats")
    kept = [dataclasses.replace(r, scales=MappingProxyType(r.scales)) for r in rows]
    return WeightStats(kept, format=weights.format, path=weights.path)
