"""The ``kiln-np`` command line.

Every error is one line on stderr, ``kiln-np: KIND: message``, with exit
status 2: ``TYPE``, ``LENGTH`` and ``SHAPE`` are :class:`KilnError` kinds,
``FILE`` is a file that cannot be read or written (or an output that is one
of the command's inputs), ``USAGE`` a malformed command line.  A golden case
that fails exits 1.  ``--json`` output is documented in ``docs/cli.md``; a
progress bar is drawn on stderr only when it is a terminal.

Each command group is a module (``golden``, ``payloads``: encode, decode,
inspect; ``onnx``; ``weights``: ls, convert) with one ``add_<name>`` subparser
function per command, which :mod:`.entry` registers, and a ``_cmd_<name>(args)``
that runs it.  Below them: ``args`` (declaring and reading arguments),
``output`` (JSON, text, tables, progress), ``files`` (inputs checked before
they are opened, outputs never over an input) and ``errors`` (FILE, USAGE).
Commands describe a payload with :func:`~kiln_np._core.payload.payload_info`
and never compute a byte length themselves; they read payload files with
``readinto`` (:func:`~kiln_np._files.chunks.read_chunks`: a file that shrinks
while it is read is a clean LENGTH error, not a SIGBUS) and write through
:func:`~kiln_np._files.io.replacing`, never over a file they read.
"""

from .entry import main, run

__all__ = ["main", "run"]
