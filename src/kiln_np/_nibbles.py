"""4-bit pack/unpack and byte-check kernels, compiled or in numpy.

Wire rule: element ``2k`` is the low nibble of byte ``k``, element ``2k+1`` its
high nibble; an odd count leaves the last high nibble 0.

Two implementations, one contract
---------------------------------
- **Compiled** (``kiln_np._kernels``, ``src/kiln_np/_kernels.c``): one fused
  pass per job, reading its input once and writing its output once: unpack;
  pack with the bits-above-the-nibble check fused in; the first byte above a
  limit (the bool 0/1 check and the check that runs before a write to
  ``out=``), with no temporary of any size.  Built by ``pip install`` where a
  C compiler exists; an optional extension, so the install succeeds without
  one.
- **numpy** (below): the portable fallback and the reference the compiled
  kernels are tested against, bit for bit (``tests/test_kernels.py``).
  ``KILN_NP_PURE=1`` in the environment (read at import) forces it.
  :func:`kernel_backend` says which one runs.

Both run on the same small thread pool over the same disjoint ranges, and both
report the smallest bad index over all ranges, so results never depend on the
thread count.  The padding-nibble check of unpack reads one byte and needs no
kernel.

How the numpy kernels stay near memory speed
--------------------------------------------
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
- **Checks chunk by chunk.**  Pack tests each input chunk for a byte above 15
  (one ``max``) just before packing it, while it is in cache; a search for the
  first bad byte (bool, nibble) looks at one chunk at a time, so rejecting a
  payload costs at most a chunk of extra memory wherever the bad byte is.
- **Small inputs skip all of that**: below :data:`SMALL_LANES` lanes unpack
  is one gather from a 256-row table of byte pairs and pack two strided calls
  (byte arithmetic, so no byte order either).

The thread pool
---------------
Inputs of :data:`THREAD_MIN_LANES` lanes or more (:data:`COMPILED_THREAD_MIN_LANES`
for the compiled kernels, which release the GIL for the whole range) are split
into one contiguous range per core; the calling thread works on the first and
pool threads on the rest.  The pool is created on first use and forgotten in
a child made by ``fork`` (its threads do not exist there); at interpreter exit,
when no new thread may start, the calling thread does every range itself.
``KILN_NP_NUM_THREADS`` (ASCII digits, read once) caps the number of threads;
``1`` turns threading off.

Byte order: every lane dtype is explicitly little-endian (``'<u2'``) and every
step is arithmetic on lane *values*, so on a big-endian host numpy byte-swaps
while loading and storing the lanes: slower, same bytes.  The compiled kernels
work on single bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from ._checks import MAX_INT64, U8, byte_view, check_int, set_module, short_or_long
from ._errors import KilnError
from ._table import Code, DTypeIndex, dtype_info

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

try:
    from . import _kernels
except ImportError:  # built without a C compiler: the numpy kernels below
    _BUILT = False
else:
    _BUILT = True

__all__ = ["kernel_backend", "pack_nibbles", "unpack_nibbles"]

_T = TypeVar("_T")

COMPILED = _BUILT and os.environ.get("KILN_NP_PURE", "").strip() in ("", "0")
"""Whether the compiled kernels run: built, and not turned off by ``KILN_NP_PURE``."""

_NIBBLES = dtype_info(Code.U4)  # the packed rule, ceil(count / 2), lives in the table row
_FOUR_BIT = DTypeIndex((dtype_info(c).dtype_spec, True) for c in (Code.I4, Code.U4, Code.E2M1))
_LANE = np.dtype("<u2")
# Lane constants as numpy scalars: a Python int costs a conversion per ufunc call.
_HIGH_NIBBLE = _LANE.type(0xF0)
_FIFTEEN = _LANE.type(15)
_FOUR = _LANE.type(4)
_FOUR_U8 = np.uint8(4)
# Row b is (b & 15, b >> 4): unpacking a few bytes is one gather; bytes, so no byte order.
_PAIRS = np.stack([np.arange(256) & 15, np.arange(256) >> 4], axis=1).astype(U8)

CHUNK_LANES = 1 << 18
"""Lanes per chunk of the numpy kernels: 512 KiB of unpacked bytes.  Small
enough that a chunk, its source and its scratch (1.25 MiB) stay in a 2 MiB L2;
large enough that two threads rarely wait for the GIL between ufunc calls
(64 Ki-lane chunks measured up to 1.5x slower threaded, see docs/performance.md).
Thread ranges start on chunk boundaries."""

THREAD_MIN_LANES = 1 << 19
"""The numpy kernels run inputs with fewer lanes (1 MiB unpacked) on the
calling thread only."""

COMPILED_THREAD_MIN_LANES = 1 << 21
"""The same for the compiled kernels (4 Mi elements, 2 MiB packed).  A single
thread unpacks that in about 80 us; waking a pool thread and handing it a range
costs 10-30 us on a 2-core machine, more when other processes keep the second
core busy, so smaller inputs run on the calling thread only."""

COMPILED_GRANULE = 1 << 12
"""The compiled kernels' thread ranges start on multiples of this many lanes."""

