"""ONNX tensor data types <-> numpy arrays and Kiln payloads, bit for bit.

The ONNX data-type table
========================

A ``TensorProto`` has a ``data_type`` from ``TensorProto.DataType``; 1-28 are
tensor types.  0 (UNDEFINED) and anything above 28 are TYPE errors.  The
values live either in ``raw_data`` (little-endian, C order, no header) or in
the one typed field the type names:

===== ============== ==== ============= ======================= ==============================
value name           bits typed field   numpy dtype             Kiln
===== ============== ==== ============= ======================= ==============================
1     FLOAT          32   float_data    float32                 2 (f32)
2     UINT8          8    int32_data    uint8                   9 (u8)
3     INT8           8    int32_data    int8                    8 (i8)
4     UINT16         16   int32_data    uint16                  11 (u16)
5     INT16          16   int32_data    int16                   10 (i16)
6     INT32          32   int32_data    int32                   12 (i32)
7     INT64          64   int64_data    int64                   14 (i64)
8     STRING         --   string_data   object (str)            none
9     BOOL           8    int32_data    bool                    7 (bool)
10    FLOAT16        16   int32_data    float16                 3 (f16)
11    DOUBLE         64   double_data   float64                 1 (f64)
12    UINT32         32   uint64_data   uint32                  13 (u32)
13    UINT64         64   uint64_data   uint64                  15 (u64)
14    COMPLEX64      64   float_data    complex64               opaque 0x4f0e onnx.complex64/8
15    COMPLEX128     128  double_data   complex128              opaque 0x4f0f onnx.complex128/16
16    BFLOAT16       16   int32_data    bfloat16                4 (bf16)
17    FLOAT8E4M3FN   8    int32_data    float8_e4m3fn           5 (f8e4m3)
18    FLOAT8E4M3FNUZ 8    int32_data    float8_e4m3fnuz         opaque 0x4f12 onnx.float8e4m3fnuz/1
19    FLOAT8E5M2     8    int32_data    float8_e5m2             6 (f8e5m2)
20    FLOAT8E5M2FNUZ 8    int32_data    float8_e5m2fnuz         opaque 0x4f14 onnx.float8e5m2fnuz/1
21    UINT4          4    int32_data    uint4                   17 (u4)
22    INT4           4    int32_data    int4                    16 (i4)
23    FLOAT4E2M1     4    int32_data    float4_e2m1fn           18 (e2m1)
24    FLOAT8E8M0     8    int32_data    float8_e8m0fnu          19 (e8m0)
25    UINT2          2    int32_data    uint2                   opaque 0x4f19 onnx.uint2/1
26    INT2           2    int32_data    int2                    opaque 0x4f1a onnx.int2/1
27    FLOAT6E2M3     6    int32_data    float6_e2m3fn           opaque 0x4f1b onnx.float6e2m3/1
28    FLOAT6E3M2     6    int32_data    float6_e3m2fn           opaque 0x4f1c onnx.float6e3m2/1
===== ============== ==== ============= ======================= ==============================

raw_data
--------
- ``n`` elements take exactly ``ceil(n * bits / 8)`` bytes: one byte short or
  long is LENGTH.  Multi-byte elements are little-endian; complex numbers are
  (real, imaginary) pairs.
- 4-bit: element ``2k`` is the low nibble of byte ``k``.  2-bit: four per
  byte, ``x0 | x1<<2 | x2<<4 | x3<<6``.  6-bit: one bit stream, lowest bit
  first, four elements in three bytes.  The bits after the last element MUST
  be 0 (TYPE): Kiln requires it, and a Kiln round trip could not keep them.
- BOOL bytes MUST be 0 or 1 (TYPE).  STRING never uses ``raw_data``.

Typed fields
------------
- 8- and 16-bit types: one integer per element; the integer types hold their
  value (INT16 -32768..32767), the float types and BOOL their bit pattern
  (FLOAT16 0..0xffff, BOOL 0..1).
- 4-bit and 2-bit types: each integer is one packed byte (0..0xff), laid out
  as in ``raw_data``.  6-bit types: one element per integer, bits 0-5.
- COMPLEX64/128: two values per element in ``float_data``/``double_data``.
- A value that does not fit is TYPE (ONNX itself truncates it silently).

Kiln
----
The 19 types Kiln has travel under their Kiln codes with the same bytes.  The
eight ONNX-only types travel as opaque Kiln payloads with code ``0x4f00 +
data_type`` and layout ``onnx.<name>``, one block per element: 8 or 16 bytes
for complex, 1 byte for the FNUZ float8s, and, for the 2- and 6-bit types,
one byte per element holding the element's bits in its low bits (the other
bits 0).  STRING has no Kiln form.  ONNX -> Kiln -> ONNX is byte-identical.

The functions that take bytes and field values need only numpy and
ml_dtypes; the ones that take ``onnx.TensorProto``/``ModelProto`` import
``onnx`` when called (``pip install kiln-np[onnx]``).
"""

from __future__ import annotations

import enum
import mmap
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

from . import _nibbles, _onnx_kernels
from ._checks import check_path as _check_path
from ._checks import show_value as _describe
from ._codec import Payload, check_bool_bytes, from_numpy, to_numpy
from ._codec import as_array as _as_array
from ._codec import readonly_view as _readonly
from ._codec import wire_bytes as _wire_bytes
from ._errors import KilnError
from ._payload import payload_info
from ._table import Code, Layout, code_label, dtype_info
from ._table import as_code as _as_code
from ._table import check_shape as _check_shape
from ._table import native_dtype as _native
from ._table import resolve as _resolve

# --- TEMPORARY issue-10 compatibility shims (lead): remove when this module is refactored ---
import math as _math

_count = _math.prod


def _check_representable(dims: tuple[int, ...], itemsize: int, context: str = "") -> None:
    total = itemsize
    for d in dims:
        total *= d or 1
    if total > 2**63 - 1:
        raise KilnError("SHAPE", f"{context}shape {dims}: numpy cannot represent it", shape=dims)


