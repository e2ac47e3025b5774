"""The special tokens, merges and chat template of a Hugging Face tokenizer directory,
as gguf-py's ``SpecialVocab`` (the gguf-py vendored in llama.cpp) reads them and
writes them after a vocabulary: :class:`SpecialVocab` here behaves as that class does
for the files a converted checkpoint has.

What it reads, in the order the keys come out:

- ``merges``: ``tokenizer.json``'s ``model.merges`` (strings as they are; pairs
  joined by a space, a space inside a part written as U+0120), or ``merges.txt``
  when the JSON has none;
- the special token ids (``bos``, ``eos``, ``unk``, ``sep``, ``pad``, ``cls``,
  ``mask``, and ``eot``/``eom`` when the post-processor's last token is not the
  EOS): ``tokenizer_config.json``'s ``*_token`` looked up among
  ``tokenizer.json``'s added tokens, then ``config.json``'s ``*_token_id`` (root,
  then ``text_config``), the first found kept; ids at or past ``n_vocab`` are
  skipped; only the types GGUF has a key for are written (``cls`` is not);
- ``add_bos_token``/``add_eos_token``/``add_sep_token``: from the post-processor
  (``ByteLevel``, ``RobertaProcessing``, ``TemplateProcessing`` read as gguf-py
  reads them), else ``tokenizer_config.json``;
- the chat template: ``tokenizer_config.json``'s ``chat_template``, else
  ``chat_template.jinja`` (with ``additional_chat_templates/*.jinja`` as named
  templates), else ``chat_template.json``;
- the normalizer's ``lowercase``/``strip_accents``.
"""

from __future__ import annotations

import os
import string
from collections.abc import Iterable
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError

from .tokenizer_files import Checkpoint, KeyWriter, json_file, text_file

__all__ = ["ID_KEYS", "SpecialVocab", "write_llama_vocab"]

ID_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "sep": "tokenizer.ggml.seperator_token_id",  # gguf-py's spelling
    "pad": "tokenizer.ggml.padding_token_id",
    "mask": "tokenizer.ggml.mask_token_id",
    "eot": "tokenizer.ggml.eot_token_id",
    "eom": "tokenizer.ggml.eom_token_id",
}
"""The special token types GGUF has an id key for (gguf-py's writer skips the others)."""
_ADD_KEYS = {t: f"tokenizer.ggml.add_{t}_token" for t in ("bos", "eos", "sep")}
_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
_NAME_CHARS = frozenset(string.ascii_letters + string.digits)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else default


def _special_id(entry: Any) -> Any:
    return _get(_get(entry, "SpecialToken"), "id")


