"""The statistics kernel (kiln_np._kernels.moments), compiled and numpy, against numpy's
float64 statistics: min, max and every count exactly, mean and std within the contract
``|mean - exact| <= 1e-12 * mean(|x|)``, ``|std - exact| <= 1e-12 * rms(x)``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kiln_np._kernels import backend as _backend
from kiln_np._kernels import native as _native
from kiln_np._kernels import pool as _pool
from kiln_np._kernels.moments import BLOCK, Moments, moments

RNG = np.random.default_rng(22)
TOLERANCE = 1e-12


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs with the compiled kernel and with the numpy one."""
    monkeypatch.setattr(_backend, "COMPILED", request.param == "compiled")
    kind: str = request.param
    return kind


def as_float64(values: np.ndarray, kind: str) -> np.ndarray:
    """The elements' values, decoded by numpy and ml_dtypes (not by the module)."""
    dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[kind]
    with np.errstate(invalid="ignore"):  # a signalling NaN becomes quiet
        wide: np.ndarray = values.view(dtype).astype(np.float64)
    return wide


def check(m: Moments, values: np.ndarray, kind: str) -> None:
    """m against numpy's statistics of the same elements."""
    x = as_float64(values, kind)
    finite = x[np.isfinite(x)]
    assert m.count == x.size
    assert m.finite == finite.size
    assert m.zeros == np.count_nonzero(x == 0)
    assert m.nan == np.count_nonzero(np.isnan(x))
    assert m.posinf == np.count_nonzero(x == np.inf)
    assert m.neginf == np.count_nonzero(x == -np.inf)
    if not finite.size:
        assert (m.min, m.max, m.mean, m.m2, m.std) == (None, None, 0.0, 0.0, None)
        return
    assert m.min == finite.min()
    assert m.max == finite.max()
    assert m.std is not None
    assert abs(m.mean - finite.mean()) <= TOLERANCE * np.mean(np.abs(finite))
    assert abs(m.std - finite.std()) <= TOLERANCE * np.sqrt(np.mean(finite * finite))


def f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32)


def bits16(x: np.ndarray, kind: str) -> np.ndarray:
    dtype = ml_dtypes.bfloat16 if kind == "bf16" else np.float16
    return np.asarray(x).astype(dtype).view(np.uint16)


# -- the accuracy contract ------------------------------------------------------------------


def test_large_normal_data_split_over_threads(kernels: str) -> None:
    n = 2**24 + 1001  # compiled: split over every core; numpy: over chunks and cores
    values = f32(RNG.standard_normal(n) * 3 + 0.5)
    m = moments(values, "f32")
    check(m, values, "f32")
    assert m.finite == n


@pytest.mark.parametrize("kind", ["f32", "bf16", "f16"])
def test_a_large_offset_with_a_tiny_spread(kernels: str, kind: str) -> None:
    n = 3 * BLOCK + 77
    x = 1e4 + 1e-3 * RNG.standard_normal(n) if kind == "f32" else 100 + RNG.standard_normal(n)
    values = f32(x) if kind == "f32" else bits16(x, kind)
    m = moments(values, kind)
    check(m, values, kind)
    assert m.std is not None
    assert m.std > 0


def test_values_near_the_float32_maximum(kernels: str) -> None:
    top = float(np.finfo(np.float32).max)
    for x in (
        RNG.uniform(-top, top, 5 * BLOCK + 3),
        np.full(BLOCK + 5, top),
        top - RNG.uniform(0, top * 1e-6, 2 * BLOCK + 1),
    ):
        values = f32(x)
        m = moments(values, "f32")
        check(m, values, "f32")
        assert np.isfinite(m.m2)


def test_subnormals(kernels: str) -> None:
    bits = RNG.integers(0, 1 << 23, 4 * BLOCK + 9, dtype=np.uint32)
    bits[::3] |= np.uint32(0x80000000)
    check(moments(bits.view(np.float32), "f32"), bits.view(np.float32), "f32")
    for kind, mantissa in (("bf16", 1 << 7), ("f16", 1 << 10)):
        half = RNG.integers(0, mantissa, 4 * BLOCK + 9, dtype=np.uint16)
        half[::3] |= np.uint16(0x8000)
        m = moments(half, kind)
        check(m, half, kind)
        assert m.min is not None
        assert m.max is not None
        assert m.min < 0 < m.max


