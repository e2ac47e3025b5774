"""A GGUF's tokenizer (its ``tokenizer.ggml.*`` keys) as the Hugging Face files
``AutoTokenizer.from_pretrained(directory)`` loads: written beside the tensors
by ``--to hf`` (:func:`tokenizer_files`).

What is covered (:data:`PRE_TOKENIZERS` is the table of the BPE ones):

==================  ==============================================================
``tokenizer.ggml``  the files written
==================  ==============================================================
``model`` llama     SentencePiece BPE (llama, phi3, gemma3): ``tokenizer.json``
                    (a BPE over the whole text, as SentencePiece merges it: the
                    merges ranked by the score of the piece they make, byte
                    fallback, the normalizer ``Prepend("▁")`` when
                    ``add_space_prefix`` (llama.cpp's default for ``llama``)
                    and ``Replace(" ", "▁")``, no pre-tokenizer) and
                    ``tokenizer.model`` (the SentencePiece ``ModelProto``
                    serialized here, field by field, from the tokens, scores
                    and types; no protobuf package)
``model`` gpt2      GPT-2 byte-level BPE with ``merges``, the pre-tokenizer
                    ``pre`` names: ``llama-bpe`` (also ``llama3``,
                    ``llama-v3``), ``qwen2`` (also ``deepseek-r1-qwen``),
                    ``qwen35``, ``gpt-2``
==================  ==============================================================

Both also get ``tokenizer_config.json`` (``tokenizer_class``
``PreTrainedTokenizerFast``, so transformers takes ``tokenizer.json`` as it is
rather than rebuilding a pre-tokenizer of its own, the special tokens,
``add_bos_token``/``add_eos_token``, ``chat_template``, the added tokens) and
``special_tokens_map.json``.  Tokens of type CONTROL (and the unknown token)
are added tokens marked special, USER_DEFINED ones added tokens not special; a
GPT-2 vocabulary's UNUSED tokens (the ``[PAD<id>]`` the converter fills holes
with) are left out, as the checkpoint never had them.  A SentencePiece
vocabulary's ``tokenizer_config.json`` lists only the added tokens the converter
took from a checkpoint's (its mark: the score -1000), so that the converter
gives each token back its score and type from ``tokenizer.model``.  A BOS or EOS
the tokenizer adds (``add_bos_token``, ``add_eos_token``: llama.cpp's defaults
when absent) is in ``tokenizer.json``'s post-processor.

Refused (TYPE naming the key and its value): another ``tokenizer.ggml.model``
(``bert``, ``t5``, ``gemma4``, ...), another ``pre`` (llama.cpp knows about
fifty: each needs its pattern checked against its ``.inp``/``.out``), a
SentencePiece model with ``remove_extra_whitespaces``; and every malformed key:
tokens that are not strings, scores or types of another length, an id out of
range, a merge without its space, two tokens of one spelling.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError

__all__ = [
    "LONGEST_PIECE",
    "PRE_TOKENIZERS",
    "PreTokenizer",
    "Vocabulary",
    "sentencepiece_model",
    "tokenizer_files",
    "tokenizer_json",
    "vocabulary",
]

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
"""llama.cpp's token types (``tokenizer.ggml.token_type``), SentencePiece's numbers."""

_SPECIAL = {"bos": "bos_token", "eos": "eos_token", "unknown": "unk_token",
            "padding": "pad_token", "seperator": "sep_token", "mask": "mask_token"}  # fmt: skip
"""``tokenizer.ggml.<key>_token_id`` (gguf-py spells it ``seperator``) -> transformers' name."""

LONGEST_PIECE = 512
"""The longest NORMAL piece of a SentencePiece vocabulary split into merges (the
longest SentencePiece's trainer makes, ``max_sentencepiece_length``, is 512)."""

_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"


class PreTokenizer(NamedTuple):
    """One ``tokenizer.ggml.pre`` of a GPT-2-style BPE: the names llama.cpp
    reads as it, the split pattern of the model's ``tokenizer.json`` (None:
    GPT-2's own, ``ByteLevel(use_regex=True)``), and what llama.cpp sets with
    it: NFC normalization, ``ignore_merges`` (a word in the vocabulary is one
    token), whether a BOS is added by default, ``clean_up_tokenization_spaces``."""

    names: tuple[str, ...]
    pattern: str | None
    nfc: bool
    ignore_merges: bool
    add_bos: bool
    clean_spaces: bool


