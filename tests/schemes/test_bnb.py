"""bitsandbytes 4-bit (bnb-nf4, bnb-fp4): decode against bitsandbytes' own output, every plan rule.

The fixtures (tests/fixtures/schemes/bnb/, made by make_bnb.py with bitsandbytes
0.50.2) hold the parts as bitsandbytes writes them and ``expected.safetensors``,
its ``dequantize_4bit`` output per dtype.  Bits are compared exactly, except that
a NaN is only required to be a NaN where the reference's kernels disagree about
NaN bits (a rounding to 16 bits: see make_bnb.py); float32 from a float32 quant
state keeps every NaN payload, so there the bits are compared too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError
from kiln_np._core.table import dtype_info
from kiln_np._kernels import backend, pool
from kiln_np._kernels.bnb import decode_4bit
from kiln_np._schemes.bnb import BNB_FP4, BNB_NF4, FP4, NF4
from kiln_np._schemes.scheme import Facts, Plan, Scheme
from kiln_np._schemes.table import SCHEMES, scheme_named

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "schemes" / "bnb"
CASES = ("nf4", "nf4_dq", "fp4", "fp4_dq")
DTYPES = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
}
Q = "model.layers.0.self_attn.q_proj"


def _group(case: str, base: str) -> tuple[Scheme, dict[str, Facts], dict[str, np.ndarray]]:
    """The scheme whose key part names ``base``'s quant state, its facts and arrays."""
    weights = kiln_np.open_weights(FIXTURES / case / "model.safetensors")
    for scheme in SCHEMES:
        key = weights.get(base + scheme.parts[0].suffix)
        complete = all(p.optional or base + p.suffix in weights for p in scheme.parts)
        if complete and key is not None and dtype_info(key.code).name in scheme.parts[0].types:
            facts, arrays = {}, {}
            for part in scheme.parts:
                if base + part.suffix in weights:
                    t = weights[base + part.suffix]
                    facts[part.role] = Facts(t.name, dtype_info(t.code).name, t.shape, t.numpy)
                    arrays[part.role] = t.numpy()
            return scheme, facts, arrays
    raise AssertionError(f"no scheme for {base}")


def _tensors() -> list[tuple[str, str]]:
    out = []
    for case in CASES:
        names = kiln_np.open_weights(FIXTURES / case / "expected.safetensors")
        out += sorted({(case, n.split("@")[0].removesuffix(".weight")) for n in names})
    return out


TENSORS = _tensors()


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


def _same(got: np.ndarray, expected: np.ndarray, *, nan_bits: bool) -> None:
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    keep = np.ones_like(nan) if nan_bits else ~nan
    np.testing.assert_array_equal(_bits(got)[keep], _bits(expected)[keep])


def _decode(scheme: Scheme, plan: Plan, arrays: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    return scheme.decode(plan, arrays, 0, plan.shape[0], DTYPES[dtype])


def test_table_rows() -> None:
    names = [s.name for s in SCHEMES]
    assert names.index("bnb-fp4") == names.index("bnb-nf4") + 1
    assert scheme_named("bnb-fp4") is BNB_FP4
    assert BNB_NF4.parts[0].suffix == ".weight.quant_state.bitsandbytes__nf4"
    assert [p.role for p in BNB_NF4.parts if p.optional] == ["nested_absmax", "nested_quant_map"]
    assert BNB_NF4.methods == frozenset({"bitsandbytes"})


def test_tables_are_bitsandbytes() -> None:
    # get_4bit_type: NF4 from the QLoRA quantiles, FP4 [0, 0.0625, 8, 12, 4, 6, 2, 3] / 12
    assert NF4.view(np.uint32)[[0, 7, 15]].tolist() == [0xBF800000, 0, 0x3F800000]
    assert NF4[1].item() == pytest.approx(-0.6961928009986877, abs=0)
    assert FP4.view(np.uint32).tolist()[:8] == [
        0x00000000,
        0x3BAAAAAB,
        0x3F2AAAAB,
        0x3F800000,
        0x3EAAAAAB,
        0x3F000000,
        0x3E2AAAAB,
        0x3E800000,
    ]
    assert FP4.view(np.uint32)[8] == 0  # +0.0, not -0.0
    np.testing.assert_array_equal(FP4[9:], -FP4[1:8])


@pytest.mark.parametrize(
    ("config", "nf4", "fp4"),
    [
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
            True,
            False,
        ),
        (
            {"quant_method": "bitsandbytes", "_load_in_4bit": True, "bnb_4bit_quant_type": "fp4"},
            False,
            True,
        ),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
            False,
            True,
        ),  # transformers' default
        (
            {"quant_method": "bitsandbytes", "load_in_8bit": True, "load_in_4bit": False},
            False,
            False,
        ),
        ({"quant_method": "bitsandbytes", "load_in_4bit": "yes"}, False, False),
    ],
)
def test_configured(config: dict[str, Any], nf4: bool, fp4: bool) -> None:
    assert BNB_NF4.configured(config) is nf4
    assert BNB_FP4.configured(config) is fp4


