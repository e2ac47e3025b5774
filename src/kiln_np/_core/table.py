"""The closed Kiln dtype table, opaque layouts, and exact size arithmetic.

Every fact about a code is derived from its one row in :data:`DTYPES`; the
indexes by code and by numpy dtype are built once from that tuple and are
read-only.  Sizes are computed with Python integers, so they never wrap.
"""

from __future__ import annotations

import enum
import functools
import operator
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any, Generic, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from .checks import MAX_INT64, U8, set_module, show_int, show_value
from .errors import KilnError

__all__ = [
    "DTYPES",
    "MAX_RANK",
    "NEEDS_OPAQUE",
    "OPAQUE_MAX",
    "OPAQUE_MIN",
    "Code",
    "CodeLike",
    "CodeRange",
    "DType",
    "DTypeIndex",
    "Element",
    "Layout",
    "ShapeLike",
    "as_code",
    "as_dtype",
    "check_shape",
    "code_for_dtype",
    "code_label",
    "code_range",
    "dtype_for_code",
    "dtype_info",
    "join_ml_dtypes",
    "load_ml_dtypes",
    "native_dtype",
    "resolve",
    "row_for_dtype",
    "spec_dtype",
]

OPAQUE_MIN = 4096
OPAQUE_MAX = 32767

_ML_PREFIX = "ml_dtypes."


def load_ml_dtypes() -> ModuleType:
    """The ml_dtypes module, imported the first time a dtype needs it.

    This is the one in-function import of a required dependency: ml_dtypes
    takes most of a second to import, and facts about codes, sizes and headers
    need none of its types, so ``import kiln_np`` and listing a weight file
    never pay for it.
    """
    import ml_dtypes

    return ml_dtypes


@functools.cache
def spec_dtype(spec: str) -> np.dtype[Any]:
    """The numpy dtype a table spells as ``spec``: numpy's own (``'<f4'``) or an
    ml_dtypes type (``'ml_dtypes.bfloat16'``, loaded on first use).

    >>> spec_dtype("<f4").name, spec_dtype("ml_dtypes.uint4").name
    ('float32', 'uint4')
    """
    if spec.startswith(_ML_PREFIX):
        scalar_type: type[Any] = getattr(load_ml_dtypes(), spec[len(_ML_PREFIX) :])
        return np.dtype(scalar_type)
    return np.dtype(spec)


_V = TypeVar("_V")


class DTypeIndex(dict[np.dtype[Any], _V], Generic[_V]):
    """A read-mostly index from native-order dtypes to table entries.

    Built from ``(spec, value)`` pairs.  numpy's own dtypes are keys at once;
    the ml_dtypes ones join every index together, once ml_dtypes is loaded
    (:func:`join_ml_dtypes`), so building an index imports nothing.  Hot paths
    look up with ``.get`` (a plain dict's speed); a path that would refuse a
    dtype asks :meth:`lookup`, which joins the ml_dtypes keys first if an array
    of one of their types may exist by now.

    >>> index = DTypeIndex([("<f4", "f32"), ("ml_dtypes.bfloat16", "bf16")])
    >>> index.lookup(spec_dtype("ml_dtypes.bfloat16")), index.get(np.dtype("<f4"))
    ('bf16', 'f32')
    """

    def __init__(self, pairs: Iterable[tuple[str, _V]]) -> None:
        pending = []
        for spec, value in pairs:
            if spec.startswith(_ML_PREFIX):
                pending.append((spec, value))
            else:
                self[native_dtype(spec_dtype(spec))] = value
        self._pending = tuple(pending)
        if pending:
            _UNJOINED.append(self)

    def lookup(self, key: np.dtype[Any]) -> _V | None:
        """``self.get(key)``, after :func:`join_ml_dtypes` when that misses."""
        value = self.get(key)
        if value is None and join_ml_dtypes():
            value = self.get(key)
        return value

    def join(self) -> None:
        """Add the ml_dtypes keys (ml_dtypes is loaded)."""
        pending, self._pending = self._pending, ()
        for spec, value in pending:
            self[native_dtype(spec_dtype(spec))] = value


_UNJOINED: list[DTypeIndex[Any]] = []


