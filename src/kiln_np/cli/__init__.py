"""The ``kiln-np`` command line.

Every error is one line on stderr, ``kiln-np: KIND: message``, with exit
status 2: ``TYPE``, ``LENGTH`` and ``SHAPE`` are :class:`KilnError` kinds,
``FILE`` is a file that cannot be read or written (or an output that is one
of the command's inputs), ``USAGE`` a malformed command line.  A golden case
that fails exits 1.  ``--json`` output is documented in ``docs/cli.md``; a
progress bar is drawn on stderr only when it is a terminal.

Each command is one ``_cmd_<name>(args)`` function and one ``_add_<name>``
subparser function, registered in :data:`_COMMANDS`.  Commands describe a
payload with :func:`~kiln_np._payload.payload_info` and never compute a byte
length themselves; they read whole files with ``readinto`` (a file that
shrinks while it is read is a clean LENGTH error, not a SIGBUS) and write
through :func:`~kiln_np._files.io.replacing`, never over a file they read.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple, NoReturn, TextIO

import numpy as np

from kiln_np._codec import decode
from kiln_np._core.checks import U8, check_offset, check_regular_file, short_or_long, show_int
from kiln_np._core.errors import ErrorKind, KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, DType, Layout, as_code, code_label, code_range, row_for_dtype
from kiln_np._explore import Description, summarize
from kiln_np._explore.golden import CaseResult, format_table, load_cases, run_case
from kiln_np._files.io import replacing
from kiln_np._files.npy import npy_header, read_npy_header
from kiln_np._files.payload import save_payload
from kiln_np._kernels.nibbles import check_padding
from kiln_np._version import __version__
from kiln_np._weights.tensors import Weights, WeightTensor
from kiln_np.formats import open_weights, save_weights

__all__ = ["main", "run"]


class _CliError(Exception):
    """An error that is not the data's: ``FILE`` (cannot read or write) or ``USAGE``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _file_error(action: str, path: object, exc: OSError) -> _CliError:
    return _CliError("FILE", f"cannot {action} {str(path)!r}: {exc.strerror or exc}")


