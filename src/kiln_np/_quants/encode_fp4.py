"""Encoders of the FP4 block types, MXFP4 (e8m0 scale) and NVFP4 (UE4M3 scales):
ggml's ``quantize_row_mxfp4_ref`` and ``quantize_row_nvfp4_ref``, in numpy."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .encoder import Encoder

__all__ = ["ENCODERS"]

ENCODERS: Mapping[str, Encoder] = MappingProxyType({})
"""This family's numpy encoders, by GGML name."""
