"""The e2m1 schemes (kiln_np._schemes.fp4) against their references' outputs.

The fixtures (tests/fixtures/schemes/fp4/, made by make_fp4.py in the oracle
venv) hold each checkpoint's parts as the producer writes them and, in
expected.safetensors, the reference's dequantized tensors for float32, bfloat16
and float16.  Decoded bits must equal those; a NaN must be a NaN (its payload is
the float unit's, not the scheme's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError
from kiln_np._core.table import as_dtype, dtype_info
from kiln_np._kernels import backend, fp4
from kiln_np._schemes import table
from kiln_np._schemes.fp4 import MXFP4_GPT_OSS, NVFP4_CT, NVFP4_MODELOPT, SCHEMES
from kiln_np._schemes.scheme import Facts, Plan, Scheme

FIXTURES = Path(__file__).parent.parent / "fixtures" / "schemes" / "fp4"
CASES = {"nvfp4-modelopt": NVFP4_MODELOPT, "nvfp4-ct": NVFP4_CT, "mxfp4-gpt-oss": MXFP4_GPT_OSS}
DTYPES = ("float32", "bfloat16", "float16")


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint32 if array.dtype.itemsize == 4 else np.uint16)


def _same(found: np.ndarray, expected: np.ndarray) -> None:
    """Bit for bit, except that any NaN matches any NaN."""
    assert found.dtype == expected.dtype
    assert found.shape == expected.shape
    nan = np.isnan(expected.astype(np.float32))
    assert np.array_equal(np.isnan(found.astype(np.float32)), nan)
    assert np.array_equal(_bits(found)[~nan], _bits(expected)[~nan])


class Checkpoint:
    """One fixture: its tensors by name, grouped by a scheme's parts."""

    def __init__(self, case: str) -> None:
        self.dir = FIXTURES / case
        self.weights = kiln_np.open_weights(self.dir / "model.safetensors")
        self.config = json.loads((self.dir / "config.json").read_text())["quantization_config"]

    def facts(self, name: str) -> Facts:
        tensor = self.weights[name]
        return Facts(name, dtype_info(tensor.code).name, tensor.shape, tensor.numpy)

    def groups(self, scheme: Scheme) -> dict[str, dict[str, str]]:
        """Logical name -> role -> stored name, for every key part of ``scheme``."""
        key = scheme.parts[0]
        out = {}
        for name in self.weights:
            if name.endswith(key.suffix) and self.facts(name).type in key.types:
                base = name[: -len(key.suffix)]
                roles = {p.role: base + p.suffix for p in scheme.parts}
                assert all(stored in self.weights for stored in roles.values())
                out[base + scheme.logical] = roles
        return out

    def plan(self, scheme: Scheme, roles: Mapping[str, str], logical: str) -> Plan:
        facts = {role: self.facts(name) for role, name in roles.items()}
        return scheme.plan(logical, facts, self.config)

    def arrays(self, roles: Mapping[str, str]) -> dict[str, np.ndarray]:
        return {role: self.weights[name].numpy() for role, name in roles.items()}


def _decode(scheme: Scheme, plan: Plan, arrays: Mapping[str, np.ndarray], dtype: str) -> Any:
    return scheme.decode(plan, arrays, 0, plan.shape[0], as_dtype(dtype))


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[Scheme, Checkpoint]:
    return CASES[request.param], Checkpoint(request.param)


def test_fixture_names_and_groups() -> None:
    """Each checkpoint's quantized tensors group into the logical names expected
    holds; the unquantized ones and activation scales are no part."""
    for name, scheme in CASES.items():
        ckpt = Checkpoint(name)
        groups = ckpt.groups(scheme)
        expected = kiln_np.open_weights(ckpt.dir / "expected.safetensors")
        assert {key.split("@")[0] for key in expected} == set(groups)
        assert len(expected.keys()) == 3 * len(groups)
        parts = {stored for roles in groups.values() for stored in roles.values()}
        rest = set(ckpt.weights.keys()) - parts
        assert "model.norm.weight" in rest or "norm" in rest
        assert all(
            n.endswith(("norm.weight", "norm", "input_scale", "input_global_scale", "bias"))
            for n in rest
        )
        assert scheme.configured(ckpt.config)
        assert ckpt.config["quant_method"] in scheme.methods


