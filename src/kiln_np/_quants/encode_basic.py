"""Encoders of the GGML types with one scale a block (Q4_0 ... Q8_0, Q1_0, Q2_0)
and the ternary TQ1_0, TQ2_0: ggml's ``quantize_row_*_ref``, in numpy."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .encoder import Encoder
from .rounding import c_int, f16_bits, le16, roundf

__all__ = ["ENCODERS"]


def _q8_0(x: np.ndarray) -> np.ndarray:
    """Q8_0: ``d = max |x| / 127`` (f16), ``q = roundf(x / d)`` (int8).

    >>> _q8_0(np.array([[-127.0, 0.5] + [0.0] * 30], np.float32))[0, :4].tolist()
    [0, 60, 129, 1]
    """
    amax = np.abs(x).max(axis=1)
    d = amax / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0))
    out = np.empty((len(x), 34), np.uint8)
    out[:, :2] = le16(f16_bits(d))
    out[:, 2:] = c_int(roundf(x * inv[:, None])).astype(np.uint8)
    return out


ENCODERS: Mapping[str, Encoder] = MappingProxyType({"Q8_0": _q8_0})
"""This family's numpy encoders, by GGML name."""
