"""A ``tokenizer.json`` vocabulary as llama.cpp's converter reads it through
transformers 5.25's ``AutoTokenizer``, reproduced with the tokenizers package (the
``hf`` extra, imported here only): GPT-2-style BPE (``get_vocab_base``, with the
pre-tokenizer named by the converter's hash table) and a SentencePiece-style BPE
(gguf-py's ``LlamaHfVocab``).

transformers loads ``tokenizer.json`` as it is for the classes of
``_LOADED_AS_IS``; ``GPT2Tokenizer`` and ``Qwen2Tokenizer`` rebuild its model,
normalizer, pre-tokenizer and decoder from its vocabulary and merges (their
``__init__``), keeping its post-processor; special tokens a ``tokenizer_config.json``
names (or such a class defaults) that the vocabulary lacks are added at the next ids;
``add_bos_token``/``add_eos_token`` do not change the post-processor.  Any other
``tokenizer_class`` is TYPE: what transformers would build for it is not reproduced.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .spm_model import BYTE, CONTROL, NORMAL, UNUSED, USER_DEFINED
from .tokenizer_files import (
    MAX_VOCAB,
    Checkpoint,
    FallbackError,
    KeyWriter,
    json_file,
    looks_special,
    refusal,
    text_file,
)
from .tokenizer_pre import CHKTXT, PRE_BY_HASH
from .tokenizer_special import SpecialVocab, write_llama_vocab

__all__ = ["gpt2_vocab", "hashed_ids", "llama_hf_vocab"]

_SPACE = "\u2581"  # SentencePiece's word boundary
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_LOADED_AS_IS = frozenset(
    {None, "TokenizersBackend", "PreTrainedTokenizerFast", "LlamaTokenizer", "LlamaTokenizerFast"}
)
"""``tokenizer_class`` values transformers 5.25 loads from ``tokenizer.json`` as it is;
``GPT2Tokenizer`` and ``Qwen2Tokenizer`` build their own pipeline from its vocabulary."""
_REBUILT: dict[str, dict[str, str]] = {
    # the class's default special tokens (transformers 5.25's __init__ arguments)
    "GPT2Tokenizer": {
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
    },
    "Qwen2Tokenizer": {
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
    },
}
_FAST_NAMES = {"GPT2TokenizerFast": "GPT2Tokenizer", "Qwen2TokenizerFast": "Qwen2Tokenizer"}
"""transformers 5 loads these names as the class they name without ``Fast``."""
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_NAMED = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclass
class _Loaded:
    """A ``tokenizer.json`` as transformers 5.25's AutoTokenizer holds it."""

    tokenizer: Any  # tokenizers.Tokenizer
    specials: list[str]  # all_special_tokens


def _token_text(value: Any) -> str | None:
    text = value.get("content") if isinstance(value, dict) else value
    return text if isinstance(text, str) else None


def _load(ckpt: Checkpoint) -> _Loaded:
    if not os.path.isfile(ckpt.path("tokenizer.json")):
        raise refusal(
            f"{ckpt.where('tokenizer.json')}expected the file (a BPE vocabulary), found none"
        )
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )

    text = text_file(ckpt.path("tokenizer.json"), ckpt.where("tokenizer.json"))
    tj = ckpt.tokenizer_json()
    config = json_file(ckpt.path("tokenizer_config.json")) or {}
    cls = config.get("tokenizer_class")
    cls = _FAST_NAMES.get(cls, cls) if isinstance(cls, str) else cls
    if cls not in _LOADED_AS_IS and cls not in _REBUILT:
        raise refusal(
            f"{ckpt.where('tokenizer_config.json')}expected tokenizer_class one of "
            f"{sorted(c for c in _LOADED_AS_IS if c)} or {sorted(_REBUILT)}, found {cls!r}"
        )
    try:
        tok = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises plain Exception for a bad document
        raise refusal(
            f"{ckpt.where('tokenizer.json')}expected a tokenizers document, found: {exc}"
        ) from None
    named: dict[str, str | None] = dict(_REBUILT.get(str(cls), {}))
    named.update({k: _token_text(config[k]) for k in _NAMED if k in config})
    extra = config.get("extra_special_tokens", config.get("additional_special_tokens", []))
    specials = list(
        dict.fromkeys(
            [t for k in _NAMED if (t := named.get(k))]
            + [t for e in (extra if isinstance(extra, list) else []) if (t := _token_text(e))]
        )
    )
    vocab = tok.get_vocab(with_added_tokens=True)
    missing = [t for t in specials if t not in vocab]
    if missing:  # transformers adds them, at the next ids
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    if cls in _REBUILT:
        model = tj.get("model", {})
        merges: list[tuple[str, str]] = [
            (m.split(" ", 1)[0], m.split(" ", 1)[-1]) if isinstance(m, str) else (m[0], m[-1])
            for m in model.get("merges", [])
        ]
        tok.model = models.BPE(
            vocab=model.get("vocab", {}),
            merges=merges,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
        )
        prefix = config.get("add_prefix_space", False)
        if cls == "GPT2Tokenizer" and not isinstance(prefix, bool):
            raise refusal(
                f"{ckpt.where('tokenizer_config.json')}expected add_prefix_space true or false "
                f"for a GPT2Tokenizer (transformers fails on others), found {prefix!r}"
            )
        prefix = bool(prefix)
        tok.decoder = decoders.ByteLevel()
        if cls == "Qwen2Tokenizer":
            tok.normalizer = normalizers.NFC()
            tok.pre_tokenizer = pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
                    pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=False),
                ]
            )
        else:
            tok.normalizer = None
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    return _Loaded(tok, specials)


