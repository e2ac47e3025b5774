"""The element and scale types of block-scaled tensors: one table, as data.

Each row of :data:`KINDS` is one Kiln type a block-scaled tensor may hold, as
elements, as scales, or both (f8e4m3); every other fact (the numpy dtype, the
value of each storage byte, the largest finite element) is derived from the
row.  :data:`ELEMENTS` and :data:`SCALES` index the rows by a payload's Kiln
code, :data:`ELEMENT_DTYPES` and :data:`SCALE_DTYPES` by an array's dtype.
The values tables are built the first time they are used, so importing this
module does not import ml_dtypes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from kiln_np._core.table import Code, DType, DTypeIndex, dtype_info

__all__ = [
    "ELEMENTS",
    "ELEMENT_DTYPES",
    "KINDS",
    "QUANTIZED",
    "SCALES",
    "SCALE_DTYPES",
    "Kind",
    "spoken",
]


@dataclass(frozen=True)
class Kind:
    """One element or scale type of block-scaled tensors.

    Attributes
    ----------
    code : Code
        Its Kiln code.
    element : bool
        It may be the elements of a block-scaled tensor.
    block_size : int or None
        As a scale: the block size when the caller gives none (32 for e8m0,
        16 for f8e4m3, the NVFP4 style); None when it is no scale.
    emax : int or None
        As a float element: OCP MX's ``emax_elem``, the exponent of its
        largest normal (:func:`kiln_np.mx.quantize` makes these); None
        otherwise.
    unit : float
        What the storage integer 1 stands for: 2**-6 for i8 (OCP MXINT8's
        implicit scale), 1 for the floats.
    raw : tuple of Code
        Other codes whose bytes are read as this scale (raw uint8 e8m0 bytes).

    Examples
    --------
    >>> SCALES[Code.U8].name, SCALES[Code.U8].block_size
    ('e8m0', 32)
    >>> ELEMENTS[Code.I8].values[[1, 0x80]].tolist()
    [0.015625, -2.0]
    """

    code: Code
    element: bool = False
    block_size: int | None = None
    emax: int | None = None
    unit: float = 1.0
    raw: tuple[Code, ...] = ()

    @property
    def row(self) -> DType:
        """The Kiln table's row of :attr:`code`."""
        return dtype_info(self.code)

    @property
    def name(self) -> str:
        """The spec's short name (``'e2m1'``)."""
        return self.row.name

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of one element (ml_dtypes' for the floats)."""
        return self.row.dtype

    @property
    def codes(self) -> int:
        """How many storage bytes are values: 16 for e2m1, 256 otherwise."""
        return 1 << self.row.bits

    @functools.cached_property
    def values(self) -> npt.NDArray[np.float64]:
        """The float64 value of each of the 256 storage bytes (0 past
        :attr:`codes`), read-only; every NaN is the canonical one."""
        full = np.zeros(256, np.float64)
        full[: self.codes] = np.arange(self.codes, dtype=np.uint8).view(self.dtype)
        full *= self.unit
        full[np.isnan(full)] = np.nan  # one canonical NaN, whatever the code's sign
        full.flags.writeable = False
        return full

    @functools.cached_property
    def largest(self) -> float:
        """The largest finite value: 6 for e2m1, 448 for f8e4m3, 57344 for f8e5m2."""
        values = self.values[: self.codes]
        return float(values[np.isfinite(values)].max())


KINDS: tuple[Kind, ...] = (
    Kind(Code.E8M0, block_size=32, raw=(Code.U8,)),
    Kind(Code.E2M1, element=True, emax=2),
    Kind(Code.F8E4M3, element=True, emax=8, block_size=16),
    Kind(Code.F8E5M2, element=True, emax=15),
    Kind(Code.I8, element=True, unit=2.0**-6),
)
"""Every element and scale type, the MX scale first: MXFP4 is e2m1 + e8m0,
MXFP8 f8e4m3/f8e5m2 + e8m0, MXINT8 i8 + e8m0, NVFP4 e2m1 + f8e4m3."""

ELEMENTS: Mapping[int, Kind] = MappingProxyType({int(k.code): k for k in KINDS if k.element})
"""The element kinds by Kiln code, in table order."""

_SCALE_KINDS = tuple(k for k in KINDS if k.block_size is not None)
SCALES: Mapping[int, Kind] = MappingProxyType(
    {int(k.code): k for k in _SCALE_KINDS} | {int(c): k for k in _SCALE_KINDS for c in k.raw}
)
"""The scale kinds by Kiln code, in table order, then the raw codes read as
one (u8: e8m0 bytes)."""

ELEMENT_DTYPES: DTypeIndex[Kind] = DTypeIndex(
    (dtype_info(c).dtype_spec, k) for c, k in ELEMENTS.items()
)
SCALE_DTYPES: DTypeIndex[Kind] = DTypeIndex(
    (dtype_info(c).dtype_spec, k) for c, k in SCALES.items()
)
"""The same by numpy dtype (an array's): look up with ``index[dtype]``, None for
another dtype (ml_dtypes' types join once ml_dtypes is loaded)."""

QUANTIZED: Mapping[str, Kind] = MappingProxyType(
    {k.name: k for k in ELEMENTS.values() if k.emax is not None}
)
"""The float element kinds by name: what :func:`kiln_np.mx.quantize` makes."""


def spoken(words: list[str]) -> str:
    """``'a, b or c'``: a list of alternatives for a message.

    >>> spoken(["e2m1", "f8e4m3", "f8e5m2"])
    'e2m1, f8e4m3 or f8e5m2'
    """
    return " or ".join(filter(None, (", ".join(words[:-1]), words[-1])))
