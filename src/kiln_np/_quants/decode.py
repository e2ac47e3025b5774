"""Dequantize runs of GGML blocks: on the compiled kernels where they are built,
on the numpy decoders otherwise, split over the thread pool by whole blocks.

Both give ggml's float32 bits for every block (``tests/quants/test_ggml.py``
holds them to ggml's own output and to each other); other output types are the
float32 values rounded once, to nearest even.  To bfloat16 the compiled kernels
round each block's values while they are in the cache
(:func:`dequantize_bfloat16_into`, into the bits: no ml_dtypes needed).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from kiln_np._core.checks import U8, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import check_representable
from kiln_np._core.table import Layout, as_dtype
from kiln_np._kernels import ggml, pool
from kiln_np._kernels.bfloat16 import FLOAT32_TO_BFLOAT16
from kiln_np._kernels.dispatch import Kernel, register

from . import basic, iquants, kquants
from .blocks import BLOCKS, Block
from .decoder import Decoder

__all__ = [
    "DECODERS",
    "OUTPUT_DTYPES",
    "block_of",
    "decoder",
    "dequantize_bfloat16_into",
    "dequantize_blocks",
    "dequantize_into",
    "output_dtype",
]

DECODERS: Mapping[str, Decoder] = MappingProxyType(
    {**basic.DECODERS, **kquants.DECODERS, **iquants.DECODERS}
)
"""Every decodable GGML block type's numpy decoder, by GGML name."""

OUTPUT_DTYPES = ("float32", "float16", "bfloat16", "float64")
"""The dtypes a dequantized result may have (float32 is ggml's own)."""

_CHUNK_ELEMENTS = 1 << 16
"""Elements the numpy decoders (and a conversion to another dtype) take at a time:
their float32 temporaries (a few per element) stay in a 2 MiB L2 cache."""


def decoder(name: str) -> tuple[Block, Decoder] | None:
    """The block type and numpy decoder of GGML type ``name``, or None.

    >>> decoder("Q8_0")[0].bytes, decoder("F32")
    (34, None)
    """
    found = DECODERS.get(name)
    return None if found is None else (BLOCKS[name], found)


_BY_LAYOUT: Mapping[str, Block] = MappingProxyType(
    {BLOCKS[name].layout_name: BLOCKS[name] for name in DECODERS}
)


def block_of(code: int, layout: Layout | None) -> Block | None:
    """The decodable GGML block type of payloads of ``code`` with ``layout``
    (code ``0x4700 + type id``, ``Layout("ggml.<name>", bytes)``), or None.

    >>> block_of(0x4708, Layout("ggml.q8_0", 34)).name, block_of(0x4708, None)
    ('Q8_0', None)
    """
    if layout is None:
        return None
    block = _BY_LAYOUT.get(layout.name)
    if block is None or block.code != code or block.bytes != layout.block_size:
        return None
    return block


