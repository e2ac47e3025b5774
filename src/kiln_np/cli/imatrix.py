"""The ``imatrix`` command: an importance matrix (``llama-imatrix``'s GGUF or
legacy ``.dat``) as ``llama-quantize --imatrix`` reads it.

The datasets, the chunks it was computed on, then one row per entry: for GGUF
its experts, row length and token counts (an expert that saw no token has
weights of 1), for a legacy file its value count and ``ncall``; the smallest and
largest weight.  ``--include-weights`` and ``--exclude-weights`` select entries
as ``llama-quantize`` does.  Every check is :func:`kiln_np.gguf.read_imatrix`'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from kiln_np._convert.plan import OptionsError
from kiln_np.gguf import Imatrix, ImatrixEntry, read_imatrix

from .args import json_flag, subparser
from .errors import CliError, file_error
from .output import print_json, say, table

__all__ = ["add_imatrix", "imatrix_record", "imatrix_text"]


def _span(values: tuple[int, ...]) -> str:
    """``1088``, or ``48..1077`` for several counts.

    >>> _span((1088,)), _span((85, 1077, 48, 966))
    ('1088', '48..1077')
    """
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}..{high}"


def _weight(value: float) -> str:
    return f"{value:.4g}"


def _row(imatrix: Imatrix, entry: ImatrixEntry) -> list[str]:
    low = high = "-"  # an entry of rows of 0 values
    if entry.weights.size:
        low, high = _weight(float(entry.weights.min())), _weight(float(entry.weights.max()))
    if imatrix.format == "dat":
        return [entry.name, str(entry.weights.shape[1]), str(entry.counts[0]), low, high]
    unused = sum(1 for c in entry.counts if c == 0)
    experts, row = entry.weights.shape
    return [entry.name, str(experts), str(row), _span(entry.counts), str(unused or ""), low, high]


def imatrix_text(path: str, imatrix: Imatrix) -> str:
    """The text form: a title line, the datasets, a table of entries.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import save_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "i.gguf")
    ...     _ = save_gguf(p, {"w.in_sum2": np.full((2, 4), 6, np.float32),
    ...                       "w.counts": np.array([[2], [0]], np.float32)},
    ...                   {"imatrix.datasets": ["wiki.txt"], "imatrix.chunk_count": np.uint32(3),
    ...                    "imatrix.chunk_size": np.uint32(512)})
    ...     print(imatrix_text("i.gguf", read_imatrix(p)))
    i.gguf: imatrix (GGUF), 1 entry, 3 chunks of 512 tokens
    datasets: wiki.txt
    name  experts  row  tokens  unused  min weight  max weight
    w           2    4    0..2       1           1           3
    """
    kind = "GGUF" if imatrix.format == "gguf" else "legacy .dat"
    count = len(imatrix.entries)
    entries = f"{count} entr{'y' if count == 1 else 'ies'}"
    if count != imatrix.loaded:
        entries = f"{count} of {imatrix.loaded} entries kept"
    chunks = f"{imatrix.chunk_count} chunk{'' if imatrix.chunk_count == 1 else 's'}"
    if imatrix.chunk_size:
        chunks += f" of {imatrix.chunk_size} tokens"
    lines = [f"{path}: imatrix ({kind}), {entries}, {chunks}"]
    lines.append(f"datasets: {', '.join(imatrix.datasets) if imatrix.datasets else 'none'}")
    if not count:
        lines.append("no entry kept: llama-quantize quantizes as without --imatrix")
        return "\n".join(lines)
    if imatrix.format == "dat":
        head = ["name", "values", "ncall", "min weight", "max weight"]
    else:
        head = ["name", "experts", "row", "tokens", "unused", "min weight", "max weight"]
    rows = [head] + [_row(imatrix, e) for e in imatrix.entries.values()]
    lines.append(table(rows, right=range(1, len(head))))
    return "\n".join(lines)


def imatrix_record(path: str, imatrix: Imatrix, args: argparse.Namespace) -> dict[str, Any]:
    """The ``--json`` form (``kiln-np-imatrix/1``, docs/cli.md)."""
    entries = []
    for entry in imatrix.entries.values():
        experts, row = entry.weights.shape
        empty = entry.weights.size == 0
        entries.append(
            {
                "name": entry.name,
                "experts": experts,
                "row_length": row,
                "counts": list(entry.counts),
                "min": None if empty else float(entry.weights.min()),
                "max": None if empty else float(entry.weights.max()),
            }
        )
    return {
        "format": "kiln-np-imatrix/1",
        "path": path,
        "imatrix_format": imatrix.format,
        "datasets": list(imatrix.datasets),
        "chunk_count": imatrix.chunk_count,
        "chunk_size": imatrix.chunk_size,
        "include_weights": args.include_weights or [],
        "exclude_weights": args.exclude_weights or [],
        "loaded": imatrix.loaded,
        "entries": entries,
    }


def _cmd_imatrix(args: argparse.Namespace) -> int:
    try:
        imatrix = read_imatrix(
            args.path, include=args.include_weights or (), exclude=args.exclude_weights or ()
        )
    except OptionsError as exc:
        raise CliError(exc.cli_kind, exc.usage) from None
    except OSError as exc:
        raise file_error("read", args.path, exc) from exc
    if args.json:
        print_json(imatrix_record(args.path, imatrix, args))
    else:
        say(imatrix_text(args.path, imatrix))
    return 0


def add_imatrix(sub: Any) -> None:
    """The ``imatrix`` command."""
    parser = subparser(
        sub,
        "imatrix",
        "show an importance matrix as llama-quantize reads it",
        "Show an importance matrix written by llama-imatrix (GGUF, or the legacy .dat "
        "format) as llama-quantize --imatrix reads it: the datasets and chunks it was "
        "computed on, then per entry its experts, row length and token counts (an "
        "expert that saw no token gets weights of 1; a legacy file: its values and "
        "ncall) and its smallest and largest weight.  --include-weights and "
        "--exclude-weights select entries by substring, as llama-quantize's do.",
        [
            "kiln-np imatrix imatrix.gguf",
            "kiln-np imatrix imatrix.dat --exclude-weights ffn_down --json",
        ],
    )
    parser.add_argument("path", metavar="FILE")
    parser.add_argument(
        "--include-weights",
        action="append",
        metavar="NAME",
        help="keep only entries whose name contains NAME (repeatable)",
    )
    parser.add_argument(
        "--exclude-weights",
        action="append",
        metavar="NAME",
        help="drop entries whose name contains NAME (repeatable); not with --include-weights",
    )
    json_flag(parser, "print one JSON object")
    parser.set_defaults(run=_cmd_imatrix)
