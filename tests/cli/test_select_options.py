"""``--include`` / ``--exclude`` on ``kiln-np ls`` and ``kiln-np convert``: the
tensors chosen through :meth:`kiln_np.Weights.select` (one matching rule), the
listing and totals over the selection (``3 of 5 tensors``), only the selected
tensors written, ``selection`` in ``--json``, and a selection of nothing as TYPE
with nothing written.  Over safetensors (single and sharded), GGUF (float and
quantized), ONNX and Kiln directories; and the Python side, ``save_weights`` of a
``Weights.select`` view.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _helpers import gguf_py_file, optional, run_main

import kiln_np

if TYPE_CHECKING:
    import gguf
    import onnx
    from onnx import numpy_helper
else:
    gguf = optional("gguf")
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")

NAMES = [
    "token_embd.weight",
    "blk.0.attn_q.weight",
    "blk.0.attn_norm.weight",
    "blk.1.attn_q.weight",
    "blk.1.attn_norm.weight",
]


def tensors() -> dict[str, np.ndarray]:
    """Five float32 tensors: 2-D of whole Q8_0 rows, and 1-D norms."""
    rng = np.random.default_rng(0)
    return {
        name: rng.standard_normal(64 if "norm" in name else (2, 64)).astype(np.float32)
        for name in NAMES
    }


def _safetensors(tmp: Path) -> Path:
    path = tmp / "m.safetensors"
    kiln_np.save_weights(path, tensors(), format="safetensors", metadata={"k": "v"})
    return path


def _sharded(tmp: Path) -> Path:
    path = tmp / "ck"
    kiln_np.save_weights(path, tensors(), format="safetensors", max_shard_size=600)
    assert len(list(path.glob("*.safetensors"))) > 1
    return path


def _gguf(tmp: Path) -> Path:
    return gguf_py_file(tmp / "m.gguf", {n: (a, None) for n, a in tensors().items()})


def _gguf_q8(tmp: Path) -> Path:
    """The GGUF with its attention weights as Q8_0 blocks (gguf-py's)."""
    q8 = gguf.GGMLQuantizationType.Q8_0
    blocks = {
        n: ((gguf.quants.quantize(a, q8), q8) if "attn_q" in n else (a, None))
        for n, a in tensors().items()
    }
    return gguf_py_file(tmp / "q.gguf", blocks)


def _onnx(tmp: Path) -> Path:
    inits = [numpy_helper.from_array(a, name=n) for n, a in tensors().items()]
    graph = onnx.helper.make_graph([], "g", [], [], initializer=inits)
    onnx.save(onnx.helper.make_model(graph), tmp / "m.onnx")
    return tmp / "m.onnx"


def _kiln(tmp: Path) -> Path:
    kiln_np.save_weights(tmp / "d", tensors(), format="kiln")
    return tmp / "d"


BUILDERS = {
    "safetensors": _safetensors,
    "sharded": _sharded,
    "gguf": _gguf,
    "gguf-q8_0": _gguf_q8,
    "onnx": _onnx,
    "kiln": _kiln,
}


def _ls_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    status, out, err = run_main(capsys, "ls", *argv, "--json")
    assert (status, err) == (0, "")
    record: dict[str, object] = json.loads(out)
    return record


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_ls_lists_and_totals_the_selection(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(BUILDERS[kind](tmp_path))
    status, out, err = run_main(capsys, "ls", path, "--include", "blk.*", "--exclude", "*norm*")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == [
        "blk.0.attn_q.weight",
        "blk.1.attn_q.weight",
    ]
    with kiln_np.open_weights(path) as w:
        view = w.select("blk.*", exclude="*norm*")
        total = view.byte_length
        fmt = w.format
    # 2 x 128 elements; f32 is 1,024 bytes, Q8_0 8 blocks of 34 bytes
    assert total == (272 if kind == "gguf-q8_0" else 1024)
    size = "272 B" if total == 272 else "1.00 KiB"
    assert lines[-1] == (f"2 of 5 tensors, 256 parameters, {size} ({total:,} payload bytes), {fmt}")
    record = _ls_json(capsys, path, "--include", "blk.*", "--exclude", "*norm*")
    assert [t["name"] for t in record["tensors"]] == list(view)  # type: ignore[attr-defined]
    assert (record["tensor_count"], record["parameters"], record["byte_length"]) == (2, 256, total)
    assert record["selection"] == {
        "include": ["blk.*"],
        "exclude": ["*norm*"],
        "selected": 2,
        "left_out": 3,
    }


def test_ls_without_options_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(_safetensors(tmp_path))
    status, out, _ = run_main(capsys, "ls", path)
    assert status == 0
    assert out.splitlines()[-1] == (
        "5 tensors, 512 parameters, 2.00 KiB (2,048 payload bytes), safetensors"
    )
    record = _ls_json(capsys, path)
    assert record["selection"] is None
    assert record["tensor_count"] == 5


@pytest.mark.parametrize(
    ("options", "names"),
    [
        # repeated includes: any of them keeps a tensor
        (["--include", "token_*", "--include", "*.1.*"], [NAMES[0], NAMES[3], NAMES[4]]),
        # exclude alone keeps the rest; repeated excludes drop all their matches
        (["--exclude", "*norm*"], [NAMES[0], NAMES[1], NAMES[3]]),
        (["--exclude", "*norm*", "--exclude", "blk.0.*"], [NAMES[0], NAMES[3]]),
        # exclude wins over include
        (["--include", "blk.0.*", "--exclude", "*_q.*"], [NAMES[2]]),
        # '*' crosses dots; '?' and classes as fnmatch
        (["--include", "*weight"], NAMES),
        (["--include", "blk.[1].attn_?.weight"], [NAMES[3]]),
    ],
)
def test_patterns_as_weights_select_takes_them(
    options: list[str], names: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(_gguf(tmp_path))
    record = _ls_json(capsys, path, *options)
    listed = [t["name"] for t in record["tensors"]]  # type: ignore[attr-defined]
    assert listed == names
    include = [v for o, v in zip(options[::2], options[1::2], strict=True) if o == "--include"]
    exclude = [v for o, v in zip(options[::2], options[1::2], strict=True) if o == "--exclude"]
    with kiln_np.open_weights(path) as w:
        assert list(w.select(*include, exclude=exclude)) == names
    assert record["selection"] == {
        "include": include,
        "exclude": exclude,
        "selected": len(names),
        "left_out": 5 - len(names),
    }


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        (["--include", "BLK.*"], "--include 'BLK.*'"),  # case-sensitive
        (["--include", "attn_q"], "--include 'attn_q'"),  # the whole name
        (["--include", "blk.*", "--exclude", "blk.*"], "--include 'blk.*' --exclude 'blk.*'"),
        (["--exclude", "*"], "--exclude '*'"),
    ],
)
def test_ls_selecting_nothing_is_type(
    options: list[str], shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(_safetensors(tmp_path))
    status, out, err = run_main(capsys, "ls", path, *options)
    assert (status, out) == (2, "")
    assert err == (
        f"kiln-np: TYPE: {path!r}: expected a tensor selected by {shown}, found none of its 5 "
        "('token_embd.weight', 'blk.0.attn_q.weight', 'blk.0.attn_norm.weight', "
        "'blk.1.attn_q.weight', 'blk.1.attn_norm.weight'); patterns are case-sensitive globs "
        "on the whole name\n"
    )


@pytest.mark.parametrize("kind", ["safetensors", "sharded", "gguf", "onnx", "kiln"])
@pytest.mark.parametrize("to", ["safetensors", "gguf", "kiln"])
def test_convert_writes_only_the_selection(
    kind: str, to: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = str(BUILDERS[kind](tmp_path))
    dst = str(tmp_path / "out")
    status, out, err = run_main(
        capsys, "convert", src, dst, "--to", to, "--include", "blk.1.*", "--include", "token_*"
    )
    assert (status, err) == (0, "")
    source = {"sharded": "safetensors", "gguf-q8_0": "gguf"}.get(kind, kind)
    assert out.startswith(f"{dst}: 3 of 5 tensors, 1280 payload bytes, {source} -> {to}")
    expected = tensors()
    with kiln_np.open_weights(dst) as written:
        assert list(written) == [NAMES[0], NAMES[3], NAMES[4]]
        for name, t in written.items():
            assert np.asarray(t).tobytes() == expected[name].tobytes()


def test_convert_keeps_the_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = str(_safetensors(tmp_path))
    dst = str(tmp_path / "o.safetensors")
    status, out, _ = run_main(capsys, "convert", src, dst, "--exclude", "*norm*", "--json")
    assert status == 0
    record = json.loads(out)
    assert (record["metadata"], record["tensors"], record["byte_length"]) == ("carried", 3, 1536)
    assert record["selection"] == {
        "include": [],
        "exclude": ["*norm*"],
        "selected": 3,
        "left_out": 2,
    }
    with kiln_np.open_weights(dst) as written:
        assert dict(written.metadata) == {"k": "v"}
        assert list(written) == [NAMES[0], NAMES[1], NAMES[3]]


def test_convert_without_options_records_no_selection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = str(_gguf(tmp_path))
    status, out, _ = run_main(capsys, "convert", src, str(tmp_path / "d"), "--to", "kiln", "--json")
    assert status == 0
    record = json.loads(out)
    assert (record["tensors"], record["selection"]) == (5, None)


def test_convert_leaving_out_blocks_needs_no_dequantize(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the selected tensors are checked against the target: safetensors
    cannot hold the Q8_0 tensors, which --exclude leaves out."""
    src = str(_gguf_q8(tmp_path))
    dst = str(tmp_path / "o.safetensors")
    status, _, err = run_main(capsys, "convert", src, dst)
    assert status == 2
    assert "safetensors cannot hold GGML Q8_0 blocks" in err
    status, out, err = run_main(capsys, "convert", src, dst, "--exclude", "*attn_q*")
    assert (status, err) == (0, "")
    assert out == f"{dst}: 3 of 5 tensors, 1024 payload bytes, gguf -> safetensors\n"
    with kiln_np.open_weights(dst) as written:
        assert list(written) == [NAMES[0], NAMES[2], NAMES[4]]
    # and the blocks alone, dequantized
    dst2 = str(tmp_path / "q.safetensors")
    status, out, _ = run_main(
        capsys, "convert", src, dst2, "--include", "*attn_q*", "--dequantize", "f32"
    )
    assert status == 0
    assert out == (
        f"{dst2}: 2 of 5 tensors, 1024 payload bytes, gguf -> safetensors, 2 dequantized to f32\n"
    )


def test_convert_quantize_lists_only_selected_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = str(_safetensors(tmp_path))
    dst = str(tmp_path / "o.gguf")
    status, out, err = run_main(
        capsys, "convert", src, dst, "--quantize", "*=q8_0", "--include", "blk.0.*", "--json"
    )
    assert status == 0
    assert err == (
        "kept blk.0.attn_norm.weight as f32: a 1-D tensor: Q8_0 quantizes rows of two dims "
        "or more\n"
    )
    record = json.loads(out)
    assert [k["name"] for k in record["kept"]] == ["blk.0.attn_norm.weight"]
    assert (record["tensors"], record["quantized"]) == (2, 1)
    assert record["byte_length"] == 4 * 34 + 256  # 4 Q8_0 blocks and the f32 norm
    assert record["selection"]["selected"] == 2
    with kiln_np.open_weights(dst) as written:
        assert {n: t.format_dtype for n, t in written.items()} == {
            "blk.0.attn_q.weight": "Q8_0",
            "blk.0.attn_norm.weight": "F32",
        }


@pytest.mark.parametrize("to", ["safetensors", "kiln"])
def test_convert_selecting_nothing_is_type_and_writes_nothing(
    to: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = str(_gguf(tmp_path))
    dst = tmp_path / "out"
    status, out, err = run_main(
        capsys, "convert", src, str(dst), "--to", to, "--include", "*.2.*", "--json"
    )
    assert (status, out) == (2, "")
    assert err.startswith(
        f"kiln-np: TYPE: {src!r}: expected a tensor selected by --include '*.2.*', found none "
        "of its 5 ("
    )
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


@pytest.mark.parametrize("kind", ["safetensors", "gguf-q8_0", "kiln"])
def test_save_weights_of_a_selection(kind: str, tmp_path: Path) -> None:
    """The Python side: a ``Weights.select`` view is a mapping ``save_weights`` writes."""
    src = BUILDERS[kind](tmp_path)
    with kiln_np.open_weights(src) as w:
        view = w.select("blk.*", exclude="*norm*")
        kiln_np.save_weights(tmp_path / "o", view, format="kiln", metadata=w.metadata)
        payloads = {n: bytes(t.payload().data) for n, t in view.items()}
        codes = {n: int(t.info.code) for n, t in view.items()}
        keys = sorted(w.metadata)
    with kiln_np.open_weights(tmp_path / "o") as written:
        assert list(written) == ["blk.0.attn_q.weight", "blk.1.attn_q.weight"]
        assert {n: bytes(t.payload().data) for n, t in written.items()} == payloads
        assert {n: int(t.info.code) for n, t in written.items()} == codes
        assert sorted(written.metadata) == keys
        assert kind != "safetensors" or dict(written.metadata) == {"k": "v"}
