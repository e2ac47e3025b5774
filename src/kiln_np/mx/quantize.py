"""Quantizing to block-scaled elements and e8m0 scales, by a named rule.

``"ocp"`` is OCP MX v1.0's shared exponent (section 6.3), ``"ceil"`` the
smallest exponent that does not saturate, ``"ggml"`` the bytes of gguf-py's
MXFP4 ``quantize``; the ``kiln_np.mx`` docstring states each rule exactly.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

import numpy as np
import numpy.typing as npt

from kiln_np._core.checks import U8, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, load_ml_dtypes

from .inputs import blocked_shape, check_axis, check_block_size, input_array, repeats
from .kinds import ELEMENTS, QUANTIZED, SCALES, Kind, spoken

__all__ = ["Rule", "quantize"]

Rule = Literal["ocp", "ceil", "ggml"]

_E2M1 = ELEMENTS[Code.E2M1]


def _float64(x: npt.ArrayLike) -> np.ndarray:
    arr = input_array(x, "x")
    try:
        info = load_ml_dtypes().finfo(arr.dtype)
    except (TypeError, ValueError):
        info = None
    if info is None or arr.dtype.itemsize > 8 or arr.dtype.kind == "c":
        raise KilnError(
            "TYPE",
            f"expected real floating-point input (float16/32/64, bfloat16, ml_dtypes floats), "
            f"found {arr.dtype}",
            found=str(arr.dtype),
        )
    return arr.astype(np.float64)


@lru_cache(maxsize=1)
def _e2m1_midpoints() -> np.ndarray:
    mags = _E2M1.values[:8]
    return (mags[:-1] + mags[1:]) / 2


def _shared_exponent(amax: np.ndarray, kind: Kind, rule: Rule) -> np.ndarray:
    """Each block's scale exponent (before clamping) from its finite max ``amax``
    (0 for an all-zero or non-finite block, which gets -127)."""
    zero = amax == 0
    if rule == "ggml":
        with np.errstate(divide="ignore"):
            log2 = np.log2(amax).astype(np.float32)  # float32-rounded, as gguf-py's
        floor = np.floor(log2, where=~zero, out=np.zeros_like(log2))
        exponent: np.ndarray = floor.astype(np.int64) - 2
    elif rule == "ceil":
        # The smallest e with amax <= top * 2**e: an estimate, then exact comparisons
        # (ldexp of the element's max is exact), one step each way.
        top = kind.largest
        with np.errstate(divide="ignore"):
            guess = np.ceil(np.log2(amax / top), where=~zero, out=np.zeros_like(amax))
        exponent = guess.astype(np.int64)
        exponent += np.ldexp(top, exponent) < amax
        exponent -= np.ldexp(top, exponent - 1) >= amax
    else:  # OCP: floor(log2(amax)) - emax, exactly (frexp's exponent is floor + 1)
        assert kind.emax is not None  # a QUANTIZED kind: a float element
        exponent = np.frexp(amax)[1].astype(np.int64) - 1 - kind.emax
    exponent[zero] = -127
    return exponent


@set_module("kiln_np.mx")
def quantize(
    x: npt.ArrayLike,
    *,
    element: str = "e2m1",
    block_size: int = 32,
    axis: int = -1,
    rule: Rule = "ocp",
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize ``x`` to block-scaled elements and e8m0 scales.

    Parameters
    ----------
    x : array_like of float
        float16/32/64, bfloat16 or another ml_dtypes float.
    element : {"e2m1", "f8e4m3", "f8e5m2"}
        The element type (MXFP4, MXFP8).
    block_size : int
        Elements per scale along ``axis``; the last block may be partial.
    axis : int
        The axis the blocks run along.
    rule : {"ocp", "ceil", "ggml"}
        ``"ocp"``: OCP MX v1.0: exponent ``floor(log2(max|x|)) - emax``
        clamped to [-127, 127], elements rounded to nearest, ties to even,
        saturating.  ``"ceil"``: the smallest exponent that does not saturate,
        ``ceil(log2(max|x| / max_element))`` computed exactly (the rule of
        torchao's ``RCEIL`` mode, which computes it in float32), elements as
        for ``"ocp"``.  ``"ggml"`` (e2m1 only): gguf-py's (ggml's Python) MXFP4
        rule: ``x`` rounded to float32 first, exponent from the float32-rounded
        ``log2`` of the block max (1023.99994 gives 10), nearest element with
        ties toward zero, +0 for zero; where gguf-py wraps the scale byte of a
        block whose max is below 2**-125, kiln_np clamps it to 0 (2**-127).
        A block holding a NaN or an infinity gets scale 0xff and +0 elements
        under every rule.

    Returns
    -------
    tuple of numpy.ndarray
        ``(values, scales)``: ``values`` of ``x``'s shape and the element's
        ml_dtypes type, ``scales`` ``float8_e8m0fnu`` of ``x``'s shape with
        ``axis`` divided by ``block_size`` rounded up.

    Raises
    ------
    KilnError
        TYPE for a non-float input, an unknown element or rule, ``"ggml"``
        with an element other than e2m1; SHAPE for a ``block_size`` below 1
        or an axis out of range.

    Examples
    --------
    >>> v, s = quantize([0.1, 1.0, -3.0, 5.0], block_size=4)
    >>> v.astype(float), s.view(np.uint8)
    (array([ 0.,  1., -3.,  4.]), array([127], dtype=uint8))
    >>> from kiln_np.mx import dequantize
    >>> dequantize(v, s, block_size=4)
    array([ 0.,  1., -3.,  4.], dtype=float32)
    """
    kind = QUANTIZED.get(element) if isinstance(element, str) else None
    if kind is None:
        names = spoken([repr(name) for name in QUANTIZED])
        raise KilnError("TYPE", f"expected element {names}, found {show_value(element)}")
    if rule not in ("ocp", "ceil", "ggml"):
        raise KilnError("TYPE", f"expected rule 'ocp', 'ceil' or 'ggml', found {show_value(rule)}")
    if rule == "ggml" and kind is not _E2M1:
        raise KilnError(
            "TYPE", f"rule 'ggml' is GGML's MXFP4 rule: expected element 'e2m1', found {element!r}"
        )
    bs = check_block_size(block_size)
    arr = _float64(x)
    shape = tuple(arr.shape)
    a = check_axis(axis, len(shape), f"x of shape {shape}")
    p, n, q = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1 :])
    x3 = arr.reshape(p, n, q)
    if rule == "ggml":
        with np.errstate(over="ignore"):  # past float32's range: inf, so a NaN block
            x3 = x3.astype(np.float32).astype(np.float64)
    nb = -(-n // bs)
    scales = np.zeros((p, nb, q), U8)
    codes = np.zeros((p, n, q), U8)
    if x3.size:
        mag = np.abs(x3)
        amax = np.maximum.reduceat(mag, np.arange(0, n, bs), axis=1)
        finite = np.isfinite(amax)
        amax = np.where(finite, amax, 0.0)
        exponent = _shared_exponent(amax, kind, rule)
        exponent = np.clip(exponent, -127, 127)
        scales[...] = np.where(finite, exponent + 127, 255)
        shift = np.repeat(np.where(finite, exponent, 0), repeats(n, bs), axis=1)
        y = np.ldexp(x3, -shift)
        y[~np.repeat(finite, repeats(n, bs), axis=1)] = 0.0
        if rule == "ggml":
            m = np.searchsorted(_e2m1_midpoints(), np.abs(y), side="left").astype(U8)
            codes[...] = m | np.where((y < 0) & (m > 0), 8, 0).astype(U8)
        else:
            top = kind.largest
            codes[...] = np.clip(y, -top, top).astype(kind.dtype).view(U8)
    values = codes.reshape(shape).view(kind.dtype)
    return values, scales.reshape(blocked_shape(shape, a, bs)).view(SCALES[Code.E8M0].dtype)
