"""``kiln_np.describe(values, scales)`` of a block-scaled (MXFP4) tensor, against
the naive way: dequantize every element, then numpy's float64 statistics.

Run from the repository root::

    python benchmarks/bench_describe_scaled.py                    # 64 Mi elements
    python benchmarks/bench_describe_scaled.py --elements 530000000 --rounds 1
    python benchmarks/bench_describe_scaled.py --elements 134217728 --once

The tensor is gpt-oss shaped: rows of 2880 e2m1 elements (one per byte, as
ml_dtypes stores them) in blocks of 32 along the last axis, random codes, e8m0
scale bytes 112-131.  Figures, medians of ``--rounds`` interleaved rounds:

- describe's time over **naive float64**: ``kiln_np.mx.dequantize(values,
  scales, dtype=numpy.float64)`` then ``min``, ``max``, ``mean``, ``std``;
- describe's time over **naive float32**: ``kiln_np.mx.dequantize`` to float32
  (the compiled MXFP4 kernel) then ``min``, ``max`` and ``mean``/``std`` with a
  float64 accumulator;
- the same describe on the numpy kernels (``KILN_NP_PURE=1``'s path).

``--once`` times one describe call only, of whatever ``kiln_np`` is imported:
run it with ``PYTHONPATH`` at an older tree's ``src`` to time the code before.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

import kiln_np

ROW = 2880
"""gpt-oss's hidden size: elements per row."""


def mxfp4(elements: int) -> tuple[np.ndarray, np.ndarray]:
    """A random MXFP4 tensor of ``elements // 2880`` rows of 2880."""
    rng = np.random.default_rng(0)
    rows = max(1, elements // ROW)
    values = rng.integers(0, 16, (rows, ROW), dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    scales = rng.integers(112, 132, (rows, ROW // 32), dtype=np.uint8)
    return values, scales.view(ml_dtypes.float8_e8m0fnu)


def naive(values: np.ndarray, scales: np.ndarray, dtype: type) -> tuple[float, ...]:
    """Dequantize every element, then numpy's statistics accumulated in float64."""
    x = kiln_np.mx.dequantize(values, scales, dtype=dtype)
    return (
        float(x.min()),
        float(x.max()),
        float(x.mean(dtype=np.float64)),
        float(x.std(dtype=np.float64)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=64 << 20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--once", action="store_true", help="time one describe call only")
    parser.add_argument("--no-baseline", action="store_true", help="skip the naive ways")
    args = parser.parse_args()
    values, scales = mxfp4(args.elements)
    print(describe_machine(), "cpu pressure (avg60):", cpu_pressure())
    print(f"kiln_np from {Path(kiln_np.__file__).parent}; MXFP4 {values.shape}, {values.size} el.")
    if args.once:
        start = time.perf_counter()
        d = kiln_np.describe(values, scales)
        seconds = time.perf_counter() - start
        print(f"describe once: {seconds:.3f} s ({seconds / values.size * 1e9:.2f} ns/element)")
        print(
            "dequantized min/max/mean/std:",
            d.dequantized.min,
            d.dequantized.max,
            d.dequantized.mean,
            d.dequantized.std,
        )
        return

    from kiln_np._kernels import backend

    compiled = backend.COMPILED

    def numpy_path() -> object:
        backend.COMPILED = False
        try:
            return kiln_np.describe(values, scales)
        finally:
            backend.COMPILED = compiled

    functions = {
        "describe": lambda: kiln_np.describe(values, scales),
        "describe (numpy)": numpy_path,
    }
    if not args.no_baseline:
        functions["naive f64"] = lambda: naive(values, scales, np.float64)
        functions["naive f32"] = lambda: naive(values, scales, np.float32)
    baseline = "describe"
    timing = time_interleaved(functions, baseline, args.rounds)
    n = values.size
    rows = []
    for name in functions:
        t = timing.median(name)
        ratio = timing.ratio(baseline, name) if name != baseline else 1.0
        rows.append([name, f"{t * 1e3:.1f} ms", f"{t / n * 1e9:.2f}", ratio])
    print(markdown_table(["what", "time", "ns/element", "describe / this"], rows))
    d = kiln_np.describe(values, scales)
    if not args.no_baseline:
        lo, hi, mean, std = naive(values, scales, np.float64)
        assert (d.dequantized.min, d.dequantized.max) == (lo, hi)
        assert d.dequantized.mean is not None
        assert d.dequantized.std is not None
        print(
            "relative difference from numpy's float64 mean / std:",
            f"{abs(d.dequantized.mean - mean) / abs(mean):.1e}",
            f"{abs(d.dequantized.std - std) / std:.1e}",
        )
    print("cpu pressure (avg60) at the end:", cpu_pressure())


if __name__ == "__main__":
    main()
