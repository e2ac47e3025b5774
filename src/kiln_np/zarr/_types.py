"""The table of Zarr v3 data types kiln_np speaks, as data: one row per type.

Each row names the type as the zarr-extensions registry does (``data_type`` in
an array's ``zarr.json``), the numpy or ml_dtypes type that holds it in memory
(one element per byte for the sub-byte types, its bits in the low bits), its
bits, and the Kiln element it carries: a closed code, or a foreign type's opaque
code and layout (``kiln_np._core.foreign``), or none.

The rows marked ``plugin`` are the ones zarr-python does not know: kiln_np
registers them with zarr-python (``kiln_np.zarr._plugin``).  The others are
zarr's core types, listed so a Kiln tensor of every code has its Zarr type here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from kiln_np._core.foreign import FOREIGN_BY_NAME
from kiln_np._core.table import DTYPES, DTypeIndex, Layout, spec_dtype

__all__ = [
    "ZARR_TYPES",
    "ZARR_TYPES_BY_NAME",
    "ZarrType",
    "zarr_type_for_code",
    "zarr_type_for_dtype",
]


@dataclass(frozen=True)
class ZarrType:
    """One Zarr v3 data type and what it is in numpy and in Kiln.

    Attributes
    ----------
    name : str
        The ``data_type`` name in ``zarr.json`` (the zarr-extensions registry's).
    dtype_spec : str
        The numpy/ml_dtypes type, as a spec (``'<f4'``, ``'ml_dtypes.int4'``).
    bits : int
        The element's bits (4 for ``int4``; ``8 * itemsize`` for whole bytes).
    kind : str
        ``'f'`` float, ``'i'`` signed integer, ``'u'`` unsigned, ``'b'`` bool,
        ``'c'`` complex: how a fill value is read and how packbits extends bits.
    nan : int or None
        The bits the fill value ``"NaN"`` stands for (the registry's), None for a
        type with no NaN (and for non-floats).
    infinity : bool
        Whether ``"Infinity"`` and ``"-Infinity"`` are fill values of the type.
    code : int or None
        The Kiln code a tensor of this type travels under: a closed code, a
        foreign type's opaque code, or None (no Kiln element).
    layout : Layout or None
        The foreign type's layout, with its opaque code.
    plugin : bool
        Registered with zarr-python by kiln_np (zarr-python lacks it).
    """

    name: str
    dtype_spec: str
    bits: int
    kind: str
    nan: int | None
    infinity: bool
    code: int | None
    layout: Layout | None
    plugin: bool

    @functools.cached_property
    def dtype(self) -> np.dtype[Any]:
        """The numpy (or ml_dtypes) dtype, little-endian; ml_dtypes loads here."""
        return spec_dtype(self.dtype_spec)

    @property
    def signed(self) -> bool:
        """Whether packbits sign-extends the element (signed integers)."""
        return self.kind == "i"


_CLOSED = {row.name: row for row in DTYPES}


def _closed(name: str, kiln: str, kind: str, nan: int | None, inf: bool, plugin: bool) -> ZarrType:
    row = _CLOSED[kiln]
    return ZarrType(name, row.dtype_spec, row.bits, kind, nan, inf, int(row.code), None, plugin)


def _foreign(name: str, kind: str, nan: int | None) -> ZarrType:
    f = FOREIGN_BY_NAME[name]
    return ZarrType(name, f.dtype_spec, f.bits, kind, nan, False, f.code, f.layout, True)


def _other(name: str, bits: int, nan: int, inf: bool) -> ZarrType:
    return ZarrType(name, f"ml_dtypes.{name}", bits, "f", nan, inf, None, None, True)


ZARR_TYPES: tuple[ZarrType, ...] = (
    # zarr core types (zarr-python has them)
    _closed("float64", "f64", "f", 0x7FF8000000000000, True, False),
    _closed("float32", "f32", "f", 0x7FC00000, True, False),
    _closed("float16", "f16", "f", 0x7E00, True, False),
    _closed("bool", "bool", "b", None, False, False),
    _closed("int8", "i8", "i", None, False, False),
    _closed("uint8", "u8", "u", None, False, False),
    _closed("int16", "i16", "i", None, False, False),
    _closed("uint16", "u16", "u", None, False, False),
    _closed("int32", "i32", "i", None, False, False),
    _closed("uint32", "u32", "u", None, False, False),
    _closed("int64", "i64", "i", None, False, False),
    _closed("uint64", "u64", "u", None, False, False),
    ZarrType("complex64", "<c8", 64, "c", None, True, 0x4F0E, Layout("onnx.complex64", 8), False),
    ZarrType(
        "complex128", "<c16", 128, "c", None, True, 0x4F0F, Layout("onnx.complex128", 16), False
    ),
    # zarr-extensions types for Kiln's closed codes
    _closed("bfloat16", "bf16", "f", 0x7FC0, True, True),
    _closed("float8_e4m3fn", "f8e4m3", "f", 0x7F, False, True),  # the open proposal's name
    _closed("float8_e5m2", "f8e5m2", "f", 0x7E, True, True),
    _closed("float8_e8m0fnu", "e8m0", "f", 0xFF, False, True),
    _closed("int4", "i4", "i", None, False, True),
    _closed("uint4", "u4", "u", None, False, True),
    _closed("float4_e2m1fn", "e2m1", "f", None, False, True),
    # zarr-extensions types for Kiln's foreign types
    _foreign("float8_e4m3fnuz", "f", 0x80),
    _foreign("float8_e5m2fnuz", "f", 0x80),
    _foreign("int2", "i", None),
    _foreign("uint2", "u", None),
    _foreign("float6_e2m3fn", "f", None),
    _foreign("float6_e3m2fn", "f", None),
    # zarr-extensions types with no Kiln element: readable by zarr, not a Weights
    _other("float8_e4m3", 8, 0x7C, True),
    _other("float8_e3m4", 8, 0x78, True),
    _other("float8_e4m3b11fnuz", 8, 0x80, False),
)
"""Every Zarr v3 data type kiln_np knows, with its numpy type and Kiln element."""

ZARR_TYPES_BY_NAME: Mapping[str, ZarrType] = MappingProxyType({t.name: t for t in ZARR_TYPES})
"""The rows by ``data_type`` name."""

_BY_DTYPE: DTypeIndex[ZarrType] = DTypeIndex((t.dtype_spec, t) for t in ZARR_TYPES)
_BY_CODE: Mapping[int, ZarrType] = MappingProxyType(
    {t.code: t for t in ZARR_TYPES if t.code is not None}
)


def zarr_type_for_dtype(dtype: np.dtype[Any]) -> ZarrType | None:
    """The row of a numpy dtype (byte order aside), or None.

    >>> zarr_type_for_dtype(np.dtype(">i2")).name
    'int16'
    >>> zarr_type_for_dtype(np.dtype("U3")) is None
    True
    """
    return _BY_DTYPE.lookup(dtype.newbyteorder("=")) if dtype.fields is None else None


def zarr_type_for_code(code: int) -> ZarrType | None:
    """The row a Kiln code travels as, or None (an opaque code with no Zarr type).

    >>> zarr_type_for_code(4).name, zarr_type_for_code(0x4F19).name
    ('bfloat16', 'uint2')
    """
    return _BY_CODE.get(int(code))
