"""open_weights / save_weights: recognising formats, the tensor and mapping
classes (laziness, closing, pickling by reference), the Kiln payload
directory, ONNX and GGUF through the one door, typed metadata."""

from __future__ import annotations

import ast
import json
import os
import pickle
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, optional
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import KilnError, Layout, Payload, Weights, WeightTensor
from kiln_np import gguf as kgguf
from kiln_np import onnx as konnx
from kiln_np._weights import metadata
from kiln_np._weights.metadata import decode_metadata, encode_metadata

if TYPE_CHECKING:
    import gguf
    import onnx
    from onnx import numpy_helper
else:
    gguf = optional("gguf")
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")


def _raise(kind: str, call: Any, *args: Any, **kwargs: Any) -> KilnError:
    with pytest.raises(KilnError) as info:
        call(*args, **kwargs)
    assert info.value.kind == kind, str(info.value)
    return info.value


def every_code() -> dict[str, Any]:
    """One tensor per closed code, an opaque one, odd shapes, empties, scalars."""
    rng = np.random.default_rng(5)
    tensors: dict[str, Any] = {}
    for row in kiln_np.DTYPES:
        if row.packed:
            raw = rng.integers(0, 16, 7, dtype=np.uint8)
            tensors[row.name] = raw.view(row.dtype)
        elif row.name == "bool":
            tensors[row.name] = rng.integers(0, 2, (2, 3)).astype(bool)
        else:
            raw = rng.integers(0, 256, 6 * row.dtype.itemsize, dtype=np.uint8)
            tensors[row.name] = raw.view(row.dtype).reshape(3, 2)
    tensors["empty"] = np.zeros((0, 4), np.float32)
    tensors["scalar"] = np.array(-0.0, np.float64)
    tensors["snan"] = np.array([0x7F800001, 0xFFC00001], np.uint32).view("<f4")
    tensors["q4"] = Payload(0x4702, memoryview(bytes(range(36))), (2, 1), Layout("ggml.q4_0", 18))
    return tensors


def payload_bytes(value: Any) -> bytes:
    if isinstance(value, Payload):
        return bytes(value.data)
    return bytes(kiln_np.from_numpy(value).data)


# ------------------------------------------------------------- recognising formats


def test_unknown_file_shows_its_first_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(range(0x20, 0x40)))
    err = _raise("TYPE", kiln_np.open_weights, path)
    assert "20 21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f ..." in str(err)
    path.write_bytes(b"")
    assert "an empty file" in str(_raise("TYPE", kiln_np.open_weights, path))
    # 8 bytes of size that do not fit the file are not safetensors
    path.write_bytes((100).to_bytes(8, "little") + b"{}")
    _raise("TYPE", kiln_np.open_weights, path)
    assert "neither" in str(_raise("TYPE", kiln_np.open_weights, tmp_path))


def test_paths_that_are_not_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        kiln_np.open_weights(tmp_path / "missing.safetensors")
    os.mkfifo(tmp_path / "fifo")
    assert "FIFO" in str(_raise("TYPE", kiln_np.open_weights, tmp_path / "fifo"))
    _raise("TYPE", kiln_np.open_weights, 3)
    _raise("TYPE", kiln_np.open_weights, tmp_path, verify=1)


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


