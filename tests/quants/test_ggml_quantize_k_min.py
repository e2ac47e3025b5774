"""Q2_K, Q4_K and Q5_K quantization on hand-made blocks, both backends.

The generic tests (``test_ggml_quantize.py``) hold these encoders to ggml's golden
vectors; here the bytes of chosen blocks are stated, worked out by hand where the
arithmetic is short (the expected hex of the others is what ggml 0.25.3's
``ggml_quantize_chunk`` writes for them), so that a failure names the case.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import encode_k_min, qkx, rounding
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import dequantize_into

BACKENDS = (True, False) if _backend.COMPILED else (False,)
f32 = np.float32


def encode(name: str, x: np.ndarray, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setattr(_backend, "COMPILED", compiled)
    x = np.ascontiguousarray(x, f32).reshape(-1)
    out = np.zeros(x.size // 256 * BLOCKS[name].bytes, np.uint8)
    assert _quantize.quantize_into(name, x, out) == -1
    return out.tobytes()


def f16(value: float) -> bytes:
    return np.array([value], f32).astype("<f2").tobytes()


@pytest.mark.parametrize("compiled", BACKENDS)
@pytest.mark.parametrize("name", ["Q2_K", "Q4_K", "Q5_K"])
def test_an_all_zero_block_is_all_zero_bytes(
    name: str, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for zero in (0.0, -0.0):
        got = encode(name, np.full(256, zero, f32), compiled, monkeypatch)
        assert got == bytes(BLOCKS[name].bytes)


@pytest.mark.parametrize("compiled", BACKENDS)
def test_q2_k_levels_0_to_3_take_scale_1_and_min_0(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every sub-block holds 0, 1, 2, 3 (four times): scale 1, min 0 fit exactly, so
    # every 4-bit scale is 15 (d = 1/15), every min 0 (dmin 0), and element e has
    # level e % 4: qs[l] = 0b01010101 * (l % 4).
    x = np.tile(np.array([0, 1, 2, 3], f32), 64)
    got = encode("Q2_K", x, compiled, monkeypatch)
    qs = bytes(0b01010101 * (i % 4) for i in range(64))
    assert got == bytes([15] * 16) + qs + f16(1 / 15) + bytes(2)


@pytest.mark.parametrize("compiled", BACKENDS)
@pytest.mark.parametrize("name", ["Q4_K", "Q5_K"])
def test_all_equal_negative_sub_blocks_are_their_min(
    name: str, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # All -2: every sub-block is flat (max == min), so scale 0 and min 2: d = 0, the
    # 6-bit mins all 63 against dmin = 2/63, every level 0 (d * scale is 0: no
    # requantization).  Scales 0..3 byte: ls 0; mins 0..3: lm 63 | (63 >> 4) << 6;
    # the last four: ls & 15 | (lm & 15) << 4.
    got = encode(name, np.full(256, -2.0, f32), compiled, monkeypatch)
    head = bytes(2) + f16(2 / 63) + bytes(4) + b"\xff" * 4 + b"\xf0" * 4
    assert got == head + bytes(BLOCKS[name].bytes - 16)


@pytest.mark.parametrize("compiled", BACKENDS)
def test_q2_k_all_equal_negative_sub_blocks(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same for Q2_K: 4-bit mins 15 against dmin = 2/15, scales and levels 0.
    got = encode("Q2_K", np.full(256, -2.0, f32), compiled, monkeypatch)
    assert got == b"\xf0" * 16 + bytes(64) + bytes(2) + f16(2 / 15)


# ggml's own bytes for blocks at the edges (ggml 0.25.3, ggml_quantize_chunk).
CASES = {
    # Subnormal values: every scale rounds to a zero f16, so the block is zeros.
    "tiny": np.resize(np.array([1e-40, -3e-41, 2e-39, 0], f32), 256),
    # max - min overflows: the scales are infinite, d and dmin f16 infinity.
    "huge": np.resize(np.array([3e38, -3.4e38, 1e38, -2e37], f32), 256),
    # 16-value sub-blocks at 1e-8 ... 1e7: the small ones quantize to scale 0.
    "scales": (
        np.resize(np.array([1, -0.5, 0.25, 0.75], f32), 256)
        * np.repeat(10.0 ** np.arange(-8, 8), 16)
    ).astype(f32),
    # One-signed (positive): every min is 0, so dmin is 0.
    "positive": (np.arange(256) % 7 + 1).astype(f32),
}
WANT = {
    ("tiny", "Q2_K"): "00" * 84,
    ("tiny", "Q4_K"): "00" * 144,
    ("tiny", "Q5_K"): "00" * 176,
    ("huge", "Q2_K"): (
        "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000000000000000007c007c"
    ),
    ("huge", "Q4_K"): (
        "007c007c00000000fffffffff0f0f0f000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000000000000000"
    ),
    ("huge", "Q5_K"): (
        "007c007c00000000fffffffff0f0f0f000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000000000000000"
    ),
    ("scales", "Q2_K"): (
        "000000000000000000000000000022ff00000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000000000000000007c007c"
    ),
    ("scales", "Q4_K"): (
        "1874007c000000c0000000c0000011ff66445555664455556644555566445555"
        "ee0077ccee0077ccee0077ccee0077cc66445555664455556644555566445555"
        "ee0077ccee0077ccee0077ccee0077cc66445555664455556644555566445555"
        "ee0077ccee0077ccee0077ccee0077cc00000000000000000000000000000000"
        "00000000000000000000000000000000"
    ),
    ("scales", "Q5_K"): (
        "756f007c000000c0000000c0000011ff00000000000000000000000000000000"
        "3f00003f3f00003f3f00003f3f00003fcc99bbcccc99bbcccc99bbcccc99bbcc"
        "ee00ff99ee00ff99ee00ff99ee00ff99cc99bbcccc99bbcccc99bbcccc99bbcc"
        "ef00ff9aef00ff9aef00ff9aef00ff9acc99bbcccc99bbcccc99bbcccc99bbcc"
        "ee00ff99ee00ff99ee00ff99ee00ff9900000000000000000000000000000000"
        "00000000000000000000000000000000"
    ),
    ("positive", "Q2_K"): (
        "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0fd8dd2d6276b78bd8dd2d6276b78bd8dd"
        "2d6276b78bd8dd2d6276b78bd8dd2d622d6276b78bd8dd2d6276b78bd8dd2d62"
        "76b78bd8dd2d6276b78bd8dd2d6276b7fa300000"
    ),
    ("positive", "Q4_K"): (
        "10200000ffffffff000000000f0f0f0fa2c4e6284a6c8ea2c4e6284a6c8ea2c4"
        "e6284a6c8ea2c4e6284a6c8ea2c4e628c4e6284a6c8ea2c4e6284a6c8ea2c4e6"
        "284a6c8ea2c4e6284a6c8ea2c4e6284ae6284a6c8ea2c4e6284a6c8ea2c4e628"
        "4a6c8ea2c4e6284a6c8ea2c4e6284a6c284a6c8ea2c4e6284a6c8ea2c4e6284a"
        "6c8ea2c4e6284a6c8ea2c4e6284a6c8e"
    ),
    ("positive", "Q5_K"): (
        "511b0000ffffffff000000000f0f0f0f6a5a56d5b5adab6a5a56d5b5adab6a5a"
        "56d5b5adab6a5a56d5b5adab6a5a56d564b9fd4296db2f64b9fd4296db2f64b9"
        "fd4296db2f64b9fd4296db2f64b9fd42b9fd4296db2f64b9fd4296db2f64b9fd"
        "4296db2f64b9fd4296db2f64b9fd4296fd4296db2f64b9fd4296db2f64b9fd42"
        "96db2f64b9fd4296db2f64b9fd4296db4296db2f64b9fd4296db2f64b9fd4296"
        "db2f64b9fd4296db2f64b9fd4296db2f"
    ),
}


@pytest.mark.parametrize("compiled", BACKENDS)
@pytest.mark.parametrize(("case", "name"), list(WANT))
def test_edge_blocks_are_ggml_bytes(
    case: str, name: str, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert encode(name, CASES[case], compiled, monkeypatch).hex() == WANT[case, name]


@pytest.mark.parametrize("compiled", BACKENDS)
@pytest.mark.parametrize(("name", "step"), [("Q2_K", 3), ("Q4_K", 15), ("Q5_K", 31)])
def test_one_signed_and_far_apart_sub_blocks_decode_near_their_values(
    name: str, step: int, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows of one sign (the search starts from min 0 for positive sub-blocks, yet the
    # least-squares fit may still take a min below 0) and rows whose 16-value
    # sub-blocks lie 2**-8 ... 2**7 apart: every value decodes back to within one
    # level step of its block's range, (max - min(min, 0)) / levels (the small
    # sub-blocks get scale 0 and decode to their min, near 0 on that range).
    rng = np.random.default_rng(3)
    x = np.abs(rng.standard_normal((12, 256))).astype(f32)
    x[4:8] = -x[4:8]
    x[8:] *= (2.0 ** np.arange(-8, 8)).repeat(16).astype(f32)
    x[8:10] = -x[8:10]
    payload = np.frombuffer(encode(name, x, compiled, monkeypatch), np.uint8)
    back = np.empty(x.size, f32)
    dequantize_into(name, payload, back)
    spread = x.max(axis=1, keepdims=True) - np.minimum(x.min(axis=1, keepdims=True), 0)
    assert (np.abs(back.reshape(x.shape) - x) <= spread / step).all()


def test_nearest_int_is_ggml_bit_trick() -> None:
    # Halves to even, and what the trick gives outside its range: 0 for a NaN
    # (0 * inf in a block whose range overflows), -2**22 for an infinity.
    v = np.array([0.5, 1.5, -1.5, 2.4999998, np.nan, np.inf, -np.inf], f32)
    assert rounding.nearest_int(v).tolist() == [0, 2, -2, 2, 0, -(2**22), -(2**22)]


def test_cumsum_adds_in_element_order() -> None:
    # The numpy encoders' sums are np.cumsum along the element axis: sequential, as
    # ggml's `sum += ...` (np.sum's pairwise order would differ on these).
    rng = np.random.default_rng(7)
    terms = (rng.standard_normal((33, 500)) * 10.0 ** rng.uniform(-6, 6, (33, 500))).astype(f32)
    loop = terms[0].copy()
    for row in terms[1:]:
        loop = loop + row
    got = qkx.total(terms)
    assert np.array_equal(got.view(np.uint32), loop.view(np.uint32))


# -- with an importance matrix (quantize_row_q{2,4,5}_K_impl) ----------------------------


def encode_weighted(
    name: str, x: np.ndarray, w: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> np.ndarray:
    """The blocks of ``x`` (rows of ``w.size``) with the importance weights ``w`` as rows
    of bytes: both backends' drivers and the numpy encoder alone agree on them."""
    block = BLOCKS[name]
    x = np.ascontiguousarray(x, f32).reshape(-1)
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