def join_ml_dtypes() -> bool:
    """Give every :class:`DTypeIndex` its ml_dtypes keys, once ml_dtypes is loaded
    (by kiln_np or by the user: an array of its types can only exist then).
    True when keys were added."""
    if not _UNJOINED or "ml_dtypes" not in sys.modules:
        return False
    while _UNJOINED:
        _UNJOINED.pop().join()
    return True


def _numpy_max_rank() -> int:
    """numpy's NPY_MAXDIMS, which numpy 2 raised from 32 to 64 without a public name."""
    try:
        np.empty((1,) * 64, np.uint8)
    except ValueError:
        return 32
    return 64


MAX_RANK = _numpy_max_rank()
"""The most dimensions an array can have in the running numpy (64; 32 before numpy 2)."""


@set_module("kiln_np")
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


@set_module("kiln_np")
@dataclass(frozen=True)
class DType:
    """One row of the Kiln dtype table.

    Attributes
    ----------
    code : Code
        The 16-bit wire code.
    name : str
        The spec's short name (``f64``, ``bf16``, ``f8e4m3``, ``e2m1``, ...).
    dtype_spec : str
        How the table spells :attr:`dtype`: ``'<f4'``, ``'ml_dtypes.bfloat16'``.
    bits : int
        Bits one element occupies on the wire: 4 for the packed codes, 8 for
        bool.
    element : str
        The spec's description of the element.
    """

    code: Code
    name: str
    dtype_spec: str
    bits: int
    element: str

    @functools.cached_property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of a decoded element: explicitly little-endian for
        numpy's own types, the ml_dtypes type for bf16 and the small floats
        and ints (ml_dtypes is imported here, on first use).  Packed 4-bit
        codes decode to one element per byte."""
        return spec_dtype(self.dtype_spec)

    @property
    def dtype_loaded(self) -> bool:
        """Whether reading :attr:`dtype` is free: a numpy type, or ml_dtypes is
        already imported."""
        return not self.dtype_spec.startswith(_ML_PREFIX) or "ml_dtypes" in sys.modules

    @property
    def itemsize(self) -> int:
        """Bytes of one decoded element (1 for the 4-bit codes), known without
        loading ml_dtypes."""
        return max(1, self.bits // 8)

    @property
    def packed(self) -> bool:
        """True for the 4-bit codes, which share a byte between two elements."""
        return self.bits < 8

    def byte_length(self, count: int) -> int:
        """Exact wire bytes for ``count`` elements: ``ceil(count * bits / 8)``."""
        return -(-count * self.bits // 8)

    def length_rule(self, count: int) -> str:
        """How :meth:`byte_length` gets there, for messages: ``'6 x 4'``, ``'ceil(5 / 2)'``."""
        if self.packed:
            return f"ceil({show_int(count)} / 2)"
        return f"{show_int(count)} x {self.bits // 8}"

    def decoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of the decoded array: the element shape itself."""
        return shape

    def __repr__(self) -> str:
        return f"DType({int(self.code)}, {self.name!r}, {self.dtype}, bits={self.bits})"


DTYPES: tuple[DType, ...] = (
    DType(Code.F64, "f64", "<f8", 64, "IEEE binary64"),
    DType(Code.F32, "f32", "<f4", 32, "IEEE binary32"),
    DType(Code.F16, "f16", "<f2", 16, "IEEE binary16"),
    DType(
        Code.BF16,
        "bf16",
        "ml_dtypes.bfloat16",
        16,
        "1 sign, 8 exponent, 7 significand bits, bias 127",
    ),
    DType(Code.F8E4M3, "f8e4m3", "ml_dtypes.float8_e4m3fn", 8, "OFP8 E4M3"),
    DType(Code.F8E5M2, "f8e5m2", "ml_dtypes.float8_e5m2", 8, "OFP8 E5M2"),
    DType(Code.BOOL, "bool", "?", 8, "byte 0 or 1; any other byte is TYPE"),
    DType(Code.I8, "i8", "i1", 8, "two's complement"),
    DType(Code.U8, "u8", "u1", 8, "unsigned"),
    DType(Code.I16, "i16", "<i2", 16, "two's complement, little-endian"),
    DType(Code.U16, "u16", "<u2", 16, "unsigned, little-endian"),
    DType(Code.I32, "i32", "<i4", 32, "two's complement, little-endian"),
    DType(Code.U32, "u32", "<u4", 32, "unsigned, little-endian"),
    DType(Code.I64, "i64", "<i8", 64, "two's complement, little-endian"),
    DType(Code.U64, "u64", "<u8", 64, "unsigned, little-endian"),
    DType(Code.I4, "i4", "ml_dtypes.int4", 4, "packed two's-complement nibbles"),
    DType(Code.U4, "u4", "ml_dtypes.uint4", 4, "packed unsigned nibbles"),
    DType(Code.E2M1, "e2m1", "ml_dtypes.float4_e2m1fn", 4, "OCP MX FP4 E2M1, packed nibbles"),
    DType(Code.E8M0, "e8m0", "ml_dtypes.float8_e8m0fnu", 8, "OCP MX E8M0 scale byte"),
)


