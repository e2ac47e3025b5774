"""``kiln-np imatrix``: an importance matrix as llama-quantize reads it, in text
(docs/cli.md's examples, run) and ``--json`` (its documented keys), and the
errors."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from _helpers import run_main

from kiln_np.gguf import read_imatrix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "imatrix"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _section() -> str:
    text = DOCS.read_text()
    start = text.index('### `imatrix`: `"format": "kiln-np-imatrix/1"`')
    return text[start : text.index("### `convert`", start)]


def test_the_documented_examples_are_what_it_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(FIXTURES)
    block = _section().split("```console\n")[1].split("```")[0]
    runs = re.split(r"^\$ kiln-np ", block, flags=re.M)[1:]
    assert len(runs) == 2
    for run in runs:
        command, _, expected = run.partition("\n")
        status, out, err = run_main(capsys, *command.split())
        assert (status, err) == (0, "")
        assert out == expected


def test_text_of_each_format(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_main(capsys, "imatrix", str(FIXTURES / "moe.imatrix.gguf"))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].endswith("moe.imatrix.gguf: imatrix (GGUF), 16 entries, 17 chunks of 64 tokens")
    assert lines[1] == "datasets: calibration.txt"
    assert lines[2] == (
        "name                        experts  row    tokens  unused  min weight  max weight"
    )
    down = next(line for line in lines if line.startswith("blk.0.ffn_down_exps.weight"))
    assert down.split()[:5] == ["blk.0.ffn_down_exps.weight", "4", "512", "0..1088", "2"]
    assert len(lines) == 3 + 16
    status, out, _ = run_main(capsys, "imatrix", str(FIXTURES / "cases" / "dat-no-trailer.dat"))
    assert out.splitlines()[:3] == [
        f"{FIXTURES / 'cases' / 'dat-no-trailer.dat'}: imatrix (legacy .dat), 1 entry, 0 chunks",
        "datasets: none",
        "name  values  ncall  min weight  max weight",
    ]


def test_no_entry_kept(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "llama.imatrix.gguf")
    status, out, _ = run_main(capsys, "imatrix", path, "--include-weights", "nothing")
    assert status == 0
    assert out.splitlines()[0].endswith("0 of 14 entries kept, 17 chunks of 64 tokens")
    assert out.splitlines()[-1] == "no entry kept: llama-quantize quantizes as without --imatrix"


def _documented_keys(section: str) -> list[str]:
    block = _section().split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_json_is_the_documented_schema(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "moe.imatrix.gguf")
    argv = ["imatrix", path, "--include-weights", "exps", "--include-weights", "inp", "--json"]
    status, out, _ = run_main(capsys, *argv)
    assert status == 0
    record = json.loads(out)
    assert list(record) == _documented_keys("imatrix-json")
    assert list(record["entries"][0]) == _documented_keys("imatrix-entry-json")
    imatrix = read_imatrix(path, include=["exps", "inp"])
    assert record["include_weights"] == ["exps", "inp"]
    assert record["exclude_weights"] == []
    assert (record["loaded"], len(record["entries"])) == (16, 8)
    for entry in record["entries"]:
        weights = imatrix.entries[entry["name"]].weights
        assert (entry["experts"], entry["row_length"]) == weights.shape
        assert entry["counts"] == list(imatrix.entries[entry["name"]].counts)
        assert np.float32(entry["min"]).view(np.uint32) == weights.min().view(np.uint32)
        assert np.float32(entry["max"]).view(np.uint32) == weights.max().view(np.uint32)


def test_json_of_a_legacy_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "llama.imatrix.dat")
    record = json.loads(run_main(capsys, "imatrix", path, "--exclude-weights", "attn", "--json")[1])
    assert (record["imatrix_format"], record["chunk_size"], record["chunk_count"]) == ("dat", 0, 17)
    assert record["exclude_weights"] == ["attn"]
    assert {(e["experts"], e["counts"][0]) for e in record["entries"]} == {(1, 17)}


def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(FIXTURES / "llama.imatrix.gguf")
    status, out, err = run_main(
        capsys, "imatrix", path, "--include-weights", "a", "--exclude-weights", "b"
    )
    assert (status, out) == (2, "")
    assert (
        err == "kiln-np: USAGE: --include-weights and --exclude-weights cannot be used together\n"
    )
    status, _, err = run_main(capsys, "imatrix", str(FIXTURES / "cases" / "count-nan.gguf"))
    assert status == 2
    assert err.startswith("kiln-np: TYPE: ")
    assert "count-nan.gguf" in err
    assert "found nan at element 0" in err
    status, _, err = run_main(capsys, "imatrix", str(tmp_path / "absent.dat"))
    assert status == 2
    assert err.startswith("kiln-np: FILE: cannot read ")


def test_hostile_names_are_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    name = b"blk.0\x1b[2J.w\xff"
    data = struct.pack("<ii", 1, len(name)) + name + struct.pack("<ii", 1, 1) + bytes(4)
    path = tmp_path / "hostile.dat"
    path.write_bytes(data + struct.pack("<ii", 0, 3) + b"\x07ab")
    status, out, _ = run_main(capsys, "imatrix", str(path))
    assert status == 0
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "blk.0\\x1b[2J.w\\udcff" in out
    assert "datasets: \\x07ab" in out
    record = json.loads(run_main(capsys, "imatrix", str(path), "--json")[1])
    assert record["entries"][0]["name"] == name.decode("utf-8", "surrogateescape")
