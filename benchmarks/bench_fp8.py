"""FP8 E4M3 dequantization (kiln_np's FP8 schemes), as ratios in one process.

Run from the repository root::

    python benchmarks/bench_fp8.py
    python benchmarks/bench_fp8.py --rows 2048 --rounds 3   # shorter
    KILN_NP_PURE=1 python benchmarks/bench_fp8.py            # the numpy kernels

Figures (issue 23's target in brackets), each the time of one scheme's ``decode`` of a whole
``--rows`` x 4096 FP8 weight (16 Mi elements by default) over ``np.copy`` of its bfloat16
output, timed in the same rounds (``_common.time_interleaved``):

1. ``fp8-block`` (DeepSeek-V3 layout: float32 scales per 128 x 128 block) -> bfloat16 [<= 2.5];
2. ``fp8-scaled`` per row (compressed-tensors channel strategy, float32 scales) -> bfloat16;
3. ``fp8-scaled`` per row with bfloat16 scales (compressed-tensors' bf16 models) -> bfloat16.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

from kiln_np._schemes.fp8 import FP8_BLOCK, FP8_SCALED
from kiln_np._schemes.scheme import Facts

COLS = 4096
BF16 = np.dtype(ml_dtypes.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4096, help="rows of 4096 columns (4096)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (5)")
    args = parser.parse_args()
    rows = args.rows
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (rows, COLS), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x38  # no NaN codes: a real checkpoint has none
    weight = Facts("w.weight", "f8e4m3", (rows, COLS), lambda: codes)
    block_scales = rng.uniform(1e-4, 1e-2, (-(-rows // 128), COLS // 128)).astype(np.float32)
    row_scales = rng.uniform(1e-4, 1e-2, (rows, 1)).astype(np.float32)
    cases = {
        "fp8-block": (FP8_BLOCK, block_scales, "f32"),
        "fp8-scaled f32": (FP8_SCALED, row_scales, "f32"),
        "fp8-scaled bf16": (FP8_SCALED, row_scales.astype(BF16), "bf16"),
    }
    out = np.empty((rows, COLS), BF16)
    out[...] = 1
    functions: dict[str, Callable[[], object]] = {"np.copy": lambda: np.copy(out)}
    for label, (scheme, scales, kind) in cases.items():
        facts = {"weight": weight, "scale": Facts("w.s", kind, scales.shape, weight.read)}
        plan = scheme.plan("w.weight", facts, {})
        functions[label] = partial(
            scheme.decode, plan, {"weight": codes, "scale": scales}, 0, rows, BF16
        )
    timing = time_interleaved(functions, "np.copy", args.rounds)
    n = f"{rows * COLS / 2**20:g} Mi"
    table = [
        timing.row(
            f"fp8-block (128x128 f32 scales) -> bf16, {n}, / np.copy of the output",
            "fp8-block",
            "np.copy",
            "<= 2.5",
        ),
        timing.row(
            f"fp8-scaled per row, f32 scales -> bf16, {n}, / np.copy", "fp8-scaled f32", "np.copy"
        ),
        timing.row(
            f"fp8-scaled per row, bf16 scales -> bf16, {n}, / np.copy", "fp8-scaled bf16", "np.copy"
        ),
        timing.row("np.copy of the bf16 output", "np.copy", "np.copy"),
    ]
    print(describe_machine(), f"cpu pressure (avg60): {cpu_pressure()}")
    print(markdown_table(["figure", "time", "ratio", "target"], table))


if __name__ == "__main__":
    main()
