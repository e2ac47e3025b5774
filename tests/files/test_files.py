"""open_payload / save_payload / LazyPayload: lazy reads, streamed writes, big files."""

from __future__ import annotations

import doctest
import errno
import importlib
import io
import itertools
import json
import os
import pickle
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import needs
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import (
    DTYPES,
    Code,
    KilnError,
    Layout,
    LazyPayload,
    PayloadInfo,
    _codec,
    from_numpy,
    open_payload,
    save_payload,
    to_numpy,
)
from kiln_np._core import checks as _checks
from kiln_np._files import io as _io
from kiln_np._files import payload as _files
from kiln_np._files import saving as _saving

WHOLE = [r for r in DTYPES if not r.packed]
MAPPED = [r for r in WHOLE if r.code != Code.BOOL]
LAZY = [r for r in DTYPES if r.packed or r.code == Code.BOOL]


def bits(a: np.ndarray) -> bytes:
    """The element bytes of ``a`` in C order, as stored."""
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def sample(row: kiln_np.DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A valid array of ``row``'s dtype: random bit patterns (0/1 for bool, 0-15 for 4-bit)."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if row.packed or row.code == Code.BOOL:
        raw = rng.integers(0, 16 if row.packed else 2, count, dtype=np.uint8)
    else:
        raw = rng.integers(0, 256, count * row.dtype.itemsize, dtype=np.uint8)
    return raw.view(row.dtype).reshape(shape)


def open_lazy(path: Path, code: int, shape: tuple[int, ...], **kw: Any) -> LazyPayload:
    opened = open_payload(path, code, shape, **kw)
    assert isinstance(opened, LazyPayload)
    return opened


def open_mapped(path: Path, code: int, shape: tuple[int, ...], **kw: Any) -> np.ndarray:
    opened = open_payload(path, code, shape, **kw)
    assert isinstance(opened, np.ndarray)
    return opened


def u4(values: object) -> np.ndarray:
    return np.asarray(values, np.uint8).view(ml_dtypes.uint4)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".part"))


# -- round trips over the table ---------------------------------------------------------


@pytest.mark.parametrize("row", DTYPES, ids=lambda r: r.name)
@pytest.mark.parametrize("shape", [(7, 5), (6,), (), (0, 3), (2, 3, 5)], ids=str)
def test_write_then_open_round_trips_every_code(
    tmp_path: Path, row: kiln_np.DType, shape: tuple[int, ...]
) -> None:
    arr = sample(row, shape)
    path = tmp_path / "p.bin"
    info = save_payload(path, arr)
    wire = bytes(from_numpy(arr).data)
    assert (info, info.byte_length) == (PayloadInfo(row.code, shape), len(wire))
    assert path.read_bytes() == wire
    opened = open_payload(path, row.code, shape)
    assert opened.shape == shape
    assert opened.dtype == to_numpy(row.code, wire, shape).dtype
    assert bits(np.asarray(opened)) == bits(arr)


@pytest.mark.parametrize("row", MAPPED, ids=lambda r: r.name)
def test_whole_byte_codes_open_as_read_only_memmaps(tmp_path: Path, row: kiln_np.DType) -> None:
    arr = sample(row, (4, 3))
    path = tmp_path / "p.bin"
    path.write_bytes(bytes(from_numpy(arr).data))
    opened = open_payload(path, row.code, (4, 3))
    assert isinstance(opened, np.memmap)
    assert not opened.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        opened[0] = opened[1]


def test_memmap_aliases_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    np.zeros(4, "<u2").tofile(path)
    opened = open_payload(path, Code.U16, (4,))
    with open(path, "r+b") as f:
        f.seek(2)
        f.write(b"\x34\x12")
    assert opened[1] == 0x1234


@pytest.mark.parametrize("row", LAZY, ids=lambda r: r.name)
def test_packed_and_bool_open_lazily(tmp_path: Path, row: kiln_np.DType) -> None:
    arr = sample(row, (5, 3))
    path = tmp_path / "p.bin"
    save_payload(path, arr)
    opened = open_payload(path, row.code, (5, 3))
    assert isinstance(opened, LazyPayload)
    assert (opened.shape, opened.dtype, opened.ndim, opened.size, len(opened)) == (
        (5, 3),
        row.dtype,
        2,
        15,
        5,
    )
    assert opened.nbytes == 15
    assert opened.payload_byte_length == row.byte_length(15)
    # Results are new arrays: writing one leaves the file alone.
    first = opened[0]
    first[...] = first[::-1]
    assert Path(path).read_bytes() == bytes(from_numpy(arr).data)


def test_empty_payload_is_an_empty_read_only_array(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"")
    opened = open_mapped(path, Code.F32, (0, 4))
    assert opened.shape == (0, 4)
    assert opened.dtype == np.dtype("<f4")
    assert not opened.flags.writeable


def test_opaque_code_opens_as_blocks(tmp_path: Path) -> None:
    layout = Layout("q4_k", 3)
    blocks = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    path = tmp_path / "p.bin"
    info = save_payload(path, blocks, code=4100, layout=layout)
    assert (info, info.byte_length) == (PayloadInfo(4100, (2, 4), layout), 24)
    opened = open_mapped(path, 4100, (2, 4), layout=layout)
    assert bits(opened) == bits(blocks)
    lazy = LazyPayload(path, 4100, (2, 4), layout=layout)
    assert bits(lazy[1, 2:]) == bits(blocks[1, 2:])
    assert "layout=Layout(name='q4_k', block_size=3)" in repr(lazy)


