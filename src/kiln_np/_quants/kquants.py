"""Decoders of GGML's k-quant types (Q2_K ... Q8_K: 256-element super-blocks whose
sub-blocks have their own scales), in numpy:
the reference the compiled kernels are tested against, and the fallback.  The
conventions are :mod:`kiln_np._quants.basic`'s.

The block layouts (``ggml-common.h``; offsets in bytes, ``d`` and ``dmin`` f16
but Q8_K's ``d``, a float32):

======  =====  ============================================================
type    bytes  fields
======  =====  ============================================================
Q2_K    84     scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin
Q3_K    110    hmask[32], qs[64], scales[12] (16 6-bit), d
Q4_K    144    d, dmin, scales[12] (8 6-bit scales, 8 6-bit mins), qs[128]
Q5_K    176    d, dmin, scales[12] (as Q4_K), qh[32], qs[128]
Q6_K    210    ql[128], qh[64], scales[16] (int8), d
Q8_K    292    d (float32), qs[256] (int8), bsums[16] (int16, not read)
======  =====  ============================================================

>>> block = np.zeros((1, 144), np.uint8)
>>> block[0, :4] = [0x00, 0x3C, 0x00, 0x38]  # Q4_K: d = 1.0, dmin = 0.5
>>> block[0, 4], block[0, 8], block[0, 16] = 3, 2, 0x75  # sub-block 0: scale 3, min 2
>>> q4_k = DECODERS["Q4_K"]
>>> q4_k.values(block)[0, :2].tolist()  # 1.0 * 3 * 5 - 0.5 * 2, then q = 0
[14.0, -1.0]
>>> q4_k.scales(block)["sub-block scales"].tolist()
[[3, 0, 0, 0, 0, 0, 0, 0]]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np

from .blocks import field_f16
from .decoder import Decoder

__all__ = ["DECODERS", "q3_k_scales", "scale_min_k4"]

F32 = np.float32

_SHIFTS_2BIT = np.array([0, 2, 4, 6], np.uint8)


def scale_min_k4(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit sub-block scales and 8 mins of Q4_K / Q5_K (ggml's
    ``get_scale_min_k4``), from their 12 packed bytes (rows of uint8, ``(n, 12)``).

    Sub-blocks 0-3 have the low 6 bits of bytes 0-3 (scales) and 4-7 (mins);
    sub-blocks 4-7 the nibbles of bytes 8-11 (scale low, min high) with, on
    top, the two high bits of bytes 0-3 (scales) and 4-7 (mins).

    >>> sc, m = scale_min_k4(np.array([[63, 0, 0, 0x40, 1, 0, 0, 0xC0, 0, 0, 0, 0x21]], np.uint8))
    >>> sc.tolist(), m.tolist()
    ([[63, 0, 0, 0, 0, 0, 0, 17]], [[1, 0, 0, 0, 0, 0, 0, 50]])
    """
    low, high, nibbles = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low & 63, (nibbles & 0xF) | ((low >> 6) << 4)], axis=1)
    mins = np.concatenate([high & 63, (nibbles >> 4) | ((high >> 6) << 4)], axis=1)
    return scales, mins


def q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """The 16 sub-block scales of Q3_K from their 12 packed bytes (``(n, 12)`` uint8),
    as ggml uses them: the 6-bit value minus 32, int8 ``(n, 16)``.

    Scale ``j``'s low 4 bits are nibble ``j // 8`` of byte ``j % 8``; its high
    2 bits are bits ``2 * (j // 4)`` and up of byte ``8 + j % 4``.

    >>> q3_k_scales(np.array([[0x21, 0, 0, 0, 0, 0, 0, 0, 0x03, 0, 0, 0]], np.uint8)).tolist()
    [[17, -32, -32, -32, -32, -32, -32, -32, -30, -32, -32, -32, -32, -32, -32, -32]]
    """
    low = np.concatenate([packed[:, 0:8] & 0xF, packed[:, 0:8] >> 4], axis=1)
    high = (packed[:, None, 8:12] >> _SHIFTS_2BIT[None, :, None]) & 3
    six_bits = low | (high.reshape(-1, 16) << 4)
    signed: np.ndarray = six_bits.astype(np.int8) - np.int8(32)
    return signed


def _crumbs(qs: np.ndarray) -> np.ndarray:
    # Q2_K / Q3_K's 2-bit quants, (n, 64) bytes -> (n, 16 sub-blocks, 16): sub-block
    # 8 * half + 2 * j + h is bits 2j of bytes 32 * half + 16 * h + (0 ... 15).
    rows = qs.reshape(-1, 2, 1, 2, 16)
    return ((rows >> _SHIFTS_2BIT[None, None, :, None, None]) & 3).reshape(-1, 16, 16)


def _q2_k(blocks: np.ndarray) -> np.ndarray:
    # dl = d * (sc & 0xF); ml = dmin * (sc >> 4); y = dl * q - ml.
    sc = blocks[:, 0:16]
    dl = field_f16(blocks, 80)[:, None] * (sc & 0xF).astype(F32)
    ml = field_f16(blocks, 82)[:, None] * (sc >> 4).astype(F32)
    q = _crumbs(blocks[:, 16:80]).astype(F32)
    out: np.ndarray = dl[:, :, None] * q - ml[:, :, None]
    return out.reshape(-1, 256)


