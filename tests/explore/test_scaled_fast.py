"""describe(values, scales) from the joint histogram of (scale byte, element code)
pairs, against a reference that dequantizes every element and takes numpy's
float64 statistics; on the compiled kernel and on numpy."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import _explore, describe
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code
from kiln_np._kernels import backend

with contextlib.suppress(ImportError):
    from kiln_np._kernels import native

E2M1 = ml_dtypes.float4_e2m1fn
E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2
E8M0 = ml_dtypes.float8_e8m0fnu
BACKENDS = [True, False]


@pytest.fixture(params=BACKENDS, ids=["compiled", "numpy"])
def compiled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test on the compiled kernel (where it is built) and on numpy."""
    on = bool(request.param) and backend.BUILT
    monkeypatch.setattr(backend, "COMPILED", on)
    return on


def _element_values(values: np.ndarray) -> np.ndarray:
    if values.dtype == np.int8:
        return values.astype(np.float64) * 2.0**-6  # OCP MXINT8: the byte times 2**-6
    with np.errstate(invalid="ignore"):
        return values.astype(np.float64)


def _scale_values(scales: np.ndarray) -> np.ndarray:
    if scales.dtype == E8M0:
        raw = scales.view(np.uint8).astype(np.int64)
        return np.where(raw == 0xFF, np.nan, np.ldexp(1.0, raw - 127))
    return scales.astype(np.float64)


def _reference(values: np.ndarray, scales: np.ndarray, block: int, axis: int) -> dict[str, Any]:
    """Every element dequantized in float64 (block order: the block axis last), then
    numpy's statistics; the block counts from the padded blocks."""
    v = np.moveaxis(values, axis, -1)
    s = np.moveaxis(scales, axis, -1)
    n, nb = v.shape[-1], s.shape[-1]
    element = _element_values(v)
    scale = np.repeat(_scale_values(s), block, axis=-1)[..., :n]
    with np.errstate(invalid="ignore"):
        deq = (element * scale).reshape(-1)
    deq[np.isnan(deq)] = np.nan  # mx.dequantize's NaN: the canonical one
    finite = deq[np.isfinite(deq)]
    pad = [(0, 0)] * (v.ndim - 1) + [(0, nb * block - n)]
    blocks = np.pad(element, pad).reshape(*v.shape[:-1], nb, block)
    if values.dtype == np.int8:
        ends = np.isin(v.view(np.uint8), [0x7F, 0x80])
    else:
        ends = np.abs(element) == float(ml_dtypes.finfo(values.dtype).max)  # type: ignore[no-untyped-call]
    saturated = np.pad(ends, pad).reshape(blocks.shape).any(axis=-1)
    with np.errstate(invalid="ignore"):
        fields = (deq.view(np.uint64) >> 52).astype(np.int64) & 0x7FF
    return {
        "deq": deq,
        "nan": int(np.isnan(deq).sum()),
        "inf": int(np.isinf(deq).sum()),
        "zero": int((deq == 0).sum()),
        "subnormal": int(((np.abs(finite) < 2.0**-1022) & (finite != 0)).sum()),
        "min": float(finite.min()) if finite.size else None,
        "max": float(finite.max()) if finite.size else None,
        "absmax": float(np.abs(finite).max()) if finite.size else None,
        "mean": float(finite.mean()) if finite.size else None,
        "std": float(finite.std()) if finite.size else None,
        "mean_abs": float(np.abs(finite).mean()) if finite.size else 0.0,
        "exponents": np.bincount(fields, minlength=2048),
        "saturated": int(saturated.sum()),
        "zero_blocks": int((blocks == 0).all(axis=-1).sum()),
        "nan_blocks": int(np.isnan(_scale_values(s)).sum()),
        "values_first": v.reshape(-1),
        "scales_first": s.reshape(-1),
    }


