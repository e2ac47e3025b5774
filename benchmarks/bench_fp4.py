"""The e2m1 schemes' decode (kiln_np._schemes.fp4) against ``np.copy`` of its output.

Run from the repository root::

    python benchmarks/bench_fp4.py              # 16 Mi elements, 7 rounds
    python benchmarks/bench_fp4.py --rounds 3 --pure

One logical tensor of 4096 x 4096 elements per scheme (random code bytes, sane
scales), decoded whole (``Scheme.decode`` over every row: the block scales'
float32 arithmetic and the kernel) to bfloat16, and to float32 and float16 for
reference; the baseline is ``np.copy`` of a bfloat16 array of as many elements,
timed in the same rounds.  Target (issue 23): NVFP4 of either dialect to
bfloat16 <= 3 x the copy.  ``--pure`` also times the numpy kernels.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import describe_machine, time_interleaved

from kiln_np._kernels import backend
from kiln_np._kernels.pool import _threads
from kiln_np._schemes.fp4 import MXFP4_GPT_OSS, NVFP4_CT, NVFP4_MODELOPT
from kiln_np._schemes.scheme import Facts, Scheme

ROWS = COLUMNS = 4096


def _reader(array: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: array


def _facts(parts: dict[str, np.ndarray], kinds: dict[str, str]) -> dict[str, Facts]:
    return {
        role: Facts(role, kinds[role], array.shape, _reader(array)) for role, array in parts.items()
    }


def _cases() -> dict[str, tuple[Scheme, dict[str, np.ndarray], dict[str, str]]]:
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (ROWS, COLUMNS // 2), dtype=np.uint8)
    e4m3 = rng.uniform(0.01, 400.0, (ROWS, COLUMNS // 16)).astype(ml_dtypes.float8_e4m3fn)
    e8m0 = rng.integers(110, 135, (ROWS, COLUMNS // 32), dtype=np.uint8)
    return {
        "nvfp4-modelopt": (
            NVFP4_MODELOPT,
            {
                "weight": packed,
                "weight_scale": e4m3,
                "weight_scale_2": np.array(0.0012, np.float32),
            },
            {"weight": "u8", "weight_scale": "f8e4m3", "weight_scale_2": "f32"},
        ),
        "nvfp4-ct": (
            NVFP4_CT,
            {
                "weight_packed": packed,
                "weight_scale": e4m3,
                "weight_global_scale": np.array([833.0], np.float32),
            },
            {"weight_packed": "u8", "weight_scale": "f8e4m3", "weight_global_scale": "f32"},
        ),
        "mxfp4-gpt-oss": (
            MXFP4_GPT_OSS,
            {"blocks": packed.reshape(ROWS, COLUMNS // 32, 16), "scales": e8m0},
            {"blocks": "u8", "scales": "u8"},
        ),
    }


def _decoder(
    scheme: Scheme, parts: dict[str, np.ndarray], kinds: dict[str, str], dtype: Any
) -> Callable[[], object]:
    plan = scheme.plan("bench", _facts(parts, kinds), {})
    out_dtype = np.dtype(dtype)
    return lambda: scheme.decode(plan, parts, 0, plan.shape[0], out_dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pure", action="store_true", help="also time the numpy kernels")
    args = parser.parse_args()
    print(describe_machine(), f"threads={_threads()}", f"compiled={backend.COMPILED}")
    baseline = np.ones(ROWS * COLUMNS, ml_dtypes.bfloat16)
    functions: dict[str, Callable[[], object]] = {"copy": lambda: np.copy(baseline)}
    for name, (scheme, parts, kinds) in _cases().items():
        for dtype in ("bfloat16", "float32", "float16"):
            dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
            functions[f"{name} -> {dtype}"] = _decoder(scheme, parts, kinds, dt)
    timing = time_interleaved(functions, "copy", args.rounds)
    print(f"np.copy of {ROWS * COLUMNS} bfloat16: {timing.median('copy') * 1e3:.2f} ms")
    for name in functions:
        if name != "copy":
            ratio = timing.ratio(name, "copy")
            target = " (<= 3)" if name.startswith("nvfp4") and name.endswith("bfloat16") else ""
            print(f"  {name:<28} {timing.median(name) * 1e3:8.2f} ms  {ratio:6.2f} x copy{target}")
    if args.pure and backend.COMPILED:
        backend.COMPILED = False
        try:
            pure = {"copy": functions["copy"]}
            for name, (scheme, parts, kinds) in _cases().items():
                pure[f"{name} -> bfloat16 (numpy)"] = _decoder(
                    scheme, parts, kinds, ml_dtypes.bfloat16
                )
            timing = time_interleaved(pure, "copy", max(1, args.rounds // 3))
            for name in pure:
                if name != "copy":
                    ratio = timing.ratio(name, "copy")
                    print(f"  {name:<36} {timing.median(name) * 1e3:8.2f} ms  {ratio:6.2f} x copy")
        finally:
            backend.COMPILED = True


if __name__ == "__main__":
    main()
