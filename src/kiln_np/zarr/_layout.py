"""The ``zarr.json`` of one array: written as kiln_np lays a tensor out, and read
(untrusted) into a checked :class:`ArrayLayout` (no zarr here).

numpy's ``read_array_header`` is the model: facts from a file in, a checked
description out.  Every value is checked for its JSON type before it is used;
the shape then goes through ``payload_info`` (SHAPE for anything absurd), and
sizes are compared with the chunk file before anything is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo
from kiln_np._core.table import Layout

from ._packbits import PackBitsConfig, packbits_config, packbits_type
from ._types import ZARR_TYPES_BY_NAME, ZarrType, zarr_type_for_code
from ._values import fill_to_json

__all__ = [
    "CHUNK_BYTES",
    "MIN_INNER_BYTES",
    "ArrayLayout",
    "array_document",
    "chunk_rows",
    "group_document",
    "parse_array",
]

CHUNK_BYTES = 16 << 20
"""A tensor up to this many bytes is one chunk; a larger one is one shard of row
chunks of at most this many bytes."""
MIN_INNER_BYTES = 64 << 10
"""The smallest inner chunk kiln_np writes (smaller ones would make the shard
index a large part of the file): below it, a tensor stays one chunk."""

_BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
_PACKBITS_NONE = {"name": "packbits", "configuration": {"padding_encoding": "none"}}


def group_document(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A group's ``zarr.json``.

    >>> group_document({})
    {'zarr_format': 3, 'node_type': 'group', 'attributes': {}}
    """
    return {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes)}


def _element(info: PayloadInfo) -> tuple[ZarrType, tuple[int, ...], dict[str, Any]]:
    """The Zarr type, array shape and ``kiln_np`` attributes of a tensor."""
    row = zarr_type_for_code(info.code)
    attrs: dict[str, Any] = {"code": int(info.code)}
    if info.layout is not None:
        attrs.update(layout=info.layout.name, block_size=info.layout.block_size)
    if row is not None and (row.layout is None or row.layout == info.layout):
        return row, info.shape, attrs
    # opaque blocks as bytes: one more axis, the block's
    assert info.layout is not None  # every closed code has a row
    return ZARR_TYPES_BY_NAME["uint8"], (*info.shape, info.layout.block_size), attrs


def _bits(row: ZarrType) -> int:
    return 4 if row.bits == 4 else 8 * row.dtype.itemsize


