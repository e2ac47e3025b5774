"""``kiln_np.describe(weights)``: statistics of every tensor of a checkpoint,
against a naive numpy loop, against reading every byte once, and against
dequantizing every tensor.

Run from the repository root::

    python benchmarks/bench_stats.py                 # 1 GiB bf16 + 256 MiB Q4_K
    python benchmarks/bench_stats.py --mib 256 --q4k-mib 64 --rounds 3

Two checkpoints are written to a temporary directory (and read from the page
cache after the first round):

- a llama-like **bf16 safetensors** file of ``--mib`` MiB (tensors of 4-64 MiB,
  normal values with a few outliers).  Figures: describe's time over the naive
  loop (``np.asarray(t).astype(np.float64)`` then min, max, mean, std and
  ``isnan`` per tensor; issue 22's target <= 0.3), and over ``np.copy`` of each
  mapped tensor (reading every byte once; target <= 3);
- a **Q4_K GGUF** of ``--q4k-mib`` MiB of blocks (random blocks with sane
  f16 scales).  Figure: describe's time over ``kiln_np.gguf.dequantize`` of
  every tensor (target <= 1.5).

Then the peak traced memory (tracemalloc: numpy's buffers included; the
mapped file is not an allocation) of each statistics pass, against issue 22's
bound of 64 MiB + the largest single chunk.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import describe_machine, peak_bytes, time_interleaved

import kiln_np
from kiln_np._explore import weight_stats
from kiln_np._explore.chunks import COUNT_CHUNK
from kiln_np._kernels.pool import _threads
from kiln_np._weights.summary import human_bytes

Q4_K_BYTES, Q4_K_ELEMENTS = 144, 256


def _bf16_checkpoint(path: Path, mib: int) -> None:
    rng = np.random.default_rng(0)
    sizes = [64, 16, 16, 64, 32, 4]  # MiB: a layer's attention, mlp and norm-ish tensors
    tensors: dict[str, np.ndarray] = {}
    left, layer = mib, 0
    while left > 0:
        for j, wanted in enumerate(sizes):
            size = min(wanted, left)
            if size <= 0:
                break
            x = rng.standard_normal(size << 19, np.float32) * 0.02
            x[:: 1 << 16] *= 1000.0  # outliers
            tensors[f"model.layers.{layer}.t{j}.weight"] = x.astype(ml_dtypes.bfloat16)
            left -= size
        layer += 1
    kiln_np.save_weights(path, tensors, format="safetensors")


def _q4k_checkpoint(path: Path, mib: int) -> None:
    rng = np.random.default_rng(1)
    per_tensor = 32 << 20
    tensors = {}
    for i in range(max(1, (mib << 20) // per_tensor)):
        blocks = rng.integers(0, 256, (per_tensor // Q4_K_BYTES, Q4_K_BYTES), dtype=np.uint8)
        d = np.asarray(rng.uniform(1e-4, 1e-2, blocks.shape[0]), np.float16)
        blocks[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
        blocks[:, 2:4] = (d / 2).view(np.uint8).reshape(-1, 2)
        rows = blocks.shape[0] // 16  # 16 blocks of 256 = 4096 elements per row
        data = blocks[: rows * 16].reshape(-1)
        layout = kiln_np.Layout("ggml.q4_k", Q4_K_BYTES)
        tensors[f"blk.{i}.ffn_down.weight"] = kiln_np.Payload(
            0x470C, memoryview(data.tobytes()), (rows, 16), layout
        )
    kiln_np.save_weights(path, tensors, format="gguf")


def _naive(weights: kiln_np.Weights) -> None:
    for t in weights.values():
        x = np.asarray(t).astype(np.float64)
        x.min(), x.max(), x.mean(), x.std(), np.isnan(x).sum()


def _copy(weights: kiln_np.Weights) -> None:
    for t in weights.values():
        np.copy(np.asarray(t))


def _dequantize(weights: kiln_np.Weights) -> None:
    for t in weights.values():
        kiln_np.gguf.dequantize(t.payload())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="bf16 checkpoint size (MiB)")
    parser.add_argument("--q4k-mib", type=int, default=256, help="Q4_K blocks (MiB)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe_machine(), f"threads={_threads()}")
    with tempfile.TemporaryDirectory() as tmp:
        st, gg = Path(tmp) / "bf16.safetensors", Path(tmp) / "q4k.gguf"
        _bf16_checkpoint(st, args.mib)
        _q4k_checkpoint(gg, args.q4k_mib)
        with kiln_np.open_weights(st) as w:
            print(f"bf16 safetensors: {len(w)} tensors, {human_bytes(w.byte_length)}")
            _copy(w)  # warm the page cache
            timing = time_interleaved(
                {
                    "copy": lambda: _copy(w),
                    "naive": lambda: _naive(w),
                    "describe": lambda: kiln_np.describe(w),
                },
                "copy",
                args.rounds,
            )
            for name in ("copy", "naive", "describe"):
                print(f"  {name:<9} {timing.median(name):.3f} s")
            print(f"  describe / naive loop: {timing.ratio('describe', 'naive'):.3f} (<= 0.3)")
            print(f"  describe / np.copy:    {timing.ratio('describe', 'copy'):.2f} (<= 3)")
            peak = peak_bytes(lambda: kiln_np.describe(w))
            chunk = weight_stats.ROUND * 2
            print(
                f"  peak traced {human_bytes(peak)}; bound 64 MiB + a chunk "
                f"({human_bytes(chunk)} of mapped bf16, not an allocation)"
            )
        with kiln_np.open_weights(gg) as w:
            print(f"Q4_K GGUF: {len(w)} tensors, {human_bytes(w.byte_length)} of blocks")
            _dequantize(w)
            timing = time_interleaved(
                {"dequantize": lambda: _dequantize(w), "describe": lambda: kiln_np.describe(w)},
                "dequantize",
                args.rounds,
            )
            for name in ("dequantize", "describe"):
                print(f"  {name:<11} {timing.median(name):.3f} s")
            ratio = timing.ratio("describe", "dequantize")
            print(f"  describe / dequantize every tensor: {ratio:.2f} (<= 1.5)")
            peak = peak_bytes(lambda: kiln_np.describe(w))
            chunk = COUNT_CHUNK * 4 * _threads()
            print(
                f"  peak traced {human_bytes(peak)}; bound 64 MiB + a chunk "
                f"({human_bytes(chunk)}: one run of values per thread)"
            )


if __name__ == "__main__":
    main()
