"""The safetensors dtype table as data, and the format's constants that its reader
and writer share.

Each :class:`SafetensorsDType` row names a safetensors dtype, the Kiln code
(and, for a foreign type, the layout) that holds it, and its size in bits;
:func:`safetensors_dtype` goes from a payload's description to its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kiln_np._core.checks import set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.foreign import FOREIGN_BY_NAME
from kiln_np._core.payload import PayloadInfo
from kiln_np._core.table import Code, Layout, code_label

__all__ = [
    "BY_NAME",
    "DTYPES",
    "INDEX_SUFFIX",
    "MAX_HEADER_BYTES",
    "MAX_INDEX_BYTES",
    "REFUSED",
    "SIZE_BYTES",
    "SafetensorsDType",
    "safetensors_dtype",
]

MAX_HEADER_BYTES = 100_000_000
"""The safetensors crate's ``MAX_HEADER_SIZE``."""
MAX_INDEX_BYTES = MAX_HEADER_BYTES
"""The largest ``*.safetensors.index.json`` read: the crate's cap on a header, since an
index lists less per tensor than a header holds (the largest published, DeepSeek-V3's
91,000 tensors, is under 10 MB)."""
INDEX_SUFFIX = ".safetensors.index.json"
"""How the index of a sharded checkpoint is named (``model.safetensors.index.json``)."""
SIZE_BYTES = 8
"""The header's size field: a little-endian uint64."""


@set_module("kiln_np.safetensors")
@dataclass(frozen=True)
class SafetensorsDType:
    """One safetensors dtype and its Kiln form.

    Attributes
    ----------
    name : str
        safetensors' name (``"BF16"``, ``"F8_E4M3"``, ``"F4"``).
    code : int
        The Kiln code: closed, or opaque (with ``layout``) for a foreign type.
    layout : Layout or None
        The foreign type's layout, for opaque codes.
    bits : int
        Bits per element (safetensors' ``bitsize``).
    """

    name: str
    code: int
    layout: Layout | None
    bits: int

    @property
    def alignment(self) -> int:
        """Bytes a writer aligns the tensor's data to: its element size."""
        return max(1, self.bits // 8)


def _closed(name: str, code: Code, bits: int) -> SafetensorsDType:
    return SafetensorsDType(name, code, None, bits)


def _foreign(name: str, numpy_name: str) -> SafetensorsDType:
    f = FOREIGN_BY_NAME[numpy_name]
    return SafetensorsDType(name, f.code, f.layout, f.bits)


DTYPES: tuple[SafetensorsDType, ...] = (
    _closed("BOOL", Code.BOOL, 8),
    _closed("U8", Code.U8, 8),
    _closed("I8", Code.I8, 8),
    _closed("I16", Code.I16, 16),
    _closed("U16", Code.U16, 16),
    _closed("I32", Code.I32, 32),
    _closed("U32", Code.U32, 32),
    _closed("I64", Code.I64, 64),
    _closed("U64", Code.U64, 64),
    _closed("F16", Code.F16, 16),
    _closed("BF16", Code.BF16, 16),
    _closed("F32", Code.F32, 32),
    _closed("F64", Code.F64, 64),
    _closed("F8_E4M3", Code.F8E4M3, 8),
    _closed("F8_E5M2", Code.F8E5M2, 8),
    _closed("F8_E8M0", Code.E8M0, 8),
    _closed("F4", Code.E2M1, 4),
    _foreign("F8_E4M3FNUZ", "float8_e4m3fnuz"),
    _foreign("F8_E5M2FNUZ", "float8_e5m2fnuz"),
    _foreign("C64", "complex64"),
)
"""Every safetensors dtype kiln_np reads and writes, with its Kiln code."""

_F6_WHY = (
    "safetensors does not document the bit order of its 6-bit types (how four elements "
    "share three bytes), and kiln_np does not guess"
)
REFUSED: Mapping[str, str] = MappingProxyType(dict.fromkeys(("F6_E2M3", "F6_E3M2"), _F6_WHY))
"""safetensors dtypes that are refused (TYPE), with why."""

BY_NAME: Mapping[str, SafetensorsDType] = MappingProxyType({r.name: r for r in DTYPES})
"""The rows of :data:`DTYPES` by safetensors name."""
_BY_KIND: Mapping[tuple[int, Layout | None], SafetensorsDType] = MappingProxyType(
    {(int(r.code), r.layout): r for r in DTYPES}
)
_F4 = BY_NAME["F4"]


@set_module("kiln_np.safetensors")
def safetensors_dtype(info: PayloadInfo) -> SafetensorsDType:
    """The safetensors dtype that holds payloads of ``info``.

    Raises
    ------
    KilnError
        TYPE for a code safetensors has no dtype for (i4, u4, an opaque code
        other than the foreign types in :data:`DTYPES`), and for an odd count
        of e2m1 (safetensors refuses an F4 tensor that ends mid-byte).

    Examples
    --------
    >>> from kiln_np import PayloadInfo
    >>> safetensors_dtype(PayloadInfo("e2m1", (4, 2))).name
    'F4'
    """
    row = _BY_KIND.get((int(info.code), info.layout))
    if row is None:
        layout = "" if info.layout is None else f" with layout {info.layout!r}"
        raise KilnError(
            "TYPE",
            f"safetensors has no dtype for {code_label(int(info.code))}{layout}: expected one "
            f"of the codes of {', '.join(r.name for r in DTYPES)}",
            code=int(info.code),
        )
    if row is _F4 and info.count % 2:
        raise KilnError(
            "TYPE",
            f"{info.context}expected an even number of F4 elements (safetensors packs two "
            f"per byte and refuses a tensor that ends mid-byte), found {info.count}",
            code=int(info.code),
            shape=info.shape,
        )
    return row
