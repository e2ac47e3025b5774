"""The command line's own errors: ``FILE``, a file that cannot be read or written
(or an output that is one of the command's inputs), and ``USAGE``, a malformed
command line.  The data's errors are :class:`~kiln_np.KilnError`; both print as
one line ``kiln-np: KIND: message``.
"""

from __future__ import annotations

__all__ = ["CliError", "file_error"]


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
