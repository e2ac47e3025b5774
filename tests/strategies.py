"""Hypothesis strategies for hostile inputs, shared by the fuzz tests and fuzz/run.py."""

from __future__ import annotations

import array
import mmap
import operator
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from kiln_np import KilnError, Layout

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


def expect_allowed(exc: BaseException, buf: object = b"", *, os_error: bool = False) -> None:
    """The allow-list oracle for an exception: KilnError; TypeError for a ``buf``
    that is not bytes-like; OSError where a file is touched (``os_error``)."""
    if isinstance(exc, KilnError):
        assert exc.kind in {"TYPE", "LENGTH", "SHAPE"}
        assert str(exc).startswith(exc.kind + ": ")
        return
    if isinstance(exc, TypeError) and not is_bytes_like(buf):
        return
    if os_error and isinstance(exc, OSError):
        return
    raise AssertionError(f"{type(exc).__name__} escaped: {exc!r}") from exc


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


ONNX_ONLY_DTYPES = [
    "<c16", ">c8", ml_dtypes.float8_e5m2fnuz, ml_dtypes.uint2, ml_dtypes.float6_e2m3fn,
    ml_dtypes.float6_e3m2fn, ml_dtypes.float8_e3m4, ml_dtypes.float8_e4m3b11fnuz,
    ">u2", "<i2", ">i8", "<u8",
]  # fmt: skip
"""With ENCODE_DTYPES: every dtype of the ONNX table, and some near misses."""


@st.composite
def arrays(draw: st.DrawFn, dtypes: list[Any] = ENCODE_DTYPES) -> Any:
    """Arrays of every dtype in any memory layout: strided, transposed, broadcast, 0-d."""
    dtype = draw(st.sampled_from(dtypes))
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


# ---------------------------------------------------------------- kiln_np.onnx


def mostly(
    valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """``valid`` three times in four: with several arguments each hostile at once,
    a call would rarely get past its first check.  (``one_of(v, v, v, h)`` would
    not do: hypothesis drops the repeated branches.)"""
    return st.sampled_from([True, True, True, False]).flatmap(lambda ok: valid if ok else hostile)


small_dims: st.SearchStrategy[Any] = st.lists(st.integers(0, 4), max_size=3).map(tuple)

data_types: st.SearchStrategy[Any] = st.one_of(
    st.integers(0, 30),
    st.integers(1, 28),
    st.sampled_from([-1, 2**31 - 1, -(2**31), 2**70, 255]),
    numpy_int((-(2**63), 2**64 - 1)),
    st.sampled_from([True, np.True_, 1.0, "1", None, np.float32(2.0)]),
)
"""``TensorProto.DataType`` values: the table, its edges and non-integers."""


ONNX_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 8: None, 9: 8, 10: 16, 11: 64,
             12: 32, 13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4,
             23: 4, 24: 8, 25: 2, 26: 2, 27: 6, 28: 6}  # fmt: skip
"""Bits per element of each ONNX data type (the seed's table), None for STRING."""


def _count_of(dims: Any) -> int | None:
    """The element count of a well-formed small ``dims``, else None."""
    try:
        count = 1
        for d in dims:
            count *= operator.index(d)
    except TypeError:
        return None
    return count if 0 <= count <= 256 else None


