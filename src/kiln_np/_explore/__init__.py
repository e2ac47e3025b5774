"""Looking at what a tensor really holds: summaries, exact histograms, plots.

:func:`describe` summarizes an array of any Kiln dtype (counts of NaN, inf,
zero and subnormal elements; min, max, absmax, mean and std; the first
values; the exact bit-pattern histogram for types of 16 bits or fewer and the
histogram by binary exponent for the floats of 16 bits or more).  Given
``scales`` it summarizes a block-scaled (MX, NVFP4-style) tensor: its scale
exponents, its element codes, its dequantized values, and how many blocks
saturate or are all zero.  Given a GGML quantized payload or weight tensor
(Q8_0, Q4_K, ...) it summarizes its exact dequantized values and its blocks'
scale fields (:class:`QuantizedDescription`), a bounded run of blocks at a
time; an FNUZ float8 tensor is described as its float type.
:func:`bit_histogram` counts each bit pattern exactly and :func:`bit_values`
says what each pattern means.

numpy's reductions trip over several ml_dtypes types, and the original bits
must never change.  So types of 16 bits or fewer are only counted, pattern by
pattern (``np.bincount`` on the storage bits), and their statistics come
exactly from those counts and the value of each pattern; wider types are
widened to a *copy* (float64 for floats, int64/uint64 for integers) one
cache-sized chunk at a time.  Memory stays bounded and a memory-mapped file
is read once, sequentially.  Means and standard deviations are accumulated
scaled by a power of two, so they never overflow (``[1e308, 1e308]`` has the
mean ``1e308``, without a warning).

Modules, bottom up: ``chunks`` (what is read, in C-order chunks), ``patterns``
(bit patterns and their exact counts), ``plot`` (matplotlib, the optional
dependency), ``description`` (:class:`Description` and its text, HTML and dict
views), ``stats`` (the streaming engine, :func:`summarize`), ``scaled``
(:class:`ScaledDescription`, on :mod:`kiln_np.mx`'s arithmetic and table),
``quantized`` (:class:`QuantizedDescription`, on the GGML decoders), ``layers``
(tensor names read as stack, layer and role), ``values`` (value histograms: finite
values in equal bins), ``pictures`` (the per-layer heatmap and the histogram grids),
``weight_stats`` (:class:`WeightStats`: every tensor of a checkpoint), ``entry``
(:func:`describe`, :func:`plot_histograms`), ``metrics`` (the error figures of two
tensors, their aggregates per layer and per role, the saturation of MX and NVFP4
tensors), ``comparison`` (:func:`compare`: two checkpoints, name by name),
``metadata`` (a weight file's metadata key by key with its type, the model's title),
``page`` (a self-contained HTML page), ``report`` (:func:`report`: the page of a
checkpoint); ``golden`` runs the
golden case files.
"""

from .chunks import CHUNK, flat_chunks
from .comparison import Comparison, TensorComparison, compare
from .description import Description
from .entry import describe, plot_histograms
from .layers import LayerGrid, layer_grid, layer_role
from .patterns import bit_histogram, bit_values
from .pictures import heatmap_figure, histogram_grid, value_grid
from .quantized import QuantizedDescription
from .scaled import ScaledDescription
from .stats import summarize
from .values import ValueHistogram, value_histogram
from .weight_stats import TensorStats, WeightStats

__all__ = [
    "CHUNK",
    "Comparison",
    "Description",
    "LayerGrid",
    "QuantizedDescription",
    "ScaledDescription",
    "TensorComparison",
    "TensorStats",
    "ValueHistogram",
    "WeightStats",
    "bit_histogram",
    "bit_values",
    "compare",
    "describe",
    "flat_chunks",
    "heatmap_figure",
    "histogram_grid",
    "layer_grid",
    "layer_role",
    "plot_histograms",
    "summarize",
    "value_grid",
    "value_histogram",
]
