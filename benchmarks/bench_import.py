"""Import time of ``import kiln_np`` against another source tree, in the same run.

Run from the repository root, with a reference tree unpacked next to it (an
export, not a worktree, so ``.git`` is left alone)::

    mkdir -p /tmp/base892 && git archive 892717f | tar -x -C /tmp/base892
    python benchmarks/bench_import.py --base /tmp/base892/src

Each round starts one fresh interpreter per tree (interleaved, so load on the
machine hits both alike) and times ``import kiln_np`` inside it with
``PYTHONPATH`` pointing at that tree's ``src``; the figure is the median over
the rounds (default 11).  numpy and ml_dtypes are imported by both trees, so
their cost is in both medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

_PROBE = "import time; t = time.perf_counter(); import kiln_np; print(time.perf_counter() - t)"


def import_seconds(src: Path) -> float:
    """Seconds ``import kiln_np`` takes in a fresh interpreter, from ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    return float(done.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the reference tree's src")
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "src",
        help="the tree measured (default: this repository's src)",
    )
    parser.add_argument("--rounds", type=int, default=11, help="fresh processes per tree")
    args = parser.parse_args(argv)
    trees = {"base": args.base, "this tree": args.src}
    for src in trees.values():
        import_seconds(src)  # writes the .pyc files: every timed round reads them
    times: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, src in trees.items():
            times[name].append(import_seconds(src))
    base, now = (statistics.median(times[name]) for name in trees)
    print(f"import kiln_np, median of {args.rounds} fresh processes each:")
    print(f"  base ({args.base}): {base * 1e3:.1f} ms")
    print(f"  this tree ({args.src}): {now * 1e3:.1f} ms")
    print(f"  ratio: {now / base:.2f} (target <= 1.2)")


if __name__ == "__main__":
    main()