def native_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """``dtype`` in native byte order (the table's index key)."""
    return dtype if dtype.isnative else dtype.newbyteorder("=")


_BY_CODE: Mapping[int, DType] = MappingProxyType({int(r.code): r for r in DTYPES})
_BY_DTYPE: DTypeIndex[DType] = DTypeIndex((r.dtype_spec, r) for r in DTYPES)
_ML_SPECS = frozenset(r.dtype_spec for r in DTYPES if r.dtype_spec.startswith(_ML_PREFIX))
# A code may be named as the spec spells it ("bf16") or as the Code member ("BF16").
_BY_NAME: Mapping[str, DType] = MappingProxyType(
    {r.name: r for r in DTYPES} | {r.code.name: r for r in DTYPES}
)


@set_module("kiln_np")
@dataclass(frozen=True)
class Layout:
    """The layout an opaque code (4096-32767) must travel with.

    Each element of an opaque payload's shape is one block of ``block_size``
    bytes that Kiln does not interpret; ``name`` says whose layout it is.  A
    layout answers the same questions as a :class:`DType` row
    (:meth:`byte_length`, :attr:`dtype`, :meth:`decoded_shape`), so code that
    handles either never needs to ask which it has.

    Parameters
    ----------
    name : str
        A non-empty name for the foreign layout.
    block_size : int
        Bytes per block, 1 to 2**63-1.

    Raises
    ------
    KilnError
        TYPE, when ``name`` is not a non-empty str or ``block_size`` is not an
        integer in 1..2**63-1 (``bool`` is not an integer here).

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
                "TYPE", f"expected a layout name as a non-empty str, found {show_value(self.name)}"
            )
        size = self.block_size
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            raise KilnError(
                "TYPE",
                f"expected a layout block_size as an integer >= 1, found {show_value(size)}",
            )
        if not 1 <= size <= MAX_INT64:
            raise KilnError(
                "TYPE",
                f"expected a layout block_size in 1..2**63-1, found {show_int(int(size))}",
            )
        object.__setattr__(self, "block_size", int(size))

    @property
    def dtype(self) -> np.dtype[Any]:
        """dtype of the decoded blocks: uint8, uninterpreted."""
        return U8

    @property
    def itemsize(self) -> int:
        """Bytes of one decoded element: 1 (a block decodes to uint8 bytes)."""
        return 1

    @property
    def bits(self) -> int:
        """Bits one block occupies on the wire."""
        return 8 * self.block_size

    @property
    def packed(self) -> bool:
        """Always False: a block is whole bytes."""
        return False

    def byte_length(self, count: int) -> int:
        """Exact wire bytes for ``count`` blocks."""
        return count * self.block_size

    def length_rule(self, count: int) -> str:
        """How :meth:`byte_length` gets there, for messages."""
        return f"{show_int(count)} blocks x {self.block_size} bytes ({self.name})"

    def decoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of the decoded array: one uint8 axis of ``block_size`` added."""
        return (*shape, self.block_size)


Element = DType | Layout
"""What one element of a payload is: a table row, or an opaque layout's block."""


def code_label(code: int) -> str:
    """``'code 2 (f32)'``: how messages name a code."""
    row = _BY_CODE.get(code)
    if row is not None:
        return f"code {code} ({row.name})"
    if OPAQUE_MIN <= code <= OPAQUE_MAX:
        return f"opaque code {code} (0x{code:04x})"
    return f"code {show_int(code)}"


CodeLike = int | np.integer[Any] | str
"""A dtype code: a Python or numpy integer (never ``bool``), or a closed code's
name as the spec spells it (``"bf16"``) or as its :class:`Code` member (``"BF16"``)."""
ShapeLike = Sequence[int | np.integer[Any]] | npt.NDArray[np.integer[Any]]
"""A shape: a sequence of non-negative Python or numpy integers."""

