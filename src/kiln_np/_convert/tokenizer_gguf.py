"""A Hugging Face tokenizer directory as the ``tokenizer.ggml.*`` keys llama.cpp's
converter writes (``convert_hf_to_gguf.py`` of llama-cpp-python 0.3.36's
llama.cpp): :func:`tokenizer_keys`, the keys of its ``set_vocab`` for an
architecture of the model map, in its order, with its value types.

Which vocabulary each architecture takes (the converter's choice, kept here):

- ``llama`` (and mistral): ``tokenizer_config.json``'s ``add_prefix_space`` first
  (``add_space_prefix``), then ``tokenizer.model`` (SentencePiece); without one,
  a SentencePiece-style ``tokenizer.json`` (BPE with ``byte_fallback`` and a
  ``Sequence`` decoder: gguf-py's ``LlamaHfVocab``); else GPT-2-style BPE.
  CodeLlama's vocabulary (32016) adds the EOT id; granite's (49152) sets
  ``add_bos_token`` false;
- ``qwen2``, ``qwen3``: ``tokenizer.model`` if there is one, else GPT-2-style BPE;
  ``qwen3moe``, ``qwen2moe``: GPT-2-style BPE;
- ``gemma3``: ``tokenizer.model`` (then ``add_space_prefix`` false), else BPE;
- ``gemma2``: ``tokenizer.model`` (then ``add_space_prefix`` false), no other;
- ``phi3``: GPT-2-style BPE when ``tokenizer_class`` is ``GPT2Tokenizer``, else
  ``tokenizer.model`` by phi3's own reading (added tokens from
  ``tokenizer_config.json`` and ``tokenizer.json``, without the id checks).

A SentencePiece vocabulary (``tokenizer.model`` read by
:mod:`kiln_np._convert.spm_model`, no sentencepiece package needed) is
``config.json``'s ``vocab_size`` long (the model's
pieces, the rest ``[PAD{i}]``, unused, score -10000); its pieces' types are the
converter's (a user-defined piece of the model is normal; the ids of
``added_tokens.json`` and ``added_tokens_decoder`` are user-defined or control,
score -1000).  A ``tokenizer.json`` vocabulary is read with the tokenizers package as
transformers 5.25's ``AutoTokenizer`` loads it (:mod:`kiln_np._convert.tokenizer_bpe`),
a GPT-2-style one's pre-tokenizer named by the
converter's table (:mod:`kiln_np._convert.tokenizer_pre`): the SHA-256 of the
ids of a fixed text, BOS as the tokenizer adds it.  An unknown hash is TYPE, with
the converter's hint.  Special tokens, merges and the chat template follow
(:mod:`kiln_np._convert.tokenizer_special`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from .models import architecture_of
from .spm_model import BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, read_pieces
from .tokenizer_bpe import gpt2_vocab, llama_hf_vocab
from .tokenizer_files import (
    MAX_VOCAB,
    Checkpoint,
    FallbackError,
    KeyWriter,
    file_bytes,
    json_file,
    looks_special,
    refusal,
)
from .tokenizer_special import SpecialVocab, write_llama_vocab

__all__ = ["TokenizerKey", "tokenizer_keys"]

_SPACE = "\u2581"  # SentencePiece's word boundary


class TokenizerKey(NamedTuple):
    """One key the converter writes: name, value and GGUF type as
    ``GGUFMetadata.types`` spells it (``save_gguf``'s ``metadata_types``).

    Values are typed as a GGUF file reads back: ``str``, ``bool``, ``numpy.uint32``,
    a ``list`` of ``str``, or a 1-D ``float32``/``int32`` array."""

    key: str
    value: Any
    type: str


def tokenizer_keys(
    directory: str | os.PathLike[str], architecture: str, config: Mapping[str, Any]
) -> list[TokenizerKey]:
    """The ``tokenizer.ggml.*`` (and ``tokenizer.chat_template``) keys
    ``convert_hf_to_gguf.py`` writes for the checkpoint in ``directory``, in its order.

    Parameters
    ----------
    directory : path
        The Hugging Face checkpoint directory (its tokenizer files and ``config.json``).
    architecture : str
        An architecture of the model map, by GGUF or transformers name (``"llama"``,
        ``"mistral"``, ``"qwen3moe"``, ``"gemma3"``, ...).
    config : mapping
        ``config.json`` as read (a ``text_config`` is merged in, as the converter does).

    Returns
    -------
    list of TokenizerKey
        ``(key, value, type)`` in the converter's order; they come after every
        other key of the file (the converter sets the vocabulary last).

    Raises
    ------
    KilnError
        TYPE where the converter fails or refuses (an unknown BPE pre-tokenizer,
        with its hint), for a tokenizer it would read through code this module does
        not reproduce, and for malformed files; LENGTH for a cut ``tokenizer.model``.

    Examples
    --------
    A SentencePiece model of two pieces (``<unk>``, ``a``) in a vocabulary of 3:

    >>> import os, tempfile
    >>> def piece(text, kind):  # a SentencePiece message: text, score 0, type
    ...     body = bytes([10, len(text)]) + text + bytes([21, 0, 0, 0, 0, 24, kind])
    ...     return bytes([10, len(body)]) + body
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with open(os.path.join(tmp, "tokenizer.model"), "wb") as f:
    ...         _ = f.write(piece(b"<unk>", 2) + piece(b"a", 1))
    ...     keys = tokenizer_keys(tmp, "llama", {"vocab_size": 3})
    >>> [k.key for k in keys]  # doctest: +NORMALIZE_WHITESPACE
    ['tokenizer.ggml.model', 'tokenizer.ggml.pre', 'tokenizer.ggml.tokens',
     'tokenizer.ggml.scores', 'tokenizer.ggml.token_type']
    >>> keys[2].value, keys[4].value.tolist(), keys[4].type
    (['<unk>', 'a', '[PAD2]'], [2, 1, 5], 'array[int32]')
    """
    arch = architecture_of(architecture).gguf
    hparams = dict(config)
    if isinstance(hparams.get("text_config"), Mapping):
        hparams = {**hparams, **hparams["text_config"]}
    ckpt = Checkpoint(os.fspath(directory), hparams)
    if not (
        os.path.isfile(ckpt.path("tokenizer.model")) or os.path.isfile(ckpt.path("tokenizer.json"))
    ):
        raise refusal(
            f"{ckpt.directory}: expected tokenizer.model or tokenizer.json, found neither"
        )
    out = KeyWriter()
    _SET_VOCAB[arch](ckpt, out)
    return [TokenizerKey(k, v, t) for k, (v, t) in out.keys.items()]


# -- the architectures' set_vocab ----------------------------------------------------


def _llama(ckpt: Checkpoint, out: KeyWriter) -> None:
    if os.path.isfile(ckpt.path("tekken.json")) and not os.path.isfile(ckpt.path("tokenizer.json")):
        raise refusal(
            f"{ckpt.where('tekken.json')}expected tokenizer.json, found a Mistral tekken vocabulary"
        )
    config = json_file(ckpt.path("tokenizer_config.json")) or {}
    if (prefix := config.get("add_prefix_space")) is not None:
        out.add("tokenizer.ggml.add_space_prefix", bool(prefix), "bool")
    if config.get("tokenizer_class") == "HybridDNATokenizer":
        raise refusal(
            f"{ckpt.where('tokenizer_config.json')}expected a text tokenizer, found HybridDNA"
        )
    try:
        _sentencepiece(ckpt, out)
    except FallbackError:
        try:
            llama_hf_vocab(ckpt, out)
        except FallbackError:
            gpt2_vocab(ckpt, out)
    vocab_size = ckpt.hparams.get("vocab_size", 32000)
    if vocab_size == 32016:  # CodeLlama: only the EOT id has a GGUF key of the four
        special = SpecialVocab(ckpt, special_token_types=("prefix", "suffix", "middle", "eot"))
        for typ, tid in (("prefix", 32007), ("suffix", 32008), ("middle", 32009), ("eot", 32010)):
            special.set_id(typ, tid)
        special.write(out)
    if vocab_size == 49152:  # granite's small models
        out.add("tokenizer.ggml.add_bos_token", False, "bool")


def _qwen2(ckpt: Checkpoint, out: KeyWriter) -> None:
    try:
        _sentencepiece(ckpt, out)
    except FallbackError:
        gpt2_vocab(ckpt, out)


def _qwen3(ckpt: Checkpoint, out: KeyWriter) -> None:
    _not_interns1(ckpt)
    _qwen2(ckpt, out)


def _qwen3moe(ckpt: Checkpoint, out: KeyWriter) -> None:
    _not_interns1(ckpt)
    gpt2_vocab(ckpt, out)


def _not_interns1(ckpt: Checkpoint) -> None:
    archs = ckpt.hparams.get("architectures")
    if isinstance(archs, list) and archs and archs[0] == "InternS1ForConditionalGeneration":
        raise refusal(f"{ckpt.directory}: expected a Qwen3 tokenizer, found InternS1's")


def _gemma3(ckpt: Checkpoint, out: KeyWriter) -> None:
    if os.path.isfile(ckpt.path("tokenizer.model")):
        _sentencepiece(ckpt, out)
        out.add("tokenizer.ggml.add_space_prefix", False, "bool")
    else:
        gpt2_vocab(ckpt, out)


def _gemma2(ckpt: Checkpoint, out: KeyWriter) -> None:
    if not os.path.isfile(ckpt.path("tokenizer.model")):
        raise refusal(
            f"{ckpt.where('tokenizer.model')}expected the file (gemma2's vocabulary), found none"
        )
    _sentencepiece(ckpt, out)
    out.add("tokenizer.ggml.add_space_prefix", False, "bool")


def _phi3(ckpt: Checkpoint, out: KeyWriter) -> None:
    config = json_file(ckpt.path("tokenizer_config.json"))
    if config is not None:
        if "tokenizer_class" not in config:
            raise refusal(
                f"{ckpt.where('tokenizer_config.json')}expected a tokenizer_class, found none"
            )
        if config["tokenizer_class"] == "GPT2Tokenizer":
            gpt2_vocab(ckpt, out)
            return
    if not os.path.isfile(ckpt.path("tokenizer.model")):
        raise refusal(
            f"{ckpt.where('tokenizer.model')}expected the file (phi3's vocabulary), found none"
        )
    tokens, scores, types = _pieces(ckpt, strict_range=False)
    for added in _added_tokens_decoder(ckpt, config):
        _set(tokens, scores, types, added["id"], added["content"], USER_DEFINED, strict=False)
        if added.get("special"):
            types[added["id"]] = CONTROL
    tokenizer = ckpt.tokenizer_json()
    for added in _added_list(ckpt, tokenizer):
        _set(tokens, scores, types, added["id"], added["content"], USER_DEFINED, strict=False)
        if added.get("special"):
            types[added["id"]] = CONTROL
    write_llama_vocab(ckpt, out, tokens, scores, types)


_SET_VOCAB: dict[str, Callable[[Checkpoint, KeyWriter], None]] = {
    "llama": _llama,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3moe": _qwen3moe,
    "gemma3": _gemma3,
    "phi3": _phi3,
    "gemma2": _gemma2,
    "qwen2moe": gpt2_vocab,
}


# -- SentencePiece ---------------------------------------------------------------------


def _vocab_size(ckpt: Checkpoint, keys: tuple[str, ...], default: int) -> int:
    key = next((k for k in keys if k in ckpt.hparams), None)
    size = (ckpt.hparams[key] if key else None) or default
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_VOCAB:
        raise refusal(
            f"{ckpt.where('config.json')}expected vocab_size from 1 to {MAX_VOCAB}, found {size!r}"
        )
    return size


def _pieces(ckpt: Checkpoint, *, strict_range: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``_create_vocab_sentencepiece`` up to the added tokens: the model's pieces in a
    ``vocab_size`` of ``[PAD{i}]``; ``added_tokens.json`` applied."""
    path = ckpt.path("tokenizer.model")
    if not os.path.isfile(path):
        raise FallbackError
    data = file_bytes(path, ckpt.where("tokenizer.model"))
    pieces = read_pieces(data, ckpt.where("tokenizer.model"))
    keys = ("vocab_size_per_layer_input", "vocab_size") if strict_range else ("vocab_size",)
    size = _vocab_size(ckpt, keys, len(pieces))
    if not strict_range and len(pieces) > size:  # phi3's reading has no range check
        raise refusal(
            f"{ckpt.where('tokenizer.model')}expected at most vocab_size {size} pieces, "
            f"found {len(pieces)}"
        )
    kept = pieces[:size]
    tokens = [p.text for p in kept] + [f"[PAD{i}]" for i in range(len(kept), size)]
    scores = np.full(size, -10000.0, np.float32)
    scores[: len(kept)] = [p.score for p in kept]
    # the converter asks IsUnknown, IsControl, IsUnused, IsByte: a user-defined piece is normal
    kinds = {UNKNOWN: UNKNOWN, CONTROL: CONTROL, UNUSED: UNUSED, BYTE: BYTE}
    types = np.full(size, UNUSED, np.int32)
    types[: len(kept)] = [kinds.get(p.type, NORMAL) for p in kept]
    added = json_file(ckpt.path("added_tokens.json"))
    for text, tid in (added or {}).items():
        _set(tokens, scores, types, tid, text, USER_DEFINED, strict=True)
    return tokens, scores, types


def _set(
    tokens: list[str],
    scores: np.ndarray,
    types: np.ndarray,
    tid: Any,
    text: Any,
    kind: int,
    *,
    strict: bool,
) -> None:
    """One added token at ``tid`` (score -1000); out of range: skipped (``strict``,
    as the converter warns and skips) or refused (where the converter fails)."""
    if not isinstance(tid, int) or isinstance(tid, bool) or tid < 0 or not isinstance(text, str):
        raise refusal(
            f"expected an added token as a string and an id >= 0, found {text!r} at {tid!r}"
        )
    if tid >= len(tokens):
        if strict:
            return
        raise refusal(
            f"expected added token {text!r} at an id below vocab_size {len(tokens)}, found {tid}"
        )
    tokens[tid], scores[tid], types[tid] = text, -1000.0, kind


def _added_tokens_decoder(ckpt: Checkpoint, config: Any) -> list[dict[str, Any]]:
    table = (config or {}).get("added_tokens_decoder", {})
    if not isinstance(table, dict):
        raise refusal(
            f"{ckpt.where('tokenizer_config.json')}expected added_tokens_decoder as an object"
        )
    out = []
    for key, data in table.items():
        if not (key.isdigit() and isinstance(data, dict) and isinstance(data.get("content"), str)):
            raise refusal(
                f"{ckpt.where('tokenizer_config.json')}expected added_tokens_decoder entries as "
                f'"id": {{"content": str, ...}}, found {key!r}'
            )
        out.append({**data, "id": int(key)})
    return out


def _added_list(ckpt: Checkpoint, tokenizer: Any) -> list[dict[str, Any]]:
    added = (tokenizer or {}).get("added_tokens", [])
    if not isinstance(added, list) or not all(
        isinstance(a, dict) and isinstance(a.get("id"), int) and isinstance(a.get("content"), str)
        for a in added
    ):
        raise refusal(
            f"{ckpt.where('tokenizer.json')}expected added_tokens as objects with an id "
            "and a content"
        )
    return added


def _sentencepiece(ckpt: Checkpoint, out: KeyWriter) -> None:
    """``_set_vocab_sentencepiece``."""
    tokens, scores, types = _pieces(ckpt, strict_range=True)
    for added in _added_tokens_decoder(ckpt, json_file(ckpt.path("tokenizer_config.json"))):
        text = added["content"]
        special = bool(added.get("special")) or looks_special(text)
        if not special:
            text = text.replace(_SPACE, " ")
        _set(
            tokens,
            scores,
            types,
            added["id"],
            text,
            CONTROL if special else USER_DEFINED,
            strict=True,
        )
    write_llama_vocab(ckpt, out, tokens, scores, types)
