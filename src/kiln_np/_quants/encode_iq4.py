"""Encoders of the non-linear 4-bit types IQ4_NL and IQ4_XS: what ggml's
``ggml_quantize_chunk`` writes for them with no importance matrix, in numpy."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .encoder import Encoder

__all__ = ["ENCODERS"]

ENCODERS: Mapping[str, Encoder] = MappingProxyType({})
"""This family's numpy encoders, by GGML name."""
