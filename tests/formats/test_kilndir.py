"""``kilndir``: the Kiln payload directory, ``manifest.json`` plus one payload file per
tensor, read and written through open_weights / save_weights."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import every_code, payload_bytes, raises_kind, run_main

import kiln_np

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
    err = raises_kind("TYPE", kiln_np.open_weights, out, verify=True)
    assert "SHA-256" in str(err)
    payload.write_bytes(bytes(15))
    assert "short by 1" in str(raises_kind("LENGTH", kiln_np.open_weights, out))
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
    assert words in str(raises_kind(kind, kiln_np.open_weights, out))


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
        assert words in str(raises_kind("TYPE", kiln_np.open_weights, out)), text
    doc = {"format": "kiln-np-weights/1", "tensors": [json.loads(json.dumps(_entry(out)))] * 2}
    manifest.write_text(json.dumps(doc))
    assert "twice" in str(raises_kind("TYPE", kiln_np.open_weights, out))


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
    assert "127 levels" in str(raises_kind("TYPE", kiln_np.open_weights, out))
    with pytest.raises(FileExistsError):  # an unreadable manifest is not one kiln_np wrote
        kiln_np.save_weights(out, {"a": np.ones(2)}, format="kiln")
    other = tmp_path / "other"
    kiln_np.save_weights(other, {"a": np.ones(2)}, format="kiln")
    _manifest_with(other, junk=b"[" * 5000 + b"]" * 5000)  # in a key the reader ignores
    assert "127 levels" in str(raises_kind("TYPE", kiln_np.open_weights, other))
    # the writer refuses what the reader would: deep metadata, before writing
    for levels in (33, 5000):
        err = raises_kind("TYPE", kiln_np.save_weights, tmp_path / "new", {"a": np.ones(1)},
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
    err = raises_kind("TYPE", kiln_np.open_weights, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "as Python objects" in str(err)
    assert peak < (7_500_000 + (24 << 20)), peak  # the text and the scan's scratch
    with open(out / "manifest.json", "r+b") as f:
        f.truncate(kiln_np.kilndir.MAX_MANIFEST_BYTES + 1)
    assert "at most 100000000 bytes" in str(raises_kind("TYPE", kiln_np.open_weights, out))
    with pytest.raises(FileExistsError):  # no longer recognised as one kiln_np wrote
        kiln_np.save_weights(out, {"a": np.ones(1)}, format="kiln")
    big = {"k": "x" * kiln_np.kilndir.MAX_MANIFEST_BYTES}
    raises_kind("TYPE", kiln_np.save_weights, tmp_path / "new", {"a": np.ones(1)}, format="kiln",
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
    err = raises_kind("TYPE", kiln_np.open_weights, out)
    assert "symlink" in str(err)
    assert "'0000_a.kiln'" in str(err)
    code, _, err_line = run_main(
        capsys, "convert", str(out), str(tmp_path / "c.st"), "--to", "safetensors"
    )
    assert (code, err_line.count("\n")) == (2, 1)  # convert copies nothing of it
    assert not (tmp_path / "c.st").exists()
    # a symlink inside the directory is refused too: the rule is no symlinks
    (out / "0000_a.kiln").unlink()
    (out / "0000_a.kiln").symlink_to("0001_b.kiln")
    raises_kind("TYPE", kiln_np.open_weights, out)
    # put there after opening: the entry's own identity no longer holds
    kiln_np.save_weights(out2 := tmp_path / "dir2", {"a": np.zeros(2)}, format="kiln")
    with kiln_np.open_weights(out2) as w:
        (out2 / "0000_a.kiln").unlink()
        (out2 / "0000_a.kiln").symlink_to(secret)
        assert "changed since it was opened" in str(raises_kind("TYPE", w["a"].numpy))


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
