"""GGML quantized tensors (Q8_0, Q4_K, IQ4_XS, ...): :class:`QuantizedDescription`.

A quantized tensor's numbers are its dequantized values, exactly as llama.cpp
computes them (float32), built from each block's scale fields (an f16 ``d``,
``dmin``, sub-block scales).  :func:`describe_quantized` dequantizes a bounded
run of blocks at a time (:func:`~kiln_np._explore.chunks.dequantized_chunks`,
never the whole tensor's float32 at once) and summarizes the values and each
scale field, as :class:`~kiln_np.ScaledDescription` does for MX blocks: the
values' statistics and histogram by binary exponent, each scale field's
statistics (and its exponents for float scales, its exact histogram for small
integer ones), and how many blocks are all zero or hold a NaN.  Which fields a
type has is its decoder's (``kiln_np._quants.decode.DECODERS[name].scales``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln_np._core.checks import set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, Layout, code_label, dtype_info, row_for_dtype
from kiln_np._quants.decode import DECODERS

from . import plot
from .chunks import Quantized, dequantized_chunks
from .description import Description, html_table, share
from .stats import Summary

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["QuantizedDescription", "describe_quantized"]


@set_module("kiln_np")
@dataclass(frozen=True, eq=False)
class QuantizedDescription:
    """What :func:`describe` found in a GGML quantized tensor: its values and the
    scale fields of its blocks.

    Attributes
    ----------
    type : str
        The GGML type (``'Q8_0'``).
    code : int
        The opaque Kiln code, ``0x4700 + type id``.
    layout : Layout
        ``Layout("ggml.<type>", bytes per block)``.
    shape : tuple of int
        The logical element shape (``WeightTensor.shape``).
    block_shape : tuple of int
        The payload's shape in blocks (``WeightTensor.info.shape``).
    block_elements : int
        Elements per block.
    blocks : int
        Number of blocks.
    byte_length : int
        The payload's bytes.
    values : Description
        The dequantized values (float32, ggml's bits): counts, statistics and
        the histogram by binary exponent.
    scales : Mapping of str to Description
        Each scale field by the decoder's name (``'d'``, ``'dmin'``, ``'sc'``,
        ...): one per block, shape ``block_shape``, or ``k`` per block, shape
        ``(*block_shape, k)``.  Float scales (the f16 ``d``, read as float32)
        have a histogram by binary exponent, integer sub-block scales of 16
        bits or fewer their exact histogram.
    zero_blocks : int
        Blocks whose values are all +-0 (whatever their scales).
    nan_blocks : int
        Blocks holding a NaN value (a NaN or infinite scale makes them).

    Examples
    --------
    >>> from kiln_np import Layout, Payload, describe
    >>> block = bytes([0x00, 0x38]) + bytes([2, 0xFE] * 16)  # Q8_0: d = 0.5, q = 2, -2, ...
    >>> d = describe(Payload(0x4708, block * 2, (2,), Layout("ggml.q8_0", 34)))
    >>> d.type, d.shape, d.blocks, d.values.mean, d.values.absmax, d.scales["d"].max
    ('Q8_0', (64,), 2, 0.0, 1.0, 0.5)
    """

    type: str
    code: int
    layout: Layout
    shape: tuple[int, ...]
    block_shape: tuple[int, ...]
    block_elements: int
    blocks: int
    byte_length: int
    values: Description
    scales: Mapping[str, Description]
    zero_blocks: int
    nan_blocks: int

    def rows(self) -> list[tuple[str, str]]:
        """The block summary as (label, text) rows.

        Examples
        --------
        >>> from kiln_np import Layout, Payload, describe
        >>> p = Payload(0x4708, bytes(34 * 4), (2, 2), Layout("ggml.q8_0", 34))
        >>> describe(p).rows()[1]
        ('shape', '2x64 (128 elements), in 2x2 blocks of 32')
        """
        count = self.values.count
        per = f"{8 * self.byte_length / count:.4g} bits per element" if count else "no elements"
        blocks = "x".join(map(str, self.block_shape)) or "() (one block)"
        shape = "x".join(map(str, self.shape))

        def share_of(n: int) -> str:
            return f" ({share(n, self.blocks)})" if self.blocks else ""

        return [
            ("type", f"{self.type}: {code_label(self.code)}, layout {self.layout.name}"),
            (
                "shape",
                f"{shape} ({count} elements), in {blocks} blocks of {self.block_elements}",
            ),
            ("payload", f"{self.byte_length} bytes ({per})"),
            ("all zero", f"{self.zero_blocks} blocks{share_of(self.zero_blocks)}"),
            ("NaN", f"{self.nan_blocks} blocks{share_of(self.nan_blocks)} hold a NaN"),
            ("scale fields", ", ".join(self.scales) or "-"),
        ]

    def _parts(self) -> list[tuple[str, Description]]:
        return [("values", self.values)] + [(f"scale {k}", v) for k, v in self.scales.items()]

    def __repr__(self) -> str:
        head = (
            f"<kiln_np.QuantizedDescription of {self.type} {self.shape} in "
            f"{self.block_shape} blocks>"
        )
        lines = [head] + [f"  {k:<16}  {v}" for k, v in self.rows()]
        for label, part in self._parts():
            lines.append(f"  {label}:")
            lines += ["  " + line for line in repr(part).splitlines()[1:]]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = "".join(f"<h4>{label}</h4>{part._repr_html_()}" for label, part in self._parts())
        return html_table(self.rows()) + parts

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data.

        Returns
        -------
        dict
            ``type``, ``code``, ``layout`` (``{"name", "block_size"}``),
            ``shape``, ``block_shape``, ``block_elements``, ``blocks``,
            ``byte_length``, ``zero_blocks``, ``nan_blocks``, ``values`` (as
            :meth:`Description.to_dict` gives it) and ``scales`` (field name
            to the same).

        Examples
        --------
        >>> from kiln_np import Layout, Payload, describe
        >>> p = Payload(0x4708, bytes(34), (1,), Layout("ggml.q8_0", 34))
        >>> d = describe(p).to_dict()
        >>> d["zero_blocks"], d["values"]["name"], list(d["scales"])
        (1, 'f32', ['d'])
        """
        return {
            "type": self.type,
            "code": self.code,
            "layout": {"name": self.layout.name, "block_size": self.layout.block_size},
            "shape": list(self.shape),
            "block_shape": list(self.block_shape),
            "block_elements": self.block_elements,
            "blocks": self.blocks,
            "byte_length": self.byte_length,
            "zero_blocks": self.zero_blocks,
            "nan_blocks": self.nan_blocks,
            "values": self.values.to_dict(),
            "scales": {k: v.to_dict() for k, v in self.scales.items()},
        }

    def plot(self, axes: Sequence[Axes] | None = None, *, log: bool = False) -> list[Axes]:
        """Draw the values by binary exponent, then one panel per scale field that
        has a histogram (by binary exponent for float scales, by pattern for
        integer ones of 16 bits or fewer).

        Needs matplotlib.  A figure made here lays itself out (constrained
        layout); given ``axes``, the figure's layout is yours.

        Parameters
        ----------
        axes : sequence of matplotlib.axes.Axes, optional
            Where to draw, one per panel; a new figure's by default.
        log : bool
            Logarithmic count axes.

        Returns
        -------
        list of matplotlib.axes.Axes
            The axes drawn on.

        Examples
        --------
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> from kiln_np import Layout, Payload, describe
        >>> block = bytes([0x00, 0x38]) + bytes([2, 0xFE] * 16)
        >>> axes = describe(Payload(0x4708, block, (1,), Layout("ggml.q8_0", 34))).plot()
        >>> [ax.get_title() for ax in axes]
        ['Q8_0 values: 32 elements', 'scale d: f32, shape (1,)']
        """
        scales = [
            (k, v)
            for k, v in self.scales.items()
            if v.exponents is not None or v.histogram is not None
        ]
        panels = 1 + len(scales)
        drawn = list(axes) if axes is not None else plot.figure((6 * panels, 4), panels)[1]
        if len(drawn) != panels:
            raise KilnError(
                "SHAPE",
                f"expected {panels} axes to draw on (values and scales), found {len(drawn)}",
            )
        self.values.plot(drawn[0], log=log, what="exponents")
        drawn[0].set_title(f"{self.type} values: {self.values.count} elements", **plot.PLAIN)
        for ax, (name, part) in zip(drawn[1:], scales, strict=True):
            part.plot(ax, log=log)
            ax.set_title(f"scale {name}: {part.name}, shape {part.shape}", **plot.PLAIN)
        return drawn


