"""The table of schemes, in the order a checkpoint's tensor names are tried.

Adding a scheme is a row here plus its module's :class:`~.scheme.Scheme`
(data, a ``plan`` rule and one exact ``decode``).

>>> [s.name for s in SCHEMES]
['gptq', 'awq', 'pack-quantized']
"""

from __future__ import annotations

from .int4 import INT4_SCHEMES
from .scheme import Scheme

__all__ = ["SCHEMES", "scheme_named"]

SCHEMES: tuple[Scheme, ...] = (*INT4_SCHEMES,)
"""The schemes, the more specific first: ModelOpt's NVFP4 ``weight`` is U8,
compressed-tensors' FP8 ``weight`` is F8_E4M3, and both have a
``weight_scale``; types tell them apart, the order settles the rest."""


def scheme_named(name: str) -> Scheme:
    """The row called ``name`` (KeyError for none)."""
    for scheme in SCHEMES:
        if scheme.name == name:
            return scheme
    raise KeyError(name)