PRE_TOKENIZERS = (
    PreTokenizer(
        ("llama-bpe", "llama3", "llama-v3"),
        _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+",
        nfc=False, ignore_merges=True, add_bos=True, clean_spaces=True,
    ),
    PreTokenizer(
        ("qwen2", "deepseek-r1-qwen"),
        _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+",
        nfc=True, ignore_merges=False, add_bos=False, clean_spaces=False,
    ),
    PreTokenizer(
        ("qwen35",),
        _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+",
        nfc=False, ignore_merges=False, add_bos=False, clean_spaces=False,
    ),
    PreTokenizer(
        ("gpt-2",), None, nfc=False, ignore_merges=False, add_bos=False, clean_spaces=True
    ),
)  # fmt: skip
"""The GPT-2-style pre-tokenizers written (llama.cpp's ``llama-vocab.cpp`` for
the names and flags, each model's ``tokenizer.json`` for the pattern, which
llama.cpp rewrites without ``(?i:)``)."""

_PRE = {name: row for row in PRE_TOKENIZERS for name in row.names}


class Vocabulary(NamedTuple):
    """A GGUF's tokenizer keys, checked: ``model`` (``llama`` or ``gpt2``), the
    pre-tokenizer row (None for ``llama``), tokens, scores (float32; zeros when
    absent), types (int32), merges as pairs, special token ids by transformers'
    name, whether a BOS and an EOS are added, ``add_space_prefix``, the chat
    template."""

    model: str
    pre: PreTokenizer | None
    tokens: list[str]
    scores: np.ndarray
    types: np.ndarray
    merges: list[tuple[str, str]]
    special: dict[str, int]
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None


def vocabulary(metadata: Mapping[str, Any]) -> Vocabulary | None:
    """The tokenizer of a GGUF's ``metadata``, checked; None when it has none
    (no ``tokenizer.ggml.model``).

    Raises
    ------
    KilnError
        TYPE for a model or pre-tokenizer not covered (the module docstring) or
        a key of the wrong type; LENGTH for scores, types or an id that do not
        fit the tokens.

    Examples
    --------
    >>> v = vocabulary({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
    ...                 "tokenizer.ggml.tokens": ["a", "b", "ab"],
    ...                 "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.eos_token_id": 2})
    >>> v.merges, v.special, v.add_bos
    ([('a', 'b')], {'eos_token': 2}, False)
    >>> vocabulary({"tokenizer.ggml.model": "bert"})
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: TYPE: tokenizer.ggml.model: expected 'llama' (SentencePiece) or 'gpt2' (GPT-2 BPE), found str 'bert'
    """  # noqa: E501
    model = metadata.get("tokenizer.ggml.model")
    if model is None:
        return None
    if model not in ("llama", "gpt2"):
        raise KilnError(
            "TYPE",
            "tokenizer.ggml.model: expected 'llama' (SentencePiece) or 'gpt2' (GPT-2 BPE), "
            f"found {show_value(model)}",
        )
    pre = None
    if model == "gpt2":
        name = metadata.get("tokenizer.ggml.pre")
        pre = _PRE.get(name) if isinstance(name, str) else None
        if pre is None:
            known = ", ".join(repr(n) for row in PRE_TOKENIZERS for n in row.names)
            raise KilnError(
                "TYPE", f"tokenizer.ggml.pre: expected one of {known}, found {show_value(name)}"
            )
    tokens = _strings(metadata.get("tokenizer.ggml.tokens"), "tokens")
    if not tokens:
        raise KilnError("TYPE", "tokenizer.ggml.tokens: expected the tokens, found none")
    n = len(tokens)
    scores = _numbers(metadata.get("tokenizer.ggml.scores"), n, "scores")
    if scores is not None:
        scores = scores.astype(np.float32)  # as GGUF holds them; past float32: inf
    found = _numbers(metadata.get("tokenizer.ggml.token_type"), n, "token_type")
    if scores is not None and not np.all(np.isfinite(scores)):
        at = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise KilnError(
            "TYPE", f"tokenizer.ggml.scores[{at}]: expected a finite score, found {scores[at]}"
        )
    if found is None:
        found = np.full(n, NORMAL, np.int32)
    bad = np.flatnonzero((found < NORMAL) | (found > BYTE))
    if bad.size:
        raise KilnError(
            "TYPE",
            f"tokenizer.ggml.token_type[{bad[0]}]: expected a token type 1..6, "
            f"found {found[bad[0]]}",
        )
    types = found.astype(np.int32)
    merges = _strings(metadata.get("tokenizer.ggml.merges"), "merges")
    pairs = [_merge(m, i) for i, m in enumerate(merges)]
    if model == "gpt2" and not pairs:
        raise KilnError("TYPE", "tokenizer.ggml.merges: expected the BPE's merges, found none")
    special = {hf: _id(metadata, key, n) for key, hf in _SPECIAL.items()}
    spm = model == "llama"
    assert spm or pre is not None
    unknown = np.flatnonzero(types == UNKNOWN)
    if spm and special["unk_token"] is None and unknown.size:
        special["unk_token"] = int(unknown[0])  # a SentencePiece model has one
    if _flag(metadata, "remove_extra_whitespaces", default=False):
        raise KilnError(
            "TYPE",
            "tokenizer.ggml.remove_extra_whitespaces: expected false (kiln_np writes no "
            "whitespace-collapsing normalizer), found true",
        )
    template = metadata.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise KilnError(
            "TYPE", f"tokenizer.chat_template: expected a string, found {show_value(template)}"
        )
    return Vocabulary(
        model,
        pre,
        tokens,
        np.zeros(n, np.float32) if scores is None else scores,
        types,
        pairs,
        {k: v for k, v in special.items() if v is not None},
        _flag(metadata, "add_bos_token", default=spm or (pre is not None and pre.add_bos)),
        _flag(metadata, "add_eos_token", default=False),
        _flag(metadata, "add_space_prefix", default=spm),
        template,
    )


