"""Zarr v3 (issue 25): a bf16 checkpoint through a Zarr group, and packbits of 4-bit
elements, as ratios to np.copy.

Run from the repository root::

    python benchmarks/bench_zarr.py                       # 1 GiB checkpoint, 64 Mi elements
    python benchmarks/bench_zarr.py --checkpoint-mib 256 --elements 16777216 --rounds 3

Rows, each timed in the same rounds as its baseline:

- **checkpoint**: ``save_zarr`` of a bf16 checkpoint held in memory (tensors of
  4096 x 4096, 32 MiB each, so every one is a shard of row chunks), then
  ``open_zarr`` and a copy of every tensor's bytes out of the mapped files (the
  read touches every byte); over ``np.copy`` of the checkpoint's bytes twice
  (target <= 2).  The group is written to a temporary directory under
  ``--dir`` and removed each round, so the write lands in the page cache, as
  the ``np.copy`` baseline does in memory.
- **packbits**: ``encode_packbits`` / ``decode_packbits`` of ``--elements``
  uint4 elements (what the ``packbits`` codec runs for a chunk) and, beside
  them, ``pack_nibbles`` / ``unpack_nibbles``; each over ``np.copy`` of the
  unpacked array (target: packbits within 10% of the nibble kernels).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, format_size, markdown_table, time_interleaved

import kiln_np
from kiln_np.zarr import PackBitsConfig, decode_packbits, encode_packbits, open_zarr, save_zarr

TENSOR = (4096, 4096)


def checkpoint_rows(mib: int, rounds: int, directory: str) -> list[list[object]]:
    count = max(1, mib * (1 << 20) // (TENSOR[0] * TENSOR[1] * 2))
    rng = np.random.default_rng(0)
    tensors = {
        f"layers.{i}.weight": rng.integers(0, 1 << 16, TENSOR, dtype=np.uint16).view(
            ml_dtypes.bfloat16
        )
        for i in range(count)
    }
    flat = np.concatenate([t.view(np.uint8).reshape(-1) for t in tensors.values()])

    def copy_twice() -> None:
        np.copy(flat)
        np.copy(flat)

    def write_read() -> None:
        root = tempfile.mkdtemp(dir=directory)
        try:
            path = Path(root) / "ckpt.zarr"
            save_zarr(path, tensors)
            with open_zarr(path) as w:
                for t in w.values():
                    np.copy(np.frombuffer(t.payload().data, np.uint8))
        finally:
            shutil.rmtree(root)

    timing = time_interleaved({"copy": copy_twice, "zarr": write_read}, "copy", rounds)
    size = format_size(flat.size)
    return [
        timing.row(f"write + read {size} bf16 ({count} tensors)", "zarr", "copy", "<= 2"),
        timing.row(f"np.copy of {size}, twice", "copy", "copy", "baseline"),
    ]


def packbits_rows(elements: int, rounds: int) -> list[list[object]]:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 16, elements, dtype=np.uint8).view(ml_dtypes.uint4)
    packed = kiln_np.pack_nibbles(values)
    config = PackBitsConfig()
    u4 = values.dtype
    functions: dict[str, Callable[[], object]] = {
        "copy": lambda: np.copy(values),
        "encode": lambda: encode_packbits(values, config),
        "pack": lambda: kiln_np.pack_nibbles(values),
        "decode": lambda: decode_packbits(packed, u4, elements, config),
        "unpack": lambda: kiln_np.unpack_nibbles(packed, elements),
    }
    assert encode_packbits(values, config).tobytes() == packed.tobytes()
    timing = time_interleaved(functions, "copy", rounds)
    n = f"{elements // (1 << 20)} Mi"
    return [
        timing.row(f"packbits encode, {n} uint4", "encode", "copy", "= pack_nibbles +-10%"),
        timing.row(f"pack_nibbles, {n}", "pack", "copy", ""),
        timing.row(f"packbits decode, {n} uint4", "decode", "copy", "= unpack_nibbles +-10%"),
        timing.row(f"unpack_nibbles, {n}", "unpack", "copy", ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-mib", type=int, default=1024)
    parser.add_argument("--elements", type=int, default=64 << 20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the group is written")
    args = parser.parse_args()
    print(describe_machine(), cpu_pressure())
    rows = packbits_rows(args.elements, args.rounds)
    rows += checkpoint_rows(args.checkpoint_mib, args.rounds, args.dir or tempfile.gettempdir())
    print(markdown_table(["figure", "median", "/ np.copy", "target"], rows))


if __name__ == "__main__":
    main()
