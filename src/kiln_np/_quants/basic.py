"""Decoders of GGML's one-scale block types, in numpy: the reference the compiled
kernels are tested against, and the fallback where they are not built.

Each decoder takes blocks as rows of uint8 (``(n, block bytes)``, C order) and
returns their float32 values (``(n, block elements)``), computing each value
with ggml's ``dequantize_row_*`` operations in ggml's order (float32, no fused
multiply-add), so the bits are ggml's.  ``scales`` gives a block's scale
fields for statistics, by name.

>>> q8_0 = DECODERS["Q8_0"]
>>> block = np.array([[0x00, 0x38] + [2, 0xFE] * 16], np.uint8)  # d = 0.5; q = 2, -2, ...
>>> q8_0.values(block)[0, :3].tolist(), q8_0.scales(block)["d"].tolist()
([1.0, -1.0, 1.0], [0.5])
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .blocks import field_f16
from .decoder import Decoder

__all__ = ["DECODERS"]


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    # block_q8_0: f16 d, int8 qs[32]; y = qs * d.
    d = field_f16(blocks, 0)[:, None]
    q: np.ndarray = blocks[:, 2:].view(np.int8).astype(np.float32)
    out: np.ndarray = q * d
    return out


def _d_at_0(blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    return {"d": field_f16(blocks, 0)}


DECODERS: Mapping[str, Decoder] = MappingProxyType(
    {
        "Q8_0": Decoder(_q8_0, _d_at_0),
    }
)
"""The decoders of this module by GGML type name."""