CodeRange = Literal["closed", "opaque", "reserved", "rejected"]


def as_code(code: object) -> int:
    """``code`` as a Python int: an integer, or a closed code's name exactly as
    spelled (``"bf16"``, ``"BF16"``); TYPE for anything else (``True``, floats,
    other strings).  A dtype given where a code is expected (``"float32"``,
    ``np.float32``, ``np.dtype("float32")``) is TYPE naming its code.

    >>> as_code("bf16"), as_code(np.uint8(9))
    (4, 9)
    >>> as_code(np.float32)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: TYPE: ... found type <class 'numpy.float32'>, a dtype: float32 is code 2 ...
    """
    if type(code) is int:
        return code
    if isinstance(code, str):
        row = _BY_NAME.get(code)
        if row is None:
            hint = _dtype_hint(code)
            if hint:
                raise KilnError(
                    "TYPE",
                    f"expected an integer dtype code or a code name, found {show_value(code)}, "
                    f"a dtype's name: {hint}",
                )
            raise KilnError(
                "TYPE",
                "expected an integer dtype code or one of the names "
                f"{', '.join(r.name for r in DTYPES)} "
                f"(or {', '.join(r.code.name for r in DTYPES)}), found {show_value(code)}",
            )
        return int(row.code)
    if isinstance(code, (bool, np.bool_)) or not isinstance(code, (int, np.integer)):
        hint = _dtype_hint(code)
        raise KilnError(
            "TYPE",
            f"expected an integer dtype code or a code name, found {show_value(code)}"
            + (f", a dtype: {hint}" if hint else ""),
        )
    return int(code)


def _dtype_hint(value: object) -> str:
    """``"float32 is code 2 (kiln_np.Code.F32, ...)"`` when ``value`` (given where
    a code is expected) is a dtype of the table: a numpy or ml_dtypes dtype, its
    scalar type, or a short name numpy reads as one; else ``""``.  ml_dtypes is
    loaded only for the name of one of its types."""
    if isinstance(value, str):
        if len(value) > 32 or not value.isascii():
            return ""
        if _ML_PREFIX + value in _ML_SPECS:
            value = spec_dtype(_ML_PREFIX + value)
    elif not isinstance(value, (type, np.dtype)):
        return ""
    try:
        found = np.dtype(value)
    except Exception:  # numpy's reading of a type runs its code: no hint then
        return ""
    row = _BY_DTYPE.lookup(native_dtype(found)) if found.fields is None else None
    if row is None:
        return ""
    return (
        f"{row.dtype.name} is code {int(row.code)} (kiln_np.Code.{row.code.name}, or the name "
        f"'{row.name}'; kiln_np.code_for_dtype gives a dtype's code)"
    )


def code_range(code: CodeLike) -> CodeRange:
    """Classify a code: ``closed`` (1-19), ``opaque`` (4096-32767), ``reserved``
    (20-4095, rejected) or ``rejected`` (0, above 32767, negative).

    Raises
    ------
    KilnError
        TYPE, when ``code`` is neither an integer (``bool`` is not) nor a
        closed code's name.

    Examples
    --------
    >>> [code_range(c) for c in (0, 2, 20, 4096, 32768)]
    ['rejected', 'closed', 'reserved', 'opaque', 'rejected']
    """
    c = as_code(code)
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


def resolve(code: object, layout: object) -> Element:
    """Check ``code`` then ``layout``; return the table row or the opaque layout."""
    if type(code) is int and layout is None and code in _BY_CODE:
        return _BY_CODE[code]  # the common case, without the general checks
    c = as_code(code)
    where = code_range(c)
    if where == "closed":
        if layout is not None:
            raise KilnError(
                "TYPE",
                f"{code_label(c)} is a closed code and takes no layout, found "
                f"{show_value(layout)}; {NEEDS_OPAQUE}",
                code=c,
            )
        return _BY_CODE[c]
    if where == "opaque":
        if not isinstance(layout, Layout):
            raise KilnError(
                "TYPE",
                f"{code_label(c)} needs a kiln_np.Layout(name, block_size), "
                f"found {show_value(layout)}",
                code=c,
            )
        return layout
    if where == "reserved":
        why = _REJECTED_WHY["reserved"]
    elif c == 0:
        why = _REJECTED_WHY["zero"]
    elif c > 0:
        why = _REJECTED_WHY["high"]
    else:
        why = _REJECTED_WHY["negative"]
    shown = f" (0x{c:04x})" if c >= 0 and c.bit_length() <= 128 else ""
    raise KilnError(
        "TYPE",
        f"expected a dtype code in 1-19 or {OPAQUE_MIN}-{OPAQUE_MAX}, found {show_int(c)}"
        f"{shown}: {why}",
        code=c,
    )


