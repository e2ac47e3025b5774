"""Tensors to write: ``TensorSource`` (a name, a checked description and where the
bytes are), ``tensor_sources`` (every tensor of a mapping checked before anything is
written) and copying payload bytes into a file (in the kernel where it can, a bounded
chunk at a time where it cannot) or hashing them.

A format writer turns the caller's mapping into sources with
:func:`tensor_sources`, writes a file through ``kiln_np._files.io.replacing`` or a
directory through ``kiln_np._files.io.building_directory``, and copies each payload
with :meth:`TensorSource.write_to`.

Dequantizing on the way: ``tensor_sources(tensors, dequantize="f32")`` (or
``"bf16"``, ``"f16"``) describes each tensor of a decodable GGML block type as the
float tensor of its element shape, so a writer checks, names and sizes the float
tensor it will write; :meth:`TensorSource.write_to` then reads the blocks a bounded
chunk at a time (never mapping them), decodes each chunk into one reused buffer
(ggml's float32, rounded to nearest even for bf16 and f16; to bf16 in the cache,
straight into its bits) and writes it.  Memory is that fixed buffer, however large
the tensor.

Quantizing on the way: ``tensor_sources(tensors, quantize=policy)`` (a
:class:`~kiln_np._convert.policy.QuantizePolicy` or its string) describes each
tensor the policy turns into GGML blocks (or another float type) as what will be
written, and says in :attr:`TensorSource.kept` why each other tensor the policy
names keeps its type.  :meth:`TensorSource.write_to` then reads the float values
a bounded run of whole blocks at a time, widens (or rounds, from f64) them to
float32 into one reused buffer, quantizes them into another
(``kiln_np._quants.quantize.quantize_into``: ggml's bytes) and writes them; a NaN
or infinity is TYPE naming the tensor and the index, raised while the file is
still a temporary, so nothing partial lands.  A tensor with importance weights (a
file type's mix under an importance matrix) is read a bounded run of whole rows
at a time (at least one row), and each run quantized an expert's rows at a time
with that expert's weights, as ``llama-quantize --imatrix`` hands ggml chunks
that never cross an expert.

A logical tensor (one weight a quantization scheme stores as several parts:
DeepSeek's FP8 ``weight`` and ``weight_scale_inv``, GPTQ's ``qweight`` ...) given
with ``dequantize`` is written as its values: :meth:`TensorSource.write_to`
reads each part whole with ``readinto`` into a buffer of its own (never mapped:
a part is at most about the size of the output, a quarter to a half of it for
bf16), decodes a bounded run of rows at a time from those buffers
(:meth:`~kiln_np._weights.logical.LogicalTensor.rows_of`) and writes it, and
drops the buffers before the next tensor.  Memory is the largest tensor's parts
and one run of rows, however large the checkpoint; a part held in memory is
decoded where it is.
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload, from_numpy
from kiln_np._core.checks import U8, byte_view, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import foreign_for_dtype
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, Layout, as_dtype, code_for_dtype, code_label
from kiln_np._core.torch_types import element_shape, is_tensor, tensor_bits
from kiln_np._files.io import open_regular_raw, write_all
from kiln_np._files.payload import LazyPayload
from kiln_np._kernels.pool import cast_into
from kiln_np._quants.blocks import Block
from kiln_np._quants.decode import dequantize_bfloat16_into, dequantize_into
from kiln_np._quants.elements import element_of
from kiln_np._quants.quantize import quantize_into, unquantizable
from kiln_np._weights.logical import LogicalTensor, read_part, row_chunks
from kiln_np._weights.mapped import MappedFile
from kiln_np._weights.tensors import WeightTensor, mapped_file

from .hf import MappedTensor
from .policy import Decision, QuantizePolicy, Target, as_policy, decide, mix_decisions
from .to_gguf import GgufTensor

__all__ = [
    "DEQUANTIZE_TYPES",
    "Dequantize",
    "Dequantized",
    "KeptTensor",
    "Progress",
    "Quantized",
    "TensorSource",
    "blocks_refused",
    "dequantize_code",
    "quantize_kept",
    "sha256_file",
    "tensor_sources",
]

_COPY_CHUNK = 8 << 20  # bytes per read/write when payload bytes pass through Python
_DEQUANTIZE_CHUNK = 1 << 21
"""Elements decoded at a time when dequantizing on the way: an 8 MiB float32
buffer, enough for the thread pool to split and for ``write`` to pay off."""
_QUANTIZE_CHUNK = 1 << 21
"""Elements quantized (or converted to another float type) at a time: an 8 MiB
float32 buffer, its source bytes beside it (from a file) and the blocks out."""

DEQUANTIZE_TYPES: tuple[str, ...] = ("f32", "bf16", "f16")
"""What ``dequantize=`` names: the Kiln float types GGML blocks become."""
Dequantize = npt.DTypeLike | None
"""A ``dequantize=`` argument: one of :data:`DEQUANTIZE_TYPES` (or such a numpy
dtype), or None to keep GGML blocks as they are."""

Progress = Callable[[int], None]
"""Called with each number of payload bytes written."""


class Dequantized(NamedTuple):
    """Where a dequantized tensor's values come from: its GGML ``block`` type and
    the description of its blocks (``blocks.offset`` in the source file)."""

    block: Block
    blocks: PayloadInfo


class Quantized(NamedTuple):
    """Where a quantized (or float-converted) tensor's values come from: the GGML
    ``block`` type it is quantized to (None for a float type: the written
    description's dtype) and the description of its float ``values``
    (``values.offset`` in the source file); with ``decoded``, ``values`` are GGML
    blocks of that type, decoded to float32 first (llama-quantize's
    ``--allow-requantize``).  With ``weights`` (float32, one row of the row length
    per expert: an importance matrix's entry), each expert's rows are quantized
    with its row of them (``llama-quantize --imatrix``); ``imatrix`` says what an
    importance matrix gave the tensor (``kiln_np._convert.policy.IMATRIX_NOTES``)."""

    block: Block | None
    values: PayloadInfo
    decoded: Block | None = None
    weights: np.ndarray | None = None
    imatrix: str | None = None


class TensorSource(NamedTuple):
    """One tensor to write: its name, checked description and where its bytes are.

    Exactly one of ``data`` (bytes in memory) and ``file`` (the weight file
    holding the payload at ``info.offset``) is set.  ``format_dtype`` is the
    source format's type name when the tensor came from a weight file.  With
    ``dequantized``, ``info`` describes the float tensor to write and ``data`` or
    ``file`` hold the GGML blocks it is decoded from; with ``quantized``, the float
    values it is quantized from.  ``kept`` says why a tensor that a quantize policy
    names keeps its type (None otherwise); ``rule``, what chose its type under a
    llama-quantize file type's mix (None otherwise); ``split``, the split of a
    ``--keep-split`` output it goes to (0-based; None otherwise).  With ``logical`` (a weight a
    quantization scheme stores as parts, written as its values), ``info``
    describes the float tensor to write, decoded from the parts a bounded run
    of rows at a time.  With ``mapped`` (a Hugging Face tensor the model map
    makes of a GGUF tensor), ``info`` describes it, read and transformed a
    bounded run of rows at a time (:meth:`MappedTensor.chunks`); or a GGUF
    tensor llama.cpp's converter makes of Hugging Face tensors
    (:class:`~kiln_np._convert.to_gguf.GgufTensor`), the same way.
    """

    name: str
    info: PayloadInfo
    data: memoryview | None
    file: MappedFile | None
    format_dtype: str | None
    dequantized: Dequantized | None = None
    quantized: Quantized | None = None
    kept: str | None = None
    logical: LogicalTensor | None = None
    rule: str | None = None
    split: int | None = None
    mapped: MappedTensor | GgufTensor | None = None

    def write_to(self, fd: int, *, progress: Progress | None = None) -> None:
        """Append the payload to the open file descriptor ``fd``.

        In memory: written from the buffer.  From a file: copied in the kernel
        (``os.copy_file_range``), or where that cannot be used read with
        ``readinto`` a bounded chunk at a time; never mapped, so a source
        truncated meanwhile is a LENGTH error, not SIGBUS.  The file is
        checked to be the one that was opened (TYPE when it was replaced or
        modified since).  A dequantized tensor's blocks are read the same way,
        a chunk at a time, and each chunk's values written as decoded; a
        logical tensor's parts are read whole, the same way, and its values
        written a run of rows at a time; a mapped tensor's source is read a
        run of rows at a time.
        """
        if self.logical is not None:
            self._write_logical(fd, self.logical, progress)
            return
        if self.mapped is not None and self.quantized is not None:
            self._write_mapped_quantized(fd, self.mapped, self.quantized, progress)
            return
        if self.mapped is not None:
            for chunk in self.mapped.chunks():
                write_all(fd, chunk.reshape(-1).view(U8).data)
                if progress is not None:
                    progress(chunk.nbytes)
            return
        if self.dequantized is not None:
            self._write_dequantized(fd, self.dequantized, progress)
            return
        if self.quantized is not None and self.quantized.decoded is not None:
            self._write_requantized(fd, self.quantized, self.quantized.decoded, progress)
            return
        if self.quantized is not None:
            self._write_quantized(fd, self.quantized, progress)
            return
        n = self.info.byte_length
        if self.data is not None:
            for start in range(0, n, _COPY_CHUNK):
                piece = self.data[start : start + _COPY_CHUNK]
                write_all(fd, piece)
                if progress is not None:
                    progress(len(piece))
            return
        assert self.file is not None
        try:
            with self.file.opened(self.info.offset + n) as src:
                local = isinstance(src, io.FileIO)  # a URL's raw file has no descriptor
                done = (
                    _copy_in_kernel(src.fileno(), self.info.offset, n, fd, progress) if local else 0
                )
                if done < n:
                    done += _copy_through(src, self.info.offset + done, n - done, fd, progress)
        except KilnError as exc:  # replaced or modified since it was opened
            raise exc.prefixed(f"tensor {self.name!r}: ") from None
        if done < n:
            raise self.info.length_error(
                done, f"{self.file.path!r} shrank while tensor {self.name!r} was copied: "
            )

    def _write_logical(self, fd: int, t: LogicalTensor, progress: Progress | None) -> None:
        """Read each part whole into one buffer of its own (never mapped: a part
        is at most about the output's size), then decode and write a bounded run
        of rows at a time; the buffers go when the tensor is done."""
        arrays = {role: read_part(part, self._named(part)) for role, part in t.parts.items()}
        for chunk in row_chunks(t, self.info.dtype, _DEQUANTIZE_CHUNK, arrays):
            write_all(fd, chunk.reshape(-1).view(U8).data)
            if progress is not None:
                progress(chunk.nbytes)

    def _named(self, part: WeightTensor) -> str:
        """The prefix of a message about reading ``part`` of this tensor."""
        if part.name == self.name:
            return f"tensor {self.name!r}: "
        return f"tensor {self.name!r} (part {part.name!r}): "

    def _write_dequantized(self, fd: int, how: Dequantized, progress: Progress | None) -> None:
        block, blocks = how.block, how.blocks
        count = blocks.byte_length // block.bytes
        step = max(1, min(count, _DEQUANTIZE_CHUNK // block.elements))
        code = self.info.code
        bf16 = code == Code.BF16  # decoded straight to its bits, in the cache: no ml_dtypes
        size = step * block.elements
        out = np.empty(size, np.uint16 if bf16 else self.info.dtype)
        values = out if code == Code.F32 else np.empty(0 if bf16 else size, np.float32)
        for _, chunk in self._byte_runs(blocks, step * block.bytes, "dequantized"):
            written = out[: chunk.size // block.bytes * block.elements]
            if bf16:
                dequantize_bfloat16_into(block.name, chunk, written)
            else:
                part = values[: written.size]
                dequantize_into(block.name, chunk, part)
                if values is not out:
                    with np.errstate(over="ignore"):  # past the type's range: inf, as IEEE says
                        written[...] = part  # rounded to nearest even
            write_all(fd, written.view(U8).data)
            if progress is not None:
                progress(written.nbytes)

    def _write_quantized(self, fd: int, how: Quantized, progress: Progress | None) -> None:
        values, block = how.values, how.block
        unit = 1 if block is None else block.elements
        if how.weights is not None:
            unit = values.shape[-1]  # whole rows: each takes its expert's weights
        total = values.count
        step = max(1, min(total, _QUANTIZE_CHUNK) // unit) * unit
        wide = values.dtype.itemsize
        as_is = values.dtype == np.float32 and values.dtype.isnative
        f32 = np.empty(0 if as_is else step, np.float32)  # float32 is quantized where it is
        out = (
            np.empty(step, self.info.dtype)
            if block is None
            else np.empty(step // block.elements * block.bytes, U8)
        )
        for start, chunk in self._byte_runs(values, step * wide, "quantized"):
            lo, n = start // wide, chunk.size // wide
            x = chunk.view(values.dtype)
            if as_is and x.flags.aligned:
                part = x
            else:
                if f32.size < n:  # float32 bytes in memory, not aligned for float32
                    f32 = np.empty(step, np.float32)
                part = f32[:n]
                cast_into(part, x)  # exact, but f64: to nearest even (past float32: inf)
            if block is None:
                written = self._floats(part, x, lo, out[:n])
            else:
                written = out[: n // block.elements * block.bytes]
                bad = _quantize_rows(block, part, written, lo, values.shape, how.weights)
                if bad >= 0:
                    raise unquantizable(block.name, values.shape, lo + bad, x[bad]).prefixed(
                        f"tensor {self.name!r}: "
                    )
            write_all(fd, written.view(U8).data)
            if progress is not None:
                progress(written.nbytes)

    def _write_mapped_quantized(
        self,
        fd: int,
        mapped: MappedTensor | GgufTensor,
        how: Quantized,
        progress: Progress | None,
    ) -> None:
        """Quantize (or round to a float type) the float32 values a mapped tensor
        makes, each run of whole rows as it comes (a llama-quantize file type's mix
        over a Hugging Face checkpoint's GGUF tensors)."""
        block, lo = how.block, 0
        for chunk in mapped.chunks():
            part = np.ascontiguousarray(chunk.reshape(-1), np.float32)
            if block is None:
                written = self._floats(part, part, lo, np.empty(part.size, self.info.dtype))
            else:
                written = np.empty(part.size // block.elements * block.bytes, U8)
                bad = _quantize_rows(block, part, written, lo, how.values.shape, how.weights)
                if bad >= 0:
                    raise unquantizable(block.name, how.values.shape, lo + bad, part[bad]).prefixed(
                        f"tensor {self.name!r}: "
                    )
            write_all(fd, written.view(U8).data)
            lo += part.size
            if progress is not None:
                progress(written.nbytes)

    def _write_requantized(
        self, fd: int, how: Quantized, source: Block, progress: Progress | None
    ) -> None:
        """GGML blocks decoded to float32 (ggml's values) a run at a time, then
        quantized (or rounded to the float type written); a run is whole blocks
        of both types, so it never splits a block (rows are whole blocks of both),
        and whole rows with importance weights."""
        shape = how.values.shape
        elements = (*shape[:-1], shape[-1] * source.elements)  # the values' shape
        unit = (
            source.elements if how.block is None else math.lcm(source.elements, how.block.elements)
        )
        if how.weights is not None:
            unit = elements[-1]  # whole rows: each takes its expert's weights
        step = max(1, _QUANTIZE_CHUNK // unit) * unit
        f32 = np.empty(step, np.float32)
        out = (
            np.empty(step, self.info.dtype)
            if how.block is None
            else np.empty(step // how.block.elements * how.block.bytes, U8)
        )
        run = step // source.elements * source.bytes
        for start, chunk in self._byte_runs(how.values, run, "requantized"):
            lo, part = (
                start // source.bytes * source.elements,
                f32[: chunk.size // source.bytes * source.elements],
            )
            dequantize_into(source.name, chunk, part)
            if how.block is None:
                written = self._floats(part, part, lo, out[: part.size])
            else:
                written = out[: part.size // how.block.elements * how.block.bytes]
                bad = _quantize_rows(how.block, part, written, lo, elements, how.weights)
                if bad >= 0:
                    raise unquantizable(how.block.name, elements, lo + bad, part[bad]).prefixed(
                        f"tensor {self.name!r}: "
                    )
            write_all(fd, written.view(U8).data)
            if progress is not None:
                progress(written.nbytes)

    def _byte_runs(
        self, where: PayloadInfo, run: int, what: str
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, bytes)`` of the payload ``where`` describes, ``run`` bytes at a
        time (the last run shorter): views of the bytes in memory, or read from the
        file (``where.offset``) with ``readinto`` into one reused buffer, never
        mapped; LENGTH when the file shrank meanwhile (``what`` the tensor was
        being: ``"quantized"``)."""
        total = where.byte_length
        if self.data is not None:
            for start in range(0, total, run):
                yield start, np.frombuffer(self.data[start : start + run], U8)
            return
        assert self.file is not None
        raw = np.empty(min(run, total), U8)
        with contextlib.ExitStack() as stack:
            try:
                src = stack.enter_context(self.file.opened(where.offset + total))
            except KilnError as exc:  # replaced or modified since it was opened
                raise exc.prefixed(f"tensor {self.name!r}: ") from None
            for start in range(0, total, run):
                chunk = raw[: min(run, total - start)]
                got = _read_at(src, where.offset + start, chunk)
                if got < chunk.size:
                    raise where.length_error(
                        start + got,
                        f"{self.file.path!r} shrank while tensor {self.name!r} was {what}: ",
                    )
                yield start, chunk

    def _floats(self, part: np.ndarray, x: np.ndarray, lo: int, out: np.ndarray) -> np.ndarray:
        """``part`` (float32) as the written float type, rounded to nearest even;
        TYPE at its first NaN (``x``: the source values, from flat index ``lo``)."""
        nan = np.isnan(part)
        if nan.any():
            at = int(np.argmax(nan))
            index = tuple(int(i) for i in np.unravel_index(lo + at, self.info.shape))
            raise KilnError(
                "TYPE",
                f"tensor {self.name!r}: expected no NaN to store as {self.info.element.name} "
                f"(converters do not keep a NaN's bits alike), found {float(x[at])} at "
                f"index {index}",
            )
        if out.dtype == np.float32:
            return part
        with np.errstate(over="ignore"):  # past the type's range: inf, as IEEE says
            out[...] = part  # rounded to nearest even
        return out


def _quantize_rows(
    block: Block,
    part: np.ndarray,
    out: np.ndarray,
    lo: int,
    shape: tuple[int, ...],
    weights: np.ndarray | None,
) -> int:
    """Quantize the float32 ``part`` (from flat index ``lo`` of values of
    ``shape``) into ``out``; with ``weights`` (a row per expert), ``part`` is
    whole rows, quantized an expert's rows at a time with its row of weights, as
    ``llama_tensor_quantize_impl`` hands ggml chunks that never cross an expert.
    Returns :func:`quantize_into`'s -1 or first bad index into ``part``.

    >>> from kiln_np._quants.blocks import BLOCKS
    >>> w = np.array([[1.0] * 32, [2.0] * 32], np.float32)  # 2 experts, rows of 32
    >>> out = np.empty(4 * 34, np.uint8)
    >>> _quantize_rows(BLOCKS["Q8_0"], np.ones(128, np.float32), out, 0, (2, 2, 32), w)
    -1
    """
    if weights is None:
        return quantize_into(block.name, part, out)
    row = shape[-1]
    per_expert = shape[-2] * row  # elements of one expert
    per_row = row // block.elements * block.bytes
    start = 0
    while start < part.size:
        expert = (lo + start) // per_expert
        end = min(part.size, (expert + 1) * per_expert - lo)
        piece = out[start // row * per_row : end // row * per_row]
        bad = quantize_into(block.name, part[start:end], piece, weights[expert])
        if bad >= 0:
            return start + bad
        start = end
    return -1


def _read_at(src: io.RawIOBase, offset: int, into: np.ndarray) -> int:
    """Fill ``into`` from ``src`` at ``offset``; the bytes read (fewer at the end)."""
    view = into.view(U8).data
    src.seek(offset)
    done = 0
    while done < view.nbytes:
        got = src.readinto(view[done:])
        if not got:
            break
        done += got
    return done


def _copy_in_kernel(src: int, offset: int, n: int, dst: int, progress: Progress | None) -> int:
    """Copy with ``os.copy_file_range``; returns the bytes copied (fewer when the
    call is not supported here, or the source ended)."""
    copy_range = getattr(os, "copy_file_range", None)
    done = 0
    while done < n and copy_range is not None:
        try:
            got = copy_range(src, dst, min(n - done, 1 << 30), offset + done)
        except OSError as exc:
            if exc.errno in {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}:
                return done  # another file system or kernel: copy through Python
            raise
        if got == 0:
            return done
        done += got
        if progress is not None:
            progress(got)
    return done


def _copy_through(
    src: io.RawIOBase, offset: int, n: int, fd: int, progress: Progress | None
) -> int:
    view = _buffer()
    src.seek(offset)
    done = 0
    while done < n:
        got = src.readinto(view[: min(n - done, _COPY_CHUNK)])
        if not got:
            break
        write_all(fd, view[:got])
        done += got
        if progress is not None:
            progress(got)
    return done


_LOCAL = threading.local()


def _buffer() -> memoryview:
    """This thread's copy buffer, made once: allocating (and zeroing) one for
    each of a checkpoint's thousand tensors would cost as much as the copy."""
    view: memoryview | None = getattr(_LOCAL, "view", None)
    if view is None:
        view = _LOCAL.view = memoryview(bytearray(_COPY_CHUNK))
    return view


def sha256_file(path: str) -> str:
    """The hex SHA-256 of a file, read with ``readinto`` a bounded chunk at a time.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with open(os.path.join(d, "f"), "wb") as f:
    ...         _ = f.write(b"abc")
    ...     sha256_file(os.path.join(d, "f"))[:16]
    'ba7816bf8f01cfea'
    """
    import hashlib  # OpenSSL's loading costs a start-up that never hashes

    hasher = hashlib.sha256()
    view = _buffer()
    with open_regular_raw(path) as f:
        while got := f.readinto(view):
            hasher.update(view[:got])
    return hasher.hexdigest()


def dequantize_code(dequantize: object, option: str = "dequantize") -> Code | None:
    """The Kiln float code that ``dequantize`` names (``"f32"``, ``"bf16"``,
    ``"f16"``, or such a numpy dtype), or None for None; TYPE naming ``option``
    otherwise.

    >>> dequantize_code("bf16"), dequantize_code(np.float32), dequantize_code(None)
    (<Code.BF16: 4>, <Code.F32: 2>, None)
    """
    if dequantize is None:
        return None
    if isinstance(dequantize, str) and dequantize in DEQUANTIZE_TYPES:
        return Code[dequantize.upper()]
    try:
        code = code_for_dtype(as_dtype(dequantize))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # KilnError too: a dtype with no Kiln code
        code = None
    if code is None or code.name.lower() not in DEQUANTIZE_TYPES:
        raise KilnError(
            "TYPE",
            f"expected {option} to be {', '.join(map(repr, DEQUANTIZE_TYPES))} or None, "
            f"found {show_value(dequantize)}",
        )
    return code


def blocks_refused(name: str, info: PayloadInfo, target: str, option: str) -> KilnError | None:
    """The TYPE error for tensor ``name`` of GGML blocks, which ``target`` cannot
    hold: naming ``option`` (``"dequantize"`` for Python, ``"--dequantize"`` for
    the command line) when it would turn them into numbers, or saying why it
    cannot.  None when ``info`` describes no GGML blocks.

    >>> from kiln_np import Layout
    >>> print(blocks_refused("w", payload_info(0x4708, (1,), Layout("ggml.q8_0", 34)),
    ...                      "safetensors", "dequantize").message)  # doctest: +ELLIPSIS
    tensor 'w': safetensors cannot hold GGML Q8_0 blocks (opaque code 18184 (0x4708) ...
    """
    element = element_of(info.code, info.layout)
    block = element.block
    if element.kind != "ggml" or block is None:
        return None
    cli = option.startswith("-")
    spelled = f"{option} f32 (or bf16, f16)" if cli else f"{option}='f32' (or 'bf16', 'f16')"
    keep = "convert to GGUF or a Kiln directory, which keep the blocks"
    if element.decodable:
        why = (
            f"pass {spelled} to write their values (ggml's float32, rounded "
            f"to nearest even for bf16 and f16), or {keep}"
        )
    else:
        why = f"{option} cannot turn them into numbers (kiln_np has no decoder for them); {keep}"
    return KilnError(
        "TYPE",
        f"tensor {name!r}: {target} cannot hold GGML {block.name} blocks "
        f"({code_label(int(info.code))} with layout {info.layout!r}): {why}",
        code=int(info.code),
    )


def tensor_sources(
    tensors: object,
    *,
    dequantize: Dequantize = None,
    quantize: QuantizePolicy | str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> list[TensorSource]:
    """Check and describe every tensor of ``tensors`` (a mapping of names to
    :class:`WeightTensor`, :class:`~kiln_np.Payload` or arrays), in order,
    before anything is written.

    Values are taken as they are (a numpy scalar as a 0-d array, a
    :class:`~kiln_np.LazyPayload` decoded from its file); another library's
    array (torch, jax, ...) is refused, saying how to make it a numpy array.
    With ``dequantize`` (``"f32"``, ``"bf16"``, ``"f16"``), a tensor of a
    decodable GGML block type is described as the float tensor of its element
    shape that :meth:`TensorSource.write_to` writes; every other keeps its bytes.
    With ``quantize`` (a :class:`~kiln_np.QuantizePolicy` or its string), each
    tensor the policy turns into GGML blocks or another float type is described
    as what :meth:`TensorSource.write_to` writes; each other tensor keeps its
    bytes, and its ``kept`` says why (``kiln_np._convert.policy.decide``); a
    policy whose default is a llama-quantize file type chooses over all the
    tensors at once, with the model's GGUF ``metadata``
    (``kiln_np._convert.policy.mix_decisions``), and each tensor's ``rule``
    says what chose its type.

    Raises
    ------
    KilnError
        TYPE for a non-mapping, a name that is not a str, a value of another
        type (another library's array included), an array dtype with no Kiln
        code, another ``dequantize``, a malformed ``quantize``, both of them;
        LENGTH for a payload whose bytes are not its ``byte_length``; the message
        names the tensor.

    Examples
    --------
    >>> [(s.name, s.info.byte_length, s.file) for s in tensor_sources({"w": np.ones(3, "<f4")})]
    [('w', 12, None)]
    >>> from kiln_np import Layout
    >>> q8 = Payload(0x4708, bytes(68), (2,), Layout("ggml.q8_0", 34))  # 2 blocks of 32
    >>> [(s.info.code, s.info.shape) for s in tensor_sources({"q": q8}, dequantize="f16")]
    [(<Code.F16: 3>, (64,))]
    >>> w = {"w": np.ones((2, 64), "<f4"), "b": np.ones(64, "<f4")}
    >>> for s in tensor_sources(w, quantize="*=q8_0"):  # a glob: every tensor it can
    ...     print(s.name, s.info.layout and s.info.layout.name, s.info.shape, s.kept)
    w ggml.q8_0 (2, 2) None
    b None (64,) a 1-D tensor: Q8_0 quantizes rows of two dims or more
    """
    code = dequantize_code(dequantize)
    policy = as_policy(quantize)
    assert code is None or policy is None  # the plan refuses both
    if not isinstance(tensors, Mapping):
        raise KilnError(
            "TYPE", f"expected a mapping of tensor names to tensors, found {show_value(tensors)}"
        )
    sources = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise KilnError("TYPE", f"expected tensor names as str, found {show_value(name)}")
        source = _source(name, value)
        if source.logical is not None and code is None:
            raise _logical_refused(source.logical, name)
        if code is not None:
            source = _dequantized(source, code)
        elif policy is not None and policy.file_type is None:
            source = _quantized(source, decide(policy, source.name, source.info))
        sources.append(source)
    if policy is not None and policy.file_type is not None:
        decisions = mix_decisions(policy, [(s.name, s.info) for s in sources], metadata)
        pairs = zip(sources, decisions, strict=True)
        sources = [_mixed(s, d) for s, d in pairs if d.name is not None]  # None: pruned
    return sources


def _mixed(source: TensorSource, decision: Decision) -> TensorSource:
    """``source`` as a file type's mix makes it, with the rule that chose it, its
    output name and its importance weights."""
    made = _quantized(source, decision.target)
    if made.quantized is not None and decision.imatrix is not None:
        how = made.quantized._replace(weights=decision.weights, imatrix=decision.imatrix)
        made = made._replace(quantized=how)
    return made._replace(name=decision.name or source.name, rule=decision.rule or None)


def _quantized(source: TensorSource, target: Target | str | None) -> TensorSource:
    """``source`` as the policy's ``target`` makes it: quantized, another float
    type, or itself (with why it keeps its type); GGML blocks only under a file
    type's mix with ``allow_requantize`` (decoded, then quantized)."""
    values = source.info
    decoded = None if values.layout is None else element_of(values.code, values.layout).decoded
    if decoded is not None and isinstance(target, (Block, Code)):
        shape = (*values.shape[:-1], values.shape[-1] * decoded.elements)
        if isinstance(target, Code):
            info = payload_info(target, shape)
            return source._replace(
                info=info, format_dtype=None, quantized=Quantized(None, values, decoded)
            )
        blocks = (*shape[:-1], shape[-1] // target.elements)
        info = payload_info(target.code, blocks, Layout(target.layout_name, target.bytes))
        return source._replace(
            info=info, format_dtype=None, quantized=Quantized(target, values, decoded)
        )
    if target is None:
        return source
    if isinstance(target, str):
        return source._replace(kept=target)
    if isinstance(target, Code):
        info = payload_info(target, values.shape)
        return source._replace(info=info, format_dtype=None, quantized=Quantized(None, values))
    shape = (*values.shape[:-1], values.shape[-1] // target.elements)
    info = payload_info(target.code, shape, Layout(target.layout_name, target.bytes))
    return source._replace(info=info, format_dtype=None, quantized=Quantized(target, values))


def _dequantized(source: TensorSource, code: Code) -> TensorSource:
    """``source`` as the ``code`` tensor of its values, when it holds decodable
    GGML blocks; else ``source`` itself."""
    if source.logical is not None:
        return source._replace(info=payload_info(code, source.logical.shape), format_dtype=None)
    blocks = source.info
    block = element_of(blocks.code, blocks.layout).decoded
    if block is None:
        return source
    shape = blocks.shape
    elements = (*shape[:-1], shape[-1] * block.elements) if shape else (block.elements,)
    info = payload_info(code, elements)
    return source._replace(info=info, dequantized=Dequantized(block, blocks))


def _logical_refused(t: LogicalTensor, name: str) -> KilnError:
    """The TYPE error for a logical tensor given to write without ``dequantize``."""
    return KilnError(
        "TYPE",
        f"tensor {name!r}: expected a tensor with one payload, found a {t.scheme} weight "
        f"stored as {len(t.parts)} tensors ({', '.join(t.parts)}): pass dequantize='bf16' "
        "(or 'f16', 'f32') to write its values, or write the parts as stored from the plain "
        "view (weights.plain)",
    )


def _source(name: str, value: object) -> TensorSource:
    where = f"tensor {name!r}: "
    if isinstance(value, (MappedTensor, GgufTensor)):
        held = mapped_file(value.source)
        memory = value.source.payload().data if held is None else None
        return TensorSource(name, value.info, memory, held, None, mapped=value)
    if isinstance(value, LogicalTensor):
        key = next(iter(value.parts.values()))
        held = mapped_file(key)
        memory = key.payload().data if held is None else None
        return TensorSource(name, key.info, memory, held, value.format_dtype, logical=value)
    if isinstance(value, WeightTensor):
        file = mapped_file(value)
        if file is None:
            return TensorSource(name, value.info, value.payload().data, None, value.format_dtype)
        return TensorSource(name, value.info, None, file, value.format_dtype)
    try:
        if isinstance(value, Payload):
            info = payload_info(value.code, value.shape, value.layout)
            data = byte_view(value.data, "the payload's data")
            info.check_length(data.size)
            return TensorSource(name, info, data.data, None, None)
        if is_tensor(value):
            row, bits = tensor_bits(value)  # a view of its memory, bit for bit
            if row.per_byte != 1:  # float4_e2m1fn_x2: the bytes are the payload
                info = payload_info(row.code, element_shape(row, bits.shape))
                return TensorSource(name, info, _flat(bits).data, None, None)
            value = bits
        if isinstance(value, (np.ndarray, np.generic, LazyPayload)):
            arr = np.asarray(value)  # a LazyPayload decodes (and checks) its file
            foreign = foreign_for_dtype(arr.dtype)
            if foreign is not None and foreign.bits == 8 * foreign.dtype.itemsize:
                # complex64, the FNUZ float8s: every bit is the element's; one block each
                info = payload_info(foreign.code, arr.shape, foreign.layout)
                raw = _flat(np.asarray(arr, foreign.dtype))
                return TensorSource(name, info, raw.data, None, None)
            payload = from_numpy(arr)
            info = payload_info(payload.code, payload.shape, payload.layout)
            return TensorSource(name, info, payload.data, None, None)
    except KilnError as exc:
        raise exc.prefixed(where) from exc
    raise KilnError(
        "TYPE",
        f"{where}expected a kiln_np.Payload, a numpy array, a torch tensor or a WeightTensor, "
        f"found {_foreign_array(value) or show_value(value)}",
    )


def _flat(arr: np.ndarray) -> np.ndarray:
    """The C-order bytes of ``arr``, flat uint8 (a view when it is C-contiguous)."""
    return np.ascontiguousarray(arr).reshape(-1).view(U8)


def _foreign_array(value: object) -> str | None:
    """Another library's array (jax, cupy, ...) as a message shows it, with what
    to do, or None for anything else.  torch tensors are read above; other
    libraries' arrays are not converted here: numpy's ``__array__`` would work
    for some dtypes and cast or fail for others."""
    if not any(hasattr(value, a) for a in ("__array__", "__dlpack__", "__array_interface__")):
        return None
    kind = type(value)
    dtype = show_value(getattr(value, "dtype", None)).partition(" ")[2]
    return (
        f"a {kind.__module__}.{kind.__qualname__} of dtype {dtype}: kiln_np reads numpy "
        "arrays and torch tensors; pass a numpy array, np.asarray(x) (a JAX array of an "
        "ml_dtypes type converts bit for bit: docs/interop.md)"
    )


class KeptTensor(NamedTuple):
    """A tensor that keeps its type although a quantize policy named it (or named
    nothing for it): its ``name``, the ``type`` it keeps (``"f32"``, ``"i32"``,
    ``"ggml.q8_0"``: what ``kiln-np ls`` shows as ``kiln``) and the ``reason``."""

    name: str
    type: str
    reason: str


def quantize_kept(
    tensors: Mapping[str, Any], quantize: QuantizePolicy | str | None
) -> list[KeptTensor]:
    """Every tensor of ``tensors`` that ``save_weights(..., quantize=quantize)``
    writes with its own type although the policy named it (or named nothing for
    it, having no default), in order, with the reason; nothing is written.

    Raises
    ------
    KilnError
        TYPE for a malformed ``quantize``, and what ``save_weights`` refuses of
        the tensors themselves.

    Examples
    --------
    >>> import numpy as np
    >>> tensors = {"w.weight": np.ones((2, 64), np.float32), "norm": np.ones(64, np.float32),
    ...            "ids": np.arange(64, dtype=np.int32).reshape(2, 32)}
    >>> for kept in quantize_kept(tensors, "q8_0"):
    ...     print(kept.name, kept.type, "-", kept.reason)
    norm f32 - Q8_0 does not quantize it (1-D)
    ids i32 - Q8_0 does not quantize it (not a weight (the name does not end in 'weight'))
    >>> for kept in quantize_kept(tensors, "*=q8_0"):  # a glob: every tensor it can
    ...     print(kept.name, kept.type, "-", kept.reason)
    norm f32 - a 1-D tensor: Q8_0 quantizes rows of two dims or more
    ids i32 - i32 is not a float type: Q8_0 quantizes f32, f16, bf16 and f64 tensors
    """
    policy = as_policy(quantize)
    if policy is None:
        return []
    return [
        KeptTensor(s.name, s.info.element.name, s.kept)
        for s in tensor_sources(tensors, quantize=policy)
        if s.kept is not None
    ]
