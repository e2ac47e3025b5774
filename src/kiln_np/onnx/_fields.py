"""Typed fields (``int32_data``, ``float_data``, ..., ``string_data``) -> arrays.

A typed field is a flat list of Python numbers; each is checked against the
range its type allows (ONNX itself truncates silently) and the result has the
same bytes :func:`decode_raw` gives for the tensor in ``raw_data``.  STRING,
the one type with no bytes, has its own narrow path here: UTF-8 strings in,
an ``object`` array of ``str`` out, and back (:func:`encode_strings`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from kiln_np._core.checks import U8, set_module, short_or_long, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import check_shape

from ._raw import decode_raw
from ._types import DataType, RawType, data_type_info, raw_type

__all__ = ["decode_field", "encode_strings"]

_STRING = "ONNX STRING (8)"


def _field_range(raw: RawType) -> tuple[int, int, np.dtype[Any]]:
    """(lowest, highest, storage dtype) of an integer field's values."""
    if raw.row.data_type == DataType.BOOL:
        return 0, 1, U8
    if raw.bits in (2, 4):  # each integer is one packed byte
        return 0, 0xFF, U8
    if raw.bits == 6:
        return 0, 0x3F, U8
    dtype = raw.row.dtype
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max), dtype
    return 0, (1 << raw.bits) - 1, np.dtype(f"<u{raw.bits // 8}")


def _values(values: object, raw: RawType, context: str) -> np.ndarray:
    """The field values as a 1-D array (a repeated field is flat)."""
    try:
        arr = np.asarray(values)
    except Exception as exc:  # user code (__array__, __len__) may raise anything
        raise KilnError(
            "TYPE", f"{context}expected a flat sequence of {raw.row.field} values ({exc})"
        ) from None
    if arr.ndim != 1:
        raise KilnError(
            "TYPE",
            f"{context}expected a flat sequence of {raw.row.field} values, "
            f"found a {arr.ndim}-D array of shape {arr.shape}",
        )
    return arr


def _integers(values: object, raw: RawType, context: str) -> np.ndarray:
    arr = _values(values, raw, context)
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.dtype.kind not in "iu":
        raise KilnError(
            "TYPE",
            f"{context}expected integers in {raw.row.field}, found {arr.dtype}"
            + (" (integers beyond 64 bits, or mixed?)" if arr.dtype.kind in "Of" else ""),
            found=str(arr.dtype),
        )
    return arr


def _check_range(
    arr: np.ndarray, lo: int, hi: int, raw: RawType, shape: tuple[int, ...], context: str
) -> None:
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        index = int(np.argmax((arr < lo) | (arr > hi)))
        found = int(arr[index])
        shown = hex(found) if found >= 0 else f"-{hex(-found)}"
        raise KilnError(
            "TYPE",
            f"{context}expected {raw.row.field} values in {lo}..{hi} "
            f"({hex(lo) if lo >= 0 else lo}..{hex(hi)}), found {found} ({shown}) at value "
            f"{index}; ONNX would truncate it, kiln_np refuses",
            shape=shape,
            expected=(lo, hi),
            found=found,
            index=index,
        )


def _floats(values: object, raw: RawType, shape: tuple[int, ...], context: str) -> np.ndarray:
    """Field values as '<f4' (float_data) or '<f8' (double_data), exactly."""
    wire = np.dtype("<f4" if raw.row.field == "float_data" else "<f8")
    arr = _values(values, raw, context)
    if arr.size == 0:
        return np.zeros(0, wire)
    if arr.dtype.kind != "f":
        raise KilnError(
            "TYPE",
            f"{context}expected floats in {raw.row.field}, found {arr.dtype}",
            found=str(arr.dtype),
        )
    if arr.dtype.itemsize <= wire.itemsize:
        return arr.astype(wire)
    with np.errstate(over="ignore"):  # an overflow to inf is caught below
        cast = arr.astype(wire)
    back = cast.astype(arr.dtype)
    lost = (back != arr) & ~(np.isnan(arr) & np.isnan(back))
    if lost.any():
        index = int(np.argmax(lost))
        raise KilnError(
            "TYPE",
            f"{context}expected {raw.row.field} values that are exact {wire.name}, found "
            f"{arr[index].item()!r} at value {index}",
            shape=shape,
            found=float(arr[index]),
            index=index,
        )
    return cast


