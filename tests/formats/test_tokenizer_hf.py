"""A GGUF's tokenizer as Hugging Face files (``kiln_np._convert.tokenizer_hf``),
written by ``--to hf``.

The oracle is llama.cpp's: its vocab-only GGUFs and test strings
(``tests/fixtures/vocab``, made by ``make_vocab.py``), each ``.inp`` string with
the ids the model's own Hugging Face tokenizer gave it (``.out``).  Every string
of every vocabulary must encode to its ids through ``AutoTokenizer`` on the
files written here (transformers' own GGUF conversion gets 32 of 47 for
llama-spm, 46 for llama-bpe), and a SentencePiece vocabulary's
``tokenizer.model`` through sentencepiece itself.
"""

from __future__ import annotations

import json
import lzma
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _helpers import needs, optional, run_main

import kiln_np
from kiln_np import KilnError
from kiln_np._convert.tokenizer_hf import (
    PRE_TOKENIZERS,
    sentencepiece_model,
    tokenizer_files,
    vocabulary,
)

if TYPE_CHECKING:
    import sentencepiece
    import transformers
else:
    sentencepiece = optional("sentencepiece")
    transformers = optional("transformers")

VOCAB = Path(__file__).parents[1] / "fixtures" / "vocab"
HF = Path(__file__).parents[1] / "fixtures" / "hf"
STORED = {"llama-spm": "llama-spm", "llama-bpe": "llama-bpe", "qwen2": "qwen2",
          "phi-3": "phi-3", "gpt-2": "gpt-2", "qwen35": "qwen2"}  # fmt: skip
"""Each vocabulary and the stored GGUF holding its keys (qwen35's is qwen2's but
for ``tokenizer.ggml.pre``: make_vocab.py checks it)."""
SEPARATOR = "\n__ggml_vocab_test__\n"


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the stored GGUFs are decompressed into, once for the module."""
    folder = tmp_path_factory.mktemp("vocab")
    for name in set(STORED.values()):
        data = lzma.decompress((VOCAB / f"{name}.gguf.xz").read_bytes())
        (folder / f"{name}.gguf").write_bytes(data)
    return folder


def _metadata(folder: Path, name: str) -> dict[str, Any]:
    """The keys of vocabulary ``name``'s GGUF."""
    with kiln_np.open_weights(folder / f"{STORED[name]}.gguf") as w:
        meta = dict(w.metadata)
    if name != STORED[name]:
        meta["tokenizer.ggml.pre"] = name
    return meta


def _write(files: Mapping[str, bytes], out: Path) -> Path:
    out.mkdir()
    for name, body in files.items():
        (out / name).write_bytes(body)
    return out


def _cases(name: str) -> list[tuple[str, list[int]]]:
    """The ``.inp`` strings and their ``.out`` ids, split as Python's
    ``str.split`` splits both files (47 pairs: the last, after the final
    separator, is the empty string, which encodes to nothing)."""
    inp = (VOCAB / f"{name}.inp").read_bytes().decode().split(SEPARATOR)
    out = (VOCAB / f"{name}.out").read_text(encoding="utf-8").split("\n")
    return [(s, [int(t) for t in ids.split()]) for s, ids in zip(inp, out, strict=True)]


@needs("transformers", "tokenizers")
@pytest.mark.parametrize("name", STORED)
def test_every_test_string_encodes_to_llama_cpps_ids(
    name: str, vocab_dir: Path, tmp_path: Path
) -> None:
    meta = _metadata(vocab_dir, name)
    files = tokenizer_files(meta)
    assert files is not None
    spm = meta["tokenizer.ggml.model"] == "llama"
    expected = ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(files) == sorted([*expected, *(["tokenizer.model"] if spm else [])])
    tok = transformers.AutoTokenizer.from_pretrained(_write(files, tmp_path / "tok"))
    cases = _cases(name)
    assert len(cases) == (51 if name == "qwen35" else 47)
    wrong = [
        (text, ids, got)
        for text, ids in cases
        if (got := tok.encode(text, add_special_tokens=False)) != ids
    ]
    assert wrong == []
    # the BOS the model adds (llama.cpp's defaults: SentencePiece and llama-bpe add one)
    bos = {"llama-spm": [1], "phi-3": [1], "llama-bpe": [128000]}.get(name, [])
    assert tok.encode("Hello world") == bos + tok.encode("Hello world", add_special_tokens=False)
    # decoding gives the text back (SentencePiece: without the space it prepended)
    text = "Hello world! 🦙 3333 Äpfel"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    config = json.loads(files["tokenizer_config.json"])
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    listed = sorted(int(i) for i in config["added_tokens_decoder"])
    types = meta["tokenizer.ggml.token_type"]
    added = [i for i, t in enumerate(types) if t in (3, 4)]
    if spm:  # only what the converter took from the checkpoint's added tokens
        added = [i for i in added if meta["tokenizer.ggml.scores"][i] == -1000]
    assert listed == added
    assert len(listed) == {"llama-spm": 0, "phi-3": 14}.get(name, len(listed))
    assert ("chat_template" in config) == ("tokenizer.chat_template" in meta)
    if "tokenizer.chat_template" in meta:
        assert tok.chat_template == meta["tokenizer.chat_template"]
    assert tok.eos_token_id == int(meta["tokenizer.ggml.eos_token_id"])
    special = json.loads(files["special_tokens_map.json"])
    assert special["eos_token"] == meta["tokenizer.ggml.tokens"][tok.eos_token_id]


