"""GGML's one-scale block types (``kiln_np._quants.basic``, ``ggml_basic.c``) on hand-made
blocks whose values can be stated, on both backends.

``tests/quants/test_ggml.py`` holds every type to ggml's own output on random
blocks; here are the cases a reader can check by hand: Q8_1 (which has no ggml
decoder, so no golden), the lookup tables (IQ4's ``kvalues_iq4nl``, FP4's
``kvalues_fp4``) against gguf-py's and across both backends, GGUF's reading of
MXFP4's and NVFP4's scales (not OCP's), and a few values and scales per type.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import basic as _basic
from kiln_np._quants import decode as _decode
from kiln_np._quants.blocks import BLOCKS

pytest.importorskip(
    "gguf", reason="needs gguf (a test-only oracle of the test extra), which is not installed"
)
import gguf.quants

BACKENDS = (True, False) if _backend.COMPILED else (False,)
INF = float("inf")


def block(name: str, fields: dict[int, list[int]], count: int = 1) -> np.ndarray:
    """``count`` blocks of zero bytes but for ``fields`` (byte offset -> bytes)."""
    out = np.zeros((count, BLOCKS[name].bytes), np.uint8)
    for offset, data in fields.items():
        out[:, offset : offset + len(data)] = data
    return out


def decoded(name: str, blocks: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """The values of ``blocks`` by the numpy decoder and by the driver on each backend."""
    with np.errstate(all="ignore"):
        results = [_decode.DECODERS[name].values(blocks)]
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(blocks.shape[0] * BLOCKS[name].elements, np.float32)
        _decode.dequantize_into(name, blocks.reshape(-1), out)
        results.append(out.reshape(blocks.shape[0], -1))
    return results


def bits(values: object) -> list[int]:
    return [int(b) for b in np.asarray(values, np.float32).reshape(-1).view(np.uint32)]


# (type, block fields, {element: value}, value of every other element).  f16 bytes are
# little-endian: 0x3C00 = 1.0 is [0x00, 0x3C].
STATED = [
    # d = 2; element 0: (15 - 8) * 2, element 16: (0 - 8) * 2.
    ("Q4_0", {0: [0x00, 0x40], 2: [0x0F]}, {0: 14.0, 16: -16.0}, -16.0),
    # d = 0.5, m = -1: q * d + m.
    ("Q4_1", {0: [0x00, 0x38, 0x00, 0xBC], 4: [0xF3]}, {0: 0.5, 16: 6.5}, -1.0),
    # d = 1, qh = 0x80010001: the 5th bits of elements 0, 16, 31; qs[1] = 0x2F.
    (
        "Q5_0",
        {0: [0x00, 0x3C, 0x01, 0x00, 0x01, 0x80], 7: [0x2F]},
        {0: 0.0, 16: 0.0, 31: 0.0, 1: -1.0, 17: -14.0},
        -16.0,
    ),
    # d = 1, m = 0.5, qh = 2 (element 1's 5th bit), qs[1] = 0x1F.
    ("Q5_1", {0: [0x00, 0x3C, 0x00, 0x38, 0x02], 9: [0x1F]}, {1: 31.5, 17: 1.5}, 0.5),
    # d = -0.25: -128 * -0.25, 127 * -0.25.
    ("Q8_0", {0: [0x00, 0xB4], 2: [0x80, 0x7F]}, {0: 32.0, 1: -31.75}, -0.0),
    # d = 0.5, s = 0xFFFF (a NaN: not a value, ignored): qs * d.
    (
        "Q8_1",
        {0: [0x00, 0x38, 0xFF, 0xFF], 4: [0x80, 0xFF, 0x01, 0x7F]},
        {0: -64.0, 1: -0.5, 2: 0.5, 3: 63.5},
        0.0,
    ),
    # d = 1.5; bit j of the block's bits: element j is d, else -d.
    ("Q1_0", {0: [0x00, 0x3E], 2: [0x01], 17: [0x80]}, {0: 1.5, 127: 1.5}, -1.5),
    # d = 2; qs[0] = 0b11_10_01_00: elements 0..3 are (0, 1, 2, 3) - 1, times 2.
    ("Q2_0", {0: [0x00, 0x40], 2: [0xE4]}, {0: -2.0, 1: 0.0, 2: 2.0, 3: 4.0}, -2.0),
    # d = 1 (at 52); byte 255's base-3 digits are all 2, 128's all 1, 0's all 0; minus 1.
    # qs[0]'s digit n is element 32n, qs[32]'s 160 + 16n, qh[3]'s (digits 0..3) 243 + 4n.
    (
        "TQ1_0",
        {0: [0xFF], 32: [0x80], 51: [0xFF], 52: [0x00, 0x3C]},
        {
            0: 1.0,
            32: 1.0,
            64: 1.0,
            96: 1.0,
            128: 1.0,
            160: 0.0,
            176: 0.0,
            192: 0.0,
            208: 0.0,
            224: 0.0,
            243: 1.0,
            247: 1.0,
            251: 1.0,
            255: 1.0,
        },
        -1.0,
    ),
    # d = 0.5 (at 64); qs[0] = 0b11_10_01_00: elements 0, 32, 64, 96; qs[33] = 3: element 129.
    (
        "TQ2_0",
        {0: [0xE4], 33: [0x03], 64: [0x00, 0x38]},
        {0: -0.5, 32: 0.0, 64: 0.5, 96: 1.0, 129: 1.0},
        -0.5,
    ),
    # e = 127: ggml's half scale 0.5 times the doubled E2M1 levels (7: 12, 15: -12).
    ("MXFP4", {0: [127], 1: [0xF7]}, {0: 6.0, 16: -6.0}, 0.0),
    # e = 0xFF: 2**127 as GGUF reads it (OCP: NaN); level 1 gives 2**127, level 2 inf.
    ("MXFP4", {0: [0xFF], 1: [0x21]}, {0: 2.0**127, 16: INF}, 0.0),
    # UE4M3 scales 0x38 (1.0), 0xB8 (its sign ignored: 1.0), 0x7F (0), 0x01 (2**-9),
    # each halved; sub-block k's nibbles are in qs[8k:8k+8], low nibble j, high j + 8.
    (
        "NVFP4",
        {0: [0x38, 0xB8, 0x7F, 0x01], 4: [0x71], 12: [0x0F], 20: [0x77], 28: [0x07]},
        {0: 0.5, 8: 6.0, 16: -6.0, 24: 0.0, 32: 0.0, 40: 0.0, 48: 12 * 2.0**-10},
        0.0,
    ),
    # d = 0.5: d * kvalues_iq4nl[0] = -63.5, [15] = 56.5.
    ("IQ4_NL", {0: [0x00, 0x38], 2: [0xF0]}, {0: -63.5, 16: 56.5}, -63.5),
]


@pytest.mark.parametrize(
    ("name", "fields", "values", "rest"), STATED, ids=[f"{c[0]}-{i}" for i, c in enumerate(STATED)]
)
def test_stated_values(
    name: str,
    fields: dict[int, list[int]],
    values: dict[int, float],
    rest: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for got in decoded(name, block(name, fields), monkeypatch):
        assert bits(got[0, list(values)]) == bits(list(values.values()))
        others = np.delete(got[0], list(values))
        assert bits(others) == bits(np.full(others.size, rest))


def test_iq4_xs_stated_values(monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 1, scales_h = 0xFFFF, scales_l[0] = 0x21: ls - 32 is 17, 18, then 16 (nibbles
    # 1, 2, 0 with high bits 3); element 16 * 2 * ib + j: nibble j & 15 of sub-block ib.
    blocks = block("IQ4_XS", {0: [0x00, 0x3C, 0xFF, 0xFF, 0x21], 8: [0x80], 24: [0xF0]})
    want = np.repeat(np.array([17, 18, 16, 16, 16, 16, 16, 16], np.float32), 32) * -127
    want[16], want[32], want[48] = 17 * 1, 18 * -127, 18 * 113
    for got in decoded("IQ4_XS", blocks, monkeypatch):
        assert bits(got[0]) == bits(want)


def test_q8_1_is_q8_0_without_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random Q8_1 blocks (s random too) decode as the Q8_0 blocks of their d and qs."""
    q8_1 = np.random.default_rng(9).integers(0, 256, (300, 36), np.uint8)
    q8_0 = np.ascontiguousarray(np.delete(q8_1, [2, 3], axis=1))
    want = decoded("Q8_0", q8_0, monkeypatch)[0]
    for got in decoded("Q8_1", q8_1, monkeypatch):
        assert bits(got) == bits(want)


