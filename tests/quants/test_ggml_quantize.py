"""The GGML block encoders: ggml's bytes for every block, numpy and compiled alike.

Two oracles: ggml's own ``ggml_quantize_chunk`` (``tests/fixtures/ggml/quantize.npz``,
made from libggml-base by the script beside it, which also checks fresh random data
with ``--check``), and each other: the numpy encoders and the compiled kernels must
write the same bytes on every block, across any split over threads.  gguf-py, which
quantizes eight of the types, is a third in ``tests/formats/test_gguf_quantize.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "quantize.npz")
GOLDEN_TYPES = [n for n in BLOCKS if n in GOLDEN.files]
QUANTIZED = list(_quantize.ENCODERS)
BACKENDS = (True, False) if _backend.COMPILED else (False,)


def blocks_differ(
    got: np.ndarray, want: np.ndarray, nbytes: int, what: Callable[[int], str]
) -> None:
    got_rows, want_rows = got.reshape(-1, nbytes), want.reshape(-1, nbytes)
    differ = np.flatnonzero((got_rows != want_rows).any(axis=1))
    if differ.size:
        i = int(differ[0])
        raise AssertionError(
            f"{differ.size} of {len(want_rows)} blocks differ; first, block {i} ({what(i)}):\n"
            f"got  {got_rows[i].tobytes().hex()}\nwant {want_rows[i].tobytes().hex()}"
        )


def quantize(name: str, x: np.ndarray) -> np.ndarray:
    block = BLOCKS[name]
    out = np.empty(x.size // block.elements * block.bytes, np.uint8)
    assert _quantize.quantize_into(name, np.ascontiguousarray(x, np.float32).reshape(-1), out) == -1
    return out


def golden_case(name: str, rows: np.ndarray | None = None) -> Callable[[int], str]:
    """What block ``i`` of the golden rows (only ``rows`` of them, a mask) is."""
    per_row = 256 // BLOCKS[name].elements
    cases = [str(c) for c in GOLDEN["cases"]]
    index = np.arange(len(GOLDEN["input"])) if rows is None else np.flatnonzero(rows)

    def case(i: int) -> str:
        row = int(index[i // per_row])
        return cases[row] if row < len(cases) else f"random row {row}"

    return case


def test_the_golden_file_covers_every_type_kiln_np_quantizes() -> None:
    assert set(QUANTIZED) <= set(GOLDEN_TYPES)


def kept(golden: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """The rows of ``golden`` ggml quantizes to ``name`` (not those it aborts on)."""
    key = f"aborted_{name}"
    return ~golden[key] if key in golden.files else np.ones(len(golden["input"]), bool)


@pytest.mark.parametrize("name", QUANTIZED)
def test_driver_is_ggml_on_both_backends(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = kept(GOLDEN, name)
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        got = quantize(name, GOLDEN["input"][rows])
        blocks_differ(got, GOLDEN[name][rows], BLOCKS[name].bytes, golden_case(name, rows))


@pytest.mark.parametrize("name", QUANTIZED)
def test_numpy_encoder_is_ggml(name: str) -> None:
    block, rows = BLOCKS[name], kept(GOLDEN, name)
    with np.errstate(all="ignore"):
        got = _quantize.ENCODERS[name](GOLDEN["input"][rows].reshape(-1, block.elements))
    assert got.dtype == np.uint8
    assert got.shape == (GOLDEN["input"][rows].size // block.elements, block.bytes)
    blocks_differ(got, GOLDEN[name][rows], block.bytes, golden_case(name, rows))


@pytest.mark.parametrize("name", [n for n in QUANTIZED if f"aborted_{n}" in GOLDEN.files])
def test_rows_ggml_aborts_on_are_refused(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    block = BLOCKS[name]
    for row in np.flatnonzero(GOLDEN[f"aborted_{name}"]).tolist():
        x = GOLDEN["input"][row]
        for compiled in BACKENDS:
            monkeypatch.setattr(_backend, "COMPILED", compiled)
            out = np.zeros(x.size // block.elements * block.bytes, np.uint8)
            bad = _quantize.quantize_into(name, x, out)
            assert bad >= 0, f"row {row} ({golden_case(name)(row * 256 // block.elements)})"
            assert bad % block.elements == 0
            assert np.isfinite(x[bad])
            message = _quantize.unquantizable(name, (x.size,), bad, x[bad]).message
            assert "on which ggml's quantizer aborts" in message


def _random_blocks(name: str, count: int) -> np.ndarray:
    block = BLOCKS[name]
    rng = np.random.default_rng(block.type_id)
    scale = 10.0 ** rng.uniform(-6, 6, (count, 1))
    return (rng.standard_normal((count, block.elements)) * scale).astype(np.float32)


@pytest.mark.skipif(
    not _backend.COMPILED,
    reason="the compiled kernels are not running (not built, or KILN_NP_PURE=1)",
)
@pytest.mark.parametrize("name", QUANTIZED)
def test_compiled_is_numpy_bytes_across_threads(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_quantize, "_THREAD_MIN_ELEMENTS", 1)
    x = _random_blocks(name, 1031)
    compiled = quantize(name, x)
    monkeypatch.setattr(_backend, "COMPILED", False)
    blocks_differ(compiled, quantize(name, x), BLOCKS[name].bytes, lambda i: f"random block {i}")


@pytest.mark.skipif(not _backend.COMPILED, reason="the compiled kernels are not running")
def test_every_compiled_encoder_has_a_numpy_twin_of_its_size() -> None:
    from kiln_np._kernels import native

    by_id = {b.type_id: b for b in BLOCKS.values()}
    compiled = native.ggml_quant_types()
    for type_id, elements, nbytes, plain, with_weights in compiled:
        block = by_id[type_id]
        assert (elements, nbytes) == (block.elements, block.bytes)
        assert (block.name in _quantize.ENCODERS) == bool(plain)
        assert (block.name in _quantize.WEIGHTED_KERNELS) == bool(with_weights)
    assert {by_id[t].name for t, _, _, plain, _ in compiled if plain} == set(QUANTIZED)
    weighted = {by_id[t].name for t, _, _, _, w in compiled if w}
    assert weighted == set(_quantize.WEIGHTED_KERNELS)  # WEIGHTED and ROW_WEIGHTED
    assert not weighted & set(_quantize.IGNORES_IMATRIX)


@pytest.mark.parametrize("name", QUANTIZED)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_the_first_nan_or_infinity_is_reported(
    name: str, bad: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = BLOCKS[name]
    x = _random_blocks(name, 40).reshape(-1)
    x[block.elements * 17 + 3] = bad
    x[block.elements * 30] = np.nan
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        monkeypatch.setattr(_quantize, "_THREAD_MIN_ELEMENTS", 1)
        out = np.zeros(40 * block.bytes, np.uint8)
        assert _quantize.quantize_into(name, x, out) == block.elements * 17 + 3
        # The blocks before the bad one are written (and right).
        want = quantize(name, x[: block.elements * 17])
        assert np.array_equal(out[: 17 * block.bytes], want)


@pytest.mark.parametrize("name", QUANTIZED)
def test_the_bytes_do_not_depend_on_the_thread_count(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kiln_np._kernels import pool

    monkeypatch.setattr(_quantize, "_THREAD_MIN_ELEMENTS", 1)
    x = _random_blocks(name, 97)
    results = []
    for threads in (1, 2, 3, 8):
        monkeypatch.setattr(pool, "_threads", lambda threads=threads: threads)
        assert len(pool._split(97, True, 1)) == min(threads, 97)
        results.append(quantize(name, x))
    for other in results[1:]:
        assert np.array_equal(other, results[0])
