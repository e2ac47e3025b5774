"""The files a command reads and writes: an input is checked to be a regular file
before anything opens it, an output is never one of the command's inputs (the
same device and inode, or a directory that holds one), and an output file is
written crash-safely through :func:`~kiln_np._files.io.replacing`.

Inputs are keyed by identity, ``(st_dev, st_ino)``, so another name or a hard
link of an input counts as that input.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from kiln_np._core.checks import check_regular_file
from kiln_np._files.io import replacing

from .errors import CliError, file_error

__all__ = [
    "Inputs",
    "identity",
    "refuse_directory_over_inputs",
    "refuse_overwrite",
    "refuse_writing_inputs",
    "stat_input",
    "stat_or_none",
    "write_file",
]

Inputs = dict[tuple[int, int], str]
"""The files a command reads, by identity: ``(st_dev, st_ino) -> path``."""


def stat_input(path: str) -> os.stat_result:
    """The input's ``stat``; a FIFO or device is TYPE before anything opens it
    (opening a FIFO for reading blocks until a writer comes)."""
    try:
        return check_regular_file(path)
    except OSError as exc:
        raise file_error("read", path, exc) from exc


def stat_or_none(path: str) -> os.stat_result | None:
    """``os.stat(path)``, or ``None`` when it cannot be had.

    Examples
    --------
    >>> stat_or_none("/nonexistent/kiln-np") is None
    True
    """
    try:
        return os.stat(path)
    except OSError:
        return None  # gone meanwhile: reading it will say so


def identity(st: os.stat_result) -> tuple[int, int]:
    """A file's identity: its device and inode.

    Examples
    --------
    >>> identity(os.stat(".")) == identity(os.stat("./"))
    True
    """
    return st.st_dev, st.st_ino


def refuse_overwrite(output: str, inputs: Inputs, *, where: str | None = None) -> None:
    """FILE when ``output`` (through symlinks, as writing it would go) is one of
    the ``inputs`` (device and inode: another name or a hard link counts).
    ``where`` is the path to look at, when it differs from the one to show."""
    st = stat_or_none(output if where is None else where)
    if st is None:
        return  # nothing there yet (or unreadable: writing will say so)
    source = inputs.get(identity(st))
    if source is not None:
        raise CliError(
            "FILE",
            f"cannot write {output!r}: it is the input file {source!r} (same device and inode), "
            "which the command reads; choose another output",
        )


def refuse_writing_inputs(outputs: Iterable[str], inputs: Inputs) -> None:
    """FILE when any file a writer will produce (each split, shard, index, payload
    file and manifest, as ``kiln_np.formats.save_weights_paths`` names them) is one
    of the ``inputs``, naming that file: a converting command never writes over a
    file it reads, whatever DST was typed."""
    for output in outputs:
        refuse_overwrite(output, inputs)


def refuse_directory_over_inputs(output: str, inputs: Inputs) -> None:
    """FILE when ``output`` is a directory that holds a file the command reads
    (writing a directory replaces everything in it)."""
    for path in inputs.values():
        parent = path if os.path.isdir(path) else os.path.dirname(path)
        try:
            same = os.path.samefile(parent, output)
        except OSError:
            continue
        if same:
            raise CliError(
                "FILE",
                f"cannot write {output!r}: it holds the input {path!r}, which the command "
                "reads; choose another output",
            )


def write_file(path: str, pieces: Iterable[Any]) -> None:
    """Write the buffers to ``path`` crash-safely (a temporary sibling renamed
    into place, permissions and symlinks kept: :func:`kiln_np._files.io.replacing`);
    an ``OSError`` is FILE, naming ``path``."""
    try:
        with replacing(path) as (_, f):
            for piece in pieces:
                f.write(piece)
    except OSError as exc:
        raise file_error("write", path, exc) from exc
