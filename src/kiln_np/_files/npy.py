""".npy headers: read one from an untrusted file, write one for a decoded payload.

numpy's own reader (``np.lib.format.read_array_header_*``) hands the header
text to ``ast.literal_eval`` after a length check only, so a 6 KB ``(1+1+...)``
header exhausts the stack and 9 KB of ``-`` the memory.  :func:`read_npy_header`
vets the text first (its length, no operators, bounded nesting and numbers),
then parses it and takes the dtype with numpy's ``descr_to_dtype``.  Every
failure is a ``ValueError`` that says what was expected; the CLI reports it as
TYPE with the file's name.
"""

from __future__ import annotations

import ast
import io
import re
import struct
from typing import IO, Any, NamedTuple

import numpy as np

from kiln_np._core.checks import show_value

__all__ = ["NpyHeader", "npy_header", "read_npy_header"]

_HEADER_MAX = 10_000  # numpy's own cap (read_array_header's max_header_size)
_NESTING_MAX = 16
_KEYS = frozenset({"descr", "fortran_order", "shape"})
_STRING = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
# Outside its strings a header is a dict of tuples, lists, numbers and names:
# no operator, so literal_eval has nothing to recurse on ("(1+1+...)",
# "(------1,)" exhaust the stack or the memory of numpy's own reader).
_FORBIDDEN = re.compile(r"[^\s{}()\[\]:,\w]")
_DIGITS = re.compile(r"\d{20,}")
# ml_dtypes' float8_e5m2 says it is kind 'f', so np.save writes the descr '<f1',
# which numpy itself cannot load; like the void ones it is read as 'V1' + --code.
_ML_DTYPES_F1 = re.compile(r"[<>|=]f1")


class NpyHeader(NamedTuple):
    """What a .npy header says, checked: the array's shape (a subarray dtype's
    axes included), order, dtype, and where its data begins."""

    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype[Any]
    start: int  # where the data begins


def _vet(text: str) -> None:
    """Refuse, before parsing, what numpy's parser would choke on: operators,
    deep nesting, numbers past 19 digits (any dimension is below 2**63)."""
    # A string stands as one word of the same length, so positions stay true.
    outside = _STRING.sub(lambda m: "_" * len(m.group()), text)
    bad = _FORBIDDEN.search(outside)
    if bad:
        raise ValueError(
            f"expected a header dict of strings, numbers and tuples, found {bad.group()!r} "
            f"at character {bad.start()}"
        )
    depth = deepest = 0
    for char in re.sub(r"[^()\[\]{}]", "", outside):
        depth += 1 if char in "([{" else -1
        deepest = max(deepest, depth)
    if deepest > _NESTING_MAX:
        raise ValueError(f"expected a header nested at most {_NESTING_MAX} deep, found {deepest}")
    long = _DIGITS.search(outside)
    if long:
        raise ValueError(f"expected numbers of at most 19 digits, found one of {len(long.group())}")


def _parse(text: str) -> tuple[Any, object, object]:
    header = ast.literal_eval(text)  # safe: vetted, bounded, no operators
    if not isinstance(header, dict) or set(header) != _KEYS:
        raise ValueError(f"expected a header dict with keys {sorted(_KEYS)}, found {text[:80]!r}")
    return header["descr"], header["fortran_order"], header["shape"]


def read_npy_header(f: IO[bytes]) -> NpyHeader:
    """Read and check the header of a .npy file (format 1.0, 2.0 or 3.0).

    Parameters
    ----------
    f : binary file
        Positioned at the start of the file; left at the start of the data.

    Returns
    -------
    NpyHeader
        The shape (with a subarray dtype's axes appended, as ``np.load`` does),
        Fortran order, dtype (``V1`` for ml_dtypes' unloadable ``'<f1'``) and
        the data's offset.

    Raises
    ------
    ValueError
        For anything else: a bad magic or version, a header longer than
        10,000 bytes (numpy's limit), an operator, nesting deeper than 16 or
        a number of more than 19 digits outside its strings, keys other than
        ``descr``, ``fortran_order`` and ``shape``, a descr numpy refuses.
        numpy's ``descr_to_dtype`` may raise other exceptions for a descr it
        cannot build (``TypeError``, ``OverflowError``).

    Examples
    --------
    >>> import io
    >>> hostile = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1+1,)}"
    >>> read_npy_header(io.BytesIO(b"\\x93NUMPY\\x01\\x00" + bytes([len(hostile), 0]) + hostile))
    Traceback (most recent call last):
    ...
    ValueError: expected a header dict of strings, numbers and tuples, found '+' at character 52
    """
    version = np.lib.format.read_magic(f)
    if version not in {(1, 0), (2, 0), (3, 0)}:
        raise ValueError(f"expected format version 1.0, 2.0 or 3.0, found {version}")
    width = 2 if version == (1, 0) else 4
    raw_length = f.read(width)
    if len(raw_length) != width:
        raise ValueError("expected the header length, found the end of the file")
    (length,) = struct.unpack("<H" if width == 2 else "<I", raw_length)
    if length > _HEADER_MAX:
        raise ValueError(
            f"expected a header of at most {_HEADER_MAX} bytes (numpy's limit), found {length}"
        )
    raw = f.read(length)
    if len(raw) != length:
        raise ValueError(f"expected a header of {length} bytes, found {len(raw)}")
    text = raw.decode("utf-8" if version == (3, 0) else "latin-1")
    _vet(text)
    descr, fortran, shape = _parse(text)
    if type(fortran) is not bool:
        raise ValueError(f"expected fortran_order True or False, found {show_value(fortran)}")
    if type(shape) is not tuple or not all(type(d) is int for d in shape):
        raise ValueError(f"expected the shape as a tuple of integers, found {show_value(shape)}")
    if isinstance(descr, str) and _ML_DTYPES_F1.fullmatch(descr):
        dtype = np.dtype("V1")
    else:
        dtype = np.lib.format.descr_to_dtype(descr)
    if dtype.subdtype is not None:  # a subarray dtype: numpy adds its axes to the shape
        dtype, shape = dtype.base, shape + dtype.shape
    return NpyHeader(shape, fortran, dtype, f.tell())


def npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """The .npy header of a C-order array of ``dtype`` and ``shape``.

    Format 1.0, or 2.0 when the header passes 64 KiB.  ml_dtypes types have no
    descr numpy can load: they are stored as void elements of their width.

    Examples
    --------
    >>> import io
    >>> read_npy_header(io.BytesIO(npy_header(np.dtype("<f4"), (2, 3))))
    NpyHeader(shape=(2, 3), fortran=False, dtype=dtype('float32'), start=128)
    """
    # ml_dtypes types have no .npy descr numpy can load: store them as void bytes.
    stored = np.dtype(f"V{dtype.itemsize}") if dtype.isbuiltin == 2 else dtype
    header = {
        "descr": np.lib.format.dtype_to_descr(stored),
        "fortran_order": False,
        "shape": shape,
    }
    buf = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buf, header)
    except ValueError:  # a header over 64 KiB needs format 2.0
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, header)
    return buf.getvalue()
