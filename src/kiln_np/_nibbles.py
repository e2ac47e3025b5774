"""Vectorized 4-bit pack/unpack kernels.

Wire rule: element ``2k`` is the low nibble of byte ``k``, element ``2k+1`` its
high nibble; an odd count leaves the last high nibble 0.

How they stay near memory speed: the kernels work on ``'<u2'`` lanes (one
lane = two unpacked bytes = one packed byte) over chunks small enough that the
intermediates stay in cache, reuse one scratch buffer per worker, and split
large inputs across a small lazily-created thread pool (numpy releases the GIL
inside ufunc loops).  The lane dtypes are explicitly little-endian, so the
results are the same on big-endian hosts (numpy byte-swaps there, slower but
correct).  Results never depend on the split: each worker owns a disjoint
range of the output.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import KilnError

__all__ = ["pack_nibbles", "unpack_nibbles"]

U8 = np.dtype(np.uint8)
_LANE = np.dtype("<u2")
_WIDE = np.dtype("<u8")
_HIGH_BITS = 0xF0F0_F0F0_F0F0_F0F0

CHUNK_LANES = 1 << 16
"""Lanes per chunk: 128 KiB of unpacked bytes, so a chunk's temporaries stay in L2."""

THREAD_MIN_LANES = 1 << 20
"""Below this many lanes (2 MiB unpacked) one thread is faster than a pool."""


@cache
def _pool() -> ThreadPoolExecutor:
    workers = max(1, min(os.cpu_count() or 1, 8))
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kiln_np")


def _workers() -> int:
    return _pool()._max_workers


