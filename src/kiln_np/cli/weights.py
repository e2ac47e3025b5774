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
import signal
import sys
from collections.abc import Mapping
from typing import Any

from kiln_np import formats
from kiln_np._convert.plan import (
    CLI,
    OptionsError,
    Plan,
    Step,
    carried_metadata,
    execute,
)
from kiln_np._convert.row import WeightFormat
from kiln_np._convert.sources import DEQUANTIZE_TYPES
from kiln_np._convert.to_gguf import OUTTYPES
from kiln_np._core.checks import written_path
from kiln_np._core.errors import KilnError
from kiln_np._explore.report import input_files
from kiln_np._quants.filetypes import file_type_label, file_type_record
from kiln_np._weights.logical import LogicalTensor
from kiln_np._weights.summary import ORDERS, ordered
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights
from kiln_np.gguf import Imatrix

from .args import json_flag, parse_size, subparser
from .errors import CliError, Stopped, file_error
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
    say,
    shape_text,
    table,
)
from .quantize import add_mix_flags, llama_totals, quantize_policy

__all__ = [
    "add_convert",
    "add_ls",
    "listing_order",
    "logical_view",
    "open_weights_file",
    "parts_flag",
    "save_weights_file",
    "select_args",
    "select_tensors",
    "selection_record",
    "sort_args",
    "weights_inputs",
]


def open_weights_file(path: str) -> Weights:
    """:func:`kiln_np.open_weights`, an ``OSError`` as FILE naming the user's own
    spelling of the path, or the shard the error is about."""
    try:
        return formats.open_weights(path)
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
) -> list[str]:
    """:func:`kiln_np.save_weights` with a progress bar ``label`` over the
    payload bytes, an ``OSError`` as FILE naming ``path``; returns the paths
    written, spelled as ``path`` is.

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
    plan = formats.plan_weights(path, tensors, format=format, metadata=metadata)
    return _execute(plan, os.fspath(path), label, total_bytes)


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
    parts_flag(parser)


def parts_flag(parser: argparse.ArgumentParser) -> None:
    """``--parts``: the tensors as stored, not the logical view (:func:`logical_view`)."""
    parser.add_argument(
        "--parts",
        action="store_true",
        help="the tensors as stored: without it, a weight that a quantization scheme "
        "(FP8 block-scaled, NVFP4, GPTQ, AWQ, bitsandbytes, gpt-oss MXFP4, ...) stores as "
        "several tensors is one tensor of its values (docs/weights.md)",
    )


def sort_args(parser: argparse.ArgumentParser) -> None:
    """``--sort file|name|size|type``: the order of a listing's rows, read by
    :func:`listing_order`."""
    by_file = ", ".join(row.name for row in formats.FORMATS if row.listing_order == "file")
    parser.add_argument(
        "--sort",
        choices=ORDERS,
        help="the order of the rows: file (as stored), name (natural order across shards: "
        "layers.2 before layers.10, a layer's tensors together), size (the most bytes "
        "first), type (grouped by the format's type); default: name, but file for "
        f"{by_file} (the producer's order)",
    )


def listing_order(args: argparse.Namespace, weights: Weights) -> str:
    """The order ``--sort`` names, else the one of ``weights``' format's row
    (``WeightFormat.listing_order``; natural name order for a format not in the table).

    >>> from types import SimpleNamespace
    >>> gguf = SimpleNamespace(format="gguf")
    >>> listing_order(argparse.Namespace(sort=None), gguf), listing_order(argparse.Namespace(
    ...     sort="size"), gguf), listing_order(argparse.Namespace(sort=None), SimpleNamespace(
    ...     format="safetensors"))
    ('file', 'size', 'name')
    """
    if args.sort is not None:
        return str(args.sort)
    row = next((r for r in formats.FORMATS if r.name == weights.format), None)
    return "name" if row is None else row.listing_order


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
        "kiln": info.element.name,
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
        order = listing_order(args, weights)
        tensors = [_tensor_record(t) for t in ordered(chosen.values(), order)]
        selection = selection_record(args, len(chosen), len(weights))
        record = {
            "format": "kiln-np-ls/1",
            "path": args.path,
            "weights_format": weights.format,
            "file_type": file_type_record(weights.file_type),
            "byte_length": chosen.byte_length,
            "selection": selection,
            "order": order,
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
    say(table(rows))
    total, fmt = record["byte_length"], record["weights_format"]
    count = _count_text(len(tensors), len(weights), selection)
    label = file_type_label(weights.file_type)
    said = "" if label is None else f", file type {label}"  # llama.cpp's, of a GGUF file
    say(
        f"{count}, {human_count(record['parameters'])} parameters, "
        f"{human_bytes(total)} ({total:,} payload bytes), {fmt}{said}"
    )
    return 0


def _refuse_replacing(args: argparse.Namespace, row: WeightFormat, plan: Plan) -> None:
    """FILE when ``convert`` would replace what is there and ``--force`` is not
    given: DST itself, a file or a directory that is not empty, and what the
    format's row says stands for it too (a GGUF's splits of its name, whatever
    their count).  With ``--force``, each is reported on stderr, with every file
    beside DST that the plan replaces (``Plan.replaced``: a ``config.json`` it did
    not write); what the new output leaves in place is removed once it is whole
    (``Plan.stale``)."""
    dst, force = args.dst, "pass --force to replace"
    try:
        if os.path.isdir(dst):
            found = [(dst, "a directory, not empty")] if os.listdir(dst) else []
        elif os.path.exists(dst):
            found = [(dst, f"a file of {os.stat(dst).st_size} bytes")]
        else:
            found = []
    except OSError:
        found = []  # unreadable or gone meanwhile: writing will say so
    splits = row.replaces(dst) if row.replaces is not None else []
    if args.force:
        for path, what in [*found, *((p, "a split") for p in splits)]:
            say(f"replacing {path} ({what})", stream=sys.stderr)
        for path in plan.replaced:
            say(f"replacing {path} (not written by a conversion)", stream=sys.stderr)
        return
    if found:
        raise CliError("FILE", f"cannot write {dst!r}: it exists ({found[0][1]}); {force} it")
    if splits:
        shown = ", ".join(repr(f) for f in splits[:3]) + (", ..." if len(splits) > 3 else "")
        if args.max_shard_size is None:
            exist = f"splits of its name exist ({shown})"
            raise CliError("FILE", f"cannot write {dst!r}: {exist}; {force} them")
        raise CliError("FILE", f"cannot write {dst!r} as splits: {shown} exist; {force} them")


def _writers() -> list[WeightFormat]:
    """The rows of the format table that write: ``--to``'s choices."""
    return [row for row in formats.FORMATS if row.save is not None]