def _strings(value: object, key: str) -> list[str]:
    """``tokenizer.ggml.<key>``, a list of strings (empty when absent)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise KilnError(
            "TYPE", f"tokenizer.ggml.{key}: expected an array of strings, found {show_value(value)}"
        )
    out = list(value)
    for i, s in enumerate(out):
        if not isinstance(s, str):
            raise KilnError(
                "TYPE", f"tokenizer.ggml.{key}[{i}]: expected a string, found {show_value(s)}"
            )
    return out


def _numbers(value: object, n: int, key: str) -> np.ndarray | None:
    """``tokenizer.ggml.<key>``, ``n`` numbers (None when absent)."""
    if value is None:
        return None
    array = np.asarray(value) if isinstance(value, (np.ndarray, Sequence)) else None
    if array is None or array.ndim != 1 or array.dtype.kind not in "iuf":
        raise KilnError(
            "TYPE", f"tokenizer.ggml.{key}: expected an array of numbers, found {show_value(value)}"
        )
    if array.size != n:
        raise KilnError(
            "LENGTH",
            f"tokenizer.ggml.{key}: expected one per token ({n}), found {array.size}",
            expected=n,
            found=array.size,
        )
    return array


def _merge(merge: str, index: int) -> tuple[str, str]:
    """One ``tokenizer.ggml.merges`` entry ``"a b"`` as its pair, split at the
    first space after the first character, as llama.cpp splits it."""
    at = merge.find(" ", 1)
    if at < 0:
        raise KilnError(
            "TYPE",
            f"tokenizer.ggml.merges[{index}]: expected two tokens and a space between, "
            f"found {show_value(merge)}",
        )
    return merge[:at], merge[at + 1 :]


def _id(metadata: Mapping[str, Any], key: str, n: int) -> int | None:
    """``tokenizer.ggml.<key>_token_id``: an id below ``n``, or None."""
    value = metadata.get(f"tokenizer.ggml.{key}_token_id")
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise KilnError(
            "TYPE",
            f"tokenizer.ggml.{key}_token_id: expected a token id, found {show_value(value)}",
        )
    if not 0 <= int(value) < n:
        raise KilnError(
            "LENGTH",
            f"tokenizer.ggml.{key}_token_id: expected an id below the {n} tokens, found {value}",
            expected=n,
            found=int(value),
        )
    return int(value)


def _flag(metadata: Mapping[str, Any], key: str, *, default: bool) -> bool:
    """``tokenizer.ggml.<key>``, a bool, ``default`` when absent."""
    value = metadata.get(f"tokenizer.ggml.{key}")
    if value is None:
        return default
    if not isinstance(value, (bool, np.bool_)):
        raise KilnError("TYPE", f"tokenizer.ggml.{key}: expected a bool, found {show_value(value)}")
    return bool(value)


def tokenizer_json(vocab: Vocabulary) -> dict[str, Any]:
    """``tokenizer.json`` for ``vocab`` (the module docstring says what it holds).

    >>> v = vocabulary({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens":
    ...     ["<unk>", "<s>", "▁", "a", "▁a"], "tokenizer.ggml.scores": [0, 0, -1, -2, -3],
    ...     "tokenizer.ggml.token_type": [2, 3, 1, 1, 1]})
    >>> t = tokenizer_json(v)
    >>> t["model"]["merges"], [a["content"] for a in t["added_tokens"]]
    ([['▁', 'a']], ['<unk>', '<s>'])
    """
    tokens, types = vocab.tokens, vocab.types
    spm = vocab.pre is None
    kept = range(len(tokens)) if spm else np.flatnonzero(types != UNUSED).tolist()
    ids: dict[str, int] = {}
    for i in kept:
        seen = ids.setdefault(tokens[i], i)
        if seen != i:
            raise KilnError(
                "TYPE",
                f"tokenizer.ggml.tokens: expected each token once, found {tokens[i]!r} "
                f"at ids {seen} and {i}",
            )
    added = [
        {
            "id": i,
            "content": tokens[i],
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": int(types[i]) != USER_DEFINED,
        }
        for i in _added(vocab)
    ]
    merges = _spm_merges(vocab, ids) if spm else _bpe_merges(vocab, ids)
    model: dict[str, Any] = {
        "type": "BPE",
        "dropout": None,
        "unk_token": tokens[vocab.special["unk_token"]] if "unk_token" in vocab.special else None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": spm,
        "byte_fallback": spm and _byte_fallback(vocab),
        "ignore_merges": vocab.pre is not None and vocab.pre.ignore_merges,
        "vocab": ids,
        "merges": [list(m) for m in merges],
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        **(_spm_parts(vocab) if spm else _bpe_parts(vocab)),
        "post_processor": _post_processor(vocab),
        "model": model,
    }


def _added(vocab: Vocabulary) -> list[int]:
    """The ids of the added tokens: CONTROL and USER_DEFINED ones, and the
    unknown token (another token of type UNKNOWN, as the ``[PAD<id>]`` of
    phi3's converter, is an ordinary entry: llama.cpp never matches it in text)."""
    mask = np.isin(vocab.types, (CONTROL, USER_DEFINED))
    if "unk_token" in vocab.special:
        mask[vocab.special["unk_token"]] = True
    return np.flatnonzero(mask).tolist()


def _checkpoint_added(vocab: Vocabulary) -> list[int]:
    """The added tokens ``tokenizer_config.json`` lists: a GPT-2 BPE's all; a
    SentencePiece vocabulary's those the converter took from the checkpoint's
    added tokens, which it marks with the score -1000 (its own
    ``_create_vocab_sentencepiece``): the others are ``tokenizer.model``'s, and
    listed they would come back to GGUF with that score."""
    added = _added(vocab)
    if vocab.pre is not None:
        return added
    marked = vocab.scores[added] == np.float32(-1000.0)
    keep = marked & np.isin(vocab.types[added], (CONTROL, USER_DEFINED))
    return [i for i, k in zip(added, keep.tolist(), strict=True) if k]


def _spm_merges(vocab: Vocabulary, ids: Mapping[str, int]) -> list[tuple[str, str]]:
    """SentencePiece's BPE as merges: every split of a NORMAL piece into two
    pieces of the vocabulary, ranked by the merged piece's score (highest
    first; then its id, then the halves' ids), the order SentencePiece merges in."""
    ranked: list[tuple[float, int, int, int, str, str]] = []
    normal = np.flatnonzero(vocab.types == NORMAL).tolist()
    scores = vocab.scores.tolist()
    for i in normal:
        piece = vocab.tokens[i]
        if len(piece) > LONGEST_PIECE:  # each split is a slice: quadratic in the length
            raise KilnError(
                "TYPE",
                f"tokenizer.ggml.tokens[{i}]: expected a SentencePiece piece of at most "
                f"{LONGEST_PIECE} characters, found {len(piece)}",
            )
        for cut in range(1, len(piece)):
            left, right = ids.get(piece[:cut]), ids.get(piece[cut:])
            if left is not None and right is not None:
                ranked.append((-scores[i], i, left, right, piece[:cut], piece[cut:]))
    ranked.sort()
    return [(r[4], r[5]) for r in ranked]


def _bpe_merges(vocab: Vocabulary, ids: Mapping[str, int]) -> list[tuple[str, str]]:
    """The GGUF's merges, each of two tokens of the vocabulary that make a third,
    which a BPE needs to load."""
    for i, (a, b) in enumerate(vocab.merges):
        if a not in ids or b not in ids or a + b not in ids:
            missing = next(t for t in (a, b, a + b) if t not in ids)
            raise KilnError(
                "TYPE",
                f"tokenizer.ggml.merges[{i}]: expected tokens of the vocabulary, found "
                f"{a + ' ' + b!r}, whose {missing!r} is not one",
            )
    return vocab.merges


def _byte_fallback(vocab: Vocabulary) -> bool:
    """Whether unknown characters fall back to bytes: the 256 BYTE tokens are there."""
    return int(np.count_nonzero(vocab.types == BYTE)) == 256


def _spm_parts(vocab: Vocabulary) -> dict[str, Any]:
    """The normalizer, pre-tokenizer and decoder of a SentencePiece BPE."""
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    normalizer: dict[str, Any] = replace
    decoders: list[dict[str, Any]] = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if vocab.add_space_prefix:
        prepend = {"type": "Prepend", "prepend": "▁"}
        normalizer = {"type": "Sequence", "normalizers": [prepend, replace]}
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {
        "normalizer": normalizer,
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": decoders},
    }


def _byte_level(*, regex: bool, trim: bool = True) -> dict[str, Any]:
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": trim,
        "use_regex": regex,
    }


