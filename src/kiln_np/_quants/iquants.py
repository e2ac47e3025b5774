"""Decoders of GGML's i-quant types (IQ1_S ... IQ3_S: sub-blocks whose values are
entries of fixed grids), in numpy:
the reference the compiled kernels are tested against, and the fallback.  The
conventions are :mod:`kiln_np._quants.basic`'s; the grids are
:mod:`kiln_np._quants.grids`, generated from ggml's ``ggml-common.h``.

Each group of 8 values is one grid entry (two 4-value entries for IQ3) times a
sub-block scale ``db``, with signs: ``db * grid[j]``, then negated where the
sign bit is set.  ggml writes the sign as ``* (bit ? -1.f : 1.f)`` and its
compiler makes that a negation, which flips a NaN's sign bit too (a
multiplication by -1 on x86 would not); the decoders here flip the sign bit,
so a NaN scale gives ggml's bits as well.  IQ1_S and IQ1_M add a delta
instead: ``dl * (grid[j] + delta)``, ``delta = ±IQ1S_DELTA`` (ggml's IQ1_M
decoder uses ``IQ1S_DELTA`` too; ``IQ1M_DELTA`` has the same value).

>>> iq2_xxs = DECODERS["IQ2_XXS"]
>>> block = np.zeros((1, 66), np.uint8)
>>> block[0, :2] = [0x00, 0x3C]  # d = 1.0
>>> block[0, 6] = 1  # the first 8 values' signs: ksigns_iq2xs[1] = 0b10000001
>>> block[0, 9] = 0x10  # ls = 1: db = d * (0.5 + 1) * 0.25 = 0.375
>>> iq2_xxs.values(block)[0, :8].tolist()  # grid entry 0 is eight 8s
[-3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, -3.0]
>>> iq2_xxs.scales(block)["ls"][0].tolist()
[1, 0, 0, 0, 0, 0, 0, 0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np

from . import grids
from .blocks import f16_to_f32, field_f16
from .decoder import Decoder

__all__ = ["DECODERS"]


def _read_only(table: np.ndarray) -> np.ndarray:
    table.setflags(write=False)
    return table


_SIGN_BIT = np.uint32(0x80000000)
# For each sign byte, each of its 8 values' sign bit (kmask_iq2xs[j] picks value j's bit).
_SIGN_BITS = _read_only(
    np.where((np.arange(256)[:, None] & grids.KMASK_IQ2XS) != 0, _SIGN_BIT, np.uint32(0))
)
_KSIGN_BITS = _read_only(_SIGN_BITS[grids.KSIGNS_IQ2XS])  # the 7-bit sign indices' patterns

# The grids' values as float32 (ggml converts each byte exactly), one row per entry.
_IQ2XXS = _read_only(grids.IQ2XXS_GRID.view(np.uint8).reshape(-1, 8).astype(np.float32))
_IQ2XS = _read_only(grids.IQ2XS_GRID.view(np.uint8).reshape(-1, 8).astype(np.float32))
_IQ2S = _read_only(grids.IQ2S_GRID.view(np.uint8).reshape(-1, 8).astype(np.float32))
_IQ3XXS = _read_only(grids.IQ3XXS_GRID.view(np.uint8).reshape(-1, 4).astype(np.float32))
_IQ3S = _read_only(grids.IQ3S_GRID.view(np.uint8).reshape(-1, 4).astype(np.float32))
# iq1s_grid's values plus the delta (rows 0..2047) and minus it (2048..): grid[j] + delta,
# exact in float32 as ggml computes it.
_IQ1S_ROWS = len(grids.IQ1S_GRID)
_IQ1S = grids.IQ1S_GRID.view(np.int8).reshape(-1, 8).astype(np.float32)
_IQ1S_PLUS_DELTA = _read_only(np.concatenate([_IQ1S + grids.IQ1S_DELTA, _IQ1S + -grids.IQ1S_DELTA]))

_SHIFT7 = np.array([0, 7, 14, 21], np.uint32)  # the four 7-bit sign indices of a uint32
_SHIFT3 = np.array([0, 3, 6, 9], np.uint32)  # four 3-bit fields of a uint16
_SHIFT2 = np.array([0, 2, 4, 6], np.uint32)
_SHIFT1 = np.arange(8, dtype=np.uint32)


def _u32(fields: np.ndarray) -> np.ndarray:
    """Little-endian uint32s from the last axis's groups of 4 bytes."""
    b = fields.astype(np.uint32).reshape(*fields.shape[:-1], fields.shape[-1] // 4, 4)
    out: np.ndarray = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
    return out


def _u16(fields: np.ndarray) -> np.ndarray:
    """Little-endian uint16s (as uint32) from the last axis's pairs of bytes."""
    b = fields.astype(np.uint32).reshape(*fields.shape[:-1], fields.shape[-1] // 2, 2)
    out: np.ndarray = b[..., 0] | (b[..., 1] << 8)
    return out


def _nibbles(fields: np.ndarray) -> np.ndarray:
    """Each byte's low then high 4 bits, in order: (n, k) -> (n, 2k) uint8."""
    return np.stack([fields & 15, fields >> 4], axis=-1).reshape(len(fields), 2 * fields.shape[-1])


def _negated(values: np.ndarray, sign_bits: np.ndarray) -> np.ndarray:
    """``values`` with their sign bits flipped where ``sign_bits`` (uint32) has them."""
    out: np.ndarray = (values.view(np.uint32) ^ sign_bits).view(np.float32)
    return out


def _quarter_scales(d: np.ndarray, ls: np.ndarray, factor: float) -> np.ndarray:
    # ggml: d * (0.5f + ls) * factor, left to right in float32.
    out: np.ndarray = d[:, None] * (np.float32(0.5) + ls.astype(np.float32)) * np.float32(factor)
    return out


def _odd_scales(d: np.ndarray, ls: np.ndarray) -> np.ndarray:
    # ggml: d * (2*ls + 1) (IQ1) or d * (1 + 2*ls) (IQ3_S), the integer converted to float.
    out: np.ndarray = d[:, None] * (2 * ls.astype(np.int32) + 1).astype(np.float32)
    return out


# block_iq2_xxs: f16 d, 8 x (4 grid indices, uint32 w): w's top 4 bits the scale ls,
# its four 7-bit fields the groups' sign indices.
def _iq2_xxs_ls(blocks: np.ndarray) -> np.ndarray:
    w = _u32(blocks[:, 2:].reshape(len(blocks), 8, 8)[:, :, 4:].reshape(len(blocks), 32))
    return (w >> 28).astype(np.uint8)


def _iq2_xxs(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    q = blocks[:, 2:].reshape(n, 8, 8)
    w = _u32(q[:, :, 4:].reshape(n, 32))  # (n, 8)
    db = _quarter_scales(field_f16(blocks, 0), w >> 28, 0.25)
    values = db[:, :, None, None] * _IQ2XXS[q[:, :, :4]]  # (n, 8, 4, 8)
    signs = _KSIGN_BITS[(w[:, :, None] >> _SHIFT7) & 127]
    return _negated(values, signs).reshape(n, 256)


# block_iq2_xs: f16 d, uint16 qs[32] (9-bit grid index, 7-bit sign index), scales[8]
# (two 4-bit ls per 32 values, one per 16).
def _iq2_xs(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    qs = _u16(blocks[:, 2:66])  # (n, 32)
    db = _quarter_scales(field_f16(blocks, 0), _nibbles(blocks[:, 66:74]), 0.25)  # (n, 16)
    values = db[:, :, None] * _IQ2XS[qs & 511].reshape(n, 16, 16)
    return _negated(values.reshape(n, 32, 8), _KSIGN_BITS[qs >> 9]).reshape(n, 256)


# block_iq2_s: f16 d, qs[32] (grid index low 8 bits), signs[32] (one byte per 8 values),
# qh[8] (2 high index bits per group), scales[8] (as IQ2_XS).
def _iq2_s(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    high = (blocks[:, 66:74, None].astype(np.uint32) >> _SHIFT2) & 3  # (n, 8, 4)
    index = blocks[:, 2:34] | (high.reshape(n, 32) << 8)
    db = _quarter_scales(field_f16(blocks, 0), _nibbles(blocks[:, 74:82]), 0.25)  # (n, 16)
    values = db[:, :, None] * _IQ2S[index].reshape(n, 16, 16)
    return _negated(values.reshape(n, 32, 8), _SIGN_BITS[blocks[:, 34:66]]).reshape(n, 256)


def _iq2_ls(blocks: np.ndarray) -> np.ndarray:
    # IQ2_XS and IQ2_S: scales[8] ends the block, 4 bits per 16 values.
    return _nibbles(blocks[:, -8:])


# block_iq3_xxs: f16 d, qs[64] (grid indices, 4 values each), 8 x uint32 w (top 4 bits
# ls, four 7-bit sign indices), db = d * (0.5f + ls) * 0.5f.
def _iq3_xxs_ls(blocks: np.ndarray) -> np.ndarray:
    return (_u32(blocks[:, 66:98]) >> 28).astype(np.uint8)


def _iq3_xxs(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    w = _u32(blocks[:, 66:98])  # (n, 8)
    db = _quarter_scales(field_f16(blocks, 0), w >> 28, 0.5)
    values = db[:, :, None, None] * _IQ3XXS[blocks[:, 2:66]].reshape(n, 8, 4, 8)
    signs = _KSIGN_BITS[(w[:, :, None] >> _SHIFT7) & 127]
    return _negated(values, signs).reshape(n, 256)


# block_iq3_s: f16 d, qs[64] (index low 8 bits), qh[8] (bit m of qh[k]: index bit 8 of
# sub-block k's m-th index), signs[32], scales[4] (4-bit ls per 32 values),
# db = d * (1 + 2*ls).
def _iq3_s_ls(blocks: np.ndarray) -> np.ndarray:
    return _nibbles(blocks[:, 106:110])


def _iq3_s(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    high = (blocks[:, 66:74, None].astype(np.uint32) >> _SHIFT1) & 1  # (n, 8, 8)
    index = blocks[:, 2:66] | (high.reshape(n, 64) << 8)
    db = _odd_scales(field_f16(blocks, 0), _iq3_s_ls(blocks))
    values = db[:, :, None, None] * _IQ3S[index].reshape(n, 8, 4, 8)
    signs = _SIGN_BITS[blocks[:, 74:106]].reshape(n, 8, 4, 8)
    return _negated(values, signs).reshape(n, 256)


# block_iq1_s: f16 d, qs[32] (index low 8 bits), uint16 qh[8]: per 32 values, 4 x 3
# high index bits, a 3-bit ls (dl = d * (2*ls + 1)) and the delta's sign (bit 15).
def _iq1_s_parts(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    qh = _u16(blocks[:, 34:50])  # (n, 8)
    high = (qh[:, :, None] >> _SHIFT3) & 7  # (n, 8, 4)
    return qh, high, qh >> 15


def _iq1_s(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    qh, high, negative = _iq1_s_parts(blocks)
    row = blocks[:, 2:34].reshape(n, 8, 4) | (high << 8) | (negative[:, :, None] * _IQ1S_ROWS)
    dl = _odd_scales(field_f16(blocks, 0), (qh >> 12) & 7)
    values: np.ndarray = dl[:, :, None, None] * _IQ1S_PLUS_DELTA[row]  # (n, 8, 4, 8)
    return values.reshape(n, 256)


def _iq1_s_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    qh, _, negative = _iq1_s_parts(blocks)
    return {
        "d": field_f16(blocks, 0),
        "ls": ((qh >> 12) & 7).astype(np.uint8),
        "delta": np.where(negative != 0, -grids.IQ1S_DELTA, grids.IQ1S_DELTA),
    }


# block_iq1_m: qs[32] (index low 8 bits), qh[16] (per 8 values, a nibble: 3 high index
# bits, the delta's sign), uint16 scales[4]: four 3-bit ls each (dl = d * (2*ls + 1) per
# 16 values) and, in their top nibbles, the f16 d.
def _iq1_m_parts(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = len(blocks)
    sc = _u16(blocks[:, 48:56])  # (n, 4)
    d_bits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0xF0) | ((sc[:, 2] >> 4) & 0xF00)
    d = f16_to_f32(d_bits | (sc[:, 3] & 0xF000))
    ls = ((sc[:, :, None] >> _SHIFT3) & 7).reshape(n, 16)
    nibble = np.stack([blocks[:, 32:48] & 15, blocks[:, 32:48] >> 4], axis=-1).reshape(n, 32)
    return d, ls, nibble & 7, nibble >> 3


def _iq1_m(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    d, ls, high, negative = _iq1_m_parts(blocks)
    row = blocks[:, :32] | (high.astype(np.uint32) << 8) | (negative * np.uint32(_IQ1S_ROWS))
    values: np.ndarray = _odd_scales(d, ls)[:, :, None] * _IQ1S_PLUS_DELTA[row].reshape(n, 16, 16)
    return values.reshape(n, 256)


def _iq1_m_scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    d, ls, _, negative = _iq1_m_parts(blocks)
    delta = np.where(negative != 0, -grids.IQ1S_DELTA, grids.IQ1S_DELTA)
    return {"d": d, "ls": ls.astype(np.uint8), "delta": delta}


def _d_and_ls(
    ls_of: Callable[[np.ndarray], np.ndarray],
) -> Callable[[np.ndarray], Mapping[str, np.ndarray]]:
    """``scales`` of a type with an f16 ``d`` first and the sub-block scales ``ls_of``."""

    def scales(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
        return {"d": field_f16(blocks, 0), "ls": ls_of(blocks)}

    return scales


def _d_first(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    """``float_scales`` of a type whose one float scale is the f16 ``d`` first."""
    return {"d": field_f16(blocks, 0)}


DECODERS: Mapping[str, Decoder] = MappingProxyType(
    {
        "IQ2_XXS": Decoder(_iq2_xxs, _d_and_ls(_iq2_xxs_ls), _d_first),
        "IQ2_XS": Decoder(_iq2_xs, _d_and_ls(_iq2_ls), _d_first),
        "IQ3_XXS": Decoder(_iq3_xxs, _d_and_ls(_iq3_xxs_ls), _d_first),
        "IQ1_S": Decoder(_iq1_s, _iq1_s_scales, _d_first),
        "IQ3_S": Decoder(_iq3_s, _d_and_ls(_iq3_s_ls), _d_first),
        "IQ2_S": Decoder(_iq2_s, _d_and_ls(_iq2_ls), _d_first),
        "IQ1_M": Decoder(_iq1_m, _iq1_m_scales, lambda blocks: {"d": _iq1_m_parts(blocks)[0]}),
    }
)
"""The decoders of this module by GGML type name."""
