"""Block-scaled tensors (MX, NVFP4-style): :class:`ScaledDescription`.

Given values and their scales, :func:`describe_scaled` reads a chunk of
blocks at a time and summarizes three things at once: the element codes
(unscaled), the scales (one per block; for e8m0 the histogram of scale bytes
is the distribution of scale exponents) and the exact dequantized values, as
:func:`kiln_np.mx.dequantize` computes them; and it counts the blocks that
saturate, are all zero or have a NaN scale.  Which element and scale types
there are, and what each storage byte means, is :mod:`kiln_np.mx`'s table.

No element is dequantized to be summarized: each dequantized value is
``element value[code] * scale value[scale byte]``, so their distribution is the
joint histogram of (scale byte, element code) pairs, at most 256 x 256 bins.
The pairs are counted a chunk at a time (by the compiled kernel
``native.scaled_pairs``, or ``np.bincount``), with each block's saturating and
nonzero flags, in memory order when the blocks run along another axis than
the last (the counts do not depend on the order); every statistic of the
dequantized values then comes from the 65,536 products, each weighted by its
count, and the element-code histogram is the joint histogram's marginal.  Only
the ``first`` values are dequantized.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln_np import mx
from kiln_np._codec import Payload, to_numpy
from kiln_np._core.checks import MAX_INT64, U8, check_int, set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, DType, code_label, dtype_info, row_for_dtype
from kiln_np._files.payload import LazyPayload
from kiln_np._kernels import block_scaled
from kiln_np._kernels.dispatch import Kernel, register
from kiln_np.mx.inputs import repeats
from kiln_np.mx.kinds import ELEMENTS, SCALES, Kind

from . import chunks, plot
from .chunks import Source, as_array, refuse_opaque
from .description import Description, html_table, share
from .patterns import PatternCounts, pattern_floats
from .stats import Summary

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["ScaledDescription", "describe_scaled"]


def _dequantize(values: np.ndarray, scales: np.ndarray, block_size: int) -> np.ndarray:
    """The exact float64 values of ``(r, c)`` elements with ``(r, ceil(c / block_size))``
    scales, with the MX codec's own rule: describe dequantizes only ``first``."""
    return mx.dequantize(
        np.ascontiguousarray(values),
        np.ascontiguousarray(scales),
        block_size=block_size,
        axis=-1,
        dtype=np.float64,
    )


_BINS = 1 << 16
"""Bins of the joint histogram: ``scale byte << 8 | element byte``."""

_LANES = 4
"""Joint histograms the compiled kernel counts into (element index mod 4)."""

_READ = 8
"""A step reads ``_READ * chunks.CHUNK`` elements: they are only counted."""

_SATURATING, _NONZERO, _NOT_A_CODE = 1, 2, 4


@lru_cache(maxsize=16)
def _products(ek: Kind, sk: Kind) -> np.ndarray:
    """``p[s, c]``: element byte ``c`` times scale byte ``s`` in float64, the product
    :func:`kiln_np.mx.dequantize` makes (exact; every NaN the canonical one)."""
    with np.errstate(invalid="ignore"):  # an f8e5m2 inf times a zero f8e4m3 scale
        p = sk.values[:, None] * ek.values[None, :]
    p[np.isnan(p)] = np.nan
    p.flags.writeable = False
    return p


@lru_cache(maxsize=8)
def _code_flags(kind: Kind) -> np.ndarray:
    """By element byte: _SATURATING at an end of the kind's finite range,
    _NONZERO for a value other than +-0, _NOT_A_CODE past the kind's codes
    (e2m1's bytes above 0x0f).

    >>> from kiln_np._core.table import Code
    >>> _code_flags(ELEMENTS[Code.E2M1])[[0, 1, 7, 0x0F, 0x10]].tolist()
    [0, 2, 3, 3, 4]
    """
    v = kind.values[: kind.codes]
    finite = v[np.isfinite(v)]
    flags = np.full(256, _NOT_A_CODE, U8)
    flags[: kind.codes] = np.where((v == finite.max()) | (v == finite.min()), _SATURATING, 0)
    flags[: kind.codes] |= np.where(v != 0, _NONZERO, 0).astype(U8)
    flags.flags.writeable = False
    return flags


