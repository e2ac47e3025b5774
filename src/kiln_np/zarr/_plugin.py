"""kiln_np's data types and ``packbits`` codec, as zarr-python classes.

zarr-python finds these through the entry points of kiln_np's
``pyproject.toml``, so a process that never imports kiln_np reads the arrays:

- ``[project.entry-points."zarr.codecs"]`` ``packbits = kiln_np.zarr._plugin:PackBits``;
- ``[project.entry-points."zarr.data_type"]`` one class per data type of the
  table that zarr-python lacks (``bfloat16 = ...:BFloat16``, ...), which
  zarr-python loads from 3.4.1 on; before, it collects them and never loads
  them, and the startup hook ``_kiln_np_zarr_hook`` (installed with
  ``kiln_np-zarr.pth``) imports this module at zarr-python's first data-type
  lookup;
- ``[project.entry-points."zarr.buffer"]`` ``kiln_np = ...:CPU_BUFFER``, which is
  zarr-python's own CPU buffer class, for an editable install (which has no
  ``.pth`` of the project's): zarr-python loads every ``zarr.buffer`` entry
  point before a group reads its members' metadata, so loading this module
  then registers the data types (below) on ``zarr.open_group``'s door.
  Registering zarr's own class changes no buffer choice.

Importing this module imports zarr (and ml_dtypes); ``import kiln_np`` never does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeGuard

import numpy as np
from zarr.abc.codec import ArrayBytesCodec
from zarr.core.buffer import cpu
from zarr.core.dtype import data_type_registry
from zarr.core.dtype.common import HasEndianness, HasItemSize

try:  # its home from zarr-python 3.3 on, where the old one warns (deprecated)
    from zarr.errors import DataTypeValidationError  # type: ignore[attr-defined,unused-ignore]
except ImportError:  # zarr-python 3.1 and 3.2
    from zarr.core.dtype.common import DataTypeValidationError
from zarr.core.dtype.wrapper import ZDType
from zarr.registry import register_codec

from kiln_np._core.errors import KilnError

from ._packbits import (
    PackBitsConfig,
    decode_packbits,
    encode_packbits,
    packbits_config,
    packbits_size,
    packbits_type,
)
from ._types import ZARR_TYPES, ZarrType
from ._values import fill_from_json, fill_to_json, scalar_of

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.chunk_grids import ChunkGrid
    from zarr.core.common import JSON, ZarrFormat
    from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar

__all__ = ["CPU_BUFFER", "DATA_TYPES", "KilnDataType", "PackBits"]

CPU_BUFFER = cpu.Buffer
"""zarr-python's own CPU buffer: the ``zarr.buffer`` entry point that loads this module."""


@dataclass(frozen=True, kw_only=True)
class KilnDataType(ZDType[np.dtype[Any], Any], HasItemSize):
    """A zarr-extensions data type held by a numpy or ml_dtypes dtype.

    One subclass per row of ``kiln_np.zarr._types.ZARR_TYPES`` that zarr-python
    lacks; its fill values keep their bits (a NaN's payload included).

    >>> t = DATA_TYPES["bfloat16"]()
    >>> t.to_json(zarr_format=3), t.to_json_scalar(t.from_json_scalar("0x7fc1", zarr_format=3),
    ...                                            zarr_format=3)
    ('bfloat16', '0x7fc1')
    """

    row: ClassVar[ZarrType]

    @classmethod
    def _check_native_dtype(cls, dtype: TBaseDType) -> TypeGuard[np.dtype[Any]]:
        return bool(dtype == cls.row.dtype)

    @classmethod
    def from_native_dtype(cls, dtype: TBaseDType) -> Self:
        if cls._check_native_dtype(dtype):
            return cls()
        raise DataTypeValidationError(f"Invalid data type: {dtype}. Expected {cls.row.dtype}")

    def to_native_dtype(self) -> np.dtype[Any]:
        return self.row.dtype

    @classmethod
    def _from_json_v2(cls, data: object) -> Self:
        raise DataTypeValidationError(f"{cls.row.name} is a Zarr v3 data type, found {data!r}")

    @classmethod
    def _from_json_v3(cls, data: object) -> Self:
        name = cls.row.name
        if data == name:
            return cls()
        # {"name": ..., "configuration": {}}: the schema allows an empty configuration only
        if (
            isinstance(data, dict)
            and data.get("name") == name
            and set(data) <= {"name", "configuration"}
            and data.get("configuration") in ({}, None)
        ):
            return cls()
        raise DataTypeValidationError(f"Invalid JSON for {name}: {data!r}")

    def to_json(self, zarr_format: ZarrFormat) -> Any:
        if zarr_format == 3:
            return self.row.name
        raise ValueError(f"{self.row.name} is a Zarr v3 data type; zarr_format 2 has no name")

    def _check_scalar(self, data: object) -> bool:
        try:
            scalar_of(self.row, data)
        except (KilnError, TypeError, ValueError, OverflowError):
            return False
        return True

    def cast_scalar(self, data: object) -> Any:
        return scalar_of(self.row, data)

    def default_scalar(self) -> Any:
        return self.row.dtype.type(0)

    def from_json_scalar(self, data: JSON, *, zarr_format: ZarrFormat) -> Any:
        return fill_from_json(self.row, data)

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> JSON:
        out: JSON = fill_to_json(self.row, scalar_of(self.row, data))
        return out

    @property
    def item_size(self) -> int:
        return int(self.row.dtype.itemsize)


