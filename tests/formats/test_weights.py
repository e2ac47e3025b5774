"""open_weights / save_weights: recognising formats through the format table,
ONNX and GGUF through the one door, save_weights' arguments, the docs' format table."""

from __future__ import annotations

import ast
import os
import pickle
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, needs, optional, payload_bytes, raises_kind

import kiln_np
from kiln_np import Layout, Payload
from kiln_np import gguf as kgguf
from kiln_np import onnx as konnx

if TYPE_CHECKING:
    import gguf
    import onnx
    from onnx import numpy_helper
else:
    gguf = optional("gguf")
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")


# ------------------------------------------------------------- recognising formats


def test_unknown_file_shows_its_first_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(range(0x20, 0x40)))
    err = raises_kind("TYPE", kiln_np.open_weights, path)
    assert "20 21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f ..." in str(err)
    path.write_bytes(b"")
    assert "an empty file" in str(raises_kind("TYPE", kiln_np.open_weights, path))
    # 8 bytes of size that do not fit the file are not safetensors
    path.write_bytes((100).to_bytes(8, "little") + b"{}")
    raises_kind("TYPE", kiln_np.open_weights, path)
    assert "neither" in str(raises_kind("TYPE", kiln_np.open_weights, tmp_path))


def test_paths_that_are_not_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        kiln_np.open_weights(tmp_path / "missing.safetensors")
    os.mkfifo(tmp_path / "fifo")
    assert "FIFO" in str(raises_kind("TYPE", kiln_np.open_weights, tmp_path / "fifo"))
    raises_kind("TYPE", kiln_np.open_weights, 3)
    raises_kind("TYPE", kiln_np.open_weights, tmp_path, verify=1)


def test_each_format_is_recognised(tmp_path: Path) -> None:
    arr = np.arange(4, dtype=np.float32)
    kiln_np.save_weights(tmp_path / "a.bin", {"w": arr}, format="safetensors")
    kiln_np.save_weights(tmp_path / "b.bin", {"w": arr}, format="gguf")
    kiln_np.save_weights(tmp_path / "c", {"w": arr}, format="kiln")
    graph = onnx.helper.make_graph(
        [], "g", [], [], initializer=[numpy_helper.from_array(arr, name="w")]
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "d.json", format="protobuf")
    found = {}
    for name in ("a.bin", "b.bin", "c", "c/manifest.json", "d.json"):
        with kiln_np.open_weights(tmp_path / name) as w:
            found[name] = w.format
            assert bits(w["w"].numpy()) == bits(arr)
    assert found == {
        "a.bin": "safetensors",
        "b.bin": "gguf",
        "c": "kiln",
        "c/manifest.json": "kiln",
        "d.json": "onnx",
    }


