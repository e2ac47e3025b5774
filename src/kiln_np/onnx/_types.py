"""The ONNX data-type table: one :class:`OnnxType` row per ``TensorProto.DataType``.

Every fact about an ONNX type is derived from its row.  The 19 types Kiln has
name their Kiln code; the eight ONNX-only types take their opaque code and
layout from the shared registry of foreign element types
(:mod:`kiln_np._core.foreign`), so every adapter uses the same ones.  STRING, the
one row with no bits and no Kiln form, is kept out of the byte paths by
:func:`raw_type`: everything that handles bytes gets a :class:`RawType`, whose
facts are never None.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from kiln_np._core.checks import set_module, show_int, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import FOREIGN_BY_CODE
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import (
    Code,
    DTypeIndex,
    Element,
    Layout,
    as_dtype,
    code_label,
    dtype_info,
    resolve,
    spec_dtype,
)

__all__ = [
    "DATA_TYPES",
    "OPAQUE_BASE",
    "STRING_RAW",
    "DataType",
    "OnnxType",
    "RawType",
    "data_type_for_dtype",
    "data_type_info",
    "dtype_for_data_type",
    "raw_type",
    "row_for_dtype",
    "type_for_kiln",
]

OPAQUE_BASE = 0x4F00
"""ONNX-only types travel under the opaque Kiln code ``OPAQUE_BASE + data_type``."""


@set_module("kiln_np.onnx")
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


STRING_RAW = (
    "{label} cannot use raw_data: STRING elements are UTF-8 byte strings, one per "
    "string_data entry (use decode_field); a tensor that puts them in raw_data is refused"
)
"""The one message for STRING where bytes are expected; ``label`` names the type."""


@set_module("kiln_np.onnx")
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
    dtype_spec : str
        How the table spells :attr:`dtype` (``'<f4'``, ``'ml_dtypes.int2'``).
    kiln_code : int or None
        The Kiln code: closed (1-19) or opaque (``OPAQUE_BASE + data_type``);
        None for STRING.
    layout : Layout or None
        The opaque Kiln layout of an ONNX-only type; None otherwise.
    meaning : str
        The ONNX table's description.

    Examples
    --------
    >>> data_type_info(26).byte_length(5)  # INT2: ceil(5 x 2 / 8)
    2
    """

    data_type: DataType
    bits: int | None
    field: str
    dtype_spec: str
    kiln_code: int | None
    layout: Layout | None
    meaning: str

    @functools.cached_property
    def dtype(self) -> np.dtype[Any]:
        """What :func:`decode_raw` returns (``object`` of ``str`` for STRING);
        sub-byte types decode one element per byte (ml_dtypes is imported here,
        on first use)."""
        return spec_dtype(self.dtype_spec)

    @property
    def name(self) -> str:
        """The ONNX name, such as ``FLOAT8E4M3FNUZ``."""
        return self.data_type.name

    @property
    def label(self) -> str:
        """``'ONNX INT4 (22)'``: how messages name the type."""
        return f"ONNX {self.name} ({int(self.data_type)})"

    def byte_length(self, count: int) -> int:
        """Exact ``raw_data`` bytes for ``count`` elements: ``ceil(count * bits / 8)``.

        For the 19 types Kiln has, ``raw_data`` is the Kiln payload and this is
        the Kiln row's byte length; for the ONNX-only types, the ONNX table's
        bits say it (2- and 6-bit elements are packed in ``raw_data``).
        """
        return raw_type(self.data_type).byte_length(count)

    def __repr__(self) -> str:
        kiln = "none" if self.kiln_code is None else code_label(self.kiln_code)
        return f"OnnxType({int(self.data_type)}, {self.name!r}, {self.dtype}, kiln={kiln})"


