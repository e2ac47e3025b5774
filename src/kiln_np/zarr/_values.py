"""Scalars and fill values of the Zarr data types, bits intact (no zarr here).

A fill value in ``zarr.json`` is, per the Zarr v3 core spec and each
zarr-extensions type's README: a JSON integer for the integer types, ``true``
or ``false`` for bool, and for the float types a JSON number, ``"NaN"`` (the
bits each type's README names, e.g. ``0x7fc0`` for bfloat16), ``"Infinity"``
and ``"-Infinity"`` (only where the type has them), or ``"0x..."``, the hex
of the element's bits.  kiln_np writes a NaN as its hex bits, so a NaN's
payload survives (``"NaN"`` would canonicalize it), infinities by name and
every other float as a JSON number (exact: a finite value of these types is
a double).  No NaN is ever canonicalized on the way in either.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError

from ._types import ZarrType

__all__ = ["fill_from_json", "fill_to_json", "scalar_bits", "scalar_from_bits", "scalar_of"]

_SPECIAL = {"NaN", "Infinity", "-Infinity"}


def _bits_dtype(row: ZarrType) -> np.dtype[Any]:
    return np.dtype(f"<u{row.dtype.itemsize}")


def scalar_from_bits(row: ZarrType, bits: int) -> Any:
    """The scalar whose storage is ``bits``.

    >>> from kiln_np.zarr._types import ZARR_TYPES_BY_NAME as T
    >>> float(scalar_from_bits(T["bfloat16"], 0x3F80))
    1.0
    """
    return np.array([bits], _bits_dtype(row)).view(row.dtype)[0]


def scalar_bits(row: ZarrType, scalar: Any) -> int:
    """The storage bits of a scalar of ``row``'s type.

    >>> from kiln_np.zarr._types import ZARR_TYPES_BY_NAME as T
    >>> hex(scalar_bits(T["float32"], np.float32(1.0)))
    '0x3f800000'
    """
    return int(np.array([scalar], row.dtype).view(_bits_dtype(row))[0])


def _int_range(row: ZarrType) -> tuple[int, int]:
    if row.kind == "i":
        return -(1 << (row.bits - 1)), (1 << (row.bits - 1)) - 1
    return 0, (1 << row.bits) - 1


def _bad(row: ZarrType, data: object, expected: str) -> KilnError:
    return KilnError(
        "TYPE", f"{row.name} fill value: expected {expected}, found {show_value(data)}"
    )


def fill_from_json(row: ZarrType, data: object) -> Any:
    """The scalar a ``fill_value`` of ``zarr.json`` stands for.

    >>> from kiln_np.zarr._types import ZARR_TYPES_BY_NAME as T
    >>> hex(scalar_bits(T["bfloat16"], fill_from_json(T["bfloat16"], "NaN")))
    '0x7fc0'
    >>> fill_from_json(T["int4"], 8)
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: TYPE: int4 fill value: expected an integer in -8..7, found int 8
    """
    if row.kind == "b":
        if isinstance(data, bool):
            return np.bool_(data)
        raise _bad(row, data, "true or false")
    if row.kind in "iu":
        lo, hi = _int_range(row)
        if type(data) is int and lo <= data <= hi:
            return row.dtype.type(data)
        raise _bad(row, data, f"an integer in {lo}..{hi}")
    if row.kind == "c":
        if isinstance(data, list) and len(data) == 2:
            part = np.dtype(f"<f{row.dtype.itemsize // 2}")
            real, imag = (_float_from_json(row, part, x) for x in data)
            return np.array([real, imag], part).view(row.dtype)[0]
        raise _bad(row, data, "a pair [real, imaginary]")
    return _float_from_json(row, row.dtype, data)


def _float_from_json(row: ZarrType, dtype: np.dtype[Any], data: object) -> Any:
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        return dtype.type(data)
    if isinstance(data, str) and data.startswith("0x"):
        limit = 1 << (8 * dtype.itemsize if row.bits >= 8 else row.bits)
        try:
            bits = int(data[2:], 16)
        except ValueError:
            bits = -1
        if 0 <= bits < limit and "_" not in data:
            return np.array([bits], f"<u{dtype.itemsize}").view(dtype)[0]
        raise _bad(row, data, f"hex bits below {hex(limit)}")
    if data == "NaN" and row.nan is not None:
        return scalar_from_bits(row, row.nan)
    if data == "NaN" and row.kind == "c":
        return dtype.type("nan")
    if data in ("Infinity", "-Infinity") and row.infinity:
        return dtype.type(-math.inf if data[0] == "-" else math.inf)
    specials = [s for s in sorted(_SPECIAL) if (row.nan is not None) or s != "NaN"]
    allowed = [s for s in specials if row.infinity or "Infinity" not in s]
    return _raise(row, data, ", ".join(["a number", "hex bits", *allowed]))


def _raise(row: ZarrType, data: object, expected: str) -> Any:
    raise _bad(row, data, expected)


def fill_to_json(row: ZarrType, scalar: Any) -> Any:
    """The ``fill_value`` kiln_np writes for a scalar: bits intact.

    >>> from kiln_np.zarr._types import ZARR_TYPES_BY_NAME as T
    >>> fill_to_json(T["bfloat16"], scalar_from_bits(T["bfloat16"], 0x7FC1))
    '0x7fc1'
    >>> fill_to_json(T["float8_e4m3fn"], scalar_from_bits(T["float8_e4m3fn"], 0x38))
    1.0
    """
    if row.kind == "b":
        return bool(scalar)
    if row.kind in "iu":
        return int(scalar)
    if row.kind == "c":
        part = np.dtype(f"<f{row.dtype.itemsize // 2}")
        pair = np.array([scalar], row.dtype).view(part)
        return [_float_to_json(part, p) for p in pair]
    return _float_to_json(row.dtype, scalar)


def _float_to_json(dtype: np.dtype[Any], scalar: Any) -> Any:
    value = float(scalar)
    if math.isnan(value):
        bits = int(np.array([scalar], dtype).view(f"<u{dtype.itemsize}")[0])
        return f"0x{bits:0{2 * dtype.itemsize}x}"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def scalar_of(row: ZarrType, data: object) -> Any:
    """``data`` as a scalar of ``row``'s type: a scalar of the type as it is
    (bits kept), a JSON fill value (strings, numbers) as :func:`fill_from_json`
    reads it, or a Python or numpy number cast.

    >>> from kiln_np.zarr._types import ZARR_TYPES_BY_NAME as T
    >>> int(scalar_of(T["uint4"], np.uint8(15)))
    15
    """
    if isinstance(data, np.generic) and data.dtype == row.dtype:
        return data
    if isinstance(data, np.generic) and not isinstance(data, np.bool_):
        data = data.item() if data.dtype.kind in "iub" else float(data)
    if isinstance(data, np.bool_):
        data = bool(data)
    if row.kind == "f" and type(data) is int:
        return row.dtype.type(data)
    if row.kind == "c" and isinstance(data, (int, float, complex)) and not isinstance(data, bool):
        return row.dtype.type(data)
    return fill_from_json(row, data)
