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
3. Small calls stay cheap (issue 14's targets): microseconds per call of
   ``to_numpy`` of 100 u4 and 100 f32 elements and ``from_numpy`` of 100 f32
   elements, as ratios to ``np.frombuffer`` of the 400-byte payload (targets 6,
   4 and 6), with 3-element 4-bit calls alongside.

Two more sections: ``mxfp4`` (the compiled MXFP4 dequantize kernel against
``np.copy`` and gguf-py) and ``huge-pages`` (unpacking 64 Mi elements into a plain
``np.empty`` and into the huge-page-aligned output kiln_np allocates, against
``np.copy``).
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
    peak_bytes,
    time_interleaved,
)

import kiln_np
from kiln_np import Code, to_numpy

U4, F32, BOOL = int(Code.U4), int(Code.F32), int(Code.BOOL)  # int codes: the common case


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
        timing.row(
            f"to_numpy(bool), {format_size(large)}B, vs np.max ({ms})", "to_numpy", "np.max", "<= 1"
        ),
        timing.row(
            f"from_numpy(bool), {format_size(large)}B, vs np.max", "from_numpy", "np.max", "<= 1"
        ),
        timing.row(f"np.any, {format_size(large)}B, vs np.max", "np.any", "np.max"),
    ]


def small_calls(rounds: int) -> list[list[object]]:
    """Microseconds per call of small decodes and encodes, as ratios to
    ``np.frombuffer`` of the same payload (issue 14's targets)."""
    u4_100 = bytes(range(50))
    f32_100 = np.arange(100, dtype="<f4")
    f32_bytes = f32_100.tobytes()
    u4 = np.array([1, 2, 3], np.uint8).view(ml_dtypes.uint4)
    rows: list[tuple[str, Callable[[], object], str]] = [
        ("np.frombuffer(400 bytes, uint8)", partial(np.frombuffer, f32_bytes, np.uint8), ""),
        ("to_numpy(17, 50 bytes, (100,))  [u4]", partial(to_numpy, U4, u4_100, (100,)), "<= 6"),
        (
            "to_numpy(2, 400 bytes, (100,))  [f32]",
            partial(to_numpy, F32, f32_bytes, (100,)),
            "<= 4",
        ),
        ("from_numpy(100 x f32)", partial(kiln_np.from_numpy, f32_100), "<= 6"),
        ("to_numpy(17, b'\\x21\\x03', (3,))  [u4]", partial(to_numpy, U4, b"\x21\x03", (3,)), ""),
        ("unpack_nibbles(b'\\x21\\x03', 3)", partial(kiln_np.unpack_nibbles, b"\x21\x03", 3), ""),
        ("from_numpy(3 x uint4)", partial(kiln_np.from_numpy, u4), ""),
        ("pack_nibbles([1, 2, 3] as uint8)", partial(kiln_np.pack_nibbles, u4.view(np.uint8)), ""),
    ]
    functions = {name: fn for name, fn, _ in rows}
    baseline = rows[0][0]
    timing = time_interleaved(functions, baseline, rounds)
    return [
        [name, f"{timing.median(name) * 1e6:.2f} µs", timing.ratio(name, baseline), target]
        for name, _, target in rows
    ]


