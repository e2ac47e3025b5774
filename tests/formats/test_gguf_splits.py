"""GGUF split sets: what every split carries, what a reader refuses, how a set is written.

Each split written by ``save_gguf`` is read on its own by gguf-py's ``GGUFReader``
(as llama.cpp reads each split) and the whole set by kiln_np; sets that a crash, an
older writer or gguf-py's own split writer left inconsistent are TYPE, never the
wrong bytes.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _helpers import gguf_info, gguf_kv, kiln_np_exe, optional

import kiln_np
import kiln_np.gguf as kg
from kiln_np import KilnError

if TYPE_CHECKING:
    import gguf
else:
    gguf = optional("gguf")

SET_KEY = "kiln_np.split.set_id"  # the key every split of one save_gguf write holds


def _odd_tensors(n: int = 4) -> dict[str, np.ndarray]:
    # 5 float32s: 20 bytes, so every tensor after the first needs padding to any alignment
    return {f"t{i}": np.arange(5, dtype=np.float32) + 10 * i for i in range(n)}


def _gguf_py_splits(directory: Path, n: int, per_split: int, alignment: int | None = None) -> None:
    """``m-0000i-of-0000k.gguf`` in ``directory``, as gguf-py's split writer writes them."""
    w = gguf.GGUFWriter(str(directory / "m.gguf"), "llama", split_max_tensors=per_split)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for name, arr in _odd_tensors(n).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# -- alignment: in every split -----------------------------------------------------------


@pytest.mark.parametrize("alignment", [8, 16, 64, 128, 256])
def test_every_split_carries_its_alignment(tmp_path: Path, alignment: int) -> None:
    tensors = _odd_tensors()
    meta = {"general.alignment": np.uint32(alignment), "k": np.uint32(7)}
    paths = kg.save_gguf(tmp_path / "m.gguf", tensors, meta, max_shard_size=40)
    assert len(paths) == 2
    for p in paths:  # each split alone, as llama.cpp and gguf-py read it
        reader = gguf.GGUFReader(p)
        assert reader.alignment == alignment
        assert reader.fields["general.alignment"].contents() == alignment
        for t in reader.tensors:
            assert t.data_offset % alignment == 0
            assert t.data.tobytes() == tensors[t.name].tobytes()
    assert "k" in gguf.GGUFReader(paths[0]).fields  # the rest stays in the first split
    assert "k" not in gguf.GGUFReader(paths[1]).fields
    with kiln_np.open_weights(paths[0]) as w:
        assert {n: t.numpy().tobytes() for n, t in w.items()} == {
            n: a.tobytes() for n, a in tensors.items()
        }


def test_gguf_py_split_writer_with_an_alignment_is_refused(tmp_path: Path) -> None:
    # gguf-py 0.19 writes general.alignment into the first split only and pads the
    # others to 32: reading its later splits at 64 or 32 alike gives the wrong bytes.
    _gguf_py_splits(tmp_path, 2, 1, alignment=64)
    with pytest.raises(KilnError, match=r"m-00002-of-00002\.gguf.*alignment.*64, found 32") as e:
        kg.read_gguf(tmp_path / "m-00001-of-00002.gguf")
    assert e.value.kind == "TYPE"


def _split(no: int, name: str, alignment: int | None, *extra: bytes, count: int = 2) -> bytes:
    """Split ``no`` of ``count`` by hand: one F32 [2] tensor, padded to ``alignment``
    (32 when None, and then no general.alignment key)."""
    kvs = [
        gguf_kv("split.no", 2, struct.pack("<H", no)),
        gguf_kv("split.count", 2, struct.pack("<H", count)),
        gguf_kv("split.tensors.count", 5, struct.pack("<i", count)),
        *extra,
    ]
    if alignment is not None:
        kvs.append(gguf_kv("general.alignment", 4, struct.pack("<I", alignment)))
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + gguf_info(name)
    pad = -len(head) % (alignment or 32)
    return head + bytes(pad) + np.array([no, no], np.float32).tobytes()


@pytest.mark.parametrize(("first", "second"), [(None, 64), (64, None), (64, 128), (32, None)])
def test_splits_whose_alignments_differ(
    tmp_path: Path, first: int | None, second: int | None
) -> None:
    (tmp_path / "m-00001-of-00002.gguf").write_bytes(_split(0, "a", first))
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(_split(1, "b", second))
    if (first or 32) == (second or 32):  # no key means 32, as the GGUF spec says
        with kiln_np.open_weights(tmp_path / "m-00001-of-00002.gguf") as w:
            assert [t.numpy().tolist() for t in w.values()] == [[0, 0], [1, 1]]
        return
    with pytest.raises(KilnError, match=r"m-00002-of-00002\.gguf.*expected the alignment") as e:
        kg.read_gguf(tmp_path / "m-00001-of-00002.gguf")
    assert e.value.kind == "TYPE"


# -- a FIFO named like a split: TYPE at once, never opened -------------------------------

_OPEN_EACH_WAY = """
import sys, kiln_np, kiln_np.gguf as kg
for door in (kg.read_gguf, kg.open_gguf, kiln_np.open_weights):
    try:
        door(sys.argv[1])
    except kiln_np.KilnError as exc:
        print(exc.kind, str(exc).split(": ")[1])
"""