@needs("sentencepiece")
@pytest.mark.parametrize("name", ["llama-spm", "phi-3"])
def test_tokenizer_model_is_the_sentencepiece_model(name: str, vocab_dir: Path) -> None:
    meta = _metadata(vocab_dir, name)
    vocab = vocabulary(meta)
    assert vocab is not None
    sp = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model(vocab))
    wrong = [(text, ids) for text, ids in _cases(name) if sp.encode(text) != ids]
    assert wrong == []
    tokens, scores, types = (
        meta[f"tokenizer.ggml.{k}"] for k in ("tokens", "scores", "token_type")
    )
    assert sp.vocab_size() == len(tokens)
    assert [sp.id_to_piece(i) for i in range(len(tokens))] == list(tokens)
    got = np.array([sp.get_score(i) for i in range(len(tokens))], dtype=np.float32)
    assert got.tobytes() == np.asarray(scores, np.float32).tobytes()
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id()) == (
        0, 1, int(meta["tokenizer.ggml.eos_token_id"]),
    )  # fmt: skip
    control = [i for i in range(len(tokens)) if sp.is_control(i)]
    assert control == [i for i, t in enumerate(types) if t == 3 and i != 0]  # phi-3: <unk>
    # phi3's converter typed its padding [PAD32011].. UNKNOWN: one unknown in SentencePiece
    unused = [i for i in range(len(tokens)) if sp.is_unused(i)]
    assert unused == [i for i, t in enumerate(types) if t == 2 and i != 0]
    assert name == "phi-3" or unused == []


@needs("transformers", "tokenizers")
@pytest.mark.parametrize("model", ["llama", "qwen3", "phi3"])
def test_the_tiny_models_tokenizer_comes_back(
    model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny models' byte-level BPE (pre ``gpt-2``), through the converter's
    GGUF and ``--to hf``, encodes and decodes as the original."""
    out = tmp_path / "out"
    status, _, _ = run_main(capsys, "convert", str(HF / f"{model}.gguf"), str(out), "--to", "hf")
    assert status == 0
    back = transformers.AutoTokenizer.from_pretrained(out)
    original = transformers.AutoTokenizer.from_pretrained(HF / model)
    for text in ["abc abd", " a  b\n\nc", "ünïcode 🦙", "<s>a</s>"]:
        ids = original.encode(text)
        assert back.encode(text) == ids
        assert back.decode(ids) == original.decode(ids)
    assert (back.bos_token, back.eos_token) == (original.bos_token, original.eos_token)


def _gpt2(keys: Mapping[str, Any], template: object = None) -> dict[str, Any]:
    """A small GPT-2-style tokenizer's keys, ``keys`` (``tokenizer.ggml.*``) changed."""
    base: dict[str, Any] = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": ["a", "b", "ab", "<s>"],
        "tokenizer.ggml.token_type": np.array([1, 1, 1, 3]),
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.bos_token_id": 3,
    }
    if template is not None:
        base["tokenizer.chat_template"] = template
    return {**base, **{f"tokenizer.ggml.{k}": v for k, v in keys.items()}}


def _spm(keys: Mapping[str, Any]) -> dict[str, Any]:
    """A small SentencePiece tokenizer's keys, ``keys`` (``tokenizer.ggml.*``) changed."""
    base: dict[str, Any] = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": ["<unk>", "<s>", "▁", "a", "▁a"],
        "tokenizer.ggml.scores": np.array([0, 0, -1, -2, -3]),
        "tokenizer.ggml.token_type": np.array([2, 3, 1, 1, 1]),
    }
    return {**base, **{f"tokenizer.ggml.{k}": v for k, v in keys.items()}}