def chunk_rows(info: PayloadInfo) -> int | None:
    """The rows of an inner chunk when the tensor is written as a shard, else None.

    The largest divisor ``r`` of the first axis whose chunk is whole bytes, at
    most :data:`CHUNK_BYTES` and at least :data:`MIN_INNER_BYTES`: the shard's
    inner chunks, back to back, are then the Kiln payload.

    >>> from kiln_np import payload_info
    >>> chunk_rows(payload_info("bf16", (4096, 4096))), chunk_rows(payload_info("bf16", (64,)))
    (2048, None)
    """
    row, shape, _ = _element(info)
    if not shape or info.byte_length <= CHUNK_BYTES:
        return None
    row_bits = math.prod(shape[1:]) * _bits(row)
    best = None
    for small in range(1, math.isqrt(shape[0]) + 1):  # header arithmetic, not tensor data
        if shape[0] % small:
            continue
        for r in (small, shape[0] // small):
            chunk_bits = r * row_bits
            fits = MIN_INNER_BYTES * 8 <= chunk_bits <= CHUNK_BYTES * 8
            if fits and chunk_bits % 8 == 0 and r < shape[0] and (best is None or r > best):
                best = r
    return best


def array_document(info: PayloadInfo, rows: int | None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The ``zarr.json`` kiln_np writes for a tensor, and its one chunk file's key.

    >>> from kiln_np import payload_info
    >>> doc, key = array_document(payload_info("u4", (3,)), None)
    >>> doc["data_type"], doc["codecs"], key
    ('uint4', [{'name': 'packbits', 'configuration': {'padding_encoding': 'none'}}], ('c', '0'))
    """
    row, shape, attrs = _element(info)
    if row.bits == 4:
        codec: dict[str, Any] = _PACKBITS_NONE
    elif row.dtype.itemsize > 1:
        codec = _BYTES_LE
    else:
        codec = {"name": "bytes"}
    codecs = [codec]
    if rows is not None:
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [rows, *shape[1:]],
                    "codecs": [codec],
                    "index_codecs": [_BYTES_LE],
                    "index_location": "end",
                },
            }
        ]
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": row.name,
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": [max(1, s) for s in shape]},
        },
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_to_json(row, row.dtype.type(0)),
        "codecs": codecs,
        "attributes": {"kiln_np": attrs},
    }
    return doc, ("c", *("0" for _ in shape))


@dataclass(frozen=True)
class ArrayLayout:
    """What an array's ``zarr.json`` says, checked.

    Attributes
    ----------
    code, layout, kiln_shape
        The Kiln description's facts (``payload_info`` checks them next).
    shape : tuple of int
        The Zarr array's shape (an opaque tensor's has the block axis).
    dtype : numpy.dtype
        The Zarr element as numpy holds it.
    row_name : str
        The ``data_type`` name.
    chunk_key : tuple of str
        The path parts of chunk ``(0, ..., 0)`` under the array's folder.
    direct : bool
        One chunk file holds the whole array (one chunk, or kiln_np's shard).
    mapped : bool
        That file's first bytes are the Kiln payload as they are.
    packbits : PackBitsConfig or None
        The array -> bytes codec's configuration, when it is packbits.
    index_bytes : int
        The shard index after the payload (0 without sharding).
    """

    code: int
    layout: Layout | None
    kiln_shape: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    row_name: str
    chunk_key: tuple[str, ...]
    direct: bool
    mapped: bool
    packbits: PackBitsConfig | None
    index_bytes: int


def _bad(where: str, what: str, found: object) -> KilnError:
    return KilnError("TYPE", f"{where}expected {what}, found {show_value(found)}")


def _ints(value: object, where: str, what: str, minimum: int) -> tuple[int, ...]:
    if isinstance(value, list) and all(type(v) is int and v >= minimum for v in value):
        return tuple(value)
    raise _bad(where, f"{what} as a list of integers >= {minimum}", value)


def _named(value: object, where: str, what: str) -> tuple[str, Mapping[str, Any]]:
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        config = value.get("configuration", {})
        if config is None:
            config = {}
        if isinstance(config, dict) and set(value) <= {"name", "configuration", "must_understand"}:
            return value["name"], config
    raise _bad(where, f'{what} as a name or {{"name", "configuration"}}', value)


def _array_codec(
    codec: object, row: ZarrType, where: str
) -> tuple[bool, PackBitsConfig | None] | None:
    """(mapped, packbits) for an array -> bytes codec kiln_np reads itself, else None."""
    name, config = _named(codec, where, "a codec")
    if name == "bytes":
        endian = config.get("endian")
        little = endian == "little" or (endian is None and row.dtype.itemsize == 1)
        return (True, None) if set(config) <= {"endian"} and little and row.bits != 4 else None
    if name == "packbits":
        pb = packbits_config(config)
        plan = packbits_type(row.dtype, pb)
        # the Kiln payload as it is: no padding byte, every bit, as wide as Kiln's element
        return plan.whole and pb.padding == "none" and plan.k == _bits(row), pb
    return None


def _element_of(
    doc: Mapping[str, Any], shape: tuple[int, ...], where: str
) -> tuple[ZarrType, int, Layout | None, tuple[int, ...]]:
    name, config = _named(doc.get("data_type"), where, "data_type")
    row = ZARR_TYPES_BY_NAME.get(name)
    if row is None or config:
        raise _bad(where, f"a data_type among {', '.join(ZARR_TYPES_BY_NAME)}", name)
    attrs = doc.get("attributes", {})
    ours = attrs.get("kiln_np") if isinstance(attrs, dict) else None
    if isinstance(ours, dict) and "layout" in ours and (row.layout is None):
        code, layout_name, block = ours.get("code"), ours.get("layout"), ours.get("block_size")
        if row.name != "uint8" or not shape or shape[-1] != block:
            raise _bad(
                where,
                f"an opaque tensor as uint8 with a last axis of block_size {block}",
                f"{row.name} shape {shape}",
            )
        try:
            layout = Layout(layout_name, block)  # type: ignore[arg-type]
        except KilnError as exc:
            raise exc.prefixed(where) from None
        return row, code, layout, shape[:-1]  # type: ignore[return-value]
    if row.code is None:
        raise KilnError(
            "TYPE",
            f"{where}expected a data type with a Kiln code, found {row.name} (zarr-python "
            "reads it; a Weights cannot hold it)",
        )
    if isinstance(ours, dict) and ours.get("code", row.code) != row.code:
        raise _bad(where, f"kiln_np code {row.code} for {row.name}", ours.get("code"))
    return row, row.code, row.layout, shape


def parse_array(doc: object, where: str) -> ArrayLayout:
    """Check an array's ``zarr.json`` (untrusted).

    >>> from kiln_np import payload_info
    >>> doc, _ = array_document(payload_info("bf16", (2, 3)), None)
    >>> a = parse_array(doc, "")
    >>> a.code, a.shape, a.direct, a.mapped
    (4, (2, 3), True, True)
    """
    if not (
        isinstance(doc, dict) and doc.get("zarr_format") == 3 and doc.get("node_type") == "array"
    ):
        raise _bad(where, 'a Zarr v3 array ("zarr_format": 3, "node_type": "array")', doc)
    shape = _ints(doc.get("shape"), where, "shape", 0)
    row, code, layout, kiln_shape = _element_of(doc, shape, where)
    grid, grid_config = _named(doc.get("chunk_grid"), where, "chunk_grid")
    chunks = (
        _ints(grid_config.get("chunk_shape"), where, "chunk_shape", 1)
        if grid == "regular"
        else None
    )
    if chunks is not None and len(chunks) != len(shape):
        raise _bad(where, f"a chunk_shape of {len(shape)} dimensions", list(chunks))
    encoding, enc_config = _named(
        doc.get("chunk_key_encoding", "default"), where, "chunk_key_encoding"
    )
    separator = enc_config.get("separator", "/")
    coords = ["0"] * len(shape)
    if encoding == "default" and separator in ("/", "."):
        key: tuple[str, ...] = ("c", *coords) if separator == "/" else (".".join(["c", *coords]),)
    else:
        key = ()
    codecs = doc.get("codecs")
    if not isinstance(codecs, list) or not codecs:
        raise _bad(where, "codecs as a non-empty list", codecs)
    transformers = doc.get("storage_transformers", [])
    direct = mapped = False
    packbits: PackBitsConfig | None = None
    index_bytes = 0
    whole = chunks == tuple(max(1, s) for s in shape)
    if key and whole and not transformers and len(codecs) == 1:
        name, config = _named(codecs[0], where, "a codec")
        if name == "sharding_indexed":
            found = _shard(config, row, shape, where)
            if found is not None:
                direct, (mapped, packbits, index_bytes) = True, found
        else:
            inner = _array_codec(codecs[0], row, where)
            if inner is not None:
                direct, (mapped, packbits) = True, inner
    return ArrayLayout(
        code,
        layout,
        kiln_shape,
        shape,
        row.dtype,
        row.name,
        key,
        direct,
        mapped,
        packbits,
        index_bytes,
    )


def _shard(
    config: Mapping[str, Any], row: ZarrType, shape: tuple[int, ...], where: str
) -> tuple[bool, PackBitsConfig | None, int] | None:
    """kiln_np's shard: row chunks back to back, the index (little-endian, maybe
    with a crc32c) at the end; None for any other."""
    inner = _ints(config.get("chunk_shape"), where, "the shard's chunk_shape", 1)
    codecs, index_codecs = config.get("codecs"), config.get("index_codecs")
    if not (
        shape and len(inner) == len(shape) and inner[1:] == shape[1:] and shape[0] % inner[0] == 0
    ):
        return None
    if not (isinstance(codecs, list) and len(codecs) == 1 and isinstance(index_codecs, list)):
        return None
    names = [_named(c, where, "an index codec") for c in index_codecs]
    crc = names[1:] == [("crc32c", {})]
    if not (names and names[0] == ("bytes", {"endian": "little"}) and (len(names) == 1 or crc)):
        return None
    if config.get("index_location", "end") != "end":
        return None
    found = _array_codec(codecs[0], row, where)
    if found is None or not found[0]:
        return None
    chunk_bits = math.prod(inner) * _bits(row)
    if chunk_bits % 8:
        return None
    n = shape[0] // inner[0]
    return True, found[1], 16 * n + 4 * crc
