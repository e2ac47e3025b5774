"""4-bit pack/unpack and byte-check kernels, compiled or in numpy.

Wire rule: element ``2k`` is the low nibble of byte ``k``, element ``2k+1`` its
high nibble; an odd count leaves the last high nibble 0.

Two implementations, one contract
---------------------------------
- **Compiled** (``kiln_np._kernels``, ``src/kiln_np/native.c``): one fused
  pass per job, reading its input once and writing its output once: unpack;
  pack with the bits-above-the-nibble check fused in; the first byte above a
  limit (the bool 0/1 check and the check that runs before a write to
  ``out=``), with no temporary of any size.  Built by ``pip install`` where a
  C compiler exists; an optional extension, so the install succeeds without
  one.
- **numpy** (below): the portable fallback and the reference the compiled
  kernels are tested against, bit for bit (``tests/kernels/test_kernels.py``).
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
- **Cache-sized chunks.**  Work proceeds `pool.CHUNK_LANES` lanes at a time,
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

Byte order: every lane dtype is explicitly little-endian (``'<u2'``) and every
step is arithmetic on lane *values*, so on a big-endian host numpy byte-swaps
while loading and storing the lanes: slower, same bytes.  The compiled kernels
work on single bytes.
"""

from __future__ import annotations

import contextlib
from functools import partial

import numpy as np
import numpy.typing as npt

from kiln_np._core.checks import MAX_INT64, U8, byte_view, check_int, set_module, short_or_long
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, DTypeIndex, dtype_info
from kiln_np._core.torch_types import is_tensor, tensor_array
from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the rows' compiled drivers are None
    from kiln_np._kernels import native

__all__ = [
    "FIRST_ABOVE",
    "ONE_CALL",
    "PACK",
    "UNPACK",
    "check_padding",
    "first_above",
    "pack_into",
    "pack_nibbles",
    "unpack_into",
    "unpack_nibbles",
]

SMALL_LANES = 1 << 11
"""Below this many lanes the numpy unpack is one table gather (``np.take``)
and pack two strided ufunc calls after one ``max``: fewer calls than the lane
kernels, whose fixed cost is several microseconds."""

ONE_CALL = 2 * pool.COMPILED_THREAD_MIN_LANES
"""Elements below which the compiled pack or unpack is one call of the kernel
(``UNPACK.pick()(src, dst, 0, count)``): the numpy twin splits on its own."""

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
    step = 2 * pool.CHUNK_LANES
    for start in range(0, values.size, step):
        chunk = values[start : start + step]
        if int(chunk.max()) > limit:
            return start + int(np.argmax(chunk > limit))
    return -1


def _first_above_numpy(src: np.ndarray, limit: int, lo: int, hi: int) -> int:
    """The numpy twin of ``native.first_above``: the first index in ``[lo, hi)``,
    split over the thread pool on the numpy kernels' own thresholds."""
    if lo:
        bad = _first_above_numpy(src[lo:hi], limit, 0, hi - lo)
        return bad if bad < 0 else lo + bad
    n = hi
    lanes = n // 2

    def scan(a: int, b: int) -> int:
        start = 2 * a
        bad = _first_above_chunked(src[start : n if b == lanes else 2 * b], limit)
        return bad if bad < 0 else start + bad

    return pool.smallest_bad(pool.run_ranges(scan, lanes))


FIRST_ABOVE = register(
    Kernel(
        "first_above",
        native.first_above if backend.BUILT else None,
        _first_above_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # lanes: two bytes
    )
)
"""The row of ``native.first_above(src, limit, lo, hi)``: bytes ``[lo, hi)``;
threshold in lanes of two bytes."""


def first_above(src: np.ndarray, limit: int) -> int:
    """The flat index of the first byte above ``limit`` (1 for bool bytes, 15 for
    nibbles: a power of two minus one) in the uint8 array ``src``, or -1.

    One read of ``src``, split across the thread pool for large inputs; the
    smallest bad index over all ranges wins.  Extra memory: none compiled,
    one chunk in numpy.

    >>> first_above(np.array([0, 1, 7, 1, 9], np.uint8), 1)
    2
    """
    n = src.size
    run = FIRST_ABOVE.pick()
    if n // 2 < pool.COMPILED_THREAD_MIN_LANES or run is _first_above_numpy:
        bad: int = run(src, limit, 0, n)  # the numpy twin splits on its own thresholds
        return bad
    return pool.smallest_bad(pool.run_compiled(partial(run, src, limit), n))