def test_big_endian_hosts_decode_bf16_lazily(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arr = sample(DTYPES[Code.BF16 - 1], (3, 2))
    path = tmp_path / "p.bin"
    save_payload(path, arr)
    monkeypatch.setattr(_codec, "BIG_ENDIAN_HOST", True)
    monkeypatch.setattr(_files, "BIG_ENDIAN_HOST", True)
    opened = open_payload(path, Code.BF16, (3, 2))
    assert isinstance(opened, LazyPayload)
    # Decoded through the core's swap: each element's two bytes reversed, which is
    # how a big-endian host holds the little-endian wire value natively.
    assert bits(opened[1:]) == bits(arr[1:].view(np.uint16).byteswap())
    assert isinstance(open_payload(path, Code.F32, (1, 3)), np.memmap)  # '<f4' maps anywhere


# -- offsets, trailing bytes, LENGTH ---------------------------------------------------------


def test_payload_between_other_bytes(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"HEAD" + bytes.fromhex("21 43 05") + b"trailing bytes are allowed")
    lazy = open_lazy(path, Code.U4, (5,), offset=4)
    assert np.asarray(lazy).view(np.uint8).tolist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("code", [Code.F32, Code.U4, Code.BOOL], ids=lambda c: c.name)
def test_file_one_byte_short_is_length(tmp_path: Path, code: Code) -> None:
    path = tmp_path / "p.bin"
    need = kiln_np.byte_length(code, (3, 3))
    path.write_bytes(b"\x00" * (need + 1))
    with pytest.raises(KilnError, match="short by 1") as info:
        open_payload(path, code, (3, 3), offset=2)
    assert (info.value.kind, info.value.expected, info.value.found) == ("LENGTH", need, need - 1)
    assert info.value.code == code


def test_offset_past_the_end_is_length(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"\x00" * 4)
    with pytest.raises(KilnError, match="end of the file at byte 4, before the offset") as info:
        open_payload(path, Code.U8, (0,), offset=9)
    assert info.value.kind == "LENGTH"


@pytest.mark.parametrize("offset", [-1, 1.0, True, "0"], ids=repr)
def test_bad_offset_is_type(tmp_path: Path, offset: object) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"\x00")
    with pytest.raises(KilnError, match=r"expected offset to be an integer in 0\.\.") as info:
        open_payload(path, Code.U8, (1,), offset=offset)  # type: ignore[arg-type]
    assert info.value.kind == "TYPE"


def test_bad_path_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match=r"expected a str or os\.PathLike path") as info:
        open_payload(3, Code.U8, (1,))  # type: ignore[arg-type]
    assert info.value.kind == "TYPE"
    with pytest.raises(FileNotFoundError):
        open_payload(tmp_path / "missing", Code.U8, (1,))


def test_code_and_shape_are_checked_before_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(KilnError, match="reserved") as info:
        open_payload(missing, 20, (1,))
    assert info.value.kind == "TYPE"
    with pytest.raises(KilnError) as info:
        open_payload(missing, Code.U8, (-1,))
    assert info.value.kind == "SHAPE"


# -- lazy slicing ----------------------------------------------------------------------


@st.composite
def packed_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], Any]:
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=3)))
    n = shape[0]
    lead = st.one_of(
        st.integers(-n, n - 1) if n else st.nothing(),
        st.builds(
            slice,
            st.none() | st.integers(-n - 2, n + 2),
            st.none() | st.integers(-n - 2, n + 2),
            st.none() | st.integers(1, 3) | st.integers(-3, -1),
        ),
    )
    key = draw(lead)
    if len(shape) > 1 and draw(st.booleans()):
        key = (key, slice(None, None, -1))
    return shape, key


@given(case=packed_cases(), code=st.sampled_from([Code.I4, Code.U4, Code.E2M1]))
def test_lazy_indexing_matches_numpy(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[tuple[int, ...], Any],
    code: Code,
) -> None:
    shape, key = case
    arr = sample(DTYPES[code - 1], shape, seed=len(shape))
    path = tmp_path_factory.mktemp("lazy") / "p.bin"
    save_payload(path, arr)
    lazy = open_lazy(path, code, shape)
    got, want = lazy[key], arr[key]
    assert np.shape(got) == np.shape(want)
    assert bits(np.asarray(got)) == bits(np.asarray(want))


def test_rows_that_start_on_an_odd_nibble(tmp_path: Path) -> None:
    values = np.arange(15, dtype=np.uint8).reshape(5, 3)  # 3 nibbles a row
    path = tmp_path / "p.bin"
    save_payload(path, u4(values))
    lazy = open_lazy(path, Code.U4, (5, 3))
    assert np.asarray(lazy[1]).view(np.uint8).tolist() == [3, 4, 5]
    assert np.asarray(lazy[3:]).view(np.uint8).tolist() == [[9, 10, 11], [12, 13, 14]]
    assert np.asarray(lazy[-1, 1]).view(np.uint8) == 13


