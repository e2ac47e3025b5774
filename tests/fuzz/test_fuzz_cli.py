"""Hostile command lines and ``.npy`` headers at ``kiln-np``: the CLI's oracle.

Every run of :func:`kiln_np.cli.main` either succeeds (status 0; 1 for a
golden case that fails) or prints exactly one line, ``kiln-np: KIND: ...``,
and returns 2; argparse's USAGE errors exit 2 the same way.  Anything else
escaping (a traceback) is a bug.  Paths are drawn from a fixed set of names
inside one scratch directory (an existing payload, a ``.npy``, a FIFO, a
directory, a missing file), so a random argument never writes outside it.
``fuzz/run.py hypothesis --match cli`` runs these ``*_oracle`` properties for
longer.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import kiln_np
from kiln_np.cli import main

EXAMPLES = max(1, settings().max_examples // 2)
"""Each example writes files: half the profile's examples (100 in ``ci``)."""

_COMMANDS = {"decode", "inspect", "encode", "golden", "onnx"}
_ONE_LINE = re.compile(r"kiln-np: (TYPE|LENGTH|SHAPE|FILE|USAGE|golden): [^\n]*\n")


def _scratch() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="kiln-fuzz-cli-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    os.mkfifo(directory / "pipe")
    (directory / "adir").mkdir()
    return directory