def _field_count(raw: RawType, count: int) -> tuple[int, str]:
    """How many field values ``count`` elements take, and the rule, for messages."""
    if raw.bits in (2, 4):
        per = 8 // raw.bits
        return -(-count // per), f"ceil({count} / {per})"
    if raw.row.dtype.kind == "c":  # (real, imaginary) pairs
        return 2 * count, f"2 x {count}"
    return count, str(count)


def _length_error(
    shape: tuple[int, ...], context: str, field: str, rule: str, expected: int, found: int
) -> KilnError:
    shown = str(expected) if rule == str(expected) else f"{rule} = {expected}"
    return KilnError(
        "LENGTH",
        f"{context}expected {shown} values in {field}, found {found} "
        f"({short_or_long(expected, found)})",
        shape=shape,
        expected=expected,
        found=found,
    )


@set_module("kiln_np.onnx")
def decode_field(data_type: int, values: Iterable[object], dims: Sequence[int]) -> np.ndarray:
    """Decode an ONNX tensor's typed field into a numpy array, bits untouched.

    Parameters
    ----------
    data_type : int
        The ``TensorProto.DataType``, 1-28.
    values : sequence
        The contents of the type's field (``int32_data``, ``int64_data``,
        ``uint64_data``, ``float_data``, ``double_data`` or ``string_data``):
        a protobuf repeated field, a list, or an array.
    dims : sequence of int
        The tensor's ``dims``.

    Returns
    -------
    numpy.ndarray
        A new array with the same dtype and bytes :func:`decode_raw` gives for
        the same tensor in ``raw_data``; STRING gives an ``object`` array of
        ``str``.

    Raises
    ------
    KilnError
        TYPE for a bad ``data_type``, a value that does not fit (an INT8 value
        of 200, a FLOAT16 pattern above 0xffff, a FLOAT6 value above 0x3f, a
        double that is not an exact float32), nonzero padding bits, or a
        string that is not UTF-8; LENGTH for the wrong number of values;
        SHAPE for bad ``dims``.

    Examples
    --------
    >>> decode_field(22, [0x88], (2,)).astype(int)  # INT4: both nibbles 8
    array([-8, -8])
    >>> float(decode_field(10, [0x3864], ()))  # FLOAT16 bits 0x3864
    0.548828125
    """
    if data_type_info(data_type).data_type == DataType.STRING:
        return _decode_strings(values, dims)
    raw = raw_type(data_type)
    info = raw.kiln(dims)
    context = f"{raw.label} shape {info.shape}: "
    field = raw.row.field
    if field in ("float_data", "double_data"):
        arr = _floats(values, raw, info.shape, context)
    else:
        arr = _integers(values, raw, context)
    expected, rule = _field_count(raw, info.count)
    if arr.size != expected:
        raise _length_error(info.shape, context, field, rule, expected, arr.size)
    if arr.dtype.kind == "f":
        return arr.view(raw.row.dtype).reshape(info.shape)
    lo, hi, storage = _field_range(raw)
    _check_range(arr, lo, hi, raw, info.shape, context)
    stored = arr.astype(storage)
    if raw.bits in (2, 4):  # the integers are the packed raw bytes
        return decode_raw(raw.row.data_type, stored, info.shape)
    return stored.view(raw.row.dtype).reshape(info.shape)


# ------------------------------------------------------------ STRING


def _decode_strings(values: object, dims: Sequence[int]) -> np.ndarray:
    shape = check_shape(dims, f"{_STRING}: ")
    context = f"{_STRING} shape {shape}: "
    try:  # numpy says whether an object array of this shape can exist (SHAPE before LENGTH)
        np.broadcast_to(np.empty((), object), shape)
    except ValueError as exc:  # (0, 2**62): empty, but more than numpy can index
        raise KilnError(
            "SHAPE", f"{context}numpy cannot represent it ({exc})", shape=shape
        ) from None
    # A non-iterable is refused below like any element that is not bytes.
    items = list(values) if isinstance(values, Iterable) else [values]
    count = math.prod(shape)
    if len(items) != count:
        raise _length_error(shape, context, "string_data", str(count), count, len(items))
    try:
        text = list(map(_utf8_decode, items))
    except (TypeError, UnicodeDecodeError) as exc:
        index = list(map(_is_utf8, items)).index(False)
        raise KilnError(
            "TYPE",
            f"{context}expected UTF-8 bytes in string_data, found {show_value(items[index])} "
            f"at element {index} ({exc})",
            shape=shape,
            index=index,
        ) from None
    out = np.empty(len(text), object)
    out[:] = text
    return out.reshape(shape)


def _utf8_decode(value: object) -> str:
    # No BOM is written, so a leading EF BB BF is the character U+FEFF: "utf-8",
    # not "utf-8-sig".
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"not bytes: {type(value).__name__}")
    return bytes(value).decode("utf-8")