def test_q8_1_nan_where_q8_0_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # d = inf: inf * 0 is NaN, inf * -1 is -inf (ggml's float32 product).
    blocks = block("Q8_1", {0: [0x00, 0x7C], 4: [0x00, 0xFF, 0x01]})
    for got in decoded("Q8_1", blocks, monkeypatch):
        assert np.isnan(got[0, 0])
        assert got[0, 1:3].tolist() == [-INF, INF]


def test_iq4nl_tables_agree_with_ggml_and_gguf_py(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table in basic.py, the one in ggml_basic.c and gguf-py's are ggml's kvalues_iq4nl."""
    table = _basic.KVALUES_IQ4NL
    assert table.tolist() == list(gguf.quants.IQ4_NL.kvalues)
    # Byte j: low nibble j (element j), high nibble 15 - j (element 16 + j).
    qs = [j | (15 - j) << 4 for j in range(16)]
    want = np.concatenate([table, table[::-1]]).astype(np.float32)
    for got in decoded("IQ4_NL", block("IQ4_NL", {0: [0x00, 0x3C], 2: qs}), monkeypatch):
        assert bits(got) == bits(want)
    # IQ4_XS, d = 1, every ls = 33 (low nibble 1, high bits 2): dl = 1, the same levels.
    xs = block("IQ4_XS", {0: [0x00, 0x3C, 0xAA, 0xAA, 0x11, 0x11, 0x11, 0x11], 8: qs * 8})
    for got in decoded("IQ4_XS", xs, monkeypatch):
        assert bits(got) == bits(np.tile(want, 8))


def test_fp4_tables_agree_with_ggml_and_gguf_py(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _basic.KVALUES_FP4
    assert table.tolist() == list(gguf.quants.MXFP4.kvalues)
    qs = [j | (15 - j) << 4 for j in range(16)]
    want = np.concatenate([table, table[::-1]]).astype(np.float32)
    # MXFP4 e = 128 and NVFP4 UE4M3 0x40 (2.0): the half scales are 1.
    for got in decoded("MXFP4", block("MXFP4", {0: [128], 1: qs}), monkeypatch):
        assert bits(got) == bits(want)
    # NVFP4 sub-block k: qs[8k:8k+8] low nibbles at 16k + j, high at 16k + 8 + j.
    nv_qs = [j | (15 - j) << 4 for j in range(8)] + [(8 + j) | (7 - j) << 4 for j in range(8)]
    nv_want = np.concatenate([table[:8], table[15:7:-1], table[8:], table[7::-1]])
    for got in decoded("NVFP4", block("NVFP4", {0: [0x40] * 4, 4: nv_qs * 2}), monkeypatch):
        assert bits(got) == bits(np.tile(nv_want, 2))


def test_e8m0_half_is_ggml_reading() -> None:
    """ggml_e8m0_to_fp32_half: 2**(e - 128) for every byte, 0xFF included (OCP: NaN)."""
    e = np.arange(256)
    assert bits(_basic.E8M0_HALF) == bits(np.ldexp(1.0, e - 128))
    assert _basic.E8M0_HALF[0xFF] == 2.0**127


def test_ue4m3_half_is_ggml_reading() -> None:
    """ggml_ue4m3_to_fp32: E4M3 of the low 7 bits, halved; 0x7F is 0, 0xFF is 240."""
    low = (np.arange(256) & 0x7F).astype(np.uint8)
    e4m3 = low.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    e4m3[low == 0x7F] = 480.0  # E4M3FN's NaN pattern, read as a number by ggml ...
    want = e4m3 / np.float32(2)
    want[0x7F] = 0.0  # ... but for 0x7F itself
    assert bits(_basic.UE4M3_HALF) == bits(want)
    assert _basic.UE4M3_HALF[[0x80, 0xFF, 0xFE]].tolist() == [0.0, 240.0, 224.0]


def test_nvfp4_every_scale_byte_on_both_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 blocks, scale bytes 0..255, every nibble 2 (level 2): the values are 2 * half scale.
    blocks = block("NVFP4", {4: [0x22] * 32}, 64)
    blocks[:, :4] = np.arange(256, dtype=np.uint8).reshape(64, 4)
    want = np.repeat(_basic.UE4M3_HALF * np.float32(2), 16).reshape(64, 64)
    for got in decoded("NVFP4", blocks, monkeypatch):
        assert bits(got) == bits(want)


def test_mxfp4_every_scale_byte_on_both_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = block("MXFP4", {1: [0x11] * 16}, 256)  # level 1 everywhere
    blocks[:, 0] = np.arange(256)
    for got in decoded("MXFP4", blocks, monkeypatch):
        assert bits(got) == bits(np.repeat(_basic.E8M0_HALF, 32).reshape(256, 32))


@pytest.mark.parametrize(
    ("name", "fields", "want"),
    [
        ("Q4_0", {0: [0x00, 0x40]}, {"d": [2.0]}),
        ("Q4_1", {0: [0x00, 0x38, 0x00, 0xBC]}, {"d": [0.5], "m": [-1.0]}),
        ("Q5_1", {0: [0x00, 0x3C, 0x00, 0x38]}, {"d": [1.0], "m": [0.5]}),
        ("Q8_1", {0: [0x00, 0x38, 0x00, 0x3C]}, {"d": [0.5]}),
        ("TQ1_0", {52: [0x00, 0xC0]}, {"d": [-2.0]}),
        ("TQ2_0", {64: [0x00, 0x3C]}, {"d": [1.0]}),
        ("MXFP4", {0: [0xFF]}, {"e": [2.0**127]}),
        ("NVFP4", {0: [0x38, 0xB8, 0x7F, 0x01]}, {"d": [[0.5, 0.5, 0.0, 2.0**-10]]}),
        ("IQ4_NL", {0: [0x00, 0x38]}, {"d": [0.5]}),
        (
            "IQ4_XS",
            {0: [0x00, 0x3C, 0x1B, 0x00, 0x21, 0xF0]},  # scales_h high bits 3, 2, 1, 0, ...
            {"d": [1.0], "sub-block scales": [[17, 2, -16, -17, -32, -32, -32, -32]]},
        ),
    ],
)
def test_scales(name: str, fields: dict[int, list[int]], want: dict[str, list[object]]) -> None:
    got = _decode.DECODERS[name].scales(block(name, fields))
    assert {k: v.tolist() for k, v in got.items()} == want
    assert {k: v.dtype.name for k, v in got.items()} == {
        k: "int32" if k == "sub-block scales" else "float32" for k in want
    }