@dataclass(frozen=True, kw_only=True)
class _LittleEndian(KilnDataType, HasEndianness):
    """A multi-byte type (bfloat16): the ``bytes`` codec needs ``endian``; ml_dtypes
    holds only the host's order, so only little-endian chunks are decoded."""

    def to_native_dtype(self) -> np.dtype[Any]:
        if self.endianness != "little":
            raise KilnError(
                "TYPE",
                f"{self.row.name}: expected little-endian data (ml_dtypes holds no other "
                f"order), found {self.endianness}-endian",
            )
        return self.row.dtype


def _data_type(row: ZarrType) -> type[KilnDataType]:
    base = _LittleEndian if row.bits > 8 else KilnDataType
    name = "".join(part.capitalize() for part in row.name.split("_"))
    cls = type(name, (base,), {"row": row, "_zarr_v3_name": row.name, "__module__": __name__})
    return dataclass(frozen=True, kw_only=True)(cls)


DATA_TYPES: dict[str, type[KilnDataType]] = {
    row.name: _data_type(row) for row in ZARR_TYPES if row.plugin
}
"""Every data type kiln_np registers, by ``data_type`` name."""

BFloat16 = DATA_TYPES["bfloat16"]
Float8E4M3FN = DATA_TYPES["float8_e4m3fn"]
Float8E5M2 = DATA_TYPES["float8_e5m2"]
Float8E8M0FNU = DATA_TYPES["float8_e8m0fnu"]
Int4 = DATA_TYPES["int4"]
UInt4 = DATA_TYPES["uint4"]
Float4E2M1FN = DATA_TYPES["float4_e2m1fn"]
Float8E4M3FNUZ = DATA_TYPES["float8_e4m3fnuz"]
Float8E5M2FNUZ = DATA_TYPES["float8_e5m2fnuz"]
Int2 = DATA_TYPES["int2"]
UInt2 = DATA_TYPES["uint2"]
Float6E2M3FN = DATA_TYPES["float6_e2m3fn"]
Float6E3M2FN = DATA_TYPES["float6_e3m2fn"]
Float8E4M3 = DATA_TYPES["float8_e4m3"]
Float8E3M4 = DATA_TYPES["float8_e3m4"]
Float8E4M3B11FNUZ = DATA_TYPES["float8_e4m3b11fnuz"]


@dataclass(frozen=True)
class PackBits(ArrayBytesCodec):
    """The ``packbits`` array -> bytes codec (``kiln_np.zarr._packbits`` is the wire form).

    Parameters
    ----------
    padding_encoding : {"none", "start_byte", "end_byte"}
        (or the README's ``"first_byte"``/``"last_byte"``).
    first_bit, last_bit : int, optional
        The bit range kept of each component (``start_bit``/``end_bit`` read too).

    Examples
    --------
    >>> import zarr, ml_dtypes
    >>> a = zarr.create_array({}, shape=(3,), dtype=ml_dtypes.uint4, serializer=PackBits())
    >>> a[:] = np.array([1, 2, 3], ml_dtypes.uint4)
    >>> a[:].astype(np.uint8).tolist(), PackBits.from_dict(
    ...     {"name": "packbits", "configuration": {"first_bit": 0}}).to_dict()["configuration"]
    ([1, 2, 3], {'padding_encoding': 'none', 'start_bit': 0})
    """

    is_fixed_size = True
    config: PackBitsConfig

    def __init__(
        self,
        *,
        padding_encoding: str = "none",
        first_bit: int | None = None,
        last_bit: int | None = None,
    ) -> None:
        config = packbits_config(
            {"padding_encoding": padding_encoding, "first_bit": first_bit, "last_bit": last_bit}
        )
        object.__setattr__(self, "config", config)

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        if data.get("name") != "packbits" or not set(data) <= {"name", "configuration"}:
            raise KilnError("TYPE", f"packbits: expected a packbits codec object, found {data!r}")
        config = packbits_config(data.get("configuration"))
        return cls(
            padding_encoding=config.padding, first_bit=config.first_bit, last_bit=config.last_bit
        )

    def to_dict(self) -> dict[str, JSON]:
        return {"name": "packbits", "configuration": self.config.to_json()}

    def validate(
        self,
        *,
        shape: tuple[int, ...],
        dtype: ZDType[TBaseDType, TBaseScalar],
        chunk_grid: ChunkGrid,
    ) -> None:
        packbits_type(dtype.to_native_dtype(), self.config)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        dtype = chunk_spec.dtype.to_native_dtype()
        count = math.prod(chunk_spec.shape)
        data = chunk_bytes.as_numpy_array().view(np.uint8).reshape(-1)
        values = decode_packbits(data, dtype, count, self.config).reshape(chunk_spec.shape)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(values)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        packed = encode_packbits(chunk_array.as_numpy_array(), self.config)
        return chunk_spec.prototype.buffer.from_array_like(packed)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        plan = packbits_type(chunk_spec.dtype.to_native_dtype(), self.config)
        return packbits_size(math.prod(chunk_spec.shape), plan, self.config)


def _register() -> None:
    for name, cls in DATA_TYPES.items():
        data_type_registry.register(name, cls)
    register_codec("packbits", PackBits)


_register()