def _numpy_range(dec: Decoder, rows: np.ndarray, dst: np.ndarray, b0: int, b1: int) -> None:
    step = max(1, _CHUNK_ELEMENTS // dst.shape[1])
    with np.errstate(all="ignore"):  # inf * 0 and the like: ggml's NaN, no warning
        for c in range(b0, b1, step):
            dst[c : min(c + step, b1)] = dec.values(rows[c : min(c + step, b1)])


def dequantize_into(name: str, blocks: np.ndarray, out: np.ndarray) -> None:
    """Decode the flat uint8 ``blocks`` (whole blocks of GGML type ``name``, which
    :func:`decoder` knows) into the C-contiguous float32 ``out`` of as many
    elements; the two do not overlap.

    >>> out = np.empty(32, np.float32)
    >>> dequantize_into("Q8_0", np.array([0, 0x40] + [3] * 32, np.uint8), out)  # d = 2.0
    >>> out[:2].tolist()
    [6.0, 6.0]
    """
    KERNELS[name].pick()(blocks, out)


def _numpy_blocks(name: str, blocks: np.ndarray, out: np.ndarray) -> None:
    """The numpy twin of the compiled driver of GGML type ``name``."""
    block, dec = BLOCKS[name], DECODERS[name]
    count = blocks.size // block.bytes
    rows = blocks.reshape(count, block.bytes)
    dst = out.reshape(count, block.elements)
    total = count * block.elements
    pool.run_ranges(
        lambda lo, hi: _numpy_range(
            dec, rows, dst, lo // block.elements, count if hi == total else hi // block.elements
        ),
        total,
    )


def _rows(kind: str, twin: Any) -> Mapping[str, Kernel]:
    """Each decodable type's row of ``kind`` (``"float32"`` or ``"bfloat16"``),
    registered in the kernel table, its numpy twin ``twin(name, blocks, out)``."""
    bf16 = kind == "bfloat16"
    return MappingProxyType(
        {
            name: register(
                Kernel(
                    f"ggml_to_{kind}.{name}",
                    ggml.decoder(BLOCKS[name].type_id, BLOCKS[name].elements, bfloat16=bf16),
                    partial(twin, name),
                    ggml.THRESHOLD,
                )
            )
            for name in DECODERS
        }
    )


KERNELS: Mapping[str, Kernel] = _rows("float32", _numpy_blocks)
"""Each decodable type's row in the kernel table: ``(blocks, out)``."""


def _numpy_bfloat16(name: str, blocks: np.ndarray, out: np.ndarray) -> None:
    """The numpy twin of the compiled bfloat16 driver: float32 a run of blocks at a
    time, rounded by ml_dtypes."""
    block = BLOCKS[name]
    step = max(1, _CHUNK_ELEMENTS // block.elements)
    scratch = np.empty(step * block.elements, np.float32)
    for b0 in range(0, out.size // block.elements, step):
        part = out[b0 * block.elements : (b0 + step) * block.elements]
        values = scratch[: part.size]
        _numpy_blocks(name, blocks[b0 * block.bytes : (b0 + step) * block.bytes], values)
        FLOAT32_TO_BFLOAT16.numpy(part, values)


BFLOAT16_KERNELS: Mapping[str, Kernel] = _rows("bfloat16", _numpy_bfloat16)
"""Each decodable type's row to bfloat16 bits: ``(blocks, out)``, ``out`` uint16."""


def dequantize_bfloat16_into(name: str, blocks: np.ndarray, out: np.ndarray) -> None:
    """Decode the flat uint8 ``blocks`` (whole blocks of GGML type ``name``) into
    the C-contiguous uint16 ``out`` of as many elements: the bits of ggml's
    float32 values rounded to bfloat16 as ml_dtypes rounds (to nearest even; a
    NaN to the quiet NaN of its sign); the two do not overlap.

    >>> out = np.empty(32, np.uint16)
    >>> dequantize_bfloat16_into("Q8_0", np.array([0, 0x40] + [3] * 32, np.uint8), out)
    >>> hex(out[0])  # 6.0
    '0x40c0'
    """
    BFLOAT16_KERNELS[name].pick()(blocks, out)


def output_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    """The output dtype named by ``dtype``, one of :data:`OUTPUT_DTYPES`, or TYPE.

    >>> output_dtype("bfloat16").name
    'bfloat16'
    """
    try:
        d = as_dtype(dtype)
    except (TypeError, ValueError):
        d = None
    if d is None or d.name not in OUTPUT_DTYPES or d.byteorder == ">":
        raise KilnError(
            "TYPE",
            f"expected a dequantize dtype ({', '.join(OUTPUT_DTYPES)}), found "
            f"{d.str if d is not None else show_value(dtype)}",
        )
    return d


def dequantize_blocks(
    name: str, data: Any, block_shape: tuple[int, ...], dtype: npt.DTypeLike = np.float32
) -> np.ndarray:
    """The values of the GGML blocks ``data`` (a buffer of exactly the blocks of
    ``block_shape``), shape ``block_shape`` with the last axis counted in
    elements (``()`` is one block: shape ``(elements,)``), as ``dtype``; SHAPE
    when numpy cannot make an array of that shape and dtype (an empty tensor's
    other dimensions can be too large), before anything is made.

    >>> dequantize_blocks("Q8_0", bytes([0, 0x3C] + [1] * 32), (1,), "float16")[:3].tolist()
    [1.0, 1.0, 1.0]
    """
    block = BLOCKS[name]
    out_dtype = output_dtype(dtype)
    blocks = np.frombuffer(data, U8)
    count = blocks.size // block.bytes
    shape = (
        (*block_shape[:-1], block_shape[-1] * block.elements) if block_shape else (block.elements,)
    )
    check_representable(
        shape, out_dtype.itemsize, f"GGML {name} blocks {block_shape} as {out_dtype}: "
    )
    total = count * block.elements
    out = pool.empty(shape, out_dtype, total)
    if out_dtype == np.float32:
        dequantize_into(name, blocks, out.reshape(-1))
        return out
    flat = out.reshape(-1)
    if out_dtype.name == "bfloat16":
        dequantize_bfloat16_into(name, blocks, flat.view(np.uint16))
        return out
    step = max(1, _CHUNK_ELEMENTS // block.elements)
    scratch = np.empty(step * block.elements, np.float32)
    for b0 in range(0, count, step):
        b1 = min(count, b0 + step)
        part = scratch[: (b1 - b0) * block.elements]
        dequantize_into(name, blocks[b0 * block.bytes : b1 * block.bytes], part)
        with np.errstate(over="ignore"):  # rounding to nearest: past the top is inf
            flat[b0 * block.elements : b1 * block.elements] = part
    return out
