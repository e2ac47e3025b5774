"""``kiln_np.gguf.read_imatrix``: the weights ``llama-quantize --imatrix`` takes
from an importance matrix, bit for bit, and hostile files refused.

The oracle is llama.cpp itself (``tests/fixtures/imatrix/make_imatrix.py``):
``llama-imatrix`` wrote the GGUF and legacy files of a tiny llama and of a tiny
mixture of experts, and ``llama-quantize`` (its ``load_imatrix`` and
``prepare_imatrix``, captured as it hands them to the quantizer) gave the
weights in ``oracle.npz`` and the outcome of every case in ``oracle.json``.
"""

from __future__ import annotations

import json
import math
import os
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import gguf_bytes, gguf_info, gguf_kv

from kiln_np import KilnError
from kiln_np._convert.plan import OptionsError
from kiln_np.gguf import Imatrix, ImatrixEntry, read_gguf, read_imatrix, save_gguf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "imatrix"
ORACLE = json.loads((FIXTURES / "oracle.json").read_text())["cases"]
WEIGHTS = np.load(FIXTURES / "oracle.npz")
DELIBERATE = {
    "count-huge": "TYPE",
    "count-nan": "TYPE",
    "count-negative": "TYPE",
    "datasets-not-strings": "TYPE",
    "dat-name-twice": "TYPE",
    "dat-ncall-negative": "TYPE",
    "dat-trailing-bytes": "LENGTH",
    "sums-ragged": "SHAPE",
}
"""Cases llama.cpp reads (into weights of 1, a dropped key, the later of two
entries, zeros, ...) and kiln_np refuses, with the kind: files llama-imatrix
does not write (the module docstring of ``kiln_np.gguf._imatrix`` says why)."""


def _u8(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, "<f4").reshape(-1).view(np.uint8)


# -- against llama.cpp ------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(ORACLE))
def test_weights_are_llama_quantizes(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    record = ORACLE[case]
    monkeypatch.chdir(FIXTURES)  # the path as llama-quantize was given it
    accepted = record["load_status"] == 0 and record["quantize_status"] == 0

    def read() -> Imatrix:
        return read_imatrix(record["file"], include=record["include"], exclude=record["exclude"])

    if not accepted:
        with pytest.raises(KilnError) as refused:
            read()
        if record["include"] and record["exclude"]:
            assert isinstance(refused.value, OptionsError)
        return
    if case in DELIBERATE:
        with pytest.raises(KilnError) as refused:
            read()
        assert refused.value.kind == DELIBERATE[case]
        assert os.path.realpath(record["file"]) in str(refused.value)
        return
    imatrix = read()
    assert list(imatrix.entries) == sorted(record["entries"])
    for name, digest in record["entries"].items():
        got = imatrix.entries[name].weights
        assert got.dtype == np.float32
        np.testing.assert_array_equal(_u8(got), _u8(WEIGHTS[digest]), err_msg=name)
    keys = {key.removeprefix("quantize.imatrix."): v["value"] for key, v in record["keys"].items()}
    if not imatrix.entries:  # llama-quantize quantizes as without --imatrix: no keys
        assert keys == {}
        return
    assert keys["file"] == imatrix.path == record["file"]
    assert keys["entries_count"] == len(imatrix.entries)
    assert keys.get("dataset") == (imatrix.datasets[0] if imatrix.datasets else None)
    assert keys.get("chunks_count") == (imatrix.chunk_count or None)


def test_the_oracle_covers_what_it_should() -> None:
    """A fixture regenerated into something weaker fails here: experts that saw
    no token, deliberate refusals llama.cpp reads, refusals both make."""
    up = ORACLE["moe.imatrix.gguf"]["entries"]["blk.0.ffn_up_exps.weight"]
    rows = WEIGHTS[up].reshape(4, 256)
    np.testing.assert_array_equal(_u8(rows[2:]), _u8(np.ones((2, 256), np.float32)))
    assert not (rows[:2] == 1).all()
    for case in DELIBERATE:
        assert ORACLE[case]["load_status"] == ORACLE[case]["quantize_status"] == 0, case
    failed = {c for c, r in ORACLE.items() if r["load_status"] or r["quantize_status"]}
    assert {"nan-in-used-expert", "inf-sum", "dat-nan", "no-chunk-size", "sums-f16"} <= failed
    assert "nan-in-unused-expert" not in failed  # its NaN became a weight of 1


def test_gguf_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)
    imatrix = read_imatrix(Path("moe.imatrix.gguf"))
    assert (imatrix.format, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size) == (
        "gguf",
        ("calibration.txt",),
        17,
        64,
    )
    assert imatrix.path == "moe.imatrix.gguf"
    assert imatrix.loaded == len(imatrix.entries) == 16
    down = imatrix.entries["blk.0.ffn_down_exps.weight"]
    assert isinstance(down, ImatrixEntry)
    assert down.weights.shape == (4, 512)
    assert down.counts == (1088, 1088, 0, 0)
    assert imatrix.entries["blk.1.ffn_up_exps.weight"].counts == (85, 1077, 48, 966)
    assert not down.weights.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        down.weights[0, 0] = 1
    with pytest.raises(TypeError):
        imatrix.entries["x"] = down  # type: ignore[index]
    assert list(imatrix.entries) == sorted(imatrix.entries)


