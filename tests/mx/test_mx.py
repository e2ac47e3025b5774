"""kiln_np.mx: exact block-scaled decode, the quantization rules, layout repacking.

Oracles: an independent reference written here from the OCP MX v1.0 and OFP8
definitions with ``math.ldexp`` (every e8m0 scale byte 0-255 times every
element bit pattern), gguf-py's ``quants.dequantize``/``quantize`` for MXFP4
and ``dequantize`` for NVFP4, ONNX's reference ``DequantizeLinear``, and a
transcription of gpt-oss's own decoder.

Where gguf-py and the formats' rules differ, the comparison excludes exactly
these (docs/mx.md lists the same):

1. gguf-py turns the e2m1 code for -0 (0x8) into +0;
2. it never produces NaN for an e8m0 scale byte 0xff (it reads 2**128);
3. it reads the NVFP4 scale byte 0x7f as 0 and ignores the scale's sign bit;
4. its float32 overflow gives inf where kiln_np raises (scale bytes 0xfd, 0xfe);
5. its quantize wraps the scale byte of a block whose max is below 2**-125
   (kiln_np clamps to 0x00).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, needs, optional
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import Code, KilnError, Layout, Payload, from_numpy, mx
from kiln_np._core.checks import U8

if TYPE_CHECKING:
    import gguf
    import onnx
    import onnx.reference
else:
    gguf = optional("gguf")
    onnx = optional("onnx", "reference")

E2M1 = np.dtype(ml_dtypes.float4_e2m1fn)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
BF16 = np.dtype(ml_dtypes.bfloat16)
MXFP4 = Layout("ggml.mxfp4", 17)
NVFP4 = Layout("ggml.nvfp4", 36)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "mx.md"
CANONICAL_NAN = {
    np.dtype(np.float32): 0x7FC00000,
    np.dtype(np.float64): 0x7FF8000000000000,
    np.dtype(np.float16): 0x7E00,
    BF16: 0x7FC0,
}


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on the compiled MXFP4 kernel (when built) and on the numpy path."""
    if request.param == "numpy":
        monkeypatch.setattr(kiln_np._kernels.backend, "COMPILED", False)
    return str(request.param)


# -- the independent reference, from the specs' definitions --------------------------------


def ref_element(kind: str, c: int) -> float:
    """The value of element bit pattern ``c`` (OCP MX v1.0 / OFP8 tables)."""
    if kind == "e2m1":
        sign = -1.0 if c & 8 else 1.0
        e, m = (c >> 1) & 3, c & 1
        return sign * (m * 0.5 if e == 0 else math.ldexp(1 + m / 2, e - 1))
    if kind == "f8e4m3":
        sign = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            return math.nan
        return sign * (math.ldexp(m / 8, -6) if e == 0 else math.ldexp(1 + m / 8, e - 7))
    if kind == "f8e5m2":
        sign = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 2) & 31, c & 3
        if e == 31:
            return sign * math.inf if m == 0 else math.nan
        return sign * (math.ldexp(m / 4, -14) if e == 0 else math.ldexp(1 + m / 4, e - 15))
    assert kind == "i8"
    return math.ldexp(c - 256 if c & 0x80 else c, -6)  # MXINT8: the implicit 2**-6


def ref_e8m0(s: int) -> float:
    return math.nan if s == 0xFF else math.ldexp(1.0, s - 127)


ELEMENTS = {"e2m1": (E2M1, 16), "f8e4m3": (E4M3, 256), "f8e5m2": (E5M2, 256), "i8": (np.int8, 256)}
OUTS = [np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), BF16]


def ref_table(kind: str, scale: str) -> np.ndarray:
    """Exact products (float64) of every scale byte (rows) and element code (columns)."""
    n = ELEMENTS[kind][1]
    sv = [ref_e8m0(s) if scale == "e8m0" else ref_element("f8e4m3", s) for s in range(256)]
    ev = [ref_element(kind, c) for c in range(n)]
    return np.array([[a * b for b in ev] for a in sv])


