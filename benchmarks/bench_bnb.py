"""bitsandbytes 4-bit decode (bnb-nf4, bnb-fp4), as ratios in one process.

Run from the repository root::

    python benchmarks/bench_bnb.py
    python benchmarks/bench_bnb.py --elements-mi 4 --rounds 3   # shorter

A 4096-column weight of ``--elements-mi`` Mi elements (random codes, blocks of
64, positive absmax) is decoded by the scheme's ``decode`` to bfloat16, whole
and in chunks of 256 rows (how the logical view reads it), against ``np.copy``
of the bfloat16 output (issue 23 sets no target for bitsandbytes; the figures
of the other 4-bit schemes are <= 3):

1. NF4, quant state bfloat16 (its native output, one rounding);
2. NF4 double-quantized (8-bit absmax codes in nested blocks of 256), bfloat16;
3. FP4, quant state float32, decoded to bfloat16 (the native float32, then
   ``final``'s rounding).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

from kiln_np._schemes.bnb import FP4, NF4
from kiln_np._schemes.scheme import Facts, Plan, Scheme
from kiln_np._schemes.table import scheme_named

COLUMNS, BLOCK, CHUNK_ROWS = 4096, 64, 256
BF16 = np.dtype(ml_dtypes.bfloat16)


def group(
    elements: int, kind: str, dtype: str, nested: bool
) -> tuple[Scheme, Plan, dict[str, np.ndarray]]:
    """A planned bnb group of random codes and absmax."""
    rng = np.random.default_rng(0)
    blocks = elements // BLOCK
    state: dict[str, Any] = {
        "quant_type": kind,
        "blocksize": BLOCK,
        "dtype": dtype,
        "shape": [elements // COLUMNS, COLUMNS],
    }
    arrays: dict[str, np.ndarray] = {
        "weight": rng.integers(0, 256, (elements // 2, 1), dtype=np.uint8),
        "absmax": rng.uniform(1e-3, 1.0, blocks).astype(np.float32),
        "quant_map": NF4 if kind == "nf4" else FP4,
    }
    if nested:
        state.update(nested_blocksize=256, nested_dtype="float32", nested_offset=0.25)
        arrays["absmax"] = rng.integers(0, 256, blocks, dtype=np.uint8)
        arrays["nested_absmax"] = rng.uniform(0.1, 1.0, -(-blocks // 256)).astype(np.float32)
        arrays["nested_quant_map"] = np.linspace(-1, 1, 256, dtype=np.float32)
    arrays["quant_state"] = np.frombuffer(json.dumps(state).encode(), np.uint8)
    scheme = scheme_named(f"bnb-{kind}")
    kinds = {"uint8": "u8", "float32": "f32"}

    def facts(role: str, a: np.ndarray) -> Facts:
        return Facts(role, kinds[a.dtype.name], a.shape, lambda: a)

    plan = scheme.plan("w.weight", {r: facts(r, a) for r, a in arrays.items()}, {})
    return scheme, plan, arrays


def chunked(scheme: Scheme, plan: Plan, arrays: dict[str, np.ndarray]) -> None:
    rows = plan.shape[0]
    for r in range(0, rows, CHUNK_ROWS):
        scheme.decode(plan, arrays, r, min(r + CHUNK_ROWS, rows), BF16)


def figures(elements: int, rounds: int) -> list[list[object]]:
    out = np.empty(elements, BF16)
    cases = {
        "NF4 (bf16 state)": group(elements, "nf4", "bfloat16", nested=False),
        "NF4 double quant (bf16 state)": group(elements, "nf4", "bfloat16", nested=True),
        "FP4 (f32 state)": group(elements, "fp4", "float32", nested=False),
    }
    functions: dict[str, Callable[[], object]] = {"np.copy": lambda: np.copy(out)}
    for name, (scheme, plan, arrays) in cases.items():
        functions[name] = partial(scheme.decode, plan, arrays, 0, plan.shape[0], BF16)
        functions[name + ", chunked"] = partial(chunked, scheme, plan, arrays)
    timing = time_interleaved(functions, "np.copy", rounds)
    labels = [label for name in cases for label in (name, name + ", chunked")]
    return [
        timing.row(
            f"{label} -> bf16, {elements >> 20} Mi elements, / np.copy of the output",
            label,
            "np.copy",
            "(none)",
        )
        for label in labels
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements-mi", type=int, default=16, help="Mi elements (16)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (5)")
    args = parser.parse_args()
    rows = figures(args.elements_mi << 20, args.rounds)
    print(describe_machine(), f"cpu pressure (avg60): {cpu_pressure()}")
    print(markdown_table(["figure", "time", "ratio", "target"], rows))


if __name__ == "__main__":
    main()
