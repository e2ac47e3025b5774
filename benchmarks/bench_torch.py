"""The torch bridge's per-call cost, as ratios to ``torch.from_numpy`` in one process.

Run from the repository root (torch installed: the test extra pins it)::

    python benchmarks/bench_torch.py
    python benchmarks/bench_torch.py --rounds 31

Issue 25's target: ``kiln_np.torch.to_torch`` and ``from_torch`` of 100 elements
cost at most 3x ``torch.from_numpy`` of a 100-byte uint8 array (the least any
numpy-to-torch call costs).  Measured for f32 (a numpy dtype: one
``torch.from_numpy``), bf16 (an ml_dtypes dtype: a same-size view, then
``Tensor.view(torch.bfloat16)``), a read-only f32 payload (``Payload.data``, a
read-only view of a writable array: shared), an f32 payload over ``bytes``
(memory no one may write: copied since issue 35) and an f32 weight tensor of a
safetensors file (its map made before timing; since issue 35 a view of the
file's private copy-on-write map), and for scale ``t.numpy()``,
``torch.from_numpy`` of the f32 array itself, and the torch calls alone that a
bf16 view costs each way (``torch.from_numpy`` of the uint16 view then
``.view(torch.bfloat16)``; ``.view(torch.int16).numpy()``): the floor under
``to_torch`` / ``from_torch`` of bf16.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table, time_interleaved

import kiln_np
from kiln_np.torch import from_torch, to_torch


def small_calls(rounds: int) -> list[list[object]]:
    """Microseconds per call on 100 elements, as ratios to ``torch.from_numpy``
    of a 100-byte uint8 array."""
    u8 = np.zeros(100, np.uint8)
    f32 = np.arange(100, dtype="<f4")
    bf16 = f32.astype(ml_dtypes.bfloat16)
    payload = kiln_np.from_numpy(f32)
    frozen = kiln_np.Payload(kiln_np.Code.F32, memoryview(f32.tobytes()), (100,))
    t32, t16 = torch.from_numpy(f32), to_torch(bf16)
    to_torch(payload)  # torch's one read-only warning, spent before timing
    folder = tempfile.mkdtemp()
    path = str(Path(folder) / "w.safetensors")
    kiln_np.save_weights(path, {"w": f32}, format="safetensors")
    weights = kiln_np.open_weights(path)
    weight = weights["w"]
    to_torch(weight)  # the file mapped before timing
    functions: dict[str, Callable[[], object]] = {
        "baseline": partial(torch.from_numpy, u8),
        "to_torch f32": partial(to_torch, f32),
        "to_torch bf16": partial(to_torch, bf16),
        "to_torch payload f32": partial(to_torch, payload),
        "to_torch bytes payload f32": partial(to_torch, frozen),
        "to_torch weight tensor f32": partial(to_torch, weight),
        "from_torch f32": partial(from_torch, t32),
        "from_torch bf16": partial(from_torch, t16),
        "torch.from_numpy f32": partial(torch.from_numpy, f32),
        "t.numpy() f32": t32.numpy,
        "torch alone, bf16 in": lambda: torch.from_numpy(bf16.view(np.uint16)).view(torch.bfloat16),
        "torch alone, bf16 out": lambda: t16.view(torch.int16).numpy(),
    }
    timing = time_interleaved(functions, "baseline", rounds)
    weights.close()
    shutil.rmtree(folder)
    rows = []
    for name in functions:
        target = "<= 3" if name.startswith(("to_torch", "from_torch")) else ""
        if name == "baseline":
            label, target = "torch.from_numpy, 100 B uint8", "baseline"
        else:
            label = f"{name}, 100 elements"
        rows.append(
            [label, f"{timing.median(name) * 1e6:.2f} µs", timing.ratio(name, "baseline"), target]
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="timing rounds (default 21)")
    args = parser.parse_args(argv)
    machine = describe_machine()
    print(f"torch {torch.__version__}, {machine}, {cpu_pressure()}")
    print()
    print(
        markdown_table(
            ["call", "per call", "ratio to torch.from_numpy", "target"], small_calls(args.rounds)
        )
    )


if __name__ == "__main__":
    main()