SMALL_LANES = 1 << 11
"""Below this many lanes the numpy unpack is one table gather (``np.take``)
and pack two strided ufunc calls after one ``max``: fewer calls than the lane
kernels, whose fixed cost is several microseconds."""

_MAX_THREADS = 8

HUGE_PAGE = 1 << 21
"""Bytes of an x86-64 / arm64 transparent huge page."""

ALIGNED_FROM = 1 << 25
"""Outputs of this many bytes or more (32 MiB: glibc maps every allocation this
large afresh) start on a :data:`HUGE_PAGE` boundary, see :func:`empty`."""


@set_module("kiln_np")
def kernel_backend() -> str:
    """Which kernels kiln_np runs for 4-bit codes and byte checks.

    Returns
    -------
    str
        ``"compiled"``: the C extension ``kiln_np._kernels`` (built by
        ``pip install`` where a C compiler exists); ``"numpy"``: the portable
        numpy kernels, used when the extension was not built or the
        environment variable ``KILN_NP_PURE=1`` was set before import.
        Results are the same bytes and errors either way.

    Examples
    --------
    >>> kernel_backend() in ("compiled", "numpy")
    True
    """
    return "compiled" if COMPILED else "numpy"


def empty(shape: int | tuple[int, ...], dtype: npt.DTypeLike, count: int) -> np.ndarray:
    """``np.empty(shape, dtype)`` of ``count`` elements, C order; from
    :data:`ALIGNED_FROM` bytes a view that starts on a huge-page boundary.

    numpy asks Linux for transparent huge pages on large allocations, but malloc
    returns a fresh mapping a few KiB past a 2 MiB boundary, so the last 2 MiB of
    the array are faulted in one 4 KiB page at a time: about 512 faults where a
    huge page takes one.  On this project's VM that costs 1-2 ms per large
    output (unpacking 64 Mi elements into an aligned output: 0.69x ``np.copy``
    against 0.76-0.85x).  The view keeps its base, at most 2 MiB longer, alive;
    the pages it never touches are never backed by memory.  ``count`` (the
    caller knows it) makes the common small case one comparison."""
    if count < ALIGNED_FROM // 8:  # below 32 MiB for every dtype of 8 bytes or fewer
        return np.empty(shape, dtype)
    dt = np.dtype(dtype)
    size = count * dt.itemsize
    if size < ALIGNED_FROM:
        return np.empty(shape, dt)
    raw = np.empty(size + HUGE_PAGE, U8)
    start = -raw.ctypes.data % HUGE_PAGE
    return raw[start : start + size].view(dt).reshape(shape)


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@cache
def _threads() -> int:
    """Threads a large call uses: the usable cores, capped by KILN_NP_NUM_THREADS
    (ASCII digits only: ``str.isdigit`` also accepts ``'²'``, which ``int`` refuses)."""
    setting = os.environ.get("KILN_NP_NUM_THREADS", "").strip()
    valid = setting.isascii() and setting.isdigit() and int(setting) > 0
    limit = int(setting) if valid else _MAX_THREADS
    return max(1, min(_cpu_count(), limit))


