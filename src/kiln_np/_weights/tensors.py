"""One tensor of a weight file: ``WeightTensor`` (one named tensor, its checked
description and where its bytes are); ``kiln_np._weights.weights`` holds the
mapping of them.

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

import math
from typing import Any

import numpy as np

from kiln_np._codec import Payload, to_numpy
from kiln_np._core.checks import set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import ForeignType
from kiln_np._core.payload import PayloadInfo, check_representable, payload_info
from kiln_np._core.table import Layout, as_dtype, code_label
from kiln_np._quants.blocks import Block
from kiln_np._quants.decode import OUTPUT_DTYPES, dequantize_blocks
from kiln_np._quants.elements import element_of

from .mapped import FileIdentity, MappedFile
from .summary import human_bytes

__all__ = ["WeightTensor", "mapped_file", "private_payload"]


@set_module("kiln_np")
class WeightTensor:
    """One named tensor of a weight file: its description and where its bytes are.

    Made by :func:`kiln_np.open_weights`; nothing is read until :meth:`payload` (or
    :meth:`numpy`, ``np.asarray``) is called.

    A tensor speaks in elements wherever its elements have an exact numeric
    reading; its payload keeps the blocks:

    - **A closed code** (f32, bf16, e2m1, ...): :attr:`shape` is the element
      shape, which is also the payload's; :meth:`numpy` decodes the payload.
    - **A GGML quantized type with a decoder** (code ``0x4700 + type id``,
      ``Layout("ggml.<type>", bytes)``; ``kiln_np.gguf.dequantize`` knows it):
      :attr:`shape` is the logical element shape, the block shape with the
      last axis times the block's elements (a Q8_0 payload of ``(512, 16)``
      blocks is a ``(512, 512)`` tensor); :meth:`numpy` is its exact float32
      values, as llama.cpp computes them: a new array.
    - **A foreign element type that fills its bytes** (the FNUZ float8s,
      complex64, complex128; see ``kiln_np._core.foreign``): one element per
      block, so :attr:`shape` is the block shape; :meth:`numpy` is a
      zero-copy, read-only view of the bytes as the numpy or ml_dtypes type.
    - **A GGML type kiln_np has no decoder for** (an unknown type id, a
      known type without a decoder): :attr:`shape` is the block shape, and
      :meth:`numpy` (``np.asarray``) is TYPE: its numbers are unknown, and
      bytes handed out as if they were numbers would be read as such;
      :meth:`payload` hands out the bytes.
    - **Any other opaque code** (an unknown layout, the 2- and 6-bit foreign
      types): :attr:`shape` is the block shape and :meth:`numpy` the
      payload's block bytes, uint8 of shape ``(*shape, block bytes)``.

    The blocks stay on the payload: ``t.payload().shape`` and
    ``t.info.shape`` are the block shape for every opaque code, and
    ``t.payload()`` hands out the raw bytes.

    Attributes
    ----------
    name : str
        The tensor's name in the file.
    code : int
        The Kiln code (a :class:`~kiln_np.Code` for closed codes).
    shape : tuple of int
        The element shape (C order; the block shape for opaque codes with no
        numeric reading, see above).
    size : int
        The element count, ``prod(shape)``.
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
        """The element shape (the block shape for opaque codes with no numeric
        reading); the payload's own shape is ``info.shape``."""
        block = self._block()
        if block is None:
            return self.info.shape
        blocks = self.info.shape
        return (*blocks[:-1], blocks[-1] * block.elements) if blocks else (block.elements,)

    @property
    def size(self) -> int:
        """The element count, ``prod(shape)`` (as numpy's ``ndarray.size``)."""
        return math.prod(self.shape)

    def _block(self) -> Block | None:
        """The decodable GGML block type of the payload, or None."""
        return element_of(self.info.code, self.info.layout).decoded

    def _foreign(self) -> ForeignType | None:
        """The foreign element type whose bits fill each block, or None."""
        element = element_of(self.info.code, self.info.layout)
        return element.foreign if element.fills else None

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
        """The elements, of shape :attr:`shape`.

        A read-only view of the map for whole-byte codes and foreign types
        that fill their bytes (the FNUZ float8s, complex: as the ml_dtypes or
        numpy type); unpacked for 4-bit codes (bool bytes and padding nibbles
        checked: TYPE); for a decodable GGML quantized type, a new float32
        array of its exact values (``kiln_np.gguf.dequantize``); for other
        opaque codes the block bytes, ``to_numpy(*tensor.payload())``.

        Raises
        ------
        KilnError
            TYPE for a GGML type kiln_np has no decoder for, naming
            :meth:`payload` for its bytes; as :meth:`payload` raises.

        Examples
        --------
        >>> from kiln_np import Layout
        >>> block = bytes([0x00, 0x38]) + bytes([2, 0xFE] * 16)  # Q8_0: d = 0.5
        >>> info = payload_info(0x4708, (1,), Layout("ggml.q8_0", 34))
        >>> t = WeightTensor("w", info, None, "Q8_0", data=memoryview(block))
        >>> t.shape, t.size, t.payload().shape, t.numpy()[:3].tolist()
        ((32,), 32, (1,), [1.0, -1.0, 1.0])
        """
        return self._elements(None)

    def _elements(self, dtype: np.dtype[Any] | None) -> np.ndarray:
        """:meth:`numpy`, a GGML type dequantized straight to ``dtype`` when it is
        an output dtype of the decoders (else None: float32)."""
        element = element_of(self.info.code, self.info.layout)
        if element.kind == "ggml" and not element.decodable:
            assert element.block is not None
            raise KilnError(
                "TYPE",
                f"tensor {self.name!r}: expected numbers, found GGML blocks of "
                f"{element.block.name} ({self.format_dtype}), a type kiln_np has no decoder "
                "for: its values are unknown; its bytes are t.payload()",
                code=self.info.code,
            )
        payload = self.payload()
        block = self._block()
        if block is not None:
            out = np.dtype(np.float32)
            if dtype is not None and dtype.name in OUTPUT_DTYPES and dtype.isnative:
                out = dtype
            try:
                return dequantize_blocks(block.name, payload.data, self.info.shape, out)
            except KilnError as exc:
                raise exc.prefixed(f"tensor {self.name!r}: ") from None
        foreign = self._foreign()
        if foreign is not None:
            self.info.check_length(memoryview(payload.data).nbytes)
            return np.frombuffer(payload.data, foreign.dtype).reshape(self.info.shape)
        return to_numpy(*payload)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        wanted = None if dtype is None else as_dtype(dtype)
        if copy is False:
            if self.info.element.packed:
                raise ValueError("4-bit payloads unpack into a new array: copy=False is impossible")
            if self._block() is not None:
                raise ValueError(
                    "GGML quantized payloads dequantize into a new array: copy=False is impossible"
                )
        arr = self._elements(wanted)
        fresh = self._block() is not None or self.info.element.packed
        if wanted is not None and arr.dtype != wanted:
            check_representable(arr.shape, wanted.itemsize, f"tensor {self.name!r} as {wanted}: ")
            if copy is False:
                raise ValueError(
                    f"{arr.dtype} elements as {wanted}: a new array, copy=False is impossible"
                )
            return arr.astype(wanted)
        return arr.copy() if copy and not fresh else arr

    def __reduce__(self) -> tuple[Any, ...]:
        info = self.info
        if self._file is None:  # bytes held in memory travel as bytes
            assert self._data is not None
            args = (self.name, int(info.code), info.shape, info.layout, self.format_dtype)
            return (_from_bytes, (*args, bytes(self._data)))
        if type(self._file) is not MappedFile:  # a URL's file pickles itself
            return (WeightTensor, (self.name, info, self._file, self.format_dtype))
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
        shape = self.shape
        blocks = f", blocks {self.info.shape}" if shape != self.info.shape else ""
        return (
            f"WeightTensor({self.name!r}, {code_label(int(self.info.code))}, shape "
            f"{shape}{blocks}, {self.info.byte_length} bytes, {self.format_dtype})"
        )

    def _html_rows(self) -> list[tuple[str, str]]:
        """The (fact, value) rows a notebook shows."""
        return [
            ("name", self.name),
            ("shape", str(self.shape)),
            ("stored type", f"{self.format_dtype} ({code_label(int(self.info.code))})"),
            ("bytes", f"{self.info.byte_length:,} ({human_bytes(self.info.byte_length)})"),
        ]

    def _repr_html_(self) -> str:
        import html  # its entity table loads only when a notebook renders HTML

        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._html_rows()
        )
        return f"<table>{cells}</table>"


def mapped_file(tensor: WeightTensor) -> MappedFile | None:
    """The file holding ``tensor``'s payload, or None for bytes held in memory:
    for writers, which copy from it after checking it is still the file that
    was opened."""
    return tensor._file


def private_payload(tensor: WeightTensor) -> Payload:
    """``tensor``'s payload over writable memory that is not the file's: a view
    of the file's private, copy-on-write map
    (:meth:`~kiln_np._weights.mapped.MappedFile.private_view`), or a buffer of
    its own for a URL; for ``kiln_np.torch``, whose tensors cannot be read-only.
    A tensor held in memory (and a :class:`LogicalTensor`, TYPE) gives
    :meth:`WeightTensor.payload`."""
    file = tensor._file
    if file is None or type(tensor) is not WeightTensor:
        return tensor.payload()
    info = tensor.info
    data = file.private_view(info.offset, info.byte_length)
    return Payload(info.code, data, info.shape, info.layout)


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
