"""GGUF files (llama.cpp's weight format) <-> Kiln payloads, lazily and strictly.

A GGUF file is read without reading tensor data: :func:`read_gguf` parses the
header into checked descriptions (:class:`GGUFTensorInfo`, each with a
:class:`~kiln_np.PayloadInfo` and the tensor's absolute offset in its file),
and :func:`write_gguf` streams tensors into a new file (crash-safely: a
temporary sibling renamed into place).  ``kiln_np.open_weights`` and
``kiln_np.save_weights`` use both.

The format (GGUF versions 2 and 3)
----------------------------------
All integers are little-endian.  A big-endian GGUF (its version field reads
byte-swapped, ``0x03000000``) is refused with TYPE.  A file is:

1. **Header**, 24 bytes: the magic ``b"GGUF"`` (``47 47 55 46``); ``version``,
   uint32, 2 or 3 (version 1 used 32-bit counts and is refused); the tensor
   count, uint64; the metadata key/value count, uint64.
2. **Metadata**: that many key/values, each a *string* key, a uint32 value
   type and the value.  A *string* is a uint64 byte count then that many bytes
   of UTF-8 (no terminator).  Value types (:class:`ValueType`): 0 uint8,
   1 int8, 2 uint16, 3 int16, 4 uint32, 5 int32, 6 float32, 7 bool (one byte,
   0 or 1: any other byte is TYPE), 8 string, 9 array, 10 uint64, 11 int64,
   12 float64.  An *array* is a uint32 item type, a uint64 item count, then the
   items back to back (strings with their own counts); arrays may hold arrays,
   to a depth of at most :data:`MAX_ARRAY_DEPTH`.  Keys are unique.
3. **Tensor infos**, one per tensor: the name (a string, unique), ``n_dims``
   (uint32, at most 4), ``n_dims`` uint64 dims ``ne[0..n_dims-1]``, the GGML
   type (uint32, a row of :data:`TYPES`), and the data offset (uint64),
   relative to the start of the data section.
4. **Padding** to a multiple of the alignment, then the **data section**.  The
   alignment is the ``general.alignment`` key (a uint32 power of two) or 32.
   Each tensor's offset is a multiple of the alignment; writers pad each
   tensor to the alignment (llama.cpp also requires the tensors to follow one
   another in tensor-info order; kiln_np reads any order without overlap).

**Dims order.** ``ne[0]`` is the innermost, fastest-varying axis, so the Kiln
shape (C order) is the dims **reversed**, for every type.  A quantized type
packs ``ne[0]`` in blocks of ``block_elements`` elements (``block_bytes``
bytes each): its Kiln payload is opaque (code ``0x4700 + type id``, layout
``ggml.<type name in lower case>``), and its Kiln shape counts blocks, so the
innermost dimension is divided by ``block_elements``.  An F32 tensor with
``ne = [4096, 32000]`` is Kiln ``f32`` shape ``(32000, 4096)``; a Q4_0 tensor
with those dims is Kiln code ``0x4702`` shape ``(32000, 128)`` of 18-byte
blocks.  ``n_dims == 0`` is a scalar, Kiln shape ``()``.

**What a reader checks** (all :class:`~kiln_np.KilnError`, naming the file and
the key or tensor, before anything is allocated from a claimed size): the
magic and version (TYPE); every count, string and array against the bytes the
file holds (LENGTH); value and GGML type ids (TYPE); array depth (TYPE); bool
bytes (TYPE); duplicate keys and tensor names (TYPE); ``n_dims`` above 4,
dims whose product passes 2**63-1, an innermost dim that is not a whole number
of blocks (SHAPE); offsets off the alignment or overlapping another tensor
(TYPE); data past the end of the file (LENGTH).

Metadata values
---------------
:class:`GGUFMetadata` gives each key's value as a Python value that keeps its
GGUF type, parsed only when the key is read (a 150,000-entry token list costs
one pass over its byte counts at open): numbers are numpy scalars of their
exact type (``numpy.float32``, ``numpy.uint32``...), so a float keeps its bits
(a signalling NaN ``0x7f800001`` stays one; a Python float would quiet it);
bool is ``bool``; a string is ``str`` (bytes that are not UTF-8 come back as
lone surrogates, ``errors="surrogateescape"``, and are written back as the
same bytes); an array of numbers or bools is a read-only 1-D numpy array of
that type; an array of strings is a ``list`` of ``str``; an array of arrays
a ``list`` of those.  :attr:`GGUFMetadata.types` spells each key's type
(``"uint32"``, ``"array[string]"``, ``"array[array[int32]]"``; an array whose
arrays differ in type is ``"array[array]"``): :func:`write_gguf` takes that
mapping back as ``metadata_types``, which settles the one thing values cannot
say, the item type of an empty list.

Splits
------
llama.cpp's ``gguf-split`` writes ``NAME-00001-of-00003.gguf`` ...; each split
holds ``split.no`` (0-based), ``split.count`` and ``split.tensors.count``.
Reading the first split reads them all (each must exist beside it, agree on
the count, and together hold ``split.tensors.count`` distinct tensors); the
metadata is the first split's.  :func:`write_gguf` with ``max_shard_size``
writes splits the same way (gguf-py's key types: uint16, uint16, int32).
"""

