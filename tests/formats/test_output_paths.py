"""Which files a writer will produce (``kiln_np.formats.save_weights_paths``, each
format's own naming), and the guard built on it: ``kiln-np convert`` never writes over
a file it reads, whichever of its outputs that file is (a split, a shard, an index, a
payload file), while Python's ``save_weights`` over itself, from itself, keeps working.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln_np
import kiln_np.gguf as kg
from kiln_np import cli
from kiln_np.formats import save_weights_paths


def _tensors() -> dict[str, np.ndarray]:
    return {f"t{i}": np.arange(8, dtype=np.float32) + 10 * i for i in range(3)}  # 32 bytes each


CASES: list[tuple[str, str, int | None]] = [
    ("safetensors", "m.safetensors", None),
    ("safetensors", "ckpt", 40),
    ("gguf", "m.gguf", None),
    ("gguf", "m.gguf", 40),
    ("gguf", "m.gguf", 1000),
    ("gguf", "noext", 40),
    ("kiln", "dir", None),
]


@pytest.mark.parametrize(("fmt", "name", "limit"), CASES)
def test_the_paths_are_the_files_written(
    tmp_path: Path, fmt: str, name: str, limit: int | None
) -> None:
    dst = tmp_path / name
    paths = save_weights_paths(dst, _tensors(), format=fmt, max_shard_size=limit)
    assert all(os.path.isabs(p) for p in paths)
    kiln_np.save_weights(dst, _tensors(), format=fmt, max_shard_size=limit)
    written = {str(p) for p in tmp_path.rglob("*") if p.is_file()}
    assert set(paths) == written


def _convert(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = cli.main(["convert", *argv])
    return status, capsys.readouterr().err


def _split_set(directory: Path) -> tuple[list[str], dict[str, bytes]]:
    paths = kg.save_gguf(directory / "m.gguf", _tensors(), max_shard_size=40)
    return paths, {p: Path(p).read_bytes() for p in paths}


def test_convert_never_writes_a_split_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The report: converting a split set to splits of the same names replaced its inputs.
    paths, before = _split_set(tmp_path)
    assert len(paths) == 3
    monkeypatch.chdir(tmp_path)
    status, err = _convert(
        "m-00001-of-00003.gguf", "m.gguf", "--to", "gguf", "--max-shard-size", "40",
        capsys=capsys,
    )  # fmt: skip
    assert status == 2
    assert err.startswith(f"kiln-np: FILE: cannot write {paths[0]!r}: it is the input file")
    assert {p: Path(p).read_bytes() for p in paths} == before
    assert sorted(os.listdir(tmp_path)) == sorted(Path(p).name for p in paths)


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_convert_checks_every_split_name_by_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str
) -> None:
    # Only the second split's name is another name of the input.
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, _tensors(), format="safetensors")
    second = tmp_path / "out-00002-of-00003.gguf"
    if link == "hard":
        os.link(src, second)
    else:
        second.symlink_to(src)
    before = src.read_bytes()
    status, err = _convert(
        str(src), str(tmp_path / "out.gguf"), "--to", "gguf", "--max-shard-size", "40",
        capsys=capsys,
    )  # fmt: skip
    assert status == 2
    assert err.startswith(f"kiln-np: FILE: cannot write {str(second)!r}: it is the input file")
    assert src.read_bytes() == before
    assert not (tmp_path / "out-00001-of-00003.gguf").exists()


def test_convert_to_a_sharded_checkpoint_or_kiln_checks_its_members(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A shard or payload file name that is a link to the input (in another directory).
    src = tmp_path / "src" / "a.safetensors"
    src.parent.mkdir()
    kiln_np.save_weights(src, _tensors(), format="safetensors")
    for fmt, dst, member, extra in [
        ("safetensors", "ckpt", "model-00001-of-00003.safetensors", ["--max-shard-size", "40"]),
        ("kiln", "kdir", "0001_t1.kiln", []),
    ]:
        (tmp_path / dst).mkdir()
        os.link(src, tmp_path / dst / member)
        status, err = _convert(str(src), str(tmp_path / dst), "--to", fmt, *extra, capsys=capsys)
        assert status == 2, err
        assert f"cannot write {str(tmp_path / dst / member)!r}" in err


def test_python_save_over_its_own_splits_from_them_works(tmp_path: Path) -> None:
    # Documented: every output is written to a temporary and renamed only once every
    # input byte has been read, so writing a set over itself from itself is safe.
    paths, _ = _split_set(tmp_path)
    expected = {n: a.tobytes() for n, a in _tensors().items()}
    with kiln_np.open_weights(paths[0]) as w:
        kiln_np.save_weights(tmp_path / "m.gguf", w, format="gguf", max_shard_size=40)
    with kiln_np.open_weights(paths[0]) as w:
        got: dict[str, Any] = {n: t.numpy().tobytes() for n, t in w.items()}
    assert got == expected