def test_legacy_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)
    imatrix = read_imatrix("moe.imatrix.dat")
    assert (imatrix.format, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size) == (
        "dat",
        ("calibration.txt",),
        17,
        0,
    )
    down = imatrix.entries["blk.0.ffn_down_exps.weight"]
    assert down.weights.shape == (1, 4 * 512)
    assert down.counts == (17,)
    # The legacy format keeps sums / count * ncall: the same weights, to rounding.
    gguf = read_imatrix("moe.imatrix.gguf").entries["blk.0.ffn_down_exps.weight"]
    np.testing.assert_allclose(down.weights.reshape(4, 512), gguf.weights, rtol=1e-5)


def test_counts_round_half_away_from_zero() -> None:
    imatrix = read_imatrix(FIXTURES / "cases" / "counts-rounded.gguf")
    entry = imatrix.entries["blk.0.ffn_up_exps.weight"]
    assert entry.counts == (3, 0, 4, 1000001)
    np.testing.assert_array_equal(_u8(entry.weights[1]), _u8(np.ones(8, np.float32)))


def test_legacy_ncall_zero_keeps_the_values() -> None:
    values = read_imatrix(FIXTURES / "cases" / "dat-ncall-zero.dat").entries["w"]
    raw = (FIXTURES / "cases" / "dat-ncall-zero.dat").read_bytes()
    stored = np.frombuffer(raw, "<f4", 6, 4 + 4 + 1 + 8)
    np.testing.assert_array_equal(_u8(values.weights), _u8(stored))


# -- include / exclude -----------------------------------------------------------------


def test_include_exclude_are_substrings() -> None:
    path = FIXTURES / "llama.imatrix.gguf"
    every = set(read_imatrix(path).entries)
    assert set(read_imatrix(path, include="attn_v").entries) == {
        "blk.0.attn_v.weight",
        "blk.1.attn_v.weight",
    }
    assert set(read_imatrix(path, include=["blk.1.", "ffn_down"]).entries) == {
        n for n in every if "blk.1." in n or "ffn_down" in n
    }
    assert set(read_imatrix(path, exclude=("attn", "blk.0")).entries) == {
        n for n in every if "attn" not in n and "blk.0" not in n
    }
    assert set(read_imatrix(path, include="").entries) == every  # find("") is 0
    dropped = read_imatrix(path, exclude=[""])
    assert dropped.entries == {}
    assert dropped.loaded == len(every)
    assert set(read_imatrix(path, include=iter(["attn_q"])).entries) == {
        "blk.0.attn_q.weight",
        "blk.1.attn_q.weight",
    }


def test_include_with_exclude_is_refused() -> None:
    with pytest.raises(OptionsError, match="not both") as refused:
        read_imatrix(FIXTURES / "llama.imatrix.gguf", include="a", exclude="b")
    assert refused.value.usage == "--include-weights and --exclude-weights cannot be used together"


@pytest.mark.parametrize("bad", [[1], ["a", None], 7, [b"attn"]])
def test_patterns_must_be_text(bad: Any) -> None:
    with pytest.raises(KilnError, match="expected include to be a str") as refused:
        read_imatrix(FIXTURES / "llama.imatrix.gguf", include=bad)
    assert refused.value.kind == "TYPE"


def test_non_finite_only_among_entries_kept() -> None:
    path = FIXTURES / "cases" / "dat-nan.dat"
    with pytest.raises(KilnError, match=r"found nan at element 1") as refused:
        read_imatrix(path)
    assert refused.value.index == 1
    assert read_imatrix(path, exclude="w").entries == {}