from __future__ import annotations

import contextlib
import enum
import math
import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, TypeAlias

import numpy as np

from kiln_np._core.checks import (
    MAX_INT64,
    U8,
    check_int,
    check_path,
    check_regular_file,
    show_value,
    written_path,
)
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, Layout, code_label
from kiln_np._files.io import replacing, write_all
from kiln_np._kernels.nibbles import first_above
from kiln_np._weights.kit import MappedFile, TensorSource, Weights, WeightTensor, tensor_sources

__all__ = [
    "DEFAULT_ALIGNMENT",
    "MAX_ARRAY_DEPTH",
    "MAX_DIMS",
    "MAX_NAME_BYTES",
    "TYPES",
    "GGMLType",
    "GGUFFile",
    "GGUFMetadata",
    "GGUFTensorInfo",
    "ValueType",
    "ggml_type",
    "open_gguf",
    "read_gguf",
    "write_gguf",
]

_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
"""Data alignment when ``general.alignment`` is absent."""
MAX_DIMS = 4
"""GGML's ``GGML_MAX_DIMS``: a GGUF tensor has at most 4 dims."""
MAX_ARRAY_DEPTH = 4
"""Arrays nest at most this deep (an array of arrays is depth 2)."""
MAX_NAME_BYTES = 63
"""llama.cpp's ``GGML_MAX_NAME`` (64) less the NUL: longer tensor names are
refused on write (llama.cpp cannot load them) and accepted on read."""

_HEADER_BYTES = 24
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


# -- the GGML type registry ------------------------------------------------------------


@dataclass(frozen=True)
class GGMLType:
    """One GGML tensor type and its Kiln form.

    Attributes
    ----------
    type_id : int
        GGML's ``enum ggml_type`` value, as GGUF tensor infos store it.
    name : str
        GGML's name (``"F32"``, ``"Q4_0"``, ``"MXFP4"``).
    block_elements : int
        Elements per block (1 for the plain types).
    block_bytes : int
        Bytes per block.
    code : int
        The Kiln code: a closed :class:`~kiln_np.Code` for F32, F16, BF16, F64,
        I8, I16, I32, I64; ``0x4700 + type_id`` (opaque) for the others.
    layout : Layout or None
        ``Layout("ggml.<name in lower case>", block_bytes)`` for opaque codes.
    """

    type_id: int
    name: str
    block_elements: int
    block_bytes: int
    code: int
    layout: Layout | None


_CLOSED: Mapping[str, Code] = MappingProxyType(
    {
        "F32": Code.F32,
        "F16": Code.F16,
        "BF16": Code.BF16,
        "F64": Code.F64,
        "I8": Code.I8,
        "I16": Code.I16,
        "I32": Code.I32,
        "I64": Code.I64,
    }
)


def _ggml(type_id: int, name: str, block_elements: int, block_bytes: int) -> GGMLType:
    code = _CLOSED.get(name)
    if code is not None:
        return GGMLType(type_id, name, block_elements, block_bytes, code, None)
    layout = Layout(f"ggml.{name.lower()}", block_bytes)
    return GGMLType(type_id, name, block_elements, block_bytes, 0x4700 + type_id, layout)


TYPES: tuple[GGMLType, ...] = (
    _ggml(0, "F32", 1, 4),
    _ggml(1, "F16", 1, 2),
    _ggml(2, "Q4_0", 32, 18),
    _ggml(3, "Q4_1", 32, 20),
    _ggml(6, "Q5_0", 32, 22),
    _ggml(7, "Q5_1", 32, 24),
    _ggml(8, "Q8_0", 32, 34),
    _ggml(9, "Q8_1", 32, 40),
    _ggml(10, "Q2_K", 256, 84),
    _ggml(11, "Q3_K", 256, 110),
    _ggml(12, "Q4_K", 256, 144),
    _ggml(13, "Q5_K", 256, 176),
    _ggml(14, "Q6_K", 256, 210),
    _ggml(15, "Q8_K", 256, 292),
    _ggml(16, "IQ2_XXS", 256, 66),
    _ggml(17, "IQ2_XS", 256, 74),
    _ggml(18, "IQ3_XXS", 256, 98),
    _ggml(19, "IQ1_S", 256, 50),
    _ggml(20, "IQ4_NL", 32, 18),
    _ggml(21, "IQ3_S", 256, 110),
    _ggml(22, "IQ2_S", 256, 82),
    _ggml(23, "IQ4_XS", 256, 136),
    _ggml(24, "I8", 1, 1),
    _ggml(25, "I16", 1, 2),
    _ggml(26, "I32", 1, 4),
    _ggml(27, "I64", 1, 8),
    _ggml(28, "F64", 1, 8),
    _ggml(29, "IQ1_M", 256, 56),
    _ggml(30, "BF16", 1, 2),
    _ggml(34, "TQ1_0", 256, 54),
    _ggml(35, "TQ2_0", 256, 66),
    _ggml(39, "MXFP4", 32, 17),
    _ggml(40, "NVFP4", 64, 36),
    _ggml(41, "Q1_0", 128, 18),
)
"""Every GGML type a GGUF tensor may have (gguf-py 0.19.0's table), in type-id
order.  Ids 4, 5 (Q4_2, Q4_3) and 31-33, 36-38 (the repacked Q4_0/IQ4_NL
variants) were removed from GGML and are refused."""