@cache
def _pool() -> ThreadPoolExecutor:
    # Imported here, not at the top: most imports of kiln_np never need a thread.
    from concurrent.futures import ThreadPoolExecutor

    # The calling thread takes one range itself, so the pool needs one fewer.
    return ThreadPoolExecutor(max_workers=max(1, _threads() - 1), thread_name_prefix="kiln_np")


if hasattr(os, "register_at_fork"):
    # A forked child inherits the cached pool but none of its threads: a task
    # submitted there would wait forever.  The child makes its own on first use.
    os.register_at_fork(after_in_child=_pool.cache_clear)


def _split(lanes: int, compiled: bool) -> list[tuple[int, int]]:
    """Disjoint lane ranges covering ``[0, lanes)``, one per thread, each
    starting on a chunk boundary (a granule for the compiled kernels)."""
    least = COMPILED_THREAD_MIN_LANES if compiled else THREAD_MIN_LANES
    parts = _threads() if lanes >= least else 1
    if parts == 1:
        return [(0, lanes)]
    granule = COMPILED_GRANULE if compiled else CHUNK_LANES
    step = -(-lanes // parts)
    step = -(-step // granule) * granule
    return [(lo, min(lo + step, lanes)) for lo in range(0, lanes, step)]


def run_ranges(task: Callable[[int, int], _T], lanes: int, *, compiled: bool = False) -> list[_T]:
    """``task(lo, hi)`` over the lane ranges of :func:`_split`, results in range order.

    ``compiled`` picks the compiled kernels' thresholds (tasks that release
    the GIL for a whole range).  The calling thread runs the first range, pool
    threads the others.  A range that no pool thread has started by the time
    the calling thread is done (a busy machine, a thread still waking up) is
    taken back and run by the calling thread, and so is every range when the
    pool refuses work (at interpreter exit)."""
    ranges = _split(lanes, compiled)
    if len(ranges) == 1:
        return [task(*ranges[0])]
    from concurrent.futures import wait

    futures: list[Future[_T]] = []
    try:
        pool = _pool()
        futures.extend(pool.submit(task, lo, hi) for lo, hi in ranges[1:])
    except RuntimeError:  # "cannot schedule new futures after interpreter shutdown"
        pass
    try:
        results = [task(*ranges[0])]
        taken_back = [future.cancel() for future in futures]
        for future, back, (lo, hi) in zip(futures, taken_back, ranges[1:], strict=False):
            results.append(task(lo, hi) if back else future.result())
        results += [task(lo, hi) for lo, hi in ranges[1 + len(futures) :]]
    finally:
        # Never return (or raise) while a worker may still write the output.
        for future in futures:
            future.cancel()
        wait(futures)
    return results


def run_compiled(kernel: Callable[[int, int], _T], count: int, per: int = 2) -> list[_T]:
    """``kernel(lo, hi)``, a compiled kernel over elements ``[lo, hi)``, over
    ``[0, count)``, results in range order.

    Work is counted in units of ``per`` elements (two 4-bit elements, one
    packed byte; four 2- or 6-bit elements, one packed group): below
    :data:`COMPILED_THREAD_MIN_LANES` units one call on the calling thread,
    else one call per range of :func:`run_ranges`, each starting on a unit,
    the last taking the tail."""
    units = count // per
    if units < COMPILED_THREAD_MIN_LANES:
        return [kernel(0, count)]
    return run_ranges(
        lambda lo, hi: kernel(per * lo, count if hi == units else per * hi), units, compiled=True
    )


def smallest_bad(results: list[int]) -> int:
    """The smallest bad index the ranges found (each -1 for none), or -1."""
    bad = [r for r in results if r >= 0]
    return min(bad) if bad else -1


def _out_view(out: object, size: int, rule: str) -> np.ndarray:
    """``out`` as a flat writable uint8 array of exactly ``size`` bytes; ``rule``
    says where ``size`` comes from in the message."""
    dst = byte_view(out, "out", writable=True)
    if dst.size != size:
        raise KilnError(
            "LENGTH",
            f"expected out to hold exactly {rule} = {size} bytes, found {dst.size} "
            f"({short_or_long(size, dst.size)})",
            expected=size,
            found=dst.size,
        )
    return dst


def detach(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """``src``, or a copy of it when it overlaps ``dst``: the kernels read and
    write different ranges on different threads, so they need disjoint memory."""
    return src.copy() if np.may_share_memory(src, dst) else src


def _first_above_chunked(values: np.ndarray, limit: int) -> int:
    """numpy: index of the first byte of ``values`` above ``limit``, or -1.

    One ``max`` per chunk; only a chunk that fails is searched, so the extra
    memory is one chunk's mask, wherever the bad byte is."""
    step = 2 * CHUNK_LANES
    for start in range(0, values.size, step):
        chunk = values[start : start + step]
        if int(chunk.max()) > limit:
            return start + int(np.argmax(chunk > limit))
    return -1


def first_above(src: np.ndarray, limit: int) -> int:
    """The flat index of the first byte above ``limit`` (1 for bool bytes, 15 for
    nibbles: a power of two minus one) in the uint8 array ``src``, or -1.

    One read of ``src``, split across the thread pool for large inputs; the
    smallest bad index over all ranges wins.  Extra memory: none compiled,
    one chunk in numpy."""
    n = src.size
    lanes = n // 2
    if COMPILED:
        if lanes < COMPILED_THREAD_MIN_LANES:  # run_compiled's one call, without its costs
            return _kernels.first_above(src, limit, 0, n)
        return smallest_bad(run_compiled(partial(_kernels.first_above, src, limit), n))

    def scan(lo: int, hi: int) -> int:
        start = 2 * lo
        bad = _first_above_chunked(src[start : n if hi == lanes else 2 * hi], limit)
        return bad if bad < 0 else start + bad

    return smallest_bad(run_ranges(scan, lanes))


def _unpack_lanes(src: np.ndarray, dst16: np.ndarray, lo: int, hi: int) -> int:
    """numpy: ``dst16[i] = src[i] + 15 * (src[i] & 0xF0)`` for ``i`` in ``[lo, hi)``:
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


def _pack_lanes(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, *, check: bool) -> int:
    """numpy: ``dst[i] = (lane_i | lane_i >> 4) & 0xFF`` for lanes ``[lo, hi)`` of
    ``src``.  With ``check``, each chunk is tested for a byte above 15 before it
    is packed; returns the first bad index of ``src`` (chunks before it are
    written) or -1."""
    src16 = src[: 2 * hi].view(_LANE)
    scratch = np.empty(min(CHUNK_LANES, hi - lo), _LANE)
    for start in range(lo, hi, CHUNK_LANES):
        stop = min(start + CHUNK_LANES, hi)
        if check:
            bad = _first_above_chunked(src[2 * start : 2 * stop], 15)
            if bad >= 0:
                return 2 * start + bad
        lanes = src16[start:stop]
        high = scratch[: stop - start]
        np.right_shift(lanes, _FOUR, out=high)
        np.bitwise_or(high, lanes, out=dst[start:stop], casting="unsafe")
    return -1


def unpack_into(src: np.ndarray | bytes, dst: np.ndarray, count: int) -> None:
    """Unpack ``count`` nibbles of ``src`` (a flat uint8 array or ``bytes``,
    exactly ``ceil(count/2)`` bytes, padding already checked, not overlapping
    ``dst``) into the C-contiguous uint8 array ``dst`` of ``count`` bytes, of
    any shape (so a caller can allocate the decoded shape at once and skip a
    view of its bytes)."""
    lanes = count // 2
    if COMPILED:
        if lanes < COMPILED_THREAD_MIN_LANES:  # run_compiled's one call, without its costs
            _kernels.unpack(src, dst, 0, count)
        else:
            run_compiled(partial(_kernels.unpack, src, dst), count)
        return
    if isinstance(src, bytes):
        src = np.frombuffer(src, U8)
    dst = dst.reshape(-1)
    if lanes and lanes < SMALL_LANES:
        # The method, not np.take: numpy's Python wrapper costs about 0.8 µs more a call.
        _PAIRS.take(src[:lanes], 0, dst[: 2 * lanes].reshape(lanes, 2), "clip")
    elif lanes:
        dst16 = dst[: 2 * lanes].view(_LANE)
        run_ranges(lambda lo, hi: _unpack_lanes(src, dst16, lo, hi), lanes)
    if count % 2:
        dst[-1] = src[-1]


def mxfp4_to_float32_into(
    values: np.ndarray, scales: np.ndarray, out: np.ndarray, block: int, *, packed: bool
) -> bool:
    """MXFP4 dequantize on the compiled kernels, for :mod:`kiln_np.mx`.

    ``values``: e2m1 codes as uint8, two per byte (low nibble first) when
    ``packed``, else one per byte (0-15); ``scales``: one e8m0 byte per block of
    ``block`` consecutive elements; ``out``: a float32 array of
    ``scales.size * block`` elements.  Writes ``code value * 2**(scale - 127)``
    (NaN for scale byte 0xff) and returns True, or returns False, writing
    nothing, when the compiled kernels are not active.  The caller has checked
    the codes, the shapes and that every product is exact in float32."""
    if not COMPILED:
        return False
    run_blocks(
        lambda b0, b1: _kernels.mxfp4_to_float32(values, scales, out, block, int(packed), b0, b1),
        scales.size,
        block,
    )
    return True


def run_blocks(kernel: Callable[[int, int], None], blocks: int, elements: int) -> None:
    """``kernel(b0, b1)`` (a compiled kernel over blocks ``[b0, b1)``) over every
    block of ``elements`` elements each: :func:`run_compiled`'s element ranges
    mapped to block boundaries by one monotonic rule, so the block ranges are
    disjoint and cover every block."""
    if not blocks:
        return
    count = blocks * elements
    run_compiled(
        lambda lo, hi: kernel(lo // elements, blocks if hi == count else hi // elements), count
    )


def repack_ggml(
    ggml: np.ndarray, values: np.ndarray, scales: np.ndarray, block_bytes: int, *, to_kiln: bool
) -> bool:
    """GGUF MXFP4 (``block_bytes`` 17) or NVFP4 (36) blocks <-> Kiln e2m1 values and
    scale bytes on the compiled kernels, for :mod:`kiln_np.mx`.

    ``ggml``: the flat uint8 blocks; ``values``: each block's element bytes in
    Kiln's order (16 or 32 per block); ``scales``: each block's scale bytes (1
    or 4).  Writes ``values`` and ``scales`` (``to_kiln``) or ``ggml``, and
    returns True; or returns False, writing nothing, when the compiled kernels
    are not active.  The caller has checked the sizes; the three arrays do not
    overlap."""
    if not COMPILED:
        return False
    blocks = ggml.size // block_bytes
    run_blocks(
        lambda b0, b1: _kernels.repack(ggml, values, scales, block_bytes, int(to_kiln), b0, b1),
        blocks,
        2 * values.size // max(blocks, 1),  # two elements a Kiln byte
    )
    return True


def check_padding(src: np.ndarray | bytes, count: int, context: str = "") -> None:
    """An odd count must leave the last high nibble 0 (case kiln-v2-high-nibble).

    ``src``: the payload, a flat uint8 array or ``bytes``; ``context``
    prefixes the message (the caller's code and shape)."""
    if count % 2 and src[-1] >> 4:
        last = int(src[-1])
        raise KilnError(
            "TYPE",
            f"{context}odd count {count}: expected the padding (high) nibble of the last "
            f"byte to be 0, found byte 0x{last:02x} at byte offset {len(src) - 1} "
            "(case kiln-v2-high-nibble)",
            expected=0,
            found=last,
            index=count,
        )


def pack_into(src: np.ndarray, dst: np.ndarray, *, checked: bool = False) -> int:
    """Pack the uint8 values ``src`` into ``dst`` (``ceil(src.size/2)`` bytes, not
    overlapping ``src``).

    Returns the flat index of the first value above 15, or -1.  Chunks before
    a bad one may already be written: callers that promise an untouched
    destination call :func:`first_above` first and pass ``checked=True``,
    which lets the numpy kernels skip their per-chunk test (the compiled
    kernel's test is fused into its one pass, so it always runs).
    """
    n = src.size
    lanes = n // 2
    if COMPILED:
        if lanes < COMPILED_THREAD_MIN_LANES:  # run_compiled's one call, without its costs
            return _kernels.pack(src, dst, 0, n)
        return smallest_bad(run_compiled(partial(_kernels.pack, src, dst), n))
    if lanes < SMALL_LANES:
        if not checked and n and int(src.max()) > 15:
            return _first_above_chunked(src, 15)
        high = dst[:lanes]  # two strided calls beat the lane kernel's fixed cost here
        np.left_shift(src[1 : 2 * lanes : 2], _FOUR_U8, out=high)
        np.bitwise_or(high, src[0 : 2 * lanes : 2], out=high)
    else:
        bad = smallest_bad(
            run_ranges(lambda lo, hi: _pack_lanes(src, dst, lo, hi, check=not checked), lanes)
        )
        if bad >= 0:
            return bad
    if n % 2:
        if src[-1] > 15:
            return n - 1
        dst[-1] = src[-1]
    return -1


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


def _first_outside_nibble(flat: np.ndarray) -> int:
    """Index of the first value of the integer array ``flat`` outside 0..15, or
    -1; chunk by chunk, so a bad value costs one chunk's mask, not the array's."""
    step = 2 * CHUNK_LANES
    for start in range(0, flat.size, step):
        chunk = flat[start : start + step]
        if int(chunk.min()) < 0 or int(chunk.max()) > 15:
            return start + int(np.argmax((chunk < 0) | (chunk > 15)))
    return -1


@set_module("kiln_np")
def pack_nibbles(values: npt.ArrayLike, *, out: object = None) -> np.ndarray:
    """Pack integers 0-15 two per byte, the earlier element in the low nibble.

    Parameters
    ----------
    values : array_like of integers
        Read in C order; any integer dtype (values must lie in 0..15), or an
        ml_dtypes ``int4``/``uint4``/``float4_e2m1fn`` array, whose storage
        nibbles are packed (``int4`` -1 is the nibble 0xf): the bytes
        :func:`~kiln_np.from_numpy` writes for it.
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
    try:
        arr = np.asarray(values)
    except Exception as exc:  # a ragged list, an __array__ that raises: user input
        raise KilnError(
            "TYPE", f"expected an array of nibble values; numpy cannot make one: {exc}"
        ) from exc
    if _FOUR_BIT[arr.dtype]:
        arr = arr.view(U8)  # ml_dtypes keeps each value's nibble in the low bits of a byte
    elif arr.dtype.kind not in "iu":
        raise KilnError(
            "TYPE",
            "expected nibble values as an integer dtype or an ml_dtypes 4-bit type "
            f"(int4, uint4, float4_e2m1fn), found {arr.dtype}",
        )
    if arr.dtype != U8:
        flat = arr.reshape(-1)
        bad = _first_outside_nibble(flat)
        if bad >= 0:
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
    size = _NIBBLES.byte_length(src.size)
    if out is None:
        dst = np.empty(size, U8)
        bad = pack_into(src, dst)
    else:
        dst = _out_view(out, size, _NIBBLES.length_rule(src.size))
        bad = first_above(src, 15)
        if bad < 0:
            pack_into(detach(src, dst), dst, checked=True)
    if bad >= 0:
        raise nibble_error(src, bad)
    return dst


@set_module("kiln_np")
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
    n = check_int(count, "count", kind="SHAPE", maximum=MAX_INT64)
    # bytes are read as they are (the kernels take any buffer; bytes never
    # overlap an out=), anything else through its flat uint8 view.
    src: np.ndarray | bytes = buf if type(buf) is bytes else byte_view(buf, "buf")
    size = _NIBBLES.byte_length(n)
    if len(src) != size:
        raise KilnError(
            "LENGTH",
            f"expected {_NIBBLES.length_rule(n)} = {size} bytes of packed nibbles, found "
            f"{len(src)} ({short_or_long(size, len(src))})",
            expected=size,
            found=len(src),
        )
    dst = np.empty(n, U8) if out is None else _out_view(out, n, str(n))
    check_padding(src, n)
    unpack_into(src if out is None or isinstance(src, bytes) else detach(src, dst), dst, n)
    return dst
