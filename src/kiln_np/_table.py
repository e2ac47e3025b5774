"""The closed Kiln dtype table, opaque layouts, and exact size arithmetic.

Every fact about a code is derived from its one row in :data:`DTYPES`; the
indexes by code and by numpy dtype are built once from that tuple and are
read-only.  Sizes are computed with Python integers, so they never wrap.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import ml_dtypes
import numpy as np
import numpy.typing as npt

from ._errors import KilnError

__all__ = [
    "DTYPES",
    "MAX_RANK",
    "OPAQUE_MAX",
    "OPAQUE_MIN",
    "Code",
    "DType",
    "Layout",
    "byte_length",
    "code_for_dtype",
    "code_kind",
    "dtype_for_code",
    "dtype_info",
]

OPAQUE_MIN = 4096
OPAQUE_MAX = 32767
MAX_RANK = 64  # numpy's NPY_MAXDIMS: a deeper array cannot exist
_MAX_DIM = 2**63 - 1  # numpy's npy_intp on 64-bit hosts


class Code(enum.IntEnum):
    """The closed set of Kiln dtype codes (1-19)."""

    F64 = 1
    F32 = 2
    F16 = 3
    BF16 = 4
    F8E4M3 = 5
    F8E5M2 = 6
    BOOL = 7
    I8 = 8
    U8 = 9
    I16 = 10
    U16 = 11
    I32 = 12
    U32 = 13
    I64 = 14
    U64 = 15
    I4 = 16
    U4 = 17
    E2M1 = 18
    E8M0 = 19


@dataclass(frozen=True)
class DType:
    """One row of the Kiln dtype table.

    Attributes
    ----------
    code : Code
        The 16-bit wire code.
    name : str
        The spec's short name (``f64``, ``bf16``, ``f8e4m3``, ``e2m1``, ...).
    dtype : numpy.dtype
        The numpy dtype of a decoded element: explicitly little-endian for
        numpy's own types, the ml_dtypes type for bf16 and the small floats
        and ints.  Packed 4-bit codes decode to one element per byte.
    bits : int
        Bits one element occupies on the wire: 4 for the packed codes, 8 for
        bool.
    element : str
        The spec's description of the element.
    """

    code: Code
    name: str
    dtype: np.dtype[Any]
    bits: int
    element: str

    @property
    def packed(self) -> bool:
        """True for the 4-bit codes, which share a byte between two elements."""
        return self.bits < 8

    def byte_length(self, count: int) -> int:
        """Exact wire bytes for ``count`` elements: ``ceil(count * bits / 8)``."""
        return -(-count * self.bits // 8)

    def __repr__(self) -> str:
        return f"DType({int(self.code)}, {self.name!r}, {self.dtype}, bits={self.bits})"


def _row(code: Code, name: str, dtype: npt.DTypeLike, bits: int, element: str) -> DType:
    return DType(code, name, np.dtype(dtype), bits, element)


DTYPES: tuple[DType, ...] = (
    _row(Code.F64, "f64", "<f8", 64, "IEEE binary64"),
    _row(Code.F32, "f32", "<f4", 32, "IEEE binary32"),
    _row(Code.F16, "f16", "<f2", 16, "IEEE binary16"),
    _row(
        Code.BF16,
        "bf16",
        ml_dtypes.bfloat16,
        16,
        "1 sign, 8 exponent, 7 significand bits, bias 127",
    ),
    _row(Code.F8E4M3, "f8e4m3", ml_dtypes.float8_e4m3fn, 8, "OFP8 E4M3"),
    _row(Code.F8E5M2, "f8e5m2", ml_dtypes.float8_e5m2, 8, "OFP8 E5M2"),
    _row(Code.BOOL, "bool", np.bool_, 8, "byte 0 or 1; any other byte is TYPE"),
    _row(Code.I8, "i8", "i1", 8, "two's complement"),
    _row(Code.U8, "u8", "u1", 8, "unsigned"),
    _row(Code.I16, "i16", "<i2", 16, "two's complement, little-endian"),
    _row(Code.U16, "u16", "<u2", 16, "unsigned, little-endian"),
    _row(Code.I32, "i32", "<i4", 32, "two's complement, little-endian"),
    _row(Code.U32, "u32", "<u4", 32, "unsigned, little-endian"),
    _row(Code.I64, "i64", "<i8", 64, "two's complement, little-endian"),
    _row(Code.U64, "u64", "<u8", 64, "unsigned, little-endian"),
    _row(Code.I4, "i4", ml_dtypes.int4, 4, "packed two's-complement nibbles"),
    _row(Code.U4, "u4", ml_dtypes.uint4, 4, "packed unsigned nibbles"),
    _row(Code.E2M1, "e2m1", ml_dtypes.float4_e2m1fn, 4, "OCP MX FP4 E2M1, packed nibbles"),
    _row(Code.E8M0, "e8m0", ml_dtypes.float8_e8m0fnu, 8, "OCP MX E8M0 scale byte"),
)


def _native(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return dtype if dtype.isnative else dtype.newbyteorder("=")


_BY_CODE: Mapping[int, DType] = MappingProxyType({int(r.code): r for r in DTYPES})
_BY_DTYPE: Mapping[np.dtype[Any], DType] = MappingProxyType({_native(r.dtype): r for r in DTYPES})


@dataclass(frozen=True)
class Layout:
    """The layout an opaque code (4096-32767) must travel with.

    Each element of an opaque payload's shape is one block of ``block_size``
    bytes that Kiln does not interpret; ``name`` says whose layout it is.

    Parameters
    ----------
    name : str
        A non-empty name for the foreign layout.
    block_size : int
        Bytes per block, at least 1.

    Raises
    ------
    KilnError
        TYPE, when ``name`` is not a non-empty str or ``block_size`` is not an
        integer >= 1 (``bool`` is not an integer here).

    Examples
    --------
    >>> Layout("q4_k", 144)
    Layout(name='q4_k', block_size=144)
    """

    name: str
    block_size: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise KilnError(
                "TYPE", f"expected a layout name as a non-empty str, found {_describe(self.name)}"
            )
        size = self.block_size
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            raise KilnError(
                "TYPE", f"expected a layout block_size as an integer >= 1, found {_describe(size)}"
            )
        if size < 1:
            raise KilnError("TYPE", f"expected a layout block_size >= 1, found {int(size)}")
        object.__setattr__(self, "block_size", int(size))


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def code_label(code: int) -> str:
    """``'code 2 (f32)'``: how messages name a code."""
    row = _BY_CODE.get(code)
    if row is not None:
        return f"code {code} ({row.name})"
    if OPAQUE_MIN <= code <= OPAQUE_MAX:
        return f"opaque code {code} (0x{code:04x})"
    return f"code {code}"


CodeLike = int | np.integer[Any]
"""A dtype code: a Python or numpy integer (never ``bool``)."""
ShapeLike = Sequence[int | np.integer[Any]] | npt.NDArray[np.integer[Any]]
"""A shape: a sequence of non-negative Python or numpy integers."""

CodeKind = Literal["closed", "opaque", "reserved", "rejected"]


def _as_code(code: object) -> int:
    if isinstance(code, (bool, np.bool_)) or not isinstance(code, (int, np.integer)):
        raise KilnError("TYPE", f"expected an integer dtype code, found {_describe(code)}")
    return int(code)


def code_kind(code: CodeLike) -> CodeKind:
    """Classify a code: ``closed`` (1-19), ``opaque`` (4096-32767), ``reserved``
    (20-4095, rejected) or ``rejected`` (0, above 32767, negative).

    Raises
    ------
    KilnError
        TYPE, when ``code`` is not an integer (``bool`` included).

    Examples
    --------
    >>> [code_kind(c) for c in (0, 2, 20, 4096, 32768)]
    ['rejected', 'closed', 'reserved', 'opaque', 'rejected']
    """
    c = _as_code(code)
    if c in _BY_CODE:
        return "closed"
    if OPAQUE_MIN <= c <= OPAQUE_MAX:
        return "opaque"
    if 20 <= c < OPAQUE_MIN:
        return "reserved"
    return "rejected"


_REJECTED_WHY: Mapping[str, str] = MappingProxyType(
    {
        "reserved": "codes 20-4095 are reserved and rejected",
        "zero": "code 0 is rejected so that an uninitialized descriptor fails",
        "high": "codes above 32767 are rejected",
        "negative": "a dtype code is a 16-bit unsigned integer",
    }
)


def _resolve(code: object, layout: object) -> DType | Layout:
    """Check ``code`` then ``layout``; return the table row or the opaque layout."""
    if type(code) is int and layout is None and code in _BY_CODE:
        return _BY_CODE[code]  # the common case, without the general checks
    c = _as_code(code)
    kind = code_kind(c)
    if kind == "closed":
        if layout is not None:
            raise KilnError(
                "TYPE",
                f"{code_label(c)} is a closed code and takes no layout, got {layout!r}; "
                f"a foreign layout needs an opaque code in {OPAQUE_MIN}-{OPAQUE_MAX}",
                code=c,
            )
        return _BY_CODE[c]
    if kind == "opaque":
        if not isinstance(layout, Layout):
            raise KilnError(
                "TYPE",
                f"{code_label(c)} needs a kiln_np.Layout(name, block_size), "
                f"got {_describe(layout)}",
                code=c,
            )
        return layout
    if kind == "reserved":
        why = _REJECTED_WHY["reserved"]
    elif c == 0:
        why = _REJECTED_WHY["zero"]
    elif c > 0:
        why = _REJECTED_WHY["high"]
    else:
        why = _REJECTED_WHY["negative"]
    shown = f"0x{c:04x}" if c >= 0 else str(c)
    raise KilnError(
        "TYPE",
        f"expected a dtype code in 1-19 or {OPAQUE_MIN}-{OPAQUE_MAX}, found {c} ({shown}): {why}",
        code=c,
    )


def _check_shape(shape: object, context: str = "") -> tuple[int, ...]:
    """Return ``shape`` as a tuple of Python ints, or raise SHAPE.

    ``context`` (the code being decoded) prefixes every message.
    """
    if type(shape) is tuple and len(shape) <= MAX_RANK:
        for d in shape:
            if type(d) is not int or d < 0 or d > _MAX_DIM:
                break
        else:
            return shape  # already a tuple of in-range Python ints
    if isinstance(shape, np.ndarray):
        if shape.ndim != 1 or shape.dtype.kind not in "iu":
            raise KilnError(
                "SHAPE",
                f"{context}expected a shape array of 1-D integers, "
                f"found {shape.ndim}-D {shape.dtype}",
            )
        rank = shape.size
    elif isinstance(shape, Sequence) and not isinstance(shape, (str, bytes, bytearray)):
        try:
            rank = len(shape)  # a Sequence subclass is user code: what it raises is SHAPE
        except Exception as exc:
            raise KilnError(
                "SHAPE", f"{context}expected a sequence of integers; len(shape) raised {exc!r}"
            ) from exc
    else:
        raise KilnError(
            "SHAPE", f"{context}expected a shape sequence of integers, found {_describe(shape)}"
        )
    if rank > MAX_RANK:
        raise KilnError(
            "SHAPE", f"{context}expected a shape of at most {MAX_RANK} dimensions, found {rank}"
        )
    try:
        items = tuple(shape.tolist() if isinstance(shape, np.ndarray) else shape)
    except Exception as exc:
        raise KilnError(
            "SHAPE", f"{context}expected a sequence of integers; reading it raised {exc!r}"
        ) from exc
    dims: list[int] = []
    for axis, dim in enumerate(items):
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
            raise KilnError(
                "SHAPE", f"{context}expected shape[{axis}] to be an integer, found {_describe(dim)}"
            )
        d = operator.index(dim)
        if d < 0 or d > _MAX_DIM:
            raise KilnError("SHAPE", f"{context}shape[{axis}] must be in 0..2**63-1, found {d}")
        dims.append(d)
    return tuple(dims)


def _check_representable(dims: tuple[int, ...], itemsize: int, context: str = "") -> None:
    """numpy refuses an array whose nonzero dimensions times the item size pass
    2**63-1, even when a zero dimension makes it empty: that is SHAPE too."""
    total = itemsize
    for d in dims:
        total *= d or 1
    if total > _MAX_DIM:
        raise KilnError(
            "SHAPE",
            f"{context}shape {dims}: numpy cannot represent it (nonzero dimensions x "
            f"{itemsize}-byte items = {total} > 2**63-1)",
            shape=dims,
        )


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _payload_bytes(kind: DType | Layout, count: int) -> int:
    if isinstance(kind, Layout):
        return count * kind.block_size
    return kind.byte_length(count)


def byte_length(code: CodeLike, shape: ShapeLike, layout: Layout | None = None) -> int:
    """Exact payload size in bytes for ``code`` and ``shape``.

    Whole-byte codes: element count times width; packed 4-bit codes:
    ``ceil(count / 2)``; opaque codes: count times ``layout.block_size``.
    Computed with Python integers, so it never wraps and calls no user code.

    Raises
    ------
    KilnError
        TYPE for a bad code or layout, SHAPE for a malformed shape.

    Examples
    --------
    >>> byte_length(17, (3,))
    2
    >>> byte_length(1, (2**62, 4))
    147573952589676412928
    """
    kind = _resolve(code, layout)
    return _payload_bytes(kind, _count(_check_shape(shape, f"{code_label(int(code))}: ")))


def dtype_info(code: CodeLike) -> DType:
    """The table row of a closed code.

    Raises
    ------
    KilnError
        TYPE for a code outside 1-19 (opaque codes have no element dtype).

    Examples
    --------
    >>> dtype_info(18)
    DType(18, 'e2m1', float4_e2m1fn, bits=4)
    """
    c = _as_code(code)
    if code_kind(c) == "opaque":
        raise KilnError(
            "TYPE",
            f"expected a closed code 1-19, found {code_label(c)}: opaque codes have no "
            "element dtype (their blocks decode as uint8 of shape shape + (block_size,))",
            code=c,
        )
    row = _resolve(c, None)
    assert isinstance(row, DType)
    return row


def dtype_for_code(code: CodeLike) -> np.dtype[Any]:
    """The numpy dtype a closed code decodes to.

    Examples
    --------
    >>> dtype_for_code(2)
    dtype('float32')
    """
    return dtype_info(code).dtype


def code_for_dtype(dtype: npt.DTypeLike) -> Code:
    """The Kiln code of a numpy or ml_dtypes dtype (byte order aside).

    Raises
    ------
    KilnError
        TYPE for a dtype Kiln has no code for (complex, object, str, datetime,
        structured, ``float8_e4m3fnuz``, ``int2``, ...).

    Examples
    --------
    >>> code_for_dtype(">f4")
    <Code.F32: 2>
    """
    return _row_for_dtype(dtype).code


def _row_for_dtype(dtype: npt.DTypeLike) -> DType:
    try:
        d = np.dtype(dtype)
    except (TypeError, ValueError) as exc:  # ("f4", -1) is a ValueError
        raise KilnError("TYPE", f"expected a numpy dtype, found {_describe(dtype)}") from exc
    row = _BY_DTYPE.get(_native(d)) if d.fields is None else None
    if row is None:
        raise KilnError(
            "TYPE",
            f"dtype {d} ({d.str}) has no Kiln code; expected one of "
            + ", ".join(str(r.dtype) for r in DTYPES),
            found=str(d),
        )
    return row
