"""What the command line prints: one JSON object (``--json``, ``docs/cli.md``) or
text, tables of aligned columns, and a progress bar on stderr, drawn only when
it is a terminal.

Every line of text goes out through :func:`say` (stdout, stderr) and every cell
of a table through :func:`table`, and both show names and keys through
:func:`~kiln_np._core.checks.printable`: a control character (ESC, BEL, CR) or
a lone surrogate of a hostile file prints as its escape (``\\x1b``,
``\\udcff``), never raw.  ``--json`` is ``json.dumps``, which escapes them
itself.  ``tests/cli/test_text_escapes.py`` fails on a ``print`` anywhere else
in the command line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Any, TextIO

from kiln_np._core.checks import printable
from kiln_np._core.table import Layout

__all__ = [
    "Progress",
    "emit",
    "human_bytes",
    "human_count",
    "layout_json",
    "print_json",
    "say",
    "shape_text",
    "table",
]


def print_json(record: dict[str, Any]) -> None:
    """Print ``record`` as one line of strict JSON (no NaN or Infinity).

    Examples
    --------
    >>> print_json({"format": "kiln-np-ls/1", "tensors": []})
    {"format": "kiln-np-ls/1", "tensors": []}
    """
    print(json.dumps(record, allow_nan=False))


def say(text: object = "", *, stream: TextIO | None = None) -> None:
    """Print ``text`` on ``stream`` (stdout by default), each of its lines
    through :func:`~kiln_np._core.checks.printable`: the one way text leaves
    the command line.

    Examples
    --------
    >>> say("w\\x1b[2J\\x07  f32\\nb\\udcff")
    w\\x1b[2J\\x07  f32
    b\\udcff
    """
    shown = "\n".join(printable(line) for line in str(text).split("\n"))
    print(shown, file=sys.stdout if stream is None else stream)


def emit(args: argparse.Namespace, record: dict[str, Any], text: str) -> None:
    """Print ``record`` with ``--json``, else ``text``."""
    if args.json:
        print_json(record)
    else:
        say(text)


def shape_text(shape: Sequence[int]) -> str:
    """A shape as text: ``3x4``, ``()`` for a scalar.

    Examples
    --------
    >>> shape_text([3, 4]), shape_text([])
    ('3x4', '()')
    """
    return "x".join(map(str, shape)) or "()"


def human_bytes(n: int) -> str:
    """A byte count in binary units, three significant digits: ``26 B``,
    ``1.21 KiB``, ``15.0 GiB``.

    Examples
    --------
    >>> human_bytes(26), human_bytes(1234), human_bytes(16060522496), human_bytes(2**60)
    ('26 B', '1.21 KiB', '15.0 GiB', '1024 PiB')
    """
    if n < 1024:
        return f"{n} B"
    value, unit = float(n), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 999.5 or unit == "PiB":
            break
    return f"{_three_digits(value)} {unit}"


def human_count(n: int) -> str:
    """A count with thousands separators and, from 10,000, its size in
    K, M, B (billion), T: ``8,030,261,248 (8.03 B)``.

    Examples
    --------
    >>> human_count(12), human_count(8030261248)
    ('12', '8,030,261,248 (8.03 B)')
    """
    if n < 10_000:
        return f"{n:,}"
    value, unit = float(n), ""
    for unit in ("K", "M", "B", "T"):
        value /= 1000
        if value < 999.5 or unit == "T":
            break
    return f"{n:,} ({_three_digits(value)} {unit})"


def _three_digits(value: float) -> str:
    """``value`` (1 or more) to three significant digits, as rounded: 9.999 is
    ``10.0``, not ``10.00``.

    Examples
    --------
    >>> _three_digits(1.234), _three_digits(9.999), _three_digits(99.96), _three_digits(1234.5)
    ('1.23', '10.0', '100', '1234')
    """
    for places in (2, 1):
        text = f"{value:.{places}f}"
        if float(text) < 10 ** (3 - places):
            return text
    return f"{value:.0f}"


def layout_json(layout: Layout | None) -> dict[str, Any] | None:
    """A layout as JSON: ``{"name": ..., "block_size": ...}``, or ``None``."""
    return None if layout is None else {"name": layout.name, "block_size": layout.block_size}


def table(rows: list[list[str]], right: Collection[int] | None = None) -> str:
    """Rows of cells in aligned columns, those of ``right`` to the right (default:
    the last, byte counts).  A cell is never cut: a column is as wide as its
    widest cell, each cell shown through :func:`~kiln_np._core.checks.printable`
    (a name holding ESC is as wide as its escape).

    Examples
    --------
    >>> print(table([["name", "bytes"], ["w", "24"], ["bias\\x1b", "4"]]))
    name      bytes
    w            24
    bias\\x1b      4
    """
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {len(widths) - 1} if right is None else set(right)
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )


class Progress:
    """A one-line progress bar on ``stream``, drawn only when it is a terminal.

    Examples
    --------
    >>> import io
    >>> with Progress(4, "decode", io.StringIO()) as bar:  # not a terminal: nothing drawn
    ...     bar.advance(4)
    >>> bar.done, bar.enabled
    (4, False)
    """

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty()
        self.total = total
        self.label = printable(label)
        self.done = 0
        self.drawn = 0.0

    def advance(self, step: int) -> None:
        self.done += step
        now = time.monotonic()
        if self.enabled and (now - self.drawn >= 0.1 or self.done >= self.total):
            self.drawn = now
            share = self.done / self.total if self.total else 1.0
            bar = "#" * int(30 * share)
            self.stream.write(f"\r{self.label} [{bar:<30}] {100 * share:5.1f}%")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.enabled and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
