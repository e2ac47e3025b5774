"""The small-call fast paths give what the general path gives, errors included.

``to_numpy`` of ``bytes``, ``from_numpy`` of a plain ndarray with no ``code``,
``layout`` or ``out``, and ``payload_info`` of an int code and a tuple of ints
take shorter routes (issue 14).  A read-only ``memoryview`` of the same bytes and
``from_numpy(..., code=...)`` take the general ones; each case here runs both and
compares everything a caller can see: bytes, dtype, shape, writability, the
payload's code and buffer, or the error's kind, message and attributes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import DTYPES, Code, KilnError, Layout, _codec, from_numpy, payload_info, to_numpy
from kiln_np._kernels import backend as _backend
from kiln_np._kernels import nibbles as _nibbles
from kiln_np._kernels import pool as _pool

ROW_IDS = [r.name for r in DTYPES]
BUILT = importlib.util.find_spec("kiln_np._kernels.native") is not None
BACKENDS = [False, True] if BUILT else [False]

Outcome = tuple[object, ...]


def outcome(call: Callable[[], object]) -> Outcome:
    """What a caller sees of ``call``: its array or payload, or its error."""
    try:
        result = call()
    except KilnError as exc:
        return (
            "error",
            exc.kind,
            str(exc),
            exc.code,
            exc.shape,
            exc.expected,
            exc.found,
            exc.index,
            exc.__context__ is None,
        )
    if isinstance(result, kiln_np.Payload):
        data = result.data
        return (
            "payload",
            type(result),
            type(result.code),
            result.code,
            result.shape,
            result.layout,
            bytes(data),
            (data.format, data.ndim, data.readonly, data.c_contiguous),
        )
    assert isinstance(result, np.ndarray)
    return (
        "array",
        type(result),
        result.dtype.str,
        result.dtype.name,
        result.shape,
        result.flags.writeable,
        result.reshape(-1).view(np.uint8).tobytes(),
    )


def payloads(row: kiln_np.DType, shape: tuple[int, ...]) -> list[bytes]:
    """A valid payload of ``row`` and ``shape``, one byte short and one long,
    and for bool and odd 4-bit counts one with a bad last byte."""
    n = kiln_np.byte_length(row.code, shape)
    rng = np.random.default_rng(n)
    if row.code == Code.BOOL:
        good = rng.integers(0, 2, n, dtype=np.uint8).tobytes()
    elif row.packed:
        count = int(np.prod(shape))
        good = kiln_np.pack_nibbles(rng.integers(0, 16, count, dtype=np.uint8)).tobytes()
    else:
        good = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    cases = [good, good[:-1], good + b"\x01"]
    if good and (row.code == Code.BOOL or (row.packed and int(np.prod(shape)) % 2)):
        cases.append(good[:-1] + bytes([good[-1] | 0x20]))
    return cases


SHAPES = [(), (0,), (1,), (3,), (4,), (2, 3), (3, 1, 5), (41,)]


@pytest.fixture(autouse=True)
def poisoned_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """New arrays of the fast paths start as 0xa5 bytes, not as whatever memory
    a freed array left (often the right answer): a byte a kernel skips shows."""

    def empty(shape: Any, dtype: Any) -> np.ndarray:
        arr = np.empty(shape, dtype)
        arr.reshape(-1).view(np.uint8)[...] = 0xA5
        return arr

    def large_empty(shape: Any, dtype: Any, count: int) -> np.ndarray:
        arr = real_large_empty(shape, dtype, count)
        arr.reshape(-1).view(np.uint8)[...] = 0xA5
        return arr

    real_large_empty = _pool.empty
    monkeypatch.setattr(_codec, "_empty", empty)
    monkeypatch.setattr(_pool, "empty", large_empty)


@pytest.mark.parametrize("compiled", BACKENDS, ids=["numpy", "compiled"][: len(BACKENDS)])
@pytest.mark.parametrize("row", DTYPES, ids=ROW_IDS)
def test_to_numpy_of_bytes_is_the_general_path(
    monkeypatch: pytest.MonkeyPatch, row: kiln_np.DType, compiled: bool
) -> None:
    monkeypatch.setattr(_backend, "COMPILED", compiled)
    for shape in SHAPES:
        for payload in payloads(row, shape):
            for copy in (False, True):
                fast = outcome(partial(to_numpy, int(row.code), payload, shape, copy=copy))
                general = outcome(
                    partial(to_numpy, int(row.code), memoryview(payload), shape, copy=copy)
                )
                assert fast == general, (shape, payload.hex(), copy)


@pytest.mark.parametrize("compiled", BACKENDS, ids=["numpy", "compiled"][: len(BACKENDS)])
@pytest.mark.parametrize("count", [15, 16, 17, 33, 64, 101])
def test_4_bit_fast_paths_across_the_thread_threshold(
    monkeypatch: pytest.MonkeyPatch, compiled: bool, count: int
) -> None:
    # Threads from 8 lanes (16 elements): the fast paths hand larger inputs to
    # the threaded unpack and pack instead of calling the kernel once.
    monkeypatch.setattr(_backend, "COMPILED", compiled)
    monkeypatch.setattr(_nibbles, "SMALL_LANES", 2)
    for name, value in [
        ("COMPILED_THREAD_MIN_LANES", 8),
        ("COMPILED_GRANULE", 4),
        ("THREAD_MIN_LANES", 8),
        ("CHUNK_LANES", 4),
    ]:
        monkeypatch.setattr(_pool, name, value)
    monkeypatch.setattr(_pool, "_threads", lambda: 2)
    values = np.random.default_rng(count).integers(0, 16, count, dtype=np.uint8)
    payload = kiln_np.pack_nibbles(values).tobytes()
    for code in (Code.I4, Code.U4, Code.E2M1):
        fast = outcome(partial(to_numpy, int(code), payload, (count,)))
        assert fast == outcome(partial(to_numpy, int(code), memoryview(payload), (count,)))
        assert fast[-1] == values.tobytes()
        for bad in (None, 0, count - 1):
            stored = values.copy()
            if bad is not None:
                stored[bad] = 0x10  # a storage byte with a bit above the nibble
            arr = stored.view(kiln_np.dtype_for_code(code))
            encoded = outcome(partial(from_numpy, arr))
            assert encoded == outcome(partial(from_numpy, arr, code=int(code)))
            assert (encoded[0] == "error") == (bad is not None)


def test_to_numpy_of_bytes_other_codes_and_layouts() -> None:
    layout = Layout("blocks", 3)
    cases: list[tuple[Any, Any, Layout | None, bytes]] = [
        (0x1234, (2,), layout, bytes(range(6))),
        (0x1234, (2,), layout, bytes(5)),
        (2, (2,), layout, bytes(8)),  # a layout with a closed code
        (0, (2,), None, bytes(8)),
        (2, (-1,), None, bytes(8)),
        (2, (2**62, 4), None, bytes(8)),  # SHAPE before LENGTH
        ("f32", [2], None, bytes(8)),
        (Code.BF16, (2,), None, b"\x80\x3f\x00\xc0"),
    ]
    for code, shape, lay, payload in cases:
        fast = outcome(partial(to_numpy, code, payload, shape, lay))
        assert fast == outcome(partial(to_numpy, code, memoryview(payload), shape, lay))


def arrays() -> list[np.ndarray]:
    """Arrays of every code: C-order, strided, Fortran, byte-swapped, 0-d, empty,
    and bad storage bytes (bool 2, a 4-bit 0x10)."""
    out: list[np.ndarray] = []
    rng = np.random.default_rng(7)
    for row in DTYPES:
        if row.code == Code.BOOL:
            base = rng.integers(0, 2, 24, dtype=np.uint8)
        elif row.packed:
            base = rng.integers(0, 16, 24, dtype=np.uint8)
        else:
            base = rng.integers(0, 256, 24 * row.dtype.itemsize, dtype=np.uint8)
        arr = base.view(row.dtype)
        out += [arr, arr.reshape(2, -1), arr[::2], arr.reshape(2, -1).T, arr[:0], arr[:1]]
        out += [arr.reshape(2, 3, -1)[:, :1], arr[3:4].reshape(()), arr.reshape(2, -1)[:, :0]]
        if row.dtype.itemsize > 1 and row.dtype.isbuiltin == 1:
            out.append(arr.astype(row.dtype.newbyteorder(">")))
        if row.code == Code.BOOL or row.packed:
            bad = base.copy()
            bad[5] = 2 if row.code == Code.BOOL else 0x10
            out.append(bad.view(row.dtype))
    return out


@pytest.mark.parametrize("compiled", BACKENDS, ids=["numpy", "compiled"][: len(BACKENDS)])
def test_from_numpy_of_a_plain_array_is_the_general_path(
    monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    monkeypatch.setattr(_backend, "COMPILED", compiled)
    for arr in arrays():
        code = kiln_np.code_for_dtype(arr.dtype)
        fast = outcome(partial(from_numpy, arr))
        general = outcome(partial(from_numpy, arr, code=int(code)))
        assert fast == general, (arr.dtype, arr.shape)
        if fast[0] == "payload":
            p, q = from_numpy(arr), from_numpy(arr, code=int(code))
            assert p == kiln_np.Payload(*p)  # a Payload, made without its __new__
            assert shares(p, arr) == shares(q, arr)  # a view exactly when the general one is


def shares(p: kiln_np.Payload, arr: np.ndarray) -> bool:
    return bool(np.shares_memory(np.frombuffer(p.data, np.uint8), arr))


def test_from_numpy_fast_path_keeps_zero_copy_and_read_only() -> None:
    arr = np.arange(6, dtype="<f4").reshape(2, 3)
    p = from_numpy(arr)
    assert np.shares_memory(np.frombuffer(p.data, np.uint8), arr)
    assert (p.data.readonly, p.data.format, p.data.ndim) == (True, "B", 1)
    assert (bytes(p.data), p.shape, p.code) == (arr.tobytes(), (2, 3), Code.F32)
    assert type(p.code) is Code
    view = arr.view(np.ndarray)
    view.flags.writeable = False
    assert bytes(from_numpy(view).data) == arr.tobytes()


def test_payload_info_cache_keys_are_exact() -> None:
    info = payload_info(2, (3,))
    assert payload_info(2, (3,)) is info
    assert payload_info(Code.F32, (3,)) is info
    assert payload_info(2, (3,), decodable=False) is not info
    assert payload_info(2, (3,), decodable=False).decodable is False
    assert payload_info(2, (3,)).decodable is True
    layout = Layout("blocks", 3)
    assert payload_info(0x1234, (3,), layout).layout == layout
    # Equal to a cached key but not plain: checked as new input, never found there.
    assert payload_info(np.int64(2), (np.int64(3),)) == info
    payload_info(1, (3,))
    payload_info(2, (1,))
    bad: list[tuple[Any, Any, str]] = [
        (True, (3,), "TYPE"),
        (2.0, (3,), "TYPE"),
        (2, (3.0,), "SHAPE"),
    ]
    for code, shape, kind in bad:
        with pytest.raises(KilnError) as err:
            payload_info(code, shape)
        assert err.value.kind == kind
    with pytest.raises(KilnError) as err:
        payload_info(2, (True,))
    assert err.value.kind == "SHAPE"


@pytest.mark.parametrize("shape", [(-1,), (2**63,), (2**62, 4)])
def test_a_cache_miss_raises_the_checks_own_error(shape: tuple[int, ...]) -> None:
    for _ in range(2):
        with pytest.raises(KilnError) as err:
            payload_info(2, shape)
        assert err.value.kind == "SHAPE"
        assert err.value.__context__ is None  # not raised while handling the cache miss


def test_ml_dtypes_plain_arrays_still_take_a_view() -> None:
    arr = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    p = from_numpy(arr)
    assert (p.code, bytes(p.data)) == (Code.BF16, arr.tobytes())
    assert np.shares_memory(np.frombuffer(p.data, np.uint8), arr.view(np.uint8))
