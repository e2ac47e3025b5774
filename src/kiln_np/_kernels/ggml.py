"""GGML block coders on the compiled kernels: the compiled drivers of the rows that
``kiln_np._quants`` registers (their numpy twins are the block decoders and
encoders there, a floor up), split over the thread pool by whole blocks.

>>> 8 in DECODE_TYPES or not DECODE_TYPES  # Q8_0, where the extension is built
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

from kiln_np._kernels import backend, pool

with contextlib.suppress(ImportError):  # not built: no compiled driver
    from kiln_np._kernels import native

__all__ = [
    "DECODE_TYPES",
    "QUANT_TYPES",
    "THRESHOLD",
    "WEIGHTED_TYPES",
    "decoder",
    "encoder",
    "weighted_encoder",
]

THRESHOLD = pool.COMPILED_THREAD_MIN_LANES
"""The decoders' threading threshold: lanes of two elements, split by whole blocks."""

DECODE_TYPES: frozenset[int] = (
    frozenset(t for t, _, _ in native.ggml_types()) if backend.BUILT else frozenset()
)
"""The GGML type ids the compiled kernels decode."""

QUANT_TYPES: frozenset[int] = (
    frozenset(t for t, _, _, plain, _ in native.ggml_quant_types() if plain)
    if backend.BUILT
    else frozenset()
)
"""The GGML type ids the compiled kernels quantize without importance weights."""

WEIGHTED_TYPES: frozenset[int] = (
    frozenset(t for t, _, _, _, w in native.ggml_quant_types() if w)
    if backend.BUILT
    else frozenset()
)
"""The GGML type ids the compiled kernels quantize with importance weights."""


def decoder(
    type_id: int, elements: int, *, bfloat16: bool = False
) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """The compiled driver ``(blocks, out)`` decoding whole blocks of ``type_id``
    (``elements`` each) into float32, or with ``bfloat16`` into ``out``'s
    bfloat16 bits (uint16: ggml's float32 values rounded as ml_dtypes rounds, in
    the cache); None where it is not built.

    >>> decoder(-1, 32) is None, decoder(-1, 32, bfloat16=True) is None
    (True, True)
    """
    if type_id not in DECODE_TYPES:
        return None
    entry = native.ggml_to_bfloat16 if bfloat16 else native.ggml_to_float32

    def run(blocks: np.ndarray, out: np.ndarray) -> None:
        pool.run_blocks(
            lambda b0, b1: entry(type_id, blocks, out, b0, b1), out.size // elements, elements
        )

    return run


def encoder(
    type_id: int, elements: int, least: Callable[[], int]
) -> Callable[[np.ndarray, np.ndarray], list[int]] | None:
    """The compiled driver ``(src, dst) -> first bad block per range`` quantizing
    float32 into whole blocks of ``type_id`` (``elements`` each), split over the
    pool from ``least()`` blocks on (read at call time), or None where it is not built.

    >>> encoder(-1, 32, lambda: 1) is None
    True
    """
    if type_id not in QUANT_TYPES:
        return None

    def run(src: np.ndarray, dst: np.ndarray) -> list[int]:
        return pool.run_ranges(
            lambda b0, b1: native.ggml_from_float32(type_id, src, dst, b0, b1),
            src.size // elements,
            least=least(),
        )

    return run


def weighted_encoder(
    type_id: int, elements: int, least: Callable[[], int]
) -> Callable[[np.ndarray, np.ndarray, np.ndarray], list[int]] | None:
    """The compiled driver ``(src, weights, dst) -> first bad block per range``: as
    :func:`encoder`, with importance weights (float32, one row: ``src`` is whole
    rows of ``weights.size`` values), or None where it is not built.

    >>> weighted_encoder(-1, 32, lambda: 1) is None
    True
    """
    if type_id not in WEIGHTED_TYPES:
        return None

    def run(src: np.ndarray, weights: np.ndarray, dst: np.ndarray) -> list[int]:
        return pool.run_ranges(
            lambda b0, b1: native.ggml_from_float32_weighted(type_id, src, weights, dst, b0, b1),
            src.size // elements,
            least=least(),
        )

    return run
