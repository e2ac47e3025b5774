"""MXFP4 and NVFP4 encoders on hand-made blocks with stated bytes: the e8m0 exponent
(where ``log2f`` rounds up to the next integer, blocks below ``2**-125`` whose byte
wraps, blocks near the largest float), ties between E2M1 levels, the UE4M3 scale's
rounding and clamping.  Every stated byte is what ggml 0.25.3's
``quantize_row_mxfp4_ref`` / ``quantize_row_nvfp4_ref`` writes (checked through
ctypes when the blocks were chosen); each test holds the numpy encoder and the
compiled one to them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import sys

import numpy as np
import pytest

from kiln_np._kernels import backend
from kiln_np._quants.basic import DECODERS, E8M0_HALF, KVALUES_FP4, UE4M3_HALF
from kiln_np._quants.encode_fp4 import ENCODERS, LOG2_FLOOR_BITS, _e2m1_codes, _ue4m3

f32 = np.float32
TYPE_IDS = {"MXFP4": 39, "NVFP4": 40}
ELEMENTS = {"MXFP4": 32, "NVFP4": 64}


def encode(name: str, rows: np.ndarray) -> np.ndarray:
    """Blocks of ``name`` for float32 ``rows``, the same on the numpy encoder and, where
    built, the compiled one."""
    x = np.ascontiguousarray(rows, np.float32).reshape(-1, ELEMENTS[name])
    with np.errstate(all="ignore"):
        got = ENCODERS[name](x)
    if backend.COMPILED:
        from kiln_np._kernels import native

        compiled = np.empty_like(got)
        found = native.ggml_from_float32(
            TYPE_IDS[name], x.reshape(-1), compiled.reshape(-1), 0, len(x)
        )
        assert found == -1
        assert compiled.tobytes().hex() == got.tobytes().hex()
    return got


def block(name: str, *values: float) -> np.ndarray:
    """One block of ``name``: ``values`` then zeros."""
    x = np.zeros(ELEMENTS[name], np.float32)
    x[: len(values)] = values
    return x


def below(v: float, steps: int = 1) -> float:
    """The float32 ``steps`` floats below positive ``v``."""
    bits = int(np.array([v], np.float32).view(np.uint32)[0]) - steps
    return float(np.array([bits], np.uint32).view(np.float32)[0])


# ---- MXFP4's scale byte: (uint8_t)(floorf(log2f(amax)) - 2 + 127) ------------------------


@pytest.mark.parametrize(
    ("amax", "e"),
    [
        (1.0, 125),
        (6.0, 127),
        (8.0, 128),
        (below(4.0), 126),  # log2f(4 - 2**-22) is 1.9999999: floor 1
        (below(8.0), 128),  # log2f(8 - 2**-21) rounds to 3.0: floor 3, as for 8
        (below(2.0**100, 44), 225),  # the 44 floats below 2**100 have log2f 100.0
        (below(2.0**100, 45), 224),
        (2.0**127, 252),
        (3.4028235e38, 253),  # log2f(FLT_MAX) rounds to 128.0
        (2.0**-124, 1),
        (2.0**-125, 0),  # e 0: d = 2**-128, subnormal
        (below(2.0**-125, 44), 0),  # log2f rounds up to -125 here too (subnormal amax)
        (below(2.0**-125, 45), 255),  # floor(log2f) = -126: -1 wraps to 255 (d = 2**127)
        (2.0**-126, 255),
        (2.0**-130, 251),
        (2.0**-149, 232),  # the smallest float: -24 wraps to 232
    ],
)
def test_mxfp4_scale_byte(amax: float, e: int) -> None:
    got = encode("MXFP4", block("MXFP4", amax, -amax / 3))
    assert got[0, 0] == e
    if amax < 2.0**-125 and e != 0:  # a wrapped, huge scale: every element is level 0
        assert got[0, 1:].tolist() == [0] * 16


def test_mxfp4_all_zero_block_has_scale_byte_0() -> None:
    assert encode("MXFP4", block("MXFP4", -0.0, 0.0)).tolist() == [[0] * 17]


def test_log2_floor_bits_are_where_correctly_rounded_log2f_reaches_each_integer() -> None:
    for i, start in enumerate(LOG2_FLOOR_BITS.tolist()):
        n = i - 148
        at, before = np.array([start, start - 1], np.uint32).view(np.float32).tolist()
        assert math.floor(float(f32(math.log2(at)))) == n
        assert before == 0 or math.floor(float(f32(math.log2(before)))) == n - 1


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's log2f is ggml's on Linux")
def test_log2_floor_bits_agree_with_the_c_librarys_log2f() -> None:
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.log2f.argtypes, libm.log2f.restype = [ctypes.c_float], ctypes.c_float
    for i, start in enumerate(LOG2_FLOOR_BITS.tolist()):
        at, before = np.array([start, start - 1], np.uint32).view(np.float32).tolist()
        assert math.floor(libm.log2f(at)) == i - 148
        assert before == 0 or math.floor(libm.log2f(before)) == i - 149


def test_mxfp4_scale_bytes_at_every_log2_threshold() -> None:
    # amax at each threshold and one float below it: both backends (the C table is its own)
    starts = LOG2_FLOOR_BITS.astype(np.int64)
    amax = np.concatenate([starts, starts - 1]).astype(np.uint32).view(np.float32)
    n = np.concatenate([np.arange(-148, 129), np.arange(-149, 128)])
    rows = np.zeros((len(amax), 32), np.float32)
    rows[:, 0], rows[:, 1] = amax, -amax / 2
    keep = amax > 0
    assert encode("MXFP4", rows[keep])[:, 0].tolist() == ((n[keep] + 125) & 0xFF).tolist()


# ---- E2M1 codes: ggml's best_index_mxfp4 ------------------------------------------------


def test_mxfp4_ties_go_to_the_smaller_level_and_nibbles_pair_j_with_j_plus_16() -> None:
    # amax 6: e 127, d = 0.5, levels 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0 ... 7, 8 + for < 0)
    x = block("MXFP4", 6.0, 0.25, 0.75, -0.75, 5.0, 2.5, -2.5, -0.0, 0.25000003)
    x[16:20] = [-6.0, 1.25, -0.25, 3.5]
    # 0.25 ties 0 and 0.5: 0; 0.75 ties 0.5 and 1: 1; 5 ties 4 and 6: 6; 2.5: 4; -0.0: 0,
    # not 8; 1.25 ties 1 and 1.5: 2; 3.5 ties 3 and 4: 5
    codes = [7, 0, 1, 9, 6, 4, 12, 0, 1] + [0] * 7 + [15, 2, 0, 5] + [0] * 12
    got = encode("MXFP4", x)[0]
    assert got[0] == 127
    assert got[1:].tolist() == [lo | hi << 4 for lo, hi in zip(codes[:16], codes[16:], strict=True)]


def test_mxfp4_levels_reproduce_themselves() -> None:
    d = f32(2.0**-3)  # amax 1.5 (12 * d): e 125, d = 2**-3
    x = np.zeros(32, np.float32)
    x[:16] = KVALUES_FP4.astype(np.float32) * d
    x[16:] = -x[:16]
    got = encode("MXFP4", x)
    assert got[0, 0] == 125
    assert DECODERS["MXFP4"].values(got)[0].tolist() == x.tolist()


def test_mxfp4_blocks_near_the_largest_float() -> None:
    # e 253, d = 2**125: 8 * d and 12 * d overflow (error inf), 6 * d = 1.5 * 2**127 is the top
    got = encode("MXFP4", block("MXFP4", 3.4028235e38, -3e38, 2.0**127, 7 * 2.0**125))
    assert got[0, :5].tolist() == [253, 5, 13, 4, 5]
    # amax 2**127: e 252, d = 2**124, 8 * d = 2**127 is representable
    assert encode("MXFP4", block("MXFP4", 2.0**127, -(2.0**127)))[0, :3].tolist() == [252, 6, 14]


def test_mxfp4_subnormal_scales() -> None:
    # amax 2**-125: e 0, d = 2**-128 (ggml_e8m0_to_fp32_half's subnormal 0x00200000)
    got = encode("MXFP4", block("MXFP4", 2.0**-125, -(2.0**-125), 2.0**-127, 3 * 2.0**-128))
    assert got[0, :5].tolist() == [0, 6, 14, 2, 3]


def test_e2m1_codes_are_the_first_smallest_of_all_16_errors() -> None:
    # The magnitude search (encode_fp4's docstring) against ggml's loop as written: the
    # first index of the smallest |kvalues_fp4[i] * d - x| (argmin keeps the first).
    rng = np.random.default_rng(39)
    bits = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = np.where(np.isfinite(x), x, f32(0))
    d = np.concatenate([E8M0_HALF, UE4M3_HALF[:0x7F]])[rng.integers(0, 383, x.size)]
    # many x near the levels and their midpoints, signs and zeros included
    with np.errstate(over="ignore"):
        near = (rng.integers(-24, 25, x.size).astype(np.float32) * f32(0.5)) * d
    step = rng.integers(-2, 3, x.size).astype(np.uint32)
    near = (near.view(np.uint32) + step).view(np.float32)
    near = np.where(np.isfinite(near), near, f32(0))
    x = np.concatenate([x, near, np.array([0.0, -0.0], np.float32)])
    d = np.concatenate([d, d, np.array([0.5, 0.5], np.float32)])
    with np.errstate(all="ignore"):
        errors = np.abs(KVALUES_FP4.astype(np.float32) * d[:, None] - x[:, None])
        codes = _e2m1_codes(x, d)
    assert (codes == np.argmin(errors, axis=1)).all()


# ---- NVFP4: UE4M3 scales of amax / 6 ------------------------------------------------------


@pytest.mark.parametrize(
    ("amax", "ue"),
    [
        (6.0, 0x38),  # q = 1.0: exponent 7, mantissa 0
        (6.375, 0x39),  # q = 1.0625, half way to 1.125: ggml rounds halves up, not to even
        (below(6.375), 0x38),
        (7.125, 0x3A),  # q = 1.1875: up to 1.25
        (1440.0, 0x77),  # q = 240, the largest UE4M3 below 256
        (1488.0, 0x7E),  # q = 248 rounds up past exponent 14: 0x7E (448)
        (1800.0, 0x7E),  # q = 300: exponent 15, 0x7E, though 300 is nearer 288
        (1e30, 0x7E),
        (0.087890625, 0x07),  # q = 7.5 * 2**-9: (int)(7.5 + 0.5) = 8, capped at 7
        (0.005859375, 0x01),  # q = 2**-10: (int)(0.5 + 0.5f) = 1
        (0.0058593745, 0x01),  # q * 512 = 0.5 - 2**-25, + 0.5f rounds to 1.0: still 1
        (0.005, 0x00),  # q * 512 = 0.43: 0, a zero scale
        (0.0, 0x00),
    ],
)
def test_nvfp4_scale_byte(amax: float, ue: int) -> None:
    x = block("NVFP4", amax, -amax / 3)
    x[32] = -amax  # sub-block 2 too; sub-blocks 1 and 3 are zeros: scale 0
    assert encode("NVFP4", x)[0, :4].tolist() == [ue, 0, ue, 0]


def test_ue4m3_rounds_to_the_nearest_scale_halves_up() -> None:
    # From 2**-6 (the smallest normal UE4M3) to 248: the nearest UE4M3 value, halves up
    # (ggml rounds on the fourth mantissa bit alone); every float32 with 8 mantissa bits
    # there (the levels, the halves between them, the steps between those), and the floats
    # next to each half
    q = np.ldexp(1 + np.arange(256) / 256, np.arange(-6, 8)[:, None]).reshape(-1)
    q = np.concatenate([q, np.nextafter(q, 0), np.nextafter(q, np.inf)]).astype(np.float32)
    q = q[(q >= 2.0**-6) & (q < 248)]
    levels = 2.0 * UE4M3_HALF[8:0x7F].astype(np.float64)  # the normal scales, ascending
    ue = _ue4m3(q)
    at = np.searchsorted(levels, 2.0 * UE4M3_HALF[ue])
    assert (levels[at] == 2.0 * UE4M3_HALF[ue]).all()
    low = (levels[at] + levels[np.maximum(at - 1, 0)]) / 2
    high = (levels[at] + levels[np.minimum(at + 1, len(levels) - 1)]) / 2
    assert ((low <= q) & ((q < high) | (at == len(levels) - 1))).all()
    # from 248 (half way from 240 to 256) on, 0x7E (448): ggml never writes 256 ... 416
    top = np.array([247.99998, 248, 255.99998, 256, 300, 448, 449, 3e38], np.float32)
    assert _ue4m3(top).tolist() == [0x77] + [0x7E] * 7


def test_nvfp4_huge_elements_under_the_448_cap_quantize_to_zero() -> None:
    # d = 224 (0x7E halved): 1e30's errors all round to 1e30 itself, so level 0 (the first)
    # wins; 2688 = 12 * 224 is exact
    got = encode("NVFP4", block("NVFP4", 1e30, 2688.0, -1e30, 1344.0))
    assert got[0, :8].tolist() == [0x7E, 0, 0, 0, 0, 7, 0, 5]


def test_nvfp4_sub_blocks_and_nibble_order() -> None:
    # sub-block s holds j * (-2)**s for j < 16: amax 15 * 2**s, q = 2.5 * 2**s, ue 0x42 + 8 s,
    # d = 1.25 * 2**s (levels 1.25, 2.5, 3.75, 5, 7.5, 10, 15 times 2**s)
    x = np.concatenate([np.arange(16, dtype=np.float32) * f32((-2.0) ** s) for s in range(4)])
    got = encode("NVFP4", x)[0]
    assert got[:4].tolist() == [0x42, 0x4A, 0x52, 0x5A]
    # j = 0 ... 15 -> codes 0 1 2 2 3 4 4 5 | 5 6 6 6 6 7 7 7 (ties to the smaller level);
    # byte j of a sub-block's 8: element j low, element j + 8 high
    codes = np.array([0, 1, 2, 2, 3, 4, 4, 5, 5, 6, 6, 6, 6, 7, 7, 7])
    for s in range(4):
        c = codes | (8 * (s % 2) * (codes != 0))
        assert got[4 + 8 * s : 12 + 8 * s].tolist() == (c[:8] | c[8:] << 4).tolist()