def test_fixture_bits(case: tuple[Scheme, Checkpoint]) -> None:
    scheme, ckpt = case
    expected = kiln_np.open_weights(ckpt.dir / "expected.safetensors")
    for logical, roles in ckpt.groups(scheme).items():
        plan = ckpt.plan(scheme, roles, logical)
        arrays = ckpt.arrays(roles)
        for dtype in DTYPES:
            want = expected[f"{logical}@{dtype}"].numpy()
            assert plan.shape == want.shape
            _same(_decode(scheme, plan, arrays, dtype), want)


def test_fixtures_hold_hostile_values(case: tuple[Scheme, Checkpoint]) -> None:
    """Every code byte and every scale code is in each fixture; the references'
    outputs include infinities, NaNs (NVFP4) and values that underflow float16."""
    scheme, ckpt = case
    expected = kiln_np.open_weights(ckpt.dir / "expected.safetensors")
    groups = ckpt.groups(scheme)
    largest = max(groups.values(), key=lambda roles: ckpt.weights[roles[scheme.parts[0].role]].size)
    first = ckpt.arrays(largest)
    codes, scales = (first[p.role] for p in scheme.parts[:2])
    assert set(np.unique(codes.view(np.uint8)).tolist()) == set(range(256))
    assert set(np.unique(scales.view(np.uint8)).tolist()) == set(range(256))
    bf16 = np.concatenate([expected[f"{g}@bfloat16"].numpy().ravel() for g in groups])
    f16 = np.concatenate([expected[f"{g}@float16"].numpy().ravel() for g in groups])
    assert np.isinf(bf16.astype(np.float32)).any()
    assert (np.isnan(bf16.astype(np.float32)).any()) == (scheme is not MXFP4_GPT_OSS)
    assert ((f16 == 0) & (bf16.astype(np.float32) != 0)).any()


def test_row_chunks_equal_whole(case: tuple[Scheme, Checkpoint]) -> None:
    scheme, ckpt = case
    for logical, roles in ckpt.groups(scheme).items():
        plan = ckpt.plan(scheme, roles, logical)
        arrays = ckpt.arrays(roles)
        for dtype in DTYPES:
            whole = _decode(scheme, plan, arrays, dtype)
            rows = plan.shape[0]
            for step in (1, 3):
                parts = [
                    scheme.decode(plan, arrays, r0, min(r0 + step, rows), as_dtype(dtype))
                    for r0 in range(0, rows, step)
                ]
                assert np.array_equal(_bits(np.concatenate(parts)), _bits(whole))


