"""``quantize``: float arrays to GGML blocks, byte for byte as llama.cpp writes them."""

from __future__ import annotations

import numpy as np

from kiln_np._codec import Payload, as_array
from kiln_np._core.checks import set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Layout
from kiln_np._quants.blocks import BLOCKS, Block
from kiln_np._quants.quantize import ENCODERS, quantize_into, refusal, unquantizable

from ._types import TYPES, GGMLType

__all__ = ["quantize", "quantize_type"]

_INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64")

_CHUNK_ELEMENTS = 1 << 20
"""Elements of a float16, bfloat16 or float64 input widened (or rounded) to
float32 at a time: the scratch stays 4 MiB whatever the array's size."""


def quantize_type(type: object) -> Block:
    """The GGML block type named by ``type`` (a GGML name in any case, a type id, or a
    :class:`GGMLType`) that :func:`quantize` writes, or TYPE saying why not.

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
    if row is not None and row.name in ENCODERS:
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
        f"expected a GGML type to quantize to ({', '.join(ENCODERS)}, by name in any case or "
        f"by type id); {why}",
    )


@set_module("kiln_np.gguf")
def quantize(array: object, type: object) -> Payload:
    """Quantize a float array to GGML blocks, byte for byte as llama.cpp does.

    The bytes are those ``ggml_quantize_chunk`` writes with no importance
    matrix (what ``llama-quantize`` writes without ``--imatrix``): for every
    type but IQ4_NL and IQ1_M that is ggml's ``quantize_row_<type>_ref``.  Each block is
    encoded on its own, on the compiled kernels over the thread pool (the
    numpy encoders where they are not built, the same bytes).

    Parameters
    ----------
    array : array_like of float32, float16, bfloat16 or float64
        Rows along the last axis (GGUF's ``ne[0]``), each a whole number of
        blocks; a 1-D array is one row.  float16 and bfloat16 widen to
        float32 exactly; float64 is rounded to float32, to nearest even (as
        llama.cpp's converters do), before quantizing.
    type : str, int or GGMLType
        A GGML type of :data:`TYPES` by name in any case (``"q4_k"``), by id
        (12) or by row: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K,
        Q6_K, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0, MXFP4, NVFP4,
        Q1_0 or Q2_0 (those kiln_np has encoders for:
        ``kiln_np._quants.quantize.ENCODERS``).

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
        TYPE for another type (IQ2_XXS, IQ2_XS and IQ1_S need an importance
        matrix; IQ3_XXS has no quantizer yet), an input that is not float, a NaN
        or infinity (naming the first: ggml's result on them is undefined), or a
        block ggml's quantizer aborts on (IQ3_S and the IQ2 and IQ1 types: values
        so large that its search overflows float32; exactly where ggml's
        GGML_ASSERT fires);
        SHAPE for a 0-d array or rows that are not a whole number of blocks.

    Examples
    --------
    >>> p = quantize(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32), "q8_0")
    >>> p.code == 0x4708, p.shape, p.layout.name, p.byte_length
    (True, (2, 1), 'ggml.q8_0', 68)
    >>> from kiln_np.gguf import dequantize
    >>> dequantize(p)[0, :3].tolist()
    [-0.99993896484375, -0.96844482421875, -0.93695068359375]
    """
    block = quantize_type(type)
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
    count = x.size // block.elements
    out = np.empty(count * block.bytes, np.uint8)
    if x.dtype == np.float32 and x.dtype.isnative and x.flags.c_contiguous:
        bad = quantize_into(block.name, x.reshape(-1), out)
    else:
        bad = _quantize_chunks(block, np.ascontiguousarray(x).reshape(-1), out)
    if bad >= 0:
        raise unquantizable(block.name, x.shape, bad, x[np.unravel_index(bad, x.shape)])
    shape = (*x.shape[:-1], x.shape[-1] // block.elements)
    return Payload(block.code, out.data.toreadonly(), shape, Layout(block.layout_name, block.bytes))


def _quantize_chunks(block: Block, flat: np.ndarray, out: np.ndarray) -> int:
    """:func:`quantize_into` over ``flat`` (any float dtype) a float32 chunk at a time."""
    step = max(1, _CHUNK_ELEMENTS // block.elements) * block.elements
    for lo in range(0, flat.size, step):
        with np.errstate(over="ignore"):  # a float64 past float32's range: inf, refused below
            part = flat[lo : lo + step].astype(np.float32)  # exact but float64: to nearest even
        b0 = lo // block.elements
        bad = quantize_into(
            block.name,
            part,
            out[b0 * block.bytes : (b0 + part.size // block.elements) * block.bytes],
        )
        if bad >= 0:
            return lo + bad
    return -1
