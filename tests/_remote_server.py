"""Servers on the loopback for the remote-source tests and benchmarks: a small HTTP/1.1
file server with byte ranges, and moto's S3 server (:func:`upload` puts a
directory's files on it).

:class:`RangeServer` serves a directory on 127.0.0.1 (a free port): ``GET`` and
``HEAD``, one ``Range: bytes=a-b`` per request (``206`` with ``Content-Range``,
``416`` past the end), an ``ETag`` that changes when a file is replaced or
modified, ``If-Match`` (``412`` when it does not match), ``Content-Length``
always, an HTML index of links for a path ending ``/`` (what fsspec lists), and
the body bytes served counted per path.  ``mode`` makes it misbehave on purpose:
``"short"`` (a body one byte short of its ``Content-Length``, then the connection
closed), ``"long"`` (one byte more than asked, honestly counted), ``"wrong-range"``
(``Content-Range`` one byte off), ``"no-range"`` (``200`` and the whole file, as a
server that ignores ``Range``), ``"no-etag"``, ``"no-length"`` (no
``Content-Length``: the body ends when the connection closes), ``"trickle"`` (every
body a byte at a time, one each ``trickle`` seconds, for at most 20 s),
``"ignore-if-match"`` (the file as it is now, whatever ``If-Match`` asks),
``"bad-status"`` (a status line that is not HTTP), ``"bad-header"`` (a header line
without a colon), ``"drop"`` (the connection closed before any answer),
``"reset-body"`` (half the body, then the connection reset), ``"redirect-file"``
(``302`` to ``file:///etc/passwd``), ``"redirect"`` (``302`` to the same path on this
server with ``?moved``, which is then served).
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class RangeServer:
    """A directory served on 127.0.0.1 with byte ranges; ``url`` ends ``/``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.mode: str | None = None
        self.trickle = 0.2  # seconds between two bytes of a body, in mode "trickle"
        self.served: Counter[str] = Counter()  # body bytes by path
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self._lock = threading.Lock()
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> RangeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    @property
    def total(self) -> int:
        """Body bytes served, every path together."""
        return sum(self.served.values())

    def reset(self) -> None:
        with self._lock:
            self.served.clear()
            self.requests.clear()

    def count(self, path: str, n: int, method: str, rng: str | None) -> None:
        with self._lock:
            self.served[path] += n
            self.requests.append((method, path, rng))


@contextlib.contextmanager
def serving(root: Path) -> Iterator[RangeServer]:
    """A :class:`RangeServer` of ``root``, stopped on leaving."""
    server = RangeServer(root).start()
    try:
        yield server
    finally:
        server.stop()


def etag_of(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    owner: RangeServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _send(self, status: int, headers: dict[str, str], data: bytes, body: bool) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        # counted before the bytes go out: a client that has them may look at once
        if body and data:
            self.owner.count(self.path, len(data), self.command, self.headers.get("Range"))
        elif not body:
            self.owner.count(self.path, 0, self.command, None)
        self.end_headers()
        if not (body and data):
            return
        if self.owner.mode == "trickle":
            self.wfile.flush()
            end = time.monotonic() + 20  # bounded, whoever listens
            for i in range(len(data)):
                if time.monotonic() > end:
                    break
                try:
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                except OSError:  # the client gave up
                    break
                time.sleep(self.owner.trickle)
            self.close_connection = True
        elif self.owner.mode == "reset-body":
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            # an RST, not a FIN: SO_LINGER on, 0 s
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
        else:
            self.wfile.write(data)

    def _misbehave(self, mode: str | None) -> bool:
        """Answer as ``mode`` says when it is one that ignores the file; whether
        it did."""
        raw = {
            "bad-status": b"HTTP/1.1 2O6 Partial\r\nContent-Length: 0\r\n\r\n",
            "bad-header": b"HTTP/1.1 206 Partial Content\r\nthis line has no colon\r\n"
            b"Content-Length: 0\r\n\r\n",
            "drop": b"",
            "redirect-file": b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\n"
            b"Content-Length: 0\r\n\r\n",
        }
        if mode == "redirect" and "?" not in self.path:
            where = self.owner.url + self.path.lstrip("/") + "?moved"
            raw[mode] = (
                f"HTTP/1.1 302 Found\r\nLocation: {where}\r\nContent-Length: 0\r\n\r\n"
            ).encode()
        if mode not in raw:
            return False
        self.owner.count(self.path, 0, self.command, self.headers.get("Range"))
        self.wfile.write(raw[mode])
        self.wfile.flush()
        self.close_connection = True
        return True

    def _answer(self, body: bool) -> None:
        owner, mode = self.owner, self.owner.mode
        if self._misbehave(mode):
            return
        rel = unquote(self.path.split("?", 1)[0]).lstrip("/")
        path = owner.root / rel
        if ".." in Path(rel).parts or not path.exists():
            self._send(404, {"Content-Length": "0"}, b"", body)
            return
        if path.is_dir():
            links = "".join(
                f'<a href="{html.escape(p.name)}">{html.escape(p.name)}</a>\n'
                for p in sorted(path.iterdir())
            )
            page = f"<html><body>\n{links}</body></html>\n".encode()
            self._send(
                200, {"Content-Length": str(len(page)), "Content-Type": "text/html"}, page, body
            )
            return
        st = path.stat()
        size, etag = st.st_size, etag_of(st)
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if mode != "no-etag":
            headers["ETag"] = etag
        wanted = self.headers.get("If-Match")
        if wanted is not None and wanted not in ("*", etag) and mode != "ignore-if-match":
            self._send(412, {"Content-Length": "0"}, b"", body)
            return
        rng = self.headers.get("Range")
        match = _RANGE.match(rng) if rng else None
        if match is None or mode in ("no-range", "no-length"):
            data = path.read_bytes() if body else b""
            headers["Content-Length"] = str(size)
            if mode == "no-length":
                self.close_connection = True
                headers["Connection"] = "close"
                del headers["Content-Length"]
            self._send(200, headers, data, body)
            return
        start = int(match[1])
        stop = min(int(match[2]) + 1 if match[2] else size, size)
        if start >= size or stop <= start:
            self._send(416, {"Content-Range": f"bytes */{size}", "Content-Length": "0"}, b"", body)
            return
        with path.open("rb") as f:
            f.seek(start)
            data = f.read(stop - start)
        shown = (start, stop - 1)
        if mode == "wrong-range":
            shown = (start + 1, stop)
        headers["Content-Range"] = f"bytes {shown[0]}-{shown[1]}/{size}"
        if mode == "long":
            data += b"\0"
        headers["Content-Length"] = str(len(data))
        if mode == "no-length":
            self.close_connection = True
            headers["Connection"] = "close"
            del headers["Content-Length"]
        if mode == "short":
            self.close_connection = True
            headers["Connection"] = "close"
            data = data[:-1]
        self._send(206, headers, data, body)


@contextlib.contextmanager
def moto_s3(monkeypatch: Any) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (a free port), fake credentials in the
    environment and the instance-metadata lookup off, so nothing leaves the
    loopback; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(key, raising=False)
    # a free port chosen here: moto 5.0 cannot tell the one port=0 got
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def upload(options: dict[str, Any], local: Path, bucket: str, prefix: str) -> None:
    """Every file of the directory ``local`` to ``s3://bucket/prefix/`` (the bucket
    made when missing), through s3fs made with ``options``."""
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for p in sorted(local.iterdir()):
        fs.pipe_file(f"{bucket}/{prefix}/{p.name}", p.read_bytes())
