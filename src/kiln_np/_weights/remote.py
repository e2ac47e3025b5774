"""A file of a weight checkpoint behind a URL (``https://``, ``s3://``, any fsspec
protocol whose file system is installed, or a chain of fsspec layers such as
``simplecache::https://...``), read with exact range requests.

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
  at most one byte more than asked is ever read off the wire.  A server
  without range support answers ``200 OK`` and the whole file: that is taken
  only for a read of the whole file (an index, a file no larger than the first
  read of its header), checked to hold exactly the file's bytes; to a read of
  part of a file it is TYPE saying how to proceed (download the file, or serve
  it with range support).  The bytes of a whole file of at most :data:`KEEP`
  bytes so read are kept, and its later reads served from them;
- the file MUST be the one that was opened: over HTTP every request carries
  ``If-Match`` with the ``ETag`` the server gave when it was opened (``412``
  is TYPE, "it changed since it was opened"); on other protocols the size and
  the ETag / version / generation that ``fs.info`` reports are checked again
  after each read, before its bytes are used (TYPE);
- an answer carrying an ``ETag`` other than the one seen when the file was
  opened is TYPE, "it changed since it was opened" (a server that ignores
  ``If-Match``);
- every request has a 60 s connect and read timeout, unless ``storage_options``
  says otherwise, and an overall deadline: :data:`DEADLINE` seconds plus its
  bytes at :data:`MIN_RATE` bytes a second (``storage_options`` keys
  ``kiln_np_deadline`` and ``kiln_np_min_rate``, read here and not passed to
  fsspec, or the environment variables ``KILN_NP_REMOTE_DEADLINE`` and
  ``KILN_NP_REMOTE_MIN_RATE``), so a server that trickles bytes cannot hold a
  read forever.  Either passing is ``TimeoutError`` (an ``OSError``, as a
  stalled disk would be) naming the URL;
- every other failure is ``KilnError`` TYPE when the answer breaks the protocol
  (a malformed status line or header, a redirect to a scheme other than
  ``http``/``https``, which is refused, too many redirects, an error status) or
  ``OSError`` when the transport fails (a connection refused, reset or dropped
  before the answer: ``ConnectionError``), naming the URL; never aiohttp's or
  fsspec's own exceptions.  A missing file is ``FileNotFoundError``.

A chained URL (``simplecache::``, ``filecache::``, ``blockcache::`` before a
URL, or any chain fsspec reads, ``storage_options`` keyed by each layer's
protocol as fsspec takes them) is read through its layers, as fsspec opens it:
the first layer's file, a seek and a read per request, the byte count checked
as above.  The layer decides what goes over the wire (the whole file into a
cache, or blocks) and that the bytes are those of one version of the file (a
cache's copy), so no ETag is compared; the layers are synchronous, so only the
socket timeouts of the URL they wrap bound a read, not the deadline.

fsspec (and aiohttp, s3fs) are the optional extra ``kiln-np[remote]``, imported
only when a URL is opened; without it, opening a URL is TYPE naming the extra.
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import os
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError

from .mapped import FileIdentity, MappedFile

__all__ = [
    "DEADLINE",
    "KEEP",
    "MIN_RATE",
    "TIMEOUT",
    "RemoteFile",
    "is_url",
    "join_url",
    "list_url",
    "remote_filesystem",
    "request_limits",
    "url_name",
]

TIMEOUT = 60.0
"""Seconds a connection, or a read of the next bytes, may take (unless
``storage_options`` sets its own)."""
DEADLINE = 60.0
"""Seconds every request may take on top of its bytes at :data:`MIN_RATE`
(``storage_options["kiln_np_deadline"]``, ``$KILN_NP_REMOTE_DEADLINE``)."""
MIN_RATE = float(1 << 17)
"""The slowest rate a request's bytes may arrive at, bytes a second: 128 KiB/s
(``storage_options["kiln_np_min_rate"]``, ``$KILN_NP_REMOTE_MIN_RATE``)."""
KEEP = 1 << 16
"""A file of at most this many bytes read whole (one request, or a server's
``200 OK``) is kept, and its later reads served from those bytes: 64 KiB."""
_LIMITS = (
    ("kiln_np_deadline", "KILN_NP_REMOTE_DEADLINE", DEADLINE, "seconds"),
    ("kiln_np_min_rate", "KILN_NP_REMOTE_MIN_RATE", MIN_RATE, "bytes a second"),
)

# A URL, or a chain of fsspec layers before one (``simplecache::https://...``,
# ``zip://member::https://...``): each layer a bare protocol or a URL, then ``::``.
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*(?:://[^:]*)?::)*[A-Za-z][A-Za-z0-9+.\-]*://")
_HTTP = ("http", "https")
_TAGS = ("ETag", "etag", "VersionId", "version_id", "generation", "blob_id", "md5Hash")
"""What ``fs.info`` may report that changes whenever the file's content does."""
_CHUNK = 1 << 20  # bytes taken off the wire at a time


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL (``scheme://...``, or fsspec layers chained
    before one: ``simplecache::https://...``), read through fsspec.

    >>> is_url("s3://bucket/model/"), is_url("model.safetensors"), is_url(3)
    (True, False, False)
    >>> is_url("simplecache::https://h/m.gguf"), is_url("a::b")
    (True, False)
    """
    return isinstance(path, str) and _URL.match(path) is not None


def _path_layer(url: str) -> tuple[list[str], int]:
    """The layers of a (chained) URL and the index of the one holding the path:
    the first with a ``://`` (``simplecache`` holds none, ``zip://member`` does)."""
    layers = url.split("::")
    return layers, next((i for i, layer in enumerate(layers) if "://" in layer), len(layers) - 1)


def join_url(base: str, name: str) -> str:
    """``name`` in the directory ``base`` names (or beside the file it names); in
    a chained URL, in the layer that holds the path.

    >>> join_url("https://h/m/model.safetensors.index.json", "a.safetensors")
    'https://h/m/a.safetensors'
    >>> join_url("s3://b/m/", "x")
    's3://b/m/x'
    >>> join_url("simplecache::https://h/m/a-00001-of-00002.gguf", "a-00002-of-00002.gguf")
    'simplecache::https://h/m/a-00002-of-00002.gguf'
    """
    layers, i = _path_layer(base)
    layers[i] = layers[i][: layers[i].rfind("/") + 1] + name
    return "::".join(layers)


def url_name(url: str) -> str:
    """The file name a (chained) URL ends with: what :func:`join_url` replaces.

    >>> url_name("https://h/m/a.gguf"), url_name("filecache::s3://b/m/x.gguf")
    ('a.gguf', 'x.gguf')
    """
    layers, i = _path_layer(url)
    return layers[i][layers[i].rfind("/") + 1 :]


def remote_filesystem(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """``(fs, path)``: the fsspec file system of ``url`` made with
    ``storage_options`` (plus the 60 s timeouts it does not set: in a chained
    URL, for the file system of the URL its layers wrap, under its protocol's
    key), and the path in it.

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
    options = {
        k: v for k, v in (storage_options or {}).items() if k not in {k for k, *_ in _LIMITS}
    }
    protocols = [layer.split("://", 1)[0].lower() for layer in url.split("::")]
    protocol = protocols[-1]  # the URL's own, which any layers wrap
    # fsspec gives a chain's options to its first layer, or to a layer by its protocol
    own = options if len(protocols) == 1 else dict(options.get(protocol) or {})
    try:
        if protocol in _HTTP:
            import aiohttp  # fsspec's HTTP file system needs it

            client = dict(own.get("client_kwargs") or {})
            client.setdefault(
                "timeout",
                aiohttp.ClientTimeout(total=None, sock_connect=TIMEOUT, sock_read=TIMEOUT),
            )
            own["client_kwargs"] = client
        elif protocol in ("s3", "s3a"):
            config = dict(own.get("config_kwargs") or {})
            config.setdefault("connect_timeout", TIMEOUT)
            config.setdefault("read_timeout", TIMEOUT)
            own["config_kwargs"] = config
        if own is not options:
            options[protocol] = own
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
    except ValueError as exc:  # fsspec: "Protocol not known", or a layer's own
        from fsspec.registry import available_protocols

        known = set(available_protocols())
        unknown = next((p for p in protocols if p not in known), None)
        if unknown is None and len(protocols) > 1:
            raise _layer_failure(exc, url, "its layers") from exc
        raise KilnError(
            "TYPE",
            f"{url!r}: expected a URL of a protocol fsspec knows, found {unknown or protocol}://",
        ) from None
    except Exception as exc:  # a layer that reads as it is made (zip::)
        if len(protocols) == 1:
            raise
        raise _layer_failure(exc, url, "its layers") from exc
    return fs, path


def request_limits(url: str, storage_options: Mapping[str, Any] | None) -> tuple[float, float]:
    """``(base, rate)``: a request of ``n`` bytes must be answered within
    ``base + n / rate`` seconds.  ``storage_options`` keys ``kiln_np_deadline``
    and ``kiln_np_min_rate`` first, then the environment variables
    ``KILN_NP_REMOTE_DEADLINE`` and ``KILN_NP_REMOTE_MIN_RATE``, then
    :data:`DEADLINE` and :data:`MIN_RATE`; ``inf`` turns a limit off.

    Raises
    ------
    KilnError
        TYPE when a value is not a positive number.

    >>> request_limits("s3://b/m", {"kiln_np_deadline": 5})
    (5.0, 131072.0)
    """
    limits = []
    for key, variable, default, unit in _LIMITS:
        value, source = (storage_options or {}).get(key), f"storage_options[{key!r}]"
        if value is None and os.environ.get(variable):
            value, source = os.environ[variable], f"${variable}"
        try:
            number = default if value is None else float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not number > 0:  # NaN too
            raise KilnError(
                "TYPE",
                f"{url!r}: expected {source} to be a positive number of {unit} "
                f"(inf for no limit), found {value!r}",
            )
        limits.append(number)
    return limits[0], limits[1]


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
    base, _ = request_limits(url, storage_options)
    if not url.endswith("/"):
        if url.rsplit("::", 1)[-1].split("://", 1)[0].lower() in _HTTP:
            return None
        if _call(fs, url, "info", base, "its size", path).get("type") != "directory":
            return None
    listing = _call(fs, url, "ls", base, "its listing", path, detail=False)
    names = {str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in listing}
    return sorted(n for n in names if n and n != path.rstrip("/").rsplit("/", 1)[-1])


class RemoteFile(MappedFile):
    """One file behind a URL, read with exact range requests (the module docstring
    lists the checks); never mapped, and never cached but for a small file read
    whole (:data:`KEEP`).

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

    __slots__ = ("fs", "fs_path", "http", "layered", "limits", "tag", "whole")

    def __init__(
        self,
        url: str,
        fs: Any,
        fs_path: str,
        size: int,
        tag: str | None,
        limits: tuple[float, float] = (DEADLINE, MIN_RATE),
        whole: bytes | None = None,
    ) -> None:
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
        self.limits = limits
        self.whole = whole  # the file's bytes, when it was read whole (at most KEEP)
        self.layered = "::" in url  # read through fsspec's layers (a chained URL)
        protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
        self.http = protocol in _HTTP and not self.layered

    @classmethod
    def open(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> RemoteFile:
        """The file at ``url``, its size and ETag (or version) asked once
        (``FileNotFoundError`` when there is none; TYPE for a directory).  A
        chained URL's size is its first layer's file's (a cache of the whole
        file is filled here)."""
        fs, path = remote_filesystem(url, storage_options)
        limits = request_limits(url, storage_options)
        if "::" in url:
            size = _layered(url, "its size", _layer_size, fs, path)
            return cls(url, fs, path, size, None, limits)
        info = _call(fs, url, "info", limits[0], "its size", path)
        if info.get("type") == "directory":
            raise KilnError("TYPE", f"{url!r}: expected a file, found a directory")
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise KilnError(
                "TYPE", f"{url!r}: expected the server to tell the file's size, found {size!r}"
            )
        return cls(url, fs, path, size, _tag(info), limits)

    def __reduce__(self) -> tuple[Any, ...]:
        state = (self.path, self.fs, self.fs_path, self.size, self.tag, self.limits, self.whole)
        return (RemoteFile, state)

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
        (module docstring), or the kept bytes of a small file read whole."""
        n = into.nbytes
        if n == 0:
            return
        if self.whole is not None:
            into[:] = self.whole[offset : offset + n]
            return
        where = f"{self.path!r}: bytes [{offset}, {offset + n}): "
        what = where.split(": ", 1)[1].rstrip(": ")
        if self.http:
            self._fetch_http(offset, into, where)
        elif self.layered:
            data = _layered(self.path, what, _layer_read, self.fs, self.fs_path, offset, n)
            self._check_count(len(data), n, where)
            into[:] = data
        else:
            data = _call(
                self.fs,
                self.path,
                "cat_file",
                self._seconds(n),
                what,
                self.fs_path,
                start=offset,
                end=offset + n,
            )
            self._check_count(len(data), n, where)
            self._check_unchanged()
            into[:] = data
        if offset == 0 and n == self.size <= KEEP:
            self.whole = bytes(into)

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

    def _seconds(self, n: int) -> float:
        """The deadline of a request of ``n`` bytes."""
        base, rate = self.limits
        return base + n / rate

    def _check_unchanged(self) -> None:
        self.fs.invalidate_cache(self.fs_path)
        info = _call(self.fs, self.path, "info", self.limits[0], "its version", self.fs_path)
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
        n = into.nbytes
        whole = offset == 0 and n == self.size  # a server without ranges may answer 200
        status, reason, content_range, etag, got, broken = _bounded_call(
            self.fs,
            self.path,
            f"bytes [{offset}, {offset + n})",
            self._seconds(n),
            _http_range,
            (self.fs, self.path, offset, into, self.tag, whole),
        )
        if status == 404:
            raise FileNotFoundError(2, "No such file (HTTP 404)", self.path)
        if status == 412:
            self._changed(
                "another version (the server answered 412 Precondition Failed to If-Match "
                "with the ETag it gave when the file was opened)"
            )
        if status == 200 and not whole:
            raise KilnError(
                "TYPE",
                f"{where}expected 206 Partial Content to a range request, found 200 OK: the "
                f"server sends the whole file ({self.size} bytes) for a part of it, so it "
                "cannot be read remotely; download the file and open it locally, or serve "
                "it with range support (only a file read whole, such as an index or a file "
                f"of at most {KEEP} bytes, is taken from such a server)",
                expected=206,
                found=status,
            )
        if status not in (200, 206):
            raise KilnError(
                "TYPE",
                f"{where}expected 206 Partial Content to a range request, found {status} {reason}",
                expected=206,
                found=status,
            )
        if self.tag is not None and etag is not None and etag != self.tag:
            self._changed(
                f"another version (the answer's ETag is {etag}, {self.tag} when it was "
                "opened: the server ignored If-Match)"
            )
        if status == 200:  # the whole file, no Content-Range: its bytes are counted
            self._check_count(got, n, where, " (the connection closed early)" * broken)
            return
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
    fs: Any, url: str, offset: int, into: memoryview, etag: str | None, whole: bool
) -> tuple[int, str, str | None, str | None, int, bool]:
    """One ``GET`` of ``len(into)`` bytes at ``offset`` on fsspec's session, read
    into ``into`` (at most one byte more taken off the wire); returns ``(status,
    reason, Content-Range, ETag, bytes read, whether the body broke off)``.  The
    body of a ``200`` is read only when the whole file was asked for (``whole``).
    No KilnError is made here: this runs on fsspec's event-loop thread."""
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
        content_range, tag = r.headers.get("Content-Range"), r.headers.get("ETag")
        if status != 206 and not (status == 200 and whole):
            return status, reason, content_range, tag, 0, False
        got = 0
        try:
            while got <= n:
                chunk = await r.content.read(min(_CHUNK, n + 1 - got))
                if not chunk:
                    break
                if got + len(chunk) > n:
                    return status, reason, content_range, tag, got + len(chunk), False
                into[got : got + len(chunk)] = chunk
                got += len(chunk)
        except aiohttp.ClientPayloadError:
            return status, reason, content_range, tag, got, True
    return status, reason, content_range, tag, got, False


class _DeadlineError(Exception):
    """The overall deadline of a request passed (not a socket timeout)."""


async def _bounded(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], seconds: float) -> Any:
    """``await func(*args, **kwargs)``, cancelled when ``seconds`` pass (on the
    event loop's thread)."""
    import asyncio  # here, not at the top: 20 ms that local files never need

    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    try:
        return await asyncio.wait_for(
            func(*args, **kwargs), None if math.isinf(seconds) else seconds
        )
    except asyncio.TimeoutError:
        if loop.time() >= end:
            raise _DeadlineError from None
        raise


def _call(
    fs: Any, url: str, method: str, seconds: float, what: str, *args: Any, **kwargs: Any
) -> Any:
    """``fs.method(*args, **kwargs)`` (its coroutine ``_method`` on an async file
    system, within ``seconds``), every failure as the module docstring says."""
    if getattr(fs, "async_impl", False) and hasattr(fs, "_" + method):
        return _bounded_call(fs, url, what, seconds, getattr(fs, "_" + method), args, kwargs)
    return _guarded(url, what, getattr(fs, method), *args, **kwargs)


def _guarded(url: str, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)``, a synchronous call, every failure as the module
    docstring says."""
    try:
        return func(*args, **kwargs)
    except Exception as exc:
        raise _failure(exc, url, what) from exc


def _layered(url: str, what: str, func: Any, *args: Any) -> Any:
    """``func(*args)`` through a chained URL's layers, every failure as
    :func:`_layer_failure` says."""
    try:
        return func(*args)
    except Exception as exc:
        raise _layer_failure(exc, url, what) from exc


def _layer_failure(exc: Exception, url: str, what: str) -> Exception:
    """What a failure through a chained URL's layers is raised as: as the module
    docstring says, and one of a layer itself (neither the transport's nor the
    server's: fsspec's block cache given a whole file for a block, an archive
    that is none) TYPE naming the layers."""
    import asyncio  # at hand: fsspec's remote file systems run on it

    if isinstance(exc, (OSError, KilnError, asyncio.TimeoutError)) or _is_aiohttp(exc):
        return _failure(exc, url, what)
    if isinstance(exc, KeyError) and "zip" in url.split("::", 1)[0]:
        # an archive's missing member: zipfile's KeyError, which older fsspec passes on
        return FileNotFoundError(errno.ENOENT, f"{url!r}: {what}: no such member ({exc})", url)
    # fsspec's words vary by version: not shown, kept as the cause
    layers = [layer.split("://", 1)[0] for layer in url.split("::")[:-1]]
    hint = (
        "; blockcache:: reads by ranges and needs a server with range support, "
        "simplecache:: and filecache:: fetch the whole file"
    ) * ("blockcache" in layers)
    return KilnError(
        "TYPE",
        f"{url!r}: {what}: expected fsspec's layers {'::'.join(layers)}:: to read it, found "
        f"them failing (the error they raised is this one's cause{hint})",
    )


def _layer_size(fs: Any, path: str) -> int:
    """The size of the file a chained URL's first layer opens."""
    with fs.open(path, "rb") as f:
        size: int = f.seek(0, os.SEEK_END)
        return size


def _layer_read(fs: Any, path: str, offset: int, n: int) -> bytes:
    """``n`` bytes at ``offset`` (fewer when the file ends first) of the file a
    chained URL's first layer opens."""
    with fs.open(path, "rb") as f:
        f.seek(offset)
        data: bytes = f.read(n)
        return data


def _bounded_call(
    fs: Any,
    url: str,
    what: str,
    seconds: float,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
) -> Any:
    """``func(*args, **kwargs)``, a coroutine function, run on ``fs``'s event loop
    within ``seconds``; every failure as the module docstring says."""
    from fsspec.asyn import sync

    try:
        return sync(fs.loop, _bounded, func, args, kwargs or {}, seconds)
    except _DeadlineError:
        raise TimeoutError(
            f"{url!r}: {what}: expected the answer within {seconds:.1f} s (the deadline of "
            "a request: kiln_np_deadline plus its bytes at kiln_np_min_rate), found it "
            "still arriving (a server too slow, or trickling bytes)",
        ) from None
    except Exception as exc:
        raise _failure(exc, url, what) from exc


def _failure(exc: Exception, url: str, what: str) -> Exception:
    """What a remote call's ``exc`` is raised as: itself when it is a KilnError or
    names a missing file; TYPE for an answer that breaks the protocol; an
    ``OSError`` naming the URL for a transport that failed."""
    import asyncio  # at hand: fsspec's remote file systems run on it

    if isinstance(exc, KilnError):
        return exc
    where = f"{url!r}: {what}: "
    cause: BaseException = exc
    under = exc.__cause__
    if isinstance(exc, FileNotFoundError) and (
        isinstance(under, (OSError, asyncio.TimeoutError)) or (under and _is_aiohttp(under))
    ):
        cause = under  # fsspec's HTTP info: every failure of the transport is FileNotFoundError
    status = getattr(cause, "status", None)
    if status in (404, 410) or (cause is exc and isinstance(exc, FileNotFoundError)):
        return FileNotFoundError(errno.ENOENT, f"{where}no such file ({exc})", url)
    if isinstance(cause, (asyncio.TimeoutError, TimeoutError)):
        return TimeoutError(
            f"{where}expected a connection, or the next bytes, within the socket timeout "
            f"({TIMEOUT:g} s unless storage_options sets its own), found none",
        )
    protocol = _protocol_failure(cause)
    if protocol is not None:
        return KilnError("TYPE", f"{where}expected {protocol}")
    if isinstance(cause, OSError) and url in str(cause):
        return cause if isinstance(cause, Exception) else exc
    text = str(cause) or type(cause).__name__
    if isinstance(cause, OSError) and not _is_aiohttp(cause):
        try:
            return type(cause)(f"{where}{text}")
        except Exception:
            return OSError(f"{where}{text}")
    return ConnectionError(f"{where}the connection failed ({text})")


def _is_aiohttp(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("aiohttp")


def _protocol_failure(exc: BaseException) -> str | None:
    """What an answer breaking the protocol should have been (None when ``exc``
    is not such an answer)."""
    if not _is_aiohttp(exc) and not (
        isinstance(exc, ValueError) and "redirect" in str(exc).lower()
    ):
        return None
    import aiohttp

    redirect = getattr(aiohttp, "RedirectClientError", ())  # aiohttp >= 3.10
    if isinstance(exc, aiohttp.TooManyRedirects):
        return f"at most {len(exc.history)} redirects, found more"
    if isinstance(exc, redirect) or (
        not isinstance(exc, aiohttp.ClientError) and isinstance(exc, ValueError)
    ):
        target = str(getattr(exc, "url", "") or exc)
        return f"a redirect to an http:// or https:// URL, found one to {target!r} (refused)"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"a valid URL, found {str(exc.url)!r}"
    if isinstance(exc, aiohttp.ClientResponseError):
        message = " ".join(str(exc.message).split())
        return f"a successful, well-formed HTTP answer, found {exc.status} {message!r}"
    return None