@needs("onnx")
def test_a_file_that_starts_like_onnx_but_is_not(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x08\x07\x12\xff\xff\xff")
    err = raises_kind("TYPE", kiln_np.open_weights, path)
    assert "08 07 12 ff" in str(err)


# ---------------------------------------------------------------------------- ONNX


def test_onnx_as_model_to_kiln_gives_it(tmp_path: Path) -> None:
    tensors = [
        numpy_helper.from_array(np.arange(6, dtype=np.float16).reshape(2, 3), name="h"),
        numpy_helper.from_array(np.array([1 + 2j], np.complex64), name="c"),
        numpy_helper.from_array(np.array([True, False]), name="b"),
    ]
    graph = onnx.helper.make_graph([], "g", [], [], initializer=tensors)
    model = onnx.helper.make_model(graph, producer_name="me")
    onnx.save(model, tmp_path / "m.onnx")
    with kiln_np.open_weights(tmp_path / "m.onnx") as w:
        assert w.format == "onnx"
        assert w.metadata["producer_name"] == "me"
        assert [t.format_dtype for t in w.values()] == ["FLOAT16", "COMPLEX64", "BOOL"]
        for (name, p), t in zip(konnx.model_to_kiln(model), w.values(), strict=True):
            assert (name, p.code, p.shape, p.layout, bytes(p.data)) == (
                t.name,
                t.code,
                t.shape,
                t.layout,
                bytes(t.payload().data),
            )
        # and the complex tensor goes to safetensors C64
        kiln_np.save_weights(tmp_path / "c.st", w, format="safetensors")
    with kiln_np.open_weights(tmp_path / "c.st") as s:
        assert s["c"].format_dtype == "C64"


# ---------------------------------------------------------------------------- GGUF


def test_reads_what_gguf_py_writes(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("n", 7)
    writer.add_array("tokens", ["a", "b", "c"])
    f32 = np.arange(64, dtype=np.float32).reshape(2, 32)
    writer.add_tensor("w", f32)
    q = np.arange(36, dtype=np.uint8).reshape(2, 18)
    writer.add_tensor("q", q, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with kiln_np.open_weights(path) as w:
        assert w.format == "gguf"
        assert w.metadata["n"] == 7
        assert cast(Any, w.metadata).types["n"] == "uint32"
        assert bits(w["w"].numpy()) == bits(f32)
        t = w["q"]
        assert (t.code, t.info.shape, t.layout, t.format_dtype) == (
            0x4702,
            (2, 1),
            Layout("ggml.q4_0", 18),
            "Q4_0",
        )
        assert bytes(t.payload().data) == q.tobytes()


def test_gguf_to_kiln_dir_to_gguf_keeps_key_types_and_bits(tmp_path: Path) -> None:
    metadata = {
        "general.alignment": np.uint32(64),
        "snan": np.array([0x7F800001], np.uint32).view("<f4")[0],
        "i8": np.int8(-3),
        "u64": np.uint64(2**64 - 1),
        "flag": False,
        "name": "caf\udcc3",  # bytes that are not UTF-8 survive as surrogates
        "tokens": ["a", "bb", ""],
        "scores": np.array([-0.0, np.inf], np.float32),
        "nested": [np.array([1, 2], np.int32), np.array([3], np.int32)],
        "empty": [],
    }
    types = {"empty": "array[int16]"}
    tensors = {
        "f": np.array([[0x7F800001, 0x80000000]], np.uint32).view("<f4"),
        "h": np.ones((3, 2), np.float16),
        "s": np.array(2.5, np.float64),
        "q": Payload(0x4708, memoryview(bytes(range(68))), (2, 1), Layout("ggml.q8_0", 34)),
    }
    kgguf.save_gguf(tmp_path / "a.gguf", tensors, metadata, metadata_types=types)
    with kiln_np.open_weights(tmp_path / "a.gguf") as a:
        kiln_np.save_weights(tmp_path / "dir", a, format="kiln", metadata=a.metadata)
        types_a = dict(cast(Any, a.metadata).types)
        values_a = {k: a.metadata[k] for k in a.metadata}
    with kiln_np.open_weights(tmp_path / "dir") as d:
        kiln_np.save_weights(tmp_path / "b.gguf", d, format="gguf", metadata=d.metadata)
    b = kgguf.read_gguf(tmp_path / "b.gguf")
    assert dict(b.metadata.types) == types_a
    assert b.metadata.types["empty"] == "array[int16]"
    for key, value in values_a.items():
        got = b.metadata[key]
        assert type(got) is type(value), key
        if isinstance(value, (list, kgguf.GGUFArrays)):  # arrays of arrays read as GGUFArrays
            assert [bits(v) for v in got] == [bits(v) for v in value], key
        else:
            assert bits(np.asarray(got)) == bits(np.asarray(value)), key
    with kiln_np.open_weights(tmp_path / "b.gguf") as w:
        for name, value in tensors.items():
            assert bytes(w[name].payload().data) == payload_bytes(value)
    # and gguf-py itself reads the signalling NaN's bits
    field = gguf.GGUFReader(tmp_path / "b.gguf").fields["snan"]
    assert bytes(field.parts[-1]).hex() == "0100807f"


def test_gguf_refuses_e2m1(tmp_path: Path) -> None:
    fp4 = np.zeros(4, ml_dtypes.float4_e2m1fn)
    err = raises_kind(
        "TYPE",
        kiln_np.save_weights,
        tmp_path / "m.gguf",
        {"a": np.ones(2, np.float32), "x": fp4},
        format="gguf",
    )
    assert "'x'" in str(err)
    assert "e2m1" in str(err)
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------- save_weights


def test_save_weights_checks_its_arguments(tmp_path: Path) -> None:
    t = {"a": np.ones(2)}
    assert "format" in str(
        raises_kind("TYPE", kiln_np.save_weights, tmp_path / "x", t, format="npz")
    )
    raises_kind("TYPE", kiln_np.save_weights, tmp_path / "x", [np.ones(2)], format="kiln")
    raises_kind("TYPE", kiln_np.save_weights, tmp_path / "x", {1: np.ones(2)}, format="kiln")
    raises_kind("TYPE", kiln_np.save_weights, tmp_path / "x", {"a": "text"}, format="kiln")
    raises_kind("TYPE", kiln_np.save_weights, tmp_path / "x", {"a": np.array(["s"])}, format="kiln")
    raises_kind("TYPE", kiln_np.save_weights, tmp_path / "x", t, format="kiln", max_shard_size=10)
    raises_kind(
        "TYPE", kiln_np.save_weights, tmp_path / "x", t, format="safetensors", max_shard_size=0
    )
    raises_kind(
        "TYPE", kiln_np.save_weights, tmp_path / "x", t, format="kiln", metadata={"a": object()}
    )
    assert os.listdir(tmp_path) == []


def test_progress_counts_every_payload_byte(tmp_path: Path) -> None:
    tensors = {"a": np.ones(1000), "b": np.ones(3, np.int8)}
    for fmt in ("safetensors", "kiln"):
        seen: list[int] = []
        kiln_np.save_weights(tmp_path / fmt, tensors, format=fmt, progress=seen.append)
        assert sum(seen) == 8003
        with kiln_np.open_weights(tmp_path / fmt) as w:
            seen.clear()
            kiln_np.save_weights(tmp_path / (fmt + "2"), w, format=fmt, progress=seen.append)
            assert sum(seen) == 8003


# ------------------------------------------------------------------------- the docs


def test_weights_md_safetensors_table_is_the_code_table() -> None:
    from kiln_np import safetensors as kst
    from kiln_np._core.table import code_label

    text = (Path(__file__).resolve().parents[2] / "docs" / "weights.md").read_text()
    block = text.split("<!-- safetensors-dtypes")[1].split("<!-- /safetensors-dtypes -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("| ") and "---" not in line]
    expected = ["| safetensors | bits | Kiln code | layout |"]
    for r in kst.DTYPES:
        if r.layout is None:
            code = f"{int(r.code)} ({code_label(int(r.code)).split('(')[1][:-1]})"
            expected.append(f"| {r.name} | {r.bits} | {code} | |")
        else:
            layout = f"`{r.layout.name}`, {r.layout.block_size}-byte blocks"
            expected.append(f"| {r.name} | {r.bits} | 0x{int(r.code):04x} | {layout} |")
    assert rows == expected
    for name in kst.REFUSED:
        assert f"**{name}" in text or f", {name}**" in text, name


def _detection_order(text: str) -> list[str]:
    """The format names of a numbered list ``1. `kiln`: ...`` (or ``1. ``kiln``: ...``)."""
    return re.findall(r"^\d+\. ``?(\w+)``?:", text, re.MULTILINE)


def test_detection_order_is_the_format_table() -> None:
    # docs/weights.md and the docstring of kiln_np.formats list the rows of FORMATS, in order.
    from kiln_np import formats

    names = [f.name for f in formats.FORMATS]
    assert names == ["kiln", "zarr", "safetensors", "gguf", "onnx", "hf"]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "weights.md").read_text()
    opening = doc.split("## Opening")[1].split("\n## ")[0]
    assert _detection_order(opening) == names
    assert _detection_order(formats.__doc__ or "") == names
    assert {f.name for f in formats.FORMATS if f.save} == {
        "safetensors",
        "gguf",
        "kiln",
        "zarr",
        "hf",
    }


def test_weights_pickle_as_the_format_that_opened_them(tmp_path: Path) -> None:
    arr = np.arange(4, dtype=np.float32)
    kiln_np.save_weights(tmp_path / "a.st", {"w": arr}, format="safetensors")
    kiln_np.save_weights(tmp_path / "b.gguf", {"w": arr}, format="gguf")
    kiln_np.save_weights(tmp_path / "c", {"w": arr}, format="kiln")
    kiln_np.save_weights(tmp_path / "d", {"w": arr}, format="safetensors", max_shard_size=8)
    graph = onnx.helper.make_graph([], "g", [], [], [numpy_helper.from_array(arr, name="w")])
    onnx.save(onnx.helper.make_model(graph), tmp_path / "e.onnx")
    for name in ("a.st", "b.gguf", "c", "d", "e.onnx"):
        with kiln_np.open_weights(tmp_path / name, verify=True) as w:
            again = pickle.loads(pickle.dumps(w))
        with again:
            assert (again.format, again.path, list(again)) == (w.format, w.path, list(w))
            assert bits(again["w"].numpy()) == bits(arr)


def test_formats_import_the_kit_and_never_the_dispatch() -> None:
    # The kit names no format; a format imports neither the dispatch nor another format.
    src = Path(kiln_np.__file__).parent
    formats = {"gguf", "safetensors", "kilndir", "onnx"}
    for path in sorted(src.glob("_weights/*.py")) + sorted(
        p for f in formats for p in [*src.glob(f"{f}/*.py"), *src.glob(f"{f}.py")]
    ):
        own = path.relative_to(src).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                imported = {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
                if parts[0] == "kiln_np":
                    assert "formats" not in imported, path
                    assert not imported & (formats - {own}), path
                    if own == "_weights":
                        assert not imported & formats, path
