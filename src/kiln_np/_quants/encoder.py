"""What a block encoder is: float32 blocks in, ggml's bytes out."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["Encoder", "GGMLAbortError", "WeightedEncoder"]

Encoder = Callable[[np.ndarray], np.ndarray]
"""The numpy encoder of one GGML block type: finite float32 blocks as rows
``(n, block elements)`` -> uint8 rows ``(n, block bytes)``, bit for bit what
ggml's ``ggml_quantize_chunk`` writes for them with no importance matrix (its
``quantize_row_*_ref``), computed in ggml's operation order.  Vectorised across
blocks; the caller passes no NaN or infinity (ggml's result on them is
undefined) and ignores floating-point warnings.  Where ggml aborts on a block
(an i-quant's ``GGML_ASSERT``), it raises :class:`GGMLAbortError`."""

WeightedEncoder = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""The numpy encoder of one GGML block type with an importance matrix: finite
float32 blocks ``x`` and their importance weights ``qw`` (float32, the same
shape ``(n, block elements)``: each block's columns of its tensor's imatrix
row) -> uint8 rows ``(n, block bytes)``, bit for bit what ggml's
``ggml_quantize_chunk`` writes for them with ``quant_weights`` (its
``quantize_row_*_impl``).  Otherwise as :data:`Encoder`."""


class GGMLAbortError(Exception):
    """Raised by an encoder for the first of its blocks on which ggml's quantizer
    aborts (``GGML_ASSERT`` / ``GGML_ABORT``: the i-quants' grid searches find no
    finite distance on values too large for float32 arithmetic): ``block``
    counts from the encoder's first block.  ggml writes nothing for such a block
    (llama-quantize stops), so kiln_np refuses it.

    >>> GGMLAbortError(3).block
    3
    """

    def __init__(self, block: int) -> None:
        super().__init__(block)
        self.block = block