@pytest.mark.parametrize(("count", "fifo_no"), [(2, 2), (3, 3), (3, 2)])
def test_a_fifo_as_a_split_is_type_not_a_hang(tmp_path: Path, count: int, fifo_no: int) -> None:
    paths = kg.save_gguf(tmp_path / "m.gguf", _odd_tensors(count), max_shard_size=20)
    assert len(paths) == count
    os.unlink(paths[fifo_no - 1])
    os.mkfifo(paths[fifo_no - 1])
    # A subprocess with a timeout: opening a FIFO for reading would block this one forever.
    run = subprocess.run(
        [sys.executable, "-c", _OPEN_EACH_WAY, paths[0]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert run.stdout.splitlines() == [f"TYPE {paths[fifo_no - 1]!r}"] * 3
    argv = [*kiln_np_exe(), "ls", paths[0]]
    cli = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2
    assert cli.stderr.startswith("kiln-np: TYPE: ")
    assert "FIFO" in cli.stderr


# -- one write, one set: a mix of two writes' splits is refused ---------------------------


def _two_versions(tmp_path: Path) -> tuple[list[str], dict[str, bytes]]:
    """A set written twice (version 1, then 2); returns the paths and version 1's bytes."""
    base = tmp_path / "m.gguf"
    old = kg.save_gguf(base, _odd_tensors(3), max_shard_size=20)
    kept = {p: Path(p).read_bytes() for p in old}
    new = kg.save_gguf(base, {n: a + 100 for n, a in _odd_tensors(3).items()}, max_shard_size=20)
    assert new == old
    return new, kept


@pytest.mark.parametrize("stale", [0, 1, 2])
def test_splits_of_two_writes_are_refused(tmp_path: Path, stale: int) -> None:
    # What a write stopped between renames leaves: some splits new, one old.
    paths, old = _two_versions(tmp_path)
    Path(paths[stale]).write_bytes(old[paths[stale]])
    other = paths[1] if stale == 0 else paths[stale]
    with pytest.raises(KilnError, match=r"kiln_np\.split\.set_id.*different writes") as e:
        kiln_np.open_weights(paths[0])
    assert e.value.kind == "TYPE"
    assert repr(other) in str(e.value)
    assert repr(paths[0]) in str(e.value)


def test_every_split_of_one_write_has_one_set_id(tmp_path: Path) -> None:
    paths, _ = _two_versions(tmp_path)
    ids = {gguf.GGUFReader(p).fields[SET_KEY].contents() for p in paths}
    assert len(ids) == 1
    [set_id] = ids
    assert len(set_id) == 32
    int(set_id, 16)
    with kiln_np.open_weights(paths[0]) as w:  # a set of one write opens
        assert w["t2"].numpy().tolist() == [120, 121, 122, 123, 124]
        # Writing it again (as one file or as splits) gets a new id, not the old one.
        one = kg.save_gguf(tmp_path / "one.gguf", w, w.metadata)[0]
        again = kg.save_gguf(tmp_path / "again.gguf", w, w.metadata, max_shard_size=20)
    assert SET_KEY not in kg.read_gguf(one).metadata
    assert kg.read_gguf(again[0]).metadata[SET_KEY] not in ids


def test_a_set_without_ids_mixed_with_one_with_ids_is_refused(tmp_path: Path) -> None:
    # gguf-py's (and gguf-split's) sets carry no id and open; a kiln_np split in their
    # place is another write.
    _gguf_py_splits(tmp_path, 4, 2)
    first, second = tmp_path / "m-00001-of-00002.gguf", tmp_path / "m-00002-of-00002.gguf"
    assert [t.name for t in kg.read_gguf(first).tensors] == ["t0", "t1", "t2", "t3"]
    (tmp_path / "x").mkdir()
    ours = kg.save_gguf(tmp_path / "x" / "m.gguf", _odd_tensors(4), max_shard_size=40)
    second.write_bytes(Path(ours[1]).read_bytes())
    with pytest.raises(KilnError, match=r"kiln_np\.split\.set_id .*, no such key, found '"):
        kg.read_gguf(first)


# -- writing: one split at a time, nothing replaced until all are written ---------------

_MANY_SPLITS = """
import resource, sys, numpy as np, kiln_np, kiln_np.gguf as kg
tensors = {f"t{i}": np.full(2, i, np.float32) for i in range(300)}
resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
paths = kg.save_gguf(sys.argv[1], tensors, max_shard_size=8)
with kiln_np.open_weights(paths[0]) as w:
    print(len(paths), len(w), float(w["t299"].numpy()[1]))
"""


def test_writing_many_splits_holds_one_descriptor(tmp_path: Path) -> None:
    # 300 splits under a limit of 40 open files: each split is closed before the next.
    run = subprocess.run(
        [sys.executable, "-c", _MANY_SPLITS, str(tmp_path / "m.gguf")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["300", "300", "299.0"]
    assert len(os.listdir(tmp_path)) == 300  # no temporary left


class _StopError(Exception):
    pass


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_failed_split_replaces_nothing(tmp_path: Path, fail_at: int) -> None:
    # Writing stops in split 1, 2 or 3 of a new version: the current set stays whole.
    paths, _ = _two_versions(tmp_path)
    current = {p: Path(p).read_bytes() for p in paths}
    written: list[int] = []

    def progress(n: int) -> None:
        written.append(n)
        if len(written) == fail_at:
            raise _StopError

    newer = {n: a + 200 for n, a in _odd_tensors(3).items()}
    with pytest.raises(_StopError):
        kg.save_gguf(tmp_path / "m.gguf", newer, max_shard_size=20, progress=progress)
    assert {p: Path(p).read_bytes() for p in paths} == current
    assert sorted(os.listdir(tmp_path)) == sorted(Path(p).name for p in paths)  # no temporary
    with kiln_np.open_weights(paths[0]) as w:
        assert w["t0"].numpy().tolist() == [100, 101, 102, 103, 104]
