"""Kiln payloads in Zarr v3 stores (optional extra: ``pip install 'kiln-np[zarr]'``).

Two halves:

- **zarr-python plugins** (``kiln_np.zarr._plugin``, imported by zarr-python
  through kiln_np's entry points, so ``zarr.open_group`` reads these arrays in
  a process that never imports kiln_np): the zarr-extensions data types of
  every Kiln code and foreign type that has one (table below) and the
  ``packbits`` array -> bytes codec.  :data:`PackBits` and :data:`DATA_TYPES`
  load them (and zarr) on first use.
- **Weights as a group** (this package, no zarr needed): :func:`save_zarr` writes
  any mapping of tensors (a :class:`~kiln_np.Weights` of any format) as a Zarr
  v3 group, :func:`open_zarr` opens one as ``Weights``;
  ``kiln_np.open_weights`` recognises a group and ``save_weights(...,
  format="zarr")`` writes one.

Data types
----------
:data:`ZARR_TYPES` is the table, one row per type: the ``data_type`` name, the
numpy/ml_dtypes type, bits, the Kiln code (a closed code or a foreign type's
opaque code and layout, or none) and the bits ``"NaN"`` stands for; docs/interop.md
shows it (a test checks that copy).  zarr's core types are rows too; kiln_np
registers the rest: ``bfloat16``, ``float8_e4m3fn``, ``float8_e5m2``,
``float8_e8m0fnu``, ``int4``, ``uint4``, ``float4_e2m1fn`` (Kiln's closed codes),
``float8_e4m3fnuz``, ``float8_e5m2fnuz``, ``int2``, ``uint2``, ``float6_e2m3fn``,
``float6_e3m2fn`` (Kiln's foreign types) and ``float8_e4m3``, ``float8_e3m4``,
``float8_e4m3b11fnuz`` (no Kiln element: zarr reads them, a ``Weights`` cannot
hold them).

``float8_e4m3fn`` (Kiln's f8e4m3, OCP E4M3, torch's ``float8_e4m3fn``) is not yet in
the registry: its name is the one the registry's original proposal listed
(zarr-extensions pull request 3) and ml_dtypes, LLVM and zarrs use.  Should the
registry adopt another name, that name becomes this row's, and the reader keeps
accepting ``float8_e4m3fn`` as an alias.  ``float8_e4m3`` is a different type
(IEEE-like, with infinities): kiln_np never writes Kiln's f8e4m3 as it.

Fill values keep their bits: a NaN is written as its hex bits (``"0x7fc1"``),
infinities by name, other floats as JSON numbers (``kiln_np.zarr._values``).

The group kiln_np writes
------------------------
``zarr.json`` of the root group holds ``attributes.kiln_np``: ``format``
(``"kiln-np-zarr/1"``), ``tensors`` (the names, in order), ``metadata``
(typed, as a Kiln manifest's) and ``source_format``.  A tensor named ``a/b``
is the array ``b`` of the group ``a``.  Each array:

- ``data_type`` from the table; ``attributes.kiln_np`` holds the Kiln ``code``
  (and ``layout``, ``block_size`` for an opaque one).  An opaque tensor with
  no Zarr type (GGML blocks, ...) is ``uint8`` with one more axis, the block's
  bytes.
- array -> bytes: ``packbits`` (``padding_encoding`` ``"none"``) for the
  4-bit types, whose packed stream *is* the Kiln payload (first element in the
  low nibble); ``bytes`` (little-endian) for everything else (the 2- and 6-bit
  types one byte each, as Kiln stores them).  No compression.
- chunking: a tensor of at most :data:`CHUNK_BYTES` (16 MiB) is one chunk,
  ``c/0/.../0``.  A larger one is one shard (``sharding_indexed``, the same
  file name) of row chunks: ``r`` leading rows each, ``r`` the largest divisor
  of the first axis whose chunk is whole bytes, at most 16 MiB and at least
  64 KiB (a tensor with no such ``r`` stays one chunk).  The inner chunks lie
  back to back, so the file's first ``byte_length`` bytes are the payload; the
  index (``bytes`` little-endian, no checksum) follows.  Reading also maps a
  shard zarr-python wrote so, its index followed by a ``crc32c`` (checked).

So every tensor is one file whose first bytes are its Kiln payload: writing is
a copy, and :func:`open_zarr` maps the file (zero-copy) after checking the
document, the file size and the shard index.  Other layouts (compression,
many chunk files, missing chunks) are read whole through zarr-python, within a
bound.  No path of a group may be a symlink (TYPE).

``import kiln_np`` never imports zarr; neither does ``import kiln_np.zarr``
until :data:`PackBits` or :data:`DATA_TYPES` is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._group import ZARR_JSON, open_zarr, save_zarr, save_zarr_paths, zarr_group_path
from ._layout import CHUNK_BYTES
from ._packbits import PackBitsConfig, decode_packbits, encode_packbits, packbits_config
from ._types import ZARR_TYPES, ZARR_TYPES_BY_NAME, ZarrType

if TYPE_CHECKING:
    from ._plugin import DATA_TYPES, PackBits

__all__ = [
    "CHUNK_BYTES",
    "DATA_TYPES",
    "ZARR_JSON",
    "ZARR_TYPES",
    "ZARR_TYPES_BY_NAME",
    "PackBits",
    "PackBitsConfig",
    "ZarrType",
    "decode_packbits",
    "encode_packbits",
    "open_zarr",
    "packbits_config",
    "save_zarr",
    "save_zarr_paths",
    "zarr_group_path",
]

_PLUGIN = frozenset({"DATA_TYPES", "PackBits"})

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _PLUGIN:
            raise AttributeError(f"module 'kiln_np.zarr' has no attribute {name!r}")
        value = getattr(importlib.import_module("._plugin", __name__), name)
        globals()[name] = value
        return value
