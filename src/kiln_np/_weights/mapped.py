"""A file of a weight file, memory-mapped read-only once, on first use.

Every tensor read from one file shares its :class:`MappedFile`, so a file is
mapped once however many tensors it holds; closing releases the map unless a
handed-out payload still uses it (then it goes when the last one is dropped).

A file is reopened by its path when it is mapped (or its payloads are copied),
which may be long after it was opened, so its identity at open
(:class:`FileIdentity`: device, inode, size, modification time) is recorded and
checked again on the opened file: a file replaced or modified in between is
TYPE, never bytes of another file.  A file truncated while mapped still kills
the reader with SIGBUS, as any map does (docs/safety.md).
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import sys
import threading
from collections.abc import Iterator
from typing import NamedTuple

from kiln_np._core.checks import check_regular_file
from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular_raw

__all__ = ["FileIdentity", "MappedFile"]

# Python 3.13's mmap can map without keeping a duplicate of the descriptor
# (trackfd=False); before it, every live map holds one (docs/safety.md).
_MAP_OPTIONS = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class FileIdentity(NamedTuple):
    """What tells one file from another that later takes its path: ``st_dev``,
    ``st_ino``, ``st_size`` and ``st_mtime_ns``.  ``device`` is None when it
    cannot be compared (a tensor unpickled on another machine, where a network
    file system numbers devices per client)."""

    device: int | None
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        """The identity in a ``stat`` result."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def is_same_file(self, other: FileIdentity) -> bool:
        """Whether ``other`` is this file (perhaps modified since)."""
        return self.inode == other.inode and self.device in (None, other.device)


class MappedFile:
    """One file of a weight file, memory-mapped read-only on first use.

    Every tensor read from the file shares this object, so a file is mapped
    once however many tensors it holds.  ``window`` restricts the map to the
    pages of one byte range (an unpickled tensor maps only its own payload).

    Parameters
    ----------
    path : str
        The file (made absolute).
    identity : FileIdentity
        The file as it was opened; mapping, reading and copying check that
        the path still holds it.
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

    __slots__ = (
        "_base",
        "_lock",
        "_map",
        "_view",
        "closed",
        "identity",
        "path",
        "size",
        "stop",
    )

    def __init__(
        self, path: str, identity: FileIdentity, window: tuple[int, int] | None = None
    ) -> None:
        self.path = os.path.realpath(path)
        self.identity = identity
        self.size = identity.size
        start, self.stop = (0, self.size) if window is None else window
        self._base = start - start % mmap.ALLOCATIONGRANULARITY
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._lock = threading.Lock()
        self.closed = False

    @classmethod
    def open(cls, path: str) -> MappedFile:
        """The file at ``path``, checked to be a regular file (TYPE otherwise;
        ``OSError`` as the OS raises it, e.g. ``FileNotFoundError``)."""
        return cls(path, FileIdentity.of(check_regular_file(path)))

    @contextlib.contextmanager
    def opened(self, needed: int = 0) -> Iterator[io.RawIOBase]:
        """The file, opened again (unbuffered) and checked to be the one that
        was opened, holding at least ``needed`` bytes.

        Raises
        ------
        KilnError
            TYPE when the path now holds another file or the file was
            modified; LENGTH when it was cut below ``needed`` bytes.
        """
        with open_regular_raw(self.path) as f:
            self._check(FileIdentity.of(os.fstat(f.fileno())), needed)
            yield f

    def _check(self, found: FileIdentity, needed: int) -> None:
        was = self.identity
        same = was.is_same_file(found)
        if same and found.size < needed:
            raise KilnError(
                "LENGTH",
                f"{self.path!r}: expected a file of at least {needed} bytes (it was "
                f"{was.size} bytes when opened), found {found.size}",
                expected=needed,
                found=found.size,
            )
        if not same:
            change = "another file at that path (it was replaced)"
        elif found.size != was.size:
            change = f"it modified ({was.size} bytes when opened, {found.size} now)"
        elif found.mtime_ns != was.mtime_ns:
            change = "it modified (its modification time changed)"
        else:
            return
        raise KilnError(
            "TYPE",
            f"{self.path!r}: expected the file that was opened, found {change}: it changed "
            "since it was opened; open it again",
            expected=was,
            found=found,
        )

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``, read (not mapped): for headers.  Fewer
        come back when the file ends first."""
        with self.opened() as f:
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
        with self.opened(max(needed, self.stop)) as f:
            self._map = mmap.mmap(
                f.fileno(),
                self.stop - self._base,
                access=mmap.ACCESS_READ,
                offset=self._base,
                **_MAP_OPTIONS,
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
