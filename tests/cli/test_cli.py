"""The ``kiln-np`` command line.

Everything runs in process through :func:`kiln_np.cli.main` (errors with
``capsys``), except three real subprocesses: the installed entry point, its
exit status and one-line error, and a closed stdout.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import pickle
import re
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import pytest
from _helpers import available, bits, kiln_np_exe, needs, optional

import kiln_np
from kiln_np import DTYPES, from_numpy
from kiln_np._core.table import code_label
from kiln_np._files import chunks
from kiln_np.cli import args, main, payloads
from kiln_np.cli import entry as cli_entry
from kiln_np.cli.output import Progress

if TYPE_CHECKING:
    import onnx
    import safetensors.numpy
else:
    onnx = optional("onnx")
    safetensors = optional("safetensors", "numpy")

DOCS = Path(__file__).resolve().parents[2] / "docs"


class Run:
    """One in-process command: its status, stdout and stderr."""

    def __init__(self, capsys: pytest.CaptureFixture[str], *argv: str) -> None:
        try:
            self.status = main(list(argv))
        except SystemExit as exc:  # argparse: --help, --version, a USAGE error
            self.status = int(exc.code or 0)
        self.out, self.err = capsys.readouterr()

    def ok(self) -> str:
        assert (self.status, self.err) == (0, ""), self.err
        return self.out

    def error(self, kind: str, text: str = "") -> str:
        """The one-line error: status 2, nothing on stdout, the kind, the text."""
        assert self.status == 2, (self.status, self.out, self.err)
        assert self.out == ""
        assert self.err.count("\n") == 1, self.err
        assert self.err.startswith(f"kiln-np: {kind}: "), self.err
        assert text in self.err, self.err
        return self.err


Runner = Callable[..., Run]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Runner:
    """``run(*argv)``: one command in process, as a :class:`Run`."""
    return functools.partial(Run, capsys)


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of small inputs, made the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f32x3.kiln").write_bytes(np.array([1, 2, 3], "<f4").tobytes())
    (tmp_path / "f32x12.kiln").write_bytes(np.arange(12, dtype="<f4").tobytes())
    (tmp_path / "f0.kiln").write_bytes(b"\xf0")
    np.save(tmp_path / "f32.npy", np.ones(3, np.float32))
    return tmp_path


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


# -- the installed entry point: three subprocesses ------------------------------------

ROUND_TRIPS = {
    # name: (array, code flag or None)
    "f32-fortran": (np.asfortranarray(np.arange(12, dtype="<f4").reshape(3, 4) - 5.5), None),
    "bf16": (np.array([1.0, -0.0, np.nan, 3.5], ml_dtypes.bfloat16), "bf16"),
    "e2m1-odd": (np.array([0.5, -6.0, 1.0], ml_dtypes.float4_e2m1fn), "18"),
    "u64-scalar": (np.array(2**64 - 1, np.uint64), "U64"),
}


def test_entry_point_encodes_and_decodes(tmp_path: Path) -> None:
    script = []
    for name, (arr, code) in ROUND_TRIPS.items():
        np.save(tmp_path / f"{name}.npy", arr)
        payload = from_numpy(arr)
        shape = ",".join(map(str, arr.shape)) or "()"
        script += [
            f"{' '.join(kiln_np_exe())} encode {name}.npy {name}.kiln"
            + (f" --code {code}" if code else ""),
            f"{' '.join(kiln_np_exe())} decode {name}.kiln --code {int(payload.code)} "
            f"--shape '{shape}' {name}.back.npy --json",
        ]
    done = subprocess.run(
        " && ".join(script),
        check=False,
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")  # no progress bar: stderr is a pipe
    lines = done.stdout.splitlines()
    for i, (name, (arr, _)) in enumerate(ROUND_TRIPS.items()):
        payload = from_numpy(arr)
        label = code_label(int(payload.code))
        assert lines[2 * i].startswith(f"{name}.kiln: {label}, ")
        assert json.loads(lines[2 * i + 1])["output"] == f"{name}.back.npy"
        assert (tmp_path / f"{name}.kiln").read_bytes() == bytes(payload.data)
        back = np.load(tmp_path / f"{name}.back.npy")
        assert back.shape == arr.shape
        if arr.dtype.isbuiltin == 2:  # ml_dtypes: numpy's format stores void of the same width
            assert back.dtype == np.dtype(f"V{arr.dtype.itemsize}")
        else:
            assert back.dtype == arr.dtype
        assert bits(back.view(arr.dtype)) == bits(arr)


def test_entry_point_error_is_one_line_with_status_2(tmp_path: Path) -> None:
    (tmp_path / "w.kiln").write_bytes(bytes(11))
    done = subprocess.run(
        [*kiln_np_exe(), "decode", "w.kiln", "--code", "f32", "--shape", "3", "o.npy"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "kiln-np: LENGTH: 'w.kiln' at offset 0: code 2 (f32) shape (3,): "
        "expected 3 x 4 = 12 bytes, found 11 (short by 1)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.kiln"]


def test_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    (tmp_path / "a.kiln").write_bytes(bytes(range(200)))
    reader, writer = os.pipe()
    os.close(reader)  # like `| head` that has already exited
    try:
        done = subprocess.run(
            [*kiln_np_exe(), "inspect", "a.kiln", "--code", "u8", "--shape", "200"],
            cwd=tmp_path,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")


# -- encode / decode ------------------------------------------------------------------


def _sample(row: kiln_np.DType) -> np.ndarray:
    if row.bits <= 8:
        values = kiln_np.bit_values(row.dtype)
        return np.resize(values, 2 * values.size + 1).reshape(-1, 1)  # odd count for 4-bit
    return (np.arange(-3, 4).astype(row.dtype)).reshape(7, 1)


@pytest.mark.parametrize("row", DTYPES, ids=[r.name for r in DTYPES])
def test_every_code_round_trips(row: kiln_np.DType, work: Path, run: Runner) -> None:
    arr = _sample(row)
    np.save("a.npy", arr)
    run("encode", "a.npy", "a.kiln", "--code", row.name).ok()
    assert Path("a.kiln").read_bytes() == bytes(from_numpy(arr).data)
    shape = ",".join(map(str, arr.shape))
    run("decode", "a.kiln", "--code", str(int(row.code)), "--shape", shape, "b.npy").ok()
    assert bits(np.load("b.npy").view(row.dtype)) == bits(arr)
    record = json.loads(
        run("inspect", "a.kiln", "--code", row.name, "--shape", shape, "--json").ok()
    )
    described = kiln_np.describe(arr).to_dict()
    assert {k: record[k] for k in described} == json.loads(json.dumps(described))


def test_encode_and_decode_json_records(work: Path, run: Runner) -> None:
    arr = np.array([[True, False], [False, True]])
    np.save("b.npy", arr)
    record = json.loads(run("encode", "b.npy", "b.kiln", "--json").ok())
    assert record == {
        "format": "kiln-np-encode/1",
        "input": "b.npy",
        "output": "b.kiln",
        "code": 7,
        "name": "bool",
        "dtype": "bool",
        "layout": None,
        "shape": [2, 2],
        "byte_length": 4,
    }
    text = run("decode", "b.kiln", "--code", "bool", "--shape", "2,2", "c.npy").ok()
    assert text == "c.npy: code 7 (bool), dtype bool, shape 2x2, 4 payload bytes\n"


def test_codes_by_name_are_the_python_apis(work: Path, run: Runner) -> None:
    # --code takes exactly the spellings to_numpy takes: the spec's and Code's names.
    for spelling in ("f32", "F32", "2", "0x02", "0X2"):
        run("inspect", "f32x3.kiln", "--code", spelling, "--shape", "3").ok()
        assert kiln_np.to_numpy(spelling if not spelling[0].isdigit() else 2, bytes(12), (3,)).size
    for spelling in ("float32", "Float32", "f32 ", "True"):
        run("inspect", "f32x3.kiln", "--code", spelling, "--shape", "3").error("TYPE", "--code")
        with pytest.raises(kiln_np.KilnError):
            kiln_np.to_numpy(spelling, bytes(12), (3,))
    # A dtype's name names its code (issue 37), on the command line as in Python.
    hint = "float32 is code 2 (kiln_np.Code.F32, or the name 'f32'"
    run("inspect", "f32x3.kiln", "--code", "float32", "--shape", "3").error("TYPE", hint)
    with pytest.raises(kiln_np.KilnError, match=re.escape(hint)):
        kiln_np.to_numpy("float32", bytes(12), (3,))
    run("decode", "f32x3.kiln", "--code", "bfloat16", "--shape", "6", "o.npy").error(
        "TYPE",
        "--code: expected an integer dtype code or a code name, found str 'bfloat16', "
        "a dtype's name: bfloat16 is code 4 (kiln_np.Code.BF16, or the name 'bf16'",
    )


def test_decode_opaque_blocks_embedded_at_an_offset(work: Path, run: Runner) -> None:
    Path("blob.bin").write_bytes(b"HEADER" + bytes(range(12)) + b"tail")
    argv = ["decode", "blob.bin", "--code", "4100", "--layout", "q:4", "--shape", "3"]
    run(*argv, "--offset", "6", "q.npy").error("LENGTH", "long by 4")
    run(*argv, "--offset", "0x6", "--embedded", "q.npy").ok()
    back = np.load("q.npy")
    assert (back.dtype, back.shape, back.tobytes()) == (np.uint8, (3, 4), bytes(range(12)))


def test_decode_reads_in_chunks(work: Path, run: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "READ_BYTES", 3)  # odd: 4-bit chunks must still start on a byte
    values = np.array([1, 2, 3, 4, 5, 6, 7], ml_dtypes.uint4)
    Path("u4.kiln").write_bytes(bytes(from_numpy(values).data))
    run("decode", "u4.kiln", "--code", "u4", "--shape", "7", "u4.npy").ok()
    assert bits(np.load("u4.npy").view(ml_dtypes.uint4)) == bits(values)
    Path("bool.kiln").write_bytes(b"\x00\x01\x00\x01\x00\x02\x01")
    err = run("decode", "bool.kiln", "--code", "bool", "--shape", "7", "b.npy").error("TYPE")
    assert "'bool.kiln' at offset 0: code 7 (bool) shape (7,): " in err
    assert "found 0x02 at element 5" in err  # the payload's index, not the chunk's
    assert not Path("b.npy").exists()
    # Opaque blocks larger than a chunk are read as bytes: any block size, bounded reads.
    Path("q.kiln").write_bytes(bytes(range(15)))
    argv = ["--code", "4096", "--layout", "q:5", "--shape", "3"]
    run("decode", "q.kiln", *argv, "q.npy").ok()
    assert np.load("q.npy").tobytes() == bytes(range(15))
    record = json.loads(run("inspect", "q.kiln", *argv, "--first", "2", "--json").ok())
    assert record["first_bits"] == ["0001020304", "0506070809"]
    Path("pad.kiln").write_bytes(b"\x21\x43\x65\xf7")  # 7 elements, padding nibble f
    with pytest.raises(kiln_np.KilnError) as whole:
        kiln_np.to_numpy("u4", Path("pad.kiln").read_bytes(), (7,))
    err = run("decode", "pad.kiln", "--code", "u4", "--shape", "7", "p.npy").error("TYPE")
    assert err == f"kiln-np: TYPE: 'pad.kiln' at offset 0: {whole.value.message}\n"
    assert "odd count 7" in err
    assert "at byte offset 3" in err  # the payload's count and byte, not the last chunk's


def test_a_file_that_shrinks_while_read_is_a_clean_error(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunks, "READ_BYTES", 16)
    args = cli_entry.parser().parse_args(
        ["decode", "f32x12.kiln", "--code", "f32", "--shape", "12", "x"]
    )
    read = payloads._chunks(payloads._open_input(args, exact=True))
    assert next(read).tolist() == [0.0, 1.0, 2.0, 3.0]
    os.truncate("f32x12.kiln", 20)  # another process cuts the file
    with pytest.raises(kiln_np.KilnError) as info:
        next(read)
    assert info.value.kind == "LENGTH"
    assert (
        "the file shrank while read: code 2 (f32) shape (12,): expected 12 x 4 = 48 bytes, "
        "found 20 (short by 28)" in str(info.value)
    )


# -- issue 11.4: a payload is exactly byte_length bytes ---------------------------------


@pytest.mark.parametrize(
    ("shape", "found"), [("()", "long by 44"), ("2,4", "long by 16"), ("4,4", "short by 16")]
)
def test_decode_shape_must_cover_the_file(work: Path, run: Runner, shape: str, found: str) -> None:
    err = run("decode", "f32x12.kiln", "--code", "f32", "--shape", shape, "o.npy").error("LENGTH")
    assert found in err
    assert not Path("o.npy").exists()


def test_length_errors_read_as_to_numpys(work: Path, run: Runner) -> None:
    data = Path("f32x12.kiln").read_bytes()
    for shape in ((2, 4), (4, 4)):
        with pytest.raises(kiln_np.KilnError) as info:
            kiln_np.to_numpy(2, data, shape)
        text = ",".join(map(str, shape))
        for command in ("decode", "inspect"):
            tail = [] if command == "inspect" else ["o.npy"]
            done = run(command, "f32x12.kiln", "--code", "f32", "--shape", text, *tail)
            if command == "inspect" and shape == (2, 4):
                assert "16 bytes after it" in done.ok()  # inspect reports trailing bytes
                continue
            assert done.error("LENGTH") == (
                f"kiln-np: LENGTH: 'f32x12.kiln' at offset 0: {info.value.message}\n"
            )


def test_inspect_reports_trailing_bytes_and_offset_past_the_end(work: Path, run: Runner) -> None:
    record = json.loads(
        run(
            "inspect", "f32x12.kiln", "--code", "u8", "--shape", "4", "--offset", "0x10", "--json"
        ).ok()
    )
    assert (record["offset"], record["trailing_bytes"], record["file_bytes"]) == (16, 28, 48)
    run("inspect", "f32x12.kiln", "--code", "u8", "--shape", "1", "--offset", "48").error(
        "LENGTH", "expected 1 x 1 = 1 bytes, found 0 (short by 1)"
    )


# -- issue 11.2 and 11.3: never over an input; outputs keep what they are -----------------


def test_no_command_writes_over_its_input(work: Path, run: Runner) -> None:
    os.link("f32x12.kiln", "hard.kiln")
    os.symlink("f32.npy", "link.npy")
    before = _listing(work)
    argv = ["--code", "f32", "--shape", "12"]
    for output in ("f32x12.kiln", "./f32x12.kiln", "hard.kiln"):
        run("decode", "f32x12.kiln", *argv, output).error("FILE", "it is the input file")
    run("encode", "f32.npy", "f32.npy").error("FILE", "it is the input file 'f32.npy'")
    run("encode", "f32.npy", "link.npy").error("FILE", "same device and inode")
    # A path through a folder that does not exist is refused by the OS, never
    # tidied by name into the input.
    run("decode", "f32x12.kiln", *argv, "nosuch/../f32x12.kiln").error("FILE", "cannot write")
    assert _listing(work) == before
    assert not [p for p in os.listdir(work) if p.endswith(".part")]


def test_outputs_keep_permissions_and_symlinks(work: Path, run: Runner) -> None:
    Path("out.kiln").write_bytes(b"old")
    os.chmod("out.kiln", 0o600)
    os.symlink("out.kiln", "via.kiln")
    run("encode", "f32.npy", "via.kiln").ok()
    assert Path("via.kiln").is_symlink()
    assert Path("out.kiln").read_bytes() == np.ones(3, "<f4").tobytes()
    assert os.stat("out.kiln").st_mode & 0o777 == 0o600
    Path("back.npy").write_bytes(b"old")
    os.chmod("back.npy", 0o640)
    run("decode", "out.kiln", "--code", "f32", "--shape", "3", "back.npy").ok()
    assert os.stat("back.npy").st_mode & 0o777 == 0o640
    assert bits(np.load("back.npy")) == bits(np.ones(3, "<f4"))


# -- issue 11.7: FIFOs and other non-regular files -------------------------------------


def test_non_regular_inputs_are_refused_before_opening(work: Path, run: Runner) -> None:
    os.mkfifo("pipe")
    os.mkdir("adir")
    payload = ["--code", "u8", "--shape", "1"]
    run("decode", "pipe", *payload, "o.npy").error("TYPE", "expected a regular file, found a FIFO")
    run("inspect", "pipe", *payload).error("TYPE", "found a FIFO (named pipe)")
    run("encode", "pipe", "o.kiln").error("TYPE", "found a FIFO")
    run("inspect", "adir", *payload).error("TYPE", "found a directory")
    run("inspect", os.devnull, *payload).error("TYPE", "found a character device")
    if available("onnx"):  # the subcommand needs onnx before it looks at its input
        run("onnx", "pipe", "outdir").error("TYPE", "found a FIFO")
    run("decode", "f32x3.kiln", "--code", "u8", "--shape", "12", "pipe").error("TYPE", "FIFO")


# -- issue 11.10 and 11.11: rank 64, huge numbers ---------------------------------------


def test_opaque_rank_64_is_shape_and_writes_nothing(work: Path, run: Runner) -> None:
    ones = ",".join(["1"] * 64)
    argv = ["--code", "4096", "--layout", "q:1", "--shape", ones]
    run("decode", "f0.kiln", *argv, "o.npy").error("SHAPE", "at most 63 dimensions")
    assert not Path("o.npy").exists()
    run("decode", "f0.kiln", *argv[:-1], ",".join(["1"] * 63), "o.npy").ok()
    assert np.load("o.npy").shape == (1,) * 64


HUGE = "1" + "0" * 5000


@pytest.mark.parametrize(
    ("option", "value", "kind"),
    [
        ("--offset", HUGE, "TYPE"),
        ("--offset", "0x" + "f" * 5000, "TYPE"),
        ("--offset", str(2**63), "TYPE"),
        ("--shape", HUGE, "SHAPE"),
        ("--shape", f"2,{2**64}", "SHAPE"),
        ("--shape", "-" + HUGE, "SHAPE"),
        ("--code", HUGE, "TYPE"),
        ("--code", str(2**200), "TYPE"),
        ("--layout", "q:" + HUGE, "TYPE"),
        ("--layout", f"q:{2**64}", "TYPE"),
    ],
    ids=lambda v: v if len(v) < 12 else f"{v[:6]}..{len(v)}",
)
def test_huge_numbers_are_bounded_messages(
    work: Path, run: Runner, option: str, value: str, kind: str
) -> None:
    argv = {"--code": "4096" if option == "--layout" else "u8", "--shape": "1", "--offset": "0"}
    argv[option] = value
    flat = [w for k, v in argv.items() for w in (f"{k}={v}",)]
    err = run("inspect", "f0.kiln", *flat).error(
        kind, option.lstrip("-") if option != "--shape" else ""
    )
    assert len(err) < 400


# -- issue 11.12: hostile .npy headers ----------------------------------------------------


def _npy(header: bytes, data: bytes = b"", version: int = 1) -> bytes:
    size = len(header).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + size + header + data


def _header(shape: bytes, descr: bytes = b"'<f8'") -> bytes:
    return b"{'descr': " + descr + b", 'fortran_order': False, 'shape': " + shape + b", }"


HOSTILE_NPY = {
    # name: (file bytes, kind, text)
    "plus-chain": (_npy(_header(b"(" + b"1+" * 3000 + b"1,)")), "TYPE", "found '+'"),
    "minus-run": (_npy(_header(b"(" + b"-" * 9000 + b"1,)")), "TYPE", "found '-'"),
    "minus-in-descr": (_npy(_header(b"(1,)", b"-" * 100 + b"1")), "TYPE", "found '-'"),
    "deep-descr": (_npy(_header(b"(1,)", b"[" * 40 + b"]" * 40)), "TYPE", "nested at most 16"),
    "deep-shape": (_npy(_header(b"(" * 30 + b")" * 30)), "TYPE", "nested at most 16"),
    "long-header": (_npy(b"{" + b" " * 20000 + b"}", version=2), "TYPE", "at most 10000 bytes"),
    "long-number": (_npy(_header(b"(" + b"9" * 30 + b",)")), "TYPE", "at most 19 digits"),
    "float-dim": (_npy(_header(b"(1.5,)")), "TYPE", "found '.'"),
    "call": (_npy(_header(b"(1,)", b"__import__('os')")), "TYPE", "expected a .npy file"),
    "shape-list": (_npy(_header(b"[1]")), "TYPE", "shape as a tuple of integers"),
    "fortran-int": (
        _npy(b"{'descr': '<f8', 'fortran_order': 0, 'shape': (1,)}"),
        "TYPE",
        "fortran_order",
    ),
    "extra-key": (
        _npy(b"{'descr': '<f8', 'fortran_order': False, 'shape': (), 'x': 1}"),
        "TYPE",
        "keys",
    ),
    "bad-descr": (_npy(_header(b"(1,)", b"'<q9'")), "TYPE", "expected a .npy file"),
    "version-9": (b"\x93NUMPY\x09\x00\x10\x00" + b" " * 16, "TYPE", "expected a .npy file"),
    "cut-length": (b"\x93NUMPY\x02\x00\x10", "TYPE", "header length"),
    "cut-header": (_npy(_header(b"(1,)"))[:30], "TYPE", "expected a header of"),
    "latin1-bytes": (_npy(b"{'descr': '\xff'}"), "TYPE", "expected a .npy file"),
    "bad-utf8-v3": (b"\x93NUMPY\x03\x00\x04\x00\x00\x00{\xff}\n", "TYPE", "expected a .npy file"),
    "empty-too-big": (_npy(_header(b"(0, 4611686018427387904)")), "SHAPE", "numpy can represent"),
    "subarray-rank-70": (
        _npy(_header(b"(1, 1, 1, 1, 1, 1)", b"('<f8', (" + b"1, " * 64 + b"))")),
        "SHAPE",
        "at most 64 dimensions",
    ),
    "data-short": (_npy(_header(b"(2,)"), bytes(15)), "LENGTH", "short by 1"),
    "data-long": (_npy(_header(b"(2,)"), bytes(17)), "LENGTH", "long by 1"),
    "structured": (
        _npy(_header(b"(1,)", b"[('a', '<f4'), ('b', '<i4')]"), bytes(8)),
        "TYPE",
        "has no Kiln code",
    ),
}


@pytest.mark.parametrize("name", HOSTILE_NPY)
def test_hostile_npy_headers_are_one_clean_error(work: Path, run: Runner, name: str) -> None:
    data, kind, text = HOSTILE_NPY[name]
    Path("h.npy").write_bytes(data)
    err = run("encode", "h.npy", "o.kiln").error(kind, text)
    assert err.startswith(f"kiln-np: {kind}: 'h.npy': ")
    assert not Path("o.kiln").exists()


def test_subarray_dtype_npy_adds_its_axes(work: Path, run: Runner) -> None:
    arr = np.arange(6, dtype="<f4").reshape(2, 3)
    np.save("sub.npy", np.frombuffer(arr.tobytes(), np.dtype(("<f4", (3,)))))
    assert "shape 2x3, 24 payload bytes" in run("encode", "sub.npy", "s.kiln").ok()
    assert Path("s.kiln").read_bytes() == arr.tobytes()


# -- inspect --------------------------------------------------------------------------


def test_inspect_reads_only_the_payload_of_a_huge_sparse_file(work: Path, run: Runner) -> None:
    # 16 GiB of holes, then the payload, then 3 bytes: reading the holes would take
    # far longer than the test.
    values = np.array([1.0, 1.0, -2.0, np.nan, 448.0, 0.0], ml_dtypes.float8_e4m3fn)
    offset = 16 << 30
    with open("big.bin", "wb") as f:
        f.truncate(offset)
        f.seek(offset)
        f.write(bits(values) + b"xyz")
    argv = ["inspect", "big.bin", "--code", "f8e4m3", "--shape", "2,3", "--offset", str(offset)]
    record = json.loads(run(*argv, "--json").ok())
    assert record["format"] == "kiln-np-inspect/1"
    assert (record["file_bytes"], record["offset"], record["trailing_bytes"]) == (
        offset + 9,
        offset,
        3,
    )
    assert (record["nan"], record["inf"], record["zero"]) == (1, 0, 1)
    assert (record["min"], record["max"], record["mean"]) == (-2.0, 448.0, 89.6)
    assert record["first"][3] == "nan"
    assert record["first_bits"] == ["0x38", "0x38", "0xc0", "0x7f", "0x7e", "0x00"]
    hist = record["histogram"]
    assert len(hist) == 256
    assert {i: c for i, c in enumerate(hist) if c} == {0x00: 1, 0x38: 2, 0x7E: 1, 0x7F: 1, 0xC0: 1}
    text = run(*argv).ok()
    assert "histogram         5 of 256 bit patterns used" in text
    assert re.search(r"^  0x38 +1 +2 +33\.3%$", text, re.M)
    assert re.search(r"^min / max +-2\.0 / 448\.0$", text, re.M)


def test_inspect_opaque_payload(work: Path, run: Runner) -> None:
    Path("q.bin").write_bytes(bytes(range(10)))
    argv = ["inspect", "q.bin", "--code", "4096", "--layout", "q4:5", "--shape", "2"]
    record = json.loads(run(*argv, "--json").ok())
    assert record["layout"] == {"name": "q4", "block_size": 5}
    assert (record["code"], record["name"], record["count"]) == (4096, None, 2)
    assert record["first_bits"] == ["0001020304", "0506070809"]
    assert "first blocks      0001020304 0506070809" in run(*argv).ok()
    assert json.loads(run(*argv, "--json", "--first", "1").ok())["first_bits"] == ["0001020304"]


def test_first_zero_shows_no_first_line_and_negative_is_refused(work: Path, run: Runner) -> None:
    for argv in (
        ["--code", "f32", "--shape", "3"],
        ["--code", "4096", "--layout", "q:4", "--shape", "3"],
    ):
        text = run("inspect", "f32x3.kiln", *argv, "--first", "0").ok()
        assert "first" not in text
        assert "\n\n" not in text
        assert text.endswith("\n")
        assert text.strip()
        assert (
            json.loads(run("inspect", "f32x3.kiln", *argv, "--first", "0", "--json").ok())[
                "first_bits"
            ]
            == []
        )
        empty = run("inspect", "f32x3.kiln", *argv[:-1], "0", "--offset", "12").ok()
        assert "first" not in empty  # nothing to show: no empty line either
        run("inspect", "f32x3.kiln", *argv, "--first", "-1").error("USAGE", "--first")
        run("inspect", "f32x3.kiln", *argv, "--first", "1e3").error("USAGE", "--first")


def _documented_keys(section: str) -> list[str]:
    text = (DOCS / "cli.md").read_text()
    block = text.split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_json_keys_are_the_documented_schemas(work: Path, run: Runner) -> None:
    Path("a.bin").write_bytes(b"\x00\x3c" * 3)
    closed = json.loads(run("inspect", "a.bin", "--code", "f16", "--shape", "3", "--json").ok())
    argv = ["inspect", "a.bin", "--code", "5000", "--layout", "x:2", "--shape", "3", "--json"]
    opaque = json.loads(run(*argv).ok())
    assert list(closed) == list(opaque) == _documented_keys("inspect-json")
    encoded = json.loads(run("encode", "f32.npy", "o.kiln", "--json").ok())
    decoded = json.loads(
        run("decode", "o.kiln", "--code", "f32", "--shape", "3", "o.npy", "--json").ok()
    )
    assert list(encoded) == list(decoded) == _documented_keys("convert-json")
    golden = json.loads(run("golden", "--json").ok())
    assert list(golden) == _documented_keys("golden-json")
    assert list(golden["cases"][0]) == _documented_keys("golden-case-json")


# -- golden ---------------------------------------------------------------------------


def test_golden_table_json_and_exit_status(work: Path, run: Runner) -> None:
    from kiln_np._explore.golden import load_cases

    count = len(load_cases())
    text = run("golden").ok()
    assert text.splitlines()[0].split() == ["case", "code", "dtype", "shape", "payload", "result"]
    assert f"{count} passed, 0 failed" in text
    record = json.loads(run("golden", "--json").ok())
    assert (record["format"], record["passed"], record["failed"]) == ("kiln-np-golden/1", count, 0)
    assert {c["name"] for c in record["cases"]} >= {"kiln-v2-u4", "opaque-rank-64"}
    (work / "cases").mkdir()
    failing = [{"name": "nope", "code": 17, "shape": [3], "payload": "21 03", "elements": ["0"]}]
    (work / "cases" / "x.json").write_text(
        json.dumps({"format": "kiln-golden/1", "cases": failing})
    )
    done = run("golden", "cases")
    assert (done.status, done.err) == (1, "")
    assert "FAIL" in done.out
    assert "0 passed, 1 failed" in done.out
    done = run("golden", "cases", "--json")
    assert done.status == 1
    assert json.loads(done.out)["cases"][0]["ok"] is False


def _cases(*cases: str) -> str:
    return '{"format": "kiln-golden/1", "cases": [' + ", ".join(cases) + "]}"


_F32 = '"name": "c", "code": 2, "shape": [1], "payload": "00 00 80 3f"'

MALFORMED_GOLDEN = {
    # id: (file content, text of the one-line error)
    "code-1e400": (
        _cases('{"name": "big", "code": 1e400, "shape": [1], "payload": "00", "error": "TYPE"}'),
        "x.json: case 0 ('big'): expected code to be a JSON integer, found float inf",
    ),
    "bool-code": (
        _cases('{"name": "t", "code": true, "shape": [1], "payload": "00", "error": "TYPE"}'),
        "case 0 ('t'): expected code to be a JSON integer, found bool True",
    ),
    "neither": (_cases("{" + _F32 + "}"), "x.json: case 0 ('c'): expected exactly one of"),
    "both": (
        _cases("{" + _F32 + ', "elements": ["3f800000"], "error": "TYPE"}'),
        "case 0 ('c'): expected exactly one of elements",
    ),
    "bad-hex": (
        _cases("{" + _F32 + ', "elements": ["3f800000"]}', '{"name": "h", "code": 9, '
               '"shape": [1], "payload": "zz", "elements": ["00"]}'),
        "x.json: case 1 ('h'): expected payload to be hex",
    ),
    "bad-element": (
        _cases("{" + _F32 + ', "elements": ["0x3f800000"]}'),
        "case 0 ('c'): expected elements to be a list of hex strings",
    ),
    "bad-layout": (
        _cases('{"name": "q", "code": 4096, "shape": [1], "payload": "00", '
               '"layout": {"name": "q", "block_size": 0}, "error": "TYPE"}'),
        "case 0 ('q'): TYPE: expected a layout block_size",
    ),
    "bad-kind": (_cases("{" + _F32 + ', "error": "OOPS"}'), "expected error to be one of TYPE"),
    "bad-shape": (
        _cases('{"name": "s", "code": 2, "shape": 3, "payload": "", "error": "SHAPE"}'),
        "case 0 ('s'): expected shape to be a list",
    ),
    "not-object": (_cases("7"), "x.json: case 0: expected a case object"),
    "cases-not-list": ('{"format": "kiln-golden/1", "cases": {}}', 'expected "cases" to be a list'),
    "invalid-json": ('{"format": "kiln-golden/1", "cases": [', "x.json: expected UTF-8 JSON"),
    "deep-json": ("[" * 100000, "x.json: expected UTF-8 JSON"),
    "huge-int": (_cases('{"code": 1' + "0" * 5000 + "}"), "x.json: expected UTF-8 JSON"),
    "format": ('{"format": "other"}', "x.json: expected a 'kiln-golden/1' case file"),
}  # fmt: skip


@pytest.mark.parametrize(("content", "text"), MALFORMED_GOLDEN.values(), ids=MALFORMED_GOLDEN)
def test_malformed_golden_files_name_the_file_and_case(
    work: Path, run: Runner, content: str, text: str
) -> None:
    (work / "cases").mkdir()
    (work / "cases" / "x.json").write_text(content)
    done = run("golden", "cases")
    assert (done.status, done.out) == (2, "")
    assert done.err.startswith("kiln-np: golden: ")
    assert done.err.count("\n") == 1
    assert text in done.err


# -- errors ---------------------------------------------------------------------------

ERRORS: list[tuple[str, list[str], str, str]] = [
    # id, argv (run in the fixture's directory), kind, text the message must contain
    (
        "missing-file",
        ["inspect", "nope.kiln", "--code", "f32", "--shape", "2"],
        "FILE",
        "No such file",
    ),
    (
        "shape-syntax",
        ["inspect", "f32x3.kiln", "--code", "f32", "--shape", "3;4"],
        "SHAPE",
        "--shape expects comma-separated non-negative integers such as 3,4",
    ),
    (
        "negative-dim",
        ["decode", "f32x3.kiln", "--code", "f32", "--shape=-1,2", "out.npy"],
        "SHAPE",
        "expected shape[0] in 0..2**63-1, found -1",
    ),
    ("code-name", ["inspect", "f32x3.kiln", "--code", "f33", "--shape", "3"], "TYPE", "--code: "),
    (
        "reserved-code",
        ["inspect", "f32x3.kiln", "--code", "20", "--shape", "3"],
        "TYPE",
        "found 20 (0x0014): codes 20-4095 are reserved",
    ),
    (
        "offset-syntax",
        ["inspect", "f32x3.kiln", "--code", "u8", "--shape", "1", "--offset", "3.5"],
        "TYPE",
        "--offset expects a byte offset >= 0 (such as 64 or 0x40), got '3.5'",
    ),
    (
        "offset-negative",
        ["inspect", "f32x3.kiln", "--code", "u8", "--shape", "1", "--offset", "-3"],
        "TYPE",
        "--offset: expected offset to be an integer in 0..",
    ),
    (
        "bool-byte",
        ["decode", "f32x3.kiln", "--code", "bool", "--shape", "12", "out.npy"],
        "TYPE",
        "expected byte 0x00 or 0x01, found 0x80 at element 2",
    ),
    (
        "padding-nibble",
        ["decode", "f0.kiln", "--code", "e2m1", "--shape", "1", "out.npy"],
        "TYPE",
        "padding (high) nibble",
    ),
    (
        "opaque-no-layout",
        ["decode", "f32x3.kiln", "--code", "4096", "--shape", "3", "out.npy"],
        "TYPE",
        "needs --layout NAME:BLOCK_SIZE",
    ),
    (
        "layout-syntax",
        ["inspect", "f32x3.kiln", "--code", "4096", "--layout", "q4", "--shape", "3"],
        "TYPE",
        "--layout expects NAME:BLOCK_SIZE",
    ),
    (
        "layout-on-closed",
        ["inspect", "f32x3.kiln", "--code", "f32", "--layout", "q:4", "--shape", "3"],
        "TYPE",
        "is a closed code and takes no layout",
    ),
    ("void-npy-no-code", ["encode", "bf16.npy", "out.kiln"], "TYPE", "holds void 'V2' elements"),
    (
        "void-npy-wrong-width",
        ["encode", "bf16.npy", "out.kiln", "--code", "e2m1"],
        "TYPE",
        "are 1 byte(s) each in numpy, found void elements of 2",
    ),
    (
        "void-npy-opaque-code",
        ["encode", "bf16.npy", "out.kiln", "--code", "4096"],
        "TYPE",
        "expected the --code of a closed type (1-19)",
    ),
    (
        "never-casts",
        ["encode", "f32.npy", "out.kiln", "--code", "f64"],
        "TYPE",
        "kiln_np never casts",
    ),
    (
        "no-kiln-code",
        ["encode", "c64.npy", "out.kiln"],
        "TYPE",
        "'c64.npy': dtype complex64 (<c8) has no Kiln code",
    ),
    ("object-npy", ["encode", "obj.npy", "out.kiln"], "TYPE", "holds Python objects"),
    ("not-npy", ["encode", "f32x3.kiln", "out.kiln"], "TYPE", "expected a .npy file"),
    (
        "truncated-npy",
        ["encode", "cut.npy", "out.kiln"],
        "LENGTH",
        "expected 12 data bytes for shape (3,) of float32, found 11",
    ),
    (
        "bad-nibble-npy",
        ["encode", "i4bad.npy", "out.kiln", "--code", "i4"],
        "TYPE",
        "expected storage bytes 0x00-0x0f, found 0x1f at element 1",
    ),
    ("unwritable", ["encode", "f32.npy", "no/such/dir/out.kiln"], "FILE", "cannot write"),
    ("missing-args", ["decode", "f32x3.kiln"], "USAGE", "the following arguments are required"),
    ("unknown-command", ["frobnicate"], "USAGE", "invalid choice: 'frobnicate'"),
    ("f1-npy-no-code", ["encode", "e5m2.npy", "out.kiln"], "TYPE", "holds void 'V1' elements"),
    ("onnx-missing-model", ["onnx", "nope.onnx", "outdir"], "FILE", "cannot read 'nope.onnx'"),
    ("onnx-not-a-model", ["onnx", "f32x3.kiln", "outdir"], "TYPE", "expected an ONNX model"),
]


@pytest.mark.parametrize(
    ("case", "argv", "kind", "text"),
    [pytest.param(*e, id=e[0], marks=needs("onnx") if e[1][0] == "onnx" else ()) for e in ERRORS],
)
def test_errors_are_one_clean_line(
    work: Path, run: Runner, case: str, argv: list[str], kind: str, text: str
) -> None:
    np.save("bf16.npy", np.ones(3, ml_dtypes.bfloat16))
    np.save("e5m2.npy", np.ones(3, ml_dtypes.float8_e5m2))  # descr '<f1'
    np.save("c64.npy", np.ones(3, np.complex64))
    np.save("obj.npy", np.array([None, 1], dtype=object), allow_pickle=True)
    np.save("i4bad.npy", np.array([1, 0x1F, 2], np.uint8).view(np.dtype("V1")))
    Path("cut.npy").write_bytes(Path("f32.npy").read_bytes()[:-1])
    run(*argv).error(kind, text)
    assert not Path("out.npy").exists()
    assert not Path("out.kiln").exists()
    assert not [p.name for p in work.iterdir() if p.name.endswith(".part")]  # no temp file


def test_version(run: Runner) -> None:
    assert run("--version").ok() == f"kiln-np {kiln_np.__version__}\n"


# -- help and progress ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["golden", "encode", "decode", "inspect", "onnx"])
def test_help_shows_an_example(command: str, run: Runner) -> None:
    assert f"example:\n  kiln-np {command} " in run(command, "--help").ok()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal() -> None:
    tty, pipe = _Terminal(), io.StringIO()
    for stream in (tty, pipe):
        with Progress(4, "export", stream) as bar:
            for _ in range(4):
                bar.advance(1)
    assert pipe.getvalue() == ""
    drawn = tty.getvalue()
    assert drawn.startswith("\rexport [")
    assert drawn.endswith("] 100.0%\n")


# -- onnx -----------------------------------------------------------------------------


def _model(directory: Path, location: str = "model.data") -> tuple[Path, list[onnx.TensorProto]]:
    """A small model: closed types, an odd INT4 count, an ONNX-only type, external data."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, "layer/0:w"),
        helper.make_tensor("scale", TensorProto.FLOAT16, [2], [1.5, -0.0]),
        helper.make_tensor("q8", TensorProto.FLOAT8E4M3FN, [4], b"\x38\xb8\x7e\x00", raw=True),
        helper.make_tensor("q4", TensorProto.INT4, [3], b"\x8f\x07", raw=True),
        helper.make_tensor("mask", TensorProto.BOOL, [2], [True, False]),
        helper.make_tensor("fnuz", TensorProto.FLOAT8E4M3FNUZ, [2], b"\x80\x41", raw=True),
        numpy_helper.from_array(np.arange(64, dtype=np.int64), "big"),
    ]
    graph = helper.make_graph([], "g", [], [], initializer=inits)
    path = directory / "model.onnx"
    # Tensors of 100 bytes or more go to the external file: the export maps them.
    onnx.save_model(
        helper.make_model(graph),
        str(path),
        save_as_external_data=True,
        location=location,
        size_threshold=100,
    )
    return path, inits


