"""The page a report is: one self-contained HTML file, and the pieces its sections
are built of.

:func:`document` writes the page: the style sheet and the one sorting script
inline, a Content-Security-Policy that forbids any network request
(``default-src 'none'``) and any script but its own (``script-src`` names its
SHA-256), a title, links to the sections.  :func:`picture` makes a matplotlib
figure an ``<img>`` of inline PNG data.  Every text goes through :func:`text`
(``printable``, then HTML-escaped): a hostile name is text on the page.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import math
import struct
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kiln_np._core.checks import printable
from kiln_np._version import __version__

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "document",
    "dotted",
    "fact",
    "head_cell",
    "left_out",
    "matplotlib_missing",
    "missing_pictures",
    "number_cell",
    "picture",
    "text",
]


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


def fact(label: str, value: str, detail: str = "", *, ident: str = "", kind: str = "") -> str:
    """One fact: its label, its value (in a ``<span>`` with ``ident`` as its
    id), a detail in small type; ``kind`` a class (``wide``: two columns)."""
    ident_attr = f' id="{ident}"' if ident else ""
    small = f" <small>{text(detail)}</small>" if detail else ""
    return (
        f'<div class="fact {kind}"><dt>{text(label)}</dt>'
        f"<dd><span{ident_attr}>{text(value)}</span>{small}</dd></div>"
    )


def number_cell(value: float | int | None, shown: str | None = None) -> str:
    """A numeric cell: ``data-v`` is what sorts (empty for none or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        key = ""
    elif isinstance(value, int):
        key = str(value)
    else:
        key = repr(float(value)).replace("inf", "Infinity")
    return f'<td data-v="{key}">{text(shown if shown is not None else value)}</td>'


def head_cell(label: str, *, numeric: bool) -> str:
    if numeric:
        return f"<th data-numeric>{text(label)}</th>"
    return f'<th class="text">{text(label)}</th>'


def left_out(shown: int, total: int, what: str, hint: str = "") -> str:
    if shown >= total:
        return ""
    more = f"; {hint}" if hint else ""
    return (
        f'<p class="note">The first {shown:,} of {total:,} {what} are shown '
        f"({total - shown:,} left out{more}).</p>"
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


def missing_pictures(ident: str, heading: str) -> str:
    return (
        f'<section id="{ident}"><h2>{text(heading)}</h2>'
        f'<p class="note">{text(_NO_MATPLOTLIB)}</p></section>'
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