@pytest.mark.parametrize(
    ("meta", "kind", "words"),
    [
        (
            _gpt2({"model": "bert"}),
            "TYPE",
            "expected 'llama' (SentencePiece) or 'gpt2' (GPT-2 BPE), found str 'bert'",
        ),
        (_gpt2({"pre": "falcon"}), "TYPE", "tokenizer.ggml.pre: expected one of 'llama-bpe'"),
        (_gpt2({"pre": None}), "TYPE", "found None"),
        (_gpt2({"tokens": "abc"}), "TYPE", "tokens: expected an array of strings"),
        (
            _gpt2({"tokens": ["a", 1, "ab", "<s>"]}),
            "TYPE",
            "tokens[1]: expected a string, found int 1",
        ),
        (
            _gpt2({"token_type": np.array([1, 1, 1])}),
            "LENGTH",
            "token_type: expected one per token (4), found 3",
        ),
        (
            _gpt2({"token_type": np.array([1, 1, 7, 3])}),
            "TYPE",
            "token_type[2]: expected a token type 1..6, found 7",
        ),
        (_gpt2({"token_type": ["x"] * 4}), "TYPE", "token_type: expected an array of numbers"),
        (
            _gpt2({"merges": ["ab"]}),
            "TYPE",
            "merges[0]: expected two tokens and a space between, found str 'ab'",
        ),
        (_gpt2({"merges": []}), "TYPE", "merges: expected the BPE's merges, found none"),
        (
            _gpt2({"bos_token_id": 4}),
            "LENGTH",
            "bos_token_id: expected an id below the 4 tokens, found 4",
        ),
        (
            _gpt2({"bos_token_id": True}),
            "TYPE",
            "bos_token_id: expected a token id, found bool True",
        ),
        (_gpt2({"add_bos_token": 1}), "TYPE", "add_bos_token: expected a bool, found int 1"),
        (
            _gpt2({"tokens": ["a", "b", "a", "<s>"]}),
            "TYPE",
            "expected each token once, found 'a' at ids 0 and 2",
        ),
        (
            _spm({"scores": np.array([0, 0])}),
            "LENGTH",
            "scores: expected one per token (5), found 2",
        ),
        (
            _spm({"remove_extra_whitespaces": True}),
            "TYPE",
            "remove_extra_whitespaces: expected false",
        ),
        (
            _spm({"token_type": np.array([1, 3, 1, 1, 1])}),
            "TYPE",
            "expected a token of type UNKNOWN (2) or tokenizer.ggml.unknown_token_id",
        ),
        (_spm({"scores": np.array([0, 0, np.inf, 0, 0])}), "TYPE", "scores[2]: expected a finite"),
        (_spm({"tokens": ["<unk>", "<s>", "▁", "a", "a" * 513]}), "TYPE", "at most 512 characters"),
        (_gpt2({"tokens": []}), "TYPE", "tokens: expected the tokens, found none"),
        (_gpt2({"merges": ["a <s>"]}), "TYPE", "found 'a <s>', whose 'a<s>' is not one"),
        (_gpt2({"token_type": np.array([1, 1, 1, 2**32 + 1])}), "TYPE", "found 4294967297"),
        (_gpt2({}, template=3), "TYPE", "tokenizer.chat_template: expected a string, found int 3"),
    ],
)
def test_a_malformed_or_uncovered_tokenizer_is_refused(
    meta: dict[str, Any], kind: str, words: str
) -> None:
    with pytest.raises(KilnError) as caught:
        tokenizer_files(meta)
    assert caught.value.kind == kind
    assert words in str(caught.value)


def test_no_tokenizer_keys_no_files() -> None:
    assert tokenizer_files({"general.architecture": "llama"}) is None
    assert vocabulary({}) is None


