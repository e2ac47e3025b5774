"""``Weights.summary()``, ``Weights.select()`` and the reprs of weights, on every
format: stated totals, the tree (numeric order, folding, a layer that differs),
selections and their closing, HTML escaping."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _helpers import gguf_py_file, optional

import kiln_np
from kiln_np import Weights

if TYPE_CHECKING:
    import gguf
    import onnx
    from onnx import numpy_helper
else:
    gguf = optional("gguf")
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")


def layered(layers: int = 12, *, extra: int | None = None) -> dict[str, np.ndarray]:
    """A llama-like checkpoint: embed, ``layers`` blocks of 3 tensors (layer
    ``extra`` holding a fourth), a norm and a head."""
    t: dict[str, np.ndarray] = {"model.embed.weight": np.zeros((32, 8), np.float32)}
    for i in range(layers):
        t[f"model.layers.{i}.attn.q.weight"] = np.zeros((8, 8), np.float16)
        t[f"model.layers.{i}.mlp.up.weight"] = np.zeros((16, 8), np.float16)
        t[f"model.layers.{i}.norm.weight"] = np.zeros(8, np.float16)
        if i == extra:
            t[f"model.layers.{i}.bias"] = np.zeros(3, np.float32)
    t["model.norm.weight"] = np.zeros(8, np.float32)
    return t


def tree(w: Weights) -> list[tuple[int, str, int, int]]:
    return [(r.depth, r.name, r.repeat, r.tensors) for r in w.summary().tree]


def test_safetensors_totals_and_types(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(path, layered(), format="safetensors")
    with kiln_np.open_weights(path) as w:
        s = w.summary()
    # 256 + 12 * (64 + 128 + 8) + 8 = 2664 parameters; f16 2 bytes, f32 4.
    assert (s.tensors, s.parameters, s.byte_length) == (38, 2664, 12 * 400 + 256 * 4 + 32)
    assert [(r.type, r.tensors, r.parameters, r.byte_length) for r in s.types] == [
        ("F16", 36, 2400, 4800),
        ("F32", 2, 264, 1056),
    ]
    assert [r.bits_per_weight for r in s.types] == [16.0, 32.0]
    assert s.bits_per_weight == 8 * 5856 / 2664
    assert (s.largest, s.largest_parameters, s.largest_byte_length) == (
        "model.embed.weight",
        256,
        1024,
    )
    assert s.memory() == {"stored": 5856, "bf16": 5328, "f32": 10656}
    d = s.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["parameters"] == 2664
    assert d["types"][0]["type"] == "F16"
    assert d["tree"][0] == {
        "depth": 0,
        "name": "model",
        "repeat": 1,
        "tensors": 38,
        "parameters": 2664,
        "byte_length": 5856,
        "shape": None,
        "type": None,
    }


def test_tree_folds_identical_layers_sorted_as_numbers(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(path, layered(), format="safetensors")
    with kiln_np.open_weights(path) as w:
        rows = tree(w)
    assert rows[0] == (0, "model", 1, 38)
    assert len(rows) == 8
    at = rows.index((1, "layers", 1, 36))
    assert rows[at + 1] == (2, "0-11", 12, 3)
    # One member's contents follow the fold.
    assert sorted(rows[at + 2 : at + 5]) == [
        (3, "attn.q.weight", 1, 1),
        (3, "mlp.up.weight", 1, 1),
        (3, "norm.weight", 1, 1),
    ]
    assert {(1, "embed.weight", 1, 1), (1, "norm.weight", 1, 1)} < set(rows)
    text = str(w.summary())
    assert "0-11" in text
    assert "x12, 3 tensors each" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_a_layer_that_differs_breaks_the_fold(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(path, layered(extra=5), format="safetensors")
    with kiln_np.open_weights(path) as w:
        groups = [(d, n, k, c) for d, n, k, c in tree(w) if d == 2]
    assert groups == [(2, "0-4", 5, 3), (2, "5", 1, 4), (2, "6-11", 6, 3)]


def test_another_shape_or_type_breaks_the_fold(tmp_path: Path) -> None:
    t = layered(4)
    t["model.layers.2.norm.weight"] = np.zeros(9, np.float16)  # another shape
    t["model.layers.3.norm.weight"] = np.zeros(8, np.float32)  # another type
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(path, t, format="safetensors")
    with kiln_np.open_weights(path) as w:
        groups = [n for d, n, _, _ in tree(w) if d == 2]
    assert groups == ["0-1", "2", "3"]


def test_numeric_sort_without_folding(tmp_path: Path) -> None:
    # Layers of different shapes never fold; 10 still comes after 9.
    t = {f"blk.{i}.w": np.zeros(i + 1, np.float32) for i in (10, 2, 9, 0, 1)}
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(path, t, format="safetensors")
    with kiln_np.open_weights(path) as w:
        # A group with one child and no tensor joins it: "0.w".
        assert [n for d, n, _, _ in tree(w) if d == 1] == ["0.w", "1.w", "2.w", "9.w", "10.w"]
    # Equal layers fold only over consecutive numbers.
    t = {f"blk.{i}.w": np.zeros(2, np.float32) for i in (0, 1, 2, 5, 6)}
    kiln_np.save_weights(path, t, format="safetensors")
    with kiln_np.open_weights(path) as w:
        assert [(n, k) for d, n, k, _ in tree(w) if d == 1] == [("0-2", 3), ("5-6", 2)]


def test_sharded_safetensors(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "ck", layered(), format="safetensors", max_shard_size=2000)
    with kiln_np.open_weights(tmp_path / "ck") as w:
        assert len({t.path for t in w.values()}) > 1
        s = w.summary()
        assert (s.tensors, s.parameters, s.byte_length) == (38, 2664, 5856)
        view = w.select("model.layers.1[01].*")
        assert view.summary().parameters == 400


def gguf_file(tmp_path: Path) -> Path:
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    q4_0 = gguf.GGMLQuantizationType.Q4_0
    rng = np.random.default_rng(0)
    floats = rng.standard_normal((4, 256)).astype(np.float32)
    tensors: dict[str, tuple[np.ndarray, Any]] = {
        "token_embd.weight": (floats, None),
        "blk.0.attn_q.weight": (gguf.quants.quantize(floats, q8_0), q8_0),
        "blk.1.attn_q.weight": (gguf.quants.quantize(floats, q8_0), q8_0),
        "blk.0.ffn_down.weight": (gguf.quants.quantize(floats, q4_0), q4_0),
        "blk.1.ffn_down.weight": (gguf.quants.quantize(floats, q4_0), q4_0),
        "output_norm.weight": (floats[0].astype(np.float16), None),
    }
    return gguf_py_file(tmp_path / "m.gguf", tensors)


def test_gguf_quantized_counts_elements_not_blocks(tmp_path: Path) -> None:
    with kiln_np.open_weights(gguf_file(tmp_path)) as w:
        s = w.summary()
        assert w.parameters == s.parameters == 5 * 1024 + 256
    rows = {r.type: (r.tensors, r.parameters, r.byte_length, r.bits_per_weight) for r in s.types}
    # Q8_0: 34 bytes per 32 elements; Q4_0: 18 bytes per 32.
    assert rows == {
        "F32": (1, 1024, 4096, 32.0),
        "Q8_0": (2, 2048, 2176, 8.5),
        "Q4_0": (2, 2048, 1152, 4.5),
        "F16": (1, 256, 512, 16.0),
    }
    assert s.byte_length == 4096 + 2176 + 1152 + 512
    assert s.memory()["f32"] == 4 * (5 * 1024 + 256)
    assert s.largest == "token_embd.weight"
    by_depth = [(d, n, k) for d, n, k, _ in tree(w)]
    assert (0, "blk", 1) in by_depth
    assert (1, "0-1", 2) in by_depth


def test_gguf_float_agrees_with_safetensors(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "m.gguf", layered(), format="gguf")
    kiln_np.save_weights(tmp_path / "m.safetensors", layered(), format="safetensors")
    with (
        kiln_np.open_weights(tmp_path / "m.gguf") as g,
        kiln_np.open_weights(tmp_path / "m.safetensors") as st,
    ):
        a, b = g.summary(), st.summary()
        assert (a.format, a.tensors, a.parameters, a.byte_length) == ("gguf", 38, 2664, 5856)
        assert sorted(a.tree, key=repr) == sorted(b.tree, key=repr)


def test_onnx(tmp_path: Path) -> None:
    inits = [
        numpy_helper.from_array(np.zeros((4, 4), np.float32), "a<b>.weight"),
        numpy_helper.from_array(np.zeros(6, np.int8), "a<b>.bias"),
    ]
    graph = onnx.helper.make_graph([], "g", [], [], initializer=inits)
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    with kiln_np.open_weights(tmp_path / "m.onnx") as w:
        s = w.summary()
        assert (s.format, s.tensors, s.parameters, s.byte_length) == ("onnx", 2, 22, 70)
        assert {r.type for r in s.types} == {"FLOAT", "INT8"}
        page = w._repr_html_()
        assert "a&lt;b&gt;" in page
        assert "a<b>" not in page
        one = w["a<b>.weight"]._repr_html_()
        assert "a&lt;b&gt;.weight" in one
        assert "(4, 4)" in one
        assert "64" in one


def test_kiln_directory_and_select(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "k", layered(3), format="kiln")
    with kiln_np.open_weights(tmp_path / "k") as w:
        assert w.summary().parameters == 256 + 3 * 200 + 8
        both = w.select("*.attn.*", "*.mlp.*", exclude=["model.layers.1.*"])
        assert list(both) == [
            "model.layers.0.attn.q.weight",
            "model.layers.0.mlp.up.weight",
            "model.layers.2.attn.q.weight",
            "model.layers.2.mlp.up.weight",
        ]
        assert list(w.select(exclude="model.layers.*")) == [
            "model.embed.weight",
            "model.norm.weight",
        ]
        assert list(w.select("Model.*")) == []  # case-sensitive
        assert list(w.select()) == list(w)
        assert list(both.select("*.0.*")) == both_first(both)
        assert both.metadata is w.metadata
        assert both.format == "kiln"
        assert both.path == w.path
        assert both["model.layers.0.attn.q.weight"] is w["model.layers.0.attn.q.weight"]
        with pytest.raises(kiln_np.KilnError, match="expected str patterns, found list") as e:
            w.select(["*"])  # type: ignore[arg-type]
        assert e.value.kind == "TYPE"


def both_first(view: Weights) -> list[str]:
    return [n for n in view if ".0." in n]


def test_a_view_shares_the_maps_and_owns_none(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "m.safetensors", layered(2), format="safetensors")
    w = kiln_np.open_weights(tmp_path / "m.safetensors")
    view = w.select("model.norm.weight")
    with view:
        pass  # closing the view releases nothing
    assert view["model.norm.weight"].numpy().tolist() == [0.0] * 8
    assert w["model.embed.weight"].numpy().shape == (32, 8)
    w.close()  # closing the original closes the view's tensors too
    with pytest.raises(ValueError, match="closed"):
        view["model.norm.weight"].payload()


def test_a_view_pickles_as_its_selection(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "m.safetensors", layered(3), format="safetensors")
    with kiln_np.open_weights(tmp_path / "m.safetensors") as w:
        view = w.select("model.layers.*", exclude="*.norm.*").select("*.2.*")
        back = pickle.loads(pickle.dumps(view))
    assert list(back) == ["model.layers.2.attn.q.weight", "model.layers.2.mlp.up.weight"]
    assert repr(back) == repr(view)
    back.close()  # the unpickled view owns its reopened maps
    with pytest.raises(ValueError, match="closed"):
        back["model.layers.2.mlp.up.weight"].payload()


def test_reprs(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "m.safetensors", layered(), format="safetensors")
    with kiln_np.open_weights(tmp_path / "m.safetensors") as w:
        text = repr(w)
        assert text.endswith(", 38 tensors, 2.66 K parameters, 5.7 KiB)")
        assert repr(w.select("model.norm.*")).endswith(", 1 tensors selected, 8 parameters, 32 B)")
        assert repr(w.summary()) == (
            "<kiln_np Summary: 38 tensors, 2.66 K parameters, 5.7 KiB (safetensors)>"
        )
        page = w._repr_html_()
        assert page.count("<table>") == 3
        assert "F16" in page
        assert "0-11" in page


def test_long_names_are_shown_whole(tmp_path: Path) -> None:
    # Issue 36: a name is never cut; the lines without one still fit 100 columns.
    t = {"x" * 150 + ".w": np.zeros(2, np.float32), "y.w": np.zeros(3, np.float32)}
    kiln_np.save_weights(tmp_path / "m.safetensors", t, format="safetensors")
    with kiln_np.open_weights(tmp_path / "m.safetensors") as w:
        text = str(w.summary())
    lines = text.splitlines()
    assert "..." not in text
    long = "x" * 150 + ".w"
    assert [ln for ln in lines if len(ln) > 100] == [
        f"    {long}  (2,) F32  2 / 8 B",
        f"    {'y.w':<{len(long)}}  (3,) F32  3 / 12 B",
    ]


def test_empty_checkpoint(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "e", {}, format="kiln")
    with kiln_np.open_weights(tmp_path / "e") as w:
        s = w.summary()
    assert (s.tensors, s.parameters, s.largest, s.bits_per_weight, s.tree) == (0, 0, None, None, ())
    assert "bits/weight  -" in str(s)
