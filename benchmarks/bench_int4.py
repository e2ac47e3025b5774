"""GPTQ, AWQ and compressed-tensors pack-quantized int4 -> bf16 dequantize, against
``np.copy`` of the bf16 output.

Run from the repository root::

    python benchmarks/bench_int4.py              # 4096 x 4096, groups of 128
    python benchmarks/bench_int4.py --rounds 9

Each scheme's parts for a 4096 x 4096 weight (16 Mi elements, groups of 128
columns, random codes, zeros and float16 scales; GPTQ's with and without a
``desc_act`` permutation of the groups) are decoded whole by the scheme's
``decode`` to bfloat16; the baseline is ``np.copy`` of a 32 MiB bf16 array (the
output), timed interleaved in the same process.  Target (issue 23): <= 3.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import describe_machine, time_interleaved

from kiln_np._core.table import as_dtype
from kiln_np._schemes.int4 import AWQ, GPTQ, PACK_QUANTIZED
from kiln_np._schemes.scheme import Facts, Scheme


def _facts(arrays: dict[str, np.ndarray]) -> dict[str, Facts]:
    kinds = {"int32": "i32", "float16": "f16", "int64": "i64"}
    return {
        r: Facts(r, kinds[a.dtype.name], a.shape, partial(np.asarray, a)) for r, a in arrays.items()
    }


def _words(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32).view(np.int32)


def _cases(n: int, group: int) -> dict[str, tuple[Scheme, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(0)
    groups = n // group
    scales = rng.uniform(-0.01, 0.01, (groups, n)).astype(np.float16)
    gptq = {
        "qweight": _words(rng, (n // 8, n)),
        "qzeros": _words(rng, (groups, n // 8)),
        "scales": scales,
    }
    desc = dict(gptq, g_idx=(rng.permutation(n) // group).astype(np.int32))
    awq = {"qweight": _words(rng, (n, n // 8)), "qzeros": gptq["qzeros"], "scales": scales}
    packed = {
        "packed": _words(rng, (n, n // 8)),
        "scale": np.ascontiguousarray(scales.T),
        "shape": np.array([n, n], np.int64),
    }
    return {
        "gptq": (GPTQ, gptq),
        "gptq desc_act": (GPTQ, desc),
        "awq": (AWQ, awq),
        "pack-quantized": (PACK_QUANTIZED, packed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="rows = columns of the weight")
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(describe_machine())
    bf16 = as_dtype("bfloat16")
    baseline = np.zeros((args.n, args.n), bf16)
    functions: dict[str, Callable[[], object]] = {"copy": partial(np.copy, baseline)}
    for label, (scheme, arrays) in _cases(args.n, args.group).items():
        config = {"quant_method": scheme.name} if scheme is not PACK_QUANTIZED else {}
        plan = scheme.plan("w.weight", _facts(arrays), config)
        rows = plan.shape[0]
        functions[label] = partial(scheme.decode, plan, arrays, 0, rows, bf16)
    timing = time_interleaved(functions, "copy", args.rounds)
    print(f"{args.n} x {args.n} ({args.n * args.n / 2**20:g} Mi elements), groups of {args.group}")
    print(f"  np.copy of the bf16 output: {timing.median('copy') * 1e3:.2f} ms")
    for label in functions:
        if label != "copy":
            ms, ratio = timing.median(label) * 1e3, timing.ratio(label, "copy")
            print(f"  {label:<15} -> bf16: {ms:7.2f} ms, / np.copy {ratio:.2f}")
    print("  target (issue 23, GPTQ and AWQ): <= 3")


if __name__ == "__main__":
    main()
