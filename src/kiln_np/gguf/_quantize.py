"""``quantize``: float arrays to GGML blocks, byte for byte as llama.cpp writes them,
with or without an importance matrix."""

from __future__ import annotations

import numpy as np

from kiln_np._codec import Payload, as_array
from kiln_np._core.checks import set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Layout
from kiln_np._quants.blocks import BLOCKS, Block
from kiln_np._quants.quantize import (
    ENCODERS,
    IGNORES_IMATRIX,
    WEIGHTED_KERNELS,
    quantize_into,
    refusal,
    unquantizable,
)

from ._types import TYPES, GGMLType

__all__ = ["quantize", "quantize_type"]

_INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64")

_CHUNK_ELEMENTS = 1 << 20
"""Elements of a float16, bfloat16 or float64 input widened (or rounded) to
float32 at a time: the scratch stays 4 MiB whatever the array's size."""


def quantize_type(type: object, *, weighted: bool = False) -> Block:
    """The GGML block type named by ``type`` (a GGML name in any case, a type id, or a
    :class:`GGMLType`) that :func:`quantize` writes (``weighted``: with an
    importance matrix), or TYPE saying why not.

    >>> quantize_type("q4_k").name, quantize_type(8).name
    ('Q4_K', 'Q8_0')
    """
    row: GGMLType | None = None
    if isinstance(type, GGMLType):
        row = type
    elif isinstance(type, str):
        row = next((r for r in TYPES.values() if r.name.lower() == type.lower()), None)
    elif isinstance(type, (int, np.integer)) and not isinstance(type, bool):
        row = TYPES.get(int(type))
    known = _WEIGHTED if weighted else ENCODERS
    if row is not None and row.name in known:
        return BLOCKS[row.name]
    why = (
        refusal(row.name)
        if row is not None and row.name in BLOCKS
        else f"{row.name} is not a quantized type"
        if row is not None
        else f"found {show_value(type)}"
    )
    raise KilnError(
        "TYPE",
        f"expected a GGML type to quantize to{' with an importance matrix' * weighted} "
        f"({', '.join(known)}, by name in any case or by type id); {why}",
    )


_WEIGHTED = [n for n in BLOCKS if n in WEIGHTED_KERNELS or (n in IGNORES_IMATRIX and n in ENCODERS)]
"""The types :func:`quantize` writes with an importance matrix, in type-id order."""