def test_unsupported_keys_raise_like_numpy(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    save_payload(path, u4([[1, 2], [3, 4]]))
    lazy = open_lazy(path, Code.U4, (2, 2))
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        lazy[2]
    for key in ([0, 1], True, None, 1.0):
        with pytest.raises(TypeError, match="int or a slice"):
            lazy[key]
    assert bits(lazy[...]) == bits(lazy[()]) == bits(u4([[1, 2], [3, 4]]))


@pytest.mark.parametrize(
    "key",
    [
        [0, 1],
        np.array([True, False]),
        [True, False],
        np.array([0, 1]),
        np.array([1]),
        np.array(True),
        (np.array([True, False]), 0),
    ],
    ids=["list", "mask", "bool-list", "index-array", "one-index-array", "0-d-bool", "tuple-mask"],
)
def test_a_mask_or_an_index_array_gets_the_guidance_a_list_does(tmp_path: Path, key: Any) -> None:
    """Issue 37: numpy's own words for an array key ("only integer scalar arrays
    can be converted to a scalar index") said nothing of what to do."""
    path = tmp_path / "p.bin"
    save_payload(path, u4([[1, 2], [3, 4]]))
    lazy = open_lazy(path, Code.U4, (2, 2))
    lead = key[0] if isinstance(key, tuple) else key
    with pytest.raises(TypeError) as info:
        lazy[key]
    assert str(info.value) == (
        "a LazyPayload indexes its leading axis with an int or a slice, got "
        f"{type(lead).__name__} {lead!r}; decode a range first, e.g. p[a:b][key]"
    )
    # What the message says to do works, and agrees with numpy.
    whole = u4([[1, 2], [3, 4]])
    assert bits(lazy[:][key]) == bits(whole[key])
    # An integer 0-d array is an index, as in numpy.
    assert bits(lazy[np.array(1)]) == bits(whole[1])


def test_save_payload_of_a_list_of_numbers_says_what_it_expects(tmp_path: Path) -> None:
    """Issue 37: an iterable is chunks, so a list of numbers is chunks of one
    number each; the error names the number and the fix (was "found chunk 0 0-d")."""
    path = tmp_path / "p.kiln"
    with pytest.raises(KilnError) as info:
        save_payload(path, [1.0, 2.0])
    assert info.value.kind == "SHAPE"
    assert info.value.message == (
        "code 1 (f64): expected an array, or chunks that are C-order slabs along axis 0, "
        "found chunk 0 0-d (float 1.0): an iterable is read as chunks, so pass "
        "np.asarray(values) to write a sequence of numbers as one array, or a single 0-d "
        "array to write a scalar"
    )
    assert not path.exists()
    info_ = save_payload(path, np.asarray([1.0, 2.0]))  # the fix it names
    assert (int(info_.code), info_.shape) == (1, (2,))
    assert path.read_bytes() == np.array([1.0, 2.0], "<f8").view(np.uint8).tobytes()


def test_save_payload_of_a_payload_says_to_pass_its_array(tmp_path: Path) -> None:
    payload = from_numpy(np.array([1.0, -2.0], np.float32))
    path = tmp_path / "p.kiln"
    with pytest.raises(
        KilnError,
        match=r"a Payload is bytes already encoded: pass its array, "
        r"kiln_np.to_numpy\(\*payload\)",
    ) as info:
        save_payload(path, payload)
    assert info.value.kind == "TYPE"
    assert not path.exists()
    save_payload(path, kiln_np.to_numpy(*payload))
    assert path.read_bytes() == bytes(payload.data)


def test_scalar_payload(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    save_payload(path, np.array(9, np.uint8).view(ml_dtypes.uint4))
    lazy = open_lazy(path, Code.U4, ())
    assert lazy.shape == ()
    assert int(lazy[()]) == 9
    assert np.asarray(lazy).shape == ()
    with pytest.raises(TypeError, match="0-d"):
        len(lazy)
    with pytest.raises(TypeError, match="0-d"):
        iter(lazy)
    assert [c.shape for c in lazy.iter_chunks()] == [()]


def test_array_protocol_iteration_and_chunks(tmp_path: Path) -> None:
    arr = sample(DTYPES[Code.I4 - 1], (9, 3))
    path = tmp_path / "p.bin"
    save_payload(path, arr)
    lazy = open_lazy(path, Code.I4, (9, 3))
    assert bits(np.asarray(lazy, dtype=np.int8)) == bits(arr.astype(np.int8))
    with pytest.raises(ValueError, match="copy=False"):
        lazy.__array__(copy=False)  # np.asarray(copy=) needs numpy 2
    chunks = list(lazy.iter_chunks(4))
    assert [c.shape for c in chunks] == [(4, 3), (4, 3), (1, 3)]
    assert bits(np.concatenate(chunks)) == bits(arr)
    assert bits(np.stack(list(lazy))) == bits(arr)
    for rows in (0, -2, 1.5, True):
        with pytest.raises(KilnError, match="expected rows to be an integer >= 1") as info:
            next(lazy.iter_chunks(rows))  # type: ignore[arg-type]
        assert info.value.kind == "SHAPE"


def test_repr_and_pickle(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"xx" + bytes.fromhex("21 43 05"))
    lazy = LazyPayload(path, Code.U4, (5,), offset=2)
    assert repr(lazy) == (
        f"LazyPayload(code 17 (u4), shape=(5,), dtype=uint4, 3 bytes at offset 2 of {str(path)!r})"
    )
    again = pickle.loads(pickle.dumps(lazy))
    assert repr(again) == repr(lazy)
    assert bits(again[1:]) == bits(lazy[1:])


# -- validation happens for the bytes actually read -----------------------------------


def test_bad_bool_byte_is_type_only_when_read(tmp_path: Path) -> None:
    raw = np.zeros(30, np.uint8)
    raw[22] = 0x02
    path = tmp_path / "p.bin"
    raw.tofile(path)
    lazy = open_lazy(path, Code.BOOL, (10, 3))
    assert not np.asarray(lazy[:7]).any()
    assert not np.asarray(lazy[8:]).any()
    with pytest.raises(KilnError, match="found 0x02 at element 22 of the payload") as info:
        lazy[5:]
    assert (info.value.kind, info.value.index, info.value.found) == ("TYPE", 22, 2)
    with pytest.raises(KilnError, match="kiln-v2-bool-byte"):
        np.asarray(lazy)


def test_nonzero_padding_is_type_only_when_the_last_element_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(bytes.fromhex("21 43 f5"))
    lazy = open_lazy(path, Code.U4, (5,))
    assert np.asarray(lazy[:4]).view(np.uint8).tolist() == [1, 2, 3, 4]
    with pytest.raises(KilnError, match="kiln-v2-high-nibble") as info:
        lazy[4]
    assert (info.value.kind, info.value.found) == ("TYPE", 0xF5)


# -- streamed writes -------------------------------------------------------------------


@given(
    cols=st.integers(1, 5),
    cuts=st.lists(st.integers(0, 13), max_size=6),
    code=st.sampled_from([Code.I4, Code.U4, Code.E2M1]),
)
def test_chunks_split_anywhere_write_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, cols: int, cuts: list[int], code: Code
) -> None:
    arr = sample(DTYPES[code - 1], (13, cols), seed=cols)
    edges = [0, *sorted(cuts), 13]
    chunks = (arr[a:b] for a, b in itertools.pairwise(edges))
    path = tmp_path_factory.mktemp("stream") / "p.bin"
    info = save_payload(path, chunks, shape=(13, cols))
    assert path.read_bytes() == bytes(from_numpy(arr).data)
    assert (info, info.byte_length) == (PayloadInfo(code, (13, cols)), (13 * cols + 1) // 2)


def test_chunk_stream_infers_the_shape(tmp_path: Path) -> None:
    chunks = [np.ones((2, 3), "<f2"), np.zeros((0, 3), "<f2"), np.ones((1, 3), "<f2")]
    info = save_payload(tmp_path / "p.bin", chunks)
    assert (info, info.byte_length) == (PayloadInfo(Code.F16, (3, 3)), 18)


def test_lazy_payload_streams_into_save_payload(tmp_path: Path) -> None:
    arr = sample(DTYPES[Code.U4 - 1], (11, 3))
    src, dst = tmp_path / "a.bin", tmp_path / "b.bin"
    save_payload(src, arr)
    save_payload(dst, open_payload(src, Code.U4, (11, 3)), shape=(11, 3))
    assert dst.read_bytes() == src.read_bytes()


def test_big_array_is_written_in_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_saving, "CHUNK_BYTES", 16)
    seen: list[int] = []
    real = _saving._Stream.feed

    def feed(self: _saving._Stream, chunk: object) -> None:
        seen.append(np.asarray(chunk).nbytes)
        real(self, chunk)

    monkeypatch.setattr(_saving._Stream, "feed", feed)
    arr = sample(DTYPES[Code.E2M1 - 1], (10, 3))
    path = tmp_path / "p.bin"
    save_payload(path, arr)
    assert path.read_bytes() == bytes(from_numpy(arr).data)
    assert seen == [15, 15]


def _failing_stream() -> Iterator[np.ndarray]:
    yield u4([1, 2, 3])
    raise RuntimeError("source died")


@pytest.mark.parametrize(
    ("chunks", "shape", "kind", "match"),
    [
        ([u4([1, 2, 3])], (5,), "LENGTH", r"ended after 3 of 5 rows.*short by 1"),
        ([u4([1, 2]), u4([3, 4, 5, 6])], (5,), "LENGTH", "past the 5 rows"),
        ([u4([[1, 2]]), u4([[1, 2, 3]])], None, "SHAPE", r"every chunk must be \(rows, \*\(2,\)\)"),
        ([u4([1]), np.array([2], np.uint8)], None, "TYPE", "never casts"),
        ([np.array(1.0, "<f4")], None, "SHAPE", "0-d"),
        ([], None, "TYPE", "empty chunk stream"),
        ([u4([1]), u4([2, 31])], None, "TYPE", "found 0x1f at element 2 of the payload"),
        ([np.array([True]), np.array([1, 2], np.uint8).view(bool)], None, "TYPE", "element 2"),
        ([u4([1])], (), "SHAPE", "shape=\\(\\) is a scalar"),
        ([u4([[1, 2]])], (1, 3), "SHAPE", "every chunk must be"),
    ],
    ids=[
        "short",
        "long",
        "tail-shape",
        "dtype-change",
        "0-d",
        "empty",
        "nibble",
        "bool",
        "scalar-shape",
        "given-tail",
    ],
)
def test_bad_stream_leaves_no_file(
    tmp_path: Path,
    chunks: list[np.ndarray],
    shape: tuple[int, ...] | None,
    kind: str,
    match: str,
) -> None:
    path = tmp_path / "p.bin"
    with pytest.raises(KilnError, match=match) as info:
        save_payload(path, iter(chunks), shape=shape)
    assert info.value.kind == kind
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_failure_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="source died"):
        save_payload(path, _failing_stream(), shape=(6,))
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_bad_nibble_index_is_the_payloads(tmp_path: Path) -> None:
    with pytest.raises(KilnError) as info:
        save_payload(tmp_path / "p.bin", iter([u4([1, 2, 3]), u4([4, 16])]))
    assert (info.value.index, info.value.found, info.value.code) == (4, 16, Code.U4)


