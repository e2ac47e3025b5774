"""Weight files: many named tensors in one file or directory, opened as one mapping.

:func:`open_weights` recognises a weight file from its content and returns a
:class:`Weights`, a read-only mapping of names to :class:`WeightTensor` in
file order; :func:`save_weights` writes any mapping of names to payloads,
arrays or such tensors as safetensors, GGUF or a Kiln payload directory.

Recognising a format
--------------------
In this order, the first that fits:

1. a directory holding ``manifest.json``: a Kiln payload directory (below);
2. a directory holding one ``*.safetensors.index.json``, or such an index
   file itself: a sharded safetensors checkpoint;
3. a file starting with ``GGUF``: GGUF (the first file of a split opens the
   whole split);
4. a file whose first 8 bytes are a little-endian size of at most 100 MB and
   at most the rest of the file, followed by ``{``: safetensors;
5. a file that parses as a binary ONNX ``ModelProto``.  Protobuf has no magic,
   so this comes last, and only for a file whose first byte is ``0x08`` (the
   tag of ``ir_version``, field 1, which every ONNX writer puts first).

Anything else is TYPE, showing the first bytes in hex.

Laziness and maps
-----------------
Opening reads headers only.  Each file is memory-mapped read-only the first
time one of its tensors hands out a payload, once per file
(:class:`MappedFile`); :meth:`Weights.close` releases every map that no
handed-out payload still references (a memoryview or array made from a
payload keeps its map alive until it is dropped).  A file truncated while
mapped kills the reader with SIGBUS, as any map does (docs/safety.md).

A tensor pickles by reference: the file's absolute path, the payload's offset
and its description; unpickled, it maps only the pages of its own payload.

The Kiln payload directory
--------------------------
kiln_np's own convention, not part of the Kiln spec: ``manifest.json`` plus
one payload file per tensor, each exactly the payload's bytes.
``manifest.json`` is ``{"format": "kiln-np-weights/1", "source_format": ...,
"metadata": {...}, "tensors": [...]}``; each tensor entry holds ``name``,
``file`` (a plain file name in the directory), ``code``, ``dtype`` (the
decoded numpy dtype name, informative), ``layout`` (``{"name",
"block_size"}`` or null), ``shape``, ``byte_length`` and ``sha256``.
Metadata values keep their types (see :func:`encode_metadata`), so a GGUF
file's keys survive GGUF -> directory -> GGUF.  The ``kiln-np-onnx/1``
manifests that ``kiln-np onnx`` wrote before (``payload_bytes`` for
``byte_length``, a ``model`` key) still open.

For format modules
------------------
A format module (``kiln_np.safetensors``, ``kiln_np.gguf``) builds its
tensors as ``WeightTensor(name, payload_info(...).with_offset(offset),
mapped_file, format_dtype)`` and returns ``Weights(tensors, format=...,
metadata=..., path=..., files=[...])``; to write, it turns the caller's
mapping into :class:`TensorSource` items with :func:`tensor_sources` (every
tensor checked before anything is written), writes a file through
``kiln_np._files.io.replacing`` or a directory through
``kiln_np._files.io.building_directory``,
and copies each payload with :meth:`TensorSource.write_to`.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import io
import json
import mmap
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from kiln_np._codec import Payload, from_numpy, to_numpy
from kiln_np._core.checks import (
    U8,
    byte_view,
    check_path,
    check_regular_file,
    set_module,
    show_value,
    written_path,
)
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import foreign_for_dtype
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Layout, code_label
from kiln_np._files.io import building_directory, open_regular_raw, write_all

__all__ = [
    "FORMATS",
    "MANIFEST",
    "MappedFile",
    "TensorSource",
    "WeightTensor",
    "Weights",
    "decode_metadata",
    "encode_metadata",
    "open_weights",
    "parse_json",
    "save_weights",
    "tensor_sources",
]

FORMATS = ("safetensors", "gguf", "onnx", "kiln")
"""The values of :attr:`Weights.format`."""

MANIFEST = "manifest.json"
_MANIFEST_FORMAT = "kiln-np-weights/1"
_ONNX_MANIFEST_FORMAT = "kiln-np-onnx/1"  # what `kiln-np onnx` wrote before this format
_COPY_CHUNK = 8 << 20  # bytes per read/write when payload bytes pass through Python
_HEAD = 16  # bytes shown of a file no format recognises
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

PathLike = str | os.PathLike[str]
Progress = Callable[[int], None]
"""Called with each number of payload bytes written."""


# -- maps ---------------------------------------------------------------------------


class MappedFile:
    """One file of a weight file, memory-mapped read-only on first use.

    Every tensor read from the file shares this object, so a file is mapped
    once however many tensors it holds.  ``window`` restricts the map to the
    pages of one byte range (an unpickled tensor maps only its own payload).

    Parameters
    ----------
    path : str
        The file (made absolute).
    size : int
        Its size when it was opened; a payload is checked against it.
    window : (int, int), optional
        ``(start, stop)``: map only those bytes (aligned down to a page).
    """

    __slots__ = ("_base", "_lock", "_map", "_view", "closed", "path", "size", "stop")

    def __init__(self, path: str, size: int, window: tuple[int, int] | None = None) -> None:
        self.path = os.path.realpath(path)
        self.size = size
        start, self.stop = (0, size) if window is None else window
        self._base = start - start % mmap.ALLOCATIONGRANULARITY
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._lock = threading.Lock()
        self.closed = False

    @classmethod
    def open(cls, path: str) -> MappedFile:
        """The file at ``path``, checked to be a regular file (TYPE otherwise;
        ``OSError`` as the OS raises it, e.g. ``FileNotFoundError``)."""
        return cls(path, check_regular_file(path).st_size)

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``, read (not mapped): for headers.  Fewer
        come back when the file ends first."""
        with open_regular_raw(self.path) as f:
            return os.pread(f.fileno(), length, offset)

    def view(self, offset: int, length: int) -> memoryview:
        """A read-only memoryview of ``length`` bytes at ``offset`` of the map."""
        if length == 0:
            return memoryview(b"")
        with self._lock:
            if self._view is None:
                self._map_file(offset + length)
            assert self._view is not None
            start = offset - self._base
            return self._view[start : start + length]

    def _map_file(self, needed: int) -> None:
        if self.closed:
            raise ValueError(f"{self.path!r}: the weight file was closed")
        with open_regular_raw(self.path) as f:
            size = os.fstat(f.fileno()).st_size
            if size < max(needed, self.stop):
                raise KilnError(
                    "LENGTH",
                    f"{self.path!r}: expected a file of at least {max(needed, self.stop)} "
                    f"bytes (it was {self.size} bytes when opened), found {size}",
                    expected=max(needed, self.stop),
                    found=size,
                )
            self._map = mmap.mmap(
                f.fileno(), self.stop - self._base, access=mmap.ACCESS_READ, offset=self._base
            )
        self._view = memoryview(self._map)

    def close(self) -> None:
        """Release the map, unless a handed-out payload still uses it: then it is
        released when the last such payload is dropped."""
        with self._lock:
            self.closed = True
            if self._view is not None:
                self._view.release()
            if self._map is not None:
                with contextlib.suppress(BufferError):  # exported: dropping is enough
                    self._map.close()
            self._view = None
            self._map = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("mapped" if self._map is not None else "not mapped")
        return f"MappedFile({self.path!r}, {self.size} bytes, {state})"


