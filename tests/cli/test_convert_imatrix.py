"""``kiln-np convert --quantize FTYPE --imatrix FILE``: llama-quantize's importance
matrix flags (``--include-weights``, ``--exclude-weights``), the dry run's
``imatrix`` column and line, ``--json``'s ``imatrix`` and ``weighted``, the file's
``quantize.imatrix.*`` keys with FILE as typed, and the refusals (USAGE, FILE,
TYPE naming ``--imatrix``) that leave nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np.gguf import read_gguf, save_gguf

NAMES = ("blk.0.attn_q.weight", "blk.0.ffn_up.weight", "blk.1.attn_q.weight")


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``m.gguf`` (three 2-D tensors and a norm) and ``i.gguf``, an importance
    matrix of two of them, in the working directory."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    tensors = {name: rng.standard_normal((4, 256)).astype(np.float32) for name in NAMES}
    tensors["blk.0.attn_norm.weight"] = np.ones(256, np.float32)
    kiln_np.save_weights("m.gguf", tensors, format="gguf")
    sums = {f"{n}.in_sum2": np.ones((1, 256), np.float32) for n in NAMES[:2]}
    counts = {f"{n}.counts": np.full((1, 1), 2, np.float32) for n in NAMES[:2]}
    keys = {
        "imatrix.datasets": ["wiki.txt"],
        "imatrix.chunk_count": np.uint32(5),
        "imatrix.chunk_size": np.uint32(512),
    }
    save_gguf("i.gguf", {**sums, **counts}, keys)
    return tmp_path / "m.gguf"


def test_dry_run_shows_what_the_imatrix_gives_each_tensor(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["convert", "m.gguf", "out.gguf", "--quantize", "q8_0", "--imatrix", "i.gguf"]
    status, out, _ = run_main(capsys, *argv, "--exclude-weights", "ffn", "--dry-run")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["name", "action", "type", "bytes", "bpw", "imatrix"]
    at = lines[0].index("imatrix")
    column = {line.split()[0]: line[at : at + 8].strip() for line in lines[1:5]}
    assert column == {
        "blk.0.attn_norm.weight": "-",
        "blk.0.attn_q.weight": "ignored",  # Q8_0 ignores the weights, as ggml does
        "blk.0.ffn_up.weight": "no entry",  # excluded
        "blk.1.attn_q.weight": "no entry",
    }
    assert lines[-2] == (
        "imatrix i.gguf: 1 of 2 entries kept, 5 chunks; tensors quantized: 1 ignored, 2 no entry"
    )
    status, out, _ = run_main(capsys, *argv, "--dry-run", "--json")
    steps = {t["name"]: t["imatrix"] for t in json.loads(out)["tensors"]}
    assert steps == {
        "blk.0.attn_norm.weight": None,
        "blk.0.attn_q.weight": "ignored",
        "blk.0.ffn_up.weight": "ignored",
        "blk.1.attn_q.weight": "no entry",
    }
    assert not os.path.exists("out.gguf")


def test_the_file_records_the_imatrix_as_typed(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typed = "./i.gguf"
    argv = ["convert", "m.gguf", "out.gguf", "--quantize", "q8_0", "--imatrix", typed, "--json"]
    status, out, _ = run_main(capsys, *argv, "--override-kv", "general.name=str:t")
    assert status == 0
    record = json.loads(out)
    assert (record["imatrix"], record["weighted"], record["quantized"]) == (typed, 0, 3)
    meta = read_gguf("out.gguf").metadata
    assert list(meta)[-6:] == [
        "general.file_type",
        "general.name",
        "quantize.imatrix.file",
        "quantize.imatrix.dataset",
        "quantize.imatrix.entries_count",
        "quantize.imatrix.chunks_count",
    ]
    assert meta["quantize.imatrix.file"] == typed
    assert meta["quantize.imatrix.dataset"] == "wiki.txt"
    assert meta.types["quantize.imatrix.entries_count"] == "uint32"
    assert (meta["quantize.imatrix.entries_count"], meta["quantize.imatrix.chunks_count"]) == (2, 5)
    status, out, _ = run_main(capsys, "convert", "m.gguf", "plain.gguf", "--quantize", "q8_0")
    assert out.endswith("3 quantized (Q8_0), 1 kept their type\n")
    plain = read_gguf("plain.gguf").metadata
    assert not any(key.startswith("quantize.") for key in plain)


@pytest.mark.parametrize(
    ("flags", "kind", "words"),
    [
        (
            [
                "--quantize",
                "q8_0",
                "--imatrix",
                "i.gguf",
                "--include-weights",
                "a",
                "--exclude-weights",
                "b",
            ],
            "USAGE",
            "--include-weights and --exclude-weights cannot be used together",
        ),
        (
            ["--quantize", "q8_0", "--include-weights", "attn"],
            "USAGE",
            "--include-weights: it selects entries of --imatrix FILE, not given",
        ),
        (["--imatrix", "i.gguf"], "USAGE", "--imatrix: llama-quantize's flags need --quantize"),
        (["--quantize", "q8_0", "--imatrix", "none.gguf"], "FILE", "cannot read 'none.gguf'"),
        (["--quantize", "iq2_xxs"], "TYPE", "pass imatrix= (--imatrix FILE)"),
        (
            ["--quantize", "iq2_xxs", "--imatrix", "i.gguf"],
            "TYPE",
            "the importance matrix (--imatrix) has none for it",
        ),
    ],
)
def test_refusals_write_nothing(
    model: Path, capsys: pytest.CaptureFixture[str], flags: list[str], kind: str, words: str
) -> None:
    status, out, err = run_main(capsys, "convert", "m.gguf", "out.gguf", *flags)
    assert (status, out) == (2, "")
    assert err.startswith(f"kiln-np: {kind}: ")
    assert words in err
    assert not os.path.exists("out.gguf")