def _bpe_parts(vocab: Vocabulary) -> dict[str, Any]:
    """The normalizer, pre-tokenizer and decoder of a GPT-2-style BPE."""
    pre = vocab.pre
    assert pre is not None
    pre_tokenizer = _byte_level(regex=True)
    if pre.pattern is not None:
        split = {
            "type": "Split",
            "pattern": {"Regex": pre.pattern},
            "behavior": "Isolated",
            "invert": False,
        }
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [split, _byte_level(regex=False)]}
    return {
        "normalizer": {"type": "NFC"} if pre.nfc else None,
        "pre_tokenizer": pre_tokenizer,
        "decoder": _byte_level(regex=True),
    }


def _post_processor(vocab: Vocabulary) -> dict[str, Any] | None:
    """The BOS and EOS added around a text (a ``TemplateProcessing``), after the
    byte-level offsets' trimming for a GPT-2-style BPE; None when nothing is."""
    byte_level = None if vocab.pre is None else _byte_level(regex=True, trim=False)
    ends = [
        vocab.special.get(name) if flag else None
        for name, flag in (("bos_token", vocab.add_bos), ("eos_token", vocab.add_eos))
    ]
    if ends == [None, None]:
        return byte_level
    bos, eos = ([] if i is None else [vocab.tokens[i]] for i in ends)

    def one(seq: str, type_id: int) -> list[dict[str, Any]]:
        return [
            *({"SpecialToken": {"id": t, "type_id": type_id}} for t in bos),
            {"Sequence": {"id": seq, "type_id": type_id}},
            *({"SpecialToken": {"id": t, "type_id": type_id}} for t in eos),
        ]

    template = {
        "type": "TemplateProcessing",
        "single": one("A", 0),
        "pair": [*one("A", 0), *one("B", 1)],
        "special_tokens": {
            vocab.tokens[i]: {"id": vocab.tokens[i], "ids": [i], "tokens": [vocab.tokens[i]]}
            for i in ends
            if i is not None
        },
    }
    if byte_level is None:
        return template
    return {"type": "Sequence", "processors": [byte_level, template]}