NEEDS_OPAQUE = f"a foreign layout needs an opaque code in {OPAQUE_MIN}-{OPAQUE_MAX}"
"""The one wording for "a layout goes with an opaque code", used wherever it is refused."""


def check_shape(shape: object, context: str = "") -> tuple[int, ...]:
    """Return ``shape`` as a tuple of Python ints, or raise SHAPE.

    ``context`` (the code being decoded) prefixes every message.  The rank is
    checked on what iterating ``shape`` gives, not on its ``len()``, which user
    code may get wrong.
    """
    if type(shape) is tuple and len(shape) <= MAX_RANK:
        for d in shape:
            if type(d) is not int or d < 0 or d > MAX_INT64:
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
    elif not isinstance(shape, Sequence) or isinstance(shape, (str, bytes, bytearray)):
        raise KilnError(
            "SHAPE", f"{context}expected a shape sequence of integers, found {show_value(shape)}"
        )
    try:
        # A Sequence subclass is user code: what it raises is SHAPE.  Read at most
        # one item past the rank limit, so a huge or endless sequence stops early.
        if isinstance(shape, np.ndarray):
            items = tuple(shape[: MAX_RANK + 1].tolist())
        else:
            items = tuple(v for _, v in zip(range(MAX_RANK + 1), shape, strict=False))
    except Exception as exc:
        raise KilnError(
            "SHAPE", f"{context}expected a sequence of integers; reading it raised {exc!r}"
        ) from exc
    if len(items) > MAX_RANK:
        raise KilnError(
            "SHAPE",
            f"{context}expected a shape of at most {MAX_RANK} dimensions, found more",
        )
    dims: list[int] = []
    for axis, dim in enumerate(items):
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
            raise KilnError(
                "SHAPE",
                f"{context}expected shape[{axis}] to be an integer, found {show_value(dim)}",
            )
        d = operator.index(dim)
        if d < 0 or d > MAX_INT64:
            raise KilnError(
                "SHAPE", f"{context}expected shape[{axis}] in 0..2**63-1, found {show_int(d)}"
            )
        dims.append(d)
    return tuple(dims)


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
    >>> dtype_info("bf16").code
    <Code.BF16: 4>
    """
    c = as_code(code)
    if code_range(c) == "opaque":
        raise KilnError(
            "TYPE",
            f"expected a closed code 1-19, found {code_label(c)}: opaque codes have no "
            "element dtype (their blocks decode as uint8 of shape shape + (block_size,))",
            code=c,
        )
    row = resolve(c, None)
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
    return row_for_dtype(dtype).code


def as_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    """``np.dtype(dtype)``, where a name may be an ml_dtypes type's (``"bfloat16"``),
    which numpy knows only once ml_dtypes is loaded."""
    try:
        return np.dtype(dtype)
    except TypeError:
        if not isinstance(dtype, str) or "ml_dtypes" in sys.modules:
            raise
    load_ml_dtypes()
    return np.dtype(dtype)


def row_for_dtype(dtype: npt.DTypeLike) -> DType:
    """The table row of a numpy or ml_dtypes dtype (byte order aside), or TYPE."""
    try:
        d = as_dtype(dtype)
    except (TypeError, ValueError) as exc:  # ("f4", -1) is a ValueError
        raise KilnError("TYPE", f"expected a numpy dtype, found {show_value(dtype)}") from exc
    row = _BY_DTYPE.lookup(native_dtype(d)) if d.fields is None else None
    if row is None:
        raise KilnError(
            "TYPE",
            f"dtype {d} ({d.str}) has no Kiln code; expected one of "
            + ", ".join(str(r.dtype) for r in DTYPES),
            found=str(d),
        )
    return row


for _public in (code_range, code_for_dtype, dtype_for_code, dtype_info):
    _public.__module__ = "kiln_np"
