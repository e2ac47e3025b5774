"""The format table as data (``kiln_np.formats.FORMATS``, ``kiln_np._convert.row``):
a new format is one module plus one line in the table, and the Python doors of a
conversion plan (``plan_weights``, ``execute``) are ``save_weights`` itself.

The toy format below is built only from the kit a format adapter uses
(``Weights``, ``WeightTensor``, ``MappedFile``, ``payload_info``,
``TensorSource.write_to``, ``building_directory``): a directory ``NAME.toy``
holding ``toy.json`` (the tensors' names, codes, shapes and layouts) and one raw
file per tensor, its payload's bytes exactly.  Adding its row to the table makes
``kiln-np convert`` write it (``--to toy``, a ``.toy`` DST), read it as SRC and
plan it with ``--dry-run``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np import Layout, Payload, formats
from kiln_np._convert.plan import OptionsError, execute
from kiln_np._convert.row import WeightFormat
from kiln_np._convert.sources import Progress, TensorSource
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import payload_info
from kiln_np._core.table import Layout as KilnLayout
from kiln_np._files.io import building_directory
from kiln_np._weights.mapped import MappedFile
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

# -- the toy format: one module's worth -------------------------------------------

TOY_JSON = "toy.json"


def _toy_recognise(path: str, head: bytes | None, size: int) -> str | None:
    if head is None:  # a directory
        return path if os.path.isfile(os.path.join(path, TOY_JSON)) else None
    return os.path.dirname(path) if os.path.basename(path) == TOY_JSON else None


def open_toy(
    path: str, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    directory = os.path.realpath(path)
    with open(os.path.join(directory, TOY_JSON), encoding="utf-8") as f:
        doc = json.load(f)
    tensors, files = [], []
    for entry in doc["tensors"]:
        layout = None if entry["layout"] is None else KilnLayout(*entry["layout"])
        info = payload_info(entry["code"], tuple(entry["shape"]), layout)
        mapped = MappedFile.open(os.path.join(directory, entry["file"]))
        info.check_length(mapped.size, f"toy tensor {entry['name']!r}: ")
        label = layout.name if layout is not None else info.element.name
        tensors.append(WeightTensor(entry["name"], info, mapped, label))
        files.append(mapped)
    return Weights(tensors, format="toy", metadata={}, path=directory, files=files, opener=open_toy)


def _toy_files(directory: str) -> set[str] | None:
    """What a previous toy save left there (for ``building_directory``)."""
    try:
        with open(os.path.join(directory, TOY_JSON), encoding="utf-8") as f:
            return {TOY_JSON, *(e["file"] for e in json.load(f)["tensors"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def toy_paths(
    path: str, sources: Sequence[TensorSource], *, max_shard_size: int | None = None
) -> list[str]:
    return [
        *(os.path.join(path, f"{i}.bin") for i in range(len(sources))),
        os.path.join(path, TOY_JSON),
    ]


def save_toy(
    path: str,
    sources: Sequence[TensorSource],
    *,
    metadata: Mapping[str, Any] | None = None,
    source_format: str | None = None,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> list[str]:
    entries = []
    with building_directory(path, _toy_files) as tmp:
        for i, source in enumerate(sources):
            fd = os.open(os.path.join(tmp, f"{i}.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                source.write_to(fd, progress=progress)
            finally:
                os.close(fd)
            info = source.info
            layout = info.layout
            entries.append(
                {
                    "name": source.name,
                    "file": f"{i}.bin",
                    "code": int(info.code),
                    "shape": list(info.shape),
                    "layout": None if layout is None else [layout.name, layout.block_size],
                }
            )
        with open(os.path.join(tmp, TOY_JSON), "x", encoding="utf-8") as f:
            json.dump({"tensors": entries}, f)
    return [path]


TOY = WeightFormat(
    "toy",
    _toy_recognise,
    open_toy,
    save_toy,
    toy_paths,
    suffixes=(".toy",),
    folder=True,
    holds_blocks=True,
    carries=lambda metadata: False,
)

# -- tests ----------------------------------------------------------------------------


def _q8_0() -> Payload:
    """A Q8_0 payload of 2 x 2 blocks (scales of normal f16 values), seeded."""
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, (2, 2, 34), np.uint8)
    raw[..., :2] = rng.integers(0x1400, 0x2C00, (2, 2)).astype("<u2")[..., None].view(np.uint8)
    return Payload(0x4708, memoryview(raw.tobytes()), (2, 2), Layout("ggml.q8_0", 34))


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(34)
    return {
        "blk.0.attn_q.weight": rng.standard_normal((4, 64)).astype(np.float32),
        "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float16),
        "ids": np.arange(12, dtype=np.int32).reshape(3, 4),
        "nan": np.array([np.nan, -0.0, np.inf], np.float32),
    }


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> WeightFormat:
    """The toy row added to the table, in a clean working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(formats, "FORMATS", (*formats.FORMATS, TOY))
    return TOY


