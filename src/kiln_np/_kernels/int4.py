"""4-bit codes packed eight to an int32 word (GPTQ, AWQ, compressed-tensors
pack-quantized) dequantized to float rows: the kernel behind the int4 schemes.

:func:`int4_rows` writes rows of the logical ``(out, in)`` weight: element
``(o, i)`` is ``(code - zero) * scale`` computed as each reference computes it,
a float32 product (exact: a 5-bit integer times the scale's significand, for
float16 and bfloat16 scales) rounded once to nearest even to the scales' dtype
(``native``), then once more to the output dtype where it differs.  ``code`` is
the 4-bit value at ``(o, i)`` in one of the :data:`LAYOUTS`; ``scale`` and
``zero`` are the row's values for column ``i``'s group ``gidx[i]``.

The compiled kernel (``native.int4_rows``, src/kiln_np/_kernels/int4.c) makes a
16-entry table of the rounded values per row and group, then looks each code
up (16 at a time with SSSE3 byte shuffles where the groups allow); rows are
split over the thread pool.  The numpy kernel (used without the
extension or with ``KILN_NP_PURE=1``) does the same arithmetic with numpy's and
ml_dtypes' ``astype`` for the roundings: the same bits.

>>> import numpy as np
>>> words = np.array([[0x76543210], [0xFEDCBA98]], np.uint32).view(np.int32)  # (in/8, out)
>>> out = np.empty((1, 16), np.float32)
>>> scale, zero = np.array([[0.5]], np.float32), np.array([[8]], np.int32)
>>> int4_rows(words, "gptq", 0, np.zeros(16, np.int32), 16, scale, zero, "float16", out)
>>> out[0].tolist()[:4], out[0].tolist()[-1]
([-4.0, -3.5, -3.0, -2.5], 3.5)
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from kiln_np._core.table import as_dtype
from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the row's compiled driver is None
    from kiln_np._kernels import native

__all__ = ["AWQ_NIBBLE", "INT4_ROWS", "KINDS", "LAYOUTS", "int4_rows"]

LAYOUTS = {"gptq": 0, "awq": 1, "rows": 2}
"""Where the code of element ``(o, i)`` is, and the compiled kernel's number:
``gptq`` words ``(in/8, out)``, word ``[i // 8, o]``, nibble ``i % 8``;
``awq`` words ``(in, out/8)``, word ``[i, o // 8]``, nibble ``AWQ_NIBBLE[o % 8]``;
``rows`` words ``(out, ceil(in/8))``, word ``[o, i // 8]``, nibble ``i % 8``.
Nibble ``k`` of a word is its bits ``[4k, 4k + 4)``."""

AWQ_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)
"""The nibble of an AWQ gemm word holding column ``8j + c``, for ``c`` in 0-7
(AutoAWQ packs columns in the order 0, 2, 4, 6, 1, 3, 5, 7)."""

KINDS = {"float32": 0, "bfloat16": 1, "float16": 2}
"""The float dtypes (scales' and output's) and the compiled kernel's code for each."""

_NUMPY_ELEMENTS = 1 << 18
"""Elements a step of the numpy kernel computes (its scratch is a few times this)."""


def int4_rows(
    words: np.ndarray,
    layout: str,
    r0: int,
    gidx: np.ndarray,
    group: int,
    scale: np.ndarray,
    zero: np.ndarray,
    native_dtype: str,
    out: np.ndarray,
) -> None:
    """Write ``out`` (``(rows, in)``, float32, bfloat16 or float16): logical rows
    ``[r0, r0 + rows)`` from the 2-D int32 ``words`` in ``layout``.

    ``gidx`` (int32, ``in``) is each column's group, ``group`` > 0 when it is
    ``i // group`` (the compiled kernel then finds a word's table once), else 0;
    ``scale`` (float32) and
    ``zero`` (int32) are ``(rows, groups)``; ``native_dtype`` is the scales'
    dtype name, the one the product is rounded to first.  The caller has
    checked the shapes and that every ``gidx`` is below ``groups``."""
    rows, n_in = out.shape
    if not rows or not n_in:
        return
    INT4_ROWS.pick()(words, layout, r0, gidx, group, scale, zero, native_dtype, out)


def _rows_compiled(
    words: np.ndarray,
    layout: str,
    r0: int,
    gidx: np.ndarray,
    group: int,
    scale: np.ndarray,
    zero: np.ndarray,
    native_dtype: str,
    out: np.ndarray,
) -> None:
    rows, n_in = out.shape
    lay, nat, okind = LAYOUTS[layout], KINDS[native_dtype], KINDS[out.dtype.name]
    wcols = words.shape[1]

    def task(lo: int, hi: int) -> None:
        native.int4_rows(words, lay, wcols, r0, gidx, group, scale, zero, nat, out, okind, lo, hi)

    least = -(-pool.COMPILED_THREAD_MIN_LANES // n_in)
    pool.run_ranges(task, rows, compiled=True, least=least)


def _rows_numpy(
    words: np.ndarray,
    layout: str,
    r0: int,
    gidx: np.ndarray,
    group: int,
    scale: np.ndarray,
    zero: np.ndarray,
    native_dtype: str,
    out: np.ndarray,
) -> None:
    rows, n_in = out.shape
    step = max(1, _NUMPY_ELEMENTS // n_in)
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        _numpy_rows(words, layout, r0, gidx, scale, zero, native_dtype, out, lo, hi)


def _codes(words: np.ndarray, layout: str, o: np.ndarray, n_in: int) -> np.ndarray:
    """The 4-bit codes of logical rows ``o``, ``(len(o), n_in)`` uint32."""
    w = words.view(np.uint32)
    i = np.arange(n_in)
    if layout == "gptq":
        picked, shift = w[i >> 3][:, o].T, (4 * (i & 7))[None, :]
    elif layout == "awq":
        nibble = np.array(AWQ_NIBBLE)[o & 7]
        picked, shift = w[:, o >> 3].T, (4 * nibble)[:, None]
    else:
        picked, shift = w[o][:, i >> 3], (4 * (i & 7))[None, :]
    codes: np.ndarray = (picked >> shift.astype(np.uint32)) & np.uint32(15)
    return codes


def _numpy_rows(
    words: np.ndarray,
    layout: str,
    r0: int,
    gidx: np.ndarray,
    scale: np.ndarray,
    zero: np.ndarray,
    native_dtype: str,
    out: np.ndarray,
    lo: int,
    hi: int,
) -> None:
    n_in = out.shape[1]
    codes = _codes(words, layout, np.arange(r0 + lo, r0 + hi), n_in)
    diff = np.arange(16, dtype=np.int32) - zero[lo:hi, :, None]  # (rows, groups, 16)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf, as the reference
        product = diff.astype(np.float32) * scale[lo:hi, :, None]
        table: Any = product.astype(as_dtype(native_dtype)).astype(out.dtype)
    r = np.arange(hi - lo)[:, None]
    out[lo:hi] = table[r, gidx[None, :], codes]


INT4_ROWS = register(
    Kernel(
        "int4_rows",
        _rows_compiled if backend.BUILT else None,
        _rows_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # elements, split by whole rows
    )
)
"""The row of :func:`int4_rows`: its arguments, the same bits."""