def test_empty_stream_with_code_and_shape(tmp_path: Path) -> None:
    info = save_payload(tmp_path / "p.bin", iter([]), code=Code.F32, shape=(0, 4))
    assert (info, info.byte_length) == (PayloadInfo(Code.F32, (0, 4)), 0)
    assert (tmp_path / "p.bin").read_bytes() == b""


def test_array_shape_must_match(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match=r"shape=\(4,\) was given") as info:
        save_payload(tmp_path / "p.bin", np.zeros((2, 2), "<f4"), shape=(4,))
    assert info.value.kind == "SHAPE"


@pytest.mark.parametrize("source", [3, "abc", b"\x00"], ids=repr)
def test_source_must_be_array_or_chunks(tmp_path: Path, source: object) -> None:
    with pytest.raises(KilnError, match="an array or an iterable of array chunks") as info:
        save_payload(tmp_path / "p.bin", source)
    assert info.value.kind == "TYPE"


def test_target_must_be_path_or_file() -> None:
    with pytest.raises(KilnError, match="a path or a seekable binary file") as info:
        save_payload(3, np.zeros(2, np.uint8))  # type: ignore[arg-type]
    assert info.value.kind == "TYPE"


def test_file_object_written_at_offset(tmp_path: Path) -> None:
    buf = io.BytesIO(b"0123456789")
    info = save_payload(buf, iter([u4([1, 2, 3]), u4([4])]), offset=3)
    assert (info, info.byte_length) == (PayloadInfo(Code.U4, (4,), offset=3), 2)
    assert buf.getvalue() == b"012\x21\x43" + b"56789"


class _Trickle(io.BytesIO):
    """A file whose writes take at most 3 bytes, as a raw file's may."""

    def write(self, data: Any) -> int:
        return super().write(bytes(memoryview(data).cast("B")[:3]))


def test_partial_writes_are_completed() -> None:
    buf = _Trickle()
    arr = np.arange(10, dtype="<u2")
    save_payload(buf, arr)
    assert buf.getvalue() == bytes(from_numpy(arr).data)


def test_path_offset_keeps_the_prefix(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"HEADER--and-an-old-payload")
    info = save_payload(path, np.arange(3, dtype="<u2"), offset=8)
    assert path.read_bytes() == b"HEADER--" + bytes.fromhex("00 00 01 00 02 00")
    assert open_mapped(path, info.code, info.shape, offset=info.offset).tolist() == [0, 1, 2]
    with pytest.raises(KilnError, match=r"it holds 14 \(short by 16\)") as err:
        save_payload(path, np.arange(3, dtype="<u2"), offset=30)
    assert (err.value.kind, err.value.expected, err.value.found) == ("LENGTH", 30, 14)
    assert leftovers(tmp_path) == []


def test_layout_needs_a_code(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match="needs an opaque code") as info:
        save_payload(tmp_path / "p.bin", np.zeros((1, 2), np.uint8), layout=Layout("x", 2))
    assert info.value.kind == "TYPE"


def test_shift_in_moves_every_nibble_up_one() -> None:
    for count in range(1, 9):
        values = np.arange(1, count + 1, dtype=np.uint8) % 16
        packed = kiln_np.pack_nibbles(values)
        shifted = _saving._shift_in(0xA, packed, count)
        assert bits(shifted) == bits(kiln_np.pack_nibbles(np.r_[np.uint8(0xA), values]))


# -- big files, measured in a clean subprocess ---------------------------------------

ROWS, COLS = 32770, 16383  # odd row length: every other row starts on an odd nibble
BIG_BYTES = (ROWS * COLS + 1) // 2  # 256 MiB packed

_MEASURE = """
import json, os, sys
import numpy as np, ml_dtypes, kiln_np

def hwm_mb():
    with open("/proc/self/status") as f:
        line = next(l for l in f if l.startswith("VmHWM"))
    return int(line.split()[1]) / 1024

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
"""

