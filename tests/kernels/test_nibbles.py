"""The 4-bit kernels: bit-exact at every chunk and thread boundary, out= semantics.

The kernels are checked against a strided numpy reference.  Boundaries are hit
two ways: with the module's real constants at the lengths where its paths
change, and with tiny constants (monkeypatched) so that every offset around a
chunk, a thread range and the small-input gather is reached with small arrays.
"""

from __future__ import annotations

import itertools
import mmap
import multiprocessing
import subprocess
import sys
import threading
import tracemalloc
import weakref
from collections.abc import Callable, Iterator

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_np
from kiln_np import KilnError
from kiln_np._kernels import backend as _backend
from kiln_np._kernels import nibbles as _nibbles
from kiln_np._kernels import pool as _pool


def ref_unpack(packed: np.ndarray, count: int) -> np.ndarray:
    pairs = np.empty((packed.size, 2), np.uint8)
    pairs[:, 0] = packed & 15
    pairs[:, 1] = packed >> 4
    return pairs.reshape(-1)[:count]


def ref_pack(values: np.ndarray) -> np.ndarray:
    padded = np.zeros(values.size + values.size % 2, np.uint8)
    padded[: values.size] = values
    return padded[0::2] | (padded[1::2] << 4)


def nibbles(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 16, count, dtype=np.uint8)


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


# -- every byte value -------------------------------------------------------------------


def test_unpack_every_byte_value() -> None:
    packed = np.arange(256, dtype=np.uint8)
    got = kiln_np.unpack_nibbles(packed, 512)
    assert same_bytes(got, ref_unpack(packed, 512))
    assert got[:6].tolist() == [0, 0, 1, 0, 2, 0]
    assert got[-2:].tolist() == [15, 15]


def test_pack_every_pair_of_nibbles() -> None:
    pairs = ref_unpack(np.arange(256, dtype=np.uint8), 512)
    assert kiln_np.pack_nibbles(pairs).tobytes() == bytes(range(256))


@pytest.mark.usefixtures("tiny")
def test_every_byte_value_through_the_threaded_chunked_path(threads: int) -> None:
    packed = np.arange(256, dtype=np.uint8)
    unpacked = kiln_np.unpack_nibbles(packed, 512)
    assert same_bytes(unpacked, ref_unpack(packed, 512))
    assert kiln_np.pack_nibbles(unpacked).tobytes() == bytes(range(256))


# -- chunk, thread and small-path boundaries ----------------------------------------------


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("count", range(80))
def test_tiny_constants_every_length(count: int, threads: int) -> None:
    values = nibbles(count, seed=count)
    packed = kiln_np.pack_nibbles(values)
    assert same_bytes(packed, ref_pack(values))
    assert same_bytes(kiln_np.unpack_nibbles(packed, count), values)


def _boundary_counts() -> list[int]:
    lanes = {_nibbles.SMALL_LANES, _pool.CHUNK_LANES, _pool.THREAD_MIN_LANES}
    lanes |= {2 * _pool.CHUNK_LANES, _pool.THREAD_MIN_LANES + _pool.CHUNK_LANES}
    lanes |= {_pool.COMPILED_THREAD_MIN_LANES + _pool.COMPILED_GRANULE}
    return sorted({2 * n + d for n in lanes for d in (-3, -2, -1, 0, 1, 2, 3)})


@pytest.mark.parametrize("count", _boundary_counts())
def test_real_constants_at_each_boundary(count: int) -> None:
    values = nibbles(count, seed=count)
    packed = kiln_np.pack_nibbles(values)
    assert same_bytes(packed, ref_pack(values))
    assert same_bytes(kiln_np.unpack_nibbles(packed, count), values)


