"""``kiln-np convert`` driven by the format table and its plan: ``--to`` and DST's
suffix from ``kiln_np.formats.FORMATS`` (Zarr among them), every format read as SRC,
and ``--dry-run [--json]``: each tensor's action and why, types, bytes and bits per
weight, the totals and the files it would write, nothing written, the refusals
unchanged, and only headers read (a 100-shard checkpoint).

In process through :func:`kiln_np.cli.main` (``run_main``).
"""

from __future__ import annotations

import json
import mmap
import os
import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import needs, run_main

import kiln_np
from kiln_np import Layout, Payload, formats
from kiln_np._convert.row import WeightFormat
from kiln_np.gguf import dequantize, quantize


def _given() -> dict[str, np.ndarray]:
    """Tensors of several widths, NaN and -0.0 included."""
    rng = np.random.default_rng(34)
    return {
        "a": rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16),
        "b": np.array([np.nan, -0.0, np.inf], np.float32),
        "c": np.arange(5, dtype=np.int64),
        "d": np.array([-128, 127], np.int8),
    }


def _payloads(path: str | Path) -> dict[str, bytes]:
    with kiln_np.open_weights(path) as w:
        return {name: bytes(t.payload().data) for name, t in w.items()}


def _bits(tensors: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {name: a.view(np.uint8).tobytes() for name, a in tensors.items()}


def _listing(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory``, by relative path, with its bytes."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- --to and suffixes from the table ---------------------------------------------------


def test_safetensors_to_zarr_by_suffix_and_back_is_byte_identical(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights("x.safetensors", _given(), format="safetensors", metadata={"k": "v"})
    status, out, err = run_main(capsys, "convert", "x.safetensors", "y.zarr")
    assert (status, err) == (0, "")
    assert out == "y.zarr: 4 tensors, 84 payload bytes, safetensors -> zarr\n"
    with kiln_np.open_weights("y.zarr") as w:
        assert (w.format, dict(w.metadata)) == ("zarr", {"k": "v"})
    assert (work / "y.zarr" / "zarr.json").is_file()
    assert _payloads("y.zarr") == _bits(_given())
    status, out, err = run_main(capsys, "convert", "y.zarr", "z.safetensors")
    assert (status, err) == (0, "")
    assert out == "z.safetensors: 4 tensors, 84 payload bytes, zarr -> safetensors\n"
    assert (work / "z.safetensors").read_bytes() == (work / "x.safetensors").read_bytes()


def test_to_zarr_writes_a_group_whatever_dst_is_called(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights("x.safetensors", _given(), format="safetensors")
    status, out, err = run_main(capsys, "convert", "x.safetensors", "plain", "--to", "zarr")
    assert (status, err, out) == (
        0,
        "",
        "plain: 4 tensors, 84 payload bytes, safetensors -> zarr\n",
    )
    with kiln_np.open_weights("plain") as w:
        assert w.format == "zarr"
    # a trailing slash names the directory too, and the suffix still says zarr
    status, out, _ = run_main(capsys, "convert", "x.safetensors", "slash.zarr/")
    assert status == 0
    assert _payloads("slash.zarr") == _payloads("plain") == _bits(_given())


def test_a_dst_no_suffix_names_is_usage_listing_the_table(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights("x.safetensors", _given(), format="safetensors")
    status, out, err = run_main(capsys, "convert", "x.safetensors", "out.bin")
    assert (status, out) == (2, "")
    suffixes = [f"*{s}" for r in formats.FORMATS if r.save is not None for s in r.suffixes]
    assert suffixes == ["*.zarr", "*.safetensors", "*.gguf"]
    assert "(only *.zarr, *.safetensors and *.gguf say it)" in err
    assert "pass --to kiln, zarr, safetensors, gguf or hf" in err
    assert os.listdir(".") == ["x.safetensors"]


WRITERS = [r for r in formats.FORMATS if r.save is not None and r.naming is None]
"""The writers that keep the tensors' names (hf: tests/formats/test_hf_export.py)."""


@pytest.mark.parametrize("row", WRITERS, ids=lambda r: r.name)
def test_every_writer_is_a_to_choice(
    row: WeightFormat, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights("x.safetensors", _given(), format="safetensors")
    status, out, err = run_main(capsys, "convert", "x.safetensors", "out", "--to", row.name)
    assert (status, err) == (0, "")
    assert out.startswith(f"out: 4 tensors, 84 payload bytes, safetensors -> {row.name}")
    with kiln_np.open_weights("out") as w:
        assert w.format == row.name
    assert _payloads("out") == _bits(_given())
    if row.suffixes:  # and its suffix names it
        dst = "by" + row.suffixes[0]
        assert run_main(capsys, "convert", "x.safetensors", dst)[0] == 0
        with kiln_np.open_weights(dst) as w:
            assert w.format == row.name


@pytest.mark.parametrize(
    "row", [r for r in formats.FORMATS if r.save is None], ids=lambda r: r.name
)
def test_a_format_without_a_writer_is_no_to_choice(
    row: WeightFormat, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights("x.safetensors", _given(), format="safetensors")
    status, out, err = run_main(capsys, "convert", "x.safetensors", "out", "--to", row.name)
    assert (status, out) == (2, "")
    assert f"invalid choice: '{row.name}'" in err
    assert os.listdir(".") == ["x.safetensors"]


def _onnx_source(path: Path, tensors: dict[str, np.ndarray]) -> None:
    import onnx

    from kiln_np import onnx as ko

    inits = [ko.from_numpy(a, name=name) for name, a in tensors.items()]
    graph = onnx.helper.make_graph([], "g", [], [], initializer=inits)
    onnx.save(onnx.helper.make_model(graph), path)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(r, marks=needs("onnx")) if r.save is None else r
        for r in formats.FORMATS
        if r.naming is None  # an hf directory is a safetensors checkpoint
    ],
    ids=lambda r: r.name,
)
def test_every_format_reads_as_src(
    row: WeightFormat, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = _given()
    src = "src" + (row.suffixes[0] if row.suffixes else "")
    if row.save is None:
        assert row.name == "onnx"
        _onnx_source(work / src, given)
    else:
        kiln_np.save_weights(src, given, format=row.name)
    with kiln_np.open_weights(src) as w:
        assert w.format == row.name
    status, out, err = run_main(capsys, "convert", src, "o.safetensors")
    assert (status, err) == (0, "")
    assert f"{row.name} -> safetensors" in out
    assert _payloads("o.safetensors") == _bits(given)


# -- --dry-run ---------------------------------------------------------------------


@pytest.fixture
def q8_gguf(work: Path) -> Path:
    """``m.gguf``: a Q8_0 tensor of 3 x 2 blocks and an F32 one (as test_convert_dequantize)."""
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (3, 2, 34), np.uint8)
    raw[..., :2] = rng.integers(0x1400, 0x2C00, (3, 2)).astype("<u2")[..., None].view(np.uint8)
    q = Payload(0x4708, memoryview(raw.tobytes()), (3, 2), Layout("ggml.q8_0", 34))
    tensors = {"blk.0.attn_q.weight": q, "norm": np.arange(4, dtype=np.float32)}
    kiln_np.save_weights("m.gguf", tensors, format="gguf")
    return work / "m.gguf"


def _documented_keys(section: str) -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    block = text.split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_dry_run_json_keys_are_the_documented_ones(
    q8_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["convert", "m.gguf", "o.gguf", "--dry-run", "--json"]
    record = json.loads(run_main(capsys, *argv)[1])
    assert list(record) == _documented_keys("convert-plan-json")
    assert list(record["tensors"][0]) == _documented_keys("convert-plan-tensor-json")
    assert list(record["totals"]) == [
        "tensors",
        "actions",
        "source_bytes",
        "target_bytes",
        "elements",
        "source_bpw",
        "target_bpw",
    ]


def _rows(text: str) -> list[list[str]]:
    """The table's rows, cells split on runs of two spaces or more."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[:-1]]


def test_dry_run_dequantize_text(q8_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _listing(q8_gguf.parent)
    argv = ["convert", "m.gguf", "o.safetensors", "--dequantize", "bf16", "--dry-run"]
    status, out, err = run_main(capsys, *argv)
    assert (status, err) == (0, "")
    assert _rows(out) == [
        ["name", "action", "type", "bytes", "bpw", "why"],
        [
            "blk.0.attn_q.weight",
            "dequantize",
            "ggml.q8_0 -> bf16",
            "204 B -> 384 B",
            "8.5 -> 16",
            "GGML Q8_0 blocks decoded (ggml's float32)",
        ],
        ["norm", "copy", "f32", "16 B", "32", "its bytes as they are"],
    ]
    assert out.splitlines()[-1] == (
        "2 tensors (1 dequantize, 1 copy), 220 B -> 400 B, 8.98 -> 16.33 bits per weight, "
        "gguf -> safetensors; would write o.safetensors"
    )
    assert _listing(q8_gguf.parent) == before  # nothing written


def test_dry_run_dequantize_json(q8_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _listing(q8_gguf.parent)
    argv = ["convert", "m.gguf", "o.safetensors", "--dequantize", "bf16", "--dry-run", "--json"]
    status, out, err = run_main(capsys, *argv)
    assert (status, err) == (0, "")
    assert json.loads(out) == {
        "format": "kiln-np-convert-plan/1",
        "input": "m.gguf",
        "output": "o.safetensors",
        "from": "gguf",
        "to": "safetensors",
        "tensors": [
            {
                "name": "blk.0.attn_q.weight",
                "action": "dequantize",
                "reason": "GGML Q8_0 blocks decoded (ggml's float32)",
                "source_type": "ggml.q8_0",
                "target_type": "bf16",
                "source_bytes": 3 * 2 * 34,
                "target_bytes": 3 * 64 * 2,
                "elements": 192,
                "source_bpw": 8.5,
                "target_bpw": 16.0,
                "imatrix": None,
            },
            {
                "name": "norm",
                "action": "copy",
                "reason": "its bytes as they are",
                "source_type": "f32",
                "target_type": "f32",
                "source_bytes": 16,
                "target_bytes": 16,
                "elements": 4,
                "source_bpw": 32.0,
                "target_bpw": 32.0,
                "imatrix": None,
            },
        ],
        "totals": {
            "tensors": 2,
            "actions": {"dequantize": 1, "copy": 1},
            "source_bytes": 220,
            "target_bytes": 400,
            "elements": 196,
            "source_bpw": round(8 * 220 / 196, 4),
            "target_bpw": round(8 * 400 / 196, 4),
        },
        "files": ["o.safetensors"],
        "metadata": "carried",
        "selection": None,
        "notes": [],
    }
    assert _listing(q8_gguf.parent) == before
    # the plan's sizes are what the conversion then writes
    status, out, _ = run_main(capsys, *argv[:-2])
    assert (status, out) == (
        0,
        "o.safetensors: 2 tensors, 400 payload bytes, gguf -> safetensors, 1 dequantized to bf16\n",
    )
    with kiln_np.open_weights("m.gguf") as src:
        want = dequantize(src["blk.0.attn_q.weight"], dtype=ml_dtypes.bfloat16)
    assert _payloads("o.safetensors")["blk.0.attn_q.weight"] == want.view(np.uint8).tobytes()


def _float_model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "blk.0.attn_q.weight": rng.standard_normal((4, 64)).astype(np.float32),
        "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float16),
        "blk.0.ffn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "odd": rng.standard_normal((2, 40)).astype(np.float32),
        "ids": np.arange(64, dtype=np.int32).reshape(2, 32),
    }


@pytest.fixture
def floats(work: Path) -> Path:
    kiln_np.save_weights("f.safetensors", _float_model(), format="safetensors")
    return work / "f.safetensors"


def test_dry_run_quantize_copy_and_keep_json(
    floats: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _listing(floats.parent)
    policy = "*norm*=f32,*=q8_0"  # globs alone: every tensor they can (no file type's mix)
    argv = ["convert", "f.safetensors", "o.gguf", "--quantize", policy, "--dry-run", "--json"]
    status, out, err = run_main(capsys, *argv)
    assert (status, err) == (0, "")  # no "kept" lines on stderr: that is the conversion's
    record = json.loads(out)
    steps = {t["name"]: t for t in record["tensors"]}
    assert list(steps) == [  # file order (safetensors: widest first, else as given)
        "blk.0.attn_q.weight",
        "blk.0.ffn_norm.weight",
        "odd",
        "ids",
        "blk.0.attn_norm.weight",
    ]
    got = {n: (t["action"], t["source_type"], t["target_type"]) for n, t in steps.items()}
    assert got == {
        "blk.0.attn_q.weight": ("quantize", "f32", "ggml.q8_0"),
        "blk.0.attn_norm.weight": ("quantize", "f16", "f32"),
        "blk.0.ffn_norm.weight": ("copy", "f32", "f32"),
        "odd": ("keep", "f32", "f32"),
        "ids": ("keep", "i32", "i32"),
    }
    q = steps["blk.0.attn_q.weight"]
    assert q["reason"] == "'*=Q8_0' of the policy"
    assert (q["source_bytes"], q["target_bytes"], q["elements"]) == (1024, 8 * 34, 256)
    assert (q["source_bpw"], q["target_bpw"]) == (32.0, 8.5)
    norm = steps["blk.0.attn_norm.weight"]
    assert norm["reason"] == "'*norm*=f32' of the policy"
    assert (norm["source_bytes"], norm["target_bytes"]) == (128, 256)
    assert (norm["source_bpw"], norm["target_bpw"]) == (16.0, 32.0)
    assert steps["odd"]["reason"] == (
        "rows of 40 elements are not a whole number of Q8_0 blocks (32 elements each)"
    )
    assert steps["ids"]["reason"] == (
        "i32 is not a float type: Q8_0 quantizes f32, f16, bf16 and f64 tensors"
    )
    assert steps["blk.0.ffn_norm.weight"]["reason"] == "'*norm*=f32' of the policy: already f32"
    totals = record["totals"]
    source = 1024 + 128 + 256 + 320 + 256
    target = 272 + 256 + 256 + 320 + 256
    assert totals == {
        "tensors": 5,
        "actions": {"quantize": 2, "copy": 1, "keep": 2},
        "source_bytes": source,
        "target_bytes": target,
        "elements": 256 + 64 + 64 + 80 + 64,
        "source_bpw": round(8 * source / 528, 4),
        "target_bpw": round(8 * target / 528, 4),
    }
    assert (record["files"], record["metadata"]) == (["o.gguf"], "carried")
    assert _listing(floats.parent) == before
    # what the conversion writes is what the plan said, byte for byte as gguf.quantize
    status, out, err = run_main(capsys, *argv[:-2])
    assert status == 0
    assert f"o.gguf: 5 tensors, {target} payload bytes" in out
    assert err.count("\n") == 2  # the two kept tensors
    given = _float_model()
    with kiln_np.open_weights("o.gguf") as w:
        sizes = {n: t.byte_length for n, t in w.items()}
        assert sizes == {n: t["target_bytes"] for n, t in steps.items()}
    got_bytes = _payloads("o.gguf")
    assert got_bytes["blk.0.attn_q.weight"] == bytes(
        quantize(given["blk.0.attn_q.weight"], "q8_0").data
    )


def test_dry_run_quantize_text(floats: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["convert", "f.safetensors", "o.gguf", "--quantize", "*norm*=f32,*=q8_0", "--dry-run"]
    status, out, err = run_main(capsys, *argv)
    assert (status, err) == (0, "")
    rows = _rows(out)
    assert rows[0] == ["name", "action", "type", "bytes", "bpw", "why"]
    assert rows[1] == [
        "blk.0.attn_q.weight",
        "quantize",
        "f32 -> ggml.q8_0",
        "1.00 KiB -> 272 B",
        "32 -> 8.5",
        "'*=Q8_0' of the policy",
    ]
    assert [r[:2] for r in rows[2:]] == [
        ["blk.0.ffn_norm.weight", "copy"],
        ["odd", "keep"],
        ["ids", "keep"],
        ["blk.0.attn_norm.weight", "quantize"],
    ]
    assert rows[3][2:5] == ["f32", "320 B", "32"]
    assert rows[5][2:5] == ["f16 -> f32", "128 B -> 256 B", "16 -> 32"]
    assert out.splitlines()[-1].startswith(
        "5 tensors (2 quantize, 1 copy, 2 keep), 1.94 KiB -> 1.33 KiB, 30.06 -> 20.61 bits "
        "per weight, safetensors -> gguf; would write o.gguf"
    )
    assert not (floats.parent / "o.gguf").exists()


def test_dry_run_files_of_splits_and_directories_as_dst_is_spelled(
    floats: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (floats.parent / "sub").mkdir()
    cases: list[tuple[list[str], list[str]]] = [
        (
            ["sub/s.gguf", "--max-shard-size", "1300"],
            ["sub/s-00001-of-00002.gguf", "sub/s-00002-of-00002.gguf"],
        ),
        (
            ["ck", "--to", "safetensors", "--max-shard-size", "1100"],
            [
                "ck/model-00001-of-00002.safetensors",
                "ck/model-00002-of-00002.safetensors",
                "ck/model.safetensors.index.json",
            ],
        ),
        (
            ["k/", "--to", "kiln", "--include", "odd", "--include", "ids"],
            ["k/0000_odd.kiln", "k/0001_ids.kiln", "k/manifest.json"],
        ),
        (
            ["m.zarr", "--include", "ids"],
            ["m.zarr/ids/zarr.json", "m.zarr/ids/c/0/0", "m.zarr/zarr.json"],
        ),
    ]
    for extra, files in cases:
        status, out, err = run_main(
            capsys, "convert", "f.safetensors", *extra, "--dry-run", "--json"
        )
        assert (status, err) == (0, ""), extra
        record = json.loads(out)
        assert sorted(record["files"]) == sorted(files), extra
        # the same files, once written (a directory's are inside it)
        status, _, _ = run_main(capsys, "convert", "f.safetensors", *extra)
        assert status == 0
        found = []
        for f in files:
            assert os.path.isfile(f), f
            found.append(f)
        assert found == files
    selected = json.loads(
        run_main(
            capsys, "convert", "f.safetensors", "x.gguf", "--include", "ids", "--dry-run", "--json"
        )[1]
    )
    assert selected["selection"] == {
        "include": ["ids"],
        "exclude": [],
        "selected": 1,
        "left_out": 4,
    }
    assert [t["name"] for t in selected["tensors"]] == ["ids"]


def test_dry_run_writes_nothing_and_still_refuses(
    q8_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights("f.safetensors", _float_model(), format="safetensors")
    before = _listing(q8_gguf.parent)
    refusals: list[tuple[list[str], str]] = [
        (
            ["f.safetensors", "o.safetensors", "--quantize", "q8_0"],
            "kiln-np: USAGE: --quantize writes GGML blocks, which safetensors cannot hold: "
            "convert to gguf or kiln\n",
        ),
        (
            ["m.gguf", "o.gguf", "--quantize", "q8_0", "--dequantize", "f32"],
            "kiln-np: USAGE: pass --quantize or --dequantize, not both",
        ),
        (
            ["m.gguf", "o.safetensors"],
            "kiln-np: TYPE: tensor 'blk.0.attn_q.weight': safetensors cannot hold GGML Q8_0 "
            "blocks ",
        ),
        (["m.gguf", "k", "--to", "kiln", "--max-shard-size", "64"], "kiln-np: TYPE: "),
        (["m.gguf", "m.gguf", "--to", "gguf"], "kiln-np: FILE: "),
        (["m.gguf", "o.gguf", "--include", "nothing*"], "kiln-np: TYPE: 'm.gguf': expected a "),
        (["m.gguf", "o.bin"], "kiln-np: USAGE: cannot tell the format to write from 'o.bin'"),
    ]
    for argv, message in refusals:
        for json_flag in ([], ["--json"]):
            status, out, err = run_main(capsys, "convert", *argv, "--dry-run", *json_flag)
            assert (status, out) == (2, ""), argv
            assert err.startswith(message), (argv, err)
            assert err.count("\n") == 1
    for argv in (
        ["m.gguf", "o.safetensors", "--dequantize", "f16"],
        ["f.safetensors", "o.gguf", "--quantize", "q4_k"],
        ["f.safetensors", "ck", "--to", "safetensors", "--max-shard-size", "600"],
        ["f.safetensors", "z.zarr"],
        ["m.gguf", "k", "--to", "kiln"],
    ):
        status, out, err = run_main(capsys, "convert", *argv, "--dry-run")
        assert (status, err) == (0, ""), argv
        assert "would write" in out
    assert _listing(q8_gguf.parent) == before
    assert sorted(os.listdir(q8_gguf.parent)) == ["f.safetensors", "m.gguf"]


def test_dry_run_refuses_writing_over_its_inputs(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The splits DST names are the input's own; a directory DST holds the input.
    kiln_np.save_weights(
        "s.gguf", {"a": np.zeros(8), "b": np.ones(8)}, format="gguf", max_shard_size=64
    )
    (work / "d").mkdir()
    kiln_np.save_weights("d/m.safetensors", _given(), format="safetensors")
    before = _listing(work)
    cases = [
        (
            ["s-00001-of-00002.gguf", "s.gguf", "--max-shard-size", "64"],
            f"kiln-np: FILE: cannot write {str(work / 's-00001-of-00002.gguf')!r}: it is the input "
            "file",
        ),
        (
            ["d/m.safetensors", "d", "--to", "kiln"],
            "kiln-np: FILE: cannot write 'd': it holds the input "
            f"{str(work / 'd' / 'm.safetensors')!r}",
        ),
    ]
    for argv, message in cases:
        for dry in (["--dry-run"], ["--dry-run", "--json"], ["--force"]):
            status, out, err = run_main(capsys, "convert", *argv, *dry)
            assert (status, out) == (2, ""), (argv, dry)
            assert err.startswith(message), (argv, dry, err)
    assert _listing(work) == before


# -- --dry-run reads headers only ---------------------------------------------------


def _rchar() -> int:
    """Bytes this process has read with read(2) and friends (copy_file_range too)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _metadata_bytes(directory: Path) -> int:
    """The index plus each shard's 8-byte size and JSON header."""
    total = 0
    for p in directory.iterdir():
        if p.name.endswith(".safetensors"):
            with open(p, "rb") as f:
                total += 8 + int.from_bytes(f.read(8), "little")
        else:
            total += p.stat().st_size
    return total


def test_dry_run_of_100_shards_reads_only_headers(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tensors = {f"layer.{i:03d}.weight": np.full((256, 256), i, np.float32) for i in range(100)}
    data = sum(a.nbytes for a in tensors.values())  # 100 x 256 KiB
    kiln_np.save_weights("ck", tensors, format="safetensors", max_shard_size=256 << 10)
    shards = sorted(p.name for p in (work / "ck").iterdir() if p.name.endswith(".safetensors"))
    assert len(shards) == 100
    headers = _metadata_bytes(work / "ck")
    assert headers < data // 1000
    argv = ["convert", "ck", "out.gguf", "--dry-run", "--json"]
    assert run_main(capsys, *argv)[0] == 0  # the imports a first run makes are not counted

    maps: list[Any] = []
    real_mmap = mmap.mmap

    def counting_mmap(*args: Any, **kwargs: Any) -> Any:
        maps.append(args)
        return real_mmap(*args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", counting_mmap)  # what MappedFile maps with
    # the guard sees a tensor's data being mapped
    with kiln_np.open_weights("ck") as w:
        assert bytes(w["layer.007.weight"].payload().data[:4]) == np.float32(7).tobytes()
    assert len(maps) == 1
    maps.clear()

    before = _rchar()
    status, out, err = run_main(capsys, *argv)
    read = _rchar() - before
    assert (status, err) == (0, "")
    record = json.loads(out)
    assert record["totals"]["source_bytes"] == data
    assert record["totals"]["actions"] == {"copy": 100}
    assert maps == []  # no tensor data mapped
    assert read < 2 * headers + 4096, (read, headers, data)
    assert not (work / "out.gguf").exists()

    # the measure sees data read: the conversion itself reads every byte
    before = _rchar()
    status, _, _ = run_main(capsys, *argv[:-2])
    read_by_convert = _rchar() - before
    assert status == 0
    assert read_by_convert >= data
    assert _payloads("out.gguf")["layer.042.weight"] == tensors["layer.042.weight"].tobytes()