def error_memory(mib: int) -> list[list[object]]:
    """Peak extra memory (tracemalloc) of rejecting a bad payload of ``mib`` MiB
    whose every element is bad, the input allocated before the measurement."""
    n = mib << 20
    bad_bool = b"\x02" * n
    bad_u8 = np.full(n, 0x10, np.uint8)
    bad_i16 = np.full(n, 16, np.int16)
    out = np.empty(n // 2, np.uint8)
    cases: list[tuple[str, Callable[[], object]]] = [
        (f"to_numpy(7, {mib} MiB of 0x02, ...)  [bool]", partial(to_numpy, BOOL, bad_bool, (n,))),
        (
            f"from_numpy({mib} Mi bools stored as 0x02)",
            partial(kiln_np.from_numpy, np.frombuffer(bad_bool, np.bool_)),
        ),
        (f"pack_nibbles({mib} Mi x 0x10 uint8, out=)", partial(pack_out, bad_u8, out)),
        (f"pack_nibbles({mib} Mi x 16 int16, out=)", partial(pack_out, bad_i16, out)),
        (
            f"from_numpy({mib} Mi uint4 stored as 0x10, out=)",
            partial(kiln_np.from_numpy, bad_u8.view(ml_dtypes.uint4), out=out),
        ),
    ]
    rows: list[list[object]] = []
    for name, call in cases:
        peak = peak_bytes(partial(expect_type_error, call))
        rows.append([name, f"{peak / 2**20:.2f} MiB", peak / n])
    return rows


def mxfp4_kernel(elements: int, rounds: int) -> list[list[object]]:
    """The compiled MXFP4 dequantize kernel alone (``_block_scaled.mxfp4_to_float32_into``,
    what :mod:`kiln_np.mx` calls for float32 output) on ``elements`` e2m1 elements
    with e8m0 scales per 32, against ``np.copy`` of the float32 output, ``mx.dequantize``
    and, when gguf imports, ``gguf.quants.dequantize`` of the same blocks."""
    from kiln_np import mx
    from kiln_np._kernels import block_scaled as _block_scaled

    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, elements, dtype=np.uint8)
    scales = rng.integers(110, 140, elements // 32, dtype=np.uint8)
    packed = kiln_np.pack_nibbles(codes)
    reference = np.empty(elements, np.float32)
    if not _block_scaled.mxfp4_to_float32_into(packed, scales, reference, 32, packed=True):
        return [["mxfp4 kernel", "not built (numpy kernels)", "", ""]]

    def kernel() -> np.ndarray:
        out = np.empty(elements, np.float32)
        _block_scaled.mxfp4_to_float32_into(packed, scales, out, 32, packed=True)
        return out

    functions: dict[str, Callable[[], object]] = {
        "np.copy": partial(np.copy, reference),
        "kernel": kernel,
        "mx.dequantize": partial(
            mx.dequantize,
            codes.view(ml_dtypes.float4_e2m1fn),
            scales.view(ml_dtypes.float8_e8m0fnu),
        ),
    }
    try:
        import gguf  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        pass
    else:
        blocks = np.concatenate([scales[:, None], packed.reshape(-1, 16)], axis=1)
        # GGUF's block: scale byte, then elements 0-15 in low nibbles, 16-31 in high ones.
        halves = codes.reshape(-1, 2, 16)
        blocks[:, 1:] = halves[:, 0] | halves[:, 1] << 4
        functions["gguf"] = partial(gguf.quants.dequantize, blocks, gguf.GGMLQuantizationType.MXFP4)
    timing = time_interleaved(functions, "np.copy", rounds)
    ms = f"{timing.median('np.copy') * 1e3:.2f} ms"
    rows: list[list[object]] = [
        timing.row(
            f"MXFP4 kernel, {format_size(elements)} elements to float32, / np.copy ({ms})",
            "kernel",
            "np.copy",
            "<= 2.5",
            digits=2,
        ),
        timing.row(
            "mx.dequantize (as it is now), same input, / np.copy",
            "mx.dequantize",
            "np.copy",
            digits=2,
        ),
    ]
    if "gguf" in functions:
        rows.append(
            timing.row(
                "speedup of the kernel over gguf.quants.dequantize",
                "gguf",
                "kernel",
                ">= 6",
                digits=2,
            )
        )
    return rows


def pack_out(values: np.ndarray, out: np.ndarray) -> object:
    return kiln_np.pack_nibbles(values, out=out)


def expect_type_error(call: Callable[[], object]) -> None:
    try:
        call()
    except kiln_np.KilnError as exc:
        if exc.kind != "TYPE":
            raise
    else:
        raise SystemExit("a bad payload was accepted")


def huge_pages(elements: int, rounds: int) -> list[list[object]]:
    """4-bit unpack of ``elements`` into a fresh output, plain ``np.empty`` against
    the huge-page-aligned output kiln_np allocates (``_pool.empty``), as ratios to
    ``np.copy`` of an array of the output's size."""
    from kiln_np._kernels import nibbles as _nibbles
    from kiln_np._kernels import pool as _pool

    packed = np.frombuffer(np.random.default_rng(0).bytes(elements // 2), np.uint8)
    values = np.ones(elements, np.uint8)

    def unpack_into(out: Callable[[], np.ndarray]) -> None:
        _nibbles.unpack_into(packed, out(), elements)

    functions: dict[str, Callable[[], object]] = {
        "np.copy": partial(np.copy, values),
        "plain": partial(unpack_into, partial(np.empty, elements, np.uint8)),
        "aligned": partial(unpack_into, partial(_pool.empty, elements, np.uint8, elements)),
    }
    timing = time_interleaved(functions, "np.copy", rounds)
    size = format_size(elements)
    return [
        timing.row(
            f"unpack {size} elements into np.empty, / np.copy", "plain", "np.copy", digits=2
        ),
        timing.row(
            f"unpack {size} elements into _pool.empty (huge-page aligned), / np.copy",
            "aligned",
            "np.copy",
            digits=2,
        ),
    ]


SECTIONS = ("zero-copy", "bool", "small", "error-memory", "mxfp4", "huge-pages")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--large-mib", type=int, default=256, help="size of the large payloads (default 256)"
    )
    parser.add_argument(
        "--error-mib", type=int, default=64, help="size of the rejected payloads (default 64)"
    )
    parser.add_argument(
        "--mx-elements", type=int, default=16 << 20, help="MXFP4 elements (default 16 Mi)"
    )
    parser.add_argument("--rounds", type=int, default=11, help="timing rounds (default 11)")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, from {', '.join(SECTIONS)} (default: all)",
    )
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))
    large = args.large_mib << 20
    machine = describe_machine()
    print(
        f"cores: {machine['cores']} (kiln_np threads: {machine['kiln_np_threads']}), "
        f"{machine['cpu']}, Python {machine['python']}, numpy {machine['numpy']}; "
        f"kernels: {machine['kernels']}; median of {args.rounds} interleaved rounds\n"
    )
    rows = zero_copy(large, args.rounds) if "zero-copy" in sections else []
    rows += bool_validation(large, args.rounds) if "bool" in sections else []
    if rows:
        print(markdown_table(["measurement", "time", "ratio", "target"], rows))
        print()
    if "small" in sections:
        print(
            markdown_table(
                ["call", "per call", "ratio to np.frombuffer", "target"],
                small_calls(args.rounds),
            )
        )
        print()
    if "mxfp4" in sections:
        print(
            markdown_table(
                ["measurement", "time", "ratio", "target"],
                mxfp4_kernel(args.mx_elements, min(args.rounds, 3)),  # gguf: seconds a call
            )
        )
        print()
    if "huge-pages" in sections:
        print(
            markdown_table(
                ["measurement", "time", "ratio", "target"],
                huge_pages(64 << 20, max(args.rounds, 25)),
            )
        )
        print()
    if "error-memory" in sections:
        print(
            markdown_table(
                ["rejected call (TYPE error)", "peak extra memory", "/ input elements"],
                error_memory(args.error_mib),
            )
        )
        print()
    print(f"CPU pressure (avg60) at the end: {cpu_pressure()}")


if __name__ == "__main__":
    main()