# -- tensors ------------------------------------------------------------------------


@set_module("kiln_np")
class WeightTensor:
    """One named tensor of a weight file: its description and where its bytes are.

    Made by :func:`open_weights`; nothing is read until :meth:`payload` (or
    :meth:`numpy`, ``np.asarray``) is called.

    Attributes
    ----------
    name : str
        The tensor's name in the file.
    code : int
        The Kiln code (a :class:`~kiln_np.Code` for closed codes).
    shape : tuple of int
        Kiln element shape (block shape for opaque codes; C order).
    layout : Layout or None
        The opaque layout, for codes 4096-32767.
    byte_length : int
        The payload's bytes.
    format_dtype : str
        The file format's name for the type (``'BF16'``, ``'Q4_0'``, ``'FLOAT'``;
        in a Kiln directory, the code's short name or the layout's name).
    path : str or None
        The absolute path of the file holding the bytes (None for bytes held
        in memory, as an ONNX initializer's own data).
    offset : int
        Where the payload starts in that file.
    info : PayloadInfo
        The checked description.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> path = os.path.join(d, "w.safetensors")
    >>> kiln_np.save_weights(path, {"w": np.arange(3, dtype=np.float32)}, format="safetensors")
    >>> with kiln_np.open_weights(path) as weights:
    ...     t = weights["w"]
    ...     print(t, t.numpy())
    WeightTensor('w', code 2 (f32), shape (3,), 12 bytes, F32) [0. 1. 2.]
    >>> import shutil; shutil.rmtree(d)
    """

    __slots__ = ("_data", "_file", "format_dtype", "info", "name")

    def __init__(
        self,
        name: str,
        info: PayloadInfo,
        file: MappedFile | None,
        format_dtype: str,
        *,
        data: memoryview | None = None,
    ) -> None:
        if (file is None) == (data is None):
            raise AssertionError("a WeightTensor needs exactly one of file and data")
        self.name = name
        self.info = info
        self.format_dtype = format_dtype
        self._file = file
        self._data = data

    @property
    def code(self) -> int:
        """The Kiln code."""
        return self.info.code

    @property
    def shape(self) -> tuple[int, ...]:
        """Kiln element shape (block shape for opaque codes)."""
        return self.info.shape

    @property
    def layout(self) -> Layout | None:
        """The opaque layout, or None."""
        return self.info.layout

    @property
    def byte_length(self) -> int:
        """Payload bytes."""
        return self.info.byte_length

    @property
    def offset(self) -> int:
        """Payload position in :attr:`path`."""
        return self.info.offset

    @property
    def path(self) -> str | None:
        """The file holding the payload, or None when it is held in memory."""
        return None if self._file is None else self._file.path

    def payload(self) -> Payload:
        """The payload: a zero-copy, read-only view of the mapped file.

        Raises
        ------
        ValueError
            When its :class:`Weights` was closed before the file was mapped.
        KilnError
            LENGTH when the file has shrunk below the payload's end.
        """
        if self._data is not None:
            data = self._data
        else:
            assert self._file is not None
            data = self._file.view(self.info.offset, self.info.byte_length)
        return Payload(self.info.code, data, self.info.shape, self.info.layout)

    def numpy(self) -> np.ndarray:
        """The decoded array, ``to_numpy(*tensor.payload())``: a read-only view of
        the map for whole-byte codes, unpacked for 4-bit codes (bool bytes and
        padding nibbles checked: TYPE)."""
        return to_numpy(*self.payload())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False and self.info.element.packed:
            raise ValueError("4-bit payloads unpack into a new array: copy=False is impossible")
        arr = self.numpy()
        if dtype is not None:
            arr = arr.astype(dtype, copy=bool(copy))
        return arr.copy() if copy else arr

    def __reduce__(self) -> tuple[Any, ...]:
        info = self.info
        if self._file is None:  # bytes held in memory travel as bytes
            assert self._data is not None
            args = (self.name, int(info.code), info.shape, info.layout, self.format_dtype)
            return (_from_bytes, (*args, bytes(self._data)))
        return (
            _reopen,
            (
                self._file.path,
                info.offset,
                int(info.code),
                info.shape,
                info.layout,
                self.name,
                self.format_dtype,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"WeightTensor({self.name!r}, {code_label(int(self.info.code))}, shape "
            f"{self.info.shape}, {self.info.byte_length} bytes, {self.format_dtype})"
        )


def _reopen(
    path: str,
    offset: int,
    code: int,
    shape: tuple[int, ...],
    layout: Layout | None,
    name: str,
    format_dtype: str,
) -> WeightTensor:
    info = payload_info(code, shape, layout).with_offset(offset)
    file = MappedFile(path, offset + info.byte_length, (offset, offset + info.byte_length))
    return WeightTensor(name, info, file, format_dtype)


def _from_bytes(
    name: str,
    code: int,
    shape: tuple[int, ...],
    layout: Layout | None,
    format_dtype: str,
    data: bytes,
) -> WeightTensor:
    return WeightTensor(
        name, payload_info(code, shape, layout), None, format_dtype, data=memoryview(data)
    )


@set_module("kiln_np")
class Weights(Mapping[str, WeightTensor]):
    """The tensors of a weight file: a read-only mapping of names, in file order.

    Returned by :func:`open_weights`.  A context manager: leaving it (or
    :meth:`close`) releases the file maps that no handed-out payload still
    uses; payloads already handed out stay valid until they are dropped.

    Attributes
    ----------
    format : str
        ``"safetensors"``, ``"gguf"``, ``"onnx"`` or ``"kiln"``.
    metadata : Mapping
        The file's metadata: safetensors' ``__metadata__`` (str to str); GGUF's
        key/values (see ``kiln_np.gguf``); a Kiln directory's, typed as it was
        saved; for ONNX the model's ``ir_version``, ``producer_name``,
        ``producer_version``, ``domain``, ``model_version``, ``opset_import``
        (domain to version) and ``metadata_props``.
    path : str
        What was opened (absolute).

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> tensors = {"b": np.zeros(2, np.int8), "a": np.ones((2, 2), np.float16)}
    >>> kiln_np.save_weights(d + "/w", tensors, format="kiln", metadata={"step": 3})
    >>> with kiln_np.open_weights(d + "/w") as w:
    ...     print(w.format, list(w), dict(w.metadata), w["a"].shape)
    kiln ['b', 'a'] {'step': 3} (2, 2)
    >>> import shutil; shutil.rmtree(d)
    """

    def __init__(
        self,
        tensors: Iterable[WeightTensor],
        *,
        format: str,
        metadata: Mapping[str, Any],
        path: str,
        files: Iterable[MappedFile] = (),
    ) -> None:
        by_name: dict[str, WeightTensor] = {}
        for tensor in tensors:
            if tensor.name in by_name:
                raise KilnError(
                    "TYPE", f"{path!r}: expected unique tensor names, found {tensor.name!r} twice"
                )
            by_name[tensor.name] = tensor
        self._tensors = by_name
        self._files = tuple(files)
        self.format = format
        # A format's own read-only mapping (GGUF's parses values lazily) is kept.
        self.metadata = MappingProxyType(metadata) if isinstance(metadata, dict) else metadata
        self.path = os.path.realpath(path)

    def __getitem__(self, name: str) -> WeightTensor:
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    @property
    def byte_length(self) -> int:
        """The payload bytes of every tensor together."""
        return sum(t.byte_length for t in self._tensors.values())

    def close(self) -> None:
        """Release the file maps (those still used by a handed-out payload are
        released when it is dropped).  A tensor not yet mapped cannot be read
        after this: its :meth:`~WeightTensor.payload` raises ``ValueError``."""
        for file in self._files:
            file.close()

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (open_weights, (self.path,))

    def __repr__(self) -> str:
        return f"Weights({self.format!r}, {self.path!r}, {len(self)} tensors)"


# -- sources for writers ------------------------------------------------------------


class TensorSource(NamedTuple):
    """One tensor to write: its name, checked description and where its bytes are.

    Exactly one of ``data`` (bytes in memory) and ``path`` (a file holding
    the payload at ``info.offset``) is set.  ``format_dtype`` is the source
    format's type name when the tensor came from a weight file.
    """

    name: str
    info: PayloadInfo
    data: memoryview | None
    path: str | None
    format_dtype: str | None

    def write_to(self, fd: int, *, progress: Progress | None = None) -> None:
        """Append the payload to the open file descriptor ``fd``.

        In memory: written from the buffer.  From a file: copied in the kernel
        (``os.copy_file_range``), or where that cannot be used read with
        ``readinto`` a bounded chunk at a time; never mapped, so a source
        truncated meanwhile is a LENGTH error, not SIGBUS.
        """
        n = self.info.byte_length
        if self.data is not None:
            for start in range(0, n, _COPY_CHUNK):
                piece = self.data[start : start + _COPY_CHUNK]
                write_all(fd, piece)
                if progress is not None:
                    progress(len(piece))
            return
        assert self.path is not None
        with open_regular_raw(self.path) as src:
            done = _copy_in_kernel(src.fileno(), self.info.offset, n, fd, progress)
            if done < n:
                done += _copy_through(src, self.info.offset + done, n - done, fd, progress)
        if done < n:
            raise self.info.length_error(
                done, f"{self.path!r} shrank while tensor {self.name!r} was copied: "
            )


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
    """The hex SHA-256 of a file, read with ``readinto`` a bounded chunk at a time."""
    hasher = hashlib.sha256()
    view = _buffer()
    with open_regular_raw(path) as f:
        while got := f.readinto(view):
            hasher.update(view[:got])
    return hasher.hexdigest()


def _hash_later(pool: ThreadPoolExecutor, path: str) -> Callable[[], str]:
    """The SHA-256 of ``path``, computed in ``pool`` while the caller goes on
    (inline when no thread can start, as at interpreter exit)."""
    try:
        return pool.submit(sha256_file, path).result
    except RuntimeError:
        digest = sha256_file(path)
        return lambda: digest


def tensor_sources(tensors: object) -> list[TensorSource]:
    """Check and describe every tensor of ``tensors`` (a mapping of names to
    :class:`WeightTensor`, :class:`~kiln_np.Payload` or arrays), in order,
    before anything is written.

    Raises
    ------
    KilnError
        TYPE for a non-mapping, a name that is not a str, a value of another
        type, an array dtype with no Kiln code; LENGTH for a payload whose
        bytes are not its ``byte_length``; the message names the tensor.
    """
    if not isinstance(tensors, Mapping):
        raise KilnError(
            "TYPE", f"expected a mapping of tensor names to tensors, found {show_value(tensors)}"
        )
    sources = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise KilnError("TYPE", f"expected tensor names as str, found {show_value(name)}")
        sources.append(_source(name, value))
    return sources


def _source(name: str, value: object) -> TensorSource:
    where = f"tensor {name!r}: "
    if isinstance(value, WeightTensor):
        if value.path is None:
            return TensorSource(name, value.info, value.payload().data, None, value.format_dtype)
        return TensorSource(name, value.info, None, value.path, value.format_dtype)
    try:
        if isinstance(value, Payload):
            info = payload_info(value.code, value.shape, value.layout)
            data = byte_view(value.data, "the payload's data")
            info.check_length(data.size)
            return TensorSource(name, info, data.data, None, None)
        if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
            arr = np.asarray(value)
            foreign = foreign_for_dtype(arr.dtype)
            if foreign is not None and foreign.bits == 8 * foreign.dtype.itemsize:
                # complex64, the FNUZ float8s: every bit is the element's; one block each
                info = payload_info(foreign.code, arr.shape, foreign.layout)
                raw = np.ascontiguousarray(arr, foreign.dtype).reshape(-1).view(U8)
                return TensorSource(name, info, raw.data, None, None)
            payload = from_numpy(arr)
            info = payload_info(payload.code, payload.shape, payload.layout)
            return TensorSource(name, info, payload.data, None, None)
    except KilnError as exc:
        raise exc.prefixed(where) from exc
    raise KilnError(
        "TYPE",
        f"{where}expected a kiln_np.Payload, a numpy array or a WeightTensor, "
        f"found {show_value(value)}",
    )


# -- directories --------------------------------------------------------------------


# -- JSON and typed metadata --------------------------------------------------------


def parse_json(text: bytes | str, where: str) -> Any:
    """Parse untrusted JSON: duplicate object keys, invalid UTF-8, nesting deeper
    than Python recurses, integers past 4300 digits are TYPE (``where`` starts
    the message)."""
    try:
        # Decoded here: json.loads would also take UTF-16 and UTF-32 bytes.
        decoded = text.decode("utf-8") if isinstance(text, bytes) else text
        return json.loads(decoded, object_pairs_hook=_unique_keys)
    except _DuplicateKeyError as exc:
        raise KilnError("TYPE", f"{where}expected unique keys, found {exc.key!r} twice") from None
    except RecursionError:
        raise KilnError(
            "TYPE", f"{where}expected JSON nested a bounded number of levels, found deeper"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the 4300-digit limit
        raise KilnError("TYPE", f"{where}expected valid JSON, found: {exc}") from None


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return result


def encode_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as JSON that keeps each value's type: every value becomes
    ``[tag, value]``.

    ==================== ====================================================
    value                JSON
    ==================== ====================================================
    str, bool, int       ``["str", "x"]``, ``["bool", true]``, ``["int", 5]``
    float                ``["float", "0x3ff0000000000000"]`` (binary64 bits)
    numpy scalar         ``["np.uint8", 5]``; floats by their bits:
                         ``["np.float32", "0x7f800001"]`` (a signalling NaN
                         stays signalling)
    numpy array          ``["np.ndarray", "<f4", [2, 3], "base64 bytes"]``
    list, tuple          ``["list", [[tag, value], ...]]``
    dict (str keys)      ``["dict", {key: [tag, value], ...}]``
    bytes                ``["bytes", "base64"]``
    ==================== ====================================================

    Raises
    ------
    KilnError
        TYPE for a key that is not a str or a value of another type.

    Examples
    --------
    >>> encode_metadata({"a": np.float32("nan"), "b": [1, "x"]})
    {'a': ['np.float32', '0x7fc00000'], 'b': ['list', [['int', 1], ['str', 'x']]]}
    """
    return {_key(k): _encode(v, k) for k, v in metadata.items()}


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise KilnError("TYPE", f"expected metadata keys as str, found {show_value(key)}")
    return key


def _encode(value: object, key: str) -> list[Any]:
    if isinstance(value, (np.generic, np.ndarray)):
        dt = _numeric(value.dtype, f"metadata {key!r}: ")
        if isinstance(value, np.generic):
            if dt.kind in "biu":
                return [f"np.{dt.name}", value.item()]
            return [f"np.{dt.name}", _float_bits(np.asarray(value, dt))]
        le = np.ascontiguousarray(value, dt.newbyteorder("<"))
        return ["np.ndarray", le.dtype.str, list(le.shape), base64.b64encode(le.data).decode()]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", _float_bits(np.asarray(value, np.float64))]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, (bytes, bytearray)):
        return ["bytes", base64.b64encode(value).decode()]
    if isinstance(value, Mapping):
        return ["dict", {_key(k): _encode(v, f"{key}.{k}") for k, v in value.items()}]
    if isinstance(value, Sequence):
        return ["list", [_encode(v, key) for v in value]]
    raise KilnError(
        "TYPE",
        f"metadata {key!r}: expected str, int, float, bool, bytes, a numpy number or "
        f"array, a list or a dict, found {show_value(value)}",
    )


_NUMERIC_TYPES = frozenset(
    np.dtype(c).type
    for c in ("?", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16")
)


def _numeric(dtype: np.dtype[Any], where: str) -> np.dtype[Any]:
    if dtype.type not in _NUMERIC_TYPES:
        raise KilnError(
            "TYPE", f"{where}expected numpy bool, integers or floats, found dtype {dtype}"
        )
    return dtype


def _float_bits(value: np.ndarray) -> str:
    """A float scalar as the hex of its little-endian bits: NaN payloads kept."""
    return "0x" + value.astype(value.dtype.newbyteorder("<")).tobytes()[::-1].hex()


def decode_metadata(encoded: object, where: str = "") -> dict[str, Any]:
    """The inverse of :func:`encode_metadata`.

    Raises
    ------
    KilnError
        TYPE for anything :func:`encode_metadata` does not write.

    Examples
    --------
    >>> v = decode_metadata(encode_metadata({"x": np.float32("-0.0")}))["x"]
    >>> type(v).__name__, bool(np.signbit(v))
    ('float32', True)
    """
    if not isinstance(encoded, dict):
        raise KilnError(
            "TYPE", f"{where}expected metadata as a JSON object, found {show_value(encoded)}"
        )
    return {k: _decode(v, f"{where}metadata {k!r}: ") for k, v in encoded.items()}


def _decode(item: object, where: str) -> Any:
    try:
        return _decode_unchecked(item, where)
    except KilnError:
        raise
    except (TypeError, ValueError, IndexError, OverflowError) as exc:
        raise KilnError(
            "TYPE", f"{where}expected [tag, value] as encode_metadata writes, found: {exc}"
        ) from None


def _decode_unchecked(item: object, where: str) -> Any:
    if not (isinstance(item, list) and item and isinstance(item[0], str)):
        raise KilnError("TYPE", f"{where}expected [tag, value], found {show_value(item)}")
    tag, *rest = item
    value = rest[0] if len(rest) == 1 else None
    simple: dict[str, type] = {"str": str, "bool": bool, "int": int}
    if tag in simple and type(value) is simple[tag]:
        return value
    if tag == "float" and isinstance(value, str):
        return float(_from_bits(value, np.dtype("<f8")))
    if tag == "bytes" and isinstance(value, str):
        return base64.b64decode(value, validate=True)
    if tag == "list" and isinstance(value, list):
        return [_decode(v, where) for v in value]
    if tag == "dict" and isinstance(value, dict):
        return {k: _decode(v, f"{where}{k!r}: ") for k, v in value.items()}
    if tag == "np.ndarray" and len(rest) == 3:
        dt, shape, data = _numeric(np.dtype(rest[0]), where), rest[1], rest[2]
        if isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape):
            raw = base64.b64decode(data, validate=True)
            return np.frombuffer(raw, dt).reshape(shape).copy()  # ValueError: wrong size
    if tag.startswith("np.") and len(rest) == 1:
        dt = _numeric(np.dtype(tag[3:]), where)
        if dt.kind in "biu" and type(value) in (int, bool):
            return dt.type(value)
        if dt.kind in "fc" and isinstance(value, str):
            return _from_bits(value, dt.newbyteorder("<"))[()]
    raise KilnError("TYPE", f"{where}expected [tag, value], found {show_value(item)}")


def _from_bits(text: str, dtype: np.dtype[Any]) -> np.ndarray:
    if not text.startswith("0x"):
        raise ValueError(f"expected 0x and hex digits, found {text[:20]!r}")
    raw = int(text, 16).to_bytes(dtype.itemsize, "little")  # OverflowError: too many
    return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="))[0:1].reshape(())


class Metadata(Mapping[str, Any]):
    """Read-only key/values of a weight file, with each key's type name in the
    format that wrote it where that format has one (:attr:`types`, as GGUF's
    ``"uint32"``, ``"array[string]"``; None otherwise).

    Examples
    --------
    >>> m = Metadata({"n": np.uint32(3)}, {"n": "uint32"})
    >>> m["n"], m.types["n"]
    (np.uint32(3), 'uint32')
    """

    def __init__(self, values: Mapping[str, Any], types: Mapping[str, str] | None = None) -> None:
        self._values = dict(values)
        self.types: Mapping[str, str] | None = (
            None if types is None else MappingProxyType(dict(types))
        )

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Metadata({self._values!r})"


# -- opening ------------------------------------------------------------------------


@set_module("kiln_np")
def open_weights(path: PathLike, *, verify: bool = False) -> Weights:
    """Open a weight file (or directory), recognised from its content.

    Parameters
    ----------
    path : str or os.PathLike
        A safetensors, GGUF or ONNX file; a sharded safetensors checkpoint (its
        ``*.safetensors.index.json``, or the directory holding it); the first
        split of a GGUF; a Kiln payload directory.  The module docstring gives
        the order in which formats are tried.
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
        TYPE for a file no format recognises (showing its first bytes in hex),
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
    >>> kiln_np.save_weights(path, {"w": np.eye(2, dtype=np.float32)}, format="safetensors")
    >>> w = kiln_np.open_weights(path)
    >>> w.format, list(w), w["w"].code, w["w"].byte_length
    ('safetensors', ['w'], <Code.F32: 2>, 16)
    >>> w.close(); import shutil; shutil.rmtree(d)
    """
    name = os.path.realpath(check_path(path))
    if isinstance(verify, bool) is False:
        raise KilnError("TYPE", f"expected verify to be a bool, found {show_value(verify)}")
    from kiln_np import safetensors

    if os.path.isdir(name):
        if os.path.lexists(os.path.join(name, MANIFEST)):
            return _open_kiln(name, verify)
        indexes = sorted(f for f in os.listdir(name) if f.endswith(safetensors.INDEX_SUFFIX))
        if len(indexes) == 1:
            return safetensors.open_safetensors(os.path.join(name, indexes[0]))
        found = f"{len(indexes)} indexes ({', '.join(indexes[:4])})" if indexes else "neither"
        raise KilnError(
            "TYPE",
            f"{name!r}: expected a directory holding {MANIFEST} (a Kiln payload directory) "
            f"or one *{safetensors.INDEX_SUFFIX} (a sharded safetensors checkpoint), "
            f"found {found}",
        )
    with open_regular_raw(name) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(_HEAD)
    base = os.path.basename(name)
    if base == MANIFEST:
        return _open_kiln(os.path.dirname(name), verify)
    if base.endswith(safetensors.INDEX_SUFFIX) and head.lstrip()[:1] == b"{":
        return safetensors.open_safetensors(name)
    if head[:4] == b"GGUF":
        return _open_gguf(name)
    if safetensors.looks_like_safetensors(head, size):
        return safetensors.open_safetensors(name)
    if head[:1] == b"\x08":
        return _open_onnx(name, head)
    shown = f"the bytes {head.hex(' ')}{' ...' * (size > _HEAD)}" if head else "an empty file"
    raise KilnError(
        "TYPE",
        f"{name!r}: expected a weight file (safetensors, GGUF, ONNX, a Kiln payload directory "
        f"or a sharded checkpoint), found {shown}",
        found=head,
    )


def _open_gguf(path: str) -> Weights:
    from kiln_np import gguf

    return gguf.open_gguf(path)


def _open_onnx(path: str, head: bytes) -> Weights:
    try:
        import onnx
        from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError(
            f"{path!r} starts like an ONNX model (byte 0x08); reading ONNX needs onnx: "
            "pip install 'kiln-np[onnx]'"
        ) from exc
    from kiln_np.onnx import model_to_kiln

    try:
        # format= stops onnx choosing a text parser from the file name.
        model = onnx.load(path, format="protobuf", load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise KilnError(
            "TYPE",
            f"{path!r}: expected a weight file; it starts like an ONNX model "
            f"({head.hex(' ')}) but does not parse as one: {exc}",
            found=head,
        ) from None
    initializers = model.graph.initializer
    pairs = list(model_to_kiln(model, os.path.dirname(path)))
    tensors = [
        WeightTensor(
            name,
            payload_info(p.code, p.shape, p.layout),
            None,
            onnx.TensorProto.DataType.Name(init.data_type),
            data=p.data,
        )
        for (name, p), init in zip(pairs, initializers, strict=True)
    ]
    metadata = {
        "ir_version": int(model.ir_version),
        "producer_name": model.producer_name,
        "producer_version": model.producer_version,
        "domain": model.domain,
        "model_version": int(model.model_version),
        "opset_import": {o.domain: int(o.version) for o in model.opset_import},
        "metadata_props": {p.key: p.value for p in model.metadata_props},
    }
    return Weights(tensors, format="onnx", metadata=metadata, path=path)


# -- the Kiln payload directory -------------------------------------------------------


def _open_kiln(directory: str, verify: bool) -> Weights:
    manifest = os.path.join(directory, MANIFEST)
    where = f"{manifest!r}: "
    with open_regular_raw(manifest) as f:
        doc = parse_json(f.read(), where)
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
    tensors = [_kiln_tensor(directory, where, i, e, old, verify) for i, e in enumerate(entries)]
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
        tensors,
        format="kiln",
        metadata=metadata,
        path=directory,
        files=[t._file for t in tensors if t._file is not None],
    )


_ENTRY_KEYS = ("name", "file", "code", "layout", "shape", "sha256")


def _kiln_tensor(
    directory: str, where: str, index: int, entry: object, old: bool, verify: bool
) -> WeightTensor:
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
    mapped = MappedFile.open(path)
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
    label = info.layout.name if info.layout is not None else info.element.name
    return WeightTensor(name, info, mapped, label)


def _kiln_files(directory: str) -> set[str] | None:
    """What a previous Kiln directory save wrote (its manifest and payload files)."""
    try:
        with open_regular_raw(os.path.join(directory, MANIFEST)) as f:
            doc = json.loads(f.read())
        return {MANIFEST, *(str(t["file"]) for t in doc["tensors"])}
    except (OSError, ValueError, TypeError, KeyError, RecursionError):  # KilnError too
        return None


def _file_name(index: int, name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "tensor"
    return f"{index:04d}_{cleaned[:100]}.kiln"


def _save_kiln(
    path: str,
    sources: list[TensorSource],
    metadata: Mapping[str, Any] | None,
    source_format: str | None,
    progress: Progress | None,
) -> None:
    encoded = {} if metadata is None else encode_metadata(metadata)
    types = getattr(metadata, "types", None)
    # Each file is hashed as written, read back from the page cache in a helper
    # thread while the next one is copied (in the kernel): hashing costs little
    # more than one pass, and the digest is of the bytes on disk.
    with building_directory(path, _kiln_files) as tmp, ThreadPoolExecutor(1) as pool:
        entries: list[dict[str, Any]] = []
        digests = []
        for index, source in enumerate(sources):
            info, file = source.info, _file_name(index, source.name)
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
        manifest = {
            "format": _MANIFEST_FORMAT,
            "source_format": source_format,
            "metadata": encoded,
            "metadata_types": None if types is None else dict(types),
            "tensors": entries,
        }
        # One line per tensor: readable, and diffable.
        head = json.dumps({k: v for k, v in manifest.items() if k != "tensors"}, allow_nan=False)
        rows = ",\n".join("  " + json.dumps(e, allow_nan=False) for e in entries)
        body = f"\n{rows}\n" if entries else ""
        text = f'{head[:-1]}, "tensors": [{body}]}}\n'

        with open(os.path.join(tmp, MANIFEST), "x", encoding="utf-8") as f:
            f.write(text)


# -- saving -------------------------------------------------------------------------


@set_module("kiln_np")
def save_weights(
    path: PathLike,
    tensors: Mapping[str, Any],
    *,
    format: str,
    metadata: Mapping[str, Any] | None = None,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> None:
    """Write named tensors as safetensors, GGUF or a Kiln payload directory.

    Every tensor is checked against what the format can hold before anything
    is written; data is streamed a bounded chunk at a time, bit for bit; the
    result appears whole or not at all (a file: a temporary sibling renamed
    into place; a directory: built beside ``path`` and renamed into place).

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
        :func:`encode_metadata` keeps, with their types.
    max_shard_size : int, optional
        safetensors: write a sharded checkpoint into the directory ``path``
        (``model-00001-of-0000N.safetensors`` ... and
        ``model.safetensors.index.json``); GGUF: splits.  Not for ``"kiln"``.
    progress : callable, optional
        Called with each number of payload bytes written.

    Raises
    ------
    KilnError
        TYPE for an unknown format, a tensor the format cannot hold (naming
        the tensor and its type), a bad name or metadata; SHAPE (GGUF: more
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
    >>> kiln_np.save_weights(path, {"w": np.zeros(3, np.uint8)}, format="safetensors",
    ...                      metadata={"format": "pt"})
    >>> kiln_np.open_weights(path).metadata
    mappingproxy({'format': 'pt'})
    >>> import shutil; shutil.rmtree(d)
    """
    target = written_path(check_path(path))
    if format not in ("safetensors", "gguf", "kiln"):
        raise KilnError(
            "TYPE",
            f"expected format 'safetensors', 'gguf' or 'kiln', found {show_value(format)}",
        )
    if format == "gguf":
        from kiln_np import gguf

        types = getattr(metadata, "types", None)
        gguf.write_gguf(
            target,
            tensors,
            metadata,
            metadata_types=types,
            max_shard_size=max_shard_size,
            progress=progress,
        )
        return
    if format == "safetensors":
        from kiln_np.safetensors import save_safetensors

        save_safetensors(
            target, tensors, metadata=metadata, max_shard_size=max_shard_size, progress=progress
        )
        return
    if max_shard_size is not None:
        raise KilnError(
            "TYPE", "expected max_shard_size only for safetensors or GGUF, found it for 'kiln'"
        )
    sources = tensor_sources(tensors)
    source_format = tensors.format if isinstance(tensors, Weights) else None
    _save_kiln(target, sources, metadata, source_format, progress)
