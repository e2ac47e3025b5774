"""The ``kiln-np`` command line.

Every error is one line on stderr, ``kiln-np: KIND: message``, with exit
status 2: ``TYPE``, ``LENGTH`` and ``SHAPE`` are :class:`KilnError` kinds,
``FILE`` is a file that cannot be read or written, ``USAGE`` a malformed
command line.  A golden case that fails exits 1.  ``--json`` output is
documented in ``docs/cli.md``; a progress bar is drawn on stderr only when it
is a terminal.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import os
import re
import struct
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, NoReturn, TextIO

import numpy as np

from ._codec import from_numpy
from ._errors import KilnError
from ._explore import Description, _flat_chunks, _summarize
from ._files import LazyPayload, _replacing, open_payload
from ._golden import format_table, load_cases, run_case
from ._table import (
    DTYPES,
    OPAQUE_MAX,
    OPAQUE_MIN,
    DType,
    Layout,
    _check_shape,
    _count,
    _payload_bytes,
    _resolve,
    code_kind,
    code_label,
    dtype_info,
)

__all__ = ["main"]

_U8 = np.dtype(np.uint8)


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


def _parse_shape(text: str) -> tuple[int, ...]:
    stripped = text.strip()
    if stripped in {"()", ""}:
        return ()
    if not re.fullmatch(r"-?\d+(\s*,\s*-?\d+)*", stripped):
        raise KilnError("SHAPE", f"--shape expects {_SHAPE_HELP}, got {text!r}")
    return _check_shape([int(d) for d in stripped.split(",")])


_CODE_NAMES = {r.name: r for r in DTYPES} | {r.dtype.name: r for r in DTYPES}


def _parse_code(text: str) -> int:
    word = text.strip().lower()
    if re.fullmatch(r"\d+|0x[0-9a-f]+", word):
        return int(word, 0)
    row = _CODE_NAMES.get(word)
    if row is None:
        raise KilnError(
            "TYPE",
            f"--code expects a code number (1-19, or {OPAQUE_MIN}-{OPAQUE_MAX} with --layout) "
            f"or a name such as f32, bf16, f8e4m3, e2m1, bfloat16; got {text!r}",
        )
    return int(row.code)


def _parse_layout(text: str) -> Layout:
    name, sep, size = text.rpartition(":")
    if not sep or not name or not size.isdigit():
        raise KilnError("TYPE", f"--layout expects NAME:BLOCK_SIZE such as q4_k:144, got {text!r}")
    return Layout(name, int(size))


def _parse_offset(text: str) -> int:
    if not text.strip().isdigit():
        raise KilnError("TYPE", f"--offset expects a byte offset >= 0, got {text!r}")
    return int(text)


def _resolve_args(code: int, layout: Layout | None) -> DType | Layout:
    if code_kind(code) == "opaque" and layout is None:
        raise KilnError(
            "TYPE", f"{code_label(code)} needs --layout NAME:BLOCK_SIZE (for example q4_k:144)"
        )
    return _resolve(code, layout)


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


# -- files ----------------------------------------------------------------------------


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise _file_error("read", path, exc) from exc


class _Opened(NamedTuple):
    """A payload file opened by ``decode``/``inspect``."""

    code: int
    kind: DType | Layout
    dims: tuple[int, ...]
    offset: int
    file_bytes: int
    payload: np.ndarray | LazyPayload  # flat: (count,) elements, or (count, block_size)

    @property
    def payload_bytes(self) -> int:
        return _payload_bytes(self.kind, _count(self.dims))

    def chunks(self) -> Iterator[np.ndarray]:
        """C-order 1-D chunks of the decoded payload, checked as they are read."""
        if isinstance(self.payload, LazyPayload):
            return (chunk.reshape(-1) for chunk in self.payload.iter_chunks())
        return _flat_chunks(self.payload)


def _open(args: argparse.Namespace) -> _Opened:
    """Parse the payload options and open the file without reading the payload."""
    code = _parse_code(args.code)
    layout = None if args.layout is None else _parse_layout(args.layout)
    kind = _resolve_args(code, layout)
    dims = _parse_shape(args.shape)
    offset = _parse_offset(args.offset)
    nbytes = _payload_bytes(kind, _count(dims))
    size = _file_size(args.input)
    if size < offset + nbytes:
        held = max(size - offset, 0)
        raise KilnError(
            "LENGTH",
            f"{args.input}: {code_label(code)} shape {dims}: expected {nbytes} bytes at offset "
            f"{offset}, found {held} (file of {size} bytes, short by {offset + nbytes - size})",
            code=code,
            shape=dims,
            expected=nbytes,
            found=held,
        )
    try:
        # Opened flat so that chunks stay bounded however long a row is.
        payload = open_payload(args.input, code, (_count(dims),), offset=offset, layout=layout)
    except OSError as exc:
        raise _file_error("map", args.input, exc) from exc
    return _Opened(code, kind, dims, offset, size, payload)


def _write_atomic(path: str, pieces: Iterable[Any]) -> None:
    """Write the buffers to ``path`` via a temporary sibling renamed into place
    (the mechanism of :func:`kiln_np.write_payload`), so no half file remains."""
    try:
        with _replacing(path, 0) as (_, f):
            for piece in pieces:
                f.write(piece)
    except OSError as exc:
        raise _file_error("write", path, exc) from exc


_NPY_KEYS = frozenset({"descr", "fortran_order", "shape"})
# ml_dtypes' float8_e5m2 says it is kind 'f', so np.save writes the descr '<f1',
# which numpy itself cannot load; like the void ones it is read as 'V1' + --code.
_ML_DTYPES_F1 = re.compile(r"[<>|=]f1")


def _read_npy_header(path: str) -> tuple[tuple[int, ...], bool, np.dtype[Any], int]:
    """Shape, Fortran order, dtype and data offset of a .npy file (format 1-3)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        short = version == (1, 0)
        (length,) = struct.unpack("<H" if short else "<I", f.read(2 if short else 4))
        text = f.read(length).decode("utf-8" if version >= (3, 0) else "latin-1")
        start = f.tell()
    header = ast.literal_eval(text)
    if not isinstance(header, dict) or set(header) != _NPY_KEYS:
        raise ValueError(f"expected a header dict with keys {sorted(_NPY_KEYS)}, found {text!r}")
    descr = header["descr"]
    if isinstance(descr, str) and _ML_DTYPES_F1.fullmatch(descr):
        dtype = np.dtype("V1")
    else:
        dtype = np.lib.format.descr_to_dtype(descr)
    return _check_shape(header["shape"]), bool(header["fortran_order"]), dtype, start


