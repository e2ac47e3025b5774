"""HF tokenizer directories -> the ``tokenizer.*`` keys llama.cpp's converter writes.

The oracle is ``tests/fixtures/tokenizers/converter_keys.json``: for each case, the
keys the vendored converter wrote (``make_tokenizers.py``), or the error it stopped
with.  Each key is compared by name, place, type and the SHA-256 of its GGUF bytes.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import needs

import kiln_np
from kiln_np import KilnError
from kiln_np._convert.spm_model import read_pieces
from kiln_np._convert.tokenizer_bpe import hashed_ids
from kiln_np._convert.tokenizer_files import MAX_VOCAB
from kiln_np._convert.tokenizer_gguf import tokenizer_keys
from kiln_np._convert.tokenizer_hf import tokenizer_files
from kiln_np._convert.tokenizer_pre import CHKTXT, PRE_BY_HASH

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenizers"
RECORD: dict[str, Any] = json.loads((FIXTURES / "converter_keys.json").read_text(encoding="utf-8"))
_BPE_DIRS = ("llama-spm", "llama-bpe", "qwen2", "phi-3")  # read with the tokenizers package

REFUSALS = {
    # the converter's error -> what kiln_np's TYPE says
    "AssertionError": "expected vocab_size above every token id",
    "NotImplementedError: BPE pre-tokenizer": "BPE pre-tokenizer was not recognized",
    "IndexError: list index out of range": "expected added token '<far>' at an id below vocab_size",
    "FileNotFoundError: File not found": "expected the file (gemma2's vocabulary), found none",
}


def tokenizer_dir(name: str, tmp: Path, config: dict[str, Any] | None = None) -> Path:
    """The committed tokenizer ``name`` (``tokenizer.json`` decompressed) in ``tmp``;
    ``vocab:NAME``: the files kiln_np's ``--to hf`` writes of llama.cpp's vocab file."""
    out = tmp / name.replace(":", "-")
    out.mkdir()
    if name.startswith("vocab:"):
        gguf = tmp / "vocab.gguf"
        xz = FIXTURES.parent / "vocab" / f"{name.removeprefix('vocab:')}.gguf.xz"
        gguf.write_bytes(lzma.decompress(xz.read_bytes()))
        with kiln_np.open_weights(gguf) as w:
            keys = {k: v for k, v in w.metadata.items() if k.startswith("tokenizer.")}
        files = tokenizer_files(keys)
        assert files is not None
        for file, body in files.items():
            (out / file).write_bytes(body)
    else:
        for f in (FIXTURES / name).iterdir():
            if f.name == "tokenizer.json.xz":
                (out / "tokenizer.json").write_bytes(lzma.decompress(f.read_bytes()))
            else:
                shutil.copy(f, out / f.name)
    if config is not None:
        (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return out


def gguf_bytes(value: Any, spelling: str) -> bytes:
    """A value's GGUF bytes after its value type (as gguf-py's ``parts[3:]``)."""

    def string(s: str) -> bytes:
        raw = s.encode("utf-8", "surrogateescape")
        return struct.pack("<Q", len(raw)) + raw

    if spelling == "string":
        return string(value)
    if spelling == "bool":
        return bytes([value is True])
    if spelling == "uint32":
        return np.uint32(value).tobytes()
    item = {"array[string]": 8, "array[float32]": 6, "array[int32]": 5}[spelling]
    head = struct.pack("<IQ", item, len(value))
    if item == 8:
        return head + b"".join(string(s) for s in value)
    dtype = np.float32 if item == 6 else np.int32
    assert isinstance(value, np.ndarray)
    assert value.dtype == dtype
    return head + value.astype(dtype.__name__).tobytes()


def _case(case: str) -> Any:
    source = RECORD[case]["tokenizer"]
    marks = [needs("tokenizers")] if source in _BPE_DIRS or source.startswith("vocab:") else []
    return pytest.param(case, marks=marks, id=case)


@pytest.mark.parametrize("case", [_case(c) for c in sorted(RECORD)])
def test_keys_equal_the_converters(case: str, tmp_path: Path) -> None:
    entry = RECORD[case]
    directory = tokenizer_dir(entry["tokenizer"], tmp_path, entry["config"])
    model_type = entry["config"]["model_type"]
    if "refused" in entry:
        wanted = next(v for k, v in REFUSALS.items() if entry["refused"].startswith(k))
        with pytest.raises(KilnError) as caught:
            tokenizer_keys(directory, model_type, entry["config"])
        assert caught.value.kind == "TYPE"
        assert wanted in caught.value.message
        return
    keys = tokenizer_keys(directory, model_type, entry["config"])
    assert [(k.key, k.type) for k in keys] == [(k[0], k[1]) for k in entry["keys"]]
    for got, (name, spelling, digest, value) in zip(keys, entry["keys"], strict=True):
        assert hashlib.sha256(gguf_bytes(got.value, spelling)).hexdigest() == digest, name
        if value is not None:
            assert not isinstance(got.value, np.ndarray), name
            assert got.value == value, name


def test_values_are_typed_as_gguf_reads_them(tmp_path: Path) -> None:
    entry = RECORD["spm-llama"]
    keys = {
        k.key: k
        for k in tokenizer_keys(
            tokenizer_dir("spm", tmp_path, entry["config"]), "llama", entry["config"]
        )
    }
    assert keys["tokenizer.ggml.scores"].value.dtype == np.float32
    assert keys["tokenizer.ggml.token_type"].value.dtype == np.int32
    assert type(keys["tokenizer.ggml.bos_token_id"].value) is np.uint32
    tokens = keys["tokenizer.ggml.tokens"].value
    assert len(tokens) == entry["config"]["vocab_size"]
    assert tokens[-1] == "[PAD407]"
    assert tokens[300] == "<|im_start|>"
    assert tokens[301] == " world"
    assert tokens[402] == "<extra_0>"


def test_the_saved_keys_read_back(tmp_path: Path) -> None:
    """The keys go through save_gguf's metadata_types and read back equal."""
    import kiln_np.gguf as kg

    entry = RECORD["spm-phi3"]
    keys = tokenizer_keys(tokenizer_dir("spm", tmp_path, entry["config"]), "phi3", entry["config"])
    out = tmp_path / "vocab.gguf"
    kg.save_gguf(
        str(out),
        {},
        metadata={k.key: k.value for k in keys},
        metadata_types={k.key: k.type for k in keys},
    )
    meta = kg.read_gguf(str(out)).metadata
    for k in keys:
        assert meta.types[k.key] == k.type
        assert gguf_bytes(meta[k.key], k.type) == gguf_bytes(k.value, k.type)


