"""kiln_np.dask on whole checkpoints: convert (one task per shard) byte-identical to
save_weights whatever the number of worker processes, a worker killed mid-write,
an interrupted run, ``kiln-np convert --scheduler``; from_weights and describe."""

# dask ships only partial annotations.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np import KilnError
from kiln_np.safetensors import save_safetensors

pytest.importorskip("dask", reason="needs dask (the dask extra), which is not installed")
pytest.importorskip(
    "distributed", reason="needs distributed (the dask extra), which is not installed"
)
import dask
from distributed import Client, LocalCluster, get_task_stream
from distributed.diagnostics.plugin import WorkerPlugin

import kiln_np.dask as kd  # imports dask

SHARD = 9_000_000  # one 2048x2048 bf16 weight (8 MiB) per shard, with its norm
FP8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}


def _fp8_checkpoint(folder: Path, layers: int = 3, rows: int = 2048, cols: int = 2048) -> None:
    """A sharded DeepSeek-style FP8 block-scaled checkpoint with its config.json."""
    rng = np.random.default_rng(24)
    tensors: dict[str, np.ndarray] = {}
    for i in range(layers):
        codes = rng.integers(0, 256, (rows, cols), np.uint8)
        codes[(codes & 0x7F) == 0x7F] = 0x38  # no NaN codes: 1.0 instead
        tensors[f"model.layers.{i}.mlp.weight"] = codes.view(ml_dtypes.float8_e4m3fn)
        blocks = (-(-rows // 128), -(-cols // 128))
        tensors[f"model.layers.{i}.mlp.weight_scale_inv"] = rng.uniform(1e-3, 1, blocks).astype(
            np.float32
        )
        tensors[f"model.layers.{i}.norm.weight"] = rng.standard_normal(cols).astype(
            ml_dtypes.bfloat16
        )
    save_safetensors(folder, tensors, max_shard_size=6_000_000)
    config = {"model_type": "deepseek_v3", "quantization_config": FP8}
    (folder / "config.json").write_text(json.dumps(config))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.rglob("*") if ".part" in p.name or ".old" in p.name)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """The source and the single-process conversion's files, by name."""
    root = tmp_path_factory.mktemp("fp8")
    src = root / "src"
    _fp8_checkpoint(src)
    with kiln_np.open_weights(src) as stored:
        kiln_np.save_weights(
            root / "ref",
            stored.logical(),
            format="safetensors",
            max_shard_size=SHARD,
            dequantize="bf16",
        )
    reference = _files(root / "ref")
    assert len([n for n in reference if n.endswith(".safetensors")]) == 3
    assert "config.json" in reference
    return src, reference


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[LocalCluster, Client]]:
    with (
        LocalCluster(
            n_workers=1,
            processes=True,
            threads_per_worker=1,
            dashboard_address="127.0.0.1:0",
            host="127.0.0.1",
        ) as local,
        Client(local) as client,
    ):
        yield local, client


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_convert_on_workers_is_byte_identical(
    cluster: tuple[LocalCluster, Client],
    checkpoint: tuple[Path, dict[str, bytes]],
    tmp_path: Path,
    workers: int,
) -> None:
    local, client = cluster
    local.scale(workers)
    client.wait_for_workers(workers)
    src, reference = checkpoint
    dst = tmp_path / "bf16"
    with get_task_stream(client) as stream:
        written = kd.convert(src, dst, max_shard_size=SHARD, dequantize="bf16", client=client)
    assert written == [str(dst)]
    assert _files(dst) == reference
    assert len({task["worker"] for task in stream.data}) == workers  # each worker wrote
    assert _leftovers(tmp_path) == []


class _KillMidWrite(WorkerPlugin):
    """Kill the worker (SIGKILL, its own process) while the first shard task to
    start anywhere has written part of its shard; once, claimed by a marker."""

    def __init__(self, marker: str, parent: str) -> None:
        self.marker, self.parent = marker, parent

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish != "executing" or not str(key).startswith("kiln-shard-"):
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        shard = int(str(key).rsplit("-", 1)[1]) + 1
        threading.Thread(target=self._watch, args=(shard,), daemon=True).start()

    def _watch(self, shard: int) -> None:
        pattern = os.path.join(self.parent, ".*.part", f"model-{shard:05d}-of-*.safetensors.part")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for part in glob.glob(pattern):
                try:
                    size = os.path.getsize(part)
                except FileNotFoundError:  # renamed meanwhile
                    continue
                if size > 4096:  # the header and some data
                    Path(self.marker).write_text(f"{os.path.basename(part)} {size}")
                    os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.0002)