def tokenizer_config(vocab: Vocabulary) -> dict[str, Any]:
    """``tokenizer_config.json``: the class, the special tokens, what is added,
    the added tokens by id, the chat template."""
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": vocab.add_bos,
        "add_eos_token": vocab.add_eos,
        "clean_up_tokenization_spaces": vocab.pre is not None and vocab.pre.clean_spaces,
        **{name: vocab.tokens[i] for name, i in vocab.special.items()},
        "added_tokens_decoder": {
            str(i): {
                "content": vocab.tokens[i],
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": int(vocab.types[i]) != USER_DEFINED,
            }
            for i in _checkpoint_added(vocab)
        },
    }
    if vocab.chat_template is not None:
        config["chat_template"] = vocab.chat_template
    return config


def sentencepiece_model(vocab: Vocabulary) -> bytes:
    """``tokenizer.model``: SentencePiece's ``ModelProto`` (``sentencepiece_model.proto``)
    for a ``llama`` vocabulary, each field as protobuf's wire format lays it:
    ``pieces`` (1: piece 1, score 2, type 3), ``trainer_spec`` (2: model_type 3
    = BPE, vocab_size 4, byte_fallback 35, unk/bos/eos/pad ids 40-43 and pieces
    45-48) and ``normalizer_spec`` (3: name 1 ``identity``, add_dummy_prefix 3,
    remove_extra_whitespaces 4, escape_whitespaces 5).

    >>> v = vocabulary({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>"],
    ...                 "tokenizer.ggml.token_type": [2], "tokenizer.ggml.unknown_token_id": 0})
    >>> sentencepiece_model(v)[:16].hex(" ")  # the piece: "<unk>", score 0.0, type 2
    '0a 0e 0a 05 3c 75 6e 6b 3e 15 00 00 00 00 18 02'
    """
    unk = vocab.special.get("unk_token")
    if unk is None:
        raise KilnError(
            "TYPE",
            "tokenizer.ggml.token_type: expected a token of type UNKNOWN (2) or "
            "tokenizer.ggml.unknown_token_id, which SentencePiece needs, found neither",
        )
    types = np.where(vocab.types == UNKNOWN, UNUSED, vocab.types)
    types[unk] = UNKNOWN  # SentencePiece holds one; others are never produced: UNUSED
    out = bytearray()
    for token, score, kind in zip(vocab.tokens, vocab.scores.tolist(), types.tolist(), strict=True):
        piece = _text(1, token) + _tag(2, 5) + struct.pack("<f", score) + _varint_field(3, kind)
        out += _field(1, piece)
    ids = {name: vocab.special.get(f"{name}_token", -1) for name in ("unk", "bos", "eos", "pad")}
    trainer = _varint_field(3, 2) + _varint_field(4, len(vocab.tokens))
    trainer += _varint_field(35, int(_byte_fallback(vocab)))
    for number, name in enumerate(ids, start=40):
        trainer += _varint_field(number, ids[name])
    for number, name in enumerate(ids, start=45):
        if ids[name] >= 0:
            trainer += _text(number, vocab.tokens[ids[name]])
    normalizer = _text(1, "identity") + _varint_field(3, int(vocab.add_space_prefix))
    normalizer += _varint_field(4, 0) + _varint_field(5, 1)
    return bytes(out + _field(2, trainer) + _field(3, normalizer))


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint; a negative int32 as its 64-bit two's complement."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _varint_field(number: int, value: int) -> bytes:
    return _tag(number, 0) + _varint(value)