def test_numpy_twin_equals_compiled(
    case: tuple[Scheme, Checkpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    scheme, ckpt = case
    for logical, roles in ckpt.groups(scheme).items():
        plan = ckpt.plan(scheme, roles, logical)
        arrays = ckpt.arrays(roles)
        compiled = {d: _decode(scheme, plan, arrays, d) for d in DTYPES}
        with monkeypatch.context() as patch:
            patch.setattr(backend, "COMPILED", False)
            for dtype in DTYPES:
                pure = _decode(scheme, plan, arrays, dtype)
                assert np.array_equal(_bits(pure), _bits(compiled[dtype]))


@pytest.mark.parametrize(
    ("block", "post", "minus_zero"),
    [(16, 1.0, True), (16, 1.0, False), (32, 2.0, True), (48, 0.5, True)],
)
def test_kernel_twin_bits(block: int, post: float, minus_zero: bool) -> None:
    """Random codes and scale tables of every float32 bit pattern class (NaN
    payloads, infinities, subnormals, rounding ties of every output type): the
    numpy and the compiled kernel give the same bits."""
    rng = np.random.default_rng(block)
    n = block * 4096
    packed = rng.integers(0, 256, n // 2, dtype=np.uint8)
    codes = rng.integers(0, 256, n // block, dtype=np.uint8)
    special = [np.nan, -np.inf, 0.0, -0.0, 1e-45, 2**-24, 2**-25, 65520 / 6, 3e38, 2**-128]
    for round_ in range(6):
        bits = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
        table = bits.view(np.float32)
        if round_ % 2:  # sane magnitudes: the roundings, not the specials
            table[:] = rng.random(256, np.float32) * np.exp2(rng.integers(-40, 40, 256))
        table[: len(special)] = special
        for dtype in DTYPES:
            a = np.empty(n, as_dtype(dtype))
            b = np.empty(n, as_dtype(dtype))
            fp4.scaled_numpy(packed, codes, table, a, block, post, minus_zero=minus_zero)
            fp4.scaled_into(packed, codes, table, b, block, post, minus_zero=minus_zero)
            assert np.array_equal(_bits(a), _bits(b)), dtype


def _one_scale(value: float) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(1, np.uint8), np.full(256, value, np.float32)


def test_kernel_values() -> None:
    """Stated values: the codes, a scale, float16 rounding and overflow, bfloat16 NaN."""
    packed = np.array([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], np.uint8)
    out = np.empty(16, np.float32)
    fp4.scaled_into(packed, *_one_scale(1.0), out, 16, 1.0)
    assert out.tolist() == fp4.E2M1.tolist()
    half = np.empty(16, np.float16)
    fp4.scaled_into(packed, *_one_scale(65504 / 4), half, 16, 1.0)
    assert half[6:8].tolist() == [65504.0, float("inf")]  # 4 and 6 times
    nan = np.empty(16, as_dtype("bfloat16"))
    fp4.scaled_into(packed, *_one_scale(np.nan), nan, 16, 1.0)
    assert (_bits(nan) & 0x7FFF).tolist() == [0x7FC0] * 16
    codes = np.array([3], np.uint8)
    table = np.zeros(256, np.float32)
    table[3] = 0.25
    fp4.scaled_into(packed, codes, table, out, 16, 2.0)
    assert out[:4].tolist() == [0.0, 0.25, 0.5, 0.75]


def test_gpt_oss_scale_extremes() -> None:
    """ldexp's results at the e8m0 ends: byte 255 makes 0.5 into 2**127 and 1.0
    infinite, 0 stays 0; byte 0 gives 0.5 * 2**-127 exactly."""
    facts = {
        "blocks": Facts("w_blocks", "u8", (2, 1, 16), lambda: np.zeros(0)),
        "scales": Facts("w_scales", "u8", (2, 1), lambda: np.zeros(0)),
    }
    plan = MXFP4_GPT_OSS.plan("w", facts, {})
    blocks = np.full((2, 1, 16), 0x21, np.uint8)  # 0.5, 1.0, ...
    blocks[:, :, 1] = 0x80  # 0.0, -0.0
    arrays = {"blocks": blocks, "scales": np.array([[255], [0]], np.uint8)}
    out = MXFP4_GPT_OSS.decode(plan, arrays, 0, 2, np.dtype(np.float32))
    assert out[0, :4].tolist() == [2.0**127, float("inf"), 0.0, -0.0]
    assert out[1, :2].tolist() == [2.0**-128, 2.0**-127]


def test_gpt_oss_vector_rows() -> None:
    """(G, 16) blocks make a vector; its rows are elements, cut from whole blocks."""
    facts = {
        "blocks": Facts("w_blocks", "u8", (3, 16), lambda: np.zeros(0)),
        "scales": Facts("w_scales", "u8", (3,), lambda: np.zeros(0)),
    }
    plan = MXFP4_GPT_OSS.plan("w", facts, {})
    assert plan.shape == (96,)
    arrays = {
        "blocks": (np.arange(48, dtype=np.uint8) * 7).reshape(3, 16),
        "scales": np.array([120, 127, 130], np.uint8),
    }
    whole = MXFP4_GPT_OSS.decode(plan, arrays, 0, 96, as_dtype("bfloat16"))
    part = MXFP4_GPT_OSS.decode(plan, arrays, 30, 70, as_dtype("bfloat16"))
    assert np.array_equal(_bits(part), _bits(whole[30:70]))


def test_ct_float16_rounds_from_bfloat16() -> None:
    """compressed-tensors decompresses to bfloat16 only: float16 is that rounded again,
    not the float32 product rounded once."""
    facts = {
        "weight_packed": Facts("w.weight_packed", "u8", (1, 8), lambda: np.zeros(0)),
        "weight_scale": Facts("w.weight_scale", "f8e4m3", (1, 1), lambda: np.zeros(0)),
        "weight_global_scale": Facts("w.weight_global_scale", "f32", (1,), lambda: np.zeros(0)),
    }
    plan = NVFP4_CT.plan("w.weight", facts, {})
    arrays = {
        "weight_packed": np.full((1, 8), 0x22, np.uint8),  # 1.0
        "weight_scale": np.array([[1.0]], as_dtype("float8_e4m3fn")),
        # 1 / g is about 1 + 2**-9: bfloat16 1.0, float16 1 + 2**-9
        "weight_global_scale": np.array([1 / (1 + 2**-9)], np.float32),
    }
    half = NVFP4_CT.decode(plan, arrays, 0, 1, np.dtype(np.float16))
    assert half[0, 0] == 1.0
    modelopt = {
        "weight": arrays["weight_packed"],
        "weight_scale": arrays["weight_scale"],
        "weight_scale_2": np.array(1 + 2**-9, np.float32),
    }
    mplan = Plan((1, 16), "float32", {"group": 16})
    assert NVFP4_MODELOPT.decode(mplan, modelopt, 0, 1, np.dtype(np.float16))[0, 0] > 1.0


def test_table_rows_first() -> None:
    assert table.SCHEMES[: len(SCHEMES)] == SCHEMES
    assert table.scheme_named("nvfp4-ct") is NVFP4_CT


def test_configured() -> None:
    assert NVFP4_MODELOPT.configured({"quant_method": "modelopt", "quant_algo": "NVFP4"})
    assert not NVFP4_MODELOPT.configured({"quant_method": "modelopt", "quant_algo": "FP8"})
    assert NVFP4_CT.configured({"format": "nvfp4-pack-quantized"})
    assert NVFP4_CT.configured({"config_groups": {"g": {"format": "nvfp4-pack-quantized"}}})
    assert not NVFP4_CT.configured({"format": "float-quantized", "config_groups": {"g": 1}})
    assert MXFP4_GPT_OSS.configured({"quant_method": "mxfp4"})


# --- error rules ---------------------------------------------------------------------------


def _facts(**parts: tuple[str, tuple[int, ...]]) -> dict[str, Facts]:
    return {
        role: Facts(f"m.{role}", kind, shape, lambda: np.zeros(0))
        for role, (kind, shape) in parts.items()
    }


def _modelopt(**over: tuple[str, tuple[int, ...]]) -> dict[str, Facts]:
    base = {
        "weight": ("u8", (4, 16)),
        "weight_scale": ("f8e4m3", (4, 2)),
        "weight_scale_2": ("f32", ()),
    }
    return _facts(**{**base, **over})


def _ct(**over: tuple[str, tuple[int, ...]]) -> dict[str, Facts]:
    base = {
        "weight_packed": ("u8", (4, 16)),
        "weight_scale": ("f8e4m3", (4, 2)),
        "weight_global_scale": ("f32", (1,)),
    }
    return _facts(**{**base, **over})


def _mx(**over: tuple[str, tuple[int, ...]]) -> dict[str, Facts]:
    base = {"blocks": ("u8", (2, 3, 4, 16)), "scales": ("u8", (2, 3, 4))}
    return _facts(**{**base, **over})


ERRORS = [
    (NVFP4_MODELOPT, _modelopt(weight=("i8", (4, 16))), {}, "TYPE", "m.weight has the wrong type"),
    (NVFP4_MODELOPT, _modelopt(), {"group_size": 32}, "TYPE", "an NVFP4 group_size is 16"),
    (
        NVFP4_MODELOPT,
        _modelopt(),
        {"config_groups": {"group_0": {"weights": {"group_size": 8}}}},
        "TYPE",
        "expected 16, found 8",
    ),
    (NVFP4_MODELOPT, _modelopt(weight=("u8", ())), {}, "SHAPE", "holds packed rows"),
    (
        NVFP4_MODELOPT,
        _modelopt(weight=("u8", (4, 12)), weight_scale=("f8e4m3", (4, 1))),
        {},
        "SHAPE",
        "24 columns are not a whole number of 16-element blocks",
    ),
    (
        NVFP4_MODELOPT,
        _modelopt(weight_scale=("f8e4m3", (4, 1))),
        {},
        "SHAPE",
        "expected (4, 2), found (4, 1)",
    ),
    (
        NVFP4_MODELOPT,
        _modelopt(weight_scale_2=("f32", (4,))),
        {},
        "SHAPE",
        "m.weight_scale_2 is one scale for the tensor",
    ),
    (NVFP4_CT, _ct(weight_scale=("bf16", (4, 2))), {}, "TYPE", "expected f8e4m3, found bf16"),
    (
        NVFP4_CT,
        _ct(weight_packed=("u8", (2, 4, 16)), weight_scale=("f8e4m3", (2, 4, 2))),
        {},
        "SHAPE",
        "expected 2 dimensions, found 3",
    ),
    (NVFP4_CT, _ct(weight_global_scale=("f32", (1, 1))), {}, "SHAPE", "found (1, 1)"),
    (NVFP4_CT, _ct(weight_scale=("f8e4m3", (2, 4))), {}, "SHAPE", "one scale per 16 columns"),
    (MXFP4_GPT_OSS, _mx(scales=("i32", (2, 3, 4))), {}, "TYPE", "expected u8, found i32"),
    (MXFP4_GPT_OSS, _mx(blocks=("u8", (2, 3, 4, 8))), {}, "SHAPE", "blocks of 16 bytes"),
    (MXFP4_GPT_OSS, _mx(blocks=("u8", (16,))), {}, "SHAPE", "found (16,)"),
    (
        MXFP4_GPT_OSS,
        _mx(scales=("u8", (2, 3))),
        {},
        "SHAPE",
        "one e8m0 byte per block of m.blocks: expected (2, 3, 4), found (2, 3)",
    ),
]


@pytest.mark.parametrize(("scheme", "facts", "config", "kind", "words"), ERRORS)
def test_plan_errors(
    scheme: Scheme, facts: dict[str, Facts], config: dict[str, Any], kind: str, words: str
) -> None:
    with pytest.raises(KilnError) as caught:
        scheme.plan("m.logical", facts, config)
    assert caught.value.kind == kind
    message = str(caught.value)
    assert message.startswith(f"{kind}: m.logical: ")
    assert words in message
    assert "expected " in message
    assert ", found " in message


def test_valid_plans() -> None:
    assert NVFP4_MODELOPT.plan("m", _modelopt(), {"group_size": 16}).shape == (4, 32)
    moe = _modelopt(weight=("u8", (2, 4, 8)), weight_scale=("f8e4m3", (2, 4, 1)))
    assert NVFP4_MODELOPT.plan("m", moe, {}).shape == (2, 4, 16)
    assert NVFP4_CT.plan("m", _ct(weight_global_scale=("f32", ())), {}).shape == (4, 32)
    assert MXFP4_GPT_OSS.plan("m", _mx(), {}).shape == (2, 3, 128)


def test_native_refuses_bad_calls() -> None:
    if not backend.COMPILED:
        return
    from kiln_np._kernels import native

    packed, codes, table = np.zeros(16, np.uint8), np.zeros(2, np.uint8), np.ones(256, np.float32)
    out = np.empty(16, np.float32)
    with pytest.raises(ValueError, match="bad block size 8"):
        native.fp4_scaled(0, packed, codes, table, out, 8, 1.0, 1, 0, 1)
    with pytest.raises(ValueError, match="kind must be"):
        native.fp4_scaled(3, packed, codes, table, out, 16, 1.0, 1, 0, 1)
    with pytest.raises(ValueError, match="out holds 64 bytes, the range needs 128"):
        native.fp4_scaled(0, packed, codes, table, out, 16, 1.0, 1, 0, 2)
    with pytest.raises(ValueError, match="table holds 512 bytes, the range needs 1024"):
        native.fp4_scaled(0, packed, codes, table[:128], out, 16, 1.0, 1, 0, 1)
    packed[:] = 0x88  # -0.0, -0.0: kept, or +0.0 for ModelOpt's table
    native.fp4_scaled(0, packed, codes, table, out, 16, 1.0, 1, 0, 1)
    assert np.signbit(out).all()
    native.fp4_scaled(0, packed, codes, table, out, 16, 1.0, 0, 0, 1)
    assert not np.signbit(out).any()


# --- end to end: the logical view ----------------------------------------------------------


@pytest.mark.parametrize("config", [None, False])
def test_logical_view(case: tuple[Scheme, Checkpoint], config: bool | None) -> None:
    """``open_weights(model).logical()`` (config.json beside it, or names and types
    alone) gives each group as one tensor whose dequantize is the reference's."""
    scheme, ckpt = case
    expected = kiln_np.open_weights(ckpt.dir / "expected.safetensors")
    with kiln_np.open_weights(ckpt.dir / "model.safetensors") as weights:
        view = weights.logical(config)
        groups = ckpt.groups(scheme)
        for logical, roles in groups.items():
            tensor = view[logical]
            assert isinstance(tensor, kiln_np.LogicalTensor)
            assert tensor.shape == expected[f"{logical}@float32"].shape
            for dtype in DTYPES:
                _same(tensor.dequantize(dtype), expected[f"{logical}@{dtype}"].numpy())
            assert not (set(roles.values()) - {logical}) & set(view.keys())
        passing = set(view.keys()) - set(groups)
        assert passing == set(weights.keys()) - {n for r in groups.values() for n in r.values()}
