"""Untrusted input: allocation before length, nothing mutated, aliasing, threads, files."""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import signal
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import DTYPES, Code, KilnError
from kiln_np._explore.golden import load_cases


def reference_pack(values: np.ndarray) -> bytes:
    """An independent, obviously-correct packer (strided numpy)."""
    v = np.concatenate([values, np.zeros(values.size % 2, np.uint8)])
    packed: bytes = (v[0::2] | (v[1::2] << 4)).astype(np.uint8).tobytes()
    return packed


# -- allocation safety ------------------------------------------------------------------


@pytest.mark.parametrize("code", [Code.F64, Code.BOOL, Code.U4, Code.E2M1])
@pytest.mark.parametrize("shape", [(2**40,), (2**32, 2**32), (2**20,) * 3, (2**63 - 1,)])
def test_declared_size_allocates_nothing(code: int, shape: tuple[int, ...]) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(KilnError) as info:
            kiln_np.to_numpy(code, b"\x00", shape)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A shape numpy cannot represent is SHAPE, checked before the length.
    representable = math.prod(shape) * kiln_np.dtype_info(code).dtype.itemsize < 2**63
    assert info.value.kind == ("LENGTH" if representable else "SHAPE")
    assert info.value.found == (1 if representable else None)
    assert peak < 64 * 1024


def test_huge_count_to_unpack_allocates_nothing() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(KilnError) as info:
            kiln_np.unpack_nibbles(b"\x00", 2**40)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.kind == "LENGTH"
    assert peak < 64 * 1024


# -- nothing lost, nothing mutated ----------------------------------------------------------


@pytest.mark.parametrize("row", DTYPES, ids=[r.name for r in DTYPES])
def test_decoding_never_writes_the_input(row: kiln_np.DType) -> None:
    n = 4099
    size = kiln_np.byte_length(row.code, (n,))
    rng = np.random.default_rng(int(row.code))
    raw = rng.integers(0, 2 if row.code == Code.BOOL else 256, size, dtype=np.uint8)
    if row.packed:
        raw[-1] &= 0x0F
    buf = bytearray(raw.tobytes())
    digest = hashlib.sha256(buf).digest()
    arr = kiln_np.to_numpy(row.code, buf, (n,), copy=True)
    kiln_np.from_numpy(arr)
    assert hashlib.sha256(buf).digest() == digest


def test_failed_decode_of_bad_content_writes_nothing() -> None:
    buf = bytearray(b"\x00\x01" * 5000 + b"\x07")
    digest = hashlib.sha256(buf).digest()
    with pytest.raises(KilnError):
        kiln_np.to_numpy(Code.BOOL, buf, (len(buf),))
    assert hashlib.sha256(buf).digest() == digest