def test_an_uncovered_tokenizer_refuses_the_export_unless_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with kiln_np.open_weights(HF / "qwen2.gguf") as w:
        meta = {**w.metadata, "tokenizer.ggml.pre": "falcon"}
        with pytest.raises(KilnError) as caught:
            kiln_np.save_weights(tmp_path / "o", w, format="hf", metadata=meta)
        assert caught.value.kind == "TYPE"
        assert "the GGUF's tokenizer: tokenizer.ggml.pre: expected one of" in str(caught.value)
        assert "found str 'falcon' (tokenizer=False writes the model without" in str(caught.value)
        assert not (tmp_path / "o").exists()
        kiln_np.save_weights(tmp_path / "o", w, format="hf", metadata=meta, tokenizer=False)
    assert sorted(os.listdir(tmp_path / "o")) == [
        "config.json", "generation_config.json", "model.safetensors",
    ]  # fmt: skip
    # the command line names its flag, and --no-tokenizer leaves the files out
    gguf = tmp_path / "bert.gguf"
    with kiln_np.open_weights(HF / "qwen2.gguf") as w:
        kiln_np.save_weights(gguf, w, format="gguf",
                             metadata={**w.metadata, "tokenizer.ggml.model": "bert"})  # fmt: skip
    status, _, err = run_main(capsys, "convert", str(gguf), str(tmp_path / "c"), "--to", "hf")
    assert status != 0
    assert "found str 'bert' (--no-tokenizer writes the model without its tokenizer)" in err
    status, _, _ = run_main(
        capsys, "convert", str(gguf), str(tmp_path / "c"), "--to", "hf", "--no-tokenizer"
    )
    assert status == 0
    assert "tokenizer.json" not in os.listdir(tmp_path / "c")


def test_pre_tokenizer_names_are_each_one_row() -> None:
    names = [n for row in PRE_TOKENIZERS for n in row.names]
    assert len(names) == len(set(names))
    assert {"llama-bpe", "qwen2", "qwen35", "gpt-2"} <= set(names)


TEXTS = [
    "Hello world", " leading space", "two  spaces\tand a tab", "\n\nnew lines \n",
    "ünïcödé and 🦙 bytes", "Zürich 東京", "", " ", "x" * 40, "numbers 12345 6789",
]  # fmt: skip


@needs("sentencepiece", "transformers", "tokenizers")
@pytest.mark.parametrize("prefix", [True, False], ids=["add_dummy_prefix", "no_prefix"])
def test_a_trained_sentencepiece_model_comes_back(prefix: bool, tmp_path: Path) -> None:
    """A SentencePiece BPE trained here (gemma's kind without the dummy prefix),
    read into GGUF keys as llama.cpp's converter reads it: the files written
    tokenize every text as SentencePiece does, and ``tokenizer.model`` holds its
    pieces, scores and types."""
    import io

    model = io.BytesIO()
    corpus = [f"{t} {i} the quick brown fox jumps over the lazy dog" for i, t in enumerate(TEXTS)]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus * 20), model_writer=model, vocab_size=400,
        model_type="bpe", byte_fallback=True, add_dummy_prefix=prefix,
        remove_extra_whitespaces=False, normalization_rule_name="identity",
        user_defined_symbols=["<start_of_turn>"],
        minloglevel=2,
    )  # fmt: skip
    sp = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    n = sp.vocab_size()
    kinds = [
        2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
        else 6 if sp.is_byte(i) else 1
        for i in range(n)
    ]  # fmt: skip
    user = sp.piece_to_id("<start_of_turn>")
    kinds[user] = 4  # the converter's USER_DEFINED, from the checkpoint's added tokens
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [sp.id_to_piece(i) for i in range(n)],
        "tokenizer.ggml.scores": np.array([sp.get_score(i) for i in range(n)], dtype=np.float32),
        "tokenizer.ggml.token_type": np.array(kinds, dtype=np.int32),
        "tokenizer.ggml.unknown_token_id": sp.unk_id(),
        "tokenizer.ggml.bos_token_id": sp.bos_id(),
        "tokenizer.ggml.eos_token_id": sp.eos_id(),
        "tokenizer.ggml.add_space_prefix": prefix,
    }
    files = tokenizer_files(meta)
    assert files is not None
    tok = transformers.AutoTokenizer.from_pretrained(_write(files, tmp_path / "tok"))
    back = sentencepiece.SentencePieceProcessor(model_proto=files["tokenizer.model"])
    for text in TEXTS:
        ids = sp.encode(text)
        assert back.encode(text) == ids, text
        assert tok.encode(text, add_special_tokens=False) == ids, text
        assert tok.decode(ids) == sp.decode(ids), text
    # around an added token, each piece of text gets the prefix, as llama.cpp
    # tokenizes it (and Llama 2's tokenizer.json): SentencePiece prefixes the start only
    text = "a<start_of_turn>b"
    assert back.encode(text) == sp.encode(text)
    pieces = [*sp.encode("a"), user, *sp.encode("b")]
    assert tok.encode(text, add_special_tokens=False) == pieces
    assert (pieces == sp.encode(text)) == (not prefix)
    assert [back.id_to_piece(i) for i in range(n)] == meta["tokenizer.ggml.tokens"]
