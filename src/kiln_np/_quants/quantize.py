"""Quantize float32 to GGML blocks: on the compiled kernels where they are built,
on the numpy encoders otherwise, split over the thread pool by whole blocks.

Both write ggml's bytes for every block: what ``ggml_quantize_chunk`` (what
``llama-quantize`` runs) writes with no importance matrix
(``tests/quants/test_ggml_quantize.py`` holds them to ggml's own output and to
each other).  Every block is encoded on its own, so the result does not depend
on how the blocks are split over threads.  ggml's result on a NaN or an
infinity is undefined, and its IQ3_S quantizer aborts on some blocks of huge
magnitudes: both refuse them (NaN, infinity, and for the types of
:data:`LIMITS` magnitudes from the limit on), reporting the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from types import MappingProxyType

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._kernels import ggml, pool
from kiln_np._kernels.dispatch import Kernel, register

from . import encode_basic, encode_fp4, encode_iq3, encode_iq4, encode_k_min, encode_k_sym
from .blocks import BLOCKS, Block
from .encoder import Encoder

__all__ = [
    "ENCODERS",
    "LIMITS",
    "NEEDS_IMATRIX",
    "encoder",
    "not_finite",
    "quantize_into",
    "refusal",
]

ENCODERS: Mapping[str, Encoder] = MappingProxyType(
    {
        name: found
        for name in BLOCKS  # in type-id order
        for family in (encode_basic, encode_fp4, encode_iq3, encode_iq4, encode_k_min, encode_k_sym)
        if (found := family.ENCODERS.get(name)) is not None
    }
)
"""Every GGML block type kiln_np quantizes: its numpy encoder, by GGML name."""

NEEDS_IMATRIX = ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ1_M")
"""The grid types, whose ggml quantizers are meant to run with an importance matrix."""

LIMITS: Mapping[str, float] = MappingProxyType({"IQ3_S": encode_iq3.LIMIT})
"""The types whose ggml quantizer aborts on some finite blocks: the magnitude (a power
of two) from which a value is refused, below which ggml never does."""

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
    """
    if name in NEEDS_IMATRIX:
        return (
            f"{name} is quantized with an importance matrix (llama-quantize refuses IQ1 and "
            "IQ2 types without one; IQ3 is made for one), which kiln_np does not take"
        )
    if name in _NOT_STORED:
        return f"{name} is an intermediate type of ggml's dot products, not one it stores"
    return f"kiln_np has no quantizer for {name}"


def not_finite(type_name: str, shape: tuple[int, ...], flat: int, value: object) -> KilnError:
    """The TYPE error for the value :func:`quantize_into` refused at flat index ``flat``
    of an input of ``shape``: a NaN or infinity, or a magnitude from the limit of
    :data:`LIMITS` on (``value``: the input's own value there, which may be a float64
    finite but past float32's range).

    >>> print(not_finite("Q8_0", (2, 32), 37, float("nan")).message)
    expected finite values to quantize to Q8_0 (ggml's result on NaN and infinity
    is undefined), found nan at index (1, 5)
    >>> print(not_finite("IQ3_S", (256,), 7, 1e30).message)
    expected magnitudes below 2**38 to quantize to IQ3_S (ggml's search overflows
    float32 from about 2**42 on and aborts on such blocks), found 1e+30 at index (7,)
    """
    index = tuple(int(i) for i in np.unravel_index(flat, shape))
    found = float(value)  # type: ignore[arg-type]
    limit = LIMITS.get(type_name)
    with np.errstate(over="ignore"):  # a float64 past float32's range: inf
        in_float32 = bool(np.isfinite(np.float32(found)))
    if limit is not None and in_float32:
        return KilnError(
            "TYPE",
            f"expected magnitudes below 2**{int(np.log2(limit))} to quantize to {type_name} "
            "(ggml's search overflows float32 from about 2**42 on and aborts on such "
            f"blocks), found {found} at index {index}",
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


def _refused(name: str, x: np.ndarray) -> np.ndarray:
    """Where float32 ``x`` holds values :func:`quantize_into` refuses for type ``name``."""
    limit = LIMITS.get(name)
    refused: np.ndarray = ~np.isfinite(x) if limit is None else ~(np.abs(x) < np.float32(limit))
    return refused


def _first_bad(name: str, src: np.ndarray, bad_block: int) -> int:
    """The flat index of the first value refused in block ``bad_block`` of ``src``."""
    elements = BLOCKS[name].elements
    part = src[bad_block * elements : (bad_block + 1) * elements]
    return bad_block * elements + int(np.flatnonzero(_refused(name, part))[0])


def _numpy_range(name: str, x: np.ndarray, out: np.ndarray, b0: int, b1: int) -> int:
    """Encode blocks [b0, b1) of the rows ``x`` into the rows ``out`` as type ``name``;
    the first block holding a value it refuses (the blocks before it written), or -1."""
    enc = ENCODERS[name]
    step = max(1, _CHUNK_ELEMENTS // x.shape[1])
    with np.errstate(all="ignore"):  # 1/d of a tiny d, inf * 0: ggml's arithmetic
        for c in range(b0, b1, step):
            part = x[c : min(c + step, b1)]
            refused = _refused(name, part).any(axis=1)
            if refused.any():
                bad = c + int(np.argmax(refused))
                if bad > c:
                    out[c:bad] = enc(x[c:bad])
                return bad
            out[c : min(c + step, b1)] = enc(part)
    return -1


def quantize_into(name: str, src: np.ndarray, dst: np.ndarray) -> int:
    """Quantize the C-contiguous float32 ``src`` (whole blocks of GGML type ``name``,
    which :func:`encoder` knows) into the flat uint8 ``dst`` of as many blocks; the
    two do not overlap.  Returns -1, or the flat index of the first value of ``src``
    it refuses, a NaN or infinity or a magnitude from the type's limit of :data:`LIMITS`
    on (then ``dst`` holds a prefix of the blocks and no more is meant).

    >>> dst = np.empty(34, np.uint8)
    >>> quantize_into("Q8_0", np.full(32, 2.0, np.float32), dst), dst[:4].tolist()
    (-1, [8, 36, 127, 127])
    >>> quantize_into("Q8_0", np.array([0.0] * 5 + [np.inf] * 27, np.float32), dst)
    5
    """
    bad = pool.smallest_bad(KERNELS[name].pick()(src, dst))
    return -1 if bad < 0 else _first_bad(name, src, bad)


def _least(block: Block) -> int:
    return max(1, _THREAD_MIN_ELEMENTS // block.elements)


def _numpy_blocks(name: str, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """The numpy twin of the compiled driver of GGML type ``name``."""
    block = BLOCKS[name]
    count = src.size // block.elements
    x = src.reshape(count, block.elements)
    out = dst.reshape(count, block.bytes)
    return pool.run_ranges(
        lambda b0, b1: _numpy_range(name, x, out, b0, b1), count, least=_least(block)
    )


KERNELS: Mapping[str, Kernel] = MappingProxyType(
    {
        name: register(
            Kernel(
                f"ggml_from_float32.{name}",
                ggml.encoder(
                    BLOCKS[name].type_id, BLOCKS[name].elements, partial(_least, BLOCKS[name])
                ),
                partial(_numpy_blocks, name),
                _least(BLOCKS[name]),  # blocks
            )
        )
        for name in ENCODERS
    }
)
"""Each quantizable type's row in the kernel table: ``(src, dst) -> bad block per range``."""
