"""open_payload / write_payload / LazyPayload: lazy reads, streamed writes, big files."""

from __future__ import annotations

import io
import itertools
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
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
    _files,
    from_numpy,
    open_payload,
    to_numpy,
    write_payload,
)

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
    info = write_payload(path, arr)
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
    write_payload(path, arr)
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
    info = write_payload(path, blocks, code=4100, layout=layout)
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
    write_payload(path, arr)
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
    write_payload(path, arr)
    lazy = open_lazy(path, code, shape)
    got, want = lazy[key], arr[key]
    assert np.shape(got) == np.shape(want)
    assert bits(np.asarray(got)) == bits(np.asarray(want))


def test_rows_that_start_on_an_odd_nibble(tmp_path: Path) -> None:
    values = np.arange(15, dtype=np.uint8).reshape(5, 3)  # 3 nibbles a row
    path = tmp_path / "p.bin"
    write_payload(path, u4(values))
    lazy = open_lazy(path, Code.U4, (5, 3))
    assert np.asarray(lazy[1]).view(np.uint8).tolist() == [3, 4, 5]
    assert np.asarray(lazy[3:]).view(np.uint8).tolist() == [[9, 10, 11], [12, 13, 14]]
    assert np.asarray(lazy[-1, 1]).view(np.uint8) == 13


def test_unsupported_keys_raise_like_numpy(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    write_payload(path, u4([[1, 2], [3, 4]]))
    lazy = open_lazy(path, Code.U4, (2, 2))
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        lazy[2]
    for key in ([0, 1], True, None, 1.0):
        with pytest.raises(TypeError, match="int or a slice"):
            lazy[key]
    assert bits(lazy[...]) == bits(lazy[()]) == bits(u4([[1, 2], [3, 4]]))


def test_scalar_payload(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    write_payload(path, np.array(9, np.uint8).view(ml_dtypes.uint4))
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
    write_payload(path, arr)
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
    info = write_payload(path, chunks, shape=(13, cols))
    assert path.read_bytes() == bytes(from_numpy(arr).data)
    assert (info, info.byte_length) == (PayloadInfo(code, (13, cols)), (13 * cols + 1) // 2)


def test_chunk_stream_infers_the_shape(tmp_path: Path) -> None:
    chunks = [np.ones((2, 3), "<f2"), np.zeros((0, 3), "<f2"), np.ones((1, 3), "<f2")]
    info = write_payload(tmp_path / "p.bin", chunks)
    assert (info, info.byte_length) == (PayloadInfo(Code.F16, (3, 3)), 18)


def test_lazy_payload_streams_into_write_payload(tmp_path: Path) -> None:
    arr = sample(DTYPES[Code.U4 - 1], (11, 3))
    src, dst = tmp_path / "a.bin", tmp_path / "b.bin"
    write_payload(src, arr)
    write_payload(dst, open_payload(src, Code.U4, (11, 3)), shape=(11, 3))
    assert dst.read_bytes() == src.read_bytes()


def test_big_array_is_written_in_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_files, "CHUNK_BYTES", 16)
    seen: list[int] = []
    real = _files._Stream.feed

    def feed(self: _files._Stream, chunk: object) -> None:
        seen.append(np.asarray(chunk).nbytes)
        real(self, chunk)

    monkeypatch.setattr(_files._Stream, "feed", feed)
    arr = sample(DTYPES[Code.E2M1 - 1], (10, 3))
    path = tmp_path / "p.bin"
    write_payload(path, arr)
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
        write_payload(path, iter(chunks), shape=shape)
    assert info.value.kind == kind
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_failure_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="source died"):
        write_payload(path, _failing_stream(), shape=(6,))
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_bad_nibble_index_is_the_payloads(tmp_path: Path) -> None:
    with pytest.raises(KilnError) as info:
        write_payload(tmp_path / "p.bin", iter([u4([1, 2, 3]), u4([4, 16])]))
    assert (info.value.index, info.value.found, info.value.code) == (4, 16, Code.U4)


def test_empty_stream_with_code_and_shape(tmp_path: Path) -> None:
    info = write_payload(tmp_path / "p.bin", iter([]), code=Code.F32, shape=(0, 4))
    assert (info, info.byte_length) == (PayloadInfo(Code.F32, (0, 4)), 0)
    assert (tmp_path / "p.bin").read_bytes() == b""


def test_array_shape_must_match(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match=r"shape=\(4,\) was given") as info:
        write_payload(tmp_path / "p.bin", np.zeros((2, 2), "<f4"), shape=(4,))
    assert info.value.kind == "SHAPE"


@pytest.mark.parametrize("source", [3, "abc", b"\x00"], ids=repr)
def test_source_must_be_array_or_chunks(tmp_path: Path, source: object) -> None:
    with pytest.raises(KilnError, match="an array or an iterable of array chunks") as info:
        write_payload(tmp_path / "p.bin", source)
    assert info.value.kind == "TYPE"


def test_target_must_be_path_or_file() -> None:
    with pytest.raises(KilnError, match="a path or a seekable binary file") as info:
        write_payload(3, np.zeros(2, np.uint8))  # type: ignore[arg-type]
    assert info.value.kind == "TYPE"


def test_file_object_written_at_offset(tmp_path: Path) -> None:
    buf = io.BytesIO(b"0123456789")
    info = write_payload(buf, iter([u4([1, 2, 3]), u4([4])]), offset=3)
    assert (info, info.byte_length) == (PayloadInfo(Code.U4, (4,), offset=3), 2)
    assert buf.getvalue() == b"012\x21\x43" + b"56789"


class _Trickle(io.BytesIO):
    """A file whose writes take at most 3 bytes, as a raw file's may."""

    def write(self, data: Any) -> int:
        return super().write(bytes(memoryview(data).cast("B")[:3]))


def test_partial_writes_are_completed() -> None:
    buf = _Trickle()
    arr = np.arange(10, dtype="<u2")
    write_payload(buf, arr)
    assert buf.getvalue() == bytes(from_numpy(arr).data)


def test_path_offset_keeps_the_prefix(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    path.write_bytes(b"HEADER--and-an-old-payload")
    info = write_payload(path, np.arange(3, dtype="<u2"), offset=8)
    assert path.read_bytes() == b"HEADER--" + bytes.fromhex("00 00 01 00 02 00")
    assert open_mapped(path, info.code, info.shape, offset=info.offset).tolist() == [0, 1, 2]
    with pytest.raises(KilnError, match=r"it holds 14 \(short by 16\)") as err:
        write_payload(path, np.arange(3, dtype="<u2"), offset=30)
    assert (err.value.kind, err.value.expected, err.value.found) == ("LENGTH", 30, 14)
    assert leftovers(tmp_path) == []


def test_layout_needs_a_code(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match="needs an opaque code") as info:
        write_payload(tmp_path / "p.bin", np.zeros((1, 2), np.uint8), layout=Layout("x", 2))
    assert info.value.kind == "TYPE"


def test_shift_in_moves_every_nibble_up_one() -> None:
    for count in range(1, 9):
        values = np.arange(1, count + 1, dtype=np.uint8) % 16
        packed = kiln_np.pack_nibbles(values)
        shifted = _files._shift_in(0xA, packed, count)
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
info = kiln_np.write_payload(path, chunks(), shape=(total,))
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