def test_a_worker_killed_mid_write_is_retried(
    cluster: tuple[LocalCluster, Client],
    checkpoint: tuple[Path, dict[str, bytes]],
    tmp_path: Path,
) -> None:
    _, client = cluster
    src, reference = checkpoint
    marker = tmp_path / "killed"
    work = tmp_path / "out"
    work.mkdir()
    client.register_plugin(_KillMidWrite(str(marker), str(work)), name="kill-mid-write")
    try:
        kd.convert(src, work / "bf16", max_shard_size=SHARD, dequantize="bf16", client=client)
    finally:
        client.unregister_worker_plugin("kill-mid-write")
    part, size = marker.read_text().split()
    assert part.endswith(".safetensors.part")
    assert 4096 < int(size) < len(reference[part.removesuffix(".part")])  # killed mid-write
    assert _files(work / "bf16") == reference
    assert _leftovers(work) == []


def _old_checkpoint(dst: Path) -> dict[str, bytes]:
    save_safetensors(dst, {"old": np.arange(4, dtype="<f4")}, max_shard_size=1)
    return _files(dst)


@pytest.mark.parametrize("on", ["cluster", "threads"])
def test_a_failed_run_leaves_the_old_destination(
    cluster: tuple[LocalCluster, Client],
    checkpoint: tuple[Path, dict[str, bytes]],
    tmp_path: Path,
    on: str,
) -> None:
    src, _ = checkpoint
    copy = tmp_path / "src"
    copy.mkdir()
    for p in src.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    dst = tmp_path / "bf16"
    old = _old_checkpoint(dst)
    with kiln_np.open_weights(copy) as stored:
        view = stored.logical()
        shard = copy / "model-00002-of-00003.safetensors"
        os.utime(shard, ns=(0, shard.stat().st_mtime_ns + 10**9))  # modified since opened
        client = cluster[1] if on == "cluster" else None
        with pytest.raises(KilnError, match="expected the file that was opened") as info:
            kd.convert(view, dst, max_shard_size=SHARD, dequantize="bf16", client=client)
    assert info.value.kind == "TYPE"
    assert _files(dst) == old
    assert _leftovers(tmp_path) == []


