"""The ``meta`` command: a weight file's metadata, key by key with its type.

GGUF key/values with their GGUF types (``uint32``, ``array[string]``),
safetensors' ``__metadata__``, an ONNX model's ``ir_version``, producer,
opsets and ``metadata_props``, a Kiln directory's manifest metadata; then a
Hugging Face checkpoint's ``config.json`` and ``generation_config.json``
(:attr:`kiln_np.Weights.config`), key by key the same way.  A GGUF file's
``general.file_type`` is shown with llama.cpp's name for it.  In the text
form each value fits 100 columns (a key is never cut): a long array is its
length and first items, a long string is cut and its length given;
a GGUF string array is decoded only as far
as shown (:meth:`kiln_np.gguf.GGUFMetadata.head`).  ``--json`` prints every
value in full (:func:`json_value`).  The rendering is
:mod:`kiln_np._explore.metadata`'s (the report shows the same rows).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from kiln_np._explore.metadata import json_value, meta_text, type_name
from kiln_np._quants.filetypes import file_type_record
from kiln_np._weights.logical import CONFIG, GENERATION_CONFIG, beside

from .args import json_flag, subparser
from .output import print_json, say
from .weights import open_weights_file

__all__ = ["add_meta", "json_value", "meta_text", "type_name"]


def _entries(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``{"key", "type", "value"}`` per key, every value in full."""
    types = getattr(metadata, "types", None)
    entries = []
    for key in metadata:
        value = metadata[key]
        type_ = types[key] if types is not None and key in types else type_name(value)
        entries.append({"key": key, "type": type_, "value": json_value(value)})
    return entries


def _cmd_meta(args: argparse.Namespace) -> int:
    with open_weights_file(args.path) as weights:
        # The files beside, spelled as the user spelled the path.
        described = [
            (beside(args.path, CONFIG), "Hugging Face config", weights.config),
            (
                beside(args.path, GENERATION_CONFIG),
                "Hugging Face generation config",
                weights.generation_config,
            ),
        ]
        if not args.json:
            blocks = [meta_text(args.path, weights.format, weights.metadata)]
            blocks += [
                meta_text(where, what, found)
                for where, what, found in described
                if found is not None
            ]
            say("\n\n".join(blocks))
            return 0
        record: dict[str, Any] = {
            "format": "kiln-np-meta/1",
            "path": args.path,
            "weights_format": weights.format,
            "file_type": file_type_record(weights.file_type),
            "metadata": _entries(weights.metadata),
            "config": None,
            "generation_config": None,
        }
        for key, (where, _, found) in zip(("config", "generation_config"), described, strict=True):
            if found is not None:
                record[key] = {"path": where, "value": json_value(found)}
    print_json(record)
    return 0


def add_meta(sub: Any) -> None:
    """The ``meta`` command."""
    parser = subparser(
        sub,
        "meta",
        "print the metadata of a weight file",
        "Print the metadata of a weight file: GGUF key/values with their GGUF types "
        "(general.file_type with llama.cpp's name for it), safetensors' __metadata__, an "
        "ONNX model's ir_version, producer, opsets and metadata_props, a Kiln directory's "
        "manifest metadata; then a Hugging Face checkpoint's config.json and "
        "generation_config.json.  Long arrays are shown by their length and first items, "
        "long strings cut with their length; --json prints every value in full.  Only "
        "headers are read.",
        ["kiln-np meta llama.gguf", "kiln-np meta Llama-3.2-1B/ --json"],
    )
    parser.add_argument("path", metavar="PATH")
    json_flag(parser, "print one JSON object, every value in full")
    parser.set_defaults(run=_cmd_meta)
