"""Issue 36: a tensor name (or a pattern, a path, a title) holding ``$`` is
drawn as the characters it is, in every picture: never parsed as matplotlib's
mathtext (``a$x^2$b`` drawn as a formula, ``$\\frac{$`` a traceback), never
handed to TeX."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _helpers import available, needs, optional

import kiln_np
from kiln_np._explore import heatmap_figure, histogram_grid

if TYPE_CHECKING:
    import matplotlib
    import matplotlib.text
    from matplotlib.figure import Figure
else:
    matplotlib = optional("matplotlib", "text")

if available("matplotlib"):
    matplotlib.use("Agg")

# Roles (what heatmap columns and panel titles show) that mathtext reads as a
# formula (a$x^2$b, c$$d: an empty formula) or fails to parse ($\frac{$).
_ROLES = ["a$x^2$b", "$\\frac{$", "c$$d"]
_NAMES = [f"blk.{layer}.{role}.weight" for layer in (0, 1) for role in _ROLES]
# The mathtext of the tick labels no data reaches: kiln_np's binary exponents
# (2^-3) and matplotlib's log-axis numbers (10^2, 2x10^-1).
_OWN_MATH = re.compile(r"\$(2\^\{-?\d+\}|\\mathdefault\{[^$]*\})\$$")

pytestmark = needs("matplotlib")  # every test draws


@pytest.fixture(autouse=True)
def _close_figures() -> Any:
    yield
    if available("matplotlib"):
        import matplotlib.pyplot as plt

        plt.close("all")


def _plain_texts(fig: Figure, *, draw: bool = True) -> list[str]:
    """The texts of ``fig`` holding a ``$``, each checked to be drawn as it
    is: not mathtext (matplotlib's own decision), not TeX."""
    if draw:
        fig.canvas.draw()  # a mathtext parse error raises here
    texts = [
        t
        for t in fig.findobj(matplotlib.text.Text)
        if t.get_visible() and "$" in t.get_text() and not _OWN_MATH.match(t.get_text())
    ]
    for t in texts:
        what = (t.get_text(), t.get_parse_math(), t.get_usetex())
        assert what == (t.get_text(), False, False)
        assert t._preprocess_math(t.get_text()) == (t.get_text(), False)  # type: ignore[attr-defined]
    return sorted(t.get_text() for t in texts)


def test_the_heatmap_draws_names_with_dollars_as_they_are() -> None:
    fig = heatmap_figure(
        _NAMES, [0.5, 0.25, 2.0, 1.0, 0.125, 4.0], label="std $\\sigma$", title="$t$ by layer"
    )
    assert _plain_texts(fig) == sorted([*_ROLES, "std $\\sigma$", "$t$ by layer"])


def test_histogram_titles_draw_names_with_dollars_as_they_are() -> None:
    items = [(role, kiln_np.describe(np.ones(4, np.float32))) for role in _ROLES]
    items.append(("i$n$t", kiln_np.describe(np.ones(2, np.int64))))  # its panel's message
    fig = histogram_grid(items)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [f"{r}\nf32, 4" for r in _ROLES] + ["i$n$t\ni64, 2"]
    assert _plain_texts(fig) == sorted(titles)


def test_plot_histograms_title_draws_a_pattern_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    tensors = {name: np.ones(4, np.float32) for name in _NAMES}
    kiln_np.save_weights(path, tensors, format="safetensors")
    with kiln_np.open_weights(path) as w:
        fig = kiln_np.plot_histograms(w, "blk.0.a$*", limit=1)
    assert fig.get_suptitle() == "blk.0.a$*: 1 of 1 tensors"
    assert "blk.0.a$*: 1 of 1 tensors" in _plain_texts(fig)


def test_a_report_of_names_with_dollars_is_written(tmp_path: Path) -> None:
    """Before issue 36 the report of these names raised matplotlib's mathtext
    ValueError (``$\\frac{$``) while drawing its heatmap."""
    path = tmp_path / "w.safetensors"
    rng = np.random.default_rng(3)
    tensors = {n: rng.standard_normal(8).astype(np.float32) for n in _NAMES}
    kiln_np.save_weights(path, tensors, format="safetensors")
    kiln_np.report(path, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "a$x^2$b" in page
    assert page.count("<img ") >= 2  # the heatmaps and the histograms were drawn


def test_text_usetex_does_not_reach_the_names() -> None:
    """With ``text.usetex`` on, a name would go to TeX (``^`` and ``$`` are
    markup there): every text kiln_np draws from data is plain all the same."""
    with matplotlib.rc_context({"text.usetex": True}):
        fig = heatmap_figure(_NAMES, [1.0] * 6, label="std")
        assert _plain_texts(fig, draw=False) == sorted(_ROLES)
        assert all(not t.get_usetex() for t in fig.axes[0].get_xticklabels())
