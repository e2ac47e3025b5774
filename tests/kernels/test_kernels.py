"""The compiled kernels (kiln_np._kernels.native) against the numpy kernels, bit for bit.

The numpy kernels are the reference.  Every test runs the same public call
twice in one process, once with the compiled kernels and once with numpy
(``_backend.COMPILED`` switched by monkeypatch), and compares the bytes, or the
error's kind, index and value.  Both runs use the same thread ranges; the
boundaries hit are the C loops' blocks (4096 lanes for pack, 4096 bytes for
the byte checks), the GIL-release size, the thread granule and the numpy chunk.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shlex
import subprocess
import sysconfig
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError, mx
from kiln_np._kernels import backend as _backend
from kiln_np._kernels import block_scaled as _block_scaled
from kiln_np._kernels import native as _kernels
from kiln_np._kernels import nibbles as _nibbles
from kiln_np._kernels import pool as _pool

BLOCK = 4096  # the C loops' block, in lanes (pack) and in bytes (first_above)
Outcome = tuple[Any, ...]  # ("array", dtype, shape, bytes), ("error", kind, index, ...)


def outcome(call: Callable[[], object]) -> Outcome:
    """What a call produced, comparable across the two kernels: its bytes, or
    its error's kind, index, found value and message."""
    try:
        result = call()
    except KilnError as exc:
        return ("error", exc.kind, exc.index, exc.found, str(exc))
    if isinstance(result, kiln_np.Payload):
        return ("payload", bytes(result.data), result.shape)
    if isinstance(result, np.ndarray):
        return ("array", result.dtype.str, result.shape, result.view(np.uint8).tobytes())
    return ("value", result)


def both(monkeypatch: pytest.MonkeyPatch, call: Callable[[], object]) -> Outcome:
    """``call``'s outcome with the compiled kernels; asserts numpy's is the same."""
    monkeypatch.setattr(_backend, "COMPILED", True)
    fast = outcome(call)
    monkeypatch.setattr(_backend, "COMPILED", False)
    slow = outcome(call)
    monkeypatch.undo()
    assert fast == slow
    return fast


def nibbles(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 16, count, dtype=np.uint8)


def test_the_default_install_built_the_compiled_kernels() -> None:
    # CI installs with pip on a machine with gcc: the fast path must be there,
    # and KILN_NP_PURE is the only way to turn it off.
    pure = os.environ.get("KILN_NP_PURE", "").strip() not in ("", "0")
    assert kiln_np.kernel_backend() == ("numpy" if pure else "compiled")
    assert _backend.COMPILED is not pure
    assert kiln_np.kernel_backend.__module__ == "kiln_np"


# -- every byte value ---------------------------------------------------------------------


