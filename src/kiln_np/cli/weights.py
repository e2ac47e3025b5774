"""Weight files on the command line: opening and saving them for any command (an
``OSError`` is FILE), the files a conversion reads, and the ``ls`` and
``convert`` commands (``--dequantize`` writes GGML blocks as float values,
``--quantize`` float tensors as GGML blocks), and ``--include``/``--exclude``,
the tensors a command works on, chosen by :meth:`Weights.select`.

The one module of the command line that imports the weight-file API.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from kiln_np._core.checks import written_path
from kiln_np._core.errors import KilnError
from kiln_np._explore.report import input_files
from kiln_np._weights.logical import LogicalTensor
from kiln_np._weights.policy import QuantizePolicy
from kiln_np._weights.sources import DEQUANTIZE_TYPES, tensor_sources
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights
from kiln_np.formats import (
    FORMATS,
    check_blocks,
    open_weights,
    save_weights,
    save_weights_paths,
)

from .args import json_flag, parse_size, subparser
from .errors import CliError, file_error
from .files import (
    Inputs,
    identity,
    refuse_directory_over_inputs,
    refuse_overwrite,
    refuse_writing_inputs,
    stat_or_none,
)
from .output import (
    Progress,
    emit,
    human_bytes,
    human_count,
    layout_json,
    print_json,
    shape_text,
    table,
)

__all__ = [
    "add_convert",
    "add_ls",
    "open_weights_file",
    "save_weights_file",
    "select_args",
    "select_tensors",
    "selection_record",
    "weights_inputs",
]


def open_weights_file(path: str) -> Weights:
    """:func:`kiln_np.open_weights`, an ``OSError`` as FILE naming the user's own
    spelling of the path, or the shard the error is about."""
    try:
        return open_weights(path)
    except OSError as exc:
        named = path if exc.filename in (None, os.path.abspath(path)) else exc.filename
        raise file_error("read", named, exc) from exc


def save_weights_file(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    label: str,
    total_bytes: int,
    *,
    format: str,
    metadata: Mapping[str, Any] | None,
    max_shard_size: int | None = None,
    dequantize: str | None = None,
    quantize: QuantizePolicy | None = None,
) -> list[str]:
    """:func:`kiln_np.save_weights` with a progress bar ``label`` over the
    payload bytes, an ``OSError`` as FILE naming ``path``; returns the paths
    written, spelled as ``path`` is (GGUF splits beside it).

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = os.path.join(tmp, "w")
    ...     written = save_weights_file(out, {"b": np.ones(2, "<f4")}, "export", 8,
    ...                                 format="kiln", metadata=None)
    ...     written == [out], sorted(os.listdir(out))
    (True, ['0000_b.kiln', 'manifest.json'])
    """
    with Progress(max(total_bytes, 1), label) as bar:
        try:
            written = save_weights(
                path,
                tensors,
                format=format,
                metadata=metadata,
                max_shard_size=max_shard_size,
                progress=bar.advance,
                dequantize=dequantize,
                quantize=quantize,
            )
        except OSError as exc:
            raise file_error("write", path, exc) from exc
        bar.advance(bar.total - bar.done)
    given = os.fspath(path)
    folder = os.path.dirname(given)
    return [
        given if p == written_path(given) else os.path.join(folder, os.path.basename(p))
        for p in written
    ]


def select_args(parser: argparse.ArgumentParser) -> None:
    """``--include PATTERN`` and ``--exclude PATTERN``, each repeatable: the
    tensors a command works on, read by :func:`select_tensors`."""
    parser.add_argument(
        "--include",
        metavar="PATTERN",
        action="append",
        default=[],
        help="only the tensors whose name matches a glob (case-sensitive, the whole name; "
        "'*' crosses dots): 'blk.0.*'; repeatable, a tensor matching any is kept",
    )
    parser.add_argument(
        "--exclude",
        metavar="PATTERN",
        action="append",
        default=[],
        help="leave out the tensors whose name matches this glob, even when --include "
        "keeps them: '*norm*'; repeatable",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="the tensors as stored: without it, a weight that a quantization scheme "
        "(FP8 block-scaled, NVFP4, GPTQ, AWQ, bitsandbytes, gpt-oss MXFP4, ...) stores as "
        "several tensors is one tensor of its values (docs/weights.md)",
    )


def _selection_text(args: argparse.Namespace) -> str:
    """The selection options as typed, for a message.

    Examples
    --------
    >>> _selection_text(argparse.Namespace(include=["blk.*"], exclude=["*norm*", "x"]))
    "--include 'blk.*' --exclude '*norm*' --exclude 'x'"
    """
    given = [("--include", p) for p in args.include] + [("--exclude", p) for p in args.exclude]
    return " ".join(f"{option} {pattern!r}" for option, pattern in given)


def logical_view(weights: Weights, args: argparse.Namespace, path: str) -> Weights:
    """``weights.logical()`` unless ``--parts``; its errors name ``path`` and the
    option that reads the tensors as stored."""
    if getattr(args, "parts", False):
        return weights
    try:
        return weights.logical()
    except KilnError as exc:
        raise exc.prefixed(f"{path!r} (--parts reads the tensors as stored): ") from None


def select_tensors(
    weights: Weights, args: argparse.Namespace, path: str, *, logical: bool = True
) -> Weights:
    """The tensors of ``weights`` (opened from ``path``) that ``--include`` and
    ``--exclude`` select, a :meth:`Weights.select` view, of the logical view
    (:func:`logical_view`) when ``logical``; the (logical) ``weights`` itself
    without them.  TYPE when they select none, showing the first names."""
    if logical:
        weights = logical_view(weights, args, path)
    if not args.include and not args.exclude:
        return weights
    view = weights.select(*args.include, exclude=args.exclude)
    if len(view) == 0:
        names = ", ".join(repr(n) for n in list(weights)[:5])
        more = ", ..." if len(weights) > 5 else ""
        raise KilnError(
            "TYPE",
            f"{path!r}: expected a tensor selected by {_selection_text(args)}, found none of "
            f"its {len(weights)} ({names}{more}); patterns are case-sensitive globs on the "
            "whole name",
        )
    return view


def selection_record(args: argparse.Namespace, selected: int, total: int) -> dict[str, Any] | None:
    """``selection`` in ``--json`` output: the patterns and how many tensors
    they selected and left out; None without ``--include``/``--exclude``.

    Examples
    --------
    >>> selection_record(argparse.Namespace(include=["a*"], exclude=[]), 3, 75)
    {'include': ['a*'], 'exclude': [], 'selected': 3, 'left_out': 72}
    >>> selection_record(argparse.Namespace(include=[], exclude=[]), 75, 75) is None
    True
    """
    if not args.include and not args.exclude:
        return None
    return {
        "include": list(args.include),
        "exclude": list(args.exclude),
        "selected": selected,
        "left_out": total - selected,
    }


def _count_text(selected: int, total: int, selection: object) -> str:
    """``3 of 75 tensors`` for a selection, else ``75 tensors``.

    Examples
    --------
    >>> _count_text(3, 75, {}), _count_text(1, 1, None), _count_text(2, 2, None)
    ('3 of 75 tensors', '1 tensor', '2 tensors')
    """
    if selection is not None:
        return f"{selected} of {total} tensors"
    return f"{selected} tensor{'s' * (selected != 1)}"


def weights_inputs(weights: Weights) -> Inputs:
    """Every file a command reads of ``weights`` (what was opened and the
    tensors' files, :func:`~kiln_np._explore.report.input_files`) by identity."""
    stats = {path: stat_or_none(path) for path in input_files(weights)}
    return {identity(st): path for path, st in stats.items() if st is not None}


def _tensor_record(t: WeightTensor) -> dict[str, Any]:
    info = t.info
    if isinstance(t, LogicalTensor):
        return {
            "name": t.name,
            "format_dtype": t.format_dtype,
            "code": None,
            "kiln": t.scheme,
            "layout": None,
            "shape": list(t.shape),
            "block_shape": None,
            "byte_length": t.byte_length,
            "elements": t.size,
            "parts": {role: p.name for role, p in t.parts.items()},
        }
    return {
        "name": t.name,
        "format_dtype": t.format_dtype,
        "code": int(info.code),
        "kiln": info.layout.name if info.layout else info.element.name,
        "layout": layout_json(info.layout),
        "shape": list(t.shape),
        "block_shape": None if info.layout is None else list(info.shape),
        "byte_length": info.byte_length,
        "elements": t.size,
        "parts": None,
    }


def _cmd_ls(args: argparse.Namespace) -> int:
    with open_weights_file(args.path) as stored:
        weights = logical_view(stored, args, args.path)
        chosen = select_tensors(weights, args, args.path, logical=False)
        tensors = [_tensor_record(t) for t in chosen.values()]
        selection = selection_record(args, len(chosen), len(weights))
        record = {
            "format": "kiln-np-ls/1",
            "path": args.path,
            "weights_format": weights.format,
            "byte_length": chosen.byte_length,
            "selection": selection,
            "tensors": tensors,
            "tensor_count": len(tensors),
            "parameters": sum(t["elements"] for t in tensors),
        }
    if args.json:
        print_json(record)
        return 0
    size = str if args.bytes else human_bytes
    rows = [["name", "dtype", "kiln", "shape", "bytes" if args.bytes else "size"]]
    rows += [
        [t["name"], t["format_dtype"], t["kiln"], shape_text(t["shape"]), size(t["byte_length"])]
        for t in tensors
    ]
    print(table(rows))
    total, fmt = record["byte_length"], record["weights_format"]
    count = _count_text(len(tensors), len(weights), selection)
    print(
        f"{count}, {human_count(record['parameters'])} parameters, "
        f"{human_bytes(total)} ({total:,} payload bytes), {fmt}"
    )
    return 0


def _carried_metadata(weights: Weights, to: str) -> Mapping[str, Any] | None:
    """The source's metadata when the target format can hold it, else None."""
    metadata = weights.metadata
    if to in ("kiln", weights.format):
        return metadata
    all_text = all(isinstance(v, str) for v in metadata.values())
    if to == "gguf" and getattr(metadata, "types", None) is not None:
        return metadata
    return metadata if all_text else None


def _refuse_replacing(dst: str, splits: bool) -> None:
    """FILE when ``convert`` would replace what is there (unless ``--force``):
    DST itself, a file or a directory that is not empty, and with GGUF splits
    any ``STEM-NNNNN-of-NNNNN.gguf`` beside it, whatever their count."""
    force = "pass --force to replace"
    try:
        if os.path.isdir(dst):
            if os.listdir(dst):
                what = "a directory, not empty"
                raise CliError("FILE", f"cannot write {dst!r}: it exists ({what}); {force} it")
        elif os.path.exists(dst):
            what = f"a file of {os.stat(dst).st_size} bytes"
            raise CliError("FILE", f"cannot write {dst!r}: it exists ({what}); {force} it")
        if splits:
            folder, name = os.path.split(dst)
            stem = re.escape(name.removesuffix(".gguf"))
            found = sorted(
                f
                for f in os.listdir(folder or os.curdir)
                if re.fullmatch(rf"{stem}-\d{{5}}-of-\d{{5}}\.gguf", f)
            )
            if found:
                shown = ", ".join(repr(os.path.join(folder, f)) for f in found[:3])
                shown += ", ..." if len(found) > 3 else ""
                raise CliError(
                    "FILE", f"cannot write {dst!r} as splits: {shown} exist; {force} them"
                )
    except OSError:
        return  # unreadable or gone meanwhile: writing will say so


_SUFFIXES = {".safetensors": "safetensors", ".gguf": "gguf"}
"""The format ``convert`` writes when ``--to`` is not given, by DST's suffix."""


def _target_format(args: argparse.Namespace) -> str:
    """``--to``, or the format DST's suffix names; USAGE when it names none.

    Examples
    --------
    >>> _target_format(argparse.Namespace(to=None, dst="out.safetensors"))
    'safetensors'
    """
    if args.to is not None:
        return str(args.to)
    suffix = os.path.splitext(args.dst.rstrip("/" + os.sep))[1]
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    raise CliError(
        "USAGE",
        f"cannot tell the format to write from {args.dst!r} (only *.safetensors and *.gguf "
        "say it): pass --to safetensors, gguf or kiln",
    )


def _policy(args: argparse.Namespace, to: str) -> QuantizePolicy | None:
    """``--quantize`` parsed (TYPE naming the entry when malformed); USAGE with
    ``--dequantize`` or for a format that holds no GGML blocks."""
    if args.quantize is None:
        return None
    if args.dequantize is not None:
        raise CliError(
            "USAGE",
            "pass --quantize or --dequantize, not both: kiln_np does not requantize GGML "
            "blocks (with --quantize they keep their type)",
        )
    row = next(f for f in FORMATS if f.name == to)
    if not row.holds_blocks:
        raise CliError(
            "USAGE",
            f"--quantize writes GGML blocks, which {to} cannot hold: convert to gguf or kiln",
        )
    return QuantizePolicy.parse(args.quantize)


def _refuse_scheduler(args: argparse.Namespace, to: str) -> None:
    """USAGE for ``--scheduler`` without a sharded safetensors target: the
    distributed conversion writes one task per shard."""
    if args.scheduler is None:
        return
    if to != "safetensors" or args.max_shard_size is None:
        found = f"--to {to}" + ("" if args.max_shard_size is None else " --max-shard-size")
        raise CliError(
            "USAGE",
            "--scheduler writes a sharded safetensors checkpoint, one task per shard: pass "
            f"--to safetensors and --max-shard-size SIZE (found {found})",
        )


def _save_on_cluster(
    args: argparse.Namespace, chosen: Weights, metadata: Mapping[str, Any] | None
) -> list[str]:
    """``kiln_np.dask.convert`` on the cluster of ``--scheduler`` (a
    ``distributed`` scheduler's address); FILE when it cannot be reached."""
    # kiln_np.dask (and dask) load only for --scheduler: the extra is optional.
    door = importlib.import_module("kiln_np.dask")
    from distributed import Client

    try:
        client = Client(args.scheduler)  # type: ignore[no-untyped-call]
    except OSError as exc:  # distributed's connect timeout is one
        raise CliError(
            "FILE", f"cannot reach the dask scheduler {args.scheduler!r}: {exc}"
        ) from exc
    with client:
        try:
            door.convert(
                chosen,
                args.dst,
                max_shard_size=args.max_shard_size,
                dequantize=args.dequantize,
                metadata=metadata,
                client=client,
            )
        except OSError as exc:
            raise file_error("write", args.dst, exc) from exc
    return [args.dst]


def _cmd_convert(args: argparse.Namespace) -> int:
    limit = args.max_shard_size
    to = _target_format(args)
    dequantize = args.dequantize
    policy = _policy(args, to)
    _refuse_scheduler(args, to)
    with open_weights_file(args.src) as stored:
        weights = stored if dequantize is None else logical_view(stored, args, args.src)
        chosen = select_tensors(weights, args, args.src, logical=False)
        selection = selection_record(args, len(chosen), len(weights))
        inputs = weights_inputs(weights)
        refuse_overwrite(args.dst, inputs)
        check_blocks(chosen, format=to, dequantize=dequantize, option="--dequantize")
        outputs = save_weights_paths(
            args.dst,
            chosen,
            format=to,
            max_shard_size=limit,
            dequantize=dequantize,
            quantize=policy,
        )
        refuse_writing_inputs(outputs, inputs)
        refuse_directory_over_inputs(args.dst, inputs)
        if not args.force:
            _refuse_replacing(args.dst, to == "gguf" and limit is not None)
        metadata = _carried_metadata(weights, to)
        # descriptions only
        sources = tensor_sources(chosen, dequantize=dequantize, quantize=policy)
        total = sum(s.info.byte_length for s in sources)
        kept = [
            {
                "name": s.name,
                "type": s.info.layout.name if s.info.layout else s.info.element.name,
                "reason": s.kept,
            }
            for s in sources
            if s.kept is not None
        ]
        for k in kept:
            print(f"kept {k['name']} as {k['type']}: {k['reason']}", file=sys.stderr)
        if args.scheduler is not None:
            written = _save_on_cluster(args, chosen, metadata)
        else:
            written = save_weights_file(
                args.dst,
                chosen,
                f"convert {args.src}",
                total,
                format=to,
                metadata=metadata,
                max_shard_size=limit,
                dequantize=dequantize,
                quantize=policy,
            )
        record = {
            "format": "kiln-np-convert/1",
            "input": args.src,
            "output": args.dst,
            "from": weights.format,
            "to": to,
            "tensors": len(chosen),
            "byte_length": total,
            "metadata": "carried" if metadata is not None else "dropped",
            "dequantize": dequantize,
            "dequantized": sum(s.dequantized is not None or s.logical is not None for s in sources),
            "quantize": None if policy is None else str(policy),
            "quantized": sum(s.quantized is not None for s in sources),
            "kept": kept,
            "files": written,
            "selection": selection,
            "scheduler": args.scheduler,
        }
        count = _count_text(len(chosen), len(weights), selection)
    dropped = (
        ""
        if metadata is not None
        else f"; {record['from']} metadata not carried ({to} cannot hold it)"
    )
    decoded = (
        f", {record['dequantized']} dequantized to {dequantize}" if dequantize is not None else ""
    )
    if policy is not None:
        decoded = f", {record['quantized']} quantized ({policy}), {len(kept)} kept their type"
    emit(
        args,
        record,
        f"{_files_text(written)}: {count}, "
        f"{record['byte_length']} payload bytes, {record['from']} -> {to}{decoded}{dropped}",
    )
    return 0


def _files_text(paths: list[str]) -> str:
    """The files written, as a line starts: all of up to three, else the
    first and the last.

    Examples
    --------
    >>> _files_text(["m.gguf"]), _files_text([f"m-{i}.gguf" for i in range(1, 5)])
    ('m.gguf', 'm-1.gguf, ..., m-4.gguf (4 files)')
    """
    if len(paths) <= 3:
        return ", ".join(paths)
    return f"{paths[0]}, ..., {paths[-1]} ({len(paths)} files)"


def add_ls(sub: Any) -> None:
    """The ``ls`` command."""
    parser = subparser(
        sub,
        "ls",
        "list the tensors of a weight file",
        "List the tensors of a weight file (safetensors, a sharded checkpoint, GGUF, ONNX, a "
        "Kiln payload directory): name, the format's dtype, the Kiln code or layout, shape, "
        "payload size; then the totals: tensors, parameters (elements; a GGML quantized "
        "tensor counts its elements, not its blocks), payload bytes.  With --include or "
        "--exclude, only the tensors they select, the totals saying so (3 of 75 tensors).  Only "
        "headers are read.",
        [
            "kiln-np ls model.safetensors",
            "kiln-np ls m.gguf --bytes",
            "kiln-np ls m.gguf --include 'blk.0.*' --exclude '*norm*'",
            "kiln-np ls m.gguf --json",
        ],
    )
    parser.add_argument("path", metavar="PATH")
    parser.add_argument(
        "--bytes", action="store_true", help="sizes as exact byte counts (default: 1.21 KiB)"
    )
    select_args(parser)
    json_flag(parser, "print one JSON object, a row per tensor, and the totals")
    parser.set_defaults(run=_cmd_ls)


def add_convert(sub: Any) -> None:
    """The ``convert`` command."""
    parser = subparser(
        sub,
        "convert",
        "write a weight file in another format",
        "Write every tensor of a weight file as safetensors, GGUF or a Kiln payload "
        "directory, bit for bit, streamed; a tensor the target cannot hold is an error "
        "before anything is written.  With --dequantize, GGML quantized tensors are "
        "written as float values instead of blocks; with --quantize (GGUF, kiln), float "
        "tensors are quantized to GGML blocks by a policy of name patterns, and each "
        "tensor that keeps its type is listed on stderr with the reason.  Metadata goes "
        "along when the target can hold it.  With --include or --exclude, only the tensors "
        "they select are written.  An existing DST is replaced only with --force.",
        [
            "kiln-np convert model.safetensors weights/ --to kiln",
            "kiln-np convert model.gguf model.safetensors --dequantize bf16",
            "kiln-np convert model.safetensors model.gguf --quantize q8_0",
            "kiln-np convert model.safetensors model.gguf "
            "--quantize 'q4_k,*.ffn_down.*=q6_k,*norm*=f32'",
            "kiln-np convert big.safetensors ckpt/ --to safetensors --max-shard-size 5000000000",
            "kiln-np convert model.gguf blk0.safetensors --include 'blk.0.*' --dequantize f32",
        ],
    )
    parser.add_argument("src", metavar="SRC")
    parser.add_argument("dst", metavar="DST")
    parser.add_argument(
        "--to",
        choices=["safetensors", "gguf", "kiln"],
        help="the format to write (default: from DST's suffix, .safetensors or .gguf)",
    )
    parser.add_argument(
        "--dequantize",
        choices=DEQUANTIZE_TYPES,
        help="write each GGML quantized tensor (Q4_K, Q8_0, ...) as its values of this type: "
        "ggml's float32, rounded to nearest even for bf16 and f16; other tensors keep "
        "their bytes",
    )
    parser.add_argument(
        "--quantize",
        metavar="POLICY",
        help="quantize float tensors to GGML blocks (GGUF, kiln), byte for byte as llama.cpp: "
        "a type (q8_0, q4_k, ...; f32, f16, bf16 store floats), or comma-separated "
        "PATTERN=TYPE entries and at most one bare default TYPE, the first matching glob "
        "winning: 'q4_k,*.ffn_down.*=q6_k,*norm*=f32'; tensors that keep their type (1-D, "
        "integer, rows not whole blocks, GGML blocks) are listed on stderr",
    )
    parser.add_argument(
        "--max-shard-size",
        metavar="SIZE",
        type=parse_size,
        help="write shards (safetensors: DST is a directory with an index) or GGUF splits "
        "of at most SIZE data bytes: 5GB (5*10**9), 500MB, 2GiB (2*2**30), 4096",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace DST (or GGUF splits of its name) when it exists; never an input",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="write the shards on a dask.distributed cluster, one task per shard, "
        "byte-identical to the local run (needs kiln-np[dask], --to safetensors and "
        "--max-shard-size; every worker must see SRC and DST at the same paths): "
        "tcp://10.0.0.5:8786",
    )
    select_args(parser)
    json_flag(parser)
    parser.set_defaults(run=_cmd_convert)