def expected_bits(exact: np.ndarray, out: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(bits in ``out``, exact?) of exact float64 products."""
    with np.errstate(over="ignore"):
        cast = exact.astype(out)
    ok = (cast.astype(np.float64) == exact) | np.isnan(exact)
    cast[np.isnan(exact)] = np.nan
    return cast.view(f"u{out.itemsize}"), ok


@pytest.mark.parametrize("scale", ["e8m0", "f8e4m3"])
@pytest.mark.parametrize("kind", list(ELEMENTS))
@pytest.mark.parametrize("out", OUTS, ids=lambda d: d.name)
def test_every_scale_byte_times_every_element(
    kind: str, scale: str, out: np.dtype[Any], kernels: str
) -> None:
    dtype, n = ELEMENTS[kind]
    exact = ref_table(kind, scale)
    want, ok = expected_bits(exact, out)
    if out == np.float64:
        assert ok.all()  # float64 holds every MX product
    codes = np.tile(np.arange(n, dtype=np.uint8), 256).view(dtype)
    sdtype = E8M0 if scale == "e8m0" else E4M3
    scales = np.arange(256, dtype=np.uint8).view(sdtype)
    s_each = np.repeat(np.arange(256, dtype=np.uint8), n)
    flat_ok = ok.reshape(-1)
    # every exact pair together, one element per block: all decode to the reference bits
    got = mx.dequantize(codes[flat_ok], s_each[flat_ok].view(sdtype), block_size=1, dtype=out)
    np.testing.assert_array_equal(
        got.view(f"u{out.itemsize}"), want.reshape(-1)[flat_ok], strict=True
    )
    # the same with the blocks of n elements sharing each scale byte, for the scale bytes
    # whose every product is exact
    whole = ok.all(axis=1)
    got = mx.dequantize(codes.reshape(256, n)[whole], scales[whole, None], block_size=n, dtype=out)
    np.testing.assert_array_equal(got.view(f"u{out.itemsize}"), want[whole], strict=True)
    # and every inexact pair raises on its own, naming its block
    bad = np.flatnonzero(~flat_ok)
    for i in bad[:: max(1, bad.size // 64)]:
        with pytest.raises(KilnError, match=r"TYPE: block \(0,\).*dtype=numpy.float64") as e:
            mx.dequantize(codes[i : i + 1], s_each[i : i + 1].view(sdtype), block_size=1, dtype=out)
        assert e.value.kind == "TYPE"
        assert e.value.index == 0


@pytest.mark.parametrize("chunk", [None, 8])
def test_the_first_offending_block_is_named(
    chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk is not None:  # the check runs a chunk of rows at a time: rows of 64 here
        monkeypatch.setattr(mx.exact, "_CHUNK_ELEMENTS", chunk)
    v = np.full((3, 64), 6.0, E2M1)
    s = np.full((3, 2), 127, np.uint8)
    s[1, 1] = s[2, 0] = 0xFE  # 6 x 2**127 overflows float32
    with pytest.raises(KilnError) as e:
        mx.dequantize(v, s)
    assert e.value.message.startswith("block (1, 1): element (1, 32) ")
    assert "float32 cannot hold exactly (it overflows)" in e.value.message
    assert e.value.index == 1 * 64 + 32
    # along axis 0 the blocks are (2, 2); both blocks (0, 1) and (1, 0) have scale 2**127,
    # but only block (0, 1) holds an element that overflows (4.0; 1.0 x 2**127 is fine)
    w = np.full((4, 2), 1.0, E2M1)
    t = np.full((2, 2), 127, np.uint8)
    t[1, 0] = t[0, 1] = 0xFE
    w[1, 1] = 4.0
    with pytest.raises(KilnError, match=r"^TYPE: block \(0, 1\): element \(1, 1\) "):
        mx.dequantize(w, t, block_size=2, axis=0)
    # zeros and NaN never raise, whatever the scale
    z = np.zeros((1, 32), E2M1)
    assert np.isnan(mx.dequantize(z, np.array([[0xFF]], np.uint8))).all()
    assert bits(mx.dequantize(z, np.array([[0xFE]], np.uint8), dtype=np.float16)) == bytes(64)


def test_nan_scale_and_nan_elements_are_canonical(kernels: str) -> None:
    v = np.array([0x7F, 0xFF, 0x00, 0x80], np.uint8).view(E4M3)
    for out in OUTS:
        got = mx.dequantize(v, np.array([1.0, 2.0**-127], E8M0), block_size=2, dtype=out)
        u = got.view(f"u{out.itemsize}")
        assert u[0] == u[1] == CANONICAL_NAN[out]
        assert u[2] == 0
        assert u[3] == 1 << (8 * out.itemsize - 1)
        nan_block = mx.dequantize(v[2:], np.array([0xFF], np.uint8), block_size=2, dtype=out)
        assert (nan_block.view(u.dtype) == CANONICAL_NAN[out]).all()
    # f8e5m2 inf times a zero f8e4m3 scale: NaN, canonical; times 0x38 (1.0): inf
    inf = np.array([0x7C, 0xFC], np.uint8).view(E5M2)
    got = mx.dequantize(inf, np.array([0x00, 0x38], np.uint8).view(E4M3), block_size=1)
    assert got.view(np.uint32).tolist() == [0x7FC00000, 0xFF800000]


# -- shapes, axes, partial blocks, payloads ---------------------------------------------


def expand(values: np.ndarray, scales_f64: np.ndarray, block_size: int, axis: int) -> np.ndarray:
    """The per-element reference: scales repeated along ``axis``, then multiplied."""
    rep = np.repeat(scales_f64, block_size, axis=axis)
    rep = np.take(rep, np.arange(values.shape[axis]), axis=axis)
    out: np.ndarray = values.astype(np.float64) * rep
    return out


@pytest.mark.parametrize(
    ("shape", "axis", "block_size"),
    [
        ((96,), 0, 32),
        ((5, 64), -1, 32),
        ((5, 70), 1, 32),  # a partial last block
        ((7, 3, 5), 0, 2),  # blocks along a leading axis, partial
        ((4, 9, 3), 1, 4),
        ((2, 3, 33), -1, 16),
        ((3, 1), 0, 5),  # one partial block
        ((0, 32), -1, 32),  # empty
        ((4, 0), 1, 32),
    ],
)
@pytest.mark.parametrize("packed", [False, True])
def test_axes_and_partial_blocks(
    shape: tuple[int, ...], axis: int, block_size: int, packed: bool, kernels: str
) -> None:
    rng = np.random.default_rng(sum(shape) + axis)
    codes = rng.integers(0, 16, shape, dtype=np.uint8).view(E2M1)
    a = axis % len(shape)
    sshape = (*shape[:a], -(-shape[a] // block_size), *shape[a + 1 :])
    sbytes = rng.integers(100, 150, sshape, dtype=np.uint8)
    want = expand(codes, np.ldexp(1.0, sbytes.astype(int) - 127), block_size, a)
    values = from_numpy(codes) if packed else codes
    for out in (np.float64, np.float32):
        got = mx.dequantize(
            values, from_numpy(sbytes.view(E8M0)), block_size=block_size, axis=axis, dtype=out
        )
        assert got.shape == shape
        assert got.dtype == out
        assert got.flags.c_contiguous
        assert bits(got) == bits(want.astype(out))


def test_strided_and_odd_inputs(kernels: str) -> None:
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 16, (64, 6), dtype=np.uint8).view(E2M1)
    s = rng.integers(120, 130, (2, 6), dtype=np.uint8)
    want = expand(codes, np.ldexp(1.0, s.astype(int) - 127), 32, 0)
    assert bits(mx.dequantize(codes, s, axis=0)) == bits(want.astype(np.float32))
    # a transposed (non-contiguous) view decodes as its values say
    assert bits(mx.dequantize(codes.T, s.T)) == bits(want.T.astype(np.float32))
    # odd e2m1 counts, packed: 1, 3, 5, 33 elements (a chunk tail that is not a whole index)
    for n in (1, 3, 5, 33, 35):
        c = rng.integers(0, 16, n, dtype=np.uint8).view(E2M1)
        sc = rng.integers(120, 130, -(-n // 4), dtype=np.uint8)
        want1 = expand(c, np.ldexp(1.0, sc.astype(int) - 127), 4, 0)
        for v in (c, from_numpy(c)):
            assert bits(mx.dequantize(v, sc, block_size=4)) == bits(want1.astype(np.float32))


def test_chunk_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(8)
    for rows, n in ((7, 6), (5, 3), (9, 32), (3, 130)):
        codes = rng.integers(0, 16, (rows, n), dtype=np.uint8).view(E2M1)
        s = rng.integers(120, 130, (rows, -(-n // 4)), dtype=np.uint8)
        monkeypatch.setattr(mx.exact, "_CHUNK_ELEMENTS", 8)
        small = [mx.dequantize(v, s, block_size=4) for v in (codes, from_numpy(codes))]
        monkeypatch.undo()
        want = mx.dequantize(codes, s, block_size=4, dtype=np.float64).astype(np.float32)
        assert all(bits(x) == bits(want) for x in small)


def test_other_value_types_and_payloads() -> None:
    rng = np.random.default_rng(9)
    for dtype in (E4M3, E5M2, np.dtype(np.int8)):
        raw = rng.integers(0, 256, (4, 32), dtype=np.uint8)
        v = raw.view(dtype)
        s = rng.integers(110, 140, (4, 1), dtype=np.uint8)
        want = mx.dequantize(v, s, dtype=np.float64)
        got = mx.dequantize(from_numpy(v), from_numpy(s.view(E8M0)), dtype=np.float64)
        assert bits(got) == bits(want)
    # raw uint8 scale bytes are e8m0, as a u8 payload too
    v = np.ones(32, E2M1)
    assert mx.dequantize(v, from_numpy(np.array([128], np.uint8)))[0] == 2.0
    # NVFP4 style: f8e4m3 scales default to blocks of 16
    s = np.array([1.5, -0.25], E4M3)
    assert mx.dequantize(np.ones(32, E2M1), s).tolist() == [1.5] * 16 + [-0.25] * 16


@given(
    data=st.binary(min_size=1, max_size=96),
    scale_bytes=st.binary(min_size=1, max_size=12),
    kind=st.sampled_from(["e2m1", "f8e4m3", "i8"]),
    scale=st.sampled_from(["e8m0", "f8e4m3"]),
    out=st.sampled_from(OUTS[1:]),
)
def test_raises_if_and_only_if_some_product_is_inexact(
    data: bytes, scale_bytes: bytes, kind: str, scale: str, out: np.dtype[Any]
) -> None:
    dtype, n = ELEMENTS[kind]
    codes = (np.frombuffer(data, np.uint8).astype(np.intp) % n).astype(np.uint8)
    block_size = -(-codes.size // len(scale_bytes))
    sb = np.frombuffer(scale_bytes, np.uint8)[: -(-codes.size // block_size)]
    table = ref_table(kind, scale)
    exact = table[np.repeat(sb, block_size)[: codes.size], codes]
    want, ok = expected_bits(exact, out)
    sdtype = E8M0 if scale == "e8m0" else E4M3
    args = (codes.view(dtype), sb.view(sdtype))
    if ok.all():
        got = mx.dequantize(*args, block_size=block_size, dtype=out)
        assert got.view(want.dtype).tobytes() == want.tobytes()
    else:
        first = int(np.flatnonzero(~ok)[0])
        with pytest.raises(KilnError, match=rf"^TYPE: block \({first // block_size},\)") as e:
            mx.dequantize(*args, block_size=block_size, dtype=out)
        assert e.value.index == first


# -- errors ----------------------------------------------------------------------------------


def outcome(call: Any) -> Any:
    """What ``call()`` returns, or the KilnError it raises (anything else propagates)."""
    try:
        return call()
    except KilnError as exc:
        return exc


@given(
    vdtype=st.sampled_from([E2M1, E4M3, E5M2, np.dtype(np.int8), np.dtype(np.float32)]),
    sdtype=st.sampled_from([E8M0, E4M3, np.dtype(np.uint8), np.dtype(np.int8)]),
    shape=st.lists(st.integers(0, 5), max_size=3),
    sshape=st.lists(st.integers(0, 3), max_size=3),
    block_size=st.one_of(st.none(), st.integers(-1, 6)),
    axis=st.integers(-4, 3),
    out=st.sampled_from([*OUTS, np.dtype(np.int16)]),
    payloads=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_input_decodes_or_raises_kiln_error(
    vdtype: np.dtype[Any],
    sdtype: np.dtype[Any],
    shape: list[int],
    sshape: list[int],
    block_size: int | None,
    axis: int,
    out: np.dtype[Any],
    payloads: bool,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    n = 16 if vdtype == E2M1 else 256
    raw = rng.integers(0, n, shape, dtype=np.uint8)
    values = raw.view(vdtype) if vdtype.itemsize == 1 else raw.astype(vdtype)
    scales = rng.integers(0, 256, sshape, dtype=np.uint8).view(sdtype)
    args: tuple[Any, Any] = (values, scales)
    if payloads and vdtype != np.float32 and sdtype != np.int8:
        args = (from_numpy(values), from_numpy(scales))
    got = outcome(lambda: mx.dequantize(*args, block_size=block_size, axis=axis, dtype=out))
    if isinstance(got, KilnError):
        assert got.kind in ("TYPE", "SHAPE")
    else:
        assert got.shape == tuple(shape)
        assert got.dtype == out


@pytest.mark.parametrize(
    ("values", "scales", "kwargs", "kind", "message"),
    [
        (np.ones(32, np.float32), np.ones(1, E8M0), {}, "TYPE", "values: expected an array of"),
        (np.ones(32, E2M1), np.ones(1, np.float32), {}, "TYPE", "scales: expected an array of"),
        (np.ones(32, E2M1), np.ones(2, E8M0), {}, "SHAPE", r"expected scales of shape \(1,\)"),
        (np.ones(33, E2M1), np.ones(1, E8M0), {}, "SHAPE", r"shape \(2,\) for values"),
        (np.ones(32, E2M1), np.ones(1, E8M0), {"block_size": 0}, "SHAPE", "block_size"),
        (np.ones(32, E2M1), np.ones(1, E8M0), {"block_size": 2.0}, "SHAPE", "block_size"),
        (np.ones(32, E2M1), np.ones(1, E8M0), {"axis": 1}, "SHAPE", r"axis in -1..0"),
        (np.ones(32, E2M1), np.ones(1, E8M0), {"axis": True}, "SHAPE", "axis"),
        (np.ones((), E2M1), np.ones((), E8M0), {}, "SHAPE", "at least one axis, found 0-d"),
        (np.ones(32, E2M1), np.ones(1, E8M0), {"dtype": np.int32}, "TYPE", "dtype float32"),
        (np.ones(32, E2M1), np.ones(1, E8M0), {"dtype": "nope"}, "TYPE", "output dtype"),
        (
            np.full(32, 0x10, np.uint8).view(E2M1),
            np.ones(1, E8M0),
            {},
            "TYPE",
            "storage bytes 0x00-0x0f, found 0x10 at element 0",
        ),
        (from_numpy(np.ones(32, np.float32)), np.ones(1, E8M0), {}, "TYPE", r"code 2 \(f32\)"),
        (np.ones(32, E2M1), from_numpy(np.ones(1, np.float32)), {}, "TYPE", r"code 2 \(f32\)"),
        (
            Payload(18, memoryview(bytes(15)), (32,)),
            np.ones(1, E8M0),
            {},
            "LENGTH",
            r"values: code 18 \(e2m1\) shape \(32,\): expected ceil",
        ),
        (
            Payload(18, memoryview(b"\x10"), (1,)),
            np.ones(1, E8M0),
            {},
            "TYPE",
            "high nibble|padding",
        ),
    ],
)
def test_errors(values: Any, scales: Any, kwargs: dict[str, Any], kind: str, message: str) -> None:
    with pytest.raises(KilnError, match=message) as e:
        mx.dequantize(values, scales, **kwargs)
    assert e.value.kind == kind


# -- gguf-py, ONNX and gpt-oss oracles ----------------------------------------------------------


def mxfp4_payload(blocks: np.ndarray) -> Payload:
    return Payload(0x4727, memoryview(blocks.tobytes()), blocks.shape[:-1], MXFP4)


def nvfp4_payload(blocks: np.ndarray) -> Payload:
    return Payload(0x4728, memoryview(blocks.tobytes()), blocks.shape[:-1], NVFP4)


def ocp_ggml(payload: Any, dtype: Any = np.float32) -> np.ndarray:
    """A GGUF MXFP4/NVFP4 payload's OCP values (``kiln_np.gguf.dequantize`` gives ggml's)."""
    return mx.dequantize(*mx.from_ggml(payload), dtype=dtype)


def test_mxfp4_against_gguf_py(kernels: str) -> None:
    rng = np.random.default_rng(10)
    blocks = rng.integers(0, 256, (6, 200, 17), dtype=np.uint8)
    blocks[..., 0] = rng.integers(0, 0xFD, (6, 200))  # exclusions 2 and 4: 0xfd-0xff below
    blocks[0, :, 0] = np.arange(200) % 0xFD  # every finite-in-float32 scale byte
    want = gguf.quants.dequantize(blocks.reshape(6, -1), gguf.GGMLQuantizationType.MXFP4)
    got = ocp_ggml(mxfp4_payload(blocks))
    assert got.shape == want.shape == (6, 6400)
    values, _ = mx.from_ggml(mxfp4_payload(blocks))
    minus_zero = kiln_np.to_numpy(*values).view(np.uint8) == 0x8  # exclusion 1
    assert minus_zero.any()
    assert np.array_equal(got.view(np.uint32)[~minus_zero], want.view(np.uint32)[~minus_zero])
    assert (got.view(np.uint32)[minus_zero] == 0x80000000).all()
    assert (want.view(np.uint32)[minus_zero] == 0).all()
    # exclusions 2 and 4: 0xff is NaN here (gguf-py: finite); 0xfd/0xfe overflow raises
    # here (gguf-py: inf) and float64 gives the exact products
    top = blocks[:1, :3].copy()
    top[0, :, 0] = [0xFD, 0xFE, 0xFF]
    top[0, :, 1:] = 0x76  # elements 4.0 (code 0x6) and 6.0 (code 0x7)
    top[0, 2, 1:] = 0x11  # 0.5 x 2**128 is finite in float32
    with np.errstate(over="ignore"):
        g = gguf.quants.dequantize(top.reshape(1, -1), gguf.GGMLQuantizationType.MXFP4).reshape(
            3, 32
        )
    assert np.isinf(g[:2]).all()
    assert (g[2] == 2.0**127).all()
    with pytest.raises(KilnError, match=r"block \(0, 0\)"):
        ocp_ggml(mxfp4_payload(top))
    exact = ocp_ggml(mxfp4_payload(top), dtype=np.float64).reshape(3, 32)
    assert exact[0, 0] == 4.0 * 2.0**126
    assert exact[1, 16] == 6.0 * 2.0**127
    assert np.isnan(exact[2]).all()


def test_nvfp4_against_gguf_py() -> None:
    rng = np.random.default_rng(11)
    blocks = rng.integers(0, 256, (300, 36), dtype=np.uint8)
    blocks[:, :4] = rng.integers(0, 0x7F, (300, 4))  # exclusion 3: 0x7f and signs below
    blocks[0, :4] = [0x00, 0x01, 0x7E, 0x40]
    want = gguf.quants.dequantize(blocks.reshape(1, -1), gguf.GGMLQuantizationType.NVFP4).reshape(
        -1
    )
    got = ocp_ggml(nvfp4_payload(blocks)).reshape(-1)
    values, scales = mx.from_ggml(nvfp4_payload(blocks))
    assert values.shape == (300 * 64,)
    assert scales.shape == (300 * 4,)
    assert scales.code == 5
    minus_zero = kiln_np.to_numpy(*values).view(np.uint8) == 0x8  # exclusion 1
    assert np.array_equal(got.view(np.uint32)[~minus_zero], want.view(np.uint32)[~minus_zero])
    # exclusion 3: the sign bit makes a negative scale here, gguf-py ignores it; 0x7f and
    # 0xff are NaN here, 0 (0x7f) and 240 x 2 (0xff) there
    signed = blocks.copy()
    signed[:, :4] |= 0x80
    mine = ocp_ggml(nvfp4_payload(signed)).reshape(-1)
    theirs = gguf.quants.dequantize(signed.reshape(1, -1), gguf.GGMLQuantizationType.NVFP4).reshape(
        -1
    )
    nonzero = want != 0
    assert np.array_equal(mine[nonzero].view(np.uint32), (-want[nonzero]).view(np.uint32))
    assert bits(theirs) == bits(want)
    nan = blocks[:1].copy()
    nan[0, :4] = [0x7F, 0xFF, 0x7F, 0xFF]
    assert np.isnan(ocp_ggml(nvfp4_payload(nan))).all()
    g = gguf.quants.dequantize(nan.reshape(1, -1), gguf.GGMLQuantizationType.NVFP4).reshape(4, 16)
    assert not g[0].any()
    assert np.isfinite(g[1]).all()


@needs("onnx")
def test_onnx_dequantize_linear_agrees() -> None:
    rng = np.random.default_rng(12)
    x = rng.integers(0, 16, (3, 64), dtype=np.uint8).view(E2M1)
    s = rng.integers(100, 150, (3, 2), dtype=np.uint8).view(E8M0)
    xt, stensor = mx.to_onnx(x, s)
    node = onnx.helper.make_node(
        "DequantizeLinear",
        ["x", "x_scale"],
        ["y"],
        axis=1,
        block_size=32,
        output_dtype=onnx.TensorProto.FLOAT,
    )
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        initializer=[xt, stensor],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 25)])
    want = cast(list[np.ndarray], onnx.reference.ReferenceEvaluator(model).run(None, {}))[0]
    got = mx.dequantize_onnx(xt, stensor, block_size=32)
    assert bits(got) == bits(want)
    v, sp = mx.from_onnx(xt, stensor)
    assert bits(kiln_np.to_numpy(*v)) == bits(x)
    assert bits(kiln_np.to_numpy(*sp)) == bits(s)
    with pytest.raises(KilnError, match="FLOAT4E2M1"):
        mx.from_onnx(stensor, stensor)
    with pytest.raises(KilnError, match="FLOAT8E8M0"):
        mx.from_onnx(xt, object())


def gpt_oss_reference(
    blocks: np.ndarray, scales: np.ndarray, dtype: type = np.float64
) -> np.ndarray:
    """gpt-oss's own decoder (``convert_moe_packed_tensors``: a value table, then
    ``ldexp`` by ``scale - 127``), in numpy."""
    lut = np.array(
        [+0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    )
    exp = scales.astype(np.int32) - 127
    out = np.empty((*blocks.shape[:-1], 32), dtype)
    out[..., 0::2] = lut[blocks & 0x0F]
    out[..., 1::2] = lut[blocks >> 4]
    with np.errstate(over="ignore"):
        out = np.ldexp(out, exp[..., None])
    return out.reshape(*blocks.shape[:-2], -1)


def test_gpt_oss_layout() -> None:
    rng = np.random.default_rng(13)
    blocks = rng.integers(0, 256, (2, 5, 7, 16), dtype=np.uint8)
    scales = rng.integers(0, 0xFF, (2, 5, 7), dtype=np.uint8)
    want = gpt_oss_reference(blocks, scales)
    got = mx.dequantize_gpt_oss(blocks, scales, dtype=np.float64)
    assert got.shape == (2, 5, 224)
    assert bits(got) == bits(want)
    v, s = mx.from_gpt_oss(blocks, scales)
    assert bytes(v.data) == blocks.tobytes()
    assert bytes(s.data) == scales.tobytes()
    b2, s2 = mx.to_gpt_oss(v, s)
    assert bits(b2) == bits(blocks)
    assert bits(s2) == bits(scales)
    assert b2.shape == blocks.shape
    # gpt-oss's ldexp gives inf for 0xff; kiln_np NaN (OCP)
    scales[0, 0, 0] = 0xFF
    assert np.isinf(gpt_oss_reference(blocks, scales, np.float32)[0, 0, :32]).any()
    assert np.isnan(mx.dequantize_gpt_oss(blocks, scales)[0, 0, :32]).all()
    with pytest.raises(KilnError, match=r"\(\.\.\., nblocks, 16\)"):
        mx.from_gpt_oss(blocks[..., :8], scales)
    with pytest.raises(KilnError, match="expected uint8, found float32"):
        mx.from_gpt_oss(blocks.astype(np.float32), scales)


# -- quantize ---------------------------------------------------------------------------------


def ref_round(kind: str, y: float) -> int:
    """OCP: the nearest finite element value, saturating; ties to the even code
    (mantissa LSB 0); the result keeps the sign of ``y`` (so -0.1 gives -0)."""
    n = ELEMENTS[kind][1]
    sign_bit = n >> 1
    value = {c: ref_element(kind, c) for c in range(n) if math.isfinite(ref_element(kind, c))}
    top = max(value.values())
    y = max(-top, min(top, y))
    negative = math.copysign(1.0, y) < 0
    same_sign = {c: v for c, v in value.items() if bool(c & sign_bit) == negative}
    best = min(abs(v - y) for v in same_sign.values())
    ties = sorted(c for c, v in same_sign.items() if abs(v - y) == best)
    return next((c for c in ties if c % 2 == 0), ties[0])


@pytest.mark.parametrize(("kind", "emax"), [("e2m1", 2), ("f8e4m3", 8), ("f8e5m2", 15)])
def test_ocp_rule_against_the_reference(kind: str, emax: int) -> None:
    rng = np.random.default_rng(14)
    x = rng.standard_normal((40, 8)) * np.exp2(rng.integers(-140, 140, (40, 1)))
    x[0] = 0.0
    x[1] = [0.25, -0.75, 2.5, -5.0, 6.0, 0.0, 1.25, 7.0]  # e2m1 ties (to even), saturation
    x[2] = -0.0
    values, scales = mx.quantize(x, element=kind, block_size=8)
    assert values.dtype == ELEMENTS[kind][0]
    assert scales.dtype == E8M0
    for b in range(40):
        amax = float(np.max(np.abs(x[b])))
        e = -127 if amax == 0 else max(-127, min(127, math.frexp(amax)[1] - 1 - emax))
        assert int(scales.view(np.uint8)[b, 0]) == e + 127
        for i in range(8):
            assert int(values.view(np.uint8)[b, i]) == ref_round(kind, math.ldexp(x[b, i], -e)), (
                b,
                i,
            )


def test_ggml_rule_against_gguf_py() -> None:
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((64, 256)) * np.exp2(rng.integers(-120, 120, (64, 1)))).astype(
        np.float32
    )
    x[0, :32] = 0.0
    x[0, 32:64] = -0.0
    x[1, :32] = [1023.99994] + [0.5] * 31  # float32 log2 rounds to 10: scale 2**8
    x[2, :8] = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0]) * 4  # ties
    x[2, 8:32] = 0
    x[3, :32] = np.float32(2.0**-120) * rng.standard_normal(32).astype(np.float32)
    want = gguf.quants.quantize(x, gguf.GGMLQuantizationType.MXFP4)
    values, scales = mx.quantize(x, rule="ggml")
    assert scales.view(np.uint8)[1, 0] == 135
    got = mx.to_ggml(values, scales, layout="ggml.mxfp4")
    assert bytes(got.data) == want.tobytes()
    # float64 input: rounded to float32 first, as gguf-py does
    x64 = x.astype(np.float64) * (1 + 2.0**-30)
    assert bytes(mx.to_ggml(*mx.quantize(x64, rule="ggml"), layout="ggml.mxfp4").data) == (
        gguf.quants.quantize(x64, gguf.GGMLQuantizationType.MXFP4).tobytes()
    )


def test_ggml_rule_near_every_power_of_two() -> None:
    # block maxes at and up to 40 float32 ulps below 2**k, for every k gguf-py handles
    # without wrapping (a max of at least 2**-125): the float32 log2 rounding must agree
    m = np.float32(2.0) ** np.arange(-124, 128).astype(np.float32)
    maxes = [m]
    for _ in range(40):
        m = np.nextafter(m, np.float32(0))
        maxes.append(m)
    top = np.concatenate(maxes).astype(np.float32)
    x = np.zeros((top.size, 32), np.float32)
    x[:, 0] = top
    x[:, 1] = -top / 3
    x[:, 2] = top * np.float32(0.3)
    with np.errstate(over="ignore"):  # gguf-py's float32 errors for far candidates
        want = gguf.quants.quantize(x, gguf.GGMLQuantizationType.MXFP4)
    got = mx.to_ggml(*mx.quantize(x, rule="ggml"), layout="ggml.mxfp4")
    assert bytes(got.data) == want.tobytes()


def test_ggml_rule_clamps_where_gguf_py_wraps() -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 2.0**-130  # exclusion 5: gguf-py's scale byte would wrap
    _, scales = mx.quantize(x, rule="ggml")
    assert scales.view(np.uint8).tolist() == [[0]]


def test_non_finite_blocks_get_the_nan_scale() -> None:
    x = np.array([[1.0, np.nan, 2.0, 3.0], [np.inf, 1, 1, 1], [1, 1, 1, -np.inf], [1, 2, 3, 4]])
    # the ggml rule rounds to float32 first: 1e39 is inf there, so its block is NaN too
    big = np.array([[1e39, 1, 1, 1]])
    assert mx.quantize(big, block_size=4, rule="ggml")[1].view(np.uint8).tolist() == [[0xFF]]
    assert mx.quantize(big, block_size=4)[1].view(np.uint8).tolist() == [[127 + 127]]
    rules: tuple[Literal["ocp", "ggml"], ...] = ("ocp", "ggml")
    for rule in rules:
        v, s = mx.quantize(x, block_size=4, rule=rule)
        assert s.view(np.uint8).reshape(-1).tolist()[:3] == [0xFF] * 3
        assert not v.view(np.uint8)[:3].any()
        assert np.isnan(mx.dequantize(v, s, block_size=4)[:3]).all()


@given(
    codes=st.lists(st.integers(0, 15), min_size=1, max_size=80),
    scale_bytes=st.lists(st.integers(0, 255), min_size=20, max_size=20),
    block_size=st.integers(1, 9),
    rule=st.sampled_from(["ocp", "ceil", "ggml"]),
)
def test_round_trip_e2m1(
    codes: list[int], scale_bytes: list[int], block_size: int, rule: str
) -> None:
    v = np.array(codes, np.uint8).view(E2M1)
    nb = -(-len(codes) // block_size)
    s = np.resize(np.array(scale_bytes, np.uint8), nb)
    if rule == "ggml":  # it rounds x to float32 first: 4 x 2**126 and up would be inf
        s[(s == 0xFD) | (s == 0xFE)] = 0xFC
    once = mx.dequantize(v, s, block_size=block_size, dtype=np.float64)
    v2, s2 = mx.quantize(once, block_size=block_size, rule=rule)  # type: ignore[arg-type]
    if rule == "ggml":
        once += 0.0  # the ggml rule quantizes -0 to +0, as gguf-py does
    assert bits(mx.dequantize(v2, s2, block_size=block_size, dtype=np.float64)) == bits(once)


@given(
    codes=st.lists(st.integers(0, 255).filter(lambda c: c & 0x7C != 0x7C), min_size=1, max_size=64),
    scale=st.integers(0, 254),
)
def test_round_trip_f8e5m2(codes: list[int], scale: int) -> None:
    v = np.array(codes, np.uint8).view(E5M2)
    s = np.full(-(-len(codes) // 32), scale, np.uint8)
    once = mx.dequantize(v, s, dtype=np.float64)
    v2, s2 = mx.quantize(once, element="f8e5m2")
    assert bits(mx.dequantize(v2, s2, dtype=np.float64)) == bits(once)


def test_f8e4m3_saturation_breaks_the_round_trip_as_the_rule_says() -> None:
    # 240 = 1.875 x 2**7: the OCP exponent is 7 - 8 = -1, and 480 is past 448: saturates
    v = np.array([240.0], E4M3)
    once = mx.dequantize(v, np.array([1.0], E8M0), block_size=1, dtype=np.float64)
    v2, s2 = mx.quantize(once, element="f8e4m3", block_size=1)
    assert float(v2[0]) == 448.0
    assert s2.view(np.uint8)[0] == 126
    assert mx.dequantize(v2, s2, block_size=1)[0] == 224.0
    # the ceil rule never saturates: 240 keeps its exponent
    v3, s3 = mx.quantize(once, element="f8e4m3", block_size=1, rule="ceil")
    assert bits(mx.dequantize(v3, s3, block_size=1, dtype=np.float64)) == bits(once)


@given(
    codes=st.lists(st.integers(0, 255).filter(lambda c: c & 0x7F != 0x7F), min_size=1, max_size=64),
    scale=st.integers(0, 254),
)
def test_round_trip_f8e4m3_under_the_ceil_rule(codes: list[int], scale: int) -> None:
    v = np.array(codes, np.uint8).view(E4M3)
    s = np.full(-(-len(codes) // 32), scale, np.uint8)
    once = mx.dequantize(v, s, dtype=np.float64)
    v2, s2 = mx.quantize(once, element="f8e4m3", rule="ceil")
    assert bits(mx.dequantize(v2, s2, dtype=np.float64)) == bits(once)


@pytest.mark.parametrize("kind", ["e2m1", "f8e4m3", "f8e5m2"])
def test_ceil_rule_against_the_reference(kind: str) -> None:
    rng = np.random.default_rng(19)
    x = rng.standard_normal((60, 8)) * np.exp2(rng.integers(-140, 140, (60, 1)))
    top = max(v for c in range(ELEMENTS[kind][1]) if math.isfinite(v := ref_element(kind, c)))
    x[:4] = 0.0
    x[1, 0] = top * 4  # exactly the max times a power of two: that power, no rounding up
    x[2, 0] = np.nextafter(top * 4, np.inf)  # just above: the next power
    x[3, 0] = np.nextafter(top * 4, 0)
    values, scales = mx.quantize(x, element=kind, block_size=8, rule="ceil")
    for b in range(60):
        amax = float(np.max(np.abs(x[b])))
        e = -127
        if amax:
            e = math.frexp(amax / top)[1] - 2  # one below the answer, or two
            while math.ldexp(top, e) < amax:
                e += 1
            e = max(-127, min(127, e))
        assert int(scales.view(np.uint8)[b, 0]) == e + 127, b
        for i in range(8):
            got = int(values.view(np.uint8)[b, i])
            assert got == ref_round(kind, math.ldexp(x[b, i], -e)), (b, i)
    assert scales.view(np.uint8)[1:4, 0].tolist() == [
        int(scales.view(np.uint8)[1, 0]),
        int(scales.view(np.uint8)[1, 0]) + 1,
        int(scales.view(np.uint8)[1, 0]),
    ]


@pytest.mark.parametrize(
    ("kwargs", "kind", "message"),
    [
        ({"element": "i8"}, "TYPE", "expected element 'e2m1'"),
        ({"rule": "nearest"}, "TYPE", "expected rule 'ocp', 'ceil' or 'ggml'"),
        ({"element": "f8e4m3", "rule": "ggml"}, "TYPE", "GGML's MXFP4 rule"),
        ({"block_size": 0}, "SHAPE", "block_size"),
        ({"axis": 2}, "SHAPE", "axis in -1..0"),
    ],
)
def test_quantize_errors(kwargs: dict[str, Any], kind: str, message: str) -> None:
    with pytest.raises(KilnError, match=message) as e:
        mx.quantize(np.ones(4), **kwargs)
    assert e.value.kind == kind


def test_quantize_along_any_axis() -> None:
    x = np.random.default_rng(18).standard_normal((5, 7, 3))
    rules: tuple[Literal["ocp", "ggml"], ...] = ("ocp", "ggml")
    for rule in rules:
        v, s = mx.quantize(x, block_size=3, axis=1, rule=rule)
        vt, st_ = mx.quantize(np.moveaxis(x, 1, -1), block_size=3, rule=rule)
        assert v.shape == x.shape
        assert s.shape == (5, 3, 3)
        assert bits(v) == bits(np.moveaxis(vt, -1, 1))
        assert bits(s) == bits(np.moveaxis(st_, -1, 1))
        back = mx.dequantize(v, s, block_size=3, axis=1, dtype=np.float64)
        assert np.abs(back - x).max() <= np.abs(x).max() / 4


def test_quantize_takes_only_real_floats() -> None:
    for bad in (np.arange(4), np.ones(4, np.complex64), np.ones(4, np.longdouble)):
        if bad.dtype == np.longdouble and bad.dtype.itemsize == 8:
            continue
        with pytest.raises(KilnError, match="expected real floating-point input"):
            mx.quantize(bad)
    v, _ = mx.quantize(np.ones(32, BF16))
    assert v.astype(float).tolist() == [4.0] * 32


# -- repacking -------------------------------------------------------------------------------


@given(data=st.binary(min_size=17 * 3, max_size=17 * 3), rows=st.sampled_from([1, 3]))
def test_mxfp4_repack_is_a_bit_move(data: bytes, rows: int) -> None:
    blocks = np.frombuffer(data, np.uint8).reshape(rows, -1, 17)
    p = mxfp4_payload(blocks)
    values, scales = mx.from_ggml(p)
    assert values.shape == (rows, blocks.shape[1] * 32)
    assert scales.shape == (rows, blocks.shape[1])
    back = mx.to_ggml(values, scales, layout=MXFP4)
    assert back.code == 0x4727
    assert back.layout == MXFP4
    assert back.shape == p.shape
    assert bytes(back.data) == data


@given(data=st.binary(min_size=36 * 2, max_size=36 * 2))
def test_nvfp4_repack_is_a_bit_move(data: bytes) -> None:
    p = nvfp4_payload(np.frombuffer(data, np.uint8).reshape(2, 36))
    values, scales = mx.from_ggml(p)
    back = mx.to_ggml(values, scales, layout="ggml.nvfp4")
    assert bytes(back.data) == data
    assert back.shape == (2,)


@given(
    n=st.integers(0, 130),
    rows=st.integers(0, 2),
    scale_count=st.integers(0, 9),
    sdtype=st.sampled_from([E8M0, E4M3, np.dtype(np.uint8)]),
    layout=st.sampled_from(["ggml.mxfp4", "ggml.nvfp4"]),
)
def test_to_ggml_packs_or_raises_kiln_error(
    n: int, rows: int, scale_count: int, sdtype: np.dtype[Any], layout: str
) -> None:
    values = (np.arange(rows * n, dtype=np.uint8) % 16).view(E2M1).reshape(rows, n)
    scales = np.full((rows, scale_count), 0x38, np.uint8).view(sdtype)
    got = outcome(lambda: mx.to_ggml(values, scales, layout=layout))
    if isinstance(got, KilnError):
        assert got.kind in ("TYPE", "SHAPE")
    else:
        back_values, back_scales = mx.from_ggml(got)
        assert bits(kiln_np.to_numpy(*back_values)) == bits(values)
        assert bytes(back_scales.data) == scales.tobytes()


def test_repack_element_order() -> None:
    # element j of an MXFP4 block is byte j's low nibble (j < 16), byte j - 16's high nibble
    q = np.array([(j % 16) | ((15 - j % 16) << 4) for j in range(16)], np.uint8)
    block = np.concatenate([[127], q]).astype(np.uint8)
    values, _ = mx.from_ggml(mxfp4_payload(block[None]))
    codes = kiln_np.to_numpy(*values).view(np.uint8).tolist()
    assert codes == list(range(16)) + [15 - j for j in range(16)]
    # NVFP4: group g byte j holds element 16g + j low and 16g + 8 + j high
    nv = np.zeros(36, np.uint8)
    nv[4:] = [(j % 8) | ((8 + g) << 4) for g in range(4) for j in range(8)]
    values, _ = mx.from_ggml(nvfp4_payload(nv[None]))
    codes = kiln_np.to_numpy(*values).view(np.uint8).reshape(4, 16).tolist()
    assert codes == [list(range(8)) + [8 + g] * 8 for g in range(4)]


def test_repack_from_arrays_and_errors() -> None:
    v = (np.arange(64, dtype=np.uint8) % 16).view(E2M1).reshape(2, 32)
    s = np.array([[127], [128]], np.uint8)
    p = mx.to_ggml(v, s, layout="ggml.mxfp4")
    assert bits(ocp_ggml(p)) == bits(mx.dequantize(v, s))
    with pytest.raises(KilnError, match=r"expected layout ggml\.mxfp4"):
        mx.to_ggml(v, s, layout="ggml.q4_0")
    with pytest.raises(KilnError, match=r"expected layout ggml\.mxfp4"):
        mx.to_ggml(v, s, layout=Layout("ggml.mxfp4", 18))
    with pytest.raises(KilnError, match="multiple of 32") as e:
        mx.to_ggml(v[:, :16], s, layout="ggml.mxfp4")
    assert e.value.kind == "SHAPE"
    with pytest.raises(KilnError, match=r"expected scales of shape \(2, 1\)"):
        mx.to_ggml(v, s.T, layout="ggml.mxfp4")
    with pytest.raises(KilnError, match="expected f8e4m3 scales"):
        mx.to_ggml(np.ones(64, E2M1), np.ones(4, E8M0), layout="ggml.nvfp4")
    with pytest.raises(KilnError, match="expected float4_e2m1fn values"):
        mx.to_ggml(np.ones(32, np.float32), s[0], layout="ggml.mxfp4")
    with pytest.raises(KilnError, match=r"expected a payload of ggml.mxfp4 \(code 0x4727"):
        mx.from_ggml(from_numpy(np.ones(4, np.float32)))
    with pytest.raises(KilnError, match="LENGTH"):
        mx.from_ggml(Payload(0x4727, memoryview(bytes(16)), (1,), MXFP4))
    with pytest.raises(KilnError, match=r"found shape \(\)") as e:
        mx.from_ggml(Payload(0x4727, memoryview(bytes(17)), (), MXFP4))
    assert e.value.kind == "SHAPE"


def test_gguf_registry_rows() -> None:
    rows = {t.name: t for t in kiln_np.gguf.TYPES.values()}
    assert (rows["MXFP4"].code, rows["MXFP4"].layout) == (0x4727, MXFP4)
    assert (rows["NVFP4"].code, rows["NVFP4"].layout) == (0x4728, NVFP4)


def test_weights_tensors_in_one_call(tmp_path: Path) -> None:
    rng = np.random.default_rng(16)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    path = tmp_path / "w.gguf"
    writer = gguf.GGUFWriter(str(path), "test")
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.MXFP4)
    writer.add_tensor("w", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with kiln_np.open_weights(path) as weights:
        t = weights["w"]
        values, scales = mx.from_ggml(t)
        assert values.shape == (4, 64)
        assert scales.shape == (4, 2)
        want = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.MXFP4)
        got = ocp_ggml(t)
        keep = kiln_np.to_numpy(*values).view(np.uint8) != 8
        assert np.array_equal(got.view(np.uint32)[keep], want.view(np.uint32)[keep])


@needs("onnx")
def test_gpt_oss_and_onnx_weight_files_in_one_call(tmp_path: Path) -> None:
    rng = np.random.default_rng(17)
    blocks = rng.integers(0, 256, (2, 3, 16), dtype=np.uint8)
    scales = rng.integers(110, 140, (2, 3), dtype=np.uint8)
    want = gpt_oss_reference(blocks, scales).astype(np.float32)
    path = tmp_path / "model.safetensors"
    tensors = {"mlp.experts.down_proj_blocks": blocks, "mlp.experts.down_proj_scales": scales}
    kiln_np.save_weights(path, tensors, format="safetensors")
    with kiln_np.open_weights(path) as weights:
        b, s = weights["mlp.experts.down_proj_blocks"], weights["mlp.experts.down_proj_scales"]
        values, scale_payload = mx.from_gpt_oss(b, s)
        assert (values.code, values.shape, scale_payload.shape) == (18, (2, 96), (2, 3))
        assert bits(mx.dequantize_gpt_oss(b, s)) == bits(want)
    # an ONNX model's FLOAT4E2M1 + FLOAT8E8M0 initializers are Kiln payloads already
    x, sc = mx.to_onnx(*mx.from_gpt_oss(blocks, scales))
    graph = onnx.helper.make_graph([], "g", [], [], initializer=[x, sc])
    model = tmp_path / "model.onnx"
    onnx.save(onnx.helper.make_model(graph), model)
    with kiln_np.open_weights(model) as weights:
        got = mx.dequantize(weights["x"], weights["x_scale"])
        assert bits(got) == bits(want)


# -- the layouts table, names ------------------------------------------------------------------


def rst_rows(text: str) -> list[tuple[str, ...]]:
    """The rows of the first simple table whose header starts with ``layout``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["layout"])
    rule = lines[start - 1]
    cols = [(m.start(), m.end()) for m in re.finditer(r"=+", rule)]
    rows: list[tuple[str, ...]] = []
    for line in lines[start + 2 :]:
        if line.startswith("="):
            break
        cells = [
            line[a:b2].strip() if i + 1 < len(cols) else line[a:].strip()
            for i, (a, b2) in enumerate(cols)
        ]
        rows.append(tuple(cells))
    return rows


