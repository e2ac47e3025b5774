"""Exact block-scaled values: :func:`dequantize` and its exactness check.

Every product of an element and its scale is exact in float64; a narrower
output is allowed when each product is exact in it.  That is decided by a
table per (element, scale, output) of which products are exact, read first
over the scale bytes alone (two reductions decide almost every tensor) and,
only when some scale byte could be inexact, over the elements too, a chunk of
rows at a time, to name the first block that is.  The values are then
gathered from a lookup table per element kind, 2 or 4 at a time, and scaled,
one cache-sized chunk at a time, or decoded by the compiled MXFP4 kernel.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from kiln_np._core.checks import set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, dtype_info
from kiln_np._kernels import block_scaled, pool

from .inputs import (
    Source,
    blocked_shape,
    check_axis,
    check_block_size,
    repeats,
    scales_bytes,
    values_source,
)
from .kinds import SCALES, Kind

__all__ = ["dequantize"]

_CHUNK_ELEMENTS = 1 << 16
"""Elements decoded per step: the gather table, the chunk and its scales stay in cache."""

_E8M0 = SCALES[Code.E8M0]


@lru_cache(maxsize=1)
def _out_dtypes() -> tuple[np.dtype[Any], ...]:
    """The output dtypes :func:`dequantize` makes (bfloat16 loads ml_dtypes)."""
    numpy_own = (np.float32, np.float64, np.float16)
    return (*(np.dtype(t) for t in numpy_own), dtype_info(Code.BF16).dtype)


# -- exactness -------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _exact_table(ek: Kind, sk: Kind, out: np.dtype[Any]) -> np.ndarray:
    """``ok[s, c]``: is element byte ``c`` times scale byte ``s`` exact in ``out``?"""
    with np.errstate(over="ignore", invalid="ignore"):
        p = sk.values[:, None] * ek.values[None, :]
        back = p.astype(out).astype(np.float64)
    ok: np.ndarray = (back == p) | np.isnan(p)
    ok[:, ek.codes :] = True  # not element codes (e2m1 bytes above 0x0f are refused)
    ok.flags.writeable = False
    return ok


def _first_inexact(
    codes: np.ndarray,
    sbytes: np.ndarray,
    ok: np.ndarray,
    dims: tuple[int, int, int],
    block_size: int,
) -> tuple[int, int] | None:
    """(flat block index in C order of the (P, nb, Q) scales, flat element index in
    C order of the (P, n, Q) values) of the first bad product, or None.

    Looks a chunk of rows at a time (rows are the outermost axis, so the first
    chunk holding a bad product holds the first bad block), with each pair's
    entry of ``ok`` found by one ``take`` at ``scale << 8 | code``."""
    p, n, q = dims
    nb = -(-n // block_size)
    s3 = sbytes.reshape(p, nb, q)
    c3 = codes.reshape(p, n, q)
    table = ok.reshape(-1)
    reps = repeats(n, block_size)
    rows = max(1, _CHUNK_ELEMENTS // max(1, n * q))
    for r0 in range(0, p, rows):
        r1 = min(p, r0 + rows)
        index = np.repeat(s3[r0:r1], reps, axis=1).astype(np.uint16) << 8
        index |= c3[r0:r1]
        bad = ~table.take(index)
        if bad.any():
            per_block = np.logical_or.reduceat(bad, np.arange(0, n, block_size), axis=1)
            bp, bb, bq = np.unravel_index(int(np.flatnonzero(per_block)[0]), per_block.shape)
            lo = int(bb) * block_size
            inside = int(np.flatnonzero(bad[bp, lo : lo + block_size, bq])[0])
            block = int(np.ravel_multi_index((r0 + int(bp), int(bb), int(bq)), (p, nb, q)))
            return block, int(np.ravel_multi_index((r0 + int(bp), lo + inside, int(bq)), dims))
    return None


def _inexact_error(
    ek: Kind,
    sk: Kind,
    out: np.dtype[Any],
    codes: np.ndarray,
    sbytes: np.ndarray,
    where: tuple[int, int],
    values_shape: tuple[int, ...],
    scales_shape: tuple[int, ...],
) -> KilnError:
    block, element = where
    c = int(codes[element])
    s = int(sbytes[block])
    exact = float(ek.values[c]) * float(sk.values[s])
    with np.errstate(over="ignore"):
        rounded = float(np.float64(exact).astype(out))
    why = "overflows" if math.isinf(rounded) else f"would round to {rounded!r}"
    bidx = np.unravel_index(block, scales_shape) if scales_shape else ()
    eidx = np.unravel_index(element, values_shape) if values_shape else ()
    return KilnError(
        "TYPE",
        f"block {tuple(int(i) for i in bidx)}: element {tuple(int(i) for i in eidx)} "
        f"({ek.name} 0x{c:02x} = {float(ek.values[c])!r}) times its scale ({sk.name} "
        f"0x{s:02x} = {float(sk.values[s])!r}) is {exact!r}, which {out.name} cannot hold "
        f"exactly (it {why}); expected every product exact in {out.name}: pass "
        f"dtype=numpy.float64, which holds every MX product",
        expected=out.name,
        found=exact,
        index=element,
    )


# -- the decode -----------------------------------------------------------------------


@lru_cache(maxsize=16)
def _gather_table(kind: Kind, compute: np.dtype[Any], packed: bool) -> tuple[np.ndarray, int, int]:
    """A lookup table from a 1- or 2-byte index to that index's elements' values.

    Returns ``(table, bytes per index, elements per index)``; the table's dtype is
    an unsigned integer or complex128 as wide as those values, so one ``take``
    moves 2 or 4 values at once without reading them as floats.
    """
    v = kind.values.astype(compute)
    per_byte = 2 if packed else 1
    width = compute.itemsize
    index_bytes = 2 if 2 * per_byte * width <= 16 else 1
    i = np.arange(256**index_bytes)
    parts = [(i >> (8 * b)) & 0xFF for b in range(index_bytes)]
    if packed:
        parts = [x for b in parts for x in (b & 0x0F, b >> 4)]
    table = np.stack([v[x] for x in parts], axis=1)
    unit = {4: np.uint32, 8: np.uint64, 16: np.complex128}[table.shape[1] * width]
    out: np.ndarray = np.ascontiguousarray(table).view(unit).reshape(-1)
    out.flags.writeable = False
    return out, index_bytes, index_bytes * per_byte


def _gather(src: Source, compute: np.dtype[Any], out_flat: np.ndarray, e0: int, e1: int) -> None:
    """Write the values of elements ``e0:e1`` (unscaled) into ``out_flat[e0:e1]``;
    ``e0`` is a multiple of the elements per index."""
    table, index_bytes, per_index = _gather_table(src.kind, compute, src.packed)
    per_byte = 2 if src.packed else 1
    full = (e1 - e0) // per_index * per_index
    if full:
        b0 = e0 // per_byte
        idx = src.data[b0 : b0 + full // per_byte]
        if index_bytes == 2:
            idx = idx.view("<u2")
        np.take(table, idx, out=out_flat[e0 : e0 + full].view(table.dtype), mode="wrap")
    if e0 + full < e1:
        rest = np.arange(e0 + full, e1)
        codes = (src.data[rest // 2] >> (4 * (rest % 2))) & 0x0F if src.packed else src.data[rest]
        out_flat[e0 + full : e1] = src.kind.values.astype(compute)[codes]


def _decode(
    src: Source,
    sk: Kind,
    sbytes: np.ndarray,
    dims: tuple[int, int, int],
    block_size: int,
    compute: np.dtype[Any],
) -> np.ndarray:
    p, n, q = dims
    out = pool.empty(p * n * q, compute, p * n * q)
    if out.size == 0:
        return out
    nb = -(-n // block_size)
    svalues = sk.values.astype(compute)[sbytes].reshape(p, nb, q)
    reps = repeats(n, block_size)
    row = n * q
    _, _, per_index = _gather_table(src.kind, compute, src.packed)
    align = per_index // math.gcd(row, per_index)
    rows = max(align, _CHUNK_ELEMENTS // row // align * align)
    with np.errstate(invalid="ignore"):  # an f8e5m2 inf times a zero f8e4m3 scale: NaN
        _decode_rows(src, svalues, out, dims, block_size, reps, rows)
    if src.kind.code == Code.F8E5M2 and sk.code == Code.F8E4M3:
        out[np.isnan(out)] = np.nan  # inf x 0: the CPU's default NaN, made canonical
    return out


def _decode_rows(
    src: Source,
    svalues: np.ndarray,
    out: np.ndarray,
    dims: tuple[int, int, int],
    block_size: int,
    reps: int | np.ndarray,
    rows: int,
) -> None:
    p, n, q = dims
    row = n * q
    compute = out.dtype
    for r0 in range(0, p, rows):
        r1 = min(p, r0 + rows)
        e0, e1 = r0 * row, r1 * row
        _gather(src, compute, out, e0, e1)
        if q == 1 and n == block_size:  # one block per row: a flat repeat is fastest
            chunk = out[e0:e1]
            np.multiply(chunk, np.repeat(svalues[r0:r1].reshape(-1), n), out=chunk)
        else:
            chunk = out[e0:e1].reshape(r1 - r0, n, q)
            np.multiply(chunk, np.repeat(svalues[r0:r1], reps, axis=1), out=chunk)


def _compiled_mxfp4(
    src: Source, sk: Kind, out: np.dtype[Any], dims: tuple[int, int, int], block_size: int
) -> bool:
    """Can the compiled MXFP4 kernel (``block_scaled.mxfp4_to_float32_into``) decode this:
    e2m1 times e8m0 into float32, whole blocks one after another in memory?"""
    p, n, q = dims
    return (
        src.kind.code == Code.E2M1
        and sk is _E8M0
        and out == np.float32
        and q == 1
        and n == block_size
        and p * n > 0
        and not (src.packed and block_size % 2)
    )


# -- dequantize ----------------------------------------------------------------------------------


@set_module("kiln_np.mx")
def dequantize(
    values: object,
    scales: object,
    *,
    block_size: int | None = None,
    axis: int = -1,
    dtype: npt.DTypeLike | None = np.float32,
) -> np.ndarray:
    """Exact values of a block-scaled tensor: ``element * scale`` per block.

    Parameters
    ----------
    values : array or Payload
        ml_dtypes ``float4_e2m1fn``, ``float8_e4m3fn``, ``float8_e5m2`` or
        numpy ``int8`` (MXINT8: the byte times 2**-6); or a Kiln payload of
        code 18, 5, 6 or 8; or a tensor of :func:`kiln_np.open_weights`.
    scales : array or Payload
        ``float8_e8m0fnu`` (or raw ``uint8`` bytes read as e8m0; a u8 payload
        too) or ``float8_e4m3fn`` (NVFP4 style: the scale is its value), of
        the values' shape with ``axis`` divided by ``block_size`` rounded up
        (the last block may be partial).
    block_size : int, optional
        Elements per scale: 32 for e8m0 scales, 16 for f8e4m3 when omitted.
    axis : int
        The axis the blocks run along.
    dtype : dtype
        float32 (the default; None means it too, not numpy's float64), float64,
        float16 or bfloat16.

    Returns
    -------
    numpy.ndarray
        A new C-contiguous array of the values' shape and ``dtype``.  An e8m0
        scale 0xff makes its block NaN; a NaN element stays NaN; every NaN
        is ``dtype``'s canonical quiet NaN.

    Raises
    ------
    KilnError
        TYPE for an element, scale or output dtype not listed, an e2m1
        storage byte above 0x0f, or a product ``dtype`` cannot hold exactly
        (naming the first such block; float64 always can); SHAPE for scales
        of the wrong shape, a ``block_size`` below 1, an axis out of range;
        what :func:`kiln_np.to_numpy` raises for a payload.

    Examples
    --------
    >>> import ml_dtypes
    >>> v = np.array([0.5, 1, -6, 3], dtype=ml_dtypes.float4_e2m1fn)
    >>> s = np.array([2.0**-3, 4.0], dtype=ml_dtypes.float8_e8m0fnu)
    >>> dequantize(v, s, block_size=2)
    array([  0.0625,   0.125 , -24.    ,  12.    ], dtype=float32)
    """
    src = values_source(values)
    sk, sbytes = scales_bytes(scales)
    bs = check_block_size(sk.block_size if block_size is None else block_size)
    try:
        out_dtype = np.dtype(np.float32 if dtype is None else dtype)
    except (TypeError, ValueError) as exc:
        raise KilnError("TYPE", f"expected an output dtype, found {show_value(dtype)}") from exc
    if out_dtype not in _out_dtypes():
        raise KilnError(
            "TYPE",
            f"expected dtype float32, float64, float16 or bfloat16, found {out_dtype}",
            found=str(out_dtype),
        )
    shape = src.shape
    a = check_axis(axis, len(shape), f"values of shape {shape}")
    expected = blocked_shape(shape, a, bs)
    if tuple(sbytes.shape) != expected:
        raise KilnError(
            "SHAPE",
            f"expected scales of shape {expected} for values of shape {shape} in blocks of "
            f"{bs} along axis {a}, found {tuple(sbytes.shape)}",
            shape=tuple(sbytes.shape),
            expected=expected,
            found=tuple(sbytes.shape),
        )
    p = math.prod(shape[:a])
    n = shape[a]
    q = math.prod(shape[a + 1 :])
    if n % bs == 0 and n:
        p, n = p * (n // bs), bs  # whole blocks: one block per row, finer chunks
    dims = (p, n, q)
    flat_scales = np.ascontiguousarray(sbytes).reshape(-1)
    compute = np.dtype(np.float64) if out_dtype == np.float64 else np.dtype(np.float32)
    ok = _exact_table(src.kind, sk, out_dtype)
    safe = np.asarray(ok.all(axis=1))
    # Scale bytes usually span a narrow range of safe bytes: two reductions decide.
    if flat_scales.size and not (
        safe[int(flat_scales.min()) : int(flat_scales.max()) + 1].all() or safe[flat_scales].all()
    ):
        codes = src.codes()
        where = _first_inexact(codes, flat_scales, ok, dims, bs)
        if where is not None:
            raise _inexact_error(
                src.kind, sk, out_dtype, codes, flat_scales, where, shape, expected
            )
    if _compiled_mxfp4(src, sk, out_dtype, dims, bs):
        count = math.prod(shape)
        out = pool.empty(count, np.float32, count)
        if block_scaled.mxfp4_to_float32_into(src.data, flat_scales, out, bs, packed=src.packed):
            return out.reshape(shape)
    out = _decode(src, sk, flat_scales, dims, bs, compute)
    if out_dtype != compute:
        out = out.astype(out_dtype)
    return out.reshape(shape)