def test_fixture_configs_are_configured() -> None:
    for case in CASES:
        config = json.loads((FIXTURES / case / "config.json").read_text())["quantization_config"]
        scheme = BNB_NF4 if case.startswith("nf4") else BNB_FP4
        assert config["quant_method"] in scheme.methods
        assert scheme.configured(config)
        assert (BNB_FP4 if scheme is BNB_NF4 else BNB_NF4).configured(config) is False


@pytest.mark.parametrize(
    ("case", "base", "shape", "native", "params"),
    [
        ("nf4", Q, (16, 128), "bfloat16", {"kind": "nf4", "blocksize": 64, "count": 2048}),
        ("nf4", "model.layers.0.mlp.down_proj", (5, 37), "bfloat16", {"blocksize": 64}),
        ("nf4_dq", Q, (24, 352), "float16", {"blocksize": 32, "nested_blocksize": 256}),
        ("fp4", Q, (8, 256), "float32", {"kind": "fp4", "blocksize": 128}),
        ("fp4_dq", Q, (3, 1000), "bfloat16", {"blocksize": 256, "count": 3000}),
    ],
)
def test_plan(
    case: str, base: str, shape: tuple[int, ...], native: str, params: dict[str, Any]
) -> None:
    scheme, facts, _ = _group(case, base)
    plan = scheme.plan(base + ".weight", facts, {})
    assert plan.shape == shape
    assert plan.native == native
    assert params.items() <= dict(plan.params).items()
    assert ("offset" in plan.params) is case.endswith("_dq")


def test_nested_offset_is_the_json_number_in_float32() -> None:
    scheme, facts, _ = _group("nf4_dq", Q)
    plan = scheme.plan(Q + ".weight", facts, {})
    text = bytes(facts["quant_state"].read()).decode()
    offset = plan.params["offset"]
    assert offset.dtype == np.float32
    assert offset == np.float32(json.loads(text)["nested_offset"])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(
    ("case", "base"), TENSORS, ids=[f"{c}-{b.split('.')[-1]}" for c, b in TENSORS]
)
def test_decode_is_bitsandbytes(case: str, base: str, dtype: str) -> None:
    scheme, facts, arrays = _group(case, base)
    plan = scheme.plan(base + ".weight", facts, {})
    expected = kiln_np.open_weights(FIXTURES / case / "expected.safetensors")
    got = _decode(scheme, plan, arrays, dtype)
    _same(
        got, expected[f"{base}.weight@{dtype}"].numpy(), nan_bits=plan.native == dtype == "float32"
    )


def test_fixtures_are_hostile() -> None:
    """What the fixtures hold, so the comparison above covers it."""
    expected = kiln_np.open_weights(FIXTURES / "fp4" / "expected.safetensors")
    f32 = expected[Q + ".weight@float32"].numpy()
    assert {0x7FC00000, 0x7FE00001}.issubset(set(f32.view(np.uint32).ravel().tolist()))
    assert np.isinf(f32).any()
    assert (np.signbit(f32) & (f32 == 0)).any()
    assert ((f32 != 0) & (np.abs(f32) < np.finfo(np.float32).tiny)).any()  # subnormal
    assert np.isinf(expected[Q + ".weight@float16"].numpy()).sum() > np.isinf(f32).sum()
    bf16 = kiln_np.open_weights(FIXTURES / "nf4" / "expected.safetensors")[Q + ".weight@bfloat16"]
    values = bf16.numpy().astype(np.float32)
    assert ((values != 0) & (np.abs(values) < 2.0**-126)).any()  # bfloat16 subnormals
    _, _, arrays = _group("nf4", Q)
    assert set(arrays["weight"].ravel().tolist()) == set(range(256))  # every code, both nibbles


