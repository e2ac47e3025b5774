"""Quantized checkpoints read through the logical view, end to end, as ratios in one process.

Run from the repository root::

    python benchmarks/bench_schemes.py
    python benchmarks/bench_schemes.py --rows 1024 --rounds 3   # shorter
    KILN_NP_PURE=1 python benchmarks/bench_schemes.py            # the numpy kernels

For each scheme, one safetensors checkpoint holding one ``--rows`` x 4096 weight
(16 Mi elements by default) as that scheme's parts is written to a temporary
directory (no ``config.json``: the parts are recognised by their names and types),
opened with ``kiln_np.open_weights(path).logical()``, and its
``t.dequantize("bfloat16")`` (the file's pages mapped, the parts grouped, the
scheme's decode) is timed against ``np.copy`` of a bfloat16 array of the output's
size, in the same rounds (``_common.time_interleaved``).  Issue 23's targets:
FP8 block-scaled <= 2.5, NVFP4 (both dialects) and GPTQ/AWQ int4 <= 3.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

import kiln_np

COLS = 4096
GROUP = 128


def _parts(scheme: str, rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One weight ``w`` of ``rows`` x COLS as ``scheme``'s parts: random codes, scales
    of a trained model's size (no NaN codes: a real checkpoint has none)."""

    def u8(*shape: int) -> np.ndarray:
        return rng.integers(0, 256, shape, dtype=np.uint8)

    def i32(*shape: int) -> np.ndarray:
        return rng.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32)

    f8 = np.dtype(ml_dtypes.float8_e4m3fn)
    if scheme == "fp8-block":
        codes = u8(rows, COLS)
        codes[(codes & 0x7F) == 0x7F] = 0x38
        scale = rng.uniform(1e-4, 1e-2, (-(-rows // 128), COLS // 128)).astype(np.float32)
        return {"w.weight": codes.view(f8), "w.weight_scale_inv": scale}
    if scheme == "nvfp4-modelopt":
        return {
            "w.weight": u8(rows, COLS // 2),
            "w.weight_scale": rng.uniform(0.5, 400, (rows, COLS // 16)).astype(f8),
            "w.weight_scale_2": np.array(1e-3, np.float32),
        }
    if scheme == "nvfp4-ct":
        return {
            "w.weight_packed": u8(rows, COLS // 2),
            "w.weight_scale": rng.uniform(0.5, 400, (rows, COLS // 16)).astype(f8),
            "w.weight_global_scale": np.array([2000.0], np.float32),
        }
    if scheme == "gptq":  # qweight (in/8, out): the weight is (out, in) = (rows, COLS)
        return {
            "w.qweight": i32(COLS // 8, rows),
            "w.qzeros": i32(COLS // GROUP, rows // 8),
            "w.scales": rng.uniform(1e-3, 1e-2, (COLS // GROUP, rows)).astype(np.float16),
            "w.g_idx": (np.arange(COLS) // GROUP).astype(np.int32),
        }
    if scheme == "awq":  # qweight (in, out/8)
        return {
            "w.qweight": i32(COLS, rows // 8),
            "w.qzeros": i32(COLS // GROUP, rows // 8),
            "w.scales": rng.uniform(1e-3, 1e-2, (COLS // GROUP, rows)).astype(np.float16),
        }
    if scheme == "mxfp4-gpt-oss":
        scales = rng.integers(110, 130, (rows, COLS // 32), dtype=np.uint8)
        return {"w_blocks": u8(rows, COLS // 32, 16), "w_scales": scales}
    raise ValueError(scheme)


SCHEMES = ("fp8-block", "nvfp4-modelopt", "nvfp4-ct", "gptq", "awq", "mxfp4-gpt-oss")
TARGETS = {
    "fp8-block": "<= 2.5",
    **dict.fromkeys(("nvfp4-modelopt", "nvfp4-ct", "gptq", "awq"), "<= 3"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4096, help="rows of 4096 columns (4096)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (5)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    out = np.ones((args.rows, COLS), ml_dtypes.bfloat16)
    functions: dict[str, Callable[[], object]] = {"np.copy": lambda: np.copy(out)}
    with tempfile.TemporaryDirectory() as tmp:
        opened = []
        for scheme in SCHEMES:
            path = Path(tmp) / f"{scheme}.safetensors"
            kiln_np.save_weights(path, _parts(scheme, args.rows, rng), format="safetensors")
            view = kiln_np.open_weights(path).logical()
            opened.append(view)
            (t,) = view.values()
            if not isinstance(t, kiln_np.LogicalTensor) or t.scheme != scheme:
                raise AssertionError(f"{scheme}: read as {t!r}")
            if t.shape != (args.rows, COLS):
                raise AssertionError(f"{scheme}: shape {t.shape}")
            functions[scheme] = partial(t.dequantize, "bfloat16")
        timing = time_interleaved(functions, "np.copy", args.rounds)
        for view in opened:
            view.close()
    n = f"{args.rows * COLS / 2**20:g} Mi"
    table = [
        timing.row(f"{s} -> bf16, {n}, / np.copy of the output", s, "np.copy", TARGETS.get(s, ""))
        for s in SCHEMES
    ]
    table.append(timing.row("np.copy of the bf16 output", "np.copy", "np.copy"))
    print(describe_machine(), f"cpu pressure (avg60): {cpu_pressure()}")
    print(markdown_table(["figure", "time", "ratio", "target"], table))


if __name__ == "__main__":
    main()
