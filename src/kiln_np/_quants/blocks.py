"""The GGML block types as data, and the pieces every block decoder shares.

:data:`BLOCKS` is the one table of GGML's quantized block types: name, type id,
elements and bytes per block, as ``ggml-common.h`` defines the block structs
(``kiln_np.gguf.TYPES`` is built from it).  The helpers read a block's fields
the way ggml does, little-endian whatever the host's byte order, and convert
f16 exactly as ggml's portable conversion does.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

__all__ = [
    "BLOCKS",
    "CODE_BASE",
    "Block",
    "f16_to_f32",
    "field_f16",
    "field_u16",
]

CODE_BASE = 0x4700
"""A GGML block type's Kiln code is ``CODE_BASE + type id`` (opaque), its layout
``Layout("ggml.<name in lower case>", bytes)``."""


class Block(NamedTuple):
    """One GGML block type: ``type_id`` (``enum ggml_type``), ``name`` (GGML's,
    ``"Q4_K"``), ``elements`` and ``bytes`` per block."""

    type_id: int
    name: str
    elements: int
    bytes: int

    @property
    def code(self) -> int:
        """The Kiln code of its payloads: ``CODE_BASE + type_id``."""
        return CODE_BASE + self.type_id

    @property
    def layout_name(self) -> str:
        """The name of its payloads' layout: ``"ggml.q4_k"`` for Q4_K."""
        return f"ggml.{self.name.lower()}"


BLOCKS: Mapping[str, Block] = MappingProxyType(
    {
        row.name: row
        for row in (
            Block(2, "Q4_0", 32, 18),
            Block(3, "Q4_1", 32, 20),
            Block(6, "Q5_0", 32, 22),
            Block(7, "Q5_1", 32, 24),
            Block(8, "Q8_0", 32, 34),
            Block(9, "Q8_1", 32, 36),
            Block(10, "Q2_K", 256, 84),
            Block(11, "Q3_K", 256, 110),
            Block(12, "Q4_K", 256, 144),
            Block(13, "Q5_K", 256, 176),
            Block(14, "Q6_K", 256, 210),
            Block(15, "Q8_K", 256, 292),
            Block(16, "IQ2_XXS", 256, 66),
            Block(17, "IQ2_XS", 256, 74),
            Block(18, "IQ3_XXS", 256, 98),
            Block(19, "IQ1_S", 256, 50),
            Block(20, "IQ4_NL", 32, 18),
            Block(21, "IQ3_S", 256, 110),
            Block(22, "IQ2_S", 256, 82),
            Block(23, "IQ4_XS", 256, 136),
            Block(29, "IQ1_M", 256, 56),
            Block(34, "TQ1_0", 256, 54),
            Block(35, "TQ2_0", 256, 66),
            Block(39, "MXFP4", 32, 17),
            Block(40, "NVFP4", 64, 36),
            Block(41, "Q1_0", 128, 18),
            Block(42, "Q2_0", 64, 18),
        )
    }
)
"""GGML's block types by name, in type-id order.  The sizes are ggml's
``sizeof(block_*)``: Q8_1 is 36 bytes (``d``, ``s``, 32 ``qs``), where gguf-py
0.19's table says 40."""


def field_u16(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian uint16 at byte ``offset`` of each block (rows of uint8), as uint32.

    >>> field_u16(np.array([[0x00, 0x3C, 7]], np.uint8), 0).tolist()
    [15360]
    """
    return blocks[:, offset].astype(np.uint32) | (blocks[:, offset + 1].astype(np.uint32) << 8)


def f16_to_f32(h: np.ndarray) -> np.ndarray:
    """IEEE binary16 bits (any unsigned integer array) -> float32, as ggml converts them.

    Exact for every value; a NaN keeps its sign and payload and comes back
    quiet (ggml's portable conversion multiplies by a power of two, which
    quiets a signalling NaN; numpy's own cast depends on the CPU: F16C quiets,
    its bit arithmetic does not), so the result is the same on every machine.

    >>> f16_to_f32(np.array([0x3C00, 0x0001, 0xFC00, 0x7C01], np.uint16)).view(np.uint32).tolist()
    [1065353216, 864026624, 4286578688, 2143297536]
    """
    h = h.astype(np.uint32)
    sign = (h & 0x8000) << 16
    exp = (h >> 10) & 0x1F
    man = h & 0x3FF
    normal = ((exp + 112) << 23) | (man << 13)
    special = 0x7F800000 | (man << 13) | np.where(man != 0, 0x400000, 0).astype(np.uint32)
    # Subnormals: man * 2**-24, exact in float32 (11 significant bits at most).
    tiny = (man.astype(np.float32) * np.float32(2.0**-24)).view(np.uint32)
    bits = np.where(exp == 0, tiny, np.where(exp == 0x1F, special, normal))
    return (bits.astype(np.uint32) | sign).view(np.float32)


def field_f16(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The f16 at byte ``offset`` of each block, as float32 (see :func:`f16_to_f32`).

    >>> field_f16(np.array([[0x00, 0x3C, 7]], np.uint8), 0).tolist()
    [1.0]
    """
    return f16_to_f32(field_u16(blocks, offset))
