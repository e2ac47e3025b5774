"""What a block decoder is: the numpy values of a run of blocks, and their scales."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

__all__ = ["Decoder", "float_scales"]


class Decoder(NamedTuple):
    """The numpy decoder of one GGML block type.

    ``values(blocks)``: blocks as rows of uint8 ``(n, block bytes)`` -> float32
    ``(n, block elements)``, bit for bit ggml's ``dequantize_row_*``.
    ``scales(blocks)``: the blocks' scale fields by name (``{"d": float32 (n,)}``,
    ``{"d": ..., "dmin": ...}``, sub-block scales as ``(n, k)`` integers), the
    numbers a block's values are built from, for statistics.
    ``float_scales(blocks)``: only the float scale fields (``d``, ``dmin``,
    ``m``, MXFP4's ``e``), without the work of the integer ones, for the
    statistics of a whole checkpoint; ``None`` when ``scales`` has only float
    scale fields (see :func:`float_scales`).

    >>> import numpy as np
    >>> d = Decoder(lambda b: b.astype(np.float32), lambda b: {})
    >>> d.values(np.ones((1, 2), np.uint8)).tolist()
    [[1.0, 1.0]]
    """

    values: Callable[[np.ndarray], np.ndarray]
    scales: Callable[[np.ndarray], Mapping[str, np.ndarray]]
    float_scales: Callable[[np.ndarray], Mapping[str, np.ndarray]] | None = None


def float_scales(decoder: Decoder, blocks: np.ndarray) -> Mapping[str, np.ndarray]:
    """The float scale fields of ``blocks`` (:attr:`Decoder.float_scales`, else
    every field of :attr:`Decoder.scales`).

    >>> import numpy as np
    >>> d = Decoder(lambda b: b, lambda b: {"d": b[:, 0] * 1.0, "sc": b[:, 1]},
    ...             lambda b: {"d": b[:, 0] * 1.0})
    >>> list(float_scales(d, np.ones((1, 2), np.uint8)))
    ['d']
    """
    chosen = decoder.float_scales or decoder.scales
    return chosen(blocks)