def _field(number: int, body: bytes) -> bytes:
    return _tag(number, 2) + _varint(len(body)) + body


def _text(number: int, text: str) -> bytes:
    return _field(number, text.encode("utf-8", "surrogatepass"))


def tokenizer_files(metadata: Mapping[str, Any]) -> dict[str, bytes] | None:
    """The files of the tokenizer of a GGUF's ``metadata`` by name, or None
    when it has none (no ``tokenizer.ggml.model``).

    Raises
    ------
    KilnError
        As :func:`vocabulary` and :func:`tokenizer_json` say.

    Examples
    --------
    >>> files = tokenizer_files({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
    ...                          "tokenizer.ggml.tokens": ["a", "b", "ab"],
    ...                          "tokenizer.ggml.merges": ["a b"]})
    >>> sorted(files)
    ['special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json']
    """
    vocab = vocabulary(metadata)
    if vocab is None:
        return None
    special = {name: vocab.tokens[i] for name, i in vocab.special.items()}
    files = {
        "tokenizer.json": _json(tokenizer_json(vocab), indent=None),
        "tokenizer_config.json": _json(tokenizer_config(vocab)),
        "special_tokens_map.json": _json(special),
    }
    if vocab.pre is None:
        files["tokenizer.model"] = sentencepiece_model(vocab)
    return files


def _json(value: Mapping[str, Any], indent: int | None = 2) -> bytes:
    """JSON as transformers writes its tokenizer files, a newline last."""
    return (json.dumps(value, indent=indent, ensure_ascii=False) + "\n").encode()
