"""MX (block-scaled) decode and GGUF <-> Kiln repacking, as ratios in one process.

Run from the repository root::

    python benchmarks/bench_mx.py
    python benchmarks/bench_mx.py --elements-mi 4 --rounds 3   # shorter
    KILN_NP_PURE=1 python benchmarks/bench_mx.py                # the numpy kernels

The figures of issue 14's table (targets in brackets; a fused compiled kernel is
expected to reach them, the numpy path is measured here):

1. ``mx.dequantize`` of an MXFP4 tensor (e2m1 payload + e8m0 scales, blocks of 32)
   to float32, against ``np.copy`` of the float32 output [<= 2.5], and the speedup
   over ``gguf.quants.dequantize`` of the same tensor as GGUF blocks [>= 6];
2. ``mx.from_ggml`` (GGUF ``ggml.mxfp4`` payload -> Kiln e2m1 + e8m0 payloads) and
   ``mx.to_ggml`` (back), against ``np.copy`` of the GGUF payload [<= 2].

Each ratio is the median over rounds of times taken in the same round
(``_common.time_interleaved``), so a busy machine moves both sides together.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

import kiln_np
from kiln_np import mx


def tensors(elements: int) -> tuple[kiln_np.Payload, kiln_np.Payload, kiln_np.Payload]:
    """Random MXFP4 values and scales (finite in float32), and the GGUF payload."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, elements, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    scales = rng.integers(100, 140, elements // 32, dtype=np.uint8)
    values = kiln_np.from_numpy(codes)
    scale_payload = kiln_np.from_numpy(scales.view(ml_dtypes.float8_e8m0fnu))
    return values, scale_payload, mx.to_ggml(values, scale_payload, layout="ggml.mxfp4")


def decode(
    values: kiln_np.Payload, scales: kiln_np.Payload, blocks: kiln_np.Payload, rounds: int
) -> list[list[object]]:
    out = np.empty(values.shape, np.float32)
    gguf_blocks = np.frombuffer(blocks.data, np.uint8).reshape(-1, 17)
    functions: dict[str, Callable[[], object]] = {
        "np.copy": lambda: np.copy(out),
        "mx.dequantize": lambda: mx.dequantize(values, scales),
    }
    timing = time_interleaved(functions, "np.copy", rounds)
    # gguf in a loop of its own: each call allocates and frees about 1 GiB of
    # temporaries, and on this VM the memory it frees is slow to touch again
    # (measured: mx.dequantize right after it 8-100 ms instead of 4-6 ms), which
    # would charge gguf's cost to whatever runs next in the round.
    slow = time_interleaved(
        {
            "mx.dequantize": lambda: mx.dequantize(values, scales),
            "gguf": lambda: gguf.quants.dequantize(gguf_blocks, gguf.GGMLQuantizationType.MXFP4),
        },
        "mx.dequantize",
        rounds,
    )
    n = values.shape[0]
    return [
        timing.row(
            f"mx.dequantize, {n >> 20} Mi MXFP4 -> float32, / np.copy of the output",
            "mx.dequantize",
            "np.copy",
            "<= 2.5",
        ),
        slow.row("speedup over gguf.quants.dequantize", "gguf", "mx.dequantize", ">= 6"),
    ]


def repack(
    values: kiln_np.Payload, scales: kiln_np.Payload, blocks: kiln_np.Payload, rounds: int
) -> list[list[object]]:
    raw = np.frombuffer(blocks.data, np.uint8)
    functions: dict[str, Callable[[], object]] = {
        "np.copy": lambda: np.copy(raw),
        "from_ggml": lambda: mx.from_ggml(blocks),
        "to_ggml": lambda: mx.to_ggml(values, scales, layout="ggml.mxfp4"),
    }
    timing = time_interleaved(functions, "np.copy", rounds)
    size = f"{raw.size / 2**20:.1f} MiB"
    return [
        timing.row(
            f"mx.from_ggml (GGUF -> Kiln), {size}, / np.copy of the payload",
            "from_ggml",
            "np.copy",
            "<= 2",
        ),
        timing.row(
            f"mx.to_ggml (Kiln -> GGUF), {size}, / np.copy of the payload",
            "to_ggml",
            "np.copy",
            "<= 2",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements-mi", type=int, default=16, help="Mi elements (16)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (5)")
    args = parser.parse_args()
    values, scales, blocks = tensors(args.elements_mi << 20)
    rows = decode(values, scales, blocks, args.rounds) + repack(values, scales, blocks, args.rounds)
    print(describe_machine(), f"cpu pressure (avg60): {cpu_pressure()}")
    print(markdown_table(["figure", "time", "ratio", "target"], rows))


if __name__ == "__main__":
    main()