# -- the pre-tokenizer hash -----------------------------------------------------------

_CLASSES = (
    None,
    "TokenizersBackend",
    "PreTrainedTokenizerFast",
    "LlamaTokenizer",
    "GPT2Tokenizer",
    "Qwen2Tokenizer",
    "GPT2TokenizerFast",
    "Qwen2TokenizerFast",
)
_VARIANTS = (
    [
        pytest.param(name, cls, flags, id=f"{name}-{cls}-{'-'.join(flags) or 'plain'}")
        for name in ("llama-spm", "phi-3", "spm", "tiny-bpe")
        for cls in _CLASSES
        for flags in ((), ("add_bos_token",), ("add_eos_token",))
    ]
    + [
        pytest.param(
            "tiny-bpe",
            cls,
            ("add_bos_token", "no_post_processor"),
            id=f"tiny-bpe-{cls}-no-post-processor",
        )
        for cls in _CLASSES
    ]
    + [
        pytest.param("qwen2", None, (), id="qwen2-as-saved"),
        pytest.param("qwen2", "TokenizersBackend", (), id="qwen2-TokenizersBackend"),
        pytest.param("llama-bpe", None, (), id="llama-bpe-as-saved"),
    ]
)


@needs("tokenizers", "transformers")
@pytest.mark.parametrize(("name", "cls", "flags"), _VARIANTS)
def test_hashed_ids_are_autotokenizers(
    name: str, cls: str | None, flags: tuple[str, ...], tmp_path: Path
) -> None:
    """The ids the pre-tokenizer hash is taken of are transformers' AutoTokenizer's
    (the converter's), for the tokenizer classes kiln_np reads."""
    from transformers import AutoTokenizer

    if name == "tiny-bpe":  # make_hf_models.py's byte-level BPE of 261 tokens
        directory = tmp_path / name
        directory.mkdir()
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(FIXTURES.parent / "hf" / "llama" / f, directory / f)
    else:
        directory = tokenizer_dir(name, tmp_path)
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if cls is not None:
        config["tokenizer_class"] = cls
    config.update({flag: True for flag in flags if flag.startswith("add_")})
    path.write_text(json.dumps(config), encoding="utf-8")
    if "no_post_processor" in flags:  # transformers' add_bos_token does not make one
        document = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        document["post_processor"] = None
        (directory / "tokenizer.json").write_text(json.dumps(document), encoding="utf-8")
    try:
        expected = AutoTokenizer.from_pretrained(str(directory)).encode(CHKTXT)
    except TypeError:  # GPT2Tokenizer with add_prefix_space null: the converter fails too
        with pytest.raises(KilnError, match="expected add_prefix_space true or false"):
            hashed_ids(directory)
        return
    assert hashed_ids(directory) == expected


