"""LogicalTensor.rows_of checks a caller's g_idx (issue 36): out of range, the
compiled kernel raised a raw ValueError and the numpy kernel silently wrapped -1
to the last group.  Both backends now refuse it the same way, TYPE naming the
tensor, before either runs."""

from __future__ import annotations

import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError, WeightTensor
from kiln_np._kernels import backend
from kiln_np._weights.logical import LogicalTensor, logical_tensors

N_IN, OUT, GROUPS = 16, 8, 2
DESC_ACT = np.array([1, 0] * (N_IN // 2), np.int32)  # not column // group: g_idx is read


def _part(name: str, a: np.ndarray, code: str) -> WeightTensor:
    info = kiln_np.payload_info(code, a.shape)
    return WeightTensor(name, info, None, code.upper(), data=memoryview(a.tobytes()))


def _gptq() -> tuple[LogicalTensor, dict[str, np.ndarray]]:
    rng = np.random.default_rng(36)
    arrays: dict[str, np.ndarray] = {
        "qweight": rng.integers(-(2**31), 2**31, (N_IN // 8, OUT), dtype=np.int32),
        "qzeros": rng.integers(-(2**31), 2**31, (GROUPS, OUT // 8), dtype=np.int32),
        "scales": rng.uniform(0.5, 2, (GROUPS, OUT)).astype(np.float16),
        "g_idx": DESC_ACT,
    }
    codes = {"qweight": "i32", "qzeros": "i32", "scales": "f16", "g_idx": "i32"}
    parts = {f"m.{role}": _part(f"m.{role}", a, codes[role]) for role, a in arrays.items()}
    (t,) = logical_tensors(parts, {"quant_method": "gptq", "bits": 4})
    assert isinstance(t, LogicalTensor)
    assert t.plan.params["group"] == 0
    return t, arrays


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "compiled" and not backend.BUILT:
        pytest.skip("the compiled extension is not built")
    monkeypatch.setattr(backend, "COMPILED", request.param == "compiled")


@pytest.mark.parametrize(
    ("at", "value"), [(0, -1), (5, GROUPS), (N_IN - 1, 2**31 - 1), (3, -(2**31))]
)
def test_a_group_outside_scales_is_type_naming_the_tensor(
    kernels: None, at: int, value: int
) -> None:
    t, arrays = _gptq()
    good = t.rows_of(arrays, 0, OUT, "float32")
    np.testing.assert_array_equal(good, t.numpy().astype(np.float32))
    bad = DESC_ACT.copy()
    bad[at] = value
    for r0, r1 in ((0, OUT), (2, 3)):
        with pytest.raises(KilnError) as e:
            t.rows_of({**arrays, "g_idx": bad}, r0, r1, "float32")
        assert e.value.kind == "TYPE"
        assert str(e.value) == (
            f"TYPE: tensor 'm.weight': expected g_idx values in [0, {GROUPS}) (the groups "
            f"of scales), found {value} at {at}"
        )