@set_module("kiln_np.gguf")
def quantize(array: object, type: object, *, imatrix: object = None) -> Payload:
    """Quantize a float array to GGML blocks, byte for byte as llama.cpp does.

    The bytes are those ``ggml_quantize_chunk`` writes (what ``llama-quantize``
    writes): with no importance matrix, for every type but IQ4_NL and IQ1_M
    ggml's ``quantize_row_<type>_ref``; with ``imatrix``, its ``quant_weights``
    quantizers, each expert of a 3-D array with its own row of weights, as
    ``llama-quantize --imatrix`` quantizes a tensor with its entry.  Each block
    is encoded on its own, on the compiled kernels over the thread pool (the
    numpy encoders where they are not built, the same bytes).

    Parameters
    ----------
    array : array_like of float32, float16, bfloat16 or float64
        Rows along the last axis (GGUF's ``ne[0]``), each a whole number of
        blocks; a 1-D array is one row; a 3-D array's first axis is its experts.
        float16 and bfloat16 widen to float32 exactly; float64 is rounded to
        float32, to nearest even (as llama.cpp's converters do), before
        quantizing.
    type : str, int or GGMLType
        A GGML type of :data:`TYPES` by name in any case (``"q4_k"``), by id
        (12) or by row: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K,
        Q6_K, IQ3_XXS, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0, MXFP4,
        NVFP4, Q1_0 or Q2_0 (those kiln_np has encoders for:
        ``kiln_np._quants.quantize.ENCODERS``); with ``imatrix``, also IQ2_XXS,
        IQ2_XS and IQ1_S, which ggml quantizes only with one, and every type ggml
        quantizes with one (Q8_0, Q1_0, Q2_0, TQ1_0, TQ2_0, MXFP4 and NVFP4
        ignore it, as ggml's quantizers do).
    imatrix : array_like of float32, optional
        Importance weights (``kiln_np.gguf.read_imatrix``'s entries hold
        them): one finite float32 per column, shape ``(row length,)`` for every
        row, or for a 3-D array ``(experts, row length)``, a row per expert.

    Returns
    -------
    Payload
        Opaque code ``0x4700 + type id``, ``Layout("ggml.<type>", bytes per
        block)``, shape ``array.shape`` with the last axis counted in blocks:
        what :func:`kiln_np.open_weights` gives for a GGUF tensor of that type,
        so :func:`dequantize` and :func:`save_gguf` take it.

    Raises
    ------
    KilnError
        TYPE for another type (IQ2_XXS, IQ2_XS and IQ1_S need ``imatrix``), an
        input that is not float, or a NaN or infinity (naming the first: ggml's
        result on them is undefined), or a block ggml's quantizer aborts on
        (IQ3_XXS, IQ3_S and the IQ2 and IQ1 types: values so large that their
        search overflows float32; exactly where ggml's GGML_ASSERT fires), an
        ``imatrix`` that is not float32 or holds a NaN or infinity;
        SHAPE for a 0-d array, rows that are not a whole number of blocks, an
        ``imatrix`` of another shape.

    Examples
    --------
    >>> p = quantize(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32), "q8_0")
    >>> p.code == 0x4708, p.shape, p.layout.name, p.byte_length
    (True, (2, 1), 'ggml.q8_0', 68)
    >>> from kiln_np.gguf import dequantize
    >>> dequantize(p)[0, :3].tolist()
    [-0.99993896484375, -0.96844482421875, -0.93695068359375]
    >>> w = quantize(np.ones((2, 32), np.float32), "q8_0", imatrix=np.ones(32, np.float32))
    >>> w.byte_length  # Q8_0 ignores the weights
    68
    """
    block = quantize_type(type, weighted=imatrix is not None)
    x = as_array(array)  # a torch tensor too, bit for bit
    name = x.dtype.name
    if name not in _INPUT_DTYPES:
        raise KilnError(
            "TYPE",
            f"expected a float array to quantize ({', '.join(_INPUT_DTYPES)}), found "
            f"{x.dtype.name if x.dtype.names is None else x.dtype}",
        )
    if x.ndim == 0 or x.shape[-1] % block.elements:
        raise KilnError(
            "SHAPE",
            f"expected rows (the last axis) of a whole number of {block.name} blocks "
            f"({block.elements} elements each), found shape {x.shape}",
            shape=x.shape,
        )
    weights = None if imatrix is None else _weights(imatrix, x.shape)
    if block.name in IGNORES_IMATRIX:
        weights = None  # as ggml's quantizers of these types do
    count = x.size // block.elements
    out = np.empty(count * block.bytes, np.uint8)
    flat = np.ascontiguousarray(x).reshape(-1)
    if weights is None:
        bad = _quantize_chunks(block, flat, out, 0, flat.size, None)
    else:
        span = flat.size // len(weights)  # the elements of one expert
        bad = -1
        for e, row in enumerate(weights):
            bad = _quantize_chunks(block, flat, out, e * span, (e + 1) * span, row)
            if bad >= 0:
                break
    if bad >= 0:
        raise unquantizable(block.name, x.shape, bad, x[np.unravel_index(bad, x.shape)])
    shape = (*x.shape[:-1], x.shape[-1] // block.elements)
    return Payload(block.code, out.data.toreadonly(), shape, Layout(block.layout_name, block.bytes))


def _weights(imatrix: object, shape: tuple[int, ...]) -> np.ndarray:
    """``imatrix`` as float32 rows, one per expert of an array of ``shape``."""
    w = np.asarray(imatrix)
    if w.dtype != np.float32:
        raise KilnError(
            "TYPE",
            f"expected imatrix as float32 importance weights (ggml's quant_weights), found "
            f"{w.dtype.name if w.dtype.names is None else w.dtype}",
        )
    row = shape[-1]
    experts = (shape[0],) if len(shape) == 3 else ()
    if w.shape not in ((row,), (*experts, row)):
        each = f" or {(*experts, row)} (one row per expert)" if experts else ""
        raise KilnError(
            "SHAPE",
            f"expected imatrix of shape {(row,)} (one weight per column){each} for an array "
            f"of shape {shape}, found {w.shape}",
            shape=w.shape,
        )
    bad = np.flatnonzero(~np.isfinite(w))
    if bad.size:
        raise KilnError(
            "TYPE",
            f"expected finite importance weights (llama-quantize refuses an imatrix with a "
            f"non-finite value), found {float(w.flat[bad[0]])} at element {int(bad[0])}",
            index=int(bad[0]),
        )
    return np.ascontiguousarray(w.reshape(-1, row))


def _quantize_chunks(
    block: Block, flat: np.ndarray, out: np.ndarray, lo: int, hi: int, weights: np.ndarray | None
) -> int:
    """:func:`quantize_into` over elements ``[lo, hi)`` of ``flat`` (any float dtype;
    whole blocks, whole rows of ``weights.size`` with ``weights``) into their blocks
    of ``out``, a float32 chunk at a time (float32 as it is); the first bad flat
    index, or -1."""
    unit = block.elements if weights is None else weights.size
    step = max(1, _CHUNK_ELEMENTS // unit) * unit
    if flat.dtype == np.float32 and flat.dtype.isnative:
        step = hi - lo  # quantized where it is: the thread pool splits it
    for start in range(lo, hi, max(step, 1)):
        end = min(start + step, hi)
        with np.errstate(over="ignore"):  # a float64 past float32's range: inf, refused below
            part = flat[start:end].astype(np.float32, copy=False)  # float64: to nearest even
        b0, b1 = start // block.elements, end // block.elements
        piece = out[b0 * block.bytes : b1 * block.bytes]
        bad = quantize_into(block.name, part, piece, weights)
        if bad >= 0:
            return start + bad
    return -1