@pytest.mark.parametrize(("name", "d_at"), [("Q2_K", 80), ("Q4_K", 0), ("Q5_K", 0)])
def test_weights_of_zero_give_d_and_dmin_0(
    name: str, d_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every weight 0: the search keeps its first guess (D = 0 for every candidate),
    # and make_qp_quants, whose weights are the sub-blocks' sums of weights, has
    # every weighted sum 0 and returns 0 for the scales and for the mins: d = dmin = 0,
    # and the block decodes to zeros, as ggml's does.
    (got,) = encode_weighted(
        name, np.linspace(-1, 1, 256, dtype=f32), np.zeros(256, f32), monkeypatch
    )
    assert got[d_at : d_at + 4].tolist() == [0, 0, 0, 0]
    back = np.ones(256, f32)
    dequantize_into(name, got, back)
    assert not back.any()


@pytest.mark.parametrize("name", ["Q2_K", "Q4_K", "Q5_K"])
def test_weighted_blocks_of_a_row_are_the_blocks_alone(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows of 7 blocks: the compiled kernel searches groups of blocks at once (two of
    # Q2_K, four of Q4_K and Q5_K) and fills a short last group with zeros; ggml's
    # sigma2 is the block's own mean square, so each block depends on its values and
    # its weights only, and a row's blocks are each block quantized alone.
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 7 * 256)) * 10.0 ** rng.uniform(-3, 3, (3, 1))).astype(f32)
    w = np.exp(rng.normal(0.0, 2.0, 7 * 256)).astype(f32)
    got = encode_weighted(name, x, w, monkeypatch)
    for i, block in enumerate(x.reshape(-1, 256)):
        alone = encode_weighted(name, block, w[i % 7 * 256 : (i % 7 + 1) * 256], monkeypatch)
        assert got[i].tolist() == alone[0].tolist(), f"block {i}"


def test_qp_quants_fits_the_scales_by_their_weights() -> None:
    # make_qp_quants on (0.5, 1, 3, 4) at 4 bits: levels (2, 4, 11, 15) either way, and
    # the scale is their weighted least-squares fit sum(w x l) / sum(w l l): 98 / 366
    # with weights 1, (1 + 4 + 33 + 240) / (4 + 16 + 121 + 900) with the last weighted 4.
    x = np.array([[0.5, 1.0, 3.0, 4.0]], f32)
    for w, fit in (([1, 1, 1, 1], f32(98) / f32(366)), ([1, 1, 1, 4], f32(278) / f32(1041))):
        scale, levels = encode_k_min._qp(x, np.array([w], f32), 15)
        assert levels.tolist() == [[2, 4, 11, 15]]
        assert scale.view(np.uint32).tolist() == [fit.view(np.uint32)]
