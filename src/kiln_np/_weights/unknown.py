"""What a path that no format recognises holds: the one weight file of a folder (a
Hugging Face model folder), a torch pickle (which kiln_np never unpickles), or the
TYPE error that shows a file's first bytes.  The format table passes down what it
knows (the suffixes of its rows, what a folder may hold), so this names no format.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular_raw

__all__ = ["HEAD", "START", "one_weight_file", "pickle_kind", "unrecognised"]

HEAD = 16
"""Bytes of a file shown when no format recognises it, and handed to ``recognise``."""
START = 512
"""Bytes read to recognise a file: the head, and a zip's first member name."""
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_NO_PICKLES = (
    "kiln_np does not execute pickles (unpickling runs whatever code the file holds); "
    "convert it to safetensors where torch runs, e.g. "
    "safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors')"
)


def one_weight_file(
    directory: str,
    suffixes: tuple[str, ...],
    later_split: Callable[[str], bool],
    expected: str,
    indexes: list[str],
) -> str:
    """The one file of ``directory`` whose name ends with one of ``suffixes`` (a
    split other than the first, ``later_split(name)``, counts with its first), else
    TYPE saying what it holds: several ``indexes``, several weight files, pickles
    or nothing, after ``expected`` (what the format table's rows take of a folder).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> open(os.path.join(d, "m.gguf"), "wb").close()
    >>> os.path.basename(one_weight_file(d, (".gguf",), lambda n: False, "x", []))
    'm.gguf'
    """
    entries = sorted(os.listdir(directory))
    files = [
        f
        for f in entries
        if f.endswith(suffixes)
        and not later_split(f)
        and not os.path.isdir(os.path.join(directory, f))
    ]
    if len(files) == 1:
        return os.path.join(directory, files[0])
    named = [f for f in entries if f.endswith(_PICKLE_SUFFIXES)][:4]
    pickles = [f for f in named if pickle_kind(_start(os.path.join(directory, f)))]
    if len(indexes) > 1:
        found = f"{len(indexes)} indexes ({_names(indexes)})"
    elif files:
        found = f"{len(files)} weight files ({_names(files)}): open one of them"
    elif pickles:
        found = f"only pickles ({_names(pickles)}): {_NO_PICKLES}"
    else:
        found = "neither a manifest nor an index nor a weight file"
    raise KilnError(
        "TYPE",
        f"{directory!r}: expected a directory holding {expected} or one weight file "
        f"(*{', *'.join(suffixes)}), found {found}",
    )


def unrecognised(name: str, start: bytes, size: int) -> KilnError:
    """The TYPE error for the file ``name`` (of ``size`` bytes, starting ``start``)
    that no format recognises: a torch pickle says so, anything else shows its head.

    >>> print(unrecognised("x.bin", b"hello", 5).message)  # doctest: +ELLIPSIS
    'x.bin': expected a weight file (...), found the bytes 68 65 6c 6c 6f
    """
    head = start[:HEAD]
    pickled = pickle_kind(start)
    if pickled is not None:
        return KilnError(
            "TYPE", f"{name!r}: expected a weight file, found {pickled}: {_NO_PICKLES}", found=head
        )
    shown = f"the bytes {head.hex(' ')}{' ...' * (size > HEAD)}" if head else "an empty file"
    return KilnError(
        "TYPE",
        f"{name!r}: expected a weight file (safetensors, GGUF, ONNX, a Kiln payload directory "
        f"or a sharded checkpoint), found {shown}",
        found=head,
    )


def _start(path: str) -> bytes:
    """The first bytes of a file (empty when it cannot be read, or is no regular file)."""
    try:
        with open_regular_raw(path) as f:
            return f.read(START)
    except (OSError, KilnError):
        return b""


def _names(files: list[str]) -> str:
    return ", ".join(map(repr, files[:4])) + (", ..." if len(files) > 4 else "")


def pickle_kind(start: bytes) -> str | None:
    """What a file starting with ``start`` is when it is a torch checkpoint:
    a zip (``torch.save`` since torch 1.6, a pickle inside) or a bare pickle
    (the legacy format: protocol 2, the pickled magic number first).

    >>> pickle_kind(b"\\x80\\x02"), pickle_kind(b"GGUF")
    ("a Python pickle (protocol 2; torch.save's legacy .pt/.bin format)", None)
    """
    if start[:4] == b"PK\x03\x04":
        # the local file header: the name's length at 26, the name at 30
        member = start[30 : 30 + int.from_bytes(start[26:28], "little")]
        if member.endswith(b".pkl"):
            shown = member.decode(errors="replace")
            return f"a torch.save checkpoint (a zip archive holding the pickle {shown!r})"
        return "a zip archive (torch.save writes .pt and .bin checkpoints so, pickles inside)"
    if start[:1] == b"\x80" and start[1:2] in {b"\x02", b"\x03", b"\x04", b"\x05"}:
        return f"a Python pickle (protocol {start[1]}; torch.save's legacy .pt/.bin format)"
    return None
