"""Block-scaled kernels' drivers: MXFP4 dequantize and GGUF MXFP4/NVFP4 repacking
on the compiled kernels, split over the thread pool by whole blocks.

:mod:`kiln_np.mx` runs its own chunked numpy code when these return False (the
numpy kernels are on); the rows' numpy twins here are the plain reference the
compiled kernels are held to, bit for bit."""

from __future__ import annotations

import contextlib

import numpy as np

from kiln_np._kernels import backend, pool
from kiln_np._kernels.dispatch import Kernel, register

with contextlib.suppress(ImportError):  # not built: the rows' compiled drivers are None
    from kiln_np._kernels import native

__all__ = ["MXFP4", "REPACK", "SCALED_PAIRS", "mxfp4_to_float32_into", "repack_ggml"]

_E2M1 = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
)
_GGML_BLOCKS = {17: (1, 32), 36: (4, 16)}  # block bytes: (scale bytes, elements a group)


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
    if not MXFP4.runs_compiled():
        return False
    MXFP4.pick()(values, scales, out, block, packed)
    return True


def _mxfp4_compiled(
    values: np.ndarray, scales: np.ndarray, out: np.ndarray, block: int, packed: bool
) -> None:
    pool.run_blocks(
        lambda b0, b1: native.mxfp4_to_float32(values, scales, out, block, int(packed), b0, b1),
        scales.size,
        block,
    )


def _mxfp4_numpy(
    values: np.ndarray, scales: np.ndarray, out: np.ndarray, block: int, packed: bool
) -> None:
    codes = np.stack([values & 15, values >> 4], axis=-1).reshape(-1) if packed else values
    power = np.ldexp(1.0, scales.astype(np.int64) - 127)
    with np.errstate(invalid="ignore"):
        exact = _E2M1[codes[: out.size]] * np.repeat(power, block)
    exact[np.repeat(scales == 0xFF, block)] = np.nan
    out[...] = exact.astype(np.float32)
    out.view(np.uint32)[np.isnan(out)] = 0x7FC00000  # the canonical quiet NaN


MXFP4 = register(
    Kernel(
        "mxfp4_to_float32",
        _mxfp4_compiled if backend.BUILT else None,
        _mxfp4_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # lanes of two elements, split by whole blocks
    )
)
"""The row of :func:`mxfp4_to_float32_into`: ``(values, scales, out, block, packed)``."""


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
    if not REPACK.runs_compiled():
        return False
    REPACK.pick()(ggml, values, scales, block_bytes, to_kiln)
    return True


def _repack_compiled(
    ggml: np.ndarray, values: np.ndarray, scales: np.ndarray, block_bytes: int, to_kiln: bool
) -> None:
    blocks = ggml.size // block_bytes
    pool.run_blocks(
        lambda b0, b1: native.repack(ggml, values, scales, block_bytes, int(to_kiln), b0, b1),
        blocks,
        2 * values.size // max(blocks, 1),  # two elements a Kiln byte
    )


def _repack_numpy(
    ggml: np.ndarray, values: np.ndarray, scales: np.ndarray, block_bytes: int, to_kiln: bool
) -> None:
    header, group = _GGML_BLOCKS[block_bytes]
    blocks = ggml.reshape(-1, block_bytes)
    m = blocks.shape[0]
    body, heads = values.reshape(m, -1), scales.reshape(m, header)
    if to_kiln:
        split = blocks[:, header:].reshape(m, -1, group // 2)
        codes = np.concatenate([split & 15, split >> 4], axis=2).reshape(m, -1)
        body[...] = codes[:, 0::2] | codes[:, 1::2] << 4
        heads[...] = blocks[:, :header]
    else:
        grouped = np.stack([body & 15, body >> 4], axis=2).reshape(m, -1, group)
        half = group // 2
        blocks[:, header:] = (grouped[:, :, :half] | grouped[:, :, half:] << 4).reshape(m, -1)
        blocks[:, :header] = heads


REPACK = register(
    Kernel(
        "repack",
        _repack_compiled if backend.BUILT else None,
        _repack_numpy,
        pool.COMPILED_THREAD_MIN_LANES,  # lanes of two elements, split by whole blocks
    )
)
"""The row of :func:`repack_ggml`: ``(ggml, values, scales, block_bytes, to_kiln)``."""


def _scaled_pairs(
    codes: np.ndarray, sbytes: np.ndarray, flags: np.ndarray, joint: np.ndarray, block: int
) -> tuple[int, int, int]:
    a, i, b = codes.shape
    codes, sbytes = np.ascontiguousarray(codes), np.ascontiguousarray(sbytes)
    return native.scaled_pairs(codes, sbytes, flags, joint, i, b, block, 0, a)


SCALED_PAIRS = _scaled_pairs if backend.BUILT else None
"""The compiled driver of the block-scaled pair counts (``kiln_np._explore.scaled``
registers its row, with the numpy twin): ``(codes, sbytes, flags, joint, block) ->
(saturated, zero blocks, flags seen)``, counting into ``joint``'s four lanes."""