def _case(
    shape: tuple[int, ...], axis: int, block: int, element: Any, scale: Any, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Random codes and scales with a NaN-scale block, an all-zero block and a
    saturating block (a scale of 1 where the scale type can say so)."""
    rng = np.random.default_rng(seed)
    if element == np.int8:
        values = rng.integers(-128, 128, shape).astype(np.int8)
    else:
        values = rng.integers(0, 16 if element == E2M1 else 256, shape).astype(np.uint8)
        values = values.view(element)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    if scale == E8M0:
        raw = rng.integers(100, 150, sshape).astype(np.uint8)
        raw.reshape(-1)[[-1, 2]] = 0xFF  # NaN blocks
    else:
        raw = rng.integers(0x18, 0x70, sshape).astype(np.uint8)
        raw.reshape(-1)[[-1, 2]] = [0x7F, 0xFF]  # both NaN bytes of f8e4m3
        raw.reshape(-1)[3] = 0x00  # a zero scale
    rows = np.moveaxis(values, axis, -1).view(np.uint8)  # a view: writes reach values
    rows[(0,) * (rows.ndim - 1) + (slice(0, block),)] = 0  # the first block all zero
    last = rows[(-1,) * (rows.ndim - 1)]
    last[-1] = 0
    if last.size > 2 * block:  # a calm block that saturates once
        last[block : 2 * block] = 0x01
        last[block + 3] = TOP[element]
    return values, raw.view(scale)


TOP = {E2M1: 0x07, E4M3: 0x7E, E5M2: 0x7B, np.int8: 0x7F}
"""The largest finite element's byte: 6, 448, 57344, 127 (x 2**-6)."""


CASES = [
    pytest.param((6, 100), -1, 32, E2M1, E8M0, id="mxfp4-last-partial"),
    pytest.param((8, 128), -1, 32, E2M1, E8M0, id="mxfp4-last-whole"),
    pytest.param((100, 5), 0, 32, E2M1, E8M0, id="mxfp4-axis0-partial"),
    pytest.param((5, 80), -1, 16, E2M1, E4M3, id="nvfp4-last"),
    pytest.param((40, 5), 0, 16, E2M1, E4M3, id="nvfp4-axis0-partial"),
    pytest.param((3, 70, 2), 1, 32, E4M3, E8M0, id="mxfp8-e4m3-middle"),
    pytest.param((96, 3), 0, 32, E5M2, E8M0, id="mxfp8-e5m2-axis0"),
    pytest.param((4, 96), -1, 32, np.int8, E8M0, id="mxint8-last"),
    pytest.param((70, 3), 0, 32, np.int8, E8M0, id="mxint8-axis0-partial"),
    pytest.param((4, 48), -1, 16, E5M2, E4M3, id="e5m2-inf-times-zero-scale"),
]


def _check(
    d: kiln_np.ScaledDescription,
    values: np.ndarray,
    scales: np.ndarray,
    block: int,
    axis: int,
    first: int,
) -> None:
    want = _reference(values, scales, block, axis)
    got = d.dequantized
    for key in ("nan", "inf", "zero", "subnormal", "min", "max", "absmax"):
        assert getattr(got, key) == want[key], key
    if want["mean"] is None:
        assert (got.mean, got.std) == (None, None)
    else:
        assert got.mean == pytest.approx(want["mean"], abs=1e-12 * want["mean_abs"])
        assert got.std == pytest.approx(want["std"], rel=1e-12, abs=1e-300)
    assert got.exponents is not None
    np.testing.assert_array_equal(got.exponents, want["exponents"])
    assert got.first.dtype == np.float64
    assert got.first.view(np.uint8).tolist() == want["deq"][:first].view(np.uint8).tolist()
    assert (d.saturated, d.zero_blocks, d.nan_blocks) == (
        want["saturated"],
        want["zero_blocks"],
        want["nan_blocks"],
    )
    assert d.blocks == scales.size
    assert d.axis == axis % values.ndim
    assert d.values.histogram is not None
    assert d.scales.histogram is not None
    vbytes, sbytes = values.view(np.uint8).reshape(-1), scales.view(np.uint8).reshape(-1)
    np.testing.assert_array_equal(
        d.values.histogram, np.bincount(vbytes, minlength=d.values.histogram.size)
    )
    np.testing.assert_array_equal(d.scales.histogram, np.bincount(sbytes, minlength=256))
    assert d.values.first.view(np.uint8).tolist() == (
        want["values_first"][:first].view(np.uint8).tolist()
    )
    assert d.scales.first.view(np.uint8).tolist() == (
        want["scales_first"][:first].view(np.uint8).tolist()
    )
    assert (d.values.shape, d.scales.shape, got.shape) == (values.shape, scales.shape, values.shape)
    assert got.count == values.size


@pytest.mark.parametrize(("shape", "axis", "block", "element", "scale"), CASES)
def test_against_dequantizing_every_element(
    compiled: bool,
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple[int, ...],
    axis: int,
    block: int,
    element: Any,
    scale: Any,
) -> None:
    values, scales = _case(shape, axis, block, element, scale, seed=len(shape) + block)
    d = describe(values, scales, block_size=block, axis=axis, first=40)
    _check(d, values, scales, block, axis, 40)
    assert d.nan_blocks == 2
    assert d.zero_blocks >= 1
    # chunks cut to a few blocks (a row read in column ranges): the same answers
    monkeypatch.setattr(_explore.chunks, "CHUNK", 4)
    small = describe(values, scales, block_size=block, axis=axis, first=40)
    assert small.to_dict() == d.to_dict()
    _check(small, values, scales, block, axis, 40)


def test_the_dequantized_values_stated(compiled: bool) -> None:
    values = np.array([0.5, 6.0, -6.0, 0.0, 1.0, 0.0, 0.0, 0.0, 3.0], E2M1)
    scales = np.array([2.0**3, 2.0**-1, np.nan], E8M0)  # NaN: e8m0 0xff
    d = describe(values, scales, block_size=4)
    deq = d.dequantized
    assert (deq.min, deq.max, deq.absmax, deq.nan, deq.zero) == (-48.0, 48.0, 48.0, 1, 4)
    assert (d.saturated, d.zero_blocks, d.nan_blocks) == (1, 0, 1)
    assert deq.mean == pytest.approx((4.0 + 48 - 48 + 0.5) / 8)
    assert deq.first.tolist()[:5] == [4.0, 48.0, -48.0, 0.0, 0.5]
    assert deq.exponents is not None
    assert {int(e): int(c) for e, c in enumerate(deq.exponents) if c} == {
        1023 - 1: 1,  # 0.5
        1023 + 2: 1,  # 4
        1023 + 5: 2,  # +-48
        0: 4,  # the zeros
        2047: 1,  # NaN
    }


def test_compiled_and_numpy_agree_on_a_larger_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(0, 16, (300, 2880)).astype(np.uint8).view(E2M1)
    scales = rng.integers(112, 132, (300, 90)).astype(np.uint8).view(E8M0)
    got = []
    for on in BACKENDS:
        monkeypatch.setattr(backend, "COMPILED", on and backend.BUILT)
        got.append(describe(values, scales, first=8).to_dict())
    assert got[0] == got[1]
    monkeypatch.setattr(backend, "COMPILED", backend.BUILT)
    _check(describe(values, scales, first=8), values, scales, 32, -1, 8)


def test_lazy_payloads(compiled: bool, tmp_path: Path) -> None:
    values, scales = _case((7, 96), -1, 32, E2M1, E8M0, seed=3)
    (tmp_path / "v").write_bytes(bytes(kiln_np.from_numpy(values).data))
    (tmp_path / "s").write_bytes(bytes(kiln_np.from_numpy(scales).data))
    lazy = describe(
        kiln_np.LazyPayload(tmp_path / "v", Code.E2M1, values.shape),
        kiln_np.LazyPayload(tmp_path / "s", Code.E8M0, scales.shape),
        first=10,
    )
    assert lazy.to_dict() == describe(values, scales, first=10).to_dict()
    _check(lazy, values, scales, 32, -1, 10)


@pytest.mark.parametrize("axis", [0, -1])
def test_a_byte_that_is_no_e2m1_code(compiled: bool, axis: int) -> None:
    raw = np.zeros((64, 64), np.uint8)
    raw[40, 3] = 0x13
    scales = np.ones((2, 64) if axis == 0 else (64, 2), E8M0)
    where = 3 * 64 + 40 if axis == 0 else 40 * 64 + 3  # in block order
    with pytest.raises(KilnError, match=f"found 0x13 at element {where}") as info:
        describe(raw.view(E2M1), scales, axis=axis)
    assert (info.value.kind, info.value.index) == ("TYPE", where)


def test_empty_tensors(compiled: bool) -> None:
    d = describe(np.zeros((0, 64), E2M1), np.zeros((0, 2), E8M0))
    assert (d.blocks, d.saturated, d.zero_blocks, d.nan_blocks) == (0, 0, 0, 0)
    assert (d.dequantized.min, d.dequantized.mean, d.dequantized.count) == (None, None, 0)


@pytest.mark.skipif(not backend.BUILT, reason="the compiled extension is not built")
def test_the_kernel_counts_pairs_and_blocks() -> None:
    codes = np.array([[1, 1, 7, 0, 0], [0, 0, 0, 2, 2]], np.uint8)
    scales = np.array([[5, 9], [4, 4]], np.uint8)
    flags = np.zeros(256, np.uint8)
    flags[7] = 1 | 2  # saturating, nonzero
    flags[[1, 2]] = 2
    joint = np.zeros(4 * 65536, np.int64)
    result = native.scaled_pairs(codes, scales, flags, joint, 5, 1, 3, 0, 2)
    assert result == (1, 2, 3)  # block (0, 0) saturates; (0, 1) and (1, 0) are all zero
    assert _pairs_found(joint) == {(5, 1): 2, (5, 7): 1, (9, 0): 2, (4, 0): 3, (4, 2): 2}
    # blocks across rows of memory: (P, n, q) = (1, 3, 2), blocks of 2 along n
    codes = np.array([[1, 7], [1, 0], [0, 0]], np.uint8)
    scales = np.array([[5, 6], [8, 9]], np.uint8)
    joint[:] = 0
    assert native.scaled_pairs(codes, scales, flags, joint, 3, 2, 2, 0, 1) == (1, 2, 3)
    assert _pairs_found(joint) == {(5, 1): 2, (6, 7): 1, (6, 0): 1, (8, 0): 1, (9, 0): 1}
    with pytest.raises(ValueError, match="joint holds"):
        native.scaled_pairs(codes, scales, flags, np.zeros(8, np.int64), 3, 2, 2, 0, 1)
    with pytest.raises(ValueError, match="bad block size"):
        native.scaled_pairs(codes, scales, flags, joint, 3, 2, 0, 0, 1)
    with pytest.raises(ValueError, match="codes holds"):
        native.scaled_pairs(codes, scales, flags, joint, 3, 2, 2, 0, 2)


def _pairs_found(joint: np.ndarray) -> dict[tuple[int, int], int]:
    """The joint histogram's nonzero bins as {(scale byte, code): count}, lanes summed."""
    total = joint.reshape(4, 65536).sum(axis=0)
    return {(int(i) >> 8, int(i) & 0xFF): int(total[i]) for i in np.flatnonzero(total)}


@pytest.mark.parametrize(("shape", "axis"), [((96, 6), 0), ((3, 64, 5), 1)])
def test_blocks_across_rows_of_memory_any_layout(
    compiled: bool, shape: tuple[int, ...], axis: int
) -> None:
    """Blocks along another axis than the last: a C-contiguous array is counted in
    memory order, another layout through block-order rows; the same answers."""
    values, scales = _case(shape, axis, 32, E4M3, E8M0, seed=11)
    want = describe(values, scales, axis=axis, first=70)
    _check(want, values, scales, 32, axis, 70)
    fortran = describe(np.asfortranarray(values), np.asfortranarray(scales), axis=axis, first=70)
    assert fortran.to_dict() == want.to_dict()
    assert fortran.dequantized.first.view(np.uint8).tolist() == (
        want.dequantized.first.view(np.uint8).tolist()
    )
    none = describe(values, scales, axis=axis, first=0)
    assert (none.values.first.size, none.scales.first.size, none.dequantized.first.size) == (
        0,
        0,
        0,
    )
    for part in ("values", "scales", "dequantized"):
        a, b = none.to_dict()[part], want.to_dict()[part]
        assert (a.pop("first"), a.pop("first_bits")) == ([], [])
        b.pop("first")
        b.pop("first_bits")
        assert a == b
