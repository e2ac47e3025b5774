"""GGUF limits that keep hostile or careless headers cheap: the alignment cap and
bounded padding writes, the depth of metadata type specs, nested-array values."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from _helpers import gguf_info, gguf_kv, kiln_np_exe

import kiln_np
import kiln_np.gguf as kg
from kiln_np import KilnError

MAX_ALIGNMENT = 1 << 16  # docs/weights.md: the largest general.alignment read or written


def _aligned_file(path: Path, alignment: int, apparent: int) -> Path:
    """One F32 [2] tensor at data offset 0 under ``general.alignment``, the file
    extended (sparse: a hole, no bytes written) to ``apparent`` bytes."""
    kvs = [gguf_kv("general.alignment", 4, struct.pack("<I", alignment))]
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + gguf_info("w")
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(apparent)
    return path


# -- alignment: capped, padding bounded -----------------------------------------------------


@pytest.mark.parametrize("alignment", [2 * MAX_ALIGNMENT, 1 << 30, 1 << 31])
def test_an_alignment_above_the_cap_is_refused_on_read(tmp_path: Path, alignment: int) -> None:
    path = _aligned_file(tmp_path / "a.gguf", alignment, alignment + 4096)
    with pytest.raises(KilnError, match=r"general\.alignment.*at most 65536") as e:
        kg.read_gguf(path)
    assert e.value.kind == "TYPE"


@pytest.mark.parametrize("alignment", [2 * MAX_ALIGNMENT, 1 << 31])
def test_an_alignment_above_the_cap_is_refused_on_write(tmp_path: Path, alignment: int) -> None:
    meta = {"general.alignment": np.uint32(alignment)}
    with pytest.raises(KilnError, match=r"at most 65536") as e:
        kg.save_gguf(tmp_path / "a.gguf", {"w": np.zeros(2, np.float32)}, meta)
    assert e.value.kind == "TYPE"
    assert os.listdir(tmp_path) == []


def test_the_largest_alignment_reads_and_writes(tmp_path: Path) -> None:
    path = _aligned_file(tmp_path / "a.gguf", MAX_ALIGNMENT, 2 * MAX_ALIGNMENT)
    assert kg.read_gguf(path).tensors[0].offset == MAX_ALIGNMENT
    tensors = {f"t{i}": np.full(3, i, np.float32) for i in range(3)}
    out = tmp_path / "b.gguf"
    kg.save_gguf(out, tensors, {"general.alignment": np.uint32(MAX_ALIGNMENT)})
    reader = gguf.GGUFReader(out)
    assert reader.alignment == MAX_ALIGNMENT
    assert [t.data.tolist() for t in reader.tensors] == [[i] * 3 for i in range(3)]
    assert out.stat().st_size == 4 * MAX_ALIGNMENT  # the header, then each tensor, padded


def _peak_of_save(path: Path, tensors: dict[str, np.ndarray], alignment: int) -> int:
    meta = {"general.alignment": np.uint32(alignment)}
    kg.save_gguf(path, tensors, meta)  # warm: first-use imports and caches
    tracemalloc.start()
    try:
        kg.save_gguf(path, tensors, meta)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_padding_is_written_without_allocating_it(tmp_path: Path) -> None:
    # 64 tensors of 4 bytes at a 64 KiB alignment: 4 MiB of padding, none of it allocated.
    tensors = {f"t{i}": np.full(1, i, np.float32) for i in range(64)}
    small = _peak_of_save(tmp_path / "a.gguf", tensors, 32)
    large = _peak_of_save(tmp_path / "b.gguf", tensors, MAX_ALIGNMENT)
    assert (tmp_path / "b.gguf").stat().st_size == 65 * MAX_ALIGNMENT
    assert large - small < 4096, (small, large)


# -- depth of metadata types and values: TYPE, never RecursionError ------------------------


def _nested_spelling(depth: int, leaf: str = "int32") -> str:
    return "array[" * depth + leaf + "]" * depth


def _nested_list(depth: int) -> list[object]:
    value: list[object] = [1]
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [5, 2000, 100_000])
def test_a_type_spelling_nested_too_deep_is_type(tmp_path: Path, depth: int) -> None:
    types = {"k": _nested_spelling(depth)}
    with pytest.raises(KilnError, match="expected arrays nested at most 4 deep") as e:
        kg.save_gguf(tmp_path / "a.gguf", {}, {"k": _nested_list(4)}, metadata_types=types)
    assert e.value.kind == "TYPE"
    assert len(str(e.value)) < 300  # the spelling is shown cut short


@pytest.mark.parametrize("depth", [5, 2000])
def test_a_value_nested_too_deep_is_type(tmp_path: Path, depth: int) -> None:
    with pytest.raises(KilnError, match="expected arrays nested at most 4 deep") as e:
        kg.save_gguf(tmp_path / "a.gguf", {}, {"k": _nested_list(depth)})
    assert e.value.kind == "TYPE"


@pytest.mark.parametrize("leaf", ["int32", "array"])
def test_four_levels_are_written_and_read(tmp_path: Path, leaf: str) -> None:
    spelling = _nested_spelling(4 if leaf == "int32" else 3, leaf)
    path = tmp_path / "a.gguf"
    kg.save_gguf(path, {}, {"k": _nested_list(4)}, metadata_types={"k": spelling})
    assert kg.read_gguf(path).metadata.types["k"] == _nested_spelling(4)
    assert gguf.GGUFReader(path).fields["k"].types == [gguf.GGUFValueType.ARRAY] * 4 + [
        gguf.GGUFValueType.INT32
    ]


def test_converting_a_kiln_directory_with_deep_types_is_one_line(tmp_path: Path) -> None:
    kdir = tmp_path / "k"
    kiln_np.save_weights(kdir, {"w": np.zeros(2, np.float32)}, format="kiln", metadata={"k": 1})
    manifest = json.loads((kdir / "manifest.json").read_text())
    manifest["metadata_types"] = {"k": _nested_spelling(2000)}
    (kdir / "manifest.json").write_text(json.dumps(manifest))
    argv = [*kiln_np_exe(), "convert", str(kdir), str(tmp_path / "o.gguf"), "--to", "gguf"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert run.stderr.startswith("kiln-np: TYPE: metadata key 'k': expected arrays nested")
    assert run.stderr.count("\n") == 1
    assert not (tmp_path / "o.gguf").exists()