@pytest.mark.parametrize("bad_at", [0, 1, 4097, 131071, 2**21 + 5, 2**22 - 1])
def test_pack_into_caller_buffer_is_untouched_on_error(bad_at: int) -> None:
    n = 2**22  # large enough for the chunked, threaded path
    values = np.tile(np.arange(16, dtype=np.uint8), n // 16)
    values[bad_at] = 0x10
    out = bytearray(b"\xa5" * (n // 2))
    with pytest.raises(KilnError) as info:
        kiln_np.pack_nibbles(values, out=out)
    assert info.value.index == bad_at
    assert out == bytearray(b"\xa5" * (n // 2))


def test_unpack_into_caller_buffer_is_untouched_on_error() -> None:
    out = np.full(5, 0xA5, np.uint8)
    with pytest.raises(KilnError):
        kiln_np.unpack_nibbles(b"\x21\x43\xf5", 5, out=out)
    assert out.tolist() == [0xA5] * 5
    with pytest.raises(KilnError):
        kiln_np.unpack_nibbles(b"\x21\x43", 5, out=out)
    assert out.tolist() == [0xA5] * 5


@pytest.mark.parametrize("bad_at", [0, 2**20 + 3, 2**23 - 1])
def test_encode_error_in_a_late_chunk_reports_the_first_bad_element(bad_at: int) -> None:
    n = 2**23
    values = np.zeros(n, np.uint8)
    values[bad_at] = 0xF0
    if bad_at < n - 1:
        values[-1] = 0x20  # a later bad element must not win
    with pytest.raises(KilnError) as info:
        kiln_np.from_numpy(values.view(ml_dtypes.uint4))
    assert (info.value.index, info.value.found) == (bad_at, 0xF0)


# -- aliasing ---------------------------------------------------------------------------


def test_view_aliases_bytearray_and_pins_its_size() -> None:
    buf = bytearray(np.arange(4, dtype="<f4").tobytes())
    arr = kiln_np.to_numpy(Code.F32, buf, (4,))
    buf[0:4] = np.float32(7).tobytes()
    assert arr[0] == 7  # the view sees the write: it aliases buf
    with pytest.raises(BufferError):
        buf.extend(b"\x00")  # numpy holds an export of buf while the view lives
    del arr
    buf.extend(b"\x00\x00\x00\x00")  # released with the view
    copied = kiln_np.to_numpy(Code.F32, buf, (5,), copy=True)
    buf.extend(b"\x00")  # copy=True holds no export
    assert copied.flags.owndata


def test_view_of_writable_mmap_aliases_the_map() -> None:
    m = mmap.mmap(-1, 8)
    arr = kiln_np.to_numpy(Code.U16, m, (4,))
    arr[1] = 0x0102
    assert m[2:4] == b"\x02\x01"
    del arr
    m.close()


# -- concurrency ------------------------------------------------------------------------


def test_many_threads_decode_and_encode_identically() -> None:
    n = 3 * 2**20 + 1  # odd, and above the kernels' threading threshold
    rng = np.random.default_rng(7)
    inputs = [rng.integers(0, 16, n, dtype=np.uint8) for _ in range(4)]
    packed = [reference_pack(v) for v in inputs]

    def work(i: int) -> tuple[bool, bool]:
        k = i % 4
        arr = kiln_np.to_numpy(Code.U4, packed[k], (n,))
        decoded_ok = arr.view(np.uint8).tobytes() == inputs[k].tobytes()
        encoded_ok = bytes(kiln_np.from_numpy(arr).data) == packed[k]
        return decoded_ok, encoded_ok

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(24)))
    assert results == [(True, True)] * 24


# -- files: nothing blocks, a stepped read costs what it selects ----------------------


@pytest.mark.parametrize(
    "call", ["open_payload", "LazyPayload", "save_payload-offset", "golden-cases"]
)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, call: str) -> None:
    """Opening a FIFO for reading blocks until a writer comes: it must never be opened."""
    fifo = tmp_path / "pipe.json"  # named as a golden case file too
    os.mkfifo(fifo)
    calls: dict[str, Callable[[], object]] = {
        "open_payload": lambda: kiln_np.open_payload(fifo, Code.U8, (1,)),
        "LazyPayload": lambda: kiln_np.LazyPayload(fifo, Code.U4, (3,)),
        "save_payload-offset": lambda: kiln_np.save_payload(fifo, np.zeros(2, np.uint8), offset=4),
        "golden-cases": lambda: load_cases(tmp_path),
    }
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            calls[call]()
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # blocked in open(): give it a writer so the thread can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
        pytest.fail(f"{call} blocked on a FIFO")
    [exc] = outcome
    assert isinstance(exc, KilnError)
    assert (exc.kind, "FIFO" in exc.message) == ("TYPE", True)


def _sparse(path: Path, nbytes: int) -> None:
    with open(path, "wb") as f:
        f.truncate(nbytes)  # a hole: the test never holds the file in memory


@pytest.mark.parametrize(
    ("code", "key_of", "limit"),
    [
        (Code.U4, lambda n: slice(None, None, n - 1), 64 << 10),
        (Code.U4, lambda n: slice(None, None, -(n - 1)), 64 << 10),
        (Code.U4, lambda n: slice(3, None, 1000), 2 << 20),
        (Code.BOOL, lambda n: slice(None, None, n // 3), 64 << 10),
        (Code.F32, lambda n: slice(1, None, 4099), 2 << 20),
    ],
    ids=["u4-ends", "u4-ends-reversed", "u4-every-1000th", "bool-3-rows", "f32-every-4099th"],
)
def test_a_stepped_slice_allocates_what_it_selects(
    tmp_path: Path, code: Code, key_of: Any, limit: int
) -> None:
    """64 MiB of payload: the peak is the selected rows plus a bounded batch,
    never the span between the first and the last row (129 MiB before)."""
    path = tmp_path / "big.bin"
    nbytes = 64 << 20
    _sparse(path, nbytes)
    n = nbytes * 2 if code == Code.U4 else nbytes // kiln_np.dtype_info(code).dtype.itemsize
    lazy = kiln_np.LazyPayload(path, code, (n,))
    key = key_of(n)
    tracemalloc.start()
    try:
        got = lazy[key]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.shape == (len(range(n)[key]),)
    assert not got.view(np.uint8).any()
    assert peak < limit + got.nbytes


_TRUNCATE_UNDER_A_MAP = """
import os, sys, kiln_np
path, lazy = sys.argv[1], sys.argv[2] == "lazy"
n = 3 * os.sysconf("SC_PAGE_SIZE")
with open(path, "wb") as f:
    f.write(bytes(n))
opened = kiln_np.LazyPayload(path, 9, (n,)) if lazy else kiln_np.open_payload(path, 9, (n,))
os.truncate(path, 0)  # another process shrinking the file in place
print("read", int(opened[n - 1]), flush=True)
"""


@pytest.mark.parametrize("how", ["memmap", "lazy"])
def test_truncating_a_mapped_file_is_sigbus_as_documented(tmp_path: Path, how: str) -> None:
    """docs/safety.md: a concurrent truncation kills the reader of a map; no
    exception can be raised, so the documentation must say so."""
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_UNDER_A_MAP, str(tmp_path / "p.bin"), how],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -signal.SIGBUS
    assert "read" not in done.stdout
    section = (Path(__file__).resolve().parents[1] / "docs" / "safety.md").read_text()
    section = section.split("## Memory maps and SIGBUS")[1].split("\n## ")[0]
    for name in ("`open_payload`", "`LazyPayload`", "`kiln_np.dask.from_payload`",
                 "ONNX external data", "`kiln_np.safetensors`", "`kiln-np decode`"):  # fmt: skip
        assert name in section


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"))


def test_descriptors_held_by_live_maps_are_as_documented(tmp_path: Path) -> None:
    """docs/safety.md: on Python 3.13+ a map keeps no descriptor (trackfd=False);
    before, CPython's mmap keeps a duplicate per live map, until it is dropped."""
    n = 300
    kiln_np.save_weights(
        tmp_path / "d", {f"t{i}": np.full(2, i % 100, np.int8) for i in range(n)}, format="kiln"
    )
    before = _descriptors()
    weights = kiln_np.open_weights(tmp_path / "d")
    assert _descriptors() == before  # opening keeps none
    arrays = [t.numpy() for t in weights.values()]
    assert _descriptors() - before == (0 if sys.version_info >= (3, 13) else n)
    weights.close()
    assert [int(a[0]) for a in arrays] == [i % 100 for i in range(n)]  # still readable
    del arrays
    assert _descriptors() == before  # dropped with the last array
