"""Kiln payload <-> numpy array conversion.

The wire format (Kiln dtype page, version 2)
============================================

A payload is the bytes of ``count = prod(shape)`` elements of one dtype code,
in C order, with no header.  ``shape == ()`` is a scalar: one element.

Codes
-----
- A code is a 16-bit unsigned integer.  1-19 are the closed set below.
- 0 MUST be rejected (an uninitialized descriptor fails); 20-4095 are reserved
  and MUST be rejected; above 32767 MUST be rejected.  All are TYPE errors.
- 4096-32767 are opaque: they MUST travel with a layout (a name and a block
  size); each element of ``shape`` is one uninterpreted block of
  ``block_size`` bytes.  A layout given with a closed code is TYPE: a foreign
  layout may not pretend to be code 2.

==== ====== ============================================== =================
code name   element                                        bytes
==== ====== ============================================== =================
1    f64    IEEE binary64                                  8 * count
2    f32    IEEE binary32                                  4 * count
3    f16    IEEE binary16                                  2 * count
4    bf16   1 sign, 8 exponent, 7 significand bits         2 * count
5    f8e4m3 OFP8 E4M3                                      count
6    f8e5m2 OFP8 E5M2                                      count
7    bool   byte 0 or 1; any other byte is TYPE            count
8    i8     two's complement                               count
9    u8     unsigned                                       count
10   i16    two's complement                               2 * count
11   u16    unsigned                                       2 * count
12   i32    two's complement                               4 * count
13   u32    unsigned                                       4 * count
14   i64    two's complement                               8 * count
15   u64    unsigned                                       8 * count
16   i4     packed two's-complement nibbles                ceil(count / 2)
17   u4     packed unsigned nibbles                        ceil(count / 2)
18   e2m1   OCP MX FP4 E2M1, packed nibbles                ceil(count / 2)
19   e8m0   OCP MX E8M0 scale byte                         count
==== ====== ============================================== =================

Bytes
-----
- Multi-byte elements are little-endian.  bf16 1.0 is ``80 3f``; f16 1.0 is
  ``00 3c``.
- A payload MUST be exactly ``byte_length(code, shape)`` bytes: one byte short
  or one byte long is LENGTH.
- bool: every byte MUST be 0x00 or 0x01; any other byte is TYPE (case
  ``kiln-v2-bool-byte``).
- Packed 4-bit codes: element ``2k`` is the low nibble of byte ``k`` and
  element ``2k+1`` the high nibble; when ``count`` is odd the last high nibble
  MUST be 0, else TYPE (case ``kiln-v2-high-nibble``).  1, 2, 3 as u4 is
  ``21 03`` (case ``kiln-v2-u4``).
- Float bits are stored, not values: a reader MAY return them without
  widening.  f8e4m3 bytes ``38 3c`` are case ``kiln-v2-f8-pair``.

What this module does with them
-------------------------------
:func:`to_numpy` checks code, layout, shape (representability included),
buffer type, length, content, in that order (the order of
:class:`~kiln_np.PayloadInfo`, which every entry point shares), and returns
a zero-copy little-endian view for whole-byte codes;
4-bit codes unpack to one element per byte (ml_dtypes ``int4``/``uint4``/
``float4_e2m1fn``, high nibble 0).  :func:`from_numpy` is the inverse and
never casts: a NaN's payload, a signalling NaN, -0.0 and subnormals are
written bit for bit.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ._core.checks import NEVER_CASTS, U8, byte_view, set_module, show_value, storage_error
from ._core.errors import KilnError
from ._core.payload import PayloadInfo, payload_info
from ._core.table import (
    DTYPES,
    NEEDS_OPAQUE,
    Code,
    CodeLike,
    DType,
    DTypeIndex,
    Layout,
    ShapeLike,
    as_code,
    code_label,
    resolve,
    row_for_dtype,
)
from ._core.torch_types import is_tensor, tensor_array
from ._kernels import nibbles, pool

__all__ = [
    "BIG_ENDIAN_HOST",
    "Payload",
    "as_array",
    "check_bool_bytes",
    "check_content",
    "decode",
    "encode",
    "from_numpy",
    "host_order",
    "native_only",
    "readonly_view",
    "to_numpy",
    "wire_bytes",
]

# ml_dtypes types (numpy "user-defined" types, ``isbuiltin == 2``) exist only in
# native byte order, so on a big-endian host a multi-byte one (bf16) cannot be a
# view of little-endian bytes: it is swapped.  numpy's own types carry ``'<'``.
BIG_ENDIAN_HOST = sys.byteorder == "big"


def native_only(dtype: np.dtype[Any]) -> bool:
    """True for a multi-byte ml_dtypes type, which has no explicit byte order."""
    return dtype.itemsize > 1 and dtype.isbuiltin == 2


@set_module("kiln_np")
class Payload(NamedTuple):
    """A Kiln payload: ``to_numpy(*payload)`` rebuilds the array byte for byte.

    Attributes
    ----------
    code : int
        The dtype code (a :class:`Code` for closed codes).
    data : memoryview
        The payload bytes, read-only, 1-D, format ``"B"``.  It may share
        memory with the array it came from: copy with ``bytes(data)`` if that
        array will change.
    shape : tuple of int
        Element shape; for opaque codes, the shape of the blocks.
    layout : Layout or None
        The opaque layout, for codes 4096-32767.
    """

    code: int
    data: memoryview
    shape: tuple[int, ...]
    layout: Layout | None = None

    def __reduce__(self) -> tuple[object, ...]:
        # memoryview does not pickle: send the bytes, rebuild a read-only view.
        return (_payload_from_bytes, (self.code, bytes(self.data), self.shape, self.layout))

    @property
    def byte_length(self) -> int:
        """Payload size in bytes."""
        return self.data.nbytes

    @property
    def info(self) -> PayloadInfo:
        """The checked description of this payload (code, shape, layout, sizes)."""
        return payload_info(self.code, self.shape, self.layout)

    def __repr__(self) -> str:
        layout = "" if self.layout is None else f", layout={self.layout!r}"
        return (
            f"Payload({code_label(int(self.code))}, shape={self.shape}, "
            f"{_shown_bytes(self.data)}{layout})"
        )


def _shown_bytes(data: object) -> str:
    """``'12 bytes [00 01 ...]'`` for any buffer (bytes, bytearray, memoryview, an
    array of any dtype, an mmap), ``data=...`` for what is none: a repr never raises."""
    flat: np.ndarray | memoryview | None
    try:
        if isinstance(data, np.ndarray):
            n, flat = data.nbytes, data.reshape(-1).view(U8) if data.flags.c_contiguous else None
        else:
            view = memoryview(data)  # type: ignore[arg-type]  # TypeError: caught below
            n, flat = view.nbytes, view.cast("B") if view.c_contiguous else None
    except (TypeError, ValueError):  # no buffer, a released one, object elements
        return f"data={show_value(data)}"
    if flat is None:
        return f"{n} bytes [not C-contiguous]"
    return f"{n} bytes [{bytes(flat[:8]).hex(' ')}{' ...' if n > 8 else ''}]"


# numpy functions on the small-call paths, bound once: reading them off the numpy
# module on every call measured 20-40 ns slower than a global of this module.
_frombuffer = np.frombuffer
_empty = np.empty
_ONE_CALL = nibbles.ONE_CALL  # elements; pool.empty is np.empty below it

# Payload(...) runs namedtuple's __new__, a Python function: the fast paths make
# the same tuple without it, _new_payload((code, data, shape, layout)).
_new_payload = partial(tuple.__new__, Payload)

# Whole-byte codes other than bool, by their exact (explicitly little-endian or
# one-byte) dtype: the rows from_numpy's fast path can write as a plain view.
# (DTypeIndexes: ml_dtypes' types join once ml_dtypes is loaded; until then an array
# of theirs takes the general path, whose row_for_dtype joins them.)
_PLAIN_CODES = DTypeIndex(
    (row.dtype_spec, row.code) for row in DTYPES if payload_info(int(row.code), ()).plain_view
)
# Those of numpy's own types, whose arrays export a buffer that casts to bytes
# (ml_dtypes' types export none): a plain dict, complete without ml_dtypes.
_BUFFER_CODES = {dtype: code for dtype, code in _PLAIN_CODES.items() if dtype.isbuiltin == 1}
# The 4-bit codes by their ml_dtypes dtype: from_numpy's fast path packs these.
_PACKED_CODES = DTypeIndex((row.dtype_spec, int(row.code)) for row in DTYPES if row.packed)


def check_bool_bytes(src: np.ndarray, info: PayloadInfo) -> None:
    """Every byte of the flat uint8 ``src`` must be 0 or 1 (case kiln-v2-bool-byte)."""
    # One read (split across the kernel threads when large); the first bad
    # byte is found chunk by chunk, so rejecting costs at most a chunk's mask.
    index = nibbles.first_above(src, 1)
    if index >= 0:
        found = int(src[index])
        raise KilnError(
            "TYPE",
            f"{info.context}expected byte 0x00 or 0x01, found 0x{found:02x} "
            f"at element {index} (case kiln-v2-bool-byte)",
            code=info.code,
            shape=info.shape,
            expected=1,
            found=found,
            index=index,
        )


def check_content(info: PayloadInfo, src: np.ndarray) -> None:
    """What Kiln requires of a payload's bytes beyond their count, checked
    without decoding: bool bytes 0 or 1, and the padding nibble of an odd 4-bit
    count 0 (TYPE).  ``src`` is already exactly ``info.byte_length`` bytes."""
    if info.packed:
        if info.count % 2:  # only an odd count has a padding nibble to check
            nibbles.check_padding(src, info.count, info.context)
    elif info.code == Code.BOOL:
        check_bool_bytes(src, info)


def host_order(src: np.ndarray, row: DType) -> np.ndarray:
    """View little-endian bytes as ``row.dtype``; swapped copy where it must be."""
    if BIG_ENDIAN_HOST and native_only(row.dtype):
        return src.view(f"u{row.dtype.itemsize}").byteswap().view(row.dtype)
    return src.view(row.dtype)


@set_module("kiln_np")
def to_numpy(
    code: CodeLike,
    buf: Any,
    shape: ShapeLike,
    layout: Layout | None = None,
    *,
    copy: bool = False,
) -> np.ndarray:
    """Decode a Kiln payload into a numpy array, bits untouched.

    Parameters
    ----------
    code : int or str
        The dtype code: 1-19, or 4096-32767 with ``layout``; or a closed
        code's name (``"bf16"``, ``"BF16"``).
    buf : bytes-like
        Exactly ``byte_length(code, shape, layout)`` bytes, C-contiguous:
        ``bytes``, ``bytearray``, ``memoryview``, ``mmap``, a uint8 array (an
        ndarray subclass is read as its base ndarray).
    shape : sequence of int
        Element shape; ``()`` is a scalar.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.
    copy : bool
        Return a fresh writable array instead of a view of ``buf``.

    Returns
    -------
    numpy.ndarray
        Always a plain ndarray.  Whole-byte codes: a zero-copy view of
        ``buf`` (read-only when ``buf`` is) with an explicitly little-endian
        dtype such as ``'<f4'``, or the ml_dtypes type.  4-bit codes: a new
        ml_dtypes ``int4``/``uint4``/``float4_e2m1fn`` array, one element per
        byte.  Opaque codes: uint8 blocks of shape ``shape + (block_size,)``.

    Raises
    ------
    KilnError
        TYPE (code, layout, bool byte, padding nibble), SHAPE, LENGTH; checked
        in the order code, layout, shape, buffer type, length, content.
    TypeError
        When ``buf`` does not support the buffer protocol.

    Examples
    --------
    >>> to_numpy(17, b"\\x21\\x03", (3,)).astype(int)
    array([1, 2, 3])
    >>> to_numpy("bf16", b"\\x80\\x3f", ()).item()
    1.0
    """
    info = payload_info(code, shape, layout)
    if type(buf) is bytes:
        # The common case in fewer steps: the same checks in the same order
        # (bytes are always a flat byte buffer; its length; the content), the
        # array made straight from the bytes, with no uint8 view in between.
        if len(buf) != info.byte_length:
            raise info.length_error(len(buf))
        if info.plain_view and not BIG_ENDIAN_HOST:
            arr = _frombuffer(buf, info.dtype)
            if len(info.shape) != 1:  # a 1-D shape is already frombuffer's (count,)
                arr = arr.reshape(info.shape)
            return arr.copy() if copy else arr
        if info.packed:
            return _unpack_bytes(buf, info)
    try:
        src = byte_view(buf, "buf")
    except KilnError as exc:
        raise exc.prefixed(info.context, code=int(info.code), shape=info.shape) from exc.__cause__
    info.check_length(src.size)
    return decode(info, src, copy=copy)


def _unpack_bytes(buf: bytes, info: PayloadInfo) -> np.ndarray:
    """:func:`decode` of a 4-bit payload given as ``bytes`` of the right length:
    the padding check, then the unpack straight into the decoded array."""
    count = info.count
    if count % 2 and buf[-1] > 0x0F:  # only an odd count has a padding nibble
        nibbles.check_padding(buf, count, info.context)  # raises
    # Both kernels write any 1-byte array, so the ml_dtypes array itself; below
    # the threading threshold, one kernel call is all of it.
    if count < _ONE_CALL:
        out = _empty(info.shape, info.dtype)
        nibbles.UNPACK.pick()(buf, out, 0, count)
    else:
        out = pool.empty(info.shape, info.dtype, count)
        nibbles.unpack_into(buf, out, count)
    return out


def decode(info: PayloadInfo, src: np.ndarray, *, copy: bool = False) -> np.ndarray:
    """Decode the flat uint8 ``src``, already exactly ``info.byte_length`` bytes:
    the content checks and the view (or unpacked array) of :func:`to_numpy`."""
    element = info.element
    if isinstance(element, Layout):
        blocks = src.reshape(info.decoded_shape)
        return blocks.copy() if copy else blocks
    check_content(info, src)
    if info.packed:
        out = pool.empty(info.shape, U8, info.count)  # the decoded shape: no reshape after
        nibbles.unpack_into(src, out, info.count)
        return out.view(element.dtype)
    arr = host_order(src, element).reshape(info.shape)
    return arr.copy() if copy else arr


def _pack_array(array: np.ndarray, dst: np.ndarray, count: int) -> int:
    """:func:`nibbles.pack_into` of the C-contiguous 4-bit ``array``: the first
    storage byte above 0x0f, or -1.  The compiled kernel reads the array's
    bytes as they are, with no uint8 view; below the threading threshold, one
    kernel call is all of it."""
    if count < _ONE_CALL:
        bad: int = nibbles.PACK.pick()(array, dst, 0, count)
        return bad
    return nibbles.pack_into(array.reshape(-1).view(U8), dst)


def as_array(array: object) -> np.ndarray:
    """``np.asarray(array)`` as a plain ndarray, or TYPE: a masked array (its
    masked-out values would be written), a ragged list, an ``__array__`` that
    raises.  A torch tensor is read bit for bit (``_core.torch_types``)."""
    if is_tensor(array):
        return tensor_array(array)
    if isinstance(array, np.ma.MaskedArray):
        raise KilnError(
            "TYPE",
            "expected a plain ndarray, found a masked array: its masked-out values would be "
            "written; use array.filled(value) or array.data explicitly",
        )
    try:
        return np.asarray(array)
    except Exception as exc:  # user code (__array__, __len__) may raise anything
        raise KilnError(
            "TYPE", f"expected an array; numpy cannot make an array of {show_value(array)}: {exc}"
        ) from exc


def _check_blocks(arr: np.ndarray, code: int, layout: Layout) -> PayloadInfo:
    if arr.dtype != U8 or arr.ndim < 1 or arr.shape[-1] != layout.block_size:
        raise KilnError(
            "SHAPE",
            f"{code_label(code)} with layout {layout.name!r}: expected uint8 blocks of shape "
            f"(..., {layout.block_size}), found {arr.dtype} of shape {arr.shape}",
            code=code,
            shape=tuple(arr.shape),
        )
    return payload_info(code, tuple(int(d) for d in arr.shape[:-1]), layout)


def wire_bytes(arr: np.ndarray, wire: np.dtype[Any]) -> np.ndarray:
    """C-order little-endian bytes of ``arr`` as a flat uint8 array (a view when
    ``arr`` already is that)."""
    if BIG_ENDIAN_HOST and native_only(wire):
        arr = arr.view(f"u{wire.itemsize}").byteswap()
    elif arr.dtype != wire:
        arr = arr.astype(wire)  # byte order only: the same type, swapped, bit for bit
    return np.ascontiguousarray(arr).reshape(-1).view(U8)


def _payload_from_bytes(
    code: int, data: bytes, shape: tuple[int, ...], layout: Layout | None
) -> Payload:
    return Payload(code, memoryview(data), shape, layout)


def readonly_view(arr: np.ndarray) -> memoryview:
    """A read-only flat ``"B"`` memoryview of the C-contiguous array ``arr``."""
    if arr.dtype.isbuiltin == 1 and arr.size:
        # numpy's own types export a buffer that casts to bytes: no array views.
        return arr.data.cast("B").toreadonly()
    return arr.reshape(-1).view(U8).data.toreadonly()


def _out_view(out: object, info: PayloadInfo) -> np.ndarray:
    """``out`` as a flat writable uint8 array of exactly ``info.byte_length`` bytes."""
    try:
        dst = byte_view(out, "out", writable=True)
    except KilnError as exc:
        raise exc.prefixed(info.context, code=int(info.code), shape=info.shape) from exc.__cause__
    info.check_length(dst.size, "out: ")
    return dst


def _encode_into(arr: np.ndarray, row: DType, info: PayloadInfo, dst: np.ndarray) -> None:
    """Write the wire bytes of a whole-byte ``arr`` into ``dst``, checked first."""
    if row.code == Code.BOOL:
        flags = arr.view(U8)
        # A strided array is reduced in place; copied only to locate a bad byte.
        if flags.flags.c_contiguous or int(flags.max(initial=0)) > 1:
            check_bool_bytes(np.ascontiguousarray(flags).reshape(-1), info)
    # np.copyto does not handle every overlap of a strided source with its
    # destination: read the source out first when they share memory.
    src = arr.copy() if np.may_share_memory(arr, dst) else arr
    if BIG_ENDIAN_HOST and native_only(row.dtype):
        k = row.dtype.itemsize
        np.copyto(dst.view(f"<u{k}").reshape(arr.shape), src.view(f"u{k}"))
    else:
        # One strided, byte-swapping (if need be) copy: no intermediate array.
        np.copyto(dst.view(row.dtype).reshape(arr.shape), src)


@set_module("kiln_np")
def from_numpy(
    array: npt.ArrayLike,
    *,
    code: CodeLike | None = None,
    layout: Layout | None = None,
    out: object = None,
) -> Payload:
    """Encode an array as a Kiln payload, bits untouched.

    Parameters
    ----------
    array : array_like
        Any ndarray (any order, strides, byte order; 0-d and empty included)
        or what ``np.asarray`` makes one of.  Masked arrays are refused.
    code : int or str, optional
        Inferred from the dtype when omitted.  When given, the dtype must be
        the code's (byte order aside): kiln_np never casts.
    layout : Layout, optional
        For opaque codes: ``array`` is uint8 of shape ``shape + (block_size,)``.
    out : writable bytes-like, optional
        Encode straight into this C-contiguous buffer (a ``bytearray``, a
        writable ``mmap`` or a ``memoryview`` slice of one, a uint8 array) of
        exactly ``byte_length`` bytes, with no intermediate copy (unless it
        overlaps ``array``).  Everything is checked before the first byte is
        written, so ``out`` is untouched when an error is raised.

    Returns
    -------
    Payload
        ``(code, data, shape, layout)``; ``data`` is C-order little-endian.
        With ``out``, ``data`` is a read-only view of ``out``.

    Raises
    ------
    KilnError
        TYPE for a dtype with no Kiln code or not the given code's, a bool
        byte other than 0/1, a 4-bit storage byte above 0x0f, a masked array,
        something numpy cannot make an array of; SHAPE for opaque blocks of
        the wrong shape.  With ``out``: LENGTH when it is not exactly
        ``byte_length`` bytes, TYPE when it is read-only or not C-contiguous.

    Examples
    --------
    >>> import ml_dtypes
    >>> p = from_numpy(np.array([1, 2, 3], dtype=ml_dtypes.uint4))
    >>> p.code, bytes(p.data).hex(" "), p.shape
    (<Code.U4: 17>, '21 03', (3,))
    >>> buf = bytearray(4)
    >>> _ = from_numpy(np.array([1.0], dtype="<f4"), out=buf)
    >>> buf.hex(" ")
    '00 00 80 3f'
    """
    if code is None and out is None and layout is None and type(array) is np.ndarray:
        # The common case in fewer calls: a plain array of a whole-byte,
        # non-bool code in C order; the same lookups, without the general path.
        numpy_code = _BUFFER_CODES.get(array.dtype)
        if numpy_code is not None:
            # The array's own buffer cast to bytes, as readonly_view does for
            # numpy's types; the cast needs C order (numpy's own rule, ignoring
            # axes of length 1) and a nonzero size, else the path below.
            data = array.data
            if data.c_contiguous and data.nbytes:
                return _new_payload((numpy_code, data.cast("B").toreadonly(), array.shape, None))
        plain = _PLAIN_CODES.get(array.dtype)
        if plain is not None and array.flags.c_contiguous and not BIG_ENDIAN_HOST:
            return Payload(plain, readonly_view(array), array.shape)
        packed = _PACKED_CODES.get(array.dtype)
        if packed is not None and array.flags.c_contiguous:
            # A C-order 4-bit array: the same description, the same check (fused
            # into the pack) and error as encode's, without the general path.
            info = payload_info(packed, array.shape)
            dst = _empty(info.byte_length, U8)
            bad = _pack_array(array, dst, info.count)
            if bad >= 0:
                src = array.reshape(-1).view(U8)
                raise storage_error(src, bad, 4, info.context, code=info.code, shape=info.shape)
            return _new_payload((info.code, dst.data.toreadonly(), info.shape, None))
    if code is None and layout is not None:
        raise KilnError("TYPE", f"a layout ({layout!r}) was given with code=None: {NEEDS_OPAQUE}")
    wanted = None if code is None else resolve(code, layout)
    arr = as_array(array)
    if isinstance(wanted, Layout):
        info = _check_blocks(arr, as_code(code), wanted)
    else:
        row = row_for_dtype(arr.dtype)
        info = payload_info(int(row.code), arr.shape)
        if wanted is not None and wanted is not row:
            raise KilnError(
                "TYPE",
                f"{code_label(int(wanted.code))}: expected {wanted.dtype} elements, found "
                f"{arr.dtype}; {NEVER_CASTS}",
                code=int(wanted.code),
                expected=str(wanted.dtype),
                found=str(arr.dtype),
            )
    return encode(arr, info, out)


def encode(arr: np.ndarray, info: PayloadInfo, out: object = None) -> Payload:
    """The payload of ``arr``, whose dtype and shape ``info`` already describes
    (checked by :func:`from_numpy`): content checks, then the bytes."""
    element = info.element
    if out is not None:
        dst = _out_view(out, info)
    if isinstance(element, Layout):
        if out is None:
            return Payload(
                info.code, readonly_view(np.ascontiguousarray(arr).reshape(-1)), info.shape, element
            )
        np.copyto(dst.reshape(arr.shape), arr.copy() if np.may_share_memory(arr, dst) else arr)
        return Payload(info.code, readonly_view(dst), info.shape, element)
    if element.packed:
        src = np.ascontiguousarray(arr).reshape(-1).view(U8)
        if out is None:
            dst = np.empty(info.byte_length, U8)
            bad = nibbles.pack_into(src, dst)  # checks each chunk as it packs it
        else:
            bad = nibbles.first_above(src, 15)  # all of it before the first write
            if bad < 0:
                nibbles.pack_into(nibbles.detach(src, dst), dst, checked=True)
        if bad >= 0:
            raise storage_error(src, bad, 4, info.context, code=info.code, shape=info.shape)
        return Payload(info.code, dst.data.toreadonly(), info.shape)  # dst: flat uint8
    if out is not None:
        _encode_into(arr, element, info, dst)
        return Payload(info.code, readonly_view(dst), info.shape)
    data = wire_bytes(arr, element.dtype)
    if element.code == Code.BOOL:
        check_bool_bytes(data, info)
    return Payload(info.code, readonly_view(data), info.shape)
