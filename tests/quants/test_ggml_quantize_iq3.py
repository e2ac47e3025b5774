"""The IQ3_S encoder on hand-made blocks: the bytes ggml's ``ggml_quantize_chunk``
writes for them (checked against libggml-base 0.25.3), on both backends, with why
each is what it is; ggml's tables as ``iq3xs_init_impl`` builds them; where ggml aborts.

A block of 256 is 8 sub-blocks of 32 and 64 groups of 4; its bytes are f16 ``d``,
``qs`` (64: each group's grid index, low byte), ``qh`` (8: bit 8 of the indices,
one byte per sub-block), ``signs`` (32: a bit per value) and ``scales`` (4: a nibble
per sub-block).
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln_np import KilnError, gguf
from kiln_np._kernels import backend as _backend
from kiln_np._quants import encode_iq3
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.grids import IQ3S_GRID

BACKENDS = (True, False) if _backend.COMPILED else (False,)
GRID = IQ3S_GRID.view(np.uint8).reshape(512, 4)  # the values 2 l + 1 of each point


def quantize(x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """``x`` (whole blocks) as IQ3_S on each backend."""
    src = np.ascontiguousarray(x, np.float32).reshape(-1)
    found = []
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(src.size // 256 * 110, np.uint8)
        assert _quantize.quantize_into("IQ3_S", src, out) == -1
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


def ggml_neighbours(u: int) -> list[int]:
    """iq3xs_init_impl(512)'s list for quadruple u, transcribed: every grid point by
    (distance, index), taken while the distance is among the first three seen."""
    pos = [2 * ((u >> (3 * k)) & 7) + 1 for k in range(4)]
    dist = sorted((sum((int(GRID[j][k]) - pos[k]) ** 2 for k in range(4)), j) for j in range(512))
    out, have, d2 = [], 1, dist[0][0]
    for d, j in dist:
        if d > d2:
            if have == 3:
                break
            d2, have = d, have + 1
        out.append(j)
    return out


def test_the_tables_are_iq3xs_init_impl_s() -> None:
    levels = (GRID.astype(int) - 1) // 2
    on_grid = {int(sum(int(levels[j][k]) << (3 * k) for k in range(4))): j for j in range(512)}
    assert len(on_grid) == 512
    rng = np.random.default_rng(3)
    for u in [*range(64), *rng.integers(0, 4096, 300).tolist(), 4095]:
        assert encode_iq3.neighbours(u) == ([] if u in on_grid else ggml_neighbours(u)), u
    total = [len(encode_iq3.neighbours(u)) for u in range(4096)]
    assert sum(total) == 24733  # the compiled kernel's NEIGHBOURS
    assert max(total) == 38
    assert sum(1 for n in total if n) == 4096 - 512


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
