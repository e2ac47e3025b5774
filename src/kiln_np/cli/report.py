"""The ``report`` command: a checkpoint's report, one self-contained HTML file
(:func:`kiln_np.report`), written crash-safely and never over a file the
command reads; a progress bar on a terminal's stderr while the statistics pass
reads the tensors."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kiln_np._explore.page import matplotlib_missing
from kiln_np._explore.report import report
from kiln_np._weights.summary import human_bytes

from .args import subparser
from .errors import file_error
from .files import refuse_overwrite
from .output import Progress, say
from .weights import (
    logical_view,
    open_weights_file,
    select_args,
    select_tensors,
    weights_inputs,
)

__all__ = ["add_report"]


def _cmd_report(args: argparse.Namespace) -> int:
    with open_weights_file(args.path) as stored:
        weights = logical_view(stored, args, args.path)
        chosen = select_tensors(weights, args, args.path, logical=False)
        refuse_overwrite(args.output, weights_inputs(weights))
        if matplotlib_missing():
            say(
                "kiln-np: note: the report leaves its pictures out: they need matplotlib "
                "(pip install 'kiln-np[plot]')",
                stream=sys.stderr,
            )
        else:
            import matplotlib

            matplotlib.use("Agg")  # pictures into the file, never a window
        with Progress(max(chosen.byte_length, 1), f"report {args.path}") as bar:
            try:
                report(
                    weights,
                    args.output,
                    include=args.include,
                    exclude=args.exclude,
                    progress=lambda done, total: bar.advance(done - bar.done),
                )
            except OSError as exc:
                raise file_error("write", args.output, exc) from exc
        count = len(chosen)
    size = human_bytes(os.stat(args.output).st_size)
    say(f"{args.output}: report of {count} tensor{'s' * (count != 1)}, {size}")
    return 0


def add_report(sub: Any) -> None:
    """The ``report`` command."""
    parser = subparser(
        sub,
        "report",
        "write a checkpoint's report, one HTML file to open in a browser",
        "Write one self-contained HTML file (inline style and pictures, no network "
        "needed to view it), titled with the model: the summary, the metadata, the "
        "model's config.json, the tensor tree, the statistics of every tensor (a table "
        "sorted by clicking a column header), the per-layer heatmap, and histograms by "
        "exponent and by value. The pictures need matplotlib (pip install "
        "'kiln-np[plot]'); without it they are left out, and the page says so.",
        [
            "kiln-np report model.safetensors -o report.html",
            "kiln-np report llama.gguf -o blk0.html --include 'blk.0.*'",
        ],
    )
    parser.add_argument("path", metavar="PATH")
    parser.add_argument(
        "-o", "--output", metavar="OUT", required=True, help="the HTML file to write"
    )
    select_args(parser)
    parser.set_defaults(run=_cmd_report)
