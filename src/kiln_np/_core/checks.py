"""Checks and message pieces shared by every module.

Everything here has a public name: a leading underscore means "used only in
this module", so helpers that several modules need live here instead of being
imported across modules as ``_name``.  Nothing here knows about dtype codes;
the table (``table``) and the payload description (``payload``) build on it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from .errors import ErrorKind, KilnError

__all__ = [
    "MAX_INT64",
    "NEVER_CASTS",
    "U8",
    "byte_size",
    "byte_view",
    "check_int",
    "check_offset",
    "check_path",
    "check_regular_file",
    "printable",
    "set_module",
    "short_or_long",
    "show_int",
    "show_value",
    "storage_error",
    "written_path",
]

U8 = np.dtype(np.uint8)
NEVER_CASTS = "kiln_np never casts: convert the array first"
"""The one wording for refusing an array whose dtype is not the one asked for."""
MAX_INT64 = 2**63 - 1  # numpy's npy_intp and the largest file offset (off_t)
_SHOWN_BITS = 128  # integers wider than this are shown by their bit length

T = TypeVar("T")


def set_module(module: str) -> Callable[[T], T]:
    """Decorator: give a public function or class the ``__module__`` users import
    it from (numpy's ``set_module``), so tracebacks and reprs say
    ``kiln_np.KilnError``, not ``kiln_np._core.errors.KilnError``."""

    def decorate(obj: T) -> T:
        obj.__module__ = module
        return obj

    return decorate


def show_int(value: int) -> str:
    """An integer for a message: in full up to 128 bits, else by its size.

    Python refuses to format integers of more than 4300 digits, and a message
    should not be megabytes long anyway.

    >>> show_int(7), show_int(10**5000)
    ('7', 'an integer of 16610 bits')
    """
    if value.bit_length() > _SHOWN_BITS:
        sign = "a negative" if value < 0 else "an"
        return f"{sign} integer of {value.bit_length()} bits"
    return str(value)


def show_value(value: object) -> str:
    """``'int 5'``, ``'str 'x''``: a value's type and a bounded repr, for messages."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return f"{type(value).__name__} {show_int(int(value))}"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ (or a huge int inside a container)
        text = "<unprintable>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def printable(text: str) -> str:
    r"""``text`` as a terminal shows it safely: every character that is not
    printable as its Python escape, without quotes, the rest as it is.

    The one escaping of text output (every ``kiln-np`` table, line and error,
    the text forms of the notebook objects, the labels of pictures): an ESC,
    BEL or CR from a hostile file's names never reaches a terminal, and a lone
    surrogate (bytes that are not UTF-8) shows as ``\udcff`` instead of
    failing to encode.  Not printable: controls (``\x1b``, ``\n``, ``\x9b``),
    format characters (``\u202e``), separators other than the space, lone
    surrogates, unassigned code points; a backslash is left as it is (``--json``
    tells a name spelled ``a\x1b`` from one holding ESC).

    >>> print(printable("blk.0.a\x1b[2Jb\x07\r"), printable("caf\udcc3"), printable("café 中"))
    blk.0.a\x1b[2Jb\x07\r caf\udcc3 café 中
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def short_or_long(expected: int, found: int) -> str:
    """``'short by 3'`` or ``'long by 3'``, for LENGTH messages."""
    return f"{'short' if found < expected else 'long'} by {show_int(abs(found - expected))}"


def check_int(
    value: object,
    what: str,
    *,
    kind: ErrorKind = "TYPE",
    minimum: int = 0,
    maximum: int | None = None,
) -> int:
    """``value`` as a Python int in ``[minimum, maximum]``, or a ``kind`` error.

    ``bool`` is not an integer here, nor is a float; ``what`` names the value
    in the message (``"offset"``, ``"rows"``).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{show_int(maximum)}"
        raise KilnError(
            kind, f"expected {what} to be an integer {bound}, found {show_value(value)}"
        )
    n = int(value)
    if n < minimum or (maximum is not None and n > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{show_int(maximum)}"
        raise KilnError(kind, f"expected {what} to be an integer {bound}, found {show_int(n)}")
    return n


_SIZE = re.compile(
    r"(?P<whole>[0-9]+)(?:\.(?P<fraction>[0-9]+))?\s*(?P<unit>(?:[kmgt]i?)?b)?", re.IGNORECASE
)
_UNITS = {
    **{f"{p}B": 10 ** (3 * i) for i, p in enumerate(["", "K", "M", "G", "T"])},
    **{f"{p}IB": 2 ** (10 * i) for i, p in enumerate(["K", "M", "G", "T"], 1)},
}
"""Bytes per unit, as Hugging Face reads them: ``GB`` is 10**9, ``GiB`` 2**30."""
_SIZE_HELP = "a size in bytes such as 5GB (5*10**9), 500MB, 2GiB (2*2**30), 1.5GB or 4096"
_MAX_SIZE_DIGITS = 40  # far past any valid value; longer numbers are shown by their length


def byte_size(value: object, what: str) -> int:
    """A positive number of bytes (``max_shard_size``): an int, or a string, plain
    (``4096``, ``0x1000``) or with a unit as Hugging Face reads it: ``B``, ``KB``,
    ``MB``, ``GB``, ``TB`` are powers of 1000, ``KiB`` ... ``TiB`` of 1024; the
    letters in either case, but a decimal unit's ``B`` in capitals (``5Gb`` is bits
    to transformers and bytes to huggingface_hub: refused rather than guessed).  A
    fraction must come to whole bytes.  TYPE otherwise, ``what`` naming the value.

    Examples
    --------
    >>> byte_size("5GB", "x"), byte_size("500MB", "x"), byte_size("2GiB", "x")
    (5000000000, 500000000, 2147483648)
    >>> byte_size("1.5kB", "x"), byte_size("0x40", "x"), byte_size("1mib", "x"), byte_size(7, "x")
    (1500, 64, 1048576, 7)
    """
    if not isinstance(value, str):
        return check_int(value, what, minimum=1)
    word = value.strip()
    plain = re.fullmatch(r"0x[0-9a-f]+|[0-9]+", word, re.IGNORECASE)
    match = plain or _SIZE.fullmatch(word)
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if match is None:
        raise KilnError("TYPE", f"expected {_SIZE_HELP}, found {shown}")
    digits = len(word) if plain else len(match["whole"]) + len(match["fraction"] or "")
    if digits > _MAX_SIZE_DIGITS:
        raise KilnError(
            "TYPE",
            f"expected a size of at most {_MAX_SIZE_DIGITS} digits, found one of {digits} digits",
        )
    if plain:
        size = int(word, 0 if "x" in word.lower() else 10)
    else:
        unit = match["unit"] or "B"
        if unit.endswith("b") and unit[-2:-1].lower() != "i":
            raise KilnError(
                "TYPE",
                "expected the unit's B in capitals (a lowercase b means bits: transformers "
                f"reads 5Gb as 5*10**9 / 8 bytes), found {shown}",
            )
        fraction = match["fraction"] or ""
        scaled = int(match["whole"] + fraction) * _UNITS[unit.upper()]
        size, rest = divmod(scaled, 10 ** len(fraction))
        if rest:
            raise KilnError("TYPE", f"expected a whole number of bytes, found {shown}")
    if size < 1:
        raise KilnError("TYPE", f"expected a size of at least 1 byte, found {shown}")
    return size


def check_offset(offset: object) -> int:
    """A file offset: an integer in 0..2**63-1 (past it, ``seek`` fails), else TYPE."""
    return check_int(offset, "offset", maximum=MAX_INT64)


def check_path(path: object) -> str:
    """``path`` as a ``str``, or TYPE: not a path, a ``bytes`` path, a NUL in it,
    or an ``__fspath__`` that raises or returns something else."""
    if isinstance(path, (str, os.PathLike)):
        try:
            name = os.fspath(path)
        except Exception as exc:
            raise KilnError(
                "TYPE", f"expected a str or os.PathLike path; its __fspath__ raised {exc!r}"
            ) from exc
        if isinstance(name, str) and "\x00" not in name:  # the OS would raise ValueError
            return name
        raise KilnError(
            "TYPE", f"expected a str path without NUL characters, found {show_value(name)}"
        )
    raise KilnError("TYPE", f"expected a str or os.PathLike path, found {show_value(path)}")


def storage_error(
    src: np.ndarray,
    index: int,
    bits: int,
    context: str = "",
    *,
    code: int | None = None,
    shape: tuple[int, ...] | None = None,
) -> KilnError:
    """The TYPE error for the storage byte ``src[index]`` of a ``bits``-bit
    element (4-bit codes, ONNX's 2- and 6-bit types) with bits set above the
    element: the one wording, wherever such bytes are packed or decoded."""
    limit = (1 << bits) - 1
    found = int(src[index])
    what = "the nibble" if bits == 4 else f"the {bits}-bit element"
    return KilnError(
        "TYPE",
        f"{context}expected storage bytes 0x00-0x{limit:02x}, found 0x{found:02x} at element "
        f"{index} (bits above {what}; kiln_np never masks them)",
        code=code,
        shape=shape,
        expected=limit,
        found=found,
        index=index,
    )


def written_path(path: str) -> str:
    """``path`` made absolute for writing, without tidying it by name: a
    ``..`` stays the kernel's to resolve (``link/../x`` goes where the link
    leads, ``missing/../x`` fails as ``open()`` would), unlike
    ``os.path.abspath``, which would quietly name another file."""
    return os.path.join(os.getcwd(), path.rstrip(os.sep) or os.sep)


def check_regular_file(path: str, fd: int | None = None) -> os.stat_result:
    """The ``stat`` of ``path`` (or of the open ``fd``), or TYPE when it is not a
    regular file: a FIFO, a socket or a device would block or never end.

    Called before a file is opened for reading (``os.stat`` follows links and
    does not block on a FIFO) and, with ``fd``, after, in case it was swapped.
    Raises ``OSError`` (``FileNotFoundError``...) as the OS does.
    """
    st = os.stat(path) if fd is None else os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        what = _FILE_TYPES.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise KilnError("TYPE", f"{path!r}: expected a regular file, found {what}")
    return st


_FILE_TYPES = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


def byte_view(buf: object, what: str, *, writable: bool = False) -> np.ndarray:
    """A flat uint8 view of a C-contiguous buffer; TYPE for anything else.

    An ndarray subclass (``np.matrix``, a masked array) is viewed as its base
    ndarray: ``buf`` is bytes, and results must be plain arrays.  Raises
    ``TypeError`` (the buffer protocol's own) for objects that are not buffers.
    """
    if type(buf) is bytes and not writable:
        return np.frombuffer(buf, U8)
    if isinstance(buf, np.ndarray):
        arr = buf.view(np.ndarray) if type(buf) is not np.ndarray else buf
        if arr.dtype.hasobject:
            raise KilnError(
                "TYPE", f"{what} must hold bytes, found an array of Python objects ({arr.dtype})"
            )
        if not arr.flags.c_contiguous:
            raise KilnError(
                "TYPE",
                f"{what} must be C-contiguous, found an array with strides {arr.strides}",
            )
        if arr.dtype != U8:
            arr = arr.reshape(-1).view(U8)
    else:
        try:
            mv = memoryview(buf)  # type: ignore[arg-type]  # TypeError for non-buffers is the contract
        except ValueError as exc:  # a released memoryview, a closed mmap
            raise KilnError("TYPE", f"{what} cannot be read: {exc}") from exc
        if "O" in mv.format:
            raise KilnError(
                "TYPE", f"{what} must hold bytes, found a buffer of Python objects ({mv.format!r})"
            )
        if not mv.c_contiguous:
            way_out = "a contiguous writable buffer" if writable else f"bytes({what}) to copy it"
            raise KilnError(
                "TYPE",
                f"{what} must be a C-contiguous buffer, found a memoryview with "
                f"shape {mv.shape} and strides {mv.strides}; pass {way_out}",
            )
        arr = np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.itemsize != 1 else mv, U8)
    if writable and not arr.flags.writeable:
        raise KilnError("TYPE", f"{what} must be writable, found a read-only buffer")
    return arr.reshape(-1)
