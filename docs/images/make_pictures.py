"""Draw the pictures of docs/explore.md's "Pictures" section.

Run from the repository root with matplotlib installed (``pip install -e .[plot]``)::

    python docs/images/make_pictures.py

The checkpoint is synthetic and deterministic (seed 22): a llama-like bf16
safetensors file of 16 layers, each with the nine tensors of a Hugging Face llama
layer, whose standard deviations shrink with depth, and one odd tensor (layer 11's
``mlp.down_proj``, ten times wider) for the heatmap to show; the histograms (by
exponent and by value) of layers 10 and 11's MLP tensors show it too.  It takes a
second or two.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import matplotlib
import ml_dtypes
import numpy as np

import kiln_np
from kiln_np._explore import heatmap_figure, value_grid, value_histogram

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent
HIDDEN, FFN, LAYERS, VOCAB = 64, 172, 16, 256
ROLES = {  # role -> (shape, base std)
    "input_layernorm": ((HIDDEN,), 0.02),
    "self_attn.q_proj": ((HIDDEN, HIDDEN), 0.05),
    "self_attn.k_proj": ((HIDDEN // 4, HIDDEN), 0.08),
    "self_attn.v_proj": ((HIDDEN // 4, HIDDEN), 0.03),
    "self_attn.o_proj": ((HIDDEN, HIDDEN), 0.02),
    "post_attention_layernorm": ((HIDDEN,), 0.02),
    "mlp.gate_proj": ((FFN, HIDDEN), 0.04),
    "mlp.up_proj": ((FFN, HIDDEN), 0.03),
    "mlp.down_proj": ((HIDDEN, FFN), 0.02),
}


def checkpoint() -> dict[str, np.ndarray]:
    """The synthetic checkpoint's bf16 tensors, in a llama file's order."""
    rng = np.random.default_rng(22)
    tensors = {"model.embed_tokens.weight": rng.normal(0, 0.02, (VOCAB, HIDDEN))}
    for layer in range(LAYERS):
        depth = 1 - 0.5 * layer / LAYERS  # deeper layers are narrower
        for role, (shape, std) in ROLES.items():
            wide = 10 if (layer, role) == (11, "mlp.down_proj") else 1
            values = rng.normal(0, std * depth * wide, shape)
            if role.endswith("layernorm"):
                values += 1.0
            tensors[f"model.layers.{layer}.{role}.weight"] = values
    tensors["model.norm.weight"] = 1 + rng.normal(0, 0.02, HIDDEN)
    tensors["lm_head.weight"] = rng.normal(0, 0.02, (VOCAB, HIDDEN))
    return {name: t.astype(ml_dtypes.bfloat16) for name, t in tensors.items()}


def main(out: Path = HERE) -> list[Path]:
    """Write heatmap.png, histograms.png and values.png into ``out``; return their paths."""
    import matplotlib.pyplot as plt

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "llama.safetensors"
        kiln_np.save_weights(path, checkpoint(), format="safetensors")
        with kiln_np.open_weights(path) as weights:
            names = list(weights)
            stds = [kiln_np.describe(weights[name]).std for name in names]
            figures = {
                "heatmap.png": heatmap_figure(
                    names, stds, label="std (log scale)", title="std of each tensor"
                ),
                "histograms.png": kiln_np.plot_histograms(
                    weights, "model.layers.1[01].mlp.*", limit=6
                ),
            }
            mlp = [n for n in names if n.startswith(("model.layers.10.mlp", "model.layers.11.mlp"))]
            described = [(n, kiln_np.describe(weights[n])) for n in mlp]
            figures["values.png"] = value_grid(
                [(n, d, value_histogram(weights[n], d)) for n, d in described], columns=3
            )
    written = []
    for name, figure in figures.items():
        figure.savefig(out / name, dpi=100)
        written.append(out / name)
    plt.close("all")
    return written


if __name__ == "__main__":
    for path in main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(f"wrote {path}")
