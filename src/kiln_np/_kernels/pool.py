"""The kernels' thread pool and large-output allocation.

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
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from kiln_np._core.checks import U8

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = [
    "ALIGNED_FROM",
    "CAST_THREAD_MIN_LANES",
    "CHUNK_LANES",
    "COMPILED_GRANULE",
    "COMPILED_THREAD_MIN_LANES",
    "HUGE_PAGE",
    "THREAD_MIN_LANES",
    "cast_into",
    "empty",
    "run_blocks",
    "run_compiled",
    "run_ranges",
    "smallest_bad",
]

_T = TypeVar("_T")

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

_MAX_THREADS = 8

HUGE_PAGE = 1 << 21
"""Bytes of an x86-64 / arm64 transparent huge page."""

ALIGNED_FROM = 1 << 25
"""Outputs of this many bytes or more (32 MiB: glibc maps every allocation this
large afresh) start on a :data:`HUGE_PAGE` boundary, see :func:`empty`."""


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


CAST_THREAD_MIN_LANES = 1 << 17
""":func:`cast_into` runs casts of fewer elements on the calling thread only
(numpy casts 128 Ki float16 to float32 in some 250 us)."""


def cast_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for 1-D arrays of one length, split over the pool:
    numpy's casts between numeric types (ml_dtypes' too) release the GIL.  A
    value past ``dst``'s range becomes an infinity, as IEEE says, with no warning.

    >>> dst = np.empty(3, np.float32)
    >>> cast_into(dst, np.array([1.5, 1e300, -2.0]))
    >>> dst.tolist()
    [1.5, inf, -2.0]
    """

    def task(lo: int, hi: int) -> None:
        with np.errstate(over="ignore"):  # per thread: numpy's error state is
            dst[lo:hi] = src[lo:hi]  # a context variable, not inherited

    run_ranges(task, dst.size, least=CAST_THREAD_MIN_LANES)


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


def _split(lanes: int, compiled: bool, least: int | None = None) -> list[tuple[int, int]]:
    """Disjoint lane ranges covering ``[0, lanes)``, one per thread, each
    starting on a chunk boundary (a granule for the compiled kernels; any lane
    when the caller gives its own threshold ``least``)."""
    if least is None:
        least = COMPILED_THREAD_MIN_LANES if compiled else THREAD_MIN_LANES
        granule = COMPILED_GRANULE if compiled else CHUNK_LANES
    else:
        granule = 1
    parts = _threads() if lanes >= least else 1
    if parts == 1:
        return [(0, lanes)]
    step = -(-lanes // parts)
    step = -(-step // granule) * granule
    return [(lo, min(lo + step, lanes)) for lo in range(0, lanes, step)]


def run_ranges(
    task: Callable[[int, int], _T], lanes: int, *, compiled: bool = False, least: int | None = None
) -> list[_T]:
    """``task(lo, hi)`` over the lane ranges of :func:`_split`, results in range order.

    ``compiled`` picks the compiled kernels' thresholds (tasks that release
    the GIL for a whole range); ``least`` is the caller's own (lanes of work
    heavy enough to split from that many on, at any lane: the quantizers).
    The calling thread runs the first range, pool threads the others.  A
    range that no pool thread has started by the time the calling thread is
    done (a busy machine, a thread still waking up) is taken back and run by
    the calling thread, and so is every range when the pool refuses work (at
    interpreter exit)."""
    ranges = _split(lanes, compiled, least)
    if len(ranges) == 1:
        return [task(*ranges[0])]
    from concurrent.futures import wait

    futures: list[Future[_T]] = []
    # A range taken back stays in the pool's queue until a worker drops it, and
    # with it whatever the task holds (the caller's input and output arrays): the
    # queue holds this cell, emptied on the way out, so they go when the call ends.
    held = [task]
    try:
        pool = _pool()
        futures.extend(pool.submit(_run_held, held, lo, hi) for lo, hi in ranges[1:])
    except RuntimeError:  # "cannot schedule new futures after interpreter shutdown"
        pass
    try:
        results = [task(*ranges[0])]
        taken_back = [future.cancel() for future in futures]
        for future, back, (lo, hi) in zip(futures, taken_back, ranges[1:], strict=False):
            results.append(task(lo, hi) if back else future.result())
        results += [task(lo, hi) for lo, hi in ranges[1 + len(futures) :]]
    finally:
        # Never return (or raise) while a worker may still write the output.  A
        # future cancelled here never runs; waiting on it would wait for a worker
        # to dequeue it, which never comes when every worker is itself in a
        # nested call (run_ranges from inside a pool task).
        wait([future for future in futures if not future.cancel()])
        held.clear()  # every range has run or never will
    return results


def _run_held(held: list[Callable[[int, int], _T]], lo: int, hi: int) -> _T:
    """``held[0](lo, hi)``: a pool thread's range of :func:`run_ranges`."""
    return held[0](lo, hi)


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
    """The smallest bad index the ranges found (each -1 for none), or -1.

    >>> smallest_bad(run_ranges(lambda lo, hi: -1 if hi < 3 else lo, 10))
    0
    >>> smallest_bad([-1, 7, 5, -1])
    5
    """
    bad = [r for r in results if r >= 0]
    return min(bad) if bad else -1


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
