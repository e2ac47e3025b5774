"""``kiln_np.gguf.quantize`` against gguf-py, the second oracle, for the types it
quantizes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0, MXFP4: those kiln_np has an
encoder for join as they arrive).

gguf-py's numpy quantizers are ggml's on ordinary data: its arrays, and a file its
``GGUFWriter`` wrote, hold kiln_np's bytes.  They part where ggml's C keeps the first
of equal elements and numpy does not: the sign of a zero.  A Q4_0/Q5_0 block of zeros
whose first is -0.0 (ggml's largest stays +0.0, d = 0 / -8 = -0.0; gguf-py takes the
-0.0, d = +0.0), and a Q4_1/Q5_1 block whose minimum is a zero (ggml stores the first
zero's sign; numpy's ``min`` another).  There kiln_np writes ggml's bytes: the golden
file from ggml holds them, and tests/quants/test_ggml_quantize_basic.py states them.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _helpers import gguf_py_file, optional

import kiln_np
from kiln_np import gguf as kg
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.quantize import ENCODERS

if TYPE_CHECKING:
    import gguf
    import gguf.quants
else:
    gguf = optional("gguf", "quants")

GGUF_PY = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4")
TYPES = [name for name in GGUF_PY if name in ENCODERS]
GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize.npz")
CASES = [str(c) for c in GOLDEN["cases"]]
# The golden rows where gguf-py's bytes are not ggml's (see the docstring).
GGUF_PY_DIFFERS = {name: {"signed zeros"} for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1")}


def gguf_py(x: np.ndarray, name: str) -> np.ndarray:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        blocks: np.ndarray = gguf.quants.quantize(x, gguf.GGMLQuantizationType.__members__[name])
    return blocks


def ordinary(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Normal rows of scales 1e-3 .. 1e3, as weights are."""
    rng = np.random.default_rng(BLOCKS[name].type_id + 100)
    scale = 10.0 ** rng.uniform(-3, 3, (*shape[:-1], 1))
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def test_gguf_py_types_are_quantized() -> None:
    assert {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0"} <= set(TYPES)


@pytest.mark.parametrize("name", TYPES)
def test_ordinary_data_is_gguf_pys_bytes(name: str) -> None:
    x = ordinary(name, (64, 3 * 256))
    got = kg.quantize(x, name)
    want = gguf_py(x, name)
    assert got.shape == (64, 3 * 256 // BLOCKS[name].elements)
    assert bytes(got.data) == want.tobytes()


@pytest.mark.parametrize("name", TYPES)
def test_a_file_gguf_py_wrote_holds_kiln_nps_bytes(tmp_path: Path, name: str) -> None:
    x = ordinary(name, (3, 4, 2 * 256))
    path = gguf_py_file(
        tmp_path / "m.gguf", {"w": (gguf_py(x, name), gguf.GGMLQuantizationType.__members__[name])}
    )
    got = kg.quantize(x, name)
    with kiln_np.open_weights(path) as weights:
        stored = weights["w"].payload()
        assert stored.code == got.code
        assert stored.shape == got.shape
        assert stored.layout == got.layout
        assert bytes(stored.data) == bytes(got.data)


@pytest.mark.parametrize("name", TYPES)
def test_golden_rows_are_gguf_pys_but_where_it_is_not_ggmls(name: str) -> None:
    block = BLOCKS[name]
    per_row = 256 // block.elements
    got = np.frombuffer(kg.quantize(GOLDEN["input"], name).data, np.uint8)
    got = got.reshape(-1, block.bytes)
    theirs = gguf_py(GOLDEN["input"], name).reshape(-1, block.bytes)
    ggml = GOLDEN[name].reshape(-1, block.bytes)
    assert np.array_equal(got, ggml)
    parted = np.flatnonzero((theirs != ggml).any(axis=1))
    rows = {CASES[i // per_row] if i // per_row < len(CASES) else "random" for i in parted}
    assert rows <= GGUF_PY_DIFFERS.get(name, set())
    agree = np.ones(len(ggml), bool)
    agree[parted] = False
    assert np.array_equal(got[agree], theirs[agree])


@pytest.mark.parametrize(
    ("name", "values", "ggml_head"),
    [
        ("Q4_0", [-0.0] + [0.0] * 31, [0x00, 0x80, 0x88]),  # d = -0.0
        ("Q5_0", [-0.0] + [0.0] * 31, [0x00, 0x80]),
        ("Q4_1", [-0.0, 0.0] * 16, [0x00, 0x00, 0x00, 0x80]),  # m = the first zero
        ("Q4_1", [0.0, -0.0] * 16, [0x00, 0x00, 0x00, 0x00]),
        ("Q5_1", [0.0] + [-0.0] * 31, [0x00, 0x00, 0x00, 0x00]),
    ],
)
def test_signed_zeros_follow_ggml(name: str, values: list[float], ggml_head: list[int]) -> None:
    got = bytes(kg.quantize(np.array([values], np.float32), name).data)
    assert list(got[: len(ggml_head)]) == ggml_head
