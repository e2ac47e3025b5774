"""The entry point: the parser assembled from each command group's subparser
functions, :func:`run` (one command, its exit status) and :func:`main` (the
console script: every error one line on stderr, exit status 2; Ctrl-C one line,
exit status 130; ``diff`` returns 1 for files that differ).
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kiln_np._core.errors import KilnError
from kiln_np._version import __version__

from .diff import add_diff
from .errors import CliError, Stopped
from .golden import add_golden
from .imatrix import add_imatrix
from .meta import add_meta
from .onnx import add_onnx
from .output import say
from .payloads import add_decode, add_encode, add_inspect
from .report import add_report
from .stats import add_stats
from .weights import add_convert, add_ls

__all__ = ["main", "parser", "run"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other error, instead of argparse's usage block.
        say(f"kiln-np: USAGE: {message} (see {self.prog} --help)", stream=sys.stderr)
        sys.exit(2)


_COMMANDS: list[Callable[[Any], None]] = [
    add_golden,
    add_encode,
    add_decode,
    add_inspect,
    add_onnx,
    add_ls,
    add_meta,
    add_imatrix,
    add_convert,
    add_diff,
    add_stats,
    add_report,
]
"""One subparser function per command, in the order ``--help`` lists them."""


def parser() -> argparse.ArgumentParser:
    """The ``kiln-np`` parser: every command, each with its ``run`` default.

    Examples
    --------
    >>> parser().parse_args(["ls", "model.gguf"]).path
    'model.gguf'
    """
    top = _Parser(
        prog="kiln-np",
        description="Kiln tensor payloads <-> numpy arrays, bit for bit.",
        epilog="Errors: one line 'kiln-np: KIND: message' on stderr, exit status 2 "
        "(130 for Ctrl-C). See docs/cli.md.",
    )
    top.add_argument("--version", action="version", version=f"kiln-np {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return top


def run(argv: Sequence[str]) -> int:
    """Run one command and return its exit status; errors propagate
    (:class:`KilnError` and the like), which :func:`main` prints as one line.

    A malformed command line exits (status 2) as argparse does.

    Examples
    --------
    >>> run(["golden"])  # doctest: +ELLIPSIS
    case  code  dtype ...
    0
    """
    args = parser().parse_args(argv)
    status: int = args.run(args)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Examples
    --------
    >>> main(["golden", "--json"])  # doctest: +ELLIPSIS
    {"format": "kiln-np-golden/1", ...}
    0
    """
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            # Text leaves through output.say, escaped (a lone surrogate as \udcff):
            # what a terminal's encoding cannot hold (CJK on a Latin-1 one)
            # shows as its escape too, never a UnicodeEncodeError.
            stream.reconfigure(errors="backslashreplace")
    previous = _on_sigterm()
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except KilnError as exc:
        say(f"kiln-np: {exc}", stream=sys.stderr)
        return 2
    except CliError as exc:
        say(f"kiln-np: {exc.kind}: {exc}", stream=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`kiln-np inspect ... | head`): end quietly, as a
        # command killed by SIGPIPE would, and keep Python's exit-time flush silent.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (KeyboardInterrupt, Stopped) as exc:
        # Ctrl-C or SIGTERM: the writers' cleanup has run while the exception rose
        # (no temporary file is left); end with one line saying what happened and
        # 128 + the signal's number, as a shell does.
        stop = exc if isinstance(exc, Stopped) else Stopped("SIGINT (Ctrl-C)", signal.SIGINT)
        say(f"kiln-np: INTERRUPTED: {stop.line()}", stream=sys.stderr)
        return stop.status
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _on_sigterm() -> Any:
    """Make SIGTERM raise :class:`Stopped` (as SIGINT raises KeyboardInterrupt) while
    a command runs, so a terminated conversion removes its temporaries; the
    previous handler, or None where no handler can be set (not the main thread).

    >>> found = []
    >>> worker = threading.Thread(target=lambda: found.append(_on_sigterm()))
    >>> worker.start(); worker.join(); found
    [None]
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(number: int, frame: object) -> None:
        raise Stopped("SIGTERM", number)

    return signal.signal(signal.SIGTERM, stop)