def md_rows(text: str) -> list[tuple[str, ...]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| layout |"))
    rows: list[tuple[str, ...]] = []
    for line in lines[start + 2 :]:  # past the header and its | --- | line
        if not line.startswith("| "):
            break  # the table ends at its first line that is not a row
        rows.append(tuple(c.strip().strip("`") for c in line.strip("|").split("|")))
    return rows


def test_layout_table_matches_the_code_and_the_docs() -> None:
    data = [(r.name, r.container, r.nibble_order, r.block, r.scale, r.scale_ff) for r in mx.LAYOUTS]
    assert rst_rows(mx.__doc__ or "") == data
    assert md_rows(DOCS.read_text()) == data
    # the rows say what the code does: element order and the 0xff scale, layout by layout
    q = np.array([(2 * k) % 16 | (((2 * k + 1) % 16) << 4) for k in range(16)], np.uint8)
    kiln_order = list(range(16)) + list(range(16))
    onnx_x = onnx.helper.make_tensor("x", onnx.TensorProto.FLOAT4E2M1, [32], q.tobytes(), raw=True)
    onnx_s = onnx.helper.make_tensor("s", onnx.TensorProto.FLOAT8E8M0, [1], b"\xff", raw=True)
    by_layout = {
        "kiln": mx.dequantize(
            Payload(18, memoryview(q.tobytes()), (32,)), np.array([0xFF], np.uint8)
        ),
        "ggml.mxfp4": ocp_ggml(mxfp4_payload(np.concatenate([[0xFF], q]).astype(np.uint8)[None])),
        "ggml.nvfp4": ocp_ggml(
            nvfp4_payload(np.concatenate([[0xFF] * 4, q, q]).astype(np.uint8)[None])
        ),
        "gpt-oss": mx.dequantize_gpt_oss(q[None], np.array([0xFF], np.uint8)),
        "onnx": mx.dequantize_onnx(onnx_x, onnx_s, block_size=32, axis=0),
    }
    for row in mx.LAYOUTS:
        assert row.scale_ff == "NaN block", row.name
        assert np.isnan(by_layout[row.name]).all(), row.name
    order = {
        "element 2k low, 2k+1 high": kiln_order,
        "byte j: j low, j+16 high": [(2 * j) % 16 for j in range(16)]
        + [(2 * j + 1) % 16 for j in range(16)],
    }
    for row in mx.LAYOUTS:
        if row.name == "ggml.nvfp4":
            continue  # its group order is checked in test_repack_element_order
        values = {
            "kiln": Payload(18, memoryview(q.tobytes()), (32,)),
            "ggml.mxfp4": mx.from_ggml(
                mxfp4_payload(np.concatenate([[127], q]).astype(np.uint8)[None])
            )[0],
            "gpt-oss": mx.from_gpt_oss(q[None], np.array([127], np.uint8))[0],
            "onnx": mx.from_onnx(onnx_x, onnx_s)[0],
        }[row.name]
        assert kiln_np.to_numpy(*values).view(np.uint8).tolist() == order[row.nibble_order], (
            row.name
        )


def test_public_names() -> None:
    assert mx.__all__ == sorted(mx.__all__)
    for name in mx.__all__:
        obj = getattr(mx, name)
        if callable(obj):
            assert obj.__module__ == "kiln_np.mx", name
    assert not [
        n for n in vars(mx) if n.isupper() and not n.startswith("_") and n not in mx.__all__
    ]


def test_rejecting_bad_storage_bytes_costs_at_most_a_chunk() -> None:
    # Issue 11 item 15's class: the first bad element is found without a mask
    # (and an index array) of the whole input.
    import tracemalloc

    values = np.full(16 << 20, 0x10, np.uint8).view(ml_dtypes.float4_e2m1fn)
    scales = np.full((16 << 20) // 32, 127, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    tracemalloc.start()
    try:
        with pytest.raises(kiln_np.KilnError) as caught:
            mx.dequantize(values, scales)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (caught.value.kind, caught.value.index, caught.value.found) == ("TYPE", 0, 0x10)
    assert peak < 4 << 20


def test_the_kind_table_is_exactly_what_dequantize_and_describe_take() -> None:
    # One table of element and scale kinds (issue 18): every Kiln code is taken as
    # values or as scales by mx.dequantize and kiln_np.describe exactly when the
    # table has it, as a payload and as an array.
    from kiln_np.mx.kinds import ELEMENTS, KINDS, SCALES

    assert sorted(ELEMENTS) == [Code.F8E4M3, Code.F8E5M2, Code.I8, Code.E2M1]
    assert sorted(SCALES) == [Code.F8E4M3, Code.U8, Code.E8M0]
    assert {k.code for k in KINDS} == set(ELEMENTS) | {SCALES[c].code for c in SCALES}
    e8m0 = np.full(2, 127, np.uint8).view(E8M0)
    e2m1 = np.ones(64, E2M1)

    def taken(call: Any, *args: Any, **kwargs: Any) -> str:
        """ "taken", or the kind of the KilnError the call raised."""
        try:
            call(*args, **kwargs)
        except KilnError as exc:
            return exc.kind
        return "taken"

    f64 = {"dtype": np.float64}
    for row in kiln_np.DTYPES:
        values = np.zeros(64, row.dtype)
        scales = np.zeros(2, row.dtype)
        as_values = "taken" if row.code in ELEMENTS else "TYPE"
        as_scales = "taken" if row.code in SCALES else "TYPE"
        for v in (values, from_numpy(values)):
            assert taken(mx.dequantize, v, e8m0, **f64) == as_values, row
        for s in (scales, from_numpy(scales)):
            assert taken(mx.dequantize, e2m1, s, block_size=32, **f64) == as_scales, row
        assert taken(kiln_np.describe, values, e8m0) == as_values, row
        assert taken(kiln_np.describe, e2m1, scales, block_size=32) == as_scales, row
    # the default block size is the scale kind's: 32 for e8m0 (and raw bytes), 16 for f8e4m3
    for code, kind in SCALES.items():
        scales = np.zeros(64 // (kind.block_size or 1), kiln_np.dtype_for_code(code))
        assert mx.dequantize(e2m1, scales, dtype=np.float64).shape == (64,), code


def test_the_kinds_values_are_the_dtypes_values() -> None:
    from kiln_np.mx.kinds import KINDS

    for kind in KINDS:
        patterns = np.arange(kind.codes, dtype=np.uint8).view(kind.dtype).astype(np.float64)
        expected = np.zeros(256)
        expected[: kind.codes] = patterns * (2.0**-6 if kind.code == Code.I8 else 1.0)
        assert np.array_equal(kind.values, expected, equal_nan=True), kind.name
        nan = np.isnan(kind.values)
        assert (kind.values.view(np.uint64)[nan] == 0x7FF8000000000000).all(), kind.name
        assert not kind.values.flags.writeable


# -- what every entry point takes: any bytes-like payload data; clean errors otherwise ------


_V = np.array([0.5, -6.0, 1.0, 0.0] * 8, ml_dtypes.float4_e2m1fn)  # 32 e2m1: one MX block
_S = np.array([127], np.uint8).view(ml_dtypes.float8_e8m0fnu)
_BLOCK = mx.to_ggml(_V, _S, layout="ggml.mxfp4")
_GPT_OSS = mx.to_gpt_oss(_V, _S)

# entry point: (call of (values, scales) or (payload,), its inputs)
ENTRY_POINTS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "dequantize": (mx.dequantize, (_V, _S)),
    "to_ggml": (lambda v, s: mx.to_ggml(v, s, layout="ggml.mxfp4"), (_V, _S)),
    "to_gpt_oss": (mx.to_gpt_oss, (_V, _S)),
    "to_onnx": (mx.to_onnx, (_V, _S)),
    "from_gpt_oss": (mx.from_gpt_oss, _GPT_OSS),
    "dequantize_gpt_oss": (mx.dequantize_gpt_oss, _GPT_OSS),
    "from_ggml": (mx.from_ggml, (_BLOCK,)),
    "quantize": (mx.quantize, (np.linspace(-4, 4, 32),)),
}


def _as_payload(arg: Any) -> Payload:
    return arg if isinstance(arg, Payload) else from_numpy(np.asarray(arg))


def _results(result: Any) -> list[bytes]:
    parts = result if isinstance(result, tuple) else (result,)
    return [bytes(p.data) if isinstance(p, Payload) else bits(np.asarray(p)) for p in parts]


@pytest.mark.parametrize("data", [bytes, bytearray, memoryview, lambda b: np.frombuffer(b, U8)])
@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if e not in {"quantize", "to_onnx"}])
def test_payload_data_of_any_bytes_like_type(entry: str, data: Any) -> None:
    call, args = ENTRY_POINTS[entry]
    payloads = [_as_payload(a) for a in args]
    retyped = [Payload(p.code, data(bytes(p.data)), p.shape, p.layout) for p in payloads]
    assert _results(call(*retyped)) == _results(call(*payloads))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    "bad",
    [
        [[1, 2], [3]],  # ragged: numpy's own ValueError before
        np.ma.masked_array(np.zeros(32, np.float32), mask=[True] * 32),
        Payload(Code.E2M1, cast(Any, [0] * 16), (32,)),  # data that is no buffer
    ],
    ids=["ragged", "masked", "list-data"],
)
def test_inputs_numpy_cannot_read_are_type(entry: str, bad: Any) -> None:
    call, args = ENTRY_POINTS[entry]
    for i in range(len(args)):
        with pytest.raises(KilnError) as info:
            call(*args[:i], bad, *args[i + 1 :])
        assert info.value.kind == "TYPE", info.value


@needs("onnx")
@pytest.mark.parametrize(
    "call",
    [
        lambda bs: mx.dequantize(_V, _S, block_size=bs),
        lambda bs: mx.quantize(np.ones(32), block_size=bs),
        lambda bs: mx.dequantize_onnx(*mx.to_onnx(_V, _S), block_size=bs, axis=0),
    ],
    ids=["dequantize", "quantize", "dequantize_onnx"],
)
def test_block_size_past_numpys_index_range_is_shape(call: Any) -> None:
    for bs in (2**63, 2**64, 10**30):
        with pytest.raises(
            KilnError, match=r"block_size to be an integer in 1\.\.9223372036854775807"
        ) as info:
            call(bs)
        assert info.value.kind == "SHAPE"
    call(2**63 - 1)  # the largest: one block per axis
