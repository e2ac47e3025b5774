"""The installed ``kiln-np`` entry point, run as a subprocess on real files.

Subprocesses cost ~0.3 s each, so independent ones are started together and
the exhaustive per-code matrix runs ``main()`` in process.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest

import kiln_np
from kiln_np import DTYPES, from_numpy
from kiln_np.cli import _Progress, main

_EXE = shutil.which("kiln-np", path=str(Path(sys.executable).parent)) or shutil.which("kiln-np")
DOCS = Path(__file__).resolve().parents[1] / "docs"


def _cli() -> list[str]:
    assert _EXE is not None, "kiln-np is not installed next to this interpreter"
    return [_EXE]


def _run_all(
    commands: Sequence[Sequence[str]], cwd: Path, timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """Run the commands at the same time; results in order."""
    procs = [
        subprocess.Popen(
            [*_cli(), *c], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for c in commands
    ]
    done = []
    for cmd, proc in zip(commands, procs, strict=False):
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(list(cmd), proc.returncode, out, err))
    return done


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar when stderr is not a terminal
    return done.stdout


def _bytes(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr).view(np.uint8).tobytes()


# -- encode / decode ------------------------------------------------------------------

ROUND_TRIPS = {
    # name: (array, code flag or None)
    "f32-fortran": (np.asfortranarray(np.arange(12, dtype="<f4").reshape(3, 4) - 5.5), None),
    "bf16": (np.array([1.0, -0.0, np.nan, 3.5], ml_dtypes.bfloat16), "bf16"),
    "e2m1-odd": (np.array([0.5, -6.0, 1.0], ml_dtypes.float4_e2m1fn), "18"),
    "bool": (np.array([[True, False], [False, True]]), None),
    "u64-scalar": (np.array(2**64 - 1, np.uint64), "u64"),
}


def test_encode_then_decode_subprocess(tmp_path: Path) -> None:
    names = list(ROUND_TRIPS)
    for name in names:
        np.save(tmp_path / f"{name}.npy", ROUND_TRIPS[name][0])
    encodes = []
    for i, name in enumerate(names):
        code = ROUND_TRIPS[name][1]
        json_flag = ["--json"] if i % 2 else []
        encodes.append(
            [
                "encode",
                f"{name}.npy",
                f"{name}.kiln",
                *(["--code", code] if code else []),
                *json_flag,
            ]
        )
    decodes = []
    for name in names:
        arr = ROUND_TRIPS[name][0]
        payload = from_numpy(arr)
        decodes.append(
            [
                "decode",
                f"{name}.kiln",
                "--code",
                str(int(payload.code)),
                "--shape",
                ",".join(map(str, arr.shape)) or "()",
                f"{name}.back.npy",
                "--json",
            ]
        )
    for i, (name, done) in enumerate(zip(names, _run_all(encodes, tmp_path), strict=False)):
        arr = ROUND_TRIPS[name][0]
        payload = from_numpy(arr)
        out = _ok(done)
        assert (tmp_path / f"{name}.kiln").read_bytes() == bytes(payload.data)
        shape = "x".join(map(str, arr.shape)) or "()"
        if i % 2:
            record = json.loads(out)
            assert record == {
                "format": "kiln-np-encode/1",
                "input": f"{name}.npy",
                "output": f"{name}.kiln",
                "code": int(payload.code),
                "name": kiln_np.dtype_info(payload.code).name,
                "dtype": str(arr.dtype),
                "layout": None,
                "shape": list(arr.shape),
                "payload_bytes": payload.nbytes,
            }
        else:
            assert out == (
                f"{name}.kiln: {kiln_np._table.code_label(int(payload.code))}, dtype {arr.dtype}, "
                f"shape {shape}, {payload.nbytes} payload bytes\n"
            )
    for name, done in zip(names, _run_all(decodes, tmp_path), strict=False):
        arr = ROUND_TRIPS[name][0]
        assert json.loads(_ok(done))["output"] == f"{name}.back.npy"
        back = np.load(tmp_path / f"{name}.back.npy")
        assert back.shape == arr.shape
        if arr.dtype.isbuiltin == 2:  # ml_dtypes: numpy's format stores void of the same width
            assert back.dtype == np.dtype(f"V{arr.dtype.itemsize}")
        else:
            assert back.dtype == arr.dtype
        assert _bytes(back) == _bytes(arr)


def _sample(row: kiln_np.DType) -> np.ndarray:
    if row.bits <= 8:
        values = kiln_np.bit_values(row.dtype)
        return np.resize(values, 2 * values.size + 1).reshape(-1, 1)  # odd count for 4-bit
    return (np.arange(-3, 4).astype(row.dtype)).reshape(7, 1)


@pytest.mark.parametrize("row", DTYPES, ids=[r.name for r in DTYPES])
def test_every_code_round_trips_in_process(
    row: kiln_np.DType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arr = _sample(row)
    src, kiln, back = tmp_path / "a.npy", tmp_path / "a.kiln", tmp_path / "b.npy"
    np.save(src, arr)
    assert main(["encode", str(src), str(kiln), "--code", row.name]) == 0
    assert kiln.read_bytes() == bytes(from_numpy(arr).data)
    shape = ",".join(map(str, arr.shape))
    assert (
        main(["decode", str(kiln), "--code", str(int(row.code)), "--shape", shape, str(back)]) == 0
    )
    assert _bytes(np.load(back)) == _bytes(arr)
    assert main(["inspect", str(kiln), "--code", row.name, "--shape", shape, "--json"]) == 0
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    described = kiln_np.describe(arr).to_dict()
    assert {k: record[k] for k in described} == json.loads(json.dumps(described))


def test_decode_opaque_blocks_at_an_offset(tmp_path: Path) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"HEADER" + bytes(range(12)) + b"tail")
    out = tmp_path / "q.npy"
    argv = ["decode", str(blob), "--code", "4100", "--layout", "q:4", "--shape", "3"]
    assert main([*argv, "--offset", "6", str(out)]) == 0
    back = np.load(out)
    assert back.dtype == np.uint8
    assert back.shape == (3, 4)
    assert back.tobytes() == bytes(range(12))


# -- inspect --------------------------------------------------------------------------


def test_inspect_maps_only_the_payload_of_a_huge_sparse_file(tmp_path: Path) -> None:
    # 16 GiB of holes, then the payload, then 3 bytes: reading the file instead of
    # mapping the payload's pages would take far longer than the timeout allows.
    values = np.array([1.0, 1.0, -2.0, np.nan, 448.0, 0.0], ml_dtypes.float8_e4m3fn)
    offset = 16 << 30
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(offset)
        f.seek(offset)
        f.write(_bytes(values) + b"xyz")
    argv = ["inspect", "big.bin", "--code", "f8e4m3", "--shape", "2,3", "--offset", str(offset)]
    text_done, json_done = _run_all([argv, [*argv, "--json"]], tmp_path, timeout=60)
    record = json.loads(_ok(json_done))
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
    text = _ok(text_done)
    assert "histogram         5 of 256 bit patterns used" in text
    assert re.search(r"^  0x38 +1 +2 +33\.3%$", text, re.M)
    assert re.search(r"^min / max +-2\.0 / 448\.0$", text, re.M)


def test_inspect_opaque_payload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = tmp_path / "q.bin"
    blob.write_bytes(bytes(range(10)))
    argv = ["inspect", str(blob), "--code", "4096", "--layout", "q4:5", "--shape", "2"]
    assert main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["layout"] == {"name": "q4", "block_size": 5}
    assert (record["code"], record["name"], record["count"]) == (4096, None, 2)
    assert record["first_bits"] == ["0001020304", "0506070809"]
    assert main(argv) == 0
    assert "first blocks      0001020304 0506070809" in capsys.readouterr().out


def _documented_keys(section: str) -> list[str]:
    text = (DOCS / "cli.md").read_text()
    block = text.split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_inspect_json_keys_are_the_documented_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = tmp_path / "a.bin"
    blob.write_bytes(b"\x00\x3c" * 3)
    assert main(["inspect", str(blob), "--code", "f16", "--shape", "3", "--json"]) == 0
    closed = json.loads(capsys.readouterr().out)
    assert (
        main(["inspect", str(blob), "--code", "5000", "--layout", "x:2", "--shape", "3", "--json"])
        == 0
    )
    opaque = json.loads(capsys.readouterr().out)
    assert list(closed) == list(opaque) == _documented_keys("inspect-json")


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
        "shape[0] must be in 0..2**63-1",
    ),
    (
        "code-name",
        ["inspect", "f32x3.kiln", "--code", "f33", "--shape", "3"],
        "TYPE",
        "--code expects a code number",
    ),
    (
        "reserved-code",
        ["inspect", "f32x3.kiln", "--code", "20", "--shape", "3"],
        "TYPE",
        "found 20 (0x0014): codes 20-4095 are reserved",
    ),
    (
        "short-file",
        ["decode", "f32x3.kiln", "--code", "f32", "--shape", "4", "out.npy"],
        "LENGTH",
        "expected 16 bytes at offset 0, found 12",
    ),
    (
        "offset-past-end",
        ["inspect", "f32x3.kiln", "--code", "u8", "--shape", "1", "--offset", "12"],
        "LENGTH",
        "expected 1 bytes at offset 12, found 0",
    ),
    (
        "offset-syntax",
        ["inspect", "f32x3.kiln", "--code", "u8", "--shape", "1", "--offset", "-3"],
        "TYPE",
        "--offset expects a byte offset >= 0, got '-3'",
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
        "never-casts",
        ["encode", "f32.npy", "out.kiln", "--code", "f64"],
        "TYPE",
        "kiln_np never casts",
    ),
    (
        "no-kiln-code",
        ["encode", "c64.npy", "out.kiln"],
        "TYPE",
        "dtype complex64 (<c8) has no Kiln code",
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


@pytest.fixture(scope="module")
def error_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    work = tmp_path_factory.mktemp("errors")
    (work / "f32x3.kiln").write_bytes(np.array([1, 2, 3], "<f4").tobytes())
    (work / "f0.kiln").write_bytes(b"\xf0")
    np.save(work / "bf16.npy", np.ones(3, ml_dtypes.bfloat16))
    np.save(work / "f32.npy", np.ones(3, np.float32))
    np.save(work / "e5m2.npy", np.ones(3, ml_dtypes.float8_e5m2))  # descr '<f1'
    np.save(work / "c64.npy", np.ones(3, np.complex64))
    np.save(work / "obj.npy", np.array([None, 1], dtype=object), allow_pickle=True)
    np.save(work / "i4bad.npy", np.array([1, 0x1F, 2], np.uint8).view(np.dtype("V1")))
    np.save(work / "cut.npy", np.ones(3, np.float32))
    whole = (work / "cut.npy").read_bytes()
    (work / "cut.npy").write_bytes(whole[:-1])
    runs = _run_all([argv for _, argv, _, _ in ERRORS], work)
    return {case: (work, done) for (case, *_), done in zip(ERRORS, runs, strict=False)}


@pytest.mark.parametrize(("case", "argv", "kind", "text"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_are_one_clean_line(
    error_runs: dict[str, tuple[Path, subprocess.CompletedProcess[str]]],
    case: str,
    argv: list[str],
    kind: str,
    text: str,
) -> None:
    work, done = error_runs[case]
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"kiln-np: {kind}: "), done.stderr
    assert text in done.stderr
    assert not (work / "out.npy").exists()
    assert not (work / "out.kiln").exists()
    assert not [p.name for p in work.iterdir() if p.name.endswith(".part")]  # no temp file


# -- help and progress ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["golden", "encode", "decode", "inspect", "onnx"])
def test_help_shows_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"example:\n  kiln-np {command} " in out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal() -> None:
    tty, pipe = _Terminal(), io.StringIO()
    for stream in (tty, pipe):
        with _Progress(4, "export", stream) as bar:
            for _ in range(4):
                bar.advance(1)
    assert pipe.getvalue() == ""
    drawn = tty.getvalue()
    assert drawn.startswith("\rexport [")
    assert drawn.endswith("] 100.0%\n")


# -- onnx -----------------------------------------------------------------------------


def _model(tmp_path: Path) -> tuple[Path, list[onnx.TensorProto]]:
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
    model = helper.make_model(graph)
    path = tmp_path / "model.onnx"
    # Tensors of 100 bytes or more go to model.data: the export maps them from there.
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="model.data", size_threshold=100
    )
    return path, inits


def test_onnx_export_manifest_and_payloads(tmp_path: Path) -> None:
    from onnx import numpy_helper

    path, inits = _model(tmp_path)
    text_done, json_done = _run_all(
        [["onnx", path.name, "out"], ["onnx", path.name, "out-json", "--json"]], tmp_path
    )
    assert _ok(text_done) == "out: 7 payload files, 550 payload bytes, manifest.json\n"
    printed = json.loads(_ok(json_done))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert printed == json.loads((tmp_path / "out-json" / "manifest.json").read_text())
    assert printed["tensors"] == manifest["tensors"]
    assert manifest["format"] == "kiln-np-onnx/1"
    entries = manifest["tensors"]
    assert [e["name"] for e in entries] == [t.name for t in inits]
    assert [list(e) for e in entries] == [_documented_keys("onnx-manifest")] * len(entries)
    assert entries[0]["file"] == "0000_layer_0_w.kiln"
    for entry, tensor in zip(entries, inits, strict=True):
        data = (tmp_path / "out" / entry["file"]).read_bytes()
        assert len(data) == entry["payload_bytes"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        layout = entry["layout"] and kiln_np.Layout(
            entry["layout"]["name"], entry["layout"]["block_size"]
        )
        arr = kiln_np.to_numpy(entry["code"], data, entry["shape"], layout)
        if layout is None:
            want = numpy_helper.to_array(tensor)
            assert entry["dtype"] == str(want.dtype)
            assert _bytes(arr) == _bytes(want)
        else:  # an ONNX-only type travels opaque, one block per element, bits intact
            assert entry["dtype"] is None
            assert entry["code"] >= 4096
            assert arr.tobytes() == tensor.raw_data


def test_onnx_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    import pty

    path, _ = _model(tmp_path)
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*_cli(), "onnx", path.name, "out"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=60,
            check=False,
        )
        os.close(follower)
        drawn = os.read(leader, 4096).decode()
    finally:
        os.close(leader)
    assert done.returncode == 0
    assert drawn.startswith("\ronnx model.onnx [")
    assert drawn.endswith("] 100.0%\r\n")  # the terminal turns "\n" into "\r\n"


def test_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    (tmp_path / "a.kiln").write_bytes(bytes(range(200)))
    reader, writer = os.pipe()
    os.close(reader)  # like `| head` that has already exited
    try:
        done = subprocess.run(
            [*_cli(), "inspect", "a.kiln", "--code", "u8", "--shape", "200"],
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