def test_a_file_that_starts_like_onnx_but_is_not(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x08\x07\x12\xff\xff\xff")
    err = _raise("TYPE", kiln_np.open_weights, path)
    assert "08 07 12 ff" in str(err)


# --------------------------------------------------------------- tensors and maps


def test_public_names() -> None:
    for obj in (kiln_np.open_weights, kiln_np.save_weights, Weights, WeightTensor):
        assert obj.__module__ == "kiln_np"


def test_weights_is_a_read_only_mapping(tmp_path: Path) -> None:
    kiln_np.save_weights(
        tmp_path / "a.st", {"b": np.ones(1), "a": np.ones(2)}, format="safetensors"
    )
    w = kiln_np.open_weights(tmp_path / "a.st")
    assert list(w) == ["b", "a"]
    assert len(w) == 2
    assert "a" in w
    assert cast(Any, 3) not in w
    assert w.byte_length == 24
    with pytest.raises(TypeError):
        w["c"] = w["a"]  # type: ignore[index]
    with pytest.raises(TypeError):
        w.metadata["x"] = "y"  # type: ignore[index]
    assert repr(w).startswith("Weights('safetensors', ")
    assert pickle.loads(pickle.dumps(w)).keys() == w.keys()


def test_tensor_attributes_and_array(tmp_path: Path) -> None:
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    kiln_np.save_weights(tmp_path / "a.st", {"w": arr}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        t = w["w"]
        assert (t.name, t.code, t.shape, t.layout, t.byte_length) == ("w", 10, (2, 3), None, 12)
        assert t.path == str(tmp_path / "a.st")
        assert t.offset % 8 == 0
        view = np.asarray(t)
        assert not view.flags.writeable
        assert bits(view) == bits(arr)
        assert np.asarray(t, dtype=np.float64).dtype == np.float64
        copied = np.array(t, copy=True)
        assert copied.flags.writeable
        assert t.info.context == "code 10 (i16) shape (2, 3): "


def test_payloads_outlive_close(tmp_path: Path) -> None:
    kiln_np.save_weights(
        tmp_path / "a.st", {"a": np.arange(4.0), "b": np.ones(2)}, format="safetensors"
    )
    w = kiln_np.open_weights(tmp_path / "a.st")
    payload = w["a"].payload()
    arr = w["a"].numpy()
    w.close()
    assert bytes(payload.data) == np.arange(4.0).tobytes()  # still mapped: it is referenced
    assert arr[3] == 3.0
    with pytest.raises(ValueError, match="closed"):
        w["b"].payload()  # the map is gone: payload() refuses once nothing holds it
    del payload, arr


@pytest.mark.parametrize("fmt", ["safetensors", "kiln", "gguf"])
def test_after_close_no_tensor_hands_out_a_payload(tmp_path: Path, fmt: str) -> None:
    """docs/weights.md: mapped or not, every tensor refuses after close()."""
    path = tmp_path / ("w" if fmt == "kiln" else f"w.{fmt}")
    kiln_np.save_weights(path, {"a": np.arange(3.0), "b": np.ones(2)}, format=fmt)
    w = kiln_np.open_weights(path)
    w["a"].numpy().sum()  # its file mapped (the whole file, but for a Kiln directory)
    held = w["a"].numpy()
    w.close()
    for name in ("a", "b"):  # mapped and not
        with pytest.raises(ValueError, match="closed"):
            w[name].payload()
    assert held.tolist() == [0.0, 1.0, 2.0]


def test_closing_releases_unreferenced_maps(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "a.st", {"a": np.arange(4.0)}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        w["a"].numpy().sum()  # mapped, then dropped
        file = w._files[0]
        assert "not mapped" not in repr(file)
    assert repr(file).endswith("closed)")
    assert file._map is None


def test_tensors_pickle_by_reference(tmp_path: Path) -> None:
    big = np.arange(1 << 18, dtype=np.float64)
    kiln_np.save_weights(tmp_path / "a.st", {"big": big}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        blob = pickle.dumps(w["big"])
    assert len(blob) < 1000
    # unpickled elsewhere (another working directory, another process): same bytes
    script = textwrap.dedent(
        f"""
        import os, pickle, sys
        os.chdir({str(tmp_path.parent)!r})
        t = pickle.loads(sys.stdin.buffer.read())
        sys.stdout.write(t.numpy()[-3:].tobytes().hex() + " " + str(t.path))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], input=blob, capture_output=True, check=True
    ).stdout.decode()
    assert out == f"{big[-3:].tobytes().hex()} {tmp_path / 'a.st'}"


def test_unpickled_tensor_maps_only_its_range(tmp_path: Path) -> None:
    tensors = {f"t{i}": np.full(50_000, i, np.float64) for i in range(4)}
    kiln_np.save_weights(tmp_path / "a.st", tensors, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        t = pickle.loads(pickle.dumps(w["t2"]))
    assert bits(t.numpy()) == bits(tensors["t2"])
    assert t._file is not None
    assert t._file._map is not None
    assert len(t._file._map) < 2 * 400_000


def test_a_file_replaced_since_it_was_opened_is_type_never_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.st"
    kiln_np.save_weights(path, {"a": np.zeros(4), "b": np.zeros(4)}, format="safetensors")
    w = kiln_np.open_weights(path)
    blob = pickle.dumps(w["b"])
    os.replace(_same_size_other(tmp_path, {"a": np.ones(4), "b": np.ones(4)}), path)
    err = _raise("TYPE", w["b"].numpy)  # the old bytes were never mapped: refused, not 1.0s
    assert str(path) in str(err)
    assert "changed since it was opened" in str(err)
    assert "replaced" in str(err)
    _raise("TYPE", pickle.loads(blob).numpy)  # an unpickled tensor checks the same identity
    err = _raise("TYPE", kiln_np.save_weights, tmp_path / "c.st", w, format="safetensors")
    assert "tensor 'a'" in str(err)  # copying from it checks it too
    assert not (tmp_path / "c.st").exists()


def _same_size_other(tmp_path: Path, tensors: dict[str, Any]) -> Path:
    other = tmp_path / "other.st"
    kiln_np.save_weights(other, tensors, format="safetensors")
    return other


def test_a_file_modified_in_place_since_it_was_opened_is_type(tmp_path: Path) -> None:
    path = tmp_path / "a.st"
    kiln_np.save_weights(path, {"a": np.zeros(4)}, format="safetensors")
    w = kiln_np.open_weights(path)
    size = path.stat().st_size
    with open(path, "r+b") as f:  # same inode, same size, other bytes
        f.seek(size - 8)
        f.write(np.float64(1.0).tobytes())
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    err = _raise("TYPE", w["a"].numpy)
    assert "modification time" in str(err)
    with open(path, "ab") as f:
        f.write(b"x")
    assert f"{size} bytes when opened, {size + 1} now" in str(_raise("TYPE", w["a"].numpy))


def test_saving_over_its_own_file_reads_every_tensor_before_replacing(tmp_path: Path) -> None:
    # docs/weights.md: what was mapped keeps the old bytes; what was not is TYPE.
    path = tmp_path / "a.st"
    kiln_np.save_weights(path, {"a": np.zeros(4), "b": np.full(4, 2.0)}, format="safetensors")
    with kiln_np.open_weights(path) as w:
        kiln_np.save_weights(path, w, format="safetensors", metadata={"format": "pt"})
        _raise("TYPE", w["a"].numpy)
    with kiln_np.open_weights(path) as w:
        assert w.metadata == {"format": "pt"}
        assert w["b"].numpy().tolist() == [2.0] * 4
        held = w["b"].numpy()  # maps the whole file
        kiln_np.save_weights(path, {"b": np.ones(4)}, format="safetensors")
        assert held.tolist() == w["b"].numpy().tolist() == [2.0] * 4  # the old file, mapped
        assert w["a"].numpy().tolist() == [0.0] * 4  # the same map
    directory = tmp_path / "dir"
    kiln_np.save_weights(directory, {"a": np.zeros(4), "b": np.full(4, 2.0)}, format="kiln")
    with kiln_np.open_weights(directory) as w:
        a = w["a"].numpy()
        kiln_np.save_weights(directory, w, format="kiln")
        assert a.tolist() == w["a"].numpy().tolist() == [0.0] * 4  # a's file was mapped
        _raise("TYPE", w["b"].numpy)  # b's file is the new directory's
    with kiln_np.open_weights(directory, verify=True) as w:
        assert w["b"].numpy().tolist() == [2.0] * 4


def test_a_tensor_unpickled_on_another_machine_skips_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kiln_np.save_weights(tmp_path / "a.st", {"a": np.arange(3.0)}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        blob = pickle.dumps(w["a"])
    monkeypatch.setattr(platform, "node", lambda: "another-machine")
    t = pickle.loads(blob)
    assert t._file is not None
    assert t._file.identity.device is None
    assert t.numpy().tolist() == [0.0, 1.0, 2.0]


def test_onnx_tensors_pickle_their_bytes(tmp_path: Path) -> None:
    arr = np.arange(3, dtype=np.float32)
    graph = onnx.helper.make_graph(
        [], "g", [], [], initializer=[numpy_helper.from_array(arr, name="w")]
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    with kiln_np.open_weights(tmp_path / "m.onnx") as w:
        t = pickle.loads(pickle.dumps(w["w"]))
    assert t.path is None
    assert bits(t.numpy()) == bits(arr)


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
    err = _raise(
        "TYPE",
        kiln_np.save_weights,
        tmp_path / "m.gguf",
        {"a": np.ones(2, np.float32), "x": fp4},
        format="gguf",
    )
    assert "'x'" in str(err)
    assert "e2m1" in str(err)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------- the Kiln payload directory


def test_kiln_dir_round_trip_every_code(tmp_path: Path) -> None:
    tensors = every_code()
    out = tmp_path / "dir"
    kiln_np.save_weights(out, tensors, format="kiln", metadata={"step": 3, "lr": 0.5})
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "kiln-np-weights/1"
    assert [t["name"] for t in manifest["tensors"]] == list(tensors)
    entry = manifest["tensors"][-1]
    assert entry["layout"] == {"name": "ggml.q4_0", "block_size": 18}
    assert entry["dtype"] is None
    assert sorted(os.listdir(out)) == sorted(
        ["manifest.json", *(t["file"] for t in manifest["tensors"])]
    )
    with kiln_np.open_weights(out, verify=True) as w:
        assert dict(w.metadata) == {"step": 3, "lr": 0.5}
        for name, value in tensors.items():
            t = w[name]
            assert bytes(t.payload().data) == payload_bytes(value), name
            assert os.path.getsize(str(t.path)) == t.byte_length


def test_kiln_dir_checks_sizes_and_hashes(tmp_path: Path) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"w": np.arange(4, dtype=np.int32)}, format="kiln")
    manifest = json.loads((out / "manifest.json").read_text())
    payload = out / manifest["tensors"][0]["file"]
    payload.write_bytes(b"\x01" + payload.read_bytes()[1:])
    kiln_np.open_weights(out).close()  # sizes only, by default
    err = _raise("TYPE", kiln_np.open_weights, out, verify=True)
    assert "SHA-256" in str(err)
    payload.write_bytes(bytes(15))
    assert "short by 1" in str(_raise("LENGTH", kiln_np.open_weights, out))
    payload.unlink()
    with pytest.raises(FileNotFoundError):
        kiln_np.open_weights(out)


def _manifest(tmp_path: Path, **entry: Any) -> Path:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"w": np.arange(4, dtype=np.int32)}, format="kiln")
    doc = json.loads((out / "manifest.json").read_text())
    doc["tensors"][0].update(entry)
    (out / "manifest.json").write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    ("kind", "entry", "words"),
    [
        ("TYPE", {"file": "../x"}, "plain file name"),
        ("TYPE", {"file": "."}, "plain file name"),
        ("TYPE", {"name": 3}, "str name"),
        ("TYPE", {"code": 20}, "reserved"),
        ("TYPE", {"layout": {"name": "x"}}, "layout"),
        ("TYPE", {"code": 4096, "layout": {"name": "x", "block_size": 0}}, "block_size"),
        ("SHAPE", {"shape": [-1]}, "shape"),
        ("LENGTH", {"byte_length": 15}, "byte_length in the manifest"),
        ("TYPE", {"byte_length": "16"}, "integer"),
        ("TYPE", {"sha256": "ABC"}, "hex"),
    ],
)
def test_kiln_manifest_rules(tmp_path: Path, kind: str, entry: dict[str, Any], words: str) -> None:
    out = _manifest(tmp_path, **entry)
    assert words in str(_raise(kind, kiln_np.open_weights, out))


def test_kiln_manifest_document_rules(tmp_path: Path) -> None:
    out = _manifest(tmp_path)
    manifest = out / "manifest.json"
    for text, words in [
        ('{"format": "kiln-np-weights/2", "tensors": []}', "kiln-np-weights/1"),
        ('{"format": "kiln-np-weights/1", "tensors": {}}', "list"),
        ('{"format": "kiln-np-weights/1", "tensors": [1]}', "keys"),
        ('{"format": "kiln-np-weights/1", "format": "x"}', "twice"),
        ('{"format": "kiln-np-weights/1", "tensors": [], "metadata": {"a": ["bad"]}}', "tag"),
        (
            '{"format": "kiln-np-weights/1", "tensors": [], "metadata_types": {"a": 1}}',
            "metadata_types",
        ),
        ("[", "JSON"),
    ]:
        manifest.write_text(text)
        assert words in str(_raise("TYPE", kiln_np.open_weights, out)), text
    doc = {"format": "kiln-np-weights/1", "tensors": [json.loads(json.dumps(_entry(out)))] * 2}
    manifest.write_text(json.dumps(doc))
    assert "twice" in str(_raise("TYPE", kiln_np.open_weights, out))


def _entry(out: Path) -> dict[str, Any]:
    f = next(p.name for p in out.iterdir() if p.name != "manifest.json")
    import hashlib

    data = (out / f).read_bytes()
    return {
        "name": "w",
        "file": f,
        "code": 12,
        "layout": None,
        "shape": [4],
        "byte_length": 16,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_reads_the_manifest_kiln_np_onnx_wrote(tmp_path: Path) -> None:
    (tmp_path / "0000_w.kiln").write_bytes(np.arange(3, dtype=np.float32).tobytes())
    import hashlib

    doc = {
        "format": "kiln-np-onnx/1",
        "model": "m.onnx",
        "tensors": [
            {
                "name": "w",
                "file": "0000_w.kiln",
                "code": 2,
                "dtype": "float32",
                "layout": None,
                "shape": [3],
                "payload_bytes": 12,
                "sha256": hashlib.sha256((tmp_path / "0000_w.kiln").read_bytes()).hexdigest(),
            }
        ],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with kiln_np.open_weights(tmp_path, verify=True) as w:
        assert w.metadata["model"] == "m.onnx"
        assert w["w"].numpy().tolist() == [0.0, 1.0, 2.0]


def _nested(levels: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def _manifest_with(directory: Path, **keys: bytes) -> None:
    """Add raw JSON values under new keys of the manifest."""
    manifest = directory / "manifest.json"
    text = manifest.read_bytes()
    extra = b"".join(b'"%s": %s, ' % (k.encode(), v) for k, v in keys.items())
    manifest.write_bytes(text.replace(b'"source_format"', extra + b'"source_format"', 1))


def test_manifests_nested_deep_are_type_not_recursion_error(tmp_path: Path) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"a": np.ones(2)}, format="kiln")
    doc = json.loads((out / "manifest.json").read_text())
    deep: object = ["int", 1]
    for _ in range(300):  # a few hundred levels of typed metadata
        deep = ["list", [deep]]
    doc["metadata"] = {"k": deep}
    (out / "manifest.json").write_text(json.dumps(doc))
    assert "127 levels" in str(_raise("TYPE", kiln_np.open_weights, out))
    with pytest.raises(FileExistsError):  # an unreadable manifest is not one kiln_np wrote
        kiln_np.save_weights(out, {"a": np.ones(2)}, format="kiln")
    other = tmp_path / "other"
    kiln_np.save_weights(other, {"a": np.ones(2)}, format="kiln")
    _manifest_with(other, junk=b"[" * 5000 + b"]" * 5000)  # in a key the reader ignores
    assert "127 levels" in str(_raise("TYPE", kiln_np.open_weights, other))
    # the writer refuses what the reader would: deep metadata, before writing
    for levels in (33, 5000):
        err = _raise("TYPE", kiln_np.save_weights, tmp_path / "new", {"a": np.ones(1)},
                     format="kiln", metadata={"k": _nested(levels)})  # fmt: skip
        assert "32 levels" in str(err)
    assert not (tmp_path / "new").exists()
    kiln_np.save_weights(tmp_path / "new", {"a": np.ones(1)}, format="kiln",
                         metadata={"k": _nested(32), "d": {"x": {"y": [[]]}}})  # fmt: skip
    with kiln_np.open_weights(tmp_path / "new") as w:
        assert w.metadata["k"] == _nested(32)


def test_manifests_are_bounded_in_size_and_cost(tmp_path: Path) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"a": np.ones(2)}, format="kiln")
    _manifest_with(out, junk=b"[" + b"[]," * 2_500_000 + b"[]]")
    tracemalloc.start()
    err = _raise("TYPE", kiln_np.open_weights, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "as Python objects" in str(err)
    assert peak < (7_500_000 + (24 << 20)), peak  # the text and the scan's scratch
    with open(out / "manifest.json", "r+b") as f:
        f.truncate(kiln_np.kilndir.MAX_MANIFEST_BYTES + 1)
    assert "at most 100000000 bytes" in str(_raise("TYPE", kiln_np.open_weights, out))
    with pytest.raises(FileExistsError):  # no longer recognised as one kiln_np wrote
        kiln_np.save_weights(out, {"a": np.ones(1)}, format="kiln")
    big = {"k": "x" * kiln_np.kilndir.MAX_MANIFEST_BYTES}
    _raise("TYPE", kiln_np.save_weights, tmp_path / "new", {"a": np.ones(1)}, format="kiln",
           metadata=big)  # fmt: skip
    assert os.listdir(tmp_path) == ["dir"]  # nothing written


def test_manifests_keep_what_python_json_reads(tmp_path: Path) -> None:
    # a GGUF string that is not UTF-8 and a Python int past binary64: not serde's
    metadata = {"s": b"\xff\xfe".decode("utf-8", "surrogateescape"), "n": 10**400}
    kiln_np.save_weights(tmp_path / "d", {"a\udcff": np.ones(1)}, format="kiln", metadata=metadata)
    with kiln_np.open_weights(tmp_path / "d") as w:
        assert dict(w.metadata) == metadata
        assert list(w) == ["a\udcff"]


def test_kiln_dir_is_replaced_whole_and_only_when_it_is_ours(tmp_path: Path) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"a": np.ones(3), "b": np.zeros(2)}, format="kiln")
    with kiln_np.open_weights(out) as w:  # over itself, from itself
        kiln_np.save_weights(out, {"b": w["b"]}, format="kiln")
    assert sorted(os.listdir(out)) == ["0000_b.kiln", "manifest.json"]
    assert os.listdir(tmp_path) == ["dir"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        kiln_np.save_weights(out, {"a": np.ones(1)}, format="kiln")
    assert (out / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        kiln_np.save_weights(tmp_path / "file", {"a": np.ones(1)}, format="kiln")
    (tmp_path / "empty").mkdir()
    kiln_np.save_weights(tmp_path / "empty", {"a": np.ones(1)}, format="kiln")
    assert len(kiln_np.open_weights(tmp_path / "empty")) == 1


def test_payload_files_that_are_symlinks_are_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"a": np.zeros(2), "b": np.zeros(2)}, format="kiln")
    secret = tmp_path / "secret"
    secret.write_bytes(b"password" * 2)
    (out / "0000_a.kiln").unlink()
    (out / "0000_a.kiln").symlink_to(secret)
    err = _raise("TYPE", kiln_np.open_weights, out)
    assert "symlink" in str(err)
    assert "'0000_a.kiln'" in str(err)
    code, _, err_line = _cli(
        capsys, "convert", str(out), str(tmp_path / "c.st"), "--to", "safetensors"
    )
    assert (code, err_line.count("\n")) == (2, 1)  # convert copies nothing of it
    assert not (tmp_path / "c.st").exists()
    # a symlink inside the directory is refused too: the rule is no symlinks
    (out / "0000_a.kiln").unlink()
    (out / "0000_a.kiln").symlink_to("0001_b.kiln")
    _raise("TYPE", kiln_np.open_weights, out)
    # put there after opening: the entry's own identity no longer holds
    kiln_np.save_weights(out2 := tmp_path / "dir2", {"a": np.zeros(2)}, format="kiln")
    with kiln_np.open_weights(out2) as w:
        (out2 / "0000_a.kiln").unlink()
        (out2 / "0000_a.kiln").symlink_to(secret)
        assert "changed since it was opened" in str(_raise("TYPE", w["a"].numpy))


def _doctored(directory: Path, files: list[str], fmt: str = "kiln-np-weights/1") -> None:
    """A manifest that lists ``files``, which this writer did not write."""
    doc = json.loads((directory / "manifest.json").read_text())
    doc["format"] = fmt
    doc["tensors"] += [{**doc["tensors"][0], "file": f} for f in files]
    (directory / "manifest.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("listed", "make"),
    [
        (["notes.txt", "src"], "user files"),
        (["0001_x.kiln"], "a directory"),
        (["0001_x.kiln"], "a symlink"),
        (["0007_x.kiln"], "misnumbered"),
        ([], "another format"),
    ],
)
def test_a_manifest_alone_does_not_make_a_directory_ours(
    tmp_path: Path, listed: list[str], make: str
) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"a": np.zeros(2)}, format="kiln")
    if make == "user files":
        (out / "notes.txt").write_text("mine")
        (out / "src").mkdir()
        (out / "src" / "main.py").write_text("mine")
    elif make == "a directory":
        (out / "0001_x.kiln").mkdir()
        (out / "0001_x.kiln" / "mine").write_text("mine")
    elif make == "a symlink":
        (tmp_path / "mine").write_text("mine")
        (out / "0001_x.kiln").symlink_to(tmp_path / "mine")
    else:
        (out / listed[0] if listed else out / "0000_a.kiln").touch()
    _doctored(out, listed, "kiln-np-onnx/1" if make == "another format" else "kiln-np-weights/1")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    with pytest.raises(FileExistsError):
        kiln_np.save_weights(out, {"b": np.ones(1)}, format="kiln")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert os.listdir(tmp_path) == (["dir", "mine"] if make == "a symlink" else ["dir"])


def test_an_index_alone_does_not_make_a_directory_ours(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    kiln_np.save_weights(out, {"a": np.zeros(2), "b": np.zeros(2)}, format="safetensors",
                         max_shard_size=16)  # fmt: skip
    (out / "notes.txt").write_text("mine")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    index["weight_map"]["notes"] = "notes.txt"
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileExistsError):
        kiln_np.save_weights(out, {"c": np.ones(1)}, format="safetensors", max_shard_size=16)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_file_put_in_the_old_directory_while_saving_is_never_deleted(tmp_path: Path) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, {"a": np.zeros(2)}, format="kiln")

    def progress(n: int) -> None:
        (out / "late.txt").write_text("mine")

    kiln_np.save_weights(out, {"b": np.ones(2)}, format="kiln", progress=progress)
    assert list(kiln_np.open_weights(out)) == ["b"]
    [left] = [p for p in tmp_path.iterdir() if p.name != "dir"]
    assert os.listdir(left) == ["late.txt"]  # the writer's files went; this one stayed
    assert (left / "late.txt").read_text() == "mine"


def test_a_failed_directory_write_leaves_nothing(tmp_path: Path) -> None:
    class BoomError(Exception):
        pass

    def progress(n: int) -> None:
        raise BoomError

    with pytest.raises(BoomError):
        kiln_np.save_weights(tmp_path / "dir", {"a": np.ones(3)}, format="kiln", progress=progress)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ typed metadata


def test_metadata_encoding_keeps_types_and_bits() -> None:
    values = {
        "s": "x",
        "i": 2**70,
        "b": True,
        "f": -0.0,
        "nan": float("nan"),
        "u8": np.uint8(255),
        "bool": np.bool_(False),
        "f16": np.array([0x7C01], np.uint16).view("<f2")[0],
        "c": np.complex64(1 - 2j),
        "arr": np.arange(4, dtype=">i4").reshape(2, 2),
        "raw": b"\x00\xff",
        "list": [1, ["a", np.float64(2.0)]],
        "dict": {"k": np.int16(-1)},
    }
    back = decode_metadata(json.loads(json.dumps(encode_metadata(values))))
    for key, value in values.items():
        assert type(back[key]) is type(value), key
        if isinstance(value, (np.generic, np.ndarray, float)):
            assert bits(np.asarray(back[key])) == bits(np.asarray(value)), key
        elif key != "list":
            assert back[key] == value
    assert back["list"][1][1] == 2.0
    assert type(back["list"][1][1]) is np.float64
    assert back["arr"].dtype == np.dtype("<i4")


@pytest.mark.parametrize(
    "bad",
    [
        {1: "x"},
        {"a": object()},
        {"a": np.array(["s"])},
        {"a": np.datetime64(1, "s")},
        {"a": {2: 1}},
    ],
)
def test_metadata_encoding_refuses(bad: dict[Any, Any]) -> None:
    _raise("TYPE", encode_metadata, bad)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"a": "x"},
        {"a": []},
        {"a": ["float", 1.5]},
        {"a": ["float", "ff"]},
        {"a": ["float", "0x" + "f" * 20]},
        {"a": ["np.float32", 1]},
        {"a": ["np.object", 1]},
        {"a": ["np.ndarray", "<f4", [2], "AAAA"]},
        {"a": ["np.ndarray", "<f4", [-1], ""]},
        {"a": ["bytes", "!!"]},
        {"a": ["int", True]},
        {"a": ["nope", 1]},
    ],
)
def test_metadata_decoding_refuses(bad: object) -> None:
    _raise("TYPE", decode_metadata, bad)


_JSON_TEXT = st.text(st.sampled_from('ab\\"\ud800\udc00\U0001f600'), max_size=6)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | _JSON_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_JSON_TEXT, inner, max_size=4),
    max_leaves=12,
)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _lone_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(map(_lone_surrogate, value))


@given(
    value=_JSON_VALUES,
    wrap=st.sampled_from([0, 1, 120, 124, 125, 126, 127, 128]),
    chunk=st.sampled_from([1, 2, 3, 5, 7, 11, 1 << 18]),
    spaces=st.booleans(),
)
def test_parse_json_agrees_with_json_and_serde(
    value: object, wrap: int, chunk: int, spaces: bool
) -> None:
    """The pre-scan (its chunks cut anywhere) accepts exactly what is nested at most
    127 levels and holds no half surrogate pair; what it accepts parses as json
    parses it."""
    text = json.dumps(value, separators=(", ", ": ") if spaces else (",", ":"))
    raw = ("[" * wrap + text + "]" * wrap).encode()
    expected = json.loads(raw)  # escapes of two halves in a row are one character
    good = _depth(expected) <= metadata.MAX_JSON_DEPTH and not _lone_surrogate(expected)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metadata, "_SCAN_CHUNK", chunk)
        if not good:
            _raise("TYPE", metadata.parse_json, raw, "")
            return
        assert metadata.parse_json(raw, "") == expected
        assert metadata.parse_json(raw, "", serde=False) == expected


@given(edits=st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)), min_size=1, max_size=3))
def test_kiln_manifest_oracle(edits: list[tuple[int, int]]) -> None:
    """A Kiln directory whose manifest has bytes changed: it opens, every tensor's
    file holding exactly its byte_length, or it raises KilnError (or the OS's
    FileNotFoundError when a file name changed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dir"
        tensors = {"w": np.arange(4, dtype=np.int32), "q": MANIFEST_Q4}
        kiln_np.save_weights(out, tensors, format="kiln", metadata={"n": np.uint8(3)})
        raw = bytearray((out / "manifest.json").read_bytes())
        for pos, value in edits:
            if pos < len(raw):
                raw[pos] = value
        (out / "manifest.json").write_bytes(bytes(raw))
        try:
            weights = kiln_np.open_weights(out, verify=True)
        except (KilnError, FileNotFoundError):
            return
        with weights:
            for t in weights.values():
                assert len(t.payload().data) == t.byte_length


MANIFEST_Q4 = Payload(0x4702, memoryview(bytes(range(36))), (2, 1), Layout("ggml.q4_0", 18))


# --------------------------------------------------------------------- save_weights


def test_save_weights_checks_its_arguments(tmp_path: Path) -> None:
    t = {"a": np.ones(2)}
    assert "format" in str(_raise("TYPE", kiln_np.save_weights, tmp_path / "x", t, format="npz"))
    _raise("TYPE", kiln_np.save_weights, tmp_path / "x", [np.ones(2)], format="kiln")
    _raise("TYPE", kiln_np.save_weights, tmp_path / "x", {1: np.ones(2)}, format="kiln")
    _raise("TYPE", kiln_np.save_weights, tmp_path / "x", {"a": "text"}, format="kiln")
    _raise("TYPE", kiln_np.save_weights, tmp_path / "x", {"a": np.array(["s"])}, format="kiln")
    _raise("TYPE", kiln_np.save_weights, tmp_path / "x", t, format="kiln", max_shard_size=10)
    _raise("TYPE", kiln_np.save_weights, tmp_path / "x", t, format="safetensors", max_shard_size=0)
    _raise("TYPE", kiln_np.save_weights, tmp_path / "x", t, format="kiln", metadata={"a": object()})
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
    assert names == ["kiln", "zarr", "safetensors", "gguf", "onnx"]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "weights.md").read_text()
    opening = doc.split("## Opening")[1].split("\n## ")[0]
    assert _detection_order(opening) == names
    assert _detection_order(formats.__doc__ or "") == names
    assert {f.name for f in formats.FORMATS if f.save} == {"safetensors", "gguf", "kiln", "zarr"}


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


# --------------------------------------------------------------------- command line


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from kiln_np import cli

    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_ls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m:1.safetensors"  # a ':' in a path is just a path
    tensors = {"embed:w": np.zeros((2, 3), np.float32), "s": np.zeros(2, ml_dtypes.float8_e8m0fnu)}
    kiln_np.save_weights(path, tensors, format="safetensors")
    status, out, _ = _cli(capsys, "ls", str(path))
    assert status == 0
    assert out.splitlines() == [
        "name     dtype    kiln  shape  size",
        "embed:w  F32      f32   2x3    24 B",
        "s        F8_E8M0  e8m0  2       2 B",
        "2 tensors, 8 parameters, 26 B (26 payload bytes), safetensors",
    ]
    status, out, _ = _cli(capsys, "ls", str(path), "--json")
    record = json.loads(out)
    assert record["weights_format"] == "safetensors"
    assert record["tensors"][0] == {
        "name": "embed:w",
        "format_dtype": "F32",
        "code": 2,
        "kiln": "f32",
        "layout": None,
        "shape": [2, 3],
        "block_shape": None,
        "byte_length": 24,
        "elements": 6,
        "parts": None,
    }


def test_cli_ls_gguf_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = Payload(0x4702, memoryview(bytes(36)), (2, 1), Layout("ggml.q4_0", 18))
    kiln_np.save_weights(tmp_path / "m.gguf", {"q": q}, format="gguf")
    record = json.loads(_cli(capsys, "ls", str(tmp_path / "m.gguf"), "--json")[1])
    assert record["tensors"][0]["kiln"] == "ggml.q4_0"
    assert record["tensors"][0]["layout"] == {"name": "ggml.q4_0", "block_size": 18}


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["ls", "missing.safetensors"], "kiln-np: FILE: cannot read 'missing.safetensors'"),
        (["ls", "junk.bin"], "kiln-np: TYPE: "),
        (["convert", "junk.bin", "out", "--to", "kiln"], "kiln-np: TYPE: "),
        (["convert", "a.safetensors", "o", "--to", "npz"], "kiln-np: USAGE: "),
        (["convert", "a.safetensors", "o.gguf", "--to", "gguf"], "kiln-np: TYPE: tensor 'u4'"),
        (
            ["convert", "a.safetensors", "o", "--to", "kiln", "--max-shard-size", "x"],
            "kiln-np: USAGE: ",
        ),
        (
            ["convert", "a.safetensors", "o", "--to", "kiln", "--max-shard-size", "9"],
            "kiln-np: TYPE: ",
        ),
        (["inspect", "a.safetensors", "--tensor", "nope"], "kiln-np: TYPE: "),
        (["inspect", "a.safetensors", "--tensor", "f", "--code", "f32"], "kiln-np: USAGE: "),
        (["inspect", "a.safetensors"], "kiln-np: USAGE: "),
    ],
)
def test_cli_weight_errors_are_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    line: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.bin").write_bytes(b"\x00junk")
    kiln_np.save_weights(
        tmp_path / "a.safetensors",
        {"f": np.ones(2, np.float32), "u4": np.ones(2, np.uint8)},
        format="safetensors",
    )
    from kiln_np import cli

    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        status = int(exc.code or 0)
    _, err = capsys.readouterr()
    assert status == 2
    assert err.startswith(line), err
    assert err.count("\n") == 1, err


def test_cli_convert_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tensors = every_code()
    del tensors["q4"], tensors["i4"], tensors["u4"]
    tensors["e2m1"] = tensors["e2m1"][:6]  # safetensors holds an even F4 count
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, tensors, format="safetensors", metadata={"format": "pt"})
    status, out, _ = _cli(capsys, "convert", str(src), str(tmp_path / "dir"), "--to", "kiln")
    assert status == 0
    assert out.endswith("safetensors -> kiln\n")
    status, out, _ = _cli(
        capsys,
        "convert",
        str(tmp_path / "dir"),
        str(tmp_path / "b.safetensors"),
        "--to",
        "safetensors",
        "--json",
    )
    record = json.loads(out)
    assert (record["from"], record["to"], record["metadata"]) == ("kiln", "safetensors", "carried")
    with kiln_np.open_weights(tmp_path / "b.safetensors") as b, kiln_np.open_weights(src) as a:
        assert dict(b.metadata) == {"format": "pt"}
        assert {n: bytes(t.payload().data) for n, t in a.items()} == {
            n: bytes(t.payload().data) for n, t in b.items()
        }


def test_cli_convert_drops_metadata_the_target_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights(
        tmp_path / "m.gguf",
        {"w": np.ones(2, np.float32)},
        format="gguf",
        metadata={"n": np.uint32(3)},
    )
    status, out, _ = _cli(
        capsys, "convert", str(tmp_path / "m.gguf"), str(tmp_path / "m.st"), "--to", "safetensors"
    )
    assert status == 0
    assert "gguf metadata not carried" in out
    status, out, _ = _cli(
        capsys, "convert", str(tmp_path / "m.gguf"), str(tmp_path / "d"), "--to", "kiln"
    )
    with kiln_np.open_weights(tmp_path / "d") as d:
        assert d.metadata["n"] == 3


def test_cli_convert_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {f"t{i}": np.ones(4) for i in range(3)}, format="safetensors")
    status, _, _ = _cli(
        capsys,
        "convert",
        str(src),
        str(tmp_path / "ckpt"),
        "--to",
        "safetensors",
        "--max-shard-size",
        "0x40",
    )
    assert status == 0
    assert len(os.listdir(tmp_path / "ckpt")) == 3  # two shards and the index


