"""Payload files on the command line: ``encode`` (a .npy array to a payload),
``decode`` (a payload to a .npy array) and ``inspect`` (a payload summarized).

A payload is described by ``--code/--shape/--layout/--offset``
(:func:`~kiln_np.cli.args.describe_payload`), or by a weight file's tensor
(``inspect --tensor``), and never measured here: sizes and LENGTH messages come
from the description.  ``decode`` and ``inspect`` read it once, in bounded
chunks checked as they are read (:func:`kiln_np._files.chunks.read_chunks`);
``encode`` memory-maps the .npy and streams it through
:func:`kiln_np.save_payload`.  ``inspect`` of a quantized tensor shows its
numbers first: a GGML quantized payload with a decoder as its values and block
scales from the mapped file (:class:`~kiln_np.QuantizedDescription`, a bounded
run of blocks at a time), a weight a quantization scheme stores as several
tensors (``--tensor NAME`` of its logical name) as its values and its stored
parts; each with a bounded head of its values laid out as numpy prints a large
array (:mod:`kiln_np._explore.corners`), and its raw bytes only with ``--hex``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple

import numpy as np

from kiln_np._codec import Payload
from kiln_np._core.checks import U8, printable, short_or_long, show_int
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import DType, Layout, code_label, code_range, row_for_dtype
from kiln_np._explore import Description, QuantizedDescription, summarize
from kiln_np._explore.chunks import quantized
from kiln_np._explore.corners import corners_text, ggml_corners, logical_corners
from kiln_np._explore.entry import describe
from kiln_np._explore.quantized import describe_quantized
from kiln_np._files.chunks import file_where, read_chunks
from kiln_np._files.io import open_regular
from kiln_np._files.npy import npy_header, read_npy_header
from kiln_np._files.saving import save_payload
from kiln_np._quants.elements import element_of
from kiln_np._weights.logical import LogicalTensor
from kiln_np._weights.mapped import MappedFile
from kiln_np._weights.tensors import WeightTensor

from .args import describe_payload, json_flag, parse_code, parse_first, payload_args, subparser
from .errors import CliError, file_error
from .files import identity, refuse_overwrite, stat_input, write_file
from .output import Progress, emit, layout_json, print_json, say, shape_text
from .weights import logical_view, open_weights_file, parts_flag

__all__ = ["add_decode", "add_encode", "add_inspect"]


# -- payload files --------------------------------------------------------------------


class _Input(NamedTuple):
    """A payload file checked by ``decode``/``inspect``, not yet read."""

    path: str
    info: PayloadInfo
    stat: os.stat_result

    @property
    def trailing(self) -> int:
        return self.stat.st_size - self.info.offset - self.info.byte_length


def _open_input(args: argparse.Namespace, *, exact: bool) -> _Input:
    """Describe the payload and check the file holds it: exactly ``byte_length``
    bytes from ``--offset`` to its end, or at least that many when ``exact`` is
    off (a payload embedded in a larger file)."""
    info = describe_payload(args)
    st = stat_input(args.input)
    found = max(st.st_size - info.offset, 0)
    if found < info.byte_length or (exact and found != info.byte_length):
        raise info.length_error(found, file_where(args.input, info))
    return _Input(args.input, info, st)


def _chunks(opened: _Input, progress: Callable[[int], None] | None = None) -> Iterator[np.ndarray]:
    """:func:`~kiln_np._files.chunks.read_chunks` of the input, an ``OSError``
    as FILE (not the output's: a command writes while it reads)."""
    try:
        yield from read_chunks(opened.path, opened.info, progress)
    except OSError as exc:
        raise file_error("read", opened.path, exc) from exc


def _named_tensor(args: argparse.Namespace, weights: Any) -> WeightTensor:
    """``inspect PATH --tensor NAME``: the tensor, of the logical view unless
    ``--parts`` (a stored part's name, which that view hides, is the part)."""
    options = (("--code", args.code), ("--shape", args.shape), ("--layout", args.layout))
    given = [option for option, value in options if value is not None]
    if given or args.offset != "0":
        dropped = ", ".join(given) or "--offset"
        raise CliError(
            "USAGE", f"--tensor takes the description from the weight file: drop {dropped}"
        )
    tensor: WeightTensor | None = logical_view(weights, args, args.input).get(args.tensor)
    if tensor is None:
        tensor = weights.get(args.tensor)
    if tensor is None:
        names = ", ".join(repr(n) for n in list(weights)[:5])
        raise KilnError(
            "TYPE",
            f"{args.input!r}: expected a tensor named {args.tensor!r}, found none "
            f"(it holds {len(weights)}: {names}{', ...' if len(weights) > 5 else ''})",
        )
    return tensor


def _stored_input(args: argparse.Namespace, tensor: WeightTensor) -> _Input:
    """A stored tensor's payload in its file."""
    if tensor.path is None:
        raise KilnError(
            "TYPE",
            f"{args.input!r}: tensor {args.tensor!r} is held in memory, not at an offset "
            "of a file (inside the model, or a 2- or 6-bit type Kiln holds unpacked): "
            "expected a tensor stored in a file (export the model with "
            "kiln-np convert MODEL DIR --to kiln, then inspect DIR --tensor NAME)",
        )
    return _Input(tensor.path, tensor.info, stat_input(tensor.path))


# -- .npy files -----------------------------------------------------------------------


def _storage_code(path: str, dtype: np.dtype[Any], code: int | None) -> int:
    """The Kiln code of the elements a .npy stores: its dtype's own, or
    ``--code`` for the void elements numpy's format stores ml_dtypes types as.

    Examples
    --------
    >>> _storage_code("w.npy", np.dtype("<f4"), None), _storage_code("w.npy", np.dtype("V2"), 3)
    (2, 3)
    """
    if dtype.hasobject:
        raise KilnError(
            "TYPE", f"{path!r}: holds Python objects ({dtype}); expected a dtype with a Kiln code"
        )
    if dtype.kind != "V" or dtype.fields is not None:
        try:
            return int(row_for_dtype(dtype).code)
        except KilnError as exc:
            raise exc.prefixed(f"{path!r}: ") from None
    if code is None:
        raise KilnError(
            "TYPE",
            f"{path!r}: holds void '{dtype.str[1:]}' elements, which is how numpy's .npy "
            "format stores ml_dtypes types (bfloat16, float8, int4, ...); expected --code "
            "to say which (e.g. --code bf16)",
        )
    if code_range(code) != "closed":
        raise KilnError(
            "TYPE",
            f"{path!r}: holds void '{dtype.str[1:]}' elements: expected the --code of a "
            f"closed type (1-19) to say which, found {code_label(code)}",
            code=code,
        )
    element = payload_info(code, ()).element
    if element.dtype.itemsize != dtype.itemsize:
        raise KilnError(
            "TYPE",
            f"{path!r}: {code_label(code)} elements are {element.dtype.itemsize} byte(s) each in "
            f"numpy, found void elements of {dtype.itemsize}: expected the --code of a "
            f"{dtype.itemsize}-byte type",
            code=code,
        )
    return code


class _Npy(NamedTuple):
    array: np.ndarray  # memory-mapped, with the dtype of its Kiln code
    stat: os.stat_result


def _load_npy(path: str, code: int | None) -> _Npy:
    """Memory-map a .npy file (never a pickle); TYPE for a header numpy could
    not take, SHAPE for an array it could not make, LENGTH when the data is
    not exactly what the header says."""
    st = stat_input(path)
    try:
        with open_regular(path) as f:
            header = read_npy_header(f)
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    except KilnError:
        raise  # the path became a FIFO or a device after it was checked
    except Exception as exc:
        # Untrusted bytes through numpy's readers (read_magic, descr_to_dtype, the
        # dtype constructor): ValueError, TypeError, OverflowError, KeyError... all
        # mean "not a .npy file kiln-np can read".
        raise KilnError("TYPE", f"{path!r}: expected a .npy file: {exc}") from None
    stored = _storage_code(path, header.dtype, code)
    try:
        info = payload_info(stored, header.shape)
    except KilnError as exc:  # SHAPE: an array numpy could not make
        raise exc.prefixed(f"{path!r}: ") from None
    dtype = info.dtype  # the void elements of an ml_dtypes .npy, typed
    expected = info.count * dtype.itemsize  # numpy's data size, not the payload's
    found = st.st_size - header.start
    if found != expected:
        raise KilnError(
            "LENGTH",
            f"{path!r}: expected {show_int(expected)} data bytes for shape {info.shape} of "
            f"{dtype}, found {found} ({short_or_long(expected, found)})",
            expected=expected,
            found=found,
        )
    order: Literal["C", "F"] = "F" if header.fortran else "C"
    if expected == 0:
        return _Npy(np.empty(info.shape, dtype, order=order), st)
    try:
        with open_regular(path) as f:  # a path swapped for a FIFO is TYPE, never opened
            arr = np.memmap(f, dtype, "r", offset=header.start, shape=info.shape, order=order)
    except OSError as exc:
        raise file_error("map", path, exc) from exc
    return _Npy(arr, st)


# -- encode and decode ----------------------------------------------------------------


def _conversion(fmt: str, src: str, out: str, info: PayloadInfo) -> tuple[dict[str, Any], str]:
    row = info.element if isinstance(info.element, DType) else None
    record = {
        "format": fmt,
        "input": src,
        "output": out,
        "code": int(info.code),
        "name": None if row is None else row.name,
        "dtype": None if row is None else str(row.dtype),
        "layout": layout_json(info.layout),
        "shape": list(info.shape),
        "byte_length": info.byte_length,
    }
    layout = info.layout
    what = f"layout {layout.name}:{layout.block_size}" if layout else f"dtype {record['dtype']}"
    text = (
        f"{out}: {code_label(int(info.code))}, {what}, shape {shape_text(info.shape)}, "
        f"{info.byte_length} payload bytes"
    )
    return record, text


def _cmd_encode(args: argparse.Namespace) -> int:
    code = None if args.code is None else parse_code(args.code)
    npy = _load_npy(args.input, code)
    refuse_overwrite(args.output, {identity(npy.stat): args.input})
    try:
        # Streamed in bounded chunks; a dtype other than --code's is TYPE (never cast).
        written = save_payload(args.output, npy.array, code=code)
    except OSError as exc:
        raise file_error("write", args.output, exc) from exc
    record, text = _conversion("kiln-np-encode/1", args.input, args.output, written)
    emit(args, record, text)
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    opened = _open_input(args, exact=not args.embedded)
    refuse_overwrite(args.output, {identity(opened.stat): args.input})
    info = opened.info
    with Progress(max(info.byte_length, 1), f"decode {args.input}") as bar:

        def pieces() -> Iterator[Any]:
            yield npy_header(info.dtype, info.decoded_shape)
            for chunk in _chunks(opened, bar.advance):
                yield chunk.reshape(-1).view(U8).data

        # A bad bool byte or padding nibble found mid-way leaves no output file.
        write_file(args.output, pieces())
    record, text = _conversion("kiln-np-decode/1", args.input, args.output, info)
    emit(args, record, text)
    return 0


# -- inspect --------------------------------------------------------------------------

_NUMERIC_KEYS = ("nan", "inf", "zero", "subnormal", "min", "max", "absmax", "mean", "std")
"""The ``inspect --json`` keys that mean nothing for uninterpreted blocks."""


def _opaque_summary(opened: _Input, first: int) -> dict[str, Any]:
    info = opened.info
    size = info.element.byte_length(1)
    wanted = min(first, info.count) * size
    head = bytearray()
    for chunk in _chunks(opened):
        if len(head) >= wanted:
            break
        head += chunk[: wanted - len(head)].tobytes()
    blocks = [head[i : i + size].hex() for i in range(0, len(head), size)]
    nothing = dict.fromkeys(_NUMERIC_KEYS)
    return {
        "code": int(info.code),
        "name": None,
        "dtype": None,
        "shape": list(info.shape),
        "count": info.count,
        "byte_length": info.byte_length,
        **nothing,
        "first": None,
        "first_bits": blocks,
        "histogram": None,
        "exponents": None,
    }


def _quantized(opened: _Input, first: int) -> tuple[QuantizedDescription, np.ndarray] | None:
    """A GGML quantized payload of a type with a decoder, described as its values
    and block scales from the mapped file (a bounded run of blocks at a time),
    and the corners of its values (:func:`~kiln_np._explore.corners.ggml_corners`);
    None for any other payload."""
    info = opened.info
    if element_of(info.code, info.layout).decoded is None:
        return None
    file = MappedFile.open(opened.path)
    try:
        data = file.view(info.offset, info.byte_length)
        q = quantized(Payload(info.code, data, info.shape, info.layout))
        assert q is not None
        return describe_quantized(q, first), ggml_corners(info, data)
    finally:
        file.close()


_MOST_COMMON = 16  # histogram rows shown for a 16-bit type


def _inspect_text(record: dict[str, Any], described: Description | None, first: int) -> str:
    """The text ``inspect`` prints: the file, then :meth:`Description.rows` (or, for
    an opaque payload with no decoder, its blocks)."""
    lines = [
        f"file              {record['file']} ({record['file_bytes']} bytes; payload at offset "
        f"{record['offset']}, {record['trailing_bytes']} bytes after it)"
    ]
    if described is None:
        layout = record["layout"]
        lines += [
            f"code              {code_label(record['code'])}",
            f"layout            {layout['name']} ({layout['block_size']}-byte blocks)",
            f"shape             {shape_text(record['shape'])} ({record['count']} blocks)",
            f"payload           {record['byte_length']} bytes",
        ]
        if record["first_bits"]:
            lines.append("first blocks      " + " ".join(record["first_bits"]))
        return "\n".join(lines)
    shows_first = first > 0 and described.first.size > 0  # never an empty "first" line
    lines += [f"{k:<17} {v}" for k, v in described.rows() if shows_first or k != "first"]
    if described.histogram is not None:
        used = int(np.count_nonzero(described.histogram))
        # Every pattern of an 8-bit (or smaller) type; the most common of a 16-bit one.
        wide = described.histogram.size > 256
        shown = (
            described.histogram_rows(_MOST_COMMON)
            if wide
            else described.histogram_rows(order="pattern")
        )
        order = f"the {len(shown)} most common: " if wide and used > len(shown) else ""
        lines.append(
            f"histogram         {used} of {described.histogram.size} bit patterns used "
            f"({order}pattern, value, count, share)"
        )
        lines += [f"  {p}  {v:>14}  {c:>14}  {s:>6}" for p, v, c, s in shown]
    return "\n".join(lines)


def _cmd_inspect(args: argparse.Namespace) -> int:
    if args.tensor is not None:
        with open_weights_file(args.input) as weights:
            tensor = _named_tensor(args, weights)
            if isinstance(tensor, LogicalTensor):
                return _inspect_logical(args, tensor)
            opened = _stored_input(args, tensor)
    elif args.code is None or args.shape is None:
        raise CliError(
            "USAGE", "the following arguments are required: --code, --shape (or --tensor NAME)"
        )
    else:
        opened = _open_input(args, exact=False)
    info = opened.info
    head: dict[str, Any] = {
        "format": "kiln-np-inspect/1",
        "file": opened.path,
        "offset": info.offset,
        "file_bytes": opened.stat.st_size,
        "trailing_bytes": opened.trailing,
        "layout": layout_json(info.layout),
    }
    described: Description | None = None
    values = None
    row = info.element
    if isinstance(row, Layout):
        record = head | _opaque_summary(opened, args.first)
        values = _quantized(opened, args.first)
    else:
        with Progress(max(info.byte_length, 1), f"inspect {opened.path}") as bar:
            described = summarize(row, info.shape, _chunks(opened, bar.advance), args.first)
        record = head | described.to_dict()
    record["quantized"] = None if values is None else values[0].to_dict()
    if args.json:
        print_json(record)
        return 0
    if values is None:
        say(_inspect_text(record, described, args.first))
    else:
        say(_quantized_text(record, *values, hex_blocks=args.hex))
    return 0


_WIDTH = 100
"""Columns a line of ``inspect``'s quantized summaries keeps within."""


def _part_rows(
    label: str, d: Description, head: str | None = None, stored: str | None = None
) -> list[str]:
    """One part of a quantized tensor (its values, a scale field, a stored part):
    a heading, where it is ``stored``, its counts and statistics, then ``head``
    (the corners of the values) or its first elements."""
    rows = dict(d.rows())
    lines = [label] if stored is None else [label, f"  {'stored at':<17} {stored}"]
    lines += [f"  {k:<17} {rows[k]}" for k in ("nan / inf / zero", "min / max", "mean / std")]
    if head is not None:
        lines.append(head)
    elif d.first.size:
        first = f"  {'first':<17} {rows['first']}"
        if len(first) > _WIDTH:  # as many as fit, then "..."
            first = first[: first.rindex(" ", 0, _WIDTH - 3)] + " ..."
        lines.append(first)
    return lines


def _hex_lines(label: str, data: bytes, size: int) -> list[str]:
    """``data`` in hex, ``size`` bytes (a block) at a time, 32 bytes a line."""
    lines = [label]
    for start in range(0, len(data), size):
        piece = data[start : start + size].hex()
        chunks = [piece[i : i + 64] for i in range(0, len(piece), 64)] or [""]
        lines.append(f"  {start // size:>4}  {chunks[0]}")
        lines += [f"        {c}" for c in chunks[1:]]
    return lines


def _quantized_text(
    record: dict[str, Any], q: QuantizedDescription, corners: Any, *, hex_blocks: bool
) -> str:
    """A GGML quantized payload: where it is, its blocks in brief, its values (a
    head as numpy prints the tensor) and each scale field; the blocks' bytes with
    ``--hex``."""
    lines = [
        f"file              {record['file']} ({record['file_bytes']} bytes; payload at offset "
        f"{record['offset']}, {record['trailing_bytes']} bytes after it)"
    ]
    lines += [f"{k:<17} {v}" for k, v in q.rows()]
    lines += _part_rows(
        "values (float32, as ggml dequantizes them):", q.values, corners_text(corners)
    )
    for name, d in q.scales.items():
        lines += _part_rows(f"scale {name} ({d.count} {d.dtype}, shape {shape_text(d.shape)}):", d)
    size = q.layout.block_size
    if not hex_blocks:
        lines.append(
            f"{'blocks':<17} {q.blocks} of {size} bytes (--hex shows the first "
            f"{len(record['first_bits'])} in hex)"
        )
        return "\n".join(lines)
    head = bytes.fromhex("".join(record["first_bits"]))
    label = (
        f"first blocks      {len(record['first_bits'])} of {q.blocks}, {size} bytes each, in hex:"
    )
    return "\n".join(lines + _hex_lines(label, head, size))


_HEX_BYTES = 64
"""Bytes of each stored part ``inspect --hex`` shows of a logical weight."""


def _inspect_logical(args: argparse.Namespace, t: LogicalTensor) -> int:
    """``inspect --tensor NAME`` of a weight a quantization scheme stores as several
    tensors: its values (all read, a bounded run of rows at a time; the head as
    numpy prints the tensor), then each stored part as stored."""
    values = describe(t, first=args.first)
    described: list[tuple[str, WeightTensor, Description, bytes]] = []
    for role, part in t.parts.items():
        d = describe(part, first=args.first)
        assert isinstance(d, Description)  # a scheme's parts are plain tensors
        described.append((role, part, d, bytes(memoryview(part.payload().data)[:_HEX_BYTES])))
    record = {
        "format": "kiln-np-inspect-logical/1",
        "tensor": t.name,
        "scheme": t.scheme,
        "shape": list(t.shape),
        "dtype": values.dtype.name,
        "values": values.to_dict(),
        "parts": [
            {
                "role": role,
                "name": part.name,
                "file": part.path,
                "offset": None if part.path is None else part.offset,
                "stored": part.format_dtype,
                "code": part.code,
                "shape": list(part.info.shape),
                "byte_length": part.byte_length,
                "description": d.to_dict(),
                "first_bytes": head.hex(),
            }
            for role, part, d, head in described
        ],
    }
    if args.json:
        print_json(record)
        return 0
    bits = f" ({8 * t.byte_length / values.count:.4g} bits per element)" if values.count else ""
    lines = [
        f"tensor            {printable(t.name)}: a {t.scheme} weight stored as {len(described)} "
        "tensors "
        f"({', '.join(t.parts)})",
        f"shape             {shape_text(t.shape)} ({values.count} elements)",
        f"payload           {t.byte_length} bytes in its parts{bits}",
    ]
    label = f"values ({values.dtype.name}, as the scheme's reference computes them):"
    lines += _part_rows(label, values, corners_text(logical_corners(t)))
    for role, part, d, head in described:
        where = "memory" if part.path is None else f"offset {part.offset} of {printable(part.path)}"
        lines += _part_rows(
            f"part {role} ({printable(part.name)}: {part.format_dtype} "
            f"{shape_text(part.info.shape)}, {part.byte_length} bytes):",
            d,
            stored=where,
        )
        if args.hex:
            lines += _hex_lines(f"  first {len(head)} bytes, in hex:", head, max(len(head), 1))
    if not args.hex:
        lines.append(f"{'bytes':<17} --hex shows the first {_HEX_BYTES} of each part in hex")
    say("\n".join(lines))
    return 0


# -- the commands ---------------------------------------------------------------------


def add_encode(sub: Any) -> None:
    """The ``encode`` command."""
    parser = subparser(
        sub,
        "encode",
        "write a .npy array as a Kiln payload",
        "Encode a .npy array as Kiln payload bytes; print code, dtype, shape, byte length. "
        "A .npy of an ml_dtypes type stores void 'V1'/'V2' elements: --code says which type.",
        ["kiln-np encode weights.npy weights.kiln", "kiln-np encode w_bf16.npy w.kiln --code bf16"],
    )
    parser.add_argument("input", metavar="IN.npy")
    parser.add_argument("output", metavar="OUT")
    parser.add_argument("--code", help="dtype code or name; required for void (ml_dtypes) .npy")
    json_flag(parser)
    parser.set_defaults(run=_cmd_encode)


def add_decode(sub: Any) -> None:
    """The ``decode`` command."""
    parser = subparser(
        sub,
        "decode",
        "write a Kiln payload as a .npy array",
        "Decode Kiln payload bytes into a .npy file (ml_dtypes types are stored as void "
        "'V1'/'V2' elements, as numpy's format does).  The payload runs from --offset to "
        "the end of the file, exactly byte_length bytes, unless --embedded says it is part "
        "of a larger file.",
        [
            "kiln-np decode w.kiln --code bf16 --shape 3,4 w.npy",
            "kiln-np decode blob.bin --code 4100 --layout q4_k:144 --shape 10 --offset 64 "
            "--embedded q.npy",
        ],
    )
    payload_args(parser)
    parser.add_argument("output", metavar="OUT.npy")
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="the payload is embedded in a larger file: bytes after it are allowed",
    )
    json_flag(parser)
    parser.set_defaults(run=_cmd_decode)


