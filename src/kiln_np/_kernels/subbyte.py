"""Vectorized 2-bit and 6-bit pack/unpack kernels (ONNX ``raw_data``, Zarr ``packbits``).

Wire rules (ONNX data-type table):

- 2-bit (UINT2, INT2): four elements per byte, ``x0 | x1<<2 | x2<<4 | x3<<6``;
  a count that is not a multiple of 4 leaves the top bits of the last byte 0.
- 6-bit (FLOAT6E2M3, FLOAT6E3M2): one little-endian bit stream, lowest bit
  first, four elements in three bytes; ``n`` elements take ``ceil(6n/8)``
  bytes and the bits after the last element are 0.

Unpacked, each element is one byte holding its bits in the low bits (the
storage of ml_dtypes ``int2``/``uint2``/``float6_*``).  Padding and the range
of unpacked bytes are checked by the callers; these kernels assume both.

Two implementations, as for the nibble kernels of :mod:`kiln_np._kernels.nibbles`,
rows of the kernel table (:mod:`kiln_np._kernels.dispatch`; ``KILN_NP_PURE=1`` turns
the compiled ones off):

- **Compiled** (``unpack2``/``pack2``/``unpack6``/``pack6`` of
  ``kiln_np._kernels``): one pass each, split over the thread pool on groups
  of four elements (the ``COMPILED_*`` thresholds).
- **numpy** (below): the fallback and the reference the compiled kernels are
  tested against bit for bit (``tests/kernels/test_onnx_kernels.py``).  The bulk
  work runs on ``'<u4'`` lanes (one lane = four unpacked bytes = one packed
  2-bit byte or one 3-byte 6-bit group) in cache-sized chunks, split across
  the thread pool on multiples of ``CHUNK_LANES``.  Shifts and masks are
  replaced by multiplications where the shifted copies cannot overlap
  (adding disjoint bit fields is OR), which saves numpy passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import numpy as np

from kiln_np._core.checks import U8
from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # no C compiler at install: no compiled rows
    from kiln_np._kernels import native

__all__ = [
    "PACK2",
    "PACK6",
    "UNPACK2",
    "UNPACK6",
    "pack2_into",
    "pack6_into",
    "unpack2_into",
    "unpack6_into",
]

_LANE = np.dtype("<u4")


def _u4(value: int) -> np.uint32:
    return np.uint32(value)


def _chunks(lo: int, hi: int) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(start, stop, w, t)`` over ``[lo, hi)`` in chunks of ``CHUNK_LANES``
    lanes; ``w`` and ``t`` are scratch lanes of the chunk's length, reused.

    The chunk is the nibble kernels' ``CHUNK_LANES`` (2**18 lanes), read at
    call time: the thread pool's ranges start on its multiples, so they start
    on chunk boundaries too, and a test can make it tiny.  A ``'<u4'`` lane is
    four unpacked bytes, so a chunk is 1 MiB unpacked, twice a nibble chunk.
    Measured on 16 Mi elements (2 cores): 64 Ki-lane chunks were 1.4x slower
    with two threads and 16 Ki-lane chunks 3-4x, the ufunc calls per chunk
    costing more than the cache they save."""
    chunk = pool.CHUNK_LANES
    size = min(chunk, hi - lo)
    buf, tmp = np.empty(size, _LANE), np.empty(size, _LANE)
    for start in range(lo, hi, chunk):
        stop = min(start + chunk, hi)
        yield start, stop, buf[: stop - start], tmp[: stop - start]


# ---------------------------------------------------------------- 2-bit


def _unpack2_lanes(src: np.ndarray, dst32: np.ndarray, lo: int, hi: int) -> int:
    """dst32[i] = the four 2-bit fields of src[i], one per byte."""
    for start, stop, w, _ in _chunks(lo, hi):
        w[...] = src[start:stop]
        # b | b<<12 puts x0|x1<<2 in bits 0-3 and x2|x3<<2 in bits 16-19.
        np.multiply(w, _u4(0x1001), out=w)
        np.bitwise_and(w, _u4(0x000F_000F), out=w)
        # t | t<<6 moves x1 to bit 8 and x3 to bit 24.
        np.multiply(w, _u4(0x41), out=w)
        np.bitwise_and(w, _u4(0x0303_0303), out=dst32[start:stop])
    return -1  # the thread pool's convention: no bad index