def test_cli_convert_never_writes_over_its_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {"w": np.ones(2)}, format="safetensors")
    before = src.read_bytes()
    status, _, err = _cli(capsys, "convert", str(src), str(src), "--to", "safetensors")
    assert status == 2
    assert "it is the input file" in err
    kiln_np.save_weights(tmp_path / "dir", {"w": np.ones(2)}, format="kiln")
    status, _, err = _cli(
        capsys, "convert", str(tmp_path / "dir"), str(tmp_path / "dir"), "--to", "kiln"
    )
    assert status == 2
    assert "input" in err
    assert src.read_bytes() == before


def test_cli_convert_progress_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {"w": np.ones(1000)}, format="safetensors")
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert _cli(capsys, "convert", str(src), str(tmp_path / "d"), "--to", "kiln")[0] == 0
    drawn = terminal.getvalue()
    assert drawn.startswith(f"\rconvert {src} [")
    assert drawn.endswith("] 100.0%\n")
    # not on a pipe
    assert _cli(capsys, "convert", str(src), str(tmp_path / "e"), "--to", "kiln")[2] == ""


def test_cli_inspect_a_tensor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.safetensors"
    arr = np.array([1.0, -2.0, 0.5], np.float32)
    kiln_np.save_weights(path, {"x": np.ones(3, np.int8), "layer:0/w": arr}, format="safetensors")
    status, out, _ = _cli(capsys, "inspect", str(path), "--tensor", "layer:0/w", "--json")
    assert status == 0
    record = json.loads(out)
    assert record["file"] == str(path)
    assert record["shape"] == [3]
    assert record["min"] == -2.0
    with kiln_np.open_weights(path) as w:
        assert record["offset"] == w["layer:0/w"].offset


