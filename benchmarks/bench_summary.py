"""``Weights.summary()`` of a 1,000-tensor checkpoint, as a ratio to opening and
listing it (issue 22's target: <= 2).

    python benchmarks/bench_summary.py [--rounds 21]

The checkpoint (written by this script to a temporary directory) is llama-like:
an embedding and 111 layers of 9 tensors, bf16 and f32, 1,000 tensors in all,
once as one safetensors file and once as a GGUF file.  Both sides open the file
afresh on every call (headers only):

- the baseline opens it and lists every tensor's name, shape, stored type and
  bytes (what ``kiln-np ls`` reads);
- the summary opens it and renders ``str(weights.summary())`` (totals, the table
  by type, the folded tree).
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
from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

import kiln_np

LAYER = {
    "attn_norm.weight": ((64,), np.float32),
    "attn_q.weight": ((64, 64), ml_dtypes.bfloat16),
    "attn_k.weight": ((16, 64), ml_dtypes.bfloat16),
    "attn_v.weight": ((16, 64), ml_dtypes.bfloat16),
    "attn_output.weight": ((64, 64), ml_dtypes.bfloat16),
    "ffn_norm.weight": ((64,), np.float32),
    "ffn_gate.weight": ((128, 64), ml_dtypes.bfloat16),
    "ffn_up.weight": ((128, 64), ml_dtypes.bfloat16),
    "ffn_down.weight": ((64, 128), ml_dtypes.bfloat16),
}


def checkpoint() -> dict[str, np.ndarray]:
    """1,000 tensors: an embedding and 111 layers of 9."""
    tensors = {"token_embd.weight": np.zeros((256, 64), ml_dtypes.bfloat16)}
    for i in range(111):
        for name, (shape, dtype) in LAYER.items():
            tensors[f"blk.{i}.{name}"] = np.zeros(shape, dtype)
    assert len(tensors) == 1000
    return tensors


def listing(path: Path) -> object:
    with kiln_np.open_weights(path) as w:
        return [(t.name, t.shape, t.format_dtype, t.byte_length) for t in w.values()]


def summary(path: Path) -> object:
    with kiln_np.open_weights(path) as w:
        return str(w.summary())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args(argv)
    print(describe_machine(), "cpu pressure", cpu_pressure())
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for format, name in (("safetensors", "m.safetensors"), ("gguf", "m.gguf")):
            path = Path(scratch) / name
            kiln_np.save_weights(path, checkpoint(), format=format)
            doors: dict[str, Callable[[], object]] = {
                "list": partial(listing, path),
                "summary": partial(summary, path),
            }
            timing = time_interleaved(doors, "list", args.rounds)
            rows.append(
                [
                    f"summary / (open + list), 1,000 tensors, {format}",
                    f"{timing.median('list') * 1e3:.1f} ms",
                    f"{timing.median('summary') * 1e3:.1f} ms",
                    timing.ratio("summary", "list"),
                    "<= 2",
                ]
            )
    print(markdown_table(["figure", "open + list", "open + summary", "ratio", "target"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
