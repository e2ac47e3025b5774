"""Tensors to write: ``TensorSource`` (a name, a checked description and where the
bytes are), ``tensor_sources`` (every tensor of a mapping checked before anything is
written) and copying payload bytes into a file (in the kernel where it can, a bounded
chunk at a time where it cannot) or hashing them.

A format writer turns the caller's mapping into sources with
:func:`tensor_sources`, writes a file through ``kiln_np._files.io.replacing`` or a
directory through ``kiln_np._files.io.building_directory``, and copies each payload
with :meth:`TensorSource.write_to`.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from kiln_np._codec import Payload, from_numpy
from kiln_np._core.checks import U8, byte_view, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import foreign_for_dtype
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._files.io import open_regular_raw, write_all
from kiln_np._files.payload import LazyPayload

from .mapped import MappedFile
from .tensors import WeightTensor, mapped_file

__all__ = ["Progress", "TensorSource", "sha256_file", "tensor_sources"]

_COPY_CHUNK = 8 << 20  # bytes per read/write when payload bytes pass through Python

Progress = Callable[[int], None]
"""Called with each number of payload bytes written."""


class TensorSource(NamedTuple):
    """One tensor to write: its name, checked description and where its bytes are.

    Exactly one of ``data`` (bytes in memory) and ``file`` (the weight file
    holding the payload at ``info.offset``) is set.  ``format_dtype`` is the
    source format's type name when the tensor came from a weight file.
    """

    name: str
    info: PayloadInfo
    data: memoryview | None
    file: MappedFile | None
    format_dtype: str | None

    def write_to(self, fd: int, *, progress: Progress | None = None) -> None:
        """Append the payload to the open file descriptor ``fd``.

        In memory: written from the buffer.  From a file: copied in the kernel
        (``os.copy_file_range``), or where that cannot be used read with
        ``readinto`` a bounded chunk at a time; never mapped, so a source
        truncated meanwhile is a LENGTH error, not SIGBUS.  The file is
        checked to be the one that was opened (TYPE when it was replaced or
        modified since).
        """
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
                done = _copy_in_kernel(src.fileno(), self.info.offset, n, fd, progress)
                if done < n:
                    done += _copy_through(src, self.info.offset + done, n - done, fd, progress)
        except KilnError as exc:  # replaced or modified since it was opened
            raise exc.prefixed(f"tensor {self.name!r}: ") from None
        if done < n:
            raise self.info.length_error(
                done, f"{self.file.path!r} shrank while tensor {self.name!r} was copied: "
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


def tensor_sources(tensors: object) -> list[TensorSource]:
    """Check and describe every tensor of ``tensors`` (a mapping of names to
    :class:`WeightTensor`, :class:`~kiln_np.Payload` or arrays), in order,
    before anything is written.

    Values are taken as they are (a numpy scalar as a 0-d array, a
    :class:`~kiln_np.LazyPayload` decoded from its file); another library's
    array (torch, jax, ...) is refused, saying how to make it a numpy array.

    Raises
    ------
    KilnError
        TYPE for a non-mapping, a name that is not a str, a value of another
        type (another library's array included), an array dtype with no Kiln
        code; LENGTH for a payload whose bytes are not its ``byte_length``;
        the message names the tensor.

    Examples
    --------
    >>> [(s.name, s.info.byte_length, s.file) for s in tensor_sources({"w": np.ones(3, "<f4")})]
    [('w', 12, None)]
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
        if isinstance(value, (np.ndarray, np.generic, LazyPayload)):
            arr = np.asarray(value)  # a LazyPayload decodes (and checks) its file
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
        f"found {_foreign_array(value) or show_value(value)}",
    )


def _foreign_array(value: object) -> str | None:
    """Another library's array (torch, jax, cupy, ...) as a message shows it,
    with what to do, or None for anything else.  kiln_np does not convert them
    itself: numpy's ``__array__`` works for some dtypes and fails for the ones
    Kiln is for (a torch bfloat16 or float8 tensor)."""
    if not any(hasattr(value, a) for a in ("__array__", "__dlpack__", "__array_interface__")):
        return None
    kind = type(value)
    dtype = show_value(getattr(value, "dtype", None)).partition(" ")[2]
    return (
        f"a {kind.__module__}.{kind.__qualname__} of dtype {dtype}: kiln_np converts no "
        "other library's arrays; pass a numpy array: np.asarray(x), or t.numpy() for a CPU "
        "torch tensor of a numpy dtype, and for torch's bfloat16 and float8 types its bits "
        "viewed, t.view(torch.int16).numpy().view(ml_dtypes.bfloat16), "
        "t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)"
    )