def test_nested_ranges_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_ranges from inside a pool task (the statistics of a quantized tensor
    split over threads, each dequantizing a run): a range cancelled because the
    pool is busy is run by the caller, and nobody waits for a worker to dequeue
    it (with one worker busy in its own nested call, that never comes)."""
    monkeypatch.setattr(_pool, "_threads", lambda: 2)
    lanes = 2 * _pool.THREAD_MIN_LANES

    def inner(lo: int, hi: int) -> int:
        return sum(_pool.run_ranges(lambda a, b: b - a, lanes))

    results: list[list[int]] = []
    worker = threading.Thread(target=lambda: results.append(_pool.run_ranges(inner, lanes)))
    worker.daemon = True
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "nested run_ranges deadlocked"
    assert results == [[lanes, lanes]]


def test_a_range_taken_back_does_not_keep_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pool worker busy: the caller takes its range back and runs it, and once
    run_ranges returns nothing in the pool's queue holds the task (a writer's
    buffers, which the task holds, go with the tensor, not when a worker wakes)."""
    monkeypatch.setattr(_pool, "_threads", lambda: 2)
    lanes = 2 * _pool.THREAD_MIN_LANES
    pool = _pool._pool()
    release = threading.Event()
    busy = [pool.submit(release.wait, 60) for _ in range(pool._max_workers)]

    class Task:
        def __call__(self, lo: int, hi: int) -> int:
            return hi - lo

    task = Task()
    gone = weakref.ref(task)
    try:
        assert sum(_pool.run_ranges(task, lanes)) == lanes
        del task
        assert gone() is None
    finally:
        release.set()
        for future in busy:
            future.result()