# -- hostile files ----------------------------------------------------------------------


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _keys(
    datasets: bytes | None = gguf_kv(
        "imatrix.datasets", 9, struct.pack("<IQ", 8, 1) + _string(b"d")
    ),
    chunk_count: bytes | None = gguf_kv("imatrix.chunk_count", 4, struct.pack("<I", 2)),
    chunk_size: bytes | None = gguf_kv("imatrix.chunk_size", 4, struct.pack("<I", 512)),
) -> list[bytes]:
    return [kv for kv in (datasets, chunk_count, chunk_size) if kv is not None]


def _gguf_file(tmp: Path, tensors: dict[str, np.ndarray], kvs: list[bytes] | None = None) -> Path:
    """An imatrix GGUF by hand: F32 tensors (any name) at 32-byte offsets."""
    infos, data = [], b""
    for name, values in tensors.items():
        infos.append(gguf_info(name, tuple(reversed(values.shape)), 0, len(data)))
        raw = np.ascontiguousarray(values, "<f4").tobytes()
        data += raw + bytes(-len(raw) % 32)
    path = tmp / "imatrix.gguf"
    path.write_bytes(gguf_bytes(_keys() if kvs is None else kvs, infos, data))
    return path


def _pair(name: str, sums: Any, counts: Any) -> dict[str, np.ndarray]:
    return {
        f"{name}.in_sum2": np.array(sums, np.float32),
        f"{name}.counts": np.array(counts, np.float32),
    }


def _refused(path: Path, kind: str, *words: str, **options: Any) -> KilnError:
    with pytest.raises(KilnError) as refused:
        read_imatrix(path, **options)
    err = refused.value
    assert err.kind == kind, str(err)
    assert os.path.realpath(path) in str(err)
    for word in words:
        assert word in str(err)
    return err


def test_gguf_by_hand_reads(tmp_path: Path) -> None:
    path = _gguf_file(tmp_path, _pair("w", [[2, 4], [6, 8]], [[2], [1]]))
    imatrix = read_imatrix(path)
    assert imatrix.datasets == ("d",)
    assert imatrix.chunk_count == 2
    assert imatrix.entries["w"].weights.tolist() == [[1, 2], [6, 8]]


@pytest.mark.parametrize(
    ("tensors", "kind", "words"),
    [
        pytest.param(
            _pair("w", [1, 2, 3], np.zeros(0)), "SHAPE", ["found 0 counts"], id="no counts"
        ),
        pytest.param(_pair("w", [1, 2, 3], [1, 1]), "SHAPE", ["3 sums", "2 counts"], id="ragged"),
        pytest.param(_pair("w", [1, 2], [np.inf]), "TYPE", ["found inf"], id="inf count"),
        pytest.param(_pair("w", [1, 2], [-0.25]), "TYPE", ["found -0.25"], id="negative count"),
        pytest.param(
            _pair("w", [1, 2], [2.0**63]), "TYPE", ["below 2**63"], id="count past lround"
        ),
        pytest.param(
            {"w.counts": np.ones(1, np.float32)},
            "TYPE",
            ["found only 'w.counts'"],
            id="counts only",
        ),
        pytest.param(_pair("a\0b", [1], [1]), "TYPE", ["NUL"], id="NUL in name"),
        pytest.param(
            _pair("n" * 56, [1], [1]), "TYPE", ["at most 63 bytes", "found 64"], id="long name"
        ),
        pytest.param(
            _pair("w", [1, np.nan], [3]), "TYPE", ["non-finite", "found nan"], id="NaN weight"
        ),
    ],
)
def test_hostile_gguf(
    tmp_path: Path, tensors: dict[str, np.ndarray], kind: str, words: list[str]
) -> None:
    _refused(_gguf_file(tmp_path, tensors), kind, *words)


def test_a_zero_count_of_negative_zero_is_zero(tmp_path: Path) -> None:
    entry = read_imatrix(_gguf_file(tmp_path, _pair("w", [5, 7], [-0.0]))).entries["w"]
    assert entry.counts == (0,)
    assert entry.weights.tolist() == [[1, 1]]


def test_empty_rows_are_read(tmp_path: Path) -> None:
    # A sums tensor of 0 elements over one count: llama.cpp reads an empty vector.
    entry = read_imatrix(_gguf_file(tmp_path, _pair("w", np.zeros(0), [4]))).entries["w"]
    assert entry.weights.shape == (1, 0)