def _target_format(args: argparse.Namespace) -> WeightFormat:
    """The row of ``--to``, or of the format DST's suffix names; USAGE when it names none.

    Examples
    --------
    >>> _target_format(argparse.Namespace(to=None, dst="out.zarr/")).name
    'zarr'
    """
    rows = _writers()
    if args.to is not None:
        return next(row for row in rows if row.name == args.to)
    suffix = _suffix(args.dst)
    for row in rows:
        if suffix and suffix in row.suffixes:
            return row
    suffixes = [f"*{s}" for row in rows for s in row.suffixes]
    spelled = ", ".join(suffixes[:-1]) + f" and {suffixes[-1]}"
    names = [row.name for row in rows]
    raise CliError(
        "USAGE",
        f"cannot tell the format to write from {args.dst!r} (only {spelled} say it): pass "
        f"--to {', '.join(names[:-1])} or {names[-1]}",
    )


def _save_on_cluster(args: argparse.Namespace, plan: Plan, chosen: Weights) -> list[str]:
    """The plan executed a shard per task on the cluster of ``--scheduler`` (a
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
            door.run_plan(plan, chosen, client=client)
        except OSError as exc:
            raise file_error("write", args.dst, exc) from exc
    return [args.dst]


def _suffix(dst: str) -> str:
    """DST's suffix, a trailing separator aside (``out.zarr/`` -> ``.zarr``)."""
    return os.path.splitext(dst.rstrip("/" + os.sep))[1]


