"""Decoders of GGML's one-scale block types, in numpy: the reference the compiled
kernels are tested against, and the fallback where they are not built.

Each decoder takes blocks as rows of uint8 (``(n, block bytes)``, C order) and
returns their float32 values (``(n, block elements)``), computing each value
with ggml's ``dequantize_row_*`` operations in ggml's order (float32, no fused
multiply-add), so the bits are ggml's.  ``scales`` gives a block's scale
fields for statistics, by name.

The types and their blocks (``ggml-common.h``; byte offsets, little-endian):

======  =====================================================  ==========================
type    block                                                  value
======  =====================================================  ==========================
Q4_0    f16 d, qs[16] (nibbles: low = 0..15, high = 16..31)    (q - 8) * d
Q4_1    f16 d, f16 m, qs[16]                                   q * d + m
Q5_0    f16 d, u32 qh (bit i: element i's 5th bit), qs[16]     (q - 16) * d
Q5_1    f16 d, f16 m, u32 qh, qs[16]                           q * d + m
Q8_0    f16 d, int8 qs[32]                                     q * d
Q8_1    f16 d, f16 s (= d * sum(qs)), int8 qs[32]              q * d
Q1_0    f16 d, qs[16] (bit i of the block: element i)          d if the bit else -d
Q2_0    f16 d, qs[16] (2 bits per element, low bits first)     (q - 1) * d
TQ1_0   qs[48] and qh[4] (base-3 digits), f16 d                (t - 1) * d
TQ2_0   qs[64] (2-bit q, see :func:`_tq2_0`), f16 d            (q - 1) * d
MXFP4   E8M0 e, qs[16] (E2M1 nibbles as Q4_0)                  kvalues_fp4[q] * e / 2
NVFP4   UE4M3 d[4], qs[32] (4 sub-blocks of 16 as MXFP4's)     kvalues_fp4[q] * d[s] / 2
IQ4_NL  f16 d, qs[16] (as Q4_0)                                d * kvalues_iq4nl[q]
IQ4_XS  f16 d, u16 scales_h, scales_l[4], qs[128]              (d * (ls - 32)) * kvalues_iq4nl[q]
======  =====================================================  ==========================

Q8_1 has no ggml decoder (ggml keeps it as a dot-product operand); it is
decoded as its block definition says, with Q8_0's arithmetic.  MXFP4 and NVFP4
have GGUF's meaning, which is ggml's and not OCP's: ggml's E2M1 table is doubled
(:data:`KVALUES_FP4`) and its scales halved, an E8M0 byte of 0xFF is 2**127
(:data:`E8M0_HALF`) and the UE4M3 scale ignores its sign bit but for 0x7F,
which is 0 (:data:`UE4M3_HALF`).

>>> q8_0 = DECODERS["Q8_0"]
>>> block = np.array([[0x00, 0x38] + [2, 0xFE] * 16], np.uint8)  # d = 0.5; q = 2, -2, ...
>>> q8_0.values(block)[0, :3].tolist(), q8_0.scales(block)["d"].tolist()
([1.0, -1.0, 1.0], [0.5])
>>> iq4_xs = DECODERS["IQ4_XS"]
>>> block = np.zeros((1, 136), np.uint8)
>>> block[0, :4] = [0x00, 0x3C, 0xFF, 0xFF]  # d = 1, the scales' high bits all 3
>>> iq4_xs.scales(block)["sub-block scales"].tolist()
[[16, 16, 16, 16, 16, 16, 16, 16]]
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .blocks import field_f16
from .decoder import Decoder

__all__ = ["DECODERS", "E8M0_HALF", "KVALUES_FP4", "KVALUES_IQ4NL", "UE4M3_HALF"]

KVALUES_IQ4NL = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8
)
"""IQ4_NL's and IQ4_XS's 16 levels: ggml's ``kvalues_iq4nl`` (``ggml-common.h``),
the same numbers as ``ggml_basic.c``'s ``KVALUES_IQ4NL`` and gguf-py's
``IQ4_NL.kvalues`` (``tests/quants/test_ggml_basic.py`` checks all three)."""

KVALUES_FP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
"""MXFP4's and NVFP4's E2M1 levels, doubled so they are integers: ggml's
``kvalues_fp4`` (``ggml-common.h``), i.e. nibble ``s eem`` is
``(-1)**s * 2 * e2m1``.  Its scales are halved to match (:data:`E8M0_HALF`,
:data:`UE4M3_HALF`)."""


def _e8m0_half() -> np.ndarray:
    # ggml_e8m0_to_fp32_half (ggml-impl.h): 2**(x - 128) as float32 bits, 0 and 1 subnormal;
    # 0xFF is 2**127, not NaN.
    x = np.arange(256, dtype=np.uint32)
    bits = np.where(x < 2, np.uint32(0x00200000) << x, (x - 1) << 23)
    return bits.astype(np.uint32).view(np.float32)


def _ue4m3_half() -> np.ndarray:
    # ggml_ue4m3_to_fp32 (ggml-impl.h): 0 and 0x7F are 0; otherwise bits 6..3 the exponent
    # (bias 7), bits 2..0 the mantissa, the sign bit ignored; the value halved.  Exact:
    # (1 + m/8) * 2**(e - 8) is float32 bits ((e + 119) << 23) | (m << 20), m * 2**-10 for e = 0.
    x = np.arange(256, dtype=np.uint32)
    exp, man = (x >> 3) & 0xF, x & 7
    normal = (((exp + 119) << 23) | (man << 20)).view(np.float32)
    tiny = man.astype(np.float32) * np.float32(2.0**-10)
    out = np.where(exp == 0, tiny, normal).astype(np.float32)
    out[[0x00, 0x7F]] = 0.0
    return out


E8M0_HALF = _e8m0_half()
"""float32 by E8M0 byte: ggml's ``ggml_e8m0_to_fp32_half``, half the scale
``2**(e - 127)`` (the E2M1 table is doubled), 0xFF giving 2**127."""

UE4M3_HALF = _ue4m3_half()
"""float32 by UE4M3 byte: ggml's ``ggml_ue4m3_to_fp32``, half the scale, the
sign bit ignored (0x80 | x reads as x) except that 0x7F reads as 0."""

# The integer levels as float32, indexed by the stored bits: exact conversions, so
# level[q] * d is ggml's (float)(int) * d.
_OFFSET_8 = np.arange(-8, 8, dtype=np.float32)
_OFFSET_16 = np.arange(-16, 16, dtype=np.float32)
_PLAIN_32 = np.arange(32, dtype=np.float32)
_MINUS_1 = np.arange(-1, 3, dtype=np.float32)
_FP4 = KVALUES_FP4.astype(np.float32)
_IQ4NL = KVALUES_IQ4NL.astype(np.float32)


def _trits() -> np.ndarray:
    # TQ1_0: digit n of byte b is ((uint8)(b * 3**n) * 3) >> 8 (a base-3 fixed point
    # fraction), minus 1: float32 (256 bytes, 5 digits).
    b = np.arange(256, dtype=np.uint32)[:, None]
    t = (((b * np.array([1, 3, 9, 27, 81], np.uint32)) & 0xFF) * 3) >> 8
    out: np.ndarray = (t.astype(np.int32) - 1).astype(np.float32)
    return out


_TRITS = _trits()


def _nibbles(qs: np.ndarray) -> np.ndarray:
    # ggml's nibble order: byte j's low nibble is element j, its high nibble j + len.
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    # Q5_0/Q5_1's qh, read as a little-endian u32: bit i is element i's 5th bit
    # (ggml's xh_0 = bit j, xh_1 = bit j + 16), as 0 or 16.
    bits: np.ndarray = np.unpackbits(qh, axis=1, bitorder="little") << 4
    return bits


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    d = field_f16(blocks, 0)[:, None]
    out: np.ndarray = _OFFSET_8[_nibbles(blocks[:, 2:])] * d
    return out


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    d, m = field_f16(blocks, 0)[:, None], field_f16(blocks, 2)[:, None]
    out: np.ndarray = _PLAIN_32[_nibbles(blocks[:, 4:])] * d
    out += m
    return out


def _q5_0(blocks: np.ndarray) -> np.ndarray:
    d = field_f16(blocks, 0)[:, None]
    q = _nibbles(blocks[:, 6:]) | _fifth_bits(blocks[:, 2:6])
    out: np.ndarray = _OFFSET_16[q] * d
    return out


def _q5_1(blocks: np.ndarray) -> np.ndarray:
    d, m = field_f16(blocks, 0)[:, None], field_f16(blocks, 2)[:, None]
    q = _nibbles(blocks[:, 8:]) | _fifth_bits(blocks[:, 4:8])
    out: np.ndarray = _PLAIN_32[q] * d
    out += m
    return out


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    # block_q8_0: f16 d, int8 qs[32]; y = qs * d.
    d = field_f16(blocks, 0)[:, None]
    q: np.ndarray = blocks[:, 2:].view(np.int8).astype(np.float32)
    out: np.ndarray = q * d
    return out


def _q8_1(blocks: np.ndarray) -> np.ndarray:
    # block_q8_1: f16 d, f16 s, int8 qs[32]; y = qs * d as for Q8_0 (s is not a value).
    d = field_f16(blocks, 0)[:, None]
    q: np.ndarray = blocks[:, 4:].view(np.int8).astype(np.float32)
    out: np.ndarray = q * d
    return out


def _q1_0(blocks: np.ndarray) -> np.ndarray:
    d = field_f16(blocks, 0)[:, None]
    bits = np.unpackbits(blocks[:, 2:], axis=1, bitorder="little").view(np.bool_)
    out: np.ndarray = np.where(bits, d, -d)
    return out


def _q2_0(blocks: np.ndarray) -> np.ndarray:
    # Element j: bits 2 * (j % 4) of byte j // 4; (q - 1) * d.
    d = field_f16(blocks, 0)[:, None]
    q = (blocks[:, 2:, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
    out: np.ndarray = _MINUS_1[q.reshape(len(blocks), 64)] * d
    return out


def _tq1_0(blocks: np.ndarray) -> np.ndarray:
    # Digit n of qs[m], by n then m: first qs[0:32] (160 values), then qs[32:48]
    # (80), then digits 0..3 of qh[0:4] (16); (t - 1) * d.
    n = len(blocks)
    d = field_f16(blocks, 52)[:, None]
    t = _TRITS[blocks[:, :52]]  # (n, 52 bytes, 5 digits)
    levels = np.concatenate(
        [
            t[:, :32].transpose(0, 2, 1).reshape(n, 160),
            t[:, 32:48].transpose(0, 2, 1).reshape(n, 80),
            t[:, 48:, :4].transpose(0, 2, 1).reshape(n, 16),
        ],
        axis=1,
    )
    out: np.ndarray = levels * d
    return out


def _tq2_0(blocks: np.ndarray) -> np.ndarray:
    # Element 128 * h + 32 * l + m: bits 2l of qs[32h + m]; (q - 1) * d.
    d = field_f16(blocks, 64)[:, None]
    qs = blocks[:, :64].reshape(-1, 2, 1, 32)
    q = (qs >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 3
    out: np.ndarray = _MINUS_1[q.reshape(len(blocks), 256)] * d
    return out


def _mxfp4(blocks: np.ndarray) -> np.ndarray:
    d = E8M0_HALF[blocks[:, 0]][:, None]
    out: np.ndarray = _FP4[_nibbles(blocks[:, 1:])] * d
    return out


def _nvfp4(blocks: np.ndarray) -> np.ndarray:
    # Sub-block s (elements 16s..16s+15): scale d[s], nibbles of qs[8s:8s+8].
    d = UE4M3_HALF[blocks[:, :4]][:, :, None]
    q = _nibbles(blocks[:, 4:].reshape(-1, 4, 8))
    out: np.ndarray = _FP4[q] * d
    return out.reshape(len(blocks), 64)


def _iq4_nl(blocks: np.ndarray) -> np.ndarray:
    d = field_f16(blocks, 0)[:, None]
    out: np.ndarray = d * _IQ4NL[_nibbles(blocks[:, 2:])]
    return out


def _iq4_xs_scales(blocks: np.ndarray) -> np.ndarray:
    # ls - 32 of sub-block ib: the low 4 bits from nibble ib of scales_l, the high 2 bits
    # from bits 2ib of scales_h; int32 (n, 8).
    low = _nibbles(blocks[:, 4:8, None]).reshape(-1, 8)
    high = (blocks[:, 2:4, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
    ls = low.astype(np.int32) | (high.reshape(-1, 8).astype(np.int32) << 4)
    out: np.ndarray = ls - 32
    return out


def _iq4_xs(blocks: np.ndarray) -> np.ndarray:
    # Sub-block ib (32 elements): dl = d * (ls - 32), nibbles of qs[16ib:16ib+16].
    d = field_f16(blocks, 0)[:, None]
    dl = (d * _iq4_xs_scales(blocks).astype(np.float32))[:, :, None]
    q = _nibbles(blocks[:, 8:].reshape(-1, 8, 16))
    out: np.ndarray = dl * _IQ4NL[q]
    return out.reshape(len(blocks), 256)


def _d_at_0(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 0)}


def _d_m(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 0), "m": field_f16(blocks, 2)}


def _d_at_52(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 52)}


def _d_at_64(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 64)}


def _mxfp4_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"e": E8M0_HALF[blocks[:, 0]]}


def _nvfp4_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": UE4M3_HALF[blocks[:, :4]]}


def _iq4_xs_scales_named(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 0), "sub-block scales": _iq4_xs_scales(blocks)}


DECODERS: Mapping[str, Decoder] = MappingProxyType(
    {
        "Q4_0": Decoder(_q4_0, _d_at_0),
        "Q4_1": Decoder(_q4_1, _d_m),
        "Q5_0": Decoder(_q5_0, _d_at_0),
        "Q5_1": Decoder(_q5_1, _d_m),
        "Q8_0": Decoder(_q8_0, _d_at_0),
        "Q8_1": Decoder(_q8_1, _d_at_0),
        "Q1_0": Decoder(_q1_0, _d_at_0),
        "Q2_0": Decoder(_q2_0, _d_at_0),
        "TQ1_0": Decoder(_tq1_0, _d_at_52),
        "TQ2_0": Decoder(_tq2_0, _d_at_64),
        "MXFP4": Decoder(_mxfp4, _mxfp4_scales),
        "NVFP4": Decoder(_nvfp4, _nvfp4_scales),
        "IQ4_NL": Decoder(_iq4_nl, _d_at_0),
        "IQ4_XS": Decoder(_iq4_xs, _iq4_xs_scales_named, _d_at_0),
    }
)
"""The decoders of this module by GGML type name.  Their scales: ``d`` (and
Q4_1's, Q5_1's ``m``) as float32 ``(n,)``; MXFP4's ``e`` and NVFP4's ``d``
(``(n, 4)``) as ggml reads them (halved, see :data:`E8M0_HALF`); IQ4_XS's
``sub-block scales`` as ggml computes them, ``ls - 32``, int32 ``(n, 8)``."""
