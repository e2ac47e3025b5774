"""The int4 schemes (GPTQ, AWQ gemm, compressed-tensors pack-quantized) against
their references' outputs, and their rules.

The fixtures (tests/fixtures/schemes/int4/, made by make_int4.py with torch and
compressed-tensors) hold each case's parts and the reference's output for
every dtype; these tests read them without torch.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError
from kiln_np._core.table import as_dtype
from kiln_np._kernels import backend
from kiln_np._kernels import int4 as kernel
from kiln_np._schemes.int4 import AWQ, GPTQ, PACK_QUANTIZED
from kiln_np._schemes.scheme import Facts, Scheme
from kiln_np._schemes.table import SCHEMES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "schemes" / "int4"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
DTYPES = ("float32", "bfloat16", "float16")
KIND = {"int32": "i32", "float16": "f16", "bfloat16": "bf16", "float32": "f32", "int64": "i64"}
BY_NAME = {"gptq": GPTQ, "awq": AWQ, "compressed-tensors": PACK_QUANTIZED}


def _facts(arrays: Mapping[str, np.ndarray]) -> dict[str, Facts]:
    return {
        role: Facts(f"x.{role}", KIND[a.dtype.name], a.shape, partial(np.asarray, a))
        for role, a in arrays.items()
    }


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


class Case:
    """One fixture directory: its scheme, its groups' arrays by role, its expected outputs."""

    def __init__(self, name: str) -> None:
        d = FIXTURES / name
        self.base_dir = name
        self.config = json.loads((d / "config.json").read_text())["quantization_config"]
        self.scheme: Scheme = BY_NAME[self.config["quant_method"]]
        self.weights = kiln_np.open_weights(str(d / "model.safetensors"))
        self.expected = kiln_np.open_weights(str(d / "expected.safetensors"))
        key = self.scheme.parts[0].suffix
        (self.base,) = [n[: -len(key)] for n in self.weights if n.endswith(key)]
        self.arrays = {
            p.role: self.weights[self.base + p.suffix].numpy()
            for p in self.scheme.parts
            if self.base + p.suffix in self.weights
        }
        self.facts = {
            p.role: Facts(
                self.base + p.suffix,
                self.weights[self.base + p.suffix].format_dtype.lower(),
                self.weights[self.base + p.suffix].shape,
                self.weights[self.base + p.suffix].numpy,
            )
            for p in self.scheme.parts
            if self.base + p.suffix in self.weights
        }

    def want(self, dtype: str) -> np.ndarray:
        return self.expected[f"{self.base}.weight@{dtype}"].numpy()


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest) -> Case:
    return Case(request.param)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bits_match_the_reference(case: Case, dtype: str) -> None:
    plan = case.scheme.plan(case.base + ".weight", case.facts, case.config)
    want = case.want(dtype)
    assert plan.shape == want.shape
    got = case.scheme.decode(plan, case.arrays, 0, plan.shape[0], as_dtype(dtype))
    assert got.dtype.name == dtype
    assert got.shape == want.shape
    assert _bits(got) == _bits(want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_chunks_equal_the_whole(case: Case, dtype: str) -> None:
    plan = case.scheme.plan(case.base + ".weight", case.facts, case.config)
    rows = plan.shape[0]
    cuts = [0, 1, 3, 8, 11, rows - 1, rows]
    parts = [
        case.scheme.decode(plan, case.arrays, a, b, as_dtype(dtype))
        for a, b in itertools.pairwise(cuts)
    ]
    assert _bits(np.concatenate(parts)) == _bits(case.want(dtype))


def test_without_a_config_the_shapes_choose() -> None:
    # The table's first qweight row (gptq) reads an AWQ checkpoint by its shapes.
    first = next(s for s in SCHEMES if s.parts[0].suffix == ".qweight")
    assert first is GPTQ
    for name, layout in (("awq_gemm", "awq"), ("gptq_v1_asym", "gptq")):
        c = Case(name)
        plan = first.plan(c.base + ".weight", c.facts, {})
        assert plan.params["layout"] == layout
        got = first.decode(plan, c.arrays, 0, plan.shape[0], as_dtype("bfloat16"))
        assert _bits(got) == _bits(c.want("bfloat16"))
    c = Case("ct_group_asym")
    plan = PACK_QUANTIZED.plan(c.base + ".weight", c.facts, {})
    got = PACK_QUANTIZED.decode(plan, c.arrays, 0, plan.shape[0], as_dtype("float16"))
    assert _bits(got) == _bits(c.want("float16"))


def test_gptq_v2_keeps_the_stored_zeros() -> None:
    c = Case("gptq_v2_all")
    v1 = GPTQ.plan(c.base + ".weight", c.facts, {"quant_method": "gptq"})
    v2 = GPTQ.plan(c.base + ".weight", c.facts, c.config)
    assert (v1.params["v1"], v2.params["v1"]) == (True, False)
    a = GPTQ.decode(v1, c.arrays, 0, v1.shape[0], as_dtype("float32"))
    b = GPTQ.decode(v2, c.arrays, 0, v2.shape[0], as_dtype("float32"))
    assert _bits(b) == _bits(c.want("float32"))
    assert _bits(a) != _bits(b)


def _gptq_words(codes: np.ndarray) -> np.ndarray:
    """(in, out) codes -> GPTQ qweight (in/8, out): nibble k of word [w, o] = row 8w + k."""
    n_in, out = codes.shape
    c = codes.astype(np.uint32).reshape(n_in // 8, 8, out)
    words = np.zeros((n_in // 8, out), np.uint32)
    for k in range(8):
        words |= c[:, k, :] << np.uint32(4 * k)
    return words.view(np.int32)


def _zero_words(zeros: np.ndarray, order: tuple[int, ...] = tuple(range(8))) -> np.ndarray:
    """(groups, out) zeros -> (groups, out/8) int32, nibble p holding column 8j + order[p]."""
    g, out = zeros.shape
    z = zeros.astype(np.uint32).reshape(g, out // 8, 8)
    words = np.zeros((g, out // 8), np.uint32)
    for p in range(8):
        words |= z[:, :, order[p]] << np.uint32(4 * p)
    return words.view(np.int32)


def test_gptq_stated_values_and_the_v1_zero_wrap() -> None:
    # in 16, out 8, two groups of 8 columns; v1 stores z - 1, and stored 15 reads as z = 0.
    codes = np.tile(np.arange(16)[:, None], (1, 8))  # q[i, o] = i
    stored = np.full((2, 8), 15)  # z = (15 + 1) & 15 = 0
    stored[1] = 3  # z = 4
    scales = np.full((2, 8), 0.5, np.float16)
    arrays: dict[str, np.ndarray] = {
        "qweight": _gptq_words(codes),
        "qzeros": _zero_words(stored),
        "scales": scales,
    }
    plan = GPTQ.plan("w.weight", _facts(arrays), {"quant_method": "gptq", "group_size": 8})
    got = GPTQ.decode(plan, arrays, 0, 8, as_dtype("float32"))
    row = [0.5 * i for i in range(8)] + [0.5 * (i - 4) for i in range(8, 16)]
    assert got.tolist() == [row] * 8


def test_desc_act_g_idx_permutes_the_groups() -> None:
    codes = np.full((16, 8), 9)
    stored = np.full((2, 8), 7)  # v1: z = 8, so every value is the scale
    scales = np.array([[1.0] * 8, [-2.0] * 8], np.float16)
    g_idx = np.array([1, 0] * 8, np.int32)
    arrays: dict[str, np.ndarray] = {
        "qweight": _gptq_words(codes),
        "qzeros": _zero_words(stored),
        "scales": scales,
        "g_idx": g_idx,
    }
    cfg = {"quant_method": "gptq", "group_size": 8, "desc_act": True}
    plan = GPTQ.plan("w.weight", _facts(arrays), cfg)
    assert plan.params["group"] == 0  # the columns' groups come from g_idx
    got = GPTQ.decode(plan, arrays, 2, 5, as_dtype("bfloat16"))
    assert got.astype(np.float32).tolist() == [[-2.0, 1.0] * 8] * 3
    arrays["g_idx"] = (np.arange(16) // 8).astype(np.int32)  # the trivial order: the rule
    plan = GPTQ.plan("w.weight", _facts(arrays), cfg)
    assert plan.params["group"] == 8
    got = GPTQ.decode(plan, arrays, 0, 1, as_dtype("float32"))
    assert got.tolist() == [[1.0] * 8 + [-2.0] * 8]


def test_awq_nibble_order() -> None:
    # One word column: nibble p of every word holds column AWQ order [0, 2, 4, 6, 1, 3, 5, 7][p].
    q = np.zeros((8, 8), np.uint32)
    for p, col in enumerate((0, 2, 4, 6, 1, 3, 5, 7)):
        q[:, p] = col  # code = its column's number
    words = np.zeros((8, 1), np.uint32)
    for p in range(8):
        words[:, 0] |= q[:, p] << np.uint32(4 * p)
    arrays: dict[str, np.ndarray] = {
        "qweight": words.view(np.int32),
        "qzeros": np.zeros((1, 1), np.int32),
        "scales": np.ones((1, 8), np.float16),
    }
    plan = AWQ.plan("w.weight", _facts(arrays), {"quant_method": "awq"})
    got = AWQ.decode(plan, arrays, 0, 8, as_dtype("float32"))
    assert got.tolist() == [[float(o)] * 8 for o in range(8)]


def _ct_arrays(out: int, n_in: int, groups: int, zero: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    arrays = {
        "packed": rng.integers(-(2**31), 2**31, (out, -(-n_in // 8)), dtype=np.int64).astype(
            np.int32
        ),
        "scale": rng.uniform(-1, 1, (out, groups)).astype(as_dtype("bfloat16")),
        "shape": np.array([out, n_in], np.int64),
    }
    if zero:
        arrays["zero"] = rng.integers(0, 2**31, (-(-out // 8), groups), dtype=np.int64).astype(
            np.int32
        )
    return arrays


def test_pack_quantized_symmetric_and_asymmetric_stated_values() -> None:
    # Codes are stored plus 8; a zero point's nibbles likewise (row o in nibble o % 8).
    packed = np.array([[0x76543210, 0xFEDCBA98]], np.uint32).view(np.int32)
    arrays: dict[str, np.ndarray] = {
        "packed": packed,
        "scale": np.array([[0.25]], np.float16),
        "shape": np.array([1, 16], np.int64),
    }
    plan = PACK_QUANTIZED.plan("w.weight", _facts(arrays), {})
    got = PACK_QUANTIZED.decode(plan, arrays, 0, 1, as_dtype("float32"))
    assert got.tolist() == [[0.25 * (u - 8) for u in range(16)]]
    arrays["zero"] = np.array([[3]], np.int32)  # zero point 3 - 8 = -5
    plan = PACK_QUANTIZED.plan("w.weight", _facts(arrays), {})
    got = PACK_QUANTIZED.decode(plan, arrays, 0, 1, as_dtype("float32"))
    assert got.tolist() == [[0.25 * (u - 3) for u in range(16)]]


def _random_case(layout: str, desc: bool) -> tuple[Scheme, dict[str, np.ndarray], dict[str, Any]]:
    rng = np.random.default_rng(11)
    out, n_in, group = 40, 96, 32
    groups = n_in // group
    scales = rng.uniform(-3, 3, (groups, out)).astype(np.float16)
    scales.reshape(-1)[:6] = [0.0, -0.0, 65504.0, 6e-8, -1e-5, 3000.0]
    size = (n_in // 8, out) if layout == "gptq" else (n_in, out // 8)
    words = rng.integers(-(2**31), 2**31, size=size)
    arrays: dict[str, np.ndarray] = {
        "qweight": words.astype(np.int32),
        "qzeros": rng.integers(-(2**31), 2**31, (groups, out // 8)).astype(np.int32),
        "scales": scales,
    }
    if desc:
        arrays["g_idx"] = (rng.permutation(n_in) // group).astype(np.int32)
    return (GPTQ if layout == "gptq" else AWQ), arrays, {"quant_method": layout}


@pytest.mark.skipif(not backend.BUILT, reason="the compiled extension is not built here")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["gptq", "gptq-desc", "awq", "rows", "rows-zero"])
def test_numpy_kernel_equals_compiled(
    which: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if which.startswith("rows"):
        scheme: Scheme = PACK_QUANTIZED
        arrays = _ct_arrays(21, 100, 1, which == "rows-zero")
        config: dict[str, Any] = {}
        arrays["scale"].reshape(-1)[:3] = [0.0, 3e38, -1e-40]
    else:
        scheme, arrays, config = _random_case(which[:4], which.endswith("desc"))
    plan = scheme.plan("w.weight", _facts(arrays), config)
    rows = plan.shape[0]
    monkeypatch.setattr(backend, "COMPILED", True)
    compiled = scheme.decode(plan, arrays, 0, rows, as_dtype(dtype))
    part = scheme.decode(plan, arrays, 5, rows - 2, as_dtype(dtype))
    monkeypatch.setattr(backend, "COMPILED", False)
    pure = scheme.decode(plan, arrays, 0, rows, as_dtype(dtype))
    assert _bits(compiled) == _bits(pure)
    assert _bits(part) == _bits(pure[5 : rows - 2])
    assert np.isinf(pure.astype(np.float32)).any() or dtype == "float32"


def test_compiled_kernel_refuses_what_does_not_fit() -> None:
    if not backend.BUILT:
        pytest.skip("the compiled extension is not built here")
    from kiln_np._kernels import native

    words = np.zeros((2, 8), np.int32)
    out = np.empty((8, 16), np.float32)
    scale, zero = np.ones((8, 1), np.float32), np.zeros((8, 1), np.int32)
    gidx = np.zeros(16, np.int32)
    native.int4_rows(words, 0, 8, 0, gidx, 0, scale, zero, 2, out, 0, 0, 8)
    assert out.tolist() == [[0.0] * 16] * 8
    with pytest.raises(ValueError, match="do not fit"):
        native.int4_rows(words, 0, 8, 1, gidx, 0, scale, zero, 2, out, 0, 0, 8)  # rows past
    with pytest.raises(ValueError, match="do not fit"):
        native.int4_rows(words, 0, 8, 0, gidx + 1, 0, scale, zero, 2, out, 0, 0, 8)  # group 1
    with pytest.raises(ValueError, match="bad layout"):
        native.int4_rows(words, 3, 8, 0, gidx, 0, scale, zero, 2, out, 0, 0, 8)


# -- the rules -------------------------------------------------------------------------


def _gptq_arrays() -> dict[str, np.ndarray]:
    return {
        "qweight": np.zeros((16, 24), np.int32),  # in 128, out 24
        "qzeros": np.zeros((4, 3), np.int32),
        "scales": np.ones((4, 24), np.float16),
    }


def _refused(scheme: Scheme, arrays: Mapping[str, np.ndarray], config: Mapping[str, Any]) -> str:
    with pytest.raises(KilnError) as info:
        scheme.plan("m.q_proj.weight", _facts(arrays), config)
    assert "'m.q_proj.weight'" in str(info.value)
    return f"{info.value.kind}: {info.value}"


@pytest.mark.parametrize(
    ("change", "config", "words"),
    [
        ({"qweight": np.zeros(16, np.int32)}, {}, "qweight 'x.qweight' 2-D and not empty"),
        ({"scales": np.ones((0, 24), np.float16)}, {}, "scales 'x.scales' 2-D"),
        ({}, {"quant_method": "gptq", "bits": 8}, "expected bits 4"),
        ({}, {"quant_method": "awq"}, "qweight (in, out/8) with out = 24"),
        ({"qweight": np.zeros((16, 23), np.int32)}, {"quant_method": "gptq"}, "(in/8, out)"),
        ({"qzeros": np.zeros((4, 2), np.int32)}, {}, "qzeros (groups, out/8) = (4, 3)"),
        (
            {"scales": np.ones((3, 24), np.float16), "qzeros": np.zeros((3, 3), np.int32)},
            {},
            "128 columns in groups of in / groups",
        ),
        ({}, {"quant_method": "gptq", "group_size": 64}, "scales of 2 rows, found 4"),
        ({"g_idx": np.zeros(64, np.int32)}, {}, "g_idx of shape (128,)"),
        ({"g_idx": np.full(128, 4, np.int32)}, {}, "g_idx values in [0, 4)"),
    ],
)
def test_gptq_rules(change: dict[str, np.ndarray], config: dict[str, Any], words: str) -> None:
    arrays = {**_gptq_arrays(), **change}
    message = _refused(GPTQ, arrays, config)
    assert words in message


def test_awq_rules() -> None:
    awq: dict[str, np.ndarray] = {
        "qweight": np.zeros((128, 3), np.int32),
        "qzeros": np.zeros((4, 3), np.int32),
        "scales": np.ones((4, 24), np.float16),
    }
    assert AWQ.plan("w.weight", _facts(awq), {"quant_method": "awq"}).shape == (24, 128)
    message = _refused(GPTQ, {**awq, "g_idx": np.zeros(128, np.int32)}, {})
    assert message.startswith("SHAPE")
    assert "no g_idx for AWQ" in message
    short = {**awq, "qweight": np.zeros((130, 3), np.int32)}
    message = _refused(AWQ, short, {"quant_method": "awq"})
    assert "130 columns in groups of in / groups" in message
    message = _refused(AWQ, awq, {"quant_method": "awq", "group_size": 64})
    assert "scales of 2 rows, found 4" in message


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"shape": np.array([21, 100, 1], np.int64)}, "weight_shape of 2 elements"),
        ({"shape": np.array([0, 100], np.int64)}, "positive sizes, found (0, 100)"),
        ({"packed": np.zeros((21, 12), np.int32)}, "weight_packed (out, ceil(in/8)) = (21, 13)"),
        ({"scale": np.ones((21, 3), np.float16)}, "weight_scale (out, groups)"),
        ({"zero": np.zeros((2, 1), np.int32)}, "weight_zero_point (ceil(out/8), groups) = (3, 1)"),
        ({"g_idx": np.ones(100, np.int32)}, "weight_g_idx equal to column // 100"),
    ],
)
def test_pack_quantized_rules(change: dict[str, np.ndarray], words: str) -> None:
    arrays = {**_ct_arrays(21, 100, 1, True), **change}
    message = _refused(PACK_QUANTIZED, arrays, {})
    assert message.startswith("SHAPE")
    assert words in message


def test_pack_quantized_trivial_g_idx_is_read() -> None:
    arrays = {**_ct_arrays(8, 64, 2, False), "g_idx": (np.arange(64) // 32).astype(np.int32)}
    plan = PACK_QUANTIZED.plan("w.weight", _facts(arrays), {})
    assert plan.shape == (8, 64)
    assert plan.params["group"] == 32


def test_configured() -> None:
    assert GPTQ.configured({"quant_method": "gptq"})
    assert GPTQ.configured({"quant_method": "gptq", "checkpoint_format": "gptq_v2"})
    assert not GPTQ.configured({"quant_method": "gptq", "checkpoint_format": "marlin"})
    assert AWQ.configured({"quant_method": "awq", "version": "GEMM"})
    assert not AWQ.configured({"quant_method": "awq", "version": "gemv"})
    assert PACK_QUANTIZED.configured({"format": "pack-quantized"})
    groups = {"config_groups": {"g": {"format": "pack-quantized"}}, "format": "mixed-precision"}
    assert PACK_QUANTIZED.configured(groups)
    assert not PACK_QUANTIZED.configured({"format": "float-quantized", "config_groups": []})


def test_kernel_doc_layouts() -> None:
    assert kernel.LAYOUTS == {"gptq": 0, "awq": 1, "rows": 2}
    assert sorted(kernel.AWQ_NIBBLE) == list(range(8))


# -- through the logical view --------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_logical_view_end_to_end(case: Case, dtype: str) -> None:
    path = FIXTURES / case.base_dir / "model.safetensors"
    with kiln_np.open_weights(str(path)) as w:
        view = w.logical()
        logical = view[case.base + ".weight"]
        assert isinstance(logical, kiln_np.LogicalTensor)
        assert logical.scheme == case.scheme.name
        assert logical.shape == case.want(dtype).shape
        assert _bits(logical.dequantize(dtype=dtype)) == _bits(case.want(dtype))
        plain = [n for n in w if not n.startswith(case.base + ".")]
        plain += [n for n in w if n == case.base + ".bias"]
        assert plain  # a tensor of no scheme passes through, bytes unchanged
        for name in plain:
            assert _bits(view[name].numpy()) == _bits(w[name].numpy())
        parts = {case.base + p.suffix for p in case.scheme.parts} & set(w)
        assert not parts & set(view)  # the parts are one tensor here
        assert parts <= set(view.plain)


def test_logical_view_without_a_config() -> None:
    # Names, types and shapes alone: the shapes tell AWQ's parts from GPTQ's (GPTQ's
    # row claims only its own layout), GPTQ's zeros as the v1 format stores them.
    cases = (
        ("awq_gemm", "awq", True),
        ("gptq_v1_asym", "gptq", True),
        ("gptq_v2_all", "gptq", False),
    )
    for name, scheme, same in cases:
        c = Case(name)
        with kiln_np.open_weights(str(FIXTURES / name / "model.safetensors")) as w:
            logical = w.logical(config=False)[c.base + ".weight"]
            assert isinstance(logical, kiln_np.LogicalTensor)
            assert logical.scheme == scheme
            got = logical.dequantize(dtype="bfloat16")
        assert (_bits(got) == _bits(c.want("bfloat16"))) is same


@pytest.mark.skipif(not backend.BUILT, reason="the compiled extension is not built here")
@pytest.mark.parametrize("native", ["float16", "bfloat16"])
def test_every_scale_and_code_rounds_as_numpy(native: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every 16-bit scale pattern (NaNs, infinities, subnormals, both zeros) times every
    # code difference -15..15: the compiled tables' roundings against numpy's astype.
    every = np.arange(1 << 16, dtype=np.uint16).view(as_dtype(native))
    scale = every.astype(np.float32).reshape(4096, 16)
    zero = np.random.default_rng(3).integers(0, 16, scale.shape).astype(np.int32)
    zero[:, 0], zero[:, 1] = 0, 15
    row = np.array([0x76543210, 0xFEDCBA98] * 16, np.uint32).view(np.int32)  # codes 0-15, 16 times
    words = np.tile(row, (4096, 1))
    gidx = (np.arange(256) // 16).astype(np.int32)
    for dtype in DTYPES:
        got = []
        for compiled in (True, False):
            monkeypatch.setattr(backend, "COMPILED", compiled)
            out = np.empty((4096, 256), as_dtype(dtype))
            kernel.int4_rows(words, "rows", 0, gidx, 16, scale, zero, native, out)
            got.append(_bits(out))
        assert got[0] == got[1], dtype