def _pack2_lanes(src32: np.ndarray, dst: np.ndarray, lo: int, hi: int) -> int:
    """dst[i] = x0 | x1<<2 | x2<<4 | x3<<6 of the lane src32[i] (values <= 3)."""
    for start, stop, w, t in _chunks(lo, hi):
        lanes = src32[start:stop]
        np.right_shift(lanes, _u4(6), out=w)
        np.bitwise_or(w, lanes, out=w)
        np.right_shift(w, _u4(12), out=t)
        np.bitwise_or(w, t, out=w)
        dst[start:stop] = w  # the cast keeps the low byte, the packed one
    return -1


def _tail_fields(word: int, count: int, bits: int) -> np.ndarray:
    """The first ``count`` (<= 4) fields of ``bits`` bits of ``word``, as bytes."""
    shifts = np.arange(count, dtype=np.uint32) * np.uint32(bits)
    return ((np.uint32(word) >> shifts) & np.uint32((1 << bits) - 1)).astype(U8)


def _tail_word(fields: np.ndarray, bits: int) -> int:
    """The inverse of :func:`_tail_fields`: fields (< 4 of them) packed into an int."""
    shifts = np.arange(fields.size, dtype=np.uint32) * np.uint32(bits)
    return int(np.bitwise_or.reduce(fields.astype(np.uint32) << shifts, initial=0))


def _unpack2_compiled(src: np.ndarray, dst: np.ndarray, count: int) -> None:
    pool.run_compiled(partial(native.unpack2, src, dst), count, per=4)


def _unpack2_numpy(src: np.ndarray, dst: np.ndarray, count: int) -> None:
    full = count // 4
    if full:
        dst32 = dst[: 4 * full].view(_LANE)
        pool.run_ranges(lambda lo, hi: _unpack2_lanes(src, dst32, lo, hi), full)
    if count % 4:
        dst[4 * full :] = _tail_fields(int(src[full]), count % 4, 2)


UNPACK2 = register(
    Kernel(
        "unpack2",
        _unpack2_compiled if backend.BUILT else None,
        _unpack2_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # groups of four elements
    )
)


def unpack2_into(src: np.ndarray, dst: np.ndarray, count: int) -> None:
    """Unpack ``count`` 2-bit elements of ``src`` (``ceil(count/4)`` bytes)
    into the uint8 array ``dst`` of ``count`` bytes.

    >>> dst = np.empty(5, np.uint8)
    >>> unpack2_into(np.array([0xE4, 0x01], np.uint8), dst, 5)
    >>> dst
    array([0, 1, 2, 3, 1], dtype=uint8)
    """
    UNPACK2.pick()(src, dst, count)


def _pack2_compiled(src: np.ndarray, dst: np.ndarray) -> None:
    pool.run_compiled(partial(native.pack2, src, dst), src.size, per=4)


def _pack2_numpy(src: np.ndarray, dst: np.ndarray) -> None:
    full = src.size // 4
    if full:
        src32 = src[: 4 * full].view(_LANE)
        pool.run_ranges(lambda lo, hi: _pack2_lanes(src32, dst, lo, hi), full)
    if src.size % 4:
        dst[full] = _tail_word(src[4 * full :], 2)


PACK2 = register(
    Kernel(
        "pack2",
        _pack2_compiled if backend.BUILT else None,
        _pack2_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # groups of four elements
    )
)


def pack2_into(src: np.ndarray, dst: np.ndarray) -> None:
    """Pack the uint8 values ``src`` (each 0-3) into ``dst`` (``ceil(n/4)`` bytes).

    >>> dst = np.empty(2, np.uint8)
    >>> pack2_into(np.array([0, 1, 2, 3, 1], np.uint8), dst)
    >>> dst.tobytes().hex(" ")
    'e4 01'
    """
    PACK2.pick()(src, dst)


# ---------------------------------------------------------------- 6-bit

_GROUP_MASK = 0x00FF_FFFF  # a 3-byte group read as the low 24 bits of a lane
_HIGH_PAIR = 0x00FF_F000  # x2 and x3 (bits 12-23)
_ODD_FIELDS = 0x0FC0_0FC0  # x1 and x3 once the pairs sit 16 bits apart


def _unpack6_lanes(groups: np.ndarray, dst32: np.ndarray, lo: int, hi: int) -> int:
    """dst32[i] = the four 6-bit fields of the 24-bit group ``groups[i]``.

    ``groups`` is a strided ``'<u4'`` view whose lanes start 3 bytes apart; its
    top byte belongs to the next group and is masked off first."""
    for start, stop, w, t in _chunks(lo, hi):
        np.copyto(w, groups[start:stop])  # the strided load, alone: faster than fused
        np.bitwise_and(w, _u4(_GROUP_MASK), out=w)
        # w + 15 * (x2|x3 part) == (x0|x1) | (x2|x3) << 4: pairs 16 bits apart.
        np.bitwise_and(w, _u4(_HIGH_PAIR), out=t)
        np.multiply(t, _u4(15), out=t)
        np.add(w, t, out=w)
        # w + 3 * (x1, x3) == (x0, x2) | (x1, x3) << 2: one field per byte.
        np.bitwise_and(w, _u4(_ODD_FIELDS), out=t)
        np.multiply(t, _u4(3), out=t)
        np.add(w, t, out=dst32[start:stop])
    return -1


