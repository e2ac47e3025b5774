"""IQ4_NL and IQ4_XS encoders on hand-made blocks: the bytes ggml's
``ggml_quantize_chunk`` writes for them (checked against libggml-base 0.25.3),
on both backends, with why each is what it is.

Blocks of exact levels (``kvalues_iq4nl``) have the scale 1 (IQ4_NL) or the
sub-block scales ``2**-k`` (IQ4_XS), so their bytes can be read off by hand; the
rest are the edge cases of ggml's search: zeros, ``GROUP_MAX_EPS``, the strict
``>`` between equal trials, and sums that overflow to infinite and NaN scales.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.encode_iq4 import KVALUES, best_index

BACKENDS = (True, False) if _backend.COMPILED else (False,)
LEVELS = np.concatenate([KVALUES, KVALUES[::-1]])  # x[j] = level j, then 15 - j
LEVEL_NIBBLES = "f0e1d2c3b4a5968778695a4b3c2d1e0f"  # low nibble j, high 15 - j


def quantize(name: str, x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hex bytes of ``x`` as GGML ``name`` on each backend."""
    elements, nbytes = {"IQ4_NL": (32, 18), "IQ4_XS": (256, 136)}[name]
    src = np.ascontiguousarray(x, np.float32).reshape(-1)
    found = []
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(src.size // elements * nbytes, np.uint8)
        assert _quantize.quantize_into(name, src, out) == -1
        found.append(out.tobytes().hex())
    return found


def ggml_best_index(x: float) -> int:
    """ggml's best_index_int8 over kvalues_iq4nl, transcribed in float32."""
    v = [np.float32(value) for value in KVALUES]
    f = np.float32(x)
    if f <= v[0]:
        return 0
    if f >= v[15]:
        return 15
    ml, mu = 0, 15
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if f < v[mav]:
            mu = mav
        else:
            ml = mav
    return mu - 1 if f - v[mu - 1] < v[mu] - f else mu


def test_best_index_ties_go_up_and_ends_and_nan_clamp() -> None:
    mids = (KVALUES[:-1] + KVALUES[1:]) / np.float32(2)
    assert best_index(mids).tolist() == list(range(1, 16))
    below = np.nextafter(mids, np.float32(-np.inf))
    assert best_index(below).tolist() == list(range(15))
    ends = np.array([-np.inf, -1e30, -127, 113, 1e30, np.inf, np.nan], np.float32)
    assert best_index(ends).tolist() == [0, 0, 0, 15, 15, 15, 15]


def test_best_index_is_ggml_binary_search() -> None:
    rng = np.random.default_rng(21)
    x = np.concatenate(
        [
            rng.uniform(-140, 130, 3000).astype(np.float32),
            (KVALUES[:-1] + KVALUES[1:]) / np.float32(2),
            np.nextafter((KVALUES[:-1] + KVALUES[1:]) / np.float32(2), np.float32(0)),
            KVALUES,
        ]
    )
    assert best_index(x).tolist() == [ggml_best_index(v) for v in x]


def test_iq4_nl_levels_have_scale_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The trial mapping by (0 - 127) / max = 1 leaves every value on its level: the
    # least-squares scale 1 (f16 0x3c00), nibble = level index.
    assert quantize("IQ4_NL", LEVELS, monkeypatch) == ["003c" + LEVEL_NIBBLES] * len(BACKENDS)


def test_iq4_nl_zero_block_stores_zero_and_index_8(monkeypatch: pytest.MonkeyPatch) -> None:
    # Skipped (max below 1e-15): scale 0, and best_index(0 * x) = 8 (level 1, nearer
    # 0 than -10 is).
    assert quantize("IQ4_NL", np.zeros(32), monkeypatch) == ["0000" + "88" * 16] * len(BACKENDS)


def test_iq4_nl_group_max_eps_is_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = np.float32(1e-15)
    below = np.nextafter(eps, np.float32(0))
    assert quantize("IQ4_NL", np.full(32, below), monkeypatch) == ["0000" + "88" * 16] * len(
        BACKENDS
    )
    # At 1e-15 itself the block is searched: scale 1e-15 / 113 (0 as f16), but the
    # levels are taken with the float32 scale: all 113 (index 15).
    assert quantize("IQ4_NL", np.full(32, eps), monkeypatch) == ["0000" + "ff" * 16] * len(BACKENDS)


@pytest.mark.parametrize(("value", "scale"), [(1.0, "8820"), (-1.0, "88a0")])
def test_iq4_nl_all_equal_keeps_the_first_pass(
    value: float, scale: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first pass maps max to 127 -> level 113: scale max / 113 (f16 0x2088 for 1),
    # explaining 32 * x**2.  Every trial maps max to (t - 127) -> level -127 and explains
    # exactly as much: ggml's strict > keeps the first.
    got = quantize("IQ4_NL", np.full(32, value), monkeypatch)
    assert got == [scale + "ff" * 16] * len(BACKENDS)


def test_iq4_nl_huge_block_has_an_infinite_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    # x * x * 113 * x overflows: sumqx = inf over a finite sumq2, scale inf (f16 0x7c00),
    # 1 / inf = 0 maps every value to index 8.
    assert quantize("IQ4_NL", np.full(32, 1e13), monkeypatch) == ["007c" + "88" * 16] * len(
        BACKENDS
    )
    # max = -1e13: the first pass maps it to level 113, so the big terms of sumqx are
    # -inf: scale -inf (f16 0xfc00), best = inf, which no trial's inf * inf exceeds.
    got = quantize("IQ4_NL", np.linspace(-1e13, 1e13, 32), monkeypatch)
    assert got == ["00fc" + "88" * 16] * len(BACKENDS)


def test_iq4_nl_partial_lane_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    # The compiled encoder searches 8 blocks at once: counts that are not a multiple of
    # 8 give each block the bytes it has alone.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((19, 32)).astype(np.float32)
    alone = [quantize("IQ4_NL", row, monkeypatch)[0] for row in x]
    for count in (1, 7, 8, 9, 19):
        got = quantize("IQ4_NL", x[:count], monkeypatch)
        assert got == ["".join(alone[:count])] * len(BACKENDS)


def test_iq4_xs_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sub-block scales all 1: d = -1/32 (f16 0xa800), l = nearest_int(1 / d) = -32,
    # biased 0 (scales_h and scales_l zero); d * l = 1 keeps every level.
    want = "00a8" + "0000" + "00" * 4 + LEVEL_NIBBLES * 8
    assert quantize("IQ4_XS", np.tile(LEVELS, 8), monkeypatch) == [want] * len(BACKENDS)


def test_iq4_xs_half_and_zero_sub_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sub-block 2 at half scale: l = -16, biased 16 (high bits 01); sub-block 3 zero:
    # scale 0, l = 0, biased 32 (high bits 10), levels 8.  scales_h = 0x0090.
    x = np.tile(LEVELS, 8)
    x[64:96] *= np.float32(0.5)
    x[96:128] = 0
    nibbles = LEVEL_NIBBLES * 3 + "88" * 16 + LEVEL_NIBBLES * 4
    want = "00a8" + "9000" + "00" * 4 + nibbles
    assert quantize("IQ4_XS", x, monkeypatch) == [want] * len(BACKENDS)


def test_iq4_xs_zero_block_has_negative_zero_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    # max_scale 0: d = -0 / 32 = -0.0 (f16 0x8000); every l = 0, biased 32: scales_h
    # 0xaaaa, scales_l 0; levels 8.
    want = "0080" + "aaaa" + "00" * 4 + "88" * 128
    assert quantize("IQ4_XS", np.zeros(256), monkeypatch) == [want] * len(BACKENDS)


def test_iq4_xs_all_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every sub-block's scale is 1/113; d = -(1/113)/32 (f16 0x8c88), l = -32 (biased
    # 0), d * l = 1/113 maps every 1 to level 113.
    want = "888c" + "0000" + "00" * 4 + "ff" * 128
    assert quantize("IQ4_XS", np.ones(256), monkeypatch) == [want] * len(BACKENDS)


def test_iq4_xs_infinite_scale_reaches_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sub-block scales inf: d = -inf (f16 0xfc00), 1 / d = -0, -0 * inf = NaN, which
    # nearest_int's float trick turns into l = 0 (biased 32: scales_h 0xaaaa); d * 0 is
    # NaN, 1 / NaN is NaN, and best_index(NaN) = 15.
    want = "00fc" + "aaaa" + "00" * 4 + "ff" * 128
    assert quantize("IQ4_XS", np.full(256, 1e13), monkeypatch) == [want] * len(BACKENDS)
