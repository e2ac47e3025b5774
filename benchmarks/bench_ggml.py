"""GGML dequantize (``kiln_np.gguf.dequantize``) per type, as ratios in one process.

Run from the repository root::

    python benchmarks/bench_ggml.py                       # every decodable type, 16 Mi elements
    python benchmarks/bench_ggml.py --types Q4_0,Q4_K --rounds 3
    python benchmarks/bench_ggml.py --ggml /tmp/ggml-build/src/libggml-base.so
    KILN_NP_PURE=1 python benchmarks/bench_ggml.py        # the numpy decoders

For each type: ``kiln_np.gguf.dequantize`` of ``--elements-mi`` Mi elements to
float32, over ``np.copy`` of the float32 output (issue 20's targets: <= 2.0 for
Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4, NVFP4; <= 4.0 for the others), and
the speedup over ``gguf.quants.dequantize`` of the same blocks (>= 5), timed in
a loop of its own (its gigabyte of temporaries slows whatever runs next).  With
``--ggml``, ggml's reference C (``dequantize_row_*`` of libggml-base, one
thread) over ``np.copy`` too, for context.

The blocks are random bytes with their scale fields set to ordinary values
(f16 ``d`` between 2**-10 and 2**-4, e8m0 between 2**-27 and 2**12), as in a
real model: random scale bytes would make one block in 32 subnormal, whose
arithmetic runs at a fraction of the speed on x86 in every implementation.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from collections.abc import Callable
from pathlib import Path

import gguf
import gguf.quants
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    cpu_pressure,
    describe_machine,
    markdown_table,
    speedup_over,
    time_interleaved,
)

from kiln_np import Layout, Payload
from kiln_np import gguf as kgguf
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import DECODERS

FAST = {"Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4", "NVFP4"}

# Byte offsets of each type's f16 scale fields (ggml-common.h's block structs).
F16_SCALES = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q8_1": (0, 2),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ3_XXS": (0,), "IQ1_S": (0,), "IQ4_NL": (0,),
    "IQ3_S": (0,), "IQ2_S": (0,), "IQ4_XS": (0,), "TQ1_0": (52,), "TQ2_0": (64,),
    "Q1_0": (0,), "Q2_0": (0,),
}  # fmt: skip


def blocks_of(name: str, elements: int) -> np.ndarray:
    block = BLOCKS[name]
    rng = np.random.default_rng(block.type_id)
    raw = rng.integers(0, 256, (elements // block.elements, block.bytes), np.uint8)
    for offset in F16_SCALES.get(name, ()):
        d = rng.integers(0x1400, 0x2C00, raw.shape[0]).astype("<u2")
        raw[:, offset : offset + 2] = d.view(np.uint8).reshape(-1, 2)
    if name == "Q8_K":
        raw[:, :4] = np.full(raw.shape[0], 0.01, "<f4").view(np.uint8).reshape(-1, 4)
    if name == "MXFP4":
        raw[:, 0] = rng.integers(100, 140, raw.shape[0])
    if name == "NVFP4":
        raw[:, :4] = rng.integers(0x20, 0x50, (raw.shape[0], 4))
    if name == "IQ1_M":  # its f16 scale is the top nibbles of the last 8 bytes
        raw[:, 48:56:2] &= 0x0F
        raw[:, 49:56:2] = (raw[:, 49:56:2] & 0x0F) | 0x10
    return raw


def ggml_reference(library: str, name: str) -> Callable[[np.ndarray, np.ndarray], None]:
    lib = ctypes.CDLL(library)
    fn = getattr(lib, f"dequantize_row_{name.lower().replace('_k', '_K')}")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lambda src, dst: fn(src.ctypes.data, dst.ctypes.data, dst.size)


def measure(name: str, elements: int, rounds: int, library: str | None) -> list[object]:
    block = BLOCKS[name]
    raw = blocks_of(name, elements)
    payload = Payload(
        block.code,
        raw.reshape(-1).data,
        (raw.shape[0],),
        Layout(block.layout_name, block.bytes),
    )
    out = np.empty(raw.shape[0] * block.elements, np.float32)
    functions: dict[str, Callable[[], object]] = {
        "np.copy": lambda: np.copy(out),
        "kiln_np": lambda: kgguf.dequantize(payload),
    }
    if library is not None and name not in ("Q8_1",):
        reference = ggml_reference(library, name)
        functions["ggml"] = lambda: reference(raw, out)
    timing = time_interleaved(functions, "np.copy", rounds)
    target = "<= 2.0" if name in FAST else "<= 4.0"
    row: list[object] = [name, f"{timing.median('kiln_np') * 1e3:.1f} ms"]
    row += [timing.ratio("kiln_np", "np.copy"), target]
    row.append(timing.ratio("ggml", "np.copy") if "ggml" in functions else "")
    qtype = gguf.GGMLQuantizationType[name] if hasattr(gguf.quants, name) else None
    theirs = None if qtype is None else (lambda: gguf.quants.dequantize(raw, qtype))
    row.append(speedup_over(lambda: kgguf.dequantize(payload), theirs, rounds))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements-mi", type=int, default=16, help="Mi elements (16)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (5)")
    parser.add_argument("--types", default="", help="comma-separated GGML names (all)")
    parser.add_argument("--ggml", default=None, help="path of libggml-base.so, for context")
    args = parser.parse_args()
    names = [n for n in args.types.split(",") if n] or [n for n in BLOCKS if n in DECODERS]
    rows = [measure(n, args.elements_mi << 20, args.rounds, args.ggml) for n in names]
    print(describe_machine(), f"cpu pressure (avg60): {cpu_pressure()}")
    header = ["type", "time", "/ np.copy", "target", "ggml C / np.copy", "speedup over gguf-py"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
