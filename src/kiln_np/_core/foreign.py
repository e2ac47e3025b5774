"""The registry of foreign element types: types Kiln has no closed code for.

Some formats hold element types the Kiln spec does not list (ONNX's COMPLEX64
and 2-bit integers, safetensors' ``F8_E4M3FNUZ`` and ``C64``, ...).  They
travel as opaque Kiln payloads, and every adapter uses the same opaque code
and :class:`~kiln_np.Layout` for the same element type, from this one table,
so a C64 tensor read from safetensors and a COMPLEX64 tensor read from ONNX
are the same Kiln payload.

Each block of such a payload is one element, stored as numpy stores it: a
block is ``dtype.itemsize`` bytes (8 for complex64, 1 for the 8-, 6- and
2-bit types, whose element bits sit in the low bits of the byte with the
other bits 0), so the payload's blocks viewed as ``dtype`` are the elements.

====== ====================== =============== ==== ================================================
code   layout                 numpy dtype     bits element
====== ====================== =============== ==== ================================================
0x4f0e onnx.complex64/8       complex64       64   two IEEE binary32, (real, imaginary)
0x4f0f onnx.complex128/16     complex128      128  two IEEE binary64, (real, imaginary)
0x4f12 onnx.float8e4m3fnuz/1  float8_e4m3fnuz 8    E4M3 with no negative zero, 0x80 is NaN, bias 8
0x4f14 onnx.float8e5m2fnuz/1  float8_e5m2fnuz 8    E5M2 with no negative zero, 0x80 is NaN, bias 16
0x4f19 onnx.uint2/1           uint2           2    unsigned 2-bit, in the low bits
0x4f1a onnx.int2/1            int2            2    two's-complement 2-bit, in the low bits
0x4f1b onnx.float6e2m3/1      float6_e2m3fn   6    OCP MX FP6 E2M3, in the low bits
0x4f1c onnx.float6e3m2/1      float6_e3m2fn   6    OCP MX FP6 E3M2, in the low bits
====== ====================== =============== ==== ================================================

The codes are ``0x4f00`` plus the ONNX ``data_type`` and the layouts are
named ``onnx.*`` because the ONNX bridge introduced them first; they are
stable wire facts now, shared by every adapter.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from .table import DTypeIndex, Layout, spec_dtype

__all__ = ["FOREIGN", "FOREIGN_BY_CODE", "FOREIGN_BY_NAME", "ForeignType", "foreign_for_dtype"]


@dataclass(frozen=True)
class ForeignType:
    """One foreign element type: its opaque code, layout and numpy dtype.

    Attributes
    ----------
    name : str
        The numpy/ml_dtypes name of the element type (``dtype.name``).
    code : int
        The opaque Kiln code (4096-32767) its payloads travel under.
    layout : Layout
        The layout that goes with ``code``: one block per element,
        ``dtype.itemsize`` bytes.
    dtype_spec : str
        How the table spells :attr:`dtype` (``'<c8'``, ``'ml_dtypes.int2'``).
    bits : int
        The bits that carry the element (2 for ``int2``, 64 for
        ``complex64``); the rest of its storage is 0.
    element : str
        What an element is.
    """

    name: str
    code: int
    layout: Layout
    dtype_spec: str
    bits: int
    element: str

    @functools.cached_property
    def dtype(self) -> np.dtype[Any]:
        """The element as numpy (or ml_dtypes) holds it, little-endian (ml_dtypes
        is imported here, on first use)."""
        return spec_dtype(self.dtype_spec)


def _foreign(code: int, layout: str, spec: str, bits: int, element: str) -> ForeignType:
    # Name and block size come from the table, so listing loads no ml_dtypes type:
    # each element is stored in whole bytes, ceil(bits / 8) of them.
    ml_name = spec.removeprefix("ml_dtypes.")
    name = ml_name if ml_name != spec else spec_dtype(spec).name
    return ForeignType(name, code, Layout(layout, -(-bits // 8)), spec, bits, element)


FOREIGN: tuple[ForeignType, ...] = (
    _foreign(0x4F0E, "onnx.complex64", "<c8", 64, "two IEEE binary32, (real, imaginary)"),
    _foreign(0x4F0F, "onnx.complex128", "<c16", 128, "two IEEE binary64, (real, imaginary)"),
    _foreign(
        0x4F12,
        "onnx.float8e4m3fnuz",
        "ml_dtypes.float8_e4m3fnuz",
        8,
        "E4M3 with no negative zero, 0x80 is NaN, bias 8",
    ),
    _foreign(
        0x4F14,
        "onnx.float8e5m2fnuz",
        "ml_dtypes.float8_e5m2fnuz",
        8,
        "E5M2 with no negative zero, 0x80 is NaN, bias 16",
    ),
    _foreign(0x4F19, "onnx.uint2", "ml_dtypes.uint2", 2, "unsigned 2-bit, in the low bits"),
    _foreign(0x4F1A, "onnx.int2", "ml_dtypes.int2", 2, "two's-complement 2-bit, in the low bits"),
    _foreign(
        0x4F1B, "onnx.float6e2m3", "ml_dtypes.float6_e2m3fn", 6, "OCP MX FP6 E2M3, in the low bits"
    ),
    _foreign(
        0x4F1C, "onnx.float6e3m2", "ml_dtypes.float6_e3m2fn", 6, "OCP MX FP6 E3M2, in the low bits"
    ),
)
"""Every foreign element type, in code order."""

FOREIGN_BY_CODE: Mapping[int, ForeignType] = MappingProxyType({f.code: f for f in FOREIGN})
"""The foreign types by opaque code."""

FOREIGN_BY_NAME: Mapping[str, ForeignType] = MappingProxyType({f.name: f for f in FOREIGN})
"""The foreign types by numpy/ml_dtypes name (``'float8_e4m3fnuz'``, ``'complex64'``)."""

_BY_DTYPE: DTypeIndex[ForeignType] = DTypeIndex((f.dtype_spec, f) for f in FOREIGN)


def foreign_for_dtype(dtype: np.dtype[Any]) -> ForeignType | None:
    """The foreign type of a numpy dtype (byte order aside), or None.

    >>> foreign_for_dtype(np.dtype(">c8")).layout
    Layout(name='onnx.complex64', block_size=8)
    >>> foreign_for_dtype(np.dtype("<f4")) is None
    True
    """
    return _BY_DTYPE.lookup(dtype.newbyteorder("=")) if dtype.fields is None else None
