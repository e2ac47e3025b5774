"""The i-quant decoders on hand-made blocks whose values can be worked out by hand.

Each block sets a few fields (scale, grid index and its high bits, signs or delta)
and the test states every value ggml's ``dequantize_row_*`` gives for it, worked
from the block layout and the grid entries named in the comments; the numpy
decoder and the driver on each backend must all give those bits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import decode as _decode
from kiln_np._quants import iquants
from kiln_np._quants.blocks import BLOCKS

Decode = Callable[[str, np.ndarray], np.ndarray]

ONE = [0x00, 0x3C]  # f16 1.0
TWO = [0x00, 0x40]  # f16 2.0


@pytest.fixture
def decode(monkeypatch: pytest.MonkeyPatch) -> Decode:
    """The values of one block, the same bytes from numpy and from each backend."""

    def run(name: str, block: np.ndarray) -> np.ndarray:
        got: list[np.ndarray] = [iquants.DECODERS[name].values(block[None])[0]]
        for compiled in (True, False) if _backend.COMPILED else (False,):
            monkeypatch.setattr(_backend, "COMPILED", compiled)
            out = np.empty(BLOCKS[name].elements, np.float32)
            _decode.dequantize_into(name, block, out)
            got.append(out)
        for other in got[1:]:
            assert other.view(np.uint32).tolist() == got[0].view(np.uint32).tolist()
        return got[0]

    return run


def block_of(name: str, fields: dict[int, list[int]]) -> np.ndarray:
    """A zero block of type ``name`` with ``fields`` (byte offset -> bytes) set."""
    block = np.zeros(BLOCKS[name].bytes, np.uint8)
    for at, data in fields.items():
        block[at : at + len(data)] = data
    return block


def values(groups: dict[int, list[float]], rest: float) -> list[int]:
    """The float32 bits of 256 values: ``groups`` (first index -> values), ``rest`` elsewhere."""
    out = np.full(256, rest, np.float32)
    for at, group in groups.items():
        out[at : at + len(group)] = group
    return bits(out)


def bits(got: np.ndarray) -> list[int]:
    out: list[int] = got.view(np.uint32).tolist()
    return out


def test_iq2_xxs(decode: Decode) -> None:
    # Group 0: grid index 1 (iq2xxs_grid[1] = 0x080808080808082b: 43, 8, ..., 8), sign
    # index 1 (ksigns_iq2xs[1] = 0x81: values 0 and 7 negative); sub-block 0's ls = 15,
    # db = 1 * (0.5 + 15) * 0.25 = 3.875.  Elsewhere index 0 (eight 8s): 31 in sub-block
    # 0, 8 * (0.5 * 0.25) = 1 in the others.
    block = block_of("IQ2_XXS", {0: ONE, 2: [1], 6: [1], 9: [0xF0]})
    got = decode("IQ2_XXS", block)
    assert bits(got) == values({0: [-166.625, *[31.0] * 6, -31.0], 8: [31.0] * 24}, 1.0)
    scales = iquants.DECODERS["IQ2_XXS"].scales(block[None])
    assert scales["d"].tolist() == [1.0]
    assert scales["ls"].tolist() == [[15, 0, 0, 0, 0, 0, 0, 0]]


def test_a_nan_scale_keeps_its_payload_and_takes_the_sign(decode: Decode) -> None:
    # d = f16 0x7e01 (a quiet NaN with payload 1): each value is the NaN, its sign bit
    # flipped where the value's sign bit is set, as ggml's build gives it.
    block = block_of("IQ2_XXS", {0: [0x01, 0x7E], 6: [1]})
    got = bits(decode("IQ2_XXS", block))
    assert got[:8] == [0xFFC02000, *[0x7FC02000] * 6, 0xFFC02000]
    assert set(got[8:]) == {0x7FC02000}


def test_iq2_xs(decode: Decode) -> None:
    # qs[0] = 1 | 1 << 9: grid index 1 (43, 8, ...), sign index 1 (0x81); scales[0] = 0x21:
    # values 0-15 have db = (0.5 + 1) * 0.25 = 0.375, values 16-31 (0.5 + 2) * 0.25 = 0.625.
    block = block_of("IQ2_XS", {0: ONE, 2: [0x01, 0x02], 66: [0x21]})
    got = decode("IQ2_XS", block)
    assert bits(got) == values({0: [-16.125, *[3.0] * 6, -3.0], 8: [3.0] * 8, 16: [5.0] * 16}, 1.0)
    ls = iquants.DECODERS["IQ2_XS"].scales(block[None])["ls"]
    assert ls.tolist() == [[1, 2, *[0] * 14]]


def test_iq2_s(decode: Decode) -> None:
    # d = 2, db = 2 * (0.5 + 0) * 0.25 = 0.25 everywhere.  Group 0: qh[0] = 0b01 puts bit 8 in
    # its index: iq2s_grid[256] = 0x0819081919191919 (25, 25, 25, 25, 25, 8, 25, 8); its
    # sign byte 0x80 makes value 7 negative.  Values 56-63 (sub-block 1, group 3): qh[1] =
    # 0xc0, index 768: 0x192b080819082b08 (8, 43, 8, 25, 8, 8, 43, 25).
    block = block_of("IQ2_S", {0: TWO, 34: [0x80], 66: [0x01, 0xC0]})
    got = decode("IQ2_S", block)
    groups = {
        0: [6.25, 6.25, 6.25, 6.25, 6.25, 2.0, 6.25, -2.0],
        56: [2.0, 10.75, 2.0, 6.25, 2.0, 2.0, 10.75, 6.25],
    }
    assert bits(got) == values(groups, 2.0)


def test_iq3_xxs(decode: Decode) -> None:
    # Group 0: qs[0] = 1 (iq3xxs_grid[1] = 0x04040414: 20, 4, 4, 4) then qs[1] = 0 (4, 4,
    # 4, 4); sub-block 0's word: sign index 1 (0x81), ls = 1, db = (0.5 + 1) * 0.5 = 0.75.
    # Elsewhere 4 * (0.5 * 0.5) = 1.
    block = block_of("IQ3_XXS", {0: ONE, 2: [1], 66: [1, 0, 0, 0x10]})
    got = decode("IQ3_XXS", block)
    assert bits(got) == values({0: [-15.0, *[3.0] * 6, -3.0], 8: [3.0] * 24}, 1.0)
    ls = iquants.DECODERS["IQ3_XXS"].scales(block[None])["ls"]
    assert ls.tolist() == [[1, 0, 0, 0, 0, 0, 0, 0]]


def test_iq3_s(decode: Decode) -> None:
    # scales[0] = 0x31: sub-block 0 has db = 1 + 2*1 = 3, sub-block 1 db = 1 + 2*3 = 7,
    # the others 1.  Group 0: qs = 1, 0 with qh[0] = 0b10 (bit 8 of the second index):
    # iq3s_grid[1] = 0x01010103 (3, 1, 1, 1), iq3s_grid[256] = 0x05090507 (7, 5, 9, 5);
    # its sign byte 0x01 makes value 0 negative.  Elsewhere iq3s_grid[0]: four 1s.
    block = block_of("IQ3_S", {0: ONE, 2: [1], 66: [0b10], 74: [0x01], 106: [0x31]})
    got = decode("IQ3_S", block)
    groups = {0: [-9.0, 3.0, 3.0, 3.0, 21.0, 15.0, 27.0, 15.0], 8: [3.0] * 24, 32: [7.0] * 32}
    assert bits(got) == values(groups, 1.0)
    ls = iquants.DECODERS["IQ3_S"].scales(block[None])["ls"]
    assert ls.tolist() == [[1, 3, 0, 0, 0, 0, 0, 0]]


def test_iq1_s(decode: Decode) -> None:
    # qh[0] = 0xa000: ls = 2 (dl = 2*2 + 1 = 5) and bit 15 (delta = -0.125); group 0's
    # index 1: iq1s_grid[1] = 0xffffffffffffff01 (1, -1, ..., -1).  qh[1] = 1 << 3: sub-block
    # 1's group 1 (values 40-47) has index 256, 0xff00ff01000100ff (-1, 0, 1, 0, 1, -1, 0, -1),
    # dl = 1, delta = +0.125.  Elsewhere iq1s_grid[0] (eight -1s).
    block = block_of("IQ1_S", {0: ONE, 2: [1], 34: [0x00, 0xA0, 0x08, 0x00]})
    got = decode("IQ1_S", block)
    groups = {
        0: [4.375, *[-5.625] * 7],
        8: [-5.625] * 24,
        40: [-0.875, 0.125, 1.125, 0.125, 1.125, -0.875, 0.125, -0.875],
    }
    assert bits(got) == values(groups, -0.875)
    scales = iquants.DECODERS["IQ1_S"].scales(block[None])
    assert scales["ls"].tolist() == [[2, 0, 0, 0, 0, 0, 0, 0]]
    assert scales["delta"].tolist() == [[-0.125, *[0.125] * 7]]


def test_iq1_m(decode: Decode) -> None:
    # d = f16 0x3c00 = 1 from the scales' top nibbles (0x0, 0x0, 0xc, 0x3 in order of
    # significance); scales[0] = 0x0011: values 0-15 have ls = 1 (dl = 3), 16-31 ls = 2
    # (dl = 5), the rest dl = 1.  qh[0] = 0x18: group 0 (index 1, iq1s_grid[1] = 1, -1, ...)
    # has delta -0.125; group 1 has index 256 (-1, 0, 1, 0, 1, -1, 0, -1) and delta 0.125.
    block = block_of("IQ1_M", {0: [1], 32: [0x18], 48: [0x11, 0, 0, 0, 0, 0xC0, 0, 0x30]})
    got = decode("IQ1_M", block)
    groups = {
        0: [2.625, *[-3.375] * 7],
        8: [-2.625, 0.375, 3.375, 0.375, 3.375, -2.625, 0.375, -2.625],
        16: [-4.375] * 16,
    }
    assert bits(got) == values(groups, -0.875)
    scales = iquants.DECODERS["IQ1_M"].scales(block[None])
    assert scales["d"].tolist() == [1.0]
    assert scales["ls"].tolist() == [[1, 2, *[0] * 14]]
    assert scales["delta"].tolist() == [[-0.125, *[0.125] * 31]]


# Sub-block scales per block: (count, largest value) of ls, and of delta where the type has one.
SCALE_SHAPES = {
    "IQ2_XXS": (8, 15),
    "IQ2_XS": (16, 15),
    "IQ2_S": (16, 15),
    "IQ3_XXS": (8, 15),
    "IQ3_S": (8, 15),
    "IQ1_S": (8, 7),
    "IQ1_M": (16, 7),
}
DELTAS = {"IQ1_S": 8, "IQ1_M": 32}


@pytest.mark.parametrize("name", sorted(iquants.DECODERS))
def test_scales_are_the_fields_values_are_built_from(name: str) -> None:
    blocks = np.random.default_rng(3).integers(0, 256, (50, BLOCKS[name].bytes), np.uint8)
    scales = iquants.DECODERS[name].scales(blocks)
    count, top = SCALE_SHAPES[name]
    assert sorted(scales) == sorted(["d", "ls"] + (["delta"] if name in DELTAS else []))
    assert scales["d"].dtype.name == "float32"
    assert scales["d"].shape == (50,)
    assert scales["ls"].dtype.name == "uint8"
    assert scales["ls"].shape == (50, count)
    assert int(scales["ls"].max()) == top
    if name in DELTAS:
        assert scales["delta"].shape == (50, DELTAS[name])
        assert set(scales["delta"].ravel().tolist()) == {-0.125, 0.125}