def _folder_out(args: argparse.Namespace, row: WeightFormat) -> bool:
    """Whether DST is a directory to write the format's folder layout into: a
    directory in (SRC) gives a directory out, unless DST's suffix names a file.

    >>> import tempfile
    >>> from kiln_np.formats import FORMATS
    >>> safetensors = next(r for r in FORMATS if r.name == "safetensors")
    >>> src = tempfile.mkdtemp()
    >>> _folder_out(argparse.Namespace(src=src, dst="plain"), safetensors)
    True
    >>> _folder_out(argparse.Namespace(src=src, dst="m.safetensors"), safetensors)
    False
    """
    suffix = _suffix(args.dst)
    return os.path.isdir(args.src) and suffix not in row.suffixes


def _plan(args: argparse.Namespace, chosen: Weights, weights: Weights, row: WeightFormat) -> Plan:
    """The conversion's plan (its refusals about the options as USAGE)."""
    try:
        plan = formats.plan_weights(
            args.dst,
            chosen,
            format=row.name,
            metadata=carried_metadata(weights, row),
            max_shard_size=args.max_shard_size,
            dequantize=args.dequantize,
            quantize=quantize_policy(args),
            spelling=CLI,
            distributed=args.scheduler is not None,
            force=args.force,
            folder=_folder_out(args, row),
            tokenizer=not args.no_tokenizer,
            names=args.names,
            outtype=args.outtype,
        )
    except OptionsError as exc:
        raise CliError(exc.cli_kind, exc.usage) from None
    return plan


def _cmd_convert(args: argparse.Namespace) -> int:
    row = _target_format(args)
    with open_weights_file(args.src) as stored:
        weights = stored if args.dequantize is None else logical_view(stored, args, args.src)
        chosen = select_tensors(weights, args, args.src, logical=False)
        selection = selection_record(args, len(chosen), len(weights))
        inputs = weights_inputs(weights)
        refuse_overwrite(args.dst, inputs)
        plan = _plan(args, chosen, weights, row)
        count = _count_text(len(chosen), len(weights), selection)
        # Never writing over an input is a refusal of the plan: a dry run makes it too.
        refuse_writing_inputs(plan.outputs, inputs)
        refuse_directory_over_inputs(args.dst, inputs)
        if args.dry_run:
            return _print_plan(args, plan, weights, count, selection)
        _refuse_replacing(args, row, plan)
        before = {path: _identity(path) for path in plan.outputs}
        try:
            _write(args, plan, chosen, weights.format, count, selection)
        except (KeyboardInterrupt, Stopped) as exc:
            raise _stopped(exc, before, args.dst) from None
    return 0


