"""Block-scaled kernels' drivers: MXFP4 dequantize and GGUF MXFP4/NVFP4 repacking
on the compiled kernels, split over the thread pool by whole blocks."""

from __future__ import annotations

import contextlib

import numpy as np

from kiln_np._kernels import backend, pool

with contextlib.suppress(ImportError):  # not built: backend.COMPILED is False
    from kiln_np._kernels import native

__all__ = ["mxfp4_to_float32_into", "repack_ggml"]


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
    the codes, the shapes and that every product is exact in float32.

    >>> import numpy as np
    >>> codes, scale = np.full(16, 0x22, np.uint8), np.array([128], np.uint8)
    >>> out = np.zeros(32, np.float32)
    >>> done = mxfp4_to_float32_into(codes, scale, out, 32, packed=True)  # 1.0 x 2**1
    >>> out.tolist() == ([2.0] * 32 if done else [0.0] * 32)
    True
    """
    if not backend.COMPILED:
        return False
    pool.run_blocks(
        lambda b0, b1: native.mxfp4_to_float32(values, scales, out, block, int(packed), b0, b1),
        scales.size,
        block,
    )
    return True


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
    if not backend.COMPILED:
        return False
    blocks = ggml.size // block_bytes
    pool.run_blocks(
        lambda b0, b1: native.repack(ggml, values, scales, block_bytes, int(to_kiln), b0, b1),
        blocks,
        2 * values.size // max(blocks, 1),  # two elements a Kiln byte
    )
    return True
