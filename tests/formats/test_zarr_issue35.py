"""Zarr groups from hostile or foreign hands (issue 35): symlinks that leave the
group, zarr-python's shards (crc32c index), the fallback's memory bound counted
in allocated blocks, and tensor names a group cannot hold."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np import KilnError
from kiln_np.zarr import _fallback, open_zarr, save_zarr

zarr = pytest.importorskip("zarr")

SECRET = b"SECRET!!" * 3  # 24 bytes: a (2, 3) float32's size


def _group(tmp_path: Path, name: str = "w") -> Path:
    path = tmp_path / "g.zarr"
    save_zarr(path, {name: np.arange(6, dtype=np.float32).reshape(2, 3)})
    return path


def _refused(path: Path, *shown: str) -> KilnError:
    """open_weights (and so convert) refuses the group with TYPE naming ``shown``."""
    with pytest.raises(KilnError) as e, kiln_np.open_weights(path) as w:
        [bytes(t.payload().data) for t in w.values()]  # no outside bytes come out
    assert e.value.kind == "TYPE", e.value
    for text in shown:
        assert text in str(e.value)
    return e.value


# -- 1. symlinks that leave the group ------------------------------------------------------


def test_a_symlinked_chunk_folder_is_refused(tmp_path: Path) -> None:
    """The issue's example: ``w/c -> /elsewhere/`` whose ``0/0`` holds outside bytes."""
    path = _group(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "0").mkdir(parents=True)
    (elsewhere / "0" / "0").write_bytes(SECRET)
    shutil.rmtree(path / "w" / "c")
    (path / "w" / "c").symlink_to(elsewhere, target_is_directory=True)
    error = _refused(path, "symlink", "'w/c'")
    assert "SECRET" not in str(error)


def test_a_symlinked_array_folder_is_refused(tmp_path: Path) -> None:
    path = _group(tmp_path)
    outside = tmp_path / "outside"
    shutil.copytree(path / "w", outside)
    (outside / "c" / "0" / "0").write_bytes(SECRET)
    shutil.rmtree(path / "w")
    (path / "w").symlink_to(outside, target_is_directory=True)
    _refused(path, "symlink", "'w'")


def test_a_symlinked_group_folder_is_refused(tmp_path: Path) -> None:
    path = _group(tmp_path, "layer/w")
    outside = tmp_path / "outside"
    shutil.copytree(path / "layer", outside)
    (outside / "w" / "c" / "0" / "0").write_bytes(SECRET)
    shutil.rmtree(path / "layer")
    (path / "layer").symlink_to(outside, target_is_directory=True)
    _refused(path, "symlink", "'layer'")


@pytest.mark.parametrize("document", ["w/zarr.json", "zarr.json"])
def test_a_symlinked_zarr_json_is_refused(tmp_path: Path, document: str) -> None:
    path = _group(tmp_path)
    outside = tmp_path / "outside.json"
    shutil.copy(path / document, outside)
    (path / document).unlink()
    (path / document).symlink_to(outside)
    _refused(path, "symlink", repr(document))


def test_a_symlinked_chunk_file_is_refused_before_zarr_python_reads(tmp_path: Path) -> None:
    """An array of two chunk files goes to the fallback; zarr-python would follow
    ``c/1`` to any file and return its bytes as tensor data."""
    path = tmp_path / "g.zarr"
    group = zarr.open_group(path, mode="w")
    array = group.create_array("w", shape=(4,), chunks=(2,), dtype="uint8", compressors=None)
    array[...] = np.arange(4, dtype=np.uint8)
    secret = tmp_path / "secret"
    secret.write_bytes(b"\xee\xff")
    (path / "w" / "c" / "1").unlink()
    (path / "w" / "c" / "1").symlink_to(secret)
    _refused(path, "symlink", "'c/1'")
    with pytest.raises(KilnError, match="symlink"):  # convert opens it the same way
        kiln_np.save_weights(tmp_path / "o.zarr", kiln_np.open_weights(path), format="zarr")
    assert not (tmp_path / "o.zarr").exists()


