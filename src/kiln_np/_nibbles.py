"""Vectorized 4-bit pack/unpack kernels.

Wire rule: element ``2k`` is the low nibble of byte ``k``, element ``2k+1`` its
high nibble; an odd count leaves the last high nibble 0.

How they stay near memory speed
-------------------------------
- **Lanes, not strided stores.**  One ``'<u2'`` lane is two unpacked bytes and
  one packed byte.  Unpack widens a packed byte ``b`` into its lane with a
  cast and computes ``b + 15 * (b & 0xF0)`` (low nibble in the low byte, high
  nibble in the high byte); pack computes ``lane | lane >> 4`` and keeps the
  low byte with an unsafe cast into the destination.  Every step is a
  contiguous ufunc call.
- **Cache-sized chunks.**  Work proceeds :data:`CHUNK_LANES` lanes at a time,
  so the intermediates of one chunk stay in L2, with one scratch buffer per
  worker.  Unpack writes its cast straight into the destination chunk and
  finishes it there while it is still in cache.
- **Fused checks.**  Pack tests each input chunk for bits above the nibble
  (one ``bitwise_or`` reduction over ``'<u8'`` words) just before packing it,
  while it is in cache; the padding-nibble check of unpack reads one byte.
- **A small lazy thread pool.**  Inputs of :data:`THREAD_MIN_LANES` lanes or
  more are split into one contiguous range per core; the calling thread works
  on the first and pool threads on the rest (numpy releases the GIL inside
  ufunc loops).  The pool is created on first use.  ``KILN_NP_NUM_THREADS``
  (read once, when the pool is created) caps the number of threads; ``1``
  turns threading off.
- **Small inputs skip all of that**: below :data:`SMALL_LANES` lanes unpack
  is one gather from a 256-row table of byte pairs and pack two strided calls
  (byte arithmetic, so no byte order either); below
  :data:`THREAD_MIN_LANES` lanes the kernels run on the calling thread only.

Results never depend on the split: each range writes a disjoint part of the
output with the same arithmetic, and pack reports the smallest bad index over
all ranges.

Byte order: every lane dtype is explicitly little-endian (``'<u2'``,
``'<u8'``) and every step is arithmetic on lane *values*, so on a big-endian
host numpy byte-swaps while loading and storing the lanes: slower, same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache

import numpy as np
import numpy.typing as npt

from ._errors import KilnError

__all__ = ["pack_nibbles", "unpack_nibbles"]

U8 = np.dtype(np.uint8)
_LANE = np.dtype("<u2")
_WIDE = np.dtype("<u8")
_HIGH_BITS = 0xF0F0_F0F0_F0F0_F0F0
# Lane constants as numpy scalars: a Python int costs a conversion per ufunc call.
_HIGH_NIBBLE = _LANE.type(0xF0)
_FIFTEEN = _LANE.type(15)
_FOUR = _LANE.type(4)
_FOUR_U8 = np.uint8(4)
# Row b is (b & 15, b >> 4): unpacking a few bytes is one gather; bytes, so no byte order.
_PAIRS = np.stack([np.arange(256) & 15, np.arange(256) >> 4], axis=1).astype(U8)

CHUNK_LANES = 1 << 18
"""Lanes per chunk: 512 KiB of unpacked bytes.  Small enough that a chunk, its
source and its scratch (1.25 MiB) stay in a 2 MiB L2; large enough that two
threads rarely wait for the GIL between ufunc calls (64 Ki-lane chunks
measured up to 1.5x slower threaded, see docs/performance.md)."""

THREAD_MIN_LANES = 1 << 19
"""Inputs with fewer lanes (1 MiB unpacked) run on the calling thread only."""

SMALL_LANES = 1 << 11
"""Below this many lanes unpack is one table gather (``np.take``) and pack two
strided ufunc calls after one ``max``: fewer calls than the lane kernels, whose
fixed cost is several microseconds."""

_MAX_THREADS = 8


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@cache
def _threads() -> int:
    """Threads a large call uses: the usable cores, capped by KILN_NP_NUM_THREADS."""
    setting = os.environ.get("KILN_NP_NUM_THREADS", "").strip()
    limit = int(setting) if setting.isdigit() and int(setting) > 0 else _MAX_THREADS
    return max(1, min(_cpu_count(), limit))


@cache
def _pool() -> ThreadPoolExecutor:
    # The calling thread takes one range itself, so the pool needs one fewer.
    return ThreadPoolExecutor(max_workers=max(1, _threads() - 1), thread_name_prefix="kiln_np")


def _split(lanes: int) -> list[tuple[int, int]]:
    """Disjoint lane ranges covering ``[0, lanes)``, one per thread, on chunk
    boundaries."""
    parts = _threads() if lanes >= THREAD_MIN_LANES else 1
    if parts == 1:
        return [(0, lanes)]
    step = -(-lanes // parts)
    step = -(-step // CHUNK_LANES) * CHUNK_LANES
    return [(lo, min(lo + step, lanes)) for lo in range(0, lanes, step)]


def _run(task: Callable[[int, int], int], lanes: int) -> list[int]:
    """``task(lo, hi)`` over the ranges of :func:`_split`, results in range order."""
    ranges = _split(lanes)
    if len(ranges) == 1:
        return [task(*ranges[0])]
    futures: list[Future[int]] = [_pool().submit(task, lo, hi) for lo, hi in ranges[1:]]
    try:
        first = task(*ranges[0])
    finally:
        # Never return (or raise) while a worker may still write the output.
        rest = [f.result() for f in futures]
    return [first, *rest]


def _unpack_lanes(src: np.ndarray, dst16: np.ndarray, lo: int, hi: int) -> int:
    """``dst16[i] = src[i] + 15 * (src[i] & 0xF0)`` for ``i`` in ``[lo, hi)``:
    the low nibble stays in the low byte, the high nibble moves to the high
    byte."""
    scratch = np.empty(min(CHUNK_LANES, hi - lo), _LANE)
    for start in range(lo, hi, CHUNK_LANES):
        stop = min(start + CHUNK_LANES, hi)
        lanes = dst16[start:stop]
        high = scratch[: stop - start]
        np.copyto(lanes, src[start:stop])
        np.bitwise_and(lanes, _HIGH_NIBBLE, out=high)
        np.multiply(high, _FIFTEEN, out=high)
        np.add(lanes, high, out=lanes)
    return -1


def _first_above_15(values: np.ndarray) -> int:
    """Index of the first byte above 15, or -1; one reduction when clean."""
    n8 = values.size // 8 * 8
    clean = True
    if n8:
        clean = not (int(np.bitwise_or.reduce(values[:n8].view(_WIDE))) & _HIGH_BITS)
    if clean and (n8 == values.size or int(values[n8:].max()) <= 15):
        return -1
    return int(np.flatnonzero(values > 15)[0])


def _pack_lanes(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, *, check: bool) -> int:
    """``dst[i] = (lane_i | lane_i >> 4) & 0xFF`` for lanes ``[lo, hi)`` of
    ``src``.  With ``check``, each chunk is tested for a byte above 15 before it
    is packed; returns the first bad index of ``src`` (chunks before it are
    written) or -1."""
    src16 = src[: 2 * hi].view(_LANE)
    scratch = np.empty(min(CHUNK_LANES, hi - lo), _LANE)
    for start in range(lo, hi, CHUNK_LANES):
        stop = min(start + CHUNK_LANES, hi)
        if check:
            bad = _first_above_15(src[2 * start : 2 * stop])
            if bad >= 0:
                return 2 * start + bad
        lanes = src16[start:stop]
        high = scratch[: stop - start]
        np.right_shift(lanes, _FOUR, out=high)
        np.bitwise_or(high, lanes, out=dst[start:stop], casting="unsafe")
    return -1


def _byte_view(buf: object, what: str, *, writable: bool = False) -> np.ndarray:
    """A flat uint8 view of a C-contiguous buffer; KilnError for anything else."""
    if type(buf) is bytes and not writable:
        return np.frombuffer(buf, U8)
    if isinstance(buf, np.ndarray):
        arr = buf
        if arr.dtype.hasobject:
            raise KilnError(
                "TYPE", f"{what} must hold bytes, got an array of Python objects ({arr.dtype})"
            )
        if not arr.flags.c_contiguous:
            raise KilnError(
                "TYPE", f"{what} must be C-contiguous, got an array with strides {arr.strides}"
            )
        if arr.dtype != U8:
            arr = arr.reshape(-1).view(U8)
    else:
        try:
            mv = memoryview(buf)  # type: ignore[arg-type]  # TypeError for non-buffers is the contract
        except ValueError as exc:  # a released memoryview, a closed mmap
            raise KilnError("TYPE", f"{what} cannot be read: {exc}") from exc
        if "O" in mv.format:
            raise KilnError(
                "TYPE", f"{what} must hold bytes, got a buffer of Python objects ({mv.format!r})"
            )
        if not mv.c_contiguous:
            way_out = "a contiguous writable buffer" if writable else f"bytes({what}) to copy it"
            raise KilnError(
                "TYPE",
                f"{what} must be a C-contiguous buffer, got a memoryview with "
                f"shape {mv.shape} and strides {mv.strides}; pass {way_out}",
            )
        arr = np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.itemsize != 1 else mv, U8)
    if writable and not arr.flags.writeable:
        raise KilnError("TYPE", f"{what} must be writable, got a read-only buffer")
    return arr.reshape(-1)


def _by(expected: int, found: int) -> str:
    """``'short by 3'`` or ``'long by 3'``, for LENGTH messages."""
    return f"{'short' if found < expected else 'long'} by {abs(found - expected)}"


def out_view(
    out: object,
    size: int,
    rule: str = "",
    *,
    context: str = "",
    code: int | None = None,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """``out`` as a flat writable uint8 array of exactly ``size`` bytes; ``rule``
    says where ``size`` comes from in the message, ``context`` (the caller's
    code and shape) prefixes it."""
    dst = _byte_view(out, f"{context}out", writable=True)
    if dst.size != size:
        raise KilnError(
            "LENGTH",
            f"{context}out must hold exactly {rule}{size} bytes, found {dst.size} "
            f"({_by(size, dst.size)})",
            code=code,
            shape=shape,
            expected=size,
            found=dst.size,
        )
    return dst


def detach(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """``src``, or a copy of it when it overlaps ``dst``: the kernels read and
    write different ranges on different threads, so they need disjoint memory."""
    return src.copy() if np.may_share_memory(src, dst) else src


def max_byte(src: np.ndarray) -> int:
    """The largest byte of the flat uint8 array ``src`` (0 when empty): one
    ``max`` reduction, split across the pool for large inputs."""
    if not src.size:
        return 0
    lanes = src.size // 2

    def part(lo: int, hi: int) -> int:
        return int(src[2 * lo : src.size if hi == lanes else 2 * hi].max())

    return max(_run(part, lanes))


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
    if lanes and lanes < SMALL_LANES:
        np.take(_PAIRS, src[:lanes], axis=0, out=dst[: 2 * lanes].reshape(lanes, 2), mode="clip")
    elif lanes:
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


def pack_into(src: np.ndarray, dst: np.ndarray, *, checked: bool = False) -> int:
    """Pack the uint8 values ``src`` into ``dst`` (``ceil(src.size/2)`` bytes).

    Returns the flat index of the first value above 15, or -1.  Chunks before
    a bad one may already be written: callers that promise an untouched
    destination call :func:`first_above_15` first and pass ``checked=True``,
    which skips the per-chunk test.
    """
    n = src.size
    lanes = n // 2
    if lanes < SMALL_LANES:
        if not checked and n and int(src.max()) > 15:
            return _first_above_15(src)
        high = dst[:lanes]  # two strided calls beat the lane kernel's fixed cost here
        np.left_shift(src[1 : 2 * lanes : 2], _FOUR_U8, out=high)
        np.bitwise_or(high, src[0 : 2 * lanes : 2], out=high)
    else:
        results = _run(lambda lo, hi: _pack_lanes(src, dst, lo, hi, check=not checked), lanes)
        bad = [r for r in results if r >= 0]
        if bad:
            return min(bad)
    if n % 2:
        if src[-1] > 15:
            return n - 1
        dst[-1] = src[-1]
    return -1


def first_above_15(src: np.ndarray) -> int:
    """The flat index of the first byte above 15 in the uint8 array ``src``, or -1.

    Large inputs are scanned by the thread pool, one range per thread."""
    lanes = src.size // 2
    if not lanes:
        return _first_above_15(src)

    def scan(lo: int, hi: int) -> int:
        bad = _first_above_15(src[2 * lo : src.size if hi == lanes else 2 * hi])
        return bad if bad < 0 else 2 * lo + bad

    bad = [r for r in _run(scan, lanes) if r >= 0]
    return min(bad) if bad else -1


def nibble_error(values: np.ndarray, index: int, what: str = "a nibble value") -> KilnError:
    """The TYPE error for ``values[index]`` outside 0..15."""
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
        a writable mmap slice, a uint8 array), C-contiguous.  Untouched if an
        error is raised (all values are checked before the first write).  It
        may overlap ``values``.

    Returns
    -------
    numpy.ndarray
        uint8, ``ceil(values.size / 2)`` bytes; a view of ``out`` when given.

    Raises
    ------
    KilnError
        TYPE for a non-integer dtype, a value outside 0..15, or an ``out``
        that is read-only or not C-contiguous; LENGTH when ``out`` has the
        wrong size.

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
            value = int(flat[bad])
            raise KilnError(
                "TYPE",
                f"expected a nibble value in 0..15 (0x0-0xf), found {value} ({hex(value)}) at "
                f"element {bad}",
                expected=15,
                found=value,
                index=bad,
            )
        arr = flat.astype(U8)
    src = np.ascontiguousarray(arr).reshape(-1)
    size = (src.size + 1) // 2
    if out is None:
        dst = np.empty(size, U8)
        bad = pack_into(src, dst)
    else:
        dst = out_view(out, size, f"ceil({src.size} / 2) = ")
        bad = first_above_15(src)
        if bad < 0:
            pack_into(detach(src, dst), dst, checked=True)
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
        Destination of exactly ``count`` bytes (a uint8 array, a bytearray, a
        writable mmap slice), C-contiguous; untouched if an error is raised.
        It may overlap ``buf``.

    Returns
    -------
    numpy.ndarray
        uint8 of shape ``(count,)``; a view of ``out`` when given.

    Raises
    ------
    KilnError
        LENGTH when ``buf`` (or ``out``) has the wrong size; TYPE when an odd
        count leaves a nonzero padding nibble or ``out`` is read-only; SHAPE
        for a negative or non-integer count.

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
            f"expected ceil({n} / 2) = {size} bytes of packed nibbles, found {src.size} "
            f"({_by(size, src.size)})",
            expected=size,
            found=src.size,
        )
    dst = np.empty(n, U8) if out is None else out_view(out, n)
    check_padding(src, n)
    unpack_into(src if out is None else detach(src, dst), dst, n)
    return dst
