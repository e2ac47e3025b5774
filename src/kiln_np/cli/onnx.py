"""The ``onnx`` command: every initializer of an ONNX model as a payload file of a
Kiln payload directory, with its ``manifest.json``.

The model is parsed by the optional ``onnx`` package, imported when the command
runs (``pip install 'kiln-np[onnx]'``); external data stays on disk and is
mapped tensor by tensor.  A file the export reads (the model, its external
data) is never overwritten.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular
from kiln_np.kilndir import save_kiln_paths
from kiln_np.onnx import model_to_kiln

from .args import json_flag, subparser
from .errors import CliError, file_error
from .files import Inputs, identity, refuse_overwrite, stat_input
from .output import emit
from .weights import save_weights_file

__all__ = ["add_onnx"]


def _onnx_inputs(model_path: str, model: Any, base_dir: str) -> Inputs:
    """Every file the export reads: the model and its external-data files."""
    inputs = {identity(stat_input(model_path)): model_path}
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key != "location":
                continue
            location = entry.value if isinstance(entry.value, str) else os.fsdecode(entry.value)
            path = os.path.join(base_dir, location)
            try:
                inputs.setdefault(identity(os.stat(path)), path)
            except (OSError, ValueError):
                continue  # missing or malformed: model_to_kiln names it when it gets there
    return inputs


def _cmd_onnx(args: argparse.Namespace) -> int:
    try:
        import onnx
    except ImportError as exc:
        raise CliError(
            "USAGE", "the onnx subcommand needs onnx: pip install 'kiln-np[onnx]'"
        ) from exc
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    model_path = args.model
    stat_input(model_path)
    try:
        with open_regular(model_path) as f:
            data = f.read()
    except OSError as exc:
        raise file_error("read", model_path, exc) from exc
    try:
        # Always the binary parser: onnx.load would pick a text parser by the
        # file's extension (.json, .textproto) and let its ParseError escape.
        # External data stays on disk: model_to_kiln maps it tensor by tensor.
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise KilnError("TYPE", f"{model_path!r}: expected an ONNX model: {exc}") from exc
    base_dir = os.path.dirname(os.path.abspath(model_path))
    out = Path(args.outdir)
    initializers = model.graph.initializer
    inputs = _onnx_inputs(model_path, model, base_dir)
    # The folder may not exist yet: check where its files will be once it does
    # (mkdir makes real folders, so "new/.." will be the folder "." is), named as
    # the Kiln directory writer names them.
    will_be = os.path.realpath(out)
    # protobuf hands a name that is not UTF-8 over as bytes; model_to_kiln refuses it
    # below, and here it only has to name a file.
    raw_names: list[str | bytes] = [t.name for t in initializers]
    names = [n if isinstance(n, str) else n.decode("utf-8", "replace") for n in raw_names]
    for path in save_kiln_paths(will_be, names):
        refuse_overwrite(str(out / os.path.basename(path)), inputs, where=path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise file_error("create", out.parent, exc) from exc
    tensors = dict(model_to_kiln(model, base_dir))  # external data mapped, not read
    if len(tensors) != len(initializers):
        raise KilnError(
            "TYPE",
            f"{model_path!r}: expected initializers with distinct names, found "
            f"{len(initializers)} initializers and {len(tensors)} names",
        )
    total_bytes = sum(p.byte_length for p in tensors.values())
    # The Kiln payload directory: built beside OUTDIR, renamed into place.
    save_weights_file(
        out,
        tensors,
        f"onnx {model_path}",
        total_bytes,
        format="kiln",
        metadata={"model": model_path},
    )
    with open_regular(str(out / "manifest.json")) as f:
        manifest = json.loads(f.read().decode("utf-8"))
    emit(
        args,
        manifest,
        f"{out}: {len(tensors)} payload files, {total_bytes} payload bytes, manifest.json",
    )
    return 0


def add_onnx(sub: Any) -> None:
    """The ``onnx`` command."""
    parser = subparser(
        sub,
        "onnx",
        "export every initializer of an ONNX model",
        "Write each initializer of an ONNX model as a payload file in OUTDIR, with "
        "manifest.json (name, file, code, dtype or layout, shape, bytes, sha256).  A file "
        "the export reads (the model, its external data) is never overwritten.",
        ["kiln-np onnx model.onnx weights/"],
    )
    parser.add_argument("model", metavar="MODEL.onnx")
    parser.add_argument("outdir", metavar="OUTDIR")
    json_flag(parser, "print the manifest")
    parser.set_defaults(run=_cmd_onnx)