class SpecialVocab:
    """gguf-py's ``SpecialVocab(directory, load_merges, special_token_types, n_vocab)``,
    of a :class:`Checkpoint`'s directory.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with open(f"{tmp}/config.json", "w") as f:
    ...         _ = f.write('{"bos_token_id": 1, "eos_token_id": 2}')
    ...     out = KeyWriter()
    ...     SpecialVocab(Checkpoint(tmp, {})).write(out)
    >>> list(out.keys)
    ['tokenizer.ggml.bos_token_id', 'tokenizer.ggml.eos_token_id']
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        load_merges: bool = False,
        special_token_types: Iterable[str] | None = None,
        n_vocab: int | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.directory = checkpoint.directory
        self.n_vocab = n_vocab
        self.load_merges = load_merges
        self.types: tuple[str, ...] = tuple(special_token_types or _TYPES)
        self.merges: list[str] = []
        self.ids: dict[str, int] = {}
        self.add: dict[str, bool] = {}
        self.chat_template: Any = None
        self.lowercase: Any = None
        self.strip_accents: Any = None
        self._from_tokenizer_json()
        self._from_config_json()
        if load_merges and not self.merges:
            self._merges_txt()

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def set_id(self, typ: str, tid: Any) -> None:
        """gguf-py's ``_set_special_token``: the first id of a type is kept."""
        if not isinstance(tid, int):  # a bool is an int here too, as in gguf-py
            return
        if not 0 <= tid < 1 << 32:
            raise KilnError(
                "TYPE",
                f"{self.directory}: expected a special token id from 0 to 2**32-1 for {typ}, "
                f"found {tid}",
            )
        if (self.n_vocab is None or tid < self.n_vocab) and typ not in self.ids:
            self.ids[typ] = int(tid)

    def _merges_txt(self) -> None:
        path = self._path("merges.txt")
        if not os.path.isfile(path):
            return
        lines = text_file(path, f"{path}: ").splitlines()
        if lines and lines[0].strip().startswith("#"):
            lines = lines[1:]
        self.merges = [
            f"{parts[0]} {parts[1]}" for line in lines if len(parts := line.split(None, 3)) == 2
        ]

    def _json_merges(self, merges: Any) -> None:
        if not isinstance(merges, list) or not merges:
            return
        if all(isinstance(m, str) for m in merges):
            self.merges = merges
        elif all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(s, str) for s in m)
            for m in merges
        ):
            self.merges = [" ".join(p.replace(" ", "\u0120") for p in pair) for pair in merges]
        else:
            raise KilnError(
                "TYPE",
                f"{self._path('tokenizer.json')}: expected model.merges as strings or pairs "
                "of strings, "
                f"found {type(merges[0]).__name__} first",
            )

    def _normalizer(self, normalizer: Any) -> None:
        kind = _get(normalizer, "type")
        if kind == "Lowercase":
            self.lowercase = True
        elif kind == "StripAccents":
            self.strip_accents = True
        elif kind == "BertNormalizer":
            if "lowercase" in normalizer:
                self.lowercase = normalizer["lowercase"]
            if "strip_accents" in normalizer:
                self.strip_accents = normalizer["strip_accents"]
        elif kind == "Sequence":
            for inner in _get(normalizer, "normalizers", []):
                self._normalizer(inner)

    def _from_tokenizer_json(self) -> None:
        tokenizer = self.checkpoint.tokenizer_json()
        added: list[Any] = []
        if tokenizer is not None:
            if self.load_merges:
                self._json_merges(_get(_get(tokenizer, "model", {}), "merges"))
            if normalizer := tokenizer.get("normalizer"):
                self._normalizer(normalizer)
            added = tokenizer.get("added_tokens", [])
            added = added if isinstance(added, list) else []
        config = json_file(self._path("tokenizer_config.json"))
        if tokenizer:
            self._post_processor(tokenizer.get("post_processor"), config)
        if not config:
            return
        self._chat_template(config)
        for typ in self.types:
            flag = config.get(f"add_{typ}_token")
            if isinstance(flag, bool) and typ not in self.add:
                self.add[typ] = flag
            entry = config.get(f"{typ}_token")
            content = _get(entry, "content") if isinstance(entry, dict) else entry
            if isinstance(content, str):
                self.set_id(
                    typ, next((_get(t, "id") for t in added if _get(t, "content") == content), None)
                )

    def _post_processor(self, post: Any, config: dict[str, Any] | None) -> None:
        """The add flags a post-processor implies; it may name the BOS, EOS, CLS, SEP,
        EOT or EOM token in ``config`` as gguf-py does."""
        if not post:
            return
        cfg = config or {}
        named = {t: cfg.get(f"{t}_token") for t in ("bos", "cls", "eos", "sep")}
        for this, other in (("bos", "cls"), ("eos", "sep")):
            if not named[this] and named[other] and config:
                config[f"{this}_token"] = named[this] = named[other]
        for proc in _get(post, "processors", [post]):
            kind = _get(proc, "type")
            if kind == "ByteLevel":
                self.add.setdefault("bos", False)
                self.add.setdefault("eos", False)
            elif kind == "RobertaProcessing":
                self.add.update(bos=True, eos=True, sep=True)
                for typ, default in (("cls", "bos"), ("sep", "eos")):
                    if not named[typ] and config:
                        named[typ] = _get(proc, typ, [named[default]])[0]
                        config[f"{typ}_token"] = named[typ]
            elif kind == "TemplateProcessing":
                self._template(proc, named, config)

    def _template(self, proc: Any, named: dict[str, Any], config: dict[str, Any] | None) -> None:
        """gguf-py's crude reading of a ``TemplateProcessing``: its first and last
        special tokens of ``single``, the separators of ``pair``."""
        single, pair = _get(proc, "single", []), _get(proc, "pair", [])
        first = last = None
        if len(single) > 1:
            if first := _special_id(single[0]):
                if not config:
                    named["bos"] = first
                elif first not in (named["bos"], named["cls"]):
                    for typ in ("bos", "cls"):
                        if not named[typ]:
                            config[f"{typ}_token"] = named[typ] = first
                self.add["bos"] = first in (named["bos"], named["cls"])
            if last := _special_id(single[-1]):
                if not config:
                    named["eos"] = last
                elif last != named["eos"]:
                    for typ in ("eot", "eom"):
                        if typ not in self.types:
                            self.types += (typ,)
                            config[f"{typ}_token"] = named["eos"]
                            break
                    config["eos_token"] = named["eos"] = last
                self.add["eos"] = last == named["eos"]
        if not pair:
            return
        start = 1 if first and _special_id(pair[0]) == first else 0
        stop = -1 if last and _special_id(pair[-1]) == last else None
        inner = pair[start:stop]
        ends = [_get(_get(p, "Sequence"), "id") for p in inner[:1] + inner[-1:]]
        if ends == ["A", "B"] and (middle := inner[1:-1]):
            seps = (named["sep"], named["eos"])
            add_sep = False
            if entry := _special_id(middle[0]):
                add_sep = entry in seps and not last
            if len(middle) == 2 and (entry := _special_id(middle[1])):
                add_sep = add_sep or entry in seps
            self.add["sep"] = add_sep
            if add_sep and not named["sep"] and config:
                config["sep_token"] = named["eos"]

    def _chat_template(self, config: dict[str, Any]) -> None:
        alt: Any = None
        jinja, as_json = self._path("chat_template.jinja"), self._path("chat_template.json")
        if os.path.isfile(jinja):
            alt = text_file(jinja, f"{jinja}: ")
            extra_dir = self._path("additional_chat_templates")
            extra = (
                sorted(n for n in os.listdir(extra_dir) if n.endswith(".jinja"))
                if os.path.isdir(extra_dir)
                else []
            )
            if extra:
                alt = [{"name": "default", "template": alt}] + [
                    {
                        "name": n[: -len(".jinja")],
                        "template": text_file(os.path.join(extra_dir, n), n),
                    }
                    for n in extra
                ]
        elif os.path.isfile(as_json):
            alt = _get(json_file(as_json), "chat_template")
        template = config.get("chat_template", alt)
        if template is None or isinstance(template, (str, list)):
            self.chat_template = template

    def _from_config_json(self) -> None:
        config = json_file(self._path("config.json"))
        if config is None:
            return
        for typ in self.types:
            tid = config.get(f"{typ}_token_id")
            if tid is None and "text_config" in config:
                tid = _get(config["text_config"], f"{typ}_token_id")
            self.set_id(typ, tid)

    def write(self, out: KeyWriter) -> None:
        """``add_to_gguf``: the keys, in gguf-py's order."""
        if self.merges:
            out.add("tokenizer.ggml.merges", list(self.merges), "array[string]")
        for typ, tid in self.ids.items():
            if typ in ID_KEYS:
                out.add(ID_KEYS[typ], np.uint32(tid), "uint32")
        for typ, flag in self.add.items():
            if typ in _ADD_KEYS:
                out.add(_ADD_KEYS[typ], bool(flag), "bool")
        if self.chat_template is not None:
            _write_chat_template(out, self.chat_template)
        if self.lowercase is not None:
            out.add("tokenizer.ggml.normalizer.lowercase", bool(self.lowercase), "bool")
        if self.strip_accents is not None:
            out.add("tokenizer.ggml.normalizer.strip_accents", bool(self.strip_accents), "bool")


