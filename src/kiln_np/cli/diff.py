"""The ``diff`` command: two weight files compared name by name
(:func:`kiln_np.compare`; a Hugging Face checkpoint and a GGUF through the model
map unless ``--names raw``), with the error figures of every tensor whose values
were read and their aggregates per layer and per role (``--sort METRIC``: worst
first); exit status 0 when they hold the same names and every tensor is equal,
1 when not; an error is 2, as for every command (like ``cmp`` and ``diff``).
"""

from __future__ import annotations

import argparse
from typing import Any

from kiln_np._explore.comparison import compare
from kiln_np._explore.metrics import METRICS

from .args import json_flag, subparser
from .output import print_json, say
from .weights import (
    logical_view,
    open_weights_file,
    select_args,
    select_tensors,
    selection_record,
)

__all__ = ["add_diff"]


def _cmd_diff(args: argparse.Namespace) -> int:
    """Compare ``args.a`` with ``args.b``; 0 when equal, 1 when not.

    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> _ = kiln_np.save_weights(d + "/a", {"w": np.ones(2, np.float32)}, format="kiln")
    >>> ns = argparse.Namespace(a=d + "/a", b=d + "/a", json=False, all=False, sort=None,
    ...                         names="map")
    >>> _cmd_diff(argparse.Namespace(**vars(ns), include=[], exclude=[]))
    equal: 1 tensors in both (1 same bytes, 0 equal values, 0 different), 0 only in A, 0 only in B
    0
    >>> import shutil; shutil.rmtree(d)
    """
    with open_weights_file(args.a) as stored_a, open_weights_file(args.b) as stored_b:
        a, b = logical_view(stored_a, args, args.a), logical_view(stored_b, args, args.b)
        va = a.select(*args.include, exclude=args.exclude) if args.include or args.exclude else a
        vb = b.select(*args.include, exclude=args.exclude) if args.include or args.exclude else b
        if len(va) == 0 and len(vb) == 0:
            select_tensors(a, args, args.a)  # TYPE: the options select no tensor on either side
        result = compare(va, vb, names=args.names)
        if args.sort is not None:
            result = result.sorted(args.sort)
        selection = selection_record(args, len(va), len(a))
        if selection is not None:
            selection["b"] = selection_record(args, len(vb), len(b))
    if args.json:
        record = {"format": "kiln-np-diff/1", "selection": selection, **result.to_json()}
        print_json({**record, "a": args.a, "b": args.b})
    else:
        say(result.text(every=args.all))
    return 0 if result.equal else 1


def add_diff(sub: Any) -> None:
    """The ``diff`` command."""
    parser = subparser(
        sub,
        "diff",
        "compare two weight files, tensor by tensor",
        "Compare two weight files of any formats name by name: names only in one, and for "
        "each tensor in both whether its bytes are identical, whether its values are equal "
        "(GGML quantized tensors as their dequantized values; NaN equal to NaN, -0 to +0), "
        "the error figures of B against A (RMSE, relative RMSE, SNR in dB, cosine "
        "similarity, the largest absolute and relative differences and where they are, "
        "saturated MX/NVFP4 elements) and the first differing index, then the same figures "
        "per layer and per role. A Hugging Face checkpoint and a GGUF of an architecture "
        "of the model map (llama, qwen2, qwen3, qwen3moe, gemma3, phi3, mixtral, gemma2, "
        "qwen2moe) pair their tensors through the map (the GGUF's read as the checkpoint "
        "holds them), unless --names raw. Exit status 0 when both hold the same names and "
        "every tensor is equal, 1 when not, 2 on errors.",
        [
            "kiln-np diff model.safetensors model.gguf",
            "kiln-np diff hf-checkpoint/ model-Q4_K_M.gguf --sort snr_db",
            "kiln-np diff original/ quantized/ --sort snr_db",
            "kiln-np diff a/ b/ --json",
        ],
    )
    parser.add_argument("a", metavar="A")
    parser.add_argument("b", metavar="B")
    parser.add_argument(
        "--all", action="store_true", help="list every tensor, not only differences"
    )
    parser.add_argument(
        "--sort",
        choices=list(METRICS),
        metavar="METRIC",
        help="list the tensors, layers and roles worst first by one figure: "
        + ", ".join(METRICS)
        + " (smallest first for snr_db and cosine)",
    )
    parser.add_argument(
        "--names",
        choices=["map", "raw"],
        default="map",
        help="how tensors pair: map (default: a Hugging Face checkpoint's with a GGUF's "
        "through the model map) or raw (by their names as they are)",
    )
    select_args(parser)
    json_flag(parser, "print one JSON object, a row per tensor in both")
    parser.set_defaults(run=_cmd_diff)
