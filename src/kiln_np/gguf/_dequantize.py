"""``dequantize``: a GGML payload's numbers, exactly as llama.cpp computes them."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload
from kiln_np._core.checks import byte_view, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import payload_info
from kiln_np._core.table import code_label
from kiln_np._quants.blocks import CODE_BASE
from kiln_np._quants.decode import dequantize_blocks
from kiln_np._quants.elements import element_of

from ._types import unknown_dims

__all__ = ["dequantize"]


def _payload(x: object) -> Payload:
    if isinstance(x, Payload):
        return x
    method = getattr(x, "payload", None)
    p = method() if callable(method) and not isinstance(x, np.ndarray) else None
    if not isinstance(p, Payload):
        raise KilnError("TYPE", f"expected a GGML payload or weight tensor, found {show_value(x)}")
    return p


@set_module("kiln_np.gguf")
def dequantize(x: object, *, dtype: npt.DTypeLike | None = np.float32) -> np.ndarray:
    """The values of a GGML quantized payload (or weight tensor), as llama.cpp computes them.

    Parameters
    ----------
    x : Payload or WeightTensor
        Opaque code ``0x4700 + type id`` with ``Layout("ggml.<type>", bytes per
        block)`` (what :func:`kiln_np.open_weights` gives for a quantized GGUF
        tensor), block shape ``(..., m)``.
    dtype : float32, float16, bfloat16 or float64
        float32 (the default; None means it too, not numpy's float64) is
        ggml's own result, bit for bit its ``dequantize_row_*`` for every
        block (NaN and infinite scales included); the others are those
        float32 values rounded once, to nearest even.

    Returns
    -------
    numpy.ndarray
        A new array of shape ``(..., m * block elements)``: the tensor's
        logical shape (GGUF's dims reversed).

    Raises
    ------
    KilnError
        TYPE for another code or layout (a plain GGML type such as F16 is a
        closed Kiln code: ``kiln_np.to_numpy`` reads it), or another dtype;
        LENGTH for data of the wrong size.

    Examples
    --------
    >>> from kiln_np import Layout
    >>> block = bytes([0x00, 0x38]) + bytes([2, 0xFE] * 16)  # Q8_0: d = 0.5, q = 2, -2, ...
    >>> dequantize(Payload(0x4708, block, (1,), Layout("ggml.q8_0", 34)))[:4].tolist()
    [1.0, -1.0, 1.0, -1.0]
    """
    p = _payload(x)
    info = payload_info(p.code, p.shape, p.layout)
    element = element_of(info.code, info.layout)
    block = element.decoded
    if block is None:
        # GGUF's own spelling of a type it does not know (unknown_layout) says which
        why = (
            f" (GGML type {info.code - CODE_BASE} is one kiln_np does not know: its bytes are "
            "opaque, readable with payload())"
            if element.kind == "ggml" and unknown_dims(info.code, info.layout) is not None
            else ""
        )
        raise KilnError(
            "TYPE",
            f"{info.context}expected a GGML quantized payload (code 0x4700 + GGML type id, "
            "Layout('ggml.<type>', bytes per block), a block type of kiln_np.gguf.TYPES), "
            f"found {code_label(info.code)} with layout {info.layout!r}{why}",
            code=info.code,
        )
    try:
        data = byte_view(p.data, "data")
    except TypeError:
        found = show_value(p.data)
        raise KilnError(
            "TYPE", f"expected the payload's data as a bytes-like buffer, found {found}"
        ) from None
    info.check_length(data.size)
    return dequantize_blocks(block.name, data, info.shape, np.float32 if dtype is None else dtype)
