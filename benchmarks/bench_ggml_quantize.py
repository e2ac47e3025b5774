"""GGML quantize (``kiln_np.gguf.quantize``) per type, as ratios in one process.

Run from the repository root::

    python benchmarks/bench_ggml_quantize.py                  # every type, 16 Mi elements
    python benchmarks/bench_ggml_quantize.py --types Q8_0,Q4_K --rounds 3
    python benchmarks/bench_ggml_quantize.py --ggml /tmp/ggml-build/src/libggml-base.so
    python benchmarks/bench_ggml_quantize.py --imatrix --ggml LIB   # with importance weights
    KILN_NP_PURE=1 python benchmarks/bench_ggml_quantize.py --elements-mi 1   # numpy
    python benchmarks/bench_ggml_quantize.py --imatrix --types IQ2_XXS,IQ1_S --ggml LIB

For each type: ``kiln_np.gguf.quantize`` of ``--elements-mi`` Mi float32
elements (normal, one scale per row of 4096, as in a weight matrix), over
``np.copy`` of the float32 input, against issue 21's target; with ``--ggml``,
ggml's own ``ggml_quantize_chunk`` (libggml-base, no importance matrix, one
thread) over ``np.copy`` too, and the speedup over it; and the speedup over
gguf-py's ``gguf.quants.quantize`` for the types it quantizes.

With ``--imatrix``: every type kiln_np quantizes with an importance matrix
(``quantize_into`` with one log-normal weight row of 4096, as ``llama-imatrix``'s
mean squared activations spread), ggml's ``ggml_quantize_chunk`` given the same
row as ``quant_weights``, no target and no gguf-py (which takes none).
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

from kiln_np import gguf as kgguf
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.quantize import ENCODERS, WEIGHTED_KERNELS, quantize_into

TARGETS = {
    "Q8_0": 2.5, "Q4_0": 2.5, "MXFP4": 4.0,
    "Q6_K": 30.0, "NVFP4": 20.0, "Q4_K": 60.0, "Q2_K": 50.0, "IQ4_XS": 180.0,
}  # fmt: skip
GGUF_PY = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4")
ROW = 4096


def ggml_quantizer(
    library: str, name: str, weights: np.ndarray | None
) -> Callable[[np.ndarray, np.ndarray], None]:
    lib = ctypes.CDLL(library)
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ctypes.c_int, ptr, ptr, i64, i64, i64, ptr]
    type_id = BLOCKS[name].type_id
    qw = None if weights is None else weights.ctypes.data
    return lambda x, dst: fn(type_id, x.ctypes.data, dst.ctypes.data, 0, x.shape[0], ROW, qw)


def measure(
    name: str, elements: int, rounds: int, library: str | None, imatrix: bool
) -> list[object]:
    block = BLOCKS[name]
    rng = np.random.default_rng(block.type_id)
    x = rng.standard_normal((elements // ROW, ROW), dtype=np.float32)
    x *= (10.0 ** rng.uniform(-3, 0, (x.shape[0], 1))).astype(np.float32)
    weights = np.exp(rng.normal(0, 2, ROW)).astype(np.float32) if imatrix else None
    out = np.empty(x.size // block.elements * block.bytes, np.uint8)
    functions: dict[str, Callable[[], object]] = {
        "np.copy": lambda: np.copy(x),
        "kiln_np": (
            (lambda: kgguf.quantize(x, name))
            if weights is None
            else (lambda: quantize_into(name, x.reshape(-1), out, weights))
        ),
    }
    if library is not None:
        reference = ggml_quantizer(library, name, weights)
        dst = np.empty(x.size // block.elements * block.bytes, np.uint8)
        functions["ggml"] = lambda: reference(x, dst)
    timing = time_interleaved(functions, "np.copy", rounds)
    target = None if imatrix else TARGETS.get(name)
    row: list[object] = [name, f"{timing.median('kiln_np') * 1e3:.1f} ms"]
    row += [timing.ratio("kiln_np", "np.copy"), f"<= {target:g}" if target else ""]
    if "ggml" in functions:
        row += [timing.ratio("ggml", "np.copy"), timing.ratio("ggml", "kiln_np")]
    else:
        row += ["", ""]
    qtype = gguf.GGMLQuantizationType[name] if name in GGUF_PY and not imatrix else None
    theirs = None if qtype is None else (lambda: gguf.quants.quantize(x, qtype))
    row.append(speedup_over(functions["kiln_np"], theirs, rounds))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements-mi", type=int, default=16, help="Mi elements (16)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (5)")
    parser.add_argument("--types", default="", help="comma-separated GGML names (all)")
    parser.add_argument("--ggml", default=None, help="path of libggml-base.so")
    parser.add_argument("--imatrix", action="store_true", help="with an importance matrix")
    args = parser.parse_args()
    every = list(WEIGHTED_KERNELS if args.imatrix else ENCODERS)
    names = [n.upper() for n in args.types.split(",") if n] or every
    elements = args.elements_mi << 20
    rows = [measure(n, elements, args.rounds, args.ggml, args.imatrix) for n in names]
    print(describe_machine(), f"cpu pressure (avg60): {cpu_pressure()}")
    header = ["type", "time", "/ np.copy", "target", "ggml C / np.copy", "speedup over ggml"]
    print(markdown_table([*header, "speedup over gguf-py"], rows))


if __name__ == "__main__":
    main()