@pytest.mark.parametrize(
    ("case", "base"), TENSORS, ids=[f"{c}-{b.split('.')[-1]}" for c, b in TENSORS]
)
def test_row_chunks_are_the_whole(case: str, base: str) -> None:
    scheme, facts, arrays = _group(case, base)
    plan = scheme.plan(base + ".weight", facts, {})
    rows = plan.shape[0]
    for dtype in ("float32", "bfloat16"):
        whole = _decode(scheme, plan, arrays, dtype)
        for step in (1, 2, 3, 5):
            parts = [
                scheme.decode(plan, arrays, r, min(r + step, rows), DTYPES[dtype])
                for r in range(0, rows, step)
            ]
            np.testing.assert_array_equal(_bits(np.concatenate(parts)), _bits(whole))
        middle = scheme.decode(plan, arrays, 1, rows - 1, DTYPES[dtype])
        np.testing.assert_array_equal(_bits(middle), _bits(whole[1:-1]))
        assert scheme.decode(plan, arrays, 2, 2, DTYPES[dtype]).shape == (0, *plan.shape[1:])


def test_high_nibble_first_and_partial_block() -> None:
    """35 elements in blocks of 32 (absmax 1, then 2 for the last three): the last
    two bytes 0xf0 0x7a are codes 15, 0, 7 (and a padding nibble)."""
    weight = np.zeros((18, 1), np.uint8)
    weight[16:, 0] = [0xF0, 0x7A]
    facts, arrays = _synthetic(
        {"shape": [35]}, weight=weight, absmax=np.array([1.0, 2.0], np.float32)
    )
    plan = BNB_NF4.plan("w.weight", facts, {})
    got = BNB_NF4.decode(plan, arrays, 0, 35, DTYPES["float32"])
    assert got.tolist() == [-1.0] * 32 + [2.0, -2.0, 0.0]
    assert BNB_NF4.decode(plan, arrays, 33, 35, DTYPES["float32"]).tolist() == [-2.0, 0.0]


def test_double_quant_absmax_arithmetic() -> None:
    """absmax = nested_quant_map[code] * nested_absmax + offset, each in float32."""
    code = np.linspace(-1, 1, 256, dtype=np.float32)
    facts, arrays = _synthetic(
        {"shape": [4, 32], "nested_blocksize": 3, "nested_dtype": "float32", "nested_offset": 0.1},
        absmax=np.array([255, 0, 128, 255], np.uint8),
        nested_absmax=np.array([3.0, 0.5], np.float32),
        nested_quant_map=code,
        weight=np.full((64, 1), 0xFF, np.uint8),  # every element is NF4's 1.0
    )
    plan = BNB_NF4.plan("w.weight", facts, {})
    got = BNB_NF4.decode(plan, arrays, 0, 4, DTYPES["float32"])
    nested = np.array([3.0, 3.0, 3.0, 0.5], np.float32)
    want = code[[255, 0, 128, 255]] * nested + np.float32(0.1)
    np.testing.assert_array_equal(_bits(got[:, 0].copy()), _bits(want))
    assert (got == got[:, :1]).all()


# -- the plan rules ---------------------------------------------------------------

_STATE = {"quant_type": "nf4", "blocksize": 32, "dtype": "float32", "shape": [2, 32]}


def _facts(name: str, array: np.ndarray) -> Facts:
    kind = {"uint8": "u8", "float32": "f32", "int8": "i8", "float16": "f16"}[array.dtype.name]
    return Facts(name, kind, array.shape, lambda: array)


