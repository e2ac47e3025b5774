"""The differences kernel (kiln_np._kernels.differences), compiled and numpy, against a
plain numpy float64 reading of the same elements: every count, place and maximum
exactly, the four sums within ``1e-12`` of numpy's relative to their size."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kiln_np._kernels import backend as _backend
from kiln_np._kernels import pool as _pool
from kiln_np._kernels.differences import (
    BLOCK,
    Differences,
    Tally,
    differences,
    float_differences,
)

RNG = np.random.default_rng(37)
TOLERANCE = 1e-12
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
UNSIGNED = {"f32": np.uint32, "bf16": np.uint16, "f16": np.uint16}


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs with the compiled kernel and with the numpy one."""
    if request.param == "compiled" and not _backend.BUILT:
        pytest.skip("the compiled kernels are not built")
    monkeypatch.setattr(_backend, "COMPILED", request.param == "compiled")
    kind: str = request.param
    return kind


def _bits(values: np.ndarray, kind: str) -> np.ndarray:
    return np.ascontiguousarray(values.astype(DTYPES[kind])).view(UNSIGNED[kind])


def _wide(bits: np.ndarray, kind: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        wide: np.ndarray = bits.view(DTYPES[kind]).astype(np.float64)
    return wide


def check(d: Differences, a: np.ndarray, ka: str, b: np.ndarray, kb: str) -> None:
    """``d`` against numpy's float64 reading of ``a`` and ``b``."""
    x, y = _wide(a, ka), _wide(b, kb)
    both_nan = np.isnan(x) & np.isnan(y)
    differ = ~((x == y) | both_nan)
    finite = np.isfinite(x) & np.isfinite(y)
    places = np.flatnonzero(differ)
    assert d.count == x.size
    assert d.differ == places.size
    assert d.first == (places[0] if places.size else -1)
    assert d.nonfinite == x.size - np.count_nonzero(finite)
    zeros = (x == 0) & (y == 0) & (np.signbit(x) != np.signbit(y))
    assert d.signed_zeros == np.count_nonzero(zeros)
    fx, fy = x[finite], y[finite]
    for got, want in (
        (d.aa, np.sum(fx * fx)),
        (d.bb, np.sum(fy * fy)),
        (d.ab, np.sum(fx * fy)),
        (d.dd, np.sum((fx - fy) ** 2)),
    ):
        scale = max(np.sum(np.abs(fx * fx)), np.sum(np.abs(fy * fy)), 1e-300)
        assert abs(got - want) <= TOLERANCE * scale, (got, want)
    with np.errstate(invalid="ignore", divide="ignore"):
        ad = np.where(finite, np.abs(x - y), np.inf)
        rel = np.where(finite, ad / np.maximum(np.abs(x), np.abs(y)), np.inf)
    if places.size:
        for value, at, errors in ((d.max_abs, d.max_abs_at, ad), (d.max_rel, d.max_rel_at, rel)):
            best = errors[places].max()
            assert value == best
            assert at == places[np.flatnonzero(errors[places] == best)[0]]
    else:
        assert (d.max_abs, d.max_abs_at, d.max_rel, d.max_rel_at) == (0.0, -1, 0.0, -1)


def _pair(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Normal values and a perturbed copy, with every kind of special place."""
    x = RNG.standard_normal(n) * 3
    y = x * (1 + RNG.standard_normal(n) * 1e-2)
    y[::5] = x[::5]  # equal places
    if n > 40:
        x[3], y[3] = np.nan, np.nan
        x[7], y[7] = np.inf, np.inf
        x[11], y[11] = 1.0, np.nan
        x[13], y[13] = -np.inf, 2.0
        x[17], y[17] = 0.0, -0.0
        x[19], y[19] = 0.0, 0.5
        x[23], y[23] = -2.0, 2.0  # relative error 2
    return x, y


@pytest.mark.parametrize("ka", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("kb", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("n", [0, 1, 7, BLOCK - 1, 3 * BLOCK + 5])
def test_against_numpy(kernels: str, ka: str, kb: str, n: int) -> None:
    x, y = _pair(n)
    a, b = _bits(x, ka), _bits(y, kb)
    check(differences(a, ka, b, kb), a, ka, b, kb)


def test_threads_split_gives_the_same_result(kernels: str, threads: int, tiny: None) -> None:
    x, y = _pair(5 * BLOCK + 3)
    y[[11, 13]] = x[[11, 13]]  # no infinite error: the largest is
    y[4 * BLOCK + 100] = x[4 * BLOCK + 100] + 1e6  # in a late range
    a, b = _bits(x, "bf16"), _bits(y, "f32")
    d = differences(a, "bf16", b, "f32")
    check(d, a, "bf16", b, "f32")
    assert d.max_abs_at == 4 * BLOCK + 100


def test_the_first_place_of_a_maximum_wins(kernels: str) -> None:
    x = np.zeros(4 * BLOCK, np.float32)
    y = x.copy()
    y[[5, BLOCK + 9, 3 * BLOCK]] = 2.0  # three ties, in three blocks
    y[[6, 7]] = -1.0
    d = differences(x, "f32", y, "f32")
    assert (d.max_abs, d.max_abs_at, d.max_rel, d.max_rel_at) == (2.0, 5, 1.0, 5)
    assert (d.differ, d.first, d.dd) == (5, 5, 14.0)


def test_nan_payloads_are_told_apart_by_their_float32_bits(kernels: str) -> None:
    a = np.array([0x7FC0, 0x7FC1, 0xFFC0, 0x7F81], np.uint16)  # bf16 NaNs
    b = np.array([0x7FC00000, 0x7FC10000, 0x7FC00000, 0x7F810000], np.uint32)
    d = differences(a, "bf16", b, "f32")
    assert (d.differ, d.nan_bits, d.nonfinite) == (0, 1, 4)
    same = differences(a, "bf16", a[[1, 0, 2, 3]].copy(), "bf16")
    assert same.nan_bits == 2


def test_large_float32_values_do_not_overflow_the_sums(kernels: str) -> None:
    big = np.float32(3e38)
    a = np.full(3 * BLOCK, big, np.float32)
    b = a.copy()
    b[0] = -big
    d = differences(a, "f32", b, "f32")
    assert d.nonfinite == 0
    assert d.dd == pytest.approx((2 * 3e38) ** 2, rel=1e-6)
    assert d.aa == pytest.approx(3 * BLOCK * 9e76, rel=1e-6)


@given(
    hnp.arrays(np.uint16, st.integers(0, 300)),
    st.integers(0, 2**16 - 1),
    st.sampled_from(["bf16", "f16"]),
)
def test_every_bit_pattern(bits: np.ndarray, flip: int, kind: str) -> None:
    """Any 16-bit patterns (NaNs of every payload, infinities, subnormals) against
    others, both kernels."""
    other = bits ^ np.uint16(flip)
    for compiled in (True, False):
        if compiled and not _backend.BUILT:
            continue
        saved = _backend.COMPILED
        _backend.COMPILED = compiled
        try:
            check(differences(bits, kind, other, kind), bits, kind, other, kind)
        finally:
            _backend.COMPILED = saved


def test_float_differences_takes_the_callers_equality_and_bits() -> None:
    x = np.array([2.0**53, 1.0, np.nan])
    y = np.array([2.0**53, 1.0, np.nan])
    equal = np.array([False, True, True])  # integers 2**53 + 1 and 2**53: not equal
    d = float_differences(x, y, equal=equal)
    assert (d.differ, d.first, d.max_abs, d.max_abs_at) == (1, 0, 0.0, 0)
    bits = (np.array([1, 2, 3], np.uint8), np.array([1, 2, 4], np.uint8))
    assert float_differences(x, y, bits=bits).nan_bits == 1


def test_tally_adds_pairwise_and_keeps_the_first_maximum() -> None:
    tally = Tally()
    parts = [np.array([k, 0, 3], np.float32) for k in range(7)]
    for k, part in enumerate(parts):
        tally.add(float_differences(part, np.zeros(3, np.float32)).shifted(3 * k))
    total = tally.total()
    assert (total.count, total.differ, total.first) == (21, 13, 2)
    assert (total.max_abs, total.max_abs_at) == (6.0, 18)
    assert total.aa == sum(float(np.dot(p, p)) for p in parts)


def test_bad_arguments_are_refused() -> None:
    a = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="kind must be one of"):
        differences(a, "f64", a, "f32")
    with pytest.raises(ValueError, match="one length"):
        differences(a, "f32", a[:3], "f32")
    with pytest.raises(ValueError, match="2 bytes"):
        differences(a, "bf16", a, "f32")
    with pytest.raises(TypeError, match="numpy array"):
        differences(a, "f32", [0.0] * 4, "f32")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="C-contiguous"):
        differences(np.zeros(8, np.float32)[::2], "f32", a, "f32")
    assert _pool.COMPILED_THREAD_MIN_LANES > 0
