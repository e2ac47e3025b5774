"""Draw the picture in docs/mx.md.

Run from the repository root with matplotlib and gguf installed (``pip install -e .[test]``)::

    python docs/make_mx_figure.py

The tensor is the walkthrough's (the same seed): an MXFP4 weight that gguf-py
quantized, as ``kiln_np.mx.from_ggml`` splits it into e2m1 values and e8m0 scales.
``ScaledDescription.plot()`` lays its own figure out, so the picture is saved as drawn.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import matplotlib
import numpy as np

import kiln_np
from kiln_np import mx

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent


def main() -> None:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 64)) * 0.05).astype(np.float32)
    q = gguf.quants.quantize(w, gguf.GGMLQuantizationType.MXFP4)
    blocks = kiln_np.Payload(
        0x4727, memoryview(q.tobytes()), (8, 2), kiln_np.Layout("ggml.mxfp4", 17)
    )
    values, scales = mx.from_ggml(blocks)
    axes = kiln_np.describe(values, scales).plot()
    axes[0].figure.savefig(HERE / "mx_walkthrough.png", dpi=100)


if __name__ == "__main__":
    main()
