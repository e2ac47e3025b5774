"""IQ1_S and IQ1_M: the order of equal values (ggml's ``qsort`` on glibc keeps it), and
the compiled grid tables built once under concurrent first use.

ggml sorts each sub-block's values with ``qsort(..., iq1_sort_helper)``, which
compares values only: where values tie, the bytes depend on the order the C
library's sort leaves them in.  glibc 2.36 (llama.cpp's Linux builds, and the
libggml-base the golden vectors come from) sorts these small arrays with a
stable merge sort; kiln_np's numpy (``encode_iq1.sort_order``) and C (an
insertion sort) sorts are stable too.  These tests show ties change the bytes, so
that the golden vectors pin the stable order, and that both backends keep it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kiln_np._kernels import backend as _backend
from kiln_np._quants import encode_iq1
from kiln_np._quants import quantize as _quantize
from kiln_np._quants.blocks import BLOCKS

BACKENDS = (True, False) if _backend.COMPILED else (False,)
FIXTURES = Path(__file__).parents[1] / "fixtures" / "ggml"
GOLDEN = np.load(FIXTURES / "quantize_imatrix.npz")
PLAIN = np.load(FIXTURES / "quantize.npz")
CASES = [str(c) for c in PLAIN["cases"]]


def ties_last_first(x: np.ndarray) -> np.ndarray:
    """The order of an unstable sort that puts equal values in reverse."""
    index = np.broadcast_to(np.arange(x.shape[1]), x.shape)
    order: np.ndarray = np.lexsort((-index, x), axis=1)
    return order


def tied_blocks() -> tuple[np.ndarray, np.ndarray]:
    """Blocks of 1s and 2s with log-normal weights: a run boundary falls inside a tie."""
    rng = np.random.default_rng(39)
    x = rng.choice(np.array([1.0, 2.0], np.float32), (64, 256)).astype(np.float32)
    w = np.exp(rng.normal(0, 2, (64, 256))).astype(np.float32)
    return x, w


# Golden rows whose bytes depend on the order of ties (constant rows are all ties;
# "signed zeros and one value" ties -0.0 with 0.0).
TIED = (
    *("constant 1.0", "constant -70000.0", "integers in [-8, 7]", "e2m1 values"),
    "signed zeros and one value",
)


@pytest.mark.parametrize(("name", "weighted"), [("IQ1_S", True), ("IQ1_M", True), ("IQ1_M", False)])
def test_ties_change_the_bytes_and_ggml_keeps_their_order(
    name: str, weighted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = GOLDEN if weighted else PLAIN
    rows = [CASES.index(c) for c in TIED]
    x, want = golden["input"][rows], golden[name][rows]

    def encode() -> np.ndarray:
        with np.errstate(all="ignore"):
            if weighted:
                return encode_iq1.WEIGHTED[name](x, golden["weights"][rows])
            return encode_iq1.ENCODERS[name](x)

    assert np.array_equal(encode(), want)  # the stable order: ggml's bytes
    monkeypatch.setattr(encode_iq1, "sort_order", ties_last_first)
    assert not np.array_equal(encode(), want)  # ties in another order: other bytes


@pytest.mark.parametrize("name", ["IQ1_S", "IQ1_M"])
def test_both_backends_keep_ties_in_order(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    block = BLOCKS[name]
    x, w = tied_blocks()
    with np.errstate(all="ignore"):
        stable = encode_iq1.WEIGHTED[name](x, w)
        monkeypatch.setattr(encode_iq1, "sort_order", ties_last_first)
        reversed_ties = encode_iq1.WEIGHTED[name](x, w)
    differ = (stable != reversed_ties).any(axis=1)
    assert differ.sum() > 32  # most of these blocks depend on the order of their ties
    monkeypatch.undo()
    for compiled in BACKENDS:
        monkeypatch.setattr(_backend, "COMPILED", compiled)
        for r in range(len(x)):
            out = np.zeros(block.bytes, np.uint8)
            assert _quantize.quantize_into(name, x[r], out, w[r]) == -1
            assert out.tolist() == stable[r].tolist(), f"block {r}"


@pytest.mark.skipif(not _backend.COMPILED, reason="the compiled kernels are not running")
def test_the_compiled_tables_are_built_once_under_concurrent_first_use() -> None:
    """Four threads start IQ1_S, IQ1_M, IQ2_XS and IQ2_S at once in a fresh process (the
    tables of three grids built while the others wait or build theirs): the bytes are
    those of a second, sequential run."""
    script = """
import threading, numpy as np
from kiln_np._quants.quantize import quantize_into
from kiln_np._quants.blocks import BLOCKS
rng = np.random.default_rng(1)
x = rng.standard_normal(256 * 1024).astype(np.float32)  # the GIL released
w = np.exp(rng.normal(0, 2, 256)).astype(np.float32)
names = ["IQ1_S", "IQ1_M", "IQ2_XS", "IQ2_S"]
def run(name):
    out = np.zeros(1024 * BLOCKS[name].bytes, np.uint8)
    assert quantize_into(name, x, out, w) == -1
    return out
results = {}
threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, run(n))) for n in names]
for t in threads: t.start()
for t in threads: t.join()
assert all((results[n] == run(n)).all() for n in names), "concurrent first use differs"
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
