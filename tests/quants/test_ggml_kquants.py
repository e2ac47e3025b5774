"""The k-quant decoders (Q2_K ... Q8_K) on blocks made by hand, whose values are stated.

Each block is decoded by the numpy decoder and by the compiled kernel (where
built); the two must give the same bytes and the stated values.  One kind of
block puts every quant in its place under uniform scales (the quants' order),
the other gives every sub-block its own scale under uniform quants (the scales'
order).  The packed 6-bit scales are checked against transcriptions of ggml's
own unpacking (``get_scale_min_k4``, Q3_K's ``kmask`` words).  The golden file
(``test_ggml.py``) holds all of it to ggml's output on random blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import decode as _decode
from kiln_np._quants import kquants
from kiln_np._quants.blocks import BLOCKS

F16_ONE, F16_HALF, F16_QUARTER, F16_INF = 0x3C00, 0x3800, 0x3400, 0x7C00

# scale_min_k4: 16 distinct values; the top bits of bytes 0-3 and of 4-7 differ.
K4_PACKED = [0x41, 0x82, 0xC3, 0x04, 0xC5, 0x06, 0x47, 0x88, 0x9A, 0xBC, 0xDE, 0xF0]
K4_SCALES = [1, 2, 3, 4, 26, 44, 62, 0]
K4_MINS = [5, 6, 7, 8, 57, 11, 29, 47]

# Q3_K's example: every nibble and every pair of high bits distinct where it can be.
Q3_PACKED = [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0x1B, 0xE4, 0x00, 0xFF]
Q3_SCALES = [16, -30, -28, 22, 8, -6, -20, 30, -15, 3, -27, 23, -23, 27, -19, 31]


def block(name: str, fields: Mapping[int, list[int]]) -> np.ndarray:
    """One block of type ``name`` (a row of uint8), zero but for the bytes ``fields``
    sets: byte offset -> the bytes from there."""
    row = np.zeros(BLOCKS[name].bytes, np.uint8)
    for offset, data in fields.items():
        row[offset : offset + len(data)] = data
    return row[None, :]


def f16(bits: int) -> list[int]:
    return [bits & 0xFF, bits >> 8]


def decoded(name: str, blocks: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """The values of ``blocks`` from numpy and (where built) from the compiled kernel,
    which must be the same bytes."""
    outs = []
    for compiled in (False, True) if _backend.COMPILED else (False,):
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(blocks.shape[0] * BLOCKS[name].elements, np.float32)
        with np.errstate(all="ignore"):
            _decode.dequantize_into(name, blocks.reshape(-1), out)
        outs.append(out)
    assert all(o.view(np.uint32).tobytes() == outs[0].view(np.uint32).tobytes() for o in outs)
    return outs[0]


def bits(values: Sequence[float] | np.ndarray) -> list[int]:
    out: list[int] = np.asarray(values, np.float32).view(np.uint32).tolist()
    return out


def repeat(values: Sequence[float] | np.ndarray, times: int) -> list[float]:
    out: list[float] = np.repeat(np.asarray(values, np.float32), times).tolist()
    return out


# ---- the packed scales ----------------------------------------------------------------


def test_scale_min_k4_example() -> None:
    sc, m = kquants.scale_min_k4(np.array([K4_PACKED], np.uint8))
    assert (sc.tolist(), m.tolist(), sc.dtype.name) == ([K4_SCALES], [K4_MINS], "uint8")


def get_scale_min_k4(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's get_scale_min_k4(j, q, &d, &m), as written there, j by j (over rows)."""
    d, m = [], []
    for j in range(8):
        if j < 4:
            d.append(q[:, j] & 63)
            m.append(q[:, j + 4] & 63)
        else:
            d.append((q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4))
            m.append((q[:, j + 4] >> 4) | ((q[:, j - 0] >> 6) << 4))
    return np.stack(d, axis=1), np.stack(m, axis=1)


def test_scale_min_k4_is_ggml_on_random_bytes() -> None:
    packed = np.random.default_rng(4).integers(0, 256, (500, 12), np.uint8)
    sc, m = kquants.scale_min_k4(packed)
    want_sc, want_m = get_scale_min_k4(packed)
    assert sc.tolist() == want_sc.tolist()
    assert m.tolist() == want_m.tolist()


def test_q3_k_scales_example() -> None:
    got = kquants.q3_k_scales(np.array([Q3_PACKED], np.uint8))
    assert (got.tolist(), got.dtype.name) == ([Q3_SCALES], "int8")


