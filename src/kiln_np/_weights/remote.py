"""A file of a weight checkpoint behind a URL (``https://``, ``s3://``, any fsspec
protocol whose file system is installed), read with exact range requests.

:class:`RemoteFile` is the :class:`~kiln_np._weights.mapped.MappedFile` of a
URL: the readers and writers use the same three doors (``read`` for headers,
``opened()`` for ``readinto`` a bounded run at a time, ``view`` for a payload),
and nothing is ever mapped or cached.  Each read is one request for exactly the
bytes asked for, checked as strictly as a local read:

- the answer MUST hold exactly the bytes asked for: fewer is LENGTH (the
  range and the byte counts in the message), more is TYPE; over HTTP the
  status MUST be ``206 Partial Content`` and ``Content-Range`` MUST be
  ``bytes a-b/size`` for the range asked and the size seen when opened (TYPE
  otherwise: a server that ignores ``Range`` would send the whole file), and
  at most one byte more than asked is ever read off the wire;
- the file MUST be the one that was opened: over HTTP every request carries
  ``If-Match`` with the ``ETag`` the server gave when it was opened (``412``
  is TYPE, "it changed since it was opened"); on other protocols the size and
  the ETag / version / generation that ``fs.info`` reports are checked again
  after each read, before its bytes are used (TYPE);
- every request has a 60 s connect and read timeout (``TimeoutError``, an
  ``OSError``, as a stalled disk would be), unless ``storage_options`` says
  otherwise.

fsspec (and aiohttp, s3fs) are the optional extra ``kiln-np[remote]``, imported
only when a URL is opened; without it, opening a URL is TYPE naming the extra.
"""

from __future__ import annotations

import contextlib
import io
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError

from .mapped import FileIdentity, MappedFile

__all__ = ["TIMEOUT", "RemoteFile", "is_url", "join_url", "list_url", "remote_filesystem"]

