"""Q3_K and Q6_K encoders on hand-made blocks with stated values, on both backends.

Where a value is derived by hand the derivation is in the comment; the longer
blocks were checked against ggml 0.25.3's ``ggml_quantize_chunk`` (the golden
script's library).  Layouts: Q6_K is ``ql[128] qh[64] scales[16] (int8) d``,
Q3_K is ``hmask[32] qs[64] scales[12] d`` (``d`` a little-endian f16).
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

BACKENDS = (True, False) if _backend.COMPILED else (False,)
F = np.float32
LINE = np.linspace(-1, 1, 16, dtype=F)


def encoded(name: str, x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """The blocks of ``x`` (flat float32, whole blocks) as rows of bytes: every
    backend's driver and the numpy encoder alone must agree, and this is it."""
    block = BLOCKS[name]
    x = np.ascontiguousarray(x, F).reshape(-1)
    results = []
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(x.size // block.elements * block.bytes, np.uint8)
        assert _quantize.quantize_into(name, x, out) == -1
        results.append(out.reshape(-1, block.bytes))
    with np.errstate(all="ignore"):
        results.append(_quantize.ENCODERS[name](x.reshape(-1, block.elements)))
    for other in results[1:]:
        assert np.array_equal(results[0], other)
    return results[0]


def d_bits(name: str, block: np.ndarray) -> int:
    return int(block[-2]) | int(block[-1]) << 8


@pytest.mark.parametrize("name", ["Q3_K", "Q6_K"])
@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1e-40, -(2.0**-126), 9e-16, 1e20, -3e38],
    ids=["zero", "minus zero", "subnormal", "smallest normal", "below 1e-15", "1e20", "-3e38"],
)
def test_blocks_ggml_writes_as_zeros(
    name: str, value: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Below GROUP_MAX_EPS (1e-15) every sub-block is "all zero": scale 0, quants 0.
    # Large enough that both of the search's sums (weights x*x) overflow (constant x:
    # sumlx = 16 * 32 * x**3, suml2 = 16 * 1024 * x**2 for Q6_K; 4 and 16 for Q3_K;
    # from some 1.4e17 up), every sub-block's scale is inf / inf = NaN, which no
    # "fabsf(scale) > amax" picks: the block's largest scale is 0 and ggml writes
    # zeros (Q3_K: and keeps the search's quants, -4 + 4 = 0): ggml loses such blocks.
    got = encoded(name, np.full(256, value, F), monkeypatch)
    assert got.tolist() == [[0] * BLOCKS[name].bytes]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_q6_k_constant_block(sign: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each sub-block: max = sign, iscale = -32 / sign, l = -32 for every element,
    # scale = sumlx / suml2 = (16 * -32 * sign) / (16 * 1024) = -sign / 32; the other
    # 18 tries fit as well (not better).  Block: iscale = -128 / (-sign / 32) = 4096 * sign,
    # d = sign * 2**-12 (f16 0x0c00, or 0x8c00), scale bytes -128, quants -32 + 32 = 0.
    (got,) = encoded("Q6_K", np.full(256, sign, F), monkeypatch)
    assert got[:192].tolist() == [0] * 192
    assert got[192:208].view(np.int8).tolist() == [-128] * 16
    assert d_bits("Q6_K", got) == (0x0C00 if sign > 0 else 0x8C00)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_q3_k_constant_block(sign: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each sub-block: iscale = -4 / sign, l = -4, sumlx = -64 * sign, suml2 = 256; no move:
    # without one element sumlx is -60 * sign, not > 0 for sign 1, and for sign -1 the
    # element's best quant, nearest_int(-1 * 240 / 60), is -4 again; scale -sign / 4.
    # Block: iscale = -32 / (-sign / 4) = 128 * sign, 6-bit scales -32 + 32 = 0,
    # d = sign * 2**-7 (f16 0x2000, or 0xa000); requantized x / (d * -32) = -4: quants 0.
    (got,) = encoded("Q3_K", np.full(256, sign, F), monkeypatch)
    assert got[:108].tolist() == [0] * 108
    assert d_bits("Q3_K", got) == (0x2000 if sign > 0 else 0xA000)


@pytest.mark.parametrize(("name", "first_negative", "first_positive"), [
    ("Q3_K", 0xA44F, 0x244F),
    ("Q6_K", 0x9017, 0x1017),
])  # fmt: skip
def test_the_first_of_equal_magnitudes_is_the_max(
    name: str, first_negative: int, first_positive: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sub-blocks (-2, 2, 1, ..., 1) and (2, -2, 1, ..., 1): ggml's strict
    # "fabsf(x) > amax" keeps the first of -2 and 2, whose sign d takes.
    tail = [1.0] * 14
    a, b = (np.tile(np.array(head + tail, F), 16) for head in ([-2.0, 2.0], [2.0, -2.0]))
    (got_a,), (got_b,) = encoded(name, a, monkeypatch), encoded(name, b, monkeypatch)
    assert d_bits(name, got_a) == first_negative
    assert d_bits(name, got_b) == first_positive
    assert got_a[:-2].tolist() != got_b[:-2].tolist()


def test_q6_k_sub_block_below_eps_keeps_quants_0(monkeypatch: pytest.MonkeyPatch) -> None:
    # A ramp over [-1, 1] with sub-block 1 (elements 16 .. 31) at 1e-16: that sub-block's
    # make_qx_quants returns early with scale 0 and L = 0 (not the midpoint 32), the
    # scale byte is 0 and the requantization skips it (d = 0).  Sub-block 0's scale
    # would be 128 (its magnitude equals the largest, of the other sign): MIN(127, .).
    x = np.linspace(-1, 1, 256, dtype=F)
    x[16:32] = 1e-16
    (got,) = encoded("Q6_K", x, monkeypatch)
    assert got[192:208].view(np.int8).tolist() == [
        127, 0, 96, 80, 65, 48, 32, 16, -16, -32, -48, -65, -80, -96, -112, -128
    ]  # fmt: skip
    assert (got[16:32] & 0xF).tolist() == [0] * 16  # low 4 bits of elements 16 .. 31
    assert (got[128 + 16 : 128 + 32] & 3).tolist() == [0] * 16  # their high 2 bits
    assert d_bits("Q6_K", got) == 0x0BF7


def test_q3_k_sub_block_below_eps_keeps_quants_0(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same ramp: sub-block 1's scale is 0, its 6-bit scale nearest_int(0) + 32 = 32
    # (low nibble in byte 1's low half, 2 high bits in byte 9's bits 0-1), d = 0 for it,
    # so make_q3_quants' early L = 0 stays: hmask bit 0 and qs bits 0-1 of 16 .. 31 clear.
    x = np.linspace(-1, 1, 256, dtype=F)
    x[16:32] = 1e-16
    (got,) = encoded("Q3_K", x, monkeypatch)
    scales = got[96:108]
    assert (int(scales[1]) & 0xF) | (int(scales[9]) & 3) << 4 == 32
    assert (got[16:32] & 1).tolist() == [0] * 16
    assert (got[32 + 16 : 32 + 32] & 3).tolist() == [0] * 16
    assert scales.tolist() == [64, 128, 200, 29, 80, 148, 200, 252, 228, 230, 228, 244]
    assert d_bits("Q3_K", got) == 0x9F8D


def test_q6_k_sub_blocks_at_scales_2_to_the_minus_8_to_7(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sub-block j is linspace(-1, 1, 16) * 2**(j - 8): every search finds the same
    # quants; the scales quantize to -128 * 2**(j - 15): 0 for j < 8, where the
    # requantization is skipped and the search's quants stay -- the same bytes.
    x = np.tile(LINE, 16) * np.repeat(2.0 ** np.arange(-8, 8), 16).astype(F)
    (got,) = encoded("Q6_K", x, monkeypatch)
    assert got[:128].tobytes().hex() == "115599dd1166aaee2266aaff3377bbff" * 8
    assert got[128:192].tobytes().hex() == "0000000055555555aaaaaaaaffffffff" * 4
    assert got[192:208].view(np.int8).tolist() == [0] * 8 + [-(2**k) for k in range(8)]
    assert d_bits("Q6_K", got) == 0xA81C


def test_q3_k_sub_blocks_at_scales_2_to_the_minus_8_to_7(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.tile(LINE, 16) * np.repeat(2.0 ** np.arange(-8, 8), 16).astype(F)
    (got,) = encoded("Q3_K", x, monkeypatch)
    assert got.tobytes().hex() == (
        "00000000000000ffffffffffffffffff00000000000000ffffffffffffffffff"
        + "005555aaaaffff00005555aaaaffffff005555aaaaffff00005555aaaaffffff" * 2
        + "0000f0e0c08000006a6a5a1a68bc"
    )


@pytest.mark.parametrize(("name", "fields"), [
    # every quant 32 (0 in ql, 2 in each 2-bit qh field), scale bytes 0
    ("Q6_K", {0: [0] * 128, 128: [0xAA] * 64, 192: [0] * 16}),
    # every quant 4 (hmask set, qs 0), every 6-bit scale 32 (0b10 high bits)
    ("Q3_K", {0: [0xFF] * 32, 32: [0] * 64, 96: [0] * 8 + [0xAA] * 4}),
])  # fmt: skip
def test_an_infinite_largest_scale(
    name: str, fields: dict[int, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sub-blocks linspace(-1, 1, 16) * 2**(8j - 60): below 1e-15 for j < 2; from
    # 2**44 up w*x overflows (sumlx infinite) while suml2 does not: the largest
    # scale is infinite, iscale = -0, d = f16(1 / -0) = -inf (0xfc00), every scale
    # nearest_int(-0 * s) = 0 (NaN for the infinite one: 0 too), every requantized
    # x / (-inf * 0) = NaN -> nearest_int 0: the midpoint quant everywhere.
    x = np.tile(LINE, 16) * np.repeat(2.0 ** np.arange(-60, 68, 8), 16).astype(F)
    (got,) = encoded(name, x, monkeypatch)
    for offset, want in fields.items():
        assert got[offset : offset + len(want)].tolist() == want
    assert d_bits(name, got) == 0xFC00


@pytest.mark.parametrize("name", ["Q3_K", "Q6_K"])
def test_each_block_on_its_own(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The blocks above side by side encode as they do alone.
    x = np.linspace(-1, 1, 256, dtype=F)
    x[16:32] = 1e-16
    rows = [
        np.ones(256, F),
        x,
        np.zeros(256, F),
        np.tile(LINE, 16) * np.repeat(2.0 ** np.arange(-60, 68, 8), 16).astype(F),
        np.tile(LINE, 16) * np.repeat(2.0 ** np.arange(-8, 8), 16).astype(F),
    ]
    together = encoded(name, np.concatenate(rows), monkeypatch)
    for row, got in zip(rows, together, strict=True):
        assert got.tolist() == encoded(name, row, monkeypatch)[0].tolist()


# -- with an importance matrix (quantize_row_q3_K_impl, quantize_row_q6_K_impl) -----------


def encoded_weighted(
    name: str, x: np.ndarray, w: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> np.ndarray:
    """As :func:`encoded`, with the importance weights ``w`` (``x``: rows of ``w.size``)."""
    block = BLOCKS[name]
    x = np.ascontiguousarray(x, F).reshape(-1)
    results = []
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.zeros(x.size // 256 * block.bytes, np.uint8)
        assert _quantize.quantize_into(name, x, out, w) == -1
        results.append(out.reshape(-1, block.bytes))
    blocks = x.reshape(-1, 256)
    weights = np.tile(w.reshape(-1, 256), (len(blocks) * 256 // w.size, 1))
    with np.errstate(all="ignore"):
        results.append(_quantize.WEIGHTED[name](blocks, weights))
    for other in results[1:]:
        assert np.array_equal(results[0], other)
    return results[0]


@pytest.mark.parametrize("name", ["Q3_K", "Q6_K"])
def test_weights_of_zero_give_d_0(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every weight 0: every sub-block's make_qx_quants has suml2 = 0, so scale 0; Q6_K's
    # largest scale is then 0 and the block all zeros; Q3_K's scales of scales are all
    # below GROUP_MAX_EPS, so d = 0 and its 6-bit scales 0 (the search's quants stay).
    (got,) = encoded_weighted(name, np.linspace(-1, 1, 256, dtype=F), np.zeros(256, F), monkeypatch)
    assert d_bits(name, got) == 0
    if name == "Q6_K":
        assert not got.any()
    else:
        assert got[96:108].tolist() == [0] * 12


@pytest.mark.parametrize("name", ["Q3_K", "Q6_K"])
def test_q3_k_and_q6_k_weigh_the_search_as_ggml_does(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Q6_K's search takes the importance weights as they are (ggml leaves its sigma2
    # weighting commented out): weights x * x give the bytes of no importance matrix.
    # Q3_K's takes qw * sqrt(sigma2 + x * x), so there they differ.
    x = np.linspace(-1, 1, 256, dtype=F) ** 3
    (plain,) = encoded(name, x, monkeypatch)
    (weighted,) = encoded_weighted(name, x, x * x, monkeypatch)
    assert (weighted.tolist() == plain.tolist()) is (name == "Q6_K")


@pytest.mark.parametrize("name", ["Q3_K", "Q6_K"])
def test_weighted_blocks_of_a_row_are_the_blocks_alone(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Q3_K's sigma2 is the block's own mean square (Q6_K has none): each block of a
    # row of 7 depends on its values and its weights only (the compiled Q3_K kernel
    # sums the squares of four blocks side by side).
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((3, 7 * 256)) * 10.0 ** rng.uniform(-3, 3, (3, 1))).astype(F)
    w = np.exp(rng.normal(0.0, 2.0, 7 * 256)).astype(F)
    got = encoded_weighted(name, x, w, monkeypatch)
    for i, block in enumerate(x.reshape(-1, 256)):
        alone = encoded_weighted(name, block, w[i % 7 * 256 : (i % 7 + 1) * 256], monkeypatch)
        assert got[i].tolist() == alone[0].tolist(), f"block {i}"
