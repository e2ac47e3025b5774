"""The notebook's entry points: :func:`describe`, of a tensor, a block-scaled one,
a GGML quantized one, or every tensor of a checkpoint; :func:`plot_histograms`,
the histograms of the tensors of a checkpoint picked by name.

Without scales it is the statistics engine's one pass over the array's
chunks (:func:`~kiln_np._explore.stats.summarize`); with scales it is
:func:`~kiln_np._explore.scaled.describe_scaled`; a decodable GGML payload or
weight tensor is :func:`~kiln_np._explore.quantized.describe_quantized`; a
:class:`~kiln_np.Weights` is :func:`~kiln_np._explore.weight_stats.describe_weights`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, overload

from kiln_np._codec import Payload
from kiln_np._core.checks import MAX_INT64, check_int, printable, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._weights.logical import LogicalTensor
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

from .chunks import Source, quantized, source
from .description import Description
from .pictures import histogram_grid
from .plot import PLAIN
from .quantized import QuantizedDescription, describe_quantized
from .scaled import ScaledDescription, describe_scaled
from .stats import summarize
from .weight_stats import Progress, WeightStats, describe_weights

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["describe", "plot_histograms"]


@overload
def describe(
    array: Weights, *, progress: Progress | None = None, sort: str | None = None
) -> WeightStats: ...


# A logical tensor (a quantization scheme's weight) is described as its values.
@overload
def describe(array: LogicalTensor, scales: None = None, *, first: int = 8) -> Description: ...


# A payload or weight tensor may be GGML quantized; both are also array-likes,
# hence the overlap with the next signature (typeshed's idiom for a narrower first).
@overload
def describe(  # type: ignore[overload-overlap]
    array: Payload | WeightTensor, scales: None = None, *, first: int = 8
) -> Description | QuantizedDescription: ...


@overload
def describe(array: Source, scales: None = None, *, first: int = 8) -> Description: ...


@overload
def describe(
    array: Source,
    scales: Source,
    *,
    block_size: int | None = None,
    axis: int | None = None,
    first: int = 8,
) -> ScaledDescription: ...


@set_module("kiln_np")
def describe(
    array: Source | Weights,
    scales: Source | None = None,
    *,
    block_size: int | None = None,
    axis: int | None = None,
    first: int = 8,
    progress: Progress | None = None,
    sort: str | None = None,
) -> Description | ScaledDescription | QuantizedDescription | WeightStats:
    """Summarize an array of any Kiln dtype, a block-scaled tensor, or every
    tensor of a checkpoint, without touching its bits.

    Parameters
    ----------
    array : array_like, Payload, LazyPayload, WeightTensor or Weights
        An array of a Kiln dtype: numpy's or ml_dtypes' (bfloat16, float8,
        float4, int4, ...) or an FNUZ float8, or a payload of one (a
        :class:`Payload`, as ``kiln_np.onnx.model_to_kiln`` yields, decoded
        a bounded range at a time; a :class:`LazyPayload` from
        :func:`open_payload`, decoded a bounded chunk at a time), or a
        :class:`WeightTensor` of one.  A GGML quantized payload or tensor of
        a type with a decoder (``kiln_np.gguf.dequantize`` knows it) is
        dequantized a bounded run of blocks at a time.  Read, never changed, so a memory-mapped
        array costs no extra memory.  With ``scales``: the elements of a
        block-scaled tensor, e2m1, f8e4m3, f8e5m2 or i8 (MXINT8).
    scales : array_like, Payload or LazyPayload, optional
        One scale per block: e8m0 (MX; raw uint8 bytes are read as e8m0) or
        f8e4m3 (NVFP4-style).  Their shape is the array's with ``axis``
        divided by ``block_size``, rounded up (the last block may be
        partial).  Read a chunk of blocks at a time; a :class:`LazyPayload`
        is read lazily when the blocks run along its last axis, decoded
        whole otherwise.
    block_size : int, optional
        Elements per block; by default 32 for e8m0 scales, 16 for f8e4m3.
    axis : int, optional
        The axis the blocks run along; by default the last.
    first : int
        How many leading elements (C order) to keep.
    progress : callable, optional
        For a :class:`Weights` only: ``progress(bytes_done, bytes_total)``,
        called after each tensor and each round of a large one.
    sort : {"file", "name", "size", "type"}, optional
        For a :class:`Weights` only: the rows' order.  By default (None,
        ``"file"``) the mapping's own, file order; ``"name"``: natural name
        order (``layers.2`` before ``layers.10``, a layer's tensors together,
        whatever shard holds them); ``"size"``: the most payload bytes first;
        ``"type"``: grouped by the stored type; ties in natural name order.
        ``kiln-np stats --sort`` is the same.

    Returns
    -------
    Description or ScaledDescription
        Without ``scales``: counts of NaN, inf, zero and subnormal elements;
        min, max, absmax, mean and std of the finite elements; the first
        elements; for types of 16 bits or fewer the exact bit-pattern
        histogram, for f16, bf16, f32, f64 the histogram by binary exponent.
        With ``scales``: a :class:`ScaledDescription` of the scales, the
        element codes and the dequantized values, and counts of saturated,
        all-zero and NaN-scaled blocks.  For a GGML quantized tensor: a
        :class:`QuantizedDescription` of its exact float32 values and of each
        scale field of its blocks (``d``, ``dmin``, sub-block scales).  Their
        ``repr`` is a readable summary and they render as tables in Jupyter.
    WeightStats
        For a :class:`Weights`: one row of statistics per tensor (count, min,
        max, mean, std, absmax, zeros, NaN, +inf and -inf counts, the scale
        fields' ranges of quantized tensors); see docs/explore.md,
        "Statistics of every tensor", for the exact definitions.

    Raises
    ------
    KilnError
        TYPE for something numpy cannot make an array of (``__array__``
        raising included), a dtype with no Kiln code, an opaque payload (or
        tensor) that is neither GGML quantized with a decoder nor FNUZ, a
        storage byte that is no bit pattern of the type (4-bit above 0x0f,
        bool above 0x01), element or scale types that are not block-scaled
        ones; SHAPE for ``first`` that is not an integer in 0..2**63-1, a
        ``block_size`` below 1, an ``axis`` out of range, or scales whose
        shape does not match, ``block_size`` or ``axis`` without ``scales``;
        a payload's own LENGTH and SHAPE errors.

    Examples
    --------
    >>> import ml_dtypes
    >>> import numpy as np
    >>> d = describe(np.array([1.0, -0.0, np.nan, 448.0], ml_dtypes.float8_e4m3fn))
    >>> d.nan, d.zero, d.min, d.max, d.mean
    (1, 1, -0.0, 448.0, 149.66666666666666)
    >>> values = np.array([6.0, 1.0, 0.0, 0.0], ml_dtypes.float4_e2m1fn)
    >>> blocks = describe(values, np.array([0.5, 4.0], ml_dtypes.float8_e8m0fnu), block_size=2)
    >>> blocks.saturated, blocks.zero_blocks, blocks.dequantized.max
    (1, 1, 3.0)
    """
    if isinstance(array, Weights):
        if scales is not None or block_size is not None or axis is not None or first != 8:
            raise KilnError(
                "SHAPE",
                "describe(weights) takes only progress= and sort=: expected no scales, "
                "block_size, axis or first, found some (describe one tensor, weights[name], "
                "for those)",
            )
        return describe_weights(array, progress=progress, sort=sort)
    for given, value in (("progress", progress), ("sort", sort)):
        if value is not None:
            raise KilnError(
                "SHAPE",
                f"{given}= is for describe(weights): expected a Weights with it, found "
                f"{type(array).__name__}",
            )
    head = check_int(first, "first", kind="SHAPE", maximum=MAX_INT64)
    if scales is not None:
        return describe_scaled(array, scales, block_size, -1 if axis is None else axis, head)
    if block_size is not None or axis is not None:
        given = "block_size" if block_size is not None else "axis"
        raise KilnError(
            "SHAPE",
            f"{given} is for block-scaled tensors: expected scales with it, found "
            f"{given}={show_value(block_size if block_size is not None else axis)} and no scales",
        )
    q = quantized(array)
    if q is not None:
        return describe_quantized(q, head)
    row, shape, chunks = source(array)
    return summarize(row, shape, chunks, head)


@set_module("kiln_np")
def plot_histograms(
    weights: Weights,
    *patterns: str,
    exclude: str | Iterable[str] = (),
    limit: int | None = 16,
    log: bool = True,
) -> Figure:
    """A grid of histograms of a checkpoint's tensors, picked by name.

    The tensors are :meth:`Weights.select`'s (globs on the names; all with no
    pattern), in file order, at most ``limit`` of them; each is described by
    :func:`kiln_np.describe` (read a bounded chunk at a time) and drawn by
    :func:`~kiln_np._explore.pictures.histogram_grid`, four panels to a row.
    The figure's title says how many tensors matched and how many were left out.

    Parameters
    ----------
    weights : Weights
        An open checkpoint (:func:`kiln_np.open_weights`).
    *patterns : str
        Globs a name must match one of (``"*.mlp.*"``, ``"blk.0.*"``).
    exclude : str or iterable of str
        Globs whose names are dropped.
    limit : int or None
        Draw at most this many tensors (at least 1); None for all.
    log : bool
        Logarithmic count axes.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    KilnError
        SHAPE for a ``limit`` that is not an integer >= 1; TYPE for a tensor
        :func:`kiln_np.describe` cannot read (exclude it).
    TypeError
        When ``weights`` is not a :class:`Weights` or a pattern not a str.
    ImportError
        When matplotlib is not installed.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import shutil, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> tensors = {"a.0.w": np.ones(4, "f4"), "a.1.w": np.ones(4, "f2"), "b": np.ones(2)}
    >>> _ = kiln_np.save_weights(d + "/w.safetensors", tensors, format="safetensors")
    >>> with kiln_np.open_weights(d + "/w.safetensors") as w:
    ...     print(plot_histograms(w, "a.*", limit=1).get_suptitle())
    a.*: 1 of 2 tensors (1 more left out: limit=1)
    >>> shutil.rmtree(d)
    """
    if not isinstance(weights, Weights):
        raise KilnError("TYPE", f"plot_histograms: expected Weights, found {show_value(weights)}")
    most = None if limit is None else check_int(limit, "limit", kind="SHAPE", minimum=1)
    chosen = weights.select(*patterns, exclude=exclude)
    names = list(chosen)[:most]
    items = [(name, describe(chosen[name])) for name in names]
    fig = histogram_grid(items, log=log)
    picked = ", ".join(patterns) if patterns else os.path.basename(weights.path)
    heading = f"{picked}: {len(names)} of {len(chosen)} tensors"
    if len(chosen) > len(names):
        heading += f" ({len(chosen) - len(names)} more left out: limit={limit})"
    fig.suptitle(printable(heading), **PLAIN)
    return fig
