"""The IQ3_XXS and IQ3_S encoders on hand-made blocks, without an importance matrix and
with one: the bytes ggml's ``ggml_quantize_chunk`` writes for them (checked against
libggml-base 0.25.3), on both backends, with why each is what it is; ggml's tables as
``iq3xs_init_impl`` builds them for both grids; where ggml aborts.

A block of 256 is 8 sub-blocks of 32 and 64 groups of 4.  IQ3_S's bytes are f16 ``d``,
``qs`` (64: each group's grid index, low byte), ``qh`` (8: bit 8 of the indices,
one byte per sub-block), ``signs`` (32: a bit per value) and ``scales`` (4: a nibble
per sub-block).  IQ3_XXS's are f16 ``d``, 64 grid indices (a byte each: 256 points)
and per sub-block a little-endian uint32: four 7-bit sign groups, then its scale
nibble in bits 28 ... 31.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln_np import KilnError, gguf
from kiln_np._kernels import backend as _backend
from kiln_np._quants import encode_iq3
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.grids import IQ3S_GRID, IQ3XXS_GRID

BACKENDS = (True, False) if _backend.COMPILED else (False,)
GRID = IQ3S_GRID.view(np.uint8).reshape(512, 4)  # the values 2 l + 1 of each point
XXS_LEVELS = (IQ3XXS_GRID.view(np.uint8).reshape(256, 4).astype(int) - 4) // 8  # 8 l + 4; 62
POSITIONS = {512: GRID.astype(int), 256: 2 * XXS_LEVELS + 1}  # each grid's 2 l + 1


def quantize(
    x: np.ndarray,
    monkeypatch: pytest.MonkeyPatch,
    name: str = "IQ3_S",
    weights: np.ndarray | None = None,
) -> list[bytes]:
    """``x`` (whole blocks) as ``name`` on each backend, with importance ``weights``
    (a row of ``x.size``) or none."""
    src = np.ascontiguousarray(x, np.float32).reshape(-1)
    qw = None if weights is None else np.ascontiguousarray(weights, np.float32)
    found = []
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(src.size // 256 * BLOCKS[name].bytes, np.uint8)
        assert _quantize.quantize_into(name, src, out, qw) == -1
        found.append(out.tobytes())
    return found


def fields(block: bytes) -> dict[str, bytes]:
    return {
        "d": block[:2],
        "qs": block[2:66],
        "qh": block[66:74],
        "signs": block[74:106],
        "scales": block[106:110],
    }


def ggml_neighbours(u: int, grid: int = 512) -> list[int]:
    """iq3xs_init_impl(grid)'s list for quadruple u, transcribed: every grid point by
    (distance, index), taken while the distance is among the first nwant seen (3 for
    the 512-point grid, 2 for the 256-point one)."""
    points, nwant = POSITIONS[grid], 3 if grid == 512 else 2
    pos = [2 * ((u >> (3 * k)) & 7) + 1 for k in range(4)]
    dist = sorted(
        (sum((int(points[j][k]) - pos[k]) ** 2 for k in range(4)), j) for j in range(grid)
    )
    out, have, d2 = [], 1, dist[0][0]
    for d, j in dist:
        if d > d2:
            if have == nwant:
                break
            d2, have = d, have + 1
        out.append(j)
    return out


@pytest.mark.parametrize(
    ("grid", "total", "longest"),
    [(512, 24733, 38), (256, 18985, 36)],  # the compiled kernel's S_ and XXS_NEIGHBOURS
)
def test_the_tables_are_iq3xs_init_impl_s(grid: int, total: int, longest: int) -> None:
    levels = (POSITIONS[grid] - 1) // 2
    on_grid = {int(sum(int(levels[j][k]) << (3 * k) for k in range(4))): j for j in range(grid)}
    assert len(on_grid) == grid
    rng = np.random.default_rng(3)
    for u in [*range(64), *rng.integers(0, 4096, 300).tolist(), 4095]:
        want = [] if u in on_grid else ggml_neighbours(u, grid)
        assert encode_iq3.neighbours(u, grid) == want, u
    lengths = [len(encode_iq3.neighbours(u, grid)) for u in range(4096)]
    assert sum(lengths) == total
    assert max(lengths) == longest
    assert sum(1 for n in lengths if n) == 4096 - grid


def test_the_256_point_grid_is_kgrid_256() -> None:
    # ggml's kgrid_256 lists each point's quadruple u, in ascending order; iq3xxs_grid
    # (the decoders') holds the same points in the same order as values 8 l + 4 (62 for
    # level 7).  Its first and last eight entries, from ggml-quants.c:
    u = (XXS_LEVELS << np.array([0, 3, 6, 9])).sum(axis=1).tolist()
    assert u == sorted(set(u))
    assert u[:8] == [0, 2, 4, 9, 11, 15, 16, 18]
    assert u[-8:] == [3803, 3824, 3857, 3873, 3904, 3906, 3924, 3992]


def test_zero_block_is_all_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    # every sub-block skipped: d, scales, qs, qh and signs all stay as memset left them
    assert quantize(np.zeros(256), monkeypatch) == [bytes(110)] * len(BACKENDS)


def test_grid_points_have_scale_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Grid points 0 ... 63 in order, their values 2 l + 1 as they are: a trial maps each
    # sub-block's values onto its own levels (15 / max = 1, or 13.2 / 13 for sub-block 1,
    # whose largest value is 13), so sumqx = sumq2 and the scale is exactly 1 in every
    # sub-block: d = 1 / 31 * 1.033 (f16 0x2844), each nibble nearest_int(0.5 (31 - 1)) =
    # 15, qs the indices 0 ... 63, qh and signs 0.
    x = GRID[:64].reshape(256).astype(np.float32)
    want = bytes.fromhex("4428") + bytes(range(64)) + bytes(8 + 32) + b"\xff" * 4
    assert quantize(x, monkeypatch) == [want] * len(BACKENDS)


def test_a_zero_sub_block_shifts_the_later_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    # ggml's `if (!max) continue` comes before `qs += 8; signs += 4`: once sub-block 2 is
    # zero, sub-blocks 3 ... 7 write their groups and signs one place early and the last
    # place stays 0; qh is indexed by the sub-block itself.  Each sub-block's own search
    # does not depend on the others, so the bytes move and do not change.
    x = np.random.default_rng(5).standard_normal(256).astype(np.float32)
    x[64:96] *= np.float32(0.01)  # so that the largest scale, hence d, is not sub-block 2's
    holed = x.copy()
    holed[64:96] = 0
    whole, shifted = quantize(x, monkeypatch)[0], quantize(holed, monkeypatch)
    assert shifted == [shifted[0]] * len(BACKENDS)
    a, b = fields(whole), fields(shifted[0])
    assert b["d"] == a["d"]
    assert b["qs"] == a["qs"][:16] + a["qs"][24:] + bytes(8)
    assert b["signs"] == a["signs"][:8] + a["signs"][12:] + bytes(4)
    assert b["qh"] == a["qh"][:2] + b"\x00" + a["qh"][3:]
    assert b["scales"][1] & 0x0F == 0  # sub-block 2's nibble: scale 0
    assert b["scales"][1] >> 4 == a["scales"][1] >> 4


def test_negative_zero_is_zero_and_sets_no_sign(monkeypatch: pytest.MonkeyPatch) -> None:
    # All -0.0 but elements 40 (-2.5) and 41 (1.0): sub-blocks 0 and 2 ... 7 have max
    # -0.0, which is 0 (skipped), so sub-block 1 writes at place 0 of qs and signs.  Its
    # group 2 (2.5, 1, 0, 0; the zeros weigh nothing) becomes grid point 34 (15, 5, 3, 1)
    # at scale 2.5 / 15 in all but rounding: d (f16 0x1db5) = that / 31 * 1.033, its
    # nibble 15 (high half of scales[0]).  Only -2.5 has a sign bit (bit 0 of the
    # sub-block's second sign byte): -0.0 >= 0 in C.
    x = np.full(256, -0.0, np.float32)
    x[40], x[41] = -2.5, 1.0
    want = (
        bytes.fromhex("b51d")
        + bytes([0, 0, 34]) + bytes(61)  # qs
        + bytes(8)  # qh
        + bytes([0, 1]) + bytes(30)  # signs
        + bytes([0xF0, 0, 0, 0])
    )  # fmt: skip
    assert quantize(x, monkeypatch) == [want] * len(BACKENDS)


def test_an_underflowing_scale_still_writes_signs(monkeypatch: pytest.MonkeyPatch) -> None:
    # max 2**-149: the first scale max / 15 is 0, the weights x * x are 0, no trial has
    # sumq2 > 0 and the scale stays 0 (not above 0: no second pass).  The sub-blocks are
    # not skipped (max is not 0), so their signs are written, grid index 0 (levels 0);
    # max_scale 0 leaves d and the scales 0.
    x = np.zeros(256, np.float32)
    x[3::32] = -(2.0**-149)
    want = bytes(2 + 64 + 8) + bytes([0x08, 0, 0, 0]) * 8 + bytes(4)
    assert quantize(x, monkeypatch) == [want] * len(BACKENDS)


@pytest.mark.parametrize(("value", "signs"), [(15.0, 0x00), (-15.0, 0xFF)])
def test_levels_off_the_grid_take_a_neighbour(
    value: float, signs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every value 15: every group's levels 7 7 7 7 are off the grid; of its four
    # neighbours, (13 9 9 11), (13 11 11 7), (11 13 7 11) and (7 11 11 11), the first
    # (grid point 437: qs 0xb5, bit 8 set in qh) fits best, at the least-squares scale
    # 15 * 42 / 452 = 1.3938: d = that / 31 * 1.033 (f16 0x29f2), every nibble 15.
    # The signs are the only bytes -15 changes.
    assert encode_iq3.neighbours(4095) == [437, 338, 431, 441]
    want = bytes.fromhex("f229") + b"\xb5" * 64 + b"\xff" * 8 + bytes([signs]) * 32 + b"\xff" * 4
    assert quantize(np.full(256, value), monkeypatch) == [want] * len(BACKENDS)


def test_the_blocks_ggml_aborts_on_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # No search overflows below 2**38: such a block is quantized.  A block of 1e30
    # overflows every neighbour's distance, where ggml's GGML_ASSERT fires (the golden
    # file's "constant 1e+30" row, aborted in ggml's own process): refused at its start,
    # before the infinity after it, the blocks before it written.
    x = np.random.default_rng(8).standard_normal(3 * 256).astype(np.float32)
    x[300] = np.nextafter(np.float32(2.0**38), np.float32(0))
    assert len(set(quantize(x, monkeypatch))) == 1
    x[256:512] = 1e30
    x[700] = np.inf
    want = quantize(x[:256], monkeypatch)[0]
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        monkeypatch.setattr(_quantize, "_THREAD_MIN_ELEMENTS", 1)
        out = np.zeros(3 * 110, np.uint8)
        assert _quantize.quantize_into("IQ3_S", x, out) == 256
        assert out[:110].tobytes() == want
    with pytest.raises(KilnError, match=r"a block of 256 from index \(1, 0\) on which ggml"):
        gguf.quantize(x.reshape(3, 256), "iq3_s")
    with pytest.raises(KilnError, match="expected finite values"):  # past float32
        gguf.quantize(np.full(256, 1e39), "iq3_s")


def test_iq3_xxs_zero_block_is_all_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    assert quantize(np.zeros(256), monkeypatch, "IQ3_XXS") == [bytes(98)] * len(BACKENDS)


def test_iq3_xxs_grid_points_have_scale_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # As IQ3_S's: the 256-point grid's points 0 ... 63 as their values 2 l + 1 are
    # mapped onto their own levels by some trial, whose scale is exactly 1: d = 1 / 31 *
    # 1.0125 (f16 0x282e), every nibble 15 (bits 28 ... 31 of each word), the indices
    # 0 ... 63 a byte each, no signs.
    x = POSITIONS[256][:64].reshape(256).astype(np.float32)
    want = bytes.fromhex("2e28") + bytes(range(64)) + bytes.fromhex("000000f0") * 8
    assert quantize(x, monkeypatch, "IQ3_XXS") == [want] * len(BACKENDS)


def test_iq3_xxs_keeps_an_even_count_of_signs(monkeypatch: pytest.MonkeyPatch) -> None:
    # IQ3_XXS stores 7 sign bits per 8 values; the 8th is their parity.  Group 0 of
    # sub-block 0 has one negative value (x[5]), an odd count: the value of least
    # w x x (x**4 with no importance matrix), x[2] = 0.5, has its bit set too and is
    # searched as -0.5, so sub-block 0's word holds bits 2 and 5 (0x24) under its
    # nibble; the other sub-blocks, all ones, have no signs and the same indices.
    x = np.ones(256, np.float32)
    x[5], x[2] = -1.0, 0.5
    want = (
        bytes.fromhex("7f1a") + bytes([0xDC]) + bytes([0xA8]) * 7 + bytes([0xE5]) * 56
        + bytes.fromhex("240000f0") + bytes.fromhex("000000f0") * 7
    )  # fmt: skip
    assert quantize(x, monkeypatch, "IQ3_XXS") == [want] * len(BACKENDS)


def test_iq3_xxs_skips_sub_blocks_below_1e_8(monkeypatch: pytest.MonkeyPatch) -> None:
    # ggml's `if (max < GROUP_MAX_EPS_IQ3_XXS)`: a sub-block whose largest magnitude is
    # below 1e-8 is written as a zero one is (indices and word 0); IQ3_S searches it
    # (only a largest magnitude of 0 is skipped there).
    x = np.random.default_rng(5).standard_normal(256).astype(np.float32)
    x[64:96] *= np.float32(9e-9) / np.abs(x[64:96]).max()
    zeroed = x.copy()
    zeroed[64:96] = 0
    got = quantize(x, monkeypatch, "IQ3_XXS")
    assert got == quantize(zeroed, monkeypatch, "IQ3_XXS") == [got[0]] * len(BACKENDS)
    assert got[0][2 + 16 : 2 + 24] == bytes(8)
    assert got[0][66 + 8 : 66 + 12] == bytes(4)
    assert quantize(x, monkeypatch)[0] != quantize(zeroed, monkeypatch)[0]


def test_weights_of_zero_keep_the_first_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    # An importance matrix of zeros makes every weight 0: no trial has sumq2 > 0, so
    # each IQ3_XXS sub-block keeps the scale max / 15 and the levels 0 (grid point 0,
    # on the grid: no second pass).  The parity fix takes the first value of an odd
    # group (every w x x is 0) and negates its magnitude, which the largest magnitude
    # of the sub-block then skips.
    x = np.random.default_rng(6).standard_normal(256).astype(np.float32)
    negative = (x < 0).reshape(32, 8)
    odd = negative.sum(axis=1) % 2 == 1
    negative[:, 0] ^= odd
    xval = np.abs(x).reshape(32, 8)
    xval[:, 0] = np.where(odd, -xval[:, 0], xval[:, 0])
    scale = xval.reshape(8, 32).max(axis=1) / np.float32(15)
    d = scale.max() / np.float32(31)
    nibble = np.rint(np.float32(0.5) * (np.float32(1) / d * scale - np.float32(1)))
    bits = np.packbits(negative, axis=1, bitorder="little")[:, 0].astype(np.uint32) & 127
    words = (bits.reshape(8, 4) << np.array([0, 7, 14, 21], np.uint32)).sum(axis=1)
    words |= np.clip(nibble, 0, 15).astype(np.uint32) << 28
    want = np.float16(d * np.float32(1.0125)).tobytes() + bytes(64) + words.astype("<u4").tobytes()
    assert quantize(x, monkeypatch, "IQ3_XXS", np.zeros(256)) == [want] * len(BACKENDS)
    assert want.hex().startswith("cd1e")  # ggml's d for this block


def test_iq3_xxs_flips_a_negative_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every group of 8 is ones but x[3] = 0.001 and x[5] = -1: one negative, an odd
    # count, and the least w x x is x[3]'s (importance 0.9 against 1e-6 for the rest),
    # so x[3] gets a sign bit and is searched as -0.001.  With its weight it outweighs
    # the ones: every trial's sumqx is negative, and so is the scale kept.  ggml makes
    # it positive and flips the 7 sign bits of each group: ~(bits 3 and 5) = 0x57.
    x = np.ones(256, np.float32)
    weights = np.full(256, 1e-6, np.float32)
    x[3::8], x[5::8], weights[3::8] = 0.001, -1.0, 0.9
    word = 0x57 | 0x57 << 7 | 0x57 << 14 | 0x57 << 21 | 15 << 28
    want = bytes.fromhex("ea01") + bytes([0x34, 0xA8]) * 32 + word.to_bytes(4, "little") * 8
    assert quantize(x, monkeypatch, "IQ3_XXS", weights) == [want] * len(BACKENDS)


@pytest.mark.parametrize("name", ["IQ3_XXS", "IQ3_S"])
def test_an_importance_matrix_times_a_power_of_four_changes_nothing(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The weights qw * sqrt(sigma2 + x * x), their square roots (the neighbour search's)
    # and every sum scale exactly by 4**k, 2**k; every comparison and every scale
    # sumqx / sumq2 stays as it was.  The bytes differ from those without weights.
    rng = np.random.default_rng(11)
    x = rng.standard_normal(1024).astype(np.float32)
    qw = np.exp(rng.normal(0, 2, 512)).astype(np.float32)
    got = quantize(x, monkeypatch, name, qw)
    assert len(set(got)) == 1
    for k in (-6, 5):
        assert quantize(x, monkeypatch, name, qw * np.float32(4.0**k)) == got
    assert quantize(x, monkeypatch, name)[0] != got[0]


def test_huge_importance_weights_make_ggml_abort(monkeypatch: pytest.MonkeyPatch) -> None:
    # A block ggml quantizes without an importance matrix, and with weights of 1e32;
    # with 1e34 IQ3_S's search overflows (refused), IQ3_XXS's still does not; with 1e36
    # both abort, as ggml does (each checked against ggml in a child process).
    x = (np.random.default_rng(8).standard_normal(256) * 1e3).astype(np.float32)
    for name, weight, aborts in [
        ("IQ3_XXS", 1e32, False),
        ("IQ3_S", 1e32, False),
        ("IQ3_XXS", 1e34, False),
        ("IQ3_S", 1e34, True),
        ("IQ3_XXS", 1e36, True),
        ("IQ3_S", 1e36, True),
    ]:
        qw = np.full(256, weight, np.float32)
        for compiled in BACKENDS:
            monkeypatch.setattr(_backend, "COMPILED", compiled)
            out = np.zeros(BLOCKS[name].bytes, np.uint8)
            assert _quantize.quantize_into(name, x, out, qw) == (0 if aborts else -1)
        if not aborts:
            assert len(set(quantize(x, monkeypatch, name, qw))) == 1
    for name in ("IQ3_XXS", "IQ3_S"):
        quantize(x, monkeypatch, name)  # no importance matrix: quantized