def test_results_do_not_depend_on_the_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    least = max(_pool.THREAD_MIN_LANES, _pool.COMPILED_THREAD_MIN_LANES)
    count = 2 * least + 2 * _pool.CHUNK_LANES + 1
    values = nibbles(count)
    packed = ref_pack(values)
    seen = set()
    for k in (1, 2, 3):
        monkeypatch.setattr(_pool, "_threads", lambda k=k: k)
        assert len(_pool._split(count // 2, _backend.COMPILED)) == k
        seen.add(kiln_np.unpack_nibbles(packed, count).tobytes())
        seen.add(kiln_np.pack_nibbles(values).tobytes() + b"|packed")
    assert seen == {values.tobytes(), packed.tobytes() + b"|packed"}


@given(st.lists(st.integers(0, 15), max_size=2 * 4100))
def test_small_path_round_trip(values: list[int]) -> None:
    arr = np.array(values, np.uint8)
    packed = kiln_np.pack_nibbles(arr)
    assert same_bytes(packed, ref_pack(arr))
    assert same_bytes(kiln_np.unpack_nibbles(packed.tobytes(), arr.size), arr)


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_split_ranges_are_disjoint_aligned_and_cover(
    monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    monkeypatch.setattr(_pool, "_threads", lambda: 3)
    step = _pool.COMPILED_GRANULE if compiled else _pool.CHUNK_LANES
    least = _pool.COMPILED_THREAD_MIN_LANES if compiled else _pool.THREAD_MIN_LANES
    for lanes in (least, least + 5 * step + 7, 3 * least + 1):
        ranges = _pool._split(lanes, compiled)
        assert 1 < len(ranges) <= 3
        assert ranges[0][0] == 0
        assert ranges[-1][1] == lanes
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert all(lo % step == 0 for lo, _ in ranges)
    assert _pool._split(least - 1, compiled) == [(0, least - 1)]


# -- the first bad value, wherever the threads find it ---------------------------------------


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("bad_at", [0, 7, 8, 9, 31, 32, 63, 64, 98])
def test_first_bad_value_wins_across_ranges(bad_at: int, threads: int) -> None:
    values = nibbles(99)
    values[bad_at] = 0x10 + bad_at % 0xF0
    values[-1] = 0xFF  # a later bad value must not win
    if bad_at == 98:
        values[-1] = 0x10 + bad_at % 0xF0
    assert _nibbles.first_above(values, 15) == bad_at
    with pytest.raises(KilnError) as info:
        kiln_np.pack_nibbles(values)
    assert (info.value.kind, info.value.index, info.value.found) == ("TYPE", bad_at, values[bad_at])


@pytest.mark.parametrize("bad_at", [0, 1, 19, 20])
def test_first_bad_value_on_the_small_path(bad_at: int) -> None:
    values = nibbles(21)
    values[bad_at] = 0xF1
    values[-1] = 0x10 if bad_at < 20 else 0xF1
    with pytest.raises(KilnError) as info:
        kiln_np.pack_nibbles(values)
    assert (info.value.index, info.value.found) == (bad_at, 0xF1)


def test_clean_input_has_no_bad_value() -> None:
    for count in (0, 1, 7, 8, 9, 2 * _pool.THREAD_MIN_LANES + 1):
        assert _nibbles.first_above(nibbles(count), 15) == -1


# -- out= -----------------------------------------------------------------------------------


def _destinations(size: int) -> Iterator[np.ndarray | bytearray | memoryview]:
    yield np.empty(size, np.uint8)
    yield bytearray(size)
    yield np.empty(size + 1, np.uint8)[1:]  # odd address: unaligned '<u2' lanes
    yield memoryview(bytearray(size))


@pytest.mark.parametrize("count", [0, 1, 6, 4097, 2 * _pool.THREAD_MIN_LANES + 3])
def test_unpack_out_is_written_and_returned(count: int) -> None:
    values = nibbles(count)
    packed = ref_pack(values)
    for out in _destinations(count):
        got = kiln_np.unpack_nibbles(packed, count, out=out)
        assert np.shares_memory(got, np.frombuffer(out, np.uint8)) or count == 0
        assert same_bytes(np.frombuffer(out, np.uint8), values)


@pytest.mark.parametrize("count", [0, 1, 6, 4097, 2 * _pool.THREAD_MIN_LANES + 3])
def test_pack_out_is_written_and_returned(count: int) -> None:
    values = nibbles(count)
    for out in _destinations((count + 1) // 2):
        got = kiln_np.pack_nibbles(values, out=out)
        assert np.shares_memory(got, np.frombuffer(out, np.uint8)) or count < 2
        assert same_bytes(np.frombuffer(out, np.uint8), ref_pack(values))


def test_out_into_a_writable_mmap_slice() -> None:
    values = nibbles(10)
    with mmap.mmap(-1, 16) as m:
        view = memoryview(m)
        kiln_np.pack_nibbles(values, out=view[3:8])
        assert m[3:8] == ref_pack(values).tobytes()
        kiln_np.unpack_nibbles(m[3:8], 10, out=view[0:10])
        assert m[0:10] == values.tobytes()
        view.release()


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("bad_at", [0, 40, 97])
def test_pack_out_untouched_when_a_late_range_is_bad(bad_at: int, threads: int) -> None:
    values = nibbles(98)
    values[bad_at] = 0x80
    out = bytearray(b"\xa5" * 49)
    with pytest.raises(KilnError) as info:
        kiln_np.pack_nibbles(values, out=out)
    assert info.value.index == bad_at
    assert out == b"\xa5" * 49


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda out: kiln_np.unpack_nibbles(b"\x21\x03", 3, out=out[:2]), "LENGTH"),
        (lambda out: kiln_np.unpack_nibbles(b"\x21\x13", 3, out=out[:3]), "TYPE"),
        (lambda out: kiln_np.pack_nibbles([1, 2, 3], out=out[:1]), "LENGTH"),
        (lambda out: kiln_np.pack_nibbles([1, 2, 16], out=out[:2]), "TYPE"),
    ],
    ids=["unpack-size", "unpack-padding", "pack-size", "pack-value"],
)
def test_out_untouched_on_error(call: Callable[[np.ndarray], object], kind: str) -> None:
    out = np.full(4, 0xA5, np.uint8)
    with pytest.raises(KilnError) as info:
        call(out)
    assert info.value.kind == kind
    assert out.tobytes() == b"\xa5" * 4


def test_read_only_out_is_refused() -> None:
    with pytest.raises(KilnError, match="writable") as info:
        kiln_np.unpack_nibbles(b"\x21", 2, out=b"\x00\x00")
    assert info.value.kind == "TYPE"


# -- the pool and its setting ------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "cap"),
    [("1", 1), ("2", 2), (" 2 ", 2), ("64", 8), ("0", 8), ("two", 8), ("", 8), ("²", 8), ("٣", 8)],
    ids=["1", "2", "spaces", "64", "0", "two", "empty", "superscript-2", "arabic-indic-3"],
)
def test_thread_setting(monkeypatch: pytest.MonkeyPatch, setting: str, cap: int) -> None:
    monkeypatch.setenv("KILN_NP_NUM_THREADS", setting)
    _pool._threads.cache_clear()
    try:
        assert _pool._threads() == min(cap, _pool._cpu_count())
    finally:
        monkeypatch.undo()
        _pool._threads.cache_clear()