def q3_k_aux(packed: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_q3_K scale words: the 12 bytes as three uint32, spread over
    four with the masks 0x03030303 and 0x0f0f0f0f, read back as int8, minus 32."""
    aux = np.ascontiguousarray(packed).view("<u4")
    k1, k2 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)
    a0, a1, tmp = aux[:, 0], aux[:, 1], aux[:, 2]
    words = np.stack(
        [
            (a0 & k2) | (((tmp >> 0) & k1) << 4),
            (a1 & k2) | (((tmp >> 2) & k1) << 4),
            ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4),
            ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4),
        ],
        axis=1,
    ).astype("<u4")
    return words.view(np.int8).astype(np.int32) - 32


def test_q3_k_scales_are_ggml_on_random_bytes() -> None:
    packed = np.random.default_rng(3).integers(0, 256, (500, 12), np.uint8)
    assert kquants.q3_k_scales(packed).tolist() == q3_k_aux(packed).tolist()


# ---- Q2_K: scales[16] (scale | min << 4), qs[64], d at 80, dmin at 82 -------------------


def test_q2_k_quant_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Scale 1, min 2 everywhere, d = 1, dmin = 0.25; every byte 0xE4 holds 0, 1, 2, 3 from
    # bit 0 up: elements 32 j ... 32 j + 31 of each half are bits 2j, y = j - 0.5.
    b = block("Q2_K", {0: [0x21] * 16, 16: [0xE4] * 64, 80: f16(F16_ONE), 82: f16(F16_QUARTER)})
    assert decoded("Q2_K", b, monkeypatch).tolist() == repeat([-0.5, 0.5, 1.5, 2.5] * 2, 32)


def test_q2_k_scale_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sub-block k: scale k, min 1; q = 1 everywhere (0x55); d = 1, dmin = 0.5: y = k - 0.5.
    scales = [k | 0x10 for k in range(16)]
    b = block("Q2_K", {0: scales, 16: [0x55] * 64, 80: f16(F16_ONE), 82: f16(F16_HALF)})
    assert decoded("Q2_K", b, monkeypatch).tolist() == repeat(np.arange(16) - 0.5, 16)
    got = kquants.DECODERS["Q2_K"].scales(b)
    assert {k: (v.tolist(), v.dtype.name) for k, v in got.items()} == {
        "d": ([1.0], "float32"),
        "dmin": ([0.5], "float32"),
        "sub-block scales": ([list(range(16))], "uint8"),
        "sub-block mins": ([[1] * 16], "uint8"),
    }


# ---- Q3_K: hmask[32], qs[64] at 32, scales[12] at 96, d at 108 --------------------------


def test_q3_k_quant_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every scale 33 (low nibbles 1, high bits 2: 0x11 ..., 0xAA ...), so dl = d = 1.
    # qs 0xE4: q = j in group j of a half; hmask 0x0F: high bits 0-3 (the first half)
    # set, 4-7 clear, so the second half is q - 4.
    b = block(
        "Q3_K", {0: [0x0F] * 32, 32: [0xE4] * 64, 96: [0x11] * 8 + [0xAA] * 4, 108: f16(F16_ONE)}
    )
    assert decoded("Q3_K", b, monkeypatch).tolist() == repeat([0, 1, 2, 3, -4, -3, -2, -1], 32)


def test_q3_k_scale_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # q = 1 everywhere (qs 0x55, every high bit set): y = scale - 32, sub-block by sub-block.
    b = block("Q3_K", {0: [0xFF] * 32, 32: [0x55] * 64, 96: Q3_PACKED, 108: f16(F16_ONE)})
    assert decoded("Q3_K", b, monkeypatch).tolist() == repeat(Q3_SCALES, 16)
    got = kquants.DECODERS["Q3_K"].scales(b)
    assert {k: (v.tolist(), v.dtype.name) for k, v in got.items()} == {
        "d": ([1.0], "float32"),
        "sub-block scales": ([Q3_SCALES], "int8"),
    }


# ---- Q4_K: d, dmin, scales[12] at 4, qs[128] at 16; Q5_K: qh[32] at 16, qs at 48 --------

K4_ONE_TWO = [1] * 4 + [2] * 4 + [0x21] * 4  # every scale 1, every min 2


def test_q4_k_quant_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 1, dmin = 0.5, scale 1, min 2: y = q - 1.  Byte 32 c + i holds i % 16 (sub-block
    # 2 c, its low nibble) and 4 c (sub-block 2 c + 1, its high nibble).
    qs = [(i % 16) | ((4 * c) << 4) for c in range(4) for i in range(32)]
    b = block("Q4_K", {0: f16(F16_ONE) + f16(F16_HALF), 4: K4_ONE_TWO, 16: qs})
    want = [v for c in range(4) for v in [*(np.arange(32) % 16 - 1), *[4 * c - 1] * 32]]
    assert decoded("Q4_K", b, monkeypatch).tolist() == np.asarray(want, np.float32).tolist()


def test_q5_k_quant_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # As Q4_K, with qs 0x21 (low nibble 1, high 2) and qh 0xAA in bytes 0-15: the odd
    # sub-blocks' elements 0-15 get 16 on top.  y = q - 1.
    b = block(
        "Q5_K",
        {0: f16(F16_ONE) + f16(F16_HALF), 4: K4_ONE_TWO, 16: [0xAA] * 16, 48: [0x21] * 128},
    )
    assert decoded("Q5_K", b, monkeypatch).tolist() == ([0.0] * 32 + [17.0] * 16 + [1.0] * 16) * 4


@pytest.mark.parametrize(("name", "qs"), [("Q4_K", 16), ("Q5_K", 48)])
def test_q4_k_q5_k_scale_order(name: str, qs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # q = 1 everywhere, d = 1, dmin = 0.5: y = scale - 0.5 * min, sub-block by sub-block.
    b = block(name, {0: f16(F16_ONE) + f16(F16_HALF), 4: K4_PACKED, qs: [0x11] * 128})
    want = np.asarray(K4_SCALES, np.float32) - np.float32(0.5) * np.asarray(K4_MINS, np.float32)
    assert decoded(name, b, monkeypatch).tolist() == repeat(want, 32)
    got = kquants.DECODERS[name].scales(b)
    assert {k: (v.tolist(), v.dtype.name) for k, v in got.items()} == {
        "d": ([1.0], "float32"),
        "dmin": ([0.5], "float32"),
        "sub-block scales": ([K4_SCALES], "uint8"),
        "sub-block mins": ([K4_MINS], "uint8"),
    }


def test_q4_k_infinite_d(monkeypatch: pytest.MonkeyPatch) -> None:
    # d = inf: sub-block 0 has scale 0 (inf * 0 = NaN), sub-block 1 scale 1 with q = 0
    # (d1 * 0 = NaN) and 1 (inf), as ggml computes; the rest scale 1, q = 1: inf.
    packed = [0, 1, 1, 1, 0, 0, 0, 0, 0x01, 0x01, 0x01, 0x01]
    qs = [0x01] * 16 + [0x11] * 112
    b = block("Q4_K", {0: f16(F16_INF) + f16(F16_ONE), 4: packed, 16: qs})
    got = decoded("Q4_K", b, monkeypatch)
    nan = np.isnan(got)
    assert nan[:48].all()
    assert not nan[48:].any()
    assert bits(got[48:]) == bits([np.inf] * 208)


# ---- Q6_K: ql[128], qh[64] at 128, int8 scales[16] at 192, d at 208 ----------------------


def test_q6_k_quant_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Scales 1, d = 1: y = q - 32.  ql: 0x21 in bytes 0-31 of each 64, 0x43 in 32-63;
    # qh 0xE4: high bits 0, 1, 2, 3 for k = 0 ... 3.  k = 0: 1 | 0 << 4; k = 1: 3 | 1 << 4;
    # k = 2: 2 | 2 << 4; k = 3: 4 | 3 << 4.
    ql = ([0x21] * 32 + [0x43] * 32) * 2
    b = block("Q6_K", {0: ql, 128: [0xE4] * 64, 192: [1] * 16, 208: f16(F16_ONE)})
    assert decoded("Q6_K", b, monkeypatch).tolist() == repeat([-31, -13, 2, 20] * 2, 32)


def test_q6_k_scale_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # q = 33 - 32 = 1 everywhere (ql 0x11, qh 0xAA): y = sc, sub-block by sub-block.
    scales = list(range(-8, 8))
    b = block(
        "Q6_K",
        {0: [0x11] * 128, 128: [0xAA] * 64, 192: [s & 0xFF for s in scales], 208: f16(F16_ONE)},
    )
    assert decoded("Q6_K", b, monkeypatch).tolist() == repeat(scales, 16)
    got = kquants.DECODERS["Q6_K"].scales(b)
    assert {k: (v.tolist(), v.dtype.name) for k, v in got.items()} == {
        "d": ([1.0], "float32"),
        "sub-block scales": ([scales], "int8"),
    }


# ---- Q8_K: float32 d, int8 qs[256] at 4, int16 bsums[16] at 260 (not read) --------------


def test_q8_k(monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 0.5 (float32, not f16), qs -128 ... 127; bsums any.
    qs = np.arange(-128, 128).astype(np.int8).view(np.uint8).tolist()
    b = block("Q8_K", {0: [0, 0, 0, 0x3F], 4: qs, 260: [0xFF] * 32})
    assert decoded("Q8_K", b, monkeypatch).tolist() == (np.arange(-128, 128) * 0.5).tolist()
    assert kquants.DECODERS["Q8_K"].scales(b)["d"].tolist() == [0.5]


def test_q8_k_nan_and_infinite_d(monkeypatch: pytest.MonkeyPatch) -> None:
    # d a signalling NaN 0x7f800001: every value is it, quieted (0x7fc00001), as the
    # multiplication gives it; d = -inf: -inf * q, a NaN where q = 0 (its bits are the
    # CPU's default NaN).
    qs = [0, 1, 0xFF] * 85 + [0]
    nan_d = block("Q8_K", {0: [0x01, 0, 0x80, 0x7F], 4: qs})
    inf_d = block("Q8_K", {0: [0, 0, 0x80, 0xFF], 4: qs})
    got = decoded("Q8_K", np.concatenate([nan_d, inf_d]), monkeypatch)
    assert bits(got[:256]) == [0x7FC00001] * 256
    assert np.isnan(got[256:]).tolist() == [q == 0 for q in qs]
    assert bits(got[257::3]) == bits([-np.inf] * 85)
    assert bits(got[258::3]) == bits([np.inf] * 85)