@dataclass(frozen=True)
class RawType:
    """A row that has ``raw_data`` and a Kiln form: every type but STRING.

    ``code``/``layout`` are the Kiln form; ``sub_byte`` marks the 2- and 6-bit
    types, the only ones whose ``raw_data`` is not their Kiln payload (ONNX
    packs them; Kiln holds one byte per element).
    """

    row: OnnxType
    bits: int
    code: int
    layout: Layout | None

    @property
    def label(self) -> str:
        """``'ONNX INT4 (22)'``."""
        return self.row.label

    @property
    def sub_byte(self) -> bool:
        """True for the 2- and 6-bit types."""
        return self.bits in (2, 6)

    def kiln(self, dims: Sequence[int]) -> PayloadInfo:
        """The checked description of the Kiln form of ``dims`` elements (SHAPE
        for bad dims, as Kiln checks them), its context naming the ONNX type."""
        try:
            return payload_info(self.code, dims, self.layout)
        except KilnError as exc:
            raise exc.prefixed(f"{self.label} as Kiln ") from exc.__cause__

    @property
    def element(self) -> Element:
        """The Kiln element: the closed code's table row, or the opaque layout."""
        return resolve(self.code, self.layout)

    def byte_length(self, count: int) -> int:
        """``raw_data`` bytes of ``count`` elements (see :meth:`OnnxType.byte_length`)."""
        if self.sub_byte:  # ONNX packs them: the ONNX table's bits say the size
            return -(-count * self.bits // 8)
        return self.element.byte_length(count)  # raw_data is the Kiln payload


def _mapped(data_type: DataType, code: Code, field: str, meaning: str) -> OnnxType:
    row = dtype_info(code)
    return OnnxType(data_type, row.bits, field, row.dtype_spec, int(code), None, meaning)


def _opaque(data_type: DataType, field: str, meaning: str) -> OnnxType:
    foreign = FOREIGN_BY_CODE[OPAQUE_BASE + data_type]
    return OnnxType(
        data_type, foreign.bits, field, foreign.dtype_spec, foreign.code, foreign.layout, meaning
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
    OnnxType(_T.STRING, None, "string_data", "O", None, None, "UTF-8 strings"),
    _mapped(_T.BOOL, Code.BOOL, "int32_data", "one byte, 0 or 1"),
    _mapped(_T.FLOAT16, Code.F16, "int32_data", "IEEE half"),
    _mapped(_T.DOUBLE, Code.F64, "double_data", "IEEE 754 double"),
    _mapped(_T.UINT32, Code.U32, "uint64_data", "unsigned 32-bit"),
    _mapped(_T.UINT64, Code.U64, "uint64_data", "unsigned 64-bit"),
    _opaque(_T.COMPLEX64, "float_data", "two floats"),
    _opaque(_T.COMPLEX128, "double_data", "two doubles"),
    _mapped(_T.BFLOAT16, Code.BF16, "int32_data", "the top half of a float; IR 4"),
    _mapped(_T.FLOAT8E4M3FN, Code.F8E4M3, "int32_data", "8-bit float, 4 exponent bits; IR 9"),
    _opaque(
        _T.FLOAT8E4M3FNUZ, "int32_data", "E4M3 with no negative zero, 0x80 is NaN, bias 8; IR 9"
    ),
    _mapped(_T.FLOAT8E5M2, Code.F8E5M2, "int32_data", "8-bit float, 5 exponent bits; IR 9"),
    _opaque(
        _T.FLOAT8E5M2FNUZ, "int32_data", "E5M2 with no negative zero, 0x80 is NaN, bias 16; IR 9"
    ),
    _mapped(_T.UINT4, Code.U4, "int32_data", "unsigned 4-bit; IR 10"),
    _mapped(_T.INT4, Code.I4, "int32_data", "signed 4-bit; IR 10"),
    _mapped(_T.FLOAT4E2M1, Code.E2M1, "int32_data", "4-bit float, bias 1; IR 11"),
    _mapped(_T.FLOAT8E8M0, Code.E8M0, "int32_data", "a power of two, for scales; IR 12"),
    _opaque(_T.UINT2, "int32_data", "unsigned 2-bit; IR 13"),
    _opaque(_T.INT2, "int32_data", "signed 2-bit; IR 13"),
    _opaque(_T.FLOAT6E2M3, "int32_data", "6-bit float, 2 exponent bits, bias 1 (OCP MX); IR 14"),
    _opaque(_T.FLOAT6E3M2, "int32_data", "6-bit float, 3 exponent bits, bias 3 (OCP MX); IR 14"),
)
del _T

_BY_VALUE: Mapping[int, OnnxType] = MappingProxyType({int(r.data_type): r for r in DATA_TYPES})
_RAW: Mapping[int, RawType] = MappingProxyType(
    {
        int(r.data_type): RawType(r, r.bits, r.kiln_code, r.layout)
        for r in DATA_TYPES
        if r.bits is not None and r.kiln_code is not None
    }
)
_BY_KILN: Mapping[int, RawType] = MappingProxyType({t.code: t for t in _RAW.values()})
_OPAQUE_CODES = ", ".join(f"0x{t.code:04x}" for t in _RAW.values() if t.layout is not None)
_BY_DTYPE: DTypeIndex[OnnxType] = DTypeIndex(
    (r.dtype_spec, r) for r in DATA_TYPES if r.bits is not None
)


@set_module("kiln_np.onnx")
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
            "TYPE", f"expected an ONNX data_type, an integer 1-28, found {show_value(data_type)}"
        )
    value = int(data_type)
    row = _BY_VALUE.get(value)
    if row is None:
        why = "0 is UNDEFINED" if value == 0 else "ONNX tensor types are 1-28"
        shown = f" (0x{value:02x})" if 0 <= value < 2**64 else ""
        raise KilnError(
            "TYPE",
            f"expected an ONNX data_type in 1-28, found {show_int(value)}{shown}: {why}",
            found=value,
        )
    return row