def test_cli_scheduler_converts_on_the_cluster(
    cluster: tuple[LocalCluster, Client],
    checkpoint: tuple[Path, dict[str, bytes]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    local, _ = cluster
    src, _ = checkpoint
    records: list[dict[str, Any]] = []
    outputs: list[dict[str, bytes]] = []
    for scheduler in ([], ["--scheduler", local.scheduler_address]):
        dst = tmp_path / f"bf16-{len(records)}"
        argv = ["convert", str(src), str(dst), "--to", "safetensors", "--dequantize", "bf16"]
        status, out, err = run_main(capsys, *argv, "--max-shard-size", "9MB", *scheduler, "--json")
        assert status == 0, err
        records.append(json.loads(out))
        outputs.append(_files(dst))
    local_run, cluster_run = records
    assert (local_run["scheduler"], cluster_run["scheduler"]) == (None, local.scheduler_address)
    assert cluster_run["files"] == [str(tmp_path / "bf16-1")]
    assert (cluster_run["tensors"], cluster_run["dequantized"]) == (6, 3)  # 3 weights, 3 norms
    assert local_run["dequantized"] == 3
    assert outputs[0] == outputs[1]
    assert b'"__metadata__":{}' in outputs[1]["model-00001-of-00003.safetensors"][:300]


def test_cli_scheduler_needs_sharded_safetensors(
    checkpoint: tuple[Path, dict[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, _ = checkpoint
    for extra in (["--to", "safetensors"], ["--to", "kiln", "--max-shard-size", "1MB"]):
        argv = ["convert", str(src), str(tmp_path / "out"), *extra]
        status, _, err = run_main(capsys, *argv, "--scheduler", "tcp://127.0.0.1:1")
        assert status == 2
        assert "--scheduler writes a sharded safetensors checkpoint" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_unreachable_scheduler_is_file(
    checkpoint: tuple[Path, dict[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, _ = checkpoint
    argv = ["convert", str(src), str(tmp_path / "out"), "--to", "safetensors"]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        status, _, err = run_main(
            capsys, *argv, "--max-shard-size", "1MB", "--scheduler", "tcp://127.0.0.1:9"
        )
    assert status == 2
    assert "FILE: cannot reach the dask scheduler 'tcp://127.0.0.1:9'" in err
    assert list(tmp_path.iterdir()) == []


def test_convert_without_a_client_matches_save_weights(
    checkpoint: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    src, reference = checkpoint
    kd.convert(src, tmp_path / "bf16", max_shard_size=SHARD, dequantize="bf16")
    assert _files(tmp_path / "bf16") == reference
    # a selection, plain tensors copied as they are, metadata: as save_weights writes them
    with kiln_np.open_weights(src) as stored:
        kept = stored.select("*.norm.*", "*layers.1.*")
        kiln_np.save_weights(
            tmp_path / "ref", kept, format="safetensors", max_shard_size=100, metadata={"a": "b"}
        )
    kd.convert(
        src,
        tmp_path / "sel",
        max_shard_size=100,
        include=["*.norm.*", "*layers.1.*"],
        metadata={"a": "b"},
    )
    assert _files(tmp_path / "sel") == _files(tmp_path / "ref")


def test_a_stale_attempts_part_file_is_not_swapped_in(
    checkpoint: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an attempt the scheduler gave up on that still wrote after its retry finished
    src, reference = checkpoint
    row = next(r for r in kiln_np.formats.FORMATS if r.name == "safetensors")
    assert row.sharded is not None
    whole = row.sharded.write

    def write_then_stale(*args: Any, **kwargs: Any) -> str:
        path = whole(*args, **kwargs)
        Path(path + ".part").write_bytes(b"half a shard")
        return path

    stale = dataclasses.replace(
        row, sharded=dataclasses.replace(row.sharded, write=write_then_stale)
    )
    rows = tuple(stale if r is row else r for r in kiln_np.formats.FORMATS)
    monkeypatch.setattr(kiln_np.formats, "FORMATS", rows)
    kd.convert(src, tmp_path / "bf16", max_shard_size=SHARD, dequantize="bf16")
    assert _files(tmp_path / "bf16") == reference
    assert _leftovers(tmp_path) == []


def test_from_weights_gives_each_tensors_values(
    cluster: tuple[LocalCluster, Client], checkpoint: tuple[Path, dict[str, bytes]]
) -> None:
    src, _ = checkpoint
    _, client = cluster
    with kiln_np.open_weights(src) as stored:
        logical = stored.logical()
        arrays = kd.from_weights(logical)
        assert list(arrays) == list(logical)
        with dask.config.set({"array.chunk-size": "1.5MiB"}):  # 192 rows of float32
            weight = kd.from_weights(logical)["model.layers.0.mlp.weight"]
        assert weight.chunks == ((128,) * 16, (2048,))  # on the scales' block boundaries
        for name, array in arrays.items():
            want = logical[name].numpy()
            got = array.compute(scheduler=client)
            assert (got.dtype, got.shape) == (want.dtype, want.shape)
            assert got.tobytes() == want.tobytes(), name
        t = logical["model.layers.2.mlp.weight"]
        assert isinstance(t, kiln_np.LogicalTensor)
        split = kd.from_payload(t, chunks=(300, 1000)).compute(scheduler=client)
        assert split.tobytes() == t.dequantize().tobytes()
        plain = kd.from_weights(stored)
        scale = stored["model.layers.0.mlp.weight_scale_inv"]
        got = plain[scale.name].compute(scheduler=client)
        assert got.tobytes() == scale.numpy().tobytes()


def test_describe_equals_kiln_np_describe(
    cluster: tuple[LocalCluster, Client], checkpoint: tuple[Path, dict[str, bytes]]
) -> None:
    src, _ = checkpoint
    with kiln_np.open_weights(src) as stored:
        for weights in (stored, stored.logical()):
            want = kiln_np.describe(weights)
            for client in (cluster[1], None):
                got = kd.describe(weights, client=client)
                assert (got.format, got.path) == (want.format, want.path)
                assert got.to_records() == want.to_records()
                assert [dict(r.scales) for r in got] == [dict(r.scales) for r in want]


def test_public_names_live_in_kiln_np_dask() -> None:
    for f in (kd.convert, kd.describe, kd.from_weights):
        assert f.__module__ == "kiln_np.dask"


def test_the_command_line_imports_dask_only_for_scheduler() -> None:
    code = (
        "import sys, kiln_np.cli, kiln_np.cli.weights; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
