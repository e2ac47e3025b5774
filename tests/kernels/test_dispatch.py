"""Every row of the kernel table, compiled against its numpy twin, bit for bit.

Each row needs a sample here (``SAMPLES``: a row name, or a prefix before ``.``, to a
function giving the arguments and a reader of what the call produced), so a kernel
added without a twin or without a case fails ``test_every_row_has_a_twin_and_a_case``.
In the numpy build (``KILN_NP_PURE=1`` or no extension) the comparisons are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln_np
import kiln_np._explore.scaled
import kiln_np._kernels.differences
from kiln_np._kernels import backend
from kiln_np._kernels.dispatch import KERNELS, Kernel
from kiln_np._quants import decode as _decode
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

Case = tuple[tuple[Any, ...], Callable[[Any, tuple[Any, ...]], bytes]]
_STATE = {"rng": np.random.default_rng(34)}


def _rng() -> np.random.Generator:
    return _STATE["rng"]


def _bytes(*arrays: np.ndarray) -> bytes:
    return b"".join(np.ascontiguousarray(a).view(np.uint8).tobytes() for a in arrays)


def _out(index: int) -> Callable[[Any, tuple[Any, ...]], bytes]:
    """What the call wrote into argument ``index``, and what it returned."""
    return lambda result, args: _bytes(args[index]) + repr(result).encode()


def _returned(result: Any, args: tuple[Any, ...]) -> bytes:
    return _bytes(result) if isinstance(result, np.ndarray) else repr(result).encode()


def _u8(n: int, high: int = 256) -> np.ndarray:
    return _rng().integers(0, high, n, dtype=np.uint8)


def unpack() -> Case:
    return (_u8(2001), np.zeros(4001, np.uint8), 0, 4001), _out(1)


def pack() -> Case:
    # Valid values: before a bad one, how much is written differs (documented).
    return (_u8(4001, 16), np.zeros(2001, np.uint8), 0, 4001), _out(1)


def first_above() -> Case:
    src = _u8(5000, 2)
    src[4321] = 9
    return (src, 1, 0, 5000), _returned


def _sub(bits: int, packing: bool) -> Case:
    n = 1003
    size = -(-n * bits // 8)
    if packing:
        return (_u8(n, 1 << bits), np.zeros(size, np.uint8)), _out(1)
    src = _u8(size)
    src[-1] &= (1 << (n * bits % 8 or 8)) - 1
    return (src, np.zeros(n, np.uint8), n), _out(1)


def moments() -> Case:
    # Whole blocks of 2048 small integers: every sum and merge exact in either order.
    return (_rng().integers(-50, 50, 4 * 2048).astype(np.float32), "f32"), _returned


def differences() -> Case:
    # Small integers (every sum exact in either order; many ties for the maxima) over
    # several blocks, bf16 against f32, with NaNs (two payloads), an infinity and zeros
    # of both signs on both sides.
    n = 3 * 2048 + 5
    a = _rng().integers(-40, 40, n).astype(np.float32)
    b = a + _rng().integers(-2, 3, n).astype(np.float32)
    a[[7, 4000]] = b[[7, 4000]] = np.nan
    a[11] = b[11] = np.inf
    a[[20, 21]] = [-0.0, 0.0]
    b[[20, 21]] = [0.0, 0.0]
    bits = b.view(np.uint32)
    bits[4000] |= 1  # another NaN payload
    a16 = (a.view(np.uint32) >> 16).astype(np.uint16)  # these values are exact in bf16
    return (a16, "bf16", b, "f32"), _returned


def fp8() -> Case:
    codes = _u8(37 * 45).reshape(37, 45)
    scales = _rng().standard_normal((5, 3)).astype(np.float32)
    out = np.zeros((35, 45), np.float32)
    return (codes[2:].copy(), scales, out, 8, 16, 2), _out(2)


def fp4() -> Case:
    table = _rng().standard_normal(256).astype(np.float32)
    out = np.zeros(40 * 32, np.float32)
    return (_u8(40 * 16), _u8(40), table, out, 32, 2.0), _out(3)


def bnb() -> Case:
    table = _rng().standard_normal(16).astype(np.float32)
    scales = _rng().standard_normal(40).astype(np.float32)
    return (_u8(1000), table, scales, 64, 5, 1990, np.dtype("float16")), _returned


def int4() -> Case:
    words = _rng().integers(0, 2**32, (8, 24), dtype=np.uint64).astype(np.uint32).view(np.int32)
    gidx = (np.arange(64) // 16).astype(np.int32)
    scale = _rng().standard_normal((24, 4)).astype(np.float32)
    zero = _rng().integers(0, 16, (24, 4)).astype(np.int32)
    out = np.zeros((24, 64), np.float32)
    return (words, "gptq", 0, gidx, 16, scale, zero, "float16", out), _out(8)


def mxfp4() -> Case:
    scales = np.arange(256, dtype=np.uint8)
    out = np.zeros(256 * 32, np.float32)
    return (_u8(256 * 16), scales, out, 32, True), _out(2)


def repack() -> Case:
    ggml = _u8(20 * 36)
    return (ggml, np.zeros((20, 32), np.uint8), np.zeros(80, np.uint8), 36, True), (
        lambda result, args: _bytes(args[1], args[2])
    )


def scaled_pairs() -> Case:
    joint = np.zeros(4 << 16, np.int64)
    codes = _u8(6 * 70 * 3, 16).reshape(6, 70, 3)
    flags = _u8(256, 8)
    return (codes, _u8(6 * 3 * 3).reshape(6, 3, 3), flags, joint, 32), (
        lambda result, args: repr(result).encode() + _bytes(args[3].reshape(4, -1).sum(axis=0))
    )


def ggml_decode(row: Kernel) -> Case:
    block = BLOCKS[row.name.split(".", 1)[1]]
    raw = _u8(9 * block.bytes)
    return (raw, np.zeros(9 * block.elements, np.float32)), _out(1)


def ggml_decode_bfloat16(row: Kernel) -> Case:
    block = BLOCKS[row.name.split(".", 1)[1]]
    raw = _u8(9 * block.bytes)
    return (raw, np.zeros(9 * block.elements, np.uint16)), _out(1)


def float32_to_bfloat16() -> Case:
    # Every bit pattern is a case: NaNs of both signs and any payload, infinities,
    # subnormals, ties (bit 15 set, the lower bits zero) of both parities.
    src = _rng().integers(0, 2**32, 5003, dtype=np.uint64).astype(np.uint32)
    src[:6] = [0x7F800001, 0xFFFFFFFF, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x00008000]
    return (np.zeros(src.size, np.uint16), src.view(np.float32)), _out(0)


def ggml_encode(row: Kernel) -> Case:
    block = BLOCKS[row.name.split(".", 1)[1]]
    src = _rng().standard_normal(5 * block.elements).astype(np.float32)
    src[3 * block.elements + 7] = np.nan
    return (src, np.zeros(5 * block.bytes, np.uint8)), (
        lambda result, args: (
            _bytes(args[1][: 3 * block.bytes]) + repr(min(r for r in result if r >= 0)).encode()
        )
    )


def ggml_encode_weighted(row: Kernel) -> Case:
    """Three rows of two blocks with one log-normal weight row, a NaN in block 4."""
    block = BLOCKS[row.name.split(".", 1)[1]]
    weights = np.exp(_rng().normal(0, 2, 2 * block.elements)).astype(np.float32)
    src = _rng().standard_normal(6 * block.elements).astype(np.float32)
    src[4 * block.elements + 7] = np.nan
    return (src, weights, np.zeros(6 * block.bytes, np.uint8)), (
        lambda result, args: (
            _bytes(args[2][: 4 * block.bytes]) + repr(min(r for r in result if r >= 0)).encode()
        )
    )


SAMPLES: dict[str, Callable[..., Case]] = {
    "unpack": unpack,
    "pack": pack,
    "first_above": first_above,
    "unpack2": lambda: _sub(2, False),
    "pack2": lambda: _sub(2, True),
    "unpack6": lambda: _sub(6, False),
    "pack6": lambda: _sub(6, True),
    "moments": moments,
    "differences": differences,
    "fp8_dequant": fp8,
    "fp4_scaled": fp4,
    "bnb4": bnb,
    "int4_rows": int4,
    "mxfp4_to_float32": mxfp4,
    "repack": repack,
    "scaled_pairs": scaled_pairs,
    "ggml_to_float32": ggml_decode,
    "ggml_to_bfloat16": ggml_decode_bfloat16,
    "float32_to_bfloat16": float32_to_bfloat16,
    "ggml_from_float32": ggml_encode,
    "ggml_from_float32_weighted": ggml_encode_weighted,
}


def _sample(row: Kernel) -> Callable[..., Case] | None:
    family = row.name.split(".", 1)[0]
    return SAMPLES.get(row.name) or SAMPLES.get(family)


def test_every_row_has_a_twin_and_a_case() -> None:
    assert {"unpack", "moments", "differences", "scaled_pairs"} <= set(KERNELS)
    assert {f"ggml_to_float32.{n}" for n in _decode.DECODERS} <= set(KERNELS)
    assert {f"ggml_to_bfloat16.{n}" for n in _decode.DECODERS} <= set(KERNELS)
    assert {f"ggml_from_float32.{n}" for n in _quantize.ENCODERS} <= set(KERNELS)
    assert {f"ggml_from_float32_weighted.{n}" for n in _quantize.WEIGHTED} <= set(KERNELS)
    for name, row in KERNELS.items():
        assert callable(row.numpy), f"{name} has no numpy twin"
        assert _sample(row) is not None, f"{name} has no case in SAMPLES"
        ggml = ("ggml_to_float32.", "ggml_to_bfloat16.", "ggml_from_float32")
        if backend.BUILT and not name.startswith(ggml):
            assert row.compiled is not None, f"{name}: the extension is built, the row has none"


@pytest.mark.skipif(not backend.COMPILED, reason="the numpy build: no compiled kernel to compare")
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compiled_equals_numpy(name: str) -> None:
    row = KERNELS[name]
    if row.compiled is None:
        pytest.skip(f"{name}: no compiled kernel for this type")
    sample = _sample(row)
    assert sample is not None

    def make() -> Case:
        assert sample is not None
        return sample(row) if name.count(".") else sample()

    results = []
    for run in (row.compiled, row.numpy):
        _STATE["rng"] = np.random.default_rng(34)  # the same arguments for both
        args, read = make()
        with np.errstate(all="ignore"):
            results.append(read(run(*args), args))
    assert results[0] == results[1]


def test_pick_follows_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    row = KERNELS["unpack"]
    monkeypatch.setattr(backend, "COMPILED", False)
    assert row.pick() is row.numpy
    assert not row.runs_compiled()
    monkeypatch.setattr(backend, "COMPILED", True)
    assert row.pick() is (row.compiled if backend.BUILT else row.numpy)
    assert kiln_np.kernel_backend() == "compiled"
