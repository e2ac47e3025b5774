"""The FP8 schemes (kiln_np._schemes.fp8) and their kernel (kiln_np._kernels.fp8).

Fixtures: tests/fixtures/schemes/fp8/, made by tests/fixtures/schemes/make_fp8.py (DeepSeek's
``weight_dequant`` re-implemented in torch; compressed-tensors 0.20.1 quantizing, saving and
decompressing).  Every non-NaN element is compared bit for bit; a NaN must be a NaN where
the reference has one (torch's own NaN bits differ between its vectorized and scalar casts:
0x7FC0 and 0xFFFF both occur in its bfloat16 outputs).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError
from kiln_np._core.table import dtype_info, spec_dtype
from kiln_np._kernels import backend, pool
from kiln_np._kernels import fp8 as kernel
from kiln_np._schemes.fp8 import FP8_BLOCK, FP8_MODELOPT, FP8_SCALED
from kiln_np._schemes.scheme import Facts, Scheme
from kiln_np._schemes.table import SCHEMES, scheme_named

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "schemes" / "fp8"
CASES = sorted(p.name for p in FIXTURES.iterdir())
BF16 = spec_dtype("ml_dtypes.bfloat16")
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": BF16, "float16": np.dtype(np.float16)}
SUFFIXES = {
    FP8_BLOCK.name: ".weight_scale_inv",
    FP8_SCALED.name: ".weight_scale",
    FP8_MODELOPT.name: ".weight_scale",
}


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Bits equal where ``want`` is not NaN; NaN exactly where ``want`` is NaN."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    width = {4: np.uint32, 2: np.uint16}[want.dtype.itemsize]
    np.testing.assert_array_equal(got.view(width)[~nan], want.view(width)[~nan])


def facts_of(weights: kiln_np.Weights, name: str) -> Facts:
    t = weights[name]
    return Facts(name, dtype_info(t.code).name, tuple(t.shape), t.numpy)


def groups(case: str) -> list[tuple[str, Scheme, dict[str, Facts], dict[str, np.ndarray]]]:
    """(logical name, scheme, facts, arrays) of each FP8 weight of a fixture."""
    weights = kiln_np.open_weights(FIXTURES / case / "model.safetensors")
    found = []
    for name in weights:
        if dtype_info(weights[name].code).name != "f8e4m3":
            continue
        base = name.removesuffix(".weight")
        scheme = FP8_BLOCK if base + ".weight_scale_inv" in weights else FP8_SCALED
        if case.startswith("modelopt"):
            scheme = FP8_MODELOPT
        names = {"weight": name, "scale": base + SUFFIXES[scheme.name]}
        facts = {role: facts_of(weights, n) for role, n in names.items()}
        arrays = {role: weights[n].numpy() for role, n in names.items()}
        found.append((name, scheme, facts, arrays))
    assert found
    return found


def config_of(case: str) -> dict[str, Any]:
    path = FIXTURES / case / "config.json"
    if not path.exists():
        return {}
    quant: dict[str, Any] = json.loads(path.read_text())["quantization_config"]
    return quant


BACKENDS = ("compiled", "numpy") if backend.COMPILED else ("numpy",)


@pytest.fixture(params=BACKENDS)
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(backend, "COMPILED", request.param == "compiled")
    return str(request.param)


def test_table_order() -> None:
    names = [s.name for s in SCHEMES]
    assert names.index("fp8-block") < names.index("fp8-scaled")
    assert scheme_named("fp8-block") is FP8_BLOCK


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_fixture_bits(case: str, dtype: str, kernels: str) -> None:
    expected = kiln_np.open_weights(FIXTURES / case / "expected.safetensors")
    config = config_of(case)
    for name, scheme, facts, arrays in groups(case):
        if config:
            assert scheme.configured(config)
            assert config["quant_method"] in scheme.methods
        plan = scheme.plan(name, facts, config)
        got = scheme.decode(plan, arrays, 0, plan.shape[0], DTYPES[dtype])
        same(got, expected[f"{name}@{dtype}"].numpy())
        # the reference's own dtype: compressed-tensors gives the scale's
        assert plan.native == ("float32" if scheme is FP8_BLOCK else arrays["scale"].dtype.name)
        assert scheme.name in {"fp8-block", "fp8-scaled", "fp8-modelopt"}


@pytest.mark.parametrize("case", CASES)
def test_row_chunks(case: str, kernels: str) -> None:
    for name, scheme, facts, arrays in groups(case):
        plan = scheme.plan(name, facts, config_of(case))
        rows = plan.shape[0]
        whole = scheme.decode(plan, arrays, 0, rows, BF16)
        cuts = sorted({0, 1, 3, rows // 2, rows - 1, rows} & set(range(rows + 1)))
        parts = [scheme.decode(plan, arrays, a, b, BF16) for a, b in itertools.pairwise(cuts)]
        assert whole.shape == plan.shape
        np.testing.assert_array_equal(np.concatenate(parts).view(np.uint16), whole.view(np.uint16))


def test_fixtures_hold_every_code() -> None:
    codes = groups("block128")[0][3]["weight"].view(np.uint8)
    assert set(np.unique(codes).tolist()) == set(range(256))
    assert sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file()) < 300_000


RNG = np.random.default_rng(23)


@pytest.mark.skipif(
    not backend.COMPILED,
    reason="the compiled kernels are not running (not built, or KILN_NP_PURE=1)",
)
@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize(
    ("rows", "cols", "block"),
    [
        (300, 700, (128, 128)),
        (37, 1000, (1, 1000)),
        (50, 9, (4, 3)),
        (5, 5, (5, 5)),
        (600, 70, (16, 32)),  # narrow blocks: multiplied, not looked up
        (0, 4, (1, 4)),
    ],
)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_compiled_equals_numpy(
    rows: int,
    cols: int,
    block: tuple[int, int],
    dtype: str,
    threaded: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if threaded:  # split over the pool from 64 elements on, mid-block
        monkeypatch.setattr(pool, "COMPILED_THREAD_MIN_LANES", 64)
        monkeypatch.setattr(pool, "THREAD_MIN_LANES", 64)
    codes = RNG.integers(0, 256, (rows, cols), dtype=np.uint8)
    shape = (max(1, -(-rows // block[0])), -(-cols // block[1]))
    scales = RNG.standard_normal(shape) * np.exp2(RNG.integers(-140, 128, shape))
    scales = scales.astype(np.float32)
    scales.flat[0] = np.inf  # 0 * inf: NaN
    out = {}
    for compiled in (True, False):
        monkeypatch.setattr(backend, "COMPILED", compiled)
        out[compiled] = kernel.dequantize(codes, scales, block, DTYPES[dtype])
    np.testing.assert_array_equal(out[True].view(np.uint8), out[False].view(np.uint8))
    per = np.repeat(np.repeat(scales, block[0], 0), block[1], 1)[:rows, :cols]
    with np.errstate(over="ignore", invalid="ignore"):  # the one float32 product, rounded once
        whole = (kernel.values()[codes] * per).astype(DTYPES[dtype])
    same(out[True], whole)


def test_rounding_values(kernels: str) -> None:
    # 1 + 2**-8 (exact in float32) is a bf16 tie: to even, 1.0; 448 * (1 + 2**-8) rounds up.
    codes = np.array([[0x38, 0x7E, 0x01, 0x7F, 0xFF, 0x00, 0x80]], np.uint8)
    scales = np.array([[1 + 2.0**-8]], np.float32)
    bf = kernel.dequantize(codes, scales, (1, 7), BF16)
    assert bf.astype(np.float32).tolist()[0][:3] == [1.0, 450.0, 2.0**-9]
    big = kernel.dequantize(codes, np.array([[1e35]], np.float32), (1, 7), np.dtype(np.float16))
    assert np.isinf(big[0, :3]).tolist() == [True, True, True]
    assert np.isnan(big[0, 3:5]).all()
    assert big.view(np.uint16)[0, 5:].tolist() == [0, 0x8000]
    tiny = kernel.dequantize(codes, np.array([[2.0**-16]], np.float32), (1, 7), np.dtype("f2"))
    assert tiny.view(np.uint16)[0, 2] == 0  # 2**-25: the tie rounds to the even zero


def unread() -> np.ndarray:
    raise AssertionError("a plan must not read the weight or its scales")


def f(name: str, kind: str, shape: tuple[int, ...]) -> Facts:
    return Facts(name, kind, shape, unread)


BLOCK_FACTS = {"weight": f("w.weight", "f8e4m3", (300, 130)), "scale": f("w.s", "f32", (3, 2))}


def test_block_plan_default_and_config() -> None:
    assert FP8_BLOCK.configured({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert not FP8_BLOCK.configured({"quant_method": "compressed-tensors"})
    assert FP8_BLOCK.plan("w.weight", BLOCK_FACTS, {}).params["block"] == (128, 128)
    plan = FP8_BLOCK.plan(
        "w.weight", dict(BLOCK_FACTS, scale=f("s", "f32", (75, 17))), {"weight_block_size": [4, 8]}
    )
    assert plan.params["block"] == (4, 8)
    assert plan.shape == (300, 130)


@pytest.mark.parametrize(
    ("facts", "config", "kind", "words"),
    [
        ({"scale": f("w.s", "f32", (2, 2))}, {}, "SHAPE", "expected (3, 2), found (2, 2)"),
        (
            {"scale": f("w.s", "f32", (3, 2))},
            {"weight_block_size": [64, 128]},
            "SHAPE",
            "one per 64x128 block of 300x130: expected (5, 2)",
        ),
        ({"scale": f("w.s", "bf16", (3, 2))}, {}, "TYPE", "expected f32, found bf16"),
        ({"weight": f("w.weight", "u8", (300, 130))}, {}, "TYPE", "expected f8e4m3, found u8"),
        ({"weight": f("w.weight", "f8e4m3", (3, 10, 13))}, {}, "SHAPE", "expected 2 dimensions"),
        ({}, {"weight_block_size": [128]}, "TYPE", "weight_block_size: expected two integers"),
        ({}, {"weight_block_size": [0, 128]}, "TYPE", "expected two integers from 1 to"),
        # issue 36: a block past a C int passed the plan (one scale) and failed in the
        # kernel ("bad geometry", or OverflowError past 2**63)
        (
            {},
            {"weight_block_size": [2**41, 128]},
            "TYPE",
            f"weight_block_size: expected two integers from 1 to 2147483647, found [{2**41}, 128]",
        ),
        ({}, {"weight_block_size": [128, 2**70]}, "TYPE", f"found [128, {2**70}]"),
        ({}, {"weight_block_size": [2**31, 2**31]}, "TYPE", "from 1 to 2147483647"),
    ],
)
def test_block_plan_errors(
    facts: dict[str, Facts], config: dict[str, Any], kind: str, words: str
) -> None:
    with pytest.raises(KilnError) as info:
        FP8_BLOCK.plan("w.weight", {**BLOCK_FACTS, **facts}, config)
    assert info.value.kind == kind
    assert info.value.message.startswith("w.weight: ")
    assert words in info.value.message


SCALED = {"weight": f("q.weight", "f8e4m3", (10, 20))}
CT_BLOCK = {"config_groups": {"g": {"weights": {"strategy": "block", "block_structure": [4, 8]}}}}


@pytest.mark.parametrize(
    ("shape", "config", "block"),
    [
        ((), {}, (10, 20)),
        ((1,), {}, (10, 20)),
        ((10, 1), {}, (1, 20)),
        ((10,), {}, (1, 20)),
        ((3, 3), CT_BLOCK, (4, 8)),
    ],
)
def test_scaled_plan(
    shape: tuple[int, ...], config: dict[str, Any], block: tuple[int, int]
) -> None:
    plan = FP8_SCALED.plan(
        "q.weight", dict(SCALED, scale=f("q.weight_scale", "bf16", shape)), config
    )
    assert plan.params["block"] == block
    assert plan.native == "bfloat16"


def test_scaled_per_tensor_scalar(kernels: str) -> None:
    plan = FP8_SCALED.plan("q.weight", dict(SCALED, scale=f("s", "f32", ())), {})
    arrays: dict[str, np.ndarray] = {
        "weight": np.full((10, 20), 0x44, np.uint8),
        "scale": np.array(0.25, np.float32),
    }
    got = FP8_SCALED.decode(plan, arrays, 2, 4, BF16)
    assert got.shape == (2, 20)
    assert got.astype(np.float32).ravel().tolist() == [0.75] * 40
    assert FP8_MODELOPT.configured({"quant_method": "modelopt", "quant_algo": "FP8"})
    assert not FP8_MODELOPT.configured({"quant_method": "modelopt", "quant_algo": "NVFP4"})
    assert not FP8_SCALED.configured({"quant_method": "compressed-tensors", "format": "nvfp4"})


def test_modelopt_rounds_the_scale_first(kernels: str) -> None:
    # 1 + 2**-8 is a bfloat16 tie: ModelOpt rounds it to 1.0 before the product,
    # compressed-tensors multiplies by it in float32 and rounds 1.5 * (1 + 2**-8) up.
    facts = dict(SCALED, scale=f("s", "f32", ()))
    arrays = {"weight": np.full((10, 20), 0x3C, np.uint8), "scale": np.array(1 + 2**-8, "f4")}
    ours = FP8_MODELOPT.decode(FP8_MODELOPT.plan("q.weight", facts, {}), arrays, 0, 1, BF16)
    theirs = FP8_SCALED.decode(FP8_SCALED.plan("q.weight", facts, {}), arrays, 0, 1, BF16)
    assert ours.astype(np.float32)[0, 0] == 1.5
    assert theirs.astype(np.float32)[0, 0] == 1.5078125


@pytest.mark.parametrize(
    ("facts", "config", "kind", "words"),
    [
        (
            {"scale": f("q.s", "f32", (3, 3))},
            {},
            "SHAPE",
            "(10, 1) or one per block of a config's block_structure, found (3, 3)",
        ),
        ({"scale": f("q.s", "f32", (2, 3))}, CT_BLOCK, "SHAPE", "(10, 1) or (3, 3), found (2, 3)"),
        ({"scale": f("q.s", "i32", ())}, {}, "TYPE", "expected f32, bf16 or f16, found i32"),
        (
            {"scale": f("q.s", "f32", ()), "weight": f("q.weight", "f8e4m3", (200,))},
            {},
            "SHAPE",
            "expected 2 dimensions, found (200,)",
        ),
        (
            {"scale": f("q.s", "f32", ())},
            {"config_groups": {"g": {"weights": {"strategy": "block", "block_structure": None}}}},
            "TYPE",
            "config_groups.g.weights.block_structure: expected two integers from 1 to 2147483647",
        ),
    ],
)
def test_scaled_plan_errors(
    facts: dict[str, Facts], config: dict[str, Any], kind: str, words: str
) -> None:
    with pytest.raises(KilnError) as info:
        FP8_SCALED.plan("q.weight", {**SCALED, **facts}, config)
    assert info.value.kind == kind
    assert info.value.message.startswith("q.weight: ")
    assert words in info.value.message


NEED_CONFIG = {"block4x8", "ct-block-bf16"}
"""The fixtures whose blocks no header tells: not DeepSeek's default 128 x 128, not per
tensor or per row."""


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("by_config", [True, False])
def test_logical_view(case: str, by_config: bool, kernels: str) -> None:
    """End to end: open_weights(dir).logical() groups the parts (by config.json or, with
    config=False, by names and types alone) and dequantizes each as the reference does."""
    weights = kiln_np.open_weights(FIXTURES / case / "model.safetensors")
    if not by_config and case in NEED_CONFIG:  # its blocks are only in its config
        with pytest.raises(KilnError, match="block") as info:
            weights.logical(config=False)
        assert info.value.kind == "SHAPE"
        return
    view = weights.logical() if by_config else weights.logical(config=False)
    expected = kiln_np.open_weights(FIXTURES / case / "expected.safetensors")
    names = {key.split("@")[0] for key in expected}
    parts = {n + s for n in names for s in ("_scale", "_scale_inv")}
    plain = [n for n in weights if n not in names | parts]  # input_scale among them
    assert sorted(view) == sorted(names | set(plain))
    # Without its config a ModelOpt checkpoint reads as compressed-tensors' (same names and
    # types), whose float32 output is ModelOpt's too.
    lost = case.startswith("modelopt") and not by_config
    for name in names:
        t = view[name]
        assert isinstance(t, kiln_np.LogicalTensor)
        assert t.shape == weights[name].shape
        assert t.scheme == ("fp8-scaled" if lost else groups(case)[0][1].name)
        for dtype in ("float32",) if lost else DTYPES:
            same(t.dequantize(dtype), expected[f"{name}@{dtype}"].numpy())
    for name in plain:  # the unquantized tensors pass through, bytes untouched
        np.testing.assert_array_equal(view[name].numpy(), weights[name].numpy())


def test_logical_view_rejects_a_bad_scale(tmp_path: Path) -> None:
    source = FIXTURES / "block128"
    tensors = {n: t.numpy() for n, t in kiln_np.open_weights(source / "model.safetensors").items()}
    name = "model.layers.0.self_attn.q_proj.weight"
    tensors[name + "_scale_inv"] = np.ones((1, 1), np.float32)  # 129 rows need 2 row blocks
    kiln_np.save_weights(tmp_path / "model.safetensors", tensors, format="safetensors")
    (tmp_path / "config.json").write_text((source / "config.json").read_text())
    with pytest.raises(KilnError) as info:
        kiln_np.open_weights(tmp_path / "model.safetensors").logical()
    assert info.value.kind == "SHAPE"
    assert f"{name}: fp8-block scale {name}_scale_inv, one per 128x128 block" in info.value.message
