"""kiln_np.describe(weights): statistics of every tensor, against numpy float64."""

from __future__ import annotations

import json
import math
import re
import sys
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import optional, run_main

import kiln_np
from kiln_np._explore.weight_stats import TensorStats, WeightStats
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import DECODERS
from kiln_np._quants.decoder import float_scales

if TYPE_CHECKING:
    import matplotlib
    import onnx
    from onnx import numpy_helper
else:
    matplotlib = optional("matplotlib")
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")

BF16 = ml_dtypes.bfloat16
stats_module = sys.modules["kiln_np._explore.weight_stats"]


def _tensors() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    w[3, 5], w[7, 1], w[9, 9], w[0, 0] = np.nan, np.inf, -np.inf, -0.0
    offset = (1e4 + 1e-3 * rng.standard_normal(5000)).astype(np.float32)
    h = rng.standard_normal((33, 65)).astype(BF16)
    h[0, 0] = np.nan
    return {
        "model.layers.0.self_attn.q_proj.weight": w,
        "model.layers.0.mlp.down_proj.weight": h,
        "model.layers.1.offset": offset,
        "half": rng.standard_normal(1001).astype(np.float16),
        "big": np.array([3.4e38, -3.4e38, 3.3e38, 1e-45], np.float32),
        "tiny": np.array([1e-45, 2e-45, -1e-45], np.float32),
        "f64": np.array([1e308, 1e308, -5.0, np.nan], np.float64),
        "i64": np.array([-(2**63), 2**63 - 1, 0], np.int64),
        "u8": np.arange(256, dtype=np.uint8),
        "i32": np.array([7, -3, 0, 0], np.int32),
        "mask": np.array([True, False, True]),
        "e4m3": np.array([448, -0.0, 1, np.nan], ml_dtypes.float8_e4m3fn),
        "e2m1": np.array([6.0, -0.5, 0, 1, 2, -6], ml_dtypes.float4_e2m1fn),
        "u4": np.array([15, 0, 3, 1], ml_dtypes.uint4),
        "empty": np.zeros((0, 4), np.float32),
        "all_nan": np.full(3, np.nan, np.float32),
    }


def _check(row: TensorStats, x: np.ndarray) -> None:
    """``row`` against numpy's float64 statistics of ``x``."""
    assert row.count == x.size, row.name
    if x.dtype.kind in "biu":
        exact = x.astype(object).reshape(-1)
        finite = np.asarray(exact)
        if finite.size:
            assert (row.min, row.max) == (min(exact), max(exact)), row.name
            assert isinstance(row.min, int)
        assert row.finite == x.size
        assert (row.nan, row.posinf, row.neginf) == (0, 0, 0)
        assert row.zeros == int(np.count_nonzero(x == 0))
        if finite.size:
            ref = np.asarray(x, np.float64)
            assert row.mean == pytest.approx(float(ref.mean()), rel=1e-12, abs=1e-300)
        return
    f = np.asarray(x, np.float64).reshape(-1)
    finite = f[np.isfinite(f)]
    assert row.nan == int(np.isnan(f).sum()), row.name
    assert row.posinf == int((f == np.inf).sum()), row.name
    assert row.neginf == int((f == -np.inf).sum()), row.name
    assert row.zeros == int((f == 0).sum()), row.name
    assert row.finite == finite.size, row.name
    if not finite.size:
        assert row.min is row.max is row.mean is row.std is row.absmax is None
        return
    assert (row.min, row.max) == (float(finite.min()), float(finite.max())), row.name
    assert row.absmax == float(np.abs(finite).max())
    assert row.mean is not None
    assert row.std is not None
    with np.errstate(over="ignore"):
        mean = float(np.mean(finite))
        scale = float(np.mean(np.abs(finite)))
        std = float(np.std(finite))
    if math.isfinite(mean):
        assert abs(row.mean - mean) <= 1e-12 * scale, (row.name, row.mean, mean)
    if math.isfinite(std):
        rms = math.sqrt(float(np.mean((finite / scale) ** 2))) * scale
        assert abs(row.std - std) <= 1e-12 * rms, (row.name, row.std, std)


def _save(path: Path, fmt: str, tensors: dict[str, Any], **kw: Any) -> Path:
    kiln_np.save_weights(path, tensors, format=fmt, **kw)
    return path


