"""The GGML block encoders with an importance matrix: ggml's bytes for every block.

The oracle is ``ggml_quantize_chunk`` with ``quant_weights``
(``tests/fixtures/ggml/quantize_imatrix.npz``: each golden row quantized with its
own weight row, made by ``make_ggml_quant_golden.py``, whose ``--check --imatrix``
compares fresh random data), and the numpy encoders and the compiled kernels
each other, across rows that share one weight row and any split over threads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_ggml_quantize import BACKENDS, blocks_differ, kept

from kiln_np._kernels import backend as _backend
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize_imatrix.npz")
WEIGHTED = list(_quantize.WEIGHTED)


def _case(row: int) -> str:
    return f"row {row}, weights {GOLDEN['kinds'][row]}"


def _at(where: str) -> Callable[[int], str]:
    return lambda i: f"block {i} of {where}"


def test_the_golden_file_covers_every_weighted_type() -> None:
    assert set(WEIGHTED) <= set(GOLDEN.files)
    assert not set(WEIGHTED) & set(_quantize.IGNORES_IMATRIX)


@pytest.mark.parametrize("name", WEIGHTED)
def test_driver_is_ggml_on_both_backends(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    block = BLOCKS[name]
    x, w, want = GOLDEN["input"], GOLDEN["weights"], GOLDEN[name]
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        for row in np.flatnonzero(kept(GOLDEN, name)).tolist():
            out = np.zeros(want.shape[1], np.uint8)
            assert _quantize.quantize_into(name, x[row], out, w[row]) == -1, _case(row)
            blocks_differ(out, want[row], block.bytes, _at(_case(row)))


@pytest.mark.parametrize("name", WEIGHTED)
def test_numpy_encoder_is_ggml(name: str) -> None:
    block, rows = BLOCKS[name], kept(GOLDEN, name)
    x = GOLDEN["input"][rows].reshape(-1, block.elements)
    w = GOLDEN["weights"][rows].reshape(-1, block.elements)
    with np.errstate(all="ignore"):
        got = _quantize.WEIGHTED[name](x, w)
    assert got.dtype == np.uint8
    assert got.shape == (len(x), block.bytes)
    index = np.flatnonzero(rows)
    per_row = 256 // block.elements
    blocks_differ(got, GOLDEN[name][rows], block.bytes, lambda i: _case(index[i // per_row]))


@pytest.mark.parametrize("name", [n for n in WEIGHTED if f"aborted_{n}" in GOLDEN.files])
def test_rows_ggml_aborts_on_are_refused(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    block = BLOCKS[name]
    for row in np.flatnonzero(GOLDEN[f"aborted_{name}"]).tolist():
        x, w = GOLDEN["input"][row], GOLDEN["weights"][row]
        for compiled in BACKENDS:
            monkeypatch.setattr(_backend, "COMPILED", compiled)
            out = np.zeros(x.size // block.elements * block.bytes, np.uint8)
            bad = _quantize.quantize_into(name, x, out, w)
            assert bad >= 0, _case(row)
            assert bad % block.elements == 0
            assert np.isfinite(x[bad])


@pytest.mark.parametrize("name", WEIGHTED)
def test_rows_share_the_weight_row_across_threads(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of 512 (two 256-rows of golden weights side by side), many of them:
    every block takes the weights of its place in its row, on both backends and
    any split over threads (ranges that start mid-row)."""
    from kiln_np._kernels import pool

    block = BLOCKS[name]
    rng = np.random.default_rng(block.type_id)
    w = np.concatenate([GOLDEN["weights"][8], GOLDEN["weights"][9]])  # log-normal kinds
    x = (rng.standard_normal((37, 512)) * 10.0 ** rng.uniform(-3, 3, (37, 1))).astype(np.float32)
    # The oracle: each row on its own (the golden test holds one row to ggml).
    want = np.zeros(x.size // block.elements * block.bytes, np.uint8).reshape(37, -1)
    monkeypatch.setattr(_backend, "COMPILED", False)
    for r in range(37):
        assert _quantize.quantize_into(name, x[r], want[r], w) == -1
    monkeypatch.setattr(_quantize, "_THREAD_MIN_ELEMENTS", 1)
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        for threads in (1, 2, 3, 8):
            monkeypatch.setattr(pool, "_threads", lambda threads=threads: threads)
            got = np.zeros(want.size, np.uint8)
            assert _quantize.quantize_into(name, x.reshape(-1), got, w) == -1
            blocks_differ(got, want, block.bytes, _at(f"{threads} threads"))


@pytest.mark.parametrize("name", _quantize.IGNORES_IMATRIX)
def test_the_types_ggml_quantizes_without_looking_at_weights_ignore_them(name: str) -> None:
    assert name in _quantize.ENCODERS
    block = BLOCKS[name]
    x = GOLDEN["input"][-4:].reshape(-1)
    plain = np.zeros(x.size // block.elements * block.bytes, np.uint8)
    weighted = np.zeros_like(plain)
    assert _quantize.quantize_into(name, x, plain) == -1
    assert _quantize.quantize_into(name, x, weighted, GOLDEN["weights"][-1]) == -1
    assert np.array_equal(plain, weighted)