def raw_type(data_type: int) -> RawType:
    """The row of a type that has ``raw_data`` and a Kiln form; TYPE for a bad
    ``data_type`` and for STRING."""
    row = data_type_info(data_type)
    raw = _RAW.get(int(row.data_type))
    if raw is None:
        raise KilnError("TYPE", STRING_RAW.format(label=row.label))
    return raw


def type_for_kiln(code: int, layout: Layout | None) -> RawType:
    """The ONNX type of a Kiln code and layout (already checked by Kiln), or
    TYPE for an opaque code or layout that is not one of ONNX's."""
    raw = _BY_KILN.get(code)
    if raw is None or raw.layout != layout:
        expected = "none" if raw is None else repr(raw.layout)
        raise KilnError(
            "TYPE",
            f"{code_label(code)} with layout {layout!r} is not an ONNX type: expected one of "
            f"the opaque codes {_OPAQUE_CODES} with its onnx.* layout (for this code: "
            f"{expected})",
            code=code,
        )
    return raw


def row_for_dtype(dtype: npt.DTypeLike) -> OnnxType:
    """The ONNX row of a numpy or ml_dtypes dtype (byte order aside), or TYPE;
    ``object`` and ``str`` dtypes are STRING."""
    try:
        d = as_dtype(dtype)
    except (TypeError, ValueError) as exc:  # ("f4", -1) is a ValueError
        raise KilnError("TYPE", f"expected a numpy dtype, found {show_value(dtype)}") from exc
    if d.kind in "OU":
        return _BY_VALUE[DataType.STRING]
    row = _BY_DTYPE.lookup(d.newbyteorder("=")) if d.fields is None else None
    if row is None:
        raise KilnError(
            "TYPE",
            f"dtype {d} ({d.str}) has no ONNX data_type; expected one of "
            + ", ".join(str(r.dtype) for r in DATA_TYPES),
            found=str(d),
        )
    return row


@set_module("kiln_np.onnx")
def data_type_for_dtype(dtype: npt.DTypeLike) -> DataType:
    """The ONNX data type of a numpy or ml_dtypes dtype (byte order aside):
    the ONNX :func:`kiln_np.code_for_dtype`.

    Parameters
    ----------
    dtype : dtype_like
        ``float32``, ``ml_dtypes.int2``, ``complex64``, ...; ``object`` and
        ``str`` dtypes are STRING.

    Returns
    -------
    DataType
        The type whose row's ``dtype`` this is.

    Raises
    ------
    KilnError
        TYPE for a dtype no ONNX type decodes to (``float8_e3m4``, ``int1``,
        ``datetime64``, structured, ...).

    Examples
    --------
    >>> data_type_for_dtype(">c8")
    <DataType.COMPLEX64: 14>
    """
    return row_for_dtype(dtype).data_type


@set_module("kiln_np.onnx")
def dtype_for_data_type(data_type: int) -> np.dtype[Any]:
    """The numpy dtype an ONNX data type decodes to: the ONNX
    :func:`kiln_np.dtype_for_code`.

    Raises
    ------
    KilnError
        As :func:`data_type_info`.

    Examples
    --------
    >>> dtype_for_data_type(27).name
    'float6_e2m3fn'
    >>> dtype_for_data_type(8).name
    'object'
    """
    return data_type_info(data_type).dtype
