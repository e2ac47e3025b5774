"""Drawing histograms with matplotlib: where the optional dependency starts.

matplotlib is imported when a figure is first drawn (``pip install
'kiln-np[plot]'``), never when the notebook helpers load.  These functions
draw counts they are given; :meth:`kiln_np.Description.plot` and
:meth:`kiln_np.ScaledDescription.plot` choose what to draw and title it.

Every text kiln_np gives matplotlib is drawn as plain text (:data:`PLAIN`):
titles, axis and colour-bar labels, tick labels and messages, so a tensor name
or a pattern holding ``$`` is drawn as it is, never parsed as mathtext (a
formula, or a traceback for ``$\\frac$``) or handed to TeX.  The one
exception is kiln_np's own binary-exponent ticks, ``$2^{-3}$``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "PLAIN",
    "draw_exponents",
    "draw_patterns",
    "draw_scale_exponents",
    "draw_values",
    "figure",
]

PLAIN: dict[str, Any] = {"parse_math": False, "usetex": False}
"""The text properties of every string kiln_np draws (titles, labels, ticks,
messages): the characters as they are, never mathtext, never TeX (whatever
``text.usetex`` says)."""


def figure(size: tuple[float, float], panels: int = 1) -> tuple[Figure, list[Axes]]:
    """A new figure that lays itself out (constrained layout): labels stay inside
    the saved picture.

    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> fig, axes = figure((6, 3), 2)
    >>> len(axes)
    2
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot() needs matplotlib: pip install 'kiln-np[plot]'") from exc
    fig = plt.figure(figsize=size, layout="constrained")
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


def draw_patterns(ax: Axes, counts: np.ndarray, values: np.ndarray, log: bool) -> None:
    """Counts by bit pattern as bars (one filled outline past 256 patterns), the
    ticks labelled with each pattern's value from ``values`` and its hex."""
    patterns = np.arange(counts.size)
    if counts.size <= 256:
        ax.bar(patterns, counts, width=0.85, log=log)
    else:  # 65,536 bars would be 65,536 patches: one filled outline instead
        ax.fill_between(patterns, counts, step="mid", linewidth=0)
        if log:
            ax.set_yscale("log")
    # Every pattern labelled for 4-bit types, every 16th for 8-bit ones, every
    # 8192nd (short values) for 16-bit ones.
    wide = counts.size > 256
    ticks = patterns[:: 8192 if wide else max(1, counts.size // 16)]
    digits = {2: 1, 16: 1, 256: 2}.get(counts.size, 4)
    shown = [f"{float(values[t]):.3g}" if wide else str(values[t]) for t in ticks.tolist()]
    labels = [f"{v}\n0x{t:0{digits}x}" for v, t in zip(shown, ticks, strict=True)]
    ax.set_xticks(ticks, labels, **PLAIN)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("value / bit pattern", **PLAIN)


def draw_exponents(ax: Axes, counts: np.ndarray, bias: int, log: bool) -> None:
    """Counts by exponent field as bars: the used range of binary exponents (field
    minus ``bias``), then zeros and subnormals on the left and infinities and
    NaNs on the right, each one bar set apart."""
    top = counts.size - 1
    used = np.flatnonzero(counts[1:top]) + 1
    fields = np.arange(used[0], used[-1] + 1) if used.size else np.arange(1, 1)
    place = fields - bias
    ticks = list(place[:: max(1, -(-fields.size // 14))])
    labels = [f"$2^{{{e}}}$" for e in ticks]
    left = int(place[0]) - 2 if place.size else 0
    right = int(place[-1]) + 2 if place.size else 2
    ends = [(left, 0, "0/sub"), (right, top, "inf/nan")]
    for where, field, label in ends:
        if counts[field]:
            place = np.append(place, where)
            fields = np.append(fields, field)
            ticks.append(where)
            labels.append(label)
    ax.bar(place, counts[fields], width=0.85, log=log)
    ax.set_xticks(ticks, labels)  # kiln_np's own mathtext: 2 to the power e
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("binary exponent e (|x| in [2^e, 2^(e+1)))", **PLAIN)


def draw_scale_exponents(ax: Axes, exponents: list[tuple[int, int]], log: bool) -> None:
    """Blocks by scale exponent, from (exponent, blocks) pairs."""
    from matplotlib.ticker import MaxNLocator

    if exponents:
        where, counts = zip(*exponents, strict=True)
        ax.bar(where, counts, width=0.85, log=log)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("scale exponent (scale = 2^e)", **PLAIN)
    ax.set_ylabel("blocks", **PLAIN)


def draw_values(ax: Axes, edges: np.ndarray, counts: np.ndarray, log: bool) -> None:
    """Counts of values in equal bins (``edges``: one more than ``counts``) as one
    filled step outline (one patch, however many bins: a picture of 16 panels
    renders in a fraction of the time bars take), on a logarithmic count axis
    from 0.5 when ``log`` (a bin of one value shows; an empty bin draws nothing)."""
    from matplotlib.ticker import MaxNLocator, NullLocator

    floor = 0.5 if log else 0.0
    heights = np.where(counts > 0, counts, floor).astype(np.float64)
    ax.stairs(heights, edges, fill=True, baseline=floor, linewidth=0)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(bottom=floor, top=max(float(counts.max()), 1.0) * 1.5)
        # The decades are labelled; minor ticks would halve how fast a grid renders.
        ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlim(float(edges[0]), float(edges[-1]))
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))  # labels that never run together
    ax.tick_params(axis="x", labelsize=8)
    bins = "one value" if counts.size == 1 else f"{counts.size} equal bins, min to max"
    ax.set_xlabel(f"value ({bins})", **PLAIN)
    ax.set_ylabel("count (log scale)" if log else "count", **PLAIN)