def _identity(path: str) -> tuple[int, int, int] | None:
    """What stands at ``path`` (device, inode, mtime), None when nothing does."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _stopped(
    exc: BaseException, before: Mapping[str, tuple[int, int, int] | None], dst: str
) -> BaseException:
    """What a signal that stopped ``convert`` means: :class:`Stopped` naming DST as
    complete when every output was already renamed into place (each is another
    file than before), else the signal as it came (unfinished outputs removed).

    >>> _stopped(KeyboardInterrupt(), {"/": None}, "x").line()
    "stopped by SIGINT (Ctrl-C) after the output was written: 'x' is complete"
    """
    if not all(_identity(path) not in (None, seen) for path, seen in before.items()):
        return exc
    if isinstance(exc, Stopped):
        return Stopped(exc.name, exc.number, done=dst)
    return Stopped("SIGINT (Ctrl-C)", signal.SIGINT, done=dst)


def _write(
    args: argparse.Namespace,
    plan: Plan,
    chosen: Weights,
    source_format: str,
    count: str,
    selection: dict[str, Any] | None,
) -> None:
    """Execute the plan (here, or a shard per task on ``--scheduler``) and report it."""
    kept = [{"name": s.name, "type": s.target_type, "reason": s.reason} for s in _kept(plan)]
    for k in kept:
        say(f"kept {k['name']} as {k['type']}: {k['reason']}", stream=sys.stderr)
    for note in plan.notes:
        say(f"note: {note}", stream=sys.stderr)
    total = sum(s.target_bytes for s in plan.steps)
    matrix = _imatrix_of(plan)
    if args.scheduler is not None:
        written = _save_on_cluster(args, plan, chosen)
    else:
        written = _execute(plan, args.dst, f"convert {args.src}", total)
    actions = plan.totals()["actions"]
    record = {
        "format": "kiln-np-convert/1",
        "input": args.src,
        "output": args.dst,
        "from": source_format,
        "to": plan.row.name,
        "tensors": len(chosen),
        "byte_length": total,
        "metadata": "carried" if plan.metadata is not None else "dropped",
        "dequantize": plan.dequantize,
        "dequantized": actions.get("dequantize", 0),
        "quantize": None if plan.quantize is None else str(plan.quantize),
        "quantized": actions.get("quantize", 0),
        "imatrix": None if matrix is None else matrix.path,
        "weighted": sum(s.imatrix == "weights" for s in plan.steps),
        "kept": kept,
        "files": written,
        "selection": selection,
        "scheduler": args.scheduler,
    }
    emit(args, record, f"{_files_text(written)}: {count}, {_summary(record, plan)}")


def _kept(plan: Plan) -> list[Step]:
    return [s for s in plan.steps if s.action == "keep"]


def _summary(record: Mapping[str, Any], plan: Plan) -> str:
    """The end of ``convert``'s line: bytes, formats, what was done, the metadata."""
    to = record["to"]
    dropped = (
        ""
        if plan.metadata is not None
        else f"; {record['from']} metadata not carried ({to} cannot hold it)"
    )
    decoded = (
        f", {record['dequantized']} dequantized to {plan.dequantize}"
        if plan.dequantize is not None
        else ""
    )
    if plan.quantize is not None:
        weighted = f" ({record['weighted']} with importance weights)" if record["imatrix"] else ""
        decoded = (
            f", {record['quantized']} quantized ({plan.quantize}){weighted}, "
            f"{len(_kept(plan))} kept their type"
        )
    return f"{record['byte_length']} payload bytes, {record['from']} -> {to}{decoded}{dropped}"


def _execute(plan: Plan, dst: str, label: str, total_bytes: int) -> list[str]:
    """The plan executed with a progress bar over the payload bytes, an ``OSError``
    as FILE naming ``dst``; the paths written, spelled as ``dst`` is."""
    with Progress(max(total_bytes, 1), label) as bar:
        try:
            written = execute(plan, progress=bar.advance)
        except OSError as exc:
            raise file_error("write", dst, exc) from exc
        bar.advance(bar.total - bar.done)
    return _spelled(written, dst)


def _spelled(written: list[str], given: str) -> list[str]:
    """The absolute paths ``written``, spelled as the user's ``given`` path is:
    GGUF splits beside it, the files of a directory written (a plan's shards,
    payload files, index) inside it.

    >>> _spelled([os.path.abspath("x-00001-of-00002.gguf")], "x.gguf")
    ['x-00001-of-00002.gguf']
    >>> _spelled([os.path.abspath(os.path.join("d", "s", "zarr.json"))], "d/")
    ['d/s/zarr.json']
    """
    target = written_path(given)
    folder = os.path.dirname(given)
    spelled = []
    for p in written:
        if p == target:
            spelled.append(given)
        elif p.startswith(target + os.sep):
            spelled.append(os.path.join(given, os.path.relpath(p, target)))
        else:
            spelled.append(os.path.join(folder, os.path.basename(p)))
    return spelled