_BY_ID: Mapping[int, GGMLType] = MappingProxyType({t.type_id: t for t in TYPES})
_BY_CODE: Mapping[int, GGMLType] = MappingProxyType({int(t.code): t for t in TYPES})


def ggml_type(code: int, layout: Layout | None = None) -> GGMLType:
    """The GGML type that holds Kiln payloads of ``code`` (and ``layout``).

    Raises
    ------
    KilnError
        TYPE for a code GGUF cannot hold (u8, bool, the 4-bit and 8-bit floats,
        e8m0, u16-u64, opaque codes other than ``0x4700 + type id`` with its
        exact layout).

    Examples
    --------
    >>> ggml_type(2).name
    'F32'
    >>> ggml_type(0x4708, Layout("ggml.q8_0", 34)).block_elements
    32
    """
    row = _BY_CODE.get(int(code))
    if row is None or row.layout != layout:
        wanted = "" if row is None else f" (GGML {row.name} needs layout {row.layout!r})"
        raise KilnError(
            "TYPE",
            f"GGUF cannot hold {code_label(int(code))} with layout {layout!r}{wanted}: expected "
            "f32, f16, bf16, f64, i8, i16, i32, i64 or a GGML block layout (code 0x4700 + "
            "GGML type id, Layout('ggml.<type>', bytes per block))",
            code=int(code),
        )
    return row


# -- metadata value types --------------------------------------------------------------


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


def _spell(spec: Spec | None) -> str:
    if spec is None:
        return "array"
    if isinstance(spec, ValueType):
        return spec.name.lower()
    return "array" if spec[1] is None else f"array[{_spell(spec[1])}]"


# -- errors -----------------------------------------------------------------------------


def _short(where: str, what: str, pos: int, need: int, size: int) -> KilnError:
    """LENGTH: ``what`` needs ``need`` bytes at ``pos`` and the file ends at ``size``."""
    held = max(size - pos, 0)
    return KilnError(
        "LENGTH",
        f"{where}{what} at byte {pos}: expected {need} bytes, the file holds {held} "
        f"(short by {need - held})",
        expected=need,
        found=held,
    )


def _malformed(
    where: str, message: str, expected: object = None, found: object = None
) -> KilnError:
    return KilnError("TYPE", where + message, expected=expected, found=found)


# -- reading ----------------------------------------------------------------------------


