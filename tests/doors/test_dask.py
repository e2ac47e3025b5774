"""kiln_np.dask: payload files and weight tensors as dask arrays, read and written
chunk by chunk."""

# dask ships only partial annotations.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import (
    Code,
    KilnError,
    Layout,
    Payload,
    PayloadInfo,
    from_numpy,
    open_payload,
    save_payload,
)

pytest.importorskip("dask", reason="needs dask (the dask extra), which is not installed")
pytest.importorskip(
    "distributed", reason="needs distributed (the dask extra), which is not installed"
)
import dask
import dask.array as da
from distributed import Client, LocalCluster

from kiln_np.dask import from_payload, from_weights, to_payload  # imports dask


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def u4(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.uint8).view(ml_dtypes.uint4)


@pytest.fixture
def threads() -> Iterator[None]:
    with dask.config.set(scheduler="threads"):
        yield


def test_import_kiln_np_does_not_import_dask() -> None:
    code = "import sys, kiln_np; print(sorted(m for m in sys.modules if m.split('.')[0] == 'dask'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.usefixtures("threads")
def test_from_payload_sum_matches_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    f32 = rng.standard_normal((301, 7)).astype("<f4")
    path = tmp_path / "f32.bin"
    save_payload(path, f32)
    x = from_payload(path, Code.F32, (301, 7), chunks=(50, 7))
    assert (x.shape, x.dtype, x.npartitions) == ((301, 7), np.dtype("<f4"), 7)
    assert x.sum().compute() == pytest.approx(float(f32.sum(dtype=np.float64)), rel=1e-5)
    assert bits(x.compute()) == bits(f32)
    split = from_payload(path, Code.F32, (301, 7), chunks=(100, 3))  # trailing axis split too
    assert bits(split.compute()) == bits(f32)

    nibbles = u4(rng.integers(0, 16, (301, 7)))  # odd rows: chunks start on odd nibbles
    path = tmp_path / "u4.bin"
    save_payload(path, nibbles)
    y = from_payload(path, Code.U4, (301, 7), chunks=(33, 7))
    assert int(y.astype(np.int64).sum().compute()) == int(nibbles.astype(np.int64).sum())
    assert bits(y.compute()) == bits(nibbles)
    assert bits(y[17:200:3].compute()) == bits(nibbles[17:200:3])


