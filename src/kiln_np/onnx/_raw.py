"""``raw_data`` bytes <-> numpy arrays, and the bridge to Kiln payloads.

Every function here starts from the Kiln description of the tensor
(:meth:`RawType.kiln`, which is :func:`kiln_np._core.payload.payload_info`): the
dims are checked there, once, and a ``raw_data`` that is a Kiln payload (every
type but the 2- and 6-bit ones, which ONNX packs) is measured against its
``byte_length`` with Kiln's own LENGTH error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload, as_array, check_content, decode, encode, readonly_view
from kiln_np._core.checks import U8, byte_view, set_module, short_or_long, show_int, storage_error
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Layout
from kiln_np._kernels import nibbles, pool
from kiln_np._kernels import subbyte as _subbyte

from ._types import DataType, RawType, raw_type, row_for_dtype, type_for_kiln

__all__ = [
    "decode_bytes",
    "decode_raw",
    "encode_array",
    "encode_raw",
    "from_kiln",
    "raw_for_array",
    "to_kiln",
    "to_payload",
]

_UNPACK: Mapping[int, Callable[[np.ndarray, np.ndarray, int], None]] = MappingProxyType(
    {2: _subbyte.unpack2_into, 6: _subbyte.unpack6_into}
)
_PACK: Mapping[int, Callable[[np.ndarray, np.ndarray], None]] = MappingProxyType(
    {2: _subbyte.pack2_into, 6: _subbyte.pack6_into}
)


def _raw_bytes(raw: RawType, info: PayloadInfo, raw_data: object) -> np.ndarray:
    """``raw_data`` as a flat uint8 view of exactly the bytes ``info`` needs."""
    try:
        src = byte_view(raw_data, "raw_data")
    except KilnError as exc:
        raise exc.prefixed(f"{raw.label} shape {info.shape}: ") from exc.__cause__
    if not raw.sub_byte:
        info.check_length(src.size, f"{raw.label} raw_data as Kiln ")
        return src
    expected = raw.byte_length(info.count)
    if src.size != expected:
        raise KilnError(
            "LENGTH",
            f"{raw.label} shape {info.shape}: expected ceil({show_int(info.count)} x {raw.bits} "
            f"/ 8) = {show_int(expected)} bytes of raw_data, found {src.size} "
            f"({short_or_long(expected, src.size)})",
            shape=info.shape,
            expected=expected,
            found=src.size,
        )
    return src


def _unpack_sub_byte(raw: RawType, src: np.ndarray, info: PayloadInfo) -> np.ndarray:
    """2- or 6-bit ``raw_data`` (length checked) to one uint8 per element; the
    bits after the last element must be 0."""
    count, shape = info.count, info.shape
    used = count * raw.bits % 8
    if used and src[-1] >> used:
        last = int(src[-1])
        raise KilnError(
            "TYPE",
            f"{raw.label} shape {shape}: {count} x {raw.bits} bits: expected the {8 - used} "
            f"padding bits of the last byte to be 0, found byte 0x{last:02x} at byte offset "
            f"{src.size - 1}",
            shape=shape,
            expected=0,
            found=last,
            index=count,
        )
    out = pool.empty(count, U8, count)
    _UNPACK[raw.bits](src, out, count)
    return out


def _pack_sub_byte(raw: RawType, values: np.ndarray, context: str) -> np.ndarray:
    """One uint8 per 2- or 6-bit element to packed bytes; bits above the element are TYPE."""
    limit = (1 << raw.bits) - 1
    index = nibbles.first_above(values, limit)  # bounded extra memory, even when bad
    if index >= 0:
        raise storage_error(values, index, raw.bits, context)
    out = np.empty(raw.byte_length(values.size), U8)
    _PACK[raw.bits](values, out)
    return out


@set_module("kiln_np.onnx")
def decode_raw(data_type: int, raw_data: object, dims: Sequence[int]) -> np.ndarray:
    """Decode an ONNX tensor's ``raw_data`` into a numpy array, bits untouched.

    Parameters
    ----------
    data_type : int
        The ``TensorProto.DataType``, 1-28 except STRING (8).
    raw_data : bytes-like
        Exactly ``ceil(prod(dims) * bits / 8)`` bytes, C-contiguous (an
        ndarray subclass is read as its base ndarray).
    dims : sequence of int
        The tensor's ``dims``; ``()`` is a scalar.

    Returns
    -------
    numpy.ndarray
        Always a plain ndarray.  Whole-byte types: a zero-copy view of
        ``raw_data`` with the dtype of :func:`data_type_info` (read-only when
        ``raw_data`` is).  4-, 2- and 6-bit types: a new array, one element
        per byte (ml_dtypes ``int4``, ``uint2``, ``float6_e2m3fn``, ...).

    Raises
    ------
    KilnError
        TYPE for a bad or STRING ``data_type``, a BOOL byte other than 0/1 or
        nonzero padding bits; SHAPE for bad ``dims`` (as Kiln checks the
        tensor's Kiln form: at most 63 dimensions for the ONNX-only types);
        LENGTH for any other byte count.

    Examples
    --------
    >>> decode_raw(26, b"\\x1b", (3,)).astype(int)  # INT2: 3, 2, 1
    array([-1, -2,  1])
    >>> decode_raw(27, b"\\x08\\x02", (2,)).astype(float)  # FLOAT6E2M3
    array([1., 1.])
    """
    raw = raw_type(data_type)
    return decode_bytes(raw, raw.kiln(dims), raw_data)


def decode_bytes(raw: RawType, info: PayloadInfo, raw_data: object) -> np.ndarray:
    """:func:`decode_raw` once the type and its Kiln description are known."""
    src = _raw_bytes(raw, info, raw_data)
    if raw.layout is None:
        try:
            return decode(info, src)
        except KilnError as exc:
            raise exc.prefixed(f"{raw.label} as Kiln ") from None
    if raw.sub_byte:
        src = _unpack_sub_byte(raw, src, info)
    return src.view(raw.row.dtype).reshape(info.shape)


def raw_for_array(arr: np.ndarray, data_type: int | None) -> RawType:
    """The type of ``arr``'s dtype, which must be ``data_type``'s when given
    (kiln_np never casts); TYPE for a STRING array."""
    row = row_for_dtype(arr.dtype)
    if data_type is not None:
        wanted = raw_type(data_type).row
        if wanted is not row:
            raise KilnError(
                "TYPE",
                f"{wanted.label}: expected {wanted.dtype} elements, found {arr.dtype}; "
                "kiln_np never casts: convert the array first",
                expected=str(wanted.dtype),
                found=str(arr.dtype),
            )
    return raw_type(row.data_type)


@set_module("kiln_np.onnx")
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
        array, a BOOL byte other than 0/1, sub-byte storage bytes with bits
        set above the element (kiln_np never masks them), a masked array, or
        something numpy cannot make an array of (an ``__array__`` that raises).

    Examples
    --------
    >>> import ml_dtypes
    >>> bytes(encode_raw(np.array([-1, -2, 1], dtype=ml_dtypes.int2))).hex()
    '1b'
    """
    arr = as_array(array)
    return encode_array(arr, raw_for_array(arr, data_type))


def encode_array(arr: np.ndarray, raw: RawType) -> memoryview:
    """:func:`encode_raw` of an ndarray of ``raw``'s dtype (already checked)."""
    if raw.layout is None:
        try:
            return encode(arr, payload_info(raw.code, arr.shape)).data
        except KilnError as exc:
            raise exc.prefixed(f"{raw.label} as Kiln ") from None
    if raw.sub_byte:
        storage = np.ascontiguousarray(arr).reshape(-1).view(U8)
        return readonly_view(_pack_sub_byte(raw, storage, f"{raw.label} shape {arr.shape}: "))
    # Complex and the FNUZ float8s: their little-endian storage, as it is.
    return readonly_view(np.ascontiguousarray(arr, dtype=raw.row.dtype).reshape(-1).view(U8))


@set_module("kiln_np.onnx")
def to_kiln(data_type: int, raw_data: object, dims: Sequence[int]) -> Payload:
    """Wrap an ONNX tensor's ``raw_data`` as a Kiln payload, losslessly.

    Parameters
    ----------
    data_type : int
        The ``TensorProto.DataType``, 1-28 except STRING, which has no Kiln
        form.
    raw_data : bytes-like
        Exactly ``ceil(prod(dims) * bits / 8)`` bytes (an ndarray subclass is
        read as its base ndarray).
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
    raw = raw_type(data_type)
    return to_payload(raw, raw.kiln(dims), raw_data)


def to_payload(raw: RawType, info: PayloadInfo, raw_data: object) -> Payload:
    """:func:`to_kiln` once the type and its Kiln description are known."""
    src = _raw_bytes(raw, info, raw_data)
    if raw.sub_byte:
        src = _unpack_sub_byte(raw, src, info)
    else:
        try:
            check_content(info, src)
        except KilnError as exc:
            raise exc.prefixed(f"{raw.label} as Kiln ") from None
    return Payload(info.code, readonly_view(src), info.shape, info.layout)


@set_module("kiln_np.onnx")
def from_kiln(
    code: int | str, data: object, shape: Sequence[int], layout: Layout | None = None
) -> tuple[DataType, memoryview, tuple[int, ...]]:
    """The ONNX ``(data_type, raw_data, dims)`` of a Kiln payload: the inverse
    of :func:`to_kiln`.

    Parameters
    ----------
    code : int or str
        A closed Kiln code (1-19, or its name such as ``"bf16"``), or one of
        the opaque codes of :data:`DATA_TYPES` with its layout.
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
        Whatever :func:`kiln_np.to_numpy` raises for the payload, in its
        order; TYPE for an opaque code or layout that is not one of this
        module's, or a 2- or 6-bit block with bits set above the element.

    Examples
    --------
    >>> t, raw, dims = from_kiln(17, b"\\x21\\x03", (3,))
    >>> t.name, bytes(raw).hex(" "), dims
    ('UINT4', '21 03', (3,))
    """
    info = payload_info(code, shape, layout)  # code, layout, shape: checked here, once
    raw = type_for_kiln(int(info.code), info.layout)
    try:
        src = byte_view(data, "data")
    except KilnError as exc:
        raise exc.prefixed(info.context) from exc.__cause__
    info.check_length(src.size)
    if raw.sub_byte:
        src = _pack_sub_byte(raw, src, info.context)
    else:
        check_content(info, src)
    return raw.row.data_type, readonly_view(src), info.shape