class _Pairs:
    """The joint histogram of (scale byte, element byte) pairs and the block counts,
    a chunk of rows at a time, on the compiled kernel or numpy (the same counts)."""

    def __init__(self, kind: Kind, block_size: int) -> None:
        self.flags = _code_flags(kind)
        self.block_size = block_size
        self.joint = np.zeros(_LANES * _BINS, np.int64)
        self.saturated = self.zero_blocks = 0

    def add(self, codes: np.ndarray, sbytes: np.ndarray) -> int:
        """Count ``(a, i, b)`` element bytes in blocks along ``i`` (from ``i = 0``) with
        their ``(a, ceil(i / block_size), b)`` scale bytes; returns the OR of the
        blocks' flags."""
        a, i, b = codes.shape
        if not a * i * b:
            return 0
        sat: int
        zero: int
        seen: int
        sat, zero, seen = PAIRS.pick()(codes, sbytes, self.flags, self.joint, self.block_size)
        self.saturated += sat
        self.zero_blocks += zero
        return seen

    def counts(self) -> np.ndarray:
        """``counts[s, c]``: elements of byte ``c`` in blocks of scale byte ``s``."""
        counts: np.ndarray = self.joint.reshape(_LANES, 256, 256).sum(axis=0)
        return counts


def _pairs_numpy(
    codes: np.ndarray, sbytes: np.ndarray, flags: np.ndarray, joint: np.ndarray, block: int
) -> tuple[int, int, int]:
    """The numpy twin of ``block_scaled.SCALED_PAIRS``: the same counts, all in
    ``joint``'s first lane."""
    i = codes.shape[1]
    index = np.repeat(sbytes, repeats(i, block), axis=1).astype(np.uint16)
    index <<= 8
    index |= codes
    joint[:_BINS] += np.bincount(index.reshape(-1), minlength=_BINS)
    per_block = np.bitwise_or.reduceat(flags[codes], np.arange(0, i, block), axis=1)
    sat = int(np.count_nonzero(per_block & _SATURATING))
    zero = int(np.count_nonzero((per_block & _NONZERO) == 0))
    return sat, zero, int(np.bitwise_or.reduce(per_block, axis=None))


PAIRS = register(Kernel("scaled_pairs", block_scaled.SCALED_PAIRS, _pairs_numpy, None))
"""The pair counts' row in the kernel table (the caller chunks; no split)."""


def _blocks_input(x: Source, what: str) -> tuple[np.ndarray | LazyPayload, DType, Kind]:
    """An array (or a LazyPayload, read lazily), its row and its kind in mx's table."""
    if isinstance(x, Payload):
        info = x.info
        if info.layout is not None:
            raise refuse_opaque(info.code, info.layout)
        arr: np.ndarray | LazyPayload = to_numpy(x.code, x.data, x.shape)
    elif isinstance(x, LazyPayload):
        if x.layout is not None:
            raise refuse_opaque(x.code, x.layout)
        arr = x
    else:
        arr = as_array(x)
    row = row_for_dtype(arr.dtype)
    kind = (ELEMENTS if what == "values" else SCALES).get(row.code)
    if kind is not None and kind.code != row.code and isinstance(arr, np.ndarray):
        # Raw scale bytes are e8m0, as the MX codec reads them.
        arr = arr.view(kind.dtype)
        row = kind.row
    if kind is None or kind.code != row.code:
        kinds = (
            "e2m1, f8e4m3, f8e5m2 or i8 elements (MXFP4, MXFP8, MXINT8)"
            if what == "values"
            else "e8m0 scales (MX; raw uint8 bytes too) or f8e4m3 scales (NVFP4-style)"
        )
        raise KilnError(
            "TYPE",
            f"block-scaled {what}: expected {kinds}, found {code_label(row.code)} ({row.dtype})",
            code=int(row.code),
        )
    return arr, row, kind


Reader = Callable[[int, int, int, int], np.ndarray]


