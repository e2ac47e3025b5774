"""Quantize float32 to GGML blocks: on the compiled kernels where they are built,
on the numpy encoders otherwise, split over the thread pool by whole blocks.

Both write ggml's bytes for every block: what ``ggml_quantize_chunk`` (what
``llama-quantize`` runs) writes with no importance matrix, or with one
(``tests/quants/test_ggml_quantize.py`` and ``test_ggml_quantize_imatrix.py`` hold
them to ggml's own output and to each other).  Every block is encoded on its own
(with an importance matrix, Q4_0 ... Q5_1's blocks also take their row's mean
square, computed once per row a range of blocks touches), so the result does
not depend on how the blocks are split over threads.  ggml's result on a NaN or
an infinity is undefined, and its i-quant quantizers abort (``GGML_ASSERT``) on
some blocks of huge magnitudes: both refuse them, exactly where ggml aborts,
reporting the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._kernels import ggml, pool
from kiln_np._kernels.dispatch import Kernel, register

from . import (
    encode_basic,
    encode_fp4,
    encode_iq1,
    encode_iq2,
    encode_iq3,
    encode_iq4,
    encode_k_min,
    encode_k_sym,
)
from .blocks import BLOCKS, Block
from .encoder import Encoder, GGMLAbortError, RowWeightedEncoder, WeightedEncoder

__all__ = [
    "ENCODERS",
    "IGNORES_IMATRIX",
    "NEEDS_IMATRIX",
    "ROW_WEIGHTED",
    "WEIGHTED",
    "encoder",
    "quantize_into",
    "refusal",
    "unquantizable",
]

_FAMILIES: tuple[Any, ...] = (
    encode_basic,
    encode_fp4,
    encode_iq1,
    encode_iq2,
    encode_iq3,
    encode_iq4,
    encode_k_min,
    encode_k_sym,
)
"""The encoder modules: each has ``ENCODERS`` and (but those weighing by row or
not at all) ``WEIGHTED``, by GGML name."""


def _by_type(table: str) -> Mapping[str, Any]:
    """The families' ``table`` merged, in type-id order."""
    return MappingProxyType(
        {
            name: found
            for name in BLOCKS
            for family in _FAMILIES
            if (found := getattr(family, table, {}).get(name)) is not None
        }
    )


ENCODERS: Mapping[str, Encoder] = _by_type("ENCODERS")
"""Every GGML block type kiln_np quantizes: its numpy encoder, by GGML name."""

WEIGHTED: Mapping[str, WeightedEncoder] = _by_type("WEIGHTED")
"""Every GGML block type kiln_np quantizes with an importance matrix from each
block's own values and weights: its numpy encoder, by GGML name."""

ROW_WEIGHTED: Mapping[str, RowWeightedEncoder] = encode_basic.ROW_WEIGHTED
"""The GGML block types kiln_np quantizes with an importance matrix whose blocks
also take their row's ``sigma2`` (Q4_0 ... Q5_1): their numpy encoders, by GGML
name.  :data:`WEIGHTED_KERNELS` holds both kinds."""

IGNORES_IMATRIX = ("Q1_0", "Q2_0", "Q8_0", "MXFP4", "NVFP4", "TQ1_0", "TQ2_0")
"""The types whose ggml quantizers take no notice of an importance matrix."""

NEEDS_IMATRIX = ("IQ2_XXS", "IQ2_XS", "IQ1_S")
"""The types ggml quantizes only with an importance matrix
(``ggml_quantize_requires_imatrix``: ``ggml_quantize_chunk`` asserts one)."""

_NOT_STORED = ("Q8_1", "Q8_K")

_CHUNK_ELEMENTS = 1 << 14
"""Elements the numpy encoders take at a time: their float32 temporaries (a few
dozen per element for the k-quants' searches) stay in a 2 MiB L2 cache."""

_THREAD_MIN_ELEMENTS = 1 << 15
"""Inputs with fewer elements are quantized on the calling thread only (the
cheapest encoder, Q8_0, takes some 30 us for them)."""


def encoder(name: str) -> tuple[Block, Encoder] | None:
    """The block type and numpy encoder of GGML type ``name``, or None.

    >>> encoder("Q8_0")[0].bytes, encoder("IQ2_XXS")
    (34, None)
    """
    found = ENCODERS.get(name)
    return None if found is None else (BLOCKS[name], found)


