"""Start-up cost of kiln_np, as ratios to ``python -c "import numpy"`` in the same run.

Run from the repository root, optionally with a reference tree unpacked next to it
(an export, not a worktree, so ``.git`` is left alone)::

    python benchmarks/bench_import.py
    mkdir -p /tmp/base && git archive HEAD~5 | tar -x -C /tmp/base
    python benchmarks/bench_import.py --base /tmp/base/src

Each round starts one fresh interpreter per probe (interleaved, so load on the
machine hits all alike) and times the whole process, from start to exit, with
``PYTHONPATH`` pointing at the tree's ``src``; the figure is the median over the
rounds (default 11) and each ratio is the median of the per-round ratios to
``python -c "import numpy"``.  The probes are the ones issue 18 sets targets for:

- ``import kiln_np`` (target <= 1.5x numpy);
- ``kiln-np --version`` (<= 1.5x);
- ``kiln-np ls`` of a 75-tensor safetensors file (<= 2x), written by this script;

and, for scale, ``import ml_dtypes``, which none of the three may pay for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

_CLI = "import sys; from kiln_np.cli import main; sys.exit(main(sys.argv[1:]))"


def _probes(file: str) -> dict[str, tuple[list[str], str]]:
    """name -> (argv after the interpreter, target)."""
    return {
        "import numpy": (["-c", "import numpy"], "baseline"),
        "import ml_dtypes": (["-c", "import ml_dtypes"], ""),
        "import kiln_np": (["-c", "import kiln_np"], "<= 1.5"),
        "kiln-np --version": (["-c", _CLI, "--version"], "<= 1.5"),
        "kiln-np ls (75 tensors)": (["-c", _CLI, "ls", file], "<= 2"),
    }


def run_seconds(argv: list[str], src: Path) -> float:
    """Wall seconds of one fresh interpreter running ``argv``, from ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's imports read .pyc files
    t = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=env, capture_output=True, check=True)
    return time.perf_counter() - t


def write_checkpoint(path: Path) -> None:
    """75 tensors, bf16 and f32, in one safetensors file (as a small model's layers)."""
    import ml_dtypes

    import kiln_np

    kinds = ("<f4", ml_dtypes.bfloat16)
    tensors = {f"layers.{i // 5}.w{i % 5}": np.zeros((64, 64), kinds[i % 2]) for i in range(75)}
    kiln_np.save_weights(path, tensors, format="safetensors")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a reference tree's src, measured too")
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "src",
        help="the tree measured (default: this repository's src)",
    )
    parser.add_argument("--rounds", type=int, default=11, help="fresh processes per probe")
    args = parser.parse_args(argv)
    trees = {"this tree": args.src} | ({"base": args.base} if args.base else {})
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "model.safetensors"
        write_checkpoint(file)
        probes = _probes(str(file))
        runs = [
            (f"{name} [{tree}]" if tree != "this tree" else name, argv, src)
            for tree, src in trees.items()
            for name, (argv, _) in probes.items()
            if tree == "this tree" or not name.startswith(("import numpy", "import ml_dtypes"))
        ]
        for _, argv_, src in runs:
            run_seconds(argv_, src)  # writes the .pyc files: every timed round reads them
        times: dict[str, list[float]] = {label: [] for label, _, _ in runs}
        for _ in range(args.rounds):
            for label, argv_, src in runs:
                times[label].append(run_seconds(argv_, src))
    base = times["import numpy"]
    print(f"whole-process seconds, median of {args.rounds} fresh processes each:")
    print("| probe | median | / import numpy | target |\n| --- | --- | --- | --- |")
    for label, seconds in times.items():
        ratio = statistics.median(a / b for a, b in zip(seconds, base, strict=True))
        target = probes.get(label, ("", ""))[1]
        print(f"| {label} | {statistics.median(seconds) * 1e3:.0f} ms | {ratio:.2f} | {target} |")


if __name__ == "__main__":
    main()