def _synthetic(
    state: dict[str, Any] | None = None,
    *,
    raw: bytes | None = None,
    kind: str = "nf4",
    drop: tuple[str, ...] = (),
    **arrays: np.ndarray,
) -> tuple[dict[str, Facts], dict[str, np.ndarray]]:
    """A valid bnb-``kind`` group of ``_STATE`` updated by ``state`` (a key set to
    None is removed), its parts replaced by ``arrays``, those in ``drop`` absent;
    ``raw`` replaces the JSON bytes."""
    full = {**_STATE, "quant_type": kind, **(state or {})}
    full = {k: v for k, v in full.items() if v is not None}
    shape = full.get("shape")
    valid = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
    count = math.prod(shape) if isinstance(shape, list) and valid else 64  # any parts if bad
    blocks = -(-count // 32)
    nested = "nested_offset" in full
    parts: dict[str, np.ndarray] = {
        "quant_state": np.frombuffer(
            raw if raw is not None else json.dumps(full).encode(), np.uint8
        ),
        "weight": np.zeros(((count + 1) // 2, 1), np.uint8),
        "absmax": np.ones(blocks, np.uint8 if nested else np.float32),
        "quant_map": (NF4 if kind == "nf4" else FP4).copy(),
    }
    if nested:
        parts["nested_absmax"] = np.ones(-(-blocks // 256), np.float32)
        parts["nested_quant_map"] = np.linspace(-1, 1, 256, dtype=np.float32)
    parts.update(arrays)
    for role in drop:
        del parts[role]
    suffixes = {p.role: p.suffix for p in BNB_NF4.parts}
    facts = {role: _facts("w" + suffixes[role], a) for role, a in parts.items()}
    return facts, parts


_NESTED = {"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.5}

RULES: list[tuple[str, Callable[[], Any], str, str]] = [
    # (id, the group, kind, what the message says)
    (
        "state-2d",
        lambda: _synthetic(quant_state=np.zeros((2, 2), np.uint8)),
        "SHAPE",
        "1 to 4096 bytes of JSON",
    ),
    (
        "state-long",
        lambda: _synthetic(quant_state=np.zeros(4097, np.uint8)),
        "SHAPE",
        "found shape (4097,)",
    ),
    (
        "state-empty",
        lambda: _synthetic(quant_state=np.zeros(0, np.uint8)),
        "SHAPE",
        "found shape (0,)",
    ),
    ("not-utf8", lambda: _synthetic(raw=b'{"a": "\xff"}'), "TYPE", "expected valid JSON"),
    (
        "not-json",
        lambda: _synthetic(raw=b'{"quant_type": nf4}'),
        "TYPE",
        "expected valid JSON, found: Expecting value",
    ),
    (
        "duplicate-key",
        lambda: _synthetic(raw=b'{"blocksize": 64, "blocksize": 64}'),
        "TYPE",
        "'blocksize' twice",
    ),
    ("not-object", lambda: _synthetic(raw=b"[1, 2]"), "TYPE", "as a JSON object, found list"),
    ("missing-key", lambda: _synthetic({"blocksize": None}), "TYPE", "missing ['blocksize']"),
    ("unknown-key", lambda: _synthetic({"absmax_scale": 1}), "TYPE", "unexpected ['absmax_scale']"),
    (
        "nested-keys-no-parts",
        lambda: _synthetic(_NESTED, drop=("nested_absmax", "nested_quant_map")),
        "TYPE",
        "unexpected ['nested_blocksize', 'nested_dtype', 'nested_offset']",
    ),
    (
        "nested-parts-no-keys",
        lambda: _synthetic(
            nested_absmax=np.ones(1, np.float32), nested_quant_map=np.ones(256, np.float32)
        ),
        "TYPE",
        "missing ['nested_blocksize'",
    ),
    (
        "one-nested-part",
        lambda: _synthetic(_NESTED, drop=("nested_quant_map",)),
        "TYPE",
        "found nested_absmax without nested_quant_map",
    ),
    (
        "other-nested-part",
        lambda: _synthetic(_NESTED, drop=("nested_absmax",)),
        "TYPE",
        "found nested_quant_map without nested_absmax",
    ),
    (
        "unknown-quant-type",
        lambda: _synthetic({"quant_type": "int4"}),
        "TYPE",
        "expected quant_type 'nf4' or 'fp4', found 'int4'",
    ),
    ("quant-type-not-str", lambda: _synthetic({"quant_type": ["nf4"]}), "TYPE", "found ['nf4']"),
    (
        "quant-type-not-suffix",
        lambda: _synthetic({"quant_type": "fp4"}),
        "TYPE",
        "expected quant_type 'nf4' (the part is ...bitsandbytes__nf4), found 'fp4'",
    ),
    (
        "blocksize-float",
        lambda: _synthetic({"blocksize": 64.0}),
        "TYPE",
        "blocksize as an integer, found 64.0",
    ),
    (
        "blocksize-bool",
        lambda: _synthetic({"blocksize": True}),
        "TYPE",
        "blocksize as an integer, found True",
    ),
    (
        "blocksize-48",
        lambda: _synthetic({"blocksize": 48}),
        "SHAPE",
        "blocksize one of [32, 64, 128, 256, 512, 1024, 2048, 4096], found 48",
    ),
    (
        "dtype-float64",
        lambda: _synthetic({"dtype": "float64"}),
        "TYPE",
        "dtype one of ['float32', 'bfloat16', 'float16'], found 'float64'",
    ),
    (
        "dtype-torch",
        lambda: _synthetic({"dtype": "torch.float16"}),
        "TYPE",
        "found 'torch.float16'",
    ),
    (
        "shape-not-list",
        lambda: _synthetic({"shape": 64}),
        "SHAPE",
        "non-empty list of non-negative integers, found 64",
    ),
    ("shape-empty", lambda: _synthetic({"shape": []}), "SHAPE", "found []"),
    ("shape-negative", lambda: _synthetic({"shape": [2, -32]}), "SHAPE", "found [2, -32]"),
    ("shape-bool", lambda: _synthetic({"shape": [True, 64]}), "SHAPE", "found [True, 64]"),
    ("shape-rank", lambda: _synthetic({"shape": [1] * 65}), "SHAPE", "quant state shape: "),
    (
        "packed-short",
        lambda: _synthetic(weight=np.zeros((31, 1), np.uint8)),
        "LENGTH",
        "expected 'w.weight' of shape (32, 1): shape (2, 32) has 64 elements, two a byte; "
        "found (31, 1)",
    ),
    (
        "packed-transposed",
        lambda: _synthetic(weight=np.zeros((1, 32), np.uint8)),
        "LENGTH",
        "found (1, 32)",
    ),
    (
        "weight-type",
        lambda: _synthetic(weight=np.zeros((32, 1), np.int8)),
        "TYPE",
        "expected 'w.weight' of type u8, found i8",
    ),
    (
        "absmax-count",
        lambda: _synthetic(absmax=np.ones(3, np.float32)),
        "SHAPE",
        "expected 'w.weight.absmax' of shape (2,), found (3,)",
    ),
    (
        "absmax-type",
        lambda: _synthetic(absmax=np.ones(2, np.uint8)),
        "TYPE",
        "'w.weight.absmax' of type f32, found u8",
    ),
    (
        "nested-absmax-type",
        lambda: _synthetic(_NESTED, absmax=np.ones(2, np.float32)),
        "TYPE",
        "'w.weight.absmax' of type u8, found f32",
    ),
    (
        "quant-map-shape",
        lambda: _synthetic(quant_map=np.ones(15, np.float32)),
        "SHAPE",
        "'w.weight.quant_map' of shape (16,), found (15,)",
    ),
    (
        "quant-map-type",
        lambda: _synthetic(quant_map=np.ones(16, np.float16)),
        "TYPE",
        "of type f32, found f16",
    ),
    (
        "quant-map-values",
        lambda: _synthetic(quant_map=FP4.copy()),
        "TYPE",
        "bitsandbytes' nf4 table (its dequantize_4bit decodes with that table, not this "
        "part), found 0.0 for -1.0 at element 0",
    ),
    (
        "nested-blocksize-0",
        lambda: _synthetic({**_NESTED, "nested_blocksize": 0}),
        "SHAPE",
        "positive nested_blocksize of at most 2147483647 (a C int, as bitsandbytes' kernels "
        "take it), found 0",
    ),
    # issue 36: the quant state read by the package's one parser, every field in range
    (
        "deep-json",
        lambda: _synthetic(raw=b"[" * 2000 + b"]" * 2000),
        "TYPE",
        "expected JSON nested at most 127 levels, found 2000",
    ),
    (
        "deep-value",
        lambda: _synthetic(raw=b'{"quant_type": ' + b"[" * 1000 + b"]" * 1000 + b"}"),
        "TYPE",
        "nested at most 127 levels",
    ),
    (
        "nested-offset-huge",
        lambda: _synthetic({**_NESTED, "nested_offset": 10**400}),
        "TYPE",
        "nested_offset as a number, found an integer of 401 digits, past a float's range",
    ),
    (
        "nested-offset-negative-huge",
        lambda: _synthetic({**_NESTED, "nested_offset": -(10**309)}),
        "TYPE",
        "found an integer of 310 digits",
    ),
    (
        "nested-blocksize-huge",
        lambda: _synthetic({**_NESTED, "nested_blocksize": 2**70}),
        "SHAPE",
        f"nested_blocksize of at most {2**31 - 1} (a C int, as bitsandbytes' kernels take it), "
        f"found {2**70}",
    ),
    (
        "nested-blocksize-str",
        lambda: _synthetic({**_NESTED, "nested_blocksize": "256"}),
        "TYPE",
        "nested_blocksize as an integer, found '256'",
    ),
    (
        "nested-dtype",
        lambda: _synthetic({**_NESTED, "nested_dtype": "float16"}),
        "TYPE",
        "nested_dtype 'float32', found 'float16'",
    ),
    (
        "nested-offset-str",
        lambda: _synthetic({**_NESTED, "nested_offset": "0.5"}),
        "TYPE",
        "nested_offset as a number, found '0.5'",
    ),
    (
        "nested-offset-bool",
        lambda: _synthetic({**_NESTED, "nested_offset": False}),
        "TYPE",
        "found False",
    ),
    (
        "nested-absmax-count",
        lambda: _synthetic(_NESTED, nested_absmax=np.ones(2, np.float32)),
        "SHAPE",
        "'w.weight.nested_absmax' of shape (1,), found (2,)",
    ),
    (
        "nested-quant-map",
        lambda: _synthetic(_NESTED, nested_quant_map=np.ones(255, np.float32)),
        "SHAPE",
        "'w.weight.nested_quant_map' of shape (256,), found (255,)",
    ),
]


@pytest.mark.parametrize(
    ("make", "kind", "says"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_plan_rule(make: Callable[[], Any], kind: str, says: str) -> None:
    facts, _ = make()
    with pytest.raises(KilnError) as info:
        BNB_NF4.plan("model.layers.3.mlp.up_proj.weight", facts, {})
    assert info.value.kind == kind
    assert info.value.message.startswith("model.layers.3.mlp.up_proj.weight (bnb-nf4): ")
    assert says in info.value.message


def test_valid_synthetic_groups_plan() -> None:
    """The rules' base groups are valid, so each rule test fails for its own reason."""
    for state in ({}, _NESTED, {**_NESTED, "nested_offset": float("nan")}, {"shape": [0, 32]}):
        facts, _ = _synthetic(state)
        assert BNB_NF4.plan("w.weight", facts, {}).native == "float32"
    facts, _ = _synthetic(kind="fp4")
    assert BNB_FP4.plan("w.weight", facts, {}).shape == (2, 32)


def test_empty_weight_decodes() -> None:
    facts, arrays = _synthetic({"shape": [0, 32]})
    plan = BNB_NF4.plan("w.weight", facts, {})
    assert BNB_NF4.decode(plan, arrays, 0, 0, DTYPES["bfloat16"]).shape == (0, 32)


# -- the kernel: compiled and numpy, the same bits ----------------------------------

_SPECIAL = np.array(
    [0x7FC00000, 0xFFC00000, 0x7FA00001, 0xFFE00001, 0x7F800000, 0xFF800000, 0x7F7FFFFF,
     0x00000001, 0x80800000, 0x00000000, 0x80000000, 0x3F800000, 0x477FF000, 0x33800000,
     0x38800000, 0x387FFFFF],
    np.uint32,
).view(np.float32)  # fmt: skip


def _want(
    codes: np.ndarray, table: np.ndarray, scales: np.ndarray, size: int, dtype: str
) -> np.ndarray:
    """The kernel's definition, element by element in numpy (every element, from 0)."""
    nibbles = np.stack([codes >> 4, codes & 15], axis=1).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        product = table[nibbles] * scales[np.arange(nibbles.size) // size]
        out: np.ndarray = product.astype(DTYPES[dtype])
    if dtype != "float32":
        nan = np.isnan(product)
        quiet = 0x7FC0 if dtype == "bfloat16" else 0x7E00
        out.view(np.uint16)[nan] = ((product.view(np.uint32)[nan] >> 16) & 0x8000) | quiet
    return out


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_kernel_bits(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every code times hostile scales (NaN payloads, infinities, subnormals, the
    float16 and bfloat16 rounding edges), every start and end alignment, the
    ranges split over threads: compiled and numpy give the definition's bits."""
    rng = np.random.default_rng(5)
    # infinite, huge, subnormal and signed-zero table entries too; never a NaN (neither
    # table has one, and which NaN a NaN x NaN gives is the compiler's choice in C)
    table = np.concatenate([NF4[:8], _SPECIAL[4:12]])
    size = 32
    codes = rng.integers(0, 256, 40 * size // 2, dtype=np.uint8)
    codes[:256] = np.arange(256)
    scales = np.concatenate([_SPECIAL, rng.uniform(-3, 3, 40 - _SPECIAL.size).astype(np.float32)])
    want = _want(codes, table, scales, size, dtype)
    monkeypatch.setattr(pool, "COMPILED_THREAD_MIN_LANES", 8)
    monkeypatch.setattr(pool, "THREAD_MIN_LANES", 8)
    for compiled in (True, False) if backend.COMPILED else (False,):
        monkeypatch.setattr(backend, "COMPILED", compiled)
        for a, b in [(0, want.size), (1, want.size), (0, 33), (31, 65), (63, 64), (5, 5)]:
            got = decode_4bit(codes, table, scales, size, a, b, DTYPES[dtype])
            assert got.dtype == DTYPES[dtype]
            np.testing.assert_array_equal(
                _bits(got), _bits(want[a:b]), err_msg=f"{compiled} {a} {b}"
            )


# -- end to end: the logical view of each fixture checkpoint ----------------------


@pytest.mark.parametrize("config", [None, False], ids=["config.json", "names-alone"])
@pytest.mark.parametrize("case", CASES)
def test_logical_view(case: str, config: bool | None) -> None:
    expected = kiln_np.open_weights(FIXTURES / case / "expected.safetensors")
    logical_names = sorted({n.split("@")[0] for n in expected})
    with kiln_np.open_weights(FIXTURES / case / "model.safetensors") as plain:
        view = plain.logical(config)
        assert sorted(view) == sorted([*logical_names, "model.norm.weight"])
        norm = view["model.norm.weight"]
        assert not isinstance(norm, kiln_np.LogicalTensor)
        np.testing.assert_array_equal(
            _bits(norm.numpy()), _bits(plain["model.norm.weight"].numpy())
        )
        for name in logical_names:
            t = view[name]
            assert isinstance(t, kiln_np.LogicalTensor)
            assert t.scheme == ("bnb-nf4" if case.startswith("nf4") else "bnb-fp4")
            assert t.shape == expected[f"{name}@float32"].shape
            assert set(t.parts) >= {"weight", "absmax", "quant_map", "quant_state"}
            assert ("nested_absmax" in t.parts) is case.endswith("_dq")
            for dtype in DTYPES:
                _same(
                    t.dequantize(dtype),
                    expected[f"{name}@{dtype}"].numpy(),
                    nan_bits=t.dtype.name == dtype == "float32",
                )
            assert t.numpy().dtype == t.dtype
