"""NVIDIA ModelOpt's ``hf_quant_config.json`` names the scheme where a checkpoint's
``config.json`` has no ``quantization_config`` (ModelOpt's older exports)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import kiln_np
from kiln_np import KilnError, LogicalTensor

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "schemes" / "fp4" / "nvfp4-modelopt"


def _export(tmp_path: Path, *, drop: tuple[str, ...] = ()) -> Path:
    """The ModelOpt fixture without ``config.json``'s quantization_config (and, with
    ``drop``, without those tensors)."""
    out = tmp_path / "export"
    out.mkdir()
    shutil.copy(CASE / "hf_quant_config.json", out)
    config = json.loads((CASE / "config.json").read_text())
    config.pop("quantization_config")
    (out / "config.json").write_text(json.dumps(config))
    with kiln_np.open_weights(CASE / "model.safetensors") as w:
        kept = {n: t for n, t in w.items() if n not in drop}
        kiln_np.save_weights(out / "model.safetensors", kept, format="safetensors")
    return out / "model.safetensors"


def test_hf_quant_config_names_the_scheme(tmp_path: Path) -> None:
    with kiln_np.open_weights(_export(tmp_path)) as w:
        view = w.logical()
        assert view.quantization["quant_method"] == "modelopt"
        assert view.quantization["quant_algo"] == "NVFP4"
        schemes = {t.scheme for t in view.values() if isinstance(t, LogicalTensor)}
        assert schemes == {"nvfp4-modelopt"}
        assert w.logical(config=False).quantization == {}


def test_with_it_a_missing_part_is_damage(tmp_path: Path) -> None:
    # the U8 weight without any scale: with the config, damage; by names alone, a U8 tensor
    drop = (
        "model.layers.0.self_attn.q_proj.weight_scale",
        "model.layers.0.self_attn.q_proj.weight_scale_2",
    )
    with kiln_np.open_weights(_export(tmp_path, drop=drop)) as w:
        with pytest.raises(KilnError, match=r"found no 'model.layers.0.self_attn.q_proj"):
            w.logical()
        plain = w.logical(config=False)["model.layers.0.self_attn.q_proj.weight"]
        assert not isinstance(plain, LogicalTensor)


def test_it_is_read_strictly(tmp_path: Path) -> None:
    path = _export(tmp_path)
    (path.parent / "hf_quant_config.json").write_text('{"producer": {}}')
    with (
        kiln_np.open_weights(path) as w,
        pytest.raises(KilnError, match="expected a 'quantization' object, found none"),
    ):
        w.logical()