def hashed_ids(directory: str | os.PathLike[str]) -> list[int]:
    """The ids of the converter's fixed text ``CHKTXT`` as transformers 5.25's
    ``AutoTokenizer`` of ``directory`` gives them (``encode``, special tokens added),
    whose SHA-256 names the pre-tokenizer; read with the tokenizers package.

    >>> import tempfile
    >>> from kiln_np import KilnError
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     try:
    ...         hashed_ids(tmp)
    ...     except KilnError as e:
    ...         print(e.kind, e.message.endswith("a BPE vocabulary), found none"))
    TYPE True
    """
    ids: list[int] = _load(Checkpoint(os.fspath(directory), {})).tokenizer.encode(CHKTXT).ids
    return ids


def _pre_tokenizer(loaded: _Loaded, where: str) -> str:
    """The converter's ``get_vocab_base_pre``: its table's name for the SHA-256 of the
    ids of its fixed text."""
    ids = loaded.tokenizer.encode(CHKTXT).ids
    chkhsh = hashlib.sha256(str(ids).encode()).hexdigest()
    if chkhsh not in PRE_BY_HASH:
        raise refusal(
            f"{where}BPE pre-tokenizer was not recognized - update get_vocab_base_pre() "
            f"(chkhsh {chkhsh}: the model has not been added to convert_hf_to_gguf_update.py "
            "yet, or the pre-tokenization config has changed upstream; "
            "ref: https://github.com/ggml-org/llama.cpp/pull/6920)"
        )
    return PRE_BY_HASH[chkhsh]


def gpt2_vocab(ckpt: Checkpoint, out: KeyWriter) -> None:
    """``_set_vocab_gpt2`` (``get_vocab_base``)."""
    loaded = _load(ckpt)
    tok = loaded.tokenizer
    vocab = tok.get_vocab(with_added_tokens=True)
    size = ckpt.hparams.get("vocab_size", len(vocab))
    if (
        not isinstance(size, int)
        or isinstance(size, bool)
        or not max(vocab.values(), default=-1) < size <= MAX_VOCAB
    ):
        raise refusal(
            f"{ckpt.where('config.json')}expected vocab_size above every token id "
            f"({max(vocab.values(), default=-1)}) and at most {MAX_VOCAB}, found {size!r}"
        )
    pre = _pre_tokenizer(loaded, ckpt.where("tokenizer.json"))
    reverse = {i: t for t, i in vocab.items()}
    decoder = tok.get_added_tokens_decoder()
    added = {t.content for _, t in sorted(decoder.items())}
    tokens: list[str] = []
    types = np.full(size, UNUSED, np.int32)
    for i in range(size):
        token = reverse.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            continue
        if token in added and i in decoder:
            if not decoder[i].normalized:
                token = tok.decode(
                    tok.encode(token, add_special_tokens=False).ids, skip_special_tokens=False
                )
            if decoder[i].special or looks_special(token):
                types[i] = CONTROL
            else:
                token = token.replace(_SPACE, " ")
                types[i] = USER_DEFINED
        else:
            types[i] = NORMAL
        tokens.append(token)
    out.add("tokenizer.ggml.model", "gpt2", "string")
    out.add("tokenizer.ggml.pre", pre, "string")
    out.add_list("tokenizer.ggml.tokens", tokens, "array[string]")
    out.add_list("tokenizer.ggml.token_type", types, "array[int32]")
    SpecialVocab(ckpt, load_merges=True).write(out)


def llama_hf_vocab(ckpt: Checkpoint, out: KeyWriter) -> None:
    """gguf-py's ``LlamaHfVocab``: a SentencePiece-style BPE ``tokenizer.json``."""
    tj = ckpt.tokenizer_json()
    if tj is None:
        raise FallbackError
    model, decoder = tj.get("model"), tj.get("decoder")
    if not isinstance(model, dict) or not isinstance(decoder, dict):
        raise refusal(f"{ckpt.where('tokenizer.json')}expected a model and a decoder, found none")
    bpe = model.get("type") == "BPE"
    if bpe and model.get("ignore_merges", False) and not model.get("byte_fallback", True):
        raise FallbackError  # Llama 3: GPT-2-style
    if not bpe or not model.get("byte_fallback", False) or decoder.get("type") != "Sequence":
        raise FallbackError
    loaded = _load(ckpt)
    tok = loaded.tokenizer
    base = tok.get_vocab_size(with_added_tokens=False)
    vocab = tok.get_vocab(with_added_tokens=True)
    reverse = {i: t for t, i in vocab.items()}
    added = [(t.content, i) for i, t in sorted(tok.get_added_tokens_decoder().items()) if i >= base]
    special_ids = {vocab[t] for t in loaded.specials if t in vocab}
    tokens: list[str] = []
    for i in range(base):
        if i not in reverse:
            raise refusal(
                f"{ckpt.where('tokenizer.json')}expected a token at every id below {base}, "
                f"found none at {i}"
            )
        tokens.append(reverse[i])
    types = [
        BYTE if _BYTE_PIECE.fullmatch(t) else CONTROL if i in special_ids else NORMAL
        for i, t in enumerate(tokens)
    ]
    for text, _ in added:
        tokens.append(text)
        types.append(
            CONTROL if text in loaded.specials and vocab[text] in special_ids else USER_DEFINED
        )
    write_llama_vocab(
        ckpt, out, tokens, np.full(len(tokens), -1000.0, np.float32), np.array(types, np.int32)
    )
