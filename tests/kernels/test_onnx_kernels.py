"""The ONNX 2- and 6-bit kernels: bit-exact at every chunk and thread boundary.

Mirrors tests/kernels/test_nibbles.py and tests/kernels/test_kernels.py: the kernels of
``kiln_np.onnx._subbyte`` are checked, compiled and numpy alike (the
``backend`` fixture switches ``_backend.COMPILED``, so both run whatever
``KILN_NP_PURE`` says), against a bit-by-bit numpy reference, at the lengths
where their paths change with the real constants, and with tiny constants
(monkeypatched in ``kiln_np._kernels.nibbles``, whose chunk size and thread pool they
share) so that every offset around a chunk and a thread range is reached with
small arrays.  Where the reference would be too slow, and for errors, the
compiled kernels are compared with the numpy ones in the same process.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kiln_np import KilnError
from kiln_np import onnx as ko
from kiln_np._kernels import backend as _backend
from kiln_np._kernels import native as _kernels
from kiln_np._kernels import pool as _pool
from kiln_np._kernels import subbyte as _subbyte

Unpack = Callable[[np.ndarray, np.ndarray, int], None]
Pack = Callable[[np.ndarray, np.ndarray], None]
GIL_FREE_BYTES = 16384  # the C kernels release the GIL above this many elements
KERNELS: dict[int, tuple[Unpack, Pack]] = {
    2: (_subbyte.unpack2_into, _subbyte.pack2_into),
    6: (_subbyte.unpack6_into, _subbyte.pack6_into),
}


def ref_pack(values: np.ndarray, bits: int) -> np.ndarray:
    """One little-endian bit stream, lowest bit first: the ONNX rule for both widths."""
    stream = np.unpackbits(values[:, None], axis=1, bitorder="little")[:, :bits].reshape(-1)
    return np.packbits(stream, bitorder="little")


def ref_unpack(packed: np.ndarray, count: int, bits: int) -> np.ndarray:
    stream = np.unpackbits(packed, bitorder="little")[: count * bits].reshape(count, bits)
    return np.packbits(stream, axis=1, bitorder="little").reshape(count)


def values(count: int, bits: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << bits, count, dtype=np.uint8)


def round_trip(count: int, bits: int, seed: int = 0) -> None:
    unpack, pack = KERNELS[bits]
    v = values(count, bits, seed)
    packed = np.empty(-(-count * bits // 8), np.uint8)
    pack(v, packed)
    assert packed.tobytes() == ref_pack(v, bits).tobytes()
    out = np.empty(count, np.uint8)
    unpack(packed, out, count)
    assert out.tobytes() == v.tobytes()


@pytest.fixture(params=["compiled", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs on each kernel in turn (CI builds the extension, and
    ``KILN_NP_PURE`` only changes the default)."""
    name: str = request.param
    monkeypatch.setattr(_backend, "COMPILED", name == "compiled")
    return name


# -- the reference itself, on the seed's vectors ------------------------------------------


def test_reference_matches_the_seed_layouts() -> None:
    # 2-bit: x0 | x1<<2 | x2<<4 | x3<<6; 6-bit: four elements in three bytes.
    assert ref_pack(np.array([0, 1, 2, 3], np.uint8), 2).tolist() == [0xE4]
    assert ref_pack(np.array([1, 2, 3, 63], np.uint8), 6).tolist() == [0x81, 0x30, 0xFC]
    assert ref_unpack(np.array([0x41, 0x00], np.uint8), 2, 6).tolist() == [1, 1]


# -- every value ---------------------------------------------------------------------------


@pytest.mark.usefixtures("tiny", "backend")
def test_every_2bit_byte_through_the_chunked_path(threads: int) -> None:
    packed = np.arange(256, dtype=np.uint8)
    out = np.empty(1024, np.uint8)
    _subbyte.unpack2_into(packed, out, 1024)
    assert out.tobytes() == ref_unpack(packed, 1024, 2).tobytes()
    back = np.empty(256, np.uint8)
    _subbyte.pack2_into(out, back)
    assert back.tobytes() == packed.tobytes()


@pytest.mark.usefixtures("tiny", "backend")
def test_every_6bit_value_in_every_position(threads: int) -> None:
    v = np.concatenate([np.roll(np.arange(64, dtype=np.uint8), k) for k in range(4)])
    packed = np.empty(192, np.uint8)
    _subbyte.pack6_into(v, packed)
    assert packed.tobytes() == ref_pack(v, 6).tobytes()
    out = np.empty(256, np.uint8)
    _subbyte.unpack6_into(packed, out, 256)
    assert out.tobytes() == v.tobytes()


