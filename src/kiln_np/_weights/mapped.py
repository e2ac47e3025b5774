"""A file of a weight file, memory-mapped read-only once, on first use.

Every tensor read from one file shares its :class:`MappedFile`, so a file is
mapped once however many tensors it holds; closing releases the map unless a
handed-out payload still uses it (then it goes when the last one is dropped).
A file truncated while mapped kills the reader with SIGBUS, as any map does
(docs/safety.md), so the size is checked against what was opened first.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading

from kiln_np._core.checks import check_regular_file
from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular_raw

__all__ = ["MappedFile"]


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

    Examples
    --------
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "f"), "wb") as f:
    ...     _ = f.write(b"header and payload")
    >>> file = MappedFile.open(os.path.join(d, "f"))
    >>> file.read(0, 6), bytes(file.view(11, 7))
    (b'header', b'payload')
    >>> file.close(); file
    MappedFile('...f', 18 bytes, closed)
    >>> import shutil; shutil.rmtree(d)
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
