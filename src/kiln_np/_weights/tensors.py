"""The tensors of a weight file: ``WeightTensor`` (one named tensor, its checked
description and where its bytes are) and ``Weights`` (a read-only mapping of
them, in file order, that owns the files' maps).

Opening reads headers only.  Each file is memory-mapped read-only the first
time one of its tensors hands out a payload, once per file
(:class:`~kiln_np._weights.mapped.MappedFile`); :meth:`Weights.close` releases
every map that no handed-out payload still references (a memoryview or array
made from a payload keeps its map alive until it is dropped).

A tensor pickles by reference: the file's absolute path and identity (device,
inode, size, modification time: a file replaced since is TYPE when mapped), the
payload's offset and its description; unpickled, it maps only the pages of its
own payload.  A
:class:`Weights` pickles as its path and the function of the format that
opened it (handed down by that format, so this module names none).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from kiln_np._codec import Payload, to_numpy
from kiln_np._core.checks import set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Layout, code_label

from .mapped import FileIdentity, MappedFile

__all__ = ["WeightTensor", "Weights", "mapped_file"]


@set_module("kiln_np")
class WeightTensor:
    """One named tensor of a weight file: its description and where its bytes are.

    Made by :func:`kiln_np.open_weights`; nothing is read until :meth:`payload` (or
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
    >>> _ = kiln_np.save_weights(path, {"w": np.arange(3, dtype=np.float32)}, format="safetensors")
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
            When its :class:`Weights` was closed (payloads handed out before
            stay valid).
        KilnError
            TYPE when the file was replaced or modified since it was opened
            (and not yet mapped); LENGTH when it has shrunk below the
            payload's end.
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
                tuple(self._file.identity),
                _host(),
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


def mapped_file(tensor: WeightTensor) -> MappedFile | None:
    """The file holding ``tensor``'s payload, or None for bytes held in memory:
    for writers, which copy from it after checking it is still the file that
    was opened."""
    return tensor._file


def _host() -> str:
    import platform  # only when pickling

    return platform.node()


def _reopen(
    path: str,
    identity: tuple[int | None, int, int, int],
    host: str,
    offset: int,
    code: int,
    shape: tuple[int, ...],
    layout: Layout | None,
    name: str,
    format_dtype: str,
) -> WeightTensor:
    info = payload_info(code, shape, layout).with_offset(offset)
    was = FileIdentity(*identity)
    if host != _host():  # another machine numbers a network file system's devices anew
        was = was._replace(device=None)
    file = MappedFile(path, was, (offset, offset + info.byte_length))
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

    Returned by :func:`kiln_np.open_weights`.  A context manager: leaving it (or
    :meth:`close`) releases the file maps that no handed-out payload still
    uses; payloads already handed out stay valid until they are dropped, and
    no tensor hands out a new one.

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

    Parameters
    ----------
    tensors : iterable of WeightTensor
        In file order; names must be unique (TYPE otherwise).
    format, metadata, path
        As the attributes.
    files : iterable of MappedFile
        The files the tensors map, closed by :meth:`close`.
    opener : callable
        The format's function that opens ``path`` again: what the mapping
        pickles as.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> tensors = {"b": np.zeros(2, np.int8), "a": np.ones((2, 2), np.float16)}
    >>> _ = kiln_np.save_weights(d + "/w", tensors, format="kiln", metadata={"step": 3})
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
        opener: Callable[[str], Weights],
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
        self._opener = opener

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
        released when it is dropped).  No tensor hands out a new payload after
        this, whether its file was mapped or not: :meth:`~WeightTensor.payload`
        raises ``ValueError``; payloads handed out before stay valid."""
        for file in self._files:
            file.close()

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (self._opener, (self.path,))

    def __repr__(self) -> str:
        return f"Weights({self.format!r}, {self.path!r}, {len(self)} tensors)"