def describe_quantized(q: Quantized, first: int) -> QuantizedDescription:
    """Describe a decodable GGML payload, a bounded run of blocks at a time."""
    block, decoder = q.block, DECODERS[q.block.name]
    block_shape, layout = q.info.shape, q.info.layout
    assert layout is not None
    values = Summary(dtype_info(Code.F32), q.shape, first)
    # The fields and their types, from no blocks (the decoders are vectorized).
    empty = decoder.scales(np.empty((0, block.bytes), np.uint8))
    scales = {
        name: Summary(row_for_dtype(a.dtype), (*block_shape, *a.shape[1:]), first)
        for name, a in empty.items()
    }
    zero_blocks = nan_blocks = 0
    for rows, vals in dequantized_chunks(q):
        values.add(vals.reshape(-1))
        for name, a in decoder.scales(rows).items():
            scales[name].add(np.ascontiguousarray(a).reshape(-1))
        zero_blocks += int(np.count_nonzero((vals == 0).all(axis=1)))
        nan_blocks += int(np.count_nonzero(np.isnan(vals).any(axis=1)))
    return QuantizedDescription(
        type=block.name,
        code=int(q.info.code),
        layout=layout,
        shape=q.shape,
        block_shape=block_shape,
        block_elements=block.elements,
        blocks=q.info.count,
        byte_length=q.info.byte_length,
        values=values.result(),
        scales=MappingProxyType({name: s.result() for name, s in scales.items()}),
        zero_blocks=zero_blocks,
        nan_blocks=nan_blocks,
    )
