"""GGUF over HTTP and S3 (issue 43), on servers on the loopback only.

A GGUF file or split set behind a URL is read by the code that reads a local one,
over its header read in growing ranges: ``ls`` and ``meta`` of a 4 GiB file whose
metadata holds a 150,000-token tokenizer read at most the header plus 64 KiB
(counted by the server); a tensor reads exactly its range; every command that
takes a URL (ls, meta, stats, diff, convert) gives what it gives for the local
copy; a hostile header is the local error, and a hostile server (answers short,
long, off by one, whole, trickling, of a file replaced since it was opened) the
error the remote rules give.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import gguf_facts, gguf_with_tokenizer, needs, run_main
from _remote_server import RangeServer, upload

import kiln_np
import kiln_np.gguf as kg
from kiln_np import KilnError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "formats"))
from test_gguf import HOSTILE

pytestmark = [
    needs("fsspec", "aiohttp"),
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

SLACK = 1 << 16  # the issue's bound: the header plus 64 KiB


def model(directory: Path, *, split: int | None = None, name: str = "m.gguf") -> Path:
    """A small llama-like GGUF (F32, F16 and Q8_0 tensors, a tokenizer; 160 KB), as
    one file or split every ``split`` bytes (each split then under 64 KiB, so read
    whole); returns the (first) file."""
    rng = np.random.default_rng(43)
    tensors: dict[str, np.ndarray] = {"token_embd.weight": rng.standard_normal((64, 128), "f4")}
    for i in range(3):
        tensors[f"blk.{i}.attn_q.weight"] = rng.standard_normal((128, 128), "f4")
        tensors[f"blk.{i}.ffn_up.weight"] = rng.standard_normal((96, 128)).astype("f2")
        tensors[f"blk.{i}.attn_norm.weight"] = np.ones(128, "f4")
    metadata = {
        "general.architecture": "llama",
        "general.name": "Remote",
        "llama.block_count": np.uint32(3),
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(64)],
    }
    directory.mkdir(exist_ok=True)
    kiln_np.save_weights(
        directory / name,
        tensors,
        format="gguf",
        metadata=metadata,
        quantize="*attn_q*=q8_0",
        max_shard_size=split,
    )
    files = sorted(directory.glob(name.replace(".gguf", "*.gguf")))
    return files[0]


def same_weights(remote: kiln_np.Weights, local: kiln_np.Weights) -> None:
    assert remote.format == local.format == "gguf"
    assert list(remote) == list(local)
    got, want = remote.metadata, local.metadata
    assert isinstance(got, kg.GGUFMetadata)
    assert isinstance(want, kg.GGUFMetadata)
    assert dict(got.types) == dict(want.types)
    assert got.head("tokenizer.ggml.tokens", 3) == want.head("tokenizer.ggml.tokens", 3)
    assert remote.file_type == local.file_type
    for name, t in local.items():
        r = remote[name]
        assert (r.format_dtype, r.shape, r.code, r.offset) == (
            t.format_dtype,
            t.shape,
            t.code,
            t.offset,
        )
        assert bytes(r.payload().data) == bytes(t.payload().data), name


# -- the same listing and tensors as the local copy ----------------------------------------


@pytest.mark.parametrize("form", ["file", "split", "directory", "split directory"])
def test_gguf_over_http_is_the_local_gguf(tmp_path: Path, http: RangeServer, form: str) -> None:
    split = 40_000 if "split" in form else None
    first = model(tmp_path / "m", split=split)
    assert len(list((tmp_path / "m").iterdir())) == (1 if split is None else 7)
    url = http.url + "m/" + ("" if "directory" in form else first.name)
    with kiln_np.open_weights(url) as remote, kiln_np.open_weights(first) as local:
        assert remote.path == http.url + "m/" + first.name
        same_weights(remote, local)
        where = os.path.basename(local["blk.2.attn_q.weight"].path or "")
        assert remote["blk.2.attn_q.weight"].path == http.url + "m/" + where
    # read_gguf and open_gguf take the URL too; the files read are the URLs
    got = kg.read_gguf(http.url + "m/" + first.name)
    want = kg.read_gguf(first)
    assert [p.replace(http.url + "m/", "") for p in got.paths] == [
        os.path.basename(p) for p in want.paths
    ]
    assert [t._replace(path="") for t in got.tensors] == [t._replace(path="") for t in want.tensors]


@needs("s3fs", "moto")
@pytest.mark.parametrize("split", [None, 40_000], ids=["file", "split"])
def test_gguf_over_s3_is_the_local_gguf(
    tmp_path: Path, s3: dict[str, Any], split: int | None
) -> None:
    first = model(tmp_path / "m", split=split)
    prefix = f"s3://models/{first.stem}"  # moto's buckets outlive its server: one per case
    upload(s3, tmp_path / "m", "models", first.stem)
    with kiln_np.open_weights(first) as local:
        for url in (f"{prefix}/{first.name}", prefix, f"{prefix}/"):
            with kiln_np.open_weights(url, storage_options=s3) as remote:
                same_weights(remote, local)
                assert remote.path == f"{prefix}/{first.name}"
        with kg.open_gguf(f"{prefix}/{first.name}", storage_options=s3) as remote:
            same_weights(remote, local)


def test_a_tensor_reads_exactly_its_range(tmp_path: Path, http: RangeServer) -> None:
    first = model(tmp_path)
    with kiln_np.open_weights(http.url + first.name) as w:
        t = w["blk.1.ffn_up.weight"]
        http.reset()
        t.numpy()
        rng = f"bytes={t.offset}-{t.offset + t.byte_length - 1}"
        assert http.requests == [("GET", "/" + os.path.basename(t.path or ""), rng)]
        assert http.total == t.byte_length == 96 * 128 * 2


def test_remote_gguf_weights_and_tensors_pickle(tmp_path: Path, http: RangeServer) -> None:
    first = model(tmp_path, split=40_000)
    with kiln_np.open_weights(http.url + first.name) as w, kiln_np.open_weights(first) as local:
        again = pickle.loads(pickle.dumps(w))
        t = pickle.loads(pickle.dumps(w["blk.0.attn_q.weight"]))
        assert bytes(t.payload().data) == bytes(local["blk.0.attn_q.weight"].payload().data)
        same_weights(again, local)
        again.close()


# -- the bytes read for ls and meta -----------------------------------------------------------


def test_ls_and_meta_of_a_4_gib_gguf_read_its_header_plus_at_most_64_kib(
    tmp_path: Path, http: RangeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 4 GiB file (sparse) whose metadata is a 150,000-token tokenizer (a 2.7 MB
    header): the server sends the header and at most 64 KiB more, in a few
    requests, whatever the metadata's size; never a byte of the tensor."""
    header = gguf_with_tokenizer(tmp_path / "big.gguf", tokens=150_000, data_bytes=4 << 30)
    size = (tmp_path / "big.gguf").stat().st_size
    assert header > 2_500_000
    assert size == header + (4 << 30)
    url = http.url + "big.gguf"
    for argv in (["ls", url], ["meta", url], ["ls", "--json", url], ["meta", "--json", url]):
        http.reset()
        status, out, err = run_main(capsys, *argv)
        assert status == 0, err
        assert header <= http.total <= header + SLACK, (argv, http.total - header)
        gets = [r for r in http.requests if r[0] == "GET"]
        assert len(gets) <= 12, gets
        assert all(int(str(r[2]).split("-")[1]) < header + SLACK for r in gets)
        assert "token_embd.weight" in out or "tokenizer.ggml.tokens" in out
    http.reset()
    with kiln_np.open_weights(url) as w:
        assert w["token_embd.weight"].byte_length == 4 << 30
        meta = w.metadata
        assert isinstance(meta, kg.GGUFMetadata)
        assert meta.head("tokenizer.ggml.tokens", 2) == (150_000, ["tok0", "tok1_"])
        assert meta["tokenizer.ggml.scores"][-1] == 149_999
    assert header <= http.total <= header + SLACK
    # a small header: one request of 64 KiB, or of the file when it is smaller
    kiln_np.save_weights(tmp_path / "s.gguf", {"w": np.ones(8, "f4")}, format="gguf")
    http.reset()
    kiln_np.open_weights(http.url + "s.gguf").close()
    small = (tmp_path / "s.gguf").stat().st_size
    assert [r[2] for r in http.requests if r[0] == "GET"] == [f"bytes=0-{small - 1}"]


