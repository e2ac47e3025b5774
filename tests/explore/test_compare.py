"""kiln_np.compare: two checkpoints, name by name, bytes and values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np._explore.comparison import Comparison, TensorComparison

BF16 = ml_dtypes.bfloat16
compare_module = sys.modules["kiln_np._explore.comparison"]


def _st(path: Path, tensors: dict[str, np.ndarray], **kw: object) -> Path:
    kiln_np.save_weights(path, tensors, format="safetensors", **kw)  # type: ignore[arg-type]
    return path


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((8, 64)).astype(np.float32),
        "b": np.arange(5, dtype=np.int32),
        "h": rng.standard_normal(70).astype(BF16),
    }


def _only(r: Comparison, name: str) -> TensorComparison:
    (t,) = [t for t in r.tensors if t.name == name]
    return t


def test_same_file_is_equal_byte_for_byte(tmp_path: Path) -> None:
    path = _st(tmp_path / "a.safetensors", _tensors())
    r = kiln_np.compare(path, path)
    assert r.equal
    assert [t.status for t in r.tensors] == ["same bytes"] * 3
    assert not any(t.compared for t in r.tensors)
    assert r.differences() == []
    assert str(r) == (
        "equal: 3 tensors in both (3 same bytes, 0 equal values, 0 different), "
        "0 only in A, 0 only in B"
    )


@pytest.mark.parametrize("fmt", ["kiln", "gguf", "sharded"])
def test_same_tensors_in_another_format_are_equal(tmp_path: Path, fmt: str) -> None:
    tensors = _tensors()
    a = _st(tmp_path / "a.safetensors", tensors)
    if fmt == "sharded":
        b = _st(tmp_path / "sharded", tensors, max_shard_size=1024)  # a directory of shards
        assert len(list(b.glob("*.safetensors"))) > 1
    else:
        b = tmp_path / f"b.{fmt}"
        kiln_np.save_weights(b, tensors, format=fmt)
    with kiln_np.open_weights(b) as wb:
        r = kiln_np.compare(a, wb)
        assert wb["w"].payload() is not None  # the caller's Weights stay open
    assert r.equal, r.text(every=True)
    assert r.only_a == r.only_b == ()
    assert all(t.same_bytes for t in r.tensors)


def test_chunked_byte_comparison_finds_a_late_difference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare_module, "BYTE_CHUNK", 64)
    monkeypatch.setattr(compare_module, "VALUE_CHUNK", 48)
    x = np.arange(1000, dtype=np.float32)
    y = x.copy()
    y[777] = 776.5
    r = kiln_np.compare(
        _st(tmp_path / "a.safetensors", {"x": x}), _st(tmp_path / "b.safetensors", {"x": y})
    )
    t = r.tensors[0]
    assert (t.same_bytes, t.equal, t.compared) == (False, False, True)
    assert t.first_index == (777,)
    assert t.mismatches == 1
    assert t.max_abs == 0.5
    assert t.max_rel == pytest.approx(0.5 / 777)
    same = kiln_np.compare(tmp_path / "a.safetensors", tmp_path / "a.safetensors")
    assert same.tensors[0].same_bytes


def test_bf16_against_f32_of_the_same_values_is_equal(tmp_path: Path) -> None:
    h = np.random.default_rng(1).standard_normal((3, 50)).astype(BF16)
    a = _st(tmp_path / "a.safetensors", {"h": h})
    b = _st(tmp_path / "b.safetensors", {"h": h.astype(np.float32)})
    r = kiln_np.compare(a, b)
    t = r.tensors[0]
    assert (t.same_bytes, t.equal, t.compared, t.type_a, t.type_b) == (
        False,
        True,
        True,
        "bf16",
        "f32",
    )
    assert r.equal
    assert "bf16 vs f32" not in r.text()  # equal: not listed
    assert "bf16 vs f32" in r.text(every=True)


def test_signed_zeros_and_nan_payloads_are_equal_but_reported(tmp_path: Path) -> None:
    x = np.array([0.0, -0.0, 1.0, np.nan, np.nan], np.float32)
    y = x.copy()
    y[0], y[1] = -0.0, 0.0
    bits = y.view(np.uint32)
    bits[4] = 0x7FC00001  # another quiet NaN
    r = kiln_np.compare(
        _st(tmp_path / "a.safetensors", {"x": x}), _st(tmp_path / "b.safetensors", {"x": y})
    )
    t = r.tensors[0]
    assert (t.equal, t.same_bytes, t.mismatches) == (True, False, 0)
    assert (t.signed_zeros, t.nan_payloads) == (2, 1)
    assert r.equal
    assert r.differences() == [t]
    line = r.text().splitlines()[1]
    assert "1 NaN bits differ" in line
    assert "2 -0/+0" in line
    assert line.startswith("x")


def test_nan_against_a_number_is_a_difference(tmp_path: Path) -> None:
    x = np.array([[1.0, 2.0], [3.0, np.inf]], np.float64)
    y = np.array([[1.0, np.nan], [3.0, 4.0]], np.float64)
    t = kiln_np.compare(
        _st(tmp_path / "a.safetensors", {"x": x}), _st(tmp_path / "b.safetensors", {"x": y})
    ).tensors[0]
    assert (t.equal, t.mismatches, t.first_index) == (False, 2, (0, 1))
    assert t.max_abs == np.inf
    assert t.max_rel == np.inf
    record = t.to_record()
    assert record["max_abs"] == "inf"
    json.dumps(record, allow_nan=False)


def test_one_element_changed(tmp_path: Path) -> None:
    tensors = _tensors()
    a = _st(tmp_path / "a.safetensors", tensors)
    tensors["w"] = tensors["w"].copy()
    tensors["w"][3, 17] += np.float32(0.25)
    old = float(_tensors()["w"][3, 17])
    b = _st(tmp_path / "b.safetensors", tensors)
    r = kiln_np.compare(a, b)
    assert not r.equal
    t = _only(r, "w")
    assert (t.status, t.first_index, t.mismatches) == ("DIFFERENT", (3, 17), 1)
    expected = abs(float(tensors["w"][3, 17]) - old)
    assert t.max_abs == expected
    assert t.max_rel == pytest.approx(expected / max(abs(old), abs(float(tensors["w"][3, 17]))))
    text = r.text()
    assert text.splitlines()[1].split()[:2] == ["w", "DIFFERENT"]
    assert "(3,17)" in text
    assert text.endswith(
        "different: 3 tensors in both (2 same bytes, 0 equal values, 1 different), "
        "0 only in A, 0 only in B"
    )
    assert all(len(line) <= 100 for line in text.splitlines()[:-1])


def test_names_only_in_one_side(tmp_path: Path) -> None:
    tensors = _tensors()
    a = _st(tmp_path / "a.safetensors", tensors)
    extra = {"extra": np.zeros(2, np.float32), "w": tensors["w"]}
    b = _st(tmp_path / "b.safetensors", extra)
    r = kiln_np.compare(a, b)
    assert (r.only_a, r.only_b) == (("b", "h"), ("extra",))
    assert [t.name for t in r.tensors] == ["w"]
    assert r.tensors[0].equal
    assert not r.equal
    records = r.to_records()
    assert [x["status"] for x in records] == ["same bytes", "only in A", "only in A", "only in B"]
    rows = r.text().splitlines()
    assert [row.split()[:4] for row in rows[1:4]] == [
        ["b", "only", "in", "A"],
        ["h", "only", "in", "A"],
        ["extra", "only", "in", "B"],
    ]
    html = r._repr_html_()
    assert html.count("<tr>") == 3
    assert "only in B" in html


def test_shape_mismatch_reads_no_values(tmp_path: Path) -> None:
    a = _st(tmp_path / "a.safetensors", {"w": np.zeros((2, 3), np.float32)})
    b = _st(tmp_path / "b.safetensors", {"w": np.zeros((3, 2), np.float32)})
    t = kiln_np.compare(a, b).tensors[0]
    assert (t.status, t.equal, t.compared, t.shape_a, t.shape_b) == (
        "shape differs",
        False,
        False,
        (2, 3),
        (3, 2),
    )
    assert "(2,3) vs (3,2)" in kiln_np.compare(a, b).text()


def test_integers_compare_exactly(tmp_path: Path) -> None:
    big = np.array([2**63, 5, 2**53 + 1], np.uint64)
    signed = np.array([-(2**63), 5, 2**53 + 1], np.int64)
    t = kiln_np.compare(
        _st(tmp_path / "a.safetensors", {"x": big}), _st(tmp_path / "b.safetensors", {"x": signed})
    ).tensors[0]
    assert (t.equal, t.mismatches, t.first_index) == (False, 1, (0,))
    assert t.max_abs == 2.0**64
    near = np.array([2**53 + 1], np.int64)
    far = np.array([2**53], np.int64)
    t = kiln_np.compare(
        _st(tmp_path / "c.safetensors", {"x": near}), _st(tmp_path / "d.safetensors", {"x": far})
    ).tensors[0]
    assert (t.equal, t.mismatches) == (False, 1)  # float64 would call them equal
    small = _st(tmp_path / "e.safetensors", {"x": np.array([1, 0], np.uint8)})
    mask = _st(tmp_path / "f.safetensors", {"x": np.array([True, False])})
    assert kiln_np.compare(small, mask).tensors[0].equal


def test_gguf_quantized_against_floats(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    q = tmp_path / "q.gguf"
    kiln_np.save_weights(q, {"w": w}, format="gguf", quantize="*=q8_0")
    with kiln_np.open_weights(q) as weights:
        assert weights["w"].layout is not None
        values = weights["w"].numpy()
    deq = _st(tmp_path / "deq.safetensors", {"w": values})
    orig = _st(tmp_path / "orig.safetensors", {"w": w})
    r = kiln_np.compare(q, deq)
    t = r.tensors[0]
    assert r.equal
    assert (t.type_a, t.type_b, t.compared) == ("ggml.q8_0", "f32", True)
    t = kiln_np.compare(q, orig).tensors[0]
    diff = np.abs(values.astype(np.float64) - w.astype(np.float64))
    assert not t.equal
    assert t.max_abs == float(diff.max())
    assert t.mismatches == int(np.count_nonzero(diff))
    flat = int(np.argmax(diff != 0))
    assert t.first_index == tuple(int(i) for i in np.unravel_index(flat, w.shape))


def test_onnx_on_one_side(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    w = np.arange(300, dtype=np.float32).reshape(3, 100) - 7.5
    small = np.array([1.5, -0.0], np.float16)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(small, "s")]
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=inits))
    path = tmp_path / "m.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="m.data", size_threshold=100
    )
    same = _st(tmp_path / "a.safetensors", {"w": w, "s": small})
    r = kiln_np.compare(path, same)
    assert r.equal
    assert all(t.same_bytes for t in r.tensors)
    changed = small.copy()
    changed[1] = 0.0
    other = _st(tmp_path / "b.safetensors", {"w": w.astype(BF16).astype(np.float32), "s": changed})
    r = kiln_np.compare(path, other)
    s = _only(r, "s")
    assert (s.equal, s.signed_zeros) == (True, 1)
    t = _only(r, "w")
    expected = np.abs(w.astype(np.float64) - w.astype(BF16).astype(np.float64))
    assert (t.equal, t.max_abs) == (expected.max() == 0, float(expected.max()))


@pytest.mark.parametrize("odd", [3, b"a.safetensors", {"w": 1}, None])
def test_refuses_what_is_not_a_checkpoint(tmp_path: Path, odd: object) -> None:
    """What the user sees for an object that is neither a path nor a Weights: the
    library's TYPE, as open_weights and describe say it (not a bare TypeError),
    on either side."""
    with pytest.raises(kiln_np.KilnError, match=r"expected a path or a kiln_np\.Weights") as e:
        kiln_np.compare(odd, "x")  # type: ignore[arg-type]
    assert e.value.kind == "TYPE"
    path = _st(tmp_path / "a.safetensors", {"x": np.ones(2, np.float32)})
    with pytest.raises(kiln_np.KilnError, match=r"expected a path or a kiln_np\.Weights") as e:
        kiln_np.compare(path, odd)  # type: ignore[arg-type]
    assert e.value.kind == "TYPE"


def test_json_form_is_strict(tmp_path: Path) -> None:
    a = _st(tmp_path / "a.safetensors", {"x": np.array([1.0, np.inf], np.float32)})
    b = _st(
        tmp_path / "b.safetensors",
        {"x": np.array([1.0, 2.0], np.float32), "y": np.zeros(1, np.int8)},
    )
    record = kiln_np.compare(a, b).to_json()
    assert json.loads(json.dumps(record, allow_nan=False)) == {
        "a": str(a.resolve()),
        "b": str(b.resolve()),
        "equal": False,
        "sort": None,
        "names": "raw",
        "only_a": [],
        "only_b": ["y"],
        "tensors": [
            {
                "name": "x",
                "shape_a": [2],
                "shape_b": [2],
                "type_a": "f32",
                "type_b": "f32",
                "same_bytes": False,
                "equal": False,
                "compared": True,
                "mismatches": 1,
                "rmse": 0.0,  # over the one place finite on both sides: equal
                "rel_rmse": 0.0,
                "snr_db": "inf",
                "cosine": 1.0,
                "max_abs": "inf",
                "max_abs_index": [1],
                "max_rel": "inf",
                "max_rel_index": [1],
                "first_index": [1],
                "nonfinite": 1,
                "saturated_a": None,
                "saturated_b": None,
                "nan_payloads": 0,
                "signed_zeros": 0,
                "note": "",
                "status": "DIFFERENT",
            }
        ],
        "by_layer": [],
        "by_role": [],
    }


def test_packed_fp4_against_its_float_values(tmp_path: Path) -> None:
    fp4 = np.array([0.5, -6.0, 1.5, 0.0, 3.0], ml_dtypes.float4_e2m1fn)
    a = tmp_path / "a"
    b = tmp_path / "b"
    kiln_np.save_weights(a, {"x": fp4}, format="kiln")
    kiln_np.save_weights(b, {"x": np.array([0.5, -6.0, 1.5, 0.0, 2.0], np.float16)}, format="kiln")
    t = kiln_np.compare(a, b).tensors[0]
    assert (t.type_a, t.type_b, t.first_index, t.max_abs) == ("e2m1", "f16", (4,), 1.0)
    assert t.max_rel == pytest.approx(1 / 3)


def test_complex_compares_byte_for_byte_only(tmp_path: Path) -> None:
    z = np.array([1 + 2j, 3 - 1j], np.complex64)
    a, b = tmp_path / "a", tmp_path / "b"
    kiln_np.save_weights(a, {"z": z}, format="kiln")
    kiln_np.save_weights(b, {"z": z * 2}, format="kiln")
    assert kiln_np.compare(a, a).tensors[0].same_bytes
    t = kiln_np.compare(a, b).tensors[0]
    assert (t.equal, t.compared, t.note) == (False, False, "no numeric reading")
    assert "no numeric reading" in kiln_np.compare(a, b).text()


def test_long_names_are_shown_whole(tmp_path: Path) -> None:
    # Issue 36: the name column is as wide as the longest name; nothing is cut.
    name = "model.layers.12.self_attn.q_proj.weight.with.a.very.long.suffix"
    a = _st(tmp_path / "a.safetensors", {name: np.zeros((2, 3), np.float32)})
    b = _st(tmp_path / "b.safetensors", {name: np.zeros((3, 2), BF16)})
    rows = kiln_np.compare(a, b).text().splitlines()
    assert rows[:2] == [
        "name" + " " * (len(name) - 4) + "  status         notes",
        f"{name}  shape differs  f32 vs bf16, (2,3) vs (3,2)",
    ]


def test_a_selected_view_compares_its_tensors_only(tmp_path: Path) -> None:
    tensors = _tensors()
    a = _st(tmp_path / "a.safetensors", tensors)
    b = _st(tmp_path / "b.safetensors", {"w": tensors["w"]})
    with kiln_np.open_weights(a) as wa:
        r = kiln_np.compare(wa.select("w"), b)
        assert sorted(wa) == ["b", "h", "w"]  # the view is not the file
    assert r.equal
    assert [t.name for t in r.tensors] == ["w"]
