"""Hostile GGUF files: random mutations of a valid file either open or raise KilnError.

A small file written by ``gguf.GGUFWriter`` (every metadata value type, plain
and quantized tensors) is mutated: bytes overwritten, "interesting" integers
(0, 1, 2**31, 2**63, 2**64-1, the file size) written over counts and offsets,
the file cut short; the same file with its Q8_0 tensor of a GGML type id
kiln_np does not know (a fork's 142) is mutated too, and type ids are written
over type fields.  ``read_gguf`` must then either succeed, with every tensor
payload and metadata value readable, or raise ``KilnError``; nothing else may
escape.  What opens is written back with ``save_gguf`` (which may refuse it
with ``KilnError``: an empty tensor, a name llama.cpp cannot load) and must
read back with the same tensor bytes and metadata types.  Tables of known and
unknown tensors at random offsets, built by hand, either fail with KilnError or
give each unknown tensor the bytes up to the next larger offset (or the file's
end), without overlap, and write back with the same type ids, dims and bytes.
``fuzz/run.py hypothesis --match gguf`` runs the properties for longer.
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from unittest.mock import patch

import numpy as np
import pytest
from _helpers import gguf_bytes, gguf_facts, gguf_info, needs, optional
from hypothesis import event, given, settings
from hypothesis import strategies as st

import kiln_np.gguf as kg
from kiln_np import KilnError
from kiln_np.gguf import _reader

if TYPE_CHECKING:
    import gguf
else:
    gguf = optional("gguf")

EXAMPLES = max(1, settings().max_examples // 2)


def _seed() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_uint32("u32", 7)
        w.add_float32("f32", 0.5)
        w.add_bool("b", True)
        w.add_string("s", "str")
        w.add_array("toks", ["a", "bc"])
        w.add_array("ints", [1, 2])
        w.add_array("nested", [[1], [2, 3]])
        w.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
        q = gguf.quants.quantize(np.ones((2, 32), np.float32), gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("q", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path.read_bytes()


SEED = _seed()
INTERESTING = [0, 1, 4, 9, 13, 2**31, 2**32 - 1, 2**63, 2**64 - 1, len(SEED), 2**60]
_Q_TYPE = SEED.index(struct.pack("<Q1sI", 1, b"q", 2)) + 13 + 16  # q's GGML type field
FORK_SEED = SEED[:_Q_TYPE] + struct.pack("<I", 142) + SEED[_Q_TYPE + 4 :]  # a fork's type id
TYPE_IDS = [142, 4, 31, 43, 14591, 14592, 2**32 - 1]  # unknown, removed, past the codes

edits = st.lists(
    st.one_of(
        st.tuples(st.integers(0, len(SEED) - 1), st.binary(min_size=1, max_size=4)),
        st.tuples(
            st.integers(0, len(SEED) - 8),
            st.sampled_from(INTERESTING).map(lambda n: struct.pack("<Q", n)),
        ),
        st.tuples(
            st.integers(0, len(SEED) - 4),
            st.sampled_from(TYPE_IDS).map(lambda n: struct.pack("<I", n)),
        ),
    ),
    min_size=1,
    max_size=4,
)


def _mutate(edit_list: list[tuple[int, bytes]], cut: int | None, seed: bytes = SEED) -> bytes:
    data = bytearray(seed)
    for pos, raw in edit_list:
        data[pos : pos + len(raw)] = raw
    return bytes(data[:cut] if cut is not None else data)


def _as_written(path: Path, data: dict[str, bytes]) -> dict[str, bytes]:
    """The tensor bytes a copy of ``path`` reads back: the same, and an unknown type's
    padded to the alignment (its bytes are the gap, and a last tensor's gap to the file's
    end may lack the padding every writer adds)."""
    found = kg.read_gguf(path)
    unknown = {t.name for t in found.tensors if not t.ggml.known}
    pad = found.alignment
    return {n: b + bytes(-len(b) % pad) if n in unknown else b for n, b in data.items()}


def _read_all(path: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    found = kg.read_gguf(path)
    meta = found.metadata
    for key in meta:
        assert meta[key] is not None  # every value decodes
    with kg.open_gguf(path) as weights:
        data = {name: bytes(t.payload().data) for name, t in weights.items()}
        known = {t.name for t in found.tensors if t.ggml.known}
        for t in weights.values():
            if t.name in known:
                t.numpy()
            else:  # its numbers are unknown: TYPE naming the bytes' door (issue 36)
                with pytest.raises(KilnError, match=r"^TYPE: .*t\.payload\(\)"):
                    t.numpy()
    return data, dict(meta.types)


@settings(max_examples=EXAMPLES)
@given(edits, st.one_of(st.none(), st.integers(0, len(SEED))), st.sampled_from([SEED, FORK_SEED]))
def test_mutated_gguf_oracle(
    edit_list: list[tuple[int, bytes]], cut: int | None, seed: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.gguf"
        path.write_bytes(_mutate(edit_list, cut, seed))
        try:
            data, types = _read_all(path)
        except KilnError:
            return
        copy = Path(tmp) / "copy.gguf"
        try:
            with kg.open_gguf(path) as weights:
                kg.save_gguf(copy, weights, weights.metadata)
        except KilnError:
            return
        again, again_types = _read_all(copy)
        assert again == _as_written(path, data)
        assert again_types == {k: v for k, v in types.items() if not k.startswith("split.")}


@needs("fsspec")
@settings(max_examples=EXAMPLES)
@given(edits, st.one_of(st.none(), st.integers(0, len(SEED))), st.sampled_from([1, 7, 64]))
def test_a_header_read_in_growing_ranges_is_the_local_header(
    edit_list: list[tuple[int, bytes]], cut: int | None, slack: int
) -> None:
    """The same bytes behind a URL (fsspec's memory file system), the header read in
    growing ranges from ``slack`` bytes on: the same header, or the same KilnError."""
    import fsspec

    data = _mutate(edit_list, cut)
    url = "memory://kiln-fuzz/m.gguf"
    fsspec.filesystem("memory").pipe_file(url, data)
    with tempfile.TemporaryDirectory() as tmp, patch.object(_reader, "HEADER_SLACK", slack):
        path = Path(tmp) / "m.gguf"
        path.write_bytes(data)
        want = gguf_facts(lambda: kg.read_gguf(path), str(path))
        assert gguf_facts(lambda: kg.read_gguf(url), url) == want


def test_the_seed_opens() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        path.write_bytes(SEED)
        data, types = _read_all(path)
    assert list(data) == ["w", "q"]
    assert types["nested"] == "array[array[int32]]"


def test_the_fork_seed_opens() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fork.gguf"
        path.write_bytes(FORK_SEED)
        data, _ = _read_all(path)
        q = kg.read_gguf(path).tensors[1]
    assert (q.ggml.name, q.dims, q.info.byte_length) == ("type142", (32, 2), len(data["q"]))
    assert len(data["q"]) == len(SEED) - q.offset  # the last tensor: to the end of the file


# One tensor of a table: F32 (0) or an unknown type id, its dims, its offset in 32-byte steps.
tables = st.lists(
    st.tuples(
        st.sampled_from([0, 142, 143, 31]),
        st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple),
        st.integers(0, 12),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=EXAMPLES)
@given(tables, st.integers(0, 13 * 32))
def test_unknown_tensors_take_the_gap_to_the_next_offset(
    table: list[tuple[int, tuple[int, ...], int]], data_bytes: int
) -> None:
    infos = [gguf_info(f"t{i}", dims, tid, 32 * step) for i, (tid, dims, step) in enumerate(table)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.gguf"
        path.write_bytes(gguf_bytes(infos=infos, data=(bytes(range(256)) * 2)[:data_bytes]))
        try:
            found = kg.read_gguf(path).tensors
        except KilnError as exc:
            event(f"refused: {exc.kind}")
            return
        event("opened")
        size = path.stat().st_size
        starts = sorted({t.offset for t in found})
        ranges = []
        for t, (tid, dims, _) in zip(found, table, strict=True):
            assert (t.ggml.type_id, t.dims) == (tid, dims)
            if tid != 0:
                later = [s for s in starts if s > t.offset]
                end = 0 if 0 in dims else min([*later, size]) - t.offset
                assert t.info.byte_length == end
            if t.info.byte_length:
                ranges.append((t.offset, t.offset + t.info.byte_length))
        ranges.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))  # no overlap
        data, _ = _read_all(path)
        copy = Path(tmp) / "copy.gguf"
        try:
            with kg.open_gguf(path) as weights:
                kg.save_gguf(copy, weights)
        except KilnError:  # an empty tensor: llama.cpp cannot load it
            assert any(0 in dims for _, dims, _ in table)
            return
        again = kg.read_gguf(copy).tensors
        assert [(t.ggml.type_id, t.dims) for t in again] == [(tid, d) for tid, d, _ in table]
        assert _read_all(copy)[0] == _as_written(path, data)
