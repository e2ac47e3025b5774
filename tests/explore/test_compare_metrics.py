"""kiln_np.compare's error figures (issue 37): RMSE, relative RMSE, SNR, cosine, the
maxima with their places, saturation of MX and NVFP4 targets, the aggregates per layer
and per role, sorting, and the edge cases; every figure within 1e-12 of a plain numpy
float64 computation on the test checkpoints, with the compiled kernels and the numpy
ones, read in small chunks and large."""

from __future__ import annotations

import json
import math
import sys
import tracemalloc
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np._explore import chunks
from kiln_np._explore.comparison import Comparison, TensorComparison
from kiln_np._kernels import backend as _backend
from kiln_np._kernels import pool as _pool

BF16 = ml_dtypes.bfloat16
E2M1 = ml_dtypes.float4_e2m1fn
TOLERANCE = 1e-12
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "schemes" / "fp4"
compare_module = sys.modules["kiln_np._explore.comparison"]


@pytest.fixture(params=["compiled", "numpy", "small chunks"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs with the compiled kernels, the numpy ones, and the compiled ones
    over runs cut short (every run boundary inside a tensor, both sides misaligned)."""
    if request.param != "numpy" and not _backend.BUILT:
        pytest.skip("the compiled kernels are not built")
    monkeypatch.setattr(_backend, "COMPILED", request.param != "numpy")
    if request.param == "small chunks":
        monkeypatch.setattr(compare_module, "KERNEL_CHUNK", 1000)
        monkeypatch.setattr(compare_module, "VALUE_CHUNK", 333)
        monkeypatch.setattr(chunks, "COUNT_CHUNK", 700)  # GGML blocks dequantized in short runs
    name: str = request.param
    return name


def _llama(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Float32 tensors of a small llama-like model with two experts per layer."""
    tensors = {"model.embed_tokens.weight": rng.standard_normal((32, 64))}
    for layer in range(3):
        base = f"model.layers.{layer}"
        tensors[f"{base}.self_attn.q_proj.weight"] = rng.standard_normal((64, 64)) * 0.05
        tensors[f"{base}.self_attn.k_proj.weight"] = rng.standard_normal((32, 64)) * 0.05
        for expert in range(2):
            tensors[f"{base}.mlp.experts.{expert}.down_proj.weight"] = rng.standard_normal(
                (64, 128)
            ) * (0.02 + 0.01 * layer)
        tensors[f"{base}.input_layernorm.weight"] = 1 + rng.standard_normal(64) * 0.01
    tensors["model.norm.weight"] = np.ones(64)
    return {name: x.astype(np.float32) for name, x in tensors.items()}


def _values(t: kiln_np.WeightTensor) -> np.ndarray:
    """A tensor's values as float64, as plain numpy reads them."""
    with np.errstate(invalid="ignore"):
        values: np.ndarray = np.asarray(t.numpy()).astype(np.float64)
    return values


def _figures(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The four figures of y against x in plain numpy float64, over the finite places."""
    finite = np.isfinite(x) & np.isfinite(y)
    x, y = x[finite], y[finite]
    aa, bb, ab, dd = np.sum(x * x), np.sum(y * y), np.sum(x * y), np.sum((x - y) ** 2)
    return {
        "rmse": float(np.sqrt(dd / x.size)),
        "rel_rmse": float(np.sqrt(dd / aa)),
        "snr_db": float(10 * np.log10(aa / dd)),
        "cosine": float(ab / (np.sqrt(aa) * np.sqrt(bb))),
    }


def _close(got: float | None, want: float) -> None:
    assert got is not None
    assert abs(got - want) <= TOLERANCE * abs(want), (got, want)


def _check_tensor(t: TensorComparison, x: np.ndarray, y: np.ndarray) -> None:
    """One tensor's result against numpy's reading of both sides."""
    assert t.compared
    for key, want in _figures(x, y).items():
        _close(getattr(t, key), want)
    shape = x.shape
    x, y = x.reshape(-1), y.reshape(-1)
    differ = ~((x == y) | (np.isnan(x) & np.isnan(y)))
    places = np.flatnonzero(differ)
    assert t.mismatches == places.size
    finite = np.isfinite(x) & np.isfinite(y)
    assert t.nonfinite == x.size - np.count_nonzero(finite)
    with np.errstate(invalid="ignore", divide="ignore"):
        ad = np.where(finite, np.abs(x - y), np.inf)
        rel = np.where(finite, ad / np.maximum(np.abs(x), np.abs(y)), np.inf)
    for value, index, errors in (
        (t.max_abs, t.max_abs_index, ad),
        (t.max_rel, t.max_rel_index, rel),
    ):
        best = errors[places].max()
        at = places[np.flatnonzero(errors[places] == best)[0]]
        assert value == best
        assert index == tuple(int(i) for i in np.unravel_index(at, shape))


def _quantized(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A bf16 safetensors checkpoint and a GGUF of the same tensors quantized to ``kind``."""
    tensors = _llama(np.random.default_rng(37))
    a = tmp_path / "a.safetensors"
    kiln_np.save_weights(a, {n: x.astype(BF16) for n, x in tensors.items()}, format="safetensors")
    b = tmp_path / f"b-{kind}.gguf"
    kiln_np.save_weights(b, tensors, format="gguf", quantize=kind)
    return a, b


@pytest.mark.parametrize("kind", ["q8_0", "q4_k", "mxfp4", "nvfp4"])
def test_figures_agree_with_numpy_on_quantized_checkpoints(
    tmp_path: Path, reading: str, kind: str
) -> None:
    a, b = _quantized(tmp_path, kind)
    with kiln_np.open_weights(a) as wa, kiln_np.open_weights(b) as wb:
        r = kiln_np.compare(wa, wb)
        compared = [t for t in r.tensors if t.compared and t.mismatches]
        assert len(compared) >= 10
        for t in compared:
            _check_tensor(t, _values(wa[t.name]), _values(wb[t.name]))
        layers, roles = _pooled(r, wa, wb)
    for groups, want in ((r.by_layer(), layers), (r.by_role(), roles)):
        assert [g.name for g in groups] == list(want)
        for g in groups:
            for key, value in _figures(*want[g.name]).items():
                _close(getattr(g, key), value)


def _pooled(
    r: Comparison, wa: kiln_np.Weights, wb: kiln_np.Weights
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Each layer's and each role's values of both sides, concatenated (numpy's way)."""
    layers: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    roles: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for t in r.tensors:
        parts = t.name.split(".")
        if not t.compared or len(parts) < 4 or not parts[2].isdigit():
            continue
        role = ".".join("*" if p.isdigit() else p for p in parts[3:-1])
        x, y = _values(wa[t.name]).reshape(-1), _values(wb[t.name]).reshape(-1)
        for groups, key in (
            (layers, f"model.layers.{parts[2]}"),
            (roles, f"model.layers.*.{role}"),
        ):
            old = groups.get(key, (np.empty(0), np.empty(0)))
            groups[key] = (np.concatenate([old[0], x]), np.concatenate([old[1], y]))
    return layers, roles


def _unpacked_e2m1(packed: np.ndarray) -> np.ndarray:
    """Packed e2m1 codes (element 2k in the low nibble) as their float values."""
    flat = packed.reshape(-1)
    codes = np.stack([flat & 0xF, flat >> 4], axis=-1).reshape(-1).astype(np.uint8)
    values: np.ndarray = codes.view(E2M1).astype(np.float32)
    return values


@pytest.mark.parametrize("kind", ["mxfp4", "nvfp4"])
def test_saturation_of_gguf_mx_and_nvfp4_blocks(tmp_path: Path, kind: str) -> None:
    a, b = _quantized(tmp_path, kind)
    r = kiln_np.compare(a, b)
    with kiln_np.open_weights(b) as wb:
        for t in r.tensors:
            stored = wb[t.name]
            if stored.layout is None:  # the 1-D norms stay f32
                assert t.saturated_b is None
                continue
            values, _ = kiln_np.mx.from_ggml(stored.payload())
            codes = kiln_np.to_numpy(*values).astype(np.float32)
            assert t.saturated_b == np.count_nonzero(np.abs(codes) == 6.0)
            assert t.saturated_a is None
    total = sum(t.saturated_b or 0 for t in r.tensors)
    assert total > 0
    assert sum(g.saturated or 0 for g in r.by_layer()) == sum(
        t.saturated_b or 0 for t in r.tensors if t.name.startswith("model.layers.")
    )


def test_saturation_is_none_for_other_ggml_blocks(tmp_path: Path) -> None:
    a, b = _quantized(tmp_path, "q4_0")
    r = kiln_np.compare(a, b)
    assert all(t.saturated_a is None and t.saturated_b is None for t in r.tensors)
    assert all(g.saturated is None for g in r.by_layer())
    assert "saturated" not in r.text().splitlines()[0]


@pytest.mark.parametrize(
    ("scheme", "codes"),
    [("nvfp4-modelopt", "weight"), ("nvfp4-ct", "weight_packed"), ("mxfp4-gpt-oss", "blocks")],
)
def test_scheme_fixtures_against_an_original(
    tmp_path: Path, reading: str, scheme: str, codes: str
) -> None:
    """A stands for the original (the reference values, perturbed), B is the producer's
    quantized checkpoint: the figures against numpy, and B's saturation against its
    codes decoded by ml_dtypes."""
    model = FIXTURES / scheme / "model.safetensors"
    rng = np.random.default_rng(1)
    with kiln_np.open_weights(FIXTURES / scheme / "expected.safetensors") as expected:
        original = {
            name.split("@")[0]: (t.numpy() * (1 + 0.05 * rng.standard_normal(t.shape))).astype(
                np.float32
            )
            for name, t in expected.items()
            if name.endswith("@float32")
        }
    a = tmp_path / "original.safetensors"
    kiln_np.save_weights(a, original, format="safetensors")
    with kiln_np.open_weights(a) as wa, kiln_np.open_weights(model) as stored:
        wb = stored.logical()
        r = kiln_np.compare(wa, wb)
        assert {t.name for t in r.tensors} == set(original)
        for t in r.tensors:
            logical = wb[t.name]
            assert isinstance(logical, kiln_np.LogicalTensor)
            _check_tensor(t, _values(wa[t.name]), _values(logical))
            values = _unpacked_e2m1(logical.parts[codes].numpy())
            assert t.saturated_b == np.count_nonzero(np.abs(values) == 6.0)
            assert t.saturated_a is None
            assert t.type_b == scheme


def test_identical_values_have_snr_inf_and_cosine_1(tmp_path: Path, reading: str) -> None:
    x = np.random.default_rng(3).standard_normal((4, 300)).astype(BF16)
    zeros = np.zeros(7, BF16)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    kiln_np.save_weights(a, {"x": x, "z": zeros}, format="safetensors")
    kiln_np.save_weights(b, {"x": x.astype(np.float32), "z": zeros.astype(np.float32)},
                         format="safetensors")  # fmt: skip
    r = kiln_np.compare(a, b)
    assert r.equal
    for t in r.tensors:  # the values were read (other types), every figure defined
        assert (t.compared, t.mismatches) == (True, 0)
        assert (t.rmse, t.rel_rmse, t.snr_db, t.cosine) == (0.0, 0.0, math.inf, 1.0)
        assert (t.max_abs, t.max_abs_index, t.max_rel, t.max_rel_index) == (None,) * 4
    same = kiln_np.compare(a, a).tensors[0]
    assert (same.same_bytes, same.rmse, same.sums) == (True, None, None)


def test_a_side_all_zero(tmp_path: Path, reading: str) -> None:
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    zero, ones = np.zeros((3, 5), np.float32), np.ones((3, 5), np.float32)
    kiln_np.save_weights(a, {"a0": zero, "b0": ones}, format="safetensors")
    kiln_np.save_weights(b, {"a0": ones, "b0": zero}, format="safetensors")
    r = kiln_np.compare(a, b)
    a_zero, b_zero = r.tensors
    assert (a_zero.rmse, a_zero.rel_rmse, a_zero.snr_db) == (1.0, math.inf, -math.inf)
    assert math.isnan(a_zero.cosine or 0.0)
    assert (b_zero.rmse, b_zero.rel_rmse, b_zero.snr_db) == (1.0, 1.0, 0.0)
    assert math.isnan(b_zero.cosine or 0.0)
    assert (a_zero.max_rel, a_zero.max_rel_index) == (1.0, (0, 0))
    record = json.loads(json.dumps(r.to_json(), allow_nan=False))
    first = record["tensors"][0]
    assert (first["rel_rmse"], first["snr_db"], first["cosine"]) == ("inf", "-inf", "nan")


def test_nan_and_inf_places_are_left_out_of_the_figures(tmp_path: Path, reading: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 40)).astype(np.float32)
    y = (x + rng.standard_normal(x.shape) * 0.01).astype(np.float32)
    x[0, 3] = y[0, 3] = np.nan  # equal, left out
    x[1, 4] = y[1, 4] = np.inf  # equal, left out
    x[2, 5], y[2, 5] = 1.0, np.nan  # differs, left out: the maxima are inf there
    x[3, 6], y[3, 6] = -np.inf, 1e30
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    kiln_np.save_weights(a, {"x": x}, format="safetensors")
    kiln_np.save_weights(b, {"x": y}, format="safetensors")
    (t,) = kiln_np.compare(a, b).tensors
    assert t.nonfinite == 4
    assert (t.max_abs, t.max_abs_index, t.max_rel, t.max_rel_index) == (
        math.inf, (2, 5), math.inf, (2, 5)
    )  # fmt: skip
    _check_tensor(t, x.astype(np.float64), y.astype(np.float64))
    assert t.sums is not None
    assert t.sums.counted == x.size - 4
    assert "4 NaN/inf left out" in kiln_np.compare(a, b).text()
    nothing = tmp_path / "nan.safetensors"
    kiln_np.save_weights(nothing, {"x": np.full(x.shape, np.nan, np.float32)}, format="safetensors")
    (t,) = kiln_np.compare(a, nothing).tensors
    assert t.nonfinite == x.size
    assert all(math.isnan(v or 0.0) for v in (t.rmse, t.rel_rmse, t.snr_db, t.cosine))


def test_integers_and_float64_take_numpys_way(tmp_path: Path, reading: str) -> None:
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    i = np.arange(-500, 500, dtype=np.int32).reshape(10, 100)
    f = np.linspace(-3, 3, 1000).reshape(10, 100)
    kiln_np.save_weights(a, {"i": i, "f": f}, format="safetensors")
    kiln_np.save_weights(b, {"i": i * 2, "f": f + 1e-9 * f**3}, format="safetensors")
    r = kiln_np.compare(a, b)
    for t in r.tensors:
        x = i if t.name == "i" else f
        y = i * 2 if t.name == "i" else f + 1e-9 * f**3
        _check_tensor(t, x.astype(np.float64), y.astype(np.float64))


def test_sorted_worst_first(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    x = {f"h.{k}.w": rng.standard_normal(100).astype(np.float32) for k in range(4)}
    noise = [0.1, 0.001, 0.5, 0.01]
    y = {n: v + noise[k] * rng.standard_normal(100).astype(np.float32) for k, (n, v) in
         enumerate(x.items())}  # fmt: skip
    x["h.4.w"] = np.zeros(100, np.float32)  # cosine NaN: first
    y["h.4.w"] = np.ones(100, np.float32)
    x["z"] = y["z"] = np.ones(3, np.float32)  # same bytes: no figures, last
    kiln_np.save_weights(a, x, format="safetensors")
    kiln_np.save_weights(b, y, format="safetensors")
    r = kiln_np.compare(a, b)
    assert r.sort is None
    by_snr = r.sorted("snr_db")
    assert [t.name for t in by_snr.tensors] == ["h.4.w", "h.2.w", "h.0.w", "h.3.w", "h.1.w", "z"]
    assert [t.name for t in r.sorted("rmse").tensors][:5] == [
        "h.4.w", "h.2.w", "h.0.w", "h.3.w", "h.1.w"
    ]  # fmt: skip
    assert next(t.name for t in r.sorted("cosine").tensors) == "h.4.w"
    assert [g.name for g in by_snr.by_layer()] == ["h.4", "h.2", "h.0", "h.3", "h.1"]
    assert [g.name for g in r.by_layer()] == ["h.0", "h.1", "h.2", "h.3", "h.4"]
    assert by_snr.to_json()["sort"] == "snr_db"
    text = by_snr.text().splitlines()
    assert text[1].startswith("h.4.w")
    assert text[2].startswith("h.2.w")
    with pytest.raises(kiln_np.KilnError, match="sort: expected one of rmse, rel_rmse") as e:
        r.sorted("loss")
    assert e.value.kind == "TYPE"


def test_text_shows_the_figures_and_the_aggregates(tmp_path: Path) -> None:
    a, b = _quantized(tmp_path, "q8_0")
    text = kiln_np.compare(a, b).text()
    lines = text.splitlines()
    assert lines[0].split()[:12] == [
        "name", "status", "rmse", "rel", "rmse", "SNR", "dB", "cosine", "max", "abs", "(at)", "max"
    ]  # fmt: skip
    (q,) = [line for line in lines if line.startswith("model.layers.0.self_attn.q_proj.weight")]
    assert "DIFFERENT" in q
    assert "bf16 vs ggml.q8_0" in q
    layer = lines.index(next(line for line in lines if line.startswith("layer ")))
    assert lines[layer + 1].split()[:2] == ["model.layers.0", "5"]  # q, k, 2 experts, norm
    role = lines.index(next(line for line in lines if line.startswith("role ")))
    assert [line.split()[0] for line in lines[role + 1 : role + 5]] == [
        "model.layers.*.self_attn.q_proj",
        "model.layers.*.self_attn.k_proj",
        "model.layers.*.mlp.experts.*.down_proj",
        "model.layers.*.input_layernorm",
    ]
    assert lines[role + 3].split()[1] == "6"  # two experts in each of three layers
    assert lines[-1].startswith("different: ")


def test_json_records_are_strict_and_complete(tmp_path: Path) -> None:
    a, b = _quantized(tmp_path, "mxfp4")
    record = json.loads(json.dumps(kiln_np.compare(a, b).to_json(), allow_nan=False))
    (q,) = [t for t in record["tensors"] if t["name"] == "model.layers.1.self_attn.q_proj.weight"]
    assert q["saturated_b"] > 0
    assert q["saturated_a"] is None
    assert len(q["max_abs_index"]) == 2
    assert "sums" not in q
    assert [g["name"] for g in record["by_layer"]] == [f"model.layers.{k}" for k in range(3)]
    assert record["by_role"][0]["role"] == "self_attn.q_proj"
    assert record["by_role"][0]["layer"] is None


def test_memory_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled kernel allocates nothing per element; the numpy one a few float64
    copies of a chunk (of 256 Ki elements by default: made smaller here, so that the
    bound is far below one side's 12 MiB)."""
    monkeypatch.setattr(_pool, "CHUNK_LANES", 1 << 14)
    rng = np.random.default_rng(4)
    x = rng.standard_normal(6 << 20).astype(BF16)  # 12 MiB a side
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    kiln_np.save_weights(a, {"x": x}, format="safetensors")
    kiln_np.save_weights(b, {"x": (x.view(np.uint16) ^ 1).view(BF16)}, format="safetensors")
    kiln_np.compare(a, b)
    tracemalloc.start()
    try:
        r = kiln_np.compare(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.tensors[0].mismatches == x.size
    assert peak < 4 << 20
