"""The zarr-extensions ``packbits`` array -> bytes codec, in numpy (no zarr here).

Wire form (zarr-extensions ``codecs/packbits/README.md``)
----------------------------------------------------------
Each element is ``k`` bits: ``b = last_bit - first_bit + 1`` bits of each of its
components (2 for complex types, else 1), ``N`` bits per component when no range
is given (``N``: 1 for bool, 2 for int2/uint2, 4 for int4/uint4/float4_e2m1fn,
6 for the float6 types, ``8 * itemsize`` otherwise, little-endian).  Elements
in C order make one bit stream: element ``i`` is bits ``[i*k, (i+1)*k)``,
least significant bit first, and byte ``j`` is bits ``[8j, 8j+8)``.  So a 4-bit
type keeps its first element in the low nibble, exactly as a Kiln payload.
The stream is padded with 0 bits to a whole byte.  Decoding shifts the ``b``
bits back to ``first_bit`` and sign-extends (signed integers) or zero-extends
(everything else) to ``N`` bits.

``padding_encoding``: ``"none"`` (default), or one byte holding the number of
padding bits (0-7) before the stream (``"first_byte"``; the schema spells it
``"start_byte"``) or after it (``"last_byte"``; ``"end_byte"``).  The README
spells the bit range ``first_bit``/``last_bit`` and the registry's JSON schema
``start_bit``/``end_bit``; both are read (one spelling per configuration) and
the schema's is written, as are its padding names.

Decoding is strict: the byte count must be the element count's, the padding
bits 0 and a padding byte the number of padding bits; each mismatch is a
:class:`~kiln_np.KilnError` saying what was expected and what was found.

The 1-, 2-, 4- and 6-bit streams of a whole element run on kiln_np's kernels
(``np.packbits``, ``kiln_np._kernels.subbyte``, ``kiln_np._kernels.nibbles``),
whole bytes are a little-endian view; a bit range takes a general path, one
bit per byte in between (8x the memory of the data, for this rare case).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln_np._core.checks import U8, short_or_long, show_value
from kiln_np._core.errors import KilnError
from kiln_np._kernels import nibbles, pool, subbyte

from ._types import ZarrType, zarr_type_for_dtype

__all__ = [
    "PADDINGS",
    "PackBitsConfig",
    "decode_packbits",
    "encode_packbits",
    "packbits_config",
    "packbits_size",
    "packbits_type",
]

PADDINGS: Mapping[str, str] = {
    "none": "none",
    "first_byte": "start_byte",
    "start_byte": "start_byte",
    "last_byte": "end_byte",
    "end_byte": "end_byte",
}
"""Each ``padding_encoding`` spelling read -> the one written (the schema's)."""

_RANGE_KEYS = (("first_bit", "last_bit"), ("start_bit", "end_bit"))
_SUB_BYTE = {"bool": 1, "int2": 2, "uint2": 2, "int4": 4, "uint4": 4, "float4_e2m1fn": 4}


@dataclass(frozen=True)
class PackBitsConfig:
    """A checked ``packbits`` configuration.

    Attributes
    ----------
    padding : str
        ``"none"``, ``"start_byte"`` or ``"end_byte"`` (the schema's names).
    first_bit, last_bit : int or None
        The bit range of each component; None for its default.
    """

    padding: str = "none"
    first_bit: int | None = None
    last_bit: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``configuration`` object, in the schema's spelling.

        >>> PackBitsConfig("start_byte", 0, 2).to_json()
        {'padding_encoding': 'start_byte', 'start_bit': 0, 'end_bit': 2}
        """
        out: dict[str, Any] = {"padding_encoding": self.padding}
        if self.first_bit is not None:
            out["start_bit"] = self.first_bit
        if self.last_bit is not None:
            out["end_bit"] = self.last_bit
        return out


def _bit(value: object, key: str) -> int | None:
    if value is None or (type(value) is int and value >= 0):
        return value
    raise KilnError(
        "TYPE", f"packbits: expected {key} as an integer >= 0 or null, found {show_value(value)}"
    )


def packbits_config(configuration: object) -> PackBitsConfig:
    """Check a ``packbits`` ``configuration`` object (either spelling).

    >>> packbits_config({"padding_encoding": "first_byte", "first_bit": 1})
    PackBitsConfig(padding='start_byte', first_bit=1, last_bit=None)
    >>> packbits_config({"first_bit": 0, "end_bit": 3})
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: TYPE: packbits: expected one spelling of the bit range, ...
    """
    if configuration is None:
        return PackBitsConfig()
    if not isinstance(configuration, Mapping):
        raise KilnError(
            "TYPE",
            f"packbits: expected the configuration as an object, found {show_value(configuration)}",
        )
    known = {"padding_encoding", *_RANGE_KEYS[0], *_RANGE_KEYS[1]}
    extra = sorted(str(k) for k in configuration if k not in known)
    if extra:
        raise KilnError(
            "TYPE",
            f"packbits: expected configuration keys among {', '.join(sorted(known))}, found "
            f"{', '.join(extra)}",
        )
    used = [keys for keys in _RANGE_KEYS if any(k in configuration for k in keys)]
    if len(used) > 1:
        both = sorted(k for keys in used for k in keys if k in configuration)
        raise KilnError(
            "TYPE",
            "packbits: expected one spelling of the bit range, first_bit/last_bit or "
            f"start_bit/end_bit, found both ({', '.join(both)})",
        )
    first_key, last_key = used[0] if used else _RANGE_KEYS[1]
    padding = configuration.get("padding_encoding", "none")
    if not isinstance(padding, str) or padding not in PADDINGS:
        raise KilnError(
            "TYPE",
            f"packbits: expected padding_encoding among {', '.join(PADDINGS)}, found "
            f"{show_value(padding)}",
        )
    first = _bit(configuration.get(first_key), first_key)
    last = _bit(configuration.get(last_key), last_key)
    if first is not None and last is not None and last < first:
        raise KilnError(
            "TYPE", f"packbits: expected {last_key} >= {first_key}, found {last} < {first}"
        )
    return PackBitsConfig(PADDINGS[padding], first, last)


@dataclass(frozen=True)
class _Plan:
    """How one dtype packs: components per element, bits per component (``N``),
    the range ``[lo, lo + b)`` kept, and the numpy view of one component."""

    row: ZarrType
    components: int
    n_bits: int
    lo: int
    b: int
    component: np.dtype[Any]

    @property
    def k(self) -> int:
        return self.components * self.b

    @property
    def whole(self) -> bool:
        return self.lo == 0 and self.b == self.n_bits


def packbits_type(dtype: np.dtype[Any], config: PackBitsConfig) -> _Plan:
    """Check that ``dtype`` packs with ``config``; the plan for it.

    >>> packbits_type(np.dtype("<u2"), PackBitsConfig(first_bit=3, last_bit=5)).k
    3
    """
    row = zarr_type_for_dtype(dtype)
    if row is None:
        raise KilnError("TYPE", f"packbits: expected a numeric data type, found {dtype}")
    if row.kind == "c":
        components, component = 2, np.dtype(f"<f{row.dtype.itemsize // 2}")
    else:
        components, component = 1, row.dtype
    n_bits = _SUB_BYTE.get(row.name, 8 * component.itemsize)
    if row.name.startswith("float6_"):
        n_bits = 6
    lo = 0 if config.first_bit is None else config.first_bit
    hi = n_bits - 1 if config.last_bit is None else config.last_bit
    if hi >= n_bits or lo > hi:
        raise KilnError(
            "TYPE",
            f"packbits: {row.name} has {n_bits} bits per component (0-{n_bits - 1}): expected a "
            f"bit range inside it, found bits {lo}-{hi}",
        )
    return _Plan(row, components, n_bits, lo, hi - lo + 1, component)


def packbits_size(count: int, plan: _Plan, config: PackBitsConfig) -> int:
    """The encoded bytes of ``count`` elements.

    >>> config = PackBitsConfig("end_byte")
    >>> packbits_size(3, packbits_type(np.dtype("u1"), config), config)
    4
    """
    return -(-count * plan.k // 8) + (config.padding != "none")


def _storage(values: np.ndarray, plan: _Plan) -> np.ndarray:
    """The components' storage as unsigned little-endian integers, flat."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if plan.components == 2:
        flat = flat.view(plan.component)
    width = plan.component.itemsize
    if flat.dtype.byteorder == ">":
        flat = flat.astype(flat.dtype.newbyteorder("<"))
    return flat.view(np.dtype(f"<u{width}") if width > 1 else U8)


def _storage_error(row: ZarrType, storage: np.ndarray, index: int, n_bits: int) -> KilnError:
    found = int(storage[index])
    what = "0 or 1" if row.name == "bool" else f"{n_bits} bits (0x0-{hex((1 << n_bits) - 1)})"
    return KilnError(
        "TYPE",
        f"packbits: {row.name} element {index}: expected its storage byte to hold {what}, "
        f"found 0x{found:02x}",
        expected=(1 << n_bits) - 1,
        found=found,
        index=index,
    )


def encode_packbits(values: np.ndarray, config: PackBitsConfig) -> np.ndarray:
    """Pack an array (read in C order) into the ``packbits`` stream, as uint8.

    A sub-byte element whose storage byte carries bits above its ``N`` is TYPE
    (a bool byte other than 0 or 1 too): masking them would change the data.

    >>> encode_packbits(np.array([1, 2, 3], np.uint8), PackBitsConfig(first_bit=0, last_bit=3))
    array([33,  3], dtype=uint8)
    """
    plan = packbits_type(values.dtype, config)
    storage = _storage(values, plan)
    count = storage.size  # components
    size = -(-count * plan.b // 8)
    pad = 8 * size - count * plan.b
    out = np.empty(size + (config.padding != "none"), U8)
    body = out[1:] if config.padding == "start_byte" else out[:size]
    if config.padding != "none":
        out[0 if config.padding == "start_byte" else -1] = pad
    four = plan.whole and plan.n_bits == 4
    if plan.n_bits < 8 and not four:  # the nibble kernel checks as it packs, in one pass
        bad = nibbles.first_above(storage, (1 << plan.n_bits) - 1)
        if bad >= 0:
            raise _storage_error(plan.row, storage, bad, plan.n_bits)
    if four:
        bad = nibbles.pack_into(storage, body)
        if bad >= 0:
            raise _storage_error(plan.row, storage, bad, plan.n_bits)
    elif not plan.whole:
        _encode_range(storage, plan, body)
    elif plan.n_bits == 2:
        subbyte.pack2_into(storage, body)
    elif plan.n_bits == 6:
        subbyte.pack6_into(storage, body)
    elif plan.n_bits == 1:
        body[...] = np.packbits(storage, bitorder="little")
    else:
        body[...] = storage.view(U8)
    return out


def _encode_range(storage: np.ndarray, plan: _Plan, body: np.ndarray) -> None:
    width = storage.dtype.itemsize
    bits = np.unpackbits(storage.view(U8).reshape(-1, width), axis=1, bitorder="little")
    kept = bits[:, plan.lo : plan.lo + plan.b]
    body[...] = np.packbits(kept.reshape(-1), bitorder="little")


def _length_error(expected: int, found: int, count: int, plan: _Plan, pad_byte: bool) -> KilnError:
    rule = f"ceil({count} x {plan.k} / 8)" + (" + 1 padding byte" if pad_byte else "")
    return KilnError(
        "LENGTH",
        f"packbits: {plan.row.name} x {count}: expected {rule} = {expected} bytes, found {found} "
        f"({short_or_long(expected, found)})",
        expected=expected,
        found=found,
    )


def decode_packbits(
    data: np.ndarray, dtype: np.dtype[Any], count: int, config: PackBitsConfig
) -> np.ndarray:
    """Unpack ``count`` elements of ``dtype`` from the flat uint8 ``data``.

    >>> decode_packbits(np.array([0x21, 0x03], np.uint8), np.dtype("u1"), 3,
    ...                 PackBitsConfig(first_bit=0, last_bit=3)).tolist()
    [1, 2, 3]
    """
    plan = packbits_type(dtype, config)
    components = count * plan.components
    size = -(-components * plan.b // 8)
    pad = 8 * size - components * plan.b
    expected = size + (config.padding != "none")
    if data.size != expected:
        raise _length_error(expected, data.size, count, plan, config.padding != "none")
    if config.padding != "none":
        at = 0 if config.padding == "start_byte" else data.size - 1
        if int(data[at]) != pad:
            raise KilnError(
                "TYPE",
                f"packbits: {plan.row.name} x {count}: expected the padding byte ({config.padding}"
                f", byte offset {at}) to be {pad} (padding bits), found 0x{int(data[at]):02x}",
                expected=pad,
                found=int(data[at]),
            )
        data = data[1:] if config.padding == "start_byte" else data[:size]
    if pad and data[-1] >> (8 - pad):
        last = int(data[-1])
        raise KilnError(
            "TYPE",
            f"packbits: {plan.row.name} x {count}: expected the {pad} padding bits of the last "
            f"byte to be 0, found byte 0x{last:02x} at byte offset {size - 1}",
            expected=0,
            found=last,
            index=count,
        )
    width = plan.component.itemsize
    if not plan.whole:
        storage = _decode_range(data, plan, components, width)
    elif plan.n_bits >= 8:
        storage = data
    else:
        storage = pool.empty(components, U8, components)
        if plan.n_bits == 4:
            nibbles.unpack_into(data, storage, components)
        elif plan.n_bits == 2:
            subbyte.unpack2_into(data, storage, components)
        elif plan.n_bits == 6:
            subbyte.unpack6_into(data, storage, components)
        else:
            storage[...] = np.unpackbits(data, count=components, bitorder="little")
    out = storage.view(plan.component)  # the table's dtypes are little-endian
    return out.view(plan.row.dtype) if plan.components == 2 else out


def _decode_range(data: np.ndarray, plan: _Plan, components: int, width: int) -> np.ndarray:
    stream = np.unpackbits(data, count=components * plan.b, bitorder="little")
    bits = np.zeros((components, 8 * width), U8)
    bits[:, plan.lo : plan.lo + plan.b] = stream.reshape(components, plan.b)
    top = plan.lo + plan.b
    if plan.row.signed and top < plan.n_bits:  # sign-extend to N bits
        bits[:, top : plan.n_bits] = bits[:, top - 1 : top]
    return np.packbits(bits, axis=1, bitorder="little").reshape(-1)