def _split(lanes: int) -> list[tuple[int, int]]:
    """Disjoint lane ranges, one per worker, on chunk boundaries."""
    if lanes < THREAD_MIN_LANES:
        return [(0, lanes)]
    parts = _workers()
    step = -(-lanes // parts)
    step = -(-step // CHUNK_LANES) * CHUNK_LANES
    return [(lo, min(lo + step, lanes)) for lo in range(0, lanes, step)]


def _run(task: Callable[[int, int], Any], lanes: int) -> list[Any]:
    ranges = _split(lanes)
    if len(ranges) == 1:
        return [task(*ranges[0])]
    return list(_pool().map(lambda r: task(*r), ranges))


def _unpack_lanes(src: np.ndarray, dst16: np.ndarray, lo: int, hi: int) -> None:
    """dst16[i] = (src[i] & 0x0F) | (src[i] >> 4) << 8, for i in [lo, hi)."""
    wide = np.empty(min(CHUNK_LANES, hi - lo), _LANE)
    tmp = np.empty_like(wide)
    for start in range(lo, hi, CHUNK_LANES):
        stop = min(start + CHUNK_LANES, hi)
        m = stop - start
        w, t = wide[:m], tmp[:m]
        w[...] = src[start:stop]
        np.left_shift(w, 4, out=t)
        np.bitwise_or(t, w, out=t)
        np.bitwise_and(t, 0x0F0F, out=dst16[start:stop])


def _first_above_15(values: np.ndarray) -> int:
    """Index of the first byte above 15, or -1; one reduction when clean."""
    n8 = values.size // 8 * 8
    clean = True
    if n8:
        clean = not (int(np.bitwise_or.reduce(values[:n8].view(_WIDE))) & _HIGH_BITS)
    if clean and (n8 == values.size or int(values[n8:].max()) <= 15):
        return -1
    return int(np.flatnonzero(values > 15)[0])


def _pack_lanes(src: np.ndarray, dst: np.ndarray, lo: int, hi: int) -> int:
    """dst[i] = lane_i | lane_i >> 4 for lanes [lo, hi); returns the first bad
    source index (a byte above 15) or -1.  Checks each chunk before writing it."""
    src16 = src[: 2 * (src.size // 2)].view(_LANE)
    tmp = np.empty(min(CHUNK_LANES, hi - lo), _LANE)
    for start in range(lo, hi, CHUNK_LANES):
        stop = min(start + CHUNK_LANES, hi)
        bad = _first_above_15(src[2 * start : 2 * stop])
        if bad >= 0:
            return 2 * start + bad
        lanes = src16[start:stop]
        t = tmp[: stop - start]
        np.right_shift(lanes, 4, out=t)
        np.bitwise_or(t, lanes, out=t)
        dst[start:stop] = t  # the cast keeps the low byte
    return -1


def _byte_view(buf: object, what: str, *, writable: bool = False) -> np.ndarray:
    """A flat uint8 view of a C-contiguous buffer; KilnError for anything else."""
    if isinstance(buf, np.ndarray):
        arr = buf
        if not arr.flags.c_contiguous:
            raise KilnError(
                "TYPE", f"{what} must be C-contiguous, got an array with strides {arr.strides}"
            )
        if arr.dtype != U8:
            arr = arr.reshape(-1).view(U8)
    else:
        mv = memoryview(buf)  # type: ignore[arg-type]  # TypeError for non-buffers is the contract
        if not mv.c_contiguous:
            raise KilnError(
                "TYPE",
                f"{what} must be a C-contiguous buffer, got a memoryview with "
                f"shape {mv.shape} and strides {mv.strides}; pass bytes(buf) to copy it",
            )
        arr = np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.itemsize != 1 else mv, U8)
    if writable and not arr.flags.writeable:
        raise KilnError("TYPE", f"{what} must be writable, got a read-only buffer")
    return arr.reshape(-1)


def _check_count(count: object) -> int:
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)):
        raise KilnError("SHAPE", f"count must be an integer, got {type(count).__name__}")
    if count < 0:
        raise KilnError("SHAPE", f"count must be >= 0, got {int(count)}")
    return int(count)


def unpack_into(src: np.ndarray, dst: np.ndarray, count: int) -> None:
    """Unpack ``count`` nibbles of ``src`` (exactly ``ceil(count/2)`` bytes,
    padding already checked) into the uint8 array ``dst`` of ``count`` bytes."""
    lanes = count // 2
    if lanes:
        dst16 = dst[: 2 * lanes].view(_LANE)
        _run(lambda lo, hi: _unpack_lanes(src, dst16, lo, hi), lanes)
    if count % 2:
        dst[-1] = src[-1]


def check_padding(src: np.ndarray, count: int, context: str = "") -> None:
    """An odd count must leave the last high nibble 0 (case kiln-v2-high-nibble).

    ``context`` prefixes the message (the caller's code and shape)."""
    if count % 2 and src[-1] >> 4:
        last = int(src[-1])
        raise KilnError(
            "TYPE",
            f"{context}odd count {count}: expected the padding (high) nibble of the last "
            f"byte to be 0, found byte 0x{last:02x} at byte offset {src.size - 1} "
            "(case kiln-v2-high-nibble)",
            expected=0,
            found=last,
            index=count,
        )


def pack_into(src: np.ndarray, dst: np.ndarray) -> int:
    """Pack the uint8 values ``src`` into ``dst`` (``ceil(src.size/2)`` bytes).

    Returns the flat index of the first value above 15, or -1.  Chunks before
    a bad one may already be written: callers that promise an untouched
    destination check first (:func:`first_above_15`).
    """
    n = src.size
    lanes = n // 2
    results = _run(lambda lo, hi: _pack_lanes(src, dst, lo, hi), lanes) if lanes else []
    bad = [r for r in results if r >= 0]
    if bad:
        return min(bad)
    if n % 2:
        if src[-1] > 15:
            return n - 1
        dst[-1] = src[-1]
    return -1


def first_above_15(src: np.ndarray) -> int:
    """The flat index of the first byte above 15 in ``src``, or -1."""
    return _first_above_15(src)


def nibble_error(values: np.ndarray, index: int, what: str = "a nibble value") -> KilnError:
    found = int(values[index])
    return KilnError(
        "TYPE",
        f"expected {what} in 0..15 (0x0-0xf), found 0x{found:02x} at element {index}",
        expected=15,
        found=found,
        index=index,
    )


def pack_nibbles(values: npt.ArrayLike, *, out: object = None) -> np.ndarray:
    """Pack integers 0-15 two per byte, the earlier element in the low nibble.

    Parameters
    ----------
    values : array_like of integers
        Read in C order; any integer dtype (values must lie in 0..15).
    out : writable bytes-like, optional
        Destination of exactly ``ceil(values.size / 2)`` bytes (a bytearray,
        a writable mmap slice, a uint8 array).  Untouched if an error is
        raised.

    Returns
    -------
    numpy.ndarray
        uint8, ``ceil(values.size / 2)`` bytes; a view of ``out`` when given.

    Raises
    ------
    KilnError
        TYPE for a non-integer dtype or a value outside 0..15; LENGTH when
        ``out`` has the wrong size.

    Examples
    --------
    >>> pack_nibbles([1, 2, 3]).tobytes().hex(" ")
    '21 03'
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise KilnError("TYPE", f"expected an integer dtype for nibble values, got {arr.dtype}")
    if arr.dtype != U8:
        flat = arr.reshape(-1)
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) > 15):
            bad = int(np.flatnonzero((flat < 0) | (flat > 15))[0])
            raise KilnError(
                "TYPE",
                f"expected a nibble value in 0..15, found {int(flat[bad])} at element {bad}",
                expected=15,
                found=int(flat[bad]),
                index=bad,
            )
        arr = flat.astype(U8)
    src = np.ascontiguousarray(arr).reshape(-1)
    size = (src.size + 1) // 2
    if out is None:
        dst = np.empty(size, U8)
    else:
        dst = _byte_view(out, "out", writable=True)
        if dst.size != size:
            raise KilnError(
                "LENGTH",
                f"out must hold exactly ceil({src.size} / 2) = {size} bytes, found {dst.size}",
                expected=size,
                found=dst.size,
            )
        bad = first_above_15(src)
        if bad >= 0:
            raise nibble_error(src, bad)
    bad = pack_into(src, dst)
    if bad >= 0:
        raise nibble_error(src, bad)
    return dst


def unpack_nibbles(buf: object, count: int, *, out: object = None) -> np.ndarray:
    """Unpack ``count`` 4-bit values, one per byte (high nibble 0).

    Parameters
    ----------
    buf : bytes-like
        Exactly ``ceil(count / 2)`` bytes.
    count : int
        Number of elements.
    out : writable bytes-like, optional
        Destination of exactly ``count`` bytes; untouched if an error is raised.

    Returns
    -------
    numpy.ndarray
        uint8 of shape ``(count,)``; a view of ``out`` when given.

    Raises
    ------
    KilnError
        LENGTH when ``buf`` (or ``out``) has the wrong size; TYPE when an odd
        count leaves a nonzero padding nibble.

    Examples
    --------
    >>> unpack_nibbles(b"\\x21\\x03", 3)
    array([1, 2, 3], dtype=uint8)
    """
    n = _check_count(count)
    src = _byte_view(buf, "buf")
    size = (n + 1) // 2
    if src.size != size:
        raise KilnError(
            "LENGTH",
            f"expected ceil({n} / 2) = {size} bytes of packed nibbles, found {src.size}",
            expected=size,
            found=src.size,
        )
    if out is None:
        dst = np.empty(n, U8)
    else:
        dst = _byte_view(out, "out", writable=True)
        if dst.size != n:
            raise KilnError(
                "LENGTH",
                f"out must hold exactly {n} bytes, found {dst.size}",
                expected=n,
                found=dst.size,
            )
    check_padding(src, n)
    unpack_into(src, dst, n)
    return dst
