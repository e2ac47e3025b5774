"""The GGML block decoders: ggml's bits for every block, numpy and compiled alike.

Three oracles: ggml's own ``dequantize_row_*`` (``tests/fixtures/ggml/dequantize.npz``,
made by the script beside it from libggml-base), gguf-py's ``gguf.quants.dequantize``
(on files and blocks it reads), and each other: the numpy decoders and the compiled
kernels must give the same bytes on every block, the special ones included.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._kernels import pool as _pool
from kiln_np._quants import decode as _decode
from kiln_np._quants.blocks import BLOCKS

pytest.importorskip(
    "gguf", reason="needs gguf (a test-only oracle of the test extra), which is not installed"
)
import gguf
import gguf.quants

GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "dequantize.npz")
GOLDEN_TYPES = sorted({key.split(".")[0] for key in GOLDEN.files if key.endswith(".blocks")})
DECODED = sorted(_decode.DECODERS)


def agree(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, but for the payload of a NaN the reference's own arithmetic made."""
    got_bits = got.reshape(-1).view(np.uint32)
    want_bits = want.reshape(-1).view(np.uint32)
    differ = (got_bits != want_bits) & ~(np.isnan(got.reshape(-1)) & np.isnan(want.reshape(-1)))
    if differ.any():
        i = int(np.flatnonzero(differ)[0])
        raise AssertionError(
            f"{int(differ.sum())} values differ; first at {i}: "
            f"{got_bits[i]:#010x} != {want_bits[i]:#010x}"
        )


def numpy_values(name: str, blocks: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _decode.DECODERS[name].values(np.ascontiguousarray(blocks))


@pytest.mark.parametrize("name", [n for n in GOLDEN_TYPES if n in _decode.DECODERS])
def test_numpy_decoder_is_ggml(name: str) -> None:
    agree(numpy_values(name, GOLDEN[f"{name}.blocks"]), GOLDEN[f"{name}.values"])


@pytest.mark.parametrize("name", [n for n in GOLDEN_TYPES if n in _decode.DECODERS])
def test_driver_is_ggml_on_both_backends(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = GOLDEN[f"{name}.blocks"]
    for compiled in (True, False) if _backend.COMPILED else (False,):
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(GOLDEN[f"{name}.values"].size, np.float32)
        _decode.dequantize_into(name, blocks.reshape(-1), out)
        agree(out, GOLDEN[f"{name}.values"])


@pytest.mark.parametrize("name", [n for n in GOLDEN_TYPES if n in _decode.DECODERS])
def test_bfloat16_is_ggml_rounded_on_both_backends(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Straight to bfloat16 bits: ggml's float32 rounded as ml_dtypes rounds."""
    import ml_dtypes

    blocks, values = GOLDEN[f"{name}.blocks"], GOLDEN[f"{name}.values"].reshape(-1)
    with np.errstate(all="ignore"):
        want = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    for compiled in (True, False) if _backend.COMPILED else (False,):
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        out = np.empty(values.size, np.uint16)
        _decode.dequantize_bfloat16_into(name, blocks.reshape(-1), out)
        wide = [(b.astype(np.uint32) << 16).view(np.float32) for b in (out, want)]
        agree(*wide)
        nan = np.isnan(wide[1])
        assert set(out[nan].tolist()) <= {0x7FC0, 0xFFC0}  # the quiet NaN of its sign


@pytest.mark.skipif(
    not _backend.COMPILED,
    reason="the compiled kernels are not running (not built, or KILN_NP_PURE=1)",
)
@pytest.mark.parametrize("name", DECODED)
def test_compiled_is_numpy_bytes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact bytes on random blocks, across thread ranges."""
    block = BLOCKS[name]
    monkeypatch.setattr(_pool, "COMPILED_THREAD_MIN_LANES", 64)
    monkeypatch.setattr(_pool, "COMPILED_GRANULE", 32)
    count = 1031
    rng = np.random.default_rng(block.type_id)
    blocks = rng.integers(0, 256, count * block.bytes, np.uint8)
    compiled = np.empty(count * block.elements, np.float32)
    _decode.dequantize_into(name, blocks, compiled)
    want = numpy_values(name, blocks.reshape(count, block.bytes)).reshape(-1)
    # Exact bytes but where two NaNs meet in one operation (Q5_1's `q * d + m` with d and m
    # NaN): which operand's payload survives depends on the operand order numpy's loops
    # pick (numpy 2.0 and 2.4 differ), as it does in ggml's own arithmetic.
    agree(compiled, want)


@pytest.mark.skipif(not _backend.COMPILED, reason="the compiled kernels are not running")
def test_every_compiled_decoder_has_a_numpy_twin_of_its_size() -> None:
    from kiln_np._kernels import native

    by_id = {b.type_id: b for b in BLOCKS.values()}
    for type_id, elements, nbytes in native.ggml_types():
        block = by_id[type_id]
        assert (elements, nbytes) == (block.elements, block.bytes)
        assert block.name in _decode.DECODERS


# gguf-py 0.19 decodes every type but Q1_0, Q2_0 and Q8_K (and Q8_1, which ggml cannot).
GGUF_PY_DECODES = [n for n in DECODED if hasattr(gguf.quants, n)]


@pytest.mark.parametrize("name", GGUF_PY_DECODES)
def test_gguf_py_agrees(name: str) -> None:
    block = BLOCKS[name]
    blocks = np.random.default_rng(7).integers(0, 256, (257, block.bytes), np.uint8)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        want = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[name])
    agree(numpy_values(name, blocks), want.astype(np.float32))
