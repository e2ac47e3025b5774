"""``kiln-np`` over weight files: ls, convert, inspect, onnx, their errors and help."""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, every_code, optional

import kiln_np
from kiln_np import Layout, Payload

if TYPE_CHECKING:
    import onnx
    from onnx import numpy_helper
else:
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")


# --------------------------------------------------------------------- command line


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from kiln_np import cli

    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_ls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m:1.safetensors"  # a ':' in a path is just a path
    tensors = {"embed:w": np.zeros((2, 3), np.float32), "s": np.zeros(2, ml_dtypes.float8_e8m0fnu)}
    kiln_np.save_weights(path, tensors, format="safetensors")
    status, out, _ = _cli(capsys, "ls", str(path))
    assert status == 0
    assert out.splitlines() == [
        "name     dtype    kiln  shape  size",
        "embed:w  F32      f32   2x3    24 B",
        "s        F8_E8M0  e8m0  2       2 B",
        "2 tensors, 8 parameters, 26 B (26 payload bytes), safetensors",
    ]
    status, out, _ = _cli(capsys, "ls", str(path), "--json")
    record = json.loads(out)
    assert record["weights_format"] == "safetensors"
    assert record["tensors"][0] == {
        "name": "embed:w",
        "format_dtype": "F32",
        "code": 2,
        "kiln": "f32",
        "layout": None,
        "shape": [2, 3],
        "block_shape": None,
        "byte_length": 24,
        "elements": 6,
        "parts": None,
    }


def test_cli_ls_gguf_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = Payload(0x4702, memoryview(bytes(36)), (2, 1), Layout("ggml.q4_0", 18))
    kiln_np.save_weights(tmp_path / "m.gguf", {"q": q}, format="gguf")
    record = json.loads(_cli(capsys, "ls", str(tmp_path / "m.gguf"), "--json")[1])
    assert record["tensors"][0]["kiln"] == "ggml.q4_0"
    assert record["tensors"][0]["layout"] == {"name": "ggml.q4_0", "block_size": 18}


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["ls", "missing.safetensors"], "kiln-np: FILE: cannot read 'missing.safetensors'"),
        (["ls", "junk.bin"], "kiln-np: TYPE: "),
        (["convert", "junk.bin", "out", "--to", "kiln"], "kiln-np: TYPE: "),
        (["convert", "a.safetensors", "o", "--to", "npz"], "kiln-np: USAGE: "),
        (["convert", "a.safetensors", "o.gguf", "--to", "gguf"], "kiln-np: TYPE: tensor 'u4'"),
        (
            ["convert", "a.safetensors", "o", "--to", "kiln", "--max-shard-size", "x"],
            "kiln-np: USAGE: ",
        ),
        (
            ["convert", "a.safetensors", "o", "--to", "kiln", "--max-shard-size", "9"],
            "kiln-np: TYPE: ",
        ),
        (["inspect", "a.safetensors", "--tensor", "nope"], "kiln-np: TYPE: "),
        (["inspect", "a.safetensors", "--tensor", "f", "--code", "f32"], "kiln-np: USAGE: "),
        (["inspect", "a.safetensors"], "kiln-np: USAGE: "),
    ],
)
def test_cli_weight_errors_are_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    line: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.bin").write_bytes(b"\x00junk")
    kiln_np.save_weights(
        tmp_path / "a.safetensors",
        {"f": np.ones(2, np.float32), "u4": np.ones(2, np.uint8)},
        format="safetensors",
    )
    from kiln_np import cli

    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        status = int(exc.code or 0)
    _, err = capsys.readouterr()
    assert status == 2
    assert err.startswith(line), err
    assert err.count("\n") == 1, err


def test_cli_convert_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tensors = every_code()
    del tensors["q4"], tensors["i4"], tensors["u4"]
    tensors["e2m1"] = tensors["e2m1"][:6]  # safetensors holds an even F4 count
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, tensors, format="safetensors", metadata={"format": "pt"})
    status, out, _ = _cli(capsys, "convert", str(src), str(tmp_path / "dir"), "--to", "kiln")
    assert status == 0
    assert out.endswith("safetensors -> kiln\n")
    status, out, _ = _cli(
        capsys,
        "convert",
        str(tmp_path / "dir"),
        str(tmp_path / "b.safetensors"),
        "--to",
        "safetensors",
        "--json",
    )
    record = json.loads(out)
    assert (record["from"], record["to"], record["metadata"]) == ("kiln", "safetensors", "carried")
    with kiln_np.open_weights(tmp_path / "b.safetensors") as b, kiln_np.open_weights(src) as a:
        assert dict(b.metadata) == {"format": "pt"}
        assert {n: bytes(t.payload().data) for n, t in a.items()} == {
            n: bytes(t.payload().data) for n, t in b.items()
        }


def test_cli_convert_drops_metadata_the_target_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kiln_np.save_weights(
        tmp_path / "m.gguf",
        {"w": np.ones(2, np.float32)},
        format="gguf",
        metadata={"n": np.uint32(3)},
    )
    status, out, _ = _cli(
        capsys, "convert", str(tmp_path / "m.gguf"), str(tmp_path / "m.st"), "--to", "safetensors"
    )
    assert status == 0
    assert "gguf metadata not carried" in out
    status, out, _ = _cli(
        capsys, "convert", str(tmp_path / "m.gguf"), str(tmp_path / "d"), "--to", "kiln"
    )
    with kiln_np.open_weights(tmp_path / "d") as d:
        assert d.metadata["n"] == 3


