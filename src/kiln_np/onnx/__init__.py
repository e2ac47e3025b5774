"""ONNX tensor data types <-> numpy arrays and Kiln payloads, bit for bit.

The ONNX data-type table
========================

A ``TensorProto`` has a ``data_type`` from ``TensorProto.DataType``; 1-28 are
tensor types.  0 (UNDEFINED) and anything above 28 are TYPE errors.  The
values live either in ``raw_data`` (little-endian, C order, no header) or in
the one typed field the type names:

===== ============== ==== ============= ======================= ==============================
value name           bits typed field   numpy dtype             Kiln
===== ============== ==== ============= ======================= ==============================
1     FLOAT          32   float_data    float32                 2 (f32)
2     UINT8          8    int32_data    uint8                   9 (u8)
3     INT8           8    int32_data    int8                    8 (i8)
4     UINT16         16   int32_data    uint16                  11 (u16)
5     INT16          16   int32_data    int16                   10 (i16)
6     INT32          32   int32_data    int32                   12 (i32)
7     INT64          64   int64_data    int64                   14 (i64)
8     STRING         --   string_data   object (str)            none
9     BOOL           8    int32_data    bool                    7 (bool)
10    FLOAT16        16   int32_data    float16                 3 (f16)
11    DOUBLE         64   double_data   float64                 1 (f64)
12    UINT32         32   uint64_data   uint32                  13 (u32)
13    UINT64         64   uint64_data   uint64                  15 (u64)
14    COMPLEX64      64   float_data    complex64               opaque 0x4f0e onnx.complex64/8
15    COMPLEX128     128  double_data   complex128              opaque 0x4f0f onnx.complex128/16
16    BFLOAT16       16   int32_data    bfloat16                4 (bf16)
17    FLOAT8E4M3FN   8    int32_data    float8_e4m3fn           5 (f8e4m3)
18    FLOAT8E4M3FNUZ 8    int32_data    float8_e4m3fnuz         opaque 0x4f12 onnx.float8e4m3fnuz/1
19    FLOAT8E5M2     8    int32_data    float8_e5m2             6 (f8e5m2)
20    FLOAT8E5M2FNUZ 8    int32_data    float8_e5m2fnuz         opaque 0x4f14 onnx.float8e5m2fnuz/1
21    UINT4          4    int32_data    uint4                   17 (u4)
22    INT4           4    int32_data    int4                    16 (i4)
23    FLOAT4E2M1     4    int32_data    float4_e2m1fn           18 (e2m1)
24    FLOAT8E8M0     8    int32_data    float8_e8m0fnu          19 (e8m0)
25    UINT2          2    int32_data    uint2                   opaque 0x4f19 onnx.uint2/1
26    INT2           2    int32_data    int2                    opaque 0x4f1a onnx.int2/1
27    FLOAT6E2M3     6    int32_data    float6_e2m3fn           opaque 0x4f1b onnx.float6e2m3/1
28    FLOAT6E3M2     6    int32_data    float6_e3m2fn           opaque 0x4f1c onnx.float6e3m2/1
===== ============== ==== ============= ======================= ==============================

raw_data
--------
- ``n`` elements take exactly ``ceil(n * bits / 8)`` bytes: one byte short or
  long is LENGTH.  Multi-byte elements are little-endian; complex numbers are
  (real, imaginary) pairs.
- 4-bit: element ``2k`` is the low nibble of byte ``k``.  2-bit: four per
  byte, ``x0 | x1<<2 | x2<<4 | x3<<6``.  6-bit: one bit stream, lowest bit
  first, four elements in three bytes.  The bits after the last element MUST
  be 0 (TYPE): Kiln requires it, and a Kiln round trip could not keep them.
- BOOL bytes MUST be 0 or 1 (TYPE).  STRING never uses ``raw_data``.

Typed fields
------------
- 8- and 16-bit types: one integer per element; the integer types hold their
  value (INT16 -32768..32767), the float types and BOOL their bit pattern
  (FLOAT16 0..0xffff, BOOL 0..1).
- 4-bit and 2-bit types: each integer is one packed byte (0..0xff), laid out
  as in ``raw_data``.  6-bit types: one element per integer, bits 0-5.
- COMPLEX64/128: two values per element in ``float_data``/``double_data``.
- A value that does not fit is TYPE (ONNX itself truncates it silently).

Kiln
----
The 19 types Kiln has travel under their Kiln codes with the same bytes.  The
eight ONNX-only types travel as opaque Kiln payloads with code ``0x4f00 +
data_type`` and layout ``onnx.<name>``, one block per element: 8 or 16 bytes
for complex, 1 byte for the FNUZ float8s, and, for the 2- and 6-bit types,
one byte per element holding the element's bits in its low bits (the other
bits 0).  These codes and layouts are kiln_np's registry of foreign element
types, shared with every other format adapter (a safetensors ``C64`` tensor is
the same payload as an ONNX COMPLEX64 one).  STRING has no Kiln form.
ONNX -> Kiln -> ONNX is byte-identical.

External data
-------------
``location`` is a relative path inside the model's directory (``base_dir``):
absolute paths, ``..`` and symlinks that lead out are TYPE.  ``offset`` and
``length`` are decimal integers in 0..2**63-1; ``offset + length`` must lie
inside the file (LENGTH).  Entries that are not UTF-8 text are TYPE.  Only
the pages that hold the tensor are mapped, read-only.

Modules
-------
``_types`` (the table), ``_raw`` (``raw_data`` and the Kiln bridge),
``_fields`` (typed fields and STRING), ``_proto`` (protos, models, external
data), ``_weights`` (a model file
as ``kiln_np.Weights``, for ``kiln_np.open_weights``).  The functions that take
bytes and field values need only numpy and ml_dtypes; the ones that take
``onnx.TensorProto``/``ModelProto`` import ``onnx`` when called
(``pip install kiln-np[onnx]``).
"""

from ._fields import decode_field
from ._proto import from_numpy, model_to_kiln, to_numpy
from ._raw import decode_raw, encode_raw, from_kiln, to_kiln
from ._types import (
    DATA_TYPES,
    OPAQUE_BASE,
    DataType,
    OnnxType,
    data_type_for_dtype,
    data_type_info,
    dtype_for_data_type,
)

__all__ = [
    "DATA_TYPES",
    "OPAQUE_BASE",
    "DataType",
    "OnnxType",
    "data_type_for_dtype",
    "data_type_info",
    "decode_field",
    "decode_raw",
    "dtype_for_data_type",
    "encode_raw",
    "from_kiln",
    "from_numpy",
    "model_to_kiln",
    "to_kiln",
    "to_numpy",
]