# -- argument parsing -----------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other error, instead of argparse's usage block.
        print(f"kiln-np: USAGE: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


_SHAPE_HELP = "comma-separated non-negative integers such as 3,4, or () for a scalar"
_NUMBER = r"[+-]?(?:0x[0-9a-f]+|[0-9]+)"
_MAX_DIGITS = 40  # far past any valid value; longer numbers are shown by their length


def _number(token: str, option: str, kind: ErrorKind) -> int:
    """A decimal or ``0x`` number from the command line; a number too long to
    be valid is refused here, by its length (Python refuses to convert past
    4300 digits, and a message should not hold them)."""
    digits = len(token.lstrip("+-"))
    if digits > _MAX_DIGITS:
        # Any value this long is out of range: say so with the option's own kind.
        raise KilnError(
            kind,
            f"{option} expects a number of at most {_MAX_DIGITS} digits, "
            f"found one of {digits} digits",
        )
    return int(token, 0 if "x" in token.lower() else 10)


def _parse_shape(text: str) -> tuple[int, ...]:
    stripped = text.strip()
    if stripped in {"()", ""}:
        return ()
    if not re.fullmatch(rf"{_NUMBER}(\s*,\s*{_NUMBER})*", stripped, re.I):
        raise KilnError("SHAPE", f"--shape expects {_SHAPE_HELP}, got {_shown(text)}")
    return tuple(_number(d.strip(), "--shape", "SHAPE") for d in stripped.split(","))


def _parse_code(text: str) -> int:
    """``--code``: a number (``2``, ``0x12``) or a name exactly as the Python
    API takes it (``bf16``, ``BF16``): one resolver for both."""
    if re.fullmatch(_NUMBER, text.strip(), re.I):
        return _number(text.strip(), "--code", "TYPE")
    try:
        return as_code(text)
    except KilnError as exc:
        raise exc.prefixed("--code: ") from None


def _parse_layout(text: str) -> Layout:
    name, sep, size = text.rpartition(":")
    if not sep or not name or not re.fullmatch(_NUMBER, size.strip(), re.I):
        raise KilnError(
            "TYPE", f"--layout expects NAME:BLOCK_SIZE such as q4_k:144, got {_shown(text)}"
        )
    block_size = _number(size.strip(), "--layout", "TYPE")
    try:
        return Layout(name, block_size)
    except KilnError as exc:
        raise exc.prefixed("--layout: ") from None


def _parse_offset(text: str) -> int:
    word = text.strip()
    if not re.fullmatch(_NUMBER, word, re.I):
        raise KilnError(
            "TYPE", f"--offset expects a byte offset >= 0 (such as 64 or 0x40), got {_shown(text)}"
        )
    offset = _number(word, "--offset", "TYPE")
    try:
        return check_offset(offset)
    except KilnError as exc:
        raise exc.prefixed("--offset: ") from None


def _parse_first(text: str) -> int:
    """``--first``: how many leading elements ``inspect`` shows, 0 or more."""
    word = text.strip()
    if not re.fullmatch(r"\+?[0-9]{1,18}", word):
        raise argparse.ArgumentTypeError(
            f"expected a count of elements >= 0 (at most 18 digits), got {_shown(text)}"
        )
    return int(word)


def _shown(text: str) -> str:
    """A command-line value in a message: its repr, cut to 60 characters."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _describe_payload(args: argparse.Namespace) -> PayloadInfo:
    """The checked description of ``--code/--shape/--layout/--offset``."""
    code = _parse_code(args.code)
    layout = None if args.layout is None else _parse_layout(args.layout)
    if layout is None and code_range(code) == "opaque":
        raise KilnError(
            "TYPE", f"{code_label(code)} needs --layout NAME:BLOCK_SIZE (for example q4_k:144)"
        )
    shape = _parse_shape(args.shape)
    offset = _parse_offset(args.offset)
    return payload_info(code, shape, layout).with_offset(offset)


# -- progress -------------------------------------------------------------------------


class _Progress:
    """A one-line progress bar on ``stream``, drawn only when it is a terminal."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty()
        self.total = total
        self.label = label
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

    def __enter__(self) -> _Progress:
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


# -- input files ----------------------------------------------------------------------

_READ_BYTES = 16 << 20  # payload bytes read (and decoded) at a time


def _stat_input(path: str) -> os.stat_result:
    """The input's ``stat``; a FIFO or device is TYPE before anything opens it
    (opening a FIFO for reading blocks until a writer comes)."""
    try:
        return check_regular_file(path)
    except OSError as exc:
        raise _file_error("read", path, exc) from exc


class _Input(NamedTuple):
    """A payload file checked by ``decode``/``inspect``, not yet read."""

    path: str
    info: PayloadInfo
    stat: os.stat_result

    @property
    def trailing(self) -> int:
        return self.stat.st_size - self.info.offset - self.info.byte_length

    def where(self) -> str:
        return f"{self.path!r} at offset {self.info.offset}: "


def _open_input(args: argparse.Namespace, *, exact: bool) -> _Input:
    """Describe the payload and check the file holds it: exactly ``byte_length``
    bytes from ``--offset`` to its end, or at least that many when ``exact`` is
    off (a payload embedded in a larger file)."""
    info = _describe_payload(args)
    st = _stat_input(args.input)
    found = max(st.st_size - info.offset, 0)
    opened = _Input(args.input, info, st)
    if found < info.byte_length or (exact and found != info.byte_length):
        raise info.length_error(found, opened.where())
    return opened


def _open_read(path: str) -> io.FileIO:
    try:
        # Unbuffered: readinto fills the chunk buffer straight from the file, and
        # what it returns is what the file holds now.
        return open(path, "rb", buffering=0)
    except OSError as exc:
        raise _file_error("read", path, exc) from exc


def _read_into(f: io.FileIO, view: memoryview) -> int:
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def _reading(whole: PayloadInfo) -> PayloadInfo:
    """What :func:`_chunks` reads the payload as: itself, or for an opaque code
    its bytes (blocks Kiln does not interpret), so that a chunk stays bounded
    whatever the block size."""
    return payload_info(Code.U8, (whole.byte_length,)) if whole.layout else whole


def _chunks(opened: _Input) -> Iterator[np.ndarray]:
    """Decoded 1-D chunks of the payload (an opaque one as its bytes), in order,
    each checked as it is read; :func:`_reading` says how many elements in
    all.  A chunk is a view of a reused buffer: use it before asking for the
    next."""
    whole = opened.info
    info = _reading(whole)
    element = info.element
    step = max(1, 8 * _READ_BYTES // element.bits)
    if element.packed:
        step = max(2, step - step % 2)  # chunks start on a byte: an even element count
    buf = bytearray(element.byte_length(min(step, info.count)))
    with _open_read(opened.path) as f:
        check_regular_file(opened.path, f.fileno())  # in case it was swapped since
        f.seek(whole.offset)
        for start in range(0, info.count, step):
            part = payload_info(info.code, (min(step, info.count - start),), info.layout)
            view = memoryview(buf)[: part.byte_length]
            try:
                got = _read_into(f, view)
            except OSError as exc:
                raise _file_error("read", opened.path, exc) from exc
            if got < part.byte_length:
                found = element.byte_length(start) + got
                raise whole.length_error(found, f"{opened.where()}the file shrank while read: ")
            src = np.frombuffer(view, U8)
            try:
                if element.packed and start + part.count == info.count:
                    _check_padding(src, info)
                chunk = decode(part, src)
            except KilnError as exc:
                raise _in_payload(exc, part, opened, start) from None
            yield chunk


def _check_padding(last_chunk: np.ndarray, info: PayloadInfo) -> None:
    """The padding nibble, checked in the whole payload's terms (its count, the
    byte offset of its last byte), not the last chunk's: the check reads only
    the last byte and the size, so a zero-stride view of that byte stands in
    for the payload."""
    whole = np.lib.stride_tricks.as_strided(last_chunk[-1:], (info.byte_length,), (0,))
    check_padding(whole, info.count, info.context)


def _in_payload(exc: KilnError, part: PayloadInfo, opened: _Input, start: int) -> KilnError:
    """A chunk's content error, re-aimed at the whole payload: its context and
    the element index in the payload, not in the chunk."""
    shifted = exc.shifted(start)
    rest = shifted.message.removeprefix(part.context).removeprefix(opened.info.context)
    info = opened.info
    return KilnError(
        shifted.kind,
        f"{opened.where()}{info.context}{rest}",
        code=int(info.code),
        shape=info.shape,
        expected=shifted.expected,
        found=shifted.found,
        index=shifted.index,
    )


# -- .npy files -----------------------------------------------------------------------


def _storage_code(path: str, dtype: np.dtype[Any], code: int | None) -> int:
    """The Kiln code of the elements a .npy stores: its dtype's own, or
    ``--code`` for the void elements numpy's format stores ml_dtypes types as."""
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
    st = _stat_input(path)
    try:
        with open(path, "rb") as f:
            check_regular_file(path, f.fileno())
            header = read_npy_header(f)
    except OSError as exc:
        raise _file_error("read", path, exc) from exc
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
        arr = np.memmap(path, dtype, "r", offset=header.start, shape=info.shape, order=order)
    except OSError as exc:
        raise _file_error("map", path, exc) from exc
    return _Npy(arr, st)


# -- output files ---------------------------------------------------------------------


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _refuse_overwrite(
    output: str, inputs: dict[tuple[int, int], str], *, where: str | None = None
) -> None:
    """FILE when ``output`` (through symlinks, as writing it would go) is one of
    the ``inputs`` (device and inode: another name or a hard link counts).
    ``where`` is the path to look at, when it differs from the one to show."""
    try:
        st = os.stat(output if where is None else where)
    except OSError:
        return  # nothing there yet (or unreadable: writing will say so)
    source = inputs.get(_identity(st))
    if source is not None:
        raise _CliError(
            "FILE",
            f"cannot write {output!r}: it is the input file {source!r} (same device and inode), "
            "which the command reads; choose another output",
        )


def _write_file(path: str, pieces: Iterable[Any]) -> None:
    """Write the buffers to ``path`` crash-safely (a temporary sibling renamed
    into place, permissions and symlinks kept: :func:`kiln_np._files.io.replacing`)."""
    try:
        with replacing(path) as (_, f):
            for piece in pieces:
                f.write(piece)
    except OSError as exc:
        raise _file_error("write", path, exc) from exc


# -- output ---------------------------------------------------------------------------


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) or "()"


def _layout_json(layout: Layout | None) -> dict[str, Any] | None:
    return None if layout is None else {"name": layout.name, "block_size": layout.block_size}


def _emit(args: argparse.Namespace, record: dict[str, Any], text: str) -> None:
    if args.json:
        print(json.dumps(record, allow_nan=False))
    else:
        print(text)


def _conversion(fmt: str, src: str, out: str, info: PayloadInfo) -> tuple[dict[str, Any], str]:
    row = info.element if isinstance(info.element, DType) else None
    record = {
        "format": fmt,
        "input": src,
        "output": out,
        "code": int(info.code),
        "name": None if row is None else row.name,
        "dtype": None if row is None else str(row.dtype),
        "layout": _layout_json(info.layout),
        "shape": list(info.shape),
        "byte_length": info.byte_length,
    }
    layout = info.layout
    what = f"layout {layout.name}:{layout.block_size}" if layout else f"dtype {record['dtype']}"
    text = (
        f"{out}: {code_label(int(info.code))}, {what}, shape {_shape_text(info.shape)}, "
        f"{info.byte_length} payload bytes"
    )
    return record, text


# -- commands -------------------------------------------------------------------------


def _case_json(result: CaseResult) -> dict[str, Any]:
    case = result.case
    return {
        "file": case.file,
        "name": case.name,
        "code": case.code,
        "dtype": result.dtype_name,
        "shape": list(case.shape),
        "ok": result.ok,
        "detail": result.detail,
    }


def _cmd_golden(args: argparse.Namespace) -> int:
    try:
        cases = load_cases(args.dir)
    except OSError as exc:
        raise _file_error("read", args.dir, exc) from exc
    except ValueError as exc:
        print(f"kiln-np: golden: {exc}", file=sys.stderr)
        return 2
    if not cases:
        print(f"kiln-np: golden: no *.json case files in {args.dir}", file=sys.stderr)
        return 2
    results = [run_case(case) for case in cases]
    failed = sum(not r.ok for r in results)
    if args.json:
        record = {
            "format": "kiln-np-golden/1",
            "passed": len(results) - failed,
            "failed": failed,
            "cases": [_case_json(r) for r in results],
        }
        print(json.dumps(record, allow_nan=False))
    else:
        print(format_table(results))
        print(f"\n{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _cmd_encode(args: argparse.Namespace) -> int:
    code = None if args.code is None else _parse_code(args.code)
    npy = _load_npy(args.input, code)
    _refuse_overwrite(args.output, {_identity(npy.stat): args.input})
    try:
        # Streamed in bounded chunks; a dtype other than --code's is TYPE (never cast).
        written = save_payload(args.output, npy.array, code=code)
    except OSError as exc:
        raise _file_error("write", args.output, exc) from exc
    record, text = _conversion("kiln-np-encode/1", args.input, args.output, written)
    _emit(args, record, text)
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    opened = _open_input(args, exact=not args.embedded)
    _refuse_overwrite(args.output, {_identity(opened.stat): args.input})
    info = opened.info
    with _Progress(max(_reading(info).count, 1), f"decode {args.input}") as bar:

        def pieces() -> Iterator[Any]:
            yield npy_header(info.dtype, info.decoded_shape)
            for chunk in _chunks(opened):
                bar.advance(chunk.size)
                yield chunk.reshape(-1).view(U8).data

        # A bad bool byte or padding nibble found mid-way leaves no output file.
        _write_file(args.output, pieces())
    record, text = _conversion("kiln-np-decode/1", args.input, args.output, info)
    _emit(args, record, text)
    return 0


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


_MOST_COMMON = 16  # histogram rows shown for a 16-bit type


def _inspect_text(record: dict[str, Any], described: Description | None, first: int) -> str:
    """The text ``inspect`` prints: the file, then :meth:`Description.rows`."""
    lines = [
        f"file              {record['file']} ({record['file_bytes']} bytes; payload at offset "
        f"{record['offset']}, {record['trailing_bytes']} bytes after it)"
    ]
    if described is None:
        layout = record["layout"]
        lines += [
            f"code              {code_label(record['code'])}",
            f"layout            {layout['name']} ({layout['block_size']}-byte blocks)",
            f"shape             {_shape_text(record['shape'])} ({record['count']} blocks)",
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
        opened = _tensor_input(args)
    elif args.code is None or args.shape is None:
        raise _CliError(
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
        "layout": _layout_json(info.layout),
    }
    described: Description | None = None
    row = info.element
    if isinstance(row, Layout):
        record = head | _opaque_summary(opened, args.first)
    else:
        with _Progress(max(_reading(info).count, 1), f"inspect {opened.path}") as bar:

            def chunks() -> Iterator[np.ndarray]:
                for chunk in _chunks(opened):
                    bar.advance(chunk.size)
                    yield chunk

            described = summarize(row, info.shape, chunks(), args.first)
        record = head | described.to_dict()
    if args.json:
        print(json.dumps(record, allow_nan=False))
    else:
        print(_inspect_text(record, described, args.first))
    return 0


def _safe_name(index: int, name: str | bytes) -> str:
    text = name if isinstance(name, str) else name.decode("utf-8", "replace")
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "tensor"
    return f"{index:04d}_{cleaned[:100]}.kiln"


def _onnx_inputs(model_path: str, model: Any, base_dir: str) -> dict[tuple[int, int], str]:
    """Every file the export reads: the model and its external-data files."""
    inputs = {_identity(_stat_input(model_path)): model_path}
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key != "location":
                continue
            location = entry.value if isinstance(entry.value, str) else os.fsdecode(entry.value)
            path = os.path.join(base_dir, location)
            try:
                inputs.setdefault(_identity(os.stat(path)), path)
            except (OSError, ValueError):
                continue  # missing or malformed: model_to_kiln names it when it gets there
    return inputs


def _cmd_onnx(args: argparse.Namespace) -> int:
    try:
        import onnx
    except ImportError as exc:
        raise _CliError(
            "USAGE", "the onnx subcommand needs onnx: pip install 'kiln-np[onnx]'"
        ) from exc
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    from kiln_np.onnx import model_to_kiln

    model_path = args.model
    _stat_input(model_path)
    try:
        with open(model_path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise _file_error("read", model_path, exc) from exc
    try:
        # Always the binary parser: onnx.load would pick a text parser by the
        # file's extension (.json, .textproto) and let its ParseError escape.
        # External data stays on disk: model_to_kiln maps it tensor by tensor.
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise KilnError("TYPE", f"{model_path!r}: expected an ONNX model: {exc}") from exc
    base_dir = os.path.dirname(os.path.abspath(model_path))
    out = Path(args.outdir)
    names = [_safe_name(i, t.name) for i, t in enumerate(model.graph.initializer)]
    inputs = _onnx_inputs(model_path, model, base_dir)
    # The folder may not exist yet: check where its files will be once it does
    # (mkdir makes real folders, so "new/.." will be the folder "." is).
    will_be = os.path.realpath(out)
    for name in [*names, "manifest.json"]:
        _refuse_overwrite(str(out / name), inputs, where=os.path.join(will_be, name))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _file_error("create", out.parent, exc) from exc
    tensors = dict(model_to_kiln(model, base_dir))  # external data mapped, not read
    if len(tensors) != len(names):
        raise KilnError(
            "TYPE",
            f"{model_path!r}: expected initializers with distinct names, found "
            f"{len(names)} initializers and {len(tensors)} names",
        )
    total_bytes = sum(p.byte_length for p in tensors.values())
    with _Progress(max(total_bytes, 1), f"onnx {model_path}") as bar:
        try:
            # The Kiln payload directory: built beside OUTDIR, renamed into place.
            save_weights(
                out, tensors, format="kiln", metadata={"model": model_path}, progress=bar.advance
            )
        except OSError as exc:
            raise _file_error("write", out, exc) from exc
        bar.advance(bar.total - bar.done)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    _emit(
        args,
        manifest,
        f"{out}: {len(tensors)} payload files, {total_bytes} payload bytes, manifest.json",
    )
    return 0


# -- weight files ---------------------------------------------------------------------


def _open_weights(path: str) -> Weights:
    try:
        return open_weights(path)
    except OSError as exc:
        # The user's own spelling of the path, or the shard the error is about.
        named = path if exc.filename in (None, os.path.abspath(path)) else exc.filename
        raise _file_error("read", named, exc) from exc


def _parse_size(text: str) -> int:
    if not re.fullmatch(_NUMBER, text.strip(), re.IGNORECASE):
        raise KilnError(
            "TYPE",
            f"--max-shard-size expects a number of bytes such as 5000000000 or 0x40, "
            f"got {_shown(text)}",
        )
    return _number(text.strip(), "--max-shard-size", "TYPE")


def _weights_inputs(weights: Weights) -> dict[tuple[int, int], str]:
    """Every file a conversion reads: the tensors' files and what was opened."""
    paths = dict.fromkeys([weights.path, *(t.path for t in weights.values() if t.path)])
    stats = {path: _stat_or_none(path) for path in paths}
    return {_identity(st): path for path, st in stats.items() if st is not None}


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None  # gone meanwhile: reading it will say so


def _refuse_directory_over_inputs(output: str, inputs: dict[tuple[int, int], str]) -> None:
    """FILE when ``output`` is a directory that holds a file the command reads
    (writing a directory replaces everything in it)."""
    for path in inputs.values():
        parent = path if os.path.isdir(path) else os.path.dirname(path)
        try:
            same = os.path.samefile(parent, output)
        except OSError:
            continue
        if same:
            raise _CliError(
                "FILE",
                f"cannot write {output!r}: it holds the input {path!r}, which the command "
                "reads; choose another output",
            )


def _tensor_record(t: WeightTensor) -> dict[str, Any]:
    info = t.info
    return {
        "name": t.name,
        "format_dtype": t.format_dtype,
        "code": int(info.code),
        "kiln": info.layout.name if info.layout else info.element.name,
        "layout": _layout_json(info.layout),
        "shape": list(info.shape),
        "byte_length": info.byte_length,
    }


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {len(widths) - 1}  # the byte counts
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )


def _cmd_ls(args: argparse.Namespace) -> int:
    with _open_weights(args.path) as weights:
        tensors = [_tensor_record(t) for t in weights.values()]
        record = {
            "format": "kiln-np-ls/1",
            "path": args.path,
            "weights_format": weights.format,
            "byte_length": weights.byte_length,
            "tensors": tensors,
        }
    if args.json:
        print(json.dumps(record, allow_nan=False))
        return 0
    rows = [["name", "dtype", "kiln", "shape", "bytes"]]
    rows += [
        [t["name"], t["format_dtype"], t["kiln"], _shape_text(t["shape"]), str(t["byte_length"])]
        for t in tensors
    ]
    print(_table(rows))
    total, fmt = record["byte_length"], record["weights_format"]
    print(f"{len(tensors)} tensors, {total} payload bytes ({fmt})")
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


def _cmd_convert(args: argparse.Namespace) -> int:
    limit = None if args.max_shard_size is None else _parse_size(args.max_shard_size)
    with _open_weights(args.src) as weights:
        inputs = _weights_inputs(weights)
        _refuse_overwrite(args.dst, inputs)
        _refuse_directory_over_inputs(args.dst, inputs)
        metadata = _carried_metadata(weights, args.to)
        with _Progress(max(weights.byte_length, 1), f"convert {args.src}") as bar:
            try:
                save_weights(
                    args.dst,
                    weights,
                    format=args.to,
                    metadata=metadata,
                    max_shard_size=limit,
                    progress=bar.advance,
                )
            except OSError as exc:
                raise _file_error("write", args.dst, exc) from exc
            bar.advance(bar.total - bar.done)
        record = {
            "format": "kiln-np-convert/1",
            "input": args.src,
            "output": args.dst,
            "from": weights.format,
            "to": args.to,
            "tensors": len(weights),
            "byte_length": weights.byte_length,
            "metadata": "carried" if metadata is not None else "dropped",
        }
    dropped = (
        ""
        if metadata is not None
        else f"; {record['from']} metadata not carried ({args.to} cannot hold it)"
    )
    _emit(
        args,
        record,
        f"{args.dst}: {record['tensors']} tensors, {record['byte_length']} payload bytes, "
        f"{record['from']} -> {args.to}{dropped}",
    )
    return 0


def _tensor_input(args: argparse.Namespace) -> _Input:
    """``inspect PATH --tensor NAME``: the tensor's payload in its file."""
    options = (("--code", args.code), ("--shape", args.shape), ("--layout", args.layout))
    given = [option for option, value in options if value is not None]
    if given or args.offset != "0":
        dropped = ", ".join(given) or "--offset"
        raise _CliError(
            "USAGE", f"--tensor takes the description from the weight file: drop {dropped}"
        )
    with _open_weights(args.input) as weights:
        tensor = weights.get(args.tensor)
        if tensor is None:
            names = ", ".join(repr(n) for n in list(weights)[:5])
            raise KilnError(
                "TYPE",
                f"{args.input!r}: expected a tensor named {args.tensor!r}, found none "
                f"(it holds {len(weights)}: {names}{', ...' if len(weights) > 5 else ''})",
            )
        if tensor.path is None:
            raise KilnError(
                "TYPE",
                f"{args.input!r}: tensor {args.tensor!r} is held inside the model, not at an "
                "offset of a file: expected a tensor stored in a file (export the model with "
                "kiln-np convert MODEL DIR --to kiln, then inspect DIR --tensor NAME)",
            )
        return _Input(tensor.path, tensor.info, _stat_input(tensor.path))


# -- parser ---------------------------------------------------------------------------


def _subparser(
    sub: Any, name: str, help_text: str, description: str, examples: Sequence[str]
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_text,
        description=textwrap.fill(description, 79),
        epilog="example:\n" + "\n".join(f"  {e}" for e in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _json_flag(parser: argparse.ArgumentParser, help_text: str = "print one JSON object") -> None:
    parser.add_argument("--json", action="store_true", help=help_text)


def _payload_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("input", metavar="IN", help="the payload file")
    parser.add_argument(
        "--code",
        required=required,
        help="dtype code: a number (2, 0x12) or a name (f32, bf16, BF16, e2m1, ...)",
    )
    parser.add_argument("--shape", required=required, help=f"element shape: {_SHAPE_HELP}")
    parser.add_argument(
        "--offset", default="0", help="payload start in the file, 64 or 0x40 (default 0)"
    )
    parser.add_argument(
        "--layout", help="NAME:BLOCK_SIZE, required with an opaque code (4096-32767)"
    )


def _add_golden(sub: Any) -> None:
    parser = _subparser(
        sub,
        "golden",
        "run the golden cases",
        "Run golden case files: decode every payload, encode every valid case.",
        [
            "kiln-np golden            (the cases shipped with kiln_np)",
            "kiln-np golden ./vectors  (another implementation's case files)",
            "kiln-np golden --json",
        ],
    )
    parser.add_argument("dir", nargs="?", default=None, help="a directory of *.json case files")
    _json_flag(parser, "print one JSON object: counts and every case's result")
    parser.set_defaults(run=_cmd_golden)


def _add_encode(sub: Any) -> None:
    parser = _subparser(
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
    _json_flag(parser)
    parser.set_defaults(run=_cmd_encode)


def _add_decode(sub: Any) -> None:
    parser = _subparser(
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
    _payload_args(parser)
    parser.add_argument("output", metavar="OUT.npy")
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="the payload is embedded in a larger file: bytes after it are allowed",
    )
    _json_flag(parser)
    parser.set_defaults(run=_cmd_decode)


def _add_inspect(sub: Any) -> None:
    parser = _subparser(
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
    _payload_args(parser, required=False)
    parser.add_argument(
        "--tensor",
        metavar="NAME",
        help="inspect this tensor of a weight file IN (safetensors, GGUF, a Kiln directory, "
        "...) instead of --code/--shape",
    )
    parser.add_argument(
        "--first", type=_parse_first, default=8, help="leading elements shown (8; 0 for none)"
    )
    _json_flag(parser)
    parser.set_defaults(run=_cmd_inspect)


def _add_onnx(sub: Any) -> None:
    parser = _subparser(
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
    _json_flag(parser, "print the manifest")
    parser.set_defaults(run=_cmd_onnx)


def _add_ls(sub: Any) -> None:
    parser = _subparser(
        sub,
        "ls",
        "list the tensors of a weight file",
        "List the tensors of a weight file (safetensors, a sharded checkpoint, GGUF, ONNX, a "
        "Kiln payload directory): name, the format's dtype, the Kiln code or layout, shape, "
        "payload bytes.  Only headers are read.",
        ["kiln-np ls model.safetensors", "kiln-np ls llama.gguf --json"],
    )
    parser.add_argument("path", metavar="PATH")
    _json_flag(parser, "print one JSON object, a row per tensor")
    parser.set_defaults(run=_cmd_ls)


def _add_convert(sub: Any) -> None:
    parser = _subparser(
        sub,
        "convert",
        "write a weight file in another format",
        "Write every tensor of a weight file as safetensors, GGUF or a Kiln payload "
        "directory, bit for bit, streamed; a tensor the target cannot hold is an error "
        "before anything is written.  Metadata goes along when the target can hold it.",
        [
            "kiln-np convert model.safetensors weights/ --to kiln",
            "kiln-np convert model.gguf model.safetensors --to safetensors",
            "kiln-np convert big.safetensors ckpt/ --to safetensors --max-shard-size 5000000000",
        ],
    )
    parser.add_argument("src", metavar="SRC")
    parser.add_argument("dst", metavar="DST")
    parser.add_argument("--to", required=True, choices=["safetensors", "gguf", "kiln"])
    parser.add_argument(
        "--max-shard-size",
        metavar="BYTES",
        help="write shards (safetensors: DST is a directory with an index) or GGUF splits",
    )
    _json_flag(parser)
    parser.set_defaults(run=_cmd_convert)


_COMMANDS: list[Callable[[Any], None]] = [
    _add_golden,
    _add_encode,
    _add_decode,
    _add_inspect,
    _add_onnx,
    _add_ls,
    _add_convert,
]
"""One subparser function per command, in the order ``--help`` lists them."""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kiln-np",
        description="Kiln tensor payloads <-> numpy arrays, bit for bit.",
        epilog="Errors: one line 'kiln-np: KIND: message' on stderr, exit status 2. "
        "See docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"kiln-np {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def run(argv: Sequence[str]) -> int:
    """Run one command and return its exit status; errors propagate
    (:class:`KilnError` and the like), which :func:`main` prints as one line.

    A malformed command line exits (status 2) as argparse does.

    Examples
    --------
    >>> run(["golden"])  # doctest: +ELLIPSIS
    case  code  dtype ...
    0
    """
    args = _parser().parse_args(argv)
    status: int = args.run(args)
    return status


_UTF8 = frozenset({"utf-8", "utf8"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Examples
    --------
    >>> main(["golden", "--json"])  # doctest: +ELLIPSIS
    {"format": "kiln-np-golden/1", ...}
    0
    """
    if isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.encoding.lower() in _UTF8:
        # A path from argv may hold undecodable bytes (as surrogates): print them
        # back as the bytes they were, as ls does, instead of failing to encode.
        sys.stdout.reconfigure(errors="surrogateescape")
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except KilnError as exc:
        print(f"kiln-np: {exc}", file=sys.stderr)
        return 2
    except _CliError as exc:
        print(f"kiln-np: {exc.kind}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`kiln-np inspect ... | head`): end quietly, as a
        # command killed by SIGPIPE would, and keep Python's exit-time flush silent.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
