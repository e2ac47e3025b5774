"""Every scheme fixture end to end through the command line: ``kiln-np convert SRC DST
--dequantize bf16`` writes the plain checkpoint, whose tensors are the reference's
bfloat16 values (``expected.safetensors``) and whose ``config.json`` is the source's
without its ``quantization_config``; ``kiln-np diff`` finds them equal exactly where
the reference's own values are bfloat16 values."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from _helpers import run_main

import kiln_np

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "schemes"
CASES = sorted(p.parent for p in FIXTURES.glob("*/*/expected.safetensors"))


def _same_bits_or_both_nan(got: np.ndarray, want: np.ndarray) -> None:
    """The bits of every element, NaN for NaN (references write NaNs' bits as their
    code paths fall: tests/schemes/test_*.py compare those where they are fixed)."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_convert_dequantizes_each_fixture_to_its_reference(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "plain"
    argv = ["convert", str(case / "model.safetensors"), str(dst), "--to", "safetensors"]
    status, _, err = run_main(capsys, *argv, "--dequantize", "bf16", "--max-shard-size", "1GB")
    assert status == 0, err
    expected = kiln_np.open_weights(case / "expected.safetensors")
    wanted = {n.removesuffix("@bfloat16"): t for n, t in expected.items() if "@bfloat16" in n}
    with kiln_np.open_weights(dst) as plain:
        for name, want in wanted.items():
            got = plain[name]
            assert got.format_dtype == "BF16", name
            _same_bits_or_both_nan(got.numpy(), want.numpy().astype(ml_dtypes.bfloat16))
        source = kiln_np.open_weights(case / "model.safetensors").logical()
        assert set(plain) == set(source), "every logical tensor and pass-through, nothing else"
        # equal values where the reference's own values are bfloat16 values too
        same = all(
            np.array_equal(
                t.dequantize().astype(np.float64),
                t.dequantize("bfloat16").astype(np.float64),
                equal_nan=True,
            )
            for t in source.values()
            if isinstance(t, kiln_np.LogicalTensor)
        )
    config = case / "config.json"
    if config.exists():
        kept = json.loads(config.read_text())
        kept.pop("quantization_config", None)
        assert json.loads((dst / "config.json").read_text()) == kept
    else:
        assert not (dst / "config.json").exists()
    status, out, _ = run_main(capsys, "diff", str(case / "model.safetensors"), str(dst))
    assert status == (0 if same else 1), out
