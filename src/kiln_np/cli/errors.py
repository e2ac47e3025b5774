"""The command line's own errors: ``FILE``, a file that cannot be read or written
(or an output that is one of the command's inputs), and ``USAGE``, a malformed
command line.  The data's errors are :class:`~kiln_np.KilnError`; both print as
one line ``kiln-np: KIND: message``.
"""

from __future__ import annotations

__all__ = ["CliError", "Stopped", "file_error"]


class CliError(Exception):
    """An error that is not the data's: ``FILE`` (cannot read or write) or ``USAGE``.

    Examples
    --------
    >>> err = CliError("USAGE", "--tensor takes the description from the weight file")
    >>> err.kind, str(err)
    ('USAGE', '--tensor takes the description from the weight file')
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def file_error(action: str, path: object, exc: OSError) -> CliError:
    """The ``FILE`` error for an ``OSError`` met while doing ``action`` to ``path``.

    Examples
    --------
    >>> str(file_error("read", "w.kiln", FileNotFoundError(2, "No such file or directory")))
    "cannot read 'w.kiln': No such file or directory"
    """
    return CliError("FILE", f"cannot {action} {str(path)!r}: {exc.strerror or exc}")


class Stopped(BaseException):
    """A signal that stops a command: SIGTERM raises it (SIGINT raises
    ``KeyboardInterrupt``), so the writers' cleanup runs as the exception rises;
    ``done`` names the output when it was complete before the signal came.

    Examples
    --------
    >>> stop = Stopped("SIGTERM", 15, done="out.gguf")
    >>> stop.status, stop.line()
    (143, "stopped by SIGTERM after the output was written: 'out.gguf' is complete")
    """

    def __init__(self, name: str, number: int, done: str | None = None) -> None:
        super().__init__(name)
        self.name, self.number, self.done = name, number, done

    @property
    def status(self) -> int:
        """128 + the signal's number, as a shell reports a command it stopped."""
        return 128 + self.number

    def line(self) -> str:
        """What happened, for the one line on stderr."""
        if self.done is not None:
            return f"stopped by {self.name} after the output was written: {self.done!r} is complete"
        return f"stopped by {self.name}; unfinished outputs were removed"
