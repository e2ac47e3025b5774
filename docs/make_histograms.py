"""Draw the two histogram pictures in docs/explore.md.

Run from the repository root with matplotlib installed (``pip install -e .[plot]``)::

    python docs/make_histograms.py

The tensors are the walkthrough's: the same seed, the same scales, so the pictures show
exactly what the doctests in explore.md describe.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import ml_dtypes
import numpy as np

import kiln_np

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent


def walkthrough_tensors() -> dict[str, np.ndarray]:
    """The walkthrough's FP8 and FP4 weights (drawn in the same order, seed 7)."""
    rng = np.random.default_rng(7)
    rng.standard_normal((256, 128))  # the f32 embedding comes first
    fp8 = (rng.standard_normal((128, 128)) * 0.6).astype(ml_dtypes.float8_e4m3fn)
    fp4 = (rng.standard_normal((128, 64)) * 1.5).astype(ml_dtypes.float4_e2m1fn)
    return {"explore_fp8.png": fp8, "explore_fp4.png": fp4}


def main() -> None:
    import matplotlib.pyplot as plt

    for name, tensor in walkthrough_tensors().items():
        ax = kiln_np.describe(tensor).plot()
        ax.figure.tight_layout()
        ax.figure.savefig(HERE / name, dpi=100)
        plt.close("all")
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