TIMEOUT = 60.0
"""Seconds a connection, or a read of the next bytes, may take (unless
``storage_options`` sets its own)."""

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_HTTP = ("http", "https")
_TAGS = ("ETag", "etag", "VersionId", "version_id", "generation", "blob_id", "md5Hash")
"""What ``fs.info`` may report that changes whenever the file's content does."""
_CHUNK = 1 << 20  # bytes taken off the wire at a time


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL (``scheme://...``), read through fsspec.

    >>> is_url("s3://bucket/model/"), is_url("model.safetensors"), is_url(3)
    (True, False, False)
    """
    return isinstance(path, str) and _URL.match(path) is not None


def join_url(base: str, name: str) -> str:
    """``name`` in the directory ``base`` names (or beside the file it names).

    >>> join_url("https://h/m/model.safetensors.index.json", "a.safetensors")
    'https://h/m/a.safetensors'
    >>> join_url("s3://b/m/", "x")
    's3://b/m/x'
    """
    return base[: base.rfind("/") + 1] + name


def remote_filesystem(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """``(fs, path)``: the fsspec file system of ``url`` made with
    ``storage_options`` (plus the 60 s timeouts it does not set), and the path
    in it.

    Raises
    ------
    KilnError
        TYPE when fsspec (the extra ``kiln-np[remote]``) or the protocol's file
        system is not installed.

    >>> remote_filesystem("memory://x/w.safetensors", None)[1]
    '/x/w.safetensors'
    """
    try:
        import fsspec
    except ImportError:
        raise KilnError(
            "TYPE",
            f"{url!r}: expected fsspec to read a URL, found it not installed: "
            "pip install 'kiln-np[remote]'",
        ) from None
    options = dict(storage_options or {})
    protocol = url.split("://", 1)[0].lower()
    try:
        if protocol in _HTTP:
            import aiohttp  # fsspec's HTTP file system needs it

            client = dict(options.get("client_kwargs") or {})
            client.setdefault(
                "timeout",
                aiohttp.ClientTimeout(total=None, sock_connect=TIMEOUT, sock_read=TIMEOUT),
            )
            options["client_kwargs"] = client
        elif protocol in ("s3", "s3a"):
            config = dict(options.get("config_kwargs") or {})
            config.setdefault("connect_timeout", TIMEOUT)
            config.setdefault("read_timeout", TIMEOUT)
            options["config_kwargs"] = config
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError:
        # fsspec's own words vary by version: the package is named from its registry
        from fsspec.registry import known_implementations

        known = known_implementations.get(protocol, {})
        package = str(known.get("class", "?")).split(".", 1)[0]
        raise KilnError(
            "TYPE",
            f"{url!r}: expected the fsspec file system of {protocol}:// to be installed, "
            f"found no {package}: pip install {package} (or 'kiln-np[remote]' for http, "
            "https and s3)",
        ) from None
    except ValueError:  # fsspec: "Protocol not known"
        raise KilnError(
            "TYPE", f"{url!r}: expected a URL of a protocol fsspec knows, found {protocol}://"
        ) from None
    return fs, path


def list_url(url: str, storage_options: Mapping[str, Any] | None) -> list[str] | None:
    """The names in the directory ``url`` names, sorted, or None when it names
    a file.  A URL ending ``/`` is a directory; on a protocol other than HTTP,
    so is a path that ``fs.info`` calls one (an S3 prefix).  Over HTTP the
    listing is the links of the server's index page.

    >>> import fsspec
    >>> with fsspec.open("memory://d/a.safetensors", "wb") as f:
    ...     _ = f.write(b"")
    >>> list_url("memory://d", None), list_url("memory://d/a.safetensors", None)
    (['a.safetensors'], None)
    """
    fs, path = remote_filesystem(url, storage_options)
    if not url.endswith("/"):
        if url.split("://", 1)[0].lower() in _HTTP:
            return None
        if fs.info(path).get("type") != "directory":
            return None
    names = {str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(path, detail=False)}
    return sorted(n for n in names if n and n != path.rstrip("/").rsplit("/", 1)[-1])


class RemoteFile(MappedFile):
    """One file behind a URL, read with exact range requests (the module docstring
    lists the checks); never mapped, never cached.

    ``view(offset, length)`` reads those bytes into a buffer of their own (what
    a tensor's payload is here: a tensor's size, not the file's);
    ``opened()`` gives a raw file whose ``readinto`` is one range request;
    ``read`` is one range request.

    Examples
    --------
    >>> import fsspec
    >>> with fsspec.open("memory://r/f", "wb") as f:
    ...     _ = f.write(b"header and payload")
    >>> file = RemoteFile.open("memory://r/f")
    >>> file.read(0, 6), bytes(file.view(11, 7)), file.size
    (b'header', b'payload', 18)
    """

    __slots__ = ("fs", "fs_path", "http", "tag")

    def __init__(self, url: str, fs: Any, fs_path: str, size: int, tag: str | None) -> None:
        self.path = url
        self.identity = FileIdentity(None, 0, size, 0)
        self.size = size
        self.stop = size
        self._base = 0
        self._map = None
        self._view = None
        self._private = None
        self._private_view = None
        self._lock = threading.Lock()
        self.closed = False
        self.fs = fs
        self.fs_path = fs_path
        self.tag = tag
        protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
        self.http = protocol in _HTTP

    @classmethod
    def open(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> RemoteFile:
        """The file at ``url``, its size and ETag (or version) asked once
        (``FileNotFoundError`` when there is none; TYPE for a directory)."""
        fs, path = remote_filesystem(url, storage_options)
        info = fs.info(path)
        if info.get("type") == "directory":
            raise KilnError("TYPE", f"{url!r}: expected a file, found a directory")
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise KilnError(
                "TYPE", f"{url!r}: expected the server to tell the file's size, found {size!r}"
            )
        return cls(url, fs, path, size, _tag(info))

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemoteFile, (self.path, self.fs, self.fs_path, self.size, self.tag))

    @contextlib.contextmanager
    def opened(self, needed: int = 0) -> Iterator[io.RawIOBase]:
        """A raw file over the URL: ``seek`` and ``readinto`` (each one range
        request); LENGTH when the file held fewer than ``needed`` bytes."""
        if self.closed:
            raise ValueError(f"{self.path!r}: the weight file was closed")
        self._check(self.identity, needed)
        yield _RangeReader(self)

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer when the file ends first): for
        headers."""
        n = max(0, min(length, self.size - offset))
        out = bytearray(n)
        self.fetch_into(offset, memoryview(out))
        return bytes(out)

    def view(self, offset: int, length: int) -> memoryview:
        """The ``length`` bytes at ``offset``, read into a read-only buffer of
        their own (LENGTH when the file holds fewer)."""
        out = self._fetched(offset, length)
        out.flags.writeable = False
        return out.data

    def private_view(self, offset: int, length: int) -> memoryview:
        """As :meth:`view`, writable: the buffer is the caller's own."""
        return self._fetched(offset, length).data

    def _fetched(self, offset: int, length: int) -> np.ndarray:
        if self.closed:
            raise ValueError(f"{self.path!r}: the weight file was closed")
        self._check(self.identity, offset + length)
        out = np.empty(length, np.uint8)
        self.fetch_into(offset, out.data)
        return out

    def close(self) -> None:
        """No new reads (nothing is held open)."""
        self.closed = True

    def __repr__(self) -> str:
        return f"RemoteFile({self.path!r}, {self.size} bytes{', closed' * self.closed})"

    def fetch_into(self, offset: int, into: memoryview) -> None:
        """Fill ``into`` with the bytes at ``offset``: one range request, checked
        (module docstring)."""
        n = into.nbytes
        if n == 0:
            return
        where = f"{self.path!r}: bytes [{offset}, {offset + n}): "
        if self.http:
            self._fetch_http(offset, into, where)
            return
        data = self.fs.cat_file(self.fs_path, start=offset, end=offset + n)
        self._check_count(len(data), n, where)
        self._check_unchanged()
        into[:] = data

    def _check_count(self, got: int, n: int, where: str, why: str = "") -> None:
        if got < n:
            raise KilnError(
                "LENGTH",
                f"{where}expected {n} bytes, found {got} (short by {n - got}): the answer "
                f"to a range request was cut short{why}",
                expected=n,
                found=got,
            )
        if got > n:
            raise KilnError(
                "TYPE",
                f"{where}expected {n} bytes, found more: the answer to a range request "
                "held more than was asked for",
                expected=n,
            )

    def _check_unchanged(self) -> None:
        self.fs.invalidate_cache(self.fs_path)
        info = self.fs.info(self.fs_path)
        size, tag = info.get("size"), _tag(info)
        if size != self.size:
            self._changed(f"it modified ({self.size} bytes when opened, {size} now)")
        if tag != self.tag:
            self._changed(f"it modified (its version was {self.tag!r}, now {tag!r})")

    def _changed(self, change: str) -> None:
        raise KilnError(
            "TYPE",
            f"{self.path!r}: expected the file that was opened, found {change}: it changed "
            "since it was opened; open it again",
        )

    def _fetch_http(self, offset: int, into: memoryview, where: str) -> None:
        from fsspec.asyn import sync

        n = into.nbytes
        status, reason, content_range, got, broken = sync(
            self.fs.loop, _http_range, self.fs, self.path, offset, into, self.tag
        )
        if status == 404:
            raise FileNotFoundError(2, "No such file (HTTP 404)", self.path)
        if status == 412:
            self._changed(
                "another version (the server answered 412 Precondition Failed to If-Match "
                "with the ETag it gave when the file was opened)"
            )
        if status != 206:
            raise KilnError(
                "TYPE",
                f"{where}expected 206 Partial Content to a range request, found "
                f"{status} {reason} (a server must serve byte ranges to be read remotely)",
                expected=206,
                found=status,
            )
        wanted = f"bytes {offset}-{offset + n - 1}/{self.size}"
        if content_range != wanted:
            if content_range is not None and content_range.startswith(
                f"bytes {offset}-{offset + n - 1}/"
            ):
                self._changed(
                    f"it modified (Content-Range {content_range!r}, {self.size} bytes when opened)"
                )
            raise KilnError(
                "TYPE",
                f"{where}expected Content-Range {wanted!r}, found {content_range!r}",
            )
        # aiohttp's words for a body cut short vary by version: not shown
        self._check_count(got, n, where, " (the connection closed early)" * broken)


class _RangeReader(io.RawIOBase):
    """A raw, seekable file over a :class:`RemoteFile`: each ``readinto`` is one
    exact range request."""

    def __init__(self, file: RemoteFile) -> None:
        self._file = file
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._file.size)[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(view.nbytes, self._file.size - self._pos))
        self._file.fetch_into(self._pos, view[:n])
        self._pos += n
        return n


def _tag(info: Mapping[str, Any]) -> str | None:
    """What changes whenever the file does (its ETag, version, generation)."""
    return next((str(info[k]) for k in _TAGS if info.get(k)), None)


async def _http_range(
    fs: Any, url: str, offset: int, into: memoryview, etag: str | None
) -> tuple[int, str, str | None, int, bool]:
    """One ``GET`` of ``len(into)`` bytes at ``offset`` on fsspec's session, read
    into ``into`` (at most one byte more taken off the wire); returns ``(status,
    reason, Content-Range, bytes read, whether the body broke off)``.  No
    KilnError is made here: this runs on fsspec's event-loop thread."""
    import aiohttp

    n = into.nbytes
    kwargs = dict(fs.kwargs)
    headers = dict(kwargs.pop("headers", None) or {})
    headers["Range"] = f"bytes={offset}-{offset + n - 1}"
    headers["Accept-Encoding"] = "identity"
    if etag is not None:
        headers["If-Match"] = etag
    session = await fs.set_session()
    encode = getattr(fs, "encode_url", None)
    target = url if encode is None else encode(url)
    async with session.get(target, headers=headers, **kwargs) as r:
        status, reason = r.status, r.reason or ""
        content_range = r.headers.get("Content-Range")
        if status != 206:
            return status, reason, content_range, 0, False
        got = 0
        try:
            while got <= n:
                chunk = await r.content.read(min(_CHUNK, n + 1 - got))
                if not chunk:
                    break
                if got + len(chunk) > n:
                    return status, reason, content_range, got + len(chunk), False
                into[got : got + len(chunk)] = chunk
                got += len(chunk)
        except aiohttp.ClientPayloadError:
            return status, reason, content_range, got, True
    return status, reason, content_range, got, False
