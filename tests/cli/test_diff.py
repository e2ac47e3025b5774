"""kiln-np diff: exit status 0 equal, 1 different, 2 on errors; text and JSON."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from _helpers import kiln_np_exe, run_main

import kiln_np


def _save(path: Path, tensors: dict[str, np.ndarray], fmt: str = "safetensors") -> str:
    kiln_np.save_weights(path, tensors, format=fmt)
    return str(path)


def _tensors() -> dict[str, np.ndarray]:
    return {"w": np.linspace(-1, 1, 96, dtype=np.float32).reshape(3, 32), "n": np.arange(4)}


def test_equal_files_exit_0(tmp_path: Path, capsys: Any) -> None:
    a = _save(tmp_path / "a.safetensors", _tensors())
    b = _save(tmp_path / "b", _tensors(), "kiln")
    status, out, err = run_main(capsys, "diff", a, b)
    assert (status, err) == (0, "")
    assert out == (
        "equal: 2 tensors in both (2 same bytes, 0 equal values, 0 different), "
        "0 only in A, 0 only in B\n"
    )
    status, out, _ = run_main(capsys, "diff", a, b, "--all")
    assert status == 0
    assert sorted(line.split()[:3] for line in out.splitlines()[1:3]) == [
        ["n", "same", "bytes"],
        ["w", "same", "bytes"],
    ]


def test_value_equal_bytes_different_exit_0(tmp_path: Path, capsys: Any) -> None:
    t = _tensors()
    t["w"] = t["w"].astype(ml_dtypes.bfloat16).astype(np.float32)
    b16 = _save(tmp_path / "b.safetensors", {**t, "w": t["w"].astype(ml_dtypes.bfloat16)})
    f32 = _save(tmp_path / "c.safetensors", t)
    status, out, _ = run_main(capsys, "diff", b16, f32)
    assert status == 0
    assert "1 equal values" in out


def test_different_files_exit_1_with_json(tmp_path: Path, capsys: Any) -> None:
    t = _tensors()
    a = _save(tmp_path / "a.safetensors", t)
    t["w"] = t["w"].copy()
    t["w"][2, 5] = 9.0
    t["extra"] = np.zeros(1, np.int8)
    b = _save(tmp_path / "b.gguf", t, "gguf")
    status, out, _ = run_main(capsys, "diff", a, b)
    assert status == 1
    lines = out.splitlines()
    assert lines[0].split() == [
        "name", "status", "rmse", "rel", "rmse", "SNR", "dB", "cosine", "max", "abs", "(at)",
        "max", "rel", "(at)", "first", "notes",
    ]  # fmt: skip
    assert lines[1].split()[:4] == ["extra", "only", "in", "B"]
    w = lines[2].split()
    old = float(_tensors()["w"][2, 5])
    assert w[:3] == ["w", "DIFFERENT", f"{abs(9.0 - old) / np.sqrt(96):.4g}"]
    assert w[6:8] == [f"{9.0 - old:.4g}", "(2,5)"]  # max abs, where
    assert w[10] == "(2,5)"  # the first differing place
    assert lines[-1].startswith("different: 2 tensors in both")
    status, out, _ = run_main(capsys, "diff", a, b, "--json")
    assert status == 1
    record = json.loads(out)
    assert record["format"] == "kiln-np-diff/1"
    assert (record["a"], record["b"], record["equal"], record["only_b"]) == (a, b, False, ["extra"])
    (w,) = [t for t in record["tensors"] if t["name"] == "w"]
    assert (w["name"], w["first_index"], w["mismatches"], w["status"]) == (
        "w",
        [2, 5],
        1,
        "DIFFERENT",
    )


def test_errors_exit_2(tmp_path: Path, capsys: Any) -> None:
    a = _save(tmp_path / "a.safetensors", _tensors())
    status, out, err = run_main(capsys, "diff", a, str(tmp_path / "missing.safetensors"))
    assert (status, out) == (2, "")
    assert err.startswith("kiln-np: FILE: cannot read ")
    (tmp_path / "bad.safetensors").write_bytes(b"\x01")
    status, _, err = run_main(capsys, "diff", str(tmp_path / "bad.safetensors"), a)
    assert status == 2
    assert err.startswith("kiln-np: ")


def test_installed_command_exit_status(tmp_path: Path) -> None:
    a = _save(tmp_path / "a.safetensors", {"x": np.zeros(3, np.float32)})
    b = _save(tmp_path / "b.safetensors", {"x": np.ones(3, np.float32)})
    runs = [
        subprocess.run([*kiln_np_exe(), "diff", a, p], check=False, capture_output=True)
        for p in (a, b)
    ]
    assert [r.returncode for r in runs] == [0, 1]


def _documented_keys(section: str) -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    block = text.split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_json_keys_are_documented(tmp_path: Path, capsys: Any) -> None:
    a = _save(tmp_path / "a.safetensors", _tensors())
    status, out, _ = run_main(capsys, "diff", a, a, "--json")
    record = json.loads(out)
    assert status == 0
    assert list(record) == _documented_keys("diff-json")
    assert list(record["tensors"][0]) == _documented_keys("diff-tensor-json")
    layered = _save(tmp_path / "l.safetensors", {"h.0.w": np.zeros(3, np.float32)})
    other = _save(tmp_path / "m.safetensors", {"h.0.w": np.ones(3, np.float32)})
    record = json.loads(run_main(capsys, "diff", layered, other, "--json")[1])
    for key in ("by_layer", "by_role"):
        assert list(record[key][0]) == _documented_keys("diff-group-json")


def test_include_and_exclude_select_on_both_sides(tmp_path: Path, capsys: Any) -> None:
    a = _save(tmp_path / "a.safetensors", {"w.0": np.zeros(3, np.float32), "n": np.zeros(2)})
    b = _save(tmp_path / "b.safetensors", {"w.0": np.zeros(3, np.float32), "n": np.ones(2)})
    assert run_main(capsys, "diff", a, b)[0] == 1  # "n" differs
    status, out, _ = run_main(capsys, "diff", a, b, "--exclude", "n", "--json")
    record = json.loads(out)
    assert status == 0
    assert record["selection"] == {
        "include": [],
        "exclude": ["n"],
        "selected": 1,
        "left_out": 1,
        "b": {"include": [], "exclude": ["n"], "selected": 1, "left_out": 1},
    }
    assert [t["name"] for t in record["tensors"]] == ["w.0"]
    status, _, err = run_main(capsys, "diff", a, b, "--include", "nothing*")
    assert status == 2
    assert "expected a tensor selected by --include 'nothing*'" in err


def test_sort_orders_tensors_layers_and_roles_worst_first(tmp_path: Path, capsys: Any) -> None:
    rng = np.random.default_rng(7)
    x = {f"blk.{k}.ffn_up.weight": rng.standard_normal(256).astype(np.float32) for k in range(3)}
    noise = {0: 0.01, 1: 0.3, 2: 0.001}
    y = {n: v + noise[int(n.split(".")[1])] * rng.standard_normal(256).astype(np.float32)
         for n, v in x.items()}  # fmt: skip
    a = _save(tmp_path / "a.safetensors", x)
    b = _save(tmp_path / "b.safetensors", y)
    status, out, _ = run_main(capsys, "diff", a, b, "--sort", "snr_db")
    assert status == 1
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == [
        "blk.1.ffn_up.weight", "blk.0.ffn_up.weight", "blk.2.ffn_up.weight"
    ]  # fmt: skip
    layer = lines.index(next(line for line in lines if line.startswith("layer ")))
    assert [line.split()[0] for line in lines[layer + 1 : layer + 4]] == ["blk.1", "blk.0", "blk.2"]
    assert lines[layer + 5].split()[:2] == ["blk.*.ffn_up", "3"]
    status, out, _ = run_main(capsys, "diff", a, b, "--sort", "rmse", "--json")
    record = json.loads(out)
    assert record["sort"] == "rmse"
    assert [t["name"] for t in record["tensors"]] == [
        "blk.1.ffn_up.weight", "blk.0.ffn_up.weight", "blk.2.ffn_up.weight"
    ]  # fmt: skip
    assert [g["name"] for g in record["by_layer"]] == ["blk.1", "blk.0", "blk.2"]
    rmse = [t["rmse"] for t in record["tensors"]]
    assert rmse == sorted(rmse, reverse=True)
    status, _, err = run_main(capsys, "diff", a, b, "--sort", "loss")
    assert status == 2
    assert "invalid choice: 'loss'" in err
