"""A tensor's values as numpy prints a large array, read without the rest.

numpy's print of an array over its threshold shows three elements from each end
of every axis longer than six, ``...`` between (``edgeitems=3``).  Those corners
are all :func:`corners_text` needs, so a huge quantized tensor shows a bounded
head of its values: :func:`ggml_corners` dequantizes only the blocks holding a
corner; :func:`logical_corners` only the rows (first axis) holding one.  Each
returns an array of at most seven elements along each axis (the three of each
end and one numpy hides between them), printed by :func:`corners_text` with the
same layout, so the text shows what numpy's print of the whole tensor would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln_np._core.checks import U8
from kiln_np._core.payload import PayloadInfo
from kiln_np._quants.decode import dequantize_blocks
from kiln_np._quants.elements import element_of
from kiln_np._weights.logical import LogicalTensor

__all__ = ["EDGE", "corners_text", "ggml_corners", "logical_corners"]

EDGE = 3
"""numpy's ``edgeitems``: elements shown from each end of a summarized axis."""


def _picks(n: int) -> list[int]:
    """The indices of an axis of ``n`` whose elements the print shows: every one of
    a short axis, else three of each end and one (hidden) between.

    >>> _picks(4), _picks(10)
    ([0, 1, 2, 3], [0, 1, 2, 3, 7, 8, 9])
    """
    return list(range(n)) if n <= 2 * EDGE else [*range(EDGE + 1), *range(n - EDGE, n)]


def ggml_corners(info: PayloadInfo, data: Any) -> np.ndarray:
    """The corner values of a GGML quantized payload (a type with a decoder) of
    ``info`` over ``data``: float32, dequantizing only the blocks that hold one.

    Examples
    --------
    >>> from kiln_np import Layout, payload_info
    >>> block = bytes([0x00, 0x3C]) + bytes(range(32))  # Q8_0: d = 1.0, q = 0..31
    >>> info = payload_info(0x4708, (2, 1), Layout("ggml.q8_0", 34))
    >>> c = ggml_corners(info, block * 2)
    >>> c.shape, c[0].tolist()
    ((2, 7), [0.0, 1.0, 2.0, 3.0, 29.0, 30.0, 31.0])
    """
    element = element_of(info.code, info.layout)
    block = element.decoded
    assert block is not None
    blocks = np.frombuffer(data, U8, info.byte_length).reshape(*info.shape, block.bytes)
    lead = [_picks(n) for n in info.shape[:-1]]
    columns = _picks(info.shape[-1] * block.elements) if info.shape else _picks(block.elements)
    needed = sorted({c // block.elements for c in columns})
    # A 0-d payload is one block.
    chosen = blocks[np.ix_(*lead, needed, range(block.bytes))] if info.shape else blocks
    shape = chosen.shape[:-1]
    values = dequantize_blocks(block.name, np.ascontiguousarray(chosen).data, shape)
    at = [needed.index(c // block.elements) * block.elements + c % block.elements for c in columns]
    return values[..., at]


def logical_corners(tensor: LogicalTensor) -> np.ndarray:
    """The corner values of a logical weight, in its own dtype: only the rows (of the
    first axis) holding one are dequantized, one at a time.

    Examples
    --------
    >>> from kiln_np._core.payload import payload_info
    >>> from kiln_np._weights.logical import logical_tensors
    >>> from kiln_np._weights.tensors import WeightTensor
    >>> w = WeightTensor("q.weight", payload_info("f8e4m3", (8, 2)), None, "F8_E4M3",
    ...                  data=memoryview(bytes([0x38, 0xC0] * 8)))  # 1.0, -2.0
    >>> s = WeightTensor("q.weight_scale_inv", payload_info("f32", (1, 1)), None, "F32",
    ...                  data=memoryview(np.float32([0.5]).tobytes()))
    >>> (t,) = logical_tensors({"q.weight": w, "q.weight_scale_inv": s}, {})
    >>> logical_corners(t).astype(np.float32).tolist()[:2]
    [[0.5, -1.0], [0.5, -1.0]]
    """
    shape = tensor.shape
    if not shape:
        return tensor.dequantize()
    rest = [_picks(n) for n in shape[1:]]
    rows: dict[int, np.ndarray] = {}
    for r in _picks(shape[0]):
        if r not in rows:
            row = tensor.rows(r, r + 1)
            rows[r] = row[np.ix_([0], *rest)] if rest else row
    return np.concatenate([rows[r] for r in _picks(shape[0])])


def _items(values: np.ndarray) -> list[str]:
    """The elements as text: float32 by its shortest repr, the rest as Python numbers."""
    if values.dtype == np.float32:
        return [str(v) for v in values]
    numbers = values.tolist() if values.dtype.kind in "biuf" else values.astype(np.float64).tolist()
    return [str(v) for v in numbers]


def _row(parts: list[str], depth: int, width: int) -> str:
    """``[a, b, ...]`` wrapped before ``width`` columns, continued under its first item."""
    lines = ["["]
    for i, part in enumerate(parts):
        piece = part + ("," if i < len(parts) - 1 else "]")
        if len(lines[-1]) > 1 and depth + len(lines[-1]) + 1 + len(piece) > width:
            lines.append(" ")
        lines[-1] += (" " if len(lines[-1]) > 1 else "") + piece
    return ("\n" + " " * depth).join(lines)


def _nested(values: np.ndarray, depth: int, width: int) -> str:
    hidden = values.shape[0] == 2 * EDGE + 1  # only a summarized axis has seven picks
    if values.ndim == 1:
        parts = _items(values)
        if hidden:
            parts[EDGE] = "..."
        return _row(parts, depth, width)
    rows = [_nested(v, depth + 1, width - 1) for v in values]  # each but the last ends in ','
    if hidden:
        rows[EDGE] = "..."
    return "[" + (",\n" + " " * (depth + 1)).join(rows) + "]"


def corners_text(values: np.ndarray, indent: str = "  ", width: int = 100) -> str:
    """``values`` (corners) laid out as numpy prints the whole tensor (``...`` for
    what it leaves out), each line after ``indent`` and within ``width`` columns;
    the numbers as kiln_np's ``first`` rows show them.

    >>> print(corners_text(np.arange(14, dtype=np.float32).reshape(2, 7) / 2))
      [[0.0, 0.5, 1.0, ..., 2.0, 2.5, 3.0],
       [3.5, 4.0, 4.5, ..., 5.5, 6.0, 6.5]]
    >>> print(corners_text(np.float32([1e-10, -2e-10, 3e-10]), width=20))
      [1e-10, -2e-10,
       3e-10]
    """
    if values.ndim == 0:
        return indent + _items(values.reshape(1))[0]
    text = _nested(values, 0, width - len(indent))
    return "\n".join(indent + line for line in text.splitlines())
