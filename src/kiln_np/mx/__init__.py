"""Block-scaled weights (OCP MX, NVFP4): decoded exactly, repacked bit for bit.

The formats
===========
A block-scaled tensor is a tensor of small elements plus one scale per block
of ``block_size`` consecutive elements along one axis; element ``i`` of block
``b`` stands for ``element[i] * scale[b]``.

Elements (Kiln codes): ``e2m1`` (18, OCP FP4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
their negatives), ``f8e4m3`` (5, OFP8 E4M3, max 448, 0x7f/0xff NaN),
``f8e5m2`` (6, OFP8 E5M2, max 57344, infinities), ``i8`` (8, OCP MXINT8: the
two's-complement byte times the implicit 2**-6, so -2.0 to 1.984375).

Scales: ``e8m0`` (19, OCP MX: byte ``s`` is ``2**(s - 127)``, 0x00 is
2**-127, 0xfe is 2**127, **0xff is NaN and makes its whole block NaN**); or
``f8e4m3`` (5, the NVFP4 style: the scale is the E4M3 value itself, so 0x7f
and 0xff are NaN and a set sign bit is a negative scale).  MXFP4 is e2m1 +
e8m0 per 32, MXFP8 f8e4m3/f8e5m2 + e8m0 per 32, MXINT8 i8 + e8m0 per 32,
NVFP4 e2m1 + f8e4m3 per 16.

Exactness
---------
:func:`dequantize` returns every element's exact product or raises.  float64
holds every product of these elements and scales exactly.  A narrower output
(float32, bfloat16, float16) is allowed when each product is exact in it: the
call raises a TYPE :class:`~kiln_np.KilnError` naming the first block (in the
scales' C order) holding an element whose exact product overflows or would
round, and suggests ``dtype=numpy.float64``.  Zeros and NaNs never raise
(whatever their scale); an infinite f8e5m2 element times a finite nonzero
scale is that infinity, exactly.  For MXFP4 into float32 only the scale bytes
0xfd and 0xfe can raise (6 x 2**126 and 2 x 2**127 overflow).  Every NaN in
the output is the output type's canonical quiet NaN (float32 ``0x7fc00000``):
NaN payloads and signs are not values and are not kept.

The layouts
===========
The same MX tensor travels in several layouts; every conversion here is a
pure bit move (no arithmetic), so converting back gives the original bytes.
:data:`LAYOUTS` holds this table as data (``docs/mx.md`` shows it, and a test
checks both against the code):

========== ====================== ============================ ===== ========== ===========
layout     container              nibble order                 block scale      0xff scale
========== ====================== ============================ ===== ========== ===========
kiln       e2m1 + e8m0/f8e4m3     element 2k low, 2k+1 high    any   e8m0       NaN block
ggml.mxfp4 17-byte blocks         byte j: j low, j+16 high     32    e8m0 first NaN block
ggml.nvfp4 36-byte blocks of 64   8-byte group: j low, j+8 hi  16    f8e4m3 x 4 NaN block
gpt-oss    _blocks + _scales (u8) element 2k low, 2k+1 high    32    e8m0 bytes NaN block
onnx       FLOAT4E2M1/FLOAT8E8M0  element 2k low, 2k+1 high    attr  e8m0       NaN block
========== ====================== ============================ ===== ========== ===========

What the format's own tool makes of a 0xff scale byte: gguf-py reads a
``ggml.mxfp4`` 0xff as 2**128 (its helper returns the finite half, 2**127)
and an NVFP4 0xff as unsigned E4M3 480 (halved to 240 against its doubled
value table); gpt-oss's ``ldexp(x, 255 - 127)`` gives inf (NaN for a zero
element); ONNX defines FLOAT8E8M0 0xff as NaN.  kiln_np makes the block NaN
in every layout (an NVFP4 scale of 0xff or 0x7f is an E4M3 NaN).

- **kiln**: an e2m1 payload (code 18, two elements per byte, the earlier in
  the low nibble) and an e8m0 payload (code 19) or f8e4m3 payload (code 5) of
  scales; shapes ``(..., n)`` and ``(..., ceil(n / block_size))``.
- **ggml.mxfp4** (GGML type 39; Kiln opaque code ``0x4727``,
  ``Layout("ggml.mxfp4", 17)``): per 32 elements, the e8m0 scale byte then
  16 bytes; byte ``j`` holds element ``j`` in its low nibble and element
  ``j + 16`` in its high nibble.  gguf-py's ``e8m0_to_fp32_half`` reads 0xff
  as the finite 2**127 (half of 2**128).
- **ggml.nvfp4** (GGML type 40; ``0x4728``, ``Layout("ggml.nvfp4", 36)``):
  per 64 elements, 4 scale bytes (one per 16 elements, read as f8e4m3), then
  4 groups of 8 bytes; byte ``j`` of group ``g`` holds element ``16g + j``
  low and ``16g + 8 + j`` high.  gguf-py reads the scale as *unsigned* E4M3:
  it ignores the sign bit and reads 0x7f as 0 (kiln_np: NaN).
- **gpt-oss** (OpenAI's checkpoints): ``*_blocks`` uint8 ``(..., nblocks,
  16)`` holding exactly Kiln's e2m1 bytes, and ``*_scales`` uint8 ``(...,
  nblocks)`` holding e8m0 bytes (gpt-oss computes ``ldexp(x, s - 127)``, which
  overflows to inf for 0xff).
- **onnx**: ``FLOAT4E2M1`` and ``FLOAT8E8M0`` tensors hold Kiln's bytes; the
  block size and axis are ``DequantizeLinear``'s attributes.

Quantization rules
==================
``rule="ocp"`` (OCP MX v1.0, section 6.3): shared exponent
``floor(log2(max |x|)) - emax`` (emax 2 for e2m1, 8 for f8e4m3, 15 for
f8e5m2), clamped to [-127, 127] (an all-zero block gets 2**-127); elements
``x / 2**exponent`` rounded to nearest, ties to even, saturating at the
element's largest finite value.  ``rule="ggml"`` (e2m1 only): the bytes of
gguf-py's (ggml's Python) MXFP4 ``quantize``: the input is rounded to float32
first, the exponent is the floor of the float32-rounded ``log2`` of the
float32 block max (so 1023.99994 gives 10), elements are the nearest value
with ties toward zero, and zero is +0.  A block holding a NaN or an infinity
gets the NaN scale 0xff and +0 elements under every rule (the OCP reference
code, microxcaling, also gives such a block a NaN scale).  ``rule="ceil"``
picks the smallest exponent that does not saturate, exactly.
"""

from .exact import dequantize
from .layouts import (
    LAYOUTS,
    MXLayout,
    dequantize_gpt_oss,
    dequantize_onnx,
    from_ggml,
    from_gpt_oss,
    from_onnx,
    to_ggml,
    to_gpt_oss,
    to_onnx,
)
from .quantize import quantize

__all__ = [
    "LAYOUTS",
    "MXLayout",
    "dequantize",
    "dequantize_gpt_oss",
    "dequantize_onnx",
    "from_ggml",
    "from_gpt_oss",
    "from_onnx",
    "quantize",
    "to_ggml",
    "to_gpt_oss",
    "to_onnx",
]
