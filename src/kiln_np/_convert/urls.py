"""A URL opened by the format table's rows that read URLs (``reads_urls``:
safetensors and GGUF): a file by its suffix (a row's, or a safetensors index's),
else by its first 16 bytes (one more range request); a directory (a URL ending
``/``, or an S3 prefix) by its listing, as a local folder: one index, else the one
file of those rows' suffixes (a GGUF split set counting once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kiln_np._core.errors import KilnError
from kiln_np._weights.remote import RemoteFile, list_url
from kiln_np._weights.unknown import HEAD
from kiln_np._weights.weights import Weights

from .row import WeightFormat

__all__ = ["listed", "open_url"]


def open_url(
    url: str,
    options: Mapping[str, Any] | None,
    rows: Sequence[WeightFormat],
    *,
    index: tuple[str, WeightFormat],
    later_split: Callable[[str], bool],
) -> Weights:
    """Open ``url`` with the first of ``rows`` (those reading URLs) that takes it;
    ``index``: the suffix of an index file and the row that opens it;
    ``later_split(name)``: a split other than its set's first."""
    suffixes = tuple(s for r in rows for s in r.suffixes)
    readers = f"{', '.join(r.name for r in rows[:-1])} and {rows[-1].name}"
    names = list_url(url, options)
    if names is not None:
        found = listed(names, index[0], suffixes, later_split)
        if len(found) == 1:
            base = url if url.endswith("/") else url + "/"
            return open_url(base + found[0], options, rows, index=index, later_split=later_split)
        held = ", ".join(map(repr, (found or names)[:4])) + (", ..." * (len(found or names) > 4))
        raise KilnError(
            "TYPE",
            f"{url!r}: expected a directory holding one *{index[0]} or one weight file "
            f"(*{', *'.join(suffixes)}: {readers} are read from URLs, other formats from "
            f"local paths), found {held or 'nothing'}",
        )
    row = index[1] if url.endswith(index[0]) else None
    row = row or next((r for r in rows if url.endswith(r.suffixes)), None)
    if row is None:  # named otherwise: its first bytes say
        file = RemoteFile.open(url, options)
        head = file.read(0, HEAD)
        row = next((r for r in rows if r.recognise(url, head, file.size) is not None), None)
        if row is None:
            shown = f"the bytes {head.hex(' ')}{' ...' * (file.size > HEAD)}" if head else "nothing"
            raise KilnError(
                "TYPE",
                f"{url!r}: expected a weight file of a format read from URLs ({readers}; "
                f"other formats from local paths), found {shown}",
                found=head,
            )
    return row.open(url, storage_options=options)


def listed(
    names: Sequence[str], index: str, suffixes: tuple[str, ...], later_split: Callable[[str], bool]
) -> list[str]:
    """The files of a URL directory's listing ``names`` that open it: those ending
    ``index``, else the weight files (of ``suffixes``; a later split counts with its
    first); the directory opens when there is one.

    >>> names = ["README.md", "m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]
    >>> listed(names, ".safetensors.index.json", (".gguf",), lambda n: "-00001-" not in n)
    ['m-00001-of-00002.gguf']
    """
    found = [n for n in names if n.endswith(index)]
    return found or [n for n in names if n.endswith(suffixes) and not later_split(n)]
