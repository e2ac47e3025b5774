"""A checkpoint's report: one self-contained HTML file to open in a browser.

:func:`report` writes, under the model's own name (:func:`model_title`), the
summary (counts, bytes, bits per weight, the table by stored type, the memory
estimate, llama.cpp's file type), the metadata key by key with its type, the
model's ``config.json`` and ``generation_config.json``, the tree of names with
repeated layers folded, the statistics of every tensor, the per-layer heatmap,
and the histograms of the tensors outside the layers and of each stack's first
layer: by binary exponent (or bit pattern) and by value.  Every caption is said
from the data (which layers fold, which tensors are drawn).  The page is
:mod:`~kiln_np._explore.page`'s: it needs nothing else to be read (style sheet,
sorting script and PNG pictures inline; a Content-Security-Policy forbids any
network request and any script but its own).

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

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from kiln_np._core.checks import check_path, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._files.io import replacing
from kiln_np._weights.summary import NOTE, Summary, human_bytes, human_count, shown_bits
from kiln_np._weights.weights import Weights
from kiln_np.formats import open_weights

from .description import Description
from .entry import describe
from .layers import layer_role
from .metadata import metadata_rows, model_title
from .page import (
    document,
    dotted,
    fact,
    head_cell,
    left_out,
    matplotlib_missing,
    missing_pictures,
    number_cell,
    picture,
    text,
)
from .pictures import heatmap_figure, histogram_grid, value_grid
from .quantized import QuantizedDescription
from .values import BINS, value_histogram
from .weight_stats import Progress, WeightStats, describe_weights

__all__ = ["MAX_ROWS", "input_files", "report", "report_html"]

MAX_ROWS = 2000
"""The rows each table of the report shows at most, by default."""


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
        fact("tensors", f"{summary.tensors:,}", ident="tensor-count"),
        fact(
            "parameters",
            f"{summary.parameters:,}",
            human_count(summary.parameters),
            ident="parameter-count",
        ),
        fact("bytes", human_bytes(summary.byte_length), f"{summary.byte_length:,}"),
        fact("bits / weight", shown_bits(summary.bits_per_weight)),
        fact("as bf16", human_bytes(memory["bf16"])),
        fact("as f32", human_bytes(memory["f32"])),
    ]
    if summary.file_type is not None:  # llama.cpp's label of a GGUF file
        facts.append(
            fact(
                "file type",
                summary.file_type_label or "",
                f"general.file_type {summary.file_type}",
                ident="file-type",
            )
        )
    if summary.largest is not None:
        facts.append(
            fact(
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
        f'<tr><td class="text">{text(r.type)}</td>{number_cell(r.tensors, f"{r.tensors:,}")}'
        f"{number_cell(r.parameters, f'{r.parameters:,}')}"
        f"{number_cell(r.byte_length, human_bytes(r.byte_length))}"
        f"{number_cell(r.bits_per_weight, shown_bits(r.bits_per_weight))}</tr>"
        for r in summary.types
    )
    return (
        '<section id="summary"><h2>Summary</h2>'
        f'<dl class="facts">{"".join(facts)}</dl>'
        f'<p class="note">{text(NOTE)}.</p>'
        '<div class="scroll"><table class="sortable" id="types"><thead><tr>'
        + "".join(head_cell(label, numeric=numeric) for label, numeric in heads)
        + f"</tr></thead><tbody>{rows}</tbody></table></div></section>"
    )


def _keys_table(metadata: Mapping[str, Any], ident: str, max_rows: int) -> str:
    """Key, type and value rows (:func:`metadata_rows`) as a table, ``id=ident``,
    and how many rows it leaves out."""
    rows = metadata_rows(metadata)
    body = "".join(
        f'<tr><td class="name" style="padding-left:{0.6 + 1.5 * r.depth:g}rem">{dotted(r.key)}</td>'
        f'<td class="text">{text(r.type)}</td><td class="value">{text(r.text)}</td></tr>'
        for r in rows[:max_rows]
    )
    return (
        f'<div class="scroll"><table id="{ident}"><thead><tr><th class="text">key</th>'
        '<th class="text">type</th><th class="text">value</th></tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
        f"{left_out(min(max_rows, len(rows)), len(rows), 'rows')}"
    )


def _keys(count: int) -> str:
    return f"{count:,} key{'s' * (count != 1)}"


def metadata_section(metadata: Mapping[str, Any], max_rows: int = MAX_ROWS) -> str:
    """The metadata, key by key: its type and its value as ``kiln-np meta``
    shows it (long arrays by their length and first items).

    Examples
    --------
    >>> part = metadata_section({"name": "</style><b>x</b>", "n": 3})
    >>> "&lt;/style&gt;&lt;b&gt;x&lt;/b&gt;" in part, "</style>" in part
    (True, False)
    """
    if not metadata:
        return '<section id="metadata"><h2>Metadata</h2><p class="note">No metadata.</p></section>'
    return (
        f'<section id="metadata"><h2>Metadata</h2><p class="note">{_keys(len(metadata))}; '
        "every value in full: kiln-np meta PATH --json.</p>"
        f"{_keys_table(metadata, 'metadata-table', max_rows)}</section>"
    )


def config_section(weights: Weights, max_rows: int = MAX_ROWS) -> str | None:
    """The model's own description beside its weights: its Hugging Face
    ``config.json`` and ``generation_config.json`` (:attr:`Weights.config`), key
    by key as the metadata is shown; None when there is neither (a GGUF file's
    description is its metadata).

    Examples
    --------
    >>> import json, numpy as np, os, tempfile, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/model.safetensors", {"w": np.ones(2, "<f4")},
    ...                          format="safetensors")
    >>> with kiln_np.open_weights(d) as w:
    ...     config_section(w) is None
    True
    >>> with open(d + "/config.json", "w") as f:
    ...     json.dump({"model_type": "llama", "rope_scaling": None}, f)
    >>> with kiln_np.open_weights(d) as w:
    ...     part = config_section(w)
    >>> 'id="config-table"' in part, '<td class="text">null</td>' in part
    (True, True)
    >>> import shutil; shutil.rmtree(d)
    """
    parts = []
    for name, found, where, ident in (
        ("config.json", weights.config, weights.config_path, "config-table"),
        (
            "generation_config.json",
            weights.generation_config,
            weights.generation_config_path,
            "generation-config-table",
        ),
    ):
        if found is not None:
            parts.append(
                f'<h3>{text(name)}</h3><p class="note">{text(where)}: {_keys(len(found))}; '
                "every value in full: kiln-np meta PATH --json.</p>"
                f"{_keys_table(found, ident, max_rows)}"
            )
    if not parts:
        return None
    return f'<section id="config"><h2>Model config</h2>{"".join(parts)}</section>'


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
    >>> "0-2" in part, "x3, 1 tensor each" in part, "(here layers.0-2, x3)" in part
    (True, True, True)
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
    at = next((i for i, r in enumerate(summary.tree) if r.repeat > 1), None)
    if at is None:
        how = "no consecutive layers are identical here, so none fold"
    else:
        how = (
            f"identical consecutive layers fold into one row (here {_path(summary, at)}, "
            f"x{summary.tree[at].repeat}) followed by one member's tensors"
        )
    return (
        '<section id="tree"><h2>Tensor tree</h2>'
        f'<p class="note">Names grouped by dotted prefix; {text(how)}.</p>'
        '<div class="scroll"><table id="tree-table"><thead><tr><th class="text">name</th>'
        '<th class="text">what</th><th>parameters</th><th>bytes</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        f"{left_out(min(max_rows, len(summary.tree)), len(summary.tree), 'rows')}</section>"
    )


def _path(summary: Summary, at: int) -> str:
    """The dotted name of tree row ``at``: its ancestors' names and its own."""
    depth = summary.tree[at].depth
    names = [summary.tree[at].name]
    for row in reversed(summary.tree[:at]):
        if row.depth < depth:
            names.append(row.name)
            depth = row.depth
    return ".".join(reversed(names))


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
    scales: bool = False,
) -> str:
    """The statistics table (``id="stats"``): one row per tensor, each cell
    ``(text, sort key)`` as :meth:`WeightStats.html_rows` gives them; a column
    whose keys are all numbers sorts as numbers.  A nonzero NaN or infinity
    count is marked.  ``scales``: some tensor has scales (GGML blocks, a
    quantization scheme's weight), which the caption then explains.

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
    head = "".join(head_cell(t, numeric=n) for t, n in zip(titles, numeric, strict=True))
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
    scaled = (
        " A GGML quantized tensor or a quantization scheme's weight is read as its values; "
        "scales gives the range of its blocks' scale fields or of its scale parts."
        if scales
        else ""
    )
    return (
        '<section id="statistics"><h2>Statistics</h2>'
        f'<p class="note">{text(heading)}. min, max, absmax, mean and std (population) are '
        f"over the finite elements; NaN and infinities are counted apart.{text(scaled)} "
        "Click a column header to sort.</p>"
        f'<div class="scroll"><table class="sortable" id="stats"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
        f"{left_out(min(max_rows, len(rows)), len(rows), 'tensors', hint)}</section>"
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


def heatmap_section(stats: WeightStats) -> str:
    """The per-layer heatmaps of std and absmax (rows: layer; columns: the
    role within the layer; log colour scale), or a note when no name has a
    layer index or matplotlib is missing."""
    heading = "Heatmap"
    names = [t.name for t in stats]
    places = [layer_role(n) for n in names]  # read once: 100,000 names cost 0.3 s a pass
    if not any(p is not None for p in places):
        return (
            f'<section id="heatmap"><h2>{heading}</h2><p class="note">No tensor name has a '
            "layer index (blk.N, layers.N): there is no per-layer picture to draw.</p></section>"
        )
    if matplotlib_missing():
        return missing_pictures("heatmap", heading)
    figures = []
    for stat in ("std", "absmax"):
        values = [None if v is None else float(v) for v in (getattr(t, stat) for t in stats)]
        if not any(
            v is not None and 0 < v < math.inf and p is not None
            for p, v in zip(places, values, strict=True)
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
    experts = "; the experts of a layer fold into their largest" * any(
        p is not None and "*" in p[2] for p in places
    )
    return (
        f'<section id="heatmap"><h2>{heading}</h2><p class="note">One cell per tensor: '
        "its layer (rows) and its role in the layer (columns), coloured by its std and "
        f"by its absmax on a log scale{experts}.</p>"
        f'<div class="pictures">{"".join(figures)}</div></section>'
    )


class Drawn(NamedTuple):
    """The tensors a report's histograms draw: ``items`` (name, what
    :func:`describe` found) and ``which`` (the caption saying which they are)."""

    items: list[tuple[str, Description | QuantizedDescription]]
    which: str


def _which(chosen: Sequence[str], shown: int) -> str:
    """Which tensors are drawn, from their names: those outside the layers, and
    each stack's first layer.

    >>> _which(["tok.w", "blk.0.a", "blk.0.b", "out.w"], 4)
    'The 2 tensors outside the layers and the 2 of layer 0 of blk: 4 of 4'
    >>> _which(["h.3.a", "h.3.b", "v.1.a"], 1)
    'The 2 of layer 3 of h and the 1 of layer 1 of v: 1 of 3 (2 more left out)'
    """
    outside = 0
    stacks: dict[str, tuple[int, int]] = {}  # stack -> (its first layer, tensors)
    for name in chosen:
        place = layer_role(name)
        if place is None:
            outside += 1
        else:
            layer, count = stacks.get(place[0], (place[1], 0))
            stacks[place[0]] = (layer, count + 1)
    parts = [f"the {outside} tensor{'s' * (outside != 1)} outside the layers"] * (outside > 0)
    parts += [
        f"the {n} of layer {layer} of {s or '(no prefix)'}" for s, (layer, n) in stacks.items()
    ]
    left = f" ({len(chosen) - shown} more left out)" if len(chosen) > shown else ""
    said = " and ".join(parts) or "no tensor"
    return f"{said[:1].upper()}{said[1:]}: {shown} of {len(chosen)}{left}"


def drawn(weights: Weights, stats: WeightStats, limit: int = 16) -> Drawn:
    """The tensors with no layer index and those of each stack's first layer
    that have values (at most ``limit``), described (:func:`describe`)."""
    readable = [t.name for t in stats if t.note is None and t.count]
    chosen = _first_layers(readable)
    shown = chosen[:limit]
    return Drawn([(name, describe(weights[name])) for name in shown], _which(chosen, len(shown)))


def histograms_section(chosen: Drawn | None) -> str:
    """The histograms of the drawn tensors, by binary exponent for floats, by
    bit pattern for small types; None: a note that matplotlib is missing."""
    heading = "Histograms"
    if chosen is None:
        return missing_pictures("histograms", heading)
    count = len(chosen.items)
    fig = histogram_grid(chosen.items)
    return (
        f'<section id="histograms"><h2>{heading}</h2><p class="note">{text(chosen.which)}, '
        "counted exactly.</p>"
        f"<figure>{picture(fig, f'histograms of {count} tensors')}</figure></section>"
    )


def values_section(weights: Weights, chosen: Drawn | None) -> str:
    """The value histograms of the drawn tensors (:func:`value_histogram`: their
    finite values in equal bins from min to max, log-scaled counts); None: a
    note that matplotlib is missing."""
    heading = "Value histograms"
    if chosen is None:
        return missing_pictures("values", heading)
    items = [(n, d, value_histogram(weights[n], d)) for n, d in chosen.items]
    fig = value_grid(items)
    return (
        f'<section id="values"><h2>{heading}</h2><p class="note">{text(chosen.which)}. '
        f"Each one's finite values in {BINS} equal bins from its min to its max, counted "
        "exactly (NaN and infinities are left out: the statistics count them); counts on a "
        "log scale.</p>"
        f"<figure>{picture(fig, f'value histograms of {len(items)} tensors')}</figure></section>"
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
    as one HTML string, titled with the model (:func:`model_title`);
    :func:`report` writes it to a file.  ``selection`` says which tensors a
    view holds, under the title; ``progress`` is :func:`kiln_np.describe`'s,
    called as the statistics pass reads the tensors.

    Examples
    --------
    >>> import numpy as np, tempfile, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/m.safetensors", {"w": np.ones((2, 3), "<f4")},
    ...                        format="safetensors")
    >>> with kiln_np.open_weights(d + "/m.safetensors") as w:
    ...     page = report_html(w)
    >>> '<span id="parameter-count">6</span>' in page, page.count("<section")
    (True, 7)
    >>> import shutil; shutil.rmtree(d)
    """
    summary = weights.summary()
    stats = describe_weights(weights, progress=progress)
    titles, rows = stats.html_rows()
    flagged = (
        f"; {stats.nan:,} NaN and {stats.inf:,} infinite elements" if stats.nan or stats.inf else ""
    )
    subtitle = f"{weights.format} - {weights.path}" + (f" - {selection}" if selection else "")
    chosen = None if matplotlib_missing() else drawn(weights, stats, histograms)
    config = config_section(weights, max_rows)
    sections = [
        ("summary", "Summary", summary_section(summary)),
        ("metadata", "Metadata", metadata_section(weights.metadata, max_rows)),
        *([("config", "Model config", config)] if config is not None else []),
        ("tree", "Tensor tree", tree_section(summary, max_rows)),
        (
            "statistics",
            "Statistics",
            statistics_section(
                titles,
                rows,
                heading=f"{len(stats):,} tensor{'s' * (len(stats) != 1)}{flagged}",
                max_rows=max_rows,
                scales=any(t.scales for t in stats),
            ),
        ),
        ("heatmap", "Heatmap", heatmap_section(stats)),
        ("histograms", "Histograms", histograms_section(chosen)),
        ("values", "Value histograms", values_section(weights, chosen)),
    ]
    return document(model_title(weights), subtitle, sections)


def _selection_text(include: Sequence[str], exclude: Sequence[str], kept: int, total: int) -> str:
    """Which tensors a selection kept, for the subtitle.

    >>> _selection_text(["blk.0.*"], ["*norm*"], 7, 75)
    "7 of 75 tensors: include 'blk.0.*', exclude '*norm*'"
    """
    given = [f"include {p!r}" for p in include] + [f"exclude {p!r}" for p in exclude]
    return f"{kept} of {total} tensors: {', '.join(given)}"


def input_files(weights: Weights) -> list[str]:
    """The files ``weights`` reads: what was opened, every tensor's file (every
    part's, for a logical view) and the ``config.json`` and
    ``generation_config.json`` that describe its model (none read to say so).

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
    paths += [p for p in (weights.config_path, weights.generation_config_path) if p is not None]
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