@pytest.mark.parametrize("count", [511, 512])
def test_unpack_every_byte_value(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    packed = np.arange(256, dtype=np.uint8)
    packed[-1] &= 0x0F if count % 2 else 0xFF
    got = both(monkeypatch, lambda: kiln_np.unpack_nibbles(packed, count))
    assert got[3] == bytes(v for b in packed.tolist() for v in (b & 15, b >> 4))[:count]


def test_pack_every_pair_of_nibbles(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = np.stack(np.meshgrid(np.arange(16), np.arange(16)), -1).astype(np.uint8)
    got = both(monkeypatch, lambda: kiln_np.pack_nibbles(pairs))
    assert got[3] == bytes(lo | hi << 4 for hi in range(16) for lo in range(16))


@pytest.mark.parametrize("position", [0, 1, 2 * BLOCK - 1, 2 * BLOCK, 2 * BLOCK + 1])
def test_every_byte_value_in_pack_and_the_checks(
    monkeypatch: pytest.MonkeyPatch, position: int
) -> None:
    base = nibbles(4 * BLOCK + 3)
    for value in range(256):
        values = base.copy()
        values[position] = value
        expected = position if value > 15 else -1
        assert both(monkeypatch, partial(_nibbles.first_above, values, 15)) == ("value", expected)
        flags = (values > 7).astype(np.uint8)
        flags[position] = value
        bad = position if value > 1 else -1
        assert both(monkeypatch, partial(_nibbles.first_above, flags, 1)) == ("value", bad)
        packed = both(monkeypatch, partial(kiln_np.pack_nibbles, values))
        assert (packed[2] if expected >= 0 else -1) == expected


# -- odd counts and every block boundary -----------------------------------------------------


def _counts() -> list[int]:
    around = [2 * BLOCK, 4 * BLOCK, 16384, 2 * 16384, 2 * _pool.COMPILED_GRANULE]
    return sorted(set(range(70)) | {n + d for n in around for d in range(-3, 4)})


@pytest.mark.parametrize("count", _counts())
def test_round_trip_at_every_length(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    values = nibbles(count, seed=count)
    packed = both(monkeypatch, lambda: kiln_np.pack_nibbles(values))
    raw = np.frombuffer(packed[3], np.uint8)
    assert both(monkeypatch, lambda: kiln_np.unpack_nibbles(raw, count))[3] == values.tobytes()


@pytest.mark.parametrize("count", [1, 2, 3, 2 * BLOCK + 1, 4 * BLOCK + 1])
@pytest.mark.parametrize("bad", ["first", "middle", "last"])
def test_the_first_bad_value_is_the_same(
    monkeypatch: pytest.MonkeyPatch, count: int, bad: str
) -> None:
    values = nibbles(count)
    at = {"first": 0, "middle": count // 2, "last": count - 1}[bad]
    values[at] = 0x10 | at % 0xEF
    values[-1] |= 0x20  # a later bad value never wins
    got = both(monkeypatch, lambda: kiln_np.pack_nibbles(values))
    assert got[:3] == ("error", "TYPE", at)
    out = bytearray(b"\xa5" * ((count + 1) // 2))
    assert both(monkeypatch, lambda: kiln_np.pack_nibbles(values, out=out))[:3] == got[:3]
    assert out == b"\xa5" * len(out)


# -- chunk and thread boundaries ---------------------------------------------------------------


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("count", range(0, 90, 7))
def test_tiny_thread_ranges(monkeypatch: pytest.MonkeyPatch, threads: int, count: int) -> None:
    values = nibbles(count, seed=count)
    packed = both(monkeypatch, lambda: kiln_np.pack_nibbles(values))
    raw = np.frombuffer(packed[3], np.uint8)
    assert both(monkeypatch, lambda: kiln_np.unpack_nibbles(raw, count))[3] == values.tobytes()
    if count:
        values[count // 3] = 0x40
        values[-1] = 0x50
        assert both(monkeypatch, lambda: kiln_np.pack_nibbles(values))[2] == count // 3
        flags = np.ones(count, np.uint8)
        flags[count // 2 :] = 9
        assert both(monkeypatch, lambda: _nibbles.first_above(flags, 1)) == ("value", count // 2)


def test_real_thread_ranges(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    count = 2 * (_pool.COMPILED_THREAD_MIN_LANES + _pool.COMPILED_GRANULE) + 1
    values = nibbles(count)
    packed = both(monkeypatch, lambda: kiln_np.pack_nibbles(values))
    raw = np.frombuffer(packed[3], np.uint8)
    assert both(monkeypatch, lambda: kiln_np.unpack_nibbles(raw, count))[3] == values.tobytes()
    values[count - 5] = 0x33  # in the last thread's range
    assert both(monkeypatch, lambda: kiln_np.pack_nibbles(values))[2] == count - 5
    flags = (values & 1).astype(np.bool_)
    flags.view(np.uint8)[count - 2] = 2
    got = both(monkeypatch, lambda: kiln_np.from_numpy(flags))
    assert got[:3] == ("error", "TYPE", count - 2)


# -- misaligned, overlapping and big-endian buffers ---------------------------------------------


@pytest.mark.parametrize("shift", [1, 3, 7])
def test_misaligned_buffers(monkeypatch: pytest.MonkeyPatch, shift: int) -> None:
    count = 2 * BLOCK + 5
    values = np.empty(count + shift, np.uint8)[shift:]
    values[:] = nibbles(count)
    out = np.empty((count + 1) // 2 + shift, np.uint8)[shift:]
    packed = both(monkeypatch, lambda: kiln_np.pack_nibbles(values, out=out))
    src = np.empty(out.size + shift, np.uint8)[shift:]
    src[:] = out
    dst = np.empty(count + shift, np.uint8)[shift:]
    got = both(monkeypatch, lambda: kiln_np.unpack_nibbles(src, count, out=dst))
    assert got[3] == values.tobytes()
    assert packed[3] == src.tobytes()


@pytest.mark.parametrize("count", [61, 2 * BLOCK + 3])
def test_overlapping_buffers(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    values = nibbles(count)
    packed = kiln_np.pack_nibbles(values).tobytes()

    def expand_and_shrink() -> np.ndarray:
        work = np.zeros(count, np.uint8)
        work[: len(packed)] = np.frombuffer(packed, np.uint8)
        kiln_np.unpack_nibbles(work[: len(packed)], count, out=work)  # in place
        assert work.tobytes() == values.tobytes()
        kiln_np.pack_nibbles(work, out=work[1 : len(packed) + 1])  # shifted by one
        return work

    got = both(monkeypatch, expand_and_shrink)
    assert got[3][1 : len(packed) + 1] == packed


def test_big_endian_views(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = np.random.default_rng(1).integers(0, 256, 2 * BLOCK, dtype=np.uint8)
    wide = raw.view(">u2")  # the bytes are what count, whatever the dtype says
    got = both(monkeypatch, lambda: kiln_np.unpack_nibbles(wide, raw.size * 2))
    assert got[3] == kiln_np.unpack_nibbles(raw.tobytes(), raw.size * 2).tobytes()
    values = nibbles(2 * BLOCK + 1).astype(">u2")  # integers by value, any byte order
    assert (
        both(monkeypatch, lambda: kiln_np.pack_nibbles(values))[3]
        == kiln_np.pack_nibbles(values.astype(np.uint8)).tobytes()
    )
    values[BLOCK] = 0x100
    assert both(monkeypatch, lambda: kiln_np.pack_nibbles(values))[:3] == ("error", "TYPE", BLOCK)


@pytest.mark.parametrize("source", ["array", "bytes"])
@pytest.mark.parametrize("shape", [(), (1,), (3, 5), (2, 1, 7)], ids=str)
def test_unpack_into_a_destination_of_any_shape(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], source: str
) -> None:
    count = int(np.prod(shape))
    values = nibbles(count)
    packed = kiln_np.pack_nibbles(values)
    src = packed.tobytes() if source == "bytes" else packed

    def unpack() -> np.ndarray:
        out = np.empty(shape, np.uint8)
        _nibbles.check_padding(src, count)
        _nibbles.unpack_into(src, out, count)
        return out

    assert both(monkeypatch, unpack)[2:] == (shape, values.tobytes())
    if count % 2:
        bad = bytes(src[:-1]) + bytes([src[-1] | 0x30])
        got = both(monkeypatch, lambda: _nibbles.check_padding(bad, count))
        assert got[:4] == ("error", "TYPE", count, bad[-1])


# -- through the codec -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn])
def test_codec_round_trips_agree(monkeypatch: pytest.MonkeyPatch, dtype: type) -> None:
    count = 2 * BLOCK + 1
    values: np.ndarray = nibbles(count).view(dtype)
    payload = both(monkeypatch, lambda: kiln_np.from_numpy(values))
    code = int(kiln_np.code_for_dtype(np.dtype(dtype)))
    decoded = both(monkeypatch, lambda: kiln_np.to_numpy(code, payload[1], (count,)))
    assert decoded[3] == values.view(np.uint8).tobytes()
    bad = bytearray(payload[1])
    bad[-1] |= 0x10  # the padding nibble of an odd count
    assert both(monkeypatch, lambda: kiln_np.to_numpy(code, bytes(bad), (count,)))[:2] == (
        "error",
        "TYPE",
    )


def test_bool_check_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = np.random.default_rng(2).integers(0, 2, 3 * BLOCK, dtype=np.uint8)
    assert both(monkeypatch, lambda: kiln_np.to_numpy(7, flags, (flags.size,)))[0] == "array"
    for at in (0, BLOCK - 1, BLOCK, flags.size - 1):
        bad = flags.copy()
        bad[at] = 0x80
        bad[-1] = 3 if at < flags.size - 1 else 0x80
        got = both(monkeypatch, partial(kiln_np.to_numpy, 7, bad, (bad.size,)))
        assert got[:4] == ("error", "TYPE", at, 0x80)


# -- the extension's own guards ---------------------------------------------------------------


def test_the_extension_refuses_bad_calls() -> None:
    src = np.zeros(8, np.uint8)
    dst = np.full(16, 0xA5, np.uint8)
    with pytest.raises(ValueError, match="range"):
        _kernels.unpack(src, dst, 1, 4)  # a range starts on a byte
    with pytest.raises(ValueError, match="range"):
        _kernels.pack(dst, src, 4, 2)
    with pytest.raises(ValueError, match="src holds 8 bytes"):
        _kernels.unpack(src, dst, 0, 17)
    with pytest.raises(ValueError, match="dst holds 16 bytes"):
        _kernels.unpack(np.zeros(9, np.uint8), dst, 0, 17)
    with pytest.raises(ValueError, match="holds 8 bytes"):
        _kernels.first_above(src, 1, 0, 9)
    with pytest.raises(ValueError, match="limit"):
        _kernels.first_above(src, 2, 0, 8)
    with pytest.raises(TypeError, match="4 arguments"):
        _kernels.pack(src, dst, 0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="read-only"):
        _kernels.unpack(src, np.frombuffer(bytes(16), np.uint8), 0, 16)
    with pytest.raises(ValueError, match="contiguous"):
        _kernels.unpack(src, np.zeros(32, np.uint8)[::2], 0, 16)
    assert dst.tobytes() == b"\xa5" * 16


# -- MXFP4 dequantize (for kiln_np.mx) ----------------------------------------------------------

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def same_float_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one-per-byte"])
def test_mxfp4_every_code_and_scale_against_the_definition(
    monkeypatch: pytest.MonkeyPatch, packed: bool, threads: int
) -> None:
    monkeypatch.setattr(_backend, "COMPILED", True)  # also under KILN_NP_PURE=1
    monkeypatch.setattr(_pool, "COMPILED_THREAD_MIN_LANES", 16)
    monkeypatch.setattr(_pool, "COMPILED_GRANULE", 4)
    block = 32
    scales = np.repeat(np.arange(256, dtype=np.uint8), 3)  # 3 blocks per scale byte
    codes = np.random.default_rng(3).integers(0, 16, scales.size * block, dtype=np.uint8)
    codes[: 16 * 256] = np.tile(np.arange(16, dtype=np.uint8), 256)  # every code, every scale
    values = kiln_np.pack_nibbles(codes) if packed else codes
    out = np.full(codes.size, 7.0, np.float32)
    assert _block_scaled.mxfp4_to_float32_into(values, scales, out, block, packed=packed)
    exact = E2M1[codes] * np.ldexp(1.0, np.repeat(scales.astype(int) - 127, block))
    with np.errstate(over="ignore"):
        fits = exact.astype(np.float32).astype(np.float64) == exact
    nan_block = np.repeat(scales == 0xFF, block)
    assert same_float_bits(out[fits & ~nan_block], exact[fits & ~nan_block].astype(np.float32))
    assert (out[nan_block].view(np.uint32) == 0x7FC00000).all()  # canonical quiet NaN
    monkeypatch.setattr(_backend, "COMPILED", False)
    assert not _block_scaled.mxfp4_to_float32_into(values, scales, out, block, packed=packed)


def test_mxfp4_kernel_refuses_bad_calls() -> None:
    scales = np.zeros(2, np.uint8)
    out = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="block size"):
        _kernels.mxfp4_to_float32(np.zeros(32, np.uint8), scales, out, 31, 1, 0, 2)
    with pytest.raises(ValueError, match="values holds 31 bytes"):
        _kernels.mxfp4_to_float32(np.zeros(31, np.uint8), scales, out, 32, 1, 0, 2)
    with pytest.raises(ValueError, match="out holds 252 bytes"):
        _kernels.mxfp4_to_float32(np.zeros(32, np.uint8), scales, out[1:], 32, 1, 0, 2)


# -- GGUF MXFP4 / NVFP4 repacking (for kiln_np.mx) ---------------------------------------------

GGML = {  # layout name: (code, block bytes, scale bytes)
    "ggml.mxfp4": (0x4727, 17, 1),
    "ggml.nvfp4": (0x4728, 36, 4),
}


def ggml_blocks(name: str, count: int, seed: int = 0) -> np.ndarray:
    """``count`` blocks whose bytes take every value in every position (a shifted
    ramp), then random."""
    size = GGML[name][1]
    ramp = (np.arange(count)[:, None] * 7 + np.arange(size)) % 256
    noise = np.random.default_rng(seed).integers(0, 256, (count, size))
    return np.where(np.arange(count)[:, None] < 256, ramp, noise).astype(np.uint8)


def ggml_payload(name: str, blocks: np.ndarray) -> kiln_np.Payload:
    code, size, _ = GGML[name]
    return kiln_np.Payload(
        code, memoryview(blocks.tobytes()), (blocks.shape[0],), kiln_np.Layout(name, size)
    )


def repacked(name: str, payload: kiln_np.Payload) -> tuple[bytes, bytes, bytes]:
    """from_ggml's two payloads, then to_ggml of them, as bytes."""
    values, scales = mx.from_ggml(payload)
    back = mx.to_ggml(values, scales, layout=name)
    return bytes(values.data), bytes(scales.data), bytes(back.data)


@pytest.mark.parametrize("name", sorted(GGML))
@pytest.mark.parametrize("count", [0, 1, 2, 3, 257, 1001])
def test_repack_agrees_with_numpy(
    monkeypatch: pytest.MonkeyPatch, tiny: None, threads: int, name: str, count: int
) -> None:
    blocks = ggml_blocks(name, count)
    got = both(monkeypatch, lambda: repacked(name, ggml_payload(name, blocks)))
    assert got[0] == "value"
    assert got[1][2] == blocks.tobytes()  # a bit move both ways


@pytest.mark.parametrize("name", sorted(GGML))
def test_repack_real_thread_ranges(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # Just over the compiled threading threshold, on the real granule: the ranges'
    # block boundaries fall inside blocks of lanes.
    body = GGML[name][1] - GGML[name][2]
    count = (_pool.COMPILED_THREAD_MIN_LANES + 3 * _pool.COMPILED_GRANULE) // body + 1
    monkeypatch.setattr(_pool, "_threads", lambda: 3)
    blocks = ggml_blocks(name, count, seed=5)
    got = both(monkeypatch, lambda: repacked(name, ggml_payload(name, blocks)))
    assert got[1][2] == blocks.tobytes()


@pytest.mark.parametrize("name", sorted(GGML))
def test_repack_misaligned_and_strided_inputs(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    blocks = ggml_blocks(name, 40, seed=2)
    size = GGML[name][1]
    backing = bytearray(1) + blocks.tobytes()  # the payload starts one byte into its buffer
    payload = kiln_np.Payload(
        GGML[name][0], memoryview(backing)[1:], (40,), kiln_np.Layout(name, size)
    )
    values, scales = mx.from_ggml(payload)
    v = kiln_np.to_numpy(*values)
    wide = np.zeros((2, *v.shape), v.dtype)
    wide[0] = v  # every other row of wide: a values array that is a strided view
    s = kiln_np.to_numpy(*scales)
    odd = np.zeros(s.nbytes + 1, np.uint8)
    odd[1:] = s.view(np.uint8).reshape(-1)  # scales one byte into their buffer
    s_odd = odd[1:].view(s.dtype).reshape(s.shape)
    got = both(monkeypatch, lambda: mx.to_ggml(wide[::2][0], s_odd, layout=name))
    assert got == ("payload", blocks.tobytes(), (40,))


def test_repack_kernel_refuses_bad_calls() -> None:
    ggml = np.zeros(34, np.uint8)
    values = np.full(32, 0xA5, np.uint8)
    scales = np.full(2, 0xA5, np.uint8)
    with pytest.raises(ValueError, match="block_bytes must be 17"):
        _kernels.repack(ggml, values, scales, 18, 1, 0, 2)
    with pytest.raises(ValueError, match="range"):
        _kernels.repack(ggml, values, scales, 17, 1, 2, 1)
    with pytest.raises(ValueError, match="ggml holds 34 bytes"):
        _kernels.repack(ggml, values, scales, 17, 1, 0, 3)
    with pytest.raises(ValueError, match="values holds 31 bytes"):
        _kernels.repack(ggml, values[1:], scales, 17, 1, 0, 2)
    with pytest.raises(ValueError, match="scales holds 1 bytes"):
        _kernels.repack(ggml, values, scales[1:], 17, 1, 0, 2)
    with pytest.raises(ValueError, match="read-only"):
        _kernels.repack(ggml, values, np.frombuffer(bytes(2), np.uint8), 17, 1, 0, 2)
    with pytest.raises(ValueError, match="read-only"):
        _kernels.repack(np.frombuffer(bytes(34), np.uint8), values, scales, 17, 0, 0, 2)
    with pytest.raises(ValueError, match="range"):
        _kernels.repack(ggml, values, scales, 36, 0, 0, 2**62)
    assert values.tobytes() == b"\xa5" * 32
    assert scales.tobytes() == b"\xa5" * 2
    _kernels.repack(np.frombuffer(bytes(34), np.uint8), values, scales, 17, 1, 0, 2)  # reads ggml
    assert values.tobytes() == bytes(32)
    assert scales.tobytes() == bytes(2)


def every_kernel(kernels: Any) -> list[bytes]:
    """What each function of a ``_kernels`` module writes and returns for fixed
    inputs: every byte value, odd counts, tails after the vector steps."""
    rng = np.random.default_rng(11)
    packed = np.concatenate([np.arange(256, dtype=np.uint8), rng.integers(0, 256, 4001, np.uint8)])
    nibbles = packed & 15
    out: list[bytes] = []
    for count in (2 * packed.size, 2 * packed.size - 1, 33):
        dst = np.zeros(count, np.uint8)
        kernels.unpack(packed, dst, 0, count)
        out.append(dst.tobytes())
    for src in (nibbles, packed):  # clean, then with bits above the nibble
        dst = np.zeros((src.size + 1) // 2, np.uint8)
        out += [str(kernels.pack(src, dst, 0, src.size)).encode(), dst.tobytes()]
    out += [str(kernels.first_above(packed, limit, 0, packed.size)).encode() for limit in (1, 15)]
    scales = np.concatenate([np.arange(256, dtype=np.uint8), rng.integers(0, 256, 40, np.uint8)])
    for block, flag in ((32, 1), (34, 1), (2, 1), (32, 0), (7, 0)):
        values = rng.integers(0, 256 if flag else 16, scales.size * block // (1 + flag), np.uint8)
        floats = np.zeros(scales.size * block, np.float32)
        kernels.mxfp4_to_float32(values, scales, floats, block, flag, 0, scales.size)
        out.append(floats.tobytes())
    for name, (_, size, header) in GGML.items():
        count = 301
        blocks = ggml_blocks(name, count).reshape(-1)
        values = np.zeros(count * (size - header), np.uint8)
        scales = np.zeros(count * header, np.uint8)
        kernels.repack(blocks, values, scales, size, 1, 0, count)
        back = np.zeros_like(blocks)
        kernels.repack(back, values, scales, size, 0, 0, count)
        out += [values.tobytes(), scales.tobytes(), back.tobytes()]
    for unpack, pack in (
        (kernels.unpack2, kernels.pack2),
        (kernels.unpack6, kernels.pack6),
    ):
        for count in (4 * packed.size // 3, 4 * packed.size // 3 - 1):
            dst = np.zeros(count, np.uint8)
            unpack(packed, dst, 0, count)
            repacked = np.zeros(packed.size, np.uint8)
            pack(dst, repacked, 0, count)
            out += [dst.tobytes(), repacked.tobytes()]
    # The GGML decoders on random blocks, the encoders on ggml's golden inputs.
    for type_id, elements, nbytes in kernels.ggml_types():
        blocks = rng.integers(0, 256, 97 * nbytes, np.uint8)
        floats = np.zeros(97 * elements, np.float32)
        kernels.ggml_to_float32(type_id, blocks, floats, 0, 97)
        bits = np.zeros(97 * elements, np.uint16)
        kernels.ggml_to_bfloat16(type_id, blocks, bits, 0, 97)
        out += [floats.tobytes(), bits.tobytes()]
    wide = rng.integers(0, 2**32, 4001, np.uint64).astype(np.uint32).view(np.float32)
    bits = np.zeros(wide.size, np.uint16)
    kernels.float32_to_bfloat16(wide, bits, 3, wide.size)  # a tail after the vector steps
    out.append(bits.tobytes())
    golden = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize.npz")
    x = np.ascontiguousarray(golden["input"]).reshape(-1)
    for type_id, elements, nbytes, plain, _ in kernels.ggml_quant_types():
        if not plain:  # quantized only with an importance matrix
            continue
        count = x.size // elements
        encoded = np.zeros(count * nbytes, np.uint8)
        out += [str(kernels.ggml_from_float32(type_id, x, encoded, 0, count)).encode()]
        out.append(encoded.tobytes())
    # The weighted encoders on the long golden rows, each with its importance weights.
    rows = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize_imatrix_rows.npz")
    for type_id, elements, nbytes, _, weighted in kernels.ggml_quant_types():
        for row, weights in zip(rows["input"], rows["weights"], strict=True) if weighted else ():
            count = row.size // elements
            encoded = np.zeros(count * nbytes, np.uint8)
            found = kernels.ggml_from_float32_weighted(type_id, row, weights, encoded, 0, count)
            out += [str(found).encode(), encoded.tobytes()]
    # The statistics kernel on every 16-bit pattern and on float32 bits, normal and random.
    halves = np.concatenate([np.arange(1 << 16, dtype=np.uint16), packed[:-1].view(np.uint16)])
    singles = np.concatenate(
        [rng.standard_normal(3 * 2048 + 37).astype(np.float32).view(np.uint32), x.view(np.uint32)]
    )
    for kind, src in ((0, singles), (1, halves), (2, halves)):
        for lo, hi in ((0, src.size), (5, src.size - 3), (1, 40), (src.size - 2100, src.size)):
            out.append(str(kernels.moments(kind, src, lo, hi)).encode())
    # The differences kernel: every pair of kinds, values near each other and far apart,
    # the 16-bit patterns (NaNs, infinities, zeros of both signs) against shifted ones.
    others = {0: np.roll(singles, 1) ^ 0x3, 1: np.roll(halves, 1) ^ 0x3, 2: np.roll(halves, 1)}
    mine = {0: singles, 1: halves, 2: halves}
    for ka in range(3):
        for kb in range(3):
            size = min(mine[ka].size, others[kb].size)
            for lo, hi in ((0, size), (5, size - 3), (1, 40)):
                result = kernels.differences(ka, mine[ka], kb, others[kb], lo, hi)
                out.append(str(result).encode())
    return out


@pytest.mark.parametrize(
    "define",
    [
        # What compilers without GNU C vector extensions (MSVC) build: the MXFP4
        # and repacking loops an element or a byte at a time.
        "KILN_NP_BYTEWISE",
        # The variant a CPU without AVX2 runs (the x86-64 baseline): this machine
        # picks the AVX2 clones, so without this build no test would run that code.
        "KILN_NP_BASELINE",
    ],
)
def test_the_other_builds_of_the_kernels_agree(tmp_path: Path, define: str) -> None:
    folder = Path(__file__).parents[2] / "src" / "kiln_np" / "_kernels"
    sources = [str(path) for path in sorted(folder.glob("*.c"))]
    target = tmp_path / f"native{sysconfig.get_config_var('EXT_SUFFIX')}"
    compiler = shlex.split(sysconfig.get_config_var("CC"))
    include = sysconfig.get_paths()["include"]
    flags = ["-O2", "-shared", "-fPIC", "-ffp-contract=off", f"-D{define}", f"-I{include}"]
    subprocess.run([*compiler, *flags, *sources, "-o", str(target)], check=True)
    spec = importlib.util.spec_from_file_location("native", target)
    assert spec is not None
    assert spec.loader is not None
    variant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(variant)
    assert variant.__file__ != _kernels.__file__
    expected = every_kernel(_kernels)
    got = every_kernel(variant)
    assert len(got) == len(expected)
    for index, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"output {index} differs"


# -- large outputs start on a huge page ------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((3,), np.uint8), ((0, 5), np.float32), ((1 << 25,), np.uint8), ((3, 1 << 22), np.float32)],
)
def test_empty_is_np_empty_aligned_when_large(shape: tuple[int, ...], dtype: type) -> None:
    out = _pool.empty(shape, dtype, math.prod(shape))
    assert out.shape == shape
    assert out.dtype == np.dtype(dtype)
    assert out.flags.c_contiguous
    assert out.flags.writeable
    large = out.nbytes >= _pool.ALIGNED_FROM
    assert (out.ctypes.data % _pool.HUGE_PAGE == 0) is large or out.nbytes == 0
    assert (out.base is not None) is large  # a view of a buffer at most 2 MiB longer
    if large:
        assert isinstance(out.base, np.ndarray)
        assert out.base.nbytes - out.nbytes == _pool.HUGE_PAGE


def test_large_decodes_start_on_a_huge_page() -> None:
    count = 2 * _pool.ALIGNED_FROM  # 32 MiB packed, 64 MiB decoded
    payload = bytes(count // 2)
    for got in (
        kiln_np.to_numpy(kiln_np.Code.U4, payload, (count,)),
        kiln_np.to_numpy(kiln_np.Code.U4, memoryview(payload), (2, count // 2)),
    ):
        assert got.ctypes.data % _pool.HUGE_PAGE == 0
        assert got.size == count
        assert not got.any()