def _print_plan(
    args: argparse.Namespace,
    plan: Plan,
    weights: Weights,
    count: str,
    selection: dict[str, Any] | None,
) -> int:
    """``convert --dry-run``: the plan, tensor by tensor, and its totals; nothing written."""
    totals = plan.totals()
    record = {
        "format": "kiln-np-convert-plan/1",
        "input": args.src,
        "output": args.dst,
        "from": weights.format,
        "to": plan.row.name,
        "tensors": [s.record() for s in plan.steps],
        "totals": totals,
        "files": _spelled(plan.outputs, args.dst),
        "metadata": "carried" if plan.metadata is not None else "dropped",
        "selection": selection,
        "notes": list(plan.notes),
    }
    if args.json:
        print_json(record)
        return 0
    matrix = _imatrix_of(plan)
    rows = [["name", "action", "type", "bytes", "bpw", *(["imatrix"] if matrix else []), "why"]]
    for step in (s.record() for s in plan.steps):
        change = step["source_type"]
        size = human_bytes(step["source_bytes"])
        if step["target_type"] != step["source_type"]:
            change += f" -> {step['target_type']}"
            size += f" -> {human_bytes(step['target_bytes'])}"
        given = [step["imatrix"] or "-"] if matrix else []
        rows.append(
            [step["name"], step["action"], change, size, _bpw_text(step), *given, step["reason"]]
        )
    say(table(rows, right=(3, 4)))
    actions = ", ".join(f"{n} {a}" for a, n in totals["actions"].items())
    say(
        f"{count} ({actions}), {human_bytes(totals['source_bytes'])} -> "
        f"{human_bytes(totals['target_bytes'])}, {_bpw_text(totals)} bits per weight, "
        f"{weights.format} -> {plan.row.name}; would write {_files_text(record['files'])}"
    )
    if plan.quantize is not None and plan.quantize.file_type is not None:
        say(llama_totals(totals))
    if matrix is not None:
        say(_imatrix_text(matrix, plan))
    for note in plan.notes:
        say(f"note: {note}")
    return 0


def _imatrix_of(plan: Plan) -> Imatrix | None:
    """The importance matrix the plan quantizes with, None without one."""
    matrix = None if plan.quantize is None else plan.quantize.imatrix
    return matrix if isinstance(matrix, Imatrix) else None


def _imatrix_text(matrix: Imatrix, plan: Plan) -> str:
    """What the importance matrix gave the plan's tensors, in a line.

    >>> import numpy as np
    >>> from kiln_np import QuantizePolicy
    >>> from kiln_np.formats import plan_weights
    >>> from kiln_np.gguf import ImatrixEntry
    >>> e = ImatrixEntry("w.weight", np.ones((1, 32), np.float32), (1,))
    >>> m = Imatrix("i.gguf", "gguf", (), 1, 512, {"w.weight": e}, 2)
    >>> plan = plan_weights("m.gguf", {"w.weight": np.ones((2, 32), np.float32)},
    ...                     format="gguf", quantize=QuantizePolicy.parse("q8_0", imatrix=m))
    >>> _imatrix_text(m, plan)
    'imatrix i.gguf: 1 of 2 entries kept, 1 chunk; tensors quantized: 1 ignored'
    """
    counts: dict[str, int] = {}
    for step in plan.steps:
        if step.imatrix is not None:
            counts[step.imatrix] = counts.get(step.imatrix, 0) + 1
    kept = len(matrix.entries)
    entries = (
        f"{kept} of {matrix.loaded} entries kept" if kept != matrix.loaded else f"{kept} entries"
    )
    chunks = f"{matrix.chunk_count} chunk{'s' * (matrix.chunk_count != 1)}"
    given = ", ".join(f"{n} {what}" for what, n in counts.items()) or "none"
    return f"imatrix {matrix.path}: {entries}, {chunks}; tensors quantized: {given}"