def _check_bool_bytes(src: np.ndarray, code: int, shape: tuple[int, ...]) -> None:
    check_bool_bytes(src, payload_info(code, shape))


# --- end of temporary shims ---

if TYPE_CHECKING:
    import onnx

__all__ = [
    "DATA_TYPES",
    "OPAQUE_BASE",
    "DataType",
    "OnnxType",
    "data_type_for_dtype",
    "data_type_info",
    "decode_field",
    "decode_raw",
    "encode_raw",
    "from_kiln",
    "model_to_kiln",
    "numpy_to_tensor",
    "tensor_to_numpy",
    "to_kiln",
]

OPAQUE_BASE = 0x4F00
"""ONNX-only types travel under the opaque Kiln code ``OPAQUE_BASE + data_type``."""

_U8 = np.dtype(np.uint8)


class DataType(enum.IntEnum):
    """``onnx.TensorProto.DataType``, the tensor types 1-28 (0 is UNDEFINED)."""

    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26
    FLOAT6E2M3 = 27
    FLOAT6E3M2 = 28


@dataclass(frozen=True)
class OnnxType:
    """One row of the ONNX data-type table.

    Attributes
    ----------
    data_type : DataType
        The ``TensorProto.DataType`` value.
    bits : int or None
        Bits per element in ``raw_data``; None for STRING.
    field : str
        The typed field that holds the values when ``raw_data`` is not used.
    dtype : numpy.dtype
        What :func:`decode_raw` returns (``object`` of ``str`` for STRING);
        sub-byte types decode one element per byte.
    kiln_code : int or None
        The Kiln code: closed (1-19) or opaque (``OPAQUE_BASE + data_type``);
        None for STRING.
    layout : Layout or None
        The opaque Kiln layout of an ONNX-only type; None otherwise.
    meaning : str
        The ONNX table's description.
    """

    data_type: DataType
    bits: int | None
    field: str
    dtype: np.dtype[Any]
    kiln_code: int | None
    layout: Layout | None
    meaning: str

    @property
    def name(self) -> str:
        """The ONNX name, such as ``FLOAT8E4M3FNUZ``."""
        return self.data_type.name

    @property
    def label(self) -> str:
        """``'ONNX INT4 (22)'``: how messages name the type."""
        return f"ONNX {self.name} ({int(self.data_type)})"

    def byte_length(self, count: int) -> int:
        """Exact ``raw_data`` bytes for ``count`` elements: ``ceil(count * bits / 8)``."""
        if self.bits is None:
            raise KilnError("TYPE", _STRING_RAW.format(label=self.label))
        return -(-count * self.bits // 8)

    def __repr__(self) -> str:
        kiln = "none" if self.kiln_code is None else code_label(self.kiln_code)
        return f"OnnxType({int(self.data_type)}, {self.name!r}, {self.dtype}, kiln={kiln})"


_STRING_RAW = (
    "{label} cannot use raw_data: STRING elements are UTF-8 byte strings, one per "
    "string_data entry (use decode_field); a tensor that puts them in raw_data is refused"
)


def _mapped(data_type: DataType, code: Code, field: str, meaning: str) -> OnnxType:
    row = dtype_info(code)
    return OnnxType(data_type, row.bits, field, row.dtype, int(code), None, meaning)


def _opaque(
    data_type: DataType, bits: int, field: str, dtype: npt.DTypeLike, block: int, meaning: str
) -> OnnxType:
    layout = Layout(f"onnx.{data_type.name.lower()}", block)
    return OnnxType(
        data_type, bits, field, np.dtype(dtype), OPAQUE_BASE + data_type, layout, meaning
    )


_T = DataType
DATA_TYPES: tuple[OnnxType, ...] = (
    _mapped(_T.FLOAT, Code.F32, "float_data", "IEEE 754 single"),
    _mapped(_T.UINT8, Code.U8, "int32_data", "unsigned byte"),
    _mapped(_T.INT8, Code.I8, "int32_data", "signed byte"),
    _mapped(_T.UINT16, Code.U16, "int32_data", "unsigned 16-bit"),
    _mapped(_T.INT16, Code.I16, "int32_data", "signed 16-bit"),
    _mapped(_T.INT32, Code.I32, "int32_data", "signed 32-bit"),
    _mapped(_T.INT64, Code.I64, "int64_data", "signed 64-bit"),
    OnnxType(_T.STRING, None, "string_data", np.dtype(object), None, None, "UTF-8 strings"),
    _mapped(_T.BOOL, Code.BOOL, "int32_data", "one byte, 0 or 1"),
    _mapped(_T.FLOAT16, Code.F16, "int32_data", "IEEE half"),
    _mapped(_T.DOUBLE, Code.F64, "double_data", "IEEE 754 double"),
    _mapped(_T.UINT32, Code.U32, "uint64_data", "unsigned 32-bit"),
    _mapped(_T.UINT64, Code.U64, "uint64_data", "unsigned 64-bit"),
    _opaque(_T.COMPLEX64, 64, "float_data", "<c8", 8, "two floats"),
    _opaque(_T.COMPLEX128, 128, "double_data", "<c16", 16, "two doubles"),
    _mapped(_T.BFLOAT16, Code.BF16, "int32_data", "the top half of a float; IR 4"),
    _mapped(_T.FLOAT8E4M3FN, Code.F8E4M3, "int32_data", "8-bit float, 4 exponent bits; IR 9"),
    _opaque(
        _T.FLOAT8E4M3FNUZ,
        8,
        "int32_data",
        ml_dtypes.float8_e4m3fnuz,
        1,
        "E4M3 with no negative zero, 0x80 is NaN, bias 8; IR 9",
    ),
    _mapped(_T.FLOAT8E5M2, Code.F8E5M2, "int32_data", "8-bit float, 5 exponent bits; IR 9"),
    _opaque(
        _T.FLOAT8E5M2FNUZ,
        8,
        "int32_data",
        ml_dtypes.float8_e5m2fnuz,
        1,
        "E5M2 with no negative zero, 0x80 is NaN, bias 16; IR 9",
    ),
    _mapped(_T.UINT4, Code.U4, "int32_data", "unsigned 4-bit; IR 10"),
    _mapped(_T.INT4, Code.I4, "int32_data", "signed 4-bit; IR 10"),
    _mapped(_T.FLOAT4E2M1, Code.E2M1, "int32_data", "4-bit float, bias 1; IR 11"),
    _mapped(_T.FLOAT8E8M0, Code.E8M0, "int32_data", "a power of two, for scales; IR 12"),
    _opaque(_T.UINT2, 2, "int32_data", ml_dtypes.uint2, 1, "unsigned 2-bit; IR 13"),
    _opaque(_T.INT2, 2, "int32_data", ml_dtypes.int2, 1, "signed 2-bit; IR 13"),
    _opaque(
        _T.FLOAT6E2M3,
        6,
        "int32_data",
        ml_dtypes.float6_e2m3fn,
        1,
        "6-bit float, 2 exponent bits, bias 1 (OCP MX); IR 14",
    ),
    _opaque(
        _T.FLOAT6E3M2,
        6,
        "int32_data",
        ml_dtypes.float6_e3m2fn,
        1,
        "6-bit float, 3 exponent bits, bias 3 (OCP MX); IR 14",
    ),
)
del _T


_BY_VALUE: Mapping[int, OnnxType] = MappingProxyType({int(r.data_type): r for r in DATA_TYPES})
_BY_KILN: Mapping[int, OnnxType] = MappingProxyType(
    {r.kiln_code: r for r in DATA_TYPES if r.kiln_code is not None}
)
_OPAQUE_CODES = ", ".join(f"0x{r.kiln_code:04x}" for r in DATA_TYPES if r.layout is not None)
_BY_DTYPE: Mapping[np.dtype[Any], OnnxType] = MappingProxyType(
    {_native(r.dtype): r for r in DATA_TYPES if r.bits is not None}
)


def data_type_info(data_type: int) -> OnnxType:
    """The table row of an ONNX data type.

    Parameters
    ----------
    data_type : int
        A ``TensorProto.DataType`` value, 1-28.

    Returns
    -------
    OnnxType
        The row: name, bits, typed field, numpy dtype, Kiln code and layout.

    Raises
    ------
    KilnError
        TYPE for 0 (UNDEFINED), anything above 28, or a non-integer.

    Examples
    --------
    >>> data_type_info(22)
    OnnxType(22, 'INT4', int4, kiln=code 16 (i4))
    >>> data_type_info(26).layout
    Layout(name='onnx.int2', block_size=1)
    """
    if isinstance(data_type, (bool, np.bool_)) or not isinstance(data_type, (int, np.integer)):
        raise KilnError(
            "TYPE", f"expected an ONNX data_type, an integer 1-28, found {_describe(data_type)}"
        )
    value = int(data_type)
    row = _BY_VALUE.get(value)
    if row is None:
        why = "0 is UNDEFINED" if value == 0 else "ONNX tensor types are 1-28"
        shown = f"0x{value:02x}" if value >= 0 else str(value)
        raise KilnError(
            "TYPE", f"expected an ONNX data_type in 1-28, found {value} ({shown}): {why}"
        )
    return row


def data_type_for_dtype(dtype: npt.DTypeLike) -> OnnxType:
    """The ONNX row of a numpy or ml_dtypes dtype (byte order aside).

    Parameters
    ----------
    dtype : dtype_like
        ``float32``, ``ml_dtypes.int2``, ``complex64``, ...; ``object`` and
        ``str`` dtypes are STRING.

    Returns
    -------
    OnnxType
        The row whose ``dtype`` this is.

    Raises
    ------
    KilnError
        TYPE for a dtype no ONNX type decodes to (``float8_e3m4``, ``int1``,
        ``datetime64``, structured, ...).

    Examples
    --------
    >>> data_type_for_dtype(">c8").name
    'COMPLEX64'
    """
    try:
        d = np.dtype(dtype)
    except (TypeError, ValueError) as exc:  # ("f4", -1) is a ValueError
        raise KilnError("TYPE", f"expected a numpy dtype, found {_describe(dtype)}") from exc
    if d.kind in "OU":
        return _BY_VALUE[DataType.STRING]
    row = _BY_DTYPE.get(_native(d)) if d.fields is None else None
    if row is None:
        raise KilnError(
            "TYPE",
            f"dtype {d} ({d.str}) has no ONNX data_type; expected one of "
            + ", ".join(str(r.dtype) for r in DATA_TYPES),
            found=str(d),
        )
    return row


def _raw_row(data_type: int) -> OnnxType:
    row = data_type_info(data_type)
    if row.bits is None:
        raise KilnError("TYPE", _STRING_RAW.format(label=row.label))
    return row


def _dims(row: OnnxType, dims: object) -> tuple[int, ...]:
    context = f"{row.label}: "
    checked = _check_shape(dims, context)
    _check_representable(checked, row.dtype.itemsize, context)
    return checked


def _length_error(
    row: OnnxType, dims: tuple[int, ...], what: str, rule: str, expected: int, found: int
) -> KilnError:
    shown = str(expected) if rule == str(expected) else f"{rule} = {expected}"
    return KilnError(
        "LENGTH",
        f"{row.label} shape {dims}: expected {shown} {what}, found {found} "
        f"({'short' if found < expected else 'long'} by {abs(found - expected)})",
        shape=dims,
        expected=expected,
        found=found,
    )


def _checked_raw(row: OnnxType, raw_data: object, dims: tuple[int, ...]) -> np.ndarray:
    """``raw_data`` as a flat uint8 view of exactly ``row.byte_length`` bytes."""
    try:
        src = _nibbles._byte_view(raw_data, "raw_data")
    except KilnError as exc:
        raise exc.prefixed(f"{row.label} shape {dims}: ") from exc.__cause__
    count = _count(dims)
    expected = row.byte_length(count)
    if src.size != expected:
        bits = row.bits
        assert bits is not None
        rule = f"ceil({count} x {bits} / 8)" if bits < 8 else f"{count} x {bits // 8}"
        raise _length_error(row, dims, "bytes of raw_data", rule, expected, src.size)
    return src


def _check_sub_byte_padding(row: OnnxType, src: np.ndarray, dims: tuple[int, ...]) -> None:
    """The bits after the last 2- or 6-bit element must be 0."""
    assert row.bits is not None
    count = _count(dims)
    used = count * row.bits % 8
    if used and src[-1] >> used:
        last = int(src[-1])
        raise KilnError(
            "TYPE",
            f"{row.label} shape {dims}: {count} x {row.bits} bits: expected the {8 - used} "
            f"padding bits of the last byte to be 0, found byte 0x{last:02x} at byte offset "
            f"{src.size - 1}",
            shape=dims,
            expected=0,
            found=last,
            index=count,
        )


_SUB_BYTE_UNPACK: Mapping[int, Callable[[np.ndarray, np.ndarray, int], None]] = MappingProxyType(
    {2: _onnx_kernels.unpack2_into, 6: _onnx_kernels.unpack6_into}
)
_SUB_BYTE_PACK: Mapping[int, Callable[[np.ndarray, np.ndarray], None]] = MappingProxyType(
    {2: _onnx_kernels.pack2_into, 6: _onnx_kernels.pack6_into}
)


def _unpack_sub_byte(row: OnnxType, src: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """2- or 6-bit raw bytes (length checked) to one uint8 per element."""
    assert row.bits is not None
    _check_sub_byte_padding(row, src, dims)
    count = _count(dims)
    out = np.empty(count, _U8)
    _SUB_BYTE_UNPACK[row.bits](src, out, count)
    return out


def _pack_sub_byte(row: OnnxType, values: np.ndarray, context: str) -> np.ndarray:
    """One uint8 per 2- or 6-bit element to raw bytes; bits above the element are TYPE."""
    assert row.bits is not None
    limit = (1 << row.bits) - 1
    if values.size and int(values.max()) > limit:
        index = int(np.flatnonzero(values > limit)[0])
        found = int(values[index])
        raise KilnError(
            "TYPE",
            f"{context}expected storage bytes 0x00-0x{limit:02x}, found 0x{found:02x} at "
            f"element {index} (bits above the {row.bits}-bit element; kiln_np never masks them)",
            expected=limit,
            found=found,
            index=index,
        )
    out = np.empty(row.byte_length(values.size), _U8)
    _SUB_BYTE_PACK[row.bits](values, out)
    return out


def decode_raw(data_type: int, raw_data: object, dims: Sequence[int]) -> np.ndarray:
    """Decode an ONNX tensor's ``raw_data`` into a numpy array, bits untouched.

    Parameters
    ----------
    data_type : int
        The ``TensorProto.DataType``, 1-28 except STRING (8).
    raw_data : bytes-like
        Exactly ``ceil(prod(dims) * bits / 8)`` bytes, C-contiguous.
    dims : sequence of int
        The tensor's ``dims``; ``()`` is a scalar.

    Returns
    -------
    numpy.ndarray
        Whole-byte types: a zero-copy view of ``raw_data`` with the dtype of
        :func:`data_type_info` (read-only when ``raw_data`` is).  4-, 2- and
        6-bit types: a new array, one element per byte (ml_dtypes ``int4``,
        ``uint2``, ``float6_e2m3fn``, ...).

    Raises
    ------
    KilnError
        TYPE for a bad or STRING ``data_type``, a BOOL byte other than 0/1 or
        nonzero padding bits; SHAPE for bad ``dims``; LENGTH for any other
        byte count.

    Examples
    --------
    >>> decode_raw(26, b"\\x1b", (3,)).astype(int)  # INT2: 3, 2, 1
    array([-1, -2,  1])
    >>> decode_raw(27, b"\\x08\\x02", (2,)).astype(float)  # FLOAT6E2M3
    array([1., 1.])
    """
    row = _raw_row(data_type)
    dims = _dims(row, dims)
    src = _checked_raw(row, raw_data, dims)
    if row.layout is None:
        assert row.kiln_code is not None
        try:
            return to_numpy(row.kiln_code, src, dims)
        except KilnError as exc:
            raise exc.prefixed(f"{row.label} as Kiln ") from None
    if row.bits in _SUB_BYTE_UNPACK:
        return _unpack_sub_byte(row, src, dims).view(row.dtype).reshape(dims)
    return src.view(row.dtype).reshape(dims)


# ------------------------------------------------------------ typed fields


def _field_range(row: OnnxType) -> tuple[int, int, np.dtype[Any]]:
    """(lowest, highest, storage dtype) of an integer field's values."""
    assert row.bits is not None
    if row.data_type == DataType.BOOL:
        return 0, 1, _U8
    if row.bits in (2, 4):  # each integer is one packed byte
        return 0, 0xFF, _U8
    if row.bits == 6:
        return 0, 0x3F, _U8
    if row.dtype.kind in "iu":
        info = np.iinfo(row.dtype)
        return int(info.min), int(info.max), row.dtype
    return 0, (1 << row.bits) - 1, np.dtype(f"<u{row.bits // 8}")


def _values(values: object, row: OnnxType, dims: tuple[int, ...]) -> np.ndarray:
    """The field values as a 1-D array (a repeated field is flat)."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as exc:
        raise KilnError(
            "TYPE",
            f"{row.label} shape {dims}: expected a flat sequence of {row.field} values ({exc})",
        ) from None
    if arr.ndim != 1:
        raise KilnError(
            "TYPE",
            f"{row.label} shape {dims}: expected a flat sequence of {row.field} values, "
            f"found a {arr.ndim}-D array of shape {arr.shape}",
        )
    return arr


def _integers(values: object, row: OnnxType, dims: tuple[int, ...]) -> np.ndarray:
    arr = _values(values, row, dims)
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.dtype.kind not in "iu":
        raise KilnError(
            "TYPE",
            f"{row.label} shape {dims}: expected integers in {row.field}, found "
            f"{arr.dtype}"
            + (" (integers beyond 64 bits, or mixed?)" if arr.dtype.kind in "Of" else ""),
            found=str(arr.dtype),
        )
    return arr


def _check_range(arr: np.ndarray, lo: int, hi: int, row: OnnxType, dims: tuple[int, ...]) -> None:
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        index = int(np.flatnonzero((arr < lo) | (arr > hi))[0])
        found = int(arr[index])
        shown = hex(found) if found >= 0 else f"-{hex(-found)}"
        raise KilnError(
            "TYPE",
            f"{row.label} shape {dims}: expected {row.field} values in {lo}..{hi} "
            f"({hex(lo) if lo >= 0 else lo}..{hex(hi)}), found {found} ({shown}) at value "
            f"{index}; ONNX would truncate it, kiln_np refuses",
            shape=dims,
            expected=(lo, hi),
            found=found,
            index=index,
        )


def _floats(values: object, row: OnnxType, dims: tuple[int, ...]) -> np.ndarray:
    """Field values as '<f4' (float_data) or '<f8' (double_data), exactly."""
    wire = np.dtype("<f4" if row.field == "float_data" else "<f8")
    arr = _values(values, row, dims)
    if arr.size == 0:
        return np.zeros(0, wire)
    if arr.dtype.kind != "f":
        raise KilnError(
            "TYPE",
            f"{row.label} shape {dims}: expected floats in {row.field}, found {arr.dtype}",
            found=str(arr.dtype),
        )
    if arr.dtype.itemsize <= wire.itemsize:
        return arr.astype(wire)
    with np.errstate(over="ignore"):  # an overflow to inf is caught below
        cast = arr.astype(wire)
    back = cast.astype(arr.dtype)
    lost = (back != arr) & ~(np.isnan(arr) & np.isnan(back))
    if lost.any():
        index = int(np.flatnonzero(lost)[0])
        raise KilnError(
            "TYPE",
            f"{row.label} shape {dims}: expected {row.field} values that are exact "
            f"{wire.name}, found {arr[index].item()!r} at value {index}",
            shape=dims,
            found=float(arr[index]),
            index=index,
        )
    return cast


def _strings(values: Iterable[object], dims: tuple[int, ...]) -> np.ndarray:
    # A non-iterable is refused below like any element that is not bytes.
    items = list(values) if isinstance(values, Iterable) else [values]
    try:
        text = list(map(_utf8_decode, items))
    except (TypeError, UnicodeDecodeError) as exc:
        index = list(map(_is_utf8, items)).index(False)
        raise KilnError(
            "TYPE",
            f"ONNX STRING (8) shape {dims}: expected UTF-8 bytes in string_data, found "
            f"{_describe(items[index])} at element {index} ({exc})",
            shape=dims,
            index=index,
        ) from None
    out = np.empty(len(text), object)
    out[:] = text
    return out


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


def _field_count(row: OnnxType, count: int) -> tuple[int, str]:
    """How many field values ``count`` elements take, and the rule, for messages."""
    if row.bits in (2, 4):
        per = 8 // row.bits
        return -(-count // per), f"ceil({count} / {per})"
    if row.dtype.kind == "c":  # (real, imaginary) pairs
        return 2 * count, f"2 x {count}"
    return count, str(count)


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
    row = data_type_info(data_type)
    dims = _dims(row, dims)
    count = _count(dims)
    if row.bits is None:
        arr = _strings(values, dims)
    elif row.field in ("float_data", "double_data"):
        arr = _floats(values, row, dims)
    else:
        arr = _integers(values, row, dims)
    expected, rule = _field_count(row, count)
    if arr.size != expected:
        raise _length_error(row, dims, f"values in {row.field}", rule, expected, arr.size)
    if row.bits is None:
        return arr.reshape(dims)
    if arr.dtype.kind == "f":
        return arr.view(row.dtype).reshape(dims)
    lo, hi, storage = _field_range(row)
    _check_range(arr, lo, hi, row, dims)
    stored = arr.astype(storage)
    if row.bits in (2, 4):  # the integers are the packed raw bytes
        return decode_raw(row.data_type, stored, dims)
    return stored.view(row.dtype).reshape(dims)


# ------------------------------------------------------------ encoding


def _row_for_array(arr: np.ndarray, data_type: int | None) -> OnnxType:
    row = data_type_for_dtype(arr.dtype)
    if data_type is not None:
        wanted = data_type_info(data_type)
        if wanted is not row:
            raise KilnError(
                "TYPE",
                f"{wanted.label}: expected {wanted.dtype} elements, found {arr.dtype}; "
                "kiln_np never casts: convert the array first",
                expected=str(wanted.dtype),
                found=str(arr.dtype),
            )
    if row.bits is None:
        raise KilnError("TYPE", _STRING_RAW.format(label=row.label))
    return row


def _storage_bytes(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr).reshape(-1).view(_U8)


def encode_raw(array: npt.ArrayLike, data_type: int | None = None) -> memoryview:
    """Encode an array as ONNX ``raw_data``, bits untouched: the inverse of
    :func:`decode_raw`.

    Parameters
    ----------
    array : array_like
        Any ndarray (any order, strides, byte order) of a dtype in the table.
    data_type : int, optional
        Inferred from the dtype when omitted; when given, the dtype must be
        its (byte order aside): kiln_np never casts.

    Returns
    -------
    memoryview
        Read-only little-endian C-order bytes; it may share memory with
        ``array``.

    Raises
    ------
    KilnError
        TYPE for a dtype with no ONNX type or not ``data_type``'s, a STRING
        array, a BOOL byte other than 0/1, or sub-byte storage bytes with bits
        set above the element (kiln_np never masks them).

    Examples
    --------
    >>> import ml_dtypes
    >>> bytes(encode_raw(np.array([-1, -2, 1], dtype=ml_dtypes.int2))).hex()
    '1b'
    """
    arr = _as_array(array)
    row = _row_for_array(arr, data_type)
    if row.layout is None:
        assert row.kiln_code is not None
        try:
            return from_numpy(arr, code=row.kiln_code).data
        except KilnError as exc:
            raise exc.prefixed(f"{row.label} as Kiln ") from None
    if row.bits in _SUB_BYTE_PACK:
        context = f"{row.label} shape {arr.shape}: "
        return _readonly(_pack_sub_byte(row, _storage_bytes(arr), context))
    return _readonly(_wire_bytes(arr, row.dtype))


# ------------------------------------------------------------ Kiln


def to_kiln(data_type: int, raw_data: object, dims: Sequence[int]) -> Payload:
    """Wrap an ONNX tensor's ``raw_data`` as a Kiln payload, losslessly.

    Parameters
    ----------
    data_type : int
        The ``TensorProto.DataType``, 1-28 except STRING, which has no Kiln
        form.
    raw_data : bytes-like
        Exactly ``ceil(prod(dims) * bits / 8)`` bytes.
    dims : sequence of int
        The tensor's ``dims``.

    Returns
    -------
    Payload
        The 19 types Kiln has: their Kiln code and the same bytes (a
        read-only view of ``raw_data``).  The others: opaque code
        ``OPAQUE_BASE + data_type`` with layout ``onnx.<name>``, one block
        per element (the 2- and 6-bit types unpacked to one byte each).

    Raises
    ------
    KilnError
        As :func:`decode_raw`.

    Examples
    --------
    >>> to_kiln(22, b"\\x21\\x03", (3,))
    Payload(code 16 (i4), shape=(3,), 2 bytes [21 03])
    >>> to_kiln(25, b"\\xe4", (4,))
    Payload(opaque code 20249 (0x4f19), shape=(4,), 4 bytes [00 01 02 03], \
layout=Layout(name='onnx.uint2', block_size=1))
    """
    row = _raw_row(data_type)
    dims = _dims(row, dims)
    src = _checked_raw(row, raw_data, dims)
    assert row.kiln_code is not None
    code = row.kiln_code
    if row.layout is None:
        context = f"{row.label} as Kiln {code_label(code)} shape {dims}: "
        if row.bits == 4:
            _nibbles.check_padding(src, _count(dims), context)
        elif code == Code.BOOL:
            try:
                _check_bool_bytes(src, code, dims)
            except KilnError as exc:
                raise exc.prefixed(f"{row.label} as Kiln ") from None
        return Payload(Code(code), _readonly(src), dims)
    if row.bits in _SUB_BYTE_UNPACK:
        src = _unpack_sub_byte(row, src, dims)
    return Payload(code, _readonly(src), dims, row.layout)


def from_kiln(
    code: int, data: object, shape: Sequence[int], layout: Layout | None = None
) -> tuple[DataType, memoryview, tuple[int, ...]]:
    """The ONNX ``(data_type, raw_data, dims)`` of a Kiln payload: the inverse
    of :func:`to_kiln`.

    Parameters
    ----------
    code : int
        A closed Kiln code (1-19), or one of the opaque codes of
        :data:`DATA_TYPES` with its layout.
    data : bytes-like
        The payload bytes.
    shape : sequence of int
        The payload shape (for opaque codes, the shape of the blocks).
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.

    Returns
    -------
    tuple
        ``(data_type, raw_data, dims)``; ``raw_data`` is read-only and, except
        for the 2- and 6-bit types, a view of ``data``.

    Raises
    ------
    KilnError
        Whatever :func:`kiln_np.to_numpy` raises for the payload; TYPE for an
        opaque code or layout that is not one of this module's, or a 2- or
        6-bit block with bits set above the element.

    Examples
    --------
    >>> t, raw, dims = from_kiln(17, b"\\x21\\x03", (3,))
    >>> t.name, bytes(raw).hex(" "), dims
    ('UINT4', '21 03', (3,))
    """
    c = _as_code(code)
    _resolve(c, layout)  # Kiln's code and layout checks first, with Kiln's messages
    row = _BY_KILN.get(c)
    if row is None or row.layout != layout:
        expected = "none" if row is None else repr(row.layout)
        raise KilnError(
            "TYPE",
            f"{code_label(c)} with layout {layout!r} is not an ONNX type: expected one of "
            f"the opaque codes {_OPAQUE_CODES} with its onnx.* layout (for this code: "
            f"{expected})",
            code=c,
        )
    blocks = to_numpy(c, data, shape, layout)  # every Kiln check, in Kiln's order
    dims = _check_shape(shape)  # already checked by to_numpy: now as a tuple of ints
    src = _nibbles._byte_view(data, "data")
    if row.bits in _SUB_BYTE_PACK:
        context = f"{code_label(c)} ({row.label}) shape {dims}: "
        src = _pack_sub_byte(row, blocks.reshape(-1), context)
    return row.data_type, _readonly(src), dims


# ------------------------------------------------------------ TensorProto


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:
        raise ImportError(
            "this function takes onnx protos and needs the onnx package: "
            "pip install 'kiln-np[onnx]'"
        ) from exc
    return onnx


_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def _external_bytes(
    tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None
) -> memoryview:
    """The bytes an external-data tensor points at, resolved inside ``base_dir``."""
    where = f"tensor {tensor.name!r}: external data"
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries.get("location")
    if not location:
        raise KilnError(
            "TYPE",
            f"{where}: expected a 'location' entry naming a file, found "
            + ("none" if location is None else repr(location)),
        )
    if base_dir is None:
        raise KilnError(
            "TYPE", f"{where} at {location!r} needs base_dir, the directory it is relative to"
        )
    parts = location.replace("\\", "/").split("/")
    if (
        os.path.isabs(location)
        or location[:1] in "/\\"
        or ":" in parts[0]
        or ".." in parts
        or "\x00" in location
    ):
        raise KilnError(
            "TYPE",
            f"{where}: expected a relative location inside base_dir, found {location!r}",
            found=location,
        )
    base = os.path.realpath(_check_path(base_dir))
    path = os.path.realpath(os.path.join(base, *parts))
    if os.path.commonpath([base, path]) != base:
        raise KilnError(
            "TYPE",
            f"{where}: expected a location inside base_dir {base!r}, found {location!r}, "
            f"which resolves to {path!r} (a symlink out?)",
            found=location,
        )
    offset = _external_int(entries, "offset", where, 0)
    # Stat before opening: opening a FIFO or a device could block or have effects.
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        found = "a directory" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
        raise KilnError("TYPE", f"{where}: expected a regular file at {location!r}, found {found}")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        length = _external_int(entries, "length", where, max(size - offset, 0))
        if offset + length > size:
            raise KilnError(
                "LENGTH",
                f"{where}: expected offset {offset} + length {length} = {offset + length} "
                f"bytes in {location!r}, found a file of {size} bytes",
                expected=offset + length,
                found=size,
            )
        if length == 0:
            return memoryview(b"")
        # A read-only map: the returned arrays view the file, no copy.
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return memoryview(mapped)[offset : offset + length]


def _external_int(entries: Mapping[str, str], key: str, where: str, default: int) -> int:
    text = entries.get(key)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit():
        raise KilnError(
            "TYPE", f"{where}: expected {key} to be a decimal integer >= 0, found {text!r}"
        )
    return int(text)


def _tensor_source(
    tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None
) -> tuple[OnnxType, tuple[int, ...], memoryview | None, Any]:
    """Check ``tensor`` and find its values: ``(row, dims, raw, field values)``,
    exactly one of ``raw`` and ``field values`` not None."""
    onnx_pkg = _onnx()
    if not isinstance(tensor, onnx_pkg.TensorProto):
        raise KilnError("TYPE", f"expected an onnx.TensorProto, found {_describe(tensor)}")
    try:
        row = data_type_info(tensor.data_type)
    except KilnError as exc:
        raise exc.prefixed(f"tensor {tensor.name!r}: ") from None
    if tensor.HasField("segment"):
        segment = tensor.segment
        raise KilnError(
            "TYPE",
            f"tensor {tensor.name!r}: expected a whole tensor, found a segment (begin "
            f"{segment.begin}, end {segment.end}); segmented tensors are not supported",
        )
    dims = _check_shape(list(tensor.dims))
    filled = [name for name in _TYPED_FIELDS if len(getattr(tensor, name))]
    external = tensor.data_location == onnx_pkg.TensorProto.EXTERNAL
    raw_set = tensor.HasField("raw_data")
    places = filled + ["raw_data"] * raw_set + ["external data"] * external
    if len(places) > 1 or (filled and filled != [row.field]):
        raise KilnError(
            "TYPE",
            f"tensor {tensor.name!r} ({row.label}): expected its values in one place, raw_data "
            f"or {row.field}, found {', '.join(places)}",
        )
    if row.bits is None and (raw_set or external):
        raise KilnError("TYPE", _STRING_RAW.format(label=f"tensor {tensor.name!r}: {row.label}"))
    if external:
        return row, dims, _external_bytes(tensor, base_dir), None
    if raw_set:
        return row, dims, memoryview(tensor.raw_data), None
    return row, dims, None, getattr(tensor, row.field)


def tensor_to_numpy(
    tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None = None
) -> np.ndarray:
    """Decode an ``onnx.TensorProto`` into a numpy array, bits untouched.

    Parameters
    ----------
    tensor : onnx.TensorProto
        Values in ``raw_data``, in the typed field, or in external data.
    base_dir : path, optional
        The directory external data is relative to (the model's directory).
        The location must stay inside it: absolute paths, ``..`` and symlinks
        that lead out are TYPE errors.

    Returns
    -------
    numpy.ndarray
        As :func:`decode_raw` or :func:`decode_field`; external data is
        memory-mapped read-only.

    Raises
    ------
    KilnError
        As :func:`decode_raw`/:func:`decode_field`; TYPE for values in more
        than one place, a STRING tensor with ``raw_data``, or an external
        location outside ``base_dir`` (or a ``base_dir`` that is not a path);
        LENGTH for external data past the end of its file.
    OSError
        When the external data file cannot be opened (missing, a dangling
        link).
    ImportError
        When onnx is not installed.

    Examples
    --------
    >>> import onnx
    >>> t = onnx.helper.make_tensor("w", onnx.TensorProto.INT4, [3], b"\\x21\\x03", raw=True)
    >>> tensor_to_numpy(t).astype(int)
    array([1, 2, 3])
    """
    row, dims, raw, values = _tensor_source(tensor, base_dir)
    try:
        if raw is not None:
            return decode_raw(row.data_type, raw, dims)
        return decode_field(row.data_type, values, dims)
    except KilnError as exc:
        raise exc.prefixed(f"tensor {tensor.name!r}: ") from None


def numpy_to_tensor(array: npt.ArrayLike, name: str | None = None) -> onnx.TensorProto:
    """Encode an array as an ``onnx.TensorProto``, bits untouched.

    Parameters
    ----------
    array : array_like
        Any array of a dtype in the table; ``str``/``object`` arrays of
        ``str`` or ``bytes`` become STRING tensors (``string_data``, UTF-8).
    name : str, optional
        The tensor's name.

    Returns
    -------
    onnx.TensorProto
        ``dims``, ``data_type`` and ``raw_data`` (``string_data`` for STRING):
        the same message ``onnx.numpy_helper.from_array`` builds.

    Raises
    ------
    KilnError
        As :func:`encode_raw`; TYPE for a STRING element that is neither
        ``str`` nor UTF-8 ``bytes`` (what :func:`decode_field` refuses is not
        written), and for a ``name`` that is not a ``str``.
    ImportError
        When onnx is not installed.

    Examples
    --------
    >>> import ml_dtypes
    >>> t = numpy_to_tensor(np.array([1.5, -3], dtype=ml_dtypes.float6_e3m2fn), name="s")
    >>> t.data_type, t.raw_data.hex(), list(t.dims)
    (28, '8e0c', [2])
    """
    onnx_pkg = _onnx()
    arr = _as_array(array)
    row = data_type_for_dtype(arr.dtype)
    tensor: onnx.TensorProto = onnx_pkg.TensorProto()
    tensor.dims.extend(arr.shape)
    if name is not None and not (isinstance(name, str) and _encodes(name)):
        raise KilnError(
            "TYPE",
            f"expected a tensor name that is a str UTF-8 can encode, found {_describe(name)}",
        )
    if name:
        tensor.name = name
    tensor.data_type = int(row.data_type)
    if row.bits is None:
        tensor.string_data.extend(_encode_strings(arr))
    else:
        tensor.raw_data = bytes(encode_raw(arr, row.data_type))
    return tensor


def _check_code_points(arr: np.ndarray) -> None:
    """A numpy str array can hold code points past U+10FFFF, which Python turns
    into broken str objects (encoded as some other character, or crashing)."""
    if arr.dtype.kind != "U" or not arr.size or not arr.dtype.itemsize:
        return
    lanes = np.ascontiguousarray(arr).reshape(-1).view(f"{arr.dtype.byteorder}u4")
    bad = lanes > 0x10FFFF
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        index, found = at // (arr.dtype.itemsize // 4), int(lanes[at])
        raise KilnError(
            "TYPE",
            f"ONNX STRING (8) shape {arr.shape}: expected code points up to U+10FFFF, found "
            f"0x{found:x} in element {index}",
            found=found,
            index=index,
        )


def _encode_strings(arr: np.ndarray) -> list[bytes]:
    _check_code_points(arr)
    items = arr.reshape(-1).tolist()
    try:
        return list(map(_utf8_encode, items))
    except (TypeError, UnicodeError) as exc:
        index = list(map(_encodes, items)).index(False)
        raise KilnError(
            "TYPE",
            f"ONNX STRING (8) shape {arr.shape}: expected str or UTF-8 bytes elements, found "
            f"{_describe(items[index])} at element {index} ({exc})",
            index=index,
        ) from None


def _utf8_encode(value: object) -> bytes:
    if isinstance(value, bytes):
        value.decode("utf-8")  # bytes that decode_field would refuse are not written
        return value
    if isinstance(value, str):
        return value.encode("utf-8")  # UnicodeEncodeError for a lone surrogate
    raise TypeError(f"not str or bytes: {type(value).__name__}")


def _encodes(value: object) -> bool:
    try:
        _utf8_encode(value)
    except (TypeError, UnicodeError):
        return False
    return True


def _tensor_to_kiln(tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None) -> Payload:
    row, dims, raw, values = _tensor_source(tensor, base_dir)
    try:
        if raw is None:
            raw = encode_raw(decode_field(row.data_type, values, dims), row.data_type)
        return to_kiln(row.data_type, raw, dims)
    except KilnError as exc:
        raise exc.prefixed(f"tensor {tensor.name!r}: ") from None


def model_to_kiln(
    model: onnx.ModelProto | str | os.PathLike[str],
    base_dir: str | os.PathLike[str] | None = None,
) -> Iterator[tuple[str, Payload]]:
    """Yield ``(name, Payload)`` for every initializer of a model's main graph.

    Parameters
    ----------
    model : onnx.ModelProto or path
        A loaded model, or the path of an ``.onnx`` file (loaded without its
        external data, which is then mapped tensor by tensor).
    base_dir : path, optional
        The directory external data is relative to; for a path, defaults to
        the file's directory.

    Returns
    -------
    iterator of (str, Payload)
        In ``graph.initializer`` order, each as :func:`to_kiln` makes it.

    Raises
    ------
    KilnError
        TYPE when ``model`` is neither, or a file that does not parse as a
        model; while iterating, whatever :func:`to_kiln` raises for an
        initializer (TYPE for STRING, which has no Kiln form), the message
        naming the tensor.
    OSError
        When the model file, or while iterating an external data file, cannot
        be opened.
    ImportError
        When onnx is not installed.

    Examples
    --------
    >>> import onnx
    >>> w = numpy_to_tensor(np.arange(3, dtype=np.float32), name="w")
    >>> graph = onnx.helper.make_graph([], "g", [], [], initializer=[w])
    >>> [(name, p.code, p.shape) for name, p in model_to_kiln(onnx.helper.make_model(graph))]
    [('w', <Code.F32: 2>, (3,))]
    """
    onnx_pkg = _onnx()
    if isinstance(model, (str, os.PathLike)):
        from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]

        path = _check_path(model)
        try:
            proto = onnx_pkg.load(path, load_external_data=False)
        except DecodeError as exc:
            raise KilnError(
                "TYPE",
                f"{path!r}: expected an ONNX model (a ModelProto), found bytes that do "
                f"not parse: {exc}",
            ) from exc
        if base_dir is None:
            base_dir = os.path.dirname(os.path.abspath(path))
    elif isinstance(model, onnx_pkg.ModelProto):
        proto = model
    else:
        raise KilnError("TYPE", f"expected an onnx.ModelProto or a path, found {_describe(model)}")
    return _initializers(proto, base_dir)


def _initializers(
    proto: onnx.ModelProto, base_dir: str | os.PathLike[str] | None
) -> Iterator[tuple[str, Payload]]:
    for tensor in proto.graph.initializer:
        yield tensor.name, _tensor_to_kiln(tensor, base_dir)
