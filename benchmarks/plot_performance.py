"""Plot throughput against size from ``bench_nibbles.py --json`` output.

Needs matplotlib, which kiln_np itself never imports::

    pip install matplotlib
    python benchmarks/bench_nibbles.py --json benchmarks/results/nibbles.json
    python benchmarks/plot_performance.py benchmarks/results/nibbles.json docs/performance.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def plot(data: dict[str, Any], target: Path) -> None:
    import matplotlib  # type: ignore[import-not-found,unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]

    rows = data["sizes"]
    elements = [row["elements"] for row in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, op in zip(axes, ("unpack", "pack"), strict=True):
        copy = [n / row["copy_seconds"] / 1e9 for n, row in zip(elements, rows, strict=True)]
        ax.plot(elements, copy, "k--", label="np.copy (baseline)")
        for name in data["implementations"]:
            rate = [
                n / row[f"{name} {op}"]["seconds"] / 1e9
                for n, row in zip(elements, rows, strict=True)
            ]
            style = {"kiln_np": "o-", "kiln_np numpy": "s-"}.get(name, ".-")
            label = {"kiln_np": "kiln_np (compiled kernels)"}.get(name, name)
            ax.plot(elements, rate, style, label=label, linewidth=2.2 if "kiln" in name else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("elements (one byte each unpacked)")
        ax.set_title(f"4-bit {op}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("throughput, G elements / s")
    axes[0].legend(loc="lower right", fontsize=8)
    machine = data["machine"]
    fig.suptitle(
        f"kiln_np 4-bit kernels (to_numpy / from_numpy): {machine['cores']} cores, "
        f"{machine['cpu']}, numpy {machine['numpy']}; higher is faster",
        fontsize=9,
    )
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="JSON written by bench_nibbles.py --json")
    parser.add_argument("target", type=Path, help="PNG to write")
    args = parser.parse_args(argv)
    plot(json.loads(args.results.read_text()), args.target)
    print(f"wrote {args.target}")


if __name__ == "__main__":
    main()