@pytest.mark.parametrize("kind", ["f32", "bf16", "f16"])
def test_random_bits_every_pattern(kernels: str, kind: str) -> None:
    # Quiet and signalling NaNs of either sign, infinities, subnormals, zeros.
    n = 7 * BLOCK + 13
    values: np.ndarray
    if kind == "f32":
        values = RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        values = RNG.integers(0, 1 << 16, n, dtype=np.uint16)
    bits = values.view(np.uint32 if kind == "f32" else np.uint16)
    inf = {"f32": 0x7F800000, "bf16": 0x7F80, "f16": 0x7C00}[kind]
    sign = 0x80000000 if kind == "f32" else 0x8000
    for start, pattern in enumerate([inf, inf | sign, 0, sign]):
        bits[start :: 997 + start] = pattern
    m = moments(values, kind)
    check(m, values, kind)
    assert min(m.nan, m.posinf, m.neginf, m.zeros) > 0


def test_every_16_bit_pattern_decodes_exactly() -> None:
    patterns = np.arange(1 << 16, dtype=np.uint16)
    for code, kind in ((1, "bf16"), (2, "f16")):
        x = as_float64(patterns, kind)
        got = np.array([_native.moments(code, patterns, i, i + 1)[1] for i in range(1 << 16)])
        finite = np.isfinite(x)
        assert np.array_equal(got[finite].view(np.uint64), x[finite].view(np.uint64))
        assert np.all(got[~finite] == np.inf)  # min of no finite value


@pytest.mark.parametrize("kind", ["f32", "bf16", "f16"])
def test_special_inputs(kernels: str, kind: str) -> None:
    specials = {
        "empty": np.zeros(0),
        "one": np.array([-2.5]),
        "zeros": np.array([0.0, -0.0] * 1500),
        "nan": np.full(BLOCK + 3, np.nan),
        "inf": np.full(2 * BLOCK, np.inf),
        "mixed": np.array([np.inf, -np.inf, np.nan, 1.0, -0.0, 0.0, 3.0] * 999),
    }
    for x in specials.values():
        values = f32(x) if kind == "f32" else bits16(x, kind)
        check(moments(values, kind), values, kind)
    one = moments(f32(np.array([-2.5])) if kind == "f32" else bits16(np.array([-2.5]), kind), kind)
    assert one[:6] == (1, 1, -2.5, -2.5, -2.5, 0.0)
    assert one.std == 0.0


def test_nan_payloads_and_signs(kernels: str) -> None:
    patterns = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0xFFFFFFFF]
    values = np.array([*patterns, 0x7F800000, 0xFF800000, 0x80000000, 0x3F800000], np.uint32)
    m = moments(values.view(np.float32), "f32")
    assert m[:10] == (10, 2, -0.0, 1.0, 0.5, 0.5, 1, 6, 1, 1)
    half = np.array([0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7C00, 0xFC00, 0x8000, 0x3C00], np.uint16)
    assert moments(half, "f16")[:10] == (8, 2, -0.0, 1.0, 0.5, 0.5, 1, 4, 1, 1)
    brain = np.array([0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7F80, 0xFF80, 0x8000, 0x3F80], np.uint16)
    assert moments(brain, "bf16")[:10] == (8, 2, -0.0, 1.0, 0.5, 0.5, 1, 4, 1, 1)


