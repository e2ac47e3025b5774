"""float32 to bfloat16 bits and back without ml_dtypes (``kiln_np._kernels.bfloat16``):
ml_dtypes' own bits, on both backends and across thread ranges."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from kiln_np._kernels import backend, pool
from kiln_np._kernels.bfloat16 import round_bfloat16_into, widen_bfloat16_into

SPECIAL = np.array(
    [
        0x00000000, 0x80000000, 0x00000001, 0x00008000, 0x00018000, 0x007FFFFF,  # zeros, subnormals
        0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001,  # ties to even, either side of them
        0x7F7FFFFF, 0x7F7F8000, 0xFF7FFFFF,  # the largest floats: past bfloat16's, infinity
        0x7F800000, 0xFF800000,  # infinities
        0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFC12345,  # NaNs, both signs
    ],
    np.uint32,
)  # fmt: skip


def _ml_dtypes(src: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return src.astype(ml_dtypes.bfloat16).view(np.uint16)


@pytest.mark.parametrize("compiled", [True, False])
def test_rounding_is_ml_dtypes(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if compiled and not backend.COMPILED:
        pytest.skip("the compiled kernels are not running (not built, or KILN_NP_PURE=1)")
    monkeypatch.setattr(backend, "COMPILED", compiled)
    monkeypatch.setattr(pool, "COMPILED_THREAD_MIN_LANES", 64)  # several thread ranges
    rng = np.random.default_rng(5)
    bits = np.concatenate([SPECIAL, rng.integers(0, 2**32, 100_003, np.uint64).astype(np.uint32)])
    src = bits.view(np.float32)
    out = np.zeros(src.size, np.uint16)
    round_bfloat16_into(out, src)
    assert out.view(np.uint8).tobytes() == _ml_dtypes(src).view(np.uint8).tobytes()
    assert [hex(b) for b in out[len(SPECIAL) - 5 : len(SPECIAL)]] == [
        "0x7fc0", "0x7fc0", "0x7fc0", "0xffc0", "0xffc0",
    ]  # fmt: skip


def test_widening_is_ml_dtypes_for_every_bit_pattern() -> None:
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = np.empty(bits.size, np.float32)
    widen_bfloat16_into(out, bits)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    assert out.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()


def test_the_rounding_alone_never_imports_ml_dtypes() -> None:
    code = (
        "import sys, numpy as np\n"
        "from kiln_np._kernels import backend\n"
        "from kiln_np._kernels.bfloat16 import round_bfloat16_into\n"
        "out = np.empty(3, np.uint16)\n"
        "round_bfloat16_into(out, np.float32([1, 2, 3]))\n"
        "print(backend.COMPILED, 'ml_dtypes' in sys.modules, out.tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    compiled = backend.COMPILED
    # the numpy twin is ml_dtypes' own cast, so it imports it
    assert done.stdout.split("\n")[0] == f"{compiled} {not compiled} [16256, 16384, 16448]"
