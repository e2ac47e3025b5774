"""The 2-bit and 1-bit grid types' tables and refusals (IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
IQ1_M): ggml's ``iq2xs_init_impl`` transcribed, and the block ggml aborts on refused.

The bytes themselves are held to ggml's by ``test_ggml_quantize.py`` and
``test_ggml_quantize_imatrix.py`` (golden vectors, both backends, any split over
threads); here the neighbour lists every search walks are checked against a plain
transcription of ggml's loop, and an abort against its exact place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln_np import KilnError
from kiln_np import gguf as kg
from kiln_np._kernels import backend as _backend
from kiln_np._quants import neighbours
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

BACKENDS = (True, False) if _backend.COMPILED else (False,)
FAMILY = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M")
GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize_imatrix.npz")

# The first entries of ggml's kgrid_2bit_256, _512, _1024 and kgrid_1bit_2048
# (ggml-quants.c), each point's levels packed as u; ggml's nwant per grid.
KGRID_HEADS = {
    "IQ2_XXS": ([0, 2, 5, 8, 10, 17, 20, 32, 34, 40], 2),
    "IQ2_XS": ([0, 2, 5, 8, 10, 17, 20, 22, 25, 32], 2),
    "IQ2_S": ([0, 2, 5, 8, 10, 17, 20, 22, 25, 32], 1),
    "IQ1": ([0, 2, 5, 8, 10, 17, 21, 32, 34, 40], 3),
}


def packed(levels: np.ndarray) -> np.ndarray:
    u: np.ndarray = (levels.astype(np.int64) << (2 * np.arange(8))).sum(axis=-1)
    return u


@pytest.mark.parametrize("grid", list(KGRID_HEADS))
def test_the_grid_is_ggmls_kgrid_in_order(grid: str) -> None:
    t = neighbours.table(grid)
    head, _ = KGRID_HEADS[grid]
    u = packed(t.levels)
    assert u[: len(head)].tolist() == head
    assert (np.diff(u) > 0).all()  # ggml lists its kgrid ascending
    assert t.kmap[u].tolist() == list(range(len(u)))
    assert (t.kmap >= 0).sum() == len(u)
    assert (t.values == 2 * t.levels + 1).all()


def ggml_neighbours(levels: np.ndarray, u: int, nwant: int) -> list[int]:
    """iq2xs_init_impl's loop for one u: qsort of (d2, j), then the points of the
    first nwant distances."""
    pos = 2 * ((u >> (2 * np.arange(8))) & 3) + 1
    d2 = ((2 * levels.astype(np.int64) + 1 - pos) ** 2).sum(axis=1)
    pairs = sorted(zip(d2.tolist(), range(len(levels)), strict=True))
    found, have, last = [], 1, pairs[0][0]
    for distance, j in pairs:
        if distance > last:
            if have == nwant:
                break
            last, have = distance, have + 1
        found.append(j)
    return found


@pytest.mark.parametrize("grid", list(KGRID_HEADS))
def test_the_neighbour_lists_are_ggmls(grid: str) -> None:
    t = neighbours.table(grid)
    _, nwant = KGRID_HEADS[grid]
    off = np.flatnonzero(t.kmap < 0)
    rng = np.random.default_rng(len(t.levels))
    for u in [int(off[0]), int(off[-1]), *rng.choice(off, 150, replace=False).tolist()]:
        listed = t.neighbours[t.start[u] : t.start[u] + t.lengths[u]].tolist()
        assert listed == ggml_neighbours(t.levels, u, nwant), f"u {u}"
    assert t.lengths[t.kmap >= 0].sum() == 0
    assert t.start[-1] + t.lengths[-1] == len(t.neighbours)


@pytest.mark.parametrize("name", ["IQ2_XXS", "IQ2_XS", "IQ1_S"])
def test_without_an_importance_matrix_ggml_refuses_them(name: str) -> None:
    assert name in _quantize.NEEDS_IMATRIX
    assert name in _quantize.WEIGHTED
    assert name not in _quantize.ENCODERS
    with pytest.raises(KilnError, match="--imatrix") as e:
        kg.quantize(np.ones((1, 256), np.float32), name)
    assert e.value.kind == "TYPE"


@pytest.mark.parametrize("name", ["IQ2_S", "IQ1_M"])
def test_iq2_s_and_iq1_m_quantize_without_one_too(name: str) -> None:
    golden = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize.npz")
    rows = ~golden[f"aborted_{name}"]
    got = kg.quantize(golden["input"][rows], name)
    assert np.frombuffer(got.data, np.uint8).tolist() == golden[name][rows].reshape(-1).tolist()
    assert name not in _quantize.NEEDS_IMATRIX


@pytest.mark.parametrize("name", FAMILY)
def test_the_block_ggml_aborts_on_is_refused_at_its_place(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three rows (good, aborting, good) sharing the aborting row's weights: the refusal
    names the second row's first element, the first row is written as on its own, on
    both backends and over threads."""
    from kiln_np._kernels import pool

    block = BLOCKS[name]
    row = int(np.flatnonzero(GOLDEN[f"aborted_{name}"])[0])
    w = GOLDEN["weights"][row]
    good = np.random.default_rng(block.type_id).standard_normal((2, 256)).astype(np.float32)
    x = np.concatenate([good[0], GOLDEN["input"][row], good[1]])
    monkeypatch.setattr(_quantize, "_THREAD_MIN_ELEMENTS", 1)
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        alone = np.zeros(block.bytes, np.uint8)
        assert _quantize.quantize_into(name, good[0], alone, w) == -1
        for threads in (1, 3):
            monkeypatch.setattr(pool, "_threads", lambda threads=threads: threads)
            out = np.zeros(3 * block.bytes, np.uint8)
            assert _quantize.quantize_into(name, x, out, w) == 256
            assert out[: block.bytes].view(np.uint8).tolist() == alone.tolist()
    error = _quantize.unquantizable(name, (3, 256), 256, x[256])
    assert error.kind == "TYPE"
    assert "index (1, 0) on which ggml's quantizer aborts" in error.message
