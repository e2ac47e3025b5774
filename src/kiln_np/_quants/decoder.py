"""What a block decoder is: the numpy values of a run of blocks, and their scales."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

__all__ = ["Decoder"]


class Decoder(NamedTuple):
    """The numpy decoder of one GGML block type.

    ``values(blocks)``: blocks as rows of uint8 ``(n, block bytes)`` -> float32
    ``(n, block elements)``, bit for bit ggml's ``dequantize_row_*``.
    ``scales(blocks)``: the blocks' scale fields by name (``{"d": float32 (n,)}``,
    ``{"d": ..., "dmin": ...}``, sub-block scales as ``(n, k)`` integers), the
    numbers a block's values are built from, for statistics.

    >>> import numpy as np
    >>> d = Decoder(lambda b: b.astype(np.float32), lambda b: {})
    >>> d.values(np.ones((1, 2), np.uint8)).tolist()
    [[1.0, 1.0]]
    """

    values: Callable[[np.ndarray], np.ndarray]
    scales: Callable[[np.ndarray], Mapping[str, np.ndarray]]