def refusal(name: str) -> str:
    """Why GGML type ``name`` (a key of :data:`BLOCKS` that :data:`ENCODERS` lacks)
    is not quantized, as a sentence to end an error message.

    >>> print(refusal("Q8_K"))
    Q8_K is an intermediate type of ggml's dot products, not one it stores
    >>> print(refusal("IQ2_XXS"))
    IQ2_XXS is quantized only with an importance matrix (ggml asserts one;
    llama-quantize needs --imatrix for IQ2_XXS)
    """
    if name in NEEDS_IMATRIX:
        return (
            f"{name} is quantized only with an importance matrix (ggml asserts one; "
            f"llama-quantize needs --imatrix for {name})"
        )
    if name in _NOT_STORED:
        return f"{name} is an intermediate type of ggml's dot products, not one it stores"
    return f"kiln_np has no quantizer for {name}"


def unquantizable(type_name: str, shape: tuple[int, ...], flat: int, value: object) -> KilnError:
    """The TYPE error for what :func:`quantize_into` refused at flat index ``flat`` of
    an input of ``shape`` (``value``: the input's own value there): a NaN or
    infinity (or a float64 past float32's range), or, where ``value`` is finite, the
    first element of a block on which ggml's quantizer aborts.

    >>> print(unquantizable("Q8_0", (2, 32), 37, float("nan")).message)
    expected finite values to quantize to Q8_0 (ggml's result on NaN and infinity
    is undefined), found nan at index (1, 5)
    >>> print(unquantizable("IQ3_S", (1, 256), 0, 3e38).message)
    expected values ggml can quantize to IQ3_S, found a block of 256 from index (0, 0)
    on which ggml's quantizer aborts (a GGML_ASSERT: its grid search overflows float32
    on values this large); llama-quantize stops there too
    """
    index = tuple(int(i) for i in np.unravel_index(flat, shape))
    found = float(value)  # type: ignore[arg-type]
    if np.isfinite(found) and abs(found) <= _F32_MAX:
        elements = BLOCKS[type_name].elements
        return KilnError(
            "TYPE",
            f"expected values ggml can quantize to {type_name}, found a block of {elements} "
            f"from index {index} on which ggml's quantizer aborts (a GGML_ASSERT: its grid "
            "search overflows float32 on values this large); llama-quantize stops there too",
            shape=shape,
            index=flat,
        )
    beyond = " (beyond float32's range)" if np.isfinite(found) else ""
    return KilnError(
        "TYPE",
        f"expected finite values to quantize to {type_name} (ggml's result on NaN and "
        f"infinity is undefined), found {found}{beyond} at index {index}",
        shape=shape,
        index=flat,
    )


_F32_MAX = float(np.finfo(np.float32).max)


def _first_bad(src: np.ndarray, block: Block, bad_block: int) -> int:
    """The flat index of the first NaN or infinity of block ``bad_block`` of ``src``,
    or of its first element when it has none (a block ggml aborts on)."""
    part = src[bad_block * block.elements : (bad_block + 1) * block.elements]
    bad = np.flatnonzero(~np.isfinite(part))
    return bad_block * block.elements + (int(bad[0]) if bad.size else 0)