@pytest.mark.parametrize("fmt", ["safetensors", "sharded", "kiln", "gguf"])
def test_every_tensor_agrees_with_numpy_float64(tmp_path: Path, fmt: str) -> None:
    tensors = _tensors()
    if fmt == "gguf":  # GGUF stores the float types and the integers it has
        tensors = {k: v for k, v in tensors.items() if v.dtype.name in _GGUF_TYPES and v.size}
    elif fmt != "kiln":  # safetensors has no u4
        del tensors["u4"]
    if fmt == "sharded":
        path = _save(tmp_path / "sharded", "safetensors", tensors, max_shard_size=4096)
        assert len(list(path.glob("*.safetensors"))) > 1
    else:
        path = _save(tmp_path / f"w.{fmt}", fmt, tensors)
    with kiln_np.open_weights(path) as w:
        stats = kiln_np.describe(w)
        assert isinstance(stats, WeightStats)
        assert [r.name for r in stats] == list(w)
        for row in stats:
            _check(row, np.asarray(w[row.name]))
            assert row.type == w[row.name].format_dtype
            assert row.shape == w[row.name].shape
        assert stats.format == w.format


_GGUF_TYPES = {"float32", "bfloat16", "float16", "float64", "int64", "int32"}


def test_onnx_initializers(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    arrays: dict[str, np.ndarray] = {
        "w": rng.standard_normal((4, 9)).astype(np.float32),
        "i": np.arange(5, dtype=np.int8),
    }
    inits = [numpy_helper.from_array(a, name) for name, a in arrays.items()]
    graph = onnx.helper.make_graph([], "g", [], [], initializer=inits)
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    with kiln_np.open_weights(tmp_path / "m.onnx") as w:
        stats = kiln_np.describe(w)
    for row in stats:
        _check(row, arrays[row.name])


def test_gguf_quantized_values_and_scale_ranges(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 512)).astype(np.float32)
    tensors: dict[str, Any] = {
        "blk.0.attn_q.weight": kiln_np.gguf.quantize(x, "Q4_K"),
        "blk.0.ffn_down.weight": kiln_np.gguf.quantize(x, "Q8_0"),
        "blk.0.attn_norm.weight": np.ones(512, np.float32),
    }
    path = _save(tmp_path / "q.gguf", "gguf", tensors)
    with kiln_np.open_weights(path) as w:
        stats = kiln_np.describe(w)
        for row in stats:
            values = np.asarray(w[row.name])
            _check(row, values)
    q4 = stats.row("blk.0.attn_q.weight")
    assert q4.count == x.size
    assert q4.shape == (16, 512)
    assert set(q4.scales) == {"d", "dmin"}  # the float fields; describe(tensor) has the rest
    payload = tensors["blk.0.attn_q.weight"]
    blocks = np.frombuffer(payload.data, np.uint8).reshape(-1, 144)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float64).reshape(-1)
    assert q4.scales["d"] == (float(d.min()), float(d.max()))
    q8 = stats.row("blk.0.ffn_down.weight")
    d8 = np.frombuffer(tensors["blk.0.ffn_down.weight"].data, np.uint8).reshape(-1, 34)
    d8 = d8[:, :2].copy().view(np.float16).astype(np.float64)
    assert q8.scales == {"d": (float(d8.min()), float(d8.max()))}
    assert stats.row("blk.0.attn_norm.weight").scales == {}


def test_quantized_rounds_and_threads_merge_to_the_same_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.random.default_rng(9).standard_normal((64, 1024)).astype(np.float32)
    path = _save(tmp_path / "q.gguf", "gguf", {"w": kiln_np.gguf.quantize(x, "Q6_K")})
    with kiln_np.open_weights(path) as w:
        whole = kiln_np.describe(w)[0]
        monkeypatch.setattr(stats_module, "ROUND", 2048)
        monkeypatch.setattr(stats_module, "RUN", 512)
        seen: list[tuple[int, int]] = []
        split = kiln_np.describe(w, progress=lambda d, t: seen.append((d, t)))[0]
    assert (split.min, split.max, split.zeros, split.finite) == (
        whole.min,
        whole.max,
        whole.zeros,
        whole.finite,
    )
    assert split.mean == pytest.approx(whole.mean, rel=1e-13, abs=1e-15)
    assert split.std == pytest.approx(whole.std, rel=1e-13)
    assert split.scales == whole.scales
    assert len(seen) > 10
    assert seen[-1][0] == seen[-1][1] == w.byte_length
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_rounds_of_a_large_float_tensor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(100_003) * 3 + 1).astype(BF16)
    x[50_000] = -np.inf
    path = _save(tmp_path / "w.safetensors", "safetensors", {"x": x, "y": np.ones(3, BF16)})
    monkeypatch.setattr(stats_module, "ROUND", 4096)
    seen: list[int] = []
    with kiln_np.open_weights(path) as w:
        stats = kiln_np.describe(w, progress=lambda d, t: seen.append(d))
    _check(stats[0], x)
    assert len(seen) >= 25
    assert seen[-1] == 2 * (100_003 + 3)
    assert seen == sorted(seen)