# -- chunk and thread boundaries -------------------------------------------------------------


@pytest.mark.usefixtures("tiny", "backend")
@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("count", range(0, 140, 1))
def test_tiny_constants_every_length(bits: int, count: int, threads: int) -> None:
    round_trip(count, bits, seed=count)


def _boundary_counts() -> list[int]:
    lanes = {_pool.CHUNK_LANES, _pool.THREAD_MIN_LANES, 2 * _pool.CHUNK_LANES}
    lanes |= {_pool.THREAD_MIN_LANES + _pool.CHUNK_LANES}
    lanes |= {GIL_FREE_BYTES // 4}  # the C kernels release the GIL above it
    return sorted({4 * n + d for n in lanes for d in (-5, -4, -1, 0, 1, 3, 4, 5)})


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("count", _boundary_counts())
def test_real_constants_at_each_boundary(bits: int, count: int) -> None:
    round_trip(count, bits, seed=count)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("bits", [2, 6])
def test_results_do_not_depend_on_the_thread_count(
    bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 4 * (2 * _pool.THREAD_MIN_LANES + _pool.CHUNK_LANES) + 3
    v = values(count, bits)
    expected = ref_pack(v, bits)
    unpack, pack = KERNELS[bits]
    for k in (1, 2, 3):
        monkeypatch.setattr(_pool, "_threads", lambda k=k: k)
        packed = np.empty(expected.size, np.uint8)
        pack(v, packed)
        assert packed.tobytes() == expected.tobytes(), k
        out = np.empty(count, np.uint8)
        unpack(packed, out, count)
        assert out.tobytes() == v.tobytes(), k


# -- through the public functions --------------------------------------------------------------


@pytest.mark.usefixtures("tiny", "backend")
@pytest.mark.parametrize(
    ("data_type", "dtype"),
    [(25, ml_dtypes.uint2), (26, ml_dtypes.int2), (27, ml_dtypes.float6_e2m3fn)],
    ids=["UINT2", "INT2", "FLOAT6E2M3"],
)
def test_public_round_trips_on_the_chunked_path(data_type: int, dtype: Any) -> None:
    bits = ko.data_type_info(data_type).bits or 0
    for count in (0, 1, 15, 16, 17, 33, 64, 65, 131):
        v = values(count, bits, seed=count)
        raw = bytes(ko.encode_raw(v.view(dtype)))
        assert raw == ref_pack(v, bits).tobytes()
        assert ko.decode_raw(data_type, raw, (count,)).view(np.uint8).tobytes() == v.tobytes()


# -- the compiled kernels against the numpy ones, in one process --------------------------------

Outcome = tuple[Any, ...]


def outcome(call: Callable[[], object]) -> Outcome:
    """What a call produced: its bytes (and dtype and shape), its value, or its
    error's kind, index, found value and message."""
    try:
        result = call()
    except KilnError as exc:
        return ("error", exc.kind, exc.index, exc.found, str(exc))
    if isinstance(result, np.ndarray):
        return ("array", result.dtype.str, result.shape, result.view(np.uint8).tobytes())
    if isinstance(result, memoryview):
        return ("bytes", bytes(result))
    return ("value", result)


def both(monkeypatch: pytest.MonkeyPatch, call: Callable[[], object]) -> Outcome:
    """``call``'s outcome with the compiled kernels; asserts numpy's is the same."""
    with monkeypatch.context() as m:
        m.setattr(_backend, "COMPILED", True)
        fast = outcome(call)
        m.setattr(_backend, "COMPILED", False)
        slow = outcome(call)
    assert fast == slow
    return fast


def unpacked(bits: int, src: np.ndarray, count: int) -> np.ndarray:
    out = np.full(count, 0xA5, np.uint8)
    KERNELS[bits][0](src, out, count)
    return out


def packed(bits: int, v: np.ndarray) -> bytes:
    out = np.full(-(-v.size * bits // 8), 0xA5, np.uint8)
    KERNELS[bits][1](v, out)
    return out.tobytes()


def encoded(bits: int, v: np.ndarray) -> memoryview:
    """``v`` through the public encoder, which checks for bits above the element."""
    return ko.encode_raw(v.view(ml_dtypes.uint2 if bits == 2 else ml_dtypes.float6_e2m3fn))


# Every byte value in every position of a byte (2-bit) or of a 3-byte group (6-bit):
# byte i of the stream is i % 256, and gcd(3, 256) == 1.
EVERY_BYTE = {2: np.arange(256, dtype=np.uint8), 6: (np.arange(768) % 256).astype(np.uint8)}
LONG = GIL_FREE_BYTES + 6  # past the GIL release, the vector loops, a partial group


@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("cut", [0, 1, 2, 3], ids=lambda k: f"count-{k}")
def test_unpack_every_byte_value_at_every_count_mod_4(
    monkeypatch: pytest.MonkeyPatch, bits: int, cut: int
) -> None:
    count = EVERY_BYTE[bits].size * 8 // bits - cut
    src = EVERY_BYTE[bits][: -(-count * bits // 8)].copy()
    if count * bits % 8:
        src[-1] &= (1 << count * bits % 8) - 1  # padding bits 0, as the caller checks
    got = both(monkeypatch, lambda: unpacked(bits, src, count))
    assert got[3] == ref_unpack(src, count, bits).tobytes()


@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("position", [0, 1, 2, 3, LONG // 2, LONG - 3, LONG - 2, LONG - 1])
def test_every_byte_value_in_every_position(
    monkeypatch: pytest.MonkeyPatch, bits: int, position: int
) -> None:
    # Values of the element pack as the reference does; any other byte is the
    # encoders' TYPE error, at its index, the same on both kernels.
    base = values(LONG, bits)
    for value in range(256):
        v = base.copy()
        v[position] = value
        if value >> bits:
            got = both(monkeypatch, partial(encoded, bits, v))
            assert got[:4] == ("error", "TYPE", position, value)
        else:
            got = both(monkeypatch, partial(packed, bits, v))
            assert got == ("value", ref_pack(v, bits).tobytes())


@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, LONG - 1, LONG, 2 * LONG + 1])
@pytest.mark.parametrize("bad", ["first", "middle", "last"])
def test_the_first_bad_value_gives_the_same_error(
    monkeypatch: pytest.MonkeyPatch, bits: int, count: int, bad: str
) -> None:
    v = values(count, bits)
    at = {"first": 0, "middle": count // 2, "last": count - 1}[bad]
    v[at] = 0x80 | at % 0x7F
    v[-1] |= 0xC0  # a later bad value never wins
    got = both(monkeypatch, partial(encoded, bits, v))
    assert got[:4] == ("error", "TYPE", at, int(v[at]))
    row = ko.data_type_info(25 if bits == 2 else 27)
    code = row.kiln_code
    assert code is not None
    kiln = both(monkeypatch, lambda: ko.from_kiln(code, v, (count,), row.layout))
    assert kiln[:4] == got[:4]


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("count", range(0, 90, 7))
def test_tiny_thread_ranges_agree(
    monkeypatch: pytest.MonkeyPatch, threads: int, bits: int, count: int
) -> None:
    v = values(count, bits, seed=count)
    got = both(monkeypatch, lambda: packed(bits, v))
    assert got == ("value", ref_pack(v, bits).tobytes())
    src = np.frombuffer(got[1], np.uint8)
    assert both(monkeypatch, lambda: unpacked(bits, src, count))[3] == v.tobytes()
    if count:
        v[count // 3] = 0x40
        v[-1] = 0xFF
        assert both(monkeypatch, lambda: encoded(bits, v))[:3] == ("error", "TYPE", count // 3)


@pytest.mark.parametrize("bits", [2, 6])
def test_real_compiled_thread_ranges(monkeypatch: pytest.MonkeyPatch, bits: int) -> None:
    count = 4 * (_pool.COMPILED_THREAD_MIN_LANES + _pool.COMPILED_GRANULE) + 3
    v = values(count, bits)
    for k in (1, 2, 3):
        monkeypatch.setattr(_pool, "_threads", lambda k=k: k)
        got = both(monkeypatch, partial(packed, bits, v))
        src = np.frombuffer(got[1], np.uint8)
        assert both(monkeypatch, partial(unpacked, bits, src, count))[3] == v.tobytes(), k
    v[count - 6] = 0xF0  # in the last thread's range
    assert both(monkeypatch, partial(encoded, bits, v))[:3] == ("error", "TYPE", count - 6)


@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("shift", [1, 3, 7])
def test_misaligned_buffers(monkeypatch: pytest.MonkeyPatch, bits: int, shift: int) -> None:
    count = LONG + 1
    v = np.empty(count + shift, np.uint8)[shift:]
    v[:] = values(count, bits)
    out = np.empty(-(-count * bits // 8) + shift, np.uint8)[shift:]

    def pack() -> bytes:
        KERNELS[bits][1](v, out)
        return out.tobytes()

    assert both(monkeypatch, pack) == ("value", ref_pack(v, bits).tobytes())
    src = np.empty(out.size + shift, np.uint8)[shift:]
    src[:] = out
    dst = np.empty(count + shift, np.uint8)[shift:]

    def unpack() -> bytes:
        KERNELS[bits][0](src, dst, count)
        return dst.tobytes()

    assert both(monkeypatch, unpack) == ("value", v.tobytes())


@pytest.mark.parametrize(
    ("data_type", "dtype"),
    [(26, ml_dtypes.int2), (28, ml_dtypes.float6_e3m2fn)],
    ids=["INT2", "FLOAT6E3M2"],
)
def test_non_contiguous_and_big_endian_inputs(
    monkeypatch: pytest.MonkeyPatch, data_type: int, dtype: Any
) -> None:
    bits = ko.data_type_info(data_type).bits or 0
    grid = values(2 * LONG + 4, bits).reshape(2, -1)  # an even number of packed bytes
    for arr in (grid[:, ::3], grid.T, grid[::-1]):  # strided, Fortran order, reversed
        got = both(monkeypatch, partial(ko.encode_raw, arr.view(dtype)))
        assert got == ("bytes", ref_pack(np.ascontiguousarray(arr).reshape(-1), bits).tobytes())
    raw = ref_pack(grid.reshape(-1), bits)
    wide = raw.view(">u2")  # the bytes are what count, whatever the dtype says
    got = both(monkeypatch, lambda: ko.decode_raw(data_type, wide, (grid.size,)))
    assert got[3] == grid.tobytes()
    strided = memoryview(np.repeat(raw, 2).tobytes())[::2]
    assert both(monkeypatch, lambda: ko.decode_raw(data_type, strided, (grid.size,)))[1] == "TYPE"


def test_the_sub_byte_kernels_refuse_bad_calls() -> None:
    src = np.zeros(3, np.uint8)
    dst = np.full(16, 0xA5, np.uint8)
    for kernel in (_kernels.unpack2, _kernels.unpack6, _kernels.pack2, _kernels.pack6):
        for lo, hi in ((2, 4), (-4, 4), (4, 0), (1, 1)):
            with pytest.raises(ValueError, match=rf"bad range \[{lo}, {hi}\)"):
                kernel(src, dst, lo, hi)
        with pytest.raises(TypeError, match="4 arguments"):
            kernel(src, dst, 0)  # type: ignore[call-arg]
        with pytest.raises(ValueError, match="read-only"):
            kernel(src, np.frombuffer(bytes(16), np.uint8), 0, 0)
        with pytest.raises(ValueError, match="contiguous"):
            kernel(src, np.zeros(32, np.uint8)[::2], 0, 0)
    with pytest.raises(ValueError, match="src holds 3 bytes, the range needs 4"):
        _kernels.unpack2(src, dst, 0, 13)  # ceil(13 / 4)
    with pytest.raises(ValueError, match="src holds 3 bytes, the range needs 4"):
        _kernels.unpack6(src, dst, 0, 5)  # ceil(30 / 8)
    with pytest.raises(ValueError, match="dst holds 16 bytes, the range needs 17"):
        _kernels.unpack2(np.zeros(5, np.uint8), dst, 0, 17)
    with pytest.raises(ValueError, match="src holds 16 bytes, the range needs 17"):
        _kernels.pack2(dst, src, 0, 17)
    with pytest.raises(ValueError, match="dst holds 3 bytes, the range needs 4"):
        _kernels.pack6(np.zeros(5, np.uint8), src, 0, 5)
    with pytest.raises(ValueError, match="dst holds 3 bytes, the range needs 4"):
        _kernels.pack2(np.zeros(13, np.uint8), src, 0, 13)
    assert dst.tobytes() == b"\xa5" * 16  # nothing written by a refused call
    assert src.tobytes() == bytes(3)


def test_a_range_writes_only_its_own_bytes() -> None:
    # The thread pool's ranges write disjoint parts of one output: a range must
    # neither read nor write outside its own groups.
    v = values(27, 6)
    out = np.full(21, 0xA5, np.uint8)
    _kernels.pack6(v, out, 8, 16)
    assert out[:6].tobytes() == b"\xa5" * 6
    assert out[12:].tobytes() == b"\xa5" * 9
    assert out[6:12].tobytes() == ref_pack(v, 6)[6:12].tobytes()
    dst = np.full(27, 0xA5, np.uint8)
    _kernels.unpack2(ref_pack(v & 3, 2), dst, 12, 27)
    assert dst[:12].tobytes() == b"\xa5" * 12
    assert dst[12:].tobytes() == (v[12:] & 3).tobytes()
