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
<!-- zarr-types: generated from ZARR_TYPES; tests/formats/test_zarr.py checks it -->

=================== ================= ===== ==================== =================
``data_type``       numpy / ml_dtypes bits  Kiln                 fill ``"NaN"``
=================== ================= ===== ==================== =================
float64             float64           64    1 (f64)              0x7ff8000000000000
float32             float32           32    2 (f32)              0x7fc00000
float16             float16           16    3 (f16)              0x7e00
bool                bool              8     7 (bool)             -
int8                int8              8     8 (i8)               -
uint8               uint8             8     9 (u8)               -
int16               int16             16    10 (i16)             -
uint16              uint16            16    11 (u16)             -
int32               int32             32    12 (i32)             -
uint32              uint32            32    13 (u32)             -
int64               int64             64    14 (i64)             -
uint64              uint64            64    15 (u64)             -
complex64           complex64         64    0x4f0e onnx.complex64  -
complex128          complex128        128   0x4f0f onnx.complex128 -
bfloat16            bfloat16          16    4 (bf16)             0x7fc0
float8_e4m3fn       float8_e4m3fn     8     5 (f8e4m3)           0x7f
float8_e5m2         float8_e5m2       8     6 (f8e5m2)           0x7e
float8_e8m0fnu      float8_e8m0fnu    8     19 (e8m0)            0xff
int4                int4              4     16 (i4)              -
uint4               uint4             4     17 (u4)              -
float4_e2m1fn       float4_e2m1fn     4     18 (e2m1)            -
float8_e4m3fnuz     float8_e4m3fnuz   8     0x4f12 onnx.float8e4m3fnuz 0x80
float8_e5m2fnuz     float8_e5m2fnuz   8     0x4f14 onnx.float8e5m2fnuz 0x80
int2                int2              2     0x4f1a onnx.int2     -
uint2               uint2             2     0x4f19 onnx.uint2    -
float6_e2m3fn       float6_e2m3fn     6     0x4f1b onnx.float6e2m3 -
float6_e3m2fn       float6_e3m2fn     6     0x4f1c onnx.float6e3m2 -
float8_e4m3         float8_e4m3       8     (none)               0x7c
float8_e3m4         float8_e3m4       8     (none)               0x78
float8_e4m3b11fnuz  float8_e4m3b11fnuz 8    (none)               0x80
=================== ================= ===== ==================== =================

The first 14 are zarr's core types; kiln_np registers the rest.  ``float8_e4m3fn``
(Kiln's f8e4m3, OCP E4M3, torch's ``float8_e4m3fn``) is not yet in the registry:
its name is the one the registry's original proposal listed (zarr-extensions
pull request 3) and ml_dtypes, LLVM and zarrs use.  Should the registry adopt
another name, that name becomes this row's, and the reader keeps accepting
``float8_e4m3fn`` as an alias.  ``float8_e4m3`` is a different type (IEEE-like,
with infinities): kiln_np never writes Kiln's f8e4m3 as it.

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
  index (``bytes`` little-endian, no checksum) follows.

So every tensor is one file whose first bytes are its Kiln payload: writing is
a copy, and :func:`open_zarr` maps the file (zero-copy) after checking the
document, the file size and the shard index.  Other layouts (compression,
many chunk files, missing chunks) are read whole through zarr-python.

``import kiln_np`` never imports zarr; neither does ``import kiln_np.zarr``
until :data:`PackBits` or :data:`DATA_TYPES` is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._formats import open_zarr_format, save_zarr_format, save_zarr_format_paths
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
    "open_zarr_format",
    "packbits_config",
    "save_zarr",
    "save_zarr_format",
    "save_zarr_format_paths",
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