def test_small_inputs_do_not_start_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pool() -> None:
        raise AssertionError("the pool was used for a small input")

    monkeypatch.setattr(_pool, "_pool", no_pool)
    least = _pool.COMPILED_THREAD_MIN_LANES if _backend.COMPILED else _pool.THREAD_MIN_LANES
    count = 2 * least - 1
    values = nibbles(count)
    assert same_bytes(kiln_np.unpack_nibbles(kiln_np.pack_nibbles(values), count), values)
    assert same_bytes(kiln_np.to_numpy(17, b"\x21\x03", (3,)), np.array([1, 2, 3], np.uint8))


# -- overlapping source and destination ------------------------------------------------------


@pytest.mark.usefixtures("tiny")
def test_out_may_overlap_the_input(threads: int) -> None:
    values = nibbles(61)
    packed = ref_pack(values)
    work = np.zeros(61, np.uint8)
    work[: packed.size] = packed
    kiln_np.unpack_nibbles(work[: packed.size], 61, out=work)  # expand in place
    assert same_bytes(work, values)
    kiln_np.pack_nibbles(work, out=work[: packed.size])  # and shrink back
    assert same_bytes(work[: packed.size], packed)


# -- from_numpy(..., out=): encode straight into a caller's buffer ---------------------------


def _sample(row: kiln_np.DType, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(int(row.code))
    size = int(np.prod(shape)) * row.dtype.itemsize
    top = 2 if row.code == kiln_np.Code.BOOL else 16 if row.packed else 256
    return rng.integers(0, top, size, dtype=np.uint8).view(row.dtype).reshape(shape)


@pytest.mark.parametrize("row", kiln_np.DTYPES, ids=lambda r: r.name)
@pytest.mark.parametrize("form", ["contiguous", "strided", "swapped", "scalar"])
def test_encode_into_matches_from_numpy(row: kiln_np.DType, form: str) -> None:
    arr = _sample(row, () if form == "scalar" else (6, 5))
    if form == "strided":
        arr = arr[::2, ::-2]
    elif form == "swapped" and row.dtype.isbuiltin == 1 and row.dtype.itemsize > 1:
        arr = arr.astype(row.dtype.newbyteorder())
    expected = bytes(kiln_np.from_numpy(arr).data)
    out = bytearray(b"\xa5" * len(expected))
    payload = kiln_np.from_numpy(arr, out=out)
    assert bytes(out) == expected
    assert payload.data.readonly
    assert np.shares_memory(np.frombuffer(payload.data, np.uint8), np.frombuffer(out, np.uint8))
    assert (payload.code, payload.shape) == (row.code, arr.shape)


def test_encode_into_keeps_nan_bits_when_swapping() -> None:
    quiet_payload = np.frombuffer(bytes.fromhex("0100807f 0000c0ff 00000080"), "<f4")
    out = np.zeros(12, np.uint8)
    kiln_np.from_numpy(quiet_payload.astype(">f4"), out=out)
    assert out.tobytes() == quiet_payload.tobytes()


def test_encode_into_an_mmap_slice_and_opaque_blocks() -> None:
    layout = kiln_np.Layout("blocks", 3)
    blocks = np.arange(12, dtype=np.uint8).reshape(4, 3)
    with mmap.mmap(-1, 32) as m:
        view = memoryview(m)
        payload = kiln_np.from_numpy(blocks, code=4100, layout=layout, out=view[8:20])
        assert (payload.code, payload.shape, payload.layout) == (4100, (4,), layout)
        assert m[8:20] == bytes(range(12))
        assert m[:8] == bytes(8)
        del payload
        view.release()


@pytest.mark.parametrize(
    ("array", "size", "kind"),
    [
        (np.array([1, 0, 2, 1], np.uint8).view(np.bool_), 4, "TYPE"),
        (np.array([[1, 0], [7, 1]], np.uint8).view(np.bool_)[:, ::-1], 4, "TYPE"),
        (np.array([1, 2, 16], np.uint8).view(ml_dtypes.uint4), 2, "TYPE"),
        (np.arange(3, dtype="<f4"), 11, "LENGTH"),
        (np.arange(3, dtype="<f4"), 13, "LENGTH"),
        (np.arange(6, dtype=np.uint8).reshape(2, 3), 5, "LENGTH"),
    ],
    ids=["bool", "bool-strided", "u4", "f32-short", "f32-long", "opaque"],
)
def test_encode_into_leaves_out_untouched_on_error(array: np.ndarray, size: int, kind: str) -> None:
    out = bytearray(b"\xa5" * size)
    layout = kiln_np.Layout("blocks", 3) if array.dtype == np.uint8 else None
    with pytest.raises(KilnError) as info:
        kiln_np.from_numpy(array, code=4100 if layout else None, layout=layout, out=out)
    assert info.value.kind == kind
    assert out == b"\xa5" * size


def test_encode_into_large_u4_checks_everything_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pool, "_threads", lambda: 2)
    count = 2 * _pool.THREAD_MIN_LANES + 10
    values = nibbles(count)
    values[-3] = 0x20  # in the second thread's range
    out = np.full(count // 2, 0xA5, np.uint8)
    with pytest.raises(KilnError) as info:
        kiln_np.from_numpy(values.view(ml_dtypes.uint4), out=out)
    assert (info.value.index, info.value.found) == (count - 3, 0x20)
    assert not np.any(out != 0xA5)


def test_encode_into_refuses_read_only_and_strided_out() -> None:
    arr = np.arange(4, dtype=np.uint8)
    with pytest.raises(KilnError, match="writable"):
        kiln_np.from_numpy(arr, out=bytes(4))
    with pytest.raises(KilnError, match="C-contiguous"):
        kiln_np.from_numpy(arr, out=np.zeros(8, np.uint8)[::2])


# -- fork, interpreter exit, and the memory of the error path (issue 11 items 5, 6, 15) ---------

# Large enough for the pool with either kernels.
_LARGE = 4 * max(_pool.THREAD_MIN_LANES, _pool.COMPILED_THREAD_MIN_LANES) + 1


def _pool_size_and_large_job(seed: int) -> tuple[int, bytes, bytes, int | None]:
    """Whether a pool exists yet (0 or 1), then a decode, an encode and a bool
    check, each large enough for the pool."""
    return (_pool._pool.cache_info().currsize, *_large_job(seed))


def _large_job(seed: int) -> tuple[bytes, bytes, int | None]:
    """A decode, an encode and a bool check, each large enough for the pool."""
    count = _LARGE
    values = nibbles(count, seed)
    packed = kiln_np.from_numpy(values.view(ml_dtypes.uint4))
    decoded = kiln_np.to_numpy(kiln_np.Code.U4, packed.data, (count,))
    flags = np.ones(count, np.uint8)
    flags[count - 7] = 2
    try:
        kiln_np.to_numpy(kiln_np.Code.BOOL, flags, (count,))
    except KilnError as exc:
        return bytes(packed.data), decoded.view(np.uint8).tobytes(), exc.index
    return bytes(packed.data), decoded.view(np.uint8).tobytes(), None


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # 3.12+: fork with threads
def test_a_forked_child_gets_its_own_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pool, "_threads", lambda: 2)
    expected = [_large_job(seed) for seed in (1, 2, 3)]
    assert _pool._pool.cache_info().currsize == 1  # the parent's pool has run
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(2)
    try:
        got = pool.map_async(_pool_size_and_large_job, [1, 2, 3]).get(timeout=120)
    finally:
        pool.terminate()
        pool.join()
    # Each child started without the parent's pool (whose threads do not exist
    # there: it hung forever before) and made its own.
    assert got[0][0] == 0  # the first task runs first in a fresh child
    assert [tuple(rest) for _, *rest in got] == expected
    assert {index for *_, index in got} == {_LARGE - 7}


