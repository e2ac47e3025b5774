"""Pictures of a whole checkpoint: a per-layer heatmap and grids of histograms.

:func:`heatmap_figure` draws one value per tensor (its std, its absmax) as a grid
of layers (rows) by roles (columns), from :func:`~kiln_np._explore.layers.layer_grid`,
on a logarithmic colour scale.  :func:`histogram_grid` draws one panel per
described tensor with the drawing of ``plot`` (by binary exponent for the floats,
by bit pattern for the small types), :func:`value_grid` one panel per tensor of
its values in equal bins (:mod:`~kiln_np._explore.values`); the grid's notebook
door on a :class:`~kiln_np.Weights`
is :func:`~kiln_np._explore.entry.plot_histograms`, beside :func:`describe`, which
it calls (``weight_stats`` draws its heatmap here, and ``entry`` imports it).  Every
figure lays itself out (constrained layout), so the saved picture keeps its labels;
matplotlib is imported when one is drawn.  Every label is plain text
(:data:`~kiln_np._explore.plot.PLAIN`) of a name shown through
:func:`~kiln_np._core.checks.printable` (:func:`picture_label`): a name holding
``$`` is drawn as it is, never as mathtext.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kiln_np._core.checks import check_int, printable
from kiln_np._core.errors import KilnError

from . import plot
from .description import Description
from .layers import LayerGrid, layer_grid
from .plot import PLAIN
from .quantized import QuantizedDescription
from .values import ValueHistogram

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["heatmap_figure", "histogram_grid", "picture_label", "shorten", "value_grid"]

_LAYER_TICKS = 24  # at most this many layer numbers on a panel's axis
_STEPS = (1, 2, 4, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000)
_ENDS = frozenset({"0/sub", "inf/nan"})  # plot.draw_exponents' end bars


def shorten(text: str, width: int, *, keep: str = "middle") -> str:
    """``text`` cut to ``width`` characters with an ellipsis in the middle, or at
    the start (``keep="end"``: the end of a tensor name says the most).

    >>> shorten("model.layers.10.self_attn.q_proj.weight", 20)
    'model.laye…oj.weight'
    >>> shorten("model.layers.10.self_attn.q_proj.weight", 20, keep="end")
    '…_attn.q_proj.weight'
    """
    if len(text) <= width:
        return text
    kept = width - 1
    if keep == "end":
        return "…" + text[len(text) - kept :]
    head = (kept + 1) // 2
    return text[:head] + "…" + text[len(text) - (kept - head) :]


def picture_label(name: str) -> str:
    """A tensor name as a picture can draw it: a lone surrogate (bytes that are
    not UTF-8) and a control character as their escapes, which matplotlib's
    fonts cannot draw (it raises, or warns of a missing glyph), through
    :func:`~kiln_np._core.checks.printable`, the one escaping of text output.

    >>> picture_label("blk.\\udcff.w"), picture_label("a\\x1bb")
    ('blk.\\\\udcff.w', 'a\\\\x1bb')
    """
    return printable(name)


def _message(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, **PLAIN)
    ax.set_axis_off()


def _layer_step(rows: int) -> int:
    need = -(-rows // _LAYER_TICKS)
    return next((s for s in _STEPS if s >= need), need)


def _role_labels(grid: LayerGrid) -> list[str]:
    return [
        shorten(role, 40) + (f" (max of {n})" if n > 1 else "")
        for role, n in zip(grid.roles, grid.folded(), strict=True)
    ]


def heatmap_figure(
    names: Sequence[str],
    values: Sequence[float | None],
    *,
    label: str,
    title: str | None = None,
    stack: str | None = None,
) -> Figure:
    """One value per tensor drawn as layers (rows) by roles (columns), on a
    logarithmic colour scale.

    Names are read by :func:`~kiln_np._explore.layers.layer_role`: names with no
    layer index are left out; the experts of a mixture-of-experts layer fold into
    one role (``mlp.experts.*.down_proj``) drawn as the largest of their values,
    its tick saying how many (``(max of 128)``).  Values that are ``None``, NaN,
    infinite, zero or negative have no place on a log scale: their cells stay
    blank, as do cells with no tensor, and the picture's caption says so.  Each
    stack of layers (a vision tower, a text model) is one panel, all on one
    colour scale with one colour bar; a stack with no positive value has none.
    With no positive value at all the figure holds one panel saying so.

    Parameters
    ----------
    names : sequence of str
        Tensor names.
    values : sequence of float or None
        One per name, aligned with ``names``.
    label : str
        The colour bar's label (``'std (log scale)'``).
    title : str, optional
        The figure's title; ``'<label> by layer and role'`` by default.
    stack : str, optional
        Draw only this stack (``'model.layers'``); every stack by default.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    KilnError
        SHAPE when ``names`` and ``values`` differ in length, or ``stack`` is
        not a stack of ``names``.
    ImportError
        When matplotlib is not installed.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> names = ["blk.0.attn_q.weight", "blk.1.attn_q.weight", "blk.1.ffn_up.weight"]
    >>> fig = heatmap_figure(names, [0.5, 0.25, 0.0], label="std (log scale)")
    >>> ax = fig.axes[0]
    >>> ax.images[0].get_array().filled(-1).tolist()
    [[0.5, -1.0], [0.25, -1.0]]
    >>> ax.get_xlabel(), ax.get_ylabel(), fig.axes[1].get_ylabel()
    ('role', 'layer', 'std (log scale)')
    """
    from matplotlib.colors import LogNorm

    grids = layer_grid([picture_label(n) for n in names], values, positive=True)
    if stack is not None:
        if stack not in grids:
            known = ", ".join(repr(s) for s in grids) or "none"
            raise KilnError(
                "SHAPE",
                f"expected stack to be a stack of layers among the names ({known}), "
                f"found {stack!r}",
            )
        grids = {stack: grids[stack]}
    heading = printable(title if title is not None else f"{label} by layer and role")
    drawn = [g for g in grids.values() if g.values.count()]
    if not drawn:
        fig, empty = plot.figure((6, 2.5))
        fig.suptitle(heading, **PLAIN)
        why = "no tensor name with a layer index" if not grids else "no positive value"
        _message(empty[0], f"nothing to draw on a log scale: {why}")
        return fig
    low = min(float(g.values.min()) for g in drawn)
    high = max(float(g.values.max()) for g in drawn)
    if low == high:  # one value: a colour scale needs a range
        low, high = low / 2, high * 2
    norm = LogNorm(vmin=low, vmax=high)
    roles = max(len(g.roles) for g in drawn)
    small = roles > 40
    # Inches: each panel's rows, then its upright role labels and axis labels.
    rows = [max(1.2, 0.11 * len(g.layers)) for g in drawn]
    labels = [0.07 * max(map(len, _role_labels(g))) * (0.75 if small else 1) + 0.8 for g in drawn]
    width = min(max(6.0, 2.8 + (0.16 if small else 0.22) * roles), 30.0)
    height = min(sum(rows) + sum(labels) + 1.2, 60.0)
    fig, _ = plot.figure((width, height), 0)
    axes = fig.subplots(len(drawn), 1, squeeze=False, height_ratios=rows)[:, 0]
    image = None
    for ax, grid in zip(axes, drawn, strict=True):
        image = ax.imshow(grid.values, aspect="auto", interpolation="nearest", norm=norm)
        step = _layer_step(len(grid.layers))
        layers = [str(n) for n in grid.layers[::step]]
        ax.set_yticks(range(0, len(grid.layers), step), layers, **PLAIN)
        ax.set_xticks(range(len(grid.roles)), _role_labels(grid), rotation=90, **PLAIN)
        ax.tick_params(axis="x", labelsize=6 if small else 8)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("role", **PLAIN)
        ax.set_ylabel("layer", **PLAIN)
        ax.set_title(grid.stack or "(no prefix)", fontsize=10, **PLAIN)
    assert image is not None
    fig.colorbar(image, ax=list(axes)).set_label(printable(label), **PLAIN)
    fig.suptitle(heading, **PLAIN)
    notes = []  # said only of what the picture shows
    if any(bool(np.ma.getmaskarray(g.values).any()) for g in drawn):
        notes.append("blank: no tensor, or a value that is zero, negative, NaN or infinite")
    if any(n > 1 for g in drawn for n in g.folded()):
        notes.append("(max of n): the largest of n tensors folded into one role")
    if notes:
        fig.supxlabel("\n".join(notes), fontsize=8, **PLAIN)
    return fig


def _type_of(description: Description | QuantizedDescription) -> str:
    if isinstance(description, QuantizedDescription):
        return description.type
    return description.name


def _thin_ticks(ax: Axes, most: int = 8) -> None:
    """Every k-th x tick label (and the zero and inf/nan ends), at most ``most``."""
    ticks = list(ax.get_xticks())
    texts = [t.get_text() for t in ax.get_xticklabels()]
    step = -(-len(ticks) // most)
    if step <= 1:
        return
    kept = [i for i, text in enumerate(texts) if i % step == 0 or text in _ENDS]
    ax.set_xticks([ticks[i] for i in kept], [texts[i] for i in kept])


def _heading(name: str, description: Description | QuantizedDescription) -> str:
    shape = "x".join(map(str, description.shape)) or "scalar"
    return f"{shorten(name, 40, keep='end')}\n{_type_of(description)}, {shape}"


def _draw_panel(
    ax: Axes, name: str, description: Description | QuantizedDescription, log: bool
) -> None:
    part = description.values if isinstance(description, QuantizedDescription) else description
    heading = _heading(name, description)
    if part.exponents is None and part.histogram is None:
        _message(ax, f"{part.name}: no histogram (32- and 64-bit integers have none)")
    else:
        part.plot(ax, log=log)
        _thin_ticks(ax)
        ax.xaxis.label.set_fontsize(8)
        ax.yaxis.label.set_fontsize(8)
    ax.set_title(heading, fontsize=9, **PLAIN)


def histogram_grid(
    items: Sequence[tuple[str, Description | QuantizedDescription]],
    *,
    log: bool = True,
    columns: int = 4,
) -> Figure:
    """One histogram panel per described tensor, ``columns`` to a row.

    Each panel is titled with the tensor's name (its end, when long), type and
    shape.  A float tensor (and a GGML quantized one, by its values) is drawn
    by binary exponent, a type of 8 bits or fewer by bit pattern, as
    :meth:`kiln_np.Description.plot` draws them; a 32- or 64-bit integer
    tensor's panel says it has no histogram.

    Parameters
    ----------
    items : sequence of (str, Description or QuantizedDescription)
        Tensor names and what :func:`kiln_np.describe` found in them.
    log : bool
        Logarithmic count axes (weights pile up on a few exponents).
    columns : int
        Panels per row (at least 1).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from kiln_np import describe
    >>> import numpy as np
    >>> items = [("a.weight", describe(np.ones(4, np.float32))), ("b", describe(np.ones(4, "i1")))]
    >>> [ax.get_title() for ax in histogram_grid(items).axes]
    ['a.weight\\nf32, 4', 'b\\ni8, 4']
    """
    fig, panels = _panels(len(items), columns)
    for panel, (name, description) in zip(panels, items, strict=True):
        _draw_panel(panel, picture_label(name), description, log)
    return fig


def _panels(count: int, columns: object) -> tuple[Figure, list[Axes]]:
    """A figure of ``count`` panels, ``columns`` (at least 1) to a row; with no
    panel, a small figure that says so."""
    per_row = check_int(columns, "columns", kind="SHAPE", minimum=1)
    if not count:
        fig, axes = plot.figure((5, 2.5))
        _message(axes[0], "no tensors to draw")
        return fig, []
    per_row = min(per_row, count)
    rows = -(-count // per_row)
    fig, _ = plot.figure((3.9 * per_row, 3.1 * rows), 0)
    return fig, [fig.add_subplot(rows, per_row, i + 1) for i in range(count)]


def value_grid(
    items: Sequence[tuple[str, Description | QuantizedDescription, ValueHistogram | None]],
    *,
    log: bool = True,
    columns: int = 4,
) -> Figure:
    """One panel per tensor of its finite values in equal bins from its min to
    its max (:func:`~kiln_np._explore.values.value_histogram`), ``columns`` to a
    row, titled as :func:`histogram_grid` titles them.

    Parameters
    ----------
    items : sequence of (str, Description or QuantizedDescription, ValueHistogram or None)
        Tensor names, what :func:`kiln_np.describe` found in them and their
        value histograms (None: no finite value, which the panel says).
    log : bool
        Logarithmic count axes (the tails hold few values).
    columns : int
        Panels per row (at least 1).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from kiln_np import describe
    >>> from kiln_np._explore.values import value_histogram
    >>> x = np.linspace(-1, 1, 100, dtype=np.float32)
    >>> d = describe(x)
    >>> fig = value_grid([("w", d, value_histogram(x, d, bins=10))])
    >>> ax = fig.axes[0]
    >>> (step,) = ax.patches  # one filled outline of the bins
    >>> step.get_data().values.tolist(), [float(v) for v in ax.get_xlim()]
    ([10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0], [-1.0, 1.0])
    >>> ax.get_yscale(), ax.get_title()
    ('log', 'w\\nf32, 100')
    """
    fig, panels = _panels(len(items), columns)
    for ax, (name, description, histogram) in zip(panels, items, strict=True):
        if histogram is None:
            _message(ax, "no finite value")
        else:
            plot.draw_values(ax, histogram.edges, histogram.counts, log)
            ax.xaxis.label.set_fontsize(8)
            ax.yaxis.label.set_fontsize(8)
        ax.set_title(_heading(picture_label(name), description), fontsize=9, **PLAIN)
    return fig
