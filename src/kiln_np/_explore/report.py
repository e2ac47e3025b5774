"""A checkpoint's report: one self-contained HTML file to open in a browser.

:func:`report` writes the summary (counts, bytes, bits per weight, the table
by stored type, the memory estimate), the metadata key by key with its type,
the tree of names with repeated layers folded, the statistics of every tensor,
the per-layer heatmap and a grid of histograms.  The file needs nothing else
to be read: the style sheet and the sorting script are inline, the pictures
are PNG data inside ``<img>`` tags, and a Content-Security-Policy forbids the
page any network request (``default-src 'none'``) and any script but its own
(``script-src`` names the one script's SHA-256).

Every name, metadata key and value is escaped: a hostile file's tensor named
``</table><script>...`` is text on the page.  A lone surrogate (a name whose
bytes are not UTF-8) is written as its escape, ``\\udcff``; a control character
as ``\\x1b``.

Sizes are bounded: each table shows at most ``max_rows`` rows (2,000 by
default) and says how many it leaves out; the metadata shows a long array by
its length and first items and cuts long strings; the tree folds repeated
layers.  Clicking a column header of the statistics table or of the table by
type sorts its rows (again: the other way); numbers sort as numbers, names
with their layer indices as numbers (``blk.10`` after ``blk.9``), and an
empty or NaN cell stays last either way.

The pictures need matplotlib (``pip install 'kiln-np[plot]'``); without it the
report is written without them and says so where they would stand.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import math
import os
import struct
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kiln_np._core.checks import check_path, printable, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._files.io import replacing
from kiln_np._version import __version__
from kiln_np._weights.summary import NOTE, Summary, human_bytes, human_count, shown_bits
from kiln_np._weights.weights import Weights
from kiln_np.formats import open_weights

from .entry import describe
from .layers import layer_role
from .metadata import metadata_rows
from .pictures import heatmap_figure, histogram_grid
from .weight_stats import Progress, WeightStats, describe_weights

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MAX_ROWS", "input_files", "report", "report_html"]

MAX_ROWS = 2000
"""The rows each table of the report shows at most, by default."""


def text(value: object) -> str:
    """``value`` as HTML text (or an attribute's value): shown through
    :func:`~kiln_np._core.checks.printable` (control characters as ``\\xNN``,
    lone surrogates as ``\\udcNN``), then ``& < > " '`` escaped.

    Examples
    --------
    >>> text("<script>alert(1)</script>"), text("a\\x1bb")
    ('&lt;script&gt;alert(1)&lt;/script&gt;', 'a\\\\x1bb')
    """
    return html.escape(printable(str(value)), quote=True)


def dotted(name: str) -> str:
    """A dotted name as HTML text that may break after each dot (``<wbr>``).

    >>> dotted("model.layers.0.<w>")
    'model.<wbr>layers.<wbr>0.<wbr>&lt;w&gt;'
    """
    return text(name).replace(".", ".<wbr>")


_STYLE = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #d9dde5; --band: #f4f6f9; --accent: #2f5fb3; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1400px; padding: 1.5rem 2rem 3rem; color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1 { font-size: 1.6rem; margin: 0 0 .2rem; word-break: break-all; }
h2 { font-size: 1.2rem; margin: 2rem 0 .6rem; padding-bottom: .25rem;
  border-bottom: 2px solid var(--line); }
.sub { color: var(--muted); margin: 0; word-break: break-all; }
nav { margin: .8rem 0 0; }
nav a { color: var(--accent); margin-right: 1rem; text-decoration: none; }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(13rem, 1fr));
  gap: .6rem; margin: 0 0 1rem; }
.fact { background: var(--band); border-radius: 6px; padding: .5rem .75rem; }
.fact dt { color: var(--muted); font-size: .8rem; text-transform: uppercase;
  letter-spacing: .04em; }
.fact dd { margin: 0; font-size: 1.15rem; font-weight: 600; word-break: break-all; }
.fact.wide { grid-column: span 2; }
.fact.wide dd { font: 600 .95rem/1.3 ui-monospace, Menlo, Consolas, monospace; }
.fact.wide dd small { display: block; font-family: system-ui, sans-serif; word-break: normal; }
.fact dd small { font-weight: 400; color: var(--muted); font-size: .8rem; }
.note { color: var(--muted); font-size: .85rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: .3rem 0; }
th, td { padding: .22rem .6rem; border-bottom: 1px solid var(--line); text-align: right;
  white-space: nowrap; }
th { background: var(--band); font-weight: 600; position: sticky; top: 0; }
th.text, td.text { text-align: left; }
td.name { text-align: left; font-family: ui-monospace, Menlo, Consolas, monospace;
  font-size: .85rem; white-space: normal; overflow-wrap: anywhere; min-width: 14rem; }
td.value { text-align: left; white-space: pre-wrap; word-break: break-all;
  font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .85rem; }
td.bad { color: #b3261e; font-weight: 600; }
table.sortable th { cursor: pointer; user-select: none; }
#stats { font-size: .8rem; }
#stats th, #stats td { padding: .2rem .4rem; }
#stats td.name { font-size: .8rem; min-width: 12rem; }
table.sortable th::after { content: " \\2195"; color: #a0a7b4; font-weight: 400; }
table.sortable th[aria-sort=ascending]::after { content: " \\2191"; color: var(--accent); }
table.sortable th[aria-sort=descending]::after { content: " \\2193"; color: var(--accent); }
tbody tr:nth-child(even) { background: #fafbfc; }
figure { margin: .5rem 0; }
.pictures { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; }
.pictures figure { margin: 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: .85rem; }
footer { margin-top: 2.5rem; color: var(--muted); font-size: .8rem; }
"""

_SCRIPT = """
(function () {
  "use strict";
  var collate = new Intl.Collator(undefined, {numeric: true}).compare;
  function sortBy(table, th, column) {
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var numeric = th.hasAttribute("data-numeric");
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell) {
      cell.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var keyed = Array.prototype.map.call(body.rows, function (row, index) {
      var cell = row.cells[column];
      var key = numeric ? parseFloat(cell.getAttribute("data-v")) : cell.textContent;
      return {key: key, index: index, row: row};
    });
    keyed.sort(function (a, b) {
      var aMissing = numeric && isNaN(a.key), bMissing = numeric && isNaN(b.key);
      if (aMissing || bMissing) {
        return aMissing === bMissing ? a.index - b.index : (aMissing ? 1 : -1);
      }
      var order = numeric ? (a.key < b.key ? -1 : (a.key > b.key ? 1 : 0))
                          : collate(a.key, b.key);
      return order === 0 ? a.index - b.index : (ascending ? order : -order);
    });
    var rows = document.createDocumentFragment();
    keyed.forEach(function (k) { rows.appendChild(k.row); });
    body.appendChild(rows);
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, th, column); });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(table, th, column);
        }
      });
    });
  });
})();
"""

_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
_POLICY = (
    f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    f"script-src 'sha256-{_SCRIPT_HASH}'"
)

_NO_MATPLOTLIB = (
    "The pictures need matplotlib, which is not installed: pip install 'kiln-np[plot]' "
    "and write the report again."
)


def _fact(label: str, value: str, detail: str = "", *, ident: str = "", kind: str = "") -> str:
    """One fact: its label, its value (in a ``<span>`` with ``ident`` as its
    id), a detail in small type; ``kind`` a class (``wide``: two columns)."""
    ident_attr = f' id="{ident}"' if ident else ""
    small = f" <small>{text(detail)}</small>" if detail else ""
    return (
        f'<div class="fact {kind}"><dt>{text(label)}</dt>'
        f"<dd><span{ident_attr}>{text(value)}</span>{small}</dd></div>"
    )


def _number_cell(value: float | int | None, shown: str | None = None) -> str:
    """A numeric cell: ``data-v`` is what sorts (empty for none or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        key = ""
    elif isinstance(value, int):
        key = str(value)
    else:
        key = repr(float(value)).replace("inf", "Infinity")
    return f'<td data-v="{key}">{text(shown if shown is not None else value)}</td>'


def _head_cell(label: str, *, numeric: bool) -> str:
    if numeric:
        return f"<th data-numeric>{text(label)}</th>"
    return f'<th class="text">{text(label)}</th>'


def _left_out(shown: int, total: int, what: str, hint: str = "") -> str:
    if shown >= total:
        return ""
    more = f"; {hint}" if hint else ""
    return (
        f'<p class="note">The first {shown:,} of {total:,} {what} are shown '
        f"({total - shown:,} left out{more}).</p>"
    )


def summary_section(summary: Summary) -> str:
    """The summary: facts (``id="tensor-count"`` and ``id="parameter-count"``
    hold the tensor count and the parameter total), then the table by type.

    Examples
    --------
    >>> from types import SimpleNamespace as T
    >>> from kiln_np._weights.summary import summarize
    >>> s = summarize([T(name="a<b>", shape=(4, 8), byte_length=64, format_dtype="BF16")],
    ...               format="safetensors", path="/m")
    >>> part = summary_section(s)
    >>> '<dd><span id="tensor-count">1</span>' in part, "a&lt;b&gt;" in part
    (True, True)
    """
    memory = summary.memory()
    facts = [
        _fact("tensors", f"{summary.tensors:,}", ident="tensor-count"),
        _fact(
            "parameters",
            f"{summary.parameters:,}",
            human_count(summary.parameters),
            ident="parameter-count",
        ),
        _fact("bytes", human_bytes(summary.byte_length), f"{summary.byte_length:,}"),
        _fact("bits / weight", shown_bits(summary.bits_per_weight)),
        _fact("as bf16", human_bytes(memory["bf16"])),
        _fact("as f32", human_bytes(memory["f32"])),
    ]
    if summary.largest is not None:
        facts.append(
            _fact(
                "largest",
                summary.largest,
                f"{summary.largest_parameters:,} parameters, "
                f"{human_bytes(summary.largest_byte_length)}",
                kind="wide",
            )
        )
    heads = [("type", False), ("tensors", True), ("parameters", True), ("bytes", True)]
    heads.append(("bits/weight", True))
    rows = "".join(
        f'<tr><td class="text">{text(r.type)}</td>{_number_cell(r.tensors, f"{r.tensors:,}")}'
        f"{_number_cell(r.parameters, f'{r.parameters:,}')}"
        f"{_number_cell(r.byte_length, human_bytes(r.byte_length))}"
        f"{_number_cell(r.bits_per_weight, shown_bits(r.bits_per_weight))}</tr>"
        for r in summary.types
    )
    return (
        '<section id="summary"><h2>Summary</h2>'
        f'<dl class="facts">{"".join(facts)}</dl>'
        f'<p class="note">{text(NOTE)}.</p>'
        '<div class="scroll"><table class="sortable" id="types"><thead><tr>'
        + "".join(_head_cell(label, numeric=numeric) for label, numeric in heads)
        + f"</tr></thead><tbody>{rows}</tbody></table></div></section>"
    )


def metadata_section(metadata: Mapping[str, Any], max_rows: int = MAX_ROWS) -> str:
    """The metadata, key by key: its type and its value as ``kiln-np meta``
    shows it (long arrays by their length and first items).

    Examples
    --------
    >>> part = metadata_section({"name": "</style><b>x</b>", "n": 3})
    >>> "&lt;/style&gt;&lt;b&gt;x&lt;/b&gt;" in part, "</style>" in part
    (True, False)
    """
    rows = metadata_rows(metadata)
    if not rows:
        return '<section id="metadata"><h2>Metadata</h2><p class="note">No metadata.</p></section>'
    body = "".join(
        f'<tr><td class="name" style="padding-left:{0.6 + 1.5 * r.depth:g}rem">{dotted(r.key)}</td>'
        f'<td class="text">{text(r.type)}</td><td class="value">{text(r.text)}</td></tr>'
        for r in rows[:max_rows]
    )
    count = len(metadata)
    return (
        f'<section id="metadata"><h2>Metadata</h2><p class="note">{count:,} '
        f"key{'s' * (count != 1)}; every value in full: kiln-np meta PATH --json.</p>"
        '<div class="scroll"><table id="metadata-table"><thead><tr><th class="text">key</th>'
        '<th class="text">type</th><th class="text">value</th></tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
        f"{_left_out(min(max_rows, len(rows)), len(rows), 'rows')}</section>"
    )


def tree_section(summary: Summary, max_rows: int = MAX_ROWS) -> str:
    """The tree of names (:attr:`Summary.tree`): dotted prefixes grouped, layer
    indices in numeric order, identical repeated layers folded into one row.

    Examples
    --------
    >>> from types import SimpleNamespace as T
    >>> from kiln_np._weights.summary import summarize
    >>> ts = [T(name=f"layers.{i}.w", shape=(2,), byte_length=4, format_dtype="F16")
    ...       for i in range(3)]
    >>> part = tree_section(summarize(ts, format="x", path="/x"))
    >>> "0-2" in part, "x3, 1 tensor each" in part
    (True, True)
    """
    rows = []
    for r in summary.tree[:max_rows]:
        if r.shape is not None:
            what = f"{list(r.shape)} {r.type}"
        elif r.repeat > 1:
            what = f"x{r.repeat}, {r.tensors:,} tensor{'s' * (r.tensors != 1)} each"
        else:
            what = f"{r.tensors:,} tensors"
        each = " each" if r.repeat > 1 else ""
        rows.append(
            f'<tr><td class="name" style="padding-left:{0.6 + 1.5 * r.depth:g}rem">'
            f'{dotted(r.name)}</td><td class="text">{text(what)}</td>'
            f"<td>{text(human_count(r.parameters) + each)}</td>"
            f"<td>{text(human_bytes(r.byte_length) + each)}</td></tr>"
        )
    return (
        '<section id="tree"><h2>Tensor tree</h2>'
        '<p class="note">Names grouped by dotted prefix; identical consecutive layers fold '
        "into one row (0-31) followed by one member's tensors.</p>"
        '<div class="scroll"><table id="tree-table"><thead><tr><th class="text">name</th>'
        '<th class="text">what</th><th>parameters</th><th>bytes</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        f"{_left_out(min(max_rows, len(summary.tree)), len(summary.tree), 'rows')}</section>"
    )


def _sort_key(key: str) -> str:
    """A cell's sort key as the page's script reads it: ``Infinity`` for
    ``inf``, empty for NaN or none (sorted last).

    >>> [_sort_key(k) for k in ("1.5", "inf", "-inf", "nan", "")]
    ['1.5', 'Infinity', '-Infinity', '', '']
    """
    return {"inf": "Infinity", "-inf": "-Infinity", "nan": ""}.get(key, key)


def _numeric(keys: Sequence[str]) -> bool:
    """Whether a column's sort keys are numbers (empty ones aside).

    >>> _numeric(["1", "", "2.5"]), _numeric(["BF16", "F32"]), _numeric(["", ""])
    (True, False, False)
    """
    seen = False
    for key in keys:
        if key:
            try:
                float(key)
            except ValueError:
                return False
            seen = True
    return seen


_FLAGGED = frozenset({"NaN", "+inf", "-inf"})  # a nonzero count in these columns is marked


def statistics_section(
    titles: Sequence[str],
    rows: Sequence[Sequence[tuple[str, str]]],
    *,
    heading: str,
    max_rows: int = MAX_ROWS,
) -> str:
    """The statistics table (``id="stats"``): one row per tensor, each cell
    ``(text, sort key)`` as :meth:`WeightStats.html_rows` gives them; a column
    whose keys are all numbers sorts as numbers.  A nonzero NaN or infinity
    count is marked.

    Examples
    --------
    >>> part = statistics_section(["name", "std", "NaN"],
    ...                           [[("a<", "a<"), ("0.5", "0.5"), ("2", "2")]], heading="1 tensor")
    >>> '<th class="text">name</th><th data-numeric>std</th>' in part, "a&lt;" in part
    (True, True)
    >>> '<td data-v="2" class="bad">2</td>' in part
    True
    """
    numeric = [_numeric([row[i][1] for row in rows]) for i in range(len(titles))]
    head = "".join(_head_cell(t, numeric=n) for t, n in zip(titles, numeric, strict=True))
    body = []
    for row in rows[:max_rows]:
        cells = []
        for title, is_number, (shown, key) in zip(titles, numeric, row, strict=True):
            if not is_number:
                if title == "name":
                    cells.append(f'<td class="name">{dotted(shown)}</td>')
                else:
                    cells.append(f'<td class="text">{text(shown)}</td>')
                continue
            bad = ' class="bad"' if title in _FLAGGED and key not in ("", "0") else ""
            cells.append(f'<td data-v="{text(_sort_key(key))}"{bad}>{text(shown)}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    hint = "every row: kiln-np stats PATH --json"
    return (
        '<section id="statistics"><h2>Statistics</h2>'
        f'<p class="note">{text(heading)}. min, max, absmax, mean and std (population) are '
        "over the finite elements; NaN and infinities are counted apart; a GGML quantized "
        "tensor is read as its dequantized values, its blocks' scale fields given by range. "
        "Click a column header to sort.</p>"
        f'<div class="scroll"><table class="sortable" id="stats"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
        f"{_left_out(min(max_rows, len(rows)), len(rows), 'tensors', hint)}</section>"
    )


def picture(fig: Figure, alt: str, dpi: int = 110) -> str:
    """A matplotlib figure as an ``<img>`` of inline PNG data, its width and
    height given (so the page lays out before it decodes); the figure is
    closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            # A name in a script the font lacks (CJK) is drawn as boxes: the tables
            # show it whole, so the picture says nothing more on stderr.
            warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
            fig.savefig(buffer, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    png = buffer.getvalue()
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk's first fields
    data = base64.b64encode(png).decode()
    return (
        f'<img src="data:image/png;base64,{data}" alt="{text(alt)}" '
        f'width="{width}" height="{height}">'
    )


def _first_layers(names: Sequence[str]) -> list[str]:
    """The tensors a report's histograms show: those with no layer index and
    those of the first layer of each stack, in file order.

    >>> _first_layers(["tok.w", "blk.0.a", "blk.0.b", "blk.1.a", "out.w"])
    ['tok.w', 'blk.0.a', 'blk.0.b', 'out.w']
    """
    first: dict[str, int] = {}
    chosen = []
    for name in names:
        place = layer_role(name)
        if place is not None:
            stack, layer, _ = place
            if first.setdefault(stack, layer) != layer:
                continue
        chosen.append(name)
    return chosen


def _missing_pictures(ident: str, heading: str) -> str:
    return (
        f'<section id="{ident}"><h2>{text(heading)}</h2>'
        f'<p class="note">{text(_NO_MATPLOTLIB)}</p></section>'
    )


def heatmap_section(stats: WeightStats) -> str:
    """The per-layer heatmaps of std and absmax (rows: layer; columns: the
    role within the layer; log colour scale), or a note when no name has a
    layer index or matplotlib is missing."""
    heading = "Heatmap"
    names = [t.name for t in stats]
    if not any(layer_role(n) is not None for n in names):
        return (
            f'<section id="heatmap"><h2>{heading}</h2><p class="note">No tensor name has a '
            "layer index (blk.N, layers.N): there is no per-layer picture to draw.</p></section>"
        )
    if matplotlib_missing():
        return _missing_pictures("heatmap", heading)
    figures = []
    for stat in ("std", "absmax"):
        values = [None if v is None else float(v) for v in (getattr(t, stat) for t in stats)]
        if not any(
            v is not None and 0 < v < math.inf and layer_role(n) is not None
            for n, v in zip(names, values, strict=True)
        ):
            figures.append(
                f'<p class="note">No {stat} is positive and finite: nothing to draw on a log '
                "scale.</p>"
            )
            continue
        fig = heatmap_figure(
            names, values, label=f"{stat} (log scale)", title=f"{stat} by layer and role"
        )
        figures.append(
            f"<figure>{picture(fig, f'{stat} of each tensor by layer and role')}</figure>"
        )
    return (
        f'<section id="heatmap"><h2>{heading}</h2><p class="note">One cell per tensor: '
        "its layer (rows) and its role in the layer (columns), coloured by its std and "
        "by its absmax on a log scale; the experts of a layer fold into their largest.</p>"
        f'<div class="pictures">{"".join(figures)}</div></section>'
    )


def histograms_section(weights: Weights, stats: WeightStats, limit: int = 16) -> str:
    """Histograms of the tensors with no layer index and of each stack's first
    layer (at most ``limit``), by binary exponent for floats, by bit pattern
    for small types; or a note when matplotlib is missing."""
    heading = "Histograms"
    if matplotlib_missing():
        return _missing_pictures("histograms", heading)
    readable = [t.name for t in stats if t.note is None and t.count]
    chosen = _first_layers(readable)
    shown = chosen[:limit]
    items = [(name, describe(weights[name])) for name in shown]
    fig = histogram_grid(items)
    left = f" ({len(chosen) - len(shown)} more left out)" if len(chosen) > len(shown) else ""
    return (
        f'<section id="histograms"><h2>{heading}</h2><p class="note">The tensors outside '
        f"the layers and those of the first layer: {len(shown)} of {len(chosen)}{left}, "
        "counted exactly.</p>"
        f"<figure>{picture(fig, f'histograms of {len(shown)} tensors')}</figure></section>"
    )


def matplotlib_missing() -> bool:
    """Whether matplotlib cannot be imported (the pictures are left out).

    >>> matplotlib_missing()
    False
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return True
    return False


def document(title: str, subtitle: str, sections: Iterable[tuple[str, str, str]]) -> str:
    """The page: head (style, policy), a title, links to the sections
    (``(id, heading, html)`` each), the sections, the sorting script.

    Examples
    --------
    >>> page = document("m<1>", "gguf", [("a", "A", "<section id='a'></section>")])
    >>> page.startswith("<!DOCTYPE html>"), "<title>m&lt;1&gt; - kiln-np report</title>" in page
    (True, True)
    """
    parts = list(sections)
    links = "".join(f'<a href="#{ident}">{text(heading)}</a>' for ident, heading, _ in parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)} - kiln-np report</title>"
        f"<style>{_STYLE}</style></head><body>"
        f'<header><h1>{text(title)}</h1><p class="sub" id="subtitle">{text(subtitle)}</p>'
        f"<nav>{links}</nav></header>\n"
        + "\n".join(body for _, _, body in parts)
        + f"\n<footer>Written by kiln-np {text(__version__)}.</footer>"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def report_html(
    weights: Weights,
    *,
    max_rows: int = MAX_ROWS,
    histograms: int = 16,
    selection: str = "",
    progress: Progress | None = None,
) -> str:
    """The report of ``weights`` (a :class:`~kiln_np.Weights` or a view of it)
    as one HTML string; :func:`report` writes it to a file.  ``selection``
    says which tensors a view holds, under the title; ``progress`` is
    :func:`kiln_np.describe`'s, called as the statistics pass reads the tensors.

    Examples
    --------
    >>> import numpy as np, tempfile, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/m.safetensors", {"w": np.ones((2, 3), "<f4")},
    ...                        format="safetensors")
    >>> with kiln_np.open_weights(d + "/m.safetensors") as w:
    ...     page = report_html(w)
    >>> '<span id="parameter-count">6</span>' in page, page.count("<section")
    (True, 6)
    >>> import shutil; shutil.rmtree(d)
    """
    summary = weights.summary()
    stats = describe_weights(weights, progress=progress)
    titles, rows = stats.html_rows()
    flagged = (
        f"; {stats.nan:,} NaN and {stats.inf:,} infinite elements" if stats.nan or stats.inf else ""
    )
    name = os.path.basename(weights.path.rstrip(os.sep)) or weights.path
    subtitle = f"{weights.format} - {weights.path}" + (f" - {selection}" if selection else "")
    sections = [
        ("summary", "Summary", summary_section(summary)),
        ("metadata", "Metadata", metadata_section(weights.metadata, max_rows)),
        ("tree", "Tensor tree", tree_section(summary, max_rows)),
        (
            "statistics",
            "Statistics",
            statistics_section(
                titles, rows, heading=f"{len(stats):,} tensors{flagged}", max_rows=max_rows
            ),
        ),
        ("heatmap", "Heatmap", heatmap_section(stats)),
        ("histograms", "Histograms", histograms_section(weights, stats, histograms)),
    ]
    return document(name, subtitle, sections)


def _selection_text(include: Sequence[str], exclude: Sequence[str], kept: int, total: int) -> str:
    """Which tensors a selection kept, for the subtitle.

    >>> _selection_text(["blk.0.*"], ["*norm*"], 7, 75)
    "7 of 75 tensors: include 'blk.0.*', exclude '*norm*'"
    """
    given = [f"include {p!r}" for p in include] + [f"exclude {p!r}" for p in exclude]
    return f"{kept} of {total} tensors: {', '.join(given)}"


def input_files(weights: Weights) -> list[str]:
    """The files ``weights`` reads: what was opened, every tensor's file (every
    part's, for a logical view) and the ``config.json`` a logical view read.

    Examples
    --------
    >>> import numpy as np, tempfile, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/m.safetensors", {"w": np.ones(2, "<f4")},
    ...                        format="safetensors")
    >>> with kiln_np.open_weights(d + "/m.safetensors") as w:
    ...     [os.path.basename(p) for p in input_files(w)]
    ['m.safetensors']
    >>> import shutil; shutil.rmtree(d)
    """
    paths = [weights.path, *(t.path for t in weights.plain.values() if t.path)]
    if weights.config_path is not None:  # a logical view read it
        paths.append(weights.config_path)
    return list(dict.fromkeys(paths))


def _refuse_inputs(path: str, weights: Weights) -> None:
    try:
        st = os.stat(path)
    except OSError:
        return  # nothing there yet (or unreadable: writing will say so)
    for source in input_files(weights):
        try:
            same = os.path.samestat(st, os.stat(source))
        except OSError:
            continue
        if same:
            raise KilnError(
                "TYPE",
                f"report: cannot write {path!r}: it is the file {source!r} of the checkpoint "
                "being reported (same device and inode); choose another path",
            )


@set_module("kiln_np")
def report(
    weights: Weights | str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    max_rows: int = MAX_ROWS,
    histograms: int = 16,
    progress: Progress | None = None,
) -> str:
    """Write the HTML report of a checkpoint to ``path``: one self-contained
    file to open in a browser (see docs/explore.md, "Report").

    Parameters
    ----------
    weights : Weights, str or os.PathLike
        An opened :class:`~kiln_np.Weights`, or a path (opened with
        :func:`kiln_np.open_weights` and closed again).
    path : str or os.PathLike
        The file to write, crash-safely (a temporary sibling renamed into
        place: an interrupted report leaves no partial file).
    include, exclude : sequence of str
        Globs on the tensor names, as :meth:`Weights.select`: the tensors the
        report covers (the metadata is the file's, whatever the selection).
    max_rows : int
        The rows each table shows at most; the page says how many it left out.
    histograms : int
        The histograms drawn at most: of the tensors outside the layers and
        of each stack's first layer, in file order.
    progress : callable, optional
        ``progress(bytes_done, bytes_total)``, called as the statistics pass
        reads the tensors (:func:`kiln_np.describe`).

    Returns
    -------
    str
        ``path``, as given.

    Raises
    ------
    KilnError
        TYPE when ``weights`` is neither a path nor a :class:`~kiln_np.Weights`,
        ``path`` is not a path, is one of the checkpoint's own files, or exists
        and is not a regular file; as :func:`kiln_np.open_weights` raises, and as
        :func:`kiln_np.describe` raises for a tensor whose bytes are malformed
        (nothing is written then).
    OSError
        When ``path`` cannot be written.

    Examples
    --------
    >>> import numpy as np, tempfile, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/m.safetensors", {"w": np.ones((2, 3), "<f4")},
    ...                        format="safetensors")
    >>> out = kiln_np.report(d + "/m.safetensors", d + "/report.html")
    >>> with open(out, encoding="utf-8") as f:
    ...     '<span id="tensor-count">1</span>' in f.read()
    True
    >>> import shutil; shutil.rmtree(d)
    """
    out = check_path(path)
    if isinstance(weights, Weights):
        opened, close = weights, False
    elif isinstance(weights, (str, os.PathLike)):
        opened, close = open_weights(weights), True
    else:
        raise KilnError(
            "TYPE", f"expected a path or a kiln_np.Weights, found {show_value(weights)}"
        )
    try:
        _refuse_inputs(out, opened)
        chosen, selection = opened, ""
        if include or exclude:
            chosen = opened.select(*include, exclude=exclude)
            selection = _selection_text(include, exclude, len(chosen), len(opened))
        page = report_html(
            chosen,
            max_rows=max_rows,
            histograms=histograms,
            selection=selection,
            progress=progress,
        )
        with replacing(out) as (_, f):
            f.write(page.encode("utf-8", "backslashreplace"))
    finally:
        if close:
            opened.close()
    return out