def test_a_hostile_header_claiming_a_huge_count_reads_little(
    tmp_path: Path, http: RangeServer
) -> None:
    """100 million key/values claimed in a 4 GiB file (so the count passes the
    size check) that holds two: the second duplicates the first; what is read
    stays near what was parsed, never the claim."""
    head = b"GGUF" + (3).to_bytes(4, "little") + bytes(8) + (10**8).to_bytes(8, "little")
    with open(tmp_path / "h.gguf", "wb") as f:
        f.write(head)
        f.truncate(4 << 30)
    with pytest.raises(KilnError, match=r"key '': expected unique keys, found it twice"):
        kiln_np.open_weights(http.url + "h.gguf")
    assert http.total == SLACK


# -- every command that takes a URL -------------------------------------------------------------


def json_of(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> Any:
    got, out, err = run_main(capsys, *argv)
    assert got == status, (argv, err)
    return json.loads(out)


def without(value: Any, *texts: str) -> str:
    """``value`` as JSON with each of ``texts`` taken out (the paths and URLs)."""
    shown = json.dumps(value, sort_keys=True)
    for text in texts:
        shown = shown.replace(text, "")
    return shown


@pytest.mark.parametrize("split", [None, 40_000], ids=["file", "split"])
def test_commands_read_a_remote_gguf_as_the_local_one(
    tmp_path: Path, http: RangeServer, capsys: pytest.CaptureFixture[str], split: int | None
) -> None:
    first = model(tmp_path / "m", split=split)
    url, local = http.url + "m/" + first.name, str(first)
    strip = (http.url + "m/", str(tmp_path / "m") + "/")
    for command in (["ls"], ["meta"], ["stats"], ["stats", "--parts"]):
        remote_out = json_of(capsys, *command, "--json", url)
        local_out = json_of(capsys, *command, "--json", local)
        assert without(remote_out, *strip) == without(local_out, *strip), command
    same = json_of(capsys, "diff", "--json", url, local)
    assert same["equal"] is True
    # convert: a GGUF copy, a dequantized safetensors file and a requantization, each
    # byte for byte the local source's
    for dst, extra in (
        ("copy.gguf", []),
        ("deq.safetensors", ["--dequantize", "f32"]),
        ("q8.gguf", ["--quantize", "*=q8_0"]),
    ):
        for source, out in ((url, "remote"), (local, "local")):
            (tmp_path / out).mkdir(exist_ok=True)
            status, _, err = run_main(capsys, "convert", source, str(tmp_path / out / dst), *extra)
            assert status == 0, err
        want = (tmp_path / "local" / dst).read_bytes()
        assert (tmp_path / "remote" / dst).read_bytes() == want, dst
    # and the diff of two remote files that differ
    data = bytearray(first.read_bytes())
    data[-1] ^= 0x01
    (tmp_path / "m2").mkdir()
    for p in (tmp_path / "m").iterdir():
        (tmp_path / "m2" / p.name).write_bytes(data if p == first else p.read_bytes())
    differ = json_of(capsys, "diff", "--json", url, http.url + "m2/" + first.name, status=1)
    assert differ["equal"] is False


def test_the_python_api_reads_a_remote_gguf_as_the_local_one(
    tmp_path: Path, http: RangeServer
) -> None:
    first = model(tmp_path / "m", split=40_000)
    url = http.url + "m/" + first.name
    with kiln_np.open_weights(url) as rw, kiln_np.open_weights(first) as lw:
        remote, local = kiln_np.describe(rw).to_json(), kiln_np.describe(lw).to_json()
    assert json.dumps(remote["tensors"], sort_keys=True) == json.dumps(
        local["tensors"], sort_keys=True
    )
    assert kiln_np.compare(url, first).equal
    with kiln_np.open_weights(url) as w:
        kiln_np.save_weights(tmp_path / "api.gguf", w, format="gguf", metadata=w.metadata)
    with kiln_np.open_weights(first) as w:
        kiln_np.save_weights(tmp_path / "loc.gguf", w, format="gguf", metadata=w.metadata)
    assert (tmp_path / "api.gguf").read_bytes() == (tmp_path / "loc.gguf").read_bytes()


# -- hostile files and servers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "kind", "match"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE]
)
def test_a_hostile_header_over_http_is_the_local_error(
    tmp_path: Path, http: RangeServer, data: bytes, kind: str, match: str
) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(KilnError, match=match) as local:
        kg.read_gguf(path)
    url = http.url + "bad.gguf"
    with pytest.raises(KilnError) as remote:
        kg.read_gguf(url)
    assert remote.value.kind == local.value.kind == kind
    assert str(remote.value) == str(local.value).replace(repr(str(path)), repr(url))
    assert http.total <= len(data)