def onnx_field_count(data_type: int, count: int) -> int:
    """Values a typed field holds for ``count`` elements (for the table's rows)."""
    bits = ONNX_BITS.get(data_type)
    if bits in (2, 4):
        return -(-count * bits // 8)
    if data_type in (14, 15):
        return 2 * count
    return count


_FIELD_INTS = [0, 1, 2, 3, 15, 16, 63, 64, 127, 128, 255, 256, 32767, 32768, 65535, 65536,
               2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64]  # fmt: skip
_FIELD_DTYPES = ["i1", "u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "?", "<f2", "<f4", "<f8",
                 "<c8", "g", "U1", "S1"]  # fmt: skip
_HOSTILE_FIELDS = [5, None, "ab", b"ab", [[1, 2]], {1: 2}, [b"\xff\xfe"], [memoryview(b"a")],
                   ["\ud800"], [1, "a"], [object()]]  # fmt: skip


def _field_values(draw: st.DrawFn, n: int, data_type: Any) -> Any:
    edge = st.sampled_from(_FIELD_INTS).flatmap(lambda v: st.sampled_from([v, -v, v - 1]))
    ints = st.one_of(st.integers(0, 3), st.integers(0, 255), edge, st.integers(-(2**70), 2**70))
    floats = st.one_of(st.floats(), st.floats(width=32), st.sampled_from([1e300, -0.0, 2**-149]))
    kinds = ["ints", "floats", "bytes", "str", "array", "iter", "hostile"]
    fitting = "floats" if data_type in (1, 11, 14, 15) else "bytes" if data_type == 8 else "ints"
    kind = draw(mostly(st.just(fitting), st.sampled_from(kinds)))
    if kind == "ints":
        return draw(st.lists(ints, min_size=n, max_size=n))
    if kind == "floats":
        return draw(st.lists(floats, min_size=n, max_size=n))
    if kind == "bytes":
        return draw(st.lists(st.binary(max_size=4), min_size=n, max_size=n))
    if kind == "str":
        return draw(st.lists(st.text(max_size=3), min_size=n, max_size=n))
    if kind == "array":
        dtype = np.dtype(draw(st.sampled_from(_FIELD_DTYPES)))
        if dtype.kind in "US":
            return np.array(["a"] * n, dtype)
        raw = draw(st.binary(min_size=n * dtype.itemsize, max_size=n * dtype.itemsize))
        return np.frombuffer(raw, dtype)
    if kind == "iter":
        return iter(draw(st.lists(st.one_of(st.binary(max_size=2), ints), min_size=n, max_size=n)))
    return draw(st.sampled_from(_HOSTILE_FIELDS))


@st.composite
def onnx_fields(draw: st.DrawFn) -> tuple[Any, Any, Any]:
    """``(data_type, values, dims)`` for ``decode_field``: mostly the right number
    of values (so that the range and content checks are reached), sometimes one off."""
    data_type = draw(mostly(st.integers(1, 28), data_types))
    dims = draw(mostly(small_dims, shapes))
    count = _count_of(dims)
    if count is None or type(data_type) is not int:
        n = draw(st.integers(0, 6))
    else:
        n = onnx_field_count(data_type, count) + draw(st.sampled_from([0, 0, 0, 0, 0, -1, 1]))
    return data_type, _field_values(draw, max(n, 0), data_type), dims


@st.composite
def onnx_raw(draw: st.DrawFn) -> tuple[Any, Any, Any]:
    """``(data_type, raw_data, dims)`` for ``decode_raw``/``to_kiln``: usually exactly
    ``ceil(count * bits / 8)`` random bytes, sometimes one off, sometimes any of
    ``buffers()``."""
    data_type = draw(mostly(st.integers(1, 28), data_types))
    dims = draw(mostly(small_dims, shapes))
    count = _count_of(dims)
    bits = ONNX_BITS.get(data_type) if type(data_type) is int else None
    if count is None or bits is None:
        n = draw(st.integers(0, 8))
    else:
        n = -(-count * bits // 8) + draw(st.sampled_from([0, 0, 0, 0, 0, -1, 1]))
    raw = draw(mostly(st.binary(min_size=max(n, 0), max_size=max(n, 0)), buffers()))
    return data_type, raw, dims


ONNX_DTYPES = ENCODE_DTYPES + ONNX_ONLY_DTYPES

dtype_likes: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(ONNX_DTYPES),
    st.sampled_from([None, "no-such-dtype", ("f4", -1), ("f4", 2**70), "S-1", "M8[zz]", 3.5,
                     [("a", "f4"), ("a", "f4")], object, str, bytes, np.ndarray, "i4,i4", 0]),
)  # fmt: skip
"""Things passed where a dtype is expected: every ONNX dtype and many non-dtypes."""

# ---------------------------------------------------------------- files

offsets: st.SearchStrategy[Any] = mostly(
    st.integers(0, 8),
    st.one_of(
        st.integers(0, 80),
        st.sampled_from([-1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 2**70, -(2**70)]),
        numpy_int((0, 40)),
        st.sampled_from([True, 1.0, None, "1", np.float64(1.0)]),
    ),
)

small_codes: st.SearchStrategy[Any] = mostly(st.integers(1, 19), st.one_of(st.just(4096), codes))


def _slice_part() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.integers(-6, 6), numpy_int((-6, 6)), st.sampled_from([2**70]))


leading_keys: st.SearchStrategy[Any] = st.one_of(
    st.integers(-6, 6),
    numpy_int((-6, 6)),
    st.builds(slice, _slice_part(), _slice_part(), _slice_part()),
    st.sampled_from([True, np.False_, None, Ellipsis, 1.0, "0", [0, 1], np.array([0]), 2**70]),
    st.sampled_from([np.array(1), np.array([True, False]), slice("a"), slice(0, 1.5)]),
)

index_keys: st.SearchStrategy[Any] = st.one_of(
    leading_keys,
    st.lists(leading_keys, max_size=4).map(tuple),
)
"""``__getitem__`` keys: ints, slices of any step (zero too), fancy, None, Ellipsis."""
