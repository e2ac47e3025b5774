"""The I/O primitives: one way to open a file to read, one to fill a buffer from it, one
to write all of a buffer, one to replace a file and one to replace a directory crash-safely.

Every file kiln_np reads is opened by :func:`open_regular` (or its unbuffered
:func:`open_regular_raw`): anything but a regular file is refused before it is
opened, so a FIFO never blocks and a device never streams forever.  Every file it
writes goes through :func:`replacing` (a temporary sibling renamed over the target
on success) and every directory through :func:`building_directory`; every loop that
must write a whole buffer is :func:`write_all`, and every one that must fill a buffer
from a raw file :func:`read_all`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import operator
import os
import stat
import sys
from collections.abc import Callable, Iterator
from typing import IO

import numpy as np

from kiln_np._core.checks import U8, check_regular_file, written_path
from kiln_np._core.errors import KilnError

__all__ = [
    "TEMP_SUFFIX",
    "building_directory",
    "open_regular",
    "open_regular_raw",
    "read_all",
    "replacing",
    "write_all",
]

_COPY_BLOCK = 1 << 20  # bytes per read when a file's first bytes are kept


# -- reading -----------------------------------------------------------------


def open_regular(path: str) -> io.BufferedReader:
    """Open ``path`` for reading in binary, refusing anything but a regular file.

    The file type is checked before opening (opening a FIFO blocks until a
    writer comes; a device may never end), and again on the opened file in
    case the path was swapped in between; the open itself does not block.
    Payload files, weight files and :func:`replacing` read through it.

    Raises
    ------
    KilnError
        TYPE for a FIFO, a socket, a device or a directory.
    OSError
        As :func:`open` raises it (a missing file, no permission).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f, open_regular(f.name) as g:
    ...     g.read()
    b''
    """
    return os.fdopen(_regular_fd(path), "rb")


def open_regular_raw(path: str) -> io.FileIO:
    """:func:`open_regular`, unbuffered: the raw file, for ``readinto`` and
    ``os.copy_file_range`` (the weight-file readers and writers)."""
    return io.FileIO(_regular_fd(path), "r")


def read_all(f: io.RawIOBase, view: memoryview) -> int:
    """Fill ``view`` from the raw file ``f`` (one ``readinto`` may return less
    than asked); the number of bytes read, fewer only where the file ended.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"abc")
    ...     f.flush()
    ...     view = memoryview(bytearray(5))
    ...     with open_regular_raw(f.name) as raw:
    ...         read_all(raw, view), bytes(view)
    (3, b'abc\\x00\\x00')
    """
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def _regular_fd(path: str) -> int:
    check_regular_file(path)
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        check_regular_file(path, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- writing ---------------------------------------------------------------


TEMP_SUFFIX = ".part"
"""Temporary files are ``.NAME.kiln-np-RANDOM.part`` beside the target ``NAME``
(RANDOM is 12 hex digits; a very long ``NAME`` is cut to its first 30
characters).  One left behind by a killed writer is never read by kiln_np and
may be deleted when no write is running."""

_TEMP_TAG = ".kiln-np-"


def _sibling(target: str, suffix: str) -> str:
    """``.NAME.kiln-np-RANDOM<suffix>`` beside ``target`` (a long NAME cut to 30
    characters, so the name stays within NAME_MAX)."""
    directory, base = os.path.split(target)
    stem = base if len(os.fsencode(base)) <= 120 else base[:30]
    return os.path.join(directory, f".{stem}{_TEMP_TAG}{os.urandom(6).hex()}{suffix}")


@contextlib.contextmanager
def replacing(path: str, offset: int = 0) -> Iterator[tuple[str, IO[bytes]]]:
    """Write a new version of ``path`` crash-safely: yield ``(temp_path, file)``
    for a temporary sibling (holding a copy of ``path``'s first ``offset``
    bytes) and rename it over ``path`` when the block succeeds; on any failure
    the temporary file is removed and ``path`` is untouched.

    What ``open(path, "wb")`` would keep is kept: a symlink is written
    through (its target is replaced, the link stays), and an existing file's
    permission bits (``0o777``) go to the new file, which is created ``0600``
    until then.  A hard link is not: the rename gives ``path`` a new inode, so
    other names of the old file keep the old bytes.  An ``OSError`` names
    ``path``, never the temporary name.  Used by :func:`save_payload`,
    ``kiln_np.dask.to_payload`` and the CLI's outputs.

    Raises
    ------
    KilnError
        TYPE when ``path`` exists and is not a regular file (a FIFO, a device,
        a directory): it is not replaced.  LENGTH when ``offset`` bytes are
        to be kept and the file holds fewer.
    OSError
        When the directory cannot be written, with ``path`` as its filename.

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "p.bin")
    ...     with replacing(path) as (temp, f):
    ...         _ = f.write(b"new")
    ...     print(Path(path).read_bytes(), os.listdir(tmp))
    b'new' ['p.bin']
    """
    target = _written_file(path)
    try:
        mode: int | None = check_regular_file(path).st_mode
    except FileNotFoundError:
        if offset:  # the bytes to keep are missing
            raise _naming(errno.ENOENT, path) from None
        mode = None
    except OSError as exc:  # a symlink loop, no permission on the directory
        raise _naming(exc.errno, path) from None
    tmp = _sibling(target, TEMP_SUFFIX)
    # A new file gets 0o666 through the umask, as open() gives; a replaced
    # file's data is written while only its owner can open the temporary.
    created = 0o666 if mode is None else 0o600
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(tmp, flags, created)
    except OSError as exc:
        raise _naming(exc.errno, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            if offset:
                _copy_prefix(path, target, f, offset)
            yield tmp, f
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode) & 0o777)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and tmp in (exc.filename, exc.filename2):
            raise _naming(exc.errno, path) from None
        raise


def _written_file(path: str) -> str:
    """The file ``open(path, "wb")`` writes, as an absolute path: ``path`` with
    its final symlinks followed, each target joined to its link's directory and
    never normalised.  A lexical ``..`` is not the kernel's: ``missing/../x``
    must stay the ENOENT that ``open()`` gives, not become ``x`` (a command's
    own input)."""
    try:
        target = os.path.join(os.getcwd(), path)  # absolute, and still unnormalised
    except OSError as exc:  # the working directory was removed
        raise _naming(exc.errno, path) from None
    for _ in range(_MAX_SYMLINKS):
        try:
            link = os.readlink(target)
        except OSError:  # not a symlink, or missing: the file itself
            return target
        target = os.path.join(os.path.dirname(target), link)
    raise _naming(errno.ELOOP, path)


_MAX_SYMLINKS = 40  # Linux's limit on symlinks followed in one lookup


def _naming(code: int | None, path: str) -> OSError:
    """The ``OSError`` (its errno's subclass) for ``code``, naming ``path``."""
    if code is None:
        return OSError(f"cannot write {path!r}")
    return OSError(code, os.strerror(code), path)


def _copy_prefix(path: str, target: str, dst: IO[bytes], offset: int) -> None:
    block = bytearray(min(_COPY_BLOCK, offset))
    left = offset
    with open_regular(target) as src:
        while left:
            view = memoryview(block)[: min(left, len(block))]
            got = src.readinto(view)
            if not got:
                break
            dst.write(view[:got])
            left -= got
    if left:
        raise KilnError(
            "LENGTH",
            f"writing at offset {offset} of {path!r} keeps its first {offset} bytes: "
            f"expected {offset} bytes, but it holds {offset - left} (short by {left})",
            expected=offset,
            found=offset - left,
        )


def write_all(out: int | IO[bytes], data: np.ndarray | bytes | memoryview) -> None:
    """Write every byte of ``data`` to ``out``, a file descriptor or a binary file
    (a raw file or ``os.write`` may take part of a buffer per call).  An array is
    written as its bytes in C order."""
    if isinstance(data, np.ndarray):
        view = np.ascontiguousarray(data).reshape(-1).view(U8).data
    else:
        view = memoryview(data).cast("B")
    write = out.write if not isinstance(out, int) else lambda v: os.write(out, v)
    while view.nbytes:
        view = view[write(view) or 0 :]


# -- directories --------------------------------------------------------------------


@contextlib.contextmanager
def building_directory(path: str, keep: Callable[[str], set[str] | None]) -> Iterator[str]:
    """Build a directory beside ``path`` and swap it into place when the block
    succeeds: a crash leaves ``path`` as it was (plus a
    ``.NAME.kiln-np-RANDOM.part`` directory, which may be deleted).

    An existing ``path`` is replaced only when it is an empty directory or
    holds nothing but regular files (no symlink, no directory) that
    ``keep(path)`` lists (the files a previous save wrote; ``keep`` returns
    None when it does not recognise the directory); otherwise
    ``FileExistsError``.  On Linux the new directory and the old one
    are exchanged in one ``renameat2(RENAME_EXCHANGE)``, so ``path`` always
    names one of them; where the kernel or file system cannot, the old one is
    renamed aside (``.NAME.kiln-np-RANDOM.old``) and the new one into place.
    Either way the old one's files are then deleted, and it: a writer killed
    meanwhile leaves it under that temporary name, whole or partly deleted;
    a file someone else put there meanwhile is left there, with it.

    Permissions are kept as :func:`replacing` keeps a file's: the temporary
    directory is ``0700`` while it is written; then the directory gets the old
    one's permission bits (a new one: what ``mkdir`` gives), each file the
    bits of the old file of its name, and a file new to the directory the
    bits every old file shares (so nothing is more open than it was).
    """
    target = written_path(path)
    old = _replaceable(target, keep)
    tmp = _sibling(target, TEMP_SUFFIX)
    os.mkdir(tmp)  # 0777 through the umask, as mkdir gives: learnt, then closed
    try:
        made = stat.S_IMODE(os.stat(tmp).st_mode)
        os.chmod(tmp, 0o700)  # still empty: nothing was readable
        yield tmp
        _keep_modes(tmp, made, old)
        if old is None:
            os.rename(tmp, target)  # an empty directory is replaced by rename itself
            return
        if not _exchange(tmp, target):
            aside = _sibling(target, ".old")
            os.rename(target, aside)
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(aside, target)  # put the old one back
                raise
            tmp = aside
    except BaseException:
        _rmtree(tmp, ignore_errors=True)
        raise
    _remove_old(tmp, old)  # the old directory, now under the temporary name


def _rmtree(path: str, *, ignore_errors: bool = False) -> None:
    # shutil (with bz2, lzma and fnmatch) is imported when a directory is removed,
    # not by every command that might write one.
    import shutil

    shutil.rmtree(path, ignore_errors=ignore_errors)


def _remove_old(directory: str, old: dict[str, int]) -> None:
    """Delete the files of the old directory that the writer wrote (the names
    in ``old``), then the directory; anything else found there meanwhile is
    left, with the directory: never delete what the writer did not write."""
    for name in old:
        if name:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
    with contextlib.suppress(OSError):  # ENOTEMPTY: someone else's file appeared
        os.rmdir(directory)


def _keep_modes(tmp: str, made: int, old: dict[str, int] | None) -> None:
    """Give the files built in ``tmp`` and ``tmp`` itself their final permission
    bits (see :func:`building_directory`): ``old`` maps the old directory's
    entries (and ``""``, itself) to theirs."""
    if old is None:
        os.chmod(tmp, made)
        return
    files = [mode for name, mode in old.items() if name]
    shared = functools.reduce(operator.and_, files, 0o777)
    for name in os.listdir(tmp):
        os.chmod(os.path.join(tmp, name), old.get(name, shared))
    os.chmod(tmp, old[""])


def _replaceable(target: str, keep: Callable[[str], set[str] | None]) -> dict[str, int] | None:
    """None when ``target`` does not exist or is an empty directory; when it is a
    directory of only what ``keep`` names, the permission bits of it (``""``) and
    of each entry; else ``FileExistsError``."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        entries = set(os.listdir(target))
        if not entries:
            return None
        known = keep(target)
        if known is not None and entries <= known:
            modes = {"": stat.S_IMODE(st.st_mode) & 0o777}
            for name in entries:
                entry = os.lstat(os.path.join(target, name))
                if not stat.S_ISREG(entry.st_mode):  # the writer writes regular files only
                    break
                modes[name] = stat.S_IMODE(entry.st_mode) & 0o777
            else:
                return modes
        raise FileExistsError(
            errno.EEXIST,
            "expected a new directory, an empty one or one this writer wrote, found a "
            "directory holding other files",
            target,
        )
    raise FileExistsError(errno.EEXIST, "expected a directory path, found a file", target)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
# What renameat2 answers when this kernel or file system cannot exchange.
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM}


@functools.cache
def _renameat2() -> Callable[[bytes, bytes], int] | None:
    """``renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)`` through glibc's
    (2.28+) or musl's, returning 0 or the errno; None on another OS or libc."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # only where it can help

    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is None:
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int

    def exchange(a: bytes, b: bytes) -> int:
        failed = function(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE) != 0
        return ctypes.get_errno() if failed else 0

    return exchange


def _exchange(a: str, b: str) -> bool:
    """Swap the directory entries ``a`` and ``b`` atomically; False (nothing done)
    where this OS, kernel or file system cannot."""
    exchange = _renameat2()
    if exchange is None:
        return False
    code = exchange(os.fsencode(a), os.fsencode(b))
    if code in _NO_EXCHANGE:
        return False
    if code:
        raise OSError(code, os.strerror(code), a, None, b)
    return True
