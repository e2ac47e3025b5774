"""Value histograms (``kiln_np._explore.values``): the finite values in equal bins
from min to max, exactly, whichever way they are counted (from a small type's
bit patterns, or in one more chunked pass), against numpy's histogram; and the
grid that draws them."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from _helpers import needs, raises_kind

import kiln_np
from kiln_np import describe
from kiln_np._explore import chunks
from kiln_np._explore.values import BINS, ValueHistogram, value_histogram
from kiln_np.gguf import dequantize


def _numpy(values: np.ndarray, bins: int = BINS) -> list[int]:
    """numpy's counts of the finite values in ``bins`` equal bins from min to max."""
    wide = values.astype(np.float64).ravel()
    finite = wide[np.isfinite(wide)]
    counts, _ = np.histogram(finite, bins=bins, range=(finite.min(), finite.max()))
    return [int(c) for c in counts]


def test_edges_and_the_last_value(tmp_path: Path) -> None:
    x = np.array([0.0, 0.25, 0.5, 0.75, 1.0, np.nan, np.inf, -np.inf])
    h = value_histogram(x, describe(x), bins=4)
    assert h is not None
    assert h.counts.tolist() == [1, 1, 1, 2]  # an inner edge in the bin above; max in the last
    assert h.edges.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert int(h.counts.sum()) == 5  # NaN and infinities left out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint64])
def test_a_wide_type_is_numpys_histogram(dtype: type) -> None:
    rng = np.random.default_rng(37)
    x: np.ndarray = (rng.standard_normal((300, 70)) * 50).astype(dtype)
    h = value_histogram(x, describe(x))
    assert h is not None
    assert h.counts.tolist() == _numpy(x)
    assert (h.low, h.high) == (float(x.min()), float(x.max()))


@pytest.mark.parametrize(
    "dtype",
    [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn, np.int8],
)
def test_a_small_type_is_counted_from_its_patterns_without_a_pass(
    dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(38)
    x: np.ndarray = (rng.standard_normal((200, 64)) * 3).astype(dtype)
    description = describe(x)
    assert description.histogram is not None
    read = []
    whole = chunks.source

    def counting(array: object) -> object:
        read.append(array)
        return whole(array)  # type: ignore[arg-type]

    monkeypatch.setattr("kiln_np._explore.values.source", counting)
    h = value_histogram(x, description, bins=32)
    assert read == []  # no second pass over the data
    assert h is not None
    assert h.counts.tolist() == _numpy(x, 32)
    # The same values as float32 (exact), counted in a pass: the same bins.
    wide = x.astype(np.float32)
    assert value_histogram(wide, describe(wide), bins=32).counts.tolist() == h.counts.tolist()  # type: ignore[union-attr]
    assert len(read) == 1


def test_a_ggml_tensor_is_its_dequantized_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(39)
    path = tmp_path / "q.gguf"
    floats = rng.standard_normal((8, 256)).astype(np.float32)
    kiln_np.save_weights(path, {"w": floats}, format="gguf", quantize="*=q4_k")
    with kiln_np.open_weights(path) as w:
        t = w["w"]
        assert t.format_dtype == "Q4_K"
        h = value_histogram(t, describe(t))
        values = dequantize(t)
    assert h is not None
    assert h.counts.tolist() == _numpy(values)


def test_one_value_no_value_and_a_range_past_the_largest_float() -> None:
    one = np.full(5, 0.5, np.float32)
    h = value_histogram(one, describe(one), bins=3)
    assert h is not None
    assert h.counts.tolist() == [5]  # one value: one bin around it
    assert h.edges.tolist() == [0.25, 0.75]
    none = np.array([np.nan, np.inf], np.float32)
    assert value_histogram(none, describe(none)) is None
    assert value_histogram(np.zeros(0, np.float32), describe(np.zeros(0, np.float32))) is None
    huge = np.array([-1e308, 0.0, 1e308])
    h = value_histogram(huge, describe(huge), bins=2)
    assert h is not None
    assert h.counts.tolist() == [1, 2]  # no overflow: max - min is past the largest float


def test_bins_below_one_are_shape() -> None:
    x = np.ones(3, np.float32)
    raises_kind("SHAPE", value_histogram, x, describe(x), bins=0)


def test_the_edges_of_a_histogram() -> None:
    h = ValueHistogram(-1.0, 1.0, np.zeros(4, np.int64))
    assert h.edges.tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert ValueHistogram(0.0, 0.0, np.zeros(2, np.int64)).edges.tolist() == [-0.5, 0.0, 0.5]


@needs("matplotlib")
def test_the_grid_draws_each_histogram_and_says_when_there_is_none() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.patches import StepPatch

    from kiln_np._explore import value_grid

    x = np.linspace(-2, 2, 400, dtype=np.float32)
    nan = np.full(3, np.nan, np.float32)
    items = [
        ("blk.0.$x$.weight", describe(x), value_histogram(x, describe(x), bins=8)),
        ("n", describe(nan), None),
    ]
    fig = value_grid(items, columns=2)
    drawn, empty = fig.axes
    (step,) = drawn.patches  # one outline, whatever the bins
    assert isinstance(step, StepPatch)
    heights, edges, _ = step.get_data()
    assert heights.tolist() == [50.0] * 8
    assert edges.tolist() == [-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0]
    assert (drawn.get_yscale(), drawn.get_ylim()[0]) == ("log", 0.5)
    assert drawn.get_title() == "blk.0.$x$.weight\nf32, 400"  # plain text, never mathtext
    assert drawn.get_xlabel() == "value (8 equal bins, min to max)"
    assert [t.get_text() for t in empty.texts] == ["no finite value"]
    linear = value_grid(items[:1], log=False).axes[0]
    assert (linear.get_yscale(), linear.get_ylabel()) == ("linear", "count")
    # An empty bin on a log axis stands at the axis' floor: nothing drawn there.
    gap = np.array([0.0, 0.0, 1.0, 1.0], np.float32)
    fig = value_grid([("g", describe(gap), value_histogram(gap, describe(gap), bins=4))])
    (step,) = fig.axes[0].patches
    assert isinstance(step, StepPatch)
    assert step.get_data()[0].tolist() == [2.0, 0.5, 0.5, 2.0]
