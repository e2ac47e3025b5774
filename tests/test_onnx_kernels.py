"""The ONNX 2- and 6-bit kernels: bit-exact at every chunk and thread boundary.

Mirrors tests/test_nibbles.py: the kernels of ``kiln_np.onnx._subbyte`` are
checked against a bit-by-bit numpy reference, at the lengths where their
paths change with the real constants, and with tiny constants (monkeypatched
in ``kiln_np._nibbles``, whose chunk size and thread pool they share) so that
every offset around a chunk and a thread range is reached with small arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kiln_np import _nibbles
from kiln_np import onnx as ko
from kiln_np.onnx import _subbyte

Unpack = Callable[[np.ndarray, np.ndarray, int], None]
Pack = Callable[[np.ndarray, np.ndarray], None]
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


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 4 lanes (16 elements), threads from 8 lanes."""
    monkeypatch.setattr(_nibbles, "CHUNK_LANES", 4)
    monkeypatch.setattr(_nibbles, "THREAD_MIN_LANES", 8)


@pytest.fixture(params=[1, 2, 3, 5], ids=lambda k: f"{k}threads")
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    k: int = request.param
    monkeypatch.setattr(_nibbles, "_threads", lambda: k)
    return k


# -- the reference itself, on the seed's vectors ------------------------------------------


def test_reference_matches_the_seed_layouts() -> None:
    # 2-bit: x0 | x1<<2 | x2<<4 | x3<<6; 6-bit: four elements in three bytes.
    assert ref_pack(np.array([0, 1, 2, 3], np.uint8), 2).tolist() == [0xE4]
    assert ref_pack(np.array([1, 2, 3, 63], np.uint8), 6).tolist() == [0x81, 0x30, 0xFC]
    assert ref_unpack(np.array([0x41, 0x00], np.uint8), 2, 6).tolist() == [1, 1]


# -- every value ---------------------------------------------------------------------------


@pytest.mark.usefixtures("tiny")
def test_every_2bit_byte_through_the_chunked_path(threads: int) -> None:
    packed = np.arange(256, dtype=np.uint8)
    out = np.empty(1024, np.uint8)
    _subbyte.unpack2_into(packed, out, 1024)
    assert out.tobytes() == ref_unpack(packed, 1024, 2).tobytes()
    back = np.empty(256, np.uint8)
    _subbyte.pack2_into(out, back)
    assert back.tobytes() == packed.tobytes()


@pytest.mark.usefixtures("tiny")
def test_every_6bit_value_in_every_position(threads: int) -> None:
    v = np.concatenate([np.roll(np.arange(64, dtype=np.uint8), k) for k in range(4)])
    packed = np.empty(192, np.uint8)
    _subbyte.pack6_into(v, packed)
    assert packed.tobytes() == ref_pack(v, 6).tobytes()
    out = np.empty(256, np.uint8)
    _subbyte.unpack6_into(packed, out, 256)
    assert out.tobytes() == v.tobytes()


# -- chunk and thread boundaries -------------------------------------------------------------


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("count", range(0, 140, 1))
def test_tiny_constants_every_length(bits: int, count: int, threads: int) -> None:
    round_trip(count, bits, seed=count)


def _boundary_counts() -> list[int]:
    lanes = {_nibbles.CHUNK_LANES, _nibbles.THREAD_MIN_LANES, 2 * _nibbles.CHUNK_LANES}
    lanes |= {_nibbles.THREAD_MIN_LANES + _nibbles.CHUNK_LANES}
    return sorted({4 * n + d for n in lanes for d in (-5, -4, -1, 0, 1, 3, 4, 5)})


@pytest.mark.parametrize("bits", [2, 6])
@pytest.mark.parametrize("count", _boundary_counts())
def test_real_constants_at_each_boundary(bits: int, count: int) -> None:
    round_trip(count, bits, seed=count)


@pytest.mark.parametrize("bits", [2, 6])
def test_results_do_not_depend_on_the_thread_count(
    bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 4 * (2 * _nibbles.THREAD_MIN_LANES + _nibbles.CHUNK_LANES) + 3
    v = values(count, bits)
    expected = ref_pack(v, bits)
    unpack, pack = KERNELS[bits]
    for k in (1, 2, 3):
        monkeypatch.setattr(_nibbles, "_threads", lambda k=k: k)
        packed = np.empty(expected.size, np.uint8)
        pack(v, packed)
        assert packed.tobytes() == expected.tobytes(), k
        out = np.empty(count, np.uint8)
        unpack(packed, out, count)
        assert out.tobytes() == v.tobytes(), k


# -- through the public functions --------------------------------------------------------------


@pytest.mark.usefixtures("tiny")
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
