"""Hand-made blocks of the one-scale GGML types (Q4_0 ... Q8_0, Q1_0, Q2_0) and the
ternary TQ1_0, TQ2_0, each with the bytes ggml's ``quantize_row_*_ref`` writes for it,
worked out from its C and stated here; on both backends.

The corners: rounding ties, the sign of zero (ggml keeps the *first* element among
equal ones: Q4_0's largest magnitude, Q4_1's minimum), all-equal blocks, scales whose
``1/d`` overflows (C's float-to-int conversions of infinities and NaNs) and scales
beyond f16, and the order ggml packs nibbles, fifth bits, bit signs and trits in.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

BACKENDS = (True, False) if _backend.COMPILED else (False,)
F16_ONE = [0x00, 0x3C]  # 1.0 as little-endian f16
F16_NEG_ZERO = [0x00, 0x80]


def encode(
    name: str, values: list[float], compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """One block of ``name`` from ``values`` (padded with zeros), on one backend."""
    block = BLOCKS[name]
    x = np.zeros(block.elements, np.float32)
    x[: len(values)] = values
    out = np.empty(block.bytes, np.uint8)
    monkeypatch.setattr(_backend, "COMPILED", compiled)
    assert _quantize.quantize_into(name, x, out) == -1
    result: list[int] = out.tolist()
    return result


@pytest.fixture(params=BACKENDS, ids=lambda c: "compiled" if c else "numpy")
def compiled(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


# --- Q8_0 -------------------------------------------------------------------------


def test_q8_0_rounds_halves_away_from_zero(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 127 / 127 = 1: q = roundf(x).
    got = encode("Q8_0", [127.0, 0.5, -0.5, 1.5, -2.5, 2.4999998, -127.0], compiled, monkeypatch)
    assert got[:2] == F16_ONE
    assert got[2:9] == [127, 1, 0xFF, 2, 0xFD, 2, 0x81]
    assert got[9:] == [0] * 25


def test_q8_0_all_zero_and_negative_zero(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # amax = MAX(0, fabsf(-0.0)) = +0.0: d = +0.0, id = 0, q = roundf(-0.0 * 0) = 0.
    assert encode("Q8_0", [-0.0] * 32, compiled, monkeypatch) == [0] * 34


def test_q8_0_tiny_scale_overflows_its_inverse(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # max 1e-40 (subnormal): d = 1e-40/127 ~ 2**-140, 1/d = inf; x*inf is an infinity
    # (or NaN for 0 * inf): x86-64's conversion gives INT_MIN, whose low byte is 0.
    # d is below the smallest f16: 0.
    assert encode("Q8_0", [1e-40, -1e-40, 5e-41], compiled, monkeypatch) == [0] * 34


def test_q8_0_scale_beyond_f16(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 127 * 2**20 / 127 = 2**20 > 65504: f16 infinity; the quants are still x / d.
    got = encode("Q8_0", [127 * 2.0**20, -63.5 * 2.0**20, 0.25 * 2.0**20], compiled, monkeypatch)
    assert got[:2] == [0x00, 0x7C]
    assert got[2:5] == [127, 0xC0, 0]  # roundf(-63.5) = -64, roundf(0.25) = 0


# --- Q4_0 / Q5_0 ------------------------------------------------------------------


def test_q4_0_scale_follows_the_first_largest_magnitude(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # [-4, 4]: max = -4 (the later +4 is not larger): d = -4 / -8 = 0.5, id = 2;
    # q = MIN(15, (int8_t)(x*2 + 8.5)): -4 -> 0, 4 -> 16 -> 15, 0 -> 8.
    got = encode("Q4_0", [-4.0, 4.0], compiled, monkeypatch)
    assert got[:2] == [0x00, 0x38]  # 0.5
    assert got[2:4] == [0x80, 0x8F]  # q[0] | q[16] << 4, q[1] | q[17] << 4
    # [4, -4]: max = 4, d = -0.5, id = -2: 4 -> 0, -4 -> 15.
    got = encode("Q4_0", [4.0, -4.0], compiled, monkeypatch)
    assert got[:2] == [0x00, 0xB8]  # -0.5
    assert got[2:4] == [0x80, 0x8F]


def test_q4_0_all_zero_block_has_a_negative_zero_scale(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # max stays +0.0 (never replaced: 0 < 0 is false), d = 0 / -8 = -0.0; q = 8.
    for zeros in ([0.0] * 32, [-0.0] * 32):
        got = encode("Q4_0", zeros, compiled, monkeypatch)
        assert got == F16_NEG_ZERO + [0x88] * 16


def test_q4_0_ties_of_8_5(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # max = -8: d = 1, id = 1; x + 8.5 truncated: -8 -> 0 (0.5), -0.5 -> 8 (8.0),
    # 0.5 -> 9 (9.0), 7.5 -> 16 -> 15.
    got = encode("Q4_0", [-8.0, -0.5, 0.5, 7.5], compiled, monkeypatch)
    assert got[:2] == F16_ONE
    assert got[2:6] == [0x80, 0x88, 0x89, 0x8F]


def test_q5_0_fifth_bits_and_nibbles(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # max = 16: d = -1, id = -1; q = MIN(31, (int8_t)(16.5 - x)): 16 -> 0, -16 -> 31,
    # 0 -> 16 (fifth bit set), 1 -> 15.
    values = [16.0, -16.0, 0.0, 1.0] + [0.0] * 12 + [1.0] + [0.0] * 15
    got = encode("Q5_0", values, compiled, monkeypatch)
    assert got[:2] == [0x00, 0xBC]  # -1.0
    qh = int.from_bytes(bytes(got[2:6]), "little")
    # bit j is bit 4 of q[j]: q[0] = 0, q[1] = 31, q[3] = 15, q[16] = 15; the rest 16.
    assert qh == 0xFFFFFFFF & ~(1 << 0) & ~(1 << 3) & ~(1 << 16)
    assert got[6:10] == [0xF0, 0x0F, 0x00, 0x0F]  # (q[j] & 15) | (q[j+16] & 15) << 4


# --- Q4_1 / Q5_1 ------------------------------------------------------------------


def test_q4_1_keeps_the_first_zero_as_its_minimum(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # min is the first element equal to the least: +0.0 then -0.0 keeps +0.0 ...
    got = encode("Q4_1", [0.0, -0.0, 15.0], compiled, monkeypatch)
    assert got[:4] == [*F16_ONE, 0, 0]
    assert got[4:7] == [0x00, 0x00, 0x0F]
    # ... and -0.0 then +0.0 keeps -0.0.
    got = encode("Q4_1", [-0.0, 0.0, 15.0], compiled, monkeypatch)
    assert got[:4] == F16_ONE + F16_NEG_ZERO


def test_q4_1_all_equal_block(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # max = min = 3: d = +0.0, id = 0, q = (int8_t)(0 + 0.5) = 0; m = 3.0 (0x4200).
    assert encode("Q4_1", [3.0] * 32, compiled, monkeypatch) == [0, 0, 0x00, 0x42] + [0] * 16
    # all zeros of mixed signs: max - min is the first element minus itself, +0.0;
    # m is the first element, -0.0 here.
    got = encode("Q4_1", [-0.0, 0.0] * 16, compiled, monkeypatch)
    assert got == [0, 0] + F16_NEG_ZERO + [0] * 16


def test_q4_1_range_overflows(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # max - min = 6e38 = inf: d = inf (f16 0x7c00), id = 1/inf = 0, and (x - min) * 0 is
    # 0 or NaN (inf * 0): every quant 0; m = -3e38 beyond f16: -inf (0xfc00).
    got = encode("Q4_1", [3e38, -3e38, 1.0], compiled, monkeypatch)
    assert got == [0x00, 0x7C, 0x00, 0xFC] + [0] * 16


def test_q4_1_rounds_half_up_from_the_minimum(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # min = -1, max = 14: d = 1; q = (int8_t)(x + 1 + 0.5): 14 -> 15, -0.5 -> 1 (1.0),
    # 0.4999 -> 1, 0.5 -> 2.
    got = encode("Q4_1", [-1.0, 14.0, -0.5, 0.49999, 0.5], compiled, monkeypatch)
    assert got[:4] == [*F16_ONE, 0, 188]
    assert got[4:9] == [0x10, 0x1F, 0x11, 0x11, 0x12]  # q[16..]: 0 + 1 + 0.5 -> 1


def test_q5_1_fifth_bits(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # min = 0, max = 31: d = 1, q = (uint8_t)(x + 0.5): 31 -> 31, 16 -> 16, 15.5 -> 16.
    values = [0.0, 31.0, 16.0, 15.5, 15.49] + [0.0] * 27
    got = encode("Q5_1", values, compiled, monkeypatch)
    assert got[:4] == [*F16_ONE, 0, 0]
    assert int.from_bytes(bytes(got[4:8]), "little") == 0b01110
    assert got[8:13] == [0x00, 0x0F, 0x00, 0x00, 0x0F]


# --- Q1_0 / Q2_0 ------------------------------------------------------------------


def test_q1_0_signs_and_mean(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # bit j set when x[j] >= 0, -0.0 included (zeros pad the block: set too);
    # d = (0 + 1 + 1.5 + 0.5 + 1) / 128 = 2**-5.
    got = encode("Q1_0", [-0.0, -1.0, 1.5, -0.5, 1.0], compiled, monkeypatch)
    assert got[:2] == [0x00, 0x28]
    assert got[2] == 0b11110101
    assert got[3:] == [0xFF] * 15


def test_q1_0_all_negative(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 128 * 2 / 128 = 2, no bits.
    assert encode("Q1_0", [-2.0] * 128, compiled, monkeypatch) == [0x00, 0x40] + [0] * 16


def test_q2_0_ties_and_packing(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 2, id = 0.5: q = (int)roundf(x/2) + 1: -2 -> 0, 1 -> 2 (0.5 up), -1 -> 0
    # (-0.5 away), 0 -> 1; four a byte, the first in the low bits.
    got = encode("Q2_0", [-2.0, 1.0, -1.0, 0.0, 2.0], compiled, monkeypatch)
    assert got[:2] == [0x00, 0x40]
    assert got[2] == 0 | 2 << 2 | 0 << 4 | 1 << 6
    assert got[3] == 2 | 1 << 2 | 1 << 4 | 1 << 6
    assert got[4:] == [0x55] * 14


def test_q2_0_tiny_block(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 1e-40: 1/d = inf, roundf(inf or NaN) as int is INT_MIN, + 1 clamps to 0.
    assert encode("Q2_0", [1e-40, -1e-40], compiled, monkeypatch) == [0, 0] + [0] * 16


# --- TQ1_0 / TQ2_0 ----------------------------------------------------------------


def test_tq1_0_packing_order(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 1; trits x + 1.  Byte m < 32 holds x[m + 32n] (n = 0 most significant),
    # byte 32 + m < 48 holds x[160 + m + 16n], qh[j] holds x[240 + j + 4n] then a zero
    # trit; each byte is ceil(value * 256 / 243).  All-zero trits (1s): 121 -> 128,
    # qh 120 -> 127.
    x = [0.0] * 256
    x[0], x[32 * 4 + 1], x[160], x[240], x[255] = 1.0, -1.0, -1.0, 1.0, -1.0
    got = encode("TQ1_0", x, compiled, monkeypatch)
    assert got[0] == (202 * 256 + 242) // 243 == 213  # 2,1,1,1,1
    assert got[1] == (120 * 256 + 242) // 243 == 127  # 1,1,1,1,0
    assert got[2:32] == [128] * 30
    assert got[32] == (40 * 256 + 242) // 243 == 43  # 0,1,1,1,1
    assert got[33:48] == [128] * 15
    assert got[48] == (67 * 3 * 256 + 242) // 243 == 212  # 2,1,1,1 (x[240])
    assert got[49:51] == [127, 127]
    assert got[51] == (39 * 3 * 256 + 242) // 243 == 124  # 1,1,1,0 (x[255])
    assert got[52:] == F16_ONE


def test_tq1_0_rounding_and_tiny(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 2: x/d = 0.5 rounds away to 1 (trit 2), -0.5 to -1 (trit 0), 0.4 to 0.
    got = encode("TQ1_0", [2.0, 1.0, -1.0, 0.8], compiled, monkeypatch)
    assert got[:4] == [213, 213, 43, 128]
    assert got[52:] == [0x00, 0x40]
    # 1/d = inf: lroundf of inf or NaN is LONG_MIN, + 1 kept in an int is 1 (trit 1).
    got = encode("TQ1_0", [1e-40, -1e-40], compiled, monkeypatch)
    assert got == [128] * 48 + [127] * 4 + [0, 0]


def test_tq2_0_packing_order(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # byte 32h + m holds x[128h + m + 32n] in bits 2n; trit x + 1.
    x = [0.0] * 256
    x[128 + 96 + 5], x[32], x[255] = 1.0, -1.0, -1.0
    got = encode("TQ2_0", x, compiled, monkeypatch)
    assert got[0] == 1 | 0 << 2 | 1 << 4 | 1 << 6
    assert got[32 + 5] == 1 | 1 << 2 | 1 << 4 | 2 << 6
    assert got[63] == 1 | 1 << 2 | 1 << 4 | 0 << 6
    assert got[1:32] == [0x55] * 31
    assert got[64:] == F16_ONE
    got = encode("TQ2_0", [5e-41] * 256, compiled, monkeypatch)  # 1/d = inf: trits 1
    assert got == [0x55] * 64 + [0, 0]
