"""GGUF metadata values: their types, the checked scan of them in a header, the
mapping that parses each when it is read, and the encoder that writes them.

A value's type is a *spec*: a :class:`ValueType`, or ``("array", item spec)``
(``None`` for the item when an array's arrays differ, or when a writer leaves
it to the value), spelled ``"uint32"``, ``"array[string]"``,
``"array[array[int32]]"`` (:func:`spell`, :func:`parse_spec`).  The reader scans
every key/value once, bounds-checked (:class:`HeaderParser`), and keeps where
each starts; :class:`GGUFMetadata` decodes a value when it is read.  The writer
turns a Python value and an optional spec into its bytes
(:func:`encode_value`).  Arrays nest at most 4 deep either way.
"""

from __future__ import annotations

import array
import enum
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeAlias, overload

import numpy as np

from kiln_np._core.checks import U8, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._kernels.nibbles import first_above

__all__ = [
    "U32",
    "U64",
    "GGUFArrays",
    "GGUFMetadata",
    "HeaderParser",
    "Spec",
    "ValueType",
    "encode_value",
    "malformed",
    "parse_spec",
    "spell",
    "truncated",
    "utf8",
]

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
_MAX_ARRAY_DEPTH = 4  # an array of arrays is depth 2


@set_module("kiln_np.gguf")
class ValueType(enum.IntEnum):
    """GGUF metadata value types (``enum gguf_type``)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_NUMERIC: Mapping[ValueType, np.dtype[Any]] = MappingProxyType(
    {
        ValueType.UINT8: np.dtype("u1"),
        ValueType.INT8: np.dtype("i1"),
        ValueType.UINT16: np.dtype("<u2"),
        ValueType.INT16: np.dtype("<i2"),
        ValueType.UINT32: np.dtype("<u4"),
        ValueType.INT32: np.dtype("<i4"),
        ValueType.FLOAT32: np.dtype("<f4"),
        ValueType.BOOL: np.dtype("?"),
        ValueType.UINT64: np.dtype("<u8"),
        ValueType.INT64: np.dtype("<i8"),
        ValueType.FLOAT64: np.dtype("<f8"),
    }
)
_BY_NUMPY: Mapping[np.dtype[Any], ValueType] = MappingProxyType(
    {d.newbyteorder("="): t for t, d in _NUMERIC.items()}
)
_NAMES: Mapping[str, ValueType] = MappingProxyType({t.name.lower(): t for t in ValueType})
_VALUE_TYPES = ", ".join(f"{int(t)} {t.name.lower()}" for t in ValueType)

# A type spec: a ValueType, or ("array", item spec or None when inferred).
Spec: TypeAlias = "ValueType | tuple[str, Spec | None]"


def spell(spec: Spec | None) -> str:
    """A type spec as ``GGUFMetadata.types`` spells it (``"array[string]"``).

    >>> spell(("array", ("array", ValueType.INT32)))
    'array[array[int32]]'
    """
    if spec is None:
        return "array"
    if isinstance(spec, ValueType):
        return spec.name.lower()
    return "array" if spec[1] is None else f"array[{spell(spec[1])}]"


def parse_spec(text: object, where: str) -> Spec | None:
    """The type spec a spelling names (the inverse of :func:`spell`; ``"array"``
    leaves the item type to the value); TYPE for anything else.

    >>> parse_spec("array[uint8]", "")
    ('array', <ValueType.UINT8: 0>)
    """
    if isinstance(text, ValueType):
        return text
    if isinstance(text, str):
        # Unwrapped in a loop, at most 4 arrays deep: a spelling nested 2,000 deep is
        # TYPE, not a RecursionError.
        inner, depth = text, 0
        while inner.startswith("array[") and inner.endswith("]"):
            inner, depth = inner[6:-1], depth + 1
            if depth + (inner == "array") > _MAX_ARRAY_DEPTH:
                raise KilnError(
                    "TYPE",
                    f"{where}expected arrays nested at most {_MAX_ARRAY_DEPTH} deep, found "
                    f"{show_value(text)}",
                )
        spec: Spec | None = ("array", None) if inner == "array" else _NAMES.get(inner)
        if spec is not None:
            for _ in range(depth):
                spec = ("array", spec)
            return spec
    raise KilnError(
        "TYPE",
        f"{where}expected a type such as 'uint32', 'float32', 'string', 'array[string]', "
        f"found {show_value(text)}",
    )


# -- errors -----------------------------------------------------------------------------


def truncated(where: str, what: str, pos: int, need: int, size: int) -> KilnError:
    """LENGTH: ``what`` needs ``need`` bytes at ``pos`` and the file ends at ``size``."""
    held = max(size - pos, 0)
    return KilnError(
        "LENGTH",
        f"{where}{what} at byte {pos}: expected {need} bytes, the file holds {held} "
        f"(short by {need - held})",
        expected=need,
        found=held,
    )


def malformed(where: str, message: str, expected: object = None, found: object = None) -> KilnError:
    """TYPE: a header fact that is not what GGUF allows."""
    return KilnError("TYPE", where + message, expected=expected, found=found)


# -- reading: the checked scan, and values parsed when read -----------------------------


class HeaderParser:
    """Bounds-checked reads of a GGUF header; ``where`` names the file of ``size`` bytes.

    ``buf`` holds the file's first ``held`` bytes: all of them (a mapped file),
    or, with ``grow``, as many as were read so far (a remote file's header, read
    in growing ranges).  ``grow(end, reach)`` extends ``buf`` in place to at least
    ``end`` bytes; ``reach`` is where the header ends at the least, if it is
    well formed: what is asked for, the rest of the array being read and
    :attr:`floor`, the smallest size of the entries after the current one (a
    key/value is at least 12 bytes, a tensor info 24), which the caller keeps.
    """

    def __init__(
        self, buf: Any, size: int, where: str, grow: Callable[[int, int], None] | None = None
    ) -> None:
        self.buf = buf
        self.size = size
        self.where = where
        self.grow = grow
        self.held = size if grow is None else len(buf)
        self.floor = 0

    def check(self, pos: int, n: int, what: str) -> None:
        """LENGTH unless the file holds ``n`` bytes at ``pos`` (none is read)."""
        if n > self.size - pos:
            raise truncated(self.where, what, pos, n, self.size)

    def need(self, pos: int, n: int, what: str) -> None:
        """:meth:`check`, and the bytes in ``buf``."""
        self.check(pos, n, what)
        if pos + n > self.held:
            self.reach(pos + n)

    def reach(self, end: int, rest: int = 0) -> None:
        """Read to at least ``end`` (a growing buffer only: ``held`` is ``size``
        otherwise); ``rest``: bytes of the array being read that follow."""
        assert self.grow is not None  # a whole buffer holds every byte asked for
        self.grow(end, end + rest + self.floor)
        self.held = len(self.buf)

    def u32(self, pos: int, what: str) -> int:
        self.need(pos, 4, what)
        value: int = U32.unpack_from(self.buf, pos)[0]
        return value

    def u64(self, pos: int, what: str) -> int:
        self.need(pos, 8, what)
        value: int = U64.unpack_from(self.buf, pos)[0]
        return value

    def string(self, pos: int, what: str) -> int:
        """The end of the string at ``pos``."""
        n = self.u64(pos, what + " byte count")
        self.need(pos + 8, n, f"{what} of {n} bytes")
        return pos + 8 + n

    def text(self, pos: int, end: int) -> str:
        return bytes(self.buf[pos + 8 : end]).decode("utf-8", "surrogateescape")

    def value(self, vtype: int, pos: int, what: str, depth: int = 1) -> tuple[int, Spec]:
        """Check the value of type ``vtype`` at ``pos``; its end and type spec."""
        if vtype == ValueType.STRING:
            return self.string(pos, what), ValueType.STRING
        if vtype == ValueType.ARRAY:
            return self.array(pos, what, depth)
        if vtype not in _NUMERIC:
            raise malformed(
                self.where,
                f"{what}: expected a value type in 0-12 ({_VALUE_TYPES}), found {vtype}",
                expected="0-12",
                found=vtype,
            )
        t = ValueType(vtype)
        self.need(pos, _NUMERIC[t].itemsize, f"{what} ({t.name.lower()})")
        if t == ValueType.BOOL:
            self.bools(pos, 1, what)
        return pos + _NUMERIC[t].itemsize, t

    def bools(self, pos: int, n: int, what: str) -> None:
        raw = np.frombuffer(self.buf[pos : pos + n], U8)  # a copy: the map must close
        i = first_above(raw, 1)  # no mask of the whole array on the error path
        if i >= 0:
            raise malformed(
                self.where,
                f"{what}: expected bool bytes 0x00 or 0x01, found 0x{int(raw[i]):02x} "
                f"at byte {pos + i}",
                expected="0x00 or 0x01",
                found=int(raw[i]),
            )

    def array(self, pos: int, what: str, depth: int) -> tuple[int, Spec]:
        if depth > _MAX_ARRAY_DEPTH:
            raise malformed(
                self.where,
                f"{what}: expected arrays nested at most {_MAX_ARRAY_DEPTH} deep, found deeper",
                expected=_MAX_ARRAY_DEPTH,
                found=depth,
            )
        item = self.u32(pos, what + " item type")
        n = self.u64(pos + 4, what + " item count")
        pos += 12
        if item == ValueType.STRING:
            self.check(pos, 8 * n, f"{what}: {n} strings of at least 8 bytes each")
            return self.strings(pos, n, what), ("array", ValueType.STRING)
        if item == ValueType.ARRAY:
            self.check(pos, 12 * n, f"{what}: {n} arrays of at least 12 bytes each")
            return self.arrays(pos, n, what, depth + 1)
        if item not in _NUMERIC:
            raise malformed(
                self.where,
                f"{what}: expected an array item type in 0-12 ({_VALUE_TYPES}), found {item}",
                expected="0-12",
                found=item,
            )
        t = ValueType(item)
        width = _NUMERIC[t].itemsize
        self.need(pos, width * n, f"{what}: {n} {t.name.lower()} items of {width} bytes")
        if t == ValueType.BOOL:
            self.bools(pos, n, what)
        return pos + width * n, ("array", t)

    def arrays(self, pos: int, n: int, what: str, depth: int) -> tuple[int, Spec]:
        """Check the ``n`` arrays at ``pos`` (items of an array, ``depth`` deep); their
        end and the spec of the array holding them (``array[array]`` when they differ).

        Arrays of numbers of one type and count (the common case) are checked at
        once with strided views of their headers; others one header at a time,
        with no work per number."""
        if n == 0:
            return pos, ("array", ("array", None))
        end, first = self.array(pos, f"{what} item 0", depth)
        stride = end - pos
        inner_t = first[1] if isinstance(first, tuple) else None
        if isinstance(inner_t, ValueType) and inner_t in _NUMERIC and n * stride <= self.held - pos:
            count = (stride - 12) // _NUMERIC[inner_t].itemsize
            if _same_headers(self.buf, pos, n, stride, int(inner_t), count):
                if inner_t == ValueType.BOOL:
                    self.bools_strided(pos, n, stride, count, what)
                return pos + n * stride, ("array", first)
        specs = {spell(first)}
        unpack, width_of, buf, size, pos = (
            _ITEM_HEAD.unpack_from,
            _WIDTHS.get,
            self.buf,
            self.size,
            end,
        )
        held = self.held
        for i in range(1, n):
            rest = 12 * (n - 1 - i)  # the arrays after this one, at their smallest
            if held < pos + 12 <= size:
                self.reach(pos + 12, rest)
                held = self.held
            if pos + 12 <= size:
                t, count = unpack(buf, pos)
                width = width_of(t)
                stop = pos + 12 + width * count if width is not None else size + 1
                if held < stop <= size:
                    self.reach(stop, rest)
                    held = self.held
                if stop <= size:
                    pos = stop  # numbers (not bools): nothing else to check
                    if t != inner_t:
                        specs.add(_ARRAY_OF[t])
                    continue
            # strings, deeper arrays, bools, or an error to report
            pos, inner = self.array(pos, f"{what} item {i}", depth)
            held = self.held
            specs.add(spell(inner))
        return pos, ("array", first if len(specs) == 1 else ("array", None))

    def bools_strided(self, pos: int, n: int, stride: int, count: int, what: str) -> None:
        """:meth:`bools` for ``n`` bool arrays of ``count`` items, ``stride`` bytes apart."""
        found = _first_bad_bool(self.buf, pos + 12, n, stride, count)
        if found is not None:
            self.bools(found, 1, what)

    def strings(self, pos: int, n: int, what: str) -> int:
        # One pass over the byte counts: the strings are decoded when read.
        unpack, buf, size, held = U64.unpack_from, self.buf, self.size, self.held
        for i in range(n):
            if pos + 8 > held:
                if pos + 8 > size:
                    raise truncated(self.where, f"{what}: string {i} byte count", pos, 8, size)
                self.reach(pos + 8, 8 * (n - 1 - i))
                held = self.held
            end = pos + 8 + unpack(buf, pos)[0]
            if end > held:
                if end > size:
                    raise truncated(self.where, f"{what}: string {i}", pos + 8, end - pos - 8, size)
                self.reach(end, 8 * (n - 1 - i))
                held = self.held
            pos = end
        return pos


_ITEM_HEAD = struct.Struct("<IQ")  # an array's item type and count
_WIDTHS: Mapping[int, int] = MappingProxyType(
    {int(t): d.itemsize for t, d in _NUMERIC.items() if t != ValueType.BOOL}
)
_ITEM_WIDTHS: Mapping[int, int] = MappingProxyType(
    {int(t): d.itemsize for t, d in _NUMERIC.items()}
)
_ARRAY_OF: Mapping[int, str] = MappingProxyType(
    {t: f"array[{ValueType(t).name.lower()}]" for t in _WIDTHS}
)


def _strided(buf: Any, pos: int, n: int, stride: int, dtype: str) -> np.ndarray:
    return np.ndarray((n,), np.dtype(dtype), buffer=buf, offset=pos, strides=(stride,))


def _same_headers(buf: Any, pos: int, n: int, stride: int, t: int, count: int) -> bool:
    """Whether the ``n`` array headers ``stride`` bytes apart from ``pos`` all say
    ``t`` and ``count`` (the views end with the call: the map must close)."""
    return bool(
        (_strided(buf, pos, n, stride, "<u4") == t).all()
        and (_strided(buf, pos + 4, n, stride, "<u8") == count).all()
    )


def _first_bad_bool(buf: Any, pos: int, n: int, stride: int, count: int) -> int | None:
    """The byte offset of the first byte other than 0/1 in ``n`` runs of ``count``
    bytes, ``stride`` apart from ``pos``; None when there is none."""
    rows = np.ndarray((n, count), U8, buffer=buf, offset=pos, strides=(stride, 1))
    bad = np.flatnonzero((rows > 1).any(axis=1))
    if not bad.size:
        return None
    row = int(bad[0])
    return pos + row * stride + int(np.flatnonzero(rows[row] > 1)[0])


def _decode(buf: bytes, spec: Spec, pos: int) -> tuple[Any, int]:
    """The value of (checked) type ``spec`` at ``pos`` of the header, and its end."""
    if spec == ValueType.STRING:
        n = U64.unpack_from(buf, pos)[0]
        return buf[pos + 8 : pos + 8 + n].decode("utf-8", "surrogateescape"), pos + 8 + n
    if isinstance(spec, ValueType):
        value = np.frombuffer(buf, _NUMERIC[spec], 1, pos)[0]
        return (bool(value) if spec == ValueType.BOOL else value), pos + _NUMERIC[spec].itemsize
    item, n = struct.unpack_from("<IQ", buf, pos)
    pos += 12
    if item == ValueType.STRING:
        out: list[Any] = []
        unpack, append = U64.unpack_from, out.append
        for _ in range(n):
            end = pos + 8 + unpack(buf, pos)[0]
            append(buf[pos + 8 : end].decode("utf-8", "surrogateescape"))
            pos = end
        return out, pos
    if item == ValueType.ARRAY:
        arrays = GGUFArrays(buf, pos - 12, spec if spec != ("array", None) else None)
        return arrays, arrays.end
    dtype = _NUMERIC[ValueType(item)]
    return np.frombuffer(buf, dtype, n, pos), pos + dtype.itemsize * n


def _end(buf: bytes, pos: int) -> int:
    """Where the (checked) array at ``pos`` ends."""
    item: int
    n: int
    item, n = _ITEM_HEAD.unpack_from(buf, pos)
    pos += 12
    if item == ValueType.STRING:
        unpack = U64.unpack_from
        for _ in range(n):
            length: int = unpack(buf, pos)[0]
            pos += 8 + length
        return pos
    if item == ValueType.ARRAY:
        return GGUFArrays(buf, pos - 12, None).end
    return pos + _NUMERIC[ValueType(item)].itemsize * n


@set_module("kiln_np.gguf")
class GGUFArrays(Sequence[Any]):
    """A GGUF array of arrays: a read-only sequence whose items are decoded when
    indexed (a 1-D read-only numpy array, a list of ``str``, or another
    :class:`GGUFArrays`).

    Opening a file costs nothing per item; the first access finds where each
    item starts, at once when the items are arrays of one type and length, else
    with one pass over their headers (8 bytes kept per item).  :func:`save_gguf`
    writes it back as its bytes.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import read_gguf, save_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = save_gguf(p, {}, {"k": [np.array([1, 2], np.int32), np.array([3], np.int32)]})
    ...     arrays = read_gguf(p).metadata["k"]
    >>> len(arrays), arrays[1].dtype.name, [a.tolist() for a in arrays]
    (2, 'int32', [[1, 2], [3]])
    """

    def __init__(self, header: bytes, pos: int, spec: Spec | None) -> None:
        self._header = header
        self._pos = pos  # the array's own item type and count
        self.spec = spec  # its type, when known (a key's value); None when not
        self._n: int = _ITEM_HEAD.unpack_from(header, pos)[1]
        self.end: int
        self._stride = 0  # items one stride apart, or:
        self._starts: array.array[int] | None = None  # where each item starts
        first = pos + 12
        if self._n == 0:
            self.end = first
            return
        t, count = _ITEM_HEAD.unpack_from(header, first)
        stride = _end(header, first) - first
        if (
            t in _NUMERIC
            and first + self._n * stride <= len(header)
            and _same_headers(header, first, self._n, stride, t, count)
        ):
            self._stride, self.end = stride, first + self._n * stride
            return
        starts, at = array.array("q"), first
        append, unpack, width_of = starts.append, _ITEM_HEAD.unpack_from, _ITEM_WIDTHS.get
        for _ in range(self._n):  # one step per item header, none per number
            append(at)
            t, count = unpack(header, at)
            width = width_of(t)
            at = at + 12 + width * count if width is not None else _end(header, at)
        self._starts, self.end = starts, at

    def raw(self) -> bytes:
        """Its bytes in the header: item type, count and items, as GGUF writes them."""
        return self._header[self._pos : self.end]

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = range(self._n)[index]  # IndexError and negative indices as a list has them
        start = self._pos + 12 + i * self._stride if self._starts is None else self._starts[i]
        return _decode(self._header, ("array", None), start)[0]

    def __repr__(self) -> str:
        shown = ", ".join(repr(self[i]) for i in range(min(self._n, 2)))
        return f"GGUFArrays({self._n} arrays: [{shown}{', ...' * (self._n > 2)}])"


@set_module("kiln_np.gguf")
class GGUFMetadata(Mapping[str, Any]):
    """The key/values of a GGUF file, in file order, each parsed when read.

    Values keep their GGUF types (see the module docstring): numpy scalars of
    the exact type, ``bool``, ``str``, read-only numpy arrays, lists of
    ``str``, :class:`GGUFArrays`.  :attr:`types` spells each key's type.  The
    header bytes are kept (a copy; the file is not held open), so it pickles.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import read_gguf, save_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = save_gguf(p, {}, {"general.alignment": np.uint32(64), "tokens": ["a", "b"]})
    ...     meta = read_gguf(p).metadata
    >>> meta["general.alignment"], meta["tokens"], dict(meta.types)
    (np.uint32(64), ['a', 'b'], {'general.alignment': 'uint32', 'tokens': 'array[string]'})
    """

    def __init__(self, header: bytes, entries: Mapping[str, tuple[Spec, int]]) -> None:
        self._header = header
        self._entries = dict(entries)
        self._strings: dict[str, tuple[str, ...]] = {}
        self._arrays: dict[str, GGUFArrays] = {}  # where each item starts, found once

    def __getitem__(self, key: str) -> Any:
        spec, pos = self._entries[key]
        if spec == ("array", ValueType.STRING):
            cached = self._strings.get(key)
            if cached is None:  # decode a long token list once
                cached = self._strings[key] = tuple(_decode(self._header, spec, pos)[0])
            return list(cached)
        if isinstance(spec, tuple) and spec[1] is not None and not isinstance(spec[1], ValueType):
            arrays = self._arrays.get(key)
            if arrays is None:
                arrays = self._arrays[key] = GGUFArrays(self._header, pos, spec)
            return arrays
        return _decode(self._header, spec, pos)[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def head(self, key: str, count: int) -> tuple[int, Sequence[Any]]:
        """The array value of ``key``: its length and its first ``count`` items,
        decoding only those (the first tokens of a 150,000-token list cost a
        few bytes); TypeError when the value is not an array.

        >>> import tempfile, os
        >>> from kiln_np.gguf import read_gguf, save_gguf
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     p = os.path.join(tmp, "m.gguf")
        ...     _ = save_gguf(p, {}, {"tokens": ["a", "b", "c"]})
        ...     read_gguf(p).metadata.head("tokens", 2)
        (3, ['a', 'b'])
        """
        spec, pos = self._entries[key]
        if not isinstance(spec, tuple):
            raise TypeError(f"metadata {key!r}: expected an array, found {spell(spec)}")
        if spec[1] != ValueType.STRING:
            value = self[key]
            return len(value), value[:count]
        n: int = _ITEM_HEAD.unpack_from(self._header, pos)[1]
        out: list[str] = []
        at = pos + 12
        for _ in range(min(n, count)):
            text, at = _decode(self._header, ValueType.STRING, at)
            out.append(text)
        return n, out

    @property
    def types(self) -> Mapping[str, str]:
        """Each key's GGUF type, spelled as :func:`save_gguf`'s ``metadata_types`` takes it."""
        return MappingProxyType({k: spell(s) for k, (s, _) in self._entries.items()})

    def __repr__(self) -> str:
        return (
            f"GGUFMetadata({len(self)} keys: {', '.join(list(self)[:4])}{' ...' * (len(self) > 4)})"
        )


# -- writing: Python values -> bytes ---------------------------------------------------


_INT_RANGES = (
    (ValueType.INT32, -(2**31), 2**31 - 1),
    (ValueType.INT64, -(2**63), 2**63 - 1),
    (ValueType.UINT64, 0, 2**64 - 1),
)


_WIDENING = (ValueType.INT32, ValueType.INT64, ValueType.UINT64)


def _infer(value: object, where: str, depth: int = 1) -> Spec:
    """The GGUF type a metadata value carries itself (``depth``: of the array it is)."""
    if isinstance(value, (bool, np.bool_)):
        return ValueType.BOOL
    if isinstance(value, (str, bytes)):
        return ValueType.STRING
    if isinstance(value, (np.generic, np.ndarray)) and value.dtype.newbyteorder("=") in _BY_NUMPY:
        t = _BY_NUMPY[value.dtype.newbyteorder("=")]
        return ("array", t) if isinstance(value, np.ndarray) and value.ndim == 1 else t
    if isinstance(value, int):
        for t, lo, hi in _INT_RANGES:
            if lo <= value <= hi:
                return t
    if isinstance(value, float) and np.float32(value).astype(np.float64).tobytes() == (
        np.float64(value).tobytes()
    ):
        return ValueType.FLOAT32
    if isinstance(value, (list, tuple, GGUFArrays)):
        if depth > _MAX_ARRAY_DEPTH:  # before looking inside: a list nested 2,000 deep
            raise KilnError(
                "TYPE",
                f"{where}expected arrays nested at most {_MAX_ARRAY_DEPTH} deep, found deeper",
            )
        items = [_infer(v, where, depth + 1) for v in value]
        if not items or all(i == ValueType.STRING for i in items):
            return ("array", ValueType.STRING)
        if all(not isinstance(i, ValueType) for i in items):
            return ("array", None)
        if all(i in _WIDENING for i in items):  # Python ints: the widest type they need
            return ("array", _WIDENING[max(_WIDENING.index(i) for i in items)])
        if len(set(items)) == 1:
            return ("array", items[0])
    raise KilnError(
        "TYPE",
        f"{where}expected a value whose GGUF type it shows (bool, str, a numpy scalar or 1-D "
        "array of a GGUF type, an int, a float that float32 holds exactly, a list of one "
        f"of those), found {show_value(value)}; pass numpy.float32(x) or numpy.float64(x) "
        "for a float, or give metadata_types",
    )


def encode_value(
    value: object, spec: Spec | None, where: str, depth: int = 1
) -> tuple[ValueType, bytes]:
    """The value type id and the bytes of ``value`` as GGUF type ``spec``."""
    if isinstance(value, GGUFArrays) and (spec is None or spec == value.spec):
        return ValueType.ARRAY, value.raw()  # as read: no work per item
    if spec is None:
        spec = _infer(value, where, depth)
    if spec == ValueType.STRING:
        if not isinstance(value, (str, bytes)):
            raise KilnError(
                "TYPE", f"{where}expected a str for a string, found {show_value(value)}"
            )
        raw = utf8(value, where) if isinstance(value, str) else value
        return ValueType.STRING, U64.pack(len(raw)) + raw
    if isinstance(spec, ValueType):
        return spec, _numbers(value, spec, where, scalar=True)
    # No depth check here: parse_spec and _infer stop at 4 levels, so a spec
    # never has more levels than are left.
    item = spec[1]
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise KilnError(
            "TYPE", f"{where}expected a 1-D array for a GGUF array, found shape {value.shape}"
        )
    if not isinstance(value, (list, tuple, np.ndarray, GGUFArrays)):
        raise KilnError(
            "TYPE",
            f"{where}expected a list or 1-D array for {spell(spec)}, found {show_value(value)}",
        )
    if item is None:
        inferred = _infer(value, where, depth)
        assert not isinstance(inferred, ValueType)  # a list or a 1-D array infers an array
        item = inferred[1] or ("array", None)
    n = len(value)
    if item == ValueType.STRING or not isinstance(item, ValueType):
        # Items of an array of arrays carry no type of their own: only item type and count.
        body = b"".join(
            encode_value(v, item, f"{where}item {i}: ", depth + 1)[1] for i, v in enumerate(value)
        )
        kind = ValueType.STRING if item == ValueType.STRING else ValueType.ARRAY
        return ValueType.ARRAY, struct.pack("<IQ", kind, n) + body
    return ValueType.ARRAY, struct.pack("<IQ", item, n) + _numbers(value, item, where)


def _numbers(value: object, t: ValueType, where: str, *, scalar: bool = False) -> bytes:
    dtype = _NUMERIC[t]
    arr = np.asarray(value)
    kinds = "b" if t == ValueType.BOOL else "biu" if dtype.kind in "iu" else "biuf"
    ok = arr.dtype.kind in kinds or (arr.size == 0 and not scalar)  # [] is float64 to numpy
    if ok and arr.dtype.kind in "iu" and dtype.kind in "iu" and arr.size:
        info = np.iinfo(dtype)
        ok = info.min <= int(arr.min()) and int(arr.max()) <= info.max
    if not ok or (scalar and arr.ndim != 0):
        raise KilnError(
            "TYPE",
            f"{where}expected {'a value' if scalar else 'values'} that {t.name.lower()} holds, "
            f"found {show_value(value)}",
        )
    return arr.astype(dtype).tobytes()


def utf8(text: str, where: str) -> bytes:
    """``text`` as UTF-8; the lone surrogates that stand for undecodable bytes
    (``errors="surrogateescape"``, as the reader makes them) become those bytes."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise KilnError(
            "TYPE",
            f"{where}expected text UTF-8 can encode, found {exc.object[exc.start : exc.end]!r} "
            f"at index {exc.start}",
        ) from None