@pytest.mark.parametrize(
    ("kvs", "words"),
    [
        pytest.param(
            _keys(datasets=None),
            ["'imatrix.datasets'", "missing imatrix metadata"],
            id="no datasets",
        ),
        pytest.param(_keys(chunk_count=None), ["'imatrix.chunk_count'"], id="no chunk count"),
        pytest.param(_keys(chunk_size=None), ["'imatrix.chunk_size'"], id="no chunk size"),
        pytest.param(
            _keys(datasets=gguf_kv("imatrix.datasets", 8, _string(b"d"))),
            ["expected GGUF type array[string], found string"],
            id="datasets a string",
        ),
        pytest.param(
            _keys(chunk_count=gguf_kv("imatrix.chunk_count", 10, struct.pack("<Q", 2))),
            ["(GGUF uint64)"],
            id="chunk count uint64",
        ),
        pytest.param(
            _keys(chunk_size=gguf_kv("imatrix.chunk_size", 4, struct.pack("<I", 2**31))),
            ["at most 2**31-1", "2147483648"],
            id="chunk size past int32",
        ),
    ],
)
def test_hostile_gguf_keys(tmp_path: Path, kvs: list[bytes], words: list[str]) -> None:
    _refused(_gguf_file(tmp_path, _pair("w", [1], [1]), kvs), "TYPE", *words)


def test_gguf_without_tensors(tmp_path: Path) -> None:
    _refused(_gguf_file(tmp_path, {}), "TYPE", "at least one tensor")


def test_gguf_other_tensors_only(tmp_path: Path) -> None:
    imatrix = read_imatrix(_gguf_file(tmp_path, {"token_embd.weight": np.ones(2, np.float32)}))
    assert imatrix.entries == {}
    assert imatrix.loaded == 0


def test_dataset_cut_at_nul(tmp_path: Path) -> None:
    kv = gguf_kv("imatrix.datasets", 9, struct.pack("<IQ", 8, 2) + _string(b"a\0b") + _string(b""))
    imatrix = read_imatrix(_gguf_file(tmp_path, _pair("w", [1], [1]), _keys(datasets=kv)))
    assert imatrix.datasets == ("a", "")


def _dat(entries: list[tuple[bytes, int, int, bytes]], n: int | None = None) -> bytes:
    """A legacy file's entries by hand: (name, ncall, nval, value bytes)."""
    out = struct.pack("<i", len(entries) if n is None else n)
    for name, ncall, nval, values in entries:
        out += struct.pack("<i", len(name)) + name + struct.pack("<ii", ncall, nval) + values
    return out


_ONE = _dat([(b"w", 2, 2, np.array([4, 6], "<f4").tobytes())])
_TRAILER = struct.pack("<ii", 5, 3) + b"d.t"


@pytest.mark.parametrize(
    ("data", "kind", "words"),
    [
        pytest.param(b"", "LENGTH", ["entry count at byte 0", "holds 0"], id="empty"),
        pytest.param(b"\x01\x00", "LENGTH", ["entry count"], id="2 bytes"),
        pytest.param(
            _dat([]), "TYPE", ["entry count: expected at least 1, found 0"], id="no entry"
        ),
        pytest.param(_dat([], n=-1), "TYPE", ["found -1"], id="negative entries"),
        pytest.param(
            _dat([], n=2**31 - 1) + bytes(12),
            "LENGTH",
            ["2147483647 entries"],
            id="entries past the file",
        ),
        pytest.param(
            struct.pack("<ii", 1, -5) + bytes(12),
            "TYPE",
            ["name length: expected at least 0, found -5"],
            id="negative name length",
        ),
        pytest.param(
            struct.pack("<ii", 1, 2**31 - 1) + bytes(12),
            "LENGTH",
            ["name of 2147483647 bytes"],
            id="name past the file",
        ),
        pytest.param(_dat([(b"a\0b", 1, 1, bytes(4))]), "TYPE", ["NUL"], id="NUL in name"),
        pytest.param(
            _dat([(b"w", 1, 0, bytes(4))]),
            "TYPE",
            ["value count: expected at least 1, found 0"],
            id="no values",
        ),
        pytest.param(
            _dat([(b"w", 1, 2**31 - 1, bytes(4))]),
            "LENGTH",
            ["2147483647 float32 values"],
            id="values past the file",
        ),
        pytest.param(
            _dat([(b"w", 1, 2, bytes(4))]),
            "LENGTH",
            ["2 float32 values", "short by 4"],
            id="values cut",
        ),
        pytest.param(_ONE + b"\x05\x00", "LENGTH", ["chunk count"], id="chunk count cut"),
        pytest.param(
            _ONE + struct.pack("<i", -1),
            "TYPE",
            ["chunk count: expected at least 0, found -1"],
            id="negative chunks",
        ),
        pytest.param(
            _ONE + struct.pack("<i", 5) + b"\x03",
            "LENGTH",
            ["dataset length"],
            id="dataset length cut",
        ),
        pytest.param(
            _ONE + struct.pack("<ii", 5, -3),
            "TYPE",
            ["dataset length: expected at least 0"],
            id="negative dataset length",
        ),
        pytest.param(
            _ONE + struct.pack("<ii", 5, 9) + b"d.t",
            "LENGTH",
            ["dataset of 9 bytes"],
            id="dataset cut",
        ),
        pytest.param(
            _ONE + _TRAILER + b"\x00", "LENGTH", ["found 1 more byte"], id="trailing byte"
        ),
        pytest.param(
            _ONE + struct.pack("<ii", 5, 0) + b"x",
            "LENGTH",
            ["found 1 more byte"],
            id="after an empty dataset",
        ),
    ],
)
def test_hostile_legacy(tmp_path: Path, data: bytes, kind: str, words: list[str]) -> None:
    path = tmp_path / "imatrix.dat"
    path.write_bytes(data)
    _refused(path, kind, *words)