def _payloads(path: str | Path) -> dict[str, tuple[str, bytes]]:
    """Every tensor's Kiln type and payload bytes."""
    with kiln_np.open_weights(path) as w:
        out = {}
        for name, t in w.items():
            kind = t.info.layout.name if t.info.layout is not None else t.info.element.name
            out[name] = (kind, bytes(t.payload().data))
        return out


def _expected(tensors: Mapping[str, Any]) -> dict[str, tuple[str, bytes]]:
    out = {}
    for name, value in tensors.items():
        if isinstance(value, Payload):
            assert value.layout is not None
            out[name] = (value.layout.name, bytes(value.data))
        else:
            code = kiln_np.from_numpy(value)
            out[name] = (
                payload_info(code.code, code.shape).element.name,
                value.view(np.uint8).tobytes(),
            )
    return out


def test_the_toy_row_alone_is_not_in_the_table(tmp_path: Path) -> None:
    # Without the monkeypatch the CLI knows nothing of it: the test below is not vacuous.
    kiln_np.save_weights(tmp_path / "s.safetensors", _tensors(), format="safetensors")
    assert "toy" not in [r.name for r in formats.FORMATS]
    with pytest.raises(KilnError) as info:
        kiln_np.save_weights(tmp_path / "t", _tensors(), format="toy")
    assert info.value.kind == "TYPE"