def _load_npy(path: str) -> np.ndarray:
    """Memory-map a .npy file (no pickles); LENGTH when its data is cut short."""
    size = _file_size(path)
    try:
        shape, fortran, dtype, start = _read_npy_header(path)
    except OSError as exc:
        raise _file_error("read", path, exc) from exc
    except (ValueError, TypeError, SyntaxError, struct.error, UnicodeDecodeError) as exc:
        raise KilnError("TYPE", f"{path}: expected a .npy file: {exc}") from exc
    if dtype.hasobject:
        raise KilnError(
            "TYPE", f"{path}: holds Python objects ({dtype}); expected a dtype with a Kiln code"
        )
    expected = _count(shape) * dtype.itemsize
    found = size - start
    if found != expected:
        by = f"{'short' if found < expected else 'long'} by {abs(found - expected)}"
        raise KilnError(
            "LENGTH",
            f"{path}: expected {expected} data bytes for shape {shape} of {dtype}, "
            f"found {found} ({by})",
            expected=expected,
            found=found,
        )
    if expected == 0:
        return np.empty(shape, dtype, order="F" if fortran else "C")
    return np.memmap(path, dtype, "r", offset=start, shape=shape, order="F" if fortran else "C")


def _typed(arr: np.ndarray, code: int | None, path: str) -> np.ndarray:
    """Give a void-typed array (an ml_dtypes .npy) the dtype of ``--code``."""
    if arr.dtype.kind != "V" or arr.dtype.fields is not None:
        return arr
    if code is None:
        raise KilnError(
            "TYPE",
            f"{path}: holds void '{arr.dtype.str[1:]}' elements, which is how numpy's .npy "
            "format stores ml_dtypes types (bfloat16, float8, int4, ...); expected --code "
            "to say which (e.g. --code bf16)",
        )
    row = _resolve_args(code, None)
    assert isinstance(row, DType)
    if row.dtype.itemsize != arr.dtype.itemsize:
        raise KilnError(
            "TYPE",
            f"{path}: {code_label(code)} elements are {row.dtype.itemsize} byte(s) each in "
            f"numpy, found void elements of {arr.dtype.itemsize}: expected the --code of a "
            f"{arr.dtype.itemsize}-byte type",
            code=code,
        )
    return arr.view(row.dtype)