def _bpw_text(record: Mapping[str, Any]) -> str:
    """Bits per weight, before -> after when they differ.

    >>> _bpw_text({"source_bpw": 16.0, "target_bpw": 8.5}), _bpw_text({"source_bpw": None,
    ...                                                                   "target_bpw": None})
    ('16 -> 8.5', '-')
    """
    a, b = record["source_bpw"], record["target_bpw"]
    if a is None:
        return "-"
    return f"{a:.4g}" if a == b else f"{a:.4g} -> {b:.4g}"


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
        "--exclude, only the tensors they select, the totals saying so (3 of 75 tensors).  "
        "Tensors are listed in natural name order (GGUF: in file order), or as --sort says.  "
        "Only headers are read.",
        [
            "kiln-np ls model.safetensors",
            "kiln-np ls model/ --sort size",
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
    sort_args(parser)
    json_flag(parser, "print one JSON object, a row per tensor, and the totals")
    parser.set_defaults(run=_cmd_ls)


def add_convert(sub: Any) -> None:
    """The ``convert`` command."""
    parser = subparser(
        sub,
        "convert",
        "write a weight file in another format",
        "Write every tensor of a weight file as safetensors, GGUF, a Kiln payload directory "
        "or a Zarr v3 group, bit for bit, streamed; a tensor the target cannot hold is an "
        "error before anything is written.  With --dequantize, GGML quantized tensors are "
        "written as float values instead of blocks; with --quantize (GGUF, kiln, zarr), float"
        " tensors are quantized to GGML blocks by a policy of name patterns, and each tensor "
        "that keeps its type is listed on stderr with the reason.  Metadata goes along when "
        "the target can hold it.  With --include or --exclude, only the tensors they select "
        "are written.  A Hugging Face checkpoint directory of an architecture of the model "
        "map (llama, mistral, qwen2, qwen3, qwen3_moe, gemma3, phi3, mixtral, gemma2, "
        "qwen2_moe) written as "
        "GGUF is what llama.cpp's convert_hf_to_gguf.py writes of it (GGUF names, transforms, "
        "order, types by --outtype, llama.cpp's keys), unless --names raw.  --dry-run prints "
        "the plan and writes nothing.  An existing DST is replaced only with --force.",
        [
            "kiln-np convert model.safetensors weights/ --to kiln",
            "kiln-np convert model.safetensors model.zarr",
            "kiln-np convert model.safetensors model.gguf --quantize q4_k --dry-run",
            "kiln-np convert model.gguf model.safetensors --dequantize bf16",
            "kiln-np convert model.safetensors model.gguf --quantize q8_0",
            "kiln-np convert model.safetensors model.gguf "
            "--quantize 'q4_k,*.ffn_down.*=q6_k,*norm*=f32'",
            "kiln-np convert big.safetensors ckpt/ --to safetensors --max-shard-size 5000000000",
            "kiln-np convert model.gguf blk0.safetensors --include 'blk.0.*' --dequantize f32",
            "kiln-np convert Qwen3-0.6B/ qwen3.gguf --outtype bf16",
        ],
    )
    parser.add_argument("src", metavar="SRC")
    parser.add_argument("dst", metavar="DST")
    writers = _writers()
    named = ", ".join(f"{s} ({row.name})" for row in writers for s in row.suffixes)
    parser.add_argument(
        "--to",
        choices=[row.name for row in writers],
        help=f"the format to write (default: from DST's suffix: {named})",
    )
    parser.add_argument(
        "--dequantize",
        choices=DEQUANTIZE_TYPES,
        help="write each GGML quantized tensor (Q4_K, Q8_0, ...) as its values of this type: "
        "ggml's float32, rounded to nearest even for bf16 and f16; other tensors keep "
        "their bytes",
    )
    add_mix_flags(parser)
    parser.add_argument(
        "--outtype",
        choices=OUTTYPES,
        help="a Hugging Face checkpoint directory to GGUF: llama.cpp's converter's --outtype "
        "(default f16, as its): f32, f16, bf16 or q8_0 for the matrices (norms, biases, 1-D "
        "and router tensors stay f32), auto: bf16 for a bf16 checkpoint, else f16",
    )
    parser.add_argument(
        "--names",
        choices=("map", "raw"),
        default="map",
        help="a Hugging Face checkpoint directory to GGUF: map (default: llama.cpp's names, "
        "transforms and keys, through the model map) or raw (its own names, no llama.cpp keys)",
    )
    parser.add_argument(
        "--max-shard-size",
        metavar="SIZE",
        type=parse_size,
        help="write shards (safetensors: DST is a directory with an index) or GGUF splits "
        "of at most SIZE data bytes: 5GB (5*10**9), 500MB, 2GiB (2*2**30), 4096",
    )
    parser.add_argument(
        "--no-tokenizer",
        action="store_true",
        help="--to hf: leave the GGUF's tokenizer out (by default its tokenizer.ggml.* keys are "
        "written as tokenizer.json, tokenizer_config.json, special_tokens_map.json and, for "
        "SentencePiece, tokenizer.model; a tokenizer model or pre-tokenizer not covered is "
        "refused)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and write nothing: each tensor's action (copy, dequantize, "
        "quantize, keep) and why, its type and size before and after, bits per weight, "
        "the totals and the files it would write; reads headers only",
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
