"""``kiln-np diff`` of two identical checkpoints against ``cmp`` of the same files.

Run from the repository root::

    python benchmarks/bench_diff.py              # two 1 GiB bf16 safetensors files
    python benchmarks/bench_diff.py --mib 256 --rounds 5

Two byte-identical safetensors files (bf16 tensors of 64 MiB each) are written
to a temporary directory, then ``kiln-np diff A B`` and ``cmp A B`` are run as
subprocesses in interleaved rounds (both read from the page cache after the
first round; Python from bytecode, as installed).  The figure is the median
over rounds of diff's time over cmp's (issue 22's target: <= 1.5).
``kiln-np diff`` reads each tensor's bytes of both files a chunk at a time
(``readinto``) and compares them; the values are not decoded since the bytes
are identical.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import describe_machine, time_interleaved

import kiln_np

TENSOR_MIB = 64


def _make(path: Path, mib: int) -> None:
    rng = np.random.default_rng(0)
    n = TENSOR_MIB << 19  # bf16 elements of one tensor
    tensors = {
        f"model.layers.{i}.weight": rng.standard_normal(n, np.float32).astype(ml_dtypes.bfloat16)
        for i in range(max(1, mib // TENSOR_MIB))
    }
    kiln_np.save_weights(path, tensors, format="safetensors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of each file (MiB)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    exe = shutil.which("kiln-np", path=os.path.dirname(sys.executable)) or "kiln-np"
    cmp = shutil.which("cmp")
    if cmp is None:
        raise SystemExit("cmp is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.safetensors", Path(tmp) / "b.safetensors"
        _make(a, args.mib)
        shutil.copyfile(a, b)
        size = a.stat().st_size

        # As an installed package runs: from bytecode (kept in the temporary directory).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")

        def run(argv: list[str], expected: int = 0) -> None:
            done = subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, env=env)
            if done.returncode != expected:
                raise SystemExit(f"{argv[0]} exited {done.returncode}")

        run([exe, "diff", str(a), str(b)])  # warm the page cache
        timing = time_interleaved(
            {
                "cmp": lambda: run([cmp, str(a), str(b)]),
                "diff": lambda: run([exe, "diff", str(a), str(b)]),
            },
            "cmp",
            args.rounds,
        )
    print(describe_machine())
    print(f"two identical files of {size / 2**30:.2f} GiB")
    print(f"cmp:          {timing.median('cmp'):.3f} s")
    print(f"kiln-np diff: {timing.median('diff'):.3f} s")
    print(f"kiln-np diff / cmp: {timing.ratio('diff', 'cmp'):.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