def add_inspect(sub: Any) -> None:
    """The ``inspect`` command."""
    parser = subparser(
        sub,
        "inspect",
        "summarize a Kiln payload file",
        "Read a payload once, in bounded chunks, and summarize it: counts, min/max/mean, "
        "first elements, and for codes of 8 bits or fewer the exact histogram of bit "
        "patterns.  Bytes after the payload are allowed and reported.",
        [
            "kiln-np inspect w.kiln --code e2m1 --shape 4096,4096",
            "kiln-np inspect w.kiln --code f8e4m3 --shape 1024 --json",
            "kiln-np inspect model.safetensors --tensor model.embed_tokens.weight",
        ],
    )
    payload_args(parser, required=False)
    parser.add_argument(
        "--tensor",
        metavar="NAME",
        help="inspect this tensor of a weight file IN (safetensors, GGUF, a Kiln directory, "
        "...) instead of --code/--shape",
    )
    parser.add_argument(
        "--first", type=parse_first, default=8, help="leading elements shown (8; 0 for none)"
    )
    parser.add_argument(
        "--hex",
        action="store_true",
        help="a quantized tensor's raw bytes too (its first blocks, or the first bytes of "
        "each stored part), after its values and scales",
    )
    parts_flag(parser)
    json_flag(parser)
    parser.set_defaults(run=_cmd_inspect)
