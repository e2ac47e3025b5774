"""``kiln_np.gguf.dequantize``: GGUF files' quantized tensors as llama.cpp's numbers.

The bits per block are checked in tests/quants/test_ggml.py (ggml's golden vectors);
here: the public entry on files gguf-py wrote, shapes, output dtypes, and the places
where llama.cpp's reading of MXFP4/NVFP4 differs from OCP's (``kiln_np.mx``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import pytest
from _helpers import gguf_py_file, needs, optional

import kiln_np
from kiln_np import KilnError, Layout, Payload, mx
from kiln_np import gguf as kg
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import DECODERS
from kiln_np._quants.quantize import (
    ENCODERS,
    IGNORES_IMATRIX,
    NEEDS_IMATRIX,
    WEIGHTED_KERNELS,
)

if TYPE_CHECKING:
    import gguf
    import gguf.quants
else:
    gguf = optional("gguf", "quants")

# The types gguf-py 0.19 can quantize (so write a file of): its own oracle blocks.
GGUF_PY_QUANTIZES = [n for n in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4")
                     if n in DECODERS]  # fmt: skip


def payload(name: str, blocks: np.ndarray, shape: tuple[int, ...] | None = None) -> Payload:
    block = BLOCKS[name]
    raw = np.ascontiguousarray(blocks, np.uint8).reshape(-1)
    count = raw.size // block.bytes
    return Payload(block.code, raw.data, shape or (count,), Layout(block.layout_name, block.bytes))


@pytest.mark.parametrize("name", GGUF_PY_QUANTIZES)
def test_files_gguf_py_wrote(tmp_path: Path, name: str) -> None:
    rng = np.random.default_rng(BLOCKS[name].type_id)
    x = rng.standard_normal((3, 4, 2 * BLOCKS[name].elements)).astype(np.float32)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.__members__[name])
    path = tmp_path / "m.gguf"
    gguf_py_file(path, {"w": (q, gguf.GGMLQuantizationType.__members__[name])})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.__members__[name]).astype(
            np.float32
        )
    with kiln_np.open_weights(path) as weights:
        got = kg.dequantize(weights["w"])
        assert got.shape == want.shape == x.shape
        assert got.dtype == np.float32
        assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
        assert kg.dequantize(weights["w"].payload()).tobytes() == got.tobytes()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_dtypes_round_ggmls_float32_once(dtype: str) -> None:
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, (5000, 34), np.uint8)
    p = payload("Q8_0", blocks, (50, 100))
    f32 = kg.dequantize(p)
    assert f32.shape == (50, 3200)
    got = kg.dequantize(p, dtype=dtype)
    with np.errstate(over="ignore"):
        want = f32.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    assert got.dtype.name == dtype
    assert got.shape == f32.shape
    assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()


@needs("onnx")
def test_dtype_none_is_the_float32_default() -> None:
    """dtype=None is the documented default, float32 (ggml's own bits), not numpy's
    float64 (issue 36): for a payload, a weight tensor, and mx.dequantize alike."""
    rng = np.random.default_rng(5)
    p = payload("Q8_0", rng.integers(0, 256, (4, 34), np.uint8), (2, 2))
    got = kg.dequantize(p, dtype=None)
    assert got.dtype == np.float32
    assert got.tobytes() == kg.dequantize(p).tobytes()
    values = np.array([0.5, 1, -6, 3], ml_dtypes.float4_e2m1fn)
    scales = np.array([2.0**-3, 4.0], ml_dtypes.float8_e8m0fnu)
    none = mx.dequantize(values, scales, block_size=2, dtype=None)
    assert none.dtype == np.float32
    assert none.tolist() == mx.dequantize(values, scales, block_size=2).tolist()
    x, s = mx.to_onnx(values.reshape(1, 4), scales.reshape(1, 2))
    assert mx.dequantize_onnx(x, s, block_size=2, dtype=None).dtype == np.float32


def test_shapes_and_empty() -> None:
    assert kg.dequantize(payload("Q8_0", np.zeros((0, 34)), (4, 0))).shape == (4, 0)
    one = payload("Q8_0", np.zeros((1, 34)), ())  # a 0-d payload is one block
    assert kg.dequantize(one).shape == (32,)


def test_refuses_what_is_not_ggml_blocks() -> None:
    with pytest.raises(KilnError, match="GGML quantized payload"):
        kg.dequantize(kiln_np.from_numpy(np.zeros(4, np.float16)))
    with pytest.raises(KilnError, match="weight tensor"):
        kg.dequantize(b"\x00" * 34)
    with pytest.raises(KilnError, match="dequantize dtype"):
        kg.dequantize(payload("Q8_0", np.zeros((1, 34))), dtype=np.int32)
    with pytest.raises(KilnError, match="short by 1"):
        kg.dequantize(Payload(0x4708, memoryview(bytes(33)), (1,), Layout("ggml.q8_0", 34)))


# -- llama.cpp's MXFP4/NVFP4 and OCP's --------------------------------------------------


def mxfp4(scale: int, element_byte: int) -> Payload:
    return payload("MXFP4", np.array([[scale] + [element_byte] * 16], np.uint8))


def test_mxfp4_scale_0xff_is_finite_for_ggml_nan_for_ocp() -> None:
    p = mxfp4(0xFF, 0x11)  # every element 0.5
    assert (kg.dequantize(p, dtype=np.float64) == 0.5 * 2.0**128).all()  # f64 of inf: inf
    assert np.isnan(mx.dequantize(*mx.from_ggml(p))).all()


def test_mxfp4_minus_zero_is_plus_zero_for_ggml() -> None:
    p = mxfp4(127, 0x88)
    assert kg.dequantize(p).view(np.uint32).tolist() == [0] * 32
    assert mx.dequantize(*mx.from_ggml(p)).view(np.uint32).tolist() == [0x80000000] * 32


def test_mxfp4_overflow_is_inf_for_ggml_an_error_for_ocp() -> None:
    p = mxfp4(0xFE, 0x77)  # 6.0 x 2**127
    assert np.isposinf(kg.dequantize(p)).all()
    with pytest.raises(KilnError, match="float32 cannot hold"):
        mx.dequantize(*mx.from_ggml(p))


def test_nvfp4_scales_ggml_reads_unsigned_0x7f_as_zero() -> None:
    block = np.array([[0x38, 0xB8, 0x7F, 0xFF] + [0x22] * 32], np.uint8)  # elements 1.0
    p = payload("NVFP4", block)
    ggml = kg.dequantize(p).reshape(4, 16)
    assert (ggml[0] == ggml[1]).all()  # the sign bit ignored
    assert (ggml[0] > 0).all()
    assert ggml[2].view(np.uint32).tolist() == [0] * 16  # 0x7f is 0
    assert (ggml[3] == 480.0).all()  # 0xff: the sign ignored, 0x7f's bits read as 480
    ocp = mx.dequantize(*mx.from_ggml(p)).reshape(4, 16)
    assert (ocp[1] == -ocp[0]).all()
    assert np.isnan(ocp[2:]).all()


# -- the table of types in docs/weights.md ------------------------------------------------

DOCS = Path(__file__).parents[2] / "docs" / "weights.md"
GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "dequantize.npz")


def expected_row(name: str) -> list[str]:
    block = BLOCKS[name]
    golden = f"{name}.values" in GOLDEN.files
    reference = (
        f"ggml `dequantize_row_{name.lower().replace('_k', '_K')}`"
        if golden
        else f"ggml's `block_{name.lower()}` (ggml has no decoder)"
    )
    oracles = ["ggml's output" if golden else "blocks made by hand"]
    if hasattr(gguf.quants, name):
        oracles.append("gguf-py")
    return [str(block.type_id), name, f"{block.elements} / {block.bytes}", reference,
            ", ".join(oracles), quantize_reference(name)]  # fmt: skip


def quantize_reference(name: str) -> str:
    """The docs table's "quantize" cell: ggml's function kiln_np writes the bytes of,
    and what it does with an importance matrix: takes one (and the function whose
    bytes it then writes), needs one or ignores it."""
    lower = name.lower().replace("_k", "_K")
    if name in NEEDS_IMATRIX:
        assert name in WEIGHTED_KERNELS
        return f"ggml `quantize_{lower}`; needs an imatrix (`quantize_row_{lower}_impl`)"
    if name == "IQ4_NL":  # its _ref tries no scales; the chunk quantizer seven
        cell = "ggml `ggml_quantize_chunk` (`quantize_iq4_nl`, not its `_ref`)"
    elif name == "IQ1_M":  # ggml has no quantize_row_iq1_m_ref
        cell = "ggml `ggml_quantize_chunk` (`quantize_iq1_m`)"
    elif name in ENCODERS:
        cell = f"ggml `quantize_row_{lower}_ref`"
    else:
        return "TYPE: ggml never stores it"
    if name in WEIGHTED_KERNELS:  # IQ4_XS's quantizer is IQ4_NL's with 8 sub-blocks
        impl = "quantize_row_iq4_nl_impl" if name == "IQ4_XS" else f"quantize_row_{lower}_impl"
        return f"{cell}; takes an imatrix (`{impl}`)"
    if name in IGNORES_IMATRIX:
        return f"{cell}; ignores an imatrix"
    return cell


def test_docs_table_of_decoded_types() -> None:
    text = DOCS.read_text()
    body = text.split("<!-- ggml-decode")[1].split("<!-- /ggml-decode -->")[0]
    rows = [line.strip("|").split("|") for line in body.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in row] for row in rows[2:]]  # past the header and | --- |
    assert [row[:6] for row in cells] == [expected_row(name) for name in BLOCKS]
    assert sorted(DECODERS) == sorted(BLOCKS)  # every GGML block type decodes