_READ_ROW = (
    _MEASURE
    + """
path, rows, cols, row = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
reset_peak(); base = rss_mb()
lazy = kiln_np.open_payload(path, kiln_np.Code.U4, (rows, cols))
after_open = hwm_mb() - base
got = np.asarray(lazy[row]).view(np.uint8).copy()
after_row = hwm_mb() - base
e0 = row * cols
raw = np.fromfile(path, np.uint8, count=(cols + 3) // 2, offset=e0 // 2)
want = kiln_np.unpack_nibbles(raw, 2 * raw.size)[e0 % 2 : e0 % 2 + cols]
reset_peak(); base = rss_mb()
mapped = kiln_np.open_payload(path, kiln_np.Code.U8, (lazy.payload_byte_length,))
span = np.array(mapped[e0 // 2 : e0 // 2 + raw.size])
after_map = hwm_mb() - base
print(json.dumps({"open": after_open, "row": after_row, "same": bool((got == want).all()),
                  "nonzero": int(np.count_nonzero(got)), "map": after_map,
                  "map_same": bool((span == raw).all())}))
"""
)

_STREAM = (
    _MEASURE
    + """
path, total, piece = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base_values = (np.arange(piece, dtype=np.uint64) % 16).astype(np.uint8).view(ml_dtypes.uint4)

def chunks():
    for start in range(0, total, piece):
        yield base_values[: min(piece, total - start)]

reset_peak(); base = rss_mb()
info = kiln_np.save_payload(path, chunks(), shape=(total,))
peak = hwm_mb() - base
lazy = kiln_np.open_payload(path, info.code, info.shape)
ok = True
for start in (0, piece - 3, 5 * piece + 7, total - 9):
    got = np.asarray(lazy[start : start + 9]).view(np.uint8)
    idx = np.arange(start, min(start + 9, total))
    ok = ok and bool((got == (idx % piece) % 16).all())
print(json.dumps({"peak": peak, "nbytes": info.byte_length, "same": ok}))
"""
)

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="peak RSS is read from /proc (Linux)"
)


def _run(script: str, *args: object) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