def _write_chat_template(out: KeyWriter, template: Any) -> None:
    """gguf-py's ``add_chat_template``: a string, or named templates (their names
    filtered to letters, digits and ``_``; ``default`` is the template)."""
    if isinstance(template, str):
        out.add("tokenizer.chat_template", template, "string")
        return
    default, names = None, []
    for choice in template:
        name = "".join(c if c in _NAME_CHARS else "_" for c in str(_get(choice, "name", "")))
        text = _get(choice, "template")
        if name and text is not None:
            if name == "default":
                default = text
            else:
                names.append(name)
                out.add(f"tokenizer.chat_template.{name}", text, "string")
    if names:
        out.add("tokenizer.chat_templates", sorted(set(names)), "array[string]")
    if default is not None:
        out.add("tokenizer.chat_template", default, "string")


def write_llama_vocab(
    ckpt: Checkpoint, out: KeyWriter, tokens: list[str], scores: np.ndarray, types: np.ndarray
) -> None:
    """The keys of a SentencePiece-style vocabulary (``_set_vocab_sentencepiece``
    after its vocabulary), its special tokens after them."""
    out.add("tokenizer.ggml.model", "llama", "string")
    out.add("tokenizer.ggml.pre", "default", "string")
    out.add_list("tokenizer.ggml.tokens", tokens, "array[string]")
    out.add_list("tokenizer.ggml.scores", scores, "array[float32]")
    out.add_list("tokenizer.ggml.token_type", types, "array[int32]")
    SpecialVocab(ckpt, n_vocab=len(tokens)).write(out)
