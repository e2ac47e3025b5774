"""Servers without range support, and fsspec's chained URLs (issue 43), on the loopback.

A server that answers every ``GET`` with ``200`` and the whole file (the loopback
server's ``no-range`` mode, and Python's own ``http.server``) serves what is read
whole: an index, a GGUF of at most 64 KiB (its first read is the whole file, whose
bytes are kept); a read of part of a file answered so is TYPE saying how to
proceed, and a whole answer of another length is the usual LENGTH or TYPE.  A
chained URL (``simplecache::``, ``filecache::``, ``blockcache::`` before an HTTP or
S3 URL) is a URL, read through its layers as fsspec opens it, with and without
range support where the layer allows, and TYPE naming the layers where not.
"""

from __future__ import annotations

import json
import re
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import needs, run_main
from _remote_server import RangeServer, upload

import kiln_np
from kiln_np import KilnError
from kiln_np._weights.remote import RemoteFile, is_url, join_url, remote_filesystem, url_name

pytestmark = [
    needs("fsspec", "aiohttp"),
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

KEEP = 1 << 16


def small_gguf(path: Path) -> dict[str, np.ndarray]:
    """A GGUF of at most 64 KiB (F32 and Q8_0 tensors): read whole with its header."""
    rng = np.random.default_rng(4)
    tensors = {
        "blk.0.attn_q.weight": rng.standard_normal((32, 128), "f4"),
        "blk.0.attn_norm.weight": np.ones(128, "f4"),
    }
    kiln_np.save_weights(
        path, tensors, format="gguf", quantize="*attn_q*=q8_0", metadata={"general.name": "S"}
    )
    assert path.stat().st_size <= KEEP
    return tensors


def large_gguf(path: Path) -> None:
    """A GGUF of more than 64 KiB: its header is read in part."""
    tensors = {"a": np.arange(20_000, dtype="f4"), "b": np.ones(8, "f4")}
    kiln_np.save_weights(path, tensors, format="gguf")
    assert path.stat().st_size > KEEP


def payloads(weights: kiln_np.Weights) -> dict[str, bytes]:
    return {name: bytes(t.payload().data) for name, t in weights.items()}


@pytest.fixture
def plain_http(tmp_path: Path) -> Iterator[str]:
    """Python's own ``http.server`` of ``tmp_path`` (no ranges, no ETag, If-Match
    ignored: what ``python -m http.server`` runs); its URL."""
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


# -- a server without range support --------------------------------------------------------


def test_a_small_gguf_reads_from_a_server_without_ranges(
    tmp_path: Path, http: RangeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    small_gguf(tmp_path / "s.gguf")
    size = (tmp_path / "s.gguf").stat().st_size
    http.mode = "no-range"
    url = http.url + "s.gguf"
    with kiln_np.open_weights(url) as remote, kiln_np.open_weights(tmp_path / "s.gguf") as local:
        assert payloads(remote) == payloads(local)
    gets = [r for r in http.requests if r[0] == "GET"]
    assert gets == [("GET", "/s.gguf", f"bytes=0-{size - 1}")]  # answered 200, the whole file
    assert http.total == size
    # the commands: ls, stats, convert
    for argv in (["ls", url], ["stats", url], ["diff", url, str(tmp_path / "s.gguf")]):
        status, out, err = run_main(capsys, *argv)
        assert status == 0, err
        assert "blk.0.attn_q.weight" in out or "equal" in out
    status, _, err = run_main(capsys, "convert", url, str(tmp_path / "c.gguf"))
    assert status == 0, err
    assert (tmp_path / "c.gguf").read_bytes() == (tmp_path / "s.gguf").read_bytes()


def test_a_part_of_a_file_answered_whole_says_how_to_proceed(
    tmp_path: Path, http: RangeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    large_gguf(tmp_path / "l.gguf")
    size = (tmp_path / "l.gguf").stat().st_size
    http.mode = "no-range"
    url = http.url + "l.gguf"
    advice = (
        rf"bytes \[0, 65536\): expected 206 Partial Content to a range request, found 200 OK: "
        rf"the server sends the whole file \({size} bytes\) for a part of it, so it cannot be "
        r"read remotely; download the file and open it locally, or serve it with range support"
    )
    with pytest.raises(KilnError, match=advice) as caught:
        kiln_np.open_weights(url)
    assert caught.value.kind == "TYPE"
    assert [r[0] for r in http.requests] == ["HEAD", "GET"]  # its body left unread
    status, _, err = run_main(capsys, "ls", url)
    assert status != 0
    assert "download the file and open it locally, or serve it with range support" in err


def test_an_index_is_read_whole_from_a_server_without_ranges(
    tmp_path: Path, http: RangeServer
) -> None:
    """The index is taken whole; a shard's 8-byte header size is a part, refused."""
    tensors = {f"w{i}": np.full(40_000, i, "f4") for i in range(3)}
    kiln_np.save_weights(tmp_path / "ck", tensors, format="safetensors", max_shard_size=200_000)
    index = tmp_path / "ck" / "model.safetensors.index.json"
    http.mode = "no-range"
    with pytest.raises(KilnError, match=r"-of-00003.safetensors': bytes \[0, 8\): .*found 200 OK"):
        kiln_np.open_weights(http.url + "ck/" + index.name)
    assert http.served["/ck/" + index.name] == index.stat().st_size


def test_pythons_http_server_serves_an_index_and_a_small_gguf(
    tmp_path: Path, plain_http: str, capsys: pytest.CaptureFixture[str]
) -> None:
    want = small_gguf(tmp_path / "s.gguf")
    large_gguf(tmp_path / "l.gguf")
    with kiln_np.open_weights(plain_http + "s.gguf") as w:
        assert (
            w["blk.0.attn_norm.weight"].numpy().tolist() == want["blk.0.attn_norm.weight"].tolist()
        )
    status, out, err = run_main(capsys, "meta", "--json", plain_http + "s.gguf")
    assert status == 0, err
    assert {"key": "general.name", "type": "string", "value": "S"} in json.loads(out)["metadata"]
    # a directory is listed from its index page: two weight files, named
    with pytest.raises(KilnError, match=r"found 'l.gguf', 's.gguf'"):
        kiln_np.open_weights(plain_http)
    with pytest.raises(KilnError, match=r"serve it with range support"):
        kiln_np.open_weights(plain_http + "l.gguf")


@pytest.mark.parametrize("change", ["longer", "shorter"])
def test_a_whole_answer_of_another_length_is_an_error(
    tmp_path: Path, plain_http: str, change: str
) -> None:
    """Python's server sends no ETag and ignores If-Match: a file that changed since
    it was opened comes back whole at its new length, which is counted."""
    small_gguf(tmp_path / "s.gguf")
    data = (tmp_path / "s.gguf").read_bytes()
    opened = RemoteFile.open(plain_http + "s.gguf")
    (tmp_path / "s.gguf").write_bytes(data + b"\0" if change == "longer" else data[:-1])
    n = len(data)
    kind, message = {
        "longer": ("TYPE", rf"expected {n} bytes, found more: the answer to a range request"),
        "shorter": ("LENGTH", rf"expected {n} bytes, found {n - 1} \(short by 1\)"),
    }[change]
    with pytest.raises(KilnError, match=message) as caught:
        opened.read(0, n)
    assert caught.value.kind == kind


# -- fsspec's chained URLs ----------------------------------------------------------------------


def test_a_chained_url_is_a_url_and_names_its_files() -> None:
    for url in (
        "simplecache::https://h/m/a.gguf",
        "filecache::s3://b/m/",
        "blockcache::simplecache::http://h/x",
        "zip://m.safetensors::https://h/a.zip",
    ):
        assert is_url(url), url
    for path in ("simplecache::a.gguf", "a::b", "m/x::y.gguf", "C:\\m\\a.gguf"):
        assert not is_url(path), path
    assert join_url("filecache::https://h/m/a.gguf", "b.gguf") == "filecache::https://h/m/b.gguf"
    assert (
        join_url("zip://d/a.gguf::https://h/z.zip", "b.gguf") == "zip://d/b.gguf::https://h/z.zip"
    )
    assert url_name("simplecache::s3://b/m/a-00001-of-00002.gguf") == "a-00001-of-00002.gguf"


def test_a_chained_urls_timeouts_go_to_the_url_its_layers_wrap() -> None:
    fs, path = remote_filesystem("simplecache::https://h/m/a.gguf", {"kiln_np_deadline": 1})
    assert path == "https://h/m/a.gguf"
    timeout = fs.fs.client_kwargs["timeout"]
    assert (timeout.sock_connect, timeout.sock_read) == (60.0, 60.0)
    fs, _ = remote_filesystem("filecache::s3://b/x", {"s3": {"anon": True}})
    assert fs.fs.config_kwargs == {"connect_timeout": 60.0, "read_timeout": 60.0}
    assert fs.fs.anon is True
    with pytest.raises(
        KilnError, match=r"expected a URL of a protocol fsspec knows, found nope://"
    ):
        remote_filesystem("nope::https://h/x", None)


LAYERS = ["simplecache", "filecache", "blockcache"]


@pytest.mark.parametrize("mode", [None, "no-range"], ids=["ranges", "no-ranges"])
@pytest.mark.parametrize("layer", LAYERS)
def test_a_chained_url_reads_through_its_layer(
    tmp_path: Path,
    http: RangeServer,
    capsys: pytest.CaptureFixture[str],
    layer: str,
    mode: str | None,
) -> None:
    """A split GGUF, a GGUF of more than 64 KiB and a sharded safetensors
    checkpoint, each as locally, through the API and the command line; a
    server without ranges serves them too (the caches fetch whole files, and
    blockcache's first block holds each of these files)."""
    (tmp_path / "m").mkdir()
    rng = np.random.default_rng(5)
    tensors = {f"blk.{i}.w": rng.standard_normal((8, 4096), "f4") for i in range(3)}
    kiln_np.save_weights(tmp_path / "m" / "s.gguf", tensors, format="gguf", max_shard_size=140_000)
    large_gguf(tmp_path / "m" / "l.gguf")
    kiln_np.save_weights(tmp_path / "ck", tensors, format="safetensors", max_shard_size=140_000)
    http.mode = mode
    options = {layer: {"cache_storage": str(tmp_path / "cache")}}  # a cache of this test's own
    for name in ("m/s-00001-of-00003.gguf", "m/l.gguf", "ck/model.safetensors.index.json"):
        url = f"{layer}::{http.url}{name}"
        with (
            kiln_np.open_weights(url, storage_options=options) as remote,
            kiln_np.open_weights(tmp_path / name) as local,
        ):
            assert remote.path == url
            assert payloads(remote) == payloads(local)
    assert http.total > 0
    url = f"{layer}::{http.url}m/s-00001-of-00003.gguf"
    status, out, err = run_main(capsys, "stats", url)
    assert status == 0, err
    assert "blk.2.w" in out


def _read_or_refusal(url: str, options: dict[str, Any]) -> Any:
    """Tensor b's values and whether a has a nonzero, read through ``url``; or the
    KilnError that refused it."""
    try:
        with kiln_np.open_weights(url, storage_options=options) as read:
            return read["b"].numpy().tolist(), bool(read["a"].numpy().any())
    except KilnError as exc:
        return exc


def test_blockcache_over_a_server_without_ranges_is_type_naming_the_layer(
    tmp_path: Path, http: RangeServer
) -> None:
    """blockcache:: reads a file larger than its first block by ranges: a server
    that answers a range with the whole file breaks it (fsspec 2026.7 and later
    on the first block; older fsspec on a later one, or slices the whole answer
    itself): the file's own bits or TYPE naming the layer, never other bits."""
    kiln_np.save_weights(
        tmp_path / "big.gguf",
        {"a": np.zeros((3, 1 << 20), "f4"), "b": np.ones(8, "f4")},
        format="gguf",
    )
    http.mode = "no-range"
    options = {"blockcache": {"cache_storage": str(tmp_path / "cache")}}
    url = "blockcache::" + http.url + "big.gguf"
    got = _read_or_refusal(url, options)
    if isinstance(got, KilnError):
        assert got.kind == "TYPE"
        assert re.fullmatch(
            r"'blockcache::http://127.0.0.1:\d+/big.gguf': bytes \[\d+, \d+\): expected "
            r"fsspec's layers blockcache:: to read it, found them failing \(the error they "
            r"raised is this one's cause; blockcache:: reads by ranges and needs a server with "
            r"range support, simplecache:: and filecache:: fetch the whole file\)",
            got.message,
        )
    else:
        assert got == ([1.0] * 8, False)
    # simplecache:: fetches the whole file: the same server serves it
    with kiln_np.open_weights(
        "simplecache::" + http.url + "big.gguf",
        storage_options={"simplecache": {"cache_storage": str(tmp_path / "c2")}},
    ) as w:
        assert w["b"].numpy().tolist() == [1.0] * 8


def test_a_gguf_inside_a_zip_behind_a_url(tmp_path: Path, http: RangeServer) -> None:
    """``zip://member::https://...``: the archive read by ranges through zip's layer;
    a member that is not there is FileNotFoundError, an archive that is none TYPE."""
    large_gguf(tmp_path / "l.gguf")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:  # stored: the member seeks
        z.write(tmp_path / "l.gguf", "l.gguf")
    (tmp_path / "notes.bin").write_bytes(b"no archive in here")
    with (
        kiln_np.open_weights(f"zip://l.gguf::{http.url}a.zip") as remote,
        kiln_np.open_weights(tmp_path / "l.gguf") as local,
    ):
        assert payloads(remote) == payloads(local)
    with pytest.raises(FileNotFoundError, match=r"'zip://x.gguf::http://127.0.0.1:\d+/a.zip'"):
        kiln_np.open_weights(f"zip://x.gguf::{http.url}a.zip")
    with pytest.raises(
        KilnError,
        match=r"'zip://l.gguf::http://127.0.0.1:\d+/notes.bin': its layers: expected fsspec's "
        r"layers zip:: to read it, found them failing \(the error they raised is this one's "
        r"cause\)",
    ) as caught:
        kiln_np.open_weights(f"zip://l.gguf::{http.url}notes.bin")
    assert caught.value.kind == "TYPE"


def test_a_chained_url_to_a_missing_file_is_file_not_found(
    tmp_path: Path, http: RangeServer
) -> None:
    options = {"simplecache": {"cache_storage": str(tmp_path / "cache")}}
    with pytest.raises(FileNotFoundError, match=r"'simplecache::http://127.0.0.1:\d+/none.gguf'"):
        kiln_np.open_weights("simplecache::" + http.url + "none.gguf", storage_options=options)


@needs("s3fs", "moto")
def test_a_chained_url_over_s3(tmp_path: Path, s3: dict[str, Any]) -> None:
    (tmp_path / "m").mkdir()
    small_gguf(tmp_path / "m" / "s.gguf")
    large_gguf(tmp_path / "m" / "l.gguf")
    upload(s3, tmp_path / "m", "models", "chained")
    options: dict[str, Any] = {"s3": s3, "filecache": {"cache_storage": str(tmp_path / "cache")}}
    for name in ("s.gguf", "l.gguf"):
        with (
            kiln_np.open_weights(f"filecache::s3://models/chained/{name}", storage_options=options)
            as remote,
            kiln_np.open_weights(tmp_path / "m" / name) as local,
        ):  # fmt: skip
            assert payloads(remote) == payloads(local)
