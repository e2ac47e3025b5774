"""One checked description of a payload, built once and trusted everywhere.

numpy's ``read_array_header`` is the model: untrusted facts go in (a code, a
shape, a layout, later a buffer or file size), a checked description comes
out, and the rest of the library trusts it.  Every entry point and every
format adapter builds a :class:`PayloadInfo` through :func:`payload_info`;
none computes a byte length or checks a shape by itself.

Check order, the same at every door
-----------------------------------
1. the code (TYPE), then the layout it needs or refuses (TYPE);
2. the shape: a sequence of at most 64 integers in 0..2**63-1 (SHAPE);
3. representability: the decoded array (an opaque code adds one axis of
   ``block_size`` bytes, so its shape may have at most 63 dimensions) must be
   an array numpy can make, nonzero dimensions times the item size at most
   2**63-1, even when a zero dimension makes it empty (SHAPE);
4. then, with a buffer or a file: the byte count, exactly
   :attr:`PayloadInfo.byte_length` (LENGTH), via :meth:`PayloadInfo.check_length`;
5. then the content (bool bytes, padding nibbles: TYPE).

Representability is a property of the shape, so SHAPE comes before LENGTH.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .checks import MAX_INT64, check_offset, set_module, short_or_long, show_int
from .errors import KilnError
from .table import (
    MAX_RANK,
    Code,
    CodeLike,
    DType,
    Element,
    Layout,
    ShapeLike,
    as_code,
    check_shape,
    code_label,
    resolve,
)

__all__ = ["PayloadInfo", "byte_length", "check_representable", "payload_info"]


@set_module("kiln_np")
class PayloadInfo:
    """A checked description of one payload: what it is and how many bytes.

    Built from untrusted facts, and checked on construction in the order the
    module docstring gives; once built, everything derived from it (element
    count, exact byte length, decoded dtype and shape, the context that starts
    every message) is a plain attribute.  :func:`kiln_np.save_payload`
    returns one, with the payload's ``offset`` in the file.

    Parameters
    ----------
    code : int or str
        The dtype code (1-19, or 4096-32767 with ``layout``), or a closed
        code's name (``"bf16"`` or ``"BF16"``).
    shape : sequence of int
        Element shape; for opaque codes, the shape of the blocks.
    layout : Layout, optional
        Required for opaque codes, refused for closed ones.
    offset : int
        Byte position of the payload in a file (0 when it is not in one).
    decodable : bool
        Check step 3 too (the default): the payload must decode to an array
        numpy can make.  Only pure size arithmetic (:func:`byte_length`) turns
        it off.

    Attributes
    ----------
    code : int
        A :class:`~kiln_np.Code` for closed codes, an int for opaque ones.
    shape : tuple of int
    layout : Layout or None
    offset : int
    element : DType or Layout
        The table row, or the opaque layout (both answer ``byte_length``,
        ``dtype``, ``decoded_shape``).
    count : int
        Elements (blocks, for opaque codes).
    byte_length : int
        Exact payload bytes.
    dtype : numpy.dtype
        dtype of the decoded array (uint8 blocks for opaque codes).
    decoded_shape : tuple of int
        Shape of the decoded array (``shape + (block_size,)`` for opaque codes).
    context : str
        ``"code 2 (f32) shape (2, 3): "``, the prefix of every message about it.
    plain_view : bool
        Decoding needs neither unpacking nor a content check: the array is a
        view of the bytes as ``dtype`` (every whole-byte closed code but bool).
    packed : bool
        A packed 4-bit code (i4, u4, e2m1): decoding unpacks one element per
        byte, and an odd count has a padding nibble.

    Raises
    ------
    KilnError
        TYPE for a bad code or layout or offset, SHAPE for a malformed shape
        or one numpy cannot represent.

    Examples
    --------
    >>> info = PayloadInfo(17, (3,))
    >>> info.byte_length, info.dtype.name, info.context
    (2, 'uint4', 'code 17 (u4) shape (3,): ')
    >>> info.length_error(3).message
    'code 17 (u4) shape (3,): expected ceil(3 / 2) = 2 bytes, found 3 (long by 1)'

    """

    __slots__ = (
        "byte_length",
        "code",
        "context",
        "count",
        "decodable",
        "decoded_shape",
        "dtype",
        "element",
        "layout",
        "offset",
        "packed",
        "plain_view",
        "shape",
    )

    code: int
    shape: tuple[int, ...]
    layout: Layout | None
    offset: int
    element: Element
    count: int
    decodable: bool
    byte_length: int
    dtype: np.dtype[Any]
    decoded_shape: tuple[int, ...]
    context: str
    plain_view: bool
    packed: bool

    def __init__(
        self,
        code: CodeLike,
        shape: ShapeLike,
        layout: Layout | None = None,
        *,
        offset: int = 0,
        decodable: bool = True,
    ) -> None:
        element = resolve(code, layout)
        c = as_code(code)
        label = code_label(c)
        dims = check_shape(shape, label + ": ")
        decoded = element.decoded_shape(dims)
        if decodable:
            _check_decodable(dims, decoded, element.itemsize, label, c)
        count = math.prod(dims)
        packed = isinstance(element, DType) and element.packed
        self._set(
            code=element.code if isinstance(element, DType) else c,
            shape=dims,
            layout=layout,
            offset=check_offset(offset) if offset else 0,
            element=element,
            count=count,
            decodable=decodable,
            byte_length=element.byte_length(count),
            decoded_shape=decoded,
            context=f"{label} shape {dims}: ",
            plain_view=isinstance(element, DType) and not packed and element.code != Code.BOOL,
            packed=packed,
        )
        if isinstance(element, DType) and not element.dtype_loaded:
            # Reading the dtype would import ml_dtypes, which a description that
            # is only measured (a header listing) never needs: it is read on first
            # use.  The stand-in class keeps PayloadInfo itself free of a
            # __getattr__, which would slow every attribute read.
            object.__setattr__(self, "__class__", _DtypeOnFirstRead)
        else:
            object.__setattr__(self, "dtype", element.dtype)

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"PayloadInfo is immutable: cannot set {name!r}")

    def with_offset(self, offset: int) -> PayloadInfo:
        """The same description at another byte position in a file."""
        other = object.__new__(type(self))
        for name in _SET_AT_INIT:
            object.__setattr__(other, name, getattr(self, name))
        if type(self) is PayloadInfo:
            object.__setattr__(other, "dtype", self.dtype)
        object.__setattr__(other, "offset", check_offset(offset))
        return other

    def length_error(self, found: int, where: str = "") -> KilnError:
        """The LENGTH error for a payload of ``found`` bytes; ``where`` (a path and
        offset, a tensor name) goes before the context."""
        return KilnError(
            "LENGTH",
            f"{where}{self.context}expected {self.element.length_rule(self.count)} = "
            f"{show_int(self.byte_length)} bytes, found {show_int(found)} "
            f"({short_or_long(self.byte_length, found)})",
            code=self.code,
            shape=self.shape,
            expected=self.byte_length,
            found=found,
        )

    def check_length(self, found: int, where: str = "") -> None:
        """Raise :meth:`length_error` unless ``found`` is exactly :attr:`byte_length`."""
        if found != self.byte_length:
            raise self.length_error(found, where)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PayloadInfo):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (int(self.code), self.shape, self.layout, self.offset)

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild,
            (int(self.code), self.shape, self.layout, self.offset, self.decodable),
        )

    def __repr__(self) -> str:
        code = repr(self.code) if isinstance(self.code, Code) else str(self.code)
        return (
            f"PayloadInfo(code={code}, shape={self.shape}, layout={self.layout!r}, "
            f"offset={self.offset}, byte_length={self.byte_length})"
        )


_SET_AT_INIT = tuple(name for name in PayloadInfo.__slots__ if name != "dtype")


class _DtypeOnFirstRead(PayloadInfo):
    """A :class:`PayloadInfo` whose ``dtype`` slot is still empty: the first read
    fills it (loading ml_dtypes) and the instance becomes a plain PayloadInfo."""

    __slots__ = ()

    if not TYPE_CHECKING:  # for checkers, ``dtype`` is PayloadInfo's slot

        def __getattr__(self, name: str) -> Any:
            if name != "dtype":  # only an unset slot lands here
                raise AttributeError(f"'PayloadInfo' object has no attribute {name!r}")
            dtype = self.element.dtype
            object.__setattr__(self, "dtype", dtype)
            object.__setattr__(self, "__class__", PayloadInfo)
            return dtype


def _rebuild(
    code: int, shape: tuple[int, ...], layout: Layout | None, offset: int, decodable: bool
) -> PayloadInfo:
    return PayloadInfo(code, shape, layout, offset=offset, decodable=decodable)


def _check_decodable(
    dims: tuple[int, ...], decoded: tuple[int, ...], itemsize: int, label: str, code: int
) -> None:
    """The decoded array must be one numpy can make: at most 64 dimensions (an
    opaque code's block axis counts), and nonzero dimensions times the item
    size at most 2**63-1, even when a zero dimension makes it empty."""
    if len(decoded) > MAX_RANK:
        raise KilnError(
            "SHAPE",
            f"{label}: expected a shape of at most {MAX_RANK - 1} dimensions for an opaque code "
            f"(decoding adds the block axis and numpy allows {MAX_RANK}), found {len(dims)}",
            code=code,
            shape=dims,
        )
    check_representable(decoded, itemsize, f"{label} ", code=code)


def check_representable(
    shape: tuple[int, ...], itemsize: int, where: str = "", **fields: Any
) -> None:
    """SHAPE unless numpy can make an array of ``shape`` of ``itemsize``-byte
    items: nonzero dimensions times the item size at most 2**63-1, even when a
    zero dimension makes it empty.  What :func:`payload_info` asks of a payload's
    decoded shape, and every door that makes an array of another shape or dtype
    (a dequantized GGML tensor, a logical tensor, a conversion) asks of its
    output before making it; ``where`` starts the message.

    >>> check_representable((0, 2**61), 2)
    >>> check_representable((0, 2**61), 4, "out: ")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: SHAPE: out: shape (0, 2305843009213693952): expected an array numpy ...
    """
    total = itemsize
    for d in shape:
        total *= d or 1
        if total > MAX_INT64:
            raise KilnError(
                "SHAPE",
                f"{where}shape {shape}: expected an array numpy can represent (nonzero "
                f"dimensions x {itemsize}-byte items at most 2**63-1), found more",
                shape=shape,
                **fields,
            )


# Keys: (code, shape) for layout None and decodable, else (code, shape, layout,
# decodable); tuples of different lengths never compare equal.
_CACHE: dict[tuple[object, ...], PayloadInfo] = {}
_CACHE_LIMIT = 4096


@set_module("kiln_np")
def payload_info(
    code: CodeLike, shape: ShapeLike, layout: Layout | None = None, *, decodable: bool = True
) -> PayloadInfo:
    """The checked description of a payload of ``code`` and ``shape``.

    The same checks as :class:`PayloadInfo`; a description already built for
    the same plain ``(code, shape, layout)`` (an int code, a tuple of ints) is
    returned from a small cache, so the checks cost nothing the second time.

    Examples
    --------
    >>> payload_info(2, (2, 3)).byte_length
    24
    """
    # Only plain input is a cache key: True == 1 and 2.0 == 2 would otherwise
    # find the description of a valid code or dimension.
    if (
        (type(code) is int or type(code) is Code)
        and type(shape) is tuple
        and (layout is None or type(layout) is Layout)
    ):
        for d in shape:
            if type(d) is not int:
                break
        else:
            # The common key is the shortest (a pair hashes fastest), and a
            # subscript is cheaper than .get() for what is almost always a hit.
            if layout is None and decodable:
                key: tuple[object, ...] = (code, shape)
            else:
                key = (code, shape, layout, decodable)
            try:
                return _CACHE[key]
            except KeyError:
                pass  # built outside the handler: its errors chain to no KeyError
            info = PayloadInfo(code, shape, layout, decodable=decodable)
            if len(_CACHE) >= _CACHE_LIMIT:
                _CACHE.clear()
            _CACHE[key] = info
            return info
    return PayloadInfo(code, shape, layout, decodable=decodable)


@set_module("kiln_np")
def byte_length(code: CodeLike, shape: ShapeLike, layout: Layout | None = None) -> int:
    """Exact payload size in bytes for ``code`` and ``shape``.

    Whole-byte codes: element count times width; packed 4-bit codes:
    ``ceil(count / 2)``; opaque codes: count times ``layout.block_size``.
    Computed with Python integers, so it never wraps and calls no user code.

    Raises
    ------
    KilnError
        TYPE for a bad code or layout, SHAPE for a malformed shape.  A shape
        too large for numpy to decode still has a byte length.

    Examples
    --------
    >>> byte_length(17, (3,))
    2
    >>> byte_length("e2m1", (4096, 4096))
    8388608
    >>> byte_length(1, (2**62, 4))
    147573952589676412928
    """
    return payload_info(code, shape, layout, decodable=False).byte_length