def test_a_symlinked_array_in_a_foreign_group_is_refused(tmp_path: Path) -> None:
    """A group zarr-python wrote is walked: a symlinked node is TYPE, not skipped."""
    path = tmp_path / "g.zarr"
    group = zarr.open_group(path, mode="w")
    group.create_array("a", shape=(2,), dtype="uint8", compressors=None)[...] = [1, 2]
    shutil.copytree(path / "a", tmp_path / "outside")
    (path / "b").symlink_to(tmp_path / "outside", target_is_directory=True)
    _refused(path, "symlink", "'b'")


def test_a_dotdot_tensor_path_is_refused(tmp_path: Path) -> None:
    path = _group(tmp_path)
    shutil.copytree(path / "w", tmp_path / "outside")
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["kiln_np"]["tensors"] = ["../outside"]
    (path / "zarr.json").write_text(json.dumps(doc))
    _refused(path, "'../outside'")


def test_a_fifo_in_a_fallback_array_is_refused(tmp_path: Path) -> None:
    """zarr-python would block opening it for a chunk."""
    path = tmp_path / "g.zarr"
    group = zarr.open_group(path, mode="w")
    array = group.create_array("w", shape=(4,), chunks=(2,), dtype="uint8", compressors=None)
    array[...] = np.arange(4, dtype=np.uint8)
    (path / "w" / "c" / "1").unlink()
    os.mkfifo(path / "w" / "c" / "1")
    _refused(path, "no regular file", "'c/1'")


# -- 7. zarr-python's shards: the crc32c of the index ----------------------------------------


def _zarr_python_shard(
    tmp_path: Path, shape: tuple[int, ...], inner: int, *, crc: bool = True
) -> tuple[Path, np.ndarray]:
    from zarr.codecs import BytesCodec, ShardingCodec

    path = tmp_path / "g.zarr"
    values = (np.arange(np.prod(shape), dtype=np.float32) + 1).reshape(shape)
    group = zarr.open_group(path, mode="w")
    chunk = (inner, *shape[1:])
    if crc:  # zarr-python's default index codecs: bytes, then crc32c
        array = group.create_array(
            "w", shape=shape, chunks=chunk, shards=shape, dtype="float32", compressors=None
        )
    else:
        sharding = ShardingCodec(
            chunk_shape=chunk, codecs=[BytesCodec()], index_codecs=[BytesCodec()]
        )
        array = group.create_array(
            "w", shape=shape, chunks=shape, dtype="float32", compressors=None, serializer=sharding
        )
    array[...] = values
    codecs = json.loads((path / "w" / "zarr.json").read_text())["codecs"]
    names = [c["name"] for c in codecs[0]["configuration"]["index_codecs"]]
    assert names == (["bytes", "crc32c"] if crc else ["bytes"])
    return path, values


@pytest.mark.parametrize("crc", [True, False], ids=["crc32c", "no-crc32c"])
@pytest.mark.parametrize(("shape", "inner"), [((8, 4), 2), ((12,), 3), ((6, 2, 3), 1)])
def test_zarr_python_shards_open_mapped(
    tmp_path: Path, shape: tuple[int, ...], inner: int, crc: bool
) -> None:
    path, values = _zarr_python_shard(tmp_path, shape, inner, crc=crc)
    with kiln_np.open_weights(path) as w:
        assert np.array_equal(w["w"].numpy(), values)
        assert w["w"].path is not None  # zero-copy: the shard file is mapped


def test_a_zarr_python_shard_with_a_chunk_left_out_opens(tmp_path: Path) -> None:
    """zarr-python leaves out an inner chunk of fill values: the index's empty marker."""
    path = tmp_path / "g.zarr"
    group = zarr.open_group(path, mode="w")
    array = group.create_array(
        "w", shape=(8, 4), chunks=(2, 4), shards=(8, 4), dtype="float32", compressors=None
    )
    values = np.arange(32, dtype=np.float32).reshape(8, 4)
    values[2:4] = 0
    array[...] = values
    with kiln_np.open_weights(path) as w:
        assert np.array_equal(w["w"].numpy(), values)


def test_a_wrong_crc32c_is_type(tmp_path: Path) -> None:
    path, _ = _zarr_python_shard(tmp_path, (8, 4), 2)
    chunk = path / "w" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0x40
    chunk.write_bytes(bytes(data))
    error = _refused(path, "shard index: expected crc32c")
    assert "tensor 'w'" in str(error)