class _Parser:
    """Bounds-checked reads of a mapped GGUF header; ``where`` names the file."""

    def __init__(self, buf: Any, size: int, where: str) -> None:
        self.buf = buf
        self.size = size
        self.where = where

    def need(self, pos: int, n: int, what: str) -> None:
        if n > self.size - pos:
            raise _short(self.where, what, pos, n, self.size)

    def u32(self, pos: int, what: str) -> int:
        self.need(pos, 4, what)
        value: int = _U32.unpack_from(self.buf, pos)[0]
        return value

    def u64(self, pos: int, what: str) -> int:
        self.need(pos, 8, what)
        value: int = _U64.unpack_from(self.buf, pos)[0]
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
            raise _malformed(
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
            raise _malformed(
                self.where,
                f"{what}: expected bool bytes 0x00 or 0x01, found 0x{int(raw[i]):02x} "
                f"at byte {pos + i}",
                expected="0x00 or 0x01",
                found=int(raw[i]),
            )

    def array(self, pos: int, what: str, depth: int) -> tuple[int, Spec]:
        if depth > MAX_ARRAY_DEPTH:
            raise _malformed(
                self.where,
                f"{what}: expected arrays nested at most {MAX_ARRAY_DEPTH} deep, found deeper",
                expected=MAX_ARRAY_DEPTH,
                found=depth,
            )
        item = self.u32(pos, what + " item type")
        n = self.u64(pos + 4, what + " item count")
        pos += 12
        if item == ValueType.STRING:
            self.need(pos, 8 * n, f"{what}: {n} strings of at least 8 bytes each")
            return self.strings(pos, n, what), ("array", ValueType.STRING)
        if item == ValueType.ARRAY:
            self.need(pos, 12 * n, f"{what}: {n} arrays of at least 12 bytes each")
            specs: set[str] = set()
            inner: Spec | None = None
            for i in range(n):
                pos, inner = self.array(pos, f"{what} item {i}", depth + 1)
                specs.add(_spell(inner))
            return pos, ("array", inner if len(specs) == 1 else ("array", None))
        if item not in _NUMERIC:
            raise _malformed(
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

    def strings(self, pos: int, n: int, what: str) -> int:
        # One pass over the byte counts: the strings are decoded when read.
        unpack, buf, size = _U64.unpack_from, self.buf, self.size
        for i in range(n):
            if pos + 8 > size:
                raise _short(self.where, f"{what}: string {i} byte count", pos, 8, size)
            end = pos + 8 + unpack(buf, pos)[0]
            if end > size:
                raise _short(self.where, f"{what}: string {i}", pos + 8, end - pos - 8, size)
            pos = end
        return pos


def _decode(buf: bytes, spec: Spec, pos: int) -> tuple[Any, int]:
    """The value of (checked) type ``spec`` at ``pos`` of the header, and its end."""
    if spec == ValueType.STRING:
        n = _U64.unpack_from(buf, pos)[0]
        return buf[pos + 8 : pos + 8 + n].decode("utf-8", "surrogateescape"), pos + 8 + n
    if isinstance(spec, ValueType):
        value = np.frombuffer(buf, _NUMERIC[spec], 1, pos)[0]
        return (bool(value) if spec == ValueType.BOOL else value), pos + _NUMERIC[spec].itemsize
    item, n = struct.unpack_from("<IQ", buf, pos)
    pos += 12
    if item == ValueType.STRING:
        out: list[Any] = []
        unpack, append = _U64.unpack_from, out.append
        for _ in range(n):
            end = pos + 8 + unpack(buf, pos)[0]
            append(buf[pos + 8 : end].decode("utf-8", "surrogateescape"))
            pos = end
        return out, pos
    if item == ValueType.ARRAY:
        out = []
        for _ in range(n):
            inner, pos = _decode(buf, ("array", None), pos)
            out.append(inner)
        return out, pos
    dtype = _NUMERIC[ValueType(item)]
    return np.frombuffer(buf, dtype, n, pos), pos + dtype.itemsize * n


class GGUFMetadata(Mapping[str, Any]):
    """The key/values of a GGUF file, in file order, each parsed when read.

    Values keep their GGUF types (see the module docstring): numpy scalars of
    the exact type, ``bool``, ``str``, read-only numpy arrays, lists of
    ``str``, lists of arrays.  :attr:`types` spells each key's type.  The
    header bytes are kept (a copy; the file is not held open), so it pickles.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = write_gguf(p, {}, {"general.alignment": np.uint32(64), "tokens": ["a", "b"]})
    ...     meta = read_gguf(p).metadata
    >>> meta["general.alignment"], meta["tokens"], dict(meta.types)
    (np.uint32(64), ['a', 'b'], {'general.alignment': 'uint32', 'tokens': 'array[string]'})
    """

    def __init__(self, header: bytes, entries: Mapping[str, tuple[Spec, int]]) -> None:
        self._header = header
        self._entries = dict(entries)
        self._strings: dict[str, tuple[str, ...]] = {}

    def __getitem__(self, key: str) -> Any:
        spec, pos = self._entries[key]
        if spec == ("array", ValueType.STRING):
            cached = self._strings.get(key)
            if cached is None:  # decode a long token list once
                cached = self._strings[key] = tuple(_decode(self._header, spec, pos)[0])
            return list(cached)
        return _decode(self._header, spec, pos)[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def types(self) -> Mapping[str, str]:
        """Each key's GGUF type, spelled as :func:`write_gguf`'s ``metadata_types`` takes it."""
        return MappingProxyType({k: _spell(s) for k, (s, _) in self._entries.items()})

    def __repr__(self) -> str:
        return (
            f"GGUFMetadata({len(self)} keys: {', '.join(list(self)[:4])}{' ...' * (len(self) > 4)})"
        )


class GGUFTensorInfo(NamedTuple):
    """One tensor of a GGUF file, checked: where its payload is and what it is.

    Attributes
    ----------
    name : str
    path : str
        The file (split) that holds it, absolute.
    offset : int
        Absolute byte offset of its data in ``path``.
    info : PayloadInfo
        Kiln code, shape (dims reversed, innermost in blocks), layout and
        ``byte_length``.
    ggml : GGMLType
        Its GGML type.
    dims : tuple of int
        GGUF's ``ne``, innermost first, as the file lists them.
    """

    name: str
    path: str
    offset: int
    info: PayloadInfo
    ggml: GGMLType
    dims: tuple[int, ...]


class GGUFFile(NamedTuple):
    """What :func:`read_gguf` found: metadata and tensors of a file or of all its splits.

    Attributes
    ----------
    paths : tuple of str
        The files read, absolute (one per split, in split order).
    version : int
        The GGUF version of the (first) file: 2 or 3.
    alignment : int
        The data alignment (``general.alignment``, or 32).
    metadata : GGUFMetadata
        The (first split's) key/values.
    tensors : tuple of GGUFTensorInfo
        In tensor-info order, splits one after another.
    """

    paths: tuple[str, ...]
    version: int
    alignment: int
    metadata: GGUFMetadata
    tensors: tuple[GGUFTensorInfo, ...]


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Read the header of a GGUF file (and of its other splits), not its data.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.gguf`` file; the first split (``NAME-00001-of-000NN.gguf``) reads
        every split.

    Returns
    -------
    GGUFFile
        Metadata (parsed lazily) and the checked tensor descriptions.

    Raises
    ------
    KilnError
        TYPE for a malformed header or split set, LENGTH for counts, strings,
        arrays or tensor data the file cannot hold, SHAPE for bad dims; each
        names the file and the key or tensor.
    FileNotFoundError
        When the file or a split does not exist (naming it).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = write_gguf(p, {"w": np.zeros((2, 3), np.float32)})
    ...     gguf = read_gguf(p)
    >>> [(t.name, t.ggml.name, t.dims, t.info.shape, t.offset) for t in gguf.tensors]
    [('w', 'F32', (3, 2), (2, 3), 96)]
    """
    first = _read_one(os.path.realpath(check_path(path)))
    count = first.metadata.get("split.count")
    if count is None:
        return first
    return _read_splits(first)


def _read_one(path: str) -> GGUFFile:
    where = f"{path!r}: "
    with open(path, "rb") as f:
        size = check_regular_file(path, f.fileno()).st_size
        if size < _HEADER_BYTES:
            raise _short(where, "GGUF header", 0, _HEADER_BYTES, size)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _parse(path, mm, size, where)


def _parse(path: str, mm: mmap.mmap, size: int, where: str) -> GGUFFile:
    p = _Parser(mm, size, where)
    magic = bytes(mm[:4])
    if magic != _MAGIC:
        raise _malformed(
            where,
            f"expected the GGUF magic 47 47 55 46 ('GGUF'), found {magic.hex(' ')}",
            expected=_MAGIC,
            found=magic,
        )
    version = p.u32(4, "version")
    if version not in (2, 3):
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        why = (
            f"a big-endian GGUF (version {swapped} byte-swapped), which kiln_np does not read"
            if swapped in (2, 3)
            else "version 1 used 32-bit counts and is not supported"
            if version == 1
            else "an unknown version"
        )
        raise _malformed(
            where,
            f"expected GGUF version 2 or 3, found {version}: {why}",
            expected=3,
            found=version,
        )
    n_tensors = p.u64(8, "tensor count")
    n_kv = p.u64(16, "metadata key/value count")
    # Every key/value takes at least 12 bytes, every tensor info 24: fail before looping.
    p.need(
        _HEADER_BYTES, 12 * n_kv + 24 * n_tensors, f"{n_kv} key/values and {n_tensors} tensor infos"
    )
    pos = _HEADER_BYTES
    entries: dict[str, tuple[Spec, int]] = {}
    for i in range(n_kv):
        end = p.string(pos, f"key {i}")
        key = p.text(pos, end)
        if key in entries:
            raise _malformed(where, f"key {key!r}: expected unique keys, found it twice")
        vtype = p.u32(end, f"key {key!r} value type")
        pos, spec = p.value(vtype, end + 4, f"key {key!r}")
        entries[key] = (spec, end + 4)
    infos: list[tuple[str, tuple[int, ...], GGMLType, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        end = p.string(pos, f"tensor info {i} name")
        name = p.text(pos, end)
        what = f"tensor {name!r}"
        if name in names:
            raise _malformed(where, f"{what}: expected unique tensor names, found it twice")
        names.add(name)
        n_dims = p.u32(end, f"{what} n_dims")
        if n_dims > MAX_DIMS:
            raise KilnError(
                "SHAPE", f"{where}{what}: expected at most {MAX_DIMS} dims, found {n_dims}"
            )
        p.need(end + 4, 8 * n_dims + 12, f"{what} dims, type and offset")
        dims = struct.unpack_from(f"<{n_dims}Q", mm, end + 4)
        pos = end + 4 + 8 * n_dims
        type_id = p.u32(pos, f"{what} type")
        row = _BY_ID.get(type_id)
        if row is None:
            raise _malformed(
                where,
                f"{what}: expected a GGML type id in {sorted(_BY_ID)}, found {type_id}",
                expected=sorted(_BY_ID),
                found=type_id,
            )
        infos.append((name, dims, row, p.u64(pos + 4, f"{what} offset")))
        pos += 12
    metadata_end = pos
    header = bytes(mm[:metadata_end])
    metadata = GGUFMetadata(header, entries)
    alignment = _alignment_of(metadata, where)
    data_start = -(-metadata_end // alignment) * alignment
    tensors = tuple(
        _tensor(path, where, name, dims, row, rel, data_start, alignment, size)
        for name, dims, row, rel in infos
    )
    _check_overlap(tensors, where)
    return GGUFFile((path,), version, alignment, metadata, tensors)


def _alignment_of(metadata: GGUFMetadata, where: str) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    kind = metadata.types["general.alignment"]
    value = metadata["general.alignment"]
    if kind != "uint32" or value == 0 or value & (value - 1):
        raise _malformed(
            where,
            f"key 'general.alignment': expected a uint32 power of two, found "
            f"{show_value(value)} (GGUF {kind})",
            expected="uint32 power of two",
            found=value,
        )
    return int(value)


def _tensor(
    path: str,
    where: str,
    name: str,
    dims: tuple[int, ...],
    row: GGMLType,
    rel: int,
    data_start: int,
    alignment: int,
    size: int,
) -> GGUFTensorInfo:
    what = f"{where}tensor {name!r} ({row.name}, dims {list(dims)}): "
    if max(dims, default=0) > MAX_INT64 or math.prod(dims) > MAX_INT64:
        raise KilnError(
            "SHAPE",
            f"{what}expected dims whose product is at most 2**63-1, found {math.prod(dims)}",
            shape=dims,
        )
    if row.block_elements > 1 and (not dims or dims[0] % row.block_elements):
        found = f"ne[0] = {dims[0]}" if dims else "a scalar"
        raise KilnError(
            "SHAPE",
            f"{what}expected ne[0] to be a multiple of the {row.block_elements}-element "
            f"block, found {found}",
            shape=dims,
        )
    shape = dims[::-1]
    if dims:
        shape = (*shape[:-1], shape[-1] // row.block_elements)
    try:
        info = payload_info(row.code, shape, row.layout)
    except KilnError as exc:
        raise exc.prefixed(what) from None
    if rel % alignment:
        raise _malformed(
            what,
            f"expected a data offset that is a multiple of the alignment {alignment}, found {rel}",
            expected=alignment,
            found=rel,
        )
    offset = data_start + rel
    held = max(size - offset, 0)
    if held < info.byte_length:
        raise info.length_error(held, f"{what}data at byte {offset} of a {size}-byte file: ")
    return GGUFTensorInfo(name, path, offset, info.with_offset(offset), row, dims)


def _check_overlap(tensors: Sequence[GGUFTensorInfo], where: str) -> None:
    if len(tensors) < 2:
        return
    starts = np.array([t.offset for t in tensors], np.int64)
    ends = starts + np.array([t.info.byte_length for t in tensors], np.int64)
    order = np.argsort(starts, kind="stable")
    clash = np.flatnonzero(ends[order[:-1]] > starts[order[1:]])
    if clash.size:
        a, b = tensors[int(order[clash[0]])], tensors[int(order[clash[0] + 1])]
        raise _malformed(
            where,
            f"tensor {b.name!r}: expected its data to start at or after byte "
            f"{a.offset + a.info.byte_length}, where tensor {a.name!r} ends; found byte {b.offset} "
            "(tensors overlap)",
            expected=a.offset + a.info.byte_length,
            found=b.offset,
        )


def _split_value(gguf: GGUFFile, key: str) -> int:
    value = gguf.metadata.get(key)
    kind = gguf.metadata.types.get(key, "missing")
    if not isinstance(value, np.integer):
        found = "no such key" if key not in gguf.metadata else f"{show_value(value)} (GGUF {kind})"
        raise _malformed(
            f"{gguf.paths[0]!r}: ",
            f"key {key!r}: expected an integer, found {found}",
            expected="integer",
            found=kind,
        )
    return int(value)


def _read_splits(first: GGUFFile) -> GGUFFile:
    path = first.paths[0]
    count = _split_value(first, "split.count")
    if count <= 1:
        return first  # a single split names itself as one
    no = _split_value(first, "split.no")
    match = _SPLIT.match(os.path.basename(path))
    if no != 0 or match is None or int(match["count"]) != count:
        raise _malformed(
            f"{path!r}: ",
            f"expected the first of {count} splits, named NAME-00001-of-{count:05d}.gguf with "
            f"split.no 0, found split.no {no}",
            expected=0,
            found=no,
        )
    total = _split_value(first, "split.tensors.count")
    base = os.path.join(os.path.dirname(path), match["stem"])
    tensors = list(first.tensors)
    paths = [path]
    for i in range(1, count):
        shard = _read_one(f"{base}-{i + 1:05d}-of-{count:05d}.gguf")
        got = (_split_value(shard, "split.no"), _split_value(shard, "split.count"))
        if got != (i, count):
            raise _malformed(
                f"{shard.paths[0]!r}: ",
                f"expected split.no {i} and split.count {count}, found {got[0]} and {got[1]}",
                expected=(i, count),
                found=got,
            )
        tensors += shard.tensors
        paths.append(shard.paths[0])
    names = [t.name for t in tensors]
    if len(set(names)) != len(names) or len(names) != total:
        twice = sorted({n for n in names if names.count(n) > 1})[:3]
        raise _malformed(
            f"{path!r}: ",
            f"expected split.tensors.count {total} distinct tensors in {count} splits, found "
            f"{len(names)}" + (f" (listed twice: {twice})" if twice else ""),
            expected=total,
            found=len(names),
        )
    return GGUFFile(tuple(paths), first.version, first.alignment, first.metadata, tuple(tensors))


# -- writing ----------------------------------------------------------------------------


class _Planned(NamedTuple):
    source: TensorSource
    ggml: GGMLType
    dims: tuple[int, ...]


def _plan(source: TensorSource) -> _Planned:
    """Check that GGUF (and llama.cpp) can hold one tensor, before anything is written."""
    what = f"tensor {source.name!r}: "
    info = source.info
    raw = _utf8(source.name, f"{what}its name: ")
    if len(raw) > MAX_NAME_BYTES:
        raise KilnError(
            "TYPE",
            f"{what}expected a name of at most {MAX_NAME_BYTES} UTF-8 bytes (llama.cpp's "
            f"GGML_MAX_NAME), found {len(raw)}",
        )
    try:
        row = ggml_type(info.code, info.layout)
    except KilnError as exc:
        raise exc.prefixed(what) from None
    if len(info.shape) > MAX_DIMS or info.count == 0 or (row.layout and not info.shape):
        found = (
            f"{len(info.shape)} dims"
            if len(info.shape) > MAX_DIMS
            else "an empty tensor (llama.cpp divides by ne[1])"
            if info.count == 0
            else "a scalar of one block"
        )
        raise KilnError(
            "SHAPE",
            f"{what}{info.context}GGUF expects 1 to {MAX_DIMS} dims (0 for a scalar of a plain "
            f"type) and at least one element, found {found}",
            code=info.code,
            shape=info.shape,
        )
    dims = info.shape[::-1]
    if dims:
        dims = (dims[0] * row.block_elements, *dims[1:])
    return _Planned(source, row, dims)


def _parse_spec(text: object, where: str) -> Spec | None:
    if isinstance(text, ValueType):
        return text
    if isinstance(text, str):
        if text in _NAMES and text != "array":
            return _NAMES[text]
        if text == "array":
            return ("array", None)
        if text.startswith("array[") and text.endswith("]"):
            return ("array", _parse_spec(text[6:-1], where))
    raise KilnError(
        "TYPE",
        f"{where}expected a type such as 'uint32', 'float32', 'string', 'array[string]', "
        f"found {show_value(text)}",
    )


_INT_RANGES = (
    (ValueType.INT32, -(2**31), 2**31 - 1),
    (ValueType.INT64, -(2**63), 2**63 - 1),
    (ValueType.UINT64, 0, 2**64 - 1),
)


_WIDENING = (ValueType.INT32, ValueType.INT64, ValueType.UINT64)


def _infer(value: object, where: str) -> Spec:
    """The GGUF type a metadata value carries itself."""
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
    if isinstance(value, (list, tuple)):
        items = [_infer(v, where) for v in value]
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


def _encode(
    value: object, spec: Spec | None, where: str, depth: int = 1
) -> tuple[ValueType, bytes]:
    """The value type id and the bytes of ``value`` as GGUF type ``spec``."""
    if spec is None:
        spec = _infer(value, where)
    if spec == ValueType.STRING:
        if not isinstance(value, (str, bytes)):
            raise KilnError(
                "TYPE", f"{where}expected a str for a string, found {show_value(value)}"
            )
        raw = _utf8(value, where) if isinstance(value, str) else value
        return ValueType.STRING, _U64.pack(len(raw)) + raw
    if isinstance(spec, ValueType):
        return spec, _numbers(value, spec, where, scalar=True)
    if depth > MAX_ARRAY_DEPTH:
        raise KilnError(
            "TYPE", f"{where}expected arrays nested at most {MAX_ARRAY_DEPTH} deep, found deeper"
        )
    item = spec[1]
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise KilnError(
            "TYPE", f"{where}expected a 1-D array for a GGUF array, found shape {value.shape}"
        )
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise KilnError(
            "TYPE",
            f"{where}expected a list or 1-D array for {_spell(spec)}, found {show_value(value)}",
        )
    if item is None:
        inferred = _infer(value, where)
        assert not isinstance(inferred, ValueType)  # a list or a 1-D array infers an array
        item = inferred[1] or ("array", None)
    n = len(value)
    if item == ValueType.STRING or not isinstance(item, ValueType):
        # Items of an array of arrays carry no type of their own: only item type and count.
        body = b"".join(
            _encode(v, item, f"{where}item {i}: ", depth + 1)[1] for i, v in enumerate(value)
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


def _metadata_bytes(
    metadata: Mapping[str, Any], types: Mapping[str, object]
) -> tuple[list[bytes], int]:
    """Each key/value's bytes, and the alignment ``general.alignment`` asks for."""
    parts = []
    alignment = DEFAULT_ALIGNMENT
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise KilnError("TYPE", f"expected metadata keys as str, found {show_value(key)}")
        where = f"metadata key {key!r}: "
        spec = _parse_spec(types[key], where) if key in types else None
        t, body = _encode(value, spec, where)
        if key == "general.alignment":
            if t != ValueType.UINT32 or not _is_power_of_two(int(np.asarray(value))):
                raise KilnError(
                    "TYPE",
                    f"{where}expected a uint32 power of two (numpy.uint32(32)), found "
                    f"{_spell(t)} {show_value(value)}",
                )
            alignment = int(np.asarray(value))
        raw = _utf8(key, f"{where}its key: ")
        parts.append(_U64.pack(len(raw)) + raw + _U32.pack(t) + body)
    return parts, alignment


def _utf8(text: str, where: str) -> bytes:
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


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _shards(plans: list[_Planned], max_shard_size: int | None) -> list[list[_Planned]]:
    if max_shard_size is None:
        return [plans]
    shards: list[list[_Planned]] = [[]]
    held = 0
    for plan in plans:
        if shards[-1] and held + plan.source.info.byte_length > max_shard_size:
            shards.append([])
            held = 0
        shards[-1].append(plan)
        held += plan.source.info.byte_length
    return shards


def write_gguf(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    *,
    metadata_types: Mapping[str, str] | None = None,
    max_shard_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[str]:
    """Write tensors and metadata as a GGUF (version 3) file, or as splits.

    Everything is checked before a byte is written; the data is streamed
    (a weight-file tensor is copied from its file a chunk at a time).  Each
    file is written to a temporary sibling and renamed into place; with
    splits, the first split is renamed last, so a reader never finds a first
    split whose others are missing.

    Parameters
    ----------
    path : str or os.PathLike
        The file; with splits, ``NAME.gguf`` becomes ``NAME-00001-of-000NN.gguf``...
    tensors : Mapping[str, Payload or numpy.ndarray or WeightTensor]
        In the order to write.  Kiln f32, f16, bf16, f64, i8, i16, i32, i64,
        and GGML blocks (code ``0x4700 + type id`` with its ``ggml.*`` layout).
        A scalar (shape ``()``) of a plain type is written with ``n_dims`` 0
        and reads back as a scalar (llama.cpp sees a 1-element tensor).
    metadata : Mapping[str, Any], optional
        Key/values, written in order.  Values say their type (see the module
        docstring); a Python ``int`` is int32 (int64 or uint64 when it needs
        them), a Python ``float`` float32 when float32 holds it exactly.
        ``split.*`` keys are dropped: splits get their own.
    metadata_types : Mapping[str, str], optional
        Types by key, overriding what values say; a :class:`GGUFMetadata`
        passed as ``metadata`` brings its own :attr:`~GGUFMetadata.types`.
    max_shard_size : int, optional
        Start a new split before a tensor that would take a split's data past
        this many bytes (gguf-split's ``--split-max-size``).  When everything
        fits in one split, ``path`` itself is written.
    progress : callable, optional
        Called with each number of payload bytes written.

    Returns
    -------
    list of str
        The files written.

    Raises
    ------
    KilnError
        TYPE for a tensor type GGUF cannot hold (naming the tensor and its
        type), a name longer than 63 bytes, a metadata value of no GGUF type;
        SHAPE for more than 4 dims, an empty tensor or a one-block scalar;
        LENGTH for a Payload whose bytes are not its shape's.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = write_gguf(p, {"w": np.ones((2, 3), np.float32)}, {"n": np.uint32(7)})
    ...     g = read_gguf(p)
    ...     print(g.tensors[0].dims, g.metadata["n"], g.metadata.types["n"])
    (3, 2) 7 uint32
    """
    target = written_path(check_path(path))
    plans = [_plan(source) for source in tensor_sources(tensors)]
    limit = (
        None if max_shard_size is None else check_int(max_shard_size, "max_shard_size", minimum=1)
    )
    metadata = {} if metadata is None else metadata
    for what, given in (("metadata", metadata), ("metadata_types", metadata_types or {})):
        if not isinstance(given, Mapping):
            raise KilnError("TYPE", f"expected {what} as a Mapping, found {show_value(given)}")
    if metadata_types is None:
        metadata_types = metadata.types if isinstance(metadata, GGUFMetadata) else {}
    meta = {k: v for k, v in metadata.items() if k not in _SPLIT_KEYS}
    kv, alignment = _metadata_bytes(meta, metadata_types)
    shards = _shards(plans, limit)
    if len(shards) == 1:
        names = [target]
    else:
        stem = target[:-5] if target.endswith(".gguf") else target
        names = [f"{stem}-{i + 1:05d}-of-{len(shards):05d}.gguf" for i in range(len(shards))]
    with contextlib.ExitStack() as stack:
        for i, (name, shard) in enumerate(zip(names, shards, strict=True)):
            extra = []
            if len(shards) > 1:
                split = {
                    "split.no": np.uint16(i),
                    "split.count": np.uint16(len(shards)),
                    "split.tensors.count": np.int32(len(plans)),
                }
                extra = _metadata_bytes(split, {})[0]
            head = _header(shard, (kv if i == 0 else []) + extra, alignment)
            _, f = stack.enter_context(replacing(name))
            fd = f.fileno()  # everything goes through the descriptor, unbuffered
            write_all(fd, head)
            for plan in shard:
                plan.source.write_to(fd, progress=progress)
                write_all(fd, bytes(-plan.source.info.byte_length % alignment))
    return names


def _header(shard: list[_Planned], kv: list[bytes], alignment: int) -> bytes:
    parts = [_MAGIC, _U32.pack(3), _U64.pack(len(shard)), _U64.pack(len(kv)), *kv]
    rel = 0
    for plan in shard:
        raw = _utf8(plan.source.name, "")  # checked by _plan
        parts += [
            _U64.pack(len(raw)),
            raw,
            struct.pack(
                f"<I{len(plan.dims)}QIQ", len(plan.dims), *plan.dims, plan.ggml.type_id, rel
            ),
        ]
        rel += -(-plan.source.info.byte_length // alignment) * alignment
    head = b"".join(parts)
    return head + bytes(-len(head) % alignment)


def open_gguf(path: str | os.PathLike[str]) -> Weights:
    """Open a GGUF file (all splits, from the first) as :class:`~kiln_np.Weights`.

    ``kiln_np.open_weights`` calls this for a file starting with ``GGUF``.
    Only the headers are read; each file is mapped when one of its tensors
    hands out a payload.

    Raises
    ------
    KilnError, FileNotFoundError
        As :func:`read_gguf`.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "m.gguf")
    ...     _ = write_gguf(p, {"w": np.arange(3, dtype=np.float32)})
    ...     with open_gguf(p) as w:
    ...         print(w.format, w["w"], w["w"].numpy())
    gguf WeightTensor('w', code 2 (f32), shape (3,), 12 bytes, F32) [0. 1. 2.]
    """
    gguf = read_gguf(path)
    files = {p: MappedFile.open(p) for p in gguf.paths}
    tensors = [WeightTensor(t.name, t.info, files[t.path], t.ggml.name) for t in gguf.tensors]
    return Weights(
        tensors, format="gguf", metadata=gguf.metadata, path=gguf.paths[0], files=files.values()
    )
