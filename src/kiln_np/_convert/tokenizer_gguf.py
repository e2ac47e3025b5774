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
  ``qwen3moe``: GPT-2-style BPE;
- ``gemma3``: ``tokenizer.model`` (then ``add_space_prefix`` false), else BPE;
- ``phi3``: GPT-2-style BPE when ``tokenizer_class`` is ``GPT2Tokenizer``, else
  ``tokenizer.model`` by phi3's own reading (added tokens from
  ``tokenizer_config.json`` and ``tokenizer.json``, without the id checks).

A SentencePiece vocabulary is ``config.json``'s ``vocab_size`` long (the model's
pieces, the rest ``[PAD{i}]``, unused, score -10000); its pieces' types are the
converter's (a user-defined piece of the model is normal; the ids of
``added_tokens.json`` and ``added_tokens_decoder`` are user-defined or control,
score -1000).  A GPT-2-style vocabulary is read with the tokenizers package as
transformers 5.25's ``AutoTokenizer`` loads it, and its pre-tokenizer named by the
converter's table (:mod:`kiln_np._convert.tokenizer_pre`): the SHA-256 of the
ids of a fixed text, BOS as the tokenizer adds it.  An unknown hash is TYPE, with
the converter's hint.  Special tokens, merges and the chat template follow
(:mod:`kiln_np._convert.tokenizer_special`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular

from .models import architecture_of
from .spm_model import BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, read_pieces
from .tokenizer_pre import CHKTXT, PRE_BY_HASH
from .tokenizer_special import KeyWriter, SpecialVocab, json_file, text_file

__all__ = ["MAX_VOCAB", "TokenizerKey", "hashed_ids", "tokenizer_keys"]

MAX_VOCAB = 1 << 24
"""The largest vocabulary (``config.json``'s ``vocab_size``) a conversion builds."""

_MAX_MODEL_BYTES = 1 << 30
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


class TokenizerKey(NamedTuple):
    """One key the converter writes: name, value and GGUF type as
    ``GGUFMetadata.types`` spells it (``save_gguf``'s ``metadata_types``).

    Values are typed as a GGUF file reads back: ``str``, ``bool``, ``numpy.uint32``,
    a ``list`` of ``str``, or a 1-D ``float32``/``int32`` array."""

    key: str
    value: Any
    type: str


class _FallbackError(Exception):
    """The converter's FileNotFoundError/TypeError that sends it to its next vocabulary."""


@dataclass
class _Checkpoint:
    directory: str
    hparams: dict[str, Any]

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def where(self, name: str) -> str:
        return f"{self.path(name)}: "


def _refused(message: str) -> KilnError:
    return KilnError("TYPE", message)


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
    ckpt = _Checkpoint(os.fspath(directory), hparams)
    if not (
        os.path.isfile(ckpt.path("tokenizer.model")) or os.path.isfile(ckpt.path("tokenizer.json"))
    ):
        raise _refused(
            f"{ckpt.directory}: expected tokenizer.model or tokenizer.json, found neither"
        )
    out = KeyWriter()
    _SET_VOCAB[arch](ckpt, out)
    return [TokenizerKey(k, v, t) for k, (v, t) in out.keys.items()]


# -- the architectures' set_vocab ----------------------------------------------------


def _llama(ckpt: _Checkpoint, out: KeyWriter) -> None:
    if os.path.isfile(ckpt.path("tekken.json")) and not os.path.isfile(ckpt.path("tokenizer.json")):
        raise _refused(
            f"{ckpt.where('tekken.json')}expected tokenizer.json, found a Mistral tekken vocabulary"
        )
    config = json_file(ckpt.path("tokenizer_config.json")) or {}
    if (prefix := config.get("add_prefix_space")) is not None:
        out.add("tokenizer.ggml.add_space_prefix", bool(prefix), "bool")
    try:
        _sentencepiece(ckpt, out)
    except _FallbackError:
        try:
            _llama_hf(ckpt, out)
        except _FallbackError:
            _gpt2(ckpt, out)
    vocab_size = ckpt.hparams.get("vocab_size", 32000)
    if vocab_size == 32016:  # CodeLlama: only the EOT id has a GGUF key of the four
        special = SpecialVocab(
            ckpt.directory, special_token_types=("prefix", "suffix", "middle", "eot")
        )
        for typ, tid in (("prefix", 32007), ("suffix", 32008), ("middle", 32009), ("eot", 32010)):
            special.set_id(typ, tid)
        special.write(out)
    if vocab_size == 49152:  # granite's small models
        out.add("tokenizer.ggml.add_bos_token", False, "bool")


def _qwen2(ckpt: _Checkpoint, out: KeyWriter) -> None:
    try:
        _sentencepiece(ckpt, out)
    except _FallbackError:
        _gpt2(ckpt, out)


def _qwen3(ckpt: _Checkpoint, out: KeyWriter) -> None:
    _not_interns1(ckpt)
    _qwen2(ckpt, out)


def _qwen3moe(ckpt: _Checkpoint, out: KeyWriter) -> None:
    _not_interns1(ckpt)
    _gpt2(ckpt, out)


def _not_interns1(ckpt: _Checkpoint) -> None:
    archs = ckpt.hparams.get("architectures")
    if isinstance(archs, list) and archs and archs[0] == "InternS1ForConditionalGeneration":
        raise _refused(f"{ckpt.directory}: expected a Qwen3 tokenizer, found InternS1's")


def _gemma3(ckpt: _Checkpoint, out: KeyWriter) -> None:
    if os.path.isfile(ckpt.path("tokenizer.model")):
        _sentencepiece(ckpt, out)
        out.add("tokenizer.ggml.add_space_prefix", False, "bool")
    else:
        _gpt2(ckpt, out)


def _phi3(ckpt: _Checkpoint, out: KeyWriter) -> None:
    config = json_file(ckpt.path("tokenizer_config.json"))
    if config is not None:
        if "tokenizer_class" not in config:
            raise _refused(
                f"{ckpt.where('tokenizer_config.json')}expected a tokenizer_class, found none"
            )
        if config["tokenizer_class"] == "GPT2Tokenizer":
            _gpt2(ckpt, out)
            return
    if not os.path.isfile(ckpt.path("tokenizer.model")):
        raise _refused(
            f"{ckpt.where('tokenizer.model')}expected the file (phi3's vocabulary), found none"
        )
    tokens, scores, types = _pieces(ckpt, strict_range=False)
    for added in _added_tokens_decoder(ckpt, config):
        _set(tokens, scores, types, added["id"], added["content"], USER_DEFINED, strict=False)
        if added.get("special"):
            types[added["id"]] = CONTROL
    tokenizer = json_file(ckpt.path("tokenizer.json"))
    for added in _added_list(ckpt, tokenizer):
        _set(tokens, scores, types, added["id"], added["content"], USER_DEFINED, strict=False)
        if added.get("special"):
            types[added["id"]] = CONTROL
    _write_llama(ckpt, out, tokens, scores, types)


_SET_VOCAB: dict[str, Callable[[_Checkpoint, KeyWriter], None]] = {
    "llama": _llama,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3moe": _qwen3moe,
    "gemma3": _gemma3,
    "phi3": _phi3,
}


# -- SentencePiece ---------------------------------------------------------------------


def _looks_special(token: str) -> bool:
    """The converter's ``does_token_look_special``."""
    return (
        token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (token.startswith("<|") and token.endswith("|>"))
        or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
        or (token.startswith("<unused") and token.endswith(">"))
    )


def _vocab_size(ckpt: _Checkpoint, keys: tuple[str, ...], default: int) -> int:
    key = next((k for k in keys if k in ckpt.hparams), None)
    size = (ckpt.hparams[key] if key else None) or default
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_VOCAB:
        raise _refused(
            f"{ckpt.where('config.json')}expected vocab_size from 1 to {MAX_VOCAB}, found {size!r}"
        )
    return size


def _pieces(ckpt: _Checkpoint, *, strict_range: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``_create_vocab_sentencepiece`` up to the added tokens: the model's pieces in a
    ``vocab_size`` of ``[PAD{i}]``; ``added_tokens.json`` applied."""
    path = ckpt.path("tokenizer.model")
    if not os.path.isfile(path):
        raise _FallbackError
    with open_regular(path) as f:
        data = f.read(_MAX_MODEL_BYTES + 1)
    if len(data) > _MAX_MODEL_BYTES:
        raise _refused(
            f"{ckpt.where('tokenizer.model')}expected at most {_MAX_MODEL_BYTES} bytes, found more"
        )
    pieces = read_pieces(data, ckpt.where("tokenizer.model"))
    keys = ("vocab_size_per_layer_input", "vocab_size") if strict_range else ("vocab_size",)
    size = _vocab_size(ckpt, keys, len(pieces))
    if not strict_range and len(pieces) > size:  # phi3's reading has no range check
        raise _refused(
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
        raise _refused(
            f"expected an added token as a string and an id >= 0, found {text!r} at {tid!r}"
        )
    if tid >= len(tokens):
        if strict:
            return
        raise _refused(
            f"expected added token {text!r} at an id below vocab_size {len(tokens)}, found {tid}"
        )
    tokens[tid], scores[tid], types[tid] = text, -1000.0, kind


def _added_tokens_decoder(ckpt: _Checkpoint, config: Any) -> list[dict[str, Any]]:
    table = (config or {}).get("added_tokens_decoder", {})
    if not isinstance(table, dict):
        raise _refused(
            f"{ckpt.where('tokenizer_config.json')}expected added_tokens_decoder as an object"
        )
    out = []
    for key, data in table.items():
        if not (key.isdigit() and isinstance(data, dict) and isinstance(data.get("content"), str)):
            raise _refused(
                f"{ckpt.where('tokenizer_config.json')}expected added_tokens_decoder entries as "
                f'"id": {{"content": str, ...}}, found {key!r}'
            )
        out.append({**data, "id": int(key)})
    return out


def _added_list(ckpt: _Checkpoint, tokenizer: Any) -> list[dict[str, Any]]:
    added = (tokenizer or {}).get("added_tokens", [])
    if not isinstance(added, list) or not all(
        isinstance(a, dict) and isinstance(a.get("id"), int) and isinstance(a.get("content"), str)
        for a in added
    ):
        raise _refused(
            f"{ckpt.where('tokenizer.json')}expected added_tokens as objects with an id "
            "and a content"
        )
    return added


def _sentencepiece(ckpt: _Checkpoint, out: KeyWriter) -> None:
    """``_set_vocab_sentencepiece``."""
    tokens, scores, types = _pieces(ckpt, strict_range=True)
    for added in _added_tokens_decoder(ckpt, json_file(ckpt.path("tokenizer_config.json"))):
        text = added["content"]
        special = bool(added.get("special")) or _looks_special(text)
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
    _write_llama(ckpt, out, tokens, scores, types)


def _write_llama(
    ckpt: _Checkpoint, out: KeyWriter, tokens: list[str], scores: np.ndarray, types: np.ndarray
) -> None:
    out.add("tokenizer.ggml.model", "llama", "string")
    out.add("tokenizer.ggml.pre", "default", "string")
    out.add_list("tokenizer.ggml.tokens", tokens, "array[string]")
    out.add_list("tokenizer.ggml.scores", scores, "array[float32]")
    out.add_list("tokenizer.ggml.token_type", types, "array[int32]")
    SpecialVocab(ckpt.directory, n_vocab=len(tokens)).write(out)


# -- tokenizer.json --------------------------------------------------------------------


@dataclass
class _Loaded:
    """A ``tokenizer.json`` as transformers 5.25's AutoTokenizer holds it."""

    tokenizer: Any  # tokenizers.Tokenizer
    specials: list[str]  # all_special_tokens


def _token_text(value: Any) -> str | None:
    text = value.get("content") if isinstance(value, dict) else value
    return text if isinstance(text, str) else None


def _load(ckpt: _Checkpoint) -> _Loaded:
    if not os.path.isfile(ckpt.path("tokenizer.json")):
        raise _refused(
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
    tj = json_file(ckpt.path("tokenizer.json"))
    config = json_file(ckpt.path("tokenizer_config.json")) or {}
    cls = config.get("tokenizer_class")
    if cls not in _LOADED_AS_IS and cls not in _REBUILT:
        raise _refused(
            f"{ckpt.where('tokenizer_config.json')}expected tokenizer_class one of "
            f"{sorted(c for c in _LOADED_AS_IS if c)} or {sorted(_REBUILT)}, found {cls!r}"
        )
    try:
        tok = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises plain Exception for a bad document
        raise _refused(
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
            raise _refused(
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
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     try:
    ...         hashed_ids(tmp)
    ...     except KilnError as e:
    ...         print(e.kind, e.message.endswith("a BPE vocabulary), found none"))
    TYPE True
    """
    ids: list[int] = _load(_Checkpoint(os.fspath(directory), {})).tokenizer.encode(CHKTXT).ids
    return ids


def _pre_tokenizer(loaded: _Loaded, where: str) -> str:
    """The converter's ``get_vocab_base_pre``: its table's name for the SHA-256 of the
    ids of its fixed text."""
    ids = loaded.tokenizer.encode(CHKTXT).ids
    chkhsh = hashlib.sha256(str(ids).encode()).hexdigest()
    if chkhsh not in PRE_BY_HASH:
        raise _refused(
            f"{where}BPE pre-tokenizer was not recognized - update get_vocab_base_pre() "
            f"(chkhsh {chkhsh}: the model has not been added to convert_hf_to_gguf_update.py "
            "yet, or the pre-tokenization config has changed upstream; "
            "ref: https://github.com/ggml-org/llama.cpp/pull/6920)"
        )
    return PRE_BY_HASH[chkhsh]


def _gpt2(ckpt: _Checkpoint, out: KeyWriter) -> None:
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
        raise _refused(
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
            if decoder[i].special or _looks_special(token):
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
    SpecialVocab(ckpt.directory, load_merges=True).write(out)


def _llama_hf(ckpt: _Checkpoint, out: KeyWriter) -> None:
    """gguf-py's ``LlamaHfVocab``: a SentencePiece-style BPE ``tokenizer.json``."""
    tj = json_file(ckpt.path("tokenizer.json"))
    if tj is None:
        raise _FallbackError
    model, decoder = tj.get("model"), tj.get("decoder")
    if not isinstance(model, dict) or not isinstance(decoder, dict):
        raise _refused(f"{ckpt.where('tokenizer.json')}expected a model and a decoder, found none")
    bpe = model.get("type") == "BPE"
    if bpe and model.get("ignore_merges", False) and not model.get("byte_fallback", True):
        raise _FallbackError  # Llama 3: GPT-2-style
    if not bpe or not model.get("byte_fallback", False) or decoder.get("type") != "Sequence":
        raise _FallbackError
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
            raise _refused(
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
    _write_llama(
        ckpt, out, tokens, np.full(len(tokens), -1000.0, np.float32), np.array(types, np.int32)
    )
