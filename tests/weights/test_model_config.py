"""The model's own description (issue 37): a Hugging Face checkpoint's
``config.json`` and ``generation_config.json`` on a plain ``open_weights``
(``Weights.config``, ``generation_config``), read on first ask, strictly; none for
a GGUF file (its metadata is its description) or beside a URL; and the title a
report gives the model (``model_title``)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from _helpers import quantized_gguf, raises_kind

import kiln_np
from kiln_np._explore.metadata import model_title
from kiln_np._weights import logical as logical_module
from kiln_np._weights import weights as weights_module

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8,
    "rope_scaling": None,
    "rms_norm_eps": 1e-05,
}
GENERATION = {"bos_token_id": 1, "eos_token_id": [2, 3], "temperature": 0.6}


def _checkpoint(folder: Path, *, shards: bool = False, config: object = CONFIG) -> Path:
    tensors = {"a": np.ones(4, np.float32), "b": np.zeros(4, np.float32)}
    if shards:
        kiln_np.save_weights(folder, tensors, format="safetensors", max_shard_size=16)
    else:
        folder.mkdir()
        kiln_np.save_weights(folder / "model.safetensors", tensors, format="safetensors")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("shards", [False, True], ids=["one-file", "sharded"])
def test_a_plain_open_holds_the_config(tmp_path: Path, shards: bool) -> None:
    folder = _checkpoint(tmp_path / "tiny-llama", shards=shards)
    (folder / "generation_config.json").write_text(json.dumps(GENERATION))
    for path in (
        folder,
        *(folder.glob("*.index.json") if shards else [folder / "model.safetensors"]),
    ):
        with kiln_np.open_weights(path) as w:
            assert w.plain is w  # no logical view asked
            assert dict(w.config or {}) == CONFIG
            assert w.config_path == str(folder / "config.json")
            assert dict(w.generation_config or {}) == GENERATION
            assert w.generation_config_path == str(folder / "generation_config.json")
            with pytest.raises(TypeError):
                w.config["model_type"] = "x"  # type: ignore[index]
            view = w.select("a")
            assert view.config is w.config  # read once, shared
            assert dict(pickle.loads(pickle.dumps(view)).config or {}) == CONFIG
            assert model_title(w) == "tiny-llama: LlamaForCausalLM (llama)"


def test_without_the_files_there_is_none(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "m", config=None)
    with kiln_np.open_weights(folder) as w:
        assert (w.config, w.config_path, w.generation_config, w.generation_config_path) == (
            None,
        ) * 4
        assert model_title(w) == "model.safetensors"
    sharded = _checkpoint(tmp_path / "sharded-model", shards=True, config=None)
    with kiln_np.open_weights(sharded) as w:
        assert w.path.endswith("model.safetensors.index.json")
        assert model_title(w) == "sharded-model"  # never the index's name


def test_a_gguf_file_has_none_even_beside_a_config(tmp_path: Path) -> None:
    path = quantized_gguf(tmp_path / "q.gguf", name="Tiny <Llama>", file_type=7)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "generation_config.json").write_text("{")  # never read
    with kiln_np.open_weights(path) as w:
        assert (w.config, w.config_path, w.generation_config) == (None, None, None)
        assert w.file_type == 7
        assert model_title(w) == "Tiny <Llama>: llama"
    path = quantized_gguf(tmp_path / "nameless.gguf")
    with kiln_np.open_weights(path) as w:
        assert model_title(w) == "nameless.gguf: llama"


def test_a_kiln_directory_and_a_url_have_none(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "k", {"w": np.ones(2, np.float32)}, format="kiln")
    (tmp_path / "k" / "config.json").write_text(json.dumps(CONFIG))
    with kiln_np.open_weights(tmp_path / "k") as w:
        assert w.config is None
        assert model_title(w) == "k"
    assert weights_module._Beside("https://example.com/m.safetensors").where("config.json") is None


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("config.json", b"{", "expected valid JSON"),
        ("config.json", b"[1]", "expected a JSON object, found list"),
        ("config.json", b'{"a": 1, "a": 2}', "expected unique keys, found 'a' twice"),
        ("config.json", b'{"quantization_config": 3}', "expected quantization_config to be"),
        ("config.json", b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested at most 127"),
        ("generation_config.json", b"\xff", "expected valid JSON"),
        ("generation_config.json", b'"x"', "expected a JSON object, found str"),
    ],
    ids=["cut", "list", "duplicate", "quantization", "deep", "not-utf8", "string"],
)
def test_a_hostile_file_is_type_when_read_and_only_then(
    tmp_path: Path, name: str, text: bytes, says: str
) -> None:
    folder = _checkpoint(tmp_path / "m", config=None)
    (folder / name).write_bytes(text)
    attribute = "config" if name == "config.json" else "generation_config"
    with kiln_np.open_weights(folder) as w:  # opening reads headers only
        assert list(w) == ["a", "b"]
        assert w.summary().tensors == 2
        assert getattr(w, f"{attribute}_path") == str(folder / name)  # knowing it reads nothing
        err = raises_kind("TYPE", getattr, w, attribute)
        assert says in str(err)
        assert repr(str(folder / name)) in str(err)


def test_the_size_is_bounded_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _checkpoint(tmp_path / "m")
    monkeypatch.setattr(logical_module, "CONFIG_LIMIT", 16)
    with kiln_np.open_weights(folder) as w:
        err = raises_kind("TYPE", getattr, w, "config")
        assert "expected a config of at most 16 bytes, found more" in str(err)


def test_a_config_that_is_a_directory_or_a_dangling_link_is_type(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "m", config=None)
    (folder / "config.json").mkdir()
    (folder / "generation_config.json").symlink_to("nowhere.json")
    with kiln_np.open_weights(folder) as w:
        assert w.config_path == str(folder / "config.json")
        raises_kind("TYPE", getattr, w, "config")
        raises_kind("TYPE", getattr, w, "generation_config")


def test_a_logical_view_has_the_config_it_read(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "m")
    with kiln_np.open_weights(folder) as w:
        assert dict(w.logical().config or {}) == CONFIG
        assert w.logical(config=False).config is None  # config=False reads none
        assert w.logical(config=False).plain.config is not None


@pytest.mark.parametrize(
    ("config", "title"),
    [
        ({"architectures": ["A", "B"], "model_type": "t"}, "m: A, B (t)"),
        ({"architectures": ["Qwen2ForCausalLM"]}, "m: Qwen2ForCausalLM"),
        ({"model_type": "bert"}, "m: bert"),
        ({"model_type": "bert", "architectures": [3, ""]}, "m: bert"),  # not text: left out
        ({"hidden_size": 8}, "m"),
        ({"model_type": "x" * 500}, "m: " + "x" * 117 + "..."),
    ],
)
def test_the_title_is_what_the_config_says(
    tmp_path: Path, config: dict[str, object], title: str
) -> None:
    folder = _checkpoint(tmp_path / "m", config=config)
    with kiln_np.open_weights(folder) as w:
        assert model_title(w) == title