def _pack6_lanes(src32: np.ndarray, dst24: np.ndarray, lo: int, hi: int) -> int:
    """dst24[i] = the 3 bytes of x0 | x1<<6 | x2<<12 | x3<<18 of lane src32[i]."""
    for start, stop, w, t in _chunks(lo, hi):
        lanes = src32[start:stop]
        # The inverse of the unpack steps: close the 2-bit gaps, then the 4-bit ones.
        np.bitwise_and(lanes, _u4(0x3F00_3F00), out=t)
        np.right_shift(t, _u4(2), out=t)
        np.bitwise_and(lanes, _u4(0x003F_003F), out=w)
        np.bitwise_or(w, t, out=w)
        np.bitwise_and(w, _u4(0x0FFF_0000), out=t)
        np.right_shift(t, _u4(4), out=t)
        np.bitwise_and(w, _u4(0x0000_0FFF), out=w)
        np.bitwise_or(w, t, out=w)
        dst24[start:stop] = w.view(U8).reshape(-1, 4)[:, :3]
    return -1


def _unpack6_compiled(src: np.ndarray, dst: np.ndarray, count: int) -> None:
    pool.run_compiled(partial(native.unpack6, src, dst), count, per=4)


def _unpack6_numpy(src: np.ndarray, dst: np.ndarray, count: int) -> None:
    full = count // 4
    # A lane reads 4 bytes from 3k, so the strided view stops one group early
    # unless a byte follows the last full group.
    strided = min(full, (src.size - 1) // 3) if src.size else 0
    if strided:
        groups = np.ndarray((strided,), _LANE, buffer=src, strides=(3,))
        dst32 = dst[: 4 * strided].view(_LANE)
        pool.run_ranges(lambda lo, hi: _unpack6_lanes(groups, dst32, lo, hi), strided)
    rest = count - 4 * strided
    if rest:
        word = int.from_bytes(src[3 * strided :].tobytes(), "little")
        dst[4 * strided :] = _tail_fields(word, rest, 6)


UNPACK6 = register(
    Kernel(
        "unpack6",
        _unpack6_compiled if backend.BUILT else None,
        _unpack6_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # groups of four elements
    )
)


def unpack6_into(src: np.ndarray, dst: np.ndarray, count: int) -> None:
    """Unpack ``count`` 6-bit elements of ``src`` (``ceil(6*count/8)`` bytes)
    into the uint8 array ``dst`` of ``count`` bytes.

    >>> dst = np.empty(2, np.uint8)
    >>> unpack6_into(np.array([0x41, 0x00], np.uint8), dst, 2)  # 1 | 1 << 6
    >>> dst
    array([1, 1], dtype=uint8)
    """
    UNPACK6.pick()(src, dst, count)


def _pack6_compiled(src: np.ndarray, dst: np.ndarray) -> None:
    pool.run_compiled(partial(native.pack6, src, dst), src.size, per=4)


def _pack6_numpy(src: np.ndarray, dst: np.ndarray) -> None:
    full = src.size // 4
    if full:
        src32 = src[: 4 * full].view(_LANE)
        dst24 = dst[: 3 * full].reshape(full, 3)
        pool.run_ranges(lambda lo, hi: _pack6_lanes(src32, dst24, lo, hi), full)
    rest = src.size % 4
    if rest:
        word = _tail_word(src[4 * full :], 6)
        dst[3 * full :] = np.frombuffer(word.to_bytes(dst.size - 3 * full, "little"), U8)


PACK6 = register(
    Kernel(
        "pack6",
        _pack6_compiled if backend.BUILT else None,
        _pack6_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # groups of four elements
    )
)


def pack6_into(src: np.ndarray, dst: np.ndarray) -> None:
    """Pack the uint8 values ``src`` (each 0-63) into ``dst`` (``ceil(6n/8)`` bytes).

    >>> dst = np.empty(3, np.uint8)
    >>> pack6_into(np.array([1, 2, 3, 63], np.uint8), dst)
    >>> dst.tobytes().hex(" ")
    '81 30 fc'
    """
    PACK6.pick()(src, dst)
