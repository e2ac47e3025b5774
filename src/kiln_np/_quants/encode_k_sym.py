"""Encoders of the symmetric k-quants (Q3_K, Q6_K): ggml's ``quantize_row_q3_K_ref``
and ``quantize_row_q6_K_ref``, in numpy."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .encoder import Encoder

__all__ = ["ENCODERS"]

ENCODERS: Mapping[str, Encoder] = MappingProxyType({})
"""This family's numpy encoders, by GGML name."""
