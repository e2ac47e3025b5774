"""``kiln_np.dask.convert`` on a 2-worker ``LocalCluster`` against ``save_weights`` in
one process: an FP8 block-scaled sharded checkpoint dequantized to bf16.

Run from the repository root::

    python benchmarks/bench_dask_convert.py                   # 256 MiB of FP8 weights
    python benchmarks/bench_dask_convert.py --size-mib 1024 --rounds 3 --workers 2

Writes a DeepSeek-style sharded checkpoint of about ``--size-mib`` MiB of
F8_E4M3 weights (4096 x 4096, one F32 scale per 128 x 128 block, and a
``config.json`` saying so), then per round, in this order:

- ``save_weights(OUT, open_weights(SRC).logical(), format="safetensors",
  max_shard_size=..., dequantize="bf16")`` in this process;
- ``kiln_np.dask.convert(SRC, OUT, max_shard_size=..., dequantize="bf16",
  client=...)`` on a ``LocalCluster`` of ``--workers`` worker processes (one
  thread each; started once, before the rounds);
- the baselines: every weight's ``t.dequantize("bfloat16")`` (each dropped
  before the next), and ``shutil.copyfile`` of each output shard.

It prints each time and the ratios of one round to another, medians over the
rounds: cluster / single process, and each over dequantize + copy (issue 24's
target for the single process is <= 1.3).  The outputs are checked
byte-identical once.  The machine's cores are shared by the cluster's workers
and each worker's kernel threads.  Files go in ``--dir`` (default: the system
temporary directory) and are deleted at the end.
"""

# distributed ships only partial annotations.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table

import kiln_np
import kiln_np.dask as kd
from kiln_np.safetensors import save_safetensors

ROWS = COLS = 4096
SHARD = 256 << 20  # output bytes per shard: 8 bf16 weights of 32 MiB


def source_checkpoint(folder: Path, size: int) -> None:
    """About ``size`` bytes of FP8 weights in shards of 64 MiB, with their config."""
    rng = np.random.default_rng(24)
    tensors: dict[str, np.ndarray] = {}
    for i in range(max(1, size // (ROWS * COLS))):
        codes = rng.integers(0, 256, (ROWS, COLS), np.uint8)
        codes[(codes & 0x7F) == 0x7F] = 0x38  # no NaN codes
        tensors[f"model.layers.{i}.mlp.weight"] = codes.view(ml_dtypes.float8_e4m3fn)
        scales = rng.uniform(1e-3, 1, (ROWS // 128, COLS // 128)).astype(np.float32)
        tensors[f"model.layers.{i}.mlp.weight_scale_inv"] = scales
    save_safetensors(folder, tensors, max_shard_size=64 << 20)
    config = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    (folder / "config.json").write_text(json.dumps(config))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    print(f"machine: {describe_machine()}")
    print(f"cpu pressure (avg60): {cpu_pressure()}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        src = root / "src"
        source_checkpoint(src, args.size_mib << 20)
        single, cluster_out = root / "single", root / "cluster"
        copies = root / "copies"
        copies.mkdir()

        def run_single() -> None:
            shutil.rmtree(single, ignore_errors=True)
            with kiln_np.open_weights(src) as stored:
                kiln_np.save_weights(
                    single,
                    stored.logical(),
                    format="safetensors",
                    max_shard_size=SHARD,
                    dequantize="bf16",
                )

        def dequantize() -> None:
            with kiln_np.open_weights(src) as stored:
                for t in stored.logical().values():
                    if isinstance(t, kiln_np.LogicalTensor):
                        t.dequantize("bfloat16")

        def copy() -> None:
            for p in sorted(single.glob("*.safetensors")):
                shutil.copyfile(p, copies / p.name)

        times: dict[str, list[float]] = {k: [] for k in ("single", "cluster", "deq", "copy")}
        with (
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address="127.0.0.1:0",
                host="127.0.0.1",
            ) as local,
            Client(local) as client,
        ):

            def run_cluster() -> None:
                shutil.rmtree(cluster_out, ignore_errors=True)
                kd.convert(src, cluster_out, max_shard_size=SHARD, dequantize="bf16", client=client)

            for _ in range(args.rounds):
                times["single"].append(timed(run_single))
                times["cluster"].append(timed(run_cluster))
                times["deq"].append(timed(dequantize))
                times["copy"].append(timed(copy))
        same = all(
            (cluster_out / p.name).read_bytes() == p.read_bytes() for p in single.iterdir()
        ) and sorted(p.name for p in single.iterdir()) == sorted(
            p.name for p in cluster_out.iterdir()
        )
        output = sum(p.stat().st_size for p in single.glob("*.safetensors"))

    def ratio(a: str, *b: str) -> float:
        rounds = range(args.rounds)
        return statistics.median(times[a][i] / sum(times[k][i] for k in b) for i in rounds)

    def ms(key: str) -> str:
        return f"{statistics.median(times[key]) * 1e3:.0f} ms"

    print(
        f"\n{args.size_mib} MiB of FP8 weights -> {output / 2**20:.0f} MiB of bf16, "
        f"{args.rounds} rounds, {args.workers} workers; outputs byte-identical: {same}\n"
    )
    rows: list[list[object]] = [
        ["single process: save_weights", ms("single"), ratio("single", "deq", "copy")],
        [
            f"{args.workers}-worker LocalCluster: convert",
            ms("cluster"),
            ratio("cluster", "deq", "copy"),
        ],
        ["dequantize (bf16) of every weight", ms("deq"), ""],
        ["copyfile of the output", ms("copy"), ""],
    ]
    print(markdown_table(["run", "median", "/ (dequantize + copy)"], rows))
    print(f"\ncluster / single process: {ratio('cluster', 'single'):.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
