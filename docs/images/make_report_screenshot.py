"""Take the screenshot of a report in docs/explore.md (docs/images/report.png).

Run from the repository root with the test extra installed (matplotlib,
selenium) and Debian's ``chromium`` and ``chromium-driver``::

    python docs/images/make_report_screenshot.py

The checkpoint is synthetic and seeded: a Hugging Face-style folder (``config.json``,
``generation_config.json``, ``model.safetensors``) of a llama-like bf16 model of eight
layers whose weights widen with depth, one layer with an outlier and a NaN, so the
statistics, the heatmap and the value histograms have something to show.  The page is
drawn by headless Chromium at 1280 pixels wide, as tall as the page (at most 8,000
pixels), and saved as a 256-colour PNG.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
from PIL import Image  # matplotlib's own dependency
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

import kiln_np

HERE = Path(__file__).resolve().parent
ROLES = {
    "self_attn.q_proj": (256, 256),
    "self_attn.k_proj": (64, 256),
    "self_attn.v_proj": (64, 256),
    "self_attn.o_proj": (256, 256),
    "mlp.gate_proj": (512, 256),
    "mlp.up_proj": (512, 256),
    "mlp.down_proj": (256, 512),
}


def checkpoint(folder: Path, layers: int = 8) -> Path:
    """The synthetic model (seed 22), saved as ``folder/model.safetensors`` beside its
    ``config.json`` and ``generation_config.json``; returns ``folder``."""
    rng = np.random.default_rng(22)
    bf16 = ml_dtypes.bfloat16
    tensors = {"model.embed_tokens.weight": (rng.standard_normal((1024, 256)) * 0.02).astype(bf16)}
    for i in range(layers):
        for role, shape in ROLES.items():
            values = rng.standard_normal(shape) * 0.02 * (1 + i / 4)
            if i == 5 and role == "mlp.down_proj":
                values[3, 7], values[4, 9] = 40.0, np.nan  # the odd layer
            tensors[f"model.layers.{i}.{role}.weight"] = values.astype(bf16)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{i}.{norm}.weight"] = (
                1 + rng.standard_normal(256) * 0.05
            ).astype(bf16)
    tensors["model.norm.weight"] = np.ones(256, bf16)
    tensors["lm_head.weight"] = (rng.standard_normal((1024, 256)) * 0.02).astype(bf16)
    folder.mkdir()
    kiln_np.save_weights(
        folder / "model.safetensors", tensors, format="safetensors", metadata={"format": "pt"}
    )
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "vocab_size": 1024,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": 1, "eos_token_id": [2, 3], "temperature": 0.6, "top_p": 0.9}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return folder


def screenshot(page: Path, out: Path, profile: Path) -> None:
    """A full-page PNG of ``page`` by headless Chromium, 1280 pixels wide."""
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--hide-scrollbars", "--window-size=1280,1000",
                 f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    driver = shutil.which("chromedriver") or "chromedriver"
    browser = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        browser.get(page.as_uri())
        height, frame = browser.execute_script(
            "return [document.documentElement.scrollHeight, outerHeight - innerHeight]"
        )
        browser.set_window_size(1280, min(int(height), 8000) + int(frame))
        png = browser.get_screenshot_as_png()
    finally:
        browser.quit()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(256).save(out, optimize=True)


def main() -> None:
    # A fixed folder, so the path the page shows is the same on every run.
    folder = Path(tempfile.gettempdir()) / "kiln-np-report-example"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        model = checkpoint(folder / "llama-8")
        page = kiln_np.report(model, folder / "report.html")
        out = HERE / "report.png"
        screenshot(Path(page), out, folder / "profile")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
