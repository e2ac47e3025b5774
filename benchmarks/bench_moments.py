"""The statistics kernel (``kiln_np._kernels.moments``) as ratios to ``np.copy`` of the
same array and to a naive numpy float64 pass (issue 22: the per-tensor table must take
<= 3x ``np.copy`` and <= 0.3x the naive pass, so the kernel alone should stay well
under 2x ``np.copy``).

    python benchmarks/bench_moments.py [--rounds 5] [--naive-elements 64]

Inputs: 1 GiB each, 512 Mi bf16 elements, 256 Mi f32 and 512 Mi f16 (normal values, a
random 16 Mi-element block tiled).  Each row times, interleaved in one process:

- ``np.copy(values)`` (the baseline: one read and one write of every byte, into a fresh
  array whose pages the copy faults in);
- ``np.copyto(warm, values)`` into an array written before (memory speed, no faults);
- ``moments(values, kind)``, split over the thread pool (every core, or
  ``KILN_NP_NUM_THREADS``);
- the compiled kernel in one call on the calling thread (one core);
- the naive pass ``y = values.astype(np.float64)`` then ``y.min(), y.max(), y.mean(),
  y.std(), np.isnan(y).sum()``, on the first ``--naive-elements`` Mi elements only (its
  float64 temporaries are 8x the input), with ``moments`` timed on the same prefix.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial

import ml_dtypes
import numpy as np
from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

from kiln_np._kernels import native
from kiln_np._kernels.moments import KINDS, moments

DTYPES = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "f16": np.float16}
CASES = (("bf16", 512 << 20), ("f32", 256 << 20), ("f16", 512 << 20))


def make(kind: str, count: int) -> np.ndarray:
    """``count`` normal values of ``kind`` as they are stored (uint16 bits, float32)."""
    base = np.random.default_rng(22).standard_normal(1 << 24, np.float32)
    block = base.astype(DTYPES[kind])
    values = np.tile(block, count // block.size)
    return values.view(np.uint16) if kind != "f32" else values


def naive(values: np.ndarray, kind: str) -> object:
    y = values.view(DTYPES[kind]).astype(np.float64)
    return y.min(), y.max(), y.mean(), y.std(), np.isnan(y).sum()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--naive-elements", type=int, default=64, help="Mi elements")
    args = parser.parse_args(argv)
    print(describe_machine(), "cpu pressure", cpu_pressure())
    rows = []
    for kind, count in CASES:
        values = make(kind, count)
        size = f"{count >> 20} Mi {kind}"
        warm = np.empty_like(values)
        doors: dict[str, Callable[[], object]] = {
            "copy": partial(np.copy, values),
            "copyto": partial(np.copyto, warm, values),
            "moments": partial(moments, values, kind),
            "one": partial(native.moments, KINDS[kind], values, 0, count),
        }
        timing = time_interleaved(doors, "copy", args.rounds)
        rows.append(timing.row(f"moments / np.copy, {size}", "moments", "copy", "< 2"))
        rows.append(timing.row(f"one thread / np.copy, {size}", "one", "copy"))
        rows.append(timing.row(f"moments / np.copyto warm, {size}", "moments", "copyto"))
        prefix = values[: args.naive_elements << 20]
        doors = {"naive": partial(naive, prefix, kind), "moments": partial(moments, prefix, kind)}
        timing = time_interleaved(doors, "naive", args.rounds)
        label = f"moments / naive float64, {args.naive_elements} Mi {kind}"
        rows.append(timing.row(label, "moments", "naive", "<= 0.3"))
        del values, prefix, warm
    print(markdown_table(["figure", "time", "ratio", "target"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
