"""Draw the pictures in docs/explore.md.

Run from the repository root with matplotlib installed (``pip install -e .[plot]``)::

    python docs/make_histograms.py

The tensors are the walkthrough's: the same seed, the same scales, so the pictures show
exactly what the doctests in explore.md describe.  Each ``plot()`` lays its own figure
out, so the pictures are saved as drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import ml_dtypes
import numpy as np

import kiln_np
from kiln_np import mx

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent


def walkthrough_tensors() -> dict[str, np.ndarray]:
    """The walkthrough's f32, FP8 and FP4 weights (drawn in the same order, seed 7)."""
    rng = np.random.default_rng(7)
    embed = (rng.standard_normal((256, 128)) * 0.02).astype(np.float32)
    fp8 = (rng.standard_normal((128, 128)) * 0.6).astype(ml_dtypes.float8_e4m3fn)
    fp4 = (rng.standard_normal((128, 64)) * 1.5).astype(ml_dtypes.float4_e2m1fn)
    return {"explore_f32.png": embed, "explore_fp8.png": fp8, "explore_fp4.png": fp4}


def main() -> None:
    import matplotlib.pyplot as plt

    tensors = walkthrough_tensors()
    figures: dict[str, Any] = {
        name: kiln_np.describe(tensor).plot().figure for name, tensor in tensors.items()
    }
    blocks = kiln_np.describe(*mx.quantize(tensors["explore_f32.png"]))
    figures["explore_mxfp4.png"] = blocks.plot()[0].figure
    for name, figure in figures.items():
        figure.savefig(HERE / name, dpi=100)
        print(f"wrote {HERE / name}")
    plt.close("all")


if __name__ == "__main__":
    main()
