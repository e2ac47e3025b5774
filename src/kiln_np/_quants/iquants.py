"""Decoders of GGML's i-quant types (IQ1_S ... IQ3_S: sub-blocks whose values are
entries of fixed grids), in numpy:
the reference the compiled kernels are tested against, and the fallback.  The
conventions are :mod:`kiln_np._quants.basic`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .decoder import Decoder

__all__ = ["DECODERS"]

DECODERS: Mapping[str, Decoder] = MappingProxyType({})
"""The decoders of this module by GGML type name."""