SCRATCH = _scratch()
INPUTS = ["p.bin", "x.npy", "pipe", "adir", "missing.bin"]
OUTPUTS = ["out.npy", "out.kiln", "p.bin", "x.npy", "pipe", "adir", "outdir"]


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """``main(argv)`` in the scratch directory: status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(SCRATCH)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(argv))
            except SystemExit as exc:  # argparse: USAGE (2), --help / --version (0)
                status = int(exc.code or 0)
    finally:
        os.chdir(cwd)
    return status, out.getvalue(), err.getvalue()


def check_outcome(status: int, out: str, err: str, argv: Sequence[str]) -> None:
    """The oracle: success, or one clean line with status 2."""
    kind = err.split(":")[1].strip() if status == 2 and err.startswith("kiln-np:") else ""
    command = argv[0] if argv and argv[0] in _COMMANDS else "(other)"
    event(f"{command}: {status} {kind}".strip())
    if status == 0 or (status == 1 and argv[:1] == ["golden"]):
        assert "Traceback" not in err
        return
    assert status == 2, (status, argv, err)
    assert out == "", (argv, out)
    assert _ONE_LINE.fullmatch(err), (argv, err)


def _clean() -> None:
    """Remove what a command wrote (``onnx`` makes its output a directory)."""
    for name in ("out.npy", "out.kiln", "outdir"):
        path = SCRATCH / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


# -- random command lines --------------------------------------------------------------

_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.integers(0, 2**64).map(hex),
    st.sampled_from(["0", "1", "-1", "0x10", "+3", "007", "1e3", "1.5", " 2 ", "0x", ""]),
    st.integers(30, 6000).map(lambda n: "9" * n),
)
_CODES = st.one_of(
    _NUMBERS,
    st.sampled_from(
        ["f32", "F32", "bf16", "BF16", "bool", "u4", "e2m1", "4096", "bfloat16", "f33"]
    ),
    _TEXT,
)
_SHAPES = st.one_of(
    st.lists(st.integers(0, 6).map(str), max_size=4).map(",".join),
    st.lists(_NUMBERS, max_size=4).map(",".join),
    st.sampled_from(["()", "", "3;4", "1,,2", ",".join(["1"] * 64), ",".join(["1"] * 65)]),
    _TEXT,
)
_LAYOUTS = st.one_of(
    st.builds(lambda n, s: f"{n}:{s}", _TEXT, _NUMBERS),
    st.sampled_from(["q:4", "q4_k:144", ":4", "q:", "q", "a:b:2"]),
)


_GOOD_CODES = ["u8", "f32", "BF16", "bool", "u4", "e2m1", "0x02", "9"]
_GOOD_LAYOUT = ("4096", "q:3", 3)  # an opaque code, its layout, bytes per block


@st.composite
def payload_options(draw: st.DrawFn) -> tuple[list[str], bytes]:
    """``--code/--shape/--offset/--layout`` and a payload file: mostly one that
    fits, so that decoding runs; sometimes anything."""
    if draw(st.integers(0, 3)):
        opaque = draw(st.integers(0, 4)) == 0
        code = _GOOD_LAYOUT[0] if opaque else draw(st.sampled_from(_GOOD_CODES))
        dims = draw(st.lists(st.integers(0, 5), max_size=3))
        offset = draw(st.sampled_from([0, 0, 1, 7]))
        name = code if not code[0].isdigit() else int(code, 0)
        layout = kiln_np.Layout("q", _GOOD_LAYOUT[2]) if opaque else None
        size = (
            offset + kiln_np.byte_length(name, dims, layout) + draw(st.sampled_from([0, 0, -1, 1]))
        )
        options = {
            "--code": code,
            "--shape": ",".join(map(str, dims)) or "()",
            "--offset": draw(st.sampled_from([str(offset), hex(offset)])),
        }
        if opaque:
            options["--layout"] = _GOOD_LAYOUT[1]
        payload = draw(st.binary(min_size=max(size, 0), max_size=max(size, 0)))
        if code == "bool" and draw(st.booleans()):  # valid bools, mostly
            payload = bytes(b & 1 for b in payload)
        if code in {"u4", "e2m1"} and draw(st.booleans()):  # a clean padding nibble
            payload = payload[:-1] + bytes([payload[-1] & 0x0F]) if payload else payload
    else:
        options = {}
        for name, values in {
            "--code": _CODES,
            "--shape": _SHAPES,
            "--offset": _NUMBERS,
            "--layout": _LAYOUTS,
        }.items():
            if draw(st.integers(0, 5)):  # mostly present: --code and --shape are required
                options[name] = draw(values)
        payload = draw(st.binary(max_size=64))
    return [f"{k}={v}" for k, v in options.items()], payload


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[list[str], bytes]:
    command = draw(st.sampled_from(["decode", "inspect", "encode", "golden", "onnx", "junk"]))
    payload = b""
    if command in {"decode", "inspect"}:
        options, payload = draw(payload_options())
        argv = [command, draw(st.sampled_from(["p.bin", "p.bin", *INPUTS])), *options]
        if command == "inspect" and draw(st.booleans()):
            argv.append(f"--first={draw(st.one_of(st.integers(0, 9).map(str), _NUMBERS))}")
        if command == "decode":
            argv.append(draw(st.sampled_from(["out.npy", "out.npy", *OUTPUTS])))
            if draw(st.booleans()):
                argv.append("--embedded")
    elif command == "encode":
        argv = [command, draw(st.sampled_from(["x.npy", "x.npy", *INPUTS]))]
        argv.append(draw(st.sampled_from(["out.kiln", "out.kiln", *OUTPUTS])))
        if draw(st.booleans()):
            argv.append(f"--code={draw(st.one_of(st.sampled_from(_GOOD_CODES), _CODES))}")
    elif command == "golden":
        argv = [
            command,
            *draw(st.lists(st.sampled_from(["adir", "missing", "--json"]), max_size=2)),
        ]
    elif command == "onnx":
        argv = [command, draw(st.sampled_from(INPUTS)), draw(st.sampled_from(OUTPUTS))]
    else:
        argv = draw(st.lists(_TEXT, max_size=4))
    if draw(st.integers(0, 3)) == 0:
        argv.append("--json")
    return argv, payload


@settings(max_examples=EXAMPLES)
@given(case=command_lines(), values=st.binary(max_size=32))
def test_cli_command_line_oracle(case: tuple[list[str], bytes], values: bytes) -> None:
    argv, payload = case
    (SCRATCH / "p.bin").write_bytes(payload)
    np.save(SCRATCH / "x.npy", np.frombuffer(values, np.uint8))
    status, out, err = run_cli(argv)
    check_outcome(status, out, err, argv)
    _clean()


# -- random .npy headers ---------------------------------------------------------------

_VALID = [
    # (header, data bytes it needs)
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12),
    ("{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2), }", 4),
    ("{'descr': '|V2', 'fortran_order': False, 'shape': (), }", 2),
    ("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", 4),
    ("{'descr': [('a', '<f4', (2,))], 'fortran_order': False, 'shape': (1,), }", 8),
    ("{'descr': ('<f8', (2, 2)), 'fortran_order': False, 'shape': (1,), }", 32),
]
_PIECES = st.sampled_from(
    [
        *"()[]{}:,'\" +-.\\0123456789xeTFN_",
        *["True", "False", "None", "1+", "-" * 50, "(" * 20, ")" * 20, "9" * 25, "\xff"],
        *["'<f1'", "('<f8', (", "2**62", "4611686018427387904", "\n"],
    ]
)


@st.composite
def npy_headers(draw: st.DrawFn) -> bytes:
    text, needed = draw(st.sampled_from(_VALID))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 6]))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(_PIECES) * draw(st.integers(1, 3)) + text[at + cut :]
    header = text.encode("latin-1", "replace") + b"\n"
    version = draw(st.sampled_from([1, 1, 1, 2, 3, 9]))
    width = 2 if version == 1 else 4
    length = len(header) if draw(st.integers(0, 5)) else draw(st.integers(0, 2 ** (8 * width) - 1))
    size = needed if draw(st.booleans()) else draw(st.integers(0, 48))
    data = draw(st.binary(min_size=size, max_size=size))
    return b"\x93NUMPY" + bytes([version, 0]) + length.to_bytes(width, "little") + header + data


@settings(max_examples=EXAMPLES)
@given(content=npy_headers(), code=st.one_of(st.none(), st.none(), st.just("bf16"), _CODES))
def test_cli_npy_header_oracle(content: bytes, code: str | None) -> None:
    (SCRATCH / "h.npy").write_bytes(content)
    argv = ["encode", "h.npy", "out.kiln", *([] if code is None else [f"--code={code}"])]
    status, out, err = run_cli(argv)
    check_outcome(status, out, err, argv)
    _clean()


# -- regressions: each once escaped as a traceback ----------------------------------------


def test_non_utf8_path_prints_on_a_strict_stdout() -> None:
    # argv holds undecodable bytes as surrogates; printing them on a strict UTF-8
    # stdout raised UnicodeEncodeError.
    name = os.fsdecode(b"\xff.kiln")
    np.save(SCRATCH / "f32.npy", np.ones(2, np.float32))
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    cwd = os.getcwd()
    os.chdir(SCRATCH)
    try:
        with contextlib.redirect_stdout(stdout):
            assert main(["encode", "f32.npy", name]) == 0
        stdout.flush()
    finally:
        os.chdir(cwd)
        (SCRATCH / name).unlink(missing_ok=True)
    # Issue 36: shown as its escape, as a name's undecodable bytes are (never raw).
    assert raw.getvalue().startswith(b"\\udcff.kiln: code 2 (f32)")
