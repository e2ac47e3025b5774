"""Encoders of the k-quants with a scale and a min per sub-block (Q2_K, Q4_K, Q5_K):
ggml's ``quantize_row_q{2,4,5}_K_ref``, in numpy."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .encoder import Encoder

__all__ = ["ENCODERS"]

ENCODERS: Mapping[str, Encoder] = MappingProxyType({})
"""This family's numpy encoders, by GGML name."""