@pytest.mark.parametrize("slack", [1, 13, 4096])
def test_every_cut_of_a_header_read_in_growing_ranges_is_the_local_result(
    tmp_path: Path, slack: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges of ``slack`` bytes past what is needed (the reader's 64 KiB made
    small, so the buffer grows hundreds of times): the file cut at every 29th byte
    of its header, and whole, reads as it does locally, result or error."""
    import fsspec

    monkeypatch.setattr(kg._reader, "HEADER_SLACK", slack)
    data = model(tmp_path / "m").read_bytes()
    end = kg.read_gguf(tmp_path / "m" / "m.gguf").tensors[0].offset
    memory = fsspec.filesystem("memory")
    url = "memory://kiln-remote-gguf/cut.gguf"
    for n in [*range(0, end + 64, 29), len(data)]:
        (tmp_path / "cut.gguf").write_bytes(data[:n])
        memory.pipe_file(url, data[:n])
        want = gguf_facts(lambda: kg.read_gguf(tmp_path / "cut.gguf"), str(tmp_path / "cut.gguf"))
        assert gguf_facts(lambda: kg.read_gguf(url), url) == want, n
    memory.rm(url)


def test_a_split_missing_over_http_is_file_not_found(tmp_path: Path, http: RangeServer) -> None:
    first = model(tmp_path, split=40_000)
    os.remove(tmp_path / first.name.replace("00001-of", "00003-of"))
    with pytest.raises(FileNotFoundError, match=re.escape(http.url) + "m-00003-of-00007.gguf"):
        kiln_np.open_weights(http.url + first.name)
    with pytest.raises(KilnError, match=r"expected the first of 7 splits"):
        kiln_np.open_weights(http.url + first.name.replace("00001-of", "00002-of"))


def server_error(mode: str, offset: int, n: int, size: int) -> tuple[str, str]:
    """The kind and message of a read of ``n`` bytes at ``offset`` of a file of
    ``size`` bytes from a server misbehaving as ``mode`` says."""
    at = rf"bytes \[{offset}, {offset + n}\): "
    return {
        "short": ("LENGTH", rf"{at}expected {n} bytes, found {n - 1} \(short by 1\)"),
        "long": ("TYPE", rf"{at}expected {n} bytes, found more: the answer to a range request"),
        "wrong-range": (
            "TYPE",
            rf"{at}expected Content-Range 'bytes {offset}-{offset + n - 1}/{size}', found "
            rf"'bytes {offset + 1}-{offset + n}/{size}'",
        ),
        "no-range": (
            "TYPE",
            rf"{at}expected 206 Partial Content to a range request, found 200 OK: the server "
            rf"sends the whole file \({size} bytes\) for a part of it, so it cannot be read "
            r"remotely; download the file and open it locally, or serve it with range support",
        ),
    }[mode]


@pytest.mark.parametrize("when", ["header", "tensor"])
@pytest.mark.parametrize("mode", ["long", "no-range", "short", "wrong-range"])
def test_a_misbehaving_server_is_a_kiln_error(
    tmp_path: Path, http: RangeServer, mode: str, when: str
) -> None:
    first = model(tmp_path)  # larger than 64 KiB: its header is read in part
    size = first.stat().st_size
    assert size > SLACK
    url = http.url + first.name
    if when == "header":
        kind, message = server_error(mode, 0, SLACK, size)
        http.mode = mode
        with pytest.raises(KilnError, match=re.escape(repr(url)) + ": " + message) as caught:
            kiln_np.open_weights(url)
    else:
        with kiln_np.open_weights(url) as w:
            t = w["blk.2.ffn_up.weight"]
            kind, message = server_error(mode, t.offset, t.byte_length, size)
            http.mode = mode
            with pytest.raises(KilnError, match=re.escape(repr(url)) + ": " + message) as caught:
                t.numpy()
            # the writers' reads too, naming the tensor; nothing is left behind
            with pytest.raises(KilnError, match="tensor 'blk.2.ffn_up.weight': .*" + message):
                kiln_np.save_weights(tmp_path / "o.gguf", w.select(t.name), format="gguf")
            assert not (tmp_path / "o.gguf").exists()
    assert caught.value.kind == kind


def test_a_file_replaced_since_it_was_opened_is_type(tmp_path: Path, http: RangeServer) -> None:
    first = model(tmp_path)
    for mode, why in ((None, "412 Precondition Failed"), ("ignore-if-match", "ignored If-Match")):
        http.mode = mode
        with kiln_np.open_weights(http.url + first.name) as w:
            t = w["blk.0.attn_q.weight"]
            path = tmp_path / os.path.basename(t.path or "")
            data = bytearray(path.read_bytes())
            data[t.offset] ^= 1
            os.remove(path)
            path.write_bytes(data)  # another file: its ETag changed
            with pytest.raises(
                KilnError,
                match=r"expected the file that was opened, found another version .*" + why,
            ) as caught:
                t.numpy()
            assert caught.value.kind == "TYPE"


def test_a_small_file_read_whole_is_kept_and_read_from_its_bytes(
    tmp_path: Path, http: RangeServer
) -> None:
    """A file of at most 64 KiB is read whole with its header: its tensors come from
    those bytes, with no request, and so are those of the version that was opened."""
    first = model(tmp_path, split=40_000)
    with kiln_np.open_weights(first) as local:
        want = {n: bytes(t.payload().data) for n, t in local.items()}
    with kiln_np.open_weights(http.url + first.name) as w:
        gets = [r for r in http.requests if r[0] == "GET"]
        assert len(gets) == 7
        assert [r[2] for r in gets] == [
            f"bytes=0-{(tmp_path / r[1].lstrip('/')).stat().st_size - 1}" for r in gets
        ]
        for path in tmp_path.glob("m-*.gguf"):
            path.write_bytes(b"\0" * path.stat().st_size)  # what a later request would see
        http.reset()
        assert {n: bytes(t.payload().data) for n, t in w.items()} == want
        assert http.requests == []


def test_a_trickling_server_times_out_reading_a_gguf(tmp_path: Path, http: RangeServer) -> None:
    first = model(tmp_path)
    quick = {"kiln_np_deadline": 0.5}
    http.mode = "trickle"
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"bytes \[0, 65536\): expected the answer within 1.0 s"):
        kiln_np.open_weights(http.url + first.name, storage_options=quick)
    http.mode = None
    with kiln_np.open_weights(http.url + first.name, storage_options=quick) as w:
        http.mode = "trickle"
        with pytest.raises(TimeoutError, match=re.escape(repr(http.url + first.name))):
            w["blk.0.attn_q.weight"].numpy()
    assert time.monotonic() - start < 10