def _npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    # ml_dtypes types have no .npy descr numpy can load: store them as void bytes.
    stored = np.dtype(f"V{dtype.itemsize}") if dtype.isbuiltin == 2 else dtype
    header = {"descr": np.lib.format.dtype_to_descr(stored), "fortran_order": False, "shape": shape}
    buf = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buf, header)
    except ValueError:  # a header over 64 KiB needs format 2.0
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, header)
    return buf.getvalue()


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


def _conversion(
    fmt: str, src: str, out: str, code: int, kind: DType | Layout, shape: tuple[int, ...]
) -> tuple[dict[str, Any], str]:
    layout = kind if isinstance(kind, Layout) else None
    nbytes = _payload_bytes(kind, _count(shape))
    record = {
        "format": fmt,
        "input": src,
        "output": out,
        "code": code,
        "name": None if layout else kind.name,
        "dtype": None if layout else str(kind.dtype),  # type: ignore[union-attr]
        "layout": _layout_json(layout),
        "shape": list(shape),
        "payload_bytes": nbytes,
    }
    what = f"layout {layout.name}:{layout.block_size}" if layout else f"dtype {record['dtype']}"
    text = f"{out}: {code_label(code)}, {what}, shape {_shape_text(shape)}, {nbytes} payload bytes"
    return record, text


# -- commands -------------------------------------------------------------------------


def _cmd_golden(args: argparse.Namespace) -> int:
    try:
        cases = load_cases(args.dir)
    except (OSError, ValueError) as exc:
        print(f"kiln-np: golden: {exc}", file=sys.stderr)
        return 2
    if not cases:
        print(f"kiln-np: golden: no *.json case files in {args.dir}", file=sys.stderr)
        return 2
    results = [run_case(case) for case in cases]
    print(format_table(results))
    failed = sum(not r.ok for r in results)
    print(f"\n{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _cmd_encode(args: argparse.Namespace) -> int:
    code = None if args.code is None else _parse_code(args.code)
    arr = _typed(_load_npy(args.input), code, args.input)
    payload = from_numpy(arr, code=code)
    _write_atomic(args.output, [payload.data])
    kind = _resolve(payload.code, None)
    record, text = _conversion(
        "kiln-np-encode/1", args.input, args.output, int(payload.code), kind, payload.shape
    )
    _emit(args, record, text)
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    opened = _open(args)
    kind, dims = opened.kind, opened.dims
    if isinstance(kind, Layout):
        dtype, shape = _U8, (*dims, kind.block_size)
    else:
        dtype, shape = kind.dtype, dims
    with _Progress(max(_count(shape), 1), f"decode {args.input}") as bar:

        def pieces() -> Iterator[Any]:
            yield _npy_header(dtype, shape)
            for chunk in opened.chunks():
                bar.advance(chunk.size)
                yield chunk.view(_U8)

        # A bad bool byte or padding nibble found mid-way leaves no output file.
        _write_atomic(args.output, pieces())
    record, text = _conversion("kiln-np-decode/1", args.input, args.output, opened.code, kind, dims)
    _emit(args, record, text)
    return 0


def _opaque_summary(opened: _Opened, first: int) -> dict[str, Any]:
    blocks = np.asarray(opened.payload[:first])
    return {
        "code": opened.code,
        "name": None,
        "dtype": None,
        "shape": list(opened.dims),
        "count": _count(opened.dims),
        "payload_bytes": opened.payload_bytes,
        "nan": None,
        "inf": None,
        "zero": None,
        "min": None,
        "max": None,
        "mean": None,
        "first": None,
        "first_bits": [bytes(b).hex() for b in blocks],
        "histogram": None,
    }


def _inspect_text(record: dict[str, Any], described: Description | None) -> str:
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
            f"payload           {record['payload_bytes']} bytes",
            "first blocks      " + " ".join(record["first_bits"]),
        ]
        return "\n".join(lines)
    lines += [f"{k:<17} {v}" for k, v in described._rows()]
    if described.histogram is not None:
        used = int(np.count_nonzero(described.histogram))
        lines.append(
            f"histogram         {used} of {described.histogram.size} bit patterns used "
            "(pattern, value, count, share)"
        )
        lines += [
            f"  {p}  {v:>14}  {c:>14}  {s:>6}"
            for p, v, c, s in described.histogram_rows(order="pattern")
        ]
    return "\n".join(lines)