@needs("onnx")
def test_onnx_export_manifest_and_payloads(work: Path, run: Runner) -> None:
    from onnx import numpy_helper

    path, inits = _model(work)
    assert run("onnx", path.name, "out").ok() == (
        "out: 7 payload files, 550 payload bytes, manifest.json\n"
    )
    printed = json.loads(run("onnx", path.name, "out-json", "--json").ok())
    manifest = json.loads((work / "out" / "manifest.json").read_text())
    assert printed == json.loads((work / "out-json" / "manifest.json").read_text())
    assert printed["tensors"] == manifest["tensors"]
    assert manifest["format"] == "kiln-np-weights/1"
    entries = manifest["tensors"]
    assert [e["name"] for e in entries] == [t.name for t in inits]
    assert [list(e) for e in entries] == [_documented_keys("onnx-manifest")] * len(entries)
    assert entries[0]["file"] == "0000_layer_0_w.kiln"
    for entry, tensor in zip(entries, inits, strict=True):
        data = (work / "out" / entry["file"]).read_bytes()
        assert len(data) == entry["byte_length"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        layout = entry["layout"] and kiln_np.Layout(
            entry["layout"]["name"], entry["layout"]["block_size"]
        )
        arr = kiln_np.to_numpy(entry["code"], data, entry["shape"], layout)
        if layout is None:
            want = numpy_helper.to_array(tensor)
            assert entry["dtype"] == str(want.dtype)
            assert bits(arr) == bits(want)
        else:  # an ONNX-only type travels opaque, one block per element, bits intact
            assert entry["dtype"] is None
            assert entry["code"] >= 4096
            assert arr.tobytes() == tensor.raw_data


@needs("onnx")
@pytest.mark.parametrize("location", ["0006_big.kiln", "manifest.json"])
def test_onnx_export_never_writes_a_file_it_reads(work: Path, run: Runner, location: str) -> None:
    # The external data file has the name an output would get, in the output folder.
    path, _ = _model(work, location)
    before = _listing(work)
    run("onnx", path.name, ".").error("FILE", f"cannot write '{location}': it is the input file")
    run("onnx", path.name, str(work)).error("FILE", "same device and inode")
    # An output folder that does not exist yet but will be this one.
    run("onnx", path.name, "new/..").error("FILE", "same device and inode")
    assert _listing(work) == before
    run("onnx", path.name, "elsewhere").ok()


@needs("onnx")
def test_onnx_export_never_writes_over_the_model(work: Path, run: Runner) -> None:
    from onnx import helper

    graph = helper.make_graph([], "g", [], [], [helper.make_tensor("m", 1, [1], [1.0])])
    onnx.save_model(helper.make_model(graph), str(work / "0000_m.kiln"))
    before = _listing(work)
    run("onnx", "0000_m.kiln", ".").error("FILE", "it is the input file '0000_m.kiln'")
    assert _listing(work) == before


@needs("onnx")
@pytest.mark.parametrize("suffix", [".json", ".textproto", ".onnxtxt"])
def test_onnx_model_path_suffix_does_not_pick_a_parser(
    work: Path, run: Runner, suffix: str
) -> None:
    path, _ = _model(work)
    os.rename(path, work / f"model{suffix}")
    assert "7 payload files" in run("onnx", f"model{suffix}", "out").ok()
    Path(f"text{suffix}").write_text('ir_version: 8\ngraph { name: "g" }\n')
    run("onnx", f"text{suffix}", "out2").error("TYPE", "expected an ONNX model")


@needs("onnx")
def test_onnx_non_utf8_tensor_name_is_one_line(work: Path, run: Runner) -> None:
    from onnx import helper

    graph = helper.make_graph([], "g", [], [], [helper.make_tensor("NAME", 1, [1], [1.0])])
    data = helper.make_model(graph).SerializeToString().replace(b"NAME", b"\xff\xfeN\x80")
    Path("bad.onnx").write_bytes(data)
    done = run("onnx", "bad.onnx", "out")
    assert done.status == 2
    assert done.err.count("\n") == 1, done.err
    assert done.err.startswith("kiln-np: TYPE: ")


@needs("onnx")
def test_onnx_progress_bar_on_a_terminal(
    work: Path, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = _model(work)
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    run("onnx", path.name, "out").ok()
    drawn = terminal.getvalue()
    assert drawn.startswith("\ronnx model.onnx [")
    assert drawn.endswith("] 100.0%\n")


# -- convert: what it writes ----------------------------------------------------------


@pytest.fixture
def weights(work: Path) -> Path:
    """``m.safetensors`` in the working directory: three f32 tensors of 16 bytes."""
    path = work / "m.safetensors"
    kiln_np.save_weights(
        path, {f"t{i}": np.full(4, i, np.float32) for i in range(3)}, format="safetensors"
    )
    return path


@pytest.mark.parametrize(
    ("dst", "to", "found"),
    [
        ("old.gguf", "gguf", "it exists (a file of 9 bytes); pass --force to replace it"),
        ("olddir", "kiln", "it exists (a directory, not empty); pass --force to replace it"),
    ],
    ids=["file", "directory"],
)
def test_convert_refuses_an_existing_output_without_force(
    weights: Path, run: Runner, dst: str, to: str, found: str
) -> None:
    if to == "kiln":
        Path(dst).mkdir()
        Path(dst, "notes.txt").write_text("mine")
    else:
        Path(dst).write_bytes(b"old model")
    before = _listing(weights.parent)
    run("convert", weights.name, dst, "--to", to).error("FILE", f"cannot write {dst!r}: {found}")
    assert _listing(weights.parent) == before
    assert not [p for p in weights.parent.iterdir() if ".kiln-np-" in p.name]
    if to == "gguf":
        forced = run("convert", weights.name, dst, "--to", to, "--force")
        assert (forced.status, forced.err) == (0, "replacing old.gguf (a file of 9 bytes)\n")
        with kiln_np.open_weights(dst) as w:
            assert list(w) == ["t0", "t1", "t2"]


def test_convert_into_an_empty_directory_or_a_dangling_link(weights: Path, run: Runner) -> None:
    Path("empty").mkdir()
    run("convert", weights.name, "empty", "--to", "kiln").ok()
    os.symlink("target.safetensors", "link.safetensors")  # writes through: nothing replaced
    run("convert", weights.name, "link.safetensors", "--to", "safetensors").ok()
    with kiln_np.open_weights("target.safetensors") as w:
        assert list(w) == ["t0", "t1", "t2"]


def test_convert_refuses_gguf_splits_of_its_name(weights: Path, run: Runner) -> None:
    # splits of another count would be left beside the new ones: refused as well
    Path("s-00001-of-00003.gguf").write_bytes(b"old")
    Path("s-00003-of-00003.gguf").write_bytes(b"old")
    run("convert", weights.name, "s.gguf", "--to", "gguf", "--max-shard-size", "16").error(
        "FILE",
        "cannot write 's.gguf' as splits: 's-00001-of-00003.gguf', 's-00003-of-00003.gguf' "
        "exist; pass --force to replace them",
    )
    assert Path("s-00001-of-00003.gguf").read_bytes() == b"old"
    forced = run(
        "convert", weights.name, "s.gguf", "--to", "gguf", "--max-shard-size", "16", "--force"
    )
    assert (forced.status, forced.err) == (
        0,
        "replacing s-00001-of-00003.gguf (a split)\nreplacing s-00003-of-00003.gguf (a split)\n",
    )
    assert Path("s-00001-of-00003.gguf").read_bytes() != b"old"


def test_force_replaces_the_old_model_whole_not_beside_it(weights: Path, run: Runner) -> None:
    # Issue 36 item 7: --force --max-shard-size left the old DST and older split sets
    # in place, still opening as the old model, though they were "replaced".
    run("convert", weights.name, "m.gguf", "--to", "gguf").ok()  # the old model: one file
    for i in (1, 2, 3):  # and an older set of three splits of its name
        Path(f"m-0000{i}-of-00003.gguf").write_bytes(b"old")
    done = run("convert", weights.name, "m.gguf", "--max-shard-size", "32B", "--force")
    assert done.status == 0
    assert sorted(p.name for p in Path().glob("m*.gguf")) == [
        "m-00001-of-00002.gguf",
        "m-00002-of-00002.gguf",
    ]
    assert done.err.startswith("replacing m.gguf (a file of ")
    with kiln_np.open_weights("m-00001-of-00002.gguf") as w:
        assert list(w) == ["t0", "t1", "t2"]
    # the other way: one file over a split set removes the set (refused without --force)
    run("convert", weights.name, "m.gguf").error(
        "FILE",
        "cannot write 'm.gguf': splits of its name exist ('m-00001-of-00002.gguf', "
        "'m-00002-of-00002.gguf'); pass --force to replace them",
    )
    forced = run("convert", weights.name, "m.gguf", "--force")
    assert forced.status == 0
    assert sorted(p.name for p in Path().glob("m*.gguf")) == ["m.gguf"]


def test_force_never_writes_over_an_input(weights: Path, run: Runner) -> None:
    before = weights.read_bytes()
    run("convert", weights.name, weights.name, "--to", "safetensors", "--force").error(
        "FILE", "it is the input file"
    )
    assert weights.read_bytes() == before


def test_the_python_api_replaces_as_numpy_save_does(weights: Path) -> None:
    kiln_np.save_weights(weights, {"w": np.ones(2, np.float32)}, format="safetensors")
    with kiln_np.open_weights(weights) as w:
        assert list(w) == ["w"]


SIZES = [
    ("5GB", 5 * 10**9),
    ("500MB", 500 * 10**6),
    ("2GiB", 2 * 2**30),
    ("1.5GB", 15 * 10**8),
    ("1.5KiB", 1536),
    ("0.001KB", 1),
    ("64kB", 64_000),
    ("3mib", 3 * 2**20),
    ("1TiB", 2**40),
    ("4096B", 4096),
    ("4096", 4096),
    ("0x40", 64),
    (" 7 GB ", 7 * 10**9),
]


@pytest.mark.parametrize(("text", "size"), SIZES, ids=[t for t, _ in SIZES])
def test_sizes_read_as_hugging_face_reads_them(text: str, size: int) -> None:
    assert args.parse_size(text) == size


REFUSED_SIZES = [
    ("-5GB", "a size in bytes such as 5GB"),
    ("5Gb", "a lowercase b means bits"),
    ("100b", "a lowercase b means bits"),
    ("1.5B", "a whole number of bytes, found '1.5B'"),
    ("1.0001KB", "a whole number of bytes"),
    ("0", "a size of at least 1 byte"),
    ("0.0GB", "a size of at least 1 byte"),
    ("1e9", "a size in bytes"),
    (".5GB", "a size in bytes"),
    ("5PB", "a size in bytes"),
    ("5 G B", "a size in bytes"),
    ("1" * 41 + "GB", "at most 40 digits, found one of 41 digits"),
    ("0." + "1" * 40 + "GB", "at most 40 digits, found one of 41 digits"),
]


@pytest.mark.parametrize(("text", "found"), REFUSED_SIZES, ids=[t[:12] for t, _ in REFUSED_SIZES])
def test_malformed_sizes_are_usage(weights: Path, run: Runner, text: str, found: str) -> None:
    done = run("convert", weights.name, "o.gguf", "--to", "gguf", f"--max-shard-size={text}")
    assert found in done.error("USAGE", "argument --max-shard-size: expected ")
    assert not Path("o.gguf").exists()


def test_convert_names_the_files_it_writes(weights: Path, run: Runner) -> None:
    out = run("convert", weights.name, "s.gguf", "--to", "gguf", "--max-shard-size", "32B").ok()
    splits = ["s-00001-of-00002.gguf", "s-00002-of-00002.gguf"]
    assert sorted(p.name for p in weights.parent.glob("s*")) == splits
    assert out == f"{', '.join(splits)}: 3 tensors, 48 payload bytes, safetensors -> gguf\n"
    sub = weights.parent / "sub"
    sub.mkdir()
    record = json.loads(
        run(
            "convert", weights.name, "sub/t.gguf", "--to", "gguf", "--max-shard-size=16B", "--json"
        ).ok()
    )
    assert record["files"] == [f"sub/t-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert all(Path(f).is_file() for f in record["files"])
    out = run(
        "convert", weights.name, "sub/u.gguf", "--to", "gguf", "--max-shard-size", "1KiB"
    ).ok()
    assert out.startswith("sub/u.gguf: 3 tensors")  # one split: the file itself
    for dst, to in [("one.safetensors", "safetensors"), ("kdir/", "kiln")]:
        assert json.loads(run("convert", weights.name, dst, "--to", to, "--json").ok())[
            "files"
        ] == [dst]
    record = json.loads(
        run(
            "convert", weights.name, "ckpt", "--to", "safetensors", "--max-shard-size=16B", "--json"
        ).ok()
    )
    assert record["files"] == ["ckpt"]  # a sharded checkpoint is its directory


def test_save_weights_returns_the_paths_it_wrote(weights: Path) -> None:
    tensors = {f"t{i}": np.ones(4, np.float32) for i in range(3)}
    written = kiln_np.save_weights("m.gguf", tensors, format="gguf", max_shard_size=16)
    assert written == [str(weights.parent / f"m-0000{i}-of-00003.gguf") for i in (1, 2, 3)]
    assert kiln_np.save_weights("k", tensors, format="kiln") == [str(weights.parent / "k")]


# -- what open_weights (and ls) takes: folders, and what is no weight file ---------------


def _torch_zip(path: Path) -> None:
    """A zip laid out as torch.save (torch >= 1.6) writes one: the pickle first."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": [1.0]}, protocol=2))
        z.writestr("archive/data/0", bytes(8))


def _npz(path: Path) -> None:
    """What np.savez writes: a zip of .npy members, no pickle."""
    with path.open("wb") as f:
        np.savez(f, w=np.ones(2))


def test_a_hugging_face_folder_opens_as_its_one_weight_file(work: Path, run: Runner) -> None:
    folder = work / "tiny-model"
    folder.mkdir()
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    safetensors.numpy.save_file({"w": arr}, str(folder / "model.safetensors"))  # the oracle writes
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text("{}")
    _torch_zip(folder / "pytorch_model.bin")  # beside it, as hub repositories often have
    with kiln_np.open_weights(folder) as w:
        assert (w.format, w.path, list(w)) == (
            "safetensors",
            str(folder / "model.safetensors"),
            ["w"],
        )
        assert bits(w["w"].numpy()) == bits(arr)
    listed = run("ls", "tiny-model").ok()
    assert listed.endswith("1 tensor, 6 parameters, 24 B (24 payload bytes), safetensors\n")


@needs("onnx")
def test_a_folder_of_an_onnx_model_and_its_external_data(work: Path) -> None:
    path, inits = _model(work)  # model.onnx and model.data
    with kiln_np.open_weights(work) as w:
        assert (w.format, w.path, len(w)) == ("onnx", str(path), len(inits))


def test_a_folder_of_gguf_splits_opens_the_set(work: Path) -> None:
    tensors = {f"t{i}": np.full(4, i, np.float32) for i in range(3)}
    kiln_np.save_weights(work / "m.gguf", tensors, format="gguf", max_shard_size=16)
    for p in work.iterdir():
        if not p.name.startswith("m-"):
            p.unlink()
    with kiln_np.open_weights(work) as w:
        assert (w.format, list(w)) == ("gguf", ["t0", "t1", "t2"])


@pytest.mark.parametrize(
    ("names", "found"),
    [
        (["a.safetensors", "b.gguf"], "found 2 weight files ('a.safetensors', 'b.gguf')"),
        (  # shards without their index: which is the model is not said
            ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
            "found 2 weight files ('model-00001-of-00002.safetensors', ",
        ),
        ([], "found neither a manifest nor an index nor a weight file"),
        (["notes.bin"], "found neither"),  # a .bin that is no pickle is just a file
        (["pytorch_model.bin"], "found only pickles ('pytorch_model.bin'): kiln_np does not"),
    ],
    ids=["two", "shards-without-index", "nothing", "bin-not-a-pickle", "pickles-only"],
)
def test_a_folder_of_other_than_one_weight_file_is_type_naming_them(
    work: Path, run: Runner, names: list[str], found: str
) -> None:
    folder = work / "f"
    folder.mkdir()
    for name in names:
        if name == "pytorch_model.bin":
            _torch_zip(folder / name)
        else:
            (folder / name).write_bytes(b"not read")
    (folder / "config.json").write_text("{}")
    err = run("ls", "f").error("TYPE", f"'{folder}': expected a directory holding manifest.json")
    assert found in err
    assert "one weight file (*.safetensors, *.gguf, *.onnx)" in err


@pytest.mark.parametrize(
    ("make", "found"),
    [
        (
            _torch_zip,
            "found a torch.save checkpoint (a zip archive holding the pickle 'archive/data.pkl')",
        ),
        (
            lambda p: p.write_bytes(pickle.dumps({"w": [1.0]}, protocol=2)),
            "found a Python pickle (protocol 2; torch.save's legacy .pt/.bin format)",
        ),
        (
            lambda p: p.write_bytes(pickle.dumps({"w": [1.0]}, protocol=4)),
            "found a Python pickle (protocol 4;",
        ),
        (
            _npz,
            "found a zip archive (torch.save writes .pt and .bin checkpoints so",
        ),
    ],
    ids=["torch-zip", "legacy-pickle", "pickle-protocol-4", "npz"],
)
def test_a_torch_checkpoint_says_what_it_is(
    work: Path, run: Runner, make: Callable[[Path], object], found: str
) -> None:
    make(work / "model.pt")
    err = run("ls", "model.pt").error("TYPE", f"'{work / 'model.pt'}': expected a weight file, ")
    assert found in err
    assert "kiln_np does not execute pickles" in err
    assert "safetensors.torch.save_file(torch.load(path, weights_only=True)" in err


@needs("onnx")
def test_inspect_a_tensor_in_onnx_external_data(work: Path, run: Runner) -> None:
    path, _ = _model(work)  # "big" (64 int64) is in model.data, "scale" inside the model
    record = json.loads(run("inspect", path.name, "--tensor", "big", "--json").ok())
    with kiln_np.open_weights(path) as w:
        assert (record["file"], record["offset"]) == (str(work / "model.data"), w["big"].offset)
    assert (record["min"], record["max"], record["byte_length"]) == (0, 63, 512)
    run("inspect", path.name, "--tensor", "scale").error("TYPE", "is held in memory, not at")


def test_the_commands_table_names_every_option() -> None:
    """docs/cli.md's table of commands names every option of every command, and
    every choice of an option that has choices (it had lost ``--to hf``,
    ``--outtype``, ``--names`` and ``--scheduler``)."""
    import argparse

    rows: dict[str, str] = {}
    for cell in re.findall(r"^\| `(\w[\w-]*) ([^`]*)` \|", (DOCS / "cli.md").read_text(), re.M):
        rows[cell[0]] = rows.get(cell[0], "") + " " + cell[1]
    top = cli_entry.parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, sub in commands.choices.items():
        assert name in rows, f"docs/cli.md's table has no row for {name}"
        for action in sub._actions:
            flags = [f for f in action.option_strings if f not in ("-h", "--help")]
            shown = [f for f in flags if re.search(re.escape(f) + r"(?![\w-])", rows[name])]
            if flags and not shown:
                missing.append(f"{name} {flags[-1]}")
            elif flags and action.choices is not None:
                # shown as its metavar (``--sort METRIC``) or as every choice
                want = action.metavar or "{" + ",".join(map(str, action.choices)) + "}"
                if not re.search(re.escape(f"{shown[0]} {want}"), rows[name]):
                    missing.append(f"{name} {shown[0]} {want}")
    assert missing == []