def _documented_keys(section: str) -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    block = text.split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_cli_json_keys_are_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {"w": np.ones(2)}, format="safetensors")
    listed = json.loads(_cli(capsys, "ls", str(src), "--json")[1])
    assert list(listed) == _documented_keys("ls-json")
    assert list(listed["tensors"][0]) == _documented_keys("ls-tensor-json")
    converted = json.loads(
        _cli(capsys, "convert", str(src), str(tmp_path / "d"), "--to", "kiln", "--json")[1]
    )
    assert list(converted) == _documented_keys("weights-convert-json")


def test_cli_onnx_writes_a_kiln_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arr = np.arange(6, dtype=np.float16).reshape(2, 3)
    graph = onnx.helper.make_graph(
        [], "g", [], [], initializer=[numpy_helper.from_array(arr, name="layer/0:w")]
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert _cli(capsys, "onnx", str(tmp_path / "m.onnx"), str(out))[0] == 0
    with kiln_np.open_weights(out, verify=True) as w:
        assert w.metadata["model"] == str(tmp_path / "m.onnx")
        assert bits(w["layer/0:w"].numpy()) == bits(arr)
    # again, over its own previous export: replaced whole
    assert _cli(capsys, "onnx", str(tmp_path / "m.onnx"), str(out))[0] == 0
    assert sorted(os.listdir(out)) == ["0000_layer_0_w.kiln", "manifest.json"]


@pytest.mark.parametrize("kernel", ["cross-device", "absent"])
def test_copies_through_python_where_the_kernel_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    import errno

    def refuse(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    if kernel == "absent":
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    else:
        monkeypatch.setattr(os, "copy_file_range", refuse)
    big = np.arange(3 << 20, dtype=np.uint8)  # several copy chunks
    kiln_np.save_weights(tmp_path / "a.st", {"w": big, "s": np.ones(3)}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as a:
        kiln_np.save_weights(tmp_path / "b.st", a, format="safetensors")
        kiln_np.save_weights(tmp_path / "d", a, format="kiln")
    for out in ("b.st", "d"):
        with kiln_np.open_weights(tmp_path / out, verify=True) as b:
            assert bytes(b["w"].payload().data) == big.tobytes()


@pytest.mark.parametrize("command", ["ls", "convert"])
def test_cli_help_shows_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from kiln_np import cli

    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert f"example:\n  kiln-np {command} " in capsys.readouterr().out


def test_dotdot_after_a_symlink_is_the_kernels_for_reads_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "link/../w" is deep/w (the link is followed first), never ./w by name.
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    os.symlink(tmp_path / "deep" / "inner", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    kiln_np.save_weights("w.safetensors", {"t": np.full(3, 9, np.uint8)}, format="safetensors")
    kiln_np.save_weights(
        "link/../w.safetensors", {"t": np.arange(3, dtype=np.uint8)}, format="safetensors"
    )
    with kiln_np.open_weights("link/../w.safetensors") as w:
        assert w["t"].numpy().tolist() == [0, 1, 2]
        again = pickle.loads(pickle.dumps(w["t"]))
    with kiln_np.open_weights("w.safetensors") as w:
        assert w["t"].numpy().tolist() == [9, 9, 9]
    monkeypatch.chdir(tmp_path / "deep")  # the pickled tensor names its real file
    assert again.numpy().tolist() == [0, 1, 2]