def test_a_new_format_is_one_row_convert_into_it_by_to_and_by_suffix(
    toy: WeightFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    given = _tensors()
    kiln_np.save_weights("s.safetensors", given, format="safetensors", metadata={"a": "b"})
    status, out, err = run_main(capsys, "convert", "s.safetensors", "plain", "--to", "toy")
    assert (status, err) == (0, "")
    assert out.startswith("plain: 4 tensors, ")
    assert "safetensors -> toy; safetensors metadata not carried" in out
    assert sorted(os.listdir("plain")) == ["0.bin", "1.bin", "2.bin", "3.bin", TOY_JSON]
    status, out, err = run_main(capsys, "convert", "s.safetensors", "m.toy")
    assert (status, err) == (0, "")
    assert out.startswith("m.toy: 4 tensors, ")
    for written in ("plain", "m.toy"):
        with kiln_np.open_weights(written) as w:
            assert w.format == "toy"
        assert _payloads(written) == _payloads("s.safetensors") == _expected(given)
    # the toy.json file itself opens the directory, as manifest.json does a Kiln one
    assert _payloads(os.path.join("m.toy", TOY_JSON)) == _expected(given)


def test_a_new_format_is_one_row_convert_out_of_it(
    toy: WeightFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    q8 = _q8_0()
    given: dict[str, Any] = {**_tensors(), "q": q8}
    save_toy(os.path.abspath("src.toy"), [*_sources(given)])
    # out of it into safetensors, the GGML blocks dequantized on the way
    status, out, err = run_main(
        capsys, "convert", "src.toy", "o.safetensors", "--dequantize", "f32", "--exclude", "q"
    )
    assert (status, err) == (0, "")
    assert "4 of 5 tensors" in out
    assert "toy -> safetensors" in out
    want = _expected(_tensors())
    assert _payloads("o.safetensors") == want
    # and into GGUF, which keeps the blocks as they are
    status, out, err = run_main(capsys, "convert", "src.toy", "o.gguf", "--exclude", "nan")
    assert (status, err) == (0, "")
    got = _payloads("o.gguf")
    assert got["q"] == ("ggml.q8_0", bytes(q8.data))
    assert got["blk.0.attn_q.weight"] == want["blk.0.attn_q.weight"]


def _sources(tensors: Mapping[str, Any]) -> list[TensorSource]:
    from kiln_np._convert.sources import tensor_sources

    return tensor_sources(tensors)


def test_a_new_format_is_one_row_dry_run_and_plan(
    toy: WeightFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights("s.gguf", {"w": np.ones((2, 64), "<f4"), "q": _q8_0()}, format="gguf")
    before = sorted(os.listdir("."))
    status, out, err = run_main(
        capsys, "convert", "s.gguf", "o.toy", "--quantize", "*=q8_0", "--dry-run", "--json"
    )
    assert (status, err) == (0, "")
    record = json.loads(out)
    assert (record["from"], record["to"], record["metadata"]) == ("gguf", "toy", "dropped")
    assert [
        (t["name"], t["action"], t["target_type"], t["target_bpw"]) for t in record["tensors"]
    ] == [
        ("w", "quantize", "ggml.q8_0", 8.5),
        ("q", "keep", "ggml.q8_0", 8.5),
    ]
    assert record["files"] == ["o.toy/0.bin", "o.toy/1.bin", "o.toy/toy.json"]
    assert sorted(os.listdir(".")) == before  # nothing written
    # the Python door plans it too, and executing the plan writes what save_weights does
    plan = formats.plan_weights(
        "p.toy", {"w": np.ones((2, 64), "<f4")}, format="toy", quantize="*=q8_0"
    )
    assert [(s.action, s.target_type, s.target_bytes) for s in plan.steps] == [
        ("quantize", "ggml.q8_0", 136)
    ]
    assert plan.outputs == [os.path.abspath("p.toy/0.bin"), os.path.abspath("p.toy/toy.json")]
    assert execute(plan) == [os.path.abspath("p.toy")]
    kiln_np.save_weights("r.toy", {"w": np.ones((2, 64), "<f4")}, format="toy", quantize="*=q8_0")
    assert _tree("p.toy") == _tree("r.toy")
    assert _payloads("p.toy")["w"] == (
        "ggml.q8_0",
        bytes(kiln_np.gguf.quantize(np.ones((2, 64), "<f4"), "q8_0").data),
    )


# -- the Python doors: plan_weights, execute, save_weights ------------------------------


def _tree(path: str | Path) -> dict[str, bytes]:
    """Every file under ``path`` (or the file itself) by relative path, with its bytes."""
    path = Path(path)
    if path.is_file():
        return {".": path.read_bytes()}
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


WRITERS = [row for row in formats.FORMATS if row.save is not None and row.naming is None]
"""The writers that keep the tensors' names (hf renames a GGUF's through the model
map: ``tests/formats/test_hf_export.py``)."""


def _target(row: WeightFormat, stem: str) -> str:
    return stem + (row.suffixes[0] if row.suffixes else "")


@pytest.mark.parametrize("row", WRITERS, ids=lambda r: r.name)
def test_plan_weights_steps_and_paths_and_execute_is_save_weights(
    row: WeightFormat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    given = _tensors()
    plan = formats.plan_weights(_target(row, "a"), given, format=row.name)
    assert plan.row is row
    assert [(s.name, s.action, s.source_type, s.target_type) for s in plan.steps] == [
        ("blk.0.attn_q.weight", "copy", "f32", "f32"),
        ("blk.0.attn_norm.weight", "copy", "f16", "f16"),
        ("ids", "copy", "i32", "i32"),
        ("nan", "copy", "f32", "f32"),
    ]
    assert [s.source_bytes for s in plan.steps] == [s.target_bytes for s in plan.steps]
    assert [s.target_bytes for s in plan.steps] == [v.nbytes for v in given.values()]
    assert [s.elements for s in plan.steps] == [v.size for v in given.values()]
    assert plan.totals() == {
        "tensors": 4,
        "actions": {"copy": 4},
        "source_bytes": 1024 + 128 + 48 + 12,
        "target_bytes": 1212,
        "elements": 256 + 64 + 12 + 3,
        "source_bpw": round(8 * 1212 / 335, 4),
        "target_bpw": round(8 * 1212 / 335, 4),
    }
    target = os.path.abspath(_target(row, "a"))
    assert all(os.path.isabs(p) for p in plan.paths)
    if row.folder:
        assert all(p.startswith(target + os.sep) for p in plan.paths)
    else:
        assert list(plan.paths) == [target]
    assert plan.outputs == formats.save_weights_paths(_target(row, "a"), given, format=row.name)
    assert os.listdir(".") == []  # planning writes nothing
    assert execute(plan) == [target]
    written = sorted(str(p) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(plan.outputs)  # the plan named every file it wrote
    kiln_np.save_weights(_target(row, "b"), given, format=row.name)
    assert _tree(_target(row, "a")) == _tree(_target(row, "b"))
    assert _payloads(_target(row, "a")) == _expected(given)


@pytest.mark.parametrize("row", [r for r in WRITERS if r.holds_blocks], ids=lambda r: r.name)
def test_quantize_plan_executed_is_save_weights_byte_for_byte(
    row: WeightFormat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    floats = _tensors()
    del floats["nan"]  # a NaN cannot be quantized
    given: dict[str, Any] = {**floats, "q": _q8_0()}
    policy = "*norm*=f32,*=q8_0"
    plan = formats.plan_weights(_target(row, "a"), given, format=row.name, quantize=policy)
    steps = [(s.name, s.action, s.source_type, s.target_type, s.target_bytes) for s in plan.steps]
    assert steps == [
        ("blk.0.attn_q.weight", "quantize", "f32", "ggml.q8_0", 4 * 2 * 34),
        ("blk.0.attn_norm.weight", "quantize", "f16", "f32", 256),
        ("ids", "keep", "i32", "i32", 48),
        ("q", "keep", "ggml.q8_0", "ggml.q8_0", 4 * 34),
    ]
    assert plan.steps[1].reason == "'*norm*=f32' of the policy"
    assert plan.steps[2].reason.startswith("i32 is not a float type")
    assert plan.steps[3].reason == "already GGML Q8_0 blocks (kiln_np does not requantize)"
    assert plan.steps[0].record()["target_bpw"] == 8.5
    assert execute(plan) == [os.path.abspath(_target(row, "a"))]
    kiln_np.save_weights(_target(row, "b"), given, format=row.name, quantize=policy)
    assert _tree(_target(row, "a")) == _tree(_target(row, "b"))
    got = _payloads(_target(row, "a"))
    want = kiln_np.gguf.quantize(floats["blk.0.attn_q.weight"], "q8_0")
    assert got["blk.0.attn_q.weight"] == ("ggml.q8_0", bytes(want.data))
    norm = floats["blk.0.attn_norm.weight"].astype(np.float32)
    assert got["blk.0.attn_norm.weight"] == ("f32", norm.view(np.uint8).tobytes())


@pytest.mark.parametrize("row", WRITERS, ids=lambda r: r.name)
def test_refusals_raise_before_anything_is_written(
    row: WeightFormat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    given = {**_tensors(), "q": _q8_0()}
    target = _target(row, "a")
    with pytest.raises(OptionsError) as both:
        formats.plan_weights(target, given, format=row.name, dequantize="f32", quantize="q8_0")
    assert both.value.kind == "TYPE"
    assert "expected dequantize or quantize, not both" in str(both.value)
    assert both.value.usage.startswith("pass --quantize or --dequantize, not both")
    if row.holds_blocks:
        plan = formats.plan_weights(target, given, format=row.name)
        assert plan.steps[-1][:4] == ("q", "copy", "its bytes as they are", "ggml.q8_0")
    else:
        with pytest.raises(OptionsError) as quantize:
            formats.plan_weights(target, given, format=row.name, quantize="q8_0")
        assert quantize.value.kind == "TYPE"
        assert f"for {row.name!r}" in str(quantize.value)
        assert quantize.value.usage == (
            f"--quantize writes GGML blocks, which {row.name} cannot hold: convert to gguf or kiln"
        )
        with pytest.raises(KilnError) as blocks:  # the format's own refusal: not an option's
            formats.plan_weights(target, given, format=row.name)
        assert not isinstance(blocks.value, OptionsError)
        assert blocks.value.kind == "TYPE"
        assert "tensor 'q'" in str(blocks.value)
        with pytest.raises(KilnError):
            kiln_np.save_weights(target, given, format=row.name)
    if not row.shards:
        with pytest.raises(KilnError) as shards:
            formats.plan_weights(target, given, format=row.name, max_shard_size=64)
        assert shards.value.kind == "TYPE"
        assert "max_shard_size" in str(shards.value)
    with pytest.raises(KilnError) as malformed:
        formats.plan_weights(target, given, format=row.name, dequantize="f8")
    assert malformed.value.kind == "TYPE"
    assert "expected dequantize to be 'f32', 'bf16', 'f16' or None" in str(malformed.value)
    assert os.listdir(".") == []


def test_a_format_without_a_writer_is_refused_by_plan_weights(tmp_path: Path) -> None:
    readers = [r.name for r in formats.FORMATS if r.save is None]
    assert readers == ["onnx"]
    with pytest.raises(KilnError) as info:
        formats.plan_weights(tmp_path / "m.onnx", {}, format="onnx")
    assert info.value.kind == "TYPE"
    assert "'onnx'" in str(info.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("format", ["safetensors", "gguf"])
def test_max_shard_size_reads_the_command_lines_sizes(tmp_path: Path, format: str) -> None:
    # Issue 36 item 10: save_weights(max_shard_size="50MB") was refused while the
    # CLI took the same string; one size grammar serves both.
    tensors = {"a": np.zeros(8), "b": np.zeros(8)}  # 64 bytes each
    by_text = kiln_np.save_weights(tmp_path / "t", tensors, format=format, max_shard_size="64B")
    by_int = kiln_np.save_weights(tmp_path / "i", tensors, format=format, max_shard_size=64)
    assert len(by_text) == len(by_int)
    listed = kiln_np.formats.save_weights_paths(
        tmp_path / "p", tensors, format=format, max_shard_size="0.064KB"
    )
    assert [os.path.basename(p) for p in listed] == [
        os.path.basename(p)
        for p in kiln_np.formats.save_weights_paths(
            tmp_path / "p", tensors, format=format, max_shard_size=64
        )
    ]
    for text, found in (("5Gb", "a lowercase b means bits"), ("0", "at least 1 byte")):
        with pytest.raises(KilnError, match=found) as info:
            kiln_np.save_weights(tmp_path / "x", tensors, format=format, max_shard_size=text)
        assert info.value.kind == "TYPE"
    assert not (tmp_path / "x").exists()
