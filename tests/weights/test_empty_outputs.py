"""Empty tensors whose other dimensions numpy cannot hold at the output's item size
(issue 36): every door that makes an array of another shape or dtype than the
payload's checks the output shape first, as ``payload_info`` checks the block
shape (SHAPE naming the tensor), never numpy's ValueError; and an empty matrix
of many rows is no pass over its rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kiln_np
import kiln_np.gguf as kg
from kiln_np import KilnError, Layout, Payload, WeightTensor
from kiln_np._kernels import backend
from kiln_np._weights.logical import LogicalTensor, logical_tensors

Q4_0 = Layout("ggml.q4_0", 18)


def _empty(name: str, code: Any, shape: tuple[int, ...], layout: Layout | None = None) -> Any:
    info = kiln_np.payload_info(code, shape, layout)
    return WeightTensor(name, info, None, name, data=memoryview(b""))


def _logical(parts: dict[str, WeightTensor], config: dict[str, Any]) -> LogicalTensor:
    (t,) = logical_tensors(parts, config)
    assert isinstance(t, LogicalTensor)
    return t


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "compiled" and not backend.BUILT:
        pytest.skip("the compiled extension is not built")
    monkeypatch.setattr(backend, "COMPILED", request.param == "compiled")


def _shape_error(ask: Any, *words: str) -> None:
    with pytest.raises(KilnError, match="expected an array numpy can represent") as e:
        ask()
    assert e.value.kind == "SHAPE"
    for word in words:
        assert word in str(e.value)


@pytest.mark.parametrize("dtype", [None, "float32", "float16", "float64"])
def test_gguf_dequantize_checks_the_output_shape(dtype: str | None) -> None:
    # (0, 2**58) Q4_0 blocks are 2**62 bytes of blocks (representable), 2**63 elements
    p = Payload(0x4702, memoryview(b""), (0, 2**58), Q4_0)
    _shape_error(lambda: kg.dequantize(p, dtype=dtype), "GGML Q4_0 blocks (0, 288230376151711744)")


def test_a_ggml_weight_tensor_checks_its_values_shape() -> None:
    t = _empty("e", 0x4702, (0, 2**58), Q4_0)
    assert t.shape == (0, 2**63)  # its element shape: a fact, not an array
    _shape_error(t.numpy, "tensor 'e': ")
    _shape_error(lambda: np.asarray(t, np.float16), "tensor 'e': ")
    small = _empty("s", 0x4702, (0, 2**40), Q4_0)  # one that fits reads
    assert small.numpy().shape == (0, 2**45)


def test_a_conversion_to_a_wider_dtype_checks_its_shape() -> None:
    t = _empty("h", "f16", (0, 2**61))  # 2**62 bytes as float16: representable
    assert t.numpy().shape == (0, 2**61)
    _shape_error(lambda: np.asarray(t, np.float64), "tensor 'h' as float64: ")


def test_logical_tensors_check_their_values_shape(kernels: None) -> None:
    fp8 = _logical(
        {
            "q.weight": _empty("q.weight", "f8e4m3", (0, 2**62)),
            "q.weight_scale_inv": _empty("q.weight_scale_inv", "f32", (0, 2**55)),
        },
        {},
    )
    _shape_error(fp8.numpy, "tensor 'q.weight' as float32: ")
    _shape_error(lambda: fp8.dequantize("bfloat16"), "tensor 'q.weight' as bfloat16: ")
    _shape_error(lambda: fp8.rows(0, 0, "float16"), "tensor 'q.weight' as float16: ")
    _shape_error(lambda: np.asarray(fp8, np.float64), "tensor 'q.weight' as float64: ")
    mx = _logical(
        {
            "x_blocks": _empty("x_blocks", "u8", (0, 2**58, 16)),
            "x_scales": _empty("x_scales", "u8", (0, 2**58)),
        },
        {"quant_method": "mxfp4"},
    )
    _shape_error(mx.numpy, "tensor 'x' as bfloat16: ")


def test_an_empty_matrix_of_many_rows_is_no_pass_over_them(kernels: None) -> None:
    """(2**41, 0) FP8 codes: the kernels walked 2**41 empty rows (hours)."""
    fp8 = _logical(
        {
            "q.weight": _empty("q.weight", "f8e4m3", (2**41, 0)),
            "q.weight_scale_inv": _empty("q.weight_scale_inv", "f32", (2**34, 0)),
        },
        {},
    )
    assert fp8.numpy().shape == (2**41, 0)