@needs("tokenizers")
def test_pre_tokenizers_of_real_tokenizers(tmp_path: Path) -> None:
    """qwen2's tokenizer is qwen2's; llama-bpe as transformers saves it (no BOS in
    its post-processor) hashes as smaug-bpe's, as the converter finds."""
    found = {}
    for name in ("qwen2", "llama-bpe"):
        ids = hashed_ids(tokenizer_dir(name, tmp_path))
        found[name] = PRE_BY_HASH[hashlib.sha256(str(ids).encode()).hexdigest()]
    assert found == {"qwen2": "qwen2", "llama-bpe": "smaug-bpe"}


def test_pre_table_names_the_converters_hashes() -> None:
    """A spot check of the generated table; the whole of it is checked against
    llama.cpp's tree by ``make_pre_table.py --check`` (by hand: CI has no tree)."""
    assert PRE_BY_HASH["b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166"] == "olmo"
    assert CHKTXT.startswith("\n \n\n \n\n\n \t \t\t \t\n")


# -- hostile input ---------------------------------------------------------------------


def _piece(text: bytes, kind: int = 1) -> bytes:
    body = b"\x0a" + bytes([len(text)]) + text + b"\x15\x00\x00\x80\xbf\x18" + bytes([kind])
    return b"\x0a" + bytes([len(body)]) + body


def test_pieces_read() -> None:
    model = _piece(b"<unk>", 2) + _piece(b"a") + b"\x12\x02\x08\x01"  # a trainer spec, skipped
    assert [tuple(p) for p in read_pieces(model)] == [("<unk>", -1.0, 2), ("a", -1.0, 1)]


@pytest.mark.parametrize(
    ("data", "kind", "said"),
    [
        (_piece(b"<unk>", 2)[:-1], "LENGTH", "ending at byte"),
        (b"\x0a", "LENGTH", "cut after 0 byte(s)"),
        (b"\x0b", "TYPE", "wire type 0, 1, 2 or 5, found 3"),
        (b"\x08" + b"\xff" * 11, "TYPE", "a varint of at most 10 bytes"),
        (_piece(b"\xff", 2), "TYPE", "a piece in UTF-8"),
        (_piece(b"<unk>", 2) + _piece(b"<unk>", 1), "TYPE", "each piece once"),
        (_piece(b"a"), "TYPE", "an unknown piece"),
        (_piece(b"<unk>", 9), "TYPE", "a piece type from 1 to 6"),
        (b"\x08\x01", "TYPE", "the pieces (field 1) of wire type 2"),
        (b"\x0a\x02\x18\x02", "TYPE", "a piece's text, found none"),
        (b"\x0a\x02\x10\x01", "TYPE", "field 2 of wire type 5"),
    ],
)
def test_malformed_models_are_refused(data: bytes, kind: str, said: str) -> None:
    with pytest.raises(KilnError) as caught:
        read_pieces(data)
    assert caught.value.kind == kind
    assert said in caught.value.message


def test_absurd_vocab_size_is_refused(tmp_path: Path) -> None:
    directory = tokenizer_dir("spm", tmp_path)
    with pytest.raises(KilnError, match=f"vocab_size from 1 to {MAX_VOCAB}, found 1000000000"):
        tokenizer_keys(directory, "llama", {"vocab_size": 10**9})


@needs("tokenizers")
@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"tokenizer_class": "BertTokenizer"}, "expected tokenizer_class one of"),
        ({"added_tokens_decoder": []}, "expected added_tokens_decoder as an object"),
    ],
)
def test_unread_tokenizers_are_refused(change: dict[str, Any], said: str, tmp_path: Path) -> None:
    directory = tokenizer_dir("qwen2", tmp_path)
    path = directory / "tokenizer_config.json"
    path.write_text(
        json.dumps({**json.loads(path.read_text(encoding="utf-8")), **change}), encoding="utf-8"
    )
    arch = "qwen2" if "tokenizer_class" in change else "gemma3"
    if arch == "gemma3":
        shutil.copy(FIXTURES / "spm" / "tokenizer.model", directory)
    with pytest.raises(KilnError, match=said):
        tokenizer_keys(directory, arch, {"vocab_size": 151936})


def test_malformed_tokenizer_json_is_refused(tmp_path: Path) -> None:
    directory = tokenizer_dir("spm", tmp_path)
    (directory / "tokenizer.json").write_text('{"model": [', encoding="utf-8")
    with pytest.raises(KilnError, match="expected valid JSON"):
        tokenizer_keys(directory, "llama", {"vocab_size": 400})
