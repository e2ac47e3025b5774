"""Run one benchmark in two source trees, interleaved, and compare their ratio columns.

Run from the repository root, with the reference tree unpacked beside it (an export,
its compiled kernels built in place)::

    mkdir -p /tmp/base && git archive b77dd7a | tar -x -C /tmp/base
    (cd /tmp/base && python setup.py -q build_ext --inplace)
    python benchmarks/compare_trees.py --base /tmp/base bench_decode.py --sections small
    python benchmarks/compare_trees.py --base /tmp/base --rename write_payload=save_payload \
        bench_files.py --mib 64

Each repeat runs ``benchmarks/SCRIPT ARGS`` of the base tree, then of this tree, each in
a fresh interpreter with ``PYTHONPATH`` at that tree's ``src`` (so each tree's own
benchmark measures that tree's package).  Every benchmark prints markdown tables whose
ratio columns compare kiln_np to a baseline timed in
the same process; this script takes, for each table row, the median of that ratio over
the repeats in each tree and prints ``this / base``: above 1.10 is a regression of more
than 10%.  Every numeric column counts as a ratio except those headed by a time or a
size; rows are matched by the table's caption, their first cell and the column, so
both trees must label them alike.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

# A ratio cell: a bare number, "56.3x" or "1.00 (baseline)"; "43.2 us" or "8,367" is not.
_NUMBER = re.compile(r"^[-+]?\d+(\.\d+)?(?=x?$| \()")


# Headers of columns that hold times, sizes or rates, not ratios.
_ABSOLUTE = ("µs", " ms", "per call", "MiB", "MB/s")


def ratios(output: str) -> dict[str, float]:
    """``caption: row label (column)`` -> value, for every ratio column of every
    table (a column of times or sizes is left out); the caption is the last line of
    text before the table."""
    found: dict[str, float] = {}
    header: list[str] = []
    caption = ""
    for line in output.splitlines():
        if not line.startswith("|"):
            header = []
            if line.rstrip().endswith(":"):  # "unpack, ratio to np.copy by size (elements):"
                caption = line.strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            continue
        if set(cells[0]) <= {"-", " "}:
            continue  # the separator row
        for name, cell in zip(header[1:], cells[1:], strict=False):
            number = _NUMBER.match(cell)
            if number and not any(word in name for word in _ABSOLUTE):
                found[f"{caption}: {cells[0]} ({name})"] = float(number.group(0))
    return found


def run(tree: Path, script: str, args: list[str], renames: dict[str, str]) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tree,
    )
    found = ratios(done.stdout)
    # A benchmark exits 1 when a target of its own is missed: its ratios still compare.
    if done.returncode not in (0, 1) or not found:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    for old, new in renames.items():
        found = {row.replace(old, new): value for row, value in found.items()}
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the reference tree's root")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each tree (3)")
    parser.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="read OLD as NEW in the base tree's row labels (a renamed function)",
    )
    parser.add_argument("script", help="a benchmark in benchmarks/, e.g. bench_decode.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    ns = parser.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    trees = {"base": ns.base.resolve(), "this": here}
    seen: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    renames = {"base": dict(r.split("=", 1) for r in ns.rename), "this": {}}
    for _ in range(ns.repeats):
        for name, tree in trees.items():
            for row, value in run(tree, ns.script, ns.args, renames[name]).items():
                seen[name].setdefault(row, []).append(value)
    print(f"{ns.script} {' '.join(ns.args)}: medians of {ns.repeats} interleaved runs each")
    print("| row (column) | base | this | this / base |\n| --- | --- | --- | --- |")
    for row, values in seen["this"].items():
        if row not in seen["base"]:
            continue
        base, this = statistics.median(seen["base"][row]), statistics.median(values)
        change = f"{this / base:.2f}" if base else "-"
        print(f"| {row} | {base:.2f} | {this:.2f} | {change} |")


if __name__ == "__main__":
    main()