def test_crc32c_is_castagnoli() -> None:
    from kiln_np.zarr._group import crc32c

    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    google = pytest.importorskip("google_crc32c")
    data = np.random.default_rng(35).integers(0, 256, 4099, dtype=np.uint8).tobytes()
    assert crc32c(data) == google.value(data)


# -- 8. the fallback's bound: what is really stored, and a cap --------------------------------


def test_a_sparse_file_does_not_buy_a_large_fallback_read(tmp_path: Path) -> None:
    """A 256 MiB array of fill values (no chunk written) beside a 256 KiB hole:
    counted by apparent size that allowed 256 MiB; by blocks it holds nothing."""
    path = tmp_path / "g.zarr"
    group = zarr.open_group(path, mode="w")
    group.create_array("w", shape=(2**28,), chunks=(2**27,), dtype="uint8", compressors=None)
    sparse = path / "w" / "c" / "hole"
    sparse.parent.mkdir()
    with open(sparse, "wb") as f:
        f.truncate(256 << 10)
    if os.stat(sparse).st_blocks * 512 >= 256 << 10:
        pytest.skip("this file system does not keep sparse files")
    with pytest.raises(KilnError, match="per stored byte") as e:
        open_zarr(path)
    assert e.value.kind == "TYPE"
    assert "allocated blocks" in str(e.value)


def test_the_fallback_has_an_absolute_cap(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "g.zarr"
    group = zarr.open_group(path, mode="w")
    array = group.create_array("w", shape=(4096,), chunks=(1024,), dtype="uint8")
    array[...] = np.random.default_rng(8).integers(0, 256, 4096, dtype=np.uint8)
    monkeypatch.setattr(_fallback, "MAX_FALLBACK_BYTES", 4095)
    with pytest.raises(KilnError, match=r"at most 4095 bytes \(MAX_FALLBACK_BYTES\)") as e:
        open_zarr(path)
    assert e.value.kind == "TYPE"
    monkeypatch.setattr(_fallback, "MAX_FALLBACK_BYTES", 4096)
    with open_zarr(path) as w:
        assert np.array_equal(w["w"].numpy(), array[...])


# -- 9. names a group cannot hold ------------------------------------------------------------

UNHOLDABLE = [
    "zarr.json",  # the root's own document
    "a/zarr.json",  # a group's document
    "zarr.json/b",  # a group folder where the root's document is
    "w\udcff",  # a GGUF name decoded with surrogateescape: not UTF-8
    "a/\udc80b",
    "...",  # only periods: no Zarr node name
    "x" * 256,  # longer than a folder name may be
]


@pytest.mark.parametrize("name", UNHOLDABLE, ids=repr)
def test_names_a_group_cannot_hold_are_refused_before_writing(tmp_path: Path, name: str) -> None:
    target = tmp_path / "g.zarr"
    tensors = {"ok": np.zeros(2, np.float32), name: np.ones(3, np.float32)}
    with pytest.raises(KilnError) as e:
        kiln_np.formats.plan_weights(target, tensors, format="zarr")
    assert e.value.kind == "TYPE"
    assert f"tensor {name!r}" in str(e.value)
    with pytest.raises(KilnError) as e:
        kiln_np.save_weights(target, tensors, format="zarr")
    assert e.value.kind == "TYPE"
    assert f"tensor {name!r}" in str(e.value)
    assert os.listdir(tmp_path) == []  # nothing written, no temporary left


def test_a_part_named_c_is_a_node_like_any(tmp_path: Path) -> None:
    """``c`` is the chunks' folder only inside an array, which has no children."""
    target = tmp_path / "g.zarr"
    values = np.arange(3, dtype=np.float32)
    kiln_np.save_weights(target, {"x/c": values}, format="zarr")
    with kiln_np.open_weights(target) as w:
        assert np.array_equal(w["x/c"].numpy(), values)
    assert np.array_equal(zarr.open_group(target, mode="r")["x/c"][...], values)


def test_convert_dry_run_shows_the_name_refusal(
    tmp_path: Path, monkeypatch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    kiln_np.save_weights(
        "m.safetensors", {"a/zarr.json": np.zeros(2, np.float32)}, format="safetensors"
    )
    status, out, err = run_main(capsys, "convert", "m.safetensors", "o.zarr", "--dry-run")
    assert (status, out) == (2, "")
    assert "TYPE" in err
    assert "tensor 'a/zarr.json'" in err
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]