@pytest.mark.parametrize(
    ("trailer", "chunks", "datasets"),
    [
        (b"", 0, ()),
        (struct.pack("<i", 5), 5, ()),
        (struct.pack("<ii", 5, 0), 5, ()),
        (_TRAILER, 5, ("d.t",)),
    ],
)
def test_legacy_trailers(
    tmp_path: Path, trailer: bytes, chunks: int, datasets: tuple[str, ...]
) -> None:
    path = tmp_path / "imatrix.dat"
    path.write_bytes(_ONE + trailer)
    imatrix = read_imatrix(path)
    assert (imatrix.chunk_count, imatrix.datasets, imatrix.chunk_size) == (chunks, datasets, 0)
    assert imatrix.entries["w"].weights.tolist() == [[2, 3]]


@pytest.mark.parametrize(
    "name", ["cases/dat-plain.dat", "cases/counts-rounded.gguf", "llama.imatrix.dat"]
)
def test_every_cut_reads_or_is_refused(tmp_path: Path, name: str) -> None:
    """Prefixes of a good file are refused with a KilnError, except where a legacy
    file may end (after its entries, after its chunk count).  Every prefix of the
    small files; of llama-imatrix's, every 101st and those of its last 64 bytes."""
    data = (FIXTURES / name).read_bytes()
    cuts = set(range(len(data))) if len(data) < 1000 else set(range(0, len(data), 101))
    cuts |= set(range(max(len(data) - 64, 0), len(data)))
    path = tmp_path / Path(name).name
    read = set()
    for n in sorted(cuts):
        path.write_bytes(data[:n])
        try:
            read_imatrix(path)
        except KilnError:
            continue
        read.add(len(data) - n)
    if name.endswith(".dat"):
        dataset = len(data) - data.rindex(b"cases.txt" if "cases" in name else b"calibration.txt")
        assert read == {dataset + 8, dataset + 4}  # no trailer; the chunk count alone
    else:  # only the padding after the last tensor's data may go
        ends = [t.offset + t.info.byte_length for t in read_gguf(FIXTURES / name).tensors]
        assert read == set(range(1, len(data) - max(ends) + 1))


def test_no_allocation_from_claimed_counts(tmp_path: Path) -> None:
    path = tmp_path / "imatrix.dat"
    path.write_bytes(_dat([(b"w", 1, 2**31 - 1, bytes(64))]))
    tracemalloc.start()
    try:
        with pytest.raises(KilnError):
            read_imatrix(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match="regular file"):
        read_imatrix(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_imatrix(tmp_path / "absent.gguf")


def test_save_gguf_writes_what_read_imatrix_reads(tmp_path: Path) -> None:
    """An imatrix written by kiln_np's own writer (the docstring's example) reads the same
    as one written by hand."""
    path = tmp_path / "i.gguf"
    sums = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_gguf(
        path,
        {"w.in_sum2": sums, "w.counts": np.array([[1], [2], [3]], np.float32)},
        {
            "imatrix.datasets": ["a", "b"],
            "imatrix.chunk_count": np.uint32(3),
            "imatrix.chunk_size": np.uint32(512),
        },
    )
    entry = read_imatrix(path).entries["w"]
    expected = sums / np.array([[1], [2], [3]], np.float32)
    np.testing.assert_array_equal(_u8(entry.weights), _u8(expected))
    assert math.prod(entry.weights.shape) == 12
