"""Whole-byte decode, bool validation and per-call overhead, as ratios in one process.

Run from the repository root::

    python benchmarks/bench_decode.py
    python benchmarks/bench_decode.py --large-mib 64   # a smaller large payload

Three questions, each answered by a ratio of times measured in the same rounds:

1. Whole-byte decode is zero-copy: ``to_numpy`` of a large f32 payload costs
   about what a 1 KiB one costs (target: ratio <= 2).
2. bool validation is one reduction: ``to_numpy`` of a large bool payload
   against ``np.max`` over the same bytes (target: ratio <= 1), and
   ``from_numpy`` of a bool array against the same reduction.
3. Small calls stay cheap: microseconds per call of a 3-element u4 decode,
   next to ``np.frombuffer`` of the same bytes and a 3-byte u8 decode (the
   codec's fixed cost, without the 4-bit kernel).
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

from _common import (
    cpu_pressure,
    describe_machine,
    format_size,
    markdown_table,
    time_interleaved,
)

import kiln_np
from kiln_np import Code


def zero_copy(large: int, rounds: int) -> list[list[object]]:
    """to_numpy(f32) of 1 KiB and of ``large`` bytes; np.frombuffer alongside."""
    small_buf = bytes(1024)
    large_buf = bytes(large)
    functions: dict[str, Callable[[], object]] = {
        "1 KiB": partial(kiln_np.to_numpy, Code.F32, small_buf, (256,)),
        "large": partial(kiln_np.to_numpy, Code.F32, large_buf, (large // 4,)),
        "frombuffer 1 KiB": partial(np.frombuffer, small_buf, "<f4"),
        "frombuffer large": partial(np.frombuffer, large_buf, "<f4"),
    }
    timing = time_interleaved(functions, "1 KiB", rounds)
    return [
        [
            f"to_numpy(f32), {format_size(large)}B vs 1 KiB",
            f"{timing.median('large') * 1e6:.2f} µs vs {timing.median('1 KiB') * 1e6:.2f} µs",
            timing.ratio("large", "1 KiB"),
            "<= 2",
        ],
        [
            f"np.frombuffer, {format_size(large)}B vs 1 KiB",
            f"{timing.median('frombuffer large') * 1e6:.2f} µs vs "
            f"{timing.median('frombuffer 1 KiB') * 1e6:.2f} µs",
            timing.ratio("frombuffer large", "frombuffer 1 KiB"),
            "",
        ],
    ]


def bool_validation(large: int, rounds: int) -> list[list[object]]:
    """bool decode and encode of ``large`` bytes against one reduction over them."""
    rng = np.random.default_rng(0)
    buf = rng.integers(0, 2, large, dtype=np.uint8).tobytes()
    # Every call reads the same memory (a bytes object: no huge pages, unlike
    # numpy's own large allocations), so the ratios compare work, not TLBs.
    flags = np.frombuffer(buf, np.uint8)
    array = flags.view(np.bool_)
    functions: dict[str, Callable[[], object]] = {
        "np.max": flags.max,
        "np.any": flags.any,
        "to_numpy": partial(kiln_np.to_numpy, Code.BOOL, buf, (large,)),
        "from_numpy": partial(kiln_np.from_numpy, array),
    }
    timing = time_interleaved(functions, "np.max", rounds)
    ms = f"{timing.median('np.max') * 1e3:.1f} ms"
    return [
        [
            f"to_numpy(bool), {format_size(large)}B, vs np.max ({ms})",
            f"{timing.median('to_numpy') * 1e3:.1f} ms",
            timing.ratio("to_numpy", "np.max"),
            "<= 1",
        ],
        [
            f"from_numpy(bool), {format_size(large)}B, vs np.max",
            f"{timing.median('from_numpy') * 1e3:.1f} ms",
            timing.ratio("from_numpy", "np.max"),
            "<= 1",
        ],
        [
            f"np.any, {format_size(large)}B, vs np.max",
            f"{timing.median('np.any') * 1e3:.1f} ms",
            timing.ratio("np.any", "np.max"),
            "",
        ],
    ]


def small_calls(rounds: int) -> list[list[object]]:
    """Microseconds per call for three elements."""
    u4 = np.array([1, 2, 3], np.uint8).view(ml_dtypes.uint4)
    functions: dict[str, Callable[[], object]] = {
        "np.frombuffer(b'\\x21\\x03', uint8)": partial(np.frombuffer, b"\x21\x03", np.uint8),
        "to_numpy(17, b'\\x21\\x03', (3,))  [u4]": partial(
            kiln_np.to_numpy, Code.U4, b"\x21\x03", (3,)
        ),
        "unpack_nibbles(b'\\x21\\x03', 3)": partial(kiln_np.unpack_nibbles, b"\x21\x03", 3),
        "to_numpy(9, b'\\x01\\x02\\x03', (3,))  [u8]": partial(
            kiln_np.to_numpy, Code.U8, b"\x01\x02\x03", (3,)
        ),
        "from_numpy(3 x uint4)": partial(kiln_np.from_numpy, u4),
        "pack_nibbles([1, 2, 3] as uint8)": partial(kiln_np.pack_nibbles, u4.view(np.uint8)),
    }
    baseline = next(iter(functions))
    timing = time_interleaved(functions, baseline, rounds)
    return [
        [name, f"{timing.median(name) * 1e6:.2f} µs", timing.ratio(name, baseline), ""]
        for name in functions
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--large-mib", type=int, default=256, help="size of the large payloads (default 256)"
    )
    parser.add_argument("--rounds", type=int, default=11, help="timing rounds (default 11)")
    args = parser.parse_args(argv)
    large = args.large_mib << 20
    machine = describe_machine()
    print(
        f"cores: {machine['cores']} (kiln_np threads: {machine['kiln_np_threads']}), "
        f"{machine['cpu']}, Python {machine['python']}, numpy {machine['numpy']}; "
        f"median of {args.rounds} interleaved rounds\n"
    )
    rows = zero_copy(large, args.rounds) + bool_validation(large, args.rounds)
    print(markdown_table(["measurement", "time", "ratio", "target"], rows))
    print()
    print(
        markdown_table(
            ["call (3 elements)", "per call", "ratio to np.frombuffer", ""],
            small_calls(args.rounds),
        )
    )
    print(f"\nCPU pressure (avg60) at the end: {cpu_pressure()}")


if __name__ == "__main__":
    main()