def _unpack_lanes(src: np.ndarray, dst16: np.ndarray, lo: int, hi: int) -> int:
    """numpy: ``dst16[i] = src[i] + 15 * (src[i] & 0xF0)`` for ``i`` in ``[lo, hi)``:
    the low nibble stays in the low byte, the high nibble moves to the high
    byte."""
    scratch = np.empty(min(pool.CHUNK_LANES, hi - lo), _LANE)
    for start in range(lo, hi, pool.CHUNK_LANES):
        stop = min(start + pool.CHUNK_LANES, hi)
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
    scratch = np.empty(min(pool.CHUNK_LANES, hi - lo), _LANE)
    for start in range(lo, hi, pool.CHUNK_LANES):
        stop = min(start + pool.CHUNK_LANES, hi)
        if check:
            bad = _first_above_chunked(src[2 * start : 2 * stop], 15)
            if bad >= 0:
                return 2 * start + bad
        lanes = src16[start:stop]
        high = scratch[: stop - start]
        np.right_shift(lanes, _FOUR, out=high)
        np.bitwise_or(high, lanes, out=dst[start:stop], casting="unsafe")
    return -1


def _unpack_numpy(src: np.ndarray | bytes, dst: np.ndarray, lo: int, hi: int) -> None:
    """The numpy twin of ``native.unpack``: elements ``[lo, hi)`` (``lo`` even) of
    ``src`` into the same elements of ``dst`` (any 1-byte dtype), split over the
    thread pool on the numpy kernels' own thresholds."""
    if isinstance(src, bytes):
        src = np.frombuffer(src, U8)
    dst = dst.reshape(-1)
    if dst.dtype != U8:
        dst = dst.view(U8)
    if lo:
        src, dst = src[lo // 2 :], dst[lo:]
    count = hi - lo
    lanes = count // 2
    if lanes and lanes < SMALL_LANES:
        # The method, not np.take: numpy's Python wrapper costs about 0.8 µs more a call.
        _PAIRS.take(src[:lanes], 0, dst[: 2 * lanes].reshape(lanes, 2), "clip")
    elif lanes:
        dst16 = dst[: 2 * lanes].view(_LANE)
        pool.run_ranges(lambda a, b: _unpack_lanes(src, dst16, a, b), lanes)
    if count % 2:
        dst[count - 1] = src[lanes] & 15


UNPACK = register(
    Kernel(
        "unpack",
        native.unpack if backend.BUILT else None,
        _unpack_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # lanes: two elements, one packed byte
    )
)
"""The row of ``native.unpack(src, dst, lo, hi)``: elements ``[lo, hi)``; threshold
in lanes.  A call of fewer lanes runs whole: ``UNPACK.pick()(src, dst, 0, count)``."""


def unpack_into(src: np.ndarray | bytes, dst: np.ndarray, count: int) -> None:
    """Unpack ``count`` nibbles of ``src`` (a flat uint8 array or ``bytes``,
    exactly ``ceil(count/2)`` bytes, padding already checked, not overlapping
    ``dst``) into the C-contiguous array ``dst`` of ``count`` bytes, of any
    shape and any 1-byte dtype (so a caller can allocate the decoded array at
    once and skip a view of its bytes).

    >>> dst = np.empty(3, np.uint8)
    >>> unpack_into(b"\\x21\\x03", dst, 3)
    >>> dst.tolist()
    [1, 2, 3]
    """
    run = UNPACK.pick()
    if count // 2 < pool.COMPILED_THREAD_MIN_LANES or run is _unpack_numpy:
        run(src, dst, 0, count)  # the numpy twin splits on its own thresholds
    else:
        pool.run_compiled(partial(run, src, dst), count)


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


def _pack_numpy(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, check: bool = True) -> int:
    """The numpy twin of ``native.pack``: elements ``[lo, hi)`` (``lo`` even) of
    ``src`` (C-contiguous, any 1-byte dtype) into bytes ``[lo / 2, ...)`` of
    ``dst``; the first index above 15, or -1.  ``check=False`` skips the per-chunk
    test (the caller has run :func:`first_above`)."""
    src = src.reshape(-1)
    if src.dtype != U8:
        src = src.view(U8)
    bad = _pack_flat(src[lo:hi], dst[lo // 2 :] if lo else dst, check)
    return bad if bad < 0 else lo + bad


def _pack_flat(src: np.ndarray, dst: np.ndarray, check: bool) -> int:
    """:func:`_pack_numpy` of all of the flat uint8 ``src``."""
    n = src.size
    lanes = n // 2
    if lanes < SMALL_LANES:
        if check and n and int(src.max()) > 15:
            return _first_above_chunked(src, 15)
        high = dst[:lanes]  # two strided calls beat the lane kernel's fixed cost here
        np.left_shift(src[1 : 2 * lanes : 2], _FOUR_U8, out=high)
        np.bitwise_or(high, src[0 : 2 * lanes : 2], out=high)
    else:
        bad = pool.smallest_bad(
            pool.run_ranges(lambda a, b: _pack_lanes(src, dst, a, b, check=check), lanes)
        )
        if bad >= 0:
            return bad
    if n % 2:
        if src[-1] > 15:
            return n - 1
        dst[lanes] = src[-1]
    return -1


PACK = register(
    Kernel(
        "pack",
        native.pack if backend.BUILT else None,
        _pack_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # lanes: two elements, one packed byte
    )
)
"""The row of ``native.pack(src, dst, lo, hi) -> index``: elements ``[lo, hi)``;
threshold in lanes.  A call of fewer lanes runs whole: ``PACK.pick()(src, dst, 0, n)``."""


def pack_into(src: np.ndarray, dst: np.ndarray, *, checked: bool = False) -> int:
    """Pack the values ``src`` (flat, C-contiguous, uint8) into ``dst``
    (``ceil(src.size/2)`` bytes, not overlapping ``src``).

    Returns the flat index of the first value above 15, or -1.  Chunks before
    a bad one may already be written: callers that promise an untouched
    destination call :func:`first_above` first and pass ``checked=True``,
    which lets the numpy kernels skip their per-chunk test (the compiled
    kernel's test is fused into its one pass, so it always runs).

    >>> dst = np.empty(2, np.uint8)
    >>> pack_into(np.array([1, 2, 3], np.uint8), dst), dst.tobytes().hex(" ")
    (-1, '21 03')
    """
    n = src.size
    run = PACK.pick()
    if run is _pack_numpy:  # the flat uint8 case of the twin; splits on its own thresholds
        return _pack_flat(src, dst, not checked)
    if n // 2 < pool.COMPILED_THREAD_MIN_LANES:  # run_compiled's one call, without its costs
        found: int = run(src, dst, 0, n)
        return found
    return pool.smallest_bad(pool.run_compiled(partial(run, src, dst), n))


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
    step = 2 * pool.CHUNK_LANES
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
        arr = tensor_array(values) if is_tensor(values) else np.asarray(values)
    except KilnError:
        raise
    except Exception as exc:  # a ragged list, an __array__ that raises: user input
        raise KilnError(
            "TYPE", f"expected an array of nibble values; numpy cannot make one: {exc}"
        ) from exc
    dtype = arr.dtype
    if dtype != U8 and dtype.kind not in "iu":  # uint8, the common case: one comparison
        if not _FOUR_BIT.lookup(dtype):
            raise KilnError(
                "TYPE",
                "expected nibble values as an integer dtype or an ml_dtypes 4-bit type "
                f"(int4, uint4, float4_e2m1fn), found {arr.dtype}",
            )
        arr = arr.view(U8)  # ml_dtypes keeps each value's nibble in the low bits of a byte
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