def _q2_k_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    sc = blocks[:, 0:16]
    return {
        "d": field_f16(blocks, 80),
        "dmin": field_f16(blocks, 82),
        "sub-block scales": sc & 0xF,
        "sub-block mins": sc >> 4,
    }


def _q3_k(blocks: np.ndarray) -> np.ndarray:
    # dl = d * (scale - 32); y = dl * (q - (high bit set ? 0 : 4)).  Sub-block
    # 8 * half + 2 * j + h takes its high bits from bit 4 * half + j of hmask[16 h + l].
    dl = field_f16(blocks, 108)[:, None] * q3_k_scales(blocks[:, 96:108]).astype(F32)
    bit = np.arange(8, dtype=np.uint8).reshape(1, 2, 4, 1, 1)
    high = ((blocks[:, 0:32].reshape(-1, 1, 1, 2, 16) >> bit) & 1).reshape(-1, 16, 16)
    q = (_crumbs(blocks[:, 32:96]) | (high << 2)).astype(np.int8) - np.int8(4)
    out: np.ndarray = dl[:, :, None] * q.astype(F32)
    return out.reshape(-1, 256)


def _q3_k_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 108), "sub-block scales": q3_k_scales(blocks[:, 96:108])}


def _nibbles(qs: np.ndarray) -> np.ndarray:
    # Q4_K / Q5_K's low 4 bits, (n, 128) bytes -> (n, 8 sub-blocks, 32): sub-block
    # 2 * c + h is nibble h of bytes 32 * c + (0 ... 31).
    rows = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([rows & 0xF, rows >> 4], axis=2).reshape(-1, 8, 32)


def _k4_affine(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    # Q4_K / Q5_K: d1 = d * sc; m1 = dmin * m; y = d1 * q - m1.
    sc, m = scale_min_k4(blocks[:, 4:16])
    d1 = field_f16(blocks, 0)[:, None] * sc.astype(F32)
    m1 = field_f16(blocks, 2)[:, None] * m.astype(F32)
    out: np.ndarray = d1[:, :, None] * q.astype(F32) - m1[:, :, None]
    return out.reshape(-1, 256)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    return _k4_affine(blocks, _nibbles(blocks[:, 16:144]))


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    # Sub-block s's fifth bit (16) is bit s of qh[l].
    bit = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    high = (blocks[:, None, 16:48] >> bit) & 1
    return _k4_affine(blocks, _nibbles(blocks[:, 48:176]) | (high << 4))


def _k4_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    sc, m = scale_min_k4(blocks[:, 4:16])
    return {
        "d": field_f16(blocks, 0),
        "dmin": field_f16(blocks, 2),
        "sub-block scales": sc,
        "sub-block mins": m,
    }


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    # y = d * sc * q, i.e. (d * sc) * q, q = (low 4 | high 2 << 4) - 32.  Element
    # 128 * half + 32 * k + l: low nibble k // 2 of ql[64 * half + 32 * (k % 2) + l],
    # high bits 2k of qh[32 * half + l]; scale 8 * half + 2 * k + l // 16.
    ql = blocks[:, 0:128].reshape(-1, 2, 1, 2, 32)
    low = np.concatenate([ql & 0xF, ql >> 4], axis=2).reshape(-1, 2, 4, 32)
    qh = blocks[:, 128:192].reshape(-1, 2, 1, 32)
    high = (qh >> _SHIFTS_2BIT[None, None, :, None]) & 3
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)
    ds = field_f16(blocks, 208)[:, None] * blocks[:, 192:208].view(np.int8).astype(F32)
    out: np.ndarray = ds.reshape(-1, 16, 1) * q.reshape(-1, 16, 16).astype(F32)
    return out.reshape(-1, 256)


def _q6_k_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 208), "sub-block scales": blocks[:, 192:208].view(np.int8)}


def _q8_k_d(blocks: np.ndarray) -> np.ndarray:
    d: np.ndarray = np.ascontiguousarray(blocks[:, 0:4]).view("<f4").reshape(-1).astype(F32)
    return d


def _q8_k(blocks: np.ndarray) -> np.ndarray:
    # y = d * qs, d a float32.
    out: np.ndarray = _q8_k_d(blocks)[:, None] * blocks[:, 4:260].view(np.int8).astype(F32)
    return out


def _floats(**offsets: int) -> Callable[[np.ndarray], Mapping[str, np.ndarray]]:
    """``float_scales``: the f16 fields at these byte offsets."""

    def floats(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
        return {name: field_f16(blocks, at) for name, at in offsets.items()}

    return floats


DECODERS: Mapping[str, Decoder] = MappingProxyType(
    {
        "Q2_K": Decoder(_q2_k, _q2_k_scales, _floats(d=80, dmin=82)),
        "Q3_K": Decoder(_q3_k, _q3_k_scales, _floats(d=108)),
        "Q4_K": Decoder(_q4_k, _k4_scales, _floats(d=0, dmin=2)),
        "Q5_K": Decoder(_q5_k, _k4_scales, _floats(d=0, dmin=2)),
        "Q6_K": Decoder(_q6_k, _q6_k_scales, _floats(d=208)),
        "Q8_K": Decoder(_q8_k, lambda blocks: {"d": _q8_k_d(blocks)}),
    }
)
"""The decoders of this module by GGML type name."""