_AT_EXIT = """
import atexit, sys
import numpy as np
import kiln_np
from kiln_np._kernels import pool as _pool

_pool._threads = lambda: 2
count = 4 * max(_pool.THREAD_MIN_LANES, _pool.COMPILED_THREAD_MIN_LANES) + 3
values = (np.arange(count) % 16).astype(np.uint8)
if sys.argv[1] == "used":
    kiln_np.unpack_nibbles(kiln_np.pack_nibbles(values), count)  # the pool exists

def at_exit():
    packed = kiln_np.pack_nibbles(values)
    back = kiln_np.unpack_nibbles(packed, count)
    flags = np.ones(count, np.uint8)
    flags[count - 2] = 9
    try:
        kiln_np.to_numpy(7, flags, (count,))
    except kiln_np.KilnError as exc:
        print("bool error at", exc.index - count)
    print("round trip", back.tobytes() == values.tobytes(), kiln_np.kernel_backend())

atexit.register(at_exit)
"""


@pytest.mark.parametrize("pool", ["used", "unused"])
def test_large_calls_at_interpreter_exit_run_on_the_calling_thread(pool: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _AT_EXIT, pool],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "bool error at -2",
        f"round trip True {kiln_np.kernel_backend()}",
    ]


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize(
    "case", ["bool-decode", "bool-encode", "pack-out", "pack-out-int16", "u4-encode-out"]
)
def test_rejecting_a_payload_costs_at_most_a_chunk(
    monkeypatch: pytest.MonkeyPatch, compiled: bool, case: str
) -> None:
    monkeypatch.setattr(_backend, "COMPILED", compiled)
    n = 16 << 20
    out = np.empty(n // 2, np.uint8)
    calls: dict[str, Callable[[], object]] = {
        "bool-decode": lambda: kiln_np.to_numpy(7, np.full(n, 2, np.uint8), (n,)),
        "bool-encode": lambda: kiln_np.from_numpy(np.full(n, 2, np.uint8).view(np.bool_)),
        "pack-out": lambda: kiln_np.pack_nibbles(np.full(n, 0x10, np.uint8), out=out),
        "pack-out-int16": lambda: kiln_np.pack_nibbles(np.full(n, 16, np.int16), out=out),
        "u4-encode-out": lambda: kiln_np.from_numpy(
            np.full(n, 0x10, np.uint8).view(ml_dtypes.uint4), out=out
        ),
    }
    bad = calls[case]
    tracemalloc.start()
    try:
        with pytest.raises(KilnError) as info:
            bad()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (info.value.kind, info.value.index) == ("TYPE", 0)
    # The bad input itself (n bytes, 2n for int16) plus a chunk's mask per thread
    # (a chunk is 2 * CHUNK_LANES bytes); it was 9x the input before.
    made = 2 * n if case == "pack-out-int16" else n
    bound = _pool._threads() * 4 * _pool.CHUNK_LANES
    assert peak - made <= bound, f"{(peak - made) / 2**20:.1f} MiB extra"