@pytest.mark.usefixtures("threads")
def test_from_payload_default_chunks_keep_rows_whole(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    save_payload(path, np.ones((5, 4, 3), bool))
    x = from_payload(path, Code.BOOL, (5, 4, 3), offset=0)
    assert x.chunks[1:] == ((4,), (3,))
    assert int(x.sum().compute()) == 60
    scalar = tmp_path / "s.bin"
    save_payload(scalar, np.array(2.5, "<f8"))
    assert from_payload(scalar, Code.F64, ()).compute() == 2.5


@pytest.mark.usefixtures("threads")
def test_from_payload_checks_length_now_and_bytes_when_computed(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    raw = np.zeros(40, np.uint8)
    raw[33] = 7
    raw.tofile(path)
    with pytest.raises(KilnError, match="short by 1") as info:
        from_payload(path, Code.BOOL, (41,))
    assert info.value.kind == "LENGTH"
    x = from_payload(path, Code.BOOL, (40,), chunks=10)
    assert not x[:30].any().compute()
    with pytest.raises(KilnError, match="found 0x07 at element 33 of the payload") as info:
        x.sum().compute()
    assert (info.value.kind, info.value.index) == ("TYPE", 33)


@pytest.mark.usefixtures("threads")
@pytest.mark.parametrize(
    ("dtype", "shape", "chunks"),
    [
        ("<f4", (40, 6), (7, 4)),  # trailing axis split: rechunked whole
        (ml_dtypes.uint4, (37, 5), (5, 5)),  # odd rows, odd chunks: moved to even rows
        (ml_dtypes.int4, (31,), 7),
        (ml_dtypes.bfloat16, (9, 2, 3), (4, 1, 3)),
        (bool, (10,), 3),
    ],
    ids=["f32", "u4-odd", "i4-1d", "bf16-3d", "bool"],
)
def test_to_payload_round_trips_byte_identical(
    tmp_path: Path, dtype: Any, shape: tuple[int, ...], chunks: object
) -> None:
    rng = np.random.default_rng(5)
    width = np.dtype(dtype).itemsize
    top = 2 if dtype is bool else 16 if width == 1 else 256
    arr = rng.integers(0, top, (*shape, width), np.uint8).view(dtype).reshape(shape)
    path = tmp_path / "out.bin"
    info = to_payload(da.from_array(arr, chunks=chunks), path)
    wire = bytes(from_numpy(arr).data)
    assert (info, info.byte_length) == (PayloadInfo(from_numpy(arr).code, shape), len(wire))
    assert path.read_bytes() == wire
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


@pytest.mark.usefixtures("threads")
def test_to_payload_at_an_offset_keeps_the_prefix(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(b"HEAD")
    info = to_payload(da.arange(5, dtype="<u2", chunks=2), path, offset=4)
    assert (info, info.byte_length) == (PayloadInfo(Code.U16, (5,), offset=4), 10)
    assert path.read_bytes() == b"HEAD" + bytes(from_numpy(np.arange(5, dtype="<u2")).data)
    assert np.asarray(open_payload(path, Code.U16, (5,), offset=4)).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.usefixtures("threads")
def test_to_payload_errors_leave_no_file(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    values = np.zeros(20, np.uint8)
    values[13] = 0x30
    with pytest.raises(KilnError, match="found 0x30 at element 13 of the payload") as info:
        to_payload(da.from_array(values.view(ml_dtypes.uint4), chunks=6), path)
    assert (info.value.kind, info.value.index) == ("TYPE", 13)
    with pytest.raises(KilnError, match="has no Kiln code") as info:
        to_payload(da.zeros(3, dtype=np.complex64), path)
    assert info.value.kind == "TYPE"
    x = da.arange(10, dtype="<i4", chunks=3)
    with pytest.raises(KilnError, match="unknown chunk sizes") as info:
        to_payload(x[x > 4], path)
    assert info.value.kind == "SHAPE"
    assert list(tmp_path.iterdir()) == []


def test_local_cluster_with_processes(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    nibbles = u4(rng.integers(0, 16, (63, 5)))
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    save_payload(src, nibbles)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        x = from_payload(src, Code.U4, (63, 5), chunks=(9, 5))
        assert int(x.astype(np.int64).sum().compute()) == int(nibbles.astype(np.int64).sum())
        info = to_payload(x, dst)
    assert (info, info.byte_length) == (PayloadInfo(Code.U4, (63, 5)), 158)
    assert dst.read_bytes() == src.read_bytes()


@pytest.mark.parametrize(
    "chunks", [0, (0,), ((2, 2),), "lots", 1.5], ids=["0", "(0,)", "not-adding-up", "str", "float"]
)
def test_from_payload_chunks_dask_cannot_use_are_shape(tmp_path: Path, chunks: object) -> None:
    path = tmp_path / "u8.bin"
    path.write_bytes(bytes(5))
    with pytest.raises(KilnError, match="expected dask chunks for the decoded shape") as info:
        from_payload(path, Code.U8, (5,), chunks=chunks)
    assert info.value.kind == "SHAPE"


def test_from_payload_opaque_rank_64_is_shape(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    path.write_bytes(b"\x01")
    with pytest.raises(KilnError, match="at most 63 dimensions") as info:
        from_payload(path, 4100, (1,) * 64, layout=Layout("q", 1))
    assert info.value.kind == "SHAPE"
    x = from_payload(path, 4100, (1,) * 31, layout=Layout("q", 1))  # numpy 1.x: 32-D at most
    assert x.compute(scheduler="sync").shape == (1,) * 32


class _FsPath:
    def __fspath__(self) -> str:
        raise RuntimeError("no path")


def test_paths_whose_fspath_raises_are_type() -> None:
    for call in (
        lambda: from_payload(_FsPath(), Code.U8, (1,)),
        lambda: to_payload(da.zeros(2, dtype=np.uint8), _FsPath()),
    ):
        with pytest.raises(KilnError, match="__fspath__ raised") as info:
            call()
        assert info.value.kind == "TYPE"


@pytest.mark.usefixtures("threads")
def test_to_payload_replaces_as_save_payload_does(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "t.bin"
    target.write_bytes(b"old")
    target.chmod(0o640)
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    info = to_payload(da.arange(4, dtype="<u2", chunks=3), link)
    assert (info.byte_length, link.is_symlink()) == (8, True)
    assert target.read_bytes() == bytes(from_numpy(np.arange(4, dtype="<u2")).data)
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["t.bin"]
    missing = str(tmp_path / "missing" / "out.bin")
    with pytest.raises(FileNotFoundError, match="missing") as err:
        to_payload(da.arange(4, dtype="<u2", chunks=3), missing)
    assert err.value.filename == missing


def test_public_names_live_in_kiln_np_dask() -> None:
    assert from_payload.__module__ == to_payload.__module__ == "kiln_np.dask"


def _kinds(tmp_path: Path) -> kiln_np.Weights:
    """A Kiln directory of one tensor of each kind ``from_weights`` reads."""
    rng = np.random.default_rng(7)
    q8 = bytearray()
    for _ in range(4):  # Q8_0 blocks: d = 0.5 (f16), then 32 int8
        q8 += bytes([0x00, 0x38]) + rng.integers(0, 256, 32, np.uint8).tobytes()
    tensors: dict[str, Any] = {
        "f32": rng.standard_normal((11, 3)).astype("<f4"),
        "u4": u4(rng.integers(0, 16, (37, 5))),  # odd rows: chunks start on odd nibbles
        "bool": rng.integers(0, 2, 10).astype(bool),
        "fnuz": rng.integers(0, 256, (6, 2), np.uint8).view(ml_dtypes.float8_e4m3fnuz),
        "q8_1d": Payload(0x4708, memoryview(bytes(q8)), (4,), Layout("ggml.q8_0", 34)),
        "q8_2d": Payload(0x4708, memoryview(bytes(q8)), (2, 2), Layout("ggml.q8_0", 34)),
        "opaque": Payload(
            5000, memoryview(rng.integers(0, 256, 12, np.uint8).tobytes()), (3, 2), Layout("x", 2)
        ),
        "scalar": np.array(2.5, "<f8"),
    }
    kiln_np.save_weights(tmp_path / "w", tensors, format="kiln")
    return kiln_np.open_weights(tmp_path / "w")


@pytest.mark.usefixtures("threads")
@pytest.mark.parametrize("chunks", ["auto", 3, 1], ids=["auto", "3", "1"])
def test_from_weights_is_numpy_of_every_kind(tmp_path: Path, chunks: object) -> None:
    with _kinds(tmp_path) as w:
        arrays = from_weights(w, chunks=chunks)
        assert list(arrays) == list(w)
        for name, t in w.items():
            want = t.numpy()
            got = arrays[name].compute()
            assert (got.dtype, got.shape) == (want.dtype, want.shape), name
            assert bits(got) == bits(want), name
            assert bits(from_payload(t, chunks=chunks).compute()) == bits(want), name
        assert arrays["q8_1d"].shape == (128,)
        if chunks == "auto":
            assert arrays["u4"].chunks == ((37,), (5,))


@pytest.mark.usefixtures("threads")
def test_from_weights_checks_bytes_in_the_whole_tensors_terms(tmp_path: Path) -> None:
    raw = np.zeros(12, np.uint8)
    raw[7] = 2
    kiln_np.save_weights(
        tmp_path / "w", {"b": Payload(Code.BOOL, memoryview(raw.tobytes()), (12,))}, format="kiln"
    )
    with kiln_np.open_weights(tmp_path / "w") as w:
        x = from_weights(w, chunks=5)["b"]
        assert not x[:5].any().compute()
        with pytest.raises(KilnError, match="found 0x02 at element 7 of the payload") as info:
            x.compute()
    assert (info.value.kind, info.value.index) == ("TYPE", 7)


def test_from_weights_and_from_payload_refuse_what_they_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match="expected a WeightTensor") as info:
        from_weights({"w": np.zeros(2)})  # type: ignore[dict-item]
    assert info.value.kind == "TYPE"
    with _kinds(tmp_path) as w:
        extras: list[dict[str, Any]] = [{"code": 2}, {"offset": 4}, {"exact": True}]
        for extra in extras:
            with pytest.raises(KilnError, match="expected a WeightTensor alone") as info:
                from_payload(w["f32"], **extra)
            assert info.value.kind == "TYPE"
        with pytest.raises(KilnError, match="expected dask chunks") as info:
            from_weights(w, chunks=0)
        assert info.value.kind == "SHAPE"
    with pytest.raises(KilnError, match="found no code and shape") as info:
        from_payload(tmp_path / "w" / "manifest.json")
    assert info.value.kind == "TYPE"