def _rows_reader(x: np.ndarray | LazyPayload, axis: int) -> Reader:
    """``read(r0, r1, c0, c1)``: rows ``[r0, r1)`` and columns ``[c0, c1)`` of ``x``
    seen with ``axis`` last and the other axes flattened in C order (block
    order), as an ``(r, c)`` array: a view of a C-contiguous array with ``axis``
    last, else a new array."""
    if isinstance(x, LazyPayload):  # blocks along its last axis (else decoded whole first)
        lazy = x
        if lazy.ndim == 1:
            return lambda r0, r1, c0, c1: np.asarray(lazy[c0:c1])[None]
        inner = math.prod(lazy.shape[1:-1])  # block rows per leading-axis index
        n = lazy.shape[-1]
        held: dict[tuple[int, int], np.ndarray] = {}  # the rows last decoded

        def read_lazy(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
            span = (r0 // inner, -(-r1 // inner))
            if span not in held:
                held.clear()  # a long row is read in column ranges: decode it once
                held[span] = np.asarray(lazy[span[0] : span[1]]).reshape(-1, n)
            skip = span[0] * inner
            return held[span][r0 - skip : r1 - skip, c0:c1]

        return read_lazy
    moved = np.moveaxis(x, axis, -1)
    lead = moved.shape[:-1]
    if lead and moved.flags.c_contiguous:
        table = moved.reshape(-1, moved.shape[-1])  # a view: nothing copied
        return lambda r0, r1, c0, c1: table[r0:r1, c0:c1]

    def read(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        if not lead:
            return moved[c0:c1][None]
        index = np.unravel_index(np.arange(r0, r1), lead)
        return np.asarray(moved[(*index, slice(c0, c1))])  # type: ignore[arg-type]

    return read


@set_module("kiln_np")
@dataclass(frozen=True, eq=False)
class ScaledDescription:
    """What :func:`describe` found in a block-scaled tensor (values and scales).

    Attributes
    ----------
    values : Description
        The element codes (their exact bit-pattern histogram, unscaled).
    scales : Description
        The scales: one per block (for e8m0, the histogram of scale bytes is
        the distribution of scale exponents, byte - 127).
    dequantized : Description
        The exact dequantized values, as float64: statistics and the
        histogram by binary exponent.
    block_size : int
        Elements per block.
    axis : int
        The axis the blocks run along (non-negative).
    blocks : int
        Number of blocks (``scales.count``).
    saturated : int
        Blocks holding an element at an end of the element type's finite
        range (+-6 for e2m1, +-448 for f8e4m3, +-57344 for f8e5m2, -128 or
        127 for i8): the block's scale could not be smaller.
    zero_blocks : int
        Blocks whose elements are all +-0 (whatever their scale).
    nan_blocks : int
        Blocks whose scale is NaN (e8m0 0xFF; f8e4m3 0x7F, 0xFF), which makes
        every element NaN.

    ``first`` of the three descriptions is in block order: the block axis
    last, the other axes in C order (C order itself when the blocks run along
    the last axis).
    """

    values: Description
    scales: Description
    dequantized: Description
    block_size: int
    axis: int
    blocks: int
    saturated: int
    zero_blocks: int
    nan_blocks: int

    def scale_exponents(self) -> list[tuple[int, int]]:
        """(binary exponent, blocks) of the finite nonzero scales, by exponent.

        Examples
        --------
        >>> from kiln_np import describe
        >>> import ml_dtypes
        >>> values = np.ones(64, ml_dtypes.float4_e2m1fn)
        >>> scales = np.array([0.25, 8.0], ml_dtypes.float8_e8m0fnu)
        >>> describe(values, scales).scale_exponents()
        [(-2, 1), (3, 1)]
        """
        histogram = self.scales.histogram
        assert histogram is not None
        values = pattern_floats(self.scales.dtype)
        usable = np.isfinite(values) & (values != 0) & (histogram > 0)
        exponents = np.frexp(values[usable])[1] - 1
        counts = histogram[usable]
        unique, where = np.unique(exponents, return_inverse=True)
        totals = np.zeros(unique.size, np.int64)
        np.add.at(totals, where, counts)
        return list(zip(unique.tolist(), totals.tolist(), strict=True))

    def rows(self) -> list[tuple[str, str]]:
        """The block summary as (label, text) rows.

        Examples
        --------
        >>> from kiln_np import describe
        >>> import ml_dtypes
        >>> values = np.zeros(64, ml_dtypes.float4_e2m1fn)
        >>> scales = np.ones(2, ml_dtypes.float8_e8m0fnu)
        >>> describe(values, scales).rows()[0]
        ('blocks', '2 of 32 elements each, along axis 0')
        """
        top = pattern_floats(self.values.dtype)
        largest = float(np.max(np.abs(top[np.isfinite(top)])))
        exponents = self.scale_exponents()
        spread = (
            f"{exponents[0][0]} .. {exponents[-1][0]}; most common: "
            + ", ".join(
                f"{e} ({share(c, self.blocks)})"
                for e, c in sorted(exponents, key=lambda ec: -ec[1])[:4]
            )
            if exponents
            else "-"
        )
        return [
            ("blocks", f"{self.blocks} of {self.block_size} elements each, along axis {self.axis}"),
            ("saturated", f"{self.saturated} (hold +-{largest:g}, the largest element)"),
            ("all zero", str(self.zero_blocks)),
            ("NaN scale", str(self.nan_blocks)),
            ("scale exponents", spread),
        ]

    def __repr__(self) -> str:
        head = (
            f"<kiln_np.ScaledDescription of {self.values.name} {self.values.shape} with "
            f"{self.scales.name} scales {self.scales.shape}>"
        )
        lines = [head] + [f"  {k:<16}  {v}" for k, v in self.rows()]
        for label, part in (
            ("scales", self.scales),
            ("values", self.values),
            ("dequantized", self.dequantized),
        ):
            lines.append(f"  {label}:")
            lines += ["  " + line for line in repr(part).splitlines()[1:]]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = "".join(
            f"<h4>{label}</h4>{part._repr_html_()}"
            for label, part in (
                ("scales", self.scales),
                ("values", self.values),
                ("dequantized", self.dequantized),
            )
        )
        return html_table(self.rows()) + parts

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data.

        Returns
        -------
        dict
            ``block_size``, ``axis``, ``blocks``, ``saturated``,
            ``zero_blocks``, ``nan_blocks``, ``scale_exponents`` (pairs of
            exponent and blocks), and ``values``, ``scales``, ``dequantized``
            as :meth:`Description.to_dict` gives them.

        Examples
        --------
        >>> from kiln_np import describe
        >>> import ml_dtypes
        >>> values = np.full(32, 6.0, ml_dtypes.float4_e2m1fn)
        >>> scales = np.ones(1, ml_dtypes.float8_e8m0fnu)
        >>> describe(values, scales).to_dict()["saturated"]
        1
        """
        return {
            "block_size": self.block_size,
            "axis": self.axis,
            "blocks": self.blocks,
            "saturated": self.saturated,
            "zero_blocks": self.zero_blocks,
            "nan_blocks": self.nan_blocks,
            "scale_exponents": [list(pair) for pair in self.scale_exponents()],
            "values": self.values.to_dict(),
            "scales": self.scales.to_dict(),
            "dequantized": self.dequantized.to_dict(),
        }

    def plot(self, axes: Sequence[Axes] | None = None, *, log: bool = False) -> list[Axes]:
        """Draw three panels: blocks by scale exponent, the element codes, and
        the dequantized values by binary exponent.

        Needs matplotlib.  A figure made here lays itself out (constrained
        layout); given ``axes``, the figure's layout is yours.

        Parameters
        ----------
        axes : sequence of three matplotlib.axes.Axes, optional
            Where to draw; a new figure's three axes by default.
        log : bool
            Logarithmic count axes.

        Returns
        -------
        list of matplotlib.axes.Axes
            The three axes drawn on.

        Examples
        --------
        >>> from kiln_np import describe
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import ml_dtypes
        >>> values = np.ones(64, ml_dtypes.float4_e2m1fn)
        >>> scales = np.array([0.25, 8.0], ml_dtypes.float8_e8m0fnu)
        >>> [ax.get_xlabel() for ax in describe(values, scales).plot()][0]
        'scale exponent (scale = 2^e)'
        """
        drawn = list(axes) if axes is not None else plot.figure((16, 4), 3)[1]
        if len(drawn) != 3:
            raise KilnError("SHAPE", f"expected three axes to draw on, found {len(drawn)}")
        first, second, third = drawn
        plot.draw_scale_exponents(first, self.scale_exponents(), log)
        first.set_title(
            f"{self.blocks} blocks of {self.block_size}: {self.saturated} saturated, "
            f"{self.zero_blocks} all zero",
            **plot.PLAIN,
        )
        self.values.plot(second, log=log, what="patterns")
        second.set_title(f"{self.values.name} element codes (unscaled)", **plot.PLAIN)
        self.dequantized.plot(third, log=log, what="exponents")
        third.set_title(f"dequantized: {self.dequantized.count} values", **plot.PLAIN)
        return drawn


def _block_order(
    read_v: Reader, read_s: Reader, rows: int, n: int, bs: int, elements: int
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(r0, c0, values, scales)``: chunks of about ``elements`` in block order (rows
    of the block axis), each starting on a block."""
    step = max(1, elements // max(n, 1))  # rows per chunk
    cols = n if step > 1 else bs * max(1, elements // bs)
    for r0 in range(0, rows, step):
        r1 = min(r0 + step, rows)
        for c0 in range(0, n, cols):
            c1 = min(c0 + cols, n)
            yield r0, c0, read_v(r0, r1, c0, c1), read_s(r0, r1, c0 // bs, -(-c1 // bs))


def _memory_order(
    p: int, n: int, q: int, bs: int, elements: int
) -> Iterator[tuple[int, int, int, int]]:
    """``(a0, a1, i0, i1)``: chunks of about ``elements`` of a ``(p, n, q)`` array in
    memory order, in blocks along ``n`` (``i0`` on a block).

    >>> list(_memory_order(2, 3, 4, 2, 100)), list(_memory_order(1, 6, 4, 2, 16))
    ([(0, 2, 0, 3)], [(0, 1, 0, 4), (0, 1, 4, 6)])
    """
    slab = n * q
    if slab <= elements:
        step = max(1, elements // max(slab, 1))
        for a0 in range(0, p, step):
            yield a0, min(a0 + step, p), 0, n
        return
    span = bs * max(1, elements // (bs * q))
    for a in range(p):
        for i0 in range(0, n, span):
            yield a, a + 1, i0, min(i0 + span, n)


class _Scan:
    """One pass over a block-scaled tensor: the pairs counted, the scales summarized,
    the first elements (block order) kept and dequantized."""

    def __init__(
        self,
        v: np.ndarray | LazyPayload,
        s: np.ndarray | LazyPayload,
        axis: int,
        bs: int,
        kinds: tuple[Kind, DType, DType],
        first: int,
    ) -> None:
        kind, self.vrow, srow = kinds
        shape = tuple(v.shape)
        n = shape[axis]
        self.n, self.bs, self.first = n, bs, first
        self.rows = math.prod(shape) // n if n else 0
        self.moved = (*shape[:axis], *shape[axis + 1 :], n)
        self.vsum = Summary(self.vrow, self.moved, first)
        self.ssum = Summary(srow, (*self.moved[:-1], -(-n // bs)), first)
        self.dsum = Summary(dtype_info(Code.F64), self.moved, first)
        self.read_v, self.read_s = _rows_reader(v, axis), _rows_reader(s, axis)
        self.pairs = _Pairs(kind, bs)
        self.elements = _READ * chunks.CHUNK

    def chunks(self) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        return _block_order(self.read_v, self.read_s, self.rows, self.n, self.bs, self.elements)

    def refuse(self, at: int, vc: np.ndarray) -> None:
        """Raise TYPE for the first byte of ``vc`` (from block-order element ``at``)
        that is no element code, as a pattern count names it."""
        check = PatternCounts(self.vrow, self.moved)
        check.seen = at
        check.add(vc.reshape(-1))

    def take_first(self, vc: np.ndarray, sc: np.ndarray) -> None:
        if self.dsum.taken < self.first:  # only these are dequantized
            head = min(vc.shape[0], -(-(self.first - self.dsum.taken) // vc.shape[1]))
            self.vsum.add_first(vc[:head].reshape(-1))
            self.dsum.add_first(_dequantize(vc[:head], sc[:head], self.bs).reshape(-1))

    def in_block_order(self) -> None:
        """Everything in one pass over rows of the block axis."""
        for r0, c0, vc, sc in self.chunks():
            if self.pairs.add(vc.view(U8)[:, :, None], sc.view(U8)[:, :, None]) & _NOT_A_CODE:
                self.refuse(r0 * self.n + c0, vc)
            self.ssum.add(sc.reshape(-1))
            self.take_first(vc, sc)

    def in_memory_order(self, v3: np.ndarray, s3: np.ndarray) -> None:
        """Blocks across the rows of memory (``(p, n, q)`` bytes, blocks along ``n``):
        counted in memory order, with no transposing copy; the first elements, in
        block order, read apart."""
        bs = self.bs
        p, n, q = v3.shape
        for a0, a1, i0, i1 in _memory_order(p, n, q, bs, self.elements):
            sc = s3[a0:a1, i0 // bs : -(-i1 // bs)]
            if self.pairs.add(v3[a0:a1, i0:i1], sc) & _NOT_A_CODE:
                for r0, c0, vc, _ in self.chunks():  # the first bad byte in block order
                    self.refuse(r0 * n + c0, vc)
            self.ssum.add_patterns(np.bincount(sc.reshape(-1), minlength=256))
        if not self.first:
            return
        for _, _, vc, sc in self.chunks():
            self.ssum.add_first(sc.reshape(-1))
            self.take_first(vc, sc)
            if self.dsum.taken >= self.first and self.ssum.taken >= self.first:
                break


def describe_scaled(
    values: Source, scales: Source, block_size: object, axis: object, first: int
) -> ScaledDescription:
    v, vrow, vkind = _blocks_input(values, "values")
    s, srow, skind = _blocks_input(scales, "scales")
    shape, found = tuple(v.shape), tuple(s.shape)
    if not shape:
        raise KilnError(
            "SHAPE", "block-scaled values: expected an array of at least one dimension, found ()"
        )
    ax = check_int(axis, "axis", kind="SHAPE", minimum=-len(shape), maximum=len(shape) - 1)
    ax %= len(shape)
    size = skind.block_size if block_size is None else block_size
    bs = check_int(size, "block_size", kind="SHAPE", minimum=1, maximum=MAX_INT64)
    n = shape[ax]
    nb = -(-n // bs)
    expected = (*shape[:ax], nb, *shape[ax + 1 :])
    if found != expected:
        raise KilnError(
            "SHAPE",
            f"block-scaled values of shape {shape} in blocks of {bs} along axis {ax}: "
            f"expected scales of shape {expected}, found {found}",
            shape=found,
        )
    if ax != len(shape) - 1:  # only a LazyPayload's leading-axis rows read lazily
        v, s = np.asarray(v), np.asarray(s)
    scan = _Scan(v, s, ax, bs, (vkind, vrow, srow), first)
    p, q = math.prod(shape[:ax]), math.prod(shape[ax + 1 :])
    if q > 1 and isinstance(v, np.ndarray) and isinstance(s, np.ndarray):
        if v.flags.c_contiguous and s.flags.c_contiguous:
            scan.in_memory_order(v.view(U8).reshape(p, n, q), s.view(U8).reshape(p, nb, q))
        else:
            scan.in_block_order()
    else:
        scan.in_block_order()
    vsum, ssum, dsum, pairs = scan.vsum, scan.ssum, scan.dsum, scan.pairs
    joint = pairs.counts()  # the dequantized values' distribution, exactly
    vsum.add_patterns(joint.sum(axis=0)[: vkind.codes])
    used = np.flatnonzero(joint)
    dsum.add_counted(_products(vkind, skind).reshape(-1)[used], joint.reshape(-1)[used])
    assert ssum.patterns is not None  # scales are 8-bit types: counted by byte
    return ScaledDescription(
        values=dataclasses.replace(vsum.result(), shape=shape),
        scales=dataclasses.replace(ssum.result(), shape=found),
        dequantized=dataclasses.replace(dsum.result(), shape=shape),
        block_size=bs,
        axis=ax,
        blocks=math.prod(found),
        saturated=pairs.saturated,
        zero_blocks=pairs.zero_blocks,
        nan_blocks=int(ssum.patterns.counts[np.isnan(skind.values)].sum()),
    )
