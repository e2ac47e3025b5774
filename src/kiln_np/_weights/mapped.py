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

Payloads are views of a read-only map (a write through one would crash the
process, so none is writable).  ``kiln_np.torch`` hands torch, which has no
read-only tensors, views of a second map of the file instead, mapped privately
on first use (:meth:`MappedFile.private_view`): copy-on-write, so a write
copies the page it touches into the process's memory and the file never
changes (docs/interop.md#torch).
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

# A private map that may be written is charged to the commit limit as if every
# page would be (Linux refuses ACCESS_COPY of a file larger than RAM plus swap:
# ENOMEM); MAP_NORESERVE asks for no such reservation, as a read-only map needs
# none.  Python names the flag from 3.13; before, Linux's value where the
# architecture uses the generic one (elsewhere a plain private map).
_NORESERVE: int = getattr(mmap, "MAP_NORESERVE", 0)
if not _NORESERVE and sys.platform == "linux" and os.uname().machine in (
    "x86_64", "aarch64", "arm64", "i686", "armv7l", "riscv64", "s390x", "loongarch64"
):  # fmt: skip
    _NORESERVE = 0x4000


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
        "_private",
        "_private_view",
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
        self._private: mmap.mmap | None = None
        self._private_view: memoryview | None = None
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
                self._map, self._view = self._map_file(offset + length, private=False)
            start = offset - self._base
            return self._view[start : start + length]

    def private_view(self, offset: int, length: int) -> memoryview:
        """A writable memoryview of ``length`` bytes at ``offset`` of the file's
        private map (copy-on-write: a write copies its page into this process's
        memory; the file and :meth:`view` never see it).  One private map per
        file, mapped on first use: every private view of the same bytes shares
        the writes made through any of them.

        Examples
        --------
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp(); path = os.path.join(d, "f")
        >>> with open(path, "wb") as f:
        ...     _ = f.write(b"payload")
        >>> file = MappedFile.open(path)
        >>> mine = file.private_view(0, 7)
        >>> mine[0:1] = b"P"
        >>> with open(path, "rb") as f:
        ...     on_disk = f.read()
        >>> bytes(mine), bytes(file.view(0, 7)), on_disk
        (b'Payload', b'payload', b'payload')
        >>> del mine; file.close()
        >>> import shutil; shutil.rmtree(d)
        """
        if length == 0:
            return memoryview(bytearray())
        with self._lock:
            if self._private_view is None:
                self._private, self._private_view = self._map_file(offset + length, private=True)
            start = offset - self._base
            return self._private_view[start : start + length]

    def _map_file(self, needed: int, *, private: bool) -> tuple[mmap.mmap, memoryview]:
        if self.closed:
            raise ValueError(f"{self.path!r}: the weight file was closed")
        size = self.stop - self._base
        with self.opened(max(needed, self.stop)) as f:
            if not private:
                how: dict[str, int] = {"access": mmap.ACCESS_READ}
            elif sys.platform == "win32":
                how = {"access": mmap.ACCESS_COPY}
            else:
                flags = mmap.MAP_PRIVATE | _NORESERVE
                how = {"flags": flags, "prot": mmap.PROT_READ | mmap.PROT_WRITE}
            mapped = mmap.mmap(f.fileno(), size, offset=self._base, **how, **_MAP_OPTIONS)
        return mapped, memoryview(mapped)

    def close(self) -> None:
        """Release the maps, unless a handed-out payload or tensor still uses one:
        then it is released when the last of those is dropped."""
        with self._lock:
            self.closed = True
            for view in (self._view, self._private_view):
                if view is not None:
                    view.release()
            for mapped in (self._map, self._private):
                if mapped is not None:
                    with contextlib.suppress(BufferError):  # exported: dropping is enough
                        mapped.close()
            self._view = self._private_view = None
            self._map = self._private = None

    def __repr__(self) -> str:
        mapped = self._map is not None or self._private is not None
        state = "closed" if self.closed else ("mapped" if mapped else "not mapped")
        return f"MappedFile({self.path!r}, {self.size} bytes, {state})"