@linux_only
def test_reading_a_row_of_a_256_mib_packed_file_is_cheap(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    row = 20001  # starts on an odd nibble: 20001 * 16383 is odd
    rng = np.random.default_rng(7)
    with open(path, "wb") as f:
        f.truncate(BIG_BYTES)  # sparse: the test never holds the file in memory
        f.seek(row * COLS // 2)
        f.write(rng.integers(0, 256, COLS // 2 + 2, dtype=np.uint8).tobytes())
    try:
        out = _run(_READ_ROW, path, ROWS, COLS, row)
    finally:
        path.unlink()
    assert out["same"]
    assert out["nonzero"] > COLS // 2
    assert out["open"] < 8
    assert out["row"] < 50
    assert out["map_same"]
    assert out["map"] < 50


@linux_only
def test_streaming_256_mib_packed_from_chunks_stays_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    total = 2 * BIG_BYTES
    try:
        out = _run(_STREAM, path, total, (1 << 24) - 1)  # odd chunks carry a nibble
    finally:
        path.unlink(missing_ok=True)
    assert out["same"]
    assert out["nbytes"] == BIG_BYTES
    assert out["peak"] < 200


# -- replacing a file keeps what it is (issue 11, item 3) -----------------------------


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o751], ids=oct)
def test_replacing_keeps_the_permission_bits(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"old")
    path.chmod(mode)
    save_payload(path, u4([1, 2, 3]))
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert path.read_bytes() == bytes.fromhex("21 03")


def test_a_new_file_gets_the_mode_open_gives(tmp_path: Path) -> None:
    reference = tmp_path / "by-open.bin"
    with open(reference, "wb"):
        pass
    save_payload(tmp_path / "new.bin", u4([1]))
    assert (tmp_path / "new.bin").stat().st_mode == reference.stat().st_mode


def test_the_temporary_file_is_private_and_named_for_kiln_np(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"old")
    path.chmod(0o644)
    seen: list[tuple[str, int]] = []

    def chunks() -> Iterator[np.ndarray]:
        yield u4([1, 2])
        seen.extend(
            (p.name, stat.S_IMODE(p.stat().st_mode)) for p in tmp_path.iterdir() if p != path
        )
        yield u4([3])

    save_payload(path, chunks())
    [(name, mode)] = seen
    assert re.fullmatch(r"\.p\.bin\.kiln-np-[0-9a-f]{12}\.part", name)
    assert name.endswith(_io.TEMP_SUFFIX)
    assert mode == 0o600  # nobody else can open it while the data is written
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert leftovers(tmp_path) == []


# -- directories: building_directory ---------------------------------------------------


def _save_dir(path: Path, fmt: str, tensors: dict[str, Any], **kw: Any) -> None:
    if fmt == "safetensors":
        kw["max_shard_size"] = 16
    kiln_np.save_weights(path, tensors, format=fmt, **kw)


def _modes(directory: Path) -> dict[str, int]:
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}
    return {"": stat.S_IMODE(directory.stat().st_mode), **modes}


_TWO = {"a": np.ones(2), "b": np.zeros(2)}


def _recording_renames(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The targets of every os.rename from now on (each still done)."""
    targets: list[str] = []
    rename = os.rename

    def recording(a: str, b: str) -> None:
        targets.append(b)
        rename(a, b)

    monkeypatch.setattr(os, "rename", recording)
    return targets


@pytest.mark.parametrize("fmt", ["kiln", "safetensors"])
def test_replacing_a_directory_keeps_its_modes(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "dir"
    _save_dir(out, fmt, _TWO)
    out.chmod(0o700)
    for p in out.iterdir():
        p.chmod(0o600)
    _save_dir(out, fmt, _TWO)  # the same files
    assert set(_modes(out).values()) == {0o700, 0o600}
    _save_dir(out, fmt, {"a": np.ones(2), "b": np.zeros(2), "c": np.ones(1), "d": np.ones(1)})
    modes = _modes(out)
    assert modes.pop("") == 0o700
    assert set(modes.values()) == {0o600}  # new files too: nothing more open than it was
    for p in out.iterdir():  # mixed: a new name gets the bits every old file has
        p.chmod(0o640 if p.suffix == ".json" else 0o604)
    out.chmod(0o750)
    _save_dir(out, fmt, {"z": np.ones(1)})
    index = "manifest.json" if fmt == "kiln" else "model.safetensors.index.json"
    payload = "0000_z.kiln" if fmt == "kiln" else "model-00001-of-00001.safetensors"
    assert _modes(out) == {"": 0o750, index: 0o640, payload: 0o600}


def test_a_new_directory_gets_the_mode_mkdir_gives_and_is_private_while_written(
    tmp_path: Path,
) -> None:
    (tmp_path / "ref").mkdir()
    seen: list[int] = []

    def progress(n: int) -> None:
        [tmp] = [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
        seen.append(stat.S_IMODE(tmp.stat().st_mode))

    kiln_np.save_weights(tmp_path / "dir", _TWO, format="kiln", progress=progress)
    assert set(seen) == {0o700}
    assert _modes(tmp_path / "dir")[""] == _modes(tmp_path / "ref")[""]
    (tmp_path / "dir").chmod(0o755)
    seen.clear()
    kiln_np.save_weights(tmp_path / "dir", _TWO, format="kiln", progress=progress)
    assert set(seen) == {0o700}  # replacing a readable one: private until swapped in


def test_a_directory_is_swapped_in_one_step_on_linux(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, _TWO, format="kiln")
    renames = _recording_renames(monkeypatch)
    kiln_np.save_weights(out, {"c": np.ones(3)}, format="kiln")
    assert list(kiln_np.open_weights(out)) == ["c"]
    assert leftovers(tmp_path) == []
    assert os.listdir(tmp_path) == ["dir"]
    # Linux exchanges the two in one renameat2: no moment without the directory
    exchange = _io._renameat2()
    assert (exchange is not None) == sys.platform.startswith("linux")
    assert len(renames) == (0 if exchange is not None else 2)


@pytest.mark.parametrize("answer", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, None])
def test_without_an_exchange_the_old_directory_is_renamed_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: int | None
) -> None:
    # a file system that refuses RENAME_EXCHANGE, a kernel without it, another OS
    monkeypatch.setattr(
        _io, "_renameat2", lambda: None if answer is None else (lambda a, b: answer)
    )
    out = tmp_path / "dir"
    kiln_np.save_weights(out, _TWO, format="kiln")
    renames = _recording_renames(monkeypatch)
    kiln_np.save_weights(out, {"c": np.ones(3)}, format="kiln")
    assert list(kiln_np.open_weights(out)) == ["c"]
    assert re.fullmatch(r"\.dir\.kiln-np-[0-9a-f]{12}\.old", os.path.basename(renames[0]))
    assert [os.path.basename(b) for b in renames[1:]] == ["dir"]
    assert os.listdir(tmp_path) == ["dir"]


def test_an_exchange_that_fails_otherwise_leaves_the_old_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "dir"
    kiln_np.save_weights(out, _TWO, format="kiln")
    monkeypatch.setattr(_io, "_renameat2", lambda: lambda a, b: errno.EACCES)
    with pytest.raises(PermissionError):
        kiln_np.save_weights(out, {"c": np.ones(3)}, format="kiln")
    assert list(kiln_np.open_weights(out)) == ["a", "b"]
    assert os.listdir(tmp_path) == ["dir"]


def test_a_writer_killed_while_deleting_the_old_directory(tmp_path: Path) -> None:
    """What is left is the new directory in place and the old one under the
    temporary name (docs/safety.md), never a missing directory."""
    out = tmp_path / "dir"
    kiln_np.save_weights(out, _TWO, format="kiln")
    script = (
        "import os, signal, sys, numpy as np, kiln_np\n"
        "os.unlink = lambda p: os.kill(os.getpid(), signal.SIGKILL)\n"
        "kiln_np.save_weights(sys.argv[1], {'c': np.ones(3)}, format='kiln')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(out)], check=False)
    assert done.returncode == -9
    assert list(kiln_np.open_weights(out)) == ["c"]
    [left] = leftovers(tmp_path)
    assert re.fullmatch(r"\.dir\.kiln-np-[0-9a-f]{12}\.part", left)
    assert list(kiln_np.open_weights(tmp_path / left)) == ["a", "b"]  # the old one, whole


def test_a_very_long_name_gets_a_temporary_name_the_os_accepts(tmp_path: Path) -> None:
    path = tmp_path / ("w" * 250)
    save_payload(path, u4([1, 2, 3]))
    assert path.read_bytes() == bytes.fromhex("21 03")


@pytest.mark.parametrize("relative", [False, True], ids=["absolute-link", "relative-link"])
def test_a_symlink_is_written_through(tmp_path: Path, relative: bool) -> None:
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "t.bin"
    target.write_bytes(b"old")
    target.chmod(0o600)
    link = tmp_path / "link.bin"
    link.symlink_to(Path("data") / "t.bin" if relative else target)
    save_payload(link, u4([4, 5]))
    assert link.is_symlink()
    assert target.read_bytes() == bytes([0x54])
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "link.bin"]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["t.bin"]


def test_a_dangling_symlink_gets_its_target_created(tmp_path: Path) -> None:
    link = tmp_path / "link.bin"
    link.symlink_to(tmp_path / "made.bin")
    save_payload(link, u4([6]))
    assert link.is_symlink()
    assert (tmp_path / "made.bin").read_bytes() == b"\x06"


def test_other_hard_links_keep_the_old_bytes(tmp_path: Path) -> None:
    """Documented: the rename gives the path a new file (open(path, "wb") would not)."""
    path, other = tmp_path / "p.bin", tmp_path / "other.bin"
    path.write_bytes(b"old")
    os.link(path, other)
    save_payload(path, u4([7]))
    assert (path.read_bytes(), other.read_bytes()) == (b"\x07", b"old")


@pytest.mark.parametrize(
    "where",
    ["missing-dir/p.bin", "a-file/p.bin"],
    ids=["missing-directory", "parent-is-a-file"],
)
def test_errors_name_the_users_path_not_the_temporary(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    path = str(tmp_path / where)
    with pytest.raises(OSError, match=re.escape(path)) as info:
        save_payload(path, u4([1]))
    assert info.value.filename == path
    assert ".part" not in str(info.value)
    assert isinstance(info.value, (FileNotFoundError, NotADirectoryError))


def test_a_symlink_loop_is_the_os_error_open_gives(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OSError, match="symbolic links") as info:
        save_payload(a, u4([1]))
    assert (info.value.errno, info.value.filename) == (errno.ELOOP, str(a))
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "where",
    ["missing/../p.bin", "dangling.bin", "p.bin/"],
    ids=["dotdot-past-a-missing-directory", "dangling-link-through-missing", "trailing-slash"],
)
def test_a_path_open_refuses_is_refused_not_normalised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A lexical '..' is not the kernel's: 'missing/../p.bin' is ENOENT for
    # open(), and was p.bin for save_payload (kiln-np decode X ... missing/../X
    # replaced its own input X).
    monkeypatch.chdir(tmp_path)
    Path("p.bin").write_bytes(b"input")
    Path("dangling.bin").symlink_to("missing/../p.bin")
    with pytest.raises(OSError, match=re.escape(repr(where))) as info:
        save_payload(where, u4([1]))
    assert isinstance(info.value, (FileNotFoundError, NotADirectoryError))
    assert Path("p.bin").read_bytes() == b"input"
    assert sorted(os.listdir()) == ["dangling.bin", "p.bin"]


def test_dotdot_after_a_symlinked_directory_goes_where_the_kernel_goes(tmp_path: Path) -> None:
    (tmp_path / "deep" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "deep" / "sub")
    save_payload(str(tmp_path / "link" / ".." / "p.bin"), u4([1, 2]))
    with open(tmp_path / "link" / ".." / "p.bin", "rb") as f:  # deep/p.bin, as open() resolves it
        assert f.read() == b"\x21"
    assert not (tmp_path / "p.bin").exists()
    assert leftovers(tmp_path / "deep") == []


def test_a_path_that_is_not_a_regular_file_is_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):
        with pytest.raises(KilnError, match="expected a regular file, found a") as info:
            save_payload(target, u4([1]))
        assert info.value.kind == "TYPE"
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert leftovers(tmp_path) == []


# -- one description, checked once (issue 10) ----------------------------------------


def test_shape_is_checked_before_length_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(bytes(7))
    for call in (
        lambda: to_numpy(Code.F64, bytes(7), (2**62, 4)),
        lambda: open_payload(path, Code.F64, (2**62, 4)),
        lambda: LazyPayload(path, Code.F64, (2**62, 4)),
        lambda: save_payload(io.BytesIO(), [], code=Code.F64, shape=(2**62, 4)),
    ):
        with pytest.raises(KilnError) as info:
            call()
        assert info.value.kind == "SHAPE"


@pytest.mark.parametrize("offset", [0, 3], ids=["at-0", "at-3"])
def test_exact_refuses_bytes_after_the_payload(tmp_path: Path, offset: int) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(bytes(offset) + bytes.fromhex("21 43 05") + b"\x00")
    assert open_lazy(path, Code.U4, (5,), offset=offset).shape == (5,)  # default: allowed
    for exact_call in (open_payload, LazyPayload):
        with pytest.raises(KilnError) as info:
            exact_call(path, Code.U4, (5,), offset=offset, exact=True)
        assert (info.value.kind, info.value.expected, info.value.found) == ("LENGTH", 3, 4)
        assert info.value.message == (
            f"{str(path)!r} at offset {offset}: code 17 (u4) shape (5,): "
            "expected ceil(5 / 2) = 3 bytes, found 4 (long by 1)"
        )
    path.write_bytes(bytes(offset) + bytes.fromhex("21 43 05"))
    assert open_lazy(path, Code.U4, (5,), offset=offset, exact=True).shape == (5,)
    assert open_mapped(path, Code.U8, (3,), offset=offset, exact=True).tolist() == [33, 67, 5]


def test_lazy_payload_exposes_its_description(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"xx" + bytes.fromhex("21 43 05"))
    lazy = LazyPayload(path, "u4", (5,), offset=2)
    assert lazy.info == PayloadInfo(Code.U4, (5,), offset=2)
    assert (lazy.payload_byte_length, lazy.nbytes) == (3, 5)
    assert not hasattr(lazy, "byte_length")


def test_content_errors_of_a_lazy_read_name_the_payload_index(tmp_path: Path) -> None:
    raw = np.zeros(12, np.uint8)
    raw[7] = 9
    path = tmp_path / "p.bin"
    raw.tofile(path)
    lazy = open_lazy(path, Code.BOOL, (6, 2))
    assert not lazy[::2].any()  # rows 0, 2, 4: the bad byte is in row 3
    for key in (slice(3, 5), slice(1, None, 2), slice(None, None, -1)):
        with pytest.raises(KilnError, match="found 0x09 at element 7 of the payload") as info:
            lazy[key]
        assert (info.value.kind, info.value.index, info.value.found) == ("TYPE", 7, 9)


# -- non-regular files, huge integers, bad paths (issue 11, items 7, 11, 14) ---------


@pytest.mark.parametrize("special", ["fifo", "directory", "/dev/null"])
def test_only_regular_files_are_opened(tmp_path: Path, special: str) -> None:
    path = {"fifo": tmp_path / "pipe", "directory": tmp_path}.get(special, Path(special))
    if special == "fifo":
        os.mkfifo(path)
    for call in (
        lambda: open_payload(path, Code.U8, (0,)),
        lambda: LazyPayload(path, Code.U4, (0,)),
        lambda: save_payload(path, u4([1]), offset=1),
    ):
        with pytest.raises(KilnError, match="expected a regular file") as info:
            call()
        assert info.value.kind == "TYPE"


def test_open_regular_refuses_a_file_swapped_after_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The type is checked again on the opened file, which was opened without blocking."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    real = _checks.check_regular_file
    calls: list[int | None] = []

    def first_look_passes(path: str, fd: int | None = None) -> os.stat_result:
        calls.append(fd)
        return os.stat(tmp_path / "p.bin") if fd is None else real(path, fd)

    (tmp_path / "p.bin").write_bytes(b"")
    monkeypatch.setattr(_io, "check_regular_file", first_look_passes)
    with pytest.raises(KilnError, match="found a FIFO"):
        _io.open_regular(str(fifo))
    assert calls[0] is None  # the path, then the opened file
    assert calls[1] is not None


def test_huge_integers_give_bounded_messages(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(bytes(range(10)))
    lazy = LazyPayload(path, Code.U8, (10,))
    huge = 10**5000
    assert [c.tolist() for c in lazy.iter_chunks(huge)] == [list(range(10))]
    assert lazy[::huge].tolist() == [0]
    assert lazy[::-huge].tolist() == [9]
    assert lazy[huge:].tolist() == []
    with pytest.raises(IndexError, match="integer of 16610 bits"):
        lazy[huge]
    for call, kind in (
        (lambda: next(lazy.iter_chunks(-huge)), "SHAPE"),
        (lambda: LazyPayload(path, Code.U8, (10,), offset=huge), "TYPE"),
        (lambda: open_payload(path, Code.U8, (huge,)), "SHAPE"),
        (lambda: open_payload(path, huge, (1,)), "TYPE"),
        (lambda: save_payload(path, u4([1]), offset=-huge), "TYPE"),
    ):
        with pytest.raises(KilnError) as info:
            call()
        assert info.value.kind == kind
        assert "bits" in str(info.value)
        assert len(str(info.value)) < 300


class _FsPath:
    def __init__(self, result: object) -> None:
        self.result = result

    def __fspath__(self) -> Any:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.mark.parametrize(
    "result", [RuntimeError("no path"), b"p.bin", 5, None], ids=["raises", "bytes", "int", "none"]
)
def test_fspath_that_raises_or_returns_a_non_path_is_type(result: object) -> None:
    path: Any = _FsPath(result)
    for call in (
        lambda: open_payload(path, Code.U8, (1,)),
        lambda: LazyPayload(path, Code.U8, (1,)),
        lambda: save_payload(path, u4([1])),
    ):
        with pytest.raises(KilnError, match="path") as info:
            call()
        assert info.value.kind == "TYPE"


# -- opaque rank (issue 11, item 10) -------------------------------------------------


def test_opaque_rank_64_is_shape_and_lower_ranks_decode(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"\x07")
    layout = Layout("q", 1)
    calls: list[Callable[[], object]] = [
        lambda: open_payload(path, 4100, (1,) * 64, layout=layout),
        lambda: np.asarray(LazyPayload(path, 4100, (1,) * 64, layout=layout)),
    ]
    for call in calls:
        with pytest.raises(KilnError, match="at most 63 dimensions") as info:
            call()
        assert info.value.kind == "SHAPE"
    # Rank 31 decodes to 32 dimensions, which every supported numpy makes (numpy 1.x
    # stops at 32 dimensions, numpy 2 at 64).
    lazy = LazyPayload(path, 4100, (1,) * 31, layout=layout)
    assert np.asarray(lazy).shape == (1,) * 32
    assert open_mapped(path, 4100, (1,) * 31, layout=layout).reshape(-1).tolist() == [7]


# -- stepped slices read only the rows they select (issue 11, item 16) ---------------


@pytest.mark.parametrize(
    ("code", "shape"),
    [(Code.U4, (11, 3)), (Code.I4, (10, 4)), (Code.E2M1, (13,)), (Code.BOOL, (9, 2)),
     (Code.BF16, (7, 3)), (Code.F64, (6,)), (4100, (8, 2))],
    ids=["u4-odd-rows", "i4-even-rows", "e2m1-1d", "bool", "bf16", "f64", "opaque"],
)  # fmt: skip
def test_stepped_slices_match_numpy_for_every_step(
    tmp_path: Path, code: int, shape: tuple[int, ...]
) -> None:
    layout = Layout("q", 3) if code == 4100 else None
    if layout is None:
        arr = sample(DTYPES[code - 1], shape, seed=code)
        data = bytes(from_numpy(arr).data)
    else:
        arr = np.arange(np.prod(shape) * 3, dtype=np.uint8).reshape(*shape, 3)
        data = arr.tobytes()
    path = tmp_path / "p.bin"
    path.write_bytes(data)
    lazy = LazyPayload(path, code, shape, layout=layout)
    n = shape[0]
    for step in (2, 3, 4, 5, n - 1, n, -1, -2, -3, -(n - 1)):
        for start in (None, 1, -2):
            key = slice(start, None, step)
            assert bits(lazy[key]) == bits(arr[key]), key


def test_stepped_slices_gather_in_bounded_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_files, "_GATHER_BYTES", 7)  # two 3-element u4 rows a batch
    arr = sample(DTYPES[Code.U4 - 1], (40, 3), seed=3)
    path = tmp_path / "p.bin"
    save_payload(path, arr)
    lazy = open_lazy(path, Code.U4, (40, 3))
    batches: list[int] = []
    gather, rows = LazyPayload._gather, LazyPayload._rows

    def spy_gather(self: LazyPayload, selected: range) -> np.ndarray:
        batches.append(len(selected))
        return gather(self, selected)

    def spy_rows(self: LazyPayload, r0: int, r1: int) -> np.ndarray:
        batches.append(r1 - r0)
        return rows(self, r0, r1)

    monkeypatch.setattr(LazyPayload, "_gather", spy_gather)
    monkeypatch.setattr(LazyPayload, "_rows", spy_rows)
    assert bits(lazy[1::3]) == bits(arr[1::3])
    assert bits(lazy[::-5]) == bits(arr[::-5])
    assert batches == [2] * 6 + [1] + [2] * 4  # 13 rows, then 8: never the span between


# -- pickling (issue 11, item 17) ----------------------------------------------------


def test_pickle_keeps_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "p.bin").write_bytes(bytes.fromhex("21 43 05"))
    (tmp_path / "b" / "p.bin").write_bytes(bytes.fromhex("ff ff 0f"))  # same name, elsewhere
    monkeypatch.chdir(tmp_path / "a")
    lazy = LazyPayload("p.bin", Code.U4, (5,), exact=True)
    assert lazy.path == str(tmp_path / "a" / "p.bin")
    blob = pickle.dumps(lazy)
    monkeypatch.chdir(tmp_path / "b")
    again = pickle.loads(blob)
    assert (again.path, again.exact) == (lazy.path, True)
    assert np.asarray(again).view(np.uint8).tolist() == [1, 2, 3, 4, 5]


def test_pickle_keeps_the_file_a_dotdot_after_a_symlink_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 'link/../p.bin' is deep/p.bin for the kernel; abspath made it ./p.bin,
    # another file, which the unpickled copy (a dask worker) then read.
    (tmp_path / "deep" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "deep" / "sub")
    (tmp_path / "deep" / "p.bin").write_bytes(bytes.fromhex("21 43"))
    (tmp_path / "p.bin").write_bytes(bytes.fromhex("ff ff"))
    monkeypatch.chdir(tmp_path)
    lazy = LazyPayload(os.path.join("link", "..", "p.bin"), Code.U4, (4,))
    assert lazy.path == str(tmp_path / "deep" / "p.bin")
    again = pickle.loads(pickle.dumps(lazy))
    assert np.asarray(again).view(np.uint8).tolist() == [1, 2, 3, 4]


def test_unpickling_checks_the_file_again(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(bytes.fromhex("21 43 05"))
    blob = pickle.dumps(LazyPayload(path, Code.U4, (5,), exact=True))
    path.write_bytes(bytes.fromhex("21 43 05 00"))  # grew: exact refuses it now
    with pytest.raises(KilnError, match="long by 1"):
        pickle.loads(blob)


# -- the documentation's examples clean up after themselves --------------------------


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("docs/big-files.md", marks=needs("dask")),
        "kiln_np._files.io",
        pytest.param("kiln_np.dask", marks=needs("dask")),
    ],
)
def test_doctests_leave_no_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    if source.endswith(".md"):
        root = Path(__file__).resolve().parents[2]
        result = doctest.testfile(str(root / source), module_relative=False, optionflags=flags)
    else:
        result = doctest.testmod(importlib.import_module(source), optionflags=flags)
    assert (result.failed, result.attempted > 0) == (0, True)
    assert list(tmp_path.iterdir()) == []
