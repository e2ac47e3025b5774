"""GGUF limits that keep hostile or careless headers cheap: the alignment cap and
bounded padding writes, the depth of metadata type specs, nested-array values."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _helpers import gguf_bytes, gguf_info, gguf_kv, kiln_np_exe, optional

import kiln_np
import kiln_np.gguf as kg
from kiln_np import KilnError

if TYPE_CHECKING:
    import gguf
else:
    gguf = optional("gguf")

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


# -- nested arrays: linear to open, lazy to read ----------------------------------------------


def _nested_file(path: Path, items: np.ndarray, n: int) -> Path:
    """A file whose one key ``k`` is an array of ``n`` arrays, their bytes ``items``."""
    kv = gguf_kv("k", 9, struct.pack("<IQ", 9, n) + items.tobytes())
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv
    path.write_bytes(head + bytes(-len(head) % 32))
    return path


def _uniform(n: int, t: int = 5, dtype: str = "<i4") -> np.ndarray:
    items = np.zeros(n, [("t", "<u4"), ("n", "<u8"), ("v", dtype)])
    items["t"], items["n"], items["v"] = t, 1, np.arange(n) % 2 if t == 7 else np.arange(n)
    return items


def _ragged(n: int) -> np.ndarray:
    pairs = np.zeros(n // 2, [("t", "<u4"), ("n", "<u8"), ("v", "<i4"),
                              ("t2", "<u4"), ("n2", "<u8"), ("v2", "<i4", (2,))])  # fmt: skip
    pairs["t"], pairs["n"], pairs["v"] = 5, 1, np.arange(n // 2)
    pairs["t2"], pairs["n2"], pairs["v2"] = 5, 2, -1
    return pairs


def _read_peak(path: Path) -> tuple[kg.GGUFArrays, int]:
    meta = kg.read_gguf(path).metadata
    tracemalloc.start()
    try:
        value = meta["k"]
        value[len(value) - 1]
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_nested_array_opens_and_reads_in_bounded_memory(tmp_path: Path) -> None:
    n = 1_000_000  # 16 MB of arrays of one int32
    path = _nested_file(tmp_path / "u.gguf", _uniform(n), n)
    start = time.perf_counter()
    assert kg.read_gguf(path).metadata.types["k"] == "array[array[int32]]"
    assert time.perf_counter() - start < 2.0  # ~0.05 s here; a pass per item took 8 s
    value, peak = _read_peak(path)
    assert isinstance(value, kg.GGUFArrays)
    assert len(value) == n
    assert value[-1].tolist() == [n - 1]
    assert peak < n * 2  # a list of arrays held ~100 bytes per item
    # Written back as it was read: the same bytes, without a pass per item.
    kg.save_gguf(tmp_path / "again.gguf", {}, kg.read_gguf(path).metadata)
    assert (tmp_path / "again.gguf").read_bytes() == path.read_bytes()


def test_a_ragged_nested_array_keeps_8_bytes_per_item(tmp_path: Path) -> None:
    n = 400_000
    path = _nested_file(tmp_path / "r.gguf", _ragged(n), n)
    value, peak = _read_peak(path)
    assert [value[i].tolist() for i in (0, 1, n - 2, n - 1)] == [
        [0],
        [-1, -1],
        [n // 2 - 1],
        [-1, -1],
    ]
    assert peak < 9 * n  # 8 bytes per start, and the array.array's growth
    assert [a.tolist() for a in value[:3]] == [[0], [-1, -1], [1]]


@pytest.mark.parametrize("counts", [[1] * 1000, [1, 2, 3] * 333], ids=["uniform", "ragged"])
def test_a_bad_bool_deep_in_a_nested_array_is_type(tmp_path: Path, counts: list[int]) -> None:
    inner = [bytearray(struct.pack("<IQ", 7, c) + bytes(c)) for c in counts]
    inner[700][-1] = 2  # the last bool of item 700
    path = _nested_file(tmp_path / "b.gguf", np.frombuffer(b"".join(inner), np.uint8), len(counts))
    at = 24 + 8 + 1 + 4 + 12 + sum(map(len, inner[:701])) - 1
    with pytest.raises(KilnError, match=rf"bool bytes 0x00 or 0x01, found 0x02 at byte {at}$") as e:
        kg.read_gguf(path)
    assert e.value.kind == "TYPE"


def test_nested_arrays_read_as_gguf_py_reads_them(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(str(tmp_path / "o.gguf"), "llama")
    values: dict[str, list[Any]] = {
        "same": [[1, 2], [3, 4], [5, 6]],
        "ragged": [[1], [2, 3], [4, 5, 6]],
        "mixed": [[1, 2], [0.5], [True]],
        "deep": [[[1], [2, 3]], [[4]]],
        "flags": [[True, False], [True]],
    }
    for key, value in values.items():
        w.add_array(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    meta = kg.read_gguf(tmp_path / "o.gguf").metadata
    oracle = gguf.GGUFReader(tmp_path / "o.gguf").fields

    def plain(v: object) -> object:
        if isinstance(v, (kg.GGUFArrays, list)):
            return [plain(x) for x in v]
        return v.tolist() if isinstance(v, np.ndarray) else v

    def flat(v: object) -> list[object]:  # gguf-py's contents() of nested arrays is flat
        return [y for x in v for y in flat(x)] if isinstance(v, list) else [v]

    for key, value in values.items():
        assert plain(meta[key]) == value, key
        assert flat(plain(meta[key])) == oracle[key].contents(), key
    assert meta.types["mixed"] == "array[array]"
    assert meta.types["deep"] == "array[array[array[int32]]]"
    kg.save_gguf(tmp_path / "back.gguf", {}, meta)
    back = gguf.GGUFReader(tmp_path / "back.gguf").fields
    assert {k: back[k].contents() for k in values} == {k: oracle[k].contents() for k in values}


# -- tensor infos: every field's error names the file and the tensor (issue 36) -------------


@pytest.mark.parametrize(
    ("dims", "type_id", "offset", "says"),
    [
        ((0,), 0, 1 << 63, "data offset of at most 2**63-1"),  # an empty F32
        ((32, 0), 2, (1 << 64) - 32, "data offset of at most 2**63-1"),  # an empty Q4_0
        ((0,), 200, (1 << 64) - 32, "data offset of at most 2**63-1"),  # an empty unknown type
        ((2,), 0, 4, "multiple of the alignment"),
        ((1 << 63, 0), 0, 0, "product is at most 2**63-1"),
        ((33,), 2, 0, "multiple of the 32-element block"),
        ((2,), 0, 1 << 40, "expected 2 x 4 = 8 bytes"),
    ],
    ids=["empty-f32", "empty-q4_0", "empty-unknown", "unaligned", "dims", "block", "past-end"],
)
def test_a_tensor_info_error_names_the_file_and_the_tensor(
    tmp_path: Path, dims: tuple[int, ...], type_id: int, offset: int, says: str
) -> None:
    """An offset past 2**63-1 on an empty tensor was a bare "expected offset to be an
    integer in 0..2**63-1" naming neither the file nor the tensor; like every other
    tensor-info field, it names both now."""
    path = tmp_path / "hostile.gguf"
    path.write_bytes(
        gguf_bytes(
            infos=[gguf_info("ok", (2,)), gguf_info("blk.0.w", dims, type_id, offset)],
            data=bytes(64),
        )
    )
    for door in (kiln_np.open_weights, kg.read_gguf):
        with pytest.raises(KilnError) as e:
            door(path)
        message = str(e.value)
        assert str(path) in message
        assert "tensor 'blk.0.w'" in message
        assert says in message
