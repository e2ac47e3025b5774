"""``kiln-np meta``: every format's metadata, the text form's cuts, ``--json``
in full and strict, and hostile files."""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _helpers import gguf_bytes, gguf_info, gguf_kv, gguf_py_file, kiln_np_exe, optional, run_main

import kiln_np
from kiln_np.cli.meta import json_value, meta_text
from kiln_np.gguf import GGUFMetadata, read_gguf, save_gguf

if TYPE_CHECKING:
    import gguf
    import onnx
    from onnx import numpy_helper
else:
    gguf = optional("gguf")
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")

VOCAB = 150_000


@pytest.fixture
def vocab_gguf(tmp_path: Path) -> Path:
    """A GGUF file by gguf-py with a 150,000-token vocabulary, a Q8_0 tensor,
    a long name and a NaN."""
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list([f"tok{i}" for i in range(VOCAB)])
    writer.add_token_scores([float(i) for i in range(VOCAB)])
    writer.add_name("n" * 300)
    writer.add_context_length(4096)
    writer.add_float32("x.nan", float("nan"))
    writer.add_float32("x.tenth", 0.1)
    writer.add_bool("x.flag", True)
    writer.add_array("x.nested", [[1, 2], [3]])
    blocks = gguf.quants.quantize(np.ones((2, 32), np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q", blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _rows(out: str) -> dict[str, tuple[str, str]]:
    """key -> (type, value) from the text form's aligned columns."""
    lines = out.splitlines()
    starts = [lines[1].index("type"), lines[1].index("value")]
    return {
        line[: starts[0]].strip(): (
            line[starts[0] : starts[1]].strip(),
            line[starts[1] :],
        )
        for line in lines[2:]
    }


def test_gguf_text(vocab_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, "meta", str(vocab_gguf))
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"{vocab_gguf}: gguf, 9 keys"
    assert max(len(line) for line in lines[1:]) <= 100
    rows = _rows(out)
    assert rows["general.architecture"] == ("string", '"llama"')
    assert rows["llama.context_length"] == ("uint32", "4096")
    assert rows["x.nan"] == ("float32", "nan")
    assert rows["x.tenth"] == ("float32", "0.1")
    assert rows["x.flag"] == ("bool", "true")
    kind, shown = rows["tokenizer.ggml.tokens"]
    assert kind == "array[string]"
    assert shown.startswith('150000 items: "tok0", "tok1", "tok2"')
    assert shown.endswith(", ...")
    kind, shown = rows["tokenizer.ggml.scores"]
    assert (kind, shown[:30]) == ("array[float32]", "150000 items: 0.0, 1.0, 2.0, 3")
    assert rows["x.nested"] == ("array[array[int32]]", "2 items: [1, 2], [3]")
    kind, shown = rows["general.name"]
    assert kind == "string"
    assert shown.startswith('"nnnn')
    assert shown.endswith("nnn... (300 chars)")


def test_gguf_text_decodes_only_the_first_tokens(
    vocab_gguf: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded = []
    whole = GGUFMetadata.__getitem__

    def getitem(self: GGUFMetadata, key: str) -> object:
        decoded.append(key)
        return whole(self, key)

    monkeypatch.setattr(GGUFMetadata, "__getitem__", getitem)
    assert run_main(capsys, "meta", str(vocab_gguf))[0] == 0
    assert "tokenizer.ggml.tokens" not in decoded
    assert "general.name" in decoded


def test_gguf_text_is_fast(vocab_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = time.perf_counter()
    assert run_main(capsys, "meta", str(vocab_gguf))[0] == 0
    assert time.perf_counter() - start < 2.0  # measured ~0.05 s; the JSON of 150k tokens more


def test_gguf_json(vocab_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_main(capsys, "meta", str(vocab_gguf), "--json")
    assert status == 0
    record = json.loads(out)  # strict: no NaN token
    assert list(record) == [
        "format", "path", "weights_format", "file_type", "metadata", "config", "generation_config",
    ]  # fmt: skip
    assert (record["format"], record["weights_format"]) == ("kiln-np-meta/1", "gguf")
    assert (record["file_type"], record["config"], record["generation_config"]) == (None,) * 3
    entries = {e["key"]: e for e in record["metadata"]}
    assert next(iter(entries)) == "general.architecture"
    assert entries["tokenizer.ggml.tokens"]["type"] == "array[string]"
    assert entries["tokenizer.ggml.tokens"]["value"] == [f"tok{i}" for i in range(VOCAB)]
    assert entries["tokenizer.ggml.scores"]["value"][-1] == VOCAB - 1.0
    assert entries["x.nan"] == {"key": "x.nan", "type": "float32", "value": "nan"}
    assert entries["x.tenth"]["value"] == float(np.float32(0.1))  # exact, not 0.1
    assert entries["x.flag"]["value"] is True
    assert entries["x.nested"]["value"] == [[1, 2], [3]]
    assert entries["general.name"]["value"] == "n" * 300
    assert entries["llama.context_length"] == {
        "key": "llama.context_length",
        "type": "uint32",
        "value": 4096,
    }
    assert "NaN" not in out


def test_gguf_head(tmp_path: Path) -> None:
    values = {
        "general.alignment": np.uint32(32),
        "t": ["a", "b", "c"],
        "n": np.arange(5, dtype=np.int16),
        "e": [],
    }
    save_gguf(tmp_path / "m.gguf", {}, values, metadata_types={"e": "array[string]"})
    meta = read_gguf(tmp_path / "m.gguf").metadata
    n, first = meta.head("n", 2)
    assert (n, np.asarray(first).tolist()) == (5, [0, 1])
    assert meta.head("t", 10) == (3, ["a", "b", "c"])
    assert meta.head("e", 3) == (0, [])
    with pytest.raises(TypeError, match="expected an array, found uint32"):
        meta.head("general.alignment", 1)


def test_gguf_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = b"\xff\xfeok"
    kv = gguf_kv("x.raw", 8, struct.pack("<Q", len(raw)) + raw)
    path = tmp_path / "raw.gguf"
    path.write_bytes(gguf_bytes([kv], [gguf_info("w")], bytes(8)))
    record = json.loads(run_main(capsys, "meta", str(path), "--json")[1])
    assert record["metadata"] == [{"key": "x.raw", "type": "string", "value": "\udcff\udcfeok"}]
    done = subprocess.run([*kiln_np_exe(), "meta", str(path)], capture_output=True, check=True)
    # Bytes that are not UTF-8 show as their escapes (issue 36), never raw bytes
    # (a raw 0x9b is CSI to a terminal reading 8-bit controls).
    assert done.stdout.splitlines()[2] == rb'x.raw  string  "\udcff\udcfeok"'


def test_gguf_float_tensors_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gguf_py_file(tmp_path / "f.gguf", {"w": (np.ones((2, 2), np.float32), None)})
    status, out, _ = run_main(capsys, "meta", str(path))
    assert status == 0
    assert out.splitlines()[:3] == [
        f"{path}: gguf, 1 key",
        "key                   type    value",
        'general.architecture  string  "llama"',
    ]


def test_safetensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    metadata = {"format": "pt", "note": "line\nbreak", "long": "x" * 500}
    kiln_np.save_weights(
        path, {"w": np.zeros(2, np.float32)}, metadata=metadata, format="safetensors"
    )
    status, out, _ = run_main(capsys, "meta", str(path))
    assert status == 0
    rows = _rows(out)
    assert out.splitlines()[0] == f"{path}: safetensors, 3 keys"
    assert rows["format"] == ("str", '"pt"')
    assert rows["note"] == ("str", '"line\\nbreak"')
    assert rows["long"][1].endswith("... (500 chars)")
    assert max(len(line) for line in out.splitlines()) == 100
    record = json.loads(run_main(capsys, "meta", str(path), "--json")[1])
    assert record["metadata"] == [
        {"key": k, "type": "str", "value": v} for k, v in metadata.items()
    ]


def test_safetensors_sharded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tensors = {"a": np.zeros(64, np.float32), "b": np.ones(64, np.float32)}
    kiln_np.save_weights(
        tmp_path / "ck",
        tensors,
        format="safetensors",
        metadata={"format": "pt"},
        max_shard_size=300,
    )
    record = json.loads(run_main(capsys, "meta", str(tmp_path / "ck"), "--json")[1])
    assert record["weights_format"] == "safetensors"
    assert record["metadata"] == [{"key": "format", "type": "str", "value": "pt"}]


def test_no_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(path, {"w": np.zeros(2, np.float32)}, format="safetensors")
    assert run_main(capsys, "meta", str(path))[1] == f"{path}: safetensors, no metadata\n"
    assert json.loads(run_main(capsys, "meta", str(path), "--json")[1])["metadata"] == []


def test_onnx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init = numpy_helper.from_array(np.ones(2, np.float32), name="w")
    graph = onnx.helper.make_graph([], "g", [], [], initializer=[init])
    model = onnx.helper.make_model(
        graph,
        producer_name="me",
        producer_version="1.2",
        opset_imports=[onnx.helper.make_opsetid("", 17)],
    )
    onnx.helper.set_model_props(model, {"author": "someone", "license": "mit"})
    onnx.save(model, tmp_path / "m.onnx")
    status, out, _ = run_main(capsys, "meta", str(tmp_path / "m.onnx"))
    assert status == 0
    rows = _rows(out)
    assert rows["producer_name"] == ("str", '"me"')
    assert rows["ir_version"] == ("int", str(model.ir_version))
    assert rows["opset_import"] == ("dict", "1 entries")
    assert rows[""] == ("int", "17")  # the default domain, indented under opset_import
    assert rows["metadata_props"] == ("dict", "2 entries")
    assert rows["author"] == ("str", '"someone"')
    record = json.loads(run_main(capsys, "meta", str(tmp_path / "m.onnx"), "--json")[1])
    entries = {e["key"]: e for e in record["metadata"]}
    assert entries["opset_import"] == {"key": "opset_import", "type": "dict", "value": {"": 17}}
    assert entries["metadata_props"]["value"] == {"author": "someone", "license": "mit"}
    assert entries["producer_version"]["value"] == "1.2"


def test_kiln_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metadata = {
        "step": 7,
        "lr": float("inf"),
        "half": np.float16(-0.0),
        "table": np.arange(40, dtype=np.uint8),
        "blob": b"\x00\x01\xff",
        "cfg": {"depth": 2, "names": ["a", "b"]},
        "z": np.complex64(1 + 2j),
        "grid": np.arange(6, dtype=np.int8).reshape(2, 3),
    }
    kiln_np.save_weights(
        tmp_path / "d", {"w": np.zeros(2, np.float32)}, format="kiln", metadata=metadata
    )
    status, out, _ = run_main(capsys, "meta", str(tmp_path / "d"))
    assert status == 0
    rows = _rows(out)
    assert rows["step"] == ("int", "7")
    assert rows["lr"] == ("float", "inf")
    assert rows["half"] == ("np.float16", "-0.0")
    assert rows["table"][0] == "np.ndarray[uint8]"
    assert rows["table"][1].startswith("40 items: 0, 1, 2,")
    assert rows["table"][1].endswith(", ...")
    assert rows["blob"] == ("bytes", "3 bytes: 0001ff")
    assert rows["cfg"] == ("dict", "2 entries")
    assert rows["names"] == ("list", '2 items: "a", "b"')
    assert rows["grid"] == ("np.ndarray[int8]", "2 items: [0, 1, 2], [3, 4, 5]")
    record = json.loads(run_main(capsys, "meta", str(tmp_path / "d"), "--json")[1])
    assert record["weights_format"] == "kiln"
    values = {e["key"]: (e["type"], e["value"]) for e in record["metadata"]}
    assert values == {
        "step": ("int", 7),
        "lr": ("float", "inf"),
        "half": ("np.float16", -0.0),
        "table": ("np.ndarray[uint8]", list(range(40))),
        "blob": ("bytes", "AAH/"),
        "cfg": ("dict", {"depth": 2, "names": ["a", "b"]}),
        "z": ("np.complex64", [1.0, 2.0]),
        "grid": ("np.ndarray[int8]", [[0, 1, 2], [3, 4, 5]]),
    }


def test_kiln_directory_keeps_gguf_types(
    vocab_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(capsys, "convert", str(vocab_gguf), str(tmp_path / "d"), "--to", "kiln")[0] == 0
    from_gguf = json.loads(run_main(capsys, "meta", str(vocab_gguf), "--json")[1])
    from_dir = json.loads(run_main(capsys, "meta", str(tmp_path / "d"), "--json")[1])
    assert from_dir["metadata"] == from_gguf["metadata"]
    rows = _rows(run_main(capsys, "meta", str(tmp_path / "d"))[1])
    assert rows["tokenizer.ggml.tokens"][0] == "array[string]"
    assert rows["tokenizer.ggml.tokens"][1].startswith('150000 items: "tok0", "tok1"')


def test_long_key_stands_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    key = "k" * 70
    kiln_np.save_weights(
        path, {"w": np.zeros(1, np.float32)}, metadata={key: "v", "a": "b"}, format="safetensors"
    )
    lines = run_main(capsys, "meta", str(path))[1].splitlines()
    assert lines[1:] == ["key  type  value", key, '     str   "v"', 'a    str   "b"']


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (None, "kiln-np: FILE: cannot read "),
        (b"junk" * 10, "kiln-np: TYPE: "),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 5), "kiln-np: LENGTH: "),
    ],
)
def test_hostile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, line: str
) -> None:
    path = tmp_path / "x.gguf"
    if content is not None:
        path.write_bytes(content)
    for argv in (["meta", str(path)], ["meta", str(path), "--json"]):
        status, out, err = run_main(capsys, *argv)
        assert (status, out) == (2, "")
        assert err.startswith(line)
        assert err.count("\n") == 1


def test_zero_dim_array() -> None:
    # a Kiln directory stores a 0-d array as 1-d; a Python mapping holds one as it is
    assert json_value(np.array(2.5, np.float32)) == 2.5
    assert json_value(np.array(np.inf)) == "inf"
    text = meta_text("x", "kiln", {"s": np.array(2.5, np.float32)})
    assert text.splitlines()[-1] == "s    np.ndarray[float32]  2.5"


def _hf_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-llama"
    kiln_np.save_weights(
        folder, {"a": np.zeros(64, np.float32), "b": np.ones(64, np.float32)},
        format="safetensors", metadata={"format": "pt"}, max_shard_size=300,
    )  # fmt: skip
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "rope_scaling": None,
        "rms_norm_eps": 1e-05,
        "rope": {"theta": 500000.0, "type": "llama3"},
        "x": "\x1b[2J",
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text('{"eos_token_id": [2, 3], "t": NaN}')
    return folder


def test_a_checkpoint_directory_shows_its_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 37 item 1: the model's own description, after the file's metadata.
    folder = _hf_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    status, out, err = run_main(capsys, "meta", "tiny-llama")
    assert (status, err) == (0, "")
    blocks = out.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [
        "tiny-llama: safetensors, 1 key",
        "tiny-llama/config.json: Hugging Face config, 6 keys",
        "tiny-llama/generation_config.json: Hugging Face generation config, 2 keys",
    ]
    config = _rows(blocks[1])
    assert config["architectures"] == ("list", '1 item: "LlamaForCausalLM"')
    assert config["rope_scaling"] == ("null", "null")
    assert config["rms_norm_eps"] == ("float", "1e-05")
    assert config["rope"] == ("dict", "2 entries")
    assert config["theta"] == ("float", "500000.0")  # a dict's entries, one level deeper
    assert config["x"] == ("str", '"\\u001b[2J"')  # never a raw escape to the terminal
    generation = _rows(blocks[2])
    assert generation["t"] == ("float", "nan")
    status, out, _ = run_main(capsys, "meta", "tiny-llama", "--json")
    record = json.loads(out)  # strict: NaN as "nan"
    assert record["config"] == {
        "path": "tiny-llama/config.json",
        "value": {**json.loads((folder / "config.json").read_text())},
    }
    assert record["generation_config"] == {
        "path": "tiny-llama/generation_config.json",
        "value": {"eos_token_id": [2, 3], "t": "nan"},
    }
    assert record["file_type"] is None
    # The index or a shard spelled instead of the directory: the same files beside.
    index = json.loads(
        run_main(capsys, "meta", "tiny-llama/model.safetensors.index.json", "--json")[1]
    )
    assert index["config"]["path"] == "tiny-llama/config.json"


def test_a_malformed_config_is_type_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _hf_folder(tmp_path)
    (folder / "config.json").write_text('{"a": 1, "a": 2}')
    for argv in (("meta", str(folder)), ("meta", str(folder), "--json")):
        status, out, err = run_main(capsys, *argv)
        assert (status, out) == (2, "")
        assert err.startswith(f"kiln-np: TYPE: {str(folder / 'config.json')!r}: ")
        assert "expected unique keys, found 'a' twice" in err
    # ls --parts reads no config (ls reads it for its quantization_config: TYPE too)
    assert run_main(capsys, "ls", str(folder), "--parts")[0] == 0


@pytest.mark.parametrize(
    ("number", "shown", "name"),
    [(15, "15 (Q4_K_M)", "Q4_K_M"), (1, "1 (F16)", "F16"), (1024, "1024 (GUESSED)", "GUESSED"),
     (99, "99", "99")],
)  # fmt: skip
def test_gguf_file_type_in_llama_cpps_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], number: int, shown: str, name: str
) -> None:
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_file_type(number)
    writer.add_tensor("w", np.ones(4, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    status, out, _ = run_main(capsys, "meta", str(path))
    assert status == 0
    assert _rows(out)["general.file_type"] == ("uint32", shown)
    record = json.loads(run_main(capsys, "meta", str(path), "--json")[1])
    entries = {e["key"]: e for e in record["metadata"]}
    assert entries["general.file_type"]["value"] == number  # the raw value stays
    assert record["file_type"]["value"] == number
    assert record["file_type"]["name"] == name
    listed = run_main(capsys, "ls", str(path))[1]
    assert listed.splitlines()[-1].endswith(f", gguf, file type {name}")
    assert (
        json.loads(run_main(capsys, "ls", str(path), "--json")[1])["file_type"]
        == (record["file_type"])
    )


def test_a_file_type_that_is_no_integer_is_shown_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.gguf"
    save_gguf(path, {"w": np.ones(2, np.float32)}, {"general.file_type": "Q4_K_M"})
    status, out, _ = run_main(capsys, "meta", str(path))
    assert status == 0
    assert _rows(out)["general.file_type"] == ("string", '"Q4_K_M"')
    assert json.loads(run_main(capsys, "meta", str(path), "--json")[1])["file_type"] is None
    assert run_main(capsys, "ls", str(path))[1].splitlines()[-1].endswith(", gguf")
