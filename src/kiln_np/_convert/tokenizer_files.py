"""What the tokenizer doors of the conversion share: a checkpoint directory, its
tokenizer files read with bounds (``MAX_FILE_BYTES``, UTF-8, strict JSON objects),
the keys written in gguf-py's order (:class:`KeyWriter`), the refusal, and the
converter's ``does_token_look_special``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from kiln_np._core.errors import KilnError
from kiln_np._core.jsontext import parse_json
from kiln_np._files.io import open_regular

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_VOCAB",
    "Checkpoint",
    "FallbackError",
    "KeyWriter",
    "file_bytes",
    "json_file",
    "looks_special",
    "refusal",
    "text_file",
]

MAX_FILE_BYTES = 1 << 30
"""The largest tokenizer file read (``tokenizer.json``, ``tokenizer.model``, ...: a
256,000-token ``tokenizer.json`` is about 30 MB)."""

MAX_VOCAB = 1 << 22
"""The largest vocabulary (``config.json``'s ``vocab_size``) a conversion builds:
4,194,304 tokens, 16 times gemma's."""

_JSON_NAMES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a bool",
}


class KeyWriter:
    """Keys in the order they are first written; writing a key again replaces its
    value in place (gguf-py's writer keeps them in a dict).

    >>> out = KeyWriter()
    >>> out.add("a", 1, "uint32"); out.add_list("b", [], "array[string]"); out.add("a", 2, "uint32")
    >>> out.keys
    {'a': (2, 'uint32')}
    """

    def __init__(self) -> None:
        self.keys: dict[str, tuple[Any, str]] = {}

    def add(self, key: str, value: Any, kind: str) -> None:
        self.keys[key] = (value, kind)

    def add_list(self, key: str, value: Any, kind: str) -> None:
        """An array key; an empty one is not written (gguf-py's ``add_array``)."""
        if len(value):
            self.add(key, value, kind)


class FallbackError(Exception):
    """The converter's FileNotFoundError or TypeError that sends it to its next vocabulary."""


@dataclass
class Checkpoint:
    """A checkpoint directory and its ``config.json`` (``text_config`` merged in)."""

    directory: str
    hparams: dict[str, Any]
    _tokenizer_json: Any = field(default=None, init=False, repr=False)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def tokenizer_json(self) -> Any:
        """``tokenizer.json`` as a dict (None without one), parsed once: it is large
        and no reader changes it (``tokenizer_config.json`` is read afresh each time,
        as gguf-py's special-token reading edits its copy)."""
        if self._tokenizer_json is None:
            self._tokenizer_json = json_file(self.path("tokenizer.json"))
        return self._tokenizer_json

    def where(self, name: str) -> str:
        return f"{self.path(name)}: "


def refusal(message: str) -> KilnError:
    """TYPE: where the converter fails or refuses, or the files are malformed."""
    return KilnError("TYPE", message)


def file_bytes(path: str, where: str) -> bytes:
    """A tokenizer file's bytes; one larger than :data:`MAX_FILE_BYTES` is LENGTH
    before anything is read."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_FILE_BYTES:
            raise KilnError(
                "LENGTH",
                f"{where}expected at most {MAX_FILE_BYTES} bytes, found {size}",
                expected=MAX_FILE_BYTES,
                found=size,
            )
        return f.read(MAX_FILE_BYTES)


def text_file(path: str, where: str) -> str:
    """A UTF-8 text file of at most :data:`MAX_FILE_BYTES`."""
    try:
        return file_bytes(path, where).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KilnError("TYPE", f"{where}expected UTF-8 text, found: {exc}") from None


def json_file(path: str) -> Any:
    """The JSON object of a file (a dict); None when the file does not exist."""
    if not os.path.isfile(path):
        return None
    where = f"{path}: "
    value = parse_json(text_file(path, where), where, serde=False, constants=True)
    if not isinstance(value, dict):
        raise KilnError(
            "TYPE",
            f"{where}expected a JSON object, found {_JSON_NAMES.get(type(value), 'a value')}",
        )
    return value


def looks_special(token: str) -> bool:
    """The converter's ``does_token_look_special``."""
    return (
        token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (token.startswith("<|") and token.endswith("|>"))
        or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
        or (token.startswith("<unused") and token.endswith(">"))
    )