def _cmd_inspect(args: argparse.Namespace) -> int:
    opened = _open(args)
    kind = opened.kind
    head: dict[str, Any] = {
        "format": "kiln-np-inspect/1",
        "file": args.input,
        "offset": opened.offset,
        "file_bytes": opened.file_bytes,
        "trailing_bytes": opened.file_bytes - opened.offset - opened.payload_bytes,
        "layout": _layout_json(kind if isinstance(kind, Layout) else None),
    }
    described: Description | None = None
    if isinstance(kind, Layout):
        record = head | _opaque_summary(opened, args.first)
    else:
        with _Progress(max(_count(opened.dims), 1), f"inspect {args.input}") as bar:

            def chunks() -> Iterator[np.ndarray]:
                for chunk in opened.chunks():
                    bar.advance(chunk.size)
                    yield chunk

            described = _summarize(kind, opened.dims, chunks(), args.first)
        record = head | described.to_dict()
    if args.json:
        print(json.dumps(record, allow_nan=False))
    else:
        print(_inspect_text(record, described))
    return 0


def _safe_name(index: int, name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "tensor"
    return f"{index:04d}_{cleaned[:100]}.kiln"


def _cmd_onnx(args: argparse.Namespace) -> int:
    try:
        import onnx
    except ImportError as exc:
        raise _CliError(
            "USAGE", "the onnx subcommand needs onnx: pip install 'kiln-np[onnx]'"
        ) from exc
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    from .onnx import model_to_kiln

    model_path = args.model
    _file_size(model_path)
    try:
        # External data stays on disk: model_to_kiln maps it tensor by tensor.
        model = onnx.load(model_path, load_external_data=False)
    except (DecodeError, ValueError) as exc:
        raise KilnError("TYPE", f"{model_path}: expected an ONNX model: {exc}") from exc
    total = len(model.graph.initializer)
    base_dir = os.path.dirname(os.path.abspath(model_path))
    out = Path(args.outdir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _file_error("create", out, exc) from exc
    tensors: list[dict[str, Any]] = []
    with _Progress(max(total, 1), f"onnx {model_path}") as bar:
        for index, (name, payload) in enumerate(model_to_kiln(model, base_dir)):
            file = _safe_name(index, name)
            _write_atomic(str(out / file), [payload.data])
            layout = payload.layout
            row = None if layout is not None else dtype_info(payload.code)
            tensors.append(
                {
                    "name": name,
                    "file": file,
                    "code": int(payload.code),
                    "dtype": None if row is None else str(row.dtype),
                    "layout": _layout_json(layout),
                    "shape": list(payload.shape),
                    "payload_bytes": payload.nbytes,
                    "sha256": hashlib.sha256(payload.data).hexdigest(),
                }
            )
            bar.advance(1)
    manifest = {"format": "kiln-np-onnx/1", "model": model_path, "tensors": tensors}
    text = json.dumps(manifest, indent=2, allow_nan=False) + "\n"
    _write_atomic(str(out / "manifest.json"), [text.encode()])
    total_bytes = sum(t["payload_bytes"] for t in tensors)
    _emit(
        args,
        manifest,
        f"{out}: {len(tensors)} payload files, {total_bytes} payload bytes, manifest.json",
    )
    return 0


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


def _payload_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="IN", help="the payload file")
    parser.add_argument(
        "--code", required=True, help="dtype code: a number or a name (f32, bf16, e2m1, ...)"
    )
    parser.add_argument("--shape", required=True, help=f"element shape: {_SHAPE_HELP}")
    parser.add_argument("--offset", default="0", help="payload start in the file (default 0)")
    parser.add_argument(
        "--layout", help="NAME:BLOCK_SIZE, required with an opaque code (4096-32767)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kiln-np",
        description="Kiln tensor payloads <-> numpy arrays, bit for bit.",
        epilog="Errors: one line 'kiln-np: KIND: message' on stderr, exit status 2. "
        "See docs/cli.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    golden = _subparser(
        sub,
        "golden",
        "run the golden cases",
        "Run golden case files: decode every payload, encode every valid case.",
        [
            "kiln-np golden            (the cases shipped with kiln_np)",
            "kiln-np golden ./vectors  (another implementation's case files)",
        ],
    )
    golden.add_argument("dir", nargs="?", default=None, help="a directory of *.json case files")
    golden.set_defaults(run=_cmd_golden)

    encode = _subparser(
        sub,
        "encode",
        "write a .npy array as a Kiln payload",
        "Encode a .npy array as Kiln payload bytes; print code, dtype, shape, byte length. "
        "A .npy of an ml_dtypes type stores void 'V1'/'V2' elements: --code says which type.",
        ["kiln-np encode weights.npy weights.kiln", "kiln-np encode w_bf16.npy w.kiln --code bf16"],
    )
    encode.add_argument("input", metavar="IN.npy")
    encode.add_argument("output", metavar="OUT")
    encode.add_argument("--code", help="dtype code or name; required for void (ml_dtypes) .npy")
    encode.add_argument("--json", action="store_true", help="print one JSON object")
    encode.set_defaults(run=_cmd_encode)

    decode = _subparser(
        sub,
        "decode",
        "write a Kiln payload as a .npy array",
        "Decode Kiln payload bytes into a .npy file (ml_dtypes types are stored as void "
        "'V1'/'V2' elements, as numpy's format does).",
        [
            "kiln-np decode w.kiln --code bf16 --shape 3,4 w.npy",
            "kiln-np decode blob.bin --code 4100 --layout q4_k:144 --shape 10 --offset 64 q.npy",
        ],
    )
    _payload_args(decode)
    decode.add_argument("output", metavar="OUT.npy")
    decode.add_argument("--json", action="store_true", help="print one JSON object")
    decode.set_defaults(run=_cmd_decode)

    inspect = _subparser(
        sub,
        "inspect",
        "summarize a Kiln payload file",
        "Memory-map a payload and summarize it: counts, min/max/mean, first elements, and "
        "for codes of 8 bits or fewer the exact histogram of bit patterns.",
        [
            "kiln-np inspect w.kiln --code e2m1 --shape 4096,4096",
            "kiln-np inspect w.kiln --code f8e4m3 --shape 1024 --json",
        ],
    )
    _payload_args(inspect)
    inspect.add_argument("--first", type=int, default=8, help="leading elements shown (8)")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.set_defaults(run=_cmd_inspect)

    onnx = _subparser(
        sub,
        "onnx",
        "export every initializer of an ONNX model",
        "Write each initializer of an ONNX model as a payload file in OUTDIR, with "
        "manifest.json (name, file, code, dtype or layout, shape, bytes, sha256).",
        ["kiln-np onnx model.onnx weights/"],
    )
    onnx.add_argument("model", metavar="MODEL.onnx")
    onnx.add_argument("outdir", metavar="OUTDIR")
    onnx.add_argument("--json", action="store_true", help="print the manifest")
    onnx.set_defaults(run=_cmd_onnx)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        status: int = args.run(args)
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
    return status


if __name__ == "__main__":
    sys.exit(main())