def test_progress_can_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _save(tmp_path / "w.safetensors", "safetensors", {"x": np.ones(10_000, np.float32)})
    monkeypatch.setattr(stats_module, "ROUND", 1000)
    calls = []

    def stop(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with kiln_np.open_weights(path) as w, pytest.raises(KeyboardInterrupt):
        kiln_np.describe(w, progress=stop)
    assert calls == [4000, 8000, 12000]


def test_peak_memory_is_bounded(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    tensors = {
        "w": rng.standard_normal(1 << 23).astype(np.float32),  # 32 MiB
        "q": kiln_np.gguf.quantize(rng.standard_normal((512, 4096)).astype(np.float32), "Q4_K"),
    }
    path = _save(tmp_path / "w.gguf", "gguf", tensors)
    with kiln_np.open_weights(path) as w:
        tracemalloc.start()
        try:
            kiln_np.describe(w)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 16 << 20, peak  # the f32 tensor alone is 32 MiB; 8 MiB of values dequantized


def test_opaque_tensor_is_a_row_with_a_note(tmp_path: Path) -> None:
    layout = kiln_np.Layout("acme.blocks", 4)
    opaque = kiln_np.Payload(0x5000, memoryview(bytes(12)), (3,), layout)
    path = _save(tmp_path / "k", "kiln", {"o": opaque, "w": np.ones(2, np.float32)})
    with kiln_np.open_weights(path) as w:
        stats = kiln_np.describe(w)
    row = stats.row("o")
    assert row.note is not None
    assert "acme.blocks" in row.note
    assert (row.count, row.min, row.mean) == (3, None, None)
    assert "acme.blocks" in str(stats)
    assert stats.to_records()[0]["note"] == row.note


def test_bad_bool_byte_names_the_tensor(tmp_path: Path) -> None:
    path = _save(tmp_path / "w.safetensors", "safetensors", {"m": np.array([True, False])})
    data = bytearray(path.read_bytes())
    data[-1] = 7
    path.write_bytes(bytes(data))
    with kiln_np.open_weights(path) as w, pytest.raises(kiln_np.KilnError) as err:
        kiln_np.describe(w)
    assert err.value.kind == "TYPE"
    assert str(err.value).startswith("TYPE: tensor 'm': ")


def test_records_are_strict_json_and_views_fit(tmp_path: Path) -> None:
    tensors = _tensors()
    del tensors["u4"]
    long = "<script>x</script>" + "n" * 120
    tensors[long] = np.ones(2, np.float32)
    path = _save(tmp_path / "w.safetensors", "safetensors", tensors)
    with kiln_np.open_weights(path) as w:
        stats = kiln_np.describe(w)
    text = json.dumps(stats.to_json(), allow_nan=False)
    back = json.loads(text)
    assert back["tensor_count"] == len(tensors)
    assert back["nan"] == stats.nan == sum(r.nan for r in stats) > 0
    f64 = next(r for r in back["tensors"] if r["name"] == "f64")
    assert (f64["max"], f64["nan"], f64["finite"]) == (1e308, 1, 3)
    # Issue 36: the long name is whole, the name column as wide as it.
    lines = str(stats).splitlines()
    assert [line[: len(long) + 8] for line in lines if long in line] == [f"{long}     F32"]
    assert lines[1].startswith(f"{'name':<{len(long)}}    type   count ")
    html = stats._repr_html_()
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert html.count("<tr>") == len(tensors) + 2  # the caption, the header, a row each
    assert repr(stats).startswith("<kiln_np WeightStats: statistics of 16 tensors")


def test_describe_weights_refuses_tensor_arguments(tmp_path: Path) -> None:
    path = _save(tmp_path / "w.safetensors", "safetensors", {"x": np.ones(2, np.float32)})
    with kiln_np.open_weights(path) as w:
        with pytest.raises(kiln_np.KilnError, match="takes only progress="):
            kiln_np.describe(w, first=2)  # type: ignore[call-overload]
        with pytest.raises(kiln_np.KilnError, match="progress= is for describe"):
            kiln_np.describe(w["x"], progress=print)  # type: ignore[call-overload]


def test_cli_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tensors = _tensors()
    del tensors["u4"]
    path = _save(tmp_path / "w.safetensors", "safetensors", tensors)
    code, out, err = run_main(capsys, "stats", str(path))
    assert code == 0
    assert err == ""
    assert out.splitlines()[0].startswith("statistics of 15 tensors (safetensors)")
    # Issue 36: a long name is whole, never its end alone.
    assert "\nmodel.layers.0.self_attn.q_proj.weight     F32" in out
    code, out, _ = run_main(capsys, "stats", str(path), "--json", "--include", "model.*")
    record = json.loads(out)
    assert record["format"] == "kiln-np-stats/1"
    assert record["selection"]["selected"] == 3
    assert sorted(t["name"] for t in record["tensors"]) == sorted(
        n for n in tensors if n.startswith("model.")
    )
    code, out, err = run_main(capsys, "stats", str(path), "--include", "nothing*")
    assert code == 2
    assert "expected a tensor selected by --include 'nothing*'" in err


def test_heatmap_of_the_statistics(tmp_path: Path) -> None:
    matplotlib.use("Agg")
    rng = np.random.default_rng(4)
    tensors = {
        f"model.layers.{i}.{role}.weight": (rng.standard_normal(256) * (i + 1)).astype(BF16)
        for i in range(12)
        for role in ("self_attn.q_proj", "mlp.down_proj")
    }
    tensors["model.layers.3.mlp.down_proj.weight"] = np.zeros(256, BF16)  # std 0: blank
    tensors["model.embed_tokens.weight"] = np.ones(8, BF16)  # no layer: not drawn
    path = _save(tmp_path / "w.safetensors", "safetensors", tensors)
    with kiln_np.open_weights(path) as w:
        stats = kiln_np.describe(w)
    fig = stats.heatmap("std")
    heat, bar = fig.axes
    grid: Any = heat.images[0].get_array()
    assert grid.shape == (12, 2)
    assert [t.get_text() for t in heat.get_xticklabels()] == ["self_attn.q_proj", "mlp.down_proj"]
    expected = [
        [
            stats.row(f"model.layers.{i}.{r}.weight").std
            for r in ("self_attn.q_proj", "mlp.down_proj")
        ]
        for i in range(12)
    ]
    assert grid.mask.tolist() == [[False, i == 3] for i in range(12)]
    assert np.ma.filled(grid, 0).tolist() == [
        [e if not (i == 3 and j == 1) else 0 for j, e in enumerate(row)]
        for i, row in enumerate(expected)
    ]
    assert bar.get_ylabel() == "std (log scale)"
    absmax: Any = stats.heatmap("absmax").axes[0].images[0].get_array()
    assert absmax[0, 0] == stats.row("model.layers.0.self_attn.q_proj.weight").absmax
    with pytest.raises(kiln_np.KilnError, match="expected a stat among std, absmax"):
        stats.heatmap("median")


def _documented_keys(section: str) -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    block = text.split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_json_keys_are_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "w.safetensors", "safetensors", {"w": np.ones(3, np.float32)})
    code, out, _ = run_main(capsys, "stats", str(path), "--json")
    record = json.loads(out)
    assert code == 0
    assert list(record) == _documented_keys("stats-json")
    assert list(record["tensors"][0]) == _documented_keys("stats-tensor-json")


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_float_scales_are_the_float_fields_of_scales(name: str) -> None:
    """A decoder's float_scales (what the table reads) are its scales' float
    fields, bit for bit (IQ1's delta is an offset, not a scale)."""
    block = BLOCKS[name]
    rows = np.random.default_rng(1).integers(0, 256, (64, block.bytes), dtype=np.uint8)
    decoder = DECODERS[name]
    every = decoder.scales(rows)
    floats = float_scales(decoder, rows)
    expected = {k for k, v in every.items() if v.dtype.kind == "f" and k != "delta"}
    assert set(floats) == expected
    for k in floats:
        assert floats[k].tobytes() == np.asarray(every[k]).tobytes(), k
