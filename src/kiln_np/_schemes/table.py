"""The table of schemes, in the order a checkpoint's tensor names are tried.

Adding a scheme is a row here plus its module's :class:`~.scheme.Scheme`
(data, a ``plan`` rule and one exact ``decode``).

>>> [s.name for s in SCHEMES][:4]
['nvfp4-modelopt', 'nvfp4-ct', 'mxfp4-gpt-oss', 'fp8-block']
"""

from __future__ import annotations

from . import fp4
from .bnb import BNB_FP4, BNB_NF4
from .fp8 import FP8_BLOCK, FP8_MODELOPT, FP8_SCALED
from .int4 import INT4_SCHEMES
from .scheme import Scheme

__all__ = ["SCHEMES", "scheme_named"]

SCHEMES: tuple[Scheme, ...] = (
    *fp4.SCHEMES,
    FP8_BLOCK,
    FP8_SCALED,
    FP8_MODELOPT,
    BNB_NF4,
    BNB_FP4,
    *INT4_SCHEMES,
)
"""The schemes, the more specific first: ModelOpt's NVFP4 ``weight`` is U8,
compressed-tensors' FP8 ``weight`` is F8_E4M3, and both have a
``weight_scale``; types tell them apart, the order settles the rest."""


def scheme_named(name: str) -> Scheme:
    """The row called ``name`` (KeyError for none)."""
    for scheme in SCHEMES:
        if scheme.name == name:
            return scheme
    raise KeyError(name)
