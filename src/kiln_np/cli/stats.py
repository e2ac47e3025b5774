"""The ``stats`` command: statistics of every tensor of a weight file
(:func:`kiln_np.describe` of a :class:`~kiln_np.Weights`), a table of every
name whole or ``--json``; a progress bar on a terminal's stderr.
"""

from __future__ import annotations

import argparse
from typing import Any

from kiln_np._explore.weight_stats import describe_weights

from .args import json_flag, subparser
from .output import Progress, print_json, say
from .weights import (
    listing_order,
    logical_view,
    open_weights_file,
    select_args,
    select_tensors,
    selection_record,
    sort_args,
)

__all__ = ["add_stats"]


def _cmd_stats(args: argparse.Namespace) -> int:
    """Print the statistics of ``args.path``'s (selected) tensors.

    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/a", {"w": np.float32([1, 3])}, format="kiln")
    >>> _cmd_stats(argparse.Namespace(path=d + "/a", json=False, include=[], exclude=[],
    ...                               sort=None))
    statistics of 1 tensors (kiln)
    name            type   count       min       max      mean       std  zeros nan/inf
    w                f32       2         1         3         2         1   0.0%       -
    0
    >>> import shutil; shutil.rmtree(d)
    """
    with open_weights_file(args.path) as stored:
        weights = logical_view(stored, args, args.path)
        chosen = select_tensors(weights, args, args.path, logical=False)
        order = listing_order(args, weights)
        with Progress(max(chosen.byte_length, 1), f"stats {args.path}") as bar:
            result = describe_weights(
                chosen, progress=lambda done, total: bar.advance(done - bar.done), sort=order
            )
        selection = selection_record(args, len(chosen), len(weights))
    if args.json:
        record: dict[str, Any] = {
            "format": "kiln-np-stats/1",
            "selection": selection,
            "order": order,
        }
        print_json({**record, **result.to_json(), "path": args.path})
    else:
        say(result)
    return 0


def add_stats(sub: Any) -> None:
    """The ``stats`` command."""
    parser = subparser(
        sub,
        "stats",
        "statistics of every tensor of a weight file",
        "Read every tensor of a weight file once (a bounded chunk at a time, on the thread "
        "pool) and print per tensor: elements, min, max, mean and std of the finite values, "
        "the share of zeros, and the NaN / infinity counts; --json adds absmax, +inf and -inf "
        "separately, and each GGML quantized tensor's scale ranges. A GGML quantized tensor "
        "is its exact dequantized values. Rows in natural name order (GGUF: in file order), "
        "or as --sort says. Ctrl-C stops it.",
        [
            "kiln-np stats model.safetensors",
            "kiln-np stats model/ --sort size",
            "kiln-np stats m.gguf --include 'blk.0.*'",
            "kiln-np stats m.gguf --json",
        ],
    )
    parser.add_argument("path", metavar="PATH")
    select_args(parser)
    sort_args(parser)
    json_flag(parser, "print one JSON object, a row per tensor")
    parser.set_defaults(run=_cmd_stats)