def _numpy_range(
    enc: Callable[[int, int], np.ndarray], x: np.ndarray, out: np.ndarray, b0: int, b1: int
) -> int:
    """Encode blocks [b0, b1) of the rows ``x`` into the rows ``out`` (``enc(lo, hi)``:
    blocks [lo, hi) encoded); the first block holding a NaN or infinity or on which
    ggml aborts (the blocks before it written), or -1."""
    step = max(1, _CHUNK_ELEMENTS // x.shape[1])
    with np.errstate(all="ignore"):  # 1/d of a tiny d, inf * 0: ggml's arithmetic
        for c in range(b0, b1, step):
            end = min(c + step, b1)
            finite = np.isfinite(x[c:end]).all(axis=1)
            bad = -1 if finite.all() else c + int(np.argmin(finite))
            end = end if bad < 0 else bad
            try:
                if end > c:
                    out[c:end] = enc(c, end)
            except GGMLAbortError as abort:
                if abort.block:
                    out[c : c + abort.block] = enc(c, c + abort.block)
                return c + abort.block
            if bad >= 0:
                return bad
    return -1


def quantize_into(
    name: str, src: np.ndarray, dst: np.ndarray, weights: np.ndarray | None = None
) -> int:
    """Quantize the C-contiguous float32 ``src`` (whole blocks of GGML type ``name``,
    which :func:`encoder` knows) into the flat uint8 ``dst`` of as many blocks; the
    two do not overlap.  Returns -1, or the flat index of the first NaN or infinity
    of ``src``, or of the first element of the first block on which ggml's
    quantizer aborts (:func:`unquantizable` tells them apart and says it); then
    ``dst`` holds a prefix of the blocks and no more is meant.

    ``weights``, an importance matrix's row (C-contiguous float32, whole blocks,
    finite), makes ``src`` whole rows of ``weights.size`` values, quantized as
    ``ggml_quantize_chunk`` does with ``quant_weights``: with the type's weighted
    encoder (:data:`WEIGHTED`), or as without them for the types ggml quantizes
    without looking at them (:data:`IGNORES_IMATRIX`).

    >>> dst = np.empty(34, np.uint8)
    >>> quantize_into("Q8_0", np.full(32, 2.0, np.float32), dst), dst[:4].tolist()
    (-1, [8, 36, 127, 127])
    >>> quantize_into("Q8_0", np.array([0.0] * 5 + [np.inf] * 27, np.float32), dst)
    5
    """
    if weights is None or name in IGNORES_IMATRIX:
        found = KERNELS[name].pick()(src, dst)
    else:
        found = WEIGHTED_KERNELS[name].pick()(src, weights, dst)
    bad = pool.smallest_bad(found)
    return -1 if bad < 0 else _first_bad(src, BLOCKS[name], bad)


def _least(block: Block) -> int:
    return max(1, _THREAD_MIN_ELEMENTS // block.elements)


def _numpy_blocks(name: str, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """The numpy twin of the compiled driver of GGML type ``name``."""
    block, enc = BLOCKS[name], ENCODERS[name]
    count = src.size // block.elements
    x = src.reshape(count, block.elements)
    out = dst.reshape(count, block.bytes)
    return pool.run_ranges(
        lambda b0, b1: _numpy_range(lambda lo, hi: enc(x[lo:hi]), x, out, b0, b1),
        count,
        least=_least(block),
    )


def _numpy_weighted(name: str, src: np.ndarray, weights: np.ndarray, dst: np.ndarray) -> list[int]:
    """The numpy twin of the compiled weighted driver of GGML type ``name``: block
    ``i`` of ``src`` (whole rows of ``weights.size``) takes the weights of its place
    in its row (and, for :data:`ROW_WEIGHTED`, its row's ``sigma2``, computed once
    per row a range touches)."""
    block = BLOCKS[name]
    count = src.size // block.elements
    x = src.reshape(count, block.elements)
    out = dst.reshape(count, block.bytes)
    qw = weights.reshape(-1, block.elements)
    per_row = len(qw)

    def blocks(b0: int, b1: int) -> int:
        if name in WEIGHTED:
            enc = WEIGHTED[name]
            return _numpy_range(
                lambda lo, hi: enc(x[lo:hi], qw[np.arange(lo, hi) % per_row]), x, out, b0, b1
            )
        by_row = ROW_WEIGHTED[name]
        first = b0 // per_row
        rows = src.reshape(-1, weights.size)[first : -(-b1 // per_row)]
        with np.errstate(all="ignore"):  # a row's squares may overflow, as in ggml
            sigma2 = encode_basic.row_sigma2(rows)

        def weighted(lo: int, hi: int) -> np.ndarray:
            at = np.arange(lo, hi)
            return by_row(x[lo:hi], qw[at % per_row], sigma2[at // per_row - first])

        return _numpy_range(weighted, x, out, b0, b1)

    return pool.run_ranges(blocks, count, least=_least(block))


def _kernel(name: str, weighted: bool = False) -> Kernel:
    """Type ``name``'s row of the kernel table: with importance weights or without."""
    block = BLOCKS[name]
    drive = ggml.weighted_encoder if weighted else ggml.encoder
    return register(
        Kernel(
            f"ggml_from_float32{'_weighted' * weighted}.{name}",
            drive(block.type_id, block.elements, partial(_least, block)),
            partial(_numpy_weighted if weighted else _numpy_blocks, name),
            _least(block),  # blocks
        )
    )


KERNELS: Mapping[str, Kernel] = MappingProxyType({name: _kernel(name) for name in ENCODERS})
"""Each quantizable type's row in the kernel table: ``(src, dst) -> bad block per range``."""

WEIGHTED_KERNELS: Mapping[str, Kernel] = MappingProxyType(
    {
        name: _kernel(name, weighted=True)
        for name in BLOCKS
        if name in WEIGHTED or name in ROW_WEIGHTED
    }
)
"""Each type's row with importance weights: ``(src, weights, dst) -> bad block per range``."""