@pytest.mark.parametrize(
    "count", [1, 15, 16, 17, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 16, 4 * BLOCK - 1]
)
def test_a_nan_or_an_infinity_at_every_kind_of_position(kernels: str, count: int) -> None:
    base = RNG.standard_normal(count)
    for at in sorted({0, count // 2, count - 1, min(16, count - 1)}):
        for bad in (np.nan, np.inf, -np.inf):
            x = base.copy()
            x[at] = bad
            for kind in ("f32", "bf16", "f16"):
                values = f32(x) if kind == "f32" else bits16(x, kind)
                check(moments(values, kind), values, kind)


@settings(max_examples=60)
@given(
    hnp.arrays(
        np.float32,
        st.integers(0, 3 * BLOCK),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    ),
    st.booleans(),
)
def test_any_float32_array(values: np.ndarray, compiled: bool) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_backend, "COMPILED", compiled)
        check(moments(values, "f32"), values, "f32")


# -- the two kernels and the thread counts agree ---------------------------------------------


def test_the_compiled_and_numpy_kernels_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    bits = RNG.integers(0, 1 << 16, 5 * BLOCK + 3, dtype=np.uint16)
    normal = f32(RNG.standard_normal(5 * BLOCK + 3))
    for values, kind in ((bits, "bf16"), (bits, "f16"), (normal, "f32")):
        monkeypatch.setattr(_backend, "COMPILED", True)
        fast = moments(values, kind)
        monkeypatch.setattr(_backend, "COMPILED", False)
        slow = moments(values, kind)
        same = ("count", "finite", "min", "max", "zeros", "nan", "posinf", "neginf")
        assert [getattr(fast, f) for f in same] == [getattr(slow, f) for f in same]
        assert fast.mean == pytest.approx(slow.mean, rel=1e-13)
        assert fast.m2 == pytest.approx(slow.m2, rel=1e-13)


@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_one_two_and_eight_threads_agree(
    monkeypatch: pytest.MonkeyPatch, kernels: str, kind: str
) -> None:
    n = 2 * _pool.COMPILED_THREAD_MIN_LANES + 12345
    x = RNG.standard_normal(n) * 1e3 - 7
    x[n - 3] = np.nan  # in the last range
    values = f32(x) if kind == "f32" else bits16(x, kind)
    got = []
    for k in (1, 2, 8):
        monkeypatch.setattr(_pool, "_threads", lambda k=k: k)
        got.append(moments(values, kind))
        check(got[-1], values, kind)
    assert len({m[:4] + m[6:] for m in got}) == 1
    assert len({m.mean for m in got}) <= 3


@pytest.mark.usefixtures("tiny")
def test_tiny_thread_ranges(monkeypatch: pytest.MonkeyPatch, kernels: str) -> None:
    monkeypatch.setattr(_pool, "_threads", lambda: 5)
    for count in range(0, 60, 7):
        x = RNG.standard_normal(count)
        x[count // 2 :: 5] = np.inf
        check(moments(f32(x), "f32"), f32(x), "f32")


def test_merge_is_the_statistics_of_both_parts(kernels: str) -> None:
    values = f32(RNG.standard_normal(3 * BLOCK) + 5)
    values[7] = np.nan
    whole = moments(values, "f32")
    for cut in (0, 1, BLOCK, 2 * BLOCK + 5, values.size):
        parts = moments(values[:cut], "f32").merge(moments(values[cut:], "f32"))
        assert parts[:4] == whole[:4]
        assert parts[6:] == whole[6:]
        check(parts, values, "f32")
    assert Moments.empty().merge(whole) == whole
    assert whole.merge(Moments.empty()) == whole


# -- bad calls --------------------------------------------------------------------------------


def test_the_wrapper_refuses_bad_arrays() -> None:
    with pytest.raises(ValueError, match="kind"):
        moments(np.zeros(3, np.float32), "f64")
    with pytest.raises(TypeError, match="numpy array"):
        moments(b"\x00" * 8, "f32")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1-D"):
        moments(np.zeros((2, 2), np.float32), "f32")
    with pytest.raises(ValueError, match="1-D"):
        moments(np.zeros(6, np.float32)[::2], "f32")
    with pytest.raises(ValueError, match="1-D"):
        moments(np.zeros(3, ">f4"), "f32")
    with pytest.raises(ValueError, match="2 bytes"):
        moments(np.zeros(3, np.float32), "bf16")


def test_the_extension_refuses_bad_calls() -> None:
    src = np.zeros(8, np.uint16)
    with pytest.raises(TypeError, match="4 arguments"):
        _native.moments(1, src, 0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="kind"):
        _native.moments(3, src, 0, 8)
    with pytest.raises(ValueError, match="range"):
        _native.moments(1, src, 5, 4)
    with pytest.raises(ValueError, match="range"):
        _native.moments(1, src, -1, 4)
    with pytest.raises(ValueError, match="holds 16 bytes"):
        _native.moments(0, src, 0, 5)
    with pytest.raises(ValueError, match="range"):
        _native.moments(0, src, 0, 2**62)
    with pytest.raises(ValueError, match="contiguous"):
        _native.moments(1, np.zeros(16, np.uint16)[::2], 0, 8)
    with pytest.raises(TypeError):
        _native.moments(1, "text", 0, 1)  # type: ignore[arg-type]
    assert _native.moments(2, src, 3, 3) == (0, np.inf, -np.inf, 0.0, 0.0, 0, 0, 0, 0)
    assert _native.moments(1, memoryview(b"\x80\x3f\x00\x40"), 0, 2)[:5] == (2, 1, 2, 1.5, 0.5)
