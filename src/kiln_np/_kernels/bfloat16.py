"""float32 rounded to bfloat16 bits, as ml_dtypes rounds, without importing ml_dtypes.

ml_dtypes takes most of a second to import (it registers its casts with numpy), so
a conversion that only writes bfloat16 (``kiln-np convert --to hf --dequantize
bf16``) works on the bits: a ``uint16`` array is the bfloat16 array's bytes.  The
rounding is ml_dtypes' ``astype``: to nearest even, past the largest finite value
an infinity, a NaN the quiet NaN ``0x7fc0`` of its sign (ggml's own
``GGML_FP32_TO_BF16`` keeps a NaN's top payload bits instead).

Two implementations, the same bits (``tests/kernels/test_bfloat16.py``): the
compiled loop (``native.float32_to_bfloat16``, split over the thread pool) and the
numpy twin, which is ml_dtypes' own cast (so it imports ml_dtypes) and runs when
the extension is absent or ``KILN_NP_PURE=1``.  Widening back is exact and needs no
table: :func:`widen_bfloat16_into` shifts the bits.

>>> import numpy as np
>>> bits = np.empty(3, np.uint16)
>>> round_bfloat16_into(bits, np.float32([1.0, 1.00390625, -np.inf]))
>>> [hex(b) for b in bits.tolist()]
['0x3f80', '0x3f80', '0xff80']
"""

from __future__ import annotations

import contextlib

import numpy as np

from kiln_np._core.table import load_ml_dtypes
from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the row's compiled driver is None
    from kiln_np._kernels import native

__all__ = ["FLOAT32_TO_BFLOAT16", "round_bfloat16_into", "widen_bfloat16_into"]


def _compiled(dst: np.ndarray, src: np.ndarray) -> None:
    pool.run_compiled(lambda lo, hi: native.float32_to_bfloat16(src, dst, lo, hi), src.size, per=1)


def _numpy(dst: np.ndarray, src: np.ndarray) -> None:
    bf16 = dst.view(load_ml_dtypes().bfloat16)

    def task(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN: no warning
            bf16[lo:hi] = src[lo:hi]  # (per thread: numpy's error state is not inherited)

    pool.run_ranges(task, src.size, least=pool.CAST_THREAD_MIN_LANES)


FLOAT32_TO_BFLOAT16 = register(
    Kernel(
        "float32_to_bfloat16",
        _compiled if backend.BUILT else None,
        _numpy,
        pool.COMPILED_THREAD_MIN_LANES,
    )
)
"""The row: ``(dst, src)``, ``src`` 1-D float32, ``dst`` 1-D uint16 of its length
(the bfloat16 bits), split over the pool from its threshold (elements) on."""


def round_bfloat16_into(dst: np.ndarray, src: np.ndarray) -> None:
    """The C-contiguous 1-D float32 ``src`` rounded to bfloat16 into the uint16
    ``dst`` of its length (the bits, host order); the two do not overlap.

    >>> bits = np.empty(2, np.uint16)
    >>> round_bfloat16_into(bits, np.float32([np.nan, -np.nan]))
    >>> [hex(b) for b in bits.tolist()]
    ['0x7fc0', '0xffc0']
    """
    FLOAT32_TO_BFLOAT16.pick()(dst, src)


def widen_bfloat16_into(dst: np.ndarray, src: np.ndarray) -> None:
    """The bfloat16 bits ``src`` (uint16) as float32 into ``dst`` of its length:
    the bits shifted into the high half, exact (NaN payloads kept), as ml_dtypes
    widens.

    >>> out = np.empty(2, np.float32)
    >>> widen_bfloat16_into(out, np.array([0x3F80, 0xC040], np.uint16))
    >>> out.tolist()
    [1.0, -3.0]
    """
    np.left_shift(src, 16, out=dst.view(np.uint32), dtype=np.uint32)