def _is_utf8(value: object) -> bool:
    try:
        _utf8_decode(value)
    except (TypeError, UnicodeDecodeError):
        return False
    return True


def _check_code_points(arr: np.ndarray) -> None:
    """A numpy str array can hold code points past U+10FFFF, which Python turns
    into broken str objects (encoded as some other character, or crashing)."""
    if arr.dtype.kind != "U" or not arr.size or not arr.dtype.itemsize:
        return
    lanes = np.ascontiguousarray(arr).reshape(-1).view(f"{arr.dtype.byteorder}u4")
    bad = lanes > 0x10FFFF
    if bad.any():
        at = int(np.argmax(bad))
        index, found = at // (arr.dtype.itemsize // 4), int(lanes[at])
        raise KilnError(
            "TYPE",
            f"{_STRING} shape {arr.shape}: expected code points up to U+10FFFF, found "
            f"0x{found:x} in element {index}",
            found=found,
            index=index,
        )


def encode_strings(arr: np.ndarray) -> list[bytes]:
    """The ``string_data`` of a ``str``/``object`` array: UTF-8 bytes, one per
    element; TYPE for an element that is neither ``str`` nor UTF-8 ``bytes``
    (what :func:`decode_field` refuses is not written)."""
    _check_code_points(arr)
    items = arr.reshape(-1).tolist()
    try:
        return list(map(utf8_encode, items))
    except (TypeError, UnicodeError) as exc:
        index = list(map(encodes, items)).index(False)
        raise KilnError(
            "TYPE",
            f"{_STRING} shape {arr.shape}: expected str or UTF-8 bytes elements, found "
            f"{show_value(items[index])} at element {index} ({exc})",
            index=index,
        ) from None


def utf8_encode(value: object) -> bytes:
    """``value`` as UTF-8 bytes: a ``str`` encoded, UTF-8 ``bytes`` as they are;
    ``TypeError``/``UnicodeError`` otherwise."""
    if isinstance(value, bytes):
        value.decode("utf-8")  # bytes that decode_field would refuse are not written
        return value
    if isinstance(value, str):
        return value.encode("utf-8")  # UnicodeEncodeError for a lone surrogate
    raise TypeError(f"not str or bytes: {type(value).__name__}")


def encodes(value: object) -> bool:
    """True when :func:`utf8_encode` takes ``value``."""
    try:
        utf8_encode(value)
    except (TypeError, UnicodeError):
        return False
    return True
