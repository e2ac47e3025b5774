"""Hypothesis strategies for hostile inputs, shared by the fuzz tests and fuzz/run.py."""

from __future__ import annotations

import array
import mmap
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from kiln_np import Layout

NUMPY_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def numpy_int(bounds: tuple[int, int] = (-(2**63), 2**64 - 1)) -> st.SearchStrategy[Any]:
    """A numpy integer scalar of a random width holding a value it can represent."""

    def build(t: Any) -> st.SearchStrategy[Any]:
        info = np.iinfo(t)
        lo, hi = max(bounds[0], int(info.min)), min(bounds[1], int(info.max))
        return st.integers(lo, hi).map(t)

    return st.sampled_from(NUMPY_INTS).flatmap(build)


codes: st.SearchStrategy[Any] = st.one_of(
    st.integers(0, 65535),
    st.sampled_from([0, 1, 7, 16, 17, 18, 19, 20, 4095, 4096, 32767, 32768, 65535, 65536]),
    st.integers(-(2**70), 2**70),
    numpy_int(),
    st.booleans(),
    st.sampled_from([np.True_, np.float32(2.0), 2.0, float("nan"), "2", b"\x02", None, [2]]),
)

dims: st.SearchStrategy[Any] = st.one_of(
    st.integers(0, 5),
    st.integers(0, 5),
    st.integers(-3, 2**65),
    st.sampled_from([2**31, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, -1]),
    numpy_int((0, 2**64 - 1)),
    st.sampled_from([True, 1.0, None, "1", np.float64(1.0)]),
)

shapes: st.SearchStrategy[Any] = st.one_of(
    st.lists(st.integers(0, 4), max_size=4).map(tuple),
    st.lists(dims, max_size=6).map(tuple),
    st.lists(dims, max_size=6),
    st.integers(1, 80).map(lambda r: (1,) * r),
    st.sampled_from([3, None, "3", b"3", {1: 2}, {3}, 1.5, np.array([[1]]), np.array([2, 3])]),
)

layouts: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.builds(Layout, st.text(min_size=1, max_size=8), st.integers(1, 5)),
    st.sampled_from([("x", 2), "x", 2, Layout("vendor", 1)]),
)


def _view(payload: bytes) -> Any:
    return memoryview(payload)


def _strided(payload: bytes) -> Any:
    return memoryview(payload + payload)[::2]


def _mmap(payload: bytes) -> Any:
    m = mmap.mmap(-1, max(len(payload), 1))
    m.write(payload)
    return m if payload else b""


def _released(payload: bytes) -> Any:
    view = memoryview(payload)
    view.release()
    return view


def _closed_mmap(payload: bytes) -> Any:
    m = mmap.mmap(-1, 1)
    m.close()
    return m


def buffers(max_size: int = 40) -> st.SearchStrategy[Any]:
    """Every bytes-like kind, unaligned and strided views, and some non-buffers."""
    raw = st.binary(max_size=max_size)
    return st.one_of(
        raw,
        raw.map(bytearray),
        raw.map(_view),
        raw.map(lambda b: memoryview(b"\x00" + b)[1:]),
        raw.map(_strided),
        raw.map(lambda b: np.frombuffer(b, np.uint8)),
        raw.map(lambda b: np.frombuffer(b + b, np.uint8)[::2]),
        raw.map(lambda b: array.array("B", b)),
        raw.map(_mmap),
        raw.map(lambda b: np.frombuffer(b + b"\x00" * (-len(b) % 4), "<f4").data),
        raw.map(lambda b: np.frombuffer(b * 2, np.uint8).reshape(2, -1).T if b else b""),
        raw.map(_released),
        raw.map(_closed_mmap),
        st.just(np.array([object()])),
        st.sampled_from(["text", [1, 2], None, 7, 1.5]),
    )


def is_bytes_like(buf: object) -> bool:
    try:
        memoryview(buf)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _array_for(dtype: Any, shape: tuple[int, ...], raw: bytes) -> Any:
    d = np.dtype(dtype)
    n = int(np.prod(shape)) * d.itemsize
    data = (raw * (n // max(len(raw), 1) + 1))[:n] if raw else bytes(n)
    return np.frombuffer(data, np.uint8).view(d).reshape(shape)


ENCODE_DTYPES = [
    "<f8", ">f8", "<f4", ">f4", "<f2", "?", "i1", "u1", ">i2", "<u2", ">i4", "<u4", "<i8", ">u8",
    ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu,
    ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn,
    "c8", "O", "U2", "S2", "V3", "M8[s]", [("a", "<f4")], ml_dtypes.float8_e4m3fnuz, ml_dtypes.int2,
]  # fmt: skip


@st.composite
def arrays(draw: st.DrawFn) -> Any:
    """Arrays of every dtype in any memory layout: strided, transposed, broadcast, 0-d."""
    dtype = draw(st.sampled_from(ENCODE_DTYPES))
    shape = draw(st.lists(st.integers(0, 4), max_size=3).map(tuple))
    raw = draw(st.binary(max_size=64))
    d = np.dtype(dtype)
    if d.kind == "O":
        return np.array([object()] * int(np.prod(shape)), dtype=object).reshape(shape)
    arr = _array_for(d, shape, raw)
    view = draw(st.sampled_from(["c", "f", "rev", "t", "bcast", "slice", "masked", "list"]))
    if view == "f":
        return np.asfortranarray(arr)
    if view == "rev" and arr.ndim:
        return arr[::-1]
    if view == "t":
        return arr.T
    if view == "bcast" and arr.ndim and arr.shape[0]:
        return np.broadcast_to(arr[:1], (3, *arr.shape[1:]))
    if view == "slice" and arr.ndim:
        return arr[::2]
    if view == "masked":
        return np.ma.masked_array(arr)
    if view == "list" and d.kind in "iuf" and d.isbuiltin == 1:
        return arr.tolist()
    return arr
