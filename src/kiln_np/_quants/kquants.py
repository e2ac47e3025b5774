"""Decoders of GGML's k-quant types (Q2_K ... Q8_K: 256-element super-blocks whose
sub-blocks have their own scales), in numpy:
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
