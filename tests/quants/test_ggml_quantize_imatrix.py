"""The GGML block encoders with an importance matrix: ggml's bytes for every block.

The oracle is ``ggml_quantize_chunk`` with ``quant_weights``
(``tests/fixtures/ggml/quantize_imatrix.npz``: each golden row quantized with its
own weight row, and ``quantize_imatrix_rows.npz``, the same for rows of 4096, made
by ``make_ggml_quant_golden.py``, whose ``--check --imatrix`` compares fresh random
data), and the numpy encoders and the compiled kernels each other, across rows
that share one weight row and any split over threads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_ggml_quantize import BACKENDS, blocks_differ, kept

from kiln_np._kernels import backend as _backend
from kiln_np._kernels import pool
from kiln_np._quants import encode_basic
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize_imatrix.npz")
LONG = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize_imatrix_rows.npz")
WEIGHTED = list(_quantize.WEIGHTED_KERNELS)  # both kinds: WEIGHTED and ROW_WEIGHTED


def _case(row: int) -> str:
    return f"row {row}, weights {GOLDEN['kinds'][row]}"


def _at(where: str) -> Callable[[int], str]:
    return lambda i: f"block {i} of {where}"


def test_the_golden_file_covers_every_weighted_type() -> None:
    assert set(WEIGHTED) <= set(GOLDEN.files)
    assert not set(WEIGHTED) & set(_quantize.IGNORES_IMATRIX)
    # Every type ggml quantizes with weights is quantized with them: the others ignore them.
    every = set(_quantize.ENCODERS) | set(_quantize.WEIGHTED_KERNELS)
    assert every - set(_quantize.WEIGHTED_KERNELS) == set(_quantize.IGNORES_IMATRIX)


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
        # the rows ggml aborts on (GGML_ASSERT, recorded by the golden script): refused
        # at the start of a block, before which nothing is lost
        for row in np.flatnonzero(~kept(GOLDEN, name)).tolist():
            out = np.zeros(want.shape[1], np.uint8)
            bad = _quantize.quantize_into(name, x[row], out, w[row])
            assert bad >= 0, _case(row)
            assert bad % block.elements == 0
            assert np.isfinite(x[row][bad])


@pytest.mark.parametrize("name", WEIGHTED)
def test_numpy_encoder_is_ggml(name: str) -> None:
    block, rows = BLOCKS[name], kept(GOLDEN, name)
    x = GOLDEN["input"][rows].reshape(-1, block.elements)
    w = GOLDEN["weights"][rows].reshape(-1, block.elements)
    with np.errstate(all="ignore"):
        if name in _quantize.ROW_WEIGHTED:  # each block also takes its row's sigma2
            sigma2 = encode_basic.row_sigma2(GOLDEN["input"][rows])
            got = _quantize.ROW_WEIGHTED[name](x, w, sigma2.repeat(256 // block.elements))
        else:
            got = _quantize.WEIGHTED[name](x, w)
    assert got.dtype == np.uint8
    assert got.shape == (len(x), block.bytes)
    index = np.flatnonzero(rows)
    per_row = 256 // block.elements
    blocks_differ(got, GOLDEN[name][rows], block.bytes, lambda i: _case(index[i // per_row]))


@pytest.mark.parametrize("name", WEIGHTED)
def test_rows_share_the_weight_row_across_threads(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of 512 (two 256-rows of golden weights side by side), many of them:
    every block takes the weights of its place in its row, on both backends and
    any split over threads (ranges that start mid-row)."""
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


def test_the_long_rows_cover_every_weighted_type() -> None:
    assert set(WEIGHTED) <= set(LONG.files)


@pytest.mark.parametrize("name", WEIGHTED)
def test_long_rows_are_ggml_on_both_backends_and_any_split(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of 4096, each with its own weight row: many runs of blocks a row (Q4_0
    ... Q5_1 weigh each value by the mean square of the whole row, which a run of
    the compiled driver or a range over threads starting mid-row does not hold)."""
    block = BLOCKS[name]
    x, w, want = LONG["input"], LONG["weights"], LONG[name]
    monkeypatch.setattr(_quantize, "_THREAD_MIN_ELEMENTS", 1)
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        for threads in (1, 3):
            monkeypatch.setattr(pool, "_threads", lambda threads=threads: threads)
            for row in np.flatnonzero(kept(LONG, name)).tolist():
                out = np.zeros(want.shape[1], np.uint8)
                where = f"{LONG['cases'][row]}, {threads} threads, compiled {compiled}"
                assert _quantize.quantize_into(name, x[row], out, w[row]) == -1, where
                blocks_differ(out, want[row], block.bytes, _at(where))


@pytest.mark.parametrize("name", list(_quantize.ROW_WEIGHTED))
def test_long_rows_tell_a_rows_sigma2_from_a_256s(name: str) -> None:
    """The long rows' golden bytes are not those of their 256s quantized as rows of
    their own (the same weights at the same places, only sigma2 differs): the test
    above catches a sigma2 taken over less than the row."""
    block = BLOCKS[name]
    x, w = LONG["input"][0], LONG["weights"][0]
    cut = np.zeros((16, 256 // block.elements * block.bytes), np.uint8)
    for r in range(16):
        part = slice(256 * r, 256 * (r + 1))
        assert _quantize.quantize_into(name, x[part], cut[r], w[part].copy()) == -1
    differ = (cut.reshape(-1, block.bytes) != LONG[name][0].reshape(-1, block.bytes)).any(axis=1)
    assert differ.mean() > 0.5


@pytest.mark.skipif(not _backend.BUILT, reason="the numpy build: no compiled driver")
def test_the_compiled_driver_refuses_what_it_cannot_hold() -> None:
    from kiln_np._kernels import native

    x = np.ones(128, np.float32)
    out = np.zeros(4 * 18, np.uint8)
    with pytest.raises(ValueError, match="not whole rows of 96"):  # sigma2 needs the row
        native.ggml_from_float32_weighted(2, x, np.ones(96, np.float32), out, 0, 3)
    with pytest.raises(ValueError, match="not whole blocks of 32"):
        native.ggml_from_float32_weighted(2, x, np.ones(48, np.float32), out, 0, 4)
    with pytest.raises(ValueError, match="no compiled weighted encoder"):  # Q8_0 ignores
        native.ggml_from_float32_weighted(8, x, np.ones(32, np.float32), out, 0, 4)
    assert native.ggml_from_float32_weighted(2, x, np.ones(64, np.float32), out, 0, 4) == -1


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
