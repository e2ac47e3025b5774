"""What the block-scaled arithmetic takes: values, scales and their blocks.

Values and scales come as arrays, Kiln payloads or tensors of
:func:`kiln_np.open_weights`; each is read once into its kind (a row of
:data:`~kiln_np.mx.kinds.KINDS`) and flat storage bytes, a payload through its
one checked description.  The block geometry along an axis (the scales' shape,
the elements each scale covers) is here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from kiln_np._codec import Payload, as_array, decode, to_numpy
from kiln_np._core.checks import MAX_INT64, U8, byte_view, check_int, show_value, storage_error
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, DTypeIndex, code_label, dtype_info
from kiln_np._kernels import nibbles

from .kinds import ELEMENT_DTYPES, ELEMENTS, SCALE_DTYPES, SCALES, Kind, spoken

__all__ = [
    "Source",
    "blocked_shape",
    "check_axis",
    "check_block_size",
    "input_array",
    "payload_bytes",
    "payload_of",
    "repeats",
    "scales_bytes",
    "values_source",
]


def payload_of(obj: object) -> Payload | None:
    """``obj`` as a Payload: itself, or what its ``payload()`` returns (a tensor of
    :func:`kiln_np.open_weights`); None for anything else (an array).

    >>> payload_of(np.zeros(2, np.uint8)) is None
    True
    """
    if isinstance(obj, Payload):
        return obj
    method = getattr(obj, "payload", None)
    if callable(method) and not isinstance(obj, np.ndarray):
        p = method()
        if isinstance(p, Payload):
            return p
    return None


def payload_bytes(p: Payload, what: str) -> tuple[PayloadInfo, np.ndarray]:
    """The payload's checked description, built once, and its flat bytes (any
    bytes-like ``data``: bytes, bytearray, memoryview, an array), whose count it
    has checked (LENGTH names ``what``); TYPE for data that is no buffer.

    >>> info, src = payload_bytes(Payload(19, b"\\x7f", (1,)), "scales")
    >>> info.count, src.tolist()
    (1, [127])
    """
    info = payload_info(p.code, p.shape, p.layout)
    try:
        src = byte_view(p.data, what)
    except TypeError:
        raise KilnError(
            "TYPE",
            f"{what}: expected the payload's data as a bytes-like buffer, "
            f"found {show_value(p.data)}",
        ) from None
    info.check_length(src.size, f"{what}: ")
    return info, src


def input_array(obj: object, what: str) -> np.ndarray:
    """``obj`` (not a payload) as an ndarray; TYPE naming ``what`` for what numpy
    cannot make one of (a ragged list, an ``__array__`` that raises) and for a
    masked array.

    >>> input_array([1, 2], "values").tolist()
    [1, 2]
    """
    try:
        return as_array(obj)
    except KilnError as exc:
        raise exc.prefixed(f"{what}: ") from None


def check_block_size(block_size: object) -> int:
    """``block_size`` as an int in 1..2**63-1 (numpy's index range), else SHAPE.

    >>> check_block_size(32)
    32
    """
    return check_int(block_size, "block_size", kind="SHAPE", minimum=1, maximum=MAX_INT64)


class Source:
    """The element codes of ``values``: flat storage bytes, packed or one per byte."""

    __slots__ = ("data", "kind", "packed", "shape")

    def __init__(
        self, kind: Kind, data: np.ndarray, shape: tuple[int, ...], *, packed: bool
    ) -> None:
        self.kind = kind
        self.data = data  # flat uint8
        self.shape = shape
        self.packed = packed

    def codes(self) -> np.ndarray:
        """One storage byte per element, flat.

        >>> p = Payload(18, memoryview(b"\\x21"), (2,))
        >>> values_source(p).codes().tolist()
        [1, 2]
        """
        if not self.packed:
            return self.data
        count = math.prod(self.shape)
        return to_numpy(Code.E2M1, self.data, (count,)).view(U8)


def _payload_kind(p: Payload, what: str, kinds: Mapping[int, Kind]) -> Kind:
    """The kind of the payload ``p`` among ``kinds``; TYPE naming them for another."""
    kind = kinds.get(int(p.code)) if p.layout is None else None
    if kind is None:
        codes = [
            f"{int(c)} ({dtype_info(c).name}{'' if c == k.code else f', read as {k.name}'})"
            for c, k in kinds.items()
        ]
        raise KilnError(
            "TYPE",
            f"{what}: expected a Kiln payload of code {spoken(codes)}, "
            f"found {code_label(int(p.code))}",
            code=int(p.code),
        )
    return kind


def _array_kind(
    arr: np.ndarray, what: str, kinds: Mapping[int, Kind], index: DTypeIndex[Kind]
) -> Kind:
    """The kind of ``arr``'s dtype (``index`` holds ``kinds`` by dtype); TYPE naming
    them for another."""
    kind = index.lookup(arr.dtype) if arr.dtype.fields is None else None
    if kind is None:
        names = [
            f"{dtype_info(c).dtype}{'' if c == k.code else f' {k.name} bytes'}"
            for c, k in kinds.items()
        ]
        raise KilnError(
            "TYPE",
            f"{what}: expected an array of {spoken(names)} (or their Kiln payloads), "
            f"found {arr.dtype}",
            found=str(arr.dtype),
        )
    return kind


def values_source(values: object) -> Source:
    """The kind and element codes of ``values``; TYPE for another type.

    >>> src = values_source(np.array([1, -2], np.int8))
    >>> src.kind.name, src.shape, src.data.tolist()
    ('i8', (2,), [1, 254])
    """
    p = payload_of(values)
    if p is not None:
        kind = _payload_kind(p, "values", ELEMENTS)
        info, src = payload_bytes(p, "values")
        if kind.code == Code.E2M1 and info.count % 2 == 0:
            return Source(kind, src, info.shape, packed=True)
        arr = decode(info, src)
        return Source(kind, arr.reshape(-1).view(U8), info.shape, packed=False)
    arr = input_array(values, "values")
    kind = _array_kind(arr, "values", ELEMENTS, ELEMENT_DTYPES)
    flat = np.ascontiguousarray(arr).reshape(-1).view(U8)
    # One read; on failure the first bad byte is found without a mask of it all.
    bad = nibbles.first_above(flat, kind.codes - 1) if kind.codes < 256 else -1
    if bad >= 0:
        raise storage_error(flat, bad, 4, f"values: {kind.dtype}: ")
    return Source(kind, flat, tuple(arr.shape), packed=False)


def scales_bytes(scales: object) -> tuple[Kind, np.ndarray]:
    """The scale kind and the scales as a uint8 array of their shape.

    >>> kind, sbytes = scales_bytes(np.array([127, 255], np.uint8))
    >>> kind.name, sbytes.tolist()
    ('e8m0', [127, 255])
    """
    p = payload_of(scales)
    if p is not None:
        kind = _payload_kind(p, "scales", SCALES)
        info, src = payload_bytes(p, "scales")
        return kind, decode(info, src).view(U8)
    arr = input_array(scales, "scales")
    return _array_kind(arr, "scales", SCALES, SCALE_DTYPES), arr.view(U8)


def check_axis(axis: object, ndim: int, what: str) -> int:
    """``axis`` as a non-negative axis of an array of ``ndim`` axes; SHAPE if it is none.

    >>> check_axis(-1, 3, "values")
    2
    """
    a = check_int(axis, "axis", kind="SHAPE", minimum=-(2**63))
    if ndim == 0:
        raise KilnError("SHAPE", f"expected {what} to have at least one axis, found 0-d")
    if not -ndim <= a < ndim:
        raise KilnError(
            "SHAPE",
            f"expected axis in {-ndim}..{ndim - 1} for {what}, found {a}",
        )
    return a % ndim


def blocked_shape(shape: tuple[int, ...], axis: int, block_size: int) -> tuple[int, ...]:
    """The scales' shape: ``shape`` with ``axis`` divided by ``block_size``, rounded up.

    >>> blocked_shape((4, 70), 1, 32)
    (4, 3)
    """
    return (*shape[:axis], -(-shape[axis] // block_size), *shape[axis + 1 :])


def repeats(n: int, block_size: int) -> int | np.ndarray:
    """How many of ``n`` elements each block covers: ``block_size`` when the blocks
    are whole, else one count per block (the last partial), for ``np.repeat``.

    >>> repeats(64, 32), repeats(70, 32).tolist()
    (32, [32, 32, 6])
    """
    nb = -(-n // block_size)
    if nb * block_size == n:
        return block_size
    reps = np.full(nb, block_size, np.intp)
    reps[-1] = n - (nb - 1) * block_size
    return reps