def test_cli_convert_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {f"t{i}": np.ones(4) for i in range(3)}, format="safetensors")
    status, _, _ = _cli(
        capsys,
        "convert",
        str(src),
        str(tmp_path / "ckpt"),
        "--to",
        "safetensors",
        "--max-shard-size",
        "0x40",
    )
    assert status == 0
    assert len(os.listdir(tmp_path / "ckpt")) == 3  # two shards and the index


def test_cli_convert_never_writes_over_its_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {"w": np.ones(2)}, format="safetensors")
    before = src.read_bytes()
    status, _, err = _cli(capsys, "convert", str(src), str(src), "--to", "safetensors")
    assert status == 2
    assert "it is the input file" in err
    kiln_np.save_weights(tmp_path / "dir", {"w": np.ones(2)}, format="kiln")
    status, _, err = _cli(
        capsys, "convert", str(tmp_path / "dir"), str(tmp_path / "dir"), "--to", "kiln"
    )
    assert status == 2
    assert "input" in err
    assert src.read_bytes() == before


def test_cli_convert_progress_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {"w": np.ones(1000)}, format="safetensors")
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert _cli(capsys, "convert", str(src), str(tmp_path / "d"), "--to", "kiln")[0] == 0
    drawn = terminal.getvalue()
    assert drawn.startswith(f"\rconvert {src} [")
    assert drawn.endswith("] 100.0%\n")
    # not on a pipe
    assert _cli(capsys, "convert", str(src), str(tmp_path / "e"), "--to", "kiln")[2] == ""


def test_cli_inspect_a_tensor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.safetensors"
    arr = np.array([1.0, -2.0, 0.5], np.float32)
    kiln_np.save_weights(path, {"x": np.ones(3, np.int8), "layer:0/w": arr}, format="safetensors")
    status, out, _ = _cli(capsys, "inspect", str(path), "--tensor", "layer:0/w", "--json")
    assert status == 0
    record = json.loads(out)
    assert record["file"] == str(path)
    assert record["shape"] == [3]
    assert record["min"] == -2.0
    with kiln_np.open_weights(path) as w:
        assert record["offset"] == w["layer:0/w"].offset


def _documented_keys(section: str) -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    block = text.split(f"<!-- {section} -->")[1].split(f"<!-- /{section} -->")[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_cli_json_keys_are_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.safetensors"
    kiln_np.save_weights(src, {"w": np.ones(2)}, format="safetensors")
    listed = json.loads(_cli(capsys, "ls", str(src), "--json")[1])
    assert list(listed) == _documented_keys("ls-json")
    assert list(listed["tensors"][0]) == _documented_keys("ls-tensor-json")
    meta = json.loads(_cli(capsys, "meta", str(src), "--json")[1])
    assert list(meta) == _documented_keys("meta-json")
    converted = json.loads(
        _cli(capsys, "convert", str(src), str(tmp_path / "d"), "--to", "kiln", "--json")[1]
    )
    assert list(converted) == _documented_keys("weights-convert-json")


def test_cli_onnx_writes_a_kiln_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arr = np.arange(6, dtype=np.float16).reshape(2, 3)
    graph = onnx.helper.make_graph(
        [], "g", [], [], initializer=[numpy_helper.from_array(arr, name="layer/0:w")]
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert _cli(capsys, "onnx", str(tmp_path / "m.onnx"), str(out))[0] == 0
    with kiln_np.open_weights(out, verify=True) as w:
        assert w.metadata["model"] == str(tmp_path / "m.onnx")
        assert bits(w["layer/0:w"].numpy()) == bits(arr)
    # again, over its own previous export: replaced whole
    assert _cli(capsys, "onnx", str(tmp_path / "m.onnx"), str(out))[0] == 0
    assert sorted(os.listdir(out)) == ["0000_layer_0_w.kiln", "manifest.json"]


@pytest.mark.parametrize("kernel", ["cross-device", "absent"])
def test_copies_through_python_where_the_kernel_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    import errno

    def refuse(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    if kernel == "absent":
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    else:
        monkeypatch.setattr(os, "copy_file_range", refuse)
    big = np.arange(3 << 20, dtype=np.uint8)  # several copy chunks
    kiln_np.save_weights(tmp_path / "a.st", {"w": big, "s": np.ones(3)}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as a:
        kiln_np.save_weights(tmp_path / "b.st", a, format="safetensors")
        kiln_np.save_weights(tmp_path / "d", a, format="kiln")
    for out in ("b.st", "d"):
        with kiln_np.open_weights(tmp_path / out, verify=True) as b:
            assert bytes(b["w"].payload().data) == big.tobytes()


@pytest.mark.parametrize("command", ["ls", "convert"])
def test_cli_help_shows_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from kiln_np import cli

    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert f"example:\n  kiln-np {command} " in capsys.readouterr().out


def test_dotdot_after_a_symlink_is_the_kernels_for_reads_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "link/../w" is deep/w (the link is followed first), never ./w by name.
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    os.symlink(tmp_path / "deep" / "inner", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    kiln_np.save_weights("w.safetensors", {"t": np.full(3, 9, np.uint8)}, format="safetensors")
    kiln_np.save_weights(
        "link/../w.safetensors", {"t": np.arange(3, dtype=np.uint8)}, format="safetensors"
    )
    with kiln_np.open_weights("link/../w.safetensors") as w:
        assert w["t"].numpy().tolist() == [0, 1, 2]
        again = pickle.loads(pickle.dumps(w["t"]))
    with kiln_np.open_weights("w.safetensors") as w:
        assert w["t"].numpy().tolist() == [9, 9, 9]
    monkeypatch.chdir(tmp_path / "deep")  # the pickled tensor names its real file
    assert again.numpy().tolist() == [0, 1, 2]
